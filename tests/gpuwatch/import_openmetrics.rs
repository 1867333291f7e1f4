//! `gpuwatch import openmetrics`: OpenMetrics (seconds, `# EOF`) and Prometheus text
//! (milliseconds) files into the training tables, through the real binary; errors with
//! file:line:col that import nothing; and a backtest: GPU history written through the store
//! API plus an imported step counter that stops while the GPU stays busy, which `gpuwatch
//! replay` reports as `training_hang` on that GPU only.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuwatch::model::TickBatch;
use gpuwatch::store::{self, StoreConfig, synth::TickGen};
use gpuwatch::training::openmetrics::{self, Format};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/openmetrics")
        .join(name)
}

fn gpuwatch(args: &[&str], db: &Path, files: &[PathBuf]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(args)
        .arg("--db")
        .arg(db)
        .args(files)
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpuwatch")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// (metric, labels_json, ts_ms, value) from the public view, in a stable order.
fn points(db: &Path) -> Vec<(String, String, i64, f64)> {
    let conn = store::open_read_only(db).expect("open");
    let mut stmt = conn
        .prepare(
            "SELECT metric, labels_json, ts_ms, value FROM training_metrics
             ORDER BY metric, labels_json, ts_ms",
        )
        .expect("prepare");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[test]
fn openmetrics_seconds_and_prometheus_milliseconds_are_stored_with_their_labels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    let o = gpuwatch(
        &["import", "openmetrics", "--host", "node-1"],
        &db,
        &[fixture("run.om")],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("imported 3 points of 2 series for host node-1"),
        "{out}"
    );
    assert!(out.contains("(OpenMetrics)"), "{out}");
    assert!(out.contains("skipped 1 NaN/Inf values"), "{out}");
    assert!(
        out.contains("host node-1 has no GPUs in the database yet"),
        "{out}"
    );
    assert!(
        out.contains("learning_rate (1)") && out.contains("training_step_created (2)"),
        "ignored metrics are listed: {out}"
    );
    let loss_labels = r#"{"gpu":"0","job":"llm-7","note":"a \"quoted\" \\ value"}"#;
    let step_labels = r#"{"gpu":"0","job":"llm-7"}"#;
    assert_eq!(
        points(&db),
        vec![
            (
                "training_loss".into(),
                loss_labels.into(),
                1_764_511_500_250,
                2.5
            ),
            (
                "training_step".into(),
                step_labels.into(),
                1_764_511_500_250,
                100.0
            ),
            (
                "training_step".into(),
                step_labels.into(),
                1_764_511_515_750,
                103.0
            ),
        ],
        "seconds (fractional) became ms; the counter's _total is the step; labels unescaped"
    );

    // The Prometheus text format: the same instants written in milliseconds.
    let o = gpuwatch(
        &["import", "openmetrics", "--host", "node-1"],
        &db,
        &[fixture("run.prom")],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("(Prometheus text)"), "{out}");
    let uuid = r#"{"UUID":"GPU-5e1f0c3a-0000-0000-0000-000000000001","job":"llm-7"}"#;
    let got = points(&db);
    assert_eq!(got.len(), 6, "{got:?}");
    assert!(got.contains(&(
        "training_step".into(),
        uuid.into(),
        1_764_511_515_750,
        103.0
    )));
    assert!(got.contains(&("training_loss".into(), uuid.into(), 1_764_511_500_250, 2.25)));

    // Importing the same file again replaces, never duplicates.
    let o = gpuwatch(
        &["import", "openmetrics", "--host", "node-1"],
        &db,
        &[fixture("run.prom")],
    );
    assert!(o.status.success());
    assert_eq!(points(&db).len(), 6);
}

#[test]
fn a_syntax_error_names_file_line_and_column_and_imports_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    // A good file first, then a broken one: neither is imported.
    let o = gpuwatch(
        &["import", "openmetrics", "--host", "h"],
        &db,
        &[fixture("run.om"), fixture("broken.om")],
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("broken.om:4:29: expected `,` or `}` after a label, found `3`"),
        "{err}"
    );
    assert!(err.contains("nothing was imported"), "{err}");
    if db.exists() {
        assert!(points(&db).is_empty(), "nothing half-imported");
    }

    // A sample without a timestamp: an error that says why, at its line and column.
    let o = gpuwatch(
        &["import", "openmetrics", "--host", "h"],
        &db,
        &[fixture("no_timestamp.prom")],
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("no_timestamp.prom:2:25: expected a timestamp"),
        "{err}"
    );
    assert!(err.contains("integer unix milliseconds"), "{err}");

    // Forced OpenMetrics without `# EOF`.
    let o = gpuwatch(
        &[
            "import",
            "openmetrics",
            "--host",
            "h",
            "--format",
            "openmetrics",
        ],
        &db,
        &[fixture("run.prom")],
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("run.prom:1:2: expected `# TYPE`, `# HELP`, `# UNIT` or `# EOF`"),
        "{err}"
    );

    // A file with no step or loss metric says what it found.
    let other = dir.path().join("other.om");
    std::fs::write(&other, "up{job=\"x\"} 1 1764511500\n# EOF\n").expect("write");
    let o = gpuwatch(&["import", "openmetrics", "--host", "h"], &db, &[other]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("metrics found: up") && err.contains("--step-metric"),
        "{err}"
    );
    if db.exists() {
        assert!(points(&db).is_empty());
    }
}

