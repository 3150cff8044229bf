//! `tierd replay`: replay a block trace against a live NBD export, open
//! loop, and report response times in the simulator's format
//! (`docs/engine/replay.md`). The load generator is `tierd_load`; this
//! module parses the flags, prints and sets the exit code.

use std::io::Write as _;
use std::path::PathBuf;

use clap::Args;
use tierd_common::clock::SystemClock;
use tierd_common::units::parse_duration_ns;
use tierd_load::{LoadError, Plan, Progress, ReplayOptions, TraceSource};
use tierd_sim::Window;
use tierd_trace::{Format, OpenOptions};

use crate::progress::ProgressLine;
use crate::CliError;

#[derive(Args)]
pub struct ReplayArgs {
    /// Trace file in any format tierd reads (.gz/.bz2/.xz/.zst transparently).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_name = "FORMAT")]
    format: Option<Format>,
    /// Keep only this volume of a multi-volume trace (MSR `hm_0`, SPC ASU, ...).
    #[arg(long, value_name = "NAME")]
    volume: Option<String>,
    /// Skip malformed lines instead of stopping at the first.
    #[arg(long)]
    skip_bad_lines: bool,
    /// The export: nbd+unix:///NAME?socket=PATH or nbd://HOST[:PORT]/NAME.
    #[arg(long, value_name = "URI")]
    target: String,
    /// Replay acceleration: request i is issued (t_i - t_0) / X after the start.
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    speed: f64,
    /// Replay only from this many minutes after the trace's first request.
    #[arg(long, value_name = "MINUTES")]
    from_min: Option<f64>,
    /// ... up to this many minutes after it (trace time, before --speed).
    #[arg(long, value_name = "MINUTES")]
    to_min: Option<f64>,
    /// Most requests outstanding over all connections; a request due while
    /// this many are outstanding waits for a completion (a late issue).
    #[arg(long, value_name = "N", default_value_t = tierd_load::DEFAULT_MAX_INFLIGHT)]
    max_inflight: u32,
    /// NBD connections to spread the requests over (round robin).
    #[arg(long, value_name = "N", default_value_t = 1)]
    connections: u32,
    /// Period of the per-period series (iops over time, the plots), replay
    /// time; default: one that fits the run, about 60 points over the
    /// replay's length (100ms, 200ms, 500ms, 1s, 2s, 5s, 10s, 15s, 30s, at
    /// most 60s).
    #[arg(long, value_parser = duration_ns)]
    period: Option<u64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the simulator's HTML report into DIR (response-time CDF,
    /// iops per period, heat map of the replayed trace, CSVs, result.json).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Name of the run in the tables and JSON (the simulator's policy column).
    #[arg(long, value_name = "TEXT", default_value = "live")]
    label: String,
    /// Wrap requests that end past the export onto it (offset modulo its
    /// size in 4 KiB pages) instead of refusing to start, which is the
    /// default, as `tierd sim` refuses requests past its volume.
    #[arg(long, conflicts_with = "verify_size")]
    wrap: bool,
    /// Refuse to start when a request ends past the export: the default
    /// (kept so scripts that pass it keep working).
    #[arg(long)]
    verify_size: bool,
    /// Before the replay, write every byte range the window reads (merged,
    /// in the writes' pattern) and FLUSH, untimed: a fresh export then
    /// holds data wherever the trace reads (a replicated or reduced tier
    /// reads never-written space as zeroes without any device IO).
    #[arg(long)]
    prefill: bool,
}

fn duration_ns(text: &str) -> Result<u64, String> {
    match parse_duration_ns(text) {
        Ok(0) => Err("must be longer than zero".to_string()),
        Ok(value) => Ok(value),
        Err(error) => Err(error.to_string()),
    }
}

/// The library's error as the command reports it: a bad URI names the flag.
fn cli_error(error: LoadError) -> CliError {
    match error {
        LoadError::Uri(error) => CliError(format!("--target: {error}")),
        other => CliError(other.to_string()),
    }
}

/// The progress line (`tierd_lab::progress`) as the load generator's progress.
struct ReplayProgress(ProgressLine);

impl Progress for ReplayProgress {
    fn is_shown(&self) -> bool {
        self.0.is_shown()
    }

