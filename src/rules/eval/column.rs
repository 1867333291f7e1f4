//! A column of a series' kept points, stored narrow while every value fits exactly.
//!
//! A rule window of 30 minutes at 1 s holds 1 800 points per GPU and per process; with a
//! time and a value of 8 bytes each, the default rules' windows were most of the daemon's
//! heap after an hour (4.8 MB on 8 GPUs × 4 processes). Yet what they hold is small: times
//! within hours of each other and values that are whole numbers (utilisation, temperatures,
//! clocks, milliwatts) or memory in MiB (exact as an `f32` for any multiple of 8 KiB below
//! 128 GiB). A [`Column`] keeps them in 4 bytes — times as `u32` milliseconds after the
//! series' origin (49 days), values as `f32` when the `f32` is the same number — and switches
//! to 8 bytes at the first value that does not fit, until the column is rebuilt.
//!
//! Invariants: [`Column::get`] returns exactly what was pushed (a value is narrowed only when
//! widening it gives it back bit for bit), so no result of a rule depends on the storage; a
//! column narrows again only when it is rebuilt (a series' prune starts new columns).

/// A narrow storage type and the wide type it stands for.
pub trait Narrow: Copy {
    type Wide: Copy;
    /// `w` as the narrow type, if that is exact.
    fn narrow(w: Self::Wide) -> Option<Self>;
    fn widen(self) -> Self::Wide;
}

impl Narrow for f32 {
    type Wide = f64;
    fn narrow(w: f64) -> Option<f32> {
        let n = w as f32;
        (f64::from(n).to_bits() == w.to_bits()).then_some(n)
    }
    fn widen(self) -> f64 {
        f64::from(self)
    }
}

impl Narrow for u32 {
    type Wide = i64;
    fn narrow(w: i64) -> Option<u32> {
        u32::try_from(w).ok()
    }
    fn widen(self) -> i64 {
        i64::from(self)
    }
}

#[derive(Debug, Clone)]
pub enum Column<N: Narrow> {
    Narrow(Vec<N>),
    Wide(Vec<N::Wide>),
}

impl<N: Narrow> Default for Column<N> {
    fn default() -> Self {
        Self::Narrow(Vec::new())
    }
}

impl<N: Narrow> Column<N> {
    pub fn with_capacity(n: usize) -> Self {
        Self::Narrow(Vec::with_capacity(n))
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Narrow(v) => v.len(),
            Self::Wide(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        match self {
            Self::Narrow(v) => v.capacity(),
            Self::Wide(v) => v.capacity(),
        }
    }

    /// Bytes of the buffer (its capacity).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Self::Narrow(v) => v.capacity() * std::mem::size_of::<N>(),
            Self::Wide(v) => v.capacity() * std::mem::size_of::<N::Wide>(),
        }
    }

    /// The `k`th value. Panics when `k` is out of bounds, like a slice.
    pub fn get(&self, k: usize) -> N::Wide {
        match self {
            Self::Narrow(v) => v[k].widen(),
            Self::Wide(v) => v[k],
        }
    }

    pub fn last(&self) -> Option<N::Wide> {
        self.len().checked_sub(1).map(|k| self.get(k))
    }

    pub fn reserve_exact(&mut self, more: usize) {
        match self {
            Self::Narrow(v) => v.reserve_exact(more),
            Self::Wide(v) => v.reserve_exact(more),
        }
    }

    pub fn push(&mut self, w: N::Wide) {
        match self {
            Self::Wide(v) => v.push(w),
            Self::Narrow(v) => match N::narrow(w) {
                Some(n) => v.push(n),
                None => {
                    let mut wide = Vec::with_capacity(v.capacity().max(v.len() + 1));
                    wide.extend(v.iter().map(|n| n.widen()));
                    wide.push(w);
                    *self = Self::Wide(wide);
                }
            },
        }
    }

    /// The values of `[i, j)`.
    pub fn iter(&self, i: usize, j: usize) -> impl Iterator<Item = N::Wide> + '_ {
        (i..j).map(move |k| self.get(k))
    }

    /// The first index in `[lo, hi)` where `pred` is false, `pred` being true then false
    /// along the column (as `slice::partition_point`).
    pub fn partition_point(&self, lo: usize, hi: usize, pred: impl Fn(N::Wide) -> bool) -> usize {
        match self {
            Self::Narrow(v) => lo + v[lo..hi].partition_point(|n| pred(n.widen())),
            Self::Wide(v) => lo + v[lo..hi].partition_point(|w| pred(*w)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_stay_narrow_and_exact() {
        let mut c = Column::<f32>::default();
        for w in [
            0.0,
            -0.0,
            87.0,
            700_000.0,
            80.0 * 1024.0 * 1024.0 * 1024.0,
            0.5,
        ] {
            c.push(w);
        }
        assert!(matches!(c, Column::Narrow(_)));
        assert_eq!(
            c.get(1).to_bits(),
            (-0.0f64).to_bits(),
            "the sign of zero is kept"
        );
        assert_eq!(c.get(4), 80.0 * 1024.0 * 1024.0 * 1024.0);
    }

    #[test]
    fn the_first_value_that_does_not_fit_widens_the_column() {
        let mut c = Column::<f32>::default();
        c.push(1.0);
        c.push(0.1);
        c.push(16_777_217.0);
        assert!(matches!(c, Column::Wide(_)));
        assert_eq!(
            c.iter(0, 3).collect::<Vec<_>>(),
            vec![1.0, 0.1, 16_777_217.0]
        );
        let mut t = Column::<u32>::default();
        t.push(5);
        t.push(i64::from(u32::MAX) + 1);
        assert_eq!(
            t.iter(0, 2).collect::<Vec<_>>(),
            vec![5, i64::from(u32::MAX) + 1]
        );
        assert_eq!(t.partition_point(0, 2, |x| x <= 5), 1);
        assert_eq!(t.partition_point(1, 2, |x| x <= 5), 1);
    }
}
