//! The metric registry: one row per per-GPU sample metric — its rule-language name, unit and
//! title, its value in one sample (Rust) and in one `samples` row (SQL), the stored unit's
//! scale, its `rollups_1m` columns, its `/metrics` families in both namings, and how charts
//! scale it. The rule language's names ([`crate::rules::names`]), the evaluator's feed, the
//! window SQL ([`crate::store::window`]), the rollups ([`crate::store::rollup`]),
//! `gpuwatch history --metric` and the `/metrics` families are all read from this table.
//!
//! Invariants:
//! - A row's `value` and its `sql` give the same number for every sample (the window tests
//!   check each row against stored rows); `value` is in the rule language's unit, `sql` in
//!   the stored unit (divide by `scale`).
//! - A value that was not observed is `None` / SQL NULL, never 0. Rows with `ok_only` have no
//!   value in a sample that is not ok (a missed deadline, a lost GPU); the status flags
//!   (`lost`, `gap`) are defined for every sample.
//! - A row with `rollup` names a plain `samples` column (its `sql`) that `rollups_1m` holds as
//!   `{name}_min`, `{name}_max` and `{name}_avg` (a migration adds them with the row).
//! - Names are unique, and no alias is a name.

use crate::model::{GpuSample, SampleStatus};

const MIB: f64 = 1_048_576.0;
/// NVML's SW (0x20) and HW (0x40) thermal slowdown bits (`gpu_health::clock_events`).
pub const THERMAL_BITS: u64 = 0x20 | 0x40;
/// NVML's HW slowdown (0x08) and HW power brake (0x80) bits.
pub const HW_SLOWDOWN_BITS: u64 = 0x08 | 0x80;

/// How a chart scales a metric's axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// 0 to at least 100 (percentages).
    Percent,
    /// 0 to at least 1 (ratios).
    Ratio,
    /// A 0/1 flag.
    Flag,
    /// Fitted to the values.
    Fit,
}

/// A `/metrics` family of a metric: dcgm-exporter's name and unit, gpuwatch's own name in base
/// units, and how the row's value converts to dcgm-exporter's unit.
#[derive(Debug, Clone, Copy)]
pub struct Export {
    pub dcgm: &'static str,
    pub ours: &'static str,
    /// The family's HELP text (dcgm-exporter's adds its unit).
    pub what: &'static str,
    pub dcgm_unit: Option<&'static str>,
    /// A counter: dcgm-exporter's names have no `_total`, gpuwatch's end with it.
    pub counter: bool,
    /// dcgm-exporter's unit from the rule language's: the row's value divided by this (1, or
    /// 100 for a percentage exported as a ratio, 2^-20 for MiB/s exported as bytes/s: exact
    /// in floating point).
    pub dcgm_div: f64,
    /// From dcgm-exporter's unit to gpuwatch's base unit.
    pub to_base: f64,
}

/// One per-GPU sample metric.
#[derive(Debug, Clone, Copy)]
pub struct SampleMetric {
    /// The rule language's name (`util_gpu`, `mem_used`, ...).
    pub name: &'static str,
    /// `%`, `MiB`, `°C`, `W`, `MHz`, `MB/s`; empty for ratios, flags, counts and numbers.
    pub unit: &'static str,
    /// Human title.
    pub title: &'static str,
    /// SQL over one `samples` row, in the stored unit.
    pub sql: &'static str,
    /// Only ok samples have a value (everything but the status flags).
    pub ok_only: bool,
    /// Divisor from the stored unit to `unit`.
    pub scale: f64,
    /// The value of one sample in `unit`, whatever its status (see [`SampleMetric::of`]).
    pub value: fn(&GpuSample) -> Option<f64>,
    /// The stored integer `rollups_1m` aggregates (the `sql` column), when it holds this metric.
    pub rollup: Option<fn(&GpuSample) -> Option<i64>>,
    pub export: Option<Export>,
    pub axis: Axis,
}

impl PartialEq for SampleMetric {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl SampleMetric {
    /// The value the rule evaluator and the window SQL see in `s`: none in a sample that is
    /// not ok, except for the status flags.
    pub fn of(&self, s: &GpuSample) -> Option<f64> {
        if self.ok_only && s.status != SampleStatus::Ok {
            return None;
        }
        (self.value)(s)
    }

