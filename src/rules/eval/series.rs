//! One metric of one entity (GPU, process, training series) in memory, with prefix sums so
//! that window aggregates cost O(log n) whatever the window.
//!
//! Invariants:
//! - Points are appended in strictly increasing time; an older or equal timestamp is ignored
//!   (late data never rewrites what rules already saw).
//! - Only points with data are stored: a NULL sample is a gap, not a zero.
//! - History older than `keep_ms` before the newest point is dropped (amortised O(1)); the
//!   prefix arrays are rebuilt from the kept points then, so sums never grow without bound.
//! - Windows are `(t - w, t]`, like Prometheus range selectors.
//! - Windows that end at the newest point (every rule evaluation) get their maximum, minimum
//!   and longest pause from suffix stacks in O(log n); older windows scan.

use super::suffix::SuffixExtreme;

/// Cumulative sums up to (and including) each point, from the first kept point.
#[derive(Debug, Clone, Default)]
struct Prefix {
    sy: Vec<f64>,
    syy: Vec<f64>,
    sx: Vec<f64>,
    sxx: Vec<f64>,
    sxy: Vec<f64>,
    /// Number of value changes between consecutive points.
    changes: Vec<u32>,
    /// Counter increase, resets handled like Prometheus (a drop counts the new value).
    increase: Vec<f64>,
    /// Time of the last value change at or before each point.
    last_change: Vec<i64>,
}

#[derive(Debug, Clone, Default)]
pub struct Series {
    ts: Vec<i64>,
    v: Vec<f64>,
    p: Prefix,
    /// Maxima and minima of every suffix (windows ending at the newest point).
    hi: SuffixExtreme,
    lo: SuffixExtreme,
    /// The longest pause ending at or after each point: a pause is the time from one
    /// increase of the value to the next (see [`Series::longest_pause_from`]).
    pauses: SuffixExtreme,
    /// The most recent change was an increase.
    last_up: bool,
    /// Regression x origin (ms): x = (ts - origin) / 1000 seconds.
    origin: i64,
    keep_ms: i64,
}

/// Sums over a window, enough for every moment-based statistic.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sums {
    pub n: f64,
    pub sy: f64,
    pub syy: f64,
    pub sx: f64,
    pub sxx: f64,
    pub sxy: f64,
    /// x (seconds since the series origin) of the evaluation time.
    pub x_now: f64,
}

impl Series {
    pub fn new(keep_ms: i64) -> Self {
        Self {
            keep_ms: keep_ms.max(1),
            ..Self::default()
        }
    }

    /// Widens the history kept (a rule with a longer window was loaded).
    pub fn keep_at_least(&mut self, keep_ms: i64) {
        self.keep_ms = self.keep_ms.max(keep_ms);
    }

