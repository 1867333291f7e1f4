//! The Alertmanager receiver against a real Alertmanager (Debian's 0.25, see
//! `notify_support/alertmanager.rs`): fleet merging and grouping, resolution, HA with a member
//! down, the heartbeat, and the classification of refusals (a canned server).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuwatch::config::Config;
use gpuwatch::notify::alertmanager::AlertmanagerReceiver;
use gpuwatch::notify::{AlertMsg, BuildCtx, Notification, Receiver, SendError};
use serde_json::Value;

use crate::notify_support::alertmanager;
use crate::notify_support::alertmanager::Alertmanager;

const WAIT: Duration = Duration::from_secs(20);

/// A receiver built the daemon's way: from a parsed `[[notify.alertmanager]]` section.
fn receiver(urls: &[String], sender: &str, extra: &str) -> Receiver {
    let urls: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    let toml = format!(
        "[[notify.alertmanager]]\nname = \"am\"\nurls = [{}]\nresend_every = \"30s\"\n\
         timeout = \"3s\"\n{extra}\n",
        urls.join(", ")
    );
    let cfg = Config::parse(&toml, Path::new("t.toml"))
        .unwrap_or_else(|e| panic!("config does not parse: {e:?}\n{toml}"));
    let ctx = BuildCtx {
        db: None,
        host: sender.to_string(),
    };
    let r = Receiver::build(&cfg.notify.receivers[0], &ctx).expect("build receiver");
    assert!(r.is_alertmanager());
    r
}

fn am(r: &Receiver) -> &AlertmanagerReceiver {
    match r {
        Receiver::Alertmanager(a) => a,
        _ => panic!("not an alertmanager receiver"),
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A firing `rule` alert about GPU 0 of `host`, starting now (Alertmanager flushes a new
/// group at once, without `group_wait`, when its first alert started longer ago than that).
fn alert(rule: &str, host: &str) -> AlertMsg {
    let mut labels = BTreeMap::new();
    labels.insert("rule".to_string(), rule.to_string());
    labels.insert("severity".to_string(), "warning".to_string());
    labels.insert("host".to_string(), host.to_string());
    labels.insert("gpu".to_string(), "0".to_string());
    labels.insert("uuid".to_string(), format!("GPU-{host}-0"));
    AlertMsg {
        id: 7,
        state: "firing".into(),
        rule: rule.into(),
        severity: "warning".into(),
        labels,
        summary: format!("GPU 0 of {host} idle for 30m (util 0%)"),
        host: host.into(),
        gpu: Some(0),
        uuid: Some(format!("GPU-{host}-0")),
        starts_ms: now_ms(),
        fired_ms: now_ms(),
        ..Default::default()
    }
}

fn notification(sender: &str, alerts: Vec<AlertMsg>) -> Notification {
    Notification {
        digest: None,
        receiver: "am".into(),
        alerts,
        sender_host: sender.into(),
        now_ms: now_ms(),
        ..Default::default()
    }
}

fn named<'a>(alerts: &'a [Value], name: &str) -> Vec<&'a Value> {
    alerts
        .iter()
        .filter(|a| a["labels"]["alertname"] == name)
        .collect()
}

#[tokio::test]
async fn three_senders_one_grouped_notification() {
    let am_ = Alertmanager::start();
    for host in ["node-a", "node-b", "node-c"] {
        let r = receiver(&[am_.url()], host, "");
        let n = notification(host, vec![alert("gpu_idle", host)]);
        r.send(&n).await.expect("accepted");
    }
    let seen = am_.wait_for_notifications(1, WAIT);
    let first = &seen[0];
    assert_eq!(first["status"], "firing", "{first:#}");
    assert_eq!(first["groupLabels"]["alertname"], "gpu_idle");
    let alerts = first["alerts"].as_array().expect("alerts");
    let mut hosts: Vec<&str> = alerts
        .iter()
        .map(|a| a["labels"]["host"].as_str().unwrap_or(""))
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["node-a", "node-b", "node-c"], "{first:#}");
    let a = &alerts[0];
    assert_eq!(a["labels"]["severity"], "warning");
    assert_eq!(a["labels"]["gpu"], "0");
    assert!(a["labels"].get("rule").is_none(), "rule becomes alertname");
    assert_eq!(a["annotations"]["story"], "gpuwatch incident 7");
    assert_eq!(a["annotations"]["gpuwatch_alert_id"], "7");
    // Nothing changes in the group, so no second message comes (group_interval is 1 s).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(am_.notifications().len(), 1, "{:#?}", am_.notifications());
}

