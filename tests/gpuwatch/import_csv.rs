//! `gpuwatch import csv --map`: a log written by someone's own script, read through a column
//! map with the nvidia-smi importer's timestamp and unit parser: exact rows and converted
//! values, unmapped columns reported, a re-run adds nothing, bad maps and files of another
//! format exit non-zero with one line and import nothing.

use std::fmt::Write as _;

use crate::common::gpuwatch_run as gpuwatch;
use crate::training_support::count;

const MAP: &str = "timestamp=time_ms:ms,index=gpu,utilization.gpu=busy:ratio,memory.used=mem_gb:GiB,power.draw=watts,temperature.gpu=temp";

#[test]
fn a_mapped_csv_lands_in_the_fields_units() {
    let dir = tempfile::tempdir().expect("tmp");
    let t0: i64 = 1_764_979_200_000;
    let mut csv = String::from("time_ms,gpu,busy,mem_gb,watts,temp,run_name\n");
    for i in 0..120 {
        for g in 0..4 {
            // GPU 3 held idle: 0 % with 20 GiB; GPU 2's power not logged at first.
            let busy = if g == 3 { 0.0 } else { 0.95 };
            let watts = if g == 2 && i < 10 {
                String::new()
            } else {
                "612.5".into()
            };
            let _ = writeln!(
                csv,
                "{},{g},{busy},{},{watts},{},exp-7",
                t0 + i * 15_000,
                if g == 3 { 20.0 } else { 61.25 },
                60 + g
            );
        }
    }
    let file = dir.path().join("trainer-3.csv");
    std::fs::write(&file, &csv).expect("write");
    let f = file.to_str().expect("utf-8");
    let db = dir.path().join("c.db");
    let db = db.to_str().expect("utf-8");
    let (code, out, err) = gpuwatch(&["import", "csv", "--map", MAP, "--db", db, f]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("480 rows -> host trainer-3"), "{out}");
    assert!(
        out.contains("ignored 1 fields gpuwatch does not store: run_name"),
        "{out}"
    );
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), 480);
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE util_gpu_pct = 95 AND mem_used_mib = 62720 AND temp_c BETWEEN 60 AND 62"
        ),
        360
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE power_w IS NULL"
        ),
        10,
        "an empty cell is unknown, not 0"
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM gpu_samples WHERE power_w = 612.5"
        ),
        470
    );
    assert_eq!(count(&conn, "SELECT min(ts_ms) FROM gpu_samples"), t0);
    drop(conn);

    // A re-run writes the same rows again, nothing twice.
    let (code, out, err) = gpuwatch(&["import", "csv", "--map", MAP, "--db", db, f]);
    assert_eq!(code, 0, "{out}{err}");
    let conn = rusqlite::Connection::open(db).expect("db");
    assert_eq!(count(&conn, "SELECT count(*) FROM gpu_samples"), 480);
    drop(conn);

    // ISO times in the same file shape: the same parser as import nvidia-smi.
    let iso = "when,gpu,util\n2025-12-06T00:00:00Z,0,50\n2025-12-06T00:00:15Z,0,51\n";
    let iso_file = dir.path().join("iso.csv");
    std::fs::write(&iso_file, iso).expect("write");
    let other = dir.path().join("o.db");
    let other = other.to_str().expect("utf-8");
    let (code, out, err) = gpuwatch(&[
        "import",
        "csv",
        "--map",
        "timestamp=when,index=gpu,utilization.gpu=util",
        "--db",
        other,
        iso_file.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("imported 2 samples"), "{out}");
}

#[test]
fn bad_maps_and_other_formats_say_so_and_import_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("log.csv");
    std::fs::write(&file, "ts,gpu,util\n1764979200,0,50\n").expect("write");
    let f = file.to_str().expect("utf-8");
    let db = dir.path().join("x.db");
    let db = db.to_str().expect("utf-8");
    // A unit the field cannot have: a usage error naming the units it can.
    let (code, _, err) = gpuwatch(&[
        "import",
        "csv",
        "--map",
        "timestamp=ts,utilization.gpu=util:GiB",
        "--db",
        db,
        f,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("%, ratio"), "{err}");
    // A column the header lacks: the file and its columns named.
    let (code, _, err) = gpuwatch(&[
        "import",
        "csv",
        "--map",
        "timestamp=ts,utilization.gpu=busy",
        "--db",
        db,
        f,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("log.csv:1: header: no column `busy`"), "{err}");
    assert!(err.contains("ts, gpu, util"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A file of another format (nvidia-smi -q XML).
    let xml = dir.path().join("q.xml");
    std::fs::write(
        &xml,
        "<?xml version=\"1.0\"?>\n<nvidia_smi_log>\n</nvidia_smi_log>\n",
    )
    .expect("write");
    let (code, _, err) = gpuwatch(&[
        "import",
        "csv",
        "--map",
        "timestamp=ts,utilization.gpu=util",
        "--db",
        db,
        xml.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 1, "{err}");
    // A header and no rows: nothing useful done.
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "ts,gpu,util\n").expect("write");
    let (code, _, err) = gpuwatch(&[
        "import",
        "csv",
        "--map",
        "timestamp=ts,index=gpu,utilization.gpu=util",
        "--db",
        db,
        empty.to_str().expect("utf-8"),
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(
        !std::path::Path::new(db).exists(),
        "no database left behind"
    );
}
