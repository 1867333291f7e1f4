//! Driving the `gpuwatch` binary through its public interface only: subprocesses with argv
//! (never a shell), files in a run directory, and the documented outputs (`query --format
//! json` over the `alerts` and `gpu_samples` views, `replay --format jsonl`).
//!
//! Invariants:
//! - One run directory per (case, shape); every command's stdout and stderr go to files in it
//!   (no pipe can fill up and block), and a command running past the timeout is killed.
//! - Alert times are seconds from the case's tick 0: the first stored sample for `nvml`, the
//!   render base for the CSV shapes.
//! - An alert is an episode, in every shape: a row of the `alerts` view (nvml), or a replay
//!   `firing` line of an alert that is not firing yet (a `firing` line of a firing alert is a
//!   severity change, which the view keeps in the same row).
//! - Every command gets an empty `--config` in the run directory, so no machine-wide
//!   `/etc/gpuwatch/gpuwatch.toml` changes a result.
//!
//! `output.rs` reads what the commands print.

mod output;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use output::{alert, import_warnings, replay_alerts, strip_ansi};

use crate::cases::Case;
use crate::render::{self, CsvStyle};
use crate::shape::Shape;

/// Simulated seconds per wall second for cases with XID events (see [`Gpuwatch::nvml`]).
const EVENT_SPEED: &str = "300";

/// One firing alert as gpuwatch reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    pub rule: String,
    pub gpu: Option<u32>,
    pub pid: Option<u32>,
    /// Seconds from the case's tick 0.
    pub at_s: f64,
    pub severity: String,
    pub summary: String,
}

/// What one run observed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Observed {
    /// Firing alerts, in time order.
    pub alerts: Vec<Alert>,
    /// `warning:` lines of the imports and errors logged by the daemon.
    pub warnings: Vec<String>,
    /// What the daemon stored (nvml), to spot dropped ticks and gaps.
    pub samples: Option<Samples>,
    /// The unit style of a CSV run.
    pub units: Option<bool>,
}

