//! `gpuwatch import prometheus`: GPU history from a Prometheus (or Thanos, Mimir,
//! VictoriaMetrics) that scraped dcgm-exporter, into the store, chunk by chunk.
//!
//! Invariants:
//! - Raw samples only: each chunk is one instant query of a range selector
//!   (`{__name__=~"DCGM_FI_(DEV|PROF)_.+|gpuwatch_gpu_.+"}[3600s]` at the chunk's end), which answers the samples
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

pub mod chunk;
pub mod mapping;
pub mod training;

use std::collections::BTreeSet;

use crate::model::{GpuInventory, TsMs};
use crate::store::import::{ImportGpu, ImportHolder, ImportPlan, MinuteRollups};
use crate::store::{Store, StoreError};
use crate::training::{FetchError, Matrix, PromClient};
use chunk::{Chunk, GpuKey};

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
    /// Holder intervals (pods) added.
    pub holders: u64,
    /// Training step and loss points imported.
    pub training_points: u64,
    /// Training series no host could be found for (not imported).
    pub training_unplaced: u64,
}

/// The training series to read: each role (`training_step`, `training_loss`) with the
/// selectors of its query ([`training::selectors`]).
pub type TrainingQueries = Vec<(&'static str, Vec<String>)>;

/// The query of one chunk: raw samples of every dcgm-exporter family (and the `selectors`)
/// over the `secs` seconds before its evaluation time.
pub fn chunk_query(selectors: &[String], secs: i64) -> String {
    let mut m = vec![r#"__name__=~"DCGM_FI_(DEV|PROF)_.+|gpuwatch_gpu_.+""#.to_string()];
    m.extend(selectors.iter().map(|s| s.trim().to_string()));
    format!("{{{}}}[{secs}s]", m.join(","))
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
    training: &TrainingQueries,
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
    let mut hosts = BTreeSet::new();
    let mut gpus = BTreeSet::new();
    let mut unmapped = BTreeSet::new();
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
        let secs = ((end - start) / 1000).max(1);
        let q = chunk_query(selectors, secs);
        let roles: Vec<(&'static str, Vec<String>)> = training
            .iter()
            .map(|(role, sels)| {
                let qs = sels.iter().map(|x| format!("{x}[{secs}s]")).collect();
                (*role, qs)
            })
            .collect();
        rt.spawn(async move {
            // The step and loss queries run beside the GPU query, not after it.
            let mut tasks = Vec::new();
            for (role, qs) in roles {
                for q in qs {
                    let client = client.clone();
                    tasks.push((
                        role,
                        tokio::spawn(async move { client.query_raw(&q, end - 1).await }),
                    ));
                }
            }
            let gpus = client.query_raw(&q, end - 1).await?;
            let mut series: Vec<(&'static str, Vec<Matrix>)> = Vec::new();
            for (role, task) in tasks {
                let m = task
                    .await
                    .map_err(|e| FetchError::Setup(format!("a query task failed: {e}")))??;
                match series.iter_mut().find(|(r, _)| *r == role) {
                    Some((_, ms)) => ms.push(m),
                    None => series.push((role, vec![m])),
                }
            }
            Ok::<_, FetchError>((gpus, series))
        })
    };
    let mut next = chunks.first().map(|&c| fetch(c));
    for (i, &(start, end)) in chunks.iter().enumerate() {
        let Some(pending) = next.take() else { break };
        let (m, roles) = rt
            .block_on(pending)
            .map_err(|e| PromImportError::Usage(format!("the query task failed: {e}")))??;
        next = chunks.get(i + 1).map(|&c| fetch(c));
        let c = Chunk::from_matrix(&m);
        drop(m);
        s.series_without_uuid += c.without_uuid;
        unmapped.extend(c.unmapped.iter().cloned());
        let p = publish_chunk(store, &c, &roles, start, end)?;
        s.samples += p.samples;
        s.holders += p.holders;
        s.training_points += p.training_points;
        s.training_unplaced = s.training_unplaced.max(p.training_unplaced);
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

/// What one chunk's publish wrote.
#[derive(Debug, Default)]
struct ChunkPublished {
    samples: u64,
    holders: u64,
    training_points: u64,
    training_unplaced: u64,
}

/// Stages and publishes one chunk in `[start, end)` — its samples, holders and training
/// points in one transaction — then rolls its minutes up.
fn publish_chunk(
    store: &mut Store,
    c: &Chunk,
    roles: &[(&'static str, Vec<Matrix>)],
    start: TsMs,
    end: TsMs,
) -> Result<ChunkPublished, StoreError> {
    let mut plan = ImportPlan::default();
    let hosts: Vec<String> = c
        .gpus
        .keys()
        .map(|(h, _)| h.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let rows: Vec<(usize, &GpuKey)> = c.gpus.keys().enumerate().collect();
    for &(id, key) in &rows {
        let (index, model) = &c.gpus[key];
        let per = c.samples.get(key);
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
        plan.holders
            .extend(
                c.holder_runs(key, start, end)
                    .into_iter()
                    .map(|(from_ms, to_ms, holder)| ImportHolder {
                        gpu: id,
                        from_ms,
                        to_ms,
                        holder,
                    }),
            );
    }
    let pods = c.pod_hosts();
    let mut out = ChunkPublished::default();
    for (role, matrices) in roles {
        let (points, unplaced) = training::points(role, matrices, &hosts, &pods, (start, end));
        plan.training.extend(points);
        out.training_unplaced += unplaced;
    }
    plan.hosts = hosts;
    plan.processes_observed = vec![false; plan.hosts.len()];
    if plan.gpus.is_empty() {
        return Ok(out);
    }
    let mut staging = store.stage_import()?;
    for &(id, key) in &rows {
        for (ts, sample) in c.samples.get(key).into_iter().flatten() {
            if (start..end).contains(ts) {
                staging.sample(id, sample)?;
            }
        }
    }
    let published = staging.publish(&plan, &MinuteRollups::default())?;
    for (h, name) in plan.hosts.iter().enumerate() {
        if let Some((from, to)) = plan.host_span(h) {
            store.import_rollups(name, from, to, false)?;
        }
    }
    out.samples = published.samples;
    out.holders = published.holders;
    out.training_points = published.training_points;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_reads_raw_samples_of_every_family() {
        assert_eq!(
            chunk_query(&[r#"Hostname=~"node-.*""#.into()], 3600),
            r#"{__name__=~"DCGM_FI_(DEV|PROF)_.+|gpuwatch_gpu_.+",Hostname=~"node-.*"}[3600s]"#
        );
    }
}
