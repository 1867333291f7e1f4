//! `gpuwatch history`: GPU metrics over a time range ([`crate::views::history`]) from the
//! configured database, opened read-only; a window without data says where the data is.

use anyhow::anyhow;

use super::{ConfigArgs, Failure, exit, fail, view};
use crate::store::{self, window};
use crate::views::history::{HistoryQuery, output};

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub query: HistoryQuery,
}

pub fn run(args: HistoryArgs) -> Result<(), Failure> {
    let q = &args.query;
    window::resolve_metrics(&q.metric).map_err(|e| fail(exit::USAGE, anyhow!("--metric: {e}")))?;
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let now = crate::clock::now_ms();
    // A window without data: where the data is, not a table of dashes.
    let (from, to) = crate::views::history::window(q, &conn, now).map_err(view)?;
    if let Some(hint) =
        crate::views::timearg::no_data_hint(&conn, q.host.as_deref(), from, to, false)?
    {
        return Err(fail(exit::FAILURE, anyhow!(hint)));
    }
    print!("{}", output(q, &conn, now).map_err(view)?);
    Ok(())
}
