//! `gpuwatch import nvidia-smi` through the real binary: headers with units, noheader +
//! nounits logs with --columns, older aliases, bracketed values stored as NULL, --tz and the
//! local zone, masked uuids identified by host + index, compute-apps logs, bad lines skipped
//! or failing the whole import under --strict, the real captures in ../shared/data, and a
//! replay of an imported log that makes the default `gpu_idle` rule fire.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rusqlite::Connection;

const T0: i64 = 1_714_564_800_000; // 2024-05-01T12:00:00Z
const MIB: i64 = 1_048_576;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/import")
        .join(name)
}

fn gpuwatch(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.args(args).env("RUST_LOG", "error").env_remove("CI");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("run gpuwatch")
}

fn import(db: &Path, extra: &[&str], files: &[PathBuf]) -> Output {
    let mut args = vec!["import", "nvidia-smi", "--db", db.to_str().unwrap()];
    args.extend_from_slice(extra);
    let files: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    args.extend(files);
    gpuwatch(&args, &[])
}

fn ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "gpuwatch failed: {}\nstdout: {out}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn db(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

fn one<T: rusqlite::types::FromSql>(c: &Connection, sql: &str) -> T {
    c.query_row(sql, [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[test]
fn a_header_with_units_is_converted_to_the_store_units_and_rolled_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let out = ok(&import(&path, &["--tz", "UTC"], &[fixture("units.csv")]));
    assert!(out.contains("imported 5 samples"), "{out}");
    assert!(
        out.contains("host units"),
        "the default host is the file stem: {out}"
    );
    assert!(
        out.contains("ignored 1 fields gpuwatch does not store: encoder.stats.sessioncount"),
        "{out}"
    );
    let c = db(&path);
    let (util, mem, power, limit, clock, temp, throttle): (i64, i64, i64, i64, i64, i64, i64) = c
        .query_row(
            "SELECT util_gpu_pct, mem_used_bytes, power_mw, power_limit_mw, clock_sm_mhz, temp_c,
               throttle_reasons FROM gpu_samples WHERE gpu_index = 0 AND ts_ms = ?1",
            [T0 + 1000],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        (util, mem, power, limit, clock, temp),
        (100, 40002 * MIB, 699_500, 700_000, 1755, 86)
    );
    assert_eq!(
        throttle, 0x40,
        "hw_thermal_slowdown Active sets its NVML bit"
    );
    // tlimit is the margin to T.Limit, the max operating temperature (70 + 17 = 87); on that
    // scale the slowdown threshold is 2 °C above it and the H100's shutdown 8 °C (the model
    // table, from the real captures).
    let t = |i: u32| -> (i64, i64, i64) {
        c.query_row(
            &format!(
                "SELECT temp_gpu_max_c, temp_slowdown_c, temp_shutdown_c FROM gpus WHERE gpu_index = {i}"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    };
    assert_eq!(t(0), (87, 89, 95));
    assert_eq!(t(1), (87, 89, 95));
    let pstate: i64 = one(
        &c,
        "SELECT pstate FROM samples s JOIN gpus g ON g.id = s.gpu_id WHERE g.gpu_index = 1 ORDER BY ts_ms DESC LIMIT 1",
    );
    assert_eq!(pstate, 8);
    let (name, bus, inv_limit): (String, String, i64) = c
        .query_row(
            "SELECT name, pci_bus_id, power_limit_mw FROM gpus WHERE uuid = 'GPU-5f1c2a9e-1b2c-4d5e-8f90-0123456789ab'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (name.as_str(), bus.as_str(), inv_limit),
        ("NVIDIA H100 80GB HBM3", "00000000:18:00.0", 700_000)
    );
    // Both minutes of both GPUs are rolled up, and the progress covers them.
    let rollups: i64 = one(&c, "SELECT count(*) FROM rollups_1m");
    assert_eq!(rollups, 3);
    let max_util: i64 = one(
        &c,
        &format!(
            "SELECT util_gpu_max FROM rollups_1m r JOIN gpus g ON g.id = r.gpu_id WHERE g.gpu_index = 0 AND r.ts_ms = {T0}"
        ),
    );
    assert_eq!(max_util, 100);
    let done: i64 = one(&c, "SELECT done_ms FROM rollup_state");
    assert!(done >= T0 + 120_000, "rollup progress {done}");
    let (first, last): (i64, i64) = c
        .query_row(
            "SELECT first_seen_ms, last_seen_ms FROM hosts WHERE name = 'units'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((first, last), (T0, T0 + 60_000));

    // Importing the same log again changes nothing.
    ok(&import(&path, &["--tz", "UTC"], &[fixture("units.csv")]));
    let n: i64 = one(&c, "SELECT count(*) FROM samples");
    assert_eq!(n, 5);
}

#[test]
fn a_noheader_nounits_log_is_read_with_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let cols = "timestamp,index,utilization.gpu,memory.used,temperature.gpu,power.draw,clocks.sm";
    let out = ok(&import(
        &path,
        &["--tz", "UTC", "--columns", cols, "--host", "node-3"],
        &[fixture("nounits.csv")],
    ));
    assert!(out.contains("imported 3 samples"), "{out}");
    let c = db(&path);
    let rows: Vec<(i64, i64, i64, Option<i64>, i64)> = c
        .prepare(
            "SELECT ts_ms, util_gpu_pct, mem_used_bytes, power_mw, clock_sm_mhz FROM gpu_samples
             WHERE host = 'node-3' ORDER BY ts_ms",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        vec![
            (T0, 55, 1024 * MIB, Some(300_500), 1410),
            (T0 + 1000, 56, 1025 * MIB, Some(301_250), 1410),
            (T0 + 2000, 57, 1026 * MIB, None, 1410),
        ]
    );
    // A file with a header is refused line by line under --columns (it says why).
    let o = import(
        &path,
        &["--tz", "UTC", "--columns", cols, "--strict"],
        &[fixture("units.csv")],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("units.csv:1:") && err.contains("drop --columns"),
        "{err}"
    );
}

#[test]
fn older_aliases_map_to_the_same_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let out = ok(&import(&path, &["--tz", "UTC"], &[fixture("aliases.csv")]));
    assert!(out.contains("imported 2 samples"), "{out}");
    // clocks.gr (graphics clock) and the lower-ranked power.draw.instant are not stored.
    assert!(
        out.contains("clocks.gr") && out.contains("power.draw.instant"),
        "{out}"
    );
    let c = db(&path);
    let rows: Vec<(i64, i64, i64, i64, i64, i64, i64)> = c
        .prepare(
            "SELECT clock_sm_mhz, clock_mem_mhz, power_mw, throttle_reasons, retired_pages,
               remap_pending, util_gpu_pct FROM gpu_samples ORDER BY ts_ms",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        vec![
            (1530, 877, 250_000, 0x40 | 0x4, 3, 0, 88),
            (1530, 877, 249_000, 0, 3, 1, 87)
        ]
    );
    let name: String = one(&c, "SELECT name FROM gpus");
    assert_eq!(name, "Tesla V100-SXM2-32GB");
}

#[test]
fn bracketed_values_are_null_not_zero_even_under_strict() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    ok(&import(
        &path,
        &["--tz", "UTC", "--strict"],
        &[fixture("bracketed.csv")],
    ));
    let c = db(&path);
    let cols = [
        "util_gpu_pct",
        "util_mem_pct",
        "mem_used_bytes",
        "temp_c",
        "fan_pct",
        "power_mw",
        "power_limit_mw",
        "clock_sm_mhz",
        "pstate",
        "throttle_reasons",
        "ecc_uncorrected",
        "remap_failure",
        "pcie_gen",
    ];
    for col in cols {
        let nulls: i64 = one(
            &c,
            &format!("SELECT count(*) FROM samples WHERE ts_ms = {T0} AND {col} IS NULL"),
        );
        assert_eq!(nulls, 1, "{col} of the bracketed row must be NULL");
        let zero: i64 = one(
            &c,
            &format!("SELECT {col} FROM samples WHERE ts_ms = {}", T0 + 1000),
        );
        assert_eq!(
            zero,
            if col == "pcie_gen" { 1 } else { 0 },
            "{col}: a real 0 stays 0"
        );
    }
    let tlimit: (Option<i64>, Option<i64>) = c
        .query_row(
            "SELECT temp_gpu_max_c, temp_slowdown_c FROM gpus",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        tlimit,
        (Some(0), Some(2)),
        "T.Limit = 0 °C + margin 0 from the second row only"
    );
}

