//! One chunk's raw series grouped by GPU: the samples (one per scrape), the GPUs' index and
//! model, and who held each GPU at each scrape (the `pod`, `namespace` and `container`
//! labels dcgm-exporter adds with its Kubernetes mapping, and gpuwatch's own `/metrics`
//! adds from the kubelet).
//!
//! Invariants: a series without a UUID is counted, never guessed into a GPU; a GPU whose
//! series come in both namings (a Prometheus scraping dcgm-exporter and gpuwatch) is read
//! from dcgm-exporter's only, so one scrape stays one sample; a scrape without pod labels
//! says the GPU had no holder then (dcgm-exporter labels only allocated GPUs).

use std::collections::{BTreeMap, BTreeSet};

use super::mapping::{self, Naming};
use crate::model::{GpuHolder, GpuSample, SampleStatus, TsMs};
use crate::training::Matrix;

/// A GPU: its host and UUID.
pub type GpuKey = (String, String);

/// The holder a scrape's labels name: `(namespace, pod, container)`.
pub type Holder = (String, String, String);

/// One chunk's samples by GPU, from a matrix of raw series.
#[derive(Debug, Default)]
pub struct Chunk {
    /// `(host, uuid)` → index and model (from the series' labels).
    pub gpus: BTreeMap<GpuKey, (Option<u32>, Option<String>)>,
    pub samples: BTreeMap<GpuKey, BTreeMap<TsMs, GpuSample>>,
    /// Who held the GPU at its scrapes that carried pod labels (a scrape without them: not
    /// allocated).
    pub holders: BTreeMap<GpuKey, BTreeMap<TsMs, Holder>>,
    pub without_uuid: u64,
    pub unmapped: BTreeSet<String>,
}

pub fn label<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The first of `keys` the labels carry, non-empty.
fn first<'a>(labels: &'a [(String, String)], keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| label(labels, k))
        .filter(|v| !v.is_empty())
}

/// The GPU a series is of: its host (`Hostname` / `host`, else `instance` without its port)
/// and UUID (`UUID` / `uuid`).
fn gpu_key(labels: &[(String, String)]) -> Option<GpuKey> {
    let uuid = first(labels, &["UUID", "uuid"])?;
    let host = first(labels, &["Hostname", "host"]).or_else(|| {
        first(labels, &["instance"]).map(|i| i.rsplit_once(':').map_or(i, |(h, _)| h))
    })?;
    Some((host.to_string(), uuid.to_string()))
}

/// The holder a series' labels name, if any.
fn holder(labels: &[(String, String)]) -> Option<Holder> {
    let pod = first(labels, &["pod", "exported_pod"])?;
    Some((
        first(labels, &["namespace", "exported_namespace"])
            .unwrap_or_default()
            .to_string(),
        pod.to_string(),
        first(labels, &["container", "exported_container"])
            .unwrap_or_default()
            .to_string(),
    ))
}

