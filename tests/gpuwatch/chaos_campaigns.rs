//! A short slice of each fault campaign of `benches/chaos/chaos.py` (docs/RELIABILITY.md):
//! the campaign command is run as a user runs it, on this build's `gpuwatch` and fake NVML
//! library, with few trials; the test checks its exit status and its one summary line.
//!
//! Invariants: every campaign here runs its real services (aiosmtpd, Debian's
//! prometheus-alertmanager and prometheus, libfaketime from Debian's faketime; the disk-full
//! slice mounts a tmpfs, so it runs as root as CI does) on loopback and prints `... : PASS`
//! only when nothing was lost, order was kept and duplicates stayed within the promise. Each
//! slice stays under a minute on 2 cores. The slices run one at a time (each times ticks and
//! deadlines; three rigs at once on 2 cores would measure the machine), and scripts/test.sh
//! runs them after the rest of the suite (`--skip chaos_campaigns::`, then alone). The full campaigns
//! (50 trials, ...) run from the command line only.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

const PYTHON: &str = "/usr/bin/python3";

/// One campaign at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn campaign(args: &[&str]) -> (i32, String, String) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let lib = gpuwatch::sim::find_fake_library().expect("cargo build --workspace first");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/chaos/chaos.py");
    let out = Command::new(PYTHON)
        .arg(&script)
        .args(args)
        .arg("--gpuwatch")
        .arg(env!("CARGO_BIN_EXE_gpuwatch"))
        .arg("--lib")
        .arg(&lib)
        .env_remove("RUST_LOG")
        .output()
        .expect("run benches/chaos/chaos.py");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The one summary line, `chaos NAME: ...: PASS|FAIL` (the campaign's stderr in the failure
/// message when there is none: a traceback says why).
fn summary<'a>(name: &str, stdout: &'a str, stderr: &str) -> &'a str {
    let prefix = format!("chaos {name}: ");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(
        lines.len(),
        1,
        "one summary line expected in {stdout:?}; stderr:\n{stderr}"
    );
    lines[0]
}

/// A number before `what` in the summary (`..., 0 lost, ...` -> 0 for "lost").
fn figure(line: &str, what: &str) -> u64 {
    let at = line
        .find(&format!(" {what}"))
        .unwrap_or_else(|| panic!("no `{what}` in {line}"));
    let digits: String = line[..at]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number before `{what}` in {line}"))
}

