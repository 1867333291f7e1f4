//! The rollups an import computes while staging (`store/import/fused.rs`) are exactly what the
//! live rollup pass computes from the published rows: for an in-order log (where the publish
//! writes them), and where it must not use them — a GPU's rows out of order, or stored
//! samples in the imported minutes — the minutes are recomputed and still exact.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gpuwatch::import::nvidia_smi::{self, Options, Summary, Zone};
use rusqlite::Connection;

const HEADER: &str = "timestamp, index, uuid, utilization.gpu [%], utilization.memory [%], \
    memory.used [MiB], temperature.gpu, power.draw [W], clocks.current.sm [MHz], \
    clocks.current.memory [MHz], fan.speed [%], ecc.errors.corrected.volatile.total, \
    ecc.errors.uncorrected.volatile.total, clocks_throttle_reasons.active\n";

/// One log line of GPU `gpu` at `ms` after 2024-05-01 12:00:00 UTC, its values varying with
/// `k`, some of them not available.
fn line(out: &mut String, gpu: usize, ms: u64, k: u64) {
    let na = |cond: bool, v: String| if cond { "[N/A]".to_string() } else { v };
    let _ = writeln!(
        out,
        "2024/05/01 {:02}:{:02}:{:02}.{:03}, {gpu}, GPU-0000000{gpu}-1111-2222-3333-444444444444, \
         {} %, {} %, {} MiB, {}, {}.{:02} W, {} MHz, {}, {}, {}, {}, 0x{:016x}",
        12 + ms / 3_600_000,
        (ms / 60_000) % 60,
        (ms / 1000) % 60,
        ms % 1000,
        (k * 37) % 101,
        (k * 11) % 100,
        1000 + (k * 131) % 70_000,
        na(k % 17 == 3, (30 + (k * 7) % 60).to_string()),
        100 + (k * 13) % 600,
        k % 100,
        1000 + (k * 3) % 900,
        na(k % 23 == 5, format!("{} MHz", 1593 + k % 5)),
        na(k.is_multiple_of(29), format!("{} %", k % 100)),
        k / 50,
        na(k % 31 == 7, (k / 400).to_string()),
        [0u64, 0x4, 0x40, 0x1][(k % 4) as usize],
    );
}

/// `gpus` GPUs logged every `step_ms` from `from_ms` to `to_ms` (after 12:00 UTC), interleaved
/// by time as nvidia-smi writes them.
fn log(gpus: usize, from_ms: u64, to_ms: u64, step_ms: u64) -> String {
    let mut out = String::from(HEADER);
    let mut ms = from_ms;
    while ms < to_ms {
        for g in 0..gpus {
            line(&mut out, g, ms, ms / step_ms * 3 + g as u64);
        }
        ms += step_ms;
    }
    out
}

fn import(db: &Path, dir: &Path, name: &str, text: &str) -> Summary {
    import_as(db, dir, name, text, "node1")
}

fn import_as(db: &Path, dir: &Path, name: &str, text: &str, host: &str) -> Summary {
    let file: PathBuf = dir.join(name);
    std::fs::write(&file, text).unwrap();
    let store = gpuwatch::store::open(db, &gpuwatch::store::StoreConfig::new("node1")).unwrap();
    let opts = Options {
        zone: Zone::parse(Some("UTC")).unwrap(),
        host: Some(host.into()),
        columns: None,
        strict: true,
        map: None,
    };
    let s = nvidia_smi::import(&store, &[file], &opts, &mut |_| {}).unwrap();
    assert!(s.bad_lines.is_empty(), "{:?}", s.bad_lines);
    s
}

