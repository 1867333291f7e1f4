//! `gpuwatch status`: the GPUs as the database last saw them.

use crate::clock::now_ms;
use crate::store;

use super::format;
use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    Table,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Show only this host (default: every host in the database).
    #[arg(long)]
    pub host: Option<String>,
}

pub fn run(args: StatusArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let rows = store::read::latest_per_gpu(&conn, args.host.as_deref(), now_ms())?;
    let stale = cfg.http.stall_after.as_millis() as i64;
    match args.format {
        Format::Table if rows.is_empty() => {
            println!("no GPUs recorded in {} yet", cfg.database.display());
        }
        Format::Table => print!("{}", format::table(&rows, stale)),
        Format::Json => println!("{}", format::json(&rows, stale)),
    }
    Ok(())
}
