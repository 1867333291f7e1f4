//! The email receiver against a real SMTP server (aiosmtpd, `notify_support/smtp.rs`): the
//! received MIME message (subject, addresses, plain and HTML parts, the inline PNG chart drawn
//! from a real store), resolved messages, AUTH in plaintext and over STARTTLS / implicit TLS
//! with a test CA, and how each failure is classified — with the password never in an error,
//! its `Debug` or the logs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use gpuwatch::config::{Config, ReceiverKind};
use gpuwatch::model::{GpuSample, SampleStatus, TickBatch};
use gpuwatch::notify::email::EmailReceiver;
use gpuwatch::notify::{AlertMsg, BuildCtx, Notification, SendError, text};
use gpuwatch::store::{self, StoreConfig, synth::TickGen};

use crate::notify_support::smtp::{Options, ServerTls, SmtpServer};

const HOST: &str = "node-7";
/// 2025-06-15 15:00:00 UTC.
const NOW: i64 = 1_750_000_000_000 - 1_750_000_000_000 % 3_600_000;
const PASSWORD: &str = "pw-Zq8!sekrit-4711";
const WAIT: Duration = Duration::from_secs(10);

/// An email receiver parsed from a real config; `extra` adds keys to `[[notify.email]]`.
fn receiver(port: u16, extra: &str, db: Option<PathBuf>) -> EmailReceiver {
    let toml = format!(
        "host = \"{HOST}\"\n\
         [[notify.email]]\n\
         name = \"oncall-mail\"\n\
         smtp_host = \"127.0.0.1\"\n\
         smtp_port = {port}\n\
         from = \"GPU watch <gpuwatch@example.com>\"\n\
         to = [\"oncall@example.com\", \"Second Person <second@example.com>\"]\n\
         {extra}\n"
    );
    let cfg = Config::parse(&toml, Path::new("test.toml")).unwrap_or_else(|e| panic!("{e}"));
    let r = cfg.notify.receivers[0].clone();
    let ReceiverKind::Email(c) = &r.kind else {
        panic!("not email")
    };
    let ctx = BuildCtx {
        db,
        host: HOST.into(),
    };
    EmailReceiver::new(&r, c, &ctx).expect("receiver")
}

/// A store with one GPU: busy (88..98 %) until 20 minutes before NOW, then idle (0..4 %), one
/// sample a second and a 30 s gap; returns the database path and the GPU's `gpus.id`.
fn store_with_samples(dir: &Path) -> (PathBuf, i64) {
    let path = dir.join("g.db");
    let mut st = store::open(&path, &StoreConfig::new(HOST)).expect("store");
    let tg = TickGen::new(1, 0);
    let uuid = tg.uuid(0);
    let samples: Vec<GpuSample> = (0..=3600)
        .map(|i| {
            let ts = NOW - 3_600_000 + i * 1000;
            if (1000..1030).contains(&i) {
                return GpuSample::empty(ts, &uuid, SampleStatus::DeadlineMissed);
            }
            let mut s = GpuSample::empty(ts, &uuid, SampleStatus::Ok);
            let noise = |k: i64, m: i64| ((i * k) % m) as u32;
            s.util_gpu_pct = Some(if ts < NOW - 1_200_000 {
                88 + noise(37, 11)
            } else {
                noise(13, 5)
            });
            s.temp_c = Some(60 + noise(7, 4));
            s
        })
        .collect();
    st.write_tick(&TickBatch {
        ts_ms: NOW,
        inventory: tg.inventory(),
        samples,
        ..Default::default()
    })
    .expect("write");
    let gpu_id = st
        .conn()
        .query_row("SELECT id FROM gpus WHERE uuid = ?1", [&uuid], |r| r.get(0))
        .expect("gpu id");
    (path, gpu_id)
}

