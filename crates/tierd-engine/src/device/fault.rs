//! A wrapper that injects faults: EIO on reads, writes or flushes with given
//! probabilities, extra delay, and a device that is gone.
//!
//! Every operation draws from one seeded generator, in a fixed order (first
//! "does it fail", then "is it delayed"), two draws per operation whatever
//! the configuration, so the same seed and the same sequence of operations
//! give the same faults. An injected error is returned before the inner device
//! is called: it never changes data. A delay is spent on the injected clock
//! before the operation runs (virtual time under a `ManualClock`).
//!
//! `discard` and `write_zeroes` change data, so they fail with the write
//! probability and count as failed writes. Out-of-range calls are reported
//! as such without drawing.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tierd_common::clock::Clock;
use tierd_common::rng::{Rng, SeededRng};

use super::{check_range, BlockDevice, DeviceError, DeviceErrorKind, DeviceResult, DeviceStats};

/// What to inject. Probabilities are per operation, in `[0, 1]` (values
/// outside act as the nearest bound; NaN never fires). Every key defaults to
/// 0 (no faults).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// A read fails with EIO.
    pub read_error_probability: f64,
    /// A write, discard or write-zeroes fails with EIO.
    pub write_error_probability: f64,
    /// A flush fails with EIO.
    pub flush_error_probability: f64,
    /// An operation is delayed by `delay_ns` before it runs.
    pub delay_probability: f64,
    pub delay_ns: u64,
}

/// Longest injected delay accepted by [`FaultConfig::validate`]: a longer one
/// would hold an IO (and a clean stop waiting for it) for good.
pub const MAX_DELAY_NS: u64 = 60_000_000_000;

impl FaultConfig {
    /// Checks the settings a configuration or a fault drill gives; `Err`
    /// names the key and what is allowed (the device itself tolerates
    /// anything, but a probability of 2 or NaN is a typo, not a drill).
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            ("read_error_probability", self.read_error_probability),
            ("write_error_probability", self.write_error_probability),
            ("flush_error_probability", self.flush_error_probability),
            ("delay_probability", self.delay_probability),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(format!(
                    "{key} = {value}: a probability must be from 0 to 1"
                ));
            }
        }
        if self.delay_ns > MAX_DELAY_NS {
            return Err(format!(
                "delay_ns = {}: at most {MAX_DELAY_NS} (60 s); a longer delay holds an IO, and a clean stop waiting for it, for good",
                self.delay_ns
            ));
        }
        Ok(())
    }
}

/// Faults injected so far, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FaultCounters {
    pub reads_failed: u64,
    /// Writes, discards and write-zeroes that failed.
    pub writes_failed: u64,
    pub flushes_failed: u64,
    pub delays: u64,
    /// Operations refused because the device was marked gone.
    pub gone_ops: u64,
}

#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
    Flush,
}

struct Injector {
    config: FaultConfig,
    rng: SeededRng,
}

/// Injects faults into the device it wraps (see the module docs).
pub struct FaultDevice {
    inner: Arc<dyn BlockDevice>,
    clock: Arc<dyn Clock>,
    injector: Mutex<Injector>,
    gone: AtomicBool,
    reads_failed: AtomicU64,
    writes_failed: AtomicU64,
    flushes_failed: AtomicU64,
    delays: AtomicU64,
    gone_ops: AtomicU64,
}

