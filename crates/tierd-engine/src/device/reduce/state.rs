//! A reduced tier's in-memory state and every rule that changes it: the
//! block map, reference counts per fragment and per pack, the packs being
//! filled and written, which packs may be reused, the fingerprint index, the
//! records not yet journaled and the stage's queue. No IO here: the device
//! (`super::ReducedDevice`) holds this behind one lock, does the IO the
//! returned jobs describe, and reports back.
//!
//! The rules that keep data safe across a crash:
//! 1. A pack's bytes are written only past what is durable in it: a pack is
//!    appended to in memory and written as a whole when sealed, or its tail
//!    at a flush, after which its fill moves to the next 4 KiB so no later
//!    write touches a sector that holds flushed data.
//! 2. A record joins the journal batch in the same critical section as the
//!    map change it records, and a flush writes the batch only after every
//!    pack write begun before it completed and the device flushed: a durable
//!    record never points at bytes that are not durable.
//! 3. A pack whose last reference goes is reused only after the flush that
//!    journals the change (the durable map may still point into it until
//!    then), and only once no read of it is in flight.
//! 4. The fingerprint index is a hint: a candidate is used only after its
//!    bytes are read back and equal the new block's, and only while its pack
//!    is not free.

use std::collections::BTreeSet;
use std::sync::Arc;

use tierd_common::hash::FastMap;
use tierd_core::reduce::clean::Cleaner;
pub use tierd_core::reduce::clean::{
    Appender, CleanerTallies, RESERVE_PACKS as CLEANER_RESERVE_PACKS,
};
use tierd_core::reduce::Staging;

use super::codec::Fingerprint;
use super::layout::{Fragment, Geometry, Record, UNMAPPED, ZERO};

/// Which open pack a fragment goes to: raw blocks stay aligned together,
/// compressed fragments are packed byte by byte, and staged (not yet
/// reduced) blocks have packs of their own: they all die once reduced, so
/// their packs come free whole (packs are never compacted; staged blocks
/// among stored raw ones would keep their space for good).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackKind {
    Raw = 0,
    Compressed = 1,
    Staged = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackState {
    Free,
    /// Being filled in memory (reads come from its buffer).
    Open(PackKind),
    /// Sealed, its buffer being written (reads come from the buffer).
    Writing,
    /// On the device.
    Sealed,
}

pub struct OpenPack {
    pub pack: u32,
    pub buf: Vec<u8>,
    pub fill: u64,
    /// Bytes [0, durable) are written (by a flush's tail write).
    pub durable: u64,
}

/// A pack write the caller must do: `buf[from..to]` at the pack's `from`.
pub struct PackWrite {
    pub pack: u32,
    pub sequence: u64,
    pub buf: Arc<Vec<u8>>,
    pub from: u64,
    pub to: u64,
    /// The pack stays open (a flush's tail write), or was sealed.
    pub tail: bool,
    /// A write done again after it failed or was deferred.
    pub retry: bool,
}

/// Where a block's bytes are to be read from.
pub enum Located {
    /// Unmapped or zero.
    Zeroes,
    /// A copy of the fragment (from a pack still in memory).
    Bytes(Vec<u8>),
    /// A pack being written: its shared buffer.
    Shared {
        buf: Arc<Vec<u8>>,
        offset: u64,
        len: u64,
    },
    /// On the device; the pack is pinned until [`State::unpin`].
    Device { pack: u32, offset: u64, len: u64 },
}

/// Why a fragment could not be placed.
#[derive(Debug, PartialEq, Eq)]
pub enum NoRoom {
    /// Packs are waiting for a flush to be reusable: flush and retry.
    AfterFlush,
    /// Every pack is in use.
    Full,
}

/// The fingerprint index: a bounded map, oldest insertion dropped first.
/// The fingerprint index: fingerprint → the map entry of a fragment stored
/// with it (a hint, confirmed by comparing bytes).
///
/// A set-associative table allocated whole at start, as a CPU cache or
/// VDO's sparse index: a fingerprint belongs to one set of [`INDEX_WAYS`]
/// slots (by its low bits); a new one takes a free slot of its set or
/// replaces the set's oldest. So the index never grows, never rehashes
/// (no pause, no transient doubling) and takes exactly
/// [`INDEX_BYTES_PER_ENTRY`] per slot; eviction is oldest-first per set,
/// approximately oldest-first overall (a set can fill before the table
/// does: a lost dedup, never wrong data).
pub struct Index {
    /// Per slot: the fingerprint's two halves (`[0, 0]` with entry 0 is
    /// free; no stored fragment's entry is 0), its entry, and the insertion
    /// stamp that orders it (oldest first, for eviction and checkpoints).
    keys: Vec<[u64; 2]>,
    entries: Vec<u64>,
    stamps: Vec<u64>,
    ways: usize,
    sets: usize,
    next_stamp: u64,
    len: usize,
    pub dropped: u64,
}

/// Slots per set of the fingerprint index.
pub const INDEX_WAYS: usize = 8;

/// Memory one slot of the fingerprint index takes: 16 bytes of fingerprint,
/// 8 of entry, 8 of stamp. What `index_memory` is divided by.
pub const INDEX_BYTES_PER_ENTRY: u64 = 32;

fn split(fingerprint: Fingerprint) -> [u64; 2] {
    [fingerprint as u64, (fingerprint >> 64) as u64]
}

fn join(halves: [u64; 2]) -> Fingerprint {
    u128::from(halves[0]) | u128::from(halves[1]) << 64
}

impl Index {
    /// An index of about `capacity` slots: sets of [`INDEX_WAYS`] (the
    /// capacity rounded down to a multiple of them), or one set of
    /// `capacity` slots when smaller.
    pub fn new(capacity: usize) -> Index {
        let ways = capacity.clamp(1, INDEX_WAYS);
        let sets = if capacity == 0 { 0 } else { capacity / ways };
        let slots = sets * ways;
        Index {
            keys: vec![[0; 2]; slots],
            entries: vec![0; slots],
            stamps: vec![0; slots],
            ways,
            sets,
            next_stamp: 1,
            len: 0,
            dropped: 0,
        }
    }

