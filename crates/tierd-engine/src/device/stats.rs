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
//! No lock on the hot path: the op counters live in per-thread shards
//! ([`Sharded`], each on its own cache line) that a snapshot sums; busy
//! time, a property of the whole device, is one 128-bit word each op
//! changes twice by compare-and-swap ([`BusyTime`]; `portable-atomic`
//! provides the 128-bit atomic, `cmpxchg16b` on x86_64, which std has not
//! stabilised). Per-period figures are differences of two snapshots.

use portable_atomic::AtomicU128;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tierd_common::clock::Clock;
use tierd_common::histogram::{AtomicHistogram, Histogram};

use super::{BlockDevice, DeviceResult, DeviceStats};
use crate::shard::{default_shard_count, Sharded};

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

/// One thread shard's op counters (about 31 KiB, mostly the two latency
/// histograms).
struct Counters {
    read: Direction,
    write: Direction,
    flushes: AtomicU64,
    discards: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn new() -> Self {
        Self {
            read: Direction::new(),
            write: Direction::new(),
            flushes: AtomicU64::new(0),
            discards: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }
}

/// Time with at least one operation in flight, kept without a lock.
///
/// One 128-bit word holds the operations in flight (bits 0-31), a version
/// (bits 32-63, one more at every change) and `acc` (bits 64-127,
/// wrapping): the busy time of the closed intervals minus the start of the
/// open one, if any. Busy time
/// at `now` is `acc + now` while operations are in flight and `acc` when
/// none are. An operation's start (0 -> 1 opens an interval: `acc -= now`)
/// and end (1 -> 0 closes it: `acc += now`) are each one compare-and-swap
/// of the whole word, so nobody sees the count and `acc` disagree.
///
/// Every attempt reads the clock after loading the word it swaps from, and
/// the version makes the swap fail if anything changed the word since, even
/// when the change was undone (an op that started and ended meanwhile): so
/// successful swaps happen in the order of their clock readings. With a
/// clock whose readings follow the order of the atomic operations (any
/// real monotonic clock, and the test's counter), every op's `[start, end]`
/// lies inside its busy interval, the intervals are disjoint, and the total
/// is exactly the measure of the union of the ops' intervals. A reader that
/// counts an open interval up to its own now swaps the word too (a new
/// version, nothing else), so a closer that read the clock before that
/// reader fails its swap and reads the clock again: an interval never
/// closes before a time a reader already reported, and readings never go
/// back (`busy_time_is_the_union_of_op_intervals_under_threads`).
struct BusyTime {
    state: AtomicU128,
}

/// The word's fields (see [`BusyTime`]).
#[derive(Clone, Copy)]
struct BusyWord {
    in_flight: u32,
    version: u32,
    acc: u64,
}

impl BusyWord {
    fn unpack(state: u128) -> Self {
        Self {
            in_flight: state as u32,
            version: (state >> 32) as u32,
            acc: (state >> 64) as u64,
        }
    }

    fn pack(self) -> u128 {
        (u128::from(self.acc) << 64) | (u128::from(self.version) << 32) | u128::from(self.in_flight)
    }
}

impl BusyTime {
    fn new() -> Self {
        Self {
            state: AtomicU128::new(0),
        }
    }

    /// Swaps in `change(word, now)`, with the next version, for the current
    /// word, reading the clock after each load; returns the word it
    /// replaced and the now it used.
    fn update(
        &self,
        clock: &dyn Clock,
        change: impl Fn(BusyWord, u64) -> BusyWord,
    ) -> (BusyWord, u64) {
        let mut current = self.state.load(Ordering::Acquire);
        loop {
            let now_ns = clock.now_ns();
            let word = BusyWord::unpack(current);
            let next = BusyWord {
                version: word.version.wrapping_add(1),
                ..change(word, now_ns)
            }
            .pack();
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return (word, now_ns),
                Err(actual) => current = actual,
            }
        }
    }

    /// One more op in flight; returns its start time.
    fn begin(&self, clock: &dyn Clock) -> u64 {
        let (_, now_ns) = self.update(clock, |word, now_ns| BusyWord {
            in_flight: word.in_flight + 1,
            acc: if word.in_flight == 0 {
                word.acc.wrapping_sub(now_ns)
            } else {
                word.acc
            },
            ..word
        });
        now_ns
    }

    /// One op fewer in flight; returns its end time.
    fn end(&self, clock: &dyn Clock) -> u64 {
        let (_, now_ns) = self.update(clock, |word, now_ns| {
            debug_assert!(word.in_flight > 0, "an op ended that never began");
            BusyWord {
                in_flight: word.in_flight.saturating_sub(1),
                acc: if word.in_flight == 1 {
                    word.acc.wrapping_add(now_ns)
                } else {
                    word.acc
                },
                ..word
            }
        });
        now_ns
    }

