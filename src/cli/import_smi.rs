//! `gpuwatch import nvidia-smi FILE...`: imports CSV logs of `nvidia-smi --query-gpu` and
//! `--query-compute-apps` (see [`crate::import::nvidia_smi`]) and prints a summary.
//!
//! Invariants: nothing is imported when the command fails; a file of which no row could be
//! read fails the whole command (exit 1, its count and first reasons on one line); otherwise
//! bad lines are printed as warnings (`file:line: what`, at most [`SHOWN_BAD_LINES`], then a
//! count); the progress bar appears
//! only when stderr is a terminal and the input is large; the summary goes to stdout.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;

use crate::import::nvidia_smi::{self, Options, Summary, Zone};
use crate::store;

use super::replay::rfc3339;
use super::{ConfigArgs, Failure, exit, fail};

/// Bad lines printed one by one; the rest are counted.
const SHOWN_BAD_LINES: usize = 20;
/// Inputs at least this large get a progress bar (when stderr is a terminal).
const PROGRESS_MIN_BYTES: u64 = 8 << 20;
/// A publish longer than this gets a warning (the daemon's busy timeout is 5 s).
const PUBLISH_WARN: std::time::Duration = std::time::Duration::from_secs(10);
/// Ignored field names listed in the summary; the rest are counted.
const SHOWN_IGNORED: usize = 12;

#[derive(Debug, clap::Args)]
pub struct ImportSmiArgs {
    /// CSV logs of `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N` or of
    /// `--query-compute-apps=...`.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// IANA zone of the log's wall-clock timestamps (nvidia-smi's carry none) [default: this
    /// machine's zone]. Unix epoch timestamps (seconds, or milliseconds by size or by a
    /// `timestamp [ms]` header) and RFC 3339 times with an offset are absolute: no zone applies.
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// Host the rows belong to [default: each file's name without extension, e.g. `node7`
    /// for node7.csv]. Give the --query-gpu and --query-compute-apps logs of one machine the
    /// same --host.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// The query fields, comma-separated, of logs written with `noheader` (the files then
    /// have no header line), e.g. `timestamp,index,utilization.gpu,memory.used`.
    #[arg(long, value_name = "LIST")]
    pub columns: Option<String>,
    /// Fail (importing nothing) on the first line that cannot be read, instead of skipping it.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: ImportSmiArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let zone = Zone::parse(args.tz.as_deref())
        .map_err(|e| fail(exit::USAGE, anyhow::anyhow!("--tz: {e}")))?;
    if args.host.as_deref().is_some_and(str::is_empty) {
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!("--host must not be empty"),
        ));
    }
    let columns = match &args.columns {
        None => None,
        Some(list) => {
            let cols: Vec<String> = list.split(',').map(|c| c.trim().to_string()).collect();
            if cols.iter().any(String::is_empty) {
                return Err(fail(
                    exit::USAGE,
                    anyhow::anyhow!("--columns `{list}` has an empty field name"),
                ));
            }
            Some(cols)
        }
    };
    let opts = Options {
        zone,
        host: args.host.clone(),
        columns,
        strict: args.strict,
        map: None,
    };
    import_files(&cfg, &args.files, &opts)
}

