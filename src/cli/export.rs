//! `gpuwatch export`: stored samples of a time range (the columns of the `gpu_samples` view)
//! as a table (for a person at a terminal), CSV with a header (the default into a file or a
//! pipe) or JSON lines, to stdout or a file.
//!
//! Invariants:
//! - Rows stream from the database to the output in time order; nothing holds the range in
//!   memory.
//! - `-o FILE` is written to a temporary file beside it and renamed into place only when the
//!   export is complete: a failed export leaves no half-written FILE (and an existing FILE
//!   untouched).
//! - The range is half-open (`--from` inclusive, `--to` exclusive).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;

use crate::clock::now_ms;
use crate::store::export::{self as ex, ExportError, ExportFilter, GpuFilter};
use crate::store::query::{Cell, RowSink};

use super::query::rows::{CsvSink, JsonLinesSink, TableSink, stdout_writer};
use super::timearg::RangeArgs;
use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// For people: aligned columns (also accepted as `text`).
    #[value(alias = "text")]
    Table,
    /// A header row, then one sample per line (NULL is an empty field).
    Csv,
    /// One JSON object per sample and line, keys in column order (NULL is null).
    Jsonl,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The rows are those of the gpu_samples view (docs/SCHEMA.md) with \
    --from <= ts_ms < --to (default: the last hour), in time order. Example: gpuwatch export \
    --from 2025-06-15T14:12:00Z --to 2025-06-15T14:32:00Z --gpu 3 --format jsonl -o gpu3.jsonl"
)]
pub struct ExportArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub range: RangeArgs,
    /// Only this host's GPUs.
    #[arg(long)]
    pub host: Option<String>,
    /// Only this GPU: its index (as in `gpuwatch status`) or its uuid.
    #[arg(long, value_name = "N|UUID")]
    pub gpu: Option<String>,
    /// Output format: `table` for people, `csv` or `jsonl` for programs [default: table on a
    /// terminal, csv into a file (-o) or a pipe].
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Write to FILE instead of stdout (replaced only when the export is complete).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Passes rows on until Ctrl-C, then fails with [`std::io::ErrorKind::Interrupted`].
struct UntilCtrlC<'a> {
    inner: &'a mut dyn RowSink,
    stop: &'a AtomicBool,
}

impl RowSink for UntilCtrlC<'_> {
    fn columns(&mut self, names: &[String]) -> std::io::Result<()> {
        self.inner.columns(names)
    }
    fn row(&mut self, cells: &[Cell]) -> std::io::Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        self.inner.row(cells)
    }
}

/// Exports into `w`; returns the rows written.
fn export_to(
    conn: &rusqlite::Connection,
    filter: &ExportFilter,
    format: Format,
    w: &mut dyn Write,
    stop: &AtomicBool,
) -> Result<u64, ExportError> {
    match format {
        Format::Table => through(conn, filter, stop, TableSink::new(w), TableSink::finish),
        Format::Csv => through(conn, filter, stop, CsvSink::new(w), CsvSink::finish),
        Format::Jsonl => through(
            conn,
            filter,
            stop,
            JsonLinesSink::new(w),
            JsonLinesSink::finish,
        ),
    }
}

/// The rows through `sink` (until Ctrl-C), then `finish` (the table's count, the flush).
fn through<S: RowSink>(
    conn: &rusqlite::Connection,
    filter: &ExportFilter,
    stop: &AtomicBool,
    mut sink: S,
    finish: impl FnOnce(&mut S) -> std::io::Result<()>,
) -> Result<u64, ExportError> {
    let n = ex::samples(
        conn,
        filter,
        &mut UntilCtrlC {
            inner: &mut sink,
            stop,
        },
    )?;
    finish(&mut sink)?;
    Ok(n)
}

pub fn run(args: ExportArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = crate::store::open_read_only(&cfg.database)?;
    // The last hour counts back from now, or from the newest sample when that is later.
    let now = crate::store::read::last_sample_ts(&conn, args.host.as_deref())?
        .unwrap_or(0)
        .max(now_ms());
    let (from_ms, to_ms) = args
        .range
        .resolve(now, Duration::from_secs(3600))
        .map_err(|e| fail(exit::USAGE, anyhow::anyhow!(e)))?;
    // A window without data: where the data is, and nothing written.
    if let Some(hint) =
        super::timearg::no_data_hint(&conn, args.host.as_deref(), from_ms, to_ms, true)?
    {
        return Err(fail(exit::FAILURE, anyhow::anyhow!(hint)));
    }
    let filter = ExportFilter {
        from_ms,
        to_ms,
        host: args.host.clone(),
        gpu: args.gpu.as_deref().map(GpuFilter::parse),
    };
    // Ctrl-C stops the export between rows, so `-o FILE` leaves neither FILE nor a temporary
    // file behind; a second Ctrl-C ends the process at once.
    let stop = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        stop.clone(),
    );
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone());
    let usage = |e: ExportError| match e {
        e @ (ExportError::UnknownHost { .. } | ExportError::UnknownGpu { .. }) => {
            fail(exit::USAGE, e)
        }
        ExportError::Output(e) if e.kind() == std::io::ErrorKind::Interrupted => fail(
            exit::FAILURE,
            anyhow::anyhow!(
                "the export was interrupted by Ctrl-C{}",
                args.output.as_ref().map_or_else(String::new, |p| format!(
                    "; {} was not written",
                    p.display()
                ))
            ),
        ),
        e => fail(exit::FAILURE, e),
    };
    // Table for a person at a terminal; csv for a file or a pipe (what other tools read).
    let format = args.format.unwrap_or_else(|| {
        use std::io::IsTerminal;
        if args.output.is_none() && std::io::stdout().is_terminal() {
            Format::Table
        } else {
            Format::Csv
        }
    });
    let rows = match &args.output {
        None => {
            let mut out = stdout_writer();
            match export_to(&conn, &filter, format, &mut out, &stop) {
                // `gpuwatch export ... | head`: the reader has what it wanted.
                Err(ExportError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(());
                }
                r => r.map_err(usage)?,
            }
        }
        Some(path) => {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or_else(|| std::path::Path::new("."));
            let tmp = tempfile::NamedTempFile::new_in(dir)
                .with_context(|| format!("cannot create a file in {}", dir.display()))?;
            let mut out = std::io::BufWriter::new(tmp);
            let rows = export_to(&conn, &filter, format, &mut out, &stop).map_err(usage)?;
            let tmp = out
                .into_inner()
                .map_err(|e| e.into_error())
                .with_context(|| format!("writing {}", path.display()))?;
            // Nothing exported: no file (the temporary one goes with `tmp`).
            if rows > 0 {
                tmp.persist(path)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            rows
        }
    };
    if rows == 0 {
        // Data in the window, but none of the selected host's or GPU's: no file is written.
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!(
                "no samples from {} to {}{}",
                crate::format::utc_label(from_ms),
                crate::format::utc_label(to_ms),
                if filter.host.is_some() || filter.gpu.is_some() {
                    " for the selected host/GPU"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok(())
}
