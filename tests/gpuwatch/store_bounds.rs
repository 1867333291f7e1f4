//! The store's bounds on a simulated clock: retention per host, the size bound (raw data
//! first, rollups last), SQLITE_FULL handling, and rollup arithmetic.

use std::path::Path;
use std::time::Duration;

use gpuwatch::model::{GpuSample, SampleStatus, TickBatch};
use gpuwatch::store::{self, Store, StoreConfig, StoreError, read, synth::TickGen};
use rusqlite::Connection;

const T0: i64 = 1_750_000_020_000; // a minute start
const HOUR: i64 = 3_600_000;
const MIN: i64 = 60_000;

fn cfg(host: &str, retention_h: u64, rollup_h: u64, max_db_size: u64) -> StoreConfig {
    StoreConfig {
        retention: Duration::from_secs(retention_h * 3600),
        rollup_retention: Duration::from_secs(rollup_h * 3600),
        max_db_size,
        host: host.into(),
    }
}

fn q(conn: &Connection, sql: &str) -> Option<i64> {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn q_host(conn: &Connection, sql: &str, host: &str) -> Option<i64> {
    conn.query_row(sql, [host], |r| r.get(0)).unwrap()
}

/// Writes one tick per `step_ms` in `[from, to)`, one transaction per tick like the daemon.
fn run(st: &mut Store, tg: &mut TickGen, from: i64, to: i64, step_ms: i64) {
    let mut ts = from;
    while ts < to {
        st.write_tick(&tg.tick(ts)).unwrap();
        ts += step_ms;
    }
}

#[test]
fn retention_per_host_on_a_simulated_clock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    // Another host's history, imported first: 2 h ending a day before node-1's data.
    {
        let mut imp = store::open(&path, &cfg("old-node", 1, 2, 64 << 20)).unwrap();
        let mut tg = TickGen::new(2, 1);
        tg.uuid_prefix = "GPU-old-".into();
        let batches: Vec<TickBatch> = (0..7200)
            .map(|k| tg.tick(T0 - 26 * HOUR + k * 1000))
            .collect();
        imp.write_ticks(&batches).unwrap();
        imp.maintain_fully().unwrap();
    }
    let mut st = store::open(&path, &cfg("node-1", 1, 2, 64 << 20)).unwrap();
    let mut tg = TickGen::new(2, 1);
    tg.training_series = 1;
    let end = T0 + 3 * HOUR;
    let mut ts = T0;
    while ts < end {
        run(&mut st, &mut tg, ts, ts + 10 * MIN, 1000);
        ts += 10 * MIN;
        let newest = ts - 1000;
        let conn = st.conn();
        // The live path deletes expired raw rows a minute at a time.
        let oldest = q_host(
            conn,
            "SELECT min(ts_ms) FROM gpu_samples WHERE host = ?1",
            "node-1",
        )
        .unwrap();
        assert!(
            oldest >= newest - HOUR - 2 * MIN,
            "oldest {} newest {newest}",
            oldest
        );
        if newest - T0 > HOUR + 2 * MIN {
            assert!(oldest > T0, "expired rows were deleted");
        }
    }
    st.maintain_fully().unwrap();
    let newest = end - 1000;
    let conn = st.conn();
    let node1 = |sql: &str| q_host(conn, sql, "node-1");
    // Raw data: exactly the last hour.
    assert_eq!(
        node1("SELECT min(ts_ms) FROM gpu_samples WHERE host = ?1"),
        Some(newest - HOUR)
    );
    assert_eq!(
        node1("SELECT count(*) FROM gpu_samples WHERE host = ?1"),
        Some(2 * 3601)
    );
    assert!(
        node1("SELECT min(ts_ms) FROM gpu_processes WHERE host = ?1").unwrap() >= newest - HOUR
    );
    assert!(
        node1("SELECT min(ts_ms) FROM training_points WHERE host = ?1").unwrap() >= newest - HOUR
    );
    // Rollups: kept for 2 h, including minutes whose raw rows are gone.
    let oldest_rollup = node1("SELECT min(ts_ms) FROM gpu_rollups WHERE host = ?1").unwrap();
    assert!(oldest_rollup >= newest - 2 * HOUR && oldest_rollup <= newest - 2 * HOUR + MIN);
    let old_minutes: i64 = conn
        .query_row(
            "SELECT count(*) FROM gpu_rollups WHERE host = 'node-1' AND samples = 60
             AND ts_ms < ?1",
            [newest - HOUR - MIN],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        old_minutes >= 2 * 58,
        "rolled-up minutes without raw rows: {old_minutes}"
    );

    // The other host keeps its own newest hour, although it is a day older than node-1's.
    let old_newest = T0 - 26 * HOUR + 7199 * 1000;
    let old = |sql: &str| q_host(conn, sql, "old-node");
    assert_eq!(
        old("SELECT max(ts_ms) FROM gpu_samples WHERE host = ?1"),
        Some(old_newest)
    );
    assert_eq!(
        old("SELECT min(ts_ms) FROM gpu_samples WHERE host = ?1"),
        Some(old_newest - HOUR)
    );
    assert!(old("SELECT count(*) FROM gpu_rollups WHERE host = ?1").unwrap() >= 2 * 119);
    assert!(old("SELECT count(*) FROM gpu_processes WHERE host = ?1").unwrap() > 0);
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[test]
fn size_bound_deletes_oldest_raw_data_and_keeps_rollups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let max = 4 << 20;
    let mut st = store::open(&path, &cfg("node-1", 24 * 7, 24 * 90, max)).unwrap();
    let mut tg = TickGen::new(8, 4);
    let mut first_rollup = None;
    let mut size_deleted = 0;
    for k in 0..(3 * 3600) {
        let ts = T0 + k * 1000;
        let w = st.write_tick(&tg.tick(ts)).unwrap();
        size_deleted += w.maintenance.size_deleted_raw;
        assert_eq!(w.maintenance.size_deleted_rollups, 0);
        if k % 200 == 199 {
            st.checkpoint().unwrap();
            let u = st.usage().unwrap();
            assert!(file_len(&path) <= max, "file {} > {max}", file_len(&path));
            assert!(u.page_count * u.page_size <= max);
            let conn = st.conn();
            assert_eq!(q(conn, "SELECT max(ts_ms) FROM samples"), Some(ts));
            assert_eq!(
                q(
                    conn,
                    "SELECT count(*) FROM samples WHERE ts_ms = (SELECT max(ts_ms) FROM samples)"
                ),
                Some(8)
            );
            let r = q(conn, "SELECT min(ts_ms) FROM rollups_1m");
            if first_rollup.is_none() {
                first_rollup = r;
            }
            assert_eq!(r, first_rollup, "rollups are kept while raw data exists");
        }
    }
    assert!(size_deleted > 0);
    let conn = st.conn();
    let oldest = q(conn, "SELECT min(ts_ms) FROM samples").unwrap();
    assert!(
        oldest > T0 + HOUR,
        "oldest raw data went first ({})",
        oldest - T0
    );
    assert_eq!(first_rollup, Some(T0));
    // Every deleted raw minute was rolled up first.
    let rolled = q(conn, "SELECT count(DISTINCT ts_ms) FROM rollups_1m").unwrap();
    assert!(rolled >= 179, "{rolled}");
    assert_eq!(
        q(
            conn,
            "SELECT min(n) FROM rollups_1m WHERE ts_ms < (SELECT min(ts_ms) FROM samples) - 60000"
        ),
        Some(60)
    );
    drop(st);
    assert!(file_len(&path) <= max);
}

