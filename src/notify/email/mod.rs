//! The email receiver: one SMTP delivery attempt per [`EmailReceiver::send`], with lettre's
//! `AsyncSmtpTransport<Tokio1Executor>`.
//!
//! The message: From, To (every address of `to`), Subject = [`text::title`], Date,
//! `Auto-Submitted: auto-generated`, and `multipart/alternative` of the plain text
//! ([`text::plain`]) and `multipart/related` of the HTML ([`html`]) with up to
//! [`chart::MAX_CHARTS`] inline PNG charts ([`chart`]) referenced by `cid:`.
//!
//! Invariants:
//! - TLS is what the config says: `starttls` is required, never opportunistic (no STARTTLS
//!   offered = a permanent failure, nothing sent in plaintext); `tls` is implicit TLS; both
//!   trust webpki's roots plus the PEM certificates of `ca_file` (read once, at build).
//! - The SMTP password is read with [`secret::read`] at every attempt (rotated files work)
//!   and lives only in lettre's credentials for that attempt; no error, log line or `Debug`
//!   output contains it ([`classify`] scrubs every message).
//! - The receiver's `timeout` bounds each SMTP command and the whole attempt; charts get at
//!   most half of it and are left out (with a note) when the database is slow or unreadable.
//! - Failures are classified by [`classify::classify`]: 5xx, TLS and client-side refusals are
//!   permanent; 4xx, network errors and timeouts are transient. An unreadable password
//!   (missing variable or file) is transient: the operator can fix it without a restart and
//!   the backlog alert says so meanwhile.

pub mod chart;
pub mod classify;
pub mod html;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::config::{EmailConfig, ReceiverConfig, SecretSource, SmtpTls};
use crate::notify::{BuildCtx, Notification, SendError, text};
use crate::secret;
use chart::Outcome;
use html::ChartRef;

pub struct EmailReceiver {
    name: String,
    host: String,
    port: u16,
    tls: Tls,
    username: Option<String>,
    password: Option<SecretSource>,
    from: Mailbox,
    to: Vec<Mailbox>,
    timeout: Duration,
    /// The database for charts (`None` when `chart = false` or no database).
    chart_db: Option<PathBuf>,
}

