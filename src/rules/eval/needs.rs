//! What history each metric needs: for every metric some rule reads, the longest window any
//! rule reads it over (plus room for staleness) and the window statistics computed on it.
//! A series keeps that much history and those prefix arrays, nothing more.
//!
//! Invariants: a metric's history is decided by its own windows, not by the longest window
//! of the expression it appears in (`max(util_gpu[30m])` next to `training_step[6h]` keeps
//! 30 minutes of utilisation, not six hours); a metric read only as its current value keeps
//! the staleness slack; the window functions a series answers from its change and pause
//! summaries (`unchanged_for`, `max_unchanged_for`, `last_change`) lengthen only the
//! summaries, not the points kept; the statistics decide cost, never a result (see
//! [`Stats`]).

use std::collections::HashMap;

use crate::rules::ast::{Expr, Metric, WindowFn};

use super::series::Stats;
use super::window::stats_for;

/// One metric's history: how far back and which statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Need {
    /// How long points are kept.
    pub keep_ms: i64,
    /// How long the change and pause summaries are kept (at least `keep_ms`).
    pub summary_ms: i64,
    pub stats: Stats,
}

impl Need {
    /// The longer of both histories.
    pub fn longest(&self) -> i64 {
        self.keep_ms.max(self.summary_ms)
    }

    pub fn union(self, o: Need) -> Need {
        Need {
            keep_ms: self.keep_ms.max(o.keep_ms),
            summary_ms: self.summary_ms.max(o.summary_ms),
            stats: self.stats.union(o.stats),
        }
    }
}

/// Every metric some rule reads, with its history.
pub type Needs = HashMap<Metric, Need>;

/// Adds what `e` reads to `needs`: each window plus `slack_ms`. With `gpu_fallback`, what
/// the expression reads of a process's memory is also read of the whole GPU's (a rule that
/// falls back to the GPU when no process is observed).
pub fn add(needs: &mut Needs, e: &Expr, slack_ms: i64, gpu_fallback: bool) {
    let mut reads = Vec::new();
    walk(e, &mut reads);
    for (m, window_ms, stats, summary) in reads {
        let mut note = |m: Metric| {
            let n = needs.entry(m).or_default();
            let points = if summary { 0 } else { window_ms };
            n.keep_ms = n.keep_ms.max(points + slack_ms);
            n.summary_ms = n.summary_ms.max(window_ms + slack_ms).max(n.keep_ms);
            n.stats = n.stats.union(stats);
        };
        note(m);
        if gpu_fallback && m == Metric::ProcessMem {
            note(Metric::Sample(crate::metric::MEM_USED));
        }
        if matches!(m, Metric::Pause(_) | Metric::PauseLen(_)) {
            pause_inputs(needs);
        }
    }
}

/// How long utilisation and power points stay for the pause tracker to read them after the
/// training step that dates them arrives (scrape and fetch lag).
pub const PAUSE_INPUT_KEEP_MS: i64 = 10 * 60_000;

/// What the pause tracker (`world::pauses`) reads to judge a pause: the training step's
/// newest change, and utilisation and power for a while.
fn pause_inputs(needs: &mut Needs) {
    for m in [Metric::sample("util_gpu"), Metric::sample("power")] {
        let n = needs.entry(m).or_default();
        n.keep_ms = n.keep_ms.max(PAUSE_INPUT_KEEP_MS);
        n.summary_ms = n.summary_ms.max(n.keep_ms);
    }
    let n = needs.entry(Metric::TrainingStep).or_default();
    n.keep_ms = n.keep_ms.max(60_000);
    n.summary_ms = n.summary_ms.max(n.keep_ms);
}

/// Whether `f` over a window ending at the newest point is answered from the series'
/// change and pause summaries (and its newest point), whatever the window's length.
fn from_summary(f: WindowFn) -> bool {
    matches!(
        f,
        WindowFn::UnchangedFor | WindowFn::MaxUnchangedFor | WindowFn::LastChange
    )
}

