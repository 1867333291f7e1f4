//! A parser for the two text formats Prometheus data is written in, for imports:
//! OpenMetrics 1.0 (`application/openmetrics-text`: timestamps in SECONDS, fractions allowed,
//! the file ends with `# EOF`, counters are exposed as `<name>_total` / `<name>_created`) and
//! the Prometheus text exposition format 0.0.4 (timestamps in integer MILLISECONDS, no
//! `# EOF`). One parser serves `gpuwatch import openmetrics` and the tests.
//!
//! `openmetrics/cursor.rs` holds the line cursor (names, labels, escapes, tokens).
//!
//! Invariants:
//! - The format decides the timestamp unit and nothing guesses from the numbers: a file whose
//!   last non-blank line is `# EOF` is OpenMetrics, any other is the Prometheus text format
//!   (or the caller forces one with [`Format`]).
//! - Every error names the line and column (1-based, columns in characters) and what was
//!   expected there; the first error stops the parse, so a caller never sees half a file.
//! - A sample without a timestamp is an error unless the caller says when the file was
//!   scraped ([`parse_at`]): an import places points on the GPU timeline, and "now" (what a
//!   scrape would use) is not when a past run produced them.
//! - Label values are unescaped (`\\`, `\"`, `\n`); labels are returned sorted by name;
//!   a label name given twice in one sample is an error.
//! - Values are kept as written, NaN and ±Inf included: the caller decides what to store.

use std::collections::HashMap;

use crate::model::TsMs;

mod cursor;
#[cfg(test)]
mod tests;

use cursor::Cursor;

/// Which text format a file is in (it decides the timestamp unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0: seconds, `# EOF` required as the last line.
    OpenMetrics,
    /// Prometheus text format 0.0.4: milliseconds, no `# EOF`.
    Prometheus,
}

impl Format {
    /// OpenMetrics when the last non-blank line is `# EOF`, else the Prometheus text format.
    pub fn detect(text: &str) -> Self {
        match text.lines().rev().find(|l| !l.trim().is_empty()) {
            Some(l) if l.trim_end() == "# EOF" => Self::OpenMetrics,
            _ => Self::Prometheus,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::OpenMetrics => "OpenMetrics",
            Self::Prometheus => "Prometheus text",
        }
    }
}

/// One parsed sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// 1-based line of the sample in the input.
    pub line: usize,
    /// The sample's name as written (`training_step_total`, not the family name).
    pub name: String,
    /// Labels sorted by name, values unescaped.
    pub labels: Vec<(String, String)>,
    pub value: f64,
    pub ts_ms: TsMs,
}

/// What `# TYPE` / `# HELP` / `# UNIT` said about a metric family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Family {
    pub kind: Option<String>,
    pub help: Option<String>,
    pub unit: Option<String>,
}

/// A parsed file.
#[derive(Debug, Clone, PartialEq)]
pub struct Exposition {
    pub format: Format,
    pub samples: Vec<Sample>,
    /// Metadata by family name.
    pub families: HashMap<String, Family>,
}

impl Exposition {
    /// The family a sample name belongs to: itself, or the name without a type suffix
    /// (`_total`, `_created`, `_bucket`, ...) when a `# TYPE` line declared that family.
    pub fn family_of<'a>(&self, sample_name: &'a str) -> &'a str {
        if self.families.contains_key(sample_name) {
            return sample_name;
        }
        for suffix in [
            "_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info",
        ] {
            if let Some(base) = sample_name.strip_suffix(suffix)
                && self.families.contains_key(base)
            {
                return base;
            }
        }
        sample_name
    }

    /// The declared type of a sample's family (`counter`, `gauge`, ...), if any.
    pub fn kind_of(&self, sample_name: &str) -> Option<&str> {
        self.families
            .get(self.family_of(sample_name))
            .and_then(|f| f.kind.as_deref())
    }
}

/// Where and why the input is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

