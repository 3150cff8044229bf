//! Replicas in free HDD space, live (paper 003; `docs/replicas.md`): a
//! device-chain layer that presents a tier's extents unchanged and keeps,
//! in extents no user data occupies, copies of far-apart extents that are
//! read together, so the head travels less.
//!
//! The decisions are [`tierd_core::replica::ReplicaManager`]'s, the same
//! code `tierd sim --replicas` runs; this layer feeds it every user read,
//! write and trim, routes reads where it says, runs its copy jobs in idle
//! time and makes its state durable ([`layout`]: an allocation bitmap and
//! the current copies, journaled on the tier's own device).
//!
//! The rules that keep a user's data exactly theirs (each a test in
//! `tests.rs`):
//! 1. **Free reads zeroes.** An extent the map holds free is never read
//!    from the device: it reads as zeroes (a replica may be there). A
//!    write into a free extent that does not cover it whole writes the
//!    rest of the extent with zeroes in the same IO, so an allocated
//!    extent never shows a replica's bytes.
//! 2. **Allocation after data.** A write's extents are journaled as
//!    allocated at the next flush, after the device flush that makes the
//!    data durable (a crash before it: the extent is free and reads zeroes,
//!    which is the write not having happened). A FUA write into free space
//!    commits at once.
//! 3. **Drop before overwrite.** A write, trim or zeroing that changes a
//!    primary with current copies, or lands in free space holding a current
//!    copy, first journals the copies as dropped, durably; only then is it
//!    issued. Routing stops using them at once.
//! 4. **Copies current after flush.** A copy job reads the primary (never
//!    while a user write to it is in flight), writes the target, and the
//!    copy is journaled as current only after a device flush and only if
//!    no write dropped it meanwhile. After a crash only journaled copies
//!    exist.
//! 5. **No write under a reader.** A write to an extent waits while a read
//!    routed to a replica there, or a copy job's write to it, is in flight.

mod layout;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};
use tierd_common::clock::Clock;
use tierd_common::hash::FastMap;
use tierd_core::replica::{Fragment, ReplicaConfig, ReplicaManager, ReplicaStats};

use self::layout::{Geometry, Record, Snapshot, Superblock};
use super::{check_range, AllocationRun, BlockDevice, DeviceError, DeviceErrorKind, DeviceResult};

pub use self::layout::Geometry as ReplicaGeometry;

/// Settings of a replicated tier (`replicas = { … }` on a tier).
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaOptions {
    pub manager: ReplicaConfig,
    /// Copies run once the tier has had no user IO for this long.
    pub idle_ns: u64,
    /// Copies made before their journal commit (a device flush).
    pub copies_per_commit: usize,
}

impl Default for ReplicaOptions {
    fn default() -> ReplicaOptions {
        ReplicaOptions {
            manager: ReplicaConfig {
                reads_allocate: false,
                ..ReplicaConfig::default()
            },
            idle_ns: 100_000_000,
            copies_per_commit: 16,
        }
    }
}

/// The bytes a device of `device_bytes` presents with `extent_bytes`
/// extents, or why it cannot hold a replicated tier.
pub fn presented_bytes(device_bytes: u64, extent_bytes: u64) -> Result<u64, String> {
    Geometry::plan(device_bytes, extent_bytes).map(|geometry| geometry.data_bytes())
}

/// A point-in-time view for `tierd status` and the metrics.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReplicaView {
    pub extent_bytes: u64,
    pub extents: u64,
    pub allocated_extents: u64,
    /// Extents with at least one current copy.
    pub replicated_extents: u64,
    pub current_copies: u64,
    pub pending_copies: u64,
    /// Extents holding a replica or reserved for one.
    pub replica_extents: u64,
    pub max_copies: u32,
    pub max_share: f64,
    pub contiguous_sequences: bool,
    pub sessions: u64,
    pub groups: u64,
    pub recurrences: u64,
    pub placements: u64,
    pub layouts: u64,
    pub copies_made: u64,
    pub copies_cancelled: u64,
    pub copy_bytes: u64,
    pub dropped_by_writes: u64,
    pub dropped_by_reclaim: u64,
    pub dropped_by_trims: u64,
    pub refused_for_space: u64,
    pub reads_routed: u64,
    pub reads_from_replicas: u64,
    pub bytes_from_replicas: u64,
    /// Sum over reads served from replicas of (distance from the head to
    /// the primary − distance to the copy read): the head travel saved.
    pub seek_distance_saved_bytes: i64,
    /// Copies found in the journal at open that contradicted the map (not
    /// used).
    pub refused_at_open: u64,
    pub journal_commits: u64,
    pub checkpoints: u64,
}

