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

/// The metrics asked: the id, the support name under which its NOT_SUPPORTED is kept, and its
/// place in [`Activity`].
type Asked = (
    GpmMetricId,
    &'static str,
    fn(&mut Activity) -> &mut Option<f64>,
);
const ASKED: [Asked; 4] = [
    (GpmMetricId::AnyTensorUtil, "gpm_tensor_active", |a| {
        &mut a.tensor_active
    }),
    (GpmMetricId::SmUtil, "gpm_sm_active", |a| &mut a.sm_active),
    (GpmMetricId::SmOccupancy, "gpm_sm_occupancy", |a| {
        &mut a.sm_occupancy
    }),
    (GpmMetricId::DramBwUtil, "gpm_dram_active", |a| {
        &mut a.dram_active
    }),
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
        self.read_with(nvml, || dev.gpm_support(), || dev.gpm_sample(), s)
    }

    /// The activity of MIG instance `gpu_instance_id` of `parent` (a GPU in MIG mode) over
    /// the time since the previous call: GPM samples the instance (`nvmlGpmMigSampleGet`).
    pub fn read_mig(
        &mut self,
        nvml: &'n Nvml,
        parent: &Device<'n>,
        gpu_instance_id: u32,
        s: &mut Support,
    ) -> Activity {
        self.read_with(
            nvml,
            || parent.gpm_support(),
            || parent.gpm_mig_sample(gpu_instance_id),
            s,
        )
    }

    fn read_with(
        &mut self,
        nvml: &'n Nvml,
        support: impl FnOnce() -> Result<bool, nvml_wrapper::error::NvmlError>,
        sample: impl FnOnce() -> Result<GpmSample<'n>, nvml_wrapper::error::NvmlError>,
        s: &mut Support,
    ) -> Activity {
        let mut out = Activity::default();
        if self.supported.is_none() {
            self.supported = s.read(SUPPORT, support);
        }
        // The metrics still supported, in a fixed array: no allocation on the sampling path.
        let mut ask = [ASKED[0]; 4];
        let mut n = 0;
        for a in ASKED.iter().filter(|a| !s.is_unsupported(a.1)) {
            ask[n] = *a;
            n += 1;
        }
        let ask = &ask[..n];
        if self.supported != Some(true) || ask.is_empty() || s.is_unsupported(METRICS) {
            return out;
        }
        let Some(now) = s.read(SAMPLE, sample) else {
            self.prev = None;
            return out;
        };
        let Some(prev) = self.prev.replace(now) else {
            return out;
        };
        let Some(now) = self.prev.as_ref() else {
            return out;
        };
        let mut ids = [GpmMetricId::AnyTensorUtil; 4];
        for (id, a) in ids.iter_mut().zip(ask) {
            *id = a.0;
        }
        let Some(answers) = s.read(METRICS, || gpm_metrics_get(nvml, &prev, now, &ids[..n])) else {
            return out;
        };
        for (&(_, name, slot), answer) in ask.iter().zip(answers) {
            *slot(&mut out) = match answer {
                Ok(r) if r.value.is_finite() && (0.0..=100.5).contains(&r.value) => {
                    Some(r.value.min(100.0))
                }
                Ok(_) => None,
                Err(e) => {
                    s.fail(name, &e);
                    None
                }
            };
        }
        out
    }
}
