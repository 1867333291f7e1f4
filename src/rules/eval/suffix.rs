//! Extremes over the newest part of an append-only series: a monotonic stack of the points
//! that are the maximum (or minimum) of everything after them, so the maximum over any
//! window ending at the newest point is one binary search instead of a scan of the window.
//!
//! Invariants: keys (a point's time, or any other increasing position) increase from bottom
//! to top and values strictly decrease (for a maximum; increase for a minimum), so the
//! extreme over the entries from key `k` on is the first stack entry at or after `k`.
//! Pushing is amortised O(1); the stack never holds more entries than were pushed, and
//! [`SuffixExtreme::forget_before`] drops what no window reaches any more. Keys are not
//! indices, so dropping a series' old points never renumbers the stack.

#[derive(Debug, Clone, Default)]
pub struct SuffixExtreme {
    idx: Vec<i64>,
    val: Vec<f64>,
}

impl SuffixExtreme {
    /// Appends the entry at key `i` for a maximum: entries it dominates leave the stack.
    pub fn push_max(&mut self, i: i64, v: f64) {
        while self.val.last().is_some_and(|&top| top <= v) {
            self.val.pop();
            self.idx.pop();
        }
        self.idx.push(i);
        self.val.push(v);
    }

    /// Appends the entry at key `i` for a minimum.
    pub fn push_min(&mut self, i: i64, v: f64) {
        while self.val.last().is_some_and(|&top| top >= v) {
            self.val.pop();
            self.idx.pop();
        }
        self.idx.push(i);
        self.val.push(v);
    }

    /// The extreme of the entries with key `>= from` (`None` when there are none).
    pub fn from(&self, from: i64) -> Option<f64> {
        let k = self.idx.partition_point(|&x| x < from);
        self.val.get(k).copied()
    }

    /// Drops the entries with key `< key` (no later query starts before it).
    pub fn forget_before(&mut self, key: i64) {
        let k = self.idx.partition_point(|&x| x < key);
        if k > 0 {
            self.idx.drain(..k);
            self.val.drain(..k);
        }
    }

    /// Entries on the stack.
    pub fn entries(&self) -> usize {
        self.idx.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_scan_of_every_suffix() {
        let vals = [
            3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 5.0, 0.0,
        ];
        let (mut hi, mut lo) = (SuffixExtreme::default(), SuffixExtreme::default());
        for (i, &v) in vals.iter().enumerate() {
            hi.push_max(i as i64, v);
            lo.push_min(i as i64, v);
            for from in 0..=i + 1 {
                let s = &vals[from.min(i + 1)..=i];
                let want_max = s.iter().copied().reduce(f64::max);
                let want_min = s.iter().copied().reduce(f64::min);
                assert_eq!(hi.from(from as i64), want_max, "max from {from} after {i}");
                assert_eq!(lo.from(from as i64), want_min, "min from {from} after {i}");
            }
        }
    }

    #[test]
    fn forgetting_old_keys_keeps_every_later_answer() {
        let vals = [5.0, 9.0, 2.0, 7.0, 1.0, 8.0, 3.0];
        let mut hi = SuffixExtreme::default();
        for (i, &v) in vals.iter().enumerate() {
            hi.push_max(10 * i as i64, v);
        }
        let before: Vec<_> = (30..=70).map(|k| hi.from(k)).collect();
        hi.forget_before(30);
        let after: Vec<_> = (30..=70).map(|k| hi.from(k)).collect();
        assert_eq!(before, after);
        assert!(
            hi.entries() <= 3,
            "entries before key 30 are gone: {}",
            hi.entries()
        );
    }
}
