//! Device-model throughput: requests per second through each preset's
//! `submit` / `next_event_ns` / `advance`, the calls the simulator makes per
//! request. The workload is MSR-like: 70% reads, sizes 4–64 KiB, 40% of
//! requests continue one of 16 sequential runs, the rest land in a 16 GiB
//! hot region (60%) or anywhere; requests arrive open loop with exponential
//! gaps sized to keep each device about 70% busy, so queues form and the
//! HDD's SPTF window, the SMR's cleaning and the SSD's buffer all work.
//!
//! `cargo bench -p tierd-device --bench models` runs 200,000 requests per
//! preset. Under `cargo test` (no `--bench` argument) criterion runs each
//! benchmark once on 2,000 requests, so the bench does not rot.
//!
//! Measured (shared 2-vCPU VM, load average 4–6 from other builds, so ±30%):
//!
//! | preset | requests/s |
//! |---|---|
//! | savvio10k4 | 1.4–2.1 M |
//! | cheetah15k7 | 1.8 M |
//! | constellation2 | 1.0 M |
//! | x25e | 12 M |
//! | p3700 | 9.0 M |
//! | memory | 9.0 M |
//! | archive8tb | 2.4–4.5 M |
//!
//! The disks are the slow ones because this workload keeps them saturated:
//! SPTF then estimates all 32 commands of the NCQ window at every dispatch.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tierd_common::op::Op;
use tierd_common::rng::{Rng, SeededRng};
use tierd_device::{Completion, DeviceIo, DeviceModel, DevicePreset};

/// Whether criterion was started by `cargo bench` rather than `cargo test`.
fn full_size() -> bool {
    std::env::args().any(|argument| argument == "--bench")
}

/// (arrival, io) pairs for a device of `capacity` bytes with a mean gap.
fn workload(count: usize, capacity: u64, mean_gap_ns: f64) -> Vec<(u64, DeviceIo)> {
    let mut rng = SeededRng::new(7);
    let hot = capacity.min(16 << 30);
    let mut runs: Vec<u64> = (0..16)
        .map(|_| rng.below(capacity / 2) / 4096 * 4096)
        .collect();
    let mut arrival = 0u64;
    (0..count as u64)
        .map(|id| {
            let length = [4096u64, 4096, 8192, 16384, 65536][rng.below(5) as usize];
            let offset = if rng.chance(0.4) {
                let run = &mut runs[rng.below(16) as usize];
                let offset = *run;
                *run = (*run + length) % (capacity - (1 << 20));
                offset
            } else if rng.chance(0.6) {
                rng.below(hot / 4096) * 4096
            } else {
                rng.below((capacity - (1 << 20)) / 4096) * 4096
            };
            arrival += rng.exponential(mean_gap_ns) as u64;
            let op = if rng.chance(0.7) { Op::Read } else { Op::Write };
            (
                arrival,
                DeviceIo {
                    id,
                    op,
                    offset_bytes: offset,
                    length_bytes: length,
                    background: false,
                },
            )
        })
        .collect()
}

/// Replays `requests` open loop the way the simulator's event loop does.
fn replay(
    model: &mut dyn DeviceModel,
    requests: &[(u64, DeviceIo)],
    done: &mut Vec<Completion>,
) -> u64 {
    let mut completed = 0u64;
    let mut next = 0usize;
    loop {
        let arrival = requests.get(next).map(|(time, _)| *time);
        match (arrival, model.next_event_ns()) {
            (Some(time), event) if event.is_none_or(|event| time <= event) => {
                model.submit(time, requests[next].1);
                next += 1;
            }
            (_, Some(event)) => {
                model.advance(event, done);
                completed += done.len() as u64;
                done.clear();
            }
            (None, None) => break,
            (Some(_), None) => unreachable!("the first arm takes it"),
        }
        if next == requests.len() && model.outstanding() == 0 {
            break;
        }
    }
    completed
}

fn models(criterion: &mut Criterion) {
    let count = if full_size() { 200_000 } else { 2_000 };
    let mut group = criterion.benchmark_group("models");
    group.throughput(Throughput::Elements(count as u64));
    group.sample_size(10);
    for preset in DevicePreset::ALL {
        let capacity = preset.default_capacity_bytes();
        // Gaps for ~70% utilisation at the workload's mean service time.
        let mean_gap_ns = match preset {
            DevicePreset::Savvio10k4 | DevicePreset::Constellation2 | DevicePreset::Wd1200jb => 4e6,
            DevicePreset::Cheetah15k7 => 3e6,
            DevicePreset::Archive8tb => 12e6,
            DevicePreset::X25e => 400e3,
            DevicePreset::P3700 => 15e3,
            DevicePreset::Memory => 3e3,
        };
        let requests = workload(count, capacity, mean_gap_ns);
        group.bench_function(preset.name(), |bencher| {
            let mut done = Vec::with_capacity(64);
            bencher.iter_batched(
                || preset.build(None, 1).expect("preset builds"),
                |mut model| {
                    let completed = replay(model.as_mut(), &requests, &mut done);
                    assert_eq!(completed, count as u64);
                    black_box(model.counters())
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, models);
criterion_main!(benches);
