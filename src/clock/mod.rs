//! Time as a parameter: what decides when the daemon ticks and what time a tick carries.
//!
//! [`WallTicker`] ticks on wall-clock boundaries of the interval (12:00:01.000, ...), on
//! gpuwatch's clock ([`now_ms`]: the wall clock, except that it never steps back; see
//! [`steps`]), so tick times strictly increase whatever the wall clock does. The
//! simulated ticker (in [`crate::sim`]) runs a scenario's clock faster than real time. The
//! daemon and `replay` never read the system clock for a sample's time themselves.
//!
//! Invariant: `next` returns `None` at once when `stop` is set through [`request_stop`] (the
//! signal thread of [`watch_signals`] does that); between ticks the sampling thread sleeps in
//! one wait: on the wall clock that is the sampler's wait for the tick's answers
//! ([`Ticker::next_due`]), which [`request_stop`] ends through [`wake_on_stop`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::model::{TrainingPoint, TsMs};

pub mod steps;

/// One tick: the time it stands for, and training metrics known at that time (simulated
/// scenarios provide them; live ones come from Prometheus in their own task).
#[derive(Debug, Clone, Default)]
pub struct Tick {
    pub ts_ms: TsMs,
    pub training: Vec<TrainingPoint>,
}

pub trait Ticker: Send {
    /// The next tick and, when it is in the future, the instant it is due, without waiting
    /// for it: the caller sleeps until then in a wait of its own (the sampler's lanes start
    /// reading at that instant by themselves, and the sampling thread sleeps once a tick, in
    /// its wait for their answers). `None` when `stop` is set or the clock has run out. The
    /// default waits as [`Ticker::next`] does and says the tick is due now.
    fn next_due(&mut self, stop: &AtomicBool) -> Option<(Tick, Option<Instant>)> {
        self.next(stop).map(|t| (t, None))
    }
    /// Waits for the next tick; `None` when `stop` is set or the clock has run out.
    fn next(&mut self, stop: &AtomicBool) -> Option<Tick>;
    /// The time between ticks, in the ticker's own time.
    fn interval(&self) -> Duration;
    /// "Now" on this ticker's clock (what alert delivery times group waits with): the wall
    /// clock, or a simulated clock that runs with the ticks.
    fn clock(&self) -> Clock {
        std::sync::Arc::new(now_ms)
    }
    /// Whether [`Ticker::clock`] is a simulated clock (not the wall clock), so that waiting
    /// for one of its times cannot be turned into a wall-clock sleep.
    fn simulated(&self) -> bool {
        false
    }
}

/// A shareable source of "now", in milliseconds since the epoch.
pub type Clock = std::sync::Arc<dyn Fn() -> TsMs + Send + Sync>;

/// Milliseconds since the Unix epoch, now, on gpuwatch's clock: the wall clock, except that
/// it never steps back ([`steps`]).
pub fn now_ms() -> TsMs {
    steps::now_us().div_euclid(1000)
}

/// Rung by [`request_stop`]: wakes every [`sleep_unless_stopped`] at once.
static BELL: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

/// A wait on a condvar of its own that [`request_stop`] must end (it re-checks its stop flag
/// when woken).
pub trait WakeOnStop: Send + Sync {
    fn wake(&self);
}

/// The waits [`request_stop`] wakes besides [`sleep_unless_stopped`]'s (dropped ones are
/// pruned as new ones come).
static WAKE_ON_STOP: Mutex<Vec<Weak<dyn WakeOnStop>>> = Mutex::new(Vec::new());

/// Has [`request_stop`] wake `w` (for as long as it lives).
pub fn wake_on_stop(w: Weak<dyn WakeOnStop>) {
    let mut all = WAKE_ON_STOP.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.push(w);
}

/// Sets `stop` and wakes every thread sleeping in [`sleep_unless_stopped`] or registered with
/// [`wake_on_stop`].
pub fn request_stop(stop: &AtomicBool) {
    stop.store(true, Ordering::Relaxed);
    {
        let mut rings = BELL.0.lock().unwrap_or_else(|e| e.into_inner());
        *rings += 1;
        BELL.1.notify_all();
    }
    let waits: Vec<_> = WAKE_ON_STOP
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for w in waits {
        w.wake();
    }
}