/// Imports `files` with `opts` into the config's database and prints the summary (also
/// `import csv`, which reads through a column map).
pub(super) fn import_files(
    cfg: &crate::config::Config,
    files: &[PathBuf],
    opts: &Options,
) -> Result<(), Failure> {
    let mut total = 0u64;
    for f in files {
        let meta = std::fs::metadata(f)
            .with_context(|| format!("cannot read {}", f.display()))
            .map_err(|e| fail(exit::USAGE, e))?;
        total += meta.len();
    }
    let first_host = nvidia_smi::host_of(opts, &files[0]);
    let host_existed = store::import::host_exists(&cfg.database, &first_host);
    let db_existed = cfg.database.exists();
    let mut st_cfg = store::StoreConfig::new(first_host.clone());
    st_cfg.retention = cfg.retention;
    st_cfg.rollup_retention = cfg.rollup_retention;
    st_cfg.max_db_size = cfg.max_db_size;
    let store = store::open(&cfg.database, &st_cfg)
        .with_context(|| format!("opening {}", cfg.database.display()))?;
    crate::notify::recovered::announce(&store, cfg);

    let bar = (std::io::stderr().is_terminal() && total >= PROGRESS_MIN_BYTES).then(|| {
        let b = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "importing {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        ) {
            b.set_style(style);
        }
        b
    });
    let started = std::time::Instant::now();
    let result = nvidia_smi::import(&store, files, opts, &mut |n| {
        if let Some(b) = &bar {
            b.inc(n);
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if result.is_err() && !host_existed {
        // `open` registered the host; the failed import leaves no trace of it.
        if let Err(e) = store.forget_unused_host(&first_host) {
            tracing::warn!(error = %e, host = first_host, "could not remove the unused host row");
        }
    }
    if result.is_err() && !db_existed {
        // The database was created for this import: a failed import leaves no file behind.
        drop(store);
        for suffix in ["", "-wal", "-shm"] {
            let mut p = cfg.database.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
    let summary = result.map_err(|e| {
        let code = match e {
            nvidia_smi::SmiError::Usage(_) => exit::USAGE,
            _ => exit::FAILURE,
        };
        fail(code, e)
    })?;
    print_summary(&summary, &cfg.database, started.elapsed());
    if let Some(span) = summary.span {
        let mut hosts: Vec<String> = files.iter().map(|f| nvidia_smi::host_of(opts, f)).collect();
        hosts.sort();
        hosts.dedup();
        // The samples are in; the ledger is a derived view: a failure is said, not fatal.
        match crate::alerts::usage::account(&cfg.database, &hosts, span) {
            Ok(n) => tracing::info!(changes = n, "usage ledger accounted"),
            Err(e) => eprintln!(
                "warning: the usage ledger was not accounted ({e}); `gpuwatch usage` will not show this log"
            ),
        }
    }
    if let Some((first, last)) = summary.span {
        let keep = cfg.retention.as_millis() as i64;
        if last - first > keep {
            eprintln!(
                "warning: the log spans more than `retention` ({}): raw samples before {} will be deleted at the next maintenance (the 1-minute rollups stay for `rollup_retention`, {}; `history` and `report` read them); import with a config (--config) whose `retention` covers the log to keep every sample",
                humantime::format_duration(cfg.retention),
                rfc3339(last - keep),
                humantime::format_duration(cfg.rollup_retention)
            );
        }
    }
    Ok(())
}

fn print_summary(s: &Summary, db: &std::path::Path, took: std::time::Duration) {
    for b in s.bad_lines.iter().take(SHOWN_BAD_LINES) {
        eprintln!("warning: skipped {b}");
    }
    if s.bad_lines.len() > SHOWN_BAD_LINES {
        eprintln!(
            "warning: ... and {} more skipped lines",
            s.bad_lines.len() - SHOWN_BAD_LINES
        );
    }
    for u in &s.unresolved {
        eprintln!(
            "warning: skipped {} process rows from {}: {}",
            u.rows, u.first_at, u.what
        );
    }
    for f in &s.files {
        println!(
            "{}: {} rows -> host {}{}",
            f.path,
            f.rows,
            f.host,
            if f.bad_lines > 0 {
                format!(" ({} lines skipped)", f.bad_lines)
            } else {
                String::new()
            }
        );
    }
    let secs = took.as_secs_f64().max(1e-9);
    let rows: u64 = s.files.iter().map(|f| f.rows).sum();
    println!(
        "imported {} samples and {} process samples of {} GPUs and {} processes into {} in {:.2} s ({:.0} rows/s); {} rollup rows",
        s.samples,
        s.process_samples,
        s.gpus,
        s.processes,
        db.display(),
        secs,
        rows as f64 / secs,
        s.rollups
    );
    println!(
        "read and staged in {:.2} s, published in one transaction of {:.2} s, rolled up in {:.2} s \
         ({} rollup rows computed while staging)",
        s.stage_time.as_secs_f64(),
        s.publish_time.as_secs_f64(),
        s.rollup_time.as_secs_f64(),
        s.rollups_staged
    );
    if s.publish_time > PUBLISH_WARN {
        eprintln!(
            "warning: publishing held the database's write lock for {:.1} s; a running daemon \
             keeps its ticks queued meanwhile (up to a minute), but delays alerts: import long \
             logs in smaller pieces (e.g. one file per day) while the daemon runs",
            s.publish_time.as_secs_f64()
        );
    }
    match s.span {
        Some((a, b)) => println!("time span: {} .. {}", rfc3339(a), rfc3339(b)),
        None => println!("time span: none (no rows)"),
    }
    println!("skipped lines: {}", s.bad_lines.len());
    if !s.ignored_fields.is_empty() {
        let shown: Vec<&str> = s
            .ignored_fields
            .iter()
            .take(SHOWN_IGNORED)
            .map(String::as_str)
            .collect();
        let more = s.ignored_fields.len().saturating_sub(SHOWN_IGNORED);
        println!(
            "ignored {} fields gpuwatch does not store: {}{}",
            s.ignored_fields.len(),
            shown.join(", "),
            if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            }
        );
    }
}
