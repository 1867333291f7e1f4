//! Harness body of the SQL guard of `gpuwatch query` ([`crate::store::query::run`]) over a
//! database with the current schema, opened as the command opens it
//! ([`crate::store::query::open_for_query`]).
//!
//! Checked after every statement: the database file is unchanged, the connection is still
//! `query_only` with no database attached, and a statement that ran was one SQLite calls
//! read-only. Harness-only bounds keep one input cheap: a statement is interrupted after
//! 250 ms (as Ctrl-C interrupts the command), at most 1000 rows are read, and values are
//! limited to 1 MiB (`SQLITE_LIMIT_LENGTH`).

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use rusqlite::Connection;
use rusqlite::limits::Limit;

use crate::store::query::{Cell, QueryError, RowSink, open_for_query, run};

const MAX_ROWS: u64 = 1000;
const DEADLINE: Duration = Duration::from_millis(250);

/// The database every thread's connection reads: created once per process.
fn database() -> &'static Option<(tempfile::TempDir, PathBuf)> {
    static DB: OnceLock<Option<(tempfile::TempDir, PathBuf)>> = OnceLock::new();
    DB.get_or_init(|| {
        let dir = tempfile::tempdir().ok()?;
        let path = dir.path().join("fuzz.db");
        let store = crate::store::open(&path, &crate::store::StoreConfig::new("fuzz")).ok()?;
        drop(store);
        Some((dir, path))
    })
}

thread_local! {
    static CONN: RefCell<Option<Connection>> = const { RefCell::new(None) };
}

/// Stops reading after [`MAX_ROWS`] rows.
struct Sink(u64);

impl RowSink for Sink {
    fn columns(&mut self, _names: &[String]) -> std::io::Result<()> {
        Ok(())
    }
    fn row(&mut self, cells: &[Cell]) -> std::io::Result<()> {
        self.0 += 1;
        let _ = cells.iter().filter(|c| c.is_number()).count();
        if self.0 >= MAX_ROWS {
            return Err(std::io::Error::other("enough rows"));
        }
        Ok(())
    }
}

fn file_state(path: &std::path::Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// One statement through the guard; panics when the guard let something change.
pub fn sql_guard(data: &[u8]) {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let Some((_, path)) = database() else {
        panic!("cannot create the fuzzing database");
    };
    CONN.with_borrow_mut(|slot| {
        if slot.is_none() {
            let conn = match open_for_query(path) {
                Ok(c) => c,
                Err(e) => panic!("cannot open the fuzzing database: {e}"),
            };
            conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, 1 << 20)
                .unwrap_or_else(|e| panic!("cannot set a limit: {e}"));
            *slot = Some(conn);
        }
        let Some(conn) = slot.as_ref() else {
            return;
        };
        let before = file_state(path);
        let handle = conn.get_interrupt_handle();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let result = std::thread::scope(|s| {
            s.spawn(move || {
                if wait.recv_timeout(DEADLINE).is_err() {
                    handle.interrupt();
                }
            });
            let r = run(conn, sql, &mut Sink(0));
            let _ = done.send(());
            r
        });
        if result.is_ok() {
            let stmt = conn.prepare(sql);
            assert!(
                stmt.is_ok_and(|s| s.readonly()),
                "a statement SQLite calls writing ran: {sql:?}"
            );
        }
        if let Err(QueryError::Syntax { line, col, .. }) = &result {
            assert!(*line >= 1 && *col >= 1, "syntax error at {line}:{col}");
        }
        assert_eq!(
            file_state(path),
            before,
            "the database file changed after {sql:?}"
        );
        let query_only: i64 = conn
            .query_row("PRAGMA query_only", [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("PRAGMA query_only failed after {sql:?}: {e}"));
        assert_eq!(query_only, 1, "query_only was switched off by {sql:?}");
        let attached: Vec<String> = conn
            .prepare("SELECT name FROM pragma_database_list")
            .and_then(|mut s| {
                s.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap_or_else(|e| panic!("database_list failed after {sql:?}: {e}"));
        assert!(
            attached.iter().all(|n| n == "main" || n == "temp"),
            "a database was attached by {sql:?}: {attached:?}"
        );
    });
}
