//! The request queue in front of the actuator: FIFO, elevator (LOOK) or
//! SPTF over an NCQ/TCQ window.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};

use super::geometry::Location;
use crate::model::DeviceIo;

/// Order in which queued requests are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueOrder {
    /// Arrival order.
    Fifo,
    /// Elevator (LOOK): sweep up serving the nearest cylinder above, then down.
    Elevator,
    /// Shortest positioning time first over the first `queue_depth` queued
    /// requests (NCQ/TCQ), oldest first once one waited past the starvation
    /// limit.
    Sptf,
}

/// A queued request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    pub(crate) io: DeviceIo,
    pub(crate) arrival_ns: u64,
    pub(crate) sequence: u64,
    pub(crate) location: Location,
    /// Destage of write-cached data: no completion is reported.
    pub(crate) internal: bool,
    /// Precomputed for SPTF, which estimates every queued request at every
    /// dispatch: earliest media start (arrival + overhead), earliest buffer
    /// answer (arrival + hit overhead), and the interface transfer.
    pub(crate) ready_ns: f64,
    pub(crate) hit_ready_ns: f64,
    pub(crate) hit_transfer_ns: f64,
}

impl Pending {
    pub(crate) fn new(
        io: DeviceIo,
        arrival_ns: u64,
        sequence: u64,
        location: Location,
        timing: &CommandTiming,
    ) -> Pending {
        Pending {
            io,
            arrival_ns,
            sequence,
            location,
            internal: false,
            ready_ns: (arrival_ns + timing.overhead_ns) as i64 as f64,
            hit_ready_ns: (arrival_ns + timing.hit_overhead_ns) as i64 as f64,
            hit_transfer_ns: io.length_bytes as i64 as f64 * timing.interface_ns_per_byte,
        }
    }
}

/// Per-command controller costs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CommandTiming {
    pub(crate) overhead_ns: u64,
    pub(crate) hit_overhead_ns: u64,
    pub(crate) interface_ns_per_byte: f64,
}

#[derive(Clone, Copy, Debug)]
struct ByCylinder(Pending);

impl ByCylinder {
    fn key(&self) -> (u32, u64) {
        (self.0.location.cylinder, self.0.sequence)
    }
}
impl PartialEq for ByCylinder {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for ByCylinder {}
impl PartialOrd for ByCylinder {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByCylinder {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// The queue in front of the actuator. FIFO is a deque; the elevator is two
/// heaps (this sweep, next sweep), `O(log n)`; SPTF scans a window of at
/// most `depth` requests (bounded, 32 by default) fed from a FIFO.
#[derive(Clone, Debug)]
pub(crate) struct RequestQueue {
    order: QueueOrder,
    depth: usize,
    waiting: VecDeque<Pending>,
    window: Vec<Pending>,
    ascending: bool,
    upward: BinaryHeap<Reverse<ByCylinder>>,
    downward: BinaryHeap<ByCylinder>,
    starvation_limit_ns: u64,
}

impl RequestQueue {
    pub(crate) fn new(order: QueueOrder, depth: u32, starvation_limit_ns: u64) -> RequestQueue {
        let depth = depth.max(1) as usize;
        RequestQueue {
            order,
            depth,
            waiting: VecDeque::with_capacity(64),
            window: Vec::with_capacity(depth),
            ascending: true,
            upward: BinaryHeap::new(),
            downward: BinaryHeap::new(),
            starvation_limit_ns,
        }
    }

    pub(crate) fn push(&mut self, pending: Pending, head_cylinder: u32) {
        match self.order {
            QueueOrder::Fifo => self.waiting.push_back(pending),
            QueueOrder::Sptf => {
                if self.window.len() < self.depth {
                    self.window.push(pending);
                } else {
                    self.waiting.push_back(pending);
                }
            }
            QueueOrder::Elevator => {
                // Up: ahead of the head on an upward sweep, or behind it on
                // a downward one (served on the next upward sweep).
                let cylinder = pending.location.cylinder;
                let goes_up = if self.ascending {
                    cylinder >= head_cylinder
                } else {
                    cylinder > head_cylinder
                };
                if goes_up {
                    self.upward.push(Reverse(ByCylinder(pending)));
                } else {
                    self.downward.push(ByCylinder(pending));
                }
            }
        }
    }

    /// The next request to serve at `now_ns`; `cost` estimates the time to
    /// serve a candidate (used by SPTF only).
    pub(crate) fn pop(
        &mut self,
        now_ns: u64,
        mut cost: impl FnMut(&Pending) -> f64,
    ) -> Option<Pending> {
        match self.order {
            QueueOrder::Fifo => self.waiting.pop_front(),
            QueueOrder::Elevator => {
                if self.ascending {
                    if let Some(Reverse(ByCylinder(pending))) = self.upward.pop() {
                        return Some(pending);
                    }
                    self.ascending = false;
                    self.downward.pop().map(|ByCylinder(pending)| pending)
                } else {
                    if let Some(ByCylinder(pending)) = self.downward.pop() {
                        return Some(pending);
                    }
                    self.ascending = true;
                    self.upward
                        .pop()
                        .map(|Reverse(ByCylinder(pending))| pending)
                }
            }
            QueueOrder::Sptf => {
                if self.window.is_empty() {
                    return None;
                }
                let (oldest_index, oldest) = self
                    .window
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, pending)| pending.sequence)?;
                let chosen = if now_ns.saturating_sub(oldest.arrival_ns) >= self.starvation_limit_ns
                {
                    oldest_index
                } else {
                    let mut best = 0;
                    let mut best_cost = f64::INFINITY;
                    let mut best_sequence = u64::MAX;
                    for (index, pending) in self.window.iter().enumerate() {
                        let estimate = cost(pending);
                        if estimate < best_cost
                            || (estimate == best_cost && pending.sequence < best_sequence)
                        {
                            best = index;
                            best_cost = estimate;
                            best_sequence = pending.sequence;
                        }
                    }
                    best
                };
                let pending = self.window.swap_remove(chosen);
                if let Some(next) = self.waiting.pop_front() {
                    self.window.push(next);
                }
                Some(pending)
            }
        }
    }
}
