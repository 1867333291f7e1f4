//! `gpuwatch doctor`: walks the GPU stack bottom-up — kernel module, device nodes, the NVML
//! library and its version against the driver's, NVML itself and every GPU, then gpuwatch's
//! own setup — and reports one [`Check`] per finding, with the fix. docs/DOCTOR.md lists them.
//!
//! Owns: reading the host (`host.rs`: the kernel module in /proc and /sys, nvidia-persistenced
//! and the Fabric Manager;
//! `nodes.rs`: /dev, and the GPU nodes against NVML's GPUs), finding the NVML library the
//! loader would pick (`library.rs`), judging NVML's answers (`nvml.rs`: versions and init;
//! `gpus.rs`: each GPU; the NVML calls themselves are in `sampler::probe`, the meaning of each
//! NVML error in `sampler::diagnosis`) and checking the configuration, database, process
//! attribution and kubelet (`setup.rs`), Prometheus and the receivers (`reach.rs`).
//!
//! Invariants:
//! - A check that cannot decide says so (`warn`, naming what was missing); it is never a
//!   silent `ok`. Every `warn` and `fail` carries a fix.
//! - Host paths (/proc, /sys, /dev, library directories) are read under [`Options::host_root`];
//!   the paths in the configuration are used as the daemon would use them.
//! - Nothing is written, nothing is sent: receivers and Prometheus get a TCP connect only, the
//!   kubelet a socket connect, the database a read-only connection. Secrets are never printed
//!   (secret URLs show as `host:port`).
//! - Commands run by argv, never through a shell.

mod gpus;
mod host;
mod library;
mod nodes;
mod nvml;
mod reach;
mod setup;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    /// As printed in the text form.
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One finding: what was looked at, what was found, and (for `warn`/`fail`) what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub found: String,
    /// Empty for `ok`.
    pub fix: String,
}

impl Check {
    pub fn ok(name: impl Into<String>, found: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            status: Status::Ok,
            found: found.into(),
            fix: String::new(),
        }
    }

    pub fn warn(
        name: impl Into<String>,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check::with_fix(Status::Warn, name.into(), found.into(), fix.into())
    }

    pub fn fail(
        name: impl Into<String>,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check::with_fix(Status::Fail, name.into(), found.into(), fix.into())
    }

    fn with_fix(status: Status, name: String, found: String, fix: String) -> Check {
        Check {
            name,
            status,
            found,
            fix,
        }
    }
}

/// What the doctor looks at.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the host's /proc, /sys, /dev and library directories are (`/` normally).
    pub host_root: PathBuf,
    /// The configuration, or why it could not be loaded (the rest then uses the defaults).
    pub config: Result<crate::config::Config, String>,
    /// The config file that was read, if any.
    pub config_path: Option<PathBuf>,
    /// `--nvml-library`: wins over the config's `nvml_library`.
    pub nvml_library: Option<PathBuf>,
    /// How long NVML init and each GPU's reads may take before they count as hung.
    pub nvml_timeout: Duration,
    /// How long a TCP or socket connect may take.
    pub connect_timeout: Duration,
}

/// Every check, in order from the kernel up.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

/// Exit codes of `gpuwatch doctor`.
pub mod exit {
    pub const OK: i32 = 0;
    pub const WARNINGS: i32 = 1;
    pub const FAILURES: i32 = 2;
}

impl Report {
    /// The worst status (ok when there are no checks at all).
    pub fn worst(&self) -> Status {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// 0 when every check is ok, 1 with warnings, 2 with failures.
    pub fn exit_code(&self) -> i32 {
        match self.worst() {
            Status::Ok => exit::OK,
            Status::Warn => exit::WARNINGS,
            Status::Fail => exit::FAILURES,
        }
    }

    /// One line per check (`status  name: found; fix: ...`) and a summary line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            out.push_str(&format!("{:<4}  {}: {}", c.status.label(), c.name, c.found));
            if !c.fix.is_empty() {
                out.push_str(&format!("; fix: {}", c.fix));
            }
            out.push('\n');
        }
        let count = |s| self.checks.iter().filter(|c| c.status == s).count();
        let (fails, warns) = (count(Status::Fail), count(Status::Warn));
        out.push_str(&format!(
            "{} checks: {} ok, {warns} warning{}, {fails} failure{}\n",
            self.checks.len(),
            count(Status::Ok),
            if warns == 1 { "" } else { "s" },
            if fails == 1 { "" } else { "s" },
        ));
        out
    }

    /// `{"checks": [{"name", "status", "found", "fix"}, ...]}`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({ "checks": self.checks })
    }
}

/// Runs every check.
pub fn run(opts: &Options) -> Report {
    let root = opts.host_root.as_path();
    let defaults = crate::config::Config::default();
    let cfg = opts.config.as_ref().unwrap_or(&defaults);
    let configured = opts
        .nvml_library
        .clone()
        .or_else(|| cfg.nvml_library.clone());
    let mut checks = Vec::new();

    let module = host::kernel_module(root);
    checks.extend(module.checks.iter().cloned());
    checks.extend(nodes::device_nodes(root));

    let lib = library::find(root, configured.as_deref());
    checks.extend(lib.checks());

    // What NVML loads: the configured file; under another host root, the file found there
    // (never this machine's own); else the system loader's choice, as `gpuwatch run` would.
    let other_root = root != std::path::Path::new("/");
    let load = configured.or_else(|| {
        if other_root {
            lib.pick.as_ref().map(|p| p.path.clone())
        } else {
            None
        }
    });
    let probe = match &load {
        None if other_root => Err(crate::sampler::probe::ProbeError::Init(
            crate::sampler::nvml::InitError::LibraryMissing {
                path: format!("{} under {}", library::SONAME, root.display()),
                reason: "not found".into(),
            },
        )),
        _ => crate::sampler::probe::probe(load.as_deref(), opts.nvml_timeout),
    };
    checks.extend(nvml::checks(
        &probe,
        module.version.as_deref(),
        &lib,
        opts.nvml_timeout,
    ));
    if let Ok(p) = &probe {
        let read: Vec<_> = p.gpus.iter().map(|g| (g.index, g.minor)).collect();
        checks.extend(nodes::nodes_for_gpus(root, &read, p.hung.is_none()));
    }
    let persistenced = host::persistenced(root);
    let fabric_manager = host::fabric_manager(root);
    checks.extend(gpus::checks(
        &probe,
        &persistenced,
        &fabric_manager,
        opts.nvml_timeout,
    ));

    checks.extend(setup::checks(opts, cfg));
    Report { checks }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_and_text_follow_the_worst_status() {
        let mut r = Report {
            checks: vec![Check::ok("a", "fine")],
        };
        assert_eq!(r.exit_code(), 0);
        r.checks.push(Check::warn("b", "meh", "do b"));
        assert_eq!(r.exit_code(), 1);
        r.checks.push(Check::fail("c", "broken", "do c"));
        assert_eq!(r.exit_code(), 2);
        let text = r.text();
        assert!(text.contains("ok    a: fine\n"), "{text}");
        assert!(text.contains("FAIL  c: broken; fix: do c\n"), "{text}");
        assert!(
            text.ends_with("3 checks: 1 ok, 1 warning, 1 failure\n"),
            "{text}"
        );
        let j = r.json();
        assert_eq!(j["checks"][2]["status"], "fail");
        assert_eq!(j["checks"][0]["fix"], "");
    }
}
