//! Alert state in SQLite (`alerts`, migration 0005): the daemon's rules thread saves every
//! change of an alert's lifecycle and restores the live ones after a restart.
//!
//! Invariants: notifications of a transition are enqueued in the transaction that saves it;
//! saves are IMMEDIATE transactions (the write lock is taken at BEGIN, so the busy timeout
//! applies: a deferred transaction that read first would fail at once with SQLITE_BUSY when
//! the store writer committed in between); each save is one short transaction on the caller's own read-write connection
//! (the store writer's transactions and these never wait on each other for long: WAL plus a
//! busy timeout); at most one live (pending/firing) row per identity (a partial unique index);
//! an episode that ends keeps its row as `resolved` (history), except one that never fired,
//! which is deleted (pending that came to nothing is not history); `max_severity` only rises
//! and every change of severity while firing is a row of `alert_severity_changes`, written
//! with the save that records it (migration 0019).

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use super::outbox::NewNotification;
use crate::model::TsMs;

/// One alert's persisted state (primitive fields: the store does not know the engine).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SavedAlert {
    pub rule: String,
    pub gpu_id: i64,
    pub process_id: Option<i64>,
    /// `gpu`, `process` or `host`.
    pub scope: String,
    /// `pending`, `firing`, or `inactive` (the episode ended).
    pub phase: String,
    pub severity: Option<String>,
    pub reported: bool,
    pub active_since_ms: Option<TsMs>,
    pub fired_ms: Option<TsMs>,
    pub last_true_ms: Option<TsMs>,
    pub kept_since_ms: Option<TsMs>,
    pub summary: Option<String>,
    pub labels_json: Option<String>,
    /// Changes of severity while firing since the last save, oldest first.
    pub severity_changes: Vec<SavedSeverityChange>,
}

/// A firing alert's change of severity (up or down).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SavedSeverityChange {
    pub at_ms: TsMs,
    pub from: Option<String>,
    pub to: String,
    /// The summary as rendered at the change.
    pub summary: Option<String>,
}

/// `CASE` ranking a severity column or parameter `x` (info < warning < critical).
macro_rules! rank {
    ($x:literal) => {
        concat!(
            "(CASE ",
            $x,
            " WHEN 'critical' THEN 3 WHEN 'warning' THEN 2 WHEN 'info' THEN 1 ELSE 0 END)"
        )
    };
}

/// A read-write connection for alert state.
pub struct AlertDb {
    conn: Connection,
}