#[test]
fn rollups_go_only_when_no_older_raw_data_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let max = 1 << 20;
    let mut st = store::open(&path, &cfg("node-1", 24 * 7, 24 * 90, max)).unwrap();
    let mut tg = TickGen::new(16, 0);
    let mut rollups_deleted = 0;
    for k in 0..(10 * 240) {
        let ts = T0 + k * 15_000; // one tick per 15 s: many rollups per raw row
        let w = st.write_tick(&tg.tick(ts)).unwrap();
        if w.maintenance.size_deleted_rollups > 0 {
            rollups_deleted += w.maintenance.size_deleted_rollups;
            let raw_ts = q(st.conn(), "SELECT count(DISTINCT ts_ms) FROM samples");
            assert_eq!(
                raw_ts,
                Some(1),
                "rollups deleted while older raw data exists"
            );
            assert_eq!(q(st.conn(), "SELECT max(ts_ms) FROM samples"), Some(ts));
        }
        if k % 100 == 0 {
            st.checkpoint().unwrap();
            assert!(file_len(&path) <= max);
        }
    }
    assert!(rollups_deleted > 0, "the bound never reached the rollups");
    let conn = st.conn();
    assert!(q(conn, "SELECT min(ts_ms) FROM rollups_1m").unwrap() > T0);
    assert_eq!(
        q(conn, "SELECT max(ts_ms) FROM samples"),
        Some(T0 + (10 * 240 - 1) * 15_000)
    );
}

