//! `tierd sim` as a library: replay a trace (or a generated spike workload)
//! through a tier stack under several policies at once. The CLI parses its
//! flags into [`SimSettings`]; the Python module builds the same settings
//! from keyword arguments; both call [`simulate`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use tierd_common::clock::{Clock, SystemClock};
use tierd_common::units::NS_PER_SECOND;
use tierd_sim::stack::{AdmissionKind, CacheMode};
use tierd_sim::{Replay, RunResult, SimConfig, SimError, SimReport, Strategy, TierStack, Window};
use tierd_trace::{open_trace, Format, IteratorReader, OpenOptions, TraceReader};

use crate::progress::ProgressLine;
use crate::LabError as CliError;

/// The synthetic preset `tierd sim` replays when no trace is given.
pub const DEFAULT_PRESET: &str = "usr_1";
pub const DEFAULT_POLICIES: &str = "adaptive,none,otf-ast,atsmf";

/// Everything a replay takes (the flags of `tierd sim` other than the
/// output ones; docs/sim.md). [`Default`] is what `tierd sim` runs with no
/// flags.
#[derive(Clone, Debug)]
pub struct SimSettings {
    /// Trace file in any format tierd reads; `None`: the synthetic preset.
    pub trace: Option<PathBuf>,
    pub format: Option<Format>,
    pub volume: Option<String>,
    pub skip_bad_lines: bool,
    /// Synthetic preset (or `shape:NAME`) when no trace is given.
    pub synth: String,
    pub hours: Option<f64>,
    /// Tier stack preset or TOML file.
    pub tiers: String,
    /// Comma-separated policies.
    pub policy: String,
    pub policy_config: Option<PathBuf>,
    pub segment_bytes: Option<u64>,
    pub volume_bytes: Option<u64>,
    pub speed: Option<f64>,
    pub from_min: Option<f64>,
    pub to_min: Option<f64>,
    pub max_outstanding: u32,
    pub queue_depth: Option<u32>,
    pub period: Option<u64>,
    /// Comma-separated fast-tier sizes (absolute or % of the working set).
    pub fast_bytes: Option<String>,
    pub cache_bytes: Option<u64>,
    pub cache_block: Option<u64>,
    pub cache_mode: Option<CacheMode>,
    pub admission: Option<AdmissionKind>,
    pub sequential_cutoff: Option<u64>,
    pub smr_staging: Option<bool>,
    /// Comma-separated replica settings (off, one, many, contiguous): one
    /// run per setting (paper 003, docs/replicas.md).
    pub replicas: Option<String>,
    pub seed: u64,
    /// Runs at the same time; default: the available cores.
    pub jobs: Option<usize>,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            trace: None,
            format: None,
            volume: None,
            skip_bad_lines: false,
            synth: DEFAULT_PRESET.to_string(),
            hours: None,
            tiers: "hdd-ssd".to_string(),
            policy: DEFAULT_POLICIES.to_string(),
            policy_config: None,
            segment_bytes: None,
            volume_bytes: None,
            speed: None,
            from_min: None,
            to_min: None,
            max_outstanding: tierd_sim::config::DEFAULT_MAX_OUTSTANDING_REQUESTS,
            queue_depth: None,
            period: None,
            fast_bytes: None,
            cache_bytes: None,
            cache_block: None,
            cache_mode: None,
            admission: None,
            sequential_cutoff: None,
            smr_staging: None,
            replicas: None,
            seed: 1,
            jobs: None,
        }
    }
}

/// A finished [`simulate`]: the report `tierd sim --json` prints, the
/// settings of its first size and where the requests came from (for
/// [`write_report`]).
pub struct Simulation {
    pub report: SimReport,
    pub config: SimConfig,
    pub source: Source,
}

