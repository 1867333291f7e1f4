//! Lanes: the threads that make every NVML call. One lane reads its GPUs in turn, each tick;
//! at start one lane holds every GPU, so a tick wakes one thread instead of one per GPU. When
//! a call stalls, the coordinator ([`super::Sampler`]) leaves the stalled GPU alone on the
//! lane stuck in it and moves the lane's other GPUs to a new lane, so a call that never
//! returns costs one GPU, not the daemon.
//!
//! Invariants:
//! - A GPU is read by the lane that owns it ([`GpuCell::owner`]); a lane checks ownership
//!   before each GPU and skips the GPUs moved away from it, so after a move the old lane does
//!   not read them again (a read already begun finishes; its late answer is discarded).
//! - A GPU's own state (inventory, error bookkeeping, lost) lives in its [`GpuCell`] and moves
//!   with it; what borrows the NVML handle (the device handle, the previous GPM sample) is the
//!   lane's and is made again by a lane that takes the GPU over (tensor activity is then
//!   unknown for one tick: it needs two samples).
//! - A lane answers each GPU of a request at most once, in the mailbox, as soon as that GPU is
//!   read; it never calls NVML again on a GPU found lost; it ends when its request channel
//!   closes or the sampler stops.
//! - Self-clocked on the wall clock: a request may say when to start ([`Request::at`]) and when
//!   the next one is due ([`Request::next_at`]); the lane sleeps until then before it looks
//!   for that request, which the coordinator sent meanwhile, so a tick wakes the lane once
//!   (its own timer) and the coordinator once (the last answer).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nvml_wrapper::{Device, Nvml};

use crate::model::{GpuInventory, GpuSample, MetricError, SampleStatus, TsMs};

use super::device::{SystemInfo, read_inventory, read_power_limit, read_processes, read_sample};
use super::gpm::TensorReader;
use super::gpu_procs::RawProcess;
use super::mailbox::Mailbox;
use super::support::Support;

/// What a lane is asked to do for one tick.
#[derive(Debug, Clone)]
pub struct Request {
    pub tick_id: u64,
    pub ts_ms: TsMs,
    pub refresh_inventory: bool,
    /// Read this tick's metrics (false for the inventory-only request at start-up).
    pub sample: bool,
    pub processes: bool,
    /// The GPUs to read, in order (those the lane owns and are not lost).
    pub gpus: Vec<u32>,
    /// Quarantined GPUs probed by this request: their lost state is forgotten, their handle
    /// and inventory read again (a GPU back from a reset is a new session of the device).
    pub probe: Vec<u32>,
    /// Not read before this instant (the tick's time on the wall clock); `None`: at once.
    pub at: Option<Instant>,
    /// The next request will not be due before this instant: the lane sleeps until then
    /// before it waits on its channel (the request is sent while it sleeps, which wakes no
    /// one). `None`: the next request may come at any time.
    pub next_at: Option<Instant>,
}

/// One GPU's answer to a request.
#[derive(Debug)]
pub struct Response {
    pub index: u32,
    pub tick_id: u64,
    /// The tick time of the request.
    pub ts_ms: TsMs,
    /// Present on the first answer and whenever a refresh finds a change.
    pub inventory: Option<GpuInventory>,
    pub sample: Option<GpuSample>,
    /// The compute processes, when they were asked for and could be read.
    pub processes: Option<Vec<RawProcess>>,
    pub errors: Vec<MetricError>,
    /// Set (once) when the GPU was found lost during this request.
    pub lost: Option<String>,
    /// The GPU's MIG instances (in MIG mode), each a GPU of its own.
    pub instances: Vec<super::mig::Instance>,
}

/// What of a GPU survives a move between lanes.
#[derive(Debug)]
struct GpuState {
    support: Support,
    inventory: Option<GpuInventory>,
    /// Read with the inventory (slow-changing), carried on every sample.
    power_limit: Option<u32>,
    lost_reported: bool,
}

/// A GPU as the lanes share it: which lane owns it, and its state.
#[derive(Debug)]
pub struct GpuCell {
    pub index: u32,
    /// The id of the lane that reads it.
    pub owner: AtomicUsize,
    state: Mutex<GpuState>,
}

