//! The management calls through nvml-wrapper: setters checked against the constraints and
//! supported clocks the getters report, NO_PERMISSION without privilege, faults on setters,
//! the supported-clock lists' count protocol, and the settings living in the session (a
//! re-init after the last shutdown starts from the scenario again). Settings shared between
//! processes through a state directory: `tests/shared_state.rs`.

mod support;

use std::ffi::c_uint;

use gpuwatch_sim::Scenario;
use nvml_wrapper::enum_wrappers::device::{Clock, ComputeMode};
use nvml_wrapper::enums::device::GpuLockedClocksSetting;
use nvml_wrapper::error::NvmlError;
use support::Fake;

const MACHINE: &str = r#"
[scenario]
name = "manage"
privileged = true

[[gpu]]
model = "H100-SXM-80GB"

[[gpu]]
model = "T4"

[[gpu]]
model = "RTX-4090"

[[fault]]
gpu = 2
symbol = "nvmlDeviceSetPowerManagementLimit"
error = "IN_USE"
"#;

fn locked(min: u32, max: u32) -> GpuLockedClocksSetting {
    GpuLockedClocksSetting::Numeric {
        min_clock_mhz: min,
        max_clock_mhz: max,
    }
}

#[test]
fn setters_change_what_the_getters_report_within_the_constraints() {
    let fake = Fake::with(MACHINE);
    let nvml = fake.nvml();
    let scenario = Scenario::from_toml_str(MACHINE, "manage").expect("valid");
    let mut h100 = nvml.device_by_index(0).expect("handle");
    let c = h100
        .power_management_limit_constraints()
        .expect("constraints");
    assert_eq!((c.min_limit, c.max_limit), (200_000, 700_000));

    h100.set_power_management_limit(450_000).expect("in range");
    assert_eq!(h100.power_management_limit().expect("limit"), 450_000);
    assert_eq!(h100.enforced_power_limit().expect("enforced"), 450_000);
    for bad in [199_999, 700_001] {
        assert!(matches!(
            h100.set_power_management_limit(bad),
            Err(NvmlError::InvalidArg)
        ));
    }
    assert_eq!(h100.power_management_limit().expect("unchanged"), 450_000);

    assert!(h100.is_in_persistent_mode().expect("persistence"));
    h100.set_persistent(false).expect("persistence off");
    assert!(!h100.is_in_persistent_mode().expect("persistence"));

    assert_eq!(h100.compute_mode().expect("mode"), ComputeMode::Default);
    h100.set_compute_mode(ComputeMode::ExclusiveProcess)
        .expect("exclusive process");
    assert_eq!(
        h100.compute_mode().expect("mode"),
        ComputeMode::ExclusiveProcess
    );
    assert!(matches!(
        h100.set_compute_mode(ComputeMode::ExclusiveThread),
        Err(NvmlError::InvalidArg)
    ));

    // Idle: the SM clock sits at the idle clock until locked higher.
    fake.set_tick(0);
    assert_eq!(h100.clock_info(Clock::SM).expect("sm"), 345);
    h100.set_gpu_locked_clocks(locked(1200, 1500))
        .expect("lock");
    assert_eq!(h100.clock_info(Clock::SM).expect("sm"), 1200);
    for (lo, hi) in [(1500, 1200), (100, 1200), (1200, 2000)] {
        assert!(matches!(
            h100.set_gpu_locked_clocks(locked(lo, hi)),
            Err(NvmlError::InvalidArg)
        ));
    }
    h100.reset_gpu_locked_clocks().expect("reset");
    assert_eq!(h100.clock_info(Clock::SM).expect("sm"), 345);
    h100.set_mem_locked_clocks(2619, 2619).expect("memory lock");
    assert!(matches!(
        h100.set_mem_locked_clocks(405, 2619),
        Err(NvmlError::InvalidArg)
    ));
    h100.reset_mem_locked_clocks().expect("memory reset");

    // Turing cannot lock memory clocks; a fault on a setter applies like on a getter.
    let mut t4 = nvml.device_by_index(1).expect("handle");
    assert!(matches!(
        t4.set_mem_locked_clocks(5001, 5001),
        Err(NvmlError::NotSupported)
    ));
    let mut rtx = nvml.device_by_index(2).expect("handle");
    assert!(matches!(
        rtx.set_power_management_limit(300_000),
        Err(NvmlError::InUse)
    ));
    assert_eq!(
        rtx.power_management_limit().expect("limit"),
        scenario.gpu(2).power_limit_mw
    );

    // The session holds the settings: a re-init after the last shutdown is a driver reload.
    drop(nvml);
    let nvml = fake.nvml();
    let h100 = nvml.device_by_index(0).expect("handle");
    assert_eq!(h100.power_management_limit().expect("limit"), 700_000);
    assert!(h100.is_in_persistent_mode().expect("persistence"));
}

