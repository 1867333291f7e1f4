//! The data model shared by the sampler, the store and the readers.
//!
//! Invariants:
//! - Times are integer milliseconds since the Unix epoch, UTC ([`TsMs`]).
//! - A GPU is identified by `(host, uuid)`; its index may change across reboots.
//! - Every metric is an `Option`: `None` means "NVML could not read it" (unsupported, failed,
//!   timed out) and is stored as SQL NULL. A real reading of 0 stays `Some(0)`.
//! - Units are the NVML units unless the field name says otherwise: bytes, milliwatts,
//!   millijoules, degrees Celsius, MHz, percent, KB/s.

/// Milliseconds since the Unix epoch, UTC.
pub type TsMs = i64;

/// Static (or slowly changing) description of one GPU, read at start and when it changes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuInventory {
    pub index: u32,
    pub uuid: String,
    pub name: Option<String>,
    pub serial: Option<String>,
    pub pci_bus_id: Option<String>,
    pub driver_version: Option<String>,
    /// CUDA driver version as NVML reports it, e.g. 12040 for 12.4.
    pub cuda_driver_version: Option<i32>,
    pub nvml_version: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub power_limit_mw: Option<u32>,
    pub power_limit_min_mw: Option<u32>,
    pub power_limit_max_mw: Option<u32>,
    pub temp_slowdown_c: Option<u32>,
    pub temp_shutdown_c: Option<u32>,
    pub temp_gpu_max_c: Option<u32>,
    pub pcie_max_gen: Option<u32>,
    pub pcie_max_width: Option<u32>,
    pub persistence_mode: Option<bool>,
    /// Current MIG mode (true = enabled).
    pub mig_mode: Option<bool>,
    /// Set on a MIG instance (a GPU of its own, `uuid` its `MIG-…` UUID, `index` its parent's).
    pub mig: Option<MigInstance>,
}

/// One XID code's occurrences on a GPU in the recent past (the health verdict's evidence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentXid {
    pub code: i64,
    /// Events (a storm's run counts each).
    pub count: i64,
    pub last_ms: TsMs,
}

/// What makes a GPU a MIG instance: its GPU instance id and profile on its parent.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct MigInstance {
    /// The GPU instance id (`GPU_I_ID`).
    pub gpu_instance_id: u32,
    /// The profile (`GPU_I_PROFILE`): `1g.10gb`.
    pub profile: String,
    pub parent_uuid: String,
}

impl GpuInventory {
    /// How people address the GPU: its index, or `N/I` for instance I of GPU N.
    pub fn address(&self) -> String {
        match &self.mig {
            Some(m) => format!("{}/{}", self.index, m.gpu_instance_id),
            None => self.index.to_string(),
        }
    }
}

/// Why a sample row has no values (or fewer than usual).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum SampleStatus {
    /// Sampled normally (individual metrics may still be NULL).
    #[default]
    Ok = 0,
    /// The GPU's sampling did not finish before the tick's deadline: a gap.
    DeadlineMissed = 1,
    /// The GPU has fallen off the bus (GPU_IS_LOST and friends).
    Lost = 2,
}

impl SampleStatus {
    pub fn as_i64(self) -> i64 {
        self as u8 as i64
    }
    pub fn from_i64(v: i64) -> Self {
        match v {
            1 => Self::DeadlineMissed,
            2 => Self::Lost,
            _ => Self::Ok,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::DeadlineMissed => "deadline_missed",
            Self::Lost => "lost",
        }
    }
}

