//! `gpuwatch incident ID`: one alert's story. The timeline (started to hold = pending, fired,
//! each notification queued and delivered / dead / silenced / skipped, resolved), then what the
//! GPU did in the `--window` before the alert started and while it was active: a compact
//! summary per metric (min / avg / max before vs during), its processes, its events (XIDs) and
//! the training step/loss series joined to it (the rule evaluator's join rules).
//!
//! Invariants: read-only; "before" is `[start - window, start)`, "during" is `[start, end]`
//! where end is the resolution (or, while live, the alert's last evaluation); a metric with no
//! value in a phase prints `-` / JSON null, never 0.

use std::time::Duration;

use anyhow::{Context, anyhow};
use rusqlite::Connection;
use serde_json::{Value, json};

use crate::model::TsMs;
use crate::store::{self, history, incident as q, series};
use crate::training::{GpuRef, Join, gpus_for_series};

use super::alerts::{alert_json, dur, durations, render, rfc3339, short, subject};
use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct IncidentArgs {
    /// The alert id (first column of `gpuwatch alerts`).
    #[arg(value_name = "ID")]
    pub id: i64,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// How far before the alert's start to look.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20m")]
    pub window: Duration,
}

/// GPU metrics summarised, with their units.
const METRICS: &[(&str, &str)] = &[
    ("util_gpu", "%"),
    ("util_mem", "%"),
    ("mem_used", "MiB"),
    ("temp", "°C"),
    ("power", "W"),
    ("clock_sm", "MHz"),
];

/// min / avg / max of the values of one phase, and how many samples had none.
#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    n: usize,
    missing: usize,
    min: Option<f64>,
    max: Option<f64>,
    sum: f64,
}

impl Stats {
    fn of(points: &[(TsMs, Option<f64>)]) -> Self {
        let mut s = Self::default();
        for (_, v) in points {
            s.n += 1;
            match v {
                Some(v) => {
                    s.min = Some(s.min.map_or(*v, |m| m.min(*v)));
                    s.max = Some(s.max.map_or(*v, |m| m.max(*v)));
                    s.sum += v;
                }
                None => s.missing += 1,
            }
        }
        s
    }

    fn avg(&self) -> Option<f64> {
        let k = self.n - self.missing;
        (k > 0).then(|| self.sum / k as f64)
    }

    fn json(&self) -> Value {
        json!({"samples": self.n, "missing": self.missing, "min": self.min, "avg": self.avg(), "max": self.max})
    }

    fn text(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        if self.n == self.missing {
            return format!("- ({} samples)", self.n);
        }
        format!("{} / {} / {}", f(self.min), f(self.avg()), f(self.max))
    }
}

/// One training series' points in both phases.
struct Training {
    name: String,
    labels: Vec<(String, String)>,
    before: Vec<(TsMs, f64)>,
    during: Vec<(TsMs, f64)>,
}

impl Training {
    /// When the value last changed (within the window), if it did.
    fn last_change(&self) -> Option<TsMs> {
        let all: Vec<&(TsMs, f64)> = self.before.iter().chain(&self.during).collect();
        last_change(&all)
    }

    /// When the value last changed before the alert started (a hang: when the step stopped).
    fn last_change_before(&self) -> Option<TsMs> {
        let before: Vec<&(TsMs, f64)> = self.before.iter().collect();
        last_change(&before)
    }
}

fn last_change(points: &[&(TsMs, f64)]) -> Option<TsMs> {
    points
        .windows(2)
        .rev()
        .find(|w| w[0].1 != w[1].1)
        .map(|w| w[1].0)
}

