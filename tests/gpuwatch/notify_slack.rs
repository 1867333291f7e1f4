//! The Slack receiver against a local server that answers like Slack: the message's content
//! and limits, the classification of every kind of failure, `min_interval` spacing, secret
//! rotation, and that the webhook URL's token never shows in errors, Debug output or logs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpuwatch::config::Config;
use gpuwatch::notify::{AlertMsg, BuildCtx, Notification, Receiver, SendError};
use serde_json::Value;

use crate::notify_support::slack_server::{Reply, SlackServer};

const T0: i64 = 1_764_525_600_000; // 2025-11-30 18:00:00 UTC

struct Setup {
    _dir: tempfile::TempDir,
    url_file: PathBuf,
    receiver: Receiver,
    server: SlackServer,
}

/// A Slack receiver built from a parsed config whose URL file points at a fresh server.
fn setup(timeout: &str, min_interval: &str) -> Setup {
    let server = SlackServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let url_file = dir.path().join("slack-url");
    std::fs::write(&url_file, format!("{}\n", server.url())).expect("write url");
    let receiver = receiver(&url_file, timeout, min_interval);
    Setup {
        _dir: dir,
        url_file,
        receiver,
        server,
    }
}

fn receiver(url_file: &Path, timeout: &str, min_interval: &str) -> Receiver {
    let toml = format!(
        r#"
[[notify.slack]]
name = "oncall"
webhook_url_file = "{}"
timeout = "{timeout}"
min_interval = "{min_interval}"
"#,
        url_file.display()
    );
    let cfg = Config::parse(&toml, Path::new("test.toml")).expect("config parses");
    let rc = &cfg.notify.receivers[0];
    Receiver::build(
        rc,
        &BuildCtx {
            db: None,
            host: "node-7".into(),
        },
    )
    .expect("receiver builds")
}

fn alert(firing: bool) -> AlertMsg {
    let labels: BTreeMap<String, String> = [
        ("rule", "training_hang"),
        ("severity", "critical"),
        ("host", "node-7"),
        ("gpu", "3"),
        ("pod", "trainer-0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    AlertMsg {
        id: 42,
        state: if firing { "firing" } else { "resolved" }.into(),
        rule: "training_hang".into(),
        severity: "critical".into(),
        labels,
        summary: "step stuck at 1200 for 6m; util 100% at 71 W".into(),
        description: Some("The training step counter stopped advancing.".into()),
        host: "node-7".into(),
        gpu: Some(3),
        uuid: Some("GPU-5f2c9a1e-abc".into()),
        model: Some("NVIDIA H200".into()),
        pid: Some(4242),
        process: Some("python".into()),
        user: Some("alice".into()),
        starts_ms: T0,
        fired_ms: T0 + 60_000,
        ends_ms: (!firing).then_some(T0 + 40 * 60_000),
        metric: Some("step".into()),
        gpu_id: Some(1),
        analysis: None,
    }
}

fn notification(alerts: Vec<AlertMsg>, now_ms: i64) -> Notification {
    Notification {
        digest: None,
        receiver: "oncall".into(),
        group_key: "rule=training_hang,host=node-7".into(),
        alerts,
        sender_host: "node-7".into(),
        now_ms,
        ..Default::default()
    }
}

/// Every text of the Block Kit blocks, joined.
fn block_texts(body: &Value) -> String {
    let mut out = Vec::new();
    for b in body["blocks"].as_array().expect("blocks") {
        if let Some(t) = b["text"]["text"].as_str() {
            out.push(t.to_string());
        }
        for e in b["elements"].as_array().into_iter().flatten() {
            out.push(e["text"].as_str().unwrap_or_default().to_string());
        }
    }
    out.join("\n")
}

fn check_limits(body: &Value) {
    let blocks = body["blocks"].as_array().expect("blocks");
    assert!(blocks.len() <= 50, "{} blocks", blocks.len());
    for b in blocks {
        if b["type"] == "section" {
            let t = b["text"]["text"].as_str().expect("section text");
            assert!(t.chars().count() <= 3000, "section of {} chars", t.len());
        }
        if b["type"] == "header" {
            let t = b["text"]["text"].as_str().expect("header text");
            assert!(t.chars().count() <= 150, "header of {} chars", t.len());
        }
    }
}

#[tokio::test]
async fn firing_message_carries_everything() {
    let s = setup("5s", "0s");
    s.receiver
        .send(&notification(vec![alert(true)], T0 + 6 * 60_000))
        .await
        .expect("delivered");
    let got = s.server.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.answered_ok);
    let body = r.json();
    check_limits(body);
    assert_eq!(body["blocks"][0]["type"], "header");
    let header = body["blocks"][0]["text"]["text"].as_str().unwrap_or("");
    assert!(
        header.contains("[FIRING:1] critical training_hang on node-7"),
        "{header}"
    );
    let blocks = block_texts(body);
    let text = r.text();
    for want in [
        "critical",
        "training_hang",
        "node-7",
        "GPU 3",
        "NVIDIA H200",
        "GPU-5f2c9a1e-abc",
        "pid 4242 python",
        "pod trainer-0",
        "step stuck at 1200 for 6m; util 100% at 71 W",
        "firing for 6m 0s",
        "gpuwatch incident 42",
    ] {
        assert!(
            blocks.contains(want),
            "{want:?} missing in blocks:\n{blocks}"
        );
        assert!(text.contains(want), "{want:?} missing in text:\n{text}");
    }
    assert!(blocks.contains("Alert 42"), "{blocks}");
    assert!(blocks.contains("The training step counter stopped advancing."));
    assert!(!blocks.contains("RESOLVED"), "{blocks}");
}

