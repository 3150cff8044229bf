//! Volume behaviour: routing, split requests, online migration under
//! concurrent IO, durability of placement across a crash, warm restart,
//! refusal of damaged metadata.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tierd_common::clock::{Clock, ManualClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_engine::device::memory::MemoryDevice;
use tierd_engine::device::{BlockDevice, DeviceResult};
use tierd_engine::meta::MetaStore;
use tierd_engine::volume::{StepOutcome, TierSpec, Volume, VolumeOptions};
use tierd_policy::PolicyConfig;

const SEGMENT: u64 = 1 << 20;
const CHUNK: u64 = 64 << 10;

struct Stack {
    fast: Arc<MemoryDevice>,
    home: Arc<MemoryDevice>,
    fast_volatile: bool,
}

impl Stack {
    fn new(fast_segments: u64, segments: u64, fast_volatile: bool) -> Stack {
        Stack {
            fast: Arc::new(MemoryDevice::new("fast", fast_segments * SEGMENT)),
            home: Arc::new(MemoryDevice::new("home", segments * SEGMENT)),
            fast_volatile,
        }
    }

    fn specs(&self) -> Vec<TierSpec> {
        vec![
            tier("fast", self.fast.clone(), self.fast_volatile),
            // Stands in for a durable file: tests keep the same device
            // across a "crash" to model what survives it.
            tier("home", self.home.clone(), false),
        ]
    }

    /// What survives a crash: home, and a non-volatile fast tier; a volatile
    /// one comes back empty.
    fn crash(&mut self) {
        if self.fast_volatile {
            self.fast = Arc::new(MemoryDevice::new("fast", self.fast.size_bytes()));
        }
    }
}

fn options(segments: u64, policy: PolicyConfig) -> VolumeOptions {
    VolumeOptions {
        name: "v".into(),
        size_bytes: segments * SEGMENT,
        segment_bytes: SEGMENT,
        chunk_bytes: CHUNK,
        period_ns: 1_000_000_000,
        checkpoint_every_periods: 1,
        policy,
        migration: Default::default(),
    }
}

/// A tier of a test stack (`volatile`: a write-through RAM tier).
fn tier(name: &str, device: Arc<dyn BlockDevice>, volatile: bool) -> TierSpec {
    TierSpec {
        name: name.into(),
        device,
        volatile,
        unsafe_volatile: false,
    }
}

fn open(stack: &Stack, segments: u64, meta: &std::path::Path, clock: Arc<dyn Clock>) -> Volume {
    Volume::open(
        options(segments, PolicyConfig::None),
        stack.specs(),
        meta,
        clock,
    )
    .unwrap()
    .0
}

fn pattern(seed: u64, length: usize) -> Vec<u8> {
    let mut rng = SeededRng::new(seed);
    (0..length).map(|_| rng.next_u64() as u8).collect()
}

fn run_moves(volume: &Volume) {
    loop {
        match volume.copy_step() {
            StepOutcome::Idle => break,
            StepOutcome::Failed { segment } => panic!("move of segment {segment} failed"),
            _ => {}
        }
    }
}

#[test]
fn requests_split_across_segments_and_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(2, 4, false);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let volume = open(&stack, 4, dir.path(), clock);
    volume.request_move(1, 0, "test").unwrap();
    run_moves(&volume);
    assert_eq!(volume.placement(), vec![1, 0, 1, 1]);
    // 3 MiB spanning segments 0 (home), 1 (fast), 2 (home) and into 3.
    let data = pattern(1, 3 * SEGMENT as usize);
    let offset = SEGMENT / 2;
    volume.write(offset, &data, false).unwrap();
    let mut back = vec![0u8; data.len()];
    volume.read(offset, &mut back).unwrap();
    assert!(back == data, "read back differs");
    // Segment 1's bytes are on the fast tier's slot, not at its home offset.
    let expected = &data[(SEGMENT / 2 + 4096) as usize..(SEGMENT / 2 + 8192) as usize];
    let mut fast_slot_data = vec![0u8; 4096];
    // Whichever slot it got, one of the two fast slots holds the bytes.
    let found = (0..2).any(|slot| {
        stack
            .fast
            .read_at(slot * SEGMENT + 4096, &mut fast_slot_data)
            .unwrap();
        fast_slot_data == expected
    });
    assert!(found, "segment 1 data not on the fast tier");
    // Out of range is refused and touches nothing.
    assert!(volume.write(4 * SEGMENT - 10, &[1u8; 20], false).is_err());
    assert!(volume.read(4 * SEGMENT, &mut [0u8; 1]).is_err());
}

