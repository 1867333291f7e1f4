//! The rows of one tick: the SQL that turns a [`TickBatch`] into rows, inside the caller's
//! transaction, resolving GPU, process and training-series ids through the [`Caches`].
//!
//! Invariants:
//! - Rows are upserted by their natural key, so writing the same tick twice is harmless
//!   (except for events, which have no natural key; an XID reported by both NVML and the
//!   kernel log is one row, `events.rs`).
//! - `None` is bound as SQL NULL and `Some(0)` as 0; u64 values above `i64::MAX` saturate,
//!   except `throttle_reasons`, a bitmask stored as the i64 with the same bits.
//! - A GPU, process or series seen for the first time gets its row here (a GPU seen before
//!   its inventory gets a bare row that the inventory fills in later).

use rusqlite::{Connection, params};

use super::StoreError;
use super::events;
use super::write::{Caches, PROCESS_SEEN_RESOLUTION_MS, ProcEntry};
use crate::model::{
    Event, GpuAllocation, GpuInventory, GpuSample, ProcessSample, SampleStatus, TickBatch,
    TrainingPoint, TsMs,
};
use crate::xid::nvrm::PciAddr;

/// Saturating conversion for counters and byte counts.
pub(crate) fn sat(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// The sample columns in table order after `(ts_ms, gpu_id)`; shared with `read.rs`.
macro_rules! sample_metric_columns {
    () => {
        "status, util_gpu_pct, util_mem_pct, mem_used_bytes, mem_free_bytes, mem_total_bytes, \
         temp_c, fan_pct, clock_sm_mhz, clock_mem_mhz, power_mw, power_limit_mw, energy_mj, \
         pstate, pcie_tx_kbs, pcie_rx_kbs, pcie_gen, pcie_width, throttle_reasons, \
         ecc_corrected, ecc_uncorrected, retired_pages, remapped_rows_correctable, \
         remapped_rows_uncorrectable, remap_pending, remap_failure, process_count, \
         tensor_active_pct, sm_active_pct, sm_occupancy_pct, dram_active_pct, recovery_action, \
         nvlink_links_up, nvlink_down_mask, nvlink_crc_flit_errors, nvlink_crc_data_errors, \
         nvlink_replay_errors, nvlink_recovery_errors, nvlink_kib, fabric_state, fabric_status"
    };
}
pub(super) use sample_metric_columns;

/// The placeholders of `(ts_ms, gpu, <sample_metric_columns>)`, for the inserts that bind
/// [`sample_params!`].
macro_rules! sample_placeholders {
    () => {
        "?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
         ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, \
         ?35, ?36, ?37, ?38, ?39, ?40, ?41, ?42, ?43"
    };
}
pub(super) use sample_placeholders;

/// The columns `SELECT ts_ms, <sample_metric_columns>` reads (0..=41): a column selected
/// after them is at this index.
pub(super) const SAMPLE_ROW_COLUMNS: usize = 42;

/// The values of [`sample_metric_columns!`] for one sample, in the same order, as SQL
/// parameters after the time and GPU key: `params![ts, gpu, ...]` for the writer and the
/// import staging alike.
macro_rules! sample_params {
    ($ts:expr, $gpu:expr, $s:ident) => {
        rusqlite::params![
            $ts,
            $gpu,
            $s.status.as_i64(),
            $s.util_gpu_pct,
            $s.util_mem_pct,
            $crate::store::rows::sat($s.mem_used_bytes),
            $crate::store::rows::sat($s.mem_free_bytes),
            $crate::store::rows::sat($s.mem_total_bytes),
            $s.temp_c,
            $s.fan_pct,
            $s.clock_sm_mhz,
            $s.clock_mem_mhz,
            $s.power_mw,
            $s.power_limit_mw,
            $crate::store::rows::sat($s.energy_mj),
            $s.pstate,
            $s.pcie_tx_kbs,
            $s.pcie_rx_kbs,
            $s.pcie_gen,
            $s.pcie_width,
            $s.throttle_reasons.map(|v| v as i64),
            $crate::store::rows::sat($s.ecc_corrected),
            $crate::store::rows::sat($s.ecc_uncorrected),
            $s.retired_pages,
            $s.remapped_rows_correctable,
            $s.remapped_rows_uncorrectable,
            $s.remap_pending,
            $s.remap_failure,
            $s.process_count,
            $s.tensor_active_pct,
            $s.sm_active_pct,
            $s.sm_occupancy_pct,
            $s.dram_active_pct,
            $s.recovery_action,
            $s.nvlink_links_up,
            $s.nvlink_down_mask,
            $crate::store::rows::sat($s.nvlink_crc_flit_errors),
            $crate::store::rows::sat($s.nvlink_crc_data_errors),
            $crate::store::rows::sat($s.nvlink_replay_errors),
            $crate::store::rows::sat($s.nvlink_recovery_errors),
            $crate::store::rows::sat($s.nvlink_kib),
            $s.fabric_state,
            $s.fabric_status,
        ]
    };
}
pub(crate) use sample_params;

/// Writes rows of one transaction, resolving ids through the caches. [`TickWriter::finish`]
/// writes what is kept for the end of the transaction: the host's time span, and each GPU's
/// newest `ok` sample time.
pub(super) struct TickWriter<'a> {
    pub(super) conn: &'a Connection,
    pub(super) host_id: i64,
    pub(super) caches: &'a mut Caches,
    pub(super) rows: usize,
    /// The oldest and newest times of the transaction's rows.
    span: Option<(TsMs, TsMs)>,
    /// Per GPU, the newest time of the `ok` samples since its last other one: a run of `ok`
    /// samples changes the GPU's row as its newest alone does (see [`TickWriter::sample`]).
    /// Until it is written, the row's `last_seen_ms` lags by at most the transaction's span,
    /// for the one reader within it (`events::gpu_at`, which prefers the GPU seen last of two
    /// at one PCI address: a board replaced long before, not seconds).
    ok_since: Vec<(i64, TsMs)>,
}

