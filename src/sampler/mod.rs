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
//! - A GPU NVML calls lost, one with a fatal XID (79, 119, 120), or one without an answer for
//!   three ticks over ten seconds of the monotonic clock (not tick time) is quarantined ([`quarantine`]): not called again but for
//!   probes on a backoff from a minute to an hour; it gets a `Lost` row every tick (it stays
//!   visible), one `gpu_lost` event, and `gpu_recovered` when a probe finds it back.
//! - On the wall clock the daemon calls [`Sampler::tick_at`] with the tick's instant as soon
//!   as the previous tick is done: the lanes sleep until that instant by themselves and the
//!   sampling thread sleeps in its wait for their answers, so an idle tick wakes one lane and
//!   the sampling thread once each. A tick's request is therefore decided when the previous
//!   tick ends: a fatal XID that arrives in between quarantines its GPU from the tick after.
//! - Process identity is `(pid, start time)`; command lines are redacted before storing.

pub mod device;
pub mod diagnosis;
pub mod events;
pub mod fields;
pub mod gpm;
pub mod gpu_procs;
pub mod lane;
mod mailbox;
pub mod mig;
pub mod nvlink;
pub mod nvml;
mod pool;
pub mod probe;
pub mod procs;
pub mod quarantine;
pub mod redact;
pub mod support;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use crate::model::{
    Event, GpuInventory, GpuSample, ProcessSample, SampleStatus, SettingChange, TickBatch, TsMs,
};

use self::device::SystemInfo;
use self::gpu_procs::RawProcess;
use self::lane::{GpuCell, Request, Response};
use self::nvml::{NvmlHandle, error_text};
pub use self::pool::MERGE_AFTER;
use self::pool::Pool;
use self::procs::{ProcResolver, ProcessOverrides};
use self::quarantine::{FATAL_XIDS, MISSES_BEFORE, MISSING_FOR, Misses, Quarantine, xid_reason};
use self::redact::Redactor;

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
    /// How long a lost GPU is left alone before its first probe (`lost_probe_after`).
    pub first_probe: Duration,
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
            first_probe: quarantine::FIRST_PROBE,
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

/// When a tick's reads start and when the next tick is due, on the monotonic clock (both
/// `None` for a tick read at once, with no next one known: simulated and test clocks).
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    pub at: Option<Instant>,
    pub next_at: Option<Instant>,
}

impl Timing {
    /// When the tick's reads start: `at`, or now if that is past (or not given).
    pub fn start(&self) -> Instant {
        let now = Instant::now();
        self.at.map_or(now, |at| at.max(now))
    }
}

struct Slot {
    index: u32,
    uuid: Option<String>,
    /// Not called (but for probes) while set.
    quarantine: Option<Quarantine>,
    /// The current run of ticks without an answer.
    misses: Misses,
}

pub struct Sampler {
    slots: Vec<Slot>,
    pool: Pool,
    events: Receiver<Event>,
    /// The sending side of `events`, for other sources of events (the kernel-log follower).
    event_tx: Sender<Event>,
    xid_watch: Arc<crate::telemetry::XidWatch>,
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
    /// This tick's readings of MIG instances (GPUs of their own), from their parents' answers.
    instance_readings: Vec<(GpuSample, Option<Vec<RawProcess>>)>,
    pending_events: Vec<Event>,
    pending_changes: Vec<SettingChange>,
    pending_errors: Vec<crate::model::MetricError>,
    inventories: HashMap<u32, GpuInventory>,
    /// The lanes' answers taken from the mailbox, a queue kept between ticks (it trades places
    /// with the mailbox's own: neither allocates once both hold a tick's answers).
    answers: VecDeque<lane::Response>,
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
        let xid_watch = Arc::new(crate::telemetry::XidWatch::default());
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
        let cells: Arc<[GpuCell]> = (0..count).map(|index| GpuCell::new(index, 0)).collect();
        let mut s = Self {
            slots: (0..count)
                .map(|index| Slot {
                    index,
                    uuid: None,
                    quarantine: None,
                    misses: Misses::default(),
                })
                .collect(),
            pool: Pool::new(
                h.nvml.clone(),
                SystemInfo::from_handle(h),
                cells,
                stop.clone(),
            ),
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
            instance_readings: Vec::new(),
            pending_events: Vec::new(),
            pending_changes: Vec::new(),
            pending_errors: Vec::new(),
            inventories: HashMap::new(),
            answers: VecDeque::new(),
        };
        if count > 0 {
            s.pool.spawn_lane((0..count).collect())?;
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
        self.pool.len()
    }

