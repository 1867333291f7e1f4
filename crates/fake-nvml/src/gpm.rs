//! GPM, NVML's GPU performance monitoring (Hopper and later): the profiling metrics that DCGM
//! serves as `DCGM_FI_PROF_*`, computed by NVML from two samples of a device's counters.
//!
//! - `nvmlGpmQueryDeviceSupport`: SUCCESS with `isSupportedDevice` 0 or 1 (as the driver
//!   answers on older boards), from the model's support of `nvmlGpmSampleGet`.
//! - `nvmlGpmSampleAlloc`/`nvmlGpmSampleFree`: opaque handles, checked against a registry, so a
//!   freed, foreign or null handle is INVALID_ARGUMENT instead of undefined behaviour.
//! - `nvmlGpmSampleGet`: a per-device call (faults, NOT_SUPPORTED, a lost GPU apply) that
//!   records the GPU and the tick in the sample.
//! - `nvmlGpmMetricsGet`: for `NVML_GPM_METRIC_SM_UTIL`, `SM_OCCUPANCY`, `ANY_TENSOR_UTIL`
//!   and `DRAM_BW_UTIL` the mean of the scenario's `sm_active`, `sm_occupancy`,
//!   `tensor_active` and `dram_active` over the ticks after the first sample up to the second
//!   (the value at the second sample's tick when both are of one tick); every other metric id
//!   answers NOT_SUPPORTED in its own entry, as a metric the driver does not offer.
//!
//! Invariants: the registry is the only state this module keeps; a sample is written only by
//! a successful `nvmlGpmSampleGet`; the two samples of a query must be of one GPU, filled, and
//! in time order, else INVALID_ARGUMENT; the mean reads at most [`MEAN_POINTS`] ticks, so a
//! query's cost does not grow with the interval.

use std::collections::HashMap;
use std::ffi::{c_char, c_uint, c_void};
use std::sync::{Mutex, MutexGuard};

use gpuwatch_sim::GpuState;
use gpuwatch_sim::nvml::{GPM_SAMPLE, code};

use crate::ffi_types::{
    GPM_METRIC_MAX, GPM_STRUCT_VERSION, GpmMetricsGet, GpmSupport, NvmlDevice, NvmlReturn,
};
use crate::{device_call, guard, out, state, versioned_in};

/// GPM's per-MIG-instance sample.
const GPM_MIG_SAMPLE: &str = "nvmlGpmMigSampleGet";

/// `NVML_GPM_METRIC_ANY_TENSOR_UTIL`.
pub const ANY_TENSOR_UTIL: u32 = 5;

/// The metrics answered: (id as in `nvml.h`, short name, long name, the state's value).
type Answer = (
    u32,
    &'static std::ffi::CStr,
    &'static std::ffi::CStr,
    fn(&GpuState) -> u32,
);
const ANSWERED: [Answer; 4] = [
    (2, c"SM_UTIL", c"Percent of the SMs' time with work", |s| {
        s.sm_active_pct
    }),
    (
        3,
        c"SM_OCCUPANCY",
        c"Percent of the warps the SMs could hold",
        |s| s.sm_occupancy_pct,
    ),
    (
        ANY_TENSOR_UTIL,
        c"ANY_TENSOR_UTIL",
        c"Percent of the time any tensor pipe was active",
        |s| s.tensor_active_pct,
    ),
    (
        10,
        c"DRAM_BW_UTIL",
        c"Percent of the DRAM bandwidth used",
        |s| s.dram_active_pct,
    ),
];

/// Ticks a mean reads at most (evenly spaced over a longer interval).
const MEAN_POINTS: u64 = 64;

/// What a filled sample holds: the GPU and the tick it was taken at.
#[derive(Debug, Clone, Copy)]
struct Taken {
    index: usize,
    tick: u64,
    /// The MIG instance (its place) of an `nvmlGpmMigSampleGet` sample.
    mig: Option<usize>,
}

/// Live samples by handle address; `None` until `nvmlGpmSampleGet` fills one.
static SAMPLES: Mutex<Option<HashMap<usize, Option<Taken>>>> = Mutex::new(None);

fn samples() -> MutexGuard<'static, Option<HashMap<usize, Option<Taken>>>> {
    SAMPLES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Samples allocated and not freed (`gpuwatchFakeGpmSamplesLive`), for leak tests.
