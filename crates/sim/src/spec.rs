//! The scenario file as written: serde structs mirroring the TOML, one per table kind.
//!
//! Invariants: every table denies unknown keys (a typo is an error with its place, not a
//! silently ignored setting); values are kept in scenario units (W, MiB, °C, durations in ms)
//! and untouched here — `compile` validates and converts. Entries and the fields that later
//! checks point at are `Spanned`, so those checks can report `line:col`.

use serde::Deserialize;
use toml::Spanned;

use crate::values::{
    BlockSpec, ComputeMode, Dur, FabricState, GpuList, Pstate, RawBehaviour, ReturnCode, Throttle,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    pub scenario: Option<Spanned<RawScenario>>,
    #[serde(default)]
    pub gpu: Vec<Spanned<RawGpu>>,
    #[serde(default)]
    pub process: Vec<Spanned<RawProcess>>,
    #[serde(default)]
    pub fault: Vec<Spanned<RawFault>>,
    #[serde(default)]
    pub event: Vec<Spanned<RawEvent>>,
    #[serde(default)]
    pub training: Vec<Spanned<RawTraining>>,
    #[serde(default)]
    pub pod: Vec<Spanned<RawPod>>,
}

/// A Kubernetes pod the simulated node's kubelet reports, with the GPUs the device plugin
/// allocated to it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPod {
    pub name: String,
    pub namespace: Option<String>,
    pub container: Option<String>,
    pub gpu: Option<Spanned<GpuList>>,
    pub gpus: Option<Spanned<GpuList>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: Option<String>,
    pub tick_ms: Option<Spanned<u64>>,
    pub duration: Option<Spanned<Dur>>,
    pub seed: Option<u64>,
    pub driver_version: Option<Spanned<String>>,
    pub nvml_version: Option<Spanned<String>>,
    pub cuda_driver_version: Option<i32>,
    pub process_struct_size: Option<Spanned<u32>>,
    pub speed: Option<Spanned<f64>>,
    /// NVML code that `nvmlInit` returns (e.g. "DRIVER_NOT_LOADED"), to test start-up failures.
    pub init_error: Option<crate::values::ReturnCode>,
    /// How long `nvmlInit` blocks (wall time) before it answers: a driver stuck on a GPU.
    pub init_block: Option<Spanned<BlockSpec>>,
    /// Whether the caller may use NVML's setters (root's privilege); absent: decided by the
    /// process's effective uid, as the driver does.
    pub privileged: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGpu {
    pub model: Spanned<String>,
    pub name: Option<Spanned<String>>,
    pub uuid: Option<Spanned<String>>,
    pub serial: Option<Spanned<String>>,
    pub pci_bus_id: Option<Spanned<String>>,
    pub memory_total_mib: Option<Spanned<u64>>,
    pub memory_reserved_mib: Option<u64>,
    pub baseline_mib: Option<u64>,
    pub power_limit_w: Option<f64>,
    pub power_min_w: Option<f64>,
    pub power_max_w: Option<f64>,
    pub power_default_w: Option<f64>,
    pub idle_power_w: Option<f64>,
    pub load_power_w: Option<f64>,
    pub temp_shutdown: Option<u32>,
    pub temp_slowdown: Option<u32>,
    pub temp_gpu_max: Option<u32>,
    pub temp_mem_max: Option<u32>,
    pub idle_temp: Option<f64>,
    pub load_temp: Option<f64>,
    pub pcie_max_gen: Option<u32>,
    pub pcie_max_width: Option<u32>,
    pub sm_clock_max: Option<u32>,
    pub sm_clock_idle: Option<u32>,
    pub mem_clock_max: Option<u32>,
    pub mem_clock_idle: Option<u32>,
    pub num_fans: Option<u32>,
    pub persistence_mode: Option<bool>,
    pub mig_mode: Option<bool>,
    pub mig_mode_pending: Option<bool>,
    pub compute_mode: Option<Spanned<ComputeMode>>,
    pub ecc_mode: Option<Spanned<bool>>,
    pub ecc_mode_pending: Option<Spanned<bool>>,
    pub lost_at: Option<Spanned<Dur>>,
    /// NVLinks the GPU has (default: the model's).
    pub nvlinks: Option<Spanned<u32>>,
    /// The GPU reports fabric registration (default: the model's).
    pub fabric: Option<bool>,
    #[serde(default)]
    pub not_supported: Vec<Spanned<String>>,
    #[serde(default)]
    pub supported: Vec<Spanned<String>>,
    #[serde(default)]
    pub timeline: Vec<Spanned<RawSegment>>,
    /// MIG instances (the GPU in MIG mode).
    #[serde(default)]
    pub mig: Vec<Spanned<crate::mig::RawMig>>,
}