impl GpuCell {
    pub fn new(index: u32, owner: usize) -> Self {
        Self {
            index,
            owner: AtomicUsize::new(owner),
            state: Mutex::new(GpuState {
                support: Support::new(&format!("index {index}")),
                inventory: None,
                power_limit: None,
                lost_reported: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GpuState> {
        // A lane that panicked mid-read left bookkeeping that is still consistent enough to go
        // on with (at worst an error count is off by one).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// No GPU is being read (the value of [`Progress::current`] between reads).
pub const IDLE: u32 = u32::MAX;

/// How far a lane is, for the coordinator to tell a stalled lane from a slow one.
#[derive(Debug)]
pub struct Progress {
    /// The GPU being read, or [`IDLE`].
    pub current: AtomicU32,
    /// When the current read began ([`now_us`]).
    pub since_us: AtomicU64,
    /// The newest tick whose request the lane finished.
    pub done_tick: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            current: AtomicU32::new(IDLE),
            since_us: AtomicU64::new(0),
            done_tick: AtomicU64::new(0),
        }
    }
}

/// Microseconds on the monotonic clock since the first call (for [`Progress::since_us`]).
pub fn now_us() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// What a lane's thread needs.
pub struct LaneParts {
    pub id: usize,
    pub nvml: Arc<Nvml>,
    pub sys: SystemInfo,
    pub cells: Arc<[GpuCell]>,
    pub progress: Arc<Progress>,
    pub requests: Receiver<Request>,
    pub mailbox: Mailbox,
    /// Set (through [`crate::clock::request_stop`]) when the sampler stops.
    pub stop: Arc<AtomicBool>,
}

/// What borrows NVML, per GPU, on this lane.
struct Local<'n> {
    device: Option<Device<'n>>,
    tensor: TensorReader<'n>,
    mig: super::mig::MigReader<'n>,
}

/// Runs lane `parts.id` until its request channel closes.
pub fn run(parts: LaneParts) {
    let LaneParts {
        id,
        nvml,
        sys,
        cells,
        progress,
        requests,
        mailbox,
        stop,
    } = parts;
    let nvml: &Nvml = &nvml;
    let mut locals: HashMap<u32, Local<'_>> = HashMap::new();
    while let Ok(req) = requests.recv() {
        if !sleep_until(req.at, &stop) {
            break;
        }
        // What this lane no longer reads is dropped (a GPU taken over gets a fresh handle
        // when it comes back).
        locals.retain(|g, _| req.gpus.contains(g));
        for (n, &index) in req.gpus.iter().enumerate() {
            let Some(cell) = cells.get(index as usize) else {
                continue;
            };
            if cell.owner.load(Ordering::Acquire) != id {
                locals.remove(&index);
                continue;
            }
            progress.since_us.store(now_us(), Ordering::Release);
            progress.current.store(index, Ordering::Release);
            let mut state = cell.lock();
            let probed = req.probe.contains(&index);
            if probed {
                locals.remove(&index);
                state.support.lost = None;
                state.lost_reported = false;
            }
            let local = locals.entry(index).or_insert_with(|| Local {
                device: match nvml.device_by_index(index) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        state.support.fail("device_handle", &e);
                        None
                    }
                },
                tensor: TensorReader::default(),
                mig: super::mig::MigReader::default(),
            });
            let resp = read_gpu(nvml, index, &sys, &req, probed, &mut state, local);
            drop(state);
            if n + 1 == req.gpus.len() {
                // Done before the last answer wakes the coordinator, which may then ask again
                // at once and must find this lane free.
                finish(&progress, req.tick_id);
            }
            mailbox.post(resp);
        }
        finish(&progress, req.tick_id);
        if !sleep_until(req.next_at, &stop) {
            break;
        }
    }
}

/// How early a lane may start a read: a tick's instant comes from the wall clock, the next
/// one's from the monotonic clock, and a sleep of a few hundred microseconds between the two
/// would cost a wake-up for nothing.
pub const EARLY_SLACK: Duration = Duration::from_millis(2);

/// Sleeps until `at` (if given and more than [`EARLY_SLACK`] ahead); false when the sampler
/// stopped.
fn sleep_until(at: Option<Instant>, stop: &AtomicBool) -> bool {
    match at.and_then(|at| at.checked_duration_since(Instant::now())) {
        Some(left) if left > EARLY_SLACK => crate::clock::sleep_unless_stopped(left, stop),
        _ => !stop.load(Ordering::Relaxed),
    }
}

/// Marks the request of `tick_id` done.
fn finish(progress: &Progress, tick_id: u64) {
    progress.current.store(IDLE, Ordering::Release);
    progress.done_tick.store(tick_id, Ordering::Release);
}

/// One GPU's part of a request.
fn read_gpu<'n>(
    nvml: &'n Nvml,
    index: u32,
    sys: &SystemInfo,
    req: &Request,
    probed: bool,
    st: &mut GpuState,
    local: &mut Local<'n>,
) -> Response {
    st.support.begin(req.ts_ms);
    let mut resp = Response {
        index,
        tick_id: req.tick_id,
        ts_ms: req.ts_ms,
        inventory: None,
        sample: None,
        processes: None,
        errors: Vec::new(),
        lost: None,
        instances: Vec::new(),
    };
    if let Some(dev) = &local.device {
        if st.inventory.is_none() || req.refresh_inventory || probed {
            if st.inventory.is_some() {
                st.support.reprobe();
                local.tensor.reprobe();
                local.mig.reprobe();
            }
            let inv = read_inventory(dev, index, sys, &mut st.support);
            st.power_limit = read_power_limit(dev, &mut st.support);
            if st.support.lost.is_none()
                && !inv.uuid.is_empty()
                && st.inventory.as_ref() != Some(&inv)
            {
                st.support.rename(&inv.uuid);
                st.inventory = Some(inv.clone());
                resp.inventory = Some(inv);
            }
        }
        if let Some(inv) = st.inventory.as_ref().filter(|_| req.sample) {
            let uuid = inv.uuid.clone();
            let mut sample =
                read_sample(nvml, dev, &uuid, req.ts_ms, st.power_limit, &mut st.support);
            if sample.status == SampleStatus::Ok {
                let gpm = local.tensor.read(nvml, dev, &mut st.support);
                sample.tensor_active_pct = gpm.tensor_active;
                sample.sm_active_pct = gpm.sm_active;
                sample.sm_occupancy_pct = gpm.sm_occupancy;
                sample.dram_active_pct = gpm.dram_active;
                let links = super::nvlink::read_links(nvml, dev, &mut st.support);
                sample.nvlink_links_up = links.up;
                sample.nvlink_down_mask = links.down_mask;
                sample.nvlink_crc_flit_errors = links.crc_flit;
                sample.nvlink_crc_data_errors = links.crc_data;
                sample.nvlink_replay_errors = links.replay;
                sample.nvlink_recovery_errors = links.recovery;
                sample.nvlink_kib = links.kib;
                let fabric = super::nvlink::read_fabric(nvml, dev, &mut st.support);
                sample.fabric_state = fabric.map(|f| f.0);
                sample.fabric_status = fabric.map(|f| f.1);
                if inv.mig_mode == Some(true) {
                    resp.instances = local.mig.read(
                        nvml,
                        dev,
                        inv,
                        req.ts_ms,
                        req.processes,
                        req.refresh_inventory,
                        &mut st.support,
                        &mut resp.errors,
                    );
                }
            }
            // In MIG mode the processes are listed per instance (attributed by MIG UUID);
            // the parent's list would count each twice.
            let mig = inv.mig_mode == Some(true);
            if req.processes && sample.status == SampleStatus::Ok && !mig {
                resp.processes = read_processes(nvml, dev, &mut st.support);
            }
            resp.sample = Some(if st.support.lost.is_some() {
                GpuSample::empty(req.ts_ms, &uuid, SampleStatus::Lost)
            } else {
                sample
            });
        }
    }
    if st.support.lost.is_some() && !st.lost_reported {
        st.lost_reported = true;
        resp.lost = st.support.lost.clone();
    }
    let mut errors = st.support.take_changed_errors();
    errors.append(&mut resp.errors);
    resp.errors = errors;
    resp
}
