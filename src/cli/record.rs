//! `gpuwatch scenario record`: samples the GPUs through NVML for a while and writes what it
//! saw as a scenario file for the simulated library (`crates/sim/SCENARIOS.md`), so a real
//! GPU's inventory, limits, unsupported calls and behaviour can be replayed without it.
//!
//! Invariant: the file is built from the same `Sampler` as the daemon, one timeline segment
//! per tick with the exact values read; a value NVML could not read is left out of its
//! segment (the simulator then derives it) and a metric never read at all becomes
//! `not_supported`, so the simulated library answers NOT_SUPPORTED like the real one.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::model::{GpuInventory, GpuSample, ProcessSample, TsMs};
use crate::sampler::nvml;
use crate::sampler::procs::ProcessOverrides;
use crate::sampler::{Sampler, SamplerConfig};

use super::{Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// NVML library to load [default: the system's libnvidia-ml.so.1].
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// How long to record.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Sampling interval.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Output file [default: standard output].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn run(args: RecordArgs) -> Result<(), Failure> {
    if args.interval.is_zero() || args.duration < args.interval {
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!("--duration must be at least one --interval"),
        ));
    }
    let handle = nvml::init(args.nvml_library.as_deref()).map_err(|e| fail(exit::NVML, e))?;
    let mut sampler = Sampler::start(
        &handle,
        SamplerConfig {
            deadline: args.interval.mul_f64(0.8),
            inventory_interval: Duration::from_secs(3600),
            processes: true,
            redact_patterns: Vec::new(),
            startup_timeout: Duration::from_secs(10),
            ..Default::default()
        },
        ProcessOverrides::default(),
    )?;
    let ticks = (args.duration.as_millis() / args.interval.as_millis()) as usize;
    let mut batches = Vec::with_capacity(ticks);
    let start = Instant::now();
    for k in 0..ticks {
        let due = start + args.interval * k as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        batches.push(sampler.tick(k as TsMs * args.interval.as_millis() as TsMs));
    }
    let mut inventory: Vec<GpuInventory> = sampler.inventories().cloned().collect();
    inventory.sort_by_key(|i| i.index);
    let text = render(&handle, &inventory, &batches, args.interval);
    match &args.output {
        Some(p) => std::fs::write(p, text).map_err(|e| {
            fail(
                exit::FAILURE,
                anyhow::anyhow!("cannot write {}: {e}", p.display()),
            )
        })?,
        None => print!("{text}"),
    }
    Ok(())
}

/// The preset closest to an NVML device name (every field is overridden anyway).
fn preset(name: &str) -> &'static str {
    let n = name.to_ascii_uppercase();
    match () {
        _ if n.contains("H200") => "H200-141GB",
        _ if n.contains("H100") => "H100-SXM-80GB",
        _ if n.contains("A100") && n.contains("80GB") => "A100-SXM4-80GB",
        _ if n.contains("A100") => "A100-SXM4-40GB",
        _ if n.contains("L40S") => "L40S",
        _ if n.contains("4090") => "RTX-4090",
        _ if n.contains("T4") => "T4",
        _ => "H100-SXM-80GB",
    }
}

fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The scenario text for what was sampled.
pub fn render(
    h: &nvml::NvmlHandle,
    inventory: &[GpuInventory],
    batches: &[crate::model::TickBatch],
    interval: Duration,
) -> String {
    let ms = interval.as_millis() as i64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Recorded by `gpuwatch scenario record`: {} GPU(s), {} ticks of {ms} ms.",
        inventory.len(),
        batches.len()
    );
    let _ = writeln!(
        out,
        "[scenario]\nname = \"recorded\"\ntick_ms = {ms}\nduration = \"{}ms\"",
        ms * batches.len().max(1) as i64
    );
    if let Some(v) = &h.driver_version {
        let _ = writeln!(out, "driver_version = {}", q(v));
    }
    if let Some(v) = &h.nvml_version {
        let _ = writeln!(out, "nvml_version = {}", q(v));
    }
    if let Some(v) = h.cuda_driver_version {
        let _ = writeln!(out, "cuda_driver_version = {v}");
    }
    for inv in inventory {
        let samples: Vec<&GpuSample> = batches
            .iter()
            .flat_map(|b| b.samples.iter())
            .filter(|s| s.uuid == inv.uuid)
            .collect();
        gpu(
            &mut out,
            inv,
            &samples,
            ms,
            batches.first().map_or(0, |b| b.ts_ms),
        );
    }
    processes(&mut out, inventory, batches, ms);
    out
}

