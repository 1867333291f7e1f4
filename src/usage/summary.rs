//! The ledger's intervals summed by a dimension: GPU-hours held, busy, idle-held, unknown
//! and free, the idle share, the longest idle stretch and the cost — the document behind
//! `gpuwatch usage`, `/api/v1/usage`, the report's usage section and the digest.
//!
//! Invariants: a GPU shared by several holders counts each holder's share; time nobody held
//! (free) counts only by host, GPU or model; a holder no one could name is its own row,
//! never folded into a named one; no price configured: cost null, never 0.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Holder, State};
use crate::config::usage::UsageConfig;
use crate::model::TsMs;

/// One holder's part of one interval, clipped to the range read.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub host: String,
    pub gpu_uuid: String,
    pub gpu_index: Option<u32>,
    /// A MIG instance's GPU instance id (the GPU is `index/id`).
    pub gpu_instance_id: Option<u32>,
    pub model: Option<String>,
    pub from_ms: TsMs,
    pub to_ms: TsMs,
    pub state: State,
    pub share: f64,
    pub holder: Holder,
}

impl Interval {
    /// The holder's GPU-seconds in the interval.
    pub fn gpu_seconds(&self) -> f64 {
        (self.to_ms - self.from_ms).max(0) as f64 / 1000.0 * self.share
    }
}

/// What the rows are summed by (`gpuwatch usage --by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum By {
    #[default]
    Namespace,
    Pod,
    #[value(name = "training_job", alias = "training-job")]
    TrainingJob,
    User,
    Host,
    Gpu,
    Model,
    /// Each holder: `namespace/pod`, `slurm job N (user)`, `user U` (the digest's rows).
    Holder,
}

impl By {
    pub fn as_str(self) -> &'static str {
        match self {
            By::Namespace => "namespace",
            By::Pod => "pod",
            By::TrainingJob => "training_job",
            By::User => "user",
            By::Host => "host",
            By::Gpu => "gpu",
            By::Model => "model",
            By::Holder => "holder",
        }
    }

    /// Whether the rows are holders (free time belongs to no one).
    pub fn by_holder(self) -> bool {
        matches!(
            self,
            By::Namespace | By::Pod | By::TrainingJob | By::User | By::Holder
        )
    }

    fn key(self, i: &Interval) -> Option<String> {
        let h = &i.holder;
        match self {
            By::Namespace => h.namespace.clone(),
            By::Pod => h
                .pod
                .as_ref()
                .map(|p| format!("{}/{p}", h.namespace.as_deref().unwrap_or("-"))),
            By::TrainingJob => h.training_job.clone(),
            By::User => h.user.clone(),
            By::Host => Some(i.host.clone()),
            By::Gpu => Some(match (i.gpu_index, i.gpu_instance_id) {
                (Some(x), Some(gi)) => format!("{}:{x}/{gi}", i.host),
                (Some(x), None) => format!("{}:{x}", i.host),
                (None, _) => format!("{}:{}", i.host, i.gpu_uuid),
            }),
            By::Model => i.model.clone(),
            By::Holder => h.label(),
        }
    }
}

/// One row's sums (GPU-seconds).
#[derive(Debug, Clone, Default)]
pub struct Sums {
    pub held: f64,
    pub busy: f64,
    pub idle_held: f64,
    pub unknown: f64,
    pub free: f64,
    pub longest_idle_ms: i64,
    pub cost: Option<f64>,
    pub idle_cost: Option<f64>,
    pub gpus: std::collections::BTreeSet<String>,
}

/// A row's key: a value of the `--by` dimension, none (a named holder without it, e.g. a
/// Slurm job by namespace), or the holder no one could name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Value(String),
    None,
    UnknownHolder,
}