/// The replica layer over a tier's device (see the module docs).
pub struct ReplicaDevice {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

struct Shared {
    name: String,
    inner: Arc<dyn BlockDevice>,
    geometry: Geometry,
    options: ReplicaOptions,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Signalled when in-flight reads, writes or copies end.
    changed: Condvar,
    journal: Mutex<Journal>,
    last_user_io_ns: AtomicU64,
    /// Where the last user read ended on the device (a head estimate for a
    /// disk without a model).
    head_bytes: AtomicU64,
    seek_saved_bytes: AtomicI64,
    commits: AtomicU64,
    checkpoints: AtomicU64,
    refused_at_open: u64,
    stop: Mutex<bool>,
    wake: Condvar,
    stopping: AtomicBool,
}

struct State {
    manager: ReplicaManager,
    /// Allocation changes of completed user IO, journaled at the next commit
    /// (after the device flush that makes that IO durable).
    pending: Vec<Record>,
    /// Extents allocated by completed IO whose `Allocate` is not journaled
    /// yet (in `pending` or being committed): a FUA write to one must
    /// commit, or a crash frees the extent and loses the write.
    unjournaled: FastMap<u64, ()>,
    /// Copies current in memory, journaled at the next commit if still
    /// current then.
    uncommitted: Vec<(u64, u64)>,
    /// Extent → user writes (and trims) in flight.
    writes_in_flight: FastMap<u64, u32>,
    /// Replica extent → reads routed to it in flight.
    replica_reads: FastMap<u64, u32>,
    /// Free extents a write is filling whole (its data and zeroes) right
    /// now: every other IO to them waits, or it could see what was there
    /// before (a replica's bytes) or be overwritten by the zeroes.
    filling: FastMap<u64, ()>,
    /// Scratch for the dropped-current log.
    dropped: Vec<u64>,
}

struct Journal {
    /// Next batch's sequence.
    sequence: u64,
    /// Next batch's byte position in the ring.
    position: u64,
    superblock_sequence: u64,
    slot: u64,
    durable: Durable,
}

/// The state the journal and checkpoint on the device describe.
struct Durable {
    bitmap: Vec<u64>,
    /// Target → primary.
    copies: FastMap<u64, u64>,
}

impl Durable {
    fn apply(&mut self, record: Record, extents: u64) -> Result<(), String> {
        let range_ok =
            |first: u64, count: u64| first.checked_add(count).is_some_and(|end| end <= extents);
        match record {
            Record::Allocate { first, count } | Record::Free { first, count } => {
                if !range_ok(first, count) {
                    return Err(format!("{record:?} is beyond the tier's {extents} extents"));
                }
                let value = matches!(record, Record::Allocate { .. });
                for extent in first..first + count {
                    let word = &mut self.bitmap[(extent / 64) as usize];
                    if value {
                        *word |= 1 << (extent % 64);
                    } else {
                        *word &= !(1 << (extent % 64));
                    }
                }
            }
            Record::Copy { primary, target } => {
                if primary >= extents || target >= extents {
                    return Err(format!("{record:?} is beyond the tier's {extents} extents"));
                }
                self.copies.insert(target, primary);
            }
            Record::Drop { target } => {
                self.copies.remove(&target);
            }
        }
        Ok(())
    }

