//! Running rule unit tests (`gpuwatch rules test`): a parsed [`TestFile`] is written as
//! samples into a temporary store, the rules are evaluated over it by the one [`Engine`]
//! (driven exactly like `gpuwatch replay`), and the alerts firing at each expected time are
//! compared with the expectation.
//!
//! Invariants: there is no second evaluation path — only `Engine::advance`/`evaluate` over a
//! real store; samples lie at `T0 + k * interval`; a check at time `at` sees every sample at
//! or before `T0 + at` evaluated (and, past the last sample, one evaluation at `at`); an
//! alert counts as firing when it is reported (not muted by inhibition).

use std::collections::BTreeMap;
use std::path::Path;

use super::engine::{Engine, EngineOptions};
use crate::model::{GpuInventory, GpuSample, ProcessInfo, ProcessSample, SampleStatus};
use crate::model::{TickBatch, TrainingPoint, TsMs};
use crate::store::{self, StoreConfig, StoreError};

use crate::rules::check::{RuleError, RuleErrors};
use crate::rules::unittest_file::{self, Expected, ExpectedAlerts, TestFile, TestGpu, Values};

/// The time of the first sample of every test.
pub const T0: TsMs = 1_700_000_000_000;
const MIB: f64 = 1024.0 * 1024.0;
const HOST: &str = "test-host";

/// Why a test file could not be run.
#[derive(Debug, thiserror::Error)]
pub enum UnitTestError {
    /// The test file or its rules are malformed (usage error).
    #[error("{0}")]
    Invalid(RuleErrors),
    #[error("{file}: {source}")]
    Store { file: String, source: StoreError },
    #[error("{file}: cannot create a temporary database: {source}")]
    TempDir {
        file: String,
        source: std::io::Error,
    },
}

/// Runs one test file; returns one message per failed expectation (empty = passed).
pub fn run_file(path: &Path) -> Result<Vec<String>, UnitTestError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        UnitTestError::Invalid(RuleErrors(vec![RuleError {
            file: origin.clone(),
            position: None,
            message: format!("cannot read test file: {e}"),
            hint: None,
        }]))
    })?;
    let test = unittest_file::parse(path, &origin, &text).map_err(UnitTestError::Invalid)?;
    let rules = match &test.rule_files {
        None => crate::rules::load_sources(&crate::rules::defaults()),
        Some(files) => crate::rules::load_files(files),
    }
    .map_err(UnitTestError::Invalid)?;
    let dir = tempfile::tempdir().map_err(|source| UnitTestError::TempDir {
        file: origin.clone(),
        source,
    })?;
    let with_file = |source| UnitTestError::Store {
        file: origin.clone(),
        source,
    };
    let mut st =
        store::open(&dir.path().join("test.db"), &StoreConfig::new(HOST)).map_err(with_file)?;
    let batches = batches(&test);
    st.write_ticks(&batches).map_err(with_file)?;
    let end = batches.last().map_or(T0, |b| b.ts_ms);
    let options = EngineOptions {
        staleness_ms: 3 * test.interval_ms,
        ..EngineOptions::default()
    };
    let mut engine = Engine::new(rules, options, T0 - 1);
    engine.world_mut().set_fetch_ahead(10 * 60_000);
    let mut expected: Vec<&ExpectedAlerts> = test.alerts.iter().collect();
    expected.sort_by_key(|a| a.at_ms);
    let mut pending = expected.into_iter().peekable();
    let mut failures = Vec::new();
    let conn = st.conn();
    while let Some(t) = engine
        .world_mut()
        .next_sample_time(conn, end)
        .map_err(with_file)?
    {
        while let Some(a) = pending.next_if(|a| T0 + a.at_ms < t) {
            failures.extend(compare(&origin, a, &engine));
        }
        engine.advance(conn, t).map_err(with_file)?;
        engine.evaluate(t);
    }
    for a in pending {
        let at = T0 + a.at_ms;
        if at > engine.world().fed_to {
            engine.advance(conn, at).map_err(with_file)?;
            engine.evaluate(at);
        }
        failures.extend(compare(&origin, a, &engine));
    }
    Ok(failures)
}

/// An alert firing at a check.
struct Actual {
    rule: String,
    gpu: Option<u32>,
    pid: Option<u32>,
    severity: String,
}

