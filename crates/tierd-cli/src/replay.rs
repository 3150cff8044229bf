//! `tierd replay` (being written: see issue 4).

use clap::Args;

use crate::CliError;

#[derive(Args)]
pub struct ReplayArgs {
    #[arg(long)]
    pub trace: std::path::PathBuf,
    #[arg(long)]
    pub target: String,
}

pub fn run(_args: ReplayArgs) -> Result<(), CliError> {
    Err(CliError("tierd replay: not built yet".into()))
}
