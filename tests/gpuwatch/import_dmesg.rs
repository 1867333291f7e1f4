//! `gpuwatch import dmesg` through the real binary: the real kernel logs in ../shared/data
//! (read by path) import exactly — XID rows per number and PCI address, their times, the GPU
//! named by `NVRM: GPU at` and no invented one —; the other shapes (journalctl short-iso,
//! syslog with the year inferred, raw seconds with --boot-time, a mixed file); GPUs joined
//! from the stored inventory before and after the import; a re-import and NVML's report of
//! the same XID stored once; broken files fail as `file:line:col` and leave the database as
//! it was.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuwatch::model::{Event, EventSource, GpuInventory, TickBatch};
use gpuwatch::store::{self, StoreConfig};
use rusqlite::Connection;

const REAL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/gpud-xid-dmesg-and-smi-q"
);

fn real(name: &str) -> PathBuf {
    Path::new(REAL).join(name)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/dmesg")
        .join(name)
}

fn import(db: &Path, extra: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["import", "dmesg", "--db"])
        .arg(db)
        .args(extra)
        .arg(file)
        .env("RUST_LOG", "error")
        .output()
        .expect("run gpuwatch")
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

fn ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
}

/// One group per (code, address, uuid, source): its events (the runs' counts), first and
/// last time.
type Group = (i64, String, Option<String>, String, i64, i64, i64);

fn groups(db: &Path) -> Vec<Group> {
    let c = Connection::open(db).unwrap();
    let mut s = c
        .prepare(
            "SELECT code, pci_bus_id, gpu_uuid, source, sum(count), min(ts_ms), max(last_ms)
             FROM gpu_events WHERE kind = 'xid' GROUP BY 1, 2, 3, 4 ORDER BY 1, 2",
        )
        .unwrap();
    s.query_map([], |r| {
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
    .collect()
}

fn g(code: i64, pci: &str, uuid: Option<&str>, n: i64, first: &str, last: &str) -> Group {
    (
        code,
        pci.into(),
        uuid.map(str::to_string),
        "import".into(),
        n,
        ms(first),
        ms(last),
    )
}

/// XID lines of a file counted independently of the importer.
fn xid_lines(path: &Path) -> i64 {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| l.contains("NVRM: Xid (PCI:"))
        .count() as i64
}

const GPU4: &str = "GPU-509665ad-b600-ac93-3616-d754b23d636d";

#[test]
fn the_real_iso_log_imports_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let file = real("dmesg-time-format-iso.log");
    let out = ok(&import(&db, &["--host", "n1"], &file));
    assert!(
        out.contains("11 XIDs (dmesg --time-format iso: 11), 30 other lines skipped"),
        "{out}"
    );
    assert!(
        out.contains("PCI 0000:19:00: no GPU known at this address"),
        "{out}"
    );
    let rows = groups(&db);
    assert_eq!(
        rows,
        [
            g(
                48,
                "0000:19:00",
                None,
                1,
                "2024-11-15T12:02:03.470Z",
                "2024-11-15T12:02:03.470Z"
            ),
            g(
                63,
                "0000:19:00",
                None,
                1,
                "2024-11-15T12:02:03.498Z",
                "2024-11-15T12:02:03.498Z"
            ),
            g(
                94,
                "0000:19:00",
                None,
                9,
                "2024-11-15T12:02:03.506Z",
                "2024-11-15T12:02:03.638Z"
            ),
        ]
    );
    assert_eq!(rows.iter().map(|r| r.4).sum::<i64>(), xid_lines(&file));
    // A GPU known only by its address is not invented: no GPU row at all.
    let c = Connection::open(&db).unwrap();
    let gpus: i64 = c
        .query_row("SELECT count(*) FROM gpus", [], |r| r.get(0))
        .unwrap();
    assert_eq!(gpus, 0);
    let (message, kernel): (String, i64) = c
        .query_row(
            "SELECT message, kernel_ms FROM gpu_events WHERE code = 94 ORDER BY ts_ms LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        message,
        "Xid (PCI:0000:19:00): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No"
    );
    assert_eq!(kernel, ms("2024-11-15T12:02:03.506Z"));

    // Importing it again stores nothing new, and says so with a failing exit.
    let again = import(&db, &["--host", "n1"], &file);
    let out = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(1), "{out}");
    assert!(
        out.contains("0 new, 0 merged with NVML's report of the same XID, 11 already stored"),
        "{out}"
    );
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("nothing new was imported"),
        "{again:?}"
    );
    assert_eq!(groups(&db), rows);
}

