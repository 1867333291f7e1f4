//! Downsampled GPU time series for `gpuwatch history` and `gpuwatch report`: the average,
//! minimum and maximum of each metric per GPU per step, aggregated in SQL either from the raw
//! `samples` (1 s) or from the 1-minute `rollups_1m`.
//!
//! Invariants:
//! - Read only; one range scan of a time-first primary key per call, grouped in SQL (a week
//!   of minutes never travels through Rust as raw rows).
//! - Buckets are aligned to multiples of the step since the epoch, so the raw and the rollup
//!   paths cut the same buckets and agree (within float rounding) where both have data.
//! - A value that is unknown stays `None`: a bucket without a single non-NULL reading (a gap,
//!   an unsupported metric) is `None`, never 0.
//! - Values are in the rule language's units (%, MiB, °C, W, MHz, MB/s), as in
//!   `store::series`.

use rusqlite::{Connection, params};

use super::StoreError;
use crate::model::TsMs;

/// Ranges longer than this (with a step of whole minutes) are read from the rollups.
pub const RAW_MAX_RANGE_MS: i64 = 6 * 3600 * 1000;
const MINUTE: i64 = 60_000;

/// A metric that both the raw samples and the rollups hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowMetric {
    /// The rule language's name (`util_gpu`, `mem_used`, ...).
    pub name: &'static str,
    pub unit: &'static str,
    /// Human title.
    pub title: &'static str,
    /// The `samples` column and the `rollups_1m` column prefix.
    raw_col: &'static str,
    rollup_col: &'static str,
    /// Divisor from the stored unit to `unit`.
    scale: f64,
}

const fn m(
    name: &'static str,
    unit: &'static str,
    title: &'static str,
    raw_col: &'static str,
    rollup_col: &'static str,
    scale: f64,
) -> WindowMetric {
    WindowMetric {
        name,
        unit,
        title,
        raw_col,
        rollup_col,
        scale,
    }
}

/// Every metric [`series`] can read, in display order.
pub const WINDOW_METRICS: &[WindowMetric] = &[
    m(
        "util_gpu",
        "%",
        "GPU utilisation",
        "util_gpu_pct",
        "util_gpu",
        1.0,
    ),
    m(
        "util_mem",
        "%",
        "Memory controller utilisation",
        "util_mem_pct",
        "util_mem",
        1.0,
    ),
    m(
        "mem_used",
        "MiB",
        "Memory used",
        "mem_used_bytes",
        "mem_used",
        1_048_576.0,
    ),
    m("temp", "°C", "Temperature", "temp_c", "temp", 1.0),
    m("power", "W", "Power", "power_mw", "power", 1000.0),
    m(
        "clock_sm",
        "MHz",
        "SM clock",
        "clock_sm_mhz",
        "clock_sm",
        1.0,
    ),
    m(
        "clock_mem",
        "MHz",
        "Memory clock",
        "clock_mem_mhz",
        "clock_mem",
        1.0,
    ),
    m("fan", "%", "Fan", "fan_pct", "fan", 1.0),
    m(
        "pcie_tx",
        "MB/s",
        "PCIe TX",
        "pcie_tx_kbs",
        "pcie_tx",
        1024.0,
    ),
    m(
        "pcie_rx",
        "MB/s",
        "PCIe RX",
        "pcie_rx_kbs",
        "pcie_rx",
        1024.0,
    ),
];

/// Short names accepted besides the rule language's; one alias may stand for several metrics.
pub const WINDOW_ALIASES: &[(&str, &[&str])] = &[
    ("util", &["util_gpu"]),
    ("utilization", &["util_gpu"]),
    ("mem", &["mem_used"]),
    ("memory", &["mem_used"]),
    ("memory_used", &["mem_used"]),
    ("temperature", &["temp"]),
    ("power_draw", &["power"]),
    ("clocks", &["clock_sm", "clock_mem"]),
    ("pcie", &["pcie_tx", "pcie_rx"]),
];

/// The metric named `name` (rule-language name only).
pub fn window_metric(name: &str) -> Option<WindowMetric> {
    WINDOW_METRICS.iter().find(|m| m.name == name).copied()
}

