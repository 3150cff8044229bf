//! A volume: segments over an N-tier stack, routed by the tiering table,
//! moved online by the migration copier, planned by a `tierd-policy` policy.
//!
//! The bottom tier is home: segment `s` always has a home extent at
//! `s * segment_bytes`. Faster tiers hold segments in slots (segment-sized
//! extents) given out from a free list.
//!
//! ## Rules (the same the simulator models, `docs/engine/volume.md`)
//! - Every IO to a segment holds the segment's entry lock shared for the
//!   IO's duration; starting and finishing a move takes it exclusively, so a
//!   placement never changes under an IO and a freed slot is never read.
//! - During a move of segment `s` from A to B, reads go to A; writes go to A
//!   and, for chunks already copied, to B as well (mirrored). A write holds
//!   the locks of the chunks it touches shared; the copier holds a chunk's
//!   lock exclusively while it reads it from A and writes it to B. So every
//!   write reaches B either through the copy or through the mirror.
//! - When every chunk is copied: flush B, append `Place{s, B}` to the journal
//!   (fsync), then flip the entry under its lock. The mapping is durable only
//!   after the data is. Writes keep mirroring until the flip, so the flip
//!   waits only for IOs in flight on that segment.
//! - A volatile (memory) tier is written through: a write to a segment on it
//!   also reaches home before the ack, unless the tier has
//!   `unsafe_volatile = true`.
//! - FLUSH flushes every tier device, so it covers writes completed on any
//!   connection. FUA flushes the devices the write touched.

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tierd_common::clock::Clock;
use tierd_policy::monitor::{Monitor, DEFAULT_HISTORY_PERIODS};
use tierd_policy::view::{MigrationStats, TierInfo};
use tierd_policy::{build_policy, Move, MoveReason, Policy, PolicyConfig, SegmentId, TierId, View};

use crate::device::{BlockDevice, DeviceError, DeviceStats};
use crate::meta::{
    Checkpoint, LastPlan, Location, MetaError, MetaFaults, MetaStore, MoveRecord, Pin, Record,
};

/// How many finished moves `status` lists.
const RECENT_MOVES: usize = 64;

/// One tier of a volume's stack.
pub struct TierSpec {
    pub name: String,
    pub device: Arc<dyn BlockDevice>,
    /// Contents lost when the process ends (memory).
    pub volatile: bool,
    /// A volatile tier without write-through (benchmarks only).
    pub unsafe_volatile: bool,
}

/// Volume settings (from `[[volume]]`).
#[derive(Clone, Debug)]
pub struct VolumeOptions {
    pub name: String,
    pub size_bytes: u64,
    pub segment_bytes: u64,
    pub chunk_bytes: u64,
    pub period_ns: u64,
    pub checkpoint_every_periods: u32,
    pub policy: PolicyConfig,
}

/// Why a volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("request of {length_bytes} bytes at offset {offset_bytes} is beyond the volume's {size_bytes} bytes")]
    OutOfRange {
        offset_bytes: u64,
        length_bytes: u64,
        size_bytes: u64,
    },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("{0}")]
    Invalid(String),
}

impl VolumeError {
    /// The errno a client sees.
    pub fn errno(&self) -> i32 {
        match self {
            VolumeError::OutOfRange { .. } | VolumeError::Invalid(_) => libc::EINVAL,
            VolumeError::Device(error) => error.errno(),
            VolumeError::Meta(_) => libc::EIO,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    location: Location,
    moving: bool,
}

struct TierState {
    name: String,
    device: Arc<dyn BlockDevice>,
    volatile: bool,
    write_through: bool,
    capacity_segments: u32,
    free_slots: Mutex<Vec<u32>>,
    used_segments: AtomicU32,
}

/// The move being copied now.
struct ActiveMove {
    segment: SegmentId,
    from: Location,
    to: Location,
    reason: MoveReason,
    started_ns: u64,
    chunk_locks: Vec<RwLock<()>>,
    copied: Vec<AtomicBool>,
    next_chunk: AtomicU32,
    copied_bytes: AtomicU64,
}

impl ActiveMove {
    fn as_move(&self) -> Move {
        Move {
            segment: self.segment,
            from: self.from.tier,
            to: self.to.tier,
            reason: self.reason.clone(),
        }
    }
}

/// What [`Volume::copy_step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// No move to work on.
    Idle,
    /// Copied one chunk of this many bytes.
    Copied { bytes: u64 },
    /// A move finished (flip done).
    Finished { segment: SegmentId },
    /// A move failed and was abandoned; the segment stays where it was.
    Failed { segment: SegmentId },
}

struct Planner {
    policy: Box<dyn Policy>,
    pending: VecDeque<Move>,
    recent: VecDeque<MoveRecord>,
    completed_moves: u64,
    /// Of `completed_moves`, those whose time is known (journal records
    /// older than their `move_ns` field have none), and their total time.
    timed_moves: u64,
    total_move_ns: f64,
    dropped_moves: u64,
    last_busy_ns: Vec<u64>,
    periods_since_checkpoint: u32,
    periods_closed: u64,
    /// Operator pins by segment (journaled, checkpointed).
    pins: BTreeMap<SegmentId, Pin>,
    /// The policy's last plan and its reason.
    last_plan: Option<LastPlan>,
    /// Things the runner logs (an expired pin), taken by
    /// [`Volume::take_events`].
    events: Vec<String>,
}

impl Planner {
    /// Mean time of the moves whose time is known.
    fn mean_move_ns(&self) -> Option<f64> {
        (self.timed_moves > 0).then(|| self.total_move_ns / self.timed_moves as f64)
    }
}

/// A tiered volume. Thread-safe: IO from any number of threads, plus one
/// thread driving [`Volume::tick`] and [`Volume::copy_step`].
pub struct Volume {
    options: VolumeOptions,
    segments: u32,
    tiers: Vec<TierState>,
    entries: Vec<RwLock<Entry>>,
    home_current: Vec<AtomicBool>,
    active: RwLock<Option<Arc<ActiveMove>>>,
    copy_buffer: Mutex<Vec<u8>>,
    monitor: Mutex<Monitor>,
    planner: Mutex<Planner>,
    meta: Mutex<MetaStore>,
    clock: Arc<dyn Clock>,
    /// Set by startup when volatile tiers lost data (unsafe_volatile).
    warnings: Mutex<Vec<String>>,
    /// Longest a chunk copy held its chunk lock (writes to that chunk wait
    /// at most this long), and longest switch-over (waiting for IO in flight
    /// on the segment plus the flip; new IO to the segment waits for it).
    max_chunk_hold_ns: AtomicU64,
    max_switch_over_ns: AtomicU64,
    /// Per tier: marked unavailable by an operator or a drill
    /// ([`Volume::set_tier_unavailable`]); status reports what it holds.
    unavailable_tiers: Vec<AtomicBool>,
}

/// Bytes of a volume that cannot be read: their only current copy is on a
/// tier marked unavailable (home's copy is stale). Reads there fail with the
/// tier's error, never with other data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct UnavailableRange {
    pub tier: String,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub first_segment: SegmentId,
    pub last_segment: SegmentId,
}

