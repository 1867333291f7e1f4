//! What experiment trackers (W&B, MLflow) log about GPUs, gathered into per-GPU samples and
//! training points: the one shape both importers parse into and `import wandb` / `import
//! mlflow` publish.
//!
//! Invariants: a value not logged is unknown (the sample's field stays `None`); memory
//! logged as a percentage only gives the total beside the bytes of the same time, never the
//! bytes; GPUs are known by index.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{GpuSample, SampleStatus, TrainingPoint, TsMs};

/// What a tracker's file or run holds, parsed.
#[derive(Debug, Default)]
pub struct Parsed {
    /// GPU index → time → sample.
    pub samples: BTreeMap<u32, BTreeMap<TsMs, GpuSample>>,
    /// GPU index → its memory total, where the bytes and the percentage both say it.
    pub mem_total: BTreeMap<u32, u64>,
    pub training: Vec<TrainingPoint>,
    /// Rows (W&B) or points (MLflow) read.
    pub rows: u64,
    pub rows_without_time: u64,
    /// Keys gpuwatch does not store, once each.
    pub unstored: BTreeSet<String>,
    /// GPUs whose memory was given only as a percentage.
    pub percent_only_memory: BTreeSet<u32>,
    /// Memory used as a percentage of the total, by GPU and time (folded by [`Parsed::finish`]).
    percent: BTreeMap<(u32, TsMs), f64>,
}

impl Parsed {
    /// GPU `gpu`'s sample at `ts`, created empty (every field unknown).
    pub fn sample(&mut self, gpu: u32, ts: TsMs) -> &mut GpuSample {
        self.samples
            .entry(gpu)
            .or_default()
            .entry(ts)
            .or_insert_with(|| GpuSample::empty(ts, "", SampleStatus::Ok))
    }

    /// GPU `gpu`'s memory used at `ts` as a percentage of its total.
    pub fn memory_percent(&mut self, gpu: u32, ts: TsMs, pct: f64) {
        self.percent.insert((gpu, ts), pct);
    }

    /// A training point of `name` (`training_step`, `training_loss`).
    pub fn training(&mut self, name: &str, ts_ms: TsMs, value: f64) {
        if value.is_finite() {
            self.training.push(TrainingPoint {
                ts_ms,
                name: name.to_string(),
                labels: Vec::new(),
                value,
            });
        }
    }

    /// Folds the memory percentages into totals, and sorts the training points.
    pub fn finish(mut self) -> Self {
        for ((i, ts), pct) in std::mem::take(&mut self.percent) {
            let used = self
                .samples
                .get(&i)
                .and_then(|m| m.get(&ts))
                .and_then(|s| s.mem_used_bytes);
            match used {
                Some(b) if pct > 0.5 => {
                    self.mem_total
                        .entry(i)
                        .or_insert(((b as f64) * 100.0 / pct).round() as u64);
                }
                Some(_) => {}
                None => {
                    self.percent_only_memory.insert(i);
                }
            }
        }
        self.training.sort_by_key(|t| (t.name.clone(), t.ts_ms));
        self
    }

    /// Samples parsed.
    pub fn sample_count(&self) -> usize {
        self.samples.values().map(BTreeMap::len).sum()
    }
}

/// `v` if it is a non-negative finite number.
pub fn nonneg(v: f64) -> Option<f64> {
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// A percentage (0–100, rounded).
pub fn pct(v: f64) -> Option<u32> {
    nonneg(v).map(|v| v.round().min(100.0) as u32)
}
