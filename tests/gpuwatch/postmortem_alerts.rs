//! `gpuwatch alerts` and `gpuwatch incident` on the database of a real run: the demo's
//! scenario through the whole daemon on simulated GPUs, delivering to a webhook receiver,
//! then the alert history with durations, one alert's story with its notifications, metrics,
//! training series, processes and events, and the errors for unknown ids.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use gpuwatch::config::Config;
use gpuwatch::daemon::{self, DaemonParts};
use gpuwatch::sampler::nvml;
use gpuwatch::sim::{SimGpus, find_fake_library};

use serde_json::Value;

/// Answers every HTTP request with 200 (a webhook receiver that accepts everything).
fn accepting_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    port
}

fn gpuwatch(args: &[&str], db: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(args)
        .arg("--db")
        .arg(db)
        .env_remove("RUST_LOG")
        .output()
        .expect("run gpuwatch")
}

fn ok_stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_str(&ok_stdout(o)).expect("json")
}

/// The demo's scenario through the whole daemon in-process, on the simulated clock at full
/// speed with a generous sample deadline (so a loaded machine cannot turn ticks into gaps, as
/// `gpuwatch demo --speed 200` can), delivering to a webhook receiver served here.
fn demo_db(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/demo.toml"))
        .expect("demo scenario");
    let sim = SimGpus::prepare(
        &find_fake_library().expect("the fake NVML library is built (cargo build --workspace)"),
        &text,
        "demo.toml",
    )
    .expect("scenario");
    let notify = dir.join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[notify]\ngroup_wait = \"30s\"\ngroup_interval = \"2m\"\n[[notify.webhook]]\nname = \"hook\"\nurl = \"http://127.0.0.1:{}/\"\n",
            accepting_server()
        ),
    )
    .expect("config");
    let db = dir.join("demo.db");
    let mut config = Config {
        host: "demo-node".into(),
        database: db.clone(),
        interval: Duration::from_millis(sim.scenario.tick_ms()),
        sample_deadline: Duration::from_secs(2),
        ..Config::default()
    };
    config.http.enabled = false;
    config.notify = Config::load(&notify).expect("notify config").notify;
    // The demo's pods, from a kubelet as in `gpuwatch demo` (the llama job's series join by pod).
    let kubelet = sim.serve_pods().expect("serve pods").expect("pods");
    kubelet.configure(&mut config);
    let start_ms = (chrono::Utc::now().timestamp() - 2 * 3600) * 1000;
    daemon::run(
        DaemonParts {
            config,
            rules: gpuwatch::rules::load_configured(true, &[]).expect("default rules"),
            alert_sink: None,
            nvml: nvml::init(Some(&sim.library_path())).expect("init"),
            ticker: Box::new(sim.ticker(start_ms, f64::INFINITY, None).expect("ticker")),
            overrides: sim.process_overrides(start_ms),
            observer: None,
            reload: None,
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("daemon runs");
    db
}

#[test]
fn alerts_and_incidents_of_a_demo_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = demo_db(dir.path());

    // The history: every episode, newest first, with durations that add up.
    let all = json(&gpuwatch(&["alerts", "--format", "json"], &db));
    let all = all.as_array().expect("array");
    let rules: Vec<&str> = all
        .iter()
        .map(|a| a["rule"].as_str().expect("rule"))
        .collect();
    for want in [
        "gpu_overheating",
        "training_hang",
        "gpu_memory_leak",
        "gpu_xid_error",
    ] {
        assert!(rules.contains(&want), "{want} missing from {rules:?}");
    }
    let starts: Vec<i64> = all
        .iter()
        .map(|a| a["started_ms"].as_i64().expect("ms"))
        .collect();
    assert!(
        starts.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {starts:?}"
    );
    for a in all {
        let started = a["started_ms"].as_i64().expect("start");
        let active = a["active_ms"].as_i64().expect("active");
        assert_eq!(
            a["pending_ms"].as_i64().expect("pending") + a["firing_ms"].as_i64().unwrap_or(0),
            active,
            "{a}"
        );
        match a["state"].as_str().expect("state") {
            "resolved" => {
                assert_eq!(a["resolved_ms"].as_i64(), Some(started + active), "{a}");
                assert_eq!(a["ongoing"], false);
            }
            _ => assert!(a["resolved_ms"].is_null() && a["ongoing"] == true, "{a}"),
        }
        if let Some(f) = a["fired_ms"].as_i64() {
            assert_eq!(a["pending_ms"].as_i64(), Some(f - started), "{a}");
        }
    }

    // gpu_idle says how long the GPU has been idle: its 10-minute window plus `for`, not
    // `for` alone (GPU 2 went idle at 10:00 and the alert fired about 25 minutes later).
    let idle = all
        .iter()
        .find(|a| a["rule"] == "gpu_idle")
        .expect("the idle alert");
    assert!(
        idle["summary"]
            .as_str()
            .is_some_and(|s| s.contains(" idle for 25m")),
        "{idle}"
    );

    // Filters: rule + state, and a range.
    let hangs = json(&gpuwatch(
        &[
            "alerts",
            "--rule",
            "training_hang",
            "--state",
            "resolved",
            "--format",
            "json",
        ],
        &db,
    ));
    let hangs = hangs.as_array().expect("array");
    assert!(!hangs.is_empty());
    assert!(
        hangs
            .iter()
            .all(|a| a["rule"] == "training_hang" && a["state"] == "resolved")
    );
    let hang = &hangs[0];
    let id = hang["alert_id"].as_i64().expect("id");
    let (start, fired, resolved) = (
        hang["started_ms"].as_i64().expect("s"),
        hang["fired_ms"].as_i64().expect("fired"),
        hang["resolved_ms"].as_i64().expect("resolved"),
    );
    let secs = |ms: i64| format!("{}", ms as f64 / 1000.0);
    let around = json(&gpuwatch(
        &[
            "alerts",
            "--from",
            &secs(resolved + 1),
            "--to",
            &secs(resolved + 2),
            "--format",
            "json",
        ],
        &db,
    ));
    assert!(
        around
            .as_array()
            .expect("array")
            .iter()
            .all(|a| a["alert_id"] != id),
        "an alert resolved before --from is not listed"
    );
    let around = json(&gpuwatch(
        &[
            "alerts",
            "--from",
            &secs(fired),
            "--to",
            &secs(fired + 1),
            "--format",
            "json",
        ],
        &db,
    ));
    assert!(
        around
            .as_array()
            .expect("array")
            .iter()
            .any(|a| a["alert_id"] == id)
    );
    let table = ok_stdout(&gpuwatch(&["alerts"], &db));
    assert!(table.starts_with("ID  STATE"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&format!("{id} ")) && l.contains("training_hang")),
        "{table}"
    );

    // The incident: its timeline, who was notified, what the GPU and the job did.
    let inc = json(&gpuwatch(
        &["incident", &id.to_string(), "--format", "json"],
        &db,
    ));
    assert_eq!(inc["alert"]["alert_id"], id);
    let notes = inc["notifications"].as_array().expect("notifications");
    let kinds: Vec<(&str, &str)> = notes
        .iter()
        .map(|n| {
            (
                n["kind"].as_str().expect("k"),
                n["status"].as_str().expect("s"),
            )
        })
        .collect();
    assert!(kinds.contains(&("firing", "sent")), "{kinds:?}");
    assert!(kinds.contains(&("resolved", "sent")), "{kinds:?}");
    assert!(
        notes
            .iter()
            .all(|n| n["receiver"] == "hook" && n["attempts"] == 1)
    );
    let util = inc["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| m["metric"] == "util_gpu")
        .expect("util_gpu");
    assert!(util["before"]["samples"].as_i64() > Some(100), "{util}");
    assert!(
        util["during"]["max"].as_f64() > Some(90.0),
        "the hang signature: {util}"
    );
    let step = inc["training"]
        .as_array()
        .expect("training")
        .iter()
        .find(|t| t["metric"] == "training_step")
        .expect("the GPU's step series");
    let stopped = chrono::DateTime::parse_from_rfc3339(
        step["last_change_before_start"]
            .as_str()
            .expect("when it stopped"),
    )
    .expect("time")
    .timestamp_millis();
    // The demo's hang is a spinning collective: the rule holds about a minute after the
    // step's last change (4 of the job's step intervals, at least 1 min).
    assert!(
        stopped < start && start - stopped >= 60_000,
        "the step stopped at least 1 min before the alert started to hold: {}",
        start - stopped
    );
    let procs = inc["processes"].as_array().expect("processes");
    assert!(!procs.is_empty());
    // The demo's job runs in a containerd pod (its cgroup says so: runtime, container id, pod
    // UID); the pod's name comes from the kubelet's allocation of the GPU.
    assert_eq!(procs[0]["runtime"], "containerd", "{}", procs[0]);
    assert_eq!(
        procs[0]["container_id"].as_str().map(str::len),
        Some(64),
        "{}",
        procs[0]
    );
    assert_eq!(procs[0]["pod"], "llama-70b-ft-0", "{}", procs[0]);
    assert_eq!(procs[0]["namespace"], "research", "{}", procs[0]);
    assert_eq!(
        inc["alert"]["labels"]["pod"], "llama-70b-ft-0",
        "{}",
        inc["alert"]
    );

    let text = ok_stdout(&gpuwatch(&["incident", &id.to_string()], &db));
    let order: Vec<usize> = [
        "pending ",
        "firing ",
        "notify    hook (firing): sent",
        "resolved ",
    ]
    .iter()
    .map(|w| {
        text.find(w)
            .unwrap_or_else(|| panic!("{w:?} missing:\n{text}"))
    })
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "timeline order:\n{text}"
    );
    assert!(
        text.contains("util_gpu") && text.contains("training_step{"),
        "{text}"
    );

    // The XID alert's story lists the XID event.
    let xid = all
        .iter()
        .find(|a| a["rule"] == "gpu_xid_error")
        .expect("xid alert");
    let inc = json(&gpuwatch(
        &[
            "incident",
            &xid["alert_id"].to_string(),
            "--format",
            "json",
            "--window",
            "5m",
        ],
        &db,
    ));
    let events = inc["events"].as_array().expect("events");
    assert!(
        events.iter().any(|e| e["kind"] == "xid"
            && e["code"] == 48
            && e["xid_meaning"] == "double-bit (uncorrectable) ECC error"
            && e["xid_action"] == "reset the GPU"),
        "{events:?}"
    );
    // The text says what it means too, and the alert's summary from the catalogue; each
    // line says it once ("XID 48: ... — XID 48: ..." was a doubled catalogue text).
    let text = ok_stdout(&gpuwatch(
        &["incident", &xid["alert_id"].to_string(), "--window", "5m"],
        &db,
    ));
    assert!(
        text.lines().all(|l| l.matches("XID 48:").count() <= 1),
        "{text}"
    );
    assert!(
        text.contains("XID 48: double-bit (uncorrectable) ECC error; action: reset the GPU"),
        "{text}"
    );
    assert!(
        xid["summary"]
            .as_str()
            .is_some_and(|s| s
                .contains("XID 48 (double-bit (uncorrectable) ECC error; action: reset the GPU)")),
        "{xid}"
    );

    // A per-process alert's story has the process's own memory, growing.
    let leak = all
        .iter()
        .find(|a| a["rule"] == "gpu_memory_leak")
        .expect("leak alert");
    assert!(leak["pid"].is_i64(), "{leak}");
    let inc = json(&gpuwatch(
        &[
            "incident",
            &leak["alert_id"].to_string(),
            "--format",
            "json",
        ],
        &db,
    ));
    let mem = &inc["metrics"][0];
    assert_eq!(mem["metric"], "process_mem", "{inc}");
    assert!(
        mem["during"]["max"].as_f64() > mem["before"]["max"].as_f64(),
        "{mem}"
    );

    // An unknown id: a clear error, exit code 2.
    let o = gpuwatch(&["incident", "999999"], &db);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no alert with id 999999") && err.contains("gpuwatch alerts"),
        "{err}"
    );
}