#[test]
fn the_host_is_asked_for_when_the_database_has_several() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    for (host, prefix) in [
        ("a", "GPU-aaaaaaaa-0000-0000-0000-"),
        ("b", "GPU-bbbbbbbb-0000-0000-0000-"),
    ] {
        let mut st = store::open(&db, &StoreConfig::new(host)).expect("open");
        let mut tick_gen = TickGen::new(1, 0);
        tick_gen.uuid_prefix = prefix.into();
        st.write_tick(&tick_gen.tick(1_764_511_500_000))
            .expect("tick");
    }
    let o = gpuwatch(&["import", "openmetrics"], &db, &[fixture("run.om")]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("several hosts (a, b)") && err.contains("--host"),
        "{err}"
    );
    assert!(points(&db).is_empty());
    let o = gpuwatch(
        &["import", "openmetrics", "--host", "b"],
        &db,
        &[fixture("run.om")],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(points(&db).len(), 3);
}

const T0: i64 = 1_764_500_000_000;
const MINUTES: i64 = 50;
const HANG: (i64, i64) = (30 * 60_000, 45 * 60_000);

/// Two busy H100s for 50 minutes, one sample every 5 s. From 30:00 to 45:00 GPU 0 shows a
/// stuck NCCL collective (100 % utilisation at 90 W); GPU 1 keeps training.
fn gpu_history(db: &Path) {
    let mut st = store::open(db, &StoreConfig::new("node-1")).expect("open");
    let mut tick_gen = TickGen::new(2, 1);
    let batches: Vec<TickBatch> = (0..=MINUTES * 12)
        .map(|k| {
            let t = k * 5_000;
            let mut b = tick_gen.tick(T0 + t);
            for s in &mut b.samples {
                let stuck = s.uuid.ends_with('0') && (HANG.0..HANG.1).contains(&t);
                s.util_gpu_pct = Some(if stuck { 100 } else { 93 + (k % 4) as u32 });
                s.power_mw = Some(if stuck { 90_000 } else { 550_000 });
                s.mem_used_bytes = Some(60_000 << 20);
            }
            b
        })
        .collect();
    for chunk in batches.chunks(100) {
        st.write_ticks(chunk).expect("write ticks");
    }
}

/// The job's step counters every 15 s: GPU 0 (by index) stops during the hang, GPU 1 (by
/// UUID, dcgm-exporter style) never does.
fn step_file(path: &Path) {
    let mut out = String::from("# TYPE training_step counter\n");
    let uuid1 = "GPU-5e1f0c3a-0000-0000-0000-000000000001";
    let (mut s0, mut s1) = (0, 0);
    for k in 0..=(MINUTES * 4) {
        let t = k * 15_000;
        if !(HANG.0..HANG.1).contains(&t) {
            s0 += 3;
        }
        s1 += 3;
        let secs = (T0 + t) as f64 / 1000.0;
        out.push_str(&format!(
            "training_step_total{{gpu=\"0\",job=\"llm\"}} {s0} {secs}\n\
             training_step_total{{UUID=\"{uuid1}\",job=\"llm\"}} {s1} {secs}\n"
        ));
    }
    out.push_str("# EOF\n");
    std::fs::write(path, out).expect("write");
}

