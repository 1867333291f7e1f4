//! What the daemon's threads publish about themselves, read by `/healthz`, `/metrics` and
//! remote write: the health of sampling (`health.rs`: tick times and counters, the samples'
//! clock) and the self-metrics no table holds (`metrics.rs`: duration histograms, which GPUs
//! report XIDs).
//!
//! Invariant: low in the house (it uses the clock only): the sampler, the rules thread and
//! remote write publish here without knowing the HTTP server that reads it.

mod health;
pub mod metrics;

pub use health::Health;
pub use metrics::{BOUNDS, Histogram, XidWatch};
