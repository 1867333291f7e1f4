//! The C types of `nvml.h` that cross the boundary, laid out exactly as the header does.
//!
//! Invariants: every struct's size and field offsets equal the header's (asserted against
//! nvml-wrapper-sys in the tests below); version words are `sizeof(struct) | (version << 24)`,
//! as `NVML_STRUCT_VERSION` computes them.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

pub type NvmlReturn = c_uint;
pub type NvmlDevice = *mut c_void;
pub type NvmlEventSet = *mut c_void;

/// `nvmlPciInfo_t` (68 bytes): `nvmlDeviceGetPciInfo_v3`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlMemory_t` (24 bytes): `nvmlDeviceGetMemoryInfo` (v1).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t` (40 bytes): `nvmlDeviceGetMemoryInfo_v2`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2` version word: `sizeof(nvmlMemory_v2_t) | 2 << 24`.
pub const MEMORY_V2_VERSION: c_uint = 40 | (2 << 24);

/// `nvmlBAR1Memory_t` (24 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Bar1Memory {
    pub bar1_total: c_ulonglong,
    pub bar1_free: c_ulonglong,
    pub bar1_used: c_ulonglong,
}

/// `nvmlUtilization_t` (8 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlTemperature_v1_t` (12 bytes): `nvmlDeviceGetTemperatureV`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TemperatureV1 {
    pub version: c_uint,
    pub sensor_type: c_uint,
    pub temperature: c_int,
}

/// `nvmlTemperature_v1` version word.
pub const TEMPERATURE_V1_VERSION: c_uint = 12 | (1 << 24);

/// `nvmlEventData_t` (32 bytes): `nvmlEventSetWait_v2`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EventData {
    pub device: NvmlDevice,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// Process entry layouts, written by offset (see `process.rs`): the v1 entry is 16 bytes
/// (`pid`, pad, `usedGpuMemory`), v2/v3 24 bytes (+ `gpuInstanceId`, `computeInstanceId`), and
/// the early-R535 variant 32 bytes (+ `usedGpuCcProtectedMemory`).
pub const PROCESS_V1_SIZE: usize = 16;
pub const PROCESS_V2_SIZE: usize = 24;
pub const PROCESS_R535_SIZE: usize = 32;

/// "No instance" in process entries and event data.
pub const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// `nvmlGpmSupport_t`: `nvmlGpmQueryDeviceSupport` (version word 1, `NVML_GPM_SUPPORT_VERSION`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmSupport {
    pub version: c_uint,
    pub is_supported_device: c_uint,
}

/// `nvmlGpmMetric_t` (40 bytes): one requested metric and its answer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmMetric {
    pub metric_id: c_uint,
    pub nvml_return: NvmlReturn,
    pub value: f64,
    pub short_name: *const c_char,
    pub long_name: *const c_char,
    pub unit: *const c_char,
}

/// `NVML_GPM_METRIC_MAX`: the size of `nvmlGpmMetricsGet_t.metrics`.
pub const GPM_METRIC_MAX: usize = 210;

/// `nvmlGpmMetricsGet_t`: `nvmlGpmMetricsGet` (version word 1, `NVML_GPM_METRICS_GET_VERSION`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmMetricsGet {
    pub version: c_uint,
    pub num_metrics: c_uint,
    pub sample1: *mut c_void,
    pub sample2: *mut c_void,
    pub metrics: [GpmMetric; GPM_METRIC_MAX],
}