#[tokio::test]
async fn the_analysis_line_is_shown_when_the_sender_added_one() {
    let s = setup("5s", "0s");
    let mut with = alert(true);
    with.analysis = Some("Analysis: likely cause: a stuck collective <ranks> & more".into());
    s.receiver
        .send(&notification(vec![with, alert(true)], T0 + 6 * 60_000))
        .await
        .expect("delivered");
    let blocks = block_texts(s.server.received()[0].json());
    assert_eq!(
        blocks
            .matches(":mag: Analysis: likely cause: a stuck collective &lt;ranks&gt; &amp; more")
            .count(),
        1,
        "{blocks}"
    );
}

#[tokio::test]
async fn resolved_message_looks_different() {
    let s = setup("5s", "0s");
    s.receiver
        .send(&notification(vec![alert(false)], T0 + 41 * 60_000))
        .await
        .expect("delivered");
    let got = s.server.received();
    let body = got[0].json();
    check_limits(body);
    let header = body["blocks"][0]["text"]["text"].as_str().unwrap_or("");
    assert!(
        header.starts_with(":white_check_mark: [RESOLVED:1]"),
        "{header}"
    );
    let blocks = block_texts(body);
    for want in [
        ":white_check_mark: *RESOLVED*",
        "~critical~",
        "resolved at 2025-11-30 18:40:00 UTC after 40m 0s",
        "GPU 3 (NVIDIA H200, GPU-5f2c9a1e-abc)",
        "gpuwatch incident 42",
    ] {
        assert!(blocks.contains(want), "{want:?} missing in:\n{blocks}");
    }
    assert!(!blocks.contains("FIRING"), "{blocks}");
    assert!(
        got[0].text().contains("RESOLVED training_hang"),
        "{}",
        got[0].text()
    );
}

#[tokio::test]
async fn many_alerts_stay_within_slacks_limits() {
    let s = setup("5s", "0s");
    let alerts: Vec<AlertMsg> = (0..130)
        .map(|i| AlertMsg {
            id: 1000 + i,
            gpu: Some(i as u32 % 8),
            summary: format!("summary {i} {}", "long ".repeat(1000)),
            ..alert(i < 100)
        })
        .collect();
    s.receiver
        .send(&notification(alerts, T0 + 60_000))
        .await
        .expect("delivered");
    let got = s.server.received();
    let body = got[0].json();
    check_limits(body);
    let blocks = block_texts(body);
    assert!(
        blocks.contains("… and 83 more alerts (53 firing, 30 resolved)"),
        "{blocks}"
    );
    let text = got[0].text();
    assert!(
        text.chars().count() <= 3000,
        "fallback of {} chars",
        text.len()
    );
    assert!(text.contains(" more alerts ("), "{text}");
}

