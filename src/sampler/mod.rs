//! The sampler: reads every GPU through NVML once per tick and turns it into a [`TickBatch`].
//!
//! Threads: one worker per GPU ([`worker`]) makes all NVML calls for that GPU; one thread
//! waits for NVML events ([`events`]); the caller of [`Sampler::tick`] (the daemon's
//! sampling thread) coordinates. Nothing outside these threads ever calls NVML.
//!
//! Invariants:
//! - `tick` returns within the sample deadline whatever the driver does: a GPU that has not
//!   answered by then gets a `DeadlineMissed` row (a gap), and a worker still busy with an
//!   old request gets no new one, so a call that never returns costs one GPU, not the daemon.
//! - A lost GPU gets a `Lost` row every tick (it stays visible) and one `gpu_lost` event.
//! - Process identity is `(pid, start time)`; command lines are redacted before storing.

pub mod device;
pub mod diagnosis;
pub mod events;
pub mod fields;
pub mod gpm;
pub mod gpu_procs;
mod mailbox;
pub mod nvml;
pub mod probe;
pub mod procs;
pub mod redact;
pub mod support;
pub mod worker;

use std::collections::HashMap;
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
use self::mailbox::Mailbox;
use self::nvml::{NvmlHandle, error_text};
use self::procs::{ProcResolver, ProcessOverrides};
use self::redact::Redactor;
use self::worker::{Request, Response};

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
    tx: Sender<Request>,
    uuid: Option<String>,
    /// The tick id a request is outstanding for.
    busy: Option<u64>,
    lost: bool,
}

pub struct Sampler {
    slots: Vec<Slot>,
    responses: Mailbox,
    events: Receiver<Event>,
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
    /// Starts the per-GPU workers and the event thread, and waits (bounded) for every GPU's
    /// inventory.
    pub fn start(
        h: &NvmlHandle,
        cfg: SamplerConfig,
        overrides: ProcessOverrides,
    ) -> Result<Self, SamplerError> {
        let count = h
            .nvml
            .device_count()
            .map_err(|e| SamplerError::DeviceCount(error_text(&e)))?;
        let responses = Mailbox::default();
        let sys = SystemInfo::from_handle(h);
        let mut slots = Vec::new();
        for index in 0..count {
            let (tx, rx) = mpsc::channel();
            let (nvml, sys, mailbox) = (h.nvml.clone(), sys.clone(), responses.clone());
            std::thread::Builder::new()
                .name(format!("gpuwatch-gpu{index}"))
                .spawn(move || worker::run(nvml, index, sys, rx, mailbox))?;
            slots.push(Slot {
                index,
                tx,
                uuid: None,
                busy: None,
                lost: false,
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ev_tx, events) = mpsc::channel();
        let xid_watch = Arc::new(crate::http::telemetry::XidWatch::default());
        events::spawn(
            h.nvml.clone(),
            count,
            stop.clone(),
            ev_tx,
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
            slots,
            responses,
            events,
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

    /// Which GPUs' XID events are watched (for `/metrics`: no XID seen is 0 only there).
    pub fn xid_watch(&self) -> Arc<crate::http::telemetry::XidWatch> {
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
        };
        self.responses.expect(req.tick_id, self.slots.len());
        for slot in &mut self.slots {
            if slot.tx.send(req).is_ok() {
                slot.busy = Some(req.tick_id);
            } else {
                self.responses.forgo();
            }
        }
        for r in self
            .responses
            .wait(Instant::now() + self.cfg.startup_timeout)
        {
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
        if slot.busy == Some(r.tick_id) {
            slot.busy = None;
        }
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
        let req = Request {
            tick_id,
            ts_ms,
            refresh_inventory: refresh,
            sample: true,
            processes: self.cfg.processes,
        };
        // Answers that arrived after an earlier tick's deadline free their GPU for this tick
        // (their samples are stale and dropped; their inventory and errors are kept). Without
        // this, a tick where every GPU missed the deadline would send no request, wait for
        // nothing and leave every GPU busy for good.
        for r in self.responses.drain() {
            let _stale = self.absorb(r, tick_id);
        }
        let free: Vec<usize> = (0..self.slots.len())
            .filter(|&i| !self.slots[i].lost && self.slots[i].busy.is_none())
            .collect();
        self.responses.expect(tick_id, free.len());
        for i in free {
            let slot = &mut self.slots[i];
            if slot.tx.send(req).is_ok() {
                slot.busy = Some(tick_id);
            } else {
                self.responses.forgo();
            }
        }
        let mut got: HashMap<u32, (GpuSample, Option<Vec<RawProcess>>)> = HashMap::new();
        for r in self.responses.wait(started + self.cfg.deadline) {
            let index = r.index;
            if let Some(v) = self.absorb(r, tick_id) {
                got.insert(index, v);
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
        // Workers end when their channel closes; a worker stuck in the driver keeps its own
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
