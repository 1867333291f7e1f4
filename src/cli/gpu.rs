//! `gpuwatch gpu set` and `gpuwatch gpu audit`: GPU settings changed through NVML, every
//! write audited (docs/MANAGEMENT.md). The work is `manage`'s; this file is the command line
//! and the text people read.
//!
//! Exit codes of `gpu set`: 0 every change applied (or already in place, or a dry run);
//! 1 a write failed — on some GPUs (the rest applied, every attempt audited) or everywhere
//! (NO_PERMISSION: one line with the fix) — or the audit could not be written; 2 a bad
//! command line or a change a GPU does not accept (nothing written); 3 NVML did not start.

use std::path::PathBuf;
use std::time::Duration;

use crate::manage::apply::{self, Done, StepResult};
use crate::manage::plan::{GpuPlan, Selector, gpu_label, parse_selectors};
use crate::manage::{self, ManageError, who::Actor};
use crate::sampler::nvml;
use crate::setting::{Change, ComputeMode, parse_clock_range, parse_watts};
use crate::store;

use super::{ConfigArgs, Failure, exit, fail};

/// How long one NVML call (a GPU's reads, one write) may take before it counts as hung.
const DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct GpuArgs {
    #[command(subcommand)]
    pub command: GpuCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum GpuCommand {
    /// Change GPU settings (power limit, persistence and compute modes, locked clocks); needs
    /// root or CAP_SYS_ADMIN. Everything is checked before the first write; every write is
    /// audited (`gpuwatch gpu audit`).
    Set(SetArgs),
    /// The audit of GPU setting changes: by `gpu set`, and by others as the daemon saw them.
    Audit(super::gpu_audit::AuditArgs),
    /// This host's GPUs judged from their stored samples (docs/HEALTH.md); `--slurm` for
    /// Slurm's HealthCheckProgram: one line, and the drain where [remediation] says so.
    Health(super::gpu_health::HealthArgs),
}

/// `--gpu`'s list.
#[derive(Debug, Clone)]
pub struct Selectors(pub Vec<Selector>);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true).args([
    "power_limit", "persistence", "lock_clocks", "reset_clocks", "lock_memory_clocks",
    "reset_memory_clocks", "compute_mode",
])))]
pub struct SetArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// NVML library to load (overrides `nvml_library` in the config).
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// The GPUs: an index, a UUID, several separated by commas, or `all`.
    #[arg(long, value_name = "N|UUID|all", value_parser = |s: &str| parse_selectors(s).map(Selectors))]
    pub gpu: Selectors,
    /// Power limit in watts; checked against the GPU's allowed range.
    #[arg(long, value_name = "W", value_parser = parse_watts)]
    pub power_limit: Option<u32>,
    /// Persistence mode: the driver stays loaded with no client.
    #[arg(long, value_enum, value_name = "on|off")]
    pub persistence: Option<OnOff>,
    /// Lock the graphics clocks to MIN,MAX MHz (within the supported clocks).
    #[arg(long, value_name = "MIN,MAX", value_parser = parse_clock_range, conflicts_with = "reset_clocks")]
    pub lock_clocks: Option<(u32, u32)>,
    /// Unlock the graphics clocks (the driver's default).
    #[arg(long)]
    pub reset_clocks: bool,
    /// Lock the memory clocks to MIN,MAX MHz (Ampere and later).
    #[arg(long, value_name = "MIN,MAX", value_parser = parse_clock_range, conflicts_with = "reset_memory_clocks")]
    pub lock_memory_clocks: Option<(u32, u32)>,
    /// Unlock the memory clocks.
    #[arg(long)]
    pub reset_memory_clocks: bool,
    /// Compute mode.
    #[arg(long, value_enum)]
    pub compute_mode: Option<ComputeMode>,
    /// Print each GPU's current → new values and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl SetArgs {
    fn changes(&self) -> Vec<Change> {
        let mut out = Vec::new();
        if let Some(mw) = self.power_limit {
            out.push(Change::PowerLimit { mw });
        }
        if let Some(p) = self.persistence {
            out.push(Change::Persistence(p == OnOff::On));
        }
        if let Some((min_mhz, max_mhz)) = self.lock_clocks {
            out.push(Change::LockClocks { min_mhz, max_mhz });
        }
        if self.reset_clocks {
            out.push(Change::ResetClocks);
        }
        if let Some((min_mhz, max_mhz)) = self.lock_memory_clocks {
            out.push(Change::LockMemoryClocks { min_mhz, max_mhz });
        }
        if self.reset_memory_clocks {
            out.push(Change::ResetMemoryClocks);
        }
        if let Some(m) = self.compute_mode {
            out.push(Change::ComputeMode(m));
        }
        out
    }
}

