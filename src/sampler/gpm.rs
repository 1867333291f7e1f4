//! GPU activity through GPM, NVML's GPU performance monitoring (Hopper and later): tensor-pipe
//! activity, SM activity, SM occupancy and DRAM bandwidth use. NVML computes the metrics
//! between two samples of the GPU's counters, so the reader keeps the previous tick's sample
//! and asks for the activity over the interval since, all four in one call.
//!
//! Invariants: one `nvmlGpmSampleGet` per tick (the only driver call; the metrics are computed
//! in the library); no value without two samples of this GPU in order (the first tick, the
//! tick after a failed sample, and the tick after an inventory refresh answer nothing); a GPU
//! whose support query says no, or whose sample answers NOT_SUPPORTED, is not sampled again
//! until [`TensorReader::reprobe`]; a metric whose own entry answers an error is absent (the
//! others stay), and one that answers NOT_SUPPORTED is not asked again until the reprobe; a
//! value outside 0..=100 % is not stored.

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use nvml_wrapper::{Device, Nvml};

use super::support::Support;

/// The support names under which GPM's reads are counted and skipped.
const SUPPORT: &str = "gpm_support";
const SAMPLE: &str = "gpm_sample";
const METRICS: &str = "gpm_metrics";

/// The metrics asked, with the support names under which each one's NOT_SUPPORTED is kept.
const ASKED: [(GpmMetricId, &str); 4] = [
    (GpmMetricId::AnyTensorUtil, "gpm_tensor_active"),
    (GpmMetricId::SmUtil, "gpm_sm_active"),
    (GpmMetricId::SmOccupancy, "gpm_sm_occupancy"),
    (GpmMetricId::DramBwUtil, "gpm_dram_active"),
];

/// One interval's activity, % (each `None` where GPM did not give it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Activity {
    pub tensor_active: Option<f64>,
    pub sm_active: Option<f64>,
    pub sm_occupancy: Option<f64>,
    pub dram_active: Option<f64>,
}

/// One GPU's GPM state: whether it has GPM, and the last sample taken.
#[derive(Debug, Default)]
pub struct TensorReader<'n> {
    /// `None` until the support query answered.
    supported: Option<bool>,
    prev: Option<GpmSample<'n>>,
}

impl<'n> TensorReader<'n> {
    /// Asks for support again and forgets the previous sample (after an inventory refresh,
    /// which may follow a reset).
    pub fn reprobe(&mut self) {
        self.supported = None;
        self.prev = None;
    }

    /// The activity over the time since the previous call.
    pub fn read(&mut self, nvml: &'n Nvml, dev: &Device<'n>, s: &mut Support) -> Activity {
        let mut out = Activity::default();
        if self.supported.is_none() {
            self.supported = s.read(SUPPORT, || dev.gpm_support());
        }
        let ask: Vec<(usize, GpmMetricId)> = ASKED
            .iter()
            .enumerate()
            .filter(|(_, (_, name))| !s.is_unsupported(name))
            .map(|(i, (id, _))| (i, *id))
            .collect();
        if self.supported != Some(true) || ask.is_empty() || s.is_unsupported(METRICS) {
            return out;
        }
        let Some(now) = s.read(SAMPLE, || dev.gpm_sample()) else {
            self.prev = None;
            return out;
        };
        let Some(prev) = self.prev.replace(now) else {
            return out;
        };
        let Some(now) = self.prev.as_ref() else {
            return out;
        };
        let ids: Vec<GpmMetricId> = ask.iter().map(|(_, id)| *id).collect();
        let Some(answers) = s.read(METRICS, || gpm_metrics_get(nvml, &prev, now, &ids)) else {
            return out;
        };
        for ((i, _), answer) in ask.iter().zip(answers) {
            let v = match answer {
                Ok(r) if r.value.is_finite() && (0.0..=100.5).contains(&r.value) => {
                    Some(r.value.min(100.0))
                }
                Ok(_) => None,
                Err(e) => {
                    s.fail(ASKED[*i].1, &e);
                    None
                }
            };
            let slot = match i {
                0 => &mut out.tensor_active,
                1 => &mut out.sm_active,
                2 => &mut out.sm_occupancy,
                _ => &mut out.dram_active,
            };
            *slot = v;
        }
        out
    }
}
