//! gpuwatch: watches NVIDIA GPUs, keeps a bounded history in SQLite and (later) alerts.
//!
//! The pipeline, one module per stage: [`sampler`] (NVML → [`model::TickBatch`]) →
//! [`store`] (SQLite ring buffer) → rules → alerts → notify; plus [`config`], [`http`],
//! [`daemon`] (wiring, threads, shutdown), [`doctor`] (diagnosing the GPU stack and the
//! setup), [`manage`] (`gpu set`: GPU settings changed through NVML, audited), [`clock`] (time as a parameter), [`sim`] (simulated GPUs for the demo and tests)
//! and [`cli`]. See ARCHITECTURE.md.

pub mod alerts;
pub mod analysis;
pub mod attribution;
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod doctor;
#[doc(hidden)]
pub mod format;
pub mod fuzzing;
pub mod gpu_health;
pub mod http;
pub mod import;
pub mod kmsg;
pub mod manage;
pub mod matcher;
pub mod model;
pub mod notify;
pub mod remote_write;
pub mod report;
pub mod rules;
pub mod sampler;
pub mod setting;
pub mod sim;
pub mod specs;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod training;
pub mod transition;
pub mod xid;
