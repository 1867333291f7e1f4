//! Schema migrations: the `migrations/NNNN_name.sql` files, embedded in order.
//!
//! Invariants:
//! - `PRAGMA user_version` is the schema version; `schema_migrations` records, for humans,
//!   which migration was applied when. Both change in the same transaction as the DDL.
//! - Pending migrations are applied in order in ONE `BEGIN IMMEDIATE` transaction: a crash
//!   or an error leaves the database at its old version, never half-upgraded; two processes
//!   opening the same file at once upgrade it once.
//! - Versions are strictly increasing but may have gaps (numbers are reserved per branch of
//!   work, e.g. 0013 and 0014 written side by side). A migration is pending when
//!   `schema_migrations` does not record it — not merely when it is above `user_version` — so
//!   a database upgraded by a build that lacked a lower number still gets it later, whatever
//!   order the branches were merged in; `user_version` is the highest version applied.
//! - A database with a version newer than [`LATEST_VERSION`] is refused, never touched.
//! - Migrations are append-only: a released file is never edited, a change is a new file.

use rusqlite::{Connection, TransactionBehavior};

use super::{APPLICATION_ID, StoreError};

struct Migration {
    version: u32,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "rollups_and_training",
        sql: include_str!("../../migrations/0002_rollups_and_training.sql"),
    },
    Migration {
        version: 3,
        name: "views",
        sql: include_str!("../../migrations/0003_views.sql"),
    },
    Migration {
        version: 4,
        name: "training_source",
        sql: include_str!("../../migrations/0004_training_source.sql"),
    },
    Migration {
        version: 5,
        name: "alerts",
        sql: include_str!("../../migrations/0005_alerts.sql"),
    },
    Migration {
        version: 6,
        name: "notify",
        sql: include_str!("../../migrations/0006_notify.sql"),
    },
    Migration {
        version: 7,
        name: "public_alerts",
        sql: include_str!("../../migrations/0007_public_alerts.sql"),
    },
    Migration {
        version: 8,
        name: "process_count",
        sql: include_str!("../../migrations/0008_process_count.sql"),
    },
    Migration {
        version: 9,
        name: "placement",
        sql: include_str!("../../migrations/0009_placement.sql"),
    },
    Migration {
        version: 10,
        name: "alert_labels",
        sql: include_str!("../../migrations/0010_alert_labels.sql"),
    },
    Migration {
        version: 11,
        name: "remote_write",
        sql: include_str!("../../migrations/0011_remote_write.sql"),
    },
    Migration {
        version: 12,
        name: "tensor_active",
        sql: include_str!("../../migrations/0012_tensor_active.sql"),
    },
    Migration {
        version: 13,
        name: "kernel_xids",
        sql: include_str!("../../migrations/0013_kernel_xids.sql"),
    },
    Migration {
        version: 14,
        name: "gpu_audit",
        sql: include_str!("../../migrations/0014_gpu_audit.sql"),
    },
    Migration {
        version: 15,
        name: "rollups_by_gpu",
        sql: include_str!("../../migrations/0015_rollups_by_gpu.sql"),
    },
    Migration {
        version: 16,
        name: "analysis",
        sql: include_str!("../../migrations/0016_analysis.sql"),
    },
    Migration {
        version: 17,
        name: "rollups_by_uuid",
        sql: include_str!("../../migrations/0017_rollups_by_uuid.sql"),
    },
    Migration {
        version: 18,
        name: "rollups_view_joins",
        sql: include_str!("../../migrations/0018_rollups_view_joins.sql"),
    },
    Migration {
        version: 19,
        name: "alert_history",
        sql: include_str!("../../migrations/0019_alert_history.sql"),
    },
    Migration {
        version: 20,
        name: "slurm_nodes",
        sql: include_str!("../../migrations/0020_slurm_nodes.sql"),
    },
    Migration {
        version: 21,
        name: "holder_job",
        sql: include_str!("../../migrations/0021_holder_job.sql"),
    },
    Migration {
        version: 22,
        name: "xid_runs",
        sql: include_str!("../../migrations/0022_xid_runs.sql"),
    },
    Migration {
        version: 23,
        name: "activity_recovery",
        sql: include_str!("../../migrations/0023_activity_recovery.sql"),
    },
    Migration {
        version: 24,
        name: "nvlink_fabric",
        sql: include_str!("../../migrations/0024_nvlink_fabric.sql"),
    },
    Migration {
        version: 25,
        name: "remediation",
        sql: include_str!("../../migrations/0025_remediation.sql"),
    },
    Migration {
        version: 26,
        name: "mig",
        sql: include_str!("../../migrations/0026_mig.sql"),
    },
    Migration {
        version: 27,
        name: "import_cursors",
        sql: include_str!("../../migrations/0027_import_cursors.sql"),
    },
    Migration {
        version: 28,
        name: "usage",
        sql: include_str!("../../migrations/0028_usage.sql"),
    },
    // The unit-test build's metric registry has one more rollup row (`crate::metric`'s
    // `test_probe`): its columns, always after the last real migration.
    #[cfg(test)]
    Migration {
        version: 29,
        name: "test_probe",
        sql: "ALTER TABLE rollups_1m ADD COLUMN test_probe_min INTEGER;
              ALTER TABLE rollups_1m ADD COLUMN test_probe_max INTEGER;
              ALTER TABLE rollups_1m ADD COLUMN test_probe_avg REAL;",
    },
];

