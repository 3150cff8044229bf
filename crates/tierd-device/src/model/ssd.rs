//! Flash SSD model (see `docs/devices/ssd.md`).
//!
//! A read passes three stages, each first-come first-served:
//! 1. the controller's command processing, one command at a time
//!    (`read_command_us`; its inverse is the random-read iops ceiling);
//! 2. one of `parallel_units` flash units (channels × dies), whichever frees
//!    first (`read_medium_us`);
//! 3. the host link, one transfer at a time (`length / read_rate_mb_s`).
//!
//! At QD1 a read takes the sum of the three; with more outstanding the units
//! work in parallel and iops rise until the slowest stage saturates.
//!
//! A write passes the controller (`write_command_us`) and then waits for room
//! in the write buffer; it completes `write_ack_us` plus its link transfer
//! after it is admitted. The buffer drains one write at a time, each taking
//! `write_program_us` (sustained random-write cost, garbage collection
//! included) or `length / write_rate_mb_s` for a write that continues the
//! previous one (sequential), whichever is longer for random writes. So short
//! bursts of writes are fast, sustained random writes settle at the
//! datasheet's random-write iops, and a write buffer of 0 makes every write
//! wait for its program.
//!
//! Stages are FIFO and deterministic, so an IO's completion time is known
//! when it is submitted: `submit` is `O(log units + log outstanding)`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use tierd_common::op::Op;

use super::hdd::{clamp_io, count_completion, positive, settings, ConfigError, Timed};
use super::{Completion, DeviceCounters, DeviceIo, DeviceModel, DevicePreset};

settings! {
    /// Every parameter of an SSD model (times in µs, rates in decimal MB/s).
    config SsdConfig;
    /// A partial [`SsdConfig`] for a tier file's `[tier.model]`.
    overrides SsdOverrides;
    {
        name: String,
        capacity_bytes: u64,
        /// Flash units working in parallel (channels × dies).
        parallel_units: u32,
        /// Serial command processing per read: 1 / this = read iops ceiling.
        read_command_us: f64,
        /// Flash read time on one unit.
        read_medium_us: f64,
        /// Host link rate for reads (sequential read bandwidth).
        read_rate_mb_s: f64,
        /// Serial command processing per write.
        write_command_us: f64,
        /// From admission to the write buffer to completion (link transfer
        /// added on top).
        write_ack_us: f64,
        /// Drain time per random write (sustained; 1 / this = random-write
        /// iops ceiling).
        write_program_us: f64,
        /// Drain rate for sequential writes (sequential write bandwidth).
        write_rate_mb_s: f64,
        /// Write buffer; 0 makes every write wait for its program.
        write_buffer_bytes: u64,
    }
}

impl SsdConfig {
    /// The preset's parameters, or `None` if `preset` is not an SSD.
    pub fn preset(preset: DevicePreset) -> Option<SsdConfig> {
        match preset {
            DevicePreset::X25e => Some(Self::x25e()),
            DevicePreset::P3700 => Some(Self::p3700()),
            _ => None,
        }
    }

    /// Intel X25-E 64 GB (SATA): ~75 µs read latency, 35k / 3.3k random
    /// 4 KiB read / write iops, 250 / 170 MB/s; 85 µs write latency.
    pub fn x25e() -> SsdConfig {
        let read_command_us = 1e6 / 35_000.0;
        let read_link_us = 4096.0 / 250.0;
        let write_command_us = 5.0;
        SsdConfig {
            name: "x25e".to_string(),
            capacity_bytes: 125_045_424 * 512,
            parallel_units: 10,
            read_command_us,
            read_medium_us: 75.0 - read_command_us - read_link_us,
            read_rate_mb_s: 250.0,
            write_command_us,
            write_ack_us: 85.0 - write_command_us - read_link_us,
            write_program_us: 1e6 / 3_300.0,
            write_rate_mb_s: 170.0,
            write_buffer_bytes: 1 << 20,
        }
    }

