//! The discrete-event loop: one run of one strategy over one trace.
//!
//! Single-threaded and deterministic: the next event is the earliest of (a)
//! the next trace arrival (open loop), (b) each device model's next event,
//! (c) the timer heap (paced migration chunks), ordered by `(time, seq)`, and
//! (d) the end of the current period; ties go period end → devices (tier
//! order) → timers → arrivals. Time is a plain `u64` of virtual nanoseconds;
//! no clock is read.
//!
//! See `docs/sim.md` for the model: request splitting, the tiering table,
//! migration rules (shared with the live engine, `docs/moves.md`), the cache
//! baselines, and how every reported figure is computed.
//!
//! Layout: the types, the main loop and request routing are here;
//! `arrivals` (the trace side), `completions` (device queues and what each
//! completion means), `migration` (moves, driven through
//! `tierd_core::moves`), `cache` (the page-cache baselines), `periods`
//! (period ends and the policy) and `finish` (the result).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::cursor::Cursor;
use tierd_core::cache::{BlockCache, Step, Writeback};
use tierd_core::placement::{
    home_current_after_flip, write_reaches_home, Location, PlacementTable, StaleInputs, Started,
};
use tierd_device::{Completion, DeviceCounters, DeviceIo, DeviceModel, DevicePreset};
use tierd_policy::monitor::Monitor;
use tierd_policy::view::{MigrationStats, TierInfo};
use tierd_policy::{Move, Plan, Policy, SegmentId, TierId, View};
use tierd_trace::{Op, Request, TraceReader};

use crate::config::{Replay, SimConfig};
use crate::error::SimError;
use crate::result::{
    CacheResult, MoveRecord, PeriodRecord, RunResult, RunSettings, TierPeriod, TierResult,
};
use tierd_common::histogram::Histogram;

mod arrivals;
mod cache;
mod completions;
mod finish;
mod migration;
mod periods;
mod replicas;
mod slab;
#[cfg(test)]
mod tests;

use cache::CacheCounters;
use migration::{ActiveMove, QueuedMove};
use slab::Slab;

/// What decides placement in a run.
pub enum Controller {
    /// A tiering policy, called at every period end.
    Policy(Box<dyn Policy>),
    /// A block cache (`tierd_core::cache::BlockCache`, the live engine's
    /// cache core) over tier 0 (its slots) and the home tier.
    Cache(Box<BlockCache>),
}

/// Reported to the progress callback every [`PROGRESS_EVERY`] completed requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub requests: u64,
    pub now_ns: u64,
}

/// Completed requests between two progress reports.
pub const PROGRESS_EVERY: u64 = 1 << 16;

// Device IO ids: the kind in the top byte, a payload below.
const KIND_SHIFT: u32 = 56;
const PAYLOAD_MASK: u64 = (1 << KIND_SHIFT) - 1;
const KIND_USER: u64 = 0;
const KIND_MIGRATION_READ: u64 = 1;
const KIND_MIGRATION_WRITE: u64 = 2;
const KIND_CACHE_FILL: u64 = 3;
const KIND_WRITEBACK_READ: u64 = 4;
const KIND_WRITEBACK_WRITE: u64 = 5;
/// The target half of a user write mirrored during a move.
const KIND_MIRROR_WRITE: u64 = 6;
/// A part of a user write handed to a move, applied to its target after the
/// chunk's copy (background, not user IO).
const KIND_HANDED_OVER: u64 = 7;
/// The home half of a user write to a write-through (memory) tier.
const KIND_THROUGH_WRITE: u64 = 8;
/// A chunk copy's home half, for a move onto a write-through tier from
/// another fast tier (home backs the RAM copy after the flip; background).
const KIND_MIGRATION_THROUGH: u64 = 9;
/// A block cache's device IO the user waits for (payload: its group).
const KIND_CACHE_USER: u64 = 10;
/// A split fill's read of its whole block(s) from home (background; the
/// user's part is read on its own, `KIND_CACHE_USER`; payload: its group).
const KIND_CACHE_FILL_READ: u64 = 11;
/// A promotion's home read of one block (background).
const KIND_CACHE_LOAD_READ: u64 = 12;
/// A promotion's slot write of one block (background; payload: its entry).
const KIND_CACHE_LOAD_WRITE: u64 = 13;
/// An SMR band rewrite's IO (background; payload: its entry in
/// `Engine::destage_ios`).
const KIND_DESTAGE: u64 = 14;
/// A replica copy's read or write on home (background; `replicas`).
const KIND_REPLICA_COPY: u64 = 15;

