//! Cost of one sampler tick: 8 simulated GPUs with 4 processes each (scenarios/healthy-8gpu.toml)
//! through the real nvml-wrapper path against the fake NVML library, then stored.
//!
//!   cargo build --release --workspace
//!   cargo run --release --example bench_sampler -- [TICKS]      # default 3000
//!
//! Prints median and p99 wall time of `Sampler::tick` and of the store write, and process CPU
//! time per tick (all threads: per-GPU workers, coordinator, writer), i.e. the CPU % of one core
//! at a 1 s interval, and the NVML device calls per GPU per tick (the simulated library
//! counts them). NVML calls here cost what the fake costs (~0.25 µs) unless
//! `GPUWATCH_FAKE_CALL_US=N` makes each spin N µs, as a driver's ioctl does: see
//! docs/BENCHMARKS.md for the real-GPU figures.

use std::time::{Duration, Instant};

use gpuwatch::clock::Ticker;
use gpuwatch::sampler::nvml;
use gpuwatch::sampler::{Sampler, SamplerConfig};
use gpuwatch::sim::{SimGpus, find_fake_library};
use gpuwatch::store::{self, StoreConfig};

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills a plain struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let ticks: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(3000);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/healthy-8gpu.toml"
    ))?;
    let sim = SimGpus::prepare(&find_fake_library()?, &text, "healthy-8gpu.toml")?;
    let handle = nvml::init(Some(&sim.library_path()))?;
    let start_ms = 1_700_000_000_000;
    let mut ticker = sim.ticker(start_ms, f64::INFINITY, None)?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut sampler = Sampler::start(
        &handle,
        SamplerConfig {
            deadline: Duration::from_millis(800),
            inventory_interval: Duration::from_secs(300),
            processes: true,
            redact_patterns: Vec::new(),
            startup_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        Default::default(),
    )?;
    // The library nvml-wrapper loaded (same path: the same instance) counts its calls.
    // SAFETY: loading an already loaded library; the symbol is `u64 (void)`.
    let lib = unsafe { libloading::Library::new(sim.library_path())? };
    let calls: libloading::Symbol<unsafe extern "C" fn() -> u64> =
        unsafe { lib.get(b"gpuwatchFakeCallCount")? };
    let dir = tempfile::tempdir()?;
    let mut store = store::open(&dir.path().join("bench.db"), &StoreConfig::new("bench"))?;

    // Warm-up: caches, prepared statements, process table.
    for _ in 0..50 {
        let t = ticker
            .next(&stop)
            .ok_or_else(|| anyhow::anyhow!("scenario too short"))?;
        store.write_tick(&sampler.tick(t.ts_ms))?;
    }
    let mut sample_times = Vec::with_capacity(ticks);
    let mut write_times = Vec::with_capacity(ticks);
    let (mut samples, mut procs) = (0, 0);
    let cpu0 = cpu_time();
    // SAFETY: a plain function of the fake library.
    let calls0 = unsafe { calls() };
    let wall0 = Instant::now();
    for _ in 0..ticks {
        let t = ticker
            .next(&stop)
            .ok_or_else(|| anyhow::anyhow!("scenario too short"))?;
        let a = Instant::now();
        let batch = sampler.tick(t.ts_ms);
        let b = Instant::now();
        store.write_tick(&batch)?;
        write_times.push(b.elapsed());
        sample_times.push(b - a);
        samples += batch.samples.len();
        procs += batch.processes.len();
    }
    let cpu = cpu_time() - cpu0;
    let wall = wall0.elapsed();
    // SAFETY: as above.
    let calls_per_gpu_tick = (unsafe { calls() } - calls0) as f64 / (ticks * 8) as f64;
    sample_times.sort();
    write_times.sort();
    let per_tick_cpu = cpu / ticks as u32;
    println!(
        "ticks                     {ticks} ({} GPU samples, {} process samples per tick)",
        samples / ticks,
        procs / ticks
    );
    println!(
        "sampler tick wall         median {:?}  p99 {:?}",
        pct(&sample_times, 0.5),
        pct(&sample_times, 0.99)
    );
    println!(
        "store write wall          median {:?}  p99 {:?}",
        pct(&write_times, 0.5),
        pct(&write_times, 0.99)
    );
    println!("process CPU per tick      {per_tick_cpu:?} (sample + store, all threads)");
    println!(
        "CPU of one core at 1 s    {:.3} %",
        per_tick_cpu.as_secs_f64() * 100.0
    );
    println!("wall per tick (no pacing) {:?}", wall / ticks as u32);
    println!("NVML calls per GPU per tick {calls_per_gpu_tick:.1}");
    Ok(())
}
