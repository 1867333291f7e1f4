//! The second half of reading a rule: the raw keys of one `[[rule]]` table → a checked
//! [`Rule`] — names, choices, durations, expressions, labels, values and templates.
//!
//! Invariants: every key is checked even after an earlier key failed (all errors at once);
//! a template may use only the variables that exist for the rule's scope, its `values` and
//! `label_<key>` of its labels; labels are static text and never one of gpuwatch's own.

use std::collections::BTreeMap;

use super::{FileReader, RESERVED_LABELS, Raw, Str, VARS_ALL, VARS_GPU, VARS_PROCESS};
use crate::rules::names::closest;
use crate::rules::parse::Want;
use crate::rules::rule::{Missing, Origin, Rule, Scope, Severity};
use crate::rules::template::Template;

const SCOPES: &[(&str, Scope)] = &[
    ("gpu", Scope::Gpu),
    ("process", Scope::Process),
    ("host", Scope::Host),
];
const SEVERITIES: &[(&str, Severity)] = &[
    ("info", Severity::Info),
    ("warning", Severity::Warning),
    ("critical", Severity::Critical),
];
const MISSING: &[(&str, Missing)] = &[
    ("ok", Missing::Ok),
    ("alerting", Missing::Alerting),
    ("keep_last", Missing::KeepLast),
];

/// `[a-z][a-z0-9_]*`
pub fn is_snake_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `[A-Za-z_][A-Za-z0-9_]*` (Prometheus label names).
fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A rule name written the way it should be (`GPU-Idle` → `gpu_idle`).
fn snake(s: &str) -> String {
    let t: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if t.starts_with(|c: char| c.is_ascii_lowercase()) {
        t
    } else {
        format!("r_{t}")
    }
}

