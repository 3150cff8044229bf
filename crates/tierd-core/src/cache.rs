//! The block cache: which home blocks the fast tier holds, in which slot,
//! which are dirty, which miss earns a slot, which block leaves, and which
//! dirty block is written back next.
//!
//! Sans-IO like the rest of this crate: [`BlockCache`] decides and keeps
//! the books; its caller does the IO and reports back. The simulator runs it
//! against device models, the live engine against real devices, so a rule
//! (when a write is acknowledged from the fast tier alone, when a slot may
//! be reused) is written once. `docs/engine/cache.md` is the long form.
//!
//! ## Model
//! The volume is cut into blocks of `block_bytes` (the last one may be
//! short). The fast tier is cut into `slots` block-sized slots. A slot is
//! **free**, **loading** (a fill or an allocating write is putting a block
//! into it), **valid** (holds a block, clean or dirty), or **released**
//! (its block left; it becomes free when the mapping change is committed).
//! The eviction policy (FIFO, LRU, ARC or S3-FIFO from
//! [`tierd_policy::cache`]) orders the mapped blocks; admission
//! ([`AdmissionKind`]) decides whether a miss allocates; the sequential
//! detector bypasses long streams.
//!
//! ## Rules
//! - **The caller serializes conflicting IO on one block** (dm-cache's bio
//!   prison): a write, discard or writeback of block `b` is not planned
//!   while a read, write, discard or writeback of `b` is in flight, and a
//!   read of `b` is not planned while a write, discard or writeback of `b`
//!   is (the engine: a reader-writer lock per block, held from planning to
//!   the last report). Reads of one block may overlap. Without this, two
//!   partial writes of one block could each merge the other's bytes away.
//!   The simulator carries no data and does not need it.
//! - **Every IO on a slot pins it.** A step that names a slot carries a
//!   [`Ticket`]; the caller reports it exactly once ([`BlockCache::done`]).
//!   A pinned slot is never given to another block, so a slot is never
//!   overwritten while an IO reads it.
//! - **Hits.** A read of a valid block reads its slot. A write to a valid
//!   block writes the slot (and home too in writethrough, writearound or
//!   while the cache drains). In writeback a slot-only write makes the
//!   block dirty and bumps its write generation.
//! - **Misses.** A miss allocates only when the mode allows (reads always,
//!   writes in writeback and writethrough), the request is not part of a
//!   sequential run past the cutoff, admission admits the block, and a free
//!   slot exists after eviction. A read miss that allocates is a **fill**:
//!   the caller reads the whole block from home, answers the read, writes
//!   the block into the slot and reports it; the block is valid from then
//!   on. A write miss that allocates writes the slot (a partial block is
//!   first merged with the block read from home), and in writethrough home
//!   too. Anything else goes to home only.
//! - **Eviction.** Allocating on a full policy makes the policy name a
//!   victim. A clean, unpinned victim leaves at once (its slot is
//!   released). A dirty or pinned victim becomes an **orphan**: still
//!   mapped and readable, no longer ordered by the policy, written back
//!   first; it leaves once clean and unpinned. A miss that finds no free
//!   slot goes to home (counted as `no_slot`) and makes the policy push out
//!   its next victim all the same (while the policy holds more than
//!   `slots − 2 × reserve` blocks), so slots keep coming back under
//!   sustained misses. The policy holds at most `slots − reserve` blocks so
//!   orphans and released slots have room.
//! - **Slot reuse.** With a journal (`journal = true`, the live engine) a
//!   released slot becomes free only when the change that unmapped its
//!   block is committed ([`BlockCache::take_changes`] then
//!   [`BlockCache::committed`]): a crash before the commit must not find
//!   the old block's mapping pointing at another block's data. Without one
//!   (the simulator, which keeps no metadata) it is free at once.
//! - **Journal.** [`Change::Mapped`] is emitted when a load completes (the
//!   data is in the slot before the mapping exists), [`Change::Unmapped`]
//!   when a block leaves. Dirty bits are not journaled: after an unclean
//!   shutdown every recovered block is treated as dirty and written back
//!   (dm-cache does the same), so a write that reached a clean block's slot
//!   just before a crash is never dropped as clean.
//! - **Writeback** ([`BlockCache::next_writeback`]): orphans first, then
//!   dirty blocks in ascending block order (an elevator over home). Wanted
//!   while the dirty share is above the high watermark until it falls to
//!   the low one, whenever the caller says the devices are idle, and always
//!   while draining (mode is not writeback, or detaching). A writeback
//!   cleans its block only if no slot-only write landed since it began.
//! - **Draining.** Switching from writeback to writethrough or writearound
//!   stops new dirt: writes to dirty blocks go to home and the slot alike,
//!   so every dirty block needs one writeback at most, and detaching
//!   ([`BlockCache::detach`]) completes even under load. Writes to a block
//!   whose writeback is in flight bump its generation so the stale copy
//!   does not clean it.
//! - **Loads** (segment promotions, `adaptive`): blocks queued by
//!   [`BlockCache::promote`] are handed out one at a time by
//!   [`BlockCache::next_load`] with loading, pinned slots, like fills
//!   without a user waiting. The caller takes the block's reader lock after
//!   `next_load` and only then reads home, so a write planned before it
//!   finishes first; one planned after `next_load` and before the lock
//!   overtakes the load.

pub mod adaptive;
pub mod admission;
pub mod band;
#[cfg(test)]
mod band_tests;
mod sequential;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeSet, VecDeque};
use std::fmt;

use tierd_common::blockmap::BlockMap;
use tierd_common::hash::FastMap;
use tierd_policy::cache::{build_cache, CacheKind, PageCache, MAX_CAPACITY_PAGES};

pub use adaptive::{
    AdaptiveStatus, DeviceInterval, DevicePriors, DeviceRole, PromotionStatus, Rule, ServicePrior,
};
use admission::Admission;
pub use admission::AdmissionKind;
pub use band::{
    BandDone, DestageIo, DestageIoKind, SmrStaging, DEFAULT_DESTAGE_CHUNKS_IN_FLIGHT,
    DEFAULT_DESTAGE_CHUNK_BYTES, DEFAULT_DESTAGE_IDLE_NS,
};
use sequential::SequentialDetector;

/// A block of the volume: byte `block * block_bytes` onwards.
pub type BlockId = u64;
/// A block-sized slot of the fast tier: byte `slot * block_bytes` onwards.
pub type SlotId = u32;

/// How writes are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum CacheMode {
    /// Writes are acknowledged once on the fast tier; written back later.
    Writeback,
    /// Writes go to home before the acknowledgement; cached blocks are
    /// updated and write misses allocate.
    Writethrough,
    /// Writes go to home; a cached copy is updated, a miss allocates nothing.
    Writearound,
}