/// Resolves names and aliases (`util`, `clocks`) into metrics, without duplicates; the error
/// names the first unknown name and lists the valid ones.
pub fn resolve_metrics<S: AsRef<str>>(names: &[S]) -> Result<Vec<WindowMetric>, String> {
    let mut out: Vec<WindowMetric> = Vec::new();
    for n in names {
        let n = n.as_ref().trim();
        let found: Vec<WindowMetric> = match WINDOW_ALIASES.iter().find(|(a, _)| *a == n) {
            Some((_, targets)) => targets.iter().filter_map(|t| window_metric(t)).collect(),
            None => window_metric(n).into_iter().collect(),
        };
        if found.is_empty() {
            let names: Vec<&str> = WINDOW_METRICS.iter().map(|m| m.name).collect();
            let aliases: Vec<&str> = WINDOW_ALIASES.iter().map(|(a, _)| *a).collect();
            return Err(format!(
                "unknown metric {n:?}: valid metrics are {} (aliases: {})",
                names.join(", "),
                aliases.join(", ")
            ));
        }
        for f in found {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    Ok(out)
}

/// Where the values were aggregated from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `samples`, one row per GPU per tick.
    Raw,
    /// `rollups_1m`, one row per GPU per minute.
    Rollups,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Rollups => "rollups",
        }
    }

    /// Raw samples for short ranges and for steps that are not whole minutes; rollups else.
    pub fn auto(from_ms: TsMs, to_ms: TsMs, step_ms: i64) -> Self {
        if step_ms < MINUTE || step_ms % MINUTE != 0 || to_ms - from_ms <= RAW_MAX_RANGE_MS {
            Self::Raw
        } else {
            Self::Rollups
        }
    }

    /// [`Source::auto`], except that a range starting before the oldest raw sample still
    /// stored for these GPUs (raw samples expire after `retention`, rollups live longer) is
    /// read from the rollups whenever the step is whole minutes.
    pub fn choose(
        conn: &Connection,
        gpu_ids: &[i64],
        from_ms: TsMs,
        to_ms: TsMs,
        step_ms: i64,
    ) -> Result<Self, StoreError> {
        let auto = Self::auto(from_ms, to_ms, step_ms);
        if auto == Self::Rollups || step_ms < MINUTE || step_ms % MINUTE != 0 || gpu_ids.is_empty()
        {
            return Ok(auto);
        }
        let ids = gpu_ids
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let oldest = |table: &str| -> Result<Option<TsMs>, StoreError> {
            Ok(conn.query_row(
                &format!("SELECT min(ts_ms) FROM {table} WHERE gpu_id IN ({ids})"),
                [],
                |r| r.get(0),
            )?)
        };
        let raw = oldest("samples")?;
        // Rollups older than the oldest raw minute mean raw samples were deleted there.
        let expired = match (raw, oldest("rollups_1m")?) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(r), Some(m)) => m < r.div_euclid(MINUTE) * MINUTE,
        };
        Ok(if expired && raw.is_none_or(|r| from_ms < r) {
            Self::Rollups
        } else {
            Self::Raw
        })
    }
}

/// One step of one metric of one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The bucket start (a multiple of the step).
    pub ts_ms: TsMs,
    pub avg: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// One metric of one GPU over the range, one point per bucket (empty buckets included).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub gpu_id: i64,
    pub metric: WindowMetric,
    pub points: Vec<Point>,
}

/// The first bucket start and the number of buckets covering `[from_ms, to_ms)`.
pub fn buckets(from_ms: TsMs, to_ms: TsMs, step_ms: i64) -> (TsMs, usize) {
    let step = step_ms.max(1);
    let first = from_ms.div_euclid(step) * step;
    let last = (to_ms - 1).div_euclid(step) * step;
    (first, ((last - first) / step + 1).max(0) as usize)
}

