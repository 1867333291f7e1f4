//! The audit of GPU setting changes (`gpu_audit_log`, migration 0014; public view
//! `gpu_audit`): written by `gpuwatch gpu set` around every write it attempts, by the daemon's
//! writer for changes it observed that no `gpu set` row explains, read by `gpuwatch gpu audit`.
//!
//! Invariants:
//! - A `gpu set` row is inserted as `attempted` BEFORE the NVML write and updated with the
//!   outcome after it, so a write whose outcome never came back stays visible as `attempted`.
//! - An observed change (who = `observed`, uid NULL) is recorded only when no row of a user
//!   (uid NOT NULL) that was not refused set the same GPU's same setting to the observed value
//!   after the daemon's previous read (less [`EXPLAIN_SLACK_MS`]): what `gpu set` did is
//!   audited once, under its user.
//! - Rows are never deleted.

use rusqlite::{Connection, params};
use serde::Serialize;

use super::{Store, StoreError};
use crate::model::{SettingChange, TsMs};

/// A write about to be attempted.
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    pub ts_ms: TsMs,
    pub gpu_uuid: &'a str,
    pub gpu_index: u32,
    pub who: &'a str,
    pub uid: u32,
    pub setting: &'a str,
    pub old: Option<&'a str>,
    pub new: &'a str,
}

/// How an attempted write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
    /// The call did not answer in time: it may or may not have taken effect.
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }
}

impl Store {
    /// Records a write about to be attempted; returns the row's id for [`Store::audit_outcome`].
    /// A GPU the database has not seen yet gets a bare inventory row (the daemon fills it).
    pub fn audit_attempt(&mut self, a: &Attempt<'_>) -> Result<i64, StoreError> {
        let gpu_id: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO gpus (host_id, uuid, gpu_index, first_seen_ms, last_seen_ms)
                 VALUES (?1, ?2, ?3, ?4, ?4)
                 ON CONFLICT (host_id, uuid) DO UPDATE SET
                   gpu_index = coalesce(gpu_index, excluded.gpu_index)
                 RETURNING id",
            )?
            .query_row(
                params![self.host_id, a.gpu_uuid, a.gpu_index, a.ts_ms],
                |r| r.get(0),
            )?;
        self.conn
            .prepare_cached(
                "INSERT INTO gpu_audit_log (ts_ms, gpu_id, who, uid, setting, old_value,
                   new_value, result)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'attempted')",
            )?
            .execute(params![
                a.ts_ms, gpu_id, a.who, a.uid, a.setting, a.old, a.new
            ])?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records how the attempt `id` ended (`error`: NVML's code and what it means).
    pub fn audit_outcome(
        &self,
        id: i64,
        result: Outcome,
        error: Option<&str>,
        done_ms: TsMs,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE gpu_audit_log SET result = ?2, error = ?3, done_ms = ?4 WHERE id = ?1",
            )?
            .execute(params![id, result.as_str(), error, done_ms])?;
        Ok(())
    }
}

/// How much earlier than the daemon's previous read a `gpu set` row may be and still explain
/// a change: the read carries its tick's time, and the driver answers a little after it, so a
/// write attempted just before the tick can land after the read.
pub const EXPLAIN_SLACK_MS: TsMs = 2_000;

/// Records a change the daemon observed on `gpu_id`, unless a user's row explains it.
pub(super) fn observed(
    conn: &Connection,
    gpu_id: i64,
    c: &SettingChange,
) -> Result<usize, StoreError> {
    Ok(conn
        .prepare_cached(
            "INSERT INTO gpu_audit_log (ts_ms, gpu_id, who, uid, setting, old_value, new_value,
               result, done_ms)
             SELECT ?1, ?2, 'observed', NULL, ?3, ?4, ?5, 'ok', ?1
             WHERE NOT EXISTS (
               SELECT 1 FROM gpu_audit_log
               WHERE gpu_id = ?2 AND setting = ?3 AND uid IS NOT NULL AND new_value = ?5
                 AND result IN ('attempted', 'ok', 'unknown') AND ts_ms > ?6)",
        )?
        .execute(params![
            c.ts_ms, gpu_id, c.setting, c.old, c.new, c.since_ms
        ])?)
}

/// One row of the `gpu_audit` view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRow {
    pub audit_id: i64,
    pub ts_ms: TsMs,
    pub host: String,
    pub gpu_uuid: String,
    pub gpu_index: Option<u32>,
    pub who: String,
    pub uid: Option<u32>,
    pub setting: String,
    pub old_value: Option<String>,
    pub new_value: String,
    pub result: String,
    pub error: Option<String>,
    pub done_ms: Option<TsMs>,
}

