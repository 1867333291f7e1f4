//! Slurm: the node's state from `scontrol show node -o NAME`, and the drain, `scontrol update
//! NodeName=NAME State=DRAIN Reason="gpuwatch: …"` (what LBNL NHC does from Slurm's
//! `HealthCheckProgram`). A drained node finishes its running jobs and takes no new ones.
//!
//! Invariants: `scontrol` runs by argv (the reason is one argument, never parsed by a shell),
//! with a 30-second limit; a node whose state has `DRAIN`, `DOWN`, `FAIL` or `MAINT` is out of
//! service; anything `scontrol` cannot answer is an error naming its output, never "in service".

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Backend, Fault, NodeState};

const LIMIT: Duration = Duration::from_secs(30);

pub struct Slurm {
    pub scontrol: PathBuf,
}

/// Runs `scontrol` with `args`; its standard output, or an error with what it said.
fn scontrol(path: &PathBuf, args: &[&str]) -> Result<String, String> {
    let mut child = Command::new(path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < LIMIT => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("scontrol {} did not end within {LIMIT:?}", args[0]));
            }
            Err(e) => return Err(format!("waiting for scontrol: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("reading scontrol's output: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "scontrol {} failed ({}): {}",
            args[0],
            out.status,
            err.trim().lines().last().unwrap_or("no message")
        ))
    }
}

/// The `State=` and `Reason=` of one `scontrol show node -o` line.
pub fn parse_state(line: &str) -> Result<NodeState, String> {
    let state = line
        .split_whitespace()
        .find_map(|t| t.strip_prefix("State="))
        .ok_or_else(|| format!("no State= in {:?}", line.trim()))?;
    // The reason runs to the end of the line's `Reason=` field (it may hold spaces); the
    // fields after it start with a known key.
    let reason = line.find(" Reason=").map(|at| {
        let rest = &line[at + " Reason=".len()..];
        let end = [
            " Comment=",
            " ExtSensors",
            " CurrentWatts",
            " LowestJoules",
            " Partitions=",
        ]
        .iter()
        .filter_map(|k| rest.find(k))
        .min()
        .unwrap_or(rest.len());
        rest[..end].trim().to_string()
    });
    let out = state.split('+').any(|s| {
        s.starts_with("DRAIN")
            || s.starts_with("DOWN")
            || s == "FAIL"
            || s == "FAILING"
            || s == "MAINT"
    });
    Ok(if out {
        NodeState::Out(reason)
    } else {
        NodeState::InService
    })
}

impl Backend for Slurm {
    fn action(&self) -> &'static str {
        "drain"
    }

    fn state(&self, node: &str) -> Result<NodeState, String> {
        let out = scontrol(&self.scontrol, &["show", "node", "-o", node])?;
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("NodeName={node} ")))
            .ok_or_else(|| format!("scontrol does not know node {node:?}"))?;
        parse_state(line)
    }

    fn take_out(&self, node: &str, fault: &Fault) -> Result<(), String> {
        let name = format!("NodeName={node}");
        let reason = format!("Reason={}", fault.reason());
        scontrol(&self.scontrol, &["update", &name, "State=DRAIN", &reason]).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_from_scontrol_lines() {
        let idle = "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE ThreadsPerCore=1 Partitions=debug";
        assert_eq!(parse_state(idle), Ok(NodeState::InService));
        let drained = "NodeName=n1 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Partitions=debug BootTime=None Reason=gpuwatch: GPU 1 gpu_lost: fell off [root@2026-12-06T18:00:00] Comment=(null)";
        assert_eq!(
            parse_state(drained),
            Ok(NodeState::Out(Some(
                "gpuwatch: GPU 1 gpu_lost: fell off [root@2026-12-06T18:00:00]".into()
            )))
        );
        let draining = "NodeName=n1 State=MIXED+DRAIN Partitions=debug";
        assert!(matches!(parse_state(draining), Ok(NodeState::Out(None))));
        assert!(matches!(
            parse_state("NodeName=n1 State=DOWN+NOT_RESPONDING"),
            Ok(NodeState::Out(_))
        ));
        assert_eq!(
            parse_state("NodeName=n1 State=ALLOCATED"),
            Ok(NodeState::InService)
        );
        assert!(parse_state("garbage").is_err());
    }
}
