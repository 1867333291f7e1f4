//! A training-metrics outage is neither a hang nor the end of one: rules that read training
//! metrics keep their state while the source fails, and `training_metrics_unavailable` says
//! so — only for a host that had training metrics.

use gpuwatch::alerts::engine::{Engine, EngineOptions};
use gpuwatch::model::{TrainingPoint, TrainingSourceUpdate, TrainingWrite};
use gpuwatch::store::{self, StoreConfig, synth::TickGen};

const T0: i64 = 1_700_000_000_000;

const STALL_RULE: &str = r#"
[[rule]]
name = "stalled"
severity = "warning"
condition = "unchanged_for(training_step[1h]) > 2m"
on_error = "keep_last"
summary = "step stalled on GPU {gpu}"
"#;

/// 10 minutes of one GPU; the step advances for 5 minutes, then stays; the source's status
/// after the last poll is `failing` (or healthy).
fn database(dir: &std::path::Path, failing: bool, had_data: bool) -> std::path::PathBuf {
    let path = dir.join("o.db");
    let mut st = store::open(&path, &StoreConfig::new("node-1")).expect("open");
    let mut tg = TickGen::new(1, 1);
    let ticks: Vec<_> = (0..600).map(|k| tg.tick(T0 + k * 1000)).collect();
    st.write_ticks(&ticks).expect("ticks");
    let points = if had_data {
        (0..600)
            .step_by(15)
            .map(|k| TrainingPoint {
                ts_ms: T0 + k * 1000,
                name: "training_step".into(),
                labels: vec![("job".into(), "j".into())],
                value: k.min(300) as f64,
            })
            .collect()
    } else {
        Vec::new()
    };
    let update = |at_ms: i64, error: Option<(String, String)>| TrainingSourceUpdate {
        role: "step".into(),
        query: "training_step".into(),
        at_ms,
        error,
        series: u64::from(had_data),
        points: if had_data { 40 } else { 0 },
        newest_point_ms: had_data.then_some(T0 + 585_000),
        ..TrainingSourceUpdate::default()
    };
    st.write_training(&TrainingWrite {
        points,
        sources: vec![update(T0 + 590_000, None)],
    })
    .expect("training");
    if failing {
        let err = Some(("unreachable".to_string(), "connection refused".to_string()));
        st.write_training(&TrainingWrite {
            points: Vec::new(),
            sources: vec![update(T0 + 599_000, err)],
        })
        .expect("status");
    }
    path
}

/// Rules firing at the end, with the live source status read (`live`) or not (replay).
fn firing(
    path: &std::path::Path,
    rules: Vec<gpuwatch::rules::rule::Rule>,
    live: bool,
) -> Vec<String> {
    let conn = store::open_read_only(path).expect("read-only");
    let mut e = Engine::new(rules, EngineOptions::default(), T0 - 1);
    if live {
        e.refresh_training_sources(&conn).expect("sources");
    }
    while let Some(t) = e
        .world_mut()
        .next_sample_time(&conn, i64::MAX)
        .expect("next")
    {
        e.advance(&conn, t).expect("advance");
        e.evaluate(t);
    }
    e.firing().map(|(k, _)| k.rule.to_string()).collect()
}

fn rules(extra: &str) -> Vec<gpuwatch::rules::rule::Rule> {
    let mut sources = gpuwatch::rules::defaults();
    sources.push(("test.toml".into(), extra.into()));
    gpuwatch::rules::load_sources(&sources).expect("rules")
}

#[test]
fn an_outage_keeps_state_and_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = database(dir.path(), true, true);
    let live = firing(&path, rules(STALL_RULE), true);
    assert!(
        live.contains(&"training_metrics_unavailable".to_string()),
        "{live:?}"
    );
    assert!(
        !live.contains(&"stalled".to_string()),
        "an outage must not look like a stall: {live:?}"
    );
    // The same history without the live status (a replay): the stall is visible.
    let replay = firing(&path, rules(STALL_RULE), false);
    assert!(replay.contains(&"stalled".to_string()), "{replay:?}");
    assert!(
        !replay.contains(&"training_metrics_unavailable".to_string()),
        "{replay:?}"
    );
}

#[test]
fn a_healthy_source_raises_nothing_and_hosts_without_training_metrics_are_quiet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let healthy = firing(&database(dir.path(), false, true), rules(STALL_RULE), true);
    assert!(
        !healthy.contains(&"training_metrics_unavailable".to_string()),
        "{healthy:?}"
    );
    assert!(
        healthy.contains(&"stalled".to_string()),
        "with the source up, the stall is real: {healthy:?}"
    );
    let dir2 = tempfile::tempdir().expect("tempdir");
    let never = firing(&database(dir2.path(), true, false), rules(STALL_RULE), true);
    assert!(
        !never.contains(&"training_metrics_unavailable".to_string()),
        "never had training metrics: {never:?}"
    );
}
