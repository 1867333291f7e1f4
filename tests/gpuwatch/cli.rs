//! The `gpuwatch` binary as people run it: exit codes, one-line errors, a real daemon on the
//! fake library in wall-clock mode, `/healthz`, and `status`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::sim;

fn gpuwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.env_remove("RUST_LOG");
    c
}

fn stderr_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bad_config_exits_2_with_one_line_naming_the_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "interval = \"1s\"\nintervall = \"2s\"\n").expect("write");
    let o = gpuwatch()
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    let lines = stderr_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let want = format!("error: {}:2:1: unknown field `intervall`", cfg.display());
    assert!(lines[0].starts_with(&want), "{lines:?}");
}

#[test]
fn missing_nvml_library_exits_3_with_cause_and_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = gpuwatch()
        .args([
            "run",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
            "--db",
        ])
        .arg(dir.path().join("x.db"))
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(3));
    let lines = stderr_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("cannot load the NVML library /nonexistent/libnvidia-ml.so.1"),
        "{lines:?}"
    );
    assert!(lines[0].contains("install the NVIDIA driver"), "{lines:?}");
}

#[test]
fn a_library_that_is_not_nvml_is_reported_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bogus = dir.path().join("libnvidia-ml.so.1");
    std::fs::write(&bogus, b"not an ELF file").expect("write");
    let o = gpuwatch()
        .args(["run", "--nvml-library"])
        .arg(&bogus)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(3));
    let lines = stderr_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("error: cannot load the NVML library"),
        "{lines:?}"
    );
}

#[test]
fn status_of_a_missing_database_is_one_line() {
    let o = gpuwatch()
        .args(["status", "--db", "/nonexistent/dir/x.db"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1));
    let lines = stderr_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("/nonexistent/dir/x.db"), "{lines:?}");
    // ... and says how to get one.
    assert!(
        lines[0].contains("`gpuwatch run` creates it") && lines[0].contains("--db PATH"),
        "{lines:?}"
    );
}

/// A silence of a rule no loaded rule has is kept (a rule may come later) but said, with
/// the rule it probably meant.
#[test]
fn a_silence_of_an_unknown_rule_is_warned_with_did_you_mean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    let add = |m: &str| {
        gpuwatch()
            .args([
                "silence",
                "add",
                "--config",
                "/dev/null",
                "--for",
                "1h",
                "--match",
                m,
                "--db",
            ])
            .arg(&db)
            .output()
            .expect("silence add")
    };
    let o = add("rule=gpu_idel,gpu=3");
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no loaded rule is named \"gpu_idel\"")
            && err.contains("did you mean `gpu_idle`?"),
        "{err}"
    );
    for known in [
        "rule=gpu_idle",
        "rule=~gpu_.*",
        "alertname=gpuwatch_database_full",
        "gpu=3",
    ] {
        let o = add(known);
        assert!(o.status.success());
        assert_eq!(String::from_utf8_lossy(&o.stderr), "", "{known}");
    }
}

