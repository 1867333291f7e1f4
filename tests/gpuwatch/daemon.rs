//! The daemon in-process on a simulated clock: the demo scenario end to end into SQLite.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use gpuwatch::config::Config;
use gpuwatch::daemon::{self, DaemonParts};
use gpuwatch::sampler::nvml;

use crate::common::{START_MS, sim};

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
    let handle = nvml::init(Some(&sim.library_path())).expect("init");
    let summary = daemon::run(
        DaemonParts {
            config,
            nvml: handle,
            ticker: Box::new(
                sim.ticker(START_MS, f64::INFINITY, Some(ticks))
                    .expect("ticker"),
            ),
            overrides: sim.process_overrides(START_MS),
            observer: None,
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
}