/// A cache block as `--cache-block` takes it: a power of two from 4KiB to 1MiB.
pub fn parse_cache_block(text: &str) -> Result<u64, String> {
    let value = tierd_common::units::parse_bytes(text).map_err(|error| error.to_string())?;
    tierd_sim::stack::check_cache_block_bytes("options", "cache_block", value).map_err(|_| {
        format!("{value} bytes: a cache block is a power of two from 4KiB to 1MiB (4KiB, 8KiB, ..., 1MiB)")
    })?;
    Ok(value)
}

/// A period as `--period` takes it (`60s`, `24s`): longer than zero.
pub fn parse_period(text: &str) -> Result<u64, String> {
    match tierd_common::units::parse_duration_ns(text) {
        Ok(0) => Err("must be longer than zero".to_string()),
        Ok(value) => Ok(value),
        Err(error) => Err(error.to_string()),
    }
}

/// `on` or `off` (`--smr-staging`).
pub fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other:?}: expected on or off")),
    }
}

/// The acceleration the papers replayed a volume at (000 §5.1 Table 2).
pub fn paper_speed(preset: &str) -> f64 {
    match preset {
        "usr_1" | "web_2" => 8.0,
        "proj_2" | "proj_4" => 2.0,
        _ => 1.0,
    }
}

/// `--from-min`/`--to-min` (named `option` in the error) in nanoseconds.
pub fn minutes_ns(option: &str, minutes: Option<f64>) -> Result<Option<u64>, CliError> {
    match minutes {
        None => Ok(None),
        Some(value) if (0.0..1e9).contains(&value) => {
            Ok(Some((value * 60.0 * NS_PER_SECOND as f64).round() as u64))
        }
        Some(value) => Err(CliError(format!(
            "--{option} {value} is not a number of minutes >= 0"
        ))),
    }
}

/// Where requests come from; each run opens its own reader.
pub enum Source {
    File {
        path: PathBuf,
        options: OpenOptions,
    },
    Synthetic {
        preset: &'static tierd_synth::Preset,
        seed: u64,
        hours: f64,
        label: String,
    },
}

impl Source {
    pub fn open(&self) -> Result<Box<dyn TraceReader>, CliError> {
        match self {
            Source::File { path, options } => Ok(open_trace(path, options)?),
            Source::Synthetic {
                preset,
                seed,
                hours,
                label,
            } => {
                let generator = tierd_synth::Generator::new(preset, *seed, *hours)?;
                Ok(Box::new(IteratorReader::new(
                    generator,
                    &[preset.volume_name],
                    Format::Tierd,
                    label,
                )))
            }
        }
    }

    pub fn provenance(&self) -> (String, &'static str) {
        match self {
            Source::File { path, .. } => (path.display().to_string(), "file"),
            Source::Synthetic { label, .. } => (label.clone(), "synthetic"),
        }
    }
}

/// What one pass over a trace found.
pub struct Scan {
    /// The highest byte a request touches.
    pub end_bytes: u64,
    pub requests: u64,
    /// Two requests with different times exist.
    pub timed: bool,
    /// Distinct bytes touched inside the window, when asked for.
    pub working_set_bytes: Option<u64>,
}

/// The highest byte a trace touches, its request count, whether it has
/// timestamps and (with `window`) the working set inside the window (one
/// pass).
pub fn scan(source: &Source, window: Option<Window>) -> Result<Scan, CliError> {
    let mut reader = source.open()?;
    let mut scan = Scan {
        end_bytes: 0,
        requests: 0,
        timed: false,
        working_set_bytes: None,
    };
    let mut working_set = tierd_sim::sweep::WorkingSet::default();
    let mut first_ns = None;
    while let Some(request) = reader.next_request()? {
        scan.end_bytes = scan.end_bytes.max(request.end_bytes());
        scan.requests += 1;
        let first = *first_ns.get_or_insert(request.time_ns);
        scan.timed |= first != request.time_ns;
        if let Some(window) = window {
            let since = request.time_ns.saturating_sub(first);
            let inside = window.from_ns.is_none_or(|from| since >= from)
                && window.to_ns.is_none_or(|to| since < to);
            if inside {
                working_set.add(request.offset_bytes, request.length_bytes);
            }
        }
    }
    scan.working_set_bytes = window.map(|_| working_set.bytes());
    Ok(scan)
}

