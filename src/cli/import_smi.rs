//! `gpuwatch import nvidia-smi` (being written).

use super::{ConfigArgs, Failure, exit, fail};

#[derive(Debug, clap::Args)]
pub struct ImportSmiArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub fn run(_args: ImportSmiArgs) -> Result<(), Failure> {
    Err(fail(
        exit::FAILURE,
        anyhow::anyhow!("`gpuwatch import nvidia-smi` is not written yet"),
    ))
}
