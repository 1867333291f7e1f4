//! `gpuwatch gpu audit`: the GPU settings audit of [`crate::views::gpu_audit`] from the
//! configured database, opened read-only.

use super::{ConfigArgs, Failure, exit, fail, view};
use crate::store;
use crate::views::gpu_audit::{AuditQuery, output};

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub query: AuditQuery,
}

pub fn run(args: AuditArgs) -> Result<(), Failure> {
    let cfg = args.config.load().map_err(|e| fail(exit::USAGE, e))?;
    let conn = store::open_read_only(&cfg.database)?;
    let out = output(&args.query, &conn, crate::clock::now_ms())
        .map_err(|e| e.context(format!("reading the audit from {}", cfg.database.display())))
        .map_err(view)?;
    print!("{out}");
    Ok(())
}
