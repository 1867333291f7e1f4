//! The HTTP API's entry to the views (`/api/v1/status`, `/api/v1/alerts`, `/api/v1/history`,
//! `/api/v1/gpu/audit`): the documents `status`, `alerts`, `history` and `gpu audit` print
//! with `--format json`, rendered by the same functions; a query string is parsed by the
//! commands' own argument parser (their flags but `--config`), so a parameter means exactly
//! what its flag means.
//!
//! Invariant: only the listed parameters are accepted (`?config=` or `?format=` cannot
//! reach the parser); a bad one is a usage error naming it.

use clap::Parser;

use super::{ViewError, usage as usage_error};
use crate::model::TsMs;

pub use super::status::document as status;

/// The parameters `/api/v1/alerts` takes (the flags of `gpuwatch alerts`).
pub const ALERTS_PARAMS: &[&str] = &["since", "from", "to", "rule", "state", "host"];
/// The parameters `/api/v1/history` takes (the flags of `gpuwatch history`).
pub const HISTORY_PARAMS: &[&str] = &[
    "since", "from", "to", "gpu", "host", "metric", "step", "source",
];

/// The parameters `/api/v1/usage` takes (the flags of `gpuwatch usage`).
pub const USAGE_PARAMS: &[&str] = &["by", "since", "from", "to", "host"];

#[derive(Parser)]
#[command(no_binary_name = true)]
struct UsageParams {
    #[command(flatten)]
    args: super::usage::UsageQuery,
}

/// `gpuwatch usage --format json` with the query's flags, priced by `[usage]`.
pub fn usage_doc(
    query: &[(String, String)],
    conn: &rusqlite::Connection,
    cfg: &crate::config::usage::UsageConfig,
    now: TsMs,
) -> Result<String, ViewError> {
    let q = UsageParams::try_parse_from(argv(query, USAGE_PARAMS)?).map_err(usage)?;
    super::usage::output(&q.args, conn, cfg, now)
}

/// The parameters `/api/v1/gpu/audit` takes (the flags of `gpuwatch gpu audit`).
pub const GPU_AUDIT_PARAMS: &[&str] = &["since", "from", "to", "gpu", "host"];

#[derive(Parser)]
#[command(no_binary_name = true)]
struct GpuAuditParams {
    #[command(flatten)]
    args: super::gpu_audit::AuditQuery,
}

#[derive(Parser)]
#[command(no_binary_name = true)]
struct AlertsParams {
    #[command(flatten)]
    args: super::alerts::AlertsQuery,
}

#[derive(Parser)]
#[command(no_binary_name = true)]
struct HistoryParams {
    #[command(flatten)]
    args: super::history::HistoryQuery,
}

/// `--name=value` flags from query pairs, refusing parameters outside `known`.
fn argv(query: &[(String, String)], known: &[&str]) -> Result<Vec<String>, ViewError> {
    let mut out = Vec::with_capacity(query.len() + 2);
    for (k, v) in query {
        if !known.contains(&k.as_str()) {
            return Err(usage_error(anyhow::anyhow!(
                "unknown parameter {k:?} (known: {})",
                known.join(", ")
            )));
        }
        out.push(format!("--{k}={v}"));
    }
    out.push("--format=json".into());
    Ok(out)
}

fn usage(e: clap::Error) -> ViewError {
    // clap's message names the flag; the API's callers know it as a parameter.
    let text = e.kind().to_string();
    let detail = e.to_string();
    let first = detail
        .lines()
        .next()
        .unwrap_or(&text)
        .trim_start_matches("error: ");
    usage_error(anyhow::anyhow!("{}", first.replace("--", "")))
}

/// `gpuwatch alerts --format json` with the query's flags.
pub fn alerts(
    query: &[(String, String)],
    conn: &rusqlite::Connection,
    now: TsMs,
) -> Result<String, ViewError> {
    let q = AlertsParams::try_parse_from(argv(query, ALERTS_PARAMS)?).map_err(usage)?;
    super::alerts::output(&q.args, conn, now)
}

/// `gpuwatch history --format json` with the query's flags.
pub fn history(
    query: &[(String, String)],
    conn: &rusqlite::Connection,
    now: TsMs,
) -> Result<String, ViewError> {
    let q = HistoryParams::try_parse_from(argv(query, HISTORY_PARAMS)?).map_err(usage)?;
    super::history::output(&q.args, conn, now)
}

/// `gpuwatch gpu audit --format json` with the query's flags.
pub fn gpu_audit(
    query: &[(String, String)],
    conn: &rusqlite::Connection,
    now: TsMs,
) -> Result<String, ViewError> {
    let q = GpuAuditParams::try_parse_from(argv(query, GPU_AUDIT_PARAMS)?).map_err(usage)?;
    super::gpu_audit::output(&q.args, conn, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_the_commands_flags_pass() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let e = alerts(&q(&[("config", "/etc/passwd")]), &conn, 0).unwrap_err();
        assert!(e.is_usage());
        assert!(
            e.to_string().contains("unknown parameter \"config\""),
            "{e}"
        );
        let e = alerts(&q(&[("state", "burning")]), &conn, 0).unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().contains("burning"), "{e}");
        let e = history(&q(&[("step", "soon")]), &conn, 0).unwrap_err();
        assert!(e.is_usage(), "{e}");
        let e = gpu_audit(&q(&[("db", "/tmp/x.db")]), &conn, 0).unwrap_err();
        assert!(e.is_usage());
    }

    #[test]
    fn the_gpu_audit_document_is_the_commands_json() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::store::migrate_to(&mut conn, crate::store::LATEST_VERSION).unwrap();
        conn.execute_batch(
            "INSERT INTO hosts (id, name) VALUES (1, 'n1');
             INSERT INTO gpus (id, host_id, uuid, gpu_index, first_seen_ms, last_seen_ms)
               VALUES (7, 1, 'GPU-a', 0, 0, 0), (8, 1, 'GPU-b', 1, 0, 0);
             INSERT INTO gpu_audit_log (ts_ms, gpu_id, who, uid, setting, old_value,
               new_value, result)
               VALUES (1000, 7, 'alice', 1000, 'power_limit', '700 W', '500 W', 'ok'),
                      (2000, 8, 'observed', NULL, 'persistence', 'on', 'off', 'ok');",
        )
        .unwrap();
        let all: serde_json::Value =
            serde_json::from_str(&gpu_audit(&[], &conn, 5000).unwrap()).unwrap();
        assert_eq!(all.as_array().map(Vec::len), Some(2));
        assert_eq!(all[0]["who"], "alice");
        assert_eq!(all[1]["uid"], serde_json::Value::Null);
        let one: serde_json::Value =
            serde_json::from_str(&gpu_audit(&q(&[("gpu", "GPU-b")]), &conn, 5000).unwrap())
                .unwrap();
        assert_eq!(one[0]["setting"], "persistence");
        assert_eq!(one.as_array().map(Vec::len), Some(1));
    }
}
