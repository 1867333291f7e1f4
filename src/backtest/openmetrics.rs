//! The store's samples as dcgm-exporter would have exported them — its family names, units
//! and labels (`gpu`, `UUID`, `device`, `modelName`, `Hostname`), read from the metric
//! registry (`crate::metric`, the one definition `/metrics` also uses) — as OpenMetrics text
//! with timestamps, for `promtool tsdb create-blocks-from openmetrics`.
//!
//! Invariants: a value the sample does not have is not written (never 0); every family is one
//! contiguous block (OpenMetrics requires it), written through one temporary file per family
//! and joined, so memory holds one hour of samples whatever the range.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use rusqlite::Connection;

use crate::metric::SAMPLE_METRICS;
use crate::model::TsMs;
use crate::store::{StoreError, history};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("writing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Writes the samples of `[from, to]` to `out` (OpenMetrics, `# EOF`-terminated) using
/// `dir` for the per-family files; returns the number of points written.
pub fn write(
    conn: &Connection,
    (from, to): (TsMs, TsMs),
    dir: &Path,
    out: &Path,
) -> Result<u64, ExportError> {
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |source| ExportError::Io {
            path: path.clone(),
            source,
        }
    };
    let gpus: BTreeMap<i64, String> = history::gpus(conn, None)?
        .into_iter()
        .map(|g| {
            let inv = &g.inventory;
            let labels = format!(
                "gpu=\"{}\",UUID=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{}\"",
                inv.index,
                escape(&inv.uuid),
                inv.index,
                escape(inv.name.as_deref().unwrap_or("")),
                escape(&g.host)
            );
            (g.gpu_id, labels)
        })
        .collect();
    let exported: Vec<_> = SAMPLE_METRICS
        .iter()
        .filter_map(|m| Some((m, m.export?)))
        .collect();
    let mut files = Vec::new();
    for (i, (_, e)) in exported.iter().enumerate() {
        let p = dir.join(format!("family-{i}.om"));
        let f = std::fs::File::create(&p).map_err(io(&p))?;
        let mut w = BufWriter::new(f);
        // Every family as a gauge: dcgm-exporter's counters are scraped (Prometheus text
        // format) under their names without `_total`, and that is the name rules use.
        writeln!(w, "# TYPE {} gauge", e.dcgm).map_err(io(&p))?;
        files.push((p, w));
    }
    let mut points = 0u64;
    let mut start = from - 1;
    while start < to {
        let end = (start + 3_600_000).min(to);
        for (gpu_id, s) in history::samples(conn, start, end)? {
            let Some(labels) = gpus.get(&gpu_id) else {
                continue;
            };
            for (k, (m, e)) in exported.iter().enumerate() {
                let Some(v) = m.of(&s) else { continue };
                let v = v / e.dcgm_div;
                if !v.is_finite() {
                    continue;
                }
                let (p, w) = &mut files[k];
                writeln!(
                    w,
                    "{}{{{labels}}} {v} {}.{:03}",
                    e.dcgm,
                    s.ts_ms.div_euclid(1000),
                    s.ts_ms.rem_euclid(1000)
                )
                .map_err(io(p))?;
                points += 1;
            }
        }
        start = end;
    }
    let f = std::fs::File::create(out).map_err(io(out))?;
    let mut all = BufWriter::new(f);
    for (p, w) in files {
        let f = w.into_inner().map_err(|e| ExportError::Io {
            path: p.display().to_string(),
            source: e.into_error(),
        })?;
        drop(f);
        let mut r = std::fs::File::open(&p).map_err(io(&p))?;
        std::io::copy(&mut r, &mut all).map_err(io(out))?;
        let _ = std::fs::remove_file(&p);
    }
    writeln!(all, "# EOF").map_err(io(out))?;
    all.flush().map_err(io(out))?;
    Ok(points)
}

/// A label value as OpenMetrics escapes it.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
