//! The publish step of an import: hosts, GPU inventory (newer values win), processes, then
//! `INSERT ... SELECT` of the staged samples and process samples, inside the caller's one
//! IMMEDIATE transaction.
//!
//! Invariants: staged importer-local ids are mapped to row ids through TEMP map tables; rows
//! are upserted by their natural keys (a later staged row wins); hosts' first/last/raw-floor
//! times and GPUs' last sample times only widen.
//! - Process rows are placed at the time of the nearest sample of their GPU within
//!   [`PROCESS_SNAP_MS`] (imported or already stored), so `process_count` sees them.
//! - A host whose `--query-compute-apps` log is part of the import gets `process_count` on
//!   its samples of the imported span; without one the counts stay NULL (not observed).
//! - A GPU with a PCI address takes the host's kernel-log XIDs that named only that address.

use rusqlite::{Connection, OptionalExtension, params};

/// A process row is moved to the time of the nearest sample of its GPU at most this far away
/// (the earlier one on a tie): `--query-compute-apps` runs as its own call, a little after
/// the `--query-gpu` call of the same poll, and rules count a GPU's processes at its sample
/// times. Without such a sample the row keeps its own time.
pub const PROCESS_SNAP_MS: i64 = 1_000;

use super::super::StoreError;
use super::super::events;
use super::super::rows::{
    TRAINING_SAMPLE_UPSERT, TRAINING_SERIES_UPSERT, insert_holder, labels_json,
    sample_metric_columns,
};
use super::super::write::ensure_host;
use super::fused::{self, MinuteRollups};
use super::{HOLDER_MERGE_MS, ImportHolder, ImportPlan, Published};
use crate::model::{TrainingPoint, TsMs};
use crate::xid::nvrm::PciAddr;

pub(super) fn sat(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// Inventory columns: the imported value wins when the import is at least as recent.
macro_rules! newer {
    ($c:literal) => {
        concat!(
            $c,
            " = CASE WHEN excluded.last_seen_ms >= last_seen_ms THEN coalesce(excluded.",
            $c,
            ", ",
            $c,
            ") ELSE coalesce(",
            $c,
            ", excluded.",
            $c,
            ") END"
        )
    };
}

const GPU_UPSERT: &str = concat!(
    "INSERT INTO gpus (host_id, uuid, gpu_index, name, serial, pci_bus_id, driver_version,
       memory_total_bytes, power_limit_mw, power_limit_min_mw, power_limit_max_mw,
       temp_slowdown_c, temp_shutdown_c, temp_gpu_max_c, pcie_max_gen, pcie_max_width,
       persistence_mode, mig_mode, first_seen_ms, last_seen_ms, last_sample_ms)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
       ?19, ?20, ?21)
     ON CONFLICT (host_id, uuid) DO UPDATE SET ",
    newer!("gpu_index"),
    ", ",
    newer!("name"),
    ", ",
    newer!("serial"),
    ", ",
    newer!("pci_bus_id"),
    ", ",
    newer!("driver_version"),
    ", ",
    newer!("memory_total_bytes"),
    ", ",
    newer!("power_limit_mw"),
    ", ",
    newer!("power_limit_min_mw"),
    ", ",
    newer!("power_limit_max_mw"),
    ", ",
    newer!("temp_slowdown_c"),
    ", ",
    newer!("temp_shutdown_c"),
    ", ",
    newer!("temp_gpu_max_c"),
    ", ",
    newer!("pcie_max_gen"),
    ", ",
    newer!("pcie_max_width"),
    ", ",
    newer!("persistence_mode"),
    ", ",
    newer!("mig_mode"),
    ",
       first_seen_ms = min(first_seen_ms, excluded.first_seen_ms),
       last_seen_ms = max(last_seen_ms, excluded.last_seen_ms),
       last_sample_ms = CASE WHEN excluded.last_sample_ms IS NULL THEN last_sample_ms
                             ELSE max(coalesce(last_sample_ms, excluded.last_sample_ms),
                                      excluded.last_sample_ms) END
     RETURNING id"
);

