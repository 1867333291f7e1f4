//! The integration test crate: one binary, a module per area (ripgrep's layout).
//!
//! Every test that needs NVML runs the real nvml-wrapper code against the simulated library
//! (`crates/fake-nvml`), each with its own copy of the library and scenario. The library must
//! be built first (`cargo build --workspace`; scripts/test.sh does it).
//!
//! The `*_support` modules (and `common`) are helpers shared by the test modules, declared
//! once here; a test module uses them as `crate::http_support::...`. One area's tests:
//! `cargo test --test gpuwatch http_api::`. The one other binary is `tests/real_nvml.rs`
//! (needs the `real-nvml` feature and a GPU). Tests that need outside services (Prometheus,
//! Alertmanager, SMTP, Chromium, root) find them as scripts/test.sh installs them and say
//! what is missing otherwise.

mod analysis_incident;
mod analysis_llm;
mod analysis_support;
mod attribution_alerts;
mod attribution_notify;
mod attribution_prometheus;
mod attribution_support;
mod backtest;
mod browser_support;
mod chaos_campaigns;
mod cli;
mod common;
mod daemon;
mod deploy;
mod detection;
mod doctor;
mod field_values;
mod fleet;
mod fleet_jobs;
mod fuzz_corpus;
mod gpu_health;
mod gpu_set;
mod http_api;
mod http_support;
mod import_csv;
mod import_detection;
mod import_dmesg;
mod import_mlflow;
mod import_nvidia_smi;
mod import_openmetrics;
mod import_prometheus;
mod import_prometheus_fleet;
mod import_rollups;
mod import_wandb;
mod kmsg_daemon;
mod layering;
mod mig;
mod notify_alertmanager;
mod notify_daemon;
mod notify_email;
mod notify_fleet;
mod notify_slack;
mod notify_support;
mod notify_webhook;
mod outage;
mod postmortem_alerts;
mod postmortem_history;
mod postmortem_query;
mod postmortem_report;
mod properties;
mod pynvml;
mod record;
mod remediation_kubernetes;
mod remediation_slurm;
mod remote_write;
mod rules_check;
mod rules_unit;
mod sampler;
mod security_secrets;
mod store_bounds;
mod store_migrate;
mod store_recovery;
mod store_rw;
mod store_xid_events;
mod training_env_secret;
mod training_fetch_errors;
mod training_hang_prometheus;
mod training_prometheus;
mod training_support;
mod usage;
