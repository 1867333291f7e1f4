//! The daemon's lock: one `gpuwatch run` per database, through an advisory lock (`flock`,
//! std's `File::try_lock`) on `<database>.lock` beside the file, which holds the owner's pid
//! for the message of the one refused.
//!
//! Invariants:
//! - The kernel releases the lock when its process ends, however it ends (kill -9 included):
//!   a lock file left behind is never stale, whatever pid it still names.
//! - The lock file is never deleted (a process could hold the lock on an unlinked inode while
//!   another locks a new file); it is only rewritten by the process that holds its lock.
//! - Only `gpuwatch run` holds it for its life. One-shot writers (imports, `silence`,
//!   `gpu set`) do not take it, so they keep working beside a running daemon; they take it
//!   only for the moment they move a damaged database aside (`recover.rs`), which they may not
//!   do while a daemon has the file open.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::StoreError;

/// The lock file of the database at `db`: `<db>.lock`.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct DaemonLock {
    /// Kept open for the life of the lock: closing it releases the lock.
    _file: File,
    path: PathBuf,
}

impl DaemonLock {
    /// Takes the lock of the database at `db` without waiting. Fails with
    /// [`StoreError::Locked`] (naming the holder's pid when the file has one) when another
    /// process holds it, and with [`StoreError::PermissionDenied`] when the lock file cannot
    /// be created or opened.
    pub fn acquire(db: &Path) -> Result<DaemonLock, StoreError> {
        if let Some(parent) = db
            .parent()
            .filter(|p| !p.as_os_str().is_empty() && !p.is_dir())
        {
            return Err(StoreError::MissingParent(parent.to_path_buf()));
        }
        let path = lock_path(db);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o640)
            .open(&path)
            .map_err(|e| open_error(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    db: db.to_path_buf(),
                    pid: read_pid(&mut file),
                });
            }
            Err(TryLockError::Error(e)) => return Err(StoreError::LockFile { path, source: e }),
        }
        let pid = std::process::id();
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{pid}"));
        if let Err(source) = written {
            return Err(StoreError::LockFile { path, source });
        }
        Ok(DaemonLock { _file: file, path })
    }

    /// Whether another process holds the lock of `db` now, and its pid if known (a probe:
    /// takes and releases the lock; never creates the file).
    pub fn holder(db: &Path) -> Option<Option<u32>> {
        let mut file = File::open(lock_path(db)).ok()?;
        match file.try_lock() {
            Err(TryLockError::WouldBlock) => Some(read_pid(&mut file)),
            _ => None,
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok().filter(|p| *p > 0)
}

fn open_error(path: &Path, e: std::io::Error) -> StoreError {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        StoreError::PermissionDenied {
            path: path.to_path_buf(),
            detail: e.to_string(),
        }
    } else {
        StoreError::LockFile {
            path: path.to_path_buf(),
            source: e,
        }
    }
}