    /// Intel P3700 800 GB (NVMe): QD1 4 KiB random read 77.9 µs, 167k iops
    /// at QD16; 20 µs write latency, 90k random 4 KiB write iops, 2800 /
    /// 1900 MB/s.
    pub fn p3700() -> SsdConfig {
        let read_command_us = 1e6 / 167_000.0;
        let read_link_us = 4096.0 / 2_800.0;
        let write_command_us = 2.0;
        SsdConfig {
            name: "p3700".to_string(),
            capacity_bytes: 1_562_824_368 * 512,
            parallel_units: 16,
            read_command_us,
            read_medium_us: 77.9 - read_command_us - read_link_us,
            read_rate_mb_s: 2_800.0,
            write_command_us,
            write_ack_us: 20.0 - write_command_us - read_link_us,
            write_program_us: 1e6 / 90_000.0,
            write_rate_mb_s: 1_900.0,
            write_buffer_bytes: 64 << 20,
        }
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let device = self.name.as_str();
        if self.capacity_bytes == 0 {
            return Err(ConfigError::new(
                device,
                "capacity_bytes",
                "must be above zero",
            ));
        }
        if self.parallel_units == 0 || self.parallel_units > 65_536 {
            return Err(ConfigError::new(device, "parallel_units", "1 to 65536"));
        }
        for (key, value) in [
            ("read_command_us", self.read_command_us),
            ("read_medium_us", self.read_medium_us),
            ("write_command_us", self.write_command_us),
            ("write_ack_us", self.write_ack_us),
            ("write_program_us", self.write_program_us),
        ] {
            super::hdd::non_negative(device, key, value)?;
        }
        positive(device, "read_rate_mb_s", self.read_rate_mb_s)?;
        positive(device, "write_rate_mb_s", self.write_rate_mb_s)?;
        Ok(())
    }
}

/// Time with at least one IO outstanding, from `[arrival, done)` intervals
/// whose arrivals never decrease.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BusyTracker {
    closed_ns: u64,
    period_start_ns: u64,
    period_end_ns: u64,
}

impl BusyTracker {
    pub(crate) fn add(&mut self, arrival_ns: u64, done_ns: u64) {
        if arrival_ns > self.period_end_ns {
            self.closed_ns += self.period_end_ns - self.period_start_ns;
            self.period_start_ns = arrival_ns;
            self.period_end_ns = done_ns.max(arrival_ns);
        } else {
            self.period_end_ns = self.period_end_ns.max(done_ns);
        }
    }

    /// Busy time up to `clock_ns`.
    pub(crate) fn busy_ns(&self, clock_ns: u64) -> u64 {
        let open = clock_ns
            .min(self.period_end_ns)
            .saturating_sub(self.period_start_ns);
        self.closed_ns + open
    }
}

/// Completions known in advance, handed out in time order.
#[derive(Clone, Debug, Default)]
pub(crate) struct CompletionQueue {
    heap: BinaryHeap<Reverse<Timed>>,
    counters: DeviceCounters,
    busy: BusyTracker,
    clock_ns: u64,
    sequence: u64,
}

impl CompletionQueue {
    pub(crate) fn push(&mut self, io: &DeviceIo, arrival_ns: u64, start_ns: u64, done_ns: u64) {
        self.sequence += 1;
        self.clock_ns = self.clock_ns.max(arrival_ns);
        self.busy.add(arrival_ns, done_ns);
        self.heap.push(Reverse(Timed {
            completion: Completion {
                id: io.id,
                arrival_ns,
                start_ns,
                done_ns,
                background: io.background,
                op: io.op,
                length_bytes: io.length_bytes,
            },
            op: io.op,
            length_bytes: io.length_bytes,
            sequence: self.sequence,
        }));
    }

    pub(crate) fn next_event_ns(&self) -> Option<u64> {
        self.heap
            .peek()
            .map(|Reverse(timed)| timed.completion.done_ns)
    }

