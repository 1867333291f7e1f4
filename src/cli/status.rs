//! `gpuwatch status`: the GPUs as the database last saw them ([`crate::views::status`]).

use super::{ConfigArgs, Failure, exit, fail};
use crate::clock::now_ms;
use crate::store;
use crate::views::status::Status;

#[derive(Debug, Clone, Copy, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    /// For people: aligned columns (also accepted as `text`).
    #[value(alias = "text")]
    Table,
    /// One JSON document: the GPUs with their latest sample, health and processes, and the outbox.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Output format: `table` for people, `json` for programs (the same document as
    /// GET /api/v1/status).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Show only this host (default: every host in the database).
    #[arg(long)]
    pub host: Option<String>,
}

pub fn run(args: StatusArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let now = now_ms();
    let st = Status::read(&conn, &cfg, args.host.as_deref(), now)?;
    match args.format {
        Format::Json => println!("{}", st.json(&cfg)),
        Format::Table => print!("{}", st.table(&cfg, now)),
    }
    Ok(())
}
