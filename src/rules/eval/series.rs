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
//! - Only the prefix arrays and stacks of the series' [`Stats`] are kept; any other
//!   statistic scans its window (the same answer up to rounding).

use super::suffix::SuffixExtreme;

/// The window statistics a series keeps prefix arrays (or suffix stacks) for. Every accessor
/// answers whatever the set: what is not kept is computed by a scan of the window, so the set
/// decides only the cost, never a result. A series pays memory and push time for what its
/// rules read, nothing else (see `needs.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Stats(u16);

impl Stats {
    pub const NONE: Stats = Stats(0);
    /// Σy (sum, avg, trend buckets).
    pub const SUM: Stats = Stats(1);
    /// Σy² (stddev).
    pub const SQUARES: Stats = Stats(1 << 1);
    /// Σx, Σx², Σxy (regression, with SUM and SQUARES).
    pub const REGRESSION: Stats = Stats(1 << 2);
    pub const CHANGES: Stats = Stats(1 << 3);
    pub const INCREASE: Stats = Stats(1 << 4);
    pub const LAST_CHANGE: Stats = Stats(1 << 5);
    pub const MAX: Stats = Stats(1 << 6);
    pub const MIN: Stats = Stats(1 << 7);
    pub const PAUSES: Stats = Stats(1 << 8);
    /// Everything a least-squares fit reads.
    pub const FIT: Stats = Stats(1 | 1 << 1 | 1 << 2);
    pub const ALL: Stats = Stats((1 << 9) - 1);

    pub const fn union(self, o: Stats) -> Stats {
        Stats(self.0 | o.0)
    }

    pub const fn has(self, o: Stats) -> bool {
        self.0 & o.0 == o.0
    }
}

