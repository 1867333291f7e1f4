//! NVML's management calls: the setters (power limit, persistence mode, compute mode, locked
//! graphics and memory clocks and their resets) and the supported-clock lists they are
//! checked against.
//!
//! Invariants:
//! - Every export is a per-device call (`device_call`): the scenario's faults, lost GPUs and
//!   NOT_SUPPORTED lists apply to setters as to getters, before anything is checked.
//! - A setter answers NO_PERMISSION unless the session is privileged (`settings`), then
//!   INVALID_ARGUMENT for a value the GPU does not accept — a power limit outside
//!   `nvmlDeviceGetPowerManagementLimitConstraints`, clocks outside the supported lists or
//!   min > max, an enable state or compute mode NVML does not define (EXCLUSIVE_THREAD
//!   included: support for it was removed) — and changes nothing on any error.
//! - The supported-clock lists follow NVML's two-call protocol: a `count` smaller than the
//!   list gets INSUFFICIENT_SIZE and the needed count, nothing written. Graphics clocks go
//!   from the model's maximum down to its idle clock in 15 MHz steps (as real boards list
//!   them; an RTX 4090's list is longer than the 128 entries nvml-wrapper first asks for),
//!   the same at every supported memory clock; memory clocks are the maximum and, on GDDR
//!   boards, the idle clock.
//! - Locked clocks hold the current clocks inside their range (`device.rs`); a power limit
//!   changes what the limit getters report, not the simulated power draw.

use std::ffi::c_uint;

use gpuwatch_sim::GpuSpec;
use gpuwatch_sim::nvml::code;

use crate::ffi_types::{NvmlDevice, NvmlReturn};
use crate::settings::{self, Settings};
use crate::{Device, device_call};

/// NVML's graphics clock step on current boards, MHz.
const CLOCK_STEP_MHZ: usize = 15;

/// Supported graphics clocks, highest first.
pub(crate) fn graphics_clocks(g: &GpuSpec) -> Vec<u32> {
    let (lo, hi) = (
        g.sm_clock_idle_mhz.min(g.sm_clock_max_mhz),
        g.sm_clock_max_mhz,
    );
    let mut v: Vec<u32> = (lo..=hi).rev().step_by(CLOCK_STEP_MHZ).collect();
    if v.last() != Some(&lo) {
        v.push(lo);
    }
    v
}

/// Supported memory clocks, highest first.
pub(crate) fn memory_clocks(g: &GpuSpec) -> Vec<u32> {
    if g.mem_clock_idle_mhz < g.mem_clock_max_mhz {
        vec![g.mem_clock_max_mhz, g.mem_clock_idle_mhz]
    } else {
        vec![g.mem_clock_max_mhz]
    }
}