#[test]
fn help_names_every_rules_subcommand() {
    let o = gpuwatch().arg("--help").output().expect("help");
    let help = String::from_utf8_lossy(&o.stdout);
    let line = help
        .lines()
        .find(|l| l.trim_start().starts_with("rules"))
        .unwrap_or_else(|| panic!("{help}"));
    assert!(
        line.contains("rules check") && line.contains("rules test"),
        "{line}"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// GET `path` and return (status code, body).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Some((code, body))
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Daemon(Child);

impl Daemon {
    /// SIGTERM, a clean exit within 10 s, and everything it logged.
    fn stop(&mut self) -> String {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let status = wait_for("exit", Duration::from_secs(10), || {
            self.0.try_wait().ok().flatten()
        });
        assert!(status.success(), "clean exit on SIGTERM: {status:?}");
        let mut err = String::new();
        self.0
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .expect("read");
        err
    }
}

/// `gpuwatch status --format json` of `db`; `None` while it has no readable answer.
fn status_json(db: &Path) -> Option<serde_json::Value> {
    let o = gpuwatch()
        .args(["status", "--format", "json", "--db"])
        .arg(db)
        .output()
        .ok()?;
    serde_json::from_slice(&o.stdout).ok()
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_daemon(lib: &Path, db: &Path, port: u16, extra: &str) -> Daemon {
    start_daemon_as(Some("testhost"), None, lib, db, port, extra)
}

/// A daemon with `host` in its config (or none) and `NODE_NAME` in its environment (or none).
fn start_daemon_as(
    host: Option<&str>,
    node_name: Option<&str>,
    lib: &Path,
    db: &Path,
    port: u16,
    extra: &str,
) -> Daemon {
    let cfg = db.with_extension("toml");
    let host = host
        .map(|h| format!("host = \"{h}\"\n"))
        .unwrap_or_default();
    std::fs::write(
        &cfg,
        format!(
            "{host}database = \"{}\"\nnvml_library = \"{}\"\ninterval = \"200ms\"\n{extra}\n[http]\nlisten = \"127.0.0.1:{port}\"\nstall_after = \"1s\"\n",
            db.display(),
            lib.display()
        ),
    )
    .expect("write config");
    let mut cmd = gpuwatch();
    match node_name {
        Some(n) => cmd.env("NODE_NAME", n),
        None => cmd.env_remove("NODE_NAME"),
    };
    let child = cmd
        .args(["run", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn daemon");
    Daemon(child)
}

const WALL_SCENARIO: &str = r#"
[scenario]
name = "wall"
duration = "1h"
[[gpu]]
model = "H100-SXM-80GB"
[[gpu]]
model = "L40S"
[[process]]
pid = 4000000
name = "python"
gpu = 1
mem_mib = 1234
[[event]]
gpu = 0
at = "1s"
xid = 48
"#;

#[test]
fn run_serves_healthz_stores_samples_and_stops_cleanly_on_sigterm() {
    let sim = sim(WALL_SCENARIO);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    let port = free_port();
    let mut d = start_daemon(&sim.library_path(), &db, port, "");
    let (code, body) = wait_for("healthz", Duration::from_secs(20), || {
        http_get(port, "/healthz")
    });
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"status\":\"ok\""), "{body}");
    // Let a few ticks and the XID at simulated second 1 through.
    wait_for("samples", Duration::from_secs(20), || {
        let v = status_json(&db)?;
        let gpus = &v["gpus"];
        (gpus.as_array()?.len() == 2 && gpus[1]["processes"].as_array()?.len() == 1).then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500));
    let err = d.stop();
    assert!(!err.contains("panicked"), "{err}");
    // A fresh database: one line for its schema, and the writer's stats in words at exit.
    assert_eq!(err.matches("schema").count(), 1, "{err}");
    assert!(
        err.contains("created the database schema (version "),
        "{err}"
    );
    assert!(err.contains("store closed: wrote "), "{err}");
    assert!(!err.contains("WriterStats"), "{err}");

    let v = status_json(&db).expect("status json");
    assert_eq!(v["notify"]["receivers"], serde_json::json!([]));
    let v = &v["gpus"];
    assert_eq!(v[0]["host"], "testhost");
    assert_eq!(v[0]["uuid"], sim.scenario.gpu(0).uuid.as_str());
    assert_eq!(v[1]["processes"][0]["pid"], 4000000);
    assert_eq!(v[1]["processes"][0]["used_mem_bytes"], 1234u64 << 20);
    let o = gpuwatch()
        .args(["status", "--db"])
        .arg(&db)
        .output()
        .expect("status");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("H100"), "{table}");
    assert!(table.contains("L40S"), "{table}");

    let conn = rusqlite::Connection::open(&db).expect("open");
    let xids: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE kind = 'xid' AND code = 48",
            [],
            |r| r.get(0),
        )
        .expect("query");
    assert_eq!(xids, 1, "the XID was stored");
}

/// In a Kubernetes pod the host name is the pod's, new with every rollout: the host is
/// `host` from the config, else `NODE_NAME` (the downward API's node name), the same across
/// restarts; `/metrics` names it too.
#[test]
fn the_host_is_node_name_across_restarts_unless_the_config_names_one() {
    let sim = sim(WALL_SCENARIO);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    for _restart in 0..2 {
        let port = free_port();
        let mut d = start_daemon_as(
            None,
            Some("gpu-node-17"),
            &sim.library_path(),
            &db,
            port,
            "",
        );
        let metrics = wait_for("a sample on /metrics", Duration::from_secs(20), || {
            http_get(port, "/metrics")
                .filter(|(c, b)| *c == 200 && b.contains("DCGM_FI_DEV_GPU_TEMP{"))
        })
        .1;
        assert!(metrics.contains("Hostname=\"gpu-node-17\""), "{metrics}");
        let err = d.stop();
        assert!(!err.contains("panicked"), "{err}");
    }
    let conn = rusqlite::Connection::open(&db).expect("open");
    let hosts: Vec<String> = conn
        .prepare("SELECT name FROM hosts ORDER BY id")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(hosts, ["gpu-node-17"], "one host across restarts");
    // `host` in the config wins over NODE_NAME; `run --check` says which host it will use.
    let cfg = dir.path().join("named.toml");
    std::fs::write(&cfg, "host = \"named-in-config\"\n").expect("write");
    for (config, want) in [
        (None, "host gpu-node-17;"),
        (Some(&cfg), "host named-in-config;"),
    ] {
        let mut c = gpuwatch();
        c.env("NODE_NAME", "gpu-node-17").args(["run", "--check"]);
        match config {
            Some(p) => c.arg("--config").arg(p),
            None => c.args(["--config", "/dev/null"]),
        };
        let o = c.output().expect("run --check");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains(want),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn healthz_turns_503_when_every_gpu_stops_answering() {
    let scenario = format!(
        "{WALL_SCENARIO}\n[[fault]]\ngpu = [0, 1]\nsymbol = \"nvmlDeviceGetUtilizationRates\"\nfrom = \"2s\"\nblock = \"forever\"\n"
    );
    let sim = sim(&scenario);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _d = start_daemon(&sim.library_path(), &dir.path().join("g.db"), port, "");
    let (code, _) = wait_for("healthz", Duration::from_secs(20), || {
        http_get(port, "/healthz")
    });
    assert_eq!(code, 200);
    let (code, body) = wait_for("503", Duration::from_secs(20), || {
        http_get(port, "/healthz").filter(|(c, _)| *c == 503)
    });
    assert_eq!(code, 503);
    assert!(body.contains("stalled"), "{body}");
}

#[test]
fn nvml_init_failures_exit_3_with_one_line_naming_cause_and_fix() {
    let cases = [
        (
            "DRIVER_NOT_LOADED",
            "kernel driver is not loaded",
            "modprobe nvidia",
        ),
        ("NO_PERMISSION", "no permission", "/dev/nvidia"),
        ("LIB_RM_VERSION_MISMATCH", "different versions", "reboot"),
        ("UNKNOWN", "NVML initialisation failed", "nvidia-smi"),
    ];
    for (code, cause, fix) in cases {
        let sim = sim(&format!(
            "[scenario]\nname = \"x\"\ninit_error = \"{code}\"\n[[gpu]]\nmodel = \"T4\"\n"
        ));
        let dir = tempfile::tempdir().expect("tempdir");
        let o = gpuwatch()
            .args(["run", "--nvml-library"])
            .arg(sim.library_path())
            .arg("--db")
            .arg(dir.path().join("x.db"))
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(3), "{code}");
        let lines = stderr_lines(&o);
        assert_eq!(lines.len(), 1, "{code}: {lines:?}");
        assert!(
            lines[0].contains(cause) && lines[0].contains(fix),
            "{code}: {lines:?}"
        );
    }
}

#[test]
fn sighup_reloads_rules_and_a_broken_file_keeps_the_running_ones() {
    let sim = sim(WALL_SCENARIO);
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("r.toml");
    let rule = |name: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\nseverity = \"info\"\ncondition = \"util_gpu >= 0\"\nsummary = \"{name} on {{gpu}}\"\n"
        )
    };
    std::fs::write(&rules, rule("first_rule")).expect("write");
    let log = dir.path().join("log.txt");
    let cfg = rules_config(dir.path(), &sim.library_path());
    let mut d = run_logging(&cfg, &log);
    let pid = d.0.id() as i32;
    let logged = |needle: &str| {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(needle)
            .then_some(())
    };
    wait_for("first_rule fires", Duration::from_secs(20), || {
        logged("first_rule on 0")
    });

    std::fs::write(&rules, "[[rule]]\nname = \"broken\"\nseverity = \"info\"\ncondition = \"gpu_util > 1\"\nsummary = \"x\"\n").expect("write");
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    wait_for("the reload error", Duration::from_secs(20), || {
        logged("r.toml:4:14: unknown metric `gpu_util`")
    });
    assert!(logged("rule reload failed, the previous rules keep running").is_some());
    assert!(
        d.0.try_wait().expect("wait").is_none(),
        "the daemon keeps running"
    );

    std::fs::write(&rules, rule("second_rule")).expect("write");
    unsafe { libc::kill(pid, libc::SIGHUP) };
    wait_for("second_rule fires", Duration::from_secs(20), || {
        logged("second_rule on 0")
    });
    assert!(logged("rules reloaded").is_some());
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = wait_for("exit", Duration::from_secs(10), || {
        d.0.try_wait().ok().flatten()
    });
    assert!(status.success());
    // The alerts of the rule the reload removed ended; they are not left live in the store.
    let conn = rusqlite::Connection::open(dir.path().join("g.db")).expect("open");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).expect(sql) };
    assert_eq!(
        count(
            "SELECT count(*) FROM alerts WHERE rule = 'first_rule' AND state IN ('pending', 'firing')"
        ),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM alerts WHERE rule = 'first_rule' AND state = 'resolved'"),
        2
    );
    assert_eq!(
        count("SELECT count(*) FROM alerts WHERE rule = 'second_rule' AND state = 'firing'"),
        2
    );
}

