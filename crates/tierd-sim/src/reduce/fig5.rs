//! Paper 004 Fig. 5 in kind: response-time stability of inline,
//! post-process, one threshold and two thresholds, at loads from 10 % to
//! 90 % of the maximum IOPS (`tierd sim --experiment reduce-fig5`,
//! `docs/sim.md`).
//!
//! The workload is synthetic: open-loop 8 KiB writes (100 % writes) with
//! Poisson arrivals (exponential gaps, vdbench's default), each block a
//! duplicate of a stored one with probability ½ (2:1 dedup) and lz4-ing to
//! the measured fraction (2:1 data). Every write goes through the shared
//! decision code, [`tierd_core::reduce`]: the [`Switch`] picks the mode from
//! the workers' utilisation per window, [`Staging`] bounds the stage (a
//! post write that finds it full is reduced inline), and the workers'
//! [`WorkQueue`](tierd_core::reduce::WorkQueue) (inside [`Processor`]) runs
//! what a user waits for before staged reductions.
//!
//! Work per write (paper 004 Fig. 1): inline reduces before the ack
//! (fingerprint, then compress and store the fragment, or for a duplicate
//! read the stored fragment back and compare); post-process stores the raw
//! block in the stage (②), acks, and later reads it back (④) and reduces it
//! in the workers' idle time. Staging and reading back are the extra work
//! that makes post-process's utilisation higher at the same load.

use serde::Serialize;
use tierd_common::rng::{Rng, SeededRng};
use tierd_core::reduce::{
    Mode, ModeSetting, QueueOrder, Staging, Switch, SwitchConfig, SwitchRule, Urgency, DEFAULT_T1,
    DEFAULT_T2,
};

use super::cost::ReductionCosts;
use super::packs::{PackGeometry, Packs, PassWork};
use super::processor::{Job, JobDone, Processor};

/// The experiment's settings; [`Fig5Config::default`] is the paper's setup
/// scaled to run in seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fig5Config {
    pub seed: u64,
    /// The paper's 8 KB writes.
    pub block_bytes: u64,
    /// Share of blocks that duplicate a stored one (2:1 dedup: ½).
    pub duplicate_fraction: f64,
    /// Offered loads, % of inline's maximum IOPS (the paper's "maximum
    /// throughput in inline mode").
    pub loads_percent: Vec<f64>,
    /// Measurements per load (the paper's 15).
    pub measurements: u32,
    /// Each measurement is the mean response of the writes acknowledged in
    /// a window this long.
    pub measurement_ns: u64,
    /// Run before the first measurement at each load, not measured.
    pub warmup_ns: u64,
    /// The switch's utilisation window.
    pub switch_window_ns: u64,
    pub t1: f64,
    pub t2: f64,
    /// Reduction workers (the storage processor's cores).
    pub workers: u32,
    /// Blocks the stage holds raw before post writes go inline.
    pub stage_limit_blocks: u64,
    /// The workers' queue: foreground first (the reduced tier's), or
    /// arrival order (a processor without priorities, for comparison).
    pub queue_order: QueueOrder,
    pub costs: ReductionCosts,
    /// The tier's packs and cleaner ([`super::packs`]): each write goes to
    /// a random logical block of the tier, its fragment into a pack, and
    /// the cleaner's passes are charged to the workers. `None` (Fig. 5's
    /// model): writes take no space and nothing is cleaned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<TierModel>,
}

/// A reduced tier under the writes (see [`Fig5Config::tier`]). Blocks are
/// [`Fig5Config::block_bytes`]; a new block's fragment is
/// `costs.compressed_fraction` of it (raw when that saves less than an
/// eighth, as the live tier stores it); a duplicate shares the fragment of
/// another block chosen at random (a new fragment if that one maps none).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TierModel {
    pub logical_blocks: u64,
    pub pack_bytes: u64,
    pub pack_count: u64,
    /// The cleaner fingerprints what it copies (moves the index's hints).
    pub dedup: bool,
}

