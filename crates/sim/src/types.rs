//! The public value types the engine hands out: static GPU inventory, dynamic state at a tick,
//! processes, call outcomes, XID events and training series.
//!
//! Invariants: all units are NVML's (percent, bytes, °C, mW, mJ, MHz, KB/s, bitmasks), so the
//! fake library copies fields straight into NVML structs; everything is plain data (`Clone`,
//! `Send`, `Sync`).

use std::time::Duration;

/// Static inventory of one simulated GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    pub index: usize,
    /// The preset key (`"H100-SXM-80GB"`).
    pub model: String,
    /// Marketing name as NVML reports it (`"NVIDIA H100 80GB HBM3"`).
    pub name: String,
    pub uuid: String,
    pub serial: String,
    /// `"00000000:18:00.0"` (domain:bus:device.function, the 32-byte `busId` form).
    pub pci_bus_id: String,
    pub pci_domain: u32,
    pub pci_bus: u32,
    pub pci_device: u32,
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    pub brand: u32,
    pub architecture: u32,
    pub compute_capability: (i32, i32),
    pub vbios: String,
    pub memory_total_bytes: u64,
    pub memory_reserved_bytes: u64,
    pub power_limit_mw: u32,
    pub power_min_mw: u32,
    pub power_max_mw: u32,
    pub power_default_mw: u32,
    pub temp_shutdown_c: u32,
    pub temp_slowdown_c: u32,
    pub temp_gpu_max_c: u32,
    /// `None` where the board reports no memory temperature limit.
    pub temp_mem_max_c: Option<u32>,
    pub pcie_max_gen: u32,
    pub pcie_max_width: u32,
    pub sm_clock_max_mhz: u32,
    pub mem_clock_max_mhz: u32,
    /// The lowest clocks the GPU runs at (idle): the bottom of its supported clock lists.
    pub sm_clock_idle_mhz: u32,
    pub mem_clock_idle_mhz: u32,
    pub num_fans: u32,
    pub persistence_mode: bool,
    /// MIG mode now and after the next GPU reset (`nvmlDeviceGetMigMode`).
    pub mig_mode: bool,
    pub mig_mode_pending: bool,
    /// `nvmlComputeMode_t`: 0 default, 1 exclusive thread, 2 prohibited, 3 exclusive process.
    pub compute_mode: u32,
    /// ECC mode now and after the next reboot (`nvmlDeviceGetEccMode`); with ECC off now, the
    /// ECC error counters answer NOT_SUPPORTED ("requires ECC mode to be enabled").
    pub ecc_mode: bool,
    pub ecc_mode_pending: bool,
    /// Tick from which every per-device call answers GPU_IS_LOST.
    pub lost_at_tick: Option<u64>,
    /// Base names of the symbols this GPU answers NOT_SUPPORTED.
    pub not_supported: Vec<String>,
    /// NVLinks the GPU has (`NVML_FI_DEV_NVLINK_LINK_COUNT`); 0 without NVLink (then every
    /// NVLink call answers NOT_SUPPORTED, as it does in MIG mode).
    pub nvlinks: u32,
    /// The GPU registers with an NVLink fabric (NVSwitch systems, Hopper and later):
    /// `nvmlDeviceGetGpuFabricInfo` answers; NOT_SUPPORTED otherwise.
    pub fabric: bool,
    /// MIG instances (in MIG mode), in `[[gpu.mig]]` order.
    pub mig_instances: Vec<crate::mig::MigSpec>,
}

/// Every dynamic value of one GPU at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuState {
    pub tick: u64,
    /// The GPU has fallen off the bus (`lost_at` reached).
    pub lost: bool,
    pub util_gpu: u32,
    pub util_mem: u32,
    pub mem_total_bytes: u64,
    pub mem_reserved_bytes: u64,
    pub mem_used_bytes: u64,
    /// `total - reserved - used`.
    pub mem_free_bytes: u64,
    pub temp_c: u32,
    pub power_mw: u32,
    /// Energy since the (simulated) driver load, consistent with the integral of power.
    pub energy_mj: u64,
    pub fan_percent: u32,
    pub sm_clock_mhz: u32,
    pub mem_clock_mhz: u32,
    pub pcie_tx_kbs: u32,
    pub pcie_rx_kbs: u32,
    /// Tensor-pipe activity, % of the tick (what GPM's ANY_TENSOR_UTIL reports between
    /// two samples); served only where the model has GPM (Hopper and later).
    pub tensor_active_pct: u32,
    /// GPM's SM activity (SM_UTIL: % of the SMs' time with a warp resident), SM occupancy
    /// (% of the warps an SM could hold) and DRAM bandwidth use (DRAM_BW_UTIL), % of the tick;
    /// served where the model has GPM.
    pub sm_active_pct: u32,
    pub sm_occupancy_pct: u32,
    pub dram_active_pct: u32,
    /// The recovery action the driver asks for (`nvmlDeviceGpuRecoveryAction_t`: 0 none,
    /// 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, 5 recover the IMEX domain,
    /// 6 bus reset, 7 system reboot).
    pub recovery_action: u32,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    pub pstate: u32,
    pub throttle_reasons: u64,
    pub ecc_corrected: u64,
    pub ecc_uncorrected: u64,
    pub remapped_rows_corr: u32,
    pub remapped_rows_unc: u32,
    pub remap_pending: bool,
    /// A row remap failed: the GPU ran out of spare rows (`failureOccurred`).
    pub remap_failure: bool,
    pub retired_pages_sbe: u32,
    pub retired_pages_dbe: u32,
    pub retired_pending: bool,
    /// The NVLinks that are down (bit N: link N), among the GPU's `nvlinks`.
    pub nvlink_down_mask: u32,
    /// NVLink error counters, totals over the links.
    pub nvlink_crc_flit: u64,
    pub nvlink_crc_data: u64,
    pub nvlink_replay: u64,
    pub nvlink_recovery: u64,
    /// Data moved over NVLink since the driver loaded, KiB, each direction: traffic is not
    /// modelled, every link moves 1 GiB/s each way (a counter that never runs backwards).
    pub nvlink_tx_kib: u64,
    pub nvlink_rx_kib: u64,
    /// `nvmlGpuFabricState_t` (1 not started, 2 in progress, 3 completed) and the status
    /// (`nvmlReturn_t`, meaningful once completed).
    pub fabric_state: u32,
    pub fabric_status: u32,
}

