//! A parser for the two text formats Prometheus data is written in, for imports:
//! OpenMetrics 1.0 (`application/openmetrics-text`: timestamps in SECONDS, fractions allowed,
//! the file ends with `# EOF`, counters are exposed as `<name>_total` / `<name>_created`) and
//! the Prometheus text exposition format 0.0.4 (timestamps in integer MILLISECONDS, no
//! `# EOF`). One parser serves `gpuwatch import openmetrics` and the tests.
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

/// A position in one line; `pos` is a byte offset, columns are reported in characters.
struct Cursor<'a> {
    line: &'a str,
    n: usize,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(line: &'a str, n: usize) -> Self {
        Self { line, n, pos: 0 }
    }

    fn rest(&self) -> &'a str {
        &self.line[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn col(&self) -> usize {
        self.line[..self.pos].chars().count() + 1
    }

    fn fail(&self, message: impl Into<String>) -> ParseError {
        err(self.n, self.col(), message)
    }

    fn expect_char(&mut self, want: char) -> Result<(), ParseError> {
        match self.peek() {
            Some(ch) if ch == want => {
                self.pos += ch.len_utf8();
                Ok(())
            }
            Some(ch) => Err(self.fail(format!("expected `{want}`, found `{ch}`"))),
            None => Err(self.fail(format!("expected `{want}`, found the end of the line"))),
        }
    }

    /// Skips spaces and tabs; true when there was at least one.
    fn skip_spaces(&mut self) -> bool {
        let start = self.pos;
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
        self.pos > start
    }

    /// Up to the next space, tab or end of line.
    fn token(&mut self) -> &'a str {
        let rest = self.rest();
        let len = rest.find([' ', '\t']).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn ident(&mut self, colon: bool, what: &str) -> Result<String, ParseError> {
        let rest = self.rest();
        let ok_first = |ch: char| ch.is_ascii_alphabetic() || ch == '_' || (colon && ch == ':');
        let len = rest
            .char_indices()
            .find(|&(i, ch)| !(ok_first(ch) || (i > 0 && ch.is_ascii_digit())))
            .map_or(rest.len(), |(i, _)| i);
        if len == 0 {
            let found = self
                .peek()
                .map_or("the end of the line".to_string(), |ch| format!("`{ch}`"));
            return Err(self.fail(format!("expected {what}, found {found}")));
        }
        self.pos += len;
        Ok(rest[..len].to_string())
    }

    fn metric_name(&mut self) -> Result<String, ParseError> {
        self.ident(true, "a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)")
    }

    /// After `{`: `name="value"` pairs separated by commas (a trailing comma allowed), then `}`.
    fn labels(&mut self) -> Result<Vec<(String, String)>, ParseError> {
        let mut labels: Vec<(String, String)> = Vec::new();
        loop {
            self.skip_spaces();
            if self.peek() == Some('}') {
                self.pos += 1;
                return Ok(labels);
            }
            let col = self.col();
            let name = self.ident(false, "a label name ([a-zA-Z_][a-zA-Z0-9_]*) or `}`")?;
            if labels.iter().any(|(k, _)| *k == name) {
                return Err(err(self.n, col, format!("label `{name}` is given twice")));
            }
            self.skip_spaces();
            self.expect_char('=')?;
            self.skip_spaces();
            let value = self.quoted()?;
            labels.push((name, value));
            self.skip_spaces();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some('}') => {}
                Some(ch) => {
                    return Err(
                        self.fail(format!("expected `,` or `}}` after a label, found `{ch}`"))
                    );
                }
                None => {
                    return Err(
                        self.fail("expected `,` or `}` after a label, found the end of the line")
                    );
                }
            }
        }
    }

    /// A double-quoted label value with `\\`, `\"` and `\n` escapes.
    fn quoted(&mut self) -> Result<String, ParseError> {
        self.expect_char('"')?;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, ch)) = chars.next() {
            match ch {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, '"')) => out.push('"'),
                    Some((_, 'n')) => out.push('\n'),
                    Some((j, other)) => {
                        self.pos += j;
                        return Err(self.fail(format!(
                            "unknown escape `\\{other}` in a label value: expected \\\\, \\\" or \\n"
                        )));
                    }
                    None => break,
                },
                _ => out.push(ch),
            }
        }
        self.pos = self.line.len();
        Err(self.fail("expected `\"` to close the label value, found the end of the line"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_seconds_and_counters() {
        let text = "# TYPE training_step counter\n# HELP training_step Steps.\ntraining_step_total{job=\"a\",gpu=\"1\"} 17 1764511500.25\ntraining_step_created{job=\"a\",gpu=\"1\"} 1764511000 1764511500.25\n# EOF\n";
        let e = parse(text, None).unwrap();
        assert_eq!(e.format, Format::OpenMetrics);
        assert_eq!(e.samples.len(), 2);
        let s = &e.samples[0];
        assert_eq!(s.ts_ms, 1_764_511_500_250);
        assert_eq!(
            s.labels,
            vec![("gpu".into(), "1".into()), ("job".into(), "a".into())]
        );
        assert_eq!(e.family_of("training_step_total"), "training_step");
        assert_eq!(e.kind_of("training_step_created"), Some("counter"));
    }

    #[test]
    fn prometheus_milliseconds_comments_and_escapes() {
        let text = "# a free comment\n\nloss{path=\"C:\\\\x\",msg=\"a \\\"b\\\"\\n\",} 0.5 1764511500250\nloss 1e-3\t1764511501000\n";
        let e = parse(text, None).unwrap();
        assert_eq!(e.format, Format::Prometheus);
        assert_eq!(e.samples[0].ts_ms, 1_764_511_500_250);
        assert_eq!(e.samples[0].labels[0], ("msg".into(), "a \"b\"\n".into()));
        assert_eq!(e.samples[0].labels[1], ("path".into(), "C:\\x".into()));
        assert_eq!(e.samples[1].value, 0.001);
    }

    #[test]
    fn errors_name_line_column_and_what_is_expected() {
        let cases: &[(&str, Option<Format>, usize, usize, &str)] = &[
            ("a{b=\"1\" 2 3\n", None, 1, 9, "`,` or `}`"),
            ("a 1\n", None, 1, 4, "timestamp"),
            ("a 1 2\nb{x=\"1\",x=\"2\"} 1 2\n", None, 2, 9, "twice"),
            ("a one 2\n", None, 1, 3, "a number"),
            ("a 1 2.5\n", None, 1, 5, "integer unix milliseconds"),
            ("a 1 2\n# EOF\nb 1 2\n", None, 2, 1, "must be the last line"),
            (
                "a 1 2\n# EOF\nb 1 2\n",
                Some(Format::OpenMetrics),
                3,
                1,
                "nothing may follow",
            ),
            (
                "a 1 2\n",
                Some(Format::OpenMetrics),
                2,
                1,
                "expected `# EOF`",
            ),
            (
                "# TYPE a countr\na 1 2\n# EOF\n",
                None,
                1,
                10,
                "unknown metric type",
            ),
            (
                "# comment\na 1 2\n# EOF\n",
                None,
                1,
                2,
                "OpenMetrics has no other comments",
            ),
            ("a{b=\"x\\q\"} 1 2\n", None, 1, 8, "unknown escape"),
            ("é 1 2\n", None, 1, 1, "a metric name"),
        ];
        for (text, format, line, col, want) in cases {
            let e = parse(text, *format).expect_err(text);
            assert_eq!((e.line, e.col), (*line, *col), "{text:?}: {e}");
            assert!(e.message.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_scrape_without_timestamps_takes_the_given_time() {
        let text = "a{x=\"1\"} 5\nb 6 7\n";
        assert!(parse(text, None).is_err());
        let e = parse_at(text, None, Some(42_000)).unwrap();
        assert_eq!((e.samples[0].ts_ms, e.samples[1].ts_ms), (42_000, 7));
    }

    #[test]
    fn special_values_and_exemplars() {
        let text = "a NaN 1\nb +Inf 2 # {trace_id=\"x\"} 1\nc -Inf 3\n# EOF\n";
        let e = parse(text, None).unwrap();
        assert!(e.samples[0].value.is_nan());
        assert_eq!(e.samples[1].value, f64::INFINITY);
        assert_eq!(e.samples[2].ts_ms, 3000);
    }
}
