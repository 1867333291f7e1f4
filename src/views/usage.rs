//! `gpuwatch usage` and `GET /api/v1/usage`: the usage ledger (docs/USAGE.md) summed by
//! namespace, pod, training job, user, host, GPU or model over a range — GPU-hours held, busy
//! and idle-held, the idle share, the longest idle stretch and the cost — sorted by idle
//! GPU-hours.
//!
//! Invariants: read-only; a GPU shared by several holders counts each holder's share; time
//! nobody held (free) counts only by host, GPU or model; a holder no one could name is its
//! own row (key null), never folded into a named one; no price configured: cost null.

use anyhow::Context;
use serde_json::Value;

use crate::config::usage::UsageConfig;
use crate::model::TsMs;
use crate::usage::summary::{By, Key, Sums, Usage, summarize};

use super::timearg::RangeArgs;
use super::{ViewError, usage as usage_error};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    /// For people: aligned columns.
    #[default]
    #[value(alias = "text")]
    Table,
    /// The document `/api/v1/usage` serves.
    Json,
    /// One line per row, the JSON row's keys as the header.
    Csv,
}

/// What `gpuwatch usage` and `GET /api/v1/usage` select.
#[derive(Debug, clap::Args)]
pub struct UsageQuery {
    /// Sum by this [default: namespace].
    #[arg(long, value_enum, default_value_t)]
    pub by: By,
    /// The range [default: everything the ledger holds].
    #[command(flatten)]
    pub range: RangeArgs,
    /// Only this host.
    #[arg(long, value_name = "H")]
    pub host: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

impl Usage {
    pub fn csv(&self) -> Result<String, ViewError> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let keys = [
            "gpus",
            "held_hours",
            "busy_hours",
            "idle_held_hours",
            "unknown_hours",
            "free_hours",
            "idle_share",
            "longest_idle_s",
            "cost",
            "idle_cost",
        ];
        let mut header = vec![self.by.as_str()];
        header.extend(keys);
        w.write_record(&header).context("writing CSV")?;
        for r in &self.rows {
            let m = r.sums.json();
            let mut rec = vec![r.key.value().unwrap_or_default().to_string()];
            rec.extend(keys.iter().map(|k| match &m[*k] {
                Value::Null => String::new(),
                v => v.to_string(),
            }));
            w.write_record(&rec).context("writing CSV")?;
        }
        let bytes = w.into_inner().context("writing CSV")?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = format!(
            "GPU usage by {} from {} to {}\n",
            self.by.as_str(),
            crate::format::utc_label(self.from),
            crate::format::utc_label(self.to)
        );
        let cost_head = self
            .currency
            .as_ref()
            .map_or(String::new(), |c| format!("  {:>10}", format!("COST {c}")));
        let _ = writeln!(
            out,
            "{:<32} {:>4} {:>9} {:>9} {:>9} {:>6} {:>12} {:>9}{cost_head}",
            self.by.as_str().to_uppercase(),
            "GPUS",
            "HELD h",
            "BUSY h",
            "IDLE h",
            "IDLE%",
            "LONGEST IDLE",
            "UNKNOWN h"
        );
        let line = |out: &mut String, name: &str, s: &Sums| {
            let share = s
                .idle_share()
                .map_or("-".to_string(), |v| format!("{:.0}", v * 100.0));
            let longest = if s.longest_idle_ms > 0 {
                crate::format::duration(s.longest_idle_ms)
            } else {
                "-".into()
            };
            let cost = match (&self.currency, s.cost) {
                (Some(_), Some(c)) => format!("  {c:>10.2}"),
                (Some(_), None) => format!("  {:>10}", "-"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "{:<32} {:>4} {:>9.2} {:>9.2} {:>9.2} {:>6} {:>12} {:>9.2}{cost}",
                name,
                s.gpus.len(),
                s.held / 3600.0,
                s.busy / 3600.0,
                s.idle_held / 3600.0,
                share,
                longest,
                s.unknown / 3600.0
            );
        };
        for r in &self.rows {
            let name = match &r.key {
                Key::Value(k) => k.clone(),
                Key::None => format!("(no {})", self.by.as_str()),
                Key::UnknownHolder => "(holder unknown)".into(),
            };
            line(&mut out, &name, &r.sums);
        }
        line(&mut out, "total", &self.total);
        out
    }
}

/// The output of `usage` for `args` (`--format json` is also `GET /api/v1/usage`). Nothing
/// in the range: a usage error saying where the ledger's data is.
pub fn output(
    args: &UsageQuery,
    conn: &rusqlite::Connection,
    cfg: &UsageConfig,
    now: TsMs,
) -> Result<String, ViewError> {
    let host = args.host.as_deref();
    let span = crate::store::usage::span(conn, host)?;
    let range = match args
        .range
        .resolve_given(now)
        .map_err(|e| usage_error(anyhow::anyhow!(e)))?
    {
        Some(r) => r,
        None => match span {
            Some((a, b)) => (a, b.max(a + 1)),
            None => {
                return Err(ViewError::Failed(anyhow::anyhow!(
                    "the usage ledger is empty{}: `gpuwatch run` keeps it, and `gpuwatch import` of samples accounts them",
                    host.map_or(String::new(), |h| format!(" for host {h}"))
                )));
            }
        },
    };
    let intervals = crate::store::usage::intervals(conn, range.0, range.1, host)?;
    if intervals.is_empty() {
        let hint = span.map_or(" (the ledger is empty)".to_string(), |(a, b)| {
            format!(
                "; the ledger spans {} to {}",
                crate::format::utc_label(a),
                crate::format::utc_label(b)
            )
        });
        return Err(ViewError::Failed(anyhow::anyhow!(
            "no GPU usage from {} to {}{hint}",
            crate::format::utc_label(range.0),
            crate::format::utc_label(range.1)
        )));
    }
    let doc = summarize(&intervals, args.by, range, cfg);
    Ok(match args.format {
        Format::Json => serde_json::to_string_pretty(&doc.json()).context("rendering JSON")? + "\n",
        Format::Csv => doc.csv()?,
        Format::Table => doc.table(),
    })
}
