//! Deterministic simulation testing of the engine core.
//!
//! One root seed derives a configuration (tier count and sizes, segment and
//! chunk size, policy, fault rates) and a workload (reads, writes, FUA
//! writes, flushes, trims, write-zeroes, hot spots that move, forced moves,
//! migration steps interleaved with IO, policy periods in virtual time), and
//! runs it single-threaded on [`CrashDisk`]s and memory tiers with a
//! [`ManualClock`]. Faults: crashes (unflushed sectors survive or not, at
//! random), EIO on reads and writes, slow devices, a fast tier that goes away
//! for a while (marked unavailable in the volume while gone), damaged
//! journals, a crash inside a move's journal append (torn record, through
//! [`crate::meta::MetaFaults`]), and a full metadata device (the append fails
//! with ENOSPC after a short write; the run goes on).
//!
//! The checker keeps, for every 512-byte sector, the set of values a read may
//! return now and the set it may return after a crash:
//! - every successful read returns a value in the "now" set (normally exactly
//!   the last acknowledged write);
//! - after a crash and restart, every sector holds a value in the "crash" set
//!   (what was flushed or FUA-written, or anything written after that — never
//!   bytes that were never written there);
//! - after a restart the placement equals the placement of the last move
//!   whose journal append succeeded; a move whose append failed (torn or
//!   ENOSPC) never flipped; the restart drops a torn last record exactly when
//!   the process died inside an append (never refuses it, never finds one
//!   otherwise);
//! - a damaged journal stops the restart with the file and byte offset;
//! - while a tier is gone (when it goes, and at random times): every segment
//!   on it reads back allowed data (served from a current home copy) or
//!   fails, and fails exactly when `Volume::unavailable_ranges` names it;
//!   every range names a gone tier and covers whole segments placed there;
//!   with no tier gone, no range is reported;
//! - after a failed (ENOSPC) append the segment still reads back correctly.
//!
//! A third of the seeds build a cache volume ([`DstCacheConfig`]): the run
//! drives `Volume::cache_step` (commits, writebacks) itself, crashes right
//! after writebacks, tears or fills the FLUSH commit's journal append,
//! switches modes online and loses the cache tier (EIO or gone); blocks
//! `Volume::unavailable_ranges` reports lost must fail to read, every other
//! block must read allowed data (never home's stale copy of a lost dirty
//! block). One writeback cache seed in three has an SMR home with staging
//! ([`DstSmrConfig`]): whole-band rewrites instead of writebacks, left
//! mid-band between steps, so writes and discards block on them and help,
//! crashes land mid-band and device faults end rewrites.
//!
//! A third of the seeds (their own stream) put the fast tiers (and in half
//! of those home too) on reduced tiers ([`DstReduceConfig`]): compression
//! and dedup over the crash disk and its faults, inline, post-process or
//! auto with forced switches, staged blocks reduced at random points, and
//! in some seeds a physical device smaller than the logical one (writes
//! then fail with ENOSPC when it fills). Their sectors repeat every 4 KiB
//! within one write, so multi-block writes deduplicate, and are half
//! zeroes, so they compress.
//!
//! A third of the seeds whose home is not reduced (their own stream) put
//! replicas on home ([`DstReplicaConfig`], `docs/replicas.md`): a home
//! device half as large again as the volume, so there is free space, and
//! settings that plan copies from every few reads; the run makes copies at
//! random points, so copies are made, routed to, dropped by writes, trims
//! and writes into their space, and crashes land between a copy and its
//! journal commit. Every seed also checks, at random points, that the
//! holes `Volume::block_status` reports read as zeroes.
//!
//! Same seed, same run: [`run_seed`] returns a digest of the final state.
//! Fault kinds and check counts go to [`DstReport::faults`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tierd_common::clock::{Clock, ManualClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_core::cache::CacheMode;
use tierd_policy::cache::CacheKind;
use tierd_policy::{PolicyConfig, PolicyKind, TierId};

use crate::device::crash::{CrashDisk, SECTOR_BYTES};
use crate::device::fault::{FaultConfig, FaultDevice};
use crate::device::memory::MemoryDevice;
use crate::device::reduce::{ReduceOptions, ReducedDevice};
use crate::device::replica::{ReplicaDevice, ReplicaOptions};
use crate::device::BlockDevice;
use crate::meta::{AppendFault, CheckpointFault, MetaStore};
use crate::volume::{
    CacheOptions, CacheStep, ChunkRead, CopyBegun, MigrationOptions, StepOutcome, TierSpec, Volume,
    VolumeError, VolumeOptions,
};

/// What a seed derived (printed at start so a failure can be read).
#[derive(Clone, Debug, Serialize)]
pub struct DstConfig {
    pub seed: u64,
    pub steps: u32,
    pub segments: u32,
    pub segment_bytes: u64,
    pub chunk_bytes: u64,
    /// Fastest first; the last is home. `memory` tiers are volatile.
    pub tiers: Vec<String>,
    pub tier_segments: Vec<u32>,
    pub policy: String,
    pub read_error_probability: f64,
    pub write_error_probability: f64,
    pub crash_probability: f64,
    pub outage_probability: f64,
    pub journal_corruption_probability: f64,
    /// A slow device: this share of operations waits `delay_ns` first (in
    /// virtual time, so periods and move timings stretch).
    pub delay_probability: f64,
    pub delay_ns: u64,
    /// Per migration step: arm a torn journal append (the process dies
    /// part-way through a move's `Place` record), drive the move into it and
    /// crash there.
    pub torn_append_probability: f64,
    /// Per migration step: arm "the metadata device is full" for the next
    /// journal append and keep running.
    pub full_meta_probability: f64,
    /// Per period tick: write a checkpoint with a fault armed — the process
    /// dies writing `checkpoint.tmp` or right after renaming it into place
    /// (then crash), or the metadata device is full (then go on).
    pub checkpoint_fault_probability: f64,
    /// A cache volume (a third of the seeds): the first tier is used wholly
    /// as a block cache over home (`tiers` is then `[cache tier, home]` and
    /// the policy `none`); `None`: a tiered volume.
    pub cache: Option<DstCacheConfig>,
    /// Reduced tiers (a third of the seeds); `None`: none.
    pub reduce: Option<DstReduceConfig>,
    /// Replicas on home (a third of the seeds whose home is not reduced).
    pub replicas: Option<DstReplicaConfig>,
}

/// What a replica seed derived.
#[derive(Clone, Debug, Serialize)]
pub struct DstReplicaConfig {
    pub max_copies: u32,
    /// Per workload step: make up to four copies.
    pub copy_probability: f64,
    /// A read session ends at this many extents (small: placements often).
    pub session_extents: usize,
}

/// What a reduce seed derived.
#[derive(Clone, Debug, Serialize)]
pub struct DstReduceConfig {
    /// `inline`, `post` or `auto`.
    pub mode: String,
    /// Home is reduced too.
    pub home: bool,
    /// Physical bytes per logical byte of each reduced tier's device
    /// (below 1: overcommitted; the cleaner makes room, and writes may
    /// find it full).
    pub physical_per_logical: f64,
    /// Per workload step: reduce a few staged blocks.
    pub reduce_probability: f64,
    /// Per workload step: force a switch decision (auto).
    pub switch_probability: f64,
}

/// What a cache seed derived: a small cache, so eviction, orphans,
/// writeback and slot reuse happen constantly.
#[derive(Clone, Debug, Serialize)]
pub struct DstCacheConfig {
    /// `writeback` (three in four cache seeds) or `writethrough`.
    pub mode: String,
    pub block_bytes: u64,
    /// Slots of the cache tier (its size is `slots * block_bytes`).
    pub slots: u32,
    /// Eviction policy: `fifo`, `lru`, `arc` or `s3fifo`; or `adaptive`
    /// (its eviction order with adaptive admission, as `serve`'s default).
    pub policy: String,
    /// No sequential cutoff (every write is cached) or the default one.
    pub sequential_cutoff_bytes: u64,
    /// Per cache work step: switch the mode online (`writeback`,
    /// `writethrough`, `writearound` or `detach`; never to writeback over a
    /// memory tier).
    pub mode_switch_probability: f64,
    /// Per writeback that wrote a block: crash right there (its home write
    /// done but not flushed, its `Unmapped` not committed).
    pub crash_after_writeback_probability: f64,
    /// Per cache work step: queue a few blocks to copy in (a promotion,
    /// `Volume::cache_promote`), so the background loads run beside user
    /// IO, faults and crashes.
    pub promote_probability: f64,
    /// An SMR home with staging (`docs/engine/smr.md`) in one writeback
    /// cache seed in three: whole-band destage instead of writeback.
    pub smr: Option<DstSmrConfig>,
}

