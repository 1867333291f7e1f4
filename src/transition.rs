//! An alert's reported change, as the rule engine (`alerts`) reports it and delivery
//! (`notify`), the daemon's log, the demo and `replay` take it: the shared vocabulary between
//! evaluation and delivery, below both.
//!
//! Invariants: identity is rule + GPU (+ process); labels are identity and placement, never
//! values (values live in the summary), so a changing value never makes a new alert; a
//! placement label is present only when known (see `alerts::engine::subject`).

use std::collections::BTreeMap;

use crate::model::TsMs;
use crate::rules::rule::{Scope, Severity};

/// A reported change of an alert.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub at: TsMs,
    /// `firing` or `resolved`.
    pub state: &'static str,
    pub rule: String,
    pub severity: Severity,
    pub subject: Subject,
    /// Identity labels: host, gpu, uuid (pid for process rules) and the rule's labels.
    pub labels: BTreeMap<String, String>,
    pub summary: String,
    pub description: Option<String>,
    /// When the condition started to hold.
    pub active_since: Option<TsMs>,
    /// When it was reported firing (this episode).
    pub fired_at: Option<TsMs>,
    /// The alert's identity in the store.
    pub gpu_id: i64,
    pub process_id: Option<i64>,
    pub scope: Scope,
    /// The first metric of the rule's condition (what a chart of the alert shows).
    pub metric: Option<&'static str>,
    /// `Some(previous)` when an alert already reported firing changed severity (`state` is
    /// `firing`, `severity` the new one): a change, not a new alert.
    pub severity_from: Option<Severity>,
}

/// Who an alert is about, for labels and templates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Subject {
    pub host: String,
    pub gpu: Option<u32>,
    /// A MIG instance's GPU instance id and profile (`gpu` is then its parent's index).
    pub gpu_instance: Option<(u32, String)>,
    pub uuid: Option<String>,
    pub model: Option<String>,
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub user: Option<String>,
    pub cmdline: Option<String>,
    /// Where it runs: the process's placement, or for a GPU its holder (the kubelet's
    /// allocation, else the one pod its processes belong to). Becomes labels.
    pub pod: Option<String>,
    pub namespace: Option<String>,
    pub container: Option<String>,
    pub container_id: Option<String>,
    pub slurm_job: Option<u64>,
    /// The training job across nodes (`crate::attribution::job`): a label routes, silences
    /// and the fleet's inhibition match on.
    pub training_job: Option<String>,
    /// How many nodes the work spans, when known (Slurm's node count): more than one sends
    /// the job's hang alerts through Alertmanager only (not a label).
    pub job_nodes: Option<u32>,
}

impl Subject {
    /// How people address the GPU: `3`, or `0/7` for instance 7 of GPU 0.
    pub fn gpu_address(&self) -> Option<String> {
        let g = self.gpu?;
        Some(match &self.gpu_instance {
            Some((gi, _)) => format!("{g}/{gi}"),
            None => g.to_string(),
        })
    }

    /// An alert's labels: the rule's own, then `host`, `gpu`, `uuid`, `pid` and the known
    /// placement labels (which win over a rule label of the same name).
    pub fn labels(
        &self,
        rule_labels: &std::collections::BTreeMap<String, String>,
    ) -> std::collections::BTreeMap<String, String> {
        let mut labels = rule_labels.clone();
        labels.insert("host".into(), self.host.clone());
        // `gpu` is how people address the GPU: `3`, or `0/7` for a MIG instance (what
        // `--match gpu=0/7` silences), with the instance's id and profile beside it.
        if let Some(g) = self.gpu_address() {
            labels.insert("gpu".into(), g);
        }
        if let Some((gi, profile)) = &self.gpu_instance {
            labels.insert("gpu_instance_id".into(), gi.to_string());
            labels.insert("gpu_instance_profile".into(), profile.clone());
        }
        if let Some(u) = &self.uuid {
            labels.insert("uuid".into(), u.clone());
        }
        if let Some(p) = self.pid {
            labels.insert("pid".into(), p.to_string());
        }
        for (k, v) in self.placement_labels() {
            labels.insert(k.into(), v);
        }
        labels
    }

    /// The placement labels that are known (`pod`, `namespace`, `container`,
    /// `container_id`, `slurm_job`, `training_job`).
    pub fn placement_labels(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (k, v) in [
            ("pod", &self.pod),
            ("namespace", &self.namespace),
            ("container", &self.container),
            ("container_id", &self.container_id),
        ] {
            if let Some(v) = v {
                out.push((k, v.clone()));
            }
        }
        if let Some(j) = self.slurm_job {
            out.push(("slurm_job", j.to_string()));
        }
        if let Some(j) = &self.training_job {
            out.push(("training_job", j.clone()));
        }
        out
    }
}
