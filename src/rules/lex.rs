//! The tokenizer of the condition language, and [`ExprError`], the error every stage of the
//! front end reports.
//!
//! Invariants: every token carries the byte range it came from in the expression source, so
//! every later error can point at a column; durations are turned into seconds here (`4m` →
//! 240) and never reach the parser as text; the only spellings of the boolean operators are
//! `and`, `or`, `not` — `&&`, `||`, `!`, `=` are rejected with a hint naming the right one.

use std::ops::Range;

/// A problem in one expression, at a byte offset of its source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}{}", hint_suffix(.hint))]
pub struct ExprError {
    /// Byte offset in the expression source.
    pub offset: usize,
    /// 1-based column, in characters (filled in by [`ExprError::locate`]).
    pub column: usize,
    pub message: String,
    pub hint: Option<String>,
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

impl ExprError {
    pub fn new(offset: usize, message: impl Into<String>) -> Self {
        Self {
            offset,
            column: 0,
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Sets `column` from `offset` for the expression source `src` (columns count characters
    /// on the offset's own line, so multi-line expressions get the column within their line).
    pub fn locate(mut self, src: &str) -> Self {
        let before = &src[..src.floor_char_boundary(self.offset.min(src.len()))];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        self.column = before[line_start..].chars().count() + 1;
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Num(f64),
    /// A duration literal, in seconds.
    Dur(f64),
    Ident(String),
    And,
    Or,
    Not,
    True,
    False,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Plus,
    Minus,
    Star,
    Slash,
    Lt,
    Le,
    Gt,
    Ge,
    EqEq,
    Ne,
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Range<usize>,
}

/// Duration units and their length in seconds.
/// Duration units and their length in seconds (the printer uses them to write durations back).
pub(super) const UNITS: &[(&str, f64)] = &[
    ("ms", 0.001),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
    ("d", 86400.0),
    ("w", 604800.0),
];

/// The longest duration literal (10 years), so every duration fits a `std::time::Duration`.
pub const MAX_DURATION_SECS: f64 = 3650.0 * 86400.0;

/// Splits `src` into tokens, ending with [`Tok::Eof`].
pub fn lex(src: &str) -> Result<Vec<Token>, ExprError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let two = |s: &str| src[i..].starts_with(s);
        let tok = if c.is_ascii_digit() {
            let (tok, end) = number(src, i)?;
            i = end;
            tok
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            match &src[start..i] {
                "and" => Tok::And,
                "or" => Tok::Or,
                "not" => Tok::Not,
                "true" => Tok::True,
                "false" => Tok::False,
                name => Tok::Ident(name.to_string()),
            }
        } else {
            let (tok, len) = match c {
                b'(' => (Tok::LParen, 1),
                b')' => (Tok::RParen, 1),
                b'[' => (Tok::LBracket, 1),
                b']' => (Tok::RBracket, 1),
                b',' => (Tok::Comma, 1),
                b'+' => (Tok::Plus, 1),
                b'-' => (Tok::Minus, 1),
                b'*' => (Tok::Star, 1),
                b'/' => (Tok::Slash, 1),
                b'<' if two("<=") => (Tok::Le, 2),
                b'<' => (Tok::Lt, 1),
                b'>' if two(">=") => (Tok::Ge, 2),
                b'>' => (Tok::Gt, 1),
                b'=' if two("==") => (Tok::EqEq, 2),
                b'!' if two("!=") => (Tok::Ne, 2),
                _ => return Err(bad_char(src, i)),
            };
            i += len;
            tok
        };
        out.push(Token {
            tok,
            span: start..i,
        });
    }
    out.push(Token {
        tok: Tok::Eof,
        span: src.len()..src.len(),
    });
    Ok(out)
}

fn bad_char(src: &str, i: usize) -> ExprError {
    let rest = &src[i..];
    let e = |m: &str| ExprError::new(i, m);
    if rest.starts_with("&&") || rest.starts_with('&') {
        e("unexpected `&`").hint("write `and`")
    } else if rest.starts_with('|') {
        e("unexpected `|`").hint("write `or`")
    } else if rest.starts_with('!') {
        e("unexpected `!`").hint("write `not`")
    } else if rest.starts_with('=') {
        e("unexpected `=`").hint("compare with `==`")
    } else if rest.starts_with('%') {
        e("unexpected `%`").hint("percentages are plain numbers: `util_gpu < 5` means below 5 %")
    } else if rest.starts_with('.') {
        e("unexpected `.`").hint("write numbers like `0.5`")
    } else if rest.starts_with('"') || rest.starts_with('\'') {
        e("unexpected quote").hint("conditions have no strings; compare numbers")
    } else {
        let c = rest.chars().next().unwrap_or(' ');
        e(&format!("unexpected character `{c}`"))
    }
}

/// Lexes a number or duration starting at `i`; returns the token and the end offset.
fn number(src: &str, i: usize) -> Result<(Tok, usize), ExprError> {
    let b = src.as_bytes();
    let (mut j, mut has_exp) = (decimal_end(b, i), false);
    if j < b.len() && (b[j] == b'e' || b[j] == b'E') {
        let mut k = j + 1;
        if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
            k += 1;
        }
        if k < b.len() && b[k].is_ascii_digit() {
            while k < b.len() && b[k].is_ascii_digit() {
                k += 1;
            }
            j = k;
            has_exp = true;
        }
    }
    if j >= b.len() || !(b[j].is_ascii_alphabetic() || b[j] == b'_') {
        let v: f64 = src[i..j]
            .parse()
            .map_err(|_| ExprError::new(i, format!("invalid number `{}`", &src[i..j])))?;
        if !v.is_finite() {
            return Err(ExprError::new(i, format!("`{}` is too large", &src[i..j])));
        }
        return Ok((Tok::Num(v), j));
    }
    if has_exp {
        return Err(ExprError::new(j, "unexpected letter after a number"));
    }
    // A duration: one or more `<decimal><unit>` parts, e.g. `90s`, `1h30m`.
    let (mut secs, mut k) = (0.0, i);
    loop {
        let num_end = decimal_end(b, k);
        let unit_end = word_end(b, num_end);
        let unit = &src[num_end..unit_end];
        let Some(&(_, scale)) = UNITS.iter().find(|(u, _)| *u == unit) else {
            return Err(ExprError::new(
                num_end,
                format!("unknown duration unit `{unit}` in `{}`", &src[i..unit_end]),
            )
            .hint("units are ms, s, m, h, d and w, e.g. `90s`, `5m`, `1h30m`"));
        };
        let n: f64 = src[k..num_end]
            .parse()
            .map_err(|_| ExprError::new(k, format!("invalid duration `{}`", &src[i..unit_end])))?;
        secs += n * scale;
        k = unit_end;
        if k >= b.len() || !b[k].is_ascii_digit() {
            break;
        }
    }
    if secs > MAX_DURATION_SECS {
        return Err(ExprError::new(i, format!("`{}` is too long", &src[i..k]))
            .hint("durations are at most 10 years"));
    }
    Ok((Tok::Dur(secs), k))
}

/// End of `digits[.digits]` starting at `i`.
fn decimal_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    i
}

fn word_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i].is_ascii_alphabetic() || b[i] == b'_') {
        i += 1;
    }
    i
}

