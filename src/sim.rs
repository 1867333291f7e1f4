//! Running gpuwatch on simulated GPUs (the demo, tests, benchmarks).
//!
//! A [`SimGpus`] is a private directory holding a copy of the fake NVML library as
//! `libnvidia-ml.so.1` next to its scenario (`gpuwatch-scenario.toml`), so every instance has
//! its own library state (the loader shares one instance per path). [`SimTicker`] drives the
//! fake library's clock through its control symbol and supplies the scenario's training
//! metrics, so the daemon runs the real nvml-wrapper path faster than real time.
//!
//! Invariant: the scenario is parsed by the same engine (`gpuwatch-sim`) that the fake
//! library uses, so the processes and training metrics seen here match what NVML serves.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use gpuwatch_sim::Scenario;

use crate::clock::{Tick, Ticker, sleep_unless_stopped};
use crate::model::{ProcessInfo, TrainingPoint, TsMs};
use crate::sampler::procs::ProcessOverrides;

/// File name of the fake library as cargo builds it.
pub const FAKE_LIBRARY_FILE: &str = "libgpuwatch_fake_nvml.so";
/// Scenario file the fake library reads from its own directory.
pub const SCENARIO_FILE: &str = "gpuwatch-scenario.toml";

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(
        "the simulated NVML library ({FAKE_LIBRARY_FILE}) was not found next to the gpuwatch binary or in GPUWATCH_FAKE_NVML (build it with `cargo build --release --workspace`)"
    )]
    LibraryNotFound,
    #[error("{0}")]
    Scenario(#[from] gpuwatch_sim::ScenarioError),
    #[error("cannot prepare the simulated GPUs in {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot load the fake library's clock control: {0}")]
    Control(String),
}

/// Finds the fake library: `$GPUWATCH_FAKE_NVML`, else next to the running executable (or its
/// parent, for test binaries in `target/<profile>/deps`).
pub fn find_fake_library() -> Result<PathBuf, SimError> {
    if let Some(p) = std::env::var_os("GPUWATCH_FAKE_NVML") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(SimError::LibraryNotFound)
        };
    }
    let exe = std::env::current_exe().map_err(|_| SimError::LibraryNotFound)?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(FAKE_LIBRARY_FILE))
        .find(|p| p.is_file())
        .ok_or(SimError::LibraryNotFound)
}

/// A private copy of the fake NVML library with its scenario.
#[derive(Debug)]
pub struct SimGpus {
    dir: tempfile::TempDir,
    pub scenario: Scenario,
}

impl SimGpus {
    /// Copies `fake_library` and `scenario_text` into a new private directory.
    pub fn prepare(
        fake_library: &Path,
        scenario_text: &str,
        origin: &str,
    ) -> Result<Self, SimError> {
        let scenario = Scenario::from_toml_str(scenario_text, origin)?;
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| SimError::Io { path, source }
        };
        let dir = tempfile::Builder::new()
            .prefix("gpuwatch-sim-")
            .tempdir()
            .map_err(io(Path::new("$TMPDIR")))?;
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(fake_library, &lib).map_err(io(&lib))?;
        let scen = dir.path().join(SCENARIO_FILE);
        std::fs::write(&scen, scenario_text).map_err(io(&scen))?;
        Ok(Self { dir, scenario })
    }

    /// The library to give NVML (`--nvml-library`).
    pub fn library_path(&self) -> PathBuf {
        self.dir.path().join("libnvidia-ml.so.1")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The scenario's processes as /proc would describe them, for the process resolver.
    pub fn process_overrides(&self, start_ms: TsMs) -> ProcessOverrides {
        let tick_ms = self.scenario.tick_ms() as i64;
        ProcessOverrides {
            simulated: true,
            pids: self
                .scenario
                .processes()
                .iter()
                .map(|p| {
                    let info = ProcessInfo {
                        pid: p.pid,
                        start_time_ms: start_ms + p.start_tick as i64 * tick_ms,
                        name: Some(p.name.clone()),
                        cmdline: Some(p.cmdline.clone()),
                        user: Some(p.user.clone()),
                        // The same parser as for a real process's cgroup file.
                        placement: p
                            .cgroup
                            .as_deref()
                            .and_then(crate::attribution::placement::from_cgroup)
                            .map(std::sync::Arc::new),
                    };
                    (p.pid, info)
                })
                .collect(),
        }
    }

    /// A ticker that runs the scenario `speed` times faster than real time, starting at
    /// simulated time `start_ms`, for `ticks` ticks (default: the scenario's duration).
    pub fn ticker(
        &self,
        start_ms: TsMs,
        speed: f64,
        ticks: Option<u64>,
    ) -> Result<SimTicker, SimError> {
        SimTicker::new(
            self,
            start_ms,
            speed,
            ticks.unwrap_or(self.scenario.duration_ticks()),
        )
    }
}

type SetTick = unsafe extern "C" fn(u64) -> u32;

/// Drives the fake library's clock; each tick is `tick_ms` of simulated time.
pub struct SimTicker {
    // Keeps the library mapped while `set_tick` may be called.
    _lib: libloading::Library,
    set_tick: SetTick,
    scenario: Scenario,
    start_ms: TsMs,
    pace: Duration,
    next: u64,
    end: u64,
    /// The last tick's simulated time (the simulated clock's "now").
    now: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl std::fmt::Debug for SimTicker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimTicker")
            .field("next", &self.next)
            .field("end", &self.end)
            .finish()
    }
}