#[test]
fn the_real_dmesg_t_log_imports_exactly_with_the_gpu_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let file = real("dmesg-with-xid-119.log");
    let out = ok(&import(&db, &["--host", "xe9680", "--tz", "UTC"], &file));
    assert!(
        out.contains("5 XIDs (dmesg -T: 5), 38 other lines skipped"),
        "{out}"
    );
    assert!(out.contains(&format!("PCI 0000:9b:00: {GPU4}")), "{out}");
    assert!(out.contains("XID 119 x5: GSP RPC timeout"), "{out}");
    assert_eq!(
        groups(&db),
        [g(
            119,
            "0000:9b:00",
            Some(GPU4),
            5,
            "2025-02-23T16:24:18Z",
            "2025-02-23T16:30:13Z"
        )]
    );
    assert_eq!(xid_lines(&file), 5);
    // The same wall times in another zone.
    let db2 = dir.path().join("berlin.db");
    ok(&import(
        &db2,
        &["--host", "xe9680", "--tz", "Europe/Berlin"],
        &file,
    ));
    assert_eq!(
        groups(&db2),
        [g(
            119,
            "0000:9b:00",
            Some(GPU4),
            5,
            "2025-02-23T15:24:18Z",
            "2025-02-23T15:30:13Z"
        )]
    );
}

#[test]
fn the_real_decode_iso_log_imports_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let file = real("dmesg.decode.iso.log.0");
    let out = ok(&import(&db, &["--host", "n2"], &file));
    assert!(
        out.contains("636 XIDs (dmesg --time-format iso: 636), 0 other lines skipped"),
        "{out}"
    );
    let rows = groups(&db);
    assert_eq!(
        rows,
        [
            g(
                13,
                "0000:38:00",
                None,
                629,
                "2025-01-21T02:21:33.498Z",
                "2025-01-21T04:41:44.285Z"
            ),
            g(
                43,
                "0000:38:00",
                None,
                7,
                "2025-01-21T02:21:33.502Z",
                "2025-01-21T04:41:44.287Z"
            ),
        ]
    );
    assert_eq!(rows.iter().map(|r| r.4).sum::<i64>(), xid_lines(&file));
}

fn store_with_gpu(db: &Path, host: &str, uuid: &str, pci: &str, at: i64) {
    let mut st = store::open(db, &StoreConfig::new(host)).unwrap();
    st.write_tick(&TickBatch {
        ts_ms: at,
        inventory: vec![GpuInventory {
            uuid: uuid.into(),
            index: 3,
            pci_bus_id: Some(pci.into()),
            ..GpuInventory::default()
        }],
        ..TickBatch::default()
    })
    .unwrap();
}

