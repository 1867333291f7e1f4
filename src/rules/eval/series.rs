//! One metric of one entity (GPU, process, training series) in memory, with block sums so
//! that window aggregates cost a few dozen additions whatever the window.
//!
//! Invariants:
//! - Points are appended in strictly increasing time; an older or equal timestamp is ignored
//!   (late data never rewrites what rules already saw).
//! - Only points with data are stored: a NULL sample is a gap, not a zero.
//! - Points older than `keep_ms` before the newest point are dropped (amortised O(1)); the
//!   block sums are rebuilt from the kept points then, so sums never grow without bound.
//! - Windows are `(t - w, t]`, like Prometheus range selectors.
//! - Moment sums (Σy, Σy², Σx, Σx², Σxy, counter increase) are kept per block of
//!   [`BLOCK`] points, not per point: a window's sum is the difference of two prefixes, each
//!   the nearer block boundary's sums and a scan of at most half a block (none for a window
//!   ending at the newest point). That costs 6 bytes a point instead of 48.
//! - Windows that end at the newest point (every rule evaluation) get their maximum, minimum
//!   and longest pause from suffix stacks keyed by time, in O(log n); older windows scan.
//! - What a pause or step rule reads over hours — the time and size of the newest change and
//!   the pauses — is tracked as the points arrive and kept for `summary_ms`, which may be
//!   much longer than `keep_ms`: a training step read as `max_unchanged_for(step[6h])` and
//!   `changes(step[30m])` keeps 30 minutes of points, not six hours.
//! - Only the sums and stacks of the series' [`Stats`] are kept; any other statistic scans
//!   its window (the same answer up to rounding).

use super::column::Column;
use super::suffix::SuffixExtreme;

/// Points per block of moment sums.
const BLOCK: usize = 8;

/// The window statistics a series keeps sums (or suffix stacks) for. Every accessor answers
/// whatever the set: what is not kept is computed by a scan of the window, so the set decides
/// only the cost, never a result. A series pays memory and push time for what its rules read,
/// nothing else (see `needs.rs`).
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
    pub const MAX: Stats = Stats(1 << 5);
    pub const MIN: Stats = Stats(1 << 6);
    pub const PAUSES: Stats = Stats(1 << 7);
    /// Everything a least-squares fit reads.
    pub const FIT: Stats = Stats(1 | 1 << 1 | 1 << 2);
    pub const ALL: Stats = Stats((1 << 8) - 1);
    /// The statistics kept as block sums.
    const MOMENTS: Stats = Stats(1 | 1 << 1 | 1 << 2 | 1 << 4);

    pub const fn union(self, o: Stats) -> Stats {
        Stats(self.0 | o.0)
    }

    pub const fn has(self, o: Stats) -> bool {
        self.0 & o.0 == o.0
    }

    const fn any(self, o: Stats) -> bool {
        self.0 & o.0 != 0
    }
}

/// The sums of a run of points.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Moments {
    sy: f64,
    syy: f64,
    sx: f64,
    sxx: f64,
    sxy: f64,
    /// Counter increase, resets handled like Prometheus (a drop counts the new value).
    inc: f64,
}

impl Moments {
    fn add(&mut self, x: f64, y: f64, inc: f64) {
        self.sy += y;
        self.syy += y * y;
        self.sx += x;
        self.sxx += x * x;
        self.sxy += x * y;
        self.inc += inc;
    }

    fn minus(self, o: Moments) -> Moments {
        Moments {
            sy: self.sy - o.sy,
            syy: self.syy - o.syy,
            sx: self.sx - o.sx,
            sxx: self.sxx - o.sxx,
            sxy: self.sxy - o.sxy,
            inc: self.inc - o.inc,
        }
    }
}

/// The newest value change: (time of the point before it, time of the point that changed,
/// new value − old value).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Change {
    before: i64,
    at: i64,
    delta: f64,
}