/// User IO (a piece, the target half of a mirrored write, the home half of
/// a written-through write): counts in the user-busy time the policies see
/// (`TierPeriodStats::user_busy_ns`).
#[inline]
fn is_user_io(id: u64) -> bool {
    matches!(
        id >> KIND_SHIFT,
        KIND_USER | KIND_MIRROR_WRITE | KIND_THROUGH_WRITE | KIND_CACHE_USER
    )
}

/// `moving[segment]`: no move of it is copying.
const NOT_MOVING: u32 = u32::MAX;

const HOUR_NS: u64 = 3_600_000_000_000;

#[derive(Clone, Copy, Debug, Default)]
struct RequestState {
    arrival_ns: u64,
    pieces_left: u32,
    is_write: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Piece {
    request: u32,
    segment: SegmentId,
    tier: TierId,
    is_write: bool,
    volume_offset: u64,
    /// Where the piece went on its tier's device.
    device_offset: u64,
    bytes: u64,
    /// Order in which pieces were sent to a device (tells a move which
    /// writes were issued before it started).
    route_sequence: u64,
    /// Device halves still outstanding: 1 for a plain piece; a write
    /// mirrored during a move adds its target half (and any re-issue).
    parts_left: u8,
    /// The source half (the piece's own device IO) has completed.
    source_done: bool,
    source_done_ns: u64,
    /// A write tracked by this move (slot in `Engine::active`).
    mirror_move: Option<u32>,
    /// A part was mirrored to a move's target.
    mirrored: bool,
}

impl Piece {
    /// Acknowledged: every half has completed.
    fn finished(&self) -> bool {
        self.parts_left == 0
    }
}

/// Per-period accumulators reset at each period end.
#[derive(Default)]
struct PeriodCounters {
    requests: u64,
    response_ns_total: u128,
    moves_started: u64,
    moves_finished: u64,
}

struct Engine<'run> {
    config: &'run SimConfig,
    reader: &'run mut dyn TraceReader,
    controller: Controller,
    now_ns: u64,
    home: usize,
    segments: u64,

    // Devices and the host queues in front of them.
    devices: Vec<Box<dyn DeviceModel>>,
    device_next_ns: Vec<u64>,
    device_outstanding: Vec<usize>,
    /// User IOs submitted and not completed per tier, since when at least
    /// one has been, and the user-busy time gathered this period.
    user_outstanding: Vec<u32>,
    user_busy_since_ns: Vec<u64>,
    user_busy_ns: Vec<u64>,
    queue_limit: Vec<usize>,
    host_queues: Vec<VecDeque<DeviceIo>>,
    completions: Vec<Completion>,
    timers: BinaryHeap<Reverse<(u64, u64, u32)>>,
    timer_sequence: u64,

    // Arrivals: which requests and when (the rules `tierd replay` shares).
    cursor: Cursor,
    pending: Option<(u64, Request)>,
    last_arrival_ns: u64,
    deferred_requests: u64,
    defer_ns_total: u128,
    defer_ns_max: u64,

    // Requests in flight.
    requests: Slab<RequestState>,
    pieces: Slab<Piece>,
    outstanding_requests: u64,

