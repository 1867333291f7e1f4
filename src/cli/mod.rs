//! Command-line interface: argument parsing (clap) and one module per subcommand.
//!
//! Invariants: this is the only place that turns errors into text for people and exit codes
//! (`anyhow` lives here and in `main` only); every failure is printed as `error: ...` lines,
//! never as a panic or a debug dump.

mod alerts;
mod backtest;
mod demo;
mod doctor;
mod export;
mod gpu;
mod gpu_audit;
mod gpu_health;
mod history;
mod hosts;
mod import_csv;
mod import_dmesg;
mod import_mlflow;
mod import_om;
mod import_prom;
mod import_smi;
mod import_wandb;
mod incident;
mod job;
mod notify;
mod query;
mod record;
mod replay;
mod report;
mod rules;
mod rules_test;
mod run;
mod silence;
mod status;
mod usage;
pub use crate::views::timearg;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Exit codes.
pub mod exit {
    pub const OK: i32 = 0;
    /// Something failed at run time.
    pub const FAILURE: i32 = 1;
    /// Bad command line or configuration.
    pub const USAGE: i32 = 2;
    /// NVML could not be started (no driver, no library, no permission).
    pub const NVML: i32 = 3;
}

#[derive(Debug, Parser)]
#[command(
    name = "gpuwatch",
    version,
    about = "Watches NVIDIA GPUs of training machines: history in SQLite, alerts on idle GPUs, leaks, hangs, overheating and hardware faults"
)]
pub struct Cli {
    /// Log filter (error, warn, info, debug, trace or a tracing filter); also RUST_LOG.
    /// Default: info for `run`, warnings only for one-shot commands, errors for `demo`.
    #[arg(long, global = true, value_name = "FILTER")]
    pub log: Option<String>,
    /// Log line format: text (colour only on a terminal) or json (one object per line);
    /// `run` also reads `[log] format` from its config.
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub log_format: Option<crate::config::LogFormat>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: sample every GPU into the database until SIGINT/SIGTERM.
    Run(run::RunArgs),
    /// Show the GPUs from the database like a compact nvidia-smi.
    Status(status::StatusArgs),
    /// Diagnose the GPU stack bottom-up (kernel module, device nodes, NVML library and
    /// version, every GPU) and gpuwatch's setup; one line per check with the fix.
    /// Exit 0 all ok, 1 warnings, 2 failures.
    Doctor(doctor::DoctorArgs),
    /// GPU management: `gpu set` changes power limits, persistence and compute modes and
    /// locked clocks (root), every write audited; `gpu audit` shows the changes.
    Gpu(gpu::GpuArgs),
    /// Run the whole daemon on simulated GPUs, faster than real time (no GPU, root or config).
    Demo(demo::DemoArgs),
    /// Rule files: `rules check` loads and lists them (every error as file:line:col),
    /// `rules test` runs their promtool-style unit tests.
    Rules(rules::RulesArgs),
    /// Evaluate rules over stored history as the live daemon would; print every transition.
    Replay(replay::ReplayArgs),
    /// Your Prometheus alerting rules and gpuwatch's over the same stored history, side by side.
    Backtest(backtest::BacktestArgs),
    /// Alert delivery: `notify test` sends a test message through the receivers.
    Notify(notify::NotifyArgs),
    /// Silence alerts (`add`, `list`, `expire`): recorded, not sent.
    Silence(silence::SilenceArgs),
    /// Ad-hoc SQL over the history, read-only (views documented in docs/SCHEMA.md).
    Query(query::QueryArgs),
    /// GPU metrics over time, downsampled to a step (table, csv, json or terminal chart).
    History(history::HistoryArgs),
    /// Alert history with durations.
    Alerts(alerts::AlertsArgs),
    /// GPU-hours held, busy and idle-held per namespace, pod, training job, user, host, GPU or
    /// model, with the idle share and the cost.
    Usage(usage::UsageArgs),
    /// One alert's story: pending, firing, notified, resolved, with metrics around it.
    Incident(incident::IncidentArgs),
    /// A self-contained HTML report with charts, for an alert or a time window.
    Report(report::ReportArgs),
    /// Import logs recorded elsewhere (nvidia-smi CSV, OpenMetrics, kernel logs) for
    /// post-mortems and replay.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Export stored samples as CSV or JSON lines.
    Export(export::ExportArgs),
    /// Scenario files for the simulated NVML library.
    #[command(subcommand)]
    Scenario(ScenarioCommand),
    /// The hosts a database holds: `hosts list`, and `hosts merge` to move rows stored under
    /// other names (a pod's host name) under the node's.
    Hosts(hosts::HostsArgs),
    /// Training jobs across nodes: `job timeline` orders a multi-node job's stalled GPUs
    /// from the fleet's Prometheus and names the one that stopped first.
    Job(job::JobArgs),
}

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// `nvidia-smi --query-gpu=... --format=csv -l N` logs (and --query-compute-apps).
    #[command(name = "nvidia-smi")]
    NvidiaSmi(import_smi::ImportSmiArgs),
    /// OpenMetrics / Prometheus text exposition files into the training metrics.
    Openmetrics(import_om::ImportOmArgs),
    /// XIDs from saved kernel logs (dmesg -T, --time-format iso, journalctl -k, syslog).
    Dmesg(import_dmesg::ImportDmesgArgs),
    /// GPU history from a Prometheus that scraped dcgm-exporter: raw samples, in chunks.
    Prometheus(import_prom::ImportPromArgs),
    /// CSV logs of your own scripts, read through a column map (--map FIELD=COLUMN[:UNIT]).
    Csv(import_csv::ImportCsvArgs),
    /// A Weights & Biases run's history export: GPU system metrics, step and loss.
    Wandb(import_wandb::ImportWandbArgs),
    /// An MLflow run's GPU system metrics and loss (mlflow.db or a run directory).
    Mlflow(import_mlflow::ImportMlflowArgs),
}

