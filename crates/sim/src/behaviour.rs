//! Metric behaviours: the shapes a value can follow over simulated time, the deterministic
//! noise added on top, and their closed-form prefix sums.
//!
//! Invariants:
//! - Every value is a pure function of `(shape, origin, noise key, tick)`: no state, no RNG, so
//!   the same scenario always yields the same numbers and any tick can be asked in any order.
//! - `value` and `sum` cost O(1) whatever the tick: sums are closed forms (arithmetic series for
//!   ramps, whole periods plus a remainder for sawtooths, a telescoping series for noise).
//! - Noise is `amp * (u(t + 1) - u(t))` with `u` a seeded hash in `[-0.5, 0.5)`: it stays within
//!   `[-amp, amp]`, has mean zero, and its sum over any range is `amp * (u(end) - u(start))`, so
//!   energy (the integral of power) stays exact even for noisy power.

/// The noise-free part of a behaviour, in the scenario's units, relative to an origin tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// The same value at every tick.
    Const(f64),
    /// Stays at `from` for `delay` ticks, moves linearly to `to` over `over` ticks, then holds `to`.
    Ramp {
        from: f64,
        to: f64,
        over: u64,
        delay: u64,
    },
    /// Stays at `low` for `delay` ticks, then rises linearly from `low` towards `high` and drops
    /// back every `period` ticks (an allocator that grows and frees).
    Sawtooth {
        low: f64,
        high: f64,
        period: u64,
        delay: u64,
    },
    /// Stays at `low` for `delay` ticks, then is `high` for the first `width` ticks of every
    /// `period` and `low` for the rest (short bursts on a quiet base).
    Pulse {
        low: f64,
        high: f64,
        period: u64,
        width: u64,
        delay: u64,
    },
}

/// The place of tick `local` in its period, after `delay` ticks at the start value (`None`
/// during the delay): the clock of the periodic shapes.
fn phase(local: u64, delay: u64, period: u64) -> Option<u64> {
    local.checked_sub(delay).map(|k| k % period)
}

/// `sum_{k=0}^{n-1}` of a periodic shape that holds `low` for `delay` ticks: whole periods
/// plus a remainder, `part(len)` summing the first `len` ticks of a period.
fn periodic_sum(n: u64, delay: u64, period: u64, low: f64, part: impl Fn(u64) -> f64) -> f64 {
    let d = n.min(delay);
    let m = n - d;
    let (q, r) = (m / period, m % period);
    d as f64 * low + q as f64 * part(period) + part(r)
}

/// `sum_{k=0}^{m-1} k` as an exact integer turned into f64 once.
fn tri(m: u64) -> f64 {
    let m = u128::from(m);
    (m * m.saturating_sub(1) / 2) as f64
}

impl Shape {
    /// Value `local` ticks after the origin.
    pub fn value(&self, local: u64) -> f64 {
        match *self {
            Shape::Const(v) => v,
            Shape::Ramp {
                from,
                to,
                over,
                delay,
            } => {
                let k = local.saturating_sub(delay);
                if k >= over {
                    to
                } else {
                    from + (to - from) * (k as f64) / (over as f64)
                }
            }
            Shape::Sawtooth {
                low,
                high,
                period,
                delay,
            } => phase(local, delay, period)
                .map_or(low, |k| low + (high - low) * (k as f64) / (period as f64)),
            Shape::Pulse {
                low,
                high,
                period,
                width,
                delay,
            } => match phase(local, delay, period) {
                Some(k) if k < width => high,
                _ => low,
            },
        }
    }

    /// `sum_{k=0}^{n-1} value(k)`, in O(1).
    pub fn sum(&self, n: u64) -> f64 {
        match *self {
            Shape::Const(v) => v * n as f64,
            Shape::Ramp {
                from,
                to,
                over,
                delay,
            } => {
                let d = n.min(delay);
                let m = n - d;
                let l = m.min(over);
                let ramp = l as f64 * from + (to - from) / over as f64 * tri(l);
                d as f64 * from + ramp + (m - l) as f64 * to
            }
            Shape::Sawtooth {
                low,
                high,
                period,
                delay,
            } => periodic_sum(n, delay, period, low, |len| {
                len as f64 * low + (high - low) / period as f64 * tri(len)
            }),
            Shape::Pulse {
                low,
                high,
                period,
                width,
                delay,
            } => periodic_sum(n, delay, period, low, |len| {
                let hi = len.min(width);
                hi as f64 * high + (len - hi) as f64 * low
            }),
        }
    }
}

/// SplitMix64 finaliser: a cheap, well-mixed 64-bit hash.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A key for a noise stream: seed, then any number of identifying parts (gpu, metric, ...).
pub fn noise_key(parts: &[u64]) -> u64 {
    parts.iter().fold(0x5EED_u64, |acc, p| mix(acc ^ mix(*p)))
}

/// Uniform in `[-0.5, 0.5)`, a pure function of `(key, tick)`.
pub fn unit(key: u64, tick: u64) -> f64 {
    let h = mix(key ^ mix(tick));
    (h >> 11) as f64 / (1u64 << 53) as f64 - 0.5
}

/// A resolved signal: `c0 + c1 * shape(t - origin) + noise(t)`, in the metric's scenario units.
///
/// Derived metrics (power from utilisation, ...) are affine maps of another signal's shape,
/// which is why the affine coefficients live here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Signal {
    pub c0: f64,
    pub c1: f64,
    pub shape: Shape,
    /// Tick at which the shape's local time is 0 (segment or process start).
    pub origin: u64,
    pub noise_amp: f64,
    pub noise_key: u64,
}

