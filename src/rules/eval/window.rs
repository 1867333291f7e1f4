//! Window functions over one [`Series`] at one evaluation time.
//!
//! Invariants: an empty window is "no data" (`None`) for every function except `count`,
//! `sum` and `changes` (which are 0); trend statistics use only complete `step` buckets and
//! are cached until a new bucket completes, so a replay pays for them once a minute, not once
//! a second.

use std::collections::HashMap;

use crate::rules::ast::{TrendFn, WindowFn};

use super::series::{Series, Stats};
use super::stats;

/// Cache of trend results: (window, step, func) → (last complete bucket end, value).
#[derive(Debug, Default, Clone)]
pub struct TrendCache(HashMap<(i64, i64, u8), (i64, Option<f64>)>);

pub fn window(s: &Series, f: WindowFn, to: i64, w_ms: i64) -> Option<f64> {
    let (i, j) = s.range(to, w_ms);
    let n = j - i;
    match f {
        WindowFn::Count => return Some(n as f64),
        WindowFn::Sum => return Some(s.sum(i, j)),
        WindowFn::Changes => return Some(f64::from(s.changes(i, j))),
        _ if n == 0 => return None,
        _ => {}
    }
    Some(match f {
        WindowFn::Last => s.value(j - 1),
        WindowFn::First => s.value(i),
        WindowFn::Avg => s.sum(i, j) / n as f64,
        WindowFn::Min => s.min(i, j)?,
        WindowFn::Max => s.max(i, j)?,
        WindowFn::Stddev => {
            let x = s.sums(i, j, to);
            let m = x.sy / x.n;
            (x.syy / x.n - m * m).max(0.0).sqrt()
        }
        WindowFn::Delta => s.value(j - 1) - s.value(i),
        WindowFn::Rate => {
            let dt = (s.time(j - 1) - s.time(i)) as f64 / 1000.0;
            if dt <= 0.0 {
                return None;
            }
            s.increase(i, j) / dt
        }
        WindowFn::Increase => s.increase(i, j),
        WindowFn::UnchangedFor => {
            let since = s.last_change(j)?.max(to - w_ms);
            (to - since) as f64 / 1000.0
        }
        WindowFn::Age => (to - s.time(j - 1)) as f64 / 1000.0,
        WindowFn::Span => (s.time(j - 1) - s.time(i)) as f64 / 1000.0,
        WindowFn::MaxUnchangedFor => s.longest_pause(i, j, to - w_ms) / 1000.0,
        WindowFn::LastChange => s.last_step(i, j, to - w_ms)?.1,
        WindowFn::Slope => stats::fit(&s.sums(i, j, to))?.slope,
        WindowFn::R2 => stats::fit(&s.sums(i, j, to))?.r2,
        WindowFn::SlopePValue => stats::fit(&s.sums(i, j, to))?.p_value?,
        WindowFn::Count | WindowFn::Sum | WindowFn::Changes => return None,
    })
}

/// The prefix arrays that make `f` cheap on a series (without them it scans the window).
pub fn stats_for(f: WindowFn) -> Stats {
    match f {
        WindowFn::Last
        | WindowFn::First
        | WindowFn::Count
        | WindowFn::Delta
        | WindowFn::Age
        | WindowFn::Span => Stats::NONE,
        WindowFn::Avg | WindowFn::Sum => Stats::SUM,
        WindowFn::Min => Stats::MIN,
        WindowFn::Max => Stats::MAX,
        WindowFn::Stddev => Stats::SUM.union(Stats::SQUARES),
        WindowFn::Rate | WindowFn::Increase => Stats::INCREASE,
        WindowFn::Changes => Stats::CHANGES,
        // The newest change is always tracked (one summary, no per-point array).
        WindowFn::UnchangedFor => Stats::NONE,
        WindowFn::MaxUnchangedFor => Stats::PAUSES,
        WindowFn::LastChange => Stats::NONE,
        WindowFn::Slope | WindowFn::R2 | WindowFn::SlopePValue => Stats::FIT,
    }
}

pub fn quantile(s: &Series, q: f64, to: i64, w_ms: i64) -> Option<f64> {
    let (i, j) = s.range(to, w_ms);
    stats::quantile(&mut s.values(i, j), q)
}

/// The least-squares fit's value `horizon_ms` after `to`.
pub fn predict_linear(s: &Series, to: i64, w_ms: i64, horizon_ms: i64) -> Option<f64> {
    let (i, j) = s.range(to, w_ms);
    let f = stats::fit(&s.sums(i, j, to))?;
    Some(f.y_now + f.slope * horizon_ms as f64 / 1000.0)
}

