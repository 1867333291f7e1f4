//! What this node tells the fleet about each of its GPUs' training jobs, for the fleet's own
//! Prometheus and Alertmanager to join across nodes (docs/FLEET.md): the job's identity
//! (`training_job`, `crate::attribution::job`), when the step joined to the GPU last
//! advanced, and — while the step is stalled — when the GPU's own activity entered the stall
//! and how (`stall`); per job, its step rate here and the means over its GPUs here of SM
//! clock, utilisation and power (what a straggler host is found by, without a GPU-level join
//! in the fleet's rules).
//!
//! Read at scrape time from the store by the one scraper (`/metrics` and remote write), with a
//! [`Memo`]: each step series is read incrementally into a window [`Series`] (6 hours), and
//! a stall's start is computed once per stall from the GPU's 1-s samples, then only checked
//! against the samples that arrived since.
//!
//! Invariants: only this host's GPUs; a value not known is absent (no job, no step, no power
//! readings: no series), never 0; a stall's start is taken from this node's samples, on
//! this node's clock, and does not move while the stall lasts unless the GPU worked again.

pub mod stall;
pub mod timeline;

use std::collections::HashMap;

use rusqlite::Connection;

use crate::attribution::job::TrainingJob;
use crate::model::TsMs;
use crate::rules::ast::WindowFn;
use crate::rules::eval::series::{Series, Stats};
use crate::rules::eval::window::stats_for;
use crate::store::StoreError;
use crate::store::read::GpuStatusRow;
use crate::views::Joins;
pub use stall::Signature;

/// How far back a step series is kept: the longest normal pause is learned over 6 hours.
const STEP_KEEP_MS: i64 = 6 * 3_600_000 + 60_000;
/// How far before the last progress a stall's samples are read (the GPU's busy level).
const BUSY_BEFORE_MS: i64 = 30 * 60_000;

/// One GPU as the fleet sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetGpu {
    pub index: u32,
    pub uuid: String,
    pub job: Option<TrainingJob>,
    pub pod: Option<(String, String)>,
    pub slurm_job: Option<u64>,
    /// When the step joined to this GPU last advanced (while that step is reported).
    pub last_progress_ms: Option<TsMs>,
    pub steps_per_second: Option<f64>,
    /// While stalled: when the GPU entered the stall, and its signature.
    pub stall: Option<(TsMs, Signature)>,
}

/// One training job on this host: what the fleet compares across its hosts (a straggler
/// host), each a mean over the job's GPUs here of their last 5 minutes.
#[derive(Debug, Clone, PartialEq)]
pub struct JobHost {
    pub job: TrainingJob,
    /// The job's step rate as this node sees it (the mean of its GPUs' step series' rates).
    pub steps_per_second: Option<f64>,
    pub sm_clock_hz: Option<f64>,
    pub utilization_ratio: Option<f64>,
    pub power_w: Option<f64>,
}

/// This host's GPUs and jobs as the fleet sees them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fleet {
    pub gpus: Vec<FleetGpu>,
    pub jobs: Vec<JobHost>,
}

/// How far back the per-job means reach.
const MEANS_OVER_MS: i64 = 5 * 60_000;

/// What the reader keeps between scrapes.
#[derive(Default)]
pub struct Memo {
    /// Step series by id, with the time they were read up to.
    steps: HashMap<i64, (Series, TsMs)>,
    /// GPU id → the stall found on it.
    stalls: HashMap<i64, StallMemo>,
}

/// A stall found: its busy power before, where its samples were checked up to, its start.
struct StallMemo {
    progress_ms: TsMs,
    checked_to: TsMs,
    busy_w: f64,
    start: TsMs,
}

impl Memo {
    fn step_series(
        &mut self,
        conn: &Connection,
        id: i64,
        now: TsMs,
    ) -> Result<&Series, StoreError> {
        let stats = [
            WindowFn::UnchangedFor,
            WindowFn::Changes,
            WindowFn::MaxUnchangedFor,
            WindowFn::Rate,
            WindowFn::LastChange,
        ]
        .into_iter()
        .fold(Stats::NONE, |s, f| s.union(stats_for(f)));
        let (series, read_to) = self
            .steps
            .entry(id)
            .or_insert_with(|| (Series::new(STEP_KEEP_MS, stats), now - STEP_KEEP_MS));
        // Points may be stored a little late (the fetcher's lag): re-read the last minutes;
        // `push` ignores points not newer than the newest.
        let from = (*read_to - 10 * 60_000).max(now - STEP_KEEP_MS);
        for (t, v) in crate::store::history::training_points_of(conn, id, from, now)? {
            series.push(t, v);
        }
        *read_to = now;
        Ok(series)
    }
}

