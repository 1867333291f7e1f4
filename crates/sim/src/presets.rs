//! GPU model presets: the static inventory and the "typical" idle/load numbers behind each
//! `[[gpu]] model = "..."`, plus the NVML symbols the model does not support.
//!
//! Invariants: numbers are plausible for the real board (datasheet or commonly seen
//! `nvidia-smi -q` output), not guaranteed exact; every `not_supported` entry is a
//! [`crate::nvml::DEVICE_SYMBOLS`] name (checked by a test); `power_min_w <= power_limit_w <=
//! power_max_w` and `idle < load` everywhere (checked by a test).

/// NVML brand codes (`nvmlBrandType_t`).
pub mod brand {
    pub const TESLA: u32 = 2;
    pub const GEFORCE: u32 = 5;
    pub const NVIDIA: u32 = 14;
}

/// One model's defaults; every field can be overridden per `[[gpu]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    pub key: &'static str,
    pub name: &'static str,
    pub brand: u32,
    /// NVML architecture code (6 Turing, 7 Ampere, 8 Ada, 9 Hopper).
    pub architecture: u32,
    pub compute_capability: (i32, i32),
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    pub memory_total_mib: u64,
    pub memory_reserved_mib: u64,
    /// Memory the driver holds with no process (a seeded 0..100 MiB is added per GPU).
    pub baseline_mib: u64,
    pub power_limit_w: f64,
    pub power_min_w: f64,
    pub power_max_w: f64,
    pub idle_power_w: f64,
    pub load_power_w: f64,
    pub temp_shutdown: u32,
    pub temp_slowdown: u32,
    pub temp_gpu_max: u32,
    pub temp_mem_max: Option<u32>,
    pub idle_temp: f64,
    pub load_temp: f64,
    pub pcie_max_gen: u32,
    pub pcie_max_width: u32,
    pub sm_clock_max: u32,
    pub sm_clock_idle: u32,
    pub mem_clock_max: u32,
    pub mem_clock_idle: u32,
    pub num_fans: u32,
    pub fan_idle: f64,
    pub fan_load: f64,
    /// P-state with no work (datacenter boards in persistence mode idle in P0).
    pub idle_pstate: u32,
    /// PCIe traffic at 100 % utilisation, KB/s.
    pub pcie_load_tx_kbs: f64,
    pub pcie_load_rx_kbs: f64,
    pub persistence_mode: bool,
    pub serial_prefix: &'static str,
    pub vbios: &'static str,
    pub not_supported: &'static [&'static str],
    /// NVLinks (0 without NVLink: PCIe boards, whose bridges are optional).
    pub nvlinks: u32,
    /// Registers with an NVLink fabric (`nvmlDeviceGetGpuFabricInfo`: NVSwitch systems,
    /// Hopper and later).
    pub fabric: bool,
}

const HOPPER_UNSUPPORTED: &[&str] = &[
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetNumFans",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
];

const HOPPER: Preset = Preset {
    key: "H100-SXM-80GB",
    name: "NVIDIA H100 80GB HBM3",
    brand: brand::NVIDIA,
    architecture: 9,
    compute_capability: (9, 0),
    pci_device_id: 0x2330_10DE,
    pci_subsystem_id: 0x16C1_10DE,
    memory_total_mib: 81_559,
    memory_reserved_mib: 569,
    baseline_mib: 450,
    power_limit_w: 700.0,
    power_min_w: 200.0,
    power_max_w: 700.0,
    idle_power_w: 72.0,
    load_power_w: 640.0,
    // On the T.Limit scale of `nvidia-smi -q` (8 x H100, driver 535; H100, driver 590):
    // T.Limit 86 °C, slowdown 2 °C above it, shutdown 8 °C above.
    temp_shutdown: 94,
    temp_slowdown: 88,
    temp_gpu_max: 86,
    temp_mem_max: Some(95),
    idle_temp: 31.0,
    load_temp: 66.0,
    pcie_max_gen: 5,
    pcie_max_width: 16,
    sm_clock_max: 1980,
    sm_clock_idle: 345,
    mem_clock_max: 2619,
    mem_clock_idle: 2619,
    num_fans: 0,
    fan_idle: 0.0,
    fan_load: 0.0,
    idle_pstate: 0,
    pcie_load_tx_kbs: 1_500_000.0,
    pcie_load_rx_kbs: 4_000_000.0,
    persistence_mode: true,
    serial_prefix: "1654",
    vbios: "96.00.99.00.01",
    not_supported: HOPPER_UNSUPPORTED,
    // `nvidia-smi nvlink -s`, H100 80GB HBM3 and H200, driver 590: links 0-17 at 26.562 GB/s.
    nvlinks: 18,
    fabric: true,
};