/// Two H100s (slowdown 88 °C, shutdown 94 °C) overheat: GPU 0 goes critical for a minute and
/// back to warning and is still firing where the data ends; GPU 1 cools down and resolves.
const OVERHEAT: &str = r#"
[scenario]
name = "overheat"
tick_ms = 1000
duration = "9m"
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
to = "1m"
temp = 60
[[gpu.timeline]]
from = "1m"
to = "4m"
temp = 87
[[gpu.timeline]]
from = "4m"
to = "5m"
temp = 92
[[gpu.timeline]]
from = "5m"
temp = 87
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
to = "1m"
temp = 60
[[gpu.timeline]]
from = "1m"
to = "4m"
temp = 87
[[gpu.timeline]]
from = "4m"
temp = 60
"#;

/// A firing alert lasts until the data's end (not 0 s), the same in `alerts`, its JSON, the
/// `alerts` view and `incident`; an alert that went critical and back keeps
/// `max_severity = "critical"` and both changes, and the live path reports the downgrade as
/// a change of severity, not as a new alert.
#[test]
fn firing_durations_run_to_the_data_and_severity_changes_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = SimGpus::prepare(
        &find_fake_library().expect("the fake NVML library is built (cargo build --workspace)"),
        OVERHEAT,
        "overheat.toml",
    )
    .expect("scenario");
    let db = dir.path().join("overheat.db");
    let mut config = Config {
        host: "hot-node".into(),
        database: db.clone(),
        interval: Duration::from_millis(sim.scenario.tick_ms()),
        sample_deadline: Duration::from_secs(2),
        ..Config::default()
    };
    config.http.enabled = false;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let start_ms = (chrono::Utc::now().timestamp() - 3600) * 1000;
    daemon::run(
        DaemonParts {
            config,
            rules: gpuwatch::rules::load_configured(true, &[]).expect("default rules"),
            alert_sink: Some(Box::new(
                move |tr: &gpuwatch::alerts::engine::Transition| {
                    sink.lock().expect("lock").push((
                        tr.rule.clone(),
                        tr.subject.gpu,
                        tr.state,
                        tr.severity_from.map(|s| s.as_str()),
                        tr.severity.as_str(),
                    ));
                },
            )),
            nvml: nvml::init(Some(&sim.library_path())).expect("init"),
            ticker: Box::new(sim.ticker(start_ms, f64::INFINITY, None).expect("ticker")),
            overrides: sim.process_overrides(start_ms),
            observer: None,
            reload: None,
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("daemon runs");

    let hot: Vec<_> = seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|t| t.0 == "gpu_overheating" && t.1 == Some(0))
        .map(|t| (t.2, t.3, t.4))
        .collect();
    assert_eq!(
        hot,
        [
            ("firing", None, "warning"),
            ("firing", Some("warning"), "critical"),
            ("firing", Some("critical"), "warning"),
        ],
        "one alert, then two changes of severity"
    );

    let data_end: i64 = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row("SELECT max(last_sample_ms) FROM gpus", [], |r| r.get(0))
        .expect("data end");
    let all = json(&gpuwatch(&["alerts", "--format", "json"], &db));
    let of = |gpu: i64| {
        all.as_array()
            .expect("array")
            .iter()
            .find(|a| a["rule"] == "gpu_overheating" && a["gpu_index"] == gpu)
            .unwrap_or_else(|| panic!("GPU {gpu}'s overheating alert in {all}"))
            .clone()
    };
    let live = of(0);
    let ms = |v: &Value, k: &str| v[k].as_i64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(live["state"], "firing", "{live}");
    assert_eq!(
        ms(&live, "firing_ms"),
        data_end - ms(&live, "fired_ms"),
        "{live}"
    );
    assert_eq!(
        ms(&live, "active_ms"),
        data_end - ms(&live, "started_ms"),
        "{live}"
    );
    assert!(ms(&live, "firing_ms") >= 5 * 60_000, "{live}");
    assert_eq!(live["severity"], "warning", "{live}");
    assert_eq!(live["max_severity"], "critical", "{live}");
    let changes = live["severity_changes"].as_array().expect("changes");
    let steps: Vec<(&str, &str)> = changes
        .iter()
        .map(|c| {
            (
                c["from"].as_str().expect("from"),
                c["to"].as_str().expect("to"),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [("warning", "critical"), ("critical", "warning")],
        "{live}"
    );
    let (up, down) = (ms(&changes[0], "at_ms"), ms(&changes[1], "at_ms"));
    assert!(ms(&live, "fired_ms") < up && up < down, "{live}");
    // The summary at the change, in words: above the threshold is not "-4 °C below", and a
    // throttle flag is not "thermal throttling: 0".
    assert_eq!(
        changes[0]["summary"].as_str(),
        Some(
            "GPU 0 (NVIDIA H100 80GB HBM3) on hot-node at 92 °C, 4 °C above its slowdown threshold; clocks not thermally throttled"
        ),
        "{live}"
    );
    assert!(
        live["summary"]
            .as_str()
            .is_some_and(|s| s.contains("at 87 °C, 1 °C below its slowdown")),
        "{live}"
    );
    assert_eq!(
        changes[0]["at"]
            .as_str()
            .map(|t| chrono::DateTime::parse_from_rfc3339(t)
                .expect("rfc3339")
                .timestamp_millis()),
        Some(up)
    );

    let cooled = of(1);
    assert_eq!(cooled["state"], "resolved", "{cooled}");
    assert_eq!(
        ms(&cooled, "active_ms"),
        ms(&cooled, "resolved_ms") - ms(&cooled, "started_ms")
    );
    assert_eq!(
        ms(&cooled, "firing_ms"),
        ms(&cooled, "resolved_ms") - ms(&cooled, "fired_ms")
    );
    assert_eq!(cooled["max_severity"], "warning");
    assert_eq!(cooled["severity_changes"], serde_json::json!([]));

    // The view says the same.
    let id = ms(&live, "alert_id");
    let q = json(&gpuwatch(
        &[
            "query",
            "--format",
            "json",
            &format!(
                "SELECT firing_ms, active_ms, pending_ms, max_severity, severity_changes FROM alerts WHERE alert_id = {id}"
            ),
        ],
        &db,
    ));
    let row = &q.as_array().expect("rows")[0];
    assert_eq!(row["firing_ms"], live["firing_ms"], "{row}");
    assert_eq!(row["active_ms"], live["active_ms"], "{row}");
    assert_eq!(row["pending_ms"], live["pending_ms"], "{row}");
    assert_eq!(row["max_severity"], "critical", "{row}");
    let view_changes: Value =
        serde_json::from_str(row["severity_changes"].as_str().expect("JSON text")).expect("json");
    assert_eq!(view_changes.as_array().map(Vec::len), Some(2), "{row}");

    // The table: a real firing time, the worst severity.
    let table = ok_stdout(&gpuwatch(&["alerts"], &db));
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains("warning (max critical)"), "{line}");
    assert!(!line.contains(" 0s+"), "{line}");

    // The incident: both changes in the timeline, in order, after it fired.
    let text = ok_stdout(&gpuwatch(&["incident", &id.to_string()], &db));
    assert!(text.contains("(warning, critical at its worst)"), "{text}");
    let at = |w: &str| {
        text.find(w)
            .unwrap_or_else(|| panic!("{w:?} missing:\n{text}"))
    };
    assert!(
        at("firing    after") < at("severity  warning → critical")
            && at("severity  warning → critical") < at("severity  critical → warning"),
        "{text}"
    );
}