impl FaultDevice {
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        config: FaultConfig,
        seed: u64,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            inner,
            clock,
            injector: Mutex::new(Injector {
                config,
                rng: SeededRng::new(seed),
            }),
            gone: AtomicBool::new(false),
            reads_failed: AtomicU64::new(0),
            writes_failed: AtomicU64::new(0),
            flushes_failed: AtomicU64::new(0),
            delays: AtomicU64::new(0),
            gone_ops: AtomicU64::new(0),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }

    /// Replaces the configuration; the random stream continues.
    pub fn set_config(&self, config: FaultConfig) {
        self.lock_injector().config = config;
    }

    pub fn config(&self) -> FaultConfig {
        self.lock_injector().config.clone()
    }

    /// Marks the device gone (every operation fails with
    /// [`DeviceErrorKind::Gone`]) or back.
    pub fn set_gone(&self, gone: bool) {
        self.gone.store(gone, Ordering::SeqCst);
    }

    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    pub fn counters(&self) -> FaultCounters {
        FaultCounters {
            reads_failed: self.reads_failed.load(Ordering::Relaxed),
            writes_failed: self.writes_failed.load(Ordering::Relaxed),
            flushes_failed: self.flushes_failed.load(Ordering::Relaxed),
            delays: self.delays.load(Ordering::Relaxed),
            gone_ops: self.gone_ops.load(Ordering::Relaxed),
        }
    }

    fn lock_injector(&self) -> parking_lot::MutexGuard<'_, Injector> {
        // The generator state is valid whatever a panicking holder did.
        self.injector.lock()
    }

    fn error(
        &self,
        op: &'static str,
        offset_bytes: u64,
        length_bytes: u64,
        kind: DeviceErrorKind,
        message: &str,
    ) -> DeviceError {
        DeviceError {
            device: self.inner.name().to_string(),
            op,
            offset_bytes,
            length_bytes,
            kind,
            message: message.to_string(),
        }
    }

    /// Decides the fate of one operation: `Err` for an injected failure
    /// (counted), `Ok` to go ahead (after any injected delay).
    fn inject(
        &self,
        kind: Kind,
        op: &'static str,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> DeviceResult<()> {
        if self.is_gone() {
            self.gone_ops.fetch_add(1, Ordering::Relaxed);
            return Err(self.error(
                op,
                offset_bytes,
                length_bytes,
                DeviceErrorKind::Gone,
                "device is gone (fault injection)",
            ));
        }
        let (fail, delay_ns) = {
            let mut injector = self.lock_injector();
            let probability = match kind {
                Kind::Read => injector.config.read_error_probability,
                Kind::Write => injector.config.write_error_probability,
                Kind::Flush => injector.config.flush_error_probability,
            };
            let fail = injector.rng.chance(probability);
            let delay_probability = injector.config.delay_probability;
            let delayed = injector.rng.chance(delay_probability);
            (fail, delayed.then_some(injector.config.delay_ns))
        };
        if let Some(delay_ns) = delay_ns {
            self.delays.fetch_add(1, Ordering::Relaxed);
            self.clock.sleep_ns(delay_ns);
        }
        if fail {
            let counter = match kind {
                Kind::Read => &self.reads_failed,
                Kind::Write => &self.writes_failed,
                Kind::Flush => &self.flushes_failed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return Err(self.error(
                op,
                offset_bytes,
                length_bytes,
                DeviceErrorKind::Io(libc::EIO),
                "injected I/O error (EIO)",
            ));
        }
        Ok(())
    }
}

impl BlockDevice for FaultDevice {
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

    /// A device made to disappear has stopped serving, as a removed
    /// backing has: layers above that may answer from memory (a reduced
    /// tier) ask this before they do.
    fn failure(&self) -> Option<String> {
        if self.is_gone() {
            return Some(format!(
                "device {} is gone (injected fault)",
                self.inner.name()
            ));
        }
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
        self.inject(Kind::Read, "read", offset_bytes, length_bytes)?;
        self.inner.read_at(offset_bytes, buf)
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
        self.inject(Kind::Write, "write", offset_bytes, length_bytes)?;
        self.inner.write_at(offset_bytes, data)
    }

