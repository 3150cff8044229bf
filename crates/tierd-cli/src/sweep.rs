//! `tierd sweep SPEC.toml --out FILE`: the grid of a spec, every cell one
//! `tierd sim` run, rows appended to FILE as they finish, resumable
//! (tierd_lab::sweep). The local executor runs here; `--executor ray`
//! hands the same spec to the Python package's Ray executor, whose tasks
//! call the same per-cell function through the module.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tierd_lab::sweep::{plan, run_local, Output, Spec};

use crate::CliError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Executor {
    /// Threads over this machine's cores.
    Local,
    /// A Ray cluster, through the Python package (`python3 -m tierd.sweep`).
    Ray,
}

#[derive(Args)]
pub struct SweepArgs {
    /// The grid: `traces` (paths or globs; a table with `path`, `format`,
    /// `volume` = NAME or "each"), `tiers`, `policies`, and optionally
    /// `fast_bytes`, `segment_bytes`, `cache_block` (lists), `queue_depth`,
    /// `speed`, `seed` (docs/python.md, "Sweeps").
    spec: PathBuf,
    /// Output: FILE.csv, or FILE.parquet (its rows also in
    /// FILE.parquet.rows.csv). Cells already in it are skipped.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Where cells run.
    #[arg(long, value_enum, default_value = "local")]
    executor: Executor,
    /// Local executor: cells at the same time; default: the available cores.
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Ray executor: the cluster's address (default: a local Ray instance,
    /// or RAY_ADDRESS).
    #[arg(long, value_name = "ADDRESS")]
    ray_address: Option<String>,
    /// Ray executor: retries of a failed task before it is reported.
    #[arg(long, value_name = "N", default_value_t = 2)]
    max_retries: u32,
    /// Also write the sweep report (one HTML page: curves per trace, the
    /// per-policy win table) into DIR.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

pub fn run(args: SweepArgs) -> Result<(), CliError> {
    if args.executor == Executor::Ray {
        return ray(&args);
    }
    let spec = Spec::load(&args.spec)?;
    let cells = plan(&spec, &args.spec.display().to_string())?;
    let output = Output::open(&args.out)?;
    let summary = run_local(&cells, &output, args.jobs, true, &|line| {
        eprintln!("{line}")
    })?;
    eprintln!(
        "tierd sweep: {} cell(s): {} run, {} done before, {} failed; rows in {}",
        summary.cells,
        summary.ran,
        summary.skipped,
        summary.failed.len(),
        output.path().display()
    );
    if let Some(directory) = &args.report {
        let index = tierd_lab::sweep_report::write(output.journal(), directory)?;
        eprintln!("tierd sweep: report written to {}", index.display());
    }
    if !summary.failed.is_empty() {
        return Err(CliError(format!(
            "{} cell(s) failed (listed above); their rows are missing, so running the same command again retries them",
            summary.failed.len()
        )));
    }
    Ok(())
}

/// `--executor ray`: `python3 -m tierd.sweep` with the same arguments
/// (TIERD_PYTHON names another interpreter).
fn ray(args: &SweepArgs) -> Result<(), CliError> {
    let python = std::env::var("TIERD_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let check = std::process::Command::new(&python)
        .args(["-c", "import tierd, ray"])
        .output()
        .map_err(|error| {
            CliError(format!(
                "--executor ray runs the Python package, and {python} did not start: {error}; install Python 3 or set TIERD_PYTHON"
            ))
        })?;
    if !check.status.success() {
        return Err(CliError(format!(
            "--executor ray needs the tierd Python package and Ray in {python}: {}; install them with `pip install ./python ray` (or set TIERD_PYTHON to a Python that has them)",
            String::from_utf8_lossy(&check.stderr)
                .lines()
                .last()
                .unwrap_or("import failed")
        )));
    }
    let mut command = std::process::Command::new(&python);
    command
        .args(["-m", "tierd.sweep"])
        .arg(&args.spec)
        .arg("--out")
        .arg(&args.out)
        .args(["--executor", "ray", "--max-retries"])
        .arg(args.max_retries.to_string());
    if let Some(address) = &args.ray_address {
        command.args(["--ray-address", address]);
    }
    if let Some(directory) = &args.report {
        command.arg("--report").arg(directory);
    }
    let status = command
        .status()
        .map_err(|error| CliError(format!("{python} -m tierd.sweep: {error}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(CliError(format!(
            "{python} -m tierd.sweep --executor ray failed ({status})"
        )))
    }
}
