//! Maintenance after each write: rollups, retention per host, and the `max_db_size` bound.
//!
//! Invariants:
//! - Every step is bounded: at most [`DELETE_BATCH_ROWS`] rows scanned per table and host,
//!   each step in its own short transaction, so sampling never waits on maintenance.
//! - Retention counts back from the newest timestamp of each host (`hosts.last_seen_ms`):
//!   imported history of another host is not deleted because this host's clock is later.
//!   Raw rows (`samples`, `process_samples`, `training_samples`) older than
//!   `last_seen - retention` go, at the latest [`RETENTION_SLACK_MS`] after they expire (the
//!   live path deletes a minute at a time); rollups and events after `rollup_retention`.
//! - Size (`size.rs`): checked first in every step, so that the per-minute work has room.
//! - Raw samples are rolled up before they are deleted (see `rollup::ensure_rolled_up`).

use std::collections::HashMap;

use rusqlite::{Connection, TransactionBehavior, params};

use super::rollup::{self, HostRow};
use super::write::PROCESS_SEEN_RESOLUTION_MS;
use super::{HIGH_WATER, Store, StoreConfig, StoreError, size};
use crate::model::TsMs;

/// Rows deleted at most per table, host and step.
pub(super) const DELETE_BATCH_ROWS: i64 = 4_000;
/// The live path lets expired raw rows accumulate for this long, then deletes them at once.
pub const RETENTION_SLACK_MS: i64 = 60_000;
/// Retention watermarks are forgotten every this many per-minute steps (about hourly).
const RESCAN_EVERY_STEPS: u64 = 60;

/// What maintenance did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintenanceStats {
    /// Rollup rows written.
    pub rollup_rows: usize,
    /// Raw rows deleted by retention.
    pub expired_raw: usize,
    /// Rollup, event and process rows deleted by retention.
    pub expired_other: usize,
    /// Raw rows deleted to honour `max_db_size`.
    pub size_deleted_raw: usize,
    /// Rollup and event rows deleted to honour `max_db_size` (only once no raw row is left).
    pub size_deleted_rollups: usize,
    /// Used bytes after the step.
    pub used_bytes: u64,
    /// True when work is left over for the next step.
    pub backlog: bool,
}

impl MaintenanceStats {
    fn add(&mut self, o: &MaintenanceStats) {
        self.rollup_rows += o.rollup_rows;
        self.expired_raw += o.expired_raw;
        self.expired_other += o.expired_other;
        self.size_deleted_raw += o.size_deleted_raw;
        self.size_deleted_rollups += o.size_deleted_rollups;
        self.used_bytes = o.used_bytes;
        self.backlog = o.backlog;
    }
}

/// Tables with a leading `ts_ms` key that maintenance deletes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Table {
    Samples,
    ProcessSamples,
    TrainingSamples,
    Rollups,
    Events,
    Usage,
}

pub(super) const RAW: [Table; 3] = [
    Table::Samples,
    Table::ProcessSamples,
    Table::TrainingSamples,
];
pub(super) const AGGREGATED: [Table; 3] = [Table::Rollups, Table::Events, Table::Usage];

impl Table {
    pub(super) fn name(self) -> &'static str {
        match self {
            Table::Samples => "samples",
            Table::ProcessSamples => "process_samples",
            Table::TrainingSamples => "training_samples",
            Table::Rollups => "rollups_1m",
            Table::Events => "events",
            Table::Usage => "usage_intervals",
        }
    }

    /// SQL condition selecting the rows of host `?3`.
    fn host_filter(self) -> &'static str {
        match self {
            Table::Samples | Table::ProcessSamples | Table::Rollups | Table::Usage => {
                "gpu_id IN (SELECT id FROM gpus WHERE host_id = ?3)"
            }
            Table::TrainingSamples => {
                "series_id IN (SELECT id FROM training_series WHERE host_id = ?3)"
            }
            Table::Events => "host_id = ?3",
        }
    }
}

/// Progress kept between steps (in memory; rebuilt cheaply after a restart).
#[derive(Debug, Default)]
pub(super) struct MaintState {
    /// Newest timestamp this store has written for its own host.
    pub(super) own_newest: Option<TsMs>,
    /// The minute of `own_newest` when the per-minute work last ran.
    last_minute: Option<TsMs>,
    backlog: bool,
    slow_steps: u64,
    /// Per (aggregated table, host): no expired row of that host is older than this.
    retention_lo: HashMap<(Table, i64), TsMs>,
}

