//! Emulated device timing: real bytes, modelled latency.
//!
//! [`LatencyDevice`] runs every operation on the real inner device and holds
//! its return back until the time a `tierd_device` model says the operation
//! completes, on the injected clock's timeline (model ns = clock ns). All
//! callers share one model, so concurrent operations queue inside it as they
//! would on the device: an HDD model serves one at a time, an SSD model
//! several in parallel.
//!
//! The rule, per operation:
//! 1. lock the model, advance it to the clock's now, submit the operation with
//!    a fresh id and arrival = now; unlock;
//! 2. run the operation on the inner device;
//! 3. wait until advancing the model to the clock's now yields that id's
//!    completion, then return the inner device's result (also when that is an
//!    error; an out-of-range call fails at once and never reaches the model).
//!
//! If the inner device is slower than the model, the operation returns when
//! the inner device is done: the model can only add latency.
//!
//! Waiting never spins. Waiters sleep until the model's next event:
//! - [`TimeMode::Real`] (a clock that moves by itself, `SystemClock`): on a
//!   condition variable with a timeout; whoever wakes first advances the model
//!   and wakes the others when it produced completions;
//! - [`TimeMode::Virtual`] (`ManualClock`): the waiter holding the model lock
//!   calls `clock.sleep_ns(next_event - now)`, which moves virtual time to the
//!   next event, so a run is exact and deterministic;
//! - [`TimeMode::Auto`] (the default): waits as `Real`, and switches to
//!   `Virtual` for good the first time a wait times out without the clock
//!   having moved at all.
//!
//! Virtual time is exact for one device. Several devices sharing one
//! `ManualClock` each move it forward on their own: when two wait at the same
//! moment, the clock can run ahead of the earlier target by the other's wait
//! (time stays monotonic and every wait ends).
//!
//! What the model sees:
//! - reads and writes: their own length;
//! - `discard` and `write_zeroes`: a write of at most [`ZEROING_MODEL_BYTES_MAX`]
//!   (1 MiB). Devices implement both as metadata work (TRIM, unmap, WRITE
//!   SAME) far cheaper than writing the range, but not free;
//! - `flush`: nothing. The models keep no volatile write cache by default, so
//!   a flush has nothing to wait for in them; the inner device's flush still
//!   runs and takes its real time.
//! - offsets: see [`OffsetMapping`]. User and migration IO both count as
//!   user IO in the model (`background = false`).

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tierd_common::clock::Clock;
use tierd_common::hash::FastMap;
use tierd_common::op::Op;
use tierd_device::model::{Completion, DeviceCounters, DeviceIo, DeviceModel};

use super::{check_range, BlockDevice, DeviceResult, DeviceStats};

/// Largest write a `discard` or `write_zeroes` costs in the model.
pub const ZEROING_MODEL_BYTES_MAX: u64 = 1 << 20;

/// Model events processed per advance before giving up on a model that keeps
/// reporting an event it never consumes (a model bug; we stop rather than hang).
const EVENTS_PER_ADVANCE_MAX: usize = 1 << 20;

/// How waiting threads let time pass (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimeMode {
    /// Real waits until a wait shows the clock standing still, then virtual.
    #[default]
    Auto,
    /// Condition-variable waits; the clock must move by itself.
    Real,
    /// The waiter moves the clock to the next model event with `sleep_ns`.
    Virtual,
}

/// How an offset on the inner device becomes an offset in the model, whose
/// capacity is the preset's and may differ from the inner device's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OffsetMapping {
    /// Spread the inner device over the whole model, so a seek across the
    /// inner device is a full-stroke seek and seek distances keep their
    /// proportion. The inner device is cut into chunks (a power of two, at
    /// least 4 KiB and at most 64 MiB, about 1/256 of its size); chunk `i`
    /// starts at model offset `i · chunk · model / inner` and offsets inside a
    /// chunk are kept, so sequential IO stays sequential for the model except
    /// at chunk boundaries. Equal sizes map every offset to itself.
    #[default]
    Proportional,
    /// Same offset (clamped to the model's end): a small inner device sits on
    /// the first bytes of the modelled disk (short-stroking).
    Identity,
}

