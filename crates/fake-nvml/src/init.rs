//! Library lifecycle and system-level exports: init (v1, v2, with flags), shutdown, error
//! strings, driver/NVML/CUDA versions, device count and handle lookup.
//!
//! Invariants: init is refcounted like the real library (see `state`); `nvmlErrorString` works
//! without init and returns static strings for every code; handle lookups are per-device calls,
//! so faults and lost GPUs apply to them too (`nvmlDeviceGetHandleBy*`).

use std::ffi::{CStr, c_char, c_int, c_uint};

use gpuwatch_sim::nvml::code;

use crate::ffi_types::{NvmlDevice, NvmlReturn};
use crate::{decide, guard, handle_for, out, out_str, state};

fn init() -> NvmlReturn {
    guard(|| match state::init() {
        Ok(()) => code::SUCCESS,
        Err(c) => c,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit_v2() -> NvmlReturn {
    init()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit() -> NvmlReturn {
    init()
}

/// Flags (NO_GPUS, NO_ATTACH) change nothing here: the simulated GPUs are always attached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    init()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard(|| match state::shutdown() {
        Ok(()) => code::SUCCESS,
        Err(c) => c,
    })
}

fn error_string(result: NvmlReturn) -> &'static CStr {
    match result {
        code::SUCCESS => c"Success",
        code::UNINITIALIZED => c"Uninitialized",
        code::INVALID_ARGUMENT => c"Invalid Argument",
        code::NOT_SUPPORTED => c"Not Supported",
        code::NO_PERMISSION => c"Insufficient Permissions",
        code::ALREADY_INITIALIZED => c"Already Initialized",
        code::NOT_FOUND => c"Not Found",
        code::INSUFFICIENT_SIZE => c"Insufficient Size",
        code::INSUFFICIENT_POWER => c"Insufficient External Power",
        code::DRIVER_NOT_LOADED => c"Driver Not Loaded",
        code::TIMEOUT => c"Timeout",
        code::IRQ_ISSUE => c"Interrupt request issue",
        code::LIBRARY_NOT_FOUND => c"NVML Shared Library Not Found",
        code::FUNCTION_NOT_FOUND => c"Function Not Found",
        code::CORRUPTED_INFOROM => c"Corrupted infoROM",
        code::GPU_IS_LOST => c"GPU is lost",
        code::RESET_REQUIRED => c"GPU requires restart",
        code::OPERATING_SYSTEM => c"The operating system has blocked the request.",
        code::LIB_RM_VERSION_MISMATCH => c"RM has detected an NVML/RM version mismatch.",
        code::IN_USE => c"In use by another client",
        code::MEMORY => c"Insufficient Memory",
        code::NO_DATA => c"No data",
        code::VGPU_ECC_NOT_SUPPORTED => c"The requested vgpu operation is not available on target device, because ECC is enabled",
        code::INSUFFICIENT_RESOURCES => c"Ran out of critical resources, other than memory",
        code::FREQ_NOT_SUPPORTED => c"The requested frequency is not supported",
        code::ARGUMENT_VERSION_MISMATCH => c"Argument version mismatch",
        code::DEPRECATED => c"Function deprecated",
        code::NOT_READY => c"Not Ready",
        code::GPU_NOT_FOUND => c"GPU not found",
        code::INVALID_STATE => c"Invalid state",
        code::RESET_TYPE_NOT_SUPPORTED => c"Reset type not supported",
        _ => c"Unknown Error",
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    error_string(result).as_ptr()
}

/// Run `f` with the scenario when initialised.
fn with_scenario(f: impl FnOnce(&gpuwatch_sim::Scenario) -> NvmlReturn) -> NvmlReturn {
    guard(|| match state::snapshot() {
        Some((s, _)) => f(&s),
        None => code::UNINITIALIZED,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    with_scenario(|s| unsafe { out_str(version, length, s.driver_version()) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    with_scenario(|s| unsafe { out_str(version, length, s.nvml_version()) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> NvmlReturn {
    with_scenario(|s| unsafe { out(v, s.cuda_driver_version()) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> NvmlReturn {
    with_scenario(|s| unsafe { out(v, s.cuda_driver_version()) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    with_scenario(|s| unsafe { out(count, s.gpu_count() as c_uint) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> NvmlReturn {
    unsafe { nvmlDeviceGetCount_v2(count) }
}

/// Hand out the handle of GPU `index` once the scenario agrees (faults, lost GPU).
fn lookup(
    symbol: &str,
    device: *mut NvmlDevice,
    find: impl FnOnce(&gpuwatch_sim::Scenario) -> Result<usize, NvmlReturn>,
) -> NvmlReturn {
    guard(|| {
        let Some((s, tick)) = state::snapshot() else {
            return code::UNINITIALIZED;
        };
        if device.is_null() {
            return code::INVALID_ARGUMENT;
        }
        let index = match find(&s) {
            Ok(i) => i,
            Err(c) => return c,
        };
        match decide(&s, index, symbol, tick) {
            // SAFETY: checked non-null above; the caller passes a writable handle slot.
            Ok(_) => unsafe { out(device, handle_for(index)) },
            Err(c) => c,
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    lookup("nvmlDeviceGetHandleByIndex", device, |s| {
        let i = index as usize;
        if i < s.gpu_count() {
            Ok(i)
        } else {
            Err(code::INVALID_ARGUMENT)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, device) }
}

/// Read a C string argument; `None` for null or non-UTF-8.
///
/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn arg_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .ok()
        .map(str::to_string)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    let wanted = unsafe { arg_str(uuid) };
    // A MIG device's UUID: its handle, while the instance exists.
    if let Some(w) = wanted.as_deref().filter(|w| w.starts_with("MIG-")) {
        let w = w.to_string();
        return guard(|| {
            let Some((s, tick)) = state::snapshot() else {
                return code::UNINITIALIZED;
            };
            if device.is_null() {
                return code::INVALID_ARGUMENT;
            }
            for g in 0..s.gpu_count() {
                for m in &s.gpu(g).mig_instances {
                    if m.uuid == w && m.alive_at(tick) {
                        // SAFETY: checked non-null above; the caller's handle slot.
                        return unsafe { out(device, crate::mig_handle_for(g, m.index)) };
                    }
                }
            }
            code::NOT_FOUND
        });
    }
    lookup("nvmlDeviceGetHandleByUUID", device, |s| {
        let wanted = wanted.ok_or(code::INVALID_ARGUMENT)?;
        (0..s.gpu_count())
            .find(|&i| s.gpu(i).uuid == wanted)
            .ok_or(code::NOT_FOUND)
    })
}

/// (domain, bus, device) of `"0000:18:00.0"` or `"00000000:18:00.0"`.
fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let mut parts = s.trim().splitn(3, ':');
    let domain = u32::from_str_radix(parts.next()?, 16).ok()?;
    let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
    let dev = parts.next()?.split('.').next()?;
    Some((domain, bus, u32::from_str_radix(dev, 16).ok()?))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    let wanted = unsafe { arg_str(bus_id) };
    lookup("nvmlDeviceGetHandleByPciBusId", device, |s| {
        let wanted = wanted
            .as_deref()
            .and_then(parse_bus_id)
            .ok_or(code::INVALID_ARGUMENT)?;
        (0..s.gpu_count())
            .find(|&i| {
                let g = s.gpu(i);
                (g.pci_domain, g.pci_bus, g.pci_device) == wanted
            })
            .ok_or(code::NOT_FOUND)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(bus_id, device) }
}
