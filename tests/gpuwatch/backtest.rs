//! `gpuwatch backtest --rules RULES.yml`: the user's Prometheus alerting rules evaluated by a
//! real Prometheus (Debian's, started by the command over a promtool backfill of the store)
//! beside gpuwatch's rules over the same imported history. Two GPUs for 4 hours at 15 s:
//! GPU 1 held idle for an hour (both sets alert: counterparts), GPU 0 dipping to 0 % for 3
//! minutes in a checkpoint during a period known to be healthy (their naive rule fires there:
//! a quiet-period alert; gpuwatch stays quiet).

use std::fmt::Write as _;

use crate::common::gpuwatch_run as gpuwatch;
use crate::training_support::require_tools;

const RULES: &str = r#"groups:
  - name: dcgm
    rules:
      - alert: GpuIdleHeld
        expr: DCGM_FI_DEV_GPU_UTIL < 5 and DCGM_FI_DEV_FB_USED > 1000
        for: 10m
        labels:
          severity: warning
      - alert: GpuUtilLow
        expr: DCGM_FI_DEV_GPU_UTIL < 5
        for: 1m
      - alert: GpuTooHot
        expr: DCGM_FI_DEV_GPU_TEMP > 87
        for: 5m
  - name: recorded
    rules:
      - record: gpu:util:avg
        expr: avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)
"#;

#[test]
fn their_rules_and_ours_side_by_side_over_the_same_data() {
    require_tools();
    let dir = tempfile::tempdir().expect("tmp");
    let t0 = (chrono::Utc::now().timestamp() - 6 * 3600) / 3600 * 3600;
    let mut csv = String::from("ts,gpu,util,mem,power,temp\n");
    for i in 0..960i64 {
        let t = i * 15;
        for g in 0..2 {
            // GPU 1 idle, holding 30 GB, from 2:00 to 3:00; GPU 0 checkpoints at 0:30 for 3 minutes.
            let idle = g == 1 && (7200..10800).contains(&t);
            let ckpt = g == 0 && (1800..1980).contains(&t);
            let (util, mem, power) = match (idle, ckpt) {
                (true, _) => (0, 30_000, 80),
                (_, true) => (0, 60_000, 120),
                _ => (95, 60_000, 600),
            };
            let _ = writeln!(csv, "{},{g},{util},{mem},{power},{}", t0 + t, 60 + g);
        }
    }
    let file = dir.path().join("node-1.csv");
    std::fs::write(&file, csv).expect("write");
    let db = dir.path().join("b.db");
    let db = db.to_str().expect("utf-8");
    let (code, out, err) = gpuwatch(&[
        "import",
        "csv",
        "--map",
        "timestamp=ts,index=gpu,utilization.gpu=util,memory.used=mem,power.draw=power,temperature.gpu=temp",
        "--db",
        db,
        file.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let rules = dir.path().join("gpu.rules.yml");
    std::fs::write(&rules, RULES).expect("write");
    let quiet = format!("{}/{}", t0, t0 + 3600);
    let (code, out, err) = gpuwatch(&[
        "backtest",
        "--rules",
        rules.to_str().expect("utf-8"),
        "--db",
        db,
        "--quiet",
        &quiet,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let names = |side: &str| -> Vec<(String, u64)> {
        v[side]["episodes"]
            .as_array()
            .expect("episodes")
            .iter()
            .map(|e| {
                (
                    e["rule"].as_str().unwrap_or("").to_string(),
                    e["gpu"].as_u64().unwrap_or(99),
                )
            })
            .collect()
    };
    assert_eq!(names("gpuwatch"), [("gpu_idle".to_string(), 1)], "{out}");
    let mut theirs = names("theirs");
    theirs.sort();
    assert_eq!(
        theirs,
        [
            ("GpuIdleHeld".to_string(), 1),
            ("GpuUtilLow".to_string(), 0),
            ("GpuUtilLow".to_string(), 1)
        ],
        "{out}"
    );
    assert_eq!(v["gpuwatch"]["with_counterpart"], 1, "{out}");
    assert_eq!(v["theirs"]["with_counterpart"], 2, "{out}");
    assert_eq!(v["matched"].as_array().map(Vec::len), Some(2), "{out}");
    // The checkpoint: their low-utilisation alert in the quiet hour, none of ours.
    assert_eq!(v["theirs"]["in_quiet_periods"], 1, "{out}");
    assert_eq!(v["gpuwatch"]["in_quiet_periods"], 0, "{out}");
    // Their idle alert fired 10 minutes into the idle hour (for: 10m), as Prometheus fires it.
    let held = v["theirs"]["episodes"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["rule"] == "GpuIdleHeld"))
        .expect("held");
    let fired = chrono::DateTime::parse_from_rfc3339(held["fired"].as_str().unwrap_or(""))
        .expect("time")
        .timestamp();
    assert!((t0 + 7800..=t0 + 7860).contains(&fired), "{held}");
    assert_eq!(
        v["their_rules"].as_array().map(Vec::len),
        Some(3),
        "recording rules are not alerts"
    );

    // The table for people.
    let (code, out, err) = gpuwatch(&[
        "backtest",
        "--rules",
        rules.to_str().expect("utf-8"),
        "--db",
        db,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("with a counterpart"), "{out}");
    assert!(
        out.contains("in quiet periods                     -         -"),
        "{out}"
    );

    // A rules file Prometheus rejects: promtool's message, exit 2.
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        "groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: rate(x[5m]\n",
    )
    .expect("write");
    let (code, _, err) = gpuwatch(&[
        "backtest",
        "--rules",
        bad.to_str().expect("utf-8"),
        "--db",
        db,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("promtool check rules"), "{err}");
    // Only recording rules: nothing to compare.
    let rec = dir.path().join("rec.yml");
    std::fs::write(
        &rec,
        "groups:\n  - name: x\n    rules:\n      - record: a:b\n        expr: up\n",
    )
    .expect("write");
    let (code, _, err) = gpuwatch(&[
        "backtest",
        "--rules",
        rec.to_str().expect("utf-8"),
        "--db",
        db,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no alerting rule"), "{err}");
}
