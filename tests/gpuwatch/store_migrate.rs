//! Schema migrations: old databases upgrade in place with their data, newer ones are refused.

use std::path::Path;

use gpuwatch::store::{self, LATEST_VERSION, StoreConfig, StoreError, read, synth::TickGen};
use rusqlite::Connection;

const T0: i64 = 1_750_000_020_000; // a minute start

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A database as version 1 of gpuwatch wrote it: 3 minutes of one GPU with a process.
fn make_v1(path: &Path) {
    let mut conn = Connection::open(path).unwrap();
    store::migrate_to(&mut conn, 1).unwrap();
    assert_eq!(store::schema_version(&conn).unwrap(), 1);
    conn.execute_batch(&format!(
        "INSERT INTO hosts (id, name, first_seen_ms, last_seen_ms)
           VALUES (1, 'node-1', {T0}, {T0} + 179000);
         INSERT INTO gpus (id, host_id, uuid, gpu_index, name, first_seen_ms, last_seen_ms,
             last_sample_ms)
           VALUES (1, 1, 'GPU-old', 0, 'NVIDIA A100', {T0}, {T0} + 179000, {T0} + 179000);
         INSERT INTO processes (id, host_id, pid, start_time_ms, name, first_seen_ms, last_seen_ms)
           VALUES (1, 1, 4242, {T0} - 1000, 'python', {T0}, {T0} + 179000);
         INSERT INTO events (ts_ms, host_id, gpu_id, kind, code, message)
           VALUES ({T0}, 1, 1, 'xid', 63, 'row remap');"
    ))
    .unwrap();
    for k in 0..180 {
        let ts = T0 + k * 1000;
        conn.execute(
            "INSERT INTO samples (ts_ms, gpu_id, status, util_gpu_pct, temp_c, power_mw)
             VALUES (?1, 1, 0, ?2, 60, 250000)",
            [ts, k % 101],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO process_samples (ts_ms, gpu_id, process_id, used_mem_bytes)
             VALUES (?1, 1, 1, 1073741824)",
            [ts],
        )
        .unwrap();
    }
}

#[test]
fn version_1_database_upgrades_in_place_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    make_v1(&path);
    let mut st = store::open(&path, &StoreConfig::new("node-1")).unwrap();
    let conn = st.conn();
    assert_eq!(store::schema_version(conn).unwrap(), LATEST_VERSION);
    assert_eq!(
        count(conn, "SELECT count(*) FROM schema_migrations"),
        store::MIGRATION_COUNT as i64
    );
    // Data intact, and visible through the views.
    assert_eq!(count(conn, "SELECT count(*) FROM samples"), 180);
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM gpu_samples WHERE host = 'node-1' AND gpu_name = 'NVIDIA A100'"
        ),
        180
    );
    assert_eq!(
        count(conn, "SELECT count(*) FROM gpu_processes WHERE pid = 4242"),
        180
    );
    assert_eq!(
        count(conn, "SELECT count(*) FROM gpu_events WHERE code = 63"),
        1
    );
    let time: String = conn
        .query_row(
            "SELECT time_utc FROM gpu_samples ORDER BY ts_ms LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(time, "2025-06-15T15:07:00.000Z");
    // The old history gets its rollups (completed minutes: the first two).
    st.maintain_step().unwrap();
    let r = read::rollups(st.conn(), Some("node-1"), T0, T0 + 180_000).unwrap();
    assert!(r.len() >= 2, "{r:?}");
    assert_eq!((r[0].n, r[0].temp.1), (60, Some(60.0)));
    // New ticks land on the same GPU row.
    let mut tg = TickGen::new(1, 0);
    tg.uuid_prefix = "GPU-old".into();
    let mut b = tg.tick(T0 + 180_000);
    b.samples[0].uuid = "GPU-old".into();
    b.inventory[0].uuid = "GPU-old".into();
    st.write_tick(&b).unwrap();
    assert_eq!(count(st.conn(), "SELECT count(*) FROM gpus"), 1);
    let rows = read::latest_per_gpu(st.conn(), None, T0 + 181_000).unwrap();
    assert_eq!(rows[0].latest.as_ref().unwrap().ts_ms, T0 + 180_000);
    drop(st);
    // The CLI's read-only connection works on the upgraded file.
    let ro = store::open_read_only(&path).unwrap();
    assert_eq!(count(&ro, "SELECT count(*) FROM gpu_rollups"), 3);
}

#[test]
fn version_2_database_upgrades_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    let mut conn = Connection::open(&path).unwrap();
    store::migrate_to(&mut conn, 2).unwrap();
    drop(conn);
    let err = store::open_read_only(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::Outdated { found: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade"), "{err}");
    drop(store::open(&path, &StoreConfig::new("h")).unwrap());
    let ro = store::open_read_only(&path).unwrap();
    assert_eq!(store::schema_version(&ro).unwrap(), LATEST_VERSION);
    assert_eq!(count(&ro, "SELECT count(*) FROM gpu_rollups"), 0);
}

#[test]
fn newer_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    drop(store::open(&path, &StoreConfig::new("h")).unwrap());
    let future = LATEST_VERSION + 1;
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", future)
        .unwrap();
    let err = store::open(&path, &StoreConfig::new("h")).unwrap_err();
    match &err {
        StoreError::TooNew {
            found,
            known,
            path: p,
        } => {
            assert_eq!((*found, *known), (future, LATEST_VERSION));
            assert!(p.ends_with("new.db"), "{p}");
        }
        other => panic!("unexpected {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("newer") && msg.contains(&future.to_string()),
        "{msg}"
    );
    let err = store::open_read_only(&path).unwrap_err();
    assert!(matches!(err, StoreError::TooNew { .. }), "{err}");
    let conn = Connection::open(&path).unwrap();
    assert_eq!(store::schema_version(&conn).unwrap(), future);
    let mut conn = conn;
    assert!(matches!(
        store::migrate_to(&mut conn, 1),
        Err(StoreError::TooNew { .. })
    ));
}

#[test]
fn opening_twice_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let a = store::open(&path, &StoreConfig::new("node-1")).unwrap();
    // A second writer on the same file at the same time (a CLI command, an import).
    let b = store::open(&path, &StoreConfig::new("node-2")).unwrap();
    drop((a, b));
    let st = store::open(&path, &StoreConfig::new("node-1")).unwrap();
    let conn = st.conn();
    assert_eq!(
        count(conn, "SELECT count(*) FROM schema_migrations"),
        store::MIGRATION_COUNT as i64
    );
    assert_eq!(count(conn, "SELECT count(*) FROM hosts"), 2);
    let app: i64 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .unwrap();
    assert_eq!(app, i64::from(store::APPLICATION_ID));
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}
