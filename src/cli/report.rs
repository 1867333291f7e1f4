//! `gpuwatch report` (being written).

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn run(_args: ReportArgs) -> Result<(), Failure> {
    Err(fail(
        exit::FAILURE,
        anyhow::anyhow!("`gpuwatch report` is not written yet"),
    ))
}
