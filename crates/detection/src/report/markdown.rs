//! The benchmark as markdown: the tables of docs/DETECTION.md and the command that
//! reproduces them.
//!
//! Invariants: "–" marks a figure that is undefined (no label, no alert, no detection), never
//! 0; delays and lead times are minutes with one decimal; every table has one row per rule or
//! family that occurs in the records and one column per shape group present.

use std::fmt::Write as _;

use super::{
    HANGS, false_alarms, hang_delays, hang_incidents, leak_leads, rich_shape, rules, tally,
};
use crate::bench::{Benchmark, RunRecord};
use crate::cases::{Family, Set};
use crate::score::{Tally, median};
use crate::shape::{GROUPS, INTERVALS, Shape};

fn minutes(s: Option<f64>) -> String {
    s.map_or("–".into(), |s| format!("{:.1}", s / 60.0))
}

fn ratio(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{x:.2}"))
}

/// `R/P · TP/FN/FP`, or "·" for nothing at all.
fn counts(t: &Tally) -> String {
    if t.is_empty() {
        return "·".into();
    }
    format!(
        "{}/{} · {}/{}/{}",
        ratio(t.recall()),
        ratio(t.precision()),
        t.tp,
        t.fn_,
        t.fp
    )
}

/// `R/P · TP/FN/FP · median/max min`, or "·" for nothing at all.
fn cell(t: &Tally) -> String {
    if t.is_empty() {
        return "·".into();
    }
    let mut s = counts(t);
    if t.tp > 0 {
        let _ = write!(
            s,
            " · {}/{}",
            minutes(t.median_delay_s()),
            minutes(t.max_delay_s())
        );
    }
    s
}

fn row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

fn head(out: &mut String, cells: &[&str]) {
    row(
        out,
        &cells.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
    );
    row(out, &vec!["---".to_string(); cells.len()]);
}

fn in_group<'a>(rs: &'a [RunRecord], g: &'a str) -> impl Iterator<Item = &'a RunRecord> + 'a {
    rs.iter().filter(move |r| r.shape.group() == g)
}

/// The command that reproduces a benchmark.
pub fn command(b: &Benchmark) -> String {
    let set = match b.set {
        Set::Quick => "quick",
        Set::Full => "full",
    };
    format!(
        "cargo build --release --workspace && target/release/gpuwatch-detection --set {set} \
         --seed {} --gpuwatch target/release/gpuwatch",
        b.seed
    )
}

/// The whole report.
pub fn markdown(b: &Benchmark) -> String {
    let rs = &b.records;
    let groups: Vec<&str> = GROUPS
        .iter()
        .copied()
        .filter(|g| rs.iter().any(|r| r.shape.group() == *g))
        .collect();
    let mut cases: Vec<&str> = rs.iter().map(|r| r.case.as_str()).collect();
    cases.dedup();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Set `{}` (seed {}): {} cases, {} runs, {:.0} s with {} parallel runs.\n\nReproduce: \
         `{}`\n",
        if b.set == Set::Quick { "quick" } else { "full" },
        b.seed,
        cases.len(),
        rs.len(),
        b.elapsed_s,
        b.jobs,
        command(b)
    );
    per_rule(&mut out, rs, &groups);
    per_interval(&mut out, rs);
    healthy(&mut out, rs);
    families(&mut out, rs, &groups);
    hangs(&mut out, rs);
    leaks(&mut out, rs);
    problems(&mut out, rs);
    out
}

fn per_rule(out: &mut String, rs: &[RunRecord], groups: &[&str]) {
    let _ = writeln!(
        out,
        "### Per rule and shape group\n\nEach cell: recall/precision · TP/FN/FP · median/max \
         delay in minutes (a CSV group sums its 1, 5, 15 and 60 s logs; \"–\" undefined, \"·\" \
         no label and no alert). Repeats: false positives that re-fire a detected alert inside \
         its window (flapping).\n"
    );
    let mut cols = vec!["rule"];
    cols.extend(groups);
    cols.extend(["all shapes", "repeats"]);
    head(out, &cols);
    for rule in rules(rs) {
        let mut cells = vec![format!("`{rule}`")];
        for g in groups {
            cells.push(cell(&tally(in_group(rs, g), Some(&rule))));
        }
        let all = tally(rs, Some(&rule));
        cells.push(cell(&all));
        cells.push(all.repeats.to_string());
        row(out, &cells);
    }
    out.push('\n');
}

