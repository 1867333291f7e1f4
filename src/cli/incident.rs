//! `gpuwatch incident ID`: one alert's story. The timeline (started to hold = pending, fired,
//! each notification queued and delivered / dead / silenced / skipped, resolved), then what the
//! GPU did in the `--window` before the alert started and while it was active: a compact
//! summary per metric (min / avg / max before vs during), its processes, its events (XIDs) and
//! the training step/loss series joined to it (the rule evaluator's join rules).
//!
//! This file gathers the story and renders JSON; `incident/text.rs` renders it for people.
//!
//! Invariants: read-only; "before" is `[start - window, start)`, "during" is `[start, end]`
//! where end is the resolution (or, while live, the alert's last evaluation); a metric with no
//! value in a phase prints `-` / JSON null, never 0.

use std::time::Duration;

use anyhow::{Context, anyhow};
use rusqlite::Connection;
use serde_json::{Value, json};

use crate::analysis::facts::{Training, joined_training};
use crate::model::TsMs;
use crate::store::{self, incident as q, window};

mod explain;
mod text;

use super::{ConfigArgs, Failure, exit, fail};
use crate::views::alerts::{alert_json, durations, rfc3339};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    /// For people: the story, the metrics and the analysis as text (also accepted as `text`).
    #[value(alias = "text")]
    Table,
    /// One JSON document with the same facts.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct IncidentArgs {
    /// The alert id (first column of `gpuwatch alerts`).
    #[arg(value_name = "ID")]
    pub id: i64,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Output format: `table` (text) for people, `json` for programs.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// How far before the alert's start to look.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20m")]
    pub window: Duration,
    /// Also ask the language model of the config's `[analysis]` section to explain the
    /// incident from the same facts (docs/ANALYSIS.md); its answer is printed marked as
    /// machine-written, and the request is stored with the incident.
    #[arg(long)]
    pub explain: bool,
    /// Print the request last sent to the language model about this alert (exactly as
    /// sent), and its answer, instead of the incident.
    #[arg(long, conflicts_with = "explain")]
    pub show_prompt: bool,
}

/// GPU metrics summarised (their units are the window table's).
const METRICS: &[&str] = &[
    "util_gpu",
    "util_mem",
    "mem_used",
    "temp",
    "power",
    "clock_sm",
    "process_count",
];

/// min / avg / max of the values of one phase, and how many samples had none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Stats {
    n: u64,
    missing: u64,
    min: Option<f64>,
    avg: Option<f64>,
    max: Option<f64>,
}

impl Stats {
    fn of(points: &[(TsMs, Option<f64>)]) -> Self {
        let mut s = Self::default();
        let mut sum = 0.0;
        for (_, v) in points {
            s.n += 1;
            match v {
                Some(v) => {
                    s.min = Some(s.min.map_or(*v, |m| m.min(*v)));
                    s.max = Some(s.max.map_or(*v, |m| m.max(*v)));
                    sum += v;
                }
                None => s.missing += 1,
            }
        }
        let k = s.n - s.missing;
        s.avg = (k > 0).then(|| sum / k as f64);
        s
    }

    fn json(&self) -> Value {
        json!({"samples": self.n, "missing": self.missing, "min": self.min, "avg": self.avg, "max": self.max})
    }
}

impl From<window::Aggregate> for Stats {
    fn from(a: window::Aggregate) -> Self {
        Self {
            n: a.samples,
            missing: a.missing,
            min: a.min,
            avg: a.avg,
            max: a.max,
        }
    }
}