/// One tick's readings for one GPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSample {
    pub ts_ms: TsMs,
    pub uuid: String,
    pub status: SampleStatus,
    pub util_gpu_pct: Option<u32>,
    pub util_mem_pct: Option<u32>,
    pub mem_used_bytes: Option<u64>,
    pub mem_free_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub temp_c: Option<u32>,
    pub fan_pct: Option<u32>,
    pub clock_sm_mhz: Option<u32>,
    pub clock_mem_mhz: Option<u32>,
    pub power_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    pub energy_mj: Option<u64>,
    /// Performance state, 0 (P0, fastest) ..= 15; None when unknown.
    pub pstate: Option<u32>,
    pub pcie_tx_kbs: Option<u32>,
    pub pcie_rx_kbs: Option<u32>,
    pub pcie_gen: Option<u32>,
    pub pcie_width: Option<u32>,
    /// Clock-event (throttle) reasons bitmask as NVML reports it.
    pub throttle_reasons: Option<u64>,
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    /// Retired pages (single + double bit) on GPUs that retire pages (pre-Ampere).
    pub retired_pages: Option<u32>,
    pub remapped_rows_correctable: Option<u32>,
    pub remapped_rows_uncorrectable: Option<u32>,
    pub remap_pending: Option<bool>,
    pub remap_failure: Option<bool>,
    /// Compute processes NVML listed for this GPU at this sample (their details are the
    /// batch's [`ProcessSample`]s). `None` when the process list was not observed: process
    /// sampling is off, the query failed or is not supported (NOT_SUPPORTED, NO_PERMISSION),
    /// gpuwatch runs in a PID namespace other than the host's (NVML then lists only what that
    /// namespace sees), or an imported log has no `--query-compute-apps` rows. Unknown is not
    /// "no processes".
    pub process_count: Option<u32>,
    /// Percent of the interval since the previous sample that any tensor pipe was active
    /// (NVML GPM's ANY_TENSOR_UTIL, what DCGM calls PIPE_TENSOR_ACTIVE); `None` without GPM
    /// (before Hopper, an old driver) and on a GPU's first sample, which has no interval.
    pub tensor_active_pct: Option<f64>,
    /// Percent of the SMs' time with work, of the warps the SMs could hold, and of the DRAM
    /// bandwidth used, over the same interval (GPM's SM_UTIL, SM_OCCUPANCY and DRAM_BW_UTIL:
    /// what DCGM calls PROF_SM_ACTIVE, PROF_SM_OCCUPANCY and PROF_DRAM_ACTIVE); `None` where
    /// GPM does not offer them, as for `tensor_active_pct`.
    pub sm_active_pct: Option<f64>,
    pub sm_occupancy_pct: Option<f64>,
    pub dram_active_pct: Option<f64>,
    /// The recovery action the driver asks for (`nvmlDeviceGpuRecoveryAction_t`: 0 none,
    /// 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, 5 recover the IMEX domain,
    /// 6 bus reset, 7 system reboot); `None` where the driver does not report it.
    pub recovery_action: Option<u32>,
    /// NVLinks up (active) of those the GPU has, and the links down as a bitmask (bit N:
    /// link N); `None` without NVLink, in MIG mode, or where the driver does not say.
    pub nvlink_links_up: Option<u32>,
    pub nvlink_down_mask: Option<u32>,
    /// NVLink error counters, totals over the GPU's links since the driver loaded:
    /// flow-control CRC, data CRC, replays, recoveries.
    pub nvlink_crc_flit_errors: Option<u64>,
    pub nvlink_crc_data_errors: Option<u64>,
    pub nvlink_replay_errors: Option<u64>,
    pub nvlink_recovery_errors: Option<u64>,
    /// Data moved over NVLink since the driver loaded, KiB, both directions.
    pub nvlink_kib: Option<u64>,
    /// The fabric registration (`nvmlGpuFabricState_t`: 1 not started, 2 in progress,
    /// 3 completed) and its result once completed (an `nvmlReturn_t`, 0 success); `None` on
    /// GPUs outside an NVLink fabric.
    pub fabric_state: Option<u8>,
    pub fabric_status: Option<u32>,
}

impl GpuSample {
    /// A row with no values: a gap or a lost GPU.
    pub fn empty(ts_ms: TsMs, uuid: &str, status: SampleStatus) -> Self {
        Self {
            ts_ms,
            uuid: uuid.to_string(),
            status,
            ..Self::default()
        }
    }
}

/// Who a process is. `(pid, start_time_ms)` identifies it: a reused PID is a new process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Process start time (ms since epoch). 0 when it could not be resolved.
    pub start_time_ms: TsMs,
    pub name: Option<String>,
    /// Command line with secrets redacted.
    pub cmdline: Option<String>,
    pub user: Option<String>,
    /// Where the process runs (container, pod, Slurm job); `None` when its cgroup could not
    /// be read (another PID namespace, exited, simulated): unknown, not "on the host".
    /// Shared: every tick's sample of the process carries the one resolved placement.
    pub placement: Option<std::sync::Arc<Placement>>,
}

/// A process's container, Kubernetes pod and Slurm job, from its cgroup (and, for a pod's
/// name, the kubelet's pod log directories; for a Slurm job's name, its environment).
/// Every field is `None` when the evidence does not say.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Placement {
    /// `docker`, `containerd`, `cri-o` or `podman`.
    pub runtime: Option<String>,
    /// The runtime's 64-hex container id.
    pub container_id: Option<String>,
    pub pod_uid: Option<String>,
    pub pod: Option<String>,
    pub namespace: Option<String>,
    /// The container's name in its pod.
    pub container: Option<String>,
    pub slurm_job: Option<u64>,
    pub slurm_step: Option<String>,
    pub slurm_job_name: Option<String>,
    /// A Slurm array task: `<array job id>_<task id>`.
    pub slurm_array: Option<String>,
    /// How many nodes the Slurm job spans (`SLURM_JOB_NUM_NODES`).
    pub slurm_nodes: Option<u32>,
    /// The systemd unit of a process outside containers and jobs.
    pub unit: Option<String>,
}

/// One compute process seen on one GPU at one tick.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessSample {
    pub ts_ms: TsMs,
    pub gpu_uuid: String,
    pub process: ProcessInfo,
    /// GPU memory used by the process; None when the driver does not say (e.g. inside some VMs).
    pub used_mem_bytes: Option<u64>,
}

