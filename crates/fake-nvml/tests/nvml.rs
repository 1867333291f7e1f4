//! Integration tests: load the built fake library (a private copy per test) through nvml-wrapper
//! — the client gpuwatch uses — or raw `dlsym` where the wrapper cannot show the behaviour.

mod support;

use std::ffi::c_uint;
use std::time::{Duration, Instant};

use gpuwatch_sim::Scenario;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use support::{Fake, canonical};

const MIXED: &str = r#"
[scenario]
name = "mixed"
seed = 3
driver_version = "535.104.05"

[[gpu]]
model = "H100-SXM-80GB"
[[gpu.timeline]]
to = "100s"
util_gpu = { ramp = [0, 100] }
[[gpu.timeline]]
from = "100s"
util_gpu = 80
temp = 77
throttle = ["sw_power_cap"]

[[gpu]]
model = "T4"
lost_at = "10m"

[[gpu]]
model = "RTX-4090"

[[process]]
pid = 1234
name = "python"
gpu = 0
mem_mib = 20000

[[process]]
pid = 1235
name = "python"
gpus = [0, 1]
start = "1m"
mem_mib = 3000

[[fault]]
gpu = 2
symbol = "nvmlDeviceGetPowerUsage"
from = "5m"
until = "6m"
error = "TIMEOUT"

[[fault]]
gpu = 0
symbol = "nvmlDeviceGetTemperature"
from = "7m"
until = "8m"
block = "300ms"

[[event]]
gpu = 1
at = "2m"
xid = 48
"#;

#[test]
fn values_match_the_engine() {
    let fake = Fake::with(MIXED);
    let nvml = fake.nvml();
    let scenario = Scenario::from_toml_str(MIXED, "mixed").expect("valid");
    assert_eq!(nvml.device_count().expect("count"), 3);
    assert_eq!(nvml.sys_driver_version().expect("driver"), "535.104.05");
    assert_eq!(nvml.sys_cuda_driver_version().expect("cuda"), 12040);
    for tick in [0u64, 50, 99, 150] {
        fake.set_tick(tick);
        for i in 0..3 {
            let d = nvml.device_by_index(i as u32).expect("handle");
            let (spec, st) = (scenario.gpu(i), scenario.gpu_state(i, tick));
            assert_eq!(d.name().expect("name"), spec.name);
            assert_eq!(d.uuid().expect("uuid"), spec.uuid);
            assert_eq!(d.index().expect("index"), i as u32);
            assert_eq!(d.pci_info().expect("pci").bus_id, spec.pci_bus_id);
            let m = d.memory_info().expect("memory");
            assert_eq!(
                (m.total, m.reserved, m.used, m.free),
                (
                    st.mem_total_bytes,
                    st.mem_reserved_bytes,
                    st.mem_used_bytes,
                    st.mem_free_bytes
                )
            );
            let u = d.utilization_rates().expect("util");
            assert_eq!((u.gpu, u.memory), (st.util_gpu, st.util_mem));
            assert_eq!(
                d.temperature(TemperatureSensor::Gpu).expect("temp"),
                st.temp_c
            );
            assert_eq!(d.power_usage().expect("power"), st.power_mw);
            assert_eq!(d.total_energy_consumption().expect("energy"), st.energy_mj);
            assert_eq!(d.clock_info(Clock::SM).expect("sm"), st.sm_clock_mhz);
            assert_eq!(
                d.pcie_throughput(PcieUtilCounter::Receive).expect("rx"),
                st.pcie_rx_kbs
            );
            assert_eq!(
                d.current_throttle_reasons().expect("throttle").bits(),
                st.throttle_reasons
            );
            assert_eq!(
                d.power_management_limit().expect("limit"),
                spec.power_limit_mw
            );
            let c = d.power_management_limit_constraints().expect("constraints");
            assert_eq!(
                (c.min_limit, c.max_limit),
                (spec.power_min_mw, spec.power_max_mw)
            );
            assert_eq!(
                d.temperature_threshold(TemperatureThreshold::Slowdown)
                    .expect("slowdown"),
                spec.temp_slowdown_c
            );
            assert_eq!(d.max_pcie_link_gen().expect("gen"), spec.pcie_max_gen);
        }
    }
    let d0 = nvml.device_by_index(0).expect("handle");
    fake.set_tick(50);
    assert_eq!(d0.utilization_rates().expect("util").gpu, 50);
    fake.set_tick(150);
    assert_eq!(d0.temperature(TemperatureSensor::Gpu).expect("temp"), 77);
    assert_eq!(
        d0.current_throttle_reasons().expect("throttle"),
        ThrottleReasons::SW_POWER_CAP
    );
    // Lookup by UUID and bus id give the same device.
    let uuid = scenario.gpu(2).uuid.clone();
    assert_eq!(
        nvml.device_by_uuid(uuid.as_str())
            .expect("by uuid")
            .index()
            .expect("index"),
        2
    );
}