/// All presets, in the order the documentation lists them.
pub const PRESETS: &[Preset] = &[
    HOPPER,
    Preset {
        key: "H200-141GB",
        name: "NVIDIA H200",
        pci_device_id: 0x2335_10DE,
        pci_subsystem_id: 0x18BE_10DE,
        memory_total_mib: 143_771,
        memory_reserved_mib: 636,
        mem_clock_max: 3201,
        mem_clock_idle: 3201,
        load_power_w: 660.0,
        // nvidia-smi -q, H200, driver 590: T.Limit 87 °C.
        temp_shutdown: 95,
        temp_slowdown: 89,
        temp_gpu_max: 87,
        serial_prefix: "1655",
        vbios: "96.00.AF.00.01",
        ..HOPPER
    },
    Preset {
        key: "A100-SXM4-40GB",
        name: "NVIDIA A100-SXM4-40GB",
        architecture: 7,
        compute_capability: (8, 0),
        pci_device_id: 0x20B0_10DE,
        pci_subsystem_id: 0x134F_10DE,
        memory_total_mib: 40_960,
        memory_reserved_mib: 495,
        baseline_mib: 420,
        power_limit_w: 400.0,
        power_min_w: 100.0,
        power_max_w: 400.0,
        idle_power_w: 54.0,
        load_power_w: 360.0,
        temp_gpu_max: 85,
        idle_temp: 29.0,
        load_temp: 63.0,
        pcie_max_gen: 4,
        sm_clock_max: 1410,
        sm_clock_idle: 210,
        mem_clock_max: 1215,
        mem_clock_idle: 1215,
        pcie_load_tx_kbs: 1_000_000.0,
        pcie_load_rx_kbs: 3_000_000.0,
        serial_prefix: "1323",
        vbios: "92.00.36.00.02",
        // Third-generation NVLink: 12 links (600 GB/s); fabric info is Hopper and later.
        nvlinks: 12,
        fabric: false,
        ..HOPPER
    },
    Preset {
        key: "A100-SXM4-80GB",
        name: "NVIDIA A100-SXM4-80GB",
        architecture: 7,
        compute_capability: (8, 0),
        pci_device_id: 0x20B2_10DE,
        pci_subsystem_id: 0x1463_10DE,
        memory_total_mib: 81_920,
        memory_reserved_mib: 573,
        baseline_mib: 420,
        power_limit_w: 400.0,
        power_min_w: 100.0,
        power_max_w: 400.0,
        idle_power_w: 60.0,
        load_power_w: 370.0,
        temp_gpu_max: 85,
        idle_temp: 30.0,
        load_temp: 64.0,
        pcie_max_gen: 4,
        sm_clock_max: 1410,
        sm_clock_idle: 210,
        mem_clock_max: 1593,
        mem_clock_idle: 1593,
        pcie_load_tx_kbs: 1_000_000.0,
        pcie_load_rx_kbs: 3_000_000.0,
        serial_prefix: "1324",
        vbios: "92.00.45.00.03",
        nvlinks: 12,
        fabric: false,
        ..HOPPER
    },
    Preset {
        key: "L40S",
        name: "NVIDIA L40S",
        architecture: 8,
        compute_capability: (8, 9),
        pci_device_id: 0x26B9_10DE,
        pci_subsystem_id: 0x1851_10DE,
        memory_total_mib: 46_068,
        memory_reserved_mib: 446,
        baseline_mib: 400,
        power_limit_w: 350.0,
        power_min_w: 100.0,
        power_max_w: 350.0,
        idle_power_w: 34.0,
        load_power_w: 325.0,
        // nvidia-smi -q, L40S, driver 595: T.Limit 88 °C, shutdown 5 °C above it.
        temp_shutdown: 93,
        temp_slowdown: 90,
        temp_gpu_max: 88,
        temp_mem_max: None,
        idle_temp: 28.0,
        load_temp: 62.0,
        pcie_max_gen: 4,
        sm_clock_max: 2520,
        sm_clock_idle: 210,
        mem_clock_max: 9001,
        mem_clock_idle: 405,
        idle_pstate: 8,
        pcie_load_tx_kbs: 800_000.0,
        pcie_load_rx_kbs: 2_500_000.0,
        serial_prefix: "1325",
        vbios: "95.02.66.00.02",
        not_supported: &[
            "nvmlDeviceGetFanSpeed",
            "nvmlDeviceGetNumFans",
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetRetiredPages",
            "nvmlDeviceGetRetiredPagesPendingStatus",
        ],
        nvlinks: 0,
        fabric: false,
        ..HOPPER
    },
    Preset {
        key: "RTX-4090",
        name: "NVIDIA GeForce RTX 4090",
        brand: brand::GEFORCE,
        architecture: 8,
        compute_capability: (8, 9),
        pci_device_id: 0x2684_10DE,
        pci_subsystem_id: 0x167C_10DE,
        memory_total_mib: 24_564,
        memory_reserved_mib: 314,
        baseline_mib: 380,
        power_limit_w: 450.0,
        power_min_w: 150.0,
        power_max_w: 600.0,
        idle_power_w: 21.0,
        load_power_w: 415.0,
        // nvidia-smi -q, 8 x RTX 4090, driver 535: T.Limit 83 °C, shutdown 7 °C above it.
        temp_shutdown: 90,
        temp_slowdown: 85,
        temp_gpu_max: 83,
        temp_mem_max: None,
        idle_temp: 36.0,
        load_temp: 70.0,
        pcie_max_gen: 4,
        sm_clock_max: 2520,
        sm_clock_idle: 210,
        mem_clock_max: 10_501,
        mem_clock_idle: 405,
        num_fans: 2,
        fan_idle: 30.0,
        fan_load: 72.0,
        idle_pstate: 8,
        pcie_load_tx_kbs: 600_000.0,
        pcie_load_rx_kbs: 2_000_000.0,
        persistence_mode: false,
        serial_prefix: "0",
        vbios: "95.02.18.80.87",
        not_supported: &[
            "nvmlDeviceGetSerial",
            "nvmlDeviceGetTotalEccErrors",
            "nvmlDeviceGetEccMode",
            "nvmlDeviceGetRemappedRows",
            "nvmlDeviceGetRetiredPages",
            "nvmlDeviceGetRetiredPagesPendingStatus",
            "nvmlDeviceGetMigMode",
        ],
        nvlinks: 0,
        fabric: false,
        ..HOPPER
    },
    Preset {
        key: "T4",
        name: "Tesla T4",
        brand: brand::TESLA,
        architecture: 6,
        compute_capability: (7, 5),
        pci_device_id: 0x1EB8_10DE,
        pci_subsystem_id: 0x12A2_10DE,
        memory_total_mib: 15_360,
        memory_reserved_mib: 255,
        baseline_mib: 400,
        power_limit_w: 70.0,
        power_min_w: 60.0,
        power_max_w: 70.0,
        idle_power_w: 9.0,
        load_power_w: 68.0,
        // nvidia-smi -q -x, Tesla T4.
        temp_shutdown: 96,
        temp_slowdown: 93,
        temp_gpu_max: 85,
        temp_mem_max: None,
        idle_temp: 30.0,
        load_temp: 72.0,
        pcie_max_gen: 3,
        sm_clock_max: 1590,
        sm_clock_idle: 300,
        mem_clock_max: 5001,
        mem_clock_idle: 405,
        idle_pstate: 8,
        pcie_load_tx_kbs: 300_000.0,
        pcie_load_rx_kbs: 900_000.0,
        serial_prefix: "1321",
        vbios: "90.04.96.00.02",
        not_supported: &[
            "nvmlDeviceGetFanSpeed",
            "nvmlDeviceGetNumFans",
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetRemappedRows",
            // Memory clocks can be locked from Ampere on.
            "nvmlDeviceSetMemoryLockedClocks",
            "nvmlDeviceResetMemoryLockedClocks",
        ],
        nvlinks: 0,
        fabric: false,
        ..HOPPER
    },
];

