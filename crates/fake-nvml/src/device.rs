//! Per-device inventory and sensors: identity strings, PCI info, memory, utilisation,
//! temperatures, fans, clocks, power and energy, PCIe.
//!
//! Invariants: static fields come from `Scenario::gpu` and dynamic ones from
//! `Scenario::gpu_state` at the call's tick; enum arguments outside NVML's range answer
//! INVALID_ARGUMENT, in-range ones a board lacks answer NOT_SUPPORTED (e.g. the memory
//! temperature limit of a GDDR board).

use std::ffi::{c_char, c_int, c_uint, c_ulonglong};

use gpuwatch_sim::nvml::code;

use crate::ffi_types::{
    Bar1Memory, MEMORY_V2_VERSION, Memory, MemoryV2, NvmlDevice, NvmlReturn, PciInfo,
    TEMPERATURE_V1_VERSION, TemperatureV1, Utilization,
};
use crate::{Device, device_call, out, out_str, versioned_in};

macro_rules! string_fn {
    ($name:ident, |$d:ident| $value:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            device: NvmlDevice,
            buf: *mut c_char,
            length: c_uint,
        ) -> NvmlReturn {
            device_call(device, stringify!($name), |$d| {
                let text: String = $value;
                // SAFETY: `buf` is null (rejected) or holds `length` bytes, per the NVML contract.
                unsafe { out_str(buf, length, &text) }
            })
        }
    };
}

// A MIG device is named after its parent and profile, as nvidia-smi -L shows it.
string_fn!(nvmlDeviceGetName, |d| match d.mig() {
    Some((m, _)) => format!("{} MIG {}", d.spec().name, m.profile.name),
    None => d.spec().name.clone(),
});
string_fn!(nvmlDeviceGetUUID, |d| match d.mig() {
    Some((m, _)) => m.uuid.clone(),
    None => d.spec().uuid.clone(),
});
string_fn!(nvmlDeviceGetSerial, |d| d.spec().serial.clone());
string_fn!(nvmlDeviceGetVbiosVersion, |d| d.spec().vbios.clone());

// A MIG device's index is its place among its parent's instances.
getter!(nvmlDeviceGetIndex, c_uint, |d| d.mig.unwrap_or(d.index)
    as c_uint);
getter!(nvmlDeviceGetMinorNumber, c_uint, |d| d.index as c_uint);
getter!(nvmlDeviceGetBrand, c_uint, |d| d.spec().brand);
getter!(nvmlDeviceGetArchitecture, c_uint, |d| d.spec().architecture);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: NvmlDevice,
    major: *mut c_int,
    minor: *mut c_int,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetCudaComputeCapability", |d| {
        if major.is_null() || minor.is_null() {
            return code::INVALID_ARGUMENT;
        }
        let (a, b) = d.spec().compute_capability;
        // SAFETY: both checked non-null; the caller passes writable ints.
        unsafe {
            out(major, a);
            out(minor, b)
        }
    })
}

fn c_chars<const N: usize>(text: &str) -> [c_char; N] {
    let mut buf = [0 as c_char; N];
    for (dst, src) in buf.iter_mut().zip(text.bytes().take(N - 1)) {
        *dst = src as c_char;
    }
    buf
}

fn pci_info(d: &Device) -> PciInfo {
    let g = d.spec();
    PciInfo {
        bus_id_legacy: c_chars(&format!(
            "{:04x}:{:02x}:{:02x}.0",
            g.pci_domain, g.pci_bus, g.pci_device
        )),
        domain: g.pci_domain,
        bus: g.pci_bus,
        device: g.pci_device,
        pci_device_id: g.pci_device_id,
        pci_sub_system_id: g.pci_subsystem_id,
        bus_id: c_chars(&g.pci_bus_id),
    }
}

getter!(nvmlDeviceGetPciInfo_v3, PciInfo, |d| pci_info(d));
getter!(nvmlDeviceGetPciInfo_v2, PciInfo, |d| pci_info(d));
getter!(nvmlDeviceGetPciInfo, PciInfo, |d| pci_info(d));