/// One timeline segment. Each metric key is optional; absent ones fall back to earlier
/// segments covering the same time, then to the derived/idle default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSegment {
    pub from: Option<Spanned<Dur>>,
    pub to: Option<Spanned<Dur>>,
    pub util_gpu: Option<Spanned<RawBehaviour>>,
    pub util_mem: Option<Spanned<RawBehaviour>>,
    pub mem_used_mib: Option<Spanned<RawBehaviour>>,
    pub mem_used_bytes: Option<Spanned<RawBehaviour>>,
    pub temp: Option<Spanned<RawBehaviour>>,
    pub power_w: Option<Spanned<RawBehaviour>>,
    pub fan: Option<Spanned<RawBehaviour>>,
    pub sm_clock: Option<Spanned<RawBehaviour>>,
    pub mem_clock: Option<Spanned<RawBehaviour>>,
    pub pcie_tx_kbs: Option<Spanned<RawBehaviour>>,
    pub pcie_rx_kbs: Option<Spanned<RawBehaviour>>,
    pub tensor_active: Option<Spanned<RawBehaviour>>,
    pub sm_active: Option<Spanned<RawBehaviour>>,
    pub sm_occupancy: Option<Spanned<RawBehaviour>>,
    pub dram_active: Option<Spanned<RawBehaviour>>,
    pub recovery_action: Option<Spanned<RawBehaviour>>,
    pub pcie_gen: Option<Spanned<RawBehaviour>>,
    pub pcie_width: Option<Spanned<RawBehaviour>>,
    pub pstate: Option<Spanned<Pstate>>,
    pub throttle: Option<Spanned<Throttle>>,
    pub ecc_corrected: Option<Spanned<RawBehaviour>>,
    pub ecc_uncorrected: Option<Spanned<RawBehaviour>>,
    pub remapped_rows_corr: Option<Spanned<RawBehaviour>>,
    pub remapped_rows_unc: Option<Spanned<RawBehaviour>>,
    pub remap_pending: Option<Spanned<bool>>,
    pub remap_failure: Option<Spanned<bool>>,
    pub retired_pages_sbe: Option<Spanned<RawBehaviour>>,
    pub retired_pages_dbe: Option<Spanned<RawBehaviour>>,
    pub retired_pending: Option<Spanned<bool>>,
    /// Links down in this segment, by number (`[3, 7]`).
    pub nvlink_down: Option<Spanned<Vec<u32>>>,
    pub nvlink_crc_flit_errors: Option<Spanned<RawBehaviour>>,
    pub nvlink_crc_data_errors: Option<Spanned<RawBehaviour>>,
    pub nvlink_replay_errors: Option<Spanned<RawBehaviour>>,
    pub nvlink_recovery_errors: Option<Spanned<RawBehaviour>>,
    /// `"not_started"`, `"in_progress"` or `"completed"`.
    pub fabric_state: Option<Spanned<FabricState>>,
    /// The registration's result once completed: `"SUCCESS"` or an NVML error.
    pub fabric_status: Option<Spanned<ReturnCode>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProcess {
    pub pid: Spanned<i64>,
    pub name: String,
    pub cmdline: Option<String>,
    pub user: Option<String>,
    pub gpu: Option<Spanned<GpuList>>,
    pub gpus: Option<Spanned<GpuList>>,
    pub start: Option<Spanned<Dur>>,
    pub end: Option<Spanned<Dur>>,
    pub mem_mib: Option<Spanned<RawBehaviour>>,
    pub mem_bytes: Option<Spanned<RawBehaviour>>,
    /// The process's `/proc/PID/cgroup` text (e.g. `0::/kubepods.slice/…`).
    pub cgroup: Option<String>,
    /// The GPU instance id of the MIG instance it runs on (its one GPU in MIG mode).
    pub mig: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFault {
    pub gpu: Option<Spanned<GpuList>>,
    pub gpus: Option<Spanned<GpuList>>,
    pub symbol: Option<Spanned<String>>,
    pub from: Option<Spanned<Dur>>,
    pub until: Option<Spanned<Dur>>,
    pub error: Option<Spanned<ReturnCode>>,
    pub block: Option<Spanned<BlockSpec>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEvent {
    pub gpu: Spanned<i64>,
    pub at: Spanned<Dur>,
    pub xid: Spanned<i64>,
    /// The same XID this many times in all (a storm), `every` apart (default 1).
    pub repeat: Option<Spanned<i64>>,
    pub every: Option<Spanned<Dur>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTraining {
    pub job: Spanned<String>,
    pub gpus: Spanned<GpuList>,
    pub start: Option<Spanned<Dur>>,
    pub end: Option<Spanned<Dur>>,
    pub steps_per_sec: Spanned<f64>,
    #[serde(default)]
    pub per_gpu: bool,
    /// Extra labels on every series of the job (e.g. `pod`, `namespace`).
    #[serde(default)]
    pub labels: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    pub loss: Option<Spanned<RawLoss>>,
    #[serde(default)]
    pub stall: Vec<Spanned<RawStall>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLoss {
    pub initial: f64,
    #[serde(rename = "final")]
    pub final_: f64,
    /// Steps for the excess loss to fall to 1/e.
    pub decay_steps: f64,
    #[serde(default)]
    pub noise: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStall {
    pub from: Spanned<Dur>,
    pub to: Spanned<Dur>,
    pub kind: Option<Spanned<String>>,
    /// Steps a `kind = "restart"` goes back (whole steps >= 0).
    pub rewind: Option<Spanned<i64>>,
}
