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
//! - Importing the same log twice stores its XIDs once: an XID equal (host, address, number,
//!   message) to a kernel-log row already stored whose kernel time is within
//!   [`KERNEL_DUPLICATE_MS`] is that row (each stored row matches one imported line, so a
//!   burst of identical lines keeps its count). An XID NVML reported is merged into its row
//!   (`store/events.rs`).

use std::collections::{BTreeMap, HashSet};

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
    let mut order: Vec<&KernelXid> = xids.iter().collect();
    order.sort_by_key(|x| x.ts_ms);
    // The GPU of each (address, UUID named by the log).
    let mut gpu_of: BTreeMap<(PciAddr, Option<String>), Option<i64>> = BTreeMap::new();
    for x in &order {
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
    let mut matched: HashSet<i64> = HashSet::new();
    for x in &order {
        if let Some(id) = duplicate(conn, host_id, x, &matched)? {
            matched.insert(id);
            out.duplicates += 1;
            continue;
        }
        let gpu_id = gpu_of
            .get(&(x.pci.clone(), x.uuid.clone()))
            .copied()
            .flatten();
        let written = events::write(
            conn,
            host_id,
            &NewEvent {
                ts_ms: x.ts_ms,
                gpu_id,
                kind: "xid",
                code: Some(x.code),
                message: &x.message,
                pci: Some(x.pci.as_str()),
                source: Some(EventSource::Import),
                kernel_ms: Some(x.ts_ms),
            },
        )?;
        match written {
            // A row of this import is no earlier save of the log: never its duplicate.
            Written::Inserted(id) => {
                matched.insert(id);
                out.inserted += 1;
            }
            Written::Merged(id) => {
                matched.insert(id);
                out.merged += 1;
            }
        }
    }
    // The log's `GPU at` lines name the GPU of rows stored earlier with its address alone.
    for ((pci, uuid), id) in &gpu_of {
        if let (Some(_), Some(id)) = (uuid, id) {
            out.joined += events::join_address(conn, host_id, pci, *id)? as u64;
        }
    }
    Ok(out)
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

/// A kernel-log row already stored that is this XID, not matched yet.
fn duplicate(
    conn: &Connection,
    host_id: i64,
    x: &KernelXid,
    matched: &HashSet<i64>,
) -> Result<Option<i64>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM events WHERE host_id = ?1 AND kind = 'xid' AND code = ?2
           AND pci_bus_id = ?3 AND message = ?4
           AND kernel_ms BETWEEN ?5 - ?6 AND ?5 + ?6
         ORDER BY abs(kernel_ms - ?5), id",
    )?;
    let mut rows = stmt.query(params![
        host_id,
        x.code,
        x.pci.as_str(),
        x.message,
        x.ts_ms,
        KERNEL_DUPLICATE_MS
    ])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        if !matched.contains(&id) {
            return Ok(Some(id));
        }
    }
    Ok(None)
}
