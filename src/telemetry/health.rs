//! What the working threads publish for `/healthz` and the self-metrics: tick times and
//! counters (sampling thread), duration histograms (sampling, rules and scrape), which GPUs
//! report XIDs (event thread).
//!
//! Invariant: only atomics and once-set cells, so reading never waits on a worker. Two
//! clocks: the stall check counts wall time since the last tick (a stuck sampler is stuck in
//! real time); a sample's freshness counts on the clock the samples carry (`sample_now`: the
//! wall clock in `run`, the scenario's faster clock in `demo`).

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::json;

use super::metrics::{Histogram, XidWatch};
use crate::clock::now_ms;

/// What the sampling thread publishes for the health check.
#[derive(Debug)]
pub struct Health {
    started_ms: i64,
    stall_after_ms: i64,
    /// Wall time of the last completed tick (0 = none yet).
    last_tick_wall_ms: AtomicI64,
    /// Time (sample time) of the last completed tick.
    last_tick_ts_ms: AtomicI64,
    /// Wall time of the last tick in which some GPU was sampled (or every GPU is lost).
    last_progress_wall_ms: AtomicI64,
    pub ticks: AtomicU64,
    pub gpus: AtomicU32,
    pub gpus_lost: AtomicU32,
    pub gaps: AtomicU64,
    pub write_errors: AtomicU64,
    /// Sampling tick durations (sampler + hand-off to the writer).
    pub tick_seconds: Histogram,
    /// Rules thread wake-ups (slice read, evaluation, state and outbox saved).
    pub eval_seconds: Histogram,
    /// `/metrics` answers.
    pub scrape_seconds: Histogram,
    /// Bytes the rules thread's in-memory windows hold, after its last wake-up.
    pub rule_window_bytes: AtomicU64,
    /// The usage ledger's counters per GPU and holder, after the rules thread's last wake-up
    /// (`gpuwatch_gpu_held_seconds_total`, `gpuwatch_gpu_idle_held_seconds_total`).
    pub usage: std::sync::Mutex<
        Vec<(
            crate::usage::GpuLabel,
            crate::usage::Holder,
            crate::usage::Counter,
        )>,
    >,
    xid_watch: OnceLock<Arc<XidWatch>>,
    /// The clock the samples' times come from (unset: the wall clock).
    sample_clock: OnceLock<SampleClock>,
}

/// The samples' clock, as a field `Health`'s `Debug` can print.
struct SampleClock(crate::clock::Clock);

impl std::fmt::Debug for SampleClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SampleClock({})", (self.0)())
    }
}

impl Health {
    pub fn new(stall_after: Duration) -> Arc<Self> {
        Arc::new(Self {
            started_ms: now_ms(),
            stall_after_ms: stall_after.as_millis() as i64,
            last_tick_wall_ms: AtomicI64::new(0),
            last_tick_ts_ms: AtomicI64::new(0),
            last_progress_wall_ms: AtomicI64::new(0),
            ticks: AtomicU64::new(0),
            gpus: AtomicU32::new(0),
            gpus_lost: AtomicU32::new(0),
            gaps: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            tick_seconds: Histogram::default(),
            eval_seconds: Histogram::default(),
            usage: std::sync::Mutex::default(),
            scrape_seconds: Histogram::default(),
            rule_window_bytes: AtomicU64::new(0),
            xid_watch: OnceLock::new(),
            sample_clock: OnceLock::new(),
        })
    }

    /// Set once, when the sampler has started.
    pub fn set_xid_watch(&self, w: Arc<XidWatch>) {
        let _ = self.xid_watch.set(w);
    }

    pub fn xid_watch(&self) -> Option<&Arc<XidWatch>> {
        self.xid_watch.get()
    }

    /// Set once, before the first tick: the clock the samples carry.
    pub fn set_sample_clock(&self, clock: crate::clock::Clock) {
        let _ = self.sample_clock.set(SampleClock(clock));
    }

