//! Scenario errors: where (`file:line:col`) and what was expected.
//!
//! Invariants: a syntax or type error stops parsing and is reported alone (that is how serde
//! works); semantic problems are all collected and reported together, in file order. Line and
//! column are 1-based, the column counted in characters.

use std::fmt;
use std::ops::Range;

/// One problem in a scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file name given as `origin` (or the path).
    pub origin: String,
    /// 1-based line and column, when the problem can be pinned to a place.
    pub line: Option<usize>,
    pub col: Option<usize>,
    /// What is wrong and what is expected.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.col) {
            (Some(l), Some(c)) => write!(f, "{}:{}:{}: {}", self.origin, l, c, self.message),
            _ => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, or a value of the wrong type or form.
    #[error("{0}")]
    Syntax(Problem),
    /// The file parsed but describes an impossible scenario; every problem found is listed.
    #[error("{}", join(.0))]
    Invalid(Vec<Problem>),
}

fn join(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

impl ScenarioError {
    /// The located problems (empty for an I/O error).
    pub fn problems(&self) -> Vec<&Problem> {
        match self {
            ScenarioError::Io { .. } => Vec::new(),
            ScenarioError::Syntax(p) => vec![p],
            ScenarioError::Invalid(ps) => ps.iter().collect(),
        }
    }
}

/// 1-based (line, column) of a byte offset in `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    // Step back to a char boundary so slicing cannot panic.
    let offset = (0..=offset)
        .rev()
        .find(|o| text.is_char_boundary(*o))
        .unwrap_or(0);
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

/// Collects problems while compiling a scenario.
pub(crate) struct Problems<'a> {
    pub origin: &'a str,
    pub text: &'a str,
    pub list: Vec<Problem>,
}

impl<'a> Problems<'a> {
    pub fn new(origin: &'a str, text: &'a str) -> Self {
        Problems {
            origin,
            text,
            list: Vec::new(),
        }
    }

    /// Record a problem at a span (`None` when there is no place to point at).
    pub fn at(&mut self, span: Option<Range<usize>>, message: impl Into<String>) {
        let (line, col) = match span {
            Some(s) => {
                let (l, c) = line_col(self.text, s.start);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        self.list.push(Problem {
            origin: self.origin.to_string(),
            line,
            col,
            message: message.into(),
        });
    }

    pub fn into_result(mut self) -> Result<(), ScenarioError> {
        if self.list.is_empty() {
            Ok(())
        } else {
            self.list.sort_by_key(|p| (p.line, p.col));
            Err(ScenarioError::Invalid(self.list))
        }
    }
}

/// Turn a TOML/serde error into a located [`ScenarioError::Syntax`].
pub(crate) fn from_toml(origin: &str, text: &str, err: &toml::de::Error) -> ScenarioError {
    let (line, col) = match err.span() {
        Some(s) => {
            let (l, c) = line_col(text, s.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    ScenarioError::Syntax(Problem {
        origin: origin.to_string(),
        line,
        col,
        message: err.message().trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let t = "ab\ncdé\nf";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 3), (2, 1));
        assert_eq!(line_col(t, 7), (2, 4));
        assert_eq!(line_col(t, 8), (3, 1));
        assert_eq!(line_col(t, 99), (3, 2));
    }

    #[test]
    fn display_with_and_without_place() {
        let p = Problem {
            origin: "a.toml".into(),
            line: Some(3),
            col: Some(7),
            message: "bad".into(),
        };
        assert_eq!(p.to_string(), "a.toml:3:7: bad");
        let q = Problem {
            line: None,
            col: None,
            ..p
        };
        assert_eq!(q.to_string(), "a.toml: bad");
    }
}