#[derive(Debug, Subcommand)]
pub enum ScenarioCommand {
    /// Sample the GPUs for a while and write what was seen as a scenario file.
    Record(record::RecordArgs),
}

/// Options shared by commands that read the configuration.
#[derive(Debug, clap::Args, Clone, Default)]
pub struct ConfigArgs {
    /// Configuration file [default: /etc/gpuwatch/gpuwatch.toml when it exists, else built-in defaults].
    #[arg(long, short = 'c', value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Database file (overrides `database` in the config).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
}

impl ConfigArgs {
    /// Loads the configuration the arguments point at, with `--db` applied.
    pub fn load(&self) -> Result<crate::config::Config, crate::config::ConfigErrors> {
        let default = PathBuf::from(crate::config::DEFAULT_CONFIG_PATH);
        let mut cfg = match &self.config {
            Some(p) => crate::config::Config::load(p)?,
            None if default.exists() => crate::config::Config::load(&default)?,
            None => crate::config::Config::default(),
        };
        if let Some(db) = &self.db {
            cfg.database = db.clone();
        }
        Ok(cfg)
    }
}

/// A failure with the exit code it should produce.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Self {
            code: exit::FAILURE,
            error: e.into(),
        }
    }
}

/// A view's error as the command's: a usage error exits 2, a failure 1.
pub fn view(e: crate::views::ViewError) -> Failure {
    let code = if e.is_usage() {
        exit::USAGE
    } else {
        exit::FAILURE
    };
    fail(code, e.into_error())
}

pub fn fail(code: i32, error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code,
        error: error.into(),
    }
}

