//! `import nvidia-smi`: CSV logs written by `nvidia-smi --query-gpu=... --format=csv[,noheader]
//! [,nounits] -l N` and by `--query-compute-apps`, into the store.
//!
//! Files: `fields.rs` (query fields, aliases, a section's layout), `values.rs` (NULL markers,
//! units, states, timestamps and zones), `reader.rs` (lines, sections, rows), `registry.rs`
//! (hosts, GPU identity, processes), `fuzz.rs` (the fuzzing harness of the reader).
//!
//! Invariants:
//! - All-or-nothing: every file is parsed and staged first (TEMP tables: no write lock on the
//!   database), then published in one short transaction; any error before that (an unreadable
//!   file, a bad header, a bad line under `strict`) imports nothing.
//! - Without `Options::host`, each file's rows belong to the host named after the file's stem
//!   (`gpu0.csv` → `gpu0`; `imported` when there is no stem). Files of one machine (a
//!   `--query-gpu` log and its `--query-compute-apps` log) need the same `--host`.
//! - The imported minutes are rolled up — by the publish itself from the minutes computed while
//!   staging, or after it from the published rows (`Store::import_rollups`) — so rollup-based
//!   readers and `replay` see imported data like sampled data.

mod fields;
mod fuzz;
pub mod map;
mod reader;
mod registry;
pub mod values;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::model::TsMs;
use crate::store::{Store, StoreError};

pub use fields::looks_like_header;
#[doc(hidden)]
pub use fuzz::fuzz_read;
pub use registry::{Unresolved, is_masked, normalize_bus_id};
pub use values::Zone;

/// How to import.
#[derive(Debug, Clone)]
pub struct Options {
    /// The zone of the log's timestamps (they carry none).
    pub zone: Zone,
    /// The host every row belongs to; `None`: each file's stem ([`default_host`]).
    pub host: Option<String>,
    /// The `--query-gpu` / `--query-compute-apps` fields of logs written without a header.
    pub columns: Option<Vec<String>>,
    /// Fail the whole import on the first bad line instead of skipping it.
    pub strict: bool,
    /// `import csv --map`: the files are CSV with their own header, read through this map.
    pub map: Option<map::ColumnMap>,
}

