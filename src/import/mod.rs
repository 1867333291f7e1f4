//! Importers of logs recorded elsewhere, for post-mortems and `replay` backtests.
//!
//! Each importer parses its format into the store's staging area and publishes everything in
//! one short transaction ([`crate::store::import`]), so an import is all-or-nothing and never
//! holds the database's write lock for longer than that one publish.
//!
//! - [`nvidia_smi`]: CSV logs of `nvidia-smi --query-gpu=... --format=csv -l N` and of
//!   `--query-compute-apps`.
//! - [`dmesg`]: XIDs from saved kernel logs (`dmesg`, `journalctl -k`, syslog).
//! - [`prometheus`]: dcgm-exporter's series from a Prometheus's HTTP API, raw samples, in
//!   chunks each published whole (a chunked import: one transaction per chunk, a cursor).
//! - [`mlflow`]: an MLflow run's metrics (tracking database or run directory).
//! - [`wandb`]: a Weights & Biases run's history export (GPU system metrics, step, loss).
//! - [`time`]: the one reader of their timestamps (wall times in a zone, RFC 3339, epoch).

pub mod dmesg;
pub mod mlflow;
pub mod nvidia_smi;
pub mod prometheus;
pub mod time;
pub mod tracker;
pub mod wandb;