#[test]
fn a_restart_neither_loses_nor_refires_alerts_and_pending_time_counts() {
    let sim = sim(WALL_SCENARIO);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("r.toml"),
        "[[rule]]\nname = \"always\"\nseverity = \"info\"\ncondition = \"util_gpu >= 0\"\nsummary = \"always on {gpu}\"\n\
         [[rule]]\nname = \"slow\"\nseverity = \"info\"\ncondition = \"util_gpu >= 0\"\nfor = \"6s\"\nsummary = \"slow on {gpu}\"\n",
    )
    .expect("rules");
    let cfg = rules_config(dir.path(), &sim.library_path());
    let start = |log: &std::path::Path| run_logging(&cfg, log);
    let read = |log: &std::path::Path| std::fs::read_to_string(log).unwrap_or_default();

    // First run: `always` fires on both GPUs, `slow` is still pending after ~3 s; then kill -9.
    let log1 = dir.path().join("1.log");
    let mut d = start(&log1);
    wait_for("always fires", Duration::from_secs(20), || {
        read(&log1).contains("always on 1").then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !read(&log1).contains("slow on"),
        "slow must still be pending: {}",
        read(&log1)
    );
    let _ = d.0.kill();
    let _ = d.0.wait();

    // Second run: the firing alerts are restored, not fired again; `slow` fires soon, its
    // pending time before the crash counting toward `for`.
    let log2 = dir.path().join("2.log");
    let started = Instant::now();
    let _d2 = start(&log2);
    wait_for("slow fires", Duration::from_secs(20), || {
        read(&log2).contains("slow on 1").then_some(())
    });
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "pending time before the restart counts: fired after {took:?}"
    );
    assert!(
        read(&log2).contains("restored live alerts"),
        "{}",
        read(&log2)
    );
    assert!(
        !read(&log2).contains("always on"),
        "a firing alert is not fired again: {}",
        read(&log2)
    );
}

