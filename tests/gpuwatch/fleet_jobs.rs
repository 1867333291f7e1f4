//! One multi-node training job, end to end and all real on loopback: three `gpuwatch run`
//! nodes (node-a, node-b, node-c) of 4 simulated H100s each, whose training step series come
//! from a Prometheus they read (a trainer exporting 12 ranks, scraped every second); Debian's
//! Prometheus and VictoriaMetrics + vmalert both evaluating the shipped fleet rules
//! (`examples/prometheus/gpuwatch-fleet-rules.yml`, unchanged) over the nodes' series; two
//! clustered Alertmanagers with the shipped Alertmanager config's routes and inhibition; one
//! webhook receiver behind them (and the nodes' own direct webhook).
//!
//! The story: the job steps once a second for a minute, then hangs: GPU 2 of node-b falls to
//! 0 % first, the other eleven GPUs start spinning (100 % at low power) 30–60 s later. Then:
//! exactly one `GpuwatchJobHang` notification, naming node-b's GPU 2, within 3 minutes of its
//! stall; the nodes' own `training_hang` alerts reach Alertmanager inhibited and never a
//! receiver (the nodes know the job spans nodes: they send it through Alertmanager only);
//! `gpuwatch job timeline` names the same first GPU from either Prometheus.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http_support::{Node, free_port, wait_for};
use crate::notify_support::alertmanager::Alertmanager;
use crate::training_support::Prometheus;

const JOB: &str = "llm-pretrain";
const HOSTS: [&str; 3] = ["node-a", "node-b", "node-c"];
/// When the job hangs, in seconds after the nodes start (their scenarios' clocks).
const HANG_S: u64 = 60;
/// When each GPU starts spinning after the hang (node-b's GPU 2 goes idle at once).
const SPIN_AFTER_S: [[u64; 4]; 3] = [[30, 35, 40, 45], [50, 55, 0, 60], [40, 45, 50, 60]];

fn uuid(node: usize, gpu: usize) -> String {
    format!("GPU-0000{node:04x}-5eed-4000-8000-{gpu:012x}")
}

/// A node's scenario: 4 busy H100s (620 W), each holding 70 GB for its rank; from the hang
/// on, node-b's GPU 2 is idle and every other GPU spins at 95 W after its delay.
fn scenario(node: usize) -> String {
    let mut s = format!(
        "[scenario]\nname = \"fleet-job\"\nduration = \"30m\"\nseed = {}\n",
        node + 70
    );
    for (gpu, spin_after) in SPIN_AFTER_S[node].iter().enumerate() {
        let culprit = node == 1 && gpu == 2;
        let (from, util, power) = if culprit {
            (HANG_S, 0, 70)
        } else {
            (HANG_S + spin_after, 100, 95)
        };
        s.push_str(&format!(
            "[[gpu]]\nmodel = \"H100-SXM-80GB\"\nuuid = \"{}\"\n\
             [[gpu.timeline]]\nutil_gpu = {{ value = 96, noise = 2 }}\npower_w = {{ value = 620, noise = 15 }}\n\
             [[gpu.timeline]]\nfrom = \"{from}s\"\nutil_gpu = {util}\npower_w = {power}\n\
             [[process]]\npid = {}\nname = \"python\"\ngpu = {gpu}\nmem_mib = 70000\n",
            uuid(node, gpu),
            4_100_000 + node * 10 + gpu,
        ));
    }
    s
}