#[test]
fn sqlite_full_frees_space_and_retries_once_then_reports() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let max: u64 = 2 << 20;
    let mut st = store::open(&path, &cfg("node-1", 24 * 7, 24 * 90, max)).unwrap();
    let mut tg = TickGen::new(8, 0);
    let mut ts = T0;
    let (mut mark, mut mark_ticks) = (None, 0);
    let mut ticks = 0;
    while st.usage().unwrap().used_bytes < max * 86 / 100 {
        st.write_tick(&tg.tick(ts)).unwrap();
        ts += 1000;
        ticks += 1;
        let used = st.usage().unwrap().used_bytes;
        if mark.is_none() && used > max / 2 {
            (mark, mark_ticks) = (Some(used), ticks);
        }
    }
    let per_tick = (st.usage().unwrap().used_bytes - mark.unwrap()) / (ticks - mark_ticks);
    // A batch of ~20 % of the bound does not fit next to 86 % but does once old data is
    // deleted down to 75 %.
    let n = (max * 20 / 100 / per_tick) as i64;
    let batches: Vec<TickBatch> = (0..n).map(|k| tg.tick(ts + k * 1000)).collect();
    ts += n * 1000;
    let w = st.write_ticks(&batches).unwrap();
    assert!(
        w.retried_after_full,
        "expected SQLITE_FULL on the first attempt"
    );
    assert_eq!(
        q(st.conn(), "SELECT max(ts_ms) FROM samples"),
        Some(ts - 1000)
    );
    // A batch larger than the whole bound is refused, loudly.
    let huge: Vec<TickBatch> = (0..(max / per_tick) as i64 * 2)
        .map(|k| tg.tick(ts + k * 1000))
        .collect();
    let err = st.write_ticks(&huge).unwrap_err();
    assert!(matches!(err, StoreError::Full { .. }), "{err}");
    assert!(err.to_string().contains("max_db_size"));
    // The store is still usable and the ids cached before the failure are still valid.
    st.write_tick(&tg.tick(ts)).unwrap();
    assert_eq!(q(st.conn(), "SELECT max(ts_ms) FROM gpu_samples"), Some(ts));
    assert!(file_len(&path) <= max);
}

