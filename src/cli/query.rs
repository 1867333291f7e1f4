//! `gpuwatch query SQL`: one read-only SQL statement over the history, printed as an aligned
//! table, CSV or JSON; and the row writers `gpuwatch export` shares.
//!
//! Invariants:
//! - The database is opened read-only at the SQLite level with ATTACH disabled
//!   (`store::query::open_for_query`): nothing this command runs can change a file.
//! - `--timeout` and Ctrl-C interrupt the running statement through SQLite's interrupt
//!   handle (a watcher thread); a second Ctrl-C ends the process at once.
//! - NULL prints as `NULL` in tables, an empty field in CSV and `null` in JSON, never as 0;
//!   integers stay integers and reals stay reals (`2.0`) in JSON.
//! - Errors in the SQL itself (syntax, several statements, writes, ATTACH) exit with 2,
//!   failures while running (interrupted, database missing) with 1.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use crate::store::query::{self as q, Cell, QueryError, RowSink};

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    /// Aligned columns, numbers right-aligned, NULL shown as NULL.
    #[default]
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
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Interrupt the statement after this long (e.g. 500ms, 10s, 2m; 0 = no limit).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub timeout: Duration,
}

/// Text of a cell for tables and CSV (`None` for NULL).
pub(super) fn text(c: &Cell) -> Option<String> {
    match c {
        Cell::Null => None,
        Cell::Int(i) => Some(i.to_string()),
        Cell::Real(f) => Some(real(*f)),
        Cell::Text(t) => Some(t.clone()),
        Cell::Blob(b) => Some(format!("x'{}'", hex::encode(b))),
    }
}

/// A real as the shortest text that reads back the same, always with a `.` or exponent.
fn real(f: f64) -> String {
    match serde_json::Number::from_f64(f) {
        Some(n) => n.to_string(),
        None if f.is_nan() => "NaN".into(),
        None if f > 0.0 => "Inf".into(),
        None => "-Inf".into(),
    }
}

/// A cell as JSON text (non-finite reals and NaN become null, blobs hex strings).
pub(super) fn json(c: &Cell) -> String {
    match c {
        Cell::Null => "null".into(),
        Cell::Int(i) => i.to_string(),
        Cell::Real(f) => serde_json::Number::from_f64(*f).map_or("null".into(), |n| n.to_string()),
        Cell::Text(t) => serde_json::Value::from(t.as_str()).to_string(),
        Cell::Blob(b) => serde_json::Value::from(hex::encode(b)).to_string(),
    }
}

/// Column names as JSON keys: a repeated name gets `_2`, `_3`, ... so no key is lost.
pub(super) fn json_keys(names: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    names
        .iter()
        .map(|n| {
            let mut key = n.clone();
            let mut k = 2;
            while !seen.insert(key.clone()) {
                key = format!("{n}_{k}");
                k += 1;
            }
            serde_json::Value::from(key).to_string()
        })
        .collect()
}

/// One JSON object from a row, keys in column order.
pub(super) fn json_object(keys: &[String], cells: &[Cell]) -> String {
    let mut s = String::from("{");
    for (i, (k, c)) in keys.iter().zip(cells).enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(k);
        s.push(':');
        s.push_str(&json(c));
    }
    s.push('}');
    s
}

/// CSV with a header row.
pub(super) struct CsvSink<W: Write>(pub csv::Writer<W>);

impl<W: Write> CsvSink<W> {
    pub fn new(w: W) -> Self {
        Self(csv::WriterBuilder::new().flexible(false).from_writer(w))
    }
}

impl<W: Write> RowSink for CsvSink<W> {
    fn columns(&mut self, names: &[String]) -> std::io::Result<()> {
        self.0.write_record(names).map_err(std::io::Error::other)
    }
    fn row(&mut self, cells: &[Cell]) -> std::io::Result<()> {
        self.0
            .write_record(cells.iter().map(|c| text(c).unwrap_or_default()))
            .map_err(std::io::Error::other)
    }
}

/// An array of objects: `[`, one object per line, `]`.
struct JsonSink<W: Write> {
    out: W,
    keys: Vec<String>,
    rows: u64,
}

