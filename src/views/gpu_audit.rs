//! `gpuwatch gpu audit`: the audit of GPU setting changes from the `gpu_audit` view, oldest
//! first — every write `gpu set` attempted (who, when, GPU, setting, old, new, result) and
//! every change by others the daemon observed (who = `observed`).
//!
//! Invariants: read-only (beside a running daemon); an unknown old value prints as `-` (JSON
//! null), never as a value; `--format json` is an array of the view's rows with RFC 3339
//! times beside the epoch ones.

use anyhow::Context;
use serde_json::{Value, json};

use crate::model::TsMs;
use crate::store::{self, audit::AuditFilter, audit::AuditRow};

use super::alerts::{render, rfc3339, short};
use super::timearg::RangeArgs;
use super::{ViewError, usage};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    /// For people: aligned columns (also accepted as `text`).
    #[value(alias = "text")]
    Table,
    /// A JSON array of the changes.
    Json,
}

/// What `gpuwatch gpu audit` and `GET /api/v1/gpu/audit` select (the command's flags but the
/// config).
#[derive(Debug, clap::Args)]
pub struct AuditQuery {
    /// Changes in this range [default: all].
    #[command(flatten)]
    pub range: RangeArgs,
    /// Only this GPU (index or UUID).
    #[arg(long, value_name = "N|UUID")]
    pub gpu: Option<String>,
    /// Only this host.
    #[arg(long, value_name = "H")]
    pub host: Option<String>,
    /// Output format: `table` for people, `json` for programs.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// The output of `gpu audit` for `args`.
pub fn output(
    args: &AuditQuery,
    conn: &rusqlite::Connection,
    now: TsMs,
) -> Result<String, ViewError> {
    let range = args
        .range
        .resolve_given(now)
        .map_err(|e| usage(anyhow::anyhow!(e)))?;
    let filter = AuditFilter {
        // `--to` (default now) includes its own millisecond.
        range: range.map(|(from, to)| (from, to.saturating_add(1))),
        host: args.host.clone(),
        gpu: args.gpu.clone(),
    };
    let rows = store::audit::list(conn, &filter)?;
    Ok(match args.format {
        Format::Json => {
            let list: Vec<Value> = rows.iter().map(row_json).collect();
            serde_json::to_string_pretty(&list).context("rendering JSON")? + "\n"
        }
        Format::Table if rows.is_empty() => "no GPU setting changes recorded\n".to_string(),
        Format::Table => table(&rows),
    })
}

fn row_json(a: &AuditRow) -> Value {
    json!({
        "audit_id": a.audit_id,
        "ts_ms": a.ts_ms,
        "time": rfc3339(a.ts_ms),
        "host": a.host,
        "gpu_index": a.gpu_index,
        "gpu_uuid": a.gpu_uuid,
        "who": a.who,
        "uid": a.uid,
        "setting": a.setting,
        "old_value": a.old_value,
        "new_value": a.new_value,
        "result": a.result,
        "error": a.error,
        "done_ms": a.done_ms,
        "done": a.done_ms.map(rfc3339),
    })
}

fn table(rows: &[AuditRow]) -> String {
    let head = [
        "ID",
        "TIME (UTC)",
        "HOST",
        "GPU",
        "WHO",
        "SETTING",
        "OLD",
        "NEW",
        "RESULT",
        "ERROR",
    ];
    let mut cells: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for a in rows {
        cells.push(vec![
            a.audit_id.to_string(),
            short(a.ts_ms),
            a.host.clone(),
            a.gpu_index
                .map_or_else(|| a.gpu_uuid.clone(), |i| i.to_string()),
            a.who.clone(),
            a.setting.clone(),
            a.old_value.clone().unwrap_or_else(|| "-".into()),
            a.new_value.clone(),
            a.result.clone(),
            a.error.clone().unwrap_or_default(),
        ]);
    }
    render(&cells)
}
