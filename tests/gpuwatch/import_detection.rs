//! The default rules on the data people really keep: a plain `nvidia-smi --query-gpu` log,
//! without `--query-compute-apps` rows and without thresholds, imported and replayed through
//! the command line at 1 s and at 60 s sampling.
//!
//! - No process data is unknown, not "no processes": busy GPUs holding memory are never
//!   reported as orphaned memory (the bug this pins), and `gpu_idle` still sees a GPU held at
//!   0 % by its memory alone, while a free GPU raises nothing.
//! - A log without `temperature.gpu.tlimit` takes the slowdown threshold from the model
//!   table, and the alert says so; a hot but healthy H100 raises nothing.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const T0: i64 = 1_780_000_000; // 2026-05-28T20:26:40Z

fn gw(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["--log", "error"])
        .args(args)
        .output()
        .expect("run gpuwatch");
    assert!(
        out.status.success(),
        "gpuwatch {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two hours of four H100s: GPU 0 and 1 train (97-100 %, 60 GB) and GPU 0 runs hot but
/// healthy (84 °C), GPU 2 holds 1.1 GB at 0 % from the start (a forgotten notebook), GPU 3 is
/// free; from 60 min GPU 1 overheats (90 °C) while still training.
fn log(every_s: i64, units: bool) -> String {
    let u = |v: String, unit: &str| if units { format!("{v} {unit}") } else { v };
    let mut out = String::from(if units {
        "timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W]\n"
    } else {
        "timestamp, index, name, utilization.gpu, memory.used, memory.total, temperature.gpu, power.draw\n"
    });
    for k in (0..2 * 3600).step_by(every_s as usize) {
        let ts = chrono::DateTime::from_timestamp(T0 + k, 0)
            .expect("time")
            .format("%Y/%m/%d %H:%M:%S%.3f");
        for gpu in 0..4 {
            let wobble = (k * 7 + gpu * 13) % 4;
            let (util, mem, temp, power) = match gpu {
                0 => (97 + wobble, 60_000 + wobble * 3, 84, 640.0),
                1 if k >= 3600 => (97 + wobble, 61_000, 90, 650.0),
                1 => (97 + wobble, 61_000, 70, 630.0),
                2 => (0, 1_100, 34, 71.0),
                _ => (0, 0, 31, 69.5),
            };
            let _ = writeln!(
                out,
                "{ts}, {gpu}, NVIDIA H100 80GB HBM3, {}, {}, {}, {temp}, {}",
                u(util.to_string(), "%"),
                u(mem.to_string(), "MiB"),
                u("81559".into(), "MiB"),
                u(format!("{power:.2}"), "W"),
            );
        }
    }
    out
}

/// Replays the default rules over the imported log: (rule, gpu, summary) of each alert
/// that fired.
fn fired(dir: &Path, every_s: i64, units: bool) -> Vec<(String, u64, String)> {
    let csv = dir.join(format!("gpu-{every_s}.csv"));
    std::fs::write(&csv, log(every_s, units)).expect("write log");
    let db = dir.join(format!("gpu-{every_s}.db"));
    let db = db.to_str().expect("path");
    gw(&[
        "import",
        "nvidia-smi",
        csv.to_str().expect("path"),
        "--db",
        db,
        "--tz",
        "UTC",
        "--host",
        "node7",
    ]);
    gw(&["replay", "--db", db, "--format", "jsonl"])
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("jsonl"))
        .filter(|v| v["state"] == "firing")
        .map(|v| {
            (
                v["rule"].as_str().unwrap_or_default().to_string(),
                v["gpu"].as_u64().unwrap_or(99),
                v["summary"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn check(every_s: i64, units: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let got = fired(dir.path(), every_s, units);
    let rules: Vec<(&str, u64)> = got.iter().map(|(r, g, _)| (r.as_str(), *g)).collect();
    assert!(
        !rules.iter().any(|(r, _)| *r == "gpu_memory_orphaned"),
        "{every_s} s: a log without process rows never yields orphaned memory: {got:?}"
    );
    assert_eq!(
        rules,
        vec![("gpu_idle", 2), ("gpu_overheating", 1)],
        "{every_s} s: exactly the idle GPU and the overheating one: {got:?}"
    );
    let hot = &got[1].2;
    assert!(
        hot.contains("at 90 °C") && hot.contains("assumed from the H100 80GB HBM3 table"),
        "the threshold came from the model table, and the alert says so: {hot}"
    );
    let idle = &got[0].2;
    assert!(
        idle.contains("unknown process(es) hold 1.1 GiB"),
        "unknown processes stay unknown in the text: {idle}"
    );
}

#[test]
fn a_plain_query_gpu_log_sampled_every_second() {
    check(1, true);
}

#[test]
fn a_plain_query_gpu_log_sampled_every_minute_without_units() {
    check(60, false);
}
