//! Alert delivery through the whole daemon (`gpuwatch run` on the simulated NVML library):
//! grouping, resolved messages, silences, retries in order, the backlog self alert, secrets
//! kept out of logs and `status`, and kill -9 at every point of the delivery path.

use std::time::{Duration, Instant};

use crate::notify_support::daemon_rig::{delivered, slack_toml, tempdir_rig, wait_for};
use crate::notify_support::slack_server::{Reply, SlackServer};

#[test]
fn alerts_reach_slack_grouped_and_resolved() {
    let slack = SlackServer::start();
    let rig = tempdir_rig(4, |d| slack_toml(d, &slack, ""));
    let mut d = rig.start("run.log", &[]);
    // Both GPUs fire within one group_wait: one message with two alerts; then one resolved.
    let got = slack.wait_for(2, Duration::from_secs(30));
    let first = got[0].text();
    assert!(
        first.starts_with("[FIRING:2] warning busy on node-7"),
        "{first}"
    );
    assert!(
        first.contains("GPU 0 busy") && first.contains("GPU 1 busy"),
        "{first}"
    );
    assert!(first.contains("gpuwatch incident "), "{first}");
    assert!(
        got[1].text().starts_with("[RESOLVED:2]"),
        "{}",
        got[1].text()
    );
    assert!(d.sigterm().success());
    let (ok, status) = rig.cli(&["status"]);
    assert!(ok, "{status}");
    assert!(
        status.contains("oncall (slack): 4 alert notification(s) delivered in 2 message(s)"),
        "{status}"
    );
    assert!(!rig.log("run.log").contains(slack.token()));
}

