//! `gpuwatch alerts`: alert history with durations, newest first, from the public `alerts`
//! view (migration 0007): when each episode started to hold (pending), fired, resolved, how
//! long it was pending and firing, with the alert id `gpuwatch incident ID` takes.
//!
//! Invariants: read-only (the database is opened read-only, beside a running daemon); a time
//! that did not happen (never fired, not resolved yet) prints as `-` / JSON null, never 0;
//! durations come from the `alerts` view: a live episode's count to the newest stored sample
//! of its host and are marked ongoing.

use anyhow::Context;
use serde_json::{Value, json};

use crate::model::TsMs;
use crate::store::{self, incident::AlertFilter, incident::AlertRow};

use super::timearg::RangeArgs;
use super::{ViewError, usage};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StateArg {
    Pending,
    Firing,
    Resolved,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    /// For people: aligned columns (also accepted as `text`).
    #[value(alias = "text")]
    Table,
    /// A JSON array of the episodes with durations, severities and labels.
    Json,
}

/// What `gpuwatch alerts` and `GET /api/v1/alerts` select (the command's flags but the config).
#[derive(Debug, clap::Args)]
pub struct AlertsQuery {
    /// Alerts active at some time in this range [default: all stored alerts].
    #[command(flatten)]
    pub range: RangeArgs,
    /// Only this rule.
    #[arg(long, value_name = "RULE")]
    pub rule: Option<String>,
    /// Only alerts in this state now.
    #[arg(long, value_enum)]
    pub state: Option<StateArg>,
    /// Only this host.
    #[arg(long, value_name = "H")]
    pub host: Option<String>,
    /// Output format: `table` for people, `json` for programs.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// The output of `alerts` for `args` (`--format json` is also `GET /api/v1/alerts`).
pub fn output(
    args: &AlertsQuery,
    conn: &rusqlite::Connection,
    now: TsMs,
) -> Result<String, ViewError> {
    let range = args
        .range
        .resolve_given(now)
        .map_err(|e| usage(anyhow::anyhow!(e)))?;
    let filter = AlertFilter {
        range,
        rule: args.rule.clone(),
        state: args.state.map(|s| state_name(s).to_string()),
        host: args.host.clone(),
    };
    let rows = store::incident::alerts(conn, &filter)?;
    Ok(match args.format {
        Format::Json => {
            let list: Vec<Value> = rows.iter().map(alert_json).collect();
            serde_json::to_string_pretty(&list).context("rendering JSON")? + "\n"
        }
        Format::Table if rows.is_empty() => "no alerts match\n".to_string(),
        Format::Table => table(&rows),
    })
}

fn state_name(s: StateArg) -> &'static str {
    match s {
        StateArg::Pending => "pending",
        StateArg::Firing => "firing",
        StateArg::Resolved => "resolved",
    }
}

/// Durations of one episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durations {
    /// From the start until it fired (or resolved / last update without firing).
    pub pending_ms: TsMs,
    /// From firing until resolved or last update; None when it never fired.
    pub firing_ms: Option<TsMs>,
    pub total_ms: TsMs,
    /// Still pending or firing.
    pub ongoing: bool,
}

pub fn durations(a: &AlertRow) -> Durations {
    let end = a.active_since_ms + a.active_ms;
    Durations {
        pending_ms: a.fired_ms.unwrap_or(end) - a.active_since_ms,
        firing_ms: a.fired_ms.map(|f| end - f),
        total_ms: a.active_ms,
        ongoing: a.state != "resolved",
    }
}

/// `1h 4m 10s`, RFC 3339 with ms, and `2026-11-30 14:05:07` (UTC): the shared forms.
pub use crate::format::{duration_words as dur, rfc3339_ms as rfc3339, utc_seconds as short};

/// `3` / `3 pid 1234` / `-` (host scope).
pub fn subject(a: &AlertRow) -> String {
    let mut s = a.gpu_index.map_or("-".to_string(), |i| i.to_string());
    if let Some(pid) = a.pid {
        s.push_str(&format!(" pid {pid}"));
    }
    s
}

