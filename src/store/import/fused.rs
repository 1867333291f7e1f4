//! Rollups computed while an import is parsed: each parsed sample is also added to its GPU's
//! minute ([`MinuteRollups::add`], with `rollup::Acc`, the accumulator of the live rollups) on
//! the parsing thread, and each finished minute is staged in `temp.gw_imp_rollups` with the
//! rows. The publish then writes those minutes instead of reading the published samples back
//! (`rollup_host` over the imported range, a quarter of a week-long import).
//!
//! Invariants:
//! - Staged minutes are only used where they equal what `rollup_host` would compute after the
//!   publish: a GPU's rows arrived in strictly increasing time (no row replaced another, every
//!   minute closed before the next began), and the host had no stored sample in the imported
//!   minutes before the publish (checked inside the publish transaction). A host where either
//!   fails is rolled up from the published rows, as before.
//! - The staged minutes of a GPU whose order broke are left unused, never patched.

use rusqlite::{Connection, Statement, params};

use super::super::StoreError;
use super::super::rollup::{self, Acc, ceil_minute, floor_minute};
use crate::model::{GpuSample, TsMs};

/// Creates (or empties) the staging table of finished minutes; `gpu_id` holds importer-local
/// GPU ids.
pub(super) const CREATE_SQL: &str =
    "CREATE TEMP TABLE IF NOT EXISTS gw_imp_rollups AS SELECT * FROM main.rollups_1m WHERE 0;
     DELETE FROM gw_imp_rollups;";

pub(super) const DROP_SQL: &str = "DROP TABLE IF EXISTS temp.gw_imp_rollups;";

/// One GPU's staged rows so far.
#[derive(Debug, Clone, Default)]
struct Track {
    /// The newest sample time.
    last: Option<TsMs>,
    /// The open minute and its aggregate.
    open: Option<(TsMs, Acc)>,
    /// A row did not come after the one before it: the staged minutes are not used.
    broken: bool,
    /// Rows added.
    rows: u64,
}

/// A finished minute of one GPU, to be staged ([`super::Staging::minute`]).
#[derive(Debug, Clone)]
pub struct StagedMinute {
    minute: TsMs,
    /// Its `gpu_id` is the importer-local GPU id.
    acc: Acc,
}

impl StagedMinute {
    /// Writes it with `insert` (a statement of `rollup::insert_sql("temp.gw_imp_rollups")`).
    pub(super) fn write(&self, insert: &mut Statement<'_>) -> Result<(), StoreError> {
        self.acc.write(insert, self.minute)
    }
}

/// The minutes of one import's samples, in the order they are parsed.
#[derive(Debug, Default)]
pub struct MinuteRollups {
    gpus: Vec<Track>,
}

impl MinuteRollups {
    /// Adds a sample of importer-local GPU `gpu`; returns the minute it finished, if any.
    pub fn add(&mut self, gpu: usize, s: &GpuSample) -> Option<StagedMinute> {
        if self.gpus.len() <= gpu {
            self.gpus.resize_with(gpu + 1, Track::default);
        }
        let t = &mut self.gpus[gpu];
        t.rows += 1;
        if t.broken {
            return None;
        }
        let ts = s.ts_ms;
        if t.last.is_some_and(|last| ts <= last) {
            t.broken = true;
            t.open = None;
            return None;
        }
        t.last = Some(ts);
        let minute = floor_minute(ts);
        let values = rollup::sample_values(s);
        match &mut t.open {
            Some((m, acc)) if *m == minute => {
                acc.add(s.status.as_i64(), &values);
                None
            }
            open => {
                let mut acc = Acc::new(i64::try_from(gpu).unwrap_or(i64::MAX));
                acc.add(s.status.as_i64(), &values);
                open.replace((minute, acc))
                    .map(|(minute, acc)| StagedMinute { minute, acc })
            }
        }
    }

    /// The minutes still open (parsing is over).
    pub fn finish(&mut self) -> Vec<StagedMinute> {
        self.gpus
            .iter_mut()
            .filter_map(|t| t.open.take())
            .map(|(minute, acc)| StagedMinute { minute, acc })
            .collect()
    }

    /// Whether the staged minutes of GPU `gpu`, which has `staged` sample rows, can be used:
    /// its order held, and every staged row was added here.
    fn usable(&self, gpu: usize, staged: u64) -> bool {
        match self.gpus.get(gpu) {
            None => staged == 0,
            Some(t) => !t.broken && t.rows == staged,
        }
    }

    /// Inside the publish transaction, before the samples are published: whether the host
    /// `host_id`, whose importer-local GPUs are `locals` and whose imported rows (samples and
    /// processes) span `span`, can take its staged minutes; `staged[g]`: the sample rows
    /// staged for GPU `g`. The check covers the minutes
    /// [`Store::import_rollups`](super::super::Store::import_rollups) would otherwise
    /// recompute.
    pub(super) fn host_usable(
        &self,
        conn: &Connection,
        host_id: i64,
        locals: &[usize],
        span: Option<(TsMs, TsMs)>,
        staged: &[u64],
    ) -> Result<bool, StoreError> {
        let Some((first, last)) = span else {
            return Ok(false);
        };
        if !locals
            .iter()
            .all(|&g| self.usable(g, staged.get(g).copied().unwrap_or(0)))
        {
            return Ok(false);
        }
        let (from, to) = (floor_minute(first), ceil_minute(last + 1));
        let stored: bool = conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM samples WHERE ts_ms >= ?1 AND ts_ms < ?2
                   AND gpu_id IN (SELECT id FROM gpus WHERE host_id = ?3))",
            )?
            .query_row(params![from, to, host_id], |r| r.get(0))?;
        Ok(!stored)
    }
}

/// Publishes the staged minutes of importer-local GPU `local` as GPU `gpu_id`; returns the
/// rows written.
pub(super) fn publish_gpu(
    conn: &Connection,
    local: usize,
    gpu_id: i64,
) -> Result<usize, StoreError> {
    let rest = &rollup::COLUMNS[2..];
    let sql = format!(
        "INSERT OR REPLACE INTO rollups_1m (uuid_id, {}) SELECT {}, ts_ms, ?2, {}
         FROM gw_imp_rollups WHERE gpu_id = ?1 ORDER BY ts_ms",
        rollup::COLUMNS.join(", "),
        rollup::UUID_ID_OF_GPU_2,
        rest.join(", ")
    );
    let n = conn
        .prepare_cached(&sql)?
        .execute(params![i64::try_from(local).unwrap_or(i64::MAX), gpu_id])?;
    Ok(n)
}