    pub fn len(&self) -> usize {
        self.ts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    pub fn last(&self) -> Option<(i64, f64)> {
        Some((*self.ts.last()?, *self.v.last()?))
    }

    /// Appends a point; ignores NaN/inf and points not newer than the last one.
    pub fn push(&mut self, ts: i64, v: f64) {
        if !v.is_finite() || self.ts.last().is_some_and(|&l| ts <= l) {
            return;
        }
        if self.ts.is_empty() {
            self.origin = ts;
        }
        let x = (ts - self.origin) as f64 / 1000.0;
        let prev = self.v.last().copied();
        let i = self.ts.len();
        let get = |a: &Vec<f64>| if i == 0 { 0.0 } else { a[i - 1] };
        let (sy, syy, sx, sxx, sxy) = (
            get(&self.p.sy),
            get(&self.p.syy),
            get(&self.p.sx),
            get(&self.p.sxx),
            get(&self.p.sxy),
        );
        self.p.sy.push(sy + v);
        self.p.syy.push(syy + v * v);
        self.p.sx.push(sx + x);
        self.p.sxx.push(sxx + x * x);
        self.p.sxy.push(sxy + x * v);
        let changed = prev.is_some_and(|p| p != v);
        let ch = self.p.changes.last().copied().unwrap_or(0);
        self.p.changes.push(ch + u32::from(changed));
        let inc = get(&self.p.increase)
            + match prev {
                Some(p) if v >= p => v - p,
                Some(_) => v,
                None => 0.0,
            };
        self.p.increase.push(inc);
        if let (true, Some(p)) = (changed, prev) {
            let up = v > p;
            // A pause runs from one increase to the next: a restart (a decrease) and the
            // time before the first step after it are not pauses of a running job.
            if up && self.last_up && ch > 0 {
                let since = self.p.last_change[i - 1];
                self.pauses.push_max(i, (ts - since) as f64);
            }
            self.last_up = up;
        }
        let lc = if changed || i == 0 {
            ts
        } else {
            self.p.last_change[i - 1]
        };
        self.p.last_change.push(lc);
        self.hi.push_max(i, v);
        self.lo.push_min(i, v);
        self.ts.push(ts);
        self.v.push(v);
        self.prune(ts);
    }

    /// Drops points older than `keep_ms` before `now`, rebuilding the prefix sums when a
    /// third of the buffer is dead (amortised: two pushes of work per push). The rebuilt
    /// arrays are allocated for the kept points plus the half more that arrive before the
    /// next rebuild, so a full window holds at most 1.5 windows of points and never grows by
    /// doubling.
    fn prune(&mut self, now: i64) {
        let cut = self.ts.partition_point(|&t| t < now - self.keep_ms);
        if cut == 0 || cut * 3 < self.ts.len() {
            return;
        }
        let ts: Vec<i64> = self.ts.drain(cut..).collect();
        let v: Vec<f64> = self.v.drain(cut..).collect();
        *self = Self {
            keep_ms: self.keep_ms,
            ..Self::default()
        };
        self.reserve_exact(ts.len() + ts.len() / 2 + 4);
        for (t, x) in ts.into_iter().zip(v) {
            self.push_raw(t, x);
        }
    }

    fn reserve_exact(&mut self, n: usize) {
        self.ts.reserve_exact(n);
        self.v.reserve_exact(n);
        let p = &mut self.p;
        for a in [
            &mut p.sy,
            &mut p.syy,
            &mut p.sx,
            &mut p.sxx,
            &mut p.sxy,
            &mut p.increase,
        ] {
            a.reserve_exact(n);
        }
        p.changes.reserve_exact(n);
        p.last_change.reserve_exact(n);
    }

    fn push_raw(&mut self, ts: i64, v: f64) {
        let keep = self.keep_ms;
        self.keep_ms = i64::MAX / 4;
        self.push(ts, v);
        self.keep_ms = keep;
    }

    /// Index range `[i, j)` of the points in `(to - w, to]`.
    pub fn range(&self, to: i64, w_ms: i64) -> (usize, usize) {
        let i = self.ts.partition_point(|&t| t <= to - w_ms);
        let j = self.ts.partition_point(|&t| t <= to);
        (i, j.max(i))
    }

    fn diff(a: &[f64], i: usize, j: usize) -> f64 {
        let hi = if j == 0 { 0.0 } else { a[j - 1] };
        let lo = if i == 0 { 0.0 } else { a[i - 1] };
        hi - lo
    }

    /// Moment sums over `[i, j)`.
    pub fn sums(&self, i: usize, j: usize, to: i64) -> Sums {
        Sums {
            n: (j - i) as f64,
            sy: Self::diff(&self.p.sy, i, j),
            syy: Self::diff(&self.p.syy, i, j),
            sx: Self::diff(&self.p.sx, i, j),
            sxx: Self::diff(&self.p.sxx, i, j),
            sxy: Self::diff(&self.p.sxy, i, j),
            x_now: (to - self.origin) as f64 / 1000.0,
        }
    }

    pub fn values(&self, i: usize, j: usize) -> &[f64] {
        &self.v[i..j]
    }

    pub fn times(&self, i: usize, j: usize) -> &[i64] {
        &self.ts[i..j]
    }

    /// Value changes strictly inside `[i, j)` (the change into point i is not counted).
    pub fn changes(&self, i: usize, j: usize) -> u32 {
        if j <= i + 1 {
            return 0;
        }
        self.p.changes[j - 1] - self.p.changes[i]
    }

    /// Counter increase over `[i, j)` (from point i to point j-1).
    pub fn increase(&self, i: usize, j: usize) -> f64 {
        if j <= i + 1 {
            return 0.0;
        }
        self.p.increase[j - 1] - self.p.increase[i]
    }

    /// Time of the last value change at or before point `j - 1`.
    pub fn last_change(&self, j: usize) -> Option<i64> {
        j.checked_sub(1).map(|k| self.p.last_change[k])
    }

    /// The newest value change strictly inside `[i, j)`: (time, new value − old value).
    pub fn last_step(&self, i: usize, j: usize) -> Option<(i64, f64)> {
        if j <= i + 1 || self.p.changes[j - 1] == self.p.changes[i] {
            return None;
        }
        let at = self.p.last_change[j - 1];
        let k = self.ts.partition_point(|&t| t < at);
        (k > i && k < j).then(|| (at, self.v[k] - self.v[k - 1]))
    }

    /// The largest value of `[i, j)`.
    pub fn max(&self, i: usize, j: usize) -> Option<f64> {
        if j == self.len() {
            return self.hi.from(i);
        }
        self.v[i..j].iter().copied().reduce(f64::max)
    }

    /// The smallest value of `[i, j)`.
    pub fn min(&self, i: usize, j: usize) -> Option<f64> {
        if j == self.len() {
            return self.lo.from(i);
        }
        self.v[i..j].iter().copied().reduce(f64::min)
    }

    /// The longest pause, in ms, that ended inside `[i, j)`: from an increase of the value
    /// to the next increase (the earlier one may lie before `i`); 0 when none ended there.
    pub fn longest_pause(&self, i: usize, j: usize) -> f64 {
        if j == self.len() {
            // Pauses are recorded at the point that ends them; the first point of the window
            // ends a pause that began before it, which `changes` would not count: skip it.
            return self.pauses.from(i + 1).unwrap_or(0.0);
        }
        let mut longest = 0i64;
        let mut up = false;
        let mut since: Option<i64> = None;
        for k in 1..j {
            let (a, b) = (self.v[k - 1], self.v[k]);
            if a == b {
                continue;
            }
            if b > a
                && up
                && k > i
                && let Some(s) = since
            {
                longest = longest.max(self.ts[k] - s);
            }
            up = b > a;
            since = Some(self.ts[k]);
        }
        longest as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(i64, f64)]) -> Series {
        let mut s = Series::new(3_600_000);
        for &(t, v) in points {
            s.push(t, v);
        }
        s
    }