#[test]
fn the_stored_inventory_names_the_gpu_before_and_after_the_import() {
    let uuid = "GPU-19191919-0000-4000-8000-000000000003";
    let file = real("dmesg-time-format-iso.log");
    // Inventory first: NVML's form of the address joins the kernel's.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    store_with_gpu(
        &db,
        "n1",
        uuid,
        "00000000:19:00.0",
        ms("2024-11-15T12:00:00Z"),
    );
    let out = ok(&import(&db, &["--host", "n1"], &file));
    assert!(out.contains(&format!("PCI 0000:19:00: {uuid}")), "{out}");
    assert!(
        groups(&db)
            .iter()
            .all(|r| r.2.as_deref() == Some(uuid) && r.1 == "0000:19:00")
    );
    // Import first, inventory later: the rows join their GPU when it is written.
    let db = dir.path().join("later.db");
    ok(&import(&db, &["--host", "n1"], &file));
    assert!(groups(&db).iter().all(|r| r.2.is_none()));
    store_with_gpu(
        &db,
        "n1",
        uuid,
        "00000000:19:00.0",
        ms("2024-11-15T12:10:00Z"),
    );
    let rows = groups(&db);
    assert_eq!(rows.iter().map(|r| r.4).sum::<i64>(), 11);
    assert!(
        rows.iter().all(|r| r.2.as_deref() == Some(uuid)),
        "{rows:?}"
    );
    // An nvidia-smi log of the host with the GPU's bus id names it too.
    let db = dir.path().join("smi.db");
    ok(&import(&db, &["--host", "n1"], &file));
    let csv = dir.path().join("n1.csv");
    std::fs::write(
        &csv,
        format!(
            "timestamp, index, uuid, pci.bus_id, utilization.gpu [%]\n\
             2024/11/15 12:10:00.000, 3, {uuid}, 00000000:19:00.0, 5 %\n"
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args([
            "import",
            "nvidia-smi",
            "--host",
            "n1",
            "--tz",
            "UTC",
            "--db",
        ])
        .arg(&db)
        .arg(&csv)
        .output()
        .unwrap();
    ok(&o);
    assert!(
        groups(&db).iter().all(|r| r.2.as_deref() == Some(uuid)),
        "{:?}",
        groups(&db)
    );
    // Another host's GPU at that address is not this host's.
    let db = dir.path().join("other.db");
    store_with_gpu(
        &db,
        "elsewhere",
        uuid,
        "00000000:19:00.0",
        ms("2024-11-15T12:00:00Z"),
    );
    ok(&import(&db, &["--host", "n1"], &file));
    assert!(groups(&db).iter().all(|r| r.2.is_none()));
}

#[test]
fn an_xid_nvml_reported_is_one_row_with_the_kernel_s_detail() {
    let uuid = "GPU-19191919-0000-4000-8000-000000000003";
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let dbe = ms("2024-11-15T12:02:03.470Z");
    store_with_gpu(&db, "n1", uuid, "00000000:19:00.0", dbe - 60_000);
    // The daemon stored NVML's XID 48 at its next tick, 0.8 s after the kernel logged it.
    let mut st = store::open(&db, &StoreConfig::new("n1")).unwrap();
    st.write_tick(&TickBatch {
        ts_ms: dbe + 800,
        events: vec![Event {
            ts_ms: dbe + 800,
            gpu_uuid: Some(uuid.into()),
            kind: "xid".into(),
            code: Some(48),
            message: "XID 48: double-bit (uncorrectable) ECC error".into(),
            source: Some(EventSource::Nvml),
            ..Event::default()
        }],
        ..TickBatch::default()
    })
    .unwrap();
    drop(st);
    let out = ok(&import(
        &db,
        &["--host", "n1"],
        &real("dmesg-time-format-iso.log"),
    ));
    assert!(
        out.contains("10 new, 1 merged with NVML's report of the same XID"),
        "{out}"
    );
    let c = Connection::open(&db).unwrap();
    let (n, source, ts, kernel, message): (i64, String, i64, i64, String) = c
        .query_row(
            "SELECT count(*), source, ts_ms, kernel_ms, message FROM gpu_events WHERE code = 48",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        (n, source.as_str(), ts, kernel),
        (1, "nvml+import", dbe + 800, dbe)
    );
    assert!(
        message.starts_with("Xid (PCI:0000:19:00): 48, pid='<unknown>'"),
        "{message}"
    );
}

#[test]
fn journalctl_lines_name_the_host_and_only_kernel_lines_count() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let out = ok(&import(&db, &[], &fixture("journal.log")));
    assert!(
        out.contains("3 XIDs (journalctl -k -o short-iso: 3), 4 other lines skipped"),
        "{out}"
    );
    assert!(out.contains("for host node7"), "{out}");
    let u = "GPU-3b3b3b3b-0000-4000-8000-000000000001";
    assert_eq!(
        groups(&db),
        [
            g(
                31,
                "0000:19:00",
                None,
                1,
                "2025-01-21T02:22:00.250Z",
                "2025-01-21T02:22:00.250Z"
            ),
            g(
                79,
                "0000:3b:00",
                Some(u),
                1,
                "2025-01-21T02:21:33Z",
                "2025-01-21T02:21:33Z"
            ),
            g(
                154,
                "0000:3b:00",
                Some(u),
                1,
                "2025-01-21T02:21:35Z",
                "2025-01-21T02:21:35Z"
            ),
        ]
    );
    // The GPU named by the log has a row (its UUID is real), without inventory.
    let c = Connection::open(&db).unwrap();
    let (host, index): (String, Option<i64>) = c
        .query_row(
            "SELECT h.name, g.gpu_index FROM gpus g JOIN hosts h ON h.id = g.host_id",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((host.as_str(), index), ("node7", None));
}

#[test]
fn syslog_lines_take_their_year_from_the_file_and_their_zone_from_tz() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kern.log");
    std::fs::copy(fixture("syslog.log"), &file).unwrap();
    let written =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms("2025-01-03T12:00:00Z") as u64);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(written)
        .unwrap();
    let db = dir.path().join("g.db");
    let out = ok(&import(&db, &["--tz", "Europe/Berlin"], &file));
    assert!(
        out.contains("3 XIDs (syslog: 3), 1 other lines skipped"),
        "{out}"
    );
    assert!(out.contains("for host node8"), "{out}");
    // Dec 31 is 2024 and Jan 1 2025 (written on Jan 3 2025), in Berlin time.
    assert_eq!(
        groups(&db),
        [
            g(
                48,
                "0000:19:00",
                None,
                1,
                "2024-12-31T22:59:58Z",
                "2024-12-31T22:59:58Z"
            ),
            g(
                63,
                "0000:19:00",
                None,
                1,
                "2024-12-31T23:00:01Z",
                "2024-12-31T23:00:01Z"
            ),
            g(
                94,
                "0000:19:00",
                None,
                1,
                "2025-01-02T09:00:00Z",
                "2025-01-02T09:00:00Z"
            ),
        ]
    );
}

