//! What a run reports. Everything is in virtual time; nothing here depends on
//! the machine the simulation ran on, so the same seed and trace give the
//! same JSON byte for byte.
//!
//! The JSON keys of [`SimReport`] and the first block of [`RunResult`]
//! fields (`policy`, `avg_iops`, `avg_response_us`, `fast_io_share`,
//! `fast_bytes_max`, `migrated_bytes`) are public interface.

use serde::Serialize;
use tierd_device::DeviceCounters;

use tierd_common::histogram::Histogram;

/// All runs over one trace and tier stack.
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// The trace file, or the synthetic label (`tierd_synth::label`).
    pub trace: String,
    /// `"file"` or `"synthetic"`.
    pub trace_kind: String,
    /// Tier-stack name (preset or file).
    pub tiers: String,
    /// Each tier's name, device and capacity, fastest first.
    pub tier_summary: String,
    pub runs: Vec<RunResult>,
    /// Sentences about how the runs were set up that a reader needs (e.g.
    /// how the page caches were sized); printed under the header.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Distinct bytes the replayed requests touch at 4 KiB granularity
    /// (`tierd sim --fast-bytes` counts it; percentages are of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// With more than one fast-tier size: every run as a point of its
    /// policy's curve (hit ratio and mean response against size).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub curve: Vec<crate::sweep::CurvePoint>,
}

impl SimReport {
    /// A report of `runs` (in the order given) with gains against `none` filled in.
    pub fn new(
        trace: String,
        trace_kind: &str,
        stack: &crate::stack::TierStack,
        runs: Vec<RunResult>,
    ) -> SimReport {
        let mut report = SimReport {
            trace,
            trace_kind: trace_kind.to_string(),
            tiers: stack.name.clone(),
            tier_summary: stack.summary(),
            runs,
            notes: Vec::new(),
            working_set_bytes: None,
            curve: Vec::new(),
        };
        report.compute_gains();
        if crate::sweep::sizes(&report).len() > 1 {
            report.curve = crate::sweep::curve(&report.runs);
        }
        report
    }

    /// Fills every run's [`RunResult::gain`] against the `none` run of the
    /// same fast-tier size (else any `none` run), when there is one.
    pub fn compute_gains(&mut self) {
        let baselines: Vec<(u64, f64, f64, f64)> = self
            .runs
            .iter()
            .filter(|run| run.policy == "none")
            .map(|run| {
                (
                    run.fast_bytes,
                    run.avg_iops,
                    run.avg_iops_first_hour,
                    run.avg_response_us,
                )
            })
            .collect();
        let Some(&any) = baselines.first() else {
            return;
        };
        for run in &mut self.runs {
            let (_, iops, iops_first_hour, response_us) = baselines
                .iter()
                .copied()
                .find(|baseline| baseline.0 == run.fast_bytes)
                .unwrap_or(any);
            let ratio = |value: f64, base: f64| (base > 0.0).then(|| value / base);
            run.gain = Some(Gain {
                baseline: "none".to_string(),
                iops_ratio: ratio(run.avg_iops, iops),
                iops_first_hour_ratio: ratio(run.avg_iops_first_hour, iops_first_hour),
                response_ratio: ratio(run.avg_response_us, response_us),
            });
        }
    }
}

/// A run compared with the baseline (`none`: everything on home).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gain {
    pub baseline: String,
    /// avg_iops / baseline avg_iops (paper 000 Table 4's gain is this − 1).
    pub iops_ratio: Option<f64>,
    pub iops_first_hour_ratio: Option<f64>,
    /// avg_response / baseline avg_response (paper 002 Table 5's C/A).
    pub response_ratio: Option<f64>,
}

