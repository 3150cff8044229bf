//! `tierd completions SHELL` and `tierd man`: shell completions and manual
//! pages generated from the CLI definition itself (clap_complete,
//! clap_mangen), so they never drift from the arguments `tierd` accepts.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::{Cli, CliError};

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for (bash, zsh, fish, elvish, powershell).
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Args)]
pub struct ManArgs {
    /// Write `tierd.1` and one page per subcommand (`tierd-serve.1`, ...)
    /// into this directory (created if missing) instead of printing
    /// `tierd.1` to standard output.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Prints the completion script for `args.shell` on standard output.
pub fn completions(args: CompletionsArgs) -> Result<(), CliError> {
    let mut command = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut command, "tierd", &mut out);
    out.flush()?;
    Ok(())
}

/// Prints `tierd.1`, or writes every page into `--out`.
pub fn man(args: ManArgs) -> Result<(), CliError> {
    let command = Cli::command();
    match args.out {
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(command).render(&mut out)?;
            out.flush()?;
        }
        Some(dir) => {
            let written = write_pages(&command, &dir)?;
            for path in written {
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

/// Writes `tierd.1` and `tierd-SUBCOMMAND.1` (nested ones too, named by
/// their path) into `dir`; the paths written.
fn write_pages(command: &clap::Command, dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|error| CliError(format!("creating {}: {error}", dir.display())))?;
    let mut written = Vec::new();
    let mut pending = vec![(command.clone().name("tierd"), "tierd".to_string())];
    while let Some((command, name)) = pending.pop() {
        for sub in command.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let sub_name = format!("{name}-{}", sub.get_name());
            pending.push((sub.clone().name(sub_name.clone()), sub_name));
        }
        let path = dir.join(format!("{name}.1"));
        let mut bytes = Vec::new();
        clap_mangen::Man::new(command).render(&mut bytes)?;
        std::fs::write(&path, bytes)
            .map_err(|error| CliError(format!("writing {}: {error}", path.display())))?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}
