//! gpuwatch's alerts about itself (`gpuwatch_notify_backlog`, `gpuwatch_database_full`,
//! `gpuwatch_database_recovered`): their message and their outbox rows, one shape for all.
//!
//! Invariants: a self alert is labelled `rule`, `severity` and `host` (plus what the caller
//! adds); it is queued as kind `self` rows, sent at once (no group wait or interval) and
//! repeated every `repeat_interval` like any alert; its resolution is the raised message
//! with its end time.

use std::time::Duration;

use crate::model::TsMs;
use crate::store::StoreError;
use crate::store::outbox::NewNotification;

use super::AlertMsg;

/// A firing self alert of `rule` on `host`, with `extra` labels.
pub(super) fn firing(
    rule: &str,
    severity: &str,
    host: &str,
    extra: &[(&str, &str)],
    summary: String,
    starts_ms: TsMs,
    fired_ms: TsMs,
) -> AlertMsg {
    let mut labels: std::collections::BTreeMap<String, String> = [
        ("rule".to_string(), rule.to_string()),
        ("severity".to_string(), severity.to_string()),
        ("host".to_string(), host.to_string()),
    ]
    .into();
    labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    AlertMsg {
        state: "firing".into(),
        rule: rule.into(),
        severity: severity.into(),
        labels,
        summary,
        host: host.into(),
        starts_ms,
        fired_ms,
        ..Default::default()
    }
}

/// The resolution of a raised self alert at `now`.
pub(super) fn resolved(raised: &AlertMsg, now: TsMs) -> AlertMsg {
    let mut m = raised.clone();
    m.state = "resolved".into();
    m.ends_ms = Some(now);
    m
}

/// The outbox rows that send `msg` to each of `receivers`, in group `group_key`.
pub(super) fn rows<'a>(
    receivers: impl IntoIterator<Item = &'a str>,
    group_key: &str,
    msg: &AlertMsg,
    created_ms: TsMs,
    repeat_interval: Duration,
) -> Result<Vec<NewNotification>, StoreError> {
    let payload = serde_json::to_string(msg).map_err(|e| StoreError::Config(e.to_string()))?;
    Ok(receivers
        .into_iter()
        .map(|receiver| NewNotification {
            receiver: receiver.to_string(),
            group_key: group_key.to_string(),
            alert: None,
            alert_id: None,
            kind: "self".into(),
            payload_json: payload.clone(),
            created_ms,
            group_wait_ms: 0,
            group_interval_ms: 0,
            repeat_interval_ms: i64::try_from(repeat_interval.as_millis()).unwrap_or(i64::MAX),
        })
        .collect())
}
