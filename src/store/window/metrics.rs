//! The metric table of [`super`]: every per-GPU sample metric of the rule language (`util_gpu`,
//! `mem_used`, `thermal_throttle`, `lost`, ...) as an SQL expression over one `samples` row
//! and, where `rollups_1m` has one, its rollup column; the one set of aliases other tools'
//! names map to; lookups by name for `gpuwatch history`, reports, email charts and incidents.
//!
//! Invariants:
//! - [`WINDOW_METRICS`] holds exactly the metrics the rule evaluator reads from one `samples`
//!   row ([`is_sample_metric`], an exhaustive match: a new metric must choose), and each
//!   expression gives the evaluator's own number (`rules::eval::world::sample_value`) for
//!   the same row, in the rule language's units (%, MiB, °C, W, MHz, MB/s, 0/1, counts); the
//!   tests check both.
//! - Values come from `status = 0` (ok) rows only; a missed deadline or a lost GPU is no data.
//!   The exceptions are `lost` (`status = 2`) and `gap` (`status = 1`): 0/1 flags made of the
//!   status itself, defined for every row.
//! - Metrics without a rollup column ([`WindowMetric::has_rollup`] false: `mem_free`,
//!   `mem_total`, `mem_used_ratio`, `power_limit`, `pstate`, `pcie_gen`, `pcie_width`, the
//!   throttle flags, the ECC and row-remap counters, `lost`, `gap`, `process_count`) read as
//!   no data (`None`) from the rollups, never 0; `gpuwatch history` offers only the metrics
//!   with one ([`resolve_metrics`]), since it reads long ranges from the rollups.

use crate::rules::ast::Metric;
use crate::rules::names::{metric_by_name, metric_name};

/// A per-GPU sample metric: its name, unit and title, and how to read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowMetric {
    /// The rule language's name (`util_gpu`, `mem_used`, ...).
    pub name: &'static str,
    /// `%`, `MiB`, `°C`, `W`, `MHz`, `MB/s`; empty for ratios, flags, counts and numbers.
    pub unit: &'static str,
    /// Human title.
    pub title: &'static str,
    /// SQL over one `samples` row, in the stored unit.
    raw: &'static str,
    /// True when `raw` is only a value in ok rows (everything but `lost` and `gap`).
    ok_only: bool,
    /// The `rollups_1m` column prefix (`{c}_min`, `{c}_max`, `{c}_avg`), if there is one.
    rollup_col: Option<&'static str>,
    /// Divisor from the stored unit to `unit`.
    scale: f64,
}

impl WindowMetric {
    /// True when `rollups_1m` holds min/avg/max of this metric.
    pub fn has_rollup(&self) -> bool {
        self.rollup_col.is_some()
    }

    /// The SQL value of one `samples` row, in the stored unit (divide by [`Self::scale`]);
    /// NULL where the evaluator sees no data.
    pub(super) fn raw_sql(&self) -> String {
        if self.ok_only {
            format!("(CASE WHEN status = 0 THEN {} END)", self.raw)
        } else {
            format!("({})", self.raw)
        }
    }

    pub(super) fn rollup_col(&self) -> Option<&'static str> {
        self.rollup_col
    }

    pub(super) fn scale(&self) -> f64 {
        self.scale
    }
}

/// A metric of ok rows with a rollup column of the same name.
const fn rolled(
    name: &'static str,
    unit: &'static str,
    title: &'static str,
    raw: &'static str,
    scale: f64,
) -> WindowMetric {
    WindowMetric {
        name,
        unit,
        title,
        raw,
        ok_only: true,
        rollup_col: Some(name),
        scale,
    }
}

/// A metric of ok rows that the rollups do not hold.
const fn raw_only(
    name: &'static str,
    unit: &'static str,
    title: &'static str,
    raw: &'static str,
    scale: f64,
) -> WindowMetric {
    WindowMetric {
        name,
        unit,
        title,
        raw,
        ok_only: true,
        rollup_col: None,
        scale,
    }
}