    /// Fails with the write probability, like any write.
    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        let length_bytes = data.len() as u64;
        check_range(
            self.name(),
            "write",
            offset_bytes,
            length_bytes,
            self.size_bytes(),
        )?;
        self.inject(Kind::Write, "write", offset_bytes, length_bytes)?;
        self.inner.write_at_durable(offset_bytes, data)
    }

    fn flush(&self) -> DeviceResult<()> {
        self.inject(Kind::Flush, "flush", 0, 0)?;
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
        self.inject(Kind::Write, "discard", offset_bytes, length_bytes)?;
        self.inner.discard(offset_bytes, length_bytes)
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        check_range(
            self.name(),
            "write_zeroes",
            offset_bytes,
            length_bytes,
            self.size_bytes(),
        )?;
        self.inject(Kind::Write, "write_zeroes", offset_bytes, length_bytes)?;
        self.inner.write_zeroes(offset_bytes, length_bytes)
    }

    /// The inner chain's counters (faults are in [`FaultDevice::counters`]).
    fn stats(&self) -> Option<DeviceStats> {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::memory::MemoryDevice;
    use tierd_common::clock::ManualClock;

    fn device(config: FaultConfig, seed: u64) -> (FaultDevice, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(0));
        let memory = MemoryDevice::new("ram", 1 << 20);
        memory.write_at(0, &[0x5A; 8192]).unwrap();
        let device = FaultDevice::new(Arc::new(memory), config, seed, clock.clone());
        (device, clock)
    }

    #[test]
    fn certain_failures_return_eio_and_change_nothing() {
        let (device, _clock) = device(
            FaultConfig {
                read_error_probability: 1.0,
                write_error_probability: 1.0,
                flush_error_probability: 1.0,
                ..FaultConfig::default()
            },
            7,
        );
        for _ in 0..100 {
            let mut buf = [0u8; 16];
            let error = device.read_at(0, &mut buf).unwrap_err();
            assert_eq!(error.kind, DeviceErrorKind::Io(libc::EIO));
            assert_eq!(error.errno(), libc::EIO);
            assert_eq!(buf, [0u8; 16], "a failed read fills nothing");
        }
        assert!(device.write_at(0, &[1; 4096]).is_err());
        assert!(device.discard(0, 4096).is_err());
        assert!(device.write_zeroes(4096, 4096).is_err());
        assert!(device.flush().is_err());
        let counters = device.counters();
        assert_eq!(counters.reads_failed, 100);
        assert_eq!(counters.writes_failed, 3);
        assert_eq!(counters.flushes_failed, 1);
        // The data underneath is untouched.
        let mut back = [0u8; 8192];
        device.inner().read_at(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0x5A));
        // Turning faults off makes the device work again.
        device.set_config(FaultConfig::default());
        device.write_at(0, &[1; 4096]).unwrap();
        device.read_at(0, &mut back[..4096]).unwrap();
        assert!(back[..4096].iter().all(|&b| b == 1));
    }

    #[test]
    fn half_probability_fails_about_half_and_is_reproducible() {
        let config = FaultConfig {
            read_error_probability: 0.5,
            ..FaultConfig::default()
        };
        let outcomes = |seed: u64| -> Vec<bool> {
            let (device, _clock) = device(config.clone(), seed);
            let mut buf = [0u8; 512];
            (0..10_000)
                .map(|i| device.read_at((i % 16) * 512, &mut buf).is_err())
                .collect()
        };
        let first = outcomes(42);
        let failures = first.iter().filter(|&&failed| failed).count();
        // Binomial(10000, 0.5): sd = 50; ±500 is 10 sd.
        assert!((4_500..=5_500).contains(&failures), "{failures} failures");
        assert_eq!(outcomes(42), first, "same seed, same faults");
        assert_ne!(outcomes(43), first, "another seed, other faults");
    }

    #[test]
    fn delays_move_the_injected_clock() {
        let (device, clock) = device(
            FaultConfig {
                delay_probability: 1.0,
                delay_ns: 2_000_000,
                ..FaultConfig::default()
            },
            1,
        );
        device.write_at(0, &[3; 512]).unwrap();
        device.flush().unwrap();
        assert_eq!(clock.now_ns(), 4_000_000);
        assert_eq!(device.counters().delays, 2);
    }

    #[test]
    fn gone_device_fails_everything_until_back() {
        let (device, _clock) = device(FaultConfig::default(), 1);
        device.set_gone(true);
        let mut buf = [0u8; 4];
        assert_eq!(
            device.read_at(0, &mut buf).unwrap_err().kind,
            DeviceErrorKind::Gone
        );
        assert_eq!(
            device.write_at(0, &buf).unwrap_err().kind,
            DeviceErrorKind::Gone
        );
        assert_eq!(device.flush().unwrap_err().kind, DeviceErrorKind::Gone);
        assert_eq!(device.counters().gone_ops, 3);
        device.set_gone(false);
        device.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [0x5A; 4]);
    }

    #[test]
    fn out_of_range_is_reported_as_such() {
        let (device, _clock) = device(
            FaultConfig {
                read_error_probability: 1.0,
                ..FaultConfig::default()
            },
            1,
        );
        let error = device.read_at(1 << 20, &mut [0u8; 1]).unwrap_err();
        assert_eq!(error.kind, DeviceErrorKind::OutOfRange);
        assert_eq!(device.counters().reads_failed, 0);
    }

    #[test]
    fn config_reads_from_toml_with_defaults_and_rejects_unknown_keys() {
        let config: FaultConfig = toml::from_str("read_error_probability = 0.25").unwrap();
        assert_eq!(config.read_error_probability, 0.25);
        assert_eq!(config.delay_ns, 0);
        let error = toml::from_str::<FaultConfig>("read_eror_probability = 0.25").unwrap_err();
        assert!(
            error.to_string().contains("read_eror_probability"),
            "{error}"
        );
    }
}