#[test]
fn raw_seconds_need_the_boot_time() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let file = fixture("raw.log");
    let o = import(&db, &["--host", "n3"], &file);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}:2:1: `[12345.678901]` is seconds since boot",
            file.display()
        )),
        "{err}"
    );
    assert!(err.contains("pass --boot-time"), "{err}");
    assert!(err.contains(&format!("{}:3:1:", file.display())), "{err}");
    assert!(err.contains("nothing was imported"), "{err}");
    assert!(!db.exists(), "no database is made for a failed import");
    let boot = "2025-02-23T13:00:00Z";
    ok(&import(&db, &["--host", "n3", "--boot-time", boot], &file));
    let b = ms(boot);
    let rows = groups(&db);
    assert_eq!(
        rows.iter().map(|r| (r.0, r.5)).collect::<Vec<_>>(),
        [(119, b + 12_345_678), (120, b + 12_351_000)]
    );
}

#[test]
fn a_mixed_file_reads_every_shape() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mixed.log");
    std::fs::copy(fixture("mixed.log"), &file).unwrap();
    // A file written years later: the syslog line's year comes from the dated lines near it.
    let later =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms("2030-06-01T00:00:00Z") as u64);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let db = dir.path().join("g.db");
    let boot = ms("2025-02-23T12:59:00Z");
    let out = ok(&import(
        &db,
        &["--tz", "UTC", "--boot-time", "2025-02-23T12:59:00Z"],
        &file,
    ));
    assert!(
        out.contains("6 XIDs (dmesg -T: 1, dmesg --time-format iso: 2, journalctl -k -o short-iso: 1, syslog: 1, dmesg (seconds since boot): 1)"),
        "{out}"
    );
    assert!(out.contains("for host node9"), "{out}");
    let c = Connection::open(&db).unwrap();
    let mut s = c
        .prepare("SELECT code, ts_ms, last_ms, count, gpu_uuid FROM gpu_events ORDER BY event_id")
        .unwrap();
    let rows: Vec<(i64, i64, i64, i64, Option<String>)> = s
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let gpu4 = Some(GPU4.to_string());
    // The two XID 119 lines 42 s apart are one run of two.
    let one = |code, at: i64, uuid: &Option<String>| (code, at, at, 1, uuid.clone());
    assert_eq!(
        rows,
        [
            (
                119,
                ms("2025-02-23T16:24:18Z"),
                ms("2025-02-23T16:25:00Z"),
                2,
                gpu4.clone()
            ),
            one(79, boot + 12_400_000, &gpu4),
            one(13, ms("2025-02-23T16:26:00.500Z"), &None),
            one(43, ms("2025-02-23T16:27:00Z"), &None),
            one(120, ms("2025-02-23T16:28:00Z"), &gpu4),
        ]
    );
}

#[test]
fn a_broken_file_names_each_bad_line_and_leaves_the_database_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    ok(&import(
        &db,
        &["--host", "n1"],
        &real("dmesg-time-format-iso.log"),
    ));
    let before = groups(&db);
    let file = fixture("broken.log");
    let o = import(&db, &["--host", "n1"], &file);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    let f = file.display();
    assert!(
        err.contains(&format!("error: {f}:3:1: an XID line without a timestamp gpuwatch can read (save the log with `dmesg -T`")),
        "{err}"
    );
    assert!(
        err.contains(&format!("error: {f}:4:40: an XID report that cannot be read: expected `Xid (PCI:dddd:bb:dd): N, ...`")),
        "{err}"
    );
    assert!(err.contains("(fix or remove the line)"), "{err}");
    assert!(err.contains("error: nothing was imported"), "{err}");
    assert_eq!(groups(&db), before);
}

#[test]
fn logs_of_several_hosts_need_host() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.log");
    std::fs::write(
        &file,
        "2025-01-21T02:21:33+0000 a kernel: NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, m\n\
         2025-01-21T02:21:34+0000 b kernel: NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, m\n",
    )
    .unwrap();
    let db = dir.path().join("g.db");
    let o = import(&db, &[], &file);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the logs name several hosts (a, b): import each host's lines with --host"),
        "{err}"
    );
    ok(&import(&db, &["--host", "a"], &file));
    assert_eq!(groups(&db).iter().map(|r| r.4).sum::<i64>(), 2);
}