/// A daemon config in `dir` on the simulated library `lib`, with only the rules of
/// `dir/r.toml`, sampling every 200 ms, without HTTP.
fn rules_config(dir: &Path, lib: &Path) -> std::path::PathBuf {
    let cfg = dir.join("g.toml");
    std::fs::write(
        &cfg,
        format!(
            "database = \"{}\"\nnvml_library = \"{}\"\ninterval = \"200ms\"\n[rules]\ndefault_rules = false\nfiles = [\"r.toml\"]\n[http]\nenabled = false\n",
            dir.join("g.db").display(),
            lib.display()
        ),
    )
    .expect("config");
    cfg
}

/// `gpuwatch run --config cfg` with its log in `log`.
fn run_logging(cfg: &Path, log: &Path) -> Daemon {
    let child = gpuwatch()
        .args(["run", "--config"])
        .arg(cfg)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("spawn");
    Daemon(child)
}

const KUBE_SCENARIO: &str = r#"
[scenario]
name = "kube"
duration = "1h"
[[gpu]]
model = "H100-SXM-80GB"
uuid = "GPU-5a7f9c2e-1b3d-4e6f-8a9b-0c1d2e3f4a5b"
[[gpu]]
model = "H100-SXM-80GB"
uuid = "GPU-6b8fad3f-2c4e-4f70-9bac-1d2e3f4a5b6c"
[[process]]
pid = 4000000
name = "python"
gpu = 1
mem_mib = 1234
"#;

