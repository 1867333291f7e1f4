//! Per-device health and modes: ECC counters and mode, remapped rows, retired pages,
//! performance state, clock throttle (event) reasons, display and MIG modes (persistence and
//! compute modes, which the setters change, are in `manage`).
//!
//! Invariants: volatile and aggregate ECC counters report the same scenario value; retired
//! pages follow NVML's two-call protocol (a too-small count gets INSUFFICIENT_SIZE and the needed
//! count, nothing written); addresses and timestamps are deterministic per GPU and page.

use std::ffi::{c_uint, c_ulonglong};

use gpuwatch_sim::nvml::{code, throttle};

use crate::ffi_types::{NvmlDevice, NvmlReturn};
use crate::{device_call, out};

/// Error type 0 corrected, 1 uncorrected; counter type 0 volatile, 1 aggregate.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: NvmlDevice,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetTotalEccErrors", |d| {
        let s = d.state();
        let v = match (error_type, counter_type) {
            (0, 0 | 1) => s.ecc_corrected,
            (1, 0 | 1) => s.ecc_uncorrected,
            _ => return code::INVALID_ARGUMENT,
        };
        // SAFETY: null is rejected by `out`; otherwise the caller's writable output.
        unsafe { out(count, v) }
    })
}

/// Both current and pending ECC mode are "enabled" on boards that support ECC.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetEccMode", |_| {
        if current.is_null() || pending.is_null() {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: both checked non-null.
        unsafe {
            out(current, 1);
            out(pending, 1)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetMigMode", |d| {
        if current.is_null() || pending.is_null() {
            return code::INVALID_ARGUMENT;
        }
        let mode = c_uint::from(d.spec().mig_mode);
        // SAFETY: both checked non-null.
        unsafe {
            out(current, mode);
            out(pending, mode)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: NvmlDevice,
    corr_rows: *mut c_uint,
    unc_rows: *mut c_uint,
    is_pending: *mut c_uint,
    failure_occurred: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetRemappedRows", |d| {
        if corr_rows.is_null()
            || unc_rows.is_null()
            || is_pending.is_null()
            || failure_occurred.is_null()
        {
            return code::INVALID_ARGUMENT;
        }
        let s = d.state();
        // SAFETY: all four checked non-null.
        unsafe {
            out(corr_rows, s.remapped_rows_corr);
            out(unc_rows, s.remapped_rows_unc);
            out(is_pending, c_uint::from(s.remap_pending));
            out(failure_occurred, c_uint::from(s.remap_failure))
        }
    })
}

/// Cause 0: multiple single-bit errors; 1: a double-bit error.
unsafe fn retired_pages(
    device: NvmlDevice,
    symbol: &str,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> NvmlReturn {
    device_call(device, symbol, |d| {
        if count.is_null() {
            return code::INVALID_ARGUMENT;
        }
        let s = d.state();
        let n = match cause {
            0 => s.retired_pages_sbe,
            1 => s.retired_pages_dbe,
            _ => return code::INVALID_ARGUMENT,
        };
        // SAFETY: `count` is non-null and points to the caller's capacity.
        let capacity = unsafe { count.read_unaligned() };
        unsafe { count.write_unaligned(n) };
        if capacity < n {
            return code::INSUFFICIENT_SIZE;
        }
        if n > 0 && addresses.is_null() {
            return code::INVALID_ARGUMENT;
        }
        for k in 0..n as usize {
            let addr = 0x4_0000_0000
                + ((d.index as u64) << 28)
                + ((cause as u64) << 24)
                + ((k as u64) << 12);
            // SAFETY: the caller's arrays hold `capacity >= n` entries (timestamps may be null).
            unsafe {
                addresses.add(k).write_unaligned(addr);
                if !timestamps.is_null() {
                    timestamps
                        .add(k)
                        .write_unaligned(1_700_000_000 + k as u64 * 3600);
                }
            }
        }
        code::SUCCESS
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages(
    device: NvmlDevice,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> NvmlReturn {
    unsafe {
        retired_pages(
            device,
            "nvmlDeviceGetRetiredPages",
            cause,
            count,
            addresses,
            std::ptr::null_mut(),
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages_v2(
    device: NvmlDevice,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> NvmlReturn {
    unsafe {
        retired_pages(
            device,
            "nvmlDeviceGetRetiredPages_v2",
            cause,
            count,
            addresses,
            timestamps,
        )
    }
}

getter!(nvmlDeviceGetRetiredPagesPendingStatus, c_uint, |d| {
    c_uint::from(d.state().retired_pending)
});
getter!(nvmlDeviceGetPerformanceState, c_uint, |d| d.state().pstate);
getter!(nvmlDeviceGetPowerState, c_uint, |d| d.state().pstate);
getter!(
    nvmlDeviceGetCurrentClocksThrottleReasons,
    c_ulonglong,
    |d| d.state().throttle_reasons
);
getter!(nvmlDeviceGetCurrentClocksEventReasons, c_ulonglong, |d| d
    .state()
    .throttle_reasons);
getter!(
    nvmlDeviceGetSupportedClocksThrottleReasons,
    c_ulonglong,
    |_d| throttle::ALL
);
getter!(
    nvmlDeviceGetSupportedClocksEventReasons,
    c_ulonglong,
    |_d| throttle::ALL
);
getter!(nvmlDeviceGetDisplayMode, c_uint, |_d| 0);
getter!(nvmlDeviceGetDisplayActive, c_uint, |_d| 0);
