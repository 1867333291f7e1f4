//! gpuwatch: watches NVIDIA GPUs, keeps a bounded history in SQLite, evaluates alert rules
//! over it and delivers the alerts.
//!
//! The pipeline, one module per stage: [`sampler`] (NVML → [`model::TickBatch`]) →
//! [`store`] (SQLite ring buffer) → [`rules`] and [`alerts`] (evaluated after each commit) →
//! [`notify`] (delivery from the outbox). Beside it: [`kmsg`] (kernel-log XIDs),
//! [`attribution`] (the container, pod and Slurm job holding each GPU), [`training`]
//! (training metrics from Prometheus), [`http`] and [`remote_write`]. Also [`config`],
//! [`daemon`] (wiring, threads, shutdown), [`doctor`] (diagnosing the GPU stack and the
//! setup), [`manage`] (`gpu set`: GPU settings changed through NVML, audited), [`remediate`]
//! (a broken GPU's node out of service: Slurm drain, Kubernetes condition), [`import`]
//! (logs recorded elsewhere), [`analysis`] and [`report`] (post-mortems), [`clock`] (time as a
//! parameter), [`sim`] (simulated GPUs for the demo and tests) and [`cli`]. See
//! ARCHITECTURE.md, whose "Layers" section orders the modules.

pub mod alerts;
pub mod analysis;
pub mod attribution;
pub mod backtest;
pub mod cli;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod doctor;
#[doc(hidden)]
pub mod fleet;
pub mod format;
pub mod fuzzing;
pub mod gpu_health;
pub mod http;
pub mod import;
pub mod kmsg;
pub mod manage;
pub mod matcher;
pub mod metric;
pub mod model;
pub mod notify;
pub mod outbound;
pub mod remediate;
pub mod remote_write;
pub mod report;
pub mod rules;
pub mod sampler;
pub mod secret;
pub mod setting;
pub mod sim;
pub mod specs;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod training;
pub mod transition;
pub mod usage;
pub mod views;
pub mod xid;