    /// The slots of `key`'s set.
    fn set_of(&self, key: [u64; 2]) -> std::ops::Range<usize> {
        let set = (key[0] % self.sets as u64) as usize;
        set * self.ways..(set + 1) * self.ways
    }

    fn find(&self, key: [u64; 2]) -> Option<usize> {
        if self.sets == 0 {
            return None;
        }
        self.set_of(key)
            .find(|&slot| self.entries[slot] != 0 && self.keys[slot] == key)
    }

    pub fn get(&self, fingerprint: Fingerprint) -> Option<u64> {
        self.find(split(fingerprint)).map(|slot| self.entries[slot])
    }

    /// Remembers `entry` for `fingerprint` (an entry of 0 is ignored: it
    /// names no fragment). An existing fingerprint keeps its age.
    pub fn insert(&mut self, fingerprint: Fingerprint, entry: u64) {
        if self.sets == 0 || entry == 0 {
            return;
        }
        let key = split(fingerprint);
        if let Some(slot) = self.find(key) {
            self.entries[slot] = entry;
            return;
        }
        let slot = self
            .set_of(key)
            .min_by_key(|&slot| {
                if self.entries[slot] == 0 {
                    0
                } else {
                    self.stamps[slot]
                }
            })
            .expect("a set has slots");
        if self.entries[slot] == 0 {
            self.len += 1;
        } else {
            self.dropped += 1;
        }
        self.keys[slot] = key;
        self.entries[slot] = entry;
        self.stamps[slot] = self.next_stamp;
        self.next_stamp += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn capacity(&self) -> usize {
        self.sets * self.ways
    }

    /// Bytes the index's slots take (allocated at start).
    pub fn allocated_bytes(&self) -> u64 {
        self.capacity() as u64 * INDEX_BYTES_PER_ENTRY
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries oldest first (a checkpoint's order).
    pub fn entries(&self) -> Vec<(Fingerprint, u64)> {
        let mut slots: Vec<usize> = (0..self.entries.len())
            .filter(|&slot| self.entries[slot] != 0)
            .collect();
        slots.sort_unstable_by_key(|&slot| self.stamps[slot]);
        slots
            .into_iter()
            .map(|slot| (join(self.keys[slot]), self.entries[slot]))
            .collect()
    }
}

/// Counts for status: kept as the map changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tallies {
    /// Logical blocks mapped to a fragment.
    pub mapped_blocks: u64,
    /// Logical blocks written with zeroes.
    pub zero_blocks: u64,
    /// References beyond the first to a fragment: blocks dedup saved.
    pub dedup_blocks: u64,
    /// Bytes of the live fragments (each once).
    pub fragment_bytes: u64,
    /// Bytes compression saved over the live fragments (each once).
    pub compress_saved_bytes: u64,
    /// Blocks written that deduplicated against stored ones.
    pub dedup_hits: u64,
    /// Index candidates whose bytes differed (hash collision or stale hint).
    pub dedup_mismatches: u64,
}

pub struct State {
    pub geometry: Geometry,
    pub map: Vec<u64>,
    pack_refs: Vec<u32>,
    pack_state: Vec<PackState>,
    free: Vec<u32>,
    pending_free: Vec<u32>,
    readers: FastMap<u32, u32>,
    fragment_refs: FastMap<u64, u32>,
    pub index: Index,
    open: [Option<OpenPack>; 3],
    writing: FastMap<u32, Arc<Vec<u8>>>,
    /// Pack writes begun and not completed, by sequence.
    in_flight: BTreeSet<u64>,
    next_write: u64,
    /// Pack writes that failed (or were deferred): written again by the
    /// next flush. Their packs are read from memory until they land.
    failed: Vec<PackWrite>,
    /// Per pack: writes in `failed` (or retried and in flight) not yet on
    /// the device. Such a pack stays in `writing` (read from memory) even
    /// after its seal write lands.
    unwritten: FastMap<u32, u32>,
    /// Per pack: writes in flight (seal, a flush's tail, retries). A sealed
    /// pack is read from the device only when none is: a tail write still
    /// in flight when the seal write lands would leave fragments whose bytes
    /// are not there yet (a post-process worker reading a staged block back
    /// then reduced stale bytes: the reduced kill -9 loop's "block holds
    /// another block's stamp").
    writes_of: FastMap<u32, u32>,
    pub records: Vec<Record>,
    pub tallies: Tallies,
    /// Staged blocks found by recovery, for the device to queue: (lbn, entry).
    pub recovered_staged: Vec<(u64, u64)>,
    pub staging: Staging,
    /// Per pack: bytes of its live fragments, each counted once (what the
    /// cleaner would copy to free it).
    pack_live: Vec<u32>,
    /// Per pack: the kind it was opened for (recovered from its fragments).
    pack_kind: Vec<PackKind>,
    /// Packs the cleaner is emptying: no new references to them (dedup
    /// refuses them as candidates), so its scan of the map stays complete.
    cleaning: Vec<bool>,
    /// The reverse index: per pack, the logical blocks that map into it,
    /// so a cleaning pass finds its victims' blocks without a pass over
    /// the whole map. In memory only (rebuilt from the map at recovery).
    /// Kept lazily: a block is added when it maps into a pack and left
    /// when it maps elsewhere, and a pack's list is compacted (blocks that
    /// no longer map there dropped) when an addition makes it longer than
    /// twice the pack's references and 16; it is dropped when the pack
    /// comes free. So a list holds at most the blocks mapped into its pack
    /// since it was opened (about one per fragment appended) or, once
    /// dedup keeps adding references to a sealed pack, twice its
    /// references and 16. `None` for a
    /// tier of more than 2^32 blocks (its numbers do not fit the `u32`s):
    /// the cleaner then scans the map.
    owners: Option<Vec<Vec<u32>>>,
    /// The cleaner's decisions (`tierd_core::reduce::clean`): when to
    /// clean, which packs, and the free packs only it may take (it needs
    /// room to copy live fragments into before it frees anything).
    policy: Cleaner,
    pub cleaner: CleanerTallies,
}

impl State {
    /// The state of a recovered (or new) map: reference counts, pack states
    /// and the free list follow from it.
    pub fn new(
        geometry: Geometry,
        map: Vec<u64>,
        index: Vec<(Fingerprint, u64)>,
        index_capacity: u64,
        stage_limit_blocks: u64,
    ) -> State {
        let mut state = State {
            geometry,
            map: Vec::new(),
            pack_refs: vec![0; geometry.pack_count as usize],
            pack_state: vec![PackState::Free; geometry.pack_count as usize],
            free: Vec::new(),
            pending_free: Vec::new(),
            readers: FastMap::default(),
            fragment_refs: FastMap::default(),
            index: Index::new(index_capacity as usize),
            open: [None, None, None],
            writing: FastMap::default(),
            in_flight: BTreeSet::new(),
            next_write: 0,
            failed: Vec::new(),
            unwritten: FastMap::default(),
            writes_of: FastMap::default(),
            records: Vec::new(),
            tallies: Tallies::default(),
            recovered_staged: Vec::new(),
            staging: Staging::new(stage_limit_blocks),
            pack_live: vec![0; geometry.pack_count as usize],
            pack_kind: vec![PackKind::Raw; geometry.pack_count as usize],
            cleaning: vec![false; geometry.pack_count as usize],
            owners: (geometry.logical_blocks <= 1 << 32)
                .then(|| vec![Vec::new(); geometry.pack_count as usize]),
            policy: Cleaner::new(
                geometry.pack_count,
                geometry.pack_bytes,
                geometry.block_bytes,
            ),
            cleaner: CleanerTallies::default(),
        };
        for (lbn, &entry) in map.iter().enumerate() {
            state.acquire(entry);
            if let Some(fragment) = Fragment::decode(entry) {
                if let Some(owners) = state.owners.as_mut() {
                    owners[fragment.pack as usize].push(lbn as u32);
                }
                state.pack_state[fragment.pack as usize] = PackState::Sealed;
                state.pack_kind[fragment.pack as usize] = state.kind_of(fragment);
                if fragment.staged {
                    state.recovered_staged.push((lbn as u64, entry));
                    state.staging.staged_blocks += 1;
                }
            }
        }
        state.map = map;
        // Lowest packs last, so they are taken first (pop).
        state.free = (0..geometry.pack_count as u32)
            .rev()
            .filter(|&pack| state.pack_state[pack as usize] == PackState::Free)
            .collect();
        for (fingerprint, entry) in index {
            state.index.insert(fingerprint, entry);
        }
        state
    }

    fn acquire(&mut self, entry: u64) {
        if entry == ZERO {
            self.tallies.zero_blocks += 1;
            return;
        }
        let Some(fragment) = Fragment::decode(entry) else {
            return;
        };
        self.tallies.mapped_blocks += 1;
        self.pack_refs[fragment.pack as usize] += 1;
        let refs = self
            .fragment_refs
            .entry(fragment.settled().encode())
            .or_insert(0);
        *refs += 1;
        if *refs == 1 {
            self.pack_live[fragment.pack as usize] += fragment.len;
            self.tallies.fragment_bytes += u64::from(fragment.len);
            self.tallies.compress_saved_bytes +=
                self.geometry.block_bytes - u64::from(fragment.len);
        } else {
            self.tallies.dedup_blocks += 1;
        }
    }

    fn release(&mut self, entry: u64) {
        if entry == ZERO {
            self.tallies.zero_blocks -= 1;
            return;
        }
        let Some(fragment) = Fragment::decode(entry) else {
            return;
        };
        self.tallies.mapped_blocks -= 1;
        let key = fragment.settled().encode();
        let refs = self
            .fragment_refs
            .get_mut(&key)
            .expect("a mapped fragment is counted");
        *refs -= 1;
        if *refs == 0 {
            self.fragment_refs.remove(&key);
            self.pack_live[fragment.pack as usize] -= fragment.len;
            self.tallies.fragment_bytes -= u64::from(fragment.len);
            self.tallies.compress_saved_bytes -=
                self.geometry.block_bytes - u64::from(fragment.len);
        } else {
            self.tallies.dedup_blocks -= 1;
        }
        let pack = fragment.pack as usize;
        self.pack_refs[pack] -= 1;
        if self.pack_refs[pack] == 0 && self.pack_state[pack] == PackState::Sealed {
            self.pending_free.push(fragment.pack);
        }
    }

    /// Maps `lbn` to `entry` and records it for the journal.
    pub fn install(&mut self, lbn: u64, entry: u64) {
        let old = self.map[lbn as usize];
        if old == entry {
            return;
        }
        self.acquire(entry);
        self.release(old);
        self.map[lbn as usize] = entry;
        // The old pack keeps `lbn` listed until a push compacts it or it
        // comes free: touching its list here would cost a cache miss per
        // write under the lock, for no correctness (readers check the map).
        if let Some(fragment) = Fragment::decode(entry) {
            if let Some(owners) = self.owners.as_mut() {
                owners[fragment.pack as usize].push(lbn as u32);
            }
            self.compact_owners(fragment.pack);
        }
        self.records.push(Record::Map { lbn, entry });
    }

    /// An index candidate for `fingerprint` that may be compared: its pack
    /// not free and its bytes fixed (below an open pack's fill). The pack is
    /// pinned when the bytes must come from the device.
    pub fn candidate(&mut self, fingerprint: Fingerprint) -> Option<(u64, Located)> {
        let entry = self.index.get(fingerprint)?;
        let fragment = Fragment::decode(entry)?;
        if self.cleaning[fragment.pack as usize] {
            // Its fragments are being copied away: a new reference here
            // would keep it from coming free.
            return None;
        }
        let end = u64::from(fragment.offset) + u64::from(fragment.len);
        match self.pack_state[fragment.pack as usize] {
            PackState::Free => return None,
            PackState::Open(kind) => {
                let open = self.open[kind as usize].as_ref().expect("open pack");
                if end > open.fill {
                    return None;
                }
            }
            PackState::Writing | PackState::Sealed => {}
        }
        Some((entry, self.locate_fragment(fragment)))
    }

    /// Where `lbn`'s bytes are. A `Device` answer pins the pack.
    pub fn locate(&mut self, lbn: u64) -> (u64, Located) {
        let entry = self.map[lbn as usize];
        match Fragment::decode(entry) {
            None => (entry, Located::Zeroes),
            Some(fragment) => (entry, self.locate_fragment(fragment)),
        }
    }

    fn locate_fragment(&mut self, fragment: Fragment) -> Located {
        let offset = u64::from(fragment.offset);
        let len = u64::from(fragment.len);
        match self.pack_state[fragment.pack as usize] {
            PackState::Open(kind) => {
                let open = self.open[kind as usize].as_ref().expect("open pack");
                Located::Bytes(open.buf[offset as usize..(offset + len) as usize].to_vec())
            }
            PackState::Writing => Located::Shared {
                buf: self.writing[&fragment.pack].clone(),
                offset,
                len,
            },
            PackState::Sealed | PackState::Free => {
                *self.readers.entry(fragment.pack).or_insert(0) += 1;
                Located::Device {
                    pack: fragment.pack,
                    offset,
                    len,
                }
            }
        }
    }

    /// Keeps `pack` from being reused while the caller reads or maps it.
    pub fn pin(&mut self, pack: u32) {
        *self.readers.entry(pack).or_insert(0) += 1;
    }

    /// A device read of `pack` (from [`Located::Device`]) finished.
    pub fn unpin(&mut self, pack: u32) {
        if let Some(readers) = self.readers.get_mut(&pack) {
            *readers -= 1;
            if *readers == 0 {
                self.readers.remove(&pack);
            }
        }
    }

    /// Appends a fragment to the open pack of `kind`, sealing a full one
    /// (the returned write) and opening another as needed.
    pub fn append(
        &mut self,
        kind: PackKind,
        bytes: &[u8],
        staged: bool,
        appender: Appender,
    ) -> Result<(Fragment, Option<PackWrite>), NoRoom> {
        let len = bytes.len() as u64;
        let mut sealed = None;
        let fits = |open: &OpenPack| open.fill + len <= open.buf.len() as u64;
        if self.open[kind as usize]
            .as_ref()
            .is_some_and(|open| !fits(open))
        {
            sealed = self.seal(kind);
        }
        if self.open[kind as usize].is_none() {
            let pack = if self.policy.may_take(appender, self.free.len() as u64) {
                self.free.pop()
            } else {
                None
            };
            let Some(pack) = pack else {
                // The sealed pack's write must still happen.
                if let Some(write) = sealed {
                    self.end_write(&write);
                    self.defer(write);
                }
                return Err(if self.pending_free.is_empty() {
                    NoRoom::Full
                } else {
                    NoRoom::AfterFlush
                });
            };
            self.pack_state[pack as usize] = PackState::Open(kind);
            self.pack_kind[pack as usize] = kind;
            if let Some(owners) = self.owners.as_mut() {
                // Room for a pack of raw blocks: no regrowth while it fills
                // (compressed fragments double it once or twice).
                owners[pack as usize] = Vec::with_capacity(
                    (self.geometry.pack_bytes / self.geometry.block_bytes) as usize,
                );
            }
            self.open[kind as usize] = Some(OpenPack {
                pack,
                buf: vec![0; self.geometry.pack_bytes as usize],
                fill: 0,
                durable: 0,
            });
        }
        let open = self.open[kind as usize].as_mut().expect("opened above");
        let offset = open.fill;
        open.buf[offset as usize..(offset + len) as usize].copy_from_slice(bytes);
        open.fill += len;
        let fragment = Fragment {
            pack: open.pack,
            offset: offset as u32,
            len: len as u32,
            staged,
        };
        Ok((fragment, sealed))
    }

    /// Seals the open pack of `kind`: its unwritten bytes become a write.
    fn seal(&mut self, kind: PackKind) -> Option<PackWrite> {
        let open = self.open[kind as usize].take()?;
        let pack = open.pack;
        let to = open.fill.next_multiple_of(4096).min(open.buf.len() as u64);
        let buf = Arc::new(open.buf);
        self.pack_state[pack as usize] = PackState::Writing;
        self.writing.insert(pack, buf.clone());
        if to <= open.durable {
            // Nothing new since the last flush wrote its tail.
            self.settle(pack);
            return None;
        }
        let sequence = self.begin_write(pack);
        Some(PackWrite {
            pack,
            sequence,
            buf,
            from: open.durable,
            to,
            tail: false,
            retry: false,
        })
    }

    /// A write that must be done again by the next flush.
    fn defer(&mut self, write: PackWrite) {
        *self.unwritten.entry(write.pack).or_insert(0) += 1;
        self.failed.push(write);
    }

    /// A sealed pack in `writing` goes to the device's care once its seal
    /// write landed and no failed write of it is outstanding.
    fn settle(&mut self, pack: u32) {
        if self.pack_state[pack as usize] != PackState::Writing
            || self.writes_of.contains_key(&pack)
            || self.unwritten.contains_key(&pack)
        {
            return;
        }
        self.writing.remove(&pack);
        self.sealed(pack);
    }

    fn begin_write(&mut self, pack: u32) -> u64 {
        let sequence = self.next_write;
        self.next_write += 1;
        self.in_flight.insert(sequence);
        *self.writes_of.entry(pack).or_insert(0) += 1;
        sequence
    }

    fn end_write(&mut self, write: &PackWrite) {
        self.in_flight.remove(&write.sequence);
        if let Some(count) = self.writes_of.get_mut(&write.pack) {
            *count -= 1;
            if *count == 0 {
                self.writes_of.remove(&write.pack);
            }
        }
    }

    fn sealed(&mut self, pack: u32) {
        self.pack_state[pack as usize] = PackState::Sealed;
        if self.pack_refs[pack as usize] == 0 {
            self.pending_free.push(pack);
        }
    }

    /// A pack write finished (`ok`: it reached the device).
    pub fn write_done(&mut self, write: PackWrite, ok: bool) {
        self.end_write(&write);
        let pack = write.pack;
        if write.retry {
            if let Some(count) = self.unwritten.get_mut(&pack) {
                *count -= 1;
                if *count == 0 {
                    self.unwritten.remove(&pack);
                }
            }
        }
        if !ok {
            self.defer(PackWrite {
                retry: false,
                ..write
            });
            return;
        }
        self.settle(pack);
    }

    /// True while a pack write begun before `sequence` is in flight.
    pub fn writes_before(&self, sequence: u64) -> bool {
        self.in_flight
            .first()
            .is_some_and(|&first| first < sequence)
    }

    /// A flush begins: the open packs' new bytes become tail writes (their
    /// fill moves to the next 4 KiB), failed writes are retried, and the
    /// records so far are taken. Returns the writes, the records, the write
    /// sequence every earlier pack write must complete before, and how many
    /// pending frees the flush may release.
    pub fn begin_flush(&mut self) -> FlushPlan {
        let mut writes: Vec<PackWrite> = std::mem::take(&mut self.failed)
            .into_iter()
            .map(|mut write| {
                write.sequence = self.begin_write(write.pack);
                write.retry = true;
                write
            })
            .collect();
        for kind in [PackKind::Raw, PackKind::Compressed, PackKind::Staged] {
            let Some(open) = self.open[kind as usize].as_mut() else {
                continue;
            };
            let to = open.fill.next_multiple_of(4096).min(open.buf.len() as u64);
            if to <= open.durable {
                continue;
            }
            let from = open.durable;
            open.durable = to;
            open.fill = to;
            let buf = Arc::new(open.buf[..to as usize].to_vec());
            let pack = open.pack;
            let sequence = self.begin_write(pack);
            writes.push(PackWrite {
                pack,
                sequence,
                buf,
                from,
                to,
                tail: true,
                retry: false,
            });
        }
        FlushPlan {
            writes,
            records: std::mem::take(&mut self.records),
            before_write: self.next_write,
            pending: self.pending_free.len(),
        }
    }

    /// A flush journaled its records: the first `pending` packs waiting for
    /// it are free now, unless referenced again or still being read.
    pub fn end_flush(&mut self, pending: usize) {
        let pending = pending.min(self.pending_free.len());
        let mut keep = Vec::new();
        for pack in self.pending_free.drain(..pending).collect::<Vec<_>>() {
            let index = pack as usize;
            if self.pack_state[index] != PackState::Sealed || self.pack_refs[index] > 0 {
                continue;
            }
            if self.readers.contains_key(&pack) {
                keep.push(pack);
                continue;
            }
            self.pack_state[index] = PackState::Free;
            if let Some(owners) = self.owners.as_mut() {
                // No block maps here: give the list's memory back.
                owners[index] = Vec::new();
            }
            self.free.push(pack);
        }
        self.pending_free.extend(keep);
    }

    /// A flush failed after taking the records: they go back in front.
    pub fn restore_records(&mut self, mut records: Vec<Record>) {
        records.append(&mut self.records);
        self.records = records;
    }

    /// Packs in use (open, being written or on the device).
    pub fn used_packs(&self) -> u64 {
        self.pack_state
            .iter()
            .filter(|state| **state != PackState::Free)
            .count() as u64
    }

    /// Physical bytes held: packs in use, open ones only to their fill.
    pub fn physical_bytes(&self) -> u64 {
        let open_unfilled: u64 = self
            .open
            .iter()
            .flatten()
            .map(|open| open.buf.len() as u64 - open.fill)
            .sum();
        self.used_packs() * self.geometry.pack_bytes - open_unfilled
    }

    pub fn free_packs(&self) -> u64 {
        self.free.len() as u64
    }

    /// Whether `lbn` still maps to `entry` (a staged block not overwritten).
    pub fn maps(&self, lbn: u64, entry: u64) -> bool {
        self.map[lbn as usize] == entry
    }

    /// Unmapped blocks read as zeroes; a block never written is UNMAPPED.
    pub fn is_unmapped(&self, lbn: u64) -> bool {
        self.map[lbn as usize] == UNMAPPED
    }

    /// Whether `lbn` reads from a stored fragment (staged or reduced, in
    /// an open pack or on the device). Unmapped and zero blocks do not:
    /// they read as zeroes.
    pub fn holds_data(&self, lbn: u64) -> bool {
        Fragment::decode(self.map[lbn as usize]).is_some()
    }

    // ---- the cleaner ------------------------------------------------------
    //
    // Packs are never written in place, so an overwritten fragment leaves
    // dead bytes in its pack until every fragment of it is dead. Under
    // random overwrites that never happens by itself and the tier fills
    // with dead bytes. The cleaner (as a log-structured file system's) picks
    // the packs with the fewest live bytes, copies their live fragments to
    // the open packs, remaps every block that pointed at them and lets the
    // next flush free them (rule 3). The copies go through the same append
    // and journal path as user writes, so rules 1 and 2 hold for them.

    /// The kind of pack a fragment belongs in.
    pub fn kind_of(&self, fragment: Fragment) -> PackKind {
        if fragment.staged {
            PackKind::Staged
        } else if u64::from(fragment.len) == self.geometry.block_bytes {
            PackKind::Raw
        } else {
            PackKind::Compressed
        }
    }

    /// The cleaner's rules for this tier.
    pub fn policy(&self) -> &Cleaner {
        &self.policy
    }

    /// Whether background cleaning should start ([`Cleaner::wants_cleaning`]).
    /// Cheap: no pass over the packs.
    pub fn wants_cleaning(&self) -> bool {
        self.policy
            .wants_cleaning(self.free_packs(), self.tallies.fragment_bytes)
    }

    /// Whether background cleaning runs another pass.
    pub fn keeps_cleaning(&self) -> bool {
        self.policy.keeps_cleaning(self.free_packs())
    }

    /// Whether users have room without cleaning.
    pub fn users_have_room(&self) -> bool {
        self.policy.users_have_room(self.free_packs())
    }

    /// Packs the cleaner may empty: on the device, referenced, not staged
    /// (staged packs come free whole once reduced) and not already being
    /// cleaned.
    fn eligible(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.pack_state.len()).filter(|&pack| {
            self.pack_state[pack] == PackState::Sealed
                && self.pack_refs[pack] > 0
                && self.pack_kind[pack] != PackKind::Staged
                && !self.cleaning[pack]
        })
    }

    /// Picks the packs one pass empties ([`Cleaner::pick_victims`]: the
    /// fewest live bytes, at most a batch, no more live bytes than the free
    /// packs and the open packs' room can take) among the eligible ones.
    /// Marks them as being cleaned and pins them (their bytes are read
    /// while users may drop their last references).
    pub fn pick_victims(&mut self) -> Vec<u32> {
        let open_room: u64 = [PackKind::Raw, PackKind::Compressed]
            .iter()
            .filter_map(|&kind| self.open[kind as usize].as_ref())
            .map(|open| open.buf.len() as u64 - open.fill)
            .sum();
        let candidates = self
            .eligible()
            .map(|pack| (pack as u32, u64::from(self.pack_live[pack])));
        let victims = self
            .policy
            .pick_victims(candidates, self.free_packs(), open_room);
        for &pack in &victims {
            self.cleaning[pack as usize] = true;
            *self.readers.entry(pack).or_insert(0) += 1;
        }
        victims
    }

    /// Whether `entry` is a fragment in a pack being cleaned.
    pub fn in_cleaning(&self, entry: u64) -> bool {
        Fragment::decode(entry).is_some_and(|fragment| self.cleaning[fragment.pack as usize])
    }

    /// Drops from `pack`'s reverse index the blocks that no longer map
    /// there, once it is longer than twice its references and 16 (after an
    /// addition; amortised: at least half as many additions as it holds
    /// since the last compaction).
    fn compact_owners(&mut self, pack: u32) {
        let refs = self.pack_refs[pack as usize] as usize;
        let Some(owners) = self.owners.as_mut() else {
            return;
        };
        let list = &mut owners[pack as usize];
        if list.len() <= 2 * refs + 16 {
            return;
        }
        let map = &self.map;
        list.retain(|&lbn| {
            Fragment::decode(map[lbn as usize]).is_some_and(|fragment| fragment.pack == pack)
        });
        // A block that left the pack and came back is listed twice.
        list.sort_unstable();
        list.dedup();
        debug_assert_eq!(list.len(), refs, "pack {pack}'s reverse index");
        if list.capacity() > 2 * list.len() + 16 {
            list.shrink_to(list.len() + 16);
        }
    }

    /// The blocks that map into `victims` (packs being cleaned), as
    /// (lbn, entry) ordered by pack, entry and block, from the reverse
    /// index: work in proportion to the victims' blocks, not the map.
    /// `None` when the tier keeps no reverse index (then scan the map with
    /// [`State::refs_in_cleaning`]).
    pub fn victim_refs(&self, victims: &[u32]) -> Option<Vec<(u64, u64)>> {
        let owners = self.owners.as_ref()?;
        let mut refs = Vec::new();
        for &pack in victims {
            for &lbn in &owners[pack as usize] {
                let entry = self.map[lbn as usize];
                if Fragment::decode(entry).is_some_and(|fragment| fragment.pack == pack) {
                    refs.push((u64::from(lbn), entry));
                }
            }
        }
        refs.sort_unstable_by_key(|&(lbn, entry)| {
            (Fragment::decode(entry).map(|f| f.pack), entry, lbn)
        });
        refs.dedup();
        Some(refs)
    }

    /// Drops the reverse index, as a tier of more than 2^32 blocks keeps
    /// none (tests of the cleaner's map scan).
    #[cfg(test)]
    pub fn drop_reverse_index(&mut self) {
        self.owners = None;
    }

    /// Bytes the reverse index takes now (its lists' lengths; status and
    /// the docs' per-GiB figure).
    pub fn reverse_index_bytes(&self) -> u64 {
        self.owners.as_ref().map_or(0, |owners| {
            owners
                .iter()
                .map(|list| (list.capacity() * 4 + std::mem::size_of::<Vec<u32>>()) as u64)
                .sum()
        })
    }

    /// The blocks in `lbns` that map into packs being cleaned, as
    /// (lbn, entry): one slice of the cleaner's scan of the map (tiers
    /// without a reverse index).
    pub fn refs_in_cleaning(&self, lbns: std::ops::Range<u64>) -> Vec<(u64, u64)> {
        let end = lbns.end.min(self.map.len() as u64);
        (lbns.start..end)
            .filter_map(|lbn| {
                let entry = self.map[lbn as usize];
                self.in_cleaning(entry).then_some((lbn, entry))
            })
            .collect()
    }

    /// Copies a fragment being cleaned (`old`, whose bytes are `bytes`) to
    /// an open pack, as the cleaner: the new entry and a sealed pack's write
    /// to do. Nothing is remapped yet ([`State::install`] does that per
    /// block).
    pub fn relocate(&mut self, old: u64, bytes: &[u8]) -> Result<(u64, Option<PackWrite>), NoRoom> {
        let fragment = Fragment::decode(old).expect("a mapped fragment");
        let kind = self.kind_of(fragment);
        let (copy, sealed) = self.append(kind, bytes, false, Appender::Cleaner)?;
        self.cleaner.relocated_bytes += bytes.len() as u64;
        Ok((copy.encode(), sealed))
    }

    /// The cleaner is done with `victims` (emptied or not): they take
    /// references again and may be freed.
    pub fn end_cleaning(&mut self, victims: &[u32]) {
        for &pack in victims {
            self.cleaning[pack as usize] = false;
            if self.pack_refs[pack as usize] == 0 {
                self.cleaner.packs_cleaned += 1;
            }
            self.unpin(pack);
        }
    }
}

pub struct FlushPlan {
    pub writes: Vec<PackWrite>,
    pub records: Vec<Record>,
    pub before_write: u64,
    pub pending: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        let geometry = Geometry::plan(8 << 20, 4096, 4 << 20, 64 << 10, 1024).unwrap();
        let map = vec![UNMAPPED; geometry.logical_blocks as usize];
        State::new(geometry, map, Vec::new(), geometry.index_capacity, 64)
    }

