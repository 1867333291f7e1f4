//! The usage ledger (docs/USAGE.md) on the simulated clock, with attribution fixtures: on
//! each of two nodes a pod holds GPU 0 idle for 2 h while another pod works GPU 1, a Slurm
//! job works GPU 2 and a user's bare process GPU 3. `usage --by namespace` gives the held,
//! busy and idle-held hours within one tick; the ledger's idle-held span is `gpu_idle`'s
//! active span within one tick; the held and idle-held counters, scraped from both daemons
//! by a real Prometheus and summed by namespace, give the same totals as the two ledgers;
//! an imported nvidia-smi log (no holders) is accounted as holder unknown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpuwatch::clock::{Clock, Tick, Ticker};
use gpuwatch::daemon::{self, DaemonParts};
use gpuwatch::sampler::nvml;
use gpuwatch::sim::{SimGpus, find_fake_library};
use serde_json::Value;

use crate::common::gpuwatch_run;
use crate::http_support::{free_port, http_get, url_encode, wait_for};
use crate::notify_support::slack_server::SlackServer;
use crate::notify_support::smtp::{SmtpServer, require_aiosmtpd};
use crate::training_support;

const TICK_S: i64 = 5;
const HOURS: f64 = 2.5;
const TICK_H: f64 = TICK_S as f64 / 3600.0;

fn pod_cgroup(uid: &str) -> String {
    format!(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{}.scope",
        uid.replace('-', "_"),
        "ab".repeat(32)
    )
}

/// Five H100s for 2 h 30 m: GPU 0 (pod team-idle/notebook-0) works 20 min, idles 2 h and
/// works again; GPU 1 (pod team-work/train-0) works throughout; GPU 2 runs Slurm job 777
/// (carol); GPU 3 a bare process of dave's; GPU 4 (pod team-lazy/forgotten-0) idles
/// throughout.
fn scenario() -> String {
    let mut s = format!(
        "[scenario]\nname = \"usage\"\ntick_ms = {}\nduration = \"150m\"\nseed = 7\n",
        TICK_S * 1000
    );
    s.push_str(
        "[[gpu]]\nmodel = \"H100-SXM-80GB\"\n\
         [[gpu.timeline]]\nto = \"20m\"\nutil_gpu = { value = 60, noise = 5 }\n\
         [[gpu.timeline]]\nfrom = \"20m\"\nto = \"140m\"\nutil_gpu = 0\n\
         [[gpu.timeline]]\nfrom = \"140m\"\nutil_gpu = { value = 60, noise = 5 }\n",
    );
    for util in [95, 80, 70] {
        s.push_str(&format!(
            "[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu.timeline]]\nutil_gpu = {{ value = {util}, noise = 3 }}\n"
        ));
    }
    // GPU 4: a pod that never does anything.
    s.push_str("[[gpu]]\nmodel = \"H100-SXM-80GB\"\n[[gpu.timeline]]\nutil_gpu = 0\n");
    let procs = [
        (
            0,
            "alice",
            Some(pod_cgroup("0d4c6a1e-5b7f-4e2a-9c3d-1f2e3d4c5b6a")),
        ),
        (
            1,
            "bob",
            Some(pod_cgroup("8e2f1c3b-7a6d-4f5e-8b9c-2a1b0c9d8e7f")),
        ),
        (
            2,
            "carol",
            Some("0::/system.slice/slurmstepd.scope/job_777/step_0/user/task_0".to_string()),
        ),
        (3, "dave", None),
        (
            4,
            "erin",
            Some(pod_cgroup("1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d")),
        ),
    ];
    for (gpu, user, cgroup) in procs {
        s.push_str(&format!(
            "[[process]]\npid = {}\nname = \"python\"\nuser = \"{user}\"\ngpus = [{gpu}]\nmem_mib = 20000\n",
            5000 + gpu
        ));
        if let Some(c) = cgroup {
            s.push_str(&format!("cgroup = \"{c}\"\n"));
        }
    }
    for (name, ns, gpu) in [
        ("notebook-0", "team-idle", 0),
        ("train-0", "team-work", 1),
        ("forgotten-0", "team-lazy", 4),
    ] {
        s.push_str(&format!(
            "[[pod]]\nname = \"{name}\"\nnamespace = \"{ns}\"\ncontainer = \"main\"\ngpus = [{gpu}]\n"
        ));
    }
    s
}

/// The simulated clock, then holding still (the daemon keeps serving) until stopped.
struct HoldAtEnd<T: Ticker>(T);

