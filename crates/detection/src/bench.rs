//! Running a set: every selected case in every shape where it makes sense, in parallel on
//! std threads, each run scored into a [`RunRecord`].
//!
//! Invariants: records come back in catalogue order (case, then shape) whatever the
//! parallelism; a run that fails (gpuwatch exits non-zero, times out, prints something
//! unexpected) is recorded with its error and no alerts, so its labels count as missed and
//! the report lists the error; a run's files live in a temporary directory unless `keep`
//! names one.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cases::{self, Case, CatalogueError, Family, Label, LeakInfo, Set};
use crate::run::{Alert, Gpuwatch, Observed, Samples};
use crate::score::{self, RunScore};
use crate::shape::Shape;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub set: Set,
    pub seed: u64,
    pub jobs: usize,
    pub gpuwatch: PathBuf,
    /// Only cases with this name (`leak-2`) or family (`leak`).
    pub case: Option<String>,
    /// Only shapes with this name (`basic@15s`) or group (`basic`).
    pub shape: Option<String>,
    /// Keep each run's files in `DIR/CASE/SHAPE`.
    pub keep: Option<PathBuf>,
    /// Print one line per finished run on stderr.
    pub progress: bool,
    /// Longest a single gpuwatch command may run.
    pub timeout: Duration,
}

/// The default seed of the published figures.
pub const DEFAULT_SEED: u64 = 20_250_303;

#[derive(Debug, Clone, Serialize)]
pub struct LabelRecord {
    #[serde(flatten)]
    pub label: Label,
    pub observable: bool,
}

/// One case in one shape.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    pub case: String,
    pub family: Family,
    pub variant: u32,
    pub healthy: bool,
    #[serde(rename = "shape")]
    pub shape_name: String,
    #[serde(skip)]
    pub shape: Shape,
    pub params: serde_json::Map<String, serde_json::Value>,
    pub labels: Vec<LabelRecord>,
    pub leak: Option<LeakInfo>,
    pub alerts: Vec<Alert>,
    pub score: RunScore,
    pub warnings: Vec<String>,
    /// The daemon's sample rows (nvml), and the ticks the case has.
    pub samples: Option<Samples>,
    pub ticks: u64,
    pub units: Option<bool>,
    pub error: Option<String>,
    pub wall_s: f64,
}

/// A finished benchmark.
#[derive(Debug, Clone)]
pub struct Benchmark {
    pub set: Set,
    pub seed: u64,
    pub jobs: usize,
    pub records: Vec<RunRecord>,
    pub elapsed_s: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Catalogue(#[from] CatalogueError),
    #[error("no run matches --case {case:?} --shape {shape:?}")]
    NothingSelected {
        case: Option<String>,
        shape: Option<String>,
    },
    #[error(
        "gpuwatch binary {0} does not exist (build it: cargo build --workspace, or pass --gpuwatch)"
    )]
    NoBinary(String),
}

/// The shapes of a set.
pub fn shapes(set: Set) -> Vec<Shape> {
    match set {
        Set::Quick => Shape::quick(),
        Set::Full => Shape::all(),
    }
}

fn selected(opts: &Options, case: &Case, shape: &Shape) -> bool {
    let case_ok = opts
        .case
        .as_ref()
        .is_none_or(|c| *c == case.name || c == case.family.name());
    let shape_ok = opts
        .shape
        .as_ref()
        .is_none_or(|s| *s == shape.to_string() || s == shape.group());
    case_ok && shape_ok && case.runs_in(shape)
}

