//! Ad-hoc SQL for `gpuwatch query`: one read-only statement over the stable views, streamed
//! row by row into a [`RowSink`], interruptible from another thread.
//!
//! Invariants:
//! - The connection is opened with `SQLITE_OPEN_READ_ONLY` ([`open_for_query`]): no statement
//!   can change the file, whatever it does to `PRAGMA query_only`. `ATTACH` is refused
//!   (`SQLITE_LIMIT_ATTACHED` = 0), so no other file can be written or created either (this
//!   also stops `VACUUM INTO`, which attaches its target).
//! - Exactly one statement runs: a trailing `;` or comment is fine, a second statement is
//!   refused before anything executes.
//! - A statement SQLite itself reports as writing is refused before it runs, with a message
//!   that says why; SQLite's read-only flag is the backstop.
//! - A `PRAGMA` with a value is refused while the statement is prepared (an authorizer set by
//!   [`open_for_query`]): SQLite applies pragmas such as `query_only` during the prepare, so a
//!   refusal after it would come too late (fuzzing found `PRAGMA query_only=0` switching the
//!   flag off although the statement was refused).
//! - Values keep their SQLite storage class: INTEGER stays [`Cell::Int`], NULL stays
//!   [`Cell::Null`] (never 0 or "").

use std::path::Path;

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode};

use super::StoreError;

/// One value of a result row, in SQLite's storage classes.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Cell {
    pub(crate) fn from_ref(v: ValueRef<'_>) -> Self {
        match v {
            ValueRef::Null => Self::Null,
            ValueRef::Integer(i) => Self::Int(i),
            ValueRef::Real(f) => Self::Real(f),
            ValueRef::Text(t) => Self::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Self::Blob(b.to_vec()),
        }
    }

    /// Becomes `v`, reusing its text or blob buffer when it has one (a query's rows share
    /// one set of cells: no allocation per row once the buffers are grown).
    pub(crate) fn set(&mut self, v: ValueRef<'_>) {
        match (self, v) {
            (Self::Text(s), ValueRef::Text(t)) => {
                s.clear();
                match std::str::from_utf8(t) {
                    Ok(t) => s.push_str(t),
                    Err(_) => s.push_str(&String::from_utf8_lossy(t)),
                }
            }
            (Self::Blob(b), ValueRef::Blob(v)) => {
                b.clear();
                b.extend_from_slice(v);
            }
            (cell, v) => *cell = Self::from_ref(v),
        }
    }

    /// True for INTEGER and REAL (right-aligned in tables).
    pub fn is_number(&self) -> bool {
        matches!(self, Self::Int(_) | Self::Real(_))
    }
}

/// Where the rows of a query go (a table, CSV, JSON or a test's vector).
pub trait RowSink {
    /// Called once, before any row, with the result's column names.
    fn columns(&mut self, names: &[String]) -> std::io::Result<()>;
    /// Called once per row, in the statement's order.
    fn row(&mut self, cells: &[Cell]) -> std::io::Result<()>;
}

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("the query is empty: give one SQL statement, e.g. \"SELECT * FROM gpu_inventory\"")]
    Empty,
    #[error(
        "several SQL statements given: gpuwatch query runs exactly one (a trailing ';' is fine); \
         run them one at a time"
    )]
    MultipleStatements,
    #[error(
        "gpuwatch query is read-only: {0}; the database is opened read-only and nothing was \
         changed"
    )]
    Write(String),
    #[error(
        "ATTACH is not allowed: gpuwatch query reads only the database given by --db or the \
         config, opened read-only"
    )]
    Attach,
    #[error(
        "load_extension is not allowed: gpuwatch query runs SQLite's built-in functions only \
         (extension loading is disabled in its SQLite)"
    )]
    Extension,
    #[error("SQL:{line}:{col}: {msg}")]
    Syntax {
        msg: String,
        line: usize,
        col: usize,
    },
    #[error("the statement is not valid: {0}")]
    Invalid(String),
    #[error("the query was interrupted")]
    Interrupted,
    #[error("SQLite: {0}")]
    Sqlite(rusqlite::Error),
    #[error("writing the output failed: {0}")]
    Output(#[from] std::io::Error),
}