#[test]
fn an_imported_step_counter_that_stops_on_a_busy_gpu_replays_as_a_training_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    gpu_history(&db);
    let om = dir.path().join("steps.om");
    step_file(&om);
    // No --host: the database's only host.
    let o = gpuwatch(&["import", "openmetrics"], &db, &[om]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("of 2 series for host node-1"), "{out}");
    assert!(
        out.contains("training_step{gpu=\"0\",job=\"llm\"} -> GPU 0")
            && out.contains(
                "training_step{UUID=\"GPU-5e1f0c3a-0000-0000-0000-000000000001\",job=\"llm\"} -> GPU 1"
            ),
        "the import says how each series joins: {out}"
    );

    let o = gpuwatch(&["replay", "--format", "jsonl"], &db, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("jsonl"))
        .collect();
    let minute = |v: &Value| {
        let at = chrono::DateTime::parse_from_rfc3339(v["at"].as_str().expect("at")).expect("t");
        (at.timestamp_millis() - T0) as f64 / 60_000.0
    };
    let hang = |state: &str, gpu: u64| {
        lines
            .iter()
            .find(|v| v["rule"] == "training_hang" && v["state"] == state && v["gpu"] == gpu)
    };
    let fired = hang("firing", 0).unwrap_or_else(|| panic!("no hang on GPU 0: {lines:?}"));
    assert!(
        (31.0..=37.0).contains(&minute(fired)),
        "found at {:.1} min (began at 30)",
        minute(fired)
    );
    let resolved = hang("resolved", 0).expect("the hang ends when steps resume");
    assert!(
        (45.0..=47.0).contains(&minute(resolved)),
        "resolved at {:.1}",
        minute(resolved)
    );
    assert!(
        hang("firing", 1).is_none(),
        "GPU 1's counter (joined by UUID) kept moving: {lines:?}"
    );
}

/// The real Prometheus text renderings of an H100 in ../shared/data (no timestamps: a scrape)
/// parse completely once the scrape time is given, and only then.
#[test]
fn real_prometheus_scrapes_parse_completely() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/nvidia-smi-captures-multiformat");
    if !dir.is_dir() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is missing",
            dir.display()
        );
        eprintln!("skipped: {} is missing", dir.display());
        return;
    }
    for name in [
        "prometheus__h100__idle.metrics",
        "prometheus__h100__load.metrics",
    ] {
        let text = std::fs::read_to_string(dir.join(name)).expect("read");
        let e = openmetrics::parse(&text, None).expect_err("no timestamps");
        assert_eq!(e.line, 3, "{name}: {e}");
        assert!(e.message.contains("--at"), "{e}");
        let at = 1_764_511_500_000;
        let parsed = openmetrics::parse_at(&text, None, Some(at)).expect(name);
        assert_eq!(parsed.format, Format::Prometheus);
        let lines = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .count();
        assert_eq!(parsed.samples.len(), lines, "{name}: every sample line");
        assert!(parsed.samples.iter().all(|s| s.ts_ms == at));
        let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(
            parsed.families.len(),
            types,
            "{name}: one family per # TYPE"
        );
        assert!(parsed.families.values().all(|f| {
            matches!(f.kind.as_deref(), Some("gauge" | "counter")) && f.help.is_some()
        }));
        let sm = parsed
            .samples
            .iter()
            .find(|s| s.name == "nvidia_smi_clocks_current_sm_clock_hz")
            .expect("sm clock");
        assert_eq!(
            sm.labels,
            vec![(
                "uuid".to_string(),
                "00000000-0000-0000-0000-000000000000".to_string()
            )]
        );
        assert!(sm.value > 1.0e8, "{name}: {}", sm.value);
        let info = parsed
            .samples
            .iter()
            .find(|s| s.name == "nvidia_smi_gpu_info")
            .expect("info");
        assert!(
            info.labels
                .contains(&("name".to_string(), "NVIDIA H100 80GB HBM3".to_string()))
        );
        assert!(
            info.labels
                .contains(&("driver_model_current".to_string(), "[N/A]".to_string()))
        );
    }
}

