//! Per-GPU bookkeeping of which NVML reads work: unsupported metrics are skipped, failing
//! ones are counted and logged once, and lost-GPU errors are surfaced.
//!
//! Invariants:
//! - A read that fails yields `None` (stored as NULL), never a made-up 0.
//! - NOT_SUPPORTED stops further calls for that metric until [`Support::reprobe`].
//! - Each (metric, error) is logged once per run, however often it repeats; its count
//!   grows and is reported through [`Support::take_changed_errors`].

use std::collections::HashMap;

use nvml_wrapper::error::NvmlError;

use crate::model::{MetricError, TsMs};

use super::nvml::{error_text, is_lost};

#[derive(Debug)]
pub struct Support {
    uuid: String,
    /// The metrics NVML answered NOT_SUPPORTED for: a handful at most, asked before every
    /// read of every tick, so a list compared by value (no hashing per read).
    unsupported: Vec<&'static str>,
    errors: HashMap<&'static str, MetricError>,
    changed: Vec<&'static str>,
    /// Set when a call says the GPU is gone.
    pub lost: Option<String>,
    now_ms: TsMs,
}

impl Support {
    pub fn new(uuid: &str) -> Self {
        Self {
            uuid: uuid.to_string(),
            unsupported: Vec::new(),
            errors: HashMap::new(),
            changed: Vec::new(),
            lost: None,
            now_ms: 0,
        }
    }

    /// Starts over under the GPU's real identity once its UUID is known (only `lost` is kept:
    /// what the reads under the index found is probed again under the UUID).
    pub fn rename(&mut self, uuid: &str) {
        let lost = self.lost.take();
        *self = Support::new(uuid);
        self.lost = lost;
    }

    /// Sets the timestamp used for error counters of the coming reads.
    pub fn begin(&mut self, now_ms: TsMs) {
        self.now_ms = now_ms;
    }

    /// Calls `f` unless `metric` is known to be unsupported or the GPU is lost.
    pub fn read<T>(
        &mut self,
        metric: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if self.lost.is_some() || self.is_unsupported(metric) {
            return None;
        }
        match f() {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(metric, &e);
                None
            }
        }
    }

    /// Records a failed read of `metric`.
    pub fn fail(&mut self, metric: &'static str, e: &NvmlError) {
        match e {
            NvmlError::NotSupported
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::FunctionNotFound => {
                tracing::debug!(gpu = %self.uuid, metric, "not supported; not read again until the next inventory refresh");
                if !self.is_unsupported(metric) {
                    self.unsupported.push(metric);
                }
            }
            e if is_lost(e) => {
                if self.lost.is_none() {
                    tracing::error!(gpu = %self.uuid, metric, error = %error_text(e), "GPU lost; sampling of this GPU stops");
                    self.lost = Some(error_text(e));
                }
            }
            e => {
                let text = error_text(e);
                let entry = self.errors.entry(metric).or_insert_with(|| {
                    tracing::warn!(gpu = %self.uuid, metric, error = %text, "NVML read failed; further failures of this read are counted, not logged");
                    MetricError {
                        gpu_uuid: self.uuid.clone(),
                        metric: metric.to_string(),
                        error: text.clone(),
                        count: 0,
                        first_ms: self.now_ms,
                        last_ms: self.now_ms,
                    }
                });
                entry.count += 1;
                entry.last_ms = self.now_ms;
                entry.error = text;
                if !self.changed.contains(&metric) {
                    self.changed.push(metric);
                }
            }
        }
    }

    /// Error counters that changed since the last call.
    pub fn take_changed_errors(&mut self) -> Vec<MetricError> {
        let changed = std::mem::take(&mut self.changed);
        changed
            .into_iter()
            .filter_map(|m| self.errors.get(m).cloned())
            .collect()
    }

    /// Forgets which metrics were unsupported, so they are tried again.
    pub fn reprobe(&mut self) {
        self.unsupported.clear();
    }

    pub fn is_unsupported(&self, metric: &str) -> bool {
        self.unsupported.contains(&metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_is_not_called_again() {
        let mut s = Support::new("GPU-x");
        let mut calls = 0;
        for _ in 0..3 {
            let v: Option<u32> = s.read("fan", || {
                calls += 1;
                Err(NvmlError::NotSupported)
            });
            assert_eq!(v, None);
        }
        assert_eq!(calls, 1);
        s.reprobe();
        assert_eq!(
            s.read("fan", || Ok(0u32)),
            Some(0),
            "a real zero stays zero"
        );
    }

    #[test]
    fn failures_are_counted() {
        let mut s = Support::new("GPU-x");
        s.begin(10);
        for _ in 0..4 {
            let _: Option<u32> = s.read("power", || Err(NvmlError::Unknown));
        }
        let changed = s.take_changed_errors();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].count, 4);
        assert!(s.take_changed_errors().is_empty());
    }

    #[test]
    fn lost_stops_everything() {
        let mut s = Support::new("GPU-x");
        let _: Option<u32> = s.read("temp", || Err(NvmlError::GpuLost));
        assert!(s.lost.is_some());
        assert_eq!(s.read("util", || Ok(5u32)), None);
    }
}