/// The summarised metrics of the alert's GPU, before (`[before_from, start)`) and during
/// (`[start, end]`), one query per phase.
fn gpu_metrics(
    conn: &Connection,
    gpu_id: i64,
    before_from: TsMs,
    start: TsMs,
    end: TsMs,
) -> anyhow::Result<Vec<(&'static str, &'static str, Stats, Stats)>> {
    let metrics = METRICS
        .iter()
        .map(|n| window::window_metric(n).ok_or_else(|| anyhow!("no window metric {n}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let before = window::aggregate(conn, gpu_id, &metrics, before_from, start)?;
    let during = window::aggregate(conn, gpu_id, &metrics, start, end.saturating_add(1))?;
    Ok(metrics
        .iter()
        .zip(before.into_iter().zip(during))
        .map(|(m, (b, d))| (m.name, m.unit, b.into(), d.into()))
        .collect())
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
    let window_ms = TsMs::try_from(args.window.as_millis()).unwrap_or(TsMs::MAX);
    let start = alert.active_since_ms;
    let end = start + alert.active_ms;
    let before_from = start.saturating_sub(window_ms);
    let ctx = || format!("reading alert {} from {}", args.id, cfg.database.display());

    if args.show_prompt {
        print!("{}", explain::show_prompt(&conn, args.id, args.format)?);
        return Ok(());
    }
    let facts = crate::analysis::Facts::gather(&conn, &alert, window_ms).with_context(ctx)?;
    let analysis = crate::analysis::analyse(&facts);
    let explanation = if args.explain {
        Some(explain::explain(&cfg, &alert, &analysis)?)
    } else {
        None
    };
    let notes = q::notifications(&conn, args.id).with_context(ctx)?;
    let mut metrics =
        gpu_metrics(&conn, alert.gpu_id, before_from, start, end).with_context(ctx)?;
    if let Some(pid) = alert.process_id {
        let before =
            q::process_mem(&conn, alert.gpu_id, pid, before_from, start - 1).with_context(ctx)?;
        let during = q::process_mem(&conn, alert.gpu_id, pid, start, end).with_context(ctx)?;
        metrics.insert(
            0,
            ("process_mem", "MiB", Stats::of(&before), Stats::of(&during)),
        );
    }
    let procs = q::processes(&conn, alert.gpu_id, before_from, end).with_context(ctx)?;
    let holders = q::holders(&conn, alert.gpu_id, before_from, end).with_context(ctx)?;
    let observed =
        q::process_observation(&conn, alert.gpu_id, before_from, end).with_context(ctx)?;
    let events = q::events(&conn, alert.gpu_id, before_from, end).with_context(ctx)?;
    // Each XID of the GPU judged from the stored evidence (docs/XID.md, "Whose fault").
    let verdicts: Vec<Option<crate::xid::judge::Verdict>> = events
        .iter()
        .map(|e| match (e.kind.as_str(), e.code, e.on_gpu) {
            ("xid", Some(code), true) => {
                let over = cfg.xid.override_of(code);
                if over.is_some_and(|o| o.class == crate::config::OverrideClass::Ignore) {
                    return Ok(None);
                }
                let forced = over.and_then(|o| o.class.judged());
                crate::store::xid_evidence::judged(&conn, alert.gpu_id, code, e.ts_ms, forced)
                    .map(Some)
            }
            _ => Ok(None),
        })
        .collect::<Result<_, _>>()
        .with_context(ctx)?;
    let training =
        joined_training(&conn, &alert, &procs, (before_from, start, end)).with_context(ctx)?;
    let fleet = fleet_of(&cfg, &alert, before_from, end);

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
                // Samples of the window whose process list was observed: where it was not,
                // processes are unknown (not "none").
                "process_list": {"observed_samples": observed.0, "samples": observed.1},
                "processes": procs.iter().map(|p| {
                    let mut v = json!({
                        "pid": p.pid, "name": p.name, "user": p.user,
                        "first_seen": rfc3339(p.first_ms), "last_seen": rfc3339(p.last_ms),
                        "max_mem_mib": p.max_mem_bytes.map(|b| b as f64 / 1_048_576.0),
                    });
                    crate::views::gpus::add_placement(&mut v, p.placement.as_ref());
                    v
                }).collect::<Vec<_>>(),
                // Who the kubelet said held the GPU during the window.
                "holders": holders.iter().map(|(from, to, h)| json!({
                    "pod": h.pod, "namespace": h.namespace, "container": h.container,
                    "from": rfc3339(*from), "to": to.map(rfc3339),
                })).collect::<Vec<_>>(),
                "events": events.iter().zip(&verdicts).map(|(e, verdict)| {
                    let mut v = json!({
                        "at": rfc3339(e.ts_ms), "at_ms": e.ts_ms, "gpu": e.on_gpu, "kind": e.kind,
                        "code": e.code, "message": e.message,
                        "count": e.count, "last": rfc3339(e.last_ms), "last_ms": e.last_ms,
                    });
                    // An XID's catalogue entry: meaning and action (null when not listed),
                    // and whose fault it was judged (null: host-wide, or an ignored code).
                    if let (true, Some(c)) = (e.kind == "xid", e.code) {
                        let entry = crate::xid::lookup(c);
                        v["xid_meaning"] = json!(entry.map(|x| x.meaning));
                        v["xid_action"] = json!(entry.map(|x| x.action.as_str()));
                        v["xid_class"] = json!(verdict.as_ref().map(|j| j.class.as_str()));
                        v["xid_reason"] = json!(verdict.as_ref().map(|j| j.reason.as_str()));
                    }
                    v
                }).collect::<Vec<_>>(),
                "training": training.iter().map(|t| json!({
                    "metric": t.name,
                    "labels": t.labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<serde_json::Map<_, _>>(),
                    "before": phase_json(&t.before), "during": phase_json(&t.during),
                    "last_change": t.last_change().map(rfc3339),
                    "last_change_before_start": t.last_change_before().map(rfc3339),
                })).collect::<Vec<_>>(),
                "analysis": analysis,
            });
            let mut doc = doc;
            if let Some(f) = &fleet {
                doc["fleet"] = f.json(&alert.host);
            }
            if let Some(e) = &explanation {
                doc["explanation"] = e.json();
            }
            serde_json::to_string_pretty(&doc).context("rendering JSON")? + "\n"
        }
        Format::Table => {
            let mut o = text::render(
                &alert,
                &notes,
                &metrics,
                (&procs, observed, &holders),
                (&events, &verdicts),
                &training,
                args.window,
            );
            if let Some(f) = &fleet {
                o.push_str(&format!("\nFleet: {}\n", f.line(&alert.host)));
            }
            o.push_str(&crate::analysis::text::render(&analysis));
            if let Some(e) = &explanation {
                o.push_str(&e.text());
            }
            o
        }
    };
    print!("{out}");
    Ok(())
}

