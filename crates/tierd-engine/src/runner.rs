//! Real-time drivers of a [`Volume`]: one thread closes monitor periods and
//! runs the policy ([`Volume::tick`]); `copiers` threads copy migration
//! chunks ([`Volume::copy_step`]), so up to that many chunks are in flight
//! (`migration_chunks_in_flight` × `max_concurrent_moves`).
//!
//! Pacing is the shared move machine's (`tierd_core::moves`): after a chunk
//! that took `t` to copy, the move's next chunk starts `t × (1 − share) /
//! share` after it landed (so copying keeps the devices busy at most `share`
//! of the time), and no sooner than `max_rate` allows; a copier told to wait
//! sleeps until then. A cache volume also gets a writeback thread
//! ([`Volume::cache_step`]: timed commits, the end of a detach, one
//! writeback at a time, paced by the step). Deterministic tests drive the volume's methods
//! directly instead of these threads.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tierd_common::clock::Clock;

use crate::volume::{CacheStep, CopyBegun, StepOutcome, Volume};

struct Signal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Signal {
    /// Waits up to `duration_ns` (real time) or until stopped/woken. Returns
    /// true when stopped.
    fn wait(&self, duration_ns: u64) -> bool {
        let mut stopped = self.stopped.lock();
        if *stopped {
            return true;
        }
        self.wake
            .wait_for(&mut stopped, Duration::from_nanos(duration_ns));
        *stopped
    }
}

/// How often the tick thread looks at the tiers' backing files.
const BACKING_CHECK_NS: u64 = 1_000_000_000;

/// One complete line for a move that ended: segment, from, to, rule and
/// its numbers, bytes copied, duration and outcome.
fn log_move(volume: &Volume, segment: u32, finished: bool) {
    let record = volume
        .status()
        .recent_moves
        .into_iter()
        .rev()
        .find(|record| record.segment == segment);
    let Some(record) = record else {
        tracing::warn!(segment, "move ended; its record is gone");
        return;
    };
    let duration_ms = format!(
        "{:.1}",
        record.finished_ns.saturating_sub(record.started_ns) as f64 / 1e6
    );
    macro_rules! move_line {
        ($level:ident, $message:literal) => {
            tracing::$level!(
                segment,
                from = %record.from,
                to = %record.to,
                rule = %record.rule,
                detail = %record.detail,
                bytes = record.bytes_copied,
                duration_ms = %duration_ms,
                outcome = %record.outcome,
                $message
            )
        };
    }
    if finished {
        move_line!(info, "move finished");
    } else {
        move_line!(warn, "move failed; segment stays where it was");
    }
}

/// The running threads of one volume.
pub struct VolumeRunner {
    signal: Arc<Signal>,
    threads: Vec<JoinHandle<()>>,
}

impl VolumeRunner {
    pub fn start(volume: Arc<Volume>, clock: Arc<dyn Clock>, copiers: u32) -> VolumeRunner {
        let signal = Arc::new(Signal {
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        let mut threads = Vec::new();
        {
            let volume = volume.clone();
            let signal = signal.clone();
            let clock = clock.clone();
            let mut last_check_ns = 0u64;
            threads.push(
                std::thread::Builder::new()
                    .name(format!("tick-{}", volume.name()))
                    .spawn(move || {
                        let _volume =
                            tracing::info_span!("volume", volume = %volume.name()).entered();
                        loop {
                            // Check often enough to close periods on time and to
                            // stop promptly.
                            let wait_ns = (volume.period_ns() / 4).clamp(1_000_000, 100_000_000);
                            if signal.wait(wait_ns) {
                                break;
                            }
                            // About once a second: has a tier's file been
                            // truncated, deleted or replaced under us?
                            let now_ns = clock.now_ns();
                            if now_ns.saturating_sub(last_check_ns) >= BACKING_CHECK_NS {
                                last_check_ns = now_ns;
                                for (tier, reason) in volume.check_backings() {
                                    tracing::error!(
                                        tier = %tier,
                                        reason = %reason,
                                        "tier backing changed under the server"
                                    );
                                }
                            }
                            if let Err(error) = volume.tick() {
                                tracing::error!(error = %error, "policy period failed");
                            }
                            for event in volume.take_events() {
                                tracing::info!(event = %event, "pin");
                            }
                        }
                    })
                    .expect("spawn tick thread"),
            );
        }
        if volume.is_cache() {
            let signal = signal.clone();
            let volume = volume.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("writeback-{}", volume.name()))
                    .spawn(move || {
                        let _volume =
                            tracing::info_span!("volume", volume = %volume.name()).entered();
                        let mut failing = false;
                        loop {
                            let pause_ns = match volume.cache_step() {
                                Ok(CacheStep::Idle) => {
                                    failing = false;
                                    10_000_000
                                }
                                Ok(CacheStep::Busy) => 1_000_000,
                                Ok(CacheStep::Wrote { pause_ns, .. }) => {
                                    failing = false;
                                    pause_ns
                                }
                                Err(error) => {
                                    if !failing {
                                        tracing::error!(error = %error, "cache writeback or commit failed; retrying");
                                    }
                                    failing = true;
                                    100_000_000
                                }
                            };
                            if pause_ns > 0 {
                                if signal.wait(pause_ns) {
                                    break;
                                }
                            } else if *signal.stopped.lock() {
                                break;
                            }
                        }
                    })
                    .expect("spawn writeback thread"),
            );
        }
        for index in 0..copiers.max(1) {
            let signal = signal.clone();
            let volume = volume.clone();
            let clock = clock.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("copy-{}-{index}", volume.name()))
                    .spawn(move || {
                        let _volume =
                            tracing::info_span!("volume", volume = %volume.name()).entered();
                        loop {
                            let outcome = match volume.copy_begin() {
                                CopyBegun::Done(outcome) => outcome,
                                CopyBegun::Read(read) => {
                                    let _move =
                                        tracing::info_span!("move", segment = read.segment())
                                            .entered();
                                    volume.copy_end(read)
                                }
                            };
                            let pause_ns = match outcome {
                                StepOutcome::Idle => 20_000_000,
                                StepOutcome::Copied { .. } => 0,
                                // Another copier holds the work; look again soon.
                                StepOutcome::Waiting { until_ns: None } => 1_000_000,
                                StepOutcome::Waiting {
                                    until_ns: Some(until_ns),
                                } => until_ns
                                    .saturating_sub(clock.now_ns())
                                    .clamp(100_000, 100_000_000),
                                StepOutcome::Finished { segment } => {
                                    log_move(&volume, segment, true);
                                    0
                                }
                                StepOutcome::Failed { segment } => {
                                    log_move(&volume, segment, false);
                                    0
                                }
                            };
                            if pause_ns > 0 {
                                if signal.wait(pause_ns) {
                                    break;
                                }
                            } else if *signal.stopped.lock() {
                                break;
                            }
                        }
                    })
                    .expect("spawn copy thread"),
            );
        }
        VolumeRunner { signal, threads }
    }

    /// Wakes the copier (a move was queued).
    pub fn wake(&self) {
        self.signal.wake.notify_all();
    }

    /// Stops both threads and waits for them. A move in progress stays
    /// unfinished (its segment stays on its source; the move is not resumed).
    pub fn stop(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        *self.signal.stopped.lock() = true;
        self.signal.wake.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for VolumeRunner {
    fn drop(&mut self) {
        self.stop_threads();
    }
}
