//! A real Alertmanager for tests: Debian's `prometheus-alertmanager` (0.25) on a free
//! loopback port, with a temp storage dir, clustering off, and a config whose only route
//! sends every group (by default grouped by `alertname`, 1 s `group_wait`/`group_interval`)
//! to a webhook receiver (`send_resolved: true`) served by a capture server of the harness.
//!
//! Use it from any test file:
//! `use crate::notify_support::alertmanager;` then
//! `let am = alertmanager::Alertmanager::start();` and post to `am.url()`.
//!
//! Invariants:
//! - `start` returns only once `/-/ready` answers 200; the process is killed on drop.
//! - The capture server runs on its own threads and records every webhook body Alertmanager
//!   posts (parsed JSON, in arrival order), answering 200 to each.
//! - Everything here is blocking std code (no runtime needed); the `*_async` waits are for
//!   tests whose code under test runs on the same current-thread runtime.
//! - Waits poll with a deadline and panic with what was seen and Alertmanager's log.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BINARY: &str = "/usr/bin/prometheus-alertmanager";

/// The route of the generated config.
#[derive(Debug, Clone)]
pub struct Options {
    pub group_by: Vec<String>,
    pub group_wait: Duration,
    pub group_interval: Duration,
    pub repeat_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            group_by: vec!["alertname".into()],
            group_wait: Duration::from_secs(1),
            group_interval: Duration::from_secs(1),
            repeat_interval: Duration::from_secs(3600),
        }
    }
}

pub struct Alertmanager {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    captured: Arc<Mutex<Vec<Value>>>,
    /// The capture server's URL (its webhook receiver).
    hook: String,
}

impl Alertmanager {
    /// With [`Options::default`].
    pub fn start() -> Self {
        Self::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Self {
        let (hook_url, captured) = start_capture();
        Self::spawn(&config_yaml(&options, &hook_url), captured, &hook_url, None)
    }

    /// Two Alertmanagers clustered with each other (gossip on loopback), both with the
    /// config `config(hook_url)` and one capture server: an HA pair, as deployed.
    pub fn start_pair(config: impl Fn(&str) -> String) -> (Self, Self) {
        let (hook_url, captured) = start_capture();
        let text = config(&hook_url);
        let (c1, c2) = (free_port(), free_port());
        let a = Self::spawn(&text, Arc::clone(&captured), &hook_url, Some((c1, c2)));
        let b = Self::spawn(&text, captured, &hook_url, Some((c2, c1)));
        (a, b)
    }

    /// Starts one with `text` as its config; `cluster`: (its gossip port, its peer's).
    fn spawn(
        text: &str,
        captured: Arc<Mutex<Vec<Value>>>,
        hook: &str,
        cluster: Option<(u16, u16)>,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(&config, text).expect("write config");
        // The port is free when picked; another process may take it before Alertmanager
        // binds it, so try a few.
        let log_path = dir.path().join("alertmanager.log");
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let log = std::fs::File::create(&log_path).expect("create log");
            let mut cmd = Command::new(BINARY);
            cmd.arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"));
            match cluster {
                None => {
                    cmd.arg("--cluster.listen-address=");
                }
                Some((own, peer)) => {
                    cmd.arg(format!("--cluster.listen-address=127.0.0.1:{own}"))
                        .arg(format!("--cluster.advertise-address=127.0.0.1:{own}"))
                        .arg(format!("--cluster.peer=127.0.0.1:{peer}"))
                        .arg("--cluster.settle-timeout=2s")
                        .arg("--cluster.pushpull-interval=2s");
                }
            }
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {BINARY}: {e}"));
            if wait_ready(&mut child, port, Duration::from_secs(20)) {
                return Alertmanager {
                    child,
                    port,
                    dir,
                    captured,
                    hook: hook.to_string(),
                };
            }
            let _ = child.kill();
            let _ = child.wait();
            last_log = std::fs::read_to_string(&log_path).unwrap_or_default();
        }
        panic!("alertmanager did not become ready; its last log:\n{last_log}")
    }