/// Per-tier figures for status.
#[derive(Clone, Debug, Serialize)]
pub struct TierStatus {
    pub name: String,
    pub volatile: bool,
    pub write_through: bool,
    pub capacity_segments: u32,
    pub used_segments: u32,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub stats: Option<DeviceStats>,
    /// Why the tier's backing stopped serving (truncated, deleted or
    /// replaced under the server); absent while it works.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// A move in flight.
#[derive(Clone, Debug, Serialize)]
pub struct InFlightMove {
    pub segment: SegmentId,
    pub from: String,
    pub to: String,
    pub rule: String,
    pub detail: String,
    pub copied_bytes: u64,
    pub total_bytes: u64,
}

/// An operator pin as `tierd status` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PinStatus {
    pub segment: SegmentId,
    pub tier: String,
    /// When the pin ends (RFC 3339, UTC), `None` until `tierd unpin` ...
    pub until: Option<String>,
    /// ... and the same as ns since the Unix epoch.
    pub until_unix_ns: Option<u64>,
    /// The segment is on its pinned tier now (false while the move that
    /// puts it there is queued or running).
    pub placed: bool,
}

impl PinStatus {
    pub fn new(pin: &Pin, tier_names: &[String], current_tier: Option<TierId>) -> PinStatus {
        PinStatus {
            segment: pin.segment,
            tier: tier_names
                .get(pin.tier as usize)
                .cloned()
                .unwrap_or_else(|| format!("tier {}", pin.tier)),
            until: pin
                .until_unix_ns
                .map(tierd_common::units::format_rfc3339_utc),
            until_unix_ns: pin.until_unix_ns,
            placed: current_tier == Some(pin.tier),
        }
    }
}

/// What `tierd status` shows for a volume.
#[derive(Clone, Debug, Serialize)]
pub struct VolumeStatus {
    pub name: String,
    pub size_bytes: u64,
    pub segment_bytes: u64,
    pub segments: u32,
    pub policy: String,
    pub periods_closed: u64,
    /// Segments per tier, in stack order.
    pub placement_by_tier: Vec<(String, u32)>,
    /// Tier index of every segment (compact: one digit per segment).
    pub placement: String,
    pub tiers: Vec<TierStatus>,
    pub in_flight: Vec<InFlightMove>,
    pub pending_moves: usize,
    pub completed_moves: u64,
    pub dropped_moves: u64,
    pub mean_move_ns: Option<f64>,
    /// Since start: the longest time a copy held one chunk's lock (the most
    /// a write to that chunk waited for the copy) ...
    pub max_chunk_hold_ns: u64,
    /// ... and the longest switch-over (the most IO to a moving segment
    /// waited for its flip).
    pub max_switch_over_ns: u64,
    pub recent_moves: Vec<MoveRecord>,
    pub warnings: Vec<String>,
    /// Ranges whose only current copy is on a tier marked unavailable
    /// (adjacent segments merged); empty when everything can be read.
    pub unavailable: Vec<UnavailableRange>,
    /// Operator pins, by segment.
    pub pins: Vec<PinStatus>,
    /// The policy's last plan with its reason (also when it moved nothing).
    pub last_plan: Option<LastPlan>,
}

enum Mutation<'a> {
    Write(&'a [u8]),
    Discard,
    Zero,
}

impl Mutation<'_> {
    fn slice(&self, start: usize, length: usize) -> Mutation<'_> {
        match self {
            Mutation::Write(data) => Mutation::Write(&data[start..start + length]),
            Mutation::Discard => Mutation::Discard,
            Mutation::Zero => Mutation::Zero,
        }
    }

    fn apply(&self, device: &dyn BlockDevice, offset: u64, length: u64) -> Result<(), DeviceError> {
        match self {
            Mutation::Write(data) => device.write_at(offset, data),
            Mutation::Discard => device.discard(offset, length),
            Mutation::Zero => device.write_zeroes(offset, length),
        }
    }
}