fn alert(gpu_id: Option<i64>) -> AlertMsg {
    AlertMsg {
        id: 42,
        state: "firing".into(),
        rule: "gpu_idle".into(),
        severity: "warning".into(),
        summary: "GPU 0 idle <2%> for 20m while pid 4242 holds 40 GiB".into(),
        host: HOST.into(),
        gpu: Some(0),
        uuid: Some("GPU-5e1f0c3a-0000-0000-0000-000000000000".into()),
        model: Some("NVIDIA H100 80GB HBM3".into()),
        pid: Some(4242),
        process: Some("python".into()),
        user: Some("alice".into()),
        starts_ms: NOW - 1_200_000,
        fired_ms: NOW - 900_000,
        metric: Some("util_gpu".into()),
        gpu_id,
        ..Default::default()
    }
}

fn notification(alerts: Vec<AlertMsg>) -> Notification {
    Notification {
        digest: None,
        receiver: "oncall-mail".into(),
        group_key: "rule=gpu_idle,host=node-7".into(),
        alerts,
        sender_host: HOST.into(),
        now_ms: NOW,
        ..Default::default()
    }
}

fn crlf_to_lf(s: &str) -> String {
    s.replace("\r\n", "\n")
}

#[tokio::test(flavor = "current_thread")]
async fn firing_message_has_text_html_and_a_chart_from_the_store() {
    logs();
    let server = SmtpServer::start();
    let (db, gpu_id) = store_with_samples(server.scratch_dir());
    let r = receiver(server.port(), "tls = \"none\"", Some(db));
    let n = notification(vec![alert(Some(gpu_id))]);
    r.send(&n).await.expect("sent");

    let m = &server.wait_for_messages(1, WAIT)[0];
    assert_eq!(m.header("Subject"), Some(text::title(&n).as_str()));
    assert!(
        m.header("Subject")
            .unwrap()
            .starts_with("[FIRING:1] warning gpu_idle on node-7")
    );
    assert_eq!(m.header("From"), Some("GPU watch <gpuwatch@example.com>"));
    let to = m.header("To").expect("To");
    assert!(
        to.contains("oncall@example.com") && to.contains("second@example.com"),
        "{to}"
    );
    assert_eq!(m.mail_from, "gpuwatch@example.com");
    assert_eq!(m.rcpt_to, ["oncall@example.com", "second@example.com"]);
    assert!(m.header("Date").is_some());
    assert!(m.header("Message-ID").is_some());
    assert_eq!(m.header("Auto-Submitted"), Some("auto-generated"));
    assert_eq!(
        m.structure,
        "multipart/alternative(text/plain, multipart/related(text/html, image/png))"
    );

    // The plain part is text::plain, word for word.
    assert_eq!(crlf_to_lf(&m.text("text/plain")), text::plain(&n));

    // The HTML: escaped alert text, every field, the story command, the chart by cid.
    let html = m.text("text/html");
    assert!(html.contains("idle &lt;2%&gt; for 20m"), "{html}");
    assert!(!html.contains("<2%>"));
    for want in [
        "FIRING \u{00b7} WARNING",
        "#d97706",
        "node-7",
        "GPU 0 \u{00b7} NVIDIA H100 80GB HBM3",
        "GPU-5e1f0c3a-0000-0000-0000-000000000000",
        "pid 4242 python (user alice)",
        "firing for 20m",
        "#42",
        "gpuwatch incident 42",
        "util_gpu on GPU 0, last hour",
        "min <b>0 %</b>",
        "max <b>98 %</b>",
        "last <b>0 %</b>",
        "14:00:00 UTC \u{2013} 15:00:00 UTC (60 min, 3571 samples)",
        "shaded: since the alert started",
    ] {
        assert!(html.contains(want), "{want:?} missing in\n{html}");
    }
    let png = m.part("image/png").expect("png part");
    assert_eq!(&png.bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(png.disposition.as_deref(), Some("inline"));
    let cid = png.content_id.as_deref().expect("Content-ID");
    let cid = cid.trim_start_matches('<').trim_end_matches('>');
    assert!(
        html.contains(&format!("src=\"cid:{cid}\"")),
        "{cid} not in {html}"
    );
    // NOTIFY_EMAIL_DUMP=DIR keeps the message, its HTML and the PNG for a look.
    if let Some(dir) = std::env::var_os("NOTIFY_EMAIL_DUMP") {
        let dir = PathBuf::from(dir);
        std::fs::write(dir.join("alert.eml"), &m.raw).unwrap();
        std::fs::write(dir.join("alert.html"), &html).unwrap();
        std::fs::write(dir.join("chart.png"), &png.bytes).unwrap();
    }
    eprintln!(
        "message with one chart: {} bytes (PNG {} bytes)",
        m.raw.len(),
        png.bytes.len()
    );
    assert!(m.raw.len() < 64 * 1024, "{} bytes", m.raw.len());

    // Five alerts with charts: the first four get one (distinct Content-IDs), the fifth none.
    let alerts: Vec<AlertMsg> = (0..5)
        .map(|i| {
            let mut a = alert(Some(gpu_id));
            a.id = 100 + i;
            a.metric = Some(if i % 2 == 0 { "util" } else { "temp" }.into());
            a
        })
        .collect();
    r.send(&notification(alerts)).await.expect("sent");
    let m = &server.wait_for_messages(2, WAIT)[1];
    let pngs = m.parts_of("image/png");
    assert_eq!(pngs.len(), 4);
    let html = m.text("text/html");
    let mut cids: Vec<&str> = pngs
        .iter()
        .filter_map(|p| p.content_id.as_deref())
        .collect();
    for cid in &cids {
        let cid = cid.trim_start_matches('<').trim_end_matches('>');
        assert!(html.contains(&format!("cid:{cid}")), "{cid}");
    }
    cids.sort_unstable();
    cids.dedup();
    assert_eq!(cids.len(), 4);
    assert!(html.contains("temp on GPU 0, last hour") && html.contains("max <b>63 °C</b>"));
    eprintln!("message with four charts: {} bytes", m.raw.len());
}

#[tokio::test(flavor = "current_thread")]
async fn resolved_message_looks_resolved_and_charts_degrade_to_notes() {
    logs();
    let server = SmtpServer::start();
    let (db, gpu_id) = store_with_samples(server.scratch_dir());
    let r = receiver(server.port(), "tls = \"none\"", Some(db.clone()));
    let mut a = alert(Some(gpu_id));
    a.state = "resolved".into();
    a.ends_ms = Some(NOW - 300_000);
    // A second alert for a GPU without samples: a note instead of a chart.
    let mut other = alert(Some(gpu_id + 100));
    other.id = 43;
    other.metric = Some("temp".into());
    let n = notification(vec![other, a]);
    r.send(&n).await.expect("sent");
    let m = &server.wait_for_messages(1, WAIT)[0];
    assert!(
        m.header("Subject")
            .unwrap()
            .starts_with("[FIRING:1] warning gpu_idle"),
        "{:?}",
        m.header("Subject")
    );
    let html = m.text("text/html");
    assert!(html.contains("\u{2713} RESOLVED"), "{html}");
    assert!(html.contains("#16a34a"));
    assert!(
        html.contains("resolved at 2025-06-15 14:55:00 UTC after 15m"),
        "{html}"
    );
    assert!(html.contains("shaded: while the alert was active"));
    assert!(html.contains("No chart: no temp samples of this GPU in the last hour."));
    assert_eq!(m.parts_of("image/png").len(), 1);

    // Only resolved: a [RESOLVED] subject. An unreadable database: notes, and still sent.
    let r = receiver(
        server.port(),
        "tls = \"none\"",
        Some(server.scratch_dir().join("missing.db")),
    );
    let mut a = alert(Some(gpu_id));
    a.state = "resolved".into();
    a.ends_ms = Some(NOW - 300_000);
    r.send(&notification(vec![a])).await.expect("sent");
    let m = &server.wait_for_messages(2, WAIT)[1];
    assert!(
        m.header("Subject")
            .unwrap()
            .starts_with("[RESOLVED:1] gpu_idle")
    );
    assert_eq!(
        m.structure,
        "multipart/alternative(text/plain, multipart/related(text/html))"
    );
    assert!(
        m.text("text/html")
            .contains("No chart: the history database could not be read")
    );

    // chart = false: no chart and no note.
    let r = receiver(server.port(), "tls = \"none\"\nchart = false", Some(db));
    r.send(&notification(vec![alert(Some(gpu_id))]))
        .await
        .expect("sent");
    let m = &server.wait_for_messages(3, WAIT)[2];
    assert!(m.part("image/png").is_none());
    assert!(!m.text("text/html").contains("No chart"));
}

/// Everything the email path logs (gpuwatch's notify module and lettre, every level) in any
/// test of this binary: a global subscriber (a scoped one would miss events whose callsites
/// other test threads registered first), filtered to those targets so the other modules'
/// tests log nothing into it.
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        #[derive(Clone)]
        struct W(Arc<Mutex<Vec<u8>>>);
        impl Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = W(buf.clone());
        let sub = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "gpuwatch::notify=trace,lettre=trace",
            ))
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        tracing::subscriber::set_global_default(sub).expect("global subscriber");
        buf
    })
}

