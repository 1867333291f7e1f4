//! The per-GPU families: dcgm-exporter's names, types, units and labels (the default, so
//! NVIDIA's Grafana dashboard works unchanged), or gpuwatch's own names in base units
//! (`[http] metrics_names = "gpuwatch"`).
//!
//! Invariants: a value NVML could not read is absent (never 0); a GPU whose newest sample
//! is older than `stall_after` (or was a gap / a lost GPU) exports no readings, only its
//! `gpuwatch_gpu_*` state; units follow dcgm-exporter's table (MiB, W, MHz, mJ, %) or, for
//! gpuwatch names, base units (bytes, watts, hertz, joules, ratios).

use std::borrow::Cow;

use super::expo::{Family, Kind, Label, Labels};
use crate::config::MetricNames;
use crate::model::{GpuSample, SampleStatus};
use crate::store::read::GpuStatusRow;

const MIB: f64 = 1024.0 * 1024.0;

/// One exported GPU reading: both names, its kind, what it is, and how to read it (in
/// dcgm-exporter's unit, `dcgm_unit`; `to_base` converts to gpuwatch's base unit, which its
/// name carries).
#[derive(Clone, Copy)]
struct Reading {
    dcgm: &'static str,
    ours: &'static str,
    kind: Kind,
    what: &'static str,
    dcgm_unit: Option<&'static str>,
    value: fn(&GpuSample) -> Option<f64>,
    /// `value` divided by this is in dcgm-exporter's unit.
    dcgm_div: f64,
    to_base: f64,
}

/// One GPU of a scrape: its stored status, its labels for the per-GPU readings (the chosen
/// naming's full set) and for gpuwatch_* families (lint-clean: no camelCase), both built
/// once, and its last XID (`Some(0)`: watched, none seen; `None`: unknown).
pub struct Gpu {
    pub status: GpuStatusRow,
    pub labels: Labels,
    pub short: Labels,
    pub xid: Option<f64>,
}

/// The names of the UUID and host labels in the chosen naming.
pub fn id_label_names(names: MetricNames) -> (&'static str, &'static str) {
    match names {
        MetricNames::Dcgm => ("UUID", "Hostname"),
        MetricNames::Gpuwatch => ("uuid", "host"),
    }
}

fn f<T: Into<f64>>(v: Option<T>) -> Option<f64> {
    v.map(Into::into)
}

const fn gauge(
    dcgm: &'static str,
    ours: &'static str,
    what: &'static str,
    dcgm_unit: Option<&'static str>,
    value: fn(&GpuSample) -> Option<f64>,
    to_base: f64,
) -> Reading {
    Reading {
        dcgm,
        ours,
        kind: Kind::Gauge,
        what,
        dcgm_unit,
        value,
        dcgm_div: 1.0,
        to_base,
    }
}

/// A counter: dcgm-exporter's have no `_total`; gpuwatch's names end with it.
const fn counter(
    dcgm: &'static str,
    ours: &'static str,
    what: &'static str,
    dcgm_unit: Option<&'static str>,
    value: fn(&GpuSample) -> Option<f64>,
    to_base: f64,
) -> Reading {
    Reading {
        kind: Kind::Counter { total: false },
        ..gauge(dcgm, ours, what, dcgm_unit, value, to_base)
    }
}

/// The readings that are not rule-language metrics; the others come from the metric
/// registry's exports ([`crate::metric::Export`]).
const EXTRA_READINGS: &[Reading] = &[
    counter(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "gpuwatch_gpu_energy_joules",
        "Total energy consumption since boot",
        Some("mJ"),
        |s| s.energy_mj.map(|e| e as f64),
        1e-3,
    ),
    gauge(
        "DCGM_FI_DEV_FB_RESERVED",
        "gpuwatch_gpu_memory_reserved_bytes",
        "Framebuffer memory reserved",
        Some("MiB"),
        |s| match (s.mem_total_bytes, s.mem_used_bytes, s.mem_free_bytes) {
            (Some(t), Some(u), Some(fr)) if t >= u + fr => Some((t - u - fr) as f64 / MIB),
            _ => None,
        },
        MIB,
    ),
    gauge(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gpuwatch_gpu_clock_event_reasons",
        "Current clock throttle reasons (NVML's bitmask)",
        None,
        |s| s.throttle_reasons.map(|r| r as f64),
        1.0,
    ),
    counter(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "gpuwatch_gpu_remapped_rows_correctable",
        "Number of remapped rows for correctable errors",
        None,
        |s| f(s.remapped_rows_correctable),
        1.0,
    ),
    gauge(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gpuwatch_gpu_row_remap_failure",
        "Whether remapping of rows has failed",
        None,
        |s| s.remap_failure.map(|b| if b { 1.0 } else { 0.0 }),
        1.0,
    ),
];

/// Every exported reading: the registry's, then the extras.
fn readings() -> impl Iterator<Item = Reading> {
    crate::metric::SAMPLE_METRICS
        .iter()
        .filter_map(|m| Some((m, m.export?)))
        .map(|(m, e)| Reading {
            dcgm: e.dcgm,
            ours: e.ours,
            kind: if e.counter {
                Kind::Counter { total: false }
            } else {
                Kind::Gauge
            },
            what: e.what,
            dcgm_unit: e.dcgm_unit,
            value: m.value,
            dcgm_div: e.dcgm_div,
            to_base: e.to_base,
        })
        .chain(EXTRA_READINGS.iter().copied())
}

/// `pod`, `namespace` and `container` when attribution knows who holds the GPU.
fn push_pod(l: &mut Vec<Label>, row: &GpuStatusRow) {
    if let Some(p) = row.pod() {
        l.push(("pod".into(), p.pod.to_string()));
        l.push(("namespace".into(), p.namespace.to_string()));
        if let Some(c) = p.container {
            l.push(("container".into(), c.to_string()));
        }
    }
}