#[test]
fn unsupported_symbols_answer_not_supported() {
    let fake = Fake::with(MIXED);
    let nvml = fake.nvml();
    let h100 = nvml.device_by_index(0).expect("h100");
    let t4 = nvml.device_by_index(1).expect("t4");
    let rtx = nvml.device_by_index(2).expect("rtx");
    assert!(matches!(h100.fan_speed(0), Err(NvmlError::NotSupported)));
    assert!(matches!(
        h100.retired_pages(nvml_wrapper::enum_wrappers::device::RetirementCause::DoubleBitEccError),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(
        t4.retired_pages(nvml_wrapper::enum_wrappers::device::RetirementCause::DoubleBitEccError)
            .expect("t4 retires pages"),
        vec![]
    );
    assert!(matches!(t4.mig_mode(), Err(NvmlError::NotSupported)));
    assert!(matches!(
        rtx.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(rtx.serial(), Err(NvmlError::NotSupported)));
    assert!(rtx.fan_speed(0).is_ok() && rtx.fan_speed(1).is_ok());
    assert!(matches!(rtx.fan_speed(2), Err(NvmlError::InvalidArg)));
    assert_eq!(
        h100.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
            .expect("ecc"),
        0
    );
    assert!(matches!(
        t4.temperature_threshold(TemperatureThreshold::MemoryMax),
        Err(NvmlError::NotSupported)
    ));
}

#[test]
fn gpu_is_lost_from_its_tick_and_faults_apply_in_their_window() {
    let fake = Fake::with(MIXED);
    let nvml = fake.nvml();
    let t4 = nvml.device_by_index(1).expect("t4");
    fake.set_tick(599);
    assert!(t4.name().is_ok());
    fake.set_tick(600);
    assert!(matches!(t4.name(), Err(NvmlError::GpuLost)));
    assert!(matches!(t4.memory_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(
        t4.running_compute_processes(),
        Err(NvmlError::GpuLost)
    ));
    assert!(matches!(nvml.device_by_index(1), Err(NvmlError::GpuLost)));
    assert!(nvml.device_by_index(0).expect("h100").name().is_ok());

    let rtx = nvml.device_by_index(2).expect("rtx");
    fake.set_tick(299);
    assert!(rtx.power_usage().is_ok());
    fake.set_tick(300);
    assert!(matches!(rtx.power_usage(), Err(NvmlError::Timeout)));
    assert!(rtx.temperature(TemperatureSensor::Gpu).is_ok());
    fake.set_tick(360);
    assert!(rtx.power_usage().is_ok());

    let h100 = nvml.device_by_index(0).expect("h100");
    fake.set_tick(420);
    let start = Instant::now();
    assert_eq!(
        h100.temperature(TemperatureSensor::Gpu)
            .expect("answers after the block"),
        77
    );
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    let start = Instant::now();
    assert!(h100.power_usage().is_ok());
    assert!(start.elapsed() < Duration::from_millis(250));
}

#[test]
fn manual_clock_and_refcounted_init_reset_on_reinit() {
    let fake = Fake::with(MIXED);
    let first = fake.nvml();
    let second = fake.nvml();
    fake.set_tick(123_456);
    assert_eq!(fake.tick(), 123_456);
    drop(second);
    // Still initialised: one init left.
    assert_eq!(first.device_count().expect("count"), 3);
    assert_eq!(fake.tick(), 123_456);
    drop(first);
    assert_eq!(fake.tick(), 0, "no session after the last shutdown");
    // A fresh init starts a fresh session: wall clock from zero.
    let again = fake.nvml();
    assert!(fake.tick() < 5);
    drop(again);
}

#[test]
fn processes_and_the_32_byte_driver_quirk() {
    // 24-byte entries (the default) through nvml-wrapper.
    let fake = Fake::with(MIXED);
    let nvml = fake.nvml();
    fake.set_tick(100);
    let procs = nvml
        .device_by_index(0)
        .expect("h100")
        .running_compute_processes()
        .expect("procs");
    let got: Vec<(u32, UsedGpuMemory, Option<u32>)> = procs
        .into_iter()
        .map(|p| (p.pid, p.used_gpu_memory, p.gpu_instance_id))
        .collect();
    assert_eq!(
        got,
        vec![
            (1234, UsedGpuMemory::Used(20000 << 20), None),
            (1235, UsedGpuMemory::Used(3000 << 20), None)
        ]
    );
    fake.set_tick(0);
    assert_eq!(
        nvml.device_by_index(1)
            .expect("t4")
            .running_compute_processes()
            .expect("procs")
            .len(),
        0
    );
    drop(nvml);

    // 32-byte entries, checked byte by byte through the raw symbol.
    let fake = Fake::with(&MIXED.replace("[scenario]\n", "[scenario]\nprocess_struct_size = 32\n"));
    let nvml = fake.nvml();
    fake.set_tick(100);
    let device = nvml.device_by_index(0).expect("h100");
    type ProcFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut c_uint, *mut u8) -> c_uint;
    // SAFETY: the export has this signature (nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*).
    let f = unsafe {
        fake.lib
            .get::<ProcFn>(b"nvmlDeviceGetComputeRunningProcesses_v3")
    }
    .expect("exported");
    // SAFETY: the wrapper's raw handle is the one the library handed out.
    let handle = unsafe { device.handle() }.cast::<std::ffi::c_void>();
    let mut count: c_uint = 0;
    assert_eq!(
        unsafe { f(handle, &mut count, std::ptr::null_mut()) },
        7,
        "count query: INSUFFICIENT_SIZE"
    );
    assert_eq!(count, 2);
    let mut buf = vec![0xAAu8; 128];
    count = 1;
    assert_eq!(
        unsafe { f(handle, &mut count, buf.as_mut_ptr()) },
        7,
        "too small: INSUFFICIENT_SIZE"
    );
    assert_eq!(
        (count, buf.iter().all(|b| *b == 0xAA)),
        (2, true),
        "nothing written"
    );
    count = 2;
    assert_eq!(unsafe { f(handle, &mut count, buf.as_mut_ptr()) }, 0);
    assert_eq!(count, 2);
    let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().expect("8 bytes"));
    for (k, (pid, mib)) in [(1234u32, 20000u64), (1235, 3000)].into_iter().enumerate() {
        let e = k * 32;
        assert_eq!(u32_at(e), pid);
        assert_eq!(u64_at(e + 8), mib << 20);
        assert_eq!((u32_at(e + 16), u32_at(e + 20)), (u32::MAX, u32::MAX));
        assert_eq!(u64_at(e + 24), 0, "usedGpuCcProtectedMemory");
    }
    assert!(
        buf[64..].iter().all(|b| *b == 0xAA),
        "writes only count x 32 bytes"
    );
    // Through the wrapper (24-byte entries) the second process comes out scrambled.
    let wrapped = device.running_compute_processes().expect("procs");
    assert_eq!(wrapped[0].pid, 1234);
    assert_ne!(wrapped[1].pid, 1235);
}

#[test]
fn xid_events_are_delivered_at_their_tick() {
    let fake = Fake::with(MIXED);
    let nvml = fake.nvml();
    fake.set_tick(0);
    let t4 = nvml.device_by_index(1).expect("t4");
    assert!(
        t4.supported_event_types()
            .expect("types")
            .contains(EventTypes::CRITICAL_XID_ERROR)
    );
    let set = nvml.create_event_set().expect("set");
    let set = t4
        .register_events(
            EventTypes::CRITICAL_XID_ERROR | EventTypes::PSTATE_CHANGE,
            set,
        )
        .expect("register");
    assert!(matches!(set.wait(0), Err(NvmlError::Timeout)));
    fake.set_tick(119);
    assert!(matches!(set.wait(20), Err(NvmlError::Timeout)));
    // Another thread moves the manual clock while we wait.
    let ticker = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            fake.set_tick(130);
        });
        let start = Instant::now();
        let event = set.wait(5_000).expect("the XID arrives");
        (event, start.elapsed())
    });
    let (event, waited) = ticker;
    assert!(waited >= Duration::from_millis(90), "{waited:?}");
    assert!(event.event_type.contains(EventTypes::CRITICAL_XID_ERROR));
    assert_eq!(event.event_data, Some(XidError::Value(48)));
    assert_eq!(event.device.index().expect("index"), 1);
    assert!(
        matches!(set.wait(0), Err(NvmlError::Timeout)),
        "delivered once"
    );
}

