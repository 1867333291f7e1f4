//! A `gpuwatch run` daemon on the simulated NVML library for delivery tests: two GPUs busy
//! for a while then idle, one rule (`busy`), a config with the receivers a test gives.
//!
//! Use it as `crate::notify_support::daemon_rig`; it uses its sibling `slack_server`
//! (`super::slack_server`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::slack_server::SlackServer;

/// The UUIDs of the rig's two GPUs.
pub const UUIDS: [&str; 2] = [
    "GPU-5a7f9c2e-1b3d-4e6f-8a9b-0c1d2e3f4a5b",
    "GPU-6b8fad3f-2c4e-4f70-9bac-1d2e3f4a5b6c",
];

/// Two GPUs busy for the first `busy` seconds of wall-clock time, then idle.
pub fn scenario(busy_s: u32) -> String {
    format!(
        r#"
[scenario]
name = "notify"
duration = "1h"
[[gpu]]
model = "H100-SXM-80GB"
uuid = "{}"
[[gpu.timeline]]
to = "{busy_s}s"
util_gpu = 90
[[gpu.timeline]]
from = "{busy_s}s"
util_gpu = 0
[[gpu]]
model = "H100-SXM-80GB"
uuid = "{}"
[[gpu.timeline]]
to = "{busy_s}s"
util_gpu = 90
[[gpu.timeline]]
from = "{busy_s}s"
util_gpu = 0
"#,
        UUIDS[0], UUIDS[1]
    )
}

const RULES: &str = r#"
[[rule]]
name = "busy"
severity = "warning"
condition = "util_gpu > 50"
summary = "GPU {gpu} busy"
"#;

pub struct Rig {
    pub dir: tempfile::TempDir,
    pub sim: gpuwatch::sim::SimGpus,
    pub cfg: PathBuf,
}

impl Rig {
    /// A daemon config with the receivers of `notify` (TOML appended as is).
    pub fn new(busy_s: u32, notify: &str) -> Rig {
        Rig::on_host("node-7", busy_s, notify)
    }

    pub fn on_host(host: &str, busy_s: u32, notify: &str) -> Rig {
        let lib = gpuwatch::sim::find_fake_library().expect("cargo build --workspace first");
        let sim =
            gpuwatch::sim::SimGpus::prepare(&lib, &scenario(busy_s), "s.toml").expect("scenario");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("r.toml"), RULES).expect("rules");
        let cfg = dir.path().join("g.toml");
        std::fs::write(
            &cfg,
            format!(
                "host = \"{host}\"\ndatabase = \"{}\"\nnvml_library = \"{}\"\ninterval = \"200ms\"\n\
                 [rules]\ndefault_rules = false\nfiles = [\"r.toml\"]\n[http]\nenabled = false\n{notify}\n",
                dir.path().join("g.db").display(),
                sim.library_path().display()
            ),
        )
        .expect("config");
        Rig { dir, sim, cfg }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `gpuwatch run` logging into `log`, with extra environment.
    pub fn start(&self, log: &str, env: &[(&str, &str)]) -> Daemon {
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

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    pub fn cli(&self, args: &[&str]) -> (bool, String) {
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

pub fn gpuwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.env_remove("RUST_LOG");
    c
}

pub struct Daemon(pub Child);

impl Daemon {
    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        wait_for("exit", Duration::from_secs(30), || {
            self.0.try_wait().ok().flatten()
        })
    }

    /// Waits until the process stopped itself at a test pause point (state `T`).
    pub fn wait_stopped(&self) {
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

pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
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
pub fn slack_toml(rig_dir: &Path, slack: &SlackServer, extra: &str) -> String {
    let url_file = rig_dir.join("slack-url");
    std::fs::write(&url_file, slack.url()).expect("url file");
    format!(
        "[notify]\ngroup_wait = \"1s\"\ngroup_interval = \"1s\"\nretry_max_backoff = \"500ms\"\n{extra}\n\
         [[notify.slack]]\nname = \"oncall\"\nwebhook_url_file = \"{}\"\nmin_interval = \"0s\"\ntimeout = \"2s\"\n",
        url_file.display()
    )
}

/// (state, gpu) of every alert in the messages Slack answered `ok` (from the fallback text).
pub fn delivered(slack: &SlackServer) -> Vec<(String, String)> {
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

pub fn tempdir_rig(busy_s: u32, notify: impl FnOnce(&Path) -> String) -> Rig {
    let tmp = tempfile::tempdir().expect("tmp");
    let extra = notify(tmp.path());
    let rig = Rig::new(busy_s, &extra);
    // Keep files written by `notify` alive with the rig.
    std::mem::forget(tmp);
    rig
}
