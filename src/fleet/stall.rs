//! Whether one GPU's training is stalled, and since when its own activity says so: the
//! judgement behind `gpuwatch_gpu_stall_start_timestamp_seconds`, made with the window
//! functions of the rule language (`training_hang`'s own terms) over the step series and the
//! incident analysis's stop time ([`crate::analysis::incident::stopped_at`]) over the GPU's
//! 1-s samples.
//!
//! Invariants: a stall needs a step that is still reported, whose last change was progress
//! and that has not advanced for longer than the job's normal pauses; a GPU that held no work
//! in the last 30 minutes, released its memory, or shows neither hang signature is not
//! stalled; without power readings the start is unknown and nothing is claimed.

use crate::analysis::incident::{busy_power, working};
use crate::model::TsMs;
use crate::rules::ast::WindowFn;
use crate::rules::eval::series::Series;
use crate::rules::eval::window::window;
use crate::store::analysis::GpuPoint;

const MIN: i64 = 60_000;

/// How the GPU looks while its step is stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    /// Utilisation fell to about 0 %: nothing runs (a host-side hang, a dead rank).
    Idle,
    /// Utilisation pinned near 100 % at low power: kernels spin in a collective.
    Spinning,
}

impl Signature {
    pub fn as_str(self) -> &'static str {
        match self {
            Signature::Idle => "idle",
            Signature::Spinning => "spinning",
        }
    }
}

/// What the step series says at `now`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// When the step last changed (advanced, or stepped back at a restart).
    pub last_progress_ms: TsMs,
    /// Steps per second over the last 5 minutes (`None`: fewer than two points, or a restart).
    pub per_second: Option<f64>,
    /// The step is reported, its last change was progress, and it has not moved for longer
    /// than `stall_after_ms`.
    pub stalled: bool,
    /// How long the step must stand still to be a stall here: the longest of 1 minute, 4 of
    /// the job's step intervals and 1.5 × its longest normal pause in the last 6 hours.
    pub stall_after_ms: i64,
}

/// The step series' judgement at `now` (`None`: no point, or the newest is older than 5
/// minutes — the series is not reported any more).
pub fn step(s: &Series, now: TsMs) -> Option<Step> {
    let w = |f, win_ms| window(s, f, now, win_ms);
    let (last_ts, _) = s.last()?;
    if now - last_ts > 5 * MIN {
        return None;
    }
    let unchanged_ms = (w(WindowFn::UnchangedFor, 6 * 60 * MIN)? * 1000.0) as i64;
    let last_progress_ms = now - unchanged_ms;
    // Reported: a point newer than 3 of the series' own intervals (at least 90 s).
    let span15 = w(WindowFn::Span, 15 * MIN).unwrap_or(0.0);
    let count15 = w(WindowFn::Count, 15 * MIN).unwrap_or(0.0);
    let fresh_s = (3.0 * span15 / (count15 - 1.0).max(1.0)).max(90.0);
    let reported = w(WindowFn::Age, 15 * MIN).is_some_and(|a| a <= fresh_s);
    let progressed = w(WindowFn::LastChange, 6 * 60 * MIN).is_some_and(|d| d > 0.0);
    let span30 = w(WindowFn::Span, 30 * MIN).unwrap_or(0.0);
    let changes30 = w(WindowFn::Changes, 30 * MIN).unwrap_or(0.0);
    let interval_ms = 1000.0 * span30 / changes30.max(1.0);
    let pause_ms = 1000.0 * w(WindowFn::MaxUnchangedFor, 6 * 60 * MIN).unwrap_or(0.0);
    let stall_after_ms = (MIN as f64).max(4.0 * interval_ms).max(1.5 * pause_ms) as i64;
    let per_second = w(WindowFn::Rate, 5 * MIN).filter(|r| r.is_finite() && *r >= 0.0);
    Some(Step {
        last_progress_ms,
        per_second,
        stalled: reported && progressed && unchanged_ms > stall_after_ms,
        stall_after_ms,
    })
}

