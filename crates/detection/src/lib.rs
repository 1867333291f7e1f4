//! gpuwatch-detection: a labelled detection benchmark for gpuwatch's alert rules, measured
//! through gpuwatch's public interface only (the `gpuwatch` binary as a subprocess).
//!
//! The catalogue (`cases`) builds labelled cases — faults and healthy traps — as scenarios for
//! the one scenario engine, `gpuwatch-sim` (`scenario` writes their text). Each case runs in
//! every data shape where it makes sense (`shape`): the live daemon on the simulated NVML
//! library, or nvidia-smi CSV logs and an OpenMetrics scrape (`render`) imported and replayed.
//! `run` drives the binary, `score` matches alerts to labels, `bench` runs a set in parallel
//! and `report` writes the markdown tables and JSON records.
//!
//! Invariants: nothing here depends on how today's rules work — labels say what a correct
//! monitor reports, and every alert that matches no label is a false positive; the same seed
//! gives the same cases, files and scores.

pub mod bench;
pub mod cases;
pub mod render;
pub mod report;
pub mod run;
pub mod scenario;
pub mod score;
pub mod shape;

use std::path::PathBuf;

pub use bench::{Benchmark, DEFAULT_SEED, Options, RunRecord};

/// Where the gpuwatch binary is when none is given: `$GPUWATCH_BIN`, else `gpuwatch` next to
/// the current executable, else one directory up (where it is for test executables in
/// `target/*/deps`).
pub fn default_gpuwatch() -> PathBuf {
    if let Some(p) = std::env::var_os("GPUWATCH_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    let here = dir.join("gpuwatch");
    if here.is_file() {
        return here;
    }
    dir.parent().map_or(here, |up| up.join("gpuwatch"))
}
