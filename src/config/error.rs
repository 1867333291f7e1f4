//! Config errors as `file:line:col: message (hint)`.

use std::fmt;
use std::ops::Range;
use std::path::Path;

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    /// 1-based line and column; `None` when the error is not about a place in the file.
    pub position: Option<(usize, usize)>,
    pub message: String,
    pub hint: Option<String>,
}

impl ConfigError {
    pub fn io(path: &Path, err: &std::io::Error, hint: &str) -> Self {
        Self {
            file: path.display().to_string(),
            position: None,
            message: format!("cannot read config file: {err}"),
            hint: Some(hint.to_string()),
        }
    }

    pub fn at(origin: &Path, text: &str, span: Option<Range<usize>>, message: String) -> Self {
        Self {
            file: origin.display().to_string(),
            position: span.map(|s| line_col(text, s.start)),
            message,
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn from_toml(origin: &Path, text: &str, err: &toml::de::Error) -> Self {
        // toml's message can span several lines with a source excerpt; keep the first line of
        // the plain message, which is the cause.
        let message = err
            .message()
            .lines()
            .next()
            .unwrap_or("invalid TOML")
            .trim();
        let hint = if message.contains("unknown field") {
            Some(
                "remove the key or fix its spelling; every key is documented in examples/gpuwatch.toml",
            )
        } else {
            None
        };
        Self {
            file: origin.display().to_string(),
            position: err.span().map(|s| line_col(text, s.start)),
            message: message.to_string(),
            hint: hint.map(str::to_string),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, col)) => write!(f, "{}:{line}:{col}: {}", self.file, self.message)?,
            None => write!(f, "{}: {}", self.file, self.message)?,
        }
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

/// All problems found in one file, reported together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn single(e: ConfigError) -> Self {
        Self(vec![e])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}
