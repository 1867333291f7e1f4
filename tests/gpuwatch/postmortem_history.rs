//! `gpuwatch history` end to end: a database filled with `store::synth::TickGen` (plus
//! explicit NULLs), read back through the binary as table, CSV, JSON and sparklines; the
//! raw-vs-rollup choice, agreement of both paths, GPU selection and metric-name errors.

use std::path::Path;
use std::process::{Command, Output};

use gpuwatch::store::synth::TickGen;
use gpuwatch::store::{StoreConfig, open};
use serde_json::Value;

/// Minute-aligned start of the synthetic history (2027-01-15T08:00:00Z).
const T0: i64 = 1_800_000_000_000;
const MIN: i64 = 60_000;

fn gpuwatch(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .arg("history")
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("gpuwatch runs")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "gpuwatch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}

fn secs(ms: i64) -> String {
    (ms / 1000).to_string()
}

/// 2 GPUs, one sample every `every_ms` for `span_ms`, rolled up; GPU 1 has no utilisation
/// reading (NULL) during the fourth minute.
fn fill(db: &Path, span_ms: i64, every_ms: i64) -> TickGen {
    let mut st = open(db, &StoreConfig::new("node-a")).expect("store opens");
    let mut tg = TickGen::new(2, 1);
    let mut batches = Vec::new();
    let mut ts = T0;
    while ts < T0 + span_ms {
        let mut b = tg.tick(ts);
        if (T0 + 3 * MIN..T0 + 4 * MIN).contains(&ts) {
            b.samples[1].util_gpu_pct = None;
        }
        batches.push(b);
        if batches.len() == 2000 {
            st.write_ticks(&batches).expect("write");
            batches.clear();
        }
        ts += every_ms;
    }
    st.write_ticks(&batches).expect("write");
    st.rollup_range(T0, T0 + span_ms).expect("rollup");
    tg
}

fn json(db: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    serde_json::from_str(&ok(&gpuwatch(db, &a))).expect("JSON output")
}

#[test]
fn table_csv_json_and_chart_keep_unknown_values_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    fill(&db, 10 * MIN, 1000);
    let range = [
        "--from",
        &secs(T0),
        "--to",
        &secs(T0 + 10 * MIN),
        "--step",
        "1m",
    ];
    let range: Vec<&str> = range.iter().map(|s| &**s).collect();

    let mut a = range.clone();
    a.extend(["--metric", "util,temp,fan"]);
    let j = json(&db, &a);
    assert_eq!(j["source"], "raw");
    assert_eq!(j["step_ms"], 60_000);
    let series = j["series"].as_array().unwrap();
    assert_eq!(series.len(), 6, "2 GPUs x 3 metrics");
    let find = |gpu: u64, m: &str| {
        series
            .iter()
            .find(|s| s["gpu_index"] == gpu && s["metric"] == m)
            .unwrap_or_else(|| panic!("series {gpu} {m}"))
    };
    let util1 = find(1, "util_gpu")["points"].as_array().unwrap();
    assert_eq!(util1.len(), 10);
    assert_eq!(util1[3]["ts_ms"], T0 + 3 * MIN);
    assert!(util1[3]["avg"].is_null() && util1[3]["max"].is_null());
    assert!(util1[2]["avg"].is_f64() && util1[4]["avg"].is_f64());
    assert!(find(0, "util_gpu")["points"][3]["avg"].is_f64());
    assert!(find(1, "temp")["points"][3]["avg"].is_f64());
    // TickGen's GPUs have no fan: unknown everywhere, never 0.
    for p in find(0, "fan")["points"].as_array().unwrap() {
        assert!(p["avg"].is_null() && p["min"].is_null(), "{p}");
    }

    let mut a = range.clone();
    a.extend(["--metric", "util,temp"]);
    let table = ok(&gpuwatch(&db, &a));
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains("UTIL_GPU %") && lines[0].contains("TEMP °C"));
    assert_eq!(lines.len(), 1 + 20 + 1, "{table}");
    // Row 1 + 2*3 + 1 is GPU 1 in minute 3: unknown utilisation is '-'.
    let row = lines[1 + 2 * 3 + 1].split_whitespace().collect::<Vec<_>>();
    assert_eq!(row[2], "1", "{table}");
    assert_eq!(row[3], "-", "{table}");
    assert!(row[4].parse::<f64>().is_ok(), "{table}");
    assert!(lines[21].starts_with("source: raw samples; step 1m"));

    a.extend(["--format", "csv"]);
    let csv = ok(&gpuwatch(&db, &a));
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[0],
        "ts_ms,time_utc,host,gpu_index,gpu_uuid,util_gpu,util_gpu_min,util_gpu_max,temp,temp_min,temp_max"
    );
    assert_eq!(rows.len(), 21);
    let f: Vec<&str> = rows[1 + 2 * 3 + 1].split(',').collect();
    assert_eq!(f[0], (T0 + 3 * MIN).to_string());
    assert_eq!(f[1], "2027-01-15T08:03:00.000Z");
    assert_eq!((f[2], f[3]), ("node-a", "1"));
    assert_eq!(&f[5..8], ["", "", ""]);
    assert!(f[8].parse::<f64>().unwrap() > 30.0);

    let mut a = range.clone();
    a.extend(["--metric", "util", "--format", "chart", "--gpu", "1"]);
    let chart = ok(&gpuwatch(&db, &a));
    let line = chart.lines().next().unwrap();
    assert!(line.starts_with("GPU 1 util_gpu %"), "{chart}");
    let spark: String = line
        .chars()
        .filter(|c| ('▁'..='█').contains(c) || *c == ' ')
        .collect();
    let bars: Vec<char> = spark.trim().chars().collect();
    assert_eq!(bars.len(), 10, "{chart}");
    assert_eq!(bars[3], ' ', "the NULL minute is a gap: {chart}");
    assert!(bars.iter().enumerate().all(|(i, c)| i == 3 || *c != ' '));
}

