//! The statistics behind the window functions: least squares with r² and the slope's
//! p-value, Mann–Kendall and Theil–Sen on downsampled data, quantiles. Distributions come
//! from `statrs`.
//!
//! Invariant: every function returns `None` ("no data") rather than a made-up number when
//! the input cannot support the statistic (too few points, zero variance in x).

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use super::series::Sums;

/// A least-squares line through the window's points, x in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub slope: f64,
    /// Fitted value at the evaluation time.
    pub y_now: f64,
    pub r2: f64,
    pub p_value: Option<f64>,
}

pub fn fit(s: &Sums) -> Option<Fit> {
    if s.n < 2.0 {
        return None;
    }
    let (xm, ym) = (s.sx / s.n, s.sy / s.n);
    let sxx = s.sxx - s.sx * xm;
    let sxy = s.sxy - s.sx * ym;
    let syy = (s.syy - s.sy * ym).max(0.0);
    if sxx <= f64::EPSILON * s.sxx.abs().max(1.0) {
        return None;
    }
    let slope = sxy / sxx;
    let r2 = if syy <= f64::EPSILON * s.syy.abs().max(1.0) {
        0.0
    } else {
        (sxy * sxy / (sxx * syy)).clamp(0.0, 1.0)
    };
    let p_value = (s.n > 2.0)
        .then(|| {
            let resid = (syy - slope * sxy).max(0.0) / (s.n - 2.0);
            let se = (resid / sxx).sqrt();
            if se == 0.0 {
                return Some(if slope == 0.0 { 1.0 } else { 0.0 });
            }
            let t = (slope / se).abs();
            let dist = StudentsT::new(0.0, 1.0, s.n - 2.0).ok()?;
            Some((2.0 * (1.0 - dist.cdf(t))).clamp(0.0, 1.0))
        })
        .flatten();
    Some(Fit {
        slope,
        y_now: ym + slope * (s.x_now - xm),
        r2,
        p_value,
    })
}

/// Mann–Kendall S, its tie-corrected variance, n.
fn mann_kendall_s(y: &[f64]) -> (f64, f64, f64) {
    let n = y.len();
    let mut s = 0.0;
    for i in 0..n {
        for j in i + 1..n {
            s += (y[j] - y[i]).signum() * f64::from(u8::from(y[j] != y[i]));
        }
    }
    let mut sorted = y.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut ties = 0.0;
    let mut k = 0;
    while k < n {
        let mut m = k + 1;
        while m < n && sorted[m] == sorted[k] {
            m += 1;
        }
        let t = (m - k) as f64;
        ties += t * (t - 1.0) * (2.0 * t + 5.0);
        k = m;
    }
    let nf = n as f64;
    (s, (nf * (nf - 1.0) * (2.0 * nf + 5.0) - ties) / 18.0, nf)
}

/// Two-sided p-value of the Mann–Kendall test (normal approximation with continuity
/// correction); `None` below 4 points.
pub fn mann_kendall_p(y: &[f64]) -> Option<f64> {
    if y.len() < 4 {
        return None;
    }
    let (s, var, _) = mann_kendall_s(y);
    if var <= 0.0 {
        return Some(1.0);
    }
    let z = if s > 0.0 {
        (s - 1.0) / var.sqrt()
    } else if s < 0.0 {
        (s + 1.0) / var.sqrt()
    } else {
        0.0
    };
    let normal = Normal::new(0.0, 1.0).ok()?;
    Some((2.0 * (1.0 - normal.cdf(z.abs()))).clamp(0.0, 1.0))
}

/// Kendall's tau of the series against time: S / (n(n-1)/2), in -1..1.
pub fn kendall_tau(y: &[f64]) -> Option<f64> {
    if y.len() < 2 {
        return None;
    }
    let (s, _, n) = mann_kendall_s(y);
    Some(s / (n * (n - 1.0) / 2.0))
}

