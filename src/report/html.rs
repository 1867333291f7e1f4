//! The report as one HTML document: a header, the alert the report is about, the alerts of
//! the window, the charts (`figures.rs`), the process table and the events.
//!
//! Invariants: every database text goes through [`esc`]; the CSS is inline in `<style>`; the
//! document references no URL; times are UTC and say so.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::figures::{gpu_charts, training};
use super::{ReportData, ReportError};
use crate::model::TsMs;
use crate::store::postmortem::AlertSpan;
/// HTML-escapes text for element content and quoted attributes.
pub use crate::text::html_escape as esc;

const CSS: &str = "
body{font-family:-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;color:#111827;
 margin:0;background:#f3f4f6}
main{max-width:1140px;margin:0 auto;padding:16px 20px 40px}
header{background:#111827;color:#fff;padding:18px 20px}
header h1{margin:0 auto;max-width:1140px;font-size:22px}
header p{margin:6px auto 0;max-width:1140px;color:#d1d5db;font-size:14px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:6px;margin:16px 0;padding:12px 16px}
h2{font-size:17px;margin:4px 0 10px}
h3{font-size:14px;margin:14px 0 4px;color:#374151}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #e5e7eb;vertical-align:top;
 white-space:nowrap}
td.wrap{white-space:normal}
table.alerts tr:not(.summary) td{border-bottom:none;padding-bottom:0}
table.alerts td.runs{white-space:normal;min-width:10em}
section{overflow-x:auto}
td.summary{color:#374151}
th{background:#f9fafb;color:#374151;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.focus td{background:#fef3c7;font-weight:600}
code{font-family:Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.legend{font-size:12px;color:#374151;margin:2px 0 4px}
.legend span.sw{display:inline-block;width:14px;height:4px;margin:0 4px 2px 10px;vertical-align:middle}
.legend span.band{display:inline-block;width:12px;height:10px;margin:0 4px 0 10px;vertical-align:middle}
.sev-critical{color:#b91c1c;font-weight:600}.sev-warning{color:#b45309;font-weight:600}
.sev-info{color:#1d4ed8}
.muted{color:#6b7280;font-size:12px}
figure{margin:0 0 8px}svg{display:block;max-width:100%;height:auto}
";

pub(super) use crate::format::utc_seconds as utc;

fn opt_utc(ms: Option<TsMs>) -> String {
    ms.map_or_else(|| "-".into(), utc)
}

/// `7d`, `2h 5m`, `34m 59s`, `12s`: the two largest units.
fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let parts = [
        (s / 86_400, "d"),
        (s / 3600 % 24, "h"),
        (s / 60 % 60, "m"),
        (s % 60, "s"),
    ];
    let first = parts.iter().position(|p| p.0 > 0).unwrap_or(3);
    parts[first..(first + 2).min(4)]
        .iter()
        .enumerate()
        .filter(|(i, p)| *i == 0 || p.0 > 0)
        .map(|(_, (n, u))| format!("{n}{u}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl ReportData {
    pub(super) fn gpu_label(&self, gpu_id: i64) -> String {
        let multi = self.hosts().len() > 1;
        self.gpus.iter().find(|g| g.gpu_id == gpu_id).map_or_else(
            || "?".into(),
            |g| {
                if multi {
                    format!("{} GPU {}", g.host, g.inventory.index)
                } else {
                    format!("GPU {}", g.inventory.index)
                }
            },
        )
    }

    pub(super) fn hosts(&self) -> BTreeSet<&str> {
        self.gpus.iter().map(|g| g.host.as_str()).collect()
    }

    pub(super) fn focus_gpu(&self) -> Option<i64> {
        self.focus
            .as_ref()
            .filter(|f| f.scope != "host")
            .map(|f| f.gpu_id)
    }
}

/// The whole report.
pub fn render(d: &ReportData) -> Result<String, ReportError> {
    let hosts: Vec<&str> = d.hosts().into_iter().collect();
    let host_text = esc(&hosts.join(", "));
    let mut o = String::with_capacity(256 * 1024);
    let title = match &d.focus {
        Some(a) => format!("Alert #{} {} on {host_text}", a.id, esc(&a.rule)),
        None => format!("GPU report for {host_text}"),
    };
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} — gpuwatch</title><style>{CSS}</style></head><body>\n\
         <header><h1>{title}</h1><p>{} — {} UTC ({}) · generated {} UTC by gpuwatch {}</p></header>\n<main>\n",
        utc(d.from_ms),
        utc(d.to_ms),
        duration(d.to_ms - d.from_ms),
        utc(d.generated_ms),
        env!("CARGO_PKG_VERSION"),
    );
    overview(&mut o, d);
    if let Some(a) = &d.focus {
        focus(&mut o, d, a);
    }
    alerts(&mut o, d);
    usage(&mut o, d);
    gpu_charts(&mut o, d)?;
    training(&mut o, d)?;
    processes(&mut o, d);
    events(&mut o, d);
    o.push_str("</main></body></html>\n");
    Ok(o)
}

fn overview(o: &mut String, d: &ReportData) {
    o.push_str("<section><h2>Overview</h2><table><tr><th>GPU</th><th>Host</th><th>Name</th><th>UUID</th><th>Memory</th><th>Power limit</th><th>Held by (kubelet)</th></tr>\n");
    for g in &d.gpus {
        let cls = if d.focus_gpu() == Some(g.gpu_id) {
            " class=\"focus\""
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "<tr{cls}><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"wrap\">{}</td></tr>",
            g.inventory.index,
            esc(&g.host),
            esc(g.inventory.name.as_deref().unwrap_or("-")),
            esc(&g.inventory.uuid),
            g.inventory
                .memory_total_bytes
                .map_or("-".into(), |b| format!(
                    "{:.1} GiB",
                    b as f64 / f64::from(1u32 << 30)
                )),
            g.inventory
                .power_limit_mw
                .map_or("-".into(), |w| format!("{:.0} W", f64::from(w) / 1000.0)),
            esc(&held_by(d, g.gpu_id)),
        );
    }
    let src = match d.source {
        crate::store::window::Source::Raw => "raw samples",
        crate::store::window::Source::Rollups => "1-minute rollups",
    };
    let _ = writeln!(
        o,
        "</table><p class=\"muted\">Charts: averages per {} from {src}; times in UTC; shaded: alert periods \
         (red critical, amber warning, blue info; lighter while pending{}); dark red vertical lines: events.</p></section>",
        duration(d.step_ms),
        if d.focus.is_some() {
            "; full height: this report's alert; strips along the top: the other alerts"
        } else {
            ""
        }
    );
}

/// The pods the kubelet allocated a GPU to during the window, with when each began: "-" when
/// none is known (no kubelet, or the GPU was not allocated).
fn held_by(d: &ReportData, gpu_id: i64) -> String {
    let held: Vec<String> = d
        .holders
        .iter()
        .filter(|h| h.gpu_id == gpu_id)
        .map(|h| {
            let since = if h.from_ms > d.from_ms {
                format!(" from {}", utc(h.from_ms))
            } else {
                String::new()
            };
            let until = match h.to_ms {
                Some(t) if t < d.to_ms => format!(" until {}", utc(t)),
                _ => String::new(),
            };
            format!(
                "{}/{} ({}){since}{until}",
                h.holder.namespace, h.holder.pod, h.holder.container
            )
        })
        .collect();
    if held.is_empty() {
        "-".into()
    } else {
        held.join("; ")
    }
}

/// Where an alert's work ran, from its placement labels: `namespace/pod`, `slurm:JOB`, or
/// "-" when they are not known.
fn runs_in_labels(labels: &std::collections::BTreeMap<String, String>) -> String {
    let placement = crate::model::Placement {
        pod: labels.get("pod").cloned(),
        namespace: labels.get("namespace").cloned(),
        slurm_job: labels.get("slurm_job").and_then(|j| j.parse().ok()),
        ..crate::model::Placement::default()
    };
    runs_in(
        Some(&placement),
        labels.get("container").map(String::as_str),
    )
}

/// `namespace/pod (container)`, `slurm:JOB`, or "-".
fn runs_in(p: Option<&crate::model::Placement>, container: Option<&str>) -> String {
    match (p.and_then(crate::model::Placement::short), container) {
        (Some(at), Some(c)) if p.is_some_and(|p| p.pod.is_some()) => format!("{at} ({c})"),
        (Some(at), _) => at,
        (None, _) => "-".into(),
    }
}

/// `firing`, or `resolved (replayed)` for an episode `gpuwatch replay --save` found.
fn state_text(a: &AlertSpan) -> String {
    if a.replayed {
        format!("{} (replayed)", a.state)
    } else {
        a.state.clone()
    }
}

/// `warning`, or `warning (max critical)` for one that fired higher than it ended.
fn severity_text(a: &AlertSpan) -> String {
    let sev = a.severity.as_deref().unwrap_or("-");
    match a.max_severity.as_deref() {
        Some(max) if Some(max) != a.severity.as_deref() => format!("{sev} (max {max})"),
        _ => sev.to_string(),
    }
}

fn focus(o: &mut String, d: &ReportData, a: &AlertSpan) {
    let sev = a.severity.as_deref().unwrap_or("-");
    let _ = writeln!(
        o,
        "<section><h2>Alert #{} <span class=\"sev-{}\">{}</span> {}</h2><table>\
         <tr><th>State</th><td>{}</td><th>GPU</th><td>{} <code>{}</code></td></tr>\
         <tr><th>Active since (UTC)</th><td>{}</td><th>Fired</th><td>{}</td></tr>\
         <tr><th>Resolved</th><td>{}</td><th>Duration</th><td>{}</td></tr>\
         <tr><th>Runs in</th><td colspan=\"3\">{}</td></tr>\
         <tr><th>Summary</th><td colspan=\"3\" class=\"wrap\">{}</td></tr></table></section>",
        a.id,
        esc(sev),
        esc(sev),
        esc(&a.rule),
        esc(&state_text(a)),
        esc(&d.gpu_label(a.gpu_id)),
        esc(&a.gpu_uuid),
        utc(a.active_since_ms),
        opt_utc(a.fired_ms),
        opt_utc(a.resolved_ms),
        duration(a.end_ms() - a.active_since_ms),
        esc(&runs_in_labels(&a.labels)),
        esc(a.summary.as_deref().unwrap_or("-")),
    );
    if let Some(an) = &d.analysis {
        analysis(o, an);
    }
}

/// The focused alert's rule-based analysis: the headline and the causes with next steps.
fn analysis(o: &mut String, an: &crate::analysis::Analysis) {
    let _ = write!(
        o,
        "<section><h2>Analysis (rule-based)</h2><p class=\"wrap\">{}</p><ol>",
        esc(&an.headline)
    );
    for c in &an.causes {
        let _ = write!(o, "<li class=\"wrap\"><b>{}</b><ul>", esc(&c.cause));
        for b in &c.because {
            let _ = write!(o, "<li>because: {}</li>", esc(b));
        }
        for n in &c.next_steps {
            let _ = write!(o, "<li>next: {}</li>", esc(n));
        }
        o.push_str("</ul></li>");
    }
    o.push_str("</ol>");
    if let Some(s) = &an.incident_summary {
        let _ = write!(o, "<p class=\"wrap\">Incident: {}</p>", esc(s));
    }
    o.push_str("</section>\n");
}

fn alerts(o: &mut String, d: &ReportData) {
    o.push_str("<section><h2>Alerts in the window</h2>");
    if d.alerts.is_empty() {
        o.push_str("<p class=\"muted\">No alert was active in this window.</p></section>\n");
        return;
    }
    // The summary gets a row of its own, the table's whole width: beside nine columns that do
    // not wrap it was a narrow strip of very tall rows.
    o.push_str("<table class=\"alerts\"><tr><th>#</th><th>Rule</th><th>Severity</th><th>State</th><th>GPU</th><th>Runs in</th><th>Active since (UTC)</th><th>Fired</th><th>Resolved</th><th>Duration</th></tr>\n");
    for a in &d.alerts {
        let focused = d.focus.as_ref().is_some_and(|f| f.id == a.id);
        let cls = if focused { " class=\"focus\"" } else { "" };
        let sum_cls = if focused { "focus summary" } else { "summary" };
        let sev = a.severity.as_deref().unwrap_or("-");
        let _ = writeln!(
            o,
            "<tr{cls}><td>{}</td><td>{}</td><td class=\"sev-{}\">{}</td><td>{}</td><td>{}</td><td class=\"runs\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n<tr class=\"{sum_cls}\"><td></td><td colspan=\"9\" class=\"wrap summary\">{}</td></tr>",
            a.id,
            esc(&a.rule),
            esc(sev),
            esc(&severity_text(a)),
            esc(&state_text(a)),
            esc(&d.gpu_label(a.gpu_id)),
            esc(&runs_in_labels(&a.labels)),
            utc(a.active_since_ms),
            opt_utc(a.fired_ms),
            opt_utc(a.resolved_ms),
            duration(a.end_ms() - a.active_since_ms),
            esc(a.summary.as_deref().unwrap_or("")),
        );
    }
    o.push_str("</table></section>\n");
}

/// Who held the GPUs in the window and how much of it was idle (the usage ledger).
fn usage(o: &mut String, d: &ReportData) {
    let Some(u) = &d.usage else {
        return;
    };
    o.push_str("<section><h2>GPU usage</h2><p>GPU-hours of the window by holder, from the usage ledger: idle-held is gpu_idle's test, counted from when the GPU became idle; a shared GPU's time is split between its holders (docs/USAGE.md).</p>");
    let cost_head = u
        .currency
        .as_ref()
        .map_or(String::new(), |c| format!("<th>Cost {}</th>", esc(c)));
    let _ = writeln!(
        o,
        "<table><tr><th>Holder</th><th>GPUs</th><th>Held h</th><th>Busy h</th><th>Idle-held h</th><th>Idle</th><th>Longest idle</th><th>Unknown h</th>{cost_head}</tr>"
    );
    let line = |o: &mut String, name: &str, s: &crate::usage::summary::Sums| {
        let share = s
            .idle_share()
            .map_or("-".to_string(), |v| format!("{:.0} %", v * 100.0));
        let longest = if s.longest_idle_ms > 0 {
            duration(s.longest_idle_ms)
        } else {
            "-".into()
        };
        let cost = match (&u.currency, s.cost) {
            (Some(_), Some(c)) => format!("<td>{c:.2}</td>"),
            (Some(_), None) => "<td>-</td>".into(),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{share}</td><td>{longest}</td><td>{:.2}</td>{cost}</tr>",
            esc(name),
            s.gpus.len(),
            s.held / 3600.0,
            s.busy / 3600.0,
            s.idle_held / 3600.0,
            s.unknown / 3600.0
        );
    };
    for r in &u.rows {
        line(o, r.key.value().unwrap_or("(holder unknown)"), &r.sums);
    }
    line(o, "total", &u.total);
    o.push_str("</table></section>\n");
}

fn processes(o: &mut String, d: &ReportData) {
    o.push_str("<section><h2>Processes</h2>");
    let (observed, samples) = d.process_observation;
    if observed == 0 && samples > 0 {
        o.push_str(
            "<p class=\"muted\">Unknown: the process list was not observed in this window (a log \
             without <code>--query-compute-apps</code> rows, process sampling off, or another \
             PID namespace).</p>",
        );
    } else if observed < samples {
        let _ = write!(
            o,
            "<p class=\"muted\">The process list was observed in {observed} of {samples} samples.</p>"
        );
    }
    if d.processes.is_empty() {
        if observed > 0 {
            o.push_str("<p class=\"muted\">No process was seen on these GPUs in this window.</p>");
        }
        o.push_str("</section>\n");
        return;
    }
    o.push_str("<table><tr><th>GPU</th><th>PID</th><th>User</th><th>Name</th><th>Runs in</th><th>Command line (redacted)</th><th>Max memory</th><th>First seen (UTC)</th><th>Last seen</th></tr>\n");
    for p in &d.processes {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"wrap\"><code>{}</code></td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&d.gpu_label(p.gpu_id)),
            p.pid,
            esc(p.user.as_deref().unwrap_or("-")),
            esc(p.name.as_deref().unwrap_or("-")),
            esc(&runs_in(
                p.placement.as_ref(),
                p.placement.as_ref().and_then(|x| x.container.as_deref())
            )),
            esc(p.cmdline.as_deref().unwrap_or("-")),
            p.max_mem_bytes.map_or("-".into(), |b| format!(
                "{:.2} GiB",
                b as f64 / f64::from(1u32 << 30)
            )),
            utc(p.first_ms),
            utc(p.last_ms),
        );
    }
    o.push_str("</table></section>\n");
}

fn events(o: &mut String, d: &ReportData) {
    o.push_str("<section><h2>Events</h2>");
    if d.events.is_empty() {
        o.push_str("<p class=\"muted\">No XID or other event in this window.</p></section>\n");
        return;
    }
    o.push_str("<table><tr><th>Time (UTC)</th><th>GPU</th><th>Kind</th><th>Code</th><th>Message</th></tr>\n");
    for e in &d.events {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"wrap\">{}</td></tr>",
            utc(e.ts_ms),
            e.gpu_id
                .map_or_else(|| "host".into(), |g| esc(&d.gpu_label(g))),
            esc(&e.kind),
            e.code.map_or_else(|| "-".into(), |c| c.to_string()),
            esc(&event_text(&e.kind, e.code, e.message.as_deref())),
        );
    }
    o.push_str("</table></section>\n");
}

/// An event's message; an XID's also says what it means and what to do (the catalogue).
fn event_text(kind: &str, code: Option<i64>, message: Option<&str>) -> String {
    let message = message.unwrap_or("");
    match (kind, code) {
        ("xid", Some(c)) => crate::xid::event_text(c, message),
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration(7 * 86_400_000), "7d");
        assert_eq!(duration(2_099_000), "34m 59s");
        assert_eq!(duration(3_900_000), "1h 5m");
        assert_eq!(duration(0), "0s");
    }

    #[test]
    fn escapes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
