//! Taking a broken GPU's node out of service (`[remediation]`, docs/REMEDIATION.md): Slurm's
//! drain through `scontrol` (`slurm.rs`) or the node condition `GpuwatchGPUHealthy=False`
//! through the API server (`kubernetes.rs`), decided here for `gpuwatch gpu health --slurm`
//! and for the daemon's hardware alerts alike.
//!
//! Invariants:
//! - Nothing acts unless `[remediation] enabled = true`; with `dry_run` (the default) every
//!   decision is said and audited, and nothing is changed.
//! - Every decision is a row of `remediation_log` (store::remediation), the action's row
//!   committed as `attempted` before the command runs; a decision repeated on every run (the
//!   node still out, the breaker still open) is recorded once, when it first holds.
//! - The breaker: at most `max_actions_per_hour` actions on the node in any hour, counted in
//!   the log, so it holds across restarts. A node gpuwatch took out that comes back into
//!   service without gpuwatch (a person's `scontrol update State=RESUME`, the condition set
//!   back) is seen as a person's resume, recorded, and never taken out again for the same
//!   fault; a new fault may.
//! - Commands run by argv, never through a shell; the Kubernetes token is read from its file
//!   at each use and never logged.

pub mod kubernetes;
pub mod slurm;
pub mod watch;

use crate::config::remediation::{Action, RemediationConfig};
use crate::model::TsMs;
use crate::store::remediation::Entry;
use crate::store::{Store, StoreError};

/// Every result a row can have.
const ANY: &[&str] = &[
    "done",
    "failed",
    "attempted",
    "dry_run",
    "refused_breaker",
    "skipped_resumed",
    "already_out",
    "resumed_by_person",
];

/// One hour, ms: the breaker's window.
const HOUR_MS: TsMs = 3_600_000;

/// A fault that acts: a failed health check or a firing alert on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    /// The health code (`gpu_lost`) or the alert (`gpu_xid_error`).
    pub code: String,
    /// What was found, for people.
    pub text: String,
    /// `health`, or `alert:RULE`.
    pub source: String,
}

impl Fault {
    /// The fault's identity across runs: the GPU and the code.
    pub fn key(&self) -> String {
        format!("{}:{}", self.gpu_uuid, self.code)
    }

    /// The reason the scheduler shows (Slurm keeps it with the drain), kept short.
    pub fn reason(&self) -> String {
        let mut r = format!(
            "gpuwatch: GPU {} {}: {}",
            self.gpu_index, self.code, self.text
        );
        if r.len() > 200 {
            let mut cut = 197;
            while !r.is_char_boundary(cut) {
                cut -= 1;
            }
            r.truncate(cut);
            r.push_str("...");
        }
        r
    }
}

/// Whether the node is in service, as its scheduler says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    InService,
    /// Drained, draining, down, or the condition set to False; with the scheduler's reason.
    Out(Option<String>),
}

/// The scheduler gpuwatch acts through.
pub trait Backend {
    /// `drain` or `node_condition`.
    fn action(&self) -> &'static str;
    fn state(&self, node: &str) -> Result<NodeState, String>;
    fn take_out(&self, node: &str, fault: &Fault) -> Result<(), String>;
}

/// The backend of a configured action.
pub fn backend(action: &Action) -> Box<dyn Backend> {
    match action {
        Action::Slurm { scontrol } => Box::new(slurm::Slurm {
            scontrol: scontrol.clone(),
        }),
        Action::Kubernetes(api) => Box::new(kubernetes::Kubernetes { api: api.clone() }),
    }
}

