//! One process's [`Placement`] from its `/proc/PID` directory: the cgroup gives the
//! container, pod UID and Slurm job; the kubelet's pod log directories name a pod UID's pod
//! and namespace; a Slurm job's own environment names the job and its array task.
//!
//! Invariants: `None` means the cgroup could not be read (unknown), never "on the host";
//! of a process's environment only the `SLURM_JOB_*`/`SLURM_ARRAY_*` values named below are
//! read, only for a process the cgroup already places in a Slurm job, and the environment's
//! job id must match the cgroup's (otherwise the environment is not trusted).

use std::fs;
use std::path::Path;

use crate::model::Placement;

use super::cgroup;

/// The placement of the process whose `/proc` directory is `proc_dir`.
pub fn of_process(proc_dir: &Path, pod_logs_dir: &Path) -> Option<Placement> {
    let text = fs::read_to_string(proc_dir.join("cgroup")).ok()?;
    let mut p = from_cgroup(&text)?;
    if let Some(uid) = p.pod_uid.clone()
        && let Some(pod) = pod_from_logs(pod_logs_dir, &uid)
    {
        p.namespace = Some(pod.namespace);
        p.pod = Some(pod.name);
        p.container = pod.only_container;
    }
    if let Some(job) = p.slurm_job {
        slurm_from_environ(proc_dir, job, &mut p);
    }
    Some(p)
}

/// What a `/proc/PID/cgroup` text alone places (no pod names, no Slurm job name); `None`
/// when it holds no cgroup line.
pub fn from_cgroup(text: &str) -> Option<Placement> {
    let c = cgroup::parse(text)?;
    Some(Placement {
        runtime: c.runtime.map(|r| r.as_str().to_string()),
        container_id: c.container_id,
        pod_uid: c.pod_uid,
        slurm_job: c.slurm_job,
        slurm_step: c.slurm_step,
        unit: c.unit,
        ..Placement::default()
    })
}

pub(crate) struct PodDir {
    pub namespace: String,
    pub name: String,
    /// The container, when the pod has exactly one container directory.
    pub only_container: Option<String>,
}

/// `<pod_logs_dir>/<namespace>_<pod>_<uid>/<container>/` (names and namespaces are DNS
/// labels: no `_`, so the split is exact).
pub(crate) fn pod_from_logs(pod_logs_dir: &Path, uid: &str) -> Option<PodDir> {
    for entry in fs::read_dir(pod_logs_dir).ok()?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let parts: Vec<&str> = name.split('_').collect();
        let [ns, pod, dir_uid] = parts[..] else {
            continue;
        };
        if dir_uid != uid || ns.is_empty() || pod.is_empty() {
            continue;
        }
        let containers: Vec<String> = fs::read_dir(entry.path())
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        return Some(PodDir {
            namespace: ns.to_string(),
            name: pod.to_string(),
            only_container: match &containers[..] {
                [one] => Some(one.clone()),
                _ => None,
            },
        });
    }
    None
}