/// Which rows `gpu audit` shows.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// `[from, to)`.
    pub range: Option<(TsMs, TsMs)>,
    pub host: Option<String>,
    /// A GPU index or UUID.
    pub gpu: Option<String>,
}

/// The audit rows matching `f`, oldest first.
pub fn list(conn: &Connection, f: &AuditFilter) -> Result<Vec<AuditRow>, StoreError> {
    let (from, to) = f.range.unwrap_or((TsMs::MIN, TsMs::MAX));
    let mut stmt = conn.prepare(
        "SELECT audit_id, ts_ms, host, gpu_uuid, gpu_index, who, uid, setting, old_value,
           new_value, result, error, done_ms
         FROM gpu_audit
         WHERE ts_ms >= ?1 AND ts_ms < ?2 AND (?3 IS NULL OR host = ?3)
           AND (?4 IS NULL OR gpu_uuid = ?4 COLLATE NOCASE OR CAST(gpu_index AS TEXT) = ?4)
         ORDER BY ts_ms, audit_id",
    )?;
    let rows = stmt.query_map(params![from, to, f.host, f.gpu], |r| {
        Ok(AuditRow {
            audit_id: r.get(0)?,
            ts_ms: r.get(1)?,
            host: r.get(2)?,
            gpu_uuid: r.get(3)?,
            gpu_index: r.get(4)?,
            who: r.get(5)?,
            uid: r.get(6)?,
            setting: r.get(7)?,
            old_value: r.get(8)?,
            new_value: r.get(9)?,
            result: r.get(10)?,
            error: r.get(11)?,
            done_ms: r.get(12)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TickBatch;
    use crate::store::{StoreConfig, open};

    const UUID: &str = "GPU-0000";

    fn change(ts_ms: TsMs, new: &str, since_ms: TsMs) -> TickBatch {
        TickBatch {
            ts_ms,
            setting_changes: vec![SettingChange {
                ts_ms,
                gpu_uuid: UUID.into(),
                setting: "power_limit".into(),
                old: "700 W".into(),
                new: new.into(),
                since_ms,
            }],
            ..TickBatch::default()
        }
    }

    fn attempt(st: &mut Store, ts_ms: TsMs, new: &str, outcome: Outcome) {
        let id = st
            .audit_attempt(&Attempt {
                ts_ms,
                gpu_uuid: UUID,
                gpu_index: 0,
                who: "alice",
                uid: 1000,
                setting: "power_limit",
                old: Some("700 W"),
                new,
            })
            .unwrap();
        st.audit_outcome(id, outcome, None, ts_ms + 5).unwrap();
    }

    fn whos(st: &Store) -> Vec<(String, String, String)> {
        list(st.conn(), &AuditFilter::default())
            .unwrap()
            .into_iter()
            .map(|r| (r.who, r.new_value, r.result))
            .collect()
    }

    #[test]
    fn only_changes_no_user_row_explains_are_recorded_as_observed() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = open(&dir.path().join("a.db"), &StoreConfig::new("n1")).unwrap();
        let t = 1_700_000_000_000;
        // A user's write after the previous read explains the change.
        attempt(&mut st, t + 10_000, "500 W", Outcome::Ok);
        st.write_tick(&change(t + 20_000, "500 W", t + 5_000))
            .unwrap();
        // A refused write, a write of another value, and one long before the previous read
        // do not.
        attempt(&mut st, t + 30_000, "450 W", Outcome::Failed);
        st.write_tick(&change(t + 40_000, "450 W", t + 25_000))
            .unwrap();
        st.write_tick(&change(t + 50_000, "400 W", t + 45_000))
            .unwrap();
        st.write_tick(&change(t + 90_000, "500 W", t + 60_000))
            .unwrap();
        assert_eq!(
            whos(&st),
            vec![
                ("alice".into(), "500 W".into(), "ok".into()),
                ("alice".into(), "450 W".into(), "failed".into()),
                ("observed".into(), "450 W".into(), "ok".into()),
                ("observed".into(), "400 W".into(), "ok".into()),
                ("observed".into(), "500 W".into(), "ok".into()),
            ]
        );
        let rows = list(st.conn(), &AuditFilter::default()).unwrap();
        assert_eq!((rows[2].uid, rows[2].gpu_index), (None, Some(0)));
        let only = AuditFilter {
            range: Some((t + 40_000, t + 50_000)),
            ..AuditFilter::default()
        };
        assert_eq!(list(st.conn(), &only).unwrap().len(), 1);
    }
}
