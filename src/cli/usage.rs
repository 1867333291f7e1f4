//! `gpuwatch usage`: the usage ledger of [`crate::views::usage`] from the configured
//! database, opened read-only (beside a running daemon), priced by `[usage]`.

use super::{ConfigArgs, Failure, exit, fail, view};
use crate::store;
use crate::views::usage::{UsageQuery, output};

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub query: UsageQuery,
}

pub fn run(args: UsageArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let out = output(
        &args.query,
        &conn,
        &cfg.usage,
        chrono::Utc::now().timestamp_millis(),
    )
    .map_err(|e| e.context(format!("reading GPU usage from {}", cfg.database.display())))
    .map_err(view)?;
    print!("{out}");
    Ok(())
}
