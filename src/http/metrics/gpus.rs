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

/// One exported GPU reading: both names, its kind, help and how to read it (dcgm units,
/// then the factor to gpuwatch's base units).
struct Reading {
    dcgm: &'static str,
    ours: &'static str,
    kind: Kind,
    help: &'static str,
    value: fn(&GpuSample) -> Option<f64>,
    to_base: f64,
}

fn f<T: Into<f64>>(v: Option<T>) -> Option<f64> {
    v.map(Into::into)
}

const fn gauge(
    dcgm: &'static str,
    ours: &'static str,
    help: &'static str,
    value: fn(&GpuSample) -> Option<f64>,
    to_base: f64,
) -> Reading {
    Reading {
        dcgm,
        ours,
        kind: Kind::Gauge,
        help,
        value,
        to_base,
    }
}

const fn counter(
    dcgm: &'static str,
    ours: &'static str,
    help: &'static str,
    value: fn(&GpuSample) -> Option<f64>,
    to_base: f64,
) -> Reading {
    // dcgm-exporter's counters have no `_total`; gpuwatch's names end with it.
    Reading {
        dcgm,
        ours,
        kind: Kind::Counter { total: false },
        help,
        value,
        to_base,
    }
}

const READINGS: &[Reading] = &[
    gauge(
        "DCGM_FI_DEV_SM_CLOCK",
        "gpuwatch_gpu_sm_clock_hertz",
        "SM clock frequency (in MHz).",
        |s| f(s.clock_sm_mhz),
        1e6,
    ),
    gauge(
        "DCGM_FI_DEV_MEM_CLOCK",
        "gpuwatch_gpu_memory_clock_hertz",
        "Memory clock frequency (in MHz).",
        |s| f(s.clock_mem_mhz),
        1e6,
    ),
    gauge(
        "DCGM_FI_DEV_GPU_TEMP",
        "gpuwatch_gpu_temperature_celsius",
        "GPU temperature (in C).",
        |s| f(s.temp_c),
        1.0,
    ),
    gauge(
        "DCGM_FI_DEV_POWER_USAGE",
        "gpuwatch_gpu_power_watts",
        "Power draw (in W).",
        |s| s.power_mw.map(|p| p as f64 / 1000.0),
        1.0,
    ),
    gauge(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "gpuwatch_gpu_power_limit_watts",
        "Power management limit (in W).",
        |s| s.power_limit_mw.map(|p| p as f64 / 1000.0),
        1.0,
    ),
    counter(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "gpuwatch_gpu_energy_joules",
        "Total energy consumption since boot (in mJ).",
        |s| s.energy_mj.map(|e| e as f64),
        1e-3,
    ),
    gauge(
        "DCGM_FI_DEV_GPU_UTIL",
        "gpuwatch_gpu_utilization_ratio",
        "GPU utilization (in %).",
        |s| f(s.util_gpu_pct),
        0.01,
    ),
    gauge(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gpuwatch_gpu_memory_copy_utilization_ratio",
        "Memory utilization (in %).",
        |s| f(s.util_mem_pct),
        0.01,
    ),
    gauge(
        "DCGM_FI_DEV_FB_FREE",
        "gpuwatch_gpu_memory_free_bytes",
        "Framebuffer memory free (in MiB).",
        |s| s.mem_free_bytes.map(|b| b as f64 / MIB),
        MIB,
    ),
    gauge(
        "DCGM_FI_DEV_FB_USED",
        "gpuwatch_gpu_memory_used_bytes",
        "Framebuffer memory used (in MiB).",
        |s| s.mem_used_bytes.map(|b| b as f64 / MIB),
        MIB,
    ),
    gauge(
        "DCGM_FI_DEV_FB_RESERVED",
        "gpuwatch_gpu_memory_reserved_bytes",
        "Framebuffer memory reserved (in MiB).",
        |s| match (s.mem_total_bytes, s.mem_used_bytes, s.mem_free_bytes) {
            (Some(t), Some(u), Some(fr)) if t >= u + fr => Some((t - u - fr) as f64 / MIB),
            _ => None,
        },
        MIB,
    ),
    gauge(
        "DCGM_FI_DEV_FAN_SPEED",
        "gpuwatch_gpu_fan_speed_ratio",
        "Fan speed (in %).",
        |s| f(s.fan_pct),
        0.01,
    ),
    gauge(
        "DCGM_FI_DEV_PSTATE",
        "gpuwatch_gpu_performance_state",
        "Performance state (0 = P0, fastest).",
        |s| f(s.pstate),
        1.0,
    ),
    gauge(
        "DCGM_FI_DEV_PCIE_LINK_GEN",
        "gpuwatch_gpu_pcie_link_generation",
        "PCIe link generation.",
        |s| f(s.pcie_gen),
        1.0,
    ),
    gauge(
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
        "gpuwatch_gpu_pcie_link_width",
        "PCIe link width (lanes).",
        |s| f(s.pcie_width),
        1.0,
    ),
    gauge(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gpuwatch_gpu_pcie_transmit_bytes_per_second",
        "The rate of data transmitted over the PCIe bus, in bytes per second.",
        |s| s.pcie_tx_kbs.map(|k| k as f64 * 1024.0),
        1.0,
    ),
    gauge(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gpuwatch_gpu_pcie_receive_bytes_per_second",
        "The rate of data received over the PCIe bus, in bytes per second.",
        |s| s.pcie_rx_kbs.map(|k| k as f64 * 1024.0),
        1.0,
    ),
    gauge(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gpuwatch_gpu_clock_event_reasons",
        "Current clock throttle reasons (NVML's bitmask).",
        |s| s.throttle_reasons.map(|r| r as f64),
        1.0,
    ),
    counter(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "gpuwatch_gpu_ecc_corrected_errors",
        "Total number of single-bit volatile ECC errors.",
        |s| s.ecc_corrected.map(|e| e as f64),
        1.0,
    ),
    counter(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "gpuwatch_gpu_ecc_uncorrected_errors",
        "Total number of double-bit volatile ECC errors.",
        |s| s.ecc_uncorrected.map(|e| e as f64),
        1.0,
    ),
    counter(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "gpuwatch_gpu_remapped_rows_uncorrectable",
        "Number of remapped rows for uncorrectable errors",
        |s| f(s.remapped_rows_uncorrectable),
        1.0,
    ),
    counter(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "gpuwatch_gpu_remapped_rows_correctable",
        "Number of remapped rows for correctable errors",
        |s| f(s.remapped_rows_correctable),
        1.0,
    ),
    gauge(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gpuwatch_gpu_row_remap_failure",
        "Whether remapping of rows has failed",
        |s| s.remap_failure.map(|b| if b { 1.0 } else { 0.0 }),
        1.0,
    ),
    gauge(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gpuwatch_gpu_row_remap_pending",
        "Whether remapping of rows is pending (a GPU reset is needed)",
        |s| s.remap_pending.map(|b| if b { 1.0 } else { 0.0 }),
        1.0,
    ),
];