/// The daemon's sample rows of an `nvml` run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Samples {
    /// Distinct sample times (one per tick stored).
    pub times: u64,
    pub rows: u64,
    /// Rows with status `deadline_missed`: gaps, metrics NULL.
    pub missed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start `{cmd}`: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Failed {
        cmd: String,
        status: String,
        stderr: String,
    },
    #[error("`{cmd}` did not finish within {secs} s (killed)")]
    Timeout { cmd: String, secs: u64 },
    #[error("unexpected output of `{cmd}`: {detail}")]
    Output { cmd: String, detail: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The gpuwatch binary under test.
#[derive(Debug, Clone)]
pub struct Gpuwatch {
    pub bin: PathBuf,
    /// Longest a single command may run.
    pub timeout: Duration,
}

fn write(path: &Path, text: &str) -> Result<(), RunError> {
    std::fs::write(path, text).map_err(|source| RunError::Io {
        path: path.display().to_string(),
        source,
    })
}

impl Gpuwatch {
    /// Runs `gpuwatch ARGS` in `dir`; returns (stdout, stderr) of a successful command.
    fn exec(&self, dir: &Path, args: &[OsString]) -> Result<(String, String), RunError> {
        let shown: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let cmd = format!("gpuwatch {}", shown.join(" "));
        let (out_path, err_path) = (dir.join("stdout.txt"), dir.join("stderr.txt"));
        let file = |p: &Path| {
            std::fs::File::create(p).map_err(|source| RunError::Io {
                path: p.display().to_string(),
                source,
            })
        };
        let mut child = Command::new(&self.bin)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file(&out_path)?)
            .stderr(file(&err_path)?)
            .spawn()
            .map_err(|source| RunError::Spawn {
                cmd: cmd.clone(),
                source,
            })?;
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() > self.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(RunError::Timeout {
                        cmd,
                        secs: self.timeout.as_secs(),
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(source) => return Err(RunError::Spawn { cmd, source }),
            }
        };
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let (stdout, stderr) = (read(&out_path), read(&err_path));
        if !status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
            let tail: Vec<String> = tail.into_iter().rev().map(strip_ansi).collect();
            return Err(RunError::Failed {
                cmd,
                status: status.to_string(),
                stderr: tail.join(" | "),
            });
        }
        Ok((stdout, stderr))
    }

    fn query(&self, dir: &Path, db: &Path, sql: &str) -> Result<Vec<Value>, RunError> {
        let args = argv(
            &["query", "--config", "gpuwatch.toml", "--format", "json"],
            db,
            sql,
        );
        let (out, _) = self.exec(dir, &args)?;
        match serde_json::from_str::<Value>(&out) {
            Ok(Value::Array(rows)) => Ok(rows),
            _ => Err(RunError::Output {
                cmd: format!("gpuwatch query {sql}"),
                detail: out.chars().take(300).collect(),
            }),
        }
    }

    /// The `nvml` shape: the whole daemon on the fake NVML library at full speed — except for
    /// cases with XID events: the simulated library delivers an event to a waiting event set
    /// within one of its 50 ms polls, which at full speed is minutes of simulated time, so
    /// those run at [`EVENT_SPEED`] (a poll is then about 15 simulated seconds).
    pub fn nvml(&self, case: &Case, dir: &Path) -> Result<Observed, RunError> {
        write(&dir.join("gpuwatch.toml"), "")?;
        write(&dir.join("scenario.toml"), &case.toml)?;
        let db = dir.join("gpuwatch.db");
        let speed = if case.toml.contains("[[event]]") {
            EVENT_SPEED
        } else {
            "1000000"
        };
        let mut args: Vec<OsString> = ["demo", "--speed", speed, "--scenario", "scenario.toml"]
            .iter()
            .map(OsString::from)
            .collect();
        args.extend(["--db".into(), db.clone().into_os_string()]);
        args.extend(["--every", "1000h", "--log", "error"].map(OsString::from));
        let (_, stderr) = self.exec(dir, &args)?;
        let warnings = stderr
            .lines()
            .map(strip_ansi)
            .filter(|l| l.contains("ERROR") || l.contains("WARN"))
            .collect();
        let span = self.query(
            dir,
            &db,
            "SELECT min(ts_ms) AS t0, count(DISTINCT ts_ms) AS times, count(*) AS rows, \
             sum(status = 'deadline_missed') AS missed FROM gpu_samples",
        )?;
        let t0 = span
            .first()
            .and_then(|r| r.get("t0"))
            .and_then(Value::as_i64)
            .ok_or_else(|| RunError::Output {
                cmd: "gpuwatch query (gpu_samples)".into(),
                detail: "no samples stored".into(),
            })?;
        let count = |k: &str| {
            span.first()
                .and_then(|r| r.get(k))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        let samples = Samples {
            times: count("times"),
            rows: count("rows"),
            missed: count("missed"),
        };
        let rows = self.query(
            dir,
            &db,
            "SELECT rule, gpu_index, pid, state, severity, fired_ms, resolved_ms, \
             active_since_ms, summary FROM alerts WHERE reported = 1 ORDER BY fired_ms",
        )?;
        let mut alerts = Vec::new();
        for r in &rows {
            let Some(fired) = r.get("fired_ms").and_then(Value::as_i64) else {
                continue;
            };
            alerts.push(alert(r, "gpu_index", (fired - t0) as f64 / 1000.0));
        }
        Ok(Observed {
            alerts,
            warnings,
            samples: Some(samples),
            units: None,
        })
    }

    /// A CSV shape: render the logs, import them, replay the rules over them.
    pub fn csv(
        &self,
        case: &Case,
        shape: Shape,
        dir: &Path,
        seed: u64,
    ) -> Result<Observed, RunError> {
        let Shape::Csv {
            kind,
            apps,
            interval_s,
        } = shape
        else {
            return self.nvml(case, dir);
        };
        let mut rng = fastrand::Rng::with_seed(seed);
        let units = rng.bool();
        let style = CsvStyle {
            kind,
            apps,
            interval_s,
            units,
        };
        let files = render::csv(&case.scenario, style, &mut rng);
        write(&dir.join("gpuwatch.toml"), "")?;
        write(&dir.join("gpu.csv"), &files.gpu)?;
        let db = dir.join("gpuwatch.db");
        let mut import: Vec<OsString> = ["import", "nvidia-smi", "gpu.csv"]
            .map(OsString::from)
            .into();
        if let Some(a) = &files.apps {
            write(&dir.join("apps.csv"), a)?;
            import.push("apps.csv".into());
        }
        let common = |args: &mut Vec<OsString>| {
            args.extend(["--config".into(), "gpuwatch.toml".into(), "--db".into()]);
            args.push(db.clone().into_os_string());
        };
        common(&mut import);
        import.extend(["--tz", "UTC", "--host", "node"].map(OsString::from));
        let mut warnings = Vec::new();
        let (_, err) = self.exec(dir, &import)?;
        warnings.extend(import_warnings(&err));
        if let Some(om) =
            render::openmetrics(&case.scenario, &render::shown_gpus(&case.scenario, kind))
        {
            write(&dir.join("train.om"), &om)?;
            let mut args: Vec<OsString> = ["import", "openmetrics", "train.om"]
                .map(OsString::from)
                .into();
            common(&mut args);
            args.extend(["--host", "node"].map(OsString::from));
            let (_, err) = self.exec(dir, &args)?;
            warnings.extend(import_warnings(&err));
        }
        let mut replay: Vec<OsString> = vec!["replay".into()];
        common(&mut replay);
        replay.extend(["--format", "jsonl"].map(OsString::from));
        let (out, _) = self.exec(dir, &replay)?;
        let alerts = replay_alerts(&out).map_err(|detail| RunError::Output {
            cmd: "gpuwatch replay --format jsonl".into(),
            detail,
        })?;
        Ok(Observed {
            alerts,
            warnings,
            samples: None,
            units: Some(units),
        })
    }
}

/// `[fixed..., --db DB, sql]`.
fn argv(fixed: &[&str], db: &Path, sql: &str) -> Vec<OsString> {
    let mut v: Vec<OsString> = fixed.iter().map(OsString::from).collect();
    v.extend(["--db".into(), db.as_os_str().to_owned(), sql.into()]);
    v
}
