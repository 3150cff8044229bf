//! Event-driven device timing models.
//!
//! A model is a queueing server in virtual time. The caller (the simulator's
//! event loop) submits IOs as they arrive and advances the model to each next
//! event; the model decides service order (FIFO, elevator, NCQ-style
//! positioning order), service times and completions. Models never read a
//! clock: time is only what the caller passes in.
//!
//! Protocol the caller MUST follow:
//! - `now_ns` never decreases across calls on one model;
//! - after `submit` or `advance`, call [`DeviceModel::next_event_ns`] and
//!   come back with `advance(t)` no later than that time (the model may start
//!   queued IOs or finish background work, e.g. SMR cleaning, at that time);
//! - `advance(now)` appends every IO that completed at or before `now` to
//!   `done`, in completion order.

pub mod hdd;
pub mod memory;
pub mod smr;
pub mod ssd;

use serde::{Deserialize, Serialize};
use tierd_trace::Op;

/// One IO as a device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceIo {
    /// Caller's id, returned in the completion.
    pub id: u64,
    pub op: Op,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    /// Migration or destage traffic rather than user IO (counted apart).
    pub background: bool,
}

/// A finished IO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub id: u64,
    pub arrival_ns: u64,
    /// When the device started serving it (after queueing).
    pub start_ns: u64,
    pub done_ns: u64,
    pub background: bool,
}

impl Completion {
    /// Queueing plus service: what iostat calls await.
    pub fn response_ns(&self) -> u64 {
        self.done_ns - self.arrival_ns
    }

    /// Service only: what iostat calls svctm.
    pub fn service_ns(&self) -> u64 {
        self.done_ns - self.start_ns
    }
}

/// Cumulative iostat-style counters. Per-period figures are differences of
/// two snapshots (see [`DeviceCounters::since`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceCounters {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// IOs that were background (migration, destage, cleaning reads/writes are
    /// not IOs here: they show in `busy_ns` only).
    pub background_ios: u64,
    /// Time with at least one IO in service (or internal work such as SMR
    /// cleaning): `%util` = busy_ns / elapsed.
    pub busy_ns: u64,
    /// Sum over completed IOs of done − arrival (await × IOs).
    pub response_ns_total: u64,
    /// Sum over completed IOs of done − start (svctm × IOs).
    pub service_ns_total: u64,
}

impl DeviceCounters {
    pub fn ios(&self) -> u64 {
        self.reads + self.writes
    }

    /// Counters accumulated since `earlier`.
    pub fn since(&self, earlier: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            read_bytes: self.read_bytes - earlier.read_bytes,
            write_bytes: self.write_bytes - earlier.write_bytes,
            background_ios: self.background_ios - earlier.background_ios,
            busy_ns: self.busy_ns - earlier.busy_ns,
            response_ns_total: self.response_ns_total - earlier.response_ns_total,
            service_ns_total: self.service_ns_total - earlier.service_ns_total,
        }
    }
}

/// A device timing model (see the module docs for the calling protocol).
pub trait DeviceModel: Send {
    /// Preset or model name, for reports.
    fn name(&self) -> &str;

    fn capacity_bytes(&self) -> u64;

    /// An IO arrives at `now_ns`. IOs beyond the capacity are the caller's
    /// bug: models clamp them to the last byte and count them as served.
    fn submit(&mut self, now_ns: u64, io: DeviceIo);

    /// The next time something happens inside the model (a completion, or
    /// internal background work starting or ending), if anything is pending.
    fn next_event_ns(&self) -> Option<u64>;

    /// Moves the model to `now_ns`, appending completed IOs to `done`.
    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>);

    /// IOs submitted and not yet completed.
    fn outstanding(&self) -> usize;

    /// Cumulative counters, updated as IOs complete; `busy_ns` is accounted up
    /// to the last `advance`.
    fn counters(&self) -> DeviceCounters;
}

/// Devices by preset name, as tier stacks name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DevicePreset {
    /// Seagate Savvio 10K.4 ST9600204SS (OTF-AST's HDD).
    Savvio10k4,
    /// Seagate Cheetah 15K.7.
    Cheetah15k7,
    /// Seagate Constellation.2 7200 rpm.
    Constellation2,
    /// Intel X25-E (OTF-AST's SSD).
    X25e,
    /// Intel P3700 (ATSMF's SSD).
    P3700,
    /// DRAM behind a kernel block layer (ATSMF's brd RAM disk).
    Memory,
    /// Seagate Archive 8 TB drive-managed SMR (paper 001's disk).
    Archive8tb,
}