#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Times of the kept points, in ms after `origin` (4 bytes a point while they fit).
    ts: Column<u32>,
    /// Values of the kept points (4 bytes a point while they are exactly `f32`s).
    v: Column<f32>,
    /// `blocks[b]`: the moments of the kept points `[0, b * BLOCK)` (empty unless the series
    /// keeps a moment statistic).
    blocks: Vec<Moments>,
    /// The moments of every kept point.
    total: Moments,
    /// Number of value changes between consecutive kept points up to each point.
    changes: Vec<u32>,
    /// Maxima and minima of every suffix (windows ending at the newest point), keyed by time.
    hi: SuffixExtreme,
    lo: SuffixExtreme,
    /// Pauses, keyed by the time of the point before the one that ended them: a pause is the
    /// time from one increase of the value to the next (see [`Series::longest_pause`]).
    pauses: SuffixExtreme,
    /// Time of the first point the series ever had (its "last change" until one happens).
    first_ts: i64,
    /// The newest value change (`None`: the value never changed); also where the pause
    /// tracker's current pause started, and whether the value last went up.
    newest_change: Option<Change>,
    /// Regression x origin (ms): x = (ts - origin) / 1000 seconds.
    origin: i64,
    keep_ms: i64,
    summary_ms: i64,
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
    /// A series keeping `keep_ms` of points and the sums of `stats`.
    pub fn new(keep_ms: i64, stats: Stats) -> Self {
        Self::with_summary(keep_ms, keep_ms, stats)
    }

    /// A series keeping `keep_ms` of points and its change and pause summaries for
    /// `summary_ms` (at least `keep_ms`).
    pub fn with_summary(keep_ms: i64, summary_ms: i64, stats: Stats) -> Self {
        let keep_ms = keep_ms.max(1);
        Self {
            keep_ms,
            summary_ms: summary_ms.max(keep_ms),
            stats,
            ..Self::default()
        }
    }

    /// Keeps the same points under another tuning, rebuilt from them (what was already
    /// dropped stays dropped); returns whether anything changed.
    pub fn retune(&mut self, keep_ms: i64, summary_ms: i64, stats: Stats) -> bool {
        let mut s = Series::with_summary(keep_ms, summary_ms, stats);
        if (s.keep_ms, s.summary_ms, s.stats) == (self.keep_ms, self.summary_ms, self.stats) {
            return false;
        }
        for k in 0..self.len() {
            s.push(self.time(k), self.value(k));
        }
        *self = s;
        true
    }

    pub fn len(&self) -> usize {
        self.ts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    pub fn last(&self) -> Option<(i64, f64)> {
        let k = self.len().checked_sub(1)?;
        Some((self.time(k), self.value(k)))
    }

    /// Appends a point; ignores NaN/inf and points not newer than the last one.
    pub fn push(&mut self, ts: i64, v: f64) {
        if !v.is_finite() || self.last().is_some_and(|(l, _)| ts <= l) {
            return;
        }
        let prev = self.last();
        if prev.is_none() {
            // Only the first point: a prune always keeps the newest.
            self.first_ts = ts;
        }
        if let Some((pt, p)) = prev
            && p != v
        {
            // A pause runs from one increase to the next: a restart (a decrease) and the
            // time before the first step after it are not pauses of a running job.
            if let Some(c) = self.newest_change
                && self.stats.has(Stats::PAUSES)
                && v > p
                && c.delta > 0.0
            {
                self.pauses.push_max(pt, (ts - c.at) as f64);
            }
            self.newest_change = Some(Change {
                before: pt,
                at: ts,
                delta: v - p,
            });
        }
        self.append(ts, v);
        self.prune(ts);
    }

    /// Moments of point `k` (x, y and its counter increase).
    fn point(&self, k: usize) -> (f64, f64, f64) {
        let y = self.v.get(k);
        let inc = match k.checked_sub(1).map(|p| self.v.get(p)) {
            Some(p) if y >= p => y - p,
            Some(_) => y,
            None => 0.0,
        };
        (self.ts.get(k) as f64 / 1000.0, y, inc)
    }

    /// Appends to the kept points and their sums (not the summaries: `push` did those).
    fn append(&mut self, ts: i64, v: f64) {
        if self.ts.is_empty() {
            self.origin = ts;
        }
        let st = self.stats;
        if self.ts.len() == self.ts.capacity() {
            let more = self.next_capacity() - self.ts.len();
            self.ts.reserve_exact(more);
            self.v.reserve_exact(more);
            if st.has(Stats::CHANGES) {
                self.changes.reserve_exact(more);
            }
        }
        let changed = self.v.last().is_some_and(|p| p != v);
        if st.has(Stats::CHANGES) {
            let ch = self.changes.last().copied().unwrap_or(0);
            self.changes.push(ch + u32::from(changed));
        }
        if st.has(Stats::MAX) {
            self.hi.push_max(ts, v);
        }
        if st.has(Stats::MIN) {
            self.lo.push_min(ts, v);
        }
        self.ts.push(ts - self.origin);
        self.v.push(v);
        if st.any(Stats::MOMENTS) {
            if self.blocks.is_empty() {
                self.blocks.push(Moments::default());
            }
            let (x, y, inc) = self.point(self.ts.len() - 1);
            self.total.add(x, y, inc);
            if self.ts.len().is_multiple_of(BLOCK) {
                self.blocks.push(self.total);
            }
        }
    }

    /// The buffers' next size while a window fills: what the points seen so far say 4/3 of a
    /// window holds (the most a buffer holds between prunes), never more than double, at
    /// least an eighth more. Doubling blindly would leave up to half of every full window's
    /// buffer unused until its first prune.
    fn next_capacity(&self) -> usize {
        let n = self.ts.len();
        let span = match self.ts.last() {
            Some(b) if n >= 16 && b > 0 => b as f64,
            _ => return (2 * n).max(16),
        };
        let window = (4.0 / 3.0 * self.keep_ms as f64 * n as f64 / span) as usize + 8;
        window.clamp(n + n / 8 + 1, 2 * n)
    }

    /// Drops points older than `keep_ms` before `now` when a quarter of the buffer is dead
    /// (amortised: three pushes of work per push), and summaries older than `summary_ms`.
    /// The buffers are then sized for the kept points plus the third more that arrive before
    /// the next prune, so a full window holds at most 4/3 of a window of points and never
    /// grows by doubling. The test is one comparison: a quarter of the buffer is dead exactly
    /// when the point a quarter of the way in is.
    fn prune(&mut self, now: i64) {
        let quarter = self.ts.len().div_ceil(4);
        if quarter == 0 || self.time(quarter - 1) >= now - self.keep_ms {
            return;
        }
        let cut = self.first_after(now - self.keep_ms - 1, self.len());
        self.pauses.forget_before(now - self.summary_ms);
        let ts: Vec<i64> = (cut..self.len()).map(|k| self.time(k)).collect();
        let v: Vec<f64> = self.v.iter(cut, self.len()).collect();
        let n = ts.len() + ts.len() / 3 + 4;
        let st = self.stats;
        self.ts = Column::with_capacity(n);
        self.v = Column::with_capacity(n);
        self.changes = Vec::with_capacity(if st.has(Stats::CHANGES) { n } else { 0 });
        self.blocks = Vec::new();
        self.total = Moments::default();
        self.hi = SuffixExtreme::default();
        self.lo = SuffixExtreme::default();
        for (t, x) in ts.into_iter().zip(v) {
            self.append(t, x);
        }
    }

    /// Index range `[i, j)` of the points in `(to - w, to]`.
    pub fn range(&self, to: i64, w_ms: i64) -> (usize, usize) {
        let j = match self.last() {
            Some((l, _)) if l <= to => self.len(),
            _ => self.first_after(to, self.len()),
        };
        let i = self.first_after(to - w_ms, j);
        (i, j.max(i))
    }

    /// The first index (below `j`) whose time is after `bound`: a guess from the mean
    /// spacing, then a gallop to the exact place, so a window of a regularly sampled series
    /// costs a few probes near its start instead of a binary search over the whole buffer.
    fn first_after(&self, bound: i64, j: usize) -> usize {
        // In the column's terms: ms after the origin.
        let bound = bound.saturating_sub(self.origin);
        let ts = &self.ts;
        let n = j;
        if n < 16 {
            return ts.partition_point(0, n, |t| t <= bound);
        }
        let (first, last) = (ts.get(0), ts.get(n - 1));
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
        if ts.get(guess) <= bound {
            lo = guess;
            let mut step = 1;
            hi = (guess + step).min(n - 1);
            while ts.get(hi) <= bound {
                lo = hi;
                step *= 2;
                hi = (hi + step).min(n - 1);
            }
        } else {
            hi = guess;
            let mut step = 1;
            lo = guess.saturating_sub(step);
            while ts.get(lo) > bound {
                hi = lo;
                if lo == 0 {
                    return 0;
                }
                step *= 2;
                lo = lo.saturating_sub(step);
            }
        }
        ts.partition_point(lo + 1, hi, |t| t <= bound)
    }

    /// The moments of the kept points `[0, k)`: the nearer block boundary's prefix (or the
    /// total) and a scan of at most half a block between it and `k`.
    fn prefix(&self, k: usize) -> Moments {
        let n = self.ts.len();
        if k == n {
            return self.total;
        }
        let b = k / BLOCK;
        let (start, end) = (b * BLOCK, ((b + 1) * BLOCK).min(n));
        if k - start <= end - k {
            let mut m = self.blocks.get(b).copied().unwrap_or_default();
            for p in start..k {
                let (x, y, inc) = self.point(p);
                m.add(x, y, inc);
            }
            return m;
        }
        let mut rest = Moments::default();
        for p in k..end {
            let (x, y, inc) = self.point(p);
            rest.add(x, y, inc);
        }
        let upto = if end == n {
            self.total
        } else {
            self.blocks.get(b + 1).copied().unwrap_or_default()
        };
        upto.minus(rest)
    }

    /// The moments of `[i, j)` from the block sums, or by a scan when they are not kept.
    fn moments(&self, i: usize, j: usize) -> Moments {
        if self.stats.any(Stats::MOMENTS) {
            return self.prefix(j).minus(self.prefix(i));
        }
        let mut m = Moments::default();
        for p in i..j {
            let (x, y, inc) = self.point(p);
            m.add(x, y, inc);
        }
        m
    }

    /// Σy over `[i, j)`.
    pub fn sum(&self, i: usize, j: usize) -> f64 {
        if self.stats.has(Stats::SUM) {
            self.moments(i, j).sy
        } else {
            self.v.iter(i, j).sum()
        }
    }

    /// Moment sums over `[i, j)`.
    pub fn sums(&self, i: usize, j: usize, to: i64) -> Sums {
        let m = self.moments(i, j);
        Sums {
            n: (j - i) as f64,
            sy: m.sy,
            syy: m.syy,
            sx: m.sx,
            sxx: m.sxx,
            sxy: m.sxy,
            x_now: (to - self.origin) as f64 / 1000.0,
        }
    }

    /// The values of `[i, j)`.
    pub fn values(&self, i: usize, j: usize) -> Vec<f64> {
        self.v.iter(i, j).collect()
    }

    /// The value of point `k`.
    pub fn value(&self, k: usize) -> f64 {
        self.v.get(k)
    }

    /// The time of point `k`.
    pub fn time(&self, k: usize) -> i64 {
        self.origin + self.ts.get(k)
    }

    /// Value changes strictly inside `[i, j)` (the change into point i is not counted).
    pub fn changes(&self, i: usize, j: usize) -> u32 {
        if j <= i + 1 {
            return 0;
        }
        if self.stats.has(Stats::CHANGES) {
            return self.changes[j - 1] - self.changes[i];
        }
        (i + 1..j)
            .filter(|&k| self.v.get(k) != self.v.get(k - 1))
            .count() as u32
    }

    /// Counter increase over `[i, j)` (from point i to point j-1).
    pub fn increase(&self, i: usize, j: usize) -> f64 {
        if j <= i + 1 {
            return 0.0;
        }
        if self.stats.has(Stats::INCREASE) {
            return self.prefix(j).inc - self.prefix(i + 1).inc;
        }
        (i + 1..j)
            .map(|k| {
                let (a, b) = (self.v.get(k - 1), self.v.get(k));
                if b >= a { b - a } else { b }
            })
            .sum()
    }

    /// Time of the last value change at or before point `j - 1`. At the newest point that is
    /// the newest change the series ever saw (the first point's time when none); before it,
    /// the last change among the kept points (the first kept point's time when none).
    pub fn last_change(&self, j: usize) -> Option<i64> {
        let k = j.checked_sub(1)?;
        if j == self.len() {
            return Some(self.newest_change.map_or(self.first_ts, |c| c.at));
        }
        let at = (1..=k)
            .rev()
            .find(|&k| self.v.get(k) != self.v.get(k - 1))
            .unwrap_or(0);
        Some(self.time(at))
    }

    /// The newest value change: (its time, new value − old value); `None` when the value
    /// never changed.
    pub fn newest_change(&self) -> Option<(i64, f64)> {
        self.newest_change.map(|c| (c.at, c.delta))
    }

    /// The newest value change strictly inside the window `[i, j)` that starts after
    /// `from`: (time, new value − old value). At the newest point it comes from the change
    /// summary, so a window longer than the kept points still sees it.
    pub fn last_step(&self, i: usize, j: usize, from: i64) -> Option<(i64, f64)> {
        if j == self.len() && j > 0 {
            let c = self.newest_change?;
            return (c.before > from).then_some((c.at, c.delta));
        }
        let k = (i + 1..j)
            .rev()
            .find(|&k| self.v.get(k) != self.v.get(k - 1))?;
        Some((self.time(k), self.v.get(k) - self.v.get(k - 1)))
    }

    /// The largest value of `[i, j)`.
    pub fn max(&self, i: usize, j: usize) -> Option<f64> {
        if j == self.len() && i < j && self.stats.has(Stats::MAX) {
            return self.hi.from(self.time(i));
        }
        self.v.iter(i, j).reduce(f64::max)
    }

    /// The smallest value of `[i, j)`.
    pub fn min(&self, i: usize, j: usize) -> Option<f64> {
        if j == self.len() && i < j && self.stats.has(Stats::MIN) {
            return self.lo.from(self.time(i));
        }
        self.v.iter(i, j).reduce(f64::min)
    }

    /// The longest pause, in ms, that ended inside the window `[i, j)` starting after
    /// `from`: from an increase of the value to the next increase (the earlier one may lie
    /// before the window); 0 when none ended there. A pause ended by the window's first
    /// point began before it, which `changes` would not count: it is skipped. At the newest
    /// point it comes from the pause summary (a window longer than the kept points included);
    /// before it, a scan sees only the kept points.
    pub fn longest_pause(&self, i: usize, j: usize, from: i64) -> f64 {
        if j == self.len() && self.stats.has(Stats::PAUSES) {
            // Keyed by the point before the ending one: that point is inside the window.
            return self.pauses.from(from + 1).unwrap_or(0.0);
        }
        let mut longest = 0i64;
        let mut up = false;
        let mut since: Option<i64> = None;
        for k in 1..j {
            let (a, b) = (self.v.get(k - 1), self.v.get(k));
            if a == b {
                continue;
            }
            if b > a
                && up
                && k > i
                && let Some(s) = since
            {
                longest = longest.max(self.time(k) - s);
            }
            up = b > a;
            since = Some(self.time(k));
        }
        longest as f64
    }

    /// Bytes held by the series' buffers (capacity, not length).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.ts.heap_bytes()
            + self.v.heap_bytes()
            + self.blocks.capacity() * size_of::<Moments>()
            + self.changes.capacity() * size_of::<u32>()
            + (self.hi.entries() + self.lo.entries() + self.pauses.entries()) * 16
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
        let ts: Vec<i64> = (0..s.len()).map(|k| s.time(k)).collect();
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
    fn a_full_window_never_holds_more_than_its_bound() {
        // 30 minutes at 1 s: at most 4/3 of a window of points between prunes, and the buffers
        // sized for that, not doubled past it.
        let mut s = Series::new(1_800_000, Stats::ALL);
        let mut most = 0;
        for k in 0..10_800i64 {
            s.push(k * 1000, (k % 17) as f64);
            most = most.max(s.ts.capacity());
        }
        assert!(most <= 2_420, "buffer capacity {most}");
        assert!(s.len() >= 1_800, "the window is kept: {}", s.len());
    }

    #[test]
    fn points_that_do_not_fit_in_four_bytes_are_kept_exactly() {
        // Values that are not f32s (a byte count that is no multiple of 8 KiB at 80 GB, a
        // fraction) and times more than 49 days apart within one window.
        let day = 86_400_000i64;
        let mut s = Series::new(100 * day, Stats::ALL);
        let pts = [
            (0, 1.0),
            (10 * day, 85_899_345_921.0),
            (60 * day, 0.1),
            (70 * day, 2.0),
        ];
        for &(t, v) in &pts {
            s.push(t, v);
        }
        let got: Vec<(i64, f64)> = (0..s.len()).map(|k| (s.time(k), s.value(k))).collect();
        assert_eq!(got, pts);
        assert_eq!(s.range(70 * day, 15 * day), (2, 4));
        assert_eq!(s.max(0, 4), Some(85_899_345_921.0));
    }

    #[test]
    fn whole_numbers_cost_four_bytes_a_value() {
        let mut narrow = Series::new(1_800_000, Stats::NONE);
        let mut wide = Series::new(1_800_000, Stats::NONE);
        for k in 0..1800i64 {
            narrow.push(k * 1000, (k % 100) as f64);
            wide.push(k * 1000, (k % 100) as f64 + 0.1);
        }
        assert_eq!(narrow.value(1799), 99.0);
        assert_eq!(wide.value(1799), 99.1);
        assert!(narrow.heap_bytes() * 3 <= wide.heap_bytes() * 2);
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
