//! A real SMTP server for tests: `smtp_auth.py` (aiosmtpd, run by the system Python) on a free
//! loopback port, optionally with AUTH, STARTTLS or implicit TLS (a test CA and certificate
//! made by the `openssl` CLI), killed on drop.
//!
//! Use it from any test file with
//! `use crate::notify_support::smtp;`:
//!
//! ```ignore
//! let server = smtp::SmtpServer::start();                  // plain, no AUTH
//! let server = smtp::SmtpServer::start_with(smtp::Options {
//!     auth: Some(("alice".into(), "pw".into())),
//!     tls: smtp::ServerTls::StartTls,
//!     ..Default::default()
//! });
//! // ... send to 127.0.0.1:server.port() (trust server.ca_file() for TLS) ...
//! let msgs = server.wait_for_messages(1, Duration::from_secs(10));
//! assert_eq!(msgs[0].header("Subject"), Some("..."));
//! ```
//!
//! Every received message is parsed by Python's `email` package: decoded headers, the MIME
//! structure (`multipart/alternative(text/plain, multipart/related(text/html, image/png))`)
//! and each leaf part's decoded bytes.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Python that has aiosmtpd (Debian's `python3-aiosmtpd`).
pub const PYTHON: &str = "/usr/bin/python3";

/// How the server speaks TLS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServerTls {
    /// Plaintext only (AUTH, when set, is offered in plaintext).
    #[default]
    None,
    /// Offers STARTTLS and requires it before MAIL and AUTH.
    StartTls,
    /// TLS from the first byte (SMTPS).
    Implicit,
}

/// What the server accepts and how it fails.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Accept AUTH PLAIN/LOGIN for exactly this (username, password); 535 for anything else.
    pub auth: Option<(String, String)>,
    pub tls: ServerTls,
    /// Answer `550 mailbox unavailable` to `RCPT TO` of this address.
    pub reject_rcpt: Option<String>,
    /// Answer `451 try again later` to every DATA.
    pub tempfail_data: bool,
}

/// One leaf MIME part, decoded.
#[derive(Debug, Clone)]
pub struct Part {
    pub content_type: String,
    /// As written in the header, with the angle brackets (`<chart-0@host>`).
    pub content_id: Option<String>,
    /// `inline`, `attachment` or none.
    pub disposition: Option<String>,
    /// The decoded text of `text/*` parts.
    pub text: Option<String>,
    /// The decoded bytes (UTF-8 of the text for text parts).
    pub bytes: Vec<u8>,
}

/// One message as the server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub mail_from: String,
    pub rcpt_to: Vec<String>,
    /// Whether the client authenticated, and whether the session was encrypted.
    pub authenticated: bool,
    pub tls: bool,
    /// The message as sent (after the SMTP dot-unstuffing).
    pub raw: Vec<u8>,
    /// Decoded headers in order (`Subject` as text, not as encoded words).
    pub headers: Vec<(String, String)>,
    /// e.g. `multipart/alternative(text/plain, multipart/related(text/html, image/png))`.
    pub structure: String,
    /// The leaf parts in order.
    pub parts: Vec<Part>,
}

impl Received {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first leaf part of that content type (`text/plain`, `text/html`, `image/png`).
    pub fn part(&self, content_type: &str) -> Option<&Part> {
        self.parts.iter().find(|p| p.content_type == content_type)
    }

    /// Every leaf part of that content type.
    pub fn parts_of(&self, content_type: &str) -> Vec<&Part> {
        self.parts
            .iter()
            .filter(|p| p.content_type == content_type)
            .collect()
    }

    /// The decoded text of the first part of that type (panics when there is none).
    pub fn text(&self, content_type: &str) -> String {
        self.part(content_type)
            .and_then(|p| p.text.clone())
            .unwrap_or_else(|| panic!("no {content_type} part in {}", self.structure))
    }
}

/// A running server; killed (and its files removed) on drop.
pub struct SmtpServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    ca: Option<PathBuf>,
}

impl SmtpServer {
    /// Plaintext, no AUTH: accepts every message.
    pub fn start() -> SmtpServer {
        Self::start_with(Options::default())
    }