pub(super) fn publish_rows(
    conn: &Connection,
    plan: &ImportPlan,
    staged_minutes: &MinuteRollups,
    staged_rows: &[u64],
) -> Result<Published, StoreError> {
    let mut host_ids = Vec::with_capacity(plan.hosts.len());
    for h in &plan.hosts {
        host_ids.push(ensure_host(conn, h)?);
    }
    let mut gpu_ids = Vec::with_capacity(plan.gpus.len());
    let mut spans: Vec<Option<(TsMs, TsMs)>> = vec![None; plan.hosts.len()];
    let mut widen = |host: usize, a: TsMs, b: TsMs| {
        let s = &mut spans[host];
        *s = Some(s.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
    };
    for (local, g) in plan.gpus.iter().enumerate() {
        let inv = &g.inventory;
        let id: i64 = conn.prepare_cached(GPU_UPSERT)?.query_row(
            params![
                host_ids[g.host],
                inv.uuid,
                g.index_known.then_some(inv.index),
                inv.name,
                inv.serial,
                inv.pci_bus_id,
                inv.driver_version,
                sat(inv.memory_total_bytes),
                inv.power_limit_mw,
                inv.power_limit_min_mw,
                inv.power_limit_max_mw,
                inv.temp_slowdown_c,
                inv.temp_shutdown_c,
                inv.temp_gpu_max_c,
                inv.pcie_max_gen,
                inv.pcie_max_width,
                inv.persistence_mode,
                inv.mig_mode,
                g.first_ms,
                g.last_ms,
                g.last_sample_ms
            ],
            |r| r.get(0),
        )?;
        conn.prepare_cached("INSERT INTO gw_imp_gpu_map (local, gpu_id) VALUES (?1, ?2)")?
            .execute(params![local as i64, id])?;
        gpu_ids.push(id);
        // Kernel-log XIDs of the host that named only this GPU's address now have their GPU.
        if let Some(pci) = inv.pci_bus_id.as_deref().and_then(PciAddr::parse) {
            events::join_address(conn, host_ids[g.host], &pci, id)?;
        }
        widen(g.host, g.first_ms, g.last_ms);
    }
    // Before the samples land: which hosts' minutes were rolled up while staging.
    let mut rollups: Vec<Option<u64>> = Vec::with_capacity(plan.hosts.len());
    for (h, &host_id) in host_ids.iter().enumerate() {
        let locals: Vec<usize> = (0..plan.gpus.len())
            .filter(|&l| plan.gpus[l].host == h)
            .collect();
        let usable =
            staged_minutes.host_usable(conn, host_id, &locals, plan.host_span(h), staged_rows)?;
        rollups.push(usable.then_some(0));
    }
    let samples = conn.execute(
        concat!(
            "INSERT OR REPLACE INTO samples (ts_ms, gpu_id, ",
            sample_metric_columns!(),
            ") SELECT s.ts_ms, m.gpu_id, ",
            sample_metric_columns!(),
            " FROM gw_imp_samples s JOIN gw_imp_gpu_map m ON m.local = s.gpu ORDER BY s.rowid"
        ),
        [],
    )?;
    for (local, g) in plan.gpus.iter().enumerate() {
        if let Some(n) = &mut rollups[g.host] {
            *n += fused::publish_gpu(conn, local, gpu_ids[local])? as u64;
        }
    }
    for (r, g) in plan.gpu_refs.iter().enumerate() {
        if let Some(g) = g {
            conn.prepare_cached("INSERT INTO gw_imp_ref_map (ref, gpu_id) VALUES (?1, ?2)")?
                .execute(params![r as i64, gpu_ids[*g]])?;
        }
    }
    for (local, p) in plan.processes.iter().enumerate() {
        let id: i64 = conn
            .prepare_cached(
                "INSERT INTO processes (host_id, pid, start_time_ms, name, first_seen_ms, last_seen_ms)
                 VALUES (?1, ?2, 0, ?3, ?4, ?5)
                 ON CONFLICT (host_id, pid, start_time_ms) DO UPDATE SET
                   name = coalesce(excluded.name, name),
                   first_seen_ms = min(first_seen_ms, excluded.first_seen_ms),
                   last_seen_ms = max(last_seen_ms, excluded.last_seen_ms)
                 RETURNING id",
            )?
            .query_row(
                params![host_ids[p.host], p.pid, p.name, p.first_ms, p.last_ms],
                |r| r.get(0),
            )?;
        conn.prepare_cached("INSERT INTO gw_imp_proc_map (local, process_id) VALUES (?1, ?2)")?
            .execute(params![local as i64, id])?;
        widen(p.host, p.first_ms, p.last_ms);
    }
    let process_samples = conn.execute(
        "INSERT OR REPLACE INTO process_samples (ts_ms, gpu_id, process_id, used_mem_bytes)
         SELECT coalesce((SELECT s.ts_ms FROM samples s
                          WHERE s.gpu_id = r.gpu_id AND s.ts_ms BETWEEN a.ts_ms - ?1 AND a.ts_ms + ?1
                          ORDER BY abs(s.ts_ms - a.ts_ms), s.ts_ms LIMIT 1), a.ts_ms),
                r.gpu_id, p.process_id, a.used_mem_bytes FROM gw_imp_apps a
         JOIN gw_imp_ref_map r ON r.ref = a.gpu_ref JOIN gw_imp_proc_map p ON p.local = a.proc
         ORDER BY a.rowid",
        [PROCESS_SNAP_MS],
    )?;
    for (host, span) in spans.iter().enumerate() {
        if let (Some((first, last)), true) =
            (span, plan.processes_observed.get(host) == Some(&true))
        {
            count_processes(conn, host_ids[host], *first, *last)?;
        }
    }
    for (host, span) in spans.iter().enumerate() {
        if let Some((first, last)) = span {
            conn.prepare_cached(
                "UPDATE hosts SET first_seen_ms = min(coalesce(first_seen_ms, ?1), ?1),
                   raw_floor_ms = min(coalesce(raw_floor_ms, ?1), ?1),
                   last_seen_ms = max(coalesce(last_seen_ms, ?2), ?2) WHERE id = ?3",
            )?
            .execute(params![first, last, host_ids[host]])?;
        }
    }
    let mut holders = 0;
    for h in &plan.holders {
        holders += publish_holder(conn, gpu_ids[h.gpu], h)?;
    }
    let mut training_points = 0;
    for (host, p) in &plan.training {
        publish_training(conn, host_ids[*host], p)?;
        training_points += 1;
    }
    Ok(Published {
        samples: samples as u64,
        process_samples: process_samples as u64,
        holders,
        training_points,
        rollups,
    })
}

/// Writes one imported holder interval: extends the GPU's latest interval before it when
/// that is the same pod and ends within [`HOLDER_MERGE_MS`] of it, else adds it. Returns
/// the rows added (0 when merged).
fn publish_holder(conn: &Connection, gpu_id: i64, h: &ImportHolder) -> Result<u64, StoreError> {
    let last: Option<(TsMs, Option<TsMs>, String, String, String)> = conn
        .prepare_cached(
            "SELECT from_ms, to_ms, pod, namespace, container FROM gpu_holders
             WHERE gpu_id = ?1 AND from_ms <= ?2 ORDER BY from_ms DESC LIMIT 1",
        )?
        .query_row(params![gpu_id, h.from_ms], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    let g = &h.holder;
    if let Some((from, to, pod, ns, container)) = last
        && pod == g.pod
        && ns == g.namespace
        && container == g.container
    {
        match to {
            None => return Ok(0),
            Some(to) if to + HOLDER_MERGE_MS >= h.from_ms => {
                conn.prepare_cached(
                    "UPDATE gpu_holders SET to_ms = max(to_ms, ?3) WHERE gpu_id = ?1 AND from_ms = ?2",
                )?
                .execute(params![gpu_id, from, h.to_ms])?;
                return Ok(0);
            }
            Some(_) => {}
        }
    }
    insert_holder(conn, gpu_id, h.from_ms, Some(h.to_ms), g)?;
    Ok(1)
}

/// Writes one training point of host `host_id` (the series' identity as the daemon's).
fn publish_training(conn: &Connection, host_id: i64, p: &TrainingPoint) -> Result<(), StoreError> {
    let series: i64 = conn.prepare_cached(TRAINING_SERIES_UPSERT)?.query_row(
        params![host_id, p.name, labels_json(&p.labels), p.ts_ms],
        |r| r.get(0),
    )?;
    conn.prepare_cached(TRAINING_SAMPLE_UPSERT)?
        .execute(params![p.ts_ms, series, p.value])?;
    Ok(())
}

/// Sets `process_count` of the host's ok samples in `[first, last]` from the process rows
/// that landed on them (0 where none did): the import says these processes were observed.
fn count_processes(
    conn: &Connection,
    host_id: i64,
    first: TsMs,
    last: TsMs,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE samples SET process_count = 0
         WHERE status = 0 AND ts_ms BETWEEN ?2 AND ?3
           AND gpu_id IN (SELECT id FROM gpus WHERE host_id = ?1)",
    )?
    .execute(params![host_id, first, last])?;
    conn.prepare_cached(
        "UPDATE samples SET process_count = c.n
         FROM (SELECT ps.ts_ms, ps.gpu_id, count(*) AS n FROM process_samples ps
               WHERE ps.ts_ms BETWEEN ?2 AND ?3
                 AND ps.gpu_id IN (SELECT id FROM gpus WHERE host_id = ?1)
               GROUP BY ps.ts_ms, ps.gpu_id) AS c
         WHERE samples.ts_ms = c.ts_ms AND samples.gpu_id = c.gpu_id AND samples.status = 0",
    )?
    .execute(params![host_id, first, last])?;
    Ok(())
}
