//! The remote-write queue (`remote_write_queue`, `remote_write_status`, migration 0011):
//! requests waiting for their target, oldest first, and what each target has done.
//!
//! Invariants: one request per row, deleted only when its target took it (2xx) or refused
//! it for good (4xx other than 408/429: counted as refused); a full queue drops its oldest
//! rows (counted as dropped), never the new one; every change is one transaction.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::model::TsMs;

/// A queued request.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    pub id: i64,
    pub created_ms: TsMs,
    pub samples: i64,
    pub payload: Vec<u8>,
    pub attempts: i64,
    pub next_attempt_ms: TsMs,
}

/// A read-write connection for the queue (the remote-write thread's).
pub struct RemoteWriteQueue {
    conn: Connection,
}

fn bump_status(
    conn: &Connection,
    target: &str,
    set: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO remote_write_status (target) VALUES (?1) ON CONFLICT (target) DO NOTHING",
        params![target],
    )?;
    let sql = format!("UPDATE remote_write_status SET {set} WHERE target = ?1");
    let mut all: Vec<&dyn rusqlite::ToSql> = vec![&target];
    all.extend_from_slice(args);
    conn.prepare_cached(&sql)?.execute(all.as_slice())?;
    Ok(())
}

impl RemoteWriteQueue {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            conn: super::open_existing_rw(path)?,
        })
    }

    /// Queues one request; while the target's queued bytes exceed `max_bytes`, drops its
    /// oldest rows. Returns the (requests, samples) dropped.
    pub fn push(
        &mut self,
        target: &str,
        created_ms: TsMs,
        samples: i64,
        payload: &[u8],
        max_bytes: u64,
    ) -> Result<(i64, i64), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached(
            "INSERT INTO remote_write_queue (target, created_ms, samples, payload, next_attempt_ms)
             VALUES (?1, ?2, ?3, ?4, ?2)",
        )?
        .execute(params![target, created_ms, samples, payload])?;
        let new_id = tx.last_insert_rowid();
        let mut total: i64 = tx
            .prepare_cached(
                "SELECT coalesce(sum(length(payload)), 0) FROM remote_write_queue WHERE target = ?1",
            )?
            .query_row(params![target], |r| r.get(0))?;
        let mut dropped = (0i64, 0i64);
        // The oldest go first; the new row stays even when it alone is over the bound.
        while u64::try_from(total).unwrap_or(0) > max_bytes {
            let oldest: Option<(i64, i64, i64)> = tx
                .prepare_cached(
                    "SELECT id, samples, length(payload) FROM remote_write_queue
                     WHERE target = ?1 AND id <> ?2 ORDER BY id LIMIT 1",
                )?
                .query_row(params![target, new_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            let Some((id, n, len)) = oldest else { break };
            tx.prepare_cached("DELETE FROM remote_write_queue WHERE id = ?1")?
                .execute(params![id])?;
            total -= len;
            dropped.0 += 1;
            dropped.1 += n;
        }
        if dropped.0 > 0 {
            bump_status(
                &tx,
                target,
                "dropped_requests = dropped_requests + ?2, dropped_samples = dropped_samples + ?3",
                &[&dropped.0, &dropped.1],
            )?;
        }
        tx.commit()?;
        Ok(dropped)
    }

    /// The oldest queued request of `target`.
    pub fn head(&self, target: &str) -> Result<Option<Queued>, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT id, created_ms, samples, payload, attempts, next_attempt_ms
                 FROM remote_write_queue WHERE target = ?1 ORDER BY id LIMIT 1",
            )?
            .query_row(params![target], |r| {
                Ok(Queued {
                    id: r.get(0)?,
                    created_ms: r.get(1)?,
                    samples: r.get(2)?,
                    payload: r.get(3)?,
                    attempts: r.get(4)?,
                    next_attempt_ms: r.get(5)?,
                })
            })
            .optional()?)
    }

    /// The target took the request.
    pub fn sent(&mut self, target: &str, q: &Queued, now_ms: TsMs) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("DELETE FROM remote_write_queue WHERE id = ?1")?
            .execute(params![q.id])?;
        bump_status(
            &tx,
            target,
            "sent_requests = sent_requests + 1, sent_samples = sent_samples + ?2, last_success_ms = ?3",
            &[&q.samples, &now_ms],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The target refused the request for good: it goes, counted.
    pub fn refused(
        &mut self,
        target: &str,
        q: &Queued,
        now_ms: TsMs,
        error: &str,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("DELETE FROM remote_write_queue WHERE id = ?1")?
            .execute(params![q.id])?;
        bump_status(
            &tx,
            target,
            "refused_requests = refused_requests + 1, refused_samples = refused_samples + ?2, last_error_ms = ?3, last_error = ?4",
            &[&q.samples, &now_ms, &error],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// A failed attempt to retry at `next_ms`.
    pub fn retry_at(
        &mut self,
        target: &str,
        q: &Queued,
        now_ms: TsMs,
        next_ms: TsMs,
        error: &str,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached(
            "UPDATE remote_write_queue SET attempts = attempts + 1, next_attempt_ms = ?2, last_error = ?3 WHERE id = ?1",
        )?
        .execute(params![q.id, next_ms, error])?;
        bump_status(
            &tx,
            target,
            "failed_attempts = failed_attempts + 1, last_error_ms = ?2, last_error = ?3",
            &[&now_ms, &error],
        )?;
        tx.commit()?;
        Ok(())
    }
}

/// One target's queue and counters, for `status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct Backlog {
    pub target: String,
    pub pending_requests: i64,
    pub pending_samples: i64,
    pub pending_bytes: i64,
    pub oldest_pending_ms: Option<TsMs>,
    /// Failed attempts of the oldest pending request (0: not tried yet).
    pub head_attempts: i64,
    pub sent_requests: i64,
    pub sent_samples: i64,
    pub refused_requests: i64,
    pub refused_samples: i64,
    pub dropped_requests: i64,
    pub dropped_samples: i64,
    pub failed_attempts: i64,
    pub last_success_ms: Option<TsMs>,
    pub last_error_ms: Option<TsMs>,
    pub last_error: Option<String>,
}

/// Every target that has a queue or counters.
pub fn backlog(conn: &Connection) -> Result<Vec<Backlog>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "WITH q AS (SELECT target, count(*) AS n, coalesce(sum(samples), 0) AS s,
                           coalesce(sum(length(payload)), 0) AS b, min(created_ms) AS oldest,
                           min(id) AS head
                    FROM remote_write_queue GROUP BY target),
              t AS (SELECT target FROM q UNION SELECT target FROM remote_write_status)
         SELECT t.target, coalesce(q.n, 0), coalesce(q.s, 0), coalesce(q.b, 0), q.oldest,
                coalesce((SELECT attempts FROM remote_write_queue WHERE id = q.head), 0),
                coalesce(st.sent_requests, 0), coalesce(st.sent_samples, 0),
                coalesce(st.refused_requests, 0), coalesce(st.refused_samples, 0),
                coalesce(st.dropped_requests, 0), coalesce(st.dropped_samples, 0),
                coalesce(st.failed_attempts, 0), st.last_success_ms, st.last_error_ms, st.last_error
         FROM t LEFT JOIN q ON q.target = t.target
                LEFT JOIN remote_write_status st ON st.target = t.target
         ORDER BY t.target",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(Backlog {
            target: r.get(0)?,
            pending_requests: r.get(1)?,
            pending_samples: r.get(2)?,
            pending_bytes: r.get(3)?,
            oldest_pending_ms: r.get(4)?,
            head_attempts: r.get(5)?,
            sent_requests: r.get(6)?,
            sent_samples: r.get(7)?,
            refused_requests: r.get(8)?,
            refused_samples: r.get(9)?,
            dropped_requests: r.get(10)?,
            dropped_samples: r.get(11)?,
            failed_attempts: r.get(12)?,
            last_success_ms: r.get(13)?,
            last_error_ms: r.get(14)?,
            last_error: r.get(15)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> (tempfile::TempDir, RemoteWriteQueue) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let cfg = crate::store::StoreConfig {
            retention: std::time::Duration::from_secs(3600),
            rollup_retention: std::time::Duration::from_secs(3600),
            max_db_size: 1 << 30,
            host: "h".into(),
        };
        drop(crate::store::open(&path, &cfg).unwrap());
        let q = RemoteWriteQueue::open(&path).unwrap();
        (dir, q)
    }

    #[test]
    fn oldest_first_and_bounded() {
        let (_d, mut q) = queue();
        for i in 0..5 {
            assert_eq!(
                q.push("a", i, 10, &[i as u8; 100], 350).unwrap(),
                (if i >= 3 { 1 } else { 0 }, if i >= 3 { 10 } else { 0 })
            );
        }
        q.push("b", 9, 1, &[0; 10], 1000).unwrap();
        let head = q.head("a").unwrap().unwrap();
        assert_eq!(
            head.created_ms, 2,
            "the two oldest went when the queue was full"
        );
        q.retry_at("a", &head, 10, 20, "HTTP 503").unwrap();
        let again = q.head("a").unwrap().unwrap();
        assert_eq!(
            (again.id, again.attempts, again.next_attempt_ms),
            (head.id, 1, 20)
        );
        q.sent("a", &again, 21).unwrap();
        let next = q.head("a").unwrap().unwrap();
        q.refused("a", &next, 22, "HTTP 400: out of bounds")
            .unwrap();
        let b = backlog(&q.conn).unwrap();
        let a = &b[0];
        assert_eq!(
            (
                a.target.as_str(),
                a.pending_requests,
                a.sent_samples,
                a.refused_samples,
                a.dropped_samples,
                a.failed_attempts
            ),
            ("a", 1, 10, 10, 20, 1)
        );
        assert_eq!(a.last_error.as_deref(), Some("HTTP 400: out of bounds"));
        assert_eq!((b[1].target.as_str(), b[1].pending_requests), ("b", 1));
    }
}