fn node(i: usize, prom: &str, ams: &[&Alertmanager], hook: &str) -> Node {
    let host = HOSTS[i];
    let lib = gpuwatch::sim::find_fake_library().expect("cargo build --workspace first");
    let sim = gpuwatch::sim::SimGpus::prepare(&lib, &scenario(i), "s.toml").expect("scenario");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let cfg = dir.path().join("g.toml");
    let urls: Vec<String> = ams.iter().map(|a| format!("{:?}", a.url())).collect();
    std::fs::write(
        &cfg,
        format!(
            r#"host = "{host}"
database = "{db}"
nvml_library = "{lib}"
interval = "1s"
[http]
listen = "127.0.0.1:{port}"
[prometheus]
url = "{prom}"
poll_interval = "2s"
query_step = "1s"
lookback = "10m"
[prometheus.queries]
step = 'training_step{{node="{host}"}}'
loss = 'training_loss{{node="{host}"}}'
[fleet]
job_label = "run"
multi_node = true
[[notify.webhook]]
name = "direct"
url = "{hook}"
[[notify.alertmanager]]
name = "am"
urls = [{urls}]
[notify]
default_receivers = ["direct", "am"]
"#,
            db = dir.path().join("g.db").display(),
            lib = sim.library_path().display(),
            urls = urls.join(", "),
        ),
    )
    .expect("config");
    Node {
        dir,
        sim,
        cfg,
        host: host.to_string(),
        port,
    }
}

/// The job's 12 ranks on a `/metrics` endpoint: one step a second from `origin`, frozen
/// from the hang on.
fn serve_trainer(origin: Instant) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind trainer");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let step = origin.elapsed().as_secs().min(HANG_S);
            let mut body = String::from("# TYPE training_step gauge\n");
            for host in HOSTS {
                for gpu in 0..4 {
                    body.push_str(&format!(
                        "training_step{{run=\"{JOB}\",node=\"{host}\",gpu=\"{gpu}\"}} {step}\n"
                    ));
                }
            }
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A child process killed on drop; its log's tail is printed when the test failed.
struct Proc(Child, std::path::PathBuf);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.1).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- {}:", self.1.display());
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

fn spawn(dir: &Path, name: &str, cmd: &mut Command) -> Proc {
    let log = dir.join(format!("{name}.log"));
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{name}: {e} (scripts/test.sh installs Debian's victoria-metrics)")
        });
    Proc(child, log)
}

/// The shipped Alertmanager config with its receivers pointed at the capture server.
fn alertmanager_config(hook: &str) -> String {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/alertmanager/alertmanager.yml"
    ))
    .expect("example");
    let head = &shipped[..shipped.find("\nreceivers:").expect("receivers")];
    format!(
        "{head}\nreceivers:\n  - name: gpu-team\n    webhook_configs:\n      - url: {hook}\n        send_resolved: true\n  \
         - name: gpu-oncall\n    webhook_configs:\n      - url: {hook}\n        send_resolved: true\n"
    )
}

fn alerts_named<'a>(n: &'a Value, name: &str) -> Vec<&'a Value> {
    n["alerts"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|x| x["labels"]["alertname"] == name)
                .collect()
        })
        .unwrap_or_default()
}

