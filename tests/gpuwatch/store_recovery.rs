//! A damaged or unusable database at start, through the `gpuwatch` binary: garbage, a
//! truncated file and a WAL from another database are moved aside (byte for byte), a new
//! database is started and `gpuwatch_database_recovered` reaches the receiver, `doctor` names
//! the moved file; a newer schema and a permission problem are refused with the file
//! untouched; read-only commands report damage and move nothing; two daemons on one database:
//! the second is refused naming the first's pid, and kill -9 leaves no stale lock.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuwatch::store::{self, LATEST_VERSION, StoreConfig, synth::TickGen};

use crate::notify_support::daemon_rig;
use crate::notify_support::daemon_rig::{Rig, gpuwatch, slack_toml, wait_for};
use crate::notify_support::slack_server::SlackServer;

/// The moved-aside databases beside `db` (without their -wal / -shm).
fn moved(db: &Path) -> Vec<PathBuf> {
    store::recover::moved_aside(db).expect("list")
}

/// A real gpuwatch database with `ticks` ticks of 4 GPUs, checkpointed and closed.
fn real_database(db: &Path, ticks: i64) {
    let mut st = store::open(db, &StoreConfig::new("node-7")).expect("open");
    let mut g = TickGen::new(4, 2);
    let t0 = 1_750_000_000_000;
    let batch: Vec<_> = (0..ticks).map(|k| g.tick(t0 + k * 1000)).collect();
    st.write_ticks(&batch).expect("write");
    st.checkpoint().expect("checkpoint");
}

/// Starts the rig's daemon and waits until it has stored samples (taken after its start).
fn started(rig: &Rig, log: &str) -> daemon_rig::Daemon {
    let since = gpuwatch::clock::now_ms();
    let d = rig.start(log, &[]);
    let db = rig.path("g.db");
    wait_for("samples in the database", Duration::from_secs(30), || {
        let conn = store::open_read_only(&db).ok()?;
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM samples WHERE ts_ms >= ?1",
                [since],
                |r| r.get(0),
            )
            .ok()?;
        (n > 0).then_some(())
    });
    d
}

