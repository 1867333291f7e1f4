//! The usage ledger's table (`usage_intervals`, migration 28; docs/USAGE.md): what the
//! evaluator's [`crate::usage::Ledger`] decided, written as [`Op`]s, and read back by
//! interval for `gpuwatch usage`, `/api/v1/usage`, the report and the digest.
//!
//! Invariants: rows are written only here; an open row (`end_ms` NULL) lasts to its GPU's
//! newest sample; reads clip every interval to the asked range and count a holder's part of a
//! shared GPU (`share`).

use rusqlite::{Connection, params};

use super::StoreError;
use crate::model::TsMs;
use crate::usage::summary::Interval;
use crate::usage::{Holder, Op, OpenRow, State};

/// The SQL test that a row names its holder.
const KNOWN: &str =
    "coalesce(namespace, pod, container, slurm_job, user, training_job) IS NOT NULL";

/// The holder in columns `at..at + 6` (namespace, pod, container, slurm_job, user,
/// training_job).
fn holder_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Holder> {
    Ok(Holder {
        namespace: r.get(at)?,
        pod: r.get(at + 1)?,
        container: r.get(at + 2)?,
        slurm_job: r.get(at + 3)?,
        user: r.get(at + 4)?,
        training_job: r.get(at + 5)?,
    })
}

/// Applies the ledger's changes (inside the caller's transaction).
pub fn apply(conn: &Connection, ops: &[Op]) -> Result<(), StoreError> {
    for op in ops {
        match op {
            Op::Open {
                gpu_id,
                start,
                rows,
            } => {
                let share = 1.0 / rows.len().max(1) as f64;
                for (i, (h, s)) in rows.iter().enumerate() {
                    insert(conn, *gpu_id, *start, i as i64, None, *s, share, h)?;
                }
            }
            Op::Close { gpu_id, start, end } => {
                conn.prepare_cached(
                    "UPDATE usage_intervals SET end_ms = ?3
                     WHERE gpu_id = ?1 AND ts_ms = ?2 AND end_ms IS NULL",
                )?
                .execute(params![gpu_id, start, end])?;
            }
            Op::IdleSince { gpu_id, onset } => idle_since(conn, *gpu_id, *onset)?,
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn insert(
    conn: &Connection,
    gpu_id: i64,
    start: TsMs,
    holder_no: i64,
    end: Option<TsMs>,
    state: State,
    share: f64,
    h: &Holder,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO usage_intervals (ts_ms, gpu_id, holder_no, end_ms, state, share,
           namespace, pod, container, slurm_job, user, training_job)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        start,
        gpu_id,
        holder_no,
        end,
        state.as_str(),
        share,
        h.namespace,
        h.pod,
        h.container,
        h.slurm_job,
        h.user,
        h.training_job
    ])?;
    Ok(())
}

/// From `onset` on, busy rows of named holders are idle-held: the one spanning it is split.
fn idle_since(conn: &Connection, gpu_id: i64, onset: TsMs) -> Result<(), StoreError> {
    let sql = format!(
        "SELECT ts_ms, holder_no, end_ms, share, namespace, pod, container, slurm_job, user,
           training_job FROM usage_intervals
         WHERE gpu_id = ?1 AND ts_ms < ?2 AND ts_ms >= ?3 AND (end_ms IS NULL OR end_ms > ?2)
           AND state = 'busy' AND {KNOWN}"
    );
    // Rows never cross midnight: the one spanning the onset started the same day.
    let day = crate::usage::day_start(onset);
    let spanning: Vec<(TsMs, i64, Option<TsMs>, f64, Holder)> = conn
        .prepare_cached(&sql)?
        .query_map(params![gpu_id, onset, day], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, holder_at(r, 4)?))
        })?
        .collect::<Result<_, _>>()?;
    for (start, no, end, share, h) in spanning {
        conn.prepare_cached(
            "UPDATE usage_intervals SET end_ms = ?4 WHERE gpu_id = ?1 AND ts_ms = ?2 AND holder_no = ?3",
        )?
        .execute(params![gpu_id, start, no, onset])?;
        insert(conn, gpu_id, onset, no, end, State::IdleHeld, share, &h)?;
    }
    let sql = format!(
        "UPDATE usage_intervals SET state = 'idle_held'
         WHERE gpu_id = ?1 AND ts_ms >= ?2 AND state = 'busy' AND {KNOWN}"
    );
    conn.prepare_cached(&sql)?.execute(params![gpu_id, onset])?;
    Ok(())
}

