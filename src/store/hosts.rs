//! The hosts of a database and merging them: the rows a daemon stored under a name that was
//! not its node's (a Kubernetes pod's host name, new at every rollout, before `NODE_NAME`)
//! moved under the node's name (`gpuwatch hosts merge`).
//!
//! Invariants: a merge is one IMMEDIATE transaction (all of it or nothing); every table
//! holding a host, GPU, process or training-series id is found from the schema itself, so a
//! table added by a later migration is merged too; a GPU (by UUID), a process (by pid and
//! start time) or a training series (by name and labels) that both hosts hold becomes the
//! target's one row; a row both hosts hold for the same key and time keeps the target's (a
//! duplicate, counted); alert history is never dropped: the merged host's daemon is gone, so
//! its live alerts end first (firing ones resolved at their last evaluation that held,
//! pending ones that never fired deleted, as the daemon does), and then move as history;
//! the target's rollup progress goes back to the merged host's when that is older.

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::model::TsMs;

/// One host of the database.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HostRow {
    pub name: String,
    pub gpus: i64,
    pub first_seen_ms: Option<TsMs>,
    pub last_seen_ms: Option<TsMs>,
}

/// Every host, by name.
pub fn list(conn: &Connection) -> Result<Vec<HostRow>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT h.name, (SELECT count(*) FROM gpus g WHERE g.host_id = h.id),
                h.first_seen_ms, h.last_seen_ms
         FROM hosts h ORDER BY h.name",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(HostRow {
            name: r.get(0)?,
            gpus: r.get(1)?,
            first_seen_ms: r.get(2)?,
            last_seen_ms: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What a merge did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeReport {
    pub hosts: usize,
    /// GPUs the target did not have, now its own.
    pub gpus_moved: usize,
    /// GPUs the target had (the same UUID): their rows now carry the target's GPU.
    pub gpus_joined: usize,
    /// Rows re-keyed from a merged GPU, process, series or host to the target's.
    pub rows_moved: u64,
    /// Rows both had for the same key and time: the target's kept, the merged one's dropped.
    pub duplicates_dropped: u64,
    /// Live alerts of the merged hosts ended (their daemon is gone).
    pub alerts_closed: usize,
}

/// Why a merge was refused.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("no host named {name:?} in the database (hosts: {known})")]
    UnknownHost { name: String, known: String },
    #[error("{0:?} is the target itself")]
    SameHost(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for MergeError {
    fn from(e: rusqlite::Error) -> Self {
        MergeError::Store(e.into())
    }
}

/// Tables (not views) with a column `col`, except `skip`.
fn tables_with(conn: &Connection, col: &str, skip: &[&str]) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND c.name = ?1
         ORDER BY m.name",
    )?;
    let names = stmt.query_map(params![col], |r| r.get::<_, String>(0))?;
    Ok(names
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|n| !skip.contains(&n.as_str()))
        .collect())
}

/// Re-keys `col` from `old` to `new` in every table of `tables`: (moved, duplicates dropped).
fn rekey(
    conn: &Connection,
    tables: &[String],
    col: &str,
    old: i64,
    new: i64,
) -> Result<(u64, u64), StoreError> {
    let (mut moved, mut dropped) = (0, 0);
    for t in tables {
        if t == "alert_state" {
            // History is never dropped: the live rows were ended first, so none can clash.
            moved += conn.execute(
                &format!("UPDATE \"{t}\" SET {col} = ?2 WHERE {col} = ?1"),
                params![old, new],
            )? as u64;
            continue;
        }
        moved += conn.execute(
            &format!("UPDATE OR IGNORE \"{t}\" SET {col} = ?2 WHERE {col} = ?1"),
            params![old, new],
        )? as u64;
        dropped += conn.execute(
            &format!("DELETE FROM \"{t}\" WHERE {col} = ?1"),
            params![old],
        )? as u64;
    }
    Ok((moved, dropped))
}

/// Ends the live alerts of host `host_id` (its daemon is gone), as the daemon ends them: a
/// firing one resolved at its last evaluation that held, a pending one that never fired
/// deleted. Returns how many.
fn end_live_alerts(conn: &Connection, host_id: i64) -> Result<usize, StoreError> {
    let of_host = "gpu_id IN (SELECT id FROM gpus WHERE host_id = ?1)";
    conn.execute(
        &format!(
            "DELETE FROM alert_severity_changes WHERE alert_id IN
               (SELECT id FROM alert_state WHERE state = 'pending' AND fired_ms IS NULL AND {of_host})"
        ),
        params![host_id],
    )?;
    let deleted = conn.execute(
        &format!(
            "DELETE FROM alert_state WHERE state = 'pending' AND fired_ms IS NULL AND {of_host}"
        ),
        params![host_id],
    )?;
    let resolved = conn.execute(
        &format!(
            "UPDATE alert_state SET state = 'resolved', resolved_ms = coalesce(last_true_ms, updated_ms)
             WHERE state IN ('pending', 'firing') AND {of_host}"
        ),
        params![host_id],
    )?;
    Ok(deleted + resolved)
}

/// A kind of row a host owns, which other tables refer to by id.
struct Owned {
    table: &'static str,
    /// When a row `o` of the merged host is the target's row `t`.
    same: &'static str,
    /// The column other tables refer to it by.
    by: &'static str,
    /// How the target's row takes in a joined one's times (`?1` the joined row's id).
    seen: &'static str,
}