/// Whether two requests of the trace have different times: reads up to the
/// first such pair (at once for a timed trace; the whole trace when it has
/// no timestamps).
fn has_timestamps(source: &Source) -> Result<bool, CliError> {
    let mut reader = source.open()?;
    let mut first_ns = None;
    while let Some(request) = reader.next_request()? {
        if *first_ns.get_or_insert(request.time_ns) != request.time_ns {
            return Ok(true);
        }
    }
    Ok(first_ns.is_none())
}

/// The warning for a trace without timestamps replayed open loop.
pub fn untimed_warning(trace: &str, requests: Option<u64>, command: &str) -> String {
    format!(
        "tierd: warning: {trace}: the trace has no timestamps (every request has the same time), so `{command}` issues {} at time 0, at once; for a load that means something, replay it closed loop (`tierd sim --queue-depth N`) or convert it from a format with times",
        requests.map_or_else(|| "all of them".to_string(), |count| format!("all {count} requests"))
    )
}

/// Runs every policy of `settings` at every fast-tier size, `jobs` at a
/// time, and builds the report `tierd sim --json` prints. `say` gets the
/// lines `tierd sim` writes on stderr (warnings, the working set, the
/// throughput); `progress` draws the progress line.
pub fn simulate(
    args: &SimSettings,
    say: &dyn Fn(&str),
    show_progress: bool,
) -> Result<Simulation, CliError> {
    let stack = TierStack::load(&args.tiers)?;
    let mut strategies = Strategy::parse_list(&args.policy)?;
    if let Some(path) = &args.policy_config {
        let text = std::fs::read_to_string(path)
            .map_err(|error| CliError(format!("{}: cannot read: {error}", path.display())))?;
        Strategy::apply_settings(&mut strategies, &text, &path.display().to_string())?;
    }
    let (source, default_speed, volume_from_source) = match &args.trace {
        Some(path) => (
            Source::File {
                path: path.clone(),
                options: OpenOptions {
                    format: args.format,
                    volume: args.volume.clone(),
                    skip_bad_lines: args.skip_bad_lines,
                    ..OpenOptions::default()
                },
            },
            1.0,
            None,
        ),
        None => {
            let preset = tierd_synth::preset(&args.synth)?;
            let hours = args.hours.unwrap_or(preset.default_hours);
            let label = tierd_synth::label(preset, args.seed, hours);
            (
                Source::Synthetic {
                    preset,
                    seed: args.seed,
                    hours,
                    label,
                },
                paper_speed(preset.name),
                Some(preset.volume_bytes),
            )
        }
    };
    let segment_bytes = args.segment_bytes.unwrap_or(stack.segment_bytes);
    let open_loop = args.queue_depth.is_none();
    let window = Window {
        from_ns: minutes_ns("from-min", args.from_min)?,
        to_ns: minutes_ns("to-min", args.to_min)?,
    };
    let fast_sizes = args
        .fast_bytes
        .as_deref()
        .map(tierd_sim::sweep::parse_fast_sizes)
        .transpose()
        .map_err(|message| CliError(format!("--fast-bytes: {message}")))?;
    if fast_sizes.is_some() && stack.tiers.len() < 2 {
        return Err(CliError(format!(
            "--fast-bytes: the tier stack {:?} has one tier and no fast tier to size",
            stack.name
        )));
    }
    // The working set is counted whenever a sweep is asked for (printed),
    // in the scan pass when there is one.
    let working_set_window = fast_sizes.is_some().then_some(window);
    let mut working_set_bytes = None;
    // Requests per run, for the progress line's total (the whole trace:
    // unknown with a window).
    let mut requests_per_run = None;
    let volume_bytes = match (args.volume_bytes, volume_from_source) {
        (Some(bytes), _) => {
            if open_loop && args.trace.is_some() && !has_timestamps(&source)? {
                say(&untimed_warning(&source.provenance().0, None, "tierd sim"));
            }
            bytes
        }
        (None, Some(bytes)) => bytes,
        (None, None) => {
            let scan = scan(&source, working_set_window)?;
            if scan.requests == 0 {
                return Err(CliError(format!(
                    "{}: no requests to replay",
                    source.provenance().0
                )));
            }
            if open_loop && !scan.timed && scan.requests > 1 {
                say(&untimed_warning(
                    &source.provenance().0,
                    Some(scan.requests),
                    "tierd sim",
                ));
            }
            if args.from_min.is_none() && args.to_min.is_none() {
                requests_per_run = Some(scan.requests);
            }
            working_set_bytes = scan.working_set_bytes;
            scan.end_bytes.div_ceil(segment_bytes).max(1) * segment_bytes
        }
    };
    if let (Some(window), None) = (working_set_window, working_set_bytes) {
        let mut reader = source.open()?;
        working_set_bytes = Some(tierd_sim::sweep::working_set_bytes(
            reader.as_mut(),
            window,
        )?);
    }
    let mut stack = stack;
    let cache = &mut stack.cache;
    cache.block_bytes = args.cache_block.unwrap_or(cache.block_bytes);
    cache.mode = args.cache_mode.unwrap_or(cache.mode);
    cache.admission = args.admission.unwrap_or(cache.admission);
    cache.sequential_cutoff_bytes = args
        .sequential_cutoff
        .unwrap_or(cache.sequential_cutoff_bytes);
    cache.smr_staging = args.smr_staging.unwrap_or(cache.smr_staging);
    let mut config = SimConfig::new(stack, volume_bytes);
    config.segment_bytes = segment_bytes;
    config.period_ns = args.period.unwrap_or(tierd_sim::config::DEFAULT_PERIOD_NS);
    config.period_per_policy = args.period.is_none();
    config.cache_bytes = args.cache_bytes;
    config.seed = args.seed;
    config.max_outstanding_requests = args.max_outstanding;
    config.replay = match args.queue_depth {
        Some(queue_depth) => Replay::ClosedLoop { queue_depth },
        None => Replay::OpenLoop {
            speed: args.speed.unwrap_or(default_speed),
        },
    };
    config.window = window;
    config.validate().map_err(option_names)?;
    // Every strategy gets the same fast tier: the stack's, or each size
    // of the sweep (which sets the fast tier's capacity).
    let sizes = match &fast_sizes {
        Some(list) => tierd_sim::sweep::resolve(list, working_set_bytes)
            .map_err(|message| CliError(format!("--fast-bytes: {message}")))?,
        None => vec![config.tier_capacity_bytes(0)],
    };
    if let Some(bytes) = working_set_bytes {
        say(&format!(
            "tierd sim: working set {} ({bytes} bytes: distinct 4 KiB blocks the replayed requests touch); fast-tier sizes {}",
            tierd_common::units::Bytes(bytes),
            sizes
                .iter()
                .map(|bytes| tierd_common::units::Bytes(*bytes).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let replica_settings = args
        .replicas
        .as_deref()
        .map(tierd_sim::replicas::ReplicaSetting::parse_list)
        .transpose()
        .map_err(|error| CliError(format!("--replicas: {error}")))?;
    let mut jobs: Vec<(SimConfig, Strategy)> = Vec::with_capacity(sizes.len() * strategies.len());
    for &bytes in &sizes {
        let sized = match fast_sizes {
            Some(_) => tierd_sim::sweep::with_fast_bytes(&config, bytes),
            None => config.clone(),
        };
        for strategy in &strategies {
            tierd_sim::build_controller(&sized, strategy).map_err(|error| match fast_sizes {
                Some(_) => CliError(format!(
                    "--fast-bytes {}: {}",
                    tierd_common::units::Bytes(bytes),
                    option_names(error).0
                )),
                None => option_names(error),
            })?;
            match &replica_settings {
                Some(replicas) => {
                    for setting in replicas {
                        let mut with = sized.clone();
                        with.replicas = Some(tierd_sim::replicas::ReplicaRun::new(
                            *setting,
                            &tierd_sim::replicas::ReplicaConfig::default(),
                        ));
                        jobs.push((with, strategy.clone()));
                    }
                }
                None => jobs.push((sized.clone(), strategy.clone())),
            }
        }
    }
    let tiering = strategies
        .iter()
        .any(|strategy| !strategy.is_cache() && strategy.name() != "none");
    let mut notes = tierd_sim::sweep::capacity_notes(
        segment_bytes,
        &sizes,
        tiering,
        config
            .cache_bytes
            .filter(|_| strategies.iter().any(Strategy::is_cache)),
    );
    if let Some(bytes) = working_set_bytes {
        notes.insert(
            0,
            format!(
                "working set {} (distinct 4 KiB blocks the replayed requests touch); --fast-bytes percentages are of it",
                tierd_common::units::Bytes(bytes)
            ),
        );
    }

    let clock = SystemClock::new();
    let results = run_all(&jobs, &source, args.jobs, requests_per_run, show_progress)?;
    let wall_ns = clock.now_ns().max(1);
    let requests: u64 = results.iter().map(|run| run.requests).sum();
    say(&format!(
        "tierd sim: {} run(s), {requests} requests in {:.2} s wall ({:.2} M requests/s over all runs)",
        results.len(),
        wall_ns as f64 / 1e9,
        requests as f64 * 1e3 / wall_ns as f64
    ));
    let (trace, kind) = source.provenance();
    let mut report = SimReport::new(trace, kind, &config.stack, results);
    report.notes = notes;
    report.working_set_bytes = working_set_bytes;
    Ok(Simulation {
        report,
        config,
        source,
    })
}

/// `--report DIR`. The runs keep no per-segment counts, so the heat map comes
/// from one more pass over the trace through `tierd_analysis` (the sim crate
/// does not depend on it): the run's window, replay time (as the other plots),
/// segment size, and the first run's period.
pub fn write_report(
    directory: &std::path::Path,
    report: &SimReport,
    config: &SimConfig,
    source: &Source,
) -> Result<PathBuf, CliError> {
    use tierd_sim::report::{HeatMap, HeatMapCell, ReplayTimeReader, ReportOptions};
    let period_ns = report
        .runs
        .first()
        .map_or(config.period_ns, |run| run.settings.period_ns);
    let mut reader = ReplayTimeReader::new(source.open()?, config.window, config.replay);
    let options = tierd_analysis::AnalyzeOptions {
        segment_bytes: config.segment_bytes,
        period_ns,
        volume_bytes: Some(config.volume_bytes),
        segment_table_rows: 0,
        ..tierd_analysis::AnalyzeOptions::default()
    };
    let analysis = tierd_analysis::analyze(&mut reader, &options)?;
    let matrix = &analysis.matrix;
    let time_base = match config.replay {
        Replay::OpenLoop { speed } => format!("replay time (trace time / {speed})"),
        Replay::ClosedLoop { .. } => "trace time (closed loop ignores timestamps)".to_string(),
    };
    let heat_map = HeatMap {
        svg: tierd_analysis::heatmap::render_svg(&analysis),
        segment_bytes: config.segment_bytes,
        period_ns,
        segments: matrix.segments,
        periods: matrix.periods,
        cells: matrix
            .cells()
            .map(|(period, cell)| HeatMapCell {
                period,
                segment: cell.segment,
                io: u64::from(cell.io),
                writes: u64::from(cell.writes),
            })
            .collect(),
        note: format!(
            "Computed by tierd_analysis over the same requests the runs replayed ({} requests); \
             x is {time_base} from the first request, in periods of {}.",
            analysis.requests,
            tierd_common::units::Duration(period_ns)
        ),
    };
    let index = tierd_sim::report::write(
        directory,
        report,
        Some(&heat_map),
        &ReportOptions::default(),
    )?;
    Ok(index)
}

/// Settings errors name the simulator's field; say the command-line option.
fn option_names(error: SimError) -> CliError {
    match error {
        SimError::Config {
            source_name,
            key,
            message,
        } if source_name == "options" => {
            let option = match key.as_str() {
                "segment_bytes" => "--segment-bytes",
                "volume_bytes" => "--volume-bytes",
                "period" => "--period",
                "speed" => "--speed",
                "queue_depth" => "--queue-depth",
                "window" => "--from-min/--to-min",
                "cache_bytes" => "--cache-bytes",
                "cache_block" => "--cache-block",
                "policy" => "--policy",
                other => other,
            };
            CliError(format!("{option}: {message}"))
        }
        other => CliError(other.to_string()),
    }
}

/// One run of [`run_jobs`]: settings, strategy and where its requests
/// come from.
pub struct Job<'a> {
    pub config: SimConfig,
    pub strategy: Strategy,
    pub source: &'a Source,
}

/// Runs every (settings, strategy) job, `jobs` at a time, each with its own
/// reader; results come back in the order of `runs`. `requests_per_run`,
/// when known, gives the progress line its total and ETA.
fn run_all(
    runs: &[(SimConfig, Strategy)],
    source: &Source,
    jobs: Option<usize>,
    requests_per_run: Option<u64>,
    show_progress: bool,
) -> Result<Vec<RunResult>, CliError> {
    let progress_line = ProgressLine::new(
        "tierd sim",
        "simulated",
        requests_per_run.map(|requests| requests * runs.len() as u64),
    )
    .with_suffix(format!("over {} run(s)", runs.len()))
    .shown_only_if(show_progress);
    let runs: Vec<Job> = runs
        .iter()
        .map(|(config, strategy)| Job {
            config: config.clone(),
            strategy: strategy.clone(),
            source,
        })
        .collect();
    run_jobs(&runs, jobs, &progress_line, &|_| {})
}

/// Runs every job, `jobs` at a time (default: the available cores), each
/// with its own reader, drawing `progress_line` from the requests done;
/// `finished(index)` is called as each job ends. Results come back in the
/// order of `runs`.
pub fn run_jobs(
    runs: &[Job],
    jobs: Option<usize>,
    progress_line: &ProgressLine,
    finished: &(dyn Fn(usize) + Sync),
) -> Result<Vec<RunResult>, CliError> {
    let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    let jobs = jobs.unwrap_or(cores).clamp(1, runs.len().max(1));
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<RunResult, CliError>>>> =
        runs.iter().map(|_| Mutex::new(None)).collect();
    let done: Vec<AtomicU64> = runs.iter().map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = runs.get(index) else {
                    break;
                };
                let mut progress = |update: tierd_sim::Progress| {
                    done[index].store(update.requests, Ordering::Relaxed);
                    progress_line
                        .update(done.iter().map(|count| count.load(Ordering::Relaxed)).sum());
                };
                let outcome = job.source.open().and_then(|mut reader| {
                    tierd_sim::run(&job.config, &job.strategy, reader.as_mut(), &mut progress)
                        .map_err(|error| {
                            CliError(format!("policy {}: {error}", job.strategy.name()))
                        })
                });
                if let Ok(mut slot) = slots[index].lock() {
                    *slot = Some(outcome);
                }
                finished(index);
            });
        }
    });
    progress_line.finish();
    let mut results = Vec::with_capacity(runs.len());
    for (slot, job) in slots.into_iter().zip(runs) {
        let outcome = slot
            .into_inner()
            .map_err(|_| CliError(format!("policy {}: the run panicked", job.strategy.name())))?;
        match outcome {
            Some(result) => results.push(result?),
            None => {
                return Err(CliError(format!(
                    "policy {}: the run did not finish",
                    job.strategy.name()
                )))
            }
        }
    }
    Ok(results)
}
