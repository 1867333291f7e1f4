//! Secrets never leave through a side door: one daemon configured with every kind of secret
//! gpuwatch reads (the HTTP token, a Slack webhook URL, a webhook URL token and its HMAC key,
//! an Alertmanager bearer token, an SMTP password, a Prometheus token, a remote-write token, an
//! LLM API key) talks to servers that answer every request with an error that echoes the
//! request back — its path, query and `Authorization` header — so each secret reaches an
//! error message at least once. Then every place a person or a program reads is grepped for
//! every secret: the daemon's debug log, `/metrics`, the JSON API, the page, the CLI's
//! status, alerts, incident (with `--explain` and `--show-prompt`), doctor and `notify test`
//! output, SQL over the notification views, and the database files themselves. The echo
//! server's own record proves the secrets were really used (so the grep can fail).
//!
//! Also: the database, its `-wal` and `-shm` files and the lock are not readable by others.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::http_support::{Node, free_port, wait_for};

const HTTP_TOKEN: &str = "tok-http-7Hq2";
const SLACK_SECRET: &str = "slackpath-9Kx4";
const WEBHOOK_URL_TOKEN: &str = "whurl-3Pz8";
const HMAC_KEY: &str = "hmac-5Rt1";
const AM_TOKEN: &str = "am-bearer-2Lw6";
const SMTP_PASSWORD: &str = "smtp-pw-8Nc3";
const PROM_TOKEN: &str = "prom-bearer-4Vb7";
const RW_TOKEN: &str = "rw-bearer-6Jm9";
const LLM_KEY: &str = "llm-key-1Gd5";

const ALL: [&str; 9] = [
    HTTP_TOKEN,
    SLACK_SECRET,
    WEBHOOK_URL_TOKEN,
    HMAC_KEY,
    AM_TOKEN,
    SMTP_PASSWORD,
    PROM_TOKEN,
    RW_TOKEN,
    LLM_KEY,
];

/// An HTTP server that answers every request `500` with the request's head (request line and
/// headers, `Authorization` included) as its body, and records every request.
struct Echo {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Echo {
    fn start() -> Echo {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let rec = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut s) = conn else { continue };
                let rec = rec.clone();
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let head = read_request(&mut s);
                    rec.lock().expect("lock").push(head.clone());
                    let body = format!("upstream said no; your request was:\n{head}");
                    let _ = write!(
                        s,
                        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Echo { port, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn seen(&self) -> String {
        self.seen.lock().expect("lock").join("\n")
    }
}

/// Reads one request; returns its head (the body is read and dropped).
fn read_request(s: &mut std::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&buf).into_owned(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut have = buf.len() - head_end - 4;
    while have < len {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => have += n,
        }
    }
    head
}

/// Runs the CLI on the node's config whatever its exit status; stdout and stderr together.
fn cli_any(node: &Node, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.env_remove("RUST_LOG")
        .args(args)
        .arg("--config")
        .arg(&node.cfg);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("gpuwatch");
    format!(
        "$ gpuwatch {args:?} -> {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn no_secret_reaches_a_log_an_output_an_endpoint_or_the_database() {
    let echo = Echo::start();
    let smtp_port = free_port(); // nothing listens: connection refused
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |name: &str, secret: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, secret).expect("secret file");
        p.display().to_string()
    };
    let am_file = file("am-token", AM_TOKEN);
    let smtp_file = file("smtp-password", SMTP_PASSWORD);
    let rw_file = file("rw-token", RW_TOKEN);
    let extra = format!(
        r#"
[notify]
group_by = ["..."]
group_wait = "0s"
group_interval = "1s"
retry_max_backoff = "1s"

[[notify.slack]]
name = "slack"
webhook_url_env = "T_SLACK_URL"

[[notify.webhook]]
name = "hook"
url_env = "T_HOOK_URL"
hmac_secret_env = "T_HMAC"

[[notify.alertmanager]]
name = "am"
urls = ["{am}"]
bearer_token_file = "{am_file}"

[[notify.email]]
name = "mail"
smtp_host = "127.0.0.1"
smtp_port = {smtp_port}
tls = "none"
username = "gpuwatch"
password_file = "{smtp_file}"
from = "gpuwatch <gpuwatch@example.com>"
to = ["oncall@example.com"]

[prometheus]
url = "{prom}"
token_env = "T_PROM_TOKEN"
poll_interval = "1s"

[[remote_write]]
name = "central"
url = "{rw}"
interval = "1s"
token_file = "{rw_file}"

[analysis]
url = "{llm}"
model = "m"
api_key_env = "T_LLM_KEY"
timeout = "5s"
"#,
        am = echo.url("/am"),
        prom = echo.url("/prom"),
        rw = echo.url("/rw/api/v1/write"),
        llm = echo.url("/llm/v1"),
    );
    let node = Node::new("sec-node", 41, "token_env = \"T_HTTP_TOKEN\"", &extra);
    let slack_url = echo.url(&format!("/services/T0/B0/{SLACK_SECRET}"));
    let hook_url = echo.url(&format!("/hook?token={WEBHOOK_URL_TOKEN}"));
    let env = [
        ("T_HTTP_TOKEN", HTTP_TOKEN),
        ("T_SLACK_URL", slack_url.as_str()),
        ("T_HOOK_URL", hook_url.as_str()),
        ("T_HMAC", HMAC_KEY),
        ("T_PROM_TOKEN", PROM_TOKEN),
        ("T_LLM_KEY", LLM_KEY),
        ("RUST_LOG", "debug"),
    ];
    let mut daemon = node.start(&env);

