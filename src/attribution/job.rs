//! The training job a GPU works for, named the same on every node of a multi-node job: the
//! `training_job` label of samples' exports, alerts, `status` and the fleet rules
//! (docs/FLEET.md).
//!
//! Where the name comes from, first match wins:
//! 1. `slurm`: the Slurm job id all the GPU's placed processes run in (one id per job, on
//!    every node of it);
//! 2. `label`: the value of `[fleet] job_label` on the training step series joined to the GPU;
//! 3. `owner`: what the pod's controller says — its labels and owner references from the
//!    kubelet's `/pods` (opt-in, `[kubernetes] kubelet_pods`; `kubelet::pods`);
//! 4. `controller`: the pod's name with its controller's ordinal and hash suffixes removed
//!    ([`pod_base_name`]: Job, indexed Job, JobSet, PyTorchJob / MPIJob / TFJob roles,
//!    StatefulSet, LeaderWorkerSet);
//! 5. `pod`: the pod's own name (a pod no controller naming rule explains).
//!
//! Invariants: no evidence, no name (`None`, never a made-up one); the training series' `job`
//! label is not a job identity here (it is Prometheus's scrape job, often the same for every
//! job of a cluster) unless `[fleet] job_label = "job"` says so.

/// A training job's identity and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TrainingJob {
    pub name: String,
    pub source: JobSource,
}

/// Where a [`TrainingJob`]'s name came from (the `job_source` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobSource {
    Slurm,
    Label,
    Owner,
    Controller,
    Pod,
}

impl JobSource {
    pub fn as_str(self) -> &'static str {
        match self {
            JobSource::Slurm => "slurm",
            JobSource::Label => "label",
            JobSource::Owner => "owner",
            JobSource::Controller => "controller",
            JobSource::Pod => "pod",
        }
    }
}

/// What a node knows about the work on one GPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobEvidence<'a> {
    /// The one Slurm job of the GPU's placed processes.
    pub slurm_job: Option<u64>,
    /// The pod holding the GPU (the kubelet's allocation, or its processes' one pod).
    pub pod: Option<&'a str>,
    /// The job that pod's controller names (the kubelet's `/pods`).
    pub pod_owner: Option<&'a str>,
    /// The labels of the training step series joined to the GPU.
    pub step_labels: Option<&'a [(String, String)]>,
    /// `[fleet] job_label`.
    pub job_label: Option<&'a str>,
}

/// The GPU's training job, by the rules of the module doc.
pub fn training_job(e: &JobEvidence<'_>) -> Option<TrainingJob> {
    let job = |name: String, source| Some(TrainingJob { name, source });
    if let Some(id) = e.slurm_job {
        return job(id.to_string(), JobSource::Slurm);
    }
    if let (Some(key), Some(labels)) = (e.job_label, e.step_labels)
        && let Some((_, v)) = labels
            .iter()
            .find(|(k, v)| k == key && !v.trim().is_empty())
    {
        return job(v.trim().to_string(), JobSource::Label);
    }
    if let Some(owner) = e.pod_owner.filter(|o| !o.trim().is_empty()) {
        return job(owner.trim().to_string(), JobSource::Owner);
    }
    let pod = e.pod?;
    match pod_base_name(pod) {
        Some(base) => job(base.to_string(), JobSource::Controller),
        None => job(pod.to_string(), JobSource::Pod),
    }
}

/// Kubernetes' random name suffixes (`generateName`) use these characters only (no vowels,
/// no confusable digits).
const HASH_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

/// A ReplicaSet-style or Job-style random suffix: 5 characters of [`HASH_ALPHABET`], or a
/// pod-template hash (8 to 10 of them) followed by one.
fn is_hash(seg: &str) -> bool {
    (5..=10).contains(&seg.len()) && seg.chars().all(|c| HASH_ALPHABET.contains(c))
}

fn is_ordinal(seg: &str) -> bool {
    !seg.is_empty() && seg.len() <= 5 && seg.bytes().all(|b| b.is_ascii_digit())
}

