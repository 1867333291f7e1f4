//! `gpuwatch doctor`: diagnoses the GPU stack and gpuwatch's setup (see `crate::doctor` and
//! docs/DOCTOR.md). Exit 0 when every check is ok, 1 with warnings, 2 with failures.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::doctor::{self, Options};

use super::ConfigArgs;

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    /// For people: one line per check with its fix (also accepted as `text`).
    #[value(alias = "text")]
    Table,
    /// `{"checks": [...]}`.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Output format: `table` (one line per check) for people, `json` for programs.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Read the host's /proc, /sys, /dev and library directories under DIR (a container with
    /// the host's root mounted, e.g. /host).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub host_root: PathBuf,
    /// NVML library to check (overrides `nvml_library` in the config).
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// How long NVML init, and each GPU's reads, may take before they count as hung.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub nvml_timeout: Duration,
}

/// Runs the checks, prints them; returns the exit code.
pub fn run(args: DoctorArgs) -> i32 {
    let default = PathBuf::from(crate::config::DEFAULT_CONFIG_PATH);
    let config_path = args
        .config
        .config
        .clone()
        .or_else(|| default.exists().then_some(default));
    let config = args.config.load().map_err(|e| e.to_string());
    if !args.host_root.is_dir() {
        eprintln!(
            "error: --host-root {} is not a directory",
            args.host_root.display()
        );
        return super::exit::USAGE;
    }
    let report = doctor::run(&Options {
        host_root: args.host_root,
        config,
        config_path,
        nvml_library: args.nvml_library,
        nvml_timeout: args.nvml_timeout,
        connect_timeout: Duration::from_secs(3),
    });
    let out = match args.format {
        Format::Table => report.text(),
        Format::Json => format!("{}\n", report.json()),
    };
    // A closed pipe (`| head`) is not an error of the doctor's: the verdict stays the exit code.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    report.exit_code()
}