pub fn live() -> u64 {
    samples().as_ref().map_or(0, |m| m.len() as u64)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: NvmlDevice,
    support: *mut GpmSupport,
) -> NvmlReturn {
    device_call(device, "nvmlGpmQueryDeviceSupport", |d| {
        // SAFETY: null or the caller's writable nvmlGpmSupport_t with `version` set.
        let given = match unsafe { versioned_in(support, GPM_STRUCT_VERSION) } {
            Ok(g) => g,
            Err(c) => return c,
        };
        let answer = GpmSupport {
            version: given.version,
            is_supported_device: u32::from(d.scenario.supports(d.index, GPM_SAMPLE)),
        };
        // SAFETY: as above.
        unsafe { out(support, answer) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut *mut c_void) -> NvmlReturn {
    guard(|| {
        if sample.is_null() {
            return code::INVALID_ARGUMENT;
        }
        if state::snapshot().is_none() {
            return code::UNINITIALIZED;
        }
        let handle = Box::into_raw(Box::new(0u64)).cast::<c_void>();
        samples()
            .get_or_insert_with(HashMap::new)
            .insert(handle as usize, None);
        // SAFETY: non-null, and the caller passes a writable nvmlGpmSample_t.
        unsafe { out(sample, handle) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: *mut c_void) -> NvmlReturn {
    guard(|| {
        let known = samples()
            .as_mut()
            .is_some_and(|m| m.remove(&(sample as usize)).is_some());
        if !known {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: the registry held it, so it came from `Box::into_raw` in
        // nvmlGpmSampleAlloc and has not been freed (removing it makes this the only free).
        drop(unsafe { Box::from_raw(sample.cast::<u64>()) });
        code::SUCCESS
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleGet(device: NvmlDevice, sample: *mut c_void) -> NvmlReturn {
    device_call(device, GPM_SAMPLE, |d| {
        match samples()
            .as_mut()
            .and_then(|m| m.get_mut(&(sample as usize)))
        {
            Some(slot) => {
                *slot = Some(Taken {
                    index: d.index,
                    tick: d.tick,
                    mig: None,
                });
                code::SUCCESS
            }
            None => code::INVALID_ARGUMENT,
        }
    })
}

/// A sample of one MIG instance (by its GPU instance id) of a GPU in MIG mode: its metrics
/// are the instance's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: NvmlDevice,
    gpu_instance_id: c_uint,
    sample: *mut c_void,
) -> NvmlReturn {
    device_call(device, GPM_MIG_SAMPLE, |d| {
        if d.mig.is_some() || !d.spec().mig_mode {
            return code::NOT_SUPPORTED;
        }
        let Some(m) = d
            .spec()
            .mig_instances
            .iter()
            .find(|m| m.gi_id == gpu_instance_id && m.alive_at(d.tick))
            .map(|m| m.index)
        else {
            return code::NOT_FOUND;
        };
        match samples()
            .as_mut()
            .and_then(|s| s.get_mut(&(sample as usize)))
        {
            Some(slot) => {
                *slot = Some(Taken {
                    index: d.index,
                    tick: d.tick,
                    mig: Some(m),
                });
                code::SUCCESS
            }
            None => code::INVALID_ARGUMENT,
        }
    })
}

fn taken(sample: *mut c_void) -> Option<Taken> {
    samples()
        .as_ref()
        .and_then(|m| m.get(&(sample as usize)).copied().flatten())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut GpmMetricsGet) -> NvmlReturn {
    guard(|| {
        if request.is_null() {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: non-null, and the caller passes a writable nvmlGpmMetricsGet_t.
        let req = unsafe { &mut *request };
        if req.version != GPM_STRUCT_VERSION {
            return code::ARGUMENT_VERSION_MISMATCH;
        }
        let n = req.num_metrics as usize;
        if n == 0 || n > GPM_METRIC_MAX {
            return code::INVALID_ARGUMENT;
        }
        let Some((scenario, _)) = state::snapshot() else {
            return code::UNINITIALIZED;
        };
        let (Some(a), Some(b)) = (taken(req.sample1), taken(req.sample2)) else {
            return code::INVALID_ARGUMENT;
        };
        if a.index != b.index || a.mig != b.mig || b.tick < a.tick {
            return code::INVALID_ARGUMENT;
        }
        for m in &mut req.metrics[..n] {
            m.value = 0.0;
            m.short_name = std::ptr::null();
            m.long_name = std::ptr::null();
            m.unit = std::ptr::null();
            match ANSWERED.iter().find(|a| a.0 == m.metric_id) {
                Some(&(_, short, long, of)) => {
                    m.value = match a.mig {
                        None => mean(a.tick, b.tick, |t| {
                            f64::from(of(&scenario.gpu_state(a.index, t)))
                        }),
                        Some(i) => mean(a.tick, b.tick, |t| {
                            f64::from(
                                scenario
                                    .mig_state(a.index, i, t)
                                    .map_or(0, |s| of_mig(m.metric_id, &s)),
                            )
                        }),
                    };
                    m.short_name = short.as_ptr().cast::<c_char>();
                    m.long_name = long.as_ptr();
                    m.unit = c"%".as_ptr();
                    m.nvml_return = code::SUCCESS;
                }
                None => m.nvml_return = code::NOT_SUPPORTED,
            }
        }
        code::SUCCESS
    })
}

/// A MIG instance's value of one of the [`ANSWERED`] metrics.
fn of_mig(id: u32, s: &gpuwatch_sim::mig::MigState) -> u32 {
    match id {
        2 => s.sm_active_pct,
        3 => s.sm_occupancy_pct,
        10 => s.dram_active_pct,
        _ => s.tensor_active_pct,
    }
}

/// The mean of `value` over the ticks `(from, to]` (`to` alone when they are equal), read at
/// no more than [`MEAN_POINTS`] evenly spaced ticks.
fn mean(from: u64, to: u64, value: impl Fn(u64) -> f64) -> f64 {
    let span = to - from;
    if span == 0 {
        return value(to);
    }
    let points = span.min(MEAN_POINTS);
    let sum: f64 = (1..=points)
        .map(|i| value(from + (span * i).div_ceil(points)))
        .sum();
    sum / points as f64
}

#[cfg(test)]
mod tests {
    use super::mean;

    #[test]
    fn the_mean_covers_the_interval_after_the_first_sample() {
        // Ticks 1..=4 of a ramp: (1 + 2 + 3 + 4) / 4.
        assert_eq!(mean(0, 4, |t| t as f64), 2.5);
        assert_eq!(mean(7, 7, |t| t as f64), 7.0);
        // A long interval reads 64 points, the last one at its end.
        let m = mean(0, 6400, |t| t as f64);
        assert!((m - 3250.0).abs() < 1.0, "{m}");
    }
}