/// Per GPU (in the order of `gpu_ids`) and per metric (in the order of `metrics`), the
/// average, min and max per step over `from_ms <= ts_ms < to_ms`. The rollup path reads
/// the minutes that start in the range (a minute is in the bucket of its start).
pub fn series(
    conn: &Connection,
    gpu_ids: &[i64],
    metrics: &[WindowMetric],
    from_ms: TsMs,
    to_ms: TsMs,
    step_ms: i64,
    source: Source,
) -> Result<Vec<Series>, StoreError> {
    let step = step_ms.max(1);
    let (first, count) = buckets(from_ms, to_ms, step);
    let mut out: Vec<Series> = gpu_ids
        .iter()
        .flat_map(|&gpu_id| {
            metrics.iter().map(move |&metric| Series {
                gpu_id,
                metric,
                points: (0..count)
                    .map(|i| Point {
                        ts_ms: first + i as i64 * step,
                        avg: None,
                        min: None,
                        max: None,
                    })
                    .collect(),
            })
        })
        .collect();
    if gpu_ids.is_empty() || metrics.is_empty() || count == 0 {
        return Ok(out);
    }
    let ids: Vec<String> = gpu_ids.iter().map(i64::to_string).collect();
    // Rollups at a one-minute step: each row is its own bucket, so no GROUP BY (and no sort
    // of a week of rows: 15x faster).
    let per_row = source == Source::Rollups && step == MINUTE;
    let mut cols = String::new();
    for m in metrics {
        let s = m.scale;
        match source {
            Source::Rollups if per_row => cols.push_str(&format!(
                ", {c}_avg / {s:?}, {c}_min / {s:?}, {c}_max / {s:?}",
                c = m.rollup_col
            )),
            Source::Raw => cols.push_str(&format!(
                ", avg({c}) / {s:?}, min({c}) / {s:?}, max({c}) / {s:?}",
                c = m.raw_col
            )),
            Source::Rollups => cols.push_str(&format!(
                ", sum({c}_avg * (n - n_missed - n_lost)) \
                 / sum(CASE WHEN {c}_avg IS NOT NULL THEN n - n_missed - n_lost END) / {s:?}, \
                 min({c}_min) / {s:?}, max({c}_max) / {s:?}",
                c = m.rollup_col
            )),
        }
    }
    let (table, lo) = match source {
        Source::Raw => ("samples", from_ms),
        Source::Rollups => ("rollups_1m", from_ms.div_euclid(MINUTE) * MINUTE),
    };
    let sql = format!(
        "SELECT gpu_id, (ts_ms - ?1) / ?3 AS b{cols} FROM {table}
         WHERE ts_ms >= ?4 AND ts_ms < ?2 AND gpu_id IN ({}){}",
        ids.join(","),
        if per_row { "" } else { " GROUP BY gpu_id, b" }
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query(params![first, to_ms, step, lo])?;
    let width = metrics.len();
    while let Some(r) = rows.next()? {
        let gpu_id: i64 = r.get(0)?;
        let b: i64 = r.get(1)?;
        let Some(g) = gpu_ids.iter().position(|&id| id == gpu_id) else {
            continue;
        };
        let Ok(b) = usize::try_from(b) else { continue };
        if b >= count {
            continue;
        }
        for k in 0..width {
            let p = &mut out[g * width + k].points[b];
            p.avg = r.get(2 + 3 * k)?;
            p.min = r.get(3 + 3 * k)?;
            p.max = r.get(4 + 3 * k)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_raw_samples_are_read_from_the_rollups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let mut store = crate::store::open(&path, &crate::store::StoreConfig::new("h")).unwrap();
        let t0 = 1_750_000_020_000 / MINUTE * MINUTE;
        let mut ticks = crate::store::synth::TickGen::new(1, 0);
        let batches: Vec<_> = (0..600).map(|i| ticks.tick(t0 + i * 1000)).collect();
        store.write_ticks(&batches).unwrap();
        store.maintain_fully().unwrap();
        let conn = store.conn();
        let ids: Vec<i64> = vec![
            conn.query_row("SELECT id FROM gpus", [], |r| r.get(0))
                .unwrap(),
        ];
        let (from, to) = (t0, t0 + 600_000);
        assert_eq!(
            Source::choose(conn, &ids, from, to, MINUTE).unwrap(),
            Source::Raw
        );
        // Retention deleted the first five minutes of raw samples; their rollups remain.
        conn.execute("DELETE FROM samples WHERE ts_ms < ?1", [t0 + 300_000])
            .unwrap();
        assert_eq!(
            Source::choose(conn, &ids, from, to, MINUTE).unwrap(),
            Source::Rollups
        );
        assert_eq!(
            Source::choose(conn, &ids, t0 + 360_000, to, MINUTE).unwrap(),
            Source::Raw,
            "a range within the raw samples stays raw"
        );
        assert_eq!(
            Source::choose(conn, &ids, from, to, 1000).unwrap(),
            Source::Raw
        );
    }

    #[test]
    fn names_aliases_and_errors() {
        let names = |l: &[&str]| -> Vec<&str> {
            resolve_metrics(l).unwrap().iter().map(|m| m.name).collect()
        };
        assert_eq!(
            names(&["util", "util_gpu", "clocks"]),
            ["util_gpu", "clock_sm", "clock_mem"]
        );
        assert_eq!(
            names(&["mem", "temp", "power"]),
            ["mem_used", "temp", "power"]
        );
        let e = resolve_metrics(&["util", "xid"]).unwrap_err();
        assert!(
            e.starts_with("unknown metric \"xid\": valid metrics are util_gpu,"),
            "{e}"
        );
    }

    #[test]
    fn buckets_are_aligned_to_the_step() {
        assert_eq!(buckets(90_000, 300_000, 60_000), (60_000, 4));
        assert_eq!(buckets(0, 60_000, 60_000), (0, 1));
        assert_eq!(Source::auto(0, 3_600_000, 60_000), Source::Raw);
        assert_eq!(Source::auto(0, 86_400_000, 30_000), Source::Raw);
        assert_eq!(Source::auto(0, 86_400_000, 90_000), Source::Raw);
        assert_eq!(Source::auto(0, 86_400_000, 120_000), Source::Rollups);
    }
}