fn doctor_check(rig: &Rig, name: &str) -> Option<serde_json::Value> {
    let o = gpuwatch()
        .args(["doctor", "--format", "json", "--config"])
        .arg(&rig.cfg)
        .output()
        .expect("doctor");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor json");
    v["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
}

#[test]
fn garbage_is_moved_aside_a_new_database_starts_and_the_receiver_is_told() {
    let slack = SlackServer::start();
    let rig = daemon_rig::tempdir_rig(3600, |dir| slack_toml(dir, &slack, ""));
    let db = rig.path("g.db");
    let garbage = "this is not an SQLite file ".repeat(300).into_bytes();
    std::fs::write(&db, &garbage).expect("garbage");
    std::fs::write(rig.path("g.db-wal"), b"and no WAL either").expect("wal");

    // A read-only command reports the damage and moves nothing.
    let (ok, out) = rig.cli(&["status"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("is damaged") && out.contains("nothing was changed"),
        "{out}"
    );
    assert!(out.contains(&db.display().to_string()), "{out}");
    assert!(moved(&db).is_empty());

    let mut d = started(&rig, "run.log");
    let aside = moved(&db);
    assert_eq!(aside.len(), 1, "{aside:?}");
    let name = aside[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("g.db.corrupt-20"), "{name}");
    assert_eq!(std::fs::read(&aside[0]).expect("moved file"), garbage);
    let mut wal = aside[0].clone().into_os_string();
    wal.push("-wal");
    assert_eq!(
        std::fs::read(&wal).expect("its WAL beside it"),
        b"and no WAL either"
    );

    // The self alert, through the outbox, at the receiver.
    let got = wait_for("the recovered alert", Duration::from_secs(30), || {
        slack
            .received()
            .into_iter()
            .find(|r| r.body.contains("gpuwatch_database_recovered"))
    });
    assert!(got.body.contains(&name), "{}", got.body);
    assert!(got.body.contains("file is not a database"), "{}", got.body);

    let doc = doctor_check(&rig, "database recovery").expect("the doctor's check");
    assert_eq!(doc["status"], "warn", "{doc}");
    assert!(doc["found"].as_str().unwrap().contains(&name), "{doc}");

    assert!(d.sigterm().success());
    let log = rig.log("run.log");
    assert_eq!(log.matches("the database was damaged").count(), 1, "{log}");

    // The next start finds a sound database: nothing more is moved, nothing sent again.
    let mut d = started(&rig, "run2.log");
    assert!(d.sigterm().success());
    assert_eq!(moved(&db).len(), 1);
    assert!(!rig.log("run2.log").contains("damaged"));
}

#[test]
fn a_truncated_database_is_moved_aside_by_the_daemon() {
    let rig = Rig::new(3600, "");
    let db = rig.path("g.db");
    real_database(&db, 3000);
    let len = std::fs::metadata(&db).expect("size").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .expect("open");
    f.set_len(len / 2).expect("truncate");
    drop(f);
    let before = std::fs::read(&db).expect("read");

    let mut d = started(&rig, "run.log");
    assert!(d.sigterm().success());
    let aside = moved(&db);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(&aside[0]).expect("moved"), before);
    let log = rig.log("run.log");
    assert!(log.contains("the database was damaged"), "{log}");
}

#[test]
fn a_wal_from_another_database_is_damage_and_is_moved_with_the_file() {
    let rig = Rig::new(3600, "");
    let db = rig.path("g.db");
    real_database(&db, 10);
    // Another program's database in WAL mode, its WAL copied while it is open (not yet
    // checkpointed), put beside gpuwatch's file.
    let other = rig.path("other.db");
    let conn = rusqlite::Connection::open(&other).expect("other");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1), (2);",
    )
    .expect("other writes");
    std::fs::copy(rig.path("other.db-wal"), rig.path("g.db-wal")).expect("foreign WAL");
    drop(conn);

    let mut d = started(&rig, "run.log");
    assert!(d.sigterm().success());
    let aside = moved(&db);
    assert_eq!(aside.len(), 1, "{aside:?}");
    let mut wal = aside[0].clone().into_os_string();
    wal.push("-wal");
    assert!(Path::new(&wal).is_file(), "the foreign WAL moved with it");
    let log = rig.log("run.log");
    assert!(log.contains("the WAL belongs to another database"), "{log}");
}

#[test]
fn a_newer_schema_is_refused_with_both_versions_and_never_touched() {
    let rig = Rig::new(3600, "");
    let db = rig.path("g.db");
    real_database(&db, 10);
    let conn = rusqlite::Connection::open(&db).expect("open");
    conn.pragma_update(None, "user_version", LATEST_VERSION + 1)
        .expect("newer");
    drop(conn);
    let before = std::fs::read(&db).expect("read");

    let mut d = rig.start("run.log", &[]);
    let status = wait_for("exit", Duration::from_secs(30), || {
        d.0.try_wait().ok().flatten()
    });
    assert!(!status.success());
    let log = rig.log("run.log");
    assert!(
        log.contains(&format!("schema version {}", LATEST_VERSION + 1))
            && log.contains(&format!("version {LATEST_VERSION} known"))
            && log.contains("use a newer gpuwatch"),
        "{log}"
    );
    assert_eq!(std::fs::read(&db).expect("read"), before);
    assert!(moved(&db).is_empty());
}

