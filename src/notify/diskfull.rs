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

use super::self_alert;
use super::sender::{Sender, Slot};

/// The self alert's rule name.
pub const FULL_RULE: &str = "gpuwatch_database_full";

impl Sender {
    /// Raises or resolves `gpuwatch_database_full` when the disk's state changed.
    pub(super) fn disk_full_alert(&mut self, slots: &[Slot], now: TsMs) -> Result<(), StoreError> {
        let full = crate::store::disk_full();
        let msg = match (&self.disk_full_raised, full) {
            (None, true) => self_alert::firing(
                FULL_RULE,
                "critical",
                &self.host,
                &[],
                format!(
                    "the disk holding {} is full: gpuwatch deletes its oldest samples to go on \
                     writing; free space on that disk",
                    self.db.display()
                ),
                now,
                now,
            ),
            (Some(raised), false) => self_alert::resolved(raised, now),
            _ => return Ok(()),
        };
        let rows = self_alert::rows(
            slots.iter().map(|s| s.cfg.name.as_str()),
            &format!("self|rule={FULL_RULE}"),
            &msg,
            now,
            self.cfg.timing.repeat_interval,
        )?;
        self.outbox.enqueue(&rows)?;
        tracing::warn!(state = %msg.state, "{}", msg.summary);
        self.disk_full_raised = full.then_some(msg);
        Ok(())
    }
}
