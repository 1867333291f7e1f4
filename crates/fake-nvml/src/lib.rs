//! gpuwatch-fake-nvml: a fake `libnvidia-ml.so.1` serving simulated GPUs from a gpuwatch-sim
//! scenario, for CI without GPUs, the demo, and tests (nvml-wrapper and pynvml both load it).
//!
//! Invariants:
//! - Every export runs inside [`guard`]: a panic becomes NVML_ERROR_UNKNOWN, never an unwind
//!   across the C boundary.
//! - Every per-device export goes through [`device_call`]: initialised? valid handle? then the
//!   scenario decides (injected error, block, lost GPU, NOT_SUPPORTED) before any value is read,
//!   and values come from `Scenario::gpu_state` at the current tick (constant time), computed
//!   once per GPU and tick by each calling thread ([`Device::state`]).
//! - No background threads; no state outside `state::STATE` (and the static handle slots,
//!   `gpm`'s sample registry, the settings files of a `GPUWATCH_FAKE_STATE_DIR`, and each
//!   thread's last computed state per GPU, a pure function of scenario, GPU and tick).
//! - Output pointers are checked for null (INVALID_ARGUMENT) and written only on success.
//!
//! Module map: `init` (init/shutdown/system/handles/error strings), `device` (inventory and
//! sensors), `health` (ECC, retirement, throttling, modes), `process` (running processes),
//! `events` (XID event sets), `fields` (the batch `nvmlDeviceGetFieldValues`), `gpm` (GPM
//! samples and metrics: tensor activity), `mig` (MIG devices and their handles), `nvlink` (link state and fabric registration), `manage` (setters and supported clocks), `settings`
//! (what the setters change, shared between processes through `GPUWATCH_FAKE_STATE_DIR`, and
//! who may change it), `control` (gpuwatchFake* test controls), `state`, `ffi_types`.
//!
//! Cost model: every per-device call is counted (`gpuwatchFakeCallCount`), and with
//! `GPUWATCH_FAKE_CALL_US=N` in the environment each one also spins for N µs of CPU, as a
//! driver's ioctl costs (tens of µs on real GPUs), so that benchmarks see what fewer calls
//! save.
// The exports keep NVML's C names, and each follows the contract nvml.h documents for it.
#![allow(non_snake_case, clippy::missing_safety_doc)]

/// Define a per-device export that writes one value: `getter!(nvmlDeviceGetX, u32, |d| ...)`.
/// The symbol name given to the scenario is the export's own name.
macro_rules! getter {
    ($name:ident, $ty:ty, |$d:ident| $value:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            device: $crate::ffi_types::NvmlDevice,
            value: *mut $ty,
        ) -> $crate::ffi_types::NvmlReturn {
            $crate::device_call(device, stringify!($name), |$d| {
                let v: $ty = $value;
                // SAFETY: `value` is null (rejected) or the caller's writable output.
                unsafe { $crate::out(value, v) }
            })
        }
    };
}

mod control;
mod device;
mod events;
mod ffi_types;
mod fields;
mod gpm;
mod health;
mod init;
mod manage;
mod mig;
mod nvlink;
mod process;
mod settings;
mod state;

use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use gpuwatch_sim::nvml::code;
use gpuwatch_sim::{CallOutcome, GpuSpec, GpuState, Scenario};

use crate::ffi_types::{NvmlDevice, NvmlReturn};

/// Run an export body, turning a panic into NVML_ERROR_UNKNOWN.
pub(crate) fn guard(f: impl FnOnce() -> NvmlReturn) -> NvmlReturn {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(code::UNKNOWN)
}

