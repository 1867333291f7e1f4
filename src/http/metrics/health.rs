//! The per-GPU health families: the verdict of [`crate::gpu_health`] as a state set
//! (`gpuwatch_gpu_health{status="ok|warn|fail|unknown"}`, 1 for the current status and 0
//! for the others, as kube-state-metrics exports phases), its reasons
//! (`gpuwatch_gpu_health_reason{code, severity}`, 1 while the reason holds) and the decoded
//! clock-event reasons (`gpuwatch_gpu_clock_event_reason{reason}`, 0 or 1 per reason NVML
//! defines).
//!
//! Invariants: judged from the rows the scrape already read (no query of its own); every GPU
//! has its status (a GPU without a fresh sample is `unknown`, a lost one `fail`); clock-event
//! reasons are absent, not 0, when the bitmask was not read or the sample is not fresh;
//! labels are the GPU's lint-clean `short` set plus these names. The 13 label sets of a GPU's
//! status and clock-event series are built once per `short` set and kept by the scraper
//! ([`LabelCache`]): a scrape then only clones their `Arc`s.

use std::collections::HashMap;

use super::expo::{Family, Kind, Label, Labels};
use super::gpus::Gpu;
use crate::gpu_health::{self, Status, clock_events};

const EVENTS: usize = clock_events::REASONS.len();

/// A GPU's status and clock-event label sets, in [`Status::ALL`] and
/// [`clock_events::REASONS`] order.
struct GpuLabels {
    status: [Labels; 4],
    events: [Labels; EVENTS],
}

/// The label sets of every GPU's health series, by its `short` labels (which change only
/// with its holder): kept across scrapes, dropped when holders changed often enough to
/// leave more stale entries than live ones.
#[derive(Default)]
pub struct LabelCache {
    by_gpu: HashMap<Labels, GpuLabels>,
}

fn with(short: &Labels, name: &'static str, value: &str) -> Labels {
    let mut l: Vec<Label> = Vec::with_capacity(short.len() + 1);
    l.extend(short.iter().cloned());
    l.push((name.into(), value.to_string()));
    l.into()
}

impl LabelCache {
    fn get(&mut self, short: &Labels, live: usize) -> &GpuLabels {
        if !self.by_gpu.contains_key(short) && self.by_gpu.len() >= 2 * live + 8 {
            self.by_gpu.clear();
        }
        self.by_gpu
            .entry(short.clone())
            .or_insert_with(|| GpuLabels {
                status: Status::ALL.map(|s| with(short, "status", s.as_str())),
                events: clock_events::REASONS.map(|c| with(short, "reason", c.name)),
            })
    }
}

/// The health families of `gpus`, whose samples are stale after `stale_after_ms`.
pub fn families(gpus: &[Gpu], stale_after_ms: i64, cache: &mut LabelCache) -> Vec<Family> {
    let mut status = Family::new(
        "gpuwatch_gpu_health",
        Kind::Gauge,
        "The GPU's hardware health: 1 for its current status (ok, warn, fail, unknown), 0 for the others.",
    );
    let mut reasons = Family::new(
        "gpuwatch_gpu_health_reason",
        Kind::Gauge,
        "1 for each reason the GPU's health is not ok (code and severity as in docs/HEALTH.md).",
    );
    let mut events = Family::new(
        "gpuwatch_gpu_clock_event_reason",
        Kind::Gauge,
        "1 when NVML reports this clock-event (throttle) reason for the GPU, 0 when not (absent when not read).",
    );
    for g in gpus {
        let h = gpu_health::judge(&g.status, stale_after_ms);
        let labels = cache.get(&g.short, gpus.len());
        for (s, l) in Status::ALL.iter().zip(&labels.status) {
            status.push(l.clone(), f64::from(u8::from(h.status == *s)));
        }
        for r in &h.reasons {
            let mut l = g.short.to_vec();
            l.push(("code".into(), r.code.to_string()));
            l.push(("severity".into(), r.severity.as_str().to_string()));
            reasons.push(l, 1.0);
        }
        if let Some(set) = &h.clock_events {
            for (c, l) in clock_events::REASONS.iter().zip(&labels.events) {
                events.push(l.clone(), f64::from(u8::from(set.contains(&c.name))));
            }
        }
    }
    vec![status, reasons, events]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MetricNames;
    use crate::model::{GpuHolder, GpuInventory, GpuSample};
    use crate::store::read::GpuStatusRow;

    fn gpu(index: u32, pod: Option<&str>, throttle: Option<u64>) -> Gpu {
        let row = GpuStatusRow {
            host: "h".into(),
            inventory: GpuInventory {
                index,
                uuid: format!("GPU-{index}"),
                ..Default::default()
            },
            inventory_known: true,
            first_seen_ms: 0,
            last_seen_ms: 0,
            lost_at_ms: None,
            latest: Some(GpuSample {
                util_gpu_pct: Some(0),
                throttle_reasons: throttle,
                ..Default::default()
            }),
            age_ms: Some(0),
            processes: Vec::new(),
            holder: pod.map(|p| GpuHolder {
                pod: p.into(),
                namespace: "ns".into(),
                container: "main".into(),
                resource: "nvidia.com/gpu".into(),
                job: None,
            }),
            recent_xids: Vec::new(),
        };
        Gpu::new(row, "h", MetricNames::Gpuwatch, None, None)
    }

    fn text(gpus: &[Gpu], cache: &mut LabelCache) -> String {
        super::super::expo::encode(
            &families(gpus, 10_000, cache),
            super::super::expo::Format::Text,
        )
    }

    #[test]
    fn kept_label_sets_give_the_same_scrape_and_stay_bounded() {
        let mut cache = LabelCache::default();
        let gpus = [gpu(0, None, Some(0x81)), gpu(1, Some("a"), None)];
        let first = text(&gpus, &mut cache);
        assert_eq!(text(&gpus, &mut cache), first);
        assert_eq!(text(&gpus, &mut LabelCache::default()), first);
        assert!(first.contains(
            "gpuwatch_gpu_clock_event_reason{gpu=\"0\",uuid=\"GPU-0\",host=\"h\",reason=\"hw_power_brake_slowdown\"} 1\n"
        ), "{first}");
        assert!(first.contains(
            "gpuwatch_gpu_health{gpu=\"0\",uuid=\"GPU-0\",host=\"h\",status=\"fail\"} 1\n"
        ));
        assert!(first.contains("gpuwatch_gpu_health_reason{gpu=\"0\",uuid=\"GPU-0\",host=\"h\",code=\"hw_power_brake_slowdown\",severity=\"fail\"} 1\n"));
        // GPU 1's mask was not read: no clock-event series, and its health is unknown.
        assert!(
            !first.contains("gpuwatch_gpu_clock_event_reason{gpu=\"1\""),
            "{first}"
        );
        assert!(
            first.contains("pod=\"a\",namespace=\"ns\",container=\"main\",status=\"unknown\"} 1\n"),
            "{first}"
        );
        // A GPU whose holder keeps changing does not grow the cache without bound.
        for i in 0..100 {
            let pod = format!("p{i}");
            let gpus = [gpu(0, None, Some(0)), gpu(1, Some(&pod), Some(0))];
            assert!(text(&gpus, &mut cache).contains(&format!("pod=\"{pod}\"")));
            assert!(cache.by_gpu.len() <= 2 * 2 + 8);
        }
    }
}
