//! The sampler: reads every GPU through NVML once per tick and turns it into a [`TickBatch`].
//!
//! Threads: lanes ([`lane`]) make every NVML call — one lane reads every GPU in turn until a
//! call stalls, then the stalled GPU stays alone on the lane stuck in it and the others move
//! to a new lane; one thread waits for NVML events ([`events`]); the caller of
//! [`Sampler::tick`] (the daemon's sampling thread) coordinates. Nothing outside these
//! threads ever calls NVML.
//!
//! Invariants:
//! - `tick` returns within the sample deadline whatever the driver does: a GPU that has not
//!   answered by then gets a `DeadlineMissed` row (a gap), and a lane still busy with an old
//!   request gets no new one (its other GPUs move to a new lane), so a call that never returns
//!   costs one GPU, not the daemon. A read stalled for a quarter of the deadline moves the
//!   lane's other GPUs at once, and those not yet read are asked again in the same tick.
//! - A lane split off by a stall is merged back after [`MERGE_AFTER`] ticks answered in time,
//!   so the threads woken per tick return to one.
//! - A lost GPU gets a `Lost` row every tick (it stays visible) and one `gpu_lost` event.
//! - Process identity is `(pid, start time)`; command lines are redacted before storing.

pub mod device;
pub mod diagnosis;
pub mod events;
pub mod fields;
pub mod gpm;
pub mod gpu_procs;
pub mod lane;
mod mailbox;
pub mod nvml;
pub mod probe;
pub mod procs;
pub mod redact;
pub mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;

use crate::model::{
    Event, GpuInventory, GpuSample, ProcessSample, SampleStatus, SettingChange, TickBatch, TsMs,
};

use self::device::SystemInfo;
use self::gpu_procs::RawProcess;
use self::lane::{GpuCell, IDLE, LaneParts, Progress, Request, Response};
use self::mailbox::Mailbox;
use self::nvml::{NvmlHandle, error_text};
use self::procs::{ProcResolver, ProcessOverrides};
use self::redact::Redactor;

/// Ticks a split-off lane answers in time before its GPUs go back to the main lane.
pub const MERGE_AFTER: u32 = 60;