/// Sleeps up to `d` in one wait (no periodic wake-ups), waking early when `stop` is set
/// through [`request_stop`]. Returns false when stopped.
pub fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> bool {
    let deadline = Instant::now() + d;
    let mut rings = BELL.0.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        rings = BELL
            .1
            .wait_timeout(rings, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Turns SIGINT / SIGTERM into [`request_stop`] on `stop` and SIGHUP into setting `hup` (when
/// given; the rules thread sees it at its next wake-up, the next committed tick), on a thread
/// that blocks until a signal arrives (no polling).
pub fn watch_signals(
    stop: std::sync::Arc<AtomicBool>,
    hup: Option<std::sync::Arc<AtomicBool>>,
) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut sigs = vec![SIGINT, SIGTERM];
    if hup.is_some() {
        sigs.push(SIGHUP);
    }
    let mut signals = signal_hook::iterator::Signals::new(&sigs)?;
    std::thread::Builder::new()
        .name("gpuwatch-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                match (&hup, sig) {
                    (Some(flag), SIGHUP) => flag.store(true, Ordering::Relaxed),
                    _ => request_stop(&stop),
                }
            }
        })?;
    Ok(())
}

/// Ticks on multiples of the interval in wall-clock time.
#[derive(Debug)]
pub struct WallTicker {
    interval_ms: i64,
    last: Option<TsMs>,
    /// Ticks skipped because a previous tick ran late (kept for self-monitoring).
    pub skipped: u64,
}

impl WallTicker {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval_ms: (interval.as_millis() as i64).max(1),
            last: None,
            skipped: 0,
        }
    }
}

impl WallTicker {
    /// The next tick's time and how long until it is due (counting ticks skipped by a late
    /// caller).
    fn advance(&mut self) -> (TsMs, Duration) {
        let now_us = steps::now_us();
        let now = now_us.div_euclid(1000);
        let mut due = (now / self.interval_ms + 1) * self.interval_ms;
        if let Some(last) = self.last {
            let expected = last + self.interval_ms;
            if expected > now {
                due = expected;
            } else if due > expected + self.interval_ms
                && steps::forward_steps_between(last, now) == 0
            {
                self.skipped += ((due - expected) / self.interval_ms) as u64;
            }
        }
        self.last = Some(due);
        // To the microsecond, so that the instants of consecutive ticks are one interval
        // apart on the monotonic clock too.
        let wait_us = (due.saturating_mul(1000) - now_us).max(0);
        (due, Duration::from_micros(wait_us as u64))
    }
}

impl Ticker for WallTicker {
    fn next_due(&mut self, stop: &AtomicBool) -> Option<(Tick, Option<Instant>)> {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let (ts_ms, wait) = self.advance();
        let tick = Tick {
            ts_ms,
            training: Vec::new(),
        };
        Some((tick, Some(Instant::now() + wait)))
    }

    fn next(&mut self, stop: &AtomicBool) -> Option<Tick> {
        let (tick, at) = self.next_due(stop)?;
        let wait = at.map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(Instant::now())
        });
        sleep_unless_stopped(wait, stop).then_some(tick)
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms as u64)
    }
}

/// Starts a thread named `name` that runs the future `make` builds on its own
/// current-thread tokio runtime (the alert sender, remote write). `what` names the job in
/// the error logged when the runtime cannot start (the thread then ends at once).
pub fn spawn_runtime_thread<F, Fut>(
    name: &str,
    what: &'static str,
    make: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(make()),
                Err(e) => tracing::error!(error = %e, "{what} disabled: cannot start its runtime"),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_ticks_are_aligned_and_increasing() {
        let mut t = WallTicker::new(Duration::from_millis(100));
        let stop = AtomicBool::new(false);
        let a = t.next(&stop).expect("tick");
        let b = t.next(&stop).expect("tick");
        assert_eq!(a.ts_ms % 100, 0);
        assert_eq!(b.ts_ms - a.ts_ms, 100);
    }

    #[test]
    fn next_due_does_not_wait_and_matches_next() {
        let mut t = WallTicker::new(Duration::from_secs(3600));
        let stop = AtomicBool::new(false);
        let before = Instant::now();
        let (a, at) = t.next_due(&stop).expect("tick");
        assert!(before.elapsed() < Duration::from_secs(60));
        let at = at.expect("a wall tick is due at an instant");
        assert!(at > before && at <= before + Duration::from_secs(3600));
        assert_eq!(a.ts_ms % 3_600_000, 0);
        let (b, _) = t.next_due(&stop).expect("tick");
        assert_eq!(b.ts_ms - a.ts_ms, 3_600_000);
        stop.store(true, Ordering::Relaxed);
        assert!(t.next_due(&stop).is_none());
    }

    #[test]
    fn stop_wakes_registered_waits() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl WakeOnStop for Flag {
            fn wake(&self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let w: std::sync::Arc<Flag> = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let dyn_w: std::sync::Arc<dyn WakeOnStop> = w.clone();
        wake_on_stop(std::sync::Arc::downgrade(&dyn_w));
        request_stop(&AtomicBool::new(false));
        assert!(w.0.load(Ordering::Relaxed));
    }

    #[test]
    fn stop_ends_the_wait() {
        let mut t = WallTicker::new(Duration::from_secs(3600));
        let stop = AtomicBool::new(true);
        assert!(t.next(&stop).is_none());
    }
}
