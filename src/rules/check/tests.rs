//! Rule-file tests: a full rule, defaults, error positions inside strings of every TOML
//! string kind, and the cross-rule checks.

use std::time::Duration;

use super::*;
use crate::rules::ast::{Expr, Metric, TrendFn};
use crate::rules::rule::{Missing, Scope, Severity};
use crate::rules::template::TemplateValue;

const LEAK: &str = r#"
[[rule]]
name = "gpu_memory_leak"          # comment
severity = "warning"
scope = "process"
condition = '''
  mann_kendall_p(process_mem[30m], 1m) < 0.01 and theil_sen(process_mem[30m], 1m) * 60 > 50
'''
critical = "time_to(mem_used[30m], mem_total) < 10m"
resolve = "theil_sen(process_mem[30m]) <= 0"
for = "10m"
keep_firing_for = "5m"
on_no_data = "keep_last"
on_error = "ok"
inhibits = ["gpu_idle"]
enabled = true
summary = "GPU {gpu} ({model}, pid {pid} {process}) memory grows {rate:.0} MiB/min; full in ~{time_left:.0} min"
description = "team {label_team}"
[rule.labels]
team = "ml"
[rule.values]
rate = "theil_sen(process_mem[30m], 1m) * 60"
time_left = "time_to(mem_used[30m], mem_total) / 60"
b_first_in_abc_order = "1"

[[rule]]
name = "gpu_idle"
severity = "info"
condition = "avg(util_gpu[15m]) < 5 and process_count > 0"
summary = "GPU {gpu} idle"
"#;