    #[test]
    fn a_pack_freed_before_a_flush_is_reused_only_after_it() {
        let mut state = state();
        let block = vec![1u8; 4096];
        let mut writes = Vec::new();
        // Fill one raw pack (16 blocks) and start the next: the first seals.
        for lbn in 0..17 {
            let (fragment, sealed) = state
                .append(PackKind::Raw, &block, false, Appender::User)
                .unwrap();
            state.install(lbn, fragment.encode());
            writes.extend(sealed);
        }
        assert_eq!(writes.len(), 1);
        let first_pack = writes[0].pack;
        for write in writes.drain(..) {
            state.write_done(write, true);
        }
        // Overwrite the first pack's blocks with zeroes: its refs drop to 0.
        for lbn in 0..16 {
            state.install(lbn, ZERO);
        }
        assert_eq!(state.pending_free, vec![first_pack]);
        let free_before = state.free_packs();
        let plan = state.begin_flush();
        assert_eq!(plan.records.len(), 17 + 16);
        // Not free until the flush that journals the zeroes completes.
        assert_eq!(state.free_packs(), free_before);
        for write in plan.writes {
            state.write_done(write, true);
        }
        state.end_flush(plan.pending);
        assert_eq!(state.free_packs(), free_before + 1);
        assert_eq!(state.tallies.zero_blocks, 16);
        assert_eq!(state.tallies.mapped_blocks, 1);
    }