impl Default for Fig5Config {
    fn default() -> Self {
        Fig5Config {
            seed: 1,
            block_bytes: 8192,
            duplicate_fraction: 0.5,
            loads_percent: vec![10.0, 25.0, 45.0, 60.0, 70.0, 80.0, 90.0],
            measurements: 15,
            measurement_ns: 500_000_000,
            warmup_ns: 1_000_000_000,
            switch_window_ns: 100_000_000,
            t1: DEFAULT_T1,
            t2: DEFAULT_T2,
            workers: 2,
            stage_limit_blocks: (256 << 20) / 8192,
            queue_order: QueueOrder::ForegroundFirst,
            costs: ReductionCosts::default(),
            tier: None,
        }
    }
}

/// The four configurations of Fig. 5 (the paper plots the last two; the
/// fixed modes are its "no switching" baseline, ≤ 50 % deviation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    Inline,
    Post,
    /// One threshold at T1.
    Single,
    /// Two thresholds, T1 and T2.
    Double,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::Inline,
        Variant::Post,
        Variant::Single,
        Variant::Double,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Inline => "inline",
            Variant::Post => "post",
            Variant::Single => "single",
            Variant::Double => "double",
        }
    }

    /// `single 65%`, `double 65/35%`.
    pub fn label(self, config: &Fig5Config) -> String {
        match self {
            Variant::Inline => "inline only".to_string(),
            Variant::Post => "post only".to_string(),
            Variant::Single => format!("single {:.0}%", config.t1 * 100.0),
            Variant::Double => format!("double {:.0}/{:.0}%", config.t1 * 100.0, config.t2 * 100.0),
        }
    }

    pub fn switch_config(self, config: &Fig5Config) -> SwitchConfig {
        let (setting, rule) = match self {
            Variant::Inline => (ModeSetting::Inline, SwitchRule::Double),
            Variant::Post => (ModeSetting::Post, SwitchRule::Double),
            Variant::Single => (ModeSetting::Auto, SwitchRule::Single),
            Variant::Double => (ModeSetting::Auto, SwitchRule::Double),
        };
        SwitchConfig {
            setting,
            rule,
            t1: config.t1,
            t2: config.t2,
            window_ns: config.switch_window_ns,
        }
    }
}

/// One measurement window at one load.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measurement {
    /// Mean response of the writes acknowledged in the window.
    pub mean_response_us: f64,
    pub writes: u64,
    /// Share of those writes reduced inline (the rest were staged).
    pub inline_share: f64,
    /// Worker time of the jobs finished in the window over the workers'
    /// time.
    pub utilisation: f64,
    pub switches: u64,
}

/// One configuration at one load.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadResult {
    pub variant: Variant,
    pub label: String,
    pub load_percent: f64,
    pub offered_iops: f64,
    /// Writes acknowledged per second over the measurements.
    pub achieved_iops: f64,
    /// Mean of the measurements' mean responses.
    pub mean_response_us: f64,
    /// The paper's figure: the largest |measurement − mean| / mean, in %.
    pub max_deviation_percent: f64,
    /// Mode switches during the measurements.
    pub switches: u64,
    pub utilisation: f64,
    pub inline_share: f64,
    /// Post writes reduced inline because the stage was full (whole run).
    pub stage_overflows: u64,
    pub staged_blocks_max: u64,
    pub measurements: Vec<Measurement>,
    /// What the cleaner did over the whole run (with [`Fig5Config::tier`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleaning: Option<CleaningResult>,
}

/// The cleaner over one run of [`run_load`] (warm-up included).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CleaningResult {
    pub passes: u64,
    pub packs_cleaned: u64,
    pub relocated_bytes: u64,
    pub relocated_blocks: u64,
    /// Passes run on a writer's time (no room left) and in the background.
    pub urgent_passes: u64,
    pub background_passes: u64,
    /// Worker time the passes were charged ([`ReductionCosts::clean_ns`]):
    /// on the writes that found no room, and as background jobs.
    pub urgent_ns: u64,
    pub background_ns: u64,
    /// Victim packs read.
    pub packs_read: u64,
    /// Bytes of new fragments users stored.
    pub stored_bytes: u64,
    /// (stored + relocated) / stored.
    pub write_amplification: f64,
    /// Writes refused for want of room (ENOSPC).
    pub refused_writes: u64,
    pub free_packs_end: u64,
}

