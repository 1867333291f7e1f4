//! `gpuwatch import prometheus`: GPU history from a Prometheus (or Thanos, Mimir,
//! VictoriaMetrics) that scraped dcgm-exporter, into the store, chunk by chunk.
//!
//! Invariants:
//! - Raw samples only: each chunk is one instant query of a range selector
//!   (`{__name__=~"DCGM_FI_(DEV|PROF)_.+"}[3600s]` at the chunk's end), which answers the samples
//!   as stored. `query_range` is never used: it resamples, and where there are no stale markers
//!   (backfilled blocks, VictoriaMetrics) fills a gap up to the lookback with samples that were
//!   never taken; a gap in the source stays a gap here.
//! - A metric a GPU's scrape did not carry is absent (NULL), never 0; the values of one scrape
//!   (one timestamp per GPU) make one sample; units are converted from dcgm-exporter's (MiB,
//!   W, ratios) to the store's.
//! - A GPU is its `UUID` on its `Hostname` (the host's name; `instance` without its port where
//!   `Hostname` is missing); a series without a UUID is counted, not imported.
//! - Each chunk is staged and published whole (one transaction), then the import's cursor
//!   (`import_cursors`) moves past it: an interrupted import resumes at the first chunk not
//!   published, and a re-run writes nothing new (rows are upserted by time and GPU).

use std::collections::BTreeMap;

use crate::model::{GpuInventory, GpuSample, SampleStatus, TsMs};
use crate::store::import::{ImportGpu, ImportPlan, MinuteRollups};
use crate::store::{Store, StoreError};
use crate::training::{FetchError, Matrix, PromClient};

/// How a dcgm-exporter value lands in a sample.
type Set = fn(&mut GpuSample, f64);

fn pct(v: f64) -> Option<u32> {
    (v.is_finite() && v >= 0.0).then(|| v.round().min(100.0) as u32)
}
fn int(v: f64) -> Option<u32> {
    (v.is_finite() && v >= 0.0).then(|| v.round().min(f64::from(u32::MAX)) as u32)
}
fn big(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0).then(|| v.round() as u64)
}
fn ratio(v: f64) -> Option<f64> {
    (v.is_finite() && (0.0..=1.005).contains(&v)).then(|| (v * 100.0).min(100.0))
}

/// dcgm-exporter's families gpuwatch stores, with their conversion (docs/IMPORT.md).
pub const MAPPED: &[(&str, Set)] = &[
    ("DCGM_FI_DEV_GPU_UTIL", |s, v| s.util_gpu_pct = pct(v)),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", |s, v| s.util_mem_pct = pct(v)),
    ("DCGM_FI_DEV_FB_USED", |s, v| {
        s.mem_used_bytes = big(v * 1_048_576.0)
    }),
    ("DCGM_FI_DEV_FB_FREE", |s, v| {
        s.mem_free_bytes = big(v * 1_048_576.0)
    }),
    ("DCGM_FI_DEV_GPU_TEMP", |s, v| s.temp_c = int(v)),
    ("DCGM_FI_DEV_POWER_USAGE", |s, v| {
        s.power_mw = int(v * 1000.0)
    }),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", |s, v| {
        s.energy_mj = big(v)
    }),
    ("DCGM_FI_DEV_SM_CLOCK", |s, v| s.clock_sm_mhz = int(v)),
    ("DCGM_FI_DEV_MEM_CLOCK", |s, v| s.clock_mem_mhz = int(v)),
    ("DCGM_FI_DEV_FAN_SPEED", |s, v| s.fan_pct = pct(v)),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", |s, v| s.pcie_gen = int(v)),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", |s, v| s.pcie_width = int(v)),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", |s, v| {
        s.ecc_corrected = big(v)
    }),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", |s, v| {
        s.ecc_uncorrected = big(v)
    }),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", |s, v| {
        s.remapped_rows_uncorrectable = int(v)
    }),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", |s, v| {
        s.remapped_rows_correctable = int(v)
    }),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", |s, v| {
        s.remap_pending = v.is_finite().then_some(v != 0.0)
    }),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", |s, v| {
        s.remap_failure = v.is_finite().then_some(v != 0.0)
    }),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", |s, v| {
        s.tensor_active_pct = ratio(v)
    }),
    ("DCGM_FI_PROF_SM_ACTIVE", |s, v| s.sm_active_pct = ratio(v)),
    ("DCGM_FI_PROF_SM_OCCUPANCY", |s, v| {
        s.sm_occupancy_pct = ratio(v)
    }),
    ("DCGM_FI_PROF_DRAM_ACTIVE", |s, v| {
        s.dram_active_pct = ratio(v)
    }),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", |s, v| {
        s.nvlink_crc_flit_errors = big(v)
    }),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", |s, v| {
        s.nvlink_crc_data_errors = big(v)
    }),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", |s, v| {
        s.nvlink_replay_errors = big(v)
    }),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", |s, v| {
        s.nvlink_recovery_errors = big(v)
    }),
];