impl Key {
    pub fn value(&self) -> Option<&str> {
        match self {
            Key::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// A row of the document.
#[derive(Debug, Clone)]
pub struct Row {
    pub key: Key,
    pub sums: Sums,
}

/// The document: rows by idle GPU-hours, and their total.
#[derive(Debug, Clone)]
pub struct Usage {
    pub by: By,
    pub from: TsMs,
    pub to: TsMs,
    pub currency: Option<String>,
    pub rows: Vec<Row>,
    pub total: Sums,
}

fn add(s: &mut Sums, i: &Interval, secs: f64, rate: Option<f64>, priced: bool) {
    match i.state {
        State::Busy => s.busy += secs,
        State::IdleHeld => s.idle_held += secs,
        State::Unknown => s.unknown += secs,
        State::Free => s.free += secs,
    }
    let held = i.holder.is_known() && i.state != State::Free;
    if held {
        s.held += secs;
    }
    s.gpus.insert(i.gpu_uuid.clone());
    if priced && held {
        let r = rate.unwrap_or(0.0);
        *s.cost.get_or_insert(0.0) += secs / 3600.0 * r;
        if i.state == State::IdleHeld {
            *s.idle_cost.get_or_insert(0.0) += secs / 3600.0 * r;
        }
        s.idle_cost.get_or_insert(0.0);
    }
}

/// Sums `intervals` by `by` (the longest idle stretch joins a GPU's idle rows of the same
/// holder that touch, e.g. across midnight).
pub fn summarize(
    intervals: &[Interval],
    by: By,
    (from, to): (TsMs, TsMs),
    cfg: &UsageConfig,
) -> Usage {
    let priced = cfg.priced();
    let mut rows: BTreeMap<Key, Sums> = BTreeMap::new();
    let mut total = Sums::default();
    // (GPU, holder) → (start, end) of the idle stretch being measured, and its row.
    let mut stretch: BTreeMap<(String, Holder), (TsMs, TsMs, Key)> = BTreeMap::new();
    let longest =
        |rows: &mut BTreeMap<Key, Sums>, total: &mut Sums, (a, b, key): (TsMs, TsMs, Key)| {
            let len = b - a;
            if let Some(s) = rows.get_mut(&key) {
                s.longest_idle_ms = s.longest_idle_ms.max(len);
            }
            total.longest_idle_ms = total.longest_idle_ms.max(len);
        };
    for i in intervals {
        if by.by_holder() && i.state == State::Free {
            continue;
        }
        let key = if by.by_holder() && !i.holder.is_known() {
            Key::UnknownHolder
        } else {
            by.key(i).map_or(Key::None, Key::Value)
        };
        let secs = i.gpu_seconds();
        let rate = cfg.rate(i.model.as_deref());
        add(rows.entry(key.clone()).or_default(), i, secs, rate, priced);
        add(&mut total, i, secs, rate, priced);
        if i.state == State::IdleHeld {
            let id = (i.gpu_uuid.clone(), i.holder.clone());
            match stretch.get_mut(&id) {
                Some(s) if s.1 == i.from_ms => s.1 = i.to_ms,
                _ => {
                    if let Some(done) = stretch.insert(id, (i.from_ms, i.to_ms, key)) {
                        longest(&mut rows, &mut total, done);
                    }
                }
            }
        }
    }
    for (_, s) in stretch {
        longest(&mut rows, &mut total, s);
    }
    let mut rows: Vec<Row> = rows
        .into_iter()
        .map(|(key, sums)| Row { key, sums })
        .collect();
    rows.sort_by(|a, b| {
        b.sums
            .idle_held
            .total_cmp(&a.sums.idle_held)
            .then(b.sums.held.total_cmp(&a.sums.held))
            .then(a.key.cmp(&b.key))
    });
    Usage {
        by,
        from,
        to,
        currency: priced.then(|| cfg.currency.clone()),
        rows,
        total,
    }
}

fn hours(s: f64) -> f64 {
    (s / 3600.0 * 1e4).round() / 1e4
}

fn money(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |c| json!((c * 100.0).round() / 100.0))
}

impl Sums {
    pub fn idle_share(&self) -> Option<f64> {
        (self.held > 0.0).then(|| self.idle_held / self.held)
    }

    pub fn json(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("gpus".into(), json!(self.gpus.len()));
        m.insert("held_hours".into(), json!(hours(self.held)));
        m.insert("busy_hours".into(), json!(hours(self.busy)));
        m.insert("idle_held_hours".into(), json!(hours(self.idle_held)));
        m.insert("unknown_hours".into(), json!(hours(self.unknown)));
        m.insert("free_hours".into(), json!(hours(self.free)));
        m.insert(
            "idle_share".into(),
            self.idle_share()
                .map_or(Value::Null, |v| json!((v * 1e4).round() / 1e4)),
        );
        m.insert(
            "longest_idle_s".into(),
            json!(self.longest_idle_ms as f64 / 1000.0),
        );
        m.insert("cost".into(), money(self.cost));
        m.insert("idle_cost".into(), money(self.idle_cost));
        m
    }
}

impl Usage {
    pub fn json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut m = serde_json::Map::new();
                m.insert("key".into(), json!(r.key.value()));
                m.insert(self.by.as_str().into(), json!(r.key.value()));
                m.insert("holder_known".into(), json!(r.key != Key::UnknownHolder));
                m.extend(r.sums.json());
                Value::Object(m)
            })
            .collect();
        json!({
            "by": self.by.as_str(),
            "from": crate::format::rfc3339_ms(self.from),
            "to": crate::format::rfc3339_ms(self.to),
            "currency": self.currency,
            "rows": rows,
            "total": Value::Object(self.total.json()),
        })
    }
}
