//! `Volume::read` / `Volume::write` throughput from several threads at once,
//! on a memory tier wrapped in `StatsDevice` as `tierd serve` builds it: what
//! the per-IO bookkeeping (the monitor's records, the device's counters and
//! busy time) costs when every connection's thread does it at the same time
//! (issue 12 §2). 4 KiB at random 4 KiB-aligned offsets of a 256 MiB volume
//! of 1 MiB segments, written once beforehand so no IO allocates; and 512 B
//! IOs in the first 4 KiB of every segment (cache-resident, so copying the
//! data costs little and the bookkeeping is most of each IO).
//!
//! `cargo bench -p tierd-engine --bench volume_io` runs 1, 2, 4 and 8
//! threads; one iteration is one IO on every thread, so the throughput
//! criterion prints is IOs per second over all threads. Under `cargo test`
//! (no `--bench` argument) criterion runs each benchmark once.
//!
//! `TIERD_BENCH_TIME=cpu` measures the process's CPU time (all threads)
//! instead of wall time, so the throughput is IOs per CPU-second: on a
//! shared machine whose other load decides how often the threads run at
//! the same time, what each IO costs (including spinning on a lock and
//! waiting for a cache line another core holds) is steadier than wall time.
//! Numbers: `BENCHMARKS.md`, "Per-IO counters without a shared lock".

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tierd_common::clock::{Clock, SystemClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_engine::device::memory::MemoryDevice;
use tierd_engine::device::stats::StatsDevice;
use tierd_engine::device::BlockDevice;
use tierd_engine::volume::{TierSpec, Volume, VolumeOptions};
use tierd_policy::PolicyConfig;

const VOLUME_BYTES: u64 = 256 << 20;
const SEGMENT_BYTES: u64 = 1 << 20;

fn thread_counts() -> &'static [usize] {
    if std::env::args().any(|argument| argument == "--bench") {
        &[1, 2, 4, 8]
    } else {
        &[2]
    }
}

fn memory_volume(meta: &std::path::Path) -> Arc<Volume> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let ram: Arc<dyn BlockDevice> = Arc::new(StatsDevice::new(
        Arc::new(MemoryDevice::new("ram", VOLUME_BYTES)),
        clock.clone(),
    ));
    let options = VolumeOptions {
        name: "bench".into(),
        size_bytes: VOLUME_BYTES,
        segment_bytes: SEGMENT_BYTES,
        chunk_bytes: 256 << 10,
        period_ns: 60_000_000_000,
        checkpoint_every_periods: 1,
        policy: PolicyConfig::None,
        migration: Default::default(),
    };
    let tiers = vec![TierSpec {
        name: "ram".into(),
        device: ram,
        volatile: false,
        unsafe_volatile: false,
    }];
    let volume = Volume::open(options, tiers, meta, clock).unwrap().0;
    let fill = vec![0x5a_u8; 1 << 20];
    for offset in (0..VOLUME_BYTES).step_by(fill.len()) {
        volume.write(offset, &fill, false).unwrap();
    }
    Arc::new(volume)
}

/// CPU time of the whole process (every thread), in ns.
fn process_cpu_ns() -> u64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, writable timespec for the call's duration.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut time) };
    assert_eq!(result, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed");
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

fn cpu_time() -> bool {
    match std::env::var("TIERD_BENCH_TIME").as_deref() {
        Ok("cpu") => true,
        Ok("wall") | Err(_) => false,
        Ok(other) => panic!("TIERD_BENCH_TIME={other}: use wall (the default) or cpu"),
    }
}

/// What each IO of a run is.
#[derive(Clone, Copy)]
struct Shape {
    write: bool,
    block_bytes: usize,
    /// Anywhere in the volume, or only in the first 4 KiB of a segment.
    hot: bool,
}

/// Runs `iterations` IOs on each of `threads` threads, all started together;
/// returns the wall time from start to the last thread's end, or the CPU
/// time the process spent meanwhile.
fn run(volume: &Arc<Volume>, threads: usize, iterations: u64, shape: Shape) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let volume = Arc::clone(volume);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut rng = SeededRng::new(thread as u64);
                let block_bytes = shape.block_bytes as u64;
                let mut buffer = vec![0x33_u8; shape.block_bytes];
                let (blocks, hot_blocks) = (VOLUME_BYTES / block_bytes, 4096 / block_bytes);
                barrier.wait();
                for _ in 0..iterations {
                    let offset = if shape.hot {
                        rng.below(VOLUME_BYTES / SEGMENT_BYTES) * SEGMENT_BYTES
                            + rng.below(hot_blocks) * block_bytes
                    } else {
                        rng.below(blocks) * block_bytes
                    };
                    if shape.write {
                        volume.write(offset, &buffer, false).unwrap();
                    } else {
                        volume.read(offset, &mut buffer).unwrap();
                    }
                }
                black_box(&buffer);
            })
        })
        .collect();
    let clock = SystemClock::new();
    let cpu = cpu_time();
    let now_ns = || {
        if cpu {
            process_cpu_ns()
        } else {
            clock.now_ns()
        }
    };
    barrier.wait();
    let started_ns = now_ns();
    for handle in handles {
        handle.join().unwrap();
    }
    Duration::from_nanos(now_ns() - started_ns)
}

fn volume_io(criterion: &mut Criterion) {
    let meta = tempfile::tempdir().unwrap();
    let volume = memory_volume(meta.path());
    let shapes = [
        ("read_4k", false, 4096, false),
        ("write_4k", true, 4096, false),
        ("read_512_hot", false, 512, true),
        ("write_512_hot", true, 512, true),
    ];
    for (name, write, block_bytes, hot) in shapes {
        let shape = Shape {
            write,
            block_bytes,
            hot,
        };
        let mut group = criterion.benchmark_group(format!("volume_io/{name}"));
        group.measurement_time(Duration::from_secs(3));
        group.warm_up_time(Duration::from_millis(500));
        for &threads in thread_counts() {
            group.throughput(Throughput::Elements(threads as u64));
            group.bench_with_input(
                BenchmarkId::from_parameter(format!("{threads}threads")),
                &threads,
                |bencher, &threads| {
                    bencher.iter_custom(|iterations| run(&volume, threads, iterations, shape))
                },
            );
        }
        group.finish();
    }
}

criterion_group!(benches, volume_io);
criterion_main!(benches);
