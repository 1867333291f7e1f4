//! Imports: staging rows in TEMP tables of the store's connection, publishing them in one
//! short IMMEDIATE transaction, then rolling the imported minutes up.
//!
//! Invariants:
//! - Staging writes only TEMP tables (a temporary file, inside a deferred transaction of this
//!   connection), so it never takes the main database's write lock: a running daemon keeps
//!   writing meanwhile, and memory stays bounded by the page caches whatever the log's size.
//! - [`Staging::publish`] writes hosts, GPUs, processes, samples and process samples in ONE
//!   IMMEDIATE transaction using `INSERT ... SELECT` from the staged rows: an import is
//!   all-or-nothing. Dropping a [`Staging`] without publishing discards everything. The
//!   publish costs about 1 µs per row (1 s per million samples on the benchmark machine).
//! - Staged rows use importer-local ids (GPU, process, GPU reference); publish maps them to
//!   row ids. Rows are upserted by their natural keys, so importing a log twice is harmless.
//! - Inventory from an import fills what the store lacks, and replaces stored values only
//!   when the import is at least as recent as the GPU's newest stored report.
//! - Each staged sample is also added to its GPU's minute (`fused.rs`); the publish writes
//!   those minutes where they equal a recomputation (rows in order, no stored samples in the
//!   imported minutes) and reports which hosts got them ([`Published::rollups`]).
//! - [`Store::import_rollups`] recomputes the 1-minute rollups of the imported range (plus any
//!   backlog before it; only the backlog where the publish wrote the range) in short
//!   transactions of at most [`ROLLUP_CHUNK_MS`] each and raises the host's rollup progress,
//!   so history, reports and retention see imported minutes.
//! - [`Store::forget_unused_host`] removes only a host row nothing refers to, so a failed
//!   import leaves no trace; callers use it only for a host they created.
//! - XIDs from saved kernel logs (`xids.rs`) are few: they are held in memory, not staged, and
//!   published in one IMMEDIATE transaction of their own ([`Store::publish_kernel_xids`]).

use rusqlite::{Connection, OptionalExtension, Statement, params};

mod fused;
mod publish;
mod xids;

pub use fused::{MinuteRollups, StagedMinute};
pub use xids::{KERNEL_DUPLICATE_MS, KernelXid, XidsPublished};

use super::rollup::{self, ceil_minute, floor_minute, rollup_host, set_done};
use super::rows::{sample_metric_columns, sample_params, sample_placeholders};
use super::{Store, StoreError};
use crate::model::{GpuHolder, GpuInventory, GpuSample, TrainingPoint, TsMs};
use publish::{publish_rows, sat};

/// `PRAGMA cache_size` (negative: KiB) while an import is staged and published, and after.
const IMPORT_CACHE_SIZE: i64 = -65_536;
const DEFAULT_CACHE_SIZE: i64 = -2_000;

/// The longest time range one rollup transaction of an import covers.
pub const ROLLUP_CHUNK_MS: i64 = 3_600_000;

const CREATE_SQL: &str = concat!(
    "CREATE TEMP TABLE IF NOT EXISTS gw_imp_samples (ts_ms INTEGER NOT NULL, gpu INTEGER NOT NULL, ",
    sample_metric_columns!(),
    ");
     CREATE TEMP TABLE IF NOT EXISTS gw_imp_apps (ts_ms INTEGER NOT NULL, gpu_ref INTEGER NOT NULL,
       proc INTEGER NOT NULL, used_mem_bytes INTEGER);
     CREATE TEMP TABLE IF NOT EXISTS gw_imp_gpu_map (local INTEGER PRIMARY KEY, gpu_id INTEGER NOT NULL);
     CREATE TEMP TABLE IF NOT EXISTS gw_imp_ref_map (ref INTEGER PRIMARY KEY, gpu_id INTEGER NOT NULL);
     CREATE TEMP TABLE IF NOT EXISTS gw_imp_proc_map (local INTEGER PRIMARY KEY, process_id INTEGER NOT NULL);
     DELETE FROM gw_imp_samples; DELETE FROM gw_imp_apps; DELETE FROM gw_imp_gpu_map;
     DELETE FROM gw_imp_ref_map; DELETE FROM gw_imp_proc_map;"
);

const DROP_SQL: &str =
    "DROP TABLE IF EXISTS temp.gw_imp_samples; DROP TABLE IF EXISTS temp.gw_imp_apps;
     DROP TABLE IF EXISTS temp.gw_imp_gpu_map; DROP TABLE IF EXISTS temp.gw_imp_ref_map;
     DROP TABLE IF EXISTS temp.gw_imp_proc_map;";