/// Something that happened at a point in time: an XID, a GPU lost, an inventory change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    pub ts_ms: TsMs,
    /// None for host-wide events.
    pub gpu_uuid: Option<String>,
    /// `xid`, `gpu_lost`, `gpu_recovered`, `inventory_changed`, `sampler_error`, ...
    pub kind: String,
    /// Numeric code where the kind has one (the XID number).
    pub code: Option<i64>,
    pub message: String,
    /// The GPU's PCI address (`dddd:bb:dd`, see [`crate::xid::nvrm::PciAddr`]) when a kernel
    /// log named the GPU by it; the store finds the GPU at that address.
    pub pci_bus_id: Option<String>,
    /// Who reported it; `None` for the events gpuwatch raises itself.
    pub source: Option<EventSource>,
    /// When the kernel logged it (kernel-log XIDs), ms UTC.
    pub kernel_ms: Option<TsMs>,
}

/// Who reported an event: the store treats the same XID from NVML and from the kernel log as
/// one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventSource {
    /// NVML's event API.
    Nvml,
    /// The daemon following the kernel log (`/dev/kmsg`).
    Kmsg,
    /// `gpuwatch import dmesg`.
    Import,
}

impl EventSource {
    /// The `events.source` value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventSource::Nvml => "nvml",
            EventSource::Kmsg => "kmsg",
            EventSource::Import => "import",
        }
    }
}

/// A failing NVML call, counted per GPU and metric (persisted so `status` can show it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricError {
    pub gpu_uuid: String,
    pub metric: String,
    pub error: String,
    pub count: u64,
    pub first_ms: TsMs,
    pub last_ms: TsMs,
}

/// One point of a training metric (e.g. `training_step`, `training_loss`) with its labels.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrainingPoint {
    pub ts_ms: TsMs,
    pub name: String,
    /// Sorted `(label, value)` pairs; the series identity is `(host, name, labels)`.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Everything one sampler tick produced, written by the store in one transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TickBatch {
    pub ts_ms: TsMs,
    /// Inventories that are new or changed since the last batch (usually empty).
    pub inventory: Vec<GpuInventory>,
    pub samples: Vec<GpuSample>,
    pub processes: Vec<ProcessSample>,
    pub events: Vec<Event>,
    /// Error counters that changed during this tick.
    pub errors: Vec<MetricError>,
    pub training: Vec<TrainingPoint>,
    /// GPUs whose holder (from the kubelet) changed: `None` = released.
    pub allocations: Vec<GpuAllocation>,
    /// Settings (power limit, persistence mode) seen to change between two inventory reads.
    pub setting_changes: Vec<SettingChange>,
}

/// A GPU setting that changed between two of the daemon's inventory reads: by someone else
/// (`nvidia-smi`, another tool), unless a `gpuwatch gpu set` audit row explains it. The store
/// records it in the audit as `who = 'observed'` in that case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingChange {
    /// When it was seen (the tick of the read that found it).
    pub ts_ms: TsMs,
    pub gpu_uuid: String,
    /// The audit's setting name (`power_limit`, `persistence`).
    pub setting: String,
    /// Both values as the audit writes them (`700 W`, `on`).
    pub old: String,
    pub new: String,
    /// The previous read, which still saw `old`: the change happened after it.
    pub since_ms: TsMs,
}

/// Who a GPU (or MIG device) is allocated to, by the kubelet's device plugin.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GpuHolder {
    pub pod: String,
    pub namespace: String,
    pub container: String,
    /// The extended resource the device came from (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`).
    pub resource: String,
    /// The training job the pod works for by its owner (its controller's labels and owner
    /// references from the kubelet's `/pods`, `[kubernetes] kubelet_pods`); `None`: not asked.
    pub job: Option<String>,
}

/// A change of a GPU's holder at a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAllocation {
    pub gpu_uuid: String,
    pub holder: Option<GpuHolder>,
}

/// What one poll of the training-metrics source (Prometheus) learned about one role's query
/// (`step`, `loss`): stored in `training_source` so the rule evaluator, which does no network
/// I/O, can tell "Prometheus is down" from "the job stopped".
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrainingSourceUpdate {
    /// The role: `step` or `loss`.
    pub role: String,
    /// The PromQL that was run.
    pub query: String,
    /// The evaluation-clock time of the poll: the end of its range.
    pub at_ms: TsMs,
    /// `None` on success; on failure the error's kind (`unreachable`, `timeout`, `http_5xx`,
    /// ...) and its message (never containing a secret).
    pub error: Option<(String, String)>,
    /// On success: series in the answer (0 = an empty result, not an error).
    pub series: u64,
    /// On success: finite points returned.
    pub points: u64,
    /// NaN/±Inf values skipped (treated as no data, never stored).
    pub skipped_non_finite: u64,
    /// On success: the newest point's timestamp, if any.
    pub newest_point_ms: Option<TsMs>,
}

/// One poll's output: points for `training_series`/`training_samples` and the status of each
/// role, written in one transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrainingWrite {
    pub points: Vec<TrainingPoint>,
    pub sources: Vec<TrainingSourceUpdate>,
}

/// How serious something is: an alert's severity, and what the default rules make of an XID
/// (the catalogue's, `crate::xid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}