fn tz_log(dir: &Path) -> PathBuf {
    let p = dir.join("tz.csv");
    std::fs::write(
        &p,
        "timestamp, utilization.gpu [%]\n2024/01/15 09:30:00.000, 5 %\n2024/07/15 09:30:00.000, 6 %\n",
    )
    .unwrap();
    p
}

fn times(path: &Path) -> Vec<i64> {
    db(path)
        .prepare("SELECT ts_ms FROM samples ORDER BY ts_ms")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn timestamps_are_read_in_the_tz_zone_or_the_local_zone() {
    let dir = tempfile::tempdir().unwrap();
    let log = tz_log(dir.path());
    let utc = dir.path().join("utc.db");
    ok(&import(&utc, &["--tz", "UTC"], std::slice::from_ref(&log)));
    let winter = 1_705_311_000_000; // 2024-01-15T09:30:00Z
    let summer = 1_721_035_800_000; // 2024-07-15T09:30:00Z
    assert_eq!(times(&utc), vec![winter, summer]);

    let ny = dir.path().join("ny.db");
    ok(&import(
        &ny,
        &["--tz", "America/New_York"],
        std::slice::from_ref(&log),
    ));
    let h = 3_600_000;
    assert_eq!(
        times(&ny),
        vec![winter + 5 * h, summer + 4 * h],
        "EST, then EDT"
    );

    // Without --tz: the importing machine's zone (TZ here).
    let local = dir.path().join("local.db");
    let o = gpuwatch(
        &[
            "import",
            "nvidia-smi",
            "--db",
            local.to_str().unwrap(),
            log.to_str().unwrap(),
        ],
        &[("TZ", "Asia/Tokyo")],
    );
    ok(&o);
    assert_eq!(times(&local), vec![winter - 9 * h, summer - 9 * h]);

    let bad = import(&dir.path().join("x.db"), &["--tz", "Mars/Olympus"], &[log]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown time zone `Mars/Olympus`"));
}

#[test]
fn masked_uuids_are_identified_by_host_and_index_and_apps_by_bus_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let out = ok(&import(
        &path,
        &["--tz", "UTC", "--host", "node-9"],
        &[fixture("masked.csv"), fixture("apps.csv")],
    ));
    assert!(
        out.contains("imported 4 samples and 3 process samples of 2 GPUs"),
        "{out}"
    );
    let c = db(&path);
    let gpus: Vec<(String, i64, i64)> = c
        .prepare(
            "SELECT g.uuid, g.gpu_index, (SELECT count(*) FROM samples s WHERE s.gpu_id = g.id)
             FROM gpus g ORDER BY g.gpu_index",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        gpus,
        vec![("index-0".to_string(), 0, 2), ("index-1".to_string(), 1, 2)]
    );
    // Process rows found their GPU by bus id (old 4-digit domain too); a comma in the
    // process name survives.
    let procs: Vec<(i64, String, i64, Option<i64>)> = c
        .prepare(
            "SELECT p.pid, p.name, g.gpu_index, ps.used_mem_bytes FROM process_samples ps
             JOIN processes p ON p.id = ps.process_id JOIN gpus g ON g.id = ps.gpu_id
             ORDER BY ps.ts_ms, p.pid",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let train = "python train.py --name a,b".to_string();
    // Process rows sit at their GPU's nearest sample time (12:00:00.500 → 12:00:00.000).
    let times: Vec<i64> = c
        .prepare("SELECT DISTINCT ts_ms FROM process_samples ORDER BY ts_ms")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(times, vec![T0, T0 + 1000]);
    assert_eq!(
        procs,
        vec![
            (777, "/usr/bin/python3".to_string(), 0, None),
            (4242, train.clone(), 1, Some(190 * MIB)),
            (4242, train, 1, Some(191 * MIB)),
        ]
    );
    // The same masked log under another host is other GPUs.
    ok(&import(
        &path,
        &["--tz", "UTC", "--host", "node-10"],
        &[fixture("masked.csv")],
    ));
    let n: i64 = one(&c, "SELECT count(*) FROM gpus");
    assert_eq!(n, 4);
}

#[test]
fn a_bad_line_is_skipped_with_its_line_number_or_fails_everything_under_strict() {
    let dir = tempfile::tempdir().unwrap();
    let strict_db = dir.path().join("strict.db");
    let o = import(
        &strict_db,
        &["--tz", "UTC", "--strict"],
        &[fixture("units.csv"), fixture("bad_line.csv")],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad_line.csv:3: utilization.gpu: `ten %` is not a number"),
        "{err}"
    );
    assert!(err.contains("nothing was imported"), "{err}");
    assert!(
        !strict_db.exists(),
        "a failed import into a new file leaves no file"
    );
    // Into an existing database: nothing of it either.
    drop(gpuwatch::store::open(&strict_db, &gpuwatch::store::StoreConfig::new("keep")).unwrap());
    let o = import(
        &strict_db,
        &["--tz", "UTC", "--strict"],
        &[fixture("units.csv"), fixture("bad_line.csv")],
    );
    assert_eq!(o.status.code(), Some(1));
    let c = db(&strict_db);
    let n: i64 = one(&c, "SELECT count(*) FROM samples");
    assert_eq!(n, 0, "nothing of units.csv either");
    let g: i64 = one(&c, "SELECT count(*) FROM gpus");
    assert_eq!(g, 0);
    let h: i64 = one(&c, "SELECT count(*) FROM hosts");
    assert_eq!(h, 1, "not even the host row (only the one that was there)");

    let lenient = dir.path().join("lenient.db");
    let o = import(&lenient, &["--tz", "UTC"], &[fixture("bad_line.csv")]);
    let out = ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad_line.csv:3:"), "{err}");
    assert!(
        err.contains("bad_line.csv:4: expected 5 fields as in the header, found 4"),
        "{err}"
    );
    assert!(out.contains("skipped lines: 2"), "{out}");
    let utils: Vec<i64> = db(&lenient)
        .prepare("SELECT util_gpu_pct FROM samples ORDER BY ts_ms")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(utils, vec![10, 13]);
}

/// The `--query-gpu` and `--query-compute-apps` CSV sections of a capture file.
fn capture_sections(text: &str) -> Vec<(bool, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let gpu = l.starts_with("# $ nvidia-smi --query-gpu=");
        if !gpu && !l.starts_with("# $ nvidia-smi --query-compute-apps=") {
            continue;
        }
        let mut csv = String::new();
        for l in lines
            .iter()
            .skip(i + 2)
            .take_while(|l| !l.trim().is_empty())
        {
            writeln!(csv, "{l}").unwrap();
        }
        out.push((gpu, csv));
    }
    out
}

#[test]
fn every_real_capture_imports() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/nvidia-smi-captures-multiformat");
    if !data.is_dir() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is missing (CI always has it)",
            data.display()
        );
        eprintln!("SKIPPED: {} is missing", data.display());
        return;
    }
    let mut captures: Vec<PathBuf> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    captures.sort();
    assert!(captures.len() >= 5, "{captures:?}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.db");
    for cap in &captures {
        let text = std::fs::read_to_string(cap).unwrap();
        let sections = capture_sections(&text);
        let gpu_rows: usize = sections
            .iter()
            .filter(|s| s.0)
            .map(|s| s.1.lines().count() - 1)
            .sum();
        let app_rows: usize = sections
            .iter()
            .filter(|s| !s.0)
            .map(|s| s.1.lines().count() - 1)
            .sum();
        assert!(
            gpu_rows >= 2,
            "{}: {gpu_rows} --query-gpu rows",
            cap.display()
        );
        let mut files = Vec::new();
        for (i, (gpu, csv)) in sections.iter().enumerate() {
            let f = dir
                .path()
                .join(format!("s{i}.{}.csv", if *gpu { "gpu" } else { "apps" }));
            std::fs::write(&f, csv).unwrap();
            files.push(f);
        }
        let host = cap.file_stem().unwrap().to_str().unwrap();
        let out = ok(&import(
            &path,
            &["--tz", "UTC", "--strict", "--host", host],
            &files,
        ));
        assert!(out.contains("skipped lines: 0"), "{out}");
        let c = db(&path);
        let samples: i64 = one(
            &c,
            &format!("SELECT count(*) FROM gpu_samples WHERE host = '{host}'"),
        );
        assert_eq!(samples as usize, gpu_rows, "{host}");
        let procs: i64 = one(
            &c,
            &format!(
                "SELECT count(*) FROM process_samples ps JOIN gpus g ON g.id = ps.gpu_id
                 JOIN hosts h ON h.id = g.host_id WHERE h.name = '{host}'"
            ),
        );
        assert_eq!(
            procs as usize, app_rows,
            "{host}: every process row found its GPU"
        );
        // The masked uuid became host + index; the load section is busier than the idle one.
        let (uuid, name): (String, String) = c
            .query_row(
                "SELECT g.uuid, g.name FROM gpus g JOIN hosts h ON h.id = g.host_id WHERE h.name = ?1",
                [host],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(uuid, "index-0");
        assert!(name.starts_with("NVIDIA"), "{name}");
        // The idle and the load sections differ (utilisation is [N/A] under MIG).
        let (lo, hi, total): (i64, i64, Option<i64>) = c
            .query_row(
                "SELECT min(power_mw), max(power_mw), max(mem_total_bytes) FROM gpu_samples WHERE host = ?1",
                [host],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert!(lo < hi, "{host}: idle {lo} mW vs load {hi} mW");
        assert!(total.unwrap_or(0) > 1 << 30, "{host}: memory.total");
        let rollups: i64 = one(
            &c,
            &format!(
                "SELECT count(*) FROM rollups_1m r JOIN gpus g ON g.id = r.gpu_id
                 JOIN hosts h ON h.id = g.host_id WHERE h.name = '{host}'"
            ),
        );
        assert!(rollups >= 1, "{host}: rollups");
    }
}

/// 40 minutes at 1 s of one GPU: 5 minutes busy, then 0 % utilisation while a process keeps
/// 30 GiB allocated; and the matching `--query-compute-apps` log, 150 ms after each poll
/// (without moving those rows to the sample times, the GPU would look like it held memory
/// with no process: `gpu_memory_orphaned`, which inhibits `gpu_idle`).
fn idle_logs(gpu: &Path, apps: &Path) {
    let uuid = "GPU-9d5a6e32-5f60-4182-ad34-456789abcdef";
    let mut s = String::from(
        "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n",
    );
    let mut a = String::from("timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n");
    let start = chrono::NaiveDate::from_ymd_opt(2024, 5, 1)
        .unwrap()
        .and_hms_opt(12, 0, 0)
        .unwrap();
    for i in 0..2400 {
        let t = (start + chrono::Duration::seconds(i)).format("%Y/%m/%d %H:%M:%S%.3f");
        let util = if i < 300 { 95 } else { 0 };
        writeln!(s, "{t}, 0, {uuid}, {util} %, 30720 MiB, 81559 MiB, 75.00 W").unwrap();
        // The compute-apps call of the same poll runs a little later.
        let ta = (start + chrono::Duration::milliseconds(i * 1000 + 150))
            .format("%Y/%m/%d %H:%M:%S%.3f");
        writeln!(a, "{ta}, {uuid}, 4242, python, 30200 MiB").unwrap();
    }
    std::fs::write(gpu, s).unwrap();
    std::fs::write(apps, a).unwrap();
}

#[test]
fn replay_over_an_imported_log_fires_gpu_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, apps) = (dir.path().join("gpu.csv"), dir.path().join("apps.csv"));
    idle_logs(&gpu, &apps);
    let path = dir.path().join("g.db");
    let out = ok(&import(
        &path,
        &["--tz", "UTC", "--host", "idle-node"],
        &[gpu, apps],
    ));
    assert!(
        out.contains("imported 2400 samples and 2400 process samples"),
        "{out}"
    );
    let rollups: i64 = one(&db(&path), "SELECT count(*) FROM rollups_1m");
    assert_eq!(rollups, 40);
    let o = gpuwatch(
        &[
            "replay",
            "--format",
            "jsonl",
            "--db",
            path.to_str().unwrap(),
        ],
        &[],
    );
    let out = ok(&o);
    let fired: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["rule"] == "gpu_idle" && v["state"] == "firing")
        .collect();
    assert_eq!(fired.len(), 1, "{out}");
    assert_eq!(fired[0]["host"], "idle-node");
    // Idle from 12:05; the 10-minute window plus `for = 15m` make it fire around 12:29.
    let at = fired[0]["at"].as_str().unwrap();
    assert!(
        at.starts_with("2024-05-01T12:2") || at.starts_with("2024-05-01T12:3"),
        "{at}"
    );

    // `--save`: what the replay found becomes alert history, marked replayed, which
    // `alerts`, `incident` and `report` show on the imported log; a second save replaces it.
    let dbarg = path.to_str().unwrap();
    let alerts = |want: usize| {
        let v: serde_json::Value = serde_json::from_str(&ok(&gpuwatch(
            &["alerts", "--format", "json", "--db", dbarg],
            &[],
        )))
        .unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(want), "{v}");
        v
    };
    let none = gpuwatch(&["alerts", "--format", "json", "--db", dbarg], &[]);
    assert_eq!(ok(&none).trim(), "[]", "no alerts before --save");
    for round in 0..2 {
        let o = gpuwatch(&["replay", "--save", "--db", dbarg], &[]);
        ok(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("saved 1 replayed alert(s)"), "{err}");
        assert_eq!(
            err.contains("replacing 1 from an earlier replay"),
            round == 1,
            "{err}"
        );
        alerts(1);
    }
    let v = alerts(1);
    let a = &v[0];
    assert_eq!(a["rule"], "gpu_idle");
    assert_eq!(a["replayed"], true);
    assert_eq!(a["host"], "idle-node");
    assert_eq!(
        a["fired"].as_str().map(|t| &t[..19]),
        Some(&at[..19]),
        "the episode is the transition replay printed: {a}"
    );
    let id = a["alert_id"].to_string();
    let text = ok(&gpuwatch(&["incident", &id, "--db", dbarg], &[]));
    assert!(text.contains("gpu_idle (warning, replayed)"), "{text}");
    let report = path.with_extension("html");
    let o = gpuwatch(
        &[
            "report",
            "--alert",
            &id,
            "-o",
            report.to_str().unwrap(),
            "--db",
            dbarg,
        ],
        &[],
    );
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("1 alert(s)"));
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("(replayed)"), "the report marks it");
    // Never live: nothing on a daemon's /metrics or in `status`'s alerts.
    let live: i64 = one(
        &db(&path),
        "SELECT count(*) FROM alert_state WHERE state IN ('pending', 'firing')",
    );
    assert_eq!(live, 0);
}