/// Seconds until the fitted line crosses `threshold` going forward in time: 0 when the fit is
/// exactly at it, `None` when the line is flat or moves away from it (including when it has
/// already crossed it: combine with a level test, e.g. `mem_used_ratio > 0.98 or ...`).
pub fn time_to(s: &Series, to: i64, w_ms: i64, threshold: f64) -> Option<f64> {
    let (i, j) = s.range(to, w_ms);
    let f = stats::fit(&s.sums(i, j, to))?;
    let gap = threshold - f.y_now;
    if gap == 0.0 {
        return Some(0.0);
    }
    if f.slope == 0.0 || gap.signum() != f.slope.signum() {
        return None;
    }
    Some(gap / f.slope)
}

/// Means of the complete `step` buckets (aligned to multiples of `step`) inside the window:
/// (bucket mid-times in seconds, means).
fn buckets(s: &Series, to: i64, w_ms: i64, step_ms: i64) -> (Vec<f64>, Vec<f64>) {
    let (mut t, mut y) = (Vec::new(), Vec::new());
    let last_end = to.div_euclid(step_ms) * step_ms;
    let mut start = (to - w_ms).div_euclid(step_ms) * step_ms;
    if start < to - w_ms {
        start += step_ms;
    }
    while start + step_ms <= last_end {
        let end = start + step_ms;
        // Points in [start, end): the window (end - step_ms, end] shifted by one ms.
        let (i, j) = s.range(end - 1, step_ms);
        if j > i {
            t.push((start + step_ms / 2) as f64 / 1000.0);
            y.push(s.sum(i, j) / (j - i) as f64);
        }
        start = end;
    }
    (t, y)
}