/// The saturation that sets the loads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Saturation {
    pub writes: u64,
    pub max_iops_inline: f64,
    pub max_iops_post: f64,
    pub how: &'static str,
}

/// The paper's figures, next to ours.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PaperFigures {
    /// "more than 150 %".
    pub single_max_deviation_percent: f64,
    pub double_max_deviation_percent: f64,
    pub target_max_deviation_percent: f64,
}

pub const PAPER: PaperFigures = PaperFigures {
    single_max_deviation_percent: 150.0,
    double_max_deviation_percent: 36.0,
    target_max_deviation_percent: 50.0,
};

/// Everything the experiment reports (`--json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fig5Report {
    pub experiment: &'static str,
    pub workload: &'static str,
    pub config: Fig5Config,
    /// Whether the costs are the recorded defaults or measured by this run.
    pub costs_source: String,
    pub work_ns_inline: f64,
    pub work_ns_post: f64,
    pub post_work_ratio: f64,
    /// The paper's inequality (`SwitchConfig::validate`) for the double
    /// rule at the model's work ratio: `ok` or why not.
    pub double_rule_check: String,
    pub saturation: Saturation,
    pub paper: PaperFigures,
    pub results: Vec<LoadResult>,
}

impl Fig5Report {
    pub fn result(&self, variant: Variant, load_percent: f64) -> Option<&LoadResult> {
        self.results
            .iter()
            .find(|result| result.variant == variant && result.load_percent == load_percent)
    }

    /// The largest deviation of `variant` over every load.
    pub fn max_deviation_percent(&self, variant: Variant) -> f64 {
        self.results
            .iter()
            .filter(|result| result.variant == variant)
            .map(|result| result.max_deviation_percent)
            .fold(0.0, f64::max)
    }
}

pub const WORKLOAD: &str = "synthetic: open-loop Poisson arrivals of 8 KiB writes (100 % writes), \
                            2:1 duplicate blocks, 2:1 compressible data (costs measured on fio-like \
                            buffer_compress_percentage=50 blocks)";

/// What a job is, packed in its id: `write << 3 | duplicate << 2 | kind`.
const KIND_INLINE: u64 = 0;
const KIND_STAGE: u64 = 1;
const KIND_STAGED_REDUCE: u64 = 2;
/// A background cleaning pass (with [`Fig5Config::tier`]).
const KIND_CLEAN: u64 = 3;

/// Write `write`'s logical block and the block a duplicate copies, fixed
/// by the seed (the same for every configuration at a load).
fn write_blocks(seed: u64, write: u64, logical_blocks: u64) -> (u64, u64) {
    let mut state = seed ^ write.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xc1ea_0000;
    let lbn = tierd_common::rng::splitmix64(&mut state) % logical_blocks;
    let other = tierd_common::rng::splitmix64(&mut state) % logical_blocks;
    (lbn, other)
}

/// The tier's packs under one run: stores each reduced block and says what
/// the cleaning it caused costs.
struct TierRun {
    model: TierModel,
    packs: Packs,
    fragment_bytes: u64,
    cleaning: CleaningResult,
}

impl TierRun {
    fn new(model: TierModel, config: &Fig5Config) -> TierRun {
        let block = config.block_bytes;
        let compressed = (block as f64 * config.costs.compressed_fraction).round() as u64;
        // Stored raw unless compression saves at least an eighth.
        let fragment_bytes = if compressed <= block - block / 8 {
            compressed.max(1)
        } else {
            block
        };
        TierRun {
            model,
            packs: Packs::new(PackGeometry {
                logical_blocks: model.logical_blocks,
                block_bytes: block,
                pack_bytes: model.pack_bytes,
                pack_count: model.pack_count,
            }),
            fragment_bytes,
            cleaning: CleaningResult::default(),
        }
    }

