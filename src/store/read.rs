//! Status and small lookups: what `gpuwatch status` and the demo show per GPU (inventory,
//! newest sample, processes, failing metrics), the newest sample time, the training source's
//! health, and the rollup rows tests compare. Time series live elsewhere: the evaluator's
//! time slices in `history.rs`, display series and window aggregates in `window`.
//!
//! Invariants:
//! - Every function takes a plain `&Connection` (normally from [`super::open_read_only`]) and
//!   only reads; each is a handful of index lookups or one primary-key range scan.
//! - Time is a parameter (`now_ms`), never the wall clock, so replays and tests agree.
//! - Values come back in the model's types: NULL is `None`, 0 is `Some(0)`.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::StoreError;
use super::rows::sample_metric_columns;
use crate::model::{
    GpuHolder, GpuInventory, GpuSample, MetricError, Placement, SampleStatus, TsMs,
};

/// One GPU as `gpuwatch status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuStatusRow {
    pub host: String,
    /// The GPU's inventory; `uuid` is always set, the rest only if `inventory_known`.
    pub inventory: GpuInventory,
    /// False for a GPU seen in samples before any inventory report.
    pub inventory_known: bool,
    pub first_seen_ms: TsMs,
    pub last_seen_ms: TsMs,
    /// When the GPU was first reported lost (fallen off the bus); None when it is not.
    pub lost_at_ms: Option<TsMs>,
    /// The newest sample, if one is still stored.
    pub latest: Option<GpuSample>,
    /// `now_ms - latest.ts_ms`.
    pub age_ms: Option<i64>,
    /// Processes on the GPU at the newest sample's timestamp.
    pub processes: Vec<GpuProcessRow>,
    /// Who the kubelet says holds the GPU now (`None`: no allocation known).
    pub holder: Option<GpuHolder>,
    /// The GPU's XIDs of the last [`RECENT_XID_MS`], one per code (the health verdict
    /// names the hardware's with the action to take).
    pub recent_xids: Vec<RecentXid>,
}

/// A MIG instance not sampled for this long while its parent is counts as destroyed.
pub const DESTROYED_AFTER_MS: i64 = 60_000;

/// How far back the health verdict looks for XIDs: a day.
pub const RECENT_XID_MS: i64 = 86_400_000;

pub use crate::model::RecentXid;

impl GpuStatusRow {
    /// The pod holding the GPU: the kubelet's allocation, else the one pod its processes
    /// belong to (the rule the evaluator's `Gpu::pod` follows too).
    pub fn pod(&self) -> Option<crate::attribution::SharedPod<'_>> {
        match &self.holder {
            Some(h) => Some(h.as_shared_pod()),
            None => crate::attribution::shared_pod(
                self.processes.iter().filter_map(|p| p.placement.as_ref()),
            ),
        }
    }
}

/// A process using a GPU at some tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProcessRow {
    pub pid: u32,
    pub start_time_ms: TsMs,
    pub name: Option<String>,
    pub user: Option<String>,
    pub used_mem_bytes: Option<u64>,
    /// Its container, pod and Slurm job; `None` when its cgroup was not read.
    pub placement: Option<Placement>,
}

/// A [`GpuHolder`] from `pod, namespace, container, resource, training_job` columns starting
/// at `at`.
pub(crate) fn holder_from_row(r: &Row, at: usize) -> rusqlite::Result<GpuHolder> {
    Ok(GpuHolder {
        pod: r.get(at)?,
        namespace: r.get(at + 1)?,
        container: r.get(at + 2)?,
        resource: r.get(at + 3)?,
        job: r.get(at + 4)?,
    })
}

/// The `processes` placement columns, in this order, after the columns a query selects first.
pub(crate) const PLACEMENT_COLUMNS: &str = "p.placement_known, p.runtime, p.container_id, \
     p.pod_uid, p.pod, p.namespace, p.container, p.slurm_job, p.slurm_step, p.slurm_job_name, \
     p.slurm_array, p.unit, p.slurm_nodes";