impl Chunk {
    /// Groups `m`'s series into per-GPU samples and holders.
    pub fn from_matrix(m: &Matrix) -> Chunk {
        let mut c = Chunk::default();
        // GPUs dcgm-exporter reports: gpuwatch's own series of them are not read.
        let dcgm: BTreeSet<GpuKey> = m
            .series
            .iter()
            .filter(|s| {
                s.metric_name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("DCGM_FI_"))
            })
            .filter_map(|s| gpu_key(&s.labels))
            .collect();
        for s in &m.series {
            let Some(name) = s.metric_name.as_deref() else {
                continue;
            };
            let Some((set, div, naming)) = mapping::lookup(name) else {
                c.unmapped.insert(name.to_string());
                continue;
            };
            let Some(key) = gpu_key(&s.labels) else {
                c.without_uuid += 1;
                continue;
            };
            if naming == Naming::Gpuwatch && dcgm.contains(&key) {
                continue;
            }
            c.gpus.entry(key.clone()).or_insert_with(|| {
                (
                    label(&s.labels, "gpu").and_then(|g| g.parse().ok()),
                    first(&s.labels, &["modelName", "model"]).map(str::to_string),
                )
            });
            let per = c.samples.entry(key.clone()).or_default();
            for &(ts, v) in &s.points {
                let sample = per
                    .entry(ts)
                    .or_insert_with(|| GpuSample::empty(ts, &key.1, SampleStatus::Ok));
                set(sample, v / div);
            }
            // Only labelled series cost a holder entry per point.
            if let Some(held) = holder(&s.labels) {
                let holders = c.holders.entry(key).or_default();
                for &(ts, _) in &s.points {
                    holders.entry(ts).or_insert_with(|| held.clone());
                }
            }
        }
        c
    }

    /// The GPU's holder intervals within `[start, end)`: each run of scrapes naming the same
    /// pod, from its first scrape to just after its last.
    pub fn holder_runs(
        &self,
        key: &GpuKey,
        start: TsMs,
        end: TsMs,
    ) -> Vec<(TsMs, TsMs, GpuHolder)> {
        let mut runs: Vec<(TsMs, TsMs, GpuHolder)> = Vec::new();
        let mut open: Option<(TsMs, TsMs, &Holder)> = None;
        let Some(held) = self.holders.get(key) else {
            return runs;
        };
        for &ts in self.samples.get(key).into_iter().flat_map(BTreeMap::keys) {
            if !(start..end).contains(&ts) {
                continue;
            }
            let h = held.get(&ts);
            match (open.take(), h) {
                (Some((from, _, o)), Some(h)) if o == h => open = Some((from, ts, o)),
                (prev, h) => {
                    if let Some((from, last, o)) = prev {
                        runs.push((from, last + 1, as_holder(o)));
                    }
                    open = h.map(|h| (ts, ts, h));
                }
            }
        }
        if let Some((from, last, o)) = open {
            runs.push((from, last + 1, as_holder(o)));
        }
        runs
    }

    /// Every pod this chunk saw holding a GPU, with the GPU's host: `(namespace, pod)` → host.
    pub fn pod_hosts(&self) -> BTreeMap<(String, String), String> {
        let mut out = BTreeMap::new();
        for (key, per) in &self.holders {
            for (ns, pod, _) in per.values() {
                out.entry((ns.clone(), pod.clone()))
                    .or_insert_with(|| key.0.clone());
            }
        }
        out
    }
}