/// A cache seed's SMR home: small bands and destage IOs, and few IOs per
/// background step, so rewrites span steps and writes meet them mid-band
/// (they block and help), crashes land mid-band, and faults hit them.
#[derive(Clone, Debug, Serialize)]
pub struct DstSmrConfig {
    pub band_blocks: u64,
    pub first_band_blocks: u64,
    pub chunk_blocks: u64,
    /// Destage IO bytes per background step, in chunks.
    pub step_chunks: u64,
    pub idle_ns: u64,
}

/// One seed's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DstReport {
    pub seed: u64,
    pub operations: u64,
    pub faults: BTreeMap<String, u64>,
    pub moves_completed: u64,
    /// `None` when every check held.
    pub failure: Option<String>,
    /// The cache mode a cache seed started in (`None`: a tiered volume).
    pub cache_mode: Option<String>,
    /// The reduction mode of a reduce seed's tiers (`None`: unreduced).
    pub reduce_mode: Option<String>,
    /// Home carries replicas.
    pub replicas: bool,
    /// Hash of the final placement and contents (same seed → same digest).
    pub digest: u64,
}

/// Per-sector value sets (write ids; 0 = zeroes).
#[derive(Clone, Debug)]
struct Sector {
    now: Vec<u64>,
    crash: Vec<u64>,
}

fn add(set: &mut Vec<u64>, value: u64) {
    if !set.contains(&value) {
        set.push(value);
    }
}

/// Contents of one sector written by write `id`.
fn sector_bytes(id: u64, sector: u64, out: &mut [u8]) {
    if id == 0 {
        out.fill(0);
        return;
    }
    out[0..8].copy_from_slice(&id.to_le_bytes());
    out[8..16].copy_from_slice(&sector.to_le_bytes());
    let mut state = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ sector;
    // Half random, half zeroes: compressible about 2:1 on reduced tiers.
    let half = out.len() / 2;
    out[half..].fill(0);
    for byte in &mut out[16..half] {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        *byte = (state >> 56) as u8;
    }
}

/// Which write a sector's bytes came from, or `Err` for bytes no write made.
fn decode_sector(sector: u64, bytes: &[u8]) -> Result<u64, String> {
    if bytes.iter().all(|byte| *byte == 0) {
        return Ok(0);
    }
    let mut id_bytes = [0u8; 8];
    id_bytes.copy_from_slice(&bytes[0..8]);
    let id = u64::from_le_bytes(id_bytes);
    let mut expected = vec![0u8; bytes.len()];
    sector_bytes(id, sector, &mut expected);
    if id != 0 && expected == bytes {
        Ok(id)
    } else {
        Err(format!(
            "sector {sector} holds bytes no write produced (first bytes {:02x?})",
            &bytes[..16]
        ))
    }
}

struct Tier {
    name: String,
    disk: Option<Arc<CrashDisk>>,
    memory: Option<Arc<MemoryDevice>>,
    faults: Arc<FaultDevice>,
    /// A reduced tier's options (its device is the reduction over `faults`).
    reduce: Option<ReduceOptions>,
    /// The open reduced device (dropped with the volume at a crash) and
    /// whether this tier's device was formatted yet.
    reduced: parking_lot::Mutex<(Option<Arc<ReducedDevice>>, bool)>,
    /// A replicated tier's options (home on replica seeds).
    replica: Option<ReplicaOptions>,
    /// The open replica layer and whether its device was formatted yet.
    replicated: parking_lot::Mutex<(Option<Arc<ReplicaDevice>>, bool)>,
}

/// Sector contents repeat with this period (in sectors) within one write on
/// reduce seeds, so blocks of one write are identical (deduplicated).
const REDUCE_SECTOR_PERIOD: u64 = 8;

struct Run {
    config: DstConfig,
    rng: SeededRng,
    /// Draws for reduce seeds' own work (staged reductions, switches).
    reduce_rng: SeededRng,
    /// Draws for replica seeds' copies and every seed's block-status
    /// checks (their own stream).
    replica_rng: SeededRng,
    /// Draws for the faults added after the first recorded campaigns
    /// (metadata faults, lost-tier sweeps): a separate stream, so the
    /// workload `rng` draws stays what it was for seeds without them.
    fault_rng: SeededRng,
    /// Draws for holding a chunk copy across user writes (its own stream,
    /// for the same reason).
    hold_rng: SeededRng,
    /// Draws for cache promotions (their own stream, for the same reason).
    promote_rng: SeededRng,
    /// A chunk read by `copy_begin` and not yet written by `copy_end`: user
    /// writes run in between, as they do beside the live copier threads.
    held: Option<ChunkRead>,
    /// Placement as of the last move whose journal append succeeded (what a
    /// restart must come back with).
    durable_placement: Vec<TierId>,
    clock: Arc<ManualClock>,
    tiers: Vec<Tier>,
    meta_dir: PathBuf,
    sectors: Vec<Sector>,
    next_id: u64,
    report: DstReport,
    fault_config: FaultConfig,
    hot_segment: u32,
}

/// Derives the configuration for `seed`.
pub fn derive_config(seed: u64, steps: u32) -> DstConfig {
    let mut rng = SeededRng::new(seed).derive(1);
    let segment_bytes = 1u64 << 20;
    let chunk_bytes = [64u64 << 10, 256 << 10, 1 << 20][rng.below(3) as usize];
    let segments = 4 + rng.below(9) as u32;
    let tier_count = 2 + rng.below(2) as usize;
    let mut tiers = Vec::new();
    let mut tier_segments = Vec::new();
    for index in 0..tier_count - 1 {
        let kind = if rng.below(2) == 0 { "memory" } else { "disk" };
        tiers.push(format!("{kind}{index}"));
        tier_segments.push(1 + rng.below(u64::from(segments) - 1) as u32);
    }
    tiers.push("home".to_string());
    tier_segments.push(segments);
    let policy = ["none", "otf-ast", "atsmf"][rng.below(3) as usize].to_string();
    let faulty = rng.below(3) == 0;
    let mut config = DstConfig {
        seed,
        steps,
        segments,
        segment_bytes,
        chunk_bytes,
        tiers,
        tier_segments,
        policy,
        read_error_probability: if faulty { 0.01 } else { 0.0 },
        write_error_probability: if faulty { 0.01 } else { 0.0 },
        crash_probability: 0.004 + rng.next_f64() * 0.01,
        outage_probability: if rng.below(4) == 0 { 0.005 } else { 0.0 },
        journal_corruption_probability: 0.25,
        // Drawn last so the seeds recorded before this field derive the
        // same configuration otherwise.
        delay_probability: if rng.below(4) == 0 { 0.05 } else { 0.0 },
        delay_ns: 50_000_000,
        // Drawn after every field above, for the same reason.
        torn_append_probability: if rng.below(3) == 0 { 0.05 } else { 0.0 },
        full_meta_probability: if rng.below(3) == 0 { 0.05 } else { 0.0 },
        // Drawn after every field above, for the same reason.
        checkpoint_fault_probability: if rng.below(3) == 0 { 0.25 } else { 0.0 },
        cache: None,
        reduce: None,
        replicas: None,
    };
    // Reduce seeds draw from their own stream too.
    let mut reduce_rng = SeededRng::new(seed).derive(11);
    if reduce_rng.below(3) == 0 {
        config.reduce = Some(DstReduceConfig {
            mode: ["inline", "post", "auto"][reduce_rng.below(3) as usize].to_string(),
            home: reduce_rng.below(2) == 0,
            // Full (ENOSPC), tight (the cleaner keeps making room), roomy.
            physical_per_logical: [0.25, 0.1, 2.0, 2.0][reduce_rng.below(4) as usize],
            reduce_probability: 0.05 + reduce_rng.next_f64() * 0.2,
            switch_probability: if reduce_rng.below(2) == 0 { 0.05 } else { 0.0 },
        });
    }
    // Replica seeds too (their own stream), on a home that is not reduced.
    let mut replica_rng = SeededRng::new(seed).derive(13);
    let home_reduced = config.reduce.as_ref().is_some_and(|reduce| reduce.home);
    if replica_rng.below(3) == 0 && !home_reduced {
        config.replicas = Some(DstReplicaConfig {
            max_copies: 1 + replica_rng.below(4) as u32,
            copy_probability: 0.1 + replica_rng.next_f64() * 0.4,
            session_extents: 2 + replica_rng.below(8) as usize,
        });
    }
    // Cache seeds draw from their own stream (and only override), so a
    // tiered seed derives what it derived before cache seeds existed.
    let mut cache_rng = SeededRng::new(seed).derive(7);
    if cache_rng.below(3) == 0 {
        let mode = if cache_rng.below(4) == 0 {
            "writethrough"
        } else {
            "writeback"
        };
        // A writeback cache needs a persistent tier (a memory one is refused
        // unless `unsafe_volatile`); a writethrough one may be RAM.
        let kind = if mode == "writethrough" && cache_rng.below(2) == 0 {
            "memory"
        } else {
            "disk"
        };
        let block_bytes = [4096u64, 16 << 10, 64 << 10][cache_rng.below(3) as usize];
        let slots = 4 + cache_rng.below(61) as u32;
        config.tiers = vec![format!("{kind}0"), "home".to_string()];
        config.tier_segments = vec![0, config.segments];
        config.policy = "none".to_string();
        config.cache = Some(DstCacheConfig {
            mode: mode.to_string(),
            block_bytes,
            slots,
            // `adaptive` (the default placement since issue 14) in one cache
            // seed in four, from a stream of its own so the seeds' other
            // draws stay what they were.
            policy: if SeededRng::new(seed).derive(8).below(4) == 0 {
                let _ = cache_rng.below(4);
                "adaptive".to_string()
            } else {
                ["fifo", "lru", "arc", "s3fifo"][cache_rng.below(4) as usize].to_string()
            },
            sequential_cutoff_bytes: if cache_rng.below(2) == 0 {
                0
            } else {
                tierd_core::cache::DEFAULT_SEQUENTIAL_CUTOFF_BYTES
            },
            mode_switch_probability: if cache_rng.below(3) == 0 { 0.05 } else { 0.0 },
            crash_after_writeback_probability: 0.02 + cache_rng.next_f64() * 0.03,
            // From a stream of its own (added after the recorded campaigns).
            promote_probability: if SeededRng::new(seed).derive(9).below(2) == 0 {
                0.3
            } else {
                0.0
            },
            // From a stream of its own (added after the recorded campaigns).
            smr: {
                let mut smr_rng = SeededRng::new(seed).derive(10);
                (mode == "writeback" && smr_rng.below(3) == 0).then(|| {
                    let chunk_blocks = 1 + smr_rng.below(2);
                    DstSmrConfig {
                        band_blocks: chunk_blocks * (2 + smr_rng.below(7)),
                        first_band_blocks: smr_rng.below(4),
                        chunk_blocks,
                        step_chunks: 1 + smr_rng.below(4),
                        idle_ns: smr_rng.below(400_000_000),
                    }
                })
            },
        });
    }
    config
}

