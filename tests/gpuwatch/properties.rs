//! Property tests (proptest) of invariants that are easy to state:
//! - a rule expression that parses, printed and parsed again, is the same expression;
//! - an import of N valid nvidia-smi CSV rows stores N sample rows;
//! - the 1-minute rollups of imported samples equal SQL aggregates over the raw rows.
//!
//! Case counts are small so that the file runs in a few seconds in a debug build.

use std::fmt::Write as _;
use std::path::Path;

use gpuwatch::import::nvidia_smi::{self, Options, Zone};
use gpuwatch::rules::parse::{Want, parse_checked};
use gpuwatch::rules::rule::Scope;
use proptest::prelude::*;

// ---------- the rule language: print → parse is the identity ----------

const METRICS: &[&str] = &[
    "util_gpu", "util_mem", "mem_used", "temp", "power", "fan", "clock_sm",
];
const WINDOW_FNS: &[&str] = &["avg", "min", "max", "last", "first", "sum", "count"];
const DURATIONS: &[&str] = &["30s", "5m", "90s", "1h", "2h30m", "10m"];

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..100_000).prop_map(|n| n.to_string()),
        (0u32..10_000, 1u32..1000).prop_map(|(a, b)| format!("{a}.{b}")),
    ]
}

/// A numeric atom: a literal, a metric's current value, a window aggregate, a quantile.
fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        number(),
        prop::sample::select(METRICS).prop_map(str::to_string),
        (
            prop::sample::select(WINDOW_FNS),
            prop::sample::select(METRICS),
            prop::sample::select(DURATIONS)
        )
            .prop_map(|(f, m, d)| format!("{f}({m}[{d}])")),
        (
            1u32..100,
            prop::sample::select(METRICS),
            prop::sample::select(DURATIONS)
        )
            .prop_map(|(q, m, d)| format!("quantile(0.{q:02}, {m}[{d}])")),
    ]
}

fn numeric() -> impl Strategy<Value = String> {
    atom().prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (
                inner.clone(),
                prop::sample::select(&["+", "-", "*", "/"][..]),
                inner.clone()
            )
                .prop_map(|(a, op, b)| format!("{a} {op} {b}")),
            inner.clone().prop_map(|a| format!("-{a}")),
            inner.prop_map(|a| format!("({a})")),
        ]
    })
}

fn condition() -> impl Strategy<Value = String> {
    let cmp = (
        numeric(),
        prop::sample::select(&["<", "<=", ">", ">=", "==", "!="][..]),
        numeric(),
    )
        .prop_map(|(a, op, b)| format!("{a} {op} {b}"));
    cmp.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} and {b}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} or {b}")),
            inner.clone().prop_map(|a| format!("not ({a})")),
            inner.prop_map(|a| format!("({a})")),
        ]
    })
}