/// The placement read from [`PLACEMENT_COLUMNS`] starting at column `at`.
pub(crate) fn placement_from_row(r: &Row, at: usize) -> rusqlite::Result<Option<Placement>> {
    if r.get::<_, Option<i64>>(at)?.is_none() {
        return Ok(None);
    }
    Ok(Some(Placement {
        runtime: r.get(at + 1)?,
        container_id: r.get(at + 2)?,
        pod_uid: r.get(at + 3)?,
        pod: r.get(at + 4)?,
        namespace: r.get(at + 5)?,
        container: r.get(at + 6)?,
        slurm_job: r
            .get::<_, Option<i64>>(at + 7)?
            .and_then(|j| u64::try_from(j).ok()),
        slurm_step: r.get(at + 8)?,
        slurm_job_name: r.get(at + 9)?,
        slurm_array: r.get(at + 10)?,
        unit: r.get(at + 11)?,
        slurm_nodes: r.get(at + 12)?,
    }))
}

/// A metric that NVML fails to read on some GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricErrorRow {
    pub host: String,
    pub gpu_index: Option<u32>,
    pub error: MetricError,
}

/// One GPU-minute of `rollups_1m` (a subset of the columns: see `docs/SCHEMA.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct RollupRow {
    pub ts_ms: TsMs,
    pub gpu_uuid: String,
    pub n: i64,
    pub n_missed: i64,
    pub n_lost: i64,
    /// (min, avg, max) of the utilisation in percent.
    pub util_gpu: (Option<i64>, Option<f64>, Option<i64>),
    /// (min, avg, max) of the used memory in bytes.
    pub mem_used: (Option<i64>, Option<f64>, Option<i64>),
    /// (min, avg, max) of the temperature in °C.
    pub temp: (Option<i64>, Option<f64>, Option<i64>),
    /// (min, avg, max) of the power in mW.
    pub power: (Option<i64>, Option<f64>, Option<i64>),
    pub ecc_uncorrected_max: Option<i64>,
    pub throttle_reasons_or: Option<u64>,
}

/// One row of `training_source`: the training-metrics source's health for one host and role.
/// Times are the evaluation clock's (the end of the polled range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainingSourceRow {
    pub host: String,
    /// `step` or `loss`.
    pub role: String,
    pub query: String,
    pub last_attempt_ms: TsMs,
    pub last_success_ms: Option<TsMs>,
    pub last_error_ms: Option<TsMs>,
    /// `unreachable`, `timeout`, `http_5xx`, ... (see `training::FetchError::kind`).
    pub last_error_kind: Option<String>,
    pub last_error: Option<String>,
    /// The latest poll that returned at least one finite point; `None`: this host never had
    /// training metrics for the role (so `training_metrics_unavailable` must not fire).
    pub last_nonempty_ms: Option<TsMs>,
    /// The newest point timestamp ever received.
    pub last_point_ms: Option<TsMs>,
    /// Series in the latest successful answer.
    pub last_series: Option<u64>,
    /// Failed polls since the last success (0 = the source answers).
    pub consecutive_failures: u64,
    pub skipped_non_finite: u64,
}

const HOST_FILTER: &str = "(?1 IS NULL OR h.name = ?1)";

