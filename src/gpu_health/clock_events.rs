//! NVML's clock-event (throttle) reasons by name: the one decoder of the
//! `nvmlClocksEventReasons` bitmask that samples store as `throttle_reasons`. `status`, the
//! health judge, `/metrics` (`gpuwatch_gpu_clock_event_reason`) and the nvidia-smi importer
//! (its `clocks_event_reasons.<name>` columns) all read [`REASONS`].
//!
//! Invariants: one row per bit, the bits of nvml.h (`nvmlClocksEventReason*`; the older
//! `nvmlClocksThrottleReason*` names have the same values — a test compares them with
//! nvml-wrapper's bindings and with the simulated library's); the names are nvidia-smi's field
//! names, so one vocabulary serves imports, the API, the metrics and the docs. Bits the table
//! does not know are reported by [`unknown_bits`], never dropped as if they were not set.

/// One clock-event reason: its bit, its name and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockEvent {
    pub bit: u64,
    /// nvidia-smi's name (`clocks_event_reasons.<name>`), also the metric's `reason` label.
    pub name: &'static str,
    /// What NVML says it means, in a few words.
    pub meaning: &'static str,
}

pub const GPU_IDLE: u64 = 0x1;
pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
pub const SW_POWER_CAP: u64 = 0x4;
pub const HW_SLOWDOWN: u64 = 0x8;
pub const SYNC_BOOST: u64 = 0x10;
pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
pub const DISPLAY_CLOCK_SETTING: u64 = 0x100;

const fn r(bit: u64, name: &'static str, meaning: &'static str) -> ClockEvent {
    ClockEvent { bit, name, meaning }
}

/// Every reason NVML defines, by bit.
pub const REASONS: [ClockEvent; 9] = [
    r(
        GPU_IDLE,
        "gpu_idle",
        "nothing runs on the GPU; clocks drop to idle",
    ),
    r(
        APPLICATIONS_CLOCKS_SETTING,
        "applications_clocks_setting",
        "clocks held by the applications-clocks setting",
    ),
    r(
        SW_POWER_CAP,
        "sw_power_cap",
        "the power-capping algorithm keeps the draw at the power limit",
    ),
    r(
        HW_SLOWDOWN,
        "hw_slowdown",
        "hardware slowdown (clocks cut by half or more): high temperature, the power brake or too much power draw",
    ),
    r(
        SYNC_BOOST,
        "sync_boost",
        "clocks held down to match the other GPUs of a sync-boost group",
    ),
    r(
        SW_THERMAL_SLOWDOWN,
        "sw_thermal_slowdown",
        "the driver lowers clocks to keep the GPU below its maximum operating temperature",
    ),
    r(
        HW_THERMAL_SLOWDOWN,
        "hw_thermal_slowdown",
        "hardware thermal protection cuts clocks: the GPU is too hot",
    ),
    r(
        HW_POWER_BRAKE_SLOWDOWN,
        "hw_power_brake_slowdown",
        "the external power brake (asserted by the system's power supply) cuts clocks",
    ),
    r(
        DISPLAY_CLOCK_SETTING,
        "display_clock_setting",
        "clocks held by the display clock setting",
    ),
];

/// Every bit of [`REASONS`].
pub const KNOWN: u64 = {
    let mut m = 0;
    let mut i = 0;
    while i < REASONS.len() {
        m |= REASONS[i].bit;
        i += 1;
    }
    m
};

/// The reasons set in `mask`, in bit order.
pub fn decode(mask: u64) -> impl Iterator<Item = &'static ClockEvent> {
    REASONS.iter().filter(move |r| mask & r.bit != 0)
}

/// The bits of `mask` that no reason of the table names (a newer driver's).
pub fn unknown_bits(mask: u64) -> u64 {
    mask & !KNOWN
}

/// The bit of the reason called `name`.
pub fn bit(name: &str) -> Option<u64> {
    REASONS.iter().find(|r| r.name == name).map(|r| r.bit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper::bitmasks::device::ThrottleReasons as Nvml;

    #[test]
    fn the_bits_are_nvml_h_s() {
        let nvml = [
            Nvml::GPU_IDLE,
            Nvml::APPLICATIONS_CLOCKS_SETTING,
            Nvml::SW_POWER_CAP,
            Nvml::HW_SLOWDOWN,
            Nvml::SYNC_BOOST,
            Nvml::SW_THERMAL_SLOWDOWN,
            Nvml::HW_THERMAL_SLOWDOWN,
            Nvml::HW_POWER_BRAKE_SLOWDOWN,
            Nvml::DISPLAY_CLOCK_SETTING,
        ];
        for (r, n) in REASONS.iter().zip(nvml) {
            assert_eq!(r.bit, n.bits(), "{}", r.name);
        }
        // The simulated library's scenario names mean the same bits.
        for (name, bit) in gpuwatch_sim::nvml::THROTTLE_NAMES {
            assert!(REASONS.iter().any(|r| r.bit == *bit), "{name}");
        }
        assert_eq!(KNOWN, gpuwatch_sim::nvml::throttle::ALL);
    }

    #[test]
    fn a_mask_decodes_by_name_and_unknown_bits_are_kept() {
        let names: Vec<&str> = decode(0x88).map(|r| r.name).collect();
        assert_eq!(names, ["hw_slowdown", "hw_power_brake_slowdown"]);
        assert_eq!(decode(0).count(), 0);
        assert_eq!(unknown_bits(0x1000 | 0x40), 0x1000);
        assert_eq!(bit("sw_thermal_slowdown"), Some(0x20));
        assert_eq!(bit("thermal"), None);
    }
}