    // Every secret that travels has travelled, and been refused with an echo, a few times.
    let wanted = [
        SLACK_SECRET,
        WEBHOOK_URL_TOKEN,
        AM_TOKEN,
        PROM_TOKEN,
        RW_TOKEN,
    ];
    wait_for("each secret sent twice", Duration::from_secs(60), || {
        let seen = echo.seen();
        wanted
            .iter()
            .all(|s| seen.matches(s).count() >= 2)
            .then_some(())
    });
    wait_for("the SMTP failure logged", Duration::from_secs(30), || {
        node.log().contains("mail").then_some(())
    });

    let mut out = Vec::new();
    for path in [
        "/metrics",
        "/api/v1/status",
        "/api/v1/alerts",
        "/api/v1/history?gpu=0&metric=temp&since=1h",
        "/api/v1/gpu/audit",
        "/",
        "/healthz",
    ] {
        let (status, _, body) = node.get(path, Some(HTTP_TOKEN));
        assert_eq!(status, 200, "{path}: {body}");
        out.push(format!("GET {path}\n{body}"));
        // A wrong token is refused without an echo of the right one.
        let (_, _, denied) = node.get(path, Some("wrong"));
        out.push(format!("GET {path} (wrong token)\n{denied}"));
    }
    let env_cli: Vec<(&str, &str)> = env[..6].to_vec();
    for args in [
        &["status"][..],
        &["status", "--format", "json"],
        &["alerts"],
        &["alerts", "--format", "json"],
        &["incident", "1"],
        &["incident", "1", "--format", "json"],
        &["incident", "1", "--explain"],
        &["incident", "1", "--show-prompt"],
        &["doctor"],
        &["doctor", "--format", "json"],
        &["notify", "test"],
        &["query", "SELECT * FROM notifications", "--format", "json"],
    ] {
        out.push(cli_any(&node, &env_cli, args));
    }
    let seen = echo.seen();
    assert!(
        seen.contains(&format!("Bearer {LLM_KEY}")),
        "--explain asked the model with its key: {seen}"
    );
    assert!(
        seen.contains("x-gpuwatch-signature") || seen.contains("X-Gpuwatch-Signature"),
        "the webhook was signed with the HMAC key: {seen}"
    );
    assert!(daemon.sigterm().success(), "{}", node.log());
    let log = node.log();
    assert!(
        log.contains("DEBUG"),
        "the daemon logged at debug level: {log}"
    );
    out.push(format!("run.log\n{log}"));

    let everything = out.join("\n");
    for secret in ALL {
        let hits: Vec<&str> = everything
            .lines()
            .filter(|l| l.contains(secret))
            .take(5)
            .collect();
        assert!(hits.is_empty(), "{secret} leaked:\n{}", hits.join("\n"));
    }
    for name in ["g.db", "g.db-wal", "g.db-shm"] {
        let Ok(bytes) = std::fs::read(node.path(name)) else {
            continue;
        };
        for secret in ALL {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} is stored in {name}"
            );
        }
    }
    for name in ["g.db", "g.db-wal", "g.db-shm", "g.db.lock"] {
        let Ok(meta) = std::fs::metadata(node.path(name)) else {
            assert_ne!(name, "g.db", "the database exists");
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "{name} is {mode:o}: readable by others");
    }
}