#[tokio::test]
async fn identical_alerts_from_two_senders_merge() {
    let am_ = Alertmanager::start();
    // Two gpuwatch instances report the same GPU (same identity labels).
    for sender in ["watcher-1", "watcher-2"] {
        let r = receiver(&[am_.url()], sender, "");
        let n = notification(sender, vec![alert("gpu_hot", "node-x")]);
        r.send(&n).await.expect("accepted");
    }
    let alerts = am_.alerts();
    let hot = named(&alerts, "gpu_hot");
    assert_eq!(hot.len(), 1, "{alerts:#?}");
    assert_eq!(hot[0]["labels"]["host"], "node-x");
    assert_eq!(hot[0]["annotations"]["sender_host"], "watcher-2");
    assert_eq!(hot[0]["status"]["state"], "active");
}

#[tokio::test]
async fn resolved_post_sends_a_resolved_notification() {
    let am_ = Alertmanager::start();
    let r = receiver(&[am_.url()], "node-r", "");
    let firing = alert("gpu_leak", "node-r");
    r.send(&notification("node-r", vec![firing.clone()]))
        .await
        .expect("firing accepted");
    am_.wait_for_notification(WAIT, |n| n["status"] == "firing");
    let alerts = am_.alerts();
    let leak = named(&alerts, "gpu_leak");
    let ends = leak[0]["endsAt"].as_str().unwrap_or("");
    let ends = chrono::DateTime::parse_from_rfc3339(ends).expect("endsAt");
    // A firing alert ends about 4 × resend_every (30 s) from now unless it is re-sent.
    let ahead = ends.timestamp_millis() - now_ms();
    assert!((90_000..=125_000).contains(&ahead), "{ahead} ms ahead");

    let mut resolved = firing;
    resolved.state = "resolved".into();
    resolved.ends_ms = Some(now_ms() - 1_000);
    r.send(&notification("node-r", vec![resolved]))
        .await
        .expect("resolved accepted");
    let n = am_.wait_for_notification(WAIT, |n| n["status"] == "resolved");
    assert_eq!(n["alerts"][0]["labels"]["alertname"], "gpu_leak");
    assert_eq!(n["alerts"][0]["status"], "resolved");
    // Alertmanager no longer lists it as active.
    assert!(named(&am_.alerts(), "gpu_leak").is_empty());
}

#[tokio::test]
async fn ha_member_down_is_transient_and_named() {
    let live = Alertmanager::start();
    let dead_port = alertmanager::free_port();
    let dead = format!("http://127.0.0.1:{dead_port}");
    let r = receiver(&[live.url(), dead], "node-h", "");
    let err = r
        .send(&notification("node-h", vec![alert("gpu_idle", "node-h")]))
        .await
        .expect_err("one member is down");
    let SendError::Transient { message, .. } = &err else {
        panic!("expected transient, got {err:?}");
    };
    assert!(
        message.contains(&format!("127.0.0.1:{dead_port}")),
        "{message}"
    );
    assert!(
        !message.contains(&format!("127.0.0.1:{}", live.port())),
        "{message}"
    );
    assert!(message.contains("1 of 2 members accepted"), "{message}");
    assert!(!message.contains("/api/v2"), "{message}");
    // The live member got it all the same.
    assert_eq!(named(&live.alerts(), "gpu_idle").len(), 1);
}

