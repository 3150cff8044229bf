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
//!
//! ## Layout
//! The types and the small accessors are here; `impl Volume` is split by
//! concern: `io` (the user IO path), `migration` (the copier), `recovery`
//! (`open`, checkpoints), `planning` (the policy tick, the move queue, pins)
//! and `status`; `recorder` is the monitor the IO threads record into.

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::Arc;

use tierd_common::clock::Clock;
use tierd_policy::{Move, MoveReason, Policy, PolicyConfig, SegmentId, TierId};

use crate::device::{BlockDevice, DeviceError};
use crate::meta::{LastPlan, Location, MetaError, MetaFaults, MetaStore, MoveRecord, Pin};

mod io;
mod migration;
mod planning;
mod recorder;
mod recovery;
mod status;

pub use status::{InFlightMove, PinStatus, TierStatus, UnavailableRange, VolumeStatus};

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
    /// Written by every IO thread without a shared lock (per-thread shards);
    /// merged when read.
    monitor: recorder::LiveMonitor,
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

impl Volume {
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
}