fn compare(origin: &str, want: &ExpectedAlerts, engine: &Engine) -> Option<String> {
    let world = engine.world();
    let got: Vec<Actual> = engine
        .firing()
        .map(|(k, sev)| {
            let gpu = world.gpus.get(&k.gpu_id);
            Actual {
                rule: k.rule.to_string(),
                gpu: gpu.map(|g| g.inv.index),
                pid: k
                    .process_id
                    .and_then(|p| gpu.and_then(|g| g.procs.get(&p)).map(|p| p.pid)),
                severity: sev.map_or("-", |s| s.as_str()).to_string(),
            }
        })
        .collect();
    let matches = |e: &Expected, a: &Actual| {
        e.rule == a.rule
            && e.gpu.is_none_or(|g| a.gpu == Some(g))
            && e.pid.is_none_or(|p| a.pid == Some(p))
            && e.severity.as_ref().is_none_or(|s| *s == a.severity)
    };
    let ok = want
        .firing
        .iter()
        .all(|e| got.iter().any(|a| matches(e, a)))
        && got
            .iter()
            .all(|a| want.firing.iter().any(|e| matches(e, a)));
    if ok {
        return None;
    }
    let show_severity = want.firing.iter().any(|e| e.severity.is_some());
    let expected: Vec<String> = want.firing.iter().map(expected_text).collect();
    let actual: Vec<String> = got.iter().map(|a| actual_text(a, show_severity)).collect();
    Some(format!(
        "{origin}: alert at {}: expected firing [{}], got [{}]",
        want.at_text,
        expected.join(", "),
        actual.join(", ")
    ))
}

fn expected_text(e: &Expected) -> String {
    let mut s = e.rule.clone();
    if let Some(g) = e.gpu {
        s.push_str(&format!(" gpu {g}"));
    }
    if let Some(p) = e.pid {
        s.push_str(&format!(" pid {p}"));
    }
    if let Some(sev) = &e.severity {
        s.push_str(&format!(" {sev}"));
    }
    s
}

fn actual_text(a: &Actual, show_severity: bool) -> String {
    let mut s = a.rule.clone();
    if let Some(g) = a.gpu {
        s.push_str(&format!(" gpu {g}"));
    }
    if let Some(p) = a.pid {
        s.push_str(&format!(" pid {p}"));
    }
    if show_severity {
        s.push_str(&format!(" {}", a.severity));
    }
    s
}

/// The store writes of a test: one batch per sample time, in time order.
fn batches(test: &TestFile) -> Vec<TickBatch> {
    let mut by_ts: BTreeMap<TsMs, TickBatch> = BTreeMap::new();
    fn at(by_ts: &mut BTreeMap<TsMs, TickBatch>, ts: TsMs) -> &mut TickBatch {
        by_ts.entry(ts).or_insert_with(|| TickBatch {
            ts_ms: ts,
            ..TickBatch::default()
        })
    }
    for (i, g) in test.gpus.iter().enumerate() {
        let inv = inventory(i, g);
        let len = g
            .series
            .values()
            .chain(g.processes.iter().map(|p| &p.mem))
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        at(&mut by_ts, T0).inventory.push(inv.clone());
        for k in 0..len {
            let ts = T0 + k as i64 * test.interval_ms;
            let batch = at(&mut by_ts, ts);
            let procs = processes(g, &inv.uuid, k, ts);
            if let Some(mut s) = sample(g, &inv, k, ts) {
                // Processes were observed where `process_count` has a value or the GPU
                // declares processes; `_` (or no process data at all) is unknown.
                let observed =
                    value(&g.series, "process_count", k).is_some() || !g.processes.is_empty();
                if observed && s.status == SampleStatus::Ok {
                    s.process_count = Some(procs.len() as u32);
                }
                batch.samples.push(s);
            }
            batch.processes.extend(procs);
        }
    }
    for tr in &test.training {
        for (k, v) in tr.values.iter().enumerate() {
            let Some(v) = v else { continue };
            let ts = T0 + k as i64 * tr.interval_ms;
            at(&mut by_ts, ts).training.push(TrainingPoint {
                ts_ms: ts,
                name: tr.name.clone(),
                labels: tr.labels.clone(),
                value: *v,
            });
        }
    }
    by_ts.into_values().collect()
}

fn inventory(index: usize, g: &TestGpu) -> GpuInventory {
    GpuInventory {
        index: index as u32,
        uuid: format!("GPU-00000000-0000-0000-0000-{index:012}"),
        name: g.name.clone(),
        memory_total_bytes: g.memory_total_mib.map(|m| m * 1024 * 1024),
        power_limit_mw: g.power_limit_w.map(|w| w * 1000),
        temp_slowdown_c: g.temp_slowdown,
        temp_shutdown_c: g.temp_shutdown,
        ..GpuInventory::default()
    }
}

fn value(series: &BTreeMap<String, Values>, name: &str, k: usize) -> Option<f64> {
    series.get(name).and_then(|v| v.get(k).copied().flatten())
}

