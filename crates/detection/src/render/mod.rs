//! Rendering a scenario as the files people keep: `nvidia-smi --query-gpu=... --format=csv`
//! logs (with or without units), a `--query-compute-apps` log, and the job's training step as
//! a Prometheus scrape every 15 s in OpenMetrics text (`training_step{gpu="N",job="J"} STEP
//! SECONDS` lines, then `# EOF`).
//!
//! Invariants:
//! - Every value comes from the sim (`gpu_state`, `processes_at`, `training_at`) at the poll's
//!   tick; nothing is invented here except the poll jitter and the unit style.
//! - A poll at tick `t` is stamped `base + t s + jitter` (0–40 ms, seeded) with no zone, in
//!   nvidia-smi's `YYYY/MM/DD HH:MM:SS.mmm`; every GPU and process row of one poll shares
//!   the poll's stamp, and stamps strictly increase from poll to poll.
//! - `temperature.gpu.tlimit` is written as `T.Limit − temp`, T.Limit being the GPU's maximum
//!   operating temperature (`temp_gpu_max`), for the models whose drivers report that scale
//!   (Hopper, Ada), `[N/A]` for the others, as the real captures show; NULL cells are `[N/A]`.
//! - Training points exist exactly where the sim reports the job (`training_at`): a hang or a
//!   checkpoint reports a frozen step, a gap or a restart nothing; only the series of the GPUs
//!   the shape shows are written.
//! - The `basic+apps` GPU log adds `pci.bus_id` and its process rows name the GPU by
//!   `gpu_bus_id`: its GPU log has no uuid, so a uuid in the process rows would name a GPU the
//!   importer has never seen.

#[cfg(test)]
mod tests;

use std::fmt::Write as _;

use gpuwatch_sim::{GpuSpec, GpuState, Scenario};

use crate::shape::Kind;

/// Tick 0 of every CSV rendering: 2025-03-03T00:00:00Z.
pub const BASE_MS: i64 = 1_740_960_000_000;

const MIB: f64 = 1_048_576.0;

/// How one CSV shape is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsvStyle {
    pub kind: Kind,
    pub apps: bool,
    pub interval_s: u32,
    /// `97 %` and `utilization.gpu [%]`, or plain numbers and plain headers (`nounits`).
    pub units: bool,
}

/// The files of one CSV shape.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvFiles {
    /// The `--query-gpu` log.
    pub gpu: String,
    /// The `--query-compute-apps` log, when the shape has one.
    pub apps: Option<String>,
}

/// One column of the `--query-gpu` log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    Timestamp,
    Index,
    Name,
    Uuid,
    BusId,
    UtilGpu,
    UtilMem,
    MemUsed,
    MemTotal,
    Temp,
    TLimit,
    Power,
    PowerLimit,
    ClockSm,
    ClockMem,
    Pstate,
    Reasons,
    EccUncorrected,
    Fan,
}

impl Col {
    /// Every column, in the order of a full log.
    pub const ALL: [Col; 19] = [
        Col::Timestamp,
        Col::Index,
        Col::Name,
        Col::Uuid,
        Col::BusId,
        Col::UtilGpu,
        Col::UtilMem,
        Col::MemUsed,
        Col::MemTotal,
        Col::Temp,
        Col::TLimit,
        Col::Power,
        Col::PowerLimit,
        Col::ClockSm,
        Col::ClockMem,
        Col::Pstate,
        Col::Reasons,
        Col::EccUncorrected,
        Col::Fan,
    ];

