//! Row writers shared by `gpuwatch query` and `gpuwatch export`: an aligned table, CSV with a
//! header, a JSON array of objects and JSON lines, each a [`RowSink`] fed row by row.
//!
//! Invariants: NULL prints as `NULL` in tables, an empty field in CSV and `null` in JSON, never
//! as 0; integers stay integers and reals stay reals (`2.0`) in JSON; keys keep the column
//! order; memory stays bounded (a table measures only its first rows).

use std::io::Write;

use crate::store::query::{Cell, RowSink};

/// Bytes buffered before a write to stdout: a week of rollups is 4.7 MB of CSV, written in
/// 8 KiB pieces it took 1 121 `write`s (two per piece: stdout's line buffer splits each at its
/// last newline), each waking the reader of a pipe; 34 with this.
const OUT_BUF: usize = 256 * 1024;

/// Standard output for rows, buffered [`OUT_BUF`] bytes at a time.
pub fn stdout_writer() -> std::io::BufWriter<std::io::StdoutLock<'static>> {
    std::io::BufWriter::with_capacity(OUT_BUF, std::io::stdout().lock())
}

/// Text of a cell for tables and CSV (`None` for NULL).
pub fn text(c: &Cell) -> Option<String> {
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
pub fn json(c: &Cell) -> String {
    match c {
        Cell::Null => "null".into(),
        Cell::Int(i) => i.to_string(),
        Cell::Real(f) => serde_json::Number::from_f64(*f).map_or("null".into(), |n| n.to_string()),
        Cell::Text(t) => serde_json::Value::from(t.as_str()).to_string(),
        Cell::Blob(b) => serde_json::Value::from(hex::encode(b)).to_string(),
    }
}

/// Column names as JSON keys: a repeated name gets `_2`, `_3`, ... so no key is lost.
pub fn json_keys(names: &[String]) -> Vec<String> {
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
pub fn json_object(keys: &[String], cells: &[Cell]) -> String {
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
pub struct CsvSink<W: Write>(csv::Writer<W>);

impl<W: Write> CsvSink<W> {
    pub fn new(w: W) -> Self {
        Self(csv::WriterBuilder::new().flexible(false).from_writer(w))
    }

    pub fn finish(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<W: Write> RowSink for CsvSink<W> {
    fn columns(&mut self, names: &[String]) -> std::io::Result<()> {
        self.0.write_record(names).map_err(std::io::Error::other)
    }
    fn row(&mut self, cells: &[Cell]) -> std::io::Result<()> {
        // Field by field, numbers formatted on the stack: no allocation per cell (a week of
        // rollups is 80 000 rows).
        let mut int = itoa::Buffer::new();
        let mut float = ryu::Buffer::new();
        for c in cells {
            let field: &[u8] = match c {
                Cell::Null => b"",
                Cell::Int(i) => int.format(*i).as_bytes(),
                Cell::Real(f) if f.is_finite() => float.format_finite(*f).as_bytes(),
                Cell::Text(t) => t.as_bytes(),
                other => {
                    let t = text(other).unwrap_or_default();
                    self.0.write_field(t).map_err(std::io::Error::other)?;
                    continue;
                }
            };
            self.0.write_field(field).map_err(std::io::Error::other)?;
        }
        self.0
            .write_record(std::iter::empty::<&[u8]>())
            .map_err(std::io::Error::other)
    }
}

/// An array of objects: `[`, one object per line, `]`.
pub struct JsonSink<W: Write> {
    out: W,
    keys: Vec<String>,
    rows: u64,
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            keys: Vec::new(),
            rows: 0,
        }
    }

    /// Closes the array (`columns` opened it).
    pub fn finish(&mut self) -> std::io::Result<()> {
        self.out.write_all(b"\n]\n")?;
        self.out.flush()
    }
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
pub struct TableSink<W: Write> {
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
    pub fn new(out: W) -> Self {
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
    pub fn finish(&mut self) -> std::io::Result<()> {
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

/// One JSON object per line.
pub struct JsonLinesSink<W: Write> {
    out: W,
    keys: Vec<String>,
}

impl<W: Write> JsonLinesSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            keys: Vec::new(),
        }
    }

    pub fn finish(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl<W: Write> RowSink for JsonLinesSink<W> {
    fn columns(&mut self, names: &[String]) -> std::io::Result<()> {
        self.keys = json_keys(names);
        Ok(())
    }
    fn row(&mut self, cells: &[Cell]) -> std::io::Result<()> {
        writeln!(self.out, "{}", json_object(&self.keys, cells))
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
