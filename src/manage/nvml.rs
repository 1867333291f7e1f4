//! Every NVML call of GPU management: which GPUs there are, what each is set to and accepts
//! (power-limit constraints, supported clocks), and the writes.
//!
//! Invariants:
//! - Each call runs on its own `gpuwatch-gpu-set` thread and the caller waits at most the
//!   deadline: a GPU whose driver calls hang (fallen off the bus) costs a "did not answer"
//!   instead of a hung command. A thread that never returns keeps its `Arc<Nvml>` (and the
//!   library) alive until the process exits; it is never joined.
//! - The supported-clock lists are read with NVML's count protocol here, not through
//!   nvml-wrapper, which asks for 128 graphics clocks and, when a board lists more (boards
//!   that clock in 15 MHz steps from ~200 MHz to over 2 GHz do; so does the simulated RTX
//!   4090), takes the driver's INSUFFICIENT_SIZE for success and returns its unfilled buffer.
//! - Errors are NVML's, judged by the one table (`sampler::diagnosis`).

use std::ffi::c_uint;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use nvml_wrapper::enum_wrappers::device::ComputeMode as NvmlComputeMode;
use nvml_wrapper::enums::device::GpuLockedClocksSetting;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::{Device, Nvml};

use crate::sampler::diagnosis::{Diagnosis, diagnose};
use crate::setting::{Change, ComputeMode};

/// An NVML answer: the value, or what its error means.
pub type Answer<T> = Result<T, Diagnosis>;

/// An NVML call that gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    #[error("NVML did not answer within {0:?} (the GPU or its driver may be hung)")]
    Hung(Duration),
    #[error("cannot start a thread for the NVML call: {0}")]
    Thread(String),
}

/// Return code NVML_ERROR_INSUFFICIENT_SIZE.
const INSUFFICIENT_SIZE: u32 = 7;

/// Runs `f` with NVML on its own thread, waiting at most `deadline` for its answer.
pub fn call<T: Send + 'static>(
    nvml: &Arc<Nvml>,
    deadline: Duration,
    f: impl FnOnce(&Nvml) -> T + Send + 'static,
) -> Result<T, Unanswered> {
    let (tx, rx) = mpsc::channel();
    let nvml = Arc::clone(nvml);
    let spawned = std::thread::Builder::new()
        .name("gpuwatch-gpu-set".into())
        .spawn(move || {
            let _ = tx.send(f(&nvml));
        });
    if let Err(e) = spawned {
        return Err(Unanswered::Thread(e.to_string()));
    }
    rx.recv_timeout(deadline)
        .map_err(|_| Unanswered::Hung(deadline))
}

/// Who a GPU is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuId {
    pub index: u32,
    pub uuid: String,
    pub name: Option<String>,
}

/// Every GPU's identity, by index (`Err` for a GPU whose handle or UUID cannot be read).
pub fn gpus(nvml: &Nvml) -> Answer<Vec<Answer<GpuId>>> {
    let count = nvml.device_count().map_err(|e| diagnose(&e))?;
    Ok((0..count)
        .map(|index| {
            let dev = nvml.device_by_index(index).map_err(|e| diagnose(&e))?;
            Ok(GpuId {
                index,
                uuid: dev.uuid().map_err(|e| diagnose(&e))?,
                name: dev.name().ok(),
            })
        })
        .collect())
}

/// What one GPU is set to and what it accepts, as far as NVML tells (locked clocks have no
/// getter: their current value is unknown).
#[derive(Debug, Clone)]
pub struct Current {
    pub power_limit_mw: Answer<u32>,
    /// (min, max) mW from `nvmlDeviceGetPowerManagementLimitConstraints`.
    pub power_constraints: Answer<(u32, u32)>,
    pub persistence: Answer<bool>,
    pub compute_mode: Answer<ComputeMode>,
    /// (lowest, highest) supported graphics clock over every supported memory clock.
    pub graphics_clocks: Answer<(u32, u32)>,
    /// (lowest, highest) supported memory clock.
    pub memory_clocks: Answer<(u32, u32)>,
}

/// Reads GPU `index`'s current settings and limits.
pub fn current(nvml: &Nvml, index: u32) -> Answer<Current> {
    let dev = nvml.device_by_index(index).map_err(|e| diagnose(&e))?;
    let d = |e: NvmlError| diagnose(&e);
    let memory = supported_memory_clocks(nvml, &dev);
    let graphics = memory.as_ref().map_err(|e| *e).and_then(|mems| {
        let mut all = Vec::new();
        for &m in mems {
            all.extend(supported_graphics_clocks(nvml, &dev, m)?);
        }
        span(&all)
    });
    Ok(Current {
        power_limit_mw: dev.power_management_limit().map_err(d),
        power_constraints: dev
            .power_management_limit_constraints()
            .map(|c| (c.min_limit, c.max_limit))
            .map_err(d),
        persistence: dev.is_in_persistent_mode().map_err(d),
        compute_mode: dev.compute_mode().map(compute_mode).map_err(d),
        graphics_clocks: graphics,
        memory_clocks: memory.and_then(|m| span(&m)),
    })
}

