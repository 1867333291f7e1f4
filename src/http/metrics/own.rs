//! The gpuwatch_* families: what only gpuwatch exports (training progress per GPU as the
//! rules join it, the live alerts like Prometheus's `ALERTS`, per-GPU sampling state) and
//! the daemon's self-metrics. Every name follows Prometheus's conventions (base units,
//! `_total` counters, snake_case labels), so `promtool check metrics` has nothing to say.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering::Relaxed;

use super::expo::{Family, Kind, Label, Labels, label_name};
use super::gpus::{Gpu, fresh_sample, id_label_names};
use crate::config::Config;
use crate::model::TsMs;
use crate::store::outbox::ReceiverBacklog;
use crate::store::read::{MetricErrorRow, TrainingSourceRow};
use crate::store::scrape::LiveAlert;
use crate::telemetry::Health;
use crate::telemetry::{BOUNDS, Histogram};
use crate::views::Joins;

pub struct Ctx<'a> {
    pub cfg: &'a Config,
    pub health: &'a Health,
    /// "Now" on the samples' clock (freshness, the outbox's ages: both in sample time).
    pub now_ms: TsMs,
    /// The wall clock (the sampling thread's tick ages, the remote-write queue's ages).
    pub wall_ms: TsMs,
    pub stale_after_ms: i64,
}

/// Adds `extra` labels after `base`: the same label with the same value once, a clash of
/// values renamed `exported_<name>` (as Prometheus does with target labels), reserved `__*`
/// names dropped.
fn merge(mut base: Vec<Label>, extra: impl IntoIterator<Item = (String, String)>) -> Vec<Label> {
    let mut names: BTreeSet<String> = base.iter().map(|(k, _)| k.to_string()).collect();
    for (k, v) in extra {
        if k.starts_with("__") {
            continue;
        }
        let mut k = label_name(&k);
        if base.iter().any(|(bk, bv)| *bk == k && *bv == v) {
            continue;
        }
        while names.contains(&k) {
            k = format!("exported_{k}");
        }
        names.insert(k.clone());
        base.push((k.into(), v));
    }
    base
}

pub fn gpu_state(ctx: &Ctx, gpus: &[Gpu]) -> Vec<Family> {
    let mut up = Family::new(
        "gpuwatch_gpu_up",
        Kind::Gauge,
        "1 when the GPU's newest sample is fresh and was read; 0 for a gap, a lost GPU or a stale sample.",
    );
    let mut lost = Family::new(
        "gpuwatch_gpu_lost",
        Kind::Gauge,
        "1 when the GPU has fallen off the bus (NVML: GPU is lost).",
    );
    let mut seen = Family::new(
        "gpuwatch_gpu_last_sample_timestamp_seconds",
        Kind::Gauge,
        "When the GPU's newest stored sample was taken (Unix time).",
    )
    .unit("seconds");
    let mut procs = Family::new(
        "gpuwatch_gpu_processes",
        Kind::Gauge,
        "Compute processes on the GPU (absent when the process list was not observed).",
    );
    for g in gpus {
        let (row, l) = (&g.status, &g.short);
        let fresh = fresh_sample(row, ctx.stale_after_ms);
        up.push(l.clone(), if fresh.is_some() { 1.0 } else { 0.0 });
        lost.push(l.clone(), if row.lost_at_ms.is_some() { 1.0 } else { 0.0 });
        if let Some(s) = &row.latest {
            seen.push(l.clone(), s.ts_ms as f64 / 1000.0);
        }
        if let Some(n) = fresh.and_then(|s| s.process_count) {
            procs.push(l.clone(), n as f64);
        }
    }
    vec![up, lost, seen, procs]
}