/// What one run decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// `healthy`, `done`, `failed`, `dry_run`, `refused_breaker`, `skipped_resumed`,
    /// `already_out`, or `unknown` (the node's state could not be read).
    pub result: &'static str,
    /// One line for people (what Slurm's health check prints).
    pub line: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RemediateError {
    #[error("the remediation log: {0}")]
    Store(#[from] StoreError),
}

/// Who decides: the user running the command, or the daemon.
#[derive(Debug, Clone)]
pub struct Who {
    pub name: String,
    pub uid: Option<u32>,
}

/// Decides for `faults` on the configured node and acts as configured; every decision is
/// audited in `store`. `faults` is empty on a healthy node (only the resume rule runs).
pub fn run(
    store: &mut Store,
    cfg: &RemediationConfig,
    backend: &dyn Backend,
    who: &Who,
    faults: &[Fault],
    now: TsMs,
) -> Result<Decision, RemediateError> {
    let node = cfg.node.as_str();
    let entry = |f: &Fault, result: &str, error: Option<String>| Entry {
        ts_ms: now,
        who: who.name.clone(),
        uid: who.uid,
        node: node.to_string(),
        action: backend.action().to_string(),
        fault: f.key(),
        gpu_uuid: Some(f.gpu_uuid.clone()),
        source: f.source.clone(),
        reason: f.reason(),
        dry_run: cfg.dry_run,
        result: result.to_string(),
        error,
    };
    let state = match backend.state(node) {
        Ok(s) => s,
        Err(e) => {
            return Ok(Decision {
                result: "unknown",
                line: format!(
                    "gpuwatch: cannot read node {node}'s state ({e}); {}",
                    summary(faults)
                ),
            });
        }
    };
    // The resume rule: out by gpuwatch's hand, in service now, and gpuwatch did not do it.
    if state == NodeState::InService
        && let Some(out) = store.remediation_node_out(node)?
    {
        store.remediation_record(&Entry {
            ts_ms: now,
            who: "a person (the node came back into service without gpuwatch)".into(),
            uid: None,
            result: "resumed_by_person".into(),
            error: None,
            dry_run: false,
            ..out
        })?;
    }
    // The first fault a person has not already answered by putting the node back (else the
    // first fault, to say so).
    let (mut chosen, mut first) = (None, None);
    for f in faults {
        let last = store.remediation_last(node, &f.key(), ANY)?;
        let answered = last
            .as_ref()
            .is_some_and(|e| matches!(e.result.as_str(), "resumed_by_person" | "skipped_resumed"));
        if !answered {
            chosen = Some((f, last));
            break;
        }
        if first.is_none() {
            first = Some((f, last));
        }
    }
    let Some((f, last)) = chosen.or(first) else {
        return Ok(Decision {
            result: "healthy",
            line: format!("gpuwatch: ok: node {node}'s GPUs are healthy"),
        });
    };
    let last_result = last.as_ref().map(|e| e.result.as_str());
    // Records a decision that holds on every run only when it first holds.
    let once = |store: &mut Store, result: &'static str| -> Result<(), RemediateError> {
        if last_result != Some(result) {
            store.remediation_record(&entry(f, result, None))?;
        }
        Ok(())
    };
    let what = f.reason();
    if let NodeState::Out(reason) = &state {
        if last_result != Some("done") {
            once(store, "already_out")?;
        }
        return Ok(Decision {
            result: "already_out",
            line: format!(
                "gpuwatch: node {node} is already out of service ({}); {what}",
                reason.as_deref().unwrap_or("no reason given")
            ),
        });
    }
    if matches!(last_result, Some("resumed_by_person" | "skipped_resumed")) {
        once(store, "skipped_resumed")?;
        return Ok(Decision {
            result: "skipped_resumed",
            line: format!(
                "gpuwatch: not taking node {node} out again: a person put it back after gpuwatch took it out for this fault; {what}"
            ),
        });
    }
    let actions = store.remediation_actions_since(node, now - HOUR_MS)?;
    if actions >= cfg.max_actions_per_hour {
        let recent = last.as_ref().is_some_and(|e| e.ts_ms > now - HOUR_MS);
        if !(recent && last_result == Some("refused_breaker")) {
            store.remediation_record(&entry(f, "refused_breaker", None))?;
        }
        return Ok(Decision {
            result: "refused_breaker",
            line: format!(
                "gpuwatch: breaker open: {actions} action(s) on node {node} in the last hour (max_actions_per_hour = {}); not acting on: {what}",
                cfg.max_actions_per_hour
            ),
        });
    }
    if cfg.dry_run {
        once(store, "dry_run")?;
        return Ok(Decision {
            result: "dry_run",
            line: format!(
                "gpuwatch: dry run: would take node {node} out of service ({}): {what}",
                backend.action()
            ),
        });
    }
    let id = store.remediation_record(&entry(f, "attempted", None))?;
    let outcome = backend.take_out(node, f);
    let done = crate::clock::now_ms();
    Ok(match outcome {
        Ok(()) => {
            store.remediation_outcome(id, "done", None, done)?;
            Decision {
                result: "done",
                line: format!(
                    "gpuwatch: took node {node} out of service ({}): {what}",
                    backend.action()
                ),
            }
        }
        Err(e) => {
            store.remediation_outcome(id, "failed", Some(&e), done)?;
            Decision {
                result: "failed",
                line: format!("gpuwatch: could not take node {node} out of service ({e}): {what}"),
            }
        }
    })
}

