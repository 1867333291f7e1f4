//! The HTML part of an alert email: one card per alert in a table layout with inline styles
//! only (what Gmail, Outlook and Apple Mail all render), and the charts' numbers beside them.
//!
//! Invariants:
//! - Every text that comes from an alert, a label or the configuration goes through
//!   [`escape`]; nothing else is interpolated.
//! - Firing alerts carry their severity's colour; resolved ones are green, say RESOLVED and
//!   are muted, so the two never look alike.
//! - Images are referenced by `cid:` only (no remote content: nothing is fetched on open).

use std::fmt::Write as _;

use super::chart::Stats;
use crate::notify::text::{self, severity_rank};
use crate::notify::{AlertMsg, Notification};

/// What the HTML shows where an alert's chart goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ChartRef<'a> {
    /// The inline PNG with `Content-ID: <cid>` and its numbers.
    Image { cid: &'a str, stats: &'a Stats },
    /// Why there is no chart.
    Note(&'a str),
}

const FONT: &str = "font-family:-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;";
const GREY: &str = "#6b7280";
const RESOLVED: &str = "#16a34a";

/// Escapes `& < > " '` for text and attribute values.
pub use crate::text::html_escape as escape;

/// The colour of a firing alert of this severity.
pub fn severity_colour(severity: &str) -> &'static str {
    match severity {
        "critical" => "#dc2626",
        "warning" => "#d97706",
        "info" => "#2563eb",
        _ => GREY,
    }
}

