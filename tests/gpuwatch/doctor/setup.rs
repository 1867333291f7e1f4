//! gpuwatch's own setup: config and rules, the database, process attribution, the kubelet,
//! Prometheus and the receivers.

use std::process::Command;

use super::fixture::*;

#[test]
fn setup_failures_config_database_attribution_kubelet_prometheus_receivers() {
    let h = Host::healthy(TWO_H100);
    // A broken config: the rest runs on the defaults.
    let bad = h.path("bad.toml");
    std::fs::write(&bad, "intervall = \"1s\"\n").expect("write");
    let o = h.doctor(&bad, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    expect(
        &json(&o),
        "config",
        "fail",
        "unknown field",
        "gpuwatch run --check",
    );

    // Not a database; a closed port for Prometheus and a webhook; a Slack URL env var that is
    // not set; kubelet required but absent; proc_root without processes.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let cfg = h.path("setup.toml");
    let proc_root = h.path("empty-proc");
    std::fs::create_dir_all(&proc_root).expect("mkdir");
    std::fs::write(
        h.path("junk.db"),
        "not sqlite at all, just text ".repeat(200),
    )
    .expect("junk");
    std::fs::write(
        &cfg,
        format!(
            "database = \"{}\"\n[processes]\nproc_root = \"{}\"\n[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n\
             [prometheus]\nurl = \"http://127.0.0.1:{closed}\"\n\
             [[notify.webhook]]\nname = \"hook\"\nurl = \"http://127.0.0.1:{closed}/secret-path\"\n\
             [[notify.slack]]\nname = \"oncall\"\nwebhook_url_env = \"GPUWATCH_DOCTOR_TEST_UNSET\"\n",
            h.path("junk.db").display(),
            proc_root.display(),
            h.path("kubelet.sock").display()
        ),
    )
    .expect("config");
    let o = h.doctor(&cfg, &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(&c, "config", "ok", "valid", "");
    expect(
        &c,
        "database",
        "fail",
        "junk.db: the file is damaged: file is not a database",
        "move the file aside",
    );
    expect(
        &c,
        "process attribution",
        "fail",
        "has no processes",
        "proc_root",
    );
    expect(
        &c,
        "kubelet",
        "fail",
        "kubelet.sock does not exist",
        "pod-resources",
    );
    expect(
        &c,
        "prometheus",
        "fail",
        &format!("cannot connect to 127.0.0.1:{closed}"),
        "[prometheus] url",
    );
    expect(
        &c,
        "receiver hook",
        "fail",
        &format!("cannot connect to 127.0.0.1:{closed}"),
        "gpuwatch notify test",
    );
    expect(
        &c,
        "receiver oncall",
        "fail",
        "GPUWATCH_DOCTOR_TEST_UNSET is not set",
        "webhook_url_env",
    );
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("secret-path"),
        "a URL's path is never printed"
    );

    // The same receivers reachable, with a secret URL: only host:port is printed; a missing
    // database directory fails; a listening kubelet socket is ok.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let open = l.local_addr().expect("addr").port();
    let sock = h.path("kubelet-ok.sock");
    let _k = std::os::unix::net::UnixListener::bind(&sock).expect("unix socket");
    std::fs::write(
        &cfg,
        format!(
            "database = \"{}/no/such/dir/g.db\"\n[processes]\nenabled = false\n[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n\
             [prometheus]\nurl = \"http://127.0.0.1:{open}\"\n\
             [[notify.slack]]\nname = \"oncall\"\nwebhook_url_env = \"GPUWATCH_DOCTOR_TEST_SLACK\"\n",
            h.dir.path().display(),
            sock.display()
        ),
    )
    .expect("config");
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["doctor", "--format", "json", "--host-root"])
        .arg(h.dir.path())
        .arg("--config")
        .arg(&cfg)
        .env_remove("LD_LIBRARY_PATH")
        .env(
            "GPUWATCH_DOCTOR_TEST_SLACK",
            format!("http://127.0.0.1:{open}/services/T0/B0/s3cr3tT0ken"),
        )
        .output()
        .expect("doctor");
    assert_eq!(o.status.code(), Some(2));
    let c = json(&o);
    expect(
        &c,
        "database",
        "fail",
        "no/such/dir does not exist",
        "mkdir -p",
    );
    expect(&c, "kubelet", "ok", "accepts connections", "");
    expect(
        &c,
        "prometheus",
        "ok",
        &format!("127.0.0.1:{open} accepts TCP connections (nothing sent)"),
        "",
    );
    expect(
        &c,
        "receiver oncall",
        "ok",
        &format!("slack: 127.0.0.1:{open} accepts"),
        "",
    );
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("s3cr3t"),
        "the secret is never printed"
    );
}

