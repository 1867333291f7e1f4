//! `gpuwatch job timeline`: a multi-node job's stall across its nodes, from the fleet's
//! Prometheus (`crate::fleet::timeline`): each GPU's stall start, signature, last progress
//! and host, in order, and the GPU that stopped first.

use std::path::Path;

use crate::config::{Config, PrometheusConfig};
use crate::fleet::timeline;

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct JobArgs {
    #[command(subcommand)]
    pub command: JobCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum JobCommand {
    /// Each GPU's stall in a multi-node job, in order across nodes, and the first that
    /// stopped (from the series every node exports to the fleet's Prometheus).
    Timeline(TimelineArgs),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: the first GPU, then one line per GPU (also accepted as `text`).
    #[default]
    #[value(alias = "text")]
    Table,
    /// One JSON object: training_job, first, undetermined, gpus.
    Json,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: gpuwatch job timeline --job 4242 --prometheus http://prometheus:9090 --from 2026-12-06T08:00:00Z. \
    Exit 1 when Prometheus cannot be read or holds no stall of the job in the range."
)]
pub struct TimelineArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The job's `training_job` label (Slurm job id, pod controller name, or the value of
    /// `[fleet] job_label`; see gpuwatch_job_info).
    #[arg(long, value_name = "NAME")]
    pub job: String,
    /// The fleet's Prometheus (or VictoriaMetrics, Mimir, Thanos query API) [default: the
    /// config's `[prometheus] url`, with its auth and TLS].
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Start: RFC 3339 or unix seconds [default: 6 hours before --to].
    #[arg(long, value_name = "TIME", value_parser = super::replay::parse_time)]
    pub from: Option<i64>,
    /// End: RFC 3339 or unix seconds [default: now].
    #[arg(long, value_name = "TIME", value_parser = super::replay::parse_time)]
    pub to: Option<i64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(args: JobArgs) -> Result<(), Failure> {
    match args.command {
        JobCommand::Timeline(a) => timeline_cmd(a),
    }
}

/// The Prometheus to ask: `--prometheus` (with the config's auth and TLS when it has a
/// `[prometheus]`), else the config's.
pub(super) fn prometheus(cfg: &Config, url: Option<&str>) -> Result<PrometheusConfig, Failure> {
    match (url, &cfg.prometheus) {
        (Some(u), Some(p)) => {
            let checked = checked_url(u)?;
            Ok(PrometheusConfig {
                url: checked.url,
                ..p.clone()
            })
        }
        (Some(u), None) => checked_url(u),
        (None, Some(p)) => Ok(p.clone()),
        (None, None) => Err(fail(
            exit::USAGE,
            anyhow::anyhow!(
                "no Prometheus to ask: pass --prometheus URL or set [prometheus] url in the config"
            ),
        )),
    }
}

/// A URL checked as the config checks `[prometheus] url`.
fn checked_url(u: &str) -> Result<PrometheusConfig, Failure> {
    let text = format!(
        "[prometheus]\nurl = {}\n",
        toml::Value::String(u.to_string())
    );
    Config::parse(&text, Path::new("--prometheus"))
        .map_err(|e| fail(exit::USAGE, e))?
        .prometheus
        .ok_or_else(|| {
            fail(
                exit::USAGE,
                anyhow::anyhow!("--prometheus {u:?} is not usable"),
            )
        })
}

fn timeline_cmd(a: TimelineArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let prom = prometheus(&cfg, a.prometheus.as_deref())?;
    let to = a.to.unwrap_or_else(crate::clock::now_ms);
    let from = a.from.unwrap_or(to - 6 * 3_600_000);
    if from >= to {
        return Err(fail(
            exit::USAGE,
            anyhow::anyhow!("--from must be before --to"),
        ));
    }
    let t =
        timeline::fetch_blocking(&prom, &a.job, from, to, cfg.http.metrics_names).map_err(|e| {
            // A client that cannot be set up (a CA file) is the configuration's fault.
            let code = match e {
                timeline::TimelineError::Fetch(crate::training::FetchError::Setup(_)) => {
                    exit::USAGE
                }
                _ => exit::FAILURE,
            };
            fail(code, e)
        })?;
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&t.json())?),
        Format::Table => print!("{}", t.table()),
    }
    Ok(())
}
