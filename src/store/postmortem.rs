//! Read queries for post-mortem reports (`gpuwatch report`): alert spans, the processes and
//! events of a window, and training series downsampled in SQL.
//!
//! Invariants: only reads; every query is bounded by the window (a time-first index range)
//! and aggregates in SQL; NULL stays `None`.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::StoreError;
use super::read::{PLACEMENT_COLUMNS, placement_from_row, u64_col};
use crate::model::{Placement, TsMs};

/// One alert episode (a row of the private `alert_state` table, as the `alerts` view shows it).
#[derive(Debug, Clone, PartialEq)]
pub struct AlertSpan {
    pub id: i64,
    pub rule: String,
    /// pending | firing | resolved
    pub state: String,
    pub severity: Option<String>,
    /// gpu | process | host
    pub scope: String,
    pub gpu_id: i64,
    pub host: String,
    pub gpu_index: Option<u32>,
    pub gpu_uuid: String,
    pub pid: Option<u32>,
    pub active_since_ms: TsMs,
    pub fired_ms: Option<TsMs>,
    pub resolved_ms: Option<TsMs>,
    /// When it ended: resolved, or while live the newest sample of its host (the `alerts`
    /// view's end, as every reader of alerts counts it).
    pub until_ms: TsMs,
    pub summary: Option<String>,
    /// The labels its receivers were given (placement included); empty when not stored.
    pub labels: BTreeMap<String, String>,
    /// The highest severity it fired at.
    pub max_severity: Option<String>,
    /// Found by `gpuwatch replay --save`.
    pub replayed: bool,
}

impl AlertSpan {
    /// When the alert ended, or the data's end when it is still live.
    pub fn end_ms(&self) -> TsMs {
        self.until_ms
    }
}

const ALERT_COLS: &str =
    "v.alert_id, v.rule, v.state, v.severity, v.scope, a.gpu_id, v.host, g.gpu_index,
    g.uuid, v.pid, v.active_since_ms, v.fired_ms, v.resolved_ms, v.active_since_ms + v.active_ms,
    v.summary, v.labels_json, v.max_severity, v.replayed
    FROM alerts v JOIN alert_state a ON a.id = v.alert_id JOIN gpus g ON g.id = a.gpu_id";

fn alert_from_row(r: &Row<'_>) -> rusqlite::Result<AlertSpan> {
    Ok(AlertSpan {
        id: r.get(0)?,
        rule: r.get(1)?,
        state: r.get(2)?,
        severity: r.get(3)?,
        scope: r.get(4)?,
        gpu_id: r.get(5)?,
        host: r.get(6)?,
        gpu_index: r.get(7)?,
        gpu_uuid: r.get(8)?,
        pid: r.get(9)?,
        active_since_ms: r.get(10)?,
        fired_ms: r.get(11)?,
        resolved_ms: r.get(12)?,
        until_ms: r.get(13)?,
        summary: r.get(14)?,
        labels: r
            .get::<_, Option<String>>(15)?
            .and_then(|j| serde_json::from_str(&j).ok())
            .unwrap_or_default(),
        max_severity: r.get(16)?,
        replayed: r.get::<_, i64>(17)? != 0,
    })
}

/// The alert with id `id` (`alerts.alert_id`), if it exists.
pub fn alert(conn: &Connection, id: i64) -> Result<Option<AlertSpan>, StoreError> {
    Ok(conn
        .prepare_cached(&format!("SELECT {ALERT_COLS} WHERE v.alert_id = ?1"))?
        .query_row(params![id], alert_from_row)
        .optional()?)
}

