//! Loading a rule set: files (or embedded texts) → rules, with the checks that span rules
//! (unique names, `inhibits` targets that exist) and errors as `file:line:col: message
//! (hint)`.
//!
//! Invariants: a set loads only when every file and every rule in it is valid — a bad file
//! never yields a partial rule set; errors come sorted by file (in the order given), then
//! line and column; positions are 1-based, columns count characters, and an error inside a
//! TOML string points at the character of the string that caused it.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::file::{self, Loaded};
use super::names::closest;
use super::rule::Rule;

/// One problem in a rule file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}{}", pos_text(.position), hint_text(.hint))]
pub struct RuleError {
    pub file: String,
    /// 1-based line and column; `None` when the problem is the file as a whole.
    pub position: Option<(usize, usize)>,
    pub message: String,
    pub hint: Option<String>,
}

fn pos_text(p: &Option<(usize, usize)>) -> String {
    p.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default()
}

fn hint_text(h: &Option<String>) -> String {
    h.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

/// Every problem of a rule set, one per line when displayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct RuleErrors(pub Vec<RuleError>);

/// Loads the rules of one text (`origin` names it in messages).
pub fn load_str(text: &str, origin: &str) -> Result<Vec<Rule>, RuleErrors> {
    load_sources(&[(origin.to_string(), text.to_string())])
}

/// Loads a set of `(origin, text)` pairs as one rule set (e.g. the embedded defaults).
pub fn load_sources(sources: &[(String, String)]) -> Result<Vec<Rule>, RuleErrors> {
    let mut set = Set::default();
    for (origin, text) in sources {
        set.add(origin, text);
    }
    set.finish()
}

/// Loads rule files as one rule set. A directory stands for its `*.toml` files, in name
/// order.
pub fn load_files(paths: &[PathBuf]) -> Result<Vec<Rule>, RuleErrors> {
    let mut set = Set::default();
    for path in paths {
        for file in expand(path, &mut set.errors) {
            match std::fs::read_to_string(&file) {
                Ok(text) => set.add(&file.display().to_string(), &text),
                Err(e) => set
                    .errors
                    .push(whole_file(&file, format!("cannot read rule file: {e}"))),
            }
        }
    }
    set.finish()
}

/// Loads the shipped defaults (when `defaults`) and `paths` as one rule set, so names must be
/// unique across all of them and `inhibits` may name rules of either.
pub fn load_configured(defaults: bool, paths: &[PathBuf]) -> Result<Vec<Rule>, RuleErrors> {
    let mut set = Set::default();
    if defaults {
        for (origin, text) in super::defaults() {
            set.add(&origin, &text);
        }
    }
    for path in paths {
        for file in expand(path, &mut set.errors) {
            match std::fs::read_to_string(&file) {
                Ok(text) => set.add(&file.display().to_string(), &text),
                Err(e) => set
                    .errors
                    .push(whole_file(&file, format!("cannot read rule file: {e}"))),
            }
        }
    }
    set.finish()
}

fn whole_file(path: &Path, message: String) -> RuleError {
    RuleError {
        file: path.display().to_string(),
        position: None,
        message,
        hint: None,
    }
}

/// A file, or the `*.toml` files of a directory.
fn expand(path: &Path, errors: &mut Vec<RuleError>) -> Vec<PathBuf> {
    let text = path.to_string_lossy();
    if text.contains(['*', '?', '[']) {
        // A glob: every match, in name order; matching nothing is an error (a typo would
        // otherwise silently load no rules).
        let mut files: Vec<PathBuf> = match glob::glob(&text) {
            Ok(paths) => paths
                .filter_map(Result::ok)
                .filter(|p| p.is_file())
                .collect(),
            Err(e) => {
                errors.push(whole_file(path, format!("invalid glob pattern: {e}")));
                return Vec::new();
            }
        };
        files.sort();
        if files.is_empty() {
            errors.push(whole_file(path, "the pattern matches no rule file".into()));
        }
        return files;
    }
    if !path.is_dir() {
        return vec![path.to_path_buf()];
    }
    let entries = match std::fs::read_dir(path) {
        Ok(e) => e,
        Err(e) => {
            errors.push(whole_file(path, format!("cannot read rule directory: {e}")));
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        errors.push(whole_file(
            path,
            "no rule files (*.toml) in this directory".into(),
        ));
    }
    files
}

#[derive(Default)]
struct Set {
    loaded: Vec<Loaded>,
    errors: Vec<RuleError>,
}

impl Set {
    fn add(&mut self, origin: &str, text: &str) {
        let (rules, errors) = file::read(text, origin);
        self.loaded.extend(rules);
        self.errors.extend(errors);
    }

    fn finish(mut self) -> Result<Vec<Rule>, RuleErrors> {
        self.cross_rule_checks();
        if self.errors.is_empty() {
            return Ok(self.loaded.into_iter().filter_map(|l| l.rule).collect());
        }
        // Stable sort: files keep the order they were given in.
        let files: Vec<String> =
            self.errors
                .iter()
                .map(|e| e.file.clone())
                .fold(Vec::new(), |mut v, f| {
                    if !v.contains(&f) {
                        v.push(f);
                    }
                    v
                });
        self.errors
            .sort_by_key(|e| (files.iter().position(|f| *f == e.file), e.position));
        self.errors.dedup();
        Err(RuleErrors(self.errors))
    }

    fn cross_rule_checks(&mut self) {
        let mut seen: Vec<(&str, &Loaded)> = Vec::new();
        for l in &self.loaded {
            let Some((name, pos)) = &l.name else { continue };
            if let Some((_, first)) = seen.iter().find(|(n, _)| n == name) {
                self.errors.push(RuleError {
                    file: l.origin.file.clone(),
                    position: Some(*pos),
                    message: format!("duplicate rule name `{name}`"),
                    hint: Some(format!(
                        "first defined at {}:{}",
                        first.origin.file, first.origin.line
                    )),
                });
            } else {
                seen.push((name, l));
            }
        }
        for l in &self.loaded {
            for (key, target, pos) in &l.inhibits {
                if seen.iter().any(|(n, _)| n == target) {
                    continue;
                }
                let hint = match closest(target, seen.iter().map(|(n, _)| *n)) {
                    Some(c) => format!("did you mean `{c}`?"),
                    None => "name a rule of the loaded rule files".to_string(),
                };
                self.errors.push(RuleError {
                    file: l.origin.file.clone(),
                    position: Some(*pos),
                    message: format!("`{key}` names an unknown rule `{target}`"),
                    hint: Some(hint),
                });
            }
        }
    }
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
pub fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..text.floor_char_boundary(offset.min(text.len()))];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The byte offset in the file `text` of byte `offset` of a string value whose TOML source
/// (quotes included) is `text[span]`. Falls back to the start of the string when the source
/// cannot be mapped (e.g. newlines normalised by the TOML parser).
pub fn value_offset(text: &str, span: &Range<usize>, value: &str, offset: usize) -> usize {
    let Some(raw) = text.get(span.clone()) else {
        return span.start;
    };
    let delim = ["'''", "\"\"\"", "'", "\""]
        .into_iter()
        .find(|d| raw.starts_with(d) && raw.len() >= 2 * d.len());
    let Some(delim) = delim else {
        return span.start;
    };
    let mut body = &raw[delim.len()..raw.len() - delim.len()];
    let mut start = span.start + delim.len();
    if delim.len() == 3 {
        let trimmed = body
            .strip_prefix("\r\n")
            .or_else(|| body.strip_prefix('\n'))
            .unwrap_or(body);
        start += body.len() - trimmed.len();
        body = trimmed;
    }
    let map = if delim.starts_with('\'') || !body.contains('\\') {
        (body == value).then(|| (0..=body.len()).collect::<Vec<_>>())
    } else {
        unescape_map(body)
            .filter(|(decoded, _)| decoded == value)
            .map(|(_, m)| m)
    };
    match map {
        Some(m) => start + m[offset.min(m.len() - 1)],
        None => span.start,
    }
}

/// Decodes a TOML basic string body; returns the text and, for every byte of it (and its
/// end), the byte offset in `body` of the source character it came from.
fn unescape_map(body: &str) -> Option<(String, Vec<usize>)> {
    let mut out = String::new();
    let mut map = Vec::new();
    let mut it = body.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let ch = if c != '\\' {
            c
        } else {
            let (_, e) = it.next()?;
            let hex = |it: &mut std::iter::Peekable<std::str::CharIndices>, n: usize| {
                let s: String = (0..n).filter_map(|_| it.next().map(|(_, c)| c)).collect();
                u32::from_str_radix(&s, 16).ok().and_then(char::from_u32)
            };
            match e {
                'b' => '\u{8}',
                't' => '\t',
                'n' => '\n',
                'f' => '\u{c}',
                'r' => '\r',
                'e' => '\u{1b}',
                '"' => '"',
                '\\' => '\\',
                'x' => hex(&mut it, 2)?,
                'u' => hex(&mut it, 4)?,
                'U' => hex(&mut it, 8)?,
                c if c.is_whitespace() => {
                    // Line-ending backslash: drop whitespace up to the next other character.
                    while it.next_if(|(_, c)| c.is_whitespace()).is_some() {}
                    continue;
                }
                _ => return None,
            }
        };
        map.extend(std::iter::repeat_n(i, ch.len_utf8()));
        out.push(ch);
    }
    map.push(body.len());
    Some((out, map))
}

#[cfg(test)]
mod tests;
