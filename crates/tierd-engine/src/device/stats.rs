//! A wrapper that measures what passes through it: per-direction operations,
//! bytes, errors and latency, and the time the device was busy.
//!
//! Counting rules:
//! - a read or write that succeeds adds its bytes and its latency to the
//!   direction's latency histogram ([`AtomicHistogram`], which also counts the
//!   op and sums the latencies);
//! - a flush adds to `flushes`; `discard` and `write_zeroes` both add to
//!   `discards` (neither moves data from the caller);
//! - every failed operation (including out-of-range calls) adds to `errors`
//!   and to nothing else but busy time;
//! - `busy_ns` is the time with at least one operation of any kind in
//!   flight; a snapshot taken while operations are in flight includes the open
//!   interval up to the clock's now.
//!
//! The hot path is a handful of relaxed atomic operations and one short mutex
//! for the busy interval. Per-period figures are differences of two snapshots.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tierd_common::clock::Clock;
use tierd_common::histogram::AtomicHistogram;

use super::{BlockDevice, DeviceResult, DeviceStats};

struct Direction {
    bytes: AtomicU64,
    /// Ops are its count.
    latency: AtomicHistogram,
}

impl Direction {
    fn new() -> Self {
        Self {
            bytes: AtomicU64::new(0),
            latency: AtomicHistogram::new(),
        }
    }

    fn record(&self, bytes: u64, latency_ns: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.latency.record(latency_ns);
    }
}

/// Busy-time bookkeeping: how many ops are in flight and since when.
#[derive(Default)]
struct Busy {
    in_flight: u64,
    /// When `in_flight` last went from 0 to 1.
    since_ns: u64,
    /// Closed busy intervals.
    total_ns: u64,
}

/// Counts the operations of the device it wraps (see the module docs).
pub struct StatsDevice {
    inner: Arc<dyn BlockDevice>,
    clock: Arc<dyn Clock>,
    read: Direction,
    write: Direction,
    flushes: AtomicU64,
    discards: AtomicU64,
    errors: AtomicU64,
    busy: Mutex<Busy>,
}

impl StatsDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            clock,
            read: Direction::new(),
            write: Direction::new(),
            flushes: AtomicU64::new(0),
            discards: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            busy: Mutex::new(Busy::default()),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }

    /// Cumulative counters up to now.
    pub fn snapshot(&self) -> DeviceStats {
        let busy_ns = {
            let busy = self.lock_busy();
            let open_ns = if busy.in_flight > 0 {
                self.clock.now_ns().saturating_sub(busy.since_ns)
            } else {
                0
            };
            busy.total_ns + open_ns
        };
        let read_latency = self.read.latency.snapshot();
        let write_latency = self.write.latency.snapshot();
        DeviceStats {
            reads: read_latency.count(),
            writes: write_latency.count(),
            read_bytes: self.read.bytes.load(Ordering::Relaxed),
            write_bytes: self.write.bytes.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            discards: self.discards.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            busy_ns,
            read_latency,
            write_latency,
        }
    }

    fn lock_busy(&self) -> parking_lot::MutexGuard<'_, Busy> {
        // The guarded data is plain counters; a panic elsewhere cannot leave
        // them in a state worth refusing to read.
        self.busy.lock()
    }

    /// Marks one op in flight; returns its start time.
    fn begin(&self) -> u64 {
        let mut busy = self.lock_busy();
        let now_ns = self.clock.now_ns();
        if busy.in_flight == 0 {
            busy.since_ns = now_ns;
        }
        busy.in_flight += 1;
        now_ns
    }

    /// Marks one op finished; returns its latency.
    fn end(&self, start_ns: u64) -> u64 {
        let mut busy = self.lock_busy();
        let now_ns = self.clock.now_ns();
        busy.in_flight = busy.in_flight.saturating_sub(1);
        if busy.in_flight == 0 {
            busy.total_ns += now_ns.saturating_sub(busy.since_ns);
        }
        now_ns.saturating_sub(start_ns)
    }

    /// Runs `operation`, counting it into `on_success` when it succeeds and
    /// into `errors` when it fails.
    fn measure<T>(
        &self,
        operation: impl FnOnce() -> DeviceResult<T>,
        on_success: impl FnOnce(u64),
    ) -> DeviceResult<T> {
        let start_ns = self.begin();
        let result = operation();
        let latency_ns = self.end(start_ns);
        match &result {
            Ok(_) => on_success(latency_ns),
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }
}