impl<'a> TickWriter<'a> {
    pub(super) fn new(conn: &'a Connection, host_id: i64, caches: &'a mut Caches) -> Self {
        Self {
            conn,
            host_id,
            caches,
            rows: 0,
            span: None,
            ok_since: Vec::new(),
        }
    }

    /// The newest time written.
    pub(super) fn newest(&self) -> Option<TsMs> {
        self.span.map(|(_, newest)| newest)
    }

    /// Writes what was kept for the end of the transaction (call it before the commit).
    pub(super) fn finish(&mut self) -> Result<(), StoreError> {
        if let Some((oldest, newest)) = self.span {
            self.conn
                .prepare_cached(
                    "UPDATE hosts SET first_seen_ms = min(coalesce(first_seen_ms, ?1), ?1),
                       raw_floor_ms = min(coalesce(raw_floor_ms, ?1), ?1),
                       last_seen_ms = max(coalesce(last_seen_ms, ?2), ?2) WHERE id = ?3",
                )?
                .execute(params![oldest, newest, self.host_id])?;
        }
        for (gpu_id, ts_ms) in std::mem::take(&mut self.ok_since) {
            self.gpu_seen(gpu_id, ts_ms, SampleStatus::Ok)?;
        }
        Ok(())
    }

    pub(super) fn batch(&mut self, b: &TickBatch) -> Result<(), StoreError> {
        let times = || {
            b.samples
                .iter()
                .map(|s| s.ts_ms)
                .chain(b.processes.iter().map(|p| p.ts_ms))
                .chain(b.training.iter().map(|t| t.ts_ms))
                .chain([b.ts_ms])
        };
        let (oldest, newest) = (
            times().fold(b.ts_ms, i64::min),
            times().fold(b.ts_ms, i64::max),
        );
        // The host's span is min/max of its rows' times: written once, at the end.
        self.span = Some(match self.span {
            Some((o, n)) => (o.min(oldest), n.max(newest)),
            None => (oldest, newest),
        });
        for inv in &b.inventory {
            self.inventory(inv, b.ts_ms)?;
        }
        for s in &b.samples {
            self.sample(s)?;
        }
        for p in &b.processes {
            self.process_sample(p)?;
        }
        for a in &b.allocations {
            self.allocation(a, b.ts_ms)?;
        }
        for e in &b.events {
            self.event(e)?;
        }
        for c in &b.setting_changes {
            let gpu_id = self.gpu_id(&c.gpu_uuid, c.ts_ms)?;
            self.rows += super::audit::observed(self.conn, gpu_id, c)?;
        }
        for m in &b.errors {
            let gpu_id = self.gpu_id(&m.gpu_uuid, m.last_ms)?;
            self.conn
                .prepare_cached(
                    "INSERT INTO metric_errors (gpu_id, metric, error, count, first_ms, last_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (gpu_id, metric) DO UPDATE SET error = excluded.error,
                       count = excluded.count, first_ms = excluded.first_ms,
                       last_ms = excluded.last_ms
                     WHERE excluded.last_ms >= last_ms",
                )?
                .execute(params![
                    gpu_id,
                    m.metric,
                    m.error,
                    sat(Some(m.count)),
                    m.first_ms,
                    m.last_ms
                ])?;
            self.rows += 1;
        }
        for t in &b.training {
            self.training(t)?;
        }
        Ok(())
    }