pub fn run(args: GpuArgs) -> Result<(), Failure> {
    match args.command {
        GpuCommand::Set(a) => set(a),
        GpuCommand::Audit(a) => super::gpu_audit::run(a),
        GpuCommand::Health(a) => super::gpu_health::run(a),
    }
}

fn set(a: SetArgs) -> Result<(), Failure> {
    let mut cfg = a.config.load().map_err(|e| fail(exit::USAGE, e))?;
    if let Some(lib) = a.nvml_library.clone() {
        cfg.nvml_library = Some(lib);
    }
    let handle = nvml::init(cfg.nvml_library.as_deref()).map_err(|e| fail(exit::NVML, e))?;
    let plans = manage::prepare(&handle.nvml, &a.gpu.0, &a.changes(), DEADLINE).map_err(|e| {
        let code = match e {
            ManageError::Invalid(_) => exit::USAGE,
            _ => exit::FAILURE,
        };
        fail(code, e)
    })?;
    if a.dry_run {
        print!("{}", dry_run(&plans));
        println!("dry run: nothing was changed");
        return Ok(());
    }
    // The audit first: no write happens that could not be recorded.
    let mut st =
        store::open(&cfg.database, &store::StoreConfig::new(cfg.host.clone())).map_err(|e| {
            fail(
                exit::FAILURE,
                anyhow::anyhow!(
                    "cannot open the audit database {}: {e}; nothing was changed (give --db \
                     or `database` in the config a writable path)",
                    cfg.database.display()
                ),
            )
        })?;
    crate::notify::recovered::announce(&st, &cfg);
    let mut shown = None;
    let summary = apply::apply(
        &handle.nvml,
        &plans,
        &mut st,
        &Actor::current(),
        DEADLINE,
        |d: &Done<'_>| {
            // NO_PERMISSION is said once, by the error line with its fix.
            if matches!(&d.result, StepResult::Failed(x) if *x == crate::sampler::diagnosis::NO_PERMISSION)
            {
                return;
            }
            if shown != Some(d.gpu.index) {
                println!("{} {}", gpu_label(d.gpu), d.gpu.uuid);
                shown = Some(d.gpu.index);
            }
            println!("  {}: {}", transition(d.step), outcome(&d.result));
        },
    )
    .map_err(|e| fail(exit::FAILURE, e))?;
    let before = match summary.applied {
        0 => "nothing was changed".to_string(),
        n => format!("{n} change(s) made before it stay"),
    };
    if let Some(why) = summary.stopped {
        return Err(fail(exit::FAILURE, anyhow::anyhow!("{why}; {before}")));
    }
    if !summary.failed.is_empty() {
        return Err(fail(
            exit::FAILURE,
            anyhow::anyhow!(
                "{} change(s) failed ({}), {} applied; every attempt is in `gpuwatch gpu audit`",
                summary.failed.len(),
                summary.failed.join(", "),
                summary.applied
            ),
        ));
    }
    Ok(())
}

/// `power limit 700 W → 500 W` (`unknown` where NVML cannot tell the current value).
fn transition(step: &crate::manage::plan::Step) -> String {
    format!(
        "{} {} → {}",
        step.change.setting().label(),
        step.old.as_deref().unwrap_or("unknown"),
        step.change.text()
    )
}

fn outcome(r: &StepResult) -> String {
    match r {
        StepResult::Applied => "ok".into(),
        StepResult::Unchanged => "unchanged (already set)".into(),
        StepResult::Failed(d) => format!("FAILED: NVML {}", apply::failure_text(d)),
        StepResult::Unknown(h) => format!("UNKNOWN: {h}"),
    }
}

/// Every GPU's current → new values.
fn dry_run(plans: &[GpuPlan]) -> String {
    let mut out = String::new();
    for p in plans {
        out.push_str(&format!("{} {}\n", gpu_label(&p.gpu), p.gpu.uuid));
        for s in &p.steps {
            let note = if s.unchanged() { " (unchanged)" } else { "" };
            out.push_str(&format!("  {}{note}\n", transition(s)));
        }
    }
    out
}
