//! The sender's periodic work besides delivery: reminders for alerts still firing
//! (`repeat_interval`), re-sending live alerts (and the heartbeat) to Alertmanager, and the
//! `gpuwatch_notify_backlog` self alert when a receiver's oldest undelivered notification is
//! older than `backlog_alert_after`.
//!
//! Invariants: reminders and self alerts go through the outbox like every notification (so
//! they are durable and ordered); Alertmanager re-sends do not (a failed one is repeated at
//! the next re-send; transitions travel through the outbox anyway).

use std::collections::HashMap;

use crate::model::TsMs;
use crate::store::StoreError;
use crate::store::outbox::{NewNotification, PendingRow};

use super::sender::{BACKLOG_RULE, HOUSEKEEPING, Next, Sender, Slot};
use super::{AlertMsg, Notification, Receiver, self_alert};
use crate::secret;

impl Sender {
    /// Reminders, Alertmanager re-sends and the backlog self alert. Returns when the next
    /// of them is due.
    pub(super) async fn housekeeping(
        &mut self,
        slots: &mut [Slot],
        now: TsMs,
    ) -> Result<Next, StoreError> {
        let mut next = Next::default();
        let silences = self.silences(now)?;
        for slot in slots.iter_mut() {
            let is_am = slot.receiver.as_ref().is_ok_and(Receiver::is_alertmanager);
            if is_am {
                self.alertmanager_resend(slot, now, &mut next).await?;
            } else {
                self.reminders(slot, now, &mut next)?;
            }
            self.unsilenced(slot, now, &silences, &mut next)?;
        }
        self.backlog_alerts(slots, now, &mut next)?;
        self.disk_full_alert(slots, now)?;
        self.prune(&mut next)?;
        Ok(next)
    }

    /// Forgets delivery history older than `history` (hourly), keeping live alerts' rows.
    fn prune(&mut self, next: &mut Next) -> Result<(), StoreError> {
        const EVERY: i64 = 3_600_000;
        let wall = crate::clock::now_ms();
        if let Some(t) = self.pruned_at.filter(|t| wall - t < EVERY) {
            next.wall_at(t + EVERY);
            return Ok(());
        }
        next.wall_at(wall + EVERY);
        self.pruned_at = Some(wall);
        let before = wall - self.history.as_millis() as i64;
        let n = self.outbox.prune(before)?;
        if n > 0 {
            tracing::info!(rows = n, "pruned old notification history");
        }
        Ok(())
    }

    /// Announces alerts whose firing was silenced once no silence covers them any more (as
    /// Alertmanager does when a silence expires while the alert still fires).
    fn unsilenced(
        &mut self,
        slot: &Slot,
        now: TsMs,
        silences: &[Vec<super::matcher::Matcher>],
        next: &mut Next,
    ) -> Result<(), StoreError> {
        let mut rows = Vec::new();
        let silenced = self.outbox.silenced_firing(&slot.cfg.name)?;
        if !silenced.is_empty() {
            // Another process (`gpuwatch silence expire`) may end the silence at any time.
            next.daemon_at(now + HOUSEKEEPING.as_millis() as i64);
        }
        for d in silenced {
            let Ok(msg) = serde_json::from_str::<AlertMsg>(&d.payload_json) else {
                continue;
            };
            if silences
                .iter()
                .any(|m| super::matcher::all_match(m, &msg.labels))
            {
                continue;
            }
            rows.push(NewNotification {
                receiver: slot.cfg.name.clone(),
                group_key: d.group_key,
                alert: None,
                alert_id: Some(d.alert_id),
                kind: "firing".into(),
                payload_json: d.payload_json,
                created_ms: now,
                group_wait_ms: d.group_wait_ms,
                group_interval_ms: d.group_interval_ms,
                repeat_interval_ms: d.repeat_interval_ms,
            });
        }
        if !rows.is_empty() {
            tracing::info!(receiver = %slot.cfg.name, alerts = rows.len(), "silence over: announcing alerts still firing");
            self.outbox.enqueue(&rows)?;
        }
        Ok(())
    }

    /// Enqueues a reminder for groups whose alerts still fire `repeat_interval` after the
    /// group's last message (and that have nothing pending).
    fn reminders(&mut self, slot: &Slot, now: TsMs, next: &mut Next) -> Result<(), StoreError> {
        let delivered = self.outbox.delivered_firing(&slot.cfg.name)?;
        if delivered.is_empty() {
            return Ok(());
        }
        let pending: Vec<String> = self
            .outbox
            .pending(&slot.cfg.name)?
            .into_iter()
            .map(|r| r.group_key)
            .collect();
        let mut by_group: HashMap<&str, Vec<&crate::store::outbox::Delivered>> = HashMap::new();
        for d in &delivered {
            by_group.entry(d.group_key.as_str()).or_default().push(d);
        }
        let mut rows = Vec::new();
        for (key, alerts) in by_group {
            if pending.iter().any(|p| p == key) {
                continue;
            }
            // From the group's last handled message (a silenced or failed reminder counts,
            // or reminders would be queued again at every pass).
            let Some(last) = self.outbox.last_handled(&slot.cfg.name, key)? else {
                continue;
            };
            let repeat = alerts[0].repeat_interval_ms;
            if now - last < repeat {
                next.daemon_at(last + repeat);
                continue;
            }
            for d in alerts {
                rows.push(NewNotification {
                    receiver: slot.cfg.name.clone(),
                    group_key: d.group_key.clone(),
                    alert: None,
                    alert_id: Some(d.alert_id),
                    kind: "repeat".into(),
                    payload_json: d.payload_json.clone(),
                    created_ms: now,
                    group_wait_ms: 0,
                    group_interval_ms: 0,
                    repeat_interval_ms: d.repeat_interval_ms,
                });
            }
        }
        if !rows.is_empty() {
            tracing::info!(receiver = %slot.cfg.name, alerts = rows.len(), "still firing: sending a reminder");
            self.outbox.enqueue(&rows)?;
        }
        Ok(())
    }

