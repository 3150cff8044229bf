//! `tierd`: the one binary. Subcommands map onto the library crates; this file
//! only parses arguments, calls them and prints.

mod dst;
mod manual;
mod matrix;
mod probe;
mod reduce;
mod replay;
mod serve;
mod sim;
mod smr;
mod sweep;
mod trace;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
// The progress line lives beside the simulator's runs in tierd-lab.
use tierd_lab::progress;

#[derive(Parser)]
#[command(
    name = "tierd",
    version,
    about = "Tiered block storage engine and trace lab",
    long_about = "tierd moves hot segments of a slow volume to a fast tier in real time, and replays \
                  block traces to show whether that pays: `tierd serve` runs volumes over NBD, \
                  `tierd sim` replays traces through modelled tier stacks, `tierd trace` reads, \
                  converts and characterises traces."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Read, convert, characterise and generate block traces.
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// Replay a trace through a tier stack under several policies and compare
    /// them in the papers' tables. With no arguments: a generated usr_1-like
    /// spike workload on hdd-ssd, replayed x8, through none, otf-ast and atsmf.
    Sim(Box<sim::SimArgs>),
    /// Run a grid of simulations (traces × tier stacks × policies ×
    /// fast-tier sizes, SPEC.toml), each cell one run, the results one row
    /// each in a CSV or Parquet file; resumable; locally or on Ray.
    Sweep(sweep::SweepArgs),
    /// Serve tiered volumes over NBD. With no --config: a 1 GiB volume of a
    /// 256 MiB memory tier over a file tier in ./tierd-data, on a Unix socket.
    Serve(serve::ServeArgs),
    /// Placement by tier, tier usage, recent moves and their reasons, moves in flight.
    Status(serve::StatusArgs),
    /// Ask a running server to move a segment to a tier (operator move).
    Move(serve::MoveArgs),
    /// Pin a segment to a tier on a running server: it is moved there and
    /// no policy moves it until `tierd unpin` (or --until). Survives restarts.
    Pin(serve::PinArgs),
    /// End a segment's pin; policies may move it again.
    Unpin(serve::UnpinArgs),
    /// Switch a cache volume's mode on a running server (writeback,
    /// writethrough, writearound) or detach its cache; progress in `tierd status`.
    Cache(serve::CacheArgs),
    /// Fault drill on a running server: mark a tier (configured with
    /// `[tier.faults]`) gone or back.
    Fault(serve::FaultArgs),
    /// Replay a trace against a live NBD export, open-loop, and report
    /// response times in the simulator's format.
    Replay(replay::ReplayArgs),
    /// Deterministic simulation testing of the engine: seeded workloads,
    /// crashes and faults, every acknowledged write checked.
    Dst(dst::DstArgs),
    /// Print a shell completion script: `tierd completions bash >
    /// /etc/bash_completion.d/tierd` (also zsh, fish, elvish, powershell).
    Completions(manual::CompletionsArgs),
    /// Print the manual page `tierd.1` (roff), or write every page, one per
    /// subcommand, with --out DIR.
    Man(manual::ManArgs),
    /// Measure a disk with paper 001's microbenchmark (reads before and
    /// after sequential/random write loads): figures, CSV, JSON. Destroys
    /// the device's data (--destructive). --model smr-archive8tb runs it on
    /// a file with the emulated disk, in virtual time.
    Probe(Box<probe::ProbeArgs>),
    /// Device models: `tierd model fit PROBE.json` fits an SMR model to a probe.
    #[command(subcommand)]
    Model(probe::ModelCommand),
}

/// A failure to report to the user: the message says what went wrong, where,
/// and what to do. The library's error, so what tierd-lab reports reaches
/// the user unchanged (and Python users get the same text).
pub use tierd_lab::LabError as CliError;

/// Restores the default SIGPIPE action, so `tierd ... | head` ends quietly
/// when the reader goes away (Rust ignores SIGPIPE, which turns every later
/// `println!` into a "broken pipe" panic).
fn die_quietly_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; setting a
    // signal's disposition to SIG_DFL has no other precondition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    die_quietly_on_closed_pipe();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Trace(command) => trace::run(command),
        Command::Sim(args) => sim::run(*args),
        Command::Sweep(args) => sweep::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Status(args) => serve::status(args),
        Command::Move(args) => serve::move_segment(args),
        Command::Pin(args) => serve::pin(args),
        Command::Unpin(args) => serve::unpin(args),
        Command::Cache(args) => serve::cache(args),
        Command::Fault(args) => serve::fault(args),
        Command::Replay(args) => replay::run(args),
        Command::Dst(args) => dst::run(args),
        Command::Completions(args) => manual::completions(args),
        Command::Man(args) => manual::man(args),
        Command::Probe(args) => probe::run(*args),
        Command::Model(command) => probe::model(command),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError(message)) => {
            eprintln!("tierd: error: {message}");
            ExitCode::FAILURE
        }
    }
}
