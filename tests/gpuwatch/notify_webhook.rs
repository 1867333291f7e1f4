//! The generic webhook receiver against a local recording server: schema v1 fields, the
//! HMAC signature (recomputed here), 4xx vs 5xx classification, and a URL read from a file
//! whose token never shows in errors.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gpuwatch::config::Config;
use gpuwatch::notify::{AlertMsg, BuildCtx, Notification, Receiver, SendError};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::notify_support::slack_server::{Reply, SlackServer};

const T0: i64 = 1_764_525_600_000; // 2025-11-30T18:00:00Z

/// A webhook receiver from a parsed config; `extra` holds the URL and signature keys.
fn receiver(extra: &str) -> Receiver {
    let toml = format!(
        r#"
[[notify.webhook]]
name = "ops"
timeout = "600ms"
{extra}
"#
    );
    let cfg = Config::parse(&toml, Path::new("test.toml")).expect("config parses");
    Receiver::build(&cfg.notify.receivers[0], &BuildCtx::default()).expect("receiver builds")
}

fn alert(firing: bool) -> AlertMsg {
    AlertMsg {
        id: if firing { 42 } else { 41 },
        state: if firing { "firing" } else { "resolved" }.into(),
        rule: "gpu_hot".into(),
        severity: "warning".into(),
        labels: BTreeMap::from([("gpu".to_string(), "3".to_string())]),
        summary: "temp 91 °C above 88 °C for 2m".into(),
        description: None,
        host: "node-7".into(),
        gpu: Some(3),
        uuid: Some("GPU-5f2c".into()),
        model: Some("NVIDIA H200".into()),
        pid: firing.then_some(4242),
        process: firing.then(|| "python".to_string()),
        user: None,
        starts_ms: T0,
        fired_ms: T0 + 60_000,
        ends_ms: (!firing).then_some(T0 + 300_250),
        ..Default::default()
    }
}

fn notification() -> Notification {
    Notification {
        digest: None,
        receiver: "ops".into(),
        group_key: "rule=gpu_hot,host=node-7".into(),
        group_labels: BTreeMap::from([
            ("rule".to_string(), "gpu_hot".to_string()),
            ("host".to_string(), "node-7".to_string()),
        ]),
        alerts: vec![alert(true), alert(false)],
        repeat: false,
        test: false,
        sender_host: "node-7".into(),
        now_ms: T0 + 600_000,
    }
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
    k.sort();
    k
}

fn sorted(list: &[&str]) -> Vec<String> {
    let mut k: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    k.sort();
    k
}

#[tokio::test]
async fn the_payload_follows_schema_v1() {
    let server = SlackServer::start();
    let r = receiver(&format!("url = \"{}\"", server.url()));
    r.send(&notification()).await.expect("delivered");
    let got = server.received();
    assert_eq!(got[0].header("content-type"), Some("application/json"));
    assert_eq!(got[0].header("x-gpuwatch-signature"), None);
    let body = got[0].json();
    assert_eq!(
        keys(body),
        sorted(&[
            "version",
            "receiver",
            "status",
            "group_key",
            "group_labels",
            "sender_host",
            "repeat",
            "test",
            "alerts"
        ])
    );
    assert_eq!(body["version"], "1");
    assert_eq!(body["receiver"], "ops");
    assert_eq!(body["status"], "firing");
    assert_eq!(body["group_key"], "rule=gpu_hot,host=node-7");
    assert_eq!(
        body["group_labels"],
        json!({"rule": "gpu_hot", "host": "node-7"})
    );
    assert_eq!(body["sender_host"], "node-7");
    assert_eq!(body["repeat"], false);
    assert_eq!(body["test"], false);
    let alerts = body["alerts"].as_array().expect("alerts");
    assert_eq!(alerts.len(), 2);
    let want = [
        "id",
        "status",
        "rule",
        "severity",
        "labels",
        "summary",
        "description",
        "host",
        "gpu",
        "uuid",
        "model",
        "pid",
        "process",
        "user",
        "starts_at",
        "ends_at",
        "starts_ms",
        "ends_ms",
        "story",
    ];
    for a in alerts {
        assert_eq!(keys(a), sorted(&want));
    }
    let (f, r) = (&alerts[0], &alerts[1]);
    assert_eq!(f["id"], 42);
    assert_eq!(f["status"], "firing");
    assert_eq!(f["rule"], "gpu_hot");
    assert_eq!(f["severity"], "warning");
    assert_eq!(f["labels"], json!({"gpu": "3"}));
    assert_eq!(f["summary"], "temp 91 °C above 88 °C for 2m");
    assert_eq!(f["description"], Value::Null);
    assert_eq!(f["host"], "node-7");
    assert_eq!(f["gpu"], 3);
    assert_eq!(f["uuid"], "GPU-5f2c");
    assert_eq!(f["model"], "NVIDIA H200");
    assert_eq!(f["pid"], 4242);
    assert_eq!(f["process"], "python");
    assert_eq!(f["starts_at"], "2025-11-30T18:00:00.000Z");
    assert_eq!(f["starts_ms"], T0);
    assert_eq!(f["ends_at"], Value::Null);
    assert_eq!(f["ends_ms"], Value::Null);
    assert_eq!(f["story"], "gpuwatch incident 42");
    assert_eq!(r["status"], "resolved");
    assert_eq!(r["ends_at"], "2025-11-30T18:05:00.250Z");
    assert_eq!(r["ends_ms"], T0 + 300_250);
    assert_eq!(r["pid"], Value::Null);

    // Only resolved alerts: the whole message is resolved.
    let mut n = notification();
    n.alerts.remove(0);
    receiver(&format!("url = \"{}\"", server.url()))
        .send(&n)
        .await
        .expect("delivered");
    assert_eq!(server.received()[1].json()["status"], "resolved");
}

