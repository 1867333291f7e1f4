//! The webhook's JSON body, schema version `"1"` (documented in docs/WEBHOOK.md), modelled on
//! Alertmanager's webhook payload.
//!
//! Invariants: the schema only grows within a version (new fields may appear, none changes
//! meaning or type, none disappears); times are given twice, as RFC 3339 UTC with
//! milliseconds (`starts_at`, `ends_at`) and as Unix milliseconds (`starts_ms`, `ends_ms`);
//! `ends_*` are null exactly while the alert fires.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::TsMs;
use crate::notify::{AlertMsg, Notification};

/// The schema version this code writes.
pub const VERSION: &str = "1";

/// The whole body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    pub version: String,
    /// The receiver's name in the config.
    pub receiver: String,
    /// `firing` when at least one alert fires, else `resolved`.
    pub status: String,
    /// Identifies the group (stable across its messages).
    pub group_key: String,
    /// The labels the group was made by (`group_by`).
    pub group_labels: BTreeMap<String, String>,
    /// The host this gpuwatch runs on.
    pub sender_host: String,
    /// A reminder of alerts still firing.
    pub repeat: bool,
    /// Sent by `gpuwatch notify test`.
    pub test: bool,
    /// Firing first, then resolved.
    pub alerts: Vec<Alert>,
}

/// One alert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// gpuwatch's alert ID (`gpuwatch incident <id>`); 0 for test and self alerts.
    pub id: i64,
    /// `firing` or `resolved`.
    pub status: String,
    pub rule: String,
    /// `info`, `warning` or `critical`.
    pub severity: String,
    pub labels: BTreeMap<String, String>,
    /// What is wrong, with the values that made it fire.
    pub summary: String,
    pub description: Option<String>,
    pub host: String,
    pub gpu: Option<u32>,
    pub uuid: Option<String>,
    pub model: Option<String>,
    pub pid: Option<u32>,
    pub process: Option<String>,
    /// The owner of `pid`.
    pub user: Option<String>,
    /// When the condition started to hold (RFC 3339 UTC).
    pub starts_at: String,
    /// When it ended; null while firing.
    pub ends_at: Option<String>,
    pub starts_ms: TsMs,
    pub ends_ms: Option<TsMs>,
    /// The command that shows the alert's story (null for ID 0).
    pub story: Option<String>,
}

/// The body of `n`.
pub fn payload(n: &Notification) -> Payload {
    Payload {
        version: VERSION.into(),
        receiver: n.receiver.clone(),
        status: if n.firing().next().is_some() {
            "firing"
        } else {
            "resolved"
        }
        .into(),
        group_key: n.group_key.clone(),
        group_labels: n.group_labels.clone(),
        sender_host: n.sender_host.clone(),
        repeat: n.repeat,
        test: n.test,
        alerts: n.alerts.iter().map(|a| alert(a, n.now_ms)).collect(),
    }
}

fn alert(a: &AlertMsg, now_ms: TsMs) -> Alert {
    // A resolved alert always has an end (the notification's time if the row lacks one).
    let ends_ms = (!a.is_firing()).then(|| a.ends_ms.unwrap_or(now_ms));
    Alert {
        id: a.id,
        status: if a.is_firing() { "firing" } else { "resolved" }.into(),
        rule: a.rule.clone(),
        severity: a.severity.clone(),
        labels: a.labels.clone(),
        summary: a.summary.clone(),
        description: a.description.clone(),
        host: a.host.clone(),
        gpu: a.gpu,
        uuid: a.uuid.clone(),
        model: a.model.clone(),
        pid: a.pid,
        process: a.process.clone(),
        user: a.user.clone(),
        starts_at: rfc3339(a.starts_ms),
        ends_at: ends_ms.map(rfc3339),
        starts_ms: a.starts_ms,
        ends_ms,
        story: a.story_command(),
    }
}

/// `2026-11-30T18:02:11.250Z`.
pub use crate::format::rfc3339_ms as rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_status() {
        assert_eq!(rfc3339(1_700_000_000_250), "2023-11-14T22:13:20.250Z");
        let firing = AlertMsg {
            state: "firing".into(),
            starts_ms: 1_000,
            ..Default::default()
        };
        let resolved = AlertMsg {
            state: "resolved".into(),
            starts_ms: 1_000,
            ..Default::default()
        };
        let n = Notification {
            digest: None,
            alerts: vec![firing, resolved],
            now_ms: 9_000,
            ..Default::default()
        };
        let p = payload(&n);
        assert_eq!(p.status, "firing");
        assert_eq!(p.alerts[0].ends_at, None);
        assert_eq!(p.alerts[1].ends_ms, Some(9_000));
        let n = Notification {
            digest: None,
            alerts: vec![AlertMsg {
                state: "resolved".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(payload(&n).status, "resolved");
    }
}