    /// True when `rollups_1m` holds min/avg/max of this metric.
    pub fn has_rollup(&self) -> bool {
        self.rollup.is_some()
    }

    /// The SQL value of one `samples` row, in the stored unit (divide by [`Self::scale`]);
    /// NULL where the evaluator sees no data.
    pub fn value_sql(&self) -> String {
        if self.ok_only {
            format!("(CASE WHEN status = 0 THEN {} END)", self.sql)
        } else {
            format!("({})", self.sql)
        }
    }
}

/// Where a metric lives in [`SAMPLE_METRICS`]: the rule language's handle on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SampleId(u8);

impl SampleId {
    /// The metric named `name`; a compile-time error in a `const` when there is none.
    pub const fn named(name: &str) -> SampleId {
        let mut i = 0;
        while i < SAMPLE_METRICS.len() {
            if same(SAMPLE_METRICS[i].name, name) {
                return SampleId(i as u8);
            }
            i += 1;
        }
        panic!("no such sample metric")
    }

    pub fn def(self) -> &'static SampleMetric {
        &SAMPLE_METRICS[usize::from(self.0)]
    }

    /// Every sample metric, in table order.
    pub fn all() -> impl Iterator<Item = SampleId> {
        (0..SAMPLE_METRICS.len()).map(|i| SampleId(i as u8))
    }

