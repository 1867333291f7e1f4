//! The store: GPU history in one SQLite file (WAL), bounded in time and in size.
//!
//! This module owns opening the database (pragmas, hard size cap, migrations), the [`Store`]
//! that writes ticks, the configuration and the error type. The other files own:
//! - `migrate.rs`: the embedded `migrations/*.sql`, schema versions, upgrades in place;
//! - `write.rs`: [`Store::write_tick`] and [`Store::write_ticks`], id caches, SQLITE_FULL retry;
//! - `rows.rs`: the SQL of one tick's rows (upserts, NULLs, id resolution);
//! - `events.rs`: events, one row per XID whether NVML, the kernel log or both reported it;
//! - `rollup.rs`: 1-minute rollups ([`Store::rollup_range`]) and the per-host rollup progress;
//! - `bounds.rs`: maintenance steps and retention per host ([`Store::maintain_step`]);
//! - `size.rs`: the `max_db_size` bound (oldest raw data first, then rollups) and SQLITE_FULL;
//! - `training.rs`: [`Store::write_training`], training points plus `training_source` status;
//! - `audit.rs`: the audit of GPU setting changes (`gpu set`'s attempts and outcomes, the
//!   daemon's observed changes, `gpu audit`'s rows);
//! - `writer.rs`: the dedicated writer thread ([`WriterHandle`]);
//! - read queries, one reader per job: `history.rs` (the rule evaluator's and `replay`'s time
//!   slices), `window/` (a GPU metric over a time window, for display: downsampled series for
//!   `history`, reports and email charts, min/avg/max aggregates for incidents), `read.rs`
//!   (status and small lookups: `gpuwatch status`, the demo, tests), `postmortem.rs` and
//!   `incident.rs` (alerts and their stories), `query.rs` (user SQL), `export.rs`;
//! - `synth.rs`: deterministic synthetic tick batches for tests and benchmarks;
//! - `lock.rs`: the daemon's lock (`<db>.lock`, one `gpuwatch run` per database);
//! - `recover.rs`: what counts as a damaged database, and moving one aside at start.
//!
//! Invariants:
//! - Every write through a [`Store`] belongs to `StoreConfig::host`; the file may hold other
//!   hosts (imports), whose retention counts back from their own newest timestamp.
//! - One writer connection per process does the sampling writes; every write transaction is
//!   short (one tick, or one bounded maintenance step), so other writers wait at most a tick.
//! - The main database file never exceeds `max_db_size`: `PRAGMA max_page_count` is a hard
//!   cap, and maintenance keeps the used pages below [`HIGH_WATER`] of it.
//! - Readers use [`open_read_only`]; WAL means they never block the writer.
//! - A damaged file met by a write open is moved aside (never deleted) and a new database
//!   started ([`Store::recovered`] says so); a read-only open only reports it. A busy file,
//!   a permission, a newer schema or another application's file is never taken for damage.

pub mod alerts;
pub mod analysis;
pub mod audit;
mod bounds;
pub mod events;
pub mod export;
pub mod history;
pub mod hosts;
pub mod import;
pub mod incident;
pub mod lock;
mod migrate;
pub mod outbox;
pub mod postmortem;
pub mod query;
pub mod read;
pub mod recover;
pub mod remediation;
pub mod remote_write;
mod reserve;
mod rollup;
mod rows;
pub mod scrape;
pub mod silences;
mod size;
pub mod synth;
mod training;
pub mod usage;
pub mod window;
mod write;
mod writer;
pub mod xid_evidence;

pub use reserve::disk_full;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

pub use bounds::MaintenanceStats;
pub use lock::DaemonLock;
pub use migrate::{LATEST_VERSION, MIGRATION_COUNT, migrate_to, schema_version};
pub use recover::Recovered;
pub use rows::labels_json;
pub use write::WriteStats;
pub use writer::{
    AfterCommit, AfterCommitStart, Committed, SendTickError, TrainingSender, WRITER_QUEUE_CAPACITY,
    WriterHandle, WriterStats,
};

