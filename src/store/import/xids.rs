//! Publishing XIDs read from saved kernel logs (`gpuwatch import dmesg`): one IMMEDIATE
//! transaction for the whole import, after the files were read completely.
//!
//! Invariants:
//! - All or nothing: every row of the import, its GPU rows and the joins of older rows are
//!   in the one transaction.
//! - A GPU is found by the UUID an `NVRM: GPU at` line gave (its row is made when the host
//!   lacks it: the UUID is real), else by the host's inventory at that PCI address, else
//!   the row keeps the address alone (`gpu_id` NULL). Rows stored earlier with only an address
//!   that this import's `GPU at` lines name are attached to that GPU.
//! - The lines are folded into runs in memory first (repeats of one XID at one address, as
//!   `store/events.rs` folds them), so a storm of 100,000 lines is a handful of rows and
//!   statements, not 100,000.
//! - Importing the same log twice stores its XIDs once: a run whose (host, address, number)
//!   kernel-log rows already stored overlap in kernel time (give or take
//!   [`KERNEL_DUPLICATE_MS`]) and hold as many events is already stored; a longer save of
//!   the log extends the stored run by what it adds. A run NVML reported is merged into its
//!   row (`store/events.rs`).

use std::collections::BTreeMap;

use rusqlite::{Connection, params};

use super::super::events::{self, NewEvent, Written};
use super::super::write::ensure_host;
use super::super::{Store, StoreError};
use crate::model::{EventSource, TsMs};
use crate::xid::nvrm::PciAddr;

/// How far apart the kernel times of one XID may be when read from two saves of the log
/// (`dmesg -T` has whole seconds; each tool converts the kernel's clock itself).
pub const KERNEL_DUPLICATE_MS: i64 = 2_000;

/// One XID to import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelXid {
    pub ts_ms: TsMs,
    pub pci: PciAddr,
    pub code: i64,
    pub message: String,
    /// The GPU's UUID when the log named it.
    pub uuid: Option<String>,
}

/// What a publish did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XidsPublished {
    pub inserted: u64,
    /// Merged into the row of NVML's report of the same XID.
    pub merged: u64,
    /// Already stored by an earlier import or the daemon's kernel-log follower.
    pub duplicates: u64,
    /// Rows the new XIDs were folded into (one per run of one XID on one GPU).
    pub runs: u64,
    /// Rows stored earlier with only an address, now attached to their GPU.
    pub joined: u64,
    /// Per address: the GPU's UUID, or `None` when only the address is known.
    pub gpus: BTreeMap<PciAddr, Option<String>>,
}

