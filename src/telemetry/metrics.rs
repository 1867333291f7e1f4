//! In-process self-metrics that no table holds: duration histograms of the sampling tick
//! and of rule evaluation, and which GPUs report XID events. Written by the threads that do
//! the work, read by `/metrics`.
//!
//! Invariants: lock-free on the writing side (relaxed atomics: a scrape may see a sum one
//! observation ahead of its count, never a torn value); bucket bounds are fixed at build.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the duration histograms: 100 µs .. 10 s.
pub const BOUNDS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0, 10.0,
];

/// A fixed-bucket duration histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BOUNDS.iter().position(|b| s <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// (cumulative bucket counts, sum in seconds, count).
    pub fn snapshot(&self) -> ([u64; BOUNDS.len()], f64, u64) {
        let mut cumulative = [0u64; BOUNDS.len()];
        let mut acc = 0;
        for (c, b) in cumulative.iter_mut().zip(&self.buckets) {
            acc += b.load(Ordering::Relaxed);
            *c = acc;
        }
        let count = self.count.load(Ordering::Relaxed).max(acc);
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        (cumulative, sum, count)
    }
}

/// Which GPU indexes deliver XID events: `None` until the event thread has registered (or
/// given up), then the indexes it watches (empty: events unavailable).
#[derive(Debug, Default)]
pub struct XidWatch(RwLock<Option<Vec<u32>>>);

impl XidWatch {
    pub fn set(&self, indexes: Vec<u32>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(indexes);
    }

    /// `Some(true)`: XIDs of this GPU are watched; `Some(false)`: they are not; `None`: not
    /// known yet.
    pub fn watched(&self, index: u32) -> Option<bool> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|v| v.contains(&index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(20));
        let (c, sum, n) = h.snapshot();
        assert_eq!(n, 3);
        assert_eq!(c[0], 1);
        assert_eq!(c[5], 2, "5 ms bucket holds the 50 µs and 3 ms observations");
        assert_eq!(c[BOUNDS.len() - 1], 2, "20 s is only in +Inf");
        assert!((sum - 20.00305).abs() < 1e-9);
        let w = XidWatch::default();
        assert_eq!(w.watched(0), None);
        w.set(vec![1]);
        assert_eq!((w.watched(0), w.watched(1)), (Some(false), Some(true)));
    }
}
