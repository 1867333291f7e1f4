//! The text rendering of an [`Analysis`] (the "Analysis" section of `gpuwatch incident`),
//! and its one line for messages ([`one_line`]).
//!
//! Invariants: renders only what the value holds (the JSON has the same facts); times are
//! UTC; an unknown value prints as "unknown", never 0.

use super::{Analysis, ChangeKind};
use crate::model::TsMs;

/// `HH:MM:SS` (UTC) of a time.
pub fn hms(ts: TsMs) -> String {
    chrono::DateTime::from_timestamp_millis(ts)
        .map_or_else(|| ts.to_string(), |t| t.format("%H:%M:%S").to_string())
}

/// `-2m14s`, `+30s`: seconds relative to an alert's start.
pub fn offset(s: i64) -> String {
    let sign = if s < 0 { "-" } else { "+" };
    let a = s.unsigned_abs();
    if a >= 60 {
        format!("{sign}{}m{:02}s", a / 60, a % 60)
    } else {
        format!("{sign}{a}s")
    }
}

/// The section, starting with its heading.
pub fn render(a: &Analysis) -> String {
    let mut o = String::from("\nAnalysis (rule-based):\n");
    o.push_str(&format!("  {}\n", a.headline));
    if !a.causes.is_empty() {
        o.push_str("\n  likely causes, most likely first:\n");
    }
    for (i, c) in a.causes.iter().enumerate() {
        let conf = match c.confidence {
            super::Confidence::Likely => "likely",
            super::Confidence::Possible => "possible",
        };
        o.push_str(&format!("  {}. {} [{conf}]\n", i + 1, c.cause));
        for b in &c.because {
            o.push_str(&format!("       because: {b}\n"));
        }
        for n in &c.next_steps {
            o.push_str(&format!("       next: {n}\n"));
        }
    }
    if !a.evidence.is_empty() {
        o.push_str("\n  evidence:\n");
        let w = a.evidence.iter().map(|e| e.fact.len()).max().unwrap_or(0);
        for e in &a.evidence {
            o.push_str(&format!("    {:w$}  {}\n", e.fact, e.value));
        }
    }
    o.push_str("\n  what changed (time relative to the alert's start):\n");
    if a.changes.is_empty() {
        o.push_str("    nothing recorded in the window\n");
    }
    for c in &a.changes {
        let mark = if c.kind == ChangeKind::Xid { "!" } else { " " };
        o.push_str(&format!(
            "   {mark}{:>8}  {}  {}\n",
            offset(c.offset_s),
            hms(c.at_ms),
            c.text
        ));
    }
    if let Some(s) = &a.incident_summary {
        o.push_str(&format!("\n  incident: {s}\n"));
        for m in &a.incident {
            o.push_str(&format!(
                "    alert {:<6} {:<32} stopped {}, alert started {}\n",
                m.alert_id,
                super::incident::who(m),
                m.stopped_ms.map_or("unknown".to_string(), hms),
                hms(m.started_ms)
            ));
        }
    }
    let others: Vec<_> = a
        .related
        .iter()
        .filter(|r| !a.incident.iter().any(|m| m.alert_id == r.alert_id))
        .collect();
    if !others.is_empty() {
        o.push_str("\n  other alerts of the host around it:\n");
        for r in others {
            o.push_str(&format!(
                "    alert {:<6} {} on GPU {} ({}), started {}\n",
                r.alert_id,
                r.rule,
                r.gpu.map_or("-".to_string(), |g| g.to_string()),
                r.state,
                hms(r.started_ms)
            ));
        }
    }
    if let Some(h) = &a.health {
        o.push_str(&format!(
            "\n  GPU health at its newest sample{} (as `gpuwatch status` judges it): {}\n",
            h.at_ms.map_or(String::new(), |t| format!(", {}", hms(t))),
            h.status
        ));
        for r in &h.findings {
            o.push_str(&format!(
                "    {} ({}): {}; fix: {}\n",
                r.code, r.severity, r.text, r.fix
            ));
        }
    }
    if !a.unknown.is_empty() {
        o.push_str("\n  unknown (not in the store):\n");
        for u in &a.unknown {
            o.push_str(&format!("    - {u}\n"));
        }
    }
    o
}

/// One line for a chat or mail message: the headline, at most `max` characters.
pub fn one_line(a: &Analysis, max: usize) -> String {
    let line = format!("Analysis: {}", a.headline);
    if line.chars().count() <= max {
        return line;
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_one_line() {
        assert_eq!(offset(-134), "-2m14s");
        assert_eq!(offset(30), "+30s");
        assert_eq!(offset(0), "+0s");
        let a = Analysis {
            alert_id: 1,
            rule: "r".into(),
            headline: "likely cause: ".to_string() + &"x".repeat(400),
            causes: vec![],
            evidence: vec![],
            changes: vec![],
            incident: vec![],
            incident_summary: None,
            related: vec![],
            xids: vec![],
            health: None,
            unknown: vec![],
        };
        let l = one_line(&a, 50);
        assert_eq!(l.chars().count(), 50);
        assert!(
            l.starts_with("Analysis: likely cause: xx") && l.ends_with('…'),
            "{l}"
        );
    }
}
