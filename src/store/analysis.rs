//! The `analysis_requests` table (migration 0016): every request sent to a language model
//! about an alert, stored before it leaves (status `pending`) and completed with the answer or
//! the failure, so `gpuwatch incident ID --show-prompt` shows exactly what left the node.
//!
//! Invariants: the stored body is the one sent, byte for byte (redaction happens before it
//! is stored); a row is inserted before the request is sent, so a crash mid-request still
//! leaves a record of what was sent.

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::model::TsMs;

/// One stored request.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisRequest {
    pub id: i64,
    pub alert_id: i64,
    pub created_ms: TsMs,
    pub endpoint: String,
    pub model: String,
    pub request_json: String,
    /// pending | answered | failed
    pub status: String,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub done_ms: Option<TsMs>,
}

/// Records a request about to be sent; returns its id.
pub fn insert_request(
    conn: &Connection,
    alert_id: i64,
    now_ms: TsMs,
    endpoint: &str,
    model: &str,
    request_json: &str,
) -> Result<i64, StoreError> {
    conn.execute(
        "INSERT INTO analysis_requests (alert_id, created_ms, endpoint, model, request_json, status)
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending')",
        params![alert_id, now_ms, endpoint, model, request_json],
    )?;
    Ok(conn.last_insert_rowid())
}

/// Completes request `id`: `Ok(answer)` or `Err(one-line error)`.
pub fn finish_request(
    conn: &Connection,
    id: i64,
    now_ms: TsMs,
    outcome: Result<&str, &str>,
) -> Result<(), StoreError> {
    let (status, answer, error) = match outcome {
        Ok(a) => ("answered", Some(a), None),
        Err(e) => ("failed", None, Some(e)),
    };
    conn.execute(
        "UPDATE analysis_requests SET status = ?2, answer = ?3, error = ?4, done_ms = ?5
         WHERE id = ?1",
        params![id, status, answer, error, now_ms],
    )?;
    Ok(())
}

/// The newest request about `alert_id`, if any.
pub fn latest_request(
    conn: &Connection,
    alert_id: i64,
) -> Result<Option<AnalysisRequest>, StoreError> {
    Ok(conn
        .query_row(
            "SELECT id, alert_id, created_ms, endpoint, model, request_json, status, answer,
               error, done_ms
             FROM analysis_requests WHERE alert_id = ?1 ORDER BY id DESC LIMIT 1",
            params![alert_id],
            |r| {
                Ok(AnalysisRequest {
                    id: r.get(0)?,
                    alert_id: r.get(1)?,
                    created_ms: r.get(2)?,
                    endpoint: r.get(3)?,
                    model: r.get(4)?,
                    request_json: r.get(5)?,
                    status: r.get(6)?,
                    answer: r.get(7)?,
                    error: r.get(8)?,
                    done_ms: r.get(9)?,
                })
            },
        )
        .optional()?)
}

/// One raw sample of a GPU as the analysis reads it (units: %, W, °C, MHz, MiB); `None`
/// where the sample has no value.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GpuPoint {
    pub ts_ms: TsMs,
    /// 0 ok, 1 deadline missed, 2 lost.
    pub status: i64,
    pub util: Option<f64>,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub temp: Option<f64>,
    pub clock_sm: Option<f64>,
    pub mem_used_mib: Option<f64>,
    pub throttle: Option<u64>,
}

/// The means of GPU `gpu_id`'s sampled (status ok) readings in `[from, to]`: SM clock (MHz),
/// utilisation (%) and power (W), each `None` where nothing was read (not 0).
pub fn gpu_means(
    conn: &Connection,
    gpu_id: i64,
    from: TsMs,
    to: TsMs,
) -> Result<[Option<f64>; 3], StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT avg(clock_sm_mhz), avg(util_gpu_pct), avg(power_mw) / 1000.0
         FROM samples WHERE gpu_id = ?1 AND ts_ms >= ?2 AND ts_ms <= ?3 AND status = 0",
    )?;
    Ok(stmt.query_row(params![gpu_id, from, to], |r| {
        Ok([r.get(0)?, r.get(1)?, r.get(2)?])
    })?)
}

/// The raw samples of GPU `gpu_id` in `[from, to]`, in time order.
pub fn gpu_points(
    conn: &Connection,
    gpu_id: i64,
    from: TsMs,
    to: TsMs,
) -> Result<Vec<GpuPoint>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT ts_ms, status, util_gpu_pct, power_mw / 1000.0, power_limit_mw / 1000.0, temp_c,
           clock_sm_mhz, mem_used_bytes / 1048576.0, throttle_reasons
         FROM samples WHERE gpu_id = ?1 AND ts_ms >= ?2 AND ts_ms <= ?3 ORDER BY ts_ms",
    )?;
    let rows = stmt.query_map(params![gpu_id, from, to], |r| {
        Ok(GpuPoint {
            ts_ms: r.get(0)?,
            status: r.get(1)?,
            util: r.get(2)?,
            power_w: r.get(3)?,
            power_limit_w: r.get(4)?,
            temp: r.get(5)?,
            clock_sm: r.get(6)?,
            mem_used_mib: r.get(7)?,
            throttle: r.get::<_, Option<i64>>(8)?.map(|v| v as u64),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