#[test]
fn a_header_that_cannot_be_imported_or_a_missing_header_fails_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let accounted = dir.path().join("accounted.csv");
    std::fs::write(
        &accounted,
        "timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid, gpu_utilization [%], mem_utilization [%], max_memory_usage [MiB], time [ms]\n\
         2026/07/03 08:33:38.975, NVIDIA L40S, 00000000:01:00.0, 0, GPU-00000000-0000-0000-0000-000000000000, 15727, 71 %, 8 %, 0 MiB, 5270 ms\n",
    )
    .unwrap();
    let o = import(&path, &["--tz", "UTC"], &[fixture("units.csv"), accounted]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("accounted.csv:1: header:") && err.contains("--query-accounted-apps"),
        "{err}"
    );
    assert!(
        !path.exists(),
        "units.csv was not imported either: the new file is gone"
    );

    let o = import(&path, &["--tz", "UTC"], &[fixture("nounits.csv")]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("nounits.csv:1:") && err.contains("--columns"),
        "{err}"
    );
}

#[test]
fn staging_does_not_hold_the_write_lock_and_dropping_it_imports_nothing() {
    use gpuwatch::model::{GpuSample, SampleStatus, TickBatch};
    use gpuwatch::store::import::{ImportGpu, ImportPlan};
    use gpuwatch::store::{self, StoreConfig};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let importer = store::open(&path, &StoreConfig::new("imported")).unwrap();
    let mut daemon = store::open(&path, &StoreConfig::new("live")).unwrap();
    let sample = |ts| GpuSample {
        util_gpu_pct: Some(1),
        ..GpuSample::empty(ts, "GPU-live", SampleStatus::Ok)
    };
    let plan = ImportPlan {
        hosts: vec!["imported".into()],
        gpus: vec![ImportGpu {
            host: 0,
            inventory: gpuwatch::model::GpuInventory {
                uuid: "GPU-imp".into(),
                ..Default::default()
            },
            first_ms: T0,
            last_ms: T0,
            last_sample_ms: Some(T0),
            ..Default::default()
        }],
        ..Default::default()
    };
    {
        let mut staging = importer.stage_import().unwrap();
        staging.sample(0, &sample(T0)).unwrap();
        // The daemon's writer commits while the import is staged.
        let live = TickBatch {
            ts_ms: T0 + 5,
            samples: vec![sample(T0 + 5)],
            ..TickBatch::default()
        };
        daemon.write_tick(&live).unwrap();
        // Dropped without publishing: nothing of the import is visible.
    }
    let c = db(&path);
    let n: i64 = one(&c, "SELECT count(*) FROM samples");
    assert_eq!(n, 1, "only the daemon's sample");
    let mut staging = importer.stage_import().unwrap();
    staging.sample(0, &sample(T0)).unwrap();
    daemon
        .write_tick(&TickBatch {
            ts_ms: T0 + 6,
            samples: vec![sample(T0 + 6)],
            ..TickBatch::default()
        })
        .unwrap();
    // No minutes rolled up while parsing: the host's minutes are recomputed after.
    let published = staging
        .publish(&plan, &gpuwatch::store::import::MinuteRollups::default())
        .unwrap();
    assert_eq!(published.rollups, vec![None]);
    assert_eq!(published.samples, 1);
    let n: i64 = one(&c, "SELECT count(*) FROM samples");
    assert_eq!(n, 3);
}