impl MaintState {
    /// The first step after opening does the per-minute work (catch-up after a restart or
    /// an upgrade).
    pub(super) fn new() -> Self {
        Self {
            backlog: true,
            ..Self::default()
        }
    }
}

pub(super) fn oldest(conn: &Connection, t: Table) -> Result<Option<TsMs>, StoreError> {
    rollup::ts_at_offset(conn, t.name(), i64::MIN, 0)
}

pub(super) fn newest(conn: &Connection, t: Table) -> Result<Option<TsMs>, StoreError> {
    let sql = format!("SELECT max(ts_ms) FROM {}", t.name());
    Ok(conn.prepare_cached(&sql)?.query_row([], |r| r.get(0))?)
}

/// Deletes rows of `t` with `from <= ts_ms < to`, of one host or of all.
pub(super) fn delete_range(
    conn: &Connection,
    t: Table,
    from: TsMs,
    to: TsMs,
    host: Option<i64>,
) -> Result<usize, StoreError> {
    let n = match host {
        Some(h) => {
            let sql = format!(
                "DELETE FROM {} WHERE ts_ms >= ?1 AND ts_ms < ?2 AND {}",
                t.name(),
                t.host_filter()
            );
            conn.prepare_cached(&sql)?.execute(params![from, to, h])?
        }
        None => {
            let sql = format!("DELETE FROM {} WHERE ts_ms >= ?1 AND ts_ms < ?2", t.name());
            conn.prepare_cached(&sql)?.execute(params![from, to])?
        }
    };
    Ok(n)
}

/// The end of the next batch starting at `lo`: at most [`DELETE_BATCH_ROWS`] rows of `t`
/// (fewer if many rows share a timestamp: then all rows at `lo`).
fn batch_end(conn: &Connection, t: Table, lo: TsMs, limit: TsMs) -> Result<TsMs, StoreError> {
    let end = match rollup::ts_at_offset(conn, t.name(), lo, DELETE_BATCH_ROWS)? {
        Some(ts) => ts.min(limit),
        None => limit,
    };
    Ok(if end <= lo { lo + 1 } else { end })
}

impl Store {
    /// One bounded maintenance step; [`Store::write_tick`] runs it after every write.
    /// Rollups, retention and process garbage collection run once per minute of the own
    /// host's clock (or again at once while a backlog remains); the size check every time.
    pub fn maintain_step(&mut self) -> Result<MaintenanceStats, StoreError> {
        self.maintain(false)
    }

    /// Runs maintenance until nothing is left to do: every completed minute rolled up, no
    /// expired row left (without the live path's slack), the size under the bound. For
    /// imports, the CLI and tests; each step is still its own short transaction.
    pub fn maintain_fully(&mut self) -> Result<MaintenanceStats, StoreError> {
        let mut total = MaintenanceStats::default();
        loop {
            let s = self.maintain(true)?;
            total.add(&s);
            if !s.backlog {
                return Ok(total);
            }
        }
    }

    fn maintain(&mut self, full: bool) -> Result<MaintenanceStats, StoreError> {
        let mut st = MaintenanceStats::default();
        // Space first: if the file is at its cap, the per-minute work below needs room.
        let high = (self.cfg.max_db_size as f64 * HIGH_WATER) as u64;
        let mut used = Some(self.usage()?.used_bytes);
        if used.is_some_and(|u| u > high) {
            used = None;
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = size::size_step(&tx, &mut st, high)?;
            tx.commit()?;
            // More to do next time (maintain_fully loops on it) unless nothing is deletable.
            st.backlog |= self.usage()?.used_bytes > high && n > 0;
        }
        let minute = self.maint.own_newest.map(rollup::floor_minute);
        if full || self.maint.backlog || self.maint.last_minute != minute {
            let Store {
                conn,
                cfg,
                host_id,
                caches,
                maint,
                ..
            } = self;
            maint.last_minute = minute;
            // Until this step succeeds, the next one tries again.
            maint.backlog = true;
            maint.slow_steps += 1;
            if maint.slow_steps % RESCAN_EVERY_STEPS == 0 {
                // Rollups written below a watermark by another process (an import of
                // older data) are found by starting over now and then.
                maint.retention_lo.clear();
            }
            used = None;
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let hosts = rollup::load_hosts(&tx)?;
            let (rows, mut backlog) = rollup::advance(&tx, &hosts, full)?;
            st.rollup_rows += rows;
            let hosts = rollup::load_hosts(&tx)?;
            let mut ctx = Expire {
                conn: &tx,
                cfg,
                maint,
                full,
                st: &mut st,
            };
            for h in &hosts {
                backlog |= ctx.host(h)?;
                if h.id == *host_id {
                    caches.forget_processes_before(ctx.proc_cutoff(h));
                }
            }
            tx.commit()?;
            self.maint.backlog = backlog;
            st.backlog |= backlog;
        }
        // Unchanged since the check above unless a step ran.
        st.used_bytes = match used {
            Some(u) => u,
            None => self.usage()?.used_bytes,
        };
        Ok(st)
    }
}

