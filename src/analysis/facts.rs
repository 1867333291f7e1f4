//! Gathering the facts of one alert from the store: the alert, its GPU's raw samples in
//! the window, processes, holders, events, the training series joined to the GPU (the rule
//! evaluator's chooser), the alerts active around it on the same host, and the samples of
//! the GPUs of the alerts grouped with it (to tell which rank of a job stopped first).
//!
//! Invariants: read-only; "before" is `[start - window, start)`, "during" `[start, end]`;
//! what the store does not hold stays `None` / empty — nothing is filled in.

use std::collections::BTreeMap;

use rusqlite::Connection;

use crate::model::{GpuHolder, TsMs};
use crate::store::analysis::{GpuPoint, gpu_points};
use crate::store::incident::{self as q, AlertRow};
use crate::store::{self, history};
use crate::training::GpuRef;
use crate::training::join::{Choice, SeriesRef, choose};

/// The most of an alert's active time whose raw samples are read (an alert firing for days
/// is analysed from its first hour: its onset is what the analysis is about).
pub const DURING_CAP_MS: TsMs = 3_600_000;

/// Events up to this long after the start count even for an alert that ended sooner (an XID
/// the event thread hands over a tick or two after the counters that raised the alert).
pub const EVENTS_AFTER_START_MS: TsMs = 60_000;

/// How far around the alert other alerts of the host count as related.
pub const RELATED_SLACK_MS: TsMs = 10 * 60_000;

/// One training series' points in both phases.
#[derive(Debug, Clone, PartialEq)]
pub struct Training {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub before: Vec<(TsMs, f64)>,
    pub during: Vec<(TsMs, f64)>,
}

impl Training {
    /// When the value last changed (within the window), if it did.
    pub fn last_change(&self) -> Option<TsMs> {
        let all: Vec<&(TsMs, f64)> = self.before.iter().chain(&self.during).collect();
        last_change(&all)
    }

    /// When the value last changed before the alert started (a hang: when the step stopped).
    pub fn last_change_before(&self) -> Option<TsMs> {
        let before: Vec<&(TsMs, f64)> = self.before.iter().collect();
        last_change(&before)
    }

    pub fn points(&self) -> impl Iterator<Item = &(TsMs, f64)> {
        self.before.iter().chain(&self.during)
    }
}

fn last_change(points: &[&(TsMs, f64)]) -> Option<TsMs> {
    points
        .windows(2)
        .rev()
        .find(|w| w[0].1 != w[1].1)
        .map(|w| w[1].0)
}

/// Who held the GPU: (from, to or open, holder).
pub type Holder = (TsMs, Option<TsMs>, GpuHolder);

/// Another GPU's alert grouped with this one, and that GPU's samples up to its start.
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    pub alert: AlertRow,
    pub pod: Option<String>,
    pub points: Vec<GpuPoint>,
}

/// Everything the analysis reasons from.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub alert: AlertRow,
    /// The labels the receivers were given (placement included).
    pub labels: BTreeMap<String, String>,
    pub before_from: TsMs,
    pub start: TsMs,
    pub end: TsMs,
    /// The alert's GPU, `[before_from, min(end, start + DURING_CAP_MS)]`.
    pub points: Vec<GpuPoint>,
    pub procs: Vec<q::WindowProcess>,
    /// (samples whose process list was observed, samples).
    pub observed: (u64, u64),
    pub holders: Vec<Holder>,
    pub events: Vec<q::WindowEvent>,
    pub training: Vec<Training>,
    /// Other alerts of the host active within [`RELATED_SLACK_MS`] of this one.
    pub related: Vec<AlertRow>,
    /// The alert itself and the related alerts of the same rule and job, one per GPU, each
    /// with its GPU's samples in `[its start - window, its start]`.
    pub group: Vec<Peer>,
    /// The GPU's hardware health as `gpuwatch status` judges it at the host's newest sample
    /// (ECC, row remapping, clock events, PCIe link, lost), with the time of the GPU's newest
    /// sample; `None` for a host alert or a GPU without samples.
    pub health: Option<(Option<TsMs>, crate::gpu_health::Health)>,
}