    // Tiering table: the shared placement table (`tierd_core::placement`),
    // the same the live engine keeps; it holds the accepted moves' queue.
    table: PlacementTable<QueuedMove>,
    /// User write pieces of each segment routed and not yet acknowledged.
    segment_writes_in_flight: Vec<u32>,
    route_sequence: u64,
    /// Reused buffers for the move machines' answers (no allocation per write).
    route: tierd_core::moves::Route,
    handed: Vec<tierd_core::moves::HandedOver<migration::Stamp>>,
    /// Mirrored parts of user writes in flight.
    mirror_ios: Slab<migration::MirrorIo>,
    /// Per segment: the `active` index of the move copying it, or
    /// `NOT_MOVING`.
    moving: Vec<u32>,
    /// Per fast tier and slot: user IOs in flight there. A slot a segment
    /// left goes back to the table only when this reaches 0 (`draining`
    /// meanwhile).
    slot_ios: Vec<Vec<u32>>,
    draining: Vec<Vec<bool>>,
    moves_touching: Vec<u32>,
    /// Per tier: writes to its segments are written through to home (a
    /// memory tier that is not home and not `unsafe_volatile`), as
    /// `tierd serve` does.
    write_through: Vec<bool>,
    /// Per segment: home holds its current data (it is on home, written
    /// through, or not written since it left home). A demotion of such a
    /// segment copies nothing, as in the engine.
    home_current: Vec<bool>,

    // Migration.
    active: Vec<Option<ActiveMove>>,
    move_log: Vec<MoveRecord>,
    /// Moves dropped before they started, by reason (refused by the table,
    /// or stale: `tierd_core::placement::stale_reason`).
    dropped: tierd_core::placement::DroppedMoves,
    /// A promotion's copy time on idle copies of the stack's models
    /// (`devices::segment_copy_ns`), given to the policy until a move is
    /// measured.
    device_move_ns: Option<f64>,
    moved_ns_total: u128,
    mirrored_writes: u64,
    deferred_halves: u64,
    mirror_wait_ns_total: u128,
    mirror_wait_ns_max: u64,

    // Cache mode.
    cache_block_bytes: u64,
    /// When to answer a fill's user part with its own home read
    /// (`cache::SplitFills`); `None` on a tiering run.
    split_fills: Option<cache::SplitFills>,
    cache_counters: CacheCounters,
    /// The core's plan for the request being dispatched (reused).
    cache_steps: Vec<Step>,
    /// Runs of steps in flight, and the free entries (their step buffers kept).
    cache_groups: Vec<cache::CacheGroup>,
    cache_groups_free: Vec<u32>,
    writebacks: Slab<Writeback>,
    writebacks_in_flight: u32,
    /// A promoted block being read from home (one at a time), and the
    /// slot writes in flight.
    load_reading: Option<tierd_core::cache::Load>,
    load_writes: Slab<tierd_core::cache::Load>,
    /// An SMR home's band rewrite: its IOs in flight, and the parts of
    /// requests waiting for the band (`BlockIo::Blocked`), planned again
    /// when it ends.
    destage_ios: Slab<tierd_core::cache::DestageIo>,
    blocked: Vec<(u32, Request)>,
    /// When home's user IO last all completed (SMR idle time counts from it).
    home_idle_since_ns: u64,
    /// When the destage's idle timer is set for (one per idle spell).
    destage_wake_ns: u64,
    /// Replicas in free space on an HDD home (`--replicas`).
    replicas: Option<Box<replicas::ReplicaDriver>>,

    // Measurements.
    monitor: Monitor,
    response: Histogram,
    directions: crate::result::DirectionRecorder,
    tier_response: Vec<Histogram>,
    tier_bytes: Vec<u64>,
    completed: u64,
    completed_first_hour: u64,
    reads: u64,
    writes: u64,
    bytes: u64,
    pieces_total: u64,
    last_completion_ns: u64,
    period_counters: PeriodCounters,
    period_snapshot: Vec<DeviceCounters>,
    periods: Vec<PeriodRecord>,
    used_bytes_max: Vec<u64>,

    /// Tests only: block contents per device, checked at every flip.
    #[cfg(test)]
    shadow: Option<tests::Shadow>,
    /// Tests only: what happened, in order, and each move's decisions, to
    /// replay into the live engine (`tests::both_worlds`).
    #[cfg(test)]
    world_log: Option<tests::WorldLog>,
}

