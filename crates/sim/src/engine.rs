//! Answering queries: the state of a GPU at a tick, its live processes, what an NVML call should
//! do, and which XID events fall in a tick range.
//!
//! Invariants: every query is a pure function of the scenario and the tick; its cost depends on
//! the number of segments, processes or faults, never on the tick. Values are clamped to their
//! NVML range after noise (utilisation 0..=100, memory used <= total - reserved, ...).

use crate::Scenario;
use crate::behaviour::unit;
use crate::compile::FaultAction;
use crate::gpu::GpuModel;
use crate::nvml::{self, code, throttle};
use crate::timeline::Metric;
use crate::types::{CallOutcome, GpuState, ProcessSpec, ProcessState, XidEvent};

/// The part of a busy GPU's utilisation its tensor pipes are active, by default; the same for
/// SM activity, SM occupancy and DRAM bandwidth (an LLM step's kernel mix).
const TENSOR_SHARE: f64 = 0.45;
const SM_SHARE: f64 = 0.8;
const OCCUPANCY_SHARE: f64 = 0.35;
const DRAM_SHARE: f64 = 0.4;

/// Round and clamp into `[lo, hi]`.
fn clamp_round(v: f64, lo: f64, hi: f64) -> f64 {
    if v.is_nan() {
        lo
    } else {
        v.round().clamp(lo, hi)
    }
}

fn to_u32(v: f64) -> u32 {
    clamp_round(v, 0.0, u32::MAX as f64) as u32
}

fn to_u64(v: f64) -> u64 {
    clamp_round(v, 0.0, u64::MAX as f64) as u64
}

/// Noise of amplitude `amp` on the stream `key` (same telescoping form as signals).
fn jitter(key: u64, tick: u64, amp: f64) -> f64 {
    amp * (unit(key, tick + 1) - unit(key, tick))
}

impl GpuModel {
    fn explicit(&self, m: Metric, tick: u64) -> Option<f64> {
        self.tracks[m.id()].at(tick).signal.map(|s| s.value(tick))
    }

    /// Bytes of memory the live processes hold at `tick`.
    fn process_bytes(
        &self,
        processes: &[ProcessSpec],
        tick: u64,
    ) -> impl Iterator<Item = (u32, u64)> {
        self.procs.iter().filter_map(move |(i, sig)| {
            let p = &processes[*i];
            p.alive_at(tick).then(|| (p.pid, to_u64(sig.value(tick))))
        })
    }

    pub(crate) fn processes_at(&self, processes: &[ProcessSpec], tick: u64) -> Vec<ProcessState> {
        self.process_bytes(processes, tick)
            .map(|(pid, used_bytes)| ProcessState { pid, used_bytes })
            .collect()
    }