#[test]
fn a_compute_apps_section_without_timestamps_takes_the_time_of_the_rows_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let log = dir.path().join("loop.csv");
    // What `while true; do nvidia-smi --query-gpu=...; nvidia-smi --query-compute-apps=...;
    // sleep 1; done >> loop.csv` writes with an older driver: sections appended, apps
    // without a timestamp column, CRLF line ends.
    let mut s = String::new();
    for (i, t) in ["12:00:00.000", "12:00:01.000"].iter().enumerate() {
        s.push_str("timestamp, index, uuid, utilization.gpu [%]\r\n");
        s.push_str(&format!(
            "2024/05/01 {t}, 0, GPU-1e2f3a4b-5c6d-4e7f-8091-a2b3c4d5e6f7, {} %\r\n",
            50 + i
        ));
        s.push_str("pid, process_name, used_gpu_memory [MiB]\r\n");
        s.push_str(&format!("31337, trainer, {} MiB\r\n", 1000 + i));
    }
    std::fs::write(&log, s).unwrap();
    let out = ok(&import(&path, &["--tz", "UTC", "--strict"], &[log]));
    assert!(
        out.contains("imported 2 samples and 2 process samples"),
        "{out}"
    );
    let rows: Vec<(i64, i64)> = db(&path)
        .prepare("SELECT ts_ms, used_mem_bytes FROM process_samples ORDER BY ts_ms")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows, vec![(T0, 1000 * MIB), (T0 + 1000, 1001 * MIB)]);

    // Without any timestamped row before them, such rows are bad lines.
    let apps_only = dir.path().join("apps-only.csv");
    std::fs::write(
        &apps_only,
        "pid, process_name, used_gpu_memory [MiB]\n1, x, 5 MiB\n",
    )
    .unwrap();
    let o = import(
        &dir.path().join("h.db"),
        &["--tz", "UTC", "--strict"],
        &[apps_only],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("apps-only.csv:2: no timestamp"), "{err}");
}