/// `PRAGMA application_id` of a gpuwatch database ("GPUW").
pub const APPLICATION_ID: i32 = 0x4750_5557;
/// Maintenance deletes old data while the used pages exceed this fraction of `max_db_size`.
pub const HIGH_WATER: f64 = 0.90;
/// The smallest accepted `max_db_size`.
pub const MIN_DB_SIZE: u64 = 1 << 20;
/// How long the writer waits for another writer's lock before a write fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// What the store keeps and for whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Raw samples (and process samples, training points) are kept this long, counted back
    /// from the newest timestamp of each host.
    pub retention: Duration,
    /// 1-minute rollups and events are kept this long, counted the same way.
    pub rollup_retention: Duration,
    /// Hard bound on the main database file, in bytes (the WAL is bounded separately).
    pub max_db_size: u64,
    /// The host every write of this store belongs to.
    pub host: String,
}

impl StoreConfig {
    /// The documented defaults: 7 days raw, 90 days of rollups, 2 GiB.
    pub fn new(host: impl Into<String>) -> Self {
        Self {
            retention: Duration::from_secs(7 * 24 * 3600),
            rollup_retention: Duration::from_secs(90 * 24 * 3600),
            max_db_size: 2 << 30,
            host: host.into(),
        }
    }

    fn validate(&self) -> Result<(), StoreError> {
        if self.host.is_empty() {
            return Err(StoreError::Config("host must not be empty".into()));
        }
        if self.max_db_size < MIN_DB_SIZE {
            return Err(StoreError::Config(format!(
                "max_db_size {} is below the minimum of {MIN_DB_SIZE} bytes",
                self.max_db_size
            )));
        }
        if self.retention.is_zero() || self.rollup_retention.is_zero() {
            return Err(StoreError::Config(
                "retention periods must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the directory of the database {0} does not exist")]
    MissingParent(PathBuf),
    #[error(
        "database {0} does not exist: `gpuwatch run` creates it as it samples (`gpuwatch demo --db {0}` on simulated GPUs); or point at another with --db PATH or `database` in the config"
    )]
    NotFound(PathBuf),
    #[error("{path} is not a gpuwatch database (application_id {application_id:#x})")]
    NotGpuwatch { path: String, application_id: i64 },
    #[error(
        "database {path} has schema version {found}, newer than version {known} known to this \
         gpuwatch; use a newer gpuwatch (or a copy of the database made by this one)"
    )]
    TooNew {
        path: String,
        found: u32,
        known: u32,
    },
    #[error(
        "database {path} has schema version {found}, older than version {expected}; start the \
         gpuwatch daemon (or any read-write command) once to upgrade it in place"
    )]
    Outdated {
        path: String,
        found: u32,
        expected: u32,
    },
    #[error("migration {version} ({name}) failed: {source}")]
    Migration {
        version: u32,
        name: &'static str,
        source: rusqlite::Error,
    },
    #[error(
        "no space for the write: max_db_size is {max_db_size} bytes (or the disk is full) and \
         deleting old data did not free enough"
    )]
    Full { max_db_size: u64 },
    #[error("invalid store configuration: {0}")]
    Config(String),
    #[error(
        "database {path} is damaged ({detail}); nothing was changed: `gpuwatch run` moves it \
         aside (kept for a post-mortem) and starts a new one, or restore a backup; `gpuwatch \
         doctor` checks it"
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "database {path} is damaged ({detail}) and a gpuwatch daemon{} has it open, so it was \
         not moved aside; stop the daemon and start it again: it moves the file aside and \
         starts a new one", pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    DamagedInUse {
        path: PathBuf,
        detail: String,
        pid: Option<u32>,
    },
    #[error(
        "another gpuwatch daemon{} is running on database {db} (it holds the lock {}); stop it \
         first, or give this one its own `database` / --db",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        lock::lock_path(db).display()
    )]
    Locked { db: PathBuf, pid: Option<u32> },
    #[error("cannot create the database {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot use the lock file {path}: {source}")]
    LockFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "permission denied: {path}: {detail}; let the user gpuwatch runs as read and write the \
         database, its -wal and -shm files and its directory (`ls -l`, `chown`), or set \
         `database` / --db to a path it owns"
    )]
    PermissionDenied { path: PathBuf, detail: String },
    #[error(
        "database {path} is damaged but could not be moved aside ({what}: {source}); nothing \
         was deleted: move it (and its -wal, -shm files) aside by hand, then start again"
    )]
    MoveAside {
        path: PathBuf,
        what: String,
        source: std::io::Error,
    },
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

