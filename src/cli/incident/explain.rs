//! `gpuwatch incident ID --explain` and `--show-prompt`: the language model's explanation of
//! an incident, beside the rule-based analysis, and the audit of what was sent.
//!
//! Invariants: the request is stored (redacted, exactly as sent) before it leaves, and
//! completed with the answer or the failure; any failure of the model (down, 429, 5xx,
//! timeout, garbage) is one note line and never fails the command — the incident and its
//! rule-based analysis are printed whatever happens. The answer is always marked as
//! machine-written.

use anyhow::anyhow;
use rusqlite::Connection;
use serde_json::{Value, json};

use super::super::{Failure, exit, fail};
use super::Format;
use crate::analysis::{Analysis, llm, prompt, redact};
use crate::config::Config;
use crate::store::{self, analysis as sa, incident::AlertRow};
use crate::views::alerts::rfc3339;

/// What `--explain` got.
pub struct Explanation {
    pub model: String,
    pub endpoint: String,
    pub outcome: Result<String, String>,
}

impl Explanation {
    pub fn text(&self) -> String {
        match &self.outcome {
            Ok(a) => {
                let mut o = format!(
                    "\nMachine-written explanation (model {} at {}; a hypothesis from the facts above, not verified — `--show-prompt` shows what it was given):\n",
                    self.model, self.endpoint
                );
                for l in a.lines() {
                    o.push_str(&format!("  | {l}\n"));
                }
                o
            }
            Err(e) => format!(
                "\nnote: no machine-written explanation: {e}; the rule-based analysis above stands\n"
            ),
        }
    }

    pub fn json(&self) -> Value {
        match &self.outcome {
            Ok(a) => {
                json!({"machine_written": true, "model": self.model, "endpoint": self.endpoint, "answer": a, "error": null})
            }
            Err(e) => {
                json!({"machine_written": true, "model": self.model, "endpoint": self.endpoint, "answer": null, "error": e})
            }
        }
    }
}

/// Asks the configured model about `alert`; stores the request and its outcome.
pub fn explain(cfg: &Config, alert: &AlertRow, a: &Analysis) -> Result<Explanation, Failure> {
    let Some(ac) = &cfg.analysis else {
        return Err(fail(
            exit::USAGE,
            anyhow!(
                "--explain needs an [analysis] section in the config (url, model; see docs/ANALYSIS.md)"
            ),
        ));
    };
    let endpoint = llm::endpoint(ac);
    let key = llm::api_key(ac);
    let key_text: Vec<String> = match &key {
        Ok(Some(k)) => vec![k.expose().to_string()],
        _ => Vec::new(),
    };
    let secrets: Vec<&str> = key_text.iter().map(String::as_str).collect();
    let body = prompt::request_body(ac, alert, a, &secrets);
    // The database is at this binary's schema (the read-only open before checked it): a
    // second connection, nothing created or registered.
    let conn = store::open_existing_rw(&cfg.database)?;
    let now = crate::clock::now_ms();
    let outcome = match (key, redact::check_clean(&body, &secrets)) {
        (Err(e), _) => Err(e.to_string()),
        (_, Err(e)) => Err(e),
        (Ok(k), Ok(())) => {
            let id = sa::insert_request(&conn, alert.alert_id, now, &endpoint, &ac.model, &body)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| fail(exit::FAILURE, anyhow!("cannot start the HTTP runtime: {e}")))?;
            let deadline = ac.timeout + std::time::Duration::from_secs(1);
            let r = rt.block_on(async {
                tokio::time::timeout(deadline, llm::complete(ac, k.as_ref(), body.clone()))
                    .await
                    .unwrap_or(Err(llm::LlmError::Timeout(ac.timeout)))
            });
            let r = r.map_err(|e| e.to_string());
            sa::finish_request(
                &conn,
                id,
                crate::clock::now_ms(),
                r.as_deref().map(|s| s as &str).map_err(|e| e as &str),
            )?;
            r
        }
    };
    Ok(Explanation {
        model: ac.model.clone(),
        endpoint,
        outcome,
    })
}

/// The stored request about `alert_id` (and its outcome).
pub fn show_prompt(conn: &Connection, alert_id: i64, format: Format) -> Result<String, Failure> {
    let Some(r) = sa::latest_request(conn, alert_id)? else {
        return Err(fail(
            exit::USAGE,
            anyhow!(
                "no request to a language model is stored for alert {alert_id}; `gpuwatch incident {alert_id} --explain` sends one"
            ),
        ));
    };
    Ok(match format {
        Format::Json => {
            let body: Value = serde_json::from_str(&r.request_json)
                .unwrap_or(Value::String(r.request_json.clone()));
            serde_json::to_string_pretty(&json!({
                "alert_id": r.alert_id, "created": rfc3339(r.created_ms), "created_ms": r.created_ms,
                "endpoint": r.endpoint, "model": r.model, "status": r.status,
                "request": body, "answer": r.answer, "error": r.error,
                "done": r.done_ms.map(rfc3339),
            }))
            .map_err(|e| fail(exit::FAILURE, e))?
                + "\n"
        }
        Format::Table => {
            let mut o = format!(
                "request sent {} to {} (model {}), status {}:\n{}\n",
                rfc3339(r.created_ms),
                r.endpoint,
                r.model,
                r.status,
                r.request_json
            );
            match (&r.answer, &r.error) {
                (Some(a), _) => o.push_str(&format!("\nanswer (machine-written):\n{a}\n")),
                (_, Some(e)) => o.push_str(&format!("\nfailed: {e}\n")),
                _ => o.push_str("\nno answer recorded\n"),
            }
            o
        }
    })
}
