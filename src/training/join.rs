//! Which GPUs a training series belongs to, from its labels: a pure function the rule
//! evaluator calls (it is not used while fetching; the store keeps every series of the host).
//!
//! Rules, first match wins:
//! 1. `gpu` = an index (`"3"`) joins the GPU with that NVML index.
//! 2. `uuid` or `UUID` (dcgm-exporter's label) joins the GPU with that UUID; the value is
//!    compared case-insensitively and with or without the `GPU-` prefix. A label naming a GPU
//!    this host does not have joins nothing: `Gpus(vec![])` (never "all", which would blame
//!    healthy GPUs for another host's job).
//! 3. `pod` (with `namespace` when the series has one; none of the above): the GPUs that
//!    pod holds (the kubelet's allocation, or the pod its processes run in). While no GPU's
//!    pod is known (no kubelet, no placed process), or with `namespace` alone,
//!    [`Join::Unknown`]: callers treat it as "cannot say which GPU", no per-GPU alert from
//!    this series.
//! 4. None of these labels: [`Join::All`], the series applies to every GPU of the host.
//!
//! Invariants: no allocation beyond the result; `Gpus` is sorted and without duplicates.

/// A GPU of this host as the join sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRef {
    pub index: u32,
    /// NVML UUID, normally `GPU-xxxxxxxx-...`.
    pub uuid: String,
    /// The pod holding it, `(namespace, pod)`, when known.
    pub pod: Option<(String, String)>,
}

/// The GPUs a series applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Join {
    /// Every GPU of the host.
    All,
    /// These GPU indexes (possibly none: the series names a GPU this host lacks).
    Gpus(Vec<u32>),
    /// Depends on information not known yet (pod attribution).
    Unknown,
}

/// Applies the join rules (see the module doc) to one series' labels.
pub fn gpus_for_series(labels: &[(String, String)], gpus: &[GpuRef]) -> Join {
    let label = |name: &str| {
        labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
    };
    if let Some(v) = label("gpu") {
        let found = v
            .parse::<u32>()
            .ok()
            .filter(|i| gpus.iter().any(|g| g.index == *i));
        return Join::Gpus(found.into_iter().collect());
    }
    if let Some(v) = label("uuid").or_else(|| label("UUID")) {
        let want = strip_gpu_prefix(v);
        let mut found: Vec<u32> = gpus
            .iter()
            .filter(|g| strip_gpu_prefix(&g.uuid).eq_ignore_ascii_case(want))
            .map(|g| g.index)
            .collect();
        found.sort_unstable();
        found.dedup();
        return Join::Gpus(found);
    }
    if let Some(pod) = label("pod") {
        if gpus.iter().all(|g| g.pod.is_none()) {
            return Join::Unknown;
        }
        let ns = label("namespace");
        let mut found: Vec<u32> = gpus
            .iter()
            .filter(|g| {
                g.pod
                    .as_ref()
                    .is_some_and(|(gns, gpod)| gpod == pod && ns.is_none_or(|n| n == gns))
            })
            .map(|g| g.index)
            .collect();
        found.sort_unstable();
        found.dedup();
        return Join::Gpus(found);
    }
    if label("namespace").is_some() {
        return Join::Unknown;
    }
    Join::All
}

/// `GPU-abc` → `abc` (any case of the prefix); other values unchanged.
fn strip_gpu_prefix(v: &str) -> &str {
    match v.get(..4) {
        Some(p) if p.eq_ignore_ascii_case("GPU-") => &v[4..],
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus() -> Vec<GpuRef> {
        (0..4)
            .map(|i| GpuRef {
                index: i,
                uuid: format!("GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd"),
                pod: None,
            })
            .collect()
    }

    fn l(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn gpu_index_label() {
        assert_eq!(
            gpus_for_series(&l(&[("gpu", "2"), ("job", "x")]), &gpus()),
            Join::Gpus(vec![2])
        );
        assert_eq!(
            gpus_for_series(&l(&[("gpu", "9")]), &gpus()),
            Join::Gpus(vec![])
        );
        assert_eq!(
            gpus_for_series(&l(&[("gpu", "two")]), &gpus()),
            Join::Gpus(vec![])
        );
    }

    #[test]
    fn uuid_with_or_without_prefix_any_case() {
        let g = gpus();
        for v in [
            "GPU-00000003-aaaa-bbbb-cccc-dddddddddddd",
            "00000003-aaaa-bbbb-cccc-dddddddddddd",
            "gpu-00000003-AAAA-bbbb-cccc-DDDDDDDDDDDD",
        ] {
            assert_eq!(
                gpus_for_series(&l(&[("uuid", v)]), &g),
                Join::Gpus(vec![3]),
                "{v}"
            );
            assert_eq!(
                gpus_for_series(&l(&[("UUID", v)]), &g),
                Join::Gpus(vec![3]),
                "{v}"
            );
        }
        assert_eq!(
            gpus_for_series(&l(&[("uuid", "GPU-ffffffff")]), &g),
            Join::Gpus(vec![])
        );
    }

    #[test]
    fn gpu_label_wins_over_uuid_and_pod() {
        let labels = l(&[
            ("gpu", "1"),
            ("pod", "llm-7"),
            ("uuid", "GPU-00000003-aaaa-bbbb-cccc-dddddddddddd"),
        ]);
        assert_eq!(gpus_for_series(&labels, &gpus()), Join::Gpus(vec![1]));
    }

    #[test]
    fn pod_or_namespace_is_unknown_while_no_pod_is_known() {
        assert_eq!(
            gpus_for_series(&l(&[("pod", "llm-7")]), &gpus()),
            Join::Unknown
        );
        assert_eq!(
            gpus_for_series(&l(&[("namespace", "ml"), ("rank", "0")]), &gpus()),
            Join::Unknown
        );
    }

    #[test]
    fn a_pod_label_joins_the_gpus_that_pod_holds() {
        let mut g = gpus();
        g[1].pod = Some(("research".into(), "llm-7".into()));
        g[2].pod = Some(("research".into(), "llm-7".into()));
        g[3].pod = Some(("dev".into(), "llm-7".into()));
        assert_eq!(
            gpus_for_series(&l(&[("pod", "llm-7"), ("namespace", "research")]), &g),
            Join::Gpus(vec![1, 2])
        );
        assert_eq!(
            gpus_for_series(&l(&[("pod", "llm-7")]), &g),
            Join::Gpus(vec![1, 2, 3]),
            "without a namespace, every pod of that name"
        );
        assert_eq!(
            gpus_for_series(&l(&[("pod", "other"), ("namespace", "research")]), &g),
            Join::Gpus(vec![]),
            "a pod holding none of this host's GPUs joins none"
        );
        assert_eq!(
            gpus_for_series(&l(&[("namespace", "research")]), &g),
            Join::Unknown
        );
    }

    #[test]
    fn no_joining_label_means_every_gpu() {
        assert_eq!(
            gpus_for_series(&l(&[("job", "train"), ("rank", "0")]), &gpus()),
            Join::All
        );
        assert_eq!(gpus_for_series(&[], &[]), Join::All);
    }

    #[test]
    fn prefix_strip_is_char_boundary_safe() {
        assert_eq!(strip_gpu_prefix("é"), "é");
        assert_eq!(strip_gpu_prefix("GPU"), "GPU");
        assert_eq!(strip_gpu_prefix("gPu-x"), "x");
    }
}