    /// Starts the server and waits (up to 20 s) until it accepts connections.
    pub fn start_with(opts: Options) -> SmtpServer {
        require_aiosmtpd();
        let dir = tempfile::tempdir().expect("tempdir");
        let mail = dir.path().join("mail");
        std::fs::create_dir(&mail).expect("mkdir mail");
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/gpuwatch/notify_support/smtp_auth.py");
        let mut cmd = Command::new(PYTHON);
        cmd.arg(&script).arg("--dir").arg(&mail);
        let mut ca = None;
        match opts.tls {
            ServerTls::None => {}
            ServerTls::StartTls | ServerTls::Implicit => {
                let (ca_pem, cert, key) = make_certs(dir.path());
                cmd.arg("--tls")
                    .arg(if opts.tls == ServerTls::StartTls {
                        "starttls"
                    } else {
                        "implicit"
                    })
                    .arg("--cert")
                    .arg(cert)
                    .arg("--key")
                    .arg(key);
                ca = Some(ca_pem);
            }
        }
        if let Some((user, password)) = &opts.auth {
            cmd.arg("--user")
                .arg(user)
                .arg("--password-env")
                .arg("SMTP_TEST_PASSWORD")
                .env("SMTP_TEST_PASSWORD", password);
        }
        if let Some(r) = &opts.reject_rcpt {
            cmd.arg("--reject-rcpt").arg(r);
        }
        if opts.tempfail_data {
            cmd.arg("--tempfail-data");
        }
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log file");
        cmd.stdout(Stdio::piped()).stderr(log).stdin(Stdio::null());
        let mut child = cmd.spawn().expect("start python3 smtp_auth.py");
        let stdout = child.stdout.take().expect("stdout");
        // The script prints "PORT <n>" once it listens.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse::<u16>().ok());
        let mut server = SmtpServer {
            child,
            port: port.unwrap_or(0),
            dir,
            ca,
        };
        if port.is_none() {
            let _ = server.child.kill();
            let _ = server.child.wait();
            panic!("the SMTP server did not start: {}", server.log());
        }
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The PEM of the CA that signed the server's certificate (TLS modes; the certificate
    /// is for IP 127.0.0.1).
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// A directory that lives as long as the server (for configs, databases, secrets).
    pub fn scratch_dir(&self) -> &Path {
        self.dir.path()
    }

    /// What the server printed on stderr (aiosmtpd's log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Every message received so far, in order.
    pub fn messages(&self) -> Vec<Received> {
        let mail = self.dir.path().join("mail");
        let mut out = Vec::new();
        for n in 1.. {
            let json = mail.join(format!("{n}.json"));
            let Ok(doc) = std::fs::read_to_string(&json) else {
                break;
            };
            let raw = std::fs::read(mail.join(format!("{n}.eml"))).expect("eml");
            out.push(parse(&doc, raw));
        }
        out
    }

    /// Waits (polling) until at least `n` messages arrived; panics after `timeout`.
    pub fn wait_for_messages(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.messages();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} messages after {timeout:?}; server log:\n{}",
                got.len(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse(doc: &str, raw: Vec<u8>) -> Received {
    let v: serde_json::Value = serde_json::from_str(doc).expect("message json");
    let s = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let headers = v["headers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|h| (s(&h[0]).unwrap_or_default(), s(&h[1]).unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let parts = v["parts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| Part {
                    content_type: s(&p["content_type"]).unwrap_or_default(),
                    content_id: s(&p["content_id"]),
                    disposition: s(&p["disposition"]),
                    text: s(&p["text"]),
                    bytes: hex::decode(p["hex"].as_str().unwrap_or_default()).expect("hex"),
                })
                .collect()
        })
        .unwrap_or_default();
    Received {
        mail_from: s(&v["mail_from"]).unwrap_or_default(),
        rcpt_to: v["rcpt_to"]
            .as_array()
            .map(|a| a.iter().filter_map(s).collect())
            .unwrap_or_default(),
        authenticated: v["authenticated"].as_bool().unwrap_or(false),
        tls: v["tls"].as_bool().unwrap_or(false),
        raw,
        headers,
        structure: s(&v["structure"]).unwrap_or_default(),
        parts,
    }
}

/// Panics with the fix when the system Python lacks aiosmtpd.
pub fn require_aiosmtpd() {
    let ok = Command::new(PYTHON)
        .args(["-c", "import aiosmtpd"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{PYTHON} cannot import aiosmtpd: run scripts/test.sh (as root it installs Debian's \
         python3-aiosmtpd), or `apt-get install python3-aiosmtpd`"
    );
}

/// A test CA and a server certificate for IP 127.0.0.1 signed by it (openssl CLI):
/// (CA PEM, server certificate PEM, server key PEM).
pub fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write ext.cnf");
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    let steps = [
        format!("req -x509 {ec} -keyout ca.key -out ca.pem -days 2 -subj /CN=gpuwatch-test-CA"),
        format!("req {ec} -keyout srv.key -out srv.csr -subj /CN=127.0.0.1"),
        "x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 \
         -extfile ext.cnf"
            .to_string(),
    ];
    for step in steps {
        let args: Vec<&str> = step.split_whitespace().collect();
        let out = Command::new("openssl")
            .args(&args)
            .current_dir(dir)
            .output()
            .expect("openssl (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {step}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (dir.join("ca.pem"), dir.join("srv.pem"), dir.join("srv.key"))
}