    /// Busy time up to the clock's now.
    fn busy_ns(&self, clock: &dyn Clock) -> u64 {
        let word = BusyWord::unpack(self.state.load(Ordering::Acquire));
        if word.in_flight == 0 {
            return word.acc;
        }
        let (word, now_ns) = self.update(clock, |word, _| word);
        if word.in_flight > 0 {
            word.acc.wrapping_add(now_ns)
        } else {
            word.acc
        }
    }
}

/// What an operation counts as when it succeeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    /// A read of this many bytes.
    Read(u64),
    /// A write of this many bytes.
    Write(u64),
    Flush,
    /// A discard (TRIM) or zeroing.
    Discard,
}

/// Per-direction counts, bytes, latency histograms and busy time of the
/// operations measured through it, sharded per thread (no lock on the IO
/// path). [`StatsDevice`] counts a device's operations with it; `tierd
/// serve` counts each volume's NBD requests with it.
pub struct IoStats {
    clock: Arc<dyn Clock>,
    counters: Sharded<Counters>,
    busy: BusyTime,
}

impl IoStats {
    pub fn new(clock: Arc<dyn Clock>) -> IoStats {
        IoStats {
            clock,
            counters: Sharded::new(default_shard_count(), Counters::new),
            busy: BusyTime::new(),
        }
    }

    /// Runs `operation` and counts it as `kind` (with its latency) when it
    /// succeeds, as an error when it fails.
    pub fn measure<T, E>(
        &self,
        kind: IoKind,
        operation: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let start_ns = self.busy.begin(self.clock.as_ref());
        let result = operation();
        let latency_ns = self.busy.end(self.clock.as_ref()).saturating_sub(start_ns);
        let counters = self.counters.local();
        match (&result, kind) {
            (Ok(_), IoKind::Read(bytes)) => counters.read.record(bytes, latency_ns),
            (Ok(_), IoKind::Write(bytes)) => counters.write.record(bytes, latency_ns),
            (Ok(_), IoKind::Flush) => {
                counters.flushes.fetch_add(1, Ordering::Relaxed);
            }
            (Ok(_), IoKind::Discard) => {
                counters.discards.fetch_add(1, Ordering::Relaxed);
            }
            (Err(_), _) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Cumulative counters up to now: every shard summed.
    pub fn snapshot(&self) -> DeviceStats {
        let busy_ns = self.busy.busy_ns(self.clock.as_ref());
        let mut read_latency = Histogram::new();
        let mut write_latency = Histogram::new();
        let mut stats = DeviceStats {
            busy_ns,
            ..DeviceStats::default()
        };
        for shard in self.counters.iter() {
            read_latency.merge(&shard.read.latency.snapshot());
            write_latency.merge(&shard.write.latency.snapshot());
            stats.read_bytes += shard.read.bytes.load(Ordering::Relaxed);
            stats.write_bytes += shard.write.bytes.load(Ordering::Relaxed);
            stats.flushes += shard.flushes.load(Ordering::Relaxed);
            stats.discards += shard.discards.load(Ordering::Relaxed);
            stats.errors += shard.errors.load(Ordering::Relaxed);
        }
        stats.reads = read_latency.count();
        stats.writes = write_latency.count();
        stats.read_latency = read_latency;
        stats.write_latency = write_latency;
        stats
    }
}

/// Counts the operations of the device it wraps (see the module docs).
pub struct StatsDevice {
    inner: Arc<dyn BlockDevice>,
    stats: IoStats,
}

impl StatsDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            stats: IoStats::new(clock),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }

    /// Cumulative counters up to now: every shard summed.
    pub fn snapshot(&self) -> DeviceStats {
        self.stats.snapshot()
    }
}

impl BlockDevice for StatsDevice {
    fn release_cache(&self, offset_bytes: u64, length_bytes: u64) {
        self.inner.release_cache(offset_bytes, length_bytes);
    }

    fn allocation(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Option<Vec<super::AllocationRun>> {
        self.inner.allocation(offset_bytes, length_bytes)
    }

    fn read_cost_hint_ns(&self, offset_bytes: u64, length_bytes: u64) -> Option<f64> {
        self.inner.read_cost_hint_ns(offset_bytes, length_bytes)
    }

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
        self.stats.measure(IoKind::Read(buf.len() as u64), || {
            self.inner.read_at(offset_bytes, buf)
        })
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.stats.measure(IoKind::Write(data.len() as u64), || {
            self.inner.write_at(offset_bytes, data)
        })
    }