/// Every GPU of `rows` (this host's) as the fleet sees it at `now`.
pub fn read(
    conn: &Connection,
    host: &str,
    rows: &[GpuStatusRow],
    joins: &Joins,
    job_label: Option<&str>,
    memo: &mut Memo,
    now: TsMs,
) -> Result<Fleet, StoreError> {
    let ids: HashMap<String, i64> = crate::store::history::gpus(conn, Some(host))?
        .into_iter()
        .map(|g| (g.inventory.uuid, g.gpu_id))
        .collect();
    let mut out = Vec::new();
    let mut seen_series = Vec::new();
    for row in rows.iter().filter(|r| r.host == host) {
        let inv = &row.inventory;
        let (step_id, _) = joins.chosen(host, inv.index);
        let pod = row.pod();
        let slurm_job = crate::attribution::shared_slurm_job(
            row.processes.iter().filter_map(|p| p.placement.as_ref()),
        );
        let job = joins.training_job(row, job_label);
        let mut g = FleetGpu {
            index: inv.index,
            uuid: inv.uuid.clone(),
            job,
            pod: pod.map(|p| (p.namespace.to_string(), p.pod.to_string())),
            slurm_job,
            last_progress_ms: None,
            steps_per_second: None,
            stall: None,
        };
        let gpu_id = ids.get(&inv.uuid).copied();
        if let Some(id) = step_id {
            seen_series.push(id);
            let judged = stall::step(memo.step_series(conn, id, now)?, now);
            if let Some(st) = judged {
                g.last_progress_ms = Some(st.last_progress_ms);
                g.steps_per_second = st.per_second;
                if st.stalled
                    && let Some(gpu_id) = gpu_id
                {
                    let floor = inv
                        .name
                        .as_deref()
                        .and_then(crate::specs::lookup)
                        .and_then(|m| m.reserved_mib)
                        .unwrap_or_else(crate::specs::largest_reserved_mib);
                    g.stall = stall_of(
                        conn,
                        memo,
                        gpu_id,
                        st.last_progress_ms,
                        f64::from(floor),
                        now,
                    )?;
                }
            }
        }
        if g.stall.is_none()
            && let Some(id) = gpu_id
        {
            memo.stalls.remove(&id);
        }
        out.push(g);
    }
    memo.steps.retain(|id, _| seen_series.contains(id));
    let jobs = job_hosts(conn, &out, &ids, now)?;
    Ok(Fleet { gpus: out, jobs })
}

/// The mean of the known values; `None` without any.
fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, sum) = v.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    (n > 0).then(|| sum / n as f64)
}

/// Each job's means over its GPUs on this host.
fn job_hosts(
    conn: &Connection,
    gpus: &[FleetGpu],
    ids: &HashMap<String, i64>,
    now: TsMs,
) -> Result<Vec<JobHost>, StoreError> {
    let mut jobs: Vec<&TrainingJob> = gpus.iter().filter_map(|g| g.job.as_ref()).collect();
    jobs.sort();
    jobs.dedup();
    let mut out = Vec::new();
    for job in jobs {
        let mine: Vec<&FleetGpu> = gpus
            .iter()
            .filter(|g| g.job.as_ref() == Some(job))
            .collect();
        // Per GPU: the means of its sampled readings of the last 5 minutes (clock, util, power).
        let mut per_gpu: Vec<[Option<f64>; 3]> = Vec::new();
        for g in &mine {
            let Some(id) = ids.get(&g.uuid) else { continue };
            per_gpu.push(crate::store::analysis::gpu_means(
                conn,
                *id,
                now - MEANS_OVER_MS,
                now,
            )?);
        }
        let across = |k: usize| mean(per_gpu.iter().filter_map(|m| m[k]));
        out.push(JobHost {
            job: job.clone(),
            steps_per_second: mean(mine.iter().filter_map(|g| g.steps_per_second)),
            sm_clock_hz: across(0).map(|mhz| mhz * 1e6),
            utilization_ratio: across(1).map(|pct| pct / 100.0),
            power_w: across(2),
        });
    }
    Ok(out)
}

/// The GPU's stall since `progress_ms`: found once from its samples, then checked only
/// against the samples since (a GPU that worked again moves its start; its signature is
/// always the last minute's).
fn stall_of(
    conn: &Connection,
    memo: &mut Memo,
    gpu_id: i64,
    progress_ms: TsMs,
    mem_floor_mib: f64,
    now: TsMs,
) -> Result<Option<(TsMs, Signature)>, StoreError> {
    use crate::store::analysis::gpu_points;
    let Some(m) = memo
        .stalls
        .get_mut(&gpu_id)
        .filter(|m| m.progress_ms == progress_ms)
    else {
        let points = gpu_points(conn, gpu_id, progress_ms - BUSY_BEFORE_MS, now)?;
        return Ok(
            match stall::gpu_stall(&points, progress_ms, now, mem_floor_mib) {
                Some((start, sig, busy_w)) => {
                    let found = StallMemo {
                        progress_ms,
                        checked_to: now,
                        busy_w,
                        start,
                    };
                    memo.stalls.insert(gpu_id, found);
                    Some((start, sig))
                }
                None => {
                    memo.stalls.remove(&gpu_id);
                    None
                }
            },
        );
    };
    // The last minute (the signature) and whatever arrived since the last check.
    let recent = gpu_points(conn, gpu_id, m.checked_to.min(now - 60_000), now)?;
    let newer = &recent[recent.partition_point(|p| p.ts_ms <= m.checked_to)..];
    match stall::after_last_working(newer, m.busy_w) {
        Some(Some(t)) => m.start = t,
        Some(None) => {
            // Working now: not stalled.
            memo.stalls.remove(&gpu_id);
            return Ok(None);
        }
        None => {}
    }
    m.checked_to = now;
    let sig = stall::signature(&stall::last_minute(&recent, now), m.busy_w, mem_floor_mib);
    Ok(sig.map(|s| (m.start, s)))
}