/// `gpuwatch run` with a kubelet (a pod-resources server on a unix socket): the GPU the
/// device plugin allocated to a pod shows that pod in `status` and in `gpu_allocations`,
/// though no process of the pod is visible; the other GPU's holder stays unknown.
#[test]
fn run_labels_gpus_with_the_pods_the_kubelet_allocated_them_to() {
    use gpuwatch::attribution::kubelet::{proto, server};
    let sim = sim(KUBE_SCENARIO);
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("kubelet.sock");
    let pods = server::PodList::default();
    pods.set(proto::ListPodResourcesResponse {
        pod_resources: vec![proto::PodResources {
            name: "llm-ft-7".into(),
            namespace: "research".into(),
            containers: vec![proto::ContainerResources {
                name: "trainer".into(),
                devices: vec![proto::ContainerDevices {
                    resource_name: "nvidia.com/gpu".into(),
                    device_ids: vec!["GPU-5a7f9c2e-1b3d-4e6f-8a9b-0c1d2e3f4a5b".into()],
                }],
            }],
        }],
    });
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = rt.spawn({
        let (sock, pods) = (sock.clone(), pods.clone());
        async move {
            server::serve(&sock, pods, async {
                let _ = stop_rx.await;
            })
            .await
        }
    });
    wait_for("socket", Duration::from_secs(10), || {
        sock.exists().then_some(())
    });
    let db = dir.path().join("g.db");
    let port = free_port();
    let extra = format!(
        "[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n",
        sock.display()
    );
    let _d = start_daemon(&sim.library_path(), &db, port, &extra);
    let gpus = wait_for("pods in status", Duration::from_secs(30), || {
        let gpus = status_json(&db)?["gpus"].as_array()?.clone();
        (gpus.len() == 2 && gpus[0]["pod"].is_string()).then_some(gpus)
    });
    assert_eq!(gpus[0]["pod"], "llm-ft-7");
    assert_eq!(gpus[0]["namespace"], "research");
    assert_eq!(gpus[0]["container"], "trainer");
    assert!(gpus[1]["pod"].is_null(), "{:?}", gpus[1]);
    // The simulated process has no cgroup: its placement is unknown (null), not "host".
    let p = &gpus[1]["processes"][0];
    assert!(
        p["pod"].is_null() && p["container_id"].is_null() && p["runtime"].is_null(),
        "{p}"
    );
    let o = gpuwatch()
        .args(["query", "--format", "csv", "--db"])
        .arg(&db)
        .arg("SELECT gpu_index, pod, namespace, container, resource, to_ms IS NULL FROM gpu_allocations")
        .output()
        .expect("query");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("0,llm-ft-7,research,trainer,nvidia.com/gpu,1"),
        "{out}"
    );
    let _ = stop_tx.send(());
    rt.block_on(serving).expect("join").expect("served");
}

