//! Reduced tiers: compression and deduplication under a tier's logical
//! block space (issue 15, paper 004; `docs/engine/reduce.md`).
//!
//! [`ReducedDevice`] is a device-chain layer: it presents `logical` bytes
//! of blocks and stores each block on its inner device as nothing (zeroes),
//! a reference to an identical stored block (dedup, confirmed byte by byte),
//! an lz4 fragment packed with others, or raw. Tiering, caching and moves
//! above it see an ordinary device.
//!
//! When a write is reduced follows paper 004: `inline` reduces before the
//! acknowledgement on the reduction workers, `post` stages the raw block
//! (a raw, not yet reduced fragment: the "stage" is ordinary packs) and
//! acknowledges, the workers reduce it later; `auto` switches between them
//! on the workers' measured utilisation with `tierd_core::reduce::Switch`.
//!
//! Module map: [`codec`] (what a block becomes), [`layout`] (where things
//! are on the device, byte formats), [`state`] (the in-memory map and its
//! rules, no IO), this file (locks, IO, flush, recovery, workers).

pub mod codec;
pub mod layout;
pub mod state;

pub use state::INDEX_BYTES_PER_ENTRY;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, MutexGuard};
use serde::Serialize;
use tierd_common::clock::Clock;
use tierd_core::reduce::clean::{RoomRetry, RoomStep};
use tierd_core::reduce::{
    Mode, ModeSetting, Switch, SwitchConfig, SwitchEvent, SwitchRule, Urgency, WorkQueue,
};

use super::{check_range, BlockDevice, DeviceError, DeviceErrorKind, DeviceResult};
use layout::{Fragment, Geometry, Record, Superblock, UNMAPPED, ZERO};
use state::{Appender, Located, NoRoom, PackKind, PackWrite, State};

/// Stripes of the per-block write locks.
/// Blocks a read locates at once (bounds the pins and the lock hold).
const READ_CHUNK_BLOCKS: u64 = 256;
/// Largest single device read of adjacent fragments.
const READ_RUN_BYTES: u64 = 1 << 20;
const STRIPES: usize = 256;
/// Block map entries the cleaner scans per hold of the state lock (a tier
/// without a reverse index: more than 2^32 blocks).
const CLEAN_SCAN_BLOCKS: u64 = 1 << 16;
/// Block map entries one allocation answer looks at (the rest of its range
/// is then reported allocated: always correct), and per hold of the state
/// lock.
const ALLOCATION_SCAN_BLOCKS: u64 = 1 << 20;
const ALLOCATION_LOCK_BLOCKS: u64 = 1 << 14;

/// Settings of a reduced tier (`reduce = { ... }` on a tier).
#[derive(Clone, Debug, PartialEq)]
pub struct ReduceOptions {
    /// Reduction unit: a power of two, 4 KiB – 64 KiB.
    pub block_bytes: u64,
    /// Bytes presented above (default: the device's size, less metadata).
    pub logical_bytes: Option<u64>,
    /// Packs: fragments are appended to one in memory and written whole.
    pub pack_bytes: u64,
    /// Fingerprint index entries kept (oldest dropped beyond).
    pub index_entries: u64,
    /// Raw blocks that may wait for post-process reduction.
    pub stage_bytes: Option<u64>,
    pub switch: SwitchConfig,
    /// Reduction worker threads; 0 runs inline work on the writer's thread
    /// and post work only when [`ReducedDevice::reduce_staged`] is called
    /// (deterministic tests).
    pub workers: u32,
    /// Deduplicate (false: zero elimination and compression only).
    pub dedup: bool,
    /// Compress (false: zero elimination and dedup only).
    pub compress: bool,
}

impl Default for ReduceOptions {
    fn default() -> Self {
        ReduceOptions {
            block_bytes: 4096,
            logical_bytes: None,
            pack_bytes: 128 << 10,
            index_entries: 1 << 20,
            stage_bytes: None,
            switch: SwitchConfig::default(),
            workers: 2,
            dedup: true,
            compress: true,
        }
    }
}

/// What `tierd status --json` shows of a reduced tier (`"reduction"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ReductionStatus {
    /// The mode new writes take now (`inline` or `post`).
    pub mode: String,
    /// The configured mode (`inline`, `post` or `auto`) and rule.
    pub setting: String,
    pub rule: String,
    /// Bytes of the logical blocks written (zeroes included).
    pub logical_bytes: u64,
    /// Bytes of packs in use (dead fragments in live packs included).
    pub physical_bytes: u64,
    /// logical / physical.
    pub ratio: f64,
    pub zero_bytes: u64,
    pub dedup_bytes: u64,
    pub compress_saved_bytes: u64,
    pub switches: u64,
    pub staged_bytes: u64,
    /// The reduction workers' utilisation over the last window.
    pub utilisation: f64,
    pub workers: u32,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
    pub index_entries: u64,
    pub index_capacity: u64,
    /// Memory the fingerprint index takes (allocated at start).
    #[serde(default)]
    pub index_bytes: u64,
    pub dedup_hits: u64,
    pub dedup_mismatches: u64,
    /// Post writes reduced inline because the stage was full.
    pub stage_overflows: u64,
    /// Bytes of packs in use that hold no live fragment (overwritten or
    /// trimmed data, pack tails): what the cleaner can win back.
    #[serde(default)]
    pub dead_bytes: u64,
    /// Cleaning passes run, packs they emptied, and the live bytes and
    /// block map entries they moved to do it.
    #[serde(default)]
    pub cleaner_passes: u64,
    #[serde(default)]
    pub cleaned_packs: u64,
    #[serde(default)]
    pub cleaner_relocated_bytes: u64,
    #[serde(default)]
    pub cleaner_relocated_blocks: u64,
    pub last_switch: Option<SwitchEvent>,
    /// Post-process's measured worker time per write over inline's (once
    /// both ran), and the largest the thresholds tolerate (paper 004's
    /// inequality, `t1 / t2`): above it the two thresholds can oscillate.
    pub post_work_ratio: Option<f64>,
    pub max_post_work_ratio: f64,
}

struct Journal {
    superblock_sequence: u64,
    checkpoint_slot: u64,
    position: u64,
    sequence: u64,
    /// Ring bytes used since the checkpoint.
    used: u64,
}

/// Where a block of a write to reduce inline is.
enum BlockBytes {
    /// The write's own bytes from this offset: a whole block.
    Request(usize),
    /// A block of its own: a partial write patched into the stored block.
    Own(Vec<u8>),
}

/// Completion of one write's inline blocks.
struct Done {
    state: Mutex<(usize, Option<DeviceError>)>,
    cond: Condvar,
}

/// Work for the reduction workers, ordered by `tierd_core::reduce::WorkQueue`
/// (a write waiting inline before staged blocks).
enum Job {
    /// A block of a write that waits for it.
    Inline {
        lbn: u64,
        /// The block is `buf[at..at + block]`: the whole write's bytes,
        /// copied once and shared by its blocks (not a copy per block).
        buf: Arc<[u8]>,
        at: usize,
        done: Arc<Done>,
    },
    /// A staged block: reduce it if `lbn` still maps to `entry`.
    Staged { lbn: u64, entry: u64 },
    /// Free packs ran low: clean in the background.
    Clean,
}

struct Shared {
    name: String,
    inner: Arc<dyn BlockDevice>,
    geometry: Geometry,
    options: ReduceOptions,
    state: Mutex<State>,
    /// Signalled when a pack write completes.
    written: Condvar,
    journal: Mutex<Journal>,
    stripes: Box<[Mutex<()>]>,
    switch: Mutex<Switch>,
    jobs: Mutex<WorkQueue<Job>>,
    jobs_ready: Condvar,
    clock: Arc<dyn Clock>,
    stop: AtomicBool,
    /// The measured post/inline work ratio broke the thresholds' inequality
    /// (warned once).
    ratio_warned: AtomicBool,
    /// One cleaner at a time (background or a write that found no room).
    cleaner: Mutex<()>,
    /// A background cleaning job is queued or running.
    clean_queued: AtomicBool,
}

