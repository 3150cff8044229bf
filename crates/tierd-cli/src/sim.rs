//! `tierd sim`: replay a trace (or a generated spike workload) through a tier
//! stack under several policies at once, and print the papers' tables.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use clap::Args;
use tierd_common::clock::{Clock, SystemClock};
use tierd_common::units::{parse_bytes, parse_duration_ns, NS_PER_SECOND};
use tierd_sim::{Replay, RunResult, SimConfig, SimError, SimReport, Strategy, TierStack, Window};
use tierd_trace::{open_trace, Format, IteratorReader, OpenOptions, TraceReader};

use crate::progress::ProgressLine;
use crate::CliError;

/// The synthetic preset `tierd sim` replays when no trace is given.
pub const DEFAULT_PRESET: &str = "usr_1";
pub const DEFAULT_POLICIES: &str = "adaptive,none,otf-ast,atsmf";

#[derive(Args)]
pub struct SimArgs {
    /// Run the evaluation grid of FILE.toml instead (workloads × stacks ×
    /// fast-tier sizes × speeds, every policy in every cell) and report it
    /// (docs/sim.md, "The evaluation grid"); --json, --out DIR, --report
    /// DIR and --jobs apply; every other flag is refused (the grid file
    /// sets what it varies, and the rest runs on the defaults).
    #[arg(long, value_name = "FILE.toml", conflicts_with_all = [
        "trace", "synth", "hours", "tiers", "policy", "policy_config", "segment_bytes",
        "volume_bytes", "speed", "from_min", "to_min", "max_outstanding", "queue_depth",
        "period", "fast_bytes", "cache_bytes", "cache_block", "cache_mode", "admission",
        "sequential_cutoff", "smr_staging", "seed", "replicas",
    ])]
    matrix: Option<PathBuf>,
    /// Run a built-in experiment instead of a replay (docs/sim.md,
    /// "Experiments"): `reduce-fig5` is paper 004 Fig. 5 in kind (response
    /// stability of inline, post-process, one and two thresholds on the
    /// reduction workers' model), `reduce-calibrate` measures this
    /// machine's reduction costs (the live tier's codec) that the model
    /// takes. --json, --out DIR and --seed apply, and for reduce-fig5
    /// --measurements, --loads, --queue-order and --calibrate; every other
    /// flag is refused.
    #[arg(long, value_name = "NAME", value_enum, conflicts_with_all = [
        "matrix", "trace", "synth", "hours", "tiers", "policy", "policy_config", "segment_bytes",
        "volume_bytes", "speed", "from_min", "to_min", "max_outstanding", "queue_depth",
        "period", "fast_bytes", "cache_bytes", "cache_block", "cache_mode", "admission",
        "sequential_cutoff", "smr_staging", "report", "jobs", "replicas",
    ])]
    experiment: Option<crate::reduce::Experiment>,
    /// With --experiment reduce-fig5: measurements per load (default 15, the paper's).
    #[arg(long, value_name = "N", requires = "experiment")]
    measurements: Option<u32>,
    /// With --experiment reduce-fig5: loads in % of inline's maximum IOPS,
    /// comma-separated (default 10,25,45,60,70,80,90, the paper's).
    #[arg(long, value_name = "LIST", requires = "experiment")]
    loads: Option<String>,
    /// With --experiment reduce-fig5: measure this machine's reduction
    /// costs first (as reduce-calibrate does) and simulate with them instead
    /// of the recorded defaults (the run then depends on the machine).
    #[arg(long, requires = "experiment")]
    calibrate: bool,
    /// With --experiment reduce-fig5: the workers' queue, foreground-first
    /// (default: what a user waits for before staged reductions, the
    /// reduced tier's rule) or fifo (arrival order, for comparison).
    #[arg(long, value_name = "ORDER", requires = "experiment", value_parser = queue_order)]
    queue_order: Option<tierd_sim::reduce::QueueOrder>,
    /// With --experiment smr-staging: the workloads' size against paper
    /// 001's (1, the default: 10 GiB of random writes, 10,240 reads).
    #[arg(long, value_name = "S", requires = "experiment")]
    scale: Option<f64>,
    /// With --experiment smr-staging: write its workloads (at --scale, with
    /// --seed) as tierd-native traces into DIR, with workloads.json saying
    /// how each is replayed, and run nothing (for `tierd replay` against a
    /// live server: bench/smr/live.sh).
    #[arg(long, value_name = "DIR", requires = "experiment")]
    export_traces: Option<PathBuf>,
    /// With --matrix: write matrix.json (every run's full result) into DIR.
    /// With --experiment: write its table, CSV, SVG and JSON into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Trace file in any format tierd reads (.gz/.bz2/.xz/.zst transparently).
    /// Without it, a generated spike workload is replayed (see --synth).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_name = "FORMAT", requires = "trace")]
    format: Option<Format>,
    /// Keep only this volume of a multi-volume trace (MSR `hm_0`, SPC ASU, ...).
    #[arg(long, value_name = "NAME", requires = "trace")]
    volume: Option<String>,
    /// Skip malformed lines instead of stopping at the first.
    #[arg(long, requires = "trace")]
    skip_bad_lines: bool,
    /// Synthetic preset to replay when no --trace is given, or `shape:NAME`
    /// for a generated shape (see `tierd trace synth --list`).
    #[arg(long, value_name = "PRESET", conflicts_with = "trace", default_value = DEFAULT_PRESET)]
    synth: String,
    /// Hours of the synthetic preset to generate; default: its calibrated busy window.
    #[arg(long, conflicts_with = "trace")]
    hours: Option<f64>,
    /// Tier stack: a preset (hdd-ssd, hdd-7200, ssd-mem, ssd-smr) or a TOML file.
    #[arg(long, value_name = "PRESET|FILE", default_value = "hdd-ssd")]
    tiers: String,
    /// Policies to compare, comma-separated: none, otf-ast, atsmf (tiering),
    /// fifo, lru, arc, s3fifo (block caches over the fast tier) and adaptive
    /// (a block cache that measures which admission pays, none included;
    /// docs/policies/adaptive.md).
    #[arg(long, value_name = "LIST", default_value = DEFAULT_POLICIES)]
    policy: String,
    /// Policy settings: a TOML file with a table per policy, e.g.
    /// `[otf-ast]` `promote_persistent = false`; keys left out keep the paper
    /// defaults (docs/policies/).
    #[arg(long, value_name = "FILE")]
    policy_config: Option<PathBuf>,
    /// Segment size (power of two, 1MiB-4GiB); default: the tier stack's.
    #[arg(long, value_parser = bytes)]
    segment_bytes: Option<u64>,
    /// Volume size; default: the synthetic preset's LUN, or the trace's highest
    /// offset rounded up to a segment (one extra pass over the file).
    #[arg(long, value_parser = bytes)]
    volume_bytes: Option<u64>,
    /// Replay acceleration (arrival = trace time / X, like btreplay -x);
    /// default 1 for files, the paper's factor for synthetic presets
    /// (usr_1, web_2: 8; proj_2, proj_4: 2; others 1).
    #[arg(long, value_name = "X")]
    speed: Option<f64>,
    /// Replay only from this many minutes after the trace's first request.
    #[arg(long, value_name = "MINUTES")]
    from_min: Option<f64>,
    /// ... up to this many minutes after it (trace time, before --speed).
    #[arg(long, value_name = "MINUTES")]
    to_min: Option<f64>,
    /// Open loop: most requests outstanding at once; a request due while this
    /// many are outstanding is issued when one completes, as btreplay blocks
    /// on a full queue (0: no limit).
    #[arg(long, value_name = "N", default_value_t = tierd_sim::config::DEFAULT_MAX_OUTSTANDING_REQUESTS)]
    max_outstanding: u32,
    /// Closed loop: keep N requests outstanding and ignore timestamps.
    #[arg(long, value_name = "N", conflicts_with = "speed")]
    queue_depth: Option<u32>,
    /// Statistics and policy period (virtual time) for every run; default:
    /// each policy's paper period (atsmf 24s, otf-ast 60s; 60s for none and
    /// the caches).
    #[arg(long, value_parser = duration_ns)]
    period: Option<u64>,
    /// Fast-tier sizes to run every policy at, comma-separated: absolute
    /// sizes (512MiB,2GiB) or percentages of the trace's working set
    /// (1%,5%,10%,25%; distinct bytes touched at 4 KiB granularity, counted
    /// in one pass and printed). Each size sets the fast tier's capacity
    /// (its device model too) for every policy: caches use all of it,
    /// tiering the whole segments that fit. Prints hit ratio and mean
    /// response against size (a miss-ratio curve); default: the stack's
    /// fast-tier capacity, one size.
    #[arg(long, value_name = "LIST")]
    fast_bytes: Option<String>,
    /// Page-cache size for fifo/lru/arc/s3fifo instead of the fast tier's
    /// capacity: the caches then do not compare with the tiering policies
    /// at equal capacity (the report says so). Default: the fast tier's
    /// capacity, as every policy gets.
    #[arg(long, value_parser = bytes)]
    cache_bytes: Option<u64>,
    /// Block caches (fifo/lru/arc/s3fifo): cache block, a power of two from
    /// 4KiB to 1MiB; default: the tier stack's [cache] block_bytes (64KiB).
    #[arg(long, value_name = "SIZE", value_parser = cache_block)]
    cache_block: Option<u64>,
    /// Block caches: writeback (default: flashcache, the papers' baseline,
    /// is write-back), writethrough or writearound.
    #[arg(long, value_name = "MODE", value_parser = cache_mode)]
    cache_mode: Option<tierd_sim::stack::CacheMode>,
    /// Block caches: which misses take a slot: always (default), frequency
    /// (on a block's 2nd recent miss), frequency:N or adaptive (chosen while
    /// running; what the `adaptive` policy uses).
    #[arg(long, value_name = "RULE", value_parser = admission)]
    admission: Option<tierd_sim::stack::AdmissionKind>,
    /// Block caches: misses of a sequential run at least this long bypass
    /// the cache (bcache's sequential_cutoff); default 4MiB, 0 = off.
    #[arg(long, value_name = "SIZE", value_parser = bytes)]
    sequential_cutoff: Option<u64>,
    /// Block caches over a drive-managed SMR home (the `ssd-smr` stack):
    /// `on` (default) stages every write on the fast tier and destages
    /// whole bands, so the disk's media cache is never used
    /// (docs/engine/smr.md); `off` writes dirty blocks back one by one, as
    /// over any other home. No effect on other homes.
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    smr_staging: Option<bool>,
    /// Replicas in free space on the HDD home tier (paper 003,
    /// docs/replicas.md): one run per setting, comma-separated, of
    /// off, one (at most one copy per extent), many (up to 4, each near a
    /// different access centre), contiguous (as many, and a recurring read
    /// sequence laid out in order). Each run reports "replicas" and
    /// "disk_access_ms" (the HDD's busy time for user reads).
    #[arg(long, value_name = "LIST")]
    replicas: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write an HTML report into DIR: plots (SVG) of iops, %util per
    /// device, fast-tier bytes, response-time CDFs and the trace's heat map,
    /// a CSV per series, the moves (docs/report.md).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Root seed: device models and the synthetic workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs at the same time; default: the available cores.
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
}