struct ModelState {
    model: Box<dyn DeviceModel>,
    next_id: u64,
    /// Completions produced by an advance, waiting for their callers.
    finished: FastMap<u64, Completion>,
    scratch: Vec<Completion>,
    /// Time the model was last advanced or submitted to.
    model_now_ns: u64,
    /// Predicting only ([`LatencyDevice::predicting`]): nobody waits, so
    /// completions are dropped.
    discard: bool,
}

impl ModelState {
    /// Advances the model to `now_ns` through every event on the way (the
    /// model protocol: never skip past `next_event_ns`). Returns whether any
    /// completion came out.
    fn advance_to(&mut self, now_ns: u64) -> bool {
        let mut produced = false;
        for _ in 0..EVENTS_PER_ADVANCE_MAX {
            match self.model.next_event_ns() {
                Some(event_ns) if event_ns <= now_ns => {
                    let event_ns = event_ns.max(self.model_now_ns);
                    self.model.advance(event_ns, &mut self.scratch);
                    self.model_now_ns = event_ns;
                    produced |= self.collect();
                }
                _ => break,
            }
        }
        if now_ns > self.model_now_ns {
            self.model.advance(now_ns, &mut self.scratch);
            self.model_now_ns = now_ns;
            produced |= self.collect();
        }
        produced
    }

    fn collect(&mut self) -> bool {
        let produced = !self.scratch.is_empty();
        for completion in self.scratch.drain(..) {
            if !self.discard {
                self.finished.insert(completion.id, completion);
            }
        }
        produced
    }
}

/// Holds completions of the inner device back to a model's timing (see the
/// module docs).
pub struct LatencyDevice {
    inner: Arc<dyn BlockDevice>,
    clock: Arc<dyn Clock>,
    state: Mutex<ModelState>,
    completions: Condvar,
    model_name: String,
    model_capacity_bytes: u64,
    mapping: OffsetMapping,
    chunk_bytes: u64,
    time_mode: TimeMode,
    /// Auto mode saw a clock that does not move by itself.
    virtual_time_seen: AtomicBool,
    /// [`LatencyDevice::predicting`]: no operation waits for the model.
    predict_only: bool,
}

/// Timer slack of threads that wait for emulated completions.
const WAIT_TIMER_SLACK_NS: libc::c_ulong = 1_000;

thread_local! {
    static TIMER_SLACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Linux lets a timed wait oversleep by the thread's timer slack (50 us by
/// default), which would add 50 us to every emulated completion: a 15 us
/// memory model would answer in 65 us. Lowers this thread's slack to 1 us, once.
/// Only the calling thread is affected, and only its timers get more precise.
fn tighten_timer_slack() {
    let _ = TIMER_SLACK_SET.try_with(|set| {
        if !set.get() {
            set.set(true);
            // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes
            // only this thread's timer slack; failure leaves the default.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, WAIT_TIMER_SLACK_NS);
            }
        }
    });
}

/// Chunk of [`OffsetMapping::Proportional`] for an inner device of `size`.
fn proportional_chunk_bytes(inner_size_bytes: u64) -> u64 {
    let target = (inner_size_bytes / 256).max(1);
    let power_of_two = 1u64 << (63 - target.leading_zeros());
    power_of_two.clamp(4 << 10, 64 << 20)
}