fn timeline(node: &Node, prom: &str) -> Value {
    let out = node.cli(&[
        "job",
        "timeline",
        "--job",
        JOB,
        "--prometheus",
        prom,
        "--format",
        "json",
    ]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn one_alert_per_hung_job_names_the_gpu_that_stopped_first() {
    crate::training_support::require_tools();
    let dir = tempfile::tempdir().expect("tempdir");
    let (am1, am2) = Alertmanager::start_pair(alertmanager_config);
    let rules = dir.path().join("gpuwatch-fleet-rules.yml");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/prometheus/gpuwatch-fleet-rules.yml"
        ),
        &rules,
    )
    .expect("rules");
    let origin = Instant::now();
    let trainer = serve_trainer(origin);
    let node_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let targets: Vec<String> = node_ports
        .iter()
        .map(|p| format!("'127.0.0.1:{p}'"))
        .collect();
    let scrape = format!(
        "scrape_configs:\n  - job_name: trainer\n    scrape_interval: 1s\n    static_configs:\n      - targets: ['127.0.0.1:{trainer}']\n  \
         - job_name: gpuwatch\n    scrape_interval: 2s\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    let prom = Prometheus::start_configured(
        dir.path(),
        &dir.path().join("prom-data"),
        &format!(
            "global:\n  scrape_interval: 2s\n  evaluation_interval: 2s\nrule_files: ['{}']\n\
             alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['127.0.0.1:{}', '127.0.0.1:{}']\n{scrape}",
            rules.display(),
            am1.port(),
            am2.port()
        ),
    );
    std::fs::write(dir.path().join("vm-scrape.yml"), &scrape).expect("vm scrape");
    let vm_port = free_port();
    let _vm = spawn(
        dir.path(),
        "victoria-metrics",
        Command::new("victoria-metrics")
            .arg(format!(
                "-storageDataPath={}",
                dir.path().join("vm").display()
            ))
            .arg(format!("-httpListenAddr=127.0.0.1:{vm_port}"))
            .arg(format!(
                "-promscrape.config={}",
                dir.path().join("vm-scrape.yml").display()
            ))
            .arg("-search.latencyOffset=0s")
            .arg("-search.disableCache"),
    );
    let vmalert_port = free_port();
    let _vmalert = spawn(
        dir.path(),
        "vmalert",
        Command::new("vmalert")
            .arg(format!("-rule={}", rules.display()))
            .arg(format!("-datasource.url=http://127.0.0.1:{vm_port}"))
            .arg(format!("-notifier.url={}", am1.url()))
            .arg(format!("-notifier.url={}", am2.url()))
            .arg("-evaluationInterval=2s")
            // The same labels as Prometheus's alerts: one alert in Alertmanager, not two.
            .arg("-disableAlertgroupLabel")
            .arg(format!("-httpListenAddr=127.0.0.1:{vmalert_port}")),
    );

    // The nodes' direct webhook posts to the Alertmanagers' receiver too: anything they
    // send straight is seen.
    let capture = am1.hook_url().to_string();
    let nodes: Vec<Node> = (0..3)
        .map(|i| {
            let mut n = node(i, &prom.url(), &[&am1, &am2], &capture);
            // The port Prometheus and VictoriaMetrics scrape.
            let text = std::fs::read_to_string(&n.cfg).expect("cfg").replace(
                &format!("127.0.0.1:{}\"", n.port),
                &format!("127.0.0.1:{}\"", node_ports[i]),
            );
            std::fs::write(&n.cfg, text).expect("cfg");
            n.port = node_ports[i];
            n
        })
        .collect();
    let mut daemons = Vec::new();
    let mut started = Vec::new();
    for n in &nodes {
        started.push(Instant::now());
        daemons.push(n.start(&[]));
    }
    // node-b's GPU 2 stalls HANG_S after node-b started.
    let first_stall = started[1] + Duration::from_secs(HANG_S);

    // Each node exports its job and, once its step stood still, its GPUs' stalls.
    wait_for("job_info on every node", Duration::from_secs(60), || {
        nodes
            .iter()
            .all(|n| {
                let (_, _, m) = n.get("/metrics", None);
                m.contains(&format!(
                    "gpuwatch_job_info{{training_job=\"{JOB}\",job_source=\"label\""
                ))
            })
            .then_some(())
    });

    let hang = am1.wait_for_notification(
        first_stall.saturating_duration_since(Instant::now()) + Duration::from_secs(180),
        |n| !alerts_named(n, "GpuwatchJobHang").is_empty(),
    );
    let took = first_stall.elapsed();
    eprintln!("GpuwatchJobHang notified {took:?} after the first stall");
    assert!(
        took <= Duration::from_secs(180),
        "notified {took:?} after the first stall"
    );
    let a = alerts_named(&hang, "GpuwatchJobHang")[0];
    assert_eq!(a["labels"]["training_job"], JOB, "{a:#}");
    let ann = &a["annotations"];
    assert_eq!(ann["first_host"], "node-b", "{ann:#}");
    assert_eq!(ann["first_gpu"], "2", "{ann:#}");
    assert_eq!(ann["first_uuid"], uuid(1, 2).as_str(), "{ann:#}");
    assert_eq!(ann["first_signature"], "idle", "{ann:#}");
    let at = ann["first_at"].as_str().unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(at).is_ok(),
        "first_at {at:?} is RFC 3339"
    );

    // The nodes' own training_hang alerts reach Alertmanager (only it: the nodes know the
    // job spans nodes) and are inhibited by the job's alert.
    let inhibited = am1.wait_for_alerts(Duration::from_secs(90), |alerts| {
        alerts.iter().any(|x| {
            x["labels"]["alertname"] == "training_hang"
                && x["labels"]["training_job"] == JOB
                && x["status"]["state"] == "suppressed"
                && x["status"]["inhibitedBy"]
                    .as_array()
                    .is_some_and(|i| !i.is_empty())
        })
    });
    assert!(
        !inhibited.iter().any(
            |x| x["labels"]["alertname"] == "training_hang" && x["status"]["state"] == "active"
        ),
        "{inhibited:#?}"
    );

    // The cross-node timeline names the same GPU, from Prometheus and from VictoriaMetrics.
    for url in [prom.url(), format!("http://127.0.0.1:{vm_port}")] {
        let t = timeline(&nodes[0], &url);
        assert_eq!(t["training_job"], JOB);
        assert_eq!(t["first"]["host"], "node-b", "{url}: {t:#}");
        assert_eq!(t["first"]["gpu_index"], 2, "{url}: {t:#}");
        assert_eq!(t["first"]["signature"], "idle", "{url}: {t:#}");
        let hosts: std::collections::BTreeSet<&str> = t["gpus"]
            .as_array()
            .expect("gpus")
            .iter()
            .filter_map(|g| g["host"].as_str())
            .collect();
        assert!(hosts.len() >= 2, "{url}: {t:#}");
    }

    // `gpuwatch incident` places a node's own training_hang in the job's stall: node-b
    // stopped first, node-a followed.
    for (i, want) in [(1, "first"), (0, "followed")] {
        let id = wait_for("a training_hang alert", Duration::from_secs(90), || {
            hang_alert(&nodes[i])
        });
        let inc: Value =
            serde_json::from_str(&nodes[i].cli(&["incident", &id.to_string(), "--format", "json"]))
                .expect("incident json");
        assert_eq!(
            inc["fleet"]["this_node"], want,
            "{}: {:#}",
            HOSTS[i], inc["fleet"]
        );
        let text = nodes[i].cli(&["incident", &id.to_string()]);
        assert!(
            text.contains(&format!(
                "this node {}",
                if want == "first" {
                    "stopped first"
                } else {
                    "followed"
                }
            )),
            "{text}"
        );
    }

    // Give the second Alertmanager its peer timeout (15 s) to send a duplicate, if it would.
    std::thread::sleep(Duration::from_secs(20));
    let all = am1.notifications();
    let hangs = all
        .iter()
        .filter(|n| !alerts_named(n, "GpuwatchJobHang").is_empty())
        .count();
    assert_eq!(hangs, 1, "one notification for the job: {all:#?}");
    let text = serde_json::to_string(&all).expect("json");
    assert!(
        !text.contains("training_hang"),
        "no node-level hang notification, straight or through Alertmanager: {all:#?}"
    );

    // Without the fleet's Prometheus: one clear line, never a guessed first.
    let mut prom = prom;
    prom.stop();
    let id = hang_alert(&nodes[0]).expect("node-a's training_hang");
    let inc: Value =
        serde_json::from_str(&nodes[0].cli(&["incident", &id.to_string(), "--format", "json"]))
            .expect("incident json");
    let why = inc["fleet"]["unavailable"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("fleet data unavailable: cannot reach Prometheus"),
        "{:#}",
        inc["fleet"]
    );
    drop(daemons);
}

/// The id of a node's training_hang alert, once it has one.
fn hang_alert(node: &Node) -> Option<i64> {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["alerts", "--format", "json", "--config"])
        .arg(&node.cfg)
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let list = v.as_array().or_else(|| v["alerts"].as_array())?.clone();
    list.iter()
        .find(|a| a["rule"] == "training_hang")
        .and_then(|a| a["alert_id"].as_i64())
}
