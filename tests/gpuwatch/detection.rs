//! Detection quality of the shipped rules on labelled scenarios (tests/scenarios/): every
//! fault found on the right GPU, nothing on healthy runs, at other sampling intervals and on
//! other GPU models than the demo's. Runs the whole daemon in-process on the simulated clock.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuwatch::config::Config;
use gpuwatch::daemon::{self, DaemonParts};
use gpuwatch::sampler::nvml;

use crate::common::{START_MS, sim};

/// (minutes after the start, rule, state, GPU index).
type Seen = (f64, String, String, Option<u32>);

fn alerts_for(file: &str) -> Vec<Seen> {
    let path = format!("{}/tests/scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("scenario");
    let sim = sim(&text);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config {
        host: "t".into(),
        database: dir.path().join("d.db"),
        ..Config::default()
    };
    config.http.enabled = false;
    config.sample_deadline = Duration::from_secs(2);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let sink = seen.clone();
    daemon::run(
        DaemonParts {
            config,
            rules: gpuwatch::rules::load_configured(true, &[]).expect("default rules"),
            alert_sink: Some(Box::new(move |t| {
                if let Ok(mut v) = sink.lock() {
                    let min = (t.at - START_MS) as f64 / 60_000.0;
                    v.push((min, t.rule.clone(), t.state.to_string(), t.subject.gpu));
                }
            })),
            nvml: nvml::init(Some(&sim.library_path())).expect("init"),
            ticker: Box::new(sim.ticker(START_MS, f64::INFINITY, None).expect("ticker")),
            overrides: sim.process_overrides(START_MS),
            observer: None,
            reload: None,
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("daemon runs");
    seen.lock().expect("lock").clone()
}

fn first(seen: &[Seen], rule: &str, state: &str, gpu: u32) -> Option<f64> {
    seen.iter()
        .find(|(_, r, s, g)| r == rule && s == state && *g == Some(gpu))
        .map(|(m, ..)| *m)
}

#[test]
fn checkpoints_and_eval_phases_raise_nothing() {
    let seen = alerts_for("healthy-checkpoints.toml");
    assert!(seen.is_empty(), "false alarms: {seen:?}");
}

#[test]
fn warm_up_sawtooth_hot_and_free_gpus_raise_nothing() {
    let seen = alerts_for("healthy-memory-and-heat.toml");
    assert!(seen.is_empty(), "false alarms: {seen:?}");
}

#[test]
fn faults_at_5_s_on_other_models_are_found() {
    let seen = alerts_for("faults-5s.toml");
    for gpu in [0, 1] {
        let at = first(&seen, "training_hang", "firing", gpu)
            .unwrap_or_else(|| panic!("hang on GPU {gpu}: {seen:?}"));
        assert!(
            (31.0..=36.0).contains(&at),
            "hang found at {at} min (began at 30): {seen:?}"
        );
        assert_eq!(
            first(&seen, "gpu_idle", "firing", gpu),
            None,
            "training_hang mutes gpu_idle: {seen:?}"
        );
    }
    let leak =
        first(&seen, "gpu_memory_leak", "firing", 2).unwrap_or_else(|| panic!("leak: {seen:?}"));
    assert!(leak < 40.0, "leak found at {leak} min: {seen:?}");
    let idle = first(&seen, "gpu_idle", "firing", 3).unwrap_or_else(|| panic!("idle: {seen:?}"));
    assert!(
        (20.0..=32.0).contains(&idle),
        "idle found at {idle} min (idle from 5): {seen:?}"
    );
    let lost = first(&seen, "gpu_lost", "firing", 4).unwrap_or_else(|| panic!("lost: {seen:?}"));
    assert!(
        (20.0..=21.0).contains(&lost),
        "lost found at {lost} min (lost at 20): {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|(_, r, _, g)| *g != Some(4) || r == "gpu_lost"),
        "gpu_lost mutes the rest: {seen:?}"
    );
    let wedged = first(&seen, "cuda_driver_error", "firing", 5)
        .unwrap_or_else(|| panic!("wedged: {seen:?}"));
    assert!(
        (12.0..=14.0).contains(&wedged),
        "driver error found at {wedged} min (from 10): {seen:?}"
    );
    let orphaned = first(&seen, "gpu_memory_orphaned", "firing", 6)
        .unwrap_or_else(|| panic!("orphaned: {seen:?}"));
    assert_eq!(
        first(&seen, "gpu_idle", "firing", 6),
        None,
        "orphaned memory is not an idle job: {seen:?}"
    );
    assert!(
        (45.0..=52.0).contains(&orphaned),
        "orphaned memory found at {orphaned} min (from 40): {seen:?}"
    );
    let expected = [
        "training_hang",
        "gpu_memory_leak",
        "gpu_idle",
        "gpu_lost",
        "cuda_driver_error",
        "gpu_memory_orphaned",
    ];
    let others: Vec<_> = seen
        .iter()
        .filter(|(_, r, _, _)| !expected.contains(&r.as_str()))
        .collect();
    assert!(others.is_empty(), "false alarms: {others:?}");
}

#[test]
fn xids_are_judged_by_their_job_and_the_gpu_s_history() {
    let seen = alerts_for("xid-judged.toml");
    let firing = |rule: &str, gpu: u32| {
        seen.iter()
            .filter(|(_, r, s, g)| r == rule && s == "firing" && *g == Some(gpu))
            .count()
    };
    // The job's crash: one application alert, on its first GPU, and nothing of the hardware.
    let crash = first(&seen, "xid_application_crash", "firing", 0)
        .unwrap_or_else(|| panic!("crash: {seen:?}"));
    assert!((19.8..=21.5).contains(&crash), "crash at {crash}: {seen:?}");
    assert_eq!(firing("xid_application_crash", 1), 0, "{seen:?}");
    for gpu in [0, 1] {
        assert_eq!(firing("gpu_xid_error", gpu), 0, "{seen:?}");
    }
    // XID 13 in a job that ran on is no alert; the same code in the next job is the GPU's.
    let hw = first(&seen, "gpu_xid_error", "firing", 2).unwrap_or_else(|| panic!("{seen:?}"));
    assert!((25.0..=26.0).contains(&hw), "hardware at {hw}: {seen:?}");
    assert_eq!(firing("gpu_xid_error", 2), 1, "{seen:?}");
    // A storm of 3,000 events: one alert.
    assert_eq!(firing("gpu_xid_error", 3), 1, "{seen:?}");
    let rules: Vec<&str> = seen.iter().map(|s| s.1.as_str()).collect();
    assert!(
        rules
            .iter()
            .all(|r| ["xid_application_crash", "gpu_xid_error"].contains(r)),
        "{seen:?}"
    );
}
