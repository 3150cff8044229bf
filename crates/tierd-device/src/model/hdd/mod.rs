//! Hard disk drive model (see `docs/devices/hdd.md` for the formulas and
//! sources).
//!
//! One actuator serves one IO at a time. Service time is
//! controller overhead + seek + rotational wait + media transfer, computed
//! from deterministic geometry: the cylinder and the angle of a sector follow
//! from its offset (zoned recording, track skew), the platter angle follows
//! from virtual time and rpm. The seek curve is two-piece, `a + b·√d` up to a
//! knee and `c + e·d` beyond, fitted to the datasheet's track-to-track,
//! average and full-stroke figures ([`SeekCurve::fit`]).
//!
//! Around the mechanism: a request queue served FIFO, by elevator (LOOK) or
//! shortest-positioning-time-first over an NCQ/TCQ window; a segmented
//! read-ahead cache (a read that finds its data in a segment, or in the
//! stream the head is still reading, is served at interface speed); an
//! optional write-back cache, off by default as on the papers' servers.
//!
//! This module also holds what the SMR model shares with it ([`Mechanics`],
//! [`SegmentCache`]) and the settings plumbing every model uses
//! ([`ConfigError`], the `settings!` macro that gives each `…Config` a
//! `…Overrides` twin whose fields are all optional, for `[tier.model]`).
//!
//! Layout: this file has the model ([`Hdd`] and its [`DeviceModel`] impl);
//! `geometry.rs` the zones and offset → cylinder/track/angle mapping;
//! `seek.rs` the seek curve; `mechanics.rs` the actuator and spindle (seek
//! plus rotational timing); `cache.rs` the read-ahead segments; `queue.rs`
//! the request queue and its orders; `config.rs` [`HddConfig`] and its
//! validation; `presets.rs` the drive presets; `shared.rs` the plumbing the
//! other models use.

mod cache;
mod config;
mod geometry;
mod mechanics;
mod presets;
mod queue;
mod seek;
mod shared;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tierd_common::op::Op;

use super::{Completion, DeviceCounters, DeviceIo, DeviceModel, DevicePreset};

pub use cache::SegmentCache;
pub use config::{HddConfig, HddOverrides};
pub use geometry::{Geometry, Location};
pub use mechanics::Mechanics;
pub use queue::QueueOrder;
pub use seek::{SeekCurve, SeekFigures};
pub use shared::ConfigError;

pub(crate) use config::validate_seek;
pub(crate) use mechanics::build_mechanics;
pub(crate) use queue::{CommandTiming, Pending, RequestQueue};
pub(crate) use shared::{
    clamp_io, count_completion, ms_to_ns, non_negative, ns_per_byte, positive, settings,
    validate_platters, Timed,
};

/// What the actuator is doing.
#[derive(Clone, Copy, Debug)]
struct Service {
    pending: Pending,
    start_ns: u64,
    /// The host sees the IO done.
    done_ns: u64,
    /// The actuator is free (later than `done_ns` after a sequential
    /// prefetch).
    free_ns: u64,
    reported: bool,
}

/// An event-driven HDD (see the module docs).
#[derive(Clone, Debug)]
pub struct Hdd {
    name: String,
    capacity_bytes: u64,
    mechanics: Mechanics,
    cache: SegmentCache,
    queue: RequestQueue,
    service: Option<Service>,
    /// Write-cache acknowledgements waiting for their time.
    acknowledged: BinaryHeap<Reverse<Timed>>,
    /// Completed in model time, not yet handed out by `advance`.
    finished: Vec<Completion>,
    counters: DeviceCounters,
    clock_ns: u64,
    sequence: u64,
    host_queued: usize,
    timing: CommandTiming,
    sequential_prefetch_bytes: u64,
    write_cache_bytes: u64,
    dirty_bytes: u64,
}

impl Hdd {
    /// A model from `config`; `seed` sets the spindle phase at time 0 (the
    /// model is otherwise deterministic).
    pub fn new(config: &HddConfig, seed: u64) -> Result<Hdd, ConfigError> {
        config.validate()?;
        let mechanics = build_mechanics(
            config.capacity_bytes,
            config.rpm,
            config.heads,
            config.cylinders,
            config.zones,
            config.outer_rate_mb_s,
            config.inner_rate_mb_s,
            &config.read_seek,
            &config.write_seek,
            config.track_switch_ms,
            seed,
        );
        Ok(Hdd {
            name: config.name.clone(),
            capacity_bytes: config.capacity_bytes,
            cache: SegmentCache::new(
                config.cache_segments,
                config.segment_bytes,
                config.capacity_bytes,
            ),
            mechanics,
            queue: RequestQueue::new(
                config.queue_order,
                config.queue_depth,
                ms_to_ns(config.starvation_limit_ms) as u64,
            ),
            service: None,
            acknowledged: BinaryHeap::new(),
            finished: Vec::with_capacity(64),
            counters: DeviceCounters::default(),
            clock_ns: 0,
            sequence: 0,
            host_queued: 0,
            timing: CommandTiming {
                overhead_ns: ms_to_ns(config.overhead_ms) as u64,
                hit_overhead_ns: ms_to_ns(config.cache_hit_overhead_ms) as u64,
                interface_ns_per_byte: ns_per_byte(config.interface_rate_mb_s),
            },
            sequential_prefetch_bytes: config.sequential_prefetch_bytes,
            write_cache_bytes: if config.write_cache {
                config.write_cache_bytes
            } else {
                0
            },
            dirty_bytes: 0,
        })
    }