fn per_interval(out: &mut String, rs: &[RunRecord]) {
    let intervals: Vec<u32> = INTERVALS
        .iter()
        .copied()
        .filter(|i| rs.iter().any(|r| r.shape.interval_s() == Some(*i)))
        .collect();
    if intervals.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### Per sampling interval (CSV shapes)\n\nrecall/precision · TP/FN/FP over every CSV \
         group at that interval.\n"
    );
    let names: Vec<String> = intervals.iter().map(|i| format!("@{i}s")).collect();
    let mut cols = vec!["rule"];
    cols.extend(names.iter().map(String::as_str));
    head(out, &cols);
    for rule in rules(rs) {
        let mut cells = vec![format!("`{rule}`")];
        for &i in &intervals {
            let t = tally(
                rs.iter().filter(|r| r.shape.interval_s() == Some(i)),
                Some(&rule),
            );
            cells.push(counts(&t));
        }
        row(out, &cells);
    }
    out.push('\n');
}

fn healthy(out: &mut String, rs: &[RunRecord]) {
    let _ = writeln!(
        out,
        "### False alarms on healthy cases\n\nEvery alert on a healthy trap is a false alarm.\n"
    );
    head(out, &["shape", "healthy runs", "false alarms", "rules"]);
    let mut shapes: Vec<Shape> = rs.iter().filter(|r| r.healthy).map(|r| r.shape).collect();
    shapes.sort();
    shapes.dedup();
    for s in shapes {
        let runs: Vec<&RunRecord> = rs.iter().filter(|r| r.healthy && r.shape == s).collect();
        let (n, list) = false_alarms(runs.iter().copied());
        row(
            out,
            &[s.to_string(), runs.len().to_string(), n.to_string(), list],
        );
    }
    let (n, list) = false_alarms(rs);
    row(
        out,
        &[
            "**all**".into(),
            rs.iter().filter(|r| r.healthy).count().to_string(),
            n.to_string(),
            list,
        ],
    );
    out.push('\n');
}

fn families(out: &mut String, rs: &[RunRecord], groups: &[&str]) {
    let _ = writeln!(
        out,
        "### Per family\n\nFaults: detected/labels, then false positives (+n) of any rule; \
         healthy traps: false alarms.\n"
    );
    let mut cols = vec!["family", "kind"];
    cols.extend(groups);
    head(out, &cols);
    for f in Family::ALL {
        let of: Vec<&RunRecord> = rs.iter().filter(|r| r.family == f).collect();
        if of.is_empty() {
            continue;
        }
        let mut cells = vec![
            f.name().to_string(),
            if f.healthy() { "trap" } else { "fault" }.to_string(),
        ];
        for g in groups {
            let runs: Vec<&RunRecord> = of
                .iter()
                .copied()
                .filter(|r| r.shape.group() == *g)
                .collect();
            let t = tally(runs.iter().copied(), None);
            cells.push(match (runs.is_empty(), f.healthy()) {
                (true, _) => "·".into(),
                (false, true) => t.fp.to_string(),
                (false, false) => format!("{}/{} +{}", t.tp, t.tp + t.fn_, t.fp),
            });
        }
        row(out, &cells);
    }
    out.push('\n');
}

fn hangs(out: &mut String, rs: &[RunRecord]) {
    if !rs.iter().any(|r| HANGS.contains(&r.family)) {
        return;
    }
    let _ = writeln!(
        out,
        "### Training hangs: minutes from the hang to `training_hang`\n\nmedian (max) delay, \
         detected/labels: per GPU label, and per incident (a hang case in one shape: the job's \
         hang, found when its first GPU alerts). `zero_hang` mixes the three forms host-side \
         hangs take (the whole job at 0 %, one rank at 0 % while the others spin in a \
         collective, a single-GPU job).\n"
    );
    head(
        out,
        &[
            "hang",
            "GPUs, all shapes",
            "GPUs, nvml + full",
            "incidents, all shapes",
            "incidents, nvml + full",
        ],
    );
    let cases: [(&str, &[Family]); 3] = [
        ("nccl_hang", &HANGS[..1]),
        ("zero_hang", &HANGS[1..]),
        ("both", &HANGS),
    ];
    for (name, fams) in cases {
        let fmt = |(d, n): (Vec<f64>, usize)| {
            format!(
                "{} ({}) · {}/{n}",
                minutes(median(&d)),
                minutes(d.iter().copied().reduce(f64::max)),
                d.len()
            )
        };
        row(
            out,
            &[
                name.into(),
                fmt(hang_delays(rs, fams)),
                fmt(hang_delays(rs.iter().filter(|r| rich_shape(r)), fams)),
                fmt(hang_incidents(rs, fams)),
                fmt(hang_incidents(rs.iter().filter(|r| rich_shape(r)), fams)),
            ],
        );
    }
    out.push('\n');
}