/// (lowest, highest) of a clock list; NOT_SUPPORTED for an empty one.
fn span(list: &[u32]) -> Answer<(u32, u32)> {
    match (list.iter().min(), list.iter().max()) {
        (Some(lo), Some(hi)) => Ok((*lo, *hi)),
        _ => Err(diagnose(&NvmlError::NotSupported)),
    }
}

fn compute_mode(m: NvmlComputeMode) -> ComputeMode {
    match m {
        NvmlComputeMode::Default => ComputeMode::Default,
        NvmlComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
        NvmlComputeMode::Prohibited => ComputeMode::Prohibited,
        NvmlComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
    }
}

/// A list of clocks through NVML's count protocol: a buffer that fits real boards first,
/// then exactly the count the driver asks for.
fn clock_list(mut f: impl FnMut(&mut c_uint, *mut c_uint) -> u32) -> Result<Vec<u32>, NvmlError> {
    let mut buf: Vec<c_uint> = vec![0; 256];
    for _ in 0..3 {
        let mut count = buf.len() as c_uint;
        match f(&mut count, buf.as_mut_ptr()) {
            INSUFFICIENT_SIZE if count as usize > buf.len() => {
                buf = vec![0; count as usize];
            }
            rc => {
                nvml_try(rc)?;
                buf.truncate(count as usize);
                return Ok(buf);
            }
        }
    }
    Err(NvmlError::InsufficientSize(Some(buf.len())))
}

fn supported_memory_clocks(nvml: &Nvml, dev: &Device<'_>) -> Answer<Vec<u32>> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetSupportedMemoryClocks
        .as_ref()
        .map_err(|e| diagnose(&NvmlError::FailedToLoadSymbol(e.to_string())))?;
    // SAFETY: the handle stays valid while `dev` lives.
    let handle = unsafe { dev.handle() };
    // SAFETY: `clocks` holds `*count` entries (clock_list's contract).
    clock_list(|count, clocks| unsafe { sym(handle, count, clocks) }).map_err(|e| diagnose(&e))
}

fn supported_graphics_clocks(nvml: &Nvml, dev: &Device<'_>, mem_mhz: u32) -> Answer<Vec<u32>> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetSupportedGraphicsClocks
        .as_ref()
        .map_err(|e| diagnose(&NvmlError::FailedToLoadSymbol(e.to_string())))?;
    // SAFETY: as above.
    let handle = unsafe { dev.handle() };
    // SAFETY: as above.
    clock_list(|count, clocks| unsafe { sym(handle, mem_mhz, count, clocks) })
        .map_err(|e| diagnose(&e))
}

/// Makes one change on GPU `index`.
pub fn write(nvml: &Nvml, index: u32, change: Change) -> Answer<()> {
    let mut dev = nvml.device_by_index(index).map_err(|e| diagnose(&e))?;
    let r = match change {
        Change::PowerLimit { mw } => dev.set_power_management_limit(mw),
        Change::Persistence(on) => dev.set_persistent(on),
        Change::LockClocks { min_mhz, max_mhz } => {
            dev.set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric {
                min_clock_mhz: min_mhz,
                max_clock_mhz: max_mhz,
            })
        }
        Change::ResetClocks => dev.reset_gpu_locked_clocks(),
        Change::LockMemoryClocks { min_mhz, max_mhz } => {
            dev.set_mem_locked_clocks(min_mhz, max_mhz)
        }
        Change::ResetMemoryClocks => dev.reset_mem_locked_clocks(),
        Change::ComputeMode(m) => dev.set_compute_mode(match m {
            ComputeMode::Default => NvmlComputeMode::Default,
            ComputeMode::ExclusiveProcess => NvmlComputeMode::ExclusiveProcess,
            ComputeMode::Prohibited => NvmlComputeMode::Prohibited,
            ComputeMode::ExclusiveThread => NvmlComputeMode::ExclusiveThread,
        }),
    };
    r.map_err(|e| diagnose(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_lists_retry_with_the_count_the_driver_asks_for() {
        let board: Vec<u32> = (0..300).map(|i| 3000 - i * 10).collect();
        let mut calls = 0;
        let got = clock_list(|count, clocks| {
            calls += 1;
            let need = board.len() as c_uint;
            if *count < need {
                *count = need;
                return INSUFFICIENT_SIZE;
            }
            for (i, c) in board.iter().enumerate() {
                // SAFETY: the test's buffer holds `*count >= need` entries.
                unsafe { clocks.add(i).write(*c) };
            }
            *count = need;
            0
        })
        .unwrap();
        assert_eq!((got.len(), calls, got[299]), (300, 2, 10));
        let err = clock_list(|_, _| 3).unwrap_err();
        assert!(matches!(err, NvmlError::NotSupported));
        assert_eq!(span(&[1400, 210, 900]), Ok((210, 1400)));
        assert!(span(&[]).is_err());
    }
}