    fn update(&self, completed: u64, eta_ns: u64) {
        self.0.update_with_eta(completed, Some(eta_ns));
    }

    fn finish(&self) {
        self.0.finish();
    }
}

/// The flags as the library's options, checked with the flags' names.
fn options(args: &ReplayArgs) -> Result<ReplayOptions, CliError> {
    if !(args.speed.is_finite() && args.speed > 0.0) {
        return Err(CliError(format!(
            "--speed {} is not a factor > 0",
            args.speed
        )));
    }
    if args.max_inflight == 0 {
        return Err(CliError("--max-inflight must be at least 1".into()));
    }
    if !(1..=tierd_load::target::MAX_CONNECTIONS).contains(&args.connections) {
        return Err(CliError(format!(
            "--connections {} is not between 1 and {}",
            args.connections,
            tierd_load::target::MAX_CONNECTIONS
        )));
    }
    let window = Window {
        from_ns: tierd_lab::sim::minutes_ns("from-min", args.from_min)?,
        to_ns: tierd_lab::sim::minutes_ns("to-min", args.to_min)?,
    };
    if let (Some(from), Some(to)) = (window.from_ns, window.to_ns) {
        if to <= from {
            return Err(CliError("--to-min must be later than --from-min".into()));
        }
    }
    let trace = TraceSource {
        path: args.trace.clone(),
        options: OpenOptions {
            format: args.format,
            volume: args.volume.clone(),
            skip_bad_lines: args.skip_bad_lines,
            ..OpenOptions::default()
        },
    };
    Ok(ReplayOptions {
        speed: args.speed,
        window,
        max_inflight: args.max_inflight,
        connections: args.connections,
        period_ns: args.period,
        label: args.label.clone(),
        wrap: args.wrap,
        ..ReplayOptions::new(trace, args.target.clone())
    })
}

/// What `--prefill` did, for stderr and the report's notes.
fn prefill_note(prefilled: &tierd_load::Prefilled) -> String {
    format!(
        "prefilled {} in {} ranges the trace reads ({} writes, then a FLUSH) in {:.2} s, before the replay (not in its figures)",
        tierd_common::units::Bytes(prefilled.bytes),
        prefilled.ranges,
        prefilled.writes,
        prefilled.wall_ns as f64 / 1e9
    )
}

pub fn run(args: ReplayArgs) -> Result<(), CliError> {
    let options = options(&args)?;
    // Parses the whole trace before connecting: a bad line stops here.
    let plan = Plan::new(options).map_err(cli_error)?;
    let trace_name = plan.options.trace.name();
    if plan.untimed() {
        eprintln!(
            "{}",
            crate::sim::untimed_warning(&trace_name, Some(plan.scan.requests), "tierd replay")
        );
    }
    let mut connected = plan.connect().map_err(cli_error)?;
    let prefilled = if args.prefill {
        let prefilled = plan
            .prefill(&mut connected, &SystemClock::new())
            .map_err(cli_error)?;
        eprintln!("tierd replay: {}", prefill_note(&prefilled));
        Some(prefilled)
    } else {
        None
    };
    eprintln!("tierd replay: {}", plan.summary(&connected));
    let progress = ReplayProgress(ProgressLine::new(
        "tierd replay",
        "replayed",
        Some(plan.scan.requests),
    ));
    let mut outcome = plan
        .run(connected, &SystemClock::new(), &progress)
        .map_err(cli_error)?;
    if let Some(prefilled) = prefilled {
        outcome.report.notes.push(prefill_note(&prefilled));
        outcome.report.prefill = Some(prefilled);
    }
    let live = &outcome.report;
    eprintln!(
        "tierd replay: {} requests completed in {:.2} s wall",
        live.runs[0].run.requests,
        outcome.wall_ns as f64 / 1e9
    );
    if args.json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, live)?;
        writeln!(out)?;
    } else {
        print!("{}", tierd_load::report::render_text(live));
    }
    if let Some(directory) = &args.report {
        let index = plan.write_html(directory, live).map_err(cli_error)?;
        eprintln!("tierd replay: report written to {}", index.display());
    }
    if outcome.failures.is_empty() {
        Ok(())
    } else {
        Err(CliError(outcome.failures.join("; ")))
    }
}
