//! `GPUWATCH_FAKE_START_MS`: the scenario's time 0 anchored to the wall clock. Two copies of
//! the library (two instances with their own state, as two processes have) initialised at
//! different times with the same anchor see the same tick, and that tick counts from the
//! anchor, not from their init: a daemon restarted mid-scenario continues where it was.
//!
//! Its own test binary with one test: the environment variable is process-wide and read at
//! init, so no other test may load the library meanwhile.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::Fake;

const SCENARIO: &str = "[scenario]\ntick_ms = 1000\nduration = \"10h\"\n[[gpu]]\nmodel = \"T4\"\n";

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

#[test]
fn processes_with_the_same_anchor_see_the_same_scenario_time() {
    // Without an anchor each instance's clock starts at its own init: the later one is
    // behind (what a restarted daemon saw before).
    let early = Fake::with(SCENARIO);
    let _early_nvml = early.nvml();
    std::thread::sleep(Duration::from_millis(1100));
    let late = Fake::with(SCENARIO);
    let _late_nvml = late.nvml();
    assert!(
        early.tick() > late.tick(),
        "unanchored clocks differ: {} vs {}",
        early.tick(),
        late.tick()
    );

    // Scenario time 0 one hour ago.
    let anchor = unix_ms() - 3_600_000;
    // SAFETY: the only test of this binary; no other thread reads the environment now.
    unsafe { std::env::set_var("GPUWATCH_FAKE_START_MS", anchor.to_string()) };
    let first = Fake::with(SCENARIO);
    let _first_nvml = first.nvml();
    std::thread::sleep(Duration::from_millis(1100));
    let second = Fake::with(SCENARIO);
    let _second_nvml = second.nvml();
    // Read around a tick boundary: the second reading lies between the first's two.
    let (a0, b, a1) = (first.tick(), second.tick(), first.tick());
    assert!(
        a0 <= b && b <= a1,
        "same scenario time: {a0} <= {b} <= {a1}"
    );
    let expected = ((unix_ms() - anchor) / 1000) as u64;
    assert!(
        b.abs_diff(expected) <= 1,
        "the tick counts from the anchor: {b}, expected about {expected}"
    );
    unsafe { std::env::remove_var("GPUWATCH_FAKE_START_MS") };
}