#[test]
fn raw_for_short_ranges_rollups_for_long_and_both_agree() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    fill(&db, 3 * 86_400_000, 20_000);

    let long = json(
        &db,
        &["--from", &secs(T0), "--to", &secs(T0 + 3 * 86_400_000)],
    );
    assert_eq!(long["source"], "rollups");
    assert_eq!(long["step_ms"], 7_200_000, "3 days / 60, rounded up to 2h");
    let pts = long["series"][0]["points"].as_array().unwrap();
    assert_eq!(pts.len(), 36);
    assert!(pts.iter().all(|p| p["avg"].is_f64()));

    let short = json(&db, &["--from", &secs(T0), "--to", &secs(T0 + 3_600_000)]);
    assert_eq!(short["source"], "raw");
    assert_eq!(short["step_ms"], 60_000);

    // Two hours at 5 minutes and at 1 minute (the rollups' one-row-per-bucket path) through
    // both paths: the same buckets, the same numbers.
    for (step, buckets) in [("5m", 24), ("1m", 120)] {
        let window = [
            "--from",
            &secs(T0 + 86_400_000),
            "--to",
            &secs(T0 + 86_400_000 + 7_200_000),
            "--step",
            step,
            "--metric",
            "util,mem,temp,power,clocks",
        ];
        let mut raw_args = window.to_vec();
        raw_args.extend(["--source", "raw"]);
        let mut rollup_args = window.to_vec();
        rollup_args.extend(["--source", "rollups"]);
        let raw = json(&db, &raw_args);
        let rolled = json(&db, &rollup_args);
        assert_eq!(
            (raw["source"].as_str(), rolled["source"].as_str()),
            (Some("raw"), Some("rollups"))
        );
        let (rs, ls) = (
            raw["series"].as_array().unwrap(),
            rolled["series"].as_array().unwrap(),
        );
        assert_eq!(rs.len(), 2 * 6, "clocks is clock_sm and clock_mem");
        assert_eq!(rs.len(), ls.len());
        for (r, l) in rs.iter().zip(ls) {
            assert_eq!(r["metric"], l["metric"]);
            let (rp, lp) = (
                r["points"].as_array().unwrap(),
                l["points"].as_array().unwrap(),
            );
            assert_eq!(rp.len(), buckets);
            assert_eq!(rp.len(), lp.len());
            for (a, b) in rp.iter().zip(lp) {
                assert_eq!(a["ts_ms"], b["ts_ms"]);
                for k in ["avg", "min", "max"] {
                    let (x, y) = (a[k].as_f64().unwrap(), b[k].as_f64().unwrap());
                    assert!(
                        (x - y).abs() <= 1e-6 * x.abs().max(1.0),
                        "{} {k} at {}: raw {x} vs rollups {y}",
                        r["metric"],
                        a["ts_ms"]
                    );
                }
            }
        }
    }
}

#[test]
fn gpus_by_index_or_uuid_and_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    let tg = fill(&db, 3 * MIN, 1000);
    let range = ["--from", &secs(T0), "--to", &secs(T0 + 3 * MIN)];
    let gpus_of = |extra: &[&str]| -> Vec<(u64, String)> {
        let mut a = range.to_vec();
        a.extend(extra);
        let j = json(&db, &a);
        let mut v: Vec<(u64, String)> = j["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["gpu_index"].as_u64().unwrap(),
                    s["gpu_uuid"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        v.dedup();
        v
    };
    assert_eq!(gpus_of(&[]).len(), 2);
    assert_eq!(gpus_of(&["--gpu", "1"]), [(1, tg.uuid(1))]);
    assert_eq!(gpus_of(&["--gpu", &tg.uuid(0)]), [(0, tg.uuid(0))]);
    assert_eq!(gpus_of(&["--gpu", &format!("1,{}", tg.uuid(0))]).len(), 2);

    let mut a = range.to_vec();
    a.extend(["--gpu", "7"]);
    let out = gpuwatch(&db, &a);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--gpu \"7\" matches no GPU") && err.contains(&tg.uuid(1)),
        "{err}"
    );

    let mut a = range.to_vec();
    a.extend(["--metric", "util,gpu_tmep"]);
    let out = gpuwatch(&db, &a);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown metric \"gpu_tmep\""), "{err}");
    assert!(
        err.contains("util_gpu") && err.contains("clock_sm") && err.contains("clocks"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