/// See the module docs.
pub struct ReducedDevice {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

fn io_error(
    device: &str,
    op: &'static str,
    offset_bytes: u64,
    length_bytes: u64,
    errno: i32,
    message: String,
) -> DeviceError {
    DeviceError {
        device: device.to_string(),
        op,
        offset_bytes,
        length_bytes,
        kind: DeviceErrorKind::Io(errno),
        message,
    }
}

impl ReducedDevice {
    /// Opens the reduced tier on `inner`, recovering its map; formats it when
    /// the device carries no reduced tier and `format` allows (a new tier).
    pub fn open(
        name: impl Into<String>,
        inner: Arc<dyn BlockDevice>,
        options: ReduceOptions,
        clock: Arc<dyn Clock>,
        format: bool,
    ) -> Result<ReducedDevice, String> {
        let name = name.into();
        options
            .switch
            .validate(tierd_core::reduce::DEFAULT_POST_WORK_RATIO)
            .map_err(|error| format!("reduce: {error}"))?;
        let device_bytes = inner.size_bytes();
        let index_kept = index_entries_kept(device_bytes, &options);
        let new_geometry = plan_geometry(device_bytes, &options)?;
        let mut a = vec![0u8; layout::SUPERBLOCK_BYTES as usize];
        let mut b = vec![0u8; layout::SUPERBLOCK_BYTES as usize];
        let read_error =
            |error: DeviceError| format!("reading the reduced tier's superblocks: {error}");
        inner
            .read_at(layout::superblock_offset(device_bytes, 0), &mut a)
            .map_err(read_error)?;
        inner
            .read_at(layout::superblock_offset(device_bytes, 1), &mut b)
            .map_err(read_error)?;
        let superblock = crate::device::journal_batch::newer(
            Superblock::decode(&a),
            Superblock::decode(&b),
            |superblock| superblock.sequence,
        );
        let superblock = match superblock {
            Some(superblock) => superblock,
            None if Superblock::has_magic(&a) || Superblock::has_magic(&b) => {
                return Err(format!(
                    "both superblocks of reduced tier {name} are damaged (last {} bytes of its device); \
                     restore the tier file from a backup",
                    2 * layout::SUPERBLOCK_BYTES
                ));
            }
            None if !format => {
                return Err(format!(
                    "tier {name} is configured as reduced but its device holds no reduced tier (it was \
                     used unreduced before); a tier becomes reduced only when it is new: remove `reduce` \
                     or give the tier a new file"
                ));
            }
            None => format_device(&*inner, new_geometry)?,
        };
        // The index's room in a checkpoint was fixed when the tier was
        // formatted; `index_memory` may change since (memory holds more or
        // fewer entries, a checkpoint keeps the newest that fit).
        let formatted_index = superblock.geometry.index_capacity;
        // Unset `logical` means the formatted tier's (its default when it
        // was made may differ from today's).
        let configured = if options.logical_bytes.is_none() {
            let formatted = ReduceOptions {
                logical_bytes: Some(
                    superblock.geometry.logical_blocks * superblock.geometry.block_bytes,
                ),
                ..options.clone()
            };
            plan_geometry_with_index(device_bytes, &formatted, formatted_index)?
        } else {
            plan_geometry_with_index(device_bytes, &options, formatted_index)?
        };
        if index_kept != formatted_index {
            tracing::info!(
                tier = %name,
                memory_entries = index_kept,
                checkpoint_entries = formatted_index,
                "reduce.index_memory differs from the formatted tier's: memory keeps the configured \
                 entries, a checkpoint keeps the newest entries that fit its room"
            );
        }
        let differences = superblock.geometry.differences(&configured);
        if !differences.is_empty() {
            return Err(format!(
                "reduced tier {name} was formatted with other settings ({}); put the old settings back \
                 (a reduced tier's geometry cannot change)",
                differences.join("; ")
            ));
        }
        let geometry = superblock.geometry;
        let (map, index, journal, replayed) = recover(&*inner, &superblock, index_kept)?;
        let stage_blocks = options
            .stage_bytes
            .unwrap_or_else(|| (geometry.packs_bytes() / 8).min(1 << 30))
            / geometry.block_bytes;
        let state = State::new(geometry, map, index, index_kept, stage_blocks);
        let switch = Switch::new(options.switch, clock.now_ns());
        let workers = options.workers;
        let shared = Arc::new(Shared {
            name,
            inner,
            geometry,
            options,
            state: Mutex::new(state),
            written: Condvar::new(),
            journal: Mutex::new(journal),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            switch: Mutex::new(switch),
            jobs: Mutex::new(WorkQueue::new()),
            jobs_ready: Condvar::new(),
            clock,
            stop: AtomicBool::new(false),
            ratio_warned: AtomicBool::new(false),
            cleaner: Mutex::new(()),
            clean_queued: AtomicBool::new(false),
        });
        if replayed > 0 {
            // Start the journal afresh so its use is known exactly.
            shared.checkpoint_now().map_err(|error| {
                format!(
                    "reduced tier {}: writing a checkpoint after recovery: {error}",
                    shared.name
                )
            })?;
        }
        let recovered = std::mem::take(&mut shared.state.lock().recovered_staged);
        let staged = recovered.len();
        {
            let mut jobs = shared.jobs.lock();
            for (lbn, entry) in recovered {
                jobs.push(Urgency::Background, Job::Staged { lbn, entry });
            }
        }
        tracing::info!(
            tier = %shared.name,
            logical_bytes = geometry.logical_blocks * geometry.block_bytes,
            packs = geometry.pack_count,
            replayed_batches = replayed,
            staged_blocks = staged,
            mode = shared.options.switch.setting.name(),
            "reduced tier opened"
        );
        let mut threads = Vec::new();
        for worker in 0..workers {
            let shared = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("reduce-{worker}"))
                .spawn(move || shared.worker())
                .map_err(|error| format!("cannot start a reduction worker: {error}"))?;
            threads.push(handle);
        }
        Ok(ReducedDevice { shared, threads })
    }

    pub fn geometry(&self) -> Geometry {
        self.shared.geometry
    }

    /// Reduces up to `blocks` staged blocks on this thread (tests and
    /// workers = 0); returns how many it took off the stage.
    pub fn reduce_staged(&self, blocks: usize) -> DeviceResult<usize> {
        let mut done = 0;
        while done < blocks && self.shared.run_one_job()? {
            done += 1;
        }
        Ok(done)
    }

    /// The status `tierd status` shows.
    pub fn status(&self) -> ReductionStatus {
        self.shared.status()
    }

    /// Applies the switch rule to a utilisation as if measured now (tests
    /// and drills: forces a mode switch deterministically).
    pub fn decide(&self, utilisation: f64) -> Option<SwitchEvent> {
        let now = self.shared.clock.now_ns();
        let event = self.shared.switch.lock().decide(now, utilisation);
        if let Some(event) = event {
            self.shared.log_switch(event);
        }
        event
    }
}