impl Gpu {
    /// `job`: the GPU's training job across nodes, a label beside its pod when known.
    pub fn new(
        status: GpuStatusRow,
        host: &str,
        names: MetricNames,
        xid: Option<f64>,
        job: Option<&str>,
    ) -> Gpu {
        let inv = &status.inventory;
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let (uuid, host_label) = id_label_names(names);
        // A MIG instance, as dcgm-exporter labels it: the parent's `gpu` and `UUID` with
        // `GPU_I_ID` and `GPU_I_PROFILE`; in gpuwatch's naming its own MIG UUID with
        // `gpu_instance_id` and `gpu_instance_profile`.
        let mig = inv.mig.as_ref();
        let id = match (names, mig) {
            (MetricNames::Dcgm, Some(m)) => m.parent_uuid.clone(),
            _ => inv.uuid.clone(),
        };
        let model = match (names, mig, &inv.name) {
            (MetricNames::Dcgm, Some(_), Some(n)) => n
                .rsplit_once(" MIG ")
                .map_or(n.as_str(), |(p, _)| p)
                .to_string(),
            _ => opt(&inv.name),
        };
        let mut labels: Vec<Label> = vec![
            ("gpu".into(), inv.index.to_string()),
            (uuid.into(), id.clone()),
            ("pci_bus_id".into(), opt(&inv.pci_bus_id)),
        ];
        match names {
            MetricNames::Dcgm => labels.extend([
                ("device".into(), format!("nvidia{}", inv.index)),
                ("modelName".into(), model),
                ("Hostname".into(), host.to_string()),
                ("DCGM_FI_DRIVER_VERSION".into(), opt(&inv.driver_version)),
            ]),
            MetricNames::Gpuwatch => labels.extend([
                ("model".into(), model),
                ("host".into(), host.to_string()),
                ("driver_version".into(), opt(&inv.driver_version)),
            ]),
        }
        let mig_labels: Vec<Label> = match (names, mig) {
            (_, None) => Vec::new(),
            (MetricNames::Dcgm, Some(m)) => vec![
                ("GPU_I_ID".into(), m.gpu_instance_id.to_string()),
                ("GPU_I_PROFILE".into(), m.profile.clone()),
            ],
            (MetricNames::Gpuwatch, Some(m)) => vec![
                ("gpu_instance_id".into(), m.gpu_instance_id.to_string()),
                ("gpu_instance_profile".into(), m.profile.clone()),
            ],
        };
        labels.extend(mig_labels.iter().cloned());
        push_pod(&mut labels, &status);
        if let Some(j) = job {
            labels.push(("training_job".into(), j.to_string()));
        }
        let mut short: Vec<Label> = vec![
            ("gpu".into(), inv.index.to_string()),
            (uuid.into(), id),
            (host_label.into(), host.to_string()),
        ];
        short.extend(mig_labels);
        push_pod(&mut short, &status);
        if let Some(j) = job {
            short.push(("training_job".into(), j.to_string()));
        }
        Gpu {
            labels: labels.into(),
            short: short.into(),
            xid,
            status,
        }
    }
}

/// The sample a GPU exports readings from: the newest, if it is fresh and was sampled.
pub fn fresh_sample(row: &GpuStatusRow, stale_after_ms: i64) -> Option<&GpuSample> {
    let s = row.latest.as_ref()?;
    let fresh = row.age_ms.is_some_and(|a| a <= stale_after_ms);
    (fresh && s.status == SampleStatus::Ok && row.lost_at_ms.is_none()).then_some(s)
}

/// The readings of every GPU, one family per metric, plus the last XID of each GPU.
pub fn families(gpus: &[Gpu], stale_after_ms: i64, names: MetricNames) -> Vec<Family> {
    let mut out = Vec::new();
    for r in readings() {
        let (name, kind): (Cow<'static, str>, Kind) = match names {
            MetricNames::Dcgm => (r.dcgm.into(), r.kind),
            MetricNames::Gpuwatch => match r.kind {
                Kind::Counter { .. } => (r.ours.into(), Kind::Counter { total: true }),
                k => (r.ours.into(), k),
            },
        };
        let help: Cow<'static, str> = match (names, r.dcgm_unit) {
            (MetricNames::Dcgm, Some(unit)) => format!("{} (in {unit}).", r.what).into(),
            _ => format!("{}.", r.what).into(),
        };
        let mut fam = Family::new(name, kind, help);
        for g in gpus {
            let Some(s) = fresh_sample(&g.status, stale_after_ms) else {
                continue;
            };
            if let Some(v) = (r.value)(s).map(|v| v / r.dcgm_div) {
                let v = match names {
                    // dcgm-exporter's framebuffer values are whole MiB (DCGM's integer fields).
                    MetricNames::Dcgm if r.dcgm_unit == Some("MiB") => v.floor(),
                    MetricNames::Dcgm => v,
                    MetricNames::Gpuwatch => v * r.to_base,
                };
                fam.push(g.labels.clone(), v);
            }
        }
        out.push(fam);
    }
    let (name, help) = match names {
        MetricNames::Dcgm => (
            "DCGM_FI_DEV_XID_ERRORS",
            "Value of the last XID error encountered.",
        ),
        MetricNames::Gpuwatch => (
            "gpuwatch_gpu_last_xid",
            "The GPU's last XID in the stored history (0: XIDs are watched and none happened).",
        ),
    };
    let mut xid = Family::new(name, Kind::Gauge, help);
    for g in gpus {
        if let (Some(_), Some(v)) = (fresh_sample(&g.status, stale_after_ms), g.xid) {
            xid.push(g.labels.clone(), v);
        }
    }
    out.push(xid);
    out
}