impl FileReader<'_> {
    /// Checks a rule name (the `name` key or an `inhibits` entry).
    pub(super) fn name_ok(&mut self, s: &Str, what: &str) -> bool {
        if is_snake_name(&s.value) {
            return true;
        }
        let msg = format!(
            "{what} `{}` must be lowercase letters, digits and `_`, starting with a letter",
            s.value
        );
        let hint = format!("e.g. `{}`", snake(&s.value));
        self.error_in(s, 0, msg, Some(&hint));
        false
    }

    pub(super) fn name(&mut self, s: &Str) -> Option<(String, (usize, usize))> {
        self.name_ok(s, "rule name")
            .then(|| (s.value.clone(), self.position_in(s, 0)))
    }

    pub(super) fn compile(&mut self, mut raw: Raw, at: usize, origin: Origin) -> Option<Rule> {
        let who = match raw.strings.get("name") {
            Some(n) => format!("rule `{}`", n.value),
            None => "this rule".to_string(),
        };
        let mut required = |f: &mut Self, key: &str, hint: &str| {
            let s = raw.strings.remove(key);
            if s.is_none() {
                f.error(at, format!("{who} has no `{key}`"), Some(hint));
            }
            s
        };
        let name = required(self, "name", "add e.g. `name = \"gpu_idle\"`");
        let severity = required(
            self,
            "severity",
            "add `severity = \"info\"`, `\"warning\"` or `\"critical\"`",
        );
        let condition = required(
            self,
            "condition",
            "add e.g. `condition = \"avg(util_gpu[15m]) < 5\"`",
        );
        let summary = required(
            self,
            "summary",
            "add e.g. `summary = \"GPU {gpu} ({model}) is idle\"`",
        );

        let scope = match raw.strings.remove("scope") {
            Some(s) => self.choice("scope", &s, SCOPES),
            None => Some(Scope::Gpu),
        };
        let sc = scope.unwrap_or(Scope::Gpu);
        let gpu_fallback = match raw.strings.remove("fallback") {
            None => Some(false),
            Some(s) if s.value != "gpu" => {
                let msg = format!("unknown fallback `{}`", s.value);
                self.error_in(&s, 0, msg, Some("the only fallback is `\"gpu\"`"));
                None
            }
            Some(s) if sc != Scope::Process => {
                let msg = "`fallback` is for rules with scope = \"process\"".to_string();
                self.error_in(
                    &s,
                    0,
                    msg,
                    Some("add `scope = \"process\"`, or remove `fallback`"),
                );
                None
            }
            Some(_) => Some(true),
        };
        let severity = severity.and_then(|s| self.choice("severity", &s, SEVERITIES));
        let condition = condition.and_then(|s| self.expr(&s, sc, Want::Condition));
        let mut optional_condition = |f: &mut Self, key: &str| match raw.strings.remove(key) {
            Some(s) => f.expr(&s, sc, Want::Condition).map(|e| Some((e, s))),
            None => Some(None),
        };
        let critical = optional_condition(self, "critical");
        let resolve = optional_condition(self, "resolve");
        if let (Some(Severity::Critical), Some(Some((_, s)))) = (severity, &critical) {
            let msg = "`critical` escalates to severity critical, but the rule's severity is already critical";
            let hint = "remove `critical`, or set `severity = \"warning\"`";
            self.error_in(s, 0, msg.into(), Some(hint));
        }
        let for_ = self.duration("for", &raw.strings.remove("for"));
        let keep_firing_for =
            self.duration("keep_firing_for", &raw.strings.remove("keep_firing_for"));
        let mut missing = |f: &mut Self, key: &str, default: Missing| match raw.strings.remove(key)
        {
            Some(s) => f.choice(key, &s, MISSING),
            None => Some(default),
        };
        let on_no_data = missing(self, "on_no_data", Missing::Ok);
        let on_error = missing(self, "on_error", Missing::KeepLast);

        let labels = self.labels(&raw.labels);
        let values = self.values(&raw.values, sc);
        let value_names: Vec<&str> = raw.values.iter().map(|(k, _)| k.value.as_str()).collect();
        let label_vars: Vec<String> = raw
            .labels
            .iter()
            .map(|(k, _)| format!("label_{}", k.value))
            .collect();
        let mut vars: Vec<&str> = value_names;
        vars.extend(label_vars.iter().map(String::as_str));
        let summary = summary.and_then(|s| self.template(&s, sc, &vars));
        let description = match raw.strings.remove("description") {
            Some(s) => self.template(&s, sc, &vars).map(Some),
            None => Some(None),
        };

        let name_str = name.as_ref().map(|s| s.value.clone());
        for (key, list) in [
            ("`inhibits` entry", &raw.inhibits),
            ("`inhibits_job` entry", &raw.inhibits_job),
        ] {
            for target in list {
                if self.name_ok(target, key) && Some(&target.value) == name_str.as_ref() {
                    self.error_in(target, 0, "a rule cannot inhibit itself".into(), None);
                }
            }
        }
        Some(Rule {
            name: name_str?,
            scope: scope?,
            severity: severity?,
            condition: condition?,
            critical: critical?.map(|(e, _)| e),
            resolve: resolve?.map(|(e, _)| e),
            for_: for_?,
            keep_firing_for: keep_firing_for?,
            on_no_data: on_no_data?,
            on_error: on_error?,
            labels: labels?,
            values: values?,
            summary: summary?,
            description: description?,
            inhibits: raw.inhibits.into_iter().map(|s| s.value).collect(),
            inhibits_job: raw.inhibits_job.into_iter().map(|s| s.value).collect(),
            enabled: raw.enabled.unwrap_or(true),
            gpu_fallback: gpu_fallback?,
            origin,
        })
    }

    fn labels(&mut self, raw: &[(Str, Str)]) -> Option<BTreeMap<String, String>> {
        let mut ok = true;
        for (k, v) in raw {
            if !is_label_name(&k.value) {
                let msg = format!(
                    "label name `{}` must be letters, digits and `_`, not starting with a digit",
                    k.value
                );
                self.error(k.span.start, msg, None);
                ok = false;
            } else if RESERVED_LABELS.contains(&k.value.as_str()) {
                let msg = format!("label `{}` is set by gpuwatch itself", k.value);
                self.error(k.span.start, msg, Some("choose another name"));
                ok = false;
            }
            if let Some(i) = v.value.find('{') {
                let msg = "labels are static text; `{...}` is not expanded in a label".to_string();
                let hint = "changing values belong in `summary`, `description` or `[rule.values]`";
                self.error_in(v, i, msg, Some(hint));
                ok = false;
            }
        }
        ok.then(|| {
            raw.iter()
                .map(|(k, v)| (k.value.clone(), v.value.clone()))
                .collect()
        })
    }

    fn values(
        &mut self,
        raw: &[(Str, Str)],
        scope: Scope,
    ) -> Option<Vec<(String, crate::rules::ast::Expr)>> {
        let mut out = Some(Vec::new());
        for (k, v) in raw {
            let builtin = [VARS_ALL, VARS_GPU, VARS_PROCESS]
                .concat()
                .contains(&k.value.as_str());
            let bad = if !is_snake_name(&k.value) || k.value.starts_with("label_") {
                Some(format!(
                    "value name `{}` must be lowercase letters, digits and `_`, starting with a letter (and not `label_`)",
                    k.value
                ))
            } else if builtin {
                Some(format!(
                    "value `{}` has the name of a built-in template variable",
                    k.value
                ))
            } else {
                None
            };
            if let Some(msg) = bad {
                self.error(k.span.start, msg, Some("rename it"));
                out = None;
            }
            match (self.expr(v, scope, Want::Value), out.as_mut()) {
                (Some(e), Some(list)) => list.push((k.value.clone(), e)),
                _ => out = None,
            }
        }
        out
    }

    fn template(&mut self, s: &Str, scope: Scope, extra: &[&str]) -> Option<Template> {
        let byte = |chars: usize| {
            s.value
                .char_indices()
                .nth(chars)
                .map_or(s.value.len(), |(b, _)| b)
        };
        let t = match Template::parse(&s.value) {
            Ok(t) => t,
            Err((at, msg)) => {
                self.error_in(s, byte(at), msg, None);
                return None;
            }
        };
        let mut ok = true;
        for (at, name) in t.placeholders() {
            let available = extra.contains(&name)
                || VARS_ALL.contains(&name)
                || (VARS_GPU.contains(&name) && scope != Scope::Host)
                || (VARS_PROCESS.contains(&name) && scope == Scope::Process);
            if available {
                continue;
            }
            let problem = if VARS_GPU.contains(&name) {
                (
                    format!("`{{{name}}}` is not available in rules with scope = \"host\""),
                    None,
                )
            } else if VARS_PROCESS.contains(&name) {
                let hint = "add `scope = \"process\"` to the rule".to_string();
                (
                    format!("`{{{name}}}` is only available in rules with scope = \"process\""),
                    Some(hint),
                )
            } else {
                let mut known: Vec<&str> = VARS_ALL.to_vec();
                known.extend(VARS_GPU.iter().filter(|_| scope != Scope::Host));
                known.extend(VARS_PROCESS.iter().filter(|_| scope == Scope::Process));
                known.extend(extra);
                let hint = match closest(name, known.iter().copied()) {
                    Some(c) => format!("did you mean `{c}`?"),
                    None => format!(
                        "variables here: {}, the keys of [rule.values] and label_<key>",
                        known.join(", ")
                    ),
                };
                (
                    format!("unknown template variable `{{{name}}}`"),
                    Some(hint),
                )
            };
            self.error_in(s, byte(at), problem.0, problem.1.as_deref());
            ok = false;
        }
        ok.then_some(t)
    }
}
