//! A simple, exactly predictable stand-in for tests and benchmarks: a
//! fixed-latency device. It follows the same trait and protocol as the real
//! models, so a test can compute by hand what the simulator must report.
//! (The FIFO page cache tests used is `tierd_policy::cache::fifo::Fifo`,
//! the one the simulator runs.)

use std::collections::VecDeque;

use tierd_device::{Completion, DeviceCounters, DeviceIo, DeviceModel};
use tierd_trace::Op;

/// A device with `servers` identical parallel servers; each IO takes
/// `read_ns`/`write_ns` plus `length / bytes_per_second`, in FIFO order.
pub struct FixedLatencyDevice {
    name: String,
    capacity_bytes: u64,
    read_ns: u64,
    write_ns: u64,
    bytes_per_second: u64,
    servers: usize,
    queue: VecDeque<(u64, DeviceIo)>,
    /// (done_ns, sequence, start_ns, arrival_ns, io)
    in_service: Vec<(u64, u64, u64, u64, DeviceIo)>,
    sequence: u64,
    busy_since_ns: Option<u64>,
    counters: DeviceCounters,
}

impl FixedLatencyDevice {
    /// `bytes_per_second` = 0 means transfer is free.
    pub fn new(name: &str, capacity_bytes: u64, read_ns: u64, write_ns: u64) -> Self {
        Self {
            name: name.to_string(),
            capacity_bytes,
            read_ns,
            write_ns,
            bytes_per_second: 0,
            servers: 1,
            queue: VecDeque::new(),
            in_service: Vec::new(),
            sequence: 0,
            busy_since_ns: None,
            counters: DeviceCounters::default(),
        }
    }

    pub fn with_bandwidth(mut self, bytes_per_second: u64) -> Self {
        self.bytes_per_second = bytes_per_second;
        self
    }

    pub fn with_servers(mut self, servers: usize) -> Self {
        self.servers = servers.max(1);
        self
    }

    /// Service time of `io` on this device.
    pub fn service_ns(&self, io: &DeviceIo) -> u64 {
        let base = match io.op {
            Op::Read => self.read_ns,
            Op::Write => self.write_ns,
        };
        let transfer = if self.bytes_per_second == 0 {
            0
        } else {
            (u128::from(io.length_bytes) * 1_000_000_000 / u128::from(self.bytes_per_second)) as u64
        };
        base + transfer
    }

    fn start(&mut self, now_ns: u64, arrival_ns: u64, io: DeviceIo) {
        if self.busy_since_ns.is_none() {
            self.busy_since_ns = Some(now_ns);
        }
        let done = now_ns + self.service_ns(&io);
        self.sequence += 1;
        self.in_service
            .push((done, self.sequence, now_ns, arrival_ns, io));
    }
}

impl DeviceModel for FixedLatencyDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn submit(&mut self, now_ns: u64, io: DeviceIo) {
        if self.in_service.len() < self.servers {
            self.start(now_ns, now_ns, io);
        } else {
            self.queue.push_back((now_ns, io));
        }
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.in_service.iter().map(|entry| entry.0).min()
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        while let Some((position, _)) = self
            .in_service
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.0 <= now_ns)
            .min_by_key(|(_, entry)| (entry.0, entry.1))
        {
            let (done_ns, _, start_ns, arrival_ns, io) = self.in_service.swap_remove(position);
            match io.op {
                Op::Read => {
                    self.counters.reads += 1;
                    self.counters.read_bytes += io.length_bytes;
                }
                Op::Write => {
                    self.counters.writes += 1;
                    self.counters.write_bytes += io.length_bytes;
                }
            }
            if io.background {
                self.counters.background_ios += 1;
            }
            self.counters.response_ns_total += done_ns - arrival_ns;
            self.counters.service_ns_total += done_ns - start_ns;
            done.push(Completion {
                id: io.id,
                arrival_ns,
                start_ns,
                done_ns,
                background: io.background,
                op: io.op,
                length_bytes: io.length_bytes,
            });
            if let Some((arrival, next)) = self.queue.pop_front() {
                self.start(done_ns, arrival, next);
            }
            if self.in_service.is_empty() {
                if let Some(since) = self.busy_since_ns.take() {
                    self.counters.busy_ns += done_ns - since;
                }
            }
        }
        if let Some(since) = self.busy_since_ns {
            if now_ns > since {
                self.counters.busy_ns += now_ns - since;
                self.busy_since_ns = Some(now_ns);
            }
        }
    }

    fn outstanding(&self) -> usize {
        self.in_service.len() + self.queue.len()
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(id: u64, op: Op) -> DeviceIo {
        DeviceIo {
            id,
            op,
            offset_bytes: 0,
            length_bytes: 4096,
            background: false,
        }
    }

    #[test]
    fn fixed_latency_serves_in_order_and_counts_busy_time() {
        let mut device = FixedLatencyDevice::new("d", 1 << 30, 100, 300);
        device.submit(0, io(1, Op::Read));
        device.submit(0, io(2, Op::Write));
        assert_eq!(device.next_event_ns(), Some(100));
        let mut done = Vec::new();
        device.advance(100, &mut done);
        assert_eq!(done.len(), 1);
        assert_eq!(device.next_event_ns(), Some(400));
        device.advance(1000, &mut done);
        assert_eq!(done[1].id, 2);
        assert_eq!(done[1].start_ns, 100);
        assert_eq!(done[1].response_ns(), 400);
        assert_eq!(device.counters().busy_ns, 400);
        assert_eq!(device.outstanding(), 0);
    }
}