/// The schema version this binary writes and reads: the highest migration's.
pub const LATEST_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// How many migrations this binary knows (`schema_migrations` holds as many rows once a
/// database is at [`LATEST_VERSION`]).
pub const MIGRATION_COUNT: usize = MIGRATIONS.len();

/// The migrations up to `version` that the database has not recorded, in version order.
fn pending(
    conn: &Connection,
    list: &'static [Migration],
    version: u32,
) -> Result<Vec<&'static Migration>, StoreError> {
    let applied: std::collections::HashSet<u32> = if schema_version(conn)? == 0 {
        std::collections::HashSet::new()
    } else {
        let mut stmt = conn.prepare("SELECT version FROM schema_migrations")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    Ok(list
        .iter()
        .filter(|m| m.version <= version && !applied.contains(&m.version))
        .collect())
}

/// Whether the database lacks a migration this binary has (read-only opens refuse it).
pub(super) fn needs_upgrade(conn: &Connection) -> Result<bool, StoreError> {
    Ok(!pending(conn, MIGRATIONS, LATEST_VERSION)?.is_empty())
}

/// The schema version of the database (`PRAGMA user_version`; 0 for an empty file).
pub fn schema_version(conn: &Connection) -> Result<u32, StoreError> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

/// Refuses files that belong to another application.
pub(super) fn check_application_id(conn: &Connection) -> Result<(), StoreError> {
    let id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    if id != 0 && id != i64::from(APPLICATION_ID) {
        return Err(StoreError::NotGpuwatch {
            path: conn_path(conn),
            application_id: id,
        });
    }
    Ok(())
}

fn conn_path(conn: &Connection) -> String {
    match conn.path() {
        Some(p) if !p.is_empty() => p.to_string(),
        _ => ":memory:".to_string(),
    }
}

/// Upgrades the database to [`LATEST_VERSION`].
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    migrate_to(conn, LATEST_VERSION)
}

/// Upgrades the database to exactly `version` (tests use it to build an old database).
/// Does nothing when it is already there; fails with [`StoreError::TooNew`] when the database
/// is newer than `version` or than this binary.
pub fn migrate_to(conn: &mut Connection, version: u32) -> Result<(), StoreError> {
    apply(conn, MIGRATIONS, version)
}

