//! The counters of a tick read in one `nvmlDeviceGetFieldValues` call (NVML's batch API, as
//! DCGM reads them): total energy, volatile ECC totals, the four remapped-row values and the
//! recovery action the driver asks for (a field only: no call of its own, so no fallback).
//! On a real driver every NVML call is an ioctl; one batch replaces four calls per GPU per
//! tick.
//!
//! Invariants: a value comes from the batch entry when that entry succeeded, otherwise from
//! the single call that reads it (a driver without the batch API, or one that serves a field
//! only through its own call); both go through [`Support`], so a value that neither can read
//! is `None` and NOT_SUPPORTED stops its calls until the next reprobe. Field ids are those of
//! nvml.h below 251 (the range 580.82 renumbered is not used).

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id as fid;
use nvml_wrapper::{Device, Nvml};

use super::support::Support;

/// The batch, in this order.
const IDS: [FieldId; 8] = [
    FieldId(fid::NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION),
    FieldId(fid::NVML_FI_DEV_ECC_SBE_VOL_TOTAL),
    FieldId(fid::NVML_FI_DEV_ECC_DBE_VOL_TOTAL),
    FieldId(fid::NVML_FI_DEV_REMAPPED_COR),
    FieldId(fid::NVML_FI_DEV_REMAPPED_UNC),
    FieldId(fid::NVML_FI_DEV_REMAPPED_PENDING),
    FieldId(fid::NVML_FI_DEV_REMAPPED_FAILURE),
    FieldId(fid::NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
];

/// What one tick's batch gave.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Counters {
    pub energy_mj: Option<u64>,
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    /// (correctable, uncorrectable, pending, failure).
    pub remapped: Option<(u32, u32, bool, bool)>,
    /// `nvmlDeviceGpuRecoveryAction_t` (0 none … 7 system reboot); `None` where the driver
    /// does not report it (before R550, boards without row remapping).
    pub recovery_action: Option<u32>,
}

fn as_u64(v: &SampleValue) -> Option<u64> {
    match *v {
        SampleValue::U32(x) => Some(u64::from(x)),
        SampleValue::U64(x) => Some(x),
        SampleValue::I64(x) => u64::try_from(x).ok(),
        SampleValue::F64(x) => (x.is_finite() && x >= 0.0).then_some(x as u64),
    }
}

/// Reads the counters: one batch call, single calls only for what the batch did not give.
pub fn read_counters(nvml: &Nvml, dev: &Device<'_>, s: &mut Support) -> Counters {
    let batch = s.read("field_values", || dev.field_values_for(&IDS));
    let mut got: [Option<u64>; 8] = [None; 8];
    if let Some(entries) = &batch {
        for (slot, entry) in got.iter_mut().zip(entries) {
            if let Ok(sample) = entry
                && let Ok(v) = &sample.value
            {
                *slot = as_u64(v);
            }
        }
    }
    let energy_mj = got[0].or_else(|| s.read("total_energy", || dev.total_energy_consumption()));
    let ecc_corrected = got[1].or_else(|| {
        s.read("ecc_corrected", || {
            dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
        })
    });
    let ecc_uncorrected = got[2].or_else(|| {
        s.read("ecc_uncorrected", || {
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        })
    });
    let remapped = match (got[3], got[4], got[5], got[6]) {
        (Some(c), Some(u), Some(p), Some(f)) => Some((
            u32::try_from(c).unwrap_or(u32::MAX),
            u32::try_from(u).unwrap_or(u32::MAX),
            p != 0,
            f != 0,
        )),
        _ => s.read("remapped_rows", || remapped_rows(nvml, dev)),
    };
    Counters {
        energy_mj,
        ecc_corrected,
        ecc_uncorrected,
        remapped,
        recovery_action: got[7].and_then(|v| u32::try_from(v).ok()),
    }
}

/// (correctable, uncorrectable, pending, failure) remapped rows; nvml-wrapper lacks this call.
pub(crate) fn remapped_rows(
    nvml: &Nvml,
    dev: &Device<'_>,
) -> Result<(u32, u32, bool, bool), NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: valid handle and four valid out-pointers to u32.
    nvml_try(unsafe {
        sym(
            dev.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    })?;
    Ok((corr, unc, pending != 0, failure != 0))
}