    /// The preset's model at its own capacity.
    pub fn preset(preset: DevicePreset, seed: u64) -> Option<Hdd> {
        HddConfig::preset(preset).and_then(|config| Hdd::new(&config, seed).ok())
    }

    /// The mechanics (geometry, seek curves), for reports and tests.
    pub fn mechanics(&self) -> &Mechanics {
        &self.mechanics
    }

    /// Processes every event up to `now_ns`.
    fn run_until(&mut self, now_ns: u64) {
        loop {
            let service_event = self.service.map(|service| {
                if service.reported {
                    service.free_ns
                } else {
                    service.done_ns
                }
            });
            let acknowledged_event = self
                .acknowledged
                .peek()
                .map(|Reverse(timed)| timed.completion.done_ns);
            match (service_event, acknowledged_event) {
                (Some(service_ns), acknowledged)
                    if service_ns <= now_ns && acknowledged.is_none_or(|a| service_ns <= a) =>
                {
                    self.service_event();
                }
                (_, Some(acknowledged_ns)) if acknowledged_ns <= now_ns => {
                    if let Some(Reverse(timed)) = self.acknowledged.pop() {
                        count_completion(
                            &mut self.counters,
                            timed.op,
                            timed.length_bytes,
                            &timed.completion,
                        );
                        self.finished.push(timed.completion);
                    }
                }
                _ => break,
            }
        }
        self.clock_ns = self.clock_ns.max(now_ns);
    }

    fn service_event(&mut self) {
        let Some(mut service) = self.service else {
            return;
        };
        if !service.reported {
            service.reported = true;
            let pending = service.pending;
            if pending.internal {
                self.dirty_bytes = self.dirty_bytes.saturating_sub(pending.io.length_bytes);
            } else {
                let completion = Completion {
                    id: pending.io.id,
                    arrival_ns: pending.arrival_ns,
                    start_ns: service.start_ns,
                    done_ns: service.done_ns,
                    background: pending.io.background,
                    op: pending.io.op,
                    length_bytes: pending.io.length_bytes,
                };
                count_completion(
                    &mut self.counters,
                    pending.io.op,
                    pending.io.length_bytes,
                    &completion,
                );
                self.finished.push(completion);
            }
            self.service = Some(service);
            return;
        }
        self.counters.busy_ns += service.free_ns - service.start_ns;
        self.service = None;
        self.dispatch(service.free_ns);
    }

    /// Starts the next queued request at `now_ns` if the actuator is free.
    fn dispatch(&mut self, now_ns: u64) {
        if self.service.is_some() {
            return;
        }
        let Hdd {
            queue,
            mechanics,
            cache,
            ..
        } = self;
        let now = now_ns as i64 as f64;
        let estimate = |pending: &Pending| estimate_ns(mechanics, cache, now, pending);
        let Some(pending) = queue.pop(now_ns, estimate) else {
            return;
        };
        if !pending.internal {
            self.host_queued -= 1;
        }
        self.serve(pending, now_ns);
    }

    fn serve(&mut self, pending: Pending, now_ns: u64) {
        let io = pending.io;
        let now = now_ns as f64;
        let mut done = None;
        if io.op == Op::Read {
            let check = now.max((pending.arrival_ns + self.timing.hit_overhead_ns) as f64);
            if let Some((segment, ready)) =
                self.cache.lookup(check, io.offset_bytes, io.length_bytes)
            {
                self.cache
                    .note_hit(segment, io.offset_bytes, io.length_bytes);
                let transfer = io.length_bytes as f64 * self.timing.interface_ns_per_byte;
                done = Some((check + transfer).max(ready));
            }
        }
        let (done_ns, free_ns) = match done {
            Some(done) => {
                let done = done.ceil() as u64;
                (done, done)
            }
            None => {
                let ready = now.max((pending.arrival_ns + self.timing.overhead_ns) as f64);
                let sequential = io.op == Op::Read && self.cache.follows(io.offset_bytes).is_some();
                self.cache.stop_stream(ready);
                if io.op == Op::Write {
                    self.cache
                        .invalidate(ready, io.offset_bytes, io.length_bytes);
                }
                let location = pending.location;
                let end = ready
                    + self.mechanics.positioning_ns(ready, &location, io.op)
                    + self
                        .mechanics
                        .geometry
                        .transfer_ns(&location, io.length_bytes);
                self.mechanics
                    .park_after(&location, io.offset_bytes, io.length_bytes);
                let mut free = end;
                if io.op == Op::Read && io.length_bytes > 0 {
                    let rate = self.mechanics.geometry.streaming_ns_per_byte(&location);
                    self.cache
                        .start_stream(end, io.offset_bytes, io.length_bytes, rate);
                    if sequential {
                        let bytes = self
                            .sequential_prefetch_bytes
                            .min(self.capacity_bytes - (io.offset_bytes + io.length_bytes));
                        free = end + bytes as f64 * rate;
                    }
                }
                let done = end.ceil() as u64;
                (done, (free.ceil() as u64).max(done))
            }
        };
        self.service = Some(Service {
            pending,
            start_ns: now_ns,
            done_ns,
            free_ns,
            reported: false,
        });
    }
}

