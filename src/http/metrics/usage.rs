//! The usage ledger's counters (docs/USAGE.md): per GPU and holder, the seconds it was held
//! and the seconds it was held idle since the daemon started — what a fleet's Prometheus sums
//! by namespace, pod, training job or user across nodes
//! (`examples/prometheus/gpuwatch-usage-rules.yml`).
//!
//! Invariants: only time a named holder held (free and unnamed time is no one's); a shared
//! GPU's time is split between its holders; label names follow `[http] metrics_names`; a
//! holder's label absent when unknown (never an empty value).

use crate::config::MetricNames;
use crate::telemetry::Health;

use super::expo::{Family, Kind, Label};
use super::gpus::id_label_names;

pub fn families(health: &Health, host: &str, names: MetricNames) -> Vec<Family> {
    let total = Kind::Counter { total: true };
    let mut held = Family::new(
        "gpuwatch_gpu_held_seconds",
        total,
        "GPU time held by the holder (pod, Slurm job, user) since the daemon started: busy, idle-held and held with unknown activity; a shared GPU's time split equally between its holders.",
    )
    .unit("seconds");
    let mut idle = Family::new(
        "gpuwatch_gpu_idle_held_seconds",
        total,
        "GPU time held idle by the holder since the daemon started (gpu_idle's test, counted from when the GPU became idle).",
    )
    .unit("seconds");
    let (uuid, host_label) = id_label_names(names);
    let counters = health.usage.lock().map(|c| c.clone()).unwrap_or_default();
    for (gpu, holder, c) in counters {
        // A MIG instance as the GPU families label it: dcgm-exporter's parent UUID with
        // GPU_I_ID and GPU_I_PROFILE, or its own UUID with gpu_instance_id and _profile.
        let (id, model) = match (names, &gpu.mig) {
            (MetricNames::Dcgm, Some(m)) => (
                m.parent_uuid.clone(),
                gpu.model
                    .as_deref()
                    .map(|n| n.rsplit_once(" MIG ").map_or(n, |(p, _)| p).to_string()),
            ),
            _ => (gpu.uuid.clone(), gpu.model.clone()),
        };
        let mut l: Vec<Label> = vec![
            (host_label.into(), host.to_string()),
            (
                "gpu".into(),
                gpu.index.map_or_else(String::new, |i| i.to_string()),
            ),
            (uuid.into(), id),
        ];
        if let Some(m) = model {
            let name = match names {
                MetricNames::Dcgm => "modelName",
                MetricNames::Gpuwatch => "model",
            };
            l.push((name.into(), m));
        }
        if let Some(m) = &gpu.mig {
            let (gi, profile) = match names {
                MetricNames::Dcgm => ("GPU_I_ID", "GPU_I_PROFILE"),
                MetricNames::Gpuwatch => ("gpu_instance_id", "gpu_instance_profile"),
            };
            l.push((gi.into(), m.gpu_instance_id.to_string()));
            l.push((profile.into(), m.profile.clone()));
        }
        for (k, v) in holder.fields() {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                l.push((k.into(), v.to_string()));
            }
        }
        held.push(l.clone(), c.held_ms / 1000.0);
        idle.push(l, c.idle_held_ms / 1000.0);
    }
    vec![held, idle]
}