    #[test]
    fn reduced_staged_blocks_give_their_packs_back_whole() {
        // Post-process: each block staged raw, then stored raw (it did not
        // compress). The staged copies' packs must come free once every
        // block is reduced, leaving the stored data in its own size.
        let mut state = state();
        let mut writes = Vec::new();
        for lbn in 0..32u64 {
            let block = vec![lbn as u8 + 1; 4096];
            let (staged, sealed) = state
                .append(PackKind::Staged, &block, true, Appender::User)
                .unwrap();
            state.install(lbn, staged.encode());
            writes.extend(sealed);
            let (stored, sealed) = state
                .append(PackKind::Raw, &block, false, Appender::User)
                .unwrap();
            state.install(lbn, stored.encode());
            writes.extend(sealed);
        }
        for write in writes.drain(..) {
            state.write_done(write, true);
        }
        let plan = state.begin_flush();
        for write in plan.writes {
            state.write_done(write, true);
        }
        state.end_flush(plan.pending);
        // 16 blocks a 64 KiB pack: the stored blocks' two packs (the second
        // still open) and the staged pack still open; the first staged pack
        // is free. (Sharing packs, all four stayed in use.)
        assert_eq!(state.used_packs(), 3);
        assert_eq!(state.physical_bytes(), 3 * (64 << 10));
    }