/// Every rollup row, every column.
fn rollups(db: &Path) -> Vec<Vec<rusqlite::types::Value>> {
    let c = Connection::open(db).unwrap();
    let mut st = c
        .prepare("SELECT * FROM rollups_1m ORDER BY gpu_id, ts_ms")
        .unwrap();
    let width = st.column_count();
    st.query_map([], |r| (0..width).map(|i| r.get(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The rollups as they are, then as the live rollup pass recomputes them from the rows.
fn as_is_and_recomputed(
    db: &Path,
) -> (
    Vec<Vec<rusqlite::types::Value>>,
    Vec<Vec<rusqlite::types::Value>>,
) {
    let before = rollups(db);
    let mut store = gpuwatch::store::open(db, &gpuwatch::store::StoreConfig::new("node1")).unwrap();
    store.rollup_range(0, i64::MAX / 2).unwrap();
    drop(store);
    (before, rollups(db))
}

const T0_MS: i64 = 1_714_564_800_000; // 2024-05-01T12:00:00Z

#[test]
fn an_in_order_log_gets_its_rollups_from_staging_equal_to_a_recomputation() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    // 3 GPUs, 5.5 minutes at 1 s, starting and ending mid-minute.
    let s = import(&db, dir.path(), "a.csv", &log(3, 30_500, 360_500, 1000));
    assert_eq!(s.samples, 3 * 330);
    assert_eq!(s.rollups, 3 * 6, "minutes 0..=5 of 3 GPUs");
    assert_eq!(
        s.rollups_staged, s.rollups,
        "the publish wrote every minute"
    );
    let (got, recomputed) = as_is_and_recomputed(&db);
    assert_eq!(got.len(), 18);
    assert_eq!(got, recomputed);
    // The rollup progress covers the imported minutes, as after a recomputation.
    let c = Connection::open(&db).unwrap();
    let done: i64 = c
        .query_row("SELECT done_ms FROM rollup_state", [], |r| r.get(0))
        .unwrap();
    assert_eq!(done, T0_MS + 6 * 60_000);
}

#[test]
fn a_gpu_whose_rows_go_back_in_time_is_rolled_up_from_the_published_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let mut text = log(2, 0, 120_000, 1000);
    // GPU 1 again at 00:30.000, with other values: the later row replaces the earlier one.
    line(&mut text, 1, 30_000, 999);
    text.push_str(&log(2, 120_000, 180_000, 1000)[HEADER.len()..]);
    let s = import(&db, dir.path(), "b.csv", &text);
    assert_eq!(s.rollups, 2 * 3);
    assert_eq!(s.rollups_staged, 0);
    let (got, recomputed) = as_is_and_recomputed(&db);
    assert_eq!(got.len(), 6);
    assert_eq!(got, recomputed);
}

#[test]
fn an_import_over_stored_samples_is_rolled_up_from_all_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let first = import(&db, dir.path(), "a.csv", &log(2, 0, 240_000, 1000));
    assert_eq!(first.rollups_staged, 2 * 4);
    // The same GPUs from 02:00.500 to 05:59.500: minutes 2 and 3 hold both imports' rows.
    let second = import(&db, dir.path(), "b.csv", &log(2, 120_500, 360_500, 1000));
    assert_eq!(second.rollups_staged, 0);
    let (got, recomputed) = as_is_and_recomputed(&db);
    assert_eq!(got.len(), 2 * 6);
    assert_eq!(got, recomputed);
    let c = Connection::open(&db).unwrap();
    let n: i64 = c
        .query_row(
            "SELECT n FROM rollups_1m WHERE ts_ms = ?1 LIMIT 1",
            [T0_MS + 2 * 60_000],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 120, "minute 2 has 60 rows of each import");
}

/// One UUID under two hosts (the same boards' log imported under two names, one of them half a
/// minute later): `gpu_rollups` in `ORDER BY gpu_uuid, ts_ms` gives each UUID's minutes of both
/// hosts interleaved by time, every row once, read from the index in that order (no sort in
/// the plan), with the live rollups' rows (recomputed) as with the import's.
#[test]
fn gpu_rollups_in_uuid_then_time_order_need_no_sort_with_a_uuid_under_two_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    import_as(&db, dir.path(), "a.csv", &log(2, 0, 240_000, 1000), "node1");
    import_as(
        &db,
        dir.path(),
        "b.csv",
        &log(2, 30_000, 300_000, 1000),
        "node2",
    );
    let mut store =
        gpuwatch::store::open(&db, &gpuwatch::store::StoreConfig::new("node1")).unwrap();
    store.rollup_range(0, i64::MAX / 2).unwrap();
    drop(store);
    let q = "SELECT gpu_uuid, ts_ms, host, temp_c_max FROM gpu_rollups \
             WHERE ts_ms >= ?1 ORDER BY gpu_uuid, ts_ms";
    let c = gpuwatch::store::open_read_only(&db).unwrap();
    let plan_of = |q: &str| -> Vec<String> {
        c.prepare(&format!("EXPLAIN QUERY PLAN {q}"))
            .unwrap()
            .query_map([T0_MS], |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let plan = plan_of(q);
    assert!(
        !plan.iter().any(|step| step.contains("TEMP B-TREE")),
        "the view's order should come from rollups_1m_common: {plan:?}"
    );
    type Row = (String, i64, String, Option<i64>);
    let read = |sql: &str| -> Vec<Row> {
        c.prepare(sql)
            .unwrap()
            .query_map([T0_MS], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let got = read(q);
    // The same rows from the table itself, through `gpus` and `hosts`.
    let mut want = read(
        "SELECT g.uuid, r.ts_ms, h.name, r.temp_max FROM rollups_1m r \
         JOIN gpus g ON g.id = r.gpu_id JOIN hosts h ON h.id = g.host_id WHERE r.ts_ms >= ?1",
    );
    assert_eq!(
        want.len(),
        2 * 4 + 2 * 5,
        "node1: minutes 0-3, node2: minutes 0-4"
    );
    assert!(
        got.windows(2)
            .all(|w| (&w[0].0, w[0].1) <= (&w[1].0, w[1].1)),
        "not in UUID-then-time order: {got:?}"
    );
    let mut sorted = got.clone();
    sorted.sort();
    want.sort();
    assert_eq!(sorted, want);
    // Both hosts' rows of a minute are there, next to each other.
    let minute_1: Vec<&str> = got
        .iter()
        .filter(|r| r.0.starts_with("GPU-00000001") && r.1 == T0_MS + 60_000)
        .map(|r| r.2.as_str())
        .collect();
    assert_eq!(minute_1.len(), 2, "{got:?}");

    // Without a column of `gpus` or `hosts`, the view reads the UUIDs and the rollups' index
    // only (migration 18: no lookup of each row's GPU), and gives the same rows.
    let q = "SELECT gpu_uuid, ts_ms, temp_c_max FROM gpu_rollups \
             WHERE ts_ms >= ?1 ORDER BY gpu_uuid, ts_ms";
    let plan = plan_of(q);
    assert_eq!(plan.len(), 2, "{plan:?}");
    assert!(
        plan[0].contains(" u ") && plan[1].contains("rollups_1m_common"),
        "{plan:?}"
    );
    let short: Vec<(String, i64, Option<i64>)> = c
        .prepare(q)
        .unwrap()
        .query_map([T0_MS], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let long: Vec<(String, i64, Option<i64>)> = got.into_iter().map(|r| (r.0, r.1, r.3)).collect();
    assert_eq!(short, long);
}