    /// The GPUs not called now (but for probes), by index, with why.
    pub fn quarantined(&self) -> impl Iterator<Item = (u32, &Quarantine)> {
        self.slots
            .iter()
            .filter_map(|s| s.quarantine.as_ref().map(|q| (s.index, q)))
    }

    /// A sender into the channel NVML's XID events arrive on: events sent there are stamped
    /// with the tick that picks them up and written with NVML's.
    pub fn event_sender(&self) -> Sender<Event> {
        self.event_tx.clone()
    }

    /// Which GPUs' XID events are watched (for `/metrics`: no XID seen is 0 only there).
    pub fn xid_watch(&self) -> Arc<crate::telemetry::XidWatch> {
        self.xid_watch.clone()
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
            probe: Vec::new(),
            at: None,
            next_at: None,
        };
        self.pool.ask_all(&req, |_| true);
        let start = Instant::now();
        let span = (start, start + self.cfg.startup_timeout);
        self.pool.wait(&req, span, self.cfg.deadline / 4, None);
        self.absorb_answers(|s, r| {
            s.absorb(r, 0);
        });
        for slot in self.slots.iter().filter(|s| s.uuid.is_none()) {
            tracing::error!(
                index = slot.index,
                "GPU did not answer at start; it is sampled once it does"
            );
        }
    }

    /// Hands each answer the lanes left so far to `each`, in the order they came, without
    /// waiting (through the queue kept between ticks).
    fn absorb_answers(&mut self, mut each: impl FnMut(&mut Self, lane::Response)) {
        let mut answers = std::mem::take(&mut self.answers);
        self.pool.mailbox.swap_answers(&mut answers);
        for r in answers.drain(..) {
            each(self, r);
        }
        self.answers = answers;
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
            let reason = format!("GPU {} lost: {reason}", slot.index);
            quarantine(
                slot,
                &mut self.pending_events,
                self.cfg.first_probe,
                r.ts_ms,
                reason,
            );
        }
        self.pending_errors.extend(r.errors);
        let current = r.tick_id == tick_id;
        for inst in r.instances {
            if let Some(inv) = inst.inventory {
                self.pending_inventory.push(inv);
            }
            if current {
                self.instance_readings.push((inst.sample, inst.processes));
            }
        }
        if !current {
            return None;
        }
        r.sample.map(|s| (s, r.processes))
    }

    /// Samples every GPU once, now. Returns within the deadline (plus the time to resolve
    /// PIDs).
    pub fn tick(&mut self, ts_ms: TsMs) -> TickBatch {
        let never = AtomicBool::new(false);
        self.tick_at(ts_ms, Timing::default(), &never)
            .unwrap_or_else(|| TickBatch {
                ts_ms,
                ..TickBatch::default()
            })
    }

    /// Samples every GPU once at `timing.at` (now when `None`): the lanes sleep until then and
    /// the caller sleeps in the wait for their answers, until the deadline after `at`. `None`
    /// when `stop` (set through [`crate::clock::request_stop`]) ended the wait first.
    pub fn tick_at(&mut self, ts_ms: TsMs, timing: Timing, stop: &AtomicBool) -> Option<TickBatch> {
        self.tick_id += 1;
        let tick_id = self.tick_id;
        let started = timing.start();
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
        self.absorb_answers(|s, r| {
            let _stale = s.absorb(r, tick_id);
        });
        self.pool.split_stuck();
        self.pool.merge_recovered();
        // Quarantined GPUs are asked only for their probes (their lost state cleared first).
        let probe: Vec<u32> = self
            .slots
            .iter()
            .filter(|s| s.quarantine.as_ref().is_some_and(|q| q.probe_due(ts_ms)))
            .map(|s| s.index)
            .collect();
        let req = Request {
            tick_id,
            ts_ms,
            refresh_inventory: refresh,
            sample: true,
            processes: self.cfg.processes,
            gpus: Vec::new(),
            probe,
            at: timing.at,
            next_at: timing.next_at,
        };
        let slots = &self.slots;
        self.pool.ask_all(&req, |g| {
            slots
                .get(g as usize)
                .is_some_and(|s| s.quarantine.is_none() || req.probe.contains(&g))
        });
        let span = (started, started + self.cfg.deadline);
        if !self
            .pool
            .wait(&req, span, self.cfg.deadline / 4, Some(stop))
        {
            return None;
        }
        // A tick never ends before its time, even when no lane was asked (every GPU
        // quarantined, or its lane stuck): the caller would run ahead of the clock.
        if let Some(left) = timing
            .at
            .and_then(|at| at.checked_duration_since(Instant::now()))
            .filter(|left| *left > lane::EARLY_SLACK)
            && !crate::clock::sleep_unless_stopped(left, stop)
        {
            return None;
        }
        self.pool.count_on_time(tick_id);
        // Each GPU's first answer to this tick, by index.
        let mut got: Vec<Option<(GpuSample, Option<Vec<RawProcess>>)>> =
            std::iter::repeat_with(|| None)
                .take(self.slots.len())
                .collect();
        self.absorb_answers(|s, r| {
            let index = r.index as usize;
            if let Some(v) = s.absorb(r, tick_id)
                && let Some(slot @ None) = got.get_mut(index)
            {
                *slot = Some(v);
            }
        });
        let listed = got
            .iter()
            .flatten()
            .map(|(_, raw)| raw.as_ref().map_or(0, Vec::len));
        let mut batch = TickBatch {
            ts_ms,
            samples: Vec::with_capacity(self.slots.len()),
            processes: Vec::with_capacity(listed.sum()),
            ..TickBatch::default()
        };
        for slot in &mut self.slots {
            let Some(uuid) = slot.uuid.clone() else {
                continue;
            };
            let probed = req.probe.contains(&slot.index);
            match got.get_mut(slot.index as usize).and_then(Option::take) {
                Some((sample, raw)) if sample.status == SampleStatus::Ok => {
                    slot.misses.answered();
                    if probed && let Some(q) = slot.quarantine.take() {
                        self.pending_events.push(Event {
                            ts_ms,
                            gpu_uuid: Some(uuid.clone()),
                            kind: "gpu_recovered".into(),
                            message: format!(
                                "GPU {} answers again (not called since {}: {})",
                                slot.index,
                                crate::format::duration(ts_ms - q.since_ms),
                                q.reason
                            ),
                            ..Event::default()
                        });
                    }
                    push_reading(
                        &mut batch,
                        &mut self.resolver,
                        self.observe_processes,
                        sample,
                        raw,
                    );
                }
                answer => {
                    if let Some(q) = slot.quarantine.as_mut() {
                        if probed {
                            q.probe_failed(ts_ms);
                        }
                        batch
                            .samples
                            .push(GpuSample::empty(ts_ms, &uuid, SampleStatus::Lost));
                        continue;
                    }
                    if let Some((sample, _)) = answer {
                        // Answered, with a sample that is not a reading (its status says why).
                        slot.misses.answered();
                        batch.samples.push(sample);
                        continue;
                    }
                    tracing::debug!(index = slot.index, "GPU missed the tick deadline");
                    batch.samples.push(GpuSample::empty(
                        ts_ms,
                        &uuid,
                        SampleStatus::DeadlineMissed,
                    ));
                    // Asked and late, or not asked because its lane is still stuck in it.
                    if slot.misses.missed(started) {
                        let reason = format!(
                            "GPU {}: NVML calls missed the deadline {MISSES_BEFORE} ticks in a \
                             row, for {}",
                            slot.index,
                            humantime::format_duration(MISSING_FOR)
                        );
                        quarantine(
                            slot,
                            &mut self.pending_events,
                            self.cfg.first_probe,
                            ts_ms,
                            reason,
                        );
                    }
                }
            }
        }
        for (sample, raw) in std::mem::take(&mut self.instance_readings) {
            push_reading(
                &mut batch,
                &mut self.resolver,
                self.observe_processes,
                sample,
                raw,
            );
        }
        let live: Vec<u32> = batch.processes.iter().map(|p| p.process.pid).collect();
        self.resolver.retain(&live);
        while let Ok(ev) = self.events.try_recv() {
            self.quarantine_on_fatal_xid(&ev, ts_ms);
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
        Some(batch)
    }
}

