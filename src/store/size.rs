//! The `max_db_size` bound: which data goes when the file is full, and SQLITE_FULL recovery.
//!
//! Invariants:
//! - While `(page_count - freelist_count) * page_size` exceeds [`HIGH_WATER`](super::HIGH_WATER) of
//!   `max_db_size`, each maintenance step deletes one batch of the oldest raw rows of the
//!   whole file (all hosts), never those at the newest raw timestamp. Only when no older raw
//!   row is left do the oldest rollups and events go. Freed pages are reused, so the file
//!   stops growing; `PRAGMA max_page_count` is the hard cap that makes it a guarantee.
//! - Raw rows are rolled up before they are deleted, unless there is no room even for that
//!   (then space wins and those minutes have no rollup).
//! - After SQLITE_FULL, [`Store::free_space_emergency`] deletes down to [`EMERGENCY_TARGET`]
//!   so that the failed write can be retried once.

use rusqlite::{Connection, TransactionBehavior};

use super::bounds::{
    AGGREGATED, DELETE_BATCH_ROWS, MaintenanceStats, RAW, Table, delete_range, newest, oldest,
    opt_max, opt_min,
};
use super::rollup;
use super::{Store, StoreError};

/// Rollup and event rows deleted at most per step for the size bound.
const AGGREGATED_BATCH_ROWS: i64 = 500;
/// After SQLITE_FULL, old data is deleted until the used pages are below this fraction.
const EMERGENCY_TARGET: f64 = 0.75;

impl Store {
    /// After SQLITE_FULL: deletes oldest data until the used pages are below
    /// [`EMERGENCY_TARGET`] of `max_db_size` or nothing deletable is left.
    pub(super) fn free_space_emergency(&mut self) -> Result<MaintenanceStats, StoreError> {
        let target = (self.cfg.max_db_size as f64 * EMERGENCY_TARGET) as u64;
        let mut st = MaintenanceStats::default();
        while self.usage()?.used_bytes > target {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = size_step(&tx, &mut st, target)?;
            tx.commit()?;
            if n == 0 {
                break;
            }
        }
        st.used_bytes = self.usage()?.used_bytes;
        tracing::warn!(
            deleted_raw = st.size_deleted_raw,
            deleted_rollups = st.size_deleted_rollups,
            used_bytes = st.used_bytes,
            "freed space after SQLITE_FULL"
        );
        Ok(st)
    }
}

/// Used bytes as the connection sees them (inside a transaction: including its changes).
pub(super) fn used_bytes(conn: &Connection) -> Result<u64, StoreError> {
    // One cached statement: `/metrics` asks at every scrape.
    let (pages, size): (i64, i64) = conn
        .prepare_cached(
            "SELECT p.page_count - f.freelist_count, s.page_size
             FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() s",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(u64::try_from(pages.max(0) * size).unwrap_or_default())
}

/// Deletes one batch of the oldest data of the whole file: raw rows first (never those at
/// the newest raw timestamp); when no older raw row is left and the used bytes are still
/// above `target`, the oldest rollups and events. Returns the rows deleted.
pub(super) fn size_step(
    conn: &Connection,
    st: &mut MaintenanceStats,
    target: u64,
) -> Result<usize, StoreError> {
    let mut lo = None;
    let mut newest_raw = None;
    for t in RAW {
        lo = opt_min(lo, oldest(conn, t)?);
        newest_raw = opt_max(newest_raw, newest(conn, t)?);
    }
    let mut n = 0;
    let older_raw = match (lo, newest_raw) {
        (Some(lo), Some(newest)) if lo < newest => Some((lo, newest)),
        _ => None,
    };
    if let Some((lo, newest_raw)) = older_raw {
        let mut hi = newest_raw;
        for t in [Table::Samples, Table::ProcessSamples] {
            if let Some(ts) = rollup::ts_at_offset(conn, t.name(), lo, DELETE_BATCH_ROWS)? {
                hi = hi.min(ts);
            }
        }
        if hi <= lo {
            hi = lo + 1;
        }
        // Roll up what is about to go. If even that does not fit (the hard cap was hit),
        // the space comes first: those minutes lose their rollups.
        conn.execute_batch("SAVEPOINT rollup_before_delete")?;
        let mut rolled = 0;
        let mut result = Ok(());
        for h in rollup::load_hosts(conn)? {
            match rollup::ensure_rolled_up(conn, &h, hi) {
                Ok(r) => rolled += r,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        match result {
            Ok(()) => st.rollup_rows += rolled,
            Err(e) if e.is_full() => {
                tracing::warn!("no space to roll up the raw data deleted for max_db_size");
                conn.execute_batch("ROLLBACK TO rollup_before_delete")?;
            }
            Err(e) => return Err(e),
        }
        conn.execute_batch("RELEASE rollup_before_delete")?;
        for t in RAW {
            n += delete_range(conn, t, lo, hi, None)?;
        }
        st.size_deleted_raw += n;
        if hi < newest_raw || used_bytes(conn)? <= target {
            return Ok(n);
        }
    }
    let Some(lo) = opt_min(oldest(conn, Table::Rollups)?, oldest(conn, Table::Events)?) else {
        return Ok(n);
    };
    let mut hi = i64::MAX;
    for t in AGGREGATED {
        if let Some(ts) = rollup::ts_at_offset(conn, t.name(), lo, AGGREGATED_BATCH_ROWS)? {
            hi = hi.min(ts);
        }
    }
    if hi <= lo {
        hi = lo + 1;
    }
    let mut m = 0;
    for t in AGGREGATED {
        m += delete_range(conn, t, lo, hi, None)?;
    }
    st.size_deleted_rollups += m;
    Ok(n + m)
}
