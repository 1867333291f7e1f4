//! One rule file: TOML text → rules, with every problem of the file reported at once.
//!
//! The file is walked as a spanned TOML tree (not deserialised into structs) so that an
//! unknown key, a wrong type or a bad expression in one rule does not hide the problems of
//! the others. Keys are visited in document order.
//!
//! Invariants: a rule is returned only when it has no error; every error has the position of
//! its cause — inside an expression or template string where the cause is there; names and
//! `inhibits` targets are returned even for broken rules, so cross-rule checks
//! ([`super::check`]) do not report follow-on errors.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::check::{RuleError, position, value_offset};
use super::lex::{ExprError, parse_duration};
use super::names::closest;
use super::parse::{Want, parse_checked};
use super::rule::{Origin, Rule, Scope};
use crate::rules::ast::Expr;

mod compile;

/// A rule as far as it could be read: the rule itself only when it is valid.
#[derive(Debug)]
pub struct Loaded {
    pub rule: Option<Rule>,
    /// The name and the position of its string, when the rule has a valid one.
    pub name: Option<(String, (usize, usize))>,
    /// The rules it names in `inhibits` and `inhibits_job`: (key, name, position).
    pub inhibits: Vec<(&'static str, String, (usize, usize))>,
    pub origin: Origin,
}

const KEYS: &[&str] = &[
    "name",
    "severity",
    "scope",
    "fallback",
    "condition",
    "critical",
    "resolve",
    "for",
    "keep_firing_for",
    "on_no_data",
    "on_error",
    "inhibits",
    "inhibits_job",
    "enabled",
    "summary",
    "description",
    "labels",
    "values",
];

/// Template variables of every rule, of GPU and process rules, of process rules.
pub const VARS_ALL: &[&str] = &[
    "host",
    "severity",
    "rule",
    "for",
    "active",
    "job",
    "training_job",
];
pub const VARS_GPU: &[&str] = &["gpu", "uuid", "model"];
pub const VARS_PROCESS: &[&str] = &["pid", "process", "user", "cmdline", "who"];
/// Labels gpuwatch sets itself on every alert.
const RESERVED_LABELS: &[&str] = &[
    "alertname",
    "rule",
    "severity",
    "host",
    "gpu",
    "uuid",
    "pid",
    "process",
    "job",
    "training_job",
];

/// A string value with the span of its TOML source (quotes included).
struct Str {
    value: String,
    span: Range<usize>,
}

/// Reads every rule of one file. Never fails: problems are in the returned errors.
pub fn read(text: &str, origin: &str) -> (Vec<Loaded>, Vec<RuleError>) {
    let mut f = FileReader {
        text,
        origin,
        errors: Vec::new(),
    };
    let (doc, toml_errors) = DeTable::parse_recoverable(text);
    if !toml_errors.is_empty() {
        for e in toml_errors {
            let msg = e.message().lines().next().unwrap_or("invalid TOML").trim();
            let at = e.span().map_or(0, |s| s.start);
            f.error(at, msg.to_string(), None);
        }
        return (Vec::new(), f.errors);
    }
    let mut rules = Vec::new();
    for (key, value) in sorted(doc.get_ref()) {
        match (key.get_ref().as_ref(), value.get_ref()) {
            ("rule", DeValue::Array(a)) => {
                for item in a.iter() {
                    match item.get_ref() {
                        DeValue::Table(t) => rules.push(f.rule(t, item.span())),
                        _ => f.error(
                            item.span().start,
                            "a rule must be a table".into(),
                            Some("write `[[rule]]` and its keys below it"),
                        ),
                    }
                }
            }
            ("rule", _) => f.error(
                key.span().start,
                "`rule` must be an array of tables".into(),
                Some("write `[[rule]]`, not `[rule]`"),
            ),
            (k, _) => {
                let hint = if k == "rules" {
                    "did you mean `rule`? each rule starts with `[[rule]]`"
                } else {
                    "a rule file holds only `[[rule]]` tables"
                };
                f.error(key.span().start, format!("unknown key `{k}`"), Some(hint));
            }
        }
    }
    (rules, f.errors)
}

/// Entries in the order they appear in the file.
fn sorted<'a, 'i>(
    t: &'a DeTable<'i>,
) -> Vec<(
    &'a Spanned<std::borrow::Cow<'i, str>>,
    &'a Spanned<DeValue<'i>>,
)> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

fn article(t: &str) -> &'static str {
    if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

struct FileReader<'a> {
    text: &'a str,
    origin: &'a str,
    errors: Vec<RuleError>,
}

