//! GPUs the sampler stops calling: NVML says they are lost (`GPU_IS_LOST`, `RESET_REQUIRED`),
//! the driver reported a fatal XID for them (79: fallen off the bus; 119, 120: the GSP stopped
//! answering), or their reads missed the deadline [`MISSES_BEFORE`] ticks in a row over at
//! least [`MISSING_FOR`] of the monotonic clock (a slow call or two at a short interval is a
//! gap, not a loss; tick time is not used, since a simulated clock runs it many times faster
//! than a stuck driver call, and a loaded machine misses deadlines that are that short). Calls on
//! such a GPU block for seconds to minutes in the driver, so it is not read again until a
//! probe on a long backoff, and every other GPU keeps its deadline.
//!
//! Invariants:
//! - A quarantined GPU is asked nothing but its probes: the first one `first_probe` after it
//!   was quarantined (`lost_probe_after`, default [`FIRST_PROBE`]), then at doubling intervals
//!   up to [`MAX_BACKOFF`].
//! - A probe that answers with a good sample ends the quarantine (`gpu_recovered`); any other
//!   outcome doubles the wait for the next one. Entering quarantine is reported once
//!   (`gpu_lost`), however many probes fail.
//! - While quarantined, the GPU's rows say `lost` (it stays visible, with no made-up values).

use std::time::{Duration, Instant};

use crate::model::TsMs;

/// XIDs after which the GPU is not called again until a probe: 79 (fallen off the bus), 119
/// and 120 (GSP RPC timeout, GSP error).
pub const FATAL_XIDS: [i64; 3] = [79, 119, 120];

/// Consecutive ticks without an answer before a GPU is quarantined...
pub const MISSES_BEFORE: u32 = 3;

/// ...spanning at least this much time on the monotonic clock.
pub const MISSING_FOR: Duration = Duration::from_secs(10);

/// A GPU's run of ticks without an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Misses {
    count: u32,
    first: Option<Instant>,
}

impl Misses {
    /// Another tick, whose reads started at `now` (monotonic), without an answer; true when
    /// that makes the GPU lost.
    pub fn missed(&mut self, now: Instant) -> bool {
        let first = *self.first.get_or_insert(now);
        self.count += 1;
        self.count >= MISSES_BEFORE && now.saturating_duration_since(first) >= MISSING_FOR
    }

    /// An answer came: the run ends.
    pub fn answered(&mut self) {
        *self = Self::default();
    }
}

/// The first probe of a quarantined GPU comes this long after it was quarantined, by default.
pub const FIRST_PROBE: Duration = crate::config::DEFAULT_LOST_PROBE_AFTER;

/// The longest wait between probes.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// Why and since when a GPU is not called.
#[derive(Debug, Clone, PartialEq)]
pub struct Quarantine {
    pub since_ms: TsMs,
    pub reason: String,
    /// When the next probe is due (tick time).
    pub next_probe_ms: TsMs,
    backoff_ms: i64,
}

impl Quarantine {
    pub fn new(now_ms: TsMs, reason: String, first_probe: Duration) -> Self {
        let backoff_ms = millis(first_probe.min(MAX_BACKOFF));
        Self {
            since_ms: now_ms,
            reason,
            next_probe_ms: now_ms + backoff_ms,
            backoff_ms,
        }
    }

    /// Whether a probe is due at tick time `now_ms`.
    pub fn probe_due(&self, now_ms: TsMs) -> bool {
        now_ms >= self.next_probe_ms
    }

    /// A probe at `now_ms` did not bring the GPU back: the next one waits twice as long.
    pub fn probe_failed(&mut self, now_ms: TsMs) {
        self.backoff_ms = (self.backoff_ms * 2).min(millis(MAX_BACKOFF));
        self.next_probe_ms = now_ms + self.backoff_ms;
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The reason text for a fatal XID, from the catalogue.
pub fn xid_reason(code: i64) -> String {
    format!("XID {code} ({})", crate::xid::describe(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_back_off_to_an_hour() {
        let mut q = Quarantine::new(0, "test".into(), FIRST_PROBE);
        assert!(!q.probe_due(59_999));
        assert!(q.probe_due(60_000));
        let mut at = 60_000;
        let mut waits = Vec::new();
        for _ in 0..8 {
            q.probe_failed(at);
            waits.push(q.next_probe_ms - at);
            at = q.next_probe_ms;
        }
        assert_eq!(&waits[..3], &[120_000, 240_000, 480_000]);
        assert_eq!(waits.last(), Some(&3_600_000));
    }

    #[test]
    fn the_first_probe_comes_when_configured() {
        let mut q = Quarantine::new(1_000, "test".into(), Duration::from_secs(5));
        assert!(!q.probe_due(5_999));
        assert!(q.probe_due(6_000));
        q.probe_failed(6_000);
        assert_eq!(q.next_probe_ms, 16_000, "then doubling");
    }

    #[test]
    fn lost_after_three_misses_over_ten_seconds() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut m = Misses::default();
        assert!(!m.missed(at(0)));
        assert!(!m.missed(at(100)));
        assert!(!m.missed(at(200)), "three misses in 200 ms are gaps");
        assert!(!m.missed(at(9_999)), "four, in under ten seconds");
        assert!(m.missed(at(10_000)));
        m.answered();
        assert!(!m.missed(at(20_000)), "an answer starts a new run");
        assert!(!m.missed(at(40_000)), "two misses, however far apart");
        assert!(m.missed(at(40_001)));
    }

    #[test]
    fn fatal_xids_are_in_the_catalogue() {
        for code in FATAL_XIDS {
            assert!(crate::xid::lookup(code).is_some(), "{code}");
            assert!(xid_reason(code).starts_with(&format!("XID {code} (")));
        }
    }
}
