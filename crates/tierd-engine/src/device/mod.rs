//! Block devices as the live engine uses them: backends that store bytes and
//! wrappers that add measurement, emulated timing or injected faults.
//!
//! Backends: [`file::FileDevice`] (a file or block device, positioned IO,
//! optional `O_DIRECT`) and [`memory::MemoryDevice`] (volatile RAM).
//! Wrappers: [`stats::StatsDevice`] (per-direction iops, bytes, latency
//! histogram, busy time), [`latency::LatencyDevice`] (holds completions back to
//! what a `tierd_device` model says, so one machine can stand in for an
//! HDD+SSD stack) and [`fault::FaultDevice`] (EIO, delay, a device that
//! disappears; per-op probabilities from a seeded RNG).
//!
//! Every device is shared between threads (`&self` methods); implementations
//! serialise internally where they must.

pub mod crash;
pub mod fault;
pub mod file;
pub mod io_engine;
pub mod journal_batch;
pub mod latency;
pub mod memory;
pub mod reduce;
pub mod replica;
pub mod stats;

use std::fmt;

use tierd_common::histogram::Histogram;

/// What went wrong with one device operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceErrorKind {
    /// The OS (or an injected fault) returned this errno.
    Io(i32),
    /// Offset + length beyond the device: a caller bug, never sent to a device.
    OutOfRange,
    /// The device is gone (removed, or a fault marks it lost): every op fails.
    Gone,
}

/// A failed device operation, naming the device and the byte range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceError {
    pub device: String,
    pub op: &'static str,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub kind: DeviceErrorKind,
    pub message: String,
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {}: {} of {} bytes at offset {} failed: {}",
            self.device, self.op, self.length_bytes, self.offset_bytes, self.message
        )
    }
}

impl std::error::Error for DeviceError {}

impl DeviceError {
    /// The errno to report to a client (EIO unless the OS said otherwise).
    pub fn errno(&self) -> i32 {
        match self.kind {
            DeviceErrorKind::Io(errno) => errno,
            DeviceErrorKind::OutOfRange => libc::EINVAL,
            DeviceErrorKind::Gone => libc::EIO,
        }
    }
}

pub type DeviceResult<T> = Result<T, DeviceError>;

/// Cumulative counters of a [`stats::StatsDevice`] (other devices report none).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStats {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub errors: u64,
    /// Time with at least one operation outstanding (iostat's %util × time).
    pub busy_ns: u64,
    /// Latency of each successful read / write: count (= `reads` /
    /// `writes`), exact sum (await × ops), min, max, and percentiles within
    /// 3.125 % ([`tierd_common::histogram`]).
    pub read_latency: Histogram,
    pub write_latency: Histogram,
}

/// A block device shared by the engine's threads.
///
/// Obligations of every implementation:
/// - `offset + length <= size_bytes()` is checked: beyond it the call fails
///   with [`DeviceErrorKind::OutOfRange`] and touches nothing;
/// - any offset, length and buffer address is accepted (a direct-IO backend
///   bounces unaligned requests through aligned buffers itself);
/// - `write_at` returning `Ok` means the bytes are visible to every later
///   `read_at` on any thread; they are durable across a crash only after a
///   later `flush` returns `Ok` (volatile devices never are);
/// - `write_at_durable` returning `Ok` means the same, and the written bytes
///   (not necessarily any other unflushed write) are already durable (NBD
///   FUA); a wrapper MUST forward it to its inner device as a durable write,
///   never as a plain write;
/// - after `discard` or `write_zeroes` returns, the range reads as zeroes;
/// - never panics on any argument.
pub trait BlockDevice: Send + Sync {
    /// Name for errors, logs and metrics (the tier name or the path).
    fn name(&self) -> &str;

    fn size_bytes(&self) -> u64;

    /// True for RAM: contents are lost when the process ends.
    fn is_volatile(&self) -> bool;

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()>;

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()>;