impl std::fmt::Debug for EmailReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailReceiver")
            .field("name", &self.name)
            .field("server", &self.server())
            .field("tls", &self.tls)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl EmailReceiver {
    /// Checks the addresses and builds the TLS parameters (reading `ca_file`). Errors are
    /// setup problems, named with the receiver.
    pub fn new(cfg: &ReceiverConfig, c: &EmailConfig, ctx: &BuildCtx) -> Result<Self, String> {
        let name = &cfg.name;
        let mailbox = |what: &str, s: &str| -> Result<Mailbox, String> {
            s.trim()
                .parse::<Mailbox>()
                .map_err(|e| format!("email receiver {name}: {what} {s:?} is not an address: {e}"))
        };
        let from = mailbox("from", &c.from)?;
        let to =
            c.to.iter()
                .map(|t| mailbox("to", t))
                .collect::<Result<Vec<_>, _>>()?;
        if to.is_empty() {
            return Err(format!("email receiver {name}: no `to` address"));
        }
        let tls = match c.tls {
            SmtpTls::None => Tls::None,
            SmtpTls::StartTls => Tls::Required(tls_parameters(name, c)?),
            SmtpTls::Tls => Tls::Wrapper(tls_parameters(name, c)?),
        };
        Ok(Self {
            name: name.clone(),
            host: c.smtp_host.clone(),
            port: c.smtp_port,
            tls,
            username: c.username.clone(),
            password: c.password.clone(),
            from,
            to,
            timeout: cfg.timeout,
            chart_db: ctx.db.clone().filter(|_| c.chart),
        })
    }

    /// `host:port`, as errors name the server.
    fn server(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// One delivery attempt: builds the message (charts included) and hands it to the SMTP
    /// server within the receiver's timeout.
    pub async fn send(&self, n: &Notification) -> Result<(), SendError> {
        let server = self.server();
        let attempt = async {
            let message = self.message(n).await?;
            let transport = self.transport()?;
            transport
                .send(message)
                .await
                .map(|_| ())
                .map_err(|e| classify::classify(&server, &e))
        };
        let result = match tokio::time::timeout(self.timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(SendError::transient(format!(
                "SMTP server {server} did not accept the message within {}",
                humantime::format_duration(self.timeout)
            ))),
        };
        match &result {
            Ok(()) => {
                tracing::debug!(receiver = %self.name, %server, alerts = n.alerts.len(), "email sent")
            }
            Err(e) => {
                tracing::debug!(receiver = %self.name, %server, error = %secret::scrub(&e.to_string()), "email not sent")
            }
        }
        result
    }

    /// The transport of one attempt, with the password read now.
    fn transport(&self) -> Result<AsyncSmtpTransport<Tokio1Executor>, SendError> {
        let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(self.host.as_str())
            .port(self.port)
            .tls(self.tls.clone())
            .timeout(Some(self.timeout));
        if let (Some(user), Some(source)) = (&self.username, &self.password) {
            let password = secret::read("SMTP password", source).map_err(|e| {
                SendError::transient(secret::scrub(&format!(
                    "SMTP server {}: {e}",
                    self.server()
                )))
            })?;
            b = b.credentials(Credentials::new(
                user.clone(),
                password.expose().to_string(),
            ));
        }
        Ok(b.build())
    }

    /// The MIME message of a usage digest: its table and its chart (inline PNG).
    fn digest_message(&self, d: &crate::usage::digest::DigestMsg) -> Result<Message, SendError> {
        let cid = format!("digest.{:x}@gpuwatch", fastrand::u64(..));
        let png = crate::notify::digest::chart_png(d);
        let html = crate::notify::digest::html(d, png.as_ref().ok().map(|_| cid.as_str()));
        let mut related = MultiPart::related().singlepart(SinglePart::html(html));
        if let Ok(bytes) = png {
            let kind = ContentType::parse("image/png")
                .map_err(|e| SendError::Permanent(format!("content type image/png: {e}")))?;
            related = related.singlepart(Attachment::new_inline(cid).body(bytes, kind));
        }
        let body = MultiPart::alternative()
            .singlepart(SinglePart::plain(d.text()))
            .multipart(related);
        self.envelope(format!("[gpuwatch] {}", d.title()), body)
    }

    /// The message around `body`: sender, recipients, subject, date, `Auto-Submitted`.
    fn envelope(&self, subject: String, body: MultiPart) -> Result<Message, SendError> {
        let mut b = Message::builder()
            .from(self.from.clone())
            .subject(subject)
            .date(SystemTime::now())
            .message_id(None);
        for t in &self.to {
            b = b.to(t.clone());
        }
        let mut m = b.multipart(body).map_err(|e| {
            SendError::Permanent(format!(
                "email receiver {}: building the message: {e}",
                self.name
            ))
        })?;
        m.headers_mut().insert_raw(HeaderValue::new(
            HeaderName::new_from_ascii_str("Auto-Submitted"),
            "auto-generated".to_string(),
        ));
        Ok(m)
    }

    /// The MIME message.
    async fn message(&self, n: &Notification) -> Result<Message, SendError> {
        if let Some(d) = &n.digest {
            return self.digest_message(d);
        }
        let outcomes = self.charts(n).await;
        let nonce = format!("{:x}.{:x}", n.now_ms, fastrand::u64(..));
        let mut refs: Vec<Option<ChartRef<'_>>> = vec![None; n.alerts.len()];
        let mut images = Vec::new();
        let cids: Vec<String> = (0..outcomes.len())
            .map(|k| format!("chart{k}.{nonce}@gpuwatch"))
            .collect();
        for (k, (alert, outcome)) in outcomes.iter().enumerate() {
            let Some(slot) = refs.get_mut(*alert) else {
                continue;
            };
            match outcome {
                Outcome::Image { png, stats } => {
                    *slot = Some(ChartRef::Image {
                        cid: &cids[k],
                        stats,
                    });
                    images.push((cids[k].clone(), png.clone()));
                }
                Outcome::Note(note) => *slot = Some(ChartRef::Note(note)),
            }
        }
        let html = html::render(n, &refs);
        let mut related = MultiPart::related().singlepart(SinglePart::html(html));
        let png = ContentType::parse("image/png")
            .map_err(|e| SendError::Permanent(format!("content type image/png: {e}")))?;
        for (cid, bytes) in images {
            related = related.singlepart(Attachment::new_inline(cid).body(bytes, png.clone()));
        }
        let body = MultiPart::alternative()
            .singlepart(SinglePart::plain(text::plain(n)))
            .multipart(related);
        self.envelope(text::title(n), body)
    }

    /// The charts of `n` as (alert index, outcome); empty when charts are off.
    async fn charts(&self, n: &Notification) -> Vec<(usize, Outcome)> {
        let Some(db) = self.chart_db.clone() else {
            return Vec::new();
        };
        let specs = chart::wanted(n);
        if specs.is_empty() {
            return Vec::new();
        }
        let alerts: Vec<usize> = specs.iter().map(|s| s.alert).collect();
        let now = n.now_ms;
        let job = tokio::task::spawn_blocking(move || chart::render(&db, &specs, now));
        let outcomes = match tokio::time::timeout(self.timeout / 2, job).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                let note = format!("No chart: drawing failed ({e}).");
                alerts.iter().map(|_| Outcome::Note(note.clone())).collect()
            }
            Err(_) => {
                let note = "No chart: the history database did not answer in time.".to_string();
                alerts.iter().map(|_| Outcome::Note(note.clone())).collect()
            }
        };
        alerts.into_iter().zip(outcomes).collect()
    }
}

