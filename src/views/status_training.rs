//! `status`'s training section: which stored training series each GPU's rules read, and why
//! (the rule evaluator's own chooser, `training::join::choose`, over the same labels and the
//! pods `status` shows).
//!
//! Invariant: a host without any training series shows nothing (JSON `training: null`), not
//! "no series"; a GPU whose series cannot be chosen says why, never a guessed series.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::store::StoreError;
use crate::store::history::{self, TrainingSeriesRow};
use crate::store::read::GpuStatusRow;
use crate::training::join::{Choice, GpuChoice, GpuRef, SeriesRef, choose};

/// The choices for every GPU of `rows`, per host.
pub struct Joins {
    series: Vec<TrainingSeriesRow>,
    /// (host, GPU index) → the GPU as the join saw it and what it chose.
    chosen: BTreeMap<(String, u32), (GpuRef, GpuChoice)>,
}

impl Joins {
    pub fn read(conn: &rusqlite::Connection, rows: &[GpuStatusRow]) -> Result<Joins, StoreError> {
        let series = history::training_series(conn)?;
        let mut chosen = BTreeMap::new();
        let hosts: std::collections::BTreeSet<&str> =
            rows.iter().map(|r| r.host.as_str()).collect();
        for host in hosts {
            let refs: Vec<GpuRef> = rows
                .iter()
                .filter(|r| r.host == host)
                .map(|r| GpuRef {
                    index: r.inventory.index,
                    uuid: r.inventory.uuid.clone(),
                    pod: r
                        .pod()
                        .map(|p| (p.namespace.to_string(), p.pod.to_string())),
                })
                .collect();
            let of_host = series_refs(&series, host);
            if of_host.is_empty() {
                continue;
            }
            for (g, c) in refs.iter().zip(choose(&of_host, &refs)) {
                chosen.insert((host.to_string(), g.index), (g.clone(), c));
            }
        }
        Ok(Joins { series, chosen })
    }

    /// A GPU's `training` object: `{"step": …, "loss": …}`, or null when its host has no
    /// training series.
    pub fn json(&self, host: &str, index: u32) -> Value {
        let Some((g, c)) = self.chosen.get(&(host.to_string(), index)) else {
            return Value::Null;
        };
        let all = series_refs(&self.series, host);
        let one = |choice: &Choice| {
            json!({
                "series": shown(choice, &all),
                "series_id": choice.series(),
                "by": match choice {
                    Choice::Joined { basis, .. } => Some(basis.name()),
                    _ => None,
                },
                "why": choice.why(g, &all),
            })
        };
        json!({ "step": one(&c.step), "loss": one(&c.loss) })
    }

    /// The (step, loss) series the GPU's rules read, when they could be chosen.
    pub fn chosen(&self, host: &str, index: u32) -> (Option<i64>, Option<i64>) {
        self.chosen
            .get(&(host.to_string(), index))
            .map_or((None, None), |(_, c)| (c.step.series(), c.loss.series()))
    }

    /// The training job a GPU of `row` works for, named as on every node of the job
    /// (`crate::attribution::job`: its processes' Slurm job, `job_label` on its step series,
    /// its pod).
    pub fn training_job(
        &self,
        row: &GpuStatusRow,
        job_label: Option<&str>,
    ) -> Option<crate::attribution::job::TrainingJob> {
        let (step, _) = self.chosen(&row.host, row.inventory.index);
        crate::attribution::job::training_job(&crate::attribution::job::JobEvidence {
            slurm_job: crate::attribution::shared_slurm_job(
                row.processes.iter().filter_map(|p| p.placement.as_ref()),
            ),
            pod: row.pod().map(|p| p.pod),
            pod_owner: row.holder.as_ref().and_then(|h| h.job.as_deref()),
            step_labels: step
                .and_then(|id| self.series(id))
                .map(|s| s.labels.as_slice()),
            job_label,
        })
    }

    /// A stored series by id: its name and labels.
    pub fn series(&self, id: i64) -> Option<&TrainingSeriesRow> {
        self.series.iter().find(|s| s.series_id == id)
    }

    /// The table section: one line per GPU and role, empty when no host has training series.
    pub fn table(&self) -> String {
        if self.chosen.is_empty() {
            return String::new();
        }
        let multi_host = self
            .chosen
            .keys()
            .map(|(h, _)| h)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1;
        let mut out = String::from("\nTraining series the rules read:\n");
        for ((host, index), (g, c)) in &self.chosen {
            let all = series_refs(&self.series, host);
            let gpu = if multi_host {
                format!("{host} GPU {index}")
            } else {
                format!("GPU {index}")
            };
            if c.step == Choice::Nothing && c.loss == Choice::Nothing {
                out.push_str(&format!("  {gpu}: no training series applies\n"));
                continue;
            }
            for (role, choice) in [("step", &c.step), ("loss", &c.loss)] {
                out.push_str(&format!(
                    "  {gpu} {role}: {}: {}\n",
                    shown(choice, &all).as_deref().unwrap_or("-"),
                    choice.why(g, &all)
                ));
            }
        }
        out
    }
}

/// The chosen series as PromQL would write it (`None`: no series was chosen).
fn shown(choice: &Choice, all: &[SeriesRef]) -> Option<String> {
    let id = choice.series()?;
    all.iter().find(|s| s.id == id).map(SeriesRef::display)
}

/// The stored series of `host`, as the chooser takes them (`status` and `incident`).
pub(super) fn series_refs<'a>(series: &'a [TrainingSeriesRow], host: &str) -> Vec<SeriesRef<'a>> {
    series
        .iter()
        .filter(|s| s.host == host)
        .map(|s| SeriesRef {
            id: s.series_id,
            name: &s.name,
            labels: &s.labels,
        })
        .collect()
}