fn slurm_from_environ(proc_dir: &Path, job: u64, p: &mut Placement) {
    let Ok(raw) = fs::read(proc_dir.join("environ")) else {
        return;
    };
    let mut vars = std::collections::HashMap::new();
    for kv in raw.split(|&b| b == 0) {
        let Some(eq) = kv.iter().position(|&b| b == b'=') else {
            continue;
        };
        let key = &kv[..eq];
        if matches!(
            key,
            b"SLURM_JOB_ID"
                | b"SLURM_JOB_NAME"
                | b"SLURM_ARRAY_JOB_ID"
                | b"SLURM_ARRAY_TASK_ID"
                | b"SLURM_JOB_NUM_NODES"
                | b"SLURM_NNODES"
        ) {
            vars.insert(
                key.to_vec(),
                String::from_utf8_lossy(&kv[eq + 1..]).into_owned(),
            );
        }
    }
    if vars
        .get(&b"SLURM_JOB_ID"[..])
        .and_then(|v| v.parse::<u64>().ok())
        != Some(job)
    {
        return;
    }
    p.slurm_job_name = vars
        .remove(&b"SLURM_JOB_NAME"[..])
        .filter(|n| !n.is_empty());
    p.slurm_nodes = vars
        .get(&b"SLURM_JOB_NUM_NODES"[..])
        .or_else(|| vars.get(&b"SLURM_NNODES"[..]))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| *n > 0);
    if let (Some(a), Some(t)) = (
        vars.get(&b"SLURM_ARRAY_JOB_ID"[..]),
        vars.get(&b"SLURM_ARRAY_TASK_ID"[..]),
    ) {
        p.slurm_array = Some(format!("{a}_{t}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f6b0f1b0b2b0cd6a3bd0f7f4dbf51e9e3f15b5b4c3a3e7c0e5d8b9a1c2d3e4f";
    const UID: &str = "7c1e6a4e-2c4b-4d3e-9f1a-0b2c3d4e5f60";

    fn proc_dir(root: &Path, pid: u32, cgroup: &str, environ: &[&str]) -> std::path::PathBuf {
        let d = root.join(pid.to_string());
        fs::create_dir_all(&d).expect("mkdir");
        fs::write(d.join("cgroup"), cgroup).expect("cgroup");
        fs::write(d.join("environ"), environ.join("\0")).expect("environ");
        d
    }

    #[test]
    fn a_pod_is_named_from_its_log_directory() {
        let t = tempfile::tempdir().expect("tempdir");
        let logs = t.path().join("pods");
        fs::create_dir_all(logs.join(format!("research_llm-ft-7_{UID}/trainer"))).expect("pod");
        fs::create_dir_all(
            logs.join("kube-system_coredns-1_0b2c3d4e-2c4b-4d3e-9f1a-7c1e6a4e5f60/coredns"),
        )
        .expect("other pod");
        let u = UID.replace('-', "_");
        let d = proc_dir(
            t.path(),
            7,
            &format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope\n"
            ),
            &["PATH=/usr/bin", "API_KEY=secret"],
        );
        let p = of_process(&d, &logs).expect("placement");
        assert_eq!(p.pod.as_deref(), Some("llm-ft-7"));
        assert_eq!(p.namespace.as_deref(), Some("research"));
        assert_eq!(p.container.as_deref(), Some("trainer"));
        assert_eq!(p.container_id.as_deref(), Some(ID));
        assert_eq!(p.runtime.as_deref(), Some("containerd"));
        // Two containers: which one the process is in is not known from the logs.
        fs::create_dir_all(logs.join(format!("research_llm-ft-7_{UID}/sidecar"))).expect("c2");
        let p = of_process(&d, &logs).expect("placement");
        assert_eq!((p.pod.as_deref(), p.container), (Some("llm-ft-7"), None));
        // No log directory for the UID: the pod stays unnamed, the UID is kept.
        let p = of_process(&d, &t.path().join("missing")).expect("placement");
        assert_eq!((p.pod, p.pod_uid.as_deref()), (None, Some(UID)));
    }

    #[test]
    fn slurm_names_come_from_the_jobs_own_environment() {
        let t = tempfile::tempdir().expect("tempdir");
        let cg = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n";
        let d = proc_dir(
            t.path(),
            8,
            cg,
            &[
                "SLURM_JOB_ID=4242",
                "SLURM_JOB_NAME=llama-pretrain",
                "SLURM_ARRAY_JOB_ID=4240",
                "SLURM_ARRAY_TASK_ID=2",
                "SLURM_JOB_NUM_NODES=64",
                "HF_TOKEN=hf_secret",
            ],
        );
        let p = of_process(&d, t.path()).expect("placement");
        assert_eq!(p.slurm_job, Some(4242));
        assert_eq!(p.slurm_step.as_deref(), Some("0"));
        assert_eq!(p.slurm_job_name.as_deref(), Some("llama-pretrain"));
        assert_eq!(p.slurm_array.as_deref(), Some("4240_2"));
        assert_eq!(p.slurm_nodes, Some(64), "the job spans 64 nodes");
        assert!(!format!("{p:?}").contains("hf_secret"));
        // An environment naming another job is not this process's job.
        let d = proc_dir(t.path(), 9, cg, &["SLURM_JOB_ID=1", "SLURM_JOB_NAME=other"]);
        let p = of_process(&d, t.path()).expect("placement");
        assert_eq!((p.slurm_job, p.slurm_job_name), (Some(4242), None));
        assert_eq!(p.slurm_nodes, None);
    }

    #[test]
    fn an_unreadable_cgroup_is_unknown_and_a_host_process_is_placed_on_the_host() {
        let t = tempfile::tempdir().expect("tempdir");
        assert_eq!(of_process(&t.path().join("404"), t.path()), None, "exited");
        let d = proc_dir(
            t.path(),
            10,
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            &[],
        );
        let p = of_process(&d, t.path()).expect("placement");
        assert_eq!(p.unit.as_deref(), Some("session-3.scope"));
        assert_eq!((p.container_id, p.pod_uid, p.slurm_job), (None, None, None));
        // This very process: whatever its cgroup, it is read.
        assert!(of_process(Path::new("/proc/self"), t.path()).is_some());
    }
}