/// The faults of this host's GPUs that act: each failed health check whose code `codes`
/// names, GPU by GPU (an unknown verdict never acts).
pub fn health_faults(
    rows: &[crate::store::read::GpuStatusRow],
    stale_after_ms: i64,
    codes: &[String],
) -> Vec<Fault> {
    use crate::gpu_health::{self, Status};
    rows.iter()
        .flat_map(|r| {
            let h = gpu_health::judge(r, stale_after_ms);
            h.reasons
                .into_iter()
                .filter(|x| x.severity == Status::Fail && codes.iter().any(|c| c == x.code))
                .map(|x| Fault {
                    gpu_index: r.inventory.index,
                    gpu_uuid: r.inventory.uuid.clone(),
                    code: x.code.to_string(),
                    text: x.text,
                    source: "health".into(),
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Health codes `codes` names that the health verdict does not have (a typo acts never).
pub fn unknown_codes(codes: &[String]) -> Vec<String> {
    codes
        .iter()
        .filter(|c| !crate::gpu_health::CODES.iter().any(|(k, _)| k == c))
        .cloned()
        .collect()
}

fn summary(faults: &[Fault]) -> String {
    match faults.first() {
        None => "its GPUs are healthy".into(),
        Some(f) => f.reason(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::remediation::{DEFAULT_ALERTS, DEFAULT_HEALTH};

    #[test]
    fn the_default_codes_are_health_codes_that_fail() {
        let codes: Vec<String> = DEFAULT_HEALTH.iter().map(|s| s.to_string()).collect();
        assert!(unknown_codes(&codes).is_empty());
        for c in DEFAULT_HEALTH {
            let sev = crate::gpu_health::CODES
                .iter()
                .find(|(k, _)| k == c)
                .map(|x| x.1);
            assert_eq!(sev, Some(crate::gpu_health::Status::Fail), "{c}");
        }
        assert_eq!(unknown_codes(&["gpu_lots".to_string()]), ["gpu_lots"]);
        // The default alerts are default rules.
        let rules = crate::rules::defaults();
        for a in DEFAULT_ALERTS {
            assert!(
                rules
                    .iter()
                    .any(|(_, t)| t.contains(&format!("name = \"{a}\""))),
                "{a}"
            );
        }
    }

    #[test]
    fn a_reason_is_short_and_names_the_gpu() {
        let f = Fault {
            gpu_index: 3,
            gpu_uuid: "GPU-x".into(),
            code: "gpu_lost".into(),
            text: "é".repeat(300),
            source: "health".into(),
        };
        let r = f.reason();
        assert!(r.starts_with("gpuwatch: GPU 3 gpu_lost: "));
        assert!(r.len() <= 200 && r.ends_with("..."), "{}", r.len());
        assert_eq!(f.key(), "GPU-x:gpu_lost");
    }
}
