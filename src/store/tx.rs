//! Transactions begun and ended through cached statements: `BEGIN`, `COMMIT` and `ROLLBACK`
//! are parsed once per connection, not at every tick (rusqlite's own transactions parse their
//! SQL at every use, a tenth of the writer thread's time at one tick a second).
//!
//! Invariants: a [`CachedTx`] that is dropped without [`CachedTx::commit`] rolls back (as
//! rusqlite's do by default); a failed commit leaves the transaction to that rollback.

use std::ops::Deref;

use rusqlite::Connection;

use super::StoreError;

/// A transaction on `conn`; derefs to the connection for the statements inside it.
pub struct CachedTx<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> CachedTx<'c> {
    /// `BEGIN IMMEDIATE`: takes the write lock now (waiting up to the busy timeout).
    pub fn immediate(conn: &'c Connection) -> Result<Self, StoreError> {
        Self::begin(conn, "BEGIN IMMEDIATE")
    }

    /// `BEGIN`: a read snapshot from the first read on (one lock for many reads).
    pub fn deferred(conn: &'c Connection) -> Result<Self, StoreError> {
        Self::begin(conn, "BEGIN")
    }

    fn begin(conn: &'c Connection, sql: &str) -> Result<Self, StoreError> {
        conn.prepare_cached(sql)?.execute([])?;
        Ok(Self { conn, open: true })
    }

    pub fn commit(mut self) -> Result<(), StoreError> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Deref for CachedTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for CachedTx<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            // Nothing to do with a failure here: the connection rolls back when it closes.
            let _ = self
                .conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut s| s.execute([]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let c = Connection::open_in_memory().expect("db");
        c.execute_batch("CREATE TABLE t (x INTEGER)")
            .expect("table");
        c
    }

    fn count(c: &Connection) -> i64 {
        c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count")
    }

    #[test]
    fn commits_and_rolls_back_on_drop() {
        let c = db();
        for _ in 0..3 {
            let tx = CachedTx::immediate(&c).expect("begin");
            tx.execute("INSERT INTO t VALUES (1)", []).expect("insert");
            tx.commit().expect("commit");
        }
        {
            let tx = CachedTx::immediate(&c).expect("begin");
            tx.execute("INSERT INTO t VALUES (2)", []).expect("insert");
        }
        assert_eq!(count(&c), 3);
        assert!(c.is_autocommit());
        let tx = CachedTx::deferred(&c).expect("read");
        assert_eq!(count(&tx), 3);
    }
}
