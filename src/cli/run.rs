//! `gpuwatch run`: the long-running daemon.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::alerts::evaluator::{Reload, Reloader};
use crate::clock::WallTicker;
use crate::daemon::{self, DaemonParts};
use crate::sampler::nvml;
use crate::sampler::procs::ProcessOverrides;

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// NVML library to load (overrides `nvml_library` in the config).
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// Check the configuration and exit without sampling.
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    let mut cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    if let Some(lib) = args.nvml_library {
        cfg.nvml_library = Some(lib);
    }
    let rules = crate::rules::load_configured(cfg.rules.default_rules, &cfg.rules.files)
        .map_err(|e| fail(exit::USAGE, e))?;
    if args.check {
        let on = rules.iter().filter(|r| r.enabled).count();
        println!(
            "configuration OK; host {}; database {}; {on} rules enabled",
            cfg.host,
            cfg.database.display()
        );
        return Ok(());
    }
    // Refused before NVML starts (which can block on a stuck driver): the daemon takes the
    // lock itself when it opens the database.
    if let Some(pid) = crate::store::DaemonLock::holder(&cfg.database) {
        return Err(fail(
            exit::FAILURE,
            crate::store::StoreError::Locked {
                db: cfg.database.clone(),
                pid,
            },
        ));
    }
    let handle = nvml::init(cfg.nvml_library.as_deref()).map_err(|e| fail(exit::NVML, e))?;
    let stop = Arc::new(AtomicBool::new(false));
    // SIGHUP reloads the rules (the config's [rules] section and the files it names); a bad
    // file is reported and the running rules stay.
    let hup = Arc::new(AtomicBool::new(false));
    crate::clock::watch_signals(stop.clone(), Some(hup.clone())).map_err(|e| {
        fail(
            exit::FAILURE,
            anyhow::anyhow!("cannot install signal handler: {e}"),
        )
    })?;
    let config_args = args.config.clone();
    let reloader: Reloader = Box::new(move || {
        let cfg = config_args.load().map_err(|e| e.to_string())?;
        crate::rules::load_configured(cfg.rules.default_rules, &cfg.rules.files)
            .map_err(|e| e.to_string())
    });
    let interval = cfg.interval;
    let summary = daemon::run(
        DaemonParts {
            config: cfg,
            rules,
            alert_sink: None,
            reload: Some(Reload {
                requested: hup,
                load: reloader,
            }),
            nvml: handle,
            ticker: Box::new(WallTicker::new(interval)),
            overrides: ProcessOverrides::default(),
            observer: None,
        },
        stop,
    )?;
    tracing::info!(ticks = summary.ticks, "stopped cleanly");
    Ok(())
}