    /// The metric named `name` (rule-language name only).
    pub fn by_name(name: &str) -> Option<SampleId> {
        SAMPLE_METRICS
            .iter()
            .position(|m| m.name == name)
            .map(|i| SampleId(i as u8))
    }
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The ids the code names (the evaluator's process-memory fallback, tests).
pub const MEM_USED: SampleId = SampleId::named("mem_used");

fn f(v: Option<u32>) -> Option<f64> {
    v.map(f64::from)
}
fn mib(v: Option<u64>) -> Option<f64> {
    v.map(|b| b as f64 / MIB)
}
fn flag(v: bool) -> Option<f64> {
    Some(f64::from(u8::from(v)))
}
fn n(v: Option<u32>) -> Option<i64> {
    v.map(i64::from)
}
/// Stored as SQLite stores a u64: saturated to i64.
fn sat(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// A metric of ok samples.
#[allow(clippy::too_many_arguments)]
const fn row(
    name: &'static str,
    unit: &'static str,
    title: &'static str,
    sql: &'static str,
    scale: f64,
    value: fn(&GpuSample) -> Option<f64>,
    axis: Axis,
) -> SampleMetric {
    SampleMetric {
        name,
        unit,
        title,
        sql,
        ok_only: true,
        scale,
        value,
        rollup: None,
        export: None,
        axis,
    }
}

impl SampleMetric {
    const fn rolled(self, stored: fn(&GpuSample) -> Option<i64>) -> Self {
        Self {
            rollup: Some(stored),
            ..self
        }
    }

    #[allow(clippy::too_many_arguments)]
    const fn exported(
        self,
        dcgm: &'static str,
        ours: &'static str,
        what: &'static str,
        dcgm_unit: Option<&'static str>,
        counter: bool,
        dcgm_div: f64,
        to_base: f64,
    ) -> Self {
        Self {
            export: Some(Export {
                dcgm,
                ours,
                what,
                dcgm_unit,
                counter,
                dcgm_div,
                to_base,
            }),
            ..self
        }
    }

    /// A 0/1 flag made of the sample's status, defined for every sample.
    const fn status_flag(self) -> Self {
        Self {
            ok_only: false,
            ..self
        }
    }
}

/// Every per-GPU sample metric, in display order: first the ten with rollup columns (the ones
/// `gpuwatch history` offers, in `rollups_1m`'s column order), then the rest.
pub const SAMPLE_METRICS: &[SampleMetric] = &[
    row(
        "util_gpu",
        "%",
        "GPU utilisation",
        "util_gpu_pct",
        1.0,
        |s| f(s.util_gpu_pct),
        Axis::Percent,
    )
    .rolled(|s| n(s.util_gpu_pct))
    .exported(
        "DCGM_FI_DEV_GPU_UTIL",
        "gpuwatch_gpu_utilization_ratio",
        "GPU utilization",
        Some("%"),
        false,
        1.0,
        0.01,
    ),
    row(
        "util_mem",
        "%",
        "Memory controller utilisation",
        "util_mem_pct",
        1.0,
        |s| f(s.util_mem_pct),
        Axis::Percent,
    )
    .rolled(|s| n(s.util_mem_pct))
    .exported(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gpuwatch_gpu_memory_copy_utilization_ratio",
        "Memory utilization",
        Some("%"),
        false,
        1.0,
        0.01,
    ),
    row(
        "mem_used",
        "MiB",
        "Memory used",
        "mem_used_bytes",
        MIB,
        |s| mib(s.mem_used_bytes),
        Axis::Fit,
    )
    .rolled(|s| sat(s.mem_used_bytes))
    .exported(
        "DCGM_FI_DEV_FB_USED",
        "gpuwatch_gpu_memory_used_bytes",
        "Framebuffer memory used",
        Some("MiB"),
        false,
        1.0,
        MIB,
    ),
    row(
        "temp",
        "°C",
        "Temperature",
        "temp_c",
        1.0,
        |s| f(s.temp_c),
        Axis::Fit,
    )
    .rolled(|s| n(s.temp_c))
    .exported(
        "DCGM_FI_DEV_GPU_TEMP",
        "gpuwatch_gpu_temperature_celsius",
        "GPU temperature",
        Some("C"),
        false,
        1.0,
        1.0,
    ),
    row(
        "power",
        "W",
        "Power",
        "power_mw",
        1000.0,
        |s| s.power_mw.map(|w| f64::from(w) / 1000.0),
        Axis::Fit,
    )
    .rolled(|s| n(s.power_mw))
    .exported(
        "DCGM_FI_DEV_POWER_USAGE",
        "gpuwatch_gpu_power_watts",
        "Power draw",
        Some("W"),
        false,
        1.0,
        1.0,
    ),
    row(
        "clock_sm",
        "MHz",
        "SM clock",
        "clock_sm_mhz",
        1.0,
        |s| f(s.clock_sm_mhz),
        Axis::Fit,
    )
    .rolled(|s| n(s.clock_sm_mhz))
    .exported(
        "DCGM_FI_DEV_SM_CLOCK",
        "gpuwatch_gpu_sm_clock_hertz",
        "SM clock frequency",
        Some("MHz"),
        false,
        1.0,
        1e6,
    ),
    row(
        "clock_mem",
        "MHz",
        "Memory clock",
        "clock_mem_mhz",
        1.0,
        |s| f(s.clock_mem_mhz),
        Axis::Fit,
    )
    .rolled(|s| n(s.clock_mem_mhz))
    .exported(
        "DCGM_FI_DEV_MEM_CLOCK",
        "gpuwatch_gpu_memory_clock_hertz",
        "Memory clock frequency",
        Some("MHz"),
        false,
        1.0,
        1e6,
    ),
    row(
        "fan",
        "%",
        "Fan",
        "fan_pct",
        1.0,
        |s| f(s.fan_pct),
        Axis::Percent,
    )
    .rolled(|s| n(s.fan_pct))
    .exported(
        "DCGM_FI_DEV_FAN_SPEED",
        "gpuwatch_gpu_fan_speed_ratio",
        "Fan speed",
        Some("%"),
        false,
        1.0,
        0.01,
    ),
    row(
        "pcie_tx",
        "MB/s",
        "PCIe TX",
        "pcie_tx_kbs",
        1024.0,
        |s| s.pcie_tx_kbs.map(|k| f64::from(k) / 1024.0),
        Axis::Fit,
    )
    .rolled(|s| n(s.pcie_tx_kbs))
    .exported(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gpuwatch_gpu_pcie_transmit_bytes_per_second",
        "The rate of data transmitted over the PCIe bus, in bytes per second",
        None,
        false,
        1.0 / MIB,
        1.0,
    ),
    row(
        "pcie_rx",
        "MB/s",
        "PCIe RX",
        "pcie_rx_kbs",
        1024.0,
        |s| s.pcie_rx_kbs.map(|k| f64::from(k) / 1024.0),
        Axis::Fit,
    )
    .rolled(|s| n(s.pcie_rx_kbs))
    .exported(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gpuwatch_gpu_pcie_receive_bytes_per_second",
        "The rate of data received over the PCIe bus, in bytes per second",
        None,
        false,
        1.0 / MIB,
        1.0,
    ),
    // A row of the unit-test build only (with the test migration that adds its rollup
    // columns, `store::migrate`): the tests check that one row reaches the rule language, the
    // window SQL, the rollups, both `/metrics` namings and `history --metric`.
    #[cfg(test)]
    row(
        "test_probe",
        "°C",
        "Test probe",
        "temp_c",
        1.0,
        |s| f(s.temp_c),
        Axis::Fit,
    )
    .rolled(|s| n(s.temp_c))
    .exported(
        "DCGM_FI_TEST_PROBE",
        "gpuwatch_gpu_test_probe_celsius",
        "A test build's probe",
        Some("C"),
        false,
        1.0,
        1.0,
    ),
    row(
        "mem_free",
        "MiB",
        "Memory free",
        "mem_free_bytes",
        MIB,
        |s| mib(s.mem_free_bytes),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_FB_FREE",
        "gpuwatch_gpu_memory_free_bytes",
        "Framebuffer memory free",
        Some("MiB"),
        false,
        1.0,
        MIB,
    ),
    row(
        "mem_total",
        "MiB",
        "Memory total",
        "mem_total_bytes",
        MIB,
        |s| mib(s.mem_total_bytes),
        Axis::Fit,
    ),
    row(
        "mem_used_ratio",
        "",
        "Memory used / total",
        "CASE WHEN mem_total_bytes > 0 THEN CAST(mem_used_bytes AS REAL) / mem_total_bytes END",
        1.0,
        |s| match (s.mem_used_bytes, s.mem_total_bytes) {
            (Some(u), Some(t)) if t > 0 => Some(u as f64 / t as f64),
            _ => None,
        },
        Axis::Ratio,
    ),
    row(
        "power_limit",
        "W",
        "Power limit",
        "power_limit_mw",
        1000.0,
        |s| s.power_limit_mw.map(|w| f64::from(w) / 1000.0),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "gpuwatch_gpu_power_limit_watts",
        "Power management limit",
        Some("W"),
        false,
        1.0,
        1.0,
    ),
    row(
        "pstate",
        "",
        "Performance state",
        "pstate",
        1.0,
        |s| f(s.pstate),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_PSTATE",
        "gpuwatch_gpu_performance_state",
        "Performance state (0 = P0, fastest)",
        None,
        false,
        1.0,
        1.0,
    ),
    row(
        "pcie_gen",
        "",
        "PCIe link generation",
        "pcie_gen",
        1.0,
        |s| f(s.pcie_gen),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_PCIE_LINK_GEN",
        "gpuwatch_gpu_pcie_link_generation",
        "PCIe link generation",
        None,
        false,
        1.0,
        1.0,
    ),
    row(
        "pcie_width",
        "",
        "PCIe link width",
        "pcie_width",
        1.0,
        |s| f(s.pcie_width),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
        "gpuwatch_gpu_pcie_link_width",
        "PCIe link width (lanes)",
        None,
        false,
        1.0,
        1.0,
    ),
    // Thermal: SW (0x20) or HW (0x40) thermal slowdown.
    row(
        "thermal_throttle",
        "",
        "Thermal throttle",
        "(throttle_reasons & 96) != 0",
        1.0,
        |s| s.throttle_reasons.and_then(|b| flag(b & THERMAL_BITS != 0)),
        Axis::Flag,
    ),
    // HW slowdown (0x08) or HW power brake (0x80).
    row(
        "hw_slowdown",
        "",
        "HW slowdown",
        "(throttle_reasons & 136) != 0",
        1.0,
        |s| {
            s.throttle_reasons
                .and_then(|b| flag(b & HW_SLOWDOWN_BITS != 0))
        },
        Axis::Flag,
    ),
    row(
        "ecc_corrected",
        "",
        "ECC errors, corrected",
        "ecc_corrected",
        1.0,
        |s| s.ecc_corrected.map(|v| v as f64),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "gpuwatch_gpu_ecc_corrected_errors",
        "Total number of single-bit volatile ECC errors",
        None,
        true,
        1.0,
        1.0,
    ),
    row(
        "ecc_uncorrected",
        "",
        "ECC errors, uncorrected",
        "ecc_uncorrected",
        1.0,
        |s| s.ecc_uncorrected.map(|v| v as f64),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "gpuwatch_gpu_ecc_uncorrected_errors",
        "Total number of double-bit volatile ECC errors",
        None,
        true,
        1.0,
        1.0,
    ),
    row(
        "retired_pages",
        "",
        "Retired pages",
        "retired_pages",
        1.0,
        |s| f(s.retired_pages),
        Axis::Fit,
    ),
    row(
        "remapped_rows_uncorrectable",
        "",
        "Remapped rows, uncorrectable",
        "remapped_rows_uncorrectable",
        1.0,
        |s| f(s.remapped_rows_uncorrectable),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "gpuwatch_gpu_remapped_rows_uncorrectable",
        "Number of remapped rows for uncorrectable errors",
        None,
        true,
        1.0,
        1.0,
    ),
    row(
        "remap_pending",
        "",
        "Row remap pending",
        "remap_pending",
        1.0,
        |s| s.remap_pending.and_then(flag),
        Axis::Flag,
    )
    .exported(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gpuwatch_gpu_row_remap_pending",
        "Whether remapping of rows is pending (a GPU reset is needed)",
        None,
        false,
        1.0,
        1.0,
    ),
    // Unknown (not observed) stays no data: never "no processes".
    row(
        "process_count",
        "",
        "Compute processes",
        "process_count",
        1.0,
        |s| s.process_count.map(f64::from),
        Axis::Fit,
    ),
    // NVML GPM's ANY_TENSOR_UTIL (%, over the interval since the previous sample): the
    // tensor-pipe activity DCGM's profiling module serves under this name, as a ratio.
    row(
        "tensor_active",
        "%",
        "Tensor pipes active",
        "tensor_active_pct",
        1.0,
        |s| s.tensor_active_pct,
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gpuwatch_gpu_tensor_active_ratio",
        "Ratio of cycles the tensor (HMMA) pipe is active",
        None,
        false,
        100.0,
        1.0,
    ),
    // NVML GPM's SM_UTIL: how much of the SMs' time had work (a GPU at 100 % utilisation with
    // its SMs at a few percent is spinning, not computing).
    row(
        "sm_active",
        "%",
        "SMs active",
        "sm_active_pct",
        1.0,
        |s| s.sm_active_pct,
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_PROF_SM_ACTIVE",
        "gpuwatch_gpu_sm_active_ratio",
        "The ratio of cycles an SM has at least 1 warp assigned",
        None,
        false,
        100.0,
        1.0,
    ),
    // NVML GPM's SM_OCCUPANCY: the warps resident on the SMs, of what they could hold.
    row(
        "sm_occupancy",
        "%",
        "SM occupancy",
        "sm_occupancy_pct",
        1.0,
        |s| s.sm_occupancy_pct,
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gpuwatch_gpu_sm_occupancy_ratio",
        "The ratio of number of warps resident on an SM",
        None,
        false,
        100.0,
        1.0,
    ),
    // NVML GPM's DRAM_BW_UTIL: the device memory's bandwidth in use.
    row(
        "dram_active",
        "%",
        "DRAM active",
        "dram_active_pct",
        1.0,
        |s| s.dram_active_pct,
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gpuwatch_gpu_dram_active_ratio",
        "Ratio of cycles the device memory interface is active sending or receiving data",
        None,
        false,
        100.0,
        1.0,
    ),
    // NVML's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: what the driver says recovery needs (0 none,
    // 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, 5 IMEX domain, 6 bus reset,
    // 7 system reboot); the health verdict names the action.
    row(
        "recovery_action",
        "",
        "Recovery action",
        "recovery_action",
        1.0,
        |s| s.recovery_action.map(f64::from),
        Axis::Fit,
    ),
    // NVLink: the links up of those the GPU has (NVML_FI_DEV_NVLINK_GET_STATE per link), the
    // error counters (totals over the links) and the data moved. Absent without NVLink and
    // in MIG mode, never 0 there.
    row(
        "nvlink_links_up",
        "",
        "NVLinks up",
        "nvlink_links_up",
        1.0,
        |s| f(s.nvlink_links_up),
        Axis::Fit,
    ),
    row(
        "nvlink_crc_flit_errors",
        "",
        "NVLink CRC errors, flow control",
        "nvlink_crc_flit_errors",
        1.0,
        |s| s.nvlink_crc_flit_errors.map(|v| v as f64),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "gpuwatch_gpu_nvlink_crc_flit_errors",
        "Total number of NVLink flow-control CRC errors",
        None,
        true,
        1.0,
        1.0,
    ),
    row(
        "nvlink_crc_data_errors",
        "",
        "NVLink CRC errors, data",
        "nvlink_crc_data_errors",
        1.0,
        |s| s.nvlink_crc_data_errors.map(|v| v as f64),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "gpuwatch_gpu_nvlink_crc_data_errors",
        "Total number of NVLink data CRC errors",
        None,
        true,
        1.0,
        1.0,
    ),
    row(
        "nvlink_replay_errors",
        "",
        "NVLink replays",
        "nvlink_replay_errors",
        1.0,
        |s| s.nvlink_replay_errors.map(|v| v as f64),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "gpuwatch_gpu_nvlink_replay_errors",
        "Total number of NVLink retries",
        None,
        true,
        1.0,
        1.0,
    ),
    row(
        "nvlink_recovery_errors",
        "",
        "NVLink recoveries",
        "nvlink_recovery_errors",
        1.0,
        |s| s.nvlink_recovery_errors.map(|v| v as f64),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "gpuwatch_gpu_nvlink_recovery_errors",
        "Total number of NVLink recovery errors",
        None,
        true,
        1.0,
        1.0,
    ),
    // Stored in KiB (NVML's throughput fields); MiB in the language; bytes on /metrics.
    row(
        "nvlink_traffic",
        "MiB",
        "NVLink data moved",
        "nvlink_kib",
        1024.0,
        |s| s.nvlink_kib.map(|v| v as f64 / 1024.0),
        Axis::Fit,
    )
    .exported(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "gpuwatch_gpu_nvlink_data_bytes",
        "Total number of NVLink bandwidth counters for all lanes (bytes received and transmitted)",
        None,
        true,
        1.0 / MIB,
        1.0,
    ),
    // The fabric registration (nvmlDeviceGetGpuFabricInfo): 1 not started, 2 in progress,
    // 3 completed; its result once completed (0 success, else an NVML error code). Absent on
    // GPUs outside an NVLink fabric.
    row(
        "fabric_state",
        "",
        "Fabric registration state",
        "fabric_state",
        1.0,
        |s| s.fabric_state.map(f64::from),
        Axis::Fit,
    ),
    row(
        "fabric_status",
        "",
        "Fabric registration result",
        "fabric_status",
        1.0,
        |s| s.fabric_status.map(f64::from),
        Axis::Fit,
    ),
    row(
        "lost",
        "",
        "GPU lost",
        "status = 2",
        1.0,
        |s| flag(s.status == SampleStatus::Lost),
        Axis::Flag,
    )
    .status_flag(),
    row(
        "gap",
        "",
        "Missed sample deadline",
        "status = 1",
        1.0,
        |s| flag(s.status == SampleStatus::DeadlineMissed),
        Axis::Flag,
    )
    .status_flag(),
];

/// Short names accepted besides the registry's; one alias may stand for several metrics.
/// The one set of aliases: `gpuwatch history --metric`, alert charts and the rule language's
/// suggestions read it.
pub const ALIASES: &[(&str, &[&str])] = &[
    ("util", &["util_gpu"]),
    ("utilization", &["util_gpu"]),
    ("mem", &["mem_used"]),
    ("memory", &["mem_used"]),
    ("memory_used", &["mem_used"]),
    ("memory_free", &["mem_free"]),
    ("temperature", &["temp"]),
    ("power_draw", &["power"]),
    ("power_usage", &["power"]),
    ("clocks", &["clock_sm", "clock_mem"]),
    ("pcie", &["pcie_tx", "pcie_rx"]),
];

/// The metric named `name`, or by an alias that stands for one metric (`util`).
pub fn by_name_or_alias(name: &str) -> Option<SampleId> {
    match ALIASES.iter().find(|(a, _)| *a == name) {
        Some((_, [only])) => SampleId::by_name(only),
        Some(_) => None,
        None => SampleId::by_name(name),
    }
}

/// How many rows have rollup columns.
pub const ROLLED: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < SAMPLE_METRICS.len() {
        if SAMPLE_METRICS[i].rollup.is_some() {
            n += 1;
        }
        i += 1;
    }
    n
};

/// The rows with rollup columns, in `rollups_1m`'s order: the first [`ROLLED`] rows (a test
/// checks that no other row has one).
pub const ROLLED_METRICS: &[SampleMetric] = SAMPLE_METRICS.split_at(ROLLED).0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_aliases_point_at_names() {
        for (i, m) in SAMPLE_METRICS.iter().enumerate() {
            assert!(
                SAMPLE_METRICS[..i].iter().all(|o| o.name != m.name),
                "{} twice",
                m.name
            );
            assert!(
                ALIASES.iter().all(|(a, _)| *a != m.name),
                "{} is an alias",
                m.name
            );
            assert_eq!(
                SampleId::by_name(m.name).map(|id| id.def().name),
                Some(m.name)
            );
        }
        for (a, targets) in ALIASES {
            for t in *targets {
                assert!(SampleId::by_name(t).is_some(), "alias {a} -> {t}");
            }
        }
        assert_eq!(MEM_USED.def().name, "mem_used");
        // Rollup rows come first, in rollups_1m's column order.
        assert!(ROLLED_METRICS.iter().all(SampleMetric::has_rollup));
        assert_eq!(ROLLED_METRICS.len(), ROLLED);
    }

    #[test]
    fn exports_are_in_dcgm_exporters_units() {
        let mut s = GpuSample::empty(0, "GPU-x", SampleStatus::Ok);
        s.util_gpu_pct = Some(93);
        s.mem_used_bytes = Some(2 << 30);
        s.power_mw = Some(71_500);
        s.pcie_tx_kbs = Some(3);
        s.pcie_gen = Some(4);
        s.pcie_width = Some(16);
        s.tensor_active_pct = Some(45.0);
        let dcgm = |name: &str| {
            let m = SampleId::named(name).def();
            let e = m.export.expect("exported");
            (e.dcgm, (m.value)(&s).map(|v| v / e.dcgm_div))
        };
        assert_eq!(dcgm("util_gpu"), ("DCGM_FI_DEV_GPU_UTIL", Some(93.0)));
        assert_eq!(dcgm("mem_used"), ("DCGM_FI_DEV_FB_USED", Some(2048.0)));
        assert_eq!(dcgm("power"), ("DCGM_FI_DEV_POWER_USAGE", Some(71.5)));
        assert_eq!(
            dcgm("pcie_tx"),
            ("DCGM_FI_PROF_PCIE_TX_BYTES", Some(3072.0))
        );
        assert_eq!(dcgm("pcie_gen"), ("DCGM_FI_DEV_PCIE_LINK_GEN", Some(4.0)));
        assert_eq!(
            dcgm("pcie_width"),
            ("DCGM_FI_DEV_PCIE_LINK_WIDTH", Some(16.0))
        );
        assert_eq!(
            dcgm("tensor_active"),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Some(0.45))
        );
        assert_eq!(dcgm("pcie_rx"), ("DCGM_FI_PROF_PCIE_RX_BYTES", None));
    }

