//! The daemon in-process on a simulated clock: the demo scenario (with its kubelet) end to
//! end into SQLite.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuwatch::config::Config;
use gpuwatch::daemon::{self, DaemonParts};
use gpuwatch::sampler::nvml;

use crate::common::{START_MS, sim};

/// A reported transition: (time, rule, state, GPU index).
type Seen = (i64, String, String, Option<u32>);

#[test]
fn the_demo_scenario_lands_in_the_store() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/demo.toml"))
        .expect("demo scenario");
    let sim = sim(&text);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("demo.db");
    let ticks = 40 * 60;
    let mut config = Config {
        host: "sim".into(),
        database: db.clone(),
        ..Config::default()
    };
    config.http.enabled = false;
    config.sample_deadline = Duration::from_secs(2);
    // The scenario's pods, from a kubelet on a socket, as in the demo: the llama job's
    // training series are pod-labelled and join their GPUs through the pod.
    let kubelet = sim
        .serve_pods()
        .expect("serve pods")
        .expect("the demo declares pods");
    kubelet.configure(&mut config);
    let handle = nvml::init(Some(&sim.library_path())).expect("init");
    let live: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let sink = live.clone();
    let summary = daemon::run(
        DaemonParts {
            config,
            rules: gpuwatch::rules::load_configured(true, &[]).expect("default rules load"),
            alert_sink: Some(Box::new(move |t| {
                if let Ok(mut v) = sink.lock() {
                    v.push((t.at, t.rule.clone(), t.state.to_string(), t.subject.gpu));
                }
            })),
            nvml: handle,
            ticker: Box::new(
                sim.ticker(START_MS, f64::INFINITY, Some(ticks))
                    .expect("ticker"),
            ),
            overrides: sim.process_overrides(START_MS),
            observer: None,
            reload: None,
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("daemon runs");
    assert_eq!(summary.ticks, ticks);
    assert_eq!(summary.gpus, 4);

    let conn = rusqlite::Connection::open(&db).expect("open");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).expect(sql) };
    assert_eq!(
        count("SELECT count(*) FROM samples"),
        4 * ticks as i64,
        "every GPU, every tick"
    );
    assert_eq!(
        count("SELECT count(*) FROM samples WHERE status <> 0"),
        0,
        "no gaps at this pace"
    );
    assert_eq!(count("SELECT count(*) FROM gpus"), 4);
    assert_eq!(
        count("SELECT count(DISTINCT code) FROM events WHERE kind = 'xid'"),
        2,
        "XID 13 and 48"
    );
    assert!(count("SELECT count(*) FROM processes") >= 4);
    assert!(
        count("SELECT count(*) FROM training_samples") > 0,
        "the scenario's training metrics were stored"
    );
    let minutes = count("SELECT count(DISTINCT ts_ms) FROM rollups_1m");
    assert!(
        (39..=40).contains(&minutes),
        "1-minute rollups for the run: {minutes}"
    );
    // GPU 3 (L40S) overheats: its hottest minute is hotter than its first.
    let hot: i64 = conn
        .query_row(
            "SELECT max(r.temp_max) FROM rollups_1m r JOIN gpus g ON g.id = r.gpu_id WHERE g.gpu_index = 3",
            [],
            |r| r.get(0),
        )
        .expect("rollup temp");
    assert!(hot >= 85, "overheating is visible in the rollups: {hot}");

    // The shipped rules find every fault of the story, on the right GPU, and nothing else.
    let live = live.lock().expect("lock").clone();
    let got: Vec<(String, String, Option<u32>)> = live
        .iter()
        .map(|(_, r, s, g)| (r.clone(), s.clone(), *g))
        .collect();
    let has = |rule: &str, state: &str, gpu: u32| {
        got.contains(&(rule.to_string(), state.to_string(), Some(gpu)))
    };
    assert!(has("gpu_memory_leak", "firing", 1), "{got:?}");
    assert!(has("gpu_idle", "firing", 2), "{got:?}");
    assert!(
        has("gpu_overheating", "firing", 3) && has("gpu_overheating", "resolved", 3),
        "{got:?}"
    );
    for g in [0, 1] {
        assert!(
            has("training_hang", "firing", g) && has("training_hang", "resolved", g),
            "{got:?}"
        );
    }
    assert!(
        has("gpu_xid_error", "firing", 2),
        "XID 48 on GPU 2: {got:?}"
    );
    assert!(
        !got.iter()
            .any(|(r, _, g)| r == "gpu_xid_error" && *g == Some(3)),
        "XID 13 is not critical: {got:?}"
    );
    let expected_rules = [
        "gpu_memory_leak",
        "gpu_idle",
        "gpu_overheating",
        "training_hang",
        "gpu_xid_error",
        "gpu_ecc_uncorrected",
    ];
    let unexpected: Vec<_> = got
        .iter()
        .filter(|(r, _, _)| !expected_rules.contains(&r.as_str()))
        .collect();
    assert!(unexpected.is_empty(), "false alarms: {unexpected:?}");
    let hang_at = live
        .iter()
        .find(|(_, r, s, _)| r == "training_hang" && s == "firing")
        .map(|(t, ..)| *t)
        .expect("hang");
    let hang_delay_s = (hang_at - (START_MS + 28 * 60_000)) / 1000;
    assert!(
        (60..=360).contains(&hang_delay_s),
        "hang found {hang_delay_s} s after it began"
    );

    // replay over the same database reports exactly what the live daemon reported.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["replay", "--format", "jsonl", "--db"])
        .arg(&db)
        .output()
        .expect("replay runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let replayed: Vec<Seen> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("jsonl");
            let at = chrono::DateTime::parse_from_rfc3339(v["at"].as_str().expect("at"))
                .expect("rfc3339")
                .timestamp_millis();
            (
                at,
                v["rule"].as_str().expect("rule").to_string(),
                v["state"].as_str().expect("state").to_string(),
                v["gpu"].as_u64().map(|g| g as u32),
            )
        })
        .collect();
    assert_eq!(replayed, live, "one evaluation path: live and replay agree");
}
