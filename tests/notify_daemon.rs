//! Alert delivery through the whole daemon (`gpuwatch run` on the simulated NVML library):
//! grouping, resolved messages, silences, retries in order, the backlog self alert, secrets
//! kept out of logs and `status`, and kill -9 at every point of the delivery path.

#[path = "notify_support/slack_server.rs"]
mod slack_server;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use slack_server::{Reply, SlackServer};

/// Two GPUs busy for the first `busy` seconds of wall-clock time, then idle.
fn scenario(busy_s: u32) -> String {
    format!(
        r#"
[scenario]
name = "notify"
duration = "1h"
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
to = "{busy_s}s"
util_gpu = 90
[[gpu.timeline]]
from = "{busy_s}s"
util_gpu = 0
[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
to = "{busy_s}s"
util_gpu = 90
[[gpu.timeline]]
from = "{busy_s}s"
util_gpu = 0
"#
    )
}

const RULES: &str = r#"
[[rule]]
name = "busy"
severity = "warning"
condition = "util_gpu > 50"
summary = "GPU {gpu} busy"
"#;

struct Rig {
    dir: tempfile::TempDir,
    sim: gpuwatch::sim::SimGpus,
    cfg: PathBuf,
}

impl Rig {
    /// A daemon config with the receivers of `notify` (TOML appended as is).
    fn new(busy_s: u32, notify: &str) -> Rig {
        let lib = gpuwatch::sim::find_fake_library().expect("cargo build --workspace first");
        let sim =
            gpuwatch::sim::SimGpus::prepare(&lib, &scenario(busy_s), "s.toml").expect("scenario");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("r.toml"), RULES).expect("rules");
        let cfg = dir.path().join("g.toml");
        std::fs::write(
            &cfg,
            format!(
                "host = \"node-7\"\ndatabase = \"{}\"\nnvml_library = \"{}\"\ninterval = \"200ms\"\n\
                 [rules]\ndefault_rules = false\nfiles = [\"r.toml\"]\n[http]\nenabled = false\n{notify}\n",
                dir.path().join("g.db").display(),
                sim.library_path().display()
            ),
        )
        .expect("config");
        Rig { dir, sim, cfg }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `gpuwatch run` logging into `log`, with extra environment.
    fn start(&self, log: &str, env: &[(&str, &str)]) -> Daemon {
        let _ = &self.sim;
        let mut c = gpuwatch();
        c.args(["run", "--config"])
            .arg(&self.cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.path(log)).expect("log"));
        for (k, v) in env {
            c.env(k, v);
        }
        Daemon(c.spawn().expect("spawn"))
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> (bool, String) {
        let o = gpuwatch()
            .args(args)
            .arg("--config")
            .arg(&self.cfg)
            .output()
            .expect("gpuwatch");
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }
}

fn gpuwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.env_remove("RUST_LOG");
    c
}

struct Daemon(Child);

impl Daemon {
    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    fn sigterm(&mut self) -> std::process::ExitStatus {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        wait_for("exit", Duration::from_secs(30), || {
            self.0.try_wait().ok().flatten()
        })
    }

    /// Waits until the process stopped itself at a test pause point (state `T`).
    fn wait_stopped(&self) {
        let stat = format!("/proc/{}/stat", self.0.id());
        wait_for("the pause point", Duration::from_secs(30), || {
            let s = std::fs::read_to_string(&stat).ok()?;
            let state = s.rsplit_once(") ")?.1.chars().next()?;
            (state == 'T').then_some(())
        });
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Slack receiver whose URL is in a file.
fn slack_toml(rig_dir: &Path, slack: &SlackServer, extra: &str) -> String {
    let url_file = rig_dir.join("slack-url");
    std::fs::write(&url_file, slack.url()).expect("url file");
    format!(
        "[notify]\ngroup_wait = \"1s\"\ngroup_interval = \"1s\"\nretry_max_backoff = \"500ms\"\n{extra}\n\
         [[notify.slack]]\nname = \"oncall\"\nwebhook_url_file = \"{}\"\nmin_interval = \"0s\"\ntimeout = \"2s\"\n",
        url_file.display()
    )
}

/// (state, gpu) of every alert in the messages Slack answered `ok` (from the fallback text).
fn delivered(slack: &SlackServer) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for r in slack.received().into_iter().filter(|r| r.answered_ok) {
        for line in r.text().lines() {
            for state in ["FIRING", "RESOLVED"] {
                if line.starts_with(state)
                    && let Some(gpu) = line.split("GPU ").nth(1)
                {
                    let gpu: String = gpu.chars().take_while(char::is_ascii_digit).collect();
                    out.push((state.to_string(), gpu));
                }
            }
        }
    }
    out
}

fn tempdir_rig(busy_s: u32, notify: impl FnOnce(&Path) -> String) -> Rig {
    let tmp = tempfile::tempdir().expect("tmp");
    let extra = notify(tmp.path());
    let rig = Rig::new(busy_s, &extra);
    // Keep files written by `notify` alive with the rig.
    std::mem::forget(tmp);
    rig
}

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