/// `[kubernetes] enabled = true` on a node whose kubelet socket is missing: one warning that
/// says where it looked and what it falls back to; sampling goes on, and no GPU gets a pod.
#[test]
fn a_missing_kubelet_is_one_warning_and_sampling_goes_on() {
    let sim = sim(KUBE_SCENARIO);
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("absent").join("kubelet.sock");
    let db = dir.path().join("g.db");
    let port = free_port();
    let extra = format!(
        "[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n",
        sock.display()
    );
    let mut d = start_daemon(&sim.library_path(), &db, port, &extra);
    let gpus = wait_for("samples", Duration::from_secs(20), || {
        let gpus = status_json(&db)?["gpus"].as_array()?.clone();
        (gpus.len() == 2 && gpus[1]["processes"].as_array()?.len() == 1).then_some(gpus)
    });
    assert!(gpus.iter().all(|g| g["pod"].is_null()), "{gpus:?}");
    let err = d.stop();
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("kubelet"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("absent/kubelet.sock") && warnings[0].contains("cgroups"),
        "{err}"
    );
}

/// Logs fit where they go: a one-shot command prints its answer and no INFO lines (schema
/// migrations and the like); a daemon's log to a file or pipe has no colour codes; with
/// `[log] format = "json"` every line is one JSON object; a bad format is a config error
/// with its place.
#[test]
fn one_shot_commands_are_quiet_and_daemon_logs_fit_a_file_or_a_shipper() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("import.db");
    let o = gpuwatch()
        .args(["import", "nvidia-smi", "--tz", "UTC", "--db"])
        .arg(&db)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/import/units.csv"
        ))
        .output()
        .expect("import");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "",
        "a one-shot command logs only warnings"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("imported"));

    let sim = sim(WALL_SCENARIO);
    // Text to a pipe: no ANSI colour codes.
    let text_db = dir.path().join("text.db");
    let mut d = start_daemon(&sim.library_path(), &text_db, free_port(), "");
    wait_for("samples", Duration::from_secs(20), || {
        status_json(&text_db).filter(|v| v["gpus"].as_array().is_some_and(|g| g.len() == 2))
    });
    let err = d.stop();
    assert!(err.contains("INFO") && err.contains("sampling"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "colour codes in a piped log: {err:?}"
    );

    // JSON lines from the config's [log] format.
    let json_db = dir.path().join("json.db");
    let mut d = start_daemon(
        &sim.library_path(),
        &json_db,
        free_port(),
        "[log]\nformat = \"json\"\n",
    );
    wait_for("samples", Duration::from_secs(20), || {
        status_json(&json_db).filter(|v| v["gpus"].as_array().is_some_and(|g| g.len() == 2))
    });
    let err = d.stop();
    let lines: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "INFO" && l["fields"]["message"] == "sampling"),
        "{err}"
    );

    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[log]\nformat = \"xml\"\n").expect("config");
    let o = gpuwatch()
        .args(["run", "--check", "--config"])
        .arg(&cfg)
        .output()
        .expect("run --check");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bad.toml:2:10") && err.contains("`log.format` = \"xml\""),
        "{err}"
    );
}

