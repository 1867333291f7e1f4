//! The notification outbox (`notifications`, migration 0006): rows are enqueued in the same
//! transaction as the alert state they report ([`super::alerts::AlertDb::save`]), and the
//! sender reads, groups and marks them here.
//!
//! Invariants: a row leaves `pending` only through [`Outbox::mark`] (delivered, dead letter,
//! silenced, skipped) — never by deletion; pending rows are read in id (enqueue) order; each
//! mark is one short transaction on the sender's own connection.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::model::TsMs;

/// A notification to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotification {
    pub receiver: String,
    pub group_key: String,
    /// The alert it reports, to find `alerts.id` in the same transaction: (rule, gpu_id,
    /// process_id). `None` for self alerts.
    pub alert: Option<(String, i64, Option<i64>)>,
    /// A known `alerts.id` (repeats); takes precedence over `alert`.
    pub alert_id: Option<i64>,
    /// `firing`, `resolved`, `repeat` or `self`.
    pub kind: String,
    pub payload_json: String,
    pub created_ms: TsMs,
    pub group_wait_ms: i64,
    pub group_interval_ms: i64,
    pub repeat_interval_ms: i64,
}

/// A row waiting for delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingRow {
    pub id: i64,
    pub receiver: String,
    pub group_key: String,
    pub alert_id: Option<i64>,
    pub kind: String,
    pub payload_json: String,
    pub created_ms: TsMs,
    pub group_wait_ms: i64,
    pub group_interval_ms: i64,
    pub repeat_interval_ms: i64,
    pub attempts: i64,
    pub next_attempt_ms: TsMs,
    pub last_error: Option<String>,
}

/// An alert still firing that was delivered to a receiver (repeats, Alertmanager re-sends).
#[derive(Debug, Clone, PartialEq)]
pub struct Delivered {
    pub alert_id: i64,
    pub group_key: String,
    pub payload_json: String,
    /// The last delivery of this alert to the receiver.
    pub last_ms: TsMs,
    pub group_wait_ms: i64,
    pub group_interval_ms: i64,
    pub repeat_interval_ms: i64,
}

/// Delivery state of one receiver, for `gpuwatch status`.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct ReceiverBacklog {
    pub receiver: String,
    pub pending: i64,
    pub oldest_pending_ms: Option<TsMs>,
    /// The earliest "latest due time" (created + group_wait + group_interval) of the pending
    /// rows: how long the backlog has been overdue.
    pub overdue_since_ms: Option<TsMs>,
    /// Attempts of the oldest pending row (0: not tried yet).
    pub head_attempts: i64,
    pub head_error: Option<String>,
    /// Alert notifications delivered, and the messages that carried them.
    pub delivered: i64,
    pub messages: i64,
    pub last_delivered_ms: Option<TsMs>,
    pub dead: i64,
    pub last_dead_error: Option<String>,
    pub silenced: i64,
}

/// Inserts rows on `conn` (the caller's transaction).
///
/// A `resolved` row goes exactly where the alert's firing went (each receiver and group that
/// has a firing or reminder row of it), whatever its labels route to now: the severity may
/// have changed, or the rule be gone. Without such rows nobody was told, and nothing is added.
pub(crate) fn insert(conn: &Connection, rows: &[NewNotification]) -> Result<(), StoreError> {
    let mut resolved_done: Vec<i64> = Vec::new();
    for r in rows {
        let alert_id: Option<i64> = match (&r.alert_id, &r.alert) {
            (Some(id), _) => Some(*id),
            (None, Some((rule, gpu, process))) => conn
                .prepare_cached(
                    "SELECT id FROM alert_state WHERE rule = ?1 AND gpu_id = ?2
                       AND ifnull(process_id, -1) = ifnull(?3, -1) AND replayed = 0
                     ORDER BY id DESC LIMIT 1",
                )?
                .query_row(params![rule, gpu, process], |row| row.get(0))
                .optional()?,
            (None, None) => None,
        };
        if r.kind == "resolved"
            && let Some(id) = alert_id
        {
            if resolved_done.contains(&id) {
                continue;
            }
            resolved_done.push(id);
            conn.prepare_cached(
                "INSERT INTO outbox (receiver, group_key, alert_id, kind, payload_json,
                   created_ms, group_wait_ms, group_interval_ms, repeat_interval_ms)
                 SELECT receiver, group_key, ?1, 'resolved', ?2, ?3, group_wait_ms,
                   group_interval_ms, repeat_interval_ms
                 FROM outbox WHERE id IN (
                   SELECT max(id) FROM outbox WHERE alert_id = ?1
                     AND kind IN ('firing', 'repeat') GROUP BY receiver, group_key)
                 ORDER BY id",
            )?
            .execute(params![id, r.payload_json, r.created_ms])?;
            continue;
        }
        conn.prepare_cached(
            "INSERT INTO outbox (receiver, group_key, alert_id, kind, payload_json,
               created_ms, group_wait_ms, group_interval_ms, repeat_interval_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            r.receiver,
            r.group_key,
            alert_id,
            r.kind,
            r.payload_json,
            r.created_ms,
            r.group_wait_ms,
            r.group_interval_ms,
            r.repeat_interval_ms
        ])?;
    }
    Ok(())
}

