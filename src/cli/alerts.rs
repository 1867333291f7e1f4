//! `gpuwatch alerts`: the alert history of [`crate::views::alerts`] from the configured
//! database, opened read-only (beside a running daemon).

use super::{ConfigArgs, Failure, exit, fail, view};
use crate::store;
use crate::views::alerts::{AlertsQuery, output};

#[derive(Debug, clap::Args)]
pub struct AlertsArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub query: AlertsQuery,
}

pub fn run(args: AlertsArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let out = output(&args.query, &conn, chrono::Utc::now().timestamp_millis())
        .map_err(|e| e.context(format!("reading alerts from {}", cfg.database.display())))
        .map_err(view)?;
    print!("{out}");
    Ok(())
}