impl Drop for ReducedDevice {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _jobs = self.shared.jobs.lock();
            self.shared.jobs_ready.notify_all();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The fingerprint index entries kept in memory: the configured budget, none
/// without dedup, never more than fragments can exist on the device.
pub fn index_entries_kept(device_bytes: u64, options: &ReduceOptions) -> u64 {
    if options.dedup {
        options
            .index_entries
            .min(device_bytes / options.block_bytes.max(1) * 2)
    } else {
        0
    }
}

/// The geometry `options` give a new device of `device_bytes` (its logical
/// size when `logical_bytes` is unset), or why it does not fit. Its
/// checkpoints hold as many index entries as memory does.
pub fn plan_geometry(device_bytes: u64, options: &ReduceOptions) -> Result<Geometry, String> {
    plan_geometry_with_index(
        device_bytes,
        options,
        index_entries_kept(device_bytes, options),
    )
}

/// Pack space a reduced tier of the default logical size keeps beyond its
/// logical bytes: a 16th of its packs (as an SSD's spare area), at least
/// the cleaner's reserve and 2 more. Packs are never written in place, so
/// even data that does not compress needs room for the new copy of a block
/// before the old one dies, and the cleaner copies less the more spare
/// room there is (its victims hold fewer live bytes).
fn spare_bytes(geometry: &Geometry) -> u64 {
    (geometry.pack_count / 16).max(state::CLEANER_RESERVE_PACKS + 2) * geometry.pack_bytes
}

/// The geometry with checkpoints that hold `index_capacity` entries: a
/// formatted tier keeps its own whatever `index_memory` says now.
fn plan_geometry_with_index(
    device_bytes: u64,
    options: &ReduceOptions,
    index_capacity: u64,
) -> Result<Geometry, String> {
    if !options.block_bytes.is_power_of_two()
        || options.block_bytes < 4096
        || options.block_bytes > layout::MAX_BLOCK_BYTES
    {
        return Err(format!(
            "reduce.block = {} must be a power of two from 4KiB to 64KiB",
            options.block_bytes
        ));
    }
    if options.pack_bytes < options.block_bytes
        || options.pack_bytes > layout::MAX_PACK_BYTES
        || !options.pack_bytes.is_multiple_of(4096)
    {
        return Err(format!(
            "reduce.pack = {} must be a multiple of 4KiB from the block size to 1MiB",
            options.pack_bytes
        ));
    }
    let logical = match options.logical_bytes {
        Some(bytes) => bytes,
        None => {
            // Default: as much as the device holds raw after metadata.
            let probe = Geometry::plan(
                device_bytes,
                options.block_bytes,
                options.block_bytes * 1024,
                options.pack_bytes,
                index_capacity,
            )?;
            let mut logical = probe.packs_bytes();
            // The map itself takes room: shrink until it fits.
            loop {
                match Geometry::plan(
                    device_bytes,
                    options.block_bytes,
                    logical,
                    options.pack_bytes,
                    index_capacity,
                ) {
                    Ok(geometry) if geometry.packs_bytes() >= logical + spare_bytes(&geometry) => {
                        break logical
                    }
                    Ok(geometry) => {
                        logical = (geometry.packs_bytes() - spare_bytes(&geometry))
                            / options.block_bytes
                            * options.block_bytes
                    }
                    Err(error) => return Err(error),
                }
            }
        }
    };
    if logical < options.block_bytes || logical % options.block_bytes != 0 {
        return Err(format!(
            "reduce.logical = {logical} must be a positive multiple of reduce.block = {}",
            options.block_bytes
        ));
    }
    Geometry::plan(
        device_bytes,
        options.block_bytes,
        logical,
        options.pack_bytes,
        index_capacity,
    )
}

fn format_device(inner: &dyn BlockDevice, geometry: Geometry) -> Result<Superblock, String> {
    let map = vec![UNMAPPED; geometry.logical_blocks as usize];
    let checkpoint = layout::encode_checkpoint(&map, &[]);
    let fail = |error: DeviceError| format!("formatting the reduced tier: {error}");
    inner
        .write_at(geometry.checkpoint_offset(0), &checkpoint)
        .map_err(fail)?;
    inner.flush().map_err(fail)?;
    let superblock = Superblock {
        geometry,
        sequence: 1,
        checkpoint_slot: 0,
        journal_position: 0,
        journal_sequence: 1,
    };
    inner
        .write_at(
            layout::superblock_offset(geometry.device_bytes, 1),
            &superblock.encode(),
        )
        .map_err(fail)?;
    inner.flush().map_err(fail)?;
    tracing::info!(device = inner.name(), "reduced tier formatted");
    Ok(superblock)
}

/// Reads the current checkpoint and replays the journal after it.
#[allow(clippy::type_complexity)]
fn recover(
    inner: &dyn BlockDevice,
    superblock: &Superblock,
    index_kept: u64,
) -> Result<(Vec<u64>, Vec<(codec::Fingerprint, u64)>, Journal, u64), String> {
    let geometry = &superblock.geometry;
    let slot_offset = geometry.checkpoint_offset(superblock.checkpoint_slot);
    let mut header = vec![0u8; layout::CHECKPOINT_HEADER_BYTES as usize];
    let fail = |error: DeviceError| format!("reading the reduced tier's metadata: {error}");
    inner.read_at(slot_offset, &mut header).map_err(fail)?;
    let damaged = |what: String| {
        format!(
            "the reduced tier's checkpoint (slot {} at byte {slot_offset} of {}) is damaged: {what}; \
             restore the tier file from a backup",
            superblock.checkpoint_slot,
            inner.name()
        )
    };
    let payload = layout::checkpoint_payload_bytes(&header).map_err(damaged)?;
    if layout::CHECKPOINT_HEADER_BYTES + payload > geometry.checkpoint_slot_bytes() {
        return Err(damaged("its length runs past its slot".to_string()));
    }
    let mut bytes = vec![0u8; (layout::CHECKPOINT_HEADER_BYTES + payload) as usize];
    inner.read_at(slot_offset, &mut bytes).map_err(fail)?;
    let (mut map, mut index) = layout::decode_checkpoint(&bytes, geometry).map_err(damaged)?;
    drop(bytes);

    let ring = geometry.journal_bytes;
    let base = geometry.journal_offset();
    let mut position = superblock.journal_position;
    let mut sequence = superblock.journal_sequence;
    let mut used = 0;
    let mut replayed = 0;
    let mut header = vec![0u8; layout::BATCH_HEADER_BYTES as usize];
    loop {
        let mut found = None;
        for at in [position, 0] {
            if at + layout::BATCH_HEADER_BYTES > ring {
                continue;
            }
            inner.read_at(base + at, &mut header).map_err(fail)?;
            if let Some((batch_sequence, count)) = layout::batch_header(&header) {
                let bytes = layout::BATCH_HEADER_BYTES
                    .saturating_add(count.saturating_mul(layout::RECORD_BYTES));
                if batch_sequence == sequence && at + bytes <= ring {
                    found = Some((at, count));
                    break;
                }
            }
            if position == 0 {
                break;
            }
        }
        let Some((at, count)) = found else { break };
        let length = layout::batch_bytes(count as usize);
        let mut batch = vec![0u8; length as usize];
        inner.read_at(base + at, &mut batch).map_err(fail)?;
        let Some(records) = layout::decode_batch(&batch) else {
            // A torn append: the end of the journal.
            break;
        };
        for record in records {
            match record {
                Record::Map { lbn, entry } => {
                    if lbn >= geometry.logical_blocks || !layout::entry_is_valid(entry, geometry) {
                        return Err(format!(
                            "the reduced tier's journal batch {sequence} (byte {} of {}) maps block {lbn} \
                             to {entry:#x}, outside the tier; restore the tier file from a backup",
                            base + at,
                            inner.name()
                        ));
                    }
                    map[lbn as usize] = entry;
                }
                Record::Index { fingerprint, entry } => {
                    if layout::entry_is_valid(entry, geometry) && Fragment::decode(entry).is_some()
                    {
                        index.push((fingerprint, entry));
                    }
                }
            }
        }
        used += if at < position {
            ring - position + length
        } else {
            length
        };
        position = at + length;
        sequence += 1;
        replayed += 1;
    }
    // Index records replayed in order: keep the newest per fingerprint, at
    // most what memory keeps.
    let capacity = index_kept as usize;
    if index.len() > capacity {
        index.drain(..index.len() - capacity);
    }
    Ok((
        map,
        index,
        Journal {
            superblock_sequence: superblock.sequence,
            checkpoint_slot: superblock.checkpoint_slot,
            position,
            sequence,
            used,
        },
        replayed,
    ))
}

impl Shared {
    fn error(
        &self,
        op: &'static str,
        offset: u64,
        length: u64,
        errno: i32,
        message: String,
    ) -> DeviceError {
        io_error(&self.name, op, offset, length, errno, message)
    }

    fn log_switch(&self, event: SwitchEvent) {
        tracing::info!(
            tier = %self.name,
            from = event.from.name(),
            to = event.to.name(),
            utilisation = format!("{:.3}", event.utilisation),
            "reduction mode switched"
        );
    }

