//! `gpuwatch query SQL`: one read-only SQL statement over the history, printed as an aligned
//! table, CSV or JSON (the row writers, shared with `gpuwatch export`, are in `query/rows.rs`).
//!
//! Invariants:
//! - The database is opened read-only at the SQLite level with ATTACH disabled
//!   (`store::query::open_for_query`): nothing this command runs can change a file.
//! - `--timeout` and Ctrl-C interrupt the running statement through SQLite's interrupt
//!   handle (a watcher thread); a second Ctrl-C ends the process at once.
//! - Errors in the SQL itself (syntax, several statements, writes, ATTACH) exit with 2,
//!   failures while running (interrupted, database missing) with 1.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use crate::store::query::{self as q, QueryError};

use super::{ConfigArgs, Failure, exit, fail};

pub(super) mod rows;

use rows::{CsvSink, JsonSink, TableSink};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    /// For people: aligned columns, numbers right-aligned, NULL shown as NULL (also
    /// accepted as `text`).
    #[default]
    #[value(alias = "text")]
    Table,
    /// A header row, then one line per row (RFC 4180 quoting; NULL is an empty field).
    Csv,
    /// An array of row objects keyed by column name (NULL is null).
    Json,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The database is opened read-only: writes, ATTACH and several \
    statements are refused. Views: gpu_inventory, gpu_samples, gpu_rollups, gpu_processes, \
    gpu_events, gpu_metric_errors, training_metrics, training_sources, alerts, notifications \
    (columns and units in docs/SCHEMA.md); times are ms since the epoch (ts_ms, *_ms) with \
    RFC 3339 text beside them (time_utc, *_utc)."
)]
pub struct QueryArgs {
    /// One SQL statement (the views are documented in docs/SCHEMA.md), e.g.
    /// "SELECT time_utc, gpu_index, util_gpu_pct FROM gpu_samples ORDER BY ts_ms DESC LIMIT 10".
    #[arg(value_name = "SQL", allow_hyphen_values = true)]
    pub sql: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Output format: `table` for people, `csv` or `json` for programs.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Interrupt the statement after this long (e.g. 500ms, 10s, 2m; 0 = no limit).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub timeout: Duration,
}

/// Why the watcher interrupted the statement.
const BY_TIMEOUT: u8 = 1;
const BY_SIGINT: u8 = 2;

pub fn run(args: QueryArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = q::open_for_query(&cfg.database)?;

    let sigint = Arc::new(AtomicBool::new(false));
    // A second Ctrl-C while the first is being handled ends the process.
    let _ = signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        sigint.clone(),
    );
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, sigint.clone());
    let why = Arc::new(AtomicU8::new(0));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watcher = {
        let handle = conn.get_interrupt_handle();
        let deadline = (!args.timeout.is_zero()).then(|| Instant::now() + args.timeout);
        let (sigint, why) = (sigint.clone(), why.clone());
        std::thread::Builder::new()
            .name("gpuwatch-query-watch".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    done_rx.recv_timeout(Duration::from_millis(20))
                {
                    let reason = if sigint.load(Ordering::Relaxed) {
                        BY_SIGINT
                    } else if deadline.is_some_and(|d| Instant::now() >= d) {
                        BY_TIMEOUT
                    } else {
                        continue;
                    };
                    why.store(reason, Ordering::Relaxed);
                    handle.interrupt();
                    break;
                }
            })?
    };

    let out = rows::stdout_writer();
    let result = match args.format {
        Format::Table => {
            let mut sink = TableSink::new(out);
            q::run(&conn, &args.sql, &mut sink).and_then(|_| Ok(sink.finish()?))
        }
        Format::Csv => {
            let mut sink = CsvSink::new(out);
            q::run(&conn, &args.sql, &mut sink).and_then(|_| Ok(sink.finish()?))
        }
        Format::Json => {
            let mut sink = JsonSink::new(out);
            q::run(&conn, &args.sql, &mut sink).and_then(|_| Ok(sink.finish()?))
        }
    };
    drop(done_tx);
    let _ = watcher.join();
    match result {
        // `gpuwatch query ... | head`: the reader has what it wanted.
        Err(QueryError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| failure(e, why.load(Ordering::Relaxed), args.timeout)),
    }
}

fn failure(e: QueryError, why: u8, timeout: Duration) -> Failure {
    match e {
        QueryError::Interrupted if why == BY_SIGINT => fail(
            exit::FAILURE,
            anyhow!("the query was interrupted by Ctrl-C"),
        ),
        QueryError::Interrupted => fail(
            exit::FAILURE,
            anyhow!(
                "the query was interrupted after {} (--timeout): raise the limit, e.g. \
                 --timeout 2m (0 = none), or filter on ts_ms to read less",
                humantime::format_duration(timeout)
            ),
        ),
        e @ (QueryError::Empty
        | QueryError::MultipleStatements
        | QueryError::Write(_)
        | QueryError::Attach
        | QueryError::Extension
        | QueryError::Syntax { .. }
        | QueryError::Invalid(_)) => fail(exit::USAGE, e),
        e @ (QueryError::Sqlite(_) | QueryError::Output(_)) => fail(exit::FAILURE, e),
    }
}
