//! Aggregating run records into the figures the benchmark publishes (per rule and shape
//! group, per interval, per family, healthy false alarms, hang delays, leak lead times), as
//! markdown (`markdown.rs`) and as JSON records for debugging.
//!
//! Invariants: every figure is computed from the run records alone (so a saved JSON file
//! holds everything a report needs); a rule's false positives count wherever they occur,
//! healthy cases included; failed runs are listed, and their observable labels count as
//! missed.

mod markdown;

use crate::bench::{Benchmark, RunRecord};
use crate::cases::Family;
use crate::score::Tally;

pub use markdown::markdown;

/// The record of every run, as pretty JSON.
pub fn json(b: &Benchmark) -> String {
    serde_json::to_string_pretty(&b.records).unwrap_or_else(|e| format!("\"{e}\""))
}

/// The tally of `rule` (every rule when `None`) over `records`.
pub fn tally<'a>(records: impl IntoIterator<Item = &'a RunRecord>, rule: Option<&str>) -> Tally {
    let mut t = Tally::default();
    let wanted = |r: &str| rule.is_none_or(|w| w == r);
    for r in records {
        for m in &r.score.matches {
            if wanted(&r.labels[m.label].label.rule) {
                t.tp += 1;
                t.delays_s.push(m.delay_s);
            }
        }
        t.fn_ += r
            .score
            .missed
            .iter()
            .filter(|&&i| wanted(&r.labels[i].label.rule))
            .count();
        t.fp += r
            .score
            .false_positives
            .iter()
            .filter(|&&a| wanted(&r.alerts[a].rule))
            .count();
        t.repeats += r
            .score
            .repeats
            .iter()
            .filter(|&&a| wanted(&r.alerts[a].rule))
            .count();
    }
    t
}

/// The rules the labels name, in catalogue order, then the other rules that fired, sorted.
pub fn rules(records: &[RunRecord]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in records {
        for l in &r.labels {
            if !out.contains(&l.label.rule) {
                out.push(l.label.rule.clone());
            }
        }
    }
    let mut others: Vec<String> = records
        .iter()
        .flat_map(|r| r.alerts.iter().map(|a| a.rule.clone()))
        .filter(|rule| !out.contains(rule))
        .collect();
    others.sort();
    others.dedup();
    out.extend(others);
    out
}

/// The fault rules of the labels (each once, catalogue order).
pub fn fault_rules(records: &[RunRecord]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in records.iter().flat_map(|r| &r.labels) {
        if !out.contains(&l.label.rule) {
            out.push(l.label.rule.clone());
        }
    }
    out
}

/// Alerts on healthy cases: (count, "rule ×n" list) over `records`.
pub fn false_alarms<'a>(records: impl IntoIterator<Item = &'a RunRecord>) -> (usize, String) {
    let mut by_rule: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in records.into_iter().filter(|r| r.healthy) {
        for a in &r.alerts {
            *by_rule.entry(a.rule.as_str()).or_default() += 1;
        }
    }
    let n = by_rule.values().sum();
    let list: Vec<String> = by_rule.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
    (n, list.join(", "))
}

/// Delays (s) of the detected `training_hang` labels of `families`, over `records`.
pub fn hang_delays<'a>(
    records: impl IntoIterator<Item = &'a RunRecord>,
    families: &[Family],
) -> (Vec<f64>, usize) {
    let mut delays = Vec::new();
    let mut labels = 0;
    for r in records.into_iter().filter(|r| families.contains(&r.family)) {
        let t = tally([r], Some("training_hang"));
        labels += t.tp + t.fn_;
        delays.extend(t.delays_s);
    }
    (delays, labels)
}

/// Per hang incident (one run of one hang case: the job's hang as the person on call sees
/// it), the delay (s) of its first detected GPU label; and how many incidents there were.
pub fn hang_incidents<'a>(
    records: impl IntoIterator<Item = &'a RunRecord>,
    families: &[Family],
) -> (Vec<f64>, usize) {
    let mut firsts = Vec::new();
    let mut incidents = 0;
    for r in records.into_iter().filter(|r| families.contains(&r.family)) {
        incidents += 1;
        let t = tally([r], Some("training_hang"));
        if let Some(first) = t.delays_s.iter().copied().reduce(f64::min) {
            firsts.push(first);
        }
    }
    (firsts, incidents)
}

/// The hang families.
pub const HANGS: [Family; 2] = [Family::NcclHang, Family::ZeroHang];

/// Shapes where hang delays are also reported on their own: the daemon and the full logs.
pub fn rich_shape(r: &RunRecord) -> bool {
    matches!(r.shape.group(), "nvml" | "full" | "full+apps")
}

/// Leaks of one rate: labels, and per detection the lead (s, GPU full − alert) and the time
/// the GPU took to fill from the leak's start (s, GPU full − onset), which bounds any lead.
#[derive(Debug, Clone, Default)]
pub struct LeakRow {
    pub rate: u32,
    pub labels: usize,
    pub leads: Vec<f64>,
    pub fills: Vec<f64>,
}

/// Leak detections per rate, slowest rate first.
pub fn leak_leads(records: &[RunRecord]) -> Vec<LeakRow> {
    let mut out: Vec<LeakRow> = Vec::new();
    for r in records {
        let Some(leak) = r.leak else { continue };
        let i = match out.iter().position(|e| e.rate == leak.rate_mib_per_min) {
            Some(i) => i,
            None => {
                out.push(LeakRow {
                    rate: leak.rate_mib_per_min,
                    ..LeakRow::default()
                });
                out.len() - 1
            }
        };
        let t = tally([r], Some("gpu_memory_leak"));
        out[i].labels += t.tp + t.fn_;
        for m in &r.score.matches {
            out[i]
                .leads
                .push(leak.full_s as f64 - r.alerts[m.alert].at_s);
            let onset = r
                .labels
                .get(m.label)
                .map_or(0.0, |l| l.label.onset_s as f64);
            out[i].fills.push(leak.full_s as f64 - onset);
        }
    }
    out.sort_by_key(|e| e.rate);
    out
}
