//! The volume's monitor under IO from many threads: the periods the policy
//! reads are the ones a single `Monitor` fed the same IOs would build.

use std::sync::{Arc, Barrier};

use tierd_common::clock::{Clock, ManualClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_engine::device::memory::MemoryDevice;
use tierd_engine::meta::MetaStore;
use tierd_engine::volume::{StepOutcome, TierSpec, Volume, VolumeOptions};
use tierd_policy::monitor::Monitor;
use tierd_policy::{PolicyConfig, SegmentId, TierId};

const SEGMENT: u64 = 1 << 20;
const SEGMENTS: u64 = 8;
const PERIOD_NS: u64 = 1_000_000_000;
const THREADS: usize = 4;

/// One request of a thread: offset, length, write.
type Request = (u64, usize, bool);

fn requests(seed: u64, count: usize) -> Vec<Request> {
    let mut rng = SeededRng::new(seed);
    (0..count)
        .map(|_| {
            // Up to 192 KiB anywhere: some cross a segment boundary.
            let length = 512 * (1 + rng.below(384)) as usize;
            let offset = 512 * rng.below((SEGMENTS * SEGMENT - length as u64) / 512);
            (offset, length, rng.chance(0.5))
        })
        .collect()
}

#[test]
fn io_from_many_threads_gives_the_periods_of_one_monitor() {
    let dir = tempfile::tempdir().unwrap();
    let manual = Arc::new(ManualClock::new(0));
    let clock: Arc<dyn Clock> = manual.clone();
    let specs = vec![
        TierSpec {
            name: "fast".into(),
            device: Arc::new(MemoryDevice::new("fast", 2 * SEGMENT)),
            volatile: false,
            unsafe_volatile: false,
        },
        TierSpec {
            name: "home".into(),
            device: Arc::new(MemoryDevice::new("home", SEGMENTS * SEGMENT)),
            volatile: false,
            unsafe_volatile: false,
        },
    ];
    let options = VolumeOptions {
        name: "v".into(),
        size_bytes: SEGMENTS * SEGMENT,
        segment_bytes: SEGMENT,
        chunk_bytes: 64 << 10,
        period_ns: PERIOD_NS,
        checkpoint_every_periods: 1,
        policy: PolicyConfig::None,
        migration: Default::default(),
    };
    let volume = Arc::new(Volume::open(options, specs, dir.path(), clock).unwrap().0);
    for segment in [2, 5] {
        volume.request_move(segment, 0, "test").unwrap();
    }
    loop {
        match volume.copy_step() {
            StepOutcome::Idle => break,
            StepOutcome::Failed { segment } => panic!("move of segment {segment} failed"),
            _ => {}
        }
    }
    let placement = volume.placement();
    assert_eq!(placement[2], 0);
    // Period 0 holds the copies; the comparison starts with period 1.
    manual.advance_ns(PERIOD_NS);
    assert!(volume.tick().unwrap());

    let mut direct = Monitor::new(PERIOD_NS, 2, 0, 64);
    direct.close_period(&[0, 0]);
    let per_thread: Vec<Vec<Request>> = (0..THREADS)
        .map(|thread| requests(thread as u64, 400))
        .collect();
    for request in per_thread.iter().flatten() {
        // What the volume records: one piece per segment, the clock does
        // not move, so every response is 0.
        let (offset, length, is_write) = *request;
        let mut at = offset;
        let end = offset + length as u64;
        while at < end {
            let segment = (at / SEGMENT) as SegmentId;
            let piece = (SEGMENT - at % SEGMENT).min(end - at);
            let tier: TierId = placement[segment as usize];
            direct.record_user_io(segment, tier, is_write, piece, 0, false);
            at += piece;
        }
    }
    let per_thread = Arc::new(per_thread);
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|thread| {
            let volume = Arc::clone(&volume);
            let per_thread = Arc::clone(&per_thread);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let mut buffer = vec![0u8; 192 << 10];
                for &(offset, length, is_write) in &per_thread[thread] {
                    if is_write {
                        volume.write(offset, &buffer[..length], false).unwrap();
                    } else {
                        volume.read(offset, &mut buffer[..length]).unwrap();
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    // Status's view of the open period merges every thread's records.
    assert_eq!(volume.current_period(), direct.current());
    manual.advance_ns(PERIOD_NS);
    assert!(volume.tick().unwrap());
    // The memory tiers have no stats wrapper: busy 0 on both.
    let expected = direct.close_period(&[0, 0]).clone();
    assert!(expected.segments.len() == SEGMENTS as usize && expected.tiers[0].ios > 0);
    let (_, recovered) = MetaStore::open(dir.path()).unwrap();
    let history = recovered.checkpoint.unwrap().history;
    assert_eq!(history.last(), Some(&expected));
    // Nothing was left behind in a shard for the next period.
    assert!(volume.current_period().segments.is_empty());
}