/// One policy over one trace.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// Strategy name: `none`, `otf-ast`, `atsmf`, `fifo`, `lru`, `arc`, `s3fifo`.
    pub policy: String,
    /// `--replicas` setting of the run (`off`, `one`, `many`,
    /// `contiguous`); absent when replicas were not asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<String>,
    /// With `--replicas`: the HDD home's busy time (service) for user reads,
    /// summed, ms (paper 003 Tables 2-3's "disk access time").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_access_ms: Option<f64>,
    /// With `--replicas`: what the replicas did (`docs/sim/replicas.md`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<crate::replicas::ReplicaResult>,
    /// Completed user requests / replay duration (first arrival to last completion).
    pub avg_iops: f64,
    /// Mean user response time (arrival to completion of the last piece), µs.
    pub avg_response_us: f64,
    /// Share of user IOs served by the fastest tier (tiering: request pieces;
    /// caches: blocks the slots served alone, `cache.fast_access_ratio`).
    pub fast_io_share: f64,
    /// Most bytes held on the fastest tier at any period end (caches: blocks resident × block).
    pub fast_bytes_max: u64,
    /// The fast-tier capacity the run was given, bytes: the fast tier's
    /// capacity (`--fast-bytes` sets it), the same for every strategy of a
    /// report unless `--cache-bytes` overrides it for the caches. Tiering
    /// uses `fast_segments` whole segments of it.
    pub fast_bytes: u64,
    /// Tiering: the segments that fit in `fast_bytes` (floor); caches: None.
    pub fast_segments: Option<u64>,
    /// Bytes copied by completed moves (re-copies of dirty chunks included).
    pub migrated_bytes: u64,

    /// Completed requests / the first hour of replay (the whole replay when shorter),
    /// as paper 000 Table 4 measured it.
    pub avg_iops_first_hour: f64,
    /// Requests completed (split requests count once).
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    /// Device IOs the requests were split into (at segment or cache-run boundaries).
    pub pieces: u64,
    /// Requests of zero length, skipped.
    pub empty_requests: u64,
    /// Requests whose timestamp went backwards; replayed at the previous arrival.
    pub reordered_requests: u64,
    /// Open loop: requests issued after their due time because
    /// `max_outstanding_requests` were outstanding (the replay fell behind
    /// the trace: the volume is saturated), and how late they were, µs.
    /// Response times are measured from issue, as iostat's await is.
    pub deferred_requests: u64,
    pub defer_mean_us: f64,
    pub defer_max_us: f64,
    /// Virtual time from the first arrival to the last completion.
    pub elapsed_ns: u64,
    /// Issue time of the last request (open loop: the trace's span / speed,
    /// later when the replay fell behind).
    pub last_arrival_ns: u64,
    /// Response time percentiles, µs (bucket upper bounds, < 3.125 % high).
    pub response_p50_us: f64,
    pub response_p90_us: f64,
    pub response_p99_us: f64,
    pub response_p999_us: f64,
    pub response_max_us: f64,
    /// Response time of every request.
    pub response: Histogram,
    /// Reads and writes apart: `read_slow_fraction_100ms`, `read_p99_us`, ...
    #[serde(flatten)]
    pub directions: DirectionFigures,
    /// Home (last) tier over the run: iostat svctm (busy / IOs) and %util/100.
    pub home_svctm_ms: f64,
    pub home_util: f64,
    /// Moves completed, still running or queued at the end, and dropped
    /// before they started (refused by the placement table, or stale).
    pub moves: u64,
    pub moves_unfinished: u64,
    pub moves_dropped: u64,
    /// `moves_dropped` by reason: `refused`, `pinned` (the engine only),
    /// and the stale ones (`not_asked_again`, `waited_past_payback`,
    /// `room_taken_back`; `docs/placement.md`).
    pub moves_dropped_by_reason: tierd_core::placement::DroppedMoves,
    /// How long completed moves waited in the queue (acceptance to copy
    /// start), mean and most, µs.
    pub queue_wait_mean_us: f64,
    pub queue_wait_max_us: f64,
    /// Switch-over stalls (time IO to a moving segment was held at the
    /// flip), over completed moves, µs. 0: the flip holds nothing (writes
    /// during a move are mirrored; `docs/sim.md`).
    pub switch_over_stall_max_us: f64,
    pub switch_over_stall_mean_us: f64,
    /// Request pieces that waited for a switch-over (0).
    pub stalled_pieces: u64,
    /// User writes mirrored to a move's target, target halves that waited
    /// for a chunk copy to land first, and how long mirrored writes were
    /// acknowledged after their source half (the cost of mirroring), µs.
    pub mirrored_writes: u64,
    pub deferred_target_halves: u64,
    pub mirror_wait_max_us: f64,
    pub mirror_wait_mean_us: f64,
    /// Mean move duration (start of copy to flip), µs; ATSMF's AveMgTime.
    pub move_mean_us: Option<f64>,
    pub tiers: Vec<TierResult>,
    /// Caching baselines only.
    pub cache: Option<CacheResult>,
    /// Versus the `none` run of the same report.
    pub gain: Option<Gain>,
    /// Every completed move, in completion order.
    pub move_log: Vec<MoveRecord>,
    /// One entry per period (the last one may be partial).
    pub periods: Vec<PeriodRecord>,
    /// The settings of the run.
    pub settings: RunSettings,
}

/// Settings echoed in the result, so a result file says how it was made.
#[derive(Clone, Debug, Serialize)]
pub struct RunSettings {
    pub segment_bytes: u64,
    pub volume_bytes: u64,
    pub segments: u64,
    pub period_ns: u64,
    pub replay: crate::config::Replay,
    pub window: crate::config::Window,
    pub seed: u64,
    pub chunk_bytes: u64,
    pub max_concurrent_moves: u32,
    pub max_outstanding_requests: u32,
    pub cache_bytes: Option<u64>,
}