/// Runs queued moves to the end with `copiers` threads calling `copy_step`.
fn run_moves_in_parallel(volume: &Arc<Volume>, copiers: usize) {
    let handles: Vec<_> = (0..copiers)
        .map(|_| {
            let volume = volume.clone();
            std::thread::spawn(move || loop {
                match volume.copy_step() {
                    StepOutcome::Idle => break,
                    StepOutcome::Failed { segment } => panic!("move of segment {segment} failed"),
                    StepOutcome::Waiting { .. } => std::thread::yield_now(),
                    _ => {}
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

#[test]
fn migration_under_concurrent_writes_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(2, 4, false);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let volume = Arc::new(open(&stack, 4, dir.path(), clock));
    let stop = Arc::new(AtomicBool::new(false));
    const BLOCK: u64 = 4096;
    let blocks = 4 * SEGMENT / BLOCK;
    let threads = 3u64;
    let mut workers = Vec::new();
    for thread in 0..threads {
        let volume = volume.clone();
        let stop = stop.clone();
        workers.push(std::thread::spawn(move || {
            // Each thread owns blocks b with b % threads == thread and keeps
            // the last value it wrote to each; unaligned sizes exercise chunk
            // edges.
            let mut rng = SeededRng::new(100 + thread);
            let mut latest: Vec<Option<u8>> = vec![None; blocks as usize];
            let mut writes = 0u64;
            while !stop.load(Ordering::Relaxed) || writes < 2000 {
                let block = (rng.below(blocks / threads)) * threads + thread;
                let value = rng.next_u64() as u8;
                volume
                    .write(
                        block * BLOCK,
                        &vec![value; BLOCK as usize],
                        rng.below(10) == 0,
                    )
                    .unwrap();
                latest[block as usize] = Some(value);
                let mut back = vec![0u8; BLOCK as usize];
                volume.read(block * BLOCK, &mut back).unwrap();
                assert!(
                    back.iter().all(|byte| *byte == value),
                    "read-after-write mismatch at block {block}"
                );
                writes += 1;
            }
            latest
        }));
    }
    // Force moves back and forth while the writers run.
    let mut rng = SeededRng::new(9);
    for round in 0..40 {
        let segment = rng.below(4) as u32;
        let placement = volume.placement();
        let to = if placement[segment as usize] == 0 {
            1
        } else {
            0
        };
        // The fast tier holds two of the four segments: a promotion onto
        // it when it is full is refused (and the round copies nothing).
        if let Err(error) = volume.request_move(segment, to, &format!("round {round}")) {
            assert!(error.to_string().contains("full"), "{error}");
        }
        // Four copiers: up to four chunks of the move in flight while the
        // writers run (their parts in chunks being copied are handed over).
        run_moves_in_parallel(&volume, 4);
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<Vec<Option<u8>>> = workers
        .into_iter()
        .map(|worker| worker.join().unwrap())
        .collect();
    let status = volume.status();
    assert!(
        status.completed_moves >= 20,
        "{} moves completed",
        status.completed_moves
    );
    for latest in results {
        for (block, value) in latest.iter().enumerate() {
            if let Some(value) = value {
                let mut back = vec![0u8; BLOCK as usize];
                volume.read(block as u64 * BLOCK, &mut back).unwrap();
                assert!(
                    back.iter().all(|byte| byte == value),
                    "block {block} lost its last write"
                );
            }
        }
    }
}

#[test]
fn placement_and_data_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut stack = Stack::new(2, 4, false);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let data = pattern(3, (4 * SEGMENT) as usize);
    {
        let volume = open(&stack, 4, dir.path(), clock.clone());
        volume.write(0, &data, false).unwrap();
        volume.request_move(2, 0, "test").unwrap();
        volume.request_move(3, 0, "test").unwrap();
        run_moves(&volume);
        volume
            .write(2 * SEGMENT + 100, b"after the move", false)
            .unwrap();
        volume.flush().unwrap();
        // No shutdown, no checkpoint: a kill -9.
    }
    stack.crash();
    let volume = open(&stack, 4, dir.path(), clock);
    assert_eq!(volume.placement(), vec![1, 1, 0, 0]);
    let mut expected = data.clone();
    expected[(2 * SEGMENT + 100) as usize..(2 * SEGMENT + 114) as usize]
        .copy_from_slice(b"after the move");
    let mut back = vec![0u8; expected.len()];
    volume.read(0, &mut back).unwrap();
    assert!(back == expected);
    assert_eq!(volume.status().completed_moves, 2);
}

#[test]
fn volatile_tier_is_written_through_and_refilled_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut stack = Stack::new(2, 4, true);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let data = pattern(4, SEGMENT as usize);
    {
        let volume = open(&stack, 4, dir.path(), clock.clone());
        volume.request_move(1, 0, "test").unwrap();
        run_moves(&volume);
        volume.write(SEGMENT, &data, false).unwrap();
        // Write-through: home already has it.
        let mut home = vec![0u8; data.len()];
        stack.home.read_at(SEGMENT, &mut home).unwrap();
        assert!(home == data);
    }
    stack.crash();
    let volume = open(&stack, 4, dir.path(), clock);
    assert_eq!(volume.placement(), vec![1, 0, 1, 1]);
    let mut back = vec![0u8; data.len()];
    volume.read(SEGMENT, &mut back).unwrap();
    assert!(back == data);
    // And the bytes are really on the refilled memory tier.
    let mut fast = vec![0u8; data.len()];
    let found = (0..2).any(|slot| {
        stack.fast.read_at(slot * SEGMENT, &mut fast).unwrap();
        fast == data
    });
    assert!(found);
}

#[test]
fn clean_demotion_needs_no_copy_and_dirty_one_copies() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(2, 4, false);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let volume = open(&stack, 4, dir.path(), clock);
    volume.request_move(0, 0, "up").unwrap();
    run_moves(&volume);
    let copied_up = volume.status().recent_moves.last().unwrap().bytes_copied;
    assert_eq!(copied_up, SEGMENT);
    volume.request_move(0, 1, "down clean").unwrap();
    run_moves(&volume);
    assert_eq!(volume.status().recent_moves.last().unwrap().bytes_copied, 0);
    volume.request_move(0, 0, "up again").unwrap();
    run_moves(&volume);
    volume.write(10, b"dirty", false).unwrap();
    volume.request_move(0, 1, "down dirty").unwrap();
    run_moves(&volume);
    assert_eq!(
        volume.status().recent_moves.last().unwrap().bytes_copied,
        SEGMENT
    );
    let mut back = [0u8; 5];
    volume.read(10, &mut back).unwrap();
    assert_eq!(&back, b"dirty");
}

#[test]
fn moves_to_a_full_tier_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(1, 4, false);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let volume = open(&stack, 4, dir.path(), clock);
    volume.request_move(0, 0, "a").unwrap();
    // The one slot is promised to the queued move: refused before any copy.
    let error = volume.request_move(1, 0, "b").unwrap_err().to_string();
    assert_eq!(
        error,
        "segment 1 of volume v cannot move to fast: the target tier is full: its 1 slots are taken or promised to queued moves"
    );
    let error = volume.request_move(0, 1, "c").unwrap_err().to_string();
    assert!(
        error.contains("a move of the segment is queued already"),
        "{error}"
    );
    run_moves(&volume);
    assert_eq!(volume.placement(), vec![0, 1, 1, 1]);
    let error = volume.request_move(0, 0, "d").unwrap_err().to_string();
    assert!(error.contains("the segment is already there"), "{error}");
    // A demotion ahead in the queue makes room for a promotion behind it
    // (the slot is taken when the demotion has flipped).
    volume.request_move(0, 1, "down").unwrap();
    volume.request_move(2, 0, "up").unwrap();
    run_moves(&volume);
    assert_eq!(volume.placement(), vec![1, 1, 0, 1]);
    assert_eq!(volume.status().dropped_moves, 0);
    assert!(volume.request_move(9, 0, "x").is_err());
    assert!(volume.request_move(0, 5, "x").is_err());
}

#[test]
fn damaged_journal_refuses_to_open_with_path_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(2, 4, false);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    {
        let volume = open(&stack, 4, dir.path(), clock.clone());
        volume.request_move(0, 0, "a").unwrap();
        volume.request_move(1, 0, "b").unwrap();
        run_moves(&volume);
    }
    let journal = MetaStore::journal_path(dir.path());
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[24 + 8 + 3] ^= 0xff;
    std::fs::write(&journal, &bytes).unwrap();
    let error = Volume::open(
        options(4, PolicyConfig::None),
        stack.specs(),
        dir.path(),
        clock,
    )
    .err()
    .expect("must refuse")
    .to_string();
    assert!(error.contains("journal"), "{error}");
    assert!(error.contains("byte offset 24"), "{error}");
}

#[test]
fn a_changed_tier_stack_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(2, 4, false);
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    drop(open(&stack, 4, dir.path(), clock.clone()));
    let mut specs = stack.specs();
    specs[0].name = "other".into();
    let error = Volume::open(options(4, PolicyConfig::None), specs, dir.path(), clock)
        .err()
        .expect("must refuse")
        .to_string();
    assert!(error.contains("tier stack"), "{error}");
}