pub fn trend(
    s: &Series,
    cache: &mut TrendCache,
    f: TrendFn,
    to: i64,
    w_ms: i64,
    step_ms: i64,
) -> Option<f64> {
    let step_ms = step_ms.max(1);
    let last_end = to.div_euclid(step_ms) * step_ms;
    let key = (w_ms, step_ms, f as u8);
    if let Some(&(end, v)) = cache.0.get(&key)
        && end == last_end
    {
        return v;
    }
    let (t, y) = buckets(s, to, w_ms, step_ms);
    let v = match f {
        TrendFn::MannKendallP => stats::mann_kendall_p(&y),
        TrendFn::KendallTau => stats::kendall_tau(&y),
        TrendFn::TheilSen => stats::theil_sen(&t, &y),
        TrendFn::Drawdown => stats::drawdown(&y),
    };
    cache.0.insert(key, (last_end, v));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: i64, per_s: f64) -> Series {
        let mut s = Series::new(86_400_000, Stats::ALL);
        for k in 0..n {
            s.push(k * 1000, 100.0 + per_s * k as f64);
        }
        s
    }

    /// Every window function answers the same whether the series keeps its prefix arrays
    /// or scans: on noisy, stepping, resetting data, windows ending at the newest point and
    /// before it, through several prune rebuilds.
    #[test]
    fn kept_and_scanned_statistics_agree() {
        let fns = [
            WindowFn::Last,
            WindowFn::First,
            WindowFn::Avg,
            WindowFn::Min,
            WindowFn::Max,
            WindowFn::Sum,
            WindowFn::Count,
            WindowFn::Stddev,
            WindowFn::Delta,
            WindowFn::Rate,
            WindowFn::Increase,
            WindowFn::Changes,
            WindowFn::UnchangedFor,
            WindowFn::Age,
            WindowFn::Span,
            WindowFn::MaxUnchangedFor,
            WindowFn::LastChange,
            WindowFn::Slope,
            WindowFn::R2,
            WindowFn::SlopePValue,
        ];
        let mut all = Series::new(400_000, Stats::ALL);
        let mut none = Series::new(400_000, Stats::NONE);
        let mut single: Vec<Series> = fns
            .iter()
            .map(|&f| Series::new(400_000, stats_for(f)))
            .collect();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut t = 0i64;
        let mut step = 0.0;
        for k in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Irregular spacing (0.5 to 2.5 s), pauses, resets and noise.
            t += 500 + (x % 2000) as i64;
            if x.is_multiple_of(7) {
                step += 1.0;
            }
            if k % 900 == 899 {
                step = 0.0;
            }
            let v = if k % 3 == 0 {
                step
            } else {
                step + (x % 100) as f64 / 10.0
            };
            for s in [&mut all, &mut none].into_iter().chain(single.iter_mut()) {
                s.push(t, v);
            }
            if k % 97 != 0 {
                continue;
            }
            for (fi, &f) in fns.iter().enumerate() {
                for (to, w) in [(t, 60_000), (t, 300_000), (t - 20_000, 120_000), (t, 1_000)] {
                    let want = window(&all, f, to, w);
                    for got in [window(&none, f, to, w), window(&single[fi], f, to, w)] {
                        // Prefix sums round differently from a direct sum (the prefix
                        // stddev of a flat window is ~1e-5, not 0): equal up to that.
                        let same = match (want, got) {
                            (Some(a), Some(b)) => (a - b).abs() <= 1e-4 * a.abs().max(1.0),
                            (a, b) => a == b,
                        };
                        assert!(same, "{f:?} at {to} over {w}: {want:?} vs {got:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn basic_windows() {
        let s = ramp(600, 1.0);
        let to = 599_000;
        assert_eq!(window(&s, WindowFn::Count, to, 60_000), Some(60.0));
        assert_eq!(window(&s, WindowFn::Last, to, 60_000), Some(699.0));
        assert_eq!(window(&s, WindowFn::First, to, 60_000), Some(640.0));
        assert_eq!(window(&s, WindowFn::Min, to, 60_000), Some(640.0));
        assert_eq!(window(&s, WindowFn::Max, to, 60_000), Some(699.0));
        assert_eq!(window(&s, WindowFn::Delta, to, 60_000), Some(59.0));
        assert_eq!(window(&s, WindowFn::Avg, to, 60_000), Some(669.5));
        assert!((window(&s, WindowFn::Rate, to, 60_000).expect("rate") - 1.0).abs() < 1e-9);
        assert_eq!(window(&s, WindowFn::Increase, to, 60_000), Some(59.0));
        assert!((window(&s, WindowFn::Slope, to, 60_000).expect("slope") - 1.0).abs() < 1e-9);
        assert_eq!(window(&s, WindowFn::Changes, to, 60_000), Some(59.0));
        assert_eq!(window(&s, WindowFn::UnchangedFor, to, 60_000), Some(0.0));
        assert_eq!(
            window(&s, WindowFn::Avg, 10_000_000, 60_000),
            None,
            "empty window is no data"
        );
        assert_eq!(window(&s, WindowFn::Count, 10_000_000, 60_000), Some(0.0));
    }

    /// A step counter: +1 every 2 s, a 60-s checkpoint pause from 100 s, a restart at 300 s
    /// that rewinds 40 steps, a 30-s initialisation, then steps again.
    fn job() -> Series {
        let mut s = Series::new(86_400_000, Stats::ALL);
        let mut step = 0.0;
        for k in 0..400i64 {
            let t = k * 1000;
            let pausing = (100..160).contains(&k) || (300..330).contains(&k);
            if k == 300 {
                step -= 40.0;
            } else if !pausing && k % 2 == 0 {
                step += 1.0;
            }
            s.push(t, step);
        }
        s
    }

    #[test]
    fn longest_pause_learns_checkpoints_not_restarts() {
        let s = job();
        let w = |to: i64, win: i64| window(&s, WindowFn::MaxUnchangedFor, to, win);
        // The checkpoint: the last step before it at 98 s, the next at 160 s.
        assert_eq!(w(399_000, 400_000), Some(62.0));
        // Neither the rewind nor the 30 s until the first step after it counts.
        assert_eq!(w(399_000, 200_000), Some(2.0));
        assert_eq!(w(99_000, 100_000), Some(2.0));
        // The same through the scan of a window that does not end at the newest point.
        assert_eq!(w(398_000, 399_000), Some(62.0));
        assert_eq!(w(398_000, 200_000), Some(2.0));
        assert_eq!(w(1_000, 2_000), Some(0.0));
    }

    /// A series that keeps 2 minutes of points and 2 hours of change and pause summaries
    /// answers `unchanged_for`, `max_unchanged_for` and `last_change` over windows up to 2
    /// hours exactly as one that keeps every point: a training job stepping every 1–3 s with
    /// checkpoint pauses, a hang and a restart, through many prunes.
    #[test]
    fn summaries_answer_long_windows_without_the_points() {
        let mut full = Series::new(10_000_000, Stats::ALL);
        let mut short = Series::with_summary(120_000, 7_200_000, Stats::ALL);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let (mut t, mut step) = (0i64, 0.0);
        for k in 0..6000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += 1000 + (x % 2000) as i64;
            let pause = k % 700 > 640 || (2500..2620).contains(&k);
            if k == 4000 {
                step = 3.0;
            } else if !pause {
                step += 1.0;
            }
            full.push(t, step);
            short.push(t, step);
            if k % 50 != 0 {
                continue;
            }
            for w in [30_000, 300_000, 1_800_000, 3_600_000, 7_000_000] {
                for f in [
                    WindowFn::UnchangedFor,
                    WindowFn::MaxUnchangedFor,
                    WindowFn::LastChange,
                ] {
                    assert_eq!(
                        window(&short, f, t, w),
                        window(&full, f, t, w),
                        "{f:?} over {w} ms at point {k}"
                    );
                }
            }
        }
        assert!(
            short.len() < 200,
            "2 minutes of points kept: {}",
            short.len()
        );
        assert!(short.heap_bytes() * 10 < full.heap_bytes());
    }

    #[test]
    fn last_change_is_signed() {
        let s = job();
        let w = |to: i64, win: i64| window(&s, WindowFn::LastChange, to, win);
        assert_eq!(w(299_000, 60_000), Some(1.0));
        assert_eq!(w(320_000, 60_000), Some(-40.0), "the restart went back");
        assert_eq!(w(320_000, 15_000), None, "no change inside the window");
        assert_eq!(w(399_000, 60_000), Some(1.0));
    }

    #[test]
    fn min_and_max_of_the_newest_window_match_a_scan() {
        let s = job();
        for win in [1_000, 5_000, 60_000, 250_000, 1_000_000] {
            for to in [399_000, 398_000] {
                let (i, j) = s.range(to, win);
                let vals = s.values(i, j);
                let scan = |f: fn(f64, f64) -> f64| vals.iter().copied().reduce(f);
                assert_eq!(window(&s, WindowFn::Max, to, win), scan(f64::max));
                assert_eq!(window(&s, WindowFn::Min, to, win), scan(f64::min));
            }
        }
    }

    #[test]
    fn drawdown_of_step_means() {
        let s = job();
        let mut cache = TrendCache::default();
        let d = trend(&s, &mut cache, TrendFn::Drawdown, 399_000, 400_000, 10_000);
        // The 10-s means peak just before the restart (step ~110) and fall by ~40.
        let d = d.expect("drawdown");
        assert!((35.0..=45.0).contains(&d), "{d}");
        let ramp = ramp(600, 1.0);
        let d = trend(
            &ramp,
            &mut TrendCache::default(),
            TrendFn::Drawdown,
            599_000,
            600_000,
            60_000,
        );
        assert_eq!(d, Some(0.0));
    }

    #[test]
    fn unchanged_for_a_stopped_counter() {
        let mut s = Series::new(86_400_000, Stats::ALL);
        for k in 0..100 {
            s.push(k * 1000, if k < 40 { k as f64 } else { 39.0 });
        }
        assert_eq!(
            window(&s, WindowFn::UnchangedFor, 99_000, 600_000),
            Some(60.0)
        );
        assert_eq!(
            window(&s, WindowFn::UnchangedFor, 99_000, 30_000),
            Some(30.0),
            "capped by the window"
        );
    }

    #[test]
    fn prediction_and_time_to() {
        let s = ramp(600, 2.0);
        let to = 599_000;
        let p = predict_linear(&s, to, 300_000, 100_000).expect("prediction");
        assert!((p - (100.0 + 2.0 * 699.0)).abs() < 1e-6, "{p}");
        let t = time_to(&s, to, 300_000, 2298.0).expect("time to");
        assert!((t - 500.0).abs() < 1e-6, "{t}");
        assert_eq!(
            time_to(&s, to, 300_000, 0.0),
            None,
            "already past: never crossed again"
        );
        let falling = ramp(600, -1.0);
        assert_eq!(
            time_to(&falling, to, 300_000, 10_000.0),
            None,
            "moving away"
        );
    }

    #[test]
    fn trend_on_minute_means_is_cached_per_bucket() {
        let s = ramp(3600, 0.5);
        let mut cache = TrendCache::default();
        let p = trend(
            &s,
            &mut cache,
            TrendFn::MannKendallP,
            3_599_000,
            1_800_000,
            60_000,
        )
        .expect("p");
        assert!(p < 1e-6, "{p}");
        let ts = trend(
            &s,
            &mut cache,
            TrendFn::TheilSen,
            3_599_000,
            1_800_000,
            60_000,
        )
        .expect("slope");
        assert!((ts - 0.5).abs() < 1e-9, "{ts}");
        assert_eq!(cache.0.len(), 2);
        let again = trend(
            &s,
            &mut cache,
            TrendFn::MannKendallP,
            3_599_500,
            1_800_000,
            60_000,
        );
        assert_eq!(again, Some(p), "same bucket: cached");
    }
}