/// One tier over the whole run.
#[derive(Clone, Debug, Serialize)]
pub struct TierResult {
    pub name: String,
    /// Device preset or model name.
    pub device: String,
    pub capacity_bytes: u64,
    /// User request pieces served here.
    pub user_ios: u64,
    pub user_bytes: u64,
    /// user_ios / all user pieces.
    pub io_share: f64,
    /// Response of user pieces served here (from their request's arrival).
    pub response: Histogram,
    pub avg_response_us: f64,
    /// The device's own counters (user and background IOs).
    pub counters: DeviceCounters,
    /// iostat figures over the run: %util/100, svctm = busy / IOs, await = response / IOs.
    pub util: f64,
    pub svctm_ms: f64,
    pub await_ms: f64,
    pub iops: f64,
    /// Most bytes in use at a period end (home: the volume).
    pub used_bytes_max: u64,
}

/// What adaptive admission did over a run: the rule it ended with, and how
/// long each rule was in force (epochs are counts of sampled block
/// accesses, `tierd_core::cache::adaptive`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AdaptiveResult {
    /// `off`, `frequency:N` or `always`.
    pub rule_end: String,
    pub epochs: u64,
    pub switches: u64,
    /// Rule name → epochs it was in force.
    pub epochs_by_rule: std::collections::BTreeMap<String, u64>,
    /// Utilisation (work ÷ time) of home and the fast tier over the last epoch.
    pub home_utilization: f64,
    pub fast_utilization: f64,
    /// The real cache's read hits ÷ those of its rule's shadow, last epoch
    /// (0–1; low: fills did not land in time to hit).
    pub efficiency: f64,
    /// Whole-segment promotions: totals, and the last epoch's decisions.
    pub promotion: tierd_core::cache::PromotionStatus,
}

/// Block-cache baseline figures. The cache's unit is its block
/// (`block_bytes`); the `page_*` keys keep their names from the 4 KiB page
/// cache this replaced and count blocks: a request touching 3 blocks is 3
/// accesses.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CacheResult {
    /// The eviction policy (`fifo`, `lru`, `arc`, `s3fifo`).
    pub kind: String,
    /// The cache's bytes in 4 KiB pages (slots × block / 4 KiB).
    pub capacity_pages: u64,
    pub block_bytes: u64,
    pub slots: u64,
    /// `writeback`, `writethrough` or `writearound`.
    pub mode: String,
    /// `always`, `frequency:N` or `adaptive`.
    pub admission: String,
    /// What adaptive admission chose (absent for a fixed rule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveResult>,
    pub sequential_cutoff_bytes: u64,
    /// Block accesses of user requests, and those that found their block cached.
    pub page_accesses: u64,
    pub page_hits: u64,
    /// page_hits / page_accesses.
    pub hit_ratio: f64,
    pub read_pages: u64,
    pub read_hit_pages: u64,
    /// read_hit_pages / read_pages.
    pub read_hit_ratio: f64,
    pub write_pages: u64,
    pub write_hit_pages: u64,
    /// write_hit_pages / write_pages.
    pub write_hit_ratio: f64,
    /// Victims that were dirty (orphans, written back before their slot is
    /// reused) and clean (left at once).
    pub dirty_evictions: u64,
    pub clean_evictions: u64,
    /// Writebacks that cleaned a block (orphans and the dirty-block elevator).
    pub writebacks: u64,
    /// Most blocks dirty at once (sampled after each request is planned and
    /// each device completion), and dirty at the end of the run.
    pub dirty_blocks_max: u64,
    pub dirty_blocks_end: u64,
    /// Misses that did not allocate: part of a sequential run past the
    /// cutoff, not admitted, no free slot.
    pub bypassed: u64,
    pub rejected: u64,
    pub no_slot: u64,
    /// Read misses that took a slot (whole block read from home, written
    /// into the slot in the background).
    pub fills: u64,
    /// Runs of fills whose user part was read from home on its own, the
    /// whole blocks in the background (where that pays on home's device;
    /// `docs/engine/cache.md`).
    pub split_fills: u64,
    /// Background traffic: fill writes into the fast tier, writebacks to
    /// home; and home reads that merged partial writes into new blocks.
    pub fill_bytes: u64,
    pub writeback_bytes: u64,
    pub merge_read_bytes: u64,
    /// Share of blocks the fast tier served alone (read hits + writes
    /// answered by the slot alone): paper 002's memory access ratio.
    pub fast_access_ratio: f64,
    /// An SMR home with staging (`docs/engine/smr.md`): what the destage did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smr: Option<SmrStagingResult>,
}