/// Opens `path` for ad-hoc queries: [`super::open_read_only`] (read-only at the SQLite level,
/// schema checked), `ATTACH` disabled, `query_only` set.
pub fn open_for_query(path: &Path) -> Result<Connection, StoreError> {
    let mut conn = super::open_read_only(path)?;
    conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    conn.pragma_update(None, "query_only", true)?;
    conn.authorizer(Some(authorize))?;
    Ok(conn)
}

/// Pragmas that take a table or index name and only read.
const READ_WITH_ARG: &[&str] = &[
    "table_info",
    "table_xinfo",
    "table_list",
    "index_info",
    "index_xinfo",
    "index_list",
    "foreign_key_list",
    "foreign_key_check",
    "integrity_check",
    "quick_check",
];

/// The authorizer of query connections: denies, while a statement is prepared, every pragma
/// given a value (except [`READ_WITH_ARG`]), whatever the spelling.
fn authorize(ctx: AuthContext<'_>) -> Authorization {
    match ctx.action {
        AuthAction::Pragma {
            pragma_name,
            pragma_value: Some(_),
        } if !READ_WITH_ARG.contains(&pragma_name.to_ascii_lowercase().as_str()) => {
            Authorization::Deny
        }
        _ => Authorization::Allow,
    }
}

/// 1-based line and column of byte `offset` in `sql`.
fn line_col(sql: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(sql.len());
    while !sql.is_char_boundary(end) {
        end -= 1;
    }
    let before = &sql[..end];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// `prepared`: false while preparing (an error there is in the SQL text itself).
fn classify(e: rusqlite::Error, sql: &str, prepared: bool) -> QueryError {
    match &e {
        rusqlite::Error::MultipleStatement => return QueryError::MultipleStatements,
        rusqlite::Error::SqlInputError { msg, offset, .. } => {
            let (line, col) = line_col(sql, usize::try_from(*offset).unwrap_or(0));
            return QueryError::Syntax {
                msg: msg.clone(),
                line,
                col,
            };
        }
        _ => {}
    }
    let msg = e.to_string();
    if msg.contains("too many attached databases") {
        return QueryError::Attach;
    }
    if msg.contains("not authorized") && sql.to_ascii_lowercase().contains("load_extension") {
        return QueryError::Extension;
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::OperationInterrupted) => QueryError::Interrupted,
        Some(ErrorCode::ReadOnly) => QueryError::Write(msg),
        Some(ErrorCode::AuthorizationForStatementDenied) => QueryError::Write(format!(
            "{msg} (a PRAGMA with a value would change the connection)"
        )),
        _ if !prepared => QueryError::Invalid(msg),
        _ => QueryError::Sqlite(e),
    }
}

/// SQLite counts `PRAGMA x = v` / `PRAGMA x(v)` as read-only even when it changes the
/// connection (`query_only`, `writable_schema`, ...): refuse every pragma with a value,
/// except the read-only ones that take a table or index name.
fn pragma_setter(sql: &str) -> Option<String> {
    let mut rest = sql.trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("--") {
            rest = r
                .split_once('\n')
                .map_or("", |(_, after)| after)
                .trim_start();
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r
                .split_once("*/")
                .map_or("", |(_, after)| after)
                .trim_start();
        } else {
            break;
        }
    }
    let word = rest.split_whitespace().next()?;
    if !word.eq_ignore_ascii_case("pragma") {
        return None;
    }
    let body = rest[word.len()..].trim();
    let name: String = body
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    let after = body[name.len()..].trim_start();
    let bare = name
        .rsplit('.')
        .next()
        .unwrap_or(&name)
        .to_ascii_lowercase();
    let sets = after.starts_with('=')
        || (after.starts_with('(') && !READ_WITH_ARG.contains(&bare.as_str()));
    sets.then(|| format!("PRAGMA {name} with a value would change the connection"))
}