    #[test]
    fn status_flags_are_defined_for_every_sample_and_the_rest_only_for_ok_ones() {
        let mut s = GpuSample::empty(0, "GPU-x", SampleStatus::Lost);
        s.util_gpu_pct = Some(50);
        let lost = SampleId::by_name("lost")
            .map(SampleId::def)
            .map(|m| m.of(&s));
        assert_eq!(lost, Some(Some(1.0)));
        let util = SampleId::by_name("util_gpu")
            .map(SampleId::def)
            .map(|m| m.of(&s));
        assert_eq!(util, Some(None));
        s.status = SampleStatus::Ok;
        assert_eq!(SampleId::named("util_gpu").def().of(&s), Some(50.0));
        assert_eq!(SampleId::named("gap").def().of(&s), Some(0.0));
    }
}

/// One row added in the test build (`test_probe`: the temperature column under a new name,
/// with the test migration that adds its rollup columns) reaches everything the registry
/// drives.
#[cfg(test)]
mod probe_tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::config::Config;
    use crate::http::metrics::{SharedScraper, expo::Format};
    use crate::model::{GpuSample, SampleStatus, TickBatch};
    use crate::rules::ast::Metric;
    use crate::store::window::{self, Source};
    use crate::store::{StoreConfig, open, synth::TickGen};

    const T0: i64 = 1_750_000_020_000 / 60_000 * 60_000;
    const N: i64 = 120;

    /// A database of one GPU's two minutes, temperature 40..69 °C, rolled up.
    fn database(dir: &Path) -> (std::path::PathBuf, i64) {
        let tg = TickGen::new(2, 0);
        let path = dir.join("probe.db");
        let mut st = open(&path, &StoreConfig::new("n1")).unwrap();
        let batches: Vec<TickBatch> = (0..N)
            .map(|k| {
                let mut s = GpuSample::empty(T0 + 1000 * k, &tg.uuid(0), SampleStatus::Ok);
                s.temp_c = Some(40 + (k % 30) as u32);
                TickBatch {
                    ts_ms: s.ts_ms,
                    inventory: tg.inventory(),
                    samples: vec![s],
                    ..Default::default()
                }
            })
            .collect();
        st.write_ticks(&batches).unwrap();
        st.rollup_range(T0, T0 + 1000 * N).unwrap();
        let gpu = st
            .conn()
            .query_row("SELECT id FROM gpus WHERE uuid = ?1", [tg.uuid(0)], |r| {
                r.get(0)
            })
            .unwrap();
        (path, gpu)
    }

    #[test]
    fn one_row_reaches_rules_windows_rollups_metrics_and_history() {
        // The rule language: a name, a series, a rule that loads.
        let m = crate::rules::names::metric_by_name("test_probe").expect("a rule name");
        assert!(matches!(m, Metric::Sample(_)));
        let rule = "[[rule]]\nname = \"probe_hot\"\nseverity = \"warning\"\n\
                    condition = \"max(test_probe[1m]) > 60\"\nsummary = \"hot\"\n";
        crate::rules::check::load_str(rule, "probe.toml").expect("a rule over the probe");

        // The window SQL and the rollups: the same minutes, the evaluator's numbers.
        let dir = tempfile::tempdir().unwrap();
        let (path, gpu) = database(dir.path());
        let conn = crate::store::open_read_only(&path).unwrap();
        let probe = window::window_metric("test_probe").expect("a window metric");
        let end = T0 + 1000 * N;
        let raw = window::series(&conn, &[gpu], &[probe], T0, end, 60_000, Source::Raw).unwrap();
        let rolled =
            window::series(&conn, &[gpu], &[probe], T0, end, 60_000, Source::Rollups).unwrap();
        let max = |s: &[window::Series]| -> Vec<Option<f64>> {
            s[0].points.iter().map(|p| p.max).collect()
        };
        assert_eq!(max(&raw), vec![Some(69.0), Some(69.0)]);
        assert_eq!(max(&rolled), max(&raw));

        // `history --metric` (and its API twin) offers it.
        let doc = crate::views::api::history(
            &[
                ("metric".into(), "test_probe".into()),
                ("from".into(), T0.to_string()),
                ("to".into(), end.to_string()),
                ("step".into(), "1m".into()),
            ],
            &conn,
            end,
        )
        .expect("history of the probe");
        assert!(doc.contains("test_probe"), "{doc}");

        // Both `/metrics` namings.
        for (names, family) in [
            ("dcgm", "DCGM_FI_TEST_PROBE{"),
            ("gpuwatch", "gpuwatch_gpu_test_probe_celsius{"),
        ] {
            let toml = format!(
                "database = {path:?}\nhost = \"n1\"\n[http]\nmetrics_names = \"{names}\"\n"
            );
            let cfg = Config::parse(&toml, Path::new("probe.toml")).expect("config");
            let health = crate::telemetry::Health::new(Duration::from_secs(60));
            let body = SharedScraper::default()
                .lock()
                .unwrap()
                .scrape(&cfg, &health, end, Format::Text)
                .expect("a scrape");
            let text = String::from_utf8_lossy(&body).into_owned();
            let line = text
                .lines()
                .find(|l| l.starts_with(family))
                .unwrap_or_else(|| panic!("no {family} in {text}"));
            assert!(line.ends_with(" 69"), "{line}");
        }
    }
}