impl LatencyDevice {
    /// Wraps `inner` with `model`'s timing on `clock` ([`TimeMode::Auto`],
    /// [`OffsetMapping::Proportional`]). The model should be fresh: its
    /// virtual time must not be ahead of the clock.
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        model: Box<dyn DeviceModel>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let model_name = model.name().to_string();
        let model_capacity_bytes = model.capacity_bytes();
        let chunk_bytes = proportional_chunk_bytes(inner.size_bytes());
        Self {
            inner,
            clock,
            state: Mutex::new(ModelState {
                model,
                next_id: 0,
                finished: FastMap::default(),
                scratch: Vec::with_capacity(64),
                model_now_ns: 0,
                discard: false,
            }),
            completions: Condvar::new(),
            model_name,
            model_capacity_bytes,
            mapping: OffsetMapping::default(),
            chunk_bytes,
            time_mode: TimeMode::default(),
            virtual_time_seen: AtomicBool::new(false),
            predict_only: false,
        }
    }

    /// Predicts instead of emulating: every operation is fed to the model
    /// at its arrival and returns as soon as the inner device does, so the
    /// model tracks what the device is predicted to do (an SMR disk's media
    /// cache and cleaning, for `tierd status`) without adding latency. A
    /// real disk's tier with `model_mode = "predict"`.
    pub fn predicting(mut self) -> Self {
        self.lock_state().discard = true;
        self.predict_only = true;
        self
    }

    /// Whether this device only predicts ([`LatencyDevice::predicting`]).
    pub fn predicts_only(&self) -> bool {
        self.predict_only
    }

    pub fn with_time_mode(mut self, time_mode: TimeMode) -> Self {
        self.time_mode = time_mode;
        self
    }

    pub fn with_offset_mapping(mut self, mapping: OffsetMapping) -> Self {
        self.mapping = mapping;
        self
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }

    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// The model's own iostat-style counters (busy time, service times).
    pub fn model_counters(&self) -> DeviceCounters {
        self.lock_state().model.counters()
    }

    /// The model's SMR translation layer, when it models an SMR disk, as
    /// of the clock's now (the model advanced to it: cleaning in idle time).
    pub fn model_smr_stats(&self) -> Option<tierd_device::model::smr::SmrStats> {
        let mut state = self.lock_state();
        let now_ns = self.clock.now_ns().max(state.model_now_ns);
        let produced = state.advance_to(now_ns);
        let stats = state.model.smr_stats();
        drop(state);
        if produced {
            self.completions.notify_all();
        }
        stats
    }

    fn lock_state(&self) -> MutexGuard<'_, ModelState> {
        // A panic while holding the lock can only have come from the model;
        // its state is what it is, and refusing every later IO helps nobody.
        self.state.lock()
    }

    /// Where `[offset, offset + length)` lands in the model, clamped inside it.
    pub fn model_range(&self, offset_bytes: u64, length_bytes: u64) -> (u64, u64) {
        let capacity = self.model_capacity_bytes;
        let length_bytes = length_bytes.min(capacity);
        let inner_size = self.inner.size_bytes();
        let mapped = match self.mapping {
            OffsetMapping::Identity => offset_bytes,
            OffsetMapping::Proportional if inner_size == capacity || inner_size == 0 => {
                offset_bytes
            }
            OffsetMapping::Proportional => {
                let chunk_start = offset_bytes / self.chunk_bytes * self.chunk_bytes;
                let scaled =
                    u128::from(chunk_start) * u128::from(capacity) / u128::from(inner_size);
                u64::try_from(scaled)
                    .unwrap_or(u64::MAX)
                    .saturating_add(offset_bytes - chunk_start)
            }
        };
        (mapped.min(capacity - length_bytes), length_bytes)
    }

    /// Submits one IO to the model at the clock's now; returns its id.
    fn submit(&self, op: Op, offset_bytes: u64, length_bytes: u64) -> u64 {
        let (model_offset, model_length) = self.model_range(offset_bytes, length_bytes);
        let mut state = self.lock_state();
        let now_ns = self.clock.now_ns().max(state.model_now_ns);
        let produced = state.advance_to(now_ns);
        let id = state.next_id;
        state.next_id += 1;
        state.model.submit(
            now_ns,
            DeviceIo {
                id,
                op,
                offset_bytes: model_offset,
                length_bytes: model_length,
                background: false,
            },
        );
        drop(state);
        if produced {
            self.completions.notify_all();
        }
        id
    }

    /// True when waits move the clock themselves ([`TimeMode::Virtual`], or
    /// [`TimeMode::Auto`] after it saw a clock that stands still).
    pub fn virtual_time(&self) -> bool {
        match self.time_mode {
            TimeMode::Virtual => true,
            TimeMode::Real => false,
            TimeMode::Auto => self.virtual_time_seen.load(Ordering::Relaxed),
        }
    }

    /// Blocks until the model has completed `id`.
    fn wait(&self, id: u64) {
        let mut state = self.lock_state();
        loop {
            let now_ns = self.clock.now_ns().max(state.model_now_ns);
            if state.advance_to(now_ns) {
                self.completions.notify_all();
            }
            if state.finished.remove(&id).is_some() {
                return;
            }
            let Some(event_ns) = state.model.next_event_ns() else {
                // The model holds nothing, yet never completed our IO (a
                // model bug): return rather than wait forever.
                return;
            };
            let target_ns = event_ns.max(now_ns.saturating_add(1));
            if self.virtual_time() {
                // Instant on a virtual clock; holding the lock, nobody else
                // can act on this model meanwhile. Re-read now: another
                // device sharing the clock may have moved it.
                let now_ns = self.clock.now_ns();
                if now_ns < target_ns {
                    self.clock.sleep_ns(target_ns - now_ns);
                }
                continue;
            }
            let delta_ns = target_ns - now_ns;
            tighten_timer_slack();
            let timeout = self
                .completions
                .wait_for(&mut state, Duration::from_nanos(delta_ns));
            if self.time_mode == TimeMode::Auto
                && timeout.timed_out()
                && self.clock.now_ns() == now_ns
            {
                // Real time passed, the clock did not: it is virtual.
                self.virtual_time_seen.store(true, Ordering::Relaxed);
                self.clock.sleep_ns(delta_ns);
            }
        }
    }

    /// Runs `operation` on the inner device with the model's timing.
    fn timed<T>(
        &self,
        op: Op,
        offset_bytes: u64,
        model_length_bytes: u64,
        operation: impl FnOnce() -> DeviceResult<T>,
    ) -> DeviceResult<T> {
        if model_length_bytes == 0 {
            return operation();
        }
        let id = self.submit(op, offset_bytes, model_length_bytes);
        let result = operation();
        if !self.predict_only {
            self.wait(id);
        }
        result
    }
}

