//! Training metrics from Prometheus: the job's own step counter and loss, fetched for an
//! explicit time range and written to the store beside the GPU samples.
//!
//! - `client.rs`: [`PromClient`], `/api/v1/query_range` over reqwest/rustls, auth, TLS;
//! - `response.rs`: parsing and classifying the answer ([`Matrix`], NaN/Inf skipped);
//! - `error.rs`: [`FetchError`], the classified failures;
//! - `fetcher.rs`: [`TrainingFetcher`], the role queries, the per-role cursor, the polling task;
//! - `join.rs`: [`gpus_for_series`], which GPUs a series belongs to (for the rule evaluator).
//!
//! Invariants:
//! - Time is always a parameter (`from_ms`, `to_ms`, a clock function), never "now" read
//!   implicitly, so backfills and tests fetch any range.
//! - Points are stored under the role's canonical name ([`Role::metric`]), with the series'
//!   labels minus `__name__`, sorted; NaN/±Inf are never stored.
//! - Every poll writes one `training_source` status row per role (see docs/SCHEMA.md), so the
//!   evaluator can tell an outage (failures) from no data (an empty answer) from a hang.
//! - No secret ever appears in a log line or an error message.

pub mod client;
mod error;
mod fetcher;
pub mod join;
pub mod openmetrics;
mod response;

pub use client::{MAX_BODY_BYTES, PromClient};
pub use error::FetchError;
pub use fetcher::{MAX_POINTS_PER_QUERY, RoleFetch, TrainingFetcher};
pub use join::{GpuRef, Join, gpus_for_series};
pub use response::{Matrix, Series, parse_query_range};

/// What a training metric means to the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The training step (or iteration) counter: a hang is a step that stops advancing.
    Step,
    /// The training loss.
    Loss,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Step, Role::Loss];

    /// The role's key in `[prometheus.queries]` and in `training_source.role`.
    pub fn key(self) -> &'static str {
        match self {
            Role::Step => "step",
            Role::Loss => "loss",
        }
    }

    /// The canonical metric name its points are stored under.
    pub fn metric(self) -> &'static str {
        match self {
            Role::Step => "training_step",
            Role::Loss => "training_loss",
        }
    }
}