/// The SMR destage of a cache run over a drive-managed SMR home.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SmrStagingResult {
    pub band_bytes: u64,
    /// Whole-band rewrites finished, and the dirty blocks they cleaned.
    pub band_rewrites: u64,
    pub band_rewrite_blocks: u64,
    /// Home bytes the rewrites read (the band's clean parts) and wrote
    /// (whole bands).
    pub destage_read_bytes: u64,
    pub destage_write_bytes: u64,
    /// Write blocks that went home because no slot was free (each reaches
    /// the drive's media cache), and blocks that waited for their band's
    /// rewrite.
    pub home_write_blocks: u64,
    pub blocked_blocks: u64,
}

/// Read and write response times apart (paper 001 counts reads over
/// 100 ms). Keys of every run's JSON, at its top level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DirectionFigures {
    /// Share of read requests that took more than 100 ms (0 without reads).
    pub read_slow_fraction_100ms: f64,
    pub read_mean_us: f64,
    /// Percentile of read responses (bucket upper bound, < 3.125 % high).
    pub read_p99_us: f64,
    pub write_mean_us: f64,
    pub write_p99_us: f64,
}

/// Collects [`DirectionFigures`] as requests complete.
#[derive(Clone, Debug, Default)]
pub struct DirectionRecorder {
    read: Histogram,
    write: Histogram,
    reads_over_100ms: u64,
}

impl DirectionRecorder {
    pub fn record(&mut self, is_write: bool, response_ns: u64) {
        if is_write {
            self.write.record(response_ns);
        } else {
            self.read.record(response_ns);
            if response_ns > 100_000_000 {
                self.reads_over_100ms += 1;
            }
        }
    }

    /// Adds `other`'s requests (e.g. another connection's, in a live replay).
    pub fn merge(&mut self, other: &DirectionRecorder) {
        self.read.merge(&other.read);
        self.write.merge(&other.write);
        self.reads_over_100ms += other.reads_over_100ms;
    }

    pub fn figures(&self) -> DirectionFigures {
        let us = |ns: Option<u64>| ns.map_or(0.0, |ns| ns as f64 / 1e3);
        let reads = self.read.count();
        DirectionFigures {
            read_slow_fraction_100ms: if reads > 0 {
                self.reads_over_100ms as f64 / reads as f64
            } else {
                0.0
            },
            read_mean_us: self.read.mean_ns().unwrap_or(0.0) / 1e3,
            read_p99_us: us(self.read.quantile_ns(0.99)),
            write_mean_us: self.write.mean_ns().unwrap_or(0.0) / 1e3,
            write_p99_us: us(self.write.quantile_ns(0.99)),
        }
    }
}

/// A completed move.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MoveRecord {
    pub segment: u32,
    pub from: u8,
    pub to: u8,
    /// When the plan was accepted, copying started, and the table flipped.
    pub accepted_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Bytes copied (every chunk exactly once).
    pub bytes: u64,
    /// Copy passes over the segment: 1 (writes during the copy are
    /// mirrored, so no chunk is copied again).
    pub copy_passes: u32,
    /// Time new IO to the segment was held at switch-over: 0 (the flip
    /// holds nothing; see `docs/sim.md`).
    pub stall_ns: u64,
    /// User writes during the move that were also written to the target,
    /// and target halves that waited for a chunk copy to land first.
    pub mirrored_writes: u64,
    pub deferred_target_halves: u64,
    /// Longest a mirrored write was acknowledged after its source half
    /// completed (what the mirror cost it), ns.
    pub mirror_wait_max_ns: u64,
    /// User request pieces held during the switch-over: 0.
    pub held_pieces: u64,
    pub rule: String,
    pub detail: String,
}

/// One period, per tier, iostat style.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeriodRecord {
    pub index: u64,
    pub start_ns: u64,
    /// End of the period (the last period ends at the last completion).
    pub end_ns: u64,
    /// User requests completed in the period and their mean response.
    pub requests: u64,
    pub avg_response_us: f64,
    pub moves_started: u64,
    pub moves_finished: u64,
    pub tiers: Vec<TierPeriod>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TierPeriod {
    /// User request pieces completed here.
    pub user_ios: u64,
    /// Migration (or cache fill / write-back) IOs completed here.
    pub migration_ios: u64,
    /// All IOs the device completed and iops over the period (iostat r/s + w/s).
    pub device_ios: u64,
    pub iops: f64,
    /// Busy fraction (iostat %util / 100).
    pub util: f64,
    /// Fraction of the period during which at least one user IO was
    /// outstanding at the device: %util of user IO alone, without migration
    /// copies (what `otf-ast` controls; `TierPeriodStats::user_busy_ns`).
    pub user_util: f64,
    /// iostat svctm: busy time / IOs.
    pub svctm_ms: f64,
    /// iostat await: response time / IOs.
    pub await_ms: f64,
    /// Bytes held on this tier at the period end.
    pub used_bytes: u64,
}