/// Write `value` through `ptr`; INVALID_ARGUMENT for null.
///
/// # Safety
/// `ptr` must be null or valid for a write of `T`.
pub(crate) unsafe fn out<T>(ptr: *mut T, value: T) -> NvmlReturn {
    if ptr.is_null() {
        return code::INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and the caller guarantees it points to a writable T.
    unsafe { ptr.write_unaligned(value) };
    code::SUCCESS
}

/// Read the versioned struct the caller passes in: INVALID_ARGUMENT for null,
/// ARGUMENT_VERSION_MISMATCH unless its leading `version` word is `expected` (as the driver
/// checks every `_v` struct before touching it).
///
/// # Safety
/// `ptr` must be null or valid for a read of `T`, whose first field is the `c_uint` version.
pub(crate) unsafe fn versioned_in<T>(ptr: *const T, expected: u32) -> Result<T, NvmlReturn> {
    if ptr.is_null() {
        return Err(code::INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller guarantees a readable T that starts with a u32.
    let (version, given) = unsafe { (ptr.cast::<u32>().read_unaligned(), ptr.read_unaligned()) };
    if version != expected {
        return Err(code::ARGUMENT_VERSION_MISMATCH);
    }
    Ok(given)
}

/// Copy `text` into a C buffer of `len` bytes with its NUL, or INSUFFICIENT_SIZE.
///
/// # Safety
/// `buf` must be null or valid for `len` bytes.
pub(crate) unsafe fn out_str(buf: *mut c_char, len: u32, text: &str) -> NvmlReturn {
    if buf.is_null() {
        return code::INVALID_ARGUMENT;
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > len as usize {
        return code::INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller's buffer holds `len >= bytes.len() + 1` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        buf.add(bytes.len()).write(0);
    }
    code::SUCCESS
}

/// Device handles: addresses of these slots (non-null, stable while we are loaded).
static HANDLE_SLOTS: [u8; gpuwatch_sim::MAX_GPUS] = [0; gpuwatch_sim::MAX_GPUS];

pub(crate) fn handle_for(index: usize) -> NvmlDevice {
    HANDLE_SLOTS
        .as_ptr()
        .wrapping_add(index.min(gpuwatch_sim::MAX_GPUS - 1)) as NvmlDevice
}

/// The GPU index behind a handle, if it is one of ours.
pub(crate) fn index_of(handle: NvmlDevice) -> Option<usize> {
    let offset = (handle as usize).wrapping_sub(HANDLE_SLOTS.as_ptr() as usize);
    (offset < gpuwatch_sim::MAX_GPUS).then_some(offset)
}

/// MIG device handles: addresses of these slots, [`gpuwatch_sim::mig::MAX_MIG`] per GPU.
static MIG_SLOTS: [u8; gpuwatch_sim::MAX_GPUS * gpuwatch_sim::mig::MAX_MIG] =
    [0; gpuwatch_sim::MAX_GPUS * gpuwatch_sim::mig::MAX_MIG];

pub(crate) fn mig_handle_for(index: usize, mig: usize) -> NvmlDevice {
    let at = index.min(gpuwatch_sim::MAX_GPUS - 1) * gpuwatch_sim::mig::MAX_MIG
        + mig.min(gpuwatch_sim::mig::MAX_MIG - 1);
    MIG_SLOTS.as_ptr().wrapping_add(at) as NvmlDevice
}

/// The (GPU, MIG instance) behind a MIG device handle, if it is one of ours.
pub(crate) fn mig_of(handle: NvmlDevice) -> Option<(usize, usize)> {
    let offset = (handle as usize).wrapping_sub(MIG_SLOTS.as_ptr() as usize);
    (offset < MIG_SLOTS.len()).then_some((
        offset / gpuwatch_sim::mig::MAX_MIG,
        offset % gpuwatch_sim::mig::MAX_MIG,
    ))
}

/// The calls a MIG device handle answers (the instance's identity, memory, processes);
/// every other per-device call on one answers NOT_SUPPORTED, as the driver does.
const MIG_SYMBOLS: &[&str] = &[
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetMigMode",
];

/// A GPU's state as computed for a scenario and a tick.
type Computed = (Arc<Scenario>, u64, GpuState);

/// What a per-device body gets: the scenario, the GPU and the tick the call is answered at.
pub(crate) struct Device {
    pub scenario: Arc<Scenario>,
    pub index: usize,
    pub tick: u64,
    /// The MIG instance, for a call on a MIG device handle.
    pub mig: Option<usize>,
}

impl Device {
    /// The MIG instance's spec and values at the call's tick (a call on a MIG handle).
    pub fn mig(&self) -> Option<(&gpuwatch_sim::mig::MigSpec, gpuwatch_sim::mig::MigState)> {
        let i = self.mig?;
        let spec = self.spec().mig_instances.get(i)?;
        Some((spec, self.scenario.mig_state(self.index, i, self.tick)?))
    }

    pub fn spec(&self) -> &GpuSpec {
        self.scenario.gpu(self.index)
    }

    /// The GPU's values at the call's tick. A tick's values are a pure function of the
    /// scenario, the GPU and the tick, and a sampler reads a dozen of them per GPU within one
    /// tick: the last state computed for each GPU is kept per thread and reused while the
    /// scenario and the tick are the same (one computation per GPU and tick, as a driver
    /// refreshes its counters, instead of one per call).
    pub fn state(&self) -> GpuState {
        thread_local! {
            static LAST: std::cell::RefCell<Vec<Option<Computed>>> =
                const { std::cell::RefCell::new(Vec::new()) };
        }
        LAST.with_borrow_mut(|last| {
            if last.len() <= self.index {
                last.resize(self.index + 1, None);
            }
            match &last[self.index] {
                Some((sc, tick, s)) if *tick == self.tick && Arc::ptr_eq(sc, &self.scenario) => *s,
                _ => {
                    let s = self.scenario.gpu_state(self.index, self.tick);
                    last[self.index] = Some((Arc::clone(&self.scenario), self.tick, s));
                    s
                }
            }
        })
    }

    /// The settings the setters changed (power limit, modes, locked clocks).
    pub fn settings(&self) -> settings::Settings {
        settings::read(self.index, &self.spec().uuid)
    }
}

/// Apply the scenario's verdict for `symbol` on GPU `index`; `Ok(tick)` means answer at `tick`.
pub(crate) fn decide(
    scenario: &Scenario,
    index: usize,
    symbol: &str,
    tick: u64,
) -> Result<u64, NvmlReturn> {
    match scenario.call_outcome(index, symbol, tick) {
        CallOutcome::Ok => Ok(tick),
        CallOutcome::Error(c) => Err(c),
        CallOutcome::Block(d) => {
            std::thread::sleep(d);
            // The world moved on while we slept: answer at the tick of now.
            let now = state::current_tick().ok_or(code::UNINITIALIZED)?;
            match scenario.call_error(index, symbol, now) {
                Some(c) => Err(c),
                None => Ok(now),
            }
        }
        CallOutcome::BlockForever => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}

/// The common path of every per-device export.
pub(crate) fn device_call(
    handle: NvmlDevice,
    symbol: &str,
    body: impl FnOnce(&Device) -> NvmlReturn,
) -> NvmlReturn {
    guard(|| {
        let Some((scenario, tick)) = state::snapshot() else {
            return code::UNINITIALIZED;
        };
        state::count_call();
        let (index, mig) = match (index_of(handle), mig_of(handle)) {
            (Some(i), _) if i < scenario.gpu_count() => (i, None),
            (_, Some((i, m))) if i < scenario.gpu_count() => (i, Some(m)),
            _ => return code::INVALID_ARGUMENT,
        };
        if mig.is_some() && !MIG_SYMBOLS.contains(&gpuwatch_sim::nvml::base_symbol(symbol)) {
            return code::NOT_SUPPORTED;
        }
        match decide(&scenario, index, symbol, tick) {
            Ok(tick) => {
                // A destroyed (or not yet created) instance's handle is stale.
                if let Some(m) = mig
                    && scenario.mig_state(index, m, tick).is_none()
                {
                    return code::NOT_FOUND;
                }
                body(&Device {
                    scenario,
                    index,
                    tick,
                    mig,
                })
            }
            Err(c) => c,
        }
    })
}