/// The preset for a model key, compared without case.
pub fn find(model: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.key.eq_ignore_ascii_case(model))
}

/// The model keys, for "expected one of" messages.
pub fn keys() -> String {
    PRESETS.iter().map(|p| p.key).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::DEVICE_SYMBOLS;

    #[test]
    fn presets_are_consistent() {
        for p in PRESETS {
            assert!(p.power_min_w <= p.power_limit_w && p.power_limit_w <= p.power_max_w);
            assert!(p.idle_power_w < p.load_power_w && p.load_power_w <= p.power_max_w);
            assert!(p.idle_temp < p.load_temp && p.load_temp < p.temp_gpu_max as f64);
            assert!(p.temp_gpu_max <= p.temp_slowdown && p.temp_slowdown < p.temp_shutdown);
            assert!(p.sm_clock_idle < p.sm_clock_max && p.mem_clock_idle <= p.mem_clock_max);
            assert!(p.name.len() < 96 && p.vbios.len() < 32);
            for s in p.not_supported {
                assert!(DEVICE_SYMBOLS.contains(s), "{}: unknown symbol {s}", p.key);
            }
            let fanless = p.not_supported.contains(&"nvmlDeviceGetFanSpeed");
            assert_eq!(fanless, p.num_fans == 0, "{}", p.key);
            assert_eq!(find(&p.key.to_lowercase()), Some(p));
        }
    }
}
