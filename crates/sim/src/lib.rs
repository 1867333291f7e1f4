//! gpuwatch-sim: the scenario engine behind the fake NVML library, `gpuwatch demo` and the tests.
//!
//! A scenario (TOML, see `SCENARIOS.md`) describes simulated GPUs over simulated time: static
//! inventory from model presets, per-GPU timelines of metric behaviours, processes, injected NVML
//! faults, XID events and training jobs. [`Scenario`] is the parsed, validated form; every query
//! takes a tick (`tick_ms` of simulated time each) and is a pure function of it.
//!
//! Invariants:
//! - Queries cost the same at tick 10 and at tick 10^9 (closed forms, binary searches over
//!   segments); nothing is accumulated tick by tick, so callers may ask any tick in any order.
//! - The same file always yields the same numbers (noise is a seeded hash, not an RNG).
//! - A `Scenario` only exists if the file was valid; errors carry `file:line:col`.
//!
//! Module map: `spec` (TOML structs), `values` (durations, behaviours, ...), `compile`/`gpu`/
//! `entries` (validation and building), `behaviour` (shapes, noise, closed-form sums), `timeline` (segment
//! flattening, energy), `engine` (queries), `training`, `presets`, `nvml` (codes and symbols),
//! `types` (public values), `error`.

mod behaviour;
mod compile;
mod engine;
mod entries;
mod error;
mod gpu;
pub mod mig;
pub mod nvml;
pub mod presets;
mod spec;
mod timeline;
mod training;
mod types;
mod values;

use std::path::Path;

pub use compile::MAX_GPUS;
pub use error::{Problem, ScenarioError};
pub use types::{
    CallOutcome, GpuSpec, GpuState, PodSpec, ProcessSpec, ProcessState, Stall, StallKind,
    TrainingSpec, TrainingValue, XidEvent,
};
pub use values::parse_duration;

/// The scenario used when none is given: two healthy H100s training one job.
const BUILTIN_DEFAULT: &str = include_str!("builtin_default.toml");

/// A parsed and validated scenario, cheap to query.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    name: String,
    tick_ms: u64,
    duration_ticks: u64,
    speed: f64,
    seed: u64,
    driver_version: String,
    nvml_version: String,
    cuda_driver_version: i32,
    process_struct_size: u32,
    init_error: Option<u32>,
    /// Wall time `nvmlInit` blocks before it answers; `Duration::MAX` is forever.
    init_block: Option<std::time::Duration>,
    privileged: Option<bool>,
    gpus: Vec<gpu::GpuModel>,
    processes: Vec<ProcessSpec>,
    pods: Vec<PodSpec>,
    faults: Vec<compile::Fault>,
    events: Vec<XidEvent>,
    training: Vec<training::TrainingJob>,
}

