//! The test-suite slice of the detection benchmark: the quick set (13 cases in the nvml,
//! full+apps@5s, basic@15s and minimal@60s shapes) against the debug `gpuwatch` binary, with
//! floors: every fault rule of the set at recall and precision ≥ 0.9 over all its shapes, no
//! alert on a healthy case, training hangs detected within 3 minutes (median), no failed run.
//! A failure prints every missed floor and the whole results table.
//!
//! `cargo test -p gpuwatch-detection` does not build `gpuwatch`: run `cargo build --workspace`
//! first (as `cargo test --workspace` does), or this measures whatever binary is there.

use std::path::PathBuf;
use std::time::Duration;

use gpuwatch_detection::cases::Set;
use gpuwatch_detection::score::median;
use gpuwatch_detection::{DEFAULT_SEED, Options, bench, report};

/// `target/debug/deps/slice-…` → `target/debug/gpuwatch`.
fn gpuwatch() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("gpuwatch"))
        .unwrap_or_default();
    assert!(
        bin.is_file(),
        "build the workspace first: cargo build --workspace (no gpuwatch binary at {})",
        bin.display()
    );
    bin
}

#[test]
fn quick_set_meets_the_floors() {
    let opts = Options {
        set: Set::Quick,
        seed: DEFAULT_SEED,
        jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
        gpuwatch: gpuwatch(),
        case: None,
        shape: None,
        keep: None,
        progress: false,
        timeout: Duration::from_secs(300),
    };
    let b = bench::run(&opts).unwrap_or_else(|e| panic!("the benchmark could not run: {e}"));
    let rs = &b.records;
    let mut missed = Vec::new();
    for rule in report::fault_rules(rs) {
        let t = report::tally(rs, Some(&rule));
        let (r, p) = (t.recall().unwrap_or(0.0), t.precision().unwrap_or(0.0));
        if r < 0.9 || p < 0.9 {
            missed.push(format!(
                "{rule}: recall {r:.2}, precision {p:.2} (floors 0.90; TP {} FN {} FP {})",
                t.tp, t.fn_, t.fp
            ));
        }
    }
    let (alarms, which) = report::false_alarms(rs);
    if alarms > 0 {
        missed.push(format!(
            "{alarms} alerts on healthy cases (floor 0): {which}"
        ));
    }
    let (delays, labels) = report::hang_delays(rs, &report::HANGS);
    match median(&delays) {
        Some(m) if m <= 180.0 => {}
        m => missed.push(format!(
            "training_hang median delay {} (floor 3.0 min; {} of {labels} hang labels detected)",
            m.map_or("–".to_string(), |m| format!("{:.1} min", m / 60.0)),
            delays.len()
        )),
    }
    let failed: Vec<String> = rs
        .iter()
        .filter_map(|r| {
            r.error
                .as_ref()
                .map(|e| format!("{} {}: {e}", r.case, r.shape_name))
        })
        .collect();
    if !failed.is_empty() {
        missed.push(format!(
            "{} runs failed:\n  {}",
            failed.len(),
            failed.join("\n  ")
        ));
    }
    assert!(
        missed.is_empty(),
        "detection floors missed:\n- {}\n\n{}",
        missed.join("\n- "),
        report::markdown(&b)
    );
}