const KINDS: &[&str] = &[
    "counter",
    "gauge",
    "histogram",
    "gaugehistogram",
    "stateset",
    "info",
    "summary",
    "unknown",
    "untyped",
];

/// Parses a whole file; `format` None means [`Format::detect`]. Every sample needs a timestamp.
pub fn parse(text: &str, format: Option<Format>) -> Result<Exposition, ParseError> {
    parse_at(text, format, None)
}

/// As [`parse`], but a sample without a timestamp gets `scraped_at` (the time the file was
/// scraped, which the caller knows) when that is given.
pub fn parse_at(
    text: &str,
    format: Option<Format>,
    scraped_at: Option<TsMs>,
) -> Result<Exposition, ParseError> {
    let format = format.unwrap_or_else(|| Format::detect(text));
    let mut out = Exposition {
        format,
        samples: Vec::new(),
        families: HashMap::new(),
    };
    let mut eof_line = None;
    let mut last_line = 0;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        last_line = n;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if let Some(at) = eof_line {
            if !line.trim().is_empty() {
                return Err(err(n, 1, format!("nothing may follow `# EOF` (line {at})")));
            }
            continue;
        }
        if line.trim().is_empty() {
            if format == Format::OpenMetrics {
                return Err(err(n, 1, "blank lines are not allowed in OpenMetrics"));
            }
            continue;
        }
        if line.starts_with('#') {
            if line.trim_end() == "# EOF" {
                if format == Format::Prometheus {
                    return Err(err(
                        n,
                        1,
                        "`# EOF` ends an OpenMetrics file, but this file is read as the Prometheus text format (it must be the last line)",
                    ));
                }
                eof_line = Some(n);
                continue;
            }
            comment(line, n, format, &mut out.families)?;
            continue;
        }
        out.samples.push(sample(line, n, format, scraped_at)?);
    }
    if format == Format::OpenMetrics && eof_line.is_none() {
        return Err(err(
            last_line + 1,
            1,
            "expected `# EOF`: an OpenMetrics file ends with it (a file without it is read as the Prometheus text format, timestamps in ms)",
        ));
    }
    // Milliseconds before 1973 are almost surely seconds of an OpenMetrics file whose
    // `# EOF` is missing (a truncated file): refuse rather than store points in 1970.
    if format == Format::Prometheus
        && let Some(s) = out
            .samples
            .iter()
            .find(|s| (0..SECONDS_LOOKALIKE_MS).contains(&s.ts_ms) && Some(s.ts_ms) != scraped_at)
    {
        return Err(err(
            s.line,
            1,
            format!(
                "the timestamp {} read as milliseconds is in 1970: it looks like seconds; is the file OpenMetrics with its `# EOF` missing (truncated)? restore `# EOF`, or import with --format openmetrics",
                s.ts_ms
            ),
        ));
    }
    Ok(out)
}

fn err(line: usize, col: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        col,
        message: message.into(),
    }
}

/// `# TYPE name kind`, `# HELP name text`, `# UNIT name unit`; other comments are allowed in
/// the Prometheus text format only.
fn comment(
    line: &str,
    n: usize,
    format: Format,
    families: &mut HashMap<String, Family>,
) -> Result<(), ParseError> {
    let mut c = Cursor::new(line, n);
    c.expect_char('#')?;
    let Some(keyword) = c.rest().strip_prefix(' ').and_then(|r| r.split(' ').next()) else {
        return other_comment(&c, format);
    };
    if !matches!(keyword, "TYPE" | "HELP" | "UNIT") {
        return other_comment(&c, format);
    }
    c.pos += 1 + keyword.len();
    c.expect_char(' ')?;
    let name = c.metric_name()?;
    let fam = families.entry(name.clone()).or_default();
    let text = match c.rest().strip_prefix(' ') {
        Some(t) => t.to_string(),
        None if c.rest().is_empty() && keyword == "HELP" => String::new(),
        None => {
            return Err(c.fail(format!(
                "expected a space and the {keyword} text after the name"
            )));
        }
    };
    match keyword {
        "TYPE" => {
            let kind = text.trim();
            if !KINDS.contains(&kind) {
                return Err(err(
                    n,
                    c.col() + 1,
                    format!(
                        "unknown metric type `{kind}`: expected one of {}",
                        KINDS.join(", ")
                    ),
                ));
            }
            if fam.kind.is_some() {
                return Err(err(n, 1, format!("a second # TYPE line for `{name}`")));
            }
            fam.kind = Some(kind.to_string());
        }
        "HELP" => fam.help = Some(text),
        _ => fam.unit = Some(text),
    }
    Ok(())
}