impl Store {
    /// Publishes `xids` (any order) for host `host` in one transaction.
    pub fn publish_kernel_xids(
        &self,
        host: &str,
        xids: &[KernelXid],
    ) -> Result<XidsPublished, StoreError> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        match publish(&self.conn, host, xids) {
            Ok(out) => {
                self.conn.execute_batch("COMMIT")?;
                Ok(out)
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

fn publish(conn: &Connection, host: &str, xids: &[KernelXid]) -> Result<XidsPublished, StoreError> {
    let host_id = ensure_host(conn, host)?;
    let mut out = XidsPublished::default();
    // The GPU of each (address, UUID named by the log).
    let mut gpu_of: BTreeMap<(PciAddr, Option<String>), Option<i64>> = BTreeMap::new();
    for x in xids {
        let key = (x.pci.clone(), x.uuid.clone());
        if gpu_of.contains_key(&key) {
            continue;
        }
        let id = match &x.uuid {
            Some(uuid) => Some(gpu_by_uuid(conn, host_id, uuid, x.ts_ms)?),
            None => events::gpu_at(conn, host_id, &x.pci)?,
        };
        let uuid = match (&x.uuid, id) {
            (Some(u), _) => Some(u.clone()),
            (None, Some(id)) => {
                Some(conn.query_row("SELECT uuid FROM gpus WHERE id = ?1", [id], |r| r.get(0))?)
            }
            (None, None) => None,
        };
        out.gpus.entry(x.pci.clone()).or_insert(uuid);
        gpu_of.insert(key, id);
    }
    for run in runs(xids) {
        let stored = stored_runs(conn, host_id, &run)?;
        let new = run.count.saturating_sub(stored.count);
        out.duplicates += (run.count - new) as u64;
        if stored.count > 0 {
            // An earlier save of the log (or the daemon's follower) stored this run: only
            // what this log adds beyond it extends it.
            if let Some(id) = stored.latest
                && (new > 0 || run.first_ms < stored.first_ms || run.last_ms > stored.last_ms)
            {
                extend(conn, id, &run, new)?;
                out.merged += new as u64;
            }
            continue;
        }
        let gpu_id = gpu_of
            .get(&(run.pci.clone(), run.uuid.clone()))
            .copied()
            .flatten();
        let written = events::write(
            conn,
            host_id,
            &NewEvent {
                ts_ms: run.first_ms,
                gpu_id,
                kind: "xid",
                code: Some(run.code),
                message: &run.message,
                pci: Some(run.pci.as_str()),
                source: Some(EventSource::Import),
                kernel_ms: Some(run.first_ms),
                count: run.count as i64,
                last_ms: run.last_ms,
                kernel_last_ms: Some(run.last_ms),
                more_messages: &run.messages,
            },
        )?;
        match written {
            Written::Inserted(_) => out.inserted += run.count as u64,
            Written::Merged(_) => out.merged += run.count as u64,
        }
        out.runs += 1;
    }
    // The log's `GPU at` lines name the GPU of rows stored earlier with its address alone.
    for ((pci, uuid), id) in &gpu_of {
        if let (Some(_), Some(id)) = (uuid, id) {
            out.joined += events::join_address(conn, host_id, pci, *id)? as u64;
        }
    }
    Ok(out)
}

/// Repeats of one XID at one address, folded as the store folds them (`store/events.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct XidRun {
    pci: PciAddr,
    uuid: Option<String>,
    code: i64,
    first_ms: TsMs,
    last_ms: TsMs,
    count: usize,
    message: String,
    /// Distinct messages besides `message`, at most [`events::XID_RUN_MESSAGES`].
    messages: Vec<String>,
}

/// The runs of `xids` (any order): by address, UUID and code, a run ending after a quiet gap
/// of [`events::XID_RUN_GAP_MS`] or a span of [`events::XID_RUN_SPAN_MS`].
fn runs(xids: &[KernelXid]) -> Vec<XidRun> {
    let mut order: Vec<&KernelXid> = xids.iter().collect();
    order.sort_by(|a, b| {
        (&a.pci, &a.uuid, a.code, a.ts_ms).cmp(&(&b.pci, &b.uuid, b.code, b.ts_ms))
    });
    let mut out: Vec<XidRun> = Vec::new();
    for x in order {
        if let Some(r) = out.last_mut()
            && r.pci == x.pci
            && r.uuid == x.uuid
            && r.code == x.code
            && x.ts_ms - r.last_ms <= events::XID_RUN_GAP_MS
            && x.ts_ms - r.first_ms < events::XID_RUN_SPAN_MS
        {
            r.last_ms = x.ts_ms;
            r.count += 1;
            if r.messages.len() < events::XID_RUN_MESSAGES
                && x.message != r.message
                && !r.messages.contains(&x.message)
            {
                r.messages.push(x.message.clone());
            }
            continue;
        }
        out.push(XidRun {
            pci: x.pci.clone(),
            uuid: x.uuid.clone(),
            code: x.code,
            first_ms: x.ts_ms,
            last_ms: x.ts_ms,
            count: 1,
            message: x.message.clone(),
            messages: Vec::new(),
        });
    }
    out.sort_by_key(|r| (r.first_ms, r.code));
    out
}

/// The kernel-log rows already stored that overlap a run.
#[derive(Debug, Default)]
struct Stored {
    /// Their kernel-log events.
    count: usize,
    first_ms: TsMs,
    last_ms: TsMs,
    /// The row that ends last.
    latest: Option<i64>,
}

/// Kernel-log rows of the run's code and address whose kernel times overlap the run's,
/// give or take [`KERNEL_DUPLICATE_MS`].
fn stored_runs(conn: &Connection, host_id: i64, run: &XidRun) -> Result<Stored, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, kernel_count, kernel_ms, coalesce(kernel_last_ms, kernel_ms) FROM events
         WHERE host_id = ?1 AND kind = 'xid' AND code = ?2 AND pci_bus_id = ?3
           AND kernel_count IS NOT NULL
           AND kernel_ms <= ?5 + ?6 AND coalesce(kernel_last_ms, kernel_ms) >= ?4 - ?6
         ORDER BY coalesce(kernel_last_ms, kernel_ms), id",
    )?;
    let mut rows = stmt.query(params![
        host_id,
        run.code,
        run.pci.as_str(),
        run.first_ms,
        run.last_ms,
        KERNEL_DUPLICATE_MS
    ])?;
    let mut out = Stored {
        first_ms: TsMs::MAX,
        last_ms: TsMs::MIN,
        ..Stored::default()
    };
    while let Some(r) = rows.next()? {
        let n: i64 = r.get(1)?;
        out.count += usize::try_from(n).unwrap_or(0);
        out.first_ms = out.first_ms.min(r.get(2)?);
        out.last_ms = out.last_ms.max(r.get(3)?);
        out.latest = Some(r.get(0)?);
    }
    Ok(out)
}

/// Extends stored row `id` by what a longer save of the log adds: `new` events, its times.
fn extend(conn: &Connection, id: i64, run: &XidRun, new: usize) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE events SET
           kernel_count = kernel_count + ?2,
           kernel_ms = min(kernel_ms, ?3),
           kernel_last_ms = max(coalesce(kernel_last_ms, kernel_ms), ?4),
           last_ms = CASE WHEN max(coalesce(last_ms, ts_ms), ?4) > ts_ms
                          THEN max(coalesce(last_ms, ts_ms), ?4) END
         WHERE id = ?1",
    )?
    .execute(params![id, new as i64, run.first_ms, run.last_ms])?;
    events::recount(conn, id)
}

/// The row of GPU `uuid` of the host, made bare (no inventory) when missing.
fn gpu_by_uuid(
    conn: &Connection,
    host_id: i64,
    uuid: &str,
    ts_ms: TsMs,
) -> Result<i64, StoreError> {
    Ok(conn
        .prepare_cached(
            "INSERT INTO gpus (host_id, uuid, first_seen_ms, last_seen_ms) VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT (host_id, uuid) DO UPDATE SET
               first_seen_ms = min(first_seen_ms, excluded.first_seen_ms)
             RETURNING id",
        )?
        .query_row(params![host_id, uuid, ts_ms], |r| r.get(0))?)
}
