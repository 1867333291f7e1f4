//! Delivery to real services through the whole daemon: `gpuwatch demo` configured with a
//! Slack-like endpoint and a real SMTP server (aiosmtpd), a failing SMTP login that must not
//! leak the password, and several gpuwatch instances forwarding to a real Alertmanager.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::notify_support::daemon_rig::{Rig, wait_for};
use crate::notify_support::slack_server::SlackServer;
use crate::notify_support::smtp::{Options, SmtpServer};
use crate::notify_support::{alertmanager, daemon_rig, smtp};

#[test]
fn a_demo_alert_reaches_slack_and_a_real_smtp_server() {
    smtp::require_aiosmtpd();
    let slack = SlackServer::start();
    let mail = SmtpServer::start_with(Options {
        auth: Some(("gpuwatch".into(), "demo-s3cret-pass".into())),
        ..Default::default()
    });
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("slack-url"), slack.url()).expect("url");
    std::fs::write(dir.path().join("smtp-pass"), "demo-s3cret-pass\n").expect("pass");
    let cfg = dir.path().join("notify.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[notify]
group_wait = "30s"
group_interval = "2m"
[[notify.slack]]
name = "oncall"
webhook_url_file = "slack-url"
min_interval = "0s"
[[notify.email]]
name = "team"
smtp_host = "127.0.0.1"
smtp_port = {}
tls = "none"
username = "gpuwatch"
password_file = "smtp-pass"
from = "gpuwatch@example.com"
to = ["oncall@example.com"]
"#,
            mail.port()
        ),
    )
    .expect("config");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .current_dir(dir.path())
        .args(["demo", "--speed", "120", "--every", "1h", "--config"])
        .arg(&cfg)
        .arg("--db")
        .arg(dir.path().join("demo.db"))
        .output()
        .expect("demo");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("Alert delivery:"), "{out}");
    // Slack got messages naming the demo's faults.
    let texts: Vec<String> = slack
        .received()
        .iter()
        .filter(|r| r.answered_ok)
        .map(|r| r.text().to_string())
        .collect();
    assert!(!texts.is_empty(), "{out}");
    let all = texts.join("\n");
    for rule in ["gpu_overheating", "training_hang", "gpu_memory_leak"] {
        assert!(all.contains(rule), "{rule} not sent to Slack: {all}");
    }
    // The SMTP server got a multipart message with a chart.
    let msgs = mail.wait_for_messages(1, Duration::from_secs(10));
    let m = msgs
        .iter()
        .find(|m| !m.parts_of("image/png").is_empty())
        .unwrap_or_else(|| {
            panic!(
                "no message with a chart: {:?}",
                msgs.iter().map(|m| &m.structure).collect::<Vec<_>>()
            )
        });
    assert!(m.authenticated, "AUTH was used");
    assert_eq!(m.header("From"), Some("gpuwatch@example.com"));
    assert!(
        m.header("Subject").unwrap_or("").starts_with("[FIRING"),
        "{:?}",
        m.header("Subject")
    );
    let plain = m.text("text/plain");
    let html = m.text("text/html");
    assert!(
        plain.contains("demo-node") && plain.contains("gpuwatch incident "),
        "{plain}"
    );
    let png = m.parts_of("image/png")[0];
    assert!(png.bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let cid = png
        .content_id
        .as_deref()
        .expect("Content-ID")
        .trim_matches(['<', '>']);
    assert!(
        html.contains(&format!("cid:{cid}")),
        "the HTML shows the chart: {html}"
    );
}

#[test]
fn a_failing_smtp_login_is_reported_without_the_password() {
    smtp::require_aiosmtpd();
    let mail = SmtpServer::start_with(Options {
        auth: Some(("gpuwatch".into(), "the-right-one".into())),
        ..Default::default()
    });
    let rig = daemon_rig::tempdir_rig(3600, |d| {
        std::fs::write(d.join("pass"), "wr0ng-s3cret-passw0rd").expect("pass");
        format!(
            "[notify]\ngroup_wait = \"0s\"\n[[notify.email]]\nname = \"team\"\nsmtp_host = \"127.0.0.1\"\n\
             smtp_port = {}\ntls = \"none\"\nusername = \"gpuwatch\"\npassword_file = \"{}\"\n\
             from = \"gpuwatch@example.com\"\nto = [\"oncall@example.com\"]\n",
            mail.port(),
            d.join("pass").display()
        )
    });
    let mut d = rig.start("run.log", &[]);
    let status = wait_for("a dead letter", Duration::from_secs(30), || {
        let (_, s) = rig.cli(&["status"]);
        s.contains("dead letter").then_some(s)
    });
    assert!(status.contains("535"), "{status}");
    let (_, json) = rig.cli(&["status", "--format", "json"]);
    let (ok, test) = rig.cli(&["notify", "test", "--receiver", "team"]);
    assert!(!ok && test.contains("535"), "{test}");
    assert!(d.sigterm().success());
    let log = rig.log("run.log");
    assert!(log.contains("team"), "{log}");
    for text in [&log, &status, &json, &test, &mail.log()] {
        assert!(
            !text.contains("wr0ng-s3cret-passw0rd"),
            "the password leaked: {text}"
        );
    }
}

#[test]
fn gpuwatch_instances_group_and_merge_in_a_real_alertmanager() {
    let am = alertmanager::Alertmanager::start();
    let notify = format!(
        "[[notify.alertmanager]]\nname = \"fleet\"\nurls = [\"{}\"]\nresend_every = \"2s\"\nheartbeat = true\n",
        am.url()
    );
    // Three hosts, and a fourth instance that reports exactly what node-c reports (same host
    // name, same simulated GPUs): its alerts carry the same labels and must merge.
    let rigs: Vec<Rig> = ["node-a", "node-b", "node-c", "node-c"]
        .iter()
        .map(|h| Rig::on_host(h, 3600, &notify))
        .collect();
    let _daemons: Vec<_> = rigs.iter().map(|r| r.start("run.log", &[])).collect();
    let hosts = |alerts: &[serde_json::Value]| -> BTreeSet<String> {
        alerts
            .iter()
            .filter_map(|a| a["labels"]["host"].as_str().map(str::to_string))
            .collect()
    };
    // One grouped notification (group_by alertname) holding every host's alerts.
    let grouped = am.wait_for_notification(Duration::from_secs(40), |n| {
        let alerts = n["alerts"].as_array().cloned().unwrap_or_default();
        n["groupLabels"]["alertname"] == "busy" && hosts(&alerts).len() == 3
    });
    assert_eq!(grouped["groupLabels"]["alertname"], "busy", "{grouped}");
    // Alertmanager holds 3 hosts × 2 GPUs: the duplicate instance merged into node-c's.
    let active = am.wait_for_alerts(Duration::from_secs(20), |alerts| {
        alerts
            .iter()
            .filter(|a| a["labels"]["alertname"] == "busy")
            .count()
            >= 6
    });
    let busy: Vec<&serde_json::Value> = active
        .iter()
        .filter(|a| a["labels"]["alertname"] == "busy")
        .collect();
    assert_eq!(busy.len(), 6, "{active:?}");
    for a in busy {
        assert!(
            a["labels"]["gpu"].is_string() && a["labels"]["uuid"].is_string(),
            "{a}"
        );
        assert!(
            a["annotations"]["summary"]
                .as_str()
                .unwrap_or("")
                .contains("busy"),
            "{a}"
        );
    }
}