#[test]
fn kill9_slice_loses_nothing() {
    let (code, out, err) = campaign(&["kill9", "--trials", "5"]);
    let line = summary("kill9", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert!(line.starts_with("chaos kill9: 5 trials (seed "), "{line}");
    assert_eq!(figure(line, "lost"), 0, "{line}");
    assert!(
        figure(line, "transitions") > 0,
        "nothing was delivered: {line}"
    );
    assert!(line.contains("order kept"), "{line}");
}

#[test]
fn outage_slice_delivers_the_backlog_in_order() {
    let (code, out, err) = campaign(&[
        "outage",
        "--before",
        "3",
        "--down",
        "10",
        "--after",
        "3",
        "--backlog-after",
        "3s",
    ]);
    let line = summary("outage", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert!(figure(line, "messages backlogged") > 0, "{line}");
    assert_eq!(figure(line, "lost"), 0, "{line}");
    assert_eq!(figure(line, "duplicates"), 0, "{line}");
    assert!(
        line.contains("backlog alert fired+resolved on alertmanager"),
        "{line}"
    );
}

#[test]
fn blocked_driver_slice_costs_one_gpu() {
    let (code, out, err) = campaign(&[
        "blocked",
        "--episodes",
        "1",
        "--block",
        "3",
        "--max-hole-ms",
        "2000",
        "--max-missed-per-episode",
        "1",
    ]);
    let line = summary("blocked", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    // On a loaded 2-core machine a debug build may miss the tick the stall is found in
    // (then never again): at most 1 per other GPU; the full campaign measured 0 of 30.
    assert!(
        figure(line, "missed ticks during the blocks") <= 3,
        "{line}"
    );
    assert!(line.contains("gaps recorded 1/1"), "{line}");
    assert_eq!(figure(line, "lost"), 0, "{line}");
}

#[test]
fn sighup_storm_slice_keeps_the_last_good_rules() {
    let (code, out, err) = campaign(&["sighup", "--hups", "60", "--after", "8"]);
    let line = summary("sighup", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert!(line.contains("daemon alive, 0 missed ticks"), "{line}");
    assert!(figure(line, "time(s) after the last reload") > 0, "{line}");
    assert_eq!(figure(line, "lost"), 0, "{line}");
    assert_eq!(figure(line, "duplicates"), 0, "{line}");
}

#[test]
fn corrupt_database_slice_moves_it_aside_and_announces_it() {
    let (code, out, err) = campaign(&["corrupt", "--trials", "4"]);
    let line = summary("corrupt", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    // The first three trials are garbage, a truncation and a foreign WAL: at least the WAL
    // is damage to SQLite.
    assert!(figure(line, "moved aside") >= 1, "{line}");
    assert_eq!(
        figure(line, "damaged per SQLite"),
        figure(line, "moved aside"),
        "{line}"
    );
    assert!(line.contains("0 deleted"), "{line}");
}

#[test]
fn two_daemons_slice_refuses_the_second() {
    let (code, out, err) = campaign(&["lock", "--trials", "3", "--max-gap", "1"]);
    let line = summary("lock", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert_eq!(figure(line, "refused with the lock's message"), 3, "{line}");
    assert!(line.contains("integrity_check ok"), "{line}");
}

#[test]
fn import_killed_slice_leaves_all_or_nothing() {
    let (code, out, err) = campaign(&["import", "--trials", "4", "--days", "0.03"]);
    let line = summary("import", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert_eq!(figure(line, "part"), 0, "{line}");
    assert_eq!(figure(line, "integrity_check failures"), 0, "{line}");
    assert!(line.contains("reruns complete 4/4"), "{line}");
}

#[test]
fn lost_gpu_slice_is_reported_once_and_found_back() {
    // Two episodes (the second with XID 79), each probed 8 s after the loss.
    let (code, out, err) = campaign(&[
        "lost",
        "--episodes",
        "2",
        "--before",
        "3",
        "--lost",
        "6",
        "--probe-after",
        "8",
        "--period",
        "12",
        "--max-hole-ms",
        "2000",
    ]);
    let line = summary("lost", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert!(
        line.contains("gpu_lost fired 2 and resolved 2, recovered by probe 2/2"),
        "{line}"
    );
    assert!(figure(line, "lost rows without values") > 0, "{line}");
    assert_eq!(figure(line, "bad)"), 0, "{line}");
    assert_eq!(figure(line, "lost,"), 0, "{line}");
}

#[test]
fn clock_steps_slice_keeps_rows_in_order_and_for_on_the_monotonic_clock() {
    let (code, out, err) = campaign(&[
        "clock", "--before", "3", "--every", "4", "--after", "6", "--hold", "12",
    ]);
    let line = summary("clock", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert!(
        line.contains("restarted 6s, daemon alive, 0 rows out of order"),
        "{line}"
    );
    assert_eq!(figure(line, "lost"), 0, "{line}");
}

#[test]
fn prometheus_down_and_slow_slice_is_no_hang() {
    let (code, out, err) = campaign(&[
        "prometheus",
        "--before",
        "8",
        "--down",
        "14",
        "--between",
        "6",
        "--slow",
        "16",
        "--delay",
        "5",
        "--timeout",
        "2",
        "--after",
        "4",
        "--unavailable-for",
        "3s",
        "--max-hole-ms",
        "2000",
    ]);
    let line = summary("prometheus", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert!(line.contains("training_hang fired 0 time(s)"), "{line}");
    assert!(line.contains("fired and resolved in 2/2 faults"), "{line}");
    assert_eq!(figure(line, "lost"), 0, "{line}");
}

#[test]
fn disk_full_slice_keeps_writing_and_says_so() {
    let (code, out, err) = campaign(&["diskfull", "--before", "4", "--full", "8", "--after", "7"]);
    let line = summary("diskfull", &out, &err);
    assert_eq!(code, 0, "{line}\n{err}");
    assert!(line.ends_with(": PASS"), "{line}\n{err}");
    assert!(line.contains("self alert at 3/3 receivers"), "{line}");
    assert!(line.contains("oldest samples deleted yes"), "{line}");
    assert_eq!(figure(line, "lost"), 0, "{line}");
}