impl CacheMode {
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Writeback => "writeback",
            CacheMode::Writethrough => "writethrough",
            CacheMode::Writearound => "writearound",
        }
    }

    pub fn parse(text: &str) -> Result<CacheMode, String> {
        match text {
            "writeback" => Ok(CacheMode::Writeback),
            "writethrough" => Ok(CacheMode::Writethrough),
            "writearound" => Ok(CacheMode::Writearound),
            other => Err(format!(
                "cache mode {other:?}: expected writeback, writethrough or writearound"
            )),
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The smallest and largest cache block.
pub const MIN_BLOCK_BYTES: u64 = 4096;
pub const MAX_BLOCK_BYTES: u64 = 1 << 20;
/// bcache's default `sequential_cutoff`.
pub const DEFAULT_SEQUENTIAL_CUTOFF_BYTES: u64 = 4 << 20;
/// Writeback starts above this share of dirty slots (percent)...
pub const DEFAULT_DIRTY_HIGH_PERCENT: u8 = 40;
/// ... and, once started, goes on until the share falls to this one.
pub const DEFAULT_DIRTY_LOW_PERCENT: u8 = 10;

/// Everything a cache is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheSettings {
    /// Bytes of the volume the cache sits in front of.
    pub volume_bytes: u64,
    /// Power of two, 4 KiB to 1 MiB.
    pub block_bytes: u64,
    /// Block-sized slots on the fast tier.
    pub slots: u32,
    pub mode: CacheMode,
    pub policy: CacheKind,
    pub admission: AdmissionKind,
    /// Misses of a sequential run at least this long bypass the cache; 0 = never.
    pub sequential_cutoff_bytes: u64,
    pub dirty_high_percent: u8,
    pub dirty_low_percent: u8,
    /// Slots the policy leaves for orphans and uncommitted releases; `None`
    /// = [`default_reserve_slots`].
    pub reserve_slots: Option<u32>,
    /// Whether mapping changes are journaled (slots are reused only after a
    /// commit). The live engine: true; the simulator: false.
    pub journal: bool,
    /// Service times assumed before `adaptive` admission has measured any
    /// (unused by the fixed rules).
    pub priors: DevicePriors,
    /// Home is a drive-managed SMR disk: stage every write and destage by
    /// whole-band rewrites (`docs/engine/smr.md`); `None`: any other home.
    pub smr: Option<SmrStaging>,
}

impl CacheSettings {
    /// Defaults for everything but the sizes and the mode.
    pub fn new(volume_bytes: u64, block_bytes: u64, slots: u32, mode: CacheMode) -> CacheSettings {
        CacheSettings {
            volume_bytes,
            block_bytes,
            slots,
            mode,
            policy: CacheKind::S3fifo,
            admission: AdmissionKind::Always,
            sequential_cutoff_bytes: DEFAULT_SEQUENTIAL_CUTOFF_BYTES,
            dirty_high_percent: DEFAULT_DIRTY_HIGH_PERCENT,
            dirty_low_percent: DEFAULT_DIRTY_LOW_PERCENT,
            reserve_slots: None,
            journal: false,
            priors: DevicePriors::default(),
            smr: None,
        }
    }

    /// Checks the settings; the error names the setting and what is accepted.
    pub fn validate(&self) -> Result<(), String> {
        let block = self.block_bytes;
        if !block.is_power_of_two() || !(MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&block) {
            return Err(format!(
                "cache block {block} bytes: expected a power of two from 4KiB to 1MiB"
            ));
        }
        if self.volume_bytes == 0 {
            return Err("the cached volume has no bytes".to_string());
        }
        if self.slots < 2 {
            return Err(format!(
                "the cache has {} slots of {block} bytes: it needs at least 2 (a larger fast tier or a smaller block)",
                self.slots
            ));
        }
        if !(self.dirty_low_percent < self.dirty_high_percent && self.dirty_high_percent <= 100) {
            return Err(format!(
                "dirty watermarks low {}% and high {}%: expected 0 <= low < high <= 100",
                self.dirty_low_percent, self.dirty_high_percent
            ));
        }
        if self.reserve() >= self.slots {
            return Err(format!(
                "reserve of {} slots leaves nothing of the cache's {} slots",
                self.reserve(),
                self.slots
            ));
        }
        if let Some(smr) = &self.smr {
            smr.validate(block)?;
        }
        if u64::from(self.slots - self.reserve()) > MAX_CAPACITY_PAGES {
            return Err(format!(
                "{} slots is more than a cache policy holds",
                self.slots
            ));
        }
        Ok(())
    }

    pub fn reserve(&self) -> u32 {
        self.reserve_slots
            .unwrap_or_else(|| default_reserve_slots(self.slots))
    }

    /// Blocks of the volume (the last may be short).
    pub fn blocks(&self) -> u64 {
        self.volume_bytes.div_ceil(self.block_bytes)
    }

    /// The volume bytes of `block`: offset and length (the last block may be short).
    pub fn block_range(&self, block: BlockId) -> (u64, u64) {
        let start = block * self.block_bytes;
        (
            start,
            self.block_bytes
                .min(self.volume_bytes.saturating_sub(start)),
        )
    }
}

/// Slots kept outside the policy: 1/64 of the cache, at least 1, at most 4096.
pub fn default_reserve_slots(slots: u32) -> u32 {
    (slots / 64).clamp(1, 4096).min(slots.saturating_sub(1))
}

/// What the caller must do for one block of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub block: BlockId,
    pub io: BlockIo,
}

/// The IO for one block of a request. Every step but `ReadHome` must be
/// reported once its IO has finished or failed ([`BlockCache::finish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockIo {
    /// Read the asked bytes from the slot. `dirty`: home does not hold them
    /// (a failed slot read cannot fall back to home).
    ReadSlot { ticket: Ticket, dirty: bool },
    /// Read from home; nothing is cached.
    ReadHome,
    /// Read the whole block from home, answer the read, write the block into
    /// the slot, report.
    Fill { ticket: Ticket },
    /// Write the bytes into the slot only (writeback).
    WriteSlot { ticket: Ticket },
    /// A newly allocated block the write does not cover (writeback): read
    /// the block from home, merge the bytes, write it into the slot.
    WriteSlotMerged { ticket: Ticket },
    /// Write the bytes to home and the slot. `merge`: a newly allocated
    /// block the write does not cover; read it from home first and write
    /// the whole merged block into the slot.
    WriteBoth { ticket: Ticket, merge: bool },
    /// Write home only. Reported too ([`BlockCache::finish`]): while it is
    /// in flight the block is not filled (a fill could read home before the
    /// write lands and cache the old data).
    WriteHome,
    /// Do nothing for this block now: its SMR band is being rewritten and
    /// the write cannot stay in the cache (`docs/engine/smr.md`, rule 5).
    /// Plan the block's part of the request again once
    /// [`BlockCache::destage_io_done`] reports the band done. Not reported.
    Blocked,
}

impl BlockIo {
    pub fn ticket(&self) -> Option<Ticket> {
        match *self {
            BlockIo::ReadSlot { ticket, .. }
            | BlockIo::Fill { ticket }
            | BlockIo::WriteSlot { ticket }
            | BlockIo::WriteSlotMerged { ticket }
            | BlockIo::WriteBoth { ticket, .. } => Some(ticket),
            BlockIo::ReadHome | BlockIo::WriteHome | BlockIo::Blocked => None,
        }
    }
}

/// A pin on a slot for one IO; report it with [`BlockCache::done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub slot: SlotId,
    generation: u32,
    /// The IO puts a block into a loading slot (fill or allocating write).
    load: bool,
}

/// A dirty block to copy home: read the slot, write home, then
/// [`BlockCache::writeback_done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Writeback {
    pub block: BlockId,
    pub slot: SlotId,
    generation: u32,
    writes: u32,
}

/// A block to copy into the cache in the background (a segment
/// promotion, `adaptive` only): take the block's reader lock, read the
/// whole block from home, write it into `ticket.slot`, then
/// [`BlockCache::load_done`] (see "Loads" in the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    pub block: BlockId,
    pub ticket: Ticket,
}

/// A mapping change to journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Change {
    Mapped { block: BlockId, slot: SlotId },
    Unmapped { block: BlockId, slot: SlotId },
}

/// The changes since the last [`BlockCache::take_changes`]; hand it back
/// to [`BlockCache::committed`] once they are durable.
#[derive(Debug, Default)]
pub struct Commit {
    pub changes: Vec<Change>,
    released: Vec<SlotId>,
}

/// What a cache counted (blocks, not requests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheCounters {
    pub read_blocks: u64,
    pub read_hit_blocks: u64,
    pub write_blocks: u64,
    pub write_hit_blocks: u64,
    /// Misses that took a slot (fills and allocating writes).
    pub allocations: u64,
    /// Misses not admitted.
    pub rejected: u64,
    /// Misses that bypassed the cache as part of a sequential run.
    pub bypassed: u64,
    /// Misses that found no free slot.
    pub no_slot: u64,
    pub clean_evictions: u64,
    /// Victims that were dirty (written back before their slot is reused).
    pub dirty_evictions: u64,
    /// Writebacks that cleaned their block.
    pub writebacks: u64,
    /// Blocks dropped by discards and invalidations.
    pub invalidations: u64,
    /// Loads that failed or were overtaken (the slot went back).
    pub failed_loads: u64,
    /// Blocks copied in for segment promotions.
    pub promotion_loads: u64,
    /// SMR home: whole-band rewrites finished, and the dirty blocks they cleaned.
    pub band_rewrites: u64,
    pub band_rewrite_blocks: u64,
    /// SMR home: home-only write blocks planned (no slot was free); each
    /// reaches the drive's media cache.
    pub smr_home_writes: u64,
    /// SMR home: blocks planned `Blocked` (their band was being rewritten).
    pub blocked_blocks: u64,
}

