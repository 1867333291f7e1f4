//! Helpers shared by the integration tests.

use std::path::PathBuf;
use std::time::Duration;

use gpuwatch::clock::Ticker;
use gpuwatch::model::TickBatch;
use gpuwatch::sampler::nvml::{self, NvmlHandle};
use gpuwatch::sampler::{Sampler, SamplerConfig};
use gpuwatch::sim::{SimGpus, SimTicker, find_fake_library};

/// The fake NVML library built by cargo.
pub fn fake_library() -> PathBuf {
    find_fake_library().unwrap_or_else(|e| {
        panic!("{e}: run `cargo build --workspace` (scripts/test.sh does) before `cargo test`")
    })
}

/// A private copy of the fake library serving `scenario`.
pub fn sim(scenario: &str) -> SimGpus {
    SimGpus::prepare(&fake_library(), scenario, "test-scenario.toml").expect("valid scenario")
}

/// A started sampler on `sim`, with a manual clock (tick n is simulated second n).
pub struct Rig {
    pub sim: SimGpus,
    /// Keeps NVML initialised for the life of the rig.
    pub _nvml: NvmlHandle,
    pub sampler: Sampler,
    pub ticker: SimTicker,
    /// Simulated time of the tick the fake library is at now.
    pub now_ms: i64,
    /// Number of that tick.
    pub n: u64,
}

pub const START_MS: i64 = 1_700_000_000_000;

pub fn rig(scenario: &str, deadline: Duration) -> Rig {
    let sim = sim(scenario);
    let handle = nvml::init(Some(&sim.library_path())).expect("fake NVML initialises");
    // Tick 0 before discovery, so the inventory is read at a defined time.
    let mut ticker = sim.ticker(START_MS, f64::INFINITY, None).expect("ticker");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let first = ticker.next(&stop).expect("tick 0");
    assert_eq!(first.ts_ms, START_MS);
    let sampler = Sampler::start(
        &handle,
        SamplerConfig {
            deadline,
            inventory_interval: Duration::from_secs(300),
            processes: true,
            redact_patterns: Vec::new(),
            startup_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        sim.process_overrides(START_MS),
    )
    .expect("sampler starts");
    Rig {
        sim,
        _nvml: handle,
        sampler,
        ticker,
        now_ms: START_MS,
        n: 0,
    }
}

impl Rig {
    /// Samples the current tick, then advances the fake clock by one tick.
    pub fn tick(&mut self) -> TickBatch {
        let stop = std::sync::atomic::AtomicBool::new(false);
        let batch = self.sampler.tick(self.now_ms);
        let next = self.ticker.next(&stop).expect("scenario long enough");
        self.now_ms = next.ts_ms;
        self.n += 1;
        batch
    }
}

/// Runs the gpuwatch binary with `args` (RUST_LOG unset): its exit code, stdout and stderr.
pub fn gpuwatch_run(args: &[&str]) -> (i32, String, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpuwatch"))
        .env_remove("RUST_LOG")
        .args(args)
        .output()
        .expect("gpuwatch");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}