/// A GPU log without a uuid column keys its GPUs by index; process rows that name a real
/// uuid must find them by bus id instead of creating a second GPU (regression), and rows that
/// cannot be tied to one are reported, not imported. Samples covered by a compute-apps log
/// get process counts (0 where no process row lands); without one they stay unknown.
#[test]
fn apps_rows_with_real_uuids_find_index_keyed_gpus_by_bus_id() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("gpu.csv");
    let apps = dir.path().join("apps.csv");
    let lonely = dir.path().join("lonely.csv");
    std::fs::write(
        &gpu,
        "timestamp, index, name, pci.bus_id, utilization.gpu [%], memory.used [MiB]\n\
         2024/05/01 12:00:00.000, 0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 90 %, 30000 MiB\n\
         2024/05/01 12:00:00.000, 1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0 %, 0 MiB\n\
         2024/05/01 12:00:01.000, 0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 91 %, 30001 MiB\n\
         2024/05/01 12:00:01.000, 1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0 %, 0 MiB\n",
    )
    .unwrap();
    std::fs::write(
        &apps,
        "timestamp, gpu_uuid, gpu_bus_id, pid, process_name, used_gpu_memory [MiB]\n\
         2024/05/01 12:00:00.200, GPU-5f1c2a9e-1b2c-4d5e-8f90-0123456789ab, 00000000:18:00.0, 4242, python, 29500 MiB\n\
         2024/05/01 12:00:01.200, GPU-5f1c2a9e-1b2c-4d5e-8f90-0123456789ab, 00000000:18:00.0, 4242, python, 29501 MiB\n",
    )
    .unwrap();
    std::fs::write(
        &lonely,
        "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n\
         2024/05/01 12:00:00.200, GPU-6a2d3b0f-2c3d-4e5f-9a01-123456789abc, 777, python, 100 MiB\n",
    )
    .unwrap();
    let path = dir.path().join("g.db");
    let o = import(
        &path,
        &["--tz", "UTC", "--host", "n1"],
        &[gpu.clone(), apps, lonely],
    );
    let out = ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.contains("of 2 GPUs"), "no phantom GPU: {out}");
    assert!(
        err.contains("skipped 1 process rows") && err.contains("cannot tell which GPU"),
        "the row naming an unknown uuid without a bus id is reported: {err}"
    );
    let c = db(&path);
    let counts: Vec<(i64, i64, Option<i64>)> = c
        .prepare(
            "SELECT ts_ms, gpu_index, process_count FROM gpu_samples ORDER BY ts_ms, gpu_index",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        counts,
        vec![
            (T0, 0, Some(1)),
            (T0, 1, Some(0)),
            (T0 + 1000, 0, Some(1)),
            (T0 + 1000, 1, Some(0)),
        ]
    );
    // The GPU log alone, into another host: processes not observed, counts unknown.
    let path2 = dir.path().join("g2.db");
    ok(&import(&path2, &["--tz", "UTC", "--host", "n2"], &[gpu]));
    let unknown: i64 = one(
        &db(&path2),
        "SELECT count(*) FROM samples WHERE process_count IS NULL",
    );
    assert_eq!(unknown, 4);
}