/// A line that could not be imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    pub file: String,
    pub line: u64,
    pub message: String,
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// Why an import failed (nothing was imported).
#[derive(Debug, thiserror::Error)]
pub enum SmiError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0} (nothing was imported)")]
    Bad(BadLine),
    #[error("{0}")]
    Usage(String),
    #[error("{what} ({how}; nothing was imported)")]
    Unresolved { what: String, how: String },
    #[error("{file}: no row could be imported ({skipped} line(s) skipped; nothing was imported); the first: {}", first.iter().map(|b| format!("line {}: {}", b.line, b.message)).collect::<Vec<_>>().join("; "))]
    NoRows {
        file: String,
        skipped: u64,
        first: Vec<BadLine>,
    },
    #[error("no data row in {0} (a header only, or an empty file): nothing was imported")]
    Empty(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one file contributed.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSummary {
    pub path: String,
    pub host: String,
    /// Rows read (GPU and process rows).
    pub rows: u64,
    pub bad_lines: u64,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub files: Vec<FileSummary>,
    /// Sample rows published (a row replacing one of the same time and GPU counts once).
    pub samples: u64,
    pub process_samples: u64,
    pub gpus: usize,
    pub processes: usize,
    /// Oldest and newest imported time.
    pub span: Option<(TsMs, TsMs)>,
    /// Every skipped line, in file order.
    pub bad_lines: Vec<BadLine>,
    /// Fields in the files that gpuwatch does not store, sorted, each once.
    pub ignored_fields: Vec<String>,
    /// Process rows not imported because their GPU is unknown.
    pub unresolved: Vec<Unresolved>,
    /// Rollup rows written for the imported minutes.
    pub rollups: usize,
    /// Of them, rows computed while staging and written by the publish (the rest were
    /// recomputed from the published rows).
    pub rollups_staged: usize,
    /// Time spent reading and staging, in the one publish transaction (the only time the
    /// database's write lock is held, besides short rollup steps), and rolling up.
    pub stage_time: std::time::Duration,
    pub publish_time: std::time::Duration,
    pub rollup_time: std::time::Duration,
}

/// What the parsing thread learnt from the files.
struct Parsed {
    registry: registry::Registry,
    files: Vec<FileSummary>,
    bad_lines: Vec<BadLine>,
    ignored: BTreeSet<String>,
    /// The samples' minutes, rolled up while parsing.
    minutes: crate::store::import::MinuteRollups,
}

/// Reads every file in order, sending its rows to `tx` in batches; `read_bytes` counts the
/// bytes read (for the progress bar).
fn parse_files(
    files: &[PathBuf],
    opts: &Options,
    fixed: Option<&fields::Layout>,
    mut stored: std::collections::HashMap<String, Vec<crate::store::import::StoredGpu>>,
    tx: std::sync::mpsc::SyncSender<Vec<reader::Staged>>,
    read_bytes: &std::sync::atomic::AtomicU64,
) -> Result<Parsed, SmiError> {
    let mut out = Parsed {
        registry: registry::Registry::default(),
        files: Vec::new(),
        bad_lines: Vec::new(),
        ignored: BTreeSet::new(),
        minutes: Default::default(),
    };
    let mut queue = reader::StageQueue::new(tx);
    let mut clock = values::Clock::new(opts.zone.clone());
    for path in files {
        let shown = path.display().to_string();
        let io = |source| SmiError::Io {
            path: shown.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut input = std::io::BufReader::with_capacity(1 << 20, file);
        let host_name = host_of(opts, path);
        let host = out
            .registry
            .host(&host_name, || stored.remove(&host_name).unwrap_or_default());
        if fixed.is_some_and(|l| l.kind == fields::SectionKind::Apps) {
            out.registry.saw_apps(host);
        }
        let mut fr = reader::FileReader {
            path: shown.clone(),
            host,
            layout: fixed.cloned(),
            fixed: fixed.is_some(),
            clock: &mut clock,
            last_ts: None,
            rows: 0,
            ignored: Vec::new(),
            map: opts.map.as_ref(),
        };
        let mut bad_here = 0;
        let mut sinks = reader::Sinks {
            staging: &mut queue,
            registry: &mut out.registry,
        };
        let bad_lines = &mut out.bad_lines;
        fr.read(
            &mut input,
            &mut sinks,
            opts.strict,
            &mut |b| {
                bad_here += 1;
                bad_lines.push(b);
            },
            &mut |n| {
                read_bytes.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            },
        )?;
        out.ignored.extend(fr.ignored);
        out.files.push(FileSummary {
            path: shown,
            host: host_name,
            rows: fr.rows,
            bad_lines: bad_here,
        });
    }
    out.minutes = queue.finish()?;
    Ok(out)
}

/// The host of a file's rows when no `--host` is given: the file stem, or `imported`.
pub fn default_host(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .map_or_else(|| "imported".to_string(), str::to_string)
}

/// The host `opts` gives the rows of `path`.
pub fn host_of(opts: &Options, path: &Path) -> String {
    opts.host.clone().unwrap_or_else(|| default_host(path))
}

/// Imports `files` into `store`; `progress` is called with the bytes read since its last call.
pub fn import(
    store: &Store,
    files: &[PathBuf],
    opts: &Options,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary, SmiError> {
    let fixed = match &opts.columns {
        Some(cols) => {
            let cells: Vec<&str> = cols.iter().map(String::as_str).collect();
            Some(
                fields::Layout::new(&cells)
                    .map_err(|e| SmiError::Usage(format!("--columns: {e}")))?,
            )
        }
        None => None,
    };
    let mut summary = Summary::default();
    let mut ignored = BTreeSet::new();
    if let Some(l) = &fixed {
        ignored.extend(l.ignored.iter().cloned());
    }
    // The GPUs the database already has, per host of the files: read here, because the
    // parsing thread has no connection.
    let mut stored = std::collections::HashMap::new();
    for path in files {
        if let std::collections::hash_map::Entry::Vacant(e) = stored.entry(host_of(opts, path)) {
            let gpus = store.stored_gpus(e.key())?;
            e.insert(gpus);
        }
    }
    let started = std::time::Instant::now();
    let mut staging = store.stage_import()?;
    let read_bytes = std::sync::atomic::AtomicU64::new(0);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<reader::Staged>>(4);
    // Parsing (one thread) overlaps the inserts into the staging tables (this thread, which
    // owns the connection).
    let (parsed, staged) = std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("gpuwatch-import-parse".into())
            .spawn_scoped(scope, || {
                parse_files(files, opts, fixed.as_ref(), stored, tx, &read_bytes)
            })
            .map_err(|e| SmiError::Usage(format!("cannot start the parsing thread: {e}")))?;
        let mut reported = 0;
        let mut staged: Result<(), StoreError> = Ok(());
        for batch in &rx {
            for row in batch {
                let r = match row {
                    reader::Staged::Sample(id, s) => staging.sample(id, &s),
                    reader::Staged::App {
                        ts_ms,
                        gpu_ref,
                        proc,
                        used_mem_bytes,
                    } => staging.process_sample(ts_ms, gpu_ref, proc, used_mem_bytes),
                    reader::Staged::Minute(m) => staging.minute(&m),
                };
                if let Err(e) = r {
                    staged = Err(e);
                    break;
                }
            }
            if staged.is_err() {
                break;
            }
            let now = read_bytes.load(std::sync::atomic::Ordering::Relaxed);
            progress(now - reported);
            reported = now;
        }
        // A failed insert closes the channel: the parser stops at its next batch.
        drop(rx);
        let parsed = match parser.join() {
            Ok(p) => p,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        let now = read_bytes.load(std::sync::atomic::Ordering::Relaxed);
        progress(now - reported);
        Ok::<_, SmiError>((parsed, staged))
    })?;
    // The staging side's own error first: the parser only saw the channel close.
    staged?;
    let parsed = parsed?;
    let registry = parsed.registry;
    // A file that gave no row at all is a mistake (a format gpuwatch cannot read), not a log
    // with a few bad lines: the whole import stops, with its first reasons.
    if let Some(f) = parsed.files.iter().find(|f| f.rows == 0 && f.bad_lines > 0) {
        return Err(SmiError::NoRows {
            file: f.path.clone(),
            skipped: f.bad_lines,
            first: parsed
                .bad_lines
                .iter()
                .filter(|b| b.file == f.path)
                .take(3)
                .cloned()
                .collect(),
        });
    }
    // Nothing at all to import is not a success either (exit 1, nothing written).
    if parsed.files.iter().all(|f| f.rows == 0) {
        let names: Vec<&str> = parsed.files.iter().map(|f| f.path.as_str()).collect();
        return Err(SmiError::Empty(names.join(", ")));
    }
    summary.files = parsed.files;
    summary.bad_lines = parsed.bad_lines;
    ignored.extend(parsed.ignored);
    let (plan, unresolved) = registry.plan();
    if opts.strict
        && let Some(u) = unresolved.first()
    {
        return Err(SmiError::Unresolved {
            what: format!("{}: {}", u.first_at, u.what),
            how: format!("{} process rows", u.rows),
        });
    }
    summary.stage_time = started.elapsed();
    let started = std::time::Instant::now();
    let published = staging.publish(&plan, &parsed.minutes)?;
    summary.publish_time = started.elapsed();
    let started = std::time::Instant::now();
    summary.samples = published.samples;
    summary.process_samples = published.process_samples;
    summary.gpus = plan.gpus.len();
    summary.processes = plan.processes.len();
    summary.unresolved = unresolved;
    summary.ignored_fields = ignored.into_iter().collect();
    for (h, name) in plan.hosts.iter().enumerate() {
        if let Some((from, to)) = plan.host_span(h) {
            let staged = published.rollups.get(h).copied().flatten();
            summary.rollups += staged.unwrap_or(0) as usize;
            summary.rollups_staged += staged.unwrap_or(0) as usize;
            summary.rollups += store.import_rollups(name, from, to, staged.is_some())?;
            summary.span = Some(
                summary
                    .span
                    .map_or((from, to), |(a, b)| (a.min(from), b.max(to))),
            );
        }
    }
    summary.rollup_time = started.elapsed();
    Ok(summary)
}
