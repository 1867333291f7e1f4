//! Reading one GPU through nvml-wrapper: its inventory and one tick's metrics.
//!
//! Invariants: every read goes through [`Support::read`], so an unsupported or failing value
//! is `None`, never 0; once the GPU is lost nothing more is called on it.

use nvml_wrapper::enum_wrappers::device::{
    Clock, PcieUtilCounter, PerformanceState, RetirementCause, TemperatureSensor,
    TemperatureThreshold,
};
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::{Device, Nvml};

use crate::model::{GpuInventory, GpuSample, SampleStatus, TsMs};

use super::gpu_procs::{RawProcess, compute_processes};
use super::nvml::NvmlHandle;
use super::support::Support;

/// Reads the inventory of one GPU.
pub fn read_inventory(
    dev: &Device<'_>,
    index: u32,
    sys: &SystemInfo,
    s: &mut Support,
) -> GpuInventory {
    let constraints = s.read("power_limit_constraints", || {
        dev.power_management_limit_constraints()
    });
    let threshold = |s: &mut Support, name: &'static str, t: TemperatureThreshold| {
        s.read(name, || dev.temperature_threshold(t))
    };
    GpuInventory {
        index,
        uuid: s.read("uuid", || dev.uuid()).unwrap_or_default(),
        name: s.read("name", || dev.name()),
        serial: s.read("serial", || dev.serial()),
        pci_bus_id: s.read("pci_info", || dev.pci_info()).map(|p| p.bus_id),
        driver_version: sys.driver_version.clone(),
        cuda_driver_version: sys.cuda_driver_version,
        nvml_version: sys.nvml_version.clone(),
        memory_total_bytes: s.read("memory_info", || dev.memory_info()).map(|m| m.total),
        power_limit_mw: s.read("power_limit", || dev.power_management_limit()),
        power_limit_min_mw: constraints.as_ref().map(|c| c.min_limit),
        power_limit_max_mw: constraints.as_ref().map(|c| c.max_limit),
        temp_slowdown_c: threshold(s, "temp_threshold_slowdown", TemperatureThreshold::Slowdown),
        temp_shutdown_c: threshold(s, "temp_threshold_shutdown", TemperatureThreshold::Shutdown),
        temp_gpu_max_c: threshold(s, "temp_threshold_gpu_max", TemperatureThreshold::GpuMax),
        pcie_max_gen: s.read("pcie_max_gen", || dev.max_pcie_link_gen()),
        pcie_max_width: s.read("pcie_max_width", || dev.max_pcie_link_width()),
        persistence_mode: s.read("persistence_mode", || dev.is_in_persistent_mode()),
        mig_mode: s
            .read("mig_mode", || dev.mig_mode())
            .map(|m| m.current == 1),
        // A whole GPU; its MIG instances are read by `mig.rs`.
        mig: None,
    }
}

/// System-level facts shared by every GPU's inventory.
#[derive(Debug, Clone, Default)]
pub struct SystemInfo {
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    pub cuda_driver_version: Option<i32>,
}

impl SystemInfo {
    pub fn from_handle(h: &NvmlHandle) -> Self {
        Self {
            driver_version: h.driver_version.clone(),
            nvml_version: h.nvml_version.clone(),
            cuda_driver_version: h.cuda_driver_version,
        }
    }
}

/// Reads the enforced power limit: slow-changing (an administrator's or the system's cap), so
/// the worker reads it with the inventory, not every tick.
pub fn read_power_limit(dev: &Device<'_>, s: &mut Support) -> Option<u32> {
    s.read("enforced_power_limit", || dev.enforced_power_limit())
}

