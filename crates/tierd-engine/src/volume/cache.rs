//! Cache volumes: a block cache ([`tierd_core::cache::BlockCache`], the
//! sans-IO core the simulator runs too) in front of home, inside the
//! volume's IO path. The core decides; this module does the IO, keeps the
//! rules of `docs/engine/cache.md` and journals the mapping.
//!
//! ## Rules kept here
//! - **Per-block locks.** A striped table of reader-writer locks keyed by
//!   block: reads hold their blocks' stripes shared, writes, discards and
//!   writebacks exclusive, from planning to the last `finish` (the core's
//!   first rule). Stripes are taken in ascending order, so two requests
//!   never wait for each other crosswise. The writeback thread only
//!   *tries* the stripe of the block the core picked (it holds the core's
//!   lock then, and IO threads take a stripe before the core's lock); a
//!   busy block is handed back and picked up later.
//! - **Commit = flush home, flush the cache tier, append.** The mapping
//!   changes the core emits (`take_changes`) are appended to the volume's
//!   journal as one `CacheMap` record after every tier is flushed, so a
//!   `Mapped` block's data is durable before its mapping and a block's home
//!   copy (a writeback) before its `Unmapped`. Commits run at FLUSH, after
//!   a FUA write, on a timer and when free slots run short (the writeback
//!   thread), and with each checkpoint. A released slot is reused only after
//!   the commit that unmapped it ([`BlockCache::committed`]).
//! - **FUA**: the write is durable on every device it reached
//!   (`write_at_durable`), then, if any mapping change is pending or being
//!   committed, a commit runs before the acknowledgement.
//! - **Checkpoint**: the mappings are snapshot together with taking the
//!   pending changes (one lock), every tier is flushed, and the checkpoint
//!   holds the mappings; a clean stop writes exact dirty bits and
//!   `clean_shutdown`. After any other stop every mapped block is dirty.
//! - **Mode switches and detach** are journaled (`CacheMode`) before they
//!   take effect; a detach ends, once nothing is dirty, with a commit and a
//!   `CacheDetached` record appended while the core is locked, and only then
//!   does IO bypass the cache (so a crash never brings back a mapping that
//!   writes made after the detach went around).
//! - **Lost cache tier**: the first failed IO on the cache tier (or the tier
//!   marked unavailable) records the dirty blocks as lost (`CacheLost`) and
//!   the cache is bypassed: clean blocks read from home; lost blocks fail
//!   with EIO until a write covers them whole.

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use tierd_common::clock::Clock;

use serde::Serialize;
use tierd_core::cache::{
    AdmissionKind, BlockCache, BlockId, BlockIo, CacheCounters, CacheMode, CacheSettings, Change,
    Commit, DeviceInterval, DevicePriors, SmrStaging, Step,
};
use tierd_policy::cache::CacheKind;
use tierd_policy::TierId;

use crate::device::{DeviceError, DeviceErrorKind, DeviceStats};
use crate::meta::{CacheChange, CacheChangeKind, CacheCheckpoint, Record};

use super::io::Mutation;
use super::{Volume, VolumeError};

/// Blocks one background step copies in at most (promotion loads), so
/// commits and writebacks come round between them.
pub const LOAD_STEP_BLOCKS: u64 = 16;

/// Stripes of the per-block lock table.
const STRIPES: usize = 1024;
/// A checkpoint is written when the journal grows past this (the timer
/// commits would grow it without bound between period checkpoints).
const JOURNAL_CHECKPOINT_BYTES: u64 = 16 << 20;

/// Cache blocks one block status answer looks up at most (it then covers a
/// prefix of its range), and per hold of the core's lock (IO waits for it).
const STATUS_CACHE_BLOCKS: u64 = 1 << 16;
const STATUS_LOCK_BLOCKS: u64 = 4096;

/// Most bytes one writeback step writes home before its commit (and its
/// pause, when the devices are busy): 64 blocks of the default 64 KiB.
pub const WRITEBACK_BATCH_BYTES: u64 = 4 << 20;

/// A cache volume's settings (from `[[volume]] cache = {...}`).
#[derive(Clone, Debug, PartialEq)]
pub struct CacheOptions {
    /// The tier of the stack used wholly as the cache.
    pub tier: String,
    pub block_bytes: u64,
    /// The configured mode.
    pub mode: CacheMode,
    pub policy: CacheKind,
    pub admission: AdmissionKind,
    pub sequential_cutoff_bytes: u64,
    pub dirty_high_percent: u8,
    pub dirty_low_percent: u8,
    /// No user IO for this long counts as idle: writeback then runs eagerly.
    pub writeback_idle_ns: u64,
    /// Pending mapping changes are committed at least this often.
    pub commit_interval_ns: u64,
    /// What adaptive admission assumes the devices cost before it has
    /// measured them (`serve`: the emulated tiers' models, else the core's
    /// generic prior).
    pub priors: DevicePriors,
    /// An SMR home: stage every write, destage whole bands
    /// (`docs/engine/smr.md`; [`crate::config::Config::smr_staging`]).
    pub smr: Option<SmrStaging>,
    /// SMR staging: no user IO for this long and home is idle for a
    /// background band rewrite.
    pub destage_idle_ns: u64,
    /// SMR staging: most bytes of destage IO one background step does
    /// before its commit check (DST takes it small, so rewrites span steps).
    pub destage_step_bytes: u64,
}

impl CacheOptions {
    pub fn new(tier: &str, block_bytes: u64, mode: CacheMode) -> CacheOptions {
        CacheOptions {
            tier: tier.to_string(),
            block_bytes,
            mode,
            policy: CacheKind::S3fifo,
            admission: AdmissionKind::Always,
            sequential_cutoff_bytes: tierd_core::cache::DEFAULT_SEQUENTIAL_CUTOFF_BYTES,
            dirty_high_percent: tierd_core::cache::DEFAULT_DIRTY_HIGH_PERCENT,
            dirty_low_percent: tierd_core::cache::DEFAULT_DIRTY_LOW_PERCENT,
            writeback_idle_ns: 100_000_000,
            commit_interval_ns: 1_000_000_000,
            priors: DevicePriors::default(),
            smr: None,
            destage_idle_ns: tierd_core::cache::DEFAULT_DESTAGE_IDLE_NS,
            destage_step_bytes: WRITEBACK_BATCH_BYTES,
        }
    }

    /// The core's settings for a volume of `volume_bytes` over a cache tier
    /// of `cache_bytes`.
    pub fn settings(&self, volume_bytes: u64, cache_bytes: u64) -> CacheSettings {
        let slots = u32::try_from(cache_bytes / self.block_bytes).unwrap_or(u32::MAX);
        let mut settings = CacheSettings::new(volume_bytes, self.block_bytes, slots, self.mode);
        settings.policy = self.policy;
        settings.admission = self.admission;
        settings.sequential_cutoff_bytes = self.sequential_cutoff_bytes;
        settings.dirty_high_percent = self.dirty_high_percent;
        settings.dirty_low_percent = self.dirty_low_percent;
        settings.journal = true;
        settings.priors = self.priors;
        settings.smr = self.smr;
        settings
    }
}