/// Theil–Sen slope: the median of pairwise slopes, units per second of `t_s`.
pub fn theil_sen(t_s: &[f64], y: &[f64]) -> Option<f64> {
    let n = y.len().min(t_s.len());
    if n < 2 {
        return None;
    }
    let mut slopes = Vec::with_capacity(n * (n - 1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            let dt = t_s[j] - t_s[i];
            if dt != 0.0 {
                slopes.push((y[j] - y[i]) / dt);
            }
        }
    }
    median(&mut slopes)
}

/// The largest fall below the running maximum (0 for a series that never falls; no data
/// when empty).
pub fn drawdown(y: &[f64]) -> Option<f64> {
    let mut peak = *y.first()?;
    let mut worst = 0.0f64;
    for &v in y {
        peak = peak.max(v);
        worst = worst.max(peak - v);
    }
    Some(worst)
}

pub fn median(v: &mut [f64]) -> Option<f64> {
    quantile(v, 0.5)
}

/// Quantile with linear interpolation between closest ranks (Prometheus's `quantile_over_time`).
pub fn quantile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = q * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums(points: &[(f64, f64)], x_now: f64) -> Sums {
        let mut s = Sums {
            x_now,
            ..Sums::default()
        };
        for &(x, y) in points {
            s.n += 1.0;
            s.sx += x;
            s.sy += y;
            s.sxx += x * x;
            s.sxy += x * y;
            s.syy += y * y;
        }
        s
    }

    #[test]
    fn a_perfect_line() {
        let pts: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 3.0 + 2.0 * x as f64)).collect();
        let f = fit(&sums(&pts, 9.0)).expect("fit");
        assert!((f.slope - 2.0).abs() < 1e-9);
        assert!((f.y_now - 21.0).abs() < 1e-9);
        assert!((f.r2 - 1.0).abs() < 1e-9);
        assert!(f.p_value.expect("p") < 1e-6);
    }

    #[test]
    fn noise_has_no_significant_slope() {
        let ys = [5.0, 3.0, 6.0, 2.0, 5.0, 4.0, 3.0, 6.0, 4.0, 5.0];
        let pts: Vec<(f64, f64)> = ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect();
        let f = fit(&sums(&pts, 9.0)).expect("fit");
        assert!(f.p_value.expect("p") > 0.3, "{f:?}");
        assert!(f.r2 < 0.2);
        assert!(mann_kendall_p(&ys).expect("p") > 0.3);
    }

    #[test]
    fn flat_and_degenerate_inputs() {
        assert_eq!(fit(&sums(&[(1.0, 1.0)], 1.0)), None);
        assert_eq!(
            fit(&sums(&[(1.0, 1.0), (1.0, 2.0)], 1.0)),
            None,
            "no spread in x"
        );
        let flat = fit(&sums(&[(0.0, 4.0), (1.0, 4.0), (2.0, 4.0)], 2.0)).expect("fit");
        assert_eq!((flat.slope, flat.r2), (0.0, 0.0));
        assert_eq!(mann_kendall_p(&[1.0, 2.0]), None);
    }

    #[test]
    fn mann_kendall_matches_a_hand_computed_case() {
        // y = 1..=10 strictly increasing: S = 45, var = 10*9*25/18 = 125, z = 44/sqrt(125)
        let y: Vec<f64> = (1..=10).map(f64::from).collect();
        let p = mann_kendall_p(&y).expect("p");
        let z: f64 = 44.0 / 125f64.sqrt();
        let want = 2.0 * (1.0 - Normal::new(0.0, 1.0).expect("normal").cdf(z));
        assert!((p - want).abs() < 1e-12, "{p} vs {want}");
        assert_eq!(kendall_tau(&y), Some(1.0));
    }

    #[test]
    fn theil_sen_ignores_an_outlier() {
        let t: Vec<f64> = (0..9).map(f64::from).collect();
        let mut y: Vec<f64> = t.iter().map(|x| 2.0 * x).collect();
        y[4] = 100.0;
        assert_eq!(theil_sen(&t, &y), Some(2.0));
    }

    #[test]
    fn quantiles_interpolate() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&mut v, 0.5), Some(2.5));
        assert_eq!(quantile(&mut v, 1.0), Some(4.0));
        assert_eq!(quantile(&mut v, 0.0), Some(1.0));
        assert_eq!(quantile(&mut [], 0.5), None);
    }
}