impl StoreError {
    /// True for SQLITE_FULL (the `max_page_count` cap or a full disk).
    pub fn is_full(&self) -> bool {
        match self {
            Self::Full { .. } => true,
            Self::Sqlite(e) => is_full(e),
            _ => false,
        }
    }

    /// True for SQLITE_BUSY / SQLITE_LOCKED: another connection (an import, a CLI command)
    /// held the write lock past the busy timeout. Worth retrying.
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Sqlite(e) if matches!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        ))
    }
}

fn is_full(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

/// How the file is used right now, from the page counts (cheap to read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbUsage {
    pub page_size: u64,
    /// Pages in the database (its logical size; the main file grows to it at checkpoint).
    pub page_count: u64,
    /// Pages that are free for reuse.
    pub freelist_count: u64,
    /// `(page_count - freelist_count) * page_size`.
    pub used_bytes: u64,
    pub max_db_size: u64,
}

/// The writer side of the database. Not `Sync`; move it into [`WriterHandle::spawn`] for the
/// daemon, or use it directly from one thread (imports, tests).
pub struct Store {
    conn: Connection,
    cfg: StoreConfig,
    path: PathBuf,
    host_id: i64,
    page_size: u64,
    caches: write::Caches,
    maint: bounds::MaintState,
    recovered: Option<Recovered>,
    /// The daemon's disk-full reserve (`reserve.rs`); None for one-shot writers.
    reserve: Option<reserve::Reserve>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("host", &self.cfg.host)
            .field("host_id", &self.host_id)
            .finish_non_exhaustive()
    }
}

/// Opens (creating if needed) the database at `path` for writing, upgrades its schema to
/// [`LATEST_VERSION`] in one transaction, and registers `cfg.host`.
///
/// The parent directory must exist. Sets WAL, `synchronous=NORMAL`, a busy timeout, a bounded
/// WAL (`journal_size_limit`, `wal_autocheckpoint`) and `max_page_count` from `max_db_size`.
///
/// A file SQLite reports damaged while opening it is moved aside and a new database started
/// ([`Store::recovered`]), under the daemon's lock taken for the move; when a daemon holds
/// that lock the open fails with [`StoreError::DamagedInUse`] and nothing is moved. One-shot
/// writers (imports, `silence`, `gpu set`) use this; the daemon uses [`open_daemon`].
pub fn open(path: &Path, cfg: &StoreConfig) -> Result<Store, StoreError> {
    open_with(path, cfg, None)
}

/// [`open`] for the daemon, which holds `lock`: also runs `PRAGMA quick_check` before
/// anything is written (damage deeper than the pages an open reads, e.g. a truncated file),
/// and moves a damaged file aside under that lock.
pub fn open_daemon(path: &Path, cfg: &StoreConfig, lock: &DaemonLock) -> Result<Store, StoreError> {
    open_with(path, cfg, Some(lock))
}

fn open_with(
    path: &Path,
    cfg: &StoreConfig,
    daemon: Option<&DaemonLock>,
) -> Result<Store, StoreError> {
    cfg.validate()?;
    if let Some(parent) = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && !p.is_dir())
    {
        return Err(StoreError::MissingParent(parent.to_path_buf()));
    }
    recover::check_access(path)?;
    let quick = daemon.is_some();
    let err = match open_once(path, cfg, quick) {
        Ok(store) => return Ok(store),
        Err(e) => e,
    };
    let Some(reason) = recover::damage(path, &err) else {
        return Err(err);
    };
    // Only under the daemon's lock: a one-shot writer takes it for the move.
    let _taken = match daemon {
        Some(_) => None,
        None => match DaemonLock::acquire(path) {
            Ok(l) => Some(l),
            Err(StoreError::Locked { pid, .. }) => {
                return Err(StoreError::DamagedInUse {
                    path: path.to_path_buf(),
                    detail: reason,
                    pid,
                });
            }
            Err(e) => return Err(e),
        },
    };
    if daemon.is_none() {
        // Another writer may have moved it aside before we had the lock.
        match open_once(path, cfg, quick) {
            Ok(store) => return Ok(store),
            Err(e) if recover::damage(path, &e).is_none() => return Err(e),
            Err(_) => {}
        }
    }
    let recovered = recover::move_aside(path, &reason)?;
    let mut store = open_once(path, cfg, false)?;
    store.recovered = Some(recovered);
    Ok(store)
}