fn round_trip(src: &str, want: Want) -> Result<(), TestCaseError> {
    let expr = parse_checked(src, Scope::Gpu, want)
        .map_err(|e| TestCaseError::fail(format!("{src:?} does not parse: {e:?}")))?;
    let printed = expr.to_string();
    let again = parse_checked(&printed, Scope::Gpu, want).map_err(|e| {
        TestCaseError::fail(format!("{printed:?} (from {src:?}) does not parse: {e:?}"))
    })?;
    prop_assert_eq!(&again, &expr, "{:?} printed as {:?}", src, printed);
    prop_assert_eq!(again.to_string(), printed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_printed_condition_parses_to_the_same_expression(src in condition()) {
        round_trip(&src, Want::Condition)?;
    }

    #[test]
    fn a_printed_value_parses_to_the_same_expression(src in numeric()) {
        round_trip(&src, Want::Value)?;
    }
}

// ---------- nvidia-smi import: N valid rows → N stored rows; rollups = SQL aggregates ----------

const UUIDS: [&str; 2] = [
    "GPU-5f1c2a9e-1b2c-4d5e-8f90-0123456789ab",
    "GPU-6a2d3b0f-2c3d-4e5f-9a01-123456789abc",
];

/// One CSV row's values (None: `[N/A]`).
#[derive(Debug, Clone)]
struct Row {
    util: Option<u32>,
    mem_mib: u32,
    temp: Option<u32>,
    power_cw: Option<u32>,
}

fn row() -> impl Strategy<Value = Row> {
    (
        prop::option::weighted(0.8, 0u32..=100),
        0u32..81_559,
        prop::option::weighted(0.9, 20u32..95),
        prop::option::weighted(0.9, 5_000u32..70_000),
    )
        .prop_map(|(util, mem_mib, temp, power_cw)| Row {
            util,
            mem_mib,
            temp,
            power_cw,
        })
}

/// Per GPU: distinct seconds after 2024-05-01 12:00 (up to 5 minutes) and a row for each.
fn log() -> impl Strategy<Value = Vec<Vec<(u32, Row)>>> {
    prop::collection::vec(
        prop::collection::btree_set(0u32..300, 1..30).prop_flat_map(|secs| {
            let n = secs.len();
            prop::collection::vec(row(), n)
                .prop_map(move |rows| secs.iter().copied().zip(rows).collect::<Vec<_>>())
        }),
        1..=2,
    )
}

fn csv(gpus: &[Vec<(u32, Row)>]) -> String {
    let mut out = String::from(
        "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], temperature.gpu, power.draw [W]\n",
    );
    let na = |v: Option<String>| v.unwrap_or_else(|| "[N/A]".to_string());
    for (i, rows) in gpus.iter().enumerate() {
        for (s, r) in rows {
            let _ = writeln!(
                out,
                "2024/05/01 12:{:02}:{:02}.{:03}, {i}, {}, {}, {} MiB, {}, {}",
                s / 60,
                s % 60,
                (s * 7) % 1000,
                UUIDS[i],
                na(r.util.map(|u| format!("{u} %"))),
                r.mem_mib,
                na(r.temp.map(|t| t.to_string())),
                na(r.power_cw.map(|p| format!("{}.{:02} W", p / 100, p % 100))),
            );
        }
    }
    out
}

/// Imports `text` into a new database in `dir`; returns the database path.
fn import(
    dir: &Path,
    text: &str,
) -> Result<(std::path::PathBuf, nvidia_smi::Summary), TestCaseError> {
    let file = dir.join("gpu.csv");
    std::fs::write(&file, text).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let db = dir.join("g.db");
    let store = gpuwatch::store::open(&db, &gpuwatch::store::StoreConfig::new("node1"))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let opts = Options {
        zone: Zone::parse(Some("UTC")).map_err(TestCaseError::fail)?,
        host: Some("node1".into()),
        columns: None,
        strict: true,
        map: None,
    };
    let summary = nvidia_smi::import(&store, &[file], &opts, &mut |_| {})
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok((db, summary))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn an_import_of_n_valid_rows_stores_n_rows(gpus in log()) {
        let n: usize = gpus.iter().map(Vec::len).sum();
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (db, summary) = import(dir.path(), &csv(&gpus))?;
        prop_assert!(summary.bad_lines.is_empty(), "{:?}", summary.bad_lines);
        prop_assert_eq!(summary.samples, n as u64);
        let conn = rusqlite::Connection::open(&db).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let stored: i64 = conn
            .query_row("SELECT count(*) FROM samples", [], |r| r.get(0))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(stored, n as i64);
        let per_gpu: i64 = conn
            .query_row("SELECT count(DISTINCT gpu_id) FROM samples", [], |r| r.get(0))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(per_gpu, gpus.len() as i64);
    }

    #[test]
    fn rollups_equal_sql_aggregates_of_the_raw_rows(gpus in log()) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (db, _) = import(dir.path(), &csv(&gpus))?;
        let conn = rusqlite::Connection::open(&db).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let cols = ["util_gpu", "mem_used", "temp", "power"];
        let raw = ["util_gpu_pct", "mem_used_bytes", "temp_c", "power_mw"];
        let mut agg = String::from("SELECT gpu_id, ts_ms / 60000 * 60000 AS m, count(*)");
        for c in raw {
            let _ = write!(agg, ", min({c}), max({c}), avg({c})");
        }
        agg.push_str(" FROM samples GROUP BY gpu_id, m ORDER BY gpu_id, m");
        let mut roll = String::from("SELECT gpu_id, ts_ms, n");
        for c in cols {
            let _ = write!(roll, ", {c}_min, {c}_max, {c}_avg");
        }
        roll.push_str(" FROM rollups_1m ORDER BY gpu_id, ts_ms");
        let read = |sql: &str| -> Result<Vec<Vec<rusqlite::types::Value>>, TestCaseError> {
            let mut st = conn.prepare(sql).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let width = st.column_count();
            st.query_map([], |r| (0..width).map(|i| r.get(i)).collect())
                .and_then(|rows| rows.collect())
                .map_err(|e| TestCaseError::fail(e.to_string()))
        };
        let want = read(&agg)?;
        let got = read(&roll)?;
        prop_assert!(!want.is_empty());
        prop_assert_eq!(got.len(), want.len(), "rollup rows vs minutes with raw rows");
        for (g, w) in got.iter().zip(&want) {
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                use rusqlite::types::Value::{Integer, Real};
                let same = match (a, b) {
                    (Real(x), Real(y)) => (x - y).abs() <= 1e-9 * y.abs().max(1.0),
                    (Real(x), Integer(y)) | (Integer(y), Real(x)) => *x == *y as f64,
                    _ => a == b,
                };
                prop_assert!(same, "column {} of minute {:?}: rollup {:?}, SQL {:?}", i, w.get(1), a, b);
            }
        }
    }
}