/// A kubelet socket gpuwatch may not open: one warning naming the socket and what to mount,
/// sampling goes on, no GPU gets a pod. Root opens any socket, so as root (CI) the daemon
/// runs as `nobody` (setpriv) against a socket of mode 0600; otherwise the socket's mode is
/// 0000 for its owner.
#[test]
fn a_kubelet_socket_without_permission_is_one_warning_and_sampling_goes_on() {
    use gpuwatch::attribution::kubelet::{proto, server};
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    let sim = sim(KUBE_SCENARIO);
    let dir = tempfile::tempdir().expect("tempdir");
    // What the daemon reads and writes, open to another user.
    mode(dir.path(), 0o777);
    mode(sim.dir(), 0o755);
    let bin = dir.path().join("gpuwatch");
    std::fs::copy(env!("CARGO_BIN_EXE_gpuwatch"), &bin).expect("copy the binary");
    mode(&bin, 0o755);

    let kube = dir.path().join("kubelet");
    std::fs::create_dir(&kube).expect("mkdir");
    mode(&kube, 0o755);
    let sock = kube.join("kubelet.sock");
    let pods = server::PodList::default();
    pods.set(proto::ListPodResourcesResponse::default());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let listener = rt
        .block_on(async { tokio::net::UnixListener::bind(&sock) })
        .expect("bind");
    let serving = rt.spawn(server::serve_listener(listener, pods, async {
        let _ = stop_rx.await;
    }));
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    mode(&sock, if root { 0o600 } else { 0o000 });

    let db = dir.path().join("g.db");
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        format!(
            "host = \"testhost\"\ndatabase = \"{}\"\nnvml_library = \"{}\"\ninterval = \"200ms\"\n\
             [http]\nenabled = false\n[kubernetes]\nenabled = true\npod_resources_socket = \"{}\"\n",
            db.display(),
            sim.library_path().display(),
            sock.display()
        ),
    )
    .expect("config");
    mode(&cfg, 0o644);
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    let child = cmd
        .env_remove("RUST_LOG")
        .args(["run", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the daemon (setpriv is util-linux's)");
    let mut d = Daemon(child);
    let gpus = wait_for("samples", Duration::from_secs(20), || {
        let gpus = status_json(&db)?["gpus"].as_array()?.clone();
        (gpus.len() == 2).then_some(gpus)
    });
    assert!(gpus.iter().all(|g| g["pod"].is_null()), "{gpus:?}");
    let err = d.stop();
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("kubelet"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("permission denied on")
            && warnings[0].contains("kubelet/kubelet.sock")
            && warnings[0].contains("mount /var/lib/kubelet/pod-resources"),
        "{err}"
    );
    let _ = stop_tx.send(());
    rt.block_on(serving).expect("join").expect("served");
}

/// `history`, `export` and `report` over a window without data (an imported 2024 log and
/// the default last hour) say where the data is and how to see it, and exit non-zero,
/// instead of empty tables and charts; the window they suggest works.
#[test]
fn an_empty_window_says_where_the_data_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/units.csv");
    let o = gpuwatch()
        .args(["import", "nvidia-smi", "--tz", "UTC", "--db"])
        .arg(&db)
        .arg(&units)
        .output()
        .expect("import");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = dir.path().join("r.html");
    let runs: [Vec<&str>; 3] = [
        vec!["history"],
        vec!["export"],
        vec![
            "report",
            "--since",
            "1h",
            "-o",
            report.to_str().expect("path"),
        ],
    ];
    let mut suggested = String::new();
    for args in &runs {
        let o = gpuwatch()
            .args(args)
            .arg("--db")
            .arg(&db)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing printed");
        assert!(
            err.contains("the data spans 2024-05-01 12:00:00 UTC")
                && err.contains("try --from 2024-05-01T12:00:00Z --to "),
            "{args:?}: {err}"
        );
        suggested = err
            .split("try ")
            .nth(1)
            .expect("suggestion")
            .trim()
            .to_string();
    }
    assert!(!report.exists(), "no report of empty charts");
    let window: Vec<&str> = suggested.split_whitespace().collect();
    for command in ["history", "export"] {
        let o = gpuwatch()
            .args([command, "--format", "csv"])
            .args(&window)
            .arg("--db")
            .arg(&db)
            .output()
            .expect("run");
        assert!(
            o.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).lines().count() > 1,
            "{command}"
        );
    }
    let o = gpuwatch()
        .args(["report", "-o", report.to_str().expect("path")])
        .args(&window)
        .arg("--db")
        .arg(&db)
        .output()
        .expect("report");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(report.exists());
}

