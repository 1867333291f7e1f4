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
//! Which one series of a role (step, loss) a GPU's rules read — [`choose`], used by the rule
//! evaluator and explained by `status`: among the series that name the GPU, the best basis
//! (gpu, then uuid, then pod label) and within it the newest series (a restarted job's old
//! series has stopped); else the host's one unlabelled series; several unlabelled series and
//! none naming the GPU are ambiguous (none is read: a hang of one job must not be blamed on
//! another's GPU).
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

/// Which of the join rules decides a series' GPUs (the first whose label it has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Basis {
    Gpu,
    Uuid,
    Pod,
    Namespace,
    Unlabelled,
}

impl Basis {
    pub fn of(labels: &[(String, String)]) -> Basis {
        let has = |name: &str| labels.iter().any(|(k, _)| k == name);
        if has("gpu") {
            Basis::Gpu
        } else if has("uuid") || has("UUID") {
            Basis::Uuid
        } else if has("pod") {
            Basis::Pod
        } else if has("namespace") {
            Basis::Namespace
        } else {
            Basis::Unlabelled
        }
    }

    /// The JSON name (`status`'s `by`).
    pub fn name(self) -> &'static str {
        match self {
            Basis::Gpu => "gpu",
            Basis::Uuid => "uuid",
            Basis::Pod => "pod",
            Basis::Namespace => "namespace",
            Basis::Unlabelled => "unlabelled",
        }
    }
}

fn label<'a>(labels: &'a [(String, String)], name: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.trim())
}

/// Applies the join rules (see the module doc) to one series' labels.
pub fn gpus_for_series(labels: &[(String, String)], gpus: &[GpuRef]) -> Join {
    let label = |name: &str| label(labels, name);
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

/// The two training roles a series can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Step,
    Loss,
}

impl Role {
    /// `training_step` / `training_step_total` are steps; every other stored series is a loss.
    pub fn of(name: &str) -> Role {
        match name {
            "training_step" | "training_step_total" => Role::Step,
            _ => Role::Loss,
        }
    }
}

/// A training series of the host, as [`choose`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct SeriesRef<'a> {
    pub id: i64,
    pub name: &'a str,
    pub labels: &'a [(String, String)],
}

impl SeriesRef<'_> {
    /// `name{k="v",...}`, as in PromQL.
    pub fn display(&self) -> String {
        let l: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        format!("{}{{{}}}", self.name, l.join(","))
    }
}

/// For one GPU and one role: the series its rules read, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// This series, joined by `basis` (`Unlabelled`: the host's only unlabelled series);
    /// `passed_over` other series named the GPU too, on a weaker basis or older.
    Joined {
        series: i64,
        basis: Basis,
        passed_over: usize,
    },
    /// Several unlabelled series and none naming the GPU: which is this GPU's is unknown.
    Ambiguous { series: Vec<i64> },
    /// Only series whose `pod`/`namespace` labels cannot be placed yet (no GPU's pod known).
    Waiting { series: Vec<i64> },
    /// No series of this role applies to the GPU.
    Nothing,
}

impl Choice {
    pub fn series(&self) -> Option<i64> {
        match self {
            Choice::Joined { series, .. } => Some(*series),
            _ => None,
        }
    }

    /// One line saying why, for people (`status`).
    pub fn why(&self, gpu: &GpuRef, all: &[SeriesRef]) -> String {
        let shown = |id: &i64| {
            all.iter()
                .find(|s| s.id == *id)
                .map_or_else(|| format!("series {id}"), SeriesRef::display)
        };
        match self {
            Choice::Joined {
                series,
                basis,
                passed_over,
            } => {
                let labels = all.iter().find(|s| s.id == *series).map(|s| s.labels);
                let l = |name| labels.and_then(|l| label(l, name)).unwrap_or("?");
                let mut why = match basis {
                    Basis::Gpu => format!("its gpu label {:?} is this GPU's index", l("gpu")),
                    Basis::Uuid => "its uuid label is this GPU's UUID".to_string(),
                    Basis::Pod => match &gpu.pod {
                        Some((ns, pod)) => {
                            format!("its pod label names pod {ns}/{pod}, which holds this GPU")
                        }
                        None => "its pod label names the pod holding this GPU".to_string(),
                    },
                    Basis::Namespace | Basis::Unlabelled => {
                        "it is the host's only series without gpu, uuid or pod labels".to_string()
                    }
                };
                if *passed_over > 0 {
                    why.push_str(&format!(
                        " ({passed_over} other series also apply; this one is the most specific and newest)"
                    ));
                }
                why
            }
            Choice::Ambiguous { series } => {
                let names: Vec<String> = series.iter().take(3).map(shown).collect();
                format!(
                    "ambiguous: {} series without gpu, uuid or pod labels ({}{}) and none names this GPU; give each job's series a gpu, uuid or pod label",
                    series.len(),
                    names.join(", "),
                    if series.len() > 3 { ", ..." } else { "" }
                )
            }
            Choice::Waiting { series } => format!(
                "not yet: {} carries pod/namespace labels and no GPU's pod is known yet (the kubelet or the processes' cgroups tell it)",
                series.first().map(shown).unwrap_or_default()
            ),
            Choice::Nothing => "no series applies to this GPU".to_string(),
        }
    }
}

