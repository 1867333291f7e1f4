//! `gpuwatch gpu set` and `gpu audit`, the real binary on the simulated NVML library: checked
//! before any write with the allowed range in the error, dry runs, NO_PERMISSION in one line,
//! a failure on one GPU among several, the audit as a table and JSON, and a running daemon
//! that records what `gpu set` and others changed.
//!
//! The GPUs' settings live in a state directory (`GPUWATCH_FAKE_STATE_DIR`) shared by every
//! process of a test, as a real driver's settings are shared by every process on a machine;
//! each test has its own copy of the library, scenario, state and database. The library must
//! be built first (`cargo build --workspace`; scripts/test.sh does it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpuwatch::sim::{SimGpus, find_fake_library};
use serde_json::Value;

/// An H100 (200–700 W, graphics clocks 345–1980 MHz) and an A100 (100–400 W, 210–1410 MHz),
/// both idle; setters allowed unless a test says otherwise.
const TWO_GPUS: &str = r#"
[scenario]
name = "manage"
privileged = true
[[gpu]]
model = "H100-SXM-80GB"
[[gpu]]
model = "A100-SXM4-40GB"
"#;

struct Machine {
    sim: SimGpus,
    dir: tempfile::TempDir,
}

impl Machine {
    fn new(scenario: &str) -> Machine {
        let lib = find_fake_library().unwrap_or_else(|e| {
            panic!("{e}: run `cargo build --workspace` (scripts/test.sh does) before `cargo test`")
        });
        let sim = SimGpus::prepare(&lib, scenario, "manage.toml").expect("valid scenario");
        let m = Machine {
            sim,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        m.write_config("gpuwatch.toml", "g.db");
        m
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn db(&self) -> PathBuf {
        self.path("g.db")
    }

    /// A config for the daemon and `gpu set`: one host, inventory re-read every second.
    fn write_config(&self, name: &str, db: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(
            &p,
            format!(
                "host = \"node-1\"\ndatabase = \"{}\"\nnvml_library = \"{}\"\ninterval = \"200ms\"\n\
                 inventory_interval = \"1s\"\n[http]\nenabled = false\n[processes]\nenabled = false\n\
                 [kubernetes]\nenabled = false\n",
                self.path(db).display(),
                self.sim.library_path().display()
            ),
        )
        .expect("config");
        p
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
        c.args(args)
            .env("GPUWATCH_FAKE_STATE_DIR", self.path("driver-state"))
            .env_remove("GPUWATCH_FAKE_PRIVILEGED")
            .env_remove("GPUWATCH_FAKE_SCENARIO")
            .env_remove("RUST_LOG");
        c
    }

    /// `gpuwatch gpu ARGS --config gpuwatch.toml`.
    fn gpu(&self, args: &[&str]) -> Output {
        self.gpu_with(args, "gpuwatch.toml", &[])
    }

    fn gpu_with(&self, args: &[&str], config: &str, env: &[(&str, &str)]) -> Output {
        let mut c = self.command(&["gpu"]);
        c.args(args).arg("--config").arg(self.path(config));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("run gpuwatch gpu")
    }

    /// The GPUs' current power limits, as a dry run reads them.
    fn power_limits(&self) -> String {
        let o = self.gpu(&["set", "--gpu", "all", "--power-limit", "350", "--dry-run"]);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        out(&o)
            .lines()
            .filter(|l| l.contains("power limit"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn audit_json(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["audit", "--format", "json"];
        args.extend_from_slice(extra);
        let o = self.gpu(&args);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        serde_json::from_slice::<Vec<Value>>(&o.stdout).expect("a JSON array")
    }
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn values_a_gpu_does_not_accept_are_refused_with_the_allowed_range_and_nothing_is_written() {
    let m = Machine::new(TWO_GPUS);
    let o = m.gpu(&[
        "set",
        "--gpu",
        "all",
        "--power-limit",
        "500",
        "--lock-clocks",
        "300,1500",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert_eq!(
        err(&o).lines().collect::<Vec<_>>(),
        vec![
            "error: GPU 0 (NVIDIA H100 80GB HBM3): --lock-clocks 300-1500 MHz is outside the allowed range 345-1980 MHz",
            "error: GPU 1 (NVIDIA A100-SXM4-40GB): --power-limit 500 W is outside the allowed range 100-400 W",
            "error: GPU 1 (NVIDIA A100-SXM4-40GB): --lock-clocks 300-1500 MHz is outside the allowed range 210-1410 MHz",
            "error: nothing was changed",
        ]
    );
    assert_eq!(out(&o), "");
    // GPU 0 accepted 500 W, yet nothing was written anywhere: no audit, no driver state.
    assert!(!m.db().exists(), "no audit database was even opened");
    assert!(!m.path("driver-state").exists());
    assert_eq!(
        m.power_limits(),
        "  power limit 700 W → 350 W\n  power limit 400 W → 350 W"
    );
    // A GPU that does not exist is refused the same way.
    let o = m.gpu(&["set", "--gpu", "0,7", "--persistence", "off"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("there is no GPU 7 (this machine has GPUs 0, 1)"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_dry_run_prints_current_and_new_values_per_gpu_and_changes_nothing() {
    let m = Machine::new(TWO_GPUS);
    let uuid = m.sim.scenario.gpu(1).uuid.clone();
    let o = m.gpu(&[
        "set",
        "--gpu",
        &uuid,
        "--dry-run",
        "--power-limit",
        "250",
        "--persistence",
        "on",
        "--lock-clocks",
        "1200,1400",
        "--compute-mode",
        "prohibited",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        out(&o),
        format!(
            "GPU 1 (NVIDIA A100-SXM4-40GB) {uuid}\n  persistence mode on → on (unchanged)\n  \
             power limit 400 W → 250 W\n  locked clocks unknown → 1200-1400 MHz\n  \
             compute mode default → prohibited\ndry run: nothing was changed\n"
        )
    );
    assert!(!m.db().exists());
    assert!(!m.path("driver-state").exists());
}

#[test]
fn without_privilege_one_line_says_how_to_fix_it_and_the_attempt_is_audited() {
    let m = Machine::new(TWO_GPUS);
    let o = m.gpu_with(
        &["set", "--gpu", "all", "--power-limit", "300"],
        "gpuwatch.toml",
        &[("GPUWATCH_FAKE_PRIVILEGED", "0")],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(out(&o), "");
    assert_eq!(
        err(&o),
        "error: not permitted to change GPU settings (GPU 0 power limit refused with NVML \
         NO_PERMISSION): run `gpuwatch gpu set` as root (sudo) or with CAP_SYS_ADMIN; nothing \
         was changed\n"
    );
    let rows = m.audit_json(&[]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["result"], "failed");
    assert_eq!(
        rows[0]["error"],
        "NO_PERMISSION: changing GPU settings needs root or CAP_SYS_ADMIN"
    );
    assert_eq!(
        m.power_limits(),
        "  power limit 700 W → 350 W\n  power limit 400 W → 350 W"
    );
}

#[test]
fn a_write_one_gpu_refuses_is_reported_for_that_gpu_and_the_others_are_applied_and_audited() {
    // The driver refuses GPU 1's new limit although it is inside the constraints read just
    // before (they moved, or another cap applies): a failure only the write can find.
    let scenario = format!(
        "{TWO_GPUS}[[fault]]\ngpu = 1\nsymbol = \"nvmlDeviceSetPowerManagementLimit\"\n\
         error = \"INVALID_ARGUMENT\"\n"
    );
    let m = Machine::new(&scenario);
    let o = m.gpu(&[
        "set",
        "--gpu",
        "all",
        "--power-limit",
        "350",
        "--compute-mode",
        "exclusive-process",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let text = out(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert!(
        lines[0].starts_with("GPU 0 (NVIDIA H100 80GB HBM3) GPU-"),
        "{text}"
    );
    assert_eq!(lines[1], "  power limit 700 W → 350 W: ok");
    assert_eq!(lines[2], "  compute mode default → exclusive-process: ok");
    assert!(
        lines[3].starts_with("GPU 1 (NVIDIA A100-SXM4-40GB) GPU-"),
        "{text}"
    );
    assert_eq!(
        lines[4],
        "  power limit 400 W → 350 W: FAILED: NVML INVALID_ARGUMENT: NVML rejected an argument of the call"
    );
    assert_eq!(lines[5], "  compute mode default → exclusive-process: ok");
    assert_eq!(
        err(&o),
        "error: 1 change(s) failed (GPU 1 power limit), 3 applied; every attempt is in \
         `gpuwatch gpu audit`\n"
    );
    assert_eq!(
        m.power_limits(),
        "  power limit 350 W → 350 W (unchanged)\n  power limit 400 W → 350 W"
    );

    // The audit: every attempt with who, GPU, setting, old, new and result.
    let rows = m.audit_json(&[]);
    let got: Vec<(u64, &str, &str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["gpu_index"].as_u64().expect("index"),
                r["setting"].as_str().expect("setting"),
                r["old_value"].as_str().expect("old"),
                r["new_value"].as_str().expect("new"),
                r["result"].as_str().expect("result"),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "power_limit", "700 W", "350 W", "ok"),
            (0, "compute_mode", "default", "exclusive-process", "ok"),
            (1, "power_limit", "400 W", "350 W", "failed"),
            (1, "compute_mode", "default", "exclusive-process", "ok"),
        ]
    );
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    for r in &rows {
        assert_eq!(r["uid"], uid);
        assert_eq!(r["host"], "node-1");
        assert!(
            r["who"]
                .as_str()
                .is_some_and(|w| !w.is_empty() && w != "observed")
        );
        assert!(r["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{r}");
        assert!(r["done_ms"].as_i64() >= r["ts_ms"].as_i64(), "{r}");
    }
    assert_eq!(
        rows[2]["error"],
        "INVALID_ARGUMENT: NVML rejected an argument of the call"
    );
    assert_eq!(m.audit_json(&["--gpu", "1"]).len(), 2);
    assert_eq!(
        m.audit_json(&["--gpu", m.sim.scenario.gpu(0).uuid.as_str()])
            .len(),
        2
    );
    assert_eq!(m.audit_json(&["--since", "1h"]).len(), 4);
    assert_eq!(m.audit_json(&["--to", "1000"]).len(), 0);

    let o = m.gpu(&["audit"]);
    let table = out(&o);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    assert!(lines[0].starts_with("ID  TIME (UTC)"), "{table}");
    for (line, want) in lines[1..].iter().zip(["ok", "ok", "failed", "ok"]) {
        assert!(line.contains(&format!(" {want}")), "{line}");
        assert!(line.contains("node-1"), "{line}");
    }
    let words = lines[3].split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(" power_limit 400 W 350 W failed INVALID_ARGUMENT:"),
        "{table}"
    );
}

#[test]
fn locked_clocks_are_set_and_reset_with_an_unknown_old_value() {
    let m = Machine::new(TWO_GPUS);
    let o = m.gpu(&[
        "set",
        "--gpu",
        "0",
        "--lock-clocks",
        "1200,1500",
        "--lock-memory-clocks",
        "2619,2619",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out(&o).contains(
            "  locked clocks unknown → 1200-1500 MHz: ok
  locked memory clocks unknown → 2619-2619 MHz: ok
"
        ),
        "{}",
        out(&o)
    );
    let o = m.gpu(&[
        "set",
        "--gpu",
        "0",
        "--reset-clocks",
        "--reset-memory-clocks",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let rows = m.audit_json(&[]);
    let got: Vec<(&str, &Value, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["setting"].as_str().expect("setting"),
                &r["old_value"],
                r["new_value"].as_str().expect("new"),
                r["result"].as_str().expect("result"),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("gpu_locked_clocks", &Value::Null, "1200-1500 MHz", "ok"),
            ("memory_locked_clocks", &Value::Null, "2619-2619 MHz", "ok"),
            ("gpu_locked_clocks", &Value::Null, "unlocked", "ok"),
            ("memory_locked_clocks", &Value::Null, "unlocked", "ok"),
        ]
    );
    // --lock-clocks and --reset-clocks together are a usage error.
    let o = m.gpu(&[
        "set",
        "--gpu",
        "0",
        "--lock-clocks",
        "1200,1500",
        "--reset-clocks",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn an_audit_that_cannot_be_written_stops_everything_before_the_first_write() {
    let m = Machine::new(TWO_GPUS);
    let o = m.gpu(&[
        "set",
        "--gpu",
        "all",
        "--power-limit",
        "300",
        "--db",
        "/nonexistent-dir/g.db",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).starts_with("error: cannot open the audit database /nonexistent-dir/g.db:")
            && err(&o).contains("nothing was changed"),
        "{}",
        err(&o)
    );
    assert!(!m.path("driver-state").exists(), "no setter was called");
}

/// A running `gpuwatch run`, killed when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Rows of `sql` on `db` as text; `None` while the database cannot answer (not created or
/// not migrated yet).
fn query(db: &Path, sql: &str) -> Option<Vec<Vec<String>>> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .ok()?;
    let mut stmt = conn.prepare(sql).ok()?;
    let n = stmt.column_count();
    let rows = stmt
        .query_map([], |r| {
            (0..n)
                .map(|i| {
                    let v: rusqlite::types::Value = r.get(i)?;
                    Ok(match v {
                        rusqlite::types::Value::Integer(i) => i.to_string(),
                        rusqlite::types::Value::Text(t) => t,
                        rusqlite::types::Value::Null => "NULL".into(),
                        other => format!("{other:?}"),
                    })
                })
                .collect()
        })
        .ok()?;
    rows.collect::<Result<_, _>>().ok()
}

/// GPU, who, uid, setting, old, new.
type AuditLine<'a> = (u64, &'a str, Option<u64>, &'a str, &'a str, &'a str);

#[test]
fn a_running_daemon_shows_gpu_set_changes_in_the_history_and_audits_changes_by_others() {
    let m = Machine::new(TWO_GPUS);
    let child = m
        .command(&["run", "--config"])
        .arg(m.path("gpuwatch.toml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the daemon");
    let _daemon = Daemon(child);
    let limits = |gpu: u32| {
        query(
            &m.db(),
            &format!(
                "SELECT DISTINCT power_limit_mw FROM gpu_samples WHERE gpu_index = {gpu} \
                 ORDER BY ts_ms"
            ),
        )
        .unwrap_or_default()
        .into_iter()
        .map(|r| r[0].clone())
        .collect::<Vec<_>>()
    };
    wait_for("samples of both GPUs", || {
        (limits(0) == ["700000"] && limits(1) == ["400000"]).then_some(())
    });

    // gpu set, audited in the daemon's database: the history shows the new limit, and the
    // daemon does not record it a second time as a change by someone else.
    let o = m.gpu(&["set", "--gpu", "0", "--power-limit", "450"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    wait_for("the new limit in the history", || {
        (limits(0) == ["700000", "450000"]).then_some(())
    });

    // Someone else (another tool: here a gpu set auditing elsewhere) changes GPU 1.
    m.write_config("elsewhere.toml", "elsewhere.db");
    let o = m.gpu_with(
        &[
            "set",
            "--gpu",
            "1",
            "--power-limit",
            "300",
            "--persistence",
            "off",
        ],
        "elsewhere.toml",
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    wait_for("the observed changes in the audit", || {
        (m.audit_json(&["--gpu", "1"]).len() == 2).then_some(())
    });
    wait_for("GPU 1's new limit in the history", || {
        (limits(1) == ["400000", "300000"]).then_some(())
    });

    let rows = m.audit_json(&[]);
    let got: Vec<AuditLine<'_>> = rows
        .iter()
        .map(|r| {
            (
                r["gpu_index"].as_u64().expect("index"),
                r["who"].as_str().expect("who"),
                r["uid"].as_u64(),
                r["setting"].as_str().expect("setting"),
                r["old_value"].as_str().expect("old"),
                r["new_value"].as_str().expect("new"),
            )
        })
        .collect();
    // SAFETY: getuid cannot fail.
    let uid = u64::from(unsafe { libc::getuid() });
    assert_eq!(got.len(), 3, "{rows:?}");
    assert_eq!(got[0].0, 0);
    assert_eq!(
        (got[0].2, got[0].3, got[0].4, got[0].5),
        (Some(uid), "power_limit", "700 W", "450 W")
    );
    let mut observed: Vec<_> = got[1..].to_vec();
    observed.sort_by_key(|r| r.3);
    assert_eq!(
        observed,
        vec![
            (1, "observed", None, "persistence", "on", "off"),
            (1, "observed", None, "power_limit", "400 W", "300 W"),
        ]
    );
    assert!(rows[1..].iter().all(|r| r["result"] == "ok"));
    let events = query(
        &m.db(),
        "SELECT gpu_index, message FROM gpu_events WHERE kind = 'setting_changed' ORDER BY gpu_index, message",
    )
    .expect("events");
    assert_eq!(
        events,
        vec![
            vec!["0".to_string(), "GPU 0 power limit: 700 W → 450 W".into()],
            vec!["1".to_string(), "GPU 1 persistence mode: on → off".into()],
            vec!["1".to_string(), "GPU 1 power limit: 400 W → 300 W".into()],
        ]
    );
}
