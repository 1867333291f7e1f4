//! The compact series notation of rule unit tests (the one `promtool test rules` uses):
//! space-separated terms, each expanding to one or more values at consecutive samples.
//!
//! | term | expands to |
//! |---|---|
//! | `a` | `a` |
//! | `axn` | `a` repeated n+1 times |
//! | `a+bxn` | `a, a+b, ..., a+n*b` (n+1 values) |
//! | `a-bxn` | `a, a-b, ..., a-n*b` (n+1 values) |
//! | `_` | one missing sample |
//! | `_xn` | n missing samples |
//!
//! Invariants: a series is never empty; errors carry the byte offset of the offending term
//! inside the notation string, so callers can point at it in the file; no series expands to
//! more than [`MAX_VALUES`] values.

/// The most values one series may expand to (about 11.5 days of 1-second samples).
pub const MAX_VALUES: usize = 1_000_000;

/// A malformed series, with the byte offset of the term that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NotationError {
    pub offset: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl NotationError {
    fn new(offset: usize, message: impl Into<String>) -> Self {
        Self {
            offset,
            message: message.into(),
            hint: Some("e.g. `0+1x60`, `95x600`, `_x10`, `1 2 _ 4`".into()),
        }
    }
}

/// Expands a series; `None` is a missing sample.
pub fn parse_series(s: &str) -> Result<Vec<Option<f64>>, NotationError> {
    let mut out: Vec<Option<f64>> = Vec::new();
    let mut pos = 0;
    for term in s.split(' ') {
        let at = pos;
        pos += term.len() + 1;
        if term.is_empty() {
            continue;
        }
        let values = term_values(term, at)?;
        if out.len() + values.len() > MAX_VALUES {
            return Err(NotationError {
                offset: at,
                message: format!("the series is longer than {MAX_VALUES} samples"),
                hint: None,
            });
        }
        out.extend(values);
    }
    if out.is_empty() {
        return Err(NotationError::new(0, "the series is empty"));
    }
    Ok(out)
}

fn term_values(term: &str, at: usize) -> Result<Vec<Option<f64>>, NotationError> {
    let (head, count) = match term.split_once('x') {
        Some((h, n)) => {
            let n: usize = n.parse().map_err(|_| {
                NotationError::new(
                    at + h.len() + 1,
                    format!("`{n}` in `{term}` is not a count of samples"),
                )
            })?;
            if n > MAX_VALUES {
                return Err(NotationError::new(
                    at + h.len() + 1,
                    format!("the series is longer than {MAX_VALUES} samples"),
                ));
            }
            (h, Some(n))
        }
        None => (term, None),
    };
    if head == "_" {
        return Ok(vec![None; count.unwrap_or(1)]);
    }
    let (start, step) = split_step(head, at)?;
    let Some(n) = count else {
        if step.is_some() {
            return Err(NotationError::new(
                at,
                format!("`{term}` needs a count (write `{term}x10`)"),
            ));
        }
        return Ok(vec![Some(start)]);
    };
    let step = step.unwrap_or(0.0);
    Ok((0..=n).map(|i| Some(start + step * i as f64)).collect())
}

/// `a`, `a+b` or `a-b` → (a, signed b).
fn split_step(head: &str, at: usize) -> Result<(f64, Option<f64>), NotationError> {
    let bytes = head.as_bytes();
    let op = (1..bytes.len()).find(|&i| {
        matches!(bytes[i], b'+' | b'-') && !matches!(bytes[i - 1], b'e' | b'E' | b'+' | b'-')
    });
    let number = |s: &str, off: usize| {
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| NotationError::new(off, format!("`{s}` is not a number")))
    };
    match op {
        None => Ok((number(head, at)?, None)),
        Some(i) => {
            let a = number(&head[..i], at)?;
            let b = number(&head[i + 1..], at + i + 1)?;
            Ok((a, Some(if bytes[i] == b'-' { -b } else { b })))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(s: &str) -> Vec<Option<f64>> {
        parse_series(s).expect("parses")
    }

    #[test]
    fn expands_every_kind_of_term() {
        assert_eq!(vals("1+1x3"), [Some(1.0), Some(2.0), Some(3.0), Some(4.0)]);
        assert_eq!(vals("10-2x2"), [Some(10.0), Some(8.0), Some(6.0)]);
        assert_eq!(vals("5x2"), [Some(5.0); 3]);
        assert_eq!(vals("7"), [Some(7.0)]);
        assert_eq!(vals("_x2 5"), [None, None, Some(5.0)]);
        assert_eq!(vals("1 _ 3"), [Some(1.0), None, Some(3.0)]);
        assert_eq!(vals("-1+1x2"), [Some(-1.0), Some(0.0), Some(1.0)]);
        assert_eq!(vals("1e3+-1x1"), [Some(1000.0), Some(999.0)]);
        assert_eq!(vals("  95x1   0 "), [Some(95.0), Some(95.0), Some(0.0)]);
        assert_eq!(vals("0.5+0.25x1"), [Some(0.5), Some(0.75)]);
    }

    #[test]
    fn errors_point_at_the_term() {
        let e = parse_series("1 2 abc").expect_err("bad number");
        assert_eq!((e.offset, e.message.as_str()), (4, "`abc` is not a number"));
        let e = parse_series("1 5xq").expect_err("bad count");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (4, "`q` in `5xq` is not a count of samples")
        );
        let e = parse_series("1 1+2").expect_err("no count");
        assert_eq!(e.offset, 2);
        assert_eq!(e.message, "`1+2` needs a count (write `1+2x10`)");
        assert_eq!(
            parse_series("  ").expect_err("empty").message,
            "the series is empty"
        );
        assert!(parse_series("1x2000000").is_err());
        assert!(parse_series("1+x3").is_err());
    }
}