impl AlertDb {
    /// Opens the (already created and migrated) database for alert writes.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            conn: super::open_existing_rw(path)?,
        })
    }

    /// Saves the usage ledger's changes in one transaction.
    pub fn save_usage(&mut self, ops: &[crate::usage::Op]) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        super::usage::apply(&tx, ops)?;
        tx.commit()?;
        Ok(())
    }

    /// Replaces the ledger of `hosts`' GPUs over `[from, to]` by `ops`, in one transaction
    /// (an import accounting its history again).
    pub fn replace_usage(
        &mut self,
        hosts: &[String],
        (from, to): (TsMs, TsMs),
        ops: &[crate::usage::Op],
    ) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        for host in hosts {
            super::usage::forget(&tx, host, from, to)?;
        }
        super::usage::apply(&tx, ops)?;
        tx.commit()?;
        Ok(())
    }

    /// Queues the usage digest of the period ending at `to` unless it was queued before: in
    /// one transaction, the period's ledger (read through this connection, so the ledger's
    /// last changes are in it) → `build` → its outbox rows and the period's record. Returns
    /// whether rows were queued.
    pub fn queue_digest(
        &mut self,
        (from, to): (TsMs, TsMs),
        host: &str,
        now: TsMs,
        build: impl FnOnce(&[crate::usage::summary::Interval]) -> Vec<NewNotification>,
    ) -> Result<bool, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let done: bool = tx
            .prepare_cached("SELECT count(*) > 0 FROM usage_digests WHERE period_end_ms = ?1")?
            .query_row(params![to], |r| r.get(0))?;
        if done {
            return Ok(false);
        }
        let intervals = super::usage::intervals(&tx, from, to, Some(host))?;
        if intervals.is_empty() {
            // Nothing to say about a period the ledger does not cover.
            return Ok(false);
        }
        let rows = build(&intervals);
        tx.prepare_cached(
            "INSERT INTO usage_digests (period_end_ms, period_start_ms, created_ms) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![to, from, now])?;
        super::outbox::insert(&tx, &rows)?;
        tx.commit()?;
        Ok(!rows.is_empty())
    }

    /// The live (pending or firing) alerts.
    pub fn load_live(&self) -> Result<Vec<SavedAlert>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT rule, gpu_id, process_id, scope, state, severity, reported, active_since_ms,
               fired_ms, last_true_ms, kept_since_ms, summary, labels_json
             FROM alert_state WHERE state IN ('pending', 'firing') ORDER BY id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(SavedAlert {
                rule: r.get(0)?,
                gpu_id: r.get(1)?,
                process_id: r.get(2)?,
                scope: r.get(3)?,
                phase: r.get(4)?,
                severity: r.get(5)?,
                reported: r.get(6)?,
                active_since_ms: r.get(7)?,
                fired_ms: r.get(8)?,
                last_true_ms: r.get(9)?,
                kept_since_ms: r.get(10)?,
                summary: r.get(11)?,
                labels_json: r.get(12)?,
                severity_changes: Vec::new(),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Saves changed alerts and enqueues the notifications that report them, in one
    /// transaction, at evaluation time `now` (so a crash loses neither or both).
    pub fn save(
        &mut self,
        now: TsMs,
        changed: &[SavedAlert],
        outbox: &[NewNotification],
    ) -> Result<(), StoreError> {
        if changed.is_empty() && outbox.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        for a in changed {
            let live: Option<i64> = tx
                .prepare_cached(
                    "SELECT id FROM alert_state WHERE rule = ?1 AND gpu_id = ?2 AND ifnull(process_id, -1) = ifnull(?3, -1)
                       AND state IN ('pending', 'firing')",
                )?
                .query_row(params![a.rule, a.gpu_id, a.process_id], |r| r.get(0))
                .optional()?;
            let id = match (a.phase.as_str(), live) {
                ("inactive", None) => None,
                ("inactive", Some(id)) if a.fired_ms.is_none() => {
                    tx.prepare_cached("DELETE FROM alert_state WHERE id = ?1")?
                        .execute(params![id])?;
                    None
                }
                ("inactive", Some(id)) => {
                    tx.prepare_cached(
                        "UPDATE alert_state SET state = 'resolved', resolved_ms = ?2, reported = ?3, updated_ms = ?2 WHERE id = ?1",
                    )?
                    .execute(params![id, now, a.reported])?;
                    Some(id)
                }
                // A live episode: insert it, or update its live row (the partial unique index).
                (phase, _) => {
                    let id: i64 = tx.prepare_cached(
                        concat!("INSERT INTO alert_state (rule, gpu_id, process_id, scope, state, severity, reported, active_since_ms,
                           fired_ms, last_true_ms, kept_since_ms, summary, labels_json, updated_ms, max_severity)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?6)
                         ON CONFLICT (rule, gpu_id, ifnull(process_id, -1)) WHERE state IN ('pending', 'firing')
                         DO UPDATE SET state = excluded.state, severity = excluded.severity,
                           max_severity = CASE WHEN ", rank!("excluded.severity"), " > ", rank!("max_severity"), "
                             THEN excluded.severity ELSE max_severity END,
                           reported = excluded.reported, active_since_ms = excluded.active_since_ms,
                           fired_ms = excluded.fired_ms, last_true_ms = excluded.last_true_ms,
                           kept_since_ms = excluded.kept_since_ms,
                           summary = coalesce(excluded.summary, summary),
                           labels_json = coalesce(excluded.labels_json, labels_json),
                           updated_ms = excluded.updated_ms
                         RETURNING id"),
                    )?
                    .query_row(params![
                        a.rule,
                        a.gpu_id,
                        a.process_id,
                        a.scope,
                        phase,
                        a.severity,
                        a.reported,
                        a.active_since_ms.unwrap_or(now),
                        a.fired_ms,
                        a.last_true_ms,
                        a.kept_since_ms,
                        a.summary,
                        a.labels_json,
                        now
                    ], |r| r.get(0))?;
                    Some(id)
                }
            };
            if let Some(id) = id {
                insert_changes(&tx, id, &a.severity_changes)?;
            }
        }
        super::outbox::insert(&tx, outbox)?;
        tx.commit()?;
        Ok(())
    }
}

