//! Shared by the training-metrics tests: a config for a given URL, a store in a temp dir,
//! a canned HTTP server (std threads), and a real Prometheus process over backfilled data.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpuwatch::config::{
    DEFAULT_LOSS_QUERY, DEFAULT_STEP_QUERY, PrometheusAuth, PrometheusConfig, QueryMethod,
    TrainingQueries,
};
use gpuwatch::store::{self, StoreConfig};

pub const HOST: &str = "node-1";

/// A `[prometheus]` config for `url` with the defaults the daemon would use.
pub fn config(url: &str) -> PrometheusConfig {
    PrometheusConfig {
        url: url.to_string(),
        queries: TrainingQueries {
            step: DEFAULT_STEP_QUERY.to_string(),
            loss: DEFAULT_LOSS_QUERY.to_string(),
        },
        method: QueryMethod::Get,
        poll_interval: Duration::from_secs(15),
        query_step: Duration::from_secs(15),
        timeout: Duration::from_secs(5),
        lookback: Duration::from_secs(3600),
        overlap: Duration::from_secs(60),
        auth: PrometheusAuth::None,
        ca_file: None,
        insecure_skip_verify: false,
    }
}

pub fn open_store(dir: &Path) -> store::Store {
    store::open(&dir.join("g.db"), &StoreConfig::new(HOST)).expect("open store")
}

pub fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).expect("count")
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// What the canned server answers to one request.
#[derive(Clone, Debug)]
pub enum Canned {
    Json(u16, &'static str),
    Raw(u16, &'static str, &'static str),
    /// Accepts and never answers (until the client gives up).
    Hang,
    /// Answers `status` with the request's headers as a plain-text body (a leaky proxy).
    Echo(u16),
    /// Answers `status` with these extra header lines (each ending in `\r\n`) and no body.
    Headers(u16, &'static str),
}

/// One request as the canned server read it.
#[derive(Clone, Debug)]
pub struct Request {
    /// The request line and headers, then the body as (lossy) text.
    pub text: String,
    /// The body's bytes.
    pub body: Vec<u8>,
}

/// A tiny HTTP/1.1 server answering each connection with the next canned response (the last
/// one repeats). Records every request's head and body.
pub struct CannedServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl CannedServer {
    pub fn start(responses: Vec<Canned>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            let mut next = 0;
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let r = responses[next.min(responses.len() - 1)].clone();
                next += 1;
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || answer(stream, &r, &seen));
            }
        });
        Self {
            url: format!("http://{addr}"),
            requests,
        }
    }

    /// Every request's head and body as text, in the order they were read.
    pub fn requests(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.text).collect()
    }

    /// Every request, with its body's bytes.
    pub fn received(&self) -> Vec<Request> {
        self.requests.lock().expect("lock").clone()
    }
}

fn answer(stream: TcpStream, r: &Canned, seen: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0; len];
    let _ = reader.read_exact(&mut body);
    head.push_str(&String::from_utf8_lossy(&body));
    seen.lock().expect("lock").push(Request {
        text: head.clone(),
        body,
    });
    let (status, ctype, text) = match r {
        Canned::Headers(s, extra) => {
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {s} X\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            return;
        }
        Canned::Json(s, b) => (*s, "application/json", b.to_string()),
        Canned::Raw(s, c, b) => (*s, *c, b.to_string()),
        Canned::Echo(s) => {
            // Authorization first, so that a short excerpt of the body shows it.
            let (auth, rest): (Vec<&str>, Vec<&str>) =
                head.lines().partition(|l| l.starts_with("authorization"));
            (*s, "text/plain", [auth, rest].concat().join("\n"))
        }
        Canned::Hang => {
            std::thread::sleep(Duration::from_secs(10));
            return;
        }
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{text}",
        text.len()
    );
}

/// A Prometheus server (Debian's package) over a data directory; killed on drop.
pub struct Prometheus {
    child: Option<Child>,
    pub port: u16,
    pub data: PathBuf,
    config: PathBuf,
    /// `--web.config.file` (TLS), if any.
    web_config: Option<PathBuf>,
}

pub fn require_tools() {
    for tool in ["prometheus", "promtool"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "`{tool}` is not installed: run scripts/test.sh (as root it installs Debian's \
             `prometheus` package), or `apt-get install prometheus`"
        );
    }
}