pub fn training(gpus: &[Gpu], joins: &Joins, latest: &HashMap<i64, (TsMs, f64)>) -> Vec<Family> {
    let mut step = Family::new(
        "gpuwatch_training_step",
        Kind::Gauge,
        "The training step of the job on this GPU (the series its rules read), with the series' labels.",
    );
    let mut loss = Family::new(
        "gpuwatch_training_loss",
        Kind::Gauge,
        "The training loss of the job on this GPU (the series its rules read), with the series' labels.",
    );
    for g in gpus {
        let (s, l) = joins.chosen(&g.status.host, g.status.inventory.index);
        for (id, fam) in [(s, &mut step), (l, &mut loss)] {
            let (Some(id), Some(series)) = (id, id.and_then(|i| joins.series(i))) else {
                continue;
            };
            if let Some((_, v)) = latest.get(&id) {
                let labels = merge(g.short.to_vec(), series.labels.iter().cloned());
                fam.push(labels, *v);
            }
        }
    }
    vec![step, loss]
}

pub fn alerts(ctx: &Ctx, alerts: &[LiveAlert]) -> Family {
    let mut fam = Family::new(
        "gpuwatch_alert",
        Kind::Gauge,
        "1 for every pending or firing alert (like Prometheus's ALERTS), with its state, severity and labels.",
    );
    let (uuid, host) = id_label_names(ctx.cfg.http.metrics_names);
    for a in alerts {
        let mut l: Vec<Label> = vec![
            ("alertname".into(), a.rule.clone()),
            ("alertstate".into(), a.state.clone()),
            ("state".into(), a.state.clone()),
            (host.into(), ctx.cfg.host.clone()),
        ];
        if let Some(s) = &a.severity {
            l.push(("severity".into(), s.clone()));
        }
        if let Some(i) = a.gpu_index {
            l.push(("gpu".into(), i.to_string()));
        }
        if let Some(u) = &a.gpu_uuid {
            l.push((uuid.into(), u.clone()));
        }
        if let Some(p) = a.pid {
            l.push(("pid".into(), p.to_string()));
        }
        // The stored identity labels are the ones above, under these names.
        let extra = a
            .labels
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "host" | "gpu" | "uuid" | "pid" | "alertname" | "severity"
                )
            })
            .cloned();
        fam.push(merge(l, extra), 1.0);
    }
    fam
}

fn histogram(name: &'static str, help: &'static str, h: &Histogram) -> Family {
    let mut f = Family::new(name, Kind::Histogram, help).unit("seconds");
    let (cumulative, sum, count) = h.snapshot();
    f.push_histogram(&[], &BOUNDS, &cumulative, sum, count);
    f
}

fn one(name: &'static str, kind: Kind, help: &'static str, v: f64) -> Family {
    let mut f = Family::new(name, kind, help);
    f.push(Vec::new(), v);
    f
}

const TOTAL: Kind = Kind::Counter { total: true };

