//! Shared by the analysis tests: a scenario played through the whole daemon in-process, on
//! a fixed simulated clock at full speed (so the database, hence every analysis, is the same
//! at every run), and the gpuwatch binary. Each test file uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use gpuwatch::config::Config;
use gpuwatch::daemon::{self, DaemonParts};
use gpuwatch::sampler::nvml;
use gpuwatch::sim::{SimGpus, find_fake_library};

/// The simulated clock's start: 2023-11-14T22:13:20Z.
pub const START_MS: i64 = 1_700_000_000_000;

/// Plays `scenario` (a path under the crate) into `dir/NAME.db`; returns the database.
pub fn play(dir: &Path, scenario: &str, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(scenario))
        .expect("scenario");
    let sim = SimGpus::prepare(
        &find_fake_library().expect("the fake NVML library is built (cargo build --workspace)"),
        &text,
        scenario,
    )
    .expect("scenario");
    let db = dir.join(format!("{name}.db"));
    let mut config = Config {
        host: "demo-node".into(),
        database: db.clone(),
        interval: Duration::from_millis(sim.scenario.tick_ms()),
        sample_deadline: Duration::from_secs(2),
        ..Config::default()
    };
    config.http.enabled = false;
    let kubelet = sim.serve_pods().expect("serve pods").expect("pods");
    kubelet.configure(&mut config);
    daemon::run(
        DaemonParts {
            config,
            rules: gpuwatch::rules::load_configured(true, &[]).expect("default rules"),
            alert_sink: None,
            nvml: nvml::init(Some(&sim.library_path())).expect("init"),
            ticker: Box::new(sim.ticker(START_MS, f64::INFINITY, None).expect("ticker")),
            overrides: sim.process_overrides(START_MS),
            observer: None,
            reload: None,
        },
        Arc::new(AtomicBool::new(false)),
    )
    .expect("daemon runs");
    db
}

pub fn gpuwatch(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuwatch"));
    c.args(args).env_remove("RUST_LOG");
    c
}

pub fn ok_stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The "Analysis" section of `gpuwatch incident` text output (to its end), with alert ids
/// written `#` (alerts raised at the same tick get their ids in any order).
pub fn analysis_section(text: &str) -> String {
    let i = text
        .find("\nAnalysis (rule-based):\n")
        .unwrap_or_else(|| panic!("no Analysis section in:\n{text}"));
    let ids = regex::Regex::new(r"alert \d+ ").expect("regex");
    ids.replace_all(&text[i + 1..], "alert # ").into_owned()
}

/// Compares `got` with the golden file `tests/golden/analysis/NAME.txt`; with
/// `GPUWATCH_UPDATE_GOLDEN=1` it writes the file instead.
pub fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/analysis")
        .join(format!("{name}.txt"));
    if std::env::var_os("GPUWATCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).expect("write golden");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (GPUWATCH_UPDATE_GOLDEN=1 writes it)\ngot:\n{got}",
            path.display()
        )
    });
    assert_eq!(
        got,
        want,
        "{} differs (GPUWATCH_UPDATE_GOLDEN=1 rewrites it after review)",
        path.display()
    );
}