fn policy_config(name: &str) -> PolicyConfig {
    match name {
        "otf-ast" => PolicyConfig::default_for(PolicyKind::OtfAst),
        "atsmf" => PolicyConfig::default_for(PolicyKind::Atsmf),
        _ => PolicyConfig::None,
    }
}

/// A replica seed's options: extents of 64 KiB (16 per 1 MiB segment),
/// copies of members 1 MiB from their group's centre, sessions closed by
/// size (the run's clock moves only at period ticks), copies only when the
/// run makes them (no idle time ever passes for the copier thread).
fn dst_replica_options(replicas: &DstReplicaConfig) -> ReplicaOptions {
    let mut options = ReplicaOptions::default();
    options.manager.extent_bytes = 64 << 10;
    options.manager.far_bytes = 1 << 20;
    options.manager.max_copies = replicas.max_copies;
    options.manager.max_share = 0.5;
    options.manager.min_recurrences = 1;
    options.manager.session_gap_ns = 1_000_000;
    options.manager.max_session_extents = replicas.session_extents;
    options.idle_ns = u64::MAX;
    options.copies_per_commit = 4;
    options
}

/// A reduce seed's options for a tier of `logical_bytes`: small packs and
/// journal so seals, reuse and checkpoints happen often; no worker threads
/// (the run reduces staged blocks itself, deterministically).
fn dst_reduce_options(reduce: &DstReduceConfig, logical_bytes: u64) -> ReduceOptions {
    use tierd_core::reduce::{ModeSetting, SwitchConfig};
    ReduceOptions {
        logical_bytes: Some(logical_bytes),
        pack_bytes: 16 << 10,
        index_entries: 1 << 12,
        stage_bytes: Some(logical_bytes / 4),
        switch: SwitchConfig {
            setting: match reduce.mode.as_str() {
                "inline" => ModeSetting::Inline,
                "post" => ModeSetting::Post,
                _ => ModeSetting::Auto,
            },
            ..SwitchConfig::default()
        },
        workers: 0,
        ..ReduceOptions::default()
    }
}

impl Run {
    /// What a sector's contents are keyed by: its number, or on reduce
    /// seeds its place in a 4 KiB block (so a write's blocks are identical).
    fn sector_key(&self, sector: u64) -> u64 {
        if self.config.reduce.is_some() {
            sector % REDUCE_SECTOR_PERIOD
        } else {
            sector
        }
    }

    /// Reduce seeds: reduce some staged blocks, force a mode switch.
    fn reduce_work(&mut self) {
        let Some(reduce) = self.config.reduce.clone() else {
            return;
        };
        for index in 0..self.tiers.len() {
            let Some(device) = self.tiers[index].reduced.lock().0.clone() else {
                continue;
            };
            if self.reduce_rng.next_f64() < reduce.reduce_probability {
                match device.reduce_staged(1 + self.reduce_rng.below(16) as usize) {
                    Ok(done) => {
                        *self
                            .report
                            .faults
                            .entry("reduce_staged_blocks".into())
                            .or_insert(0) += done as u64
                    }
                    Err(_) => self.count("reduce_staged_errors"),
                }
            }
            if self.reduce_rng.next_f64() < reduce.switch_probability
                && device.decide(self.reduce_rng.next_f64()).is_some()
            {
                self.count("reduce_mode_switches");
            }
        }
    }

    /// Tallies what the reduced tiers did (before a crash drops them).
    /// Replica seeds: make a few copies now and then.
    fn replica_work(&mut self) {
        let Some(replicas) = self.config.replicas.clone() else {
            return;
        };
        let Some(device) = self
            .tiers
            .last()
            .and_then(|tier| tier.replicated.lock().0.clone())
        else {
            return;
        };
        if self.replica_rng.next_f64() < replicas.copy_probability {
            match device.run_copies_now(1 + self.replica_rng.below(4) as usize) {
                Ok(made) => {
                    *self
                        .report
                        .faults
                        .entry("replica_copies_made".into())
                        .or_insert(0) += made as u64;
                }
                Err(_) => self.count("replica_copy_errors"),
            }
        }
    }

    /// Tallies what the replica layer did (before a crash drops it).
    fn count_replicas(&mut self) {
        let Some(device) = self
            .tiers
            .last()
            .and_then(|tier| tier.replicated.lock().0.clone())
        else {
            return;
        };
        let stats = device.manager_stats();
        for (key, value) in [
            ("replica_reads_from_copies", stats.reads_from_replicas),
            ("replica_dropped_by_writes", stats.dropped_by_writes),
            ("replica_dropped_by_reclaim", stats.dropped_by_reclaim),
            ("replica_dropped_by_trims", stats.dropped_by_trims),
            ("replica_copies_cancelled", stats.copies_cancelled),
        ] {
            *self.report.faults.entry(key.into()).or_insert(0) += value;
        }
    }

    /// Every hole `Volume::block_status` reports over a random range reads
    /// as zeroes now.
    fn check_block_status(&mut self, volume: &Volume) -> Result<(), String> {
        // From its own stream: the workload's draws stay what they were.
        let sectors_total = self.volume_bytes() / SECTOR_BYTES;
        let start = self.replica_rng.below(sectors_total);
        let length_sectors = (1 + self.replica_rng.below(4096)).min(sectors_total - start);
        let (offset, length) = (start * SECTOR_BYTES, length_sectors * SECTOR_BYTES);
        let Ok(runs) = volume.block_status(offset, length) else {
            self.count("block_status_errors");
            return Ok(());
        };
        let mut at = offset;
        for run in runs {
            if !run.allocated {
                for sector in at / SECTOR_BYTES..(at + run.length_bytes) / SECTOR_BYTES {
                    if !self.sectors[sector as usize].now.contains(&0) {
                        return Err(format!(
                            "block_status reports a hole at sector {sector} (run {at}+{}), which holds \
                             written data {:?}",
                            run.length_bytes, self.sectors[sector as usize].now
                        ));
                    }
                }
                self.count("block_status_hole_runs");
            }
            at += run.length_bytes;
        }
        self.count("block_status_checks");
        Ok(())
    }