impl Sampler {
    /// A fatal XID (79, 119, 120) for a GPU the sampler knows — by UUID, or by the PCI address
    /// a kernel log gave — quarantines it from the next tick on.
    fn quarantine_on_fatal_xid(&mut self, ev: &Event, ts_ms: TsMs) {
        let Some(code) = ev
            .code
            .filter(|c| ev.kind == "xid" && FATAL_XIDS.contains(c))
        else {
            return;
        };
        let by_pci = ev
            .pci_bus_id
            .as_deref()
            .and_then(crate::xid::nvrm::PciAddr::parse);
        let index = self.inventories.values().find_map(|inv| {
            let uuid_match = ev.gpu_uuid.as_deref() == Some(inv.uuid.as_str());
            let pci_match = by_pci.as_ref().is_some_and(|want| {
                inv.pci_bus_id
                    .as_deref()
                    .and_then(crate::xid::nvrm::PciAddr::parse)
                    .is_some_and(|have| have == *want)
            });
            (uuid_match || pci_match).then_some(inv.index)
        });
        let Some(slot) = index.and_then(|i| self.slots.get_mut(i as usize)) else {
            return;
        };
        let reason = format!("GPU {}: {}", slot.index, xid_reason(code));
        quarantine(
            slot,
            &mut self.pending_events,
            self.cfg.first_probe,
            ts_ms,
            reason,
        );
    }
}