/// What one GPU's rules read: the step and the loss series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuChoice {
    pub index: u32,
    pub step: Choice,
    pub loss: Choice,
}

/// Chooses, for each GPU of one host (in the order given), the step and loss series its rules
/// read (see the module doc). `series` are the host's series.
pub fn choose(series: &[SeriesRef], gpus: &[GpuRef]) -> Vec<GpuChoice> {
    let joins: Vec<(Role, Basis, Join)> = series
        .iter()
        .map(|s| {
            (
                Role::of(s.name),
                Basis::of(s.labels),
                gpus_for_series(s.labels, gpus),
            )
        })
        .collect();
    let pick = |index: u32, role: Role| {
        let mut named: Vec<(Basis, i64)> = Vec::new();
        let (mut all, mut waiting) = (Vec::new(), Vec::new());
        for (s, (r, basis, join)) in series.iter().zip(&joins) {
            if *r != role {
                continue;
            }
            match join {
                Join::Gpus(ix) if ix.contains(&index) => named.push((*basis, s.id)),
                Join::Gpus(_) => {}
                Join::All => all.push(s.id),
                Join::Unknown => waiting.push(s.id),
            }
        }
        // The best basis first, and within it the newest series (highest id).
        if let Some(&(basis, id)) = named
            .iter()
            .min_by_key(|(b, id)| (*b, std::cmp::Reverse(*id)))
        {
            return Choice::Joined {
                series: id,
                basis,
                passed_over: named.len() - 1 + all.len(),
            };
        }
        match (all.as_slice(), waiting.is_empty()) {
            ([one], _) => Choice::Joined {
                series: *one,
                basis: Basis::Unlabelled,
                passed_over: 0,
            },
            ([], true) => Choice::Nothing,
            ([], false) => Choice::Waiting { series: waiting },
            _ => Choice::Ambiguous { series: all },
        }
    };
    gpus.iter()
        .map(|g| GpuChoice {
            index: g.index,
            step: pick(g.index, Role::Step),
            loss: pick(g.index, Role::Loss),
        })
        .collect()
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

    type Row<'a> = (i64, &'a str, Vec<(String, String)>);

    fn series<'a>(rows: &'a [Row<'a>]) -> Vec<SeriesRef<'a>> {
        rows.iter()
            .map(|(id, name, labels)| SeriesRef {
                id: *id,
                name,
                labels,
            })
            .collect()
    }

    #[test]
    fn the_chooser_prefers_a_naming_series_then_the_only_unlabelled_one() {
        let mut g = gpus();
        g[2].pod = Some(("research".into(), "llm-7".into()));
        let rows = vec![
            (1, "training_step", l(&[("job", "a")])),
            (2, "training_step", l(&[("gpu", "1")])),
            (
                3,
                "training_step",
                l(&[("pod", "llm-7"), ("namespace", "research")]),
            ),
            (4, "training_loss", l(&[("job", "a")])),
            (5, "training_loss", l(&[("job", "b")])),
            (6, "training_step", l(&[("gpu", "1"), ("run", "2")])),
        ];
        let c = choose(&series(&rows), &g);
        assert_eq!(c.len(), 4);
        let unlabelled = Choice::Joined {
            series: 1,
            basis: Basis::Unlabelled,
            passed_over: 0,
        };
        assert_eq!(c[0].step, unlabelled);
        assert_eq!(
            c[1].step,
            Choice::Joined {
                series: 6,
                basis: Basis::Gpu,
                passed_over: 2
            },
            "the newest of the series naming GPU 1"
        );
        assert_eq!(
            c[2].step,
            Choice::Joined {
                series: 3,
                basis: Basis::Pod,
                passed_over: 1
            }
        );
        assert_eq!(c[3].step, unlabelled);
        assert_eq!(c[0].loss, Choice::Ambiguous { series: vec![4, 5] });
        let why = c[2].step.why(&g[2], &series(&rows));
        assert!(why.contains("pod research/llm-7"), "{why}");
        let why = c[0].loss.why(&g[0], &series(&rows));
        assert!(
            why.starts_with("ambiguous: 2 series") && why.contains("training_loss{job=\"b\"}"),
            "{why}"
        );
    }

    #[test]
    fn pod_series_wait_for_a_pod_and_nothing_is_nothing() {
        let rows = vec![(1, "training_step", l(&[("pod", "llm-7")]))];
        let c = choose(&series(&rows), &gpus());
        assert_eq!(c[0].step, Choice::Waiting { series: vec![1] });
        assert_eq!(c[0].loss, Choice::Nothing);
        assert!(
            c[0].step
                .why(&gpus()[0], &series(&rows))
                .starts_with("not yet")
        );
        assert_eq!(Role::of("training_step_total"), Role::Step);
        assert_eq!(Basis::of(&l(&[("UUID", "x"), ("pod", "p")])), Basis::Uuid);
    }

    #[test]
    fn prefix_strip_is_char_boundary_safe() {
        assert_eq!(strip_gpu_prefix("é"), "é");
        assert_eq!(strip_gpu_prefix("GPU"), "GPU");
        assert_eq!(strip_gpu_prefix("gPu-x"), "x");
    }
}
