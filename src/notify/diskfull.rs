//! The `gpuwatch_database_full` self alert: the disk holding the database filled up
//! ([`crate::store::disk_full`]: the store deletes the oldest samples to go on writing and
//! keeps the file at its size). It fires once when the sender's housekeeping sees the disk
//! full and resolves once it sees space back.
//!
//! Invariants: like every notification it goes through the outbox (kind `self`), to every
//! receiver; the state changes only once its rows are queued (a full disk that refuses even
//! those is tried again at the next housekeeping, every few seconds).

use crate::model::TsMs;
use crate::store::StoreError;
use crate::store::outbox::NewNotification;

use super::AlertMsg;
use super::sender::{Sender, Slot};

/// The self alert's rule name.
pub const FULL_RULE: &str = "gpuwatch_database_full";

impl Sender {
    /// Raises or resolves `gpuwatch_database_full` when the disk's state changed.
    pub(super) fn disk_full_alert(&mut self, slots: &[Slot], now: TsMs) -> Result<(), StoreError> {
        let full = crate::store::disk_full();
        let msg = match (&self.disk_full_raised, full) {
            (None, true) => AlertMsg {
                state: "firing".into(),
                rule: FULL_RULE.into(),
                severity: "critical".into(),
                labels: [
                    ("rule".to_string(), FULL_RULE.to_string()),
                    ("severity".to_string(), "critical".to_string()),
                    ("host".to_string(), self.host.clone()),
                ]
                .into(),
                summary: format!(
                    "the disk holding {} is full: gpuwatch deletes its oldest samples to go on \
                     writing; free space on that disk",
                    self.db.display()
                ),
                host: self.host.clone(),
                starts_ms: now,
                fired_ms: now,
                ..Default::default()
            },
            (Some(raised), false) => {
                let mut m = raised.clone();
                m.state = "resolved".into();
                m.ends_ms = Some(now);
                m
            }
            _ => return Ok(()),
        };
        let payload = serde_json::to_string(&msg).unwrap_or_default();
        let rows: Vec<NewNotification> = slots
            .iter()
            .map(|s| NewNotification {
                receiver: s.cfg.name.clone(),
                group_key: format!("self|rule={FULL_RULE}"),
                alert: None,
                alert_id: None,
                kind: "self".into(),
                payload_json: payload.clone(),
                created_ms: now,
                group_wait_ms: 0,
                group_interval_ms: 0,
                repeat_interval_ms: self.cfg.timing.repeat_interval.as_millis() as i64,
            })
            .collect();
        self.outbox.enqueue(&rows)?;
        tracing::warn!(state = %msg.state, "{}", msg.summary);
        self.disk_full_raised = full.then_some(msg);
        Ok(())
    }
}