/// Writes `list` with NVML's count protocol.
///
/// # Safety
/// `count` must be null or valid; `clocks` null or valid for `*count` entries.
unsafe fn out_list(list: &[u32], count: *mut c_uint, clocks: *mut c_uint) -> NvmlReturn {
    if count.is_null() {
        return code::INVALID_ARGUMENT;
    }
    // SAFETY: `count` is non-null and points to the caller's capacity.
    let capacity = unsafe { count.read_unaligned() } as usize;
    let n = list.len() as c_uint;
    if capacity < list.len() {
        // SAFETY: as above.
        unsafe { count.write_unaligned(n) };
        return code::INSUFFICIENT_SIZE;
    }
    if clocks.is_null() {
        return code::INVALID_ARGUMENT;
    }
    for (i, c) in list.iter().enumerate() {
        // SAFETY: the caller's array holds `capacity >= list.len()` entries.
        unsafe { clocks.add(i).write_unaligned(*c) };
    }
    // SAFETY: as above.
    unsafe { count.write_unaligned(n) };
    code::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedMemoryClocks(
    device: NvmlDevice,
    count: *mut c_uint,
    clocks: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetSupportedMemoryClocks", |d| {
        // SAFETY: per NVML's contract for this call.
        unsafe { out_list(&memory_clocks(d.spec()), count, clocks) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedGraphicsClocks(
    device: NvmlDevice,
    memory_clock_mhz: c_uint,
    count: *mut c_uint,
    clocks: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetSupportedGraphicsClocks", |d| {
        if !memory_clocks(d.spec()).contains(&memory_clock_mhz) {
            return code::NOT_FOUND;
        }
        // SAFETY: per NVML's contract for this call.
        unsafe { out_list(&graphics_clocks(d.spec()), count, clocks) }
    })
}

/// The common path of a setter: privilege, then `accepts`, then the change.
fn set(
    device: NvmlDevice,
    symbol: &str,
    accepts: impl FnOnce(&Device) -> bool,
    change: impl FnOnce(&mut Settings),
) -> NvmlReturn {
    device_call(device, symbol, |d| {
        if !settings::privileged() {
            return code::NO_PERMISSION;
        }
        if !accepts(d) {
            return code::INVALID_ARGUMENT;
        }
        settings::update(d.index, &d.spec().uuid, change)
    })
}

/// `min..=max` is a range inside the supported `list`.
fn in_range(list: &[u32], min: u32, max: u32) -> bool {
    let lo = list.iter().min().copied().unwrap_or(0);
    let hi = list.iter().max().copied().unwrap_or(0);
    lo <= min && min <= max && max <= hi
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetPowerManagementLimit(
    device: NvmlDevice,
    limit_mw: c_uint,
) -> NvmlReturn {
    set(
        device,
        "nvmlDeviceSetPowerManagementLimit",
        |d| (d.spec().power_min_mw..=d.spec().power_max_mw).contains(&limit_mw),
        |s| s.power_limit_mw = Some(limit_mw),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetPersistenceMode(
    device: NvmlDevice,
    mode: c_uint,
) -> NvmlReturn {
    set(
        device,
        "nvmlDeviceSetPersistenceMode",
        |_| mode <= 1,
        |s| s.persistence = Some(mode == 1),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetComputeMode(device: NvmlDevice, mode: c_uint) -> NvmlReturn {
    set(
        device,
        "nvmlDeviceSetComputeMode",
        // 0 default, 2 prohibited, 3 exclusive process; 1 (exclusive thread) was removed.
        |_| matches!(mode, 0 | 2 | 3),
        |s| s.compute_mode = Some(mode),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetGpuLockedClocks(
    device: NvmlDevice,
    min_mhz: c_uint,
    max_mhz: c_uint,
) -> NvmlReturn {
    set(
        device,
        "nvmlDeviceSetGpuLockedClocks",
        |d| in_range(&graphics_clocks(d.spec()), min_mhz, max_mhz),
        |s| s.gpu_locked = Some((min_mhz, max_mhz)),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceResetGpuLockedClocks(device: NvmlDevice) -> NvmlReturn {
    set(
        device,
        "nvmlDeviceResetGpuLockedClocks",
        |_| true,
        |s| s.gpu_locked = None,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetMemoryLockedClocks(
    device: NvmlDevice,
    min_mhz: c_uint,
    max_mhz: c_uint,
) -> NvmlReturn {
    set(
        device,
        "nvmlDeviceSetMemoryLockedClocks",
        |d| in_range(&memory_clocks(d.spec()), min_mhz, max_mhz),
        |s| s.mem_locked = Some((min_mhz, max_mhz)),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceResetMemoryLockedClocks(device: NvmlDevice) -> NvmlReturn {
    set(
        device,
        "nvmlDeviceResetMemoryLockedClocks",
        |_| true,
        |s| s.mem_locked = None,
    )
}

// The scenario's `compute_mode` until a setter changes it (one state for both).
getter!(nvmlDeviceGetComputeMode, c_uint, |d| d
    .settings()
    .compute_mode
    .unwrap_or(d.spec().compute_mode));

getter!(nvmlDeviceGetPersistenceMode, c_uint, |d| c_uint::from(
    d.settings()
        .persistence
        .unwrap_or(d.spec().persistence_mode)
));

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(model: &str) -> GpuSpec {
        let text = format!("[[gpu]]\nmodel = \"{model}\"\n");
        gpuwatch_sim::Scenario::from_toml_str(&text, "t")
            .expect("valid")
            .gpu(0)
            .clone()
    }

    #[test]
    fn clock_lists_span_idle_to_max_highest_first() {
        let h100 = spec("H100-SXM-80GB");
        let g = graphics_clocks(&h100);
        assert_eq!(g.first(), Some(&1980));
        assert_eq!(g.last(), Some(&345));
        assert!(g.windows(2).all(|w| w[0] > w[1]));
        assert_eq!(memory_clocks(&h100), vec![2619]);
        let rtx = spec("RTX-4090");
        assert!(
            graphics_clocks(&rtx).len() > 128,
            "longer than nvml-wrapper's first ask"
        );
        assert_eq!(memory_clocks(&rtx), vec![10501, 405]);
        assert!(in_range(&g, 345, 1980) && in_range(&g, 1200, 1200));
        assert!(!in_range(&g, 1500, 1200) && !in_range(&g, 300, 1200) && !in_range(&g, 1200, 2000));
    }
}