/// TLS parameters for the server name, trusting webpki's roots and `ca_file`'s certificates.
fn tls_parameters(name: &str, c: &EmailConfig) -> Result<TlsParameters, String> {
    let mut b = TlsParameters::builder(c.smtp_host.clone());
    if let Some(path) = &c.ca_file {
        let pem = std::fs::read(path).map_err(|e| {
            format!(
                "email receiver {name}: cannot read ca_file {}: {e}",
                path.display()
            )
        })?;
        if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
            return Err(format!(
                "email receiver {name}: ca_file {} holds no PEM certificate",
                path.display()
            ));
        }
        let cert = Certificate::from_pem(&pem).map_err(|e| {
            format!(
                "email receiver {name}: ca_file {} holds no PEM certificate: {e}",
                path.display()
            )
        })?;
        b = b.add_root_certificate(cert);
    }
    b.build()
        .map_err(|e| format!("email receiver {name}: TLS setup: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> (ReceiverConfig, EmailConfig) {
        let c = EmailConfig {
            smtp_host: "smtp.example.com".into(),
            smtp_port: 587,
            tls: SmtpTls::StartTls,
            username: None,
            password: None,
            from: "GPU watch <gpuwatch@example.com>".into(),
            to: vec!["oncall@example.com".into()],
            ca_file: None,
            allow_insecure_auth: false,
            chart: true,
        };
        let r = ReceiverConfig {
            name: "mail".into(),
            send_resolved: true,
            timeout: Duration::from_secs(5),
            kind: crate::config::ReceiverKind::Email(c.clone()),
        };
        (r, c)
    }

    #[test]
    fn sends_from_any_thread_and_checks_its_setup() {
        fn send_sync<T: Send + Sync>(_: &T) {}
        fn send<T: Send>(_: T) {}
        let (r, c) = config();
        let rx = EmailReceiver::new(&r, &c, &BuildCtx::default()).unwrap();
        send_sync(&rx);
        send(rx.send(&Notification::default()));
        assert!(format!("{rx:?}").contains("smtp.example.com:587"));

        let mut bad = c.clone();
        bad.ca_file = Some("/surely/missing/ca.pem".into());
        let e = EmailReceiver::new(&r, &bad, &BuildCtx::default()).unwrap_err();
        assert!(
            e.contains("cannot read ca_file /surely/missing/ca.pem"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("ca.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        bad.ca_file = Some(not_pem);
        let e = EmailReceiver::new(&r, &bad, &BuildCtx::default()).unwrap_err();
        assert!(e.contains("holds no PEM certificate"), "{e}");
    }
}