/// A 0/1 flag made of the row's status.
const fn status_flag(
    name: &'static str,
    title: &'static str,
    status: &'static str,
) -> WindowMetric {
    WindowMetric {
        name,
        unit: "",
        title,
        raw: status,
        ok_only: false,
        rollup_col: None,
        scale: 1.0,
    }
}

const MIB: f64 = 1_048_576.0;

/// Every per-GPU sample metric, in display order: first the ten that `gpuwatch history`
/// offers (they have rollup columns), then the rest of the rule language's sample metrics.
pub const WINDOW_METRICS: &[WindowMetric] = &[
    rolled("util_gpu", "%", "GPU utilisation", "util_gpu_pct", 1.0),
    rolled(
        "util_mem",
        "%",
        "Memory controller utilisation",
        "util_mem_pct",
        1.0,
    ),
    rolled("mem_used", "MiB", "Memory used", "mem_used_bytes", MIB),
    rolled("temp", "°C", "Temperature", "temp_c", 1.0),
    rolled("power", "W", "Power", "power_mw", 1000.0),
    rolled("clock_sm", "MHz", "SM clock", "clock_sm_mhz", 1.0),
    rolled("clock_mem", "MHz", "Memory clock", "clock_mem_mhz", 1.0),
    rolled("fan", "%", "Fan", "fan_pct", 1.0),
    rolled("pcie_tx", "MB/s", "PCIe TX", "pcie_tx_kbs", 1024.0),
    rolled("pcie_rx", "MB/s", "PCIe RX", "pcie_rx_kbs", 1024.0),
    raw_only("mem_free", "MiB", "Memory free", "mem_free_bytes", MIB),
    raw_only("mem_total", "MiB", "Memory total", "mem_total_bytes", MIB),
    raw_only(
        "mem_used_ratio",
        "",
        "Memory used / total",
        "CASE WHEN mem_total_bytes > 0 THEN CAST(mem_used_bytes AS REAL) / mem_total_bytes END",
        1.0,
    ),
    raw_only("power_limit", "W", "Power limit", "power_limit_mw", 1000.0),
    raw_only("pstate", "", "Performance state", "pstate", 1.0),
    raw_only("pcie_gen", "", "PCIe link generation", "pcie_gen", 1.0),
    raw_only("pcie_width", "", "PCIe link width", "pcie_width", 1.0),
    // Thermal: SW (0x20) or HW (0x40) thermal slowdown.
    raw_only(
        "thermal_throttle",
        "",
        "Thermal throttle",
        "(throttle_reasons & 96) != 0",
        1.0,
    ),
    // HW slowdown (0x08) or HW power brake (0x80).
    raw_only(
        "hw_slowdown",
        "",
        "HW slowdown",
        "(throttle_reasons & 136) != 0",
        1.0,
    ),
    raw_only(
        "ecc_corrected",
        "",
        "ECC errors, corrected",
        "ecc_corrected",
        1.0,
    ),
    raw_only(
        "ecc_uncorrected",
        "",
        "ECC errors, uncorrected",
        "ecc_uncorrected",
        1.0,
    ),
    raw_only("retired_pages", "", "Retired pages", "retired_pages", 1.0),
    raw_only(
        "remapped_rows_uncorrectable",
        "",
        "Remapped rows, uncorrectable",
        "remapped_rows_uncorrectable",
        1.0,
    ),
    raw_only(
        "remap_pending",
        "",
        "Row remap pending",
        "remap_pending",
        1.0,
    ),
    raw_only(
        "process_count",
        "",
        "Compute processes",
        "process_count",
        1.0,
    ),
    raw_only(
        "tensor_active",
        "%",
        "Tensor pipes active",
        "tensor_active_pct",
        1.0,
    ),
    status_flag("lost", "GPU lost", "status = 2"),
    status_flag("gap", "Missed sample deadline", "status = 1"),
];