/// A GPU as an import found it; `host` indexes [`ImportPlan::hosts`].
#[derive(Debug, Clone, Default)]
pub struct ImportGpu {
    pub host: usize,
    /// `uuid` is the identity within the host (a real UUID or a stand-in such as `index-3`).
    pub inventory: GpuInventory,
    /// Whether the index is known (otherwise `gpu_index` stays as stored, or NULL).
    pub index_known: bool,
    pub first_ms: TsMs,
    pub last_ms: TsMs,
    /// The newest staged sample of this GPU, if any.
    pub last_sample_ms: Option<TsMs>,
}

/// A process as an import found it (`start_time_ms` is unknown: 0).
#[derive(Debug, Clone, Default)]
pub struct ImportProcess {
    pub host: usize,
    pub pid: u32,
    pub name: Option<String>,
    pub first_ms: TsMs,
    pub last_ms: TsMs,
}

/// Everything publish needs besides the staged rows.
#[derive(Debug, Clone, Default)]
pub struct ImportPlan {
    pub hosts: Vec<String>,
    /// Importer-local GPU id = position.
    pub gpus: Vec<ImportGpu>,
    /// Importer-local process id = position.
    pub processes: Vec<ImportProcess>,
    /// Process-sample GPU references → importer-local GPU id (`None`: unresolved; those rows
    /// are not published).
    pub gpu_refs: Vec<Option<usize>>,
    /// Per host: the import carries its `--query-compute-apps` log, so the processes of its
    /// GPUs were observed over the imported time span; their samples get `process_count`
    /// (0 where no process row lands on them). Other hosts' counts stay unknown (NULL).
    pub processes_observed: Vec<bool>,
    /// Who held which GPU when (pods from a Prometheus's labels): merged with the GPU's
    /// stored holder interval when it is the same pod and follows it within
    /// [`HOLDER_MERGE_MS`].
    pub holders: Vec<ImportHolder>,
    /// Training points by host (`hosts` index), written as the daemon's poll writes them.
    pub training: Vec<(usize, TrainingPoint)>,
}

/// Two intervals of the same pod on a GPU further apart than this stay two (a scrape gap
/// within it does not split a holder; a pod that left and came back does).
pub const HOLDER_MERGE_MS: i64 = 5 * 60_000;

/// A GPU's holder over `[from_ms, to_ms)`; `gpu` indexes [`ImportPlan::gpus`].
#[derive(Debug, Clone)]
pub struct ImportHolder {
    pub gpu: usize,
    pub from_ms: TsMs,
    pub to_ms: TsMs,
    pub holder: GpuHolder,
}

impl ImportPlan {
    /// The time span of host `host`'s imported rows (GPUs and processes).
    pub fn host_span(&self, host: usize) -> Option<(TsMs, TsMs)> {
        self.gpus
            .iter()
            .filter(|g| g.host == host)
            .map(|g| (g.first_ms, g.last_ms))
            .chain(
                self.processes
                    .iter()
                    .filter(|p| p.host == host)
                    .map(|p| (p.first_ms, p.last_ms)),
            )
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
    }
}

/// What a publish wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Published {
    pub samples: u64,
    pub process_samples: u64,
    pub holders: u64,
    pub training_points: u64,
    /// Per host of the plan: the rollup rows of its imported minutes, written by the publish
    /// from the minutes computed while staging (`fused.rs`); `None`: the host's minutes are
    /// rolled up from the published rows ([`Store::import_rollups`]).
    pub rollups: Vec<Option<u64>>,
}

/// A GPU already stored for a host.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredGpu {
    pub uuid: String,
    pub index: Option<u32>,
    pub pci_bus_id: Option<String>,
}

/// Rows of an import being staged; see the module doc.
pub struct Staging<'a> {
    conn: &'a Connection,
    /// Prepared once: the per-row inserts are the hot path of an import.
    insert_sample: Option<Statement<'a>>,
    insert_app: Option<Statement<'a>>,
    insert_rollup: Option<Statement<'a>>,
    /// Sample rows staged per importer-local GPU.
    staged: Vec<u64>,
    open: bool,
}

const INSERT_SAMPLE: &str = concat!(
    "INSERT INTO gw_imp_samples (ts_ms, gpu, ",
    sample_metric_columns!(),
    ") VALUES (",
    sample_placeholders!(),
    ")"
);

