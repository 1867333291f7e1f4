//! The modes a scenario sets, through nvml-wrapper: compute mode (and the setter changing it
//! from there), ECC mode with its pending value and the ECC counters it gates, MIG's pending
//! mode, a failed row remap, and an `nvmlInit` that blocks.

mod support;

use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{ComputeMode, EccCounter, MemoryError};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use support::Fake;

const MODES: &str = r#"
[scenario]
name = "modes"
privileged = true

[[gpu]]
model = "A100-SXM4-80GB"
compute_mode = "prohibited"
ecc_mode = false
ecc_mode_pending = true
mig_mode_pending = true
[[gpu.timeline]]
remapped_rows_unc = 3
remap_failure = true

[[gpu]]
model = "H100-SXM-80GB"
compute_mode = "Exclusive-Process"
mig_mode = true
[[gpu.timeline]]
ecc_corrected = 7
"#;

/// `nvmlFieldValue_t` ids (nvml.h, before driver 580.82).
const ECC_SBE_VOL_TOTAL: u32 = 3;
const REMAPPED_FAILURE: u32 = 145;

#[test]
fn compute_mode_comes_from_the_scenario_and_the_setter_changes_it() {
    let fake = Fake::with(MODES);
    let nvml = fake.nvml();
    let mut d0 = nvml.device_by_index(0).expect("handle");
    let d1 = nvml.device_by_index(1).expect("handle");
    assert_eq!(d0.compute_mode().expect("mode"), ComputeMode::Prohibited);
    assert_eq!(
        d1.compute_mode().expect("mode"),
        ComputeMode::ExclusiveProcess
    );
    d0.set_compute_mode(ComputeMode::Default).expect("set");
    assert_eq!(d0.compute_mode().expect("mode"), ComputeMode::Default);
    assert_eq!(
        d1.compute_mode().expect("mode"),
        ComputeMode::ExclusiveProcess
    );
}

#[test]
fn ecc_off_gates_the_counters_and_pending_modes_are_reported() {
    let fake = Fake::with(MODES);
    let nvml = fake.nvml();
    let d0 = nvml.device_by_index(0).expect("handle");
    let d1 = nvml.device_by_index(1).expect("handle");
    let ecc = d0.is_ecc_enabled().expect("ecc");
    assert!(!ecc.currently_enabled && ecc.pending_enabled);
    assert!(matches!(
        d0.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
        Err(NvmlError::NotSupported)
    ));
    let ecc = d1.is_ecc_enabled().expect("ecc");
    assert!(ecc.currently_enabled && ecc.pending_enabled);
    assert_eq!(
        d1.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .expect("count"),
        7
    );
    let mig = d0.mig_mode().expect("mig");
    assert_eq!((mig.current, mig.pending), (0, 1));
    let mig = d1.mig_mode().expect("mig");
    assert_eq!((mig.current, mig.pending), (1, 1));

    // The batch read answers each field as the single call would.
    let ids = [FieldId(ECC_SBE_VOL_TOTAL), FieldId(REMAPPED_FAILURE)];
    let values = |d: &nvml_wrapper::Device| -> Vec<Result<SampleValue, NvmlError>> {
        d.field_values_for(&ids)
            .expect("batch")
            .into_iter()
            .map(|f| f.expect("entry").value)
            .collect()
    };
    let got = values(&d0);
    assert!(
        matches!(got[0], Err(NvmlError::NotSupported)),
        "{:?}",
        got[0]
    );
    assert_eq!(got[1].as_ref().ok(), Some(&SampleValue::U32(1)));
    let got = values(&d1);
    assert_eq!(got[0].as_ref().ok(), Some(&SampleValue::U64(7)));
    assert_eq!(got[1].as_ref().ok(), Some(&SampleValue::U32(0)));
}

#[test]
fn init_blocks_for_the_scenarios_init_block() {
    let fake = Fake::with(
        "[scenario]\nname = \"slow\"\ninit_block = \"1500ms\"\n[[gpu]]\nmodel = \"T4\"\n",
    );
    let started = Instant::now();
    let nvml = fake.nvml();
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert_eq!(nvml.device_count().expect("count"), 1);
}
