//! How dcgm-exporter's families, and gpuwatch's own `/metrics` names, land in a sample:
//! the one table of the importer ([`MAPPED`], docs/IMPORT.md) and the lookup of a series'
//! name in either naming.
//!
//! Invariants: a value out of its family's range (a negative count, a ratio above 1) is
//! absent, never clamped into a reading; gpuwatch's own names are read through the metric
//! registry's export rows (`crate::metric`), converted from their base unit back to
//! dcgm-exporter's, so both namings land the same.

use crate::model::GpuSample;

/// How a dcgm-exporter value lands in a sample.
pub type Set = fn(&mut GpuSample, f64);

fn pct(v: f64) -> Option<u32> {
    (v.is_finite() && v >= 0.0).then(|| v.round().min(100.0) as u32)
}
fn int(v: f64) -> Option<u32> {
    (v.is_finite() && v >= 0.0).then(|| v.round().min(f64::from(u32::MAX)) as u32)
}
fn big(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0).then(|| v.round() as u64)
}
fn ratio(v: f64) -> Option<f64> {
    (v.is_finite() && (0.0..=1.005).contains(&v)).then(|| (v * 100.0).min(100.0))
}

/// dcgm-exporter's families gpuwatch stores, with their conversion (docs/IMPORT.md).
pub const MAPPED: &[(&str, Set)] = &[
    ("DCGM_FI_DEV_GPU_UTIL", |s, v| s.util_gpu_pct = pct(v)),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", |s, v| s.util_mem_pct = pct(v)),
    ("DCGM_FI_DEV_FB_USED", |s, v| {
        s.mem_used_bytes = big(v * 1_048_576.0)
    }),
    ("DCGM_FI_DEV_FB_FREE", |s, v| {
        s.mem_free_bytes = big(v * 1_048_576.0)
    }),
    ("DCGM_FI_DEV_GPU_TEMP", |s, v| s.temp_c = int(v)),
    ("DCGM_FI_DEV_POWER_USAGE", |s, v| {
        s.power_mw = int(v * 1000.0)
    }),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", |s, v| {
        s.energy_mj = big(v)
    }),
    ("DCGM_FI_DEV_SM_CLOCK", |s, v| s.clock_sm_mhz = int(v)),
    ("DCGM_FI_DEV_MEM_CLOCK", |s, v| s.clock_mem_mhz = int(v)),
    ("DCGM_FI_DEV_FAN_SPEED", |s, v| s.fan_pct = pct(v)),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", |s, v| s.pcie_gen = int(v)),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", |s, v| s.pcie_width = int(v)),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", |s, v| {
        s.ecc_corrected = big(v)
    }),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", |s, v| {
        s.ecc_uncorrected = big(v)
    }),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", |s, v| {
        s.remapped_rows_uncorrectable = int(v)
    }),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", |s, v| {
        s.remapped_rows_correctable = int(v)
    }),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", |s, v| {
        s.remap_pending = v.is_finite().then_some(v != 0.0)
    }),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", |s, v| {
        s.remap_failure = v.is_finite().then_some(v != 0.0)
    }),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", |s, v| {
        s.tensor_active_pct = ratio(v)
    }),
    ("DCGM_FI_PROF_SM_ACTIVE", |s, v| s.sm_active_pct = ratio(v)),
    ("DCGM_FI_PROF_SM_OCCUPANCY", |s, v| {
        s.sm_occupancy_pct = ratio(v)
    }),
    ("DCGM_FI_PROF_DRAM_ACTIVE", |s, v| {
        s.dram_active_pct = ratio(v)
    }),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", |s, v| {
        s.nvlink_crc_flit_errors = big(v)
    }),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", |s, v| {
        s.nvlink_crc_data_errors = big(v)
    }),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", |s, v| {
        s.nvlink_replay_errors = big(v)
    }),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", |s, v| {
        s.nvlink_recovery_errors = big(v)
    }),
];

/// Which naming a series uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// dcgm-exporter's (`DCGM_FI_DEV_GPU_UTIL`, labels `UUID`, `Hostname`, `modelName`).
    Dcgm,
    /// gpuwatch's own (`gpuwatch_gpu_utilization_ratio`, labels `uuid`, `host`, `model`).
    Gpuwatch,
}

/// How a value of the family `name` lands: its setter, the divisor from the family's unit to
/// dcgm-exporter's, and the naming; `None` for a family gpuwatch does not store.
pub fn lookup(name: &str) -> Option<(Set, f64, Naming)> {
    let dcgm = |n: &str| MAPPED.iter().find(|(m, _)| *m == n).map(|x| x.1);
    if let Some(set) = dcgm(name) {
        return Some((set, 1.0, Naming::Dcgm));
    }
    let base = name.strip_suffix("_total").unwrap_or(name);
    crate::metric::SAMPLE_METRICS
        .iter()
        .filter_map(|m| m.export)
        .find(|e| e.ours == name || (e.counter && e.ours == base))
        .and_then(|e| Some((dcgm(e.dcgm)?, e.to_base, Naming::Gpuwatch)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SampleStatus;

    #[test]
    fn both_namings_land_the_same() {
        let mut a = GpuSample::empty(0, "GPU-a", SampleStatus::Ok);
        let mut b = a.clone();
        for (dcgm, ours, v) in [
            (
                "DCGM_FI_DEV_GPU_UTIL",
                "gpuwatch_gpu_utilization_ratio",
                97.0,
            ),
            (
                "DCGM_FI_DEV_FB_USED",
                "gpuwatch_gpu_memory_used_bytes",
                40960.0,
            ),
            ("DCGM_FI_DEV_POWER_USAGE", "gpuwatch_gpu_power_watts", 512.5),
            (
                "DCGM_FI_DEV_SM_CLOCK",
                "gpuwatch_gpu_sm_clock_hertz",
                1980.0,
            ),
            (
                "DCGM_FI_PROF_SM_ACTIVE",
                "gpuwatch_gpu_sm_active_ratio",
                0.5,
            ),
        ] {
            let (set, div, n) = lookup(dcgm).expect(dcgm);
            assert_eq!((div, n), (1.0, Naming::Dcgm));
            set(&mut a, v);
            let (set, div, n) = lookup(ours).expect(ours);
            assert_eq!(n, Naming::Gpuwatch);
            // gpuwatch exports `v` in its base unit (`div` of dcgm-exporter's); the
            // importer divides it back.
            set(&mut b, (v * div) / div);
        }
        assert_eq!(a, b);
        assert!(lookup("gpuwatch_gpu_ecc_uncorrected_errors_total").is_some());
        assert!(lookup("DCGM_FI_DEV_VGPU_LICENSE_STATUS").is_none());
        assert!(lookup("gpuwatch_up").is_none());
    }
}