#[test]
fn policy_history_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(2, 4, false);
    let manual = Arc::new(ManualClock::new(0));
    let clock: Arc<dyn Clock> = manual.clone();
    let policy = PolicyConfig::default_for(tierd_policy::PolicyKind::Atsmf);
    {
        let (volume, _) = Volume::open(
            options(4, policy.clone()),
            stack.specs(),
            dir.path(),
            clock.clone(),
        )
        .unwrap();
        for period in 0..5u64 {
            for _ in 0..50 {
                volume
                    .read(SEGMENT * (period % 4), &mut [0u8; 4096])
                    .unwrap();
            }
            manual.advance_ns(1_000_000_000);
            assert!(volume.tick().unwrap());
        }
    }
    let (_, recovered) = MetaStore::open(dir.path()).unwrap();
    let checkpoint = recovered.checkpoint.unwrap();
    assert_eq!(checkpoint.history.len(), 5);
    assert_eq!(checkpoint.policy, "atsmf");
    let (volume, _) = Volume::open(options(4, policy), stack.specs(), dir.path(), clock).unwrap();
    manual.advance_ns(1_000_000_000);
    volume.tick().unwrap();
    let (_, recovered) = MetaStore::open(dir.path()).unwrap();
    let history = recovered.checkpoint.unwrap().history;
    assert_eq!(
        history.len(),
        6,
        "the restarted volume kept the old periods"
    );
    assert_eq!(history.last().unwrap().index, 5);
}