/// The GPU's signature now, from its samples of the last minute (`recent`), given its busy
/// power before the stall: `None` when it is neither idle nor spinning, or released its
/// memory. `mem_floor_mib`: memory a GPU without work holds (a free GPU's reservation); it
/// must hold more than 1 GiB above.
pub fn signature(recent: &[&GpuPoint], busy_w: f64, mem_floor_mib: f64) -> Option<Signature> {
    let utils: Vec<f64> = recent.iter().filter_map(|p| p.util).collect();
    if utils.is_empty() {
        return None;
    }
    let holds = recent
        .iter()
        .filter_map(|p| p.mem_used_mib)
        .fold(f64::NAN, f64::min);
    if holds.is_nan() || holds <= mem_floor_mib + 1024.0 {
        return None;
    }
    let max_util = utils.iter().copied().fold(f64::MIN, f64::max);
    let min_util = utils.iter().copied().fold(f64::MAX, f64::min);
    if max_util < 10.0 {
        return Some(Signature::Idle);
    }
    if min_util <= 90.0 {
        return None;
    }
    let powers: Vec<f64> = recent.iter().filter_map(|p| p.power_w).collect();
    if powers.is_empty() {
        return None;
    }
    let avg = powers.iter().sum::<f64>() / powers.len() as f64;
    (avg < 0.5 * busy_w).then_some(Signature::Spinning)
}

/// The last minute's sampled points of `points` before `now`.
pub fn last_minute(points: &[GpuPoint], now: TsMs) -> Vec<&GpuPoint> {
    points
        .iter()
        .filter(|p| p.ts_ms > now - MIN && p.ts_ms <= now && p.status == 0)
        .collect()
}

/// The first sample after the last working one of `points` (`None`: none worked, or the
/// newest did).
pub fn after_last_working(points: &[GpuPoint], busy_w: f64) -> Option<Option<TsMs>> {
    let last = points.iter().rposition(|p| working(p, busy_w))?;
    Some(points.get(last + 1).map(|p| p.ts_ms))
}