impl Volume {
    /// Opens a volume over `tiers` (fastest first, home last) with its
    /// metadata in `meta_dir`: recovers placement from checkpoint + journal,
    /// reloads warm policy state, and refills volatile tiers from home.
    pub fn open(
        options: VolumeOptions,
        tiers: Vec<TierSpec>,
        meta_dir: &std::path::Path,
        clock: Arc<dyn Clock>,
    ) -> Result<(Volume, Vec<String>), VolumeError> {
        let segment_bytes = options.segment_bytes;
        if tiers.is_empty() {
            return Err(VolumeError::Invalid(
                "a volume needs at least one tier".into(),
            ));
        }
        let segments_u64 = options.size_bytes.div_ceil(segment_bytes);
        let segments = u32::try_from(segments_u64)
            .map_err(|_| VolumeError::Invalid("too many segments".into()))?;
        let home = tiers.len() - 1;
        let home_needed = segments_u64 * segment_bytes;
        if tiers[home].device.size_bytes() < home_needed {
            return Err(VolumeError::Invalid(format!(
                "home tier {} holds {} bytes; volume {} needs {home_needed} (whole segments)",
                tiers[home].name,
                tiers[home].device.size_bytes(),
                options.name
            )));
        }
        let tier_states: Vec<TierState> = tiers
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                let capacity_segments = if index == home {
                    segments
                } else {
                    u32::try_from(spec.device.size_bytes() / segment_bytes).unwrap_or(u32::MAX)
                };
                TierState {
                    name: spec.name,
                    volatile: spec.volatile,
                    write_through: spec.volatile && !spec.unsafe_volatile,
                    capacity_segments,
                    free_slots: Mutex::new(if index == home {
                        Vec::new()
                    } else {
                        (0..capacity_segments).rev().collect()
                    }),
                    used_segments: AtomicU32::new(if index == home { segments } else { 0 }),
                    device: spec.device,
                }
            })
            .collect();
        let home_id = home as TierId;
        let mut placement: Vec<Location> = (0..segments)
            .map(|segment| Location {
                tier: home_id,
                slot: segment,
            })
            .collect();

        let (meta, recovered) = MetaStore::open(meta_dir)?;
        let mut notes = recovered.notes.clone();
        let mut policy = build_policy(&options.policy);
        let mut monitor = Monitor::new(
            options.period_ns,
            tier_states.len(),
            clock.now_ns(),
            DEFAULT_HISTORY_PERIODS,
        );
        let mut planner_completed = 0;
        let mut planner_timed = 0;
        let mut planner_total_ns = 0.0;
        let mut recent = VecDeque::new();
        let mut pins: BTreeMap<SegmentId, Pin> = BTreeMap::new();
        let mut last_plan = None;
        let tier_names: Vec<String> = tier_states.iter().map(|tier| tier.name.clone()).collect();
        if let Some(checkpoint) = &recovered.checkpoint {
            if checkpoint.segment_bytes != segment_bytes
                || checkpoint.placement.len() != segments as usize
            {
                return Err(VolumeError::Invalid(format!(
                    "{}: the checkpoint describes {} segments of {} bytes but the configuration gives {} segments of {} bytes; changing a volume's size or segment size needs a new volume",
                    MetaStore::checkpoint_path(meta_dir).display(),
                    checkpoint.placement.len(),
                    checkpoint.segment_bytes,
                    segments,
                    segment_bytes
                )));
            }
            if checkpoint.tiers != tier_names {
                return Err(VolumeError::Invalid(format!(
                    "{}: the checkpoint's tier stack is {:?} but the configuration gives {:?}; tierd will not guess where segments went",
                    MetaStore::checkpoint_path(meta_dir).display(),
                    checkpoint.tiers,
                    tier_names
                )));
            }
            placement.clone_from(&checkpoint.placement);
            if checkpoint.policy == policy.name() {
                if let Err(reason) = policy.restore_state(&checkpoint.policy_state) {
                    return Err(VolumeError::Invalid(format!(
                        "{}: saved {} policy state does not load: {reason}",
                        MetaStore::checkpoint_path(meta_dir).display(),
                        checkpoint.policy
                    )));
                }
                monitor.restore_history(checkpoint.history.clone());
            } else {
                notes.push(format!(
                    "policy changed from {} to {}: starting the new policy cold",
                    checkpoint.policy,
                    policy.name()
                ));
            }
            planner_completed = checkpoint.completed_moves;
            planner_timed = checkpoint.timed_moves.unwrap_or(checkpoint.completed_moves);
            planner_total_ns = checkpoint.mean_move_ns.unwrap_or(0.0) * planner_timed as f64;
            recent = checkpoint.recent_moves.iter().cloned().collect();
            pins = checkpoint
                .pins
                .iter()
                .map(|pin| (pin.segment, *pin))
                .collect();
            last_plan.clone_from(&checkpoint.last_plan);
        }
        for record in &recovered.records {
            match record {
                Record::Pin { .. } | Record::Unpin { .. } => record.apply_to_pins(&mut pins),
                Record::Place {
                    segment,
                    location,
                    move_ns,
                } => {
                    // A move that finished after the checkpoint: it counts,
                    // and so does its time when the record has it.
                    planner_completed += 1;
                    if let Some(move_ns) = move_ns {
                        planner_timed += 1;
                        planner_total_ns += *move_ns as f64;
                    }
                    let Some(slot) = placement.get_mut(*segment as usize) else {
                        return Err(VolumeError::Invalid(format!(
                            "{}: journal places segment {segment}, beyond the volume's {segments} segments",
                            MetaStore::journal_path(meta_dir).display()
                        )));
                    };
                    *slot = *location;
                }
            }
        }
        if let Some(pin) = pins
            .values()
            .find(|pin| pin.segment >= segments || pin.tier as usize >= tier_states.len())
        {
            return Err(VolumeError::Invalid(format!(
                "{}: a pin of segment {} to tier index {} is impossible for this volume ({segments} segments, {} tiers); tierd will not guess",
                meta_dir.display(),
                pin.segment,
                pin.tier,
                tier_states.len()
            )));
        }
        // Check the recovered table and rebuild the free lists from it.
        let mut taken: Vec<Vec<bool>> = tier_states
            .iter()
            .map(|tier| vec![false; tier.capacity_segments as usize])
            .collect();
        for (segment, location) in placement.iter().enumerate() {
            let tier = location.tier as usize;
            let valid = tier < tier_states.len()
                && (if tier == home {
                    location.slot as usize == segment
                } else {
                    (location.slot as usize) < taken[tier].len()
                        && !taken[tier][location.slot as usize]
                });
            if !valid {
                return Err(VolumeError::Invalid(format!(
                    "{}: recovered placement of segment {segment} ({location:?}) is impossible for this tier stack; tierd will not guess",
                    meta_dir.display()
                )));
            }
            if tier != home {
                taken[tier][location.slot as usize] = true;
            }
        }
        for (tier_index, tier) in tier_states.iter().enumerate() {
            if tier_index == home {
                continue;
            }
            let mut free = tier.free_slots.lock();
            free.retain(|slot| !taken[tier_index][*slot as usize]);
            let used = taken[tier_index].iter().filter(|taken| **taken).count() as u32;
            tier.used_segments.store(used, Ordering::Relaxed);
            tier.used_segments.fetch_add(0, Ordering::Relaxed);
        }
        let home_used = placement
            .iter()
            .filter(|location| location.tier == home_id)
            .count();
        tier_states[home]
            .used_segments
            .store(home_used as u32, Ordering::Relaxed);

        let last_busy_ns = tier_states
            .iter()
            .map(|tier| tier.device.stats().map_or(0, |stats| stats.busy_ns))
            .collect();
        let tier_count = tier_states.len();
        let volume = Volume {
            segments,
            entries: placement
                .iter()
                .map(|location| {
                    RwLock::new(Entry {
                        location: *location,
                        moving: false,
                    })
                })
                .collect(),
            home_current: placement
                .iter()
                .map(|location| {
                    let tier = &tier_states[location.tier as usize];
                    AtomicBool::new(location.tier == home_id || tier.write_through)
                })
                .collect(),
            tiers: tier_states,
            active: RwLock::new(None),
            copy_buffer: Mutex::new(Vec::new()),
            monitor: Mutex::new(monitor),
            planner: Mutex::new(Planner {
                policy,
                pending: VecDeque::new(),
                recent,
                completed_moves: planner_completed,
                timed_moves: planner_timed,
                total_move_ns: planner_total_ns,
                dropped_moves: 0,
                last_busy_ns,
                periods_since_checkpoint: 0,
                periods_closed: 0,
                pins,
                last_plan,
                events: Vec::new(),
            }),
            meta: Mutex::new(meta),
            clock,
            // A repaired torn journal tail is reported as a warning (log
            // and status), not silently.
            warnings: Mutex::new(recovered.repaired.clone()),
            max_chunk_hold_ns: AtomicU64::new(0),
            max_switch_over_ns: AtomicU64::new(0),
            unavailable_tiers: (0..tier_count).map(|_| AtomicBool::new(false)).collect(),
            options,
        };
        volume.refill_volatile_tiers(&mut notes)?;
        // Start the new generation from a checkpoint of what was recovered,
        // so the journal stays short.
        volume.checkpoint()?;
        Ok((volume, notes))
    }

    /// Segments placed on volatile tiers lost their data with the last
    /// process: copy them back from home (current by write-through).
    fn refill_volatile_tiers(&self, notes: &mut Vec<String>) -> Result<(), VolumeError> {
        let home = self.home();
        let mut refilled = 0u64;
        for segment in 0..self.segments {
            let location = self.entry(segment).location;
            let tier = &self.tiers[location.tier as usize];
            if location.tier == home || !tier.volatile {
                continue;
            }
            if !tier.write_through {
                self.warnings.lock().push(format!(
                    "segment {segment} was on unsafe_volatile tier {}: writes to it since its promotion were lost with the last process",
                    tier.name
                ));
            }
            let mut buffer = vec![0u8; self.options.chunk_bytes as usize];
            let mut done = 0;
            while done < self.options.segment_bytes {
                let length = self
                    .options
                    .chunk_bytes
                    .min(self.options.segment_bytes - done);
                let piece = &mut buffer[..length as usize];
                self.tiers[home as usize].device.read_at(
                    u64::from(segment) * self.options.segment_bytes + done,
                    piece,
                )?;
                tier.device
                    .write_at(self.slot_offset(location) + done, piece)?;
                done += length;
            }
            refilled += 1;
        }
        if refilled > 0 {
            notes.push(format!(
                "refilled {refilled} segments of volatile tiers from home (warm restart)"
            ));
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.options.name
    }

    pub fn size_bytes(&self) -> u64 {
        self.options.size_bytes
    }

    pub fn segment_bytes(&self) -> u64 {
        self.options.segment_bytes
    }

    pub fn segment_count(&self) -> u32 {
        self.segments
    }

    pub fn period_ns(&self) -> u64 {
        self.options.period_ns
    }

    pub fn tier_names(&self) -> Vec<String> {
        self.tiers.iter().map(|tier| tier.name.clone()).collect()
    }

    fn home(&self) -> TierId {
        (self.tiers.len() - 1) as TierId
    }

    fn entry(&self, segment: SegmentId) -> Entry {
        *self.entries[segment as usize].read()
    }

    /// The metadata store's fault-injection handle (journal appends; see
    /// [`MetaFaults`]). Nothing fires unless a caller arms it.
    pub fn meta_faults(&self) -> MetaFaults {
        self.meta.lock().faults()
    }

    /// Current tier of every segment.
    pub fn placement(&self) -> Vec<TierId> {
        (0..self.segments)
            .map(|segment| self.entry(segment).location.tier)
            .collect()
    }

    fn slot_offset(&self, location: Location) -> u64 {
        u64::from(location.slot) * self.options.segment_bytes
    }

    fn check_range(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), VolumeError> {
        match offset_bytes.checked_add(length_bytes) {
            Some(end) if end <= self.options.size_bytes => Ok(()),
            _ => Err(VolumeError::OutOfRange {
                offset_bytes,
                length_bytes,
                size_bytes: self.options.size_bytes,
            }),
        }
    }

    /// Splits `[offset, offset+length)` at segment boundaries:
    /// `(segment, offset in segment, length, offset in request)`.
    fn pieces(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> impl Iterator<Item = (SegmentId, u64, u64, u64)> + '_ {
        let segment_bytes = self.options.segment_bytes;
        let end = offset_bytes + length_bytes;
        let mut at = offset_bytes;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let segment = at / segment_bytes;
            let within = at % segment_bytes;
            let length = (segment_bytes - within).min(end - at);
            let piece = (segment as SegmentId, within, length, at - offset_bytes);
            at += length;
            Some(piece)
        })
    }

    /// Reads `buf.len()` bytes at `offset_bytes`.
    pub fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), VolumeError> {
        self.check_range(offset_bytes, buf.len() as u64)?;
        for (segment, within, length, at) in self.pieces(offset_bytes, buf.len() as u64) {
            let started_ns = self.clock.now_ns();
            let piece = &mut buf[at as usize..(at + length) as usize];
            let guard = self.entries[segment as usize].read();
            let entry = *guard;
            let device = &self.tiers[entry.location.tier as usize].device;
            let mut served_by = entry.location.tier;
            if let Err(error) = device.read_at(self.slot_offset(entry.location) + within, piece) {
                // A failed fast tier: the home copy serves if it is current.
                let home = self.home();
                if entry.location.tier != home
                    && self.home_current[segment as usize].load(Ordering::Acquire)
                {
                    self.tiers[home as usize].device.read_at(
                        u64::from(segment) * self.options.segment_bytes + within,
                        piece,
                    )?;
                    served_by = home;
                } else {
                    return Err(error.into());
                }
            }
            drop(guard);
            let response_ns = self.clock.now_ns().saturating_sub(started_ns);
            self.monitor.lock().record_user_io(
                segment,
                served_by,
                false,
                length,
                response_ns,
                entry.moving,
            );
        }
        Ok(())
    }

    pub fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), VolumeError> {
        self.mutate(offset_bytes, data.len() as u64, &Mutation::Write(data), fua)
    }

    pub fn discard(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
    ) -> Result<(), VolumeError> {
        self.mutate(offset_bytes, length_bytes, &Mutation::Discard, fua)
    }

    pub fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
    ) -> Result<(), VolumeError> {
        self.mutate(offset_bytes, length_bytes, &Mutation::Zero, fua)
    }

    fn mutate(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        mutation: &Mutation,
        fua: bool,
    ) -> Result<(), VolumeError> {
        self.check_range(offset_bytes, length_bytes)?;
        let pieces = self.pieces(offset_bytes, length_bytes);
        let mut touched = [false; 8];
        for (segment, within, length, at) in pieces {
            let started_ns = self.clock.now_ns();
            let piece = mutation.slice(
                at as usize,
                if matches!(mutation, Mutation::Write(_)) {
                    length as usize
                } else {
                    0
                },
            );
            let (tier, moving) =
                self.mutate_piece(segment, within, length, &piece, &mut touched)?;
            let response_ns = self.clock.now_ns().saturating_sub(started_ns);
            self.monitor
                .lock()
                .record_user_io(segment, tier, true, length, response_ns, moving);
        }
        if fua {
            for (tier, touched) in self.tiers.iter().zip(touched) {
                if touched {
                    tier.device.flush()?;
                }
            }
        }
        Ok(())
    }

    /// One segment's part of a write/discard/zero. Returns the tier that
    /// served it and whether the segment was moving.
    fn mutate_piece(
        &self,
        segment: SegmentId,
        within: u64,
        length: u64,
        mutation: &Mutation,
        touched: &mut [bool; 8],
    ) -> Result<(TierId, bool), VolumeError> {
        let home = self.home();
        let guard = self.entries[segment as usize].read();
        let entry = *guard;
        let source = entry.location;
        let source_tier = &self.tiers[source.tier as usize];
        let active = if entry.moving {
            self.active.read().clone()
        } else {
            None
        };
        let active = active.filter(|active| active.segment == segment);
        // Home gets every write to a segment on a write-through tier, and to
        // one moving onto such a tier from another fast tier (so home is
        // current when the flip lands it in RAM).
        let target_write_through = active
            .as_ref()
            .is_some_and(|active| self.tiers[active.to.tier as usize].write_through);
        let needs_home = source.tier != home && (source_tier.write_through || target_write_through);
        if source.tier != home && !needs_home {
            // The home copy goes stale before the data lands on the fast tier.
            self.home_current[segment as usize].store(false, Ordering::Release);
        }
        let chunk_bytes = self.options.chunk_bytes;
        let first_chunk = (within / chunk_bytes) as usize;
        let last_chunk = ((within + length.max(1) - 1) / chunk_bytes) as usize;
        let _chunk_guards: Vec<_> = match &active {
            Some(active) => (first_chunk..=last_chunk)
                .map(|chunk| active.chunk_locks[chunk].read())
                .collect(),
            None => Vec::new(),
        };
        mutation.apply(
            source_tier.device.as_ref(),
            self.slot_offset(source) + within,
            length,
        )?;
        touched[source.tier as usize] = true;
        if let Some(active) = &active {
            let target = active.to;
            let home_write_covers = target.tier == home && needs_home;
            if !home_write_covers {
                let target_device = &self.tiers[target.tier as usize].device;
                // Mirror the parts that fall in chunks already copied.
                for chunk in first_chunk..=last_chunk {
                    if !active.copied[chunk].load(Ordering::Acquire) {
                        continue;
                    }
                    let chunk_start = chunk as u64 * chunk_bytes;
                    let start = within.max(chunk_start);
                    let end = (within + length).min(chunk_start + chunk_bytes);
                    if start >= end {
                        continue;
                    }
                    let part = match mutation {
                        Mutation::Write(data) => Mutation::Write(
                            &data[(start - within) as usize..(end - within) as usize],
                        ),
                        Mutation::Discard => Mutation::Discard,
                        Mutation::Zero => Mutation::Zero,
                    };
                    part.apply(
                        target_device.as_ref(),
                        self.slot_offset(target) + start,
                        end - start,
                    )?;
                    touched[target.tier as usize] = true;
                }
            }
        }
        if needs_home {
            mutation.apply(
                self.tiers[home as usize].device.as_ref(),
                u64::from(segment) * self.options.segment_bytes + within,
                length,
            )?;
            touched[home as usize] = true;
        }
        drop(guard);
        Ok((source.tier, entry.moving))
    }

    /// Makes every completed write durable on every tier.
    pub fn flush(&self) -> Result<(), VolumeError> {
        let mut first_error = None;
        for tier in &self.tiers {
            if let Err(error) = tier.device.flush() {
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    /// Queues an operator's move (`tierd move`). Checked again when it starts.
    pub fn request_move(
        &self,
        segment: SegmentId,
        to: TierId,
        why: &str,
    ) -> Result<(), VolumeError> {
        if segment >= self.segments {
            return Err(VolumeError::Invalid(format!(
                "segment {segment} is beyond the volume's {} segments",
                self.segments
            )));
        }
        if to as usize >= self.tiers.len() {
            return Err(VolumeError::Invalid(format!(
                "tier {to} does not exist (the stack has {} tiers, 0 = fastest)",
                self.tiers.len()
            )));
        }
        let mut planner = self.planner.lock();
        if let Some(pin) = planner.pins.get(&segment) {
            return Err(VolumeError::Invalid(format!(
                "segment {segment} of volume {} is pinned to tier {}; `tierd unpin` it first, or pin it to the other tier",
                self.options.name, self.tiers[pin.tier as usize].name
            )));
        }
        let from = self.entry(segment).location.tier;
        planner.pending.push_back(Move {
            segment,
            from,
            to,
            reason: MoveReason {
                rule: "operator".to_string(),
                detail: why.to_string(),
            },
        });
        Ok(())
    }

    /// Moves waiting to start.
    pub fn pending_moves(&self) -> usize {
        self.planner.lock().pending.len()
    }

    /// True while a move is being copied.
    pub fn is_migrating(&self) -> bool {
        self.active.read().is_some()
    }

    /// Ends the monitor period if it is due: runs the policy and queues its
    /// moves; writes a checkpoint every `checkpoint_every_periods`. Returns
    /// true when a period closed.
    pub fn tick(&self) -> Result<bool, VolumeError> {
        let now_ns = self.clock.now_ns();
        let busy_now: Vec<u64> = self
            .tiers
            .iter()
            .map(|tier| tier.device.stats().map_or(0, |stats| stats.busy_ns))
            .collect();
        let mut planner = self.planner.lock();
        let history = {
            let mut monitor = self.monitor.lock();
            if now_ns < monitor.period_end_ns() {
                return Ok(false);
            }
            let busy: Vec<u64> = busy_now
                .iter()
                .zip(&planner.last_busy_ns)
                .map(|(now, before)| now.saturating_sub(*before))
                .collect();
            monitor.close_period(&busy);
            // Catch up without planning on stale periods after a long stall.
            while monitor.period_end_ns() <= now_ns {
                monitor.close_period(&vec![0; self.tiers.len()]);
            }
            monitor.history().to_vec()
        };
        planner.last_busy_ns = busy_now;
        planner.periods_closed += 1;
        self.expire_pins(&mut planner);
        self.requeue_pinned_moves(&mut planner);
        let placement = self.placement();
        let mut in_flight: Vec<Move> = planner.pending.iter().cloned().collect();
        if let Some(active) = self.active.read().as_ref() {
            in_flight.push(Move {
                segment: active.segment,
                from: active.from.tier,
                to: active.to.tier,
                reason: active.reason.clone(),
            });
        }
        let tiers: Vec<TierInfo> = self
            .tiers
            .iter()
            .map(|tier| TierInfo {
                name: tier.name.clone(),
                capacity_segments: tier.capacity_segments,
                used_segments: tier.used_segments.load(Ordering::Relaxed),
            })
            .collect();
        let migration = MigrationStats {
            completed_moves: planner.completed_moves,
            mean_move_ns: planner.mean_move_ns(),
        };
        let pinned: Vec<SegmentId> = planner.pins.keys().copied().collect();
        let view = View {
            now_ns,
            period_ns: self.options.period_ns,
            segment_bytes: self.options.segment_bytes,
            segments: self.segments,
            history: &history,
            placement: &placement,
            in_flight: &in_flight,
            tiers: &tiers,
            migration,
            pinned: &pinned,
        };
        let plan = planner.policy.plan(&view);
        let proposed = plan.moves.len();
        let mut queued = 0;
        let mut pinned_dropped = 0;
        for planned in plan.moves {
            // A pinned segment is never moved by a policy (the policies
            // see the pins in the view; this holds for any policy).
            if planner.pins.contains_key(&planned.segment) {
                planner.dropped_moves += 1;
                pinned_dropped += 1;
                continue;
            }
            let duplicate = planner
                .pending
                .iter()
                .any(|queued| queued.segment == planned.segment)
                || in_flight
                    .iter()
                    .any(|moving| moving.segment == planned.segment);
            if duplicate
                || planned.to as usize >= self.tiers.len()
                || planned.segment >= self.segments
            {
                planner.dropped_moves += 1;
                continue;
            }
            planner.pending.push_back(planned);
            queued += 1;
        }
        let mut summary = plan.summary;
        if pinned_dropped > 0 {
            summary.push_str(&format!(
                "; {pinned_dropped} moves of pinned segments dropped by the engine"
            ));
        }
        planner.last_plan = Some(LastPlan {
            period_end_ns: history.last().map_or(now_ns, |period| period.end_ns),
            planned_unix_ns: self.clock.unix_now_ns(),
            moves: proposed,
            queued,
            summary,
        });
        planner.periods_since_checkpoint += 1;
        let due = planner.periods_since_checkpoint >= self.options.checkpoint_every_periods;
        drop(planner);
        if due {
            self.checkpoint()?;
        }
        Ok(true)
    }

    /// Writes a checkpoint of the durable placement and the policy's state.
    pub fn checkpoint(&self) -> Result<(), VolumeError> {
        let mut planner = self.planner.lock();
        planner.periods_since_checkpoint = 0;
        let history = self.monitor.lock().history().to_vec();
        // Hold the journal lock while reading the table: a move's journal
        // record and its flip happen together under it, so the checkpoint
        // never misses a placement the journal had.
        let mut meta = self.meta.lock();
        let placement = (0..self.segments)
            .map(|segment| self.entry(segment).location)
            .collect();
        let checkpoint = Checkpoint {
            volume: self.options.name.clone(),
            size_bytes: self.options.size_bytes,
            segment_bytes: self.options.segment_bytes,
            tiers: self.tier_names(),
            placement,
            policy: planner.policy.name().to_string(),
            policy_state: planner.policy.save_state(),
            history,
            completed_moves: planner.completed_moves,
            mean_move_ns: planner.mean_move_ns(),
            recent_moves: planner.recent.iter().cloned().collect(),
            timed_moves: Some(planner.timed_moves),
            pins: planner.pins.values().copied().collect(),
            last_plan: planner.last_plan.clone(),
        };
        drop(planner);
        meta.write_checkpoint(&checkpoint)?;
        Ok(())
    }

    fn start_next_move(&self) -> Option<Arc<ActiveMove>> {
        let home = self.home();
        loop {
            // The pin is read with the queue (planner before entry locks,
            // the order `tick` takes them in).
            let (planned, pin) = {
                let mut planner = self.planner.lock();
                let planned = planner.pending.pop_front()?;
                let pin = planner.pins.get(&planned.segment).copied();
                (planned, pin)
            };
            let segment = planned.segment;
            let mut guard = self.entries[segment as usize].write();
            let from = guard.location;
            let drop_reason = if guard.moving {
                Some("segment already moving".to_string())
            } else if let Some(pin) = pin.filter(|pin| pin.tier != planned.to) {
                Some(format!(
                    "segment is pinned to {}",
                    self.tiers[pin.tier as usize].name
                ))
            } else if from.tier != planned.from && planned.reason.rule != "operator" {
                Some(format!(
                    "segment is on {} now, not {}",
                    self.tiers[from.tier as usize].name, self.tiers[planned.from as usize].name
                ))
            } else if from.tier == planned.to {
                Some("segment is already there".to_string())
            } else {
                None
            };
            let to = if drop_reason.is_none() {
                if planned.to == home {
                    Some(Location {
                        tier: home,
                        slot: segment,
                    })
                } else {
                    self.tiers[planned.to as usize]
                        .free_slots
                        .lock()
                        .pop()
                        .map(|slot| Location {
                            tier: planned.to,
                            slot,
                        })
                }
            } else {
                None
            };
            let Some(to) = to else {
                drop(guard);
                let reason = drop_reason.unwrap_or_else(|| {
                    format!("tier {} is full", self.tiers[planned.to as usize].name)
                });
                self.record_finished(
                    &planned,
                    from,
                    0,
                    self.clock.now_ns(),
                    format!("dropped: {reason}"),
                );
                continue;
            };
            // Counted on the target from the start (home included, as the
            // simulator counts it), released from the source at the flip.
            self.tiers[to.tier as usize]
                .used_segments
                .fetch_add(1, Ordering::Relaxed);
            let chunks = self
                .options
                .segment_bytes
                .div_ceil(self.options.chunk_bytes) as usize;
            // Demoting a segment whose home copy is current needs no copy:
            // every chunk counts as copied, so writes mirror to home at once.
            let clean_demotion =
                to.tier == home && self.home_current[segment as usize].load(Ordering::Acquire);
            let active = Arc::new(ActiveMove {
                segment,
                from,
                to,
                reason: planned.reason.clone(),
                started_ns: self.clock.now_ns(),
                chunk_locks: (0..chunks).map(|_| RwLock::new(())).collect(),
                copied: (0..chunks)
                    .map(|_| AtomicBool::new(clean_demotion))
                    .collect(),
                next_chunk: AtomicU32::new(if clean_demotion { chunks as u32 } else { 0 }),
                copied_bytes: AtomicU64::new(0),
            });
            *self.active.write() = Some(active.clone());
            guard.moving = true;
            return Some(active);
        }
    }

    /// Does one unit of migration work: starts the next queued move if none
    /// is active, copies one chunk, or finishes the move when all chunks are
    /// copied. The caller paces calls (see [`crate::runner`]).
    pub fn copy_step(&self) -> StepOutcome {
        let current = self.active.read().clone();
        let active = match current {
            Some(active) => active,
            None => match self.start_next_move() {
                Some(active) => active,
                None => return StepOutcome::Idle,
            },
        };
        let chunks = active.copied.len() as u32;
        let chunk = active.next_chunk.load(Ordering::Relaxed);
        if chunk < chunks {
            let chunk_bytes = self.options.chunk_bytes;
            let start = u64::from(chunk) * chunk_bytes;
            let length = chunk_bytes.min(self.options.segment_bytes - start);
            let hold_started_ns = self.clock.now_ns();
            let result = {
                let _exclusive = active.chunk_locks[chunk as usize].write();
                let mut buffer = self.copy_buffer.lock();
                buffer.resize(length as usize, 0);
                let source = &self.tiers[active.from.tier as usize].device;
                let target = &self.tiers[active.to.tier as usize].device;
                let home_too = self.home_too(&active);
                source
                    .read_at(self.slot_offset(active.from) + start, &mut buffer)
                    .and_then(|()| target.write_at(self.slot_offset(active.to) + start, &buffer))
                    .and_then(|()| {
                        if home_too {
                            self.tiers[self.home() as usize].device.write_at(
                                u64::from(active.segment) * self.options.segment_bytes + start,
                                &buffer,
                            )
                        } else {
                            Ok(())
                        }
                    })
                    .map(|()| active.copied[chunk as usize].store(true, Ordering::Release))
            };
            self.max_chunk_hold_ns.fetch_max(
                self.clock.now_ns().saturating_sub(hold_started_ns),
                Ordering::Relaxed,
            );
            match result {
                Ok(()) => {
                    active.next_chunk.store(chunk + 1, Ordering::Relaxed);
                    active.copied_bytes.fetch_add(length, Ordering::Relaxed);
                    let mut monitor = self.monitor.lock();
                    monitor.record_migration_io(active.from.tier, length);
                    monitor.record_migration_io(active.to.tier, length);
                    StepOutcome::Copied { bytes: length }
                }
                Err(error) => self.abandon(&active, &format!("failed: {error}")),
            }
        } else {
            self.finish(&active)
        }
    }

    /// A move onto a write-through (volatile) tier from another fast tier
    /// also copies to home, so home backs the RAM copy after the flip.
    fn home_too(&self, active: &ActiveMove) -> bool {
        active.from.tier != self.home() && self.tiers[active.to.tier as usize].write_through
    }

    /// Gives `location`'s slot back to its tier (home slots are fixed).
    fn release(&self, location: Location, home: TierId) {
        let tier = &self.tiers[location.tier as usize];
        if location.tier != home {
            tier.free_slots.lock().push(location.slot);
        }
        tier.used_segments.fetch_sub(1, Ordering::Relaxed);
    }

    fn abandon(&self, active: &Arc<ActiveMove>, outcome: &str) -> StepOutcome {
        let home = self.home();
        {
            let mut guard = self.entries[active.segment as usize].write();
            guard.moving = false;
            *self.active.write() = None;
        }
        self.release(active.to, home);
        self.record_finished(
            &active.as_move(),
            active.from,
            active.copied_bytes.load(Ordering::Relaxed),
            active.started_ns,
            outcome.to_string(),
        );
        StepOutcome::Failed {
            segment: active.segment,
        }
    }

    fn finish(&self, active: &Arc<ActiveMove>) -> StepOutcome {
        let home = self.home();
        // The copied data must be durable before the mapping that points at it
        // (on home too when home is what backs a volatile target).
        let mut flushed = self.tiers[active.to.tier as usize].device.flush();
        if flushed.is_ok() && self.home_too(active) {
            flushed = self.tiers[home as usize].device.flush();
        }
        if let Err(error) = flushed {
            return self.abandon(active, &format!("failed: flushing the target: {error}"));
        }
        // Timed to the journal append: the record carries it, so the mean
        // move time survives a restart that replays the record.
        let elapsed_ns = self.clock.now_ns().saturating_sub(active.started_ns);
        {
            let mut meta = self.meta.lock();
            if let Err(error) = meta.append(&Record::Place {
                segment: active.segment,
                location: active.to,
                move_ns: Some(elapsed_ns),
            }) {
                drop(meta);
                return self.abandon(active, &format!("failed: journal: {error}"));
            }
            let switch_started_ns = self.clock.now_ns();
            let mut guard = self.entries[active.segment as usize].write();
            guard.location = active.to;
            guard.moving = false;
            let target = &self.tiers[active.to.tier as usize];
            let home_current = active.to.tier == home
                || target.write_through
                || (active.from.tier == home
                    && self.home_current[active.segment as usize].load(Ordering::Acquire));
            self.home_current[active.segment as usize].store(home_current, Ordering::Release);
            *self.active.write() = None;
            drop(guard);
            self.max_switch_over_ns.fetch_max(
                self.clock.now_ns().saturating_sub(switch_started_ns),
                Ordering::Relaxed,
            );
        }
        self.release(active.from, home);
        {
            let mut planner = self.planner.lock();
            planner.completed_moves += 1;
            planner.timed_moves += 1;
            planner.total_move_ns += elapsed_ns as f64;
        }
        self.record_finished(
            &active.as_move(),
            active.from,
            active.copied_bytes.load(Ordering::Relaxed),
            active.started_ns,
            "done".to_string(),
        );
        StepOutcome::Finished {
            segment: active.segment,
        }
    }

    fn record_finished(
        &self,
        planned: &Move,
        from: Location,
        bytes: u64,
        started_ns: u64,
        outcome: String,
    ) {
        let record = MoveRecord {
            segment: planned.segment,
            from: self.tiers[from.tier as usize].name.clone(),
            to: self
                .tiers
                .get(planned.to as usize)
                .map_or_else(|| format!("tier {}", planned.to), |tier| tier.name.clone()),
            rule: planned.reason.rule.clone(),
            detail: planned.reason.detail.clone(),
            started_ns,
            finished_ns: self.clock.now_ns(),
            bytes_copied: bytes,
            outcome,
        };
        let mut planner = self.planner.lock();
        if !record.outcome.starts_with("done") && !record.outcome.starts_with("failed") {
            planner.dropped_moves += 1;
        }
        if planner.recent.len() == RECENT_MOVES {
            planner.recent.pop_front();
        }
        planner.recent.push_back(record);
    }

    /// The move being copied now, if any.
    pub fn active_move(&self) -> Option<InFlightMove> {
        self.active.read().as_ref().map(|active| InFlightMove {
            segment: active.segment,
            from: self.tiers[active.from.tier as usize].name.clone(),
            to: self.tiers[active.to.tier as usize].name.clone(),
            rule: active.reason.rule.clone(),
            detail: active.reason.detail.clone(),
            copied_bytes: active.copied_bytes.load(Ordering::Relaxed),
            total_bytes: self.options.segment_bytes,
        })
    }

    /// Everything `tierd status` shows.
    pub fn status(&self) -> VolumeStatus {
        let placement = self.placement();
        let planner = self.planner.lock();
        let in_flight = self.active_move().into_iter().collect();
        VolumeStatus {
            name: self.options.name.clone(),
            size_bytes: self.options.size_bytes,
            segment_bytes: self.options.segment_bytes,
            segments: self.segments,
            policy: planner.policy.name().to_string(),
            periods_closed: planner.periods_closed,
            placement_by_tier: self
                .tiers
                .iter()
                .enumerate()
                .map(|(index, tier)| {
                    (
                        tier.name.clone(),
                        placement
                            .iter()
                            .filter(|tier| **tier as usize == index)
                            .count() as u32,
                    )
                })
                .collect(),
            placement: placement
                .iter()
                .map(|tier| char::from_digit(u32::from(*tier), 10).unwrap_or('?'))
                .collect(),
            tiers: self
                .tiers
                .iter()
                .map(|tier| {
                    let used = tier.used_segments.load(Ordering::Relaxed);
                    TierStatus {
                        name: tier.name.clone(),
                        volatile: tier.volatile,
                        write_through: tier.write_through,
                        capacity_segments: tier.capacity_segments,
                        used_segments: used,
                        used_bytes: u64::from(used) * self.options.segment_bytes,
                        capacity_bytes: tier.device.size_bytes(),
                        stats: tier.device.stats(),
                        failed: tier.device.failure(),
                    }
                })
                .collect(),
            in_flight,
            pending_moves: planner.pending.len(),
            completed_moves: planner.completed_moves,
            dropped_moves: planner.dropped_moves,
            mean_move_ns: planner.mean_move_ns(),
            max_chunk_hold_ns: self.max_chunk_hold_ns.load(Ordering::Relaxed),
            max_switch_over_ns: self.max_switch_over_ns.load(Ordering::Relaxed),
            recent_moves: planner.recent.iter().cloned().collect(),
            warnings: self.warnings.lock().clone(),
            unavailable: self.unavailable_ranges(),
            pins: {
                let names = self.tier_names();
                planner
                    .pins
                    .values()
                    .map(|pin| {
                        PinStatus::new(pin, &names, placement.get(pin.segment as usize).copied())
                    })
                    .collect()
            },
            last_plan: planner.last_plan.clone(),
        }
    }

    /// Marks tier `name` unavailable (its device was lost, or a drill says
    /// so) or available again. Only changes what status reports: reads
    /// already fall back to home where home is current and fail otherwise.
    /// False when the volume has no such tier.
    pub fn set_tier_unavailable(&self, name: &str, unavailable: bool) -> bool {
        match self.tiers.iter().position(|tier| tier.name == name) {
            Some(index) => {
                self.unavailable_tiers[index].store(unavailable, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// Looks at every tier's backing (a file truncated or replaced under the
    /// server fails its tier: IO to it then fails with EIO, never zeroes; a
    /// deleted one is still served from the open file and gets a status
    /// warning) and returns what changed at this check, per tier.
    /// The runner calls it about once a second.
    pub fn check_backings(&self) -> Vec<(String, String)> {
        let mut newly_failed = Vec::new();
        for (index, tier) in self.tiers.iter().enumerate() {
            if let Some(reason) = tier.device.check_backing() {
                if !self.unavailable_tiers[index].swap(true, Ordering::SeqCst) {
                    newly_failed.push((tier.name.clone(), reason));
                }
            } else if let Some(warning) = tier.device.backing_warning() {
                let warning = format!("tier {}: {warning}", tier.name);
                let mut warnings = self.warnings.lock();
                if !warnings.contains(&warning) {
                    warnings.push(warning.clone());
                    newly_failed.push((tier.name.clone(), warning));
                }
            }
        }
        newly_failed
    }

    /// Startup, after an operator accepted losing tier `index`'s contents
    /// (`--accept-reset`): every segment placed on it is placed on home
    /// again (journaled), where its home copy — possibly stale — is served.
    /// Returns those segments. Home itself cannot be forgotten this way.
    pub fn forget_tier(&self, index: usize) -> Result<Vec<SegmentId>, VolumeError> {
        let home = self.home();
        let mut forgotten = Vec::new();
        if index >= self.tiers.len() || index == home as usize {
            return Ok(forgotten);
        }
        for segment in 0..self.segments {
            let location = self.entry(segment).location;
            if location.tier as usize != index {
                continue;
            }
            let to = Location {
                tier: home,
                slot: segment,
            };
            self.meta.lock().append(&Record::Place {
                segment,
                location: to,
                move_ns: None,
            })?;
            self.entries[segment as usize].write().location = to;
            self.home_current[segment as usize].store(true, Ordering::Release);
            self.release(location, home);
            self.tiers[home as usize]
                .used_segments
                .fetch_add(1, Ordering::Relaxed);
            forgotten.push(segment);
        }
        Ok(forgotten)
    }

    /// Segments on an unavailable tier whose home copy is not current, as
    /// byte ranges (adjacent segments on the same tier merged); every
    /// segment when home itself failed.
    pub fn unavailable_ranges(&self) -> Vec<UnavailableRange> {
        let home = self.home();
        let home_failed = self.unavailable_tiers[home as usize].load(Ordering::SeqCst);
        let mut ranges: Vec<UnavailableRange> = Vec::new();
        for segment in 0..self.segments {
            let tier = self.entry(segment).location.tier;
            let lost = if tier == home {
                home_failed
            } else {
                self.unavailable_tiers[tier as usize].load(Ordering::SeqCst)
                    && (home_failed || !self.home_current[segment as usize].load(Ordering::Acquire))
            };
            if !lost {
                continue;
            }
            let name = &self.tiers[tier as usize].name;
            let start = u64::from(segment) * self.options.segment_bytes;
            let length = self
                .options
                .segment_bytes
                .min(self.options.size_bytes - start);
            match ranges.last_mut() {
                Some(last) if last.tier == *name && last.last_segment + 1 == segment => {
                    last.last_segment = segment;
                    last.length_bytes += length;
                }
                _ => ranges.push(UnavailableRange {
                    tier: name.clone(),
                    offset_bytes: start,
                    length_bytes: length,
                    first_segment: segment,
                    last_segment: segment,
                }),
            }
        }
        ranges
    }

    /// Pins `segment` to tier `tier` (`tierd pin`): no policy moves it
    /// again, until `until_unix_ns` (wall time, [`Clock::unix_now_ns`]) when
    /// given, or until [`Volume::unpin`]. If it is elsewhere, an operator
    /// move to `tier` is queued first in line. The pin is journaled
    /// (fsynced) before this returns, so an acknowledged pin survives a
    /// crash; a pin replaces an earlier pin of the segment. Refused: a
    /// segment or tier out of range, an expiry already past, a tier with no
    /// free slot (slots promised to other pins' queued moves count as
    /// taken). Returns true when a move was queued.
    pub fn pin(
        &self,
        segment: SegmentId,
        tier: TierId,
        until_unix_ns: Option<u64>,
    ) -> Result<bool, VolumeError> {
        self.check_pin_target(segment)?;
        let Some(tier_state) = self.tiers.get(tier as usize) else {
            return Err(VolumeError::Invalid(format!(
                "tier {tier} does not exist (the stack has {} tiers, 0 = fastest)",
                self.tiers.len()
            )));
        };
        let now_unix_ns = self.clock.unix_now_ns();
        if let Some(until) = until_unix_ns.filter(|until| *until <= now_unix_ns) {
            return Err(VolumeError::Invalid(format!(
                "the pin would end at {}, which has passed (now {})",
                tierd_common::units::format_rfc3339_utc(until),
                tierd_common::units::format_rfc3339_utc(now_unix_ns)
            )));
        }
        let mut planner = self.planner.lock();
        let current = self.entry(segment).location.tier;
        let arriving = |segment: SegmentId| {
            self.active
                .read()
                .as_ref()
                .is_some_and(|active| active.segment == segment && active.to.tier == tier)
        };
        let needs_move = current != tier && !arriving(segment);
        if needs_move && tier != self.home() {
            // Slots already promised: other pins to this tier whose move has
            // not taken its slot yet.
            let promised = planner
                .pins
                .values()
                .filter(|other| {
                    other.segment != segment
                        && other.tier == tier
                        && self.entry(other.segment).location.tier != tier
                        && !arriving(other.segment)
                })
                .count();
            let free = tier_state.free_slots.lock().len();
            if free <= promised {
                return Err(VolumeError::Invalid(format!(
                    "tier {} has no room to pin segment {segment} of volume {}: {free} of its {} slots are free{}; unpin or move a segment off it first",
                    tier_state.name,
                    self.options.name,
                    tier_state.capacity_segments,
                    if promised > 0 {
                        format!(" and {promised} of them are promised to pins whose moves are queued")
                    } else {
                        String::new()
                    }
                )));
            }
        }
        let pin = Pin {
            segment,
            tier,
            until_unix_ns,
        };
        // Planner, then journal: the order `checkpoint` takes them in, so a
        // checkpoint sees the pin if and only if it replaces this record.
        self.meta.lock().append(&Record::Pin {
            segment,
            tier,
            until_unix_ns,
        })?;
        planner.pins.insert(segment, pin);
        // Moves of the segment queued before the pin would take it away.
        let queued_before = planner.pending.len();
        planner.pending.retain(|queued| queued.segment != segment);
        let removed = (queued_before - planner.pending.len()) as u64;
        planner.dropped_moves += removed;
        if needs_move {
            planner.pending.push_front(Move {
                segment,
                from: current,
                to: tier,
                reason: MoveReason {
                    rule: "operator".to_string(),
                    detail: "pinned with tierd pin".to_string(),
                },
            });
        }
        Ok(needs_move)
    }

    /// Ends the pin of `segment` (`tierd unpin`), journaled before this
    /// returns. The segment stays where it is; policies may move it again.
    pub fn unpin(&self, segment: SegmentId) -> Result<Pin, VolumeError> {
        self.check_pin_target(segment)?;
        let mut planner = self.planner.lock();
        let Some(pin) = planner.pins.get(&segment).copied() else {
            return Err(VolumeError::Invalid(format!(
                "segment {segment} of volume {} is not pinned",
                self.options.name
            )));
        };
        self.meta.lock().append(&Record::Unpin { segment })?;
        planner.pins.remove(&segment);
        Ok(pin)
    }

    /// The operator pins, by segment.
    pub fn pins(&self) -> Vec<Pin> {
        self.planner.lock().pins.values().copied().collect()
    }

    /// Events for the log since the last call (an expired pin, a pin whose
    /// move was queued again).
    pub fn take_events(&self) -> Vec<String> {
        std::mem::take(&mut self.planner.lock().events)
    }

    fn check_pin_target(&self, segment: SegmentId) -> Result<(), VolumeError> {
        if segment >= self.segments {
            return Err(VolumeError::Invalid(format!(
                "segment {segment} is beyond volume {}'s {} segments (0 to {})",
                self.options.name,
                self.segments,
                self.segments.saturating_sub(1)
            )));
        }
        Ok(())
    }

    /// Drops the pins whose time has come (at a period end), journaling
    /// each; a failed append keeps the pin until the next period.
    fn expire_pins(&self, planner: &mut Planner) {
        let now_unix_ns = self.clock.unix_now_ns();
        let expired: Vec<Pin> = planner
            .pins
            .values()
            .filter(|pin| pin.until_unix_ns.is_some_and(|until| until <= now_unix_ns))
            .copied()
            .collect();
        for pin in expired {
            let tier = &self.tiers[pin.tier as usize].name;
            let until = tierd_common::units::format_rfc3339_utc(pin.until_unix_ns.unwrap_or(0));
            match self.meta.lock().append(&Record::Unpin {
                segment: pin.segment,
            }) {
                Ok(()) => {
                    planner.pins.remove(&pin.segment);
                    planner.events.push(format!(
                        "pin of segment {} to tier {tier} expired at {until}; policies may move it again",
                        pin.segment
                    ));
                }
                Err(error) => planner.events.push(format!(
                    "pin of segment {} to tier {tier} expired at {until} but could not be journaled ({error}); kept until the next period",
                    pin.segment
                )),
            }
        }
    }

    /// A pinned segment that is not on its tier (its move failed, was
    /// dropped, or a crash came first) gets its move queued again when
    /// nothing moves it and the tier has a free slot.
    fn requeue_pinned_moves(&self, planner: &mut Planner) {
        let active_segment = self.active.read().as_ref().map(|active| active.segment);
        let pins: Vec<Pin> = planner.pins.values().copied().collect();
        for pin in pins {
            let current = self.entry(pin.segment).location.tier;
            if current == pin.tier
                || active_segment == Some(pin.segment)
                || planner
                    .pending
                    .iter()
                    .any(|queued| queued.segment == pin.segment)
            {
                continue;
            }
            let tier = &self.tiers[pin.tier as usize];
            if pin.tier != self.home() && tier.free_slots.lock().is_empty() {
                continue;
            }
            planner.pending.push_front(Move {
                segment: pin.segment,
                from: current,
                to: pin.tier,
                reason: MoveReason {
                    rule: "operator".to_string(),
                    detail: "pinned with tierd pin (its move queued again)".to_string(),
                },
            });
            planner.events.push(format!(
                "segment {} is pinned to tier {} but is on {}: its move is queued again",
                pin.segment, tier.name, self.tiers[current as usize].name
            ));
        }
    }
}