impl Facts {
    /// Reads the facts of `alert` with `window` before its start.
    pub fn gather(
        conn: &Connection,
        alert: &AlertRow,
        window_ms: TsMs,
    ) -> Result<Facts, store::StoreError> {
        let start = alert.active_since_ms;
        let end = start + alert.active_ms;
        let before_from = start.saturating_sub(window_ms);
        let procs = q::processes(conn, alert.gpu_id, before_from, end)?;
        let training = joined_training(conn, alert, &procs, (before_from, start, end))?;
        let related: Vec<AlertRow> = q::alerts(
            conn,
            &q::AlertFilter {
                range: Some((start - RELATED_SLACK_MS, end + RELATED_SLACK_MS)),
                host: Some(alert.host.clone()),
                ..Default::default()
            },
        )?
        .into_iter()
        .filter(|a| a.alert_id != alert.alert_id)
        .collect();
        let labels = labels_of(alert);
        let own_jobs = training_jobs(conn, alert, &procs)?;
        let mut members = vec![alert];
        for r in related.iter().filter(|r| r.rule == alert.rule) {
            let jobs = training_jobs(conn, r, &[])?;
            if same_incident(alert, &own_jobs, r, &jobs) {
                members.push(r);
            }
        }
        let mut group = Vec::new();
        for a in members {
            if group.iter().any(|p: &Peer| p.alert.gpu_id == a.gpu_id) {
                continue;
            }
            let s = a.active_since_ms;
            group.push(Peer {
                alert: a.clone(),
                pod: labels_of(a).get("pod").cloned(),
                points: gpu_points(conn, a.gpu_id, s.saturating_sub(window_ms), s)?,
            });
        }
        Ok(Facts {
            health: health(conn, alert)?,
            labels,
            before_from,
            start,
            end,
            points: gpu_points(
                conn,
                alert.gpu_id,
                before_from,
                end.min(start + DURING_CAP_MS),
            )?,
            observed: q::process_observation(conn, alert.gpu_id, before_from, end)?,
            holders: q::holders(conn, alert.gpu_id, before_from, end)?,
            events: q::events(
                conn,
                alert.gpu_id,
                before_from,
                end.max(start + EVENTS_AFTER_START_MS),
            )?,
            procs,
            training,
            related,
            group,
            alert: alert.clone(),
        })
    }
}

/// How old a GPU's newest sample may be, behind its host's newest, and still be judged.
const HEALTH_STALE_MS: TsMs = 60_000;

/// The alert's GPU judged at its host's newest sample (deterministic: no wall clock).
fn health(
    conn: &Connection,
    alert: &AlertRow,
) -> Result<Option<(Option<TsMs>, crate::gpu_health::Health)>, store::StoreError> {
    let (Some(uuid), Some(last)) = (
        alert.gpu_uuid.as_deref(),
        store::read::last_sample_ts(conn, Some(&alert.host))?,
    ) else {
        return Ok(None);
    };
    Ok(store::read::latest_per_gpu(conn, Some(&alert.host), last)?
        .into_iter()
        .find(|r| r.inventory.uuid == uuid)
        .map(|r| {
            (
                r.latest.as_ref().map(|s| s.ts_ms),
                crate::gpu_health::judge(&r, HEALTH_STALE_MS),
            )
        }))
}

/// An alert's labels (`labels_json`), empty when it has none.
pub fn labels_of(a: &AlertRow) -> BTreeMap<String, String> {
    a.labels_json
        .as_deref()
        .and_then(|j| serde_json::from_str::<BTreeMap<String, serde_json::Value>>(j).ok())
        .map(|m| {
            m.into_iter()
                .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                .collect()
        })
        .unwrap_or_default()
}

/// The job an alert is about: its pod (namespace/pod), Slurm job or `job` label.
pub fn job_of(labels: &BTreeMap<String, String>) -> Option<String> {
    if let Some(p) = labels.get("pod") {
        return Some(match labels.get("namespace") {
            Some(ns) => format!("{ns}/{p}"),
            None => p.clone(),
        });
    }
    labels
        .get("slurm_job")
        .map(|j| format!("slurm job {j}"))
        .or_else(|| labels.get("job").cloned())
}