    #[test]
    fn a_pinned_pack_waits_for_its_reader() {
        let mut state = state();
        let block = vec![2u8; 4096];
        for lbn in 0..17 {
            let (fragment, sealed) = state
                .append(PackKind::Raw, &block, false, Appender::User)
                .unwrap();
            state.install(lbn, fragment.encode());
            if let Some(write) = sealed {
                state.write_done(write, true);
            }
        }
        let (_, located) = state.locate(0);
        let Located::Device { pack, .. } = located else {
            panic!("sealed blocks are read from the device");
        };
        for lbn in 0..16 {
            state.install(lbn, UNMAPPED);
        }
        let plan = state.begin_flush();
        state.end_flush(plan.pending);
        assert_eq!(state.pending_free, vec![pack], "kept while read");
        state.unpin(pack);
        let plan = state.begin_flush();
        state.end_flush(plan.pending);
        assert!(state.pending_free.is_empty());
    }

    #[test]
    fn dedup_and_compression_tallies_follow_the_map() {
        let mut state = state();
        let (fragment, _) = state
            .append(PackKind::Compressed, &[9u8; 1000], false, Appender::User)
            .unwrap();
        state.install(0, fragment.encode());
        state.install(1, fragment.encode());
        state.install(2, fragment.encode());
        assert_eq!(state.tallies.dedup_blocks, 2);
        assert_eq!(state.tallies.fragment_bytes, 1000);
        assert_eq!(state.tallies.compress_saved_bytes, 4096 - 1000);
        state.install(1, UNMAPPED);
        state.install(0, UNMAPPED);
        assert_eq!(state.tallies.dedup_blocks, 0);
        state.install(2, UNMAPPED);
        assert_eq!(state.tallies.fragment_bytes, 0);
        assert_eq!(state.tallies.mapped_blocks, 0);
    }

