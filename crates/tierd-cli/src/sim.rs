//! `tierd sim`: replay a trace (or a generated spike workload) through a tier
//! stack under several policies at once, and print the papers' tables.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use tierd_common::units::parse_bytes;
use tierd_lab::sim::{SimSettings, DEFAULT_POLICIES, DEFAULT_PRESET};
use tierd_trace::Format;

use crate::CliError;

// What `tierd sim` computes lives in tierd_lab::sim (the Python module
// calls it too); the grid and replay commands share its pieces.
pub(crate) use tierd_lab::sim::{paper_speed, run_jobs, scan, untimed_warning, Job, Source};

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
    /// With --experiment reduce-fig5: writes go to random blocks of a
    /// reduced tier of LOGICAL bytes on a DEVICE-byte device (e.g.
    /// 16MiB:12MiB; packs of 128 KiB), whose cleaner runs tierd_core's
    /// decisions and is charged to the workers (docs/devices/processor.md,
    /// "Packs and cleaning"). Default: writes take no space (Fig. 5).
    #[arg(long, value_name = "LOGICAL:DEVICE", requires = "experiment")]
    reduce_tier: Option<String>,
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
    #[arg(long, value_parser = tierd_lab::sim::parse_period)]
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
    #[arg(long, value_name = "SIZE", value_parser = tierd_lab::sim::parse_cache_block)]
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
    #[arg(long, value_name = "on|off", value_parser = tierd_lab::sim::parse_on_off)]
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

fn queue_order(text: &str) -> Result<tierd_sim::reduce::QueueOrder, String> {
    use tierd_sim::reduce::QueueOrder;
    [QueueOrder::ForegroundFirst, QueueOrder::Fifo]
        .into_iter()
        .find(|order| order.name() == text)
        .ok_or_else(|| format!("{text:?}: expected foreground-first or fifo"))
}

fn cache_mode(text: &str) -> Result<tierd_sim::stack::CacheMode, String> {
    tierd_sim::stack::CacheMode::parse(text)
}

fn admission(text: &str) -> Result<tierd_sim::stack::AdmissionKind, String> {
    tierd_sim::stack::AdmissionKind::parse(text)
}

impl SimArgs {
    /// The replay's settings (every flag but the output ones).
    fn settings(&self) -> SimSettings {
        SimSettings {
            trace: self.trace.clone(),
            format: self.format,
            volume: self.volume.clone(),
            skip_bad_lines: self.skip_bad_lines,
            synth: self.synth.clone(),
            hours: self.hours,
            tiers: self.tiers.clone(),
            policy: self.policy.clone(),
            policy_config: self.policy_config.clone(),
            segment_bytes: self.segment_bytes,
            volume_bytes: self.volume_bytes,
            speed: self.speed,
            from_min: self.from_min,
            to_min: self.to_min,
            max_outstanding: self.max_outstanding,
            queue_depth: self.queue_depth,
            period: self.period,
            fast_bytes: self.fast_bytes.clone(),
            cache_bytes: self.cache_bytes,
            cache_block: self.cache_block,
            cache_mode: self.cache_mode,
            admission: self.admission,
            sequential_cutoff: self.sequential_cutoff,
            smr_staging: self.smr_staging,
            replicas: self.replicas.clone(),
            seed: self.seed,
            jobs: self.jobs,
        }
    }
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
                reduce_tier: args.reduce_tier.clone(),
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
    let simulation = tierd_lab::sim::simulate(&args.settings(), &|line| eprintln!("{line}"), true)?;
    let report = &simulation.report;
    if args.json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        print!("{}", tierd_sim::tables::render_text(report));
        print!("{}", tierd_sim::replicas::render_text(&report.runs));
    }
    if let Some(directory) = &args.report {
        let index = tierd_lab::sim::write_report(
            directory,
            report,
            &simulation.config,
            &simulation.source,
        )?;
        eprintln!("tierd sim: report written to {}", index.display());
    }
    Ok(())
}
