//! The names of the condition language's data — metrics and inventory constants — with
//! lookups both ways, and the "did you mean" suggestions for unknown metrics and functions.
//!
//! Invariants: `METRICS` and `STATICS` hold every `ast::Metric` and `ast::Static` exactly
//! once (a test checks it), and no name is both; a suggestion is only given when it is
//! close (a small edit distance, a prefix, or the same words in another order).

use std::time::Duration;

use super::ast::{Metric, PauseKind, SampleId, Static};
use super::functions::{function_names, is_function, usage};
use super::lex::ExprError;
use crate::metric::{Axis, SampleMetric};

/// The series that are not per-GPU samples (those are the metric registry's rows,
/// `crate::metric::SAMPLE_METRICS`), by their names in the language.
const OTHER_METRICS: &[(&str, Metric)] = &[
    ("xid_critical", Metric::XidCritical),
    ("xid", Metric::Xid),
    ("xid_crash", Metric::XidCrash),
    ("pause_flat", Metric::Pause(PauseKind::Flat)),
    ("pause_bursty", Metric::Pause(PauseKind::Bursty)),
    ("pause_busy", Metric::Pause(PauseKind::Busy)),
    ("pause_flat_s", Metric::PauseLen(PauseKind::Flat)),
    ("pause_bursty_s", Metric::PauseLen(PauseKind::Bursty)),
    ("pause_busy_s", Metric::PauseLen(PauseKind::Busy)),
    ("process_mem", Metric::ProcessMem),
    ("training_step", Metric::TrainingStep),
    ("training_loss", Metric::TrainingLoss),
    ("training_source_failing", Metric::TrainingSourceFailing),
];

/// Every metric of the language with its name: the registry's sample metrics, then the rest.
pub fn metrics() -> impl Iterator<Item = (&'static str, Metric)> {
    SampleId::all()
        .map(|id| (id.def().name, Metric::Sample(id)))
        .chain(OTHER_METRICS.iter().copied())
}

/// Inventory constants, by their names in the language.
pub const STATICS: &[(&str, Static)] = &[
    ("temp_slowdown", Static::TempSlowdown),
    ("temp_shutdown", Static::TempShutdown),
    ("temp_gpu_max", Static::TempGpuMax),
    ("memory_total", Static::MemoryTotal),
    ("power_limit_default", Static::PowerLimitDefault),
    ("power_limit_max", Static::PowerLimitMax),
    ("pcie_max_gen", Static::PcieMaxGen),
    ("pcie_max_width", Static::PcieMaxWidth),
    ("host_gpu_count", Static::HostGpuCount),
    ("mem_free_baseline", Static::MemFreeBaseline),
    ("nvlinks_expected", Static::NvlinksExpected),
];

const METRIC_ALIASES: &[(&str, &str)] = &[
    ("temperature", "temp"),
    ("utilization", "util_gpu"),
    ("util", "util_gpu"),
    ("memory_used", "mem_used"),
    ("memory_free", "mem_free"),
    ("power_draw", "power"),
    ("power_usage", "power"),
    ("step", "training_step"),
    ("loss", "training_loss"),
];

pub fn metric_by_name(name: &str) -> Option<Metric> {
    SampleId::by_name(name).map(Metric::Sample).or_else(|| {
        OTHER_METRICS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, m)| *m)
    })
}

pub fn static_by_name(name: &str) -> Option<Static> {
    STATICS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The language's name for a metric (the registry's row for a sample metric).
pub fn metric_name(m: Metric) -> &'static str {
    match m {
        Metric::Sample(id) => id.def().name,
        m => OTHER_METRICS
            .iter()
            .find(|(_, x)| *x == m)
            .map_or("?", |(n, _)| n),
    }
}

/// The registry's row of a metric; `None` for metrics that are not per-GPU sample series
/// (XIDs, process and training metrics).
pub fn metric_of(m: Metric) -> Option<&'static SampleMetric> {
    match m {
        Metric::Sample(id) => Some(id.def()),
        _ => None,
    }
}

/// The metric named `name` (or by one of the registry's aliases that stands for one metric,
/// e.g. `util`) when it is a per-GPU sample series; `None` for process, XID and training
/// metrics and for unknown names.
pub fn sample_metric(name: &str) -> Option<Metric> {
    crate::metric::by_name_or_alias(name).map(Metric::Sample)
}

pub fn static_name(s: Static) -> &'static str {
    STATICS
        .iter()
        .find(|(_, x)| *x == s)
        .map_or("?", |(n, _)| n)
}

/// 0/1 series: usable directly as conditions (`lost`, `max(thermal_throttle[1m])`).
pub fn is_flag(m: Metric) -> bool {
    match m {
        Metric::Sample(id) => id.def().axis == Axis::Flag,
        Metric::Pause(_) => true,
        m => m == Metric::TrainingSourceFailing,
    }
}

