//! A full disk under the daemon's database: space held in reserve beside it, and the store's
//! state while the disk is full.
//!
//! Invariants:
//! - The daemon keeps `<db>.reserve` ([`Store::keep_reserve`]): the WAL's bound plus
//!   [`RESERVE_EXTRA`] of zeros, so that a full disk still leaves room to delete old rows and
//!   go on writing. One-shot writers (imports, the CLI) keep none and behave as before.
//! - SQLITE_FULL while the database is below `max_db_size` means the disk is full (not the
//!   bound): the reserve is deleted and the bound is lowered to the file's current size, so
//!   the size bound's own machinery (`size.rs`) deletes the oldest raw rows first and their
//!   pages are reused; the file does not grow. This is logged once, as an error.
//! - While the disk is full, every [`RETRY_EVERY`] the reserve is written again; when that
//!   succeeds, space is back: the configured bound returns, and that is logged once.
//! - [`disk_full`] says whether a store of this process is in that state (for `/metrics`
//!   and the self alert).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Store, StoreError};

/// Bytes held beyond the WAL's bound.
pub const RESERVE_EXTRA: u64 = 1 << 20;

/// How often a full disk is tried for space again.
pub const RETRY_EVERY: Duration = Duration::from_secs(5);

/// Set while a store of this process runs on a full disk.
static DISK_FULL: AtomicBool = AtomicBool::new(false);

/// Whether the daemon's database is on a full disk now.
pub fn disk_full() -> bool {
    DISK_FULL.load(Ordering::Relaxed)
}

/// The reserve file and, while the disk is full, what to restore.
#[derive(Debug)]
pub(super) struct Reserve {
    path: PathBuf,
    bytes: u64,
    full: Option<Full>,
}

#[derive(Debug)]
struct Full {
    configured_max: u64,
    since: Instant,
    next_try: Instant,
}

/// Writes `bytes` zeros to `path` (replacing it); on failure removes what was written.
fn write_reserve(path: &Path, bytes: u64) -> std::io::Result<()> {
    let result = (|| {
        let mut f = std::fs::File::create(path)?;
        let chunk = vec![0u8; 64 * 1024];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(path);
    }
    result
}

impl Store {
    /// Creates the reserve beside the database (the daemon calls this once after opening). A
    /// disk too full for it is logged, not an error: the daemon runs without one.
    pub fn keep_reserve(&mut self) {
        let wal_limit: i64 = self
            .conn
            .pragma_query_value(None, "journal_size_limit", |r| r.get(0))
            .unwrap_or(4 << 20);
        let bytes = u64::try_from(wal_limit).unwrap_or(4 << 20) + RESERVE_EXTRA;
        let mut name = self.path.as_os_str().to_owned();
        name.push(".reserve");
        let path = PathBuf::from(name);
        if let Err(e) = write_reserve(&path, bytes) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the disk-full reserve; running without one");
        }
        self.reserve = Some(Reserve {
            path,
            bytes,
            full: None,
        });
    }

    /// After SQLITE_FULL: when the disk (not `max_db_size`) is full and a reserve is kept,
    /// frees the reserve and caps the bound at the file's current size. True when this write
    /// found the disk full.
    pub(super) fn disk_full_at_write(&mut self) -> Result<bool, StoreError> {
        let usage = self.usage()?;
        let file = usage.page_count * usage.page_size;
        let Some(r) = self.reserve.as_mut() else {
            return Ok(false);
        };
        if r.full.is_some() || file + usage.page_size >= self.cfg.max_db_size {
            return Ok(r.full.is_some());
        }
        let freed = std::fs::remove_file(&r.path).is_ok();
        let now = Instant::now();
        r.full = Some(Full {
            configured_max: self.cfg.max_db_size,
            since: now,
            next_try: now + RETRY_EVERY,
        });
        self.cfg.max_db_size = file;
        let pages = i64::try_from(usage.page_count).unwrap_or(i64::MAX);
        self.conn
            .pragma_update_and_check(None, "max_page_count", pages, |row| row.get::<_, i64>(0))?;
        DISK_FULL.store(true, Ordering::Relaxed);
        tracing::error!(
            path = %self.path.display(),
            file_bytes = file,
            reserve_freed = freed,
            "the disk holding the database is full: the oldest samples are deleted to make room \
             and the file is kept at its current size until space returns"
        );
        Ok(true)
    }

    /// While the disk is full: every [`RETRY_EVERY`], tries to write the reserve again;
    /// when it fits, restores the configured bound.
    pub(super) fn disk_space_back(&mut self) -> Result<(), StoreError> {
        let Some(r) = self.reserve.as_mut() else {
            return Ok(());
        };
        let Some(f) = r.full.as_mut() else {
            return Ok(());
        };
        let now = Instant::now();
        if now < f.next_try {
            return Ok(());
        }
        if write_reserve(&r.path, r.bytes).is_err() {
            f.next_try = now + RETRY_EVERY;
            return Ok(());
        }
        let (configured, since) = (f.configured_max, f.since);
        r.full = None;
        self.cfg.max_db_size = configured;
        let pages = i64::try_from(configured / self.page_size).unwrap_or(i64::MAX);
        self.conn
            .pragma_update_and_check(None, "max_page_count", pages, |row| row.get::<_, i64>(0))?;
        DISK_FULL.store(false, Ordering::Relaxed);
        tracing::warn!(
            path = %self.path.display(),
            full_for = %crate::format::duration(since.elapsed().as_millis() as i64),
            "disk space is back: the database may grow to max_db_size again"
        );
        Ok(())
    }
}

#[cfg(test)]
#[path = "reserve_tests.rs"]
mod tests;
