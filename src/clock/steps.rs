//! The daemon's clock across wall-clock steps: the wall clock as read at the first call,
//! advanced by the monotonic clock, which does not step.
//!
//! Invariants:
//! - [`now_ms`](super::now_ms) (every "now" of gpuwatch: tick times, delivery timers, the HTTP
//!   pages) never goes backwards: when the wall clock steps back (an operator, a bad NTP
//!   server), gpuwatch's clock keeps counting on the monotonic clock, ahead of the wall clock
//!   by the step, so no sample is stored at or before one already stored and no timer waits
//!   for the step's length. It follows the wall clock again when that steps forward past it.
//! - A forward step of the wall clock (NTP correcting a late clock) is followed at once; its
//!   length is recorded ([`forward_steps_between`]) so that the alert engine does not count
//!   the jump towards a `for` or `keep_firing_for` (those measure time actually observed).
//! - Differences under [`TOLERANCE_US`] are not steps (slewing moves both clocks alike).
//! - A daemon started while the wall clock is behind the newest tick it stored goes on from
//!   that tick ([`not_before`]): a restart does not undo the first invariant.
//! - Each step is logged once, with its size.

use std::sync::Mutex;
use std::time::Instant;

use crate::model::TsMs;

/// A difference between the two clocks smaller than this is not a step.
pub const TOLERANCE_US: i64 = 1_000_000;

/// Forward steps remembered for the alert engine (the newest ones).
const REMEMBERED_STEPS: usize = 64;

/// What one reading saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The wall clock jumped ahead of gpuwatch's clock by this many µs; now followed.
    Forward(i64),
    /// The wall clock is behind gpuwatch's clock by this many µs (newly, or by a new step).
    Backward(i64),
}

/// Wall-clock time advanced on the monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct StepFree {
    wall_us: i64,
    at: Instant,
    /// How far behind the wall clock was at the last reported backward step (0: not behind).
    reported_behind_us: i64,
}

impl StepFree {
    pub fn new(wall_us: i64, at: Instant) -> Self {
        Self {
            wall_us,
            at,
            reported_behind_us: 0,
        }
    }

    /// Moves this clock forward so that it reads at least `min_us` at `now` (a daemon started
    /// while the wall clock is behind the newest tick it stored). Returns how far (µs).
    pub fn not_before(&mut self, min_us: i64, now: Instant) -> i64 {
        let elapsed =
            i64::try_from(now.saturating_duration_since(self.at).as_micros()).unwrap_or(i64::MAX);
        let t = self.wall_us.saturating_add(elapsed);
        if t >= min_us {
            return 0;
        }
        let d = min_us - t;
        self.wall_us += d;
        // The wall clock is now behind by about `d`: not a new step.
        self.reported_behind_us = self.reported_behind_us.max(d);
        d
    }

    /// gpuwatch's time (µs since the epoch) given the wall clock and the monotonic clock read
    /// together, and the step this reading found, if any.
    pub fn read(&mut self, wall_us: i64, now: Instant) -> (i64, Option<Step>) {
        let elapsed =
            i64::try_from(now.saturating_duration_since(self.at).as_micros()).unwrap_or(i64::MAX);
        let t = self.wall_us.saturating_add(elapsed);
        let ahead = wall_us - t;
        if ahead >= TOLERANCE_US {
            *self = Self::new(wall_us, now);
            return (wall_us, Some(Step::Forward(ahead)));
        }
        let behind = -ahead;
        if behind < TOLERANCE_US {
            self.reported_behind_us = 0;
            return (t, None);
        }
        if behind - self.reported_behind_us >= TOLERANCE_US {
            self.reported_behind_us = behind;
            return (t, Some(Step::Backward(behind)));
        }
        (t, None)
    }
}

struct Global {
    clock: Option<StepFree>,
    /// (gpuwatch's time just after the step, its length), in ms.
    forward: Vec<(TsMs, i64)>,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    clock: None,
    forward: Vec::new(),
});

/// gpuwatch's time now, µs since the epoch (see the module's invariants).
pub fn now_us() -> i64 {
    let wall = chrono::Utc::now().timestamp_micros();
    let now = Instant::now();
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    let clock = g.clock.get_or_insert_with(|| StepFree::new(wall, now));
    let (t, step) = clock.read(wall, now);
    match step {
        Some(Step::Forward(us)) => {
            g.forward.push((t / 1000, us / 1000));
            if g.forward.len() > REMEMBERED_STEPS {
                g.forward.remove(0);
            }
            drop(g);
            tracing::warn!(
                step_ms = us / 1000,
                "the wall clock stepped forward by {}; gpuwatch's clock follows it (the jump \
                 does not count towards alerts' `for`)",
                human_us(us)
            );
        }
        Some(Step::Backward(us)) => {
            drop(g);
            tracing::warn!(
                behind_ms = us / 1000,
                "the wall clock is {} behind gpuwatch's clock (it stepped back); gpuwatch keeps \
                 counting on the monotonic clock, so no sample is stored before one already \
                 stored; it follows the wall clock again when that steps forward past it, or at \
                 a restart",
                human_us(us)
            );
        }
        None => {}
    }
    t
}

