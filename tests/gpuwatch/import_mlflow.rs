//! `gpuwatch import mlflow`: a real MLflow run (PyPI's mlflow-skinny with its SQLite
//! tracking backend; scripts/test.sh installs them) whose system-metrics monitor reads our
//! simulated NVML library through pynvml, as it would read a GPU: exact point counts land,
//! with MLflow's units (megabytes of 10^6 bytes, watts) converted, and the run's loss with
//! its steps. Then a file-store run directory of the same shape.

use std::process::Command;

use crate::common::{gpuwatch_run as gpuwatch, sim};
use crate::training_support::count;

/// Constant readings, so the Python process's wall-clock ticks cannot change them.
const SCENARIO: &str = r#"
[scenario]
name = "mlflow"
duration = "1h"
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
util_gpu = 77
temp = 64
power_w = 432
mem_used_mib = 20000
[[gpu]]
model = "T4"
[[gpu.timeline]]
util_gpu = 0
temp = 41
power_w = 30
"#;

const SCRIPT: &str = r#"
import os, sys, time, mlflow
mlflow.set_tracking_uri("sqlite:///" + sys.argv[1])
with mlflow.start_run(run_name="llm-sft", log_system_metrics=True) as run:
    for s in range(8):
        mlflow.log_metric("loss", 2.0 / (s + 1), step=10 * s)
        mlflow.log_metric("lr", 0.0003, step=10 * s)
        time.sleep(0.5)
    print(run.info.run_id)
"#;

/// Where scripts/test.sh installs MLflow (its own directory), before the interpreter's own
/// paths.
fn mlflow_pythonpath() -> String {
    let cache = std::env::var("XDG_CACHE_HOME")
        .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
    let mut p = format!("{cache}/gpuwatch/mlflow-py");
    if let Ok(old) = std::env::var("PYTHONPATH") {
        p = format!("{p}:{old}");
    }
    p
}

#[test]
fn a_real_mlflow_run_on_simulated_gpus_imports_exactly() {
    let gpus = sim(SCENARIO);
    let dir = tempfile::tempdir().expect("tmp");
    let mldb = dir.path().join("mlflow.db");
    let o = Command::new("python3")
        .args(["-c", SCRIPT, mldb.to_str().expect("utf-8")])
        .env("LD_LIBRARY_PATH", gpus.dir())
        .env("PYTHONPATH", mlflow_pythonpath())
        .env("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
        .env("MLFLOW_SYSTEM_METRICS_SAMPLES_BEFORE_LOGGING", "1")
        .env("MLFLOW_TRACKING_DIR", dir.path())
        .current_dir(dir.path())
        .output()
        .expect("python3 with mlflow (scripts/test.sh installs mlflow-skinny)");
    assert!(
        o.status.success(),
        "mlflow run failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run_id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    // What MLflow logged, read from its own database.
    let ml = rusqlite::Connection::open(&mldb).expect("mlflow.db");
    let logged = |key: &str| {
        count(
            &ml,
            &format!("SELECT count(*) FROM metrics WHERE key = '{key}' AND is_nan = 0"),
        )
    };
    let util0 = logged("system/gpu_0_utilization_percentage");
    let util1 = logged("system/gpu_1_utilization_percentage");
    assert!(util0 >= 1 && util1 >= 1, "the monitor logged GPU metrics");
    let mb0: f64 = ml
        .query_row(
            "SELECT value FROM metrics WHERE key = 'system/gpu_0_memory_usage_megabytes' LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("memory logged");
    drop(ml);

    let db = dir.path().join("g.db");
    let db = db.to_str().expect("utf-8");
    let (code, out, err) = gpuwatch(&[
        "import",
        "mlflow",
        mldb.to_str().expect("utf-8"),
        "--host",
        "node7",
        "--gpu-model",
        "NVIDIA H100 80GB HBM3",
        "--db",
        db,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with(&format!("run {run_id}: ")), "{out}");
    assert!(
        out.contains(&format!(
            "imported {} samples of 2 GPU(s) and 16 training point(s) for host node7",
            util0 + util1
        )),
        "{out}"
    );
    assert!(out.contains("system/cpu_utilization_percentage"), "{out}");
    assert!(out.contains("lr"), "{out}");
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE gpu_index = 0 AND util_gpu_pct = 77 AND power_w = 432"
        ),
        util0
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE gpu_index = 1 AND util_gpu_pct = 0 AND power_w = 30"
        ),
        util1
    );
    // MLflow's megabytes are 10^6 bytes.
    let bytes = count(
        &conn,
        "SELECT mem_used_bytes FROM samples s JOIN gpus g ON g.id = s.gpu_id WHERE g.gpu_index = 0 LIMIT 1",
    );
    assert_eq!(bytes, (mb0 * 1e6).round() as i64);
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE temp_c IS NOT NULL"
        ),
        0,
        "MLflow logs no temperature: unknown, not 0"
    );
    let steps: Vec<i64> = {
        let mut stmt = conn
            .prepare(
                "SELECT value FROM training_samples s JOIN training_series t ON t.id = s.series_id
                 WHERE t.name = 'training_step' ORDER BY ts_ms",
            )
            .expect("prepare");
        stmt.query_map([], |r| r.get::<_, f64>(0))
            .expect("query")
            .map(|v| v.expect("row") as i64)
            .collect()
    };
    assert_eq!(steps, [0, 10, 20, 30, 40, 50, 60, 70], "the loss's steps");
    drop(conn);

    // Not an MLflow database: one line, exit 1.
    let (code, _, err) = gpuwatch(&["import", "mlflow", db, "--db", db]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not an MLflow tracking database"), "{err}");
    // A run that does not exist: its runs listed.
    let (code, _, err) = gpuwatch(&[
        "import",
        "mlflow",
        mldb.to_str().expect("utf-8"),
        "--run",
        "nope",
        "--db",
        db,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&run_id) && err.contains("llm-sft"), "{err}");
}