/// What `date +%s`-style loggers write: epoch seconds (or milliseconds) and a header without
/// units. Every row is imported, at its own time, whatever `--tz` says (an epoch is UTC).
#[test]
fn epoch_timestamps_and_headers_without_units_are_imported_row_for_row() {
    let dir = tempfile::tempdir().unwrap();
    let secs = dir.path().join("epoch.csv");
    std::fs::write(
        &secs,
        "timestamp,memory.used,memory.total,utilization.gpu\n\
         1764189075,10546, 24576, 93\n\
         1764189076,10550, 24576, 95\n\
         1764189077,10560, 24576, 91\n",
    )
    .unwrap();
    let path = dir.path().join("g.db");
    let out = ok(&import(
        &path,
        &["--tz", "Asia/Tokyo"],
        std::slice::from_ref(&secs),
    ));
    assert!(out.contains("3 rows"), "{out}");
    let c = db(&path);
    let rows: Vec<(i64, i64, i64, i64)> = c
        .prepare("SELECT ts_ms, mem_used_bytes, mem_total_bytes, util_gpu_pct FROM samples ORDER BY ts_ms")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [
            (1_764_189_075_000, 10546 * MIB, 24576 * MIB, 93),
            (1_764_189_076_000, 10550 * MIB, 24576 * MIB, 95),
            (1_764_189_077_000, 10560 * MIB, 24576 * MIB, 91),
        ]
    );

    // Milliseconds, by size or by the header's unit.
    let ms = dir.path().join("ms.csv");
    std::fs::write(
        &ms,
        "timestamp [ms],utilization.gpu [%]\n1764189075250, 7 %\n1764189076750, 8 %\n",
    )
    .unwrap();
    let path = dir.path().join("ms.db");
    ok(&import(&path, &[], std::slice::from_ref(&ms)));
    assert_eq!(times(&path), [1_764_189_075_250, 1_764_189_076_750]);
}

/// A file none of whose rows can be read exits non-zero with a count and the first reasons,
/// not one warning per line and exit 0, and creates nothing.
#[test]
fn a_file_with_no_importable_row_fails_with_its_first_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.csv");
    let mut text = String::from("timestamp,utilization.gpu\n");
    for i in 0..50 {
        writeln!(text, "day {i},5").unwrap();
    }
    std::fs::write(&junk, text).unwrap();
    let path = dir.path().join("g.db");
    let o = import(&path, &[], std::slice::from_ref(&junk));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(
            "junk.csv: no row could be imported (50 line(s) skipped; nothing was imported)"
        ) && err.contains("line 2: timestamp: `day 0` is not a timestamp")
            && err.contains("Unix epoch seconds"),
        "{err}"
    );
    assert!(!err.contains("warning: skipped"), "{err}");
    assert!(!path.exists(), "nothing was imported: no database was made");
}