    #[test]
    fn a_full_tier_says_whether_a_flush_would_help() {
        let geometry = Geometry::plan(3 << 20, 4096, 1 << 20, 64 << 10, 16).unwrap();
        let map = vec![UNMAPPED; geometry.logical_blocks as usize];
        let mut state = State::new(geometry, map, Vec::new(), geometry.index_capacity, 0);
        let block = vec![3u8; 4096];
        let mut lbn = 0;
        let error = loop {
            match state.append(PackKind::Raw, &block, false, Appender::User) {
                Ok((fragment, sealed)) => {
                    state.install(lbn % geometry.logical_blocks, fragment.encode());
                    lbn += 1;
                    if let Some(write) = sealed {
                        state.write_done(write, true);
                    }
                }
                Err(error) => break error,
            }
        };
        // Overwrites freed earlier packs: a flush makes them reusable.
        assert_eq!(error, NoRoom::AfterFlush);
    }

    /// Regression (DST seeds 432, 534, 685): a flush's tail write failed,
    /// then the pack filled and its seal write (of the bytes after the
    /// tail) landed; the pack was read from the device, where the failed
    /// range never arrived. It must be read from memory until the retry
    /// lands.
    #[test]
    fn a_pack_with_a_failed_write_is_read_from_memory_until_the_retry_lands() {
        let mut state = state();
        let block = vec![5u8; 4096];
        let (first, _) = state
            .append(PackKind::Raw, &block, false, Appender::User)
            .unwrap();
        state.install(0, first.encode());
        let plan = state.begin_flush();
        assert_eq!(plan.writes.len(), 1, "the open pack's tail");
        for write in plan.writes {
            state.write_done(write, false);
        }
        // Fill the pack: the seal writes only what follows the tail.
        let mut seal = None;
        for lbn in 1..17 {
            let (fragment, sealed) = state
                .append(PackKind::Raw, &block, false, Appender::User)
                .unwrap();
            state.install(lbn, fragment.encode());
            seal = seal.or(sealed);
        }
        let seal = seal.expect("the pack filled");
        assert_eq!(seal.from, 4096);
        state.write_done(seal, true);
        assert!(
            matches!(state.locate(0).1, Located::Shared { .. }),
            "the failed tail is not on the device yet"
        );
        let plan = state.begin_flush();
        let retry: Vec<_> = plan
            .writes
            .into_iter()
            .filter(|write| write.pack == first.pack)
            .collect();
        assert_eq!(retry.len(), 1);
        assert_eq!((retry[0].from, retry[0].to), (0, 4096));
        for write in retry {
            state.write_done(write, true);
        }
        assert!(matches!(state.locate(0).1, Located::Device { .. }));
    }