impl GpuState {
    /// The number of NVLinks up among `links`.
    pub fn nvlinks_up(&self, links: u32) -> u32 {
        let all = if links >= 32 {
            u32::MAX
        } else {
            (1u32 << links) - 1
        };
        (all & !self.nvlink_down_mask).count_ones()
    }
}

/// Static metadata of one simulated process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSpec {
    pub pid: u32,
    pub name: String,
    pub cmdline: String,
    pub user: String,
    pub gpus: Vec<usize>,
    pub start_tick: u64,
    /// First tick at which the process is gone; `None` runs forever.
    pub end_tick: Option<u64>,
    /// What `/proc/PID/cgroup` says for it (its container, pod, Slurm job).
    pub cgroup: Option<String>,
    /// The GPU instance id of the MIG instance it runs on.
    pub mig: Option<u32>,
}

/// A pod the simulated kubelet reports: the GPUs allocated to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub container: String,
    pub gpus: Vec<usize>,
}

impl ProcessSpec {
    pub fn alive_at(&self, tick: u64) -> bool {
        self.start_tick <= tick && self.end_tick.is_none_or(|e| tick < e)
    }
}

/// A live process's memory on one GPU at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessState {
    pub pid: u32,
    pub used_bytes: u64,
}

/// What an NVML call should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// Answer normally.
    Ok,
    /// Return this NVML code.
    Error(u32),
    /// Sleep this long in wall time, then answer (see [`crate::Scenario::call_error`]).
    Block(Duration),
    /// Never return.
    BlockForever,
}

/// An XID error event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidEvent {
    pub gpu: usize,
    pub tick: u64,
    pub xid: u64,
}

/// One Prometheus-style sample of a training series.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingValue {
    /// `"training_step"` or `"training_loss"`.
    pub name: String,
    /// Sorted by key: `job`, plus `gpu` (the index) when the job reports per GPU.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// What happens to a training job in a stall window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallKind {
    /// Stuck (e.g. a collective waiting forever): no steps, series still reported. The thing
    /// gpuwatch should alert on.
    Hang,
    /// Deliberate (checkpoint save, evaluation): no steps, series still reported; steps resume
    /// on their own.
    Checkpoint,
    /// A scrape gap: the job trains on (steps advance) but no points are reported.
    Gap,
    /// A crash and restart from a checkpoint: no steps and no points in the window; from its
    /// end the step counter resumes [`Stall::rewind`] steps below its value at the start.
    Restart,
}

impl StallKind {
    /// True when the job does no steps during the window.
    pub fn stops_steps(self) -> bool {
        !matches!(self, StallKind::Gap)
    }

    /// True when the job reports no points during the window.
    pub fn silences_series(self) -> bool {
        matches!(self, StallKind::Gap | StallKind::Restart)
    }
}

/// A window `[from_tick, to_tick)` in which a training job makes no progress or reports nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub from_tick: u64,
    pub to_tick: u64,
    pub kind: StallKind,
    /// Steps a restart goes back (0 for the other kinds); the step never goes below 0.
    pub rewind: u64,
}

/// Static description of a training job (for tests that know where the hangs are).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingSpec {
    pub job: String,
    pub gpus: Vec<usize>,
    pub start_tick: u64,
    pub end_tick: Option<u64>,
    pub steps_per_sec: f64,
    pub per_gpu: bool,
    /// Extra labels of every series (never `gpu` or `job`).
    pub labels: Vec<(String, String)>,
    pub stalls: Vec<Stall>,
}
