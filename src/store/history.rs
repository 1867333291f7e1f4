//! Read-side queries for the rule evaluator and `replay`: everything stored in a time slice
//! `(after_ms, upto_ms]` (raw samples with every column, process samples, events, training
//! points), in time order, keyed by the store's row ids. The evaluator's reader only: series
//! and aggregates for display are `store::window`'s.
//!
//! Invariants: only reads; each query is one range scan of a time-first primary key (or the
//! events' time index), so feeding a day of history slice by slice costs one pass.

use rusqlite::{Connection, params};

use super::StoreError;
use super::read::{
    PLACEMENT_COLUMNS, holder_from_row, placement_from_row, sample_from_row, u64_col,
};
use super::rows::sample_metric_columns;
use crate::model::{GpuHolder, GpuInventory, GpuSample, Placement, TsMs};

/// A GPU as the evaluator knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRow {
    pub gpu_id: i64,
    pub host: String,
    pub inventory: GpuInventory,
}

/// One process sample with the process's identity.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSampleRow {
    pub ts_ms: TsMs,
    pub gpu_id: i64,
    pub process_id: i64,
    pub pid: u32,
    pub name: Option<String>,
    pub user: Option<String>,
    pub cmdline: Option<String>,
    pub used_mem_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct XidRunRow {
    /// The `events` row.
    pub id: i64,
    /// The first event's time (a run of one XID: `store::events`).
    pub ts_ms: TsMs,
    pub gpu_id: Option<i64>,
    pub code: Option<i64>,
    /// Events in the run (1 for a single event).
    pub count: i64,
    /// The last event's time (`ts_ms` for a single event).
    pub last_ms: TsMs,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrainingSeriesRow {
    pub series_id: i64,
    pub host: String,
    pub name: String,
    pub labels: Vec<(String, String)>,
}

/// Every GPU of every host (or of `host`).
pub fn gpus(conn: &Connection, host: Option<&str>) -> Result<Vec<GpuRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT g.id, h.name, g.gpu_index, g.uuid, g.name, g.memory_total_bytes, g.power_limit_mw,
           g.power_limit_min_mw, g.power_limit_max_mw, g.temp_slowdown_c, g.temp_shutdown_c,
           g.temp_gpu_max_c, g.pcie_max_gen, g.pcie_max_width, g.gpu_instance_id,
           g.gpu_instance_profile, g.parent_uuid
         FROM gpus g JOIN hosts h ON h.id = g.host_id
         WHERE ?1 IS NULL OR h.name = ?1
         ORDER BY h.name, g.gpu_index, g.gpu_instance_id IS NOT NULL, g.gpu_instance_id",
    )?;
    let rows = stmt.query_map(params![host], |r| {
        Ok(GpuRow {
            gpu_id: r.get(0)?,
            host: r.get(1)?,
            inventory: GpuInventory {
                index: r.get::<_, Option<u32>>(2)?.unwrap_or_default(),
                uuid: r.get(3)?,
                name: r.get(4)?,
                memory_total_bytes: u64_col(r, 5)?,
                power_limit_mw: r.get(6)?,
                power_limit_min_mw: r.get(7)?,
                power_limit_max_mw: r.get(8)?,
                temp_slowdown_c: r.get(9)?,
                temp_shutdown_c: r.get(10)?,
                temp_gpu_max_c: r.get(11)?,
                pcie_max_gen: r.get(12)?,
                pcie_max_width: r.get(13)?,
                mig: match (
                    r.get::<_, Option<u32>>(14)?,
                    r.get::<_, Option<String>>(15)?,
                ) {
                    (Some(gpu_instance_id), Some(profile)) => Some(crate::model::MigInstance {
                        gpu_instance_id,
                        profile,
                        parent_uuid: r.get::<_, Option<String>>(16)?.unwrap_or_default(),
                    }),
                    _ => None,
                },
                ..GpuInventory::default()
            },
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Samples with `after_ms < ts_ms <= upto_ms`, by time then GPU; `uuid` is left empty (use
/// the gpu id).
pub fn samples(
    conn: &Connection,
    after_ms: TsMs,
    upto_ms: TsMs,
) -> Result<Vec<(i64, GpuSample)>, StoreError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ts_ms, ",
        sample_metric_columns!(),
        ", gpu_id FROM samples WHERE ts_ms > ?1 AND ts_ms <= ?2 ORDER BY ts_ms, gpu_id"
    ))?;
    let rows = stmt.query_map(params![after_ms, upto_ms], |r| {
        Ok((
            r.get::<_, i64>(super::rows::SAMPLE_ROW_COLUMNS)?,
            sample_from_row(r, String::new())?,
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Process samples with `after_ms < ts_ms <= upto_ms`, by time.
pub fn process_samples(
    conn: &Connection,
    after_ms: TsMs,
    upto_ms: TsMs,
) -> Result<Vec<ProcessSampleRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT ps.ts_ms, ps.gpu_id, ps.process_id, p.pid, p.name, p.user, p.cmdline, ps.used_mem_bytes
         FROM process_samples ps JOIN processes p ON p.id = ps.process_id
         WHERE ps.ts_ms > ?1 AND ps.ts_ms <= ?2 ORDER BY ps.ts_ms, ps.gpu_id, ps.process_id",
    )?;
    let rows = stmt.query_map(params![after_ms, upto_ms], |r| {
        Ok(ProcessSampleRow {
            ts_ms: r.get(0)?,
            gpu_id: r.get(1)?,
            process_id: r.get(2)?,
            pid: r.get(3)?,
            name: r.get(4)?,
            user: r.get(5)?,
            cmdline: r.get(6)?,
            used_mem_bytes: u64_col(r, 7)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// XID runs that began at or before `upto_ms` and ended after `after_ms` (a run is re-read
/// while it grows: its `count` and `last_ms` are what the store holds now), by first time.
pub fn xid_runs(
    conn: &Connection,
    after_ms: TsMs,
    upto_ms: TsMs,
) -> Result<Vec<XidRunRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT e.id, e.ts_ms, e.gpu_id, e.code, e.count, coalesce(e.last_ms, e.ts_ms)
         FROM events e
         WHERE e.ts_ms > ?1 - ?3 AND e.ts_ms <= ?2 AND coalesce(e.last_ms, e.ts_ms) > ?1
           AND e.kind = 'xid'
         ORDER BY e.ts_ms, e.id",
    )?;
    let rows = stmt.query_map(
        params![after_ms, upto_ms, crate::store::events::XID_RUN_SPAN_MS],
        |r| {
            Ok(XidRunRow {
                id: r.get(0)?,
                ts_ms: r.get(1)?,
                gpu_id: r.get(2)?,
                code: r.get(3)?,
                count: r.get(4)?,
                last_ms: r.get(5)?,
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Every training series with its labels.
pub fn training_series(conn: &Connection) -> Result<Vec<TrainingSeriesRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT s.id, h.name, s.name, s.labels_json FROM training_series s JOIN hosts h ON h.id = s.host_id ORDER BY s.id",
    )?;
    let rows = stmt.query_map([], |r| {
        let json: String = r.get(3)?;
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, json))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (series_id, host, name, json): (i64, String, String, String) = row?;
        let labels = match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&json)
        {
            Ok(m) => m
                .into_iter()
                .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                .collect(),
            Err(_) => Vec::new(),
        };
        out.push(TrainingSeriesRow {
            series_id,
            host,
            name,
            labels,
        });
    }
    Ok(out)
}

/// Training points with `after_ms < ts_ms <= upto_ms`: (series id, time, value).
pub fn training_points(
    conn: &Connection,
    after_ms: TsMs,
    upto_ms: TsMs,
) -> Result<Vec<(i64, TsMs, f64)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT series_id, ts_ms, value FROM training_samples
         WHERE ts_ms > ?1 AND ts_ms <= ?2 AND value IS NOT NULL ORDER BY ts_ms, series_id",
    )?;
    let rows = stmt.query_map(params![after_ms, upto_ms], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The points of one training series with `after_ms < ts_ms <= upto_ms`, in time order.
pub fn training_points_of(
    conn: &Connection,
    series_id: i64,
    after_ms: TsMs,
    upto_ms: TsMs,
) -> Result<Vec<(TsMs, f64)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT ts_ms, value FROM training_samples
         WHERE series_id = ?1 AND ts_ms > ?2 AND ts_ms <= ?3 AND value IS NOT NULL
         ORDER BY ts_ms",
    )?;
    let rows = stmt.query_map(params![series_id, after_ms, upto_ms], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The first sample time after `after_ms`, if any (lets a reader skip empty stretches).
pub fn next_sample_after(conn: &Connection, after_ms: TsMs) -> Result<Option<TsMs>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT min(ts_ms) FROM samples WHERE ts_ms > ?1")?
        .query_row(params![after_ms], |r| r.get(0))?)
}

/// The oldest and newest time the database holds data of `host`'s GPUs (every host's when
/// `None`): from each GPU's first sample to its newest; `None` when it has none.
pub fn data_span(
    conn: &Connection,
    host: Option<&str>,
) -> Result<Option<(TsMs, TsMs)>, StoreError> {
    let span: (Option<TsMs>, Option<TsMs>) = conn
        .prepare_cached(
            "SELECT min(g.first_seen_ms), max(g.last_sample_ms)
             FROM gpus g JOIN hosts h ON h.id = g.host_id
             WHERE (?1 IS NULL OR h.name = ?1) AND g.last_sample_ms IS NOT NULL",
        )?
        .query_row(params![host], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(span.0.zip(span.1))
}

/// What `host`'s GPUs (every host's when `None`) hold in `[from, to)`: (a raw sample, a
/// rollup minute).
pub fn data_in(
    conn: &Connection,
    host: Option<&str>,
    from: TsMs,
    to: TsMs,
) -> Result<(bool, bool), StoreError> {
    Ok(conn
        .prepare_cached(
            "WITH ids AS (SELECT g.id FROM gpus g JOIN hosts h ON h.id = g.host_id
                          WHERE ?1 IS NULL OR h.name = ?1)
             SELECT EXISTS (SELECT 1 FROM samples s WHERE s.ts_ms >= ?2 AND s.ts_ms < ?3
                              AND s.gpu_id IN ids),
                    EXISTS (SELECT 1 FROM ids JOIN rollups_1m r ON r.gpu_id = ids.id
                              AND r.ts_ms > ?2 - 60000 AND r.ts_ms < ?3)",
        )?
        .query_row(params![host, from, to], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

/// The oldest and newest sample times, `None` for an empty database.
pub fn sample_span(conn: &Connection) -> Result<Option<(TsMs, TsMs)>, StoreError> {
    let span: (Option<TsMs>, Option<TsMs>) =
        conn.query_row("SELECT min(ts_ms), max(ts_ms) FROM samples", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(span.0.zip(span.1))
}

/// The placement of process `process_id` (read once per process, when the evaluator first
/// sees it); `None` when not known.
pub fn process_placement(
    conn: &Connection,
    process_id: i64,
) -> Result<Option<Placement>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {PLACEMENT_COLUMNS} FROM processes p WHERE p.id = ?1"
    ))?;
    let mut rows = stmt.query(params![process_id])?;
    match rows.next()? {
        Some(r) => Ok(placement_from_row(r, 0)?),
        None => Ok(None),
    }
}

/// One GPU holder interval (`gpu_holders`).
#[derive(Debug, Clone, PartialEq)]
pub struct HolderRow {
    pub gpu_id: i64,
    pub from_ms: TsMs,
    /// `None` while it still holds.
    pub to_ms: Option<TsMs>,
    pub holder: GpuHolder,
}

/// Holder intervals that overlap `(after_ms, upto_ms]`.
pub fn holders(
    conn: &Connection,
    after_ms: TsMs,
    upto_ms: TsMs,
) -> Result<Vec<HolderRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT gpu_id, from_ms, to_ms, pod, namespace, container, resource, training_job
         FROM gpu_holders
         WHERE from_ms <= ?2 AND (to_ms IS NULL OR to_ms > ?1)",
    )?;
    let rows = stmt.query_map(params![after_ms, upto_ms], |r| {
        Ok(HolderRow {
            gpu_id: r.get(0)?,
            from_ms: r.get(1)?,
            to_ms: r.get(2)?,
            holder: holder_from_row(r, 3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