    fn count_reduction(&mut self) {
        for index in 0..self.tiers.len() {
            let Some(device) = self.tiers[index].reduced.lock().0.clone() else {
                continue;
            };
            let status = device.status();
            for (key, value) in [
                ("reduce_dedup_hits", status.dedup_hits),
                ("reduce_zero_bytes", status.zero_bytes),
                ("reduce_compress_saved_bytes", status.compress_saved_bytes),
                ("reduce_stage_overflows", status.stage_overflows),
                ("reduce_cleaner_passes", status.cleaner_passes),
                ("reduce_cleaned_packs", status.cleaned_packs),
            ] {
                *self.report.faults.entry(key.into()).or_insert(0) += value;
            }
        }
    }

    fn new(config: DstConfig, meta_dir: PathBuf) -> Run {
        let rng = SeededRng::new(config.seed).derive(2);
        let clock = Arc::new(ManualClock::new(0));
        let fault_config = FaultConfig {
            read_error_probability: config.read_error_probability,
            write_error_probability: config.write_error_probability,
            delay_probability: config.delay_probability,
            delay_ns: config.delay_ns,
            ..FaultConfig::default()
        };
        let tiers = config
            .tiers
            .iter()
            .zip(&config.tier_segments)
            .enumerate()
            .map(|(index, (name, segments))| {
                let size = match &config.cache {
                    Some(cache) if index == 0 => u64::from(cache.slots) * cache.block_bytes,
                    _ => u64::from(*segments) * config.segment_bytes,
                };
                let is_home = index + 1 == config.tiers.len();
                let reduce = config
                    .reduce
                    .as_ref()
                    .filter(|reduce| !is_home || reduce.home)
                    .map(|reduce| dst_reduce_options(reduce, size));
                let replica = config
                    .replicas
                    .as_ref()
                    .filter(|_| is_home)
                    .map(dst_replica_options);
                // A reduced tier's device holds its metadata besides the
                // packs (about 300 KiB here plus the block map twice).
                let device_size = match (&reduce, &config.reduce) {
                    (Some(_), Some(derived)) => {
                        ((size as f64 * derived.physical_per_logical) as u64 + (1 << 20)) / 4096
                            * 4096
                    }
                    // Half as much again as the volume, for copies, and the
                    // replica metadata (under 1 MiB here).
                    _ if replica.is_some() => (size * 3 / 2 + (1 << 20)) / (64 << 10) * (64 << 10),
                    _ => size,
                };
                let (disk, memory, inner): (_, _, Arc<dyn BlockDevice>) =
                    if name.starts_with("memory") {
                        let memory = Arc::new(MemoryDevice::new(name.clone(), device_size));
                        (None, Some(memory.clone()), memory)
                    } else {
                        let disk = Arc::new(CrashDisk::new(name.clone(), device_size));
                        (Some(disk.clone()), None, disk)
                    };
                let faults = Arc::new(FaultDevice::new(
                    inner,
                    fault_config.clone(),
                    config.seed ^ (index as u64 + 1) << 32,
                    clock.clone(),
                ));
                Tier {
                    name: name.clone(),
                    disk,
                    memory,
                    faults,
                    reduce,
                    reduced: parking_lot::Mutex::new((None, false)),
                    replica,
                    replicated: parking_lot::Mutex::new((None, false)),
                }
            })
            .collect();
        let sector_count = u64::from(config.segments) * config.segment_bytes / SECTOR_BYTES;
        Run {
            rng,
            fault_rng: SeededRng::new(config.seed).derive(3),
            hold_rng: SeededRng::new(config.seed).derive(5),
            promote_rng: SeededRng::new(config.seed).derive(10),
            reduce_rng: SeededRng::new(config.seed).derive(12),
            replica_rng: SeededRng::new(config.seed).derive(14),
            held: None,
            durable_placement: Vec::new(),
            clock,
            tiers,
            meta_dir,
            sectors: vec![
                Sector {
                    now: vec![0],
                    crash: vec![0],
                };
                sector_count as usize
            ],
            next_id: 1,
            report: DstReport {
                seed: config.seed,
                cache_mode: config.cache.as_ref().map(|cache| cache.mode.clone()),
                reduce_mode: config.reduce.as_ref().map(|reduce| reduce.mode.clone()),
                replicas: config.replicas.is_some(),
                ..DstReport::default()
            },
            fault_config,
            hot_segment: 0,
            config,
        }
    }

    fn count(&mut self, kind: &str) {
        *self.report.faults.entry(kind.to_string()).or_insert(0) += 1;
    }

    /// Opens the volume (faults off for recovery); returns its recovery notes.
    fn open(&self) -> Result<(Volume, Vec<String>), String> {
        // Recovery reads must not see injected faults.
        self.set_faults(false);
        let mut specs = Vec::new();
        for tier in &self.tiers {
            let device: Arc<dyn BlockDevice> = match &tier.reduce {
                None if tier.replica.is_some() => {
                    let options = tier.replica.clone().unwrap_or_default();
                    let mut replicated = tier.replicated.lock();
                    let device = ReplicaDevice::open(
                        tier.name.clone(),
                        tier.faults.clone(),
                        options,
                        self.clock.clone(),
                        !replicated.1,
                    )
                    .map_err(|error| {
                        self.set_faults(true);
                        format!("replicated tier {}: {error}", tier.name)
                    })?;
                    let device = Arc::new(device);
                    *replicated = (Some(device.clone()), true);
                    device
                }
                None => tier.faults.clone(),
                Some(options) => {
                    let mut reduced = tier.reduced.lock();
                    // A memory tier starts empty at every open.
                    let format = !reduced.1 || tier.memory.is_some();
                    let device = ReducedDevice::open(
                        tier.name.clone(),
                        tier.faults.clone(),
                        options.clone(),
                        self.clock.clone(),
                        format,
                    )
                    .map_err(|error| {
                        self.set_faults(true);
                        format!("reduced tier {}: {error}", tier.name)
                    })?;
                    let device = Arc::new(device);
                    *reduced = (Some(device.clone()), true);
                    device
                }
            };
            specs.push(TierSpec {
                name: tier.name.clone(),
                device,
                volatile: tier.memory.is_some(),
                unsafe_volatile: false,
            });
        }
        let options = VolumeOptions {
            name: "dst".to_string(),
            size_bytes: u64::from(self.config.segments) * self.config.segment_bytes,
            segment_bytes: self.config.segment_bytes,
            chunk_bytes: self.config.chunk_bytes,
            period_ns: 1_000_000_000,
            checkpoint_every_periods: 3,
            policy: policy_config(&self.config.policy),
            migration: MigrationOptions::default(),
        };
        let clock: Arc<dyn Clock> = self.clock.clone();
        let opened =
            Volume::open_with_cache(options, specs, &self.meta_dir, clock, self.cache_options());
        self.set_faults(true);
        opened.map_err(|error| error.to_string())
    }

    fn cache_options(&self) -> Option<CacheOptions> {
        let cache = self.config.cache.as_ref()?;
        let mode = CacheMode::parse(&cache.mode).expect("a derived mode");
        let mut options = CacheOptions::new(&self.tiers[0].name, cache.block_bytes, mode);
        options.policy = match cache.policy.as_str() {
            "fifo" => CacheKind::Fifo,
            "lru" => CacheKind::Lru,
            "arc" => CacheKind::Arc,
            "adaptive" => tierd_core::cache::adaptive::EVICTION,
            _ => CacheKind::S3fifo,
        };
        if cache.policy == "adaptive" {
            options.admission = tierd_core::cache::AdmissionKind::Adaptive;
        }
        options.sequential_cutoff_bytes = cache.sequential_cutoff_bytes;
        if let Some(smr) = &cache.smr {
            let block = cache.block_bytes;
            let mut staging = tierd_core::cache::SmrStaging::new(
                smr.band_blocks * block,
                smr.first_band_blocks * block,
            );
            staging.chunk_bytes = smr.chunk_blocks * block;
            options.smr = Some(staging);
            options.destage_idle_ns = smr.idle_ns;
            options.destage_step_bytes = smr.step_chunks * staging.chunk_bytes;
        }
        Some(options)
    }

    fn set_faults(&self, on: bool) {
        for tier in &self.tiers {
            tier.faults.set_config(if on {
                self.fault_config.clone()
            } else {
                FaultConfig::default()
            });
        }
    }

    fn volume_bytes(&self) -> u64 {
        u64::from(self.config.segments) * self.config.segment_bytes
    }

    /// A sector-aligned range, biased to the current hot segment.
    fn pick_range(&mut self) -> (u64, u64) {
        let sectors_total = self.volume_bytes() / SECTOR_BYTES;
        let bound = if self.rng.below(8) == 0 { 1024 } else { 16 };
        let length_sectors = 1 + self.rng.below(bound);
        let start = if self.rng.below(3) > 0 {
            let per_segment = self.config.segment_bytes / SECTOR_BYTES;
            u64::from(self.hot_segment) * per_segment + self.rng.below(per_segment)
        } else {
            self.rng.below(sectors_total)
        };
        let start = start.min(sectors_total - 1);
        let length = length_sectors.min(sectors_total - start);
        (start * SECTOR_BYTES, length * SECTOR_BYTES)
    }

