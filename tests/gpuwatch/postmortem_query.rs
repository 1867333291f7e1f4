//! `gpuwatch query` and `gpuwatch export` through the real binary, on a database filled with
//! synthetic ticks through the store API: output formats (parsed back and checked against the
//! database), the read-only guarantees (writes, `PRAGMA query_only=0`, ATTACH, VACUUM INTO fail
//! and the file stays byte-identical), interruption by --timeout and Ctrl-C, queries while
//! another connection keeps writing, and exports that round-trip a range's sample count.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpuwatch::store::{self, StoreConfig, synth::TickGen};
use sha2::{Digest, Sha256};

const T0: i64 = 1_750_000_000_000;
const GPUS: usize = 2;
const TICKS: i64 = 120;

fn gpuwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.env_remove("RUST_LOG");
    c
}

/// A database with `TICKS` one-second ticks of `GPUS` GPUs (one process each) from `T0`,
/// checkpointed and closed.
fn filled_db(dir: &Path) -> PathBuf {
    let path = dir.join("g.db");
    let mut st = store::open(&path, &StoreConfig::new("node-1")).expect("open");
    let mut tg = TickGen::new(GPUS, 1);
    let batches: Vec<_> = (0..TICKS).map(|i| tg.tick(T0 + i * 1000)).collect();
    st.write_ticks(&batches).expect("write");
    st.checkpoint().expect("checkpoint");
    drop(st);
    path
}

fn query(db: &Path, args: &[&str]) -> Output {
    gpuwatch()
        .arg("query")
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("run gpuwatch query")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn count(db: &Path, sql: &str) -> i64 {
    let c = store::open_read_only(db).expect("open ro");
    c.query_row(sql, [], |r| r.get(0)).expect("count")
}

fn file_hash(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).expect("read db")))
}

const VIEW_SQL: &str = "SELECT ts_ms, time_utc, gpu_index, gpu_uuid, util_gpu_pct, fan_pct, \
     power_w FROM gpu_samples WHERE ts_ms < 1750000003000 ORDER BY ts_ms, gpu_index";

