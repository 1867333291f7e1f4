//! The fleet's series (docs/FLEET.md): each GPU's training job, its last progress, its step
//! rate and, while stalled, when its stall began — what the shipped fleet rules
//! (`examples/prometheus/gpuwatch-fleet-rules.yml`) join across nodes.
//!
//! Invariants: a series only while its value is known (a GPU without a known job exports
//! none of them); per GPU at most 3 (`job_info`, `last_progress`, and `stall_start` while
//! stalled), per job on the node 4 (`steps_per_second` and the means of SM clock,
//! utilisation and power: what finds a straggler host without a GPU-level join); label
//! names follow `[http] metrics_names`.

use crate::config::MetricNames;
use crate::fleet::Fleet;

use super::expo::{Family, Kind, Label};
use super::gpus::id_label_names;

pub fn families(fleet: &Fleet, host: &str, names: MetricNames) -> Vec<Family> {
    let mut info = Family::new(
        "gpuwatch_job_info",
        Kind::Gauge,
        "1 for every GPU working for a training job: the job's name across nodes (training_job) and where it came from (job_source: slurm, label, owner, controller, pod).",
    );
    let mut progress = Family::new(
        "gpuwatch_training_last_progress_timestamp_seconds",
        Kind::Gauge,
        "When the training step joined to this GPU last advanced (unix seconds, the node's clock).",
    );
    let mut rate = Family::new(
        "gpuwatch_training_steps_per_second",
        Kind::Gauge,
        "The job's training steps per second as this node sees them (over the last 5 minutes).",
    );
    let mut clock = Family::new(
        "gpuwatch_job_gpu_sm_clock_hertz",
        Kind::Gauge,
        "The mean over the job's GPUs on this node of their SM clock over the last 5 minutes.",
    );
    let mut util = Family::new(
        "gpuwatch_job_gpu_utilization_ratio",
        Kind::Gauge,
        "The mean over the job's GPUs on this node of their utilisation over the last 5 minutes (0-1).",
    );
    let mut power = Family::new(
        "gpuwatch_job_gpu_power_watts",
        Kind::Gauge,
        "The mean over the job's GPUs on this node of their power draw over the last 5 minutes.",
    );
    let mut stall = Family::new(
        "gpuwatch_gpu_stall_start_timestamp_seconds",
        Kind::Gauge,
        "While the GPU's training step is stalled: when the GPU's own activity entered the stall (unix seconds, from the node's 1-s samples); signature idle or spinning.",
    );
    let (uuid, host_label) = id_label_names(names);
    for g in &fleet.gpus {
        let Some(job) = &g.job else { continue };
        let ids: Vec<Label> = vec![
            ("training_job".into(), job.name.clone()),
            (host_label.into(), host.to_string()),
            ("gpu".into(), g.index.to_string()),
            (uuid.into(), g.uuid.clone()),
        ];
        let mut l = ids.clone();
        l.insert(1, ("job_source".into(), job.source.as_str().to_string()));
        if let Some((ns, pod)) = &g.pod {
            l.push(("pod".into(), pod.clone()));
            l.push(("namespace".into(), ns.clone()));
        }
        if let Some(j) = g.slurm_job {
            l.push(("slurm_job".into(), j.to_string()));
        }
        info.push(l, 1.0);
        if let Some(t) = g.last_progress_ms {
            progress.push(ids.clone(), t as f64 / 1000.0);
        }
        if let Some((t, sig)) = g.stall {
            let mut l = ids.clone();
            l.push(("signature".into(), sig.as_str().to_string()));
            stall.push(l, t as f64 / 1000.0);
        }
    }
    for j in &fleet.jobs {
        let l: Vec<Label> = vec![
            ("training_job".into(), j.job.name.clone()),
            (host_label.into(), host.to_string()),
        ];
        for (fam, v) in [
            (&mut rate, j.steps_per_second),
            (&mut clock, j.sm_clock_hz),
            (&mut util, j.utilization_ratio),
            (&mut power, j.power_w),
        ] {
            if let Some(v) = v {
                fam.push(l.clone(), v);
            }
        }
    }
    vec![info, progress, stall, rate, clock, util, power]
}
