//! `tierd serve`, `tierd status`, `tierd move` (being written: see issue 4).

use clap::Args;

use crate::CliError;

#[derive(Args)]
pub struct ServeArgs {
    /// TOML configuration (tiers, volumes, listen addresses, metadata dir).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct MoveArgs {
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
}

pub fn run(_args: ServeArgs) -> Result<(), CliError> {
    Err(CliError("tierd serve: not built yet".into()))
}

pub fn status(_args: StatusArgs) -> Result<(), CliError> {
    Err(CliError("tierd status: not built yet".into()))
}

pub fn move_segment(_args: MoveArgs) -> Result<(), CliError> {
    Err(CliError("tierd move: not built yet".into()))
}