    /// `http://127.0.0.1:PORT` (what goes in `urls`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The webhook receiver's URL (the capture server's): others may post to it too.
    pub fn hook_url(&self) -> &str {
        &self.hook
    }

    /// Every webhook body received so far (`{status, alerts: [...], groupLabels, ...}`).
    pub fn notifications(&self) -> Vec<Value> {
        self.captured
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits until at least `n` webhook notifications arrived; returns them all.
    pub fn wait_for_notifications(&self, n: usize, timeout: Duration) -> Vec<Value> {
        self.wait_until(timeout, "notifications", |_| {
            let seen = self.notifications();
            (seen.len() >= n).then_some(seen)
        })
    }

    pub async fn wait_for_notifications_async(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.notifications();
            if seen.len() >= n {
                return seen;
            }
            if Instant::now() > deadline {
                self.give_up(&format!("{n} notifications"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for a notification for which `pred` holds; returns it.
    pub fn wait_for_notification(&self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_until(timeout, "a matching notification", |_| {
            self.notifications().into_iter().find(|v| pred(v))
        })
    }

    /// The alerts Alertmanager holds (`GET /api/v2/alerts`: active, silenced, inhibited).
    pub fn alerts(&self) -> Vec<Value> {
        match http_get(self.port, "/api/v2/alerts") {
            Ok((200, body)) => match serde_json::from_str(&body) {
                Ok(Value::Array(a)) => a,
                other => panic!("GET /api/v2/alerts: not an array: {other:?}"),
            },
            other => panic!("GET /api/v2/alerts failed: {other:?}\n{}", self.log()),
        }
    }

    /// Waits until `GET /api/v2/alerts` satisfies `pred`; returns the alerts.
    pub fn wait_for_alerts(
        &self,
        timeout: Duration,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        self.wait_until(timeout, "matching alerts", |_| {
            let a = self.alerts();
            pred(&a).then_some(a)
        })
    }

    /// Alertmanager's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("alertmanager.log")).unwrap_or_default()
    }

    fn wait_until<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut probe: impl FnMut(()) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(x) = probe(()) {
                return x;
            }
            if Instant::now() > deadline {
                self.give_up(what);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn give_up(&self, what: &str) -> ! {
        let alerts = http_get(self.port, "/api/v2/alerts").map(|(_, b)| b);
        panic!(
            "timed out waiting for {what}\nnotifications: {:#?}\nalerts: {alerts:?}\nlog:\n{}",
            self.notifications(),
            self.log()
        )
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `/-/ready`; false if the process exited or the deadline passed.
fn wait_ready(child: &mut Child, port: u16, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok((200, _)) = http_get(port, "/-/ready") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn config_yaml(o: &Options, hook_url: &str) -> String {
    let group_by: Vec<String> = o.group_by.iter().map(|l| format!("'{l}'")).collect();
    format!(
        "route:\n  receiver: capture\n  group_by: [{}]\n  group_wait: {}ms\n  \
         group_interval: {}ms\n  repeat_interval: {}ms\nreceivers:\n  - name: capture\n    \
         webhook_configs:\n      - url: {hook_url}\n        send_resolved: true\n",
        group_by.join(", "),
        o.group_wait.as_millis(),
        o.group_interval.as_millis(),
        o.repeat_interval.as_millis(),
    )
}

/// `GET path` over HTTP/1.0 (so the answer is neither chunked nor kept alive).
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Ok((status, body))
}

/// Starts the webhook capture server; returns its URL and the captured bodies.
fn start_capture() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind capture server");
    let port = listener.local_addr().expect("addr").port();
    let captured = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&captured);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let sink = Arc::clone(&sink);
            std::thread::spawn(move || serve_capture(conn, &sink));
        }
    });
    (format!("http://127.0.0.1:{port}/hook"), captured)
}

/// Reads requests (keep-alive) until the peer closes; records each JSON body.
fn serve_capture(conn: TcpStream, sink: &Mutex<Vec<Value>>) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    loop {
        let mut length = 0usize;
        let mut first = true;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if line.is_empty() {
                if first {
                    continue;
                }
                break;
            }
            first = false;
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        sink.lock().unwrap_or_else(|p| p.into_inner()).push(value);
        if out
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}
