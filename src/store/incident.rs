//! Reads for the post-mortem commands `gpuwatch alerts`, `gpuwatch incident` and
//! `gpuwatch import openmetrics`: alert history (the public `alerts` view of migration 0007),
//! one alert with its GPU, its notifications (the `notifications` view), and the processes,
//! events and training points of a GPU in a time window.
//!
//! Invariants: read only (works on a read-only connection, beside a writing daemon); times
//! are ms since the epoch, UTC; a column that is NULL in the database is `None` here, never 0.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::StoreError;
use crate::model::TsMs;

/// Hosts that have GPUs, by name.
pub fn hosts_with_gpus(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT DISTINCT h.name FROM hosts h JOIN gpus g ON g.host_id = h.id ORDER BY h.name",
    )?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One alert episode as the `alerts` view shows it, plus its GPU's row id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AlertRow {
    pub alert_id: i64,
    pub rule: String,
    /// pending | firing | resolved
    pub state: String,
    pub severity: Option<String>,
    /// gpu | process | host
    pub scope: String,
    pub host: String,
    /// `gpus.id` of the alert's GPU (for host-scope alerts, the host's first GPU).
    pub gpu_id: i64,
    pub gpu_uuid: Option<String>,
    pub gpu_index: Option<i64>,
    /// `processes.id` of a per-process alert's process.
    pub process_id: Option<i64>,
    pub pid: Option<i64>,
    pub process_name: Option<String>,
    pub reported: bool,
    pub active_since_ms: TsMs,
    pub fired_ms: Option<TsMs>,
    pub resolved_ms: Option<TsMs>,
    /// Until resolved, or while live until the newest sample of its host (the data's end),
    /// minus active_since (the view's `active_ms`).
    pub active_ms: TsMs,
    pub summary: Option<String>,
    pub labels_json: Option<String>,
    /// The highest severity the episode fired at.
    pub max_severity: Option<String>,
    /// Its changes of severity while firing, oldest first.
    pub severity_changes: Vec<SeverityChange>,
    /// Found by `gpuwatch replay --save` over stored history, not by a running daemon.
    pub replayed: bool,
}

/// A change of severity of a firing alert (`alerts.severity_changes`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SeverityChange {
    pub at_ms: TsMs,
    pub from: Option<String>,
    pub to: String,
    pub summary: Option<String>,
}

/// Which alerts to list.
#[derive(Debug, Clone, Default)]
pub struct AlertFilter {
    /// Alerts active at some time in `[from, to]` (both inclusive).
    pub range: Option<(TsMs, TsMs)>,
    pub rule: Option<String>,
    pub state: Option<String>,
    pub host: Option<String>,
}

const ALERT_COLUMNS: &str = "v.alert_id, v.rule, v.state, v.severity, v.scope, v.host, a.gpu_id,
    v.gpu_uuid, v.gpu_index, v.pid, v.process_name, v.reported, v.active_since_ms, v.fired_ms,
    v.resolved_ms, v.active_ms, v.summary, a.labels_json, a.process_id, v.max_severity,
    v.severity_changes, v.replayed
    FROM alerts v JOIN alert_state a ON a.id = v.alert_id";

fn alert_row(r: &Row) -> rusqlite::Result<AlertRow> {
    Ok(AlertRow {
        alert_id: r.get(0)?,
        rule: r.get(1)?,
        state: r.get(2)?,
        severity: r.get(3)?,
        scope: r.get(4)?,
        host: r.get(5)?,
        gpu_id: r.get(6)?,
        gpu_uuid: r.get(7)?,
        gpu_index: r.get(8)?,
        pid: r.get(9)?,
        process_name: r.get(10)?,
        reported: r.get::<_, i64>(11)? != 0,
        active_since_ms: r.get(12)?,
        fired_ms: r.get(13)?,
        resolved_ms: r.get(14)?,
        active_ms: r.get(15)?,
        summary: r.get(16)?,
        labels_json: r.get(17)?,
        process_id: r.get(18)?,
        max_severity: r.get(19)?,
        severity_changes: r
            .get::<_, Option<String>>(20)?
            .and_then(|j| serde_json::from_str(&j).ok())
            .unwrap_or_default(),
        replayed: r.get::<_, i64>(21)? != 0,
    })
}