#[test]
fn a_damaged_database_fails_with_the_move_aside_fix() {
    let h = Host::healthy(TWO_H100);
    let db = h.path("var/g.db");
    std::fs::create_dir_all(db.parent().expect("parent")).expect("mkdir");
    drop(gpuwatch::store::open(&db, &gpuwatch::store::StoreConfig::new("h")).expect("db"));
    // Overwrite the root page of the newest table (a table's, not the schema's): what a torn
    // disk write or a bad copy leaves.
    let root: i64 = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row(
            "SELECT max(rootpage) FROM sqlite_schema WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .expect("root page");
    let mut bytes = std::fs::read(&db).expect("read db");
    let page = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => 65_536,
        n => usize::from(n),
    };
    assert!(bytes.len() > 2 * page, "the schema spans several pages");
    let start = (usize::try_from(root).expect("page number") - 1) * page;
    assert!(start > 0, "not the schema's page");
    for b in &mut bytes[start..start + page] {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).expect("write db");
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "database",
        "fail",
        "the file is damaged: database disk image is malformed",
        "move the file aside",
    );
}

/// A gpuwatch database at the fixture's `var/g.db`, as `gpuwatch run` creates it.
fn gpuwatch_db(h: &Host) -> std::path::PathBuf {
    let db = h.path("var/g.db");
    std::fs::create_dir_all(db.parent().expect("parent")).expect("mkdir");
    drop(gpuwatch::store::open(&db, &gpuwatch::store::StoreConfig::new("h")).expect("db"));
    db
}

#[test]
fn quick_check_findings_fail_with_what_sqlite_found() {
    // An index's root page overwritten (its page-type byte zeroed): the file opens and reads
    // fine (nothing reads that index on open), but the b-tree page is damaged. (An index
    // dropped from the schema with its pages left behind is no longer reliable damage: the
    // bundled SQLite's quick_check does not report unused pages once the schema has a view
    // created after the tables.)
    let h = Host::healthy(TWO_H100);
    let db = gpuwatch_db(&h);
    let conn = rusqlite::Connection::open(&db).expect("open");
    let (root, page_size): (u32, u32) = conn
        .query_row(
            "SELECT rootpage, (SELECT page_size FROM pragma_page_size())
             FROM sqlite_schema WHERE name = 'events_ts'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the index's root page");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .expect("checkpoint");
    drop(conn);
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&db)
            .expect("open the file");
        f.seek(SeekFrom::Start(u64::from(root - 1) * u64::from(page_size)))
            .expect("seek");
        f.write_all(&[0]).expect("zero the page type");
    }
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let c = json(&o);
    expect(
        &c,
        "database",
        "fail",
        "quick_check found damage (",
        "move the file aside",
    );
    expect(&c, "database", "fail", "btreeInitPage", "");
    let found = check(&c, "database")["found"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(!found.contains("*** in database"), "{found}");
}

