//! A damaged database at start: what counts as damaged, and moving it aside.
//!
//! Damaged means SQLite itself says the content is wrong: `SQLITE_NOTADB` (garbage where the
//! header should be), `SQLITE_CORRUPT` (a page that contradicts the file's structure, a file
//! shorter than its header says), `PRAGMA quick_check` findings (the daemon's start runs it),
//! or a main file with gpuwatch's `application_id` that reads as another application's
//! through its `-wal` (a WAL from another database). Everything else is NOT damage and is
//! reported as it is, nothing moved: a busy or locked file (another process), I/O errors, a
//! full disk, permissions, a schema newer than this binary, a file of another application.
//!
//! Invariants:
//! - A damaged file is never deleted or rewritten: it is renamed to
//!   `<db>.corrupt-<UTC time>` with its `-wal`, `-shm` and `-journal` beside it under the same
//!   name (so SQLite opens the copy with its WAL for a post-mortem), the directory synced, and
//!   a new database started at the old path.
//! - Moving happens only under the daemon's lock ([`super::lock`]): the daemon holds it; a
//!   one-shot writer takes it for the move and refuses when a daemon holds it.
//! - Read-only opens never move anything; they report the damage ([`StoreError::Corrupt`]).

use std::io::Read;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::{APPLICATION_ID, StoreError};

/// Suffix of a moved-aside database's name, before its timestamp.
pub const CORRUPT_SUFFIX: &str = ".corrupt-";
/// The files SQLite keeps beside a database, moved with it.
const COMPANIONS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// A damaged database that was moved aside for a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Where the damaged file is now.
    pub moved_to: PathBuf,
    /// What SQLite said about it.
    pub reason: String,
    /// When it was moved (Unix ms, wall clock).
    pub at_ms: i64,
}

/// Whether `code` says the file's content is damaged.
pub fn is_damage_code(code: Option<rusqlite::ErrorCode>) -> bool {
    matches!(
        code,
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// What makes `e`, met while opening `path` for writing, a sign of damage; `None` when it is
/// not one.
pub(super) fn damage(path: &Path, e: &StoreError) -> Option<String> {
    match e {
        StoreError::Corrupt { detail, .. } => Some(detail.clone()),
        StoreError::Sqlite(s) if is_damage_code(s.sqlite_error_code()) => Some(s.to_string()),
        StoreError::Migration { source, .. } if is_damage_code(source.sqlite_error_code()) => {
            Some(source.to_string())
        }
        StoreError::NotGpuwatch { application_id, .. }
            if header_application_id(path) == Some(APPLICATION_ID) =>
        {
            Some(format!(
                "the file is a gpuwatch database but reads as application_id {application_id:#x} \
                 through its -wal: the WAL belongs to another database"
            ))
        }
        _ => None,
    }
}

/// `PRAGMA quick_check(limit)` on `conn`: its findings, none when the file is sound. SQLite
/// heads the first finding's row with the schema it is in (`*** in database main ***` and a
/// newline); that heading is dropped. The one reader of the check (the daemon's start and
/// the doctor).
pub fn quick_check_findings(conn: &Connection, limit: u32) -> rusqlite::Result<Vec<String>> {
    let rows: Vec<String> = conn
        .prepare(&format!("PRAGMA quick_check({limit})"))?
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    if rows == ["ok"] {
        return Ok(Vec::new());
    }
    Ok(rows
        .iter()
        .flat_map(|row| row.lines())
        .filter(|l| !l.starts_with("*** in database") && !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}

/// `PRAGMA quick_check` on `conn`: `Err(Corrupt)` with its first findings unless it is ok.
pub(super) fn quick_check(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let findings = quick_check_findings(conn, 3)?;
    if findings.is_empty() {
        return Ok(());
    }
    Err(StoreError::Corrupt {
        path: path.to_path_buf(),
        detail: format!("quick_check: {}", findings.join("; ")),
    })
}

/// The `application_id` in the main file's header (bytes 68..72), read directly: what the
/// file says without its WAL. `None` for a file too short or not SQLite's.
fn header_application_id(path: &Path) -> Option<i32> {
    let mut head = [0u8; 72];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    if &head[..16] != b"SQLite format 3\0" {
        return None;
    }
    Some(i32::from_be_bytes([head[68], head[69], head[70], head[71]]))
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Moves the damaged database at `path` (and its companions) aside. The caller holds the
/// daemon's lock and has closed every connection of its own.
pub(super) fn move_aside(path: &Path, reason: &str) -> Result<Recovered, StoreError> {
    let now = chrono::Utc::now();
    let stamp = now.format("%Y%m%dT%H%M%SZ").to_string();
    let base = with_suffix(path, &format!("{CORRUPT_SUFFIX}{stamp}"));
    let moved_to = (1..)
        .map(|n| {
            if n == 1 {
                base.clone()
            } else {
                with_suffix(&base, &format!("-{n}"))
            }
        })
        .find(|p| !p.exists() && !with_suffix(p, "-wal").exists())
        .unwrap_or(base);
    let io = |what: &str, source: std::io::Error| StoreError::MoveAside {
        path: path.to_path_buf(),
        what: what.to_string(),
        source,
    };
    std::fs::rename(path, &moved_to).map_err(|e| io("rename the database", e))?;
    for suffix in COMPANIONS {
        let from = with_suffix(path, suffix);
        if !from.exists() {
            continue;
        }
        if let Err(e) = std::fs::rename(&from, with_suffix(&moved_to, suffix)) {
            // A new database must not start beside the old one's WAL: put the file back.
            let _ = std::fs::rename(&moved_to, path);
            return Err(io(&format!("move its {suffix} file"), e));
        }
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let synced = std::fs::File::open(dir).and_then(|d| d.sync_all());
        if let Err(e) = synced {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot sync the directory after moving the database aside");
        }
    }
    tracing::warn!(
        db = %path.display(),
        moved_to = %moved_to.display(),
        reason,
        "the database was damaged: it was moved aside (kept for a post-mortem) and a new one started"
    );
    Ok(Recovered {
        moved_to,
        reason: reason.to_string(),
        at_ms: now.timestamp_millis(),
    })
}

/// The damaged databases moved aside beside `db` (`<db>.corrupt-*`, without their
/// companions), oldest first.
pub fn moved_aside(db: &Path) -> std::io::Result<Vec<PathBuf>> {
    let dir = match db.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(name) = db.file_name().and_then(|n| n.to_str()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{name}{CORRUPT_SUFFIX}");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_str()?.to_string();
            let companion = COMPANIONS.iter().any(|s| n.ends_with(s));
            (n.starts_with(&prefix) && !companion).then(|| dir.join(n))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Refuses a database file (or one of its companions) this process cannot read and write,
/// before SQLite, which would open it read-only or fail later with a vaguer error. Other
/// errors are left for SQLite to report.
pub(super) fn check_access(path: &Path) -> Result<(), StoreError> {
    let files =
        std::iter::once(path.to_path_buf()).chain(COMPANIONS.iter().map(|s| with_suffix(path, s)));
    for f in files.filter(|f| f.exists()) {
        let opened = std::fs::OpenOptions::new().read(true).write(true).open(&f);
        if let Err(e) = opened
            && e.kind() == std::io::ErrorKind::PermissionDenied
        {
            return Err(StoreError::PermissionDenied {
                path: f,
                detail: e.to_string(),
            });
        }
    }
    Ok(())
}
