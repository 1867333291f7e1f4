//! Writing events, with the rules that make an XID one row whoever reported it, and a storm
//! of one XID one row.
//!
//! Invariants:
//! - XIDs are stored as runs: repeats of one code on one GPU (or, before its GPU is known, one
//!   PCI address) fold into the row of their run — `count` events from `ts_ms` (the first)
//!   to `last_ms` (the last), with the distinct messages (at most [`XID_RUN_MESSAGES`]). A
//!   run ends after [`XID_RUN_GAP_MS`] without its XID, and after [`XID_RUN_SPAN_MS`] in
//!   all (a new row then starts): a storm of tens of thousands of lines is one row per hour,
//!   and rules, views and the exporter read the runs.
//! - The same XID from NVML's event API and from the kernel log (the daemon's `/dev/kmsg`
//!   follower or `gpuwatch import dmesg`) is one run: each side counts its own events
//!   (`nvml_count`, `kernel_count`) and the run's `count` is the larger, so a burst of N XIDs
//!   seen by both sides stays N events. A run keeps its id and `ts_ms` (rules already saw it
//!   there); the kernel log's first report gives it the kernel's message, address and time.
//! - A kernel-log XID names its GPU by PCI address: it gets the GPU the host's inventory has
//!   at that address (the most recently seen one when a slot held several GPUs), else
//!   `gpu_id` NULL with the address kept, and [`join_address`] attaches such rows once an
//!   inventory names the GPU there. No GPU row is ever made up from an address.
//! - Other events (gpuwatch's own: `gpu_lost`, `inventory_changed`, ...) are one row each.

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::model::{EventSource, TsMs};
use crate::xid::nvrm::PciAddr;

/// How far apart (in `ts_ms`) NVML's and the kernel log's report of one XID may be. NVML's
/// events carry the daemon's tick, the kernel log's the kernel's clock: a tick interval plus
/// the event thread's latency apart, and a second or two of boot-time conversion.
pub const XID_PAIR_WINDOW_MS: i64 = 10_000;
/// A run of one XID on one GPU ends after this long without it: the next one starts a new row.
pub const XID_RUN_GAP_MS: i64 = 60_000;
/// A run lasts at most this long (a storm that goes on for hours is a row per hour).
pub const XID_RUN_SPAN_MS: i64 = 3_600_000;
/// Distinct messages a run keeps besides its first.
pub const XID_RUN_MESSAGES: usize = 8;

/// One event, or one run of an XID, to write: the model's event with its GPU resolved to a
/// row id.
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
    /// How many events (1, or a run's count: an import folds its lines first).
    pub count: i64,
    /// The last event's time (`ts_ms` for one event).
    pub last_ms: TsMs,
    /// The last event's kernel time (`kernel_ms` for one event).
    pub kernel_last_ms: Option<TsMs>,
    /// Distinct messages besides `message` (an import's run).
    pub more_messages: &'a [String],
}

impl<'a> NewEvent<'a> {
    /// One event.
    #[allow(clippy::too_many_arguments)]
    pub fn one(
        ts_ms: TsMs,
        gpu_id: Option<i64>,
        kind: &'a str,
        code: Option<i64>,
        message: &'a str,
        pci: Option<&'a str>,
        source: Option<EventSource>,
        kernel_ms: Option<TsMs>,
    ) -> Self {
        Self {
            ts_ms,
            gpu_id,
            kind,
            code,
            message,
            pci,
            source,
            kernel_ms,
            count: 1,
            last_ms: ts_ms,
            kernel_last_ms: kernel_ms,
            more_messages: &[],
        }
    }
}

/// What writing an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Written {
    /// A new row (its id).
    Inserted(i64),
    /// Folded into a run already stored: the same XID again, or the other source's report of
    /// the same XID (row id).
    Merged(i64),
}

/// The run row an XID folds into.
struct Run {
    id: i64,
    source: Option<String>,
    message: String,
    messages: Option<String>,
}

/// Writes `e` for host `host_id` inside the caller's transaction.
pub(super) fn write(conn: &Connection, host_id: i64, e: &NewEvent) -> Result<Written, StoreError> {
    if let (Some(run), Some(source)) = (run_of(conn, host_id, e)?, e.source) {
        fold(conn, &run, e, source)?;
        return Ok(Written::Merged(run.id));
    }
    let (nvml_count, kernel_count) = match e.source {
        Some(EventSource::Nvml) => (Some(e.count), None),
        Some(EventSource::Kmsg | EventSource::Import) => (None, Some(e.count)),
        None => (None, None),
    };
    let messages = add_messages(None, e.message, e.more_messages);
    conn.prepare_cached(
        "INSERT INTO events (ts_ms, host_id, gpu_id, kind, code, message, pci_bus_id, source,
           kernel_ms, count, last_ms, nvml_count, kernel_count, kernel_last_ms, messages)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
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
        e.kernel_ms,
        e.count.max(1),
        (e.last_ms > e.ts_ms).then_some(e.last_ms),
        nvml_count,
        kernel_count,
        e.kernel_last_ms.or(e.kernel_ms),
        messages
    ])?;
    Ok(Written::Inserted(conn.last_insert_rowid()))
}