/// The labels that identify a GPU in every family of the chosen naming.
pub fn gpu_labels(row: &GpuStatusRow, host: &str, names: MetricNames) -> Labels {
    let inv = &row.inventory;
    let opt = |v: &Option<String>| v.clone().unwrap_or_default();
    let mut l: Vec<Label> = match names {
        MetricNames::Dcgm => vec![
            ("gpu".into(), inv.index.to_string()),
            ("UUID".into(), inv.uuid.clone()),
            ("pci_bus_id".into(), opt(&inv.pci_bus_id)),
            ("device".into(), format!("nvidia{}", inv.index)),
            ("modelName".into(), opt(&inv.name)),
            ("Hostname".into(), host.to_string()),
            ("DCGM_FI_DRIVER_VERSION".into(), opt(&inv.driver_version)),
        ],
        MetricNames::Gpuwatch => vec![
            ("gpu".into(), inv.index.to_string()),
            ("uuid".into(), inv.uuid.clone()),
            ("pci_bus_id".into(), opt(&inv.pci_bus_id)),
            ("model".into(), opt(&inv.name)),
            ("host".into(), host.to_string()),
            ("driver_version".into(), opt(&inv.driver_version)),
        ],
    };
    if let Some(p) = row.pod() {
        l.push(("pod".into(), p.pod.to_string()));
        l.push(("namespace".into(), p.namespace.to_string()));
        if let Some(c) = p.container {
            l.push(("container".into(), c.to_string()));
        }
    }
    l.into()
}

/// The sample a GPU exports readings from: the newest, if it is fresh and was sampled.
pub fn fresh_sample(row: &GpuStatusRow, stale_after_ms: i64) -> Option<&GpuSample> {
    let s = row.latest.as_ref()?;
    let fresh = row.age_ms.is_some_and(|a| a <= stale_after_ms);
    (fresh && s.status == SampleStatus::Ok && row.lost_at_ms.is_none()).then_some(s)
}

/// The readings of every GPU, one family per metric, plus the last XID of each GPU
/// (`xid`: the XID number, `Some(0)` when watched and none was seen, `None`: unknown).
pub fn families(
    rows: &[(GpuStatusRow, Labels, Option<f64>)],
    stale_after_ms: i64,
    names: MetricNames,
) -> Vec<Family> {
    let mut out = Vec::with_capacity(READINGS.len() + 1);
    for r in READINGS {
        let (name, kind): (Cow<'static, str>, Kind) = match names {
            MetricNames::Dcgm => (r.dcgm.into(), r.kind),
            MetricNames::Gpuwatch => match r.kind {
                Kind::Counter { .. } => (r.ours.into(), Kind::Counter { total: true }),
                k => (r.ours.into(), k),
            },
        };
        let mut fam = Family::new(name, kind, r.help);
        for (row, labels, _) in rows {
            let Some(s) = fresh_sample(row, stale_after_ms) else {
                continue;
            };
            if let Some(v) = (r.value)(s) {
                let v = match names {
                    MetricNames::Dcgm => v,
                    MetricNames::Gpuwatch => v * r.to_base,
                };
                fam.push(labels.clone(), v);
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
            "The last XID error of the GPU since the daemon started (0: none).",
        ),
    };
    let mut xid = Family::new(name, Kind::Gauge, help);
    for (row, labels, last) in rows {
        if let (Some(_), Some(v)) = (fresh_sample(row, stale_after_ms), last) {
            xid.push(labels.clone(), *v);
        }
    }
    out.push(xid);
    out
}
