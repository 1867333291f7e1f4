//! `gpuwatch import wandb FILE`: a Weights & Biases run's history — the GPU system metrics
//! the SDK logs every 15 s (`system.gpu.{i}.gpu`, `.memoryAllocatedBytes`, `.temp`,
//! `.powerWatts`, ...) and the run's own `_step` and loss — exported as CSV (the UI's export,
//! `run.history(...).to_csv()`), JSON lines (`run.scan_history()`, one object per row) or a
//! JSON array, into GPU samples and training series (docs/IMPORT.md has the mapping).
//!
//! Invariants:
//! - A key absent from a row, an empty cell, `NaN` or a non-number is unknown, never 0; a row
//!   without `_timestamp` cannot be placed in time and is counted, not imported.
//! - W&B knows GPUs by index only: GPU `i` is the stored GPU of the host with index `i`, else
//!   the stand-in UUID `index-i` (as `import nvidia-smi` names GPUs without a UUID).
//! - `memoryAllocated` is a percentage of the GPU's memory: memory used is read from
//!   `memoryAllocatedBytes`; with both, the total follows; a percentage alone leaves the
//!   memory used unknown.
//! - `system.gpu.process.{i}.*` repeats the metrics of the GPUs the run's process used: not
//!   read twice. Keys gpuwatch does not store are listed once.
//! - Everything is parsed before anything is written; the publish is one transaction.

use super::tracker::{Parsed, nonneg, pct};
use crate::model::{GpuSample, TsMs};

/// How a W&B GPU metric lands in a sample.
type Set = fn(&mut GpuSample, f64);

/// The GPU metrics (after `gpu.{i}.`) gpuwatch stores.
const GPU_METRICS: &[(&str, Set)] = &[
    ("gpu", |s, v| s.util_gpu_pct = pct(v)),
    ("memory", |s, v| s.util_mem_pct = pct(v)),
    ("memoryAllocatedBytes", |s, v| {
        s.mem_used_bytes = nonneg(v).map(|v| v.round() as u64)
    }),
    ("temp", |s, v| {
        s.temp_c = nonneg(v).map(|v| v.round() as u32)
    }),
    ("powerWatts", |s, v| {
        s.power_mw = nonneg(v).map(|v| (v * 1000.0).round() as u32)
    }),
    ("enforcedPowerLimitWatts", |s, v| {
        s.power_limit_mw = nonneg(v).map(|v| (v * 1000.0).round() as u32)
    }),
    ("smClock", |s, v| {
        s.clock_sm_mhz = nonneg(v).map(|v| v.round() as u32)
    }),
    ("memoryClock", |s, v| {
        s.clock_mem_mhz = nonneg(v).map(|v| v.round() as u32)
    }),
    ("correctedMemoryErrors", |s, v| {
        s.ecc_corrected = nonneg(v).map(|v| v.round() as u64)
    }),
    ("uncorrectedMemoryErrors", |s, v| {
        s.ecc_uncorrected = nonneg(v).map(|v| v.round() as u64)
    }),
];

/// Read but not stored as such: the percentage of memory allocated (gives the total beside
/// the bytes) and the power as a percentage of the limit.
const DERIVED: &[&str] = &["memoryAllocated", "powerPercent"];

#[derive(Debug, thiserror::Error)]
pub enum WandbError {
    #[error("{0}")]
    Format(String),
}

/// One history row: its time and its numeric values by key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub ts_ms: Option<TsMs>,
    pub values: Vec<(String, f64)>,
}

/// Which keys carry the run's progress.
#[derive(Debug, Clone)]
pub struct Keys {
    pub step: String,
    pub loss: String,
}