fn leaks(out: &mut String, rs: &[RunRecord]) {
    let leads = leak_leads(rs);
    if leads.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### Leaks: lead time (minutes from `gpu_memory_leak` to the GPU being full)\n\n\
         \"fills in\" is the shortest time the GPU took to fill from the leak's start: no alert \
         can lead by more. \"≥ 30 min\" counts the detections with a lead of at least 30 \
         minutes among those whose GPU took more than 45 minutes to fill.\n"
    );
    head(
        out,
        &[
            "rate MiB/min",
            "labels",
            "detected",
            "fills in (min)",
            "min lead",
            "median lead",
            "≥ 30 min",
        ],
    );
    for l in leads {
        let slow: Vec<(f64, f64)> = l
            .leads
            .iter()
            .zip(&l.fills)
            .filter(|(_, f)| **f > 45.0 * 60.0)
            .map(|(a, b)| (*a, *b))
            .collect();
        let early = slow.iter().filter(|(lead, _)| *lead >= 30.0 * 60.0).count();
        row(
            out,
            &[
                l.rate.to_string(),
                l.labels.to_string(),
                l.leads.len().to_string(),
                minutes(l.fills.iter().copied().reduce(f64::min)),
                minutes(l.leads.iter().copied().reduce(f64::min)),
                minutes(median(&l.leads)),
                format!("{early}/{}", slow.len()),
            ],
        );
    }
    out.push('\n');
}

fn problems(out: &mut String, rs: &[RunRecord]) {
    let failed: Vec<&RunRecord> = rs.iter().filter(|r| r.error.is_some()).collect();
    let warned = rs.iter().filter(|r| !r.warnings.is_empty()).count();
    let dropped: Vec<String> = rs
        .iter()
        .filter_map(|r| r.samples.filter(|s| s.times < r.ticks).map(|s| (r, s)))
        .map(|(r, s)| format!("{} ({} of {})", r.case, s.times, r.ticks))
        .collect();
    let gaps: Vec<String> = rs
        .iter()
        .filter_map(|r| r.samples.filter(|s| s.missed > 0).map(|s| (r, s)))
        .map(|(r, s)| {
            format!(
                "{} ({:.1} % of rows)",
                r.case,
                100.0 * s.missed as f64 / s.rows.max(1) as f64
            )
        })
        .collect();
    let list = |v: &[String]| {
        if v.is_empty() {
            String::new()
        } else {
            format!(": {}", v.join(", "))
        }
    };
    let _ = writeln!(
        out,
        "### Runs
"
    );
    let _ = writeln!(
        out,
        "{} runs failed, {warned} printed warnings (see the JSON records). {} nvml runs stored \
         fewer sample times than the case has ticks{}. {} nvml runs have samples the daemon \
         marked `deadline_missed` (gaps: no metrics, so rules see no data){}.",
        failed.len(),
        dropped.len(),
        list(&dropped),
        gaps.len(),
        list(&gaps)
    );
    for r in failed {
        let _ = writeln!(
            out,
            "- {} {}: {}",
            r.case,
            r.shape_name,
            r.error.as_deref().unwrap_or_default()
        );
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_mark_undefined_figures() {
        assert_eq!(cell(&Tally::default()), "·");
        let t = Tally {
            tp: 0,
            fn_: 2,
            fp: 0,
            repeats: 0,
            delays_s: vec![],
        };
        assert_eq!(cell(&t), "0.00/– · 0/2/0");
        let t = Tally {
            tp: 1,
            fn_: 0,
            fp: 1,
            repeats: 0,
            delays_s: vec![90.0],
        };
        assert_eq!(cell(&t), "1.00/0.50 · 1/0/1 · 1.5/1.5");
    }
}
