//! A loaded, validated rule: what the rule file says, in typed form.
//!
//! Invariants: names are unique within a rule set and match `[a-z][a-z0-9_]*`; every
//! expression is checked for the rule's scope; `for`, `keep_firing_for` are ≥ 0; labels never
//! contain values that change (values belong in `values` and the templates).

use std::collections::BTreeMap;
use std::time::Duration;

use super::ast::Expr;
use super::template::Template;

/// What one alert instance of the rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One alert per GPU.
    Gpu,
    /// One alert per (GPU, process); metrics read the process's own series where one exists
    /// (`process_mem`) and the GPU's otherwise.
    Process,
    /// One alert per host (e.g. the training metrics source is unavailable).
    Host,
}

pub use crate::model::Severity;

/// What a condition with no data (or an evaluation error) means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Missing {
    /// Treat as false: the alert resolves (after `keep_firing_for`).
    Ok,
    /// Treat as true.
    Alerting,
    /// Leave the alert's state as it is (pending time does not advance).
    KeepLast,
}

/// Where a rule came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    pub file: String,
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub name: String,
    pub scope: Scope,
    /// Severity while `condition` holds.
    pub severity: Severity,
    pub condition: Expr,
    /// Optional escalation: while this also holds, the alert is `critical` (one alert, two
    /// severities — e.g. overheating near slowdown vs near shutdown).
    pub critical: Option<Expr>,
    /// Hysteresis: once firing, the alert stays active until this holds (default: until
    /// `condition` stops holding).
    pub resolve: Option<Expr>,
    pub for_: Duration,
    pub keep_firing_for: Duration,
    pub on_no_data: Missing,
    pub on_error: Missing,
    /// Static labels added to every alert of the rule.
    pub labels: BTreeMap<String, String>,
    /// Named expressions evaluated when the alert changes state, shown in the templates.
    pub values: Vec<(String, Expr)>,
    pub summary: Template,
    pub description: Option<Template>,
    /// Rules whose alerts on the same GPU are muted while this one is active.
    pub inhibits: Vec<String>,
    /// Rules whose alerts on the other GPUs of the host working for the same training job
    /// are muted while this one fires (the job's consequences of one GPU's fault).
    pub inhibits_job: Vec<String>,
    pub enabled: bool,
    /// `scope = "process"` with `fallback = "gpu"`: where no process of a GPU reports its
    /// own memory, the rule is evaluated once for the GPU as a whole (`process_mem` reads
    /// the GPU's `mem_used`; no pid).
    pub gpu_fallback: bool,
    pub origin: Origin,
}