/// Alerts of the GPUs `gpu_ids` (host-scope alerts of their hosts included) that were active
/// at some time in `[from_ms, to_ms]`, by start time.
pub fn alerts_in(
    conn: &Connection,
    gpu_ids: &[i64],
    from_ms: TsMs,
    to_ms: TsMs,
) -> Result<Vec<AlertSpan>, StoreError> {
    let ids = id_list(gpu_ids);
    let mut stmt = conn.prepare(&format!(
        "SELECT {ALERT_COLS}
         WHERE v.active_since_ms <= ?2 AND v.active_since_ms + v.active_ms >= ?1
           AND (a.gpu_id IN ({ids}) OR (a.scope = 'host' AND g.host_id IN
                (SELECT host_id FROM gpus WHERE id IN ({ids}))))
         ORDER BY v.active_since_ms, v.alert_id"
    ))?;
    let rows = stmt.query_map(params![from_ms, to_ms], alert_from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A process seen on a GPU during a window.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSpan {
    pub gpu_id: i64,
    pub pid: u32,
    pub start_time_ms: TsMs,
    pub name: Option<String>,
    pub user: Option<String>,
    /// Redacted by the sampler before it was stored.
    pub cmdline: Option<String>,
    /// The most GPU memory it held in the window; `None` when the driver never said.
    pub max_mem_bytes: Option<u64>,
    pub first_ms: TsMs,
    pub last_ms: TsMs,
    /// Where it ran (container, pod, Slurm job); `None` when not resolved.
    pub placement: Option<Placement>,
}

/// The processes on `gpu_ids` in `[from_ms, to_ms]`, by first sighting; at most `limit`.
pub fn processes_in(
    conn: &Connection,
    gpu_ids: &[i64],
    from_ms: TsMs,
    to_ms: TsMs,
    limit: usize,
) -> Result<Vec<ProcessSpan>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT ps.gpu_id, p.pid, p.start_time_ms, p.name, p.user, p.cmdline,
           max(ps.used_mem_bytes), min(ps.ts_ms), max(ps.ts_ms), {PLACEMENT_COLUMNS}
         FROM process_samples ps JOIN processes p ON p.id = ps.process_id
         WHERE ps.ts_ms >= ?1 AND ps.ts_ms <= ?2 AND ps.gpu_id IN ({})
         GROUP BY ps.gpu_id, ps.process_id
         ORDER BY min(ps.ts_ms), ps.gpu_id, p.pid LIMIT ?3",
        id_list(gpu_ids)
    ))?;
    let rows = stmt.query_map(params![from_ms, to_ms, limit as i64], |r| {
        Ok(ProcessSpan {
            gpu_id: r.get(0)?,
            pid: r.get(1)?,
            start_time_ms: r.get(2)?,
            name: r.get(3)?,
            user: r.get(4)?,
            cmdline: r.get(5)?,
            max_mem_bytes: u64_col(r, 6)?,
            first_ms: r.get(7)?,
            last_ms: r.get(8)?,
            placement: placement_from_row(r, 9)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// An event (XID, GPU lost, ...) in a window.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpan {
    pub ts_ms: TsMs,
    /// `None` for host-wide events.
    pub gpu_id: Option<i64>,
    pub kind: String,
    pub code: Option<i64>,
    pub message: Option<String>,
}

/// Events of `gpu_ids` and host-wide events of their hosts in `[from_ms, to_ms]`, by time;
/// at most `limit`.
pub fn events_in(
    conn: &Connection,
    gpu_ids: &[i64],
    from_ms: TsMs,
    to_ms: TsMs,
    limit: usize,
) -> Result<Vec<EventSpan>, StoreError> {
    let ids = id_list(gpu_ids);
    let mut stmt = conn.prepare(&format!(
        "SELECT e.ts_ms, e.gpu_id, e.kind, e.code, e.message FROM events e
         WHERE e.ts_ms >= ?1 AND e.ts_ms <= ?2
           AND (e.gpu_id IN ({ids}) OR (e.gpu_id IS NULL AND e.host_id IN
                (SELECT host_id FROM gpus WHERE id IN ({ids}))))
         ORDER BY e.ts_ms, e.id LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![from_ms, to_ms, limit as i64], |r| {
        Ok(EventSpan {
            ts_ms: r.get(0)?,
            gpu_id: r.get(1)?,
            kind: r.get(2)?,
            code: r.get(3)?,
            message: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One training series over a window, averaged per step.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingLine {
    pub series_id: i64,
    pub host: String,
    /// `training_step`, `training_loss`, ...
    pub metric: String,
    /// Labels as stored (a JSON object with sorted keys).
    pub labels_json: String,
    /// (bucket start, average of the non-NULL values), only buckets with values.
    pub points: Vec<(TsMs, f64)>,
}

/// Training series of the hosts of `gpu_ids` with points in `[from_ms, to_ms)`, averaged per
/// `step_ms` bucket (aligned to multiples of the step), by metric and series.
pub fn training_in(
    conn: &Connection,
    gpu_ids: &[i64],
    from_ms: TsMs,
    to_ms: TsMs,
    step_ms: i64,
) -> Result<Vec<TrainingLine>, StoreError> {
    let step = step_ms.max(1);
    let first = from_ms.div_euclid(step) * step;
    let mut stmt = conn.prepare(&format!(
        "SELECT t.series_id, h.name, s.name, s.labels_json, (t.ts_ms - ?1) / ?3 AS b, avg(t.value)
         FROM training_samples t JOIN training_series s ON s.id = t.series_id
         JOIN hosts h ON h.id = s.host_id
         WHERE t.ts_ms >= ?4 AND t.ts_ms < ?2 AND t.value IS NOT NULL
           AND s.host_id IN (SELECT host_id FROM gpus WHERE id IN ({}))
         GROUP BY t.series_id, b ORDER BY s.name, t.series_id, b",
        id_list(gpu_ids)
    ))?;
    let mut rows = stmt.query(params![first, to_ms, step, from_ms])?;
    let mut out: Vec<TrainingLine> = Vec::new();
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let b: i64 = r.get(4)?;
        let v: Option<f64> = r.get(5)?;
        if out.last().is_none_or(|l| l.series_id != id) {
            out.push(TrainingLine {
                series_id: id,
                host: r.get(1)?,
                metric: r.get(2)?,
                labels_json: r.get(3)?,
                points: Vec::new(),
            });
        }
        if let (Some(v), Some(line)) = (v, out.last_mut()) {
            line.points.push((first + b * step, v));
        }
    }
    Ok(out)
}

/// Integer ids as an SQL list (`NULL` when empty, which matches nothing).
fn id_list(ids: &[i64]) -> String {
    if ids.is_empty() {
        return "NULL".into();
    }
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}
