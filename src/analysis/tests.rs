//! The analysis of synthetic facts: the changes no demo scenario shows (a step rewound by a
//! restart, a Prometheus gap, a power-limit change, a GPU that stopped answering, a rank's
//! process that ended before a hang) and the causes they lead to.

use super::facts::{Facts, Training};
use super::{ChangeKind, Confidence, analyse};
use crate::store::analysis::GpuPoint;
use crate::store::incident::{AlertRow, WindowProcess};

const START: i64 = 1_700_000_600_000;

fn alert(rule: &str) -> AlertRow {
    AlertRow {
        alert_id: 9,
        rule: rule.into(),
        state: "firing".into(),
        severity: Some("critical".into()),
        scope: "gpu".into(),
        host: "node-1".into(),
        gpu_id: 1,
        gpu_uuid: Some("GPU-1".into()),
        gpu_index: Some(0),
        process_id: None,
        pid: None,
        process_name: None,
        reported: true,
        active_since_ms: START,
        fired_ms: Some(START + 30_000),
        resolved_ms: None,
        active_ms: 120_000,
        summary: Some("step stuck".into()),
        labels_json: None,
        ..Default::default()
    }
}

/// 10 min of 1 s samples before the start and 2 min during: busy at 600 W, then spinning
/// at 100 % and 90 W from 70 s before the start.
fn points() -> Vec<GpuPoint> {
    (-600..=120)
        .map(|s: i64| {
            let hung = s >= -70;
            GpuPoint {
                ts_ms: START + s * 1000,
                status: 0,
                util: Some(if hung { 100.0 } else { 95.0 }),
                power_w: Some(if hung { 90.0 } else { 600.0 }),
                power_limit_w: Some(if s < -300 { 700.0 } else { 650.0 }),
                temp: Some(60.0),
                clock_sm: Some(1980.0),
                mem_used_mib: Some(70_000.0),
                throttle: Some(0),
            }
        })
        .collect()
}

fn facts(rule: &str) -> Facts {
    let mut pts = points();
    // The GPU missed one sample deadline 200 s before the start.
    if let Some(p) = pts.iter_mut().find(|p| p.ts_ms == START - 200_000) {
        p.status = 1;
    }
    // The step: advancing every 10 s, rewound at -400 s (a restart), a 90 s gap from
    // -300 s, then stopped at -70 s.
    let mut step = Vec::new();
    let mut v = 1000.0;
    for s in (-600..=120).step_by(10) {
        let s = s as i64;
        if (-300..-210).contains(&s) {
            continue;
        }
        if s == -400 {
            v -= 300.0;
        } else if s < -70 {
            v += 5.0;
        }
        step.push((START + s * 1000, v));
    }
    let (before, during): (Vec<_>, Vec<_>) = step.into_iter().partition(|p| p.0 < START);
    Facts {
        alert: alert(rule),
        labels: Default::default(),
        before_from: START - 600_000,
        start: START,
        end: START + 120_000,
        points: pts,
        procs: vec![WindowProcess {
            pid: 4242,
            name: Some("python".into()),
            user: Some("alice".into()),
            first_ms: START - 600_000,
            last_ms: START - 90_000,
            max_mem_bytes: Some(1 << 30),
            placement: None,
        }],
        observed: (700, 721),
        holders: vec![],
        events: vec![],
        training: vec![Training {
            name: "training_step".into(),
            labels: vec![("job".into(), "llm".into())],
            before,
            during,
        }],
        related: vec![],
        group: vec![],
        health: None,
    }
}

#[test]
fn the_changes_no_scenario_shows_are_found() {
    let a = analyse(&facts("training_hang"));
    let at = |k: ChangeKind| -> Vec<i64> {
        a.changes
            .iter()
            .filter(|c| c.kind == k)
            .map(|c| c.offset_s)
            .collect()
    };
    assert_eq!(at(ChangeKind::StepRestart), [-400], "{:#?}", a.changes);
    assert_eq!(at(ChangeKind::PrometheusGap), [-310], "{:#?}", a.changes);
    assert_eq!(at(ChangeKind::PowerLimit), [-300], "{:#?}", a.changes);
    assert_eq!(at(ChangeKind::SampleGap), [-200], "{:#?}", a.changes);
    assert_eq!(at(ChangeKind::ProcessExit), [-90], "{:#?}", a.changes);
    // The last increase is at -80 s (none from -70 s on).
    assert_eq!(at(ChangeKind::StepStopped), [-80], "{:#?}", a.changes);
    assert!(a.changes.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
}

#[test]
fn a_hang_after_a_rank_exited_blames_the_exit_first() {
    let a = analyse(&facts("training_hang"));
    let causes: Vec<&str> = a.causes.iter().map(|c| c.cause.as_str()).collect();
    assert!(
        causes[0].starts_with("a rank's process ended"),
        "{causes:?}"
    );
    assert!(causes[1].starts_with("a stuck collective"), "{causes:?}");
    assert!(
        causes
            .iter()
            .any(|c| c.starts_with("a gap in the training metrics"))
    );
    assert_eq!(a.causes[0].confidence, Confidence::Likely);
    assert!(
        a.headline
            .starts_with("likely cause: a rank's process ended"),
        "{}",
        a.headline
    );
    assert!(a.unknown.is_empty(), "{:?}", a.unknown);
}

#[test]
fn missing_facts_are_unknown_and_unknown_rules_get_no_cause() {
    let mut f = facts("my_custom_rule");
    for p in &mut f.points {
        p.power_w = None;
        p.throttle = None;
    }
    f.training.clear();
    let a = analyse(&f);
    assert!(a.causes.is_empty(), "{:?}", a.causes);
    assert!(
        a.headline.starts_with("no cause could be derived"),
        "{}",
        a.headline
    );
    for want in [
        "power was not read",
        "clock-event (throttle) reasons were not read",
        "built-in knowledge of rule \"my_custom_rule\"",
    ] {
        assert!(
            a.unknown.iter().any(|u| u.contains(want)),
            "{want}: {:?}",
            a.unknown
        );
    }
    let power = a
        .evidence
        .iter()
        .find(|e| e.fact == "power")
        .expect("power");
    assert!(power.value.starts_with("unknown W"), "{}", power.value);
}