/// GPUs by UUID, processes by pid and start time, training series by name and labels.
const OWNED: [Owned; 3] = [
    Owned {
        table: "gpus",
        same: "t.uuid = o.uuid",
        by: "gpu_id",
        seen: "first_seen_ms = min(first_seen_ms, (SELECT first_seen_ms FROM gpus WHERE id = ?1)),
               last_seen_ms = max(last_seen_ms, (SELECT last_seen_ms FROM gpus WHERE id = ?1)),
               last_sample_ms = max(
                 coalesce(last_sample_ms, (SELECT last_sample_ms FROM gpus WHERE id = ?1)),
                 coalesce((SELECT last_sample_ms FROM gpus WHERE id = ?1), last_sample_ms))",
    },
    Owned {
        table: "processes",
        same: "t.pid = o.pid AND t.start_time_ms = o.start_time_ms",
        by: "process_id",
        seen: "first_seen_ms = min(first_seen_ms, (SELECT first_seen_ms FROM processes WHERE id = ?1)),
               last_seen_ms = max(last_seen_ms, (SELECT last_seen_ms FROM processes WHERE id = ?1))",
    },
    Owned {
        table: "training_series",
        same: "t.name = o.name AND t.labels_json = o.labels_json",
        by: "series_id",
        seen: "first_seen_ms = min(first_seen_ms,
                 (SELECT first_seen_ms FROM training_series WHERE id = ?1))",
    },
];

/// Moves host `from`'s rows of `kind` to `into`: one the target already has (the same key)
/// becomes the target's (its references re-keyed in `refs`, its times taken in, the row
/// deleted), any other changes host. Returns (moved, joined, (rows re-keyed, duplicates)).
fn move_owned(
    tx: &Connection,
    kind: &Owned,
    refs: &[String],
    from: i64,
    into: i64,
) -> Result<(usize, usize, (u64, u64)), StoreError> {
    let t = kind.table;
    let pairs: Vec<(i64, Option<i64>)> = tx
        .prepare(&format!(
            "SELECT o.id, (SELECT t.id FROM {t} t WHERE t.host_id = ?2 AND {})
             FROM {t} o WHERE o.host_id = ?1",
            kind.same
        ))?
        .query_map(params![from, into], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let (mut moved, mut joined, mut rows) = (0, 0, (0, 0));
    for (old, same) in pairs {
        match same {
            None => {
                tx.execute(
                    &format!("UPDATE {t} SET host_id = ?2 WHERE id = ?1"),
                    params![old, into],
                )?;
                moved += 1;
            }
            Some(new) => {
                let (m, d) = rekey(tx, refs, kind.by, old, new)?;
                rows = (rows.0 + m, rows.1 + d);
                tx.execute(
                    &format!("UPDATE {t} SET {} WHERE id = ?2", kind.seen),
                    params![old, new],
                )?;
                tx.execute(&format!("DELETE FROM {t} WHERE id = ?1"), params![old])?;
                joined += 1;
            }
        }
    }
    Ok((moved, joined, rows))
}

/// Merges the hosts `from` into `into` (created when the database does not have it).
pub fn merge(
    conn: &mut Connection,
    from: &[String],
    into: &str,
) -> Result<MergeReport, MergeError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut report = MergeReport::default();
    tx.execute(
        "INSERT OR IGNORE INTO hosts (name) VALUES (?1)",
        params![into],
    )?;
    let into_id: i64 =
        tx.query_row("SELECT id FROM hosts WHERE name = ?1", params![into], |r| {
            r.get(0)
        })?;
    let mut owned = Vec::new();
    for kind in &OWNED {
        owned.push((kind, tables_with(&tx, kind.by, &[])?));
    }
    let owners: Vec<&str> = OWNED.iter().map(|k| k.table).collect();
    let host_tables = tables_with(&tx, "host_id", &owners)?;
    let mut count = |(m, d): (u64, u64)| {
        report.rows_moved += m;
        report.duplicates_dropped += d;
    };
    for name in from {
        if name == into {
            return Err(MergeError::SameHost(name.clone()));
        }
        let Some(from_id) = tx
            .query_row("SELECT id FROM hosts WHERE name = ?1", params![name], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?
        else {
            let known: Vec<String> = list(&tx)?.into_iter().map(|h| h.name).collect();
            return Err(MergeError::UnknownHost {
                name: name.clone(),
                known: known.join(", "),
            });
        };
        report.alerts_closed += end_live_alerts(&tx, from_id)?;
        for (kind, refs) in &owned {
            let (moved, joined, rows) = move_owned(&tx, kind, refs, from_id, into_id)?;
            count(rows);
            if kind.table == "gpus" {
                report.gpus_moved += moved;
                report.gpus_joined += joined;
            }
        }
        // The rollup progress: the older of the two, so that the merged host's minutes not
        // rolled up yet still are.
        tx.execute(
            "UPDATE rollup_state SET done_ms = min(done_ms,
               (SELECT done_ms FROM rollup_state WHERE host_id = ?1))
             WHERE host_id = ?2 AND EXISTS (SELECT 1 FROM rollup_state WHERE host_id = ?1)",
            params![from_id, into_id],
        )?;
        // Everything else that names the host (events, training status, rollup progress).
        count(rekey(&tx, &host_tables, "host_id", from_id, into_id)?);
        tx.execute(
            "UPDATE hosts SET
               first_seen_ms = min(coalesce(first_seen_ms, f.first), coalesce(f.first, first_seen_ms)),
               last_seen_ms = max(coalesce(last_seen_ms, f.last), coalesce(f.last, last_seen_ms)),
               raw_floor_ms = min(coalesce(raw_floor_ms, f.floor), coalesce(f.floor, raw_floor_ms))
             FROM (SELECT first_seen_ms AS first, last_seen_ms AS last, raw_floor_ms AS floor
                   FROM hosts WHERE id = ?1) AS f
             WHERE id = ?2",
            params![from_id, into_id],
        )?;
        tx.execute("DELETE FROM hosts WHERE id = ?1", params![from_id])?;
        report.hosts += 1;
    }
    tx.commit()?;
    Ok(report)
}
