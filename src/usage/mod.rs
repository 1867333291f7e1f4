//! The usage ledger (docs/USAGE.md): per GPU (a MIG instance is a GPU of its own) and
//! interval, who held it — pod, namespace and container, Slurm job, user, training job — and
//! how it was used: `busy`, `idle_held`, `free` or `unknown`.
//!
//! The rule evaluator observes each GPU at each evaluation time (`alerts::usage`); the
//! [`ledger::Ledger`] turns the observations into interval rows (a new row when a holder or
//! the state changes, and at each UTC midnight) and the `/metrics` counters. This module is
//! vocabulary below the store, which writes the rows.
//!
//! Invariants:
//! - Idle-held is `gpu_idle`'s own activity test (the loaded rule's, else the shipped one's)
//!   and counts from when the GPU became idle: the test's window before it first held, as
//!   the alert's `{active}` does; never before the current holders took the GPU.
//! - Unknown is not busy, not free: no fresh sample, no holder known, or no activity metric.
//! - A GPU with several holders (time-slicing) gives each the same share of its time.
//! - The ledger is fed only by the evaluator, in time order: the daemon and an import's
//!   accounting pass build the same rows from the same samples.

pub mod digest;
pub mod ledger;
pub mod summary;

pub use ledger::{Counter, GpuLabel, Ledger, Observation, Op, OpenRow};

/// How a GPU was used over an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Held, and working.
    Busy,
    /// Held, and idle by `gpu_idle`'s test.
    IdleHeld,
    /// Nobody held it.
    Free,
    /// No fresh sample, no holder known, or held with no activity metric to judge.
    Unknown,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Busy => "busy",
            State::IdleHeld => "idle_held",
            State::Free => "free",
            State::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        [State::Busy, State::IdleHeld, State::Free, State::Unknown]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// Who held a GPU. Every field absent: a holder that could not be named (a process seen
/// without its user or container, a GPU held by memory with its processes not observed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Holder {
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub slurm_job: Option<String>,
    pub user: Option<String>,
    pub training_job: Option<String>,
}

impl Holder {
    /// Whether anything names the holder.
    pub fn is_known(&self) -> bool {
        self.fields().iter().any(|(_, v)| v.is_some())
    }

    /// How people name the holder: `namespace/pod`, `slurm job 777 (carol)`, `container c`,
    /// `user dave`; `None` when nothing names it.
    pub fn label(&self) -> Option<String> {
        let by = |u: &Option<String>| u.as_ref().map_or(String::new(), |u| format!(" ({u})"));
        if let Some(p) = &self.pod {
            return Some(format!("{}/{p}", self.namespace.as_deref().unwrap_or("-")));
        }
        if let Some(j) = &self.slurm_job {
            return Some(format!("slurm job {j}{}", by(&self.user)));
        }
        if let Some(c) = &self.container {
            return Some(format!("container {c}{}", by(&self.user)));
        }
        self.user.as_ref().map(|u| format!("user {u}"))
    }

    /// The holder's labels, in a fixed order (absent ones `None`).
    pub fn fields(&self) -> [(&'static str, Option<&str>); 6] {
        [
            ("namespace", self.namespace.as_deref()),
            ("pod", self.pod.as_deref()),
            ("container", self.container.as_deref()),
            ("slurm_job", self.slurm_job.as_deref()),
            ("user", self.user.as_deref()),
            ("training_job", self.training_job.as_deref()),
        ]
    }
}

/// Midnight UTC at or before `t` (ms).
pub fn day_start(t: crate::model::TsMs) -> crate::model::TsMs {
    t.div_euclid(86_400_000) * 86_400_000
}
