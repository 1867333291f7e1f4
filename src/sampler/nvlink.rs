//! NVLink and the NVLink fabric of one GPU: each link's state, the error counters (totals
//! over the links), the data moved, and the fabric registration.
//!
//! The NVLink values come in one `nvmlDeviceGetFieldValues` call per tick: the link count,
//! the four error totals, the throughput counters summed over all links (scope `UINT_MAX`),
//! and each link's state (`NVML_FI_DEV_NVLINK_GET_STATE`, scoped by link). The fabric comes
//! from `nvmlDeviceGetGpuFabricInfoV` (v1 `nvmlDeviceGetGpuFabricInfo` where the driver
//! predates the versioned call).
//!
//! Invariants: a GPU without NVLink (the link count NOT_SUPPORTED or 0, MIG mode) has no
//! NVLink values, never zeros, and is not asked again until the next inventory refresh; a
//! link whose state entry fails is neither up nor down (the count is `None` when any fails);
//! a GPU outside a fabric (NOT_SUPPORTED, or the state NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)
//! has no fabric values and is not asked again until the refresh. Field ids are below 251
//! (outside the range driver 580.82 renumbered).

use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::sys_exports::field_id as fid;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlFieldValue_t, nvmlGpuFabricInfo_t, nvmlGpuFabricInfoV_t,
    nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE as DOUBLE,
    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG as SIGNED_LONG_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT as UNSIGNED_INT,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG as UNSIGNED_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG as UNSIGNED_LONG_LONG,
};

use super::support::Support;

/// `NVML_NVLINK_MAX_LINKS`.
const MAX_LINKS: usize = 18;
/// The batch: link count, four error totals, TX and RX over all links, then one state per
/// link.
const HEAD: usize = 7;
const BATCH: usize = HEAD + MAX_LINKS;
const ALL_LINKS: u32 = u32::MAX;

const FIELDS: &str = "nvlink";
const FABRIC: &str = "fabric_info";

/// One tick's NVLink values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Links {
    pub up: Option<u32>,
    pub down_mask: Option<u32>,
    pub crc_flit: Option<u64>,
    pub crc_data: Option<u64>,
    pub replay: Option<u64>,
    pub recovery: Option<u64>,
    /// TX + RX, KiB.
    pub kib: Option<u64>,
}

/// The fabric registration: (state, status).
pub type Fabric = (u8, u32);

fn value(f: &nvmlFieldValue_t) -> Option<u64> {
    if f.nvmlReturn != 0 {
        return None;
    }
    // SAFETY: the union member read is the one `valueType` names.
    unsafe {
        #[allow(non_upper_case_globals)]
        match f.valueType {
            UNSIGNED_INT => Some(u64::from(f.value.uiVal)),
            UNSIGNED_LONG => Some(f.value.ulVal),
            UNSIGNED_LONG_LONG => Some(f.value.ullVal),
            SIGNED_LONG_LONG => u64::try_from(f.value.sllVal).ok(),
            DOUBLE => {
                let d = f.value.dVal;
                (d.is_finite() && d >= 0.0).then_some(d as u64)
            }
            _ => None,
        }
    }
}

fn batch(nvml: &Nvml, dev: &Device<'_>) -> Result<[nvmlFieldValue_t; BATCH], NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetFieldValues
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    // SAFETY: an all-zero nvmlFieldValue_t is a valid value (plain integers and a union).
    let mut v: [nvmlFieldValue_t; BATCH] = unsafe { std::mem::zeroed() };
    let head = [
        (fid::NVML_FI_DEV_NVLINK_LINK_COUNT, 0),
        (fid::NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, 0),
        (fid::NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, 0),
        (fid::NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, 0),
        (fid::NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, 0),
        (fid::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
        (fid::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
    ];
    for (slot, (id, scope)) in v.iter_mut().zip(head) {
        slot.fieldId = id;
        slot.scopeId = scope;
    }
    for (link, slot) in v[HEAD..].iter_mut().enumerate() {
        slot.fieldId = fid::NVML_FI_DEV_NVLINK_GET_STATE;
        slot.scopeId = link as u32;
    }
    // SAFETY: a valid handle and an array of BATCH entries.
    nvml_try(unsafe { sym(dev.handle(), BATCH as i32, v.as_mut_ptr()) })?;
    Ok(v)
}

/// Reads the GPU's NVLink values (one driver call).
pub fn read_links(nvml: &Nvml, dev: &Device<'_>, s: &mut Support) -> Links {
    let Some(v) = s.read(FIELDS, || batch(nvml, dev)) else {
        return Links::default();
    };
    let count = match (v[0].nvmlReturn, value(&v[0])) {
        (_, Some(n)) if n > 0 => (n as usize).min(MAX_LINKS),
        // No NVLink here (a PCIe board, MIG mode): ask again after the refresh.
        (0 | 3, _) => {
            s.fail(FIELDS, &NvmlError::NotSupported);
            return Links::default();
        }
        _ => return Links::default(),
    };
    // Each link's state, folded into the down mask without an allocation on the sampling path.
    let states = v[HEAD..HEAD + count].iter().map(value);
    let (up, down_mask) = match states.enumerate().try_fold(0u32, |m, (i, s)| {
        s.map(|s| if s == 0 { m | (1 << i) } else { m })
    }) {
        Some(mask) => (Some(count as u32 - mask.count_ones()), Some(mask)),
        None => (None, None),
    };
    Links {
        up,
        down_mask,
        crc_flit: value(&v[1]),
        crc_data: value(&v[2]),
        replay: value(&v[3]),
        recovery: value(&v[4]),
        kib: value(&v[5])
            .zip(value(&v[6]))
            .map(|(t, r)| t.saturating_add(r)),
    }
}

/// The registration's (state, status), as the driver answers.
pub(crate) fn fabric_info(nvml: &Nvml, dev: &Device<'_>) -> Result<Fabric, NvmlError> {
    let lib = nvml.lib();
    if let Ok(sym) = lib.nvmlDeviceGetGpuFabricInfoV.as_ref() {
        // SAFETY: an all-zero struct is valid; the version word says which the caller holds.
        let mut info: nvmlGpuFabricInfoV_t = unsafe { std::mem::zeroed() };
        info.version = std::mem::size_of::<nvmlGpuFabricInfoV_t>() as u32 | (3 << 24);
        // SAFETY: a valid handle and a valid out-pointer of the version given.
        match nvml_try(unsafe { sym(dev.handle(), &mut info) }) {
            Ok(()) => return Ok((info.state, info.status)),
            Err(NvmlError::FunctionNotFound) => {}
            Err(e) => return Err(e),
        }
    }
    let sym = lib
        .nvmlDeviceGetGpuFabricInfo
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    // SAFETY: an all-zero struct is valid.
    let mut info: nvmlGpuFabricInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid handle and a valid out-pointer.
    nvml_try(unsafe { sym(dev.handle(), &mut info) })?;
    Ok((info.state, info.status))
}

/// Reads the GPU's fabric registration: `None` outside a fabric.
pub fn read_fabric(nvml: &Nvml, dev: &Device<'_>, s: &mut Support) -> Option<Fabric> {
    let (state, status) = s.read(FABRIC, || fabric_info(nvml, dev))?;
    if !(1..=3).contains(&state) {
        // NVML_GPU_FABRIC_STATE_NOT_SUPPORTED (0), or a state this build does not know.
        s.fail(FABRIC, &NvmlError::NotSupported);
        return None;
    }
    Some((state, status))
}
