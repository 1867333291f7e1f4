//! `gpuwatch export` (being written).

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn run(_args: ExportArgs) -> Result<(), Failure> {
    Err(fail(
        exit::FAILURE,
        anyhow::anyhow!("`gpuwatch export` is not written yet"),
    ))
}