#[test]
fn a_database_of_another_version_or_program_or_over_its_bound() {
    let h = Host::healthy(TWO_H100);
    let db = gpuwatch_db(&h);
    let conn = rusqlite::Connection::open(&db).expect("open");
    let latest = gpuwatch::store::LATEST_VERSION;
    conn.pragma_update(None, "user_version", latest + 1)
        .expect("user_version");
    drop(conn);
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    expect(
        &json(&o),
        "database",
        "fail",
        &format!(
            "has schema version {}, newer than version {latest}",
            latest + 1
        ),
        "the gpuwatch version that wrote it",
    );

    // Another program's SQLite file (a GeoPackage: application_id "GPKG").
    std::fs::remove_file(&db).expect("rm");
    let conn = rusqlite::Connection::open(&db).expect("open");
    conn.execute_batch("PRAGMA application_id = 1196444487; CREATE TABLE gpkg_contents(x);")
        .expect("gpkg");
    drop(conn);
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    expect(
        &json(&o),
        "database",
        "fail",
        "is not a gpuwatch database (application_id 0x47504b47)",
        "belongs to another program",
    );

    // Written by the previous gpuwatch: `run` upgrades it.
    std::fs::remove_file(&db).expect("rm");
    let mut conn = rusqlite::Connection::open(&db).expect("open");
    gpuwatch::store::migrate_to(&mut conn, latest - 1).expect("older schema");
    drop(conn);
    let o = h.doctor(&h.config(""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    expect(
        &json(&o),
        "database",
        "warn",
        &format!("older than version {latest}"),
        "upgrades the schema in place",
    );

    // A file that grew past the bound and was not shrunk after its data went (2 MiB of
    // free pages over a 1 MiB bound).
    std::fs::remove_file(&db).expect("rm");
    let db = gpuwatch_db(&h);
    let conn = rusqlite::Connection::open(&db).expect("open");
    conn.execute_batch(
        "CREATE TABLE filler(b BLOB); INSERT INTO filler VALUES (zeroblob(2097152)); DROP TABLE filler;",
    )
    .expect("grow");
    drop(conn);
    let o = h.doctor(&h.config("max_db_size = \"1MiB\""), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    expect(
        &json(&o),
        "database",
        "warn",
        "the file is larger than max_db_size",
        "VACUUM",
    );
}

/// The doctor in a PID namespace of its own (util-linux's `unshare`; root, or a user
/// namespace where this user is root): with the outer /proc still mounted it sees the host's
/// processes but NVML would list only its namespace's; with a /proc of its own
/// (`--mount-proc`) it does not see the host's processes at all. Both warn.
#[test]
fn a_pid_namespace_other_than_the_hosts_warns() {
    let h = Host::healthy(TWO_H100);
    std::fs::create_dir_all(h.path("var")).expect("mkdir");
    let cfg = h.path("ns.toml");
    std::fs::write(
        &cfg,
        format!(
            "database = \"{}\"\n[processes]\nproc_root = \"/proc\"\n[kubernetes]\nenabled = false\n",
            h.path("var/g.db").display()
        ),
    )
    .expect("config");
    let cases: [(&[&str], &str, &str); 2] = [
        (
            &["--pid", "--fork"],
            "shows the host's processes, but NVML lists only this namespace's",
            "hostPID: true",
        ),
        (
            &["--pid", "--fork", "--mount-proc"],
            "does not show the host's processes",
            "set [processes] proc_root",
        ),
    ];
    for (args, found, fix) in cases {
        let mut cmd = Command::new("unshare");
        if !root() {
            cmd.arg("--map-root-user");
        }
        let o = cmd
            .args(args)
            .arg(env!("CARGO_BIN_EXE_gpuwatch"))
            .args(["doctor", "--format", "json", "--host-root"])
            .arg(h.dir.path())
            .arg("--config")
            .arg(&cfg)
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .expect("run unshare (util-linux)");
        assert_eq!(
            o.status.code(),
            Some(1),
            "{args:?}: {}{}",
            text(&o),
            String::from_utf8_lossy(&o.stderr)
        );
        expect(&json(&o), "process attribution", "warn", found, fix);
    }
}

#[test]
fn a_database_the_user_may_not_read_fails_with_the_permission_fix() {
    use std::os::unix::fs::PermissionsExt;
    let h = Host::healthy(TWO_H100);
    let db = gpuwatch_db(&h);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let o = h.doctor_unprivileged(&h.config(""));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    expect(
        &json(&o),
        "database",
        "fail",
        "unable to open database file",
        "let the user gpuwatch runs as read the file",
    );
}