impl<T: Ticker> Ticker for HoldAtEnd<T> {
    fn next_due(&mut self, stop: &AtomicBool) -> Option<(Tick, Option<Instant>)> {
        if let Some(t) = self.0.next_due(stop) {
            return Some(t);
        }
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
    fn next(&mut self, stop: &AtomicBool) -> Option<Tick> {
        self.next_due(stop).map(|(t, _)| t)
    }
    fn interval(&self) -> Duration {
        self.0.interval()
    }
    fn clock(&self) -> Clock {
        self.0.clock()
    }
    fn simulated(&self) -> bool {
        self.0.simulated()
    }
}

struct Node {
    db: std::path::PathBuf,
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: Option<tempfile::TempDir>,
}

impl Node {
    fn start(host: &str, t0: i64) -> Node {
        Node::start_in(tempfile::tempdir().expect("tempdir"), host, t0, "")
    }

    /// A daemon in `dir` (its database `g.db`, kept across runs), `extra` added to its config.
    fn start_in(dir: tempfile::TempDir, host: &str, t0: i64, extra: &str) -> Node {
        let lib = find_fake_library().expect("cargo build --workspace first");
        let sim = SimGpus::prepare(&lib, &scenario(), "usage.toml").expect("scenario");
        let db = dir.path().join("g.db");
        let port = free_port();
        let text = format!(
            "host = \"{host}\"\ndatabase = \"{}\"\ninterval = \"5s\"\nsample_deadline = \"2s\"\n{extra}\n[http]\nlisten = \"127.0.0.1:{port}\"\n",
            db.display()
        );
        let mut cfg = gpuwatch::config::Config::parse(&text, &dir.path().join("g.toml"))
            .unwrap_or_else(|e| panic!("config: {e}"));
        let kubelet = sim.serve_pods().expect("kubelet").expect("pods");
        kubelet.configure(&mut cfg);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let _kubelet = kubelet;
            daemon::run(
                DaemonParts {
                    config: cfg,
                    rules: gpuwatch::rules::load_configured(true, &[]).expect("rules"),
                    alert_sink: None,
                    nvml: nvml::init(Some(&sim.library_path())).expect("init"),
                    ticker: Box::new(HoldAtEnd(
                        sim.ticker(t0, f64::INFINITY, None).expect("ticker"),
                    )),
                    overrides: sim.process_overrides(t0),
                    observer: None,
                    reload: None,
                },
                stop2,
            )
            .expect("daemon");
        });
        Node {
            db,
            port,
            stop,
            thread: Some(thread),
            dir: Some(dir),
        }
    }

    /// Stops the daemon; its directory (and database) stays for another run.
    fn stop(mut self) -> tempfile::TempDir {
        self.halt();
        self.dir.take().expect("dir")
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Waits until the last tick is stored and evaluated (the ledger's counters are final).
    fn wait_done(&self, t_last: i64) {
        wait_for("the simulated run", Duration::from_secs(600), || {
            let conn = gpuwatch::store::open_read_only(&self.db).ok()?;
            let (n, last): (i64, Option<i64>) = conn
                .query_row("SELECT count(*), min(last_sample_ms) FROM gpus", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .ok()?;
            (n == 5 && last? >= t_last).then_some(())
        });
        // The evaluator runs after the commit: its counters reach /metrics right after.
        wait_for(
            "the counters of the last tick",
            Duration::from_secs(30),
            || {
                let (code, _, body) = http_get(self.port, "/metrics", None, &[]);
                (code == 200 && body.contains("gpuwatch_gpu_held_seconds_total")).then_some(())
            },
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    fn usage(&self, by: &str) -> Value {
        let db = self.db.to_str().expect("path");
        let (code, out, err) = gpuwatch_run(&["usage", "--db", db, "--by", by, "--format", "json"]);
        assert_eq!(code, 0, "usage --by {by}: {err}");
        serde_json::from_str(&out).expect("json")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.halt();
    }
}

fn row<'a>(doc: &'a Value, key: &str) -> &'a Value {
    doc["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no row {key} in {doc:#}"))
}

fn near(got: &Value, want: f64, what: &str) {
    let g = got.as_f64().unwrap_or_else(|| panic!("{what}: {got}"));
    assert!(
        (g - want).abs() <= TICK_H + 1e-3,
        "{what}: {g} h, want {want} h within one tick"
    );
}

#[test]
fn idle_held_hours_agree_with_gpu_idle_and_with_prometheus_across_two_nodes() {
    training_support::require_tools();
    let t0 = (chrono::Utc::now().timestamp() - 4 * 3600) * 1000;
    let t_last = t0 + (HOURS * 3600.0) as i64 * 1000 - TICK_S * 1000;
    let nodes = [Node::start("node-a", t0), Node::start("node-b", t0)];
    for n in &nodes {
        n.wait_done(t_last);
    }

    // Per node: the idle pod held its GPU 2.5 h, 2 h of it idle; the other pod worked.
    let mut held_by_ns = std::collections::BTreeMap::<String, f64>::new();
    let mut idle_by_ns = std::collections::BTreeMap::<String, f64>::new();
    for n in &nodes {
        let doc = n.usage("namespace");
        // A pod that held its GPU idle throughout, beside one that worked throughout.
        let lazy = row(&doc, "team-lazy");
        near(&lazy["held_hours"], HOURS, "team-lazy held");
        near(&lazy["idle_held_hours"], HOURS, "team-lazy idle-held");
        near(&lazy["busy_hours"], 0.0, "team-lazy busy");
        // One that worked 20 min, idled 2 h and worked again: NVML's utilisation is the
        // mean over the sample period before each sample, so the first busy sample after the
        // idle comes one tick after the work resumed (2 h + one tick of idle as observed).
        let idle = row(&doc, "team-idle");
        near(&idle["held_hours"], HOURS, "team-idle held");
        near(&idle["idle_held_hours"], 2.0, "team-idle idle-held");
        near(&idle["busy_hours"], HOURS - 2.0 - TICK_H, "team-idle busy");
        assert!(
            (idle["idle_share"].as_f64().unwrap() - 0.8).abs() < 0.01,
            "{idle}"
        );
        assert!((idle["longest_idle_s"].as_f64().unwrap() - 7200.0).abs() <= TICK_S as f64);
        let work = row(&doc, "team-work");
        near(&work["held_hours"], HOURS, "team-work held");
        near(&work["busy_hours"], HOURS, "team-work busy");
        near(&work["idle_held_hours"], 0.0, "team-work idle-held");
        assert_eq!(
            doc["rows"][0]["key"], "team-lazy",
            "sorted by idle hours: {doc:#}"
        );
        assert_eq!(
            doc["rows"][1]["key"], "team-idle",
            "sorted by idle hours: {doc:#}"
        );
        for r in doc["rows"].as_array().unwrap() {
            let key = r["key"].as_str().unwrap_or("").to_string();
            *held_by_ns.entry(key.clone()).or_default() += r["held_hours"].as_f64().unwrap();
            *idle_by_ns.entry(key).or_default() += r["idle_held_hours"].as_f64().unwrap();
        }
        // The Slurm job and the bare process are holders too.
        let users = n.usage("user");
        near(&row(&users, "carol")["busy_hours"], HOURS, "carol busy");
        near(&row(&users, "dave")["busy_hours"], HOURS, "dave busy");
        near(
            &row(&n.usage("training_job"), "777")["held_hours"],
            HOURS,
            "job 777",
        );

        // gpu_idle's active span (from its window's start, as `{active}` counts) is the
        // ledger's idle-held span, within one tick.
        let conn = gpuwatch::store::open_read_only(&n.db).expect("db");
        let (since, resolved): (i64, i64) = conn
            .query_row(
                "SELECT active_since_ms, resolved_ms FROM alert_state a JOIN gpus g ON g.id = a.gpu_id
                 WHERE a.rule = 'gpu_idle' AND g.gpu_index = 0",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("one gpu_idle episode on GPU 0, resolved");
        let (from, to): (i64, i64) = conn
            .query_row(
                "SELECT min(from_ms), max(to_ms) FROM gpu_usage WHERE gpu_index = 0 AND state = 'idle_held'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("idle rows");
        let tick = TICK_S * 1000;
        assert!(
            (from - (since - 600_000)).abs() <= tick && (to - resolved).abs() <= tick,
            "ledger idle {from}..{to} vs gpu_idle active {}..{resolved}",
            since - 600_000
        );
        assert!((from - (t0 + 20 * 60_000)).abs() <= tick, "idle from 20:00");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM usage_intervals", [], |r| r.get(0))
            .expect("count");
        assert!(rows <= 12, "one row per change, not per tick: {rows}");
    }

    // A real Prometheus scrapes both daemons; its sums by namespace are the ledgers' totals.
    let dir = tempfile::tempdir().expect("tmp");
    let targets: Vec<String> = nodes
        .iter()
        .map(|n| format!("\"127.0.0.1:{}\"", n.port))
        .collect();
    let prom = training_support::Prometheus::start_configured(
        dir.path(),
        &dir.path().join("data"),
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gpuwatch\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    );
    let query = |q: &str| -> Vec<Value> {
        let (code, _, body) = http_get(
            prom.port,
            &format!("/api/v1/query?query={}", url_encode(q)),
            None,
            &[],
        );
        assert_eq!(code, 200, "{q}: {body}");
        let v: Value = serde_json::from_str(&body).expect("json");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    };
    let sums = |family: &str| -> std::collections::BTreeMap<String, f64> {
        query(&format!("sum by (namespace) ({family})"))
            .iter()
            .map(|s| {
                (
                    s["metric"]["namespace"].as_str().unwrap_or("").to_string(),
                    s["value"][1].as_str().unwrap().parse::<f64>().unwrap() / 3600.0,
                )
            })
            .collect()
    };
    let held = wait_for("both nodes scraped", Duration::from_secs(60), || {
        let up = query("up{job=\"gpuwatch\"} == 1");
        let held = sums("gpuwatch_gpu_held_seconds_total");
        (up.len() == 2 && held.get("team-idle").is_some_and(|h| *h > 4.0)).then_some(held)
    });
    let idle = sums("gpuwatch_gpu_idle_held_seconds_total");
    for (ns, want) in &held_by_ns {
        if ns.is_empty() {
            continue;
        }
        let got = held.get(ns).copied().unwrap_or(0.0);
        assert!(
            (got - want).abs() <= 2.0 * TICK_H + 1e-3,
            "{ns}: Prometheus sums {got} h held, the ledgers {want} h"
        );
        let (got, want) = (idle.get(ns).copied().unwrap_or(0.0), idle_by_ns[ns]);
        assert!(
            (got - want).abs() <= 2.0 * TICK_H + 1e-3,
            "{ns}: Prometheus sums {got} h idle-held, the ledgers {want} h"
        );
    }
    assert!((held["team-idle"] - 2.0 * HOURS).abs() < 0.01, "{held:?}");
    assert!((idle["team-idle"] - 4.0).abs() < 0.01, "{idle:?}");
    assert!((idle["team-lazy"] - 2.0 * HOURS).abs() < 0.01, "{idle:?}");

    // The same document over HTTP.
    let (code, _, body) = http_get(nodes[0].port, "/api/v1/usage?by=namespace", None, &[]);
    assert_eq!(code, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(api["rows"], nodes[0].usage("namespace")["rows"]);
    let (code, _, body) = http_get(nodes[0].port, "/api/v1/usage?by=galaxy", None, &[]);
    assert_eq!(code, 400, "{body}");
}

#[test]
fn an_imported_nvidia_smi_log_is_accounted_as_holder_unknown() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("i.db");
    let db = db.to_str().expect("path");
    let log = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/import/units.csv");
    let (code, _, err) = gpuwatch_run(&["import", "nvidia-smi", "--db", db, log]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = gpuwatch_run(&["usage", "--db", db, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).expect("json");
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{doc:#}");
    assert_eq!(rows[0]["holder_known"], false);
    assert_eq!(rows[0]["held_hours"], 0.0);
    assert!(rows[0]["unknown_hours"].as_f64().unwrap() > 0.0, "{doc:#}");
    // By GPU: the held GPU's minute is unknown, the empty one's free.
    let (_, out, _) = gpuwatch_run(&["usage", "--db", db, "--by", "gpu", "--format", "csv"]);
    assert!(out.starts_with("gpu,gpus,held_hours,"), "{out}");
    assert_eq!(out.lines().count(), 3, "{out}");
    // Nothing in the range: exit non-zero, saying where the ledger is.
    let (code, _, err) = gpuwatch_run(&[
        "usage",
        "--db",
        db,
        "--from",
        "2020-01-01T00:00:00Z",
        "--to",
        "2020-01-02T00:00:00Z",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("the ledger spans"), "{err}");
}

/// The last Monday 08:00 UTC at least two days before now.
fn monday_8am() -> i64 {
    use chrono::{Datelike, Duration as D, Timelike};
    let mut t = chrono::Utc::now() - D::days(2);
    while t.weekday() != chrono::Weekday::Mon {
        t -= D::days(1);
    }
    let t = t
        .with_hour(8)
        .and_then(|t| t.with_minute(0))
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_nanosecond(0))
        .expect("08:00");
    t.timestamp_millis()
}

#[test]
fn the_weekly_digest_arrives_once_per_period_across_a_restart() {
    require_aiosmtpd();
    let slack = SlackServer::start();
    let hook = SlackServer::start();
    let mail = SmtpServer::start();
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("slack-url"), slack.url()).expect("url");
    let extra = format!(
        "[usage]\ndigest = \"weekly\"\ndigest_day = \"monday\"\ndigest_hour = 9\ndigest_zone = \"UTC\"\n\
         currency = \"EUR\"\ncost_per_gpu_hour = {{ \"NVIDIA H100 80GB HBM3\" = 2.5, default = 1.0 }}\n\
         [notify]\ngroup_wait = \"0s\"\n\
         [[notify.slack]]\nname = \"chat\"\nwebhook_url_file = \"{}\"\nmin_interval = \"0s\"\n\
         [[notify.webhook]]\nname = \"hook\"\nurl = \"{}\"\n\
         [[notify.email]]\nname = \"mail\"\nsmtp_host = \"127.0.0.1\"\nsmtp_port = {}\ntls = \"none\"\n\
         from = \"gpuwatch@example.com\"\nto = [\"team@example.com\"]\n",
        dir.path().join("slack-url").display(),
        hook.url(),
        mail.port()
    );
    // 08:00 to 10:30 on a Monday: the week ends at 09:00; its digest goes once the idle
    // test's window has passed (09:10).
    let t0 = monday_8am();
    let node = Node::start_in(dir, "node-d", t0, &extra);
    node.wait_done(t0 + (HOURS * 3600.0) as i64 * 1000 - TICK_S * 1000);
    // Alerts go to these receivers too; the digest is its own message.
    let digests = |hook: &SlackServer| -> Vec<Value> {
        hook.received()
            .iter()
            .map(|r| r.json().clone())
            .filter(|j| j["kind"] == "usage_digest")
            .collect()
    };
    let slack_digests = |slack: &SlackServer| -> usize {
        slack
            .received()
            .iter()
            .filter(|r| {
                r.json()["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("GPU usage on"))
            })
            .count()
    };
    let mail_digests = |mail: &SmtpServer| -> Vec<crate::notify_support::smtp::Received> {
        mail.messages()
            .into_iter()
            .filter(|m| {
                m.header("Subject")
                    .unwrap_or("")
                    .contains("GPU usage on node-d")
            })
            .collect()
    };
    let d = wait_for("the digest at the webhook", Duration::from_secs(30), || {
        digests(&hook).first().cloned()
    });
    assert_eq!(d["period"], "weekly");
    assert_eq!(d["host"], "node-d");
    assert_eq!(d["to_ms"], t0 + 3_600_000, "the week ended Monday 09:00");
    assert_eq!(d["currency"], "EUR");
    let top = d["top"].as_array().expect("top");
    assert_eq!(top[0]["holder"], "team-lazy/forgotten-0", "{d:#}");
    near(
        &top[0]["idle_held_hours"],
        1.0,
        "the idle pod's hour of the week",
    );
    near(&top[0]["cost"], 2.5, "2.5 EUR a GPU-hour");
    assert_eq!(top[1]["holder"], "team-idle/notebook-0");
    near(&top[1]["idle_held_hours"], 2.0 / 3.0, "idle from 08:20");
    wait_for("the digest on Slack", Duration::from_secs(30), || {
        (slack_digests(&slack) == 1).then_some(())
    });
    let mails = wait_for("the digest by email", Duration::from_secs(30), || {
        let m = mail_digests(&mail);
        (!m.is_empty()).then_some(m)
    });
    assert!(
        mails[0].part("image/png").is_some(),
        "the email has its chart"
    );
    assert!(mails[0].text("text/html").contains("team-lazy/forgotten-0"));

    // A restart after the period: nothing more (the period is recorded with its rows).
    let dir = node.stop();
    let t1 = t0 + (HOURS * 3600.0) as i64 * 1000;
    let node = Node::start_in(dir, "node-d", t1, &extra);
    node.wait_done(t1 + (HOURS * 3600.0) as i64 * 1000 - TICK_S * 1000);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(digests(&hook).len(), 1, "one digest per period");
    assert_eq!(slack_digests(&slack), 1);
    assert_eq!(mail_digests(&mail).len(), 1);
    let conn = gpuwatch::store::open_read_only(&node.db).expect("db");
    let periods: i64 = conn
        .query_row("SELECT count(*) FROM usage_digests", [], |r| r.get(0))
        .expect("count");
    assert_eq!(periods, 1);
}