#[test]
fn scenario_location_builtin_default_and_broken_files() {
    let fake = Fake::with(MIXED);
    let (rc, path) = fake.loaded_path();
    assert_eq!(rc, 0);
    assert_eq!(
        canonical(std::path::Path::new(&path)),
        canonical(&fake.scenario_path())
    );

    let builtin = Fake::new(None);
    let nvml = builtin.nvml();
    assert_eq!(nvml.device_count().expect("count"), 2);
    assert_eq!(builtin.loaded_path(), (0, String::new()));
    drop(nvml);

    let broken = Fake::with("[[gpu]]\nmodel = \"H100\"\n");
    let err = nvml_wrapper::Nvml::builder()
        .lib_path(broken.lib_path.as_os_str())
        .init()
        .err();
    assert!(matches!(err, Some(NvmlError::Unknown)), "{err:?}");
}

#[test]
fn wall_clock_mode_advances_with_speed() {
    let fake = Fake::with("[scenario]\ntick_ms = 1000\nspeed = 200\n[[gpu]]\nmodel = \"L40S\"\n");
    let nvml = fake.nvml();
    std::thread::sleep(Duration::from_millis(60));
    let t = fake.tick();
    assert!(
        (10..200).contains(&t),
        "200 s/s for 60+ ms should be ~12 ticks, got {t}"
    );
    assert!(nvml.device_by_index(0).expect("l40s").name().is_ok());
}

