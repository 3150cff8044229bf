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
//! migration rules (shared with the live engine), the cache baselines, and
//! how every reported figure is computed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use tierd_common::units::PAGE_BYTES;
use tierd_device::{Completion, DeviceCounters, DeviceIo, DeviceModel};
use tierd_policy::cache::PageCache;
use tierd_policy::monitor::Monitor;
use tierd_policy::view::{MigrationStats, TierInfo};
use tierd_policy::{Move, Plan, Policy, SegmentId, TierId, View};
use tierd_trace::{Op, Request, TraceReader, VolumeId};

use crate::config::{Replay, SimConfig};
use crate::error::SimError;
use crate::result::{
    CacheResult, MoveRecord, PeriodRecord, RunResult, RunSettings, TierPeriod, TierResult,
};
use tierd_common::histogram::Histogram;

mod cache;
mod finish;
mod migration;
mod periods;
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
    /// A page cache over tier 0 (fast) and the home tier (slow).
    Cache(Box<dyn PageCache>),
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

/// User IO (a piece, or the target half of a mirrored write): counts in
/// the user-busy time the policies see (`TierPeriodStats::user_busy_ns`).
#[inline]
fn is_user_io(id: u64) -> bool {
    matches!(id >> KIND_SHIFT, KIND_USER | KIND_MIRROR_WRITE)
}

/// `moving[segment]`: not moving.
const NOT_MOVING: u32 = u32::MAX;
/// `moving[segment]`: accepted, waiting for a move slot.
const QUEUED: u32 = u32::MAX - 1;

const HOUR_NS: u64 = 3_600_000_000_000;

#[derive(Clone, Copy, Debug, Default)]
struct RequestState {
    arrival_ns: u64,
    pieces_left: u32,
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
    /// Cache read miss: after the slow read, write `fill_bytes` at
    /// `fill_offset` on the fast device.
    fill_offset: u64,
    fill_bytes: u64,
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

    // Arrivals.
    volume: Option<VolumeId>,
    origin_ns: Option<u64>,
    pending: Option<(u64, Request)>,
    exhausted: bool,
    last_arrival_ns: u64,
    last_due_ns: u64,
    deferred_requests: u64,
    defer_ns_total: u128,
    defer_ns_max: u64,
    requests_read: u64,
    empty_requests: u64,
    reordered_requests: u64,

    // Requests in flight.
    requests: Slab<RequestState>,
    pieces: Slab<Piece>,
    outstanding_requests: u64,

    // Tiering table.
    placement: Vec<TierId>,
    slot: Vec<u32>,
    /// User write pieces of each segment routed and not yet acknowledged.
    segment_writes_in_flight: Vec<u32>,
    route_sequence: u64,
    /// Reused buffers for the move machines' answers (no allocation per write).
    route: tierd_core::moves::Route,
    handed: Vec<tierd_core::moves::HandedOver<migration::Stamp>>,
    /// Mirrored parts of user writes in flight.
    mirror_ios: Slab<migration::MirrorIo>,
    moving: Vec<u32>,
    free_slots: Vec<Vec<u32>>,
    /// Per fast tier and slot: user IOs in flight there. A slot a segment
    /// left is freed only when this reaches 0 (`draining` meanwhile).
    slot_ios: Vec<Vec<u32>>,
    draining: Vec<Vec<bool>>,
    capacity_segments: Vec<u32>,
    used_segments: Vec<u32>,
    moves_touching: Vec<u32>,

    // Migration.
    active: Vec<Option<ActiveMove>>,
    active_count: u32,
    queued: VecDeque<QueuedMove>,
    move_log: Vec<MoveRecord>,
    moves_dropped: u64,
    moved_ns_total: u128,
    mirrored_writes: u64,
    deferred_halves: u64,
    mirror_wait_ns_total: u128,
    mirror_wait_ns_max: u64,

    // Cache mode.
    fast_device_pages: u64,
    cache_counters: CacheCounters,