    pub(crate) fn state(&self, processes: &[ProcessSpec], tick: u64) -> GpuState {
        let s = &self.spec;
        let pr = &self.params;
        let util_sig = self.tracks[Metric::UtilGpu.id()].at(tick).signal;
        let u = util_sig.map_or(0.0, |sig| sig.base(tick)).clamp(0.0, 100.0);
        let busy = u >= 1.0;
        let frac = u / 100.0;
        let key = |m: Metric| self.keys[m.id()];
        let get = |m: Metric, derived: f64| self.explicit(m, tick).unwrap_or(derived);

        let util_gpu = util_sig.map_or(0.0, |sig| sig.value(tick));
        let util_mem = get(
            Metric::UtilMem,
            0.5 * u + jitter(key(Metric::UtilMem), tick, if busy { 2.0 } else { 0.0 }),
        );
        let temp = get(
            Metric::Temp,
            pr.idle_temp
                + (pr.load_temp - pr.idle_temp) * frac
                + jitter(key(Metric::Temp), tick, 0.8),
        );
        let fan = get(
            Metric::Fan,
            pr.fan_idle + (pr.fan_load - pr.fan_idle) * frac,
        );
        let sm = get(
            Metric::SmClock,
            if busy {
                f64::from(s.sm_clock_max_mhz)
            } else {
                pr.sm_clock_idle
            },
        );
        let memclk = get(
            Metric::MemClock,
            if busy {
                f64::from(s.mem_clock_max_mhz)
            } else {
                pr.mem_clock_idle
            },
        );
        let pcie = |m: Metric, load: f64| {
            let base = 20.0 + load * frac;
            get(m, base + jitter(key(m), tick, 0.1 * base))
        };
        let total = s.memory_total_bytes;
        let usable = total.saturating_sub(s.memory_reserved_bytes);
        let used = match self.explicit(Metric::MemUsed, tick) {
            Some(v) => to_u64(v),
            None => self
                .process_bytes(processes, tick)
                .fold(self.baseline_bytes, |acc, (_, b)| acc.saturating_add(b)),
        }
        .min(usable);
        let pstate = get(
            Metric::Pstate,
            if busy { 0.0 } else { f64::from(pr.idle_pstate) },
        );
        let throttle = get(
            Metric::Throttle,
            if busy { 0.0 } else { throttle::GPU_IDLE as f64 },
        );
        // GPM's activities are each a share of a busy GPU's kernel mix (tensor pipes about half
        // of an LLM step's time), 0 when idle, unless a segment sets them.
        let share = |m: Metric, f: f64| {
            let v = if busy {
                f * u + jitter(key(m), tick, 3.0)
            } else {
                0.0
            };
            clamp_round(get(m, v), 0.0, 100.0) as u32
        };
        let energy = self.energy_base_mj + self.energy.energy_mj(tick);
        let nvlink_down_mask = to_u32(get(Metric::NvlinkDown, 0.0));
        // A counter is monotone in the tick: traffic is not modelled, every link moves
        // 1 GiB/s each way from the driver's load, whatever the load and the links' state.
        let nvlink_kib = to_u64(tick as f64 * f64::from(s.nvlinks) * pr.nvlink_link_kib_per_tick);
        GpuState {
            tick,
            lost: s.lost_at_tick.is_some_and(|l| tick >= l),
            util_gpu: clamp_round(util_gpu, 0.0, 100.0) as u32,
            util_mem: clamp_round(util_mem, 0.0, 100.0) as u32,
            mem_total_bytes: total,
            mem_reserved_bytes: s.memory_reserved_bytes,
            mem_used_bytes: used,
            mem_free_bytes: usable - used,
            temp_c: to_u32(temp),
            power_mw: to_u32(self.energy.power_w(tick) * 1000.0),
            energy_mj: to_u64(energy.floor()),
            fan_percent: if s.num_fans == 0 {
                0
            } else {
                clamp_round(fan, 0.0, 100.0) as u32
            },
            sm_clock_mhz: to_u32(sm),
            mem_clock_mhz: to_u32(memclk),
            pcie_tx_kbs: to_u32(pcie(Metric::PcieTx, pr.pcie_load_tx_kbs)),
            pcie_rx_kbs: to_u32(pcie(Metric::PcieRx, pr.pcie_load_rx_kbs)),
            tensor_active_pct: share(Metric::TensorActive, TENSOR_SHARE),
            sm_active_pct: share(Metric::SmActive, SM_SHARE),
            sm_occupancy_pct: share(Metric::SmOccupancy, OCCUPANCY_SHARE),
            dram_active_pct: share(Metric::DramActive, DRAM_SHARE),
            recovery_action: clamp_round(get(Metric::RecoveryAction, 0.0), 0.0, 7.0) as u32,
            pcie_gen: to_u32(get(Metric::PcieGen, f64::from(s.pcie_max_gen))),
            pcie_width: to_u32(get(Metric::PcieWidth, f64::from(s.pcie_max_width))),
            pstate: clamp_round(pstate, 0.0, 15.0) as u32,
            throttle_reasons: to_u64(throttle),
            ecc_corrected: to_u64(get(Metric::EccCorrected, 0.0)),
            ecc_uncorrected: to_u64(get(Metric::EccUncorrected, 0.0)),
            remapped_rows_corr: to_u32(get(Metric::RemappedCorr, 0.0)),
            remapped_rows_unc: to_u32(get(Metric::RemappedUnc, 0.0)),
            remap_pending: get(Metric::RemapPending, 0.0) >= 0.5,
            remap_failure: get(Metric::RemapFailure, 0.0) >= 0.5,
            retired_pages_sbe: to_u32(get(Metric::RetiredSbe, 0.0)),
            retired_pages_dbe: to_u32(get(Metric::RetiredDbe, 0.0)),
            retired_pending: get(Metric::RetiredPending, 0.0) >= 0.5,
            nvlink_down_mask,
            nvlink_crc_flit: to_u64(get(Metric::NvlinkCrcFlit, 0.0)),
            nvlink_crc_data: to_u64(get(Metric::NvlinkCrcData, 0.0)),
            nvlink_replay: to_u64(get(Metric::NvlinkReplay, 0.0)),
            nvlink_recovery: to_u64(get(Metric::NvlinkRecovery, 0.0)),
            nvlink_tx_kib: nvlink_kib,
            nvlink_rx_kib: nvlink_kib,
            fabric_state: clamp_round(get(Metric::FabricState, 3.0), 1.0, 3.0) as u32,
            fabric_status: to_u32(get(Metric::FabricStatus, 0.0)),
        }
    }
}

