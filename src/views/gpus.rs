//! Rendering GPU status for people (a compact nvidia-smi) and for programs (JSON).
//! One renderer serves `gpuwatch status` and the demo's live view.
//!
//! Invariant: a value that could not be read prints as `-` (JSON `null`), never as 0; a GPU
//! whose health cannot be judged is `unknown`, never `ok`.

use serde_json::{Value, json};

use crate::gpu_health::{self, Status};
use crate::model::{GpuSample, SampleStatus};
use crate::store::read::GpuStatusRow;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn opt<T: std::fmt::Display>(v: Option<T>, unit: &str) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v}{unit}"))
}

fn gib(b: Option<u64>) -> String {
    b.map_or_else(|| "-".to_string(), |b| format!("{:.1}", b as f64 / GIB))
}

fn watts(mw: Option<u32>) -> String {
    mw.map_or_else(
        || "-".to_string(),
        |mw| format!("{:.0}", mw as f64 / 1000.0),
    )
}

/// Human age: "3s", "4m", "2h", "5d".
pub fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// The state marks of a GPU row.
fn marks(r: &GpuStatusRow, stale_after_ms: i64) -> Vec<&'static str> {
    let mut m = Vec::new();
    if r.lost_at_ms.is_some()
        || r.latest
            .as_ref()
            .is_some_and(|s| s.status == SampleStatus::Lost)
    {
        m.push("LOST");
    }
    if r.latest
        .as_ref()
        .is_some_and(|s| s.status == SampleStatus::DeadlineMissed)
    {
        m.push("GAP");
    }
    if r.age_ms.is_none_or(|a| a > stale_after_ms) {
        m.push("STALE");
    }
    m
}

/// A fixed-width table, one line per GPU (plus one per extra process).
pub fn table(rows: &[GpuStatusRow], stale_after_ms: i64) -> String {
    let hosts: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.host.as_str()).collect();
    let multi_host = hosts.len() > 1;
    let mut out = format!(
        "{:<4} {:<24} {:>5} {:>15} {:>5} {:>11} {:>5}  {:<10} {:<7} {}\n",
        "GPU",
        "NAME",
        "UTIL",
        "MEMORY GiB",
        "TEMP",
        "POWER W",
        "AGE",
        "STATE",
        "HEALTH",
        "PROCESSES"
    );
    let mut last_host = None;
    for r in rows {
        if multi_host && last_host != Some(r.host.as_str()) {
            out.push_str(&format!("[{}]\n", r.host));
            last_host = Some(r.host.as_str());
        }
        let s = r.latest.as_ref();
        let mut name: String = r
            .inventory
            .name
            .clone()
            .unwrap_or_else(|| r.inventory.uuid.clone());
        name = name.trim_start_matches("NVIDIA ").to_string();
        // A MIG instance under its parent's row: its profile says what it is.
        if let Some(m) = &r.inventory.mig {
            name = format!("  MIG {} (GI {})", m.profile, m.gpu_instance_id);
        }
        if name.chars().count() > 24 {
            name = name.chars().take(23).collect::<String>() + "…";
        }
        let total = s
            .and_then(|s| s.mem_total_bytes)
            .or(r.inventory.memory_total_bytes);
        let mem = format!("{} / {}", gib(s.and_then(|s| s.mem_used_bytes)), gib(total));
        let power = format!(
            "{} / {}",
            watts(s.and_then(|s| s.power_mw)),
            watts(
                s.and_then(|s| s.power_limit_mw)
                    .or(r.inventory.power_limit_mw)
            )
        );
        let m = marks(r, stale_after_ms);
        let state = if m.is_empty() {
            "ok".to_string()
        } else {
            m.join(",")
        };
        let procs: Vec<String> = r
            .processes
            .iter()
            .map(|p| {
                let at = p
                    .placement
                    .as_ref()
                    .and_then(|x| x.short())
                    .map_or_else(String::new, |x| format!(" {x}"));
                format!(
                    "{}[{}]{at} {} GiB",
                    p.name.as_deref().unwrap_or("?"),
                    p.pid,
                    gib(p.used_mem_bytes)
                )
            })
            .collect();
        let line = format!(
            "{:<4} {:<24} {:>5} {:>15} {:>5} {:>11} {:>5}  {:<10} {:<7} {}",
            r.inventory.address(),
            name,
            opt(s.and_then(|s| s.util_gpu_pct), "%"),
            mem,
            opt(s.and_then(|s| s.temp_c), "C"),
            power,
            r.age_ms.map_or_else(|| "-".into(), age),
            state,
            if r.inventory.mig.is_some() {
                // Its hardware is its parent's row's.
                "parent"
            } else {
                health_word(gpu_health::judge(r, stale_after_ms).status)
            },
            processes_cell(procs.first(), s),
        );
        out.push_str(line.trim_end());
        out.push('\n');
        for p in procs.iter().skip(1) {
            out.push_str(&format!("{:>96}{p}\n", ""));
        }
    }
    out
}