impl FileReader<'_> {
    fn error(&mut self, at: usize, message: String, hint: Option<&str>) {
        self.errors.push(RuleError {
            file: self.origin.to_string(),
            position: Some(position(self.text, at)),
            message,
            hint: hint.map(str::to_string),
        });
    }

    /// An error inside a string value, at byte `offset` of the value.
    fn error_in(&mut self, s: &Str, offset: usize, message: String, hint: Option<&str>) {
        let at = value_offset(self.text, &s.span, &s.value, offset);
        self.error(at, message, hint);
    }

    fn expr_errors(&mut self, s: &Str, errors: Vec<ExprError>) {
        for e in errors {
            self.error_in(s, e.offset, e.message, e.hint.as_deref());
        }
    }

    fn string(&mut self, key: &str, v: &Spanned<DeValue<'_>>) -> Option<Str> {
        match v.get_ref() {
            DeValue::String(s) => Some(Str {
                value: s.to_string(),
                span: v.span(),
            }),
            other => {
                let t = other.type_str();
                self.error(
                    v.span().start,
                    format!("`{key}` must be a string, not {} {t}", article(t)),
                    None,
                );
                None
            }
        }
    }

    /// A string table (`labels`, `values`), in document order.
    fn string_table(&mut self, key: &str, v: &Spanned<DeValue<'_>>) -> Vec<(Str, Str)> {
        let DeValue::Table(t) = v.get_ref() else {
            let t = v.get_ref().type_str();
            let hint = format!("write `[rule.{key}]` and `name = \"...\"` lines below it");
            self.error(
                v.span().start,
                format!("`{key}` must be a table, not {} {t}", article(t)),
                Some(&hint),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, val) in sorted(t) {
            let name = Str {
                value: k.get_ref().to_string(),
                span: k.span(),
            };
            let full = format!("{key}.{}", name.value);
            if let Some(s) = self.string(&full, val) {
                out.push((name, s));
            }
        }
        out
    }

    fn choice<T: Copy>(&mut self, key: &str, s: &Str, options: &[(&str, T)]) -> Option<T> {
        if let Some((_, v)) = options.iter().find(|(n, _)| *n == s.value) {
            return Some(*v);
        }
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        let hint = match closest(&s.value, names.iter().copied()) {
            Some(c) => format!("did you mean `{c}`?"),
            None => format!("one of {}", names.join(", ")),
        };
        self.error_in(s, 0, format!("unknown {key} `{}`", s.value), Some(&hint));
        None
    }

    fn duration(&mut self, key: &str, s: &Option<Str>) -> Option<Duration> {
        let Some(s) = s else {
            return Some(Duration::ZERO);
        };
        match parse_duration(&s.value) {
            Ok(secs) => Some(Duration::from_secs_f64(secs)),
            Err(e) => {
                self.error_in(
                    s,
                    e.offset,
                    format!("`{key}`: {}", e.message),
                    e.hint.as_deref(),
                );
                None
            }
        }
    }

    fn expr(&mut self, s: &Str, scope: Scope, want: Want) -> Option<Expr> {
        match parse_checked(&s.value, scope, want) {
            Ok(e) => Some(e),
            Err(errors) => {
                self.expr_errors(s, errors);
                None
            }
        }
    }
}

/// The raw keys of one `[[rule]]` table.
#[derive(Default)]
struct Raw {
    strings: BTreeMap<&'static str, Str>,
    inhibits: Vec<Str>,
    inhibits_job: Vec<Str>,
    enabled: Option<bool>,
    labels: Vec<(Str, Str)>,
    values: Vec<(Str, Str)>,
}

impl FileReader<'_> {
    fn rule(&mut self, t: &DeTable<'_>, span: Range<usize>) -> Loaded {
        let errors_before = self.errors.len();
        let mut raw = Raw::default();
        for (key, v) in sorted(t) {
            let k = key.get_ref().as_ref();
            match KEYS.iter().find(|n| **n == k) {
                Some(&"inhibits") => raw.inhibits = self.inhibits("inhibits", v),
                Some(&"inhibits_job") => raw.inhibits_job = self.inhibits("inhibits_job", v),
                Some(&"enabled") => match v.get_ref() {
                    DeValue::Boolean(b) => raw.enabled = Some(*b),
                    other => {
                        let t = other.type_str();
                        self.error(
                            v.span().start,
                            format!("`enabled` must be true or false, not {} {t}", article(t)),
                            None,
                        );
                    }
                },
                Some(&"labels") => raw.labels = self.string_table("labels", v),
                Some(&"values") => raw.values = self.string_table("values", v),
                Some(name) => {
                    if let Some(s) = self.string(name, v) {
                        raw.strings.insert(name, s);
                    }
                }
                None => {
                    let hint = match closest(k, KEYS.iter().copied()) {
                        Some(c) => format!("did you mean `{c}`?"),
                        None => format!("a rule has the keys {}", KEYS.join(", ")),
                    };
                    self.error(key.span().start, format!("unknown key `{k}`"), Some(&hint));
                }
            }
        }
        let origin = Origin {
            file: self.origin.to_string(),
            line: position(self.text, span.start).0,
        };
        let name = raw.strings.get("name").and_then(|s| self.name(s));
        let inhibits = [
            ("inhibits", &raw.inhibits),
            ("inhibits_job", &raw.inhibits_job),
        ]
        .into_iter()
        .flat_map(|(key, list)| list.iter().map(move |s| (key, s)))
        .filter(|(_, s)| compile::is_snake_name(&s.value))
        .map(|(key, s)| (key, s.value.clone(), self.position_in(s, 0)))
        .collect();
        let rule = self.compile(raw, span.start, origin.clone());
        let rule = rule.filter(|_| self.errors.len() == errors_before);
        Loaded {
            rule,
            name,
            inhibits,
            origin,
        }
    }

    fn position_in(&self, s: &Str, offset: usize) -> (usize, usize) {
        position(
            self.text,
            value_offset(self.text, &s.span, &s.value, offset),
        )
    }

    fn inhibits(&mut self, key: &'static str, v: &Spanned<DeValue<'_>>) -> Vec<Str> {
        let DeValue::Array(a) = v.get_ref() else {
            let t = v.get_ref().type_str();
            let msg = format!(
                "`{key}` must be an array of rule names, not {} {t}",
                article(t)
            );
            let hint = format!("e.g. `{key} = [\"gpu_idle\"]`");
            self.error(v.span().start, msg, Some(&hint));
            return Vec::new();
        };
        a.iter().filter_map(|item| self.string(key, item)).collect()
    }
}