/// What `tierd status` shows of a cache volume (`"cache"` in the JSON).
#[derive(Clone, Debug, Serialize)]
pub struct CacheStatus {
    /// `writeback`, `writethrough`, `writearound`, `detaching`, `detached`
    /// or `lost`.
    pub mode: String,
    pub block_bytes: u64,
    pub read_hit_ratio: f64,
    pub write_hit_ratio: f64,
    pub dirty_bytes: u64,
    pub occupancy_bytes: u64,
    pub tier: String,
    pub slots: u32,
    pub dirty_blocks: u64,
    pub occupancy_blocks: u64,
    /// Bytes written back to home since start.
    pub written_back_bytes: u64,
    /// Of them, per second over the last status interval is left to the
    /// reader (`tierd status` prints the total); writebacks that cleaned.
    pub writebacks: u64,
    /// Bytes copied in for whole-segment promotions (`adaptive`) since start.
    pub promoted_bytes: u64,
    pub allocations: u64,
    pub clean_evictions: u64,
    pub dirty_evictions: u64,
    pub bypassed_blocks: u64,
    pub rejected_blocks: u64,
    pub no_slot_blocks: u64,
    pub read_blocks: u64,
    pub read_hit_blocks: u64,
    pub write_blocks: u64,
    pub write_hit_blocks: u64,
    /// Bytes whose only current copy was on the lost cache tier.
    pub lost_bytes: u64,
    /// Why the cache tier was lost, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
    /// Over an SMR home with staging: what is staged, the destage, and the
    /// disk's predicted cleaning state (`docs/engine/smr.md`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smr: Option<super::smr::SmrStatus>,
    /// The configured admission rule (`always`, `frequency:N`, `adaptive`).
    pub admission: String,
    /// Adaptive admission only: the rule in force and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveView>,
}

/// Why adaptive admission admits what it does (`"adaptive"` in the cache status).
#[derive(Clone, Debug, Serialize)]
pub struct AdaptiveView {
    /// `off`, `frequency:N` or `always`.
    pub rule: String,
    pub epochs: u64,
    pub switches: u64,
    /// Each candidate's estimated gain over the last epoch, ms of user
    /// response saved (negative: it would cost).
    pub gains_ms: std::collections::BTreeMap<String, f64>,
    /// Utilisation of home and the cache tier over the last epoch (work ÷
    /// time; above 1: overloaded).
    pub home_utilization: f64,
    pub fast_utilization: f64,
    /// The real cache's read hits ÷ those of its rule's shadow (0–1).
    pub efficiency: f64,
    /// Whole-segment promotions: totals, and why the last epoch promoted
    /// what it did.
    pub promotion: tierd_core::cache::PromotionStatus,
}

/// The core and what is decided with it under one lock.
pub(super) struct CacheCore {
    pub(super) cache: BlockCache,
    /// The mode the operator asked for last (`detach` while detaching).
    pub(super) requested: String,
    /// The configured mode when the operator switched last.
    pub(super) config_mode: CacheMode,
    /// Detach finished: IO bypasses the cache.
    pub(super) detached: bool,
    /// The cache tier failed: IO bypasses the cache.
    pub(super) lost: Option<String>,
    /// Dirty blocks the lost tier took with it: reads fail until a write
    /// covers them whole.
    pub(super) lost_blocks: BTreeSet<BlockId>,
    /// Lost blocks rewritten whole since the last commit (journaled by it).
    pub(super) rewritten: Vec<BlockId>,
}

impl CacheCore {
    pub(super) fn bypass(&self) -> bool {
        self.detached || self.lost.is_some()
    }

    fn mode_name(&self) -> String {
        if self.lost.is_some() {
            "lost".to_string()
        } else if self.detached {
            "detached".to_string()
        } else if self.cache.is_detaching() {
            "detaching".to_string()
        } else {
            self.cache.mode().name().to_string()
        }
    }
}

#[derive(Default)]
pub(super) struct CommitState {
    /// Taken from the core and not yet durable (a failed commit's stay here
    /// and go with the next one).
    pending: Vec<Commit>,
    /// Lost blocks rewritten, taken from the core, not yet journaled.
    rewritten: Vec<BlockId>,
    last_commit_ns: u64,
}

/// A cache volume's cache: the core, the lock table, the commit lock.
pub(super) struct CacheLayer {
    pub(super) tier: TierId,
    pub(super) options: CacheOptions,
    pub(super) core: Mutex<CacheCore>,
    stripes: Vec<RwLock<()>>,
    /// Held by every commit and checkpoint from its snapshot of the core to
    /// its journal write, and by everyone who journals cache state outside
    /// a commit (`cache-mode`, `cache-detached`, `cache-lost`): a checkpoint
    /// starts a fresh journal, so a record appended between its snapshot
    /// and its write would be in neither. Order: commit, core, meta.
    commit: Mutex<CommitState>,
    /// When user IO last started or ended, and how much is in flight: the
    /// devices are idle for writeback when none is in flight and none ended
    /// within `writeback_idle_ns` (the simulator's rule is the same with no
    /// wait: no user IO outstanding at home).
    pub(super) last_user_io_ns: AtomicU64,
    pub(super) user_io_in_flight: AtomicU64,
    written_back_bytes: AtomicU64,
    /// SMR staging: the band being assembled (held by its driver) and the
    /// destage totals (`volume/smr.rs`).
    pub(super) destage: Mutex<super::smr::Destage>,
    pub(super) destage_counters: super::smr::DestageCounters,
    /// Bytes copied in by promotions ([`Volume::load_run`]).
    loaded_bytes: AtomicU64,
    /// The home and cache tiers' counters when adaptive admission was last
    /// told them (`None` until the first reading).
    costs_seen: Mutex<Option<CostsSeen>>,
}

/// Device counters at one instant (see [`Volume::feed_cache_costs`]).
struct CostsSeen {
    at_ns: u64,
    home: DeviceStats,
    fast: DeviceStats,
}

/// How often the writeback thread tells adaptive admission what the
/// devices cost.
const COSTS_INTERVAL_NS: u64 = 1_000_000_000;

/// The change of one device's counters from `before` to `now`, over `interval_ns`.
fn interval_of(before: &DeviceStats, now: &DeviceStats, interval_ns: u64) -> DeviceInterval {
    let sum = |histogram: &tierd_common::histogram::Histogram| {
        histogram.sum_ns().min(u128::from(u64::MAX)) as u64
    };
    DeviceInterval {
        interval_ns,
        busy_ns: now.busy_ns.saturating_sub(before.busy_ns),
        reads: now.reads.saturating_sub(before.reads),
        read_bytes: now.read_bytes.saturating_sub(before.read_bytes),
        read_response_ns: sum(&now.read_latency).saturating_sub(sum(&before.read_latency)),
        writes: now.writes.saturating_sub(before.writes),
        write_bytes: now.write_bytes.saturating_sub(before.write_bytes),
        write_response_ns: sum(&now.write_latency).saturating_sub(sum(&before.write_latency)),
    }
}

/// One user IO through the cache, counted from its start to its end.
struct UserIo<'a> {
    layer: &'a CacheLayer,
    clock: &'a dyn Clock,
}

impl<'a> UserIo<'a> {
    fn start(layer: &'a CacheLayer, clock: &'a dyn Clock) -> UserIo<'a> {
        layer.user_io_in_flight.fetch_add(1, Ordering::Relaxed);
        layer
            .last_user_io_ns
            .store(clock.now_ns(), Ordering::Relaxed);
        UserIo { layer, clock }
    }
}