/// Runs `controller` over `reader` on `devices` (one per tier of
/// `config.stack`, fastest first). `policy_name` labels the result.
///
/// The reader must yield requests in non-decreasing time for open-loop
/// replay (a request earlier than its predecessor is replayed at the
/// predecessor's arrival and counted in `reordered_requests`).
pub fn run_with(
    config: &SimConfig,
    policy_name: &str,
    controller: Controller,
    devices: Vec<Box<dyn DeviceModel>>,
    reader: &mut dyn TraceReader,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunResult, SimError> {
    config.validate()?;
    let tiers = config.stack.tiers.len();
    if devices.len() != tiers {
        return Err(SimError::option(
            "devices",
            format!(
                "{} device models for {tiers} tiers; give one per tier",
                devices.len()
            ),
        ));
    }
    for (index, device) in devices.iter().enumerate() {
        let needed = if index == tiers - 1 {
            config.volume_bytes
        } else {
            config.tier_capacity_bytes(index)
        };
        if device.capacity_bytes() < needed {
            return Err(SimError::Device {
                tier: config.stack.tiers[index].name.clone(),
                device: device.name().to_string(),
                message: format!(
                    "the model holds {} bytes, the tier needs {needed}",
                    device.capacity_bytes()
                ),
            });
        }
    }
    if let Controller::Cache(_) = controller {
        if tiers != 2 {
            return Err(SimError::option(
                "policy",
                format!(
                    "the caching baselines need a two-tier stack (cache over home); {} has {tiers} tiers",
                    config.stack.name
                ),
            ));
        }
    }
    if let Some(run) = &config.replicas {
        let home = &config.stack.tiers[tiers - 1];
        if run.config.is_some() && !home.device.is_rotational() {
            return Err(SimError::option(
                "replicas",
                format!(
                    "replicas live in free space on an HDD home tier; {}'s home is {}",
                    config.stack.name,
                    home.device.name()
                ),
            ));
        }
    }
    let mut engine = Engine::new(config, controller, devices, reader);
    if let Some(run) = &config.replicas {
        engine.replicas = Some(Box::new(replicas::ReplicaDriver::new(
            run,
            config.volume_bytes,
        )?));
    }
    engine.run(progress)?;
    Ok(engine.finish(policy_name))
}

impl<'run> Engine<'run> {
    fn new(
        config: &'run SimConfig,
        controller: Controller,
        devices: Vec<Box<dyn DeviceModel>>,
        reader: &'run mut dyn TraceReader,
    ) -> Self {
        let tiers = devices.len();
        let home = tiers - 1;
        let segments = config.segments();
        let device_move_ns = match &controller {
            Controller::Policy(_) if home > 0 => {
                crate::devices::segment_copy_ns(config, home, home - 1)
                    .ok()
                    .map(|ns| ns as f64)
            }
            _ => None,
        };
        let capacity_segments: Vec<u32> = (0..tiers)
            .map(|tier| {
                if tier == home {
                    segments as u32
                } else {
                    (config.tier_capacity_bytes(tier) / config.segment_bytes)
                        .min(u64::from(u32::MAX)) as u32
                }
            })
            .collect();
        let slot_ios: Vec<Vec<u32>> = (0..tiers)
            .map(|tier| {
                if tier == home || matches!(controller, Controller::Cache(_)) {
                    Vec::new()
                } else {
                    vec![0; capacity_segments[tier] as usize]
                }
            })
            .collect();
        let draining = slot_ios
            .iter()
            .map(|slots| vec![false; slots.len()])
            .collect();
        let queue_limit = config
            .stack
            .tiers
            .iter()
            .map(|tier| tier.queue_depth as usize)
            .collect();
        let period_snapshot = devices.iter().map(|device| device.counters()).collect();
        let (cache_block_bytes, split_fills) = match &controller {
            Controller::Cache(cache) => (
                cache.settings().block_bytes,
                cache::SplitFills::probe(config, home),
            ),
            Controller::Policy(_) => (0, None),
        };
        Engine {
            config,
            reader,
            controller,
            now_ns: 0,
            home,
            segments,
            device_next_ns: vec![u64::MAX; tiers],
            device_outstanding: vec![0; tiers],
            user_outstanding: vec![0; tiers],
            user_busy_since_ns: vec![0; tiers],
            user_busy_ns: vec![0; tiers],
            queue_limit,
            host_queues: (0..tiers).map(|_| VecDeque::new()).collect(),
            devices,
            completions: Vec::new(),
            timers: BinaryHeap::new(),
            timer_sequence: 0,
            cursor: Cursor::new(config.window),
            pending: None,
            last_arrival_ns: 0,
            deferred_requests: 0,
            defer_ns_total: 0,
            defer_ns_max: 0,
            requests: Slab::new(),
            pieces: Slab::new(),
            outstanding_requests: 0,
            table: PlacementTable::new(segments as u32, &capacity_segments),
            segment_writes_in_flight: vec![0; segments as usize],
            route_sequence: 0,
            route: Default::default(),
            handed: Vec::new(),
            mirror_ios: Slab::new(),
            moving: vec![NOT_MOVING; segments as usize],
            slot_ios,
            draining,
            moves_touching: vec![0; tiers],
            home_current: vec![true; segments as usize],
            write_through: config
                .stack
                .tiers
                .iter()
                .enumerate()
                .map(|(index, tier)| {
                    index != home && tier.device == DevicePreset::Memory && !tier.unsafe_volatile
                })
                .collect(),
            active: Vec::new(),
            move_log: Vec::new(),
            dropped: tierd_core::placement::DroppedMoves::default(),
            device_move_ns,
            moved_ns_total: 0,
            mirrored_writes: 0,
            deferred_halves: 0,
            mirror_wait_ns_total: 0,
            mirror_wait_ns_max: 0,
            cache_block_bytes,
            split_fills,
            cache_counters: CacheCounters::default(),
            cache_steps: Vec::new(),
            cache_groups: Vec::new(),
            cache_groups_free: Vec::new(),
            writebacks: Slab::new(),
            writebacks_in_flight: 0,
            load_reading: None,
            load_writes: Slab::new(),
            destage_ios: Slab::new(),
            blocked: Vec::new(),
            home_idle_since_ns: 0,
            destage_wake_ns: 0,
            replicas: None,
            monitor: Monitor::new(config.period_ns, tiers, 0, config.history_periods),
            response: Histogram::new(),
            directions: Default::default(),
            tier_response: (0..tiers).map(|_| Histogram::new()).collect(),
            tier_bytes: vec![0; tiers],
            completed: 0,
            completed_first_hour: 0,
            reads: 0,
            writes: 0,
            bytes: 0,
            pieces_total: 0,
            last_completion_ns: 0,
            period_counters: PeriodCounters::default(),
            period_snapshot,
            periods: Vec::new(),
            used_bytes_max: vec![0; tiers],
            #[cfg(test)]
            shadow: None,
            #[cfg(test)]
            world_log: None,
        }
    }

    // ----- main loop -------------------------------------------------------

    fn run(&mut self, progress: &mut dyn FnMut(Progress)) -> Result<(), SimError> {
        let open_loop = matches!(self.config.replay, Replay::OpenLoop { .. });
        if let Replay::ClosedLoop { queue_depth } = self.config.replay {
            for _ in 0..queue_depth {
                if !self.arrive_next()? {
                    break;
                }
            }
        }
        let max_outstanding = match self.config.max_outstanding_requests {
            0 => u64::MAX,
            limit => u64::from(limit),
        };
        let mut next_progress = PROGRESS_EVERY;
        loop {
            let arrival_ns = if open_loop {
                let due = self.peek_arrival()?;
                if self.outstanding_requests >= max_outstanding {
                    // The replayer is blocked until a request completes.
                    None
                } else {
                    due.map(|due| due.max(self.now_ns))
                }
            } else {
                None
            };
            if self.pending.is_none() && self.cursor.is_done() && self.outstanding_requests == 0 {
                break;
            }
            let (device_tier, device_ns) = self.next_device_event();
            let timer_ns = self
                .timers
                .peek()
                .map_or(u64::MAX, |Reverse((time, _, _))| *time);
            let next_ns = device_ns.min(timer_ns).min(arrival_ns.unwrap_or(u64::MAX));
            if next_ns == u64::MAX {
                // Requests outstanding but nothing scheduled: cannot happen
                // while every submitted IO reports a next event.
                debug_assert!(false, "simulation stalled with requests outstanding");
                break;
            }
            let period_end_ns = self.monitor.period_end_ns();
            if period_end_ns <= next_ns {
                self.close_period(period_end_ns, false)?;
                continue;
            }
            self.now_ns = next_ns;
            if device_ns == next_ns {
                self.advance_device(device_tier)?;
            } else if timer_ns == next_ns {
                if let Some(Reverse((_, _, move_slot))) = self.timers.pop() {
                    if move_slot == cache::DESTAGE_TIMER {
                        self.pump_writebacks();
                    } else if move_slot == replicas::REPLICA_TIMER {
                        self.pump_replicas();
                    } else {
                        self.move_timer(move_slot);
                    }
                }
            } else if let Some((due_ns, request)) = self.pending.take() {
                if self.now_ns > due_ns {
                    self.deferred_requests += 1;
                    let late_ns = self.now_ns - due_ns;
                    self.defer_ns_total += u128::from(late_ns);
                    self.defer_ns_max = self.defer_ns_max.max(late_ns);
                }
                self.dispatch(request)?;
            }
            if self.completed >= next_progress {
                next_progress = self.completed + PROGRESS_EVERY;
                progress(Progress {
                    requests: self.completed,
                    now_ns: self.now_ns,
                });
            }
        }
        let end_ns = self.now_ns.max(self.last_completion_ns);
        if end_ns > self.monitor.period_end_ns() - self.config.period_ns {
            self.close_period(end_ns, true)?;
        }
        progress(Progress {
            requests: self.completed,
            now_ns: self.now_ns,
        });
        Ok(())
    }

    #[inline]
    fn next_device_event(&self) -> (usize, u64) {
        let mut best = (0, u64::MAX);
        for (tier, next) in self.device_next_ns.iter().enumerate() {
            if *next < best.1 {
                best = (tier, *next);
            }
        }
        best
    }

    // ----- requests --------------------------------------------------------

    fn dispatch(&mut self, request: Request) -> Result<(), SimError> {
        let end = request.end_bytes();
        if end > self.config.volume_bytes || request.offset_bytes >= end {
            return Err(SimError::BeyondVolume {
                index: self.cursor.requests_read,
                offset_bytes: request.offset_bytes,
                length_bytes: request.length_bytes,
                volume_bytes: self.config.volume_bytes,
            });
        }
        let request_index = self.requests.insert(RequestState {
            arrival_ns: self.now_ns,
            pieces_left: 0,
            is_write: request.op.is_write(),
        });
        self.last_arrival_ns = self.now_ns;
        self.outstanding_requests += 1;
        match request.op {
            Op::Read => self.reads += 1,
            Op::Write => self.writes += 1,
        }
        self.bytes += request.length_bytes;
        if matches!(self.controller, Controller::Cache(_)) {
            self.dispatch_cache(request_index, &request);
        } else {
            self.dispatch_tiering(request_index, &request);
        }
        Ok(())
    }

    fn dispatch_tiering(&mut self, request_index: u32, request: &Request) {
        let segment_bytes = self.config.segment_bytes;
        // Count the pieces first so a piece completing never sees zero left early.
        self.requests.get_mut(request_index).pieces_left = tierd_core::split::piece_count(
            request.offset_bytes,
            request.length_bytes,
            segment_bytes,
        ) as u32;
        for cut in
            tierd_core::split::pieces(request.offset_bytes, request.length_bytes, segment_bytes)
        {
            let piece = Piece {
                request: request_index,
                segment: cut.segment as SegmentId,
                tier: 0,
                is_write: request.op.is_write(),
                volume_offset: request.offset_bytes + cut.at_bytes,
                device_offset: 0,
                bytes: cut.length_bytes,
                ..Piece::default()
            };
            let piece_index = self.pieces.insert(piece);
            self.pieces_total += 1;
            self.route_piece(piece_index);
        }
    }

    /// Byte offset on `tier`'s device where `segment` starts: home keeps
    /// every segment at its own volume offset, other tiers at the start of
    /// the segment's slot. The one place this mapping is written.
    fn segment_base(&self, segment: usize, tier: usize) -> u64 {
        let segment_bytes = self.config.segment_bytes;
        if tier == self.home {
            segment as u64 * segment_bytes
        } else {
            let location = self.table.location(segment as SegmentId);
            debug_assert_eq!(location.tier as usize, tier);
            u64::from(location.slot) * segment_bytes
        }
    }

    /// A write to `segment`, on `tier`, also goes to home before its
    /// acknowledgement: the tier is write-through, or the segment is moving
    /// onto a write-through tier from another fast tier (the engine's rule,
    /// `docs/moves.md`).
    fn writes_through(&self, segment: usize, tier: TierId) -> bool {
        let move_slot = self.moving[segment];
        let moving_to = (move_slot != NOT_MOVING)
            .then(|| self.active[move_slot as usize].as_ref())
            .flatten()
            .map(|active| active.plan.to);
        write_reaches_home(self.home as TierId, tier, moving_to, |tier| {
            self.write_through[tier as usize]
        })
    }

    /// Issues the home half of a written-through write piece: the piece is
    /// acknowledged when it is done too.
    fn write_through_home(&mut self, piece_index: u32) {
        let piece = self.pieces.get_mut(piece_index);
        piece.parts_left += 1;
        let (offset, bytes) = (piece.volume_offset, piece.bytes);
        self.submit(
            self.home,
            DeviceIo {
                id: (KIND_THROUGH_WRITE << KIND_SHIFT) | u64::from(piece_index),
                op: Op::Write,
                offset_bytes: offset,
                length_bytes: bytes,
                background: false,
            },
        );
    }

    /// Sends a tiering piece to the device its segment lives on.
    ///
    /// A write to a segment being moved is also *mirrored* to the target
    /// when it touches a chunk already copied or being copied: its target
    /// half is issued at once, or, for a chunk whose copy is in flight, as
    /// soon as that copy has landed (an older copy must not overwrite it).
    /// The write is acknowledged when both halves have completed.
    fn route_piece(&mut self, piece_index: u32) {
        let piece = self.pieces.items[piece_index as usize];
        let segment = piece.segment as usize;
        let location = self.table.location(piece.segment);
        let tier = location.tier;
        let segment_bytes = self.config.segment_bytes;
        if tier as usize != self.home {
            self.slot_ios[tier as usize][location.slot as usize] += 1;
        }
        let device_offset =
            self.segment_base(segment, tier as usize) + piece.volume_offset % segment_bytes;
        self.route_sequence += 1;
        let stored = self.pieces.get_mut(piece_index);
        stored.tier = tier;
        stored.device_offset = device_offset;
        stored.route_sequence = self.route_sequence;
        stored.parts_left = 1;
        if piece.is_write {
            self.segment_writes_in_flight[segment] += 1;
            #[cfg(test)]
            if let Some(shadow) = self.shadow.as_mut() {
                shadow.issue_write(piece_index, piece.volume_offset, piece.bytes);
            }
            #[cfg(test)]
            if let Some(log) = self.world_log.as_mut() {
                log.events.push(tests::WorldEvent::Write {
                    offset_bytes: piece.volume_offset,
                    length_bytes: piece.bytes,
                });
            }
            let move_slot = self.moving[segment];
            if move_slot != NOT_MOVING {
                self.track_write(move_slot, piece_index);
            }
            if self.writes_through(segment, tier) {
                self.write_through_home(piece_index);
            } else if tier as usize != self.home {
                // The home copy goes stale before the data lands.
                self.home_current[segment] = false;
            }
        }
        if !piece.is_write && tier as usize == self.home && self.replicas.is_some() {
            self.route_home_read(piece_index, device_offset, piece.bytes);
            return;
        }
        self.submit(
            tier as usize,
            DeviceIo {
                id: (KIND_USER << KIND_SHIFT) | u64::from(piece_index),
                op: if piece.is_write { Op::Write } else { Op::Read },
                offset_bytes: device_offset,
                length_bytes: piece.bytes,
                background: false,
            },
        );
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// `total_ns / count` in milliseconds, 0 without IOs.
fn ratio_ms(total_ns: u128, count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        total_ns as f64 / count as f64 / 1e6
    }
}
