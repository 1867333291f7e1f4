//! Pause kinds: what a GPU did while its job's training step stood still, judged from the
//! GPU's own utilisation and power, so a rule can tell a job's checkpoints from a stalled host
//! by their signature, not only by their length. Feeds the `pause_flat`, `pause_bursty`,
//! `pause_busy` series (the pause going on now) and `pause_flat_s`, `pause_bursty_s`,
//! `pause_busy_s` (one point per ended pause: its length in seconds).
//!
//! Invariants:
//! - A pause runs from one change of the step to the next (as `unchanged_for` counts it);
//!   the samples of its first "grace" (one step interval of the job, 5–60 s: the last step's
//!   own work) are not judged.
//! - Only samples dated up to the step's newest point are judged: the step may have moved
//!   after it (training points arrive late), and a resumed job's kernels are not a burst.
//! - Judging is order-free over the pause's samples: busy when at least half ran kernels
//!   (≥ 50 %); else bursty when something still runs — a sample at ≥ 10 % (a burst), power
//!   moving more than the burst margin (5 % of the power limit, at least 5 W; 10 W when the
//!   limit is unknown), or utilisation averaging ≥ 0.5 % (a trickle of copy kernels: a
//!   checkpoint "at ~1 %"); else flat (nothing runs: 0 %, the odd 1 %) only with the
//!   evidence for it (≥ 8 samples over ≥ 90 s): a pause seen through sparse samples stays
//!   unjudged (all three flags 0), never flat by default.
//! - A pause that ended in a restart (the step went back) is not a pause of a running job:
//!   it is not recorded, as `max_unchanged_for` does not count it.

use crate::model::TsMs;
use crate::rules::ast::{Metric, PauseKind};

use super::{Gpu, World, push};

/// Below this a pause is a step's own time, not a pause: not recorded.
const MIN_PAUSE_MS: i64 = 30_000;
/// Bounds of the grace after the step's last change.
const GRACE_MIN_MS: i64 = 5_000;
const GRACE_MAX_MS: i64 = 60_000;
/// Evidence needed to call a pause flat.
const FLAT_MIN_SAMPLES: u32 = 8;
const FLAT_MIN_SPAN_MS: i64 = 90_000;
/// Utilisation of a sample that ran kernels (a burst), and of one that was busy, %.
const BURST_UTIL: f64 = 10.0;
const BUSY_UTIL: f64 = 50.0;
/// Mean utilisation of a pause in which something still runs, %.
const TRICKLE_UTIL: f64 = 0.5;
/// How many recent step spacings set the grace.
const SPACINGS: usize = 8;

/// One GPU's pause being judged.
#[derive(Debug, Clone, Default)]
pub struct PauseTracker {
    /// The step's newest change this pause started at: (time, whether it was an increase).
    start: Option<(TsMs, bool)>,
    /// Recent times between step changes, ms (the job's step interval).
    spacings: [i64; SPACINGS],
    seen: usize,
    /// Samples up to here were judged.
    scanned_to: TsMs,
    n: u32,
    busy: u32,
    bursts: u32,
    util_sum: f64,
    first: Option<TsMs>,
    last: TsMs,
    power: Option<(f64, f64)>,
}

impl PauseTracker {
    fn grace_ms(&self) -> i64 {
        let n = self.seen.min(SPACINGS);
        let longest = self.spacings[..n].iter().copied().max().unwrap_or(0);
        longest.clamp(GRACE_MIN_MS, GRACE_MAX_MS)
    }

    fn restart(&mut self, at: TsMs, up: bool) {
        if let Some((prev, _)) = self.start {
            let gap = at - prev;
            if gap > 0 && gap < MIN_PAUSE_MS {
                self.spacings[self.seen % SPACINGS] = gap;
                self.seen += 1;
            }
        }
        *self = PauseTracker {
            start: Some((at, up)),
            spacings: self.spacings,
            seen: self.seen,
            scanned_to: at,
            ..PauseTracker::default()
        };
    }

    /// The kind of the pause so far; `None` until the evidence says.
    pub fn kind(&self, margin_w: f64) -> Option<PauseKind> {
        if self.n == 0 {
            return None;
        }
        if 2 * self.busy >= self.n {
            return Some(PauseKind::Busy);
        }
        let moved = self.power.is_some_and(|(lo, hi)| hi - lo >= margin_w);
        let trickle = self.util_sum / f64::from(self.n) >= TRICKLE_UTIL;
        if self.bursts > 0 || moved || trickle {
            return Some(PauseKind::Bursty);
        }
        let span = self.first.map_or(0, |f| self.last - f);
        (self.n >= FLAT_MIN_SAMPLES && span >= FLAT_MIN_SPAN_MS).then_some(PauseKind::Flat)
    }

    fn judge(&mut self, ts: TsMs, u: f64, power: Option<f64>) {
        self.n += 1;
        self.busy += u32::from(u >= BUSY_UTIL);
        self.bursts += u32::from(u >= BURST_UTIL);
        self.util_sum += u;
        self.first.get_or_insert(ts);
        self.last = ts;
        if let Some(p) = power {
            self.power = Some(self.power.map_or((p, p), |(lo, hi)| (lo.min(p), hi.max(p))));
        }
    }
}