fn other_comment(c: &Cursor, format: Format) -> Result<(), ParseError> {
    match format {
        Format::Prometheus => Ok(()),
        Format::OpenMetrics => Err(c.fail(
            "expected `# TYPE`, `# HELP`, `# UNIT` or `# EOF`: OpenMetrics has no other comments",
        )),
    }
}

/// `name[{labels}] value timestamp[ # exemplar]`.
fn sample(
    line: &str,
    n: usize,
    format: Format,
    scraped_at: Option<TsMs>,
) -> Result<Sample, ParseError> {
    let mut c = Cursor::new(line, n);
    let name = c.metric_name()?;
    let mut labels: Vec<(String, String)> = Vec::new();
    if c.peek() == Some('{') {
        c.pos += 1;
        labels = c.labels()?;
    }
    if !c.skip_spaces() {
        return Err(c.fail("expected a space and the sample's value"));
    }
    let value_col = c.col();
    let value_text = c.token();
    let value = parse_value(value_text).ok_or_else(|| {
        err(
            n,
            value_col,
            format!("expected a number (or NaN, +Inf, -Inf), found `{value_text}`"),
        )
    })?;
    let had_space = c.skip_spaces();
    let ts_col = c.col();
    let ts_text = if had_space && c.peek().is_some_and(|ch| ch != '#') {
        c.token()
    } else {
        ""
    };
    let ts_ms = match (ts_text, scraped_at) {
        ("", Some(at)) => at,
        ("", None) => {
            return Err(err(
                n,
                ts_col,
                format!(
                    "expected a timestamp ({}) after the value: an import needs the time of every point; export the series with timestamps (e.g. a range query or a TSDB dump), or give the scrape's time with --at",
                    unit_hint(format)
                ),
            ));
        }
        (t, _) => parse_timestamp(t, format).ok_or_else(|| {
            err(
                n,
                ts_col,
                format!("expected a timestamp ({}), found `{t}`", unit_hint(format)),
            )
        })?,
    };
    c.skip_spaces();
    if !c.rest().is_empty() && !c.rest().starts_with('#') {
        return Err(c.fail("expected the end of the line (or ` # exemplar`) after the timestamp"));
    }
    labels.sort();
    Ok(Sample {
        line: n,
        name,
        labels,
        value,
        ts_ms,
    })
}

/// 1e11 ms is 1973-03-03: smaller Prometheus-text timestamps are taken for seconds.
const SECONDS_LOOKALIKE_MS: TsMs = 100_000_000_000;

fn unit_hint(format: Format) -> &'static str {
    match format {
        Format::OpenMetrics => "OpenMetrics: unix seconds, e.g. 1764511500.25",
        Format::Prometheus => "Prometheus text: integer unix milliseconds, e.g. 1764511500250",
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ if s
            .chars()
            .all(|ch| ch.is_ascii_digit() || "+-.eE_".contains(ch))
            && !s.contains('_') =>
        {
            s.parse().ok()
        }
        _ => None,
    }
}

fn parse_timestamp(s: &str, format: Format) -> Option<TsMs> {
    match format {
        Format::Prometheus => s.parse::<i64>().ok(),
        Format::OpenMetrics => {
            let secs = parse_value(s).filter(|v| v.is_finite())?;
            let ms = (secs * 1000.0).round();
            (ms.abs() < 9.0e15).then_some(ms as TsMs)
        }
    }
}