fn bytes(text: &str) -> Result<u64, String> {
    parse_bytes(text).map_err(|error| error.to_string())
}

fn cache_block(text: &str) -> Result<u64, String> {
    let value = parse_bytes(text).map_err(|error| error.to_string())?;
    tierd_sim::stack::check_cache_block_bytes("options", "cache_block", value).map_err(|_| {
        format!("{value} bytes: a cache block is a power of two from 4KiB to 1MiB (4KiB, 8KiB, ..., 1MiB)")
    })?;
    Ok(value)
}

fn queue_order(text: &str) -> Result<tierd_sim::reduce::QueueOrder, String> {
    use tierd_sim::reduce::QueueOrder;
    [QueueOrder::ForegroundFirst, QueueOrder::Fifo]
        .into_iter()
        .find(|order| order.name() == text)
        .ok_or_else(|| format!("{text:?}: expected foreground-first or fifo"))
}

fn on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other:?}: expected on or off")),
    }
}

fn cache_mode(text: &str) -> Result<tierd_sim::stack::CacheMode, String> {
    tierd_sim::stack::CacheMode::parse(text)
}

fn admission(text: &str) -> Result<tierd_sim::stack::AdmissionKind, String> {
    tierd_sim::stack::AdmissionKind::parse(text)
}