impl BlockDevice for StatsDevice {
    fn failure(&self) -> Option<String> {
        self.inner.failure()
    }

    fn check_backing(&self) -> Option<String> {
        self.inner.check_backing()
    }

    fn backing_warning(&self) -> Option<String> {
        self.inner.backing_warning()
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn is_volatile(&self) -> bool {
        self.inner.is_volatile()
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        let length_bytes = buf.len() as u64;
        self.measure(
            || self.inner.read_at(offset_bytes, buf),
            |latency_ns| self.read.record(length_bytes, latency_ns),
        )
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.measure(
            || self.inner.write_at(offset_bytes, data),
            |latency_ns| self.write.record(data.len() as u64, latency_ns),
        )
    }

    /// Counted as a write (a durable write is a write that returns later).
    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.measure(
            || self.inner.write_at_durable(offset_bytes, data),
            |latency_ns| self.write.record(data.len() as u64, latency_ns),
        )
    }

    fn flush(&self) -> DeviceResult<()> {
        self.measure(
            || self.inner.flush(),
            |_| {
                self.flushes.fetch_add(1, Ordering::Relaxed);
            },
        )
    }

    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.measure(
            || self.inner.discard(offset_bytes, length_bytes),
            |_| {
                self.discards.fetch_add(1, Ordering::Relaxed);
            },
        )
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.measure(
            || self.inner.write_zeroes(offset_bytes, length_bytes),
            |_| {
                self.discards.fetch_add(1, Ordering::Relaxed);
            },
        )
    }

    /// This wrapper's own counters (not the inner device's).
    fn stats(&self) -> Option<DeviceStats> {
        Some(self.snapshot())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::memory::MemoryDevice;
    use crate::device::DeviceErrorKind;
    use std::sync::mpsc;
    use tierd_common::clock::ManualClock;

    /// A device whose ops each take `cost_ns` of the manual clock.
    struct Slow {
        inner: MemoryDevice,
        clock: Arc<ManualClock>,
        cost_ns: u64,
    }

    impl BlockDevice for Slow {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn is_volatile(&self) -> bool {
            true
        }
        fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
            self.clock.advance_ns(self.cost_ns);
            self.inner.read_at(offset_bytes, buf)
        }
        fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
            self.clock.advance_ns(self.cost_ns);
            self.inner.write_at(offset_bytes, data)
        }
        fn flush(&self) -> DeviceResult<()> {
            self.clock.advance_ns(self.cost_ns);
            Ok(())
        }
        fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
            self.clock.advance_ns(self.cost_ns);
            self.inner.discard(offset_bytes, length_bytes)
        }
        fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
            self.clock.advance_ns(self.cost_ns);
            self.inner.write_zeroes(offset_bytes, length_bytes)
        }
    }

    #[test]
    fn counts_ops_bytes_latency_and_busy_time() {
        let clock = Arc::new(ManualClock::new(1_000));
        let slow = Slow {
            inner: MemoryDevice::new("ram", 1 << 20),
            clock: Arc::clone(&clock),
            cost_ns: 1_500,
        };
        let device = StatsDevice::new(Arc::new(slow), clock.clone());
        device.write_at(0, &[5; 4096]).unwrap();
        device.write_at(4096, &[6; 512]).unwrap();
        let mut buf = [0u8; 100];
        device.read_at(10, &mut buf).unwrap();
        assert_eq!(buf, [5; 100]);
        device.flush().unwrap();
        device.discard(0, 4096).unwrap();
        device.write_zeroes(4096, 512).unwrap();
        let error = device.read_at(1 << 20, &mut buf).unwrap_err();
        assert_eq!(error.kind, DeviceErrorKind::OutOfRange);
        // Idle time between ops is not busy.
        clock.advance_ns(1_000_000);

        let stats = device.stats().unwrap();
        assert_eq!(stats.writes, 2);
        assert_eq!(stats.write_bytes, 4096 + 512);
        assert_eq!(stats.reads, 1);
        assert_eq!(stats.read_bytes, 100);
        assert_eq!(stats.flushes, 1);
        assert_eq!(stats.discards, 2);
        assert_eq!(stats.errors, 1);
        assert_eq!(stats.write_latency.sum_ns(), 3_000);
        assert_eq!(stats.read_latency.sum_ns(), 1_500);
        assert_eq!(stats.write_latency.count(), 2);
        assert_eq!(stats.write_latency.quantile_ns(0.99), Some(1_500));
        assert_eq!(stats.read_latency.max_ns(), Some(1_500));
        // Seven ops of 1500 ns each (the failed read too), back to back.
        assert_eq!(stats.busy_ns, 7 * 1_500);
    }

    /// A device whose reads block until the test lets them go, and which
    /// says when a read has started.
    struct Gate {
        started: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    impl BlockDevice for Gate {
        fn name(&self) -> &str {
            "gate"
        }
        fn size_bytes(&self) -> u64 {
            1 << 20
        }
        fn is_volatile(&self) -> bool {
            true
        }
        fn read_at(&self, _offset_bytes: u64, _buf: &mut [u8]) -> DeviceResult<()> {
            self.started.lock().send(()).unwrap();
            self.release.lock().recv().unwrap();
            Ok(())
        }
        fn write_at(&self, _offset_bytes: u64, _data: &[u8]) -> DeviceResult<()> {
            Ok(())
        }
        fn flush(&self) -> DeviceResult<()> {
            Ok(())
        }
        fn discard(&self, _offset_bytes: u64, _length_bytes: u64) -> DeviceResult<()> {
            Ok(())
        }
        fn write_zeroes(&self, _offset_bytes: u64, _length_bytes: u64) -> DeviceResult<()> {
            Ok(())
        }
    }

    #[test]
    fn overlapping_ops_count_busy_time_once() {
        let clock = Arc::new(ManualClock::new(0));
        let (started_sender, started) = mpsc::channel();
        let (release, release_receiver) = mpsc::channel();
        let gate = Gate {
            started: Mutex::new(started_sender),
            release: Mutex::new(release_receiver),
        };
        let device = Arc::new(StatsDevice::new(Arc::new(gate), clock.clone()));
        let spawn_read = |device: &Arc<StatsDevice>| {
            let device = Arc::clone(device);
            std::thread::spawn(move || device.read_at(0, &mut [0u8; 8]).unwrap())
        };
        // Read 1 starts at 0.
        let first = spawn_read(&device);
        started.recv().unwrap();
        clock.set_ns(10);
        // Read 2 starts at 10.
        let second = spawn_read(&device);
        started.recv().unwrap();
        clock.set_ns(30);
        assert_eq!(device.snapshot().busy_ns, 30, "open interval counts");
        // One read finishes at 30 (whichever took the first release).
        release.send(()).unwrap();
        // Wait for the released reader to leave the device.
        while device.snapshot().reads < 1 {
            std::thread::yield_now();
        }
        clock.set_ns(50);
        release.send(()).unwrap();
        first.join().unwrap();
        second.join().unwrap();
        // The idle time after the last op is not busy.
        clock.set_ns(80);
        let stats = device.snapshot();
        assert_eq!(stats.reads, 2);
        assert_eq!(stats.busy_ns, 50);
        assert_eq!(stats.read_latency.sum_ns(), 30 + 40);
    }
}
