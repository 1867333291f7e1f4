//! `nvmlDeviceGetFieldValues`: NVML's batch read (what DCGM issues once per GPU per cycle).
//!
//! Each entry of the caller's array carries its own field id on the way in and its own return
//! code, value type, value and timestamp on the way out; the call itself fails only for a bad
//! handle, an uninitialised library or a fault the scenario puts on the batch symbol. A field
//! answers exactly as the single call that reads the same value would (its scenario faults,
//! NOT_SUPPORTED on models without it, a lost GPU), so a reader can fall back per field.
//!
//! Invariants: the GPU's state is computed once per call, whatever the number of fields (as
//! the driver serves fields of one source in one query); unknown field ids answer
//! NOT_SUPPORTED in their entry; ids are those of nvml.h before driver 580.82 (the ids used
//! here are outside the 251–273 range that 580.82 renumbered).

use std::ffi::c_int;

use gpuwatch_sim::nvml::code;

use crate::device_call;
use crate::ffi_types::{NvmlDevice, NvmlReturn};

/// `nvmlFieldValue_t` (40 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FieldValue {
    pub field_id: u32,
    pub scope_id: u32,
    pub timestamp: i64,
    pub latency_usec: i64,
    pub value_type: u32,
    pub nvml_return: u32,
    pub value: u64,
}

const _: () = assert!(std::mem::size_of::<FieldValue>() == 40);

/// `nvmlValueType_t`.
const UNSIGNED_INT: u32 = 1;
const UNSIGNED_LONG_LONG: u32 = 3;

/// The fields served, with the single call that reads the same value (its faults apply).
pub mod id {
    pub const ECC_SBE_VOL_TOTAL: u32 = 3;
    pub const ECC_DBE_VOL_TOTAL: u32 = 4;
    pub const TOTAL_ENERGY_CONSUMPTION: u32 = 83;
    pub const REMAPPED_COR: u32 = 142;
    pub const REMAPPED_UNC: u32 = 143;
    pub const REMAPPED_PENDING: u32 = 144;
    pub const REMAPPED_FAILURE: u32 = 145;
    pub const POWER_INSTANT: u32 = 186;
    pub const GPU_RECOVERY_ACTION: u32 = 230;
    pub const NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: u32 = 38;
    pub const NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: u32 = 45;
    pub const NVLINK_REPLAY_ERROR_COUNT_TOTAL: u32 = 52;
    pub const NVLINK_RECOVERY_ERROR_COUNT_TOTAL: u32 = 59;
    pub const NVLINK_LINK_COUNT: u32 = 91;
    pub const NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
    pub const NVLINK_THROUGHPUT_DATA_RX: u32 = 139;
    pub const NVLINK_GET_STATE: u32 = 165;
}

/// The scope that asks an NVLink throughput field for the sum over all links.
const ALL_LINKS: u32 = u32::MAX;