    fn check_read(&mut self, volume: &Volume, offset: u64, length: u64) -> Result<(), String> {
        let mut buffer = vec![0u8; length as usize];
        match volume.read(offset, &mut buffer) {
            Err(_) => {
                self.count("read_errors_surfaced");
                Ok(())
            }
            Ok(()) => self.check_sectors(offset, &buffer),
        }
    }

    /// Every sector of `buffer` (read at `offset`) holds a value a read may
    /// return now.
    fn check_sectors(&self, offset: u64, buffer: &[u8]) -> Result<(), String> {
        for (index, bytes) in buffer.chunks(SECTOR_BYTES as usize).enumerate() {
            let sector = offset / SECTOR_BYTES + index as u64;
            let id = decode_sector(self.sector_key(sector), bytes)?;
            let allowed = &self.sectors[sector as usize].now;
            if !allowed.contains(&id) {
                return Err(format!(
                    "read of sector {sector} returned write {id}, expected one of {allowed:?}"
                ));
            }
        }
        Ok(())
    }

    /// Reads all of `segment` with the random faults off (gone tiers stay
    /// gone): `Ok(true)` when every sector holds an allowed value, `Ok(false)`
    /// when the read failed, `Err` for wrong data.
    fn read_segment(&mut self, volume: &Volume, segment: u32) -> Result<bool, String> {
        let offset = u64::from(segment) * self.config.segment_bytes;
        let mut buffer = vec![0u8; self.config.segment_bytes as usize];
        self.set_faults(false);
        let result = volume.read(offset, &mut buffer);
        self.set_faults(true);
        match result {
            Ok(()) => {
                self.check_sectors(offset, &buffer)?;
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    /// The lost-tier report. While tiers are gone (and marked unavailable):
    /// every unavailable range names a gone tier and covers exactly whole
    /// segments placed there; every segment on a gone tier either reads back
    /// allowed data (its home copy is current, home serves it) or fails, and
    /// it fails exactly when a range names it — never wrong data, never an
    /// unreported loss, never a false report. With no tier gone, nothing is
    /// reported.
    fn check_lost_tiers(&mut self, volume: &Volume) -> Result<(), String> {
        if self.config.cache.is_some() {
            return self.check_lost_cache(volume);
        }
        let ranges = volume.unavailable_ranges();
        let placement = volume.placement();
        let gone: Vec<bool> = self
            .tiers
            .iter()
            .map(|tier| tier.faults.is_gone())
            .collect();
        let segment_bytes = self.config.segment_bytes;
        for range in &ranges {
            let Some(tier) = self.tiers.iter().position(|tier| tier.name == range.tier) else {
                return Err(format!(
                    "unavailable range {range:?} names no tier of the stack"
                ));
            };
            if !gone[tier] {
                return Err(format!(
                    "unavailable range {range:?} names tier {} which is not gone",
                    range.tier
                ));
            }
            let whole_segments = range.first_segment <= range.last_segment
                && range.offset_bytes == u64::from(range.first_segment) * segment_bytes
                && range.length_bytes
                    == u64::from(range.last_segment - range.first_segment + 1) * segment_bytes;
            if !whole_segments {
                return Err(format!(
                    "unavailable range {range:?} does not match its segments"
                ));
            }
            for segment in range.first_segment..=range.last_segment {
                if placement[segment as usize] as usize != tier {
                    return Err(format!(
                        "unavailable range {range:?} covers segment {segment}, which is on tier {}",
                        self.tiers[placement[segment as usize] as usize].name
                    ));
                }
            }
        }
        if !gone.contains(&true) {
            return Ok(());
        }
        self.count("lost_tier_sweeps");
        for segment in 0..self.config.segments {
            let tier = placement[segment as usize] as usize;
            if !gone[tier] {
                continue;
            }
            let name = self.tiers[tier].name.clone();
            let reported = ranges.iter().any(|range| {
                range.tier == name && (range.first_segment..=range.last_segment).contains(&segment)
            });
            let served = self.read_segment(volume, segment)?;
            match (served, reported) {
                (true, false) => self.count("lost_tier_segments_served_from_home"),
                (false, true) => self.count("lost_tier_segments_reported"),
                (true, true) => {
                    return Err(format!(
                        "segment {segment} on lost tier {name} is reported unavailable, yet a read was served"
                    ))
                }
                (false, false) => {
                    return Err(format!(
                        "segment {segment} on lost tier {name} cannot be read, and no unavailable range reports it"
                    ))
                }
            }
        }
        Ok(())
    }

    /// One migration step with the journal-fault checks: returns the
    /// outcome and the armed journal fault that fired in it, if any. A fired
    /// fault must fail the move (no flip; placement unchanged).
    fn copy_step(&mut self, volume: &Volume) -> Result<(StepOutcome, Option<AppendFault>), String> {
        self.step_with(volume, Volume::copy_step)
    }

    /// One migration step done by `step` (a whole `copy_step`, or the
    /// `copy_end` of a held chunk), with the journal-fault checks.
    fn step_with(
        &mut self,
        volume: &Volume,
        step: impl FnOnce(&Volume) -> StepOutcome,
    ) -> Result<(StepOutcome, Option<AppendFault>), String> {
        let faults = volume.meta_faults();
        let armed = faults.armed();
        let before = volume.placement();
        let outcome = step(volume);
        let fired = armed.filter(|_| faults.armed().is_none());
        match outcome {
            StepOutcome::Finished { segment } => {
                if let Some(fault) = fired {
                    return Err(format!(
                        "the move of segment {segment} flipped although its journal append failed ({fault:?})"
                    ));
                }
                self.report.moves_completed += 1;
                self.durable_placement = volume.placement();
            }
            StepOutcome::Failed { segment } => {
                self.count("moves_failed");
                if let Some(fault) = fired {
                    let after = volume.placement();
                    if after != before {
                        return Err(format!(
                            "journal append of segment {segment}'s move failed ({fault:?}) but the placement changed from {before:?} to {after:?}"
                        ));
                    }
                }
            }
            StepOutcome::Copied { .. } | StepOutcome::Idle | StepOutcome::Waiting { .. } => {
                if let Some(fault) = fired {
                    return Err(format!(
                        "journal fault {fault:?} fired outside a move's finish ({outcome:?})"
                    ));
                }
            }
        }
        Ok((outcome, fired))
    }

    /// The migration work of one workload step, with the journal faults:
    /// maybe arms a torn append (then drives moves until one's journal
    /// append tears, and crashes there) or a full metadata device (then the
    /// failed move's segment must still read back correctly, and the run
    /// goes on).
    fn migrate(&mut self, volume: Volume) -> Result<Volume, String> {
        let faults = volume.meta_faults();
        // Land a chunk held across the user writes since the last step.
        if let Some(read) = self.held.take() {
            self.count("chunk_copies_held_across_writes");
            self.step_with(&volume, |volume| volume.copy_end(read))?;
        }
        if faults.armed().is_none() {
            if self.fault_rng.next_f64() < self.config.torn_append_probability {
                faults.arm(AppendFault::Tear {
                    after_bytes: 1 + self.fault_rng.below(72) as usize,
                });
            } else if self.fault_rng.next_f64() < self.config.full_meta_probability {
                faults.arm(AppendFault::NoSpace {
                    written_bytes: self.fault_rng.below(72) as usize,
                });
            }
        }
        let steps = 1 + self.rng.below(6);
        let tearing = matches!(faults.armed(), Some(AppendFault::Tear { .. }));
        // A torn append drives moves until one reaches its journal append
        // (bounded: the queue runs dry long before).
        let limit = if tearing { 10_000 } else { steps };
        for _ in 0..limit {
            let (outcome, fired) = self.copy_step(&volume)?;
            match fired {
                Some(AppendFault::Tear { .. }) => {
                    self.count("journal_appends_torn");
                    return self.crash_and_restart(volume, true);
                }
                Some(AppendFault::NoSpace { .. }) => {
                    self.count("journal_appends_failed_enospc");
                    let StepOutcome::Failed { segment } = outcome else {
                        return Err(format!(
                            "a failed journal append ended its step as {outcome:?}"
                        ));
                    };
                    let tier = volume.placement()[segment as usize] as usize;
                    if !self.read_segment(&volume, segment)? && !self.tiers[tier].faults.is_gone() {
                        return Err(format!(
                            "after its move's journal append failed (ENOSPC), segment {segment} on {} cannot be read",
                            self.tiers[tier].name
                        ));
                    }
                }
                None => {}
            }
            if outcome == StepOutcome::Idle {
                break;
            }
        }
        if tearing {
            // No move reached its journal append.
            faults.disarm();
        }
        // Sometimes start a chunk copy and leave it in flight: the writes
        // and reads until the next step meet a chunk being copied (their
        // parts are handed to the mover), as beside the live copier threads.
        if faults.armed().is_none() && volume.is_migrating() && self.hold_rng.chance(0.5) {
            let mut held = None;
            self.step_with(&volume, |volume| match volume.copy_begin() {
                CopyBegun::Read(read) => {
                    held = Some(read);
                    StepOutcome::Waiting { until_ns: None }
                }
                CopyBegun::Done(outcome) => outcome,
            })?;
            self.held = held;
        }
        Ok(volume)
    }

    /// A checkpoint written with a fault: the process dies inside it (torn
    /// `checkpoint.tmp`, or after the rename before the journal reset; then
    /// crash and check the restart), or the metadata device is full (the
    /// checkpoint fails, the volume goes on, and the next one must succeed).
    fn faulty_checkpoint(&mut self, volume: Volume) -> Result<Volume, String> {
        let fault = match self.fault_rng.below(3) {
            0 => CheckpointFault::TearTemporary {
                after_bytes: self.fault_rng.below(200) as usize,
            },
            1 => CheckpointFault::DieAfterRename,
            _ => CheckpointFault::NoSpace {
                written_bytes: self.fault_rng.below(200) as usize,
            },
        };
        volume.meta_faults().arm_checkpoint(fault);
        if volume.checkpoint().is_ok() {
            return Err(format!("a checkpoint with {fault:?} armed succeeded"));
        }
        if volume.meta_faults().disarm_checkpoint().is_some() {
            // The checkpoint failed before its write, so the fault never
            // fired: an injected device error flushing the tiers (seed
            // 1090: EIO on a reduced home's pack write). Left armed, it
            // failed the next checkpoint, which was taken for a bug.
            self.count("checkpoint_faults_preempted_by_device_errors");
            return Ok(volume);
        }
        match fault {
            CheckpointFault::NoSpace { .. } => {
                self.count("checkpoints_failed_enospc");
                // The journal goes on: a move can still finish, and the
                // next checkpoint (over the partial checkpoint.tmp) works.
                volume.checkpoint().map_err(|error| {
                    format!("the checkpoint after an ENOSPC one failed: {error}")
                })?;
                Ok(volume)
            }
            _ => {
                self.count("checkpoints_torn");
                self.crash_and_restart(volume, false)
            }
        }
    }

    fn write(&mut self, volume: &Volume, kind: u64) {
        let (offset, length) = self.pick_range();
        let id = self.next_id;
        self.next_id += 1;
        let first = offset / SECTOR_BYTES;
        let count = length / SECTOR_BYTES;
        let fua = kind == 1;
        let result = match kind {
            2 => volume.discard(offset, length, false),
            3 => volume.write_zeroes(offset, length, false),
            _ => {
                let mut data = vec![0u8; length as usize];
                for (index, chunk) in data.chunks_mut(SECTOR_BYTES as usize).enumerate() {
                    sector_bytes(id, self.sector_key(first + index as u64), chunk);
                }
                volume.write(offset, &data, fua)
            }
        };
        let value = if kind >= 2 { 0 } else { id };
        for sector in first..first + count {
            let state = &mut self.sectors[sector as usize];
            match &result {
                Ok(()) => {
                    state.now = vec![value];
                    if fua {
                        state.crash = vec![value];
                    } else {
                        add(&mut state.crash, value);
                    }
                }
                Err(_) => {
                    add(&mut state.now, value);
                    add(&mut state.crash, value);
                }
            }
        }
        if let Err(error) = &result {
            if error.to_string().contains("is full") {
                // An overcommitted reduced tier (ENOSPC): nothing changed.
                self.count("reduce_writes_refused_full");
            }
            self.count("write_errors_surfaced");
        }
    }

    fn flush(&mut self, volume: &Volume) {
        if volume.flush().is_ok() {
            for state in &mut self.sectors {
                state.crash.clone_from(&state.now);
            }
        }
    }

    /// Crash, maybe damage the journal, restart, and check everything.
    /// `torn_append` says the process died inside a journal append, so the
    /// restart must drop a torn last record (and must not otherwise).
    fn crash_and_restart(&mut self, volume: Volume, torn_append: bool) -> Result<Volume, String> {
        // A chunk copy in flight dies with the process.
        self.held = None;
        let placement_before = volume.placement();
        if placement_before != self.durable_placement {
            return Err(format!(
                "placement {placement_before:?} differs from the last journaled one {:?}",
                self.durable_placement
            ));
        }
        self.count_cache(&volume);
        self.count_reduction();
        self.count_replicas();
        drop(volume);
        for tier in &self.tiers {
            tier.reduced.lock().0 = None;
            tier.replicated.lock().0 = None;
        }
        self.count("crashes");
        for tier in &self.tiers {
            if let Some(disk) = &tier.disk {
                let lost = disk.crash(&mut self.rng);
                if lost > 0 {
                    *self
                        .report
                        .faults
                        .entry("unflushed_sectors_lost".into())
                        .or_insert(0) += lost;
                }
            }
            tier.faults.set_gone(false);
        }
        for tier in &mut self.tiers {
            if let Some(memory) = &tier.memory {
                let fresh = Arc::new(MemoryDevice::new(tier.name.clone(), memory.size_bytes()));
                tier.memory = Some(fresh.clone());
                tier.faults = Arc::new(FaultDevice::new(
                    fresh,
                    self.fault_config.clone(),
                    self.config.seed ^ self.next_id,
                    self.clock.clone(),
                ));
            }
        }
        let journal = MetaStore::journal_path(&self.meta_dir);
        if self.rng.next_f64() < self.config.journal_corruption_probability {
            if let Some(damaged) = self.damage_journal(&journal)? {
                self.count("journal_corruptions");
                match self.open() {
                    Ok(_) => return Err("a damaged journal was accepted".to_string()),
                    Err(message) => {
                        if !(message.contains("journal") && message.contains("byte offset")) {
                            return Err(format!(
                                "damaged journal refused without path and offset: {message}"
                            ));
                        }
                    }
                }
                // The operator restores the good copy.
                std::fs::write(&journal, damaged).map_err(|error| error.to_string())?;
            }
        }
        let (volume, notes) = self.open()?;
        // A repaired torn tail is a warning of the volume (log and status).
        let notes: Vec<String> = notes.into_iter().chain(volume.status().warnings).collect();
        let dropped_tail = notes
            .iter()
            .any(|note| note.contains("journal") && note.contains("dropped"));
        if torn_append && !dropped_tail {
            return Err(format!(
                "the process died inside a journal append but the restart dropped no torn record (notes: {notes:?})"
            ));
        }
        if !torn_append && dropped_tail {
            return Err(format!(
                "the restart dropped a torn journal record though no append was cut short by a crash (notes: {notes:?})"
            ));
        }
        let placement_after = volume.placement();
        // A segment of an overcommitted reduced volatile tier that could not
        // be refilled (ENOSPC) is placed on home, and the restart says so.
        let home = (self.tiers.len() - 1) as u8;
        let mut expected = placement_before.clone();
        for note in &notes {
            let sent_home = note
                .strip_prefix("segment ")
                .filter(|_| note.contains("could not be refilled"))
                .and_then(|rest| rest.split(' ').next())
                .and_then(|segment| segment.parse::<usize>().ok());
            if let Some(segment) = sent_home.filter(|&segment| segment < expected.len()) {
                expected[segment] = home;
                self.count("reduce_refills_sent_home");
            }
        }
        if placement_after != expected {
            return Err(format!(
                "placement after restart {placement_after:?} differs from the last durable one {placement_before:?} (expected {expected:?}; notes: {notes:?})"
            ));
        }
        // Sent home by the restart: journaled.
        self.durable_placement = placement_after;
        // Every sector must hold something the checker allows after a crash.
        let total = self.volume_bytes();
        let mut buffer = vec![0u8; self.config.segment_bytes as usize];
        let mut offset = 0;
        self.set_faults(false);
        let lost = self.lost_cache_blocks(&volume)?;
        while offset < total {
            if let Err(error) = volume.read(offset, &mut buffer) {
                // On a cache volume, blocks the lost cache tier took with it
                // (reported) fail; the rest of the segment must read.
                if lost.is_empty() {
                    return Err(format!("read after restart failed: {error}"));
                }
                self.check_restart_blocks(&volume, offset, &lost)?;
                offset += buffer.len() as u64;
                continue;
            }
            self.accept_after_crash(offset, &buffer)?;
            offset += buffer.len() as u64;
        }
        self.set_faults(true);
        Ok(volume)
    }

    /// After a restart: `data`, read at `offset`, must hold in every sector
    /// one of the writes a crash allowed there; that write is now the
    /// sector's only value.
    fn accept_after_crash(&mut self, offset: u64, data: &[u8]) -> Result<(), String> {
        for (index, bytes) in data.chunks(SECTOR_BYTES as usize).enumerate() {
            let sector = offset / SECTOR_BYTES + index as u64;
            let id = decode_sector(self.sector_key(sector), bytes)?;
            let state = &mut self.sectors[sector as usize];
            if !state.crash.contains(&id) {
                return Err(format!(
                    "after a crash sector {sector} holds write {id}; flushed or later writes were {:?}",
                    state.crash
                ));
            }
            state.now = vec![id];
            state.crash = vec![id];
        }
        Ok(())
    }

    /// After a restart: segment `offset`'s blocks one by one. A block
    /// reported lost must fail to read (its sectors keep every value a
    /// crash allowed, for when a whole write makes it current again); every
    /// other block must read as a crash allows.
    fn check_restart_blocks(
        &mut self,
        volume: &Volume,
        offset: u64,
        lost: &[u64],
    ) -> Result<(), String> {
        let block_bytes = self.cache_block_bytes();
        let end = (offset + self.config.segment_bytes).min(self.volume_bytes());
        let mut block = vec![0u8; block_bytes as usize];
        let mut at = offset;
        while at < end {
            let index = at / block_bytes;
            let length = block_bytes.min(end - at) as usize;
            let reported = lost.contains(&index);
            match volume.read(at, &mut block[..length]) {
                Err(error) if !reported => {
                    return Err(format!(
                        "read of cache block {index} after restart failed though no unavailable range reports it: {error}"
                    ))
                }
                Err(_) => {
                    self.count("cache_lost_blocks_after_restart");
                    for sector in at / SECTOR_BYTES..(at + length as u64) / SECTOR_BYTES {
                        let state = &mut self.sectors[sector as usize];
                        state.now.clone_from(&state.crash);
                    }
                }
                Ok(()) if reported => {
                    return Err(format!(
                        "cache block {index} is reported lost after restart, yet a read was served"
                    ))
                }
                Ok(()) => self.accept_after_crash(at, &block[..length])?,
            }
            at += length as u64;
        }
        Ok(())
    }

    fn cache_block_bytes(&self) -> u64 {
        self.config
            .cache
            .as_ref()
            .map_or(self.config.segment_bytes, |cache| cache.block_bytes)
    }

    /// The cache blocks `volume.unavailable_ranges()` reports lost (a
    /// tiered volume: none). Every range must name the cache tier and cover
    /// whole blocks.
    fn lost_cache_blocks(&self, volume: &Volume) -> Result<Vec<u64>, String> {
        if self.config.cache.is_none() {
            return Ok(Vec::new());
        }
        let block_bytes = self.cache_block_bytes();
        let total = self.volume_bytes();
        let mut blocks = Vec::new();
        for range in volume.unavailable_ranges() {
            let end = range.offset_bytes + range.length_bytes;
            if range.tier != self.tiers[0].name
                || range.length_bytes == 0
                || range.offset_bytes % block_bytes != 0
                || (end % block_bytes != 0 && end != total)
                || end > total
            {
                return Err(format!(
                    "unavailable range {range:?} is not whole blocks of cache tier {}",
                    self.tiers[0].name
                ));
            }
            blocks.extend(range.offset_bytes / block_bytes..end.div_ceil(block_bytes));
        }
        Ok(blocks)
    }

    /// The lost-cache report: every range names the cache tier and covers
    /// whole blocks; every block reported lost fails to read, every other
    /// block reads allowed data — never home's stale copy of a block that
    /// was dirty on the lost tier, never an unreported loss. Runs while the
    /// cache tier is gone and whenever blocks are reported lost.
    fn check_lost_cache(&mut self, volume: &Volume) -> Result<(), String> {
        let lost = self.lost_cache_blocks(volume)?;
        if lost.is_empty() && !self.tiers[0].faults.is_gone() {
            return Ok(());
        }
        self.count("lost_cache_sweeps");
        let block_bytes = self.cache_block_bytes();
        let total = self.volume_bytes();
        let mut buffer = vec![0u8; block_bytes as usize];
        let mut at = 0;
        self.set_faults(false);
        let mut outcome = Ok(());
        while at < total {
            let index = at / block_bytes;
            let length = block_bytes.min(total - at) as usize;
            let reported = lost.contains(&index);
            let served = volume.read(at, &mut buffer[..length]);
            match (served, reported) {
                (Ok(()), false) => {
                    if let Err(error) = self.check_sectors(at, &buffer[..length]) {
                        outcome = Err(format!("cache tier lost: block {index}: {error}"));
                        break;
                    }
                }
                (Err(_), true) => self.count("lost_cache_blocks_reported"),
                (Ok(()), true) => {
                    outcome = Err(format!(
                        "cache block {index} is reported lost, yet a read was served"
                    ));
                    break;
                }
                (Err(error), false) => {
                    outcome = Err(format!(
                        "cache block {index} cannot be read ({error}), and no unavailable range reports it"
                    ));
                    break;
                }
            }
            at += length as u64;
        }
        self.set_faults(true);
        outcome
    }

    /// Adds the cache's counters since the volume opened to the report.
    fn count_cache(&mut self, volume: &Volume) {
        let Some(status) = volume.cache_status() else {
            return;
        };
        for (kind, value) in [
            ("cache_allocations", status.allocations),
            ("cache_clean_evictions", status.clean_evictions),
            ("cache_dirty_evictions", status.dirty_evictions),
            ("cache_writebacks", status.writebacks),
            ("cache_read_hit_blocks", status.read_hit_blocks),
            (
                "cache_promoted_blocks",
                status.promoted_bytes / status.block_bytes,
            ),
            (
                "smr_band_rewrites",
                status.smr.as_ref().map_or(0, |smr| smr.band_rewrites),
            ),
            (
                "smr_blocked_blocks",
                status.smr.as_ref().map_or(0, |smr| smr.blocked_blocks),
            ),
        ] {
            if value > 0 {
                *self.report.faults.entry(kind.to_string()).or_insert(0) += value;
            }
        }
        if status.lost.is_some() {
            self.count("cache_tier_lost");
        }
    }

    /// The cache's background work of one workload step, driven here
    /// instead of by the writeback thread: sometimes a FLUSH whose commit's
    /// journal append tears (the process dies there: crash) or finds the
    /// metadata device full (the flush fails, the run goes on), sometimes
    /// an online mode switch, then a few `cache_step`s (commits on the
    /// timer or when slots run short, writebacks), with virtual time passing
    /// so the devices count as idle; a crash right after a writeback at
    /// random.
    fn cache_work(&mut self, volume: Volume) -> Result<Volume, String> {
        let cache = self.config.cache.clone().expect("a cache seed");
        let faults = volume.meta_faults();
        if faults.armed().is_none() {
            if self.fault_rng.next_f64() < self.config.torn_append_probability {
                faults.arm(AppendFault::Tear {
                    after_bytes: 1 + self.fault_rng.below(72) as usize,
                });
            } else if self.fault_rng.next_f64() < self.config.full_meta_probability {
                faults.arm(AppendFault::NoSpace {
                    written_bytes: self.fault_rng.below(72) as usize,
                });
            }
        }
        if let Some(fault) = faults.armed() {
            let flushed = volume.flush();
            if faults.armed().is_none() {
                match fault {
                    AppendFault::Tear { .. } => {
                        self.count("cache_commits_torn");
                        return self.crash_and_restart(volume, true);
                    }
                    AppendFault::NoSpace { .. } => {
                        self.count("cache_commits_failed_enospc");
                        if flushed.is_ok() {
                            return Err(
                                "a FLUSH succeeded though its commit's journal append failed (ENOSPC)"
                                    .to_string(),
                            );
                        }
                    }
                }
            } else {
                // Nothing was pending: no append.
                faults.disarm();
                if flushed.is_ok() {
                    for state in &mut self.sectors {
                        state.crash.clone_from(&state.now);
                    }
                }
            }
        }
        if self.fault_rng.next_f64() < cache.mode_switch_probability {
            let memory = self.tiers[0].memory.is_some();
            let modes: &[&str] = if memory {
                &["writethrough", "writearound", "detach"]
            } else {
                &["writeback", "writethrough", "writearound", "detach"]
            };
            let mode = modes[self.fault_rng.below(modes.len() as u64) as usize];
            match volume.set_cache_mode(mode) {
                Ok(()) => self.count("cache_mode_switches"),
                Err(VolumeError::Invalid(_)) => {}
                Err(error) => {
                    // Journaling the switch failed (a full metadata device
                    // armed above and not fired): not a correctness fault.
                    if !matches!(error, VolumeError::Meta(_)) {
                        return Err(format!("cache mode switch to {mode}: {error}"));
                    }
                }
            }
        }
        if self.promote_rng.next_f64() < cache.promote_probability {
            let block = cache.block_bytes;
            let blocks = self.volume_bytes() / block;
            let first = self.promote_rng.below(blocks);
            let count = 1 + self.promote_rng.below(16);
            if volume.cache_promote(first * block, count * block).is_ok() {
                self.count("cache_promotions_queued");
            }
        }
        if self.rng.below(2) == 0 {
            self.clock.advance_ns(self.rng.below(300_000_000));
        }
        for _ in 0..1 + self.rng.below(8) {
            match volume.cache_step() {
                Ok(CacheStep::Idle) => break,
                Ok(CacheStep::Busy) => self.count("cache_writebacks_busy"),
                Ok(CacheStep::Wrote { .. }) => {
                    if self.fault_rng.next_f64() < cache.crash_after_writeback_probability {
                        self.count("crashes_after_writeback_before_commit");
                        if volume
                            .cache_status()
                            .and_then(|status| status.smr)
                            .is_some_and(|smr| smr.rewriting.is_some())
                        {
                            self.count("crashes_mid_band_rewrite");
                        }
                        return self.crash_and_restart(volume, false);
                    }
                }
                Err(_) => self.count("cache_step_errors"),
            }
        }
        Ok(volume)
    }

    /// Flips a byte inside a journal record that has another after it.
    /// Returns the original bytes, or `None` when the journal is too short.
    fn damage_journal(&mut self, journal: &Path) -> Result<Option<Vec<u8>>, String> {
        let bytes = std::fs::read(journal).map_err(|error| error.to_string())?;
        const HEADER: usize = 24;
        // Find the first record's extent; damage it only if more follow.
        if bytes.len() < HEADER + 8 {
            return Ok(None);
        }
        let length =
            u32::from_le_bytes(bytes[HEADER..HEADER + 4].try_into().expect("4 bytes")) as usize;
        let end = HEADER + 8 + length;
        if end >= bytes.len() {
            return Ok(None);
        }
        let mut damaged = bytes.clone();
        let at = HEADER + 8 + self.rng.below(length as u64) as usize;
        damaged[at] ^= 1 << self.rng.below(8);
        std::fs::write(journal, &damaged).map_err(|error| error.to_string())?;
        Ok(Some(bytes))
    }

    fn run(&mut self) -> Result<Volume, String> {
        let (mut volume, _) = self.open()?;
        self.durable_placement = volume.placement();
        for step in 0..self.config.steps {
            self.report.operations += 1;
            if self.rng.below(50) == 0 {
                self.hot_segment = self.rng.below(u64::from(self.config.segments)) as u32;
            }
            match self.rng.below(100) {
                0..=34 => {
                    let (offset, length) = self.pick_range();
                    self.check_read(&volume, offset, length)?;
                }
                35..=59 => self.write(&volume, 0),
                60..=64 => self.write(&volume, 1),
                65..=67 => self.write(&volume, 2),
                68..=70 => self.write(&volume, 3),
                71..=76 => self.flush(&volume),
                77..=82 => {
                    let segment = self.rng.below(u64::from(self.config.segments)) as u32;
                    let to = self.rng.below(self.tiers.len() as u64) as u8;
                    // The placement table refuses a move of a segment that
                    // is there already, queued or moving, or onto a full
                    // tier; any other error is a failure.
                    match volume.request_move(segment, to, "dst") {
                        Ok(()) | Err(VolumeError::Invalid(_)) => {}
                        Err(error) => return Err(error.to_string()),
                    }
                }
                83..=94 if self.config.cache.is_some() => volume = self.cache_work(volume)?,
                83..=94 => volume = self.migrate(volume)?,
                95..=97 => {
                    self.clock.advance_ns(400_000_000);
                    match volume.tick() {
                        Ok(_) => {}
                        // A reduced tier's failed pack write is retried by
                        // the next flush and reported by the one that fails
                        // (a device with a write cache): a period's commit
                        // may fail on an injected EIO and the next one
                        // succeeds. So may a replicated home's flush, whose
                        // journal append is a write. The sector checker
                        // still holds.
                        Err(error)
                            if (self.config.reduce.is_some() || self.config.replicas.is_some())
                                && error.to_string().contains("injected") =>
                        {
                            self.count(if self.config.reduce.is_some() {
                                "reduce_tick_flush_errors"
                            } else {
                                "replica_tick_flush_errors"
                            });
                        }
                        Err(error) => return Err(format!("tick: {error}")),
                    }
                    if self.fault_rng.next_f64() < self.config.checkpoint_fault_probability {
                        volume = self.faulty_checkpoint(volume)?;
                    }
                }
                _ => {
                    if self.rng.next_f64() < self.config.outage_probability * 30.0
                        && self.tiers.len() > 1
                    {
                        let tier = self.rng.below(self.tiers.len() as u64 - 1) as usize;
                        let gone = !self.tiers[tier].faults.is_gone();
                        self.tiers[tier].faults.set_gone(gone);
                        // The operator (or the server's own detection)
                        // marks it, so status reports what it held.
                        if !volume.set_tier_unavailable(&self.tiers[tier].name, gone) {
                            return Err(format!(
                                "the volume has no tier {}",
                                self.tiers[tier].name
                            ));
                        }
                        if gone {
                            self.count("tier_outages");
                        }
                        self.check_lost_tiers(&volume)?;
                    }
                }
            }
            self.reduce_work();
            self.replica_work();
            if self.replica_rng.below(32) == 0 {
                self.check_block_status(&volume)?;
            }
            let tier_gone = self.tiers.iter().any(|tier| tier.faults.is_gone());
            if tier_gone && self.fault_rng.below(16) == 0 {
                self.check_lost_tiers(&volume)?;
            }
            if step > 0 && self.rng.next_f64() < self.config.crash_probability {
                volume = self.crash_and_restart(volume, false)?;
            }
        }
        for tier in &self.tiers {
            tier.faults.set_gone(false);
            volume.set_tier_unavailable(&tier.name, false);
        }
        self.check_lost_tiers(&volume)?;
        // A final crash checks what the last flush promised.
        self.crash_and_restart(volume, false)
    }
}

/// Runs one seed. `meta_root` is a scratch directory (a subdirectory per
/// seed is created and removed).
pub fn run_seed(seed: u64, steps: u32, meta_root: &Path) -> (DstConfig, DstReport) {
    let config = derive_config(seed, steps);
    let meta_dir = meta_root.join(format!("dst-{seed}"));
    let _ = std::fs::remove_dir_all(&meta_dir);
    let mut run = Run::new(config.clone(), meta_dir.clone());
    let outcome = run.run();
    let mut report = std::mem::take(&mut run.report);
    report.seed = seed;
    for tier in &run.tiers {
        let counters = tier.faults.counters();
        for (kind, value) in [
            ("reads_failed", counters.reads_failed),
            ("writes_failed", counters.writes_failed),
            ("gone_ops", counters.gone_ops),
            ("slow_ops", counters.delays),
        ] {
            if value > 0 {
                *report.faults.entry(kind.to_string()).or_insert(0) += value;
            }
        }
    }
    match outcome {
        Ok(volume) => {
            let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
            let mut mix = |value: u64| {
                digest ^= value;
                digest = digest.wrapping_mul(0x0100_0000_01b3);
            };
            for tier in volume.placement() {
                mix(u64::from(tier));
            }
            for sector in &run.sectors {
                mix(sector.now[0]);
            }
            mix(report.moves_completed);
            report.digest = digest;
        }
        Err(message) => report.failure = Some(message),
    }
    let _ = std::fs::remove_dir_all(&meta_dir);
    (config, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sector_encoding_round_trips_and_rejects_garbage() {
        let mut bytes = vec![0u8; SECTOR_BYTES as usize];
        sector_bytes(42, 7, &mut bytes);
        assert_eq!(decode_sector(7, &bytes), Ok(42));
        assert!(
            decode_sector(8, &bytes).is_err(),
            "a sector's bytes name its sector"
        );
        bytes[100] ^= 1;
        assert!(decode_sector(7, &bytes).is_err());
        assert_eq!(decode_sector(3, &[0u8; 512]), Ok(0));
    }
}