const INSERT_APP: &str = "INSERT INTO gw_imp_apps (ts_ms, gpu_ref, proc, used_mem_bytes)
     VALUES (?1, ?2, ?3, ?4)";

/// Whether the database at `path` already knows host `name` (true when that cannot be told,
/// so that a caller never removes a host it did not create).
pub fn host_exists(path: &std::path::Path, name: &str) -> bool {
    if !path.is_file() {
        return false;
    }
    let Ok(conn) = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return true;
    };
    conn.query_row("SELECT count(*) FROM hosts WHERE name = ?1", [name], |r| {
        r.get::<_, i64>(0)
    })
    .map_or(true, |n| n > 0)
}

impl Store {
    /// Where the chunked import `source` stands: the end of its last published chunk.
    pub fn import_cursor(&self, source: &str) -> Result<Option<TsMs>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT done_to_ms FROM import_cursors WHERE source = ?1",
                params![source],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Moves the chunked import `source` past `done_to_ms` (after its chunk is published).
    pub fn set_import_cursor(&self, source: &str, done_to_ms: TsMs) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO import_cursors (source, done_to_ms, updated_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (source) DO UPDATE SET done_to_ms = max(done_to_ms, excluded.done_to_ms),
               updated_ms = excluded.updated_ms",
            params![source, done_to_ms, crate::clock::now_ms()],
        )?;
        Ok(())
    }

    /// Removes host `name` if nothing refers to it (no GPU, process, event, rollup progress,
    /// training series or source): undoes the host row `open` registered for an import that
    /// then failed. Returns whether it was removed. Only call it for a host this process
    /// created ([`host_exists`] said no before `open`).
    pub fn forget_unused_host(&self, name: &str) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "DELETE FROM hosts WHERE name = ?1 AND last_seen_ms IS NULL
               AND NOT EXISTS (SELECT 1 FROM gpus WHERE host_id = hosts.id)
               AND NOT EXISTS (SELECT 1 FROM processes WHERE host_id = hosts.id)
               AND NOT EXISTS (SELECT 1 FROM events WHERE host_id = hosts.id)
               AND NOT EXISTS (SELECT 1 FROM rollup_state WHERE host_id = hosts.id)
               AND NOT EXISTS (SELECT 1 FROM training_series WHERE host_id = hosts.id)
               AND NOT EXISTS (SELECT 1 FROM training_source WHERE host_id = hosts.id)",
            [name],
        )?;
        Ok(n > 0)
    }

    /// Starts staging an import on this store's connection.
    pub fn stage_import(&self) -> Result<Staging<'_>, StoreError> {
        // Staged rows go to a temporary file (bounded memory for week-long logs), with a
        // page cache of their own.
        self.conn.pragma_update(None, "temp_store", "FILE")?;
        self.conn.execute_batch("BEGIN DEFERRED")?;
        let mut staging = Staging {
            conn: &self.conn,
            insert_sample: None,
            insert_app: None,
            insert_rollup: None,
            staged: Vec::new(),
            open: true,
        };
        self.conn.execute_batch(CREATE_SQL)?;
        self.conn.execute_batch(fused::CREATE_SQL)?;
        // A larger page cache for this connection: the publish appends many pages at once.
        self.conn
            .pragma_update(None, "cache_size", IMPORT_CACHE_SIZE)?;
        self.conn
            .pragma_update(Some("temp"), "cache_size", IMPORT_CACHE_SIZE)?;
        staging.insert_sample = Some(self.conn.prepare(INSERT_SAMPLE)?);
        staging.insert_app = Some(self.conn.prepare(INSERT_APP)?);
        staging.insert_rollup = Some(
            self.conn
                .prepare(&rollup::insert_sql("temp.gw_imp_rollups"))?,
        );
        Ok(staging)
    }

    /// The GPUs already stored for `host` (none when the host is unknown).
    pub fn stored_gpus(&self, host: &str) -> Result<Vec<StoredGpu>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT g.uuid, g.gpu_index, g.pci_bus_id FROM gpus g JOIN hosts h ON h.id = g.host_id
             WHERE h.name = ?1 ORDER BY g.id",
        )?;
        let rows = stmt.query_map([host], |r| {
            Ok(StoredGpu {
                uuid: r.get(0)?,
                index: r.get(1)?,
                pci_bus_id: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Rolls up the minutes of `host` overlapping `[from_ms, to_ms]` (and any minutes before
    /// them not rolled up yet) in short transactions; returns the rollup rows written.
    /// `published`: the publish already wrote the imported minutes (`Published::rollups`),
    /// so only the minutes before them are left.
    pub fn import_rollups(
        &self,
        host: &str,
        from_ms: TsMs,
        to_ms: TsMs,
        published: bool,
    ) -> Result<usize, StoreError> {
        let Some(host_id) = self
            .conn
            .query_row("SELECT id FROM hosts WHERE name = ?1", [host], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?
        else {
            return Ok(0);
        };
        let (done, first_gpu): (Option<TsMs>, Option<TsMs>) = self.conn.query_row(
            "SELECT (SELECT done_ms FROM rollup_state WHERE host_id = ?1),
                    (SELECT min(first_seen_ms) FROM gpus WHERE host_id = ?1)",
            [host_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let backlog_start = done.or(first_gpu).unwrap_or(from_ms);
        let mut start = floor_minute(from_ms.min(backlog_start));
        let done_to = ceil_minute(to_ms + 1);
        let end = if published {
            floor_minute(from_ms)
        } else {
            done_to
        };
        let mut written = 0;
        while start < end {
            let chunk_end = (start + ROLLUP_CHUNK_MS).min(end);
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            let step = rollup_host(&self.conn, host_id, start, chunk_end)
                .and_then(|n| set_done(&self.conn, host_id, chunk_end).map(|()| n));
            match step {
                Ok(n) => {
                    self.conn.execute_batch("COMMIT")?;
                    written += n;
                }
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    return Err(e);
                }
            }
            start = chunk_end;
        }
        if published {
            set_done(&self.conn, host_id, done_to)?;
        }
        Ok(written)
    }
}

impl Staging<'_> {
    /// Stages one sample of importer-local GPU `gpu`. Rows are kept in staging order; at
    /// publish a later row with the same time and GPU replaces an earlier one.
    pub fn sample(&mut self, gpu: usize, s: &GpuSample) -> Result<(), StoreError> {
        let stmt = match &mut self.insert_sample {
            Some(s) => s,
            None => {
                return Err(StoreError::Config(
                    "import staging already published".into(),
                ));
            }
        };
        stmt.execute(sample_params!(s.ts_ms, gpu as i64, s))?;
        if self.staged.len() <= gpu {
            self.staged.resize(gpu + 1, 0);
        }
        self.staged[gpu] += 1;
        Ok(())
    }

    /// Stages a finished minute of the import's rollups ([`MinuteRollups::add`]).
    pub fn minute(&mut self, m: &StagedMinute) -> Result<(), StoreError> {
        match &mut self.insert_rollup {
            Some(insert) => m.write(insert),
            None => Err(StoreError::Config(
                "import staging already published".into(),
            )),
        }
    }

    /// Stages one process sample: GPU reference `gpu_ref`, importer-local process `proc`.
    pub fn process_sample(
        &mut self,
        ts_ms: TsMs,
        gpu_ref: usize,
        proc: usize,
        used_mem_bytes: Option<u64>,
    ) -> Result<(), StoreError> {
        let stmt = match &mut self.insert_app {
            Some(s) => s,
            None => {
                return Err(StoreError::Config(
                    "import staging already published".into(),
                ));
            }
        };
        stmt.execute(params![
            ts_ms,
            gpu_ref as i64,
            proc as i64,
            sat(used_mem_bytes)
        ])?;
        Ok(())
    }

    /// Publishes everything staged in one IMMEDIATE transaction; `minutes` tells which staged
    /// minutes can be used.
    pub fn publish(
        mut self,
        plan: &ImportPlan,
        minutes: &MinuteRollups,
    ) -> Result<Published, StoreError> {
        self.insert_sample = None;
        self.insert_app = None;
        self.insert_rollup = None;
        self.conn.execute_batch("COMMIT")?;
        self.open = false;
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        self.open = true;
        let out = publish_rows(self.conn, plan, minutes, &self.staged)?;
        self.conn.execute_batch("COMMIT")?;
        self.open = false;
        Ok(out)
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        self.insert_sample = None;
        self.insert_app = None;
        self.insert_rollup = None;
        if self.open {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        let _ = self.conn.execute_batch(DROP_SQL);
        let _ = self.conn.execute_batch(fused::DROP_SQL);
        let _ = self
            .conn
            .pragma_update(None, "cache_size", DEFAULT_CACHE_SIZE);
    }
}