/// Inventory, newest sample, lost flag, age and live processes of every GPU (of `host`, or
/// of all hosts), ordered by host and index.
pub fn latest_per_gpu(
    conn: &Connection,
    host: Option<&str>,
    now_ms: TsMs,
) -> Result<Vec<GpuStatusRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT h.name, g.id, g.uuid, g.gpu_index, g.name, g.serial, g.pci_bus_id,
           g.driver_version, g.cuda_driver_version, g.nvml_version, g.memory_total_bytes,
           g.power_limit_mw, g.power_limit_min_mw, g.power_limit_max_mw, g.temp_slowdown_c,
           g.temp_shutdown_c, g.temp_gpu_max_c, g.pcie_max_gen, g.pcie_max_width,
           g.persistence_mode, g.mig_mode, g.first_seen_ms, g.last_seen_ms, g.last_sample_ms,
           g.lost_at_ms, g.gpu_instance_id, g.gpu_instance_profile, g.parent_uuid
         FROM gpus g JOIN hosts h ON h.id = g.host_id
         WHERE {HOST_FILTER}
         ORDER BY h.name, g.gpu_index IS NULL, g.gpu_index, g.gpu_instance_id IS NOT NULL,
           g.gpu_instance_id, g.uuid"
    ))?;
    let gpus = stmt
        .query_map(params![host], |r| {
            let index: Option<u32> = r.get(3)?;
            let row = GpuStatusRow {
                host: r.get(0)?,
                inventory: GpuInventory {
                    index: index.unwrap_or_default(),
                    uuid: r.get(2)?,
                    name: r.get(4)?,
                    serial: r.get(5)?,
                    pci_bus_id: r.get(6)?,
                    driver_version: r.get(7)?,
                    cuda_driver_version: r.get(8)?,
                    nvml_version: r.get(9)?,
                    memory_total_bytes: u64_col(r, 10)?,
                    power_limit_mw: r.get(11)?,
                    power_limit_min_mw: r.get(12)?,
                    power_limit_max_mw: r.get(13)?,
                    temp_slowdown_c: r.get(14)?,
                    temp_shutdown_c: r.get(15)?,
                    temp_gpu_max_c: r.get(16)?,
                    pcie_max_gen: r.get(17)?,
                    pcie_max_width: r.get(18)?,
                    persistence_mode: r.get(19)?,
                    mig_mode: r.get(20)?,
                    mig: match (
                        r.get::<_, Option<u32>>(25)?,
                        r.get::<_, Option<String>>(26)?,
                    ) {
                        (Some(gpu_instance_id), Some(profile)) => Some(crate::model::MigInstance {
                            gpu_instance_id,
                            profile,
                            parent_uuid: r.get::<_, Option<String>>(27)?.unwrap_or_default(),
                        }),
                        _ => None,
                    },
                },
                inventory_known: index.is_some(),
                first_seen_ms: r.get(21)?,
                last_seen_ms: r.get(22)?,
                lost_at_ms: r.get(24)?,
                latest: None,
                age_ms: None,
                processes: Vec::new(),
                holder: None,
                recent_xids: Vec::new(),
            };
            Ok((row, r.get::<_, i64>(1)?, r.get::<_, Option<TsMs>>(23)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    // A MIG instance destroyed while gpuwatch ran has no sample since; its parent goes on.
    // An instance whose newest sample is a minute older than its parent's is gone: not listed.
    let newest: std::collections::HashMap<String, TsMs> = gpus
        .iter()
        .filter_map(|(row, _, last)| Some((row.inventory.uuid.clone(), (*last)?)))
        .collect();
    let gpus: Vec<_> = gpus
        .into_iter()
        .filter(|(row, _, last)| {
            let Some(m) = &row.inventory.mig else {
                return true;
            };
            match (newest.get(&m.parent_uuid), last) {
                (Some(parent), Some(own)) => *own + DESTROYED_AFTER_MS >= *parent,
                (Some(_), None) => false,
                (None, _) => true,
            }
        })
        .collect();
    let mut sample = conn.prepare_cached(concat!(
        "SELECT ts_ms, ",
        sample_metric_columns!(),
        " FROM samples WHERE ts_ms = ?1 AND gpu_id = ?2"
    ))?;
    let mut procs = conn.prepare_cached(&format!(
        "SELECT p.pid, p.start_time_ms, p.name, p.user, ps.used_mem_bytes, {PLACEMENT_COLUMNS}
         FROM process_samples ps JOIN processes p ON p.id = ps.process_id
         WHERE ps.ts_ms = ?1 AND ps.gpu_id = ?2 ORDER BY p.pid"
    ))?;
    let mut held = conn.prepare_cached(
        "SELECT pod, namespace, container, resource, training_job FROM gpu_holders
         WHERE gpu_id = ?1 AND to_ms IS NULL ORDER BY from_ms DESC LIMIT 1",
    )?;
    // Every GPU's recent XIDs in one query (the events of a day, by their time index), not
    // one per GPU: a scrape reads them for every GPU.
    let mut recent: std::collections::HashMap<i64, Vec<RecentXid>> =
        std::collections::HashMap::new();
    for x in conn
        .prepare_cached(
            "SELECT gpu_id, code, sum(coalesce(count, 1)), max(coalesce(last_ms, ts_ms)) AS last
             FROM events
             WHERE ts_ms >= ?1 AND kind = 'xid' AND code IS NOT NULL AND gpu_id IS NOT NULL
             GROUP BY gpu_id, code ORDER BY gpu_id, last DESC",
        )?
        .query_map(params![now_ms - RECENT_XID_MS], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                RecentXid {
                    code: r.get(1)?,
                    count: r.get(2)?,
                    last_ms: r.get(3)?,
                },
            ))
        })?
    {
        let (gpu, x) = x?;
        recent.entry(gpu).or_default().push(x);
    }
    let mut out = Vec::with_capacity(gpus.len());
    for (mut row, gpu_id, last_sample_ms) in gpus {
        row.holder = held
            .query_row(params![gpu_id], |r| holder_from_row(r, 0))
            .optional()?;
        row.recent_xids = recent.remove(&gpu_id).unwrap_or_default();
        if let Some(ts) = last_sample_ms {
            let uuid = row.inventory.uuid.clone();
            row.latest = sample
                .query_row(params![ts, gpu_id], |r| sample_from_row(r, uuid))
                .optional()?;
            if row.latest.is_some() {
                row.age_ms = Some(now_ms - ts);
                row.processes = procs
                    .query_map(params![ts, gpu_id], |r| {
                        Ok(GpuProcessRow {
                            pid: r.get(0)?,
                            start_time_ms: r.get(1)?,
                            name: r.get(2)?,
                            user: r.get(3)?,
                            used_mem_bytes: u64_col(r, 4)?,
                            placement: placement_from_row(r, 5)?,
                        })
                    })?
                    .collect::<Result<_, _>>()?;
            }
        }
        out.push(row);
    }
    Ok(out)
}

