//! Silences (`silences`, migration 0006): written by `gpuwatch silence add/expire`, read by
//! the daemon's sender at every cycle, so a new silence applies at once.
//!
//! Invariants: a silence is never deleted (expiring sets `expired_ms`, so `silence list
//! --all` shows history); matchers are stored as text in the `matcher` syntax and
//! checked before they are stored.

use rusqlite::{Connection, params};

use super::StoreError;
use crate::model::TsMs;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SilenceRow {
    pub id: i64,
    pub matchers: String,
    pub starts_ms: TsMs,
    pub ends_ms: TsMs,
    pub comment: String,
    pub created_by: Option<String>,
    pub created_ms: TsMs,
    pub expired_ms: Option<TsMs>,
}

impl SilenceRow {
    pub fn is_active(&self, now: TsMs) -> bool {
        self.expired_ms.is_none() && self.starts_ms <= now && now < self.ends_ms
    }
}

/// Stores a silence; returns its id.
pub fn add(
    conn: &Connection,
    matchers: &str,
    starts_ms: TsMs,
    ends_ms: TsMs,
    comment: &str,
    created_by: Option<&str>,
    now: TsMs,
) -> Result<i64, StoreError> {
    conn.execute(
        "INSERT INTO silences (matchers, starts_ms, ends_ms, comment, created_by, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![matchers, starts_ms, ends_ms, comment, created_by, now],
    )?;
    Ok(conn.last_insert_rowid())
}

/// Silences not expired and not over at `now` (`all`: every silence ever made).
pub fn list(conn: &Connection, now: TsMs, all: bool) -> Result<Vec<SilenceRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, matchers, starts_ms, ends_ms, comment, created_by, created_ms, expired_ms
         FROM silences WHERE ?2 OR (expired_ms IS NULL AND ends_ms > ?1) ORDER BY id",
    )?;
    let rows = stmt.query_map(params![now, all], |r| {
        Ok(SilenceRow {
            id: r.get(0)?,
            matchers: r.get(1)?,
            starts_ms: r.get(2)?,
            ends_ms: r.get(3)?,
            comment: r.get(4)?,
            created_by: r.get(5)?,
            created_ms: r.get(6)?,
            expired_ms: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Ends a silence now. `Ok(false)` when there is no such live silence.
pub fn expire(conn: &Connection, id: i64, now: TsMs) -> Result<bool, StoreError> {
    let n = conn.execute(
        "UPDATE silences SET expired_ms = ?2 WHERE id = ?1 AND expired_ms IS NULL AND ends_ms > ?2",
        params![id, now],
    )?;
    Ok(n > 0)
}