    pub fn field(self) -> &'static str {
        match self {
            Col::Timestamp => "timestamp",
            Col::Index => "index",
            Col::Name => "name",
            Col::Uuid => "uuid",
            Col::BusId => "pci.bus_id",
            Col::UtilGpu => "utilization.gpu",
            Col::UtilMem => "utilization.memory",
            Col::MemUsed => "memory.used",
            Col::MemTotal => "memory.total",
            Col::Temp => "temperature.gpu",
            Col::TLimit => "temperature.gpu.tlimit",
            Col::Power => "power.draw",
            Col::PowerLimit => "power.limit",
            Col::ClockSm => "clocks.current.sm",
            Col::ClockMem => "clocks.current.memory",
            Col::Pstate => "pstate",
            Col::Reasons => "clocks_event_reasons.active",
            Col::EccUncorrected => "ecc.errors.uncorrected.volatile.total",
            Col::Fan => "fan.speed",
        }
    }

    /// The unit nvidia-smi writes after values and in brackets in the header.
    pub fn unit(self) -> Option<&'static str> {
        match self {
            Col::UtilGpu | Col::UtilMem | Col::Fan => Some("%"),
            Col::MemUsed | Col::MemTotal => Some("MiB"),
            Col::Power | Col::PowerLimit => Some("W"),
            Col::ClockSm | Col::ClockMem => Some("MHz"),
            _ => None,
        }
    }

    /// The cell of GPU `spec` in `state` (the timestamp is written by the caller).
    fn value(self, spec: &GpuSpec, st: &GpuState) -> String {
        let identity = matches!(self, Col::Index | Col::Name | Col::Uuid | Col::BusId);
        if st.lost && !identity {
            return "[GPU is lost]".to_string();
        }
        match self {
            Col::Timestamp => String::new(),
            Col::Index => spec.index.to_string(),
            Col::Name => spec.name.clone(),
            Col::Uuid => spec.uuid.clone(),
            Col::BusId => spec.pci_bus_id.clone(),
            Col::UtilGpu => st.util_gpu.to_string(),
            Col::UtilMem => st.util_mem.to_string(),
            Col::MemUsed => mib(st.mem_used_bytes),
            Col::MemTotal => mib(st.mem_total_bytes),
            Col::Temp => st.temp_c.to_string(),
            Col::TLimit if reports_tlimit(spec) => {
                (i64::from(spec.temp_gpu_max_c) - i64::from(st.temp_c)).to_string()
            }
            Col::TLimit => "[N/A]".to_string(),
            Col::Power => watts(st.power_mw),
            Col::PowerLimit => watts(spec.power_limit_mw),
            Col::ClockSm => st.sm_clock_mhz.to_string(),
            Col::ClockMem => st.mem_clock_mhz.to_string(),
            Col::Pstate => format!("P{}", st.pstate),
            Col::Reasons => format!("0x{:016X}", st.throttle_reasons),
            Col::EccUncorrected if has_ecc(spec) => st.ecc_uncorrected.to_string(),
            Col::EccUncorrected => "[N/A]".to_string(),
            Col::Fan => st.fan_percent.to_string(),
        }
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.0}", bytes as f64 / MIB)
}

fn watts(mw: u32) -> String {
    format!("{:.2}", f64::from(mw) / 1000.0)
}

/// Whether the driver reports temperatures on the T.Limit scale for this model: the real
/// captures show it for Hopper and Ada (H100, H200, L40S, RTX 4090, RTX 4000 Ada) and `N/A`
/// for Ampere, Turing and Volta (A100, A10, T4, TITAN V).
fn reports_tlimit(spec: &GpuSpec) -> bool {
    matches!(
        spec.model.as_str(),
        "H100-SXM-80GB" | "H200-141GB" | "L40S" | "RTX-4090"
    )
}

fn has_ecc(spec: &GpuSpec) -> bool {
    !spec
        .not_supported
        .iter()
        .any(|s| s == "nvmlDeviceGetTotalEccErrors")
}

/// The `--query-gpu` fields of a shape, in order.
pub fn columns(kind: Kind, apps: bool, fans: bool) -> Vec<Col> {
    use Col::*;
    match kind {
        // Every column in declaration order; `Fan` (the last) only where the GPUs have fans.
        Kind::Full => Col::ALL.into_iter().filter(|c| fans || *c != Fan).collect(),
        Kind::Basic if apps => vec![
            Timestamp, Index, Name, BusId, UtilGpu, MemUsed, MemTotal, Temp, Power,
        ],
        Kind::Basic => vec![
            Timestamp, Index, Name, UtilGpu, MemUsed, MemTotal, Temp, Power,
        ],
        Kind::Minimal => vec![Timestamp, UtilGpu, MemUsed],
    }
}

/// nvidia-smi's zone-less timestamp of epoch milliseconds.
pub fn timestamp(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.format("%Y/%m/%d %H:%M:%S%.3f").to_string())
        .unwrap_or_default()
}

/// The GPUs a shape shows: GPU 0 alone for `minimal`, else all.
pub fn shown_gpus(s: &Scenario, kind: Kind) -> Vec<usize> {
    match kind {
        Kind::Minimal => vec![0],
        _ => (0..s.gpu_count()).collect(),
    }
}

