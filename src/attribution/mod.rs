//! Who holds a GPU beyond its PIDs: the container, Kubernetes pod and Slurm job of each
//! process, from what the node itself says: `/proc/PID/cgroup`, the kubelet's pod-resources
//! API, the kubelet's pod log directories (pod names) and a Slurm job's environment.
//!
//! Invariants: attribution only adds what the evidence shows — a path shape it does not
//! know yields no container, never a guessed one; nothing here runs on a tick's deadline
//! (the resolver reads a process's cgroup once, when it first sees the process).

pub mod cgroup;
pub mod holders;
pub mod job;
pub mod kubelet;
pub mod placement;

use crate::model::Placement;

/// The pod a set of processes (a GPU's) works for: the one pod all those that name a pod
/// name; `None` when none does or they name several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedPod<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    /// The container, when all of them run in the same one.
    pub container: Option<&'a str>,
}

pub fn shared_pod<'a>(
    placements: impl IntoIterator<Item = &'a Placement>,
) -> Option<SharedPod<'a>> {
    let mut pods = placements.into_iter().filter_map(|p| {
        Some(SharedPod {
            namespace: p.namespace.as_deref()?,
            pod: p.pod.as_deref()?,
            container: p.container.as_deref(),
        })
    });
    let mut shared = pods.next()?;
    for p in pods {
        if (p.namespace, p.pod) != (shared.namespace, shared.pod) {
            return None;
        }
        if p.container != shared.container {
            shared.container = None;
        }
    }
    Some(shared)
}

impl crate::model::GpuHolder {
    /// The pod the kubelet allocated the GPU to, with its container.
    pub fn as_shared_pod(&self) -> SharedPod<'_> {
        SharedPod {
            namespace: &self.namespace,
            pod: &self.pod,
            container: Some(&self.container),
        }
    }
}

/// The one Slurm job all of the processes that name a job name; `None` when none or several.
pub fn shared_slurm_job<'a>(placements: impl IntoIterator<Item = &'a Placement>) -> Option<u64> {
    let mut jobs = placements.into_iter().filter_map(|p| p.slurm_job);
    let job = jobs.next()?;
    jobs.all(|j| j == job).then_some(job)
}

impl Placement {
    /// Where the process runs, for a table cell: `namespace/pod`, else `slurm:JOB`.
    pub fn short(&self) -> Option<String> {
        match (&self.namespace, &self.pod, self.slurm_job) {
            (Some(ns), Some(pod), _) => Some(format!("{ns}/{pod}")),
            (_, _, Some(job)) => Some(format!("slurm:{job}")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, c: &str) -> Placement {
        Placement {
            namespace: Some(ns.into()),
            pod: Some(name.into()),
            container: Some(c.into()),
            ..Placement::default()
        }
    }

    #[test]
    fn one_pod_among_the_processes_that_name_one() {
        let job = Placement {
            slurm_job: Some(7),
            ..Placement::default()
        };
        let (a, b) = (
            pod("research", "llm", "trainer"),
            pod("research", "llm", "sidecar"),
        );
        let got = shared_pod([&a, &job]).expect("one pod");
        assert_eq!(
            (got.namespace, got.pod, got.container),
            ("research", "llm", Some("trainer"))
        );
        assert_eq!(
            shared_pod([&a, &b]).and_then(|p| p.container),
            None,
            "two containers"
        );
        assert_eq!(
            shared_pod([&a, &pod("dev", "llm", "trainer")]),
            None,
            "two pods"
        );
        assert_eq!(shared_pod([&job]), None);
        assert_eq!(shared_slurm_job([&job, &a]), Some(7));
        let other = Placement {
            slurm_job: Some(8),
            ..Placement::default()
        };
        assert_eq!(shared_slurm_job([&job, &other]), None);
        assert_eq!(a.short().as_deref(), Some("research/llm"));
        assert_eq!(job.short().as_deref(), Some("slurm:7"));
        assert_eq!(Placement::default().short(), None);
    }
}