    /// "Now" on the clock the samples carry: what a sample's age is counted against, so that
    /// `/metrics`, the API and the page judge freshness alike in `run` and in `demo`.
    pub fn sample_now(&self) -> i64 {
        self.sample_now_or(now_ms())
    }

    /// `sample_now`, with `wall_ms` standing for the wall clock when no sample clock is set.
    pub fn sample_now_or(&self, wall_ms: i64) -> i64 {
        self.sample_clock.get().map_or(wall_ms, |c| (c.0)())
    }

    /// Called by the sampling thread after each tick. `progress`: some GPU was sampled, or
    /// there is nothing left to sample (no GPUs, or all lost) — a tick in which every GPU
    /// missed its deadline is no progress.
    pub fn tick_done(&self, ts_ms: i64, progress: bool) {
        let now = now_ms();
        self.last_tick_wall_ms.store(now, Ordering::Relaxed);
        if progress {
            self.last_progress_wall_ms.store(now, Ordering::Relaxed);
        }
        self.last_tick_ts_ms.store(ts_ms, Ordering::Relaxed);
        self.ticks.fetch_add(1, Ordering::Relaxed);
    }

    /// Milliseconds since the last tick that sampled some GPU (`None`: none yet).
    pub fn sampled_age_ms(&self, now: i64) -> Option<i64> {
        age(&self.last_progress_wall_ms, now)
    }

    /// (healthy, JSON body).
    pub fn report(&self) -> (bool, serde_json::Value) {
        let now = now_ms();
        let tick_age = age(&self.last_tick_wall_ms, now);
        let progress_age = self.sampled_age_ms(now);
        let fresh = |a: Option<i64>| {
            a.map_or(now - self.started_ms < self.stall_after_ms, |a| {
                a < self.stall_after_ms
            })
        };
        let healthy = fresh(tick_age) && fresh(progress_age);
        let secs = |a: Option<i64>| a.map(|a| a as f64 / 1000.0);
        let body = json!({
            "status": if healthy { "ok" } else { "stalled" },
            "last_tick_age_seconds": secs(tick_age),
            "last_sampled_age_seconds": secs(progress_age),
            "last_sample_ts_ms": match self.last_tick_ts_ms.load(Ordering::Relaxed) { 0 => None, t => Some(t) },
            "sample_now_ms": self.sample_now(),
            "stall_after_seconds": self.stall_after_ms as f64 / 1000.0,
            "ticks": self.ticks.load(Ordering::Relaxed),
            "gpus": self.gpus.load(Ordering::Relaxed),
            "gpus_lost": self.gpus_lost.load(Ordering::Relaxed),
            "gaps": self.gaps.load(Ordering::Relaxed),
            "store_write_errors": self.write_errors.load(Ordering::Relaxed),
        });
        (healthy, body)
    }
}

/// Milliseconds since the wall time in `t` (`None` while it is 0: never happened).
fn age(t: &AtomicI64, now: i64) -> Option<i64> {
    match t.load(Ordering::Relaxed) {
        0 => None,
        t => Some(now - t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_while_ticks_sample_something() {
        let h = Health::new(Duration::from_millis(300));
        assert!(h.report().0, "starting up counts as healthy");
        h.tick_done(1, true);
        assert!(h.report().0);
        std::thread::sleep(Duration::from_millis(350));
        let (ok, body) = h.report();
        assert!(!ok, "no tick for longer than stall_after");
        assert_eq!(body["status"], "stalled");
    }

    #[test]
    fn ticks_without_any_sample_are_a_stall() {
        let h = Health::new(Duration::from_millis(300));
        h.tick_done(1, true);
        std::thread::sleep(Duration::from_millis(350));
        h.tick_done(2, false);
        assert!(!h.report().0, "ticks run but every GPU misses its deadline");
        h.tick_done(3, true);
        assert!(h.report().0);
    }
}