/// What the sampler needs from the configuration.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    pub deadline: Duration,
    pub inventory_interval: Duration,
    pub processes: bool,
    pub redact_patterns: Vec<String>,
    /// How long start-up waits for the first inventory of every GPU.
    pub startup_timeout: Duration,
    /// The host's `/proc` (`[processes] proc_root`).
    pub proc_root: PathBuf,
    /// The kubelet's pod log directories (`[kubernetes] pod_logs_dir`).
    pub pod_logs_dir: PathBuf,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(800),
            inventory_interval: Duration::from_secs(3600),
            processes: true,
            redact_patterns: Vec::new(),
            startup_timeout: Duration::from_secs(10),
            proc_root: PathBuf::from(crate::config::DEFAULT_PROC_ROOT),
            pod_logs_dir: PathBuf::from(crate::config::DEFAULT_POD_LOGS_DIR),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error("cannot count GPUs: {0}")]
    DeviceCount(String),
    #[error("invalid redaction pattern: {0}")]
    Redact(#[from] regex::Error),
    #[error("cannot start a sampler thread: {0}")]
    Thread(#[from] std::io::Error),
}

struct Slot {
    index: u32,
    uuid: Option<String>,
    lost: bool,
}

/// The coordinator's handle on one lane.
struct Lane {
    id: usize,
    tx: Sender<Request>,
    /// The GPUs it owns, in index order.
    gpus: Vec<u32>,
    progress: Arc<Progress>,
    /// The tick of the newest request sent to it.
    asked: Option<u64>,
    /// Consecutive requests it finished within their tick's deadline.
    on_time: u32,
}

impl Lane {
    /// Still working on an earlier request (or stuck in it).
    fn busy(&self) -> bool {
        self.asked
            .is_some_and(|t| self.progress.done_tick.load(Ordering::Acquire) < t)
    }

    /// The GPU it has been reading for at least `stall`, if any.
    fn stalled_in(&self, stall: Duration) -> Option<u32> {
        let current = self.progress.current.load(Ordering::Acquire);
        if current == IDLE || !self.busy() {
            return None;
        }
        let since = self.progress.since_us.load(Ordering::Acquire);
        let stall_us = u64::try_from(stall.as_micros()).unwrap_or(u64::MAX);
        (lane::now_us().saturating_sub(since) >= stall_us).then_some(current)
    }
}

pub struct Sampler {
    slots: Vec<Slot>,
    cells: Arc<[GpuCell]>,
    lanes: Vec<Lane>,
    next_lane_id: usize,
    nvml: Arc<Nvml>,
    sys: SystemInfo,
    responses: Mailbox,
    events: Receiver<Event>,
    /// The sending side of `events`, for other sources of events (the kernel-log follower).
    event_tx: Sender<Event>,
    xid_watch: Arc<crate::http::telemetry::XidWatch>,
    stop: Arc<AtomicBool>,
    resolver: ProcResolver,
    cfg: SamplerConfig,
    /// Process lists are complete (sampling on, host PID namespace): samples carry counts.
    observe_processes: bool,
    tick_id: u64,
    last_inventory: Option<TsMs>,
    /// The inventory read before `last_inventory`: a change found by the latest read happened
    /// after it.
    changes_since: TsMs,
    /// Inventories learnt outside a tick (start-up, late answers), to emit with the next batch.
    pending_inventory: Vec<GpuInventory>,
    pending_events: Vec<Event>,
    pending_changes: Vec<SettingChange>,
    pending_errors: Vec<crate::model::MetricError>,
    inventories: HashMap<u32, GpuInventory>,
}

impl Sampler {
    /// Starts the lane and the event thread, and waits (bounded) for every GPU's inventory.
    pub fn start(
        h: &NvmlHandle,
        cfg: SamplerConfig,
        overrides: ProcessOverrides,
    ) -> Result<Self, SamplerError> {
        let count = h
            .nvml
            .device_count()
            .map_err(|e| SamplerError::DeviceCount(error_text(&e)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ev_tx, events) = mpsc::channel();
        let xid_watch = Arc::new(crate::http::telemetry::XidWatch::default());
        events::spawn(
            h.nvml.clone(),
            count,
            stop.clone(),
            ev_tx.clone(),
            xid_watch.clone(),
        )?;
        let observe_processes = cfg.processes && processes_observable(&overrides, &cfg.proc_root);
        let resolver = ProcResolver::with_roots(
            Redactor::new(&cfg.redact_patterns)?,
            overrides,
            &cfg.proc_root,
            &cfg.pod_logs_dir,
        );
        let mut s = Self {
            slots: (0..count)
                .map(|index| Slot {
                    index,
                    uuid: None,
                    lost: false,
                })
                .collect(),
            cells: (0..count).map(|index| GpuCell::new(index, 0)).collect(),
            lanes: Vec::new(),
            next_lane_id: 0,
            nvml: h.nvml.clone(),
            sys: SystemInfo::from_handle(h),
            responses: Mailbox::default(),
            events,
            event_tx: ev_tx,
            xid_watch,
            stop,
            resolver,
            cfg,
            observe_processes,
            tick_id: 0,
            last_inventory: None,
            changes_since: 0,
            pending_inventory: Vec::new(),
            pending_events: Vec::new(),
            pending_changes: Vec::new(),
            pending_errors: Vec::new(),
            inventories: HashMap::new(),
        };
        if count > 0 {
            s.spawn_lane((0..count).collect())?;
        }
        s.discover();
        Ok(s)
    }

    /// GPUs known so far, by index.
    pub fn inventories(&self) -> impl Iterator<Item = &GpuInventory> {
        self.inventories.values()
    }

    pub fn gpu_count(&self) -> usize {
        self.slots.len()
    }

    /// How many lanes (NVML threads) there are now: one, unless calls stalled.
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    /// A sender into the channel NVML's XID events arrive on: events sent there are stamped
    /// with the tick that picks them up and written with NVML's.
    pub fn event_sender(&self) -> Sender<Event> {
        self.event_tx.clone()
    }

    /// Which GPUs' XID events are watched (for `/metrics`: no XID seen is 0 only there).
    pub fn xid_watch(&self) -> Arc<crate::http::telemetry::XidWatch> {
        self.xid_watch.clone()
    }

    /// Starts a lane owning `gpus`; returns its position in `lanes`.
    fn spawn_lane(&mut self, gpus: Vec<u32>) -> Result<usize, std::io::Error> {
        let id = self.next_lane_id;
        let (tx, rx) = mpsc::channel();
        let progress = Arc::new(Progress::default());
        let parts = LaneParts {
            id,
            nvml: self.nvml.clone(),
            sys: self.sys.clone(),
            cells: self.cells.clone(),
            progress: progress.clone(),
            requests: rx,
            mailbox: self.responses.clone(),
        };
        std::thread::Builder::new()
            .name(format!("gpuwatch-lane{id}"))
            .spawn(move || lane::run(parts))?;
        self.next_lane_id += 1;
        // Owned from now on: the lane it leaves skips these GPUs from its next read on.
        for &g in &gpus {
            if let Some(cell) = self.cells.get(g as usize) {
                cell.owner.store(id, Ordering::Release);
            }
        }
        self.lanes.push(Lane {
            id,
            tx,
            gpus,
            progress,
            asked: None,
            on_time: 0,
        });
        Ok(self.lanes.len() - 1)
    }

    /// Moves every GPU of the lane at `pos` but `stuck` to a new lane; returns the new lane's
    /// position and the GPUs moved.
    fn split(&mut self, pos: usize, stuck: u32) -> Option<(usize, Vec<u32>)> {
        let moving: Vec<u32> = self.lanes[pos]
            .gpus
            .iter()
            .copied()
            .filter(|&g| g != stuck)
            .collect();
        if moving.is_empty() {
            return None;
        }
        tracing::warn!(
            gpu = stuck,
            others = ?moving,
            "an NVML call on this GPU stalls; the other GPUs of its lane move to a new one"
        );
        match self.spawn_lane(moving.clone()) {
            Ok(new) => {
                self.lanes[pos].gpus.retain(|&g| g == stuck);
                self.lanes[pos].on_time = 0;
                Some((new, moving))
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start a new NVML lane; these GPUs wait for the stalled call");
                None
            }
        }
    }

    /// Lanes still stuck in an earlier tick keep only the GPU they are in.
    fn split_stuck(&mut self) {
        for pos in 0..self.lanes.len() {
            let lane = &self.lanes[pos];
            if !lane.busy() || lane.gpus.len() < 2 {
                continue;
            }
            let current = lane.progress.current.load(Ordering::Acquire);
            if current != IDLE {
                self.split(pos, current);
            }
        }
    }

    /// During a tick's wait: lanes stalled in one GPU for `stall` give their other GPUs to a
    /// new lane, which is asked at once for those of them this tick still waits for.
    fn split_stalled(&mut self, req: &Request, stall: Duration) {
        let outstanding = self.responses.outstanding();
        for pos in 0..self.lanes.len() {
            let lane = &self.lanes[pos];
            if lane.asked != Some(req.tick_id) || lane.gpus.len() < 2 {
                continue;
            }
            let Some(stuck) = lane.stalled_in(stall) else {
                continue;
            };
            let Some((new, moved)) = self.split(pos, stuck) else {
                continue;
            };
            let again: Vec<u32> = moved
                .into_iter()
                .filter(|g| outstanding.contains(g))
                .collect();
            if !again.is_empty() {
                self.ask(new, req, again);
            }
        }
    }

    /// Gives the GPUs of split-off lanes that answered in time for [`MERGE_AFTER`] ticks back
    /// to the lane with the most GPUs; their threads end.
    fn merge_recovered(&mut self) {
        let Some(main) = (0..self.lanes.len())
            .filter(|&p| !self.lanes[p].busy())
            .max_by_key(|&p| (self.lanes[p].gpus.len(), std::cmp::Reverse(p)))
        else {
            return;
        };
        let main_id = self.lanes[main].id;
        let ready: Vec<usize> = (0..self.lanes.len())
            .filter(|&p| p != main)
            .filter(|&p| !self.lanes[p].busy() && self.lanes[p].on_time >= MERGE_AFTER)
            .collect();
        for &p in ready.iter().rev() {
            let lane = self.lanes.remove(p);
            for &g in &lane.gpus {
                if let Some(cell) = self.cells.get(g as usize) {
                    cell.owner.store(main_id, Ordering::Release);
                }
            }
            let Some(main) = self.lanes.iter_mut().find(|l| l.id == main_id) else {
                continue;
            };
            main.gpus.extend(&lane.gpus);
            main.gpus.sort_unstable();
            tracing::info!(gpus = ?lane.gpus, "NVML calls answer in time again; the GPUs rejoin the main lane");
        }
    }

    /// Sends `req` for `gpus` to the lane at `pos`; the GPUs whose request could not be sent
    /// are not waited for.
    fn ask(&mut self, pos: usize, req: &Request, gpus: Vec<u32>) {
        let lane = &mut self.lanes[pos];
        let sent = lane
            .tx
            .send(Request {
                gpus: gpus.clone(),
                ..req.clone()
            })
            .is_ok();
        if sent {
            lane.asked = Some(req.tick_id);
        } else {
            for g in gpus {
                self.responses.forgo(g);
            }
        }
    }

    /// Asks every lane that is free for its GPUs that are not lost; returns the GPUs asked.
    fn ask_all(&mut self, req: &Request) -> Vec<u32> {
        let plan: Vec<(usize, Vec<u32>)> = self
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.busy())
            .map(|(p, l)| {
                let gpus = l
                    .gpus
                    .iter()
                    .copied()
                    .filter(|&g| self.slots.get(g as usize).is_some_and(|s| !s.lost))
                    .collect::<Vec<u32>>();
                (p, gpus)
            })
            .filter(|(_, g)| !g.is_empty())
            .collect();
        let asked: Vec<u32> = plan.iter().flat_map(|(_, g)| g.iter().copied()).collect();
        self.responses.expect(req.tick_id, &asked);
        for (pos, gpus) in plan {
            self.ask(pos, req, gpus);
        }
        asked
    }

    /// Waits for the answers of `req` until `deadline`, moving GPUs off stalled lanes.
    fn wait(&mut self, req: &Request, deadline: Instant) {
        let stall = self.cfg.deadline / 4;
        let mut check = Instant::now() + stall;
        loop {
            if self.responses.wait(check.min(deadline)) {
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            self.split_stalled(req, stall);
            check = Instant::now() + (stall / 2).max(Duration::from_millis(1));
        }
        self.responses.close();
    }

    /// Asks every GPU for its inventory and waits up to `startup_timeout`.
    fn discover(&mut self) {
        self.tick_id += 1;
        let req = Request {
            tick_id: self.tick_id,
            ts_ms: 0,
            refresh_inventory: true,
            sample: false,
            processes: false,
            gpus: Vec::new(),
        };
        self.ask_all(&req);
        let deadline = Instant::now() + self.cfg.startup_timeout;
        self.wait(&req, deadline);
        for r in self.responses.drain() {
            self.absorb(r, 0);
        }
        for slot in self.slots.iter().filter(|s| s.uuid.is_none()) {
            tracing::error!(
                index = slot.index,
                "GPU did not answer at start; it is sampled once it does"
            );
        }
    }

    /// Records what a response says about the GPU; returns its sample if it is for `tick_id`.
    fn absorb(
        &mut self,
        r: Response,
        tick_id: u64,
    ) -> Option<(GpuSample, Option<Vec<RawProcess>>)> {
        let slot = self.slots.get_mut(r.index as usize)?;
        if let Some(inv) = r.inventory {
            if let Some(old) = self
                .inventories
                .get(&inv.index)
                .filter(|o| o.uuid == inv.uuid)
            {
                for (label, c) in setting_changes(old, &inv, self.changes_since) {
                    self.pending_events.push(Event {
                        ts_ms: 0,
                        gpu_uuid: Some(inv.uuid.clone()),
                        kind: "setting_changed".into(),
                        code: None,
                        message: format!("GPU {} {}: {} → {}", inv.index, label, c.old, c.new),
                        ..Event::default()
                    });
                    self.pending_changes.push(c);
                }
            }
            if slot.uuid.is_some() {
                self.pending_events.push(Event {
                    ts_ms: 0,
                    gpu_uuid: Some(inv.uuid.clone()),
                    kind: "inventory_changed".into(),
                    code: None,
                    message: format!("GPU {} inventory changed", inv.index),
                    ..Event::default()
                });
            }
            slot.uuid = Some(inv.uuid.clone());
            self.inventories.insert(inv.index, inv.clone());
            self.pending_inventory.push(inv);
        }
        if let Some(reason) = r.lost {
            slot.lost = true;
            self.pending_events.push(Event {
                ts_ms: 0,
                gpu_uuid: slot.uuid.clone(),
                kind: "gpu_lost".into(),
                code: None,
                message: format!("GPU {} lost: {reason}", slot.index),
                ..Event::default()
            });
        }
        self.pending_errors.extend(r.errors);
        if r.tick_id != tick_id {
            return None;
        }
        r.sample.map(|s| (s, r.processes))
    }

    /// Samples every GPU once. Returns within the deadline (plus the time to resolve PIDs).
    pub fn tick(&mut self, ts_ms: TsMs) -> TickBatch {
        self.tick_id += 1;
        let tick_id = self.tick_id;
        let started = Instant::now();
        let refresh = self
            .last_inventory
            .is_none_or(|t| ts_ms - t >= self.cfg.inventory_interval.as_millis() as i64);
        if refresh {
            self.changes_since = self.last_inventory.unwrap_or(ts_ms);
            self.last_inventory = Some(ts_ms);
        }
        // Answers that arrived after an earlier tick's deadline are absorbed (their samples
        // are stale and dropped; their inventory and errors are kept); a lane still stuck in
        // an earlier tick keeps only the GPU it is in, the others are asked on a new lane.
        for r in self.responses.drain() {
            let _stale = self.absorb(r, tick_id);
        }
        self.split_stuck();
        self.merge_recovered();
        let req = Request {
            tick_id,
            ts_ms,
            refresh_inventory: refresh,
            sample: true,
            processes: self.cfg.processes,
            gpus: Vec::new(),
        };
        self.ask_all(&req);
        self.wait(&req, started + self.cfg.deadline);
        for lane in &mut self.lanes {
            if lane.asked == Some(tick_id) {
                lane.on_time = if lane.busy() { 0 } else { lane.on_time + 1 };
            }
        }
        let mut got: HashMap<u32, (GpuSample, Option<Vec<RawProcess>>)> = HashMap::new();
        for r in self.responses.drain() {
            let index = r.index;
            if let Some(v) = self.absorb(r, tick_id) {
                got.entry(index).or_insert(v);
            }
        }
        let mut batch = TickBatch {
            ts_ms,
            ..TickBatch::default()
        };
        for slot in &self.slots {
            let Some(uuid) = &slot.uuid else { continue };
            match got.remove(&slot.index) {
                Some((mut sample, raw)) => {
                    if self.observe_processes && sample.status == SampleStatus::Ok {
                        sample.process_count = raw
                            .as_ref()
                            .map(|r| u32::try_from(r.len()).unwrap_or(u32::MAX));
                    }
                    for p in raw.into_iter().flatten() {
                        batch.processes.push(ProcessSample {
                            ts_ms,
                            gpu_uuid: uuid.clone(),
                            process: self.resolver.resolve(p.pid),
                            used_mem_bytes: p.used_mem_bytes,
                        });
                    }
                    batch.samples.push(sample);
                }
                None if slot.lost => {
                    batch
                        .samples
                        .push(GpuSample::empty(ts_ms, uuid, SampleStatus::Lost))
                }
                None => {
                    tracing::debug!(index = slot.index, "GPU missed the tick deadline");
                    batch
                        .samples
                        .push(GpuSample::empty(ts_ms, uuid, SampleStatus::DeadlineMissed));
                }
            }
        }
        let live: Vec<u32> = batch.processes.iter().map(|p| p.process.pid).collect();
        self.resolver.retain(&live);
        while let Ok(ev) = self.events.try_recv() {
            self.pending_events.push(ev);
        }
        batch.inventory = std::mem::take(&mut self.pending_inventory);
        batch.errors = std::mem::take(&mut self.pending_errors);
        batch.events = std::mem::take(&mut self.pending_events);
        for ev in &mut batch.events {
            if ev.ts_ms == 0 {
                ev.ts_ms = ts_ms;
            }
        }
        batch.setting_changes = std::mem::take(&mut self.pending_changes);
        for c in &mut batch.setting_changes {
            c.ts_ms = ts_ms;
        }
        batch
    }
}

/// The settings that differ between two inventory reads of one GPU (both values known):
/// the power limit and persistence mode, in the audit's words.
fn setting_changes(
    old: &GpuInventory,
    new: &GpuInventory,
    since_ms: TsMs,
) -> Vec<(&'static str, SettingChange)> {
    use crate::manage::setting::{Setting, on_off, watts};
    let pairs = [
        (
            Setting::PowerLimit,
            old.power_limit_mw.map(watts),
            new.power_limit_mw.map(watts),
        ),
        (
            Setting::Persistence,
            old.persistence_mode.map(|p| on_off(p).to_string()),
            new.persistence_mode.map(|p| on_off(p).to_string()),
        ),
    ];
    pairs
        .into_iter()
        .filter_map(|(setting, was, now)| match (was, now) {
            (Some(was), Some(now)) if was != now => Some((
                setting.label(),
                SettingChange {
                    ts_ms: 0,
                    gpu_uuid: new.uuid.clone(),
                    setting: setting.name().into(),
                    old: was,
                    new: now,
                    since_ms,
                },
            )),
            _ => None,
        })
        .collect()
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // Lanes end when their channel closes; a lane stuck in the driver keeps its own
        // reference to NVML, so the library is never unloaded under it.
        crate::clock::request_stop(&self.stop);
    }
}

/// Whether NVML's process lists are complete here: always for simulated GPUs; for real ones
/// only in the host's PID namespace. Outside it, says so once, with the fix — and whether
/// `proc_root` still shows the host's processes (their details then resolve; NVML's lists
/// stay those of this namespace, so counts stay unknown).
fn processes_observable(overrides: &ProcessOverrides, proc_root: &Path) -> bool {
    if overrides.simulated {
        return true;
    }
    match procs::pid_namespace(Path::new("/proc")) {
        procs::PidNamespace::Other(ns) if procs::shows_host_processes(proc_root) => {
            tracing::warn!(
                pid_namespace = ns,
                proc_root = %proc_root.display(),
                "gpuwatch runs in a PID namespace other than the host's; process details are \
                 read from the host's processes under proc_root, but NVML lists only the \
                 processes this namespace can see, so process counts are unknown. Fix: run \
                 with the host's PID namespace (Kubernetes: hostPID: true; Docker/Podman: \
                 --pid=host)"
            );
            false
        }
        procs::PidNamespace::Other(ns) => {
            tracing::warn!(
                pid_namespace = ns,
                proc_root = %proc_root.display(),
                "gpuwatch runs in a PID namespace other than the host's and proc_root does not \
                 show the host's processes: NVML lists only the processes this namespace can \
                 see, so process counts are unknown and the processes it does list are known \
                 by PID only. Fix: run with the host's PID namespace (Kubernetes: \
                 hostPID: true; Docker/Podman: --pid=host), or mount the host's /proc (e.g. at \
                 /host/proc) and set [processes] proc_root"
            );
            false
        }
        procs::PidNamespace::Host => true,
        procs::PidNamespace::Unknown => {
            tracing::debug!(
                "cannot tell the PID namespace (no /proc/self/ns/pid); assuming the host's"
            );
            true
        }
    }
}
