//! Alerts: the lifecycle of each (rule, target) instance, inhibition between rules, and (for
//! the live daemon) persistence. Notification delivery lives in `notify`, which takes the
//! engine's reports as `transition::Transition`.
//!
//! Invariants: identity = rule + labels; values live in annotations (the summary), never in
//! labels, so a changing value never makes a new alert.

pub mod engine;
pub mod episodes;
pub mod evaluator;
pub mod replay;
pub mod state;
pub mod unittest;
pub mod usage;