/// (ts_ms, util, power_w) straight from the database.
fn expected_rows(db: &Path) -> Vec<(i64, i64, f64)> {
    let c = store::open_read_only(db).expect("open ro");
    let mut s = c.prepare(VIEW_SQL).expect("prepare");
    s.query_map([], |r| Ok((r.get(0)?, r.get(4)?, r.get(6)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[test]
fn csv_json_and_table_output_of_a_views_query() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled_db(dir.path());
    let want = expected_rows(&db);
    assert_eq!(want.len(), 3 * GPUS);

    // CSV: a header row, values as stored, NULL as an empty field.
    let o = query(&db, &[VIEW_SQL, "--format", "csv"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut r = csv::Reader::from_reader(o.stdout.as_slice());
    let header: Vec<String> = r
        .headers()
        .expect("header")
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(
        header,
        [
            "ts_ms",
            "time_utc",
            "gpu_index",
            "gpu_uuid",
            "util_gpu_pct",
            "fan_pct",
            "power_w"
        ]
    );
    let recs: Vec<csv::StringRecord> = r.records().collect::<Result<_, _>>().expect("csv");
    assert_eq!(recs.len(), want.len());
    for (rec, (ts, util, power)) in recs.iter().zip(&want) {
        assert_eq!(rec[0].parse::<i64>().expect("ts"), *ts);
        let t = chrono::DateTime::parse_from_rfc3339(&rec[1]).expect("RFC 3339 time_utc");
        assert_eq!(t.timestamp_millis(), *ts);
        assert_eq!(rec[4].parse::<i64>().expect("util"), *util);
        assert_eq!(&rec[5], "", "fan_pct is NULL on these GPUs");
        assert_eq!(rec[6].parse::<f64>().expect("power"), *power);
    }

    // Quoting: commas, quotes and newlines survive a CSV and a JSON round trip.
    let tricky = "SELECT 'a,\"b\"' AS t, 'x' || char(10) || 'y' AS nl, NULL AS n, 2.0 AS r";
    let o = query(&db, &[tricky, "--format", "csv"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut r = csv::Reader::from_reader(o.stdout.as_slice());
    let rec = r.records().next().expect("a row").expect("csv");
    assert_eq!(
        rec.iter().collect::<Vec<_>>(),
        ["a,\"b\"", "x\ny", "", "2.0"]
    );
    let o = query(&db, &[tricky, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(
        v,
        serde_json::json!([{"t": "a,\"b\"", "nl": "x\ny", "n": null, "r": 2.0}])
    );

    // JSON: an array of objects; integers stay integers, NULL is null.
    let o = query(&db, &[VIEW_SQL, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let rows = v.as_array().expect("array");
    assert_eq!(rows.len(), want.len());
    for (row, (ts, util, power)) in rows.iter().zip(&want) {
        assert!(row["ts_ms"].is_i64(), "{row}");
        assert_eq!(row["ts_ms"].as_i64(), Some(*ts));
        assert_eq!(row["util_gpu_pct"].as_i64(), Some(*util));
        assert!(row["fan_pct"].is_null(), "{row}");
        assert!(row["power_w"].is_f64(), "{row}");
        assert_eq!(row["power_w"].as_f64(), Some(*power));
        assert!(row["gpu_uuid"].as_str().expect("uuid").starts_with("GPU-"));
    }
    let o = query(&db, &["SELECT 1 AS x WHERE 0", "--format", "json"]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("JSON"),
        serde_json::json!([])
    );

    // Table: aligned (the numeric last column right-aligned: every line equally long),
    // NULL shown, a row count.
    let o = query(&db, &[VIEW_SQL]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2 + want.len() + 1, "{out}");
    assert!(lines[0].starts_with("        ts_ms  time_utc"), "{out}");
    let width = lines[0].len();
    assert!(
        lines[1..=want.len() + 1].iter().all(|l| l.len() == width),
        "{out}"
    );
    assert!(lines[2].contains("  NULL  "), "{out}");
    assert_eq!(lines.last(), Some(&"(6 rows)"));
}

#[test]
fn writes_query_only_off_and_attach_fail_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled_db(dir.path());
    let before = file_hash(&db);
    let samples = count(&db, "SELECT count(*) FROM samples");
    let other = dir.path().join("other.db");
    let copy = dir.path().join("copy.db");
    let attach = format!("ATTACH DATABASE '{}' AS o", other.display());
    let vacuum = format!("VACUUM INTO '{}'", copy.display());
    let cases: [(&str, &str); 11] = [
        ("DELETE FROM samples", "read-only"),
        ("INSERT INTO hosts(name) VALUES ('evil')", "read-only"),
        ("UPDATE gpus SET name = 'x'", "read-only"),
        ("DROP VIEW gpu_samples", "read-only"),
        // The pragma is refused before SQLite prepares it (the prepare would apply it).
        (
            "PRAGMA query_only=0; DELETE FROM samples",
            "PRAGMA query_only with a value would change the connection",
        ),
        (
            "PRAGMA query_only=0; INSERT INTO hosts(name) VALUES ('evil');",
            "read-only",
        ),
        ("SELECT 1; SELECT 2", "several SQL statements"),
        (&attach, "ATTACH is not allowed"),
        (
            "SELECT load_extension('/tmp/evil.so')",
            "load_extension is not allowed",
        ),
        (
            "SELECT load_extension('/tmp/evil.so', 'init')",
            "load_extension is not allowed",
        ),
        (&vacuum, "read-only"),
    ];
    for (sql, want) in cases {
        let o = query(&db, &[sql]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{sql}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{sql}: one line wanted: {err}");
        assert!(lines[0].starts_with("error: "), "{sql}: {err}");
        assert!(lines[0].contains(want), "{sql}: {err}");
        assert!(o.stdout.is_empty(), "{sql}");
    }
    // Pragmas with a value are refused (SQLite calls them read-only).
    for sql in [
        "PRAGMA query_only=0",
        "pragma query_only(false)",
        "PRAGMA writable_schema = 1",
    ] {
        let o = query(&db, &[sql]);
        assert_eq!(o.status.code(), Some(2), "{sql}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("with a value would change the connection"),
            "{sql}: {}",
            stderr(&o)
        );
    }
    let o = query(&db, &["PRAGMA table_info(samples)"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for sql in [
        "VACUUM",
        "PRAGMA user_version=99",
        "PRAGMA journal_mode=DELETE",
        "ANALYZE",
    ] {
        let o = query(&db, &[sql]);
        assert_eq!(o.status.code(), Some(2), "{sql}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("gpuwatch query is read-only:"),
            "{sql}: {}",
            stderr(&o)
        );
    }
    assert!(!other.exists() && !copy.exists());
    assert_eq!(count(&db, "SELECT count(*) FROM samples"), samples);
    assert_eq!(
        count(&db, "SELECT count(*) FROM hosts WHERE name = 'evil'"),
        0
    );
    assert_eq!(file_hash(&db), before, "the database file changed");

    // A trailing semicolon (and comment) is one statement.
    let o = query(
        &db,
        &[
            "SELECT count(*) AS n FROM gpu_inventory; -- done",
            "--format",
            "csv",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("n\n{GPUS}\n"));
    // A leading comment is not taken for an option.
    let o = query(
        &db,
        &["-- how many GPUs?\nSELECT 1 AS one", "--format", "csv"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "one\n1\n");
}

#[test]
fn syntax_errors_show_sqlite_message_and_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled_db(dir.path());
    let o = query(&db, &["SELECT ts_ms,\nFROM gpu_samples"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("SQL:2:1: near \"FROM\": syntax error"),
        "{err}"
    );
    let o = query(&db, &["SELECT nope FROM gpu_samples"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no such column: nope"),
        "{}",
        stderr(&o)
    );
    let o = query(&db, &["  "]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("empty"), "{}", stderr(&o));
    let o = query(&dir.path().join("missing.db"), &["SELECT 1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
}

const ENDLESS: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
     WHERE x < 1000000000) SELECT count(*) FROM c";

#[test]
fn a_long_query_is_interrupted_by_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled_db(dir.path());
    let t = Instant::now();
    let o = query(&db, &[ENDLESS, "--timeout", "500ms"]);
    let took = t.elapsed();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(took >= Duration::from_millis(500), "took {took:?}");
    let err = stderr(&o);
    assert!(err.contains("interrupted after 500ms"), "{err}");
    assert!(err.contains("--timeout"), "{err}");
}

#[test]
fn ctrl_c_interrupts_the_statement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled_db(dir.path());
    let child = gpuwatch()
        .args(["query", ENDLESS, "--timeout", "0", "--db"])
        .arg(&db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(700));
    let t = Instant::now();
    let pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let o = child.wait_with_output().expect("wait");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("interrupted by Ctrl-C"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn queries_work_while_another_connection_keeps_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled_db(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut st = store::open(&db, &StoreConfig::new("node-1")).expect("open");
            let mut tg = TickGen::new(GPUS, 1);
            let mut ts = T0 + TICKS * 1000;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                st.write_tick(&tg.tick(ts)).expect("write tick");
                ts += 1000;
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        })
    };
    let mut last = 0;
    for _ in 0..8 {
        let o = query(
            &db,
            &["SELECT count(*) AS n FROM gpu_samples", "--format", "json"],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        let n = v[0]["n"].as_i64().expect("n");
        assert!(n >= last && n >= TICKS * GPUS as i64, "{n} after {last}");
        last = n;
    }
    gpuwatch::clock::request_stop(&stop);
    let written = writer.join().expect("writer");
    assert!(written > 0);
    assert!(
        last > TICKS * GPUS as i64,
        "the queries saw the writer's ticks"
    );
}

fn export(db: &Path, args: &[&str]) -> Output {
    gpuwatch()
        .arg("export")
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("run gpuwatch export")
}

#[test]
fn export_csv_and_jsonl_round_trip_the_sample_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled_db(dir.path());
    let from = T0 + 10_000;
    let (from_s, to_s) = (
        (from / 1000).to_string(),
        "2025-06-15T15:07:30Z".to_string(),
    );
    let to = chrono::DateTime::parse_from_rfc3339(&to_s)
        .expect("time")
        .timestamp_millis();
    assert!(to > from && to < T0 + TICKS * 1000);
    let want = count(
        &db,
        &format!("SELECT count(*) FROM gpu_samples WHERE ts_ms >= {from} AND ts_ms < {to}"),
    );
    assert_eq!(want, (to - from) / 1000 * GPUS as i64);
    let columns: Vec<String> = {
        let c = store::open_read_only(&db).expect("ro");
        let s = c.prepare("SELECT * FROM gpu_samples").expect("prepare");
        s.column_names().map(str::to_string).collect()
    };

    // CSV to stdout: header = the view's columns, rows in time order.
    let o = export(&db, &["--from", &from_s, "--to", &to_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut r = csv::Reader::from_reader(o.stdout.as_slice());
    let header: Vec<String> = r.headers().expect("h").iter().map(str::to_string).collect();
    assert_eq!(header, columns);
    let recs: Vec<csv::StringRecord> = r.records().collect::<Result<_, _>>().expect("csv");
    assert_eq!(recs.len() as i64, want);
    let ts: Vec<i64> = recs.iter().map(|r| r[0].parse().expect("ts")).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "time order");
    assert_eq!((ts[0], *ts.last().expect("last")), (from, to - 1000));

    // JSON lines into a file, one GPU by uuid.
    let uuid = TickGen::new(GPUS, 1).uuid(1);
    let out = dir.path().join("gpu1.jsonl");
    let o = gpuwatch()
        .args(["export", "--from", &from_s, "--to", &to_s, "--gpu", &uuid])
        .args(["--format", "jsonl", "-o"])
        .arg(&out)
        .arg("--db")
        .arg(&db)
        .output()
        .expect("export");
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).expect("output file");
    let objs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(objs.len() as i64, want / GPUS as i64);
    assert!(objs.iter().all(|o| o["gpu_uuid"] == uuid.as_str()));
    assert!(
        objs.iter()
            .all(|o| o["ts_ms"].is_i64() && o["fan_pct"].is_null())
    );

    // The same GPU by index, --from only (--to defaults to now): the rest of the ticks.
    let o = export(&db, &["--from", &from_s, "--gpu", "1", "--format", "jsonl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count() as i64, TICKS - 10);

    // An unknown GPU is a usage error naming the known ones.
    let o = export(&db, &["--from", &from_s, "--gpu", "7"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no GPU with index 7"), "{}", stderr(&o));
    assert!(stderr(&o).contains(&uuid), "{}", stderr(&o));
}
