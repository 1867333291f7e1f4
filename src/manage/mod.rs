//! GPU management: `gpuwatch gpu set` changes power limits, persistence and compute modes and
//! locked graphics/memory clocks through NVML, and audits every write.
//!
//! Owns: the settings and their one text form (`setting.rs`), the NVML calls of management
//! (`nvml.rs`: identities, current values, power-limit constraints, supported clocks, the
//! setters — each on its own thread with a deadline), turning a request into a validated
//! plan (`plan.rs`), carrying it out with the audit (`apply.rs`), and who the user is
//! (`who.rs`). The audit's schema is the store's (`store/audit.rs`); the command line is
//! `cli/gpu.rs`; the daemon's record of changes made by others is the sampler's
//! (`sampler/mod.rs` compares two inventory reads) and the store writer's.
//!
//! Invariants:
//! - Everything is validated before the first write: every selected GPU is read and every
//!   change checked against what that GPU accepts (NVML's power-limit constraints, its
//!   supported graphics and memory clocks); one problem anywhere means nothing is written,
//!   and every problem is reported, each with the allowed range.
//! - Never a shell: changes are NVML calls (no `nvidia-smi`), and NVML is called only here
//!   and under `src/sampler/`, through the [`crate::sampler::nvml::NvmlHandle`].
//! - Every attempted write is audited, whether it succeeded or not: its row is committed as
//!   `attempted` before the call and gets the outcome after it (`ok`, `failed` with NVML's
//!   code, `unknown` when the call did not answer in time).

pub mod apply;
pub mod nvml;
pub mod plan;
pub use crate::setting;
pub mod who;

use std::sync::Arc;
use std::time::Duration;

use nvml_wrapper::Nvml;

use self::nvml::{GpuId, Unanswered, call};
use self::plan::{GpuPlan, Selector, gpu_label};
use crate::sampler::diagnosis::Diagnosis;
use crate::setting::Change;
use crate::store::StoreError;

/// Why `gpu set` wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error("listing the GPUs: {0}")]
    Unanswered(#[from] Unanswered),
    #[error("cannot list the GPUs: {0}")]
    Gpus(Diagnosis),
    /// Validation failed: one line per problem.
    #[error("{}\nnothing was changed", .0.join("\n"))]
    Invalid(Vec<String>),
    #[error("cannot record the change in the audit ({0}); nothing more was written")]
    Audit(#[from] StoreError),
    #[error(
        "{what} was attempted but its outcome could not be recorded ({source}); its audit row \
         stays 'attempted'"
    )]
    Outcome { what: String, source: StoreError },
}

/// Reads every GPU `selectors` name and validates `changes` on each: the plans, in GPU
/// order, or every problem (nothing written either way).
pub fn prepare(
    nvml: &Arc<Nvml>,
    selectors: &[Selector],
    changes: &[Change],
    deadline: Duration,
) -> Result<Vec<GpuPlan>, ManageError> {
    let listed = call(nvml, deadline, self::nvml::gpus)?.map_err(ManageError::Gpus)?;
    let listed: Vec<Result<GpuId, String>> = listed
        .into_iter()
        .map(|g| g.map_err(|d| d.cause.to_string()))
        .collect();
    let gpus = plan::select(&listed, selectors).map_err(ManageError::Invalid)?;
    let mut plans = Vec::new();
    let mut problems = Vec::new();
    for gpu in gpus {
        let index = gpu.index;
        match call(nvml, deadline, move |n| self::nvml::current(n, index)) {
            Ok(Ok(cur)) => match plan::validate(&gpu, &cur, changes) {
                Ok(p) => plans.push(p),
                Err(mut p) => problems.append(&mut p),
            },
            Ok(Err(d)) => problems.push(format!("{}: cannot be read: {d}", gpu_label(&gpu))),
            Err(h) => problems.push(format!("{}: {h}", gpu_label(&gpu))),
        }
    }
    if problems.is_empty() {
        Ok(plans)
    } else {
        Err(ManageError::Invalid(problems))
    }
}
