//! `gpuwatch alerts` (being written).

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct AlertsArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn run(_args: AlertsArgs) -> Result<(), Failure> {
    Err(fail(
        exit::FAILURE,
        anyhow::anyhow!("`gpuwatch alerts` is not written yet"),
    ))
}