    #[test]
    fn windows_are_left_open_right_closed() {
        let s = series(&[(1000, 1.0), (2000, 2.0), (3000, 3.0), (4000, 4.0)]);
        assert_eq!(s.range(4000, 2000), (2, 4));
        assert_eq!(s.range(3500, 10_000), (0, 3));
        assert_eq!(s.range(500, 1000), (0, 0));
        let x = s.sums(2, 4, 4000);
        assert_eq!((x.n, x.sy), (2.0, 7.0));
    }

    #[test]
    fn late_and_non_finite_points_are_ignored() {
        let s = series(&[
            (1000, 1.0),
            (1000, 5.0),
            (500, 5.0),
            (2000, f64::NAN),
            (3000, 3.0),
        ]);
        assert_eq!(s.values(0, s.len()), &[1.0, 3.0]);
    }

    #[test]
    fn changes_increase_and_last_change() {
        let s = series(&[(1, 5.0), (2, 5.0), (3, 6.0), (4, 6.0), (5, 2.0), (6, 4.0)]);
        assert_eq!(s.changes(0, 6), 3);
        assert_eq!(s.changes(2, 4), 0);
        // 5→5→6→6→(reset to 2)→4: increases 0+1+0+2(reset counts the new value)+2
        assert_eq!(s.increase(0, 6), 5.0);
        assert_eq!(s.last_change(4), Some(3));
        assert_eq!(s.last_change(6), Some(6));
    }

    #[test]
    fn pruning_keeps_the_window_and_the_sums_right() {
        let mut s = Series::new(10_000);
        for k in 0..1000 {
            s.push(k * 1000, k as f64);
        }
        assert!(s.len() <= 25, "old points dropped: {}", s.len());
        let (i, j) = s.range(999_000, 10_000);
        let x = s.sums(i, j, 999_000);
        assert_eq!(x.n, 10.0);
        assert_eq!(x.sy, (990..1000).sum::<i64>() as f64);
    }
}