/// Mode of a database file gpuwatch creates: its owner reads and writes, its group reads
/// (an operator's group may run post-mortem queries), others nothing — the history names
/// processes, users, pods and command lines. SQLite gives the `-wal` and `-shm` files the
/// main file's mode.
pub const DB_FILE_MODE: u32 = 0o640;

/// Creates `path` empty with [`DB_FILE_MODE`] when it does not exist (an empty file is an
/// empty database to SQLite); an existing file keeps its mode.
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(DB_FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn open_once(path: &Path, cfg: &StoreConfig, quick: bool) -> Result<Store, StoreError> {
    create_private(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            StoreError::PermissionDenied {
                path: path.to_path_buf(),
                detail: format!("cannot create it: {source}"),
            }
        }
        std::io::ErrorKind::NotFound => StoreError::MissingParent(path.to_path_buf()),
        _ => StoreError::Create {
            path: path.to_path_buf(),
            source,
        },
    })?;
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| denied_or(path, e))?;
    // Until the file is known sound, closing must not checkpoint: that would copy a foreign
    // WAL into the main file and delete the WAL, destroying what is moved aside.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    stable_plans(&conn)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| denied_or(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(path = %path.display(), mode, "could not switch the database to WAL");
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    let page_size = pragma_u64(&conn, "page_size")?.max(512);
    let max_pages = cfg.max_db_size / page_size;
    let cap: i64 =
        conn.pragma_update_and_check(None, "max_page_count", to_i64(max_pages), |r| r.get(0))?;
    let cap = u64::try_from(cap).unwrap_or_default();
    if cap > max_pages {
        tracing::warn!(
            path = %path.display(),
            file_pages = cap,
            max_pages,
            "the database is already larger than max_db_size; old data will be deleted down to \
             the bound but the file only shrinks after a VACUUM"
        );
    }
    // The WAL is reset after each checkpoint and truncated to this size.
    let wal_pages = (max_pages / 32).clamp(64, 1000);
    conn.pragma_update(None, "wal_autocheckpoint", to_i64(wal_pages))?;
    conn.pragma_update(None, "journal_size_limit", to_i64(wal_pages * page_size))?;
    conn.set_prepared_statement_cache_capacity(64);

    if quick {
        recover::quick_check(&conn, path)?;
    }
    migrate::migrate(&mut conn)?;
    let host_id = write::ensure_host(&conn, &cfg.host)?;
    let mut store = Store {
        conn,
        cfg: cfg.clone(),
        path: path.to_path_buf(),
        host_id,
        page_size,
        caches: write::Caches::default(),
        maint: bounds::MaintState::new(),
        recovered: None,
        reserve: None,
    };
    store.caches.load(&store.conn, host_id)?;
    // Sound: a clean close checkpoints and removes the WAL again.
    store
        .conn
        .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false)?;
    Ok(store)
}

/// A second read-write connection to an existing, migrated database (alert state, the
/// outbox): the same busy timeout as the writer's, nothing else set.
pub(crate) fn open_existing_rw(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    stable_plans(&conn)?;
    // Alert state and the outbox are small tables: a small page cache (SQLite's default is
    // 2 MB per connection, and the daemon holds several).
    conn.pragma_update(None, "cache_size", SMALL_CACHE_KIB)?;
    Ok(conn)
}

/// A read-write connection to an existing database, its schema brought up to date: for the
/// one-shot commands that change stored history (`replay --save`, `hosts merge`). Creates
/// nothing: a missing file is [`StoreError::NotFound`], and no host is added.
pub fn open_existing_upgraded(path: &Path) -> Result<Connection, StoreError> {
    if !path.exists() {
        return Err(StoreError::NotFound(path.to_path_buf()));
    }
    let mut conn = open_existing_rw(path)?;
    migrate::migrate(&mut conn)?;
    Ok(conn)
}

/// The query planner stability guarantee: a statement's plan does not depend on the values
/// bound to it. Without it, SQLite re-prepares a cached statement whenever a parameter
/// compared with a partial index's condition (`gpu_holders`' `to_ms IS NULL`, the live
/// alerts' `state IN (...)`) is bound to a new value: every per-GPU lookup of a scrape and
/// of the rules thread paid a full prepare.
fn stable_plans(conn: &Connection) -> Result<(), StoreError> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// Page cache of the daemon's secondary connections, in KiB (as a negative `cache_size`).
pub const SMALL_CACHE_KIB: i64 = -512;