#[test]
fn without_privilege_every_setter_answers_no_permission_and_changes_nothing() {
    let text = MACHINE.replace("privileged = true", "privileged = false");
    let fake = Fake::with(&text);
    let nvml = fake.nvml();
    let mut d = nvml.device_by_index(0).expect("handle");
    let results = [
        d.set_power_management_limit(450_000),
        d.set_persistent(false),
        d.set_compute_mode(ComputeMode::Prohibited),
        d.set_gpu_locked_clocks(locked(1200, 1500)),
        d.reset_gpu_locked_clocks(),
        d.set_mem_locked_clocks(2619, 2619),
        d.reset_mem_locked_clocks(),
    ];
    for r in results {
        assert!(matches!(r, Err(NvmlError::NoPermission)), "{r:?}");
    }
    assert_eq!(d.power_management_limit().expect("limit"), 700_000);
    assert!(d.is_in_persistent_mode().expect("persistence"));
    assert_eq!(d.compute_mode().expect("mode"), ComputeMode::Default);
}

#[test]
fn supported_clock_lists_follow_the_count_protocol() {
    let fake = Fake::with(MACHINE);
    let nvml = fake.nvml();
    let h100 = nvml.device_by_index(0).expect("handle");
    assert_eq!(h100.supported_memory_clocks().expect("memory"), vec![2619]);
    let g = h100.supported_graphics_clocks(2619).expect("graphics");
    assert_eq!((g.first(), g.last()), (Some(&1980), Some(&345)));
    assert!(matches!(
        h100.supported_graphics_clocks(1000),
        Err(NvmlError::NotFound)
    ));
    let rtx = nvml.device_by_index(2).expect("handle");
    assert_eq!(
        rtx.supported_memory_clocks().expect("memory"),
        vec![10501, 405]
    );

    // The raw call: a short count gets INSUFFICIENT_SIZE (7) and the needed count, and an
    // RTX 4090's list is longer than the 128 entries nvml-wrapper asks for at first.
    type Graphics =
        unsafe extern "C" fn(*mut std::ffi::c_void, c_uint, *mut c_uint, *mut c_uint) -> c_uint;
    // SAFETY: the export has NVML's signature for this call.
    let f = unsafe {
        fake.lib
            .get::<Graphics>(b"nvmlDeviceGetSupportedGraphicsClocks")
    }
    .expect("exported");
    let mut count: c_uint = 0;
    // SAFETY: a valid handle, a valid count, no buffer with count 0.
    let rc = unsafe { f(rtx.handle().cast(), 10501, &mut count, std::ptr::null_mut()) };
    assert_eq!((rc, count), (7, 155));
    let mut buf = vec![0; count as usize];
    // SAFETY: the buffer holds `count` entries.
    let rc = unsafe { f(rtx.handle().cast(), 10501, &mut count, buf.as_mut_ptr()) };
    assert_eq!((rc, buf[0], buf[154]), (0, 2520, 210));
}
