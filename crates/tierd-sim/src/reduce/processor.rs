//! The reduction workers as a queueing server in virtual time
//! (`docs/devices/processor.md`).
//!
//! `workers` identical workers take jobs from one
//! [`tierd_core::reduce::WorkQueue`]: foreground jobs (a user waits: an
//! inline reduction, a stage store) before background ones (reducing a
//! staged block), first in first out within each, not preemptive (or, for
//! comparison, all in arrival order: [`QueueOrder::Fifo`]). A job's
//! service time is the caller's (from [`super::cost::ReductionCosts`]);
//! the model decides when it starts and ends.
//!
//! Protocol, as [`tierd_device::DeviceModel`]'s: `now_ns` never decreases
//! across calls; after `submit` or `advance`, come back with `advance(t)`
//! no later than [`Processor::next_event_ns`]; `advance(now)` appends every
//! job finished at or before `now`, in finishing order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tierd_core::reduce::{QueueOrder, Urgency, WorkQueue};

/// One piece of work for a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// The caller's id, returned when the job is done.
    pub id: u64,
    pub urgency: Urgency,
    /// Worker time the job takes once it starts.
    pub service_ns: u64,
}

/// A finished job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobDone {
    pub id: u64,
    pub urgency: Urgency,
    pub arrival_ns: u64,
    /// When a worker took it (after queueing).
    pub start_ns: u64,
    pub done_ns: u64,
}

impl JobDone {
    /// Queueing plus service.
    pub fn response_ns(&self) -> u64 {
        self.done_ns - self.arrival_ns
    }

    pub fn service_ns(&self) -> u64 {
        self.done_ns - self.start_ns
    }
}

#[derive(Clone, Copy, Debug)]
struct Waiting {
    job: Job,
    arrival_ns: u64,
}

/// Running jobs, ordered by end time then start order (ties finish in the
/// order they started: deterministic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Running {
    done_ns: u64,
    sequence: u64,
    start_ns: u64,
    arrival_ns: u64,
    id: u64,
    foreground: bool,
}

/// The reduction workers (see the module docs).
#[derive(Clone, Debug)]
pub struct Processor {
    workers: u32,
    queue: WorkQueue<Waiting>,
    running: BinaryHeap<Reverse<Running>>,
    sequence: u64,
    clock_ns: u64,
    /// Service time of finished jobs.
    busy_ns: u64,
    done_jobs: u64,
}

impl Processor {
    /// `workers` reduction workers (at least one), foreground work first.
    pub fn new(workers: u32) -> Processor {
        Processor::with_order(workers, QueueOrder::ForegroundFirst)
    }

    /// `workers` reduction workers taking work in `order`.
    pub fn with_order(workers: u32, order: QueueOrder) -> Processor {
        Processor {
            workers: workers.max(1),
            queue: WorkQueue::with_order(order),
            running: BinaryHeap::new(),
            sequence: 0,
            clock_ns: 0,
            busy_ns: 0,
            done_jobs: 0,
        }
    }

    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// A job arrives at `now_ns`; a free worker takes it at once.
    pub fn submit(&mut self, now_ns: u64, job: Job) {
        debug_assert!(now_ns >= self.clock_ns, "time went back");
        self.clock_ns = self.clock_ns.max(now_ns);
        self.queue.push(
            job.urgency,
            Waiting {
                job,
                arrival_ns: now_ns,
            },
        );
        self.start_waiting(now_ns);
    }

    /// When the next running job ends, if any runs.
    pub fn next_event_ns(&self) -> Option<u64> {
        self.running.peek().map(|Reverse(running)| running.done_ns)
    }

    /// Moves to `now_ns`: every job that ends by then is appended to `done`;
    /// each worker it frees takes the next queued job at that moment.
    pub fn advance(&mut self, now_ns: u64, done: &mut Vec<JobDone>) {
        self.clock_ns = self.clock_ns.max(now_ns);
        while let Some(Reverse(running)) = self.running.peek().copied() {
            if running.done_ns > now_ns {
                break;
            }
            self.running.pop();
            self.busy_ns += running.done_ns - running.start_ns;
            self.done_jobs += 1;
            done.push(JobDone {
                id: running.id,
                urgency: if running.foreground {
                    Urgency::Foreground
                } else {
                    Urgency::Background
                },
                arrival_ns: running.arrival_ns,
                start_ns: running.start_ns,
                done_ns: running.done_ns,
            });
            self.start_waiting(running.done_ns);
        }
    }

    fn start_waiting(&mut self, now_ns: u64) {
        while self.running.len() < self.workers as usize {
            let Some((urgency, waiting)) = self.queue.pop() else {
                break;
            };
            self.sequence += 1;
            self.running.push(Reverse(Running {
                done_ns: now_ns + waiting.job.service_ns,
                sequence: self.sequence,
                start_ns: now_ns,
                arrival_ns: waiting.arrival_ns,
                id: waiting.job.id,
                foreground: urgency == Urgency::Foreground,
            }));
        }
    }