fn header(cells: &[(&str, Option<&str>)], units: bool) -> String {
    let names: Vec<String> = cells
        .iter()
        .map(|&(f, u)| match u {
            Some(u) if units => format!("{f} [{u}]"),
            _ => f.to_string(),
        })
        .collect();
    names.join(", ")
}

fn cell(value: String, unit: Option<&str>, units: bool) -> String {
    match unit {
        Some(u) if units && !value.starts_with('[') => format!("{value} {u}"),
        _ => value,
    }
}

/// The CSV files of `s` in `style`; `jitter` draws each poll's 0–40 ms.
pub fn csv(s: &Scenario, style: CsvStyle, jitter: &mut fastrand::Rng) -> CsvFiles {
    let gpus = shown_gpus(s, style.kind);
    let fans = gpus.iter().all(|&g| s.gpu(g).num_fans > 0);
    let cols = columns(style.kind, style.apps, fans);
    let mut gpu = String::new();
    let heads: Vec<(&str, Option<&str>)> = cols.iter().map(|c| (c.field(), c.unit())).collect();
    let _ = writeln!(gpu, "{}", header(&heads, style.units));
    let by_bus = style.kind != Kind::Full;
    let mut apps = String::new();
    let apps_heads = [
        ("timestamp", None),
        (if by_bus { "gpu_bus_id" } else { "gpu_uuid" }, None),
        ("pid", None),
        ("process_name", None),
        ("used_gpu_memory", Some("MiB")),
    ];
    let _ = writeln!(apps, "{}", header(&apps_heads, style.units));
    let names: std::collections::HashMap<u32, &str> = s
        .processes()
        .iter()
        .map(|p| (p.pid, p.name.as_str()))
        .collect();
    let step = u64::from(style.interval_s.max(1));
    let mut tick = 0;
    while tick < s.duration_ticks() {
        let ts = timestamp(BASE_MS + tick as i64 * 1000 + jitter.i64(0..=40));
        for &g in &gpus {
            let spec = s.gpu(g);
            let st = s.gpu_state(g, tick);
            let row: Vec<String> = cols
                .iter()
                .map(|c| match c {
                    Col::Timestamp => ts.clone(),
                    c => cell(c.value(spec, &st), c.unit(), style.units),
                })
                .collect();
            let _ = writeln!(gpu, "{}", row.join(", "));
            if style.apps && !st.lost {
                let id = if by_bus { &spec.pci_bus_id } else { &spec.uuid };
                for p in s.processes_at(g, tick) {
                    let used = cell(mib(p.used_bytes), Some("MiB"), style.units);
                    let name = names.get(&p.pid).copied().unwrap_or("python");
                    let _ = writeln!(apps, "{ts}, {id}, {}, {name}, {used}", p.pid);
                }
            }
        }
        tick += step;
    }
    CsvFiles {
        gpu,
        apps: style.apps.then_some(apps),
    }
}

/// The scrape interval, seconds.
pub const SCRAPE_S: u64 = 15;

/// The OpenMetrics text of the training steps of `gpus`, or `None` when there is no point.
pub fn openmetrics(s: &Scenario, gpus: &[usize]) -> Option<String> {
    let mut out = String::from("# TYPE training_step gauge\n");
    let mut points = 0;
    let mut tick = 0;
    while tick < s.duration_ticks() {
        let secs = (BASE_MS + tick as i64 * 1000) as f64 / 1000.0;
        for v in s.training_at(tick) {
            if v.name != "training_step" {
                continue;
            }
            let shown = v
                .labels
                .iter()
                .find(|(k, _)| k == "gpu")
                .is_none_or(|(_, g)| g.parse().is_ok_and(|g: usize| gpus.contains(&g)));
            if !shown {
                continue;
            }
            let labels: Vec<String> = v
                .labels
                .iter()
                .map(|(k, val)| format!("{k}=\"{val}\""))
                .collect();
            let _ = writeln!(
                out,
                "training_step{{{}}} {} {secs:.3}",
                labels.join(","),
                v.value
            );
            points += 1;
        }
        tick += SCRAPE_S;
    }
    out.push_str("# EOF\n");
    (points > 0).then_some(out)
}