/// Short names accepted besides the rule language's; one alias may stand for several metrics.
/// The one set of aliases: `gpuwatch history --metric` and [`sample_metric`] both read it.
pub const WINDOW_ALIASES: &[(&str, &[&str])] = &[
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

/// The metric named `name` (rule-language name only), any metric of the table.
pub fn window_metric(name: &str) -> Option<WindowMetric> {
    WINDOW_METRICS.iter().find(|m| m.name == name).copied()
}

/// The table's entry for a rule-language metric; `None` for metrics that are not per-GPU
/// sample series (XIDs, process and training metrics).
pub fn metric_of(m: Metric) -> Option<WindowMetric> {
    if is_sample_metric(m) {
        window_metric(metric_name(m))
    } else {
        None
    }
}

/// The metric named `name` (or one of the [`WINDOW_ALIASES`] that stand for one metric, e.g.
/// `util`) when it is a per-GPU series stored in `samples`; `None` for process, XID and
/// training metrics and for unknown names.
pub fn sample_metric(name: &str) -> Option<Metric> {
    let name = match WINDOW_ALIASES.iter().find(|(a, _)| *a == name) {
        Some((_, [only])) => only,
        Some(_) => return None,
        None => name,
    };
    metric_by_name(name).filter(|m| is_sample_metric(*m))
}

/// True for the metrics read from one `samples` row (exhaustive: a new metric must choose).
pub fn is_sample_metric(m: Metric) -> bool {
    match m {
        Metric::UtilGpu
        | Metric::UtilMem
        | Metric::MemUsed
        | Metric::MemFree
        | Metric::MemTotal
        | Metric::MemUsedRatio
        | Metric::Temp
        | Metric::Fan
        | Metric::ClockSm
        | Metric::ClockMem
        | Metric::Power
        | Metric::PowerLimit
        | Metric::Pstate
        | Metric::PcieTx
        | Metric::PcieRx
        | Metric::PcieGen
        | Metric::PcieWidth
        | Metric::ThermalThrottle
        | Metric::HwSlowdown
        | Metric::EccCorrected
        | Metric::EccUncorrected
        | Metric::RetiredPages
        | Metric::RemappedRowsUncorrectable
        | Metric::RemapPending
        | Metric::Lost
        | Metric::Gap
        | Metric::ProcessCount
        | Metric::TensorActive => true,
        Metric::XidCritical
        | Metric::Xid
        | Metric::ProcessMem
        | Metric::TrainingStep
        | Metric::TrainingLoss
        | Metric::TrainingSourceFailing => false,
    }
}

/// The metrics `gpuwatch history` offers: those with a rollup column.
fn offered(name: &str) -> Option<WindowMetric> {
    window_metric(name).filter(WindowMetric::has_rollup)
}

/// Resolves `gpuwatch history --metric` names and aliases (`util`, `clocks`) into metrics
/// with a rollup column, without duplicates; the error names the first unknown name and
/// lists the valid ones.
pub fn resolve_metrics<S: AsRef<str>>(names: &[S]) -> Result<Vec<WindowMetric>, String> {
    let mut out: Vec<WindowMetric> = Vec::new();
    for n in names {
        let n = n.as_ref().trim();
        let found: Vec<WindowMetric> = match WINDOW_ALIASES.iter().find(|(a, _)| *a == n) {
            Some((_, targets)) => targets.iter().filter_map(|t| offered(t)).collect(),
            None => offered(n).into_iter().collect(),
        };
        if found.is_empty() {
            let names: Vec<&str> = WINDOW_METRICS
                .iter()
                .filter(|m| m.has_rollup())
                .map(|m| m.name)
                .collect();
            let aliases: Vec<&str> = WINDOW_ALIASES
                .iter()
                .filter(|(_, t)| t.iter().all(|t| offered(t).is_some()))
                .map(|(a, _)| *a)
                .collect();
            return Err(format!(
                "unknown metric {n:?}: valid metrics are {} (aliases: {})",
                names.join(", "),
                aliases.join(", ")
            ));
        }
        for f in found {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    Ok(out)
}
