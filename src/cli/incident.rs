//! `gpuwatch incident` (being written).

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct IncidentArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn run(_args: IncidentArgs) -> Result<(), Failure> {
    Err(fail(
        exit::FAILURE,
        anyhow::anyhow!("`gpuwatch incident` is not written yet"),
    ))
}