/// The issue's backtest end to end, from logs only: an `nvidia-smi --query-gpu` CSV log
/// (`import nvidia-smi`) and the job's step counters as OpenMetrics, joined by `uuid`
/// (`import openmetrics`), then `replay` with the default rules. GPU 0's step stops from
/// 30:00 to 45:00 while its utilisation drops to 0 % with the memory still held (a dead
/// dataloader); GPU 1 keeps training.
#[test]
fn an_nvidia_smi_log_and_an_openmetrics_file_backtest_the_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    let t0 = chrono::DateTime::parse_from_rfc3339("2025-11-30T10:00:00Z")
        .expect("t0")
        .timestamp();
    let uuid = |g: u32| format!("GPU-11111111-2222-3333-4444-55555555555{g}");
    let hung = |g: u32, t: i64| g == 0 && (30 * 60..45 * 60).contains(&t);
    let mut csv = String::from(
        "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W], power.limit [W]\n",
    );
    for k in 0..=(MINUTES * 12) {
        let t = k * 5;
        let at = chrono::DateTime::from_timestamp(t0 + t, 0).expect("time");
        for g in 0..2 {
            let (util, power) = if hung(g, t) { (0, 70.5) } else { (95, 610.2) };
            csv.push_str(&format!(
                "{}, {g}, {}, NVIDIA H100 80GB HBM3, {util} %, 60000 MiB, 81559 MiB, {power:.2} W, 700.00 W\n",
                at.format("%Y/%m/%d %H:%M:%S%.3f"),
                uuid(g)
            ));
        }
    }
    let smi = dir.path().join("smi.csv");
    std::fs::write(&smi, csv).expect("write");
    let mut om = String::from("# TYPE training_step counter\n");
    let mut steps = [0; 2];
    for k in 0..=(MINUTES * 4) {
        let t = k * 15;
        for g in 0..2u32 {
            if !hung(g, t) {
                steps[g as usize] += 3;
            }
            om.push_str(&format!(
                "training_step_total{{uuid=\"{}\",job=\"llm\"}} {} {}\n",
                uuid(g),
                steps[g as usize],
                t0 + t
            ));
        }
    }
    om.push_str("# EOF\n");
    let om_file = dir.path().join("steps.om");
    std::fs::write(&om_file, om).expect("write");

    let o = gpuwatch(
        &["import", "nvidia-smi", "--tz", "UTC", "--host", "node-9"],
        &db,
        &[smi],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let o = gpuwatch(&["import", "openmetrics"], &db, &[om_file]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("for host node-9"), "{out}");
    assert!(out.contains(&format!("{}\"}} -> GPU 0", uuid(0))), "{out}");

    let o = gpuwatch(&["replay", "--format", "jsonl"], &db, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let hangs: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("jsonl"))
        .filter(|v| v["rule"] == "training_hang")
        .collect();
    let minute = |v: &Value| {
        let at = chrono::DateTime::parse_from_rfc3339(v["at"].as_str().expect("at")).expect("t");
        (at.timestamp() - t0) as f64 / 60.0
    };
    let fired: Vec<&Value> = hangs.iter().filter(|v| v["state"] == "firing").collect();
    assert_eq!(fired.len(), 1, "one hang, on GPU 0: {hangs:?}");
    assert_eq!(fired[0]["gpu"], 0);
    assert!((31.0..=37.0).contains(&minute(fired[0])), "{hangs:?}");
    let resolved = hangs
        .iter()
        .find(|v| v["state"] == "resolved")
        .expect("resolved when the steps resume");
    assert!((45.0..=47.0).contains(&minute(resolved)), "{hangs:?}");
}
