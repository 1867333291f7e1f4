//! Writing events, with the rules that make an XID one row whoever reported it.
//!
//! Invariants:
//! - The same XID from NVML's event API and from the kernel log (the daemon's `/dev/kmsg`
//!   follower or `gpuwatch import dmesg`) is one row: an XID from one side is merged into an
//!   unpaired row from the other side with the same host, GPU and number whose `ts_ms` is
//!   within [`XID_PAIR_WINDOW_MS`], nearest first; each row pairs at most once, so a burst
//!   of N XIDs seen by both sides stays N rows. The merged row keeps its id and `ts_ms` (rules
//!   already saw it there) and takes the kernel's message, address and time.
//! - A kernel-log XID names its GPU by PCI address: it gets the GPU the host's inventory has
//!   at that address (the most recently seen one when a slot held several GPUs), else
//!   `gpu_id` NULL with the address kept, and [`join_address`] attaches such rows once an
//!   inventory names the GPU there. No GPU row is ever made up from an address.

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::model::{EventSource, TsMs};
use crate::xid::nvrm::PciAddr;

/// How far apart (in `ts_ms`) NVML's and the kernel log's report of one XID may be. NVML's
/// events carry the daemon's tick, the kernel log's the kernel's clock: a tick interval plus
/// the event thread's latency apart, and a second or two of boot-time conversion.
pub const XID_PAIR_WINDOW_MS: i64 = 10_000;

/// One event to write: the model's event with its GPU resolved to a row id.
#[derive(Debug, Clone, Copy)]
pub(super) struct NewEvent<'a> {
    pub ts_ms: TsMs,
    pub gpu_id: Option<i64>,
    pub kind: &'a str,
    pub code: Option<i64>,
    pub message: &'a str,
    pub pci: Option<&'a str>,
    pub source: Option<EventSource>,
    pub kernel_ms: Option<TsMs>,
}

/// What writing an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Written {
    /// A new row (its id).
    Inserted(i64),
    /// Merged into the other source's report of the same XID (row id).
    Merged(i64),
}

/// Writes `e` for host `host_id` inside the caller's transaction.
pub(super) fn write(conn: &Connection, host_id: i64, e: &NewEvent) -> Result<Written, StoreError> {
    if let (Some(id), Some(source)) = (pair(conn, host_id, e)?, e.source) {
        match source {
            EventSource::Nvml => {
                conn.prepare_cached("UPDATE events SET source = 'nvml+' || source WHERE id = ?1")?
                    .execute([id])?;
            }
            EventSource::Kmsg | EventSource::Import => {
                conn.prepare_cached(
                    "UPDATE events SET source = 'nvml+' || ?2, message = ?3, pci_bus_id = ?4,
                       kernel_ms = ?5 WHERE id = ?1",
                )?
                .execute(params![
                    id,
                    source.as_str(),
                    e.message,
                    e.pci,
                    e.kernel_ms
                ])?;
            }
        }
        return Ok(Written::Merged(id));
    }
    conn.prepare_cached(
        "INSERT INTO events (ts_ms, host_id, gpu_id, kind, code, message, pci_bus_id, source,
           kernel_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        e.ts_ms,
        host_id,
        e.gpu_id,
        e.kind,
        e.code,
        e.message,
        e.pci,
        e.source.map(EventSource::as_str),
        e.kernel_ms
    ])?;
    Ok(Written::Inserted(conn.last_insert_rowid()))
}

/// The unpaired row of the other source that reports the same XID, if any.
fn pair(conn: &Connection, host_id: i64, e: &NewEvent) -> Result<Option<i64>, StoreError> {
    let (Some(gpu_id), Some(code), Some(source)) = (e.gpu_id, e.code, e.source) else {
        return Ok(None);
    };
    if e.kind != "xid" {
        return Ok(None);
    }
    let other = match source {
        EventSource::Nvml => "source IN ('kmsg', 'import')",
        EventSource::Kmsg | EventSource::Import => "source = 'nvml'",
    };
    let sql = format!(
        "SELECT id FROM events WHERE host_id = ?1 AND kind = 'xid' AND code = ?2
           AND ts_ms BETWEEN ?3 - ?5 AND ?3 + ?5 AND gpu_id = ?4 AND {other}
         ORDER BY abs(ts_ms - ?3), id LIMIT 1"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(
            params![host_id, code, e.ts_ms, gpu_id, XID_PAIR_WINDOW_MS],
            |r| r.get(0),
        )
        .optional()?)
}

/// The GPU of host `host_id` at PCI address `pci` (normalised), if its inventory has one.
pub(super) fn gpu_at(
    conn: &Connection,
    host_id: i64,
    pci: &PciAddr,
) -> Result<Option<i64>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, pci_bus_id FROM gpus WHERE host_id = ?1 AND pci_bus_id IS NOT NULL
         ORDER BY last_seen_ms DESC, id DESC",
    )?;
    let mut rows = stmt.query([host_id])?;
    while let Some(r) = rows.next()? {
        let bus: String = r.get(1)?;
        if PciAddr::parse(&bus).as_ref() == Some(pci) {
            return Ok(Some(r.get(0)?));
        }
    }
    Ok(None)
}

/// Attaches host `host_id`'s events that name only PCI address `pci` to GPU `gpu_id`;
/// returns how many.
pub(super) fn join_address(
    conn: &Connection,
    host_id: i64,
    pci: &PciAddr,
    gpu_id: i64,
) -> Result<usize, StoreError> {
    Ok(conn
        .prepare_cached(
            "UPDATE events SET gpu_id = ?3 WHERE host_id = ?1 AND gpu_id IS NULL
               AND pci_bus_id = ?2",
        )?
        .execute(params![host_id, pci.as_str(), gpu_id])?)
}

/// The newest kernel time of the XIDs stored for host `name` (kernel-log rows by their
/// kernel time, NVML's by `ts_ms`); `None` when it has none.
pub fn newest_xid_ms(conn: &Connection, name: &str) -> Result<Option<TsMs>, StoreError> {
    Ok(conn.query_row(
        "SELECT max(coalesce(e.kernel_ms, e.ts_ms)) FROM events e JOIN hosts h ON h.id = e.host_id
         WHERE h.name = ?1 AND e.kind = 'xid'",
        [name],
        |r| r.get(0),
    )?)
}
