//! A `gpuwatch run` node with its HTTP listener on the simulated NVML library, for the
//! /metrics, API, page and fleet tests: two H100s — GPU 0 busy and hot (rule `hot` fires,
//! `warm` stays pending), GPU 1 idle (rule `idle` fires) without a power reading — and a
//! plain HTTP/1.1 client.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const RULES: &str = r#"
[[rule]]
name = "hot"
severity = "critical"
condition = "temp > 80"
summary = "GPU {gpu} is hot"

[[rule]]
name = "idle"
severity = "warning"
condition = "util_gpu < 5"
summary = "GPU {gpu} is idle"

[[rule]]
name = "warm"
severity = "info"
condition = "temp > 60"
for = "1h"
summary = "GPU {gpu} has been warm for an hour"
"#;

/// The scenario of a node; `seed` makes each node's UUIDs its own.
pub fn scenario(seed: u32) -> String {
    format!(
        r#"
[scenario]
name = "http"
duration = "1h"
seed = {seed}
[[gpu]]
model = "H100-SXM-80GB"
uuid = "{}"
[[gpu.timeline]]
util_gpu = 90
temp = 85
[[gpu]]
model = "H100-SXM-80GB"
uuid = "{}"
not_supported = ["nvmlDeviceGetPowerUsage"]
[[gpu.timeline]]
util_gpu = 0
temp = 35
[[process]]
pid = 4000100
name = "python"
gpu = 0
mem_mib = 20000
"#,
        uuid(seed, 0),
        uuid(seed, 1)
    )
}

/// The UUID of GPU `index` of the node made with `seed`.
pub fn uuid(seed: u32, index: u32) -> String {
    format!("GPU-{seed:08x}-0000-4000-8000-{index:012x}")
}

pub struct Node {
    pub dir: tempfile::TempDir,
    pub sim: gpuwatch::sim::SimGpus,
    pub cfg: PathBuf,
    pub host: String,
    pub port: u16,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Node {
    /// A node named `host`; `http` is appended to its `[http]` section, `extra` to the
    /// config's end (receivers, ...).
    pub fn new(host: &str, seed: u32, http: &str, extra: &str) -> Node {
        Node::with_scenario(host, seed, http, extra, "")
    }

    /// [`Node::new`] with `scenario_tail` appended to the scenario (faults, events).
    pub fn with_scenario(
        host: &str,
        seed: u32,
        http: &str,
        extra: &str,
        scenario_tail: &str,
    ) -> Node {
        let lib = gpuwatch::sim::find_fake_library().expect("cargo build --workspace first");
        let text = format!("{}\n{scenario_tail}\n", scenario(seed));
        let sim = gpuwatch::sim::SimGpus::prepare(&lib, &text, "s.toml").expect("scenario");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("r.toml"), RULES).expect("rules");
        let port = free_port();
        let cfg = dir.path().join("g.toml");
        std::fs::write(
            &cfg,
            format!(
                "host = \"{host}\"\ndatabase = \"{}\"\nnvml_library = \"{}\"\ninterval = \"500ms\"\n\
                 [rules]\ndefault_rules = false\nfiles = [\"r.toml\"]\n\
                 [http]\nlisten = \"127.0.0.1:{port}\"\n{http}\n{extra}\n",
                dir.path().join("g.db").display(),
                sim.library_path().display()
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

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts `gpuwatch run` (log in `run.log`) and waits until its first GPUs are stored
    /// and both alerts fired.
    pub fn start(&self, env: &[(&str, &str)]) -> Daemon {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
        c.env_remove("RUST_LOG")
            .args(["run", "--config"])
            .arg(&self.cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.path("run.log")).expect("log"));
        for (k, v) in env {
            c.env(k, v);
        }
        let d = Daemon(c.spawn().expect("spawn"));
        wait_for("/healthz", Duration::from_secs(30), || {
            (self.get("/healthz", None).0 == 200).then_some(())
        });
        d
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("run.log")).unwrap_or_default()
    }

    /// `GET path` → (status, content type, body).
    pub fn get(&self, path: &str, token: Option<&str>) -> (u16, String, String) {
        self.get_with(path, token, &[])
    }

    pub fn get_with(
        &self,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, String, String) {
        http_get(self.port, path, token, headers)
    }

    /// The CLI on this node's config.
    pub fn cli(&self, args: &[&str]) -> String {
        let o = Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
            .env_remove("RUST_LOG")
            .args(args)
            .arg("--config")
            .arg(&self.cfg)
            .output()
            .expect("gpuwatch");
        assert!(
            o.status.success(),
            "gpuwatch {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

/// A minimal HTTP/1.1 GET (Connection: close), enough for our own server.
pub fn http_get(
    port: u16,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new(), String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new(), String::new());
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return (0, String::new(), text);
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, ctype, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub struct Daemon(pub Child);

impl Daemon {
    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        wait_for("exit", Duration::from_secs(30), || {
            self.0.try_wait().ok().flatten()
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of the series of `name` whose labels contain every `want` pair.
pub fn series_value(scrape: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    scrape.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            return None;
        }
        let (labels, value) = rest.rsplit_once(' ')?;
        want.iter()
            .all(|(k, v)| labels.contains(&format!("{k}=\"{v}\"")))
            .then(|| value.parse().ok())
            .flatten()
    })
}

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `promtool check metrics` on `text`: its complaints, one per line.
pub fn promtool_lint(text: &str) -> Vec<String> {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let o = child.wait_with_output().expect("promtool");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !all.contains("error while linting") && !all.contains("parse error"),
        "promtool could not parse the scrape: {all}"
    );
    all.lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}