/// The HEALTH cell: problems in capitals, like the STATE marks.
fn health_word(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Unknown => "unknown",
        Status::Warn => "WARN",
        Status::Fail => "FAIL",
    }
}

/// One line per reason of every GPU that is not `ok`, with its fix (empty when all are ok).
pub fn health_lines(rows: &[GpuStatusRow], stale_after_ms: i64) -> String {
    let mut out = String::new();
    for r in rows.iter().filter(|r| r.inventory.mig.is_none()) {
        let h = gpu_health::judge(r, stale_after_ms);
        for x in &h.reasons {
            if out.is_empty() {
                out.push_str("\nGPU health (not ok):\n");
            }
            let gpu = if rows.iter().any(|o| o.host != r.host) {
                format!("{} GPU {}", r.host, r.inventory.address())
            } else {
                format!("GPU {}", r.inventory.address())
            };
            out.push_str(&format!(
                "  {gpu} {} {}: {}; fix: {}\n",
                health_word(x.severity),
                x.code,
                x.text,
                x.fix
            ));
        }
    }
    out
}

/// The PROCESSES cell: the first process, "none" when the list was observed empty,
/// "unknown" when it was not observed (never "no processes" for want of data).
fn processes_cell(first: Option<&String>, s: Option<&GpuSample>) -> String {
    let count = s.and_then(|s| s.process_count);
    match (first, count) {
        (Some(p), Some(_)) => p.clone(),
        (Some(p), None) => format!("{p} (list incomplete)"),
        (None, Some(0)) => "none".into(),
        (None, Some(n)) => format!("{n} (not resolved)"),
        (None, None) if s.is_some() => "unknown".into(),
        (None, None) => "-".into(),
    }
}

/// One process of `status --format json`.
fn process_json(p: &crate::store::read::GpuProcessRow) -> Value {
    let mut v = json!({
        "pid": p.pid,
        "start_time_ms": p.start_time_ms,
        "name": p.name,
        "user": p.user,
        "used_mem_bytes": p.used_mem_bytes,
    });
    add_placement(&mut v, p.placement.as_ref());
    v
}

/// A process's placement keys (`pod`, `namespace`, `container`, `container_id`, `runtime`,
/// `pod_uid`, `slurm_job`, `slurm_step`, `slurm_job_name`) added to its JSON object; each
/// null when unknown. `status` and `incident` both write them through this.
pub fn add_placement(v: &mut Value, pl: Option<&crate::model::Placement>) {
    let Some(o) = v.as_object_mut() else { return };
    let text = |f: fn(&crate::model::Placement) -> &Option<String>| {
        json!(pl.and_then(|x| f(x).as_deref()))
    };
    o.insert("pod".into(), text(|x| &x.pod));
    o.insert("namespace".into(), text(|x| &x.namespace));
    o.insert("container".into(), text(|x| &x.container));
    o.insert("container_id".into(), text(|x| &x.container_id));
    o.insert("runtime".into(), text(|x| &x.runtime));
    o.insert("pod_uid".into(), text(|x| &x.pod_uid));
    o.insert("slurm_job".into(), json!(pl.and_then(|x| x.slurm_job)));
    o.insert("slurm_step".into(), text(|x| &x.slurm_step));
    o.insert("slurm_job_name".into(), text(|x| &x.slurm_job_name));
}