#[test]
fn rollup_values_match_hand_computed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = store::open(&path, &cfg("node-1", 1, 2, 64 << 20)).unwrap();
    let tg = TickGen::new(2, 0);
    let (u0, u1) = (tg.uuid(0), tg.uuid(1));
    let m0 = 1_750_000_020_000 - 1_750_000_020_000 % MIN; // a minute start
    let s =
        |k: i64, uuid: &str, status: SampleStatus| GpuSample::empty(m0 + k * 1000, uuid, status);
    let mut rows = vec![
        s(0, &u0, SampleStatus::Ok),
        s(15, &u0, SampleStatus::DeadlineMissed),
        s(30, &u0, SampleStatus::Ok),
        s(45, &u0, SampleStatus::Lost),
    ];
    let util = [Some(10), None, Some(30), Some(0)];
    let mem = [Some(1u64 << 30), None, Some(3 << 30), None];
    let throttle = [Some(0x1u64), None, Some(0x4), Some(0x40)];
    let ecc = [Some(0u64), Some(2), Some(1), None];
    for (i, r) in rows.iter_mut().enumerate() {
        r.util_gpu_pct = util[i];
        r.mem_used_bytes = mem[i];
        r.throttle_reasons = throttle[i];
        r.ecc_uncorrected = ecc[i];
        r.power_mw = Some(100_000 + i as u32 * 1000);
    }
    // GPU 1: only NULLs in the minute.
    rows.push(s(5, &u1, SampleStatus::Ok));
    rows.push(s(6, &u1, SampleStatus::Ok));
    let mut b = TickBatch {
        ts_ms: m0 + 45_000,
        inventory: tg.inventory(),
        samples: rows,
        ..Default::default()
    };
    st.write_tick(&b).unwrap();
    assert!(
        read::rollups(st.conn(), None, m0, m0 + MIN)
            .unwrap()
            .is_empty(),
        "minute not complete"
    );
    // A sample of the next minute completes it.
    b = TickBatch {
        ts_ms: m0 + MIN,
        samples: vec![s(60, &u0, SampleStatus::Ok)],
        ..Default::default()
    };
    let w = st.write_tick(&b).unwrap();
    assert_eq!(w.maintenance.rollup_rows, 2);
    let r = read::rollups(st.conn(), Some("node-1"), m0, m0 + MIN).unwrap();
    assert_eq!(r.len(), 2);
    let g0 = r.iter().find(|r| r.gpu_uuid == u0).unwrap();
    assert_eq!((g0.n, g0.n_missed, g0.n_lost), (4, 1, 1));
    assert_eq!(g0.util_gpu.0, Some(0));
    assert_eq!(g0.util_gpu.2, Some(30));
    assert!((g0.util_gpu.1.unwrap() - 40.0 / 3.0).abs() < 1e-9);
    assert_eq!(
        g0.mem_used,
        (Some(1 << 30), Some((2u64 << 30) as f64), Some(3 << 30))
    );
    assert_eq!(g0.power, (Some(100_000), Some(101_500.0), Some(103_000)));
    assert_eq!(g0.temp, (None, None, None));
    assert_eq!(g0.throttle_reasons_or, Some(0x45));
    assert_eq!(g0.ecc_uncorrected_max, Some(2));
    let g1 = r.iter().find(|r| r.gpu_uuid == u1).unwrap();
    assert_eq!(
        (g1.n, g1.util_gpu, g1.throttle_reasons_or),
        (2, (None, None, None), None)
    );
    // The view shows the same, with unit-suffixed names.
    let (avg, or): (f64, i64) = st
        .conn()
        .query_row(
            "SELECT util_gpu_pct_avg, throttle_reasons_or FROM gpu_rollups
             WHERE gpu_index = 0
               AND minute_utc = strftime('%Y-%m-%dT%H:%M:%SZ', ?1 / 1000, 'unixepoch')",
            [m0],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!((avg - 40.0 / 3.0).abs() < 1e-9);
    assert_eq!(or, 0x45);
    // Recomputing is idempotent, and a minute whose raw rows are gone keeps its rollup.
    assert_eq!(st.rollup_range(m0, m0 + MIN).unwrap(), 2);
    st.conn()
        .execute("DELETE FROM samples WHERE ts_ms < ?1", [m0 + MIN])
        .unwrap();
    assert_eq!(st.rollup_range(m0, m0 + MIN).unwrap(), 0);
    assert_eq!(read::rollups(st.conn(), None, m0, m0 + MIN).unwrap(), r);
}

#[test]
fn a_large_older_import_does_not_delay_this_hosts_retention() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let mut st = store::open(&path, &cfg("node-1", 24, 48, 256 << 20)).unwrap();
    let mut tg = TickGen::new(2, 0);
    run(&mut st, &mut tg, T0, T0 + 2 * HOUR, 1000);
    drop(st);
    // A day of another host's history, all older than node-1's, imported meanwhile.
    {
        let mut imp = store::open(&path, &cfg("old-node", 24, 48, 256 << 20)).unwrap();
        let mut old = TickGen::new(1, 0);
        old.uuid_prefix = "GPU-old-".into();
        let batches: Vec<TickBatch> = (0..86_400)
            .map(|k| old.tick(T0 - 30 * HOUR + k * 1000))
            .collect();
        for chunk in batches.chunks(3600) {
            imp.write_ticks(chunk).unwrap();
        }
    }
    // node-1 restarts with a retention of 1 h: an hour of its rows has expired. It must not
    // have to scan old-node's 86 400 older rows (4 000 a step) to find them.
    let mut st = store::open(&path, &cfg("node-1", 1, 2, 256 << 20)).unwrap();
    let end = T0 + 2 * HOUR + 10_000;
    run(&mut st, &mut tg, T0 + 2 * HOUR, end, 1000);
    let oldest = q_host(
        st.conn(),
        "SELECT min(ts_ms) FROM gpu_samples WHERE host = ?1",
        "node-1",
    )
    .unwrap();
    assert!(
        oldest >= end - HOUR - 2 * MIN,
        "node-1 keeps {} s more than its retention",
        (end - HOUR - oldest) / 1000
    );
    // The retention of the store doing maintenance applies to every host, each counted
    // from its own newest sample: old-node keeps its newest hour.
    st.maintain_fully().unwrap();
    let old = "SELECT count(*) FROM gpu_samples WHERE host = ?1";
    assert_eq!(q_host(st.conn(), old, "old-node"), Some(3601));
}
