//! NVLink and the NVLink fabric: `nvmlDeviceGetNvLinkState` per link, the NVLink fields of
//! the batch read (`fields`), and `nvmlDeviceGetGpuFabricInfo` / `…InfoV`.
//!
//! Invariants: a GPU without NVLink (or in MIG mode) answers NOT_SUPPORTED to every NVLink
//! read, and one outside a fabric to both fabric calls (the engine puts the symbols in the
//! GPU's unsupported list); a link number at or past the GPU's link count is
//! INVALID_ARGUMENT, as the driver answers; the versioned call checks its struct's version
//! (v2 or v3) and answers ARGUMENT_VERSION_MISMATCH otherwise.

use std::ffi::c_uint;

use gpuwatch_sim::nvml::code;
use gpuwatch_sim::{GpuSpec, GpuState};

use crate::ffi_types::{NvmlDevice, NvmlReturn};
use crate::{device_call, out};

/// `NVML_NVLINK_STATE_ACTIVE` / `_INACTIVE` (`nvmlEnableState_t`).
const ACTIVE: c_uint = 1;
const INACTIVE: c_uint = 0;

/// Whether link `link` is up; `None` for a link the GPU does not have.
pub(crate) fn link_up(spec: &GpuSpec, s: &GpuState, link: u32) -> Option<bool> {
    (link < spec.nvlinks).then(|| s.nvlink_down_mask & (1 << link) == 0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: NvmlDevice,
    link: c_uint,
    is_active: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetNvLinkState", |d| {
        match link_up(d.spec(), &d.state(), link) {
            // SAFETY: `is_active` is null (rejected) or the caller's output.
            Some(up) => unsafe { out(is_active, if up { ACTIVE } else { INACTIVE }) },
            None => code::INVALID_ARGUMENT,
        }
    })
}

/// `nvmlGpuFabricInfo_t` (v1, unversioned).
#[repr(C)]
pub struct FabricInfoV1 {
    pub cluster_uuid: [u8; 16],
    pub status: u32,
    pub clique_id: u32,
    pub state: u8,
}

/// `nvmlGpuFabricInfo_v3_t` (v2 is its prefix, without `health_summary`).
#[repr(C)]
pub struct FabricInfoV3 {
    pub version: u32,
    pub cluster_uuid: [u8; 16],
    pub status: u32,
    pub clique_id: u32,
    pub state: u8,
    pub health_mask: u32,
    pub health_summary: u8,
}

/// `NVML_GPU_FABRIC_HEALTH_SUMMARY_*`: healthy (1) once registered, unhealthy (2) when the
/// registration failed, not supported (0) before it completes.
fn health_summary(s: &GpuState) -> u8 {
    match (s.fabric_state, s.fabric_status) {
        (3, 0) => 1,
        (3, _) => 2,
        _ => 0,
    }
}

/// The cluster a simulated fabric belongs to: one per scenario seed, the same for every GPU.
fn cluster_uuid(d: &crate::Device) -> [u8; 16] {
    let mut u = [0u8; 16];
    let h = d.scenario.seed().to_le_bytes();
    u[..8].copy_from_slice(&h);
    u[8..].copy_from_slice(&h);
    u
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfo(
    device: NvmlDevice,
    info: *mut FabricInfoV1,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetGpuFabricInfo", |d| {
        let s = d.state();
        let v = FabricInfoV1 {
            cluster_uuid: cluster_uuid(d),
            status: s.fabric_status,
            clique_id: 1,
            state: s.fabric_state as u8,
        };
        // SAFETY: `info` is null (rejected) or the caller's output.
        unsafe { out(info, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfoV(
    device: NvmlDevice,
    info: *mut FabricInfoV3,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetGpuFabricInfoV", |d| {
        if info.is_null() {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: non-null; the caller's struct starts with its version word.
        let version = unsafe { info.cast::<u32>().read_unaligned() };
        let v3 = std::mem::size_of::<FabricInfoV3>() as u32 | (3 << 24);
        // v2 ends before `health_summary`: its size is the offset of that field, rounded up
        // to the struct's alignment (4).
        let v2 = (std::mem::offset_of!(FabricInfoV3, health_summary) as u32).next_multiple_of(4)
            | (2 << 24);
        if version != v3 && version != v2 {
            return code::ARGUMENT_VERSION_MISMATCH;
        }
        let s = d.state();
        let v = FabricInfoV3 {
            version,
            cluster_uuid: cluster_uuid(d),
            status: s.fabric_status,
            clique_id: 1,
            state: s.fabric_state as u8,
            health_mask: 0,
            health_summary: health_summary(&s),
        };
        // SAFETY: non-null; a v3 caller's struct holds all of it, a v2 caller's all but the
        // last field, which is not written.
        unsafe {
            if version == v3 {
                info.write_unaligned(v);
            } else {
                let p = info.cast::<u8>();
                let n = std::mem::offset_of!(FabricInfoV3, health_summary);
                std::ptr::copy_nonoverlapping((&v as *const FabricInfoV3).cast::<u8>(), p, n);
            }
        }
        code::SUCCESS
    })
}