pub fn daemon(
    ctx: &Ctx,
    errors: &[MetricErrorRow],
    backlog: &[ReceiverBacklog],
    sources: &[TrainingSourceRow],
    used_bytes: u64,
) -> Vec<Family> {
    let h = ctx.health;
    let mut out = vec![
        {
            let mut f = Family::new(
                "gpuwatch_build_info",
                Kind::Gauge,
                "The running gpuwatch's version.",
            );
            f.push(
                vec![("version".into(), env!("CARGO_PKG_VERSION").into())],
                1.0,
            );
            f
        },
        one(
            "gpuwatch_ticks",
            TOTAL,
            "Sampling ticks completed.",
            h.ticks.load(Relaxed) as f64,
        ),
        histogram(
            "gpuwatch_tick_duration_seconds",
            "How long a sampling tick took: every GPU read, processes resolved, handed to the store.",
            &h.tick_seconds,
        ),
        one(
            "gpuwatch_sample_deadlines_missed",
            TOTAL,
            "GPU samples that missed the tick's deadline (gaps).",
            h.gaps.load(Relaxed) as f64,
        ),
        one(
            "gpuwatch_store_write_errors",
            TOTAL,
            "Ticks the store writer could not take.",
            h.write_errors.load(Relaxed) as f64,
        ),
        one(
            "gpuwatch_gpus",
            Kind::Gauge,
            "GPUs the sampler watches.",
            h.gpus.load(Relaxed) as f64,
        ),
        histogram(
            "gpuwatch_rule_evaluation_duration_seconds",
            "How long one wake-up of the rules thread took: store slice, every rule, state and outbox saved.",
            &h.eval_seconds,
        ),
        one(
            "gpuwatch_rule_window_bytes",
            Kind::Gauge,
            "Bytes the rules' in-memory series hold (points, sums and summaries of every window).",
            h.rule_window_bytes.load(Relaxed) as f64,
        ),
        histogram(
            "gpuwatch_scrape_duration_seconds",
            "How long building a /metrics answer took.",
            &h.scrape_seconds,
        ),
        one(
            "gpuwatch_database_used_bytes",
            Kind::Gauge,
            "Bytes the database's pages hold (what max_db_size bounds).",
            used_bytes as f64,
        ),
        one(
            "gpuwatch_sqlite_memory_bytes",
            Kind::Gauge,
            "Heap bytes SQLite holds in this process: every connection's page cache, statements and schema.",
            sqlite_memory_used() as f64,
        ),
        one(
            "gpuwatch_database_size_limit_bytes",
            Kind::Gauge,
            "The database's size bound (max_db_size).",
            ctx.cfg.max_db_size as f64,
        ),
    ];
    let mut ages = Family::new(
        "gpuwatch_last_sample_age_seconds",
        Kind::Gauge,
        "Seconds since the last tick that sampled some GPU.",
    )
    .unit("seconds");
    if let Some(a) = h.sampled_age_ms(ctx.wall_ms) {
        ages.push(Vec::new(), a as f64 / 1000.0);
    }
    out.push(ages);

    let mut nvml = Family::new(
        "gpuwatch_nvml_errors",
        TOTAL,
        "Failed NVML reads, by GPU, read (function) and error (code).",
    );
    for e in errors {
        let l: Labels = Labels::from(vec![
            (
                "gpu".into(),
                e.gpu_index.map(|i| i.to_string()).unwrap_or_default(),
            ),
            (
                id_label_names(ctx.cfg.http.metrics_names).0.into(),
                e.error.gpu_uuid.clone(),
            ),
            ("function".into(), e.error.metric.clone()),
            ("code".into(), e.error.error.clone()),
        ]);
        nvml.push(l, e.error.count as f64);
    }
    out.push(nvml);

    let mut pending = Family::new(
        "gpuwatch_outbox_pending_notifications",
        Kind::Gauge,
        "Notifications waiting in the outbox, per receiver.",
    );
    let mut oldest = Family::new(
        "gpuwatch_outbox_oldest_pending_age_seconds",
        Kind::Gauge,
        "Age of the oldest notification waiting, per receiver.",
    )
    .unit("seconds");
    let mut dead = Family::new(
        "gpuwatch_outbox_dead_letters",
        Kind::Gauge,
        "Stored notifications a receiver refused permanently (not retried), per receiver.",
    );
    let mut receivers: Vec<&str> = ctx
        .cfg
        .notify
        .receivers
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    for b in backlog {
        if !receivers.contains(&b.receiver.as_str()) {
            receivers.push(&b.receiver);
        }
    }
    for r in receivers {
        let b = backlog.iter().find(|b| b.receiver == r);
        let l: Labels = Labels::from(vec![("receiver".into(), r.to_string())]);
        pending.push(l.clone(), b.map_or(0.0, |b| b.pending as f64));
        dead.push(l.clone(), b.map_or(0.0, |b| b.dead as f64));
        if let Some(o) = b.and_then(|b| b.oldest_pending_ms) {
            oldest.push(l, ((ctx.now_ms - o).max(0)) as f64 / 1000.0);
        }
    }
    out.extend([pending, oldest, dead]);

    let mut up = Family::new(
        "gpuwatch_training_source_up",
        Kind::Gauge,
        "1 when the last poll of the training metrics source succeeded, per role (step, loss).",
    );
    let mut fails = Family::new(
        "gpuwatch_training_source_consecutive_failures",
        Kind::Gauge,
        "Failed polls of the training metrics source since its last success, per role.",
    );
    let mut ok_at = Family::new(
        "gpuwatch_training_source_last_success_timestamp_seconds",
        Kind::Gauge,
        "When the training metrics source last answered, per role (Unix time).",
    )
    .unit("seconds");
    for s in sources {
        let l: Labels = Labels::from(vec![("role".into(), s.role.clone())]);
        up.push(
            l.clone(),
            if s.consecutive_failures == 0 {
                1.0
            } else {
                0.0
            },
        );
        fails.push(l.clone(), s.consecutive_failures as f64);
        if let Some(t) = s.last_success_ms {
            ok_at.push(l, t as f64 / 1000.0);
        }
    }
    out.extend([up, fails, ok_at]);
    out
}