/// [`open_read_only`] with the small page cache of the daemon's secondary connections
/// (`/metrics` and the API: they read the newest pages and a few small tables).
pub fn open_daemon_reader(path: &Path) -> Result<Connection, StoreError> {
    let conn = open_read_only(path)?;
    conn.pragma_update(None, "cache_size", SMALL_CACHE_KIB)?;
    Ok(conn)
}

/// SQLite's answer for a file it may not open or write, as a [`StoreError::PermissionDenied`]
/// (the directory counts: SQLite creates the `-wal` and `-shm` files in it).
fn denied_or(path: &Path, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode::{CannotOpen, PermissionDenied, ReadOnly};
    match e.sqlite_error_code() {
        Some(CannotOpen | PermissionDenied | ReadOnly) => StoreError::PermissionDenied {
            path: path.to_path_buf(),
            detail: format!("SQLite: {e} (it also creates the -wal and -shm files beside it)"),
        },
        _ => StoreError::Sqlite(e),
    }
}

/// Opens an existing database read-only (CLI, HTTP). Fails with [`StoreError::NotFound`] when
/// the file does not exist, with [`StoreError::TooNew`] / [`StoreError::Outdated`] when its
/// schema is not the one this binary knows, and with [`StoreError::Corrupt`] when SQLite says
/// it is damaged (nothing is moved).
pub fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    if !path.is_file() {
        return Err(StoreError::NotFound(path.to_path_buf()));
    }
    open_read_only_checked(path).map_err(|e| match e {
        StoreError::Sqlite(s) if recover::is_damage_code(s.sqlite_error_code()) => {
            StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: s.to_string(),
            }
        }
        e => e,
    })
}

/// [`open_read_only`] of a database a write open is about to use: `None` when the file does
/// not exist yet or is damaged (the write open moves it aside and starts a new one).
pub fn open_read_only_if_sound(path: &Path) -> Result<Option<Connection>, StoreError> {
    match open_read_only(path) {
        Ok(conn) => Ok(Some(conn)),
        Err(StoreError::NotFound(_) | StoreError::Corrupt { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn open_read_only_checked(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    stable_plans(&conn)?;
    conn.set_prepared_statement_cache_capacity(32);
    migrate::check_application_id(&conn)?;
    let found = schema_version(&conn)?;
    let path = path.display().to_string();
    if found > LATEST_VERSION {
        return Err(StoreError::TooNew {
            path,
            found,
            known: LATEST_VERSION,
        });
    }
    if found < LATEST_VERSION || migrate::needs_upgrade(&conn)? {
        return Err(StoreError::Outdated {
            path,
            found,
            expected: LATEST_VERSION,
        });
    }
    Ok(conn)
}

impl Store {
    /// The store's configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// The database path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The damaged database this open moved aside for a new one, if it did.
    pub fn recovered(&self) -> Option<&Recovered> {
        self.recovered.as_ref()
    }

    /// The writer connection, for reads in the same thread (tests, imports). Do not write
    /// through it outside the store's own methods.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Sets the connection's page cache to `kib` KiB.
    pub fn set_cache_kib(&self, kib: i64) -> Result<(), StoreError> {
        self.conn.pragma_update(None, "cache_size", -kib)?;
        Ok(())
    }

    /// Page counts of the database (two cheap pragmas).
    pub fn usage(&self) -> Result<DbUsage, StoreError> {
        // One cached statement (the pragmas' table-valued forms): the writer asks every tick.
        let (page_count, freelist_count): (i64, i64) = self
            .conn
            .prepare_cached("SELECT * FROM pragma_page_count(), pragma_freelist_count()")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let page_count = u64::try_from(page_count).unwrap_or_default();
        let freelist_count = u64::try_from(freelist_count).unwrap_or_default();
        Ok(DbUsage {
            page_size: self.page_size,
            page_count,
            freelist_count,
            used_bytes: page_count.saturating_sub(freelist_count) * self.page_size,
            max_db_size: self.cfg.max_db_size,
        })
    }

    /// Copies the WAL into the main file and truncates it (for tests, backups and shutdown).
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }
}

fn pragma_u64(conn: &Connection, name: &str) -> Result<u64, StoreError> {
    let v: i64 = conn.pragma_query_value(None, name, |r| r.get(0))?;
    Ok(u64::try_from(v).unwrap_or_default())
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
