//! NVML vocabulary shared by the engine and the fake library: return codes with their names,
//! the per-device symbols a scenario may name, and the throttle-reason bits.
//!
//! Invariants: the numbers are those of `nvml.h` (as in nvml-wrapper-sys 0.10); symbol names are
//! matched with any trailing `_vN` version suffix removed, so `nvmlDeviceGetMemoryInfo` in a
//! scenario covers both the v1 and the v2 call.

/// NVML return codes (`nvmlReturn_t`).
pub mod code {
    pub const SUCCESS: u32 = 0;
    pub const UNINITIALIZED: u32 = 1;
    pub const INVALID_ARGUMENT: u32 = 2;
    pub const NOT_SUPPORTED: u32 = 3;
    pub const NO_PERMISSION: u32 = 4;
    pub const ALREADY_INITIALIZED: u32 = 5;
    pub const NOT_FOUND: u32 = 6;
    pub const INSUFFICIENT_SIZE: u32 = 7;
    pub const INSUFFICIENT_POWER: u32 = 8;
    pub const DRIVER_NOT_LOADED: u32 = 9;
    pub const TIMEOUT: u32 = 10;
    pub const IRQ_ISSUE: u32 = 11;
    pub const LIBRARY_NOT_FOUND: u32 = 12;
    pub const FUNCTION_NOT_FOUND: u32 = 13;
    pub const CORRUPTED_INFOROM: u32 = 14;
    pub const GPU_IS_LOST: u32 = 15;
    pub const RESET_REQUIRED: u32 = 16;
    pub const OPERATING_SYSTEM: u32 = 17;
    pub const LIB_RM_VERSION_MISMATCH: u32 = 18;
    pub const IN_USE: u32 = 19;
    pub const MEMORY: u32 = 20;
    pub const NO_DATA: u32 = 21;
    pub const VGPU_ECC_NOT_SUPPORTED: u32 = 22;
    pub const INSUFFICIENT_RESOURCES: u32 = 23;
    pub const FREQ_NOT_SUPPORTED: u32 = 24;
    pub const ARGUMENT_VERSION_MISMATCH: u32 = 25;
    pub const DEPRECATED: u32 = 26;
    pub const NOT_READY: u32 = 27;
    pub const GPU_NOT_FOUND: u32 = 28;
    pub const INVALID_STATE: u32 = 29;
    pub const RESET_TYPE_NOT_SUPPORTED: u32 = 30;
    pub const UNKNOWN: u32 = 999;
}

/// Every return code with its name as written in a scenario (the `NVML_ERROR_` prefix dropped).
pub const RETURN_CODES: &[(u32, &str)] = &[
    (code::SUCCESS, "SUCCESS"),
    (code::UNINITIALIZED, "UNINITIALIZED"),
    (code::INVALID_ARGUMENT, "INVALID_ARGUMENT"),
    (code::NOT_SUPPORTED, "NOT_SUPPORTED"),
    (code::NO_PERMISSION, "NO_PERMISSION"),
    (code::ALREADY_INITIALIZED, "ALREADY_INITIALIZED"),
    (code::NOT_FOUND, "NOT_FOUND"),
    (code::INSUFFICIENT_SIZE, "INSUFFICIENT_SIZE"),
    (code::INSUFFICIENT_POWER, "INSUFFICIENT_POWER"),
    (code::DRIVER_NOT_LOADED, "DRIVER_NOT_LOADED"),
    (code::TIMEOUT, "TIMEOUT"),
    (code::IRQ_ISSUE, "IRQ_ISSUE"),
    (code::LIBRARY_NOT_FOUND, "LIBRARY_NOT_FOUND"),
    (code::FUNCTION_NOT_FOUND, "FUNCTION_NOT_FOUND"),
    (code::CORRUPTED_INFOROM, "CORRUPTED_INFOROM"),
    (code::GPU_IS_LOST, "GPU_IS_LOST"),
    (code::RESET_REQUIRED, "RESET_REQUIRED"),
    (code::OPERATING_SYSTEM, "OPERATING_SYSTEM"),
    (code::LIB_RM_VERSION_MISMATCH, "LIB_RM_VERSION_MISMATCH"),
    (code::IN_USE, "IN_USE"),
    (code::MEMORY, "MEMORY"),
    (code::NO_DATA, "NO_DATA"),
    (code::VGPU_ECC_NOT_SUPPORTED, "VGPU_ECC_NOT_SUPPORTED"),
    (code::INSUFFICIENT_RESOURCES, "INSUFFICIENT_RESOURCES"),
    (code::FREQ_NOT_SUPPORTED, "FREQ_NOT_SUPPORTED"),
    (code::ARGUMENT_VERSION_MISMATCH, "ARGUMENT_VERSION_MISMATCH"),
    (code::DEPRECATED, "DEPRECATED"),
    (code::NOT_READY, "NOT_READY"),
    (code::GPU_NOT_FOUND, "GPU_NOT_FOUND"),
    (code::INVALID_STATE, "INVALID_STATE"),
    (code::RESET_TYPE_NOT_SUPPORTED, "RESET_TYPE_NOT_SUPPORTED"),
    (code::UNKNOWN, "UNKNOWN"),
];

/// The code for a name: `"GPU_IS_LOST"`, `"NVML_ERROR_GPU_IS_LOST"` and `"gpu_is_lost"` all work.
pub fn return_code(name: &str) -> Option<u32> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper
        .strip_prefix("NVML_ERROR_")
        .or_else(|| upper.strip_prefix("NVML_"))
        .unwrap_or(&upper);
    RETURN_CODES
        .iter()
        .find(|(_, n)| *n == bare)
        .map(|(c, _)| *c)
}