/// Retention of one maintenance step.
struct Expire<'a> {
    conn: &'a Connection,
    cfg: &'a StoreConfig,
    maint: &'a mut MaintState,
    full: bool,
    st: &'a mut MaintenanceStats,
}

impl Expire<'_> {
    fn raw_cutoff(&self, h: &HostRow) -> TsMs {
        h.last_seen_ms.saturating_sub(ms(self.cfg.retention))
    }

    /// Processes last seen before this have no process_samples left. The margin covers the
    /// resolution of `processes.last_seen_ms`.
    fn proc_cutoff(&self, h: &HostRow) -> TsMs {
        self.raw_cutoff(h) - 2 * PROCESS_SEEN_RESOLUTION_MS
    }

    /// Retention for one host; returns true when work is left.
    fn host(&mut self, h: &HostRow) -> Result<bool, StoreError> {
        let slack = if self.full { 0 } else { RETENTION_SLACK_MS };
        let conn = self.conn;
        let mut more = false;
        // Raw tables, one range for the three, starting at the host's persisted floor: rows
        // of other hosts below it (a large import) are never rescanned.
        let raw_cutoff = self.raw_cutoff(h);
        let floor = match h.raw_floor_ms.or(h.first_seen_ms) {
            Some(f) => Some(f),
            None => RAW.iter().try_fold(None, |acc, &t| {
                Ok::<_, StoreError>(opt_min(acc, oldest(conn, t)?))
            })?,
        };
        if let Some(lo) = floor.filter(|&lo| raw_cutoff.saturating_sub(lo) > slack) {
            let mut hi = raw_cutoff;
            for t in RAW {
                hi = hi.min(batch_end(conn, t, lo, raw_cutoff)?);
            }
            self.st.rollup_rows += rollup::ensure_rolled_up(conn, h, hi)?;
            for t in RAW {
                self.st.expired_raw += delete_range(conn, t, lo, hi, Some(h.id))?;
            }
            conn.prepare_cached(
                "UPDATE hosts SET raw_floor_ms = max(coalesce(raw_floor_ms, ?1), ?1) WHERE id = ?2",
            )?
            .execute(params![hi, h.id])?;
            more |= hi < raw_cutoff;
        }
        // Rollups and events: few rows; an in-memory watermark per table and host.
        let agg_cutoff = h.last_seen_ms.saturating_sub(ms(self.cfg.rollup_retention));
        for t in AGGREGATED {
            let lo = match self.maint.retention_lo.get(&(t, h.id)) {
                Some(&lo) => lo,
                None => match opt_max(oldest(conn, t)?, h.first_seen_ms) {
                    Some(lo) => lo,
                    None => continue,
                },
            };
            if agg_cutoff.saturating_sub(lo) <= slack {
                continue;
            }
            let hi = batch_end(conn, t, lo, agg_cutoff)?;
            self.st.expired_other += delete_range(conn, t, lo, hi, Some(h.id))?;
            self.maint.retention_lo.insert((t, h.id), hi);
            more |= hi < agg_cutoff;
        }
        self.st.expired_other += conn
            .prepare_cached(
                "DELETE FROM processes WHERE id IN (SELECT id FROM processes
                 WHERE host_id = ?1 AND last_seen_ms < ?2 LIMIT ?3)",
            )?
            .execute(params![h.id, self.proc_cutoff(h), DELETE_BATCH_ROWS])?;
        self.st.expired_other += conn
            .prepare_cached(
                "DELETE FROM metric_errors WHERE last_ms < ?2
                 AND gpu_id IN (SELECT id FROM gpus WHERE host_id = ?1)",
            )?
            .execute(params![h.id, agg_cutoff])?;
        Ok(more)
    }
}

fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn opt_min(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a.into_iter().chain(b).min()
}

pub(super) fn opt_max(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a.into_iter().chain(b).max()
}
