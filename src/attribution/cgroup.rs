//! Parses `/proc/PID/cgroup` (cgroup v1 and v2) into the container, pod and Slurm job a
//! process runs in, for the path shapes the common runtimes and schedulers create:
//!
//! | shape | example path |
//! |---|---|
//! | Docker, cgroupfs driver | `/docker/<id>` |
//! | Docker, systemd driver | `/system.slice/docker-<id>.scope` |
//! | containerd (CRI), systemd | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope` |
//! | Kubernetes, cgroupfs driver | `/kubepods/burstable/pod<uid>/<id>` |
//! | CRI-O | `…/crio-<id>.scope` |
//! | Podman | `…/libpod-<id>.scope` (rootless: under `user@UID.service`) |
//! | Slurm, cgroup v1 | `/slurm/uid_N/job_N/step_M/task_K` |
//! | Slurm, cgroup v2 | `/system.slice/slurmstepd.scope/job_N/step_M/user/task_K` |
//! | systemd unit, user session | `/system.slice/foo.service`, `/user.slice/user-1000.slice/session-3.scope` |
//!
//! Invariants: a container id is the runtime's full 64-hex id or nothing; a pod UID is the
//! canonical dashed form whichever driver wrote it (the systemd driver writes underscores);
//! the conmon monitor of CRI-O/Podman (`crio-conmon-<id>`, `libpod-conmon-<id>`) is not the
//! container; on cgroup v1 the line that says most wins (a container over a Slurm job over
//! a unit), and on v2 the single `0::` line is the answer.

/// The container runtime that created a container's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Docker,
    Containerd,
    CriO,
    Podman,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Podman => "podman",
        }
    }

    pub fn parse(s: &str) -> Option<Runtime> {
        Some(match s {
            "docker" => Runtime::Docker,
            "containerd" => Runtime::Containerd,
            "cri-o" => Runtime::CriO,
            "podman" => Runtime::Podman,
            _ => return None,
        })
    }
}

/// What one process's cgroup says about it. Every field is `None` when the path does not
/// say (a host process has no container; a Kubernetes cgroupfs path names no runtime).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cgroup {
    /// The cgroup path the attribution came from.
    pub path: String,
    pub runtime: Option<Runtime>,
    /// The runtime's 64-hex container id.
    pub container_id: Option<String>,
    /// The Kubernetes pod UID (dashed, lower case).
    pub pod_uid: Option<String>,
    pub slurm_job: Option<u64>,
    /// The Slurm step: a number, or `batch`, `extern`, `interactive`.
    pub slurm_step: Option<String>,
    /// The systemd unit (`foo.service`, `session-3.scope`) of a process outside containers
    /// and jobs.
    pub unit: Option<String>,
}

impl Cgroup {
    /// How much the attribution says (to pick among cgroup v1 hierarchies).
    fn weight(&self) -> u8 {
        if self.container_id.is_some() || self.pod_uid.is_some() {
            3
        } else if self.slurm_job.is_some() {
            2
        } else if self.unit.is_some() {
            1
        } else {
            0
        }
    }
}

/// Parses the whole text of `/proc/PID/cgroup`; `None` when no line is a cgroup entry.
pub fn parse(text: &str) -> Option<Cgroup> {
    let mut best: Option<Cgroup> = None;
    for line in text.lines() {
        // hierarchy-ID:controller-list:cgroup-path (the path may itself contain ':').
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(_controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id.parse::<u32>().is_err() || !path.starts_with('/') {
            continue;
        }
        let c = from_path(path);
        if id == "0" && best.as_ref().is_none_or(|b| b.weight() <= c.weight()) {
            // cgroup v2 (or the v2 line of a hybrid setup).
            best = Some(c);
        } else if best.as_ref().is_none_or(|b| b.weight() < c.weight()) {
            best = Some(c);
        }
    }
    best
}

/// The attribution one cgroup path gives.
pub fn from_path(path: &str) -> Cgroup {
    let mut c = Cgroup {
        path: path.to_string(),
        ..Cgroup::default()
    };
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (k, part) in parts.iter().enumerate() {
        if let Some(uid) = pod_uid(part) {
            c.pod_uid = Some(uid);
            // cgroupfs driver: the container is the next component, a bare id.
            if let Some(next) = parts.get(k + 1).filter(|n| is_container_id(n)) {
                c.container_id = Some((*next).to_string());
            }
            continue;
        }
        if let Some((rt, id)) = scoped_container(part) {
            c.runtime = Some(rt);
            c.container_id = Some(id.to_string());
            continue;
        }
        if *part == "docker"
            && let Some(next) = parts.get(k + 1).filter(|n| is_container_id(n))
        {
            c.runtime = Some(Runtime::Docker);
            c.container_id = Some((*next).to_string());
            continue;
        }
        if let Some(job) = part
            .strip_prefix("job_")
            .and_then(|j| j.parse::<u64>().ok())
            && is_slurm(&parts[..k])
        {
            c.slurm_job = Some(job);
            c.slurm_step = parts
                .get(k + 1)
                .and_then(|s| s.strip_prefix("step_"))
                .filter(|s| !s.is_empty())
                .map(str::to_string);
        }
    }
    if c.weight() == 0 {
        c.unit = parts
            .iter()
            .rev()
            .find(|p| p.ends_with(".service") || p.ends_with(".scope"))
            .map(|p| (*p).to_string());
    }
    c
}

/// A Slurm job component sits under `slurm/uid_N` (v1) or `slurmstepd.scope` (v2).
fn is_slurm(before: &[&str]) -> bool {
    before
        .iter()
        .any(|p| *p == "slurm" || p.starts_with("slurmstepd") || p.starts_with("slurm_"))
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// `docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`, `libpod-<id>.scope`
/// (a conmon scope is not the container).
fn scoped_container(part: &str) -> Option<(Runtime, &str)> {
    let stem = part.strip_suffix(".scope")?;
    let (rt, id) = [
        ("docker-", Runtime::Docker),
        ("cri-containerd-", Runtime::Containerd),
        ("crio-", Runtime::CriO),
        ("libpod-", Runtime::Podman),
    ]
    .into_iter()
    .find_map(|(prefix, rt)| stem.strip_prefix(prefix).map(|id| (rt, id)))?;
    is_container_id(id).then_some((rt, id))
}

/// `pod<uid>` (cgroupfs) or `kubepods[-qos]-pod<uid_with_underscores>.slice` (systemd).
fn pod_uid(part: &str) -> Option<String> {
    let raw = if let Some(slice) = part.strip_suffix(".slice") {
        // `kubepods-burstable-pod<uid>.slice`, `kubepods-pod<uid>.slice`, and the same
        // under a prefix (`kubelet-kubepods-…` of kind and nested kubelets).
        if !slice.contains("kubepods") {
            return None;
        }
        let at = slice.rfind("-pod")?;
        &slice[at + 4..]
    } else {
        part.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-").to_ascii_lowercase();
    let groups: Vec<&str> = uid.split('-').collect();
    let shape = groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12];
    (shape
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit())))
    .then_some(uid)
}

#[cfg(test)]
mod tests;