impl Scenario {
    /// Parse and validate scenario text; `origin` (usually the file name) prefixes messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        compile::parse(text, origin)
    }

    /// Read and parse a scenario file.
    pub fn from_path(path: &Path) -> Result<Scenario, ScenarioError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: origin.clone(),
            source,
        })?;
        Scenario::from_toml_str(&text, &origin)
    }

    /// A small healthy scenario (2 × H100, one training job) used when no file is given.
    pub fn builtin_default() -> Scenario {
        // Infallible in practice: the text is compiled in and `builtin_default_parses` tests it.
        Scenario::from_toml_str(BUILTIN_DEFAULT, "<builtin default>")
            .expect("the built-in default scenario is valid (checked by a unit test)")
    }

    /// The text of the built-in default scenario (for `gpuwatch demo --print-scenario` etc.).
    pub fn builtin_default_text() -> &'static str {
        BUILTIN_DEFAULT
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Simulated milliseconds per tick.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms
    }

    /// Length of the scenario in ticks (values stay defined after it: open segments go on).
    pub fn duration_ticks(&self) -> u64 {
        self.duration_ticks
    }

    /// Simulated seconds per wall second in wall-clock mode.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn driver_version(&self) -> &str {
        &self.driver_version
    }

    pub fn nvml_version(&self) -> &str {
        &self.nvml_version
    }

    /// CUDA driver version as NVML reports it (12040 = 12.4).
    pub fn cuda_driver_version(&self) -> i32 {
        self.cuda_driver_version
    }

    /// Bytes per entry the fake writes in `nvmlDeviceGetComputeRunningProcesses_v3`: 24, or 32
    /// to emulate early R535 drivers.
    pub fn process_struct_size(&self) -> u32 {
        self.process_struct_size
    }

    /// The NVML code `nvmlInit` fails with, if the scenario simulates a start-up failure
    /// (no driver, no permission, library/driver mismatch, ...).
    pub fn init_error(&self) -> Option<u32> {
        self.init_error
    }

    /// How long `nvmlInit` blocks (wall time) before it answers, as a driver stuck on a GPU
    /// does; `Some(Duration::MAX)` means it never returns.
    pub fn init_block(&self) -> Option<std::time::Duration> {
        self.init_block
    }

    /// Whether callers may change GPU settings (NVML's setters), when the scenario says;
    /// `None` leaves it to the process's effective uid (root), as the real driver does.
    pub fn privileged(&self) -> Option<bool> {
        self.privileged
    }

    /// The tick containing simulated time `ms`.
    pub fn tick_at_ms(&self, ms: u64) -> u64 {
        ms / self.tick_ms
    }

    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }

    /// Static inventory of GPU `index`. Panics if `index >= gpu_count()`, like slice indexing.
    pub fn gpu(&self, index: usize) -> &GpuSpec {
        &self.gpus[index].spec
    }

    /// Every dynamic value of GPU `index` at `tick`, in NVML units; constant time in the tick.
    /// Panics if `index >= gpu_count()`.
    pub fn gpu_state(&self, index: usize, tick: u64) -> GpuState {
        self.gpus[index].state(&self.processes, tick)
    }

    /// Live processes on GPU `index` at `tick`, in file order (empty for a bad index).
    pub fn processes_at(&self, index: usize, tick: u64) -> Vec<ProcessState> {
        self.gpus
            .get(index)
            .map_or_else(Vec::new, |g| g.processes_at(&self.processes, tick))
    }

    /// MIG instance `mig` of GPU `index` at `tick`; `None` where it does not exist then.
    pub fn mig_state(&self, index: usize, mig: usize, tick: u64) -> Option<mig::MigState> {
        let g = self.gpus.get(index)?;
        let m = g.mig.get(mig).filter(|m| m.spec.alive_at(tick))?;
        Some(m.state(tick, &g.procs, &self.processes))
    }

    /// The live processes on MIG instance `mig` of GPU `index` at `tick`.
    pub fn mig_processes_at(&self, index: usize, mig: usize, tick: u64) -> Vec<ProcessState> {
        let Some(g) = self.gpus.get(index) else {
            return Vec::new();
        };
        let Some(m) = g.mig.get(mig).filter(|m| m.spec.alive_at(tick)) else {
            return Vec::new();
        };
        m.process_bytes(&g.procs, &self.processes, tick)
            .map(|(pid, used_bytes)| ProcessState { pid, used_bytes })
            .collect()
    }

    /// Static process metadata, in file order.
    pub fn processes(&self) -> &[ProcessSpec] {
        &self.processes
    }

    /// The pods the simulated kubelet reports.
    pub fn pods(&self) -> &[PodSpec] {
        &self.pods
    }

    /// Training series at `tick` for every running job; empty when none runs.
    pub fn training_at(&self, tick: u64) -> Vec<TrainingValue> {
        self.training
            .iter()
            .flat_map(|j| j.values_at(tick))
            .collect()
    }

    /// Static description of the training jobs (where their stalls are, ...).
    pub fn training_jobs(&self) -> Vec<&TrainingSpec> {
        self.training.iter().map(|j| &j.spec).collect()
    }

    /// All XID events, in tick order.
    pub fn events(&self) -> &[XidEvent] {
        &self.events
    }
}

#[cfg(test)]
mod tests;
