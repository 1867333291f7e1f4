//! Writing what the training fetcher produced: points (through the tick path, so series ids,
//! host bounds and retention work as for sampled ticks) and the per-role status rows of
//! `training_source` (migration 0004), in one transaction.
//!
//! Invariants:
//! - Points and status of one poll commit together: a status never claims points that are
//!   not stored.
//! - A re-fetched point (poll overlap) replaces the stored one: `training_samples`' primary
//!   key `(ts_ms, series_id)` dedups, so overlapping polls never duplicate rows.
//! - Status times only move forward (`max`), so a backfill of an old range cannot make a
//!   source look older than it is; `consecutive_failures` counts polls in arrival order.

use rusqlite::{Connection, params};

use super::write::WriteStats;
use super::{Store, StoreError};
use crate::model::{TickBatch, TrainingSourceUpdate, TrainingWrite};

impl Store {
    /// Writes one poll's points and source status in one transaction, then runs one bounded
    /// maintenance step (as [`Store::write_tick`]).
    pub fn write_training(&mut self, w: &TrainingWrite) -> Result<WriteStats, StoreError> {
        let batches = match w.points.iter().map(|p| p.ts_ms).min() {
            Some(oldest) => vec![TickBatch {
                ts_ms: oldest,
                training: w.points.clone(),
                ..TickBatch::default()
            }],
            None => Vec::new(),
        };
        self.write_with_sources(&batches, &w.sources)
    }
}

/// Upserts one role's status row (inside the caller's transaction).
pub(super) fn upsert_source(
    conn: &Connection,
    host_id: i64,
    u: &TrainingSourceUpdate,
) -> Result<(), StoreError> {
    match &u.error {
        None => {
            let nonempty = (u.points > 0).then_some(u.at_ms);
            conn.prepare_cached(
                "INSERT INTO training_source (host_id, role, query, last_attempt_ms,
                   last_success_ms, last_nonempty_ms, last_point_ms, last_series,
                   consecutive_failures, skipped_non_finite)
                 VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, 0, ?8)
                 ON CONFLICT (host_id, role) DO UPDATE SET
                   query = excluded.query,
                   last_attempt_ms = max(last_attempt_ms, excluded.last_attempt_ms),
                   last_success_ms = max(coalesce(last_success_ms, excluded.last_success_ms),
                                         excluded.last_success_ms),
                   last_nonempty_ms = coalesce(max(last_nonempty_ms, excluded.last_nonempty_ms),
                                               last_nonempty_ms, excluded.last_nonempty_ms),
                   last_point_ms = coalesce(max(last_point_ms, excluded.last_point_ms),
                                            last_point_ms, excluded.last_point_ms),
                   last_series = excluded.last_series,
                   consecutive_failures = 0,
                   skipped_non_finite = skipped_non_finite + excluded.skipped_non_finite",
            )?
            .execute(params![
                host_id,
                u.role,
                u.query,
                u.at_ms,
                nonempty,
                u.newest_point_ms,
                sat(u.series),
                sat(u.skipped_non_finite),
            ])?;
        }
        Some((kind, message)) => {
            conn.prepare_cached(
                "INSERT INTO training_source (host_id, role, query, last_attempt_ms,
                   last_error_ms, last_error_kind, last_error, consecutive_failures)
                 VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, 1)
                 ON CONFLICT (host_id, role) DO UPDATE SET
                   query = excluded.query,
                   last_attempt_ms = max(last_attempt_ms, excluded.last_attempt_ms),
                   last_error_ms = max(coalesce(last_error_ms, excluded.last_error_ms),
                                       excluded.last_error_ms),
                   last_error_kind = excluded.last_error_kind,
                   last_error = excluded.last_error,
                   consecutive_failures = consecutive_failures + 1",
            )?
            .execute(params![host_id, u.role, u.query, u.at_ms, kind, message])?;
        }
    }
    Ok(())
}

fn sat(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TrainingPoint;
    use crate::store::{StoreConfig, open, read};

    fn update(at_ms: i64, error: Option<&str>, points: u64) -> TrainingSourceUpdate {
        TrainingSourceUpdate {
            role: "step".into(),
            query: "training_step".into(),
            at_ms,
            error: error.map(|k| (k.to_string(), format!("{k} happened"))),
            series: points.min(1),
            points,
            skipped_non_finite: 1,
            newest_point_ms: (points > 0).then_some(at_ms - 1000),
        }
    }

    #[test]
    fn status_rows_follow_successes_failures_and_backfills() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut st = open(&dir.path().join("g.db"), &StoreConfig::new("h")).expect("open");
        let point = |ts_ms| TrainingPoint {
            ts_ms,
            name: "training_step".into(),
            labels: vec![("rank".into(), "0".into())],
            value: 1.0,
        };
        let mut write = |u: TrainingSourceUpdate, points: Vec<TrainingPoint>| {
            st.write_training(&TrainingWrite {
                points,
                sources: vec![u],
            })
            .expect("write");
            read::training_sources(st.conn(), Some("h"))
                .expect("read")
                .remove(0)
        };
        let r = write(update(10_000, None, 1), vec![point(9_000)]);
        assert_eq!(
            (r.last_success_ms, r.last_nonempty_ms),
            (Some(10_000), Some(10_000))
        );
        let r = write(update(20_000, Some("timeout"), 0), vec![]);
        let r2 = write(update(30_000, Some("unreachable"), 0), vec![]);
        assert_eq!(r.consecutive_failures, 1);
        assert_eq!(r2.consecutive_failures, 2);
        assert_eq!(r2.last_error_kind.as_deref(), Some("unreachable"));
        assert_eq!(r2.last_success_ms, Some(10_000));
        // An empty answer is a success that keeps the last non-empty time.
        let r = write(update(40_000, None, 0), vec![]);
        assert_eq!(
            (r.consecutive_failures, r.last_success_ms),
            (0, Some(40_000))
        );
        assert_eq!(
            (r.last_nonempty_ms, r.last_point_ms),
            (Some(10_000), Some(9_000))
        );
        // A backfill of an old range never moves the times back.
        let r = write(update(5_000, None, 1), vec![point(4_000), point(9_000)]);
        assert_eq!(
            (r.last_success_ms, r.last_nonempty_ms),
            (Some(40_000), Some(10_000))
        );
        assert_eq!(
            (r.last_attempt_ms, r.skipped_non_finite),
            (40_000, 3),
            "successes only"
        );
        let n: i64 = st
            .conn()
            .query_row("SELECT count(*) FROM training_samples", [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 2, "the re-fetched point replaced the stored one");
    }
}