/// (metric, window in ms, statistics, answered from the summaries) for every metric read
/// in `e`.
fn walk(e: &Expr, out: &mut Vec<(Metric, i64, Stats, bool)>) {
    let ms = |d: &std::time::Duration| d.as_millis() as i64;
    match e {
        Expr::Number(_) | Expr::Seconds(_) | Expr::Static(_) => {}
        Expr::Current(m) => out.push((*m, 0, Stats::NONE, false)),
        Expr::Window {
            func,
            metric,
            window,
        } => out.push((*metric, ms(window), stats_for(*func), from_summary(*func))),
        Expr::Quantile { metric, window, .. } => {
            out.push((*metric, ms(window), Stats::NONE, false));
        }
        Expr::PredictLinear { metric, window, .. } => {
            out.push((*metric, ms(window), Stats::FIT, false));
        }
        Expr::TimeTo {
            metric,
            window,
            threshold,
        } => {
            out.push((*metric, ms(window), Stats::FIT, false));
            walk(threshold, out);
        }
        Expr::Trend { metric, window, .. } => {
            out.push((*metric, ms(window), Stats::SUM, false));
        }
        Expr::Peer { expr, .. } | Expr::Unary { expr, .. } => walk(expr, out),
        Expr::Scalar { args, .. } => args.iter().for_each(|a| walk(a, out)),
        Expr::Binary { lhs, rhs, .. } => {
            walk(lhs, out);
            walk(rhs, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::parse::parse_expr;
    use crate::rules::rule::Scope;

    fn needs(src: &str, fallback: bool) -> Needs {
        let e = parse_expr(src, Scope::Process).expect("parses");
        let mut n = Needs::new();
        add(&mut n, &e, 1000, fallback);
        n
    }

    #[test]
    fn each_metric_keeps_its_own_window() {
        let n = needs(
            "max(util_gpu[30m]) > 50 and unchanged_for(training_step[6h]) > 60 and temp > 80",
            false,
        );
        assert_eq!(n[&Metric::sample("util_gpu")].keep_ms, 1_800_000 + 1000);
        assert_eq!(n[&Metric::sample("util_gpu")].stats, Stats::MAX);
        let step = n[&Metric::TrainingStep];
        assert_eq!(step.keep_ms, 1000, "unchanged_for reads the change summary");
        assert_eq!(step.summary_ms, 21_600_000 + 1000);
        assert_eq!(
            step.stats,
            Stats::NONE,
            "the newest change needs no per-point array"
        );
        assert_eq!(n[&Metric::sample("temp")].keep_ms, 1000);
        assert_eq!(n[&Metric::sample("temp")].stats, Stats::NONE);
    }

    #[test]
    fn pause_and_step_functions_lengthen_only_the_summaries() {
        let n = needs(
            "max_unchanged_for(training_step[6h]) > 60 and last_change(training_step[6h]) > 0 \
             and changes(training_step[30m]) > 1 and unchanged_for(training_step[1h]) > 60",
            false,
        );
        let step = n[&Metric::TrainingStep];
        assert_eq!(step.keep_ms, 1_800_000 + 1000, "changes reads the points");
        assert_eq!(step.summary_ms, 21_600_000 + 1000);
        assert_eq!(step.longest(), 21_600_000 + 1000);
    }

    #[test]
    fn statistics_are_unioned_and_fallback_reads_the_gpu() {
        let n = needs(
            "theil_sen(process_mem[10m], 1m) > 1 and slope(process_mem[5m]) > 0 \
             and time_to(mem_used[20m], memory_total) < 3600",
            true,
        );
        let p = n[&Metric::ProcessMem];
        assert_eq!(p.keep_ms, 600_000 + 1000);
        assert_eq!(p.stats, Stats::SUM.union(Stats::FIT));
        let m = n[&Metric::sample("mem_used")];
        assert_eq!(m.keep_ms, 1_200_000 + 1000, "its own 20 m window is longer");
        assert_eq!(m.stats, Stats::FIT);
    }
}