impl<W: Write> RowSink for JsonSink<W> {
    fn columns(&mut self, names: &[String]) -> std::io::Result<()> {
        self.keys = json_keys(names);
        self.out.write_all(b"[")
    }
    fn row(&mut self, cells: &[Cell]) -> std::io::Result<()> {
        let sep = if self.rows == 0 { "\n" } else { ",\n" };
        self.rows += 1;
        write!(self.out, "{sep}{}", json_object(&self.keys, cells))
    }
}

/// Rows a table measures before it prints: the column widths come from the first rows, so
/// memory stays bounded however many rows follow (a later, wider value shifts its line).
const TABLE_MEASURE_ROWS: usize = 1000;

/// Aligned columns: the first [`TABLE_MEASURE_ROWS`] rows are measured, then everything is
/// printed as it arrives; [`TableSink::finish`] adds the row count.
struct TableSink<W: Write> {
    out: W,
    names: Vec<String>,
    /// Text and "right-aligned" of the rows not printed yet.
    pending: Vec<Vec<(String, bool)>>,
    /// Widths and numeric columns, once fixed.
    layout: Option<(Vec<usize>, Vec<bool>)>,
    rows: u64,
}

/// Control characters would break the alignment: show them escaped.
fn one_line(s: &str) -> String {
    s.chars().flat_map(char::escape_default).collect()
}

fn width(s: &str) -> usize {
    s.chars().count()
}

impl<W: Write> TableSink<W> {
    fn new(out: W) -> Self {
        Self {
            out,
            names: Vec::new(),
            pending: Vec::new(),
            layout: None,
            rows: 0,
        }
    }

    /// One line; `right` says which cells are right-aligned.
    fn line(&mut self, cells: &mut dyn Iterator<Item = (&str, bool)>) -> std::io::Result<()> {
        let Some((widths, _)) = &self.layout else {
            return Ok(());
        };
        let mut s = String::new();
        for (i, (t, right)) in cells.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = " ".repeat(widths[i].saturating_sub(width(t)));
            if right {
                s.push_str(&pad);
                s.push_str(t);
            } else {
                s.push_str(t);
                s.push_str(&pad);
            }
        }
        writeln!(self.out, "{}", s.trim_end())
    }

    fn print_row(&mut self, row: &[(String, bool)]) -> std::io::Result<()> {
        let numeric = self
            .layout
            .as_ref()
            .map(|l| l.1.clone())
            .unwrap_or_default();
        self.line(
            &mut row
                .iter()
                .zip(numeric)
                // NULL in a numeric column aligns with the numbers.
                .map(|((t, num), n)| (t.as_str(), *num || (n && t == "NULL"))),
        )
    }

    /// Fixes the layout from the rows seen so far and prints the header and those rows.
    fn flush_pending(&mut self) -> std::io::Result<()> {
        if self.layout.is_none() {
            let mut widths: Vec<usize> = self.names.iter().map(|n| width(n)).collect();
            // A column is numeric when every non-NULL value in it is a number.
            let mut numeric = vec![true; self.names.len()];
            for row in &self.pending {
                for (i, (t, num)) in row.iter().enumerate() {
                    widths[i] = widths[i].max(width(t));
                    if !num && t != "NULL" {
                        numeric[i] = false;
                    }
                }
            }
            let dashes: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            self.layout = Some((widths, numeric.clone()));
            let names = std::mem::take(&mut self.names);
            self.line(&mut names.iter().zip(&numeric).map(|(n, r)| (n.as_str(), *r)))?;
            self.line(&mut dashes.iter().map(|d| (d.as_str(), false)))?;
            self.names = names;
        }
        for row in std::mem::take(&mut self.pending) {
            self.print_row(&row)?;
        }
        Ok(())
    }

    /// Prints what is left and the row count.
    fn finish(&mut self) -> std::io::Result<()> {
        if self.names.is_empty() {
            return writeln!(self.out, "(no result columns)");
        }
        self.flush_pending()?;
        let n = self.rows;
        writeln!(self.out, "({n} row{})", if n == 1 { "" } else { "s" })?;
        self.out.flush()
    }
}