    /// Counted as a write (a durable write is a write that returns later).
    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.stats.measure(IoKind::Write(data.len() as u64), || {
            self.inner.write_at_durable(offset_bytes, data)
        })
    }

    fn flush(&self) -> DeviceResult<()> {
        self.stats.measure(IoKind::Flush, || self.inner.flush())
    }

    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.stats.measure(IoKind::Discard, || {
            self.inner.discard(offset_bytes, length_bytes)
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.stats.measure(IoKind::Discard, || {
            self.inner.write_zeroes(offset_bytes, length_bytes)
        })
    }

    /// This wrapper's own counters (not the inner device's).
    fn stats(&self) -> Option<DeviceStats> {
        Some(self.snapshot())
    }

    fn reduction(&self) -> Option<super::reduce::ReductionStatus> {
        self.inner.reduction()
    }

    fn replicas(&self) -> Option<super::replica::ReplicaView> {
        self.inner.replicas()
    }

    fn smr_model_stats(&self) -> Option<tierd_device::model::smr::SmrStats> {
        self.inner.smr_model_stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::memory::MemoryDevice;
    use crate::device::DeviceErrorKind;
    use parking_lot::Mutex;
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

    /// A clock whose every reading is one tick after the last, in the
    /// order of its atomic counter: readings order like the atomic
    /// operations around them, the property [`BusyTime`] relies on. Every
    /// few readings it gives up the CPU after reading, as a preempted
    /// thread would, which opens the window between a reading and the
    /// compare-and-swap that uses it.
    #[derive(Default)]
    struct TickClock(AtomicU64);

    impl Clock for TickClock {
        fn now_ns(&self) -> u64 {
            let now_ns = self.0.fetch_add(1, Ordering::SeqCst);
            if now_ns.is_multiple_of(5) {
                std::thread::yield_now();
            }
            now_ns
        }
        fn sleep_ns(&self, duration_ns: u64) {
            self.0.fetch_add(duration_ns, Ordering::SeqCst);
        }
    }

    /// Four threads start and end ops on one `BusyTime` as fast as they can
    /// (some ops spanning clock ticks, some yielding the CPU in flight)
    /// while a fifth reads it: every reading is at least the one before,
    /// and at the end the total is exactly the measure of the union of the
    /// ops' `[start, end]` intervals: no overlap counted twice, no gap
    /// counted, no interval lost to a race on a 0 <-> 1 transition.
    /// The busy word takes no lock where the CPU has a 128-bit
    /// compare-and-swap (portable-atomic would fall back to a lock).
    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn busy_word_is_lock_free() {
        assert!(AtomicU128::is_lock_free());
    }

    #[test]
    fn busy_time_is_the_union_of_op_intervals_under_threads() {
        use std::sync::atomic::AtomicBool;
        use tierd_common::rng::{Rng, SeededRng};
        const THREADS: u64 = 4;
        const OPS: usize = 20_000;
        let clock = Arc::new(TickClock::default());
        let busy = Arc::new(BusyTime::new());
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (clock, busy, done) = (clock.clone(), busy.clone(), done.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                let mut readings = 0u64;
                while !done.load(Ordering::Acquire) {
                    let now = busy.busy_ns(clock.as_ref());
                    assert!(now >= last, "busy time went back from {last} to {now}");
                    last = now;
                    readings += 1;
                }
                readings
            })
        };
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (clock, busy) = (clock.clone(), busy.clone());
                std::thread::spawn(move || {
                    let mut rng = SeededRng::new(thread);
                    let mut intervals = Vec::with_capacity(OPS);
                    for _ in 0..OPS {
                        let start = busy.begin(clock.as_ref());
                        for _ in 0..rng.below(3) {
                            clock.now_ns();
                        }
                        if rng.chance(0.01) {
                            std::thread::yield_now();
                        }
                        let end = busy.end(clock.as_ref());
                        assert!(end > start);
                        intervals.push((start, end));
                        if rng.chance(0.3) {
                            // Idle a little: some gaps between intervals.
                            clock.now_ns();
                        }
                    }
                    intervals
                })
            })
            .collect();
        let mut intervals: Vec<(u64, u64)> = workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap())
            .collect();
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
        intervals.sort_unstable();
        let mut union_ns = 0;
        let mut components = 0;
        let (mut from, mut to) = intervals[0];
        for &(start, end) in &intervals[1..] {
            if start <= to {
                to = to.max(end);
            } else {
                union_ns += to - from;
                components += 1;
                (from, to) = (start, end);
            }
        }
        union_ns += to - from;
        components += 1;
        // The ops did overlap and did leave gaps, or the test proves little.
        assert!(
            components > 10 && components < intervals.len(),
            "{components}"
        );
        assert_eq!(busy.busy_ns(clock.as_ref()), union_ns);
        assert_eq!(
            BusyWord::unpack(busy.state.load(Ordering::Acquire)).in_flight,
            0
        );
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