    fn inventory(&mut self, g: &GpuInventory, ts_ms: TsMs) -> Result<(), StoreError> {
        let id: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO gpus (host_id, uuid, gpu_index, name, serial, pci_bus_id,
                   driver_version, cuda_driver_version, nvml_version, memory_total_bytes,
                   power_limit_mw, power_limit_min_mw, power_limit_max_mw, temp_slowdown_c,
                   temp_shutdown_c, temp_gpu_max_c, pcie_max_gen, pcie_max_width,
                   persistence_mode, mig_mode, first_seen_ms, last_seen_ms,
                   gpu_instance_id, gpu_instance_profile, parent_uuid)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                   ?17, ?18, ?19, ?20, ?21, ?21, ?22, ?23, ?24)
                 ON CONFLICT (host_id, uuid) DO UPDATE SET gpu_index = excluded.gpu_index,
                   name = excluded.name, serial = excluded.serial,
                   pci_bus_id = excluded.pci_bus_id, driver_version = excluded.driver_version,
                   cuda_driver_version = excluded.cuda_driver_version,
                   nvml_version = excluded.nvml_version,
                   memory_total_bytes = excluded.memory_total_bytes,
                   power_limit_mw = excluded.power_limit_mw,
                   power_limit_min_mw = excluded.power_limit_min_mw,
                   power_limit_max_mw = excluded.power_limit_max_mw,
                   temp_slowdown_c = excluded.temp_slowdown_c,
                   temp_shutdown_c = excluded.temp_shutdown_c,
                   temp_gpu_max_c = excluded.temp_gpu_max_c,
                   pcie_max_gen = excluded.pcie_max_gen,
                   pcie_max_width = excluded.pcie_max_width,
                   persistence_mode = excluded.persistence_mode,
                   mig_mode = excluded.mig_mode,
                   gpu_instance_id = excluded.gpu_instance_id,
                   gpu_instance_profile = excluded.gpu_instance_profile,
                   parent_uuid = excluded.parent_uuid,
                   first_seen_ms = min(first_seen_ms, excluded.first_seen_ms),
                   last_seen_ms = max(last_seen_ms, excluded.last_seen_ms)
                 RETURNING id",
            )?
            .query_row(
                params![
                    self.host_id,
                    g.uuid,
                    g.index,
                    g.name,
                    g.serial,
                    g.pci_bus_id,
                    g.driver_version,
                    g.cuda_driver_version,
                    g.nvml_version,
                    sat(g.memory_total_bytes),
                    g.power_limit_mw,
                    g.power_limit_min_mw,
                    g.power_limit_max_mw,
                    g.temp_slowdown_c,
                    g.temp_shutdown_c,
                    g.temp_gpu_max_c,
                    g.pcie_max_gen,
                    g.pcie_max_width,
                    g.persistence_mode,
                    g.mig_mode,
                    ts_ms,
                    g.mig.as_ref().map(|m| m.gpu_instance_id),
                    g.mig.as_ref().map(|m| m.profile.as_str()),
                    g.mig.as_ref().map(|m| m.parent_uuid.as_str())
                ],
                |r| r.get(0),
            )?;
        self.caches.gpus.insert(g.uuid.clone(), id);
        self.rows += 1;
        // Kernel-log XIDs that named only this GPU's address now have their GPU.
        if let Some(pci) = g.pci_bus_id.as_deref().and_then(PciAddr::parse) {
            self.rows += events::join_address(self.conn, self.host_id, &pci, id)?;
        }
        Ok(())
    }

    /// The id of a GPU of this host; a GPU seen before its inventory gets a bare row.
    /// One event: its GPU by UUID, else by the PCI address a kernel log gave (see
    /// [`events`] for the XID pairing).
    fn event(&mut self, e: &Event) -> Result<(), StoreError> {
        let pci = e.pci_bus_id.as_deref().and_then(PciAddr::parse);
        let gpu_id = match (&e.gpu_uuid, &pci) {
            (Some(uuid), _) => Some(self.gpu_id(uuid, e.ts_ms)?),
            (None, Some(pci)) => events::gpu_at(self.conn, self.host_id, pci)?,
            (None, None) => None,
        };
        events::write(
            self.conn,
            self.host_id,
            &events::NewEvent::one(
                e.ts_ms,
                gpu_id,
                &e.kind,
                e.code,
                &e.message,
                pci.as_ref().map(PciAddr::as_str),
                e.source,
                e.kernel_ms,
            ),
        )?;
        self.rows += 1;
        Ok(())
    }

    fn gpu_id(&mut self, uuid: &str, ts_ms: TsMs) -> Result<i64, StoreError> {
        if let Some(&id) = self.caches.gpus.get(uuid) {
            return Ok(id);
        }
        let id: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO gpus (host_id, uuid, first_seen_ms, last_seen_ms)
                 VALUES (?1, ?2, ?3, ?3)
                 ON CONFLICT (host_id, uuid) DO UPDATE SET
                   first_seen_ms = min(first_seen_ms, excluded.first_seen_ms)
                 RETURNING id",
            )?
            .query_row(params![self.host_id, uuid, ts_ms], |r| r.get(0))?;
        self.caches.gpus.insert(uuid.to_string(), id);
        Ok(id)
    }

    fn sample(&mut self, s: &GpuSample) -> Result<(), StoreError> {
        let gpu_id = self.gpu_id(&s.uuid, s.ts_ms)?;
        self.conn
            .prepare_cached(concat!(
                "INSERT OR REPLACE INTO samples (ts_ms, gpu_id, ",
                sample_metric_columns!(),
                ") VALUES (",
                sample_placeholders!(),
                ")"
            ))?
            .execute(sample_params!(s.ts_ms, gpu_id, s))?;
        // The GPU's row is updated by each sample in turn (below). An `ok` sample clears
        // `lost_at_ms` unless it is older than the GPU's newest sample, so a run of `ok`
        // samples leaves the row as its newest alone would: it is kept and written when a
        // sample of another status follows, or at the end of the transaction.
        let kept = self.ok_since.iter().position(|(id, _)| *id == gpu_id);
        match (s.status, kept) {
            (SampleStatus::Ok, Some(i)) => {
                self.ok_since[i].1 = self.ok_since[i].1.max(s.ts_ms);
            }
            (SampleStatus::Ok, None) => self.ok_since.push((gpu_id, s.ts_ms)),
            (status, kept) => {
                if let Some(i) = kept {
                    let (_, ok_ms) = self.ok_since.swap_remove(i);
                    self.gpu_seen(gpu_id, ok_ms, SampleStatus::Ok)?;
                }
                self.gpu_seen(gpu_id, s.ts_ms, status)?;
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// A sample's change of its GPU's row. `lost_at_ms`: set by the first `lost` sample,
    /// cleared by a later `ok` one; samples older than the newest one (imports) do not
    /// change it.
    fn gpu_seen(
        &mut self,
        gpu_id: i64,
        ts_ms: TsMs,
        status: SampleStatus,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE gpus SET
                   lost_at_ms = CASE WHEN ?1 < coalesce(last_sample_ms, ?1) THEN lost_at_ms
                                     WHEN ?2 = 2 THEN coalesce(lost_at_ms, ?1)
                                     WHEN ?2 = 0 THEN NULL
                                     ELSE lost_at_ms END,
                   last_sample_ms = max(coalesce(last_sample_ms, ?1), ?1),
                   last_seen_ms = max(last_seen_ms, ?1)
                 WHERE id = ?3",
            )?
            .execute(params![ts_ms, status.as_i64(), gpu_id])?;
        Ok(())
    }

    /// Closes the GPU's open holder interval and opens the new one (if any) at `ts_ms`.
    fn allocation(&mut self, a: &GpuAllocation, ts_ms: TsMs) -> Result<(), StoreError> {
        let gpu_id = self.gpu_id(&a.gpu_uuid, ts_ms)?;
        self.conn
            .prepare_cached(
                "UPDATE gpu_holders SET to_ms = ?1 WHERE gpu_id = ?2 AND to_ms IS NULL",
            )?
            .execute(params![ts_ms, gpu_id])?;
        if let Some(h) = &a.holder {
            insert_holder(self.conn, gpu_id, ts_ms, None, h)?;
        }
        self.rows += 1;
        Ok(())
    }

    fn process_sample(&mut self, p: &ProcessSample) -> Result<(), StoreError> {
        let gpu_id = self.gpu_id(&p.gpu_uuid, p.ts_ms)?;
        let info = &p.process;
        let pl = info.placement.as_ref();
        let key = (info.pid, info.start_time_ms);
        let process_id = match self.caches.procs.get_mut(&key) {
            Some(e) => {
                if !e.pod_named
                    && let Some(x) = pl.filter(|x| x.pod.is_some())
                {
                    self.conn
                        .prepare_cached(
                            "UPDATE processes SET pod = coalesce(pod, ?1),
                               namespace = coalesce(namespace, ?2),
                               container = coalesce(container, ?3)
                             WHERE id = ?4",
                        )?
                        .execute(params![x.pod, x.namespace, x.container, e.id])?;
                    e.pod_named = true;
                }
                if p.ts_ms - e.last_seen_written >= PROCESS_SEEN_RESOLUTION_MS {
                    self.conn
                        .prepare_cached(
                            "UPDATE processes SET last_seen_ms = max(last_seen_ms, ?1)
                             WHERE id = ?2",
                        )?
                        .execute(params![p.ts_ms, e.id])?;
                    e.last_seen_written = p.ts_ms;
                }
                e.id
            }
            None => {
                let id: i64 = self
                    .conn
                    .prepare_cached(
                        "INSERT INTO processes (host_id, pid, start_time_ms, name, cmdline, user,
                           first_seen_ms, last_seen_ms, placement_known, runtime, container_id,
                           pod_uid, pod, namespace, container, slurm_job, slurm_step,
                           slurm_job_name, slurm_array, unit, slurm_nodes)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                           ?15, ?16, ?17, ?18, ?19, ?20)
                         ON CONFLICT (host_id, pid, start_time_ms) DO UPDATE SET
                           name = coalesce(excluded.name, name),
                           cmdline = coalesce(excluded.cmdline, cmdline),
                           user = coalesce(excluded.user, user),
                           placement_known = coalesce(excluded.placement_known, placement_known),
                           runtime = coalesce(excluded.runtime, runtime),
                           container_id = coalesce(excluded.container_id, container_id),
                           pod_uid = coalesce(excluded.pod_uid, pod_uid),
                           pod = coalesce(excluded.pod, pod),
                           namespace = coalesce(excluded.namespace, namespace),
                           container = coalesce(excluded.container, container),
                           slurm_job = coalesce(excluded.slurm_job, slurm_job),
                           slurm_step = coalesce(excluded.slurm_step, slurm_step),
                           slurm_job_name = coalesce(excluded.slurm_job_name, slurm_job_name),
                           slurm_array = coalesce(excluded.slurm_array, slurm_array),
                           unit = coalesce(excluded.unit, unit),
                           slurm_nodes = coalesce(excluded.slurm_nodes, slurm_nodes),
                           first_seen_ms = min(first_seen_ms, excluded.first_seen_ms),
                           last_seen_ms = max(last_seen_ms, excluded.last_seen_ms)
                         RETURNING id",
                    )?
                    .query_row(
                        params![
                            self.host_id,
                            info.pid,
                            info.start_time_ms,
                            info.name,
                            info.cmdline,
                            info.user,
                            p.ts_ms,
                            pl.map(|_| 1),
                            pl.and_then(|x| x.runtime.as_deref()),
                            pl.and_then(|x| x.container_id.as_deref()),
                            pl.and_then(|x| x.pod_uid.as_deref()),
                            pl.and_then(|x| x.pod.as_deref()),
                            pl.and_then(|x| x.namespace.as_deref()),
                            pl.and_then(|x| x.container.as_deref()),
                            pl.and_then(|x| x.slurm_job.and_then(|j| i64::try_from(j).ok())),
                            pl.and_then(|x| x.slurm_step.as_deref()),
                            pl.and_then(|x| x.slurm_job_name.as_deref()),
                            pl.and_then(|x| x.slurm_array.as_deref()),
                            pl.and_then(|x| x.unit.as_deref()),
                            pl.and_then(|x| x.slurm_nodes),
                        ],
                        |r| r.get(0),
                    )?;
                self.caches.procs.insert(
                    key,
                    ProcEntry {
                        id,
                        last_seen_written: p.ts_ms,
                        pod_named: pl.is_some_and(|x| x.pod.is_some()),
                    },
                );
                id
            }
        };
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO process_samples (ts_ms, gpu_id, process_id, used_mem_bytes)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![p.ts_ms, gpu_id, process_id, sat(p.used_mem_bytes)])?;
        self.rows += 1;
        Ok(())
    }

    fn training(&mut self, t: &TrainingPoint) -> Result<(), StoreError> {
        let labels = labels_json(&t.labels);
        let key = (t.name.clone(), labels);
        let series_id = match self.caches.series.get(&key) {
            Some(&id) => id,
            None => {
                let id: i64 = self
                    .conn
                    .prepare_cached(TRAINING_SERIES_UPSERT)?
                    .query_row(params![self.host_id, key.0, key.1, t.ts_ms], |r| r.get(0))?;
                self.caches.series.insert(key, id);
                id
            }
        };
        self.conn
            .prepare_cached(TRAINING_SAMPLE_UPSERT)?
            .execute(params![t.ts_ms, series_id, t.value])?;
        self.rows += 1;
        Ok(())
    }
}