/// The whole HTML document. `charts[i]` belongs to `n.alerts[i]` (missing = no chart).
pub fn render(n: &Notification, charts: &[Option<ChartRef<'_>>]) -> String {
    let title = text::title(n);
    let banner = if n.test {
        GREY
    } else {
        n.firing()
            .map(|a| a.severity.as_str())
            .max_by_key(|s| severity_rank(s))
            .map_or(RESOLVED, severity_colour)
    };
    let mut h = String::with_capacity(8 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{t}</title></head>\n\
         <body style=\"margin:0;padding:0;background:#f3f4f6;\">\n\
         <table role=\"presentation\" width=\"100%\" cellpadding=\"0\" cellspacing=\"0\" \
         border=\"0\" style=\"background:#f3f4f6;\"><tr><td align=\"center\" style=\"padding:16px 8px;\">\n\
         <table role=\"presentation\" width=\"640\" cellpadding=\"0\" cellspacing=\"0\" border=\"0\" \
         style=\"width:100%;max-width:640px;background:#ffffff;border:1px solid #e5e7eb;{FONT}\">\n\
         <tr><td style=\"background:{banner};color:#ffffff;padding:14px 20px;font-size:18px;\
         font-weight:bold;{FONT}\">{t}</td></tr>\n",
        t = escape(&title),
    );
    if n.test {
        notice(
            &mut h,
            &format!(
                "This is a test message from gpuwatch on {} to receiver \u{201c}{}\u{201d}.",
                n.sender_host, n.receiver
            ),
        );
    }
    if n.repeat {
        notice(&mut h, "Still firing (reminder).");
    }
    for (i, a) in n.alerts.iter().enumerate() {
        card(&mut h, a, n, charts.get(i).copied().flatten());
    }
    let _ = write!(
        h,
        "<tr><td style=\"padding:12px 20px 16px;color:{GREY};font-size:12px;{FONT}\">\
         Sent by gpuwatch on {host} to receiver {recv} at {at}.</td></tr>\n\
         </table>\n</td></tr></table>\n</body></html>\n",
        host = escape(&n.sender_host),
        recv = escape(&n.receiver),
        at = escape(&text::utc(n.now_ms)),
    );
    h
}

fn notice(h: &mut String, msg: &str) {
    let _ = writeln!(
        h,
        "<tr><td style=\"padding:12px 20px 0;color:#374151;font-size:14px;{FONT}\">{}</td></tr>",
        escape(msg)
    );
}

fn card(h: &mut String, a: &AlertMsg, n: &Notification, chart: Option<ChartRef<'_>>) {
    let firing = a.is_firing();
    let colour = if firing {
        severity_colour(&a.severity)
    } else {
        RESOLVED
    };
    let badge = if firing {
        format!("FIRING \u{00b7} {}", a.severity.to_uppercase())
    } else {
        "\u{2713} RESOLVED".to_string()
    };
    let (bg, fg) = if firing {
        ("#ffffff", "#111827")
    } else {
        ("#f0fdf4", "#4b5563")
    };
    let _ = write!(
        h,
        "<tr><td style=\"padding:16px 20px 0;\">\n\
         <table role=\"presentation\" width=\"100%\" cellpadding=\"0\" cellspacing=\"0\" border=\"0\" \
         style=\"border:1px solid #e5e7eb;border-left:5px solid {colour};background:{bg};\">\n\
         <tr><td style=\"padding:12px 14px 4px;{FONT}\">\
         <span style=\"display:inline-block;background:{colour};color:#ffffff;font-size:11px;\
         font-weight:bold;letter-spacing:0.5px;padding:2px 8px;border-radius:3px;\">{badge}</span>\
         &nbsp;<span style=\"font-size:15px;font-weight:bold;color:{fg};\">{rule}</span></td></tr>\n\
         <tr><td style=\"padding:4px 14px 8px;font-size:15px;color:{fg};{FONT}\">{summary}</td></tr>\n\
         <tr><td style=\"padding:0 14px 10px;\">\
         <table role=\"presentation\" cellpadding=\"0\" cellspacing=\"0\" border=\"0\" \
         style=\"font-size:13px;color:{fg};{FONT}\">\n",
        badge = escape(&badge),
        rule = escape(&a.rule),
        summary = escape(&a.summary),
    );
    row(h, "Host", &a.host);
    if let Some(an) = &a.analysis {
        row(h, "Analysis", an.strip_prefix("Analysis: ").unwrap_or(an));
    }
    if let Some(g) = a.gpu {
        let mut gpu = format!("GPU {g}");
        if let Some(m) = &a.model {
            gpu.push_str(&format!(" \u{00b7} {m}"));
        }
        row(h, "GPU", &gpu);
    }
    if let Some(u) = &a.uuid {
        row_code(h, "UUID", u);
    }
    if let Some(pid) = a.pid {
        let mut p = format!("pid {pid}");
        if let Some(name) = &a.process {
            p.push_str(&format!(" {name}"));
        }
        if let Some(u) = &a.user {
            p.push_str(&format!(" (user {u})"));
        }
        row(h, "Process", &p);
    }
    if let Some(pod) = a.labels.get("pod") {
        row(h, "Pod", pod);
    }
    row(
        h,
        if firing { "Active" } else { "Ended" },
        &text::timing(a, n.now_ms),
    );
    if let Some(d) = &a.description {
        row(h, "Details", d);
    }
    if let Some(cmd) = a.story_command() {
        let _ = writeln!(
            h,
            "<tr><td style=\"padding:2px 12px 2px 0;color:{GREY};vertical-align:top;\">Alert</td>\
             <td style=\"padding:2px 0;\">#{id} \u{2014} its story: <code style=\"font-family:\
             Menlo,Consolas,monospace;background:#f3f4f6;padding:1px 4px;\">{cmd}</code></td></tr>",
            id = a.id,
            cmd = escape(&cmd),
        );
    }
    h.push_str("</table></td></tr>\n");
    match chart {
        Some(ChartRef::Image { cid, stats }) => chart_block(h, a, cid, stats, colour),
        Some(ChartRef::Note(note)) => {
            let _ = writeln!(
                h,
                "<tr><td style=\"padding:0 14px 12px;font-size:12px;color:{GREY};{FONT}\">{}</td></tr>",
                escape(note)
            );
        }
        None => {}
    }
    h.push_str("</table>\n</td></tr>\n");
}

fn row(h: &mut String, label: &str, value: &str) {
    let _ = writeln!(
        h,
        "<tr><td style=\"padding:2px 12px 2px 0;color:{GREY};vertical-align:top;\">{}</td>\
         <td style=\"padding:2px 0;\">{}</td></tr>",
        escape(label),
        escape(value)
    );
}

fn row_code(h: &mut String, label: &str, value: &str) {
    let _ = writeln!(
        h,
        "<tr><td style=\"padding:2px 12px 2px 0;color:{GREY};vertical-align:top;\">{}</td>\
         <td style=\"padding:2px 0;font-family:Menlo,Consolas,monospace;font-size:12px;\">{}</td></tr>",
        escape(label),
        escape(value)
    );
}

fn chart_block(h: &mut String, a: &AlertMsg, cid: &str, s: &Stats, colour: &str) {
    let gpu = a.gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default();
    let alt = format!("{} of the last hour{gpu}", s.metric);
    let span_min = (s.last_ms - s.first_ms) / 60_000;
    let span = format!(
        "{} \u{2013} {} ({} min, {} samples)",
        hm(s.first_ms),
        hm(s.last_ms),
        span_min,
        s.samples
    );
    let legend = if a.is_firing() {
        "shaded: since the alert started"
    } else {
        "shaded: while the alert was active"
    };
    let _ = write!(
        h,
        "<tr><td style=\"padding:0 14px 14px;\">\
         <div style=\"font-size:12px;color:{GREY};padding-bottom:4px;{FONT}\">{title}</div>\
         <img src=\"cid:{cid}\" width=\"{w}\" height=\"{hgt}\" alt=\"{alt}\" \
         style=\"display:block;width:100%;max-width:{w}px;height:auto;border:0;\">\n\
         <table role=\"presentation\" cellpadding=\"0\" cellspacing=\"0\" border=\"0\" \
         style=\"font-size:12px;color:#374151;padding-top:6px;{FONT}\"><tr>\
         <td style=\"padding-right:16px;\">min <b>{min}</b></td>\
         <td style=\"padding-right:16px;\">max <b>{max}</b></td>\
         <td style=\"padding-right:16px;\">last <b>{last}</b></td>\
         <td>{span}</td></tr>\
         <tr><td colspan=\"4\" style=\"color:{GREY};padding-top:2px;\">\
         <span style=\"color:{colour};\">&#9646;</span> {legend}</td></tr></table>\
         </td></tr>\n",
        title = escape(&format!("{}{gpu}, last hour", s.metric)),
        cid = escape(cid),
        w = super::chart::WIDTH,
        hgt = super::chart::HEIGHT,
        alt = escape(&alt),
        min = escape(&number(s.min, s.unit)),
        max = escape(&number(s.max, s.unit)),
        last = escape(&number(s.last, s.unit)),
        span = escape(&span),
    );
}

/// `14:02:11 UTC`.
fn hm(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// A value with its unit, to a sensible precision (`97 %`, `71.3 W`, `0.42`).
pub fn number(v: f64, unit: &str) -> String {
    let digits = match v.abs() {
        x if x >= 100.0 || x == x.trunc() => 0,
        x if x >= 10.0 => 1,
        _ => 2,
    };
    let n = format!("{v:.digits$}");
    if unit.is_empty() {
        n
    } else {
        format!("{n} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape("<b>\"x\" & 'y'</b>"),
            "&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;"
        );
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(number(97.0, "%"), "97 %");
        assert_eq!(number(71.25, "W"), "71.2 W");
        assert_eq!(number(0.4234, ""), "0.42");
        assert_eq!(number(81234.5, "MiB"), "81234 MiB");
    }

    #[test]
    fn resolved_looks_different_and_alert_text_is_escaped() {
        let a = AlertMsg {
            id: 7,
            state: "firing".into(),
            rule: "gpu_idle".into(),
            severity: "critical".into(),
            summary: "<script>alert(1)</script>".into(),
            host: "node-1".into(),
            analysis: Some("Analysis: likely cause: an idle <notebook>".into()),
            ..Default::default()
        };
        let mut r = a.clone();
        r.state = "resolved".into();
        r.analysis = None;
        r.ends_ms = Some(60_000);
        let n = Notification {
            digest: None,
            alerts: vec![a, r],
            ..Default::default()
        };
        let h = render(&n, &[]);
        assert!(!h.contains("<script>"), "{h}");
        assert!(h.contains("&lt;script&gt;"));
        assert!(h.contains("FIRING \u{00b7} CRITICAL"));
        assert!(h.contains("RESOLVED"));
        assert!(h.contains(RESOLVED) && h.contains("#dc2626"));
        assert!(h.contains("gpuwatch incident 7"));
        // The sender's analysis line: one row, escaped, without its "Analysis: " prefix.
        assert_eq!(
            h.matches(">likely cause: an idle &lt;notebook&gt;</td>")
                .count(),
            1,
            "{h}"
        );
    }
}