fn gpu(out: &mut String, inv: &GpuInventory, samples: &[&GpuSample], ms: i64, t0: TsMs) {
    let name = inv.name.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "\n[[gpu]]\nmodel = {}\nname = {}\nuuid = {}",
        q(preset(&name)),
        q(&name),
        q(&inv.uuid)
    );
    let opt = |out: &mut String, key: &str, v: Option<String>| {
        if let Some(v) = v {
            let _ = writeln!(out, "{key} = {v}");
        }
    };
    opt(out, "serial", inv.serial.as_deref().map(q));
    opt(out, "pci_bus_id", inv.pci_bus_id.as_deref().map(q));
    opt(
        out,
        "memory_total_mib",
        inv.memory_total_bytes.map(|b| (b >> 20).to_string()),
    );
    let w = |mw: Option<u32>| mw.map(|v| format!("{}", f64::from(v) / 1000.0));
    opt(out, "power_limit_w", w(inv.power_limit_mw));
    opt(out, "power_min_w", w(inv.power_limit_min_mw));
    opt(out, "power_max_w", w(inv.power_limit_max_mw));
    opt(
        out,
        "temp_slowdown",
        inv.temp_slowdown_c.map(|v| v.to_string()),
    );
    opt(
        out,
        "temp_shutdown",
        inv.temp_shutdown_c.map(|v| v.to_string()),
    );
    opt(
        out,
        "temp_gpu_max",
        inv.temp_gpu_max_c.map(|v| v.to_string()),
    );
    opt(out, "pcie_max_gen", inv.pcie_max_gen.map(|v| v.to_string()));
    opt(
        out,
        "pcie_max_width",
        inv.pcie_max_width.map(|v| v.to_string()),
    );
    opt(
        out,
        "persistence_mode",
        inv.persistence_mode.map(|v| v.to_string()),
    );
    opt(out, "mig_mode", inv.mig_mode.map(|v| v.to_string()));
    // (symbol, was it ever read?)
    let never = |f: &dyn Fn(&GpuSample) -> bool| !samples.iter().any(|s| f(s));
    let mut unsupported = Vec::new();
    for (symbol, missing) in [
        ("nvmlDeviceGetFanSpeed_v2", never(&|s| s.fan_pct.is_some())),
        ("nvmlDeviceGetPowerUsage", never(&|s| s.power_mw.is_some())),
        // GPM gave no tensor activity (an old driver, a board without it).
        (
            "nvmlGpmSampleGet",
            samples.len() > 1 && never(&|s| s.tensor_active_pct.is_some()),
        ),
        (
            "nvmlDeviceGetTotalEnergyConsumption",
            never(&|s| s.energy_mj.is_some()),
        ),
        (
            "nvmlDeviceGetTotalEccErrors",
            never(&|s| s.ecc_uncorrected.is_some()),
        ),
        (
            "nvmlDeviceGetRemappedRows",
            never(&|s| s.remapped_rows_uncorrectable.is_some()),
        ),
        (
            "nvmlDeviceGetRetiredPages",
            never(&|s| s.retired_pages.is_some()),
        ),
    ] {
        if missing {
            unsupported.push(q(symbol));
        }
    }
    if !unsupported.is_empty() {
        let _ = writeln!(out, "not_supported = [{}]", unsupported.join(", "));
    }
    for s in samples {
        let from = s.ts_ms - t0;
        let _ = writeln!(
            out,
            "[[gpu.timeline]]\nfrom = \"{from}ms\"\nto = \"{}ms\"",
            from + ms
        );
        let num = |out: &mut String, key: &str, v: Option<String>| {
            if let Some(v) = v {
                let _ = writeln!(out, "{key} = {v}");
            }
        };
        let u = |v: Option<u32>| v.map(|v| v.to_string());
        num(out, "util_gpu", u(s.util_gpu_pct));
        num(out, "util_mem", u(s.util_mem_pct));
        num(
            out,
            "mem_used_bytes",
            s.mem_used_bytes.map(|v| v.to_string()),
        );
        num(out, "temp", u(s.temp_c));
        num(out, "power_w", w(s.power_mw));
        num(out, "fan", u(s.fan_pct));
        num(out, "sm_clock", u(s.clock_sm_mhz));
        num(out, "mem_clock", u(s.clock_mem_mhz));
        num(out, "pcie_tx_kbs", u(s.pcie_tx_kbs));
        num(out, "pcie_rx_kbs", u(s.pcie_rx_kbs));
        for (key, v) in [
            ("tensor_active", s.tensor_active_pct),
            ("sm_active", s.sm_active_pct),
            ("sm_occupancy", s.sm_occupancy_pct),
            ("dram_active", s.dram_active_pct),
        ] {
            num(out, key, v.map(|v| format!("{v:.1}")));
        }
        num(out, "recovery_action", u(s.recovery_action));
        num(out, "pstate", u(s.pstate));
        num(out, "throttle", s.throttle_reasons.map(|v| v.to_string()));
    }
}

/// A process on a GPU: first and last tick time, memory sum and count, the process.
type Seen<'a> = (TsMs, TsMs, f64, f64, &'a ProcessSample);

fn processes(
    out: &mut String,
    inventory: &[GpuInventory],
    batches: &[crate::model::TickBatch],
    ms: i64,
) {
    let mut seen: BTreeMap<(u32, u32), Seen<'_>> = BTreeMap::new();
    let t0 = batches.first().map_or(0, |b| b.ts_ms);
    for b in batches {
        for p in &b.processes {
            let Some(gpu) = inventory
                .iter()
                .find(|i| i.uuid == p.gpu_uuid)
                .map(|i| i.index)
            else {
                continue;
            };
            let e = seen
                .entry((p.process.pid, gpu))
                .or_insert((b.ts_ms, b.ts_ms, 0.0, 0.0, p));
            e.1 = b.ts_ms;
            if let Some(m) = p.used_mem_bytes {
                e.2 += m as f64;
                e.3 += 1.0;
            }
        }
    }
    for ((pid, gpu), (first, last, sum, n, p)) in seen {
        let _ = writeln!(
            out,
            "\n[[process]]\npid = {pid}\nname = {}",
            q(p.process.name.as_deref().unwrap_or("process"))
        );
        if let Some(c) = &p.process.cmdline {
            let _ = writeln!(out, "cmdline = {}", q(c));
        }
        if let Some(u) = &p.process.user {
            let _ = writeln!(out, "user = {}", q(u));
        }
        let _ = writeln!(
            out,
            "gpu = {gpu}\nstart = \"{}ms\"\nend = \"{}ms\"",
            first - t0,
            last - t0 + ms
        );
        if n > 0.0 {
            let _ = writeln!(out, "mem_bytes = {}", (sum / n).round() as u64);
        }
    }
}