    /// Jobs submitted and not yet done (waiting or running).
    pub fn outstanding(&self) -> usize {
        self.queue.len() + self.running.len()
    }

    /// Jobs of `urgency` waiting for a worker.
    pub fn waiting(&self, urgency: Urgency) -> usize {
        self.queue.waiting(urgency)
    }

    /// Worker time of every finished job.
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns
    }

    pub fn done_jobs(&self) -> u64 {
        self.done_jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, urgency: Urgency, service_ns: u64) -> Job {
        Job {
            id,
            urgency,
            service_ns,
        }
    }

    fn drain(processor: &mut Processor) -> Vec<JobDone> {
        let mut done = Vec::new();
        while let Some(at) = processor.next_event_ns() {
            processor.advance(at, &mut done);
        }
        done
    }

    /// Two workers, service times 10/20/30/40: the first two start at once,
    /// the third takes the worker that frees first (at 10), the fourth the
    /// one that frees next (at 20): ends 10, 20, 40, 60.
    #[test]
    fn workers_serve_fifo_with_known_service_times() {
        let mut processor = Processor::new(2);
        for (id, service_ns) in [(1, 10), (2, 20), (3, 30), (4, 40)] {
            processor.submit(0, job(id, Urgency::Foreground, service_ns));
        }
        assert_eq!(processor.outstanding(), 4);
        assert_eq!(processor.waiting(Urgency::Foreground), 2);
        let done = drain(&mut processor);
        let ends: Vec<(u64, u64, u64)> = done
            .iter()
            .map(|job| (job.id, job.start_ns, job.done_ns))
            .collect();
        assert_eq!(ends, [(1, 0, 10), (2, 0, 20), (3, 10, 40), (4, 20, 60)]);
        assert_eq!(done[3].response_ns(), 60);
        assert_eq!(done[3].service_ns(), 40);
        assert_eq!(processor.busy_ns(), 100);
        assert_eq!(processor.outstanding(), 0);
    }

    /// One worker busy with a background job: a later foreground job waits
    /// for it (no preemption) but overtakes the background jobs queued
    /// before it.
    #[test]
    fn foreground_jobs_overtake_queued_background_jobs() {
        let mut processor = Processor::new(1);
        processor.submit(0, job(1, Urgency::Background, 100));
        processor.submit(0, job(2, Urgency::Background, 100));
        processor.submit(50, job(3, Urgency::Foreground, 10));
        let done = drain(&mut processor);
        let order: Vec<(u64, u64, u64)> = done
            .iter()
            .map(|job| (job.id, job.start_ns, job.done_ns))
            .collect();
        assert_eq!(order, [(1, 0, 100), (3, 100, 110), (2, 110, 210)]);
        assert_eq!(done[1].response_ns(), 60, "waited 50 for the running job");
        assert_eq!(done[1].urgency, Urgency::Foreground);

        // In arrival order the foreground job waits for both.
        let mut processor = Processor::with_order(1, QueueOrder::Fifo);
        processor.submit(0, job(1, Urgency::Background, 100));
        processor.submit(0, job(2, Urgency::Background, 100));
        processor.submit(50, job(3, Urgency::Foreground, 10));
        let done = drain(&mut processor);
        assert_eq!(done[2].id, 3);
        assert_eq!(done[2].response_ns(), 160);
    }

    /// M/D/1 at 50 % utilisation: mean response = service × (1 + ρ / (2(1 − ρ)))
    /// = 1.5 × service (Pollaczek–Khinchine), within 3 % over 200 000 jobs.
    #[test]
    fn poisson_arrivals_queue_as_pollaczek_khinchine_says() {
        use tierd_common::rng::{Rng, SeededRng};
        let mut rng = SeededRng::new(7);
        let mut processor = Processor::new(1);
        let service_ns = 10_000u64;
        let mut now_ns = 0u64;
        let mut done = Vec::new();
        for id in 0..200_000 {
            now_ns += rng.exponential(2.0 * service_ns as f64).round() as u64;
            while let Some(at) = processor.next_event_ns().filter(|&at| at <= now_ns) {
                processor.advance(at, &mut done);
            }
            processor.submit(now_ns, job(id, Urgency::Foreground, service_ns));
        }
        done.extend(drain(&mut processor));
        let mean = done.iter().map(|job| job.response_ns() as f64).sum::<f64>() / done.len() as f64;
        let expected = 1.5 * service_ns as f64;
        assert!(
            (mean / expected - 1.0).abs() < 0.03,
            "mean {mean} vs {expected}"
        );
    }
}