    /// Writes `data` at `offset_bytes` and returns once those bytes are
    /// durable (a FUA write): other unflushed writes need not be. The default
    /// writes and then flushes the whole device; [`file::FileDevice`] makes
    /// only the written range durable (`pwritev2(RWF_DSYNC)`), and a volatile
    /// device has nothing to make durable.
    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.write_at(offset_bytes, data)?;
        self.flush()
    }

    /// Makes every write that completed before this call durable.
    fn flush(&self) -> DeviceResult<()>;

    /// Drops the range's contents (hole punch where supported); reads of the
    /// range return zeroes afterwards.
    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()>;

    /// Writes zeroes over the range (may deallocate).
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()>;

    /// Counters if this device (or a wrapper in its chain) measures them.
    fn stats(&self) -> Option<DeviceStats> {
        None
    }

    /// A reduced tier's figures ([`reduce::ReducedDevice`]); wrappers above
    /// one forward it.
    fn reduction(&self) -> Option<reduce::ReductionStatus> {
        None
    }

    /// A replicated tier's figures ([`replica::ReplicaDevice`]); wrappers
    /// above one forward it.
    fn replicas(&self) -> Option<replica::ReplicaView> {
        None
    }

    /// An emulated SMR disk's translation layer as its model predicts it
    /// ([`latency::LatencyDevice`] over the `archive8tb` model); wrappers
    /// above one forward it.
    fn smr_model_stats(&self) -> Option<tierd_device::model::smr::SmrStats> {
        None
    }

    /// Why the backing stopped serving (a tier file truncated, deleted or
    /// replaced under the server), if it did; every operation then fails.
    fn failure(&self) -> Option<String> {
        None
    }

    /// A problem with the backing that does not stop service (a tier file
    /// deleted while open), if any.
    fn backing_warning(&self) -> Option<String> {
        None
    }

    /// Looks at the backing now (see [`file::FileDevice::check_backing`])
    /// and returns the failure, if any. Wrappers forward to their inner device.
    fn check_backing(&self) -> Option<String> {
        None
    }

    /// The range's data lives elsewhere now (a move copied it off this
    /// device and flipped): a device behind the page cache may drop the
    /// range's cached pages. A hint: it changes no data and never fails.
    /// Wrappers forward to their inner device.
    fn release_cache(&self, _offset_bytes: u64, _length_bytes: u64) {}

    /// Which parts of `[offset, offset + length)` hold data: runs in order
    /// that cover the range exactly, or `None` when the device cannot tell
    /// (then all of it counts as data). A run that is not allocated reads as
    /// zeroes. Answers NBD `BLOCK_STATUS` `base:allocation`; a hint for
    /// clients (sparse copies), never used to decide what data is served.
    /// Wrappers forward to their inner device.
    fn allocation(&self, _offset_bytes: u64, _length_bytes: u64) -> Option<Vec<AllocationRun>> {
        None
    }

    /// Predicted time in ns to serve a read of `length_bytes` at
    /// `offset_bytes` from where the device is now (an emulated disk's head
    /// position: seek + rotation + transfer), if this device (or one below
    /// it) models that. Replica routing picks the cheapest copy by it.
    fn read_cost_hint_ns(&self, _offset_bytes: u64, _length_bytes: u64) -> Option<f64> {
        None
    }
}

/// One run of a [`BlockDevice::allocation`] answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocationRun {
    pub length_bytes: u64,
    /// Holds data; false: a hole that reads as zeroes.
    pub allocated: bool,
}

impl AllocationRun {
    /// True when `runs` is a well-formed answer for `length_bytes`: no
    /// empty run and lengths that add up to exactly `length_bytes`. A layer
    /// that gets anything else from below reports the range allocated.
    pub fn covers(runs: &[AllocationRun], length_bytes: u64) -> bool {
        let mut total = 0u64;
        for run in runs {
            if run.length_bytes == 0 {
                return false;
            }
            match total.checked_add(run.length_bytes) {
                Some(sum) => total = sum,
                None => return false,
            }
        }
        total == length_bytes
    }
}

/// Builds an allocation answer: runs appended in order, each merged into
/// the last when both hold data or both are holes; empty runs dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocationRuns {
    runs: Vec<AllocationRun>,
    covered_bytes: u64,
}

impl AllocationRuns {
    pub fn push(&mut self, length_bytes: u64, allocated: bool) {
        if length_bytes == 0 {
            return;
        }
        self.covered_bytes += length_bytes;
        match self.runs.last_mut() {
            Some(last) if last.allocated == allocated => last.length_bytes += length_bytes,
            _ => self.runs.push(AllocationRun {
                length_bytes,
                allocated,
            }),
        }
    }

    /// The last run so far.
    pub fn last(&self) -> Option<AllocationRun> {
        self.runs.last().copied()
    }

    /// Runs so far (after merging).
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Bytes the runs cover.
    pub fn covered_bytes(&self) -> u64 {
        self.covered_bytes
    }

    pub fn into_runs(self) -> Vec<AllocationRun> {
        self.runs
    }
}

/// Checks `offset + length <= size`, for implementations.
pub fn check_range(
    device: &str,
    op: &'static str,
    offset_bytes: u64,
    length_bytes: u64,
    size_bytes: u64,
) -> DeviceResult<()> {
    match offset_bytes.checked_add(length_bytes) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(DeviceError {
            device: device.to_string(),
            op,
            offset_bytes,
            length_bytes,
            kind: DeviceErrorKind::OutOfRange,
            message: format!("range ends beyond the device size of {size_bytes} bytes"),
        }),
    }
}
