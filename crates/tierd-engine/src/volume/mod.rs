//! A volume: segments over an N-tier stack, routed by the tiering table,
//! moved online by the migration copier, planned by a `tierd-policy` policy.
//!
//! The bottom tier is home: segment `s` always has a home extent at
//! `s * segment_bytes`. Faster tiers hold segments in slots (segment-sized
//! extents) given out from a free list.
//!
//! ## Rules (the same the simulator runs, `docs/engine/volume.md`)
//! - Which moves are accepted, which slot a move takes and when a slot is
//!   free again is decided by the shared placement table
//!   ([`tierd_core::placement`]), kept in the planner. Each segment's entry
//!   holds its location for the IO path.
//! - Every IO to a segment holds the segment's entry lock shared for the
//!   IO's duration; starting and finishing a move takes it exclusively, so a
//!   placement never changes under an IO and a freed slot is never read.
//! - During a move of segment `s` from A to B, reads go to A; writes go to
//!   A and, as the shared move machine ([`tierd_core::moves`]) routes them,
//!   to B as well: at once for a chunk already landed, handed to the mover
//!   for a chunk being copied (applied after the copy lands; the write does
//!   not wait for it). So every write reaches B through the copy, the
//!   mirror or the hand-over.
//! - When every chunk is copied: flush B, append `Place{s, B}` to the journal
//!   (fsync), then flip the entry under its lock. The mapping is durable only
//!   after the data is. Writes keep mirroring until the flip, so the flip
//!   waits only for IOs in flight on that segment.
//! - Locks are taken in this order: planner, journal (`meta`), a segment's
//!   entry, the list of active moves, a move's state.
//! - A volatile (memory) tier is written through: a write to a segment on it
//!   also reaches home before the ack, unless the tier has
//!   `unsafe_volatile = true`.
//! - FLUSH flushes every tier device, so it covers writes completed on any
//!   connection. A FUA write is a durable write on every device it reaches
//!   (only its range: `BlockDevice::write_at_durable`); a FUA discard or
//!   zero flushes the devices it touched.
//!
//! ## Layout
//! The types and the small accessors are here; `impl Volume` is split by
//! concern: `io` (the user IO path), `migration` (the copier), `recovery`
//! (`open`, checkpoints), `planning` (the policy tick, the move queue, pins),
//! `status` and `block_status` (which ranges hold data, for NBD
//! `BLOCK_STATUS`); `recorder` is the monitor the IO threads record into.

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};

use std::sync::Arc;
use tierd_core::moves::{MoveMachine, MoveRules};
use tierd_core::placement::PlacementTable;

use tierd_common::clock::Clock;
use tierd_policy::{Move, MoveReason, Policy, PolicyConfig, SegmentId, TierId};

use crate::device::{BlockDevice, DeviceError};
use crate::meta::{LastPlan, Location, MetaError, MetaFaults, MetaStore, MoveRecord, Pin};

mod block_status;
mod cache;
mod io;
mod migration;
mod planning;
mod recorder;
mod recovery;
mod smr;
mod status;

pub use block_status::{MAX_STATUS_RUNS, MAX_STATUS_SEGMENTS};
pub use cache::{CacheOptions, CacheStatus, CacheStep};
pub use smr::{BandRange, SmrModelStatus, SmrStatus};
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
    pub migration: MigrationOptions,
}

/// How moves copy (from `[[volume]]`): the shared machine's pacing plus
/// how many moves and chunks run at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MigrationOptions {
    /// Moves copying at the same time.
    pub max_concurrent_moves: u32,
    /// Chunks of one move in flight (one copier thread each).
    pub chunks_in_flight: u32,
    /// Largest share of time a move's copy may run (0 < share ≤ 1).
    pub share: f64,
    pub max_rate_bytes_per_second: Option<u64>,
}

impl Default for MigrationOptions {
    fn default() -> Self {
        Self {
            max_concurrent_moves: 1,
            chunks_in_flight: 4,
            share: 1.0,
            max_rate_bytes_per_second: None,
        }
    }
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
}

/// A move being copied.
struct ActiveMove {
    segment: SegmentId,
    from: Location,
    to: Location,
    reason: MoveReason,
    started_ns: u64,
    /// Home gets the copy too: a move onto a write-through (volatile) tier
    /// from another fast tier, so home backs the RAM copy after the flip.
    home_too: bool,
    state: Mutex<MoveState>,
}

/// A move's bookkeeping, locked between IOs (never across one).
struct MoveState {
    machine: MoveMachine<Handed>,
    /// A copier is flipping or abandoning the move: nobody else may.
    flipping: bool,
    /// A copy or a handed-over part failed: the move is abandoned when its
    /// last copier is done.
    failure: Option<String>,
    /// Copiers doing IO for this move now.
    workers: u32,
}

/// A move's segment and its machine's decisions (tests comparing worlds).
type MoveDecisions = (SegmentId, Vec<tierd_core::moves::Decision>);

/// What a write part handed to the mover carries.
enum Handed {
    Data(Vec<u8>),
    Discard,
    Zero,
}

impl Handed {
    fn as_mutation(&self) -> io::Mutation<'_> {
        match self {
            Handed::Data(data) => io::Mutation::Write(data),
            Handed::Discard => io::Mutation::Discard,
            Handed::Zero => io::Mutation::Zero,
        }
    }
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
    /// Moves are active but none has work now: pacing lets the next chunk
    /// start at `until_ns`, or (`None`) chunks, handed-over parts or writes
    /// are in flight on other threads.
    Waiting { until_ns: Option<u64> },
}

/// What [`Volume::copy_begin`] did: finished a step already, or read a
/// chunk that [`Volume::copy_end`] writes.
pub enum CopyBegun {
    Done(StepOutcome),
    Read(ChunkRead),
}