#[tokio::test(flavor = "current_thread")]
async fn auth_in_plaintext_on_loopback_and_a_wrong_password_is_permanent_and_secret() {
    let server = SmtpServer::start_with(Options {
        auth: Some(("alice".into(), PASSWORD.into())),
        ..Default::default()
    });
    let pw = server.scratch_dir().join("smtp-password");
    std::fs::write(&pw, "not-the-password-9\n").unwrap();
    let extra = format!(
        "tls = \"none\"\nusername = \"alice\"\npassword_file = \"{}\"",
        pw.display()
    );
    let r = receiver(server.port(), &extra, None);
    let n = notification(vec![alert(None)]);

    let logs = logs();
    let e = r.send(&n).await.expect_err("wrong password");
    eprintln!("wrong password: {e}");
    let SendError::Permanent(msg) = &e else {
        panic!("not permanent: {e:?}")
    };
    assert!(
        msg.contains(&format!("127.0.0.1:{}", server.port())),
        "{msg}"
    );
    assert!(msg.contains("535"), "{msg}");
    assert!(msg.contains("authentication failed"), "{msg}");

    // The password is read at each send: the rotated file works without a rebuild.
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    r.send(&n).await.expect("right password");
    std::fs::write(&pw, "not-the-password-9\n").unwrap();
    let e2 = r.send(&n).await.expect_err("wrong again");

    let m = &server.wait_for_messages(1, WAIT)[0];
    assert!(m.authenticated && !m.tls);
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("email not sent") && logs.contains("email sent"),
        "{logs}"
    );
    for text in [
        msg.clone(),
        format!("{e:?}"),
        e.to_string(),
        format!("{e2:?}"),
        format!("{r:?}"),
        logs,
    ] {
        assert!(!text.contains(PASSWORD), "password leaked: {text}");
        assert!(
            !text.contains("not-the-password-9"),
            "password leaked: {text}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn starttls_and_implicit_tls_with_a_ca_file() {
    logs();
    for (mode, tls) in [
        (ServerTls::StartTls, "starttls"),
        (ServerTls::Implicit, "tls"),
    ] {
        let server = SmtpServer::start_with(Options {
            auth: Some(("alice".into(), PASSWORD.into())),
            tls: mode,
            ..Default::default()
        });
        let pw = server.scratch_dir().join("smtp-password");
        std::fs::write(&pw, PASSWORD).unwrap();
        let ca = server.ca_file().expect("ca").display().to_string();
        let extra = format!(
            "tls = \"{tls}\"\nusername = \"alice\"\npassword_file = \"{}\"\nca_file = \"{ca}\"",
            pw.display()
        );
        let r = receiver(server.port(), &extra, None);
        r.send(&notification(vec![alert(None)]))
            .await
            .unwrap_or_else(|e| panic!("{tls}: {e}\n{}", server.log()));
        let m = &server.wait_for_messages(1, WAIT)[0];
        assert!(m.tls && m.authenticated, "{tls}");

        // Without the CA the certificate is refused: a configuration problem, permanent.
        let extra = format!(
            "tls = \"{tls}\"\nusername = \"alice\"\npassword_file = \"{}\"",
            pw.display()
        );
        let e = receiver(server.port(), &extra, None)
            .send(&notification(vec![alert(None)]))
            .await
            .expect_err("untrusted");
        eprintln!("{tls} without the CA: {e}");
        let SendError::Permanent(msg) = &e else {
            panic!("{tls}: not permanent: {e:?}")
        };
        assert!(
            msg.contains("TLS") && msg.to_lowercase().contains("certificate"),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("127.0.0.1:{}", server.port())),
            "{msg}"
        );
        assert!(!format!("{e:?}").contains(PASSWORD));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn failures_are_classified() {
    logs();
    // Nothing listens: transient, naming the server.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = receiver(port, "tls = \"none\"", None)
        .send(&notification(vec![alert(None)]))
        .await
        .expect_err("refused");
    eprintln!("refused: {e}");
    assert!(matches!(e, SendError::Transient { .. }), "{e:?}");
    assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");

    // An unreadable password file: transient (fixable without a restart), naming the file.
    let missing = std::env::temp_dir().join("gpuwatch-surely-missing-password");
    let extra = format!(
        "tls = \"none\"\nusername = \"alice\"\npassword_file = \"{}\"",
        missing.display()
    );
    let e = receiver(port, &extra, None)
        .send(&notification(vec![alert(None)]))
        .await
        .expect_err("no password");
    eprintln!("no password file: {e}");
    assert!(matches!(e, SendError::Transient { .. }), "{e:?}");
    assert!(
        e.message().contains("gpuwatch-surely-missing-password"),
        "{e}"
    );
    assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");

    // STARTTLS required but not offered: permanent, and nothing was sent in plaintext.
    let plain = SmtpServer::start_with(Options {
        reject_rcpt: Some("second@example.com".into()),
        ..Default::default()
    });
    let e = receiver(plain.port(), "tls = \"starttls\"", None)
        .send(&notification(vec![alert(None)]))
        .await
        .expect_err("no starttls");
    eprintln!("no STARTTLS: {e}");
    assert!(matches!(e, SendError::Permanent(_)), "{e:?}");
    assert!(e.message().contains("STARTTLS"), "{e}");

    // A rejected recipient (550): permanent, with the code and the server's reason.
    let e = receiver(plain.port(), "tls = \"none\"", None)
        .send(&notification(vec![alert(None)]))
        .await
        .expect_err("550");
    eprintln!("550: {e}");
    assert!(matches!(e, SendError::Permanent(_)), "{e:?}");
    assert!(
        e.message().contains("550") && e.message().contains("mailbox unavailable"),
        "{e}"
    );
    assert!(plain.messages().is_empty());

    // 451 on DATA: transient.
    let busy = SmtpServer::start_with(Options {
        tempfail_data: true,
        ..Default::default()
    });
    let e = receiver(busy.port(), "tls = \"none\"", None)
        .send(&notification(vec![alert(None)]))
        .await
        .expect_err("451");
    eprintln!("451: {e}");
    assert!(matches!(e, SendError::Transient { .. }), "{e:?}");
    assert!(e.message().contains("451"), "{e}");

    // A server that accepts the connection and never answers: the receiver's timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = std::time::Instant::now();
    let e = receiver(port, "tls = \"none\"\ntimeout = \"1s\"", None)
        .send(&notification(vec![alert(None)]))
        .await
        .expect_err("timeout");
    eprintln!("silent server: {e}");
    assert!(matches!(e, SendError::Transient { .. }), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");
    drop(silent);
}
