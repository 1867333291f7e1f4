//! The text rendering of `gpuwatch incident`: header, timeline, metric table, training
//! series, processes and events. A value that is unknown prints as `-`, never 0.

use std::time::Duration;

use super::{Stats, Training};
use crate::model::TsMs;
use crate::store::incident as q;
use crate::views::alerts::{dur, durations, render as table, short, subject};

impl Stats {
    pub(super) fn text(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        if self.n == self.missing {
            return format!("- ({} samples)", self.n);
        }
        format!("{} / {} / {}", f(self.min), f(self.avg), f(self.max))
    }
}

fn phase_text(p: &[(TsMs, f64)]) -> String {
    match (p.first(), p.last()) {
        (Some(a), Some(b)) => format!("{} → {} ({} points)", num(a.1), num(b.1), p.len()),
        _ => "no points".into(),
    }
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

/// Who held the GPU: (from, to or open, holder).
type Holder = (i64, Option<i64>, crate::model::GpuHolder);

pub(super) fn render(
    a: &q::AlertRow,
    notes: &[q::NotificationRow],
    metrics: &[(&str, &str, Stats, Stats)],
    (procs, (observed, samples), holders): (&[q::WindowProcess], (u64, u64), &[Holder]),
    (events, verdicts): (&[q::WindowEvent], &[Option<crate::xid::judge::Verdict>]),
    training: &[Training],
    window: Duration,
) -> String {
    let d = durations(a);
    let mut severity = a.severity.clone().unwrap_or_else(|| "no severity".into());
    if let Some(max) = a
        .max_severity
        .as_ref()
        .filter(|m| a.severity.as_ref() != Some(*m))
    {
        severity.push_str(&format!(", {max} at its worst"));
    }
    if a.replayed {
        severity.push_str(", replayed");
    }
    let mut o = format!(
        "alert {}: {} ({severity}) on {}, GPU {}{}\n",
        a.alert_id,
        a.rule,
        a.host,
        subject(a),
        a.gpu_uuid
            .as_deref()
            .map_or(String::new(), |u| format!(" ({u})")),
    );
    if let Some(s) = &a.summary {
        o.push_str(&format!("summary: {s}\n"));
    }
    for (from, to, h) in holders {
        o.push_str(&format!(
            "held by: pod {}/{} (container {}) from {}{}\n",
            h.namespace,
            h.pod,
            h.container,
            short(*from),
            to.map_or(String::new(), |t| format!(" to {}", short(t)))
        ));
    }
    o.push_str(&format!(
        "state now: {}{}\n\ntimeline (UTC):\n",
        a.state,
        if d.ongoing {
            " (still active at the newest stored sample)"
        } else {
            ""
        }
    ));
    let mut tl: Vec<(TsMs, u8, String)> = vec![(
        a.active_since_ms,
        0,
        "pending   the condition started to hold".into(),
    )];
    if let Some(f) = a.fired_ms {
        tl.push((
            f,
            1,
            format!("firing    after {} pending", dur(d.pending_ms)),
        ));
    }
    // A change of severity sorts before the notification it caused at the same time.
    for c in &a.severity_changes {
        let from = c.from.as_deref().unwrap_or("none");
        let summary = c
            .summary
            .as_deref()
            .map_or(String::new(), |s| format!(": {s}"));
        tl.push((c.at_ms, 2, format!("severity  {from} → {}{summary}", c.to)));
    }
    for n in notes {
        let err = n
            .last_error
            .as_deref()
            .map_or(String::new(), |e| format!(", last error: {e}"));
        let when = n
            .done_ms
            .map_or("not done yet".into(), |t| format!("done {}", short(t)));
        tl.push((
            n.created_ms,
            3,
            format!(
                "notify    {} ({}): {}, {} attempt(s), {when}{err}",
                n.receiver, n.kind, n.status, n.attempts
            ),
        ));
    }
    if let Some(r) = a.resolved_ms {
        let how = d.firing_ms.map_or(
            format!("without firing, after {} pending", dur(d.pending_ms)),
            |f| format!("after {} firing", dur(f)),
        );
        tl.push((r, 4, format!("resolved  {how}")));
    }
    tl.sort_by_key(|(t, k, _)| (*t, *k));
    for (t, _, line) in &tl {
        o.push_str(&format!("  {}  {line}\n", short(*t)));
    }
    if notes.is_empty() {
        o.push_str("  (no notifications recorded for this alert)\n");
    }

    let w = humantime::format_duration(window);
    o.push_str(&format!(
        "\nGPU metrics, min / avg / max ({w} before vs during):\n"
    ));
    let mut cells = vec![vec![
        "METRIC".to_string(),
        "UNIT".into(),
        "BEFORE".into(),
        "DURING".into(),
    ]];
    for (m, unit, b, du) in metrics {
        cells.push(vec![m.to_string(), unit.to_string(), b.text(), du.text()]);
    }
    o.push_str(&indent(&table(&cells)));

    o.push_str(&format!("\ntraining metrics ({w} before vs during):\n"));
    if training.is_empty() {
        o.push_str("  none joined to this GPU\n");
    }
    for t in training {
        let labels: Vec<String> = t.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        let change = match (t.last_change_before(), t.last_change()) {
            (_, None) => "no change in the window".to_string(),
            (Some(b), Some(c)) if b != c => {
                format!(
                    "last change before the start {}, last change {}",
                    short(b),
                    short(c)
                )
            }
            (_, Some(c)) => format!("last change {}", short(c)),
        };
        o.push_str(&format!(
            "  {}{{{}}}: before {}; during {}; {change}\n",
            t.name,
            labels.join(","),
            phase_text(&t.before),
            phase_text(&t.during)
        ));
    }

    o.push_str("\nprocesses on the GPU:\n");
    if observed == 0 && samples > 0 {
        o.push_str(
            "  unknown: the process list was not observed in this window (a log without \
             --query-compute-apps rows, process sampling off, or another PID namespace)\n",
        );
    } else if observed < samples {
        o.push_str(&format!(
            "  (the process list was observed in {observed} of {samples} samples)\n"
        ));
    }
    if procs.is_empty() {
        if observed > 0 {
            o.push_str("  none seen\n");
        }
    } else {
        let mut cells = vec![vec![
            "PID".to_string(),
            "NAME".into(),
            "USER".into(),
            "FIRST SEEN".into(),
            "LAST SEEN".into(),
            "MAX MEM (MiB)".into(),
            "POD / JOB".into(),
        ]];
        for p in procs {
            cells.push(vec![
                p.pid.to_string(),
                p.name.clone().unwrap_or_else(|| "-".into()),
                p.user.clone().unwrap_or_else(|| "-".into()),
                short(p.first_ms),
                short(p.last_ms),
                p.max_mem_bytes
                    .map_or("-".into(), |b| format!("{:.0}", b as f64 / 1_048_576.0)),
                p.placement
                    .as_ref()
                    .and_then(|x| x.short())
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
        o.push_str(&indent(&table(&cells)));
    }

    o.push_str("\nevents:\n");
    if events.is_empty() {
        o.push_str("  none\n");
    }
    for (e, verdict) in events.iter().zip(verdicts) {
        let whose = if e.on_gpu { "" } else { " (host)" };
        let times = if e.count > 1 {
            format!(" x{} until {}", e.count, short(e.last_ms))
        } else {
            String::new()
        };
        // An XID says what it means and what to do once, from the catalogue (docs/XID.md),
        // and whose fault it was judged.
        let text = match (e.kind.as_str(), e.code) {
            ("xid", Some(c)) => {
                let judged = verdict.as_ref().map_or(String::new(), |j| {
                    format!(" [{}: {}]", j.class.as_str(), j.reason)
                });
                format!(
                    "xid{whose}{times}: {}{judged}",
                    crate::xid::event_text(c, &e.message)
                )
            }
            _ => {
                let code = e.code.map_or(String::new(), |c| format!(" {c}"));
                format!("{}{code}{whose}: {}", e.kind, e.message)
            }
        };
        o.push_str(&format!("  {}  {text}\n", short(e.ts_ms)));
    }
    o
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}
