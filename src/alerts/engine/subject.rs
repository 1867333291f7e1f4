//! Who an alert is about: the host, GPU and process of its target, and where that work runs
//! (pod, namespace, container, Slurm job), which become the alert's labels.
//!
//! Invariants: a placement label is present only when the evidence says it — the process's
//! own placement, else (for a pod's process or a GPU) the kubelet's allocation of the GPU,
//! else (for a GPU) the one pod or Slurm job all its placed processes share; otherwise the
//! label is absent (unknown), never a guess.

use crate::rules::eval::expr::Target;
use crate::rules::rule::Scope;

/// Who an alert is about, for labels and templates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Subject {
    pub host: String,
    pub gpu: Option<u32>,
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
}

impl Subject {
    /// An alert's labels: the rule's own, then `host`, `gpu`, `uuid`, `pid` and the known
    /// placement labels (which win over a rule label of the same name).
    pub fn labels(
        &self,
        rule_labels: &std::collections::BTreeMap<String, String>,
    ) -> std::collections::BTreeMap<String, String> {
        let mut labels = rule_labels.clone();
        labels.insert("host".into(), self.host.clone());
        if let Some(g) = self.gpu {
            labels.insert("gpu".into(), g.to_string());
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
    /// `container_id`, `slurm_job`).
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
        out
    }
}

/// Who a target is, for labels and templates.
pub(super) fn subject_of(target: Target<'_>, scope: Scope) -> Subject {
    let g = target.gpu;
    if scope == Scope::Host {
        return Subject {
            host: g.host.clone(),
            ..Subject::default()
        };
    }
    let mut s = Subject {
        host: g.host.clone(),
        gpu: Some(g.inv.index),
        uuid: Some(g.inv.uuid.clone()),
        model: g.inv.name.clone(),
        pid: target.proc.map(|p| p.pid),
        process: target.proc.and_then(|p| p.name.clone()),
        user: target.proc.and_then(|p| p.user.clone()),
        cmdline: target.proc.and_then(|p| p.cmdline.clone()),
        ..Subject::default()
    };
    match target.proc {
        Some(p) => {
            if let Some(pl) = &p.placement {
                s.pod = pl.pod.clone();
                s.namespace = pl.namespace.clone();
                s.container = pl.container.clone();
                s.container_id = pl.container_id.clone();
                s.slurm_job = pl.slurm_job;
            }
            // A pod's process (its cgroup names a pod UID) whose pod the logs did not name,
            // or a process of unknown placement: the pod the kubelet allocated its GPU to.
            if s.pod.is_none()
                && p.placement.as_ref().is_none_or(|pl| pl.pod_uid.is_some())
                && let Some(h) = g.last_ts.and_then(|t| g.holder_at(t))
            {
                s.pod = Some(h.pod.clone());
                s.namespace = Some(h.namespace.clone());
                s.container = Some(h.container.clone());
            }
        }
        None => {
            if let Some(p) = g.pod() {
                s.pod = Some(p.pod.to_string());
                s.namespace = Some(p.namespace.to_string());
                s.container = p.container.map(str::to_string);
            }
            s.slurm_job = g.slurm_job();
        }
    }
    s
}