impl Drop for UserIo<'_> {
    fn drop(&mut self) {
        self.layer
            .last_user_io_ns
            .store(self.clock.now_ns(), Ordering::Relaxed);
        self.layer.user_io_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

enum StripeGuard<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// What one background step of the writeback thread did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheStep {
    /// Nothing to write back now.
    Idle,
    /// The block picked was busy with user IO; try again soon.
    Busy,
    /// Wrote `blocks` back (`bytes` in all); wait `pause_ns` before the next
    /// step (pacing: user IO goes first unless the devices are idle).
    Wrote {
        bytes: u64,
        blocks: u64,
        pause_ns: u64,
    },
}

impl CacheLayer {
    pub(super) fn new(tier: TierId, options: CacheOptions, core: CacheCore) -> CacheLayer {
        CacheLayer {
            tier,
            options,
            core: Mutex::new(core),
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            commit: Mutex::new(CommitState::default()),
            last_user_io_ns: AtomicU64::new(0),
            user_io_in_flight: AtomicU64::new(0),
            written_back_bytes: AtomicU64::new(0),
            destage: Mutex::new(super::smr::Destage::default()),
            destage_counters: super::smr::DestageCounters::default(),
            loaded_bytes: AtomicU64::new(0),
            costs_seen: Mutex::new(None),
        }
    }

    fn stripe(block: BlockId) -> usize {
        (block % STRIPES as u64) as usize
    }

    /// Locks the stripes of blocks `first..=last` in ascending order.
    fn lock_blocks(&self, first: BlockId, last: BlockId, exclusive: bool) -> Vec<StripeGuard<'_>> {
        let mut stripes: Vec<usize> = if last - first + 1 >= STRIPES as u64 {
            (0..STRIPES).collect()
        } else {
            (first..=last).map(Self::stripe).collect()
        };
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|stripe| {
                if exclusive {
                    StripeGuard::Exclusive(self.stripes[stripe].write())
                } else {
                    StripeGuard::Shared(self.stripes[stripe].read())
                }
            })
            .collect()
    }

    fn block_bytes(&self) -> u64 {
        self.options.block_bytes
    }

    /// Blocks `offset..offset+length` touches (first, last); `None` if empty.
    fn block_span(&self, offset_bytes: u64, length_bytes: u64) -> Option<(BlockId, BlockId)> {
        (length_bytes > 0).then(|| {
            (
                offset_bytes / self.block_bytes(),
                (offset_bytes + length_bytes - 1) / self.block_bytes(),
            )
        })
    }
}

fn lost_error(block: BlockId, block_bytes: u64, tier: &str) -> VolumeError {
    VolumeError::Device(DeviceError {
        device: tier.to_string(),
        op: "read",
        offset_bytes: block * block_bytes,
        length_bytes: block_bytes,
        kind: DeviceErrorKind::Gone,
        message: format!(
            "block {block} of the cache was dirty on cache tier {tier}, which was lost: its latest data is gone (home's copy is older); a write covering the block replaces it"
        ),
    })
}

fn to_record(changes: &[Change]) -> Vec<CacheChange> {
    changes
        .iter()
        .map(|change| match *change {
            Change::Mapped { block, slot } => CacheChange(CacheChangeKind::Mapped, block, slot),
            Change::Unmapped { block, slot } => CacheChange(CacheChangeKind::Unmapped, block, slot),
        })
        .collect()
}

/// The run of steps from `index` with the same home-only IO as it (`ReadHome`
/// or `WriteHome`): where it ends, and how many of the request's bytes it
/// covers, so the run is one home IO.
fn home_run(
    steps: &[Step],
    index: usize,
    settings: &CacheSettings,
    offset_bytes: u64,
    length_bytes: u64,
) -> (usize, u64) {
    let io = steps[index].io;
    let mut end = index + 1;
    while end < steps.len() && steps[end].io == io {
        end += 1;
    }
    let (start, ..) = part_of(settings, steps[index].block, offset_bytes, length_bytes);
    let (last_start, last_length, ..) =
        part_of(settings, steps[end - 1].block, offset_bytes, length_bytes);
    (end, last_start + last_length - start)
}

/// The run of `WriteSlot` (or `ReadSlot`) steps from `index`, the kind of
/// the first, whose blocks and slots both follow on (block + 1 in slot + 1):
/// where it ends. The request's parts of them are adjacent in the request
/// and on the cache tier (every part but the run's last reaches its
/// block's end), so the run is one write (or read).
fn slot_run(steps: &[Step], index: usize) -> usize {
    let reads = matches!(steps[index].io, BlockIo::ReadSlot { .. });
    let slot_of = |step: &Step| match step.io {
        BlockIo::WriteSlot { ticket } if !reads => Some(ticket.slot),
        BlockIo::ReadSlot { ticket, .. } if reads => Some(ticket.slot),
        _ => None,
    };
    let mut end = index + 1;
    while end < steps.len()
        && steps[end].block == steps[end - 1].block + 1
        && slot_of(&steps[end])
            .is_some_and(|slot| Some(slot) == slot_of(&steps[end - 1]).map(|previous| previous + 1))
    {
        end += 1;
    }
    end
}

/// The part of a request `offset..offset+length` inside `block`:
/// (offset in the volume, length, offset in the request, offset in the block).
fn part_of(
    settings: &CacheSettings,
    block: BlockId,
    offset_bytes: u64,
    length_bytes: u64,
) -> (u64, u64, usize, u64) {
    let (block_start, block_length) = settings.block_range(block);
    let start = offset_bytes.max(block_start);
    let end = (offset_bytes + length_bytes).min(block_start + block_length);
    (
        start,
        end - start,
        (start - offset_bytes) as usize,
        start - block_start,
    )
}

impl Volume {
    fn cache_layer(&self) -> &CacheLayer {
        self.cache.as_ref().expect("called on a cache volume")
    }

    pub(super) fn cache_device(&self) -> &dyn crate::device::BlockDevice {
        self.tiers[self.cache_layer().tier as usize].device.as_ref()
    }

    fn cache_tier_name(&self) -> &str {
        &self.tiers[self.cache_layer().tier as usize].name
    }

    /// After a request's IO: reports every step to the core, releases the
    /// block locks, then marks the cache tier lost if one of its IOs failed
    /// (outside the locks: that takes the commit lock).
    fn report_steps(
        &self,
        steps: &[Step],
        outcomes: &[bool],
        locks: Vec<StripeGuard<'_>>,
        cache_failure: Option<String>,
    ) {
        {
            let mut core = self.cache_layer().core.lock();
            for (step, ok) in steps.iter().zip(outcomes) {
                core.cache.finish(step, *ok);
            }
        }
        drop(locks);
        if let Some(reason) = cache_failure {
            self.cache_tier_failed(&reason);
        }
    }