/// A run's seed: the case seed mixed with the shape's name (FNV-1a).
fn run_seed(case: &Case, shape: &Shape) -> u64 {
    shape
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325 ^ case.seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Runs the set.
pub fn run(opts: &Options) -> Result<Benchmark, BenchError> {
    if !opts.gpuwatch.is_file() {
        return Err(BenchError::NoBinary(opts.gpuwatch.display().to_string()));
    }
    let started = Instant::now();
    let cases = cases::catalogue(opts.set, opts.seed)?;
    let work: Vec<(usize, Shape)> = cases
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            shapes(opts.set)
                .into_iter()
                .filter(|s| selected(opts, c, s))
                .map(move |s| (i, s))
        })
        .collect();
    if work.is_empty() {
        return Err(BenchError::NothingSelected {
            case: opts.case.clone(),
            shape: opts.shape.clone(),
        });
    }
    // Runs start in their own directories: a relative path would not name the binary there.
    let bin = std::fs::canonicalize(&opts.gpuwatch).unwrap_or_else(|_| opts.gpuwatch.clone());
    let gw = Gpuwatch {
        bin,
        timeout: opts.timeout,
    };
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<RunRecord>>> = Mutex::new(vec![None; work.len()]);
    let jobs = opts.jobs.clamp(1, work.len());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(ci, shape)) = work.get(k) else {
                        break;
                    };
                    let rec = one(&gw, opts, &cases[ci], shape);
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if opts.progress {
                        eprintln!("[{n}/{}] {}", work.len(), summary_line(&rec));
                    }
                    if let Ok(mut r) = results.lock() {
                        r[k] = Some(rec);
                    }
                }
            });
        }
    });
    let records = results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .flatten()
        .collect();
    Ok(Benchmark {
        set: opts.set,
        seed: opts.seed,
        jobs,
        records,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

fn summary_line(r: &RunRecord) -> String {
    let s = &r.score;
    let mut line = format!(
        "{} {}: {} TP, {} FN, {} FP ({:.1} s)",
        r.case,
        r.shape_name,
        s.matches.len(),
        s.missed.len(),
        s.false_positives.len(),
        r.wall_s
    );
    if let Some(e) = &r.error {
        line.push_str(&format!(" ERROR {e}"));
    }
    line
}

/// Runs one case in one shape and scores it.
fn one(gw: &Gpuwatch, opts: &Options, case: &Case, shape: Shape) -> RunRecord {
    let started = Instant::now();
    let observed = run_dir(opts, case, &shape).and_then(|(dir, _guard)| {
        let r = match shape {
            Shape::Nvml => gw.nvml(case, &dir),
            Shape::Csv { .. } => gw.csv(case, shape, &dir, run_seed(case, &shape)),
        };
        r.map_err(|e| e.to_string())
    });
    let (obs, error) = match observed {
        Ok(o) => (o, None),
        Err(e) => (Observed::default(), Some(e)),
    };
    let observable: Vec<bool> = case.labels.iter().map(|l| l.observable(&shape)).collect();
    let score = score::score(&case.labels, &observable, &obs.alerts);
    RunRecord {
        case: case.name.clone(),
        family: case.family,
        variant: case.variant,
        healthy: case.family.healthy(),
        shape_name: shape.to_string(),
        shape,
        params: case.params.clone(),
        labels: case
            .labels
            .iter()
            .zip(&observable)
            .map(|(l, &o)| LabelRecord {
                label: l.clone(),
                observable: o,
            })
            .collect(),
        leak: case.leak,
        alerts: obs.alerts,
        score,
        warnings: obs.warnings,
        samples: obs.samples,
        ticks: case.scenario.duration_ticks(),
        units: obs.units,
        error,
        wall_s: started.elapsed().as_secs_f64(),
    }
}

/// The run's directory, and the temporary directory that owns it (removed when dropped).
fn run_dir(
    opts: &Options,
    case: &Case,
    shape: &Shape,
) -> Result<(PathBuf, Option<tempfile::TempDir>), String> {
    match &opts.keep {
        Some(root) => {
            let dir = root.join(&case.name).join(shape.to_string());
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            Ok((dir, None))
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("gpuwatch-detection-")
                .tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            Ok((t.path().to_path_buf(), Some(t)))
        }
    }
}
