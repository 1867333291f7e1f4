//! Extremes over the newest part of an append-only series: a monotonic stack of the points
//! that are the maximum (or minimum) of everything after them, so the maximum over any
//! window ending at the newest point is one binary search instead of a scan of the window.
//!
//! Invariants: indices in the stack increase from bottom to top and values strictly
//! decrease (for a maximum; increase for a minimum), so the extreme over the points from
//! index `i` to the end is the first stack entry at or after `i`. Pushing is amortised
//! O(1); the stack never holds more entries than the series has points.

#[derive(Debug, Clone, Default)]
pub struct SuffixExtreme {
    idx: Vec<usize>,
    val: Vec<f64>,
}

impl SuffixExtreme {
    /// Appends point `i` for a maximum: entries it dominates leave the stack.
    pub fn push_max(&mut self, i: usize, v: f64) {
        while self.val.last().is_some_and(|&top| top <= v) {
            self.val.pop();
            self.idx.pop();
        }
        self.idx.push(i);
        self.val.push(v);
    }

    /// Appends point `i` for a minimum.
    pub fn push_min(&mut self, i: usize, v: f64) {
        while self.val.last().is_some_and(|&top| top >= v) {
            self.val.pop();
            self.idx.pop();
        }
        self.idx.push(i);
        self.val.push(v);
    }

    /// The extreme of the points with index `>= from` (`None` when there are none).
    pub fn from(&self, from: usize) -> Option<f64> {
        let k = self.idx.partition_point(|&x| x < from);
        self.val.get(k).copied()
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
            hi.push_max(i, v);
            lo.push_min(i, v);
            for from in 0..=i + 1 {
                let s = &vals[from.min(i + 1)..=i];
                let want_max = s.iter().copied().reduce(f64::max);
                let want_min = s.iter().copied().reduce(f64::min);
                assert_eq!(hi.from(from), want_max, "max from {from} after {i}");
                assert_eq!(lo.from(from), want_min, "min from {from} after {i}");
            }
        }
    }
}
