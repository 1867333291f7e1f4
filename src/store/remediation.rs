//! The remediation log (`remediation_log`, migration 0025; public view `remediation_audit`):
//! every decision to take a node out of service, acted on or not, and what the breaker and
//! the resume rule read back.
//!
//! Invariants:
//! - An action is inserted as `attempted` BEFORE its command or request runs and updated with
//!   the outcome after, so one whose outcome never came back stays visible.
//! - The breaker counts the actions that ran (`done`, `failed`, `attempted`: a failed drain may
//!   still have drained) and were not dry runs, in the hour before now, for the node.
//! - Rows are never deleted (retention does not touch this table).

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::{Store, StoreError};
use crate::model::TsMs;

/// One decision, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub ts_ms: TsMs,
    pub who: String,
    pub uid: Option<u32>,
    pub node: String,
    /// `drain` (Slurm) or `node_condition` (Kubernetes).
    pub action: String,
    /// What the fault is, stable across runs (`GPU-…:gpu_lost`): the resume rule's key.
    pub fault: String,
    pub gpu_uuid: Option<String>,
    /// `health` (`gpu health --slurm`) or `alert:RULE` (the daemon).
    pub source: String,
    /// The reason given to the scheduler.
    pub reason: String,
    pub dry_run: bool,
    pub result: String,
    pub error: Option<String>,
}

impl Store {
    /// Records a decision; returns its id (for [`Store::remediation_outcome`]).
    pub fn remediation_record(&mut self, e: &Entry) -> Result<i64, StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO remediation_log (ts_ms, who, uid, node, action, fault, gpu_uuid,
                   source, reason, dry_run, result, error)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(params![
                e.ts_ms, e.who, e.uid, e.node, e.action, e.fault, e.gpu_uuid, e.source, e.reason,
                e.dry_run, e.result, e.error
            ])?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The outcome of an `attempted` row.
    pub fn remediation_outcome(
        &mut self,
        id: i64,
        result: &str,
        error: Option<&str>,
        done_ms: TsMs,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE remediation_log SET result = ?2, error = ?3, done_ms = ?4 WHERE id = ?1",
            )?
            .execute(params![id, result, error, done_ms])?;
        Ok(())
    }

    /// Actions that ran on `node` (not dry runs) since `since_ms`: what the breaker counts.
    pub fn remediation_actions_since(&self, node: &str, since_ms: TsMs) -> Result<u32, StoreError> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM remediation_log
             WHERE node = ?1 AND ts_ms >= ?2 AND dry_run = 0
               AND result IN ('done', 'failed', 'attempted')",
            params![node, since_ms],
            |r| r.get(0),
        )?)
    }

    /// The newest row about `fault` on `node` whose result is one of `results`.
    pub fn remediation_last(
        &self,
        node: &str,
        fault: &str,
        results: &[&str],
    ) -> Result<Option<Entry>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT ts_ms, who, uid, node, action, fault, gpu_uuid, source, reason, dry_run,
                    result, error
             FROM remediation_log WHERE node = ?1 AND fault = ?2
             ORDER BY ts_ms DESC, id DESC",
        )?;
        let rows = stmt.query_map(params![node, fault], |r| {
            Ok(Entry {
                ts_ms: r.get(0)?,
                who: r.get(1)?,
                uid: r.get(2)?,
                node: r.get(3)?,
                action: r.get(4)?,
                fault: r.get(5)?,
                gpu_uuid: r.get(6)?,
                source: r.get(7)?,
                reason: r.get(8)?,
                dry_run: r.get(9)?,
                result: r.get(10)?,
                error: r.get(11)?,
            })
        })?;
        for row in rows {
            let e = row?;
            if results.contains(&e.result.as_str()) {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// Whether gpuwatch's last action on `node` took it out of service and no resume was seen
    /// since (any fault): the node is out by gpuwatch's hand, as far as the log knows.
    pub fn remediation_node_out(&self, node: &str) -> Result<Option<Entry>, StoreError> {
        let last: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT fault, result FROM remediation_log
                 WHERE node = ?1 AND dry_run = 0 AND result IN ('done', 'resumed_by_person')
                 ORDER BY ts_ms DESC, id DESC LIMIT 1",
                params![node],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match last {
            Some((fault, result)) if result == "done" => {
                self.remediation_last(node, &fault, &["done"])
            }
            _ => Ok(None),
        }
    }
}

/// A firing (and reported: not muted) GPU alert of `host`: (rule, GPU UUID, index, summary).
pub type FiringAlert = (String, String, u32, String);

/// The firing GPU alerts of `host`, reported (not muted by an inhibition or a silence at
/// fire time), oldest first.
pub fn firing_gpu_alerts(
    conn: &rusqlite::Connection,
    host: &str,
) -> Result<Vec<FiringAlert>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT rule, gpu_uuid, gpu_index, coalesce(summary, '') FROM alerts
         WHERE host = ?1 AND state = 'firing' AND reported = 1 AND gpu_uuid IS NOT NULL
         ORDER BY fired_ms, alert_id",
    )?;
    let rows = stmt.query_map(params![host], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get::<_, Option<u32>>(2)?.unwrap_or(0),
            r.get(3)?,
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