/// Records alert `id`'s changes of severity.
fn insert_changes(
    conn: &Connection,
    id: i64,
    changes: &[SavedSeverityChange],
) -> Result<(), StoreError> {
    for c in changes {
        conn.prepare_cached(
            "INSERT INTO alert_severity_changes (alert_id, at_ms, from_severity, to_severity, summary)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![id, c.at_ms, c.from, c.to, c.summary])?;
    }
    Ok(())
}

/// One episode `gpuwatch replay --save` found over stored history.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplayedAlert {
    pub rule: String,
    pub gpu_id: i64,
    pub process_id: Option<i64>,
    /// `gpu`, `process` or `host`.
    pub scope: String,
    /// The latest severity, and the highest.
    pub severity: String,
    pub max_severity: String,
    pub active_since_ms: TsMs,
    pub fired_ms: TsMs,
    /// `None`: still firing where the replayed data ended.
    pub resolved_ms: Option<TsMs>,
    pub summary: String,
    pub labels_json: String,
    pub severity_changes: Vec<SavedSeverityChange>,
}

/// Replaces the replayed episodes of `[from, to]` (started in it, or still firing into it)
/// with `episodes`, in one
/// transaction; `end` is where the replayed data ended (the last update of an episode still
/// firing there). Returns (replaced, saved). Replayed rows are stored `resolved` with
/// `replayed = 1`: never live, so neither the daemon nor delivery ever picks them up.
pub fn save_replayed(
    conn: &mut Connection,
    from: TsMs,
    to: TsMs,
    end: TsMs,
    episodes: &[ReplayedAlert],
) -> Result<(usize, usize), StoreError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    // An earlier replay's episodes of this range: those that started in it, and those still
    // firing where that replay ended inside it (this one finds their continuation).
    let of_range = "replayed = 1 AND (active_since_ms BETWEEN ?1 AND ?2
        OR (resolved_ms IS NULL AND updated_ms >= ?1 AND active_since_ms <= ?2))";
    let old = format!("SELECT id FROM alert_state WHERE {of_range}");
    tx.execute(
        &format!("DELETE FROM alert_severity_changes WHERE alert_id IN ({old})"),
        params![from, to],
    )?;
    tx.execute(
        &format!("DELETE FROM analysis_requests WHERE alert_id IN ({old})"),
        params![from, to],
    )?;
    let replaced = tx.execute(
        &format!("DELETE FROM alert_state WHERE {of_range}"),
        params![from, to],
    )?;
    for e in episodes {
        let id: i64 = tx
            .prepare_cached(
                "INSERT INTO alert_state (rule, gpu_id, process_id, scope, state, severity, reported,
                   active_since_ms, fired_ms, resolved_ms, last_true_ms, summary, labels_json,
                   updated_ms, max_severity, replayed)
                 VALUES (?1, ?2, ?3, ?4, 'resolved', ?5, 0, ?6, ?7, ?8, ?9, ?10, ?11, ?9, ?12, 1)
                 RETURNING id",
            )?
            .query_row(
                params![
                    e.rule,
                    e.gpu_id,
                    e.process_id,
                    e.scope,
                    e.severity,
                    e.active_since_ms,
                    e.fired_ms,
                    e.resolved_ms,
                    e.resolved_ms.unwrap_or(end),
                    e.summary,
                    e.labels_json,
                    e.max_severity
                ],
                |r| r.get(0),
            )?;
        insert_changes(&tx, id, &e.severity_changes)?;
    }
    tx.commit()?;
    Ok((replaced, episodes.len()))
}