impl Signal {
    pub fn constant(v: f64) -> Signal {
        Signal {
            c0: 0.0,
            c1: 1.0,
            shape: Shape::Const(v),
            origin: 0,
            noise_amp: 0.0,
            noise_key: 0,
        }
    }

    /// The noise-free value at `tick` (ticks before the origin read as the origin's value).
    pub fn base(&self, tick: u64) -> f64 {
        self.c0 + self.c1 * self.shape.value(tick.saturating_sub(self.origin))
    }

    /// The noise at `tick`, within `[-noise_amp, noise_amp]`.
    pub fn noise(&self, tick: u64) -> f64 {
        if self.noise_amp == 0.0 {
            return 0.0;
        }
        self.noise_amp * (unit(self.noise_key, tick + 1) - unit(self.noise_key, tick))
    }

    pub fn value(&self, tick: u64) -> f64 {
        self.base(tick) + self.noise(tick)
    }

    /// `sum_{t=start}^{end-1} value(t)` in O(1); requires `origin <= start <= end`.
    pub fn sum(&self, start: u64, end: u64) -> f64 {
        if end <= start {
            return 0.0;
        }
        let (a, b) = (start - self.origin, end - self.origin);
        let shape = self.shape.sum(b) - self.shape.sum(a);
        let noise = if self.noise_amp == 0.0 {
            0.0
        } else {
            self.noise_amp * (unit(self.noise_key, end) - unit(self.noise_key, start))
        };
        self.c0 * (end - start) as f64 + self.c1 * shape + noise
    }

    /// This signal seen through `a + b * x` (keeps the noise of `self` scaled by `b`).
    pub fn affine(&self, a: f64, b: f64) -> Signal {
        Signal {
            c0: a + b * self.c0,
            c1: b * self.c1,
            noise_amp: self.noise_amp * b.abs(),
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(shape: &Shape, n: u64) -> f64 {
        (0..n).map(|k| shape.value(k)).sum()
    }

    #[test]
    fn pulse_values_and_sums() {
        let s = Shape::Pulse {
            low: 1.0,
            high: 40.0,
            period: 7,
            width: 2,
            delay: 3,
        };
        let v: Vec<f64> = (0..12).map(|k| s.value(k)).collect();
        assert_eq!(
            v,
            [
                1.0, 1.0, 1.0, 40.0, 40.0, 1.0, 1.0, 1.0, 1.0, 1.0, 40.0, 40.0
            ]
        );
        for n in 0..60 {
            assert_eq!(s.sum(n), brute(&s, n), "sum of the first {n}");
        }
    }

    #[test]
    fn ramp_values_and_plateau() {
        let s = Shape::Ramp {
            from: 10.0,
            to: 20.0,
            over: 10,
            delay: 5,
        };
        assert_eq!(s.value(0), 10.0);
        assert_eq!(s.value(5), 10.0);
        assert_eq!(s.value(10), 15.0);
        assert_eq!(s.value(15), 20.0);
        assert_eq!(s.value(1_000_000), 20.0);
    }

    #[test]
    fn sawtooth_values() {
        let s = Shape::Sawtooth {
            low: 0.0,
            high: 100.0,
            period: 4,
            delay: 2,
        };
        let v: Vec<f64> = (0..8).map(|k| s.value(k)).collect();
        assert_eq!(v, vec![0.0, 0.0, 0.0, 25.0, 50.0, 75.0, 0.0, 25.0]);
    }

    #[test]
    fn closed_form_sums_match_brute_force() {
        let shapes = [
            Shape::Const(3.5),
            Shape::Ramp {
                from: 1.0,
                to: -7.0,
                over: 13,
                delay: 4,
            },
            Shape::Sawtooth {
                low: 2.0,
                high: 9.0,
                period: 7,
                delay: 3,
            },
        ];
        for s in &shapes {
            for n in [0, 1, 2, 3, 4, 5, 12, 13, 17, 18, 40, 101] {
                let (a, b) = (s.sum(n), brute(s, n));
                assert!((a - b).abs() < 1e-9, "{s:?} n={n}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn noise_is_deterministic_bounded_and_telescopes() {
        let sig = Signal {
            noise_amp: 5.0,
            noise_key: noise_key(&[42, 1, 2]),
            ..Signal::constant(100.0)
        };
        let again = sig;
        for t in 0..1000 {
            assert_eq!(sig.value(t), again.value(t));
            assert!((sig.value(t) - 100.0).abs() <= 5.0);
        }
        let brute: f64 = (17..523).map(|t| sig.value(t)).sum();
        assert!((sig.sum(17, 523) - brute).abs() < 1e-6);
        // Different keys give different streams.
        let other = Signal {
            noise_key: noise_key(&[43, 1, 2]),
            ..sig
        };
        assert!((0..50).any(|t| other.value(t) != sig.value(t)));
    }

    #[test]
    fn huge_ticks_are_cheap_and_finite() {
        let s = Shape::Sawtooth {
            low: 0.0,
            high: 1.0,
            period: 3,
            delay: 0,
        };
        let v = s.sum(1_000_000_000_000);
        assert!(v.is_finite());
        assert!((v / 1e12 - 1.0 / 3.0).abs() < 1e-6);
    }
}