/// The open rows of the GPUs of `host` (all hosts: `None`), with each GPU's newest sample:
/// where a restarted ledger goes on.
pub fn open_rows(
    conn: &Connection,
    host: Option<&str>,
) -> Result<Vec<(i64, OpenRow, Option<TsMs>)>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT u.gpu_id, u.ts_ms, u.state, u.namespace, u.pod, u.container, u.slurm_job, u.user,
           u.training_job, g.last_sample_ms
         FROM usage_intervals u JOIN gpus g ON g.id = u.gpu_id JOIN hosts h ON h.id = g.host_id
         WHERE u.end_ms IS NULL AND (?1 IS NULL OR h.name = ?1)
         ORDER BY u.gpu_id, u.ts_ms, u.holder_no",
    )?;
    let rows = stmt.query_map(params![host], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, TsMs>(1)?,
            r.get::<_, String>(2)?,
            holder_at(r, 3)?,
            r.get::<_, Option<TsMs>>(9)?,
        ))
    })?;
    let mut out: Vec<(i64, OpenRow, Option<TsMs>)> = Vec::new();
    for row in rows {
        let (gpu, start, state, h, last) = row?;
        let state = State::parse(&state).unwrap_or(State::Unknown);
        match out.last_mut() {
            // A GPU has one open interval; a stray older one is closed by the next change.
            Some((g, open, _)) if *g == gpu && open.start == start => open.rows.push((h, state)),
            Some((g, _, _)) if *g == gpu => {}
            _ => out.push((
                gpu,
                OpenRow {
                    start,
                    rows: vec![(h, state)],
                },
                last,
            )),
        }
    }
    Ok(out)
}

/// Removes the ledger of `host`'s GPUs over `[from, to]` (an import accounts it again).
pub fn forget(conn: &Connection, host: &str, from: TsMs, to: TsMs) -> Result<usize, StoreError> {
    Ok(conn
        .prepare_cached(
            "DELETE FROM usage_intervals WHERE ts_ms >= ?2 AND ts_ms <= ?3
             AND gpu_id IN (SELECT g.id FROM gpus g JOIN hosts h ON h.id = g.host_id WHERE h.name = ?1)",
        )?
        .execute(params![host, from, to])?)
}

/// Every interval overlapping `[from, to)`, clipped to it, of `host` (all: `None`), in time
/// order.
pub fn intervals(
    conn: &Connection,
    from: TsMs,
    to: TsMs,
    host: Option<&str>,
) -> Result<Vec<Interval>, StoreError> {
    // Rows lie within one UTC day: one starting a day before `from` may reach into it.
    let mut stmt = conn.prepare_cached(
        "SELECT h.name, g.uuid, g.gpu_index, g.name, u.ts_ms,
           coalesce(u.end_ms, max(u.ts_ms, coalesce(g.last_sample_ms, u.ts_ms))),
           u.state, u.share, u.namespace, u.pod, u.container, u.slurm_job, u.user, u.training_job,
           g.gpu_instance_id
         FROM usage_intervals u JOIN gpus g ON g.id = u.gpu_id JOIN hosts h ON h.id = g.host_id
         WHERE u.ts_ms >= ?1 - 86400000 AND u.ts_ms < ?2 AND (?3 IS NULL OR h.name = ?3)
         ORDER BY u.ts_ms, g.id, u.holder_no",
    )?;
    let rows = stmt.query_map(params![from, to, host], |r| {
        Ok(Interval {
            host: r.get(0)?,
            gpu_uuid: r.get(1)?,
            gpu_index: r.get(2)?,
            gpu_instance_id: r.get(14)?,
            model: r.get(3)?,
            from_ms: r.get::<_, TsMs>(4)?.max(from),
            to_ms: r.get::<_, TsMs>(5)?.min(to),
            state: State::parse(&r.get::<_, String>(6)?).unwrap_or(State::Unknown),
            share: r.get(7)?,
            holder: holder_at(r, 8)?,
        })
    })?;
    let mut out = Vec::new();
    for r in rows {
        let r = r?;
        if r.to_ms > r.from_ms {
            out.push(r);
        }
    }
    Ok(out)
}

/// The time span the ledger covers (of `host`, or all), if any.
pub fn span(conn: &Connection, host: Option<&str>) -> Result<Option<(TsMs, TsMs)>, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT min(u.ts_ms), max(coalesce(u.end_ms, g.last_sample_ms, u.ts_ms))
             FROM usage_intervals u JOIN gpus g ON g.id = u.gpu_id JOIN hosts h ON h.id = g.host_id
             WHERE ?1 IS NULL OR h.name = ?1",
        )?
        .query_row(params![host], |r| {
            Ok(r.get::<_, Option<TsMs>>(0)?
                .zip(r.get::<_, Option<TsMs>>(1)?))
        })?)
}
