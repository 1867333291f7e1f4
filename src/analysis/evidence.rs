//! The numbers an analysis reasons from ([`Derived`]: the alert's GPU before vs during, its
//! busy power level, the clock-event reasons during, when the step stopped) and the evidence
//! list shown with their values.
//!
//! Invariants: a number that cannot be computed is `None` and prints as "unknown"; what is
//! missing is added to `unknown`, never replaced by 0.

use super::facts::Facts;
use super::{Evidence, text};
use crate::model::TsMs;
use crate::store::analysis::GpuPoint;

/// Summary numbers of the alert's GPU, before and during.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Derived {
    pub util_before: Option<f64>,
    pub util_during: Option<f64>,
    pub util_during_min: Option<f64>,
    pub power_during: Option<f64>,
    /// The 90th percentile of power before the start: the GPU's busy level.
    pub power_busy: Option<f64>,
    pub power_limit: Option<f64>,
    pub temp_during_max: Option<f64>,
    pub temp_before: Option<f64>,
    pub clock_before: Option<f64>,
    pub clock_during: Option<f64>,
    pub mem_during_max: Option<f64>,
    /// Clock-event reasons set in some sample during the alert.
    pub throttle_during: Vec<&'static str>,
    /// When the joined step series last changed before the start, and its value then.
    pub step_stopped: Option<(TsMs, f64)>,
    pub unknown: Vec<String>,
}

pub(crate) fn avg(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, s) = v.fold((0u64, 0.0), |(n, s), x| (n + 1, s + x));
    (n > 0).then(|| s / n as f64)
}

pub(crate) fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v.get(i).copied()
}

fn field(points: &[GpuPoint], f: fn(&GpuPoint) -> Option<f64>) -> Vec<f64> {
    points
        .iter()
        .filter(|p| p.status == 0)
        .filter_map(f)
        .collect()
}

impl Derived {
    pub fn of(f: &Facts) -> Derived {
        let split = f.points.partition_point(|p| p.ts_ms < f.start);
        let (before, during) = f.points.split_at(split);
        let mut d = Derived {
            util_before: avg(field(before, |p| p.util).into_iter()),
            util_during: avg(field(during, |p| p.util).into_iter()),
            util_during_min: field(during, |p| p.util).into_iter().reduce(f64::min),
            power_during: avg(field(during, |p| p.power_w).into_iter()),
            power_busy: quantile(field(before, |p| p.power_w), 0.9),
            power_limit: f.points.iter().rev().find_map(|p| p.power_limit_w),
            temp_during_max: field(during, |p| p.temp).into_iter().reduce(f64::max),
            temp_before: avg(field(before, |p| p.temp).into_iter()),
            clock_before: avg(field(before, |p| p.clock_sm).into_iter()),
            clock_during: avg(field(during, |p| p.clock_sm).into_iter()),
            mem_during_max: field(during, |p| p.mem_used_mib)
                .into_iter()
                .reduce(f64::max),
            ..Default::default()
        };
        let mask = during
            .iter()
            .filter_map(|p| p.throttle)
            .fold(0, |a, b| a | b);
        d.throttle_during = crate::gpu_health::clock_events::decode(mask)
            .filter(|r| r.bit != crate::gpu_health::clock_events::GPU_IDLE)
            .map(|r| r.name)
            .collect();
        d.step_stopped = f
            .training
            .iter()
            .filter(|t| t.name == "training_step")
            .filter_map(|t| {
                let at = t.last_change_before()?;
                let v = t.before.iter().find(|p| p.0 == at)?.1;
                Some((at, v))
            })
            .min_by_key(|x| x.0)
            // A step that moved in the last minute before the start has not stopped.
            .filter(|(at, _)| f.start - at >= 60_000);
        if during.is_empty() {
            d.unknown.push(
                "no GPU samples during the alert (the GPU did not answer, or the data aged out)"
                    .into(),
            );
        } else if d.power_during.is_none() {
            d.unknown
                .push("power was not read: the power signature cannot be checked".into());
        }
        if during.iter().all(|p| p.throttle.is_none()) && !during.is_empty() {
            d.unknown
                .push("clock-event (throttle) reasons were not read".into());
        }
        d
    }

    /// Power during the alert as a share of the power limit, in %.
    pub fn power_pct(&self) -> Option<f64> {
        match (self.power_during, self.power_limit) {
            (Some(p), Some(l)) if l > 0.0 => Some(100.0 * p / l),
            _ => None,
        }
    }
}

/// `12.3` → "12", unknown → "unknown".
pub(crate) fn n0(v: Option<f64>) -> String {
    v.map_or("unknown".to_string(), |v| format!("{v:.0}"))
}

pub fn evidence(f: &Facts, d: &Derived) -> Vec<Evidence> {
    let mut e = Vec::new();
    let mut push = |fact: &str, value: String| {
        e.push(Evidence {
            fact: fact.to_string(),
            value,
        })
    };
    if let Some(s) = &f.alert.summary {
        push("alert", s.clone());
    }
    push(
        "utilisation",
        format!(
            "{} % during (min {}), {} % before",
            n0(d.util_during),
            n0(d.util_during_min),
            n0(d.util_before)
        ),
    );
    let pct = d.power_pct().map_or(String::new(), |p| {
        format!(
            " ({p:.0} % of the {:.0} W limit)",
            d.power_limit.unwrap_or(0.0)
        )
    });
    push(
        "power",
        format!(
            "{} W during{pct}, busy level before {} W",
            n0(d.power_during),
            n0(d.power_busy)
        ),
    );
    push(
        "temperature",
        format!(
            "max {} °C during, {} °C before",
            n0(d.temp_during_max),
            n0(d.temp_before)
        ),
    );
    push(
        "SM clock",
        format!(
            "{} MHz during, {} MHz before",
            n0(d.clock_during),
            n0(d.clock_before)
        ),
    );
    if !d.throttle_during.is_empty() {
        push("clock-event reasons during", d.throttle_during.join(", "));
    }
    if let Some((at, v)) = d.step_stopped {
        push(
            "training step",
            format!(
                "last advanced at {} (value {v:.0}), {} s before the alert started",
                text::hms(at),
                (f.start - at) / 1000
            ),
        );
    }
    e
}