fn phase_json(p: &[(TsMs, f64)]) -> Value {
    json!({
        "points": p.len(),
        "first": p.first().map(|x| x.1),
        "last": p.last().map(|x| x.1),
        "min": p.iter().map(|x| x.1).reduce(f64::min),
        "max": p.iter().map(|x| x.1).reduce(f64::max),
    })
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

pub fn run(args: IncidentArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let Some(alert) = q::alert(&conn, args.id)? else {
        let known = match q::alert_id_span(&conn)? {
            Some((a, b)) => format!("ids there run from {a} to {b}"),
            None => "it holds no alerts".into(),
        };
        return Err(fail(
            exit::USAGE,
            anyhow!(
                "no alert with id {} in {} ({known}); list them with `gpuwatch alerts`",
                args.id,
                cfg.database.display()
            ),
        ));
    };
    let window_ms = args.window.as_millis() as TsMs;
    let start = alert.active_since_ms;
    let end = start + alert.active_ms;
    let before_from = start - window_ms;
    let ctx = || format!("reading alert {} from {}", args.id, cfg.database.display());

    let notes = q::notifications(&conn, args.id).with_context(ctx)?;
    let mut metrics = Vec::new();
    for (m, unit) in METRICS {
        let before = series::metric_series(&conn, alert.gpu_id, m, before_from, start - 1)
            .with_context(ctx)?;
        let during = series::metric_series(&conn, alert.gpu_id, m, start, end).with_context(ctx)?;
        metrics.push((*m, *unit, Stats::of(&before), Stats::of(&during)));
    }
    let procs = q::processes(&conn, alert.gpu_id, before_from, end).with_context(ctx)?;
    let events = q::events(&conn, alert.gpu_id, before_from, end).with_context(ctx)?;
    let training = training(&conn, &alert, before_from, start, end).with_context(ctx)?;

    let out = match args.format {
        Format::Json => {
            let d = durations(&alert);
            let doc = json!({
                "alert": alert_json(&alert),
                "window": {"before_from": rfc3339(before_from), "start": rfc3339(start), "end": rfc3339(end),
                           "before_from_ms": before_from, "start_ms": start, "end_ms": end, "ongoing": d.ongoing},
                "notifications": notes.iter().map(|n| json!({
                    "notification_id": n.notification_id, "receiver": n.receiver, "kind": n.kind,
                    "status": n.status, "attempts": n.attempts, "last_error": n.last_error,
                    "created_ms": n.created_ms, "created": rfc3339(n.created_ms),
                    "done_ms": n.done_ms, "done": n.done_ms.map(rfc3339),
                })).collect::<Vec<_>>(),
                "metrics": metrics.iter().map(|(m, unit, b, d)| json!({
                    "metric": m, "unit": unit, "before": b.json(), "during": d.json(),
                })).collect::<Vec<_>>(),
                "processes": procs.iter().map(|p| json!({
                    "pid": p.pid, "name": p.name, "user": p.user,
                    "first_seen": rfc3339(p.first_ms), "last_seen": rfc3339(p.last_ms),
                    "max_mem_mib": p.max_mem_bytes.map(|b| b as f64 / 1_048_576.0),
                })).collect::<Vec<_>>(),
                "events": events.iter().map(|e| json!({
                    "at": rfc3339(e.ts_ms), "at_ms": e.ts_ms, "gpu": e.on_gpu, "kind": e.kind,
                    "code": e.code, "message": e.message,
                })).collect::<Vec<_>>(),
                "training": training.iter().map(|t| json!({
                    "metric": t.name,
                    "labels": t.labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<serde_json::Map<_, _>>(),
                    "before": phase_json(&t.before), "during": phase_json(&t.during),
                    "last_change": t.last_change().map(rfc3339),
                    "last_change_before_start": t.last_change_before().map(rfc3339),
                })).collect::<Vec<_>>(),
            });
            serde_json::to_string_pretty(&doc).context("rendering JSON")? + "\n"
        }
        Format::Text => text(
            &alert,
            &notes,
            &metrics,
            &procs,
            &events,
            &training,
            args.window,
        ),
    };
    print!("{out}");
    Ok(())
}

/// The training series of the alert's host that the join rules give to its GPU.
fn training(
    conn: &Connection,
    alert: &q::AlertRow,
    before_from: TsMs,
    start: TsMs,
    end: TsMs,
) -> Result<Vec<Training>, store::StoreError> {
    let gpus: Vec<GpuRef> = history::gpus(conn, Some(&alert.host))?
        .into_iter()
        .map(|g| GpuRef {
            index: g.inventory.index,
            uuid: g.inventory.uuid,
        })
        .collect();
    let mut out = Vec::new();
    for s in history::training_series(conn)? {
        if s.host != alert.host {
            continue;
        }
        let mine = match (gpus_for_series(&s.labels, &gpus), alert.gpu_index) {
            (Join::All, _) => true,
            (Join::Gpus(ix), Some(i)) => ix.iter().any(|g| i64::from(*g) == i),
            _ => false,
        };
        if !mine {
            continue;
        }
        let before = q::training_points(conn, s.series_id, before_from, start - 1)?;
        let during = q::training_points(conn, s.series_id, start, end)?;
        if before.is_empty() && during.is_empty() {
            continue;
        }
        out.push(Training {
            name: s.name,
            labels: s.labels,
            before,
            during,
        });
    }
    Ok(out)
}

fn text(
    a: &q::AlertRow,
    notes: &[q::NotificationRow],
    metrics: &[(&str, &str, Stats, Stats)],
    procs: &[q::WindowProcess],
    events: &[q::WindowEvent],
    training: &[Training],
    window: Duration,
) -> String {
    let d = durations(a);
    let mut o = format!(
        "alert {}: {} ({}) on {}, GPU {}{}\n",
        a.alert_id,
        a.rule,
        a.severity.as_deref().unwrap_or("no severity"),
        a.host,
        subject(a),
        a.gpu_uuid
            .as_deref()
            .map_or(String::new(), |u| format!(" ({u})")),
    );
    if let Some(s) = &a.summary {
        o.push_str(&format!("summary: {s}\n"));
    }
    o.push_str(&format!(
        "state now: {}{}\n\ntimeline (UTC):\n",
        a.state,
        if d.ongoing {
            " (still active at its last evaluation)"
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
            2,
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
        tl.push((r, 3, format!("resolved  {how}")));
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
    o.push_str(&indent(&render(&cells)));

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
    if procs.is_empty() {
        o.push_str("  none seen\n");
    } else {
        let mut cells = vec![vec![
            "PID".to_string(),
            "NAME".into(),
            "USER".into(),
            "FIRST SEEN".into(),
            "LAST SEEN".into(),
            "MAX MEM (MiB)".into(),
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
            ]);
        }
        o.push_str(&indent(&render(&cells)));
    }

    o.push_str("\nevents:\n");
    if events.is_empty() {
        o.push_str("  none\n");
    }
    for e in events {
        let code = e.code.map_or(String::new(), |c| format!(" {c}"));
        let whose = if e.on_gpu { "" } else { " (host)" };
        o.push_str(&format!(
            "  {}  {}{code}{whose}: {}\n",
            short(e.ts_ms),
            e.kind,
            e.message
        ));
    }
    o
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}