    /// Regression (the reduced kill -9 loop, post mode): a flush's tail
    /// write still in flight when the pack filled and its seal write landed
    /// made the pack readable from the device before the tail's bytes were
    /// there; a worker reading a staged block back reduced stale bytes.
    #[test]
    fn a_sealed_pack_waits_for_its_tail_write_in_flight() {
        let mut state = state();
        let block = vec![6u8; 4096];
        let (first, _) = state
            .append(PackKind::Raw, &block, false, Appender::User)
            .unwrap();
        state.install(0, first.encode());
        let plan = state.begin_flush();
        let tail = plan
            .writes
            .into_iter()
            .next()
            .expect("the open pack's tail");
        let mut seal = None;
        for lbn in 1..17 {
            let (fragment, sealed) = state
                .append(PackKind::Raw, &block, false, Appender::User)
                .unwrap();
            state.install(lbn, fragment.encode());
            seal = seal.or(sealed);
        }
        state.write_done(seal.expect("the pack filled"), true);
        assert!(
            matches!(state.locate(0).1, Located::Shared { .. }),
            "the tail write has not landed"
        );
        state.write_done(tail, true);
        assert!(matches!(state.locate(0).1, Located::Device { .. }));
    }

    /// The reverse index against the map: after random installs (new
    /// fragments, dedup references to live ones, zeroes, trims) every
    /// pack's blocks are exactly the map's, and no list outgrows twice its
    /// pack's references and 16.
    #[test]
    fn the_reverse_index_lists_exactly_the_blocks_of_each_pack() {
        use tierd_common::rng::{Rng, SeededRng};
        let mut state = state();
        let blocks = 512u64;
        let mut rng = SeededRng::new(3);
        let mut writes = Vec::new();
        let mut max_ratio = 0f64;
        for step in 0..20_000u64 {
            let lbn = rng.below(blocks);
            let entry = match rng.below(10) {
                0 => ZERO,
                1 => UNMAPPED,
                2..=4 => state.map[rng.below(blocks) as usize],
                _ => {
                    let len = 1000 + rng.below(3000) as usize;
                    match state.append(PackKind::Compressed, &vec![7u8; len], false, Appender::User)
                    {
                        Ok((fragment, sealed)) => {
                            writes.extend(sealed);
                            fragment.encode()
                        }
                        Err(_) => UNMAPPED,
                    }
                }
            };
            state.install(lbn, entry);
            for write in writes.drain(..) {
                state.write_done(write, true);
            }
            if step % 64 == 0 {
                let plan = state.begin_flush();
                for write in plan.writes {
                    state.write_done(write, true);
                }
                state.end_flush(plan.pending);
            }
            if step % 997 == 0 || step == 19_999 {
                let all: Vec<u32> = (0..state.geometry.pack_count as u32).collect();
                let from_index = state.victim_refs(&all).unwrap();
                let mut from_map: Vec<(u64, u64)> = (0..blocks)
                    .filter(|&lbn| state.holds_data(lbn))
                    .map(|lbn| (lbn, state.map[lbn as usize]))
                    .collect();
                from_map.sort_unstable_by_key(|&(lbn, entry)| {
                    (Fragment::decode(entry).map(|f| f.pack), entry, lbn)
                });
                assert_eq!(from_index, from_map, "step {step}");
                // Stale entries stay until an addition compacts a list or
                // its pack comes free: the lists hold a small multiple of
                // the mapped blocks.
                let owners = state.owners.as_ref().unwrap();
                let listed: usize = owners.iter().map(Vec::len).sum();
                let mapped = state.tallies.mapped_blocks as usize;
                let packs = state.geometry.pack_count as usize;
                assert!(
                    listed <= 4 * mapped + 16 * packs,
                    "{listed} listed, {mapped} mapped"
                );
                max_ratio = max_ratio.max(listed as f64 / mapped.max(1) as f64);
            }
        }
        assert!(state.reverse_index_bytes() > 0);
        println!("reverse index: at most {max_ratio:.2} entries per mapped block");
    }

