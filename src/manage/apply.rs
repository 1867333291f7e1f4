//! Carrying out a validated plan: each write audited before and after, reported as it ends.
//!
//! Invariants:
//! - No NVML write happens without its `attempted` audit row committed first; if the audit
//!   cannot be written, nothing more is written to any GPU.
//! - A step whose GPU already has the new value is not written (and so not audited).
//! - NO_PERMISSION stops everything: every other write would be refused the same way.
//!   A write that does not answer within the deadline is recorded as `unknown` and also
//!   stops everything: the driver may be hung. Any other failure is that GPU's setting's
//!   alone; the rest go on.

use std::sync::Arc;
use std::time::Duration;

use nvml_wrapper::Nvml;

use super::ManageError;
use super::nvml::{self, GpuId, Unanswered};
use super::plan::{GpuPlan, Step};
use super::who::Actor;
use crate::sampler::diagnosis::{self, Diagnosis};
use crate::store::Store;
use crate::store::audit::{Attempt, Outcome};

/// What a failed write's NVML error means: its code and cause, for the audit and the
/// command's output (a setter's NO_PERMISSION is about root, not the device files).
pub fn failure_text(d: &Diagnosis) -> String {
    let cause = if *d == diagnosis::NO_PERMISSION {
        "changing GPU settings needs root or CAP_SYS_ADMIN"
    } else {
        d.cause
    };
    format!("{}: {cause}", d.code)
}

/// How one step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepResult {
    Applied,
    /// Nothing to do: the GPU already had the value.
    Unchanged,
    Failed(Diagnosis),
    /// The write gave no answer in time (or could not be started); whether it took effect
    /// is unknown.
    Unknown(Unanswered),
}

/// One finished step.
#[derive(Debug, Clone)]
pub struct Done<'a> {
    pub gpu: &'a GpuId,
    pub step: &'a Step,
    pub result: StepResult,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Summary {
    pub applied: usize,
    pub unchanged: usize,
    /// `GPU n setting` of every write that failed or whose outcome is unknown.
    pub failed: Vec<String>,
    /// Why the run stopped early (NO_PERMISSION, a hung write).
    pub stopped: Option<String>,
}

/// Applies `plans` in order through `nvml`, auditing each write in `store` under `actor`;
/// `report` sees every step as it ends.
pub fn apply<'a>(
    nvml: &Arc<Nvml>,
    plans: &'a [GpuPlan],
    store: &mut Store,
    actor: &Actor,
    deadline: Duration,
    mut report: impl FnMut(&Done<'a>),
) -> Result<Summary, ManageError> {
    let mut summary = Summary::default();
    for plan in plans {
        for step in &plan.steps {
            let gpu = &plan.gpu;
            if step.unchanged() {
                summary.unchanged += 1;
                report(&Done {
                    gpu,
                    step,
                    result: StepResult::Unchanged,
                });
                continue;
            }
            let new = step.change.text();
            let id = store.audit_attempt(&Attempt {
                ts_ms: crate::clock::now_ms(),
                gpu_uuid: &gpu.uuid,
                gpu_index: gpu.index,
                who: &actor.name,
                uid: actor.uid,
                setting: step.change.setting().name(),
                old: step.old.as_deref(),
                new: &new,
            })?;
            let (index, change) = (gpu.index, step.change);
            let result = match nvml::call(nvml, deadline, move |n| nvml::write(n, index, change)) {
                Ok(Ok(())) => StepResult::Applied,
                Ok(Err(d)) => StepResult::Failed(d),
                Err(h) => StepResult::Unknown(h),
            };
            let (outcome, error) = match &result {
                StepResult::Applied | StepResult::Unchanged => (Outcome::Ok, None),
                StepResult::Failed(d) => (Outcome::Failed, Some(failure_text(d))),
                StepResult::Unknown(h) => (Outcome::Unknown, Some(h.to_string())),
            };
            store
                .audit_outcome(id, outcome, error.as_deref(), crate::clock::now_ms())
                .map_err(|source| ManageError::Outcome {
                    what: format!("GPU {} {}", gpu.index, step.change),
                    source,
                })?;
            report(&Done {
                gpu,
                step,
                result: result.clone(),
            });
            let what = format!("GPU {} {}", gpu.index, step.change.setting().label());
            match result {
                StepResult::Applied => summary.applied += 1,
                StepResult::Unchanged => {}
                StepResult::Failed(d) if d == diagnosis::NO_PERMISSION => {
                    summary.stopped = Some(format!(
                        "not permitted to change GPU settings ({what} refused with NVML \
                         NO_PERMISSION): run `gpuwatch gpu set` as root (sudo) or with \
                         CAP_SYS_ADMIN"
                    ));
                    summary.failed.push(what);
                    return Ok(summary);
                }
                StepResult::Failed(_) => summary.failed.push(what),
                StepResult::Unknown(h) => {
                    summary.stopped = Some(format!(
                        "{what}: {h}; stopped: check the GPU with `nvidia-smi` and \
                         `gpuwatch doctor` before trying again"
                    ));
                    summary.failed.push(what);
                    return Ok(summary);
                }
            }
        }
    }
    Ok(summary)
}