    fn mode_now(&self) -> Mode {
        let now = self.clock.now_ns();
        let mut switch = self.switch.lock();
        let event = switch.tick(now, self.options.workers.max(1));
        let mode = switch.mode();
        let ratio = switch.measured_post_work_ratio();
        let limit = switch.config().max_post_work_ratio();
        let double = switch.config().rule == SwitchRule::Double
            && switch.config().setting == ModeSetting::Auto;
        drop(switch);
        if let Some(event) = event {
            self.log_switch(event);
        }
        if let Some(ratio) = ratio.filter(|ratio| double && *ratio >= limit) {
            if !self.ratio_warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    tier = %self.name,
                    post_work_ratio = format!("{ratio:.2}"),
                    limit = format!("{limit:.2}"),
                    "post-process measures more than t1/t2 times inline's work per write: paper 004's \
                     T2 + (util_post - util_inline) < T1 no longer holds and the two thresholds can \
                     oscillate; lower reduce.t2"
                );
            }
        }
        mode
    }

    fn record_work(&self, mode: Mode, started_ns: u64) {
        let busy = self.clock.now_ns().saturating_sub(started_ns);
        self.switch.lock().record_work(mode, busy);
    }

    // ---- workers ----------------------------------------------------------

    fn worker(self: Arc<Self>) {
        loop {
            let job = {
                let mut jobs = self.jobs.lock();
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some((_, job)) = jobs.pop() {
                        break job;
                    }
                    self.jobs_ready.wait(&mut jobs);
                }
            };
            match job {
                Job::Inline { lbn, buf, at, done } => {
                    let started = self.clock.now_ns();
                    let block = self.geometry.block_bytes as usize;
                    let result = self.store_block(lbn, &buf[at..at + block], None);
                    self.record_work(Mode::Inline, started);
                    let mut state = done.state.lock();
                    state.0 -= 1;
                    if let Err(error) = result {
                        state.1.get_or_insert(error);
                    }
                    if state.0 == 0 {
                        done.cond.notify_all();
                    }
                }
                Job::Staged { lbn, entry } => {
                    if let Err(error) = self.reduce_staged_block(lbn, entry) {
                        tracing::warn!(tier = %self.name, %error, "post-process reduction failed; the block stays staged");
                        // Do not spin on a failing device.
                        let mut jobs = self.jobs.lock();
                        self.jobs_ready
                            .wait_for(&mut jobs, std::time::Duration::from_millis(100));
                    }
                }
                Job::Clean => self.clean_in_background(),
            }
        }
    }

    /// Takes one job off the queue and runs it on this thread; false when
    /// none waits (workers = 0: tests drive post-process reduction).
    fn run_one_job(&self) -> DeviceResult<bool> {
        let Some((_, job)) = self.jobs.lock().pop() else {
            return Ok(false);
        };
        match job {
            Job::Staged { lbn, entry } => self.reduce_staged_block(lbn, entry)?,
            Job::Clean => self.clean_in_background(),
            Job::Inline { lbn, buf, at, done } => {
                let block = self.geometry.block_bytes as usize;
                let result = self.store_block(lbn, &buf[at..at + block], None);
                let mut state = done.state.lock();
                state.0 -= 1;
                if let Err(error) = result {
                    state.1.get_or_insert(error);
                }
                done.cond.notify_all();
            }
        }
        Ok(true)
    }

    fn queue_staged(&self, lbn: u64, entry: u64) {
        let mut jobs = self.jobs.lock();
        jobs.push(Urgency::Background, Job::Staged { lbn, entry });
        self.jobs_ready.notify_one();
    }

    /// Reduces one staged block (unless overwritten since); on failure it
    /// stays staged and queued.
    fn reduce_staged_block(&self, lbn: u64, entry: u64) -> DeviceResult<()> {
        let started = self.clock.now_ns();
        let located = {
            let mut state = self.state.lock();
            if !state.maps(lbn, entry) {
                // Overwritten (or trimmed) since it was staged.
                state.staging.reduced();
                return Ok(());
            }
            state.locate(lbn).1
        };
        let mut block = vec![0u8; self.geometry.block_bytes as usize];
        let result = self
            .read_located(lbn, located, &mut block)
            .and_then(|()| self.store_block(lbn, &block, Some(entry)));
        self.record_work(Mode::Post, started);
        if result.is_err() {
            self.queue_staged(lbn, entry);
        }
        result
    }

    // ---- the block path ---------------------------------------------------

    /// Decodes a block's fragment into `out` (exactly one block): a raw
    /// fragment is copied, a compressed one decompressed.
    fn decode(&self, lbn: u64, fragment: &[u8], out: &mut [u8]) -> DeviceResult<()> {
        let block = self.geometry.block_bytes;
        if fragment.len() as u64 == block {
            out.copy_from_slice(fragment);
            Ok(())
        } else {
            codec::decompress(fragment, out).map_err(|message| {
                self.error(
                    "read",
                    lbn * block,
                    block,
                    libc::EIO,
                    format!(
                        "block {lbn}: {message} (the tier's data was changed or damaged on disk)"
                    ),
                )
            })
        }
    }

    /// Reads a located block into `out` (exactly one block), unpinning a
    /// device-located pack.
    fn read_located(&self, lbn: u64, located: Located, out: &mut [u8]) -> DeviceResult<()> {
        match located {
            Located::Zeroes => {
                out.fill(0);
                Ok(())
            }
            Located::Bytes(bytes) => self.decode(lbn, &bytes, out),
            Located::Shared { buf, offset, len } => {
                self.decode(lbn, &buf[offset as usize..(offset + len) as usize], out)
            }
            Located::Device { pack, offset, len } => {
                let at = self.geometry.pack_offset(pack) + offset;
                let result = if len == self.geometry.block_bytes {
                    self.inner.read_at(at, out)
                } else {
                    let mut fragment = vec![0u8; len as usize];
                    self.inner
                        .read_at(at, &mut fragment)
                        .and_then(|()| self.decode(lbn, &fragment, out))
                };
                self.state.lock().unpin(pack);
                result
            }
        }
    }

    fn read_block(&self, lbn: u64, out: &mut [u8]) -> DeviceResult<()> {
        let (_, located) = self.state.lock().locate(lbn);
        self.read_located(lbn, located, out)
    }

    /// Whether a candidate's bytes equal `data`.
    fn equals(&self, lbn: u64, located: Located, data: &[u8]) -> DeviceResult<bool> {
        let mut stored = vec![0u8; data.len()];
        match self.read_located(lbn, located, &mut stored) {
            Ok(()) => Ok(stored == data),
            // A stale hint pointing at bytes that no longer decode.
            Err(error)
                if error.kind == DeviceErrorKind::Io(libc::EIO) && error.device == self.name =>
            {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// Reduces `data` into `lbn`'s new mapping. `expect`: a staged entry the
    /// block must still map to (post-process), else nothing is changed.
    fn store_block(&self, lbn: u64, data: &[u8], expect: Option<u64>) -> DeviceResult<()> {
        let still = |state: &mut MutexGuard<'_, State>| match expect {
            None => true,
            Some(entry) => {
                let mapped = state.maps(lbn, entry);
                if !mapped {
                    state.staging.reduced();
                }
                mapped
            }
        };
        if codec::is_zero(data) {
            let mut state = self.state.lock();
            if still(&mut state) {
                state.install(lbn, ZERO);
                if expect.is_some() {
                    state.staging.reduced();
                }
            }
            return Ok(());
        }
        let fingerprint = self.options.dedup.then(|| codec::fingerprint(data));
        if let Some(fingerprint) = fingerprint {
            let candidate = self.state.lock().candidate(fingerprint);
            if let Some((entry, located)) = candidate {
                // Pinned (if on the device) until it is mapped or let go.
                let pinned = match &located {
                    Located::Device { pack, .. } => Some(*pack),
                    _ => None,
                };
                // read_located unpins; pin again for the install below.
                if let Some(pack) = pinned {
                    self.state.lock().pin(pack);
                }
                let same = self.equals(lbn, located, data);
                let mut state = self.state.lock();
                let result = match same {
                    // The cleaner started emptying its pack since: store a
                    // copy instead (a reference now would keep it in use).
                    Ok(true) if state.in_cleaning(entry) => None,
                    Ok(true) => {
                        if still(&mut state) {
                            state.install(lbn, entry);
                            state.tallies.dedup_hits += 1;
                            if expect.is_some() {
                                state.staging.reduced();
                            }
                        }
                        Some(Ok(()))
                    }
                    Ok(false) => {
                        state.tallies.dedup_mismatches += 1;
                        None
                    }
                    Err(error) => Some(Err(error)),
                };
                if let Some(pack) = pinned {
                    state.unpin(pack);
                }
                if let Some(result) = result {
                    return result;
                }
            }
        }
        let mut compressed = Vec::new();
        let (kind, bytes): (PackKind, &[u8]) =
            if self.options.compress && codec::compress(data, &mut compressed) {
                (PackKind::Compressed, &compressed)
            } else {
                (PackKind::Raw, data)
            };
        self.place(lbn, kind, bytes, false, still, |state, entry| {
            if let Some(fingerprint) = fingerprint {
                state.index.insert(fingerprint, entry);
                state.records.push(Record::Index { fingerprint, entry });
            }
            if expect.is_some() {
                state.staging.reduced();
            }
        })
        .map(|_| ())
    }

    /// Appends `bytes` as `lbn`'s new fragment and maps it, with `placed`
    /// in the same critical section; `proceed` is asked first, under the
    /// lock (false: nothing is done, `Ok(None)`). A tier whose free packs
    /// wait for a flush is flushed once and tried again; a full one fails
    /// with ENOSPC and nothing changed. Returns the new entry.
    fn place(
        &self,
        lbn: u64,
        kind: PackKind,
        bytes: &[u8],
        staged: bool,
        mut proceed: impl FnMut(&mut MutexGuard<'_, State>) -> bool,
        mut placed: impl FnMut(&mut MutexGuard<'_, State>, u64),
    ) -> DeviceResult<Option<u64>> {
        let mut retry = RoomRetry::new();
        loop {
            let mut state = self.state.lock();
            if !proceed(&mut state) {
                return Ok(None);
            }
            match state.append(kind, bytes, staged, Appender::User) {
                Ok((fragment, sealed)) => {
                    let entry = fragment.encode();
                    state.install(lbn, entry);
                    placed(&mut state, entry);
                    let clean = sealed.is_some() && self.wants_cleaning(&state);
                    drop(state);
                    if let Some(write) = sealed {
                        self.write_pack(write);
                    }
                    if clean {
                        self.queue_clean();
                    }
                    return Ok(Some(entry));
                }
                Err(no_room) => {
                    drop(state);
                    match retry.next(no_room == NoRoom::AfterFlush) {
                        RoomStep::Flush => self.flush()?,
                        // Dead fragments may hold the room: clean now, on
                        // this thread, while each pass makes room.
                        RoomStep::Clean => {
                            if !retry.after_pass(self.clean(true)?) {
                                return Err(self.full_error(lbn));
                            }
                        }
                        RoomStep::Fail => return Err(self.full_error(lbn)),
                    }
                }
            }
        }
    }

    // ---- the cleaner --------------------------------------------------------

    /// Whether a background cleaning pass is due (with workers to run it).
    fn wants_cleaning(&self, state: &State) -> bool {
        self.options.workers > 0
            && !self.clean_queued.load(Ordering::Relaxed)
            && state.wants_cleaning()
    }

    fn queue_clean(&self) {
        if self.clean_queued.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut jobs = self.jobs.lock();
        jobs.push(Urgency::Background, Job::Clean);
        self.jobs_ready.notify_one();
    }

    /// Background cleaning: passes until free packs are back to the high
    /// mark or a pass cannot make room (`tierd_core::reduce::clean`).
    fn clean_in_background(&self) {
        loop {
            if self.stop.load(Ordering::SeqCst) || !self.state.lock().keeps_cleaning() {
                break;
            }
            match self.clean(false) {
                Ok(true) => {}
                Ok(false) => break,
                Err(error) => {
                    tracing::warn!(tier = %self.name, %error, "cleaning failed; dead fragments keep their space until the next pass");
                    break;
                }
            }
        }
        self.clean_queued.store(false, Ordering::SeqCst);
    }

    /// One cleaning pass: empties up to a batch of packs with the
    /// fewest live bytes into the open packs and flushes, which frees them.
    /// `urgent` (a write found no room): waits for a pass under way and
    /// returns at once if users have room again. True when there is room
    /// now or the pass freed packs.
    fn clean(&self, urgent: bool) -> DeviceResult<bool> {
        let _cleaner = if urgent {
            self.cleaner.lock()
        } else {
            match self.cleaner.try_lock() {
                Some(guard) => guard,
                None => return Ok(false),
            }
        };
        let victims = {
            let mut state = self.state.lock();
            if urgent && state.users_have_room() {
                return Ok(true);
            }
            let victims = state.pick_victims();
            if !victims.is_empty() {
                state.cleaner.passes += 1;
            }
            // Nothing adds a reference to a pack being cleaned, so the
            // blocks found now are all there will be.
            let refs = state.victim_refs(&victims);
            (victims, refs)
        };
        let (victims, refs) = victims;
        if victims.is_empty() {
            return Ok(false);
        }
        let relocated = self.relocate_victims(&victims, refs);
        let emptied = {
            let mut state = self.state.lock();
            let before = state.cleaner.packs_cleaned;
            state.end_cleaning(&victims);
            state.cleaner.packs_cleaned - before
        };
        relocated?;
        // Journals the remapping: only then may the emptied packs be reused.
        self.flush()?;
        tracing::debug!(tier = %self.name, urgent, victims = victims.len(), emptied, "cleaning pass");
        Ok(emptied > 0)
    }

    /// Copies the live fragments of `victims` (marked and pinned by
    /// `pick_victims`) to the open packs and remaps every block that
    /// pointed at them (`refs`: those blocks, from the reverse index, or
    /// `None` to scan the map for them). Stops early when even the reserve
    /// is used up.
    fn relocate_victims(&self, victims: &[u32], refs: Option<Vec<(u64, u64)>>) -> DeviceResult<()> {
        let pack_of =
            |entry: u64| Fragment::decode(entry).map_or(u32::MAX, |fragment| fragment.pack);
        let refs = match refs {
            Some(refs) => refs,
            None => {
                // No reverse index (a tier of more than 2^32 blocks): one
                // pass over the map, a slice per hold of the lock.
                let mut refs = Vec::new();
                let mut lbn = 0;
                while lbn < self.geometry.logical_blocks {
                    refs.extend(
                        self.state
                            .lock()
                            .refs_in_cleaning(lbn..lbn + CLEAN_SCAN_BLOCKS),
                    );
                    lbn += CLEAN_SCAN_BLOCKS;
                }
                refs.sort_unstable_by_key(|&(lbn, entry)| (pack_of(entry), entry, lbn));
                refs
            }
        };
        let block = self.geometry.block_bytes as usize;
        let mut pack_buf = vec![0u8; self.geometry.pack_bytes as usize];
        let mut scratch = vec![0u8; block];
        for &victim in victims {
            let start = refs.partition_point(|&(_, entry)| pack_of(entry) < victim);
            let end = refs.partition_point(|&(_, entry)| pack_of(entry) <= victim);
            let these = &refs[start..end];
            if these.is_empty() {
                continue;
            }
            self.inner
                .read_at(self.geometry.pack_offset(victim), &mut pack_buf)?;
            let bytes_of = |entry: u64| {
                let fragment = Fragment::decode(entry).expect("a mapped fragment");
                let from = fragment.offset as usize;
                &pack_buf[from..from + fragment.len as usize]
            };
            // Fingerprints (outside the lock) to move the index hints along.
            let mut fingerprints: tierd_common::hash::FastMap<u64, codec::Fingerprint> =
                Default::default();
            if self.options.dedup {
                for &(_, entry) in these {
                    if fingerprints.contains_key(&entry) {
                        continue;
                    }
                    let bytes = bytes_of(entry);
                    let block_bytes = if bytes.len() == block {
                        Some(bytes)
                    } else {
                        codec::decompress(bytes, &mut scratch)
                            .ok()
                            .map(|()| &scratch[..])
                    };
                    if let Some(block_bytes) = block_bytes {
                        fingerprints.insert(entry, codec::fingerprint(block_bytes));
                    }
                }
            }
            let mut writes = Vec::new();
            let mut full = false;
            {
                let mut state = self.state.lock();
                let mut copies: tierd_common::hash::FastMap<u64, u64> = Default::default();
                for &(lbn, entry) in these {
                    if !state.maps(lbn, entry) {
                        continue;
                    }
                    let copy = match copies.get(&entry) {
                        Some(&copy) => copy,
                        None => match state.relocate(entry, bytes_of(entry)) {
                            Ok((copy, sealed)) => {
                                writes.extend(sealed);
                                if let Some(&fingerprint) = fingerprints.get(&entry) {
                                    if state.index.get(fingerprint) == Some(entry) {
                                        state.index.insert(fingerprint, copy);
                                        state.records.push(Record::Index {
                                            fingerprint,
                                            entry: copy,
                                        });
                                    }
                                }
                                copies.insert(entry, copy);
                                copy
                            }
                            Err(_) => {
                                full = true;
                                break;
                            }
                        },
                    };
                    state.install(lbn, copy);
                    state.cleaner.relocated_blocks += 1;
                }
            }
            for write in writes {
                self.write_pack(write);
            }
            if full {
                break;
            }
        }
        Ok(())
    }

    fn full_error(&self, lbn: u64) -> DeviceError {
        let state = self.state.lock();
        self.error(
            "write",
            lbn * self.geometry.block_bytes,
            self.geometry.block_bytes,
            libc::ENOSPC,
            format!(
                "reduced tier {} is full: its {} packs of {} bytes hold {} bytes of live fragments ({} \
                 logical blocks mapped) and cleaning freed no pack; nothing was changed — free space \
                 (TRIM) or give the tier a larger device",
                self.name,
                self.geometry.pack_count,
                self.geometry.pack_bytes,
                state.tallies.fragment_bytes,
                state.tallies.mapped_blocks
            ),
        )
    }

    /// Stages `data` raw for post-process reduction; the staged entry for
    /// the caller to queue (once the whole write is staged).
    fn stage_block(&self, lbn: u64, data: &[u8]) -> DeviceResult<Option<u64>> {
        self.place(lbn, PackKind::Staged, data, true, |_| true, |_, _| {})
            .inspect_err(|_| self.state.lock().staging.reduced())
    }

    /// Queues the staged blocks of one write with one lock and one wake-up:
    /// waking a worker per block mid-write would let the reduction of the
    /// first block compete for the CPU with staging the rest (on a small
    /// machine, the write's own response).
    fn queue_staged_blocks(&self, staged: Vec<(u64, u64)>) {
        if staged.is_empty() {
            return;
        }
        let mut jobs = self.jobs.lock();
        let count = staged.len();
        for (lbn, entry) in staged {
            jobs.push(Urgency::Background, Job::Staged { lbn, entry });
        }
        if count == 1 {
            self.jobs_ready.notify_one();
        } else {
            self.jobs_ready.notify_all();
        }
    }

    /// Writes a pack (or its tail); a failure keeps it in memory for the
    /// next flush to retry (which then reports the error).
    fn write_pack(&self, write: PackWrite) {
        let at = self.geometry.pack_offset(write.pack) + write.from;
        let result = self
            .inner
            .write_at(at, &write.buf[write.from as usize..write.to as usize]);
        if let Err(error) = &result {
            tracing::warn!(tier = %self.name, pack = write.pack, %error, "pack write failed; kept in memory for the next flush");
        }
        let mut state = self.state.lock();
        state.write_done(write, result.is_ok());
        self.written.notify_all();
    }

    // ---- user IO ----------------------------------------------------------

    /// Locks the stripes of blocks `first..=last` in order.
    fn lock_stripes(&self, first: u64, last: u64) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = if last - first + 1 >= STRIPES as u64 {
            (0..STRIPES).collect()
        } else {
            (first..=last)
                .map(|lbn| (lbn % STRIPES as u64) as usize)
                .collect()
        };
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|stripe| self.stripes[stripe].lock())
            .collect()
    }

    /// Writes `data` at `offset` (`None`: zeroes, mapped `fill`).
    fn write(
        &self,
        op: &'static str,
        offset: u64,
        length: u64,
        data: Option<&[u8]>,
        fill: u64,
    ) -> DeviceResult<()> {
        check_range(&self.name, op, offset, length, self.logical_bytes())?;
        self.check_alive(op, offset, length)?;
        if length == 0 {
            return Ok(());
        }
        let block = self.geometry.block_bytes;
        let first = offset / block;
        let last = (offset + length - 1) / block;
        let _stripes = self.lock_stripes(first, last);
        let mode = if data.is_some() {
            self.mode_now()
        } else {
            Mode::Inline
        };
        let mut inline: Vec<(u64, BlockBytes)> = Vec::new();
        let mut staged: Vec<(u64, u64)> = Vec::new();
        let result =
            self.write_blocks((offset, length, data, fill), mode, &mut inline, &mut staged);
        let result = result.and_then(|()| self.run_inline(data, inline));
        // Staged even when a later block failed: they are mapped as staged.
        self.queue_staged_blocks(staged);
        result
    }

    /// The per-block part of [`Shared::write`]: whole zero-fills installed
    /// here, staged blocks staged (their entries into `staged`), the rest
    /// into `inline` for [`Shared::run_inline`].
    fn write_blocks(
        &self,
        (offset, length, data, fill): (u64, u64, Option<&[u8]>, u64),
        mode: Mode,
        inline: &mut Vec<(u64, BlockBytes)>,
        staged: &mut Vec<(u64, u64)>,
    ) -> DeviceResult<()> {
        let block = self.geometry.block_bytes;
        let first = offset / block;
        let last = (offset + length - 1) / block;
        let mut scratch = vec![0u8; block as usize];
        for lbn in first..=last {
            let start = lbn * block;
            let lo = offset.max(start);
            let hi = (offset + length).min(start + block);
            let whole = lo == start && hi == start + block;
            let Some(data) = data else {
                if whole {
                    self.state.lock().install(lbn, fill);
                    continue;
                }
                self.read_block(lbn, &mut scratch)?;
                scratch[(lo - start) as usize..(hi - start) as usize].fill(0);
                inline.push((lbn, BlockBytes::Own(scratch.clone())));
                continue;
            };
            let part = &data[(lo - offset) as usize..(hi - offset) as usize];
            // A whole block is the request's own bytes (no copy); a part is
            // patched into the stored block.
            let bytes: &[u8] = if whole {
                part
            } else {
                self.read_block(lbn, &mut scratch)?;
                scratch[(lo - start) as usize..(hi - start) as usize].copy_from_slice(part);
                &scratch
            };
            let own = |bytes: &[u8]| {
                if whole {
                    BlockBytes::Request((lo - offset) as usize)
                } else {
                    BlockBytes::Own(bytes.to_vec())
                }
            };
            let taken = if mode == Mode::Post && !codec::is_zero(bytes) {
                self.state.lock().staging.admit(Mode::Post)
            } else {
                Mode::Inline
            };
            match taken {
                Mode::Post => match self.stage_block(lbn, bytes) {
                    Ok(Some(entry)) => staged.push((lbn, entry)),
                    Ok(None) => {}
                    // No room for a raw copy (and nothing to clean): reduce
                    // it now, which may fit.
                    Err(error) if error.errno() == libc::ENOSPC => {
                        self.state.lock().staging.overflows += 1;
                        inline.push((lbn, own(bytes)));
                    }
                    Err(error) => return Err(error),
                },
                Mode::Inline => inline.push((lbn, own(bytes))),
            }
        }
        Ok(())
    }

    /// Reduces blocks before the write returns: on the workers, or here
    /// when there are none. `data`: the write's bytes, which
    /// [`BlockBytes::Request`] blocks are in.
    fn run_inline(&self, data: Option<&[u8]>, blocks: Vec<(u64, BlockBytes)>) -> DeviceResult<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        let block = self.geometry.block_bytes as usize;
        if self.options.workers == 0 {
            for (lbn, bytes) in blocks {
                let started = self.clock.now_ns();
                let bytes = match &bytes {
                    BlockBytes::Request(at) => &data.expect("a write's block")[*at..*at + block],
                    BlockBytes::Own(bytes) => &bytes[..],
                };
                let result = self.store_block(lbn, bytes, None);
                self.record_work(Mode::Inline, started);
                result?;
            }
            return Ok(());
        }
        // The workers outlive this call's borrow of the write's bytes: one
        // copy of the whole write, shared by its blocks (one allocation a
        // write, not one a block).
        let request: Option<Arc<[u8]>> = blocks
            .iter()
            .any(|(_, bytes)| matches!(bytes, BlockBytes::Request(_)))
            .then(|| Arc::from(data.expect("a write's block")));
        let done = Arc::new(Done {
            state: Mutex::new((blocks.len(), None)),
            cond: Condvar::new(),
        });
        {
            let mut jobs = self.jobs.lock();
            for (lbn, bytes) in blocks {
                let (buf, at) = match bytes {
                    BlockBytes::Request(at) => (request.clone().expect("copied above"), at),
                    BlockBytes::Own(bytes) => (Arc::from(bytes), 0),
                };
                jobs.push(
                    Urgency::of_reduction(Mode::Inline),
                    Job::Inline {
                        lbn,
                        buf,
                        at,
                        done: done.clone(),
                    },
                );
            }
            self.jobs_ready.notify_all();
        }
        let mut state = done.state.lock();
        while state.0 > 0 {
            done.cond.wait(&mut state);
        }
        match state.1.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Fails when the device under the tier has stopped serving: blocks a
    /// reduced tier could answer from memory (zeroes, open packs) are not
    /// served from a tier whose device is gone, so the tier fails as one.
    fn check_alive(&self, op: &'static str, offset: u64, length: u64) -> DeviceResult<()> {
        match self.inner.failure() {
            None => Ok(()),
            Some(reason) => Err(DeviceError {
                device: self.name.clone(),
                op,
                offset_bytes: offset,
                length_bytes: length,
                kind: DeviceErrorKind::Gone,
                message: reason,
            }),
        }
    }

    fn logical_bytes(&self) -> u64 {
        self.geometry.logical_blocks * self.geometry.block_bytes
    }

    /// From the block map: a block that maps no fragment (never written,
    /// trimmed, or written with zeroes, which zero elimination stores as
    /// nothing) is a hole; every other block is data, whole (the answer's
    /// granularity is the reduction block). `None` when the device below
    /// has failed.
    fn allocation(&self, offset: u64, length: u64) -> Option<Vec<super::AllocationRun>> {
        check_range(
            &self.name,
            "allocation",
            offset,
            length,
            self.logical_bytes(),
        )
        .ok()?;
        if self.inner.failure().is_some() {
            return None;
        }
        let block = self.geometry.block_bytes;
        let end = offset + length;
        let first = offset / block;
        let scan_end = end.div_ceil(block).min(first + ALLOCATION_SCAN_BLOCKS);
        let mut runs = super::AllocationRuns::default();
        let mut position = offset;
        let mut lbn = first;
        while lbn < scan_end {
            let count = (scan_end - lbn).min(ALLOCATION_LOCK_BLOCKS);
            let state = self.state.lock();
            for at in lbn..lbn + count {
                let block_end = ((at + 1) * block).min(end);
                runs.push(block_end - position, state.holds_data(at));
                position = block_end;
            }
            drop(state);
            lbn += count;
        }
        runs.push(end - position, true);
        Some(runs.into_runs())
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> DeviceResult<()> {
        check_range(
            &self.name,
            "read",
            offset,
            buf.len() as u64,
            self.logical_bytes(),
        )?;
        self.check_alive("read", offset, buf.len() as u64)?;
        let block = self.geometry.block_bytes;
        let first = offset / block;
        let end = (offset + buf.len() as u64).div_ceil(block);
        let mut lbn = first;
        while lbn < end {
            let count = (end - lbn).min(READ_CHUNK_BLOCKS);
            // Located together (one lock), so fragments laid out one after
            // another on the device are read with one request.
            let located: Vec<Located> = {
                let mut state = self.state.lock();
                (lbn..lbn + count).map(|at| state.locate(at).1).collect()
            };
            let result = self.read_located_run(offset, buf, lbn, &located);
            let pinned: Vec<u32> = located
                .iter()
                .filter_map(|located| match located {
                    Located::Device { pack, .. } => Some(*pack),
                    _ => None,
                })
                .collect();
            if !pinned.is_empty() {
                let mut state = self.state.lock();
                for pack in pinned {
                    state.unpin(pack);
                }
            }
            result?;
            lbn += count;
        }
        Ok(())
    }

    /// Fills the part of `buf` (a read at `offset`) that blocks `first..`
    /// cover from their locations; device fragments adjacent on the device
    /// are read with one request. Leaves the packs pinned.
    fn read_located_run(
        &self,
        offset: u64,
        buf: &mut [u8],
        first: u64,
        located: &[Located],
    ) -> DeviceResult<()> {
        let block = self.geometry.block_bytes;
        // Where block `lbn`'s bytes go in `buf`, and from where in the block.
        let read_end = offset + buf.len() as u64;
        let span = |lbn: u64| {
            let start = (lbn * block).max(offset);
            let stop = ((lbn + 1) * block).min(read_end);
            (
                (start - offset) as usize..(stop - offset) as usize,
                (start - lbn * block) as usize,
            )
        };
        let mut scratch = Vec::new();
        let mut run = Vec::new();
        let mut index = 0;
        while index < located.len() {
            let lbn = first + index as u64;
            let Located::Device {
                pack,
                offset: at,
                len,
            } = located[index]
            else {
                let (target, within) = span(lbn);
                let whole = target.len() == block as usize;
                let out = if whole {
                    &mut buf[target.clone()]
                } else {
                    scratch.resize(block as usize, 0);
                    &mut scratch[..]
                };
                match &located[index] {
                    Located::Zeroes => out.fill(0),
                    Located::Bytes(bytes) => self.decode(lbn, bytes, out)?,
                    Located::Shared { buf, offset, len } => {
                        self.decode(lbn, &buf[*offset as usize..(*offset + *len) as usize], out)?
                    }
                    Located::Device { .. } => unreachable!("handled below"),
                }
                if !whole {
                    buf[target.clone()].copy_from_slice(&scratch[within..within + target.len()]);
                }
                index += 1;
                continue;
            };
            // The run of fragments that follow this one on the device.
            let start = self.geometry.pack_offset(pack) + at;
            let mut stop = start + len;
            let mut next = index + 1;
            while next < located.len() && stop - start < READ_RUN_BYTES {
                match located[next] {
                    Located::Device { pack, offset, len }
                        if self.geometry.pack_offset(pack) + offset == stop =>
                    {
                        stop += len;
                        next += 1;
                    }
                    _ => break,
                }
            }
            run.resize((stop - start) as usize, 0);
            self.inner.read_at(start, &mut run)?;
            let mut from = 0usize;
            for (position, located) in located.iter().enumerate().take(next).skip(index) {
                let Located::Device { len, .. } = located else {
                    unreachable!("a run holds device fragments only")
                };
                let fragment = &run[from..from + *len as usize];
                from += *len as usize;
                let lbn = first + position as u64;
                let (target, within) = span(lbn);
                if target.len() == block as usize {
                    self.decode(lbn, fragment, &mut buf[target])?;
                } else {
                    scratch.resize(block as usize, 0);
                    self.decode(lbn, fragment, &mut scratch)?;
                    buf[target.clone()].copy_from_slice(&scratch[within..within + target.len()]);
                }
            }
            index = next;
        }
        Ok(())
    }

    // ---- flush and the journal ---------------------------------------------

    fn flush(&self) -> DeviceResult<()> {
        let mut journal = self.journal.lock();
        let (plan, checkpoint) = {
            let mut state = self.state.lock();
            let plan = state.begin_flush();
            let batch = layout::batch_bytes(plan.records.len());
            let checkpoint = (!plan.records.is_empty()
                && journal.used + batch > self.geometry.journal_bytes / 2)
                .then(|| (state.map.clone(), state.index.entries()));
            (plan, checkpoint)
        };
        let mut first_error = None;
        for write in plan.writes {
            let at = self.geometry.pack_offset(write.pack) + write.from;
            let result = self
                .inner
                .write_at(at, &write.buf[write.from as usize..write.to as usize]);
            if let Err(error) = &result {
                first_error.get_or_insert(error.clone());
            }
            let mut state = self.state.lock();
            state.write_done(write, result.is_ok());
            self.written.notify_all();
        }
        {
            let mut state = self.state.lock();
            while state.writes_before(plan.before_write) {
                self.written.wait(&mut state);
            }
        }
        let result = match first_error {
            Some(error) => Err(error),
            None => self.inner.flush(),
        }
        .and_then(|()| match checkpoint {
            Some((map, index)) => self.write_checkpoint(&mut journal, &map, &index),
            None if plan.records.is_empty() => Ok(()),
            None => self.append_batch(&mut journal, &plan.records),
        });
        match result {
            Ok(()) => {
                self.state.lock().end_flush(plan.pending);
                Ok(())
            }
            Err(error) => {
                self.state.lock().restore_records(plan.records);
                Err(error)
            }
        }
    }

    fn append_batch(&self, journal: &mut Journal, records: &[Record]) -> DeviceResult<()> {
        let bytes = layout::encode_batch(journal.sequence, records);
        let length = bytes.len() as u64;
        let mut position = journal.position;
        let mut used = journal.used;
        if position + length > self.geometry.journal_bytes {
            used += self.geometry.journal_bytes - position;
            position = 0;
        }
        self.inner
            .write_at(self.geometry.journal_offset() + position, &bytes)?;
        self.inner.flush()?;
        journal.position = position + length;
        journal.sequence += 1;
        journal.used = used + length;
        Ok(())
    }

    fn write_checkpoint(
        &self,
        journal: &mut Journal,
        map: &[u64],
        index: &[(codec::Fingerprint, u64)],
    ) -> DeviceResult<()> {
        let slot = 1 - journal.checkpoint_slot;
        // The newest entries that fit the checkpoint's room (memory may keep
        // more when `index_memory` grew after formatting).
        let room = self.geometry.index_capacity as usize;
        let index = &index[index.len().saturating_sub(room)..];
        let bytes = layout::encode_checkpoint(map, index);
        self.inner
            .write_at(self.geometry.checkpoint_offset(slot), &bytes)?;
        self.inner.flush()?;
        let superblock = Superblock {
            geometry: self.geometry,
            sequence: journal.superblock_sequence + 1,
            checkpoint_slot: slot,
            journal_position: journal.position,
            journal_sequence: journal.sequence,
        };
        let copy = superblock.sequence % 2;
        self.inner.write_at(
            layout::superblock_offset(self.geometry.device_bytes, copy),
            &superblock.encode(),
        )?;
        self.inner.flush()?;
        journal.superblock_sequence = superblock.sequence;
        journal.checkpoint_slot = slot;
        journal.used = 0;
        Ok(())
    }

    /// A checkpoint of the state as it is (at open, after a replay: nothing
    /// is unflushed yet).
    fn checkpoint_now(&self) -> DeviceResult<()> {
        let mut journal = self.journal.lock();
        let (map, index) = {
            let state = self.state.lock();
            (state.map.clone(), state.index.entries())
        };
        self.write_checkpoint(&mut journal, &map, &index)
    }

    fn status(&self) -> ReductionStatus {
        let switch = self.switch.lock();
        let config = switch.config();
        let (mode, switches, utilisation, last_switch) = (
            switch.mode(),
            switch.switches(),
            switch.utilisation(),
            switch.last_event(),
        );
        let setting = config.setting;
        let rule = config.rule;
        let post_work_ratio = switch.measured_post_work_ratio();
        let max_post_work_ratio = config.max_post_work_ratio();
        drop(switch);
        let state = self.state.lock();
        let block = self.geometry.block_bytes;
        let logical_bytes = (state.tallies.mapped_blocks + state.tallies.zero_blocks) * block;
        let physical_bytes = state.physical_bytes();
        ReductionStatus {
            mode: mode.name().to_string(),
            setting: setting.name().to_string(),
            rule: match (setting, rule) {
                (ModeSetting::Auto, SwitchRule::Double) => "double",
                (ModeSetting::Auto, SwitchRule::Single) => "single",
                _ => "fixed",
            }
            .to_string(),
            logical_bytes,
            physical_bytes,
            ratio: if logical_bytes == 0 {
                0.0
            } else {
                logical_bytes as f64 / physical_bytes.max(block) as f64
            },
            zero_bytes: state.tallies.zero_blocks * block,
            dedup_bytes: state.tallies.dedup_blocks * block,
            compress_saved_bytes: state.tallies.compress_saved_bytes,
            switches,
            staged_bytes: state.staging.staged_blocks * block,
            utilisation,
            workers: self.options.workers,
            capacity_bytes: self.geometry.packs_bytes(),
            free_bytes: state.free_packs() * self.geometry.pack_bytes,
            index_entries: state.index.len() as u64,
            index_capacity: state.index.capacity() as u64,
            index_bytes: state.index.allocated_bytes(),
            dedup_hits: state.tallies.dedup_hits,
            dedup_mismatches: state.tallies.dedup_mismatches,
            stage_overflows: state.staging.overflows,
            dead_bytes: physical_bytes.saturating_sub(state.tallies.fragment_bytes),
            cleaner_passes: state.cleaner.passes,
            cleaned_packs: state.cleaner.packs_cleaned,
            cleaner_relocated_bytes: state.cleaner.relocated_bytes,
            cleaner_relocated_blocks: state.cleaner.relocated_blocks,
            last_switch,
            post_work_ratio,
            max_post_work_ratio,
        }
    }
}

impl BlockDevice for ReducedDevice {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn size_bytes(&self) -> u64 {
        self.shared.logical_bytes()
    }

    fn is_volatile(&self) -> bool {
        self.shared.inner.is_volatile()
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        self.shared.read(offset_bytes, buf)
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.shared
            .write("write", offset_bytes, data.len() as u64, Some(data), ZERO)
    }

    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.write_at(offset_bytes, data)?;
        self.shared.flush()
    }

    fn flush(&self) -> DeviceResult<()> {
        self.shared.flush()
    }

    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.shared
            .write("discard", offset_bytes, length_bytes, None, UNMAPPED)
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.shared
            .write("write_zeroes", offset_bytes, length_bytes, None, ZERO)
    }

    fn reduction(&self) -> Option<ReductionStatus> {
        Some(self.shared.status())
    }

    /// From the block map, not the device below (whose holes say nothing
    /// about logical blocks): see `Shared::allocation`.
    fn allocation(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Option<Vec<super::AllocationRun>> {
        self.shared.allocation(offset_bytes, length_bytes)
    }

    fn failure(&self) -> Option<String> {
        self.shared.inner.failure()
    }

    fn backing_warning(&self) -> Option<String> {
        self.shared.inner.backing_warning()
    }

    fn check_backing(&self) -> Option<String> {
        self.shared.inner.check_backing()
    }
}

#[cfg(test)]
mod tests;