/// The replica roles of the Kubeflow training operators (PyTorchJob, MPIJob, TFJob, ...).
const ROLES: &[&str] = &[
    "master",
    "worker",
    "launcher",
    "chief",
    "ps",
    "evaluator",
    "leader",
];

/// A pod's name without what its controller appended, so that every pod of one job gives the
/// same name: `llm-worker-3` → `llm`, `llm-master-0` → `llm`, `train-4-x7k2p` (indexed Job)
/// → `train`, `js-workers-0-3-x7k2p` (JobSet) → `js-workers`, `sts-2` → `sts`,
/// `mpi-launcher-x7k2p` → `mpi`, `lws-1-2` (LeaderWorkerSet worker) → `lws-1` and
/// `lws-1` (its leader) → `lws` (see docs/FLEET.md for that limit). `None` when no suffix
/// rule applies (the pod name is then the job's name).
pub fn pod_base_name(pod: &str) -> Option<&str> {
    let mut segs: Vec<&str> = pod.split('-').collect();
    let before = segs.len();
    // A generated suffix first (Job, JobSet, launcher pods), then up to two ordinals after
    // it (JobSet: job index, pod index) or one without it (StatefulSet, operator roles).
    let hashed = segs.len() > 1 && segs.last().is_some_and(|s| is_hash(s));
    if hashed {
        segs.pop();
    }
    let ordinals = if hashed { 2 } else { 1 };
    for _ in 0..ordinals {
        if segs.len() > 1 && segs.last().is_some_and(|s| is_ordinal(s)) {
            segs.pop();
        }
    }
    if segs.len() > 1 && segs.last().is_some_and(|s| ROLES.contains(s)) {
        segs.pop();
    }
    if segs.len() == before || segs.is_empty() {
        return None;
    }
    let len: usize = segs.iter().map(|s| s.len()).sum::<usize>() + segs.len() - 1;
    pod.get(..len).filter(|b| !b.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_suffixes_are_removed() {
        for (pod, base) in [
            ("llama-pretrain-worker-3", Some("llama-pretrain")),
            ("llama-pretrain-master-0", Some("llama-pretrain")),
            ("mpi-bert-launcher-x7k2p", Some("mpi-bert")),
            ("mpi-bert-worker-12", Some("mpi-bert")),
            ("train-4-x7k2p", Some("train")),
            ("train-x7k2p", Some("train")),
            ("js-workers-0-3-x7k2p", Some("js-workers")),
            ("sts-2", Some("sts")),
            ("lws-1-2", Some("lws-1")),
            ("run-2024-12-06-worker-3", Some("run-2024-12-06")),
            ("notebook", None),
            ("llama-70b", None),
            ("a-b-c", None),
            ("0", None),
            ("worker-0", Some("worker")),
        ] {
            assert_eq!(pod_base_name(pod), base, "{pod}");
        }
    }

    #[test]
    fn slurm_then_label_then_pod() {
        let labels = vec![
            ("job".to_string(), "kubernetes-pods".to_string()),
            ("run_id".to_string(), "exp-42".to_string()),
        ];
        let mut e = JobEvidence {
            slurm_job: Some(4242),
            pod: Some("llm-worker-1"),
            pod_owner: Some("llm-pretrain"),
            step_labels: Some(&labels),
            job_label: Some("run_id"),
        };
        let got = |e: &JobEvidence| training_job(e).map(|j| (j.name, j.source.as_str()));
        assert_eq!(got(&e), Some(("4242".into(), "slurm")));
        e.slurm_job = None;
        assert_eq!(got(&e), Some(("exp-42".into(), "label")));
        e.job_label = Some("missing");
        assert_eq!(got(&e), Some(("llm-pretrain".into(), "owner")));
        e.pod_owner = None;
        assert_eq!(got(&e), Some(("llm".into(), "controller")));
        e.job_label = None;
        e.pod = Some("notebook");
        assert_eq!(got(&e), Some(("notebook".into(), "pod")));
        e.pod = None;
        assert_eq!(got(&e), None, "the series' scrape job is not an identity");
        e.job_label = Some("job");
        assert_eq!(got(&e), Some(("kubernetes-pods".into(), "label")));
    }
}