fn source_symbol(field: u32) -> Option<&'static str> {
    Some(match field {
        id::ECC_SBE_VOL_TOTAL | id::ECC_DBE_VOL_TOTAL => "nvmlDeviceGetTotalEccErrors",
        id::TOTAL_ENERGY_CONSUMPTION => "nvmlDeviceGetTotalEnergyConsumption",
        id::REMAPPED_COR | id::REMAPPED_UNC | id::REMAPPED_PENDING | id::REMAPPED_FAILURE => {
            "nvmlDeviceGetRemappedRows"
        }
        id::POWER_INSTANT => "nvmlDeviceGetPowerUsage",
        // No call of its own: it belongs to the memory-error management of the boards with
        // row remapping (Ampere datacenter and later), and answers as that call does.
        id::GPU_RECOVERY_ACTION => "nvmlDeviceGetRemappedRows",
        // The NVLink fields answer as the link state does (NOT_SUPPORTED without NVLink and
        // in MIG mode).
        id::NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
        | id::NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
        | id::NVLINK_REPLAY_ERROR_COUNT_TOTAL
        | id::NVLINK_RECOVERY_ERROR_COUNT_TOTAL
        | id::NVLINK_LINK_COUNT
        | id::NVLINK_THROUGHPUT_DATA_TX
        | id::NVLINK_THROUGHPUT_DATA_RX
        | id::NVLINK_GET_STATE => gpuwatch_sim::nvml::NVLINK_STATE,
        _ => return None,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: NvmlDevice,
    values_count: c_int,
    values: *mut FieldValue,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetFieldValues", |d| {
        let Ok(n) = usize::try_from(values_count) else {
            return code::INVALID_ARGUMENT;
        };
        if values.is_null() || n == 0 {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: non-null, and the caller passes an array of `values_count` entries.
        let entries = unsafe { std::slice::from_raw_parts_mut(values, n) };
        let s = d.state();
        let tick_ms = d.scenario.tick_ms() as i64;
        let timestamp_us = d.tick as i64 * tick_ms * 1000;
        for e in entries.iter_mut() {
            e.timestamp = timestamp_us;
            e.latency_usec = 0;
            e.value = 0;
            let Some(symbol) = source_symbol(e.field_id) else {
                e.nvml_return = code::NOT_SUPPORTED;
                continue;
            };
            if let Some(c) = d.scenario.call_error(d.index, symbol, d.tick) {
                e.nvml_return = c;
                continue;
            }
            if matches!(e.field_id, id::ECC_SBE_VOL_TOTAL | id::ECC_DBE_VOL_TOTAL)
                && !d.spec().ecc_mode
            {
                e.nvml_return = code::NOT_SUPPORTED;
                continue;
            }
            let spec = d.spec();
            // Per-link fields take the link in the scope; throughput also takes "all links".
            let per_link = |total: u64| -> Option<u64> {
                if e.scope_id == ALL_LINKS {
                    return Some(total);
                }
                let up = u64::from(s.nvlinks_up(spec.nvlinks)).max(1);
                crate::nvlink::link_up(spec, &s, e.scope_id)
                    .map(|on| if on { total / up } else { 0 })
            };
            let (ty, v) = match e.field_id {
                id::NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL => (UNSIGNED_LONG_LONG, s.nvlink_crc_flit),
                id::NVLINK_CRC_DATA_ERROR_COUNT_TOTAL => (UNSIGNED_LONG_LONG, s.nvlink_crc_data),
                id::NVLINK_REPLAY_ERROR_COUNT_TOTAL => (UNSIGNED_LONG_LONG, s.nvlink_replay),
                id::NVLINK_RECOVERY_ERROR_COUNT_TOTAL => (UNSIGNED_LONG_LONG, s.nvlink_recovery),
                id::NVLINK_LINK_COUNT => (UNSIGNED_INT, u64::from(spec.nvlinks)),
                id::NVLINK_THROUGHPUT_DATA_TX | id::NVLINK_THROUGHPUT_DATA_RX => {
                    let total = if e.field_id == id::NVLINK_THROUGHPUT_DATA_TX {
                        s.nvlink_tx_kib
                    } else {
                        s.nvlink_rx_kib
                    };
                    match per_link(total) {
                        Some(v) => (UNSIGNED_LONG_LONG, v),
                        None => {
                            e.nvml_return = code::INVALID_ARGUMENT;
                            continue;
                        }
                    }
                }
                id::NVLINK_GET_STATE => match crate::nvlink::link_up(spec, &s, e.scope_id) {
                    Some(up) => (UNSIGNED_INT, u64::from(up)),
                    None => {
                        e.nvml_return = code::INVALID_ARGUMENT;
                        continue;
                    }
                },
                id::ECC_SBE_VOL_TOTAL => (UNSIGNED_LONG_LONG, s.ecc_corrected),
                id::ECC_DBE_VOL_TOTAL => (UNSIGNED_LONG_LONG, s.ecc_uncorrected),
                id::TOTAL_ENERGY_CONSUMPTION => (UNSIGNED_LONG_LONG, s.energy_mj),
                id::REMAPPED_COR => (UNSIGNED_INT, u64::from(s.remapped_rows_corr)),
                id::REMAPPED_UNC => (UNSIGNED_INT, u64::from(s.remapped_rows_unc)),
                id::REMAPPED_PENDING => (UNSIGNED_INT, u64::from(s.remap_pending)),
                id::REMAPPED_FAILURE => (UNSIGNED_INT, u64::from(s.remap_failure)),
                id::GPU_RECOVERY_ACTION => (UNSIGNED_INT, u64::from(s.recovery_action)),
                _ => (UNSIGNED_INT, u64::from(s.power_mw)),
            };
            e.value_type = ty;
            e.value = v;
            e.nvml_return = code::SUCCESS;
        }
        code::SUCCESS
    })
}
