//! `gpuwatch import openmetrics` (being written).

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct ImportOmArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn run(_args: ImportOmArgs) -> Result<(), Failure> {
    Err(fail(
        exit::FAILURE,
        anyhow::anyhow!("`gpuwatch import openmetrics` is not written yet"),
    ))
}