    /// Block status on a cache volume (`block_status.rs`): a block the
    /// cache holds a slot for (clean, dirty or loading), or a lost block,
    /// is data; elsewhere home's answer stands. The cache is asked first,
    /// then home: a block not held at that moment has its current data on
    /// home (a writeback reaches home before its block is released), so a
    /// writeback and eviction racing this answer cannot make written data
    /// look like a hole. At most [`STATUS_CACHE_BLOCKS`] blocks are looked
    /// up (the answer covers a prefix), [`STATUS_LOCK_BLOCKS`] per hold of
    /// the core's lock.
    pub(super) fn cached_block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> crate::device::AllocationRuns {
        let layer = self.cache_layer();
        let block_bytes = layer.block_bytes();
        let first = offset_bytes / block_bytes;
        let end_bytes = offset_bytes + length_bytes;
        let scan_end = end_bytes
            .div_ceil(block_bytes)
            .min(first + STATUS_CACHE_BLOCKS);
        let length_bytes = (scan_end * block_bytes).min(end_bytes) - offset_bytes;
        let mut held: Vec<BlockId> = Vec::new();
        let mut block = first;
        while block < scan_end {
            let end = (block + STATUS_LOCK_BLOCKS).min(scan_end);
            let core = layer.core.lock();
            held.extend(core.lost_blocks.range(block..end));
            if !core.bypass() {
                core.cache.held_blocks(block..end, &mut held);
            }
            drop(core);
            block = end;
        }
        held.sort_unstable();
        held.dedup();
        let home = self.tiered_block_status(offset_bytes, length_bytes);
        if held.is_empty() {
            return home;
        }
        // Home's runs with the held blocks laid over its holes.
        let mut runs = crate::device::AllocationRuns::default();
        let mut held = held.into_iter().peekable();
        let mut position = offset_bytes;
        'runs: for run in home.into_runs() {
            let run_end = position + run.length_bytes;
            if run.allocated {
                if !super::block_status::push_run(&mut runs, run.length_bytes, true) {
                    break;
                }
                position = run_end;
                continue;
            }
            while let Some(&block) = held.peek() {
                let (block_start, block_end) = (block * block_bytes, (block + 1) * block_bytes);
                if block_end <= position {
                    held.next();
                    continue;
                }
                if block_start >= run_end {
                    break;
                }
                let data_start = block_start.max(position);
                let data_end = block_end.min(run_end);
                if !super::block_status::push_run(&mut runs, data_start - position, false)
                    || !super::block_status::push_run(&mut runs, data_end - data_start, true)
                {
                    break 'runs;
                }
                position = data_end;
                if block_end > run_end {
                    break;
                }
                held.next();
            }
            if !super::block_status::push_run(&mut runs, run_end - position, false) {
                break;
            }
            position = run_end;
        }
        runs
    }

    /// A read on a cache volume.
    pub(super) fn cached_read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        let layer = self.cache_layer();
        let length_bytes = buf.len() as u64;
        let Some((first, last)) = layer.block_span(offset_bytes, length_bytes) else {
            return Ok(());
        };
        let _user_io = UserIo::start(layer, &*self.clock);
        let locks = layer.lock_blocks(first, last, false);
        let mut steps = Vec::new();
        let settings;
        {
            let mut core = layer.core.lock();
            if let Some(&block) = core.lost_blocks.range(first..=last).next() {
                return Err(lost_error(
                    block,
                    layer.block_bytes(),
                    self.cache_tier_name(),
                ));
            }
            if core.bypass() {
                drop(core);
                return self.read_tiered(offset_bytes, buf);
            }
            core.cache.read(offset_bytes, length_bytes, &mut steps);
            settings = core.cache.settings().clone();
        }
        let block_bytes = layer.block_bytes();
        let device = self.cache_device();
        let mut outcomes = vec![true; steps.len()];
        let mut result = Ok(());
        let mut cache_failure = None;
        let mut index = 0;
        while index < steps.len() {
            let step = steps[index];
            // Every arm does a run of steps and goes on after it.
            let (start, _, at, within) = part_of(&settings, step.block, offset_bytes, length_bytes);
            match step.io {
                BlockIo::ReadHome => {
                    // One home read for the run of home blocks.
                    let (end, run_length) =
                        home_run(&steps, index, &settings, offset_bytes, length_bytes);
                    let piece = &mut buf[at..at + run_length as usize];
                    if let Err(error) = self.read_tiered(start, piece) {
                        result = Err(error);
                    }
                    index = end;
                    continue;
                }
                BlockIo::ReadSlot { ticket, .. } => {
                    // One device read for a run of adjacent blocks in
                    // adjacent slots (as writes: `slot_run`); a 1 MiB read
                    // of staged 4 KiB blocks was 256 reads of the cache tier.
                    let end = slot_run(&steps, index);
                    let (last_start, last_length, ..) =
                        part_of(&settings, steps[end - 1].block, offset_bytes, length_bytes);
                    let run_length = (last_start + last_length - start) as usize;
                    let slot_offset = u64::from(ticket.slot) * block_bytes + within;
                    if let Err(error) = device.read_at(slot_offset, &mut buf[at..at + run_length]) {
                        outcomes[index..end].fill(false);
                        cache_failure.get_or_insert_with(|| error.to_string());
                        // Per block: a dirty one has no other copy; a clean
                        // one reads from home.
                        for step in &steps[index..end] {
                            let BlockIo::ReadSlot { dirty, .. } = step.io else {
                                unreachable!("a slot run holds slot reads only")
                            };
                            let (start, length, at, _) =
                                part_of(&settings, step.block, offset_bytes, length_bytes);
                            if dirty {
                                result = Err(VolumeError::from(error.clone()));
                            } else if let Err(error) =
                                self.read_tiered(start, &mut buf[at..at + length as usize])
                            {
                                result = Err(error);
                            }
                        }
                    }
                    index = end;
                    continue;
                }
                BlockIo::Fill { .. } => {
                    // One home read for the run of fills (adjacent blocks:
                    // read one by one, each would wait a rotation of a
                    // disk), then each block into its slot.
                    let mut end = index + 1;
                    while end < steps.len() && matches!(steps[end].io, BlockIo::Fill { .. }) {
                        end += 1;
                    }
                    let (run_start, _) = settings.block_range(step.block);
                    let (last_start, last_length) = settings.block_range(steps[end - 1].block);
                    let mut run = vec![0u8; (last_start + last_length - run_start) as usize];
                    if let Err(error) = self.read_tiered(run_start, &mut run) {
                        outcomes[index..end].fill(false);
                        result = Err(error);
                        index = end;
                        continue;
                    }
                    for position in index..end {
                        let BlockIo::Fill { ticket } = steps[position].io else {
                            unreachable!("a fill run holds fills only")
                        };
                        let (_, length, at, within) =
                            part_of(&settings, steps[position].block, offset_bytes, length_bytes);
                        let (block_start, block_length) =
                            settings.block_range(steps[position].block);
                        let block =
                            &run[(block_start - run_start) as usize..][..block_length as usize];
                        buf[at..at + length as usize]
                            .copy_from_slice(&block[within as usize..(within + length) as usize]);
                        if let Err(error) =
                            device.write_at(u64::from(ticket.slot) * block_bytes, block)
                        {
                            outcomes[position] = false;
                            cache_failure.get_or_insert_with(|| error.to_string());
                        }
                    }
                    index = end;
                    continue;
                }
                other => unreachable!("a read planned {other:?}"),
            }
        }
        self.report_steps(&steps, &outcomes, locks, cache_failure);
        result
    }

    /// A write, discard or write of zeroes on a cache volume.
    pub(super) fn cached_mutate(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        mutation: &Mutation,
        fua: bool,
    ) -> Result<(), VolumeError> {
        let layer = self.cache_layer();
        let Some((first, last)) = layer.block_span(offset_bytes, length_bytes) else {
            return Ok(());
        };
        let _user_io = UserIo::start(layer, &*self.clock);
        let locks = layer.lock_blocks(first, last, true);
        let mut steps: Vec<Step> = Vec::new();
        let settings;
        let lost_covered: Vec<BlockId>;
        {
            let mut core = layer.core.lock();
            settings = core.cache.settings().clone();
            // Whole blocks this request covers are no longer lost.
            let end = offset_bytes + length_bytes;
            let covered: Vec<BlockId> = core
                .lost_blocks
                .range(first..=last)
                .copied()
                .filter(|&block| {
                    let (start, length) = settings.block_range(block);
                    offset_bytes <= start && end >= start + length
                })
                .collect();
            if core.bypass() {
                drop(core);
                self.mutate_tiered(offset_bytes, length_bytes, mutation, fua)?;
                let mut core = layer.core.lock();
                for block in covered {
                    core.lost_blocks.remove(&block);
                    core.rewritten.push(block);
                }
                drop(core);
                if fua {
                    self.cache_commit(false)?;
                }
                return Ok(());
            }
            // Lost blocks a write covers whole are current again once it
            // has landed: cleared below, after every step succeeded (the
            // stripes keep readers out meanwhile). Cleared here, a write
            // that then failed left home's stale copy readable as current
            // (DST seed 228: a discard over a lost dirty block failed at
            // home), and a commit by another thread could journal the
            // block current before its data was written.
            lost_covered = covered;
            match mutation {
                Mutation::Write(_) => core.cache.write(offset_bytes, length_bytes, &mut steps),
                Mutation::Discard | Mutation::Zero => {
                    core.cache.discard(offset_bytes, length_bytes, &mut steps)
                }
            }
        }
        let block_bytes = layer.block_bytes();
        let device = self.cache_device();
        let mut outcomes = vec![true; steps.len()];
        let mut result = Ok(());
        let mut cache_failure = None;
        let mut slot_touched = false;
        let data_of = |at: usize, length: u64| -> Mutation<'_> {
            mutation.slice(
                at,
                if matches!(mutation, Mutation::Write(_)) {
                    length as usize
                } else {
                    0
                },
            )
        };
        let mut index = 0;
        while index < steps.len() {
            let step = steps[index];
            let (start, length, at, within) =
                part_of(&settings, step.block, offset_bytes, length_bytes);
            let slot_offset = |slot: u32| u64::from(slot) * block_bytes;
            match step.io {
                BlockIo::WriteHome => {
                    let (end, run_length) =
                        home_run(&steps, index, &settings, offset_bytes, length_bytes);
                    if let Err(error) =
                        self.mutate_tiered(start, run_length, &data_of(at, run_length), fua)
                    {
                        result = Err(error);
                    }
                    index = end;
                    continue;
                }
                BlockIo::WriteSlot { ticket } => {
                    slot_touched = true;
                    // One device write for a run of adjacent blocks in
                    // adjacent slots (a fresh cache hands slots out in
                    // order): a 4 MiB write staged in 4 KiB blocks was
                    // 1,024 writes of the cache tier, 20 ms on an emulated
                    // P3700 where home took 8 ms (EVIDENCE.md, SMR live).
                    let end = slot_run(&steps, index);
                    let (last_start, last_length, ..) =
                        part_of(&settings, steps[end - 1].block, offset_bytes, length_bytes);
                    let run_length = last_start + last_length - start;
                    if let Err(error) = data_of(at, run_length).apply(
                        device,
                        slot_offset(ticket.slot) + within,
                        run_length,
                        fua,
                    ) {
                        outcomes[index..end].fill(false);
                        cache_failure.get_or_insert_with(|| error.to_string());
                        result = Err(error.into());
                    }
                    index = end;
                    continue;
                }
                BlockIo::WriteSlotMerged { ticket } => {
                    slot_touched = true;
                    let (block_start, block_length) = settings.block_range(step.block);
                    let mut block = vec![0u8; block_length as usize];
                    match self.read_tiered(block_start, &mut block) {
                        Ok(()) => {
                            let range = within as usize..(within + length) as usize;
                            match data_of(at, length) {
                                Mutation::Write(data) => block[range].copy_from_slice(data),
                                Mutation::Discard | Mutation::Zero => block[range].fill(0),
                            }
                            let written = if fua {
                                device.write_at_durable(slot_offset(ticket.slot), &block)
                            } else {
                                device.write_at(slot_offset(ticket.slot), &block)
                            };
                            if let Err(error) = written {
                                outcomes[index] = false;
                                cache_failure.get_or_insert_with(|| error.to_string());
                                result = Err(error.into());
                            }
                        }
                        Err(error) => {
                            outcomes[index] = false;
                            result = Err(error);
                        }
                    }
                }
                BlockIo::WriteBoth { ticket, merge } => {
                    slot_touched = true;
                    match self.mutate_tiered(start, length, &data_of(at, length), fua) {
                        Err(error) => {
                            // Home did not take it: the slot must not
                            // either (a load fails; a hit keeps the old data
                            // in both places).
                            outcomes[index] = false;
                            result = Err(error);
                        }
                        Ok(()) if merge => {
                            // Home holds the merged block now.
                            let (block_start, block_length) = settings.block_range(step.block);
                            let mut block = vec![0u8; block_length as usize];
                            // A FUA write makes the slot durable too: after
                            // a crash every mapped block counts as dirty, so
                            // a stale slot would win over home's good copy.
                            let written =
                                self.read_tiered(block_start, &mut block).and_then(|()| {
                                    let at = slot_offset(ticket.slot);
                                    if fua {
                                        device.write_at_durable(at, &block)
                                    } else {
                                        device.write_at(at, &block)
                                    }
                                    .map_err(VolumeError::from)
                                });
                            if let Err(error) = written {
                                outcomes[index] = false;
                                cache_failure.get_or_insert_with(|| error.to_string());
                            }
                        }
                        Ok(()) => {
                            // Durable on the slot too under FUA (see above).
                            if let Err(error) = data_of(at, length).apply(
                                device,
                                slot_offset(ticket.slot) + within,
                                length,
                                fua,
                            ) {
                                // Home has the write; the slot is stale:
                                // the cache tier is lost from now on.
                                outcomes[index] = false;
                                cache_failure.get_or_insert_with(|| error.to_string());
                            }
                        }
                    }
                }
                // Its band is being rewritten: done after this part.
                BlockIo::Blocked => {}
                other => unreachable!("a write planned {other:?}"),
            }
            index += 1;
        }
        if result.is_ok() && !lost_covered.is_empty() {
            let mut core = layer.core.lock();
            for block in lost_covered {
                core.lost_blocks.remove(&block);
                core.rewritten.push(block);
            }
        }
        let blocked = Self::blocked_blocks(&steps);
        self.report_steps(&steps, &outcomes, locks, cache_failure);
        result?;
        if !blocked.is_empty() {
            self.write_blocked_parts(layer, &blocked, offset_bytes, length_bytes, mutation, fua)?;
        }
        if fua {
            if slot_touched && !matches!(mutation, Mutation::Write(_)) {
                device.flush()?;
            }
            // Mapping changes this write relies on (its own `Mapped`, or the
            // `Unmapped` of an older copy of a block it wrote home) are made
            // durable before the acknowledgement.
            self.cache_commit(false)?;
        }
        Ok(())
    }

    /// Commits the pending mapping changes: flush every tier, append them,
    /// hand them back to the core. `always`: flush even when nothing is
    /// pending (FLUSH).
    pub(super) fn cache_commit(&self, always: bool) -> Result<(), VolumeError> {
        let layer = self.cache_layer();
        let mut state = layer.commit.lock();
        {
            let mut core = layer.core.lock();
            if !always
                && !core.cache.has_changes()
                && state.pending.is_empty()
                && core.rewritten.is_empty()
                && state.rewritten.is_empty()
            {
                return Ok(());
            }
            state.pending.push(core.cache.take_changes());
            let rewritten = std::mem::take(&mut core.rewritten);
            state.rewritten.extend(rewritten);
        }
        self.flush_tiers()?;
        let changes: Vec<Change> = state
            .pending
            .iter()
            .flat_map(|commit| commit.changes.iter().copied())
            .collect();
        if !changes.is_empty() {
            // Checked and appended with the core locked (the order
            // `cache_tier_failed` takes them in): once the tier was lost
            // (`CacheLost` journaled), these changes describe slots that no
            // longer count; journaled after that record they would bring
            // the mappings back at the next start, over home's newer data.
            let core = layer.core.lock();
            if core.lost.is_none() {
                self.meta.lock().append(&Record::CacheMap {
                    changes: to_record(&changes),
                })?;
            }
        }
        if !state.rewritten.is_empty() {
            let blocks = std::mem::take(&mut state.rewritten);
            self.meta
                .lock()
                .append(&Record::CacheRewritten { blocks })?;
        }
        let commits = std::mem::take(&mut state.pending);
        state.last_commit_ns = self.clock.now_ns();
        let mut core = layer.core.lock();
        for commit in commits {
            core.cache.committed(commit);
        }
        Ok(())
    }

    /// For a checkpoint: takes the pending changes and snapshots the
    /// mappings they lead to, flushes every tier, and returns the
    /// checkpoint's cache part. The commit lock stays held (returned) until
    /// the checkpoint is written; then [`Volume::cache_checkpoint_done`].
    pub(super) fn cache_checkpoint_begin(
        &self,
        clean_shutdown: bool,
    ) -> Result<Option<(parking_lot::MutexGuard<'_, CommitState>, CacheCheckpoint)>, VolumeError>
    {
        let Some(layer) = &self.cache else {
            return Ok(None);
        };
        let mut state = layer.commit.lock();
        let snapshot = {
            let mut core = layer.core.lock();
            state.pending.push(core.cache.take_changes());
            let settings = core.cache.settings();
            CacheCheckpoint {
                tier: self.tiers[layer.tier as usize].name.clone(),
                block_bytes: settings.block_bytes,
                slots: settings.slots,
                mode: core.requested.clone(),
                config_mode: core.config_mode.name().to_string(),
                detached: core.detached,
                clean_shutdown,
                entries: if core.bypass() {
                    Vec::new()
                } else {
                    core.cache.mappings()
                },
                lost_blocks: core.lost_blocks.iter().copied().collect(),
            }
        };
        self.flush_tiers()?;
        Ok(Some((state, snapshot)))
    }

    /// The checkpoint holding the snapshot is durable: the changes taken
    /// for it are committed.
    pub(super) fn cache_checkpoint_done(
        &self,
        mut state: parking_lot::MutexGuard<'_, CommitState>,
    ) {
        let layer = self.cache_layer();
        let commits = std::mem::take(&mut state.pending);
        state.last_commit_ns = self.clock.now_ns();
        drop(state);
        let mut core = layer.core.lock();
        for commit in commits {
            core.cache.committed(commit);
        }
    }

    /// Whether tier `index` is this volume's cache tier.
    pub(super) fn is_cache_tier(&self, index: usize) -> bool {
        self.cache
            .as_ref()
            .is_some_and(|layer| layer.tier as usize == index)
    }

    /// Whether this is a cache volume.
    pub fn is_cache(&self) -> bool {
        self.cache.is_some()
    }

    /// One step of the cache's background work (the writeback thread, or a
    /// deterministic test): a batch of writebacks (up to
    /// [`WRITEBACK_BATCH_BYTES`]), then a commit when due, a checkpoint when
    /// the journal is long, and the end of a detach.
    ///
    /// One commit covers the whole batch: a commit flushes home and the
    /// cache tier, which under load costs far more than one block's
    /// writeback (one commit per block ran about 10 writebacks a second on
    /// two page-cache files under 80k write IOPS).
    pub fn cache_step(&self) -> Result<CacheStep, VolumeError> {
        let Some(layer) = &self.cache else {
            return Ok(CacheStep::Idle);
        };
        let mut batch = if layer.options.smr.is_some() {
            self.destage_step(layer)
        } else {
            self.write_back_batch(layer)
        };
        if matches!(batch, Ok(CacheStep::Idle)) {
            batch = self.load_run(layer);
        }
        // Commits on a timer, and at once when slots are short and a commit
        // would free some (released slots; the blocks just written back
        // among them). Never nested: commits take the commit lock, then the
        // core's.
        let now_ns = self.clock.now_ns();
        let state_last = layer.commit.lock().last_commit_ns;
        let commit_due = {
            let core = layer.core.lock();
            let short = core.cache.free_slots() * 2 < u64::from(core.cache.settings().reserve());
            core.cache.has_changes()
                && (now_ns.saturating_sub(state_last) >= layer.options.commit_interval_ns
                    || (short && core.cache.released_slots() > 0))
        };
        if commit_due {
            self.cache_commit(false)?;
        }
        if self.meta.lock().journal_bytes() > JOURNAL_CHECKPOINT_BYTES {
            self.checkpoint()?;
        }
        self.finish_detach()?;
        self.feed_cache_costs(layer, now_ns);
        batch
    }

    /// About once a second: tells the cache core what the home and cache
    /// devices did since the last time (their stats, when the tiers are
    /// measured), which adaptive admission turns into its cost model.
    fn feed_cache_costs(&self, layer: &CacheLayer, now_ns: u64) {
        if !matches!(layer.options.admission, AdmissionKind::Adaptive) {
            return;
        }
        let mut seen = layer.costs_seen.lock();
        if seen
            .as_ref()
            .is_some_and(|seen| now_ns.saturating_sub(seen.at_ns) < COSTS_INTERVAL_NS)
        {
            return;
        }
        let home_tier = &self.tiers[self.tiers.len() - 1];
        let fast_tier = &self.tiers[layer.tier as usize];
        let (Some(home), Some(fast)) = (home_tier.device.stats(), fast_tier.device.stats()) else {
            return;
        };
        if let Some(before) = seen.as_ref() {
            let interval_ns = now_ns.saturating_sub(before.at_ns);
            let home_interval = interval_of(&before.home, &home, interval_ns);
            let fast_interval = interval_of(&before.fast, &fast, interval_ns);
            layer
                .core
                .lock()
                .cache
                .observe_intervals(&home_interval, &fast_interval);
        }
        *seen = Some(CostsSeen {
            at_ns: now_ns,
            home,
            fast,
        });
    }

    /// Writes back dirty blocks the core asks for, one after another, until
    /// [`WRITEBACK_BATCH_BYTES`] are written, the core wants no more, or a
    /// block is busy with user IO.
    ///
    /// A batch begun because the devices were idle ends as soon as user IO
    /// arrives: a user request then waits behind at most one writeback.
    fn write_back_batch(&self, layer: &CacheLayer) -> Result<CacheStep, VolumeError> {
        let idle = self.cache_idle(layer);
        let started_ns = self.clock.now_ns();
        let mut bytes = 0;
        let mut blocks = 0;
        let mut buffer = Vec::new();
        let outcome = loop {
            if bytes >= WRITEBACK_BATCH_BYTES || (idle && blocks > 0 && !self.cache_idle(layer)) {
                break CacheStep::Idle;
            }
            let mut core = layer.core.lock();
            if core.bypass() {
                break CacheStep::Idle;
            }
            let Some(writeback) = core.cache.next_writeback(idle) else {
                break CacheStep::Idle;
            };
            let Some(guard) = layer.stripes[CacheLayer::stripe(writeback.block)].try_write() else {
                core.cache.writeback_done(writeback, false);
                break CacheStep::Busy;
            };
            let (start, length) = core.cache.settings().block_range(writeback.block);
            drop(core);
            buffer.resize(length as usize, 0);
            let slot_offset = u64::from(writeback.slot) * layer.block_bytes();
            let read = self.cache_device().read_at(slot_offset, &mut buffer);
            let written = match &read {
                Ok(()) => self.mutate_tiered(start, length, &Mutation::Write(&buffer), false),
                Err(_) => Ok(()),
            };
            let ok = read.is_ok() && written.is_ok();
            layer.core.lock().cache.writeback_done(writeback, ok);
            drop(guard);
            if let Err(error) = read {
                self.cache_tier_failed(&error.to_string());
                return Err(error.into());
            }
            written?;
            layer
                .written_back_bytes
                .fetch_add(length, Ordering::Relaxed);
            bytes += length;
            blocks += 1;
        };
        if blocks == 0 {
            return Ok(outcome);
        }
        let took_ns = self.clock.now_ns().saturating_sub(started_ns);
        // Idle devices: write back at full speed. Otherwise (above the high
        // watermark, or draining) leave the devices to user IO half the time.
        let pause_ns = if idle { 0 } else { took_ns };
        Ok(CacheStep::Wrote {
            bytes,
            blocks,
            pause_ns,
        })
    }

    /// Queues the blocks of `offset_bytes .. + length_bytes` to be copied
    /// into the cache by the background step (what `adaptive` does for the
    /// segments it promotes; DST drives loads with it on any cache).
    pub fn cache_promote(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), VolumeError> {
        let Some(layer) = &self.cache else {
            return Err(VolumeError::Invalid(format!(
                "volume {} is not a cache volume",
                self.options.name
            )));
        };
        let Some((first, last)) = layer.block_span(offset_bytes, length_bytes) else {
            return Ok(());
        };
        layer.core.lock().cache.promote(first, last - first + 1);
        Ok(())
    }

    /// Copies in blocks of promoted segments (`adaptive`'s whole-segment
    /// promotions, [`BlockCache::next_load`]) while no user IO is in
    /// flight, one block at a time as the simulator does (a user request
    /// waits behind at most one block's copy), at most
    /// [`LOAD_STEP_BLOCKS`] per step.
    /// Each is read from home and written into its slot with the block held
    /// as a reader holds it (rule 1), and reported as a fill is; a write
    /// planned meanwhile overtakes the load and goes home.
    fn load_run(&self, layer: &CacheLayer) -> Result<CacheStep, VolumeError> {
        let mut buffer = Vec::new();
        let (mut bytes, mut blocks) = (0, 0);
        while blocks < LOAD_STEP_BLOCKS {
            if layer.user_io_in_flight.load(Ordering::Relaxed) > 0 {
                break;
            }
            let (load, start, length) = {
                let mut core = layer.core.lock();
                if core.bypass() {
                    break;
                }
                let Some(load) = core.cache.next_load() else {
                    break;
                };
                // A lost block's home copy is older than its last write:
                // never copied in.
                if core.lost_blocks.contains(&load.block) {
                    core.cache.load_done(load, false);
                    continue;
                }
                let (start, length) = core.cache.settings().block_range(load.block);
                (load, start, length)
            };
            let lock = layer.lock_blocks(load.block, load.block, false);
            buffer.resize(length as usize, 0);
            let read = self.read_tiered(start, &mut buffer);
            let written = match &read {
                Ok(()) => self
                    .cache_device()
                    .write_at(u64::from(load.ticket.slot) * layer.block_bytes(), &buffer),
                Err(_) => Ok(()),
            };
            let ok = read.is_ok() && written.is_ok();
            layer.core.lock().cache.load_done(load, ok);
            drop(lock);
            if let Err(error) = written {
                self.cache_tier_failed(&error.to_string());
                return Err(error.into());
            }
            read?;
            layer.loaded_bytes.fetch_add(length, Ordering::Relaxed);
            bytes += length;
            blocks += 1;
        }
        if blocks == 0 {
            return Ok(CacheStep::Idle);
        }
        Ok(CacheStep::Wrote {
            bytes,
            blocks,
            pause_ns: 0,
        })
    }

    /// Whether the devices are idle for writeback: no user IO in flight, and
    /// none for `writeback_idle_ns`.
    fn cache_idle(&self, layer: &CacheLayer) -> bool {
        layer.user_io_in_flight.load(Ordering::Relaxed) == 0
            && self
                .clock
                .now_ns()
                .saturating_sub(layer.last_user_io_ns.load(Ordering::Relaxed))
                >= layer.options.writeback_idle_ns
    }

    /// A detach whose last dirty block was written back ends: commit,
    /// journal `CacheDetached` (with the core locked, so no IO is planned
    /// in between), then IO bypasses the cache.
    fn finish_detach(&self) -> Result<(), VolumeError> {
        let layer = self.cache_layer();
        {
            let core = layer.core.lock();
            if core.bypass() || !core.cache.detached() {
                return Ok(());
            }
        }
        self.cache_commit(true)?;
        // Not inside a checkpoint's snapshot-to-write (see `commit`).
        let _commit = layer.commit.lock();
        let mut core = layer.core.lock();
        if core.bypass() || !core.cache.detached() {
            return Ok(());
        }
        self.meta.lock().append(&Record::CacheDetached)?;
        core.detached = true;
        tracing::info!(volume = %self.options.name, "cache detached: every dirty block is home; IO goes to home alone");
        Ok(())
    }

    /// Switches the cache's mode online (`tierd cache --mode`): `writeback`,
    /// `writethrough`, `writearound`, or `detach`. Journaled before it takes
    /// effect. Re-attaching a detached cache starts it empty.
    pub fn set_cache_mode(&self, mode: &str) -> Result<(), VolumeError> {
        let Some(layer) = &self.cache else {
            return Err(VolumeError::Invalid(format!(
                "volume {} is not a cache volume (it has no `cache` in its [[volume]])",
                self.options.name
            )));
        };
        let parsed = match mode {
            "detach" => None,
            other => Some(
                CacheMode::parse(other)
                    .map_err(|error| VolumeError::Invalid(format!("{error}, or detach")))?,
            ),
        };
        // Not inside a checkpoint's snapshot-to-write (see `commit`): the
        // switch must be in the checkpoint or in the journal after it.
        let _commit = layer.commit.lock();
        let mut core = layer.core.lock();
        if let Some(reason) = &core.lost {
            return Err(VolumeError::Invalid(format!(
                "the cache tier of volume {} was lost ({reason}); restart with a working cache tier to use the cache again",
                self.options.name
            )));
        }
        if parsed.is_some() && core.cache.is_detaching() && !core.detached {
            return Err(VolumeError::Invalid(format!(
                "volume {}: a detach is in progress ({} dirty bytes left); wait for it to finish, then switch the mode",
                self.options.name,
                core.cache.dirty_blocks() * layer.block_bytes()
            )));
        }
        if parsed.is_none() && (core.detached || core.cache.is_detaching()) {
            return Ok(());
        }
        self.meta.lock().append(&Record::CacheMode {
            mode: mode.to_string(),
            config_mode: layer.options.mode.name().to_string(),
        })?;
        core.requested = mode.to_string();
        core.config_mode = layer.options.mode;
        match parsed {
            None => core.cache.detach(),
            Some(mode) if core.detached => {
                let mut settings = core.cache.settings().clone();
                settings.mode = mode;
                core.cache = BlockCache::new(settings).map_err(VolumeError::Invalid)?;
                core.detached = false;
            }
            Some(mode) => core.cache.set_mode(mode),
        }
        tracing::info!(volume = %self.options.name, mode, "cache mode switched");
        Ok(())
    }

    /// The cache tier failed (an IO error, or it was marked unavailable):
    /// its dirty blocks are recorded as lost (journaled) and IO bypasses the
    /// cache from now on.
    pub(super) fn cache_tier_failed(&self, reason: &str) {
        let Some(layer) = &self.cache else { return };
        // Not inside a checkpoint's snapshot-to-write (see `commit`).
        let mut state = layer.commit.lock();
        let mut core = layer.core.lock();
        if core.lost.is_some() {
            return;
        }
        // A clean block's home copy may be a writeback not yet flushed (the
        // slot was its durable copy): home is flushed before `CacheLost`
        // drops the mappings, or, when that fails, every mapped block
        // counts as lost.
        let home_durable = self.tiers[self.home() as usize].device.flush().is_ok();
        let lost: Vec<BlockId> = if core.detached {
            Vec::new()
        } else {
            core.cache
                .mappings()
                .into_iter()
                .filter(|(_, _, dirty)| *dirty || !home_durable)
                .map(|(block, _, _)| block)
                .collect()
        };
        // A lost block rewritten whole since the last commit was current
        // again in its slot; lost with the tier now, it must not be
        // journaled as rewritten after `CacheLost` (that record would undo
        // the loss at the next start, which then served home's stale copy
        // in place of a flushed write: DST seeds 1172, 1442).
        let lost_now: BTreeSet<BlockId> = lost.iter().copied().collect();
        core.rewritten.retain(|block| !lost_now.contains(block));
        state.rewritten.retain(|block| !lost_now.contains(block));
        core.lost_blocks.extend(lost.iter().copied());
        core.lost = Some(reason.to_string());
        tracing::error!(
            volume = %self.options.name,
            tier = %self.tiers[layer.tier as usize].name,
            reason,
            lost_blocks = lost.len(),
            "cache tier lost: clean blocks read from home, dirty ones fail until rewritten"
        );
        if let Err(error) = self.meta.lock().append(&Record::CacheLost { blocks: lost }) {
            tracing::error!(volume = %self.options.name, error = %error, "cannot journal the lost cache tier");
        }
    }

    /// The cache's status (`None` for other volumes).
    pub fn cache_status(&self) -> Option<CacheStatus> {
        let layer = self.cache.as_ref()?;
        let core = layer.core.lock();
        let counters: CacheCounters = core.cache.counters();
        let block_bytes = layer.block_bytes();
        let ratio = |hits: u64, all: u64| {
            if all == 0 {
                0.0
            } else {
                hits as f64 / all as f64
            }
        };
        let (dirty, occupancy) = if core.bypass() {
            (0, 0)
        } else {
            (core.cache.dirty_blocks(), core.cache.occupancy_blocks())
        };
        Some(CacheStatus {
            mode: core.mode_name(),
            block_bytes,
            read_hit_ratio: ratio(counters.read_hit_blocks, counters.read_blocks),
            write_hit_ratio: ratio(counters.write_hit_blocks, counters.write_blocks),
            dirty_bytes: dirty * block_bytes,
            occupancy_bytes: occupancy * block_bytes,
            tier: self.tiers[layer.tier as usize].name.clone(),
            slots: core.cache.settings().slots,
            dirty_blocks: dirty,
            occupancy_blocks: occupancy,
            // SMR staging: the dirty blocks band rewrites cleaned.
            written_back_bytes: layer.written_back_bytes.load(Ordering::Relaxed)
                + counters.band_rewrite_blocks * block_bytes,
            promoted_bytes: layer.loaded_bytes.load(Ordering::Relaxed),
            writebacks: counters.writebacks,
            allocations: counters.allocations,
            clean_evictions: counters.clean_evictions,
            dirty_evictions: counters.dirty_evictions,
            bypassed_blocks: counters.bypassed,
            rejected_blocks: counters.rejected,
            no_slot_blocks: counters.no_slot,
            read_blocks: counters.read_blocks,
            read_hit_blocks: counters.read_hit_blocks,
            write_blocks: counters.write_blocks,
            write_hit_blocks: counters.write_hit_blocks,
            lost_bytes: core.lost_blocks.len() as u64 * block_bytes,
            lost: core.lost.clone(),
            smr: self.smr_status(layer, &core),
            admission: core.cache.settings().admission.to_string(),
            adaptive: core.cache.adaptive_status().map(|status| AdaptiveView {
                rule: status.rule.to_string(),
                epochs: status.epochs,
                switches: status.switches,
                gains_ms: status
                    .gains_ns
                    .iter()
                    .map(|(rule, gain)| (rule.to_string(), gain / 1e6))
                    .collect(),
                home_utilization: status.home_utilization,
                fast_utilization: status.fast_utilization,
                efficiency: status.efficiency,
                promotion: status.promotion.clone(),
            }),
        })
    }

    /// Lost blocks as byte ranges (adjacent blocks merged), for status.
    pub(super) fn cache_lost_ranges(&self) -> Vec<super::UnavailableRange> {
        let Some(layer) = &self.cache else {
            return Vec::new();
        };
        let core = layer.core.lock();
        let block_bytes = layer.block_bytes();
        let name = self.tiers[layer.tier as usize].name.clone();
        let mut ranges: Vec<super::UnavailableRange> = Vec::new();
        for &block in &core.lost_blocks {
            let (start, length) = core.cache.settings().block_range(block);
            let segment = (start / self.options.segment_bytes) as u32;
            let last_segment = ((start + length - 1) / self.options.segment_bytes) as u32;
            match ranges.last_mut() {
                Some(last) if last.offset_bytes + last.length_bytes == start => {
                    last.length_bytes += length;
                    last.last_segment = last_segment;
                }
                _ => ranges.push(super::UnavailableRange {
                    tier: name.clone(),
                    offset_bytes: start,
                    length_bytes: length,
                    first_segment: segment,
                    last_segment,
                }),
            }
        }
        let _ = block_bytes;
        ranges
    }

    /// Test and DST hook: the core's mappings `(block, slot, dirty)`.
    pub fn cache_mappings(&self) -> Vec<(u64, u32, bool)> {
        self.cache
            .as_ref()
            .map(|layer| layer.core.lock().cache.mappings())
            .unwrap_or_default()
    }
}