/// Parses a whole string as one duration (`"10m"`, `"1h30m"`, `"0s"`, or `"0"`), in seconds.
/// Used for the rule-file keys `for` and `keep_firing_for`.
pub fn parse_duration(s: &str) -> Result<f64, ExprError> {
    let toks = lex(s)?;
    match toks.as_slice() {
        [
            Token {
                tok: Tok::Dur(v), ..
            },
            _eof,
        ] => Ok(*v),
        [
            Token {
                tok: Tok::Num(v), ..
            },
            _eof,
        ] if *v == 0.0 => Ok(0.0),
        [
            Token {
                tok: Tok::Num(v),
                span,
            },
            _eof,
        ] => Err(ExprError::new(span.end, "a duration needs a unit")
            .hint(format!("write `{v}s` or `{}m`", v / 60.0))),
        _ => Err(ExprError::new(0, format!("`{s}` is not a duration"))
            .hint("e.g. `10m`, `90s`, `1h30m`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).expect("lexes").into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn numbers_durations_and_operators() {
        assert_eq!(
            toks("5 0.9 1e3 2.5E-1 4m 90s 1h30m 500ms 1d 1.5h"),
            vec![
                Tok::Num(5.0),
                Tok::Num(0.9),
                Tok::Num(1000.0),
                Tok::Num(0.25),
                Tok::Dur(240.0),
                Tok::Dur(90.0),
                Tok::Dur(5400.0),
                Tok::Dur(0.5),
                Tok::Dur(86400.0),
                Tok::Dur(5400.0),
                Tok::Eof
            ]
        );
        assert_eq!(
            toks("a<=b>=c!=d==e<f>g and or not true false"),
            vec![
                Tok::Ident("a".into()),
                Tok::Le,
                Tok::Ident("b".into()),
                Tok::Ge,
                Tok::Ident("c".into()),
                Tok::Ne,
                Tok::Ident("d".into()),
                Tok::EqEq,
                Tok::Ident("e".into()),
                Tok::Lt,
                Tok::Ident("f".into()),
                Tok::Gt,
                Tok::Ident("g".into()),
                Tok::And,
                Tok::Or,
                Tok::Not,
                Tok::True,
                Tok::False,
                Tok::Eof
            ]
        );
    }

    #[test]
    fn spans_are_byte_ranges() {
        let t = lex("util_gpu[25m]").expect("lexes");
        let spans: Vec<_> = t.iter().map(|t| t.span.clone()).collect();
        assert_eq!(spans, vec![0..8, 8..9, 9..12, 12..13, 13..13]);
    }

    #[test]
    fn wrong_spellings_get_hints() {
        let e = lex("a && b").expect_err("rejects &&");
        assert_eq!((e.offset, e.hint.as_deref()), (2, Some("write `and`")));
        assert_eq!(
            lex("a || b").expect_err("||").hint.as_deref(),
            Some("write `or`")
        );
        assert_eq!(
            lex("!a").expect_err("!").hint.as_deref(),
            Some("write `not`")
        );
        assert_eq!(
            lex("a = 1").expect_err("=").hint.as_deref(),
            Some("compare with `==`")
        );
        let e = lex("x > 5min").expect_err("unit");
        assert_eq!(e.message, "unknown duration unit `min` in `5min`");
        assert_eq!(e.offset, 5);
        assert_eq!(lex("1e3s").expect_err("exp").offset, 3);
        assert_eq!(
            lex("x € 1").expect_err("char").message,
            "unexpected character `€`"
        );
    }

    #[test]
    fn whole_string_durations() {
        assert_eq!(parse_duration("10m"), Ok(600.0));
        assert_eq!(parse_duration(" 1h30m "), Ok(5400.0));
        assert_eq!(parse_duration("0"), Ok(0.0));
        assert_eq!(parse_duration("0s"), Ok(0.0));
        let e = parse_duration("600").expect_err("no unit");
        assert_eq!(e.hint.as_deref(), Some("write `600s` or `10m`"));
        assert!(parse_duration("10 m").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn column_counts_characters_on_the_line() {
        let e = ExprError::new(6, "x").locate("é\nab é x");
        assert_eq!(e.column, 4);
        assert_eq!(e.to_string(), "column 4: x");
        assert_eq!(
            ExprError::new(0, "m").hint("h").locate("").to_string(),
            "column 1: m (h)"
        );
    }
}
