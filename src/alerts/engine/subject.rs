//! Who an alert is about ([`Subject`], in `crate::transition`): the host, GPU and process of
//! its target, and where that work runs (pod, namespace, container, Slurm job), which become
//! the alert's labels.
//!
//! Invariants: a placement label is present only when the evidence says it — the process's
//! own placement, else (for a pod's process or a GPU) the kubelet's allocation of the GPU,
//! else (for a GPU) the one pod or Slurm job all its placed processes share; otherwise the
//! label is absent (unknown), never a guess. `training_job` is the GPU's job across nodes
//! (`crate::attribution::job`), for GPU and process alerts alike.

use crate::rules::eval::expr::Target;
use crate::rules::eval::world::World;
use crate::rules::rule::Scope;
use crate::transition::Subject;

/// Who a target is, for labels and templates.
pub(super) fn subject_of(world: &World, target: Target<'_>, scope: Scope) -> Subject {
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
        gpu_instance: g
            .inv
            .mig
            .as_ref()
            .map(|m| (m.gpu_instance_id, m.profile.clone())),
        uuid: Some(g.inv.uuid.clone()),
        model: g.inv.name.clone(),
        pid: target.proc.map(|p| p.pid),
        process: target.proc.and_then(|p| p.name.clone()),
        user: target.proc.and_then(|p| p.user.clone()),
        cmdline: target.proc.and_then(|p| p.cmdline.clone()),
        training_job: world.training_job(g).map(|j| j.name),
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
                s.job_nodes = pl.slurm_nodes;
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
            s.job_nodes = g
                .procs
                .values()
                .filter_map(|p| p.placement.as_ref()?.slurm_nodes)
                .max();
        }
    }
    s
}
