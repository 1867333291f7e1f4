//! `gpuwatch import wandb`: fixtures built from W&B's documented system-metric tags (every
//! 15 s: `system.gpu.{i}.gpu`, `.memory`, `.memoryAllocated`, `.memoryAllocatedBytes`,
//! `.temp`, `.powerWatts`, `.powerPercent`, the `system.gpu.process.{i}.*` copies, CPU, disk
//! and network) as `run.history(stream="system").to_csv()` writes them, and the run's own
//! rows (`_step`, `_timestamp`, `_runtime`, `loss`, `lr`) as `scan_history()` gives them
//! (Python's json.dumps, bare NaN included). W&B's server does not run here.
//! Exact rows land; replay finds the GPU the run held idle.

use std::fmt::Write as _;

use crate::common::gpuwatch_run as gpuwatch;
use crate::training_support::count;

const T0: f64 = 1_764_979_200.25;

/// An hour of system metrics at 15 s for 2 GPUs: GPU 0 trains, GPU 1 holds 30 GiB at 0 %.
fn system_csv() -> String {
    let gpu_cols = [
        "gpu",
        "memory",
        "memoryAllocated",
        "memoryAllocatedBytes",
        "temp",
        "powerWatts",
        "powerPercent",
    ];
    let mut head = vec![String::new(), "_runtime".into(), "_timestamp".into()];
    for i in 0..2 {
        head.extend(gpu_cols.iter().map(|c| format!("system.gpu.{i}.{c}")));
    }
    head.extend(gpu_cols.iter().map(|c| format!("system.gpu.process.0.{c}")));
    head.extend(
        [
            "system.cpu",
            "system.memory_percent",
            "system.disk./.usagePercent",
            "system.network.sent",
        ]
        .map(String::from),
    );
    let mut out = head.join(",") + "\n";
    let total = 85_899_345_920.0_f64; // 80 GiB
    for r in 0..240 {
        let busy = [97.0, 41.0, 75.0, 0.75 * total, 64.0, 612.5, 87.5];
        let idle = [0.0, 0.0, 37.5, 0.375 * total, 34.0, 71.0, 10.1];
        let mut cells = vec![
            r.to_string(),
            format!("{}", 15.0 * (r + 1) as f64),
            format!("{:.3}", T0 + 15.0 * r as f64),
        ];
        cells.extend(busy.iter().map(|v| v.to_string()));
        // GPU 1's temperature was not read in the first minute: empty cells, unknown.
        cells.extend(idle.iter().enumerate().map(|(k, v)| {
            if k == 4 && r < 4 {
                String::new()
            } else {
                v.to_string()
            }
        }));
        cells.extend(busy.iter().map(|v| v.to_string()));
        cells.extend(["3.5", "41.2", "63.0", "1200.5"].map(String::from));
        let _ = writeln!(out, "{}", cells.join(","));
    }
    out
}

/// The run's rows: a step every 10 s for an hour, the loss falling, two NaN losses.
fn history_jsonl() -> String {
    let mut out = String::new();
    for s in 0..360 {
        let loss = if s == 100 || s == 200 {
            "NaN".to_string()
        } else {
            format!("{:.4}", 3.0 / (1.0 + s as f64 / 60.0))
        };
        let _ = writeln!(
            out,
            "{{\"_step\": {s}, \"_runtime\": {}, \"_timestamp\": {:.3}, \"loss\": {loss}, \"lr\": 0.0003}}",
            10 * s + 5,
            T0 + 10.0 * s as f64
        );
    }
    out
}

#[test]
fn a_runs_system_metrics_and_steps_import_exactly() {
    let dir = tempfile::tempdir().expect("tmp");
    let sys = dir.path().join("system.csv");
    std::fs::write(&sys, system_csv()).expect("write");
    let hist = dir.path().join("history.jsonl");
    std::fs::write(&hist, history_jsonl()).expect("write");
    let db = dir.path().join("w.db");
    let db = db.to_str().expect("utf-8");
    let (code, out, err) = gpuwatch(&[
        "import",
        "wandb",
        "--host",
        "trainer-1",
        "--gpu-model",
        "NVIDIA H100 80GB HBM3",
        "--db",
        db,
        sys.to_str().expect("utf-8"),
        hist.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with(
            "imported 480 samples of 2 GPU(s) and 718 training point(s) for host trainer-1"
        ),
        "{out}"
    );
    assert!(out.contains("not stored (no gpuwatch metric): lr, system.cpu, system.disk./.usagePercent, system.memory_percent, system.network.sent"), "{out}");
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), 480);
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE gpu_index = 0 AND util_gpu_pct = 97 AND util_mem_pct = 41 AND mem_used_mib = 61440 AND power_w = 612.5 AND temp_c = 64"
        ),
        240
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE gpu_index = 1 AND temp_c IS NULL"
        ),
        4,
        "an empty cell is unknown, not 0"
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_inventory WHERE memory_total_mib = 81920 AND gpu_name = 'NVIDIA H100 80GB HBM3'"
        ),
        2,
        "the total from the bytes and the percentage"
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM training_samples s JOIN training_series t ON t.id = s.series_id WHERE t.name = 'training_step'"
        ),
        360
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM training_samples s JOIN training_series t ON t.id = s.series_id WHERE t.name = 'training_loss'"
        ),
        358
    );
    drop(conn);

    // What gpuwatch would have said: GPU 1 held 30 GiB at 0 % all along.
    let (_, replay, err) = gpuwatch(&["replay", "--db", db, "--format", "jsonl"]);
    let fired: Vec<serde_json::Value> = replay
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["state"] == "firing")
        .collect();
    assert!(
        fired
            .iter()
            .any(|v| v["rule"] == "gpu_idle" && v["gpu"] == 1),
        "{replay}{err}"
    );
    assert!(fired.iter().all(|v| v["gpu"] == 1), "{replay}");

    // Re-imported: nothing twice.
    let (code, out, err) = gpuwatch(&[
        "import",
        "wandb",
        "--host",
        "trainer-1",
        "--db",
        db,
        sys.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), 480);
}

#[test]
fn files_that_are_not_wandb_exports_say_so() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("w.db");
    let db = db.to_str().expect("utf-8");
    let smi = dir.path().join("smi.csv");
    std::fs::write(
        &smi,
        "timestamp, index, utilization.gpu [%]\n2025/12/06 00:00:00.000, 0, 50 %\n",
    )
    .expect("write");
    let (code, _, err) = gpuwatch(&["import", "wandb", "--db", db, smi.to_str().expect("utf-8")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no `_timestamp` column"), "{err}");
    assert!(err.contains("import csv --map"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A run with neither GPU metrics nor steps: nothing to do, nothing written.
    let other = dir.path().join("other.jsonl");
    std::fs::write(
        &other,
        "{\"_timestamp\": 1764979200.0, \"accuracy\": 0.5}\n",
    )
    .expect("write");
    let (code, _, err) = gpuwatch(&[
        "import",
        "wandb",
        "--db",
        db,
        other.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nothing to import"), "{err}");
    assert!(!std::path::Path::new(db).exists(), "nothing written");
}