impl SimTicker {
    fn new(sim: &SimGpus, start_ms: TsMs, speed: f64, ticks: u64) -> Result<Self, SimError> {
        let path = sim.library_path();
        // SAFETY: loading our own fake library, whose initialisers have no preconditions; the
        // same path is (or will be) loaded by NVML, and dlopen returns the same instance.
        let lib = unsafe { libloading::Library::new(&path) }
            .map_err(|e| SimError::Control(e.to_string()))?;
        // SAFETY: the symbol has this signature in crates/fake-nvml.
        let set_tick: SetTick = unsafe { lib.get::<SetTick>(b"gpuwatchFakeSetTick\0") }
            .map(|s| *s)
            .map_err(|e| SimError::Control(e.to_string()))?;
        let tick_ms = sim.scenario.tick_ms();
        let pace = if speed > 0.0 {
            Duration::from_secs_f64(tick_ms as f64 / 1000.0 / speed)
        } else {
            Duration::ZERO
        };
        Ok(Self {
            _lib: lib,
            set_tick,
            scenario: sim.scenario.clone(),
            start_ms,
            pace,
            next: 0,
            end: ticks,
            now: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(start_ms)),
        })
    }

    /// The simulated time of tick `n`.
    pub fn time_of(&self, n: u64) -> TsMs {
        self.start_ms + (n * self.scenario.tick_ms()) as TsMs
    }
}

impl Ticker for SimTicker {
    fn next(&mut self, stop: &AtomicBool) -> Option<Tick> {
        if self.next >= self.end {
            return None;
        }
        if self.next > 0 && !sleep_unless_stopped(self.pace, stop) {
            return None;
        }
        let n = self.next;
        self.next += 1;
        // SAFETY: plain function of the fake library taking a u64.
        unsafe { (self.set_tick)(n) };
        let ts_ms = self.time_of(n);
        self.now.store(ts_ms, std::sync::atomic::Ordering::Relaxed);
        let training = self
            .scenario
            .training_at(n)
            .into_iter()
            .map(|v| TrainingPoint {
                ts_ms,
                name: v.name,
                labels: v.labels,
                value: v.value,
            })
            .collect();
        Some(Tick { ts_ms, training })
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.scenario.tick_ms())
    }

    fn clock(&self) -> crate::clock::Clock {
        let now = self.now.clone();
        std::sync::Arc::new(move || now.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn simulated(&self) -> bool {
        true
    }
}

/// The scenario's pods served on a pod-resources socket in a temporary directory; ends
/// (and removes the directory) when dropped.
pub struct SimKubelet {
    pub socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for SimKubelet {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl SimKubelet {
    /// Serves `answer` the way a kubelet serves its allocations (the pod-resources API on a
    /// unix socket in a temporary directory, bound before this returns).
    pub fn serve(
        answer: crate::attribution::kubelet::proto::ListPodResourcesResponse,
    ) -> std::io::Result<SimKubelet> {
        use crate::attribution::kubelet::server;
        let pods = server::PodList::default();
        pods.set(answer);
        let dir = tempfile::Builder::new()
            .prefix("gpuwatch-kubelet-")
            .tempdir()?;
        let socket = dir.path().join("kubelet.sock");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // Bind before returning, so the daemon finds the socket at start.
        let listener = rt.block_on(async { tokio::net::UnixListener::bind(&socket) })?;
        std::thread::Builder::new()
            .name("gpuwatch-sim-kubelet".into())
            .spawn(move || {
                let r = rt.block_on(server::serve_listener(listener, pods, async {
                    let _ = rx.await;
                }));
                if let Err(e) = r {
                    tracing::warn!(error = %e, "the simulated kubelet stopped");
                }
            })?;
        Ok(SimKubelet {
            socket,
            _dir: dir,
            stop: Some(tx),
        })
    }

    /// Points `config` at this kubelet (`[kubernetes] enabled = true`, its socket).
    pub fn configure(&self, config: &mut crate::config::Config) {
        config.kubernetes.enabled = crate::config::Kubelet::On;
        config.kubernetes.pod_resources_socket = self.socket.clone();
    }
}

impl SimGpus {
    /// The scenario's `[[pod]]`s served the way a kubelet serves them (the pod-resources
    /// API on a unix socket, bound before this returns); `None` when it declares no pods.
    pub fn serve_pods(&self) -> std::io::Result<Option<SimKubelet>> {
        let scenario = &self.scenario;
        use crate::attribution::kubelet::proto;
        if scenario.pods().is_empty() {
            return Ok(None);
        }
        SimKubelet::serve(proto::ListPodResourcesResponse {
            pod_resources: scenario
                .pods()
                .iter()
                .map(|p| proto::PodResources {
                    name: p.name.clone(),
                    namespace: p.namespace.clone(),
                    containers: vec![proto::ContainerResources {
                        name: p.container.clone(),
                        devices: vec![proto::ContainerDevices {
                            resource_name: "nvidia.com/gpu".into(),
                            device_ids: p
                                .gpus
                                .iter()
                                .map(|&g| scenario.gpu(g).uuid.clone())
                                .collect(),
                        }],
                    }],
                })
                .collect(),
        })
        .map(Some)
    }
}