/// Parses the rows of a W&B export: a JSON array, JSON lines, or CSV with a header.
pub fn rows(text: &str, name: &str) -> Result<Vec<Row>, WandbError> {
    let head = text.trim_start();
    if head.starts_with('[') {
        let v: serde_json::Value = serde_json::from_str(text)
            .or_else(|_| serde_json::from_str(&lenient(text)))
            .map_err(|e| {
                WandbError::Format(format!(
                    "{name}:{}:{}: not a JSON array of history rows: {e}",
                    e.line(),
                    e.column()
                ))
            })?;
        let arr = v.as_array().map(Vec::as_slice).unwrap_or_default();
        return Ok(arr.iter().map(json_row).collect());
    }
    if head.starts_with('{') {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line)
                .or_else(|_| serde_json::from_str(&lenient(line)))
                .map_err(|e| {
                    WandbError::Format(format!(
                        "{name}:{}:{}: not a JSON object (one history row per line): {e}",
                        i + 1,
                        e.column()
                    ))
                })?;
            out.push(json_row(&v));
        }
        return Ok(out);
    }
    csv_rows(text, name)
}

/// Python's `json.dumps` writes NaN and ±Infinity bare, which JSON has not: read as null
/// (unknown).
fn lenient(text: &str) -> String {
    static BARE: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"(?P<pre>[:\[,]\s*)-?(?:NaN|Infinity)"#).ok()
    });
    match BARE.as_ref() {
        Some(re) => re.replace_all(text, "${pre}null").into_owned(),
        None => text.to_string(),
    }
}

fn json_row(v: &serde_json::Value) -> Row {
    let mut r = Row::default();
    if let Some(o) = v.as_object() {
        for (k, v) in o {
            if let Some(x) = v.as_f64().filter(|x| x.is_finite()) {
                if k == "_timestamp" {
                    r.ts_ms = Some((x * 1000.0).round() as TsMs);
                } else {
                    r.values.push((k.clone(), x));
                }
            }
        }
    }
    r
}