    pub(crate) fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        self.clock_ns = self.clock_ns.max(now_ns);
        while let Some(Reverse(timed)) = self.heap.peek() {
            if timed.completion.done_ns > now_ns {
                break;
            }
            let timed = *timed;
            self.heap.pop();
            count_completion(
                &mut self.counters,
                timed.op,
                timed.length_bytes,
                &timed.completion,
            );
            done.push(timed.completion);
        }
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.heap.len()
    }

    pub(crate) fn counters(&self) -> DeviceCounters {
        DeviceCounters {
            busy_ns: self.busy.busy_ns(self.clock_ns),
            ..self.counters
        }
    }
}

/// `n` identical servers; each job takes the one that frees first.
#[derive(Clone, Debug)]
pub(crate) struct ParallelUnits {
    free_at: BinaryHeap<Reverse<u64>>,
}

impl ParallelUnits {
    pub(crate) fn new(count: u32) -> ParallelUnits {
        ParallelUnits {
            free_at: (0..count.max(1)).map(|_| Reverse(0)).collect(),
        }
    }

    /// Runs a job that is ready at `ready_ns` and takes `duration_ns`;
    /// returns (start, end).
    pub(crate) fn run(&mut self, ready_ns: u64, duration_ns: u64) -> (u64, u64) {
        let free = self.free_at.peek().map_or(0, |Reverse(free)| *free);
        let start = ready_ns.max(free);
        let end = start + duration_ns;
        if let Some(mut top) = self.free_at.peek_mut() {
            *top = Reverse(end);
        }
        (start, end)
    }
}

fn us_to_ns(microseconds: f64) -> u64 {
    (microseconds * 1e3).round() as u64
}

/// Nanoseconds to move `bytes` at `megabytes_per_second`.
fn rate_ns(bytes: u64, megabytes_per_second: f64) -> u64 {
    (bytes as f64 * 1e3 / megabytes_per_second).round() as u64
}

/// An event-driven SSD (see the module docs).
#[derive(Clone, Debug)]
pub struct Ssd {
    config: SsdConfig,
    completions: CompletionQueue,
    units: ParallelUnits,
    command_free_ns: u64,
    link_free_ns: u64,
    drain_free_ns: u64,
    /// Buffered writes in drain order: (drain end, bytes).
    buffered: VecDeque<(u64, u64)>,
    buffered_bytes: u64,
    last_write_end_byte: u64,
    read_command_ns: u64,
    read_medium_ns: u64,
    write_command_ns: u64,
    write_ack_ns: u64,
    write_program_ns: u64,
}

impl Ssd {
    pub fn new(config: &SsdConfig) -> Result<Ssd, ConfigError> {
        config.validate()?;
        Ok(Ssd {
            completions: CompletionQueue::default(),
            units: ParallelUnits::new(config.parallel_units),
            command_free_ns: 0,
            link_free_ns: 0,
            drain_free_ns: 0,
            buffered: VecDeque::with_capacity(256),
            buffered_bytes: 0,
            last_write_end_byte: u64::MAX,
            read_command_ns: us_to_ns(config.read_command_us),
            read_medium_ns: us_to_ns(config.read_medium_us),
            write_command_ns: us_to_ns(config.write_command_us),
            write_ack_ns: us_to_ns(config.write_ack_us),
            write_program_ns: us_to_ns(config.write_program_us),
            config: config.clone(),
        })
    }

    /// The preset's model at its own capacity.
    pub fn preset(preset: DevicePreset) -> Option<Ssd> {
        SsdConfig::preset(preset).and_then(|config| Ssd::new(&config).ok())
    }

    pub fn config(&self) -> &SsdConfig {
        &self.config
    }