/// Adds GPU `gpu_id`'s holder interval `[from_ms, to_ms)` (`to_ms` `None`: still held).
pub(super) fn insert_holder(
    conn: &rusqlite::Connection,
    gpu_id: i64,
    from_ms: TsMs,
    to_ms: Option<TsMs>,
    h: &crate::model::GpuHolder,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO gpu_holders
           (gpu_id, from_ms, to_ms, pod, namespace, container, resource, training_job)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        gpu_id,
        from_ms,
        to_ms,
        h.pod,
        h.namespace,
        h.container,
        h.resource,
        h.job
    ])?;
    Ok(())
}

/// A training series' row by its identity `(host_id, name, labels_json)`, first seen at ?4:
/// its id.
pub(super) const TRAINING_SERIES_UPSERT: &str =
    "INSERT INTO training_series (host_id, name, labels_json, first_seen_ms)
     VALUES (?1, ?2, ?3, ?4)
     ON CONFLICT (host_id, name, labels_json) DO UPDATE SET
       first_seen_ms = min(first_seen_ms, excluded.first_seen_ms)
     RETURNING id";

/// A training point `(ts_ms, series_id, value)`.
pub(super) const TRAINING_SAMPLE_UPSERT: &str =
    "INSERT OR REPLACE INTO training_samples (ts_ms, series_id, value) VALUES (?1, ?2, ?3)";

/// The labels as a JSON object with sorted keys: the series identity.
pub fn labels_json(labels: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = labels.iter().collect();
    sorted.sort();
    let map: serde_json::Map<String, serde_json::Value> = sorted
        .into_iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(map).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_json_is_sorted_and_escaped() {
        let l = vec![
            ("rank".to_string(), "1".to_string()),
            ("job".to_string(), "a\"b".to_string()),
        ];
        assert_eq!(labels_json(&l), r#"{"job":"a\"b","rank":"1"}"#);
        assert_eq!(labels_json(&[]), "{}");
    }

    #[test]
    fn saturating_conversion() {
        assert_eq!(sat(None), None);
        assert_eq!(sat(Some(0)), Some(0));
        assert_eq!(sat(Some(u64::MAX)), Some(i64::MAX));
    }
}