/// Estimated time to serve `pending` if started at `now_ns` (SPTF's cost):
/// a buffer hit costs its transfer; a miss its overhead wait and positioning.
#[inline]
fn estimate_ns(mechanics: &Mechanics, cache: &SegmentCache, now: f64, pending: &Pending) -> f64 {
    let io = &pending.io;
    if io.op == Op::Read {
        let check = now.max(pending.hit_ready_ns);
        if let Some((_, ready)) = cache.lookup(check, io.offset_bytes, io.length_bytes) {
            return (check + pending.hit_transfer_ns).max(ready) - now;
        }
    }
    let ready = now.max(pending.ready_ns);
    ready - now + mechanics.positioning_ns(ready, &pending.location, io.op)
}

impl DeviceModel for Hdd {
    fn name(&self) -> &str {
        &self.name
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn submit(&mut self, now_ns: u64, io: DeviceIo) {
        self.run_until(now_ns);
        let io = clamp_io(io, self.capacity_bytes);
        self.sequence += 1;
        let location = self.mechanics.geometry.locate(io.offset_bytes);
        let pending = Pending::new(io, now_ns, self.sequence, location, &self.timing);
        if io.op == Op::Write
            && self.write_cache_bytes > 0
            && self.dirty_bytes + io.length_bytes <= self.write_cache_bytes
        {
            // Write-back: done once in the buffer; the media write follows.
            self.dirty_bytes += io.length_bytes;
            let done = now_ns
                + self.timing.hit_overhead_ns
                + (io.length_bytes as f64 * self.timing.interface_ns_per_byte).ceil() as u64;
            self.acknowledged.push(Reverse(Timed {
                completion: Completion {
                    id: io.id,
                    arrival_ns: now_ns,
                    start_ns: now_ns,
                    done_ns: done,
                    background: io.background,
                    op: io.op,
                    length_bytes: io.length_bytes,
                },
                op: io.op,
                length_bytes: io.length_bytes,
                sequence: self.sequence,
            }));
            self.queue.push(
                Pending {
                    internal: true,
                    ..pending
                },
                self.mechanics.head_cylinder(),
            );
        } else {
            self.host_queued += 1;
            self.queue.push(pending, self.mechanics.head_cylinder());
        }
        self.dispatch(now_ns);
    }

    fn next_event_ns(&self) -> Option<u64> {
        if let Some(first) = self.finished.first() {
            return Some(first.done_ns);
        }
        let service = self.service.map(|service| {
            if service.reported {
                service.free_ns
            } else {
                service.done_ns
            }
        });
        let acknowledged = self
            .acknowledged
            .peek()
            .map(|Reverse(timed)| timed.completion.done_ns);
        match (service, acknowledged) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        self.run_until(now_ns);
        done.append(&mut self.finished);
    }

    fn outstanding(&self) -> usize {
        let in_service = self
            .service
            .filter(|service| !service.reported && !service.pending.internal)
            .map_or(0, |_| 1);
        self.host_queued + in_service + self.acknowledged.len() + self.finished.len()
    }

    fn read_cost_ns(&self, now_ns: u64, offset_bytes: u64, length_bytes: u64) -> Option<f64> {
        // The head is already where the IO in service leaves it
        // (`park_after` at its start); it is free when that IO is.
        let start = self
            .service
            .map_or(now_ns, |service| service.free_ns.max(now_ns));
        let start = start as f64;
        let ready = start + self.timing.hit_overhead_ns as f64;
        if let Some((_, done)) = self.cache.lookup(ready, offset_bytes, length_bytes) {
            let transfer = length_bytes as f64 * self.timing.interface_ns_per_byte;
            return Some((ready + transfer).max(done) - now_ns as f64);
        }
        let ready = start + self.timing.overhead_ns as f64;
        let location = self
            .mechanics
            .geometry
            .locate(offset_bytes.min(self.capacity_bytes - 1));
        Some(
            ready - now_ns as f64
                + self.mechanics.positioning_ns(ready, &location, Op::Read)
                + self.mechanics.geometry.transfer_ns(&location, length_bytes),
        )
    }

    fn counters(&self) -> DeviceCounters {
        let mut counters = self.counters;
        if let Some(service) = self.service {
            if self.clock_ns > service.start_ns {
                counters.busy_ns += self.clock_ns.min(service.free_ns) - service.start_ns;
            }
        }
        counters
    }
}