/// Alert episodes matching `f`, newest first (by start, then id).
pub fn alerts(conn: &Connection, f: &AlertFilter) -> Result<Vec<AlertRow>, StoreError> {
    let (from, to) = f.range.map_or((None, None), |(a, b)| (Some(a), Some(b)));
    let sql = format!(
        "SELECT {ALERT_COLUMNS}
         WHERE (?1 IS NULL OR v.active_since_ms + v.active_ms >= ?1)
           AND (?2 IS NULL OR v.active_since_ms <= ?2)
           AND (?3 IS NULL OR v.rule = ?3)
           AND (?4 IS NULL OR v.state = ?4)
           AND (?5 IS NULL OR v.host = ?5)
         ORDER BY v.active_since_ms DESC, v.alert_id DESC"
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(params![from, to, f.rule, f.state, f.host], alert_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One alert episode by id; `None` when there is none with that id.
pub fn alert(conn: &Connection, alert_id: i64) -> Result<Option<AlertRow>, StoreError> {
    let sql = format!("SELECT {ALERT_COLUMNS} WHERE v.alert_id = ?1");
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query_map(params![alert_id], alert_row)?;
    Ok(rows.next().transpose()?)
}

/// The newest and oldest alert ids (to help someone who typed a wrong one).
pub fn alert_id_span(conn: &Connection) -> Result<Option<(i64, i64)>, StoreError> {
    let span: (Option<i64>, Option<i64>) =
        conn.query_row("SELECT min(id), max(id) FROM alert_state", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(span.0.zip(span.1))
}

/// One outbox row of an alert (the `notifications` view).
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationRow {
    pub notification_id: i64,
    pub receiver: String,
    /// firing | resolved | repeat | self
    pub kind: String,
    /// pending | sent | dead | silenced | skipped
    pub status: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub created_ms: TsMs,
    pub done_ms: Option<TsMs>,
}

/// The notifications of one alert in enqueue order.
pub fn notifications(conn: &Connection, alert_id: i64) -> Result<Vec<NotificationRow>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT notification_id, receiver, kind, status, attempts, last_error, created_ms, done_ms
         FROM notifications WHERE alert_id = ?1 ORDER BY notification_id",
    )?;
    let rows = stmt.query_map(params![alert_id], |r| {
        Ok(NotificationRow {
            notification_id: r.get(0)?,
            receiver: r.get(1)?,
            kind: r.get(2)?,
            status: r.get(3)?,
            attempts: r.get(4)?,
            last_error: r.get(5)?,
            created_ms: r.get(6)?,
            done_ms: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A process seen on a GPU in a window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowProcess {
    pub pid: i64,
    pub name: Option<String>,
    pub user: Option<String>,
    pub first_ms: TsMs,
    pub last_ms: TsMs,
    /// Largest GPU memory seen, in bytes; `None` when the driver never said.
    pub max_mem_bytes: Option<i64>,
    /// Its container, pod and Slurm job (`None`: unknown).
    pub placement: Option<crate::model::Placement>,
}

/// Who the kubelet said held GPU `gpu_id` during `[from, to]`: (from, to or open, holder).
pub fn holders(
    conn: &Connection,
    gpu_id: i64,
    from: TsMs,
    to: TsMs,
) -> Result<Vec<(TsMs, Option<TsMs>, crate::model::GpuHolder)>, StoreError> {
    Ok(super::history::holders(conn, from - 1, to)?
        .into_iter()
        .filter(|h| h.gpu_id == gpu_id)
        .map(|h| (h.from_ms, h.to_ms, h.holder))
        .collect())
}

/// Processes with samples on GPU `gpu_id` in `[from, to]`, by first appearance.
pub fn processes(
    conn: &Connection,
    gpu_id: i64,
    from: TsMs,
    to: TsMs,
) -> Result<Vec<WindowProcess>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT p.pid, p.name, p.user, min(s.ts_ms), max(s.ts_ms), max(s.used_mem_bytes),
           {}
         FROM process_samples s JOIN processes p ON p.id = s.process_id
         WHERE s.ts_ms >= ?2 AND s.ts_ms <= ?3 AND s.gpu_id = ?1
         GROUP BY s.process_id ORDER BY min(s.ts_ms), p.pid",
        super::read::PLACEMENT_COLUMNS
    ))?;
    let rows = stmt.query_map(params![gpu_id, from, to], |r| {
        Ok(WindowProcess {
            pid: r.get(0)?,
            name: r.get(1)?,
            user: r.get(2)?,
            first_ms: r.get(3)?,
            last_ms: r.get(4)?,
            max_mem_bytes: r.get(5)?,
            placement: super::read::placement_from_row(r, 6)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Of the GPU's ok samples in `[from, to]`: (those whose process list was observed, all).
/// The rest have no process data: unknown, not "no processes".
pub fn process_observation(
    conn: &Connection,
    gpu_id: i64,
    from: TsMs,
    to: TsMs,
) -> Result<(u64, u64), StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT count(process_count), count(*) FROM samples
             WHERE gpu_id = ?1 AND ts_ms >= ?2 AND ts_ms <= ?3 AND status = 0",
        )?
        .query_row(params![gpu_id, from, to], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })?)
}

/// An event of the GPU (or of its host, `gpu` None) in a window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowEvent {
    pub id: i64,
    /// The first event's time (an XID run: `store::events`).
    pub ts_ms: TsMs,
    /// False for a host-wide event.
    pub on_gpu: bool,
    pub kind: String,
    pub code: Option<i64>,
    pub message: String,
    /// Events in the run (1 for one event).
    pub count: i64,
    /// The last event's time.
    pub last_ms: TsMs,
}

/// Events of GPU `gpu_id` and host-wide events of its host in `[from, to]` (an XID run that
/// overlaps it), in time order.
pub fn events(
    conn: &Connection,
    gpu_id: i64,
    from: TsMs,
    to: TsMs,
) -> Result<Vec<WindowEvent>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT e.id, e.ts_ms, e.gpu_id IS NOT NULL, e.kind, e.code, e.message, e.count,
                coalesce(e.last_ms, e.ts_ms)
         FROM events e JOIN gpus g ON g.id = ?1
         WHERE e.ts_ms >= ?2 - ?4 AND coalesce(e.last_ms, e.ts_ms) >= ?2 AND e.ts_ms <= ?3
           AND e.host_id = g.host_id AND (e.gpu_id = ?1 OR e.gpu_id IS NULL)
         ORDER BY e.ts_ms, e.id",
    )?;
    let span = crate::store::events::XID_RUN_SPAN_MS;
    let rows = stmt.query_map(params![gpu_id, from, to, span], |r| {
        Ok(WindowEvent {
            id: r.get(0)?,
            ts_ms: r.get(1)?,
            on_gpu: r.get(2)?,
            kind: r.get(3)?,
            code: r.get(4)?,
            message: r.get(5)?,
            count: r.get(6)?,
            last_ms: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The points of one training series in `[from, to]`, in time order (NULL values skipped).
pub fn training_points(
    conn: &Connection,
    series_id: i64,
    from: TsMs,
    to: TsMs,
) -> Result<Vec<(TsMs, f64)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT ts_ms, value FROM training_samples
         WHERE series_id = ?1 AND ts_ms >= ?2 AND ts_ms <= ?3 AND value IS NOT NULL
         ORDER BY ts_ms",
    )?;
    let rows = stmt.query_map(params![series_id, from, to], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// `(first_seen_ms, last_seen_ms)` of a host (the span its retention counts from); `None`
/// when the host is unknown or has no data yet.
pub fn host_span(conn: &Connection, host: &str) -> Result<Option<(TsMs, TsMs)>, StoreError> {
    let span: Option<(Option<TsMs>, Option<TsMs>)> = conn
        .query_row(
            "SELECT first_seen_ms, last_seen_ms FROM hosts WHERE name = ?1",
            params![host],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    Ok(span.and_then(|(a, b)| a.zip(b)))
}

/// GPU memory of process `process_id` on GPU `gpu_id` in `[from, to]`, in MiB (`None` where
/// the driver did not say), in time order.
pub fn process_mem(
    conn: &Connection,
    gpu_id: i64,
    process_id: i64,
    from: TsMs,
    to: TsMs,
) -> Result<Vec<(TsMs, Option<f64>)>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT ts_ms, used_mem_bytes / 1048576.0 FROM process_samples
         WHERE ts_ms >= ?3 AND ts_ms <= ?4 AND gpu_id = ?1 AND process_id = ?2 ORDER BY ts_ms",
    )?;
    let rows = stmt.query_map(params![gpu_id, process_id, from, to], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