/// Stops calling `slot`'s GPU (until its probes bring it back) and reports it lost, once.
fn quarantine(
    slot: &mut Slot,
    events: &mut Vec<Event>,
    first_probe: Duration,
    ts_ms: TsMs,
    reason: String,
) {
    if slot.quarantine.is_some() {
        return;
    }
    tracing::error!(gpu = slot.index, %reason, "this GPU is not called again until a probe finds it back");
    events.push(Event {
        ts_ms,
        gpu_uuid: slot.uuid.clone(),
        kind: "gpu_lost".into(),
        code: None,
        message: reason.clone(),
        ..Event::default()
    });
    slot.quarantine = Some(Quarantine::new(ts_ms, reason, first_probe));
}

/// A GPU's (or MIG instance's) reading into the batch: its sample, with the process count
/// where processes are observed, and its processes, resolved.
fn push_reading(
    batch: &mut TickBatch,
    resolver: &mut ProcResolver,
    observe_processes: bool,
    mut sample: GpuSample,
    raw: Option<Vec<RawProcess>>,
) {
    if observe_processes {
        sample.process_count = raw
            .as_ref()
            .map(|r| u32::try_from(r.len()).unwrap_or(u32::MAX));
    }
    for p in raw.into_iter().flatten() {
        batch.processes.push(ProcessSample {
            ts_ms: sample.ts_ms,
            gpu_uuid: sample.uuid.clone(),
            process: resolver.resolve(p.pid),
            used_mem_bytes: p.used_mem_bytes,
        });
    }
    batch.samples.push(sample);
}

/// The settings that differ between two inventory reads of one GPU (both values known):
/// the power limit and persistence mode, in the audit's words.
fn setting_changes(
    old: &GpuInventory,
    new: &GpuInventory,
    since_ms: TsMs,
) -> Vec<(&'static str, SettingChange)> {
    use crate::setting::{Setting, on_off, watts};
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