async fn fail(s: &Setup, reply: Reply) -> SendError {
    s.server.script(vec![reply.clone()]);
    match s
        .receiver
        .send(&notification(vec![alert(true)], T0 + 60_000))
        .await
    {
        Ok(()) => panic!("{reply:?} was taken for a success"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn rate_limits_are_transient_with_retry_after() {
    let s = setup("5s", "0s");
    match fail(&s, Reply::RateLimited(7)).await {
        SendError::Transient {
            retry_after,
            message,
        } => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)), "{message}");
            assert!(message.contains("429"), "{message}");
        }
        e => panic!("{e:?}"),
    }
    // Retry-After as an HTTP date: whole seconds, so 4 to 5 s from now. (A fresh receiver:
    // this one now waits out the 7 s before its next request.)
    let s = setup("5s", "0s");
    match fail(&s, Reply::RateLimitedUntil(5)).await {
        SendError::Transient {
            retry_after: Some(d),
            ..
        } => assert!(
            d >= Duration::from_secs(3) && d <= Duration::from_secs(5),
            "{d:?}"
        ),
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn a_429_delays_the_next_message() {
    let s = setup("5s", "0s");
    let _ = fail(&s, Reply::RateLimited(1)).await;
    s.receiver
        .send(&notification(vec![alert(true)], T0))
        .await
        .expect("delivered after the wait");
    let got = s.server.received();
    let gap = got[1].at - got[0].at;
    assert!(
        gap >= Duration::from_millis(900),
        "second request after {gap:?}"
    );
}

#[tokio::test]
async fn server_errors_and_hangs_are_transient() {
    let s = setup("600ms", "0s");
    for reply in [Reply::ServerError, Reply::Unavailable] {
        match fail(&s, reply.clone()).await {
            SendError::Transient { retry_after, .. } => assert_eq!(retry_after, None),
            e => panic!("{reply:?}: {e:?}"),
        }
    }
    let start = Instant::now();
    let e = fail(&s, Reply::Hang).await;
    let took = start.elapsed();
    assert!(matches!(e, SendError::Transient { .. }), "{e:?}");
    assert!(e.message().contains("timed out"), "{e}");
    assert!(took < Duration::from_secs(3), "a hang took {took:?}");
    // The receiver still works after a timed-out attempt.
    s.receiver
        .send(&notification(vec![alert(true)], T0))
        .await
        .expect("delivered after a hang");
}

#[tokio::test]
async fn refusals_are_permanent_and_name_slacks_error() {
    let s = setup("5s", "0s");
    for (reply, code) in [
        (Reply::ChannelNotFound, "channel_not_found"),
        (Reply::ChannelArchived, "channel_is_archived"),
        (Reply::InvalidPayload, "invalid_payload"),
        (Reply::NoText, "no_text"),
        (Reply::ActionProhibited, "action_prohibited"),
    ] {
        match fail(&s, reply).await {
            SendError::Permanent(m) => assert!(m.contains(code), "{code}: {m}"),
            e => panic!("{code}: {e:?}"),
        }
    }
    // A 200 that is not Slack's `ok` (a proxy's page) is not a delivery.
    assert!(matches!(
        fail(&s, Reply::Status(200, "<html>login</html>".into())).await,
        SendError::Permanent(_)
    ));
}

#[tokio::test]
async fn min_interval_spaces_consecutive_messages() {
    let s = setup("5s", "400ms");
    for _ in 0..3 {
        s.receiver
            .send(&notification(vec![alert(true)], T0))
            .await
            .expect("delivered");
    }
    let got = s.server.received();
    assert_eq!(got.len(), 3);
    for pair in got.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(370), "messages {gap:?} apart");
    }
}

#[tokio::test]
async fn the_url_is_read_at_each_send() {
    let s = setup("5s", "0s");
    let n = notification(vec![alert(true)], T0);
    // Unreadable: transient (the file may be being rewritten), naming the file.
    std::fs::remove_file(&s.url_file).expect("rm");
    match s.receiver.send(&n).await {
        Err(SendError::Transient { message, .. }) => {
            assert!(message.contains("slack-url"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // Rotated to another webhook: the next send goes there.
    let other = SlackServer::start();
    std::fs::write(&s.url_file, other.url()).expect("write");
    s.receiver.send(&n).await.expect("delivered");
    assert_eq!(other.received().len(), 1);
    assert_eq!(s.server.received().len(), 0);
}

/// A `tracing` writer into memory.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuf {
    type Writer = LogBuf;
    fn make_writer(&'a self) -> LogBuf {
        self.clone()
    }
}

#[tokio::test]
async fn the_token_never_leaks() {
    let logs = LogBuf::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let s = setup("500ms", "0s");
    let token = s.server.token().to_string();
    let n = notification(vec![alert(true)], T0);
    let mut texts = Vec::new();
    let mut record = |r: Result<(), SendError>| {
        if let Err(e) = r {
            texts.push(format!("{e}\n{e:?}\n{}", e.message()));
        }
    };
    // A proxy that echoes the URL in its error page.
    let echo = format!("bad gateway for POST {}", s.server.url());
    for reply in [
        Reply::ServerError,
        Reply::ChannelNotFound,
        Reply::RateLimited(0),
        Reply::Hang,
        Reply::Status(400, echo.clone()),
        Reply::Status(502, echo),
    ] {
        s.server.script(vec![reply]);
        record(s.receiver.send(&n).await);
    }
    // Connection refused, on a URL with another token.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let token2 = "Zq7RefusedTokenQ9x2Lm4Vb";
    std::fs::write(
        &s.url_file,
        format!("http://{closed}/services/T0/B0/{token2}"),
    )
    .expect("write");
    record(s.receiver.send(&n).await);
    // Not a URL at all.
    let token3 = "Pw3NotAUrlTokenKd8Hs1Jc";
    std::fs::write(&s.url_file, format!("hxxp:/[x/services/T0/B0/{token3}")).expect("write");
    record(s.receiver.send(&n).await);

    assert_eq!(texts.len(), 8, "{texts:#?}");
    if let Receiver::Slack(r) = &s.receiver {
        texts.push(format!("{r:?}"));
    }
    let logged =
        String::from_utf8_lossy(&logs.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    assert!(
        logged.contains("slack: attempt failed"),
        "no log captured:\n{logged}"
    );
    texts.push(logged);
    for t in &texts {
        for secret in [token.as_str(), token2, token3] {
            assert!(!t.contains(secret), "{secret} leaked in:\n{t}");
        }
    }
}
