//! What `/metrics` reads beyond `status`'s readers: the newest point of the training series
//! each GPU joins, XID events after the last one a scrape saw, the live alerts and the file's
//! used size.
//!
//! Invariants: read-only; each read is bounded (a time window, an id cursor, a partial
//! state filter) so that a scrape's cost does not grow with the history.

use std::collections::HashMap;

use rusqlite::{Connection, params};

use super::StoreError;
use crate::model::TsMs;

/// The newest point at or after `since_ms` of each of `series` (absent: none that recent).
pub fn training_latest(
    conn: &Connection,
    series: &[i64],
    since_ms: TsMs,
) -> Result<HashMap<i64, (TsMs, f64)>, StoreError> {
    training_end(conn, series, since_ms, "DESC")
}

/// The oldest point at or after `since_ms` of each of `series` (with [`training_latest`]: a
/// rate over the window, e.g. steps per minute).
pub fn training_earliest(
    conn: &Connection,
    series: &[i64],
    since_ms: TsMs,
) -> Result<HashMap<i64, (TsMs, f64)>, StoreError> {
    training_end(conn, series, since_ms, "ASC")
}

/// One end (`order`: `ASC` the oldest, `DESC` the newest) of each series since `since_ms`.
fn training_end(
    conn: &Connection,
    series: &[i64],
    since_ms: TsMs,
    order: &str,
) -> Result<HashMap<i64, (TsMs, f64)>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT ts_ms, value FROM training_samples
         WHERE series_id = ?1 AND ts_ms >= ?2 AND value IS NOT NULL
         ORDER BY ts_ms {order} LIMIT 1"
    ))?;
    let mut out = HashMap::new();
    for &id in series {
        let mut rows = stmt.query(params![id, since_ms])?;
        if let Some(r) = rows.next()? {
            out.insert(id, (r.get(0)?, r.get(1)?));
        }
    }
    Ok(out)
}

/// One XID event of a host's GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    pub event_id: i64,
    pub gpu_uuid: String,
    /// The XID number (`None`: the driver did not say).
    pub code: Option<i64>,
}

/// XID events of `host` with an id above `after`, oldest first.
pub fn xids_after(conn: &Connection, host: &str, after: i64) -> Result<Vec<Xid>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT e.id, g.uuid, e.code FROM events e
         JOIN gpus g ON g.id = e.gpu_id JOIN hosts h ON h.id = e.host_id
         WHERE e.id > ?1 AND e.kind = 'xid' AND h.name = ?2 ORDER BY e.id",
    )?;
    let rows = stmt.query_map(params![after, host], |r| {
        Ok(Xid {
            event_id: r.get(0)?,
            gpu_uuid: r.get(1)?,
            code: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One pending or firing alert of a host, with its stored labels.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveAlert {
    pub rule: String,
    /// `pending` or `firing`.
    pub state: String,
    /// `None` while the alert is pending with a severity that escalates on firing.
    pub severity: Option<String>,
    pub gpu_index: Option<u32>,
    pub gpu_uuid: Option<String>,
    pub pid: Option<u32>,
    /// The alert's labels (`labels_json`), as stored.
    pub labels: Vec<(String, String)>,
}

/// The pending and firing alerts of `host`.
pub fn live_alerts(conn: &Connection, host: &str) -> Result<Vec<LiveAlert>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT v.rule, v.state, v.severity, v.gpu_index, v.gpu_uuid, v.pid, v.labels_json
         FROM alerts v WHERE v.state IN ('pending', 'firing') AND v.replayed = 0 AND v.host = ?1
         ORDER BY v.rule, v.gpu_index, v.pid",
    )?;
    let rows = stmt.query_map(params![host], |r| {
        let labels: Option<String> = r.get(6)?;
        let labels = labels
            .and_then(|j| {
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&j).ok()
            })
            .map(|m| {
                m.into_iter()
                    .map(|(k, v)| {
                        let v = match v {
                            serde_json::Value::String(s) => s,
                            other => other.to_string(),
                        };
                        (k, v)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(LiveAlert {
            rule: r.get(0)?,
            state: r.get(1)?,
            severity: r.get(2)?,
            gpu_index: r.get(3)?,
            gpu_uuid: r.get(4)?,
            pid: r.get(5)?,
            labels,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Bytes the database's pages hold (free pages excluded): what `max_db_size` bounds.
pub fn used_bytes(conn: &Connection) -> Result<u64, StoreError> {
    super::size::used_bytes(conn)
}