fn errors(text: &str) -> Vec<String> {
    match load_str(text, "r.toml") {
        Ok(r) => panic!("loaded {} rules", r.len()),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

fn one_error(text: &str) -> String {
    let mut e = errors(text);
    assert_eq!(e.len(), 1, "{e:#?}");
    e.remove(0)
}

/// A minimal valid rule with `extra` lines added.
fn rule_with(extra: &str) -> String {
    format!(
        "[[rule]]\nname = \"r\"\nseverity = \"info\"\ncondition = \"lost\"\nsummary = \"s\"\n{extra}"
    )
}

#[test]
fn a_full_rule_loads() {
    let rules = load_str(LEAK, "leak.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rules.len(), 2);
    let r = &rules[0];
    assert_eq!(
        (r.name.as_str(), r.scope, r.severity),
        ("gpu_memory_leak", Scope::Process, Severity::Warning)
    );
    assert_eq!(
        (r.for_, r.keep_firing_for),
        (Duration::from_secs(600), Duration::from_secs(300))
    );
    assert_eq!((r.on_no_data, r.on_error), (Missing::KeepLast, Missing::Ok));
    assert_eq!(r.inhibits, ["gpu_idle"]);
    assert!(r.enabled && r.critical.is_some() && r.resolve.is_some());
    assert_eq!(r.labels.get("team").map(String::as_str), Some("ml"));
    let names: Vec<&str> = r.values.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["rate", "time_left", "b_first_in_abc_order"],
        "document order"
    );
    assert!(matches!(
        r.values[0].1,
        Expr::Binary { ref lhs, .. } if matches!(**lhs, Expr::Trend { func: TrendFn::TheilSen, metric: Metric::ProcessMem, .. })
    ));
    assert_eq!((r.origin.file.as_str(), r.origin.line), ("leak.toml", 2));
    let text = r.summary.render(&|n| match n {
        "rate" => Some(TemplateValue::Number(112.4)),
        "time_left" => Some(TemplateValue::Number(38.0)),
        "pid" => Some(TemplateValue::Number(4121.0)),
        other => Some(TemplateValue::Text(other.to_uppercase())),
    });
    assert_eq!(
        text,
        "GPU GPU (MODEL, pid 4121 PROCESS) memory grows 112 MiB/min; full in ~38 min"
    );
    let idle = &rules[1];
    assert_eq!(
        (idle.scope, idle.for_, idle.on_no_data, idle.on_error),
        (Scope::Gpu, Duration::ZERO, Missing::Ok, Missing::KeepLast)
    );
    assert!(idle.enabled && idle.description.is_none() && idle.values.is_empty());
}

#[test]
fn errors_point_into_every_kind_of_string() {
    // basic, literal, multi-line literal, multi-line basic, basic with escapes
    let text = "[[rule]]\nname = \"a\"\nseverity = \"info\"\nsummary = \"s\"\ncondition = \"lost and tmp > 1\"\nresolve = 'lost and tmp > 1'\ncritical = '''\n  lost and\n    tmp > 1'''\n[rule.values]\nx = \"\"\"\nlost + tmp\"\"\"\ny = \"\\tlost\\u0020+ tmp\"\n";
    let e = errors(text);
    let pos: Vec<&str> = e
        .iter()
        .map(|s| s.split(": ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        pos,
        [
            "r.toml:5:23",
            "r.toml:6:21",
            "r.toml:9:5",
            "r.toml:12:8",
            "r.toml:13:20"
        ],
        "{e:#?}"
    );
    assert!(e[0].ends_with("unknown metric `tmp` (did you mean `temp`?)"));
}

#[test]
fn unmappable_strings_point_at_their_start() {
    assert_eq!(value_offset("x = \"\\q tmp\"", &(4..12), "?", 3), 4);
    assert_eq!(value_offset("x = 'ab'", &(4..8), "ab", 1), 6);
    assert_eq!(value_offset("x = \"a\\\n   b\"", &(4..13), "ab", 1), 11);
}

#[test]
fn every_problem_of_every_rule_at_once() {
    let text = "[[rule]]\nname = \"Bad-Name\"\nseverty = \"info\"\ncondition = \"temp\"\nsummary = \"{gpu} {pid} {rat}\"\nfor = \"10min\"\nenabled = \"yes\"\n\n[[rule]]\nname = \"b\"\nseverity = \"warn\"\nscope = \"host\"\ncondition = \"process_mem > 1\"\nsummary = \"{gpu}\"\nkeep_firing_for = \"600\"\non_no_data = \"false\"\n[rule.labels]\ngpu = \"x\"\nowner = \"{user}\"\n[rule.values]\nhost = \"1\"\n";
    let e = errors(text);
    assert_eq!(
        e,
        [
            "r.toml:1:1: rule `Bad-Name` has no `severity` (add `severity = \"info\"`, `\"warning\"` or `\"critical\"`)",
            "r.toml:2:9: rule name `Bad-Name` must be lowercase letters, digits and `_`, starting with a letter (e.g. `bad_name`)",
            "r.toml:3:1: unknown key `severty` (did you mean `severity`?)",
            "r.toml:4:14: the condition is a number, not true or false (compare it with a threshold, e.g. `temp > 0`)",
            "r.toml:5:19: `{pid}` is only available in rules with scope = \"process\" (add `scope = \"process\"` to the rule)",
            "r.toml:5:25: unknown template variable `{rat}` (variables here: host, severity, rule, for, active, job, training_job, gpu, uuid, model, the keys of [rule.values] and label_<key>)",
            "r.toml:6:10: `for`: unknown duration unit `min` in `10min` (units are ms, s, m, h, d and w, e.g. `90s`, `5m`, `1h30m`)",
            "r.toml:7:11: `enabled` must be true or false, not a string",
            "r.toml:11:13: unknown severity `warn` (did you mean `warning`?)",
            "r.toml:13:14: `process_mem` exists only in rules with scope = \"process\" (add `scope = \"process\"` to the rule, or use `mem_used` (the whole GPU))",
            "r.toml:14:13: `{gpu}` is not available in rules with scope = \"host\"",
            "r.toml:15:23: `keep_firing_for`: a duration needs a unit (write `600s` or `10m`)",
            "r.toml:16:15: unknown on_no_data `false` (one of ok, alerting, keep_last)",
            "r.toml:18:1: label `gpu` is set by gpuwatch itself (choose another name)",
            "r.toml:19:10: labels are static text; `{...}` is not expanded in a label (changing values belong in `summary`, `description` or `[rule.values]`)",
            "r.toml:21:1: value `host` has the name of a built-in template variable (rename it)",
        ]
    );
}

#[test]
fn structure_errors() {
    assert_eq!(
        one_error("[rule]\nname = \"x\"\n"),
        "r.toml:1:2: `rule` must be an array of tables (write `[[rule]]`, not `[rule]`)"
    );
    assert_eq!(
        one_error("[[rules]]\nname = \"x\"\n"),
        "r.toml:1:3: unknown key `rules` (did you mean `rule`? each rule starts with `[[rule]]`)"
    );
    assert_eq!(
        one_error("[[rule]]\nname = \"x\n"),
        "r.toml:2:10: invalid basic string, expected `\"`"
    );
    assert_eq!(
        errors("\n[[rule]]\nname = \"r\"\n"),
        [
            "r.toml:2:1: rule `r` has no `severity` (add `severity = \"info\"`, `\"warning\"` or `\"critical\"`)",
            "r.toml:2:1: rule `r` has no `condition` (add e.g. `condition = \"avg(util_gpu[15m]) < 5\"`)",
            "r.toml:2:1: rule `r` has no `summary` (add e.g. `summary = \"GPU {gpu} ({model}) is idle\"`)",
        ]
    );
    assert_eq!(
        one_error(&rule_with("for = 600")),
        "r.toml:6:7: `for` must be a string, not an integer"
    );
    assert_eq!(
        one_error(&rule_with("inhibits = \"a\"")),
        "r.toml:6:12: `inhibits` must be an array of rule names, not a string (e.g. `inhibits = [\"gpu_idle\"]`)"
    );
    assert_eq!(
        one_error(&rule_with("labels = 3")),
        "r.toml:6:10: `labels` must be a table, not an integer (write `[rule.labels]` and `name = \"...\"` lines below it)"
    );
    assert_eq!(
        one_error(&rule_with("[rule.values]\nx = 3")),
        "r.toml:7:5: `values.x` must be a string, not an integer"
    );
    assert_eq!(
        one_error(
            &rule_with("severity = \"critical\"\ncritical = \"lost\"")
                .replace("severity = \"info\"\n", "")
        ),
        "r.toml:6:13: `critical` escalates to severity critical, but the rule's severity is already critical (remove `critical`, or set `severity = \"warning\"`)"
    );
    assert_eq!(
        one_error(&rule_with("summary2 = \"{x\"")),
        "r.toml:6:1: unknown key `summary2` (did you mean `summary`?)"
    );
    assert_eq!(
        one_error(&rule_with("description = \"a {x\"")),
        "r.toml:6:18: `{` is not closed (write `{{` for a literal brace)"
    );
    assert!(load_str("# nothing yet\n", "e.toml").is_ok_and(|r| r.is_empty()));
}

#[test]
fn cross_rule_checks() {
    let text = format!(
        "{}\n{}",
        rule_with("inhibits = [\"r\", \"gpu_idel\", \"Bad\"]"),
        rule_with("").replace("\"r\"", "\"gpu_idle\"")
    );
    assert_eq!(
        errors(&text),
        [
            "r.toml:6:14: a rule cannot inhibit itself",
            "r.toml:6:19: `inhibits` names an unknown rule `gpu_idel` (did you mean `gpu_idle`?)",
            "r.toml:6:31: `inhibits` entry `Bad` must be lowercase letters, digits and `_`, starting with a letter (e.g. `bad`)",
        ]
    );
    let two = vec![
        ("a.toml".to_string(), rule_with("")),
        ("b.toml".to_string(), format!("\n{}", rule_with(""))),
    ];
    let e = load_sources(&two).expect_err("duplicate");
    assert_eq!(
        e.to_string(),
        "b.toml:3:9: duplicate rule name `r` (first defined at a.toml:1)"
    );
    // A broken rule still counts as defined: no follow-on "unknown rule" error.
    let text = format!(
        "{}\n{}",
        rule_with("inhibits = [\"b\"]"),
        rule_with("")
            .replace("\"r\"", "\"b\"")
            .replace("\"lost\"", "\"nope\"")
    );
    assert_eq!(errors(&text).len(), 1);
}

#[test]
fn files_and_directories() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
    std::fs::write(&a, rule_with("")).expect("write");
    std::fs::write(&b, rule_with("").replace("\"r\"", "\"q\"")).expect("write");
    std::fs::write(dir.path().join("notes.txt"), "not a rule").expect("write");
    let rules = load_files(&[dir.path().to_path_buf()]).expect("loads");
    assert_eq!(
        rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["r", "q"]
    );
    let missing = dir.path().join("missing.toml");
    let e = load_files(&[a, missing.clone()]).expect_err("missing file");
    assert!(
        e.to_string()
            .starts_with(&format!("{}: cannot read rule file: ", missing.display())),
        "{e}"
    );
    let empty = tempfile::tempdir().expect("tempdir");
    let e = load_files(&[empty.path().to_path_buf()]).expect_err("empty dir");
    assert_eq!(
        e.to_string(),
        format!(
            "{}: no rule files (*.toml) in this directory",
            empty.path().display()
        )
    );
}

#[test]
fn the_documented_examples_are_valid() {
    let doc = include_str!("../../../docs/RULES.md");
    let toml_start = doc.find("```toml\n").expect("a TOML example") + 8;
    let toml_end = toml_start + doc[toml_start..].find("```").expect("its end");
    let rules = load_str(&doc[toml_start..toml_end], "RULES.md").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rules.len(), 1);
    // The last column of every function table row is an example expression.
    let mut checked = 0;
    for line in doc
        .lines()
        .filter(|l| l.starts_with("| `") && l.ends_with("` |"))
    {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        if cells.len() != 3 || !cells[0].contains('(') {
            continue;
        }
        let example = cells[2].trim().trim_matches('`');
        crate::rules::parse_expr(example, Scope::Process)
            .unwrap_or_else(|e| panic!("{example}: {e}"));
        checked += 1;
    }
    assert!(checked >= 30, "{checked} examples");
}

#[test]
fn truncated_and_damaged_files_never_panic() {
    let escaped = "[[rule]]\nname = \"x\"\nseverity = \"info\"\ncondition = \"temp > 1 and\\t\\u00e9\\\n   lost\"\nsummary = \"\"\"\n{gpu}\\\n {{x}}\"\"\"\n";
    for text in [LEAK, escaped] {
        let cuts = text.char_indices().map(|(i, _)| i);
        for i in cuts {
            let _ = load_str(&text[..i], "cut.toml");
            let mut damaged = text.to_string();
            damaged.remove(i);
            let _ = load_str(&damaged, "damaged.toml");
        }
    }
}

#[test]
fn globs_expand_to_their_matches_in_order_and_an_empty_match_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, name) in [
        ("b.toml", "b_rule"),
        ("a.toml", "a_rule"),
        ("c.txt", "c_rule"),
    ] {
        let text = format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"info\"\ncondition = \"temp > 1\"\nsummary = \"x\"\n"
        );
        std::fs::write(dir.path().join(file), text).expect("write");
    }
    let rules = load_files(&[dir.path().join("*.toml")]).expect("glob loads");
    let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["a_rule", "b_rule"]);
    let err = load_files(&[dir.path().join("*.yaml")]).expect_err("no match");
    assert!(
        err.to_string()
            .ends_with("*.yaml: the pattern matches no rule file"),
        "{err}"
    );
}
