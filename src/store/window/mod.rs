//! The one reader of "a GPU metric over a time window, for display": downsampled series
//! (the average, minimum and maximum per GPU per metric per step, for `gpuwatch history`,
//! `gpuwatch report` and the email charts) and window aggregates (samples, samples without a
//! value, min, avg and max of one GPU over a range, for `gpuwatch incident`), computed in SQL
//! from the raw `samples` (1 s) or, for series, from the 1-minute `rollups_1m`. The metric
//! table (names, units, SQL per metric, aliases) is `metrics.rs`.
//!
//! Invariants:
//! - Read only; one range scan of a time-first primary key per call, grouped in SQL (a week
//!   of minutes never travels through Rust as raw rows).
//! - Buckets are aligned to multiples of the step since the epoch, so the raw and the rollup
//!   paths cut the same buckets and agree (within float rounding) where both have data: the
//!   raw path reads values of ok rows only, the rollups aggregate every row, and the writer
//!   stores missed and lost rows without values.
//! - A value that is unknown stays `None`: a bucket without a single non-NULL reading (a gap,
//!   a metric the GPU does not report, a metric the rollups do not hold) is `None`, never 0.
//! - Values are in the rule language's units (%, MiB, °C, W, MHz, MB/s, 0/1 flags), the
//!   numbers a rule compares (see `metrics.rs`).

use rusqlite::{Connection, params};

use super::StoreError;
use crate::model::TsMs;

mod metrics;
#[cfg(test)]
mod tests;

pub use metrics::{SampleMetric, resolve_metrics, window_metric};

/// Ranges longer than this (with a step of whole minutes) are read from the rollups.
pub const RAW_MAX_RANGE_MS: i64 = 6 * 3600 * 1000;
const MINUTE: i64 = 60_000;

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
    /// The readings behind the values: on the raw path the samples with a value; on the
    /// rollup path the ok samples of the minutes with a value (the rollups do not count
    /// NULLs per metric). 0 for an empty bucket.
    pub n: u64,
}

/// One metric of one GPU over the range, one point per bucket (empty buckets included).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub gpu_id: i64,
    pub metric: SampleMetric,
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
/// the minutes that start in the range (a minute is in the bucket of its start); a metric
/// without a rollup column ([`SampleMetric::has_rollup`]) has no data there, not 0.
pub fn series(
    conn: &Connection,
    gpu_ids: &[i64],
    metrics: &[SampleMetric],
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
                        n: 0,
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
        cols.push_str(&columns(m, source, per_row));
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
            p.avg = r.get(2 + 4 * k)?;
            p.min = r.get(3 + 4 * k)?;
            p.max = r.get(4 + 4 * k)?;
            p.n = r.get::<_, Option<i64>>(5 + 4 * k)?.unwrap_or(0).max(0) as u64;
        }
    }
    Ok(out)
}

/// The `, avg, min, max, n` select columns of one metric of [`series`].
fn columns(m: &SampleMetric, source: Source, per_row: bool) -> String {
    let s = m.scale;
    match (source, m.has_rollup().then_some(m.name)) {
        (Source::Raw, _) => format!(
            ", avg({e}) / {s:?}, min({e}) / {s:?}, max({e}) / {s:?}, count({e})",
            e = m.value_sql()
        ),
        // Not in the rollups: no data, not 0.
        (Source::Rollups, None) => ", NULL, NULL, NULL, 0".into(),
        (Source::Rollups, Some(c)) if per_row => format!(
            ", {c}_avg / {s:?}, {c}_min / {s:?}, {c}_max / {s:?}, \
             CASE WHEN {c}_avg IS NOT NULL THEN n - n_missed - n_lost ELSE 0 END"
        ),
        (Source::Rollups, Some(c)) => format!(
            ", sum({c}_avg * (n - n_missed - n_lost)) \
             / sum(CASE WHEN {c}_avg IS NOT NULL THEN n - n_missed - n_lost END) / {s:?}, \
             min({c}_min) / {s:?}, max({c}_max) / {s:?}, \
             sum(CASE WHEN {c}_avg IS NOT NULL THEN n - n_missed - n_lost ELSE 0 END)"
        ),
    }
}

/// One metric of one GPU over a range of raw samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aggregate {
    pub metric: SampleMetric,
    /// Sample rows of the GPU in the range (any status).
    pub samples: u64,
    /// Of those, the rows without a value (NULL, or not an ok row).
    pub missing: u64,
    pub min: Option<f64>,
    pub avg: Option<f64>,
    pub max: Option<f64>,
}

/// Per metric (in the order of `metrics`), the samples, the samples without a value, and the
/// min, avg and max of the values of GPU `gpu_id` over `from_ms <= ts_ms < to_ms`, from the
/// raw samples in one query. A range without samples gives 0 samples and `None` values.
pub fn aggregate(
    conn: &Connection,
    gpu_id: i64,
    metrics: &[SampleMetric],
    from_ms: TsMs,
    to_ms: TsMs,
) -> Result<Vec<Aggregate>, StoreError> {
    let mut cols = String::new();
    for m in metrics {
        cols.push_str(&format!(
            ", count({e}), min({e}) / {s:?}, avg({e}) / {s:?}, max({e}) / {s:?}",
            e = m.value_sql(),
            s = m.scale
        ));
    }
    let sql = format!(
        "SELECT count(*){cols} FROM samples WHERE ts_ms >= ?2 AND ts_ms < ?3 AND gpu_id = ?1"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params![gpu_id, from_ms, to_ms])?;
    let Some(r) = rows.next()? else {
        return Ok(Vec::new());
    };
    let count = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
    let samples = count(0)?;
    let mut out = Vec::with_capacity(metrics.len());
    for (k, &metric) in metrics.iter().enumerate() {
        let c = 1 + 4 * k;
        out.push(Aggregate {
            metric,
            samples,
            missing: samples.saturating_sub(count(c)?),
            min: r.get(c + 1)?,
            avg: r.get(c + 2)?,
            max: r.get(c + 3)?,
        });
    }
    Ok(out)
}