/// The remote-write queue and counters of each configured target (and of targets no longer
/// configured that still hold a queue).
pub fn remote_write(ctx: &Ctx, backlog: &[crate::store::remote_write::Backlog]) -> Vec<Family> {
    let mut pending = Family::new(
        "gpuwatch_remote_write_pending_requests",
        Kind::Gauge,
        "Remote-write requests queued for the target (one snapshot each).",
    );
    let mut pending_samples = Family::new(
        "gpuwatch_remote_write_pending_samples",
        Kind::Gauge,
        "Samples in the target's queued requests.",
    );
    let mut oldest = Family::new(
        "gpuwatch_remote_write_oldest_pending_age_seconds",
        Kind::Gauge,
        "Age of the oldest queued request.",
    )
    .unit("seconds");
    let mut sent = Family::new(
        "gpuwatch_remote_write_sent_samples",
        TOTAL,
        "Samples the target accepted.",
    );
    let mut refused = Family::new(
        "gpuwatch_remote_write_refused_samples",
        TOTAL,
        "Samples the target refused for good (4xx), not retried.",
    );
    let mut dropped = Family::new(
        "gpuwatch_remote_write_dropped_samples",
        TOTAL,
        "Samples dropped because the queue was full (max_queue).",
    );
    let mut failed = Family::new(
        "gpuwatch_remote_write_failed_attempts",
        TOTAL,
        "Attempts that failed and were retried (5xx, 429, timeouts, refused connections).",
    );
    let mut ok_at = Family::new(
        "gpuwatch_remote_write_last_success_timestamp_seconds",
        Kind::Gauge,
        "When the target last accepted a request (Unix time).",
    )
    .unit("seconds");
    let mut names: Vec<&str> = ctx
        .cfg
        .remote_write
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    for b in backlog {
        if !names.contains(&b.target.as_str()) && b.pending_requests > 0 {
            names.push(&b.target);
        }
    }
    for name in names {
        let b = backlog
            .iter()
            .find(|b| b.target == name)
            .cloned()
            .unwrap_or_default();
        let l: Labels = Labels::from(vec![("target".into(), name.to_string())]);
        pending.push(l.clone(), b.pending_requests as f64);
        pending_samples.push(l.clone(), b.pending_samples as f64);
        if let Some(o) = b.oldest_pending_ms {
            oldest.push(l.clone(), ((ctx.wall_ms - o).max(0)) as f64 / 1000.0);
        }
        sent.push(l.clone(), b.sent_samples as f64);
        refused.push(l.clone(), b.refused_samples as f64);
        dropped.push(l.clone(), b.dropped_samples as f64);
        failed.push(l.clone(), b.failed_attempts as f64);
        if let Some(t) = b.last_success_ms {
            ok_at.push(l, t as f64 / 1000.0);
        }
    }
    vec![
        pending,
        pending_samples,
        oldest,
        sent,
        refused,
        dropped,
        failed,
        ok_at,
    ]
}

/// SQLite's own count of the heap it holds (all connections of the process).
fn sqlite_memory_used() -> i64 {
    // SAFETY: sqlite3_memory_used takes no arguments and only reads SQLite's memory
    // statistics under its own mutex; it may be called from any thread at any time.
    unsafe { rusqlite::ffi::sqlite3_memory_used() }
}