/// Why a recovered cache cannot be rebuilt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreError {
    SlotBeyondCache {
        block: BlockId,
        slot: SlotId,
        slots: u32,
    },
    BlockBeyondVolume {
        block: BlockId,
        blocks: u64,
    },
    SlotTwice {
        slot: SlotId,
    },
    BlockTwice {
        block: BlockId,
    },
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreError::SlotBeyondCache { block, slot, slots } => write!(
                f,
                "block {block} is recorded in slot {slot}, but the cache has {slots} slots (the fast tier or the block size shrank)"
            ),
            RestoreError::BlockBeyondVolume { block, blocks } => write!(
                f,
                "block {block} is recorded, but the volume has {blocks} blocks (the volume or the block size changed)"
            ),
            RestoreError::SlotTwice { slot } => write!(f, "slot {slot} is recorded for two blocks"),
            RestoreError::BlockTwice { block } => write!(f, "block {block} is recorded in two slots"),
        }
    }
}

impl std::error::Error for RestoreError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    Loading,
    Valid,
    Released,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    block: BlockId,
    state: SlotState,
    /// Bumped whenever the slot changes hands or a load is overtaken: a
    /// ticket or writeback from before is stale.
    generation: u32,
    /// Bumped by every write that leaves home behind.
    writes: u32,
    pins: u32,
    dirty: bool,
    orphan: bool,
    writeback: bool,
}

impl Slot {
    const EMPTY: Slot = Slot {
        block: u64::MAX,
        state: SlotState::Free,
        generation: 0,
        writes: 0,
        pins: 0,
        dirty: false,
        orphan: false,
        writeback: false,
    };
}

/// A request's part in one promotion segment, gathered while its blocks
/// are planned.
#[derive(Clone, Copy, Debug, Default)]
struct SegmentHeat {
    segment: Option<u64>,
    home_bytes: u64,
    merges: u32,
    /// Blocks served by slots.
    hits: u64,
}

/// The block cache of one volume. See the module documentation for its rules.
pub struct BlockCache {
    settings: CacheSettings,
    policy: Box<dyn PageCache>,
    admission: Admission,
    sequential: SequentialDetector,
    map: BlockMap<SlotId>,
    slots: Vec<Slot>,
    /// Free slots, lowest last (popped first).
    free: Vec<SlotId>,
    /// Released since the last `take_changes` (journal only).
    released: Vec<SlotId>,
    /// Released and taken into a commit that has not come back.
    committing: usize,
    changes: Vec<Change>,
    /// Dirty blocks not being written back, not orphans.
    dirty_waiting: BTreeSet<BlockId>,
    /// Dirty orphans not being written back.
    orphans_waiting: VecDeque<BlockId>,
    /// Home-only writes in flight per block.
    home_writes: BlockMap<u32>,
    /// SMR home: the home halves of `WriteBoth` steps in flight per block
    /// (a band with any home write in flight is not rewritten).
    home_halves: BlockMap<u32>,
    /// Blocks of promoted segments still to copy (`adaptive`), in order.
    loads: VecDeque<BlockId>,
    dirty: u64,
    valid: u64,
    loading: u64,
    writeback_cursor: BlockId,
    /// SMR home: dirty blocks waiting per band, and the bands by that
    /// count (most first, then lowest band).
    band_dirty: FastMap<u64, u32>,
    band_queue: BTreeSet<(Reverse<u32>, u64)>,
    /// SMR home: the band being rewritten, and the last rewrite's id.
    rewrite: Option<band::Rewrite>,
    rewrite_ids: u64,
    flushing: bool,
    detaching: bool,
    counters: CacheCounters,
}

