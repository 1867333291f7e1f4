//! gpuwatch: watches NVIDIA GPUs, keeps a bounded history in SQLite and (later) alerts.
//!
//! The pipeline, one module per stage: [`sampler`] (NVML → [`model::TickBatch`]) →
//! [`store`] (SQLite ring buffer) → rules → alerts → notify; plus [`config`], [`http`],
//! [`daemon`] (wiring, threads, shutdown) and [`cli`]. See ARCHITECTURE.md.

pub mod config;
pub mod model;
pub mod sampler;
pub mod store;