fn csv_rows(text: &str, name: &str) -> Result<Vec<Row>, WandbError> {
    let mut rd = csv::ReaderBuilder::new()
        .flexible(false)
        .from_reader(text.as_bytes());
    let header: Vec<String> = rd
        .headers()
        .map_err(|e| WandbError::Format(format!("{name}:1: not CSV: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    let Some(ts_col) = header.iter().position(|h| h == "_timestamp") else {
        return Err(WandbError::Format(format!(
            "{name}:1: no `_timestamp` column: not a W&B history export (its columns: {}); export the run's history with `_timestamp` (run.history(...).to_csv()), or use `import csv --map`",
            header
                .iter()
                .take(8)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let mut out = Vec::new();
    for (i, rec) in rd.records().enumerate() {
        let rec = rec.map_err(|e| WandbError::Format(format!("{name}:{}: {e}", i + 2)))?;
        let mut r = Row::default();
        for (c, cell) in rec.iter().enumerate() {
            let cell = cell.trim();
            let Ok(x) = cell.parse::<f64>() else { continue };
            if !x.is_finite() {
                continue;
            }
            if c == ts_col {
                r.ts_ms = Some((x * 1000.0).round() as TsMs);
            } else if let Some(h) = header.get(c).filter(|h| !h.is_empty()) {
                r.values.push((h.clone(), x));
            }
        }
        out.push(r);
    }
    Ok(out)
}

/// `gpu.3.powerWatts` (with or without `system.`) → (3, "powerWatts"); `None` for other keys
/// and for the `gpu.process.{i}` copies.
fn gpu_key(key: &str) -> Option<(u32, &str)> {
    let k = key.strip_prefix("system.").unwrap_or(key);
    let rest = k.strip_prefix("gpu.")?;
    let (i, metric) = rest.split_once('.')?;
    Some((i.parse().ok()?, metric))
}

/// Groups rows into per-GPU samples and training points.
pub fn parse(rows: &[Row], keys: &Keys) -> Parsed {
    let mut p = Parsed::default();
    for r in rows {
        p.rows += 1;
        let Some(ts) = r.ts_ms else {
            p.rows_without_time += 1;
            continue;
        };
        for (k, v) in &r.values {
            if let Some((i, metric)) = gpu_key(k) {
                if let Some(set) = GPU_METRICS.iter().find(|(m, _)| *m == metric).map(|x| x.1) {
                    set(p.sample(i, ts), *v);
                } else if metric == "memoryAllocated" {
                    p.memory_percent(i, ts, *v);
                } else if !DERIVED.contains(&metric) {
                    p.unstored.insert(format!("gpu.{{i}}.{metric}"));
                }
                continue;
            }
            if k.starts_with("system.gpu.process.") || k.starts_with("gpu.process.") {
                continue;
            }
            if *k == keys.step {
                p.training("training_step", ts, *v);
            } else if *k == keys.loss {
                p.training("training_loss", ts, *v);
            } else if !matches!(k.as_str(), "_runtime" | "_step" | "_wandb.runtime") {
                p.unstored.insert(k.clone());
            }
        }
    }
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys {
            step: "_step".into(),
            loss: "loss".into(),
        }
    }

    #[test]
    fn csv_json_lines_and_arrays_read_alike() {
        let csv = ",_runtime,_timestamp,system.gpu.0.gpu,system.gpu.0.memoryAllocatedBytes,system.gpu.0.memoryAllocated,system.gpu.1.gpu,system.cpu\n\
                   0,15.2,1764979215.5,97,42949672960,50,,3.5\n\
                   1,30.2,1764979230.5,NaN,42949672960,50,0,3.1\n";
        let jl = "{\"_timestamp\": 1764979215.5, \"system.gpu.0.gpu\": 97, \"system.gpu.0.temp\": NaN, \"system.gpu.0.memoryAllocatedBytes\": 42949672960, \"system.gpu.0.memoryAllocated\": 50, \"system.cpu\": 3.5}\n\
                  {\"_timestamp\": 1764979230.5, \"system.gpu.0.gpu\": \"NaN\", \"system.gpu.0.memoryAllocatedBytes\": 42949672960, \"system.gpu.0.memoryAllocated\": 50, \"system.gpu.1.gpu\": 0}\n";
        let arr = format!("[{}]", jl.trim().replace('\n', ","));
        for (name, text) in [
            ("a.csv", csv.to_string()),
            ("a.jsonl", jl.to_string()),
            ("a.json", arr),
        ] {
            let p = parse(&rows(&text, name).unwrap(), &keys());
            assert_eq!(p.rows, 2, "{name}");
            let g0 = &p.samples[&0];
            assert_eq!(g0.len(), 2, "{name}");
            assert_eq!(g0[&1_764_979_215_500].util_gpu_pct, Some(97));
            assert_eq!(
                g0[&1_764_979_230_500].util_gpu_pct, None,
                "NaN is unknown: {name}"
            );
            assert_eq!(g0[&1_764_979_230_500].mem_used_bytes, Some(40 << 30));
            assert_eq!(p.mem_total[&0], 80 << 30);
            assert_eq!(p.samples[&1].len(), 1, "{name}");
            assert_eq!(p.samples[&1][&1_764_979_230_500].util_gpu_pct, Some(0));
            assert!(
                p.unstored.contains("system.cpu"),
                "{name}: {:?}",
                p.unstored
            );
        }
    }

    #[test]
    fn steps_and_loss_and_what_cannot_be_placed() {
        let jl = "{\"_step\": 0, \"_timestamp\": 1764979200.0, \"loss\": 2.5, \"lr\": 0.001}\n\
                  {\"_step\": 1, \"_timestamp\": 1764979210.0, \"loss\": 2.4}\n\
                  {\"_step\": 2, \"loss\": 2.3}\n";
        let p = parse(&rows(jl, "r.jsonl").unwrap(), &keys());
        assert_eq!(p.rows_without_time, 1);
        let names: Vec<(&str, f64)> = p
            .training
            .iter()
            .map(|t| (t.name.as_str(), t.value))
            .collect();
        assert_eq!(
            names,
            [
                ("training_loss", 2.5),
                ("training_loss", 2.4),
                ("training_step", 0.0),
                ("training_step", 1.0)
            ]
        );
        assert!(p.unstored.contains("lr"));
        assert!(p.samples.is_empty());
    }

    #[test]
    fn another_format_says_what_is_expected() {
        let e = rows("ts,util\n1,2\n", "x.csv").unwrap_err().to_string();
        assert!(
            e.contains("x.csv:1: no `_timestamp` column") && e.contains("ts, util"),
            "{e}"
        );
        let e = rows("{\"a\": 1}\nnot json\n", "x.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.jsonl:2:"), "{e}");
    }
}
