//! Reading what gpuwatch prints: replay's JSON lines (one alert per episode), JSON rows of
//! `query`, import warnings, and log lines without terminal colours.
//!
//! Invariants: pure functions of the text; a line that is not what the documented format
//! promises is an error naming the line, never skipped silently.

use serde_json::Value;

use super::Alert;
use crate::render::BASE_MS;

/// Removes terminal colour sequences from a log line.
pub(super) fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The `warning:` lines an import printed.
pub(super) fn import_warnings(stderr: &str) -> impl Iterator<Item = String> + '_ {
    stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .map(String::from)
}

/// The alerts of `replay --format jsonl` output, in time order: one per episode. A `firing`
/// line of an alert that is already firing is a severity change of the same episode, not a
/// new alert; `resolved` ends the episode.
pub(super) fn replay_alerts(out: &str) -> Result<Vec<Alert>, String> {
    let mut alerts = Vec::new();
    let mut open = std::collections::HashSet::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
        let key = ["rule", "host", "gpu", "pid"]
            .map(|k| v.get(k).cloned().unwrap_or_default().to_string());
        match v.get("state").and_then(Value::as_str) {
            Some("resolved") => {
                open.remove(&key);
                continue;
            }
            Some("firing") if open.insert(key) => {}
            _ => continue,
        }
        let at = v
            .get("at")
            .and_then(Value::as_str)
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .ok_or_else(|| format!("no RFC 3339 `at`: {line}"))?;
        let at_s = (at.timestamp_millis() - BASE_MS) as f64 / 1000.0;
        alerts.push(alert(&v, "gpu", at_s));
    }
    alerts.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    Ok(alerts)
}

/// An alert from a JSON row whose GPU index is under `gpu_key`.
pub(super) fn alert(v: &Value, gpu_key: &str, at_s: f64) -> Alert {
    let text = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let int = |k: &str| {
        v.get(k)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    Alert {
        rule: text("rule"),
        gpu: int(gpu_key),
        pid: int("pid"),
        at_s,
        severity: text("severity"),
        summary: text("summary"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_are_removed() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m dropped"),
            "2026 ERROR dropped"
        );
    }

    #[test]
    fn rows_become_alerts() {
        let v: Value = serde_json::from_str(
            r#"{"rule":"gpu_idle","gpu":3,"pid":null,"severity":"warning","summary":"s"}"#,
        )
        .unwrap_or_default();
        let a = alert(&v, "gpu", 12.5);
        assert_eq!(
            (a.rule.as_str(), a.gpu, a.pid, a.at_s),
            ("gpu_idle", Some(3), None, 12.5)
        );
    }

    #[test]
    fn replay_lines_become_one_alert_per_episode() {
        let line = |at: &str, state: &str, severity: &str, gpu: u32| {
            format!(
                r#"{{"at":"2025-03-03T00:{at}.000Z","state":"{state}","rule":"gpu_overheating","severity":"{severity}","host":"node","gpu":{gpu},"pid":null,"summary":"s"}}"#
            )
        };
        let out = [
            line("10:00", "firing", "warning", 0),
            line("10:30", "firing", "critical", 0),
            line("11:00", "firing", "warning", 1),
            line("20:00", "resolved", "critical", 0),
            line("30:00", "firing", "warning", 0),
        ]
        .join("\n");
        let alerts = replay_alerts(&out).unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(Option<u32>, f64)> = alerts.iter().map(|a| (a.gpu, a.at_s)).collect();
        assert_eq!(
            got,
            vec![(Some(0), 600.0), (Some(1), 660.0), (Some(0), 1800.0)]
        );
        assert!(replay_alerts("not json").is_err());
    }
}