    // Measurements.
    monitor: Monitor,
    response: Histogram,
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
    let mut engine = Engine::new(config, controller, devices, reader);
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
        let free_slots = (0..tiers)
            .map(|tier| {
                if tier == home || matches!(controller, Controller::Cache(_)) {
                    Vec::new()
                } else {
                    (0..capacity_segments[tier]).rev().collect()
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
        let mut used_segments = vec![0; tiers];
        used_segments[home] = segments as u32;
        let queue_limit = config
            .stack
            .tiers
            .iter()
            .map(|tier| tier.queue_depth as usize)
            .collect();
        let period_snapshot = devices.iter().map(|device| device.counters()).collect();
        let fast_device_pages = (devices[0].capacity_bytes() / PAGE_BYTES).max(1);
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
            volume: None,
            origin_ns: None,
            pending: None,
            exhausted: false,
            last_arrival_ns: 0,
            last_due_ns: 0,
            deferred_requests: 0,
            defer_ns_total: 0,
            defer_ns_max: 0,
            requests_read: 0,
            empty_requests: 0,
            reordered_requests: 0,
            requests: Slab::new(),
            pieces: Slab::new(),
            outstanding_requests: 0,
            placement: vec![home as TierId; segments as usize],
            slot: vec![0; segments as usize],
            segment_writes_in_flight: vec![0; segments as usize],
            route_sequence: 0,
            route: Default::default(),
            handed: Vec::new(),
            mirror_ios: Slab::new(),
            moving: vec![NOT_MOVING; segments as usize],
            free_slots,
            slot_ios,
            draining,
            capacity_segments,
            used_segments,
            moves_touching: vec![0; tiers],
            active: Vec::new(),
            active_count: 0,
            queued: VecDeque::new(),
            move_log: Vec::new(),
            moves_dropped: 0,
            moved_ns_total: 0,
            mirrored_writes: 0,
            deferred_halves: 0,
            mirror_wait_ns_total: 0,
            mirror_wait_ns_max: 0,
            fast_device_pages,
            cache_counters: CacheCounters::default(),
            monitor: Monitor::new(config.period_ns, tiers, 0, config.history_periods),
            response: Histogram::new(),
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
            if self.pending.is_none() && self.exhausted && self.outstanding_requests == 0 {
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
                    self.move_timer(move_slot);
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

    // ----- arrivals --------------------------------------------------------

    /// Next request inside the window, or `None` at the end.
    fn read_next(&mut self) -> Result<Option<Request>, SimError> {
        while !self.exhausted {
            let Some(request) = self.reader.next_request()? else {
                self.exhausted = true;
                break;
            };
            self.requests_read += 1;
            match self.volume {
                None => self.volume = Some(request.volume),
                Some(volume) if volume != request.volume => {
                    let names = self.reader.volumes();
                    let name = |id: VolumeId| {
                        names
                            .name(id)
                            .map_or_else(|| id.to_string(), str::to_string)
                    };
                    return Err(SimError::SeveralVolumes {
                        first: name(volume),
                        other: name(request.volume),
                    });
                }
                Some(_) => {}
            }
            let origin = *self.origin_ns.get_or_insert(request.time_ns);
            let since_origin = request.time_ns.saturating_sub(origin);
            if let Some(from) = self.config.window.from_ns {
                if since_origin < from {
                    continue;
                }
            }
            if let Some(to) = self.config.window.to_ns {
                if since_origin >= to {
                    self.exhausted = true;
                    break;
                }
            }
            if request.length_bytes == 0 {
                self.empty_requests += 1;
                continue;
            }
            return Ok(Some(request));
        }
        Ok(None)
    }

    /// Open loop: the arrival time of the next request (reading it if needed).
    fn peek_arrival(&mut self) -> Result<Option<u64>, SimError> {
        if let Some((arrival, _)) = self.pending {
            return Ok(Some(arrival));
        }
        let Some(request) = self.read_next()? else {
            return Ok(None);
        };
        let Replay::OpenLoop { speed } = self.config.replay else {
            return Ok(None);
        };
        let base = self.origin_ns.unwrap_or(0) + self.config.window.from_ns.unwrap_or(0);
        let since = request.time_ns.saturating_sub(base);
        let mut arrival = if speed == 1.0 {
            since
        } else {
            (since as f64 / speed) as u64
        };
        // Due times never go backwards (the issue time is also never before
        // "now": see the main loop).
        if arrival < self.last_due_ns {
            self.reordered_requests += 1;
            arrival = self.last_due_ns;
        }
        self.last_due_ns = arrival;
        self.pending = Some((arrival, request));
        Ok(Some(arrival))
    }

    /// Closed loop: issues the next request now. `false` at the end of the trace.
    fn arrive_next(&mut self) -> Result<bool, SimError> {
        match self.read_next()? {
            Some(request) => {
                self.dispatch(request)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    // ----- requests --------------------------------------------------------

    fn dispatch(&mut self, request: Request) -> Result<(), SimError> {
        let end = request.end_bytes();
        if end > self.config.volume_bytes || request.offset_bytes >= end {
            return Err(SimError::BeyondVolume {
                index: self.requests_read,
                offset_bytes: request.offset_bytes,
                length_bytes: request.length_bytes,
                volume_bytes: self.config.volume_bytes,
            });
        }
        let request_index = self.requests.insert(RequestState {
            arrival_ns: self.now_ns,
            pieces_left: 0,
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
            u64::from(self.slot[segment]) * segment_bytes
        }
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
        let tier = self.placement[segment];
        let segment_bytes = self.config.segment_bytes;
        if tier as usize != self.home {
            self.slot_ios[tier as usize][self.slot[segment] as usize] += 1;
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
            if move_slot != NOT_MOVING && move_slot != QUEUED {
                self.track_write(move_slot, piece_index);
            }
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

    // ----- devices ---------------------------------------------------------

    /// Hands `io` to the device, or queues it in front when the device has
    /// `queue_depth` IOs already.
    #[inline]
    fn submit(&mut self, tier: usize, io: DeviceIo) {
        if is_user_io(io.id) {
            if self.user_outstanding[tier] == 0 {
                self.user_busy_since_ns[tier] = self.now_ns;
            }
            self.user_outstanding[tier] += 1;
        }
        if self.device_outstanding[tier] < self.queue_limit[tier] {
            self.device_outstanding[tier] += 1;
            self.devices[tier].submit(self.now_ns, io);
            self.device_next_ns[tier] = self.devices[tier].next_event_ns().unwrap_or(u64::MAX);
        } else {
            self.host_queues[tier].push_back(io);
        }
    }

    /// Advances one device to `now` and handles what completed.
    fn advance_device(&mut self, tier: usize) -> Result<(), SimError> {
        let mut done = std::mem::take(&mut self.completions);
        done.clear();
        self.devices[tier].advance(self.now_ns, &mut done);
        self.device_outstanding[tier] -= done.len().min(self.device_outstanding[tier]);
        while self.device_outstanding[tier] < self.queue_limit[tier] {
            let Some(io) = self.host_queues[tier].pop_front() else {
                break;
            };
            self.device_outstanding[tier] += 1;
            self.devices[tier].submit(self.now_ns, io);
        }
        self.device_next_ns[tier] = self.devices[tier].next_event_ns().unwrap_or(u64::MAX);
        let mut outcome = Ok(());
        for completion in done.iter() {
            if let Err(error) = self.on_completion(tier, completion) {
                outcome = Err(error);
                break;
            }
        }
        self.completions = done;
        outcome
    }

    fn on_completion(&mut self, tier: usize, completion: &Completion) -> Result<(), SimError> {
        let payload = completion.id & PAYLOAD_MASK;
        if is_user_io(completion.id) {
            self.user_outstanding[tier] -= 1;
            if self.user_outstanding[tier] == 0 {
                let since = self.user_busy_since_ns[tier];
                self.user_busy_ns[tier] += completion.done_ns.saturating_sub(since);
            }
        }
        match completion.id >> KIND_SHIFT {
            KIND_USER => self.source_half_done(payload as u32, completion.done_ns)?,
            KIND_MIRROR_WRITE => self.mirror_part_done(payload as u32, completion.done_ns)?,
            KIND_HANDED_OVER => self.handed_over_done((payload >> 32) as u32, payload as u32),
            KIND_MIGRATION_READ => self.chunk_read_done((payload >> 32) as u32, payload as u32),
            KIND_MIGRATION_WRITE => self.chunk_write_done((payload >> 32) as u32, payload as u32),
            KIND_CACHE_FILL => {
                self.monitor.record_migration_io(tier as TierId, payload);
            }
            KIND_WRITEBACK_READ => {
                self.monitor.record_migration_io(tier as TierId, PAGE_BYTES);
                let offset = payload * PAGE_BYTES;
                let length = PAGE_BYTES.min(self.config.volume_bytes.saturating_sub(offset));
                if length > 0 {
                    self.cache_counters.writeback_bytes += length;
                    self.submit(
                        self.home,
                        DeviceIo {
                            id: KIND_WRITEBACK_WRITE << KIND_SHIFT,
                            op: Op::Write,
                            offset_bytes: offset,
                            length_bytes: length,
                            background: true,
                        },
                    );
                }
            }
            KIND_WRITEBACK_WRITE => {
                self.monitor.record_migration_io(tier as TierId, PAGE_BYTES);
            }
            _ => debug_assert!(false, "unknown IO id {:#x}", completion.id),
        }
        Ok(())
    }

    /// A piece's own device IO (for a mirrored write: its source half) completed.
    fn source_half_done(&mut self, piece_index: u32, done_ns: u64) -> Result<(), SimError> {
        let policy_mode = matches!(self.controller, Controller::Policy(_));
        let segment_bytes = self.config.segment_bytes;
        let piece = self.pieces.get_mut(piece_index);
        piece.parts_left = piece.parts_left.saturating_sub(1);
        piece.source_done = true;
        piece.source_done_ns = done_ns;
        let piece = *piece;
        #[cfg(test)]
        if let (true, Some(shadow)) = (piece.is_write, self.shadow.as_mut()) {
            shadow.device_write(
                piece_index,
                piece.tier as usize,
                piece.device_offset,
                piece.bytes,
            );
        }
        if policy_mode && piece.tier as usize != self.home {
            let tier = piece.tier as usize;
            let slot = (piece.device_offset / segment_bytes) as usize;
            if let Some(count) = self.slot_ios[tier].get_mut(slot) {
                *count -= 1;
                if *count == 0 && self.draining[tier][slot] {
                    // The segment left this slot; its last IO there is done.
                    self.draining[tier][slot] = false;
                    self.free_slots[tier].push(slot as u32);
                    self.start_moves();
                }
            }
        }
        #[cfg(test)]
        if let (true, Some(log)) = (piece.is_write, self.world_log.as_mut()) {
            log.events.push(tests::WorldEvent::WriteDone {
                offset_bytes: piece.volume_offset,
            });
        }
        if let (true, Some(move_slot)) = (piece.is_write, piece.mirror_move) {
            self.tracked_source_done(move_slot, piece_index);
        }
        if self.pieces.items[piece_index as usize].finished() {
            self.complete_piece(piece_index, done_ns)?;
        }
        Ok(())
    }

    /// Every half of the piece has completed: it is acknowledged.
    fn complete_piece(&mut self, piece_index: u32, done_ns: u64) -> Result<(), SimError> {
        let piece = self.pieces.take(piece_index);
        let request = *self.requests.get_mut(piece.request);
        let response_ns = done_ns.saturating_sub(request.arrival_ns);
        let tier = piece.tier as usize;
        #[cfg(test)]
        if let (true, Some(shadow)) = (piece.is_write, self.shadow.as_mut()) {
            shadow.ack_write(piece_index, piece.volume_offset, piece.bytes);
        }
        self.tier_response[tier].record(response_ns);
        self.tier_bytes[tier] += piece.bytes;
        self.monitor.record_user_io(
            piece.segment,
            piece.tier,
            piece.is_write,
            piece.bytes,
            response_ns,
            self.moves_touching[tier] > 0,
        );
        if piece.fill_bytes > 0 {
            self.cache_counters.fill_bytes += piece.fill_bytes;
            self.submit(
                0,
                DeviceIo {
                    id: (KIND_CACHE_FILL << KIND_SHIFT) | (piece.fill_bytes & PAYLOAD_MASK),
                    op: Op::Write,
                    offset_bytes: piece.fill_offset,
                    length_bytes: piece.fill_bytes,
                    background: true,
                },
            );
        }
        if piece.is_write && matches!(self.controller, Controller::Policy(_)) {
            self.write_acknowledged(&piece, done_ns);
        }
        let state = self.requests.get_mut(piece.request);
        state.pieces_left -= 1;
        if state.pieces_left == 0 {
            self.requests.take(piece.request);
            self.finish_request(request.arrival_ns, done_ns)?;
        }
        Ok(())
    }

    /// Bookkeeping of a tiering write's acknowledgement: the move that
    /// mirrored it forgets it, and a move waiting for the writes issued
    /// before it started may begin copying.
    fn write_acknowledged(&mut self, piece: &Piece, done_ns: u64) {
        let segment = piece.segment as usize;
        self.segment_writes_in_flight[segment] -= 1;
        if let (Some(move_slot), true) = (piece.mirror_move, piece.mirrored) {
            let wait_ns = done_ns.saturating_sub(piece.source_done_ns);
            self.mirrored_writes += 1;
            self.mirror_wait_ns_total += u128::from(wait_ns);
            self.mirror_wait_ns_max = self.mirror_wait_ns_max.max(wait_ns);
            if let Some(active) = self.active[move_slot as usize].as_mut() {
                if active.plan.segment == piece.segment {
                    active.mirror_wait_max_ns = active.mirror_wait_max_ns.max(wait_ns);
                }
            }
        }
        let move_slot = self.moving[segment];
        if move_slot == NOT_MOVING || move_slot == QUEUED {
            return;
        }
        if let Some(active) = self.active[move_slot as usize].as_mut() {
            if piece.route_sequence < active.start_sequence {
                // One of the writes in flight when the move started.
                active.machine.pre_move_write_done();
                self.step_move(move_slot);
            }
        }
    }

    fn finish_request(&mut self, arrival_ns: u64, done_ns: u64) -> Result<(), SimError> {
        let response_ns = done_ns.saturating_sub(arrival_ns);
        self.response.record(response_ns);
        self.completed += 1;
        if done_ns <= HOUR_NS {
            self.completed_first_hour += 1;
        }
        self.outstanding_requests -= 1;
        self.last_completion_ns = self.last_completion_ns.max(done_ns);
        self.period_counters.requests += 1;
        self.period_counters.response_ns_total += u128::from(response_ns);
        if matches!(self.config.replay, Replay::ClosedLoop { .. }) {
            self.arrive_next()?;
        }
        Ok(())
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
