//! The documents that `status`, `alerts`, `history` and `gpu audit` print with `--format
//! json`, for the HTTP API (`/api/v1/status`, `/api/v1/alerts`, `/api/v1/history`,
//! `/api/v1/gpu/audit`): the same functions
//! render both, and a query string is parsed by the commands' own argument parser, so a
//! parameter means exactly what its flag means.
//!
//! Invariant: only the listed parameters are accepted (`?config=` or `?format=` cannot
//! reach the parser); a bad one is a usage error naming it.

use clap::Parser;

use super::{Failure, exit, fail};
use crate::model::TsMs;

pub use super::status::document as status;
pub use super::status_training::Joins;

/// The parameters `/api/v1/alerts` takes (the flags of `gpuwatch alerts`).
pub const ALERTS_PARAMS: &[&str] = &["since", "from", "to", "rule", "state", "host"];
/// The parameters `/api/v1/history` takes (the flags of `gpuwatch history`).
pub const HISTORY_PARAMS: &[&str] = &[
    "since", "from", "to", "gpu", "host", "metric", "step", "source",
];

/// The parameters `/api/v1/gpu/audit` takes (the flags of `gpuwatch gpu audit`).
pub const GPU_AUDIT_PARAMS: &[&str] = &["since", "from", "to", "gpu", "host"];

#[derive(Parser)]
#[command(no_binary_name = true)]
struct GpuAuditQuery {
    #[command(flatten)]
    args: super::gpu_audit::AuditArgs,
}

#[derive(Parser)]
#[command(no_binary_name = true)]
struct AlertsQuery {
    #[command(flatten)]
    args: super::alerts::AlertsArgs,
}

#[derive(Parser)]
#[command(no_binary_name = true)]
struct HistoryQuery {
    #[command(flatten)]
    args: super::history::HistoryArgs,
}

/// `--name=value` flags from query pairs, refusing parameters outside `known`.
fn argv(query: &[(String, String)], known: &[&str]) -> Result<Vec<String>, Failure> {
    let mut out = Vec::with_capacity(query.len() + 2);
    for (k, v) in query {
        if !known.contains(&k.as_str()) {
            return Err(fail(
                exit::USAGE,
                anyhow::anyhow!("unknown parameter {k:?} (known: {})", known.join(", ")),
            ));
        }
        out.push(format!("--{k}={v}"));
    }
    out.push("--format=json".into());
    Ok(out)
}

fn usage(e: clap::Error) -> Failure {
    // clap's message names the flag; the API's callers know it as a parameter.
    let text = e.kind().to_string();
    let detail = e.to_string();
    let first = detail
        .lines()
        .next()
        .unwrap_or(&text)
        .trim_start_matches("error: ");
    fail(exit::USAGE, anyhow::anyhow!("{}", first.replace("--", "")))
}

/// `gpuwatch alerts --format json` with the query's flags.
pub fn alerts(
    query: &[(String, String)],
    conn: &rusqlite::Connection,
    now: TsMs,
) -> Result<String, Failure> {
    let q = AlertsQuery::try_parse_from(argv(query, ALERTS_PARAMS)?).map_err(usage)?;
    super::alerts::output(&q.args, conn, now)
}

/// `gpuwatch history --format json` with the query's flags.
pub fn history(
    query: &[(String, String)],
    conn: &rusqlite::Connection,
    now: TsMs,
) -> Result<String, Failure> {
    let q = HistoryQuery::try_parse_from(argv(query, HISTORY_PARAMS)?).map_err(usage)?;
    super::history::output(&q.args, conn, now)
}

/// `gpuwatch gpu audit --format json` with the query's flags.
pub fn gpu_audit(
    query: &[(String, String)],
    conn: &rusqlite::Connection,
    now: TsMs,
) -> Result<String, Failure> {
    let q = GpuAuditQuery::try_parse_from(argv(query, GPU_AUDIT_PARAMS)?).map_err(usage)?;
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
        assert_eq!(e.code, exit::USAGE);
        assert!(
            e.error.to_string().contains("unknown parameter \"config\""),
            "{}",
            e.error
        );
        let e = alerts(&q(&[("state", "burning")]), &conn, 0).unwrap_err();
        assert_eq!(e.code, exit::USAGE);
        assert!(e.error.to_string().contains("burning"), "{}", e.error);
        let e = history(&q(&[("step", "soon")]), &conn, 0).unwrap_err();
        assert_eq!(e.code, exit::USAGE, "{}", e.error);
        let e = gpu_audit(&q(&[("db", "/tmp/x.db")]), &conn, 0).unwrap_err();
        assert_eq!(e.code, exit::USAGE);
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