getter!(nvmlDeviceGetMemoryInfo, Memory, |d| match d.mig() {
    Some((_, m)) => Memory {
        total: m.mem_total_bytes,
        free: m.mem_free_bytes,
        used: m.mem_used_bytes,
    },
    None => {
        let s = d.state();
        // v1 predates "reserved": used is everything that is not free.
        Memory {
            total: s.mem_total_bytes,
            free: s.mem_free_bytes,
            used: s.mem_total_bytes - s.mem_free_bytes,
        }
    }
});

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut MemoryV2,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetMemoryInfo_v2", |d| {
        // SAFETY: null or the caller's whole nvmlMemory_v2_t with `version` set.
        let given = match unsafe { versioned_in(memory, MEMORY_V2_VERSION) } {
            Ok(g) => g,
            Err(c) => return c,
        };
        if let Some((_, m)) = d.mig() {
            let v = MemoryV2 {
                version: given.version,
                total: m.mem_total_bytes,
                reserved: 0,
                free: m.mem_free_bytes,
                used: m.mem_used_bytes,
            };
            // SAFETY: as above.
            return unsafe { out(memory, v) };
        }
        let s = d.state();
        let v = MemoryV2 {
            version: given.version,
            total: s.mem_total_bytes,
            reserved: s.mem_reserved_bytes,
            free: s.mem_free_bytes,
            used: s.mem_used_bytes,
        };
        // SAFETY: as above.
        unsafe { out(memory, v) }
    })
}

getter!(nvmlDeviceGetBAR1MemoryInfo, Bar1Memory, |d| {
    let total: c_ulonglong = if d.spec().memory_total_bytes >= 32 << 30 {
        128 << 30
    } else {
        256 << 20
    };
    let used = (4 + 2 * d.scenario.processes_at(d.index, d.tick).len() as u64) << 20;
    Bar1Memory {
        bar1_total: total,
        bar1_free: total - used.min(total),
        bar1_used: used.min(total),
    }
});

getter!(nvmlDeviceGetUtilizationRates, Utilization, |d| {
    let s = d.state();
    Utilization {
        gpu: s.util_gpu,
        memory: s.util_mem,
    }
});

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: NvmlDevice,
    sensor: c_uint,
    temp: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetTemperature", |d| {
        if sensor != 0 {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: null is rejected by `out`; otherwise the caller's writable output.
        unsafe { out(temp, d.state().temp_c) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(
    device: NvmlDevice,
    temperature: *mut TemperatureV1,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetTemperatureV", |d| {
        // SAFETY: null or the caller's whole nvmlTemperature_t with version and sensor set.
        let given = match unsafe { versioned_in(temperature, TEMPERATURE_V1_VERSION) } {
            Ok(g) => g,
            Err(c) => return c,
        };
        if given.sensor_type != 0 {
            return code::INVALID_ARGUMENT;
        }
        let v = TemperatureV1 {
            temperature: d.state().temp_c as c_int,
            ..given
        };
        // SAFETY: as above.
        unsafe { out(temperature, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: NvmlDevice,
    kind: c_uint,
    temp: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetTemperatureThreshold", |d| {
        let g = d.spec();
        let value = match kind {
            0 => Some(g.temp_shutdown_c),
            1 => Some(g.temp_slowdown_c),
            2 => g.temp_mem_max_c,
            3 => Some(g.temp_gpu_max_c),
            4..=7 => None,
            _ => return code::INVALID_ARGUMENT,
        };
        match value {
            // SAFETY: null is rejected by `out`; otherwise the caller's writable output.
            Some(v) => unsafe { out(temp, v) },
            None => code::NOT_SUPPORTED,
        }
    })
}

getter!(nvmlDeviceGetNumFans, c_uint, |d| d.spec().num_fans);
getter!(nvmlDeviceGetFanSpeed, c_uint, |d| d.state().fan_percent);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: NvmlDevice,
    fan: c_uint,
    speed: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetFanSpeed_v2", |d| {
        if fan >= d.spec().num_fans {
            return code::INVALID_ARGUMENT;
        }
        // SAFETY: null is rejected by `out`; otherwise the caller's writable output.
        unsafe { out(speed, d.state().fan_percent) }
    })
}

