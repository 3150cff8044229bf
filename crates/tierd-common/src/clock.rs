//! Injected time.
//!
//! All tierd time is nanoseconds on a monotonic timeline whose origin the clock
//! chooses. Code that needs "now" takes a `&dyn Clock`; the live server passes a
//! [`SystemClock`], the simulator and tests pass a [`ManualClock`] they advance.

use std::sync::atomic::{AtomicU64, Ordering};

/// A source of monotonic time in nanoseconds.
///
/// Implementations MUST be monotonic: two calls on the same clock never return a
/// smaller value the second time.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now_ns(&self) -> u64;

    /// Waits `duration_ns` on this clock's timeline: a real sleep on
    /// [`SystemClock`], an instant jump forward on [`ManualClock`] (so code
    /// that paces or emulates latency runs in virtual time under test).
    fn sleep_ns(&self, duration_ns: u64);

    /// Wall time: nanoseconds since the Unix epoch, on this clock's timeline
    /// (it advances exactly as [`Clock::now_ns`] does). For what must mean
    /// the same across restarts, e.g. an operator's pin expiry. The default
    /// takes `now_ns` as Unix time, which is what a [`ManualClock`] in a test
    /// means by it; [`SystemClock`] adds the OS wall time at its creation.
    fn unix_now_ns(&self) -> u64 {
        self.now_ns()
    }
}

/// Wall time from the OS, measured from the moment the clock was created.
///
/// This is the one place in tierd allowed to read the OS clock.
#[derive(Debug)]
pub struct SystemClock {
    #[allow(clippy::disallowed_types)] // the one sanctioned OS-clock origin
    origin: std::time::Instant,
    /// OS wall time at `origin`, in ns since the Unix epoch.
    origin_unix_ns: u64,
}

impl SystemClock {
    #[allow(clippy::disallowed_methods, clippy::disallowed_types)] // the single sanctioned OS-clock read
    pub fn new() -> Self {
        let origin_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
            });
        Self {
            origin: std::time::Instant::now(),
            origin_unix_ns,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn unix_now_ns(&self) -> u64 {
        self.origin_unix_ns.saturating_add(self.now_ns())
    }

    #[allow(clippy::disallowed_methods)] // the single sanctioned OS sleep
    fn sleep_ns(&self, duration_ns: u64) {
        if duration_ns > 0 {
            std::thread::sleep(std::time::Duration::from_nanos(duration_ns));
        }
    }
}

/// A clock that only moves when told to: virtual time for the simulator and
/// deterministic tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ns: AtomicU64,
}

impl ManualClock {
    pub fn new(start_ns: u64) -> Self {
        Self {
            now_ns: AtomicU64::new(start_ns),
        }
    }

    /// Moves the clock forward by `delta_ns`.
    pub fn advance_ns(&self, delta_ns: u64) {
        self.now_ns.fetch_add(delta_ns, Ordering::SeqCst);
    }

    /// Moves the clock to `time_ns`. Panics if that would move time backwards,
    /// because a clock that goes back breaks every period computation above it.
    pub fn set_ns(&self, time_ns: u64) {
        let previous_ns = self.now_ns.swap(time_ns, Ordering::SeqCst);
        assert!(
            time_ns >= previous_ns,
            "ManualClock moved backwards: {previous_ns} -> {time_ns}"
        );
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::SeqCst)
    }

    fn sleep_ns(&self, duration_ns: u64) {
        self.advance_ns(duration_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(5);
        assert_eq!(clock.now_ns(), 5);
        clock.advance_ns(10);
        assert_eq!(clock.now_ns(), 15);
        clock.set_ns(100);
        assert_eq!(clock.now_ns(), 100);
        clock.sleep_ns(7);
        assert_eq!(clock.now_ns(), 107);
    }

    #[test]
    #[should_panic(expected = "moved backwards")]
    fn manual_clock_refuses_to_go_back() {
        let clock = ManualClock::new(50);
        clock.set_ns(49);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let first_ns = clock.now_ns();
        let second_ns = clock.now_ns();
        assert!(second_ns >= first_ns);
    }
}