/// Power movement that counts as a burst on `g`, W.
fn margin_w(g: &Gpu) -> f64 {
    let limit = g
        .inv
        .power_limit_mw
        .map(|mw| f64::from(mw) / 1000.0)
        .or_else(|| g.spec.and_then(|s| s.power_default_w).map(f64::from));
    limit.map_or(10.0, |l| (0.05 * l).max(5.0))
}

impl World {
    /// Whether some rule reads a pause series (the tracker runs only then).
    pub(super) fn tracks_pauses(&self) -> bool {
        self.needs
            .keys()
            .any(|m| matches!(m, Metric::Pause(_) | Metric::PauseLen(_)))
    }

    /// Judges every GPU's pause with what was fed up to `upto`.
    pub(super) fn track_pauses(&mut self, upto: TsMs) {
        let util_m = Metric::sample("util_gpu");
        let power_m = Metric::sample("power");
        let needs = &self.needs;
        for g in self.gpus.values_mut() {
            let Some(step) = g.training.0.and_then(|id| self.training.get(&id)) else {
                continue;
            };
            let step = &step.points.series;
            let Some((step_ts, _)) = step.last() else {
                continue;
            };
            let (at, up) = match step.newest_change() {
                Some((at, delta)) => (at, delta > 0.0),
                None => (step.time(0), false),
            };
            let margin = margin_w(g);
            let mut ended = None;
            if g.pause.start.map(|s| s.0) != Some(at) {
                if let Some((from, from_up)) = g.pause.start {
                    // Judged up to the last step point that said "unchanged": the samples
                    // after it may already be the resumed job's.
                    if from_up && up && at - from >= MIN_PAUSE_MS {
                        ended = g
                            .pause
                            .kind(margin)
                            .map(|k| (k, (at - from) as f64 / 1000.0));
                    }
                }
                g.pause.restart(at, up);
            }
            if let Some((k, secs)) = ended {
                push(g, Metric::PauseLen(k), at, secs, needs);
            }
            scan(g, util_m, power_m, step_ts.min(upto));
            // The flags at the newest judged time (a series ignores a time it already has).
            let now = g.pause.kind(margin);
            let flags_ts = g.pause.scanned_to.max(at);
            for k in PauseKind::ALL {
                let v = f64::from(u8::from(now == Some(k)));
                push(g, Metric::Pause(k), flags_ts, v, needs);
            }
        }
    }
}

/// Judges `g`'s samples after what was judged, up to `to` (inclusive), past the grace.
fn scan(g: &mut Gpu, util_m: Metric, power_m: Metric, to: TsMs) {
    let Some((start, _)) = g.pause.start else {
        return;
    };
    let from = g.pause.scanned_to.max(start + g.pause.grace_ms());
    if to <= from {
        g.pause.scanned_to = g.pause.scanned_to.max(to);
        return;
    }
    let Some(util) = g.series.get(&util_m).map(|t| &t.series) else {
        return;
    };
    let power = g.series.get(&power_m).map(|t| &t.series);
    let (i, j) = util.range(to, to - from);
    let mut pk = power.map(|p| p.range(to, to - from).0);
    for k in i..j {
        let ts = util.time(k);
        let p = match (power, pk.as_mut()) {
            (Some(ps), Some(pk)) => {
                while *pk < ps.len() && ps.time(*pk) < ts {
                    *pk += 1;
                }
                (*pk < ps.len() && ps.time(*pk) == ts).then(|| ps.value(*pk))
            }
            _ => None,
        };
        g.pause.judge(ts, util.value(k), p);
    }
    g.pause.scanned_to = to;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(samples: &[(i64, f64, f64)]) -> PauseTracker {
        let mut t = PauseTracker::default();
        t.restart(0, true);
        for &(ts, u, p) in samples {
            t.judge(ts, u, Some(p));
        }
        t
    }

    #[test]
    fn kinds_from_the_signature() {
        let flat: Vec<_> = (1..=20)
            .map(|k| (k * 10_000, 0.0, 70.0 + (k % 2) as f64))
            .collect();
        assert_eq!(tracker(&flat).kind(35.0), Some(PauseKind::Flat));
        assert_eq!(
            tracker(&flat[..5]).kind(35.0),
            None,
            "too few samples to say flat"
        );
        let mut bursty = flat.clone();
        bursty[7].1 = 30.0;
        assert_eq!(tracker(&bursty).kind(35.0), Some(PauseKind::Bursty));
        let mut power_only = flat.clone();
        power_only[3].2 = 150.0;
        assert_eq!(tracker(&power_only).kind(35.0), Some(PauseKind::Bursty));
        assert_eq!(
            tracker(&power_only[2..5]).kind(35.0),
            Some(PauseKind::Bursty)
        );
        let mut odd_one = flat.clone();
        odd_one[4].1 = 1.0;
        assert_eq!(
            tracker(&odd_one).kind(35.0),
            Some(PauseKind::Flat),
            "the odd 1 %"
        );
        let trickle: Vec<_> = flat.iter().map(|&(t, _, p)| (t, 1.0, p)).collect();
        assert_eq!(
            tracker(&trickle).kind(35.0),
            Some(PauseKind::Bursty),
            "~1 %"
        );
        let busy: Vec<_> = flat.iter().map(|&(t, _, p)| (t, 99.0, p)).collect();
        assert_eq!(tracker(&busy).kind(35.0), Some(PauseKind::Busy));
    }
}