/// A chunk read from a move's source, in flight until [`Volume::copy_end`].
/// Dropped without it (its copier panicked, or a test dropped it), it fails
/// its move, which is then abandoned: nobody will land the chunk.
pub struct ChunkRead {
    active: Arc<ActiveMove>,
    chunk: u32,
    part: tierd_core::moves::Part,
    buffer: Vec<u8>,
    result: Result<(), String>,
    started_ns: u64,
    ended: bool,
}

impl Drop for ChunkRead {
    fn drop(&mut self) {
        if !self.ended {
            let mut state = self.active.state.lock();
            state.workers = state.workers.saturating_sub(1);
            state.failure.get_or_insert_with(|| {
                "failed: a chunk copy ended unfinished (its copier failed)".to_string()
            });
        }
    }
}

impl ChunkRead {
    /// The segment being moved.
    pub fn segment(&self) -> SegmentId {
        self.active.segment
    }

    /// The chunk of the segment.
    pub fn chunk(&self) -> u32 {
        self.chunk
    }
}

/// A move accepted into the placement table's queue: the plan's move, when
/// it was first accepted and how long it pays back (the stale rule's inputs).
struct QueuedMove {
    planned: Move,
    accepted_ns: u64,
    payback_ns: Option<u64>,
}

impl QueuedMove {
    fn new(planned: Move, accepted_ns: u64, payback_ns: Option<u64>) -> Self {
        Self {
            planned,
            accepted_ns,
            payback_ns,
        }
    }

    /// An operator's move (`tierd move`, `tierd pin`): never stale by the
    /// policy's plan.
    fn is_operator(&self) -> bool {
        self.planned.reason.rule == "operator"
    }
}

struct Planner {
    policy: Box<dyn Policy>,
    /// Where every segment lives, the fast tiers' free slots and the moves
    /// accepted and not started (the simulator's table too).
    table: PlacementTable<QueuedMove>,
    recent: VecDeque<MoveRecord>,
    completed_moves: u64,
    /// Of `completed_moves`, those whose time is known (journal records
    /// older than their `move_ns` field have none), and their total time.
    timed_moves: u64,
    total_move_ns: f64,
    /// Moves dropped before they started, by reason.
    dropped: tierd_core::placement::DroppedMoves,
    /// Moves finished since start, by the rule that asked for them
    /// (`operator`, `pin`, a policy's rule names).
    completed_by_rule: std::collections::BTreeMap<String, u64>,
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
    active: RwLock<Vec<Arc<ActiveMove>>>,
    /// Chunk buffers of the copiers, reused.
    copy_buffers: Mutex<Vec<Vec<u8>>>,
    /// Names a user write to a moving segment while its move tracks it.
    next_write_id: AtomicU64,
    /// When on, every move's machine logs its decisions, kept here by
    /// segment when the move ends ([`Volume::record_move_decisions`]).
    decision_log: Mutex<Option<Vec<MoveDecisions>>>,
    /// Written by every IO thread without a shared lock (per-thread shards);
    /// merged when read.
    monitor: recorder::LiveMonitor,
    planner: Mutex<Planner>,
    meta: Mutex<MetaStore>,
    clock: Arc<dyn Clock>,
    /// Set by startup when volatile tiers lost data (unsafe_volatile).
    warnings: Mutex<Vec<String>>,
    /// Longest a chunk copy took (read, write and the write parts handed
    /// over for it; no user write waits for it), and longest switch-over (waiting for IO in flight
    /// on the segment plus the flip; new IO to the segment waits for it).
    max_chunk_hold_ns: AtomicU64,
    max_switch_over_ns: AtomicU64,
    /// Per tier: marked unavailable by an operator or a drill
    /// ([`Volume::set_tier_unavailable`]); status reports what it holds.
    unavailable_tiers: Vec<AtomicBool>,
    /// A cache volume's block cache over home (`None`: a tiered volume).
    cache: Option<cache::CacheLayer>,
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

    /// A promotion's copy time (one segment from home to the tier just
    /// above it) derived from the tiers' measured throughput: the bytes
    /// each moved per second of busy time (home's reads and writes, the
    /// target's), the slower of the two. `None` until each has moved a
    /// segment's worth of bytes, or on a one-tier stack. Pessimistic under
    /// small random IO (a disk's busy time then goes to seeks a sequential
    /// copy does not make); the mean of measured moves replaces it as soon
    /// as one completes ([`tierd_policy::view::MigrationStats::device_move_ns`]).
    fn device_move_ns(&self) -> Option<f64> {
        let home = self.home() as usize;
        let above = home.checked_sub(1)?;
        let segment_bytes = self.options.segment_bytes;
        let throughput = |tier: usize| {
            let stats = self.tiers[tier].device.stats()?;
            let bytes = stats.read_bytes + stats.write_bytes;
            (bytes >= segment_bytes && stats.busy_ns > 0)
                .then(|| bytes as f64 * 1e9 / stats.busy_ns as f64)
        };
        let slower = throughput(home)?.min(throughput(above)?);
        Some(segment_bytes as f64 / slower)
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
        self.planner.lock().table.tiers_of().to_vec()
    }

    /// The shared move machine's rules for this volume.
    fn move_rules(&self) -> MoveRules {
        let migration = &self.options.migration;
        MoveRules {
            chunk_bytes: self.options.chunk_bytes,
            chunks_in_flight: migration.chunks_in_flight.max(1),
            chunk_gap_ns: 0,
            share: migration.share,
            max_bandwidth_bytes_per_second: migration.max_rate_bytes_per_second,
        }
    }

    fn slot_offset(&self, location: Location) -> u64 {
        u64::from(location.slot) * self.options.segment_bytes
    }
}
