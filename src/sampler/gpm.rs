//! Tensor-pipe activity through GPM, NVML's GPU performance monitoring (Hopper and later):
//! NVML computes the metric between two samples of the GPU's counters, so the reader keeps
//! the previous tick's sample and asks for the activity over the interval since.
//!
//! Invariants: one `nvmlGpmSampleGet` per tick (the only driver call; the metric is computed in
//! the library); no value without two samples of this GPU in order (the first tick, the tick
//! after a failed sample, and the tick after an inventory refresh answer `None`); a GPU
//! whose support query says no, or whose sample or metric answers NOT_SUPPORTED, is not
//! sampled again until [`TensorReader::reprobe`]; a value outside 0..=100 % is not stored.

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use nvml_wrapper::{Device, Nvml};

use super::support::Support;

/// The support names under which GPM's reads are counted and skipped.
const SUPPORT: &str = "gpm_support";
const SAMPLE: &str = "gpm_sample";
const TENSOR: &str = "gpm_tensor_active";

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

    /// The percent of the time since the previous call that any tensor pipe was active.
    pub fn read(&mut self, nvml: &'n Nvml, dev: &Device<'n>, s: &mut Support) -> Option<f64> {
        if self.supported.is_none() {
            self.supported = s.read(SUPPORT, || dev.gpm_support());
        }
        if self.supported != Some(true) || s.is_unsupported(TENSOR) {
            return None;
        }
        let Some(now) = s.read(SAMPLE, || dev.gpm_sample()) else {
            self.prev = None;
            return None;
        };
        let prev = self.prev.replace(now)?;
        let now = self.prev.as_ref()?;
        let answers = s.read(TENSOR, || {
            gpm_metrics_get(nvml, &prev, now, &[GpmMetricId::AnyTensorUtil])
        })?;
        match answers.into_iter().next()? {
            Ok(r) if r.value.is_finite() && (0.0..=100.5).contains(&r.value) => {
                Some(r.value.min(100.0))
            }
            Ok(_) => None,
            Err(e) => {
                s.fail(TENSOR, &e);
                None
            }
        }
    }
}