fn apply(
    conn: &mut Connection,
    list: &'static [Migration],
    version: u32,
) -> Result<(), StoreError> {
    let latest = list.last().map_or(0, |m| m.version);
    if version > latest {
        return Err(StoreError::Config(format!(
            "cannot migrate to version {version}: this gpuwatch knows versions up to \
             {latest}"
        )));
    }
    check_application_id(conn)?;
    // Cheap check outside a transaction first, so a read-only or too-new file is refused
    // without taking the write lock.
    let found = schema_version(conn)?;
    if found > latest || found > version {
        return Err(too_new(conn, found, version));
    }
    if found == version && pending(conn, list, version)?.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Re-read under the write lock: another process may have upgraded meanwhile.
    let found = schema_version(&tx)?;
    if found > version {
        return Err(too_new(&tx, found, version));
    }
    if found == 0 {
        let objects: i64 = tx.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'",
            [],
            |r| r.get(0),
        )?;
        if objects > 0 {
            return Err(StoreError::NotGpuwatch {
                path: conn_path(&tx),
                application_id: 0,
            });
        }
    }
    let now_ms = chrono::Utc::now().timestamp_millis();
    let todo = pending(&tx, list, version)?;
    for m in &todo {
        let fail = |source| StoreError::Migration {
            version: m.version,
            name: m.name,
            source,
        };
        tx.execute_batch(m.sql).map_err(fail)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_ms) VALUES (?1, ?2, ?3)",
            (m.version, m.name, now_ms),
        )
        .map_err(fail)?;
        tx.pragma_update(None, "user_version", m.version.max(found))
            .map_err(fail)?;
    }
    tx.commit()?;
    // One line for the whole upgrade, not one per migration.
    if let Some(last) = todo.last() {
        if found == 0 {
            tracing::info!(
                version = last.version,
                "created the database schema (version {})",
                last.version
            );
        } else {
            let names: Vec<&str> = todo.iter().map(|m| m.name).collect();
            tracing::info!(
                from = found,
                to = last.version,
                "upgraded the database schema from version {found} to {} ({})",
                last.version,
                names.join(", ")
            );
        }
    }
    Ok(())
}

fn too_new(conn: &Connection, found: u32, wanted: u32) -> StoreError {
    StoreError::TooNew {
        path: conn_path(conn),
        found,
        known: wanted.min(LATEST_VERSION),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order() {
        assert_eq!(MIGRATIONS[0].version, 1);
        for w in MIGRATIONS.windows(2) {
            assert!(
                w[0].version < w[1].version,
                "{} before {}",
                w[0].name,
                w[1].name
            );
        }
        assert_eq!(MIGRATIONS.len(), MIGRATION_COUNT);
    }

    const A: Migration = Migration {
        version: 1,
        name: "a",
        sql: "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
              applied_ms INTEGER NOT NULL); CREATE TABLE a (x);",
    };
    const B: Migration = Migration {
        version: 2,
        name: "b",
        sql: "CREATE TABLE b (x);",
    };
    const D: Migration = Migration {
        version: 4,
        name: "d",
        sql: "CREATE TABLE d (x);",
    };
    static WITH_GAP: [Migration; 2] = [A, D];
    static MERGED: [Migration; 3] = [A, B, D];

    #[test]
    fn a_gap_is_filled_when_the_missing_number_arrives_later() {
        let mut conn = Connection::open_in_memory().unwrap();
        apply(&mut conn, &WITH_GAP, 4).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), 4);
        assert_eq!(pending(&conn, &MERGED, 4).unwrap().len(), 1);
        // The branch with 2 merged after the database reached 4: 2 is applied, 4 stays.
        apply(&mut conn, &MERGED, 4).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), 4);
        let n: i64 = conn
            .query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
        conn.execute("INSERT INTO b VALUES (1)", []).unwrap();
        apply(&mut conn, &MERGED, 4).unwrap();
    }

    #[test]
    fn fresh_in_memory_database_migrates_and_is_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_to(&mut conn, LATEST_VERSION).unwrap();
        migrate_to(&mut conn, LATEST_VERSION).unwrap();
        assert_eq!(schema_version(&conn).unwrap(), LATEST_VERSION);
        let n: i64 = conn
            .query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, MIGRATION_COUNT as i64);
    }

    #[test]
    fn foreign_database_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x)").unwrap();
        let err = migrate_to(&mut conn, 1).unwrap_err();
        assert!(matches!(err, StoreError::NotGpuwatch { .. }), "{err}");
    }
}