    /// Time for the buffer to take `bytes` at or after `ready_ns`.
    fn admit(&mut self, ready_ns: u64, bytes: u64) -> u64 {
        let mut admit_ns = ready_ns;
        loop {
            while let Some(&(drain_end, drained)) = self.buffered.front() {
                if drain_end > admit_ns {
                    break;
                }
                self.buffered.pop_front();
                self.buffered_bytes -= drained;
            }
            if self.buffered_bytes + bytes <= self.config.write_buffer_bytes {
                return admit_ns;
            }
            match self.buffered.front() {
                Some(&(drain_end, _)) => admit_ns = drain_end,
                None => return admit_ns,
            }
        }
    }
}

impl DeviceModel for Ssd {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn capacity_bytes(&self) -> u64 {
        self.config.capacity_bytes
    }

    fn submit(&mut self, now_ns: u64, io: DeviceIo) {
        let io = clamp_io(io, self.config.capacity_bytes);
        let length = io.length_bytes;
        let link_ns = rate_ns(length, self.config.read_rate_mb_s);
        match io.op {
            Op::Read => {
                let command_start = now_ns.max(self.command_free_ns);
                let command_end = command_start + self.read_command_ns;
                self.command_free_ns = command_end;
                let (_, medium_end) = self.units.run(command_end, self.read_medium_ns);
                let link_start = medium_end.max(self.link_free_ns);
                let done = link_start + link_ns;
                self.link_free_ns = done;
                self.completions.push(&io, now_ns, command_start, done);
            }
            Op::Write => {
                let command_start = now_ns.max(self.command_free_ns);
                let command_end = command_start + self.write_command_ns;
                self.command_free_ns = command_end;
                let sequential = io.offset_bytes == self.last_write_end_byte;
                self.last_write_end_byte = io.offset_bytes + length;
                let stream_ns = rate_ns(length, self.config.write_rate_mb_s);
                let drain_ns = if sequential {
                    stream_ns
                } else {
                    stream_ns.max(self.write_program_ns)
                };
                let buffered = length <= self.config.write_buffer_bytes;
                let admitted = if buffered {
                    self.admit(command_end, length)
                } else {
                    command_end
                };
                let drain_start = admitted.max(self.drain_free_ns);
                let drain_end = drain_start + drain_ns;
                self.drain_free_ns = drain_end;
                let done = if buffered {
                    self.buffered.push_back((drain_end, length));
                    self.buffered_bytes += length;
                    admitted + self.write_ack_ns + link_ns
                } else {
                    drain_end + link_ns
                };
                self.completions.push(&io, now_ns, command_start, done);
            }
        }
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.completions.next_event_ns()
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        self.completions.advance(now_ns, done);
    }

    fn outstanding(&self) -> usize {
        self.completions.outstanding()
    }

    fn counters(&self) -> DeviceCounters {
        self.completions.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_tracker_merges_overlapping_intervals() {
        let mut busy = BusyTracker::default();
        busy.add(0, 10);
        busy.add(5, 20);
        busy.add(30, 40);
        assert_eq!(busy.busy_ns(35), 25);
        assert_eq!(busy.busy_ns(100), 30);
    }

    #[test]
    fn parallel_units_take_the_first_free() {
        let mut units = ParallelUnits::new(2);
        assert_eq!(units.run(0, 10), (0, 10));
        assert_eq!(units.run(0, 10), (0, 10));
        assert_eq!(units.run(0, 10), (10, 20));
        assert_eq!(units.run(25, 10), (25, 35));
    }

    #[test]
    fn presets_give_the_datasheet_qd1_latency() {
        let x25e = SsdConfig::x25e();
        let total = x25e.read_command_us + x25e.read_medium_us + 4096.0 / x25e.read_rate_mb_s;
        assert!((total - 75.0).abs() < 1e-9);
        let p3700 = SsdConfig::p3700();
        let total = p3700.read_command_us + p3700.read_medium_us + 4096.0 / p3700.read_rate_mb_s;
        assert!((total - 77.9).abs() < 1e-9);
    }
}