/// The sender's read-write connection.
pub struct Outbox {
    conn: Connection,
}

impl Outbox {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            conn: super::open_existing_rw(path)?,
        })
    }

    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Enqueues rows in one transaction.
    pub fn enqueue(&mut self, rows: &[NewNotification]) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        insert(&tx, rows)?;
        tx.commit()?;
        Ok(())
    }

    /// Whether the alert is still firing.
    pub fn alert_firing(&self, alert_id: i64) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM alert_state WHERE id = ?1 AND state = 'firing')",
            )?
            .query_row(params![alert_id], |r| r.get(0))?)
    }

    /// Receivers with pending rows that are not in `known`.
    pub fn orphan_receivers(&self, known: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT receiver FROM outbox WHERE status = 'pending'")?;
        let all: Vec<String> = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(all
            .into_iter()
            .filter(|r| !known.contains(&r.as_str()))
            .collect())
    }

    /// Dead-letters every pending row of a receiver.
    pub fn mark_receiver_dead(
        &mut self,
        receiver: &str,
        now: TsMs,
        why: &str,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE outbox SET status = 'dead', done_ms = ?2, last_error = ?3
             WHERE receiver = ?1 AND status = 'pending'",
            params![receiver, now, why],
        )?;
        Ok(())
    }

    /// When the group last handled a message (sent, silenced, dead or skipped): reminders
    /// count from here, so a silenced or failing reminder is not queued again at once.
    pub fn last_handled(
        &self,
        receiver: &str,
        group_key: &str,
    ) -> Result<Option<TsMs>, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT max(done_ms) FROM outbox
                 WHERE receiver = ?1 AND group_key = ?2 AND status <> 'pending'",
            )?
            .query_row(params![receiver, group_key], |r| r.get(0))?)
    }

    /// Live reported alerts whose latest row for `receiver` is a silenced firing one: when
    /// no silence covers them any more, they are announced (as Alertmanager does).
    pub fn silenced_firing(&self, receiver: &str) -> Result<Vec<Delivered>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT n.alert_id, n.group_key, n.payload_json, n.done_ms, n.group_wait_ms,
               n.group_interval_ms, n.repeat_interval_ms
             FROM outbox n JOIN alert_state a ON a.id = n.alert_id
             WHERE n.id IN (SELECT max(id) FROM outbox WHERE receiver = ?1
                              AND alert_id IS NOT NULL GROUP BY alert_id)
               AND n.status = 'silenced' AND n.kind IN ('firing', 'repeat')
               AND a.state = 'firing' AND a.reported = 1
             ORDER BY n.id",
        )?;
        let rows = stmt.query_map(params![receiver], delivered_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes handled rows older than `before` (delivery history), except those of alerts
    /// still live (reminders and resolved messages need them). Returns how many.
    pub fn prune(&mut self, before: TsMs) -> Result<usize, StoreError> {
        Ok(self.conn.execute(
            "DELETE FROM outbox WHERE status <> 'pending' AND done_ms < ?1
               AND (alert_id IS NULL
                    OR alert_id NOT IN (SELECT id FROM alert_state WHERE state IN ('pending', 'firing')))",
            params![before],
        )?)
    }

    /// A receiver's pending rows in enqueue order.
    pub fn pending(&self, receiver: &str) -> Result<Vec<PendingRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, receiver, group_key, alert_id, kind, payload_json, created_ms,
               group_wait_ms, group_interval_ms, repeat_interval_ms, attempts, next_attempt_ms,
               last_error
             FROM outbox WHERE receiver = ?1 AND status = 'pending' ORDER BY id",
        )?;
        let rows = stmt.query_map(params![receiver], |r| {
            Ok(PendingRow {
                id: r.get(0)?,
                receiver: r.get(1)?,
                group_key: r.get(2)?,
                alert_id: r.get(3)?,
                kind: r.get(4)?,
                payload_json: r.get(5)?,
                created_ms: r.get(6)?,
                group_wait_ms: r.get(7)?,
                group_interval_ms: r.get(8)?,
                repeat_interval_ms: r.get(9)?,
                attempts: r.get(10)?,
                next_attempt_ms: r.get(11)?,
                last_error: r.get(12)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// When the group last got a message.
    pub fn last_delivered(
        &self,
        receiver: &str,
        group_key: &str,
    ) -> Result<Option<TsMs>, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT max(done_ms) FROM outbox
                 WHERE receiver = ?1 AND group_key = ?2 AND status = 'sent'",
            )?
            .query_row(params![receiver, group_key], |r| r.get(0))?)
    }

    /// Whether the receiver was told that this alert fired (a resolved message needs it).
    pub fn firing_delivered(&self, receiver: &str, alert_id: i64) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM outbox WHERE receiver = ?1 AND alert_id = ?2
                   AND kind IN ('firing', 'repeat') AND status = 'sent')",
            )?
            .query_row(params![receiver, alert_id], |r| r.get(0))?)
    }

    /// Moves rows out of `pending` (`sent`, `dead`, `silenced`, `skipped`) in one transaction;
    /// rows marked together share a batch id.
    pub fn mark(
        &mut self,
        ids: &[i64],
        status: &str,
        now: TsMs,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let batch = ids.first().copied();
        for id in ids {
            tx.prepare_cached(
                "UPDATE outbox SET status = ?2, done_ms = ?3, batch_id = ?4,
                   last_error = coalesce(?5, last_error),
                   attempts = attempts + (?2 IN ('sent', 'dead'))
                 WHERE id = ?1 AND status = 'pending'",
            )?
            .execute(params![id, status, now, batch, error])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Records a failed attempt; the rows stay pending until `next_attempt_ms`.
    pub fn retry_later(
        &mut self,
        ids: &[i64],
        error: &str,
        next_attempt_ms: TsMs,
    ) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        for id in ids {
            tx.prepare_cached(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?2,
                   next_attempt_ms = ?3 WHERE id = ?1 AND status = 'pending'",
            )?
            .execute(params![id, error, next_attempt_ms])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Alerts still firing (and reported) whose firing was delivered to `receiver`, with
    /// their latest delivered payload.
    pub fn delivered_firing(&self, receiver: &str) -> Result<Vec<Delivered>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT n.alert_id, n.group_key, n.payload_json, n.done_ms, n.group_wait_ms,
               n.group_interval_ms, n.repeat_interval_ms
             FROM outbox n JOIN alert_state a ON a.id = n.alert_id
             WHERE n.id IN (SELECT max(id) FROM outbox WHERE receiver = ?1
                              AND status = 'sent' AND kind IN ('firing', 'repeat')
                              GROUP BY alert_id)
               AND a.state = 'firing' AND a.reported = 1
             ORDER BY n.id",
        )?;
        let rows = stmt.query_map(params![receiver], delivered_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// A [`Delivered`] from `alert_id, group_key, payload_json, done_ms, group_wait_ms,
/// group_interval_ms, repeat_interval_ms`.
fn delivered_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Delivered> {
    Ok(Delivered {
        alert_id: r.get(0)?,
        group_key: r.get(1)?,
        payload_json: r.get(2)?,
        last_ms: r.get(3)?,
        group_wait_ms: r.get(4)?,
        group_interval_ms: r.get(5)?,
        repeat_interval_ms: r.get(6)?,
    })
}

/// Delivery state per receiver (read-only use: `gpuwatch status`).
pub fn backlog(conn: &Connection) -> Result<Vec<ReceiverBacklog>, StoreError> {
    // Cached: `/metrics` reads this at every scrape.
    let mut stmt = conn.prepare_cached(
        "SELECT receiver,
           sum(status = 'pending'), min(CASE WHEN status = 'pending' THEN created_ms END),
           sum(status = 'sent'), max(CASE WHEN status = 'sent' THEN done_ms END),
           sum(status = 'dead'), sum(status = 'silenced'),
           count(DISTINCT CASE WHEN status = 'sent' THEN batch_id END),
           min(CASE WHEN status = 'pending' AND kind <> 'self'
                    THEN created_ms + group_wait_ms + group_interval_ms END)
         FROM outbox GROUP BY receiver ORDER BY receiver",
    )?;
    let mut out: Vec<ReceiverBacklog> = stmt
        .query_map([], |r| {
            Ok(ReceiverBacklog {
                receiver: r.get(0)?,
                pending: r.get(1)?,
                oldest_pending_ms: r.get(2)?,
                delivered: r.get(3)?,
                last_delivered_ms: r.get(4)?,
                dead: r.get(5)?,
                silenced: r.get(6)?,
                messages: r.get(7)?,
                overdue_since_ms: r.get(8)?,
                ..Default::default()
            })
        })?
        .collect::<Result<_, _>>()?;
    for b in &mut out {
        if b.pending > 0 {
            let head: Option<(i64, Option<String>)> = conn
                .prepare_cached(
                    "SELECT attempts, last_error FROM outbox
                     WHERE receiver = ?1 AND status = 'pending' ORDER BY id LIMIT 1",
                )?
                .query_row(params![b.receiver], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some((attempts, error)) = head {
                b.head_attempts = attempts;
                b.head_error = error;
            }
        }
        if b.dead > 0 {
            b.last_dead_error = conn
                .prepare_cached(
                    "SELECT last_error FROM outbox WHERE receiver = ?1 AND status = 'dead'
                     ORDER BY id DESC LIMIT 1",
                )?
                .query_row(params![b.receiver], |r| r.get(0))
                .optional()?
                .flatten();
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::alerts::{AlertDb, SavedAlert};

    fn row(receiver: &str, group: &str, kind: &str, at: TsMs) -> NewNotification {
        NewNotification {
            receiver: receiver.into(),
            group_key: group.into(),
            alert: Some(("busy".into(), 1, None)),
            alert_id: None,
            kind: kind.into(),
            payload_json: format!("{{\"state\":\"{kind}\"}}"),
            created_ms: at,
            group_wait_ms: 0,
            group_interval_ms: 0,
            repeat_interval_ms: 60_000,
        }
    }

    #[test]
    fn resolved_goes_where_firing_went_and_rows_stay_until_marked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.db");
        drop(crate::store::open(&path, &crate::store::StoreConfig::new("h")).unwrap());
        let mut db = AlertDb::open(&path).unwrap();
        let firing = SavedAlert {
            rule: "busy".into(),
            gpu_id: 1,
            scope: "gpu".into(),
            phase: "firing".into(),
            reported: true,
            fired_ms: Some(1000),
            ..Default::default()
        };
        // Fired as a warning: routed to slack and mail.
        db.save(
            1000,
            std::slice::from_ref(&firing),
            &[
                row("slack", "g1", "firing", 1000),
                row("mail", "g2", "firing", 1000),
            ],
        )
        .unwrap();
        // Resolved while critical: its labels now route to the pager only.
        let ended = SavedAlert {
            phase: "inactive".into(),
            ..firing
        };
        db.save(2000, &[ended], &[row("pager", "g9", "resolved", 2000)])
            .unwrap();
        let o = Outbox::open(&path).unwrap();
        for (receiver, group) in [("slack", "g1"), ("mail", "g2")] {
            let rows = o.pending(receiver).unwrap();
            let kinds: Vec<(&str, &str)> = rows
                .iter()
                .map(|r| (r.kind.as_str(), r.group_key.as_str()))
                .collect();
            assert_eq!(
                kinds,
                [("firing", group), ("resolved", group)],
                "{receiver}"
            );
            assert_eq!(rows[1].alert_id, rows[0].alert_id);
        }
        assert!(
            o.pending("pager").unwrap().is_empty(),
            "the pager never heard it fire"
        );
        let mut o = o;
        let ids: Vec<i64> = o.pending("slack").unwrap().iter().map(|r| r.id).collect();
        o.mark(&ids, "sent", 3000, None).unwrap();
        o.mark(&[], "sent", 3000, None).unwrap();
        assert!(o.pending("slack").unwrap().is_empty());
        assert_eq!(o.last_delivered("slack", "g1").unwrap(), Some(3000));
        assert_eq!(o.prune(2000).unwrap(), 0, "recent history stays");
        assert_eq!(
            o.prune(4000).unwrap(),
            2,
            "old handled rows of ended alerts go"
        );
        assert_eq!(
            o.pending("mail").unwrap().len(),
            2,
            "pending rows are never pruned"
        );
    }
}