#[derive(Debug, thiserror::Error)]
pub enum PromImportError {
    #[error("{0}")]
    Fetch(#[from] FetchError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Usage(String),
}

/// What one import did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub chunks: u32,
    /// Chunks skipped because an earlier run published them (the cursor).
    pub resumed_chunks: u32,
    pub samples: u64,
    pub gpus: usize,
    pub hosts: Vec<String>,
    /// Series without a UUID label (not imported).
    pub series_without_uuid: u64,
    /// dcgm-exporter families present in the source that gpuwatch does not store.
    pub unmapped: Vec<String>,
}

/// The query of one chunk: raw samples of every dcgm-exporter family (and the `selectors`)
/// over the `secs` seconds before its evaluation time.
pub fn chunk_query(selectors: &[String], secs: i64) -> String {
    let mut m = vec![r#"__name__=~"DCGM_FI_(DEV|PROF)_.+""#.to_string()];
    m.extend(selectors.iter().map(|s| s.trim().to_string()));
    format!("{{{}}}[{secs}s]", m.join(","))
}

type GpuKey = (String, String);

/// One chunk's samples by GPU, from a matrix of raw series.
#[derive(Debug, Default)]
pub struct Chunk {
    /// `(host, uuid)` → index and model (from the series' labels).
    pub gpus: BTreeMap<GpuKey, (Option<u32>, Option<String>)>,
    pub samples: BTreeMap<GpuKey, BTreeMap<TsMs, GpuSample>>,
    pub without_uuid: u64,
    pub unmapped: std::collections::BTreeSet<String>,
}

fn label<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl Chunk {
    /// Groups `m`'s series into per-GPU samples.
    pub fn from_matrix(m: &Matrix) -> Chunk {
        let mut c = Chunk::default();
        for s in &m.series {
            let Some(name) = s.metric_name.as_deref() else {
                continue;
            };
            let Some(set) = MAPPED.iter().find(|(n, _)| *n == name).map(|x| x.1) else {
                c.unmapped.insert(name.to_string());
                continue;
            };
            let uuid = label(&s.labels, "UUID").or_else(|| label(&s.labels, "uuid"));
            let host = label(&s.labels, "Hostname").or_else(|| {
                label(&s.labels, "instance").map(|i| i.rsplit_once(':').map_or(i, |(h, _)| h))
            });
            let (Some(uuid), Some(host)) = (uuid.filter(|u| !u.is_empty()), host) else {
                c.without_uuid += 1;
                continue;
            };
            let key = (host.to_string(), uuid.to_string());
            c.gpus.entry(key.clone()).or_insert_with(|| {
                (
                    label(&s.labels, "gpu").and_then(|g| g.parse().ok()),
                    label(&s.labels, "modelName").map(str::to_string),
                )
            });
            let per = c.samples.entry(key).or_default();
            for &(ts, v) in &s.points {
                let sample = per
                    .entry(ts)
                    .or_insert_with(|| GpuSample::empty(ts, uuid, SampleStatus::Ok));
                set(sample, v);
            }
        }
        c
    }
}

/// Imports `[from_ms, to_ms)` in chunks of `chunk_ms`; `source` names the import for its
/// cursor (URL and selectors); `progress` is told each chunk's end.
#[allow(clippy::too_many_arguments)]
pub fn import(
    store: &mut Store,
    client: &PromClient,
    source: &str,
    selectors: &[String],
    from_ms: TsMs,
    to_ms: TsMs,
    chunk_ms: i64,
    mut progress: impl FnMut(TsMs),
) -> Result<Summary, PromImportError> {
    if from_ms >= to_ms {
        return Err(PromImportError::Usage("--from must be before --to".into()));
    }
    // One worker thread: the next chunk's query runs while this one is staged and published
    // (the two cost about the same; memory holds at most two chunks).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| PromImportError::Usage(format!("cannot start the HTTP runtime: {e}")))?;
    let key = format!("{source} from {from_ms}");
    let done = store.import_cursor(&key)?;
    let mut s = Summary::default();
    let mut hosts = std::collections::BTreeSet::new();
    let mut gpus = std::collections::BTreeSet::new();
    let mut unmapped = std::collections::BTreeSet::new();
    let mut chunks = Vec::new();
    let mut start = from_ms;
    while start < to_ms {
        let end = (start + chunk_ms).min(to_ms);
        if done.is_some_and(|d| d >= end) {
            s.resumed_chunks += 1;
        } else {
            chunks.push((start, end));
        }
        start = end;
    }
    let fetch = |(start, end): (TsMs, TsMs)| {
        let client = client.clone();
        // Samples at `end` belong to the next chunk: the range ends a millisecond before.
        let q = chunk_query(selectors, ((end - start) / 1000).max(1));
        rt.spawn(async move { client.query_raw(&q, end - 1).await })
    };
    let mut next = chunks.first().map(|&c| fetch(c));
    for (i, &(start, end)) in chunks.iter().enumerate() {
        let Some(pending) = next.take() else { break };
        let m = rt
            .block_on(pending)
            .map_err(|e| PromImportError::Usage(format!("the query task failed: {e}")))??;
        next = chunks.get(i + 1).map(|&c| fetch(c));
        let c = Chunk::from_matrix(&m);
        drop(m);
        s.series_without_uuid += c.without_uuid;
        unmapped.extend(c.unmapped.iter().cloned());
        s.samples += publish_chunk(store, &c, start, end)?;
        for (h, u) in c.gpus.keys() {
            hosts.insert(h.clone());
            gpus.insert((h.clone(), u.clone()));
        }
        store.set_import_cursor(&key, end)?;
        s.chunks += 1;
        progress(end);
    }
    s.hosts = hosts.into_iter().collect();
    s.gpus = gpus.len();
    s.unmapped = unmapped.into_iter().collect();
    Ok(s)
}

/// Stages and publishes one chunk's samples in `[start, end)`, then rolls its minutes up.
fn publish_chunk(store: &mut Store, c: &Chunk, start: TsMs, end: TsMs) -> Result<u64, StoreError> {
    let mut plan = ImportPlan::default();
    let hosts: Vec<String> = c
        .gpus
        .keys()
        .map(|(h, _)| h.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let rows: Vec<(usize, &GpuKey)> = c.gpus.keys().enumerate().collect();
    for (_, key) in &rows {
        let (index, model) = &c.gpus[*key];
        let per = c.samples.get(*key);
        let times: Vec<TsMs> = per
            .map(|p| {
                p.keys()
                    .copied()
                    .filter(|t| (start..end).contains(t))
                    .collect()
            })
            .unwrap_or_default();
        plan.gpus.push(ImportGpu {
            host: hosts.iter().position(|h| *h == key.0).unwrap_or(0),
            inventory: GpuInventory {
                index: index.unwrap_or(0),
                uuid: key.1.clone(),
                name: model.clone(),
                ..GpuInventory::default()
            },
            index_known: index.is_some(),
            first_ms: times.first().copied().unwrap_or(start),
            last_ms: times.last().copied().unwrap_or(start),
            last_sample_ms: times.last().copied(),
        });
    }
    plan.hosts = hosts;
    plan.processes_observed = vec![false; plan.hosts.len()];
    if plan.gpus.is_empty() {
        return Ok(0);
    }
    let mut staging = store.stage_import()?;
    for (id, key) in &rows {
        for (ts, sample) in c.samples.get(*key).into_iter().flatten() {
            if (start..end).contains(ts) {
                staging.sample(*id, sample)?;
            }
        }
    }
    let published = staging.publish(&plan, &MinuteRollups::default())?;
    for (h, name) in plan.hosts.iter().enumerate() {
        if let Some((from, to)) = plan.host_span(h) {
            store.import_rollups(name, from, to, false)?;
        }
    }
    Ok(published.samples)
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
    }

    #[test]
    fn the_query_reads_raw_samples_of_every_family() {
        assert_eq!(
            chunk_query(&[r#"Hostname=~"node-.*""#.into()], 3600),
            r#"{__name__=~"DCGM_FI_(DEV|PROF)_.+",Hostname=~"node-.*"}[3600s]"#
        );
    }
}