/// Machine-readable status: an array of GPU objects.
pub fn json(rows: &[GpuStatusRow], stale_after_ms: i64) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let s = r.latest.as_ref();
                let holder = r.pod();
                json!({
                    "host": r.host,
                    "index": r.inventory.index,
                    "address": r.inventory.address(),
                    "gpu_instance_id": r.inventory.mig.as_ref().map(|m| m.gpu_instance_id),
                    "gpu_instance_profile": r.inventory.mig.as_ref().map(|m| m.profile.as_str()),
                    "parent_uuid": r.inventory.mig.as_ref().map(|m| m.parent_uuid.as_str()),
                    "uuid": r.inventory.uuid,
                    "name": r.inventory.name,
                    "pci_bus_id": r.inventory.pci_bus_id,
                    "driver_version": r.inventory.driver_version,
                    "state": marks(r, stale_after_ms),
                    "lost_at_ms": r.lost_at_ms,
                    "sample_ts_ms": s.map(|s| s.ts_ms),
                    "age_ms": r.age_ms,
                    "util_gpu_pct": s.and_then(|s| s.util_gpu_pct),
                    "util_mem_pct": s.and_then(|s| s.util_mem_pct),
                    "mem_used_bytes": s.and_then(|s| s.mem_used_bytes),
                    "mem_total_bytes": s.and_then(|s| s.mem_total_bytes).or(r.inventory.memory_total_bytes),
                    "temp_c": s.and_then(|s| s.temp_c),
                    "temp_slowdown_c": r.inventory.temp_slowdown_c,
                    "power_mw": s.and_then(|s| s.power_mw),
                    "power_limit_mw": s.and_then(|s| s.power_limit_mw).or(r.inventory.power_limit_mw),
                    "clock_sm_mhz": s.and_then(|s| s.clock_sm_mhz),
                    "throttle_reasons": s.and_then(|s| s.throttle_reasons),
                    "ecc_uncorrected": s.and_then(|s| s.ecc_uncorrected),
                    // null: the process list was not observed (unknown, not none).
                    "process_count": s.and_then(|s| s.process_count),
                    // The pod holding the GPU (null when unknown or several).
                    "pod": holder.map(|h| h.pod),
                    "namespace": holder.map(|h| h.namespace),
                    "container": holder.and_then(|h| h.container),
                    "processes": r.processes.iter().map(process_json).collect::<Vec<_>>(),
                    "health": gpu_health::judge(r, stale_after_ms).json(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuInventory, GpuSample};

    fn row(util: Option<u32>) -> GpuStatusRow {
        GpuStatusRow {
            host: "h".into(),
            inventory: GpuInventory {
                index: 3,
                uuid: "GPU-1".into(),
                name: Some("NVIDIA H100 80GB HBM3".into()),
                ..Default::default()
            },
            inventory_known: true,
            first_seen_ms: 0,
            last_seen_ms: 0,
            lost_at_ms: None,
            latest: Some(GpuSample {
                util_gpu_pct: util,
                mem_used_bytes: Some(0),
                ..Default::default()
            }),
            age_ms: Some(1000),
            processes: Vec::new(),
            holder: None,
            recent_xids: Vec::new(),
        }
    }

    #[test]
    fn missing_values_are_dashes_and_zero_is_zero() {
        let t = table(&[row(None)], 10_000);
        let line = t.lines().nth(1).expect("a GPU line");
        assert!(line.starts_with("3    H100 80GB HBM3"), "{line}");
        assert!(line.contains("    - "), "{line}");
        assert!(line.contains("0.0 / -"), "{line}");
        let t = table(&[row(Some(0))], 10_000);
        assert!(t.lines().nth(1).expect("line").contains("   0% "), "{t}");
    }

    #[test]
    fn processes_not_observed_are_unknown_not_none() {
        let cell = |count: Option<u32>| {
            let mut r = row(Some(0));
            if let Some(s) = r.latest.as_mut() {
                s.process_count = count;
            }
            let t = table(std::slice::from_ref(&r), 10_000);
            let line = t.lines().nth(1).expect("a GPU line").to_string();
            (line, json(&[r], 10_000)[0]["process_count"].clone())
        };
        let (line, j) = cell(None);
        assert!(line.ends_with("unknown"), "{line}");
        assert_eq!(j, Value::Null);
        let (line, j) = cell(Some(0));
        assert!(line.ends_with("none"), "{line}");
        assert_eq!(j, json!(0));
    }

    #[test]
    fn health_has_a_column_and_a_line_per_reason_and_processes_stay_aligned() {
        let mut r = row(Some(90));
        if let Some(s) = r.latest.as_mut() {
            s.remap_pending = Some(true);
            s.process_count = Some(2);
        }
        let p = |pid| crate::store::read::GpuProcessRow {
            pid,
            start_time_ms: 0,
            name: Some("python".into()),
            user: None,
            used_mem_bytes: None,
            placement: None,
        };
        r.processes = vec![p(10), p(11)];
        let t = table(std::slice::from_ref(&r), 10_000);
        let lines: Vec<&str> = t.lines().collect();
        let col = lines[0].find("PROCESSES").expect("header");
        assert_eq!(lines[0].find("HEALTH"), Some(col - 8), "{t}");
        assert_eq!(&lines[1][col - 8..col], "WARN    ", "{t}");
        assert_eq!(lines[1].find("python[10]"), Some(col), "{t}");
        assert_eq!(lines[2].find("python[11]"), Some(col), "{t}");
        let h = health_lines(std::slice::from_ref(&r), 10_000);
        assert!(
            h.contains("\n  GPU 3 WARN row_remap_pending: a memory row remap is pending"),
            "{h}"
        );
        assert_eq!(json(&[r], 10_000)[0]["health"]["status"], "warn");
        // Nothing read about its health: unknown, not ok.
        let t = table(&[row(Some(0))], 10_000);
        assert_eq!(&t.lines().nth(1).expect("line")[col - 8..col], "unknown ");
    }

    #[test]
    fn stale_and_lost_are_marked() {
        let mut r = row(Some(5));
        r.age_ms = Some(60_000);
        r.lost_at_ms = Some(1);
        let j = json(&[r], 10_000);
        assert_eq!(j[0]["state"], json!(["LOST", "STALE"]));
        assert_eq!(j[0]["util_gpu_pct"], json!(5));
    }
}