impl BlockDevice for LatencyDevice {
    fn smr_model_stats(&self) -> Option<tierd_device::model::smr::SmrStats> {
        self.model_smr_stats()
    }

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
        let (model_offset, model_length) = self.model_range(offset_bytes, length_bytes);
        let state = self.lock_state();
        let now_ns = self.clock.now_ns().max(state.model_now_ns);
        state.model.read_cost_ns(now_ns, model_offset, model_length)
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
        let length_bytes = buf.len() as u64;
        check_range(
            self.name(),
            "read",
            offset_bytes,
            length_bytes,
            self.size_bytes(),
        )?;
        self.timed(Op::Read, offset_bytes, length_bytes, || {
            self.inner.read_at(offset_bytes, buf)
        })
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        let length_bytes = data.len() as u64;
        check_range(
            self.name(),
            "write",
            offset_bytes,
            length_bytes,
            self.size_bytes(),
        )?;
        self.timed(Op::Write, offset_bytes, length_bytes, || {
            self.inner.write_at(offset_bytes, data)
        })
    }

    /// A write in the model (the models keep no volatile write cache, so
    /// every modelled write is already durable).
    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        let length_bytes = data.len() as u64;
        check_range(
            self.name(),
            "write",
            offset_bytes,
            length_bytes,
            self.size_bytes(),
        )?;
        self.timed(Op::Write, offset_bytes, length_bytes, || {
            self.inner.write_at_durable(offset_bytes, data)
        })
    }

    /// The inner flush only: no model operation (see the module docs).
    fn flush(&self) -> DeviceResult<()> {
        self.inner.flush()
    }

    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        check_range(
            self.name(),
            "discard",
            offset_bytes,
            length_bytes,
            self.size_bytes(),
        )?;
        let model_length = length_bytes.min(ZEROING_MODEL_BYTES_MAX);
        self.timed(Op::Write, offset_bytes, model_length, || {
            self.inner.discard(offset_bytes, length_bytes)
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        check_range(
            self.name(),
            "write_zeroes",
            offset_bytes,
            length_bytes,
            self.size_bytes(),
        )?;
        let model_length = length_bytes.min(ZEROING_MODEL_BYTES_MAX);
        self.timed(Op::Write, offset_bytes, model_length, || {
            self.inner.write_zeroes(offset_bytes, length_bytes)
        })
    }

    /// The inner chain's counters (the model's are in
    /// [`LatencyDevice::model_counters`]).
    fn stats(&self) -> Option<DeviceStats> {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::memory::MemoryDevice;
    use crate::device::DeviceErrorKind;
    use std::sync::{mpsc, Barrier};
    use tierd_common::clock::{ManualClock, SystemClock};
    use tierd_device::DevicePreset;

    const BACKEND_BYTES: u64 = 64 << 20;

    fn model(preset: DevicePreset, capacity_bytes: Option<u64>) -> Box<dyn DeviceModel> {
        preset.build(capacity_bytes, 11).unwrap()
    }

    /// Runs `ios` (id order = submission order, all arriving at `start_ns`)
    /// on a fresh model and returns their completions.
    fn reference(
        preset: DevicePreset,
        capacity_bytes: Option<u64>,
        start_ns: u64,
        ios: &[(Op, u64, u64)],
    ) -> Vec<Completion> {
        let mut model = model(preset, capacity_bytes);
        for (id, &(op, offset_bytes, length_bytes)) in ios.iter().enumerate() {
            model.submit(
                start_ns,
                DeviceIo {
                    id: id as u64,
                    op,
                    offset_bytes,
                    length_bytes,
                    background: false,
                },
            );
        }
        let mut done = Vec::new();
        while let Some(event_ns) = model.next_event_ns() {
            model.advance(event_ns, &mut done);
            if done.len() == ios.len() {
                break;
            }
        }
        done.sort_by_key(|completion| completion.id);
        done
    }

    fn device(
        preset: DevicePreset,
        capacity_bytes: Option<u64>,
        inner: Arc<dyn BlockDevice>,
        clock: Arc<dyn Clock>,
        time_mode: TimeMode,
    ) -> LatencyDevice {
        LatencyDevice::new(inner, model(preset, capacity_bytes), clock).with_time_mode(time_mode)
    }

    #[test]
    fn one_read_takes_exactly_the_models_response_time() {
        for preset in [DevicePreset::X25e, DevicePreset::Savvio10k4] {
            for time_mode in [TimeMode::Virtual, TimeMode::Auto] {
                let start_ns = 5_000;
                let clock = Arc::new(ManualClock::new(start_ns));
                let memory = MemoryDevice::new("ram", BACKEND_BYTES);
                memory.write_at(8 << 20, &[0x42; 4096]).unwrap();
                let device = device(
                    preset,
                    Some(BACKEND_BYTES),
                    Arc::new(memory),
                    clock.clone(),
                    time_mode,
                );
                let mut buf = vec![0u8; 4096];
                device.read_at(8 << 20, &mut buf).unwrap();
                assert!(
                    buf.iter().all(|&b| b == 0x42),
                    "data comes from the inner device"
                );
                let expected = reference(
                    preset,
                    Some(BACKEND_BYTES),
                    start_ns,
                    &[(Op::Read, 8 << 20, 4096)],
                );
                let elapsed_ns = clock.now_ns() - start_ns;
                assert!(elapsed_ns > 0);
                assert_eq!(
                    elapsed_ns,
                    expected[0].response_ns(),
                    "{preset} {time_mode:?}"
                );
                assert_eq!(device.model_counters().reads, 1);
                assert!(
                    device.virtual_time(),
                    "a ManualClock is detected as virtual"
                );
            }
        }
    }

    /// Holds every read until `parties` reads are inside, so that all of
    /// them reached the model before anyone waits (same arrival time), and
    /// reports each entry so the test can start the next reader only then
    /// (a fixed submission order).
    struct Rendezvous {
        inner: MemoryDevice,
        entered: Mutex<mpsc::Sender<()>>,
        barrier: Barrier,
    }

    impl BlockDevice for Rendezvous {
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
            self.entered.lock().send(()).unwrap();
            self.barrier.wait();
            self.inner.read_at(offset_bytes, buf)
        }
        fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
            self.inner.write_at(offset_bytes, data)
        }
        fn flush(&self) -> DeviceResult<()> {
            Ok(())
        }
        fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
            self.inner.discard(offset_bytes, length_bytes)
        }
        fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
            self.inner.write_zeroes(offset_bytes, length_bytes)
        }
    }

    /// Timing of concurrent reads: what the device took, what the model run
    /// directly says for the same reads arriving together, and the longest
    /// any one read takes alone.
    struct Concurrent {
        elapsed_ns: u64,
        model_ns: u64,
        longest_alone_ns: u64,
        sum_alone_ns: u64,
    }

    /// 4 KiB reads at `offsets` from one thread each, all arriving at time 0
    /// in the order given, on the preset's full capacity (so the 64 MiB
    /// backend is spread over the whole disk).
    fn concurrent_reads(preset: DevicePreset, offsets: &[u64]) -> Concurrent {
        let clock = Arc::new(ManualClock::new(0));
        let (entered_sender, entered) = mpsc::channel();
        let inner = Rendezvous {
            inner: MemoryDevice::new("ram", BACKEND_BYTES),
            entered: Mutex::new(entered_sender),
            barrier: Barrier::new(offsets.len()),
        };
        let device = Arc::new(device(
            preset,
            None,
            Arc::new(inner),
            clock.clone(),
            TimeMode::Virtual,
        ));
        let mut handles = Vec::new();
        for &offset in offsets {
            let reader = Arc::clone(&device);
            handles.push(std::thread::spawn(move || {
                reader.read_at(offset, &mut [0u8; 4096]).unwrap()
            }));
            // This read is in the model before the next thread starts.
            entered.recv().unwrap();
        }
        for handle in handles {
            handle.join().unwrap();
        }
        let ios: Vec<(Op, u64, u64)> = offsets
            .iter()
            .map(|&offset| (Op::Read, device.model_range(offset, 4096).0, 4096))
            .collect();
        let last_done = |ios: &[(Op, u64, u64)]| {
            reference(preset, None, 0, ios)
                .iter()
                .map(|completion| completion.done_ns)
                .max()
                .unwrap()
        };
        let alone: Vec<u64> = ios.iter().map(|io| last_done(&[*io])).collect();
        Concurrent {
            elapsed_ns: clock.now_ns(),
            model_ns: last_done(&ios),
            longest_alone_ns: alone.iter().copied().max().unwrap(),
            sum_alone_ns: alone.iter().sum(),
        }
    }

    const SPREAD_OFFSETS: [u64; 4] = [40 << 20, 10 << 20, 60 << 20, 25 << 20];

    #[test]
    fn an_hdd_serves_concurrent_reads_one_after_the_other() {
        let run = concurrent_reads(DevicePreset::Savvio10k4, &SPREAD_OFFSETS);
        assert_eq!(run.elapsed_ns, run.model_ns);
        // One actuator: four reads queued together take far longer than the
        // slowest alone (each needs its own seek and rotation; a rotational
        // wait can hide part of the previous service, so not 4x).
        assert!(
            2 * run.elapsed_ns > 3 * run.longest_alone_ns,
            "together {} ns, longest alone {} ns",
            run.elapsed_ns,
            run.longest_alone_ns
        );
    }

    #[test]
    fn an_ssd_serves_concurrent_reads_in_parallel() {
        let run = concurrent_reads(DevicePreset::X25e, &SPREAD_OFFSETS);
        assert_eq!(run.elapsed_ns, run.model_ns);
        // Flash units work in parallel: far less than one after the other.
        assert!(
            4 * run.elapsed_ns < 3 * run.sum_alone_ns,
            "together {} ns, alone {} ns in sum",
            run.elapsed_ns,
            run.sum_alone_ns
        );
    }

    #[test]
    fn flush_costs_no_model_time_and_zeroing_is_capped() {
        let clock = Arc::new(ManualClock::new(0));
        let device = device(
            DevicePreset::X25e,
            Some(BACKEND_BYTES),
            Arc::new(MemoryDevice::new("ram", BACKEND_BYTES)),
            clock.clone(),
            TimeMode::Virtual,
        );
        device.flush().unwrap();
        assert_eq!(clock.now_ns(), 0);
        device.write_at(0, &[1; 8192]).unwrap();
        device.discard(0, 32 << 20).unwrap();
        device.write_zeroes(32 << 20, 3 << 20).unwrap();
        let counters = device.model_counters();
        assert_eq!(counters.writes, 3);
        assert_eq!(counters.write_bytes, 8192 + 2 * ZEROING_MODEL_BYTES_MAX);
        let mut buf = [0xFFu8; 16];
        device.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [0; 16]);
    }

    #[test]
    fn out_of_range_fails_at_once_and_never_reaches_the_model() {
        let clock = Arc::new(ManualClock::new(0));
        let device = device(
            DevicePreset::Savvio10k4,
            None,
            Arc::new(MemoryDevice::new("ram", BACKEND_BYTES)),
            clock.clone(),
            TimeMode::Virtual,
        );
        let error = device.read_at(BACKEND_BYTES, &mut [0u8; 1]).unwrap_err();
        assert_eq!(error.kind, DeviceErrorKind::OutOfRange);
        assert_eq!(clock.now_ns(), 0);
        assert_eq!(device.model_counters().ios(), 0);
    }

    #[test]
    fn offset_mapping_spreads_chunks_and_keeps_offsets_inside_them() {
        let capacity = DevicePreset::Savvio10k4.default_capacity_bytes();
        let device = LatencyDevice::new(
            Arc::new(MemoryDevice::new("ram", BACKEND_BYTES)),
            model(DevicePreset::Savvio10k4, None),
            Arc::new(ManualClock::new(0)),
        );
        // 64 MiB / 256 = 256 KiB chunks.
        let chunk = 256 << 10;
        assert_eq!(device.model_range(0, 4096), (0, 4096));
        assert_eq!(device.model_range(4096, 4096), (4096, 4096));
        let half = device.model_range(BACKEND_BYTES / 2, 4096).0;
        assert_eq!(half, capacity / 2);
        assert_eq!(device.model_range(BACKEND_BYTES / 2 + 100, 8).0, half + 100);
        let (last, length) = device.model_range(BACKEND_BYTES - 4096, 4096);
        assert_eq!(length, 4096);
        assert!(last + 4096 <= capacity);
        assert!(last > capacity - capacity / 200, "{last} of {capacity}");
        let next_chunk = device.model_range(chunk, 4096).0;
        let expected = u128::from(chunk) * u128::from(capacity) / u128::from(BACKEND_BYTES);
        assert_eq!(u128::from(next_chunk), expected);

        let identity = LatencyDevice::new(
            Arc::new(MemoryDevice::new("ram", BACKEND_BYTES)),
            model(DevicePreset::X25e, Some(BACKEND_BYTES / 2)),
            Arc::new(ManualClock::new(0)),
        )
        .with_offset_mapping(OffsetMapping::Identity);
        assert_eq!(identity.model_range(4096, 512), (4096, 512));
        // Beyond the smaller model: clamped to its last bytes.
        assert_eq!(
            identity.model_range(BACKEND_BYTES - 4096, 4096),
            (BACKEND_BYTES / 2 - 4096, 4096)
        );
        assert_eq!(proportional_chunk_bytes(1 << 40), 64 << 20);
        assert_eq!(proportional_chunk_bytes(1 << 20), 4 << 10);
        assert_eq!(proportional_chunk_bytes(0), 4 << 10);
    }

    #[test]
    fn real_clock_ops_never_return_before_the_model_says() {
        let clock = Arc::new(SystemClock::new());
        let device = Arc::new(device(
            DevicePreset::Memory,
            Some(BACKEND_BYTES),
            Arc::new(MemoryDevice::new("ram", BACKEND_BYTES)),
            clock.clone(),
            TimeMode::Auto,
        ));
        let single = reference(
            DevicePreset::Memory,
            Some(BACKEND_BYTES),
            0,
            &[(Op::Read, 0, 4096)],
        )[0]
        .response_ns();
        for _ in 0..20 {
            let before = clock.now_ns();
            device.read_at(0, &mut [0u8; 4096]).unwrap();
            assert!(clock.now_ns() - before >= single);
        }
        // Several threads at once: everyone finishes, every byte lands.
        let handles: Vec<_> = (0..4u8)
            .map(|thread| {
                let device = Arc::clone(&device);
                std::thread::spawn(move || {
                    for i in 0..25u64 {
                        let offset = (u64::from(thread) * 25 + i) * 4096;
                        device.write_at(offset, &[thread + 1; 4096]).unwrap();
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        for thread in 0..4u8 {
            let mut buf = [0u8; 4096];
            device
                .read_at(u64::from(thread) * 25 * 4096, &mut buf)
                .unwrap();
            assert!(buf.iter().all(|&b| b == thread + 1));
        }
        let counters = device.model_counters();
        assert_eq!(counters.reads, 24);
        assert_eq!(counters.writes, 100);
        assert!(
            !device.virtual_time(),
            "a moving clock is never taken for virtual"
        );
    }
}