/// Regression (found by DST seed 8): a segment moved from a non-volatile fast
/// tier into RAM must have a current home copy, or a crash refills RAM with
/// stale home data.
#[test]
fn moving_from_a_fast_disk_into_ram_keeps_home_current() {
    let dir = tempfile::tempdir().unwrap();
    let home = Arc::new(MemoryDevice::new("home", 4 * SEGMENT));
    let disk = Arc::new(MemoryDevice::new("disk", 2 * SEGMENT));
    let specs = |ram: Arc<MemoryDevice>| {
        vec![
            tier("ram", ram, true),
            tier("disk", disk.clone(), false),
            tier("home", home.clone(), false),
        ]
    };
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let data = pattern(11, SEGMENT as usize);
    {
        let ram = Arc::new(MemoryDevice::new("ram", 2 * SEGMENT));
        let (volume, _) = Volume::open(
            options(4, PolicyConfig::None),
            specs(ram),
            dir.path(),
            clock.clone(),
        )
        .unwrap();
        volume.request_move(2, 1, "to disk").unwrap();
        run_moves(&volume);
        volume.write(2 * SEGMENT, &data, false).unwrap();
        volume.request_move(2, 0, "to ram").unwrap();
        run_moves(&volume);
        assert_eq!(volume.placement(), vec![2, 2, 0, 2]);
    }
    let ram = Arc::new(MemoryDevice::new("ram", 2 * SEGMENT));
    let (volume, _) = Volume::open(
        options(4, PolicyConfig::None),
        specs(ram),
        dir.path(),
        clock,
    )
    .unwrap();
    let mut back = vec![0u8; data.len()];
    volume.read(2 * SEGMENT, &mut back).unwrap();
    assert!(back == data, "RAM was refilled from a stale home copy");
}