/// A multi-node job's alert, placed in the job's stall across nodes (from the config's
/// Prometheus, where the nodes' fleet series are): `None` for an alert without a
/// `training_job` label.
enum FleetView {
    Timeline(crate::fleet::timeline::Timeline),
    Unavailable(String),
}

impl FleetView {
    fn line(&self, host: &str) -> String {
        match self {
            FleetView::Timeline(t) => t.line_for(host),
            FleetView::Unavailable(why) => why.clone(),
        }
    }

    fn json(&self, host: &str) -> Value {
        match self {
            FleetView::Timeline(t) => json!({
                "this_node": t.standing(host).as_str(),
                "line": t.line_for(host),
                "timeline": t.json(),
            }),
            FleetView::Unavailable(why) => json!({"unavailable": why}),
        }
    }
}

fn fleet_of(
    cfg: &crate::config::Config,
    alert: &q::AlertRow,
    from: TsMs,
    to: TsMs,
) -> Option<FleetView> {
    let labels: std::collections::BTreeMap<String, String> = alert
        .labels_json
        .as_deref()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    let job = labels.get("training_job")?;
    let unavailable = |why: String| {
        Some(FleetView::Unavailable(format!(
            "fleet data unavailable: {why}"
        )))
    };
    let Some(prom) = &cfg.prometheus else {
        return unavailable(
            "no [prometheus] in the config to ask for the job's other nodes".into(),
        );
    };
    let got = crate::fleet::timeline::fetch_blocking(
        prom,
        job,
        from,
        to.max(from + 60_000),
        cfg.http.metrics_names,
    );
    match got {
        Ok(t) => Some(FleetView::Timeline(t)),
        Err(e) => Some(FleetView::Unavailable(format!(
            "{:#}",
            anyhow::Error::new(e)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarised_metrics_are_window_metrics_with_their_units() {
        let units: Vec<(&str, &str)> = METRICS
            .iter()
            .map(|n| window::window_metric(n).map(|m| (m.name, m.unit)))
            .collect::<Option<_>>()
            .expect("every summarised metric is in the window table");
        assert_eq!(
            units,
            [
                ("util_gpu", "%"),
                ("util_mem", "%"),
                ("mem_used", "MiB"),
                ("temp", "°C"),
                ("power", "W"),
                ("clock_sm", "MHz"),
                ("process_count", ""),
            ]
        );
    }

    #[test]
    fn stats_of_points_and_of_an_aggregate_agree() {
        let p = [(0, Some(2.0)), (1, None), (2, Some(4.0))];
        let s = Stats::of(&p);
        assert_eq!(
            (s.n, s.missing, s.min, s.avg, s.max),
            (3, 1, Some(2.0), Some(3.0), Some(4.0))
        );
        assert_eq!(Stats::of(&[]), Stats::default());
        let metric = window::window_metric("temp").expect("temp");
        let a = window::Aggregate {
            metric,
            samples: 3,
            missing: 1,
            min: Some(2.0),
            avg: Some(3.0),
            max: Some(4.0),
        };
        assert_eq!(Stats::from(a), s);
    }
}