/// Cumulative sums up to (and including) each point, from the first kept point. An array
/// whose statistic the series does not keep stays empty.
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
    /// increase of the value to the next (see [`Series::longest_pause`]).
    pauses: SuffixExtreme,
    /// The most recent change was an increase.
    last_up: bool,
    /// Value changes seen since the first kept point (the pause tracker's count).
    seen_changes: u32,
    /// Time of the newest value change (the pause tracker's start).
    last_change_ts: i64,
    /// Regression x origin (ms): x = (ts - origin) / 1000 seconds.
    origin: i64,
    keep_ms: i64,
    stats: Stats,
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
    /// A series keeping `keep_ms` of history and the prefix arrays of `stats`.
    pub fn new(keep_ms: i64, stats: Stats) -> Self {
        Self {
            keep_ms: keep_ms.max(1),
            stats,
            ..Self::default()
        }
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
        self.append(ts, v);
        self.prune(ts);
    }

    fn append(&mut self, ts: i64, v: f64) {
        if self.ts.is_empty() {
            self.origin = ts;
            self.last_change_ts = ts;
        }
        let st = self.stats;
        let i = self.ts.len();
        let prev = self.v.last().copied();
        let changed = prev.is_some_and(|p| p != v);
        let p = &mut self.p;
        let last = |a: &Vec<f64>| a.last().copied().unwrap_or(0.0);
        if st.has(Stats::SUM) {
            p.sy.push(last(&p.sy) + v);
        }
        if st.has(Stats::SQUARES) {
            p.syy.push(last(&p.syy) + v * v);
        }
        if st.has(Stats::REGRESSION) {
            let x = (ts - self.origin) as f64 / 1000.0;
            p.sx.push(last(&p.sx) + x);
            p.sxx.push(last(&p.sxx) + x * x);
            p.sxy.push(last(&p.sxy) + x * v);
        }
        if st.has(Stats::CHANGES) {
            let ch = p.changes.last().copied().unwrap_or(0);
            p.changes.push(ch + u32::from(changed));
        }
        if st.has(Stats::INCREASE) {
            let inc = match prev {
                Some(p) if v >= p => v - p,
                Some(_) => v,
                None => 0.0,
            };
            p.increase.push(last(&p.increase) + inc);
        }
        if st.has(Stats::PAUSES)
            && let (true, Some(p)) = (changed, prev)
        {
            let up = v > p;
            // A pause runs from one increase to the next: a restart (a decrease) and the
            // time before the first step after it are not pauses of a running job.
            if up && self.last_up && self.seen_changes > 0 {
                self.pauses.push_max(i, (ts - self.last_change_ts) as f64);
            }
            self.last_up = up;
        }
        if changed {
            self.seen_changes += 1;
            self.last_change_ts = ts;
        }
        if st.has(Stats::LAST_CHANGE) {
            self.p.last_change.push(self.last_change_ts);
        }
        if st.has(Stats::MAX) {
            self.hi.push_max(i, v);
        }
        if st.has(Stats::MIN) {
            self.lo.push_min(i, v);
        }
        self.ts.push(ts);
        self.v.push(v);
    }

    /// Drops points older than `keep_ms` before `now`, rebuilding the prefix sums when a
    /// third of the buffer is dead (amortised: two pushes of work per push). The rebuilt
    /// arrays are allocated for the kept points plus the half more that arrive before the
    /// next rebuild, so a full window holds at most 1.5 windows of points and never grows by
    /// doubling. The test is one comparison: a third of the buffer is dead exactly when the
    /// point a third of the way in is.
    fn prune(&mut self, now: i64) {
        let third = self.ts.len().div_ceil(3);
        if third == 0 || self.ts[third - 1] >= now - self.keep_ms {
            return;
        }
        let cut = self.ts.partition_point(|&t| t < now - self.keep_ms);
        let ts: Vec<i64> = self.ts.drain(cut..).collect();
        let v: Vec<f64> = self.v.drain(cut..).collect();
        *self = Self {
            keep_ms: self.keep_ms,
            stats: self.stats,
            ..Self::default()
        };
        self.reserve_exact(ts.len() + ts.len() / 2 + 4);
        for (t, x) in ts.into_iter().zip(v) {
            self.append(t, x);
        }
    }

    fn reserve_exact(&mut self, n: usize) {
        let st = self.stats;
        self.ts.reserve_exact(n);
        self.v.reserve_exact(n);
        let p = &mut self.p;
        for (a, kept) in [
            (&mut p.sy, st.has(Stats::SUM)),
            (&mut p.syy, st.has(Stats::SQUARES)),
            (&mut p.sx, st.has(Stats::REGRESSION)),
            (&mut p.sxx, st.has(Stats::REGRESSION)),
            (&mut p.sxy, st.has(Stats::REGRESSION)),
            (&mut p.increase, st.has(Stats::INCREASE)),
        ] {
            if kept {
                a.reserve_exact(n);
            }
        }
        if st.has(Stats::CHANGES) {
            p.changes.reserve_exact(n);
        }
        if st.has(Stats::LAST_CHANGE) {
            p.last_change.reserve_exact(n);
        }
    }

    /// Index range `[i, j)` of the points in `(to - w, to]`.
    pub fn range(&self, to: i64, w_ms: i64) -> (usize, usize) {
        let j = match self.ts.last() {
            Some(&l) if l <= to => self.ts.len(),
            _ => self.ts.partition_point(|&t| t <= to),
        };
        let i = self.first_after(to - w_ms, j);
        (i, j.max(i))
    }

    /// The first index (below `j`) whose time is after `bound`: a guess from the mean
    /// spacing, then a gallop to the exact place, so a window of a regularly sampled series
    /// costs a few probes near its start instead of a binary search over the whole buffer.
    fn first_after(&self, bound: i64, j: usize) -> usize {
        let ts = &self.ts[..j];
        let n = ts.len();
        if n < 16 {
            return ts.partition_point(|&t| t <= bound);
        }
        let (first, last) = (ts[0], ts[n - 1]);
        if bound < first {
            return 0;
        }
        if bound >= last {
            return n;
        }
        let spacing = ((last - first) / (n as i64 - 1)).max(1);
        let guess = (((bound - first) / spacing) as usize + 1).min(n - 1);
        // ts[lo] <= bound < ts[hi] once both ends are found.
        let (mut lo, mut hi);
        if ts[guess] <= bound {
            lo = guess;
            let mut step = 1;
            hi = (guess + step).min(n - 1);
            while ts[hi] <= bound {
                lo = hi;
                step *= 2;
                hi = (hi + step).min(n - 1);
            }
        } else {
            hi = guess;
            let mut step = 1;
            lo = guess.saturating_sub(step);
            while ts[lo] > bound {
                hi = lo;
                if lo == 0 {
                    return 0;
                }
                step *= 2;
                lo = lo.saturating_sub(step);
            }
        }
        lo + 1 + ts[lo + 1..hi].partition_point(|&t| t <= bound)
    }

    fn diff(a: &[f64], i: usize, j: usize) -> f64 {
        let hi = if j == 0 { 0.0 } else { a[j - 1] };
        let lo = if i == 0 { 0.0 } else { a[i - 1] };
        hi - lo
    }

    /// Σy over `[i, j)`.
    pub fn sum(&self, i: usize, j: usize) -> f64 {
        if self.stats.has(Stats::SUM) {
            Self::diff(&self.p.sy, i, j)
        } else {
            self.v[i..j].iter().sum()
        }
    }

    /// Moment sums over `[i, j)`.
    pub fn sums(&self, i: usize, j: usize, to: i64) -> Sums {
        let x_now = (to - self.origin) as f64 / 1000.0;
        let n = (j - i) as f64;
        if self.stats.has(Stats::FIT) {
            return Sums {
                n,
                sy: Self::diff(&self.p.sy, i, j),
                syy: Self::diff(&self.p.syy, i, j),
                sx: Self::diff(&self.p.sx, i, j),
                sxx: Self::diff(&self.p.sxx, i, j),
                sxy: Self::diff(&self.p.sxy, i, j),
                x_now,
            };
        }
        let mut s = Sums {
            n,
            x_now,
            ..Sums::default()
        };
        for (&t, &y) in self.ts[i..j].iter().zip(&self.v[i..j]) {
            let x = (t - self.origin) as f64 / 1000.0;
            s.sy += y;
            s.syy += y * y;
            s.sx += x;
            s.sxx += x * x;
            s.sxy += x * y;
        }
        s
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
        if self.stats.has(Stats::CHANGES) {
            return self.p.changes[j - 1] - self.p.changes[i];
        }
        let v = &self.v[i..j];
        v.windows(2).filter(|w| w[0] != w[1]).count() as u32
    }

    /// Counter increase over `[i, j)` (from point i to point j-1).
    pub fn increase(&self, i: usize, j: usize) -> f64 {
        if j <= i + 1 {
            return 0.0;
        }
        if self.stats.has(Stats::INCREASE) {
            return self.p.increase[j - 1] - self.p.increase[i];
        }
        self.v[i..j]
            .windows(2)
            .map(|w| if w[1] >= w[0] { w[1] - w[0] } else { w[1] })
            .sum()
    }

    /// Time of the last value change at or before point `j - 1` (the first kept point's
    /// time when none).
    pub fn last_change(&self, j: usize) -> Option<i64> {
        let k = j.checked_sub(1)?;
        if self.stats.has(Stats::LAST_CHANGE) {
            return Some(self.p.last_change[k]);
        }
        let at = (1..=k)
            .rev()
            .find(|&k| self.v[k] != self.v[k - 1])
            .unwrap_or(0);
        Some(self.ts[at])
    }

    /// The newest value change strictly inside `[i, j)`: (time, new value − old value).
    pub fn last_step(&self, i: usize, j: usize) -> Option<(i64, f64)> {
        if self.changes(i, j) == 0 {
            return None;
        }
        let at = self.last_change(j)?;
        let k = self.ts.partition_point(|&t| t < at);
        (k > i && k < j).then(|| (at, self.v[k] - self.v[k - 1]))
    }

    /// The largest value of `[i, j)`.
    pub fn max(&self, i: usize, j: usize) -> Option<f64> {
        if j == self.len() && self.stats.has(Stats::MAX) {
            return self.hi.from(i);
        }
        self.v[i..j].iter().copied().reduce(f64::max)
    }

    /// The smallest value of `[i, j)`.
    pub fn min(&self, i: usize, j: usize) -> Option<f64> {
        if j == self.len() && self.stats.has(Stats::MIN) {
            return self.lo.from(i);
        }
        self.v[i..j].iter().copied().reduce(f64::min)
    }

    /// The longest pause, in ms, that ended inside `[i, j)`: from an increase of the value
    /// to the next increase (the earlier one may lie before `i`); 0 when none ended there.
    pub fn longest_pause(&self, i: usize, j: usize) -> f64 {
        if j == self.len() && self.stats.has(Stats::PAUSES) {
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
        let mut s = Series::new(3_600_000, Stats::ALL);
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
    fn window_starts_match_a_binary_search() {
        // Bursts, long gaps and steady stretches: the guess from the mean spacing is wrong
        // in both directions.
        let mut s = Series::new(i64::MAX / 4, Stats::NONE);
        let mut t = 0i64;
        for k in 0..500i64 {
            t += match k % 50 {
                0 => 120_000,
                1..=9 => 10,
                _ => 1000,
            };
            s.push(t, k as f64);
        }
        let ts = s.times(0, s.len()).to_vec();
        for bound in (-5_000..t + 5_000).step_by(997) {
            for j in [ts.len(), ts.len() - 1, ts.len() / 2, 3, 0] {
                let want = ts[..j].partition_point(|&x| x <= bound);
                assert_eq!(s.first_after(bound, j), want, "bound {bound}, j {j}");
            }
        }
        for &x in &ts {
            let want = ts.partition_point(|&y| y <= x);
            assert_eq!(
                s.first_after(x, ts.len()),
                want,
                "at a point's own time {x}"
            );
        }
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
        let mut s = Series::new(10_000, Stats::ALL);
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
