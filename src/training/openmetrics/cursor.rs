//! The line cursor of the OpenMetrics / Prometheus text parser: names, label sets, quoted
//! values with escapes, tokens; every failure is a [`ParseError`] at the cursor's column.
//!
//! Invariant: `pos` is a byte offset on a char boundary; columns are 1-based, in characters.

use super::{ParseError, err};

/// A position in one line; `pos` is a byte offset, columns are reported in characters.
pub(super) struct Cursor<'a> {
    line: &'a str,
    n: usize,
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(line: &'a str, n: usize) -> Self {
        Self { line, n, pos: 0 }
    }

    pub(super) fn rest(&self) -> &'a str {
        &self.line[self.pos..]
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    pub(super) fn col(&self) -> usize {
        self.line[..self.pos].chars().count() + 1
    }

    pub(super) fn fail(&self, message: impl Into<String>) -> ParseError {
        err(self.n, self.col(), message)
    }

    pub(super) fn expect_char(&mut self, want: char) -> Result<(), ParseError> {
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
    pub(super) fn skip_spaces(&mut self) -> bool {
        let start = self.pos;
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
        self.pos > start
    }

    /// Up to the next space, tab or end of line.
    pub(super) fn token(&mut self) -> &'a str {
        let rest = self.rest();
        let len = rest.find([' ', '\t']).unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    pub(super) fn ident(&mut self, colon: bool, what: &str) -> Result<String, ParseError> {
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

    pub(super) fn metric_name(&mut self) -> Result<String, ParseError> {
        self.ident(true, "a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)")
    }

    /// After `{`: `name="value"` pairs separated by commas (a trailing comma allowed), then `}`.
    pub(super) fn labels(&mut self) -> Result<Vec<(String, String)>, ParseError> {
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
    pub(super) fn quoted(&mut self) -> Result<String, ParseError> {
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
