//! Running-process queries: `nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses*`.
//!
//! Protocol (as NVML): a null buffer with `*count == 0` asks for the count (SUCCESS and 0 when
//! there are none, else INSUFFICIENT_SIZE and the count); a `*count` smaller than the number of
//! processes gets INSUFFICIENT_SIZE and the number, nothing written; otherwise the entries are
//! written and `*count` set to their number.
//!
//! Invariants: entries are written by byte offset with the stride of the variant (16 for v1, 24
//! for v2/v3, or the scenario's `process_struct_size` — 32 emulates early R535 drivers in the v3
//! call); at most `*count` entries are written, i.e. never more than `*count * stride` bytes. With
//! stride 32 a caller that sized its buffer for 24-byte entries gets scrambled entries and, past
//! its buffer, an overflow: that is the driver bug being emulated, on purpose.

use std::ffi::c_uint;

use gpuwatch_sim::nvml::code;

use crate::ffi_types::{
    NO_INSTANCE, NvmlDevice, NvmlReturn, PROCESS_R535_SIZE, PROCESS_V1_SIZE, PROCESS_V2_SIZE,
};
use crate::{Device, device_call};

/// Which entry layout to write.
#[derive(Clone, Copy)]
enum Layout {
    /// 16 bytes: pid, pad, usedGpuMemory.
    V1,
    /// 24 bytes: + gpuInstanceId, computeInstanceId.
    V2,
    /// The v3 call: 24 bytes, or 32 when the scenario emulates early R535 drivers.
    V3,
}

fn stride(layout: Layout, d: &Device) -> usize {
    match layout {
        Layout::V1 => PROCESS_V1_SIZE,
        Layout::V2 => PROCESS_V2_SIZE,
        Layout::V3 if d.scenario.process_struct_size() == 32 => PROCESS_R535_SIZE,
        Layout::V3 => PROCESS_V2_SIZE,
    }
}

/// Write one entry at `base` (zeroing its padding).
///
/// # Safety
/// `base` must be valid for `stride` bytes of writes.
unsafe fn write_entry(base: *mut u8, stride: usize, pid: u32, used: u64, gi: Option<u32>) {
    // SAFETY: the caller guarantees `stride` writable bytes at `base`; all offsets are inside.
    unsafe {
        std::ptr::write_bytes(base, 0, stride);
        base.cast::<u32>().write_unaligned(pid);
        base.add(8).cast::<u64>().write_unaligned(used);
        if stride >= PROCESS_V2_SIZE {
            // On a MIG instance: its GPU instance id and compute instance 0.
            base.add(16)
                .cast::<u32>()
                .write_unaligned(gi.unwrap_or(NO_INSTANCE));
            base.add(20)
                .cast::<u32>()
                .write_unaligned(if gi.is_some() { 0 } else { NO_INSTANCE });
        }
        // At 32 bytes, usedGpuCcProtectedMemory (offset 24) stays 0 from the zeroing.
    }
}

/// The shared body; `compute` is false for graphics and MPS queries (always empty here).
unsafe fn running_processes(
    device: NvmlDevice,
    symbol: &str,
    count: *mut c_uint,
    infos: *mut u8,
    layout: Layout,
    compute: bool,
) -> NvmlReturn {
    device_call(device, symbol, |d| {
        if count.is_null() {
            return code::INVALID_ARGUMENT;
        }
        // A MIG device lists its instance's processes; the parent lists every process.
        let procs = match (compute, d.mig) {
            (false, _) => Vec::new(),
            (true, Some(m)) => d.scenario.mig_processes_at(d.index, m, d.tick),
            (true, None) => d.scenario.processes_at(d.index, d.tick),
        };
        let gi_of = |pid: u32| {
            d.scenario
                .processes()
                .iter()
                .find(|p| p.pid == pid)
                .and_then(|p| p.mig)
        };
        let n = procs.len() as c_uint;
        // SAFETY: `count` is non-null and the caller's in/out count.
        let capacity = unsafe { count.read_unaligned() };
        if infos.is_null() && capacity > 0 {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: as above.
        unsafe { count.write_unaligned(n) };
        if capacity < n {
            return code::INSUFFICIENT_SIZE;
        }
        let stride = stride(layout, d);
        for (k, p) in procs.iter().enumerate() {
            // SAFETY: k < n <= capacity, and the caller promised `capacity` entries of *its*
            // idea of the stride; with the emulated 32-byte stride that promise can be too small
            // (the emulated driver bug, see the module doc).
            unsafe {
                write_entry(
                    infos.add(k * stride),
                    stride,
                    p.pid,
                    p.used_bytes,
                    gi_of(p.pid),
                )
            };
        }
        code::SUCCESS
    })
}

macro_rules! processes_fn {
    ($name:ident, $layout:expr, $compute:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            device: NvmlDevice,
            count: *mut c_uint,
            infos: *mut u8,
        ) -> NvmlReturn {
            unsafe { running_processes(device, stringify!($name), count, infos, $layout, $compute) }
        }
    };
}

processes_fn!(nvmlDeviceGetComputeRunningProcesses, Layout::V1, true);
processes_fn!(nvmlDeviceGetComputeRunningProcesses_v2, Layout::V2, true);
processes_fn!(nvmlDeviceGetComputeRunningProcesses_v3, Layout::V3, true);
processes_fn!(nvmlDeviceGetGraphicsRunningProcesses, Layout::V1, false);
processes_fn!(nvmlDeviceGetGraphicsRunningProcesses_v2, Layout::V2, false);
processes_fn!(nvmlDeviceGetGraphicsRunningProcesses_v3, Layout::V3, false);
processes_fn!(
    nvmlDeviceGetMPSComputeRunningProcesses_v3,
    Layout::V3,
    false
);