#[test]
fn v1_memory_layout_for_pynvml() {
    let fake = Fake::with(MIXED);
    let nvml = fake.nvml();
    fake.set_tick(100);
    let scenario = Scenario::from_toml_str(MIXED, "mixed").expect("valid");
    let st = scenario.gpu_state(0, 100);
    let device = nvml.device_by_index(0).expect("h100");
    type MemFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut [u64; 3]) -> c_uint;
    // SAFETY: nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t*), nvmlMemory_t = 3 x u64.
    let f = unsafe { fake.lib.get::<MemFn>(b"nvmlDeviceGetMemoryInfo") }.expect("exported");
    let mut mem = [0u64; 3];
    // SAFETY: the handle comes from the library; `mem` is a whole nvmlMemory_t.
    assert_eq!(unsafe { f(device.handle().cast(), &mut mem) }, 0);
    assert_eq!(
        mem,
        [
            st.mem_total_bytes,
            st.mem_free_bytes,
            st.mem_total_bytes - st.mem_free_bytes
        ]
    );
    // The v2 call refuses a struct without its version word.
    type Mem2Fn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut [u64; 5]) -> c_uint;
    // SAFETY: nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t*), 40 bytes.
    let f2 = unsafe { fake.lib.get::<Mem2Fn>(b"nvmlDeviceGetMemoryInfo_v2") }.expect("exported");
    let mut mem2 = [0u64; 5];
    assert_eq!(
        unsafe { f2(device.handle().cast(), &mut mem2) },
        25,
        "ARGUMENT_VERSION_MISMATCH"
    );
}

#[test]
fn block_forever_never_returns() {
    let fake = Fake::with(&format!(
        "{MIXED}\n[[fault]]\ngpu = 2\nsymbol = \"nvmlDeviceGetUtilizationRates\"\nblock = \"forever\"\n"
    ));
    let nvml = fake.nvml();
    // SAFETY: the handle is a plain pointer value handed out by the library.
    let handle = unsafe { nvml.device_by_index(2).expect("rtx").handle() } as usize;
    type UtilFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut [u32; 2]) -> c_uint;
    // SAFETY: nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t*).
    let f = *unsafe { fake.lib.get::<UtilFn>(b"nvmlDeviceGetUtilizationRates") }.expect("exported");
    let stuck = std::thread::spawn(move || {
        let mut u = [0u32; 2];
        // SAFETY: as above; `u` is a whole nvmlUtilization_t.
        unsafe { f(handle as *mut std::ffi::c_void, &mut u) }
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!stuck.is_finished(), "a forever-blocked call returned");
    // Other calls on the same GPU and other GPUs still answer.
    assert!(
        nvml.device_by_index(2)
            .expect("rtx")
            .temperature(TemperatureSensor::Gpu)
            .is_ok()
    );
    assert!(
        nvml.device_by_index(0)
            .expect("h100")
            .utilization_rates()
            .is_ok()
    );
    // Keep the library mapped for the sleeping thread until the process exits (the file itself
    // can go: a mapped file outlives its directory entry).
    std::mem::forget(nvml);
    let Fake { dir, lib, .. } = fake;
    std::mem::forget(lib);
    drop(dir);
}
