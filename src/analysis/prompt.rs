//! The request sent to a language model: OpenAI's chat-completions body with a fixed system
//! message and one user message holding the incident's facts as JSON — the same facts as the
//! rule-based analysis (the alert, evidence, changes, the incident's GPUs, related alerts,
//! XIDs with the catalogue's words, the rule-based causes and what is unknown), never raw
//! history.
//!
//! Invariants: the facts part is at most `max_prompt_bytes` (lists are shortened, then the
//! text is cut, and the prompt says so); the whole body is redacted ([`super::redact`])
//! after it is built, so nothing unredacted is stored or sent.

use serde_json::{Value, json};

use super::Analysis;
use crate::config::analysis::AnalysisConfig;
use crate::store::incident::AlertRow;

/// The system message: what the model is asked for.
pub const SYSTEM: &str = "You are an SRE assistant for GPU training clusters. You are given the \
facts gpuwatch recorded about one alert (JSON). Reply in at most 12 short lines: 1) the most \
likely cause, as a hypothesis; 2) the facts from the input it relies on (quote their values); \
3) the next steps, most useful first. Use only the facts given; if they do not support a \
conclusion, say what is missing. Do not invent values.";

/// The facts of the user message, before the size cap.
pub fn facts_json(alert: &AlertRow, a: &Analysis) -> Value {
    json!({
        "alert": {
            "id": alert.alert_id,
            "rule": alert.rule,
            "severity": alert.severity,
            "state": alert.state,
            "host": alert.host,
            "gpu": alert.gpu_index,
            "process": alert.process_name,
            "summary": alert.summary,
            "started_ms": alert.active_since_ms,
            "fired_ms": alert.fired_ms,
            "resolved_ms": alert.resolved_ms,
        },
        "evidence": a.evidence,
        "changes": a.changes,
        "incident": {"summary": a.incident_summary, "gpus": a.incident},
        "related_alerts": a.related,
        "xids": a.xids,
        "gpu_health_now": a.health,
        "rule_based_causes": a.causes.iter().map(|c| json!({
            "cause": c.cause, "confidence": c.confidence, "because": c.because,
        })).collect::<Vec<_>>(),
        "unknown": a.unknown,
    })
}

/// Shortens the lists of `facts` until it serialises to at most `max` bytes; as a last
/// resort cuts the text and marks it.
pub fn capped(mut facts: Value, max: usize) -> String {
    let fits = |v: &Value| serde_json::to_string(v).map_or(0, |s| s.len()) <= max;
    for key in ["related_alerts", "changes", "evidence", "xids"] {
        while !fits(&facts) {
            let Some(list) = facts.get_mut(key).and_then(Value::as_array_mut) else {
                break;
            };
            if list.pop().is_none() {
                break;
            }
            facts["truncated"] = json!(true);
        }
    }
    let text = serde_json::to_string(&facts).unwrap_or_default();
    if text.len() <= max {
        return text;
    }
    let mut cut = max.saturating_sub(20);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{} …[truncated]", &text[..cut])
}

/// The request body, redacted: `secrets` (the API key) and the configured patterns removed.
pub fn request_body(
    cfg: &AnalysisConfig,
    alert: &AlertRow,
    a: &Analysis,
    secrets: &[&str],
) -> String {
    let facts = capped(facts_json(alert, a), cfg.max_prompt_bytes);
    let body = json!({
        "model": cfg.model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": format!("Alert facts recorded by gpuwatch:\n{facts}")},
        ],
        "max_tokens": cfg.max_tokens,
        "temperature": 0,
        "stream": cfg.stream,
    });
    let text = serde_json::to_string_pretty(&body).unwrap_or_default();
    super::redact::redact(&text, &cfg.redact, secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_capped_lists_first_then_cut() {
        let facts = json!({
            "alert": {"rule": "training_hang"},
            "changes": (0..200).map(|i| json!({"text": format!("change {i}")})).collect::<Vec<_>>(),
            "related_alerts": (0..200).map(|i| json!({"alert_id": i})).collect::<Vec<_>>(),
            "evidence": [], "xids": [],
        });
        let t = capped(facts.clone(), 2000);
        assert!(t.len() <= 2000, "{}", t.len());
        let v: Value = serde_json::from_str(&t).expect("still JSON when lists suffice");
        assert_eq!(v["truncated"], true);
        assert_eq!(v["alert"]["rule"], "training_hang");
        assert!(v["related_alerts"].as_array().expect("list").is_empty());
        // Small enough: unchanged.
        let small = json!({"alert": {"rule": "x"}});
        assert_eq!(capped(small.clone(), 2000), small.to_string());
        // Nothing left to shorten: cut and marked.
        let huge = json!({"alert": {"summary": "é".repeat(3000)}});
        let t = capped(huge, 1024);
        assert!(
            t.len() <= 1024 && t.ends_with("…[truncated]"),
            "{}",
            t.len()
        );
    }
}
