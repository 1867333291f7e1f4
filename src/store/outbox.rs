//! The notification outbox (`notifications`, migration 0006): rows are enqueued in the same
//! transaction as the alert state they report ([`super::alerts::AlertDb::save`]), and the
//! sender reads, groups and marks them here.
//!
//! Invariants: a row leaves `pending` only through [`Outbox::mark`] (delivered, dead letter,
//! silenced, skipped) — never by deletion; pending rows are read in id (enqueue) order; each
//! mark is one short transaction on the sender's own connection.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

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
pub(crate) fn insert(conn: &Connection, rows: &[NewNotification]) -> Result<(), StoreError> {
    for r in rows {
        let alert_id: Option<i64> = match (&r.alert_id, &r.alert) {
            (Some(id), _) => Some(*id),
            (None, Some((rule, gpu, process))) => conn
                .prepare_cached(
                    "SELECT id FROM alerts WHERE rule = ?1 AND gpu_id = ?2
                       AND ifnull(process_id, -1) = ifnull(?3, -1) ORDER BY id DESC LIMIT 1",
                )?
                .query_row(params![rule, gpu, process], |row| row.get(0))
                .optional()?,
            (None, None) => None,
        };
        conn.prepare_cached(
            "INSERT INTO notifications (receiver, group_key, alert_id, kind, payload_json,
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
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(Self { conn })
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

    /// A receiver's pending rows in enqueue order.
    pub fn pending(&self, receiver: &str) -> Result<Vec<PendingRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, receiver, group_key, alert_id, kind, payload_json, created_ms,
               group_wait_ms, group_interval_ms, repeat_interval_ms, attempts, next_attempt_ms,
               last_error
             FROM notifications WHERE receiver = ?1 AND status = 'pending' ORDER BY id",
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
                "SELECT max(done_ms) FROM notifications
                 WHERE receiver = ?1 AND group_key = ?2 AND status = 'sent'",
            )?
            .query_row(params![receiver, group_key], |r| r.get(0))?)
    }

    /// Whether the receiver was told that this alert fired (a resolved message needs it).
    pub fn firing_delivered(&self, receiver: &str, alert_id: i64) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM notifications WHERE receiver = ?1 AND alert_id = ?2
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
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let batch = ids.first().copied();
        for id in ids {
            tx.prepare_cached(
                "UPDATE notifications SET status = ?2, done_ms = ?3, batch_id = ?4,
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
                "UPDATE notifications SET attempts = attempts + 1, last_error = ?2,
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
             FROM notifications n JOIN alerts a ON a.id = n.alert_id
             WHERE n.id IN (SELECT max(id) FROM notifications WHERE receiver = ?1
                              AND status = 'sent' AND kind IN ('firing', 'repeat')
                              GROUP BY alert_id)
               AND a.state = 'firing' AND a.reported = 1
             ORDER BY n.id",
        )?;
        let rows = stmt.query_map(params![receiver], |r| {
            Ok(Delivered {
                alert_id: r.get(0)?,
                group_key: r.get(1)?,
                payload_json: r.get(2)?,
                last_ms: r.get(3)?,
                group_wait_ms: r.get(4)?,
                group_interval_ms: r.get(5)?,
                repeat_interval_ms: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Delivery state per receiver (read-only use: `gpuwatch status`).
pub fn backlog(conn: &Connection) -> Result<Vec<ReceiverBacklog>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT receiver,
           sum(status = 'pending'), min(CASE WHEN status = 'pending' THEN created_ms END),
           sum(status = 'sent'), max(CASE WHEN status = 'sent' THEN done_ms END),
           sum(status = 'dead'), sum(status = 'silenced'),
           count(DISTINCT CASE WHEN status = 'sent' THEN batch_id END)
         FROM notifications GROUP BY receiver ORDER BY receiver",
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
                ..Default::default()
            })
        })?
        .collect::<Result<_, _>>()?;
    for b in &mut out {
        if b.pending > 0 {
            let head: Option<(i64, Option<String>)> = conn
                .query_row(
                    "SELECT attempts, last_error FROM notifications
                     WHERE receiver = ?1 AND status = 'pending' ORDER BY id LIMIT 1",
                    params![b.receiver],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((attempts, error)) = head {
                b.head_attempts = attempts;
                b.head_error = error;
            }
        }
        if b.dead > 0 {
            b.last_dead_error = conn
                .query_row(
                    "SELECT last_error FROM notifications WHERE receiver = ?1 AND status = 'dead'
                     ORDER BY id DESC LIMIT 1",
                    params![b.receiver],
                    |r| r.get(0),
                )
                .optional()?
                .flatten();
        }
    }
    Ok(out)
}
