//! `gpuwatch import mlflow PATH`: an MLflow run's metrics — the GPU system metrics its
//! system-metrics monitor logs (`system/gpu_{i}_utilization_percentage`,
//! `_memory_usage_megabytes`, `_memory_usage_percentage`, `_power_usage_watts`, ...) and the
//! run's loss with its step — from a tracking database (`mlflow.db`, the SQLite backend:
//! table `metrics`) or a file-store run directory (`mlruns/<experiment>/<run>/metrics/...`,
//! one `timestamp value step` line per point).
//!
//! Invariants: read-only (the database is opened read-only, files only read); a NaN point
//! (`is_nan`) is unknown, never 0; MLflow's "megabytes" are 10^6 bytes (the monitor divides
//! NVML's bytes by 1e6); the run is named (`--run`) or the only one with metrics.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::tracker::{Parsed, nonneg, pct};
use crate::model::TsMs;

#[derive(Debug, thiserror::Error)]
pub enum MlflowError {
    #[error("{0}")]
    Source(String),
    #[error("{path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
}

/// One logged point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub key: String,
    pub ts_ms: TsMs,
    /// `None`: logged as NaN.
    pub value: Option<f64>,
    pub step: i64,
}

/// Which metrics carry the run's progress.
#[derive(Debug, Clone)]
pub struct Keys {
    /// The loss metric: its values are `training_loss`, its steps `training_step`.
    pub loss: String,
    /// A metric whose values are the step instead (default: the loss's step column).
    pub step: Option<String>,
}

/// The run's points and its id, from `path` (a tracking database or a run directory).
pub fn read(path: &Path, run: Option<&str>) -> Result<(String, Vec<Point>), MlflowError> {
    if path.is_dir() {
        let dir = run_dir(path, run)?;
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Ok((id, dir_points(&dir)?));
    }
    db_points(path, run)
}

fn sqlite_err(path: &Path) -> impl Fn(rusqlite::Error) -> MlflowError + '_ {
    move |source| MlflowError::Sqlite {
        path: path.display().to_string(),
        source,
    }
}

fn db_points(path: &Path, run: Option<&str>) -> Result<(String, Vec<Point>), MlflowError> {
    let e = sqlite_err(path);
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(&e)?;
    let has_metrics: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'metrics'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|_| {
            MlflowError::Source(format!(
                "{}: not an MLflow tracking database (not SQLite); give the mlflow.db of `sqlite:///mlflow.db` or a run directory of mlruns/",
                path.display()
            ))
        })?;
    if has_metrics.is_none() {
        return Err(MlflowError::Source(format!(
            "{}: not an MLflow tracking database (no `metrics` table)",
            path.display()
        )));
    }
    let runs: Vec<(String, Option<String>)> = {
        let mut stmt = conn
            .prepare(
                "SELECT r.run_uuid, r.name FROM runs r
                 WHERE EXISTS (SELECT 1 FROM metrics m WHERE m.run_uuid = r.run_uuid)
                 ORDER BY r.start_time",
            )
            .map_err(&e)?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(&e)?
            .collect::<Result<_, _>>()
            .map_err(&e)?
    };
    let id = match (run, runs.as_slice()) {
        (Some(r), _)
            if runs
                .iter()
                .any(|(id, name)| id == r || name.as_deref() == Some(r)) =>
        {
            runs.iter()
                .find(|(id, name)| id == r || name.as_deref() == Some(r))
                .map(|x| x.0.clone())
                .unwrap_or_default()
        }
        (Some(r), _) => {
            return Err(MlflowError::Source(format!(
                "{}: no run `{r}` with metrics; its runs: {}",
                path.display(),
                list(&runs)
            )));
        }
        (None, [one]) => one.0.clone(),
        (None, []) => {
            return Err(MlflowError::Source(format!(
                "{}: no run has metrics",
                path.display()
            )));
        }
        (None, _) => {
            return Err(MlflowError::Source(format!(
                "{} holds several runs: say which with --run ({})",
                path.display(),
                list(&runs)
            )));
        }
    };
    let mut stmt = conn
        .prepare(
            "SELECT key, value, timestamp, step, is_nan FROM metrics WHERE run_uuid = ?1
             ORDER BY timestamp, key",
        )
        .map_err(&e)?;
    let points = stmt
        .query_map(params![id], |r| {
            let nan: bool = r.get(4)?;
            Ok(Point {
                key: r.get(0)?,
                value: (!nan).then(|| r.get::<_, f64>(1)).transpose()?,
                ts_ms: r.get(2)?,
                step: r.get(3)?,
            })
        })
        .map_err(&e)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(&e)?;
    Ok((id, points))
}

