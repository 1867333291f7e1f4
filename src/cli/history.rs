//! `gpuwatch history` (being written).

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn run(_args: HistoryArgs) -> Result<(), Failure> {
    Err(fail(
        exit::FAILURE,
        anyhow::anyhow!("`gpuwatch history` is not written yet"),
    ))
}