/// One glibc malloc arena for the daemon's threads, set before any starts: glibc's default
/// gives each thread that allocates an arena of its own, whose freed memory stays resident
/// (docs/BENCHMARKS.md has what it saves).
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; no thread has started yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Parses the command line, runs the command, prints errors; returns the exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Run(_) | Command::Demo(_)) {
        one_malloc_arena();
    }
    let default = match &cli.command {
        Command::Run(_) => "info",
        Command::Demo(_) => "error",
        _ => "warn",
    };
    let format = cli.log_format.or_else(|| match &cli.command {
        // The daemon's own `[log] format` (a broken config is reported by `run` itself).
        Command::Run(a) => a.config.load().ok().map(|c| c.log_format),
        _ => None,
    });
    init_logging(cli.log.as_deref(), default, format.unwrap_or_default());
    let result = match cli.command {
        Command::Run(a) => run::run(a),
        Command::Status(a) => status::run(a),
        Command::Demo(a) => demo::run(a),
        // The doctor's exit code is its verdict (0, 1 or 2); it prints its own findings.
        Command::Doctor(a) => return doctor::run(a),
        Command::Gpu(a) => gpu::run(a),
        Command::Rules(a) => rules::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Backtest(a) => backtest::run(a),
        Command::Scenario(ScenarioCommand::Record(a)) => record::run(a),
        Command::Hosts(a) => hosts::run(a),
        Command::Job(a) => job::run(a),
        Command::Notify(a) => notify::run(a),
        Command::Silence(a) => silence::run(a),
        Command::Query(a) => query::run(a),
        Command::History(a) => history::run(a),
        Command::Alerts(a) => alerts::run(a),
        Command::Usage(a) => usage::run(a),
        Command::Incident(a) => incident::run(a),
        Command::Report(a) => report::run(a),
        Command::Import(ImportCommand::NvidiaSmi(a)) => import_smi::run(a),
        Command::Import(ImportCommand::Openmetrics(a)) => import_om::run(a),
        Command::Import(ImportCommand::Dmesg(a)) => import_dmesg::run(a),
        Command::Import(ImportCommand::Prometheus(a)) => import_prom::run(a),
        Command::Import(ImportCommand::Csv(a)) => import_csv::run(a),
        Command::Import(ImportCommand::Wandb(a)) => import_wandb::run(a),
        Command::Import(ImportCommand::Mlflow(a)) => import_mlflow::run(a),
        Command::Export(a) => export::run(a),
    };
    match result {
        Ok(()) => exit::OK,
        Err(f) => {
            for line in format!("{:#}", f.error).lines() {
                eprintln!("error: {line}");
            }
            f.code
        }
    }
}

/// Logs to stderr: `filter` (else `RUST_LOG`, else `default`), as text — coloured only when
/// stderr is a terminal and `NO_COLOR` is unset — or as JSON lines.
fn init_logging(filter: Option<&str>, default: &str, format: crate::config::LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = filter
        .map(str::to_string)
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| default.to_string());
    let env = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        crate::config::LogFormat::Json => builder.json().with_current_span(false).try_init(),
        crate::config::LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every `(command path, --format values, default)` of the command tree.
    fn formats(
        cmd: &clap::Command,
        path: &str,
        out: &mut Vec<(String, Vec<String>, Option<String>)>,
    ) {
        for a in cmd.get_arguments() {
            if a.get_long() == Some("format") {
                let values = a
                    .get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_string())
                    .collect();
                let default = a
                    .get_default_values()
                    .first()
                    .map(|d| d.to_string_lossy().into_owned());
                out.push((path.to_string(), values, default));
            }
        }
        for sub in cmd.get_subcommands() {
            formats(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    /// One convention: `table` for people, the default wherever a command prints for people
    /// (`export` picks table or CSV by where it writes), and the same machine names.
    #[test]
    fn every_format_option_follows_one_convention() {
        let mut found = Vec::new();
        formats(&super::Cli::command(), "gpuwatch", &mut found);
        assert!(found.len() >= 10, "{found:?}");
        for (path, values, default) in &found {
            assert!(values.iter().any(|v| v == "table"), "{path}: {values:?}");
            for v in values {
                assert!(
                    ["table", "json", "jsonl", "csv", "chart"].contains(&v.as_str()),
                    "{path}: --format {v} is not one of the shared names"
                );
            }
            match path.as_str() {
                "gpuwatch export" => assert_eq!(default, &None, "{path}"),
                _ => assert_eq!(default.as_deref(), Some("table"), "{path}"),
            }
        }
        let cmd = super::Cli::command();
        let import_om = cmd
            .find_subcommand("import")
            .and_then(|i| i.find_subcommand("openmetrics"))
            .expect("import openmetrics");
        assert!(
            import_om
                .get_arguments()
                .any(|a| a.get_long() == Some("input-format")),
            "an input format is not an output --format"
        );
    }
}