fn as_holder((ns, pod, container): &Holder) -> GpuHolder {
    GpuHolder {
        pod: pod.clone(),
        namespace: ns.clone(),
        container: container.clone(),
        resource: "nvidia.com/gpu".into(),
        job: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::training::Series;

    fn series(name: &str, labels: &[(&str, &str)], points: &[(TsMs, f64)]) -> Series {
        Series {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            metric_name: Some(name.into()),
            points: points.to_vec(),
        }
    }

    #[test]
    fn one_scrape_is_one_sample_and_absent_stays_absent() {
        let l = [
            ("Hostname", "n1"),
            ("UUID", "GPU-a"),
            ("gpu", "3"),
            ("modelName", "NVIDIA H100 80GB HBM3"),
        ];
        let m = Matrix {
            series: vec![
                series("DCGM_FI_DEV_GPU_UTIL", &l, &[(1000, 97.0), (16000, 0.0)]),
                series("DCGM_FI_DEV_FB_USED", &l, &[(1000, 40960.0)]),
                series("DCGM_FI_PROF_SM_ACTIVE", &l, &[(1000, 0.5)]),
                series("DCGM_FI_DEV_VGPU_LICENSE_STATUS", &l, &[(1000, 1.0)]),
                series(
                    "DCGM_FI_DEV_GPU_TEMP",
                    &[("Hostname", "n1")],
                    &[(1000, 50.0)],
                ),
            ],
            ..Matrix::default()
        };
        let c = Chunk::from_matrix(&m);
        let key = ("n1".to_string(), "GPU-a".to_string());
        assert_eq!(
            c.gpus[&key],
            (Some(3), Some("NVIDIA H100 80GB HBM3".into()))
        );
        let s = &c.samples[&key];
        assert_eq!(s.len(), 2);
        assert_eq!(s[&1000].util_gpu_pct, Some(97));
        assert_eq!(s[&1000].mem_used_bytes, Some(40960 << 20));
        assert_eq!(s[&1000].sm_active_pct, Some(50.0));
        assert_eq!(s[&16000].util_gpu_pct, Some(0), "a real zero");
        assert_eq!(
            s[&16000].mem_used_bytes, None,
            "not scraped then: unknown, not 0"
        );
        assert_eq!(c.without_uuid, 1);
        assert!(c.unmapped.contains("DCGM_FI_DEV_VGPU_LICENSE_STATUS"));
        assert!(c.holder_runs(&key, 0, 20_000).is_empty(), "no pod label");
    }

    #[test]
    fn pods_become_holder_runs_and_gpuwatch_names_read_like_dcgm() {
        let a = [("Hostname", "n1"), ("UUID", "GPU-a"), ("gpu", "0")];
        let held = [
            ("Hostname", "n1"),
            ("UUID", "GPU-a"),
            ("gpu", "0"),
            ("pod", "train-0"),
            ("namespace", "ml"),
            ("container", "main"),
        ];
        let other = [
            ("Hostname", "n1"),
            ("UUID", "GPU-a"),
            ("gpu", "0"),
            ("pod", "eval-0"),
            ("namespace", "ml"),
        ];
        let ours = [
            ("host", "n2"),
            ("uuid", "GPU-b"),
            ("gpu", "1"),
            ("model", "NVIDIA A100-SXM4-80GB"),
        ];
        let m = Matrix {
            series: vec![
                series("DCGM_FI_DEV_GPU_UTIL", &a, &[(0, 0.0)]),
                series("DCGM_FI_DEV_GPU_UTIL", &held, &[(15, 90.0), (30, 91.0)]),
                series("DCGM_FI_DEV_GPU_UTIL", &a, &[(45, 0.0)]),
                series("DCGM_FI_DEV_GPU_UTIL", &other, &[(60, 50.0), (75, 50.0)]),
                series("gpuwatch_gpu_utilization_ratio", &ours, &[(0, 0.42)]),
                series(
                    "gpuwatch_gpu_memory_used_bytes",
                    &ours,
                    &[(0, 2.0 * 1_048_576.0)],
                ),
                // The same GPU also in gpuwatch's naming on n1: dcgm-exporter's wins.
                series(
                    "gpuwatch_gpu_utilization_ratio",
                    &[("host", "n1"), ("uuid", "GPU-a")],
                    &[(7, 1.0)],
                ),
            ],
            ..Matrix::default()
        };
        let c = Chunk::from_matrix(&m);
        let k = ("n1".to_string(), "GPU-a".to_string());
        assert_eq!(
            c.samples[&k].len(),
            6,
            "the gpuwatch-named scrape of a dcgm GPU is not read"
        );
        let runs: Vec<(TsMs, TsMs, String, String)> = c
            .holder_runs(&k, 0, 1000)
            .into_iter()
            .map(|(a, b, h)| (a, b, h.pod, h.container))
            .collect();
        assert_eq!(
            runs,
            [
                (15, 31, "train-0".to_string(), "main".to_string()),
                (60, 76, "eval-0".to_string(), String::new()),
            ]
        );
        assert_eq!(c.holder_runs(&k, 20, 70).len(), 2, "clipped to the chunk");
        let b = ("n2".to_string(), "GPU-b".to_string());
        assert_eq!(c.samples[&b][&0].util_gpu_pct, Some(42));
        assert_eq!(c.samples[&b][&0].mem_used_bytes, Some(2 << 20));
        assert_eq!(c.gpus[&b], (Some(1), Some("NVIDIA A100-SXM4-80GB".into())));
        assert_eq!(c.pod_hosts().len(), 2);
    }
}
