//! The incident an alert belongs to (the same rule on the same host and job): when each of
//! its GPUs left its working state, so that a hang across a job's ranks names the rank that
//! stopped first.
//!
//! Invariants: a GPU's stop is read from its own samples only; stops closer than
//! [`FIRST_RANK_MARGIN_MS`] are not told apart; the order is deterministic (stop, start, GPU).

use super::Member;
use super::evidence::quantile;
use super::facts::Facts;
use crate::model::TsMs;
use crate::store::analysis::GpuPoint;

/// Ranks whose stops are closer than this are not told apart.
pub const FIRST_RANK_MARGIN_MS: TsMs = 3_000;

/// A GPU's busy power before `start`: the 90th percentile of its power readings (`None`
/// without readings, or at 0 W).
pub fn busy_power(points: &[GpuPoint], start: TsMs) -> Option<f64> {
    let busy = quantile(
        points
            .iter()
            .filter(|p| p.ts_ms <= start)
            .filter_map(|p| p.power_w)
            .collect(),
        0.9,
    )?;
    (busy > 0.0).then_some(busy)
}

/// A sample of a GPU at work: sampled, power at or above half its busy level and utilisation
/// of at least 10 %.
pub fn working(p: &GpuPoint, busy: f64) -> bool {
    match (p.power_w, p.util) {
        (Some(w), Some(u)) => p.status == 0 && w >= 0.5 * busy && u >= 10.0,
        _ => false,
    }
}

/// When a GPU left its working state before `start`: the sample after the last one with
/// power at or above half its busy level (the 90th percentile before) and utilisation of at
/// least 10 %. `None` when power or utilisation were not read.
pub fn stopped_at(points: &[GpuPoint], start: TsMs) -> Option<TsMs> {
    let busy = busy_power(points, start)?;
    let before: Vec<&GpuPoint> = points.iter().filter(|p| p.ts_ms <= start).collect();
    let last = before.iter().rposition(|p| working(p, busy))?;
    before.get(last + 1).map(|p| p.ts_ms)
}

/// The alert's incident, first stopped first, and how it reads.
pub fn incident(f: &Facts) -> (Vec<Member>, Option<String>) {
    let mut members: Vec<Member> = f
        .group
        .iter()
        .map(|p| Member {
            alert_id: p.alert.alert_id,
            gpu: p.alert.gpu_index,
            pod: p.pod.clone(),
            started_ms: p.alert.active_since_ms,
            stopped_ms: stopped_at(&p.points, p.alert.active_since_ms),
        })
        .collect();
    members.sort_by_key(|m| (m.stopped_ms.is_none(), m.stopped_ms, m.started_ms, m.gpu));
    if members.len() < 2 {
        return (members, None);
    }
    let n = members.len();
    let word = if f.alert.rule.starts_with("training") {
        "ranks"
    } else {
        "GPUs"
    };
    let stops: Vec<TsMs> = members.iter().filter_map(|m| m.stopped_ms).collect();
    let all = if stops.len() == 2 {
        format!("both {word}")
    } else {
        format!("all {} {word}", stops.len())
    };
    let summary = match (stops.first(), stops.get(1), stops.last()) {
        (Some(&a), Some(&b), Some(&z)) => {
            let head = format!(
                "{n} alerts of {} are one incident: {all} stopped within {} s",
                f.alert.rule,
                (z - a) / 1000
            );
            if b - a >= FIRST_RANK_MARGIN_MS {
                format!(
                    "{head}; {} stopped first, {} s before the next",
                    who(&members[0]),
                    (b - a) / 1000
                )
            } else {
                format!("{head}; no single one stopped first")
            }
        }
        _ => format!(
            "{n} alerts of {} are one incident; when each GPU stopped is unknown (power or utilisation not read)",
            f.alert.rule
        ),
    };
    (members, Some(summary))
}

/// "GPU 5 (pod llm-7-worker-2)".
pub fn who(m: &Member) -> String {
    let gpu = m
        .gpu
        .map_or("a GPU of unknown index".to_string(), |g| format!("GPU {g}"));
    match &m.pod {
        Some(p) => format!("{gpu} (pod {p})"),
        None => gpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(ts_ms: TsMs, util: f64, power: Option<f64>) -> GpuPoint {
        GpuPoint {
            ts_ms,
            util: Some(util),
            power_w: power,
            ..Default::default()
        }
    }

    #[test]
    fn a_gpu_stops_at_the_sample_after_its_last_working_one() {
        // Busy at ~600 W, then spinning at 100 % and 100 W from t = 5 s (a stuck collective).
        let mut pts: Vec<GpuPoint> = (0..5).map(|t| p(t * 1000, 95.0, Some(600.0))).collect();
        pts.extend((5..10).map(|t| p(t * 1000, 100.0, Some(100.0))));
        assert_eq!(stopped_at(&pts, 9_000), Some(5_000));
        // A host-side hang: power stays up a moment but utilisation drops.
        let mut host: Vec<GpuPoint> = (0..5).map(|t| p(t * 1000, 95.0, Some(600.0))).collect();
        host.extend((5..10).map(|t| p(t * 1000, 0.0, Some(500.0))));
        assert_eq!(stopped_at(&host, 9_000), Some(5_000));
        // Without power readings the stop is unknown, not guessed.
        let blind: Vec<GpuPoint> = (0..10).map(|t| p(t * 1000, 100.0, None)).collect();
        assert_eq!(stopped_at(&blind, 9_000), None);
        // Still working at the start: no stop before it.
        let busy: Vec<GpuPoint> = (0..10).map(|t| p(t * 1000, 95.0, Some(600.0))).collect();
        assert_eq!(stopped_at(&busy, 9_000), None);
    }
}