#[test]
fn silences_apply_to_the_running_daemon() {
    let slack = SlackServer::start();
    let rig = tempdir_rig(3600, |d| slack_toml(d, &slack, ""));
    let (ok, out) = rig.cli(&[
        "silence",
        "add",
        "--match",
        "rule=busy,gpu=1",
        "--for",
        "2h",
        "--comment",
        "maintenance",
    ]);
    assert!(ok, "{out}");
    assert!(out.contains("silence 1 added"), "{out}");
    let mut d = rig.start("run.log", &[]);
    let got = slack.wait_for(1, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(slack.received().len(), 1, "only GPU 0 is sent");
    assert!(got[0].text().contains("GPU 0 busy"), "{}", got[0].text());
    assert!(!got[0].text().contains("GPU 1 busy"), "{}", got[0].text());
    let (_, list) = rig.cli(&["silence", "list"]);
    assert!(
        list.contains("rule=busy,gpu=1") && list.contains("maintenance"),
        "{list}"
    );
    let (ok, out) = rig.cli(&["silence", "expire", "1"]);
    assert!(ok, "{out}");
    let (ok, out) = rig.cli(&["silence", "expire", "1"]);
    assert!(!ok && out.contains("no silence 1 in force"), "{out}");
    // The silence is over while GPU 1 still fires: it is announced now.
    let got = slack.wait_for(2, Duration::from_secs(20));
    assert!(got[1].text().contains("GPU 1 busy"), "{}", got[1].text());
    assert!(!got[1].text().contains("GPU 0 busy"), "{}", got[1].text());
    assert!(d.sigterm().success());
    let (_, status) = rig.cli(&["status"]);
    assert!(status.contains("1 silenced"), "{status}");
}

#[test]
fn an_outage_delays_messages_which_then_go_out_in_order() {
    let slack = SlackServer::start();
    // Slack fails for the first 8 attempts (500s and a 429), then answers.
    slack.script(vec![
        Reply::ServerError,
        Reply::Unavailable,
        Reply::RateLimited(1),
        Reply::ServerError,
        Reply::ServerError,
        Reply::ServerError,
        Reply::ServerError,
        Reply::ServerError,
    ]);
    let rig = tempdir_rig(2, |d| slack_toml(d, &slack, ""));
    let mut d = rig.start("run.log", &[]);
    let end = Instant::now() + Duration::from_secs(60);
    while slack.ok_count() < 2 {
        assert!(
            Instant::now() < end,
            "both messages did not arrive: {:?}\n{}",
            slack
                .received()
                .iter()
                .map(|r| (&r.reply, r.text()))
                .collect::<Vec<_>>(),
            rig.log("run.log")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let got = delivered(&slack);
    let states: Vec<&str> = got.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        states,
        ["FIRING", "FIRING", "RESOLVED", "RESOLVED"],
        "{got:?}"
    );
    assert!(d.sigterm().success());
    assert!(
        rig.log("run.log").contains("will retry"),
        "{}",
        rig.log("run.log")
    );
}

#[test]
fn a_permanent_error_is_a_dead_letter_and_the_secret_never_shows() {
    let slack = SlackServer::start();
    slack.set_default(Reply::ChannelNotFound);
    let rig = tempdir_rig(3600, |d| slack_toml(d, &slack, ""));
    let mut d = rig.start("run.log", &[]);
    slack.wait_for(1, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        slack.received().len(),
        1,
        "a permanent error is not retried"
    );
    let (_, status) = rig.cli(&["status"]);
    assert!(status.contains("2 dead letter(s)"), "{status}");
    assert!(status.contains("channel_not_found"), "{status}");
    let (_, json) = rig.cli(&["status", "--format", "json"]);
    let (ok, test) = rig.cli(&["notify", "test"]);
    assert!(!ok && test.contains("channel_not_found"), "{test}");
    assert!(d.sigterm().success());
    let log = rig.log("run.log");
    assert!(log.contains("dead letter"), "{log}");
    for text in [&log, &status, &json, &test] {
        assert!(
            !text.contains(slack.token()),
            "the webhook token leaked: {text}"
        );
    }
}

#[test]
fn a_stuck_receiver_raises_a_backlog_alert_on_the_others() {
    let slack = SlackServer::start();
    slack.set_default(Reply::ServerError);
    let other = SlackServer::start();
    let rig = tempdir_rig(3600, |d| {
        let f = d.join("other-url");
        std::fs::write(&f, other.url()).expect("url");
        slack_toml(
            d,
            &slack,
            &format!(
                "backlog_alert_after = \"2s\"\n[[notify.webhook]]\nname = \"hook\"\nurl_file = \"{}\"\n",
                f.display()
            ),
        )
    });
    let mut d = rig.start("run.log", &[]);
    let got = wait_for("the backlog alert", Duration::from_secs(40), || {
        other
            .received()
            .into_iter()
            .find(|r| r.body.contains("gpuwatch_notify_backlog"))
    });
    assert!(got.body.contains("oncall"), "{}", got.body);
    let (_, status) = rig.cli(&["status"]);
    assert!(status.contains("BACKLOG"), "{status}");
    assert!(status.contains("failed attempts"), "{status}");
    assert!(d.sigterm().success());
}

/// kill -9 at a point of the delivery path with notifications pending, restart: every
/// notification arrives; a duplicate only when the crash fell between the send and its mark.
fn crash_at(point: &str) -> Vec<(String, String)> {
    let slack = SlackServer::start();
    let rig = tempdir_rig(3600, |d| slack_toml(d, &slack, ""));
    let mut d = match point {
        "during_send" => {
            slack.script(vec![Reply::Hang]);
            let d = rig.start("1.log", &[]);
            slack.wait_for(1, Duration::from_secs(30));
            d
        }
        _ => {
            let d = rig.start("1.log", &[("GPUWATCH_TEST_PAUSE_AT", point)]);
            d.wait_stopped();
            d
        }
    };
    d.kill9();
    let oks_before = slack.ok_count();
    let mut d2 = rig.start("2.log", &[]);
    wait_for(
        "delivery after the restart",
        Duration::from_secs(30),
        || (slack.ok_count() > oks_before).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(d2.sigterm().success());
    assert!(
        rig.log("2.log").contains("restored live alerts"),
        "{}",
        rig.log("2.log")
    );
    let mut got = delivered(&slack);
    got.sort();
    got
}

fn firing_both() -> Vec<(String, String)> {
    vec![("FIRING".into(), "0".into()), ("FIRING".into(), "1".into())]
}

#[test]
fn kill_9_right_after_the_enqueue_loses_nothing() {
    assert_eq!(crash_at("after_enqueue"), firing_both());
}

#[test]
fn kill_9_during_the_send_loses_nothing() {
    assert_eq!(crash_at("during_send"), firing_both());
}

#[test]
fn kill_9_between_send_and_mark_sends_once_more_at_most() {
    let got = crash_at("after_send");
    let mut want = firing_both();
    want.extend(firing_both());
    want.sort();
    assert_eq!(got, want, "exactly one duplicate of the message");
}

#[test]
fn reminders_repeat_firing_alerts_and_send_resolved_is_per_receiver() {
    let slack = SlackServer::start();
    let hook = SlackServer::start();
    let rig = tempdir_rig(7, |d| {
        let f = d.join("hook-url");
        std::fs::write(&f, hook.url()).expect("url");
        slack_toml(
            d,
            &slack,
            &format!(
                "repeat_interval = \"2s\"\n[[notify.webhook]]\nname = \"hook\"\nurl_file = \"{}\"\nsend_resolved = false\n",
                f.display()
            ),
        )
    });
    let mut d = rig.start("run.log", &[]);
    let end = Instant::now() + Duration::from_secs(40);
    while !slack
        .received()
        .iter()
        .any(|r| r.text().starts_with("[RESOLVED"))
    {
        assert!(
            Instant::now() < end,
            "no resolved message: {}",
            rig.log("run.log")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert!(d.sigterm().success());
    let texts: Vec<String> = slack
        .received()
        .iter()
        .map(|r| r.text().to_string())
        .collect();
    assert!(texts[0].starts_with("[FIRING:2]"), "{texts:?}");
    let reminders = texts.iter().filter(|t| t.contains("reminder")).count();
    assert!(
        reminders >= 1,
        "still firing after 2 s: a reminder: {texts:?}"
    );
    assert!(
        texts.last().is_some_and(|t| t.starts_with("[RESOLVED:2]")),
        "{texts:?}"
    );
    // The webhook wants no resolved messages.
    let bodies: Vec<String> = hook.received().iter().map(|r| r.body.clone()).collect();
    assert!(!bodies.is_empty(), "the webhook got the firing alerts");
    assert!(
        bodies.iter().all(|b| !b.contains("\"resolved\"")),
        "{bodies:?}"
    );
}