impl fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockCache")
            .field("settings", &self.settings)
            .field("valid", &self.valid)
            .field("dirty", &self.dirty)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl BlockCache {
    /// An empty cache. The settings must pass [`CacheSettings::validate`].
    pub fn new(settings: CacheSettings) -> Result<BlockCache, String> {
        settings.validate()?;
        let capacity = u64::from(settings.slots - settings.reserve());
        let slots = settings.slots;
        Ok(BlockCache {
            policy: build_cache(settings.policy, capacity),
            admission: Admission::new(&settings, capacity),
            sequential: SequentialDetector::new(settings.sequential_cutoff_bytes),
            map: BlockMap::default(),
            slots: vec![Slot::EMPTY; slots as usize],
            free: (0..slots).rev().collect(),
            released: Vec::new(),
            committing: 0,
            changes: Vec::new(),
            dirty_waiting: BTreeSet::new(),
            orphans_waiting: VecDeque::new(),
            home_writes: BlockMap::default(),
            home_halves: BlockMap::default(),
            loads: VecDeque::new(),
            dirty: 0,
            valid: 0,
            loading: 0,
            writeback_cursor: 0,
            band_dirty: FastMap::default(),
            band_queue: BTreeSet::new(),
            rewrite: None,
            rewrite_ids: 0,
            flushing: false,
            detaching: false,
            counters: CacheCounters::default(),
            settings,
        })
    }

    /// A cache rebuilt from recovered mappings `(block, slot, dirty)`, in
    /// the order the policy should see them (oldest first). Pass `dirty =
    /// true` for every entry after an unclean shutdown. Entries beyond the
    /// policy's capacity become orphans (written back, then released).
    pub fn restore(
        settings: CacheSettings,
        entries: impl IntoIterator<Item = (BlockId, SlotId, bool)>,
    ) -> Result<BlockCache, RestoreErrorOr> {
        let mut cache = BlockCache::new(settings).map_err(RestoreErrorOr::Settings)?;
        let blocks = cache.settings.blocks();
        for (block, slot, dirty) in entries {
            if slot >= cache.settings.slots {
                return Err(RestoreErrorOr::Restore(RestoreError::SlotBeyondCache {
                    block,
                    slot,
                    slots: cache.settings.slots,
                }));
            }
            if block >= blocks {
                return Err(RestoreErrorOr::Restore(RestoreError::BlockBeyondVolume {
                    block,
                    blocks,
                }));
            }
            if cache.slots[slot as usize].state != SlotState::Free {
                return Err(RestoreErrorOr::Restore(RestoreError::SlotTwice { slot }));
            }
            if cache.map.contains_key(&block) {
                return Err(RestoreErrorOr::Restore(RestoreError::BlockTwice { block }));
            }
            cache.map.insert(block, slot);
            let entry = &mut cache.slots[slot as usize];
            entry.block = block;
            entry.state = SlotState::Valid;
            cache.valid += 1;
            if dirty {
                entry.dirty = true;
                cache.dirty += 1;
            }
            let policy_full = cache.policy.len() >= cache.policy.capacity_pages();
            if policy_full {
                cache.slots[slot as usize].orphan = true;
                if dirty {
                    cache.orphans_waiting.push_back(block);
                }
            } else {
                let access = cache.policy.access(block, false);
                debug_assert!(access.evicted.is_none());
                if dirty {
                    cache.wait_dirty(block);
                }
            }
        }
        cache.free = (0..cache.settings.slots)
            .rev()
            .filter(|&slot| cache.slots[slot as usize].state == SlotState::Free)
            .collect();
        // Clean orphans leave at once.
        let clean_orphans: Vec<SlotId> = (0..cache.settings.slots)
            .filter(|&slot| {
                let entry = &cache.slots[slot as usize];
                entry.state == SlotState::Valid && entry.orphan && !entry.dirty
            })
            .collect();
        for slot in clean_orphans {
            cache.release(slot);
        }
        Ok(cache)
    }

    pub fn settings(&self) -> &CacheSettings {
        &self.settings
    }

    pub fn counters(&self) -> CacheCounters {
        self.counters
    }

    pub fn mode(&self) -> CacheMode {
        self.settings.mode
    }

    /// Blocks held (valid slots).
    pub fn occupancy_blocks(&self) -> u64 {
        self.valid
    }

    pub fn dirty_blocks(&self) -> u64 {
        self.dirty
    }

    /// Where `block` is cached, and whether it is dirty.
    pub fn lookup(&self, block: BlockId) -> Option<(SlotId, bool)> {
        let slot = *self.map.get(&block)?;
        let entry = &self.slots[slot as usize];
        (entry.state == SlotState::Valid).then_some((slot, entry.dirty))
    }

    /// Appends to `out` (in no particular order) the blocks of `blocks` the
    /// cache holds a slot for: valid, clean or dirty, or being loaded.
    /// Costs the smaller of the range's length and the mapped blocks.
    pub fn held_blocks(&self, blocks: std::ops::Range<BlockId>, out: &mut Vec<BlockId>) {
        if blocks.end.saturating_sub(blocks.start) <= self.map.len() as u64 {
            out.extend(blocks.filter(|block| self.map.contains_key(block)));
        } else {
            out.extend(
                self.map
                    .keys()
                    .copied()
                    .filter(|block| blocks.contains(block)),
            );
        }
    }

    /// Every valid mapping `(block, slot, dirty)`, by slot.
    pub fn mappings(&self) -> Vec<(BlockId, SlotId, bool)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.state == SlotState::Valid)
            .map(|(slot, entry)| (entry.block, slot as SlotId, entry.dirty))
            .collect()
    }

    /// Slots pinned by IO, loading, or released and not yet reusable.
    pub fn busy_slots(&self) -> u64 {
        self.slots
            .iter()
            .filter(|entry| entry.pins > 0 || entry.state == SlotState::Released)
            .count() as u64
    }

    /// Switches the write mode. Leaving writeback starts draining: dirty
    /// blocks are written back and no new ones are made.
    pub fn set_mode(&mut self, mode: CacheMode) {
        self.settings.mode = mode;
    }

    /// Starts detaching: no more allocations, every dirty block is written
    /// back. [`BlockCache::detached`] says when it is over.
    pub fn detach(&mut self) {
        self.detaching = true;
    }

    pub fn is_detaching(&self) -> bool {
        self.detaching
    }

    /// Detaching and nothing is dirty, loading or pinned: the caller may
    /// drop the cache and serve from home alone.
    pub fn detached(&self) -> bool {
        self.detaching
            && self.dirty == 0
            && self.loading == 0
            && self.slots.iter().all(|entry| entry.pins == 0)
    }

    fn draining(&self) -> bool {
        self.detaching || self.settings.mode != CacheMode::Writeback
    }

    fn may_allocate(&self, is_write: bool) -> bool {
        if self.detaching {
            return false;
        }
        !is_write || self.settings.mode != CacheMode::Writearound
    }

    /// Adaptive admission's shadows see every request (a no-op for the fixed rules).
    fn observe_request(
        &mut self,
        offset_bytes: u64,
        length_bytes: u64,
        is_write: bool,
        sequential: bool,
    ) {
        let Admission::Adaptive(adaptive) = &mut self.admission else {
            return;
        };
        if self.detaching {
            return;
        }
        let mode = self.settings.mode;
        if !adaptive.observe_request(offset_bytes, length_bytes, is_write, sequential, mode) {
            return;
        }
        // An epoch ended: which segments to copy in now (the last epoch's
        // plan, if not done, is dropped: it rests on older heat).
        let segment_blocks = adaptive.segment_blocks();
        let blocks = self.settings.blocks();
        let map = &self.map;
        let cached = |segment: u64| {
            let first = segment * segment_blocks;
            (first..(first + segment_blocks).min(blocks))
                .filter(|block| map.contains_key(block))
                .count() as u64
                + (first + segment_blocks).saturating_sub(blocks)
        };
        let room = self
            .policy
            .capacity_pages()
            .saturating_sub(self.policy.len());
        let chosen = adaptive.plan_promotions(
            u64::from(self.settings.slots),
            room,
            self.valid + self.loading,
            &cached,
        );
        self.loads.clear();
        for segment in chosen {
            self.promote(segment * segment_blocks, segment_blocks);
        }
    }

    /// Tells promotion about a request's part in one segment (`adaptive` only).
    fn segment_heat(&mut self, heat: &SegmentHeat, is_write: bool) {
        if let (Admission::Adaptive(adaptive), Some(segment)) = (&mut self.admission, heat.segment)
        {
            adaptive.segment_access(segment, is_write, heat.home_bytes, heat.merges);
            if heat.hits > 0 {
                adaptive.slot_hits(heat.hits);
            }
        }
    }

    /// Blocks per promoted segment, `None` without adaptive admission.
    fn segment_blocks(&self) -> Option<u64> {
        match &self.admission {
            Admission::Adaptive(adaptive) => Some(adaptive.segment_blocks()),
            _ => None,
        }
    }

    /// The next block of a promoted segment to copy in, if one is queued
    /// and a slot is free: its slot is loading and pinned until
    /// [`BlockCache::load_done`]. Queued blocks cached meanwhile, or with a
    /// home-only write in flight, are skipped.
    pub fn next_load(&mut self) -> Option<Load> {
        if self.detaching {
            self.loads.clear();
            return None;
        }
        while let Some(block) = self.loads.pop_front() {
            if self.map.contains_key(&block) || self.home_writes.contains_key(&block) {
                continue;
            }
            let Some(ticket) = self.take_slot(block, false) else {
                // No free slot now (orphans wait for writeback, releases
                // for a commit): try again later.
                self.loads.push_front(block);
                return None;
            };
            return Some(Load { block, ticket });
        }
        None
    }

    /// Queues blocks `first .. first + count` to copy in (what `adaptive`
    /// does for the segments it promotes; tests drive loads with it).
    /// Blocks already cached are skipped when their turn comes.
    pub fn promote(&mut self, first: BlockId, count: u64) {
        let end = (first + count).min(self.settings.blocks());
        self.loads.extend(first..end);
    }

    /// Reports a load: `ok` = the slot holds the block as home had it.
    pub fn load_done(&mut self, load: Load, ok: bool) {
        if ok {
            self.counters.promotion_loads += 1;
            if let Admission::Adaptive(adaptive) = &mut self.admission {
                adaptive.promoted_loaded(1);
            }
        }
        self.done(load.ticket, ok);
    }

    /// Reports a completed device IO — the home device's or the fast
    /// tier's, user or background — with its service time (the device
    /// working on it) and when it completed (the caller's clock or virtual
    /// time). Adaptive admission learns costs and load from these; the
    /// fixed rules ignore them.
    pub fn observe_io(
        &mut self,
        role: DeviceRole,
        is_write: bool,
        bytes: u64,
        service_ns: u64,
        done_ns: u64,
    ) {
        if let Admission::Adaptive(adaptive) = &mut self.admission {
            adaptive.observe_io(role, is_write, bytes, service_ns, done_ns);
        }
    }

    /// Reports both devices' counters over one interval, instead of each
    /// IO ([`BlockCache::observe_io`]); the fixed rules ignore them.
    pub fn observe_intervals(&mut self, home: &DeviceInterval, fast: &DeviceInterval) {
        if let Admission::Adaptive(adaptive) = &mut self.admission {
            adaptive.observe_interval(DeviceRole::Home, home, true);
            adaptive.observe_interval(DeviceRole::Fast, fast, false);
        }
    }

    /// Why adaptive admission admits what it does; `None` for a fixed rule.
    pub fn adaptive_status(&self) -> Option<&AdaptiveStatus> {
        match &self.admission {
            Admission::Adaptive(adaptive) => Some(adaptive.status()),
            _ => None,
        }
    }

    /// The blocks `offset_bytes .. offset_bytes + length_bytes` touches.
    pub fn blocks_of(&self, offset_bytes: u64, length_bytes: u64) -> std::ops::Range<BlockId> {
        if length_bytes == 0 {
            return 0..0;
        }
        let block = self.settings.block_bytes;
        offset_bytes / block..(offset_bytes + length_bytes - 1) / block + 1
    }

    /// Plans a read: one step per block, appended to `steps`.
    pub fn read(&mut self, offset_bytes: u64, length_bytes: u64, steps: &mut Vec<Step>) {
        let sequential = self.sequential.observe(offset_bytes, length_bytes);
        self.observe_request(offset_bytes, length_bytes, false, sequential);
        let segment_blocks = self.segment_blocks();
        let mut heat = SegmentHeat::default();
        for block in self.blocks_of(offset_bytes, length_bytes) {
            self.counters.read_blocks += 1;
            let mapped = self.map.get(&block).copied();
            let io = match mapped {
                Some(slot) if self.slots[slot as usize].state == SlotState::Valid => {
                    self.counters.read_hit_blocks += 1;
                    if let Admission::Adaptive(adaptive) = &mut self.admission {
                        adaptive.read_hit(block);
                    }
                    self.touch(slot);
                    let dirty = self.slots[slot as usize].dirty;
                    BlockIo::ReadSlot {
                        ticket: self.pin(slot),
                        dirty,
                    }
                }
                // Loading: a fill is in flight.
                Some(_) => BlockIo::ReadHome,
                None => match self.allocate(block, false, sequential) {
                    Some(ticket) => BlockIo::Fill { ticket },
                    None => BlockIo::ReadHome,
                },
            };
            if let Some(per) = segment_blocks {
                self.add_heat(&mut heat, block / per, false);
                match io {
                    BlockIo::ReadSlot { .. } => heat.hits += 1,
                    _ => heat.home_bytes += self.part(block, offset_bytes, length_bytes),
                }
            }
            steps.push(Step { block, io });
        }
        self.segment_heat(&heat, false);
    }

    /// Bytes of `offset..offset+length` inside `block`.
    fn part(&self, block: BlockId, offset_bytes: u64, length_bytes: u64) -> u64 {
        let (start, length) = self.settings.block_range(block);
        (offset_bytes + length_bytes).min(start + length) - offset_bytes.max(start)
    }

    /// Moves `heat` on to `segment`, reporting the segment it held.
    fn add_heat(&mut self, heat: &mut SegmentHeat, segment: u64, is_write: bool) {
        if heat.segment != Some(segment) {
            self.segment_heat(heat, is_write);
            *heat = SegmentHeat {
                segment: Some(segment),
                ..SegmentHeat::default()
            };
        }
    }

    /// Plans a write: one step per block, appended to `steps`.
    pub fn write(&mut self, offset_bytes: u64, length_bytes: u64, steps: &mut Vec<Step>) {
        let sequential = self.sequential.observe(offset_bytes, length_bytes);
        self.observe_request(offset_bytes, length_bytes, true, sequential);
        let end = offset_bytes + length_bytes;
        let segment_blocks = self.segment_blocks();
        let mut heat = SegmentHeat::default();
        for block in self.blocks_of(offset_bytes, length_bytes) {
            self.counters.write_blocks += 1;
            let hits_before = self.counters.write_hit_blocks;
            let (block_start, block_len) = self.settings.block_range(block);
            let covers = offset_bytes <= block_start && end >= block_start + block_len;
            let io = if self.in_rewrite(block) {
                self.write_in_rewrite(block, covers)
            } else if let Some(slot) = self.valid_slot(block) {
                self.counters.write_hit_blocks += 1;
                self.touch(slot);
                self.write_hit(slot)
            } else if let Some(&slot) = self.map.get(&block) {
                // Loading (a fill in flight): the fill would now put stale
                // data in the slot. Overtake it; this write goes home, or
                // with an SMR home into a slot of its own.
                self.overtake(slot);
                let staged = if self.stages_every_write() {
                    self.allocate_staged(block)
                } else {
                    None
                };
                match staged {
                    Some(ticket) if covers => BlockIo::WriteSlot { ticket },
                    Some(ticket) => BlockIo::WriteSlotMerged { ticket },
                    None => self.home_write(block),
                }
            } else if self.stages_every_write() {
                // SMR home: a home-only write dirties a band the drive
                // cleans later, under load; stage it whatever admission
                // and the sequential cutoff say.
                match self.allocate_staged(block) {
                    Some(ticket) if covers => BlockIo::WriteSlot { ticket },
                    Some(ticket) => BlockIo::WriteSlotMerged { ticket },
                    None => self.home_write(block),
                }
            } else {
                match self.allocate(block, true, sequential) {
                    Some(ticket) => match self.settings.mode {
                        CacheMode::Writeback => {
                            if covers {
                                BlockIo::WriteSlot { ticket }
                            } else {
                                BlockIo::WriteSlotMerged { ticket }
                            }
                        }
                        CacheMode::Writethrough | CacheMode::Writearound => BlockIo::WriteBoth {
                            ticket,
                            merge: !covers,
                        },
                    },
                    None => self.home_write(block),
                }
            };
            if self.settings.smr.is_some()
                && matches!(io, BlockIo::WriteHome | BlockIo::WriteBoth { .. })
            {
                self.counters.smr_home_writes += 1;
            }
            self.note_home_half(block, &io);
            if let Some(per) = segment_blocks {
                self.add_heat(&mut heat, block / per, true);
                match io {
                    BlockIo::WriteHome | BlockIo::WriteBoth { merge: false, .. } => {
                        heat.home_bytes += self.part(block, offset_bytes, length_bytes);
                    }
                    BlockIo::WriteBoth { merge: true, .. } => {
                        heat.home_bytes += self.part(block, offset_bytes, length_bytes);
                        heat.merges += 1;
                    }
                    BlockIo::WriteSlotMerged { .. } => heat.merges += 1,
                    _ => {}
                }
                if self.counters.write_hit_blocks > hits_before {
                    heat.hits += 1;
                }
            }
            steps.push(Step { block, io });
        }
        self.segment_heat(&heat, true);
    }

    fn write_hit(&mut self, slot: SlotId) -> BlockIo {
        let draining = self.draining();
        let entry = &mut self.slots[slot as usize];
        if !draining {
            entry.writes = entry.writes.wrapping_add(1);
            if !entry.dirty {
                entry.dirty = true;
                self.dirty += 1;
                let block = entry.block;
                if entry.orphan {
                    self.orphans_waiting.push_back(block);
                } else if !entry.writeback {
                    self.wait_dirty(block);
                }
            }
            return BlockIo::WriteSlot {
                ticket: self.pin(slot),
            };
        }
        // Home gets the write too. A writeback in flight read the slot
        // before this write: it must not clean the block.
        if entry.writeback {
            entry.writes = entry.writes.wrapping_add(1);
        }
        BlockIo::WriteBoth {
            ticket: self.pin(slot),
            merge: false,
        }
    }

    /// Plans a discard (or a write of zeroes): whole clean blocks leave the
    /// cache and home is discarded; a dirty, busy or partly covered block
    /// keeps its slot and the caller applies the discard to home and the
    /// slot alike (`WriteBoth`).
    pub fn discard(&mut self, offset_bytes: u64, length_bytes: u64, steps: &mut Vec<Step>) {
        let end = offset_bytes + length_bytes;
        for block in self.blocks_of(offset_bytes, length_bytes) {
            let (block_start, block_len) = self.settings.block_range(block);
            let covers = offset_bytes <= block_start && end >= block_start + block_len;
            if self.in_rewrite(block) {
                // Home must not change inside a band being rewritten.
                let io = self.block_on_rewrite();
                steps.push(Step { block, io });
                continue;
            }
            let Some(&slot) = self.map.get(&block) else {
                let io = self.home_write(block);
                steps.push(Step { block, io });
                continue;
            };
            let entry = self.slots[slot as usize];
            if entry.state == SlotState::Loading {
                self.overtake(slot);
                let io = self.home_write(block);
                steps.push(Step { block, io });
            } else if covers && entry.pins == 0 && !entry.writeback && !entry.dirty {
                // Clean: home has the block, so dropping the mapping before
                // the discard reaches home is safe. A dirty block keeps its
                // slot (zeroed like home, still dirty): were its unmapping
                // committed before the discard landed, a crash would bring
                // back home's older data in place of a flushed write.
                self.counters.invalidations += 1;
                self.release(slot);
                let io = self.home_write(block);
                steps.push(Step { block, io });
            } else {
                // Partly covered, or busy: keep the block, apply to both. A
                // dirty block stays dirty (the rest of it is still only here).
                let entry = &mut self.slots[slot as usize];
                if entry.writeback {
                    entry.writes = entry.writes.wrapping_add(1);
                }
                let io = BlockIo::WriteBoth {
                    ticket: self.pin(slot),
                    merge: false,
                };
                self.note_home_half(block, &io);
                steps.push(Step { block, io });
            }
        }
    }

    /// Reports any step once its IO finished (`ok = false`: failed). The one
    /// call a caller needs; [`BlockCache::done`] is the part for tickets.
    pub fn finish(&mut self, step: &Step, ok: bool) {
        match step.io {
            BlockIo::ReadHome | BlockIo::Blocked => {}
            BlockIo::WriteHome => release_one(
                &mut self.home_writes,
                step.block,
                "a home write reported twice",
            ),
            io => {
                if matches!(io, BlockIo::WriteBoth { .. }) && self.settings.smr.is_some() {
                    release_one(
                        &mut self.home_halves,
                        step.block,
                        "a write to home and slot reported twice",
                    );
                }
                self.done(io.ticket().expect("every other step has a ticket"), ok)
            }
        }
    }

    /// SMR home: a `WriteBoth` step's home half is in flight.
    fn note_home_half(&mut self, block: BlockId, io: &BlockIo) {
        if self.settings.smr.is_some() && matches!(io, BlockIo::WriteBoth { .. }) {
            *self.home_halves.entry_or_default(block) += 1;
        }
    }

    /// Home-only writes planned and not yet finished.
    fn home_write(&mut self, block: BlockId) -> BlockIo {
        *self.home_writes.entry_or_default(block) += 1;
        BlockIo::WriteHome
    }

    /// Reports a step's IO. `ok = false`: it failed (a load's slot goes
    /// back; a failed slot write leaves the block as it was planned).
    /// A `WriteBoth` step is reported with [`BlockCache::finish`] (an SMR
    /// home counts its home half).
    pub fn done(&mut self, ticket: Ticket, ok: bool) {
        let slot = ticket.slot;
        let entry = &mut self.slots[slot as usize];
        debug_assert!(entry.pins > 0, "ticket for an unpinned slot {slot}");
        entry.pins -= 1;
        if ticket.load {
            self.loading -= 1;
            let current =
                entry.generation == ticket.generation && entry.state == SlotState::Loading;
            if current && ok {
                entry.state = SlotState::Valid;
                self.valid += 1;
                let block = entry.block;
                let dirty = entry.dirty;
                if self.settings.journal {
                    self.changes.push(Change::Mapped { block, slot });
                }
                if dirty {
                    self.dirty += 1;
                    if entry.orphan {
                        self.orphans_waiting.push_back(block);
                    } else {
                        self.wait_dirty(block);
                    }
                }
            } else {
                self.counters.failed_loads += 1;
                if current {
                    // Failed: the block never became valid.
                    let block = entry.block;
                    if !entry.orphan {
                        self.policy.remove(block);
                    }
                    self.map.remove(&block);
                    *entry = Slot {
                        generation: entry.generation.wrapping_add(1),
                        ..Slot::EMPTY
                    };
                    self.free.push(slot);
                } else if entry.pins == 0 && entry.state == SlotState::Loading {
                    // Overtaken: the slot was unmapped already; free it now.
                    *entry = Slot {
                        generation: entry.generation,
                        ..Slot::EMPTY
                    };
                    self.free.push(slot);
                }
            }
        }
        self.settle(slot);
    }

    /// The next dirty block to copy home, if writeback is wanted now.
    /// `idle`: the caller sees no user IO waiting (write back eagerly).
    /// With an SMR home it hands out nothing: destage goes by whole bands
    /// ([`BlockCache::next_destage_io`]).
    pub fn next_writeback(&mut self, idle: bool) -> Option<Writeback> {
        if self.settings.smr.is_some() {
            return None;
        }
        let block = if let Some(block) = self.orphans_waiting.pop_front() {
            block
        } else {
            if !self.writeback_wanted(idle) {
                return None;
            }
            let block = match self.dirty_waiting.range(self.writeback_cursor..).next() {
                Some(&block) => block,
                None => *self.dirty_waiting.iter().next()?,
            };
            self.unwait_dirty(block);
            self.writeback_cursor = block + 1;
            block
        };
        let slot = self.map[&block];
        let entry = &mut self.slots[slot as usize];
        debug_assert!(entry.dirty && entry.state == SlotState::Valid && !entry.writeback);
        entry.writeback = true;
        entry.pins += 1;
        Some(Writeback {
            block,
            slot,
            generation: entry.generation,
            writes: entry.writes,
        })
    }

    fn writeback_wanted(&mut self, idle: bool) -> bool {
        if self.dirty_waiting.is_empty() {
            self.flushing = false;
            return false;
        }
        if self.draining() || idle {
            return true;
        }
        self.above_watermark()
    }

    /// The dirty share's hysteresis: true from the high watermark down to
    /// the low one.
    fn above_watermark(&mut self) -> bool {
        let slots = u64::from(self.settings.slots);
        let percent = self.dirty * 100 / slots;
        if percent >= u64::from(self.settings.dirty_high_percent) {
            self.flushing = true;
        } else if percent <= u64::from(self.settings.dirty_low_percent) {
            self.flushing = false;
        }
        self.flushing
    }

    /// The SMR staging settings, `None` for any other home.
    pub fn smr(&self) -> Option<SmrStaging> {
        self.settings.smr
    }

    /// The band being rewritten: its volume bytes (offset, length).
    pub fn rewriting_band(&self) -> Option<(u64, u64)> {
        self.rewrite
            .as_ref()
            .map(|rewrite| (rewrite.offset_bytes, rewrite.length_bytes))
    }

    /// Dirty blocks waiting for a destage per band, most first: `(band, blocks)`.
    pub fn dirty_bands(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.band_queue
            .iter()
            .map(|&(Reverse(count), band)| (band, count))
    }

    /// The next IO of the SMR destage (`docs/engine/smr.md`): starts a
    /// band rewrite when one is wanted and none is running (orphans' bands
    /// first; else above the high watermark, while draining, or when
    /// `user_waiting` is false: home is idle), then hands out its IOs as
    /// the pacing allows. `user_waiting`: user IO is outstanding at home.
    /// `None` without an SMR home, or when nothing may start now.
    pub fn next_destage_io(&mut self, user_waiting: bool) -> Option<DestageIo> {
        let smr = self.settings.smr?;
        if self.rewrite.is_none() {
            self.start_rewrite(&smr, !user_waiting)?;
        }
        let urgent = !self.orphans_waiting.is_empty() || self.draining() || self.above_watermark();
        let block_bytes = self.settings.block_bytes;
        let rewrite = self.rewrite.as_mut()?;
        let yield_home = user_waiting && rewrite.background && !urgent;
        rewrite.next_io(yield_home, &smr, block_bytes)
    }

    /// Reports a destage IO (`ok = false`: it failed; the rewrite stops and
    /// cleans nothing). Returns the band once its rewrite is over: plan
    /// the requests blocked on it again.
    pub fn destage_io_done(&mut self, io: DestageIo, ok: bool) -> Option<BandDone> {
        let rewrite = self.rewrite.as_mut()?;
        if !rewrite.owns(&io) {
            return None;
        }
        rewrite.io_done(&io, ok);
        if !rewrite.finished() {
            return None;
        }
        let rewrite = self.rewrite.take()?;
        let ok = !rewrite.failed;
        for taken in &rewrite.blocks {
            let entry = &mut self.slots[taken.slot as usize];
            entry.pins -= 1;
            if entry.generation == taken.generation {
                entry.writeback = false;
                if ok && entry.writes == taken.writes && entry.dirty {
                    entry.dirty = false;
                    self.dirty -= 1;
                    self.counters.writebacks += 1;
                    self.counters.band_rewrite_blocks += 1;
                } else if entry.dirty && entry.state == SlotState::Valid {
                    let block = entry.block;
                    if entry.orphan {
                        self.orphans_waiting.push_back(block);
                    } else {
                        self.wait_dirty(block);
                    }
                }
            }
            self.settle(taken.slot);
        }
        if ok {
            self.counters.band_rewrites += 1;
        }
        Some(BandDone {
            band: rewrite.band,
            offset_bytes: rewrite.offset_bytes,
            length_bytes: rewrite.length_bytes,
            ok,
        })
    }

    /// Picks the band to rewrite and takes its dirty blocks (pinned, in
    /// writeback). `idle`: home has no user IO.
    fn start_rewrite(&mut self, smr: &SmrStaging, idle: bool) -> Option<()> {
        let block_bytes = self.settings.block_bytes;
        let (band, background) = if let Some(&orphan) = self.orphans_waiting.front() {
            let band = smr.band_of(orphan * block_bytes);
            if self.home_write_in_band(smr, band) {
                return None;
            }
            (band, false)
        } else {
            if self.dirty_waiting.is_empty() {
                self.flushing = false;
                return None;
            }
            let urgent = self.draining() || self.above_watermark();
            if !urgent && !idle {
                return None;
            }
            // Densest band first: every rewrite costs a band read and a
            // band write, so it frees the most of the stage per second of
            // home's time. Bands with a home write in flight wait.
            let band = self
                .band_queue
                .iter()
                .take(64)
                .map(|&(_, band)| band)
                .find(|&band| !self.home_write_in_band(smr, band))?;
            (band, !urgent)
        };
        let (offset_bytes, length_bytes) = smr.band_range(band, self.settings.volume_bytes);
        let first = offset_bytes / block_bytes;
        let end = (offset_bytes + length_bytes).div_ceil(block_bytes);
        // A block with IO in flight on its slot is left out (it stays
        // dirty; the rewrite writes home's copy of it back as it is): a
        // write planned before the take could land after the slot is read,
        // and the block would be cleaned with the older data at home.
        let (map, slots) = (&self.map, &self.slots);
        let idle = |block: &BlockId| slots[map[block] as usize].pins == 0;
        let mut blocks: Vec<BlockId> = self
            .dirty_waiting
            .range(first..end)
            .copied()
            .filter(idle)
            .collect();
        self.orphans_waiting.retain(|block| {
            let take = (first..end).contains(block) && idle(block);
            if take {
                blocks.push(*block);
            }
            !take
        });
        for &block in &blocks {
            self.unwait_dirty(block);
        }
        blocks.sort_unstable();
        let taken = blocks
            .iter()
            .map(|&block| {
                let slot = self.map[&block];
                let entry = &mut self.slots[slot as usize];
                debug_assert!(entry.dirty && entry.state == SlotState::Valid && !entry.writeback);
                entry.writeback = true;
                entry.pins += 1;
                band::Taken {
                    block,
                    slot,
                    generation: entry.generation,
                    writes: entry.writes,
                }
            })
            .collect();
        self.rewrite_ids += 1;
        self.rewrite = Some(band::Rewrite::new(
            self.rewrite_ids,
            band,
            (offset_bytes, length_bytes),
            taken,
            block_bytes,
            smr.chunk_bytes,
            background,
        ));
        Some(())
    }

    /// A home-only write of a block in `band` is in flight.
    fn home_write_in_band(&self, smr: &SmrStaging, band: u64) -> bool {
        let block_bytes = self.settings.block_bytes;
        self.home_writes
            .keys()
            .chain(self.home_halves.keys())
            .any(|&block| smr.band_of(block * block_bytes) == band)
    }

    /// `block` lies in the band being rewritten.
    fn in_rewrite(&self, block: BlockId) -> bool {
        self.rewrite
            .as_ref()
            .is_some_and(|rewrite| rewrite.contains_block(block, self.settings.block_bytes))
    }

    /// SMR home in writeback and not detaching: every write is staged.
    fn stages_every_write(&self) -> bool {
        self.settings.smr.is_some() && !self.draining()
    }

    /// A slot for a write miss with an SMR home: no admission, no
    /// sequential cutoff (only a slot being free and no home write of the
    /// block in flight).
    fn allocate_staged(&mut self, block: BlockId) -> Option<Ticket> {
        if self.home_writes.contains_key(&block) {
            return None;
        }
        self.take_slot_counted(block, true)
    }

    /// [`BlockCache::take_slot`], counted as an allocation or a miss that
    /// found no slot.
    fn take_slot_counted(&mut self, block: BlockId, is_write: bool) -> Option<Ticket> {
        let ticket = self.take_slot(block, is_write);
        if ticket.is_some() {
            self.counters.allocations += 1;
        } else {
            self.counters.no_slot += 1;
        }
        ticket
    }

    /// A write to `block` while its band is being rewritten: home must not
    /// change until the rewrite ends (it would overwrite the write with
    /// the copy it read before). The write stays in the slot, or waits.
    fn write_in_rewrite(&mut self, block: BlockId, covers: bool) -> BlockIo {
        if !self.draining() {
            if let Some(slot) = self.valid_slot(block) {
                self.counters.write_hit_blocks += 1;
                self.touch(slot);
                return self.write_hit(slot);
            }
        }
        if let Some(&slot) = self.map.get(&block) {
            if self.slots[slot as usize].state == SlotState::Loading {
                // A fill in flight would cache what this write replaces.
                self.overtake(slot);
            }
        }
        if !self.draining() && !self.map.contains_key(&block) {
            match self.allocate_staged(block) {
                Some(ticket) if covers => return BlockIo::WriteSlot { ticket },
                Some(ticket) => return BlockIo::WriteSlotMerged { ticket },
                None => {}
            }
        }
        self.block_on_rewrite()
    }

    /// A request waits for the band being rewritten: the rewrite no longer
    /// yields to user IO (the user is waiting for it).
    fn block_on_rewrite(&mut self) -> BlockIo {
        self.counters.blocked_blocks += 1;
        if let Some(rewrite) = self.rewrite.as_mut() {
            rewrite.background = false;
        }
        BlockIo::Blocked
    }

    /// `block` is dirty, valid and waits for a writeback (SMR: counted in its band).
    fn wait_dirty(&mut self, block: BlockId) {
        if self.dirty_waiting.insert(block) {
            self.count_band(block, true);
        }
    }

    /// `block` no longer waits (taken, evicted, released).
    fn unwait_dirty(&mut self, block: BlockId) {
        if self.dirty_waiting.remove(&block) {
            self.count_band(block, false);
        }
    }

    fn count_band(&mut self, block: BlockId, add: bool) {
        let Some(smr) = self.settings.smr else {
            return;
        };
        let band = smr.band_of(block * self.settings.block_bytes);
        let old = self.band_dirty.get(&band).copied().unwrap_or(0);
        let new = if add { old + 1 } else { old - 1 };
        if old > 0 {
            self.band_queue.remove(&(Reverse(old), band));
        }
        if new > 0 {
            self.band_dirty.insert(band, new);
            self.band_queue.insert((Reverse(new), band));
        } else {
            self.band_dirty.remove(&band);
        }
    }

    /// Reports a writeback: `ok` = home holds the slot's data as read.
    pub fn writeback_done(&mut self, writeback: Writeback, ok: bool) {
        let slot = writeback.slot;
        let entry = &mut self.slots[slot as usize];
        entry.pins -= 1;
        let current = entry.generation == writeback.generation;
        if current {
            entry.writeback = false;
            if ok && entry.writes == writeback.writes && entry.dirty {
                entry.dirty = false;
                self.dirty -= 1;
                self.counters.writebacks += 1;
            } else if entry.dirty && entry.state == SlotState::Valid {
                let block = entry.block;
                if entry.orphan {
                    self.orphans_waiting.push_back(block);
                } else {
                    self.wait_dirty(block);
                }
            }
        }
        self.settle(slot);
    }

    /// The mapping changes since the last call, and the released slots they
    /// free once durable.
    pub fn take_changes(&mut self) -> Commit {
        self.committing += self.released.len();
        Commit {
            changes: std::mem::take(&mut self.changes),
            released: std::mem::take(&mut self.released),
        }
    }

    /// Whether there are changes not yet taken.
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty() || !self.released.is_empty()
    }

    /// The changes of `commit` are durable: its released slots are free.
    pub fn committed(&mut self, commit: Commit) {
        self.committing -= commit.released.len();
        for slot in commit.released {
            let entry = &mut self.slots[slot as usize];
            debug_assert_eq!(entry.state, SlotState::Released);
            entry.state = SlotState::Free;
            self.free.push(slot);
        }
    }

    /// Free slots now (without waiting for a commit).
    pub fn free_slots(&self) -> u64 {
        self.free.len() as u64
    }

    /// Released slots whose change is not yet taken: the slots the next
    /// commit would free.
    pub fn released_slots(&self) -> u64 {
        self.released.len() as u64
    }

    fn valid_slot(&self, block: BlockId) -> Option<SlotId> {
        let slot = *self.map.get(&block)?;
        (self.slots[slot as usize].state == SlotState::Valid).then_some(slot)
    }

    /// A hit: the policy sees it (orphans are no longer the policy's).
    fn touch(&mut self, slot: SlotId) {
        let entry = &self.slots[slot as usize];
        if !entry.orphan {
            let access = self.policy.access(entry.block, false);
            debug_assert!(access.hit && access.evicted.is_none());
        }
    }

    fn pin(&mut self, slot: SlotId) -> Ticket {
        let entry = &mut self.slots[slot as usize];
        entry.pins += 1;
        Ticket {
            slot,
            generation: entry.generation,
            load: false,
        }
    }

    /// A slot for a missed `block`, if the mode, the sequential detector,
    /// admission and the free slots allow. The slot is loading and pinned.
    fn allocate(&mut self, block: BlockId, is_write: bool, sequential: bool) -> Option<Ticket> {
        if !self.may_allocate(is_write) {
            return None;
        }
        if sequential {
            self.counters.bypassed += 1;
            return None;
        }
        if self.home_writes.contains_key(&block) {
            // A home-only write is in flight: what home holds is about to change.
            return None;
        }
        if !self.admission.admit(block) {
            self.counters.rejected += 1;
            return None;
        }
        self.take_slot_counted(block, is_write)
    }

    /// A loading, pinned slot for `block` (not cached), evicting as the
    /// policy says; `None` when no slot is free.
    fn take_slot(&mut self, block: BlockId, is_write: bool) -> Option<Ticket> {
        let access = self.policy.access(block, false);
        debug_assert!(!access.hit, "a missed block {block} was in the policy");
        if let Some(victim) = access.evicted {
            self.evict(victim.page);
        }
        let Some(slot) = self.free.pop() else {
            self.policy.remove(block);
            self.evict_for_slots();
            return None;
        };
        let dirty = is_write && self.settings.mode == CacheMode::Writeback;
        let entry = &mut self.slots[slot as usize];
        *entry = Slot {
            block,
            state: SlotState::Loading,
            generation: entry.generation.wrapping_add(1),
            pins: 1,
            dirty,
            ..Slot::EMPTY
        };
        self.loading += 1;
        self.map.insert(block, slot);
        Some(Ticket {
            slot,
            generation: entry.generation,
            load: true,
        })
    }

    /// A miss found no free slot (released slots wait for a commit, orphans
    /// for their writeback): the policy pushes out its next victim anyway,
    /// so slots keep coming back under sustained misses. Without this the
    /// missed block's removal leaves the policy one short of full, the next
    /// miss evicts nothing, and the cache's contents freeze. At most
    /// `reserve` more blocks leave than the policy's capacity allows for.
    fn evict_for_slots(&mut self) {
        let reserve = u64::from(self.settings.reserve());
        if self.policy.len() + reserve <= self.policy.capacity_pages() {
            return;
        }
        if let Some(victim) = self.policy.evict() {
            self.evict(victim.page);
        }
    }

    /// The policy pushed `block` out.
    fn evict(&mut self, block: BlockId) {
        let slot = self.map[&block];
        let entry = &mut self.slots[slot as usize];
        entry.orphan = true;
        if entry.state == SlotState::Loading {
            if entry.dirty {
                // A writeback write still landing: its data will exist only
                // in the slot. It lands as a dirty orphan (written back,
                // then released).
                self.counters.dirty_evictions += 1;
            } else {
                // A fill (home has the data): let it finish and leave.
                self.counters.clean_evictions += 1;
                self.overtake(slot);
            }
            return;
        }
        if entry.dirty {
            self.counters.dirty_evictions += 1;
            if !entry.writeback {
                self.unwait_dirty(block);
                self.orphans_waiting.push_back(block);
            }
        } else {
            self.counters.clean_evictions += 1;
        }
        self.settle(slot);
    }

    /// A loading slot whose block must not become valid: unmapped now, the
    /// slot is freed when its load reports.
    fn overtake(&mut self, slot: SlotId) {
        let entry = &mut self.slots[slot as usize];
        debug_assert_eq!(entry.state, SlotState::Loading);
        let block = entry.block;
        if !entry.orphan {
            self.policy.remove(block);
        }
        self.map.remove(&block);
        entry.generation = entry.generation.wrapping_add(1);
        entry.block = u64::MAX;
        entry.orphan = false;
        entry.dirty = false;
    }

    /// Releases an orphan that is clean and unpinned.
    fn settle(&mut self, slot: SlotId) {
        let entry = &self.slots[slot as usize];
        if entry.state == SlotState::Valid && entry.orphan && !entry.dirty && entry.pins == 0 {
            self.release(slot);
        }
    }

    /// `slot`'s valid block leaves the cache.
    fn release(&mut self, slot: SlotId) {
        let entry = self.slots[slot as usize];
        debug_assert_eq!(entry.state, SlotState::Valid);
        let block = entry.block;
        if !entry.orphan {
            self.policy.remove(block);
        }
        if entry.dirty {
            self.dirty -= 1;
            self.unwait_dirty(block);
            self.orphans_waiting.retain(|&waiting| waiting != block);
        }
        self.map.remove(&block);
        self.valid -= 1;
        let entry = &mut self.slots[slot as usize];
        *entry = Slot {
            generation: entry.generation.wrapping_add(1),
            ..Slot::EMPTY
        };
        if self.settings.journal {
            entry.state = SlotState::Released;
            self.changes.push(Change::Unmapped { block, slot });
            self.released.push(slot);
        } else {
            self.free.push(slot);
        }
    }
}

/// Why [`BlockCache::restore`] failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreErrorOr {
    Settings(String),
    Restore(RestoreError),
}

impl fmt::Display for RestoreErrorOr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreErrorOr::Settings(message) => f.write_str(message),
            RestoreErrorOr::Restore(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for RestoreErrorOr {}

/// One of `block`'s in-flight IOs counted in `counts` finished: count it
/// down, forgetting the block at zero.
fn release_one(counts: &mut BlockMap<u32>, block: BlockId, twice: &str) {
    let count = counts.get_mut(&block).expect(twice);
    *count -= 1;
    if *count == 0 {
        counts.remove(&block);
    }
}
