//! `gpuwatch export`: the stored samples of a time range, with the columns of the public
//! `gpu_samples` view, streamed in time order into a [`RowSink`].
//!
//! Invariants:
//! - The range is half-open, `from_ms <= ts_ms < to_ms`, like every range read of the store,
//!   so consecutive exports neither overlap nor leave gaps.
//! - Rows stream from one statement that walks the samples' `(ts_ms, gpu_id)` key in order
//!   (SQLite sorts only the rows of one timestamp at a time): memory does not grow with the
//!   range.
//! - Rows are ordered by `ts_ms`, then host, GPU index and uuid.
//! - A host or GPU that the file does not know is an error naming what it does know, not an
//!   empty export.

use rusqlite::{Connection, OptionalExtension, params};

use super::query::{Cell, RowSink};
use crate::model::TsMs;

/// Which GPU to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuFilter {
    /// The NVML index (as in the inventory; every host with such an index).
    Index(u32),
    /// The GPU's uuid.
    Uuid(String),
}

impl GpuFilter {
    /// `3` → index 3; anything else → a uuid.
    pub fn parse(s: &str) -> Self {
        s.trim()
            .parse::<u32>()
            .map_or_else(|_| Self::Uuid(s.trim().to_string()), Self::Index)
    }
}

/// What to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportFilter {
    pub from_ms: TsMs,
    pub to_ms: TsMs,
    pub host: Option<String>,
    pub gpu: Option<GpuFilter>,
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("no host named {given:?} in the database (hosts: {known})")]
    UnknownHost { given: String, known: String },
    #[error("no GPU {given} in the database{on} (GPUs: {known})")]
    UnknownGpu {
        given: String,
        on: String,
        known: String,
    },
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("writing the output failed: {0}")]
    Output(#[from] std::io::Error),
}

const SAMPLES_SQL: &str = "SELECT * FROM gpu_samples
     WHERE ts_ms >= ?1 AND ts_ms < ?2
       AND (?3 IS NULL OR host = ?3)
       AND (?4 IS NULL OR gpu_index = ?4)
       AND (?5 IS NULL OR gpu_uuid = ?5 COLLATE NOCASE)
     ORDER BY ts_ms, host, gpu_index, gpu_uuid";

fn check_filter(conn: &Connection, f: &ExportFilter) -> Result<(), ExportError> {
    if let Some(host) = &f.host {
        let found: Option<i64> = conn
            .query_row("SELECT 1 FROM hosts WHERE name = ?1", [host], |r| r.get(0))
            .optional()?;
        if found.is_none() {
            let mut stmt = conn.prepare("SELECT name FROM hosts ORDER BY name")?;
            let names: Vec<String> = stmt
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            return Err(ExportError::UnknownHost {
                given: host.clone(),
                known: if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
            });
        }
    }
    let Some(gpu) = &f.gpu else { return Ok(()) };
    let (index, uuid) = match gpu {
        GpuFilter::Index(i) => (Some(*i), None),
        GpuFilter::Uuid(u) => (None, Some(u.as_str())),
    };
    let found: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM gpu_inventory WHERE (?1 IS NULL OR host = ?1)
               AND (?2 IS NULL OR gpu_index = ?2) AND (?3 IS NULL OR gpu_uuid = ?3 COLLATE NOCASE) LIMIT 1",
            params![f.host, index, uuid],
            |r| r.get(0),
        )
        .optional()?;
    if found.is_some() {
        return Ok(());
    }
    let mut stmt = conn.prepare(
        "SELECT coalesce(gpu_index, '?') || ' ' || gpu_uuid || ' on ' || host
         FROM gpu_inventory WHERE (?1 IS NULL OR host = ?1) ORDER BY host, gpu_index",
    )?;
    let known: Vec<String> = stmt
        .query_map([&f.host], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Err(ExportError::UnknownGpu {
        given: match gpu {
            GpuFilter::Index(i) => format!("with index {i}"),
            GpuFilter::Uuid(u) => format!("with uuid {u:?}"),
        },
        on: f
            .host
            .as_ref()
            .map_or_else(String::new, |h| format!(" on host {h:?}")),
        known: if known.is_empty() {
            "none".into()
        } else {
            known.join(", ")
        },
    })
}

/// Streams the samples `f` selects into `sink` (columns of `gpu_samples`); returns the rows.
pub fn samples(
    conn: &Connection,
    f: &ExportFilter,
    sink: &mut dyn RowSink,
) -> Result<u64, ExportError> {
    check_filter(conn, f)?;
    let (index, uuid) = match &f.gpu {
        Some(GpuFilter::Index(i)) => (Some(*i), None),
        Some(GpuFilter::Uuid(u)) => (None, Some(u.as_str())),
        None => (None, None),
    };
    let mut stmt = conn.prepare(SAMPLES_SQL)?;
    let names: Vec<String> = stmt.column_names().map(str::to_string).collect();
    sink.columns(&names)?;
    let mut rows = stmt.query(params![f.from_ms, f.to_ms, f.host, index, uuid])?;
    let mut cells = Vec::with_capacity(names.len());
    let mut n = 0u64;
    while let Some(row) = rows.next()? {
        cells.clear();
        for i in 0..names.len() {
            cells.push(Cell::from_ref(row.get_ref(i)?));
        }
        sink.row(&cells)?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The export walks the samples' primary key in time order and sorts only within one
    /// timestamp, so it streams instead of sorting the whole range.
    #[test]
    fn the_plan_streams_in_key_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.db");
        let mut st = crate::store::open(&path, &crate::store::StoreConfig::new("h")).expect("open");
        let mut tg = crate::store::synth::TickGen::new(2, 0);
        st.write_tick(&tg.tick(1_000)).expect("write");
        let conn = crate::store::open_read_only(&path).expect("ro");
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {SAMPLES_SQL}"))
            .expect("plan");
        let plan: Vec<String> = stmt
            .query_map(
                params![0, 2_000, None::<String>, None::<u32>, None::<String>],
                |r| r.get(3),
            )
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        let plan = plan.join("\n");
        assert!(
            plan.contains("SEARCH s USING PRIMARY KEY (ts_ms>? AND ts_ms<?)"),
            "{plan}"
        );
        assert!(!plan.contains("USE TEMP B-TREE FOR ORDER BY"), "{plan}");
        let mut sink = Vec::new();
        struct V<'a>(&'a mut Vec<Vec<Cell>>);
        impl RowSink for V<'_> {
            fn columns(&mut self, names: &[String]) -> std::io::Result<()> {
                assert_eq!(names[0], "ts_ms");
                Ok(())
            }
            fn row(&mut self, cells: &[Cell]) -> std::io::Result<()> {
                self.0.push(cells.to_vec());
                Ok(())
            }
        }
        let f = ExportFilter {
            from_ms: 0,
            to_ms: 2_000,
            host: None,
            gpu: Some(GpuFilter::Index(1)),
        };
        assert_eq!(samples(&conn, &f, &mut V(&mut sink)).expect("export"), 1);
        assert_eq!(sink[0][0], Cell::Int(1_000));
    }

    #[test]
    fn gpu_filter_parses_index_or_uuid() {
        assert_eq!(GpuFilter::parse("3"), GpuFilter::Index(3));
        assert_eq!(
            GpuFilter::parse("GPU-1234"),
            GpuFilter::Uuid("GPU-1234".into())
        );
    }
}