    #[test]
    fn the_index_drops_its_oldest_entries_at_capacity() {
        let mut index = Index::new(2);
        index.insert(1, 10);
        index.insert(2, 20);
        index.insert(1, 11);
        index.insert(3, 30);
        assert_eq!(index.get(1), None);
        assert_eq!(index.get(2), Some(20));
        assert_eq!(index.entries(), vec![(2, 20), (3, 30)]);
        assert_eq!(index.dropped, 1);
    }

    #[test]
    fn the_index_holds_its_capacity_in_fixed_memory_and_drops_oldest_per_set() {
        let mut index = Index::new(1000);
        assert_eq!(index.capacity(), 1000);
        assert_eq!(index.allocated_bytes(), 1000 * INDEX_BYTES_PER_ENTRY);
        // Fingerprints spread over the sets (high halves too: no u128 bits
        // are lost in the split).
        let fingerprint =
            |i: u64| u128::from(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | u128::from(i) << 64;
        for i in 1..=5_000u64 {
            index.insert(fingerprint(i), i);
        }
        assert_eq!(index.len(), 1000);
        assert_eq!(index.dropped, 4_000);
        assert_eq!(index.allocated_bytes(), 1000 * INDEX_BYTES_PER_ENTRY);
        // Every set holds its newest: the last 1000 inserted, give or take
        // the sets' uneven shares; the very newest are all there.
        for i in 4_990..=5_000u64 {
            assert_eq!(index.get(fingerprint(i)), Some(i), "entry {i}");
        }
        assert_eq!(index.get(fingerprint(1)), None);
        let kept = index.entries();
        assert_eq!(kept.len(), 1000);
        assert!(
            kept.windows(2).all(|pair| pair[0].1 < pair[1].1),
            "oldest first"
        );
        assert!(
            kept[0].1 > 3_000,
            "the oldest kept is recent: {}",
            kept[0].1
        );
        // An entry of 0 names no fragment and is not remembered.
        let mut small = Index::new(4);
        small.insert(7, 0);
        assert!(small.is_empty());
        assert_eq!(Index::new(0).get(7), None);
    }
}