fn duration_ns(text: &str) -> Result<u64, String> {
    match parse_duration_ns(text) {
        Ok(0) => Err("must be longer than zero".to_string()),
        Ok(value) => Ok(value),
        Err(error) => Err(error.to_string()),
    }
}

/// The acceleration the papers replayed a volume at (000 §5.1 Table 2).
pub(crate) fn paper_speed(preset: &str) -> f64 {
    match preset {
        "usr_1" | "web_2" => 8.0,
        "proj_2" | "proj_4" => 2.0,
        _ => 1.0,
    }
}

fn minutes_ns(option: &str, minutes: Option<f64>) -> Result<Option<u64>, CliError> {
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
pub(crate) enum Source {
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
    pub(crate) fn open(&self) -> Result<Box<dyn TraceReader>, CliError> {
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

    fn provenance(&self) -> (String, &'static str) {
        match self {
            Source::File { path, .. } => (path.display().to_string(), "file"),
            Source::Synthetic { label, .. } => (label.clone(), "synthetic"),
        }
    }
}

/// What one pass over a trace found.
pub(crate) struct Scan {
    /// The highest byte a request touches.
    pub(crate) end_bytes: u64,
    pub(crate) requests: u64,
    /// Two requests with different times exist.
    pub(crate) timed: bool,
    /// Distinct bytes touched inside the window, when asked for.
    pub(crate) working_set_bytes: Option<u64>,
}

/// The highest byte a trace touches, its request count, whether it has
/// timestamps and (with `window`) the working set inside the window (one
/// pass).
pub(crate) fn scan(source: &Source, window: Option<Window>) -> Result<Scan, CliError> {
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

pub fn run(args: SimArgs) -> Result<(), CliError> {
    if let Some(experiment) = args.experiment {
        return crate::reduce::run(
            experiment,
            crate::reduce::Options {
                json: args.json,
                out: args.out.clone(),
                seed: args.seed,
                measurements: args.measurements,
                loads: args.loads.clone(),
                calibrate: args.calibrate,
                queue_order: args.queue_order,
                scale: args.scale,
                export_traces: args.export_traces.clone(),
            },
        );
    }
    if args.out.is_some() && args.matrix.is_none() {
        return Err(CliError(
            "--out DIR goes with --matrix FILE.toml or --experiment NAME; for a replay's files use --report DIR".to_string(),
        ));
    }
    if let Some(grid) = &args.matrix {
        return crate::matrix::run(
            grid,
            crate::matrix::Outputs {
                json: args.json,
                out: args.out.clone(),
                report: args.report.clone(),
                jobs: args.jobs,
            },
        );
    }
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
                eprintln!(
                    "{}",
                    untimed_warning(&source.provenance().0, None, "tierd sim")
                );
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
                eprintln!(
                    "{}",
                    untimed_warning(&source.provenance().0, Some(scan.requests), "tierd sim")
                );
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
        eprintln!(
            "tierd sim: working set {} ({bytes} bytes: distinct 4 KiB blocks the replayed requests touch); fast-tier sizes {}",
            tierd_common::units::Bytes(bytes),
            sizes
                .iter()
                .map(|bytes| tierd_common::units::Bytes(*bytes).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
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
                Some(settings) => {
                    for setting in settings {
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
    let results = run_all(&jobs, &source, args.jobs, requests_per_run)?;
    let wall_ns = clock.now_ns().max(1);
    let requests: u64 = results.iter().map(|run| run.requests).sum();
    eprintln!(
        "tierd sim: {} run(s), {requests} requests in {:.2} s wall ({:.2} M requests/s over all runs)",
        results.len(),
        wall_ns as f64 / 1e9,
        requests as f64 * 1e3 / wall_ns as f64
    );
    let (trace, kind) = source.provenance();
    let mut report = SimReport::new(trace, kind, &config.stack, results);
    report.notes = notes;
    report.working_set_bytes = working_set_bytes;
    if args.json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print!("{}", tierd_sim::tables::render_text(&report));
        print!("{}", tierd_sim::replicas::render_text(&report.runs));
    }
    if let Some(directory) = &args.report {
        write_report(directory, &report, &config, &source)?;
    }
    Ok(())
}

/// `--report DIR`. The runs keep no per-segment counts, so the heat map comes
/// from one more pass over the trace through `tierd_analysis` (the sim crate
/// does not depend on it): the run's window, replay time (as the other plots),
/// segment size, and the first run's period.
fn write_report(
    directory: &std::path::Path,
    report: &SimReport,
    config: &SimConfig,
    source: &Source,
) -> Result<(), CliError> {
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
    eprintln!("tierd sim: report written to {}", index.display());
    Ok(())
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
pub(crate) struct Job<'a> {
    pub(crate) config: SimConfig,
    pub(crate) strategy: Strategy,
    pub(crate) source: &'a Source,
}

/// Runs every (settings, strategy) job, `jobs` at a time, each with its own
/// reader; results come back in the order of `runs`. `requests_per_run`,
/// when known, gives the progress line its total and ETA.
fn run_all(
    runs: &[(SimConfig, Strategy)],
    source: &Source,
    jobs: Option<usize>,
    requests_per_run: Option<u64>,
) -> Result<Vec<RunResult>, CliError> {
    let progress_line = ProgressLine::new(
        "tierd sim",
        "simulated",
        requests_per_run.map(|requests| requests * runs.len() as u64),
    )
    .with_suffix(format!("over {} run(s)", runs.len()));
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
pub(crate) fn run_jobs(
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