pub fn alert_json(a: &AlertRow) -> Value {
    let d = durations(a);
    let t = |ms: Option<TsMs>| ms.map(rfc3339);
    let labels: Value = a
        .labels_json
        .as_deref()
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or(Value::Null);
    // A MIG instance is addressed `N/I` (parent index / GPU instance id), as its `gpu` label.
    let gpu_index = match (
        a.gpu_index,
        labels.get("gpu_instance_id").and_then(Value::as_str),
    ) {
        (Some(n), Some(gi)) => json!(format!("{n}/{gi}")),
        (n, _) => json!(n),
    };
    json!({
        "alert_id": a.alert_id,
        "rule": a.rule,
        "state": a.state,
        "severity": a.severity,
        "scope": a.scope,
        "host": a.host,
        "gpu_index": gpu_index,
        "gpu_uuid": a.gpu_uuid,
        "pid": a.pid,
        "process_name": a.process_name,
        "reported": a.reported,
        "started_ms": a.active_since_ms,
        "started": rfc3339(a.active_since_ms),
        "fired_ms": a.fired_ms,
        "fired": t(a.fired_ms),
        "resolved_ms": a.resolved_ms,
        "resolved": t(a.resolved_ms),
        "pending_ms": d.pending_ms,
        "firing_ms": d.firing_ms,
        "active_ms": d.total_ms,
        "ongoing": d.ongoing,
        "summary": a.summary,
        "labels": labels,
        "max_severity": a.max_severity,
        "severity_changes": a.severity_changes.iter().map(|c| json!({
            "at": rfc3339(c.at_ms),
            "at_ms": c.at_ms,
            "from": c.from,
            "to": c.to,
            "summary": c.summary,
        })).collect::<Vec<_>>(),
        "replayed": a.replayed,
    })
}

fn table(rows: &[AlertRow]) -> String {
    let head = [
        "ID",
        "STATE",
        "RULE",
        "SEVERITY",
        "HOST",
        "GPU",
        "STARTED (UTC)",
        "PENDING",
        "FIRED (UTC)",
        "FIRING",
        "RESOLVED (UTC)",
        "TOTAL",
        "SUMMARY",
    ];
    let mut cells: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for a in rows {
        let d = durations(a);
        let ongoing = if d.ongoing { "+" } else { "" };
        let mut summary = a.summary.clone().unwrap_or_default();
        if summary.chars().count() > 80 {
            summary = summary.chars().take(79).collect::<String>() + "…";
        }
        cells.push(vec![
            a.alert_id.to_string(),
            a.state.clone(),
            a.rule.clone(),
            severity_cell(a),
            a.host.clone(),
            subject(a),
            short(a.active_since_ms),
            format!(
                "{}{}",
                dur(d.pending_ms),
                if a.fired_ms.is_none() { ongoing } else { "" }
            ),
            a.fired_ms.map_or("-".into(), short),
            d.firing_ms
                .map_or("-".into(), |f| format!("{}{ongoing}", dur(f))),
            a.resolved_ms.map_or("-".into(), short),
            format!("{}{ongoing}", dur(d.total_ms)),
            summary,
        ]);
    }
    let mut out = render(&cells);
    if rows.iter().any(|a| a.state != "resolved") {
        out.push_str("+ still active: counted to the newest stored sample of its host\n");
    }
    if rows.iter().any(|a| a.replayed) {
        out.push_str("(replayed): found by `gpuwatch replay --save` over stored history\n");
    }
    out
}

/// `warning`, or `warning (max critical)` for an episode that fired higher than it is now;
/// `(replayed)` for an episode found by a replay.
fn severity_cell(a: &AlertRow) -> String {
    let mut s = a.severity.clone().unwrap_or_else(|| "-".into());
    if let Some(max) = &a.max_severity
        && a.severity.as_ref() != Some(max)
    {
        s.push_str(&format!(" (max {max})"));
    }
    if a.replayed {
        s.push_str(" (replayed)");
    }
    s
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn render(cells: &[Vec<String>]) -> String {
    let cols = cells.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            cells
                .iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in cells {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: &str, fired: Option<TsMs>, resolved: Option<TsMs>, active_ms: TsMs) -> AlertRow {
        AlertRow {
            alert_id: 7,
            rule: "r".into(),
            state: state.into(),
            severity: None,
            scope: "gpu".into(),
            host: "h".into(),
            gpu_id: 1,
            gpu_uuid: None,
            gpu_index: Some(0),
            process_id: None,
            pid: None,
            process_name: None,
            reported: true,
            active_since_ms: 1_000_000,
            fired_ms: fired,
            resolved_ms: resolved,
            active_ms,
            summary: None,
            labels_json: None,
            ..Default::default()
        }
    }

    #[test]
    fn durations_of_each_state() {
        let d = durations(&row("resolved", Some(1_060_000), Some(1_900_000), 900_000));
        assert_eq!(
            (d.pending_ms, d.firing_ms, d.total_ms, d.ongoing),
            (60_000, Some(840_000), 900_000, false)
        );
        let d = durations(&row("pending", None, None, 30_000));
        assert_eq!((d.pending_ms, d.firing_ms, d.ongoing), (30_000, None, true));
        let d = durations(&row("resolved", None, Some(1_020_000), 20_000));
        assert_eq!((d.pending_ms, d.firing_ms), (20_000, None));
        assert_eq!(dur(3_725_000), "1h 2m 5s");
        assert_eq!(dur(250), "250ms");
    }
}
