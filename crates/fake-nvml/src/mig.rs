//! MIG devices: `nvmlDeviceGetMaxMigDeviceCount`, `nvmlDeviceGetMigDeviceHandleByIndex`,
//! `nvmlDeviceIsMigDeviceHandle`, `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`,
//! `nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId`. A MIG device handle
//! answers the calls of `MIG_SYMBOLS` (lib.rs) and NOT_SUPPORTED to the rest.
//!
//! Invariants: MIG calls on a GPU not in MIG mode answer NOT_SUPPORTED (a model without a
//! profile table, NOT_SUPPORTED whatever its mode); a MIG index whose instance does not exist
//! at the call's tick (not created yet, destroyed) answers NOT_FOUND, as the driver does for
//! an index without a device; instance ids are only answered on MIG device handles.

use std::ffi::c_uint;

use gpuwatch_sim::nvml::code;

use crate::ffi_types::{NvmlDevice, NvmlReturn};
use crate::{device_call, handle_for, mig_handle_for, mig_of, out};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: NvmlDevice,
    count: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetMaxMigDeviceCount", |d| {
        if d.mig.is_some() || gpuwatch_sim::mig::profiles(&d.spec().model).is_none() {
            return code::NOT_SUPPORTED;
        }
        let n = if d.spec().mig_mode {
            gpuwatch_sim::mig::MAX_MIG as c_uint
        } else {
            0
        };
        // SAFETY: null (rejected) or the caller's output.
        unsafe { out(count, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: NvmlDevice,
    index: c_uint,
    mig_device: *mut NvmlDevice,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetMigDeviceHandleByIndex", |d| {
        if d.mig.is_some() || !d.spec().mig_mode {
            return code::NOT_SUPPORTED;
        }
        let i = index as usize;
        if i >= gpuwatch_sim::mig::MAX_MIG {
            return code::INVALID_ARGUMENT;
        }
        if d.scenario.mig_state(d.index, i, d.tick).is_none() {
            return code::NOT_FOUND;
        }
        // SAFETY: null (rejected) or the caller's output.
        unsafe { out(mig_device, mig_handle_for(d.index, i)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: NvmlDevice,
    is_mig: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceIsMigDeviceHandle", |d| {
        // SAFETY: null (rejected) or the caller's output.
        unsafe { out(is_mig, c_uint::from(d.mig.is_some())) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: NvmlDevice,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    if mig_of(mig_device).is_none() {
        return crate::guard(|| code::INVALID_ARGUMENT);
    }
    device_call(
        mig_device,
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        |d| {
            // SAFETY: null (rejected) or the caller's output.
            unsafe { out(device, handle_for(d.index)) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: NvmlDevice,
    id: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetGpuInstanceId", |d| match d.mig() {
        // SAFETY: null (rejected) or the caller's output.
        Some((m, _)) => unsafe { out(id, m.gi_id) },
        None => code::NOT_SUPPORTED,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: NvmlDevice,
    id: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetComputeInstanceId", |d| {
        match d.mig() {
            // SAFETY: null (rejected) or the caller's output.
            Some((m, _)) => unsafe { out(id, m.ci_id) },
            None => code::NOT_SUPPORTED,
        }
    })
}