/// Levenshtein distance (characters).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The closest candidate: within a small edit distance, a candidate that starts with `name`
/// (`warn` → `warning`), or the same `_`-separated words in another order (`gpu_util` →
/// `util_gpu`).
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut words: Vec<&str> = name.split('_').collect();
    words.sort_unstable();
    let limit = if name.chars().count() < 5 { 1 } else { 2 };
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let mut cw: Vec<&str> = c.split('_').collect();
        cw.sort_unstable();
        let d = if cw == words {
            0
        } else if name.len() >= 3 && c.starts_with(name) {
            1
        } else {
            edit_distance(name, c)
        };
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// The error for a name that is neither a metric nor a constant.
pub fn unknown_name(name: &str, at: usize) -> ExprError {
    if is_function(name) {
        return ExprError::new(at, format!("`{name}` is a function"))
            .hint(format!("call it, e.g. `{}`", usage(name)));
    }
    let e = ExprError::new(at, format!("unknown metric `{name}`"));
    let alias = METRIC_ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, m)| *m);
    let names = metrics()
        .map(|(n, _)| n)
        .chain(STATICS.iter().map(|(n, _)| *n));
    match alias.or_else(|| closest(name, names)) {
        Some(m) => e.hint(format!("did you mean `{m}`?")),
        None => e.hint("docs/RULES.md lists every metric"),
    }
}

/// Other tools' names for our functions, with the hint to give.
const FUNCTION_ALIASES: &[(&str, &str)] = &[
    ("deriv", "use `slope(x[5m])`"),
    ("absent", "use `not present(x)`"),
    ("mean", "did you mean `avg`?"),
    ("median", "use `quantile(0.5, x[5m])`"),
    ("stddev_over_time", "did you mean `stddev`?"),
    ("zscore", "did you mean `peer_zscore`?"),
];

/// The error for a call of a name that is not a function.
pub fn unknown_function(name: &str, at: usize) -> ExprError {
    if metric_by_name(name).is_some() || static_by_name(name).is_some() {
        return ExprError::new(at, format!("`{name}` is a metric, not a function"))
            .hint(format!("e.g. `avg({name}[5m])`"));
    }
    let e = ExprError::new(at, format!("unknown function `{name}`"));
    let base = name.strip_suffix("_over_time").filter(|b| is_function(b));
    if let Some(b) = base {
        return e.hint(format!("did you mean `{b}`?"));
    }
    if let Some((_, h)) = FUNCTION_ALIASES.iter().find(|(a, _)| *a == name) {
        return e.hint(*h);
    }
    match closest(name, function_names()) {
        Some(f) => e.hint(format!("did you mean `{f}`?")),
        None => e.hint("docs/RULES.md lists every function"),
    }
}

/// A duration as the shortest literal that writes it (`1800 s` → `30m`).
pub fn seconds_text(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s == 0.0 {
        return "0s".into();
    }
    for (unit, len) in [
        ("w", 604800.0),
        ("d", 86400.0),
        ("h", 3600.0),
        ("m", 60.0),
        ("s", 1.0),
    ] {
        if s >= len && (s / len).fract() == 0.0 {
            return format!("{}{unit}", s / len);
        }
    }
    if (s * 1000.0).fract() == 0.0 {
        format!("{}ms", s * 1000.0)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_and_constant_has_one_name() {
        for (name, m) in metrics() {
            assert_eq!(metric_name(m), name);
            assert_eq!(metric_by_name(name), Some(m));
            assert!(static_by_name(name).is_none(), "{name} is both");
        }
        for (name, s) in STATICS {
            assert_eq!(static_name(*s), *name);
        }
        // 53, and the test build's probe row (`crate::metric`).
        assert_eq!(metrics().count(), 54);
        assert_eq!(STATICS.len(), 11);
    }

    #[test]
    fn suggestions() {
        let names = || metrics().map(|(n, _)| n);
        assert_eq!(closest("gpu_util", names()), Some("util_gpu"));
        assert_eq!(closest("clock", names()), Some("clock_sm"));
        assert_eq!(closest("banana", names()), None);
        assert_eq!(closest("mem_usd", names()), Some("mem_used"));
        assert_eq!(closest("tmp", names()), Some("temp"));
        assert_eq!(closest("foo", names()), None);
        assert_eq!(closest("warn", ["info", "warning"]), Some("warning"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        let e = unknown_name("temperature", 3);
        assert_eq!(e.hint.as_deref(), Some("did you mean `temp`?"));
        let e = unknown_name("avg", 0);
        assert_eq!(e.message, "`avg` is a function");
        assert_eq!(e.hint.as_deref(), Some("call it, e.g. `avg(util_gpu[5m])`"));
    }

    #[test]
    fn durations_print_in_their_largest_unit() {
        let t = |s: f64| seconds_text(Duration::from_secs_f64(s));
        assert_eq!(t(1800.0), "30m");
        assert_eq!(t(5400.0), "90m");
        assert_eq!(t(86400.0), "1d");
        assert_eq!(t(0.5), "500ms");
        assert_eq!(t(90.0), "90s");
        assert_eq!(t(0.0), "0s");
    }
}