impl<W: Write> RowSink for TableSink<W> {
    fn columns(&mut self, names: &[String]) -> std::io::Result<()> {
        self.names = names.iter().map(|n| one_line(n)).collect();
        Ok(())
    }
    fn row(&mut self, cells: &[Cell]) -> std::io::Result<()> {
        let row: Vec<(String, bool)> = cells
            .iter()
            .map(|c| match text(c) {
                None => ("NULL".to_string(), c.is_number()),
                Some(t) if c.is_number() => (t, true),
                Some(t) if t.chars().any(char::is_control) => (one_line(&t), false),
                Some(t) => (t, false),
            })
            .collect();
        self.rows += 1;
        if self.layout.is_some() {
            return self.print_row(&row);
        }
        self.pending.push(row);
        if self.pending.len() >= TABLE_MEASURE_ROWS {
            self.flush_pending()?;
        }
        Ok(())
    }
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

    let stdout = std::io::stdout();
    let result = match args.format {
        Format::Table => {
            let mut sink = TableSink::new(std::io::BufWriter::new(stdout.lock()));
            q::run(&conn, &args.sql, &mut sink).and_then(|_| Ok(sink.finish()?))
        }
        Format::Csv => {
            let mut sink = CsvSink::new(std::io::BufWriter::new(stdout.lock()));
            q::run(&conn, &args.sql, &mut sink)
                .and_then(|_| sink.0.flush().map_err(QueryError::from))
        }
        Format::Json => {
            let mut sink = JsonSink {
                out: std::io::BufWriter::new(stdout.lock()),
                keys: Vec::new(),
                rows: 0,
            };
            q::run(&conn, &args.sql, &mut sink).and_then(|_| {
                sink.out.write_all(b"\n]\n")?;
                sink.out.flush()?;
                Ok(())
            })
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
        | QueryError::Syntax { .. }
        | QueryError::Invalid(_)) => fail(exit::USAGE, e),
        e @ (QueryError::Sqlite(_) | QueryError::Output(_)) => fail(exit::FAILURE, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_numbers_right_and_shows_null() {
        let mut t = TableSink::new(Vec::new());
        t.columns(&["gpu".into(), "name".into(), "util".into()])
            .unwrap();
        t.row(&[Cell::Int(0), Cell::Text("H100".into()), Cell::Int(100)])
            .unwrap();
        t.row(&[Cell::Int(10), Cell::Null, Cell::Null]).unwrap();
        t.finish().unwrap();
        let out = String::from_utf8(t.out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "gpu  name  util");
        assert_eq!(lines[1], "---  ----  ----");
        assert_eq!(lines[2], "  0  H100   100");
        assert_eq!(lines[3], " 10  NULL  NULL");
        assert_eq!(lines[4], "(2 rows)");
    }

    #[test]
    fn a_long_table_streams_after_the_measured_rows() {
        let mut t = TableSink::new(Vec::new());
        t.columns(&["n".into()]).unwrap();
        for i in 0..2500 {
            t.row(&[Cell::Int(i)]).unwrap();
            assert!(t.pending.len() < TABLE_MEASURE_ROWS);
        }
        t.finish().unwrap();
        let out = String::from_utf8(t.out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2 + 2500 + 1);
        assert_eq!(lines[0], "  n");
        assert_eq!(lines[2], "  0");
        // Wider than the measured rows: printed whole.
        assert_eq!(lines[2 + 1000], "1000");
        assert_eq!(lines.last(), Some(&"(2500 rows)"));
        assert_eq!(out.matches("---").count(), 1);
    }

    #[test]
    fn json_keeps_types_and_order() {
        let keys = json_keys(&["b".into(), "a".into(), "a".into()]);
        let o = json_object(&keys, &[Cell::Real(2.0), Cell::Int(2), Cell::Null]);
        assert_eq!(o, r#"{"b":2.0,"a":2,"a_2":null}"#);
        assert_eq!(text(&Cell::Real(0.1)).unwrap(), "0.1");
        assert_eq!(json(&Cell::Real(f64::INFINITY)), "null");
    }
}