fn list(runs: &[(String, Option<String>)]) -> String {
    runs.iter()
        .map(|(id, name)| match name {
            Some(n) => format!("{id} ({n})"),
            None => id.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The run directory: `path` itself when it has `metrics/`, else the directory named `run`
/// within two levels (`mlruns/<experiment>/<run>`).
fn run_dir(path: &Path, run: Option<&str>) -> Result<PathBuf, MlflowError> {
    if path.join("metrics").is_dir() {
        return Ok(path.to_path_buf());
    }
    let Some(run) = run else {
        return Err(MlflowError::Source(format!(
            "{}: not an MLflow run directory (no metrics/); give mlruns/<experiment>/<run_id>, or --run RUN_ID with mlruns/",
            path.display()
        )));
    };
    let children = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default()
    };
    for d in std::iter::once(path.to_path_buf()).chain(children(path)) {
        let c = d.join(run);
        if c.join("metrics").is_dir() {
            return Ok(c);
        }
    }
    Err(MlflowError::Source(format!(
        "{}: no run directory `{run}` (with metrics/) in it or its experiments",
        path.display()
    )))
}

fn dir_points(dir: &Path) -> Result<Vec<Point>, MlflowError> {
    let root = dir.join("metrics");
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d)
            .map_err(|e| MlflowError::Source(format!("{}: {e}", d.display())))?;
        for entry in rd.flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let key = f
            .strip_prefix(&root)
            .map(|k| k.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let text = std::fs::read_to_string(&f)
            .map_err(|e| MlflowError::Source(format!("{}: {e}", f.display())))?;
        for (n, line) in text.lines().enumerate() {
            let cells: Vec<&str> = line.split_whitespace().collect();
            let bad = || {
                MlflowError::Source(format!(
                    "{}:{}: expected `timestamp value [step]`, got `{line}`",
                    f.display(),
                    n + 1
                ))
            };
            if cells.is_empty() {
                continue;
            }
            let (Some(ts), Some(v)) = (cells.first(), cells.get(1)) else {
                return Err(bad());
            };
            let ts: TsMs = ts.parse().map_err(|_| bad())?;
            let v: f64 = v.parse().map_err(|_| bad())?;
            let step = cells
                .get(2)
                .map_or(Ok(0), |s| s.parse())
                .map_err(|_| bad())?;
            out.push(Point {
                key: key.clone(),
                ts_ms: ts,
                value: v.is_finite().then_some(v),
                step,
            });
        }
    }
    out.sort_by_key(|p| p.ts_ms);
    Ok(out)
}

/// `system/gpu_3_power_usage_watts` → (3, "power_usage_watts").
fn gpu_key(key: &str) -> Option<(u32, &str)> {
    let rest = key.strip_prefix("system/gpu_")?;
    let (i, metric) = rest.split_once('_')?;
    Some((i.parse().ok()?, metric))
}

/// Groups the run's points into per-GPU samples and training points.
pub fn parse(points: &[Point], keys: &Keys) -> Parsed {
    let mut p = Parsed::default();
    for pt in points {
        p.rows += 1;
        let Some(v) = pt.value else { continue };
        if let Some((i, metric)) = gpu_key(&pt.key) {
            let ts = pt.ts_ms;
            match metric {
                "utilization_percentage" => p.sample(i, ts).util_gpu_pct = pct(v),
                "memory_usage_megabytes" => {
                    p.sample(i, ts).mem_used_bytes = nonneg(v).map(|v| (v * 1e6).round() as u64)
                }
                "memory_usage_percentage" => p.memory_percent(i, ts, v),
                "power_usage_watts" => {
                    p.sample(i, ts).power_mw = nonneg(v).map(|v| (v * 1000.0).round() as u32)
                }
                "power_usage_percentage" => {}
                m => {
                    p.unstored.insert(format!("system/gpu_{{i}}_{m}"));
                }
            }
            continue;
        }
        if pt.key == keys.loss {
            p.training("training_loss", pt.ts_ms, v);
            if keys.step.is_none() {
                p.training("training_step", pt.ts_ms, pt.step as f64);
            }
        } else if keys.step.as_deref() == Some(pt.key.as_str()) {
            p.training("training_step", pt.ts_ms, v);
        } else {
            p.unstored.insert(pt.key.clone());
        }
    }
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(key: &str, ts: TsMs, v: f64, step: i64) -> Point {
        Point {
            key: key.into(),
            ts_ms: ts,
            value: v.is_finite().then_some(v),
            step,
        }
    }

    #[test]
    fn system_metrics_and_the_loss_with_its_step() {
        let points = vec![
            pt("system/gpu_0_utilization_percentage", 1000, 77.0, 0),
            pt("system/gpu_0_memory_usage_megabytes", 1000, 20971.52, 0),
            pt("system/gpu_0_memory_usage_percentage", 1000, 25.0, 0),
            pt("system/gpu_0_power_usage_watts", 1000, 432.0, 0),
            pt("system/gpu_0_power_usage_percentage", 1000, 61.7, 0),
            pt("system/cpu_utilization_percentage", 1000, 12.0, 0),
            pt("loss", 1500, 2.5, 7),
            pt("loss", 2500, f64::NAN, 8),
        ];
        let keys = Keys {
            loss: "loss".into(),
            step: None,
        };
        let p = parse(&points, &keys);
        let s = &p.samples[&0][&1000];
        assert_eq!(s.util_gpu_pct, Some(77));
        assert_eq!(s.mem_used_bytes, Some(20_971_520_000));
        assert_eq!(s.power_mw, Some(432_000));
        assert_eq!(s.temp_c, None, "not logged: unknown");
        assert_eq!(p.mem_total[&0], 83_886_080_000);
        let t: Vec<(&str, f64)> = p
            .training
            .iter()
            .map(|t| (t.name.as_str(), t.value))
            .collect();
        assert_eq!(t, [("training_loss", 2.5), ("training_step", 7.0)]);
        assert!(p.unstored.contains("system/cpu_utilization_percentage"));
    }

    #[test]
    fn a_run_directory_is_read_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("0").join("abc123");
        std::fs::create_dir_all(run.join("metrics/system")).unwrap();
        std::fs::write(
            run.join("metrics/system/gpu_1_utilization_percentage"),
            "1000 50.0 0\n2000 51.0 1\n",
        )
        .unwrap();
        std::fs::write(run.join("metrics/loss"), "1500 2.0 3\n").unwrap();
        let (id, points) = read(dir.path(), Some("abc123")).unwrap();
        assert_eq!(id, "abc123");
        assert_eq!(points.len(), 3);
        assert_eq!(points[1].key, "loss");
        let e = read(dir.path(), None).unwrap_err().to_string();
        assert!(e.contains("--run RUN_ID"), "{e}");
        std::fs::write(run.join("metrics/loss"), "yesterday 2.0\n").unwrap();
        let e = read(&run, None).unwrap_err().to_string();
        assert!(
            e.contains("loss:1: expected `timestamp value [step]`"),
            "{e}"
        );
    }
}
