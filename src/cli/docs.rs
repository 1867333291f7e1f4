//! The documents that `status`, `alerts` and `history` print with `--format json`, for the
//! HTTP API (`/api/v1/status`, `/api/v1/alerts`, `/api/v1/history`): the same functions
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
    }
}