/// The scenario name of a code (`"GPU_IS_LOST"`), or `None` for a number NVML does not define.
pub fn return_code_name(code: u32) -> Option<&'static str> {
    RETURN_CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, n)| *n)
}

/// Per-device symbols (version suffix removed) that scenarios may name in `not_supported`,
/// `supported` and `[[fault]] symbol`. The fake library asks the engine about exactly these.
pub const DEVICE_SYMBOLS: &[&str] = &[
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetVbiosVersion",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetBAR1MemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetNumFans",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetPowerState",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons",
    "nvmlDeviceGetSupportedClocksEventReasons",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetDisplayMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlGpmMigSampleGet",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
    "nvmlDeviceRegisterEvents",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleGet",
    "nvmlDeviceGetSupportedMemoryClocks",
    "nvmlDeviceGetSupportedGraphicsClocks",
    "nvmlDeviceSetPowerManagementLimit",
    "nvmlDeviceSetPersistenceMode",
    "nvmlDeviceSetComputeMode",
    "nvmlDeviceSetGpuLockedClocks",
    "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceSetMemoryLockedClocks",
    "nvmlDeviceResetMemoryLockedClocks",
];

/// The GPM call that reads a device; NOT_SUPPORTED on models without GPM.
pub const GPM_SAMPLE: &str = "nvmlGpmSampleGet";
/// The NVLink call every NVLink read answers as (the link state and the NVLink fields of
/// the batch read).
pub const NVLINK_STATE: &str = "nvmlDeviceGetNvLinkState";
/// The fabric registration calls (v1 and the versioned `V`).
pub const FABRIC_INFO: [&str; 2] = ["nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV"];
/// `NVML_NVLINK_MAX_LINKS`.
pub const NVLINK_MAX_LINKS: u32 = 18;
/// `nvmlDeviceArchitecture_t` of Hopper, the first architecture with GPM.
pub const GPM_MIN_ARCHITECTURE: u32 = 9;

/// `name` without a trailing `_vN` version suffix.
pub fn base_symbol(name: &str) -> &str {
    // Every device call asks: the trailing digits, then "_v" before them (no substring search).
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
    match name[..name.len() - digits].strip_suffix("_v") {
        Some(base) if digits > 0 => base,
        _ => name,
    }
}

/// Whether `name` (any version) is one of [`DEVICE_SYMBOLS`].
pub fn is_device_symbol(name: &str) -> bool {
    DEVICE_SYMBOLS.contains(&base_symbol(name))
}

/// Clock throttle (event) reason bits, as in `nvmlClocksThrottleReason*`.
pub mod throttle {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL: u64 = 0x20;
    pub const HW_THERMAL: u64 = 0x40;
    pub const HW_POWER_BRAKE: u64 = 0x80;
    pub const DISPLAY_CLOCKS: u64 = 0x100;
    /// Every bit above.
    pub const ALL: u64 = 0x1FF;
}

/// Names accepted in a scenario's `throttle = [...]` list.
pub const THROTTLE_NAMES: &[(&str, u64)] = &[
    ("gpu_idle", throttle::GPU_IDLE),
    ("applications_clocks", throttle::APPLICATIONS_CLOCKS),
    ("sw_power_cap", throttle::SW_POWER_CAP),
    ("hw_slowdown", throttle::HW_SLOWDOWN),
    ("sync_boost", throttle::SYNC_BOOST),
    ("sw_thermal", throttle::SW_THERMAL),
    ("hw_thermal", throttle::HW_THERMAL),
    ("hw_power_brake", throttle::HW_POWER_BRAKE),
    ("display_clocks", throttle::DISPLAY_CLOCKS),
];

/// Event type bits (`nvmlEventType*`).
pub mod event_type {
    pub const SINGLE_BIT_ECC: u64 = 0x1;
    pub const DOUBLE_BIT_ECC: u64 = 0x2;
    pub const PSTATE: u64 = 0x4;
    pub const XID_CRITICAL: u64 = 0x8;
    pub const CLOCK: u64 = 0x10;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (c, n) in RETURN_CODES {
            assert_eq!(return_code(n), Some(*c));
            assert_eq!(return_code_name(*c), Some(*n));
        }
        assert_eq!(return_code("NVML_ERROR_GPU_IS_LOST"), Some(15));
        assert_eq!(return_code("timeout"), Some(10));
        assert_eq!(return_code("NOPE"), None);
    }

    #[test]
    fn version_suffixes_are_ignored() {
        assert_eq!(
            base_symbol("nvmlDeviceGetMemoryInfo_v2"),
            "nvmlDeviceGetMemoryInfo"
        );
        assert_eq!(
            base_symbol("nvmlDeviceGetTemperatureV"),
            "nvmlDeviceGetTemperatureV"
        );
        assert_eq!(base_symbol("nvmlDeviceGetX_v"), "nvmlDeviceGetX_v");
        assert_eq!(base_symbol("nvmlDeviceGetX_v12"), "nvmlDeviceGetX");
        assert_eq!(base_symbol("nvmlDeviceGetX_v1_v2"), "nvmlDeviceGetX_v1");
        assert_eq!(base_symbol("nvmlDeviceGetX2"), "nvmlDeviceGetX2");
        assert_eq!(base_symbol("_v3"), "");
        assert!(is_device_symbol("nvmlDeviceGetComputeRunningProcesses_v3"));
        assert!(!is_device_symbol("nvmlDeviceGetPowerUsageX"));
    }
}