#[tokio::test]
async fn the_signature_verifies() {
    let server = SlackServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("hmac");
    std::fs::write(&key_file, "s3cr3t-hmac-key\n").expect("write");
    let r = receiver(&format!(
        "url = \"{}\"\nhmac_secret_file = \"{}\"",
        server.url(),
        key_file.display()
    ));
    r.send(&notification()).await.expect("delivered");
    let got = &server.received()[0];
    let ts = got
        .header("x-gpuwatch-timestamp")
        .expect("timestamp header");
    let ts_num: i64 = ts.parse().expect("unix seconds");
    assert!((chrono::Utc::now().timestamp() - ts_num).abs() < 60, "{ts}");
    let sig = got
        .header("x-gpuwatch-signature")
        .expect("signature header");
    let hex_sig = sig.strip_prefix("sha256=").expect("sha256= prefix");
    let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cr3t-hmac-key").expect("key");
    mac.update(format!("{ts}.").as_bytes());
    mac.update(got.body.as_bytes());
    mac.verify_slice(&hex::decode(hex_sig).expect("hex"))
        .expect("signature verifies");
    // The key is re-read at each send (rotation) and the new one signs.
    std::fs::write(&key_file, "rotated-key").expect("write");
    r.send(&notification()).await.expect("delivered");
    let got = &server.received()[1];
    let ts = got.header("x-gpuwatch-timestamp").expect("timestamp");
    let mut mac = Hmac::<Sha256>::new_from_slice(b"rotated-key").expect("key");
    mac.update(format!("{ts}.{}", got.body).as_bytes());
    let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(got.header("x-gpuwatch-signature"), Some(want.as_str()));
}

#[tokio::test]
async fn client_errors_are_permanent_server_errors_transient() {
    let server = SlackServer::start();
    let r = receiver(&format!("url = \"{}\"", server.url()));
    let n = notification();
    for (status, body) in [
        (400, "missing field alerts"),
        (401, "unauthorized"),
        (404, "no such hook"),
        (422, "cannot process"),
    ] {
        server.script(vec![Reply::Status(status, body.into())]);
        match r.send(&n).await {
            Err(SendError::Permanent(m)) => {
                assert!(m.contains(&status.to_string()) && m.contains(body), "{m}")
            }
            other => panic!("{status}: {other:?}"),
        }
    }
    for reply in [
        Reply::Status(500, "boom".into()),
        Reply::Status(503, "later".into()),
        Reply::Status(408, "".into()),
        Reply::Hang,
    ] {
        server.script(vec![reply.clone()]);
        match r.send(&n).await {
            Err(SendError::Transient { retry_after, .. }) => assert_eq!(retry_after, None),
            other => panic!("{reply:?}: {other:?}"),
        }
    }
    server.script(vec![Reply::RateLimited(9)]);
    match r.send(&n).await {
        Err(SendError::Transient { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(9)))
        }
        other => panic!("429: {other:?}"),
    }
    server.script(vec![Reply::Status(202, String::new())]);
    r.send(&n).await.expect("any 2xx is a delivery");
}

#[tokio::test]
async fn a_secret_url_is_read_from_its_file_and_never_shown() {
    let server = SlackServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let url_file = dir.path().join("webhook-url");
    std::fs::write(&url_file, server.url()).expect("write");
    let r = receiver(&format!("url_file = \"{}\"", url_file.display()));
    let n = notification();
    r.send(&n).await.expect("delivered");
    assert_eq!(
        server.received()[0].path,
        format!("/services/T0/B0/{}", server.token())
    );

    let mut texts = Vec::new();
    for reply in [
        Reply::Status(404, format!("no route for {}", server.url())),
        Reply::Status(500, "boom".into()),
        Reply::Hang,
    ] {
        server.script(vec![reply]);
        let e = r.send(&n).await.expect_err("fails");
        texts.push(format!("{e}\n{e:?}"));
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let token2 = "Wh9RefusedWebhookTokenX3";
    std::fs::write(&url_file, format!("http://{closed}/hooks/{token2}")).expect("write");
    match r.send(&n).await {
        Err(e @ SendError::Transient { .. }) => texts.push(format!("{e}\n{e:?}")),
        other => panic!("refused connection: {other:?}"),
    }
    std::fs::remove_file(&url_file).expect("rm");
    match r.send(&n).await {
        Err(SendError::Transient { message, .. }) => assert!(message.contains("webhook-url")),
        other => panic!("missing file: {other:?}"),
    }
    if let Receiver::Webhook(w) = &r {
        texts.push(format!("{w:?}"));
    }
    for t in &texts {
        assert!(!t.contains(server.token()), "token leaked in {t}");
        assert!(!t.contains(token2), "token leaked in {t}");
    }
}