    /// Stores write `write`'s block: the worker time of urgent cleaning
    /// (added to the job that stores it) and of background cleaning (a job
    /// of its own).
    fn store(&mut self, config: &Fig5Config, write: u64, duplicate: bool) -> (f64, f64) {
        let (lbn, other) = write_blocks(config.seed, write, self.model.logical_blocks);
        let duplicate_of = (duplicate && self.packs.is_mapped(other)).then_some(other);
        let stored = self.packs.store(lbn, self.fragment_bytes, duplicate_of);
        if duplicate_of.is_none() && !stored.refused {
            self.cleaning.stored_bytes += self.fragment_bytes;
        }
        let cost = |work: &PassWork| {
            config.costs.clean_ns(
                work,
                self.model.pack_bytes,
                config.block_bytes,
                self.model.dedup,
            )
        };
        let (urgent, background) = (cost(&stored.urgent), cost(&stored.background));
        self.cleaning.urgent_passes += stored.urgent.passes;
        self.cleaning.background_passes += stored.background.passes;
        self.cleaning.urgent_ns += urgent.round() as u64;
        self.cleaning.background_ns += background.round() as u64;
        self.cleaning.packs_read += stored.urgent.packs_read + stored.background.packs_read;
        (urgent, background)
    }

    fn result(mut self) -> CleaningResult {
        let tallies = self.packs.tallies;
        self.cleaning.passes = tallies.passes;
        self.cleaning.packs_cleaned = tallies.packs_cleaned;
        self.cleaning.relocated_bytes = tallies.relocated_bytes;
        self.cleaning.relocated_blocks = tallies.relocated_blocks;
        self.cleaning.refused_writes = self.packs.refused;
        self.cleaning.free_packs_end = self.packs.free_packs();
        self.cleaning.write_amplification = if self.cleaning.stored_bytes == 0 {
            1.0
        } else {
            (self.cleaning.stored_bytes + tallies.relocated_bytes) as f64
                / self.cleaning.stored_bytes as f64
        };
        self.cleaning
    }
}

fn job_id(write: u64, duplicate: bool, kind: u64) -> u64 {
    write << 3 | u64::from(duplicate) << 2 | kind
}

fn round_ns(ns: f64) -> u64 {
    ns.round().max(1.0) as u64
}

/// Maximum IOPS of `mode` by saturation: `writes` writes all arrive at
/// once; IOPS = writes ÷ the time until the workers have done all their
/// work (for post-process the staged reductions too, so it is the rate
/// post-process sustains, not the rate it acknowledges while its stage
/// fills).
pub fn saturate(config: &Fig5Config, mode: Mode, writes: u64) -> f64 {
    let mut processor = Processor::with_order(config.workers, config.queue_order);
    let mut duplicates = SeededRng::new(config.seed).derive(0x5a7);
    let mut done = Vec::new();
    for write in 0..writes {
        let duplicate = duplicates.chance(config.duplicate_fraction);
        let (kind, service) = match mode {
            Mode::Inline => (
                KIND_INLINE,
                config.costs.reduce_ns(config.block_bytes, duplicate),
            ),
            Mode::Post => (KIND_STAGE, config.costs.stage_store_ns(config.block_bytes)),
        };
        processor.submit(
            0,
            Job {
                id: job_id(write, duplicate, kind),
                urgency: Urgency::Foreground,
                service_ns: round_ns(service),
            },
        );
    }
    let mut last_ns = 0;
    while let Some(at) = processor.next_event_ns() {
        done.clear();
        processor.advance(at, &mut done);
        last_ns = at;
        for job in &done {
            if job.id & 3 == KIND_STAGE {
                let duplicate = job.id & 4 != 0;
                processor.submit(
                    at,
                    Job {
                        id: job.id - KIND_STAGE + KIND_STAGED_REDUCE,
                        urgency: Urgency::Background,
                        service_ns: round_ns(
                            config.costs.staged_reduce_ns(config.block_bytes, duplicate),
                        ),
                    },
                );
            }
        }
    }
    writes as f64 * 1e9 / last_ns.max(1) as f64
}

