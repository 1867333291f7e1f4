//! `gpuwatch import mlflow PATH [--run RUN]`: an MLflow run's GPU system metrics and its loss
//! with its step ([`crate::import::mlflow`]) into GPU samples of `--host` and its training
//! series, in one transaction (published as `import wandb` publishes).
//!
//! Exit codes: 0 imported; 1 not an MLflow database or run directory, no such run, or the run
//! holds neither GPU metrics nor the loss (nothing written); 2 a bad command line.

use std::path::PathBuf;

use anyhow::anyhow;

use super::{ConfigArgs, Failure, exit, fail};
use crate::import::mlflow::{self, Keys};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: gpuwatch import mlflow mlflow.db --run 4fa8b027 --host node7 --gpu-model 'NVIDIA H100 80GB HBM3' --db run.db\nA run started with mlflow.start_run(log_system_metrics=True) logs the GPU metrics."
)]
pub struct ImportMlflowArgs {
    /// The tracking database (`mlflow.db` of `sqlite:///mlflow.db`) or a file-store run
    /// directory (`mlruns/<experiment>/<run_id>`; `mlruns/` with --run).
    #[arg(value_name = "RUN_DIR_OR_DB")]
    pub path: PathBuf,
    /// The run's id or name [default: the only run with metrics].
    #[arg(long, value_name = "RUN")]
    pub run: Option<String>,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The host the run's GPUs are on [default: the config's host, this machine's name].
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// The GPUs' model as NVML names it, so the model table's thresholds apply.
    #[arg(long, value_name = "NAME")]
    pub gpu_model: Option<String>,
    /// The loss metric (its steps are the training step).
    #[arg(long, default_value = "loss", value_name = "KEY")]
    pub loss_metric: String,
    /// A metric whose values are the training step [default: the loss's step].
    #[arg(long, value_name = "KEY")]
    pub step_metric: Option<String>,
}

pub fn run(a: ImportMlflowArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let host = a.host.clone().unwrap_or_else(|| cfg.host.clone());
    if host.is_empty() {
        return Err(fail(exit::USAGE, anyhow!("--host must not be empty")));
    }
    if !a.path.exists() {
        return Err(fail(
            exit::FAILURE,
            anyhow!("{}: no such file or directory", a.path.display()),
        ));
    }
    let (run_id, points) =
        mlflow::read(&a.path, a.run.as_deref()).map_err(|e| fail(exit::FAILURE, e))?;
    let keys = Keys {
        loss: a.loss_metric.clone(),
        step: a.step_metric.clone(),
    };
    let parsed = mlflow::parse(&points, &keys);
    if parsed.sample_count() == 0 && parsed.training.is_empty() {
        return Err(fail(
            exit::FAILURE,
            anyhow!(
                "nothing to import from run {run_id} of {}: no `system/gpu_<i>_*` metric (start the run with log_system_metrics=True) and no `{}` metric ({} point(s) read)",
                a.path.display(),
                keys.loss,
                parsed.rows
            ),
        ));
    }
    println!("run {run_id}: {} point(s) read", parsed.rows);
    super::import_wandb::publish(&cfg, &host, a.gpu_model.as_deref(), &parsed)
}