    fn snapshot(&self) -> Snapshot {
        let mut copies: Vec<(u64, u64)> = self
            .copies
            .iter()
            .map(|(target, primary)| (*primary, *target))
            .collect();
        copies.sort_unstable();
        Snapshot {
            bitmap: self.bitmap.clone(),
            copies,
        }
    }
}

fn meta_error(name: &str, what: &str, error: DeviceError) -> String {
    format!("replicated tier {name}: {what}: {error}")
}

impl ReplicaDevice {
    /// Opens the replica layer over `inner`. `format`: a tier whose device
    /// holds no replicated tier yet may be formatted (a new tier); else
    /// that is refused.
    pub fn open(
        name: impl Into<String>,
        inner: Arc<dyn BlockDevice>,
        options: ReplicaOptions,
        clock: Arc<dyn Clock>,
        format: bool,
    ) -> Result<ReplicaDevice, String> {
        let name = name.into();
        let mut options = options;
        options.manager.reads_allocate = false;
        options
            .manager
            .validate()
            .map_err(|error| format!("tier {name}: replicas: {error}"))?;
        let device_bytes = inner.size_bytes();
        let planned = Geometry::plan(device_bytes, options.manager.extent_bytes)
            .map_err(|error| format!("tier {name}: {error}"))?;
        let mut a = vec![0u8; layout::SUPERBLOCK_BYTES as usize];
        let mut b = vec![0u8; layout::SUPERBLOCK_BYTES as usize];
        inner
            .read_at(layout::superblock_offset(device_bytes, 0), &mut a)
            .map_err(|error| meta_error(&name, "reading superblock A", error))?;
        inner
            .read_at(layout::superblock_offset(device_bytes, 1), &mut b)
            .map_err(|error| meta_error(&name, "reading superblock B", error))?;
        let superblock = super::journal_batch::newer(
            Superblock::decode(&a),
            Superblock::decode(&b),
            |superblock| superblock.sequence,
        );
        let superblock = match superblock {
            Some(superblock) => superblock,
            None if Superblock::has_magic(&a) || Superblock::has_magic(&b) => {
                return Err(format!(
                    "both superblocks of replicated tier {name} are damaged (last {} bytes of its \
                     device); restore the tier file from a backup",
                    2 * layout::SUPERBLOCK_BYTES
                ));
            }
            None if !format => {
                return Err(format!(
                    "tier {name} is configured with replicas but its device holds no replicated tier \
                     (it was used without replicas before, and its end holds user data); replicas can \
                     be turned on only for a new tier: remove `replicas` or give the tier a new file"
                ));
            }
            None => format_device(&name, &*inner, planned)?,
        };
        if superblock.geometry != planned {
            return Err(format!(
                "replicated tier {name} was formatted with other settings (device {} bytes, extent \
                 {} bytes; configured: device {} bytes, extent {} bytes); put the old `size` and \
                 `replicas.extent` back (a replicated tier's geometry cannot change)",
                superblock.geometry.device_bytes,
                superblock.geometry.extent_bytes,
                planned.device_bytes,
                planned.extent_bytes
            ));
        }
        let geometry = superblock.geometry;
        let (journal, replayed) = recover(&name, &*inner, &superblock)?;
        let allocated = set_bits(&journal.durable.bitmap, geometry.data_extents);
        let copies: Vec<(u64, u64)> = {
            let mut copies: Vec<(u64, u64)> = journal
                .durable
                .copies
                .iter()
                .map(|(target, primary)| (*primary, *target))
                .collect();
            copies.sort_unstable();
            copies
        };
        let (mut manager, refused) = ReplicaManager::restore(
            options.manager.clone(),
            geometry.data_bytes(),
            allocated,
            copies,
        )
        .map_err(|error| format!("replicated tier {name}: its map: {error}"))?;
        manager.log_dropped_current();
        if refused > 0 {
            tracing::warn!(
                tier = %name,
                refused,
                "replica journal names copies that contradict the allocation map; they are not used"
            );
        }
        tracing::info!(
            tier = %name,
            extents = geometry.data_extents,
            allocated = manager.status().allocated_extents,
            copies = manager.status().current_copies,
            journal_batches = replayed,
            "replicated tier opened"
        );
        let shared = Arc::new(Shared {
            name,
            inner,
            geometry,
            options,
            clock,
            state: Mutex::new(State {
                manager,
                pending: Vec::new(),
                unjournaled: FastMap::default(),
                uncommitted: Vec::new(),
                writes_in_flight: FastMap::default(),
                replica_reads: FastMap::default(),
                filling: FastMap::default(),
                dropped: Vec::new(),
            }),
            changed: Condvar::new(),
            journal: Mutex::new(journal),
            last_user_io_ns: AtomicU64::new(0),
            head_bytes: AtomicU64::new(0),
            seek_saved_bytes: AtomicI64::new(0),
            commits: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            refused_at_open: refused,
            stop: Mutex::new(false),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        let worker = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("replicas-{}", shared.name))
                .spawn(move || shared.copier())
                .map_err(|error| format!("cannot start the replica copier thread: {error}"))?
        };
        Ok(ReplicaDevice {
            shared,
            worker: Some(worker),
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.shared.geometry
    }

    /// Runs copy jobs now (whatever the idle time) until none is left or
    /// `max` are made, and commits them; returns how many were made.
    /// For tests and drills.
    pub fn run_copies_now(&self, max: usize) -> DeviceResult<usize> {
        self.shared.run_copies(max, true)
    }

    /// Writes a checkpoint now (tests; the journal does it when its ring is
    /// full).
    pub fn checkpoint_now(&self) -> DeviceResult<()> {
        let mut journal = self.shared.journal.lock();
        self.shared.checkpoint(&mut journal)
    }

    /// The manager's counters.
    pub fn manager_stats(&self) -> ReplicaStats {
        self.shared.state.lock().manager.stats()
    }
}

impl Drop for ReplicaDevice {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// The extent numbers of the set bits.
fn set_bits(bitmap: &[u64], extents: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (index, word) in bitmap.iter().enumerate() {
        let mut word = *word;
        while word != 0 {
            let bit = word.trailing_zeros() as u64;
            let extent = index as u64 * 64 + bit;
            if extent < extents {
                out.push(extent);
            }
            word &= word - 1;
        }
    }
    out
}

fn format_device(
    name: &str,
    inner: &dyn BlockDevice,
    geometry: Geometry,
) -> Result<Superblock, String> {
    let snapshot = Snapshot {
        bitmap: vec![0; geometry.data_extents.div_ceil(64) as usize],
        copies: Vec::new(),
    };
    let write = |offset: u64, bytes: &[u8], what: &str| {
        inner
            .write_at(offset, bytes)
            .map_err(|error| meta_error(name, what, error))
    };
    write(
        geometry.checkpoint_offset(0),
        &layout::encode_checkpoint(1, &snapshot),
        "formatting: writing the first checkpoint",
    )?;
    // No batch of an earlier life of the file may look like the journal's
    // first.
    write(
        geometry.journal_offset(),
        &vec![0u8; layout::META_ALIGN_BYTES as usize],
        "formatting: clearing the journal",
    )?;
    inner
        .flush()
        .map_err(|error| meta_error(name, "formatting: flush", error))?;
    let superblock = Superblock {
        geometry,
        sequence: 1,
        checkpoint_slot: 0,
        journal_sequence: 1,
    };
    write(
        layout::superblock_offset(geometry.device_bytes, 1),
        &superblock.encode(),
        "formatting: writing the superblock",
    )?;
    inner
        .flush()
        .map_err(|error| meta_error(name, "formatting: flush", error))?;
    Ok(superblock)
}

/// Loads the current checkpoint and replays the journal after it.
fn recover(
    name: &str,
    inner: &dyn BlockDevice,
    superblock: &Superblock,
) -> Result<(Journal, u64), String> {
    let geometry = superblock.geometry;
    let offset = geometry.checkpoint_offset(superblock.checkpoint_slot);
    let mut head = vec![0u8; layout::META_ALIGN_BYTES as usize];
    inner
        .read_at(offset, &mut head)
        .map_err(|error| meta_error(name, "reading the checkpoint", error))?;
    let damaged = |why: String| {
        format!(
            "replicated tier {name}: checkpoint {} is damaged ({why}); restore the tier file from a \
             backup",
            superblock.checkpoint_slot
        )
    };
    let (_, payload) = layout::checkpoint_header(&head, &geometry).map_err(damaged)?;
    let total = (layout::CHECKPOINT_HEADER_BYTES + payload).div_ceil(layout::META_ALIGN_BYTES)
        * layout::META_ALIGN_BYTES;
    let mut bytes = vec![0u8; total as usize];
    inner
        .read_at(offset, &mut bytes)
        .map_err(|error| meta_error(name, "reading the checkpoint", error))?;
    let (_, snapshot) = layout::decode_checkpoint(&bytes, &geometry).map_err(damaged)?;
    let mut durable = Durable {
        bitmap: snapshot.bitmap,
        copies: snapshot
            .copies
            .into_iter()
            .map(|(primary, target)| (target, primary))
            .collect(),
    };
    let mut position = 0;
    let mut sequence = superblock.journal_sequence;
    let mut replayed = 0;
    let ring = geometry.journal_offset();
    loop {
        if position + layout::META_ALIGN_BYTES > geometry.journal_bytes {
            break;
        }
        let mut first = vec![0u8; layout::META_ALIGN_BYTES as usize];
        inner
            .read_at(ring + position, &mut first)
            .map_err(|error| meta_error(name, "reading the journal", error))?;
        let Some(count) = layout::batch_header(&first, sequence) else {
            break;
        };
        let bytes = layout::batch_bytes(count.min(geometry.journal_bytes as usize as u64) as usize);
        if count > geometry.journal_bytes / layout::RECORD_BYTES
            || position + bytes > geometry.journal_bytes
        {
            break;
        }
        let mut batch = vec![0u8; bytes as usize];
        inner
            .read_at(ring + position, &mut batch)
            .map_err(|error| meta_error(name, "reading the journal", error))?;
        let Some(records) = layout::decode_batch(&batch) else {
            break;
        };
        for record in records {
            durable
                .apply(record, geometry.data_extents)
                .map_err(|why| format!("replicated tier {name}: journal batch {sequence}: {why}; restore the tier file from a backup"))?;
        }
        position += bytes;
        sequence += 1;
        replayed += 1;
    }
    Ok((
        Journal {
            sequence,
            position,
            superblock_sequence: superblock.sequence,
            slot: superblock.checkpoint_slot,
            durable,
        },
        replayed,
    ))
}

/// Extent ranges `[first, first + count)` of the listed extents, in order.
fn ranges(extents: impl IntoIterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for extent in extents {
        match out.last_mut() {
            Some((first, count)) if *first + *count == extent => *count += 1,
            _ => out.push((extent, 1)),
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Write { durable: bool },
    Zeroes,
    Discard,
}

impl Shared {
    fn extent_bytes(&self) -> u64 {
        self.geometry.extent_bytes
    }

    fn extents_of(&self, offset_bytes: u64, length_bytes: u64) -> std::ops::Range<u64> {
        let size = self.extent_bytes();
        offset_bytes / size..(offset_bytes + length_bytes.max(1)).div_ceil(size)
    }

    fn touch(&self) -> u64 {
        let now = self.clock.now_ns();
        self.last_user_io_ns.store(now, Ordering::Relaxed);
        now
    }

    fn error(
        &self,
        op: &'static str,
        offset_bytes: u64,
        length_bytes: u64,
        message: String,
    ) -> DeviceError {
        DeviceError {
            device: self.name.clone(),
            op,
            offset_bytes,
            length_bytes,
            kind: DeviceErrorKind::Io(libc::EIO),
            message,
        }
    }

    // ----- reads ---------------------------------------------------------

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        let length_bytes = buf.len() as u64;
        check_range(
            &self.name,
            "read",
            offset_bytes,
            length_bytes,
            self.geometry.data_bytes(),
        )?;
        if length_bytes == 0 {
            return Ok(());
        }
        let now = self.touch();
        let mut fragments: Vec<Fragment> = Vec::new();
        let mut free: Vec<bool> = Vec::new();
        let head = self.head_bytes.load(Ordering::Relaxed);
        {
            let mut state = self.state.lock();
            while self
                .extents_of(offset_bytes, length_bytes)
                .any(|extent| state.filling.contains_key(&extent))
            {
                self.changed.wait(&mut state);
            }
            state.manager.on_read(now, offset_bytes, length_bytes);
            let inner = &self.inner;
            state.manager.route_read(
                offset_bytes,
                length_bytes,
                |at, length| {
                    inner
                        .read_cost_hint_ns(at, length)
                        .unwrap_or_else(|| at.abs_diff(head) as f64)
                },
                &mut fragments,
            );
            for extent in self.extents_of(offset_bytes, length_bytes) {
                free.push(!state.manager.extent_allocated(extent));
            }
            for fragment in fragments.iter().filter(|fragment| fragment.replica) {
                for extent in self.extents_of(fragment.device_offset, fragment.length_bytes) {
                    *state.replica_reads.entry(extent).or_insert(0) += 1;
                }
            }
        }
        let result = self.read_fragments(offset_bytes, buf, &fragments, &free, head);
        if fragments.iter().any(|fragment| fragment.replica) {
            let mut state = self.state.lock();
            for fragment in fragments.iter().filter(|fragment| fragment.replica) {
                for extent in self.extents_of(fragment.device_offset, fragment.length_bytes) {
                    if let Some(count) = state.replica_reads.get_mut(&extent) {
                        *count -= 1;
                        if *count == 0 {
                            state.replica_reads.remove(&extent);
                        }
                    }
                }
            }
            drop(state);
            self.changed.notify_all();
        }
        result
    }

    fn read_fragments(
        &self,
        offset_bytes: u64,
        buf: &mut [u8],
        fragments: &[Fragment],
        free: &[bool],
        mut head: u64,
    ) -> DeviceResult<()> {
        let size = self.extent_bytes();
        let first_extent = offset_bytes / size;
        let mut logical = offset_bytes;
        let mut at = 0usize;
        for fragment in fragments {
            let length = fragment.length_bytes as usize;
            let out = &mut buf[at..at + length];
            if fragment.replica {
                self.inner.read_at(fragment.device_offset, out)?;
                let saved =
                    logical.abs_diff(head) as i64 - fragment.device_offset.abs_diff(head) as i64;
                self.seek_saved_bytes.fetch_add(saved, Ordering::Relaxed);
                head = fragment.device_offset + fragment.length_bytes;
            } else {
                // Per run of extents that are all free (zeroes) or all
                // allocated (one device read).
                let mut done = 0u64;
                while done < fragment.length_bytes {
                    let position = fragment.device_offset + done;
                    let extent = position / size;
                    let is_free = free[(extent - first_extent) as usize];
                    let mut end =
                        ((extent + 1) * size).min(fragment.device_offset + fragment.length_bytes);
                    while end < fragment.device_offset + fragment.length_bytes
                        && free[(end / size - first_extent) as usize] == is_free
                    {
                        end = ((end / size + 1) * size)
                            .min(fragment.device_offset + fragment.length_bytes);
                    }
                    let part = &mut out[done as usize..(end - fragment.device_offset) as usize];
                    if is_free {
                        part.fill(0);
                    } else {
                        self.inner.read_at(position, part)?;
                        head = end;
                    }
                    done = end - fragment.device_offset;
                }
            }
            logical += fragment.length_bytes;
            at += length;
        }
        self.head_bytes.store(head, Ordering::Relaxed);
        Ok(())
    }

    // ----- writes, zeroing, trims ------------------------------------------

    fn change(
        &self,
        change: Change,
        offset_bytes: u64,
        length_bytes: u64,
        data: Option<&[u8]>,
    ) -> DeviceResult<()> {
        let op = match change {
            Change::Write { .. } => "write",
            Change::Zeroes => "write_zeroes",
            Change::Discard => "discard",
        };
        check_range(
            &self.name,
            op,
            offset_bytes,
            length_bytes,
            self.geometry.data_bytes(),
        )?;
        if length_bytes == 0 {
            return Ok(());
        }
        self.touch();
        let size = self.extent_bytes();
        let range = self.extents_of(offset_bytes, length_bytes);
        let end_bytes = offset_bytes + length_bytes;
        let whole = |extent: u64| extent * size >= offset_bytes && (extent + 1) * size <= end_bytes;
        let mut state = self.state.lock();
        // Rule 5: no write under a replica read or a copy's write.
        loop {
            let busy = state
                .manager
                .copy_in_flight(offset_bytes, length_bytes)
                .is_some()
                || range.clone().any(|extent| {
                    state.replica_reads.contains_key(&extent) || state.filling.contains_key(&extent)
                });
            if !busy {
                break;
            }
            self.changed.wait(&mut state);
        }
        let was_free: Vec<bool> = range
            .clone()
            .map(|extent| !state.manager.extent_allocated(extent))
            .collect();
        match change {
            Change::Write { .. } => {
                state.manager.on_write(offset_bytes, length_bytes);
            }
            Change::Zeroes | Change::Discard => {
                state.manager.on_trim(offset_bytes, length_bytes);
            }
        }
        let mut dropped = std::mem::take(&mut state.dropped);
        state.manager.take_dropped_current(&mut dropped);
        for extent in range.clone() {
            *state.writes_in_flight.entry(extent).or_insert(0) += 1;
        }
        // Rule 1: partly covered free extents are written whole.
        let first = range.start;
        let last = range.end - 1;
        let expand_head = was_free[0] && !whole(first);
        let expand_tail = was_free[(last - first) as usize] && !whole(last);
        if expand_head {
            state.filling.insert(first, ());
        }
        if expand_tail {
            state.filling.insert(last, ());
        }
        drop(state);
        // Rule 3: copies this changes are dropped durably first.
        let mut result = Ok(());
        if !dropped.is_empty() {
            let records: Vec<Record> = dropped
                .iter()
                .map(|target| Record::Drop { target: *target })
                .collect();
            let mut journal = self.journal.lock();
            result = self.append(&mut journal, &records);
        }
        dropped.clear();
        let device_start = if expand_head {
            first * size
        } else {
            offset_bytes
        };
        let device_end = if expand_tail {
            (last + 1) * size
        } else {
            end_bytes
        };
        if result.is_ok() {
            result = match change {
                Change::Write { durable } => {
                    let data = data.unwrap_or(&[]);
                    if device_start == offset_bytes && device_end == end_bytes {
                        if durable {
                            self.inner.write_at_durable(offset_bytes, data)
                        } else {
                            self.inner.write_at(offset_bytes, data)
                        }
                    } else {
                        let mut buffer = vec![0u8; (device_end - device_start) as usize];
                        let at = (offset_bytes - device_start) as usize;
                        buffer[at..at + data.len()].copy_from_slice(data);
                        if durable {
                            self.inner.write_at_durable(device_start, &buffer)
                        } else {
                            self.inner.write_at(device_start, &buffer)
                        }
                    }
                }
                Change::Zeroes => self
                    .inner
                    .write_zeroes(device_start, device_end - device_start),
                Change::Discard => self.inner.discard(device_start, device_end - device_start),
            };
        }
        let mut state = self.state.lock();
        state.dropped = dropped;
        if expand_head {
            state.filling.remove(&first);
        }
        if expand_tail {
            state.filling.remove(&last);
        }
        for extent in range.clone() {
            if let Some(count) = state.writes_in_flight.get_mut(&extent) {
                *count -= 1;
                if *count == 0 {
                    state.writes_in_flight.remove(&extent);
                }
            }
        }
        if result.is_err() {
            // A failed IO into free space leaves it free (zeroes are what it
            // holds for the user; the device may hold part of the IO or
            // what was there before). Whole extents a failed zeroing or
            // trim freed stay free below: the map says so already.
            for extent in range.clone() {
                if was_free[(extent - first) as usize] {
                    state.manager.on_trim(extent * size, size);
                }
            }
            let mut ignored = Vec::new();
            state.manager.take_dropped_current(&mut ignored);
        }
        {
            // Rule 2: what the completed IO did to the map, for the next
            // commit (a failed one: only the whole extents a zeroing or trim
            // freed).
            let (allocate, free): (Vec<u64>, Vec<u64>) = match change {
                _ if result.is_err() => (
                    Vec::new(),
                    match change {
                        Change::Write { .. } => Vec::new(),
                        Change::Zeroes | Change::Discard => range
                            .clone()
                            .filter(|extent| whole(*extent) && !was_free[(extent - first) as usize])
                            .collect(),
                    },
                ),
                Change::Write { .. } => (
                    range
                        .clone()
                        .filter(|extent| was_free[(extent - first) as usize])
                        .collect(),
                    Vec::new(),
                ),
                Change::Zeroes | Change::Discard => (
                    range
                        .clone()
                        .filter(|extent| !whole(*extent) && was_free[(extent - first) as usize])
                        .collect(),
                    range.clone().filter(|extent| whole(*extent)).collect(),
                ),
            };
            for extent in &free {
                state.unjournaled.remove(extent);
            }
            for extent in &allocate {
                state.unjournaled.insert(*extent, ());
            }
            for (first, count) in ranges(free) {
                state.pending.push(Record::Free { first, count });
            }
            for (first, count) in ranges(allocate) {
                state.pending.push(Record::Allocate { first, count });
            }
        }
        drop(state);
        self.changed.notify_all();
        result?;
        if change == (Change::Write { durable: true }) {
            // A FUA write into an extent whose allocation is not journaled
            // yet (this write's or an earlier one's) is durable only with
            // it. The journal lock first: a commit in progress may hold
            // that allocation (and put it back if it fails).
            let needed = {
                let _journal = self.journal.lock();
                let state = self.state.lock();
                range
                    .clone()
                    .any(|extent| state.unjournaled.contains_key(&extent))
            };
            if needed {
                self.commit()?;
            }
        }
        Ok(())
    }

    // ----- the journal -------------------------------------------------------

    /// Makes every completed user IO durable with the map changes it made,
    /// and journals the copies made since the last commit that are still
    /// current.
    fn commit(&self) -> DeviceResult<()> {
        let mut journal = self.journal.lock();
        let (records, copies) = {
            let mut state = self.state.lock();
            let mut records = std::mem::take(&mut state.pending);
            // Journaled by this commit (or put back if it fails).
            state.unjournaled.clear();
            let copies = std::mem::take(&mut state.uncommitted);
            for (primary, target) in &copies {
                if state.manager.is_current(*primary, *target) {
                    records.push(Record::Copy {
                        primary: *primary,
                        target: *target,
                    });
                }
            }
            (records, copies)
        };
        let result = self.inner.flush().and_then(|()| {
            if records.is_empty() {
                Ok(())
            } else {
                self.append(&mut journal, &records)
            }
        });
        if result.is_err() {
            // Nothing of this batch is known durable: keep it for the next
            // commit (the copies are checked again then).
            let mut state = self.state.lock();
            for record in &records {
                if let Record::Allocate { first, count } = record {
                    for extent in *first..first + count {
                        state.unjournaled.insert(extent, ());
                    }
                }
            }
            let later = std::mem::take(&mut state.pending);
            state.pending = records
                .into_iter()
                .filter(|record| !matches!(record, Record::Copy { .. }))
                .chain(later)
                .collect();
            let later = std::mem::take(&mut state.uncommitted);
            state.uncommitted = copies.into_iter().chain(later).collect();
        } else {
            self.commits.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Appends `records` to the journal ring, durably, in batches;
    /// checkpoints first when the ring has no room.
    fn append(
        &self,
        journal: &mut MutexGuard<'_, Journal>,
        records: &[Record],
    ) -> DeviceResult<()> {
        let most = ((self.geometry.journal_bytes / 4 - layout::BATCH_HEADER_BYTES)
            / layout::RECORD_BYTES) as usize;
        for chunk in records.chunks(most.max(1)) {
            let bytes = layout::encode_batch(journal.sequence, chunk);
            if journal.position + bytes.len() as u64 > self.geometry.journal_bytes {
                self.checkpoint(journal)?;
            }
            let offset = self.geometry.journal_offset() + journal.position;
            self.inner.write_at_durable(offset, &bytes)?;
            journal.position += bytes.len() as u64;
            journal.sequence += 1;
            for record in chunk {
                journal
                    .durable
                    .apply(*record, self.geometry.data_extents)
                    .map_err(|why| self.error("journal", offset, bytes.len() as u64, why))?;
            }
        }
        Ok(())
    }

    /// Writes the journaled state to the slot not in use, then the
    /// superblock that makes it current with an empty journal.
    fn checkpoint(&self, journal: &mut MutexGuard<'_, Journal>) -> DeviceResult<()> {
        let slot = 1 - journal.slot;
        let bytes =
            layout::encode_checkpoint(journal.superblock_sequence + 1, &journal.durable.snapshot());
        self.inner
            .write_at(self.geometry.checkpoint_offset(slot), &bytes)?;
        self.inner.flush()?;
        let superblock = Superblock {
            geometry: self.geometry,
            sequence: journal.superblock_sequence + 1,
            checkpoint_slot: slot,
            journal_sequence: journal.sequence,
        };
        self.inner.write_at_durable(
            layout::superblock_offset(self.geometry.device_bytes, superblock.sequence % 2),
            &superblock.encode(),
        )?;
        journal.superblock_sequence = superblock.sequence;
        journal.slot = slot;
        journal.position = 0;
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    // ----- copies ------------------------------------------------------------

    fn copier(self: Arc<Shared>) {
        let poll = Duration::from_nanos((self.options.idle_ns / 2).clamp(1_000_000, 50_000_000));
        loop {
            {
                let mut stop = self.stop.lock();
                if *stop {
                    return;
                }
                self.wake.wait_for(&mut stop, poll);
                if *stop {
                    return;
                }
            }
            if let Err(error) = self.run_copies(self.options.copies_per_commit, false) {
                tracing::warn!(tier = %self.name, %error, "replica copy failed; copies pause until the next idle moment");
            }
        }
    }

    fn idle(&self) -> bool {
        let now = self.clock.now_ns();
        now.saturating_sub(self.last_user_io_ns.load(Ordering::Relaxed)) >= self.options.idle_ns
    }

    fn run_copies(&self, max: usize, force: bool) -> DeviceResult<usize> {
        let size = self.extent_bytes();
        let mut made = 0;
        let mut buffer = vec![0u8; size as usize];
        while made < max && !self.stopping.load(Ordering::Relaxed) {
            if !force && !self.idle() {
                break;
            }
            let job = {
                let mut state = self.state.lock();
                let now = self.clock.now_ns();
                let Some(job) = state.manager.next_job(now) else {
                    break;
                };
                // Never read a primary under a user write to it, nor write
                // a target a read routed to its old copy is still reading.
                while state
                    .writes_in_flight
                    .contains_key(&(job.source_offset / size))
                    || state
                        .replica_reads
                        .contains_key(&(job.target_offset / size))
                {
                    self.changed.wait(&mut state);
                }
                job
            };
            let result = self
                .inner
                .read_at(job.source_offset, &mut buffer)
                .and_then(|()| self.inner.write_at(job.target_offset, &buffer));
            let mut state = self.state.lock();
            let current = state.manager.job_done(job.id);
            match (&result, current) {
                (Ok(()), true) => {
                    state
                        .uncommitted
                        .push((job.source_offset / size, job.target_offset / size));
                    made += 1;
                }
                (Err(_), true) => {
                    // The copy is not there: drop it (a trim of its free
                    // space does exactly that).
                    state.manager.on_trim(job.target_offset, size);
                    let mut dropped = Vec::new();
                    state.manager.take_dropped_current(&mut dropped);
                }
                _ => {}
            }
            drop(state);
            self.changed.notify_all();
            result?;
        }
        let waiting = !self.state.lock().uncommitted.is_empty();
        if waiting {
            self.commit()?;
        }
        Ok(made)
    }

    fn view(&self) -> ReplicaView {
        let state = self.state.lock();
        let status = state.manager.status();
        let stats = state.manager.stats();
        let config = state.manager.config();
        ReplicaView {
            extent_bytes: self.geometry.extent_bytes,
            extents: status.extents,
            allocated_extents: status.allocated_extents,
            replicated_extents: status.replicated_extents,
            current_copies: status.current_copies,
            pending_copies: status.pending_copies,
            replica_extents: status.replica_extents,
            max_copies: config.max_copies,
            max_share: config.max_share,
            contiguous_sequences: config.contiguous_sequences,
            sessions: stats.sessions,
            groups: stats.groups,
            recurrences: stats.recurrences,
            placements: stats.placements,
            layouts: stats.layouts,
            copies_made: stats.copies_made,
            copies_cancelled: stats.copies_cancelled,
            copy_bytes: stats.copy_bytes,
            dropped_by_writes: stats.dropped_by_writes,
            dropped_by_reclaim: stats.dropped_by_reclaim,
            dropped_by_trims: stats.dropped_by_trims,
            refused_for_space: stats.refused_for_space,
            reads_routed: stats.reads_routed,
            reads_from_replicas: stats.reads_from_replicas,
            bytes_from_replicas: stats.bytes_from_replicas,
            seek_distance_saved_bytes: self.seek_saved_bytes.load(Ordering::Relaxed),
            refused_at_open: self.refused_at_open,
            journal_commits: self.commits.load(Ordering::Relaxed),
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
        }
    }

    fn allocation(&self, offset_bytes: u64, length_bytes: u64) -> Option<Vec<AllocationRun>> {
        check_range(
            &self.name,
            "block_status",
            offset_bytes,
            length_bytes,
            self.geometry.data_bytes(),
        )
        .ok()?;
        let size = self.extent_bytes();
        let state = self.state.lock();
        let mut runs: Vec<AllocationRun> = Vec::new();
        let end = offset_bytes + length_bytes;
        let mut at = offset_bytes;
        while at < end {
            let extent = at / size;
            let piece = ((extent + 1) * size).min(end) - at;
            let allocated = state.manager.extent_allocated(extent);
            match runs.last_mut() {
                Some(last) if last.allocated == allocated => last.length_bytes += piece,
                _ => runs.push(AllocationRun {
                    length_bytes: piece,
                    allocated,
                }),
            }
            at += piece;
        }
        Some(runs)
    }
}

impl BlockDevice for ReplicaDevice {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn size_bytes(&self) -> u64 {
        self.shared.geometry.data_bytes()
    }

    fn is_volatile(&self) -> bool {
        self.shared.inner.is_volatile()
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        self.shared.read(offset_bytes, buf)
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.shared.change(
            Change::Write { durable: false },
            offset_bytes,
            data.len() as u64,
            Some(data),
        )
    }

    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.shared.change(
            Change::Write { durable: true },
            offset_bytes,
            data.len() as u64,
            Some(data),
        )
    }

    fn flush(&self) -> DeviceResult<()> {
        self.shared.commit()
    }

    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.shared
            .change(Change::Discard, offset_bytes, length_bytes, None)
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.shared
            .change(Change::Zeroes, offset_bytes, length_bytes, None)
    }

    fn stats(&self) -> Option<super::DeviceStats> {
        self.shared.inner.stats()
    }

    fn smr_model_stats(&self) -> Option<tierd_device::model::smr::SmrStats> {
        self.shared.inner.smr_model_stats()
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

    fn release_cache(&self, offset_bytes: u64, length_bytes: u64) {
        self.shared.inner.release_cache(offset_bytes, length_bytes);
    }

    fn allocation(&self, offset_bytes: u64, length_bytes: u64) -> Option<Vec<AllocationRun>> {
        self.shared.allocation(offset_bytes, length_bytes)
    }

    fn replicas(&self) -> Option<ReplicaView> {
        Some(self.shared.view())
    }
}