/// The version word both GPM structs carry.
pub const GPM_STRUCT_VERSION: c_uint = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper_sys::bindings as sys;
    use std::mem::{offset_of, size_of};

    #[test]
    fn sizes_match_the_header() {
        assert_eq!(size_of::<PciInfo>(), 68);
        assert_eq!(size_of::<PciInfo>(), size_of::<sys::nvmlPciInfo_t>());
        assert_eq!(size_of::<Memory>(), 24);
        assert_eq!(size_of::<Memory>(), size_of::<sys::nvmlMemory_t>());
        assert_eq!(size_of::<MemoryV2>(), 40);
        assert_eq!(size_of::<MemoryV2>(), size_of::<sys::nvmlMemory_v2_t>());
        assert_eq!(size_of::<Bar1Memory>(), size_of::<sys::nvmlBAR1Memory_t>());
        assert_eq!(
            size_of::<Utilization>(),
            size_of::<sys::nvmlUtilization_t>()
        );
        assert_eq!(
            size_of::<TemperatureV1>(),
            size_of::<sys::nvmlTemperature_v1_t>()
        );
        assert_eq!(size_of::<EventData>(), 32);
        assert_eq!(size_of::<EventData>(), size_of::<sys::nvmlEventData_t>());
        assert_eq!(PROCESS_V1_SIZE, size_of::<sys::nvmlProcessInfo_v1_t>());
        assert_eq!(PROCESS_V2_SIZE, size_of::<sys::nvmlProcessInfo_v2_t>());
        assert_eq!(PROCESS_V2_SIZE, size_of::<sys::nvmlProcessInfo_t>());
        assert_eq!(PROCESS_R535_SIZE, size_of::<sys::nvmlProcessDetail_v1_t>());
        assert_eq!(size_of::<GpmSupport>(), size_of::<sys::nvmlGpmSupport_t>());
        assert_eq!(size_of::<GpmMetric>(), 40);
        assert_eq!(size_of::<GpmMetric>(), size_of::<sys::nvmlGpmMetric_t>());
        assert_eq!(
            size_of::<GpmMetricsGet>(),
            size_of::<sys::nvmlGpmMetricsGet_t>()
        );
        assert_eq!(GPM_STRUCT_VERSION, sys::NVML_GPM_SUPPORT_VERSION);
        assert_eq!(GPM_STRUCT_VERSION, sys::NVML_GPM_METRICS_GET_VERSION);
        assert_eq!(
            GPM_METRIC_MAX,
            sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_MAX as usize
        );
    }

    #[test]
    fn offsets_match_the_header() {
        assert_eq!(
            offset_of!(PciInfo, bus_id),
            offset_of!(sys::nvmlPciInfo_t, busId)
        );
        assert_eq!(
            offset_of!(PciInfo, pci_sub_system_id),
            offset_of!(sys::nvmlPciInfo_t, pciSubSystemId)
        );
        assert_eq!(
            offset_of!(MemoryV2, total),
            offset_of!(sys::nvmlMemory_v2_t, total)
        );
        assert_eq!(
            offset_of!(MemoryV2, used),
            offset_of!(sys::nvmlMemory_v2_t, used)
        );
        assert_eq!(
            offset_of!(Memory, used),
            offset_of!(sys::nvmlMemory_t, used)
        );
        assert_eq!(
            offset_of!(EventData, event_data),
            offset_of!(sys::nvmlEventData_t, eventData)
        );
        assert_eq!(
            offset_of!(EventData, compute_instance_id),
            offset_of!(sys::nvmlEventData_t, computeInstanceId)
        );
        assert_eq!(offset_of!(sys::nvmlProcessInfo_t, usedGpuMemory), 8);
        assert_eq!(offset_of!(sys::nvmlProcessInfo_t, gpuInstanceId), 16);
        assert_eq!(offset_of!(sys::nvmlProcessInfo_t, computeInstanceId), 20);
        assert_eq!(
            offset_of!(sys::nvmlProcessDetail_v1_t, usedGpuCcProtectedMemory),
            24
        );
        assert_eq!(offset_of!(sys::nvmlProcessInfo_v1_t, usedGpuMemory), 8);
        assert_eq!(
            offset_of!(GpmMetric, value),
            offset_of!(sys::nvmlGpmMetric_t, value)
        );
        assert_eq!(
            offset_of!(GpmMetricsGet, sample2),
            offset_of!(sys::nvmlGpmMetricsGet_t, sample2)
        );
        assert_eq!(
            offset_of!(GpmMetricsGet, metrics),
            offset_of!(sys::nvmlGpmMetricsGet_t, metrics)
        );
    }

    #[test]
    fn version_words_match_the_wrapper() {
        let v2 = (size_of::<sys::nvmlMemory_v2_t>() | (2 << 24)) as u32;
        assert_eq!(MEMORY_V2_VERSION, v2);
        assert_eq!(MEMORY_V2_VERSION, 0x0200_0028);
        let t1 = (size_of::<sys::nvmlTemperature_v1_t>() | (1 << 24)) as u32;
        assert_eq!(TEMPERATURE_V1_VERSION, t1);
    }
}
