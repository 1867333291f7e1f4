//! The stored evidence about one XID that `crate::xid::judge` weighs, for post-mortems
//! (`gpuwatch incident`): the job it hit, the same code on the same GPU in other jobs, the
//! job's crash. The rule evaluator gathers the same evidence from its in-memory world as the
//! data arrives (`rules/eval/world/xids.rs`); both use the judge's windows.
//!
//! Invariants: a job is the kubelet's holder of the GPU (its `training_job`, else its pod)
//! at the time, else the set of processes sampled on the GPU in the minute before; a GPU
//! without either has no job, and an XID without a job has no crash and no "other job".
//! Read-only.

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::model::TsMs;
use crate::xid::judge::{
    CRASH_WINDOW_MS, Evidence, JobCrash, REPEAT_WINDOW_MS, Verdict, XidClass, job_key_of_pids,
    judge, may_crash_a_job, other_job,
};

/// Earlier runs of the code on the GPU looked at for another job.
const EARLIER_RUNS: i64 = 50;

/// What the store says about the XID of `code` on GPU `gpu_id` at `ts`: (other jobs with the
/// code on the GPU within 24 h, the job's crash).
pub fn evidence(
    conn: &Connection,
    gpu_id: i64,
    code: i64,
    ts: TsMs,
) -> Result<(usize, Option<JobCrash>), StoreError> {
    let Some(job) = job_at(conn, gpu_id, ts)? else {
        return Ok((0, None));
    };
    let mut others: BTreeSet<String> = BTreeSet::new();
    let mut stmt = conn.prepare_cached(
        "SELECT ts_ms FROM events WHERE gpu_id = ?1 AND kind = 'xid' AND code = ?2
           AND ts_ms >= ?3 - ?4 AND ts_ms < ?3 ORDER BY ts_ms DESC LIMIT ?5",
    )?;
    let earlier: Vec<TsMs> = stmt
        .query_map(
            params![gpu_id, code, ts, REPEAT_WINDOW_MS, EARLIER_RUNS],
            |r| r.get(0),
        )?
        .collect::<Result<_, _>>()?;
    for t in earlier {
        if let Some(j) = job_at(conn, gpu_id, t)?
            && other_job(&j, &job)
        {
            others.insert(j);
        }
    }
    let host_gpus: Vec<i64> = conn
        .prepare_cached(
            "SELECT id FROM gpus WHERE host_id = (SELECT host_id FROM gpus WHERE id = ?1)",
        )?
        .query_map([gpu_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut crash = JobCrash::default();
    let named = !job.starts_with("pids:");
    for g in host_gpus {
        let theirs = match job_at(conn, g, ts)? {
            Some(j) if named => j == job,
            Some(j) => j.starts_with("pids:"),
            None => false,
        };
        if !theirs {
            continue;
        }
        crash.job_gpus += 1;
        if xid_near(conn, g, ts)? {
            crash.with_xid += 1;
        }
        if exited_near(conn, g, ts)? {
            crash.exited += 1;
        }
    }
    Ok((others.len(), Some(crash)))
}

/// The job GPU `gpu_id` worked for at `ts` (see the module's invariants).
fn job_at(conn: &Connection, gpu_id: i64, ts: TsMs) -> Result<Option<String>, StoreError> {
    let holder: Option<(Option<String>, String, String)> = conn
        .prepare_cached(
            "SELECT training_job, namespace, pod FROM gpu_holders
             WHERE gpu_id = ?1 AND from_ms <= ?2 AND (to_ms IS NULL OR to_ms >= ?2)
             ORDER BY from_ms DESC LIMIT 1",
        )?
        .query_row(params![gpu_id, ts], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    if let Some((job, ns, pod)) = holder {
        return Ok(Some(match job {
            Some(j) => format!("job:{j}"),
            None => format!("pod:{ns}/{pod}"),
        }));
    }
    let pids: Vec<i64> = conn
        .prepare_cached(
            "SELECT DISTINCT p.pid FROM process_samples s JOIN processes p ON p.id = s.process_id
             WHERE s.gpu_id = ?1 AND s.ts_ms BETWEEN ?2 - ?3 AND ?2 ORDER BY p.pid",
        )?
        .query_map(params![gpu_id, ts, CRASH_WINDOW_MS], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if pids.is_empty() {
        return Ok(None);
    }
    Ok(Some(job_key_of_pids(pids)))
}

/// Whether GPU `gpu_id` had an XID that may crash a job within ±60 s of `ts`.
fn xid_near(conn: &Connection, gpu_id: i64, ts: TsMs) -> Result<bool, StoreError> {
    let codes: Vec<i64> = conn
        .prepare_cached(
            "SELECT code FROM events WHERE gpu_id = ?1 AND kind = 'xid' AND code IS NOT NULL
               AND ts_ms <= ?2 + ?3 AND coalesce(last_ms, ts_ms) >= ?2 - ?3",
        )?
        .query_map(params![gpu_id, ts, CRASH_WINDOW_MS], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(codes.into_iter().any(may_crash_a_job))
}

/// Whether a process on GPU `gpu_id` was last sampled within ±60 s of `ts` (and not in the
/// 5 minutes after) while the GPU was sampled after it (it exited, not the sampling), and no
/// process runs on the GPU in the minute after.
fn exited_near(conn: &Connection, gpu_id: i64, ts: TsMs) -> Result<bool, StoreError> {
    let last: Option<TsMs> = conn
        .prepare_cached(
            "SELECT max(s.ts_ms) FROM process_samples s
             WHERE s.gpu_id = ?1 AND s.ts_ms BETWEEN ?2 - ?3 AND ?2 + ?3
               AND NOT EXISTS (SELECT 1 FROM process_samples n WHERE n.gpu_id = s.gpu_id
                     AND n.process_id = s.process_id AND n.ts_ms > s.ts_ms
                     AND n.ts_ms <= ?2 + ?4)",
        )?
        .query_row(
            params![gpu_id, ts, CRASH_WINDOW_MS, CRASH_WINDOW_MS + 300_000],
            |r| r.get(0),
        )?;
    let Some(last) = last else {
        return Ok(false);
    };
    let after: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM samples WHERE gpu_id = ?1 AND ts_ms > ?2 LIMIT 1")?
        .query_row(params![gpu_id, last], |r| r.get(0))
        .optional()?;
    // None runs on in the minute after the window (a helper process that ends beside a job
    // running on is no crash).
    let running: Option<i64> = conn
        .prepare_cached(
            "SELECT 1 FROM process_samples WHERE gpu_id = ?1 AND ts_ms > ?2 + ?3
               AND ts_ms <= ?2 + 2 * ?3 LIMIT 1",
        )?
        .query_row(params![gpu_id, ts, CRASH_WINDOW_MS], |r| r.get(0))
        .optional()?;
    Ok(after.is_some() && running.is_none())
}

/// The judgement of the XID of `code` on GPU `gpu_id` at `ts` from the stored evidence,
/// with the class an `[[xid.override]]` forces (`None`: none does).
pub fn judged(
    conn: &Connection,
    gpu_id: i64,
    code: i64,
    ts: TsMs,
    forced: Option<XidClass>,
) -> Result<Verdict, StoreError> {
    let (other_jobs, crash) = evidence(conn, gpu_id, code, ts)?;
    Ok(judge(&Evidence {
        code,
        forced,
        other_jobs,
        crash,
    }))
}
