//! Writing ticks: one `BEGIN IMMEDIATE` transaction per call (rows in `rows.rs`), then a
//! bounded maintenance step; and the id caches that make a tick cheap.
//!
//! Invariants:
//! - A batch is all-or-nothing. The in-memory id caches (GPU uuid, process identity, training
//!   series → row id) only hold ids of committed rows: they are dropped and reloaded whenever
//!   a write fails, because a rolled-back transaction takes its new ids with it.
//! - On SQLITE_FULL the write is retried once after freeing space; if it still fails, the
//!   caller gets [`StoreError::Full`]: the newest tick is never dropped silently.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};

use super::bounds::MaintenanceStats;
use super::rows::TickWriter;
use super::{Store, StoreError};
use crate::model::{TickBatch, TrainingSourceUpdate, TsMs};

/// `processes.last_seen_ms` is rewritten at most this often per process (it is a hint for
/// garbage collection; the exact times are in `process_samples`).
pub(super) const PROCESS_SEEN_RESOLUTION_MS: i64 = 60_000;

/// What one [`Store::write_tick`] / [`Store::write_ticks`] call did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteStats {
    /// Rows inserted or updated by the batch transaction.
    pub rows: usize,
    /// Time spent in the batch transaction (including commit).
    pub write_time: Duration,
    /// Total time of the call, including maintenance.
    pub total_time: Duration,
    /// True when the first attempt hit SQLITE_FULL and the retry succeeded.
    pub retried_after_full: bool,
    /// What the maintenance step after the write did.
    pub maintenance: MaintenanceStats,
    /// The maintenance step's error, if any: the batch itself is committed regardless.
    pub maintenance_error: Option<String>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct ProcEntry {
    pub(super) id: i64,
    /// The `last_seen_ms` last written for the process.
    pub(super) last_seen_written: TsMs,
    /// Its pod's name is stored (it may arrive after the process: the kubelet answers late).
    pub(super) pod_named: bool,
}

/// Row ids of the store's own host, valid for committed rows only.
#[derive(Debug, Default)]
pub(super) struct Caches {
    pub(super) gpus: HashMap<String, i64>,
    pub(super) procs: HashMap<(u32, TsMs), ProcEntry>,
    pub(super) series: HashMap<(String, String), i64>,
}

impl Caches {
    pub(super) fn load(&mut self, conn: &Connection, host_id: i64) -> Result<(), StoreError> {
        *self = Caches::default();
        // Ids loaded before an error are still valid: they are all committed rows.
        let mut stmt = conn.prepare_cached("SELECT uuid, id FROM gpus WHERE host_id = ?1")?;
        for row in stmt.query_map([host_id], |r| Ok((r.get(0)?, r.get(1)?)))? {
            let (uuid, id) = row?;
            self.gpus.insert(uuid, id);
        }
        let mut stmt = conn.prepare_cached(
            "SELECT name, labels_json, id FROM training_series WHERE host_id = ?1",
        )?;
        for row in stmt.query_map([host_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))? {
            let (name, labels, id) = row?;
            self.series.insert((name, labels), id);
        }
        Ok(())
    }

    /// Forgets processes not seen since `cutoff_ms` (their rows may be garbage collected).
    pub(super) fn forget_processes_before(&mut self, cutoff_ms: TsMs) {
        self.procs.retain(|_, e| e.last_seen_written >= cutoff_ms);
    }
}

/// Returns the id of `name` in `hosts`, inserting it if needed.
pub(super) fn ensure_host(conn: &Connection, name: &str) -> Result<i64, StoreError> {
    if let Some(id) = conn
        .query_row("SELECT id FROM hosts WHERE name = ?1", [name], |r| r.get(0))
        .optional()?
    {
        return Ok(id);
    }
    Ok(conn.query_row(
        "INSERT INTO hosts (name) VALUES (?1)
         ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id",
        params![name],
        |r| r.get(0),
    )?)
}

impl Store {
    /// The newest tick time stored for this store's host (`hosts.last_seen_ms`).
    pub fn host_last_seen_ms(&self) -> Result<Option<TsMs>, StoreError> {
        Ok(self.conn.query_row(
            "SELECT last_seen_ms FROM hosts WHERE id = ?1",
            [self.host_id],
            |r| r.get(0),
        )?)
    }

    /// Writes one tick in one transaction, then runs one bounded maintenance step
    /// (rollups of completed minutes, retention, size bound).
    pub fn write_tick(&mut self, batch: &TickBatch) -> Result<WriteStats, StoreError> {
        self.write_ticks(std::slice::from_ref(batch))
    }

    /// Writes many ticks in one transaction (imports, catching up), then runs one bounded
    /// maintenance step. Use [`Store::maintain_fully`] after a large import.
    pub fn write_ticks(&mut self, batches: &[TickBatch]) -> Result<WriteStats, StoreError> {
        self.write_with_sources(batches, &[])
    }

    /// [`Store::write_ticks`] plus `training_source` status rows, in the same transaction.
    pub(super) fn write_with_sources(
        &mut self,
        batches: &[TickBatch],
        sources: &[TrainingSourceUpdate],
    ) -> Result<WriteStats, StoreError> {
        let start = Instant::now();
        let mut stats = WriteStats::default();
        stats.rows = match self.insert_batches(batches, sources) {
            Ok(rows) => rows,
            Err(e) if e.is_full() => {
                if self.disk_full_at_write()? {
                    tracing::debug!(error = %e, "disk full; deleting old data and retrying");
                } else {
                    tracing::warn!(error = %e, "database full; deleting old data and retrying");
                }
                self.reload_caches();
                self.free_space_emergency()?;
                match self.insert_batches(batches, sources) {
                    Ok(rows) => {
                        stats.retried_after_full = true;
                        rows
                    }
                    Err(e) => {
                        self.reload_caches();
                        if e.is_full() {
                            return Err(StoreError::Full {
                                max_db_size: self.cfg.max_db_size,
                            });
                        }
                        return Err(e);
                    }
                }
            }
            Err(e) => {
                self.reload_caches();
                return Err(e);
            }
        };
        stats.write_time = start.elapsed();
        match self.maintain_step() {
            Ok(m) => stats.maintenance = m,
            Err(e) => {
                tracing::warn!(error = %e, "store maintenance failed; will retry next tick");
                stats.maintenance_error = Some(e.to_string());
            }
        }
        if let Err(e) = self.disk_space_back() {
            tracing::debug!(error = %e, "disk-full check failed; will retry");
        }
        stats.total_time = start.elapsed();
        Ok(stats)
    }

    /// After a failed transaction: its new ids are gone, so forget every cached id.
    fn reload_caches(&mut self) {
        if let Err(e) = self.caches.load(&self.conn, self.host_id) {
            // Leaves the caches empty: ids are then looked up (upserted) again.
            tracing::warn!(error = %e, "reloading the store's id caches failed");
        }
    }

    fn insert_batches(
        &mut self,
        batches: &[TickBatch],
        sources: &[TrainingSourceUpdate],
    ) -> Result<usize, StoreError> {
        let host_id = self.host_id;
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut w = TickWriter::new(&tx, host_id, &mut self.caches);
        for batch in batches {
            w.batch(batch)?;
        }
        for source in sources {
            super::training::upsert_source(&tx, host_id, source)?;
            w.rows += 1;
        }
        w.finish()?;
        let (rows, newest) = (w.rows, w.newest());
        tx.commit()?;
        if newest > self.maint.own_newest {
            self.maint.own_newest = newest;
        }
        Ok(rows)
    }
}