/// Folds `e` into `run`: its side's count, the run's end, the kernel's words.
fn fold(conn: &Connection, run: &Run, e: &NewEvent, source: EventSource) -> Result<(), StoreError> {
    let kernel = !matches!(source, EventSource::Nvml);
    let was_kernel = run
        .source
        .as_deref()
        .is_some_and(|s| s.ends_with("kmsg") || s.ends_with("import"));
    let was_nvml = run.source.as_deref().is_some_and(|s| s.starts_with("nvml"));
    // The kernel log's first report of a run NVML found gives it its message and address.
    let takes_kernel_words = kernel && !was_kernel;
    let new_source = match (was_nvml || !kernel, was_kernel || kernel) {
        (true, true) => format!(
            "nvml+{}",
            if kernel {
                source.as_str()
            } else {
                run.source
                    .as_deref()
                    .and_then(|s| s.rsplit('+').next())
                    .unwrap_or("kmsg")
            }
        ),
        _ => run
            .source
            .clone()
            .unwrap_or_else(|| source.as_str().to_string()),
    };
    let (message, messages) = if takes_kernel_words {
        let mut more: Vec<String> = Vec::new();
        more.extend(e.more_messages.iter().cloned());
        (e.message.to_string(), add_messages(None, e.message, &more))
    } else if !kernel && was_kernel {
        // NVML's words add nothing to the kernel's.
        (run.message.clone(), run.messages.clone())
    } else {
        let mut more: Vec<String> = vec![e.message.to_string()];
        more.extend(e.more_messages.iter().cloned());
        (
            run.message.clone(),
            add_messages(run.messages.as_deref(), &run.message, &more),
        )
    };
    conn.prepare_cached(
        "UPDATE events SET
           source = ?2, message = ?3, messages = ?4,
           last_ms = CASE WHEN max(coalesce(last_ms, ts_ms), ?5) > ts_ms
                          THEN max(coalesce(last_ms, ts_ms), ?5) END,
           nvml_count = CASE WHEN ?6 THEN nvml_count ELSE coalesce(nvml_count, 0) + ?7 END,
           kernel_count = CASE WHEN ?6 THEN coalesce(kernel_count, 0) + ?7 ELSE kernel_count END,
           pci_bus_id = CASE WHEN ?6 THEN coalesce(pci_bus_id, ?8) ELSE pci_bus_id END,
           kernel_ms = CASE WHEN ?6 THEN min(coalesce(kernel_ms, ?9), ?9) ELSE kernel_ms END,
           kernel_last_ms = CASE WHEN ?6 THEN max(coalesce(kernel_last_ms, ?10), ?10)
                                 ELSE kernel_last_ms END
         WHERE id = ?1",
    )?
    .execute(params![
        run.id,
        new_source,
        message,
        messages,
        e.last_ms,
        kernel,
        e.count.max(1),
        e.pci,
        e.kernel_ms,
        e.kernel_last_ms.or(e.kernel_ms)
    ])?;
    recount(conn, run.id)
}

/// Sets run `id`'s `count` from its sides' counts (the larger: both saw the same events).
pub(super) fn recount(conn: &Connection, id: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE events SET count = max(coalesce(nvml_count, 0), coalesce(kernel_count, 0), 1)
         WHERE id = ?1",
    )?
    .execute([id])?;
    Ok(())
}

/// `stored` (one message per line) with the distinct `more` that are not `first` nor stored
/// yet, at most [`XID_RUN_MESSAGES`] in all; `None` when there are none.
fn add_messages(stored: Option<&str>, first: &str, more: &[String]) -> Option<String> {
    let mut all: Vec<&str> = stored.map(|s| s.lines().collect()).unwrap_or_default();
    for m in more {
        if all.len() >= XID_RUN_MESSAGES {
            break;
        }
        // One line per message: a message with a newline keeps its first line.
        let m = m.lines().next().unwrap_or("");
        if m != first && !m.is_empty() && !all.contains(&m) {
            all.push(m);
        }
    }
    (!all.is_empty()).then(|| all.join("\n"))
}

/// The run `e` folds into: the latest run of the same XID on the same GPU (or address) that
/// is still open at `e`'s time — it ended less than [`XID_RUN_GAP_MS`] before `e` began
/// (or, for the other source's report of an event, [`XID_PAIR_WINDOW_MS`] around it), and
/// began less than [`XID_RUN_SPAN_MS`] before `e`.
fn run_of(conn: &Connection, host_id: i64, e: &NewEvent) -> Result<Option<Run>, StoreError> {
    let (Some(code), Some(_)) = (e.code, e.source) else {
        return Ok(None);
    };
    if e.kind != "xid" {
        return Ok(None);
    }
    let target = match (e.gpu_id, e.pci) {
        (Some(_), _) => "gpu_id = ?4",
        (None, Some(_)) => "gpu_id IS NULL AND pci_bus_id = ?5",
        (None, None) => return Ok(None),
    };
    let sql = format!(
        "SELECT id, source, message, messages FROM events
         WHERE host_id = ?1 AND kind = 'xid' AND code = ?2 AND source IS NOT NULL
           AND ts_ms BETWEEN ?3 - ?7 AND ?6 + ?8
           AND coalesce(last_ms, ts_ms) >= ?3 - ?9 AND {target}
         ORDER BY coalesce(last_ms, ts_ms) DESC, id DESC LIMIT 1"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(
            params![
                host_id,
                code,
                e.ts_ms,
                e.gpu_id,
                e.pci,
                e.last_ms,
                XID_RUN_SPAN_MS,
                XID_PAIR_WINDOW_MS,
                XID_RUN_GAP_MS.max(XID_PAIR_WINDOW_MS)
            ],
            |r| {
                Ok(Run {
                    id: r.get(0)?,
                    source: r.get(1)?,
                    message: r.get(2)?,
                    messages: r.get(3)?,
                })
            },
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
        "SELECT max(coalesce(e.kernel_last_ms, e.kernel_ms, e.last_ms, e.ts_ms))
         FROM events e JOIN hosts h ON h.id = e.host_id
         WHERE h.name = ?1 AND e.kind = 'xid'",
        [name],
        |r| r.get(0),
    )?)
}
