//! `gpuwatch import wandb FILE...`: a Weights & Biases run's history export (CSV, JSON lines
//! or a JSON array; [`crate::import::wandb`]) into GPU samples of `--host` and its training
//! step and loss, in one transaction.
//!
//! Exit codes: 0 imported; 1 the file cannot be read, is not a W&B history export, or holds
//! neither GPU metrics nor step/loss (nothing written); 2 a bad command line.

use std::path::PathBuf;

use anyhow::{Context, anyhow};

use super::{ConfigArgs, Failure, exit, fail};
use crate::import::tracker::Parsed;
use crate::import::wandb::{self, Keys};
use crate::model::{GpuInventory, TsMs};
use crate::store::{self, import::ImportGpu, import::ImportPlan, import::MinuteRollups};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: python -c 'import wandb; r = wandb.Api().run(\"team/proj/abc123\"); r.history(stream=\"system\", samples=100000).to_csv(\"system.csv\")'; gpuwatch import wandb --host node7 --gpu-model 'NVIDIA H100 80GB HBM3' system.csv --db run.db"
)]
pub struct ImportWandbArgs {
    /// History exports of one run on one host: CSV (`run.history(...).to_csv()`, the UI's
    /// export), JSON lines (`run.scan_history()` rows) or a JSON array.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The host the run's GPUs are on [default: the first file's name without extension].
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// The GPUs' model as NVML names it (W&B's run metadata `gpu`), so the model table's
    /// thresholds apply, e.g. `NVIDIA H100 80GB HBM3`.
    #[arg(long, value_name = "NAME")]
    pub gpu_model: Option<String>,
    /// The history key of the training step.
    #[arg(long, default_value = "_step", value_name = "KEY")]
    pub step_key: String,
    /// The history key of the loss.
    #[arg(long, default_value = "loss", value_name = "KEY")]
    pub loss_key: String,
}

pub fn run(a: ImportWandbArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let host = a
        .host
        .clone()
        .unwrap_or_else(|| crate::import::nvidia_smi::default_host(&a.files[0]));
    if host.is_empty() {
        return Err(fail(exit::USAGE, anyhow!("--host must not be empty")));
    }
    let keys = Keys {
        step: a.step_key.clone(),
        loss: a.loss_key.clone(),
    };
    let mut rows = Vec::new();
    for f in &a.files {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("cannot read {}", f.display()))
            .map_err(|e| fail(exit::FAILURE, e))?;
        rows.extend(
            wandb::rows(&text, &f.display().to_string()).map_err(|e| fail(exit::FAILURE, e))?,
        );
    }
    let parsed = wandb::parse(&rows, &keys);
    if parsed.sample_count() == 0 && parsed.training.is_empty() {
        return Err(fail(
            exit::FAILURE,
            anyhow!(
                "nothing to import from {}: no `system.gpu.<i>.*` metric and no `{}`/`{}` value with a `_timestamp` in {} row(s); export the run's system metrics (run.history(stream=\"system\")) or name your keys with --step-key / --loss-key",
                a.files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                keys.step,
                keys.loss,
                parsed.rows
            ),
        ));
    }
    publish(&cfg, &host, a.gpu_model.as_deref(), &parsed)
}

/// Publishes what a tracker's export held as samples of `host`'s GPUs (by index) and its
/// training series, in one transaction, and prints the summary (also `import mlflow`).
pub(super) fn publish(
    cfg: &crate::config::Config,
    host: &str,
    gpu_model: Option<&str>,
    parsed: &Parsed,
) -> Result<(), Failure> {
    let host = host.to_string();
    let host_existed = store::import::host_exists(&cfg.database, &host);
    let mut st_cfg = store::StoreConfig::new(host.clone());
    st_cfg.retention = cfg.retention;
    st_cfg.rollup_retention = cfg.rollup_retention;
    st_cfg.max_db_size = cfg.max_db_size;
    let st = store::open(&cfg.database, &st_cfg)
        .with_context(|| format!("opening {}", cfg.database.display()))
        .map_err(|e| fail(exit::FAILURE, e))?;
    let stored = st.stored_gpus(&host).map_err(|e| fail(exit::FAILURE, e))?;
    let mut plan = ImportPlan {
        hosts: vec![host.clone()],
        processes_observed: vec![false],
        ..ImportPlan::default()
    };
    let mut uuids = Vec::new();
    for (&i, per) in &parsed.samples {
        let uuid = match stored
            .iter()
            .filter(|g| g.index == Some(i))
            .collect::<Vec<_>>()
            .as_slice()
        {
            [one] => one.uuid.clone(),
            _ => format!("index-{i}"),
        };
        let (first, last) = (
            per.keys().next().copied().unwrap_or(0),
            per.keys().next_back().copied().unwrap_or(0),
        );
        plan.gpus.push(ImportGpu {
            host: 0,
            inventory: GpuInventory {
                index: i,
                uuid: uuid.clone(),
                name: gpu_model.map(str::to_string),
                memory_total_bytes: parsed.mem_total.get(&i).copied(),
                ..GpuInventory::default()
            },
            index_known: true,
            first_ms: first,
            last_ms: last,
            last_sample_ms: per.keys().next_back().copied(),
        });
        uuids.push(uuid);
    }
    plan.training = parsed.training.iter().map(|t| (0, t.clone())).collect();
    let result = (|| {
        let mut staging = st.stage_import()?;
        for (local, per) in parsed.samples.values().enumerate() {
            for s in per.values() {
                let mut s = s.clone();
                s.uuid.clone_from(&uuids[local]);
                staging.sample(local, &s)?;
            }
        }
        let published = staging.publish(&plan, &MinuteRollups::default())?;
        if let Some((from, to)) = plan.host_span(0) {
            st.import_rollups(&host, from, to, false)?;
        }
        Ok::<_, store::StoreError>(published)
    })();
    let published = match result {
        Ok(p) => p,
        Err(e) => {
            if !host_existed {
                let _ = st.forget_unused_host(&host);
            }
            return Err(fail(
                exit::FAILURE,
                anyhow!(
                    "writing {}: {e}; nothing was imported",
                    cfg.database.display()
                ),
            ));
        }
    };
    let span = |ts: &mut dyn Iterator<Item = TsMs>| {
        let v: Vec<TsMs> = ts.collect();
        match (v.iter().min(), v.iter().max()) {
            (Some(a), Some(b)) => format!(
                " ({} .. {})",
                crate::format::utc_label(*a),
                crate::format::utc_label(*b)
            ),
            _ => String::new(),
        }
    };
    println!(
        "imported {} samples of {} GPU(s) and {} training point(s) for host {host}{}",
        published.samples,
        plan.gpus.len(),
        published.training_points,
        span(
            &mut parsed
                .samples
                .values()
                .flat_map(|m| m.keys().copied())
                .chain(parsed.training.iter().map(|t| t.ts_ms))
        )
    );
    if parsed.rows_without_time > 0 {
        println!(
            "skipped {} row(s) without `_timestamp` (they cannot be placed in time)",
            parsed.rows_without_time
        );
    }
    if !parsed.percent_only_memory.is_empty() {
        println!(
            "memory used unknown for GPU(s) {:?}: only `memoryAllocated` (a percentage) was logged, not `memoryAllocatedBytes`",
            parsed.percent_only_memory
        );
    }
    if !parsed.unstored.is_empty() {
        println!(
            "not stored (no gpuwatch metric): {}",
            parsed
                .unstored
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