/// Per-measurement sums while running.
#[derive(Clone, Copy, Default)]
struct Window {
    response_ns: u128,
    writes: u64,
    inline_writes: u64,
    busy_ns: u64,
    switches: u64,
}

/// One configuration at one offered rate: the measurements.
pub fn run_load(
    config: &Fig5Config,
    variant: Variant,
    load_index: usize,
    offered_iops: f64,
) -> LoadResult {
    let load_percent = config.loads_percent[load_index];
    // The same arrivals and duplicates for every configuration at a load.
    let root = SeededRng::new(config.seed);
    let mut arrivals = root.derive(2 * load_index as u64 + 1);
    let mut duplicates = root.derive(2 * load_index as u64 + 2);
    let mean_gap_ns = 1e9 / offered_iops;
    let mut processor = Processor::with_order(config.workers, config.queue_order);
    let mut switch = Switch::new(variant.switch_config(config), 0);
    let mut staging = Staging::new(config.stage_limit_blocks);
    let end_ns = config.warmup_ns + config.measurement_ns * u64::from(config.measurements);
    let mut windows = vec![Window::default(); config.measurements as usize];
    let window_of = |at_ns: u64| -> Option<usize> {
        at_ns
            .checked_sub(config.warmup_ns)
            .map(|since| (since / config.measurement_ns) as usize)
            .filter(|&index| index < config.measurements as usize)
    };
    let mut arrival_clock_ns = arrivals.exponential(mean_gap_ns);
    let mut next_tick_ns = config.switch_window_ns;
    let mut write = 0u64;
    let mut staged_blocks_max = 0;
    let mut tier = config.tier.map(|model| TierRun::new(model, config));
    let mut done: Vec<JobDone> = Vec::new();
    loop {
        let next_arrival_ns = arrival_clock_ns.round() as u64;
        let now_ns = [
            Some(next_arrival_ns),
            Some(next_tick_ns),
            processor.next_event_ns(),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("arrivals never end");
        if now_ns >= end_ns {
            break;
        }
        done.clear();
        processor.advance(now_ns, &mut done);
        for job in &done {
            let service_ns = job.service_ns();
            let window = window_of(job.done_ns);
            if let Some(index) = window {
                windows[index].busy_ns += service_ns;
            }
            let duplicate = job.id & 4 != 0;
            match job.id & 3 {
                KIND_INLINE | KIND_STAGE => {
                    if let Some(index) = window {
                        let sums = &mut windows[index];
                        sums.response_ns += u128::from(job.response_ns());
                        sums.writes += 1;
                        sums.inline_writes += u64::from(job.id & 3 == KIND_INLINE);
                    }
                    if job.id & 3 == KIND_INLINE {
                        switch.record_work(Mode::Inline, service_ns);
                    } else {
                        switch.record_busy(service_ns);
                        // The staged block is reduced and stored now: its
                        // pack, and any cleaning that takes.
                        let (urgent, background) = match tier.as_mut() {
                            Some(tier) => tier.store(config, job.id >> 3, duplicate),
                            None => (0.0, 0.0),
                        };
                        processor.submit(
                            now_ns,
                            Job {
                                id: job.id - KIND_STAGE + KIND_STAGED_REDUCE,
                                urgency: Urgency::of_reduction(Mode::Post),
                                service_ns: round_ns(
                                    config.costs.staged_reduce_ns(config.block_bytes, duplicate)
                                        + urgent,
                                ),
                            },
                        );
                        submit_clean(&mut processor, now_ns, job.id, background);
                    }
                }
                // The cleaner's time is not the switch's: the live tier
                // measures utilisation around reductions only.
                KIND_CLEAN => {}
                _ => {
                    switch.record_busy(service_ns);
                    staging.reduced();
                }
            }
        }
        if now_ns == next_tick_ns {
            if switch.tick(now_ns, config.workers).is_some() {
                // A switch at a window's end counts in the window it closes.
                if let Some(index) = window_of(now_ns - 1) {
                    windows[index].switches += 1;
                }
            }
            next_tick_ns += config.switch_window_ns;
        }
        if now_ns == next_arrival_ns {
            let duplicate = duplicates.chance(config.duplicate_fraction);
            let mode = staging.admit(switch.mode());
            staged_blocks_max = staged_blocks_max.max(staging.staged_blocks);
            // An inline block is stored by its own job: a full tier's
            // cleaning is on the write's time.
            let (urgent, background) = match (mode, tier.as_mut()) {
                (Mode::Inline, Some(tier)) => tier.store(config, write, duplicate),
                _ => (0.0, 0.0),
            };
            let (kind, service) = match mode {
                Mode::Inline => (
                    KIND_INLINE,
                    config.costs.reduce_ns(config.block_bytes, duplicate) + urgent,
                ),
                Mode::Post => (KIND_STAGE, config.costs.stage_store_ns(config.block_bytes)),
            };
            processor.submit(
                now_ns,
                Job {
                    id: job_id(write, duplicate, kind),
                    // Inline reduction or stage store: the user waits.
                    urgency: Urgency::Foreground,
                    service_ns: round_ns(service),
                },
            );
            submit_clean(
                &mut processor,
                now_ns,
                job_id(write, duplicate, kind),
                background,
            );
            write += 1;
            arrival_clock_ns += arrivals.exponential(mean_gap_ns);
        }
    }
    let window_seconds = config.measurement_ns as f64 / 1e9;
    let capacity_ns = config.measurement_ns as f64 * f64::from(config.workers);
    let measurements: Vec<Measurement> = windows
        .iter()
        .map(|window| Measurement {
            mean_response_us: if window.writes == 0 {
                0.0
            } else {
                window.response_ns as f64 / window.writes as f64 / 1e3
            },
            writes: window.writes,
            inline_share: if window.writes == 0 {
                0.0
            } else {
                window.inline_writes as f64 / window.writes as f64
            },
            utilisation: window.busy_ns as f64 / capacity_ns,
            switches: window.switches,
        })
        .collect();
    let count = measurements.len().max(1) as f64;
    let mean_response_us = measurements.iter().map(|m| m.mean_response_us).sum::<f64>() / count;
    let max_deviation_percent = if mean_response_us > 0.0 {
        measurements
            .iter()
            .map(|m| (m.mean_response_us - mean_response_us).abs() / mean_response_us * 100.0)
            .fold(0.0, f64::max)
    } else {
        0.0
    };
    let writes: u64 = measurements.iter().map(|m| m.writes).sum();
    let inline_writes: u64 = windows.iter().map(|w| w.inline_writes).sum();
    LoadResult {
        variant,
        label: variant.label(config),
        load_percent,
        offered_iops,
        achieved_iops: writes as f64 / (window_seconds * count),
        mean_response_us,
        max_deviation_percent,
        switches: measurements.iter().map(|m| m.switches).sum(),
        utilisation: measurements.iter().map(|m| m.utilisation).sum::<f64>() / count,
        inline_share: if writes == 0 {
            0.0
        } else {
            inline_writes as f64 / writes as f64
        },
        stage_overflows: staging.overflows,
        staged_blocks_max,
        measurements,
        cleaning: tier.map(TierRun::result),
    }
}

/// Background cleaning a store set off: a job of its own for the workers'
/// idle time (after every write's work: background urgency).
fn submit_clean(processor: &mut Processor, now_ns: u64, id: u64, service_ns: f64) {
    if service_ns > 0.0 {
        processor.submit(
            now_ns,
            Job {
                id: (id & !3) | KIND_CLEAN,
                urgency: Urgency::Background,
                service_ns: round_ns(service_ns),
            },
        );
    }
}

/// Writes submitted at once to measure the maximum IOPS.
pub const SATURATION_WRITES: u64 = 50_000;

/// The whole experiment: saturate, then every configuration at every load.
pub fn run(config: &Fig5Config, costs_source: &str) -> Fig5Report {
    let max_iops_inline = saturate(config, Mode::Inline, SATURATION_WRITES);
    let max_iops_post = saturate(config, Mode::Post, SATURATION_WRITES);
    let work_ns_inline = config
        .costs
        .inline_ns(config.block_bytes, config.duplicate_fraction);
    let work_ns_post = config
        .costs
        .post_ns(config.block_bytes, config.duplicate_fraction);
    let post_work_ratio = work_ns_post / work_ns_inline;
    let double_rule_check = match Variant::Double
        .switch_config(config)
        .validate(post_work_ratio)
    {
        Ok(()) => "ok".to_string(),
        Err(message) => message,
    };
    let mut results = Vec::new();
    for (load_index, &load_percent) in config.loads_percent.iter().enumerate() {
        let offered_iops = max_iops_inline * load_percent / 100.0;
        for variant in Variant::ALL {
            results.push(run_load(config, variant, load_index, offered_iops));
        }
    }
    Fig5Report {
        experiment: "reduce-fig5",
        workload: WORKLOAD,
        config: config.clone(),
        costs_source: costs_source.to_string(),
        work_ns_inline,
        work_ns_post,
        post_work_ratio,
        double_rule_check,
        saturation: Saturation {
            writes: SATURATION_WRITES,
            max_iops_inline,
            max_iops_post,
            how: "all writes submitted at once; writes / time until the workers finished all \
                  their work (post: the staged reductions too)",
        },
        paper: PAPER,
        results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's setup shortened to run in a debug test: two loads (light,
    /// and one where post-process runs above T1 and inline below it), four
    /// measurements of 200 ms, switch windows of 40 ms.
    fn short(seed: u64, queue_order: QueueOrder) -> Fig5Config {
        Fig5Config {
            seed,
            loads_percent: vec![25.0, 60.0],
            measurements: 4,
            measurement_ns: 200_000_000,
            warmup_ns: 200_000_000,
            switch_window_ns: 40_000_000,
            queue_order,
            ..Fig5Config::default()
        }
    }

    #[test]
    fn inline_saturates_higher_and_post_answers_faster_at_light_load() {
        let report = run(&short(1, QueueOrder::ForegroundFirst), "test");
        let saturation = &report.saturation;
        assert!(
            saturation.max_iops_inline > 1.3 * saturation.max_iops_post,
            "{saturation:?}"
        );
        // The recorded costs satisfy the paper's inequality for 65/35.
        assert_eq!(report.double_rule_check, "ok");
        assert!(report.post_work_ratio > 1.3 && report.post_work_ratio < 0.65 / 0.35);
        let inline = report.result(Variant::Inline, 25.0).unwrap();
        let post = report.result(Variant::Post, 25.0).unwrap();
        assert!(
            post.mean_response_us < 0.8 * inline.mean_response_us,
            "post {} us, inline {} us",
            post.mean_response_us,
            inline.mean_response_us
        );
        // Post-process does more work per write: higher utilisation at the
        // same load.
        assert!(post.utilisation > 1.3 * inline.utilisation);
        for variant in [Variant::Inline, Variant::Post] {
            for load in [25.0, 60.0] {
                assert_eq!(report.result(variant, load).unwrap().switches, 0);
            }
        }
    }

    /// Paper 004 Fig. 3 and 4 in the model: at 60 % of inline's maximum,
    /// post-process runs above T1 and inline below it, so one threshold
    /// flips every window while two switch once (during the warm-up) and
    /// hold; at 25 % nothing switches.
    #[test]
    fn one_threshold_flips_near_t1_where_two_hold() {
        let report = run(&short(1, QueueOrder::ForegroundFirst), "test");
        let single = report.result(Variant::Single, 60.0).unwrap();
        let double = report.result(Variant::Double, 60.0).unwrap();
        // 800 ms of measurements, 40 ms windows: 20 windows.
        assert!(single.switches >= 15, "single switched {}", single.switches);
        assert!(double.switches <= 1, "double switched {}", double.switches);
        assert!(double.inline_share > 0.99, "{}", double.inline_share);
        assert!(single.inline_share > 0.2 && single.inline_share < 0.8);
        for variant in [Variant::Single, Variant::Double] {
            assert_eq!(report.result(variant, 25.0).unwrap().switches, 0);
        }
        assert!(double.max_deviation_percent <= 50.0);
    }

    /// Without priorities (one FIFO), the staged reductions of each
    /// post-process window delay the writes queued behind them: one
    /// threshold's flipping costs its writes many times the response of two
    /// thresholds, which hold inline; with foreground work first it does not.
    #[test]
    fn in_arrival_order_staged_work_delays_writes_between_switches() {
        let fifo = run(&short(1, QueueOrder::Fifo), "test");
        let single = fifo.result(Variant::Single, 60.0).unwrap();
        let double = fifo.result(Variant::Double, 60.0).unwrap();
        assert!(
            single.mean_response_us > 3.0 * double.mean_response_us,
            "single {} us, double {} us",
            single.mean_response_us,
            double.mean_response_us
        );
        let first = run(&short(1, QueueOrder::ForegroundFirst), "test");
        let single_first = first.result(Variant::Single, 60.0).unwrap();
        assert!(single_first.mean_response_us < 1.5 * double.mean_response_us);
    }

    /// Random overwrites on a small reduced tier: 2 048 blocks of 8 KiB
    /// (2:1 data, half of them duplicates) on 96 packs of 128 KiB. The
    /// writes of a run overwrite it many times, so the cleaner runs passes,
    /// and their reads and copies are the workers' time: at the same load
    /// the workers are busier than without the tier, and no write is
    /// refused (the live data fits).
    #[test]
    fn a_small_tier_under_random_overwrites_runs_the_cleaner_on_the_workers() {
        let config = Fig5Config {
            loads_percent: vec![45.0],
            measurements: 2,
            ..short(3, QueueOrder::ForegroundFirst)
        };
        let with_tier = Fig5Config {
            tier: Some(TierModel {
                logical_blocks: 2048,
                pack_bytes: 128 << 10,
                pack_count: 96,
                dedup: true,
            }),
            ..config.clone()
        };
        let offered = 50_000.0;
        for variant in [Variant::Inline, Variant::Post, Variant::Double] {
            let plain = run_load(&config, variant, 0, offered);
            let tiered = run_load(&with_tier, variant, 0, offered);
            assert!(plain.cleaning.is_none());
            let cleaning = tiered.cleaning.clone().expect("a tier");
            assert!(cleaning.passes > 10, "{variant:?}: {cleaning:?}");
            assert!(cleaning.packs_cleaned > 0 && cleaning.relocated_bytes > 0);
            assert!(cleaning.background_ns > 0, "{variant:?}: {cleaning:?}");
            assert_eq!(cleaning.refused_writes, 0, "{variant:?}: {cleaning:?}");
            assert!(cleaning.write_amplification > 1.0);
            assert!(
                tiered.utilisation > plain.utilisation * 1.02,
                "{variant:?}: {} vs {}",
                tiered.utilisation,
                plain.utilisation
            );
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_report() {
        let config = Fig5Config {
            loads_percent: vec![60.0],
            measurements: 2,
            ..short(9, QueueOrder::ForegroundFirst)
        };
        let first = run(&config, "test");
        assert_eq!(first, run(&config, "test"));
        let other = run(
            &Fig5Config {
                seed: 10,
                ..config.clone()
            },
            "test",
        );
        assert_ne!(first.results, other.results);
    }
}