/// A test CA and a server certificate for IP 127.0.0.1 signed by it (openssl CLI): returns
/// (CA PEM, server certificate PEM, server key PEM).
pub fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let p = |n: &str| dir.join(n);
    let ext = p("ext.cnf");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write ext");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let steps: Vec<Vec<String>> = vec![
        ["req", "-x509"]
            .iter()
            .chain(&ec)
            .map(|s| s.to_string())
            .chain(
                [
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=gpuwatch test CA",
                ]
                .map(String::from),
            )
            .collect(),
        ["req"]
            .iter()
            .chain(&ec)
            .map(|s| s.to_string())
            .chain(
                [
                    "-keyout",
                    "srv.key",
                    "-out",
                    "srv.csr",
                    "-subj",
                    "/CN=127.0.0.1",
                ]
                .map(String::from),
            )
            .collect(),
        [
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(&args)
            .current_dir(dir)
            .output()
            .expect("openssl (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (p("ca.pem"), p("srv.pem"), p("srv.key"))
}

/// Backfills OpenMetrics `text` into `data` with promtool (one block per call).
pub fn backfill(dir: &Path, name: &str, text: &str, data: &Path) {
    let file = dir.join(name);
    std::fs::write(&file, text).expect("write openmetrics");
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&file)
        .arg(data)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Prometheus {
    /// Starts Prometheus with no scrape targets over `data`, on a free loopback port.
    pub fn start(dir: &Path, data: &Path) -> Self {
        Self::start_with(dir, data, None)
    }

    /// [`Prometheus::start`] serving HTTPS with `tls` = (certificate, key) PEM files.
    pub fn start_tls(dir: &Path, data: &Path, cert: &Path, key: &Path) -> Self {
        let web = dir.join("web.yml");
        let yaml = format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
            cert.display(),
            key.display()
        );
        std::fs::write(&web, yaml).expect("write web config");
        Self::start_with(dir, data, Some(web))
    }

    /// Starts Prometheus with `config` as its prometheus.yml (scrape targets, ...).
    pub fn start_configured(dir: &Path, data: &Path, config: &str) -> Self {
        Self::start_full(dir, data, None, config)
    }

    fn start_with(dir: &Path, data: &Path, web_config: Option<PathBuf>) -> Self {
        Self::start_full(
            dir,
            data,
            web_config,
            "global:\n  scrape_interval: 1m\nscrape_configs: []\n",
        )
    }

    fn start_full(dir: &Path, data: &Path, web_config: Option<PathBuf>, text: &str) -> Self {
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, text).expect("write config");
        let mut p = Self {
            child: None,
            port: free_port(),
            data: data.to_path_buf(),
            config,
            web_config,
        };
        p.restart();
        p
    }

    pub fn url(&self) -> String {
        let scheme = if self.web_config.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// (Re)starts the process on the same port and data, and waits for `/-/ready`.
    pub fn restart(&mut self) {
        let log = std::fs::File::create(self.data.with_extension("log")).expect("log file");
        let mut cmd = Command::new("prometheus");
        if let Some(web) = &self.web_config {
            cmd.arg(format!("--web.config.file={}", web.display()));
        }
        let child = cmd
            .arg(format!("--config.file={}", self.config.display()))
            .arg(format!("--storage.tsdb.path={}", self.data.display()))
            // Remote write into it (the fleet test's third node pushes instead of being scraped).
            .arg("--web.enable-remote-write-receiver")
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start prometheus");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.ready() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                let log =
                    std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default();
                panic!("prometheus exited ({status}):\n{log}");
            }
            assert!(Instant::now() < deadline, "prometheus not ready after 20 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `/-/ready` answers 200; over TLS only that the port accepts (callers retry queries).
    fn ready(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        if self.web_config.is_some() {
            return true;
        }
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = "GET /-/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        if s.write_all(req.as_bytes()).is_err() {
            return false;
        }
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        resp.starts_with("HTTP/1.1 200")
    }

    /// Stops the process (SIGTERM, then SIGKILL after 10 s) and waits for it.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: signals the child we spawned and have not reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A daemon configuration on host [`HOST`] writing to `db`: no HTTP, and a 2 s sampling
/// deadline (the simulated clock below runs as fast as the machine).
pub fn sim_daemon_config(db: &Path) -> gpuwatch::config::Config {
    let mut cfg = gpuwatch::config::Config {
        host: HOST.into(),
        database: db.to_path_buf(),
        ..gpuwatch::config::Config::default()
    };
    cfg.http.enabled = false;
    cfg.sample_deadline = Duration::from_secs(2);
    cfg
}

/// Runs the daemon (no rules) over `sim`'s whole scenario from `t0` on the simulated clock.
pub async fn sample_on_sim_clock(
    cfg: gpuwatch::config::Config,
    sim: &gpuwatch::sim::SimGpus,
    t0: i64,
) {
    use gpuwatch::daemon::{self, DaemonParts};
    let parts = DaemonParts {
        config: cfg,
        rules: Vec::new(),
        alert_sink: None,
        reload: None,
        nvml: gpuwatch::sampler::nvml::init(Some(&sim.library_path())).expect("init"),
        ticker: Box::new(sim.ticker(t0, f64::INFINITY, None).expect("ticker")),
        overrides: sim.process_overrides(t0),
        observer: None,
    };
    tokio::task::spawn_blocking(move || {
        daemon::run(parts, Arc::new(std::sync::atomic::AtomicBool::new(false)))
    })
    .await
    .expect("join")
    .expect("daemon");
}

/// Stores fetched training points in `db` (as the daemon's training thread does).
pub fn store_training(db: &Path, points: Vec<gpuwatch::model::TrainingPoint>) {
    let mut st = store::open(db, &StoreConfig::new(HOST)).expect("open");
    st.write_training(&gpuwatch::model::TrainingWrite {
        points,
        sources: Vec::new(),
    })
    .expect("write");
}

/// Every transition `gpuwatch replay --format jsonl` reports for `db`.
pub fn replay_jsonl(db: &Path) -> Vec<serde_json::Value> {
    let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .args(["replay", "--format", "jsonl", "--db"])
        .arg(db)
        .output()
        .expect("replay");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("jsonl"))
        .collect()
}
