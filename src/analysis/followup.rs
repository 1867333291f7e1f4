//! The follow-up message (`[analysis] attach_to = ["slack"]`): after the sender delivered a
//! firing alert to a Slack receiver, a thread of its own asks the language model about the
//! alert and posts the answer to the same webhook, marked as machine-written.
//!
//! Invariants: started only after the alert's message was accepted; runs on its own thread,
//! never on the sender's, so a slow, hanging or failing model delays and blocks no delivery;
//! at most [`MAX_IN_FLIGHT`] at once (more are skipped and logged); the request is stored
//! like `--explain`'s (`--show-prompt` shows it); a failure is one log line and no message.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::SecretSource;
use crate::config::analysis::AnalysisConfig;
use crate::secret;
use crate::store::analysis as sa;

/// The incident analysis delivery uses (`notify::sender::Analyst`): every message's analysis
/// line, and a follow-up for each firing alert a Slack receiver accepted when `[analysis]
/// attach_to` names Slack.
pub struct Analyst {
    db: PathBuf,
    /// `[analysis]`, when it attaches follow-ups to Slack receivers.
    follow_ups: Option<AnalysisConfig>,
}

impl Analyst {
    pub fn new(db: PathBuf, config: Option<AnalysisConfig>) -> Self {
        Self {
            db,
            follow_ups: config.filter(|a| a.attach_to.iter().any(|k| k == "slack")),
        }
    }
}

impl crate::notify::sender::Analyst for Analyst {
    fn message_line(&self, conn: &rusqlite::Connection, alert_id: i64) -> Option<String> {
        super::message_line(conn, alert_id)
    }

    fn follow_up(
        &self,
        alert_id: i64,
        webhook: &SecretSource,
        receiver: &str,
        post_timeout: std::time::Duration,
    ) {
        if let Some(config) = &self.follow_ups {
            spawn(FollowUp {
                db: self.db.clone(),
                config: config.clone(),
                alert_id,
                webhook: webhook.clone(),
                receiver: receiver.to_string(),
                post_timeout,
            });
        }
    }
}

/// Follow-ups running at once, at most.
pub const MAX_IN_FLIGHT: usize = 4;

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// One follow-up to send.
#[derive(Debug, Clone)]
pub struct FollowUp {
    pub db: PathBuf,
    pub config: AnalysisConfig,
    pub alert_id: i64,
    /// The Slack receiver's webhook (read when the answer is posted).
    pub webhook: SecretSource,
    pub receiver: String,
    /// The receiver's request timeout.
    pub post_timeout: std::time::Duration,
}

/// Starts `f` on its own thread; returns at once. `false` when it was skipped (too many in
/// flight, or no thread could be started).
pub fn spawn(f: FollowUp) -> bool {
    if IN_FLIGHT.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!(
            alert = f.alert_id,
            "analysis follow-up skipped: {MAX_IN_FLIGHT} already running"
        );
        return false;
    }
    let started = std::thread::Builder::new()
        .name("gpuwatch-analysis".into())
        .spawn(move || {
            let id = f.alert_id;
            match run(&f) {
                Ok(()) => tracing::info!(alert = id, receiver = %f.receiver, "analysis follow-up posted"),
                Err(e) => tracing::warn!(alert = id, receiver = %f.receiver, "analysis follow-up not posted: {}", secret::scrub(&e)),
            }
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        });
    if started.is_err() {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        return false;
    }
    true
}

fn run(f: &FollowUp) -> Result<(), String> {
    let conn = crate::store::open_existing_rw(&f.db).map_err(|e| e.to_string())?;
    let alert = crate::store::incident::alert(&conn, f.alert_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("alert {} is not in the database", f.alert_id))?;
    let facts =
        super::Facts::gather(&conn, &alert, super::MESSAGE_WINDOW_MS).map_err(|e| e.to_string())?;
    let analysis = super::analyse(&facts);
    let key = super::llm::api_key(&f.config).map_err(|e| e.to_string())?;
    let key_text: Vec<String> = key.iter().map(|k| k.expose().to_string()).collect();
    let secrets: Vec<&str> = key_text.iter().map(String::as_str).collect();
    let body = super::prompt::request_body(&f.config, &alert, &analysis, &secrets);
    super::redact::check_clean(&body, &secrets)?;
    let endpoint = super::llm::endpoint(&f.config);
    let now = crate::clock::now_ms();
    let req = sa::insert_request(
        &conn,
        alert.alert_id,
        now,
        &endpoint,
        &f.config.model,
        &body,
    )
    .map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let deadline = f.config.timeout + std::time::Duration::from_secs(1);
    let answer = rt
        .block_on(async {
            tokio::time::timeout(
                deadline,
                super::llm::complete(&f.config, key.as_ref(), body),
            )
            .await
            .unwrap_or(Err(super::llm::LlmError::Timeout(f.config.timeout)))
        })
        .map_err(|e| e.to_string());
    let outcome = answer.as_deref().map_err(String::as_str);
    sa::finish_request(&conn, req, crate::clock::now_ms(), outcome).map_err(|e| e.to_string())?;
    let answer = answer?;
    let gpu = alert
        .gpu_index
        .map_or(String::new(), |g| format!(", GPU {g}"));
    let text = format!(
        ":robot_face: *Machine-written explanation* of alert {} ({}{gpu} on {}) by model `{}` — a hypothesis from the rule-based facts, not verified; `gpuwatch incident {} --show-prompt` shows what it was given:\n{}",
        alert.alert_id,
        crate::notify::slack::blocks::esc(&alert.rule),
        crate::notify::slack::blocks::esc(&alert.host),
        crate::notify::slack::blocks::esc(&f.config.model),
        alert.alert_id,
        crate::notify::slack::blocks::fit(&crate::notify::slack::blocks::esc(&answer), 3000),
    );
    // The receivers' own Slack post: their client policy and Slack's verdict on the answer.
    rt.block_on(crate::notify::slack::post_text(
        &f.webhook,
        f.post_timeout,
        &text,
    ))
    .map_err(|e| format!("Slack did not take the follow-up: {e}"))?;
    Ok(())
}