/// The GPU's sample at step `k`, or `None` when every series is missing there.
fn sample(g: &TestGpu, inv: &GpuInventory, k: usize, ts: TsMs) -> Option<GpuSample> {
    let v = |name: &str| value(&g.series, name, k);
    if g.series.keys().all(|name| v(name).is_none()) {
        return None;
    }
    if v("lost").is_some_and(|x| x != 0.0) {
        return Some(GpuSample::empty(ts, &inv.uuid, SampleStatus::Lost));
    }
    if v("gap").is_some_and(|x| x != 0.0) {
        return Some(GpuSample::empty(
            ts,
            &inv.uuid,
            SampleStatus::DeadlineMissed,
        ));
    }
    let int = |name: &str| v(name).map(|x| x.max(0.0).round() as u32);
    let count = |name: &str| v(name).map(|x| x.max(0.0).round() as u64);
    let scaled = |name: &str, f: f64| v(name).map(|x| (x * f).max(0.0).round() as u32);
    let bytes = |x: f64| (x * MIB).max(0.0).round() as u64;
    let total = v("mem_total").map(bytes).or(inv.memory_total_bytes);
    let used = v("mem_used").map(bytes);
    let free = v("mem_free")
        .map(bytes)
        .or_else(|| total.zip(used).map(|(t, u)| t.saturating_sub(u)));
    let flag = |name: &str, bits: u64| v(name).map(|x| if x != 0.0 { bits } else { 0 });
    let throttle = match (flag("thermal_throttle", 0x40), flag("hw_slowdown", 0x08)) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) | b.unwrap_or(0)),
    };
    Some(GpuSample {
        ts_ms: ts,
        uuid: inv.uuid.clone(),
        status: SampleStatus::Ok,
        util_gpu_pct: int("util_gpu"),
        util_mem_pct: int("util_mem"),
        mem_used_bytes: used,
        mem_free_bytes: free,
        mem_total_bytes: total,
        temp_c: int("temp"),
        fan_pct: int("fan"),
        clock_sm_mhz: int("clock_sm"),
        clock_mem_mhz: int("clock_mem"),
        power_mw: scaled("power", 1000.0),
        power_limit_mw: scaled("power_limit", 1000.0).or(inv.power_limit_mw),
        pstate: int("pstate"),
        pcie_tx_kbs: scaled("pcie_tx", 1024.0),
        pcie_rx_kbs: scaled("pcie_rx", 1024.0),
        pcie_gen: int("pcie_gen"),
        pcie_width: int("pcie_width"),
        throttle_reasons: throttle,
        ecc_corrected: count("ecc_corrected"),
        ecc_uncorrected: count("ecc_uncorrected"),
        retired_pages: int("retired_pages"),
        remapped_rows_uncorrectable: int("remapped_rows_uncorrectable"),
        remap_pending: v("remap_pending").map(|x| x != 0.0),
        tensor_active_pct: v("tensor_active"),
        sm_active_pct: v("sm_active"),
        sm_occupancy_pct: v("sm_occupancy"),
        dram_active_pct: v("dram_active"),
        recovery_action: int("recovery_action"),
        nvlink_links_up: int("nvlink_links_up"),
        nvlink_crc_flit_errors: count("nvlink_crc_flit_errors"),
        nvlink_crc_data_errors: count("nvlink_crc_data_errors"),
        nvlink_replay_errors: count("nvlink_replay_errors"),
        nvlink_recovery_errors: count("nvlink_recovery_errors"),
        nvlink_kib: v("nvlink_traffic").map(|x| (x.max(0.0) * 1024.0).round() as u64),
        fabric_state: int("fabric_state").and_then(|x| u8::try_from(x).ok()),
        fabric_status: int("fabric_status"),
        ..GpuSample::default()
    })
}

/// `process_count` synthetic processes (pid 1000 + i) plus the declared processes that have
/// a memory value at step `k`.
fn processes(g: &TestGpu, uuid: &str, k: usize, ts: TsMs) -> Vec<ProcessSample> {
    let proc = |pid: u32, name: String, mem: Option<f64>| ProcessSample {
        ts_ms: ts,
        gpu_uuid: uuid.to_string(),
        process: ProcessInfo {
            pid,
            start_time_ms: T0,
            name: Some(name),
            cmdline: None,
            user: None,
            placement: None,
        },
        used_mem_bytes: mem.map(|m| (m * MIB).max(0.0).round() as u64),
    };
    let n = value(&g.series, "process_count", k).map_or(0, |x| x.max(0.0).round() as u32);
    let mut out: Vec<ProcessSample> = (0..n)
        .map(|i| proc(1000 + i, format!("proc{i}"), None))
        .collect();
    for p in &g.processes {
        if let Some(m) = p.mem.get(k).copied().flatten() {
            let name = p.name.clone().unwrap_or_else(|| format!("pid{}", p.pid));
            out.push(proc(p.pid, name, Some(m)));
        }
    }
    out
}
