//! `gpuwatch query` (being written).

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn run(_args: QueryArgs) -> Result<(), Failure> {
    Err(fail(
        exit::FAILURE,
        anyhow::anyhow!("`gpuwatch query` is not written yet"),
    ))
}