/// The newest timestamp written for `host` (or any host): `None` for an empty database.
pub fn last_sample_ts(conn: &Connection, host: Option<&str>) -> Result<Option<TsMs>, StoreError> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT max(g.last_sample_ms) FROM gpus g JOIN hosts h ON h.id = g.host_id
             WHERE {HOST_FILTER}"
        ))?
        .query_row(params![host], |r| r.get(0))?)
}

/// Failing metrics per GPU, most recent failure first.
pub fn metric_error_summary(
    conn: &Connection,
    host: Option<&str>,
) -> Result<Vec<MetricErrorRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT h.name, g.gpu_index, g.uuid, m.metric, m.error, m.count, m.first_ms, m.last_ms
         FROM metric_errors m JOIN gpus g ON g.id = m.gpu_id JOIN hosts h ON h.id = g.host_id
         WHERE {HOST_FILTER}
         ORDER BY m.last_ms DESC, h.name, g.gpu_index, m.metric"
    ))?;
    let rows = stmt.query_map(params![host], |r| {
        Ok(MetricErrorRow {
            host: r.get(0)?,
            gpu_index: r.get(1)?,
            error: MetricError {
                gpu_uuid: r.get(2)?,
                metric: r.get(3)?,
                error: r.get(4)?,
                count: u64_col(r, 5)?.unwrap_or_default(),
                first_ms: r.get(6)?,
                last_ms: r.get(7)?,
            },
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Rollups with `from_ms <= ts_ms < to_ms` (of `host`, or all), in time order.
pub fn rollups(
    conn: &Connection,
    host: Option<&str>,
    from_ms: TsMs,
    to_ms: TsMs,
) -> Result<Vec<RollupRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT r.ts_ms, g.uuid, r.n, r.n_missed, r.n_lost,
           r.util_gpu_min, r.util_gpu_avg, r.util_gpu_max, r.mem_used_min, r.mem_used_avg,
           r.mem_used_max, r.temp_min, r.temp_avg, r.temp_max, r.power_min, r.power_avg,
           r.power_max, r.ecc_uncorrected_max, r.throttle_reasons_or
         FROM rollups_1m r JOIN gpus g ON g.id = r.gpu_id JOIN hosts h ON h.id = g.host_id
         WHERE r.ts_ms >= ?2 AND r.ts_ms < ?3 AND (?1 IS NULL OR h.name = ?1)
         ORDER BY r.ts_ms, g.gpu_index",
    )?;
    let rows = stmt.query_map(params![host, from_ms, to_ms], |r| {
        Ok(RollupRow {
            ts_ms: r.get(0)?,
            gpu_uuid: r.get(1)?,
            n: r.get(2)?,
            n_missed: r.get(3)?,
            n_lost: r.get(4)?,
            util_gpu: (r.get(5)?, r.get(6)?, r.get(7)?),
            mem_used: (r.get(8)?, r.get(9)?, r.get(10)?),
            temp: (r.get(11)?, r.get(12)?, r.get(13)?),
            power: (r.get(14)?, r.get(15)?, r.get(16)?),
            ecc_uncorrected_max: r.get(17)?,
            throttle_reasons_or: r.get::<_, Option<i64>>(18)?.map(|v| v as u64),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The training source's status per role (of `host`, or of all hosts), by host and role.
pub fn training_sources(
    conn: &Connection,
    host: Option<&str>,
) -> Result<Vec<TrainingSourceRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT h.name, t.role, t.query, t.last_attempt_ms, t.last_success_ms, t.last_error_ms,
           t.last_error_kind, t.last_error, t.last_nonempty_ms, t.last_point_ms, t.last_series,
           t.consecutive_failures, t.skipped_non_finite
         FROM training_source t JOIN hosts h ON h.id = t.host_id
         WHERE {HOST_FILTER}
         ORDER BY h.name, t.role"
    ))?;
    let rows = stmt.query_map(params![host], |r| {
        Ok(TrainingSourceRow {
            host: r.get(0)?,
            role: r.get(1)?,
            query: r.get(2)?,
            last_attempt_ms: r.get(3)?,
            last_success_ms: r.get(4)?,
            last_error_ms: r.get(5)?,
            last_error_kind: r.get(6)?,
            last_error: r.get(7)?,
            last_nonempty_ms: r.get(8)?,
            last_point_ms: r.get(9)?,
            last_series: u64_col(r, 10)?,
            consecutive_failures: u64_col(r, 11)?.unwrap_or_default(),
            skipped_non_finite: u64_col(r, 12)?.unwrap_or_default(),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Reads an INTEGER column holding a u64 (stored saturated at `i64::MAX`).
pub(super) fn u64_col(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<u64>> {
    Ok(r.get::<_, Option<i64>>(idx)?.map(|v| v.max(0) as u64))
}

/// Maps `ts_ms, <sample_metric_columns>` (columns 0..=41) to a [`GpuSample`].
pub(super) fn sample_from_row(r: &Row<'_>, uuid: String) -> rusqlite::Result<GpuSample> {
    Ok(GpuSample {
        ts_ms: r.get(0)?,
        uuid,
        status: SampleStatus::from_i64(r.get(1)?),
        util_gpu_pct: r.get(2)?,
        util_mem_pct: r.get(3)?,
        mem_used_bytes: u64_col(r, 4)?,
        mem_free_bytes: u64_col(r, 5)?,
        mem_total_bytes: u64_col(r, 6)?,
        temp_c: r.get(7)?,
        fan_pct: r.get(8)?,
        clock_sm_mhz: r.get(9)?,
        clock_mem_mhz: r.get(10)?,
        power_mw: r.get(11)?,
        power_limit_mw: r.get(12)?,
        energy_mj: u64_col(r, 13)?,
        pstate: r.get(14)?,
        pcie_tx_kbs: r.get(15)?,
        pcie_rx_kbs: r.get(16)?,
        pcie_gen: r.get(17)?,
        pcie_width: r.get(18)?,
        throttle_reasons: r.get::<_, Option<i64>>(19)?.map(|v| v as u64),
        ecc_corrected: u64_col(r, 20)?,
        ecc_uncorrected: u64_col(r, 21)?,
        retired_pages: r.get(22)?,
        remapped_rows_correctable: r.get(23)?,
        remapped_rows_uncorrectable: r.get(24)?,
        remap_pending: r.get(25)?,
        remap_failure: r.get(26)?,
        process_count: r.get(27)?,
        tensor_active_pct: r.get(28)?,
        sm_active_pct: r.get(29)?,
        sm_occupancy_pct: r.get(30)?,
        dram_active_pct: r.get(31)?,
        recovery_action: r.get(32)?,
        nvlink_links_up: r.get(33)?,
        nvlink_down_mask: r.get(34)?,
        nvlink_crc_flit_errors: u64_col(r, 35)?,
        nvlink_crc_data_errors: u64_col(r, 36)?,
        nvlink_replay_errors: u64_col(r, 37)?,
        nvlink_recovery_errors: u64_col(r, 38)?,
        nvlink_kib: u64_col(r, 39)?,
        fabric_state: r.get(40)?,
        fabric_status: r.get(41)?,
    })
}
