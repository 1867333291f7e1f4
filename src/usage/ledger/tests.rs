use super::*;

fn pod(name: &str) -> Holder {
    Holder {
        namespace: Some("team".into()),
        pod: Some(name.into()),
        ..Holder::default()
    }
}

fn obs(t: TsMs, rows: Vec<(Holder, State)>, idle_since: Option<TsMs>) -> Observation {
    Observation {
        gpu_id: 1,
        t,
        label: GpuLabel::default(),
        rows,
        idle_since,
    }
}

const S: i64 = 1000;
const DAY: i64 = 86_400_000;

#[test]
fn an_idle_onset_seen_a_window_late_starts_idle_held_when_the_gpu_became_idle() {
    let mut l = Ledger::default();
    let mut ops = Vec::new();
    let t0 = DAY * 100;
    for k in 0..=700 {
        let t = t0 + k * S;
        let o = if k < 700 {
            obs(t, vec![(pod("a"), State::Busy)], None)
        } else {
            obs(t, vec![(pod("a"), State::IdleHeld)], Some(t - 600 * S))
        };
        l.observe(o, 3 * S, &mut ops);
    }
    assert_eq!(
        ops,
        vec![
            Op::Open {
                gpu_id: 1,
                start: t0,
                rows: vec![(pod("a"), State::Busy)]
            },
            Op::IdleSince {
                gpu_id: 1,
                onset: t0 + 100 * S
            },
        ],
        "one row per change, not per tick"
    );
    let c = l.counters(t0 + 700 * S);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].2.held_ms, 700_000.0);
    assert_eq!(c[0].2.idle_held_ms, 600_000.0);
}

#[test]
fn the_onset_never_reaches_before_the_holders_took_the_gpu() {
    let mut l = Ledger::default();
    let mut ops = Vec::new();
    let t0 = DAY * 100;
    l.observe(
        obs(t0, vec![(pod("a"), State::Busy)], None),
        3 * S,
        &mut ops,
    );
    l.observe(
        obs(t0 + S, vec![(pod("b"), State::Busy)], None),
        3 * S,
        &mut ops,
    );
    let t = t0 + 2 * S;
    l.observe(
        obs(t, vec![(pod("b"), State::IdleHeld)], Some(t - 600 * S)),
        3 * S,
        &mut ops,
    );
    assert_eq!(
        ops.last(),
        Some(&Op::IdleSince {
            gpu_id: 1,
            onset: t0 + S
        })
    );
}

#[test]
fn a_gap_is_an_unknown_row_and_rows_end_at_midnight() {
    let mut l = Ledger::default();
    let mut ops = Vec::new();
    let t0 = DAY * 100 - 10 * S;
    l.observe(
        obs(t0, vec![(pod("a"), State::Busy)], None),
        3 * S,
        &mut ops,
    );
    l.observe(
        obs(t0 + S, vec![(pod("a"), State::Busy)], None),
        3 * S,
        &mut ops,
    );
    // Silent for 20 s across midnight.
    l.observe(
        obs(t0 + 21 * S, vec![(pod("a"), State::Busy)], None),
        3 * S,
        &mut ops,
    );
    let unknown = vec![(Holder::default(), State::Unknown)];
    assert_eq!(
        ops[1..],
        [
            Op::Close {
                gpu_id: 1,
                start: t0,
                end: t0 + S
            },
            Op::Open {
                gpu_id: 1,
                start: t0 + S,
                rows: unknown.clone()
            },
            Op::Close {
                gpu_id: 1,
                start: t0 + S,
                end: DAY * 100
            },
            Op::Open {
                gpu_id: 1,
                start: DAY * 100,
                rows: unknown
            },
            Op::Close {
                gpu_id: 1,
                start: DAY * 100,
                end: t0 + 21 * S
            },
            Op::Open {
                gpu_id: 1,
                start: t0 + 21 * S,
                rows: vec![(pod("a"), State::Busy)]
            },
        ]
    );
    // The gap is not held time.
    assert_eq!(l.counters(t0 + 21 * S)[0].2.held_ms, 1000.0);
}

#[test]
fn a_shared_gpu_splits_its_time_equally_and_counters_only_grow() {
    let mut l = Ledger::default();
    let mut ops = Vec::new();
    let t0 = DAY * 100;
    let rows = vec![(pod("a"), State::Busy), (pod("b"), State::Busy)];
    for k in 0..=10 {
        l.observe(obs(t0 + k * S, rows.clone(), None), 3 * S, &mut ops);
    }
    let c = l.counters(t0 + 10 * S);
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|(_, _, c)| c.held_ms == 5000.0));
    // A restart resumes the open row without a new one when nothing changed.
    let mut l = Ledger::resume(vec![(
        1,
        OpenRow {
            start: t0,
            rows: rows.clone(),
        },
        Some(t0 + 10 * S),
    )]);
    let mut ops = Vec::new();
    l.observe(obs(t0 + 11 * S, rows, None), 3 * S, &mut ops);
    assert!(ops.is_empty(), "{ops:?}");
}