/// Makes gpuwatch's clock read after `newest_ms` (the newest tick stored): a daemon started
/// while the wall clock is behind it goes on from there instead of storing rows before it.
pub fn not_before(newest_ms: TsMs) {
    let wall = chrono::Utc::now().timestamp_micros();
    let now = Instant::now();
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    let clock = g.clock.get_or_insert_with(|| StepFree::new(wall, now));
    let moved = clock.not_before(newest_ms.saturating_add(1).saturating_mul(1000), now);
    drop(g);
    if moved >= TOLERANCE_US {
        tracing::warn!(
            behind_ms = moved / 1000,
            "the wall clock is {} behind the newest sample stored; gpuwatch's clock goes on from \
             that sample, so no row is stored before it (it follows the wall clock again when \
             that catches up or steps forward past it)",
            human_us(moved)
        );
    }
}

/// The total length (ms) of the forward steps followed after `after` and up to `upto`
/// (gpuwatch's times).
pub fn forward_steps_between(after: TsMs, upto: TsMs) -> i64 {
    let g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    g.forward
        .iter()
        .filter(|(at, _)| *at > after && *at <= upto)
        .map(|(_, ms)| ms)
        .sum()
}

fn human_us(us: i64) -> String {
    crate::format::duration(us / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const H: i64 = 3_600_000_000;

    #[test]
    fn a_backward_step_is_not_followed_and_reported_once() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut c = StepFree::new(100 * H, t0);
        assert_eq!(
            c.read(100 * H + 5_000_000, at(5)),
            (100 * H + 5_000_000, None)
        );
        // The wall clock goes back an hour: gpuwatch's time keeps counting.
        let (t, step) = c.read(99 * H + 6_000_000, at(6));
        assert_eq!(t, 100 * H + 6_000_000);
        assert_eq!(step, Some(Step::Backward(H)));
        assert_eq!(
            c.read(99 * H + 7_000_000, at(7)),
            (100 * H + 7_000_000, None)
        );
        // The wall clock comes back to gpuwatch's time: nothing to follow, no step.
        assert_eq!(
            c.read(100 * H + 8_000_000, at(8)),
            (100 * H + 8_000_000, None)
        );
    }

    #[test]
    fn a_forward_step_is_followed() {
        let t0 = Instant::now();
        let mut c = StepFree::new(100 * H, t0);
        let (t, step) = c.read(101 * H + 1_000_000, t0 + Duration::from_secs(1));
        assert_eq!(t, 101 * H + 1_000_000);
        assert_eq!(step, Some(Step::Forward(H)));
        let later = c.read(101 * H + 2_000_000, t0 + Duration::from_secs(2));
        assert_eq!(later, (101 * H + 2_000_000, None));
    }

    #[test]
    fn small_differences_are_not_steps() {
        let t0 = Instant::now();
        let mut c = StepFree::new(100 * H, t0);
        assert_eq!(
            c.read(100 * H + 1_500_000, t0 + Duration::from_secs(1)),
            (100 * H + 1_000_000, None)
        );
        assert_eq!(
            c.read(100 * H + 1_600_000, t0 + Duration::from_secs(2)),
            (100 * H + 2_000_000, None)
        );
    }

    #[test]
    fn a_start_behind_the_stored_ticks_goes_on_from_them() {
        let t0 = Instant::now();
        let mut c = StepFree::new(99 * H, t0);
        assert_eq!(c.not_before(100 * H, t0), H);
        let (t, step) = c.read(99 * H + 1_000_000, t0 + Duration::from_secs(1));
        assert_eq!(t, 100 * H + 1_000_000);
        assert_eq!(step, None, "already reported at the start");
        assert_eq!(
            c.not_before(50 * H, t0),
            0,
            "nothing stored after now: unchanged"
        );
    }

    #[test]
    fn time_never_goes_backwards_through_steps() {
        let t0 = Instant::now();
        let mut c = StepFree::new(100 * H, t0);
        let mut last = 0;
        for (s, wall) in [
            (1, 100 * H),
            (2, 99 * H),
            (3, 100 * H),
            (4, 101 * H),
            (5, 98 * H),
        ] {
            let (t, _) = c.read(wall + s * 1_000_000, t0 + Duration::from_secs(s as u64));
            assert!(t > last, "{t} after {last}");
            last = t;
        }
    }
}
