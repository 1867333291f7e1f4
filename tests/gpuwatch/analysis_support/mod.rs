//! Shared by the analysis tests: a scenario played through the whole daemon in-process, on
//! a fixed simulated clock at full speed (so the database, hence every analysis, is the same
//! at every run), and the gpuwatch binary. Each test file uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuwatch::config::Config;
use gpuwatch::daemon::{self, DaemonParts};
use gpuwatch::sampler::nvml;
use gpuwatch::sim::{SimGpus, find_fake_library};

/// The simulated clock's start: 2023-11-14T22:13:20Z.
pub const START_MS: i64 = 1_700_000_000_000;

/// Plays `scenario` (a path under the crate) into `dir/NAME.db`; returns the database.
pub fn play(dir: &Path, scenario: &str, name: &str) -> PathBuf {
    play_with(dir, scenario, name, "")
}

/// [`play`] with the `[notify]` and `[analysis]` sections of `config` (TOML).
pub fn play_with(dir: &Path, scenario: &str, name: &str, config_text: &str) -> PathBuf {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(scenario))
        .expect("scenario");
    let sim = SimGpus::prepare(
        &find_fake_library().expect("the fake NVML library is built (cargo build --workspace)"),
        &text,
        scenario,
    )
    .expect("scenario");
    let db = dir.join(format!("{name}.db"));
    let mut config = Config {
        host: "demo-node".into(),
        database: db.clone(),
        interval: Duration::from_millis(sim.scenario.tick_ms()),
        sample_deadline: Duration::from_secs(2),
        ..Config::default()
    };
    config.http.enabled = false;
    let extra = Config::parse(config_text, Path::new("test.toml")).expect("test config");
    config.notify = extra.notify;
    config.analysis = extra.analysis;
    let kubelet = sim.serve_pods().expect("serve pods").expect("pods");
    kubelet.configure(&mut config);
    daemon::run(
        DaemonParts {
            config,
            rules: gpuwatch::rules::load_configured(true, &[]).expect("default rules"),
            alert_sink: None,
            nvml: nvml::init(Some(&sim.library_path())).expect("init"),
            ticker: Box::new(sim.ticker(START_MS, f64::INFINITY, None).expect("ticker")),
            overrides: sim.process_overrides(START_MS),
            observer: None,
            reload: None,
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("daemon runs");
    db
}

pub fn gpuwatch(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.args(args).env_remove("RUST_LOG");
    c
}

pub fn ok_stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The "Analysis" section of `gpuwatch incident` text output (to its end), with alert ids
/// written `#` (alerts raised at the same tick get their ids in any order) and the times of
/// XIDs (and of the XID alert) written `HH:MM:SS` / `±T`: NVML's event thread hands an XID to
/// the sampler a few ticks late or early when the simulated clock runs at full speed, so
/// those times vary from run to run — and so do the XID alert's window averages (its window
/// starts at the XID: a noisy power reading more or less moves an average by a watt), written
/// `N`; everything else is the same at every run.
pub fn analysis_section(text: &str) -> String {
    let i = text
        .find("\nAnalysis (rule-based):\n")
        .unwrap_or_else(|| panic!("no Analysis section in:\n{text}"));
    let xid_alert = text[..i].contains("gpu_xid_error");
    let ids = regex::Regex::new(r"alert \d+ ").expect("regex");
    let clock = regex::Regex::new(r"\d\d:\d\d:\d\d").expect("regex");
    let offset = regex::Regex::new(r"[+-]\d+m\d\ds|[+-]\d+s").expect("regex");
    let during = regex::Regex::new(r"\d+(\.\d+)? (W|%|°C|MHz) during|\d+ % of the").expect("regex");
    ids.replace_all(&text[i + 1..], "alert # ")
        .lines()
        .map(|l| {
            if xid_alert && during.is_match(l) {
                let l = during.replace_all(l, |c: &regex::Captures| match c.get(2) {
                    Some(unit) => format!("N {} during", unit.as_str()),
                    None => "N % of the".to_string(),
                });
                format!("{l}\n")
            } else if l.contains("XID") || l.contains("gpu_xid_error") {
                let l = clock.replace_all(l, "HH:MM:SS");
                format!("{}\n", offset.replace_all(&l, "±T"))
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

/// Compares `got` with the golden file `tests/golden/analysis/NAME.txt`; with
/// `GPUWATCH_UPDATE_GOLDEN=1` it writes the file instead.
pub fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/analysis")
        .join(format!("{name}.txt"));
    if std::env::var_os("GPUWATCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).expect("write golden");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (GPUWATCH_UPDATE_GOLDEN=1 writes it)\ngot:\n{got}",
            path.display()
        )
    });
    assert_eq!(
        got,
        want,
        "{} differs (GPUWATCH_UPDATE_GOLDEN=1 rewrites it after review)",
        path.display()
    );
}

/// How the stub answers.
#[derive(Clone)]
pub enum Mode {
    /// 200 with the body `ok` (what Slack's webhooks answer).
    Ok,
    Json(String),
    Stream(Vec<String>),
    Status(u16),
    Garbage,
    Hang(Duration),
}

/// One request the stub got: (request line, headers lower-cased, body).
pub type Recorded = (String, Vec<(String, String)>, String);

pub struct Stub {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

pub fn stub(mode: Mode) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let mut headers = Vec::new();
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
                    if k == "content-length" {
                        len = v.parse().unwrap_or(0);
                    }
                    headers.push((k, v));
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            seen.lock().expect("lock").push((
                first.trim().to_string(),
                headers,
                String::from_utf8_lossy(&body).into_owned(),
            ));
            let reply = |ctype: &str, status: &str, body: &str| {
                format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            };
            let out = match &mode {
                Mode::Ok => reply("text/plain", "200 OK", "ok"),
                Mode::Json(answer) => reply(
                    "application/json",
                    "200 OK",
                    &serde_json::json!({
                        "id": "chatcmpl-1", "object": "chat.completion", "model": "stub",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": answer}}],
                    })
                    .to_string(),
                ),
                Mode::Stream(parts) => {
                    let mut b = String::new();
                    for p in parts {
                        b.push_str(&format!(
                            "data: {}\n\n",
                            serde_json::json!({"object": "chat.completion.chunk",
                                "choices": [{"index": 0, "delta": {"content": p}}]})
                        ));
                    }
                    b.push_str("data: [DONE]\n\n");
                    reply("text/event-stream", "200 OK", &b)
                }
                Mode::Status(429) => reply("application/json", "429 Too Many Requests", "{}"),
                Mode::Status(code) => {
                    reply("text/plain", &format!("{code} Oops"), "upstream failed")
                }
                Mode::Garbage => reply("application/json", "200 OK", "<html>not json</html>"),
                Mode::Hang(d) => {
                    std::thread::sleep(*d);
                    String::new()
                }
            };
            let _ = stream.write_all(out.as_bytes());
        }
    });
    Stub { port, requests }
}
