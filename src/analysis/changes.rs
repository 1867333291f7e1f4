//! What changed in the window around an alert: processes ending and starting, the pod
//! holding the GPU, XIDs and other events, clock-event (throttle) reasons appearing, the
//! power limit, samples the GPU did not answer, the training step stopping or stepping back
//! (a restart from a checkpoint) and gaps in the training series (Prometheus).
//!
//! Invariants: only transitions seen in the stored data are reported (a reason already set
//! when the window began is not a change); at most [`MAX_CHANGES`], the nearest to the
//! alert's start kept; sorted by time.

use super::facts::Facts;
use super::{Change, ChangeKind};
use crate::gpu_health::clock_events;
use crate::model::TsMs;

/// The most changes listed.
pub const MAX_CHANGES: usize = 20;

/// A process is said to have ended when its last sample is this much before the window's
/// last sample.
const ENDED_SLACK_MS: TsMs = 5_000;

pub fn detect(f: &Facts) -> Vec<Change> {
    let mut out = Vec::new();
    let mut push = |at_ms: TsMs, kind: ChangeKind, text: String| {
        out.push(Change {
            at_ms,
            offset_s: (at_ms - f.start).div_euclid(1000),
            kind,
            text,
        })
    };
    let last_sample = f.points.last().map(|p| p.ts_ms);
    let first_sample = f.points.first().map(|p| p.ts_ms);
    for p in &f.procs {
        let who = format!(
            "process {} ({}{})",
            p.pid,
            p.name.as_deref().unwrap_or("name unknown"),
            p.placement
                .as_ref()
                .and_then(|x| x.short())
                .map_or(String::new(), |s| format!(", {s}"))
        );
        if first_sample.is_some_and(|t| p.first_ms > t + ENDED_SLACK_MS) {
            push(
                p.first_ms,
                ChangeKind::ProcessStart,
                format!("{who} started"),
            );
        }
        if f.observed.0 > 0 && last_sample.is_some_and(|t| p.last_ms + ENDED_SLACK_MS < t) {
            push(
                p.last_ms,
                ChangeKind::ProcessExit,
                format!("{who} was last seen"),
            );
        }
    }
    for (from, to, h) in &f.holders {
        if *from > f.before_from {
            push(
                *from,
                ChangeKind::PodChange,
                format!("pod {}/{} was given the GPU", h.namespace, h.pod),
            );
        }
        if let Some(t) = to.filter(|t| *t <= f.end) {
            push(
                t,
                ChangeKind::PodChange,
                format!("pod {}/{} no longer holds the GPU", h.namespace, h.pod),
            );
        }
    }
    for e in &f.events {
        let whose = if e.on_gpu { "" } else { " (host-wide)" };
        match (e.kind.as_str(), e.code) {
            ("xid", Some(c)) => push(
                e.ts_ms,
                ChangeKind::Xid,
                format!("XID {c}{whose}: {}", crate::xid::describe(c)),
            ),
            _ => push(
                e.ts_ms,
                ChangeKind::Event,
                format!("{}{whose}: {}", e.kind, e.message),
            ),
        }
    }
    // Clock-event reasons that appear, the power limit changing, samples without an answer.
    for w in f.points.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if let (Some(x), Some(y)) = (a.throttle, b.throttle) {
            for r in clock_events::decode(y & !x) {
                if r.bit != clock_events::GPU_IDLE {
                    push(
                        b.ts_ms,
                        ChangeKind::Throttle,
                        format!("clock-event reason {} set: {}", r.name, r.meaning),
                    );
                }
            }
        }
        if let (Some(x), Some(y)) = (a.power_limit_w, b.power_limit_w)
            && (x - y).abs() >= 1.0
        {
            push(
                b.ts_ms,
                ChangeKind::PowerLimit,
                format!("power limit changed from {x:.0} W to {y:.0} W"),
            );
        }
        if a.status == 0 && b.status != 0 {
            let what = if b.status == 2 {
                "the GPU was lost (NVML reports it gone)"
            } else {
                "the GPU did not answer within the sample deadline"
            };
            push(b.ts_ms, ChangeKind::SampleGap, what.to_string());
        }
    }
    for t in &f.training {
        let pts: Vec<&(TsMs, f64)> = t.points().collect();
        if t.name == "training_step" {
            if let Some(at) = t.last_change_before()
                && f.start - at >= 60_000
            {
                let v = t.before.iter().find(|p| p.0 == at).map_or(0.0, |p| p.1);
                push(
                    at,
                    ChangeKind::StepStopped,
                    format!("{} stopped advancing at {v:.0}", series_name(t)),
                );
            }
            for w in pts.windows(2) {
                if w[1].1 < w[0].1 {
                    push(
                        w[1].0,
                        ChangeKind::StepRestart,
                        format!(
                            "{} went back from {:.0} to {:.0} (a restart from a checkpoint)",
                            series_name(t),
                            w[0].1,
                            w[1].1
                        ),
                    );
                }
            }
        }
        let mut gaps: Vec<TsMs> = pts.windows(2).map(|w| w[1].0 - w[0].0).collect();
        gaps.sort_unstable();
        if let Some(&median) = gaps.get(gaps.len() / 2) {
            let limit = (3 * median).max(30_000);
            for w in pts.windows(2) {
                if w[1].0 - w[0].0 > limit {
                    push(
                        w[0].0,
                        ChangeKind::PrometheusGap,
                        format!(
                            "no points of {} for {} s (a Prometheus scrape or query gap)",
                            series_name(t),
                            (w[1].0 - w[0].0) / 1000
                        ),
                    );
                }
            }
        }
    }
    out.sort_by_key(|c| (c.at_ms, c.kind as u8));
    if out.len() > MAX_CHANGES {
        // Keep the changes nearest to the start.
        let mut by_distance: Vec<Change> = out;
        by_distance.sort_by_key(|c| (c.at_ms - f.start).abs());
        by_distance.truncate(MAX_CHANGES);
        by_distance.sort_by_key(|c| (c.at_ms, c.kind as u8));
        return by_distance;
    }
    out
}

fn series_name(t: &super::facts::Training) -> String {
    let job = t
        .labels
        .iter()
        .find(|(k, _)| k == "job")
        .map_or(String::new(), |(_, v)| format!("{{job={v:?}}}"));
    format!("{}{job}", t.name)
}