/// A device that panics on its next operation while armed (a bug in a
/// device or wrapper, injected).
struct PanicOnce {
    inner: Arc<MemoryDevice>,
    armed: AtomicBool,
}

impl PanicOnce {
    fn trip(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            panic!("injected panic inside a device operation");
        }
    }
}

impl BlockDevice for PanicOnce {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn is_volatile(&self) -> bool {
        self.inner.is_volatile()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> tierd_engine::device::DeviceResult<()> {
        self.trip();
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> tierd_engine::device::DeviceResult<()> {
        self.trip();
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> tierd_engine::device::DeviceResult<()> {
        self.inner.flush()
    }
    fn discard(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> tierd_engine::device::DeviceResult<()> {
        self.inner.discard(offset_bytes, length_bytes)
    }
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> tierd_engine::device::DeviceResult<()> {
        self.inner.write_zeroes(offset_bytes, length_bytes)
    }
}

/// Issue 11 §3: a panic in one request (here inside the move copier, with a
/// chunk copy in flight, and inside a user write, which holds the segment's
/// entry lock) must not poison the volume: later IO to the same segment is
/// served, and the move fails cleanly instead of waiting forever for the
/// chunk. With std locks every later write to that segment panicked on the
/// poisoned lock.
#[test]
fn a_panicking_request_leaves_the_volume_serving() {
    let dir = tempfile::tempdir().unwrap();
    let home = Arc::new(PanicOnce {
        inner: Arc::new(MemoryDevice::new("home", 4 * SEGMENT)),
        armed: AtomicBool::new(false),
    });
    let specs = vec![
        tier(
            "fast",
            Arc::new(MemoryDevice::new("fast", 2 * SEGMENT)),
            false,
        ),
        tier("home", home.clone(), false),
    ];
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let volume = Arc::new(
        Volume::open(options(4, PolicyConfig::None), specs, dir.path(), clock)
            .unwrap()
            .0,
    );
    let data = pattern(9, SEGMENT as usize);
    volume.write(SEGMENT, &data, false).unwrap();
    // A panic while the copier copies chunk 0 of segment 1.
    volume.request_move(1, 0, "test").unwrap();
    home.armed.store(true, Ordering::SeqCst);
    let copier = volume.clone();
    let panicked = std::thread::spawn(move || copier.copy_step()).join();
    assert!(panicked.is_err(), "the injected panic did not fire");
    // A panic in a user write to the same segment.
    home.armed.store(true, Ordering::SeqCst);
    let writer = volume.clone();
    let panicked = std::thread::spawn(move || writer.write(SEGMENT, &[1u8; 4096], false)).join();
    assert!(panicked.is_err(), "the injected panic did not fire");
    // Later IO to that chunk and segment is served.
    volume.write(SEGMENT, &data[..8192], false).unwrap();
    let mut back = vec![0u8; SEGMENT as usize];
    volume.read(SEGMENT, &mut back).unwrap();
    assert_eq!(back, data);
    assert!(volume.status().tiers.len() == 2);
    // The move whose chunk copy panicked is abandoned (nobody would land
    // that chunk): it does not hang, the segment stays home, and moving it
    // again works.
    let failed = loop {
        match volume.copy_step() {
            StepOutcome::Failed { segment } => break segment,
            StepOutcome::Idle => {
                panic!("the move with a panicked copy was neither finished nor failed")
            }
            _ => {}
        }
    };
    assert_eq!(failed, 1);
    assert_eq!(volume.placement()[1], 1);
    assert!(!volume.is_migrating());
    volume.request_move(1, 0, "test").unwrap();
    run_moves(&volume);
    assert_eq!(volume.placement()[1], 0);
    volume.read(SEGMENT, &mut back).unwrap();
    assert_eq!(back, data);
}

/// A memory device that records the ranges it was told to release.
struct Releases {
    inner: MemoryDevice,
    released: parking_lot::Mutex<Vec<(u64, u64)>>,
}

impl BlockDevice for Releases {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn is_volatile(&self) -> bool {
        false
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> DeviceResult<()> {
        self.inner.flush()
    }
    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.inner.discard(offset_bytes, length_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.inner.write_zeroes(offset_bytes, length_bytes)
    }
    fn release_cache(&self, offset_bytes: u64, length_bytes: u64) {
        self.released.lock().push((offset_bytes, length_bytes));
    }
}

/// A finished move tells its source device that the segment's range is
/// served elsewhere (a file tier then drops its cached pages: a write-through
/// memory tier's home writes ran at 0.4-0.7x the home file alone while the
/// promotion's reads of home's holes stayed cached; BENCHMARKS.md).
#[test]
fn a_finished_move_releases_the_source_range_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let fast = Arc::new(Releases {
        inner: MemoryDevice::new("fast", 2 * SEGMENT),
        released: parking_lot::Mutex::new(Vec::new()),
    });
    let home = Arc::new(Releases {
        inner: MemoryDevice::new("home", 4 * SEGMENT),
        released: parking_lot::Mutex::new(Vec::new()),
    });
    let specs = vec![
        tier("fast", fast.clone(), false),
        tier("home", home.clone(), false),
    ];
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let volume = Volume::open(options(4, PolicyConfig::None), specs, dir.path(), clock)
        .unwrap()
        .0;
    volume.write(2 * SEGMENT + 10, b"kept", false).unwrap();
    volume.request_move(2, 0, "up").unwrap();
    run_moves(&volume);
    assert_eq!(*home.released.lock(), vec![(2 * SEGMENT, SEGMENT)]);
    assert!(fast.released.lock().is_empty());
    volume.request_move(2, 1, "down").unwrap();
    run_moves(&volume);
    // The slot it left on the fast tier (slot 0).
    assert_eq!(*fast.released.lock(), vec![(0, SEGMENT)]);
    let mut back = [0u8; 4];
    volume.read(2 * SEGMENT + 10, &mut back).unwrap();
    assert_eq!(&back, b"kept");
}

/// The stale rule (`tierd_core::placement::stale_reason`) drops queued
/// moves a restating policy's newest plan does not list; an operator's
/// `tierd move` and a pin's move are never stale, however long they wait.
#[test]
fn operator_moves_and_pins_are_never_dropped_as_stale() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(2, 4, false);
    let manual = Arc::new(ManualClock::new(0));
    let clock: Arc<dyn Clock> = manual.clone();
    // OTF-AST restates its plans; with no IO its plans are empty, so every
    // queued move of its own would be dropped at the next period.
    let policy = PolicyConfig::default_for(tierd_policy::PolicyKind::OtfAst);
    let (volume, _) = Volume::open(options(4, policy), stack.specs(), dir.path(), clock).unwrap();
    volume.request_move(0, 0, "operator").unwrap();
    volume.pin(1, 0, None).unwrap();
    assert_eq!(volume.pending_moves(), 2);
    // No copier runs: the moves wait through ten periods.
    for _ in 0..10 {
        manual.advance_ns(1_000_000_000);
        assert!(volume.tick().unwrap());
    }
    let status = volume.status();
    assert_eq!(status.pending_moves, 2);
    assert_eq!(status.dropped_moves, 0);
    assert_eq!(status.dropped_moves_by_reason.stale(), 0);
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["dropped_moves_by_reason"]["not_asked_again"], 0);
    run_moves(&volume);
    assert_eq!(volume.placement(), vec![0, 0, 1, 1]);
}