/// Reads one tick's metrics (`power_limit_mw` as last read by [`read_power_limit`]).
pub fn read_sample(
    nvml: &Nvml,
    dev: &Device<'_>,
    uuid: &str,
    ts_ms: TsMs,
    power_limit_mw: Option<u32>,
    s: &mut Support,
) -> GpuSample {
    let util = s.read("utilization", || dev.utilization_rates());
    let mem = s.read("memory_info", || dev.memory_info());
    let counters = super::fields::read_counters(nvml, dev, s);
    let remap = counters.remapped;
    let mut sample = GpuSample {
        ts_ms,
        uuid: uuid.to_string(),
        status: SampleStatus::Ok,
        util_gpu_pct: util.as_ref().map(|u| u.gpu),
        util_mem_pct: util.as_ref().map(|u| u.memory),
        mem_used_bytes: mem.as_ref().map(|m| m.used),
        mem_free_bytes: mem.as_ref().map(|m| m.free),
        mem_total_bytes: mem.as_ref().map(|m| m.total),
        temp_c: s.read("temperature", || dev.temperature(TemperatureSensor::Gpu)),
        fan_pct: s.read("fan_speed", || dev.fan_speed(0)),
        clock_sm_mhz: s.read("clock_sm", || dev.clock_info(Clock::SM)),
        clock_mem_mhz: s.read("clock_mem", || dev.clock_info(Clock::Memory)),
        power_mw: s.read("power_usage", || dev.power_usage()),
        power_limit_mw,
        energy_mj: counters.energy_mj,
        pstate: s
            .read("performance_state", || dev.performance_state())
            .and_then(pstate_number),
        pcie_tx_kbs: s.read("pcie_tx", || dev.pcie_throughput(PcieUtilCounter::Send)),
        pcie_rx_kbs: s.read("pcie_rx", || dev.pcie_throughput(PcieUtilCounter::Receive)),
        pcie_gen: s.read("pcie_gen", || dev.current_pcie_link_gen()),
        pcie_width: s.read("pcie_width", || dev.current_pcie_link_width()),
        throttle_reasons: s.read("throttle_reasons", || throttle_reasons(nvml, dev)),
        ecc_corrected: counters.ecc_corrected,
        ecc_uncorrected: counters.ecc_uncorrected,
        retired_pages: None,
        remapped_rows_correctable: remap.map(|r| r.0),
        remapped_rows_uncorrectable: remap.map(|r| r.1),
        remap_pending: remap.map(|r| r.2),
        remap_failure: remap.map(|r| r.3),
        // Set by the coordinator from the process list (when it was observed).
        process_count: None,
        // Set by the worker from its GPM reader (two samples make one value).
        tensor_active_pct: None,
        sm_active_pct: None,
        sm_occupancy_pct: None,
        dram_active_pct: None,
        recovery_action: counters.recovery_action,
        // Set by the worker from the NVLink reader.
        nvlink_links_up: None,
        nvlink_down_mask: None,
        nvlink_crc_flit_errors: None,
        nvlink_crc_data_errors: None,
        nvlink_replay_errors: None,
        nvlink_recovery_errors: None,
        nvlink_kib: None,
        fabric_state: None,
        fabric_status: None,
    };
    // Row remapping (Ampere and later) replaced page retirement: read pages only without it.
    if remap.is_none() {
        sample.retired_pages = s.read("retired_pages", || {
            let single = dev.retired_pages(RetirementCause::MultipleSingleBitEccErrors)?;
            let double = dev.retired_pages(RetirementCause::DoubleBitEccError)?;
            Ok((single.len() + double.len()) as u32)
        });
    }
    if s.lost.is_some() {
        return GpuSample::empty(ts_ms, uuid, SampleStatus::Lost);
    }
    sample
}

/// Reads the compute processes (PID and memory).
/// The GPU's compute processes; `None` when the list could not be read (not supported, no
/// permission, an error): unknown, not "no processes".
pub fn read_processes(nvml: &Nvml, dev: &Device<'_>, s: &mut Support) -> Option<Vec<RawProcess>> {
    s.read("compute_processes", || compute_processes(dev, nvml))
}

fn pstate_number(p: PerformanceState) -> Option<u32> {
    use PerformanceState::*;
    Some(match p {
        Zero => 0,
        One => 1,
        Two => 2,
        Three => 3,
        Four => 4,
        Five => 5,
        Six => 6,
        Seven => 7,
        Eight => 8,
        Nine => 9,
        Ten => 10,
        Eleven => 11,
        Twelve => 12,
        Thirteen => 13,
        Fourteen => 14,
        Fifteen => 15,
        Unknown => return None,
    })
}

/// The raw clock-event reasons bitmask (nvml-wrapper drops bits it does not know).
fn throttle_reasons(nvml: &Nvml, dev: &Device<'_>) -> Result<u64, NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetCurrentClocksThrottleReasons
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let mut bits: u64 = 0;
    // SAFETY: valid handle and a valid out-pointer to a u64.
    nvml_try(unsafe { sym(dev.handle(), &mut bits) })?;
    Ok(bits)
}