/// As root, a command run as `nobody` (util-linux's `setpriv`) with the fixture opened to it;
/// otherwise this user, for whom the database is made unreadable.
fn unprivileged(rig: &Rig, db: &Path) -> std::process::Command {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    if !root {
        mode(db, 0o000);
        return gpuwatch();
    }
    mode(db, 0o600);
    mode(rig.dir.path(), 0o777);
    mode(&rig.cfg, 0o644);
    mode(&rig.path("r.toml"), 0o644);
    mode(rig.sim.library_path().parent().expect("sim dir"), 0o755);
    // A hard link, not a copy: a file just written may still be open for writing in a child
    // another test thread forked, and exec'ing it then fails (ETXTBSY).
    let bin = rig.path("gpuwatch");
    if !bin.exists() && std::fs::hard_link(env!("CARGO_BIN_EXE_gpuwatch"), &bin).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_gpuwatch"), &bin).expect("copy the binary");
    }
    mode(&bin, 0o755);
    let mut c = std::process::Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin)
        .env_remove("RUST_LOG");
    c
}

#[test]
fn permission_denied_is_refused_naming_the_path_and_the_fix() {
    let rig = Rig::new(3600, "");
    let db = rig.path("g.db");
    real_database(&db, 10);
    let before = std::fs::read(&db).expect("read");
    for args in [
        &["run", "--config"][..],
        &[
            "silence",
            "add",
            "--match",
            "rule=busy",
            "--for",
            "1h",
            "--config",
        ][..],
    ] {
        let o = unprivileged(&rig, &db)
            .args(args)
            .arg(&rig.cfg)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {err}");
        assert!(o.status.code().is_some(), "{args:?}: {:?} {err}", o.status);
        assert!(
            err.contains(&format!("permission denied: {}", db.display())) && err.contains("chown"),
            "{args:?}: {err}"
        );
    }
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_eq!(std::fs::read(&db).expect("read"), before);
    assert!(moved(&db).is_empty());
}

#[test]
fn a_second_daemon_is_refused_naming_the_first_and_kill_9_leaves_no_stale_lock() {
    let rig = Rig::new(3600, "");
    let db = rig.path("g.db");
    let mut first = started(&rig, "first.log");
    let pid = first.0.id();

    let o = gpuwatch()
        .args(["run", "--config"])
        .arg(&rig.cfg)
        .output()
        .expect("second");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "another gpuwatch daemon (pid {pid}) is running on database {}",
            db.display()
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    // One-shot writers keep working beside the daemon.
    let (ok, out) = rig.cli(&["silence", "add", "--match", "rule=busy", "--for", "1h"]);
    assert!(ok, "{out}");

    first.kill9();
    let mut second = started(&rig, "second.log");
    let status = second.sigterm();
    assert!(status.success(), "{status:?}: {}", rig.log("second.log"));
    assert!(moved(&db).is_empty());
}

#[test]
fn a_one_shot_writer_moves_damage_aside_unless_a_daemon_holds_the_database() {
    let rig = Rig::new(3600, "");
    let db = rig.path("g.db");
    std::fs::write(&db, "garbage ".repeat(1000)).expect("garbage");
    let silence = ["silence", "add", "--match", "rule=busy", "--for", "1h"];

    // A process holding the daemon's lock: nothing is moved, the error says why.
    let lock = std::fs::File::create(store::lock::lock_path(&db)).expect("lock file");
    lock.try_lock().expect("lock");
    std::fs::write(store::lock::lock_path(&db), "4242\n").expect("pid");
    let (ok, out) = rig.cli(&silence);
    assert!(!ok, "{out}");
    assert!(
        out.contains("is damaged") && out.contains("(pid 4242) has it open"),
        "{out}"
    );
    assert!(moved(&db).is_empty());
    drop(lock);

    let (ok, out) = rig.cli(&silence);
    assert!(ok, "{out}");
    assert_eq!(moved(&db).len(), 1);
    let conn = store::open_read_only(&db).expect("a new database");
    let n: i64 = conn
        .query_row("SELECT count(*) FROM silences", [], |r| r.get(0))
        .expect("silences");
    assert_eq!(n, 1);
}