/// Whether `other` is the same incident as `a`: the same rule on the same host, and the
/// same training job (the `job` label of the series joined to each GPU) when both have one,
/// else the same pod (or Slurm job) when both name one (a job's hang on 8 GPUs is one
/// incident, not eight).
pub fn same_incident(a: &AlertRow, a_jobs: &[String], other: &AlertRow, o_jobs: &[String]) -> bool {
    if a.rule != other.rule || a.host != other.host {
        return false;
    }
    if !a_jobs.is_empty() && !o_jobs.is_empty() {
        return a_jobs.iter().any(|j| o_jobs.contains(j));
    }
    match (job_of(&labels_of(a)), job_of(&labels_of(other))) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// The training series the rules read for the alert's GPU (the evaluator's chooser, with
/// the pods the kubelet said held the host's GPUs when the alert began, else the one pod the
/// GPU's processes ran in); where the choice is ambiguous, every candidate.
pub fn joined_training(
    conn: &Connection,
    alert: &AlertRow,
    procs: &[q::WindowProcess],
    (before_from, start, end): (TsMs, TsMs, TsMs),
) -> Result<Vec<Training>, store::StoreError> {
    let series = chosen_series(conn, alert, procs)?;
    let mut out = Vec::new();
    for s in series {
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

/// The training series the evaluator's chooser joins to the alert's GPU.
pub fn chosen_series(
    conn: &Connection,
    alert: &AlertRow,
    procs: &[q::WindowProcess],
) -> Result<Vec<history::TrainingSeriesRow>, store::StoreError> {
    let start = alert.active_since_ms;
    let held = history::holders(conn, start - 1, start)?;
    let gpus: Vec<GpuRef> = history::gpus(conn, Some(&alert.host))?
        .into_iter()
        .map(|g| {
            let holder = held
                .iter()
                .filter(|h| h.gpu_id == g.gpu_id && h.from_ms <= start)
                .map(|h| (h.holder.namespace.clone(), h.holder.pod.clone()))
                .next_back();
            let own = (g.gpu_id == alert.gpu_id)
                .then(|| {
                    crate::attribution::shared_pod(
                        procs.iter().filter_map(|p| p.placement.as_ref()),
                    )
                    .map(|p| (p.namespace.to_string(), p.pod.to_string()))
                })
                .flatten();
            GpuRef {
                index: g.inventory.index,
                uuid: g.inventory.uuid,
                pod: holder.or(own),
            }
        })
        .collect();
    let series = history::training_series(conn)?;
    let refs: Vec<SeriesRef<'_>> = series
        .iter()
        .filter(|s| s.host == alert.host)
        .map(|s| SeriesRef {
            id: s.series_id,
            name: &s.name,
            labels: &s.labels,
        })
        .collect();
    let mut ids: Vec<i64> = Vec::new();
    if let Some(c) = alert.gpu_index.and_then(|i| {
        choose(&refs, &gpus)
            .into_iter()
            .find(|c| i64::from(c.index) == i)
    }) {
        for choice in [c.step, c.loss] {
            match choice {
                Choice::Joined { series, .. } => ids.push(series),
                Choice::Ambiguous { series } => ids.extend(series),
                Choice::Waiting { .. } | Choice::Nothing => {}
            }
        }
    }
    Ok(series
        .into_iter()
        .filter(|s| ids.contains(&s.series_id))
        .collect())
}

/// The `job` labels of the training series joined to the alert's GPU.
pub fn training_jobs(
    conn: &Connection,
    alert: &AlertRow,
    procs: &[q::WindowProcess],
) -> Result<Vec<String>, store::StoreError> {
    let mut jobs: Vec<String> = chosen_series(conn, alert, procs)?
        .into_iter()
        .filter_map(|s| {
            s.labels
                .into_iter()
                .find(|(k, _)| k == "job")
                .map(|(_, v)| v)
        })
        .collect();
    jobs.sort();
    jobs.dedup();
    Ok(jobs)
}
