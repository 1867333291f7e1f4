//! GPM through nvml-wrapper, the client gpuwatch uses: support by model, two samples and the
//! tensor, SM and DRAM activity between them, per-metric NOT_SUPPORTED, checked handles,
//! faults.

mod support;

use gpuwatch_sim::Scenario;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use support::Fake;

const GPM: &str = r#"
[scenario]
name = "gpm"
seed = 5

[[gpu]]
model = "H200-141GB"
[[gpu.timeline]]
util_gpu = 90
tensor_active = 20
[[gpu.timeline]]
from = "10s"
tensor_active = { ramp = [40, 80], over = "20s" }

[[gpu]]
model = "A100-SXM4-80GB"
[[gpu.timeline]]
util_gpu = 90

[[gpu]]
model = "A100-SXM4-80GB"
supported = ["nvmlGpmSampleGet"]

[[fault]]
gpu = 0
symbol = "nvmlGpmSampleGet"
from = "100s"
until = "110s"
error = "TIMEOUT"
"#;

#[test]
fn tensor_activity_is_the_mean_between_two_samples() {
    let fake = Fake::with(GPM);
    let nvml = fake.nvml();
    let scenario = Scenario::from_toml_str(GPM, "gpm").expect("valid");
    let h200 = nvml.device_by_index(0).expect("handle");
    assert!(h200.gpm_support().expect("support"));
    fake.set_tick(5);
    let first = h200.gpm_sample().expect("sample");
    fake.set_tick(15);
    let second = h200.gpm_sample().expect("sample");
    assert_eq!(fake.gpm_samples_live(), 2);
    let got = gpm_metrics_get(
        &nvml,
        &first,
        &second,
        &[
            GpmMetricId::AnyTensorUtil,
            GpmMetricId::IntegerUtil,
            GpmMetricId::SmUtil,
            GpmMetricId::SmOccupancy,
            GpmMetricId::DramBwUtil,
        ],
    )
    .expect("metrics");
    let mean = |of: fn(&gpuwatch_sim::GpuState) -> u32| {
        (6..=15)
            .map(|t| f64::from(of(&scenario.gpu_state(0, t))))
            .sum::<f64>()
            / 10.0
    };
    for (k, id, want) in [
        (2, GpmMetricId::SmUtil, mean(|s| s.sm_active_pct)),
        (3, GpmMetricId::SmOccupancy, mean(|s| s.sm_occupancy_pct)),
        (4, GpmMetricId::DramBwUtil, mean(|s| s.dram_active_pct)),
    ] {
        let r = got[k].as_ref().expect("answered");
        assert_eq!(r.metric_id, id);
        assert!(
            (r.value - want).abs() < 1e-9,
            "{id:?}: {} vs {want}",
            r.value
        );
        assert!(want > 20.0, "a GPU at 90 % is active: {id:?} {want}");
    }
    let want: f64 = (6..=15)
        .map(|t| f64::from(scenario.gpu_state(0, t).tensor_active_pct))
        .sum::<f64>()
        / 10.0;
    let tensor = got[0].as_ref().expect("tensor");
    assert_eq!(tensor.metric_id, GpmMetricId::AnyTensorUtil);
    assert!(
        (tensor.value - want).abs() < 1e-9,
        "{} vs {want}",
        tensor.value
    );
    assert!(want > 20.0 && want < 45.0, "both segments count: {want}");
    assert_eq!(tensor.metric_info.unit, "%");
    assert!(
        matches!(got[1], Err(NvmlError::NotSupported)),
        "{:?}",
        got[1]
    );
    // Out of order, or of two GPUs: INVALID_ARGUMENT, never a wrong number.
    assert!(matches!(
        gpm_metrics_get(&nvml, &second, &first, &[GpmMetricId::AnyTensorUtil]),
        Err(NvmlError::InvalidArg)
    ));
    let other = nvml.device_by_index(2).expect("handle");
    let foreign = other
        .gpm_sample()
        .expect("a model with GPM listed as supported");
    assert!(matches!(
        gpm_metrics_get(&nvml, &first, &foreign, &[GpmMetricId::AnyTensorUtil]),
        Err(NvmlError::InvalidArg)
    ));
    drop((first, second, foreign));
    assert_eq!(
        fake.gpm_samples_live(),
        0,
        "freed samples leave the registry"
    );
}

#[test]
fn models_before_hopper_and_faults_answer_as_the_driver_does() {
    let fake = Fake::with(GPM);
    let nvml = fake.nvml();
    let a100 = nvml.device_by_index(1).expect("handle");
    // The driver answers SUCCESS with "not supported" on older boards...
    assert!(!a100.gpm_support().expect("support query"));
    // ...and NOT_SUPPORTED when sampled anyway; the wrapper frees the sample it allocated.
    assert!(matches!(a100.gpm_sample(), Err(NvmlError::NotSupported)));
    assert_eq!(fake.gpm_samples_live(), 0);
    let h200 = nvml.device_by_index(0).expect("handle");
    fake.set_tick(105);
    assert!(matches!(h200.gpm_sample(), Err(NvmlError::Timeout)));
    fake.set_tick(110);
    assert!(h200.gpm_sample().is_ok(), "the fault's window is over");
}