    /// Alertmanager forgets alerts whose `endsAt` passed: re-send every live one (and the
    /// heartbeat) every `resend_every`. A failure here is only logged: the next re-send
    /// repeats it, and transitions travel through the outbox anyway.
    async fn alertmanager_resend(
        &mut self,
        slot: &mut Slot,
        now: TsMs,
        next: &mut Next,
    ) -> Result<(), StoreError> {
        let Ok(Receiver::Alertmanager(am)) = &slot.receiver else {
            return Ok(());
        };
        let every = am.resend_every().as_millis() as i64;
        if let Some(l) = slot.last_resend.filter(|l| now - l < every) {
            next.daemon_at(l + every);
            return Ok(());
        }
        slot.last_resend = Some(now);
        next.daemon_at(now + every);
        let mut alerts: Vec<AlertMsg> = Vec::new();
        for d in self.outbox.delivered_firing(&slot.cfg.name)? {
            if let Ok(mut m) = serde_json::from_str::<AlertMsg>(&d.payload_json) {
                m.id = d.alert_id;
                alerts.push(m);
            }
        }
        if !alerts.is_empty() {
            let n = Notification {
                digest: None,
                receiver: slot.cfg.name.clone(),
                alerts,
                sender_host: self.host.clone(),
                now_ms: now,
                ..Default::default()
            };
            if let Err(e) = am.send(&n).await {
                tracing::warn!(receiver = %slot.cfg.name, "re-sending live alerts failed: {}", secret::scrub(e.message()));
            }
        }
        if am.heartbeat_enabled()
            && let Err(e) = am.send_heartbeat(&self.host, now).await
        {
            tracing::warn!(receiver = %slot.cfg.name, "heartbeat failed: {}", secret::scrub(e.message()));
        }
        Ok(())
    }

    /// Raises (and ends) `gpuwatch_notify_backlog` for receivers whose oldest undelivered
    /// notification is older than `backlog_alert_after`, sent to the other receivers.
    fn backlog_alerts(
        &mut self,
        slots: &mut [Slot],
        now: TsMs,
        next: &mut Next,
    ) -> Result<(), StoreError> {
        let limit = self.cfg.backlog_alert_after.as_millis() as i64;
        let names: Vec<String> = slots.iter().map(|s| s.cfg.name.clone()).collect();
        for slot in slots.iter_mut() {
            let rows = self.outbox.pending(&slot.cfg.name)?;
            let stuck: Vec<&PendingRow> = rows.iter().filter(|r| r.kind != "self").collect();
            // Age counts from the latest a row could be due when all is well (after its
            // group_wait and one group_interval), so grouping is never taken for a backlog.
            let oldest = stuck.iter().map(|r| latest_due(r)).min();
            let old = oldest.is_some_and(|o| now - o > limit);
            if let Some(o) = oldest.filter(|_| !old) {
                next.daemon_at(o + limit + 1);
            }
            let msg = match (&slot.backlog_raised, old) {
                (None, true) => {
                    let head = stuck[0];
                    let m = self_alert::firing(
                        BACKLOG_RULE,
                        "warning",
                        &self.host,
                        &[("receiver", &slot.cfg.name)],
                        format!(
                            "{} notification(s) for receiver {} are undelivered since {}{}",
                            stuck.len(),
                            slot.cfg.name,
                            super::text::utc(head.created_ms),
                            head.last_error
                                .as_ref()
                                .map(|e| format!("; last error: {e}"))
                                .unwrap_or_default()
                        ),
                        head.created_ms,
                        now,
                    );
                    slot.backlog_raised = Some(m.clone());
                    m
                }
                (Some(raised), false) => {
                    let m = self_alert::resolved(raised, now);
                    slot.backlog_raised = None;
                    m
                }
                _ => continue,
            };
            tracing::warn!(receiver = %slot.cfg.name, state = %msg.state, "{}", msg.summary);
            let rows = self_alert::rows(
                names
                    .iter()
                    .map(String::as_str)
                    .filter(|n| *n != slot.cfg.name),
                &format!("self|receiver={}", slot.cfg.name),
                &msg,
                now,
                self.cfg.timing.repeat_interval,
            )?;
            self.outbox.enqueue(&rows)?;
        }
        Ok(())
    }
}

/// The latest time a pending row is due while its receiver works.
pub(super) fn latest_due(r: &PendingRow) -> TsMs {
    r.created_ms + r.group_wait_ms + r.group_interval_ms
}