/// A DaemonSet before NODE_NAME: each rollout stored under its pod's host name. `hosts merge`
/// moves those rows under the node's name, GPUs by UUID, in one transaction: one host, two
/// GPUs, every sample kept; a host that wrote in the last minutes needs --force.
#[test]
fn pod_named_hosts_merge_into_the_node() {
    let sim = sim(WALL_SCENARIO);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("g.db");
    // An alert that fires at once on every GPU: each run leaves it firing.
    let rules = dir.path().join("always.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"always\"\nseverity = \"info\"\ncondition = \"temp >= 0\"\nsummary = \"GPU {gpu}\"\n",
    )
    .expect("rules");
    let extra = format!("[rules]\nfiles = [\"{}\"]", rules.display());
    for (host, node) in [
        (Some("gpuwatch-x7k2p"), None),
        (Some("gpuwatch-b9q4m"), None),
        (None, Some("gpu-node-17")),
    ] {
        let port = free_port();
        let mut d = start_daemon_as(host, node, &sim.library_path(), &db, port, &extra);
        wait_for("a firing alert", Duration::from_secs(20), || {
            let (_, body) = http_get(port, "/metrics")?;
            body.contains("alertname=\"always\"").then_some(())
        });
        let err = d.stop();
        assert!(!err.contains("panicked"), "{err}");
    }
    let counts = || -> (i64, i64, i64, i64) {
        let c = rusqlite::Connection::open(&db).expect("open");
        let one = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).expect(sql) };
        (
            one("SELECT count(*) FROM hosts"),
            one("SELECT count(*) FROM gpus"),
            one("SELECT count(*) FROM samples"),
            one("SELECT count(*) FROM events WHERE kind = 'xid'"),
        )
    };
    let (hosts, gpus, samples, xids) = counts();
    assert_eq!((hosts, gpus), (3, 6), "three hosts of the same two GPUs");
    // Each run left its XID alert firing: the pods' end with the merge, the node's stays.
    let alerts = || -> (i64, i64) {
        let c = rusqlite::Connection::open(&db).expect("open");
        let one = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).expect(sql) };
        (
            one("SELECT count(*) FROM alert_state WHERE state IN ('pending', 'firing')"),
            one("SELECT count(*) FROM alert_state WHERE fired_ms IS NOT NULL"),
        )
    };
    let node_live: i64 = rusqlite::Connection::open(&db)
        .expect("open")
        .query_row(
            "SELECT count(*) FROM alerts WHERE host = 'gpu-node-17' AND state IN ('pending', 'firing')",
            [],
            |r| r.get(0),
        )
        .expect("live");
    let (live, fired) = alerts();
    assert!(
        live > node_live && node_live > 0,
        "{live} live, {node_live} of the node"
    );
    let list = gpuwatch()
        .args(["hosts", "list", "--db"])
        .arg(&db)
        .output()
        .expect("hosts list");
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("gpuwatch-x7k2p") && text.contains("gpu-node-17"),
        "{text}"
    );

    let merge = |force: bool| {
        let mut c = gpuwatch();
        c.args([
            "hosts",
            "merge",
            "gpuwatch-x7k2p",
            "gpuwatch-b9q4m",
            "--into",
            "gpu-node-17",
            "--db",
        ])
        .arg(&db);
        if force {
            c.arg("--force");
        }
        c.output().expect("hosts merge")
    };
    let o = merge(false);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(counts().0, 3, "a refused merge changes nothing");
    let o = merge(true);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("merged 2 host(s) into gpu-node-17: 4 GPU(s) joined its own"),
        "{out}"
    );
    assert_eq!(
        counts(),
        (1, 2, samples, xids),
        "one host, two GPUs, every row kept"
    );
    assert_eq!(
        alerts(),
        (node_live, fired),
        "the pods' live alerts ended, no fired episode lost"
    );
    let c = rusqlite::Connection::open(&db).expect("open");
    for (table, col, of) in [
        ("samples", "gpu_id", "gpus"),
        ("process_samples", "gpu_id", "gpus"),
        ("process_samples", "process_id", "processes"),
        ("rollups_1m", "gpu_id", "gpus"),
        ("events", "host_id", "hosts"),
        ("processes", "host_id", "hosts"),
    ] {
        let orphans: i64 = c
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE {col} NOT IN (SELECT id FROM {of})"),
                [],
                |r| r.get(0),
            )
            .expect("orphans");
        assert_eq!(orphans, 0, "{table}.{col} all point at {of}");
    }
    let v = status_json(&db).expect("status");
    let gpus = v["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 2);
    assert!(gpus.iter().all(|g| g["host"] == "gpu-node-17"), "{v}");
    // A missing database is not created.
    let missing = dir.path().join("missing.db");
    let o = gpuwatch()
        .args(["hosts", "merge", "a", "--into", "b", "--db"])
        .arg(&missing)
        .output()
        .expect("merge");
    assert_eq!(o.status.code(), Some(1));
    assert!(!missing.exists());
    // Unknown hosts are named with the ones there are.
    let o = gpuwatch()
        .args(["hosts", "merge", "nope", "--into", "gpu-node-17", "--db"])
        .arg(&db)
        .output()
        .expect("merge");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("no host named \"nope\" in the database (hosts: gpu-node-17)"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