/// A stall seen for the first time: from the GPU's samples of `[progress - 30 min, now]`, its
/// busy power before the step stopped, its signature now and when it entered the stall
/// (the incident analysis's stop time, with the busy level of before the stall). A GPU that
/// was not busy (over 50 %) in the last 30 minutes held no work to stall.
pub fn gpu_stall(
    points: &[GpuPoint],
    progress_ms: TsMs,
    now: TsMs,
    mem_floor_mib: f64,
) -> Option<(TsMs, Signature, f64)> {
    let busy = busy_power(points, progress_ms)?;
    let worked = points
        .iter()
        .filter(|p| p.ts_ms > now - 30 * MIN)
        .filter_map(|p| p.util)
        .any(|u| u > 50.0);
    if !worked {
        return None;
    }
    let sig = signature(&last_minute(points, now), busy, mem_floor_mib)?;
    let start = after_last_working(points, busy)??;
    Some((start, sig, busy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::eval::window::stats_for;

    fn steps(points: &[(TsMs, f64)]) -> Series {
        let stats = [
            WindowFn::UnchangedFor,
            WindowFn::Changes,
            WindowFn::MaxUnchangedFor,
            WindowFn::Rate,
        ]
        .into_iter()
        .fold(crate::rules::eval::series::Stats::NONE, |s, f| {
            s.union(stats_for(f))
        });
        let mut s = Series::new(7 * 60 * MIN, stats);
        for (t, v) in points {
            s.push(*t, *v);
        }
        s
    }

    /// A step every 10 s, scraped every 10 s, from 0 to `until` (then the same value).
    fn job(until: TsMs, to: TsMs) -> Vec<(TsMs, f64)> {
        (0..=to / 10_000)
            .map(|k| {
                let t = k * 10_000;
                (t, (t.min(until) / 10_000) as f64)
            })
            .collect()
    }

    #[test]
    fn a_stall_needs_the_step_to_stand_longer_than_a_minute_and_four_intervals() {
        let t0 = 20 * MIN;
        let s = steps(&job(t0, t0 + 50_000));
        let j = step(&s, t0 + 50_000).expect("reported");
        assert!(!j.stalled, "{j:?}");
        assert_eq!(j.last_progress_ms, t0);
        let s = steps(&job(t0, t0 + 70_000));
        let j = step(&s, t0 + 70_000).expect("reported");
        assert!(j.stalled, "{j:?}");
        assert_eq!(j.stall_after_ms, MIN);
        assert!(j.per_second.is_some_and(|r| r < 0.1), "{j:?}");
    }

    #[test]
    fn a_learned_checkpoint_is_not_a_stall() {
        // A 3-minute checkpoint at 10 min, then steps again; at 30 min another pause.
        let mut pts: Vec<(TsMs, f64)> = Vec::new();
        let mut v = 0.0;
        for k in 0..=(34 * 6) {
            let t = k * 10_000;
            let pausing = (10 * MIN..13 * MIN).contains(&t) || t >= 30 * MIN;
            if !pausing {
                v += 1.0;
            }
            pts.push((t, v));
        }
        let s = steps(&pts);
        let j = step(&s, 34 * MIN).expect("reported");
        assert!(j.stall_after_ms >= 270_000, "1.5 x 3 min: {j:?}");
        assert!(!j.stalled, "4 min is within the job's own pauses: {j:?}");
    }

    #[test]
    fn a_series_no_longer_reported_is_not_a_stall() {
        let t0 = 20 * MIN;
        let s = steps(&job(t0, t0)); // the job's metrics ended with it
        let j = step(&s, t0 + 3 * MIN).expect("still within 5 min");
        assert!(!j.stalled, "{j:?}");
        assert!(step(&s, t0 + 6 * MIN).is_none());
    }

    fn p(ts_ms: TsMs, util: f64, power: f64, mem: f64) -> GpuPoint {
        GpuPoint {
            ts_ms,
            util: Some(util),
            power_w: Some(power),
            mem_used_mib: Some(mem),
            ..Default::default()
        }
    }

    #[test]
    fn signatures_and_the_start_from_the_gpus_samples() {
        let busy: Vec<GpuPoint> = (0..600)
            .map(|s| p(s * 1000, 97.0, 650.0, 70_000.0))
            .collect();
        // Idle from 600 s.
        let mut idle = busy.clone();
        idle.extend((600..700).map(|s| p(s * 1000, 0.0, 90.0, 70_000.0)));
        let stall =
            |pts: &[GpuPoint], now| gpu_stall(pts, 590_000, now, 500.0).map(|(t, s, _)| (t, s));
        assert_eq!(stall(&idle, 699_000), Some((600_000, Signature::Idle)));
        // Spinning from 640 s: 100 % at 120 W.
        let mut spin = busy.clone();
        spin.extend((600..640).map(|s| p(s * 1000, 97.0, 650.0, 70_000.0)));
        spin.extend((640..720).map(|s| p(s * 1000, 100.0, 120.0, 70_000.0)));
        assert_eq!(stall(&spin, 719_000), Some((640_000, Signature::Spinning)));
        // Still working: no stall; memory released (the job ended): no stall.
        assert_eq!(stall(&busy, 599_000), None);
        let mut released = busy.clone();
        released.extend((600..700).map(|s| p(s * 1000, 0.0, 60.0, 400.0)));
        assert_eq!(stall(&released, 699_000), None);
        // Without power readings the start is unknown: nothing claimed.
        let blind: Vec<GpuPoint> = idle
            .iter()
            .map(|x| GpuPoint {
                power_w: None,
                ..*x
            })
            .collect();
        assert_eq!(stall(&blind, 699_000), None);
    }
}
