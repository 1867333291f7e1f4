//! `gpuwatch backtest --rules PROMETHEUS_RULES.yml`: what gpuwatch's rules and the user's own
//! Prometheus alerting rules said about the same stored history (imported or recorded), side
//! by side ([`crate::backtest`]; docs/IMPORT.md).
//!
//! Exit codes: 0 compared; 1 nothing to compare (no samples in the range, no alerting rule) or
//! Prometheus/promtool failed (their message); 2 a bad command line or rules file.

use std::path::PathBuf;

use anyhow::anyhow;

use super::replay::{load_rules, parse_time};
use super::{ConfigArgs, Failure, exit, fail};
use crate::alerts::replay::ReplayOptions;
use crate::backtest::{self, BacktestError, prometheus::PromError};
use crate::store;

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    /// For people: the counts, then every episode with its counterpart.
    #[default]
    Table,
    /// For programs: `gpuwatch`, `theirs` and `matched`.
    Json,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: gpuwatch import prometheus --prometheus http://prometheus:9090 --from 2026-12-01T00:00:00Z --to 2026-12-02T00:00:00Z --db incident.db; gpuwatch backtest --rules /etc/prometheus/rules/gpu.yml --db incident.db --quiet 2026-12-01T00:00:00Z/2026-12-01T08:00:00Z"
)]
pub struct BacktestArgs {
    /// Your Prometheus rules file (the `groups:` YAML Prometheus loads); its alerting rules are
    /// evaluated by a real Prometheus over the stored samples, as dcgm-exporter names them.
    #[arg(long, value_name = "FILE")]
    pub rules: PathBuf,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// gpuwatch rule file or directory replacing the default rules.
    #[arg(long, value_name = "DIR_OR_FILE")]
    pub gpuwatch_rules: Option<PathBuf>,
    /// Start (RFC 3339 or unix seconds) [default: the oldest stored sample].
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub from: Option<i64>,
    /// End (RFC 3339 or unix seconds) [default: the newest stored sample].
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub to: Option<i64>,
    /// The evaluation interval of your rule groups that set none (Prometheus's global
    /// `evaluation_interval`).
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub eval_interval: std::time::Duration,
    /// Two alerts are counterparts when they fired within this of each other.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub window: std::time::Duration,
    /// A period you know was healthy, `FROM/TO` (RFC 3339 or unix seconds; repeat for more):
    /// each set's alerts in it are counted (false alarms).
    #[arg(long, value_name = "FROM/TO", value_parser = parse_period)]
    pub quiet: Vec<(i64, i64)>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

fn parse_period(s: &str) -> Result<(i64, i64), String> {
    let (a, b) = s.split_once('/').ok_or_else(|| {
        format!("`{s}` is not FROM/TO (e.g. 2026-12-01T00:00:00Z/2026-12-01T06:00:00Z)")
    })?;
    let (a, b) = (parse_time(a)?, parse_time(b)?);
    if a >= b {
        return Err(format!("`{s}`: FROM must be before TO"));
    }
    Ok((a, b))
}

pub fn run(a: BacktestArgs) -> Result<(), Failure> {
    let cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    if !a.rules.is_file() {
        return Err(fail(
            exit::USAGE,
            anyhow!(
                "--rules {}: no such file (your Prometheus rules YAML)",
                a.rules.display()
            ),
        ));
    }
    let rules = load_rules(a.gpuwatch_rules.as_ref())?;
    let conn = store::open_read_only(&cfg.database)?;
    let report = backtest::run(backtest::Input {
        conn: &conn,
        rules_file: &a.rules,
        gpuwatch_rules: rules,
        replay: ReplayOptions {
            eval_every_ms: 0,
            job_label: cfg.fleet.job_label.clone(),
            xid_overrides: cfg.xid.overrides.clone(),
        },
        range: (a.from, a.to),
        eval_interval: a.eval_interval,
        window_ms: a.window.as_millis() as i64,
        quiet: (!a.quiet.is_empty()).then(|| a.quiet.clone()),
    })
    .map_err(|e| match e {
        BacktestError::Prometheus(PromError::Rules(_)) => fail(exit::USAGE, e),
        e => fail(exit::FAILURE, e),
    })?;
    match a.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
        ),
        Format::Table => print!("{}", report.to_table()),
    }
    Ok(())
}