/// Clock types: 0 graphics, 1 SM, 2 memory, 3 video. Current clocks stay inside the ranges
/// locked by `nvmlDeviceSet{Gpu,Memory}LockedClocks`.
fn clock(d: &Device, kind: c_uint, max: bool) -> Option<c_uint> {
    let (g, s) = (d.spec(), d.state());
    let (sm, mem) = if max {
        (g.sm_clock_max_mhz, g.mem_clock_max_mhz)
    } else {
        let locked = d.settings();
        let hold = |v: u32, range: Option<(u32, u32)>| range.map_or(v, |(lo, hi)| v.clamp(lo, hi));
        (
            hold(s.sm_clock_mhz, locked.gpu_locked),
            hold(s.mem_clock_mhz, locked.mem_locked),
        )
    };
    match kind {
        0 | 1 => Some(sm),
        2 => Some(mem),
        3 => Some(sm * 9 / 10),
        _ => None,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: NvmlDevice,
    kind: c_uint,
    mhz: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetClockInfo", |d| {
        match clock(d, kind, false) {
            // SAFETY: null is rejected by `out`; otherwise the caller's writable output.
            Some(v) => unsafe { out(mhz, v) },
            None => code::INVALID_ARGUMENT,
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: NvmlDevice,
    kind: c_uint,
    mhz: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetMaxClockInfo", |d| {
        match clock(d, kind, true) {
            // SAFETY: as above.
            Some(v) => unsafe { out(mhz, v) },
            None => code::INVALID_ARGUMENT,
        }
    })
}

getter!(nvmlDeviceGetPowerUsage, c_uint, |d| d.state().power_mw);
/// The limit `nvmlDeviceSetPowerManagementLimit` set, else the scenario's.
fn power_limit(d: &Device) -> c_uint {
    d.settings()
        .power_limit_mw
        .unwrap_or(d.spec().power_limit_mw)
}

getter!(nvmlDeviceGetPowerManagementLimit, c_uint, |d| power_limit(
    d
));
getter!(nvmlDeviceGetPowerManagementDefaultLimit, c_uint, |d| d
    .spec()
    .power_default_mw);
getter!(nvmlDeviceGetEnforcedPowerLimit, c_uint, |d| power_limit(d));
getter!(nvmlDeviceGetTotalEnergyConsumption, c_ulonglong, |d| d
    .state()
    .energy_mj);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimitConstraints(
    device: NvmlDevice,
    min: *mut c_uint,
    max: *mut c_uint,
) -> NvmlReturn {
    device_call(
        device,
        "nvmlDeviceGetPowerManagementLimitConstraints",
        |d| {
            if min.is_null() || max.is_null() {
                return code::INVALID_ARGUMENT;
            }
            // SAFETY: both checked non-null.
            unsafe {
                out(min, d.spec().power_min_mw);
                out(max, d.spec().power_max_mw)
            }
        },
    )
}

/// Counter 0 is TX bytes, 1 RX bytes; values in KB/s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: NvmlDevice,
    counter: c_uint,
    value: *mut c_uint,
) -> NvmlReturn {
    device_call(device, "nvmlDeviceGetPcieThroughput", |d| {
        let s = d.state();
        let v = match counter {
            0 => s.pcie_tx_kbs,
            1 => s.pcie_rx_kbs,
            _ => return code::INVALID_ARGUMENT,
        };
        // SAFETY: null is rejected by `out`; otherwise the caller's writable output.
        unsafe { out(value, v) }
    })
}

getter!(nvmlDeviceGetCurrPcieLinkGeneration, c_uint, |d| d
    .state()
    .pcie_gen);
getter!(nvmlDeviceGetCurrPcieLinkWidth, c_uint, |d| d
    .state()
    .pcie_width);
getter!(nvmlDeviceGetMaxPcieLinkGeneration, c_uint, |d| d
    .spec()
    .pcie_max_gen);
getter!(nvmlDeviceGetMaxPcieLinkWidth, c_uint, |d| d
    .spec()
    .pcie_max_width);