impl Scenario {
    /// The last fault (in file order) that covers this call, skipping blocks when asked.
    fn fault_for(
        &self,
        index: usize,
        symbol: &str,
        tick: u64,
        skip_blocks: bool,
    ) -> Option<FaultAction> {
        if self.faults.is_empty() {
            return None;
        }
        let base = nvml::base_symbol(symbol);
        self.faults
            .iter()
            .rev()
            .filter(|f| !skip_blocks || matches!(f.action, FaultAction::Error(_)))
            .find(|f| {
                f.from <= tick
                    && f.until.is_none_or(|u| tick < u)
                    && f.gpus.as_ref().is_none_or(|g| g.contains(&index))
                    && f.symbol.as_deref().is_none_or(|s| s == base)
            })
            .map(|f| f.action)
    }

    /// What a per-device call to `symbol` on GPU `index` at `tick` should do.
    ///
    /// Precedence: a matching `[[fault]]` (the last one in the file wins), then a lost GPU
    /// (GPU_IS_LOST), then the model's NOT_SUPPORTED list, else `Ok`. An index out of range
    /// answers INVALID_ARGUMENT.
    pub fn call_outcome(&self, index: usize, symbol: &str, tick: u64) -> CallOutcome {
        match self.fault_for(index, symbol, tick, false) {
            Some(FaultAction::Block(d)) => CallOutcome::Block(d),
            Some(FaultAction::Forever) => CallOutcome::BlockForever,
            _ => match self.call_error(index, symbol, tick) {
                Some(c) => CallOutcome::Error(c),
                None => CallOutcome::Ok,
            },
        }
    }

    /// The error a call answers with, ignoring block faults: what a call that was blocked
    /// answers once its block is over (`None` means answer normally).
    pub fn call_error(&self, index: usize, symbol: &str, tick: u64) -> Option<u32> {
        let Some(gpu) = self.gpus.get(index) else {
            return Some(code::INVALID_ARGUMENT);
        };
        if let Some(FaultAction::Error(c)) = self.fault_for(index, symbol, tick, true) {
            return Some(c);
        }
        if gpu.spec.lost_at_tick.is_some_and(|l| tick >= l) {
            return Some(code::GPU_IS_LOST);
        }
        let unsupported = &gpu.spec.not_supported;
        if unsupported.is_empty() {
            return None;
        }
        let base = nvml::base_symbol(symbol);
        unsupported
            .iter()
            .any(|n| n == base)
            .then_some(code::NOT_SUPPORTED)
    }

    /// Whether GPU `index` supports `symbol` at all (its model list, ignoring faults).
    pub fn supports(&self, index: usize, symbol: &str) -> bool {
        let base = nvml::base_symbol(symbol);
        self.gpus
            .get(index)
            .is_some_and(|g| !g.spec.not_supported.iter().any(|n| n == base))
    }

    /// XID events with `from < tick <= to` (all from tick 0 when `from` is `None`), in tick
    /// order, ties in file order.
    /// The tick of the first event after `tick`, if any.
    pub fn next_event_tick(&self, tick: u64) -> Option<u64> {
        let i = self.events.partition_point(|e| e.tick <= tick);
        self.events.get(i).map(|e| e.tick)
    }

    pub fn events_between(
        &self,
        from_tick_exclusive: Option<u64>,
        to_tick_inclusive: u64,
    ) -> Vec<XidEvent> {
        let lo = match from_tick_exclusive {
            Some(f) => self.events.partition_point(|e| e.tick <= f),
            None => 0,
        };
        let hi = self.events.partition_point(|e| e.tick <= to_tick_inclusive);
        self.events
            .get(lo..hi)
            .map_or_else(Vec::new, <[XidEvent]>::to_vec)
    }
}