/// Runs the one statement in `sql` on `conn` and streams its rows into `sink`; returns the
/// number of rows. Interrupt it from another thread with `conn.get_interrupt_handle()`.
pub fn run(conn: &Connection, sql: &str, sink: &mut dyn RowSink) -> Result<u64, QueryError> {
    if sql.trim().is_empty() {
        return Err(QueryError::Empty);
    }
    // Before the prepare, which would already apply the pragma (the authorizer stops any
    // spelling this misses).
    if let Some(why) = pragma_setter(sql) {
        return Err(QueryError::Write(why));
    }
    let mut stmt = conn.prepare(sql).map_err(|e| match e {
        rusqlite::Error::Empty => QueryError::Empty,
        e => classify(e, sql, false),
    })?;
    if !stmt.readonly() {
        let verb = sql
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_uppercase();
        return Err(QueryError::Write(format!(
            "this {verb} statement would write"
        )));
    }
    let names: Vec<String> = stmt.column_names().map(str::to_string).collect();
    sink.columns(&names)?;
    let mut rows = stmt.query([]).map_err(|e| classify(e, sql, true))?;
    let mut n = 0u64;
    let mut cells = vec![Cell::Null; names.len()];
    while let Some(row) = rows.next().map_err(|e| classify(e, sql, true))? {
        for (i, cell) in cells.iter_mut().enumerate() {
            cell.set(row.get_ref(i).map_err(QueryError::Sqlite)?);
        }
        sink.row(&cells)?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_line_and_column() {
        assert_eq!(line_col("SELECT x FORM t", 9), (1, 10));
        assert_eq!(line_col("SELECT x\nFORM t", 9), (2, 1));
        assert_eq!(line_col("é", 1), (1, 1));
    }

    #[test]
    fn cells_keep_storage_classes() {
        assert_eq!(Cell::from_ref(ValueRef::Integer(3)), Cell::Int(3));
        assert_eq!(Cell::from_ref(ValueRef::Null), Cell::Null);
        assert!(Cell::Real(1.5).is_number());
        assert!(!Cell::Text("1".into()).is_number());
    }

    /// Rows are not needed: the statements below must fail.
    struct NoRows;

    impl RowSink for NoRows {
        fn columns(&mut self, _names: &[String]) -> std::io::Result<()> {
            Ok(())
        }
        fn row(&mut self, _cells: &[Cell]) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Found by the `sql_guard` fuzz target: SQLite applies `PRAGMA query_only = 0` while it
    /// prepares the statement, so refusing it after the prepare left the connection writable
    /// (the read-only open still protected the file). Every spelling is refused before.
    #[test]
    fn pragma_setters_are_refused_before_they_take_effect() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("q.db");
        drop(super::super::open(&path, &super::super::StoreConfig::new("t")).expect("create"));
        let conn = open_for_query(&path).expect("open for query");
        for sql in [
            "PRAGMA query_only=0",
            "PRAGMA query_only=0; DELETE FROM samples",
            "PRAGMA/**/query_only=0",
            "pragma \"query_only\" = 0",
            "PRAGMA main.query_only(0)",
        ] {
            let r = run(&conn, sql, &mut NoRows);
            assert!(matches!(r, Err(QueryError::Write(_))), "{sql}: {r:?}");
            let on: i64 = conn
                .query_row("PRAGMA query_only", [], |r| r.get(0))
                .expect("read query_only");
            assert_eq!(on, 1, "{sql} switched query_only off");
        }
        assert!(run(&conn, "PRAGMA table_info(samples)", &mut NoRows).is_ok());
    }
}