#[tokio::test]
async fn heartbeat_appears_in_alertmanager() {
    let am_ = Alertmanager::start();
    let r = receiver(&[am_.url()], "node-hb", "heartbeat = true");
    let a = am(&r);
    assert!(a.heartbeat_enabled());
    assert_eq!(a.resend_every(), Duration::from_secs(30));
    a.send_heartbeat("node-hb", now_ms())
        .await
        .expect("heartbeat accepted");
    let alerts = am_.alerts();
    let hb = named(&alerts, "gpuwatch_heartbeat");
    assert_eq!(hb.len(), 1, "{alerts:#?}");
    assert_eq!(hb[0]["labels"]["severity"], "none");
    assert_eq!(hb[0]["labels"]["host"], "node-hb");
    assert_eq!(hb[0]["status"]["state"], "active");
    let n = am_.wait_for_notification(WAIT, |n| {
        n["groupLabels"]["alertname"] == "gpuwatch_heartbeat"
    });
    assert_eq!(n["status"], "firing");
    // Without `heartbeat = true` the sender is told not to.
    assert!(!am(&receiver(&[am_.url()], "n", "")).heartbeat_enabled());
}

/// Answers every request with `status` and `body`; records each request's head.
fn canned(
    status: u16,
    extra_headers: &'static str,
    body: &'static str,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let Ok(read) = conn.try_clone() else { continue };
            let mut reader = BufReader::new(read);
            let (mut head, mut length) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body_in = vec![0u8; length];
            let _ = reader.read_exact(&mut body_in);
            seen.lock().unwrap().push(head);
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra_headers}\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (format!("http://127.0.0.1:{port}/am/path-secret"), heads)
}

#[tokio::test]
async fn refusals_are_classified_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "tok-very-secret-123\n").unwrap();
    let auth = format!("bearer_token_file = {:?}", token_file.display().to_string());

    // 400: the alert is refused for good.
    let (url, heads) = canned(400, "", "\"invalid label set: invalid name \\\"x-y\\\"\"");
    let r = receiver(std::slice::from_ref(&url), "node-p", &auth);
    let err = r
        .send(&notification("node-p", vec![alert("gpu_idle", "node-p")]))
        .await
        .expect_err("refused");
    let SendError::Permanent(message) = &err else {
        panic!("expected permanent, got {err:?}");
    };
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .unwrap();
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(
        message.contains("HTTP 400") && message.contains("invalid label set"),
        "{message}"
    );
    assert!(
        !message.contains("path-secret") && !message.contains("tok-very"),
        "{message}"
    );
    let head = heads.lock().unwrap()[0].clone();
    assert!(
        head.starts_with("POST /am/path-secret/api/v2/alerts "),
        "{head}"
    );
    assert!(head.contains("Bearer tok-very-secret-123"), "{head}");

    // 503 with Retry-After: try again later, not sooner than asked.
    let (url, _) = canned(503, "Retry-After: 9\r\n", "{}");
    let err = receiver(&[url], "node-p", "")
        .send(&notification("node-p", vec![alert("gpu_idle", "node-p")]))
        .await
        .expect_err("unavailable");
    assert!(
        matches!(&err, SendError::Transient { retry_after: Some(d), .. } if *d == Duration::from_secs(9)),
        "{err:?}"
    );

    // A missing token file holds the queue instead of dead-lettering.
    std::fs::remove_file(&token_file).unwrap();
    let (url, _) = canned(200, "", "");
    let err = receiver(&[url], "node-p", &auth)
        .send(&notification("node-p", vec![alert("gpu_idle", "node-p")]))
        .await
        .expect_err("no token");
    assert!(matches!(err, SendError::Transient { .. }), "{err:?}");

    // An empty notification posts nothing.
    let (url, heads) = canned(500, "", "");
    receiver(&[url], "node-p", "")
        .send(&notification("node-p", vec![]))
        .await
        .expect("nothing to send");
    assert!(heads.lock().unwrap().is_empty());
}
