//! The replica layer against the rules of its module docs: reads always the
//! user's data (from the primary or a current copy), free space reads
//! zeroes, copies survive a restart only when journaled current, and a death
//! at any device operation loses no flushed write.

use std::sync::Arc;

use tierd_common::clock::{Clock, ManualClock};
use tierd_common::rng::{Rng, SeededRng};

use super::*;
use crate::device::crash::{CrashDisk, Mortal};
use crate::device::memory::MemoryDevice;

const MIB: u64 = 1 << 20;
const EXTENT: u64 = 64 << 10;
const GAP_NS: u64 = 1_000_000_000;

/// Small distances so a 16–64 MiB device has "far" extents; copies only
/// when the test says (`run_copies_now`).
fn options() -> ReplicaOptions {
    let mut options = ReplicaOptions::default();
    options.manager.far_bytes = 2 * MIB;
    options.manager.session_gap_ns = GAP_NS;
    options.idle_ns = u64::MAX;
    options
}

fn open(inner: Arc<dyn BlockDevice>, clock: &Arc<ManualClock>, format: bool) -> ReplicaDevice {
    let clock: Arc<dyn Clock> = clock.clone();
    ReplicaDevice::open("hdd", inner, options(), clock, format).unwrap()
}

fn pattern(extent: u64, version: u8) -> Vec<u8> {
    let mut data = vec![0u8; EXTENT as usize];
    for (index, byte) in data.iter_mut().enumerate() {
        *byte = (extent as u8)
            .wrapping_mul(31)
            .wrapping_add(version)
            .wrapping_add((index / 512) as u8);
    }
    data
}

fn read(device: &ReplicaDevice, offset: u64, length: u64) -> Vec<u8> {
    let mut buf = vec![0u8; length as usize];
    device.read_at(offset, &mut buf).unwrap();
    buf
}

/// One read session over `extents` (whole extents), then a quiet gap.
fn session(device: &ReplicaDevice, clock: &ManualClock, extents: &[u64]) {
    for extent in extents {
        let _ = read(device, extent * EXTENT, EXTENT);
        clock.advance_ns(1_000_000);
    }
    clock.advance_ns(2 * GAP_NS);
}

/// A cluster near 8 MiB and two far extents near 40 MiB, read together.
const GROUP: [u64; 6] = [128, 129, 130, 131, 640, 641];

fn device_with_copies() -> (Arc<MemoryDevice>, Arc<ManualClock>, ReplicaDevice) {
    let inner = Arc::new(MemoryDevice::new("hdd", 64 * MIB));
    let clock = Arc::new(ManualClock::new(1));
    let device = open(inner.clone(), &clock, true);
    for extent in GROUP {
        device
            .write_at(extent * EXTENT, &pattern(extent, 0))
            .unwrap();
    }
    device.flush().unwrap();
    session(&device, &clock, &GROUP);
    session(&device, &clock, &GROUP);
    // The second session closes at the next report.
    let _ = read(&device, 0, 4096);
    let made = device.run_copies_now(usize::MAX).unwrap();
    assert_eq!(made, 2, "the two far extents are copied near the cluster");
    (inner, clock, device)
}

#[test]
fn free_space_reads_zeroes_and_a_first_partial_write_zeroes_the_rest_of_its_extent() {
    let inner = Arc::new(MemoryDevice::new("hdd", 16 * MIB));
    // Garbage where user data will go: a replica's bytes, or an old life.
    inner.write_at(0, &vec![0xAA; (8 * MIB) as usize]).unwrap();
    let clock = Arc::new(ManualClock::new(1));
    let device = open(inner.clone(), &clock, true);
    assert!(device.size_bytes() < 16 * MIB && device.size_bytes() > 15 * MIB);
    assert_eq!(read(&device, 0, 2 * EXTENT), vec![0u8; 2 * EXTENT as usize]);
    device.write_at(EXTENT + 10_240, &[7u8; 4096]).unwrap();
    let back = read(&device, EXTENT, EXTENT);
    assert!(back[..10_240].iter().all(|byte| *byte == 0));
    assert!(back[10_240..14_336].iter().all(|byte| *byte == 7));
    assert!(back[14_336..].iter().all(|byte| *byte == 0));
    // The allocation answer: extent 1 holds data, the rest are holes.
    let runs = device.allocation(0, 4 * EXTENT).unwrap();
    assert_eq!(
        runs,
        vec![
            AllocationRun {
                length_bytes: EXTENT,
                allocated: false
            },
            AllocationRun {
                length_bytes: EXTENT,
                allocated: true
            },
            AllocationRun {
                length_bytes: 2 * EXTENT,
                allocated: false
            },
        ]
    );
    // A trim of the whole extent frees it; zeroing part of another
    // allocates only that one, zeroed.
    device.discard(EXTENT, EXTENT).unwrap();
    device.write_zeroes(3 * EXTENT + 512, 512).unwrap();
    assert_eq!(read(&device, 0, 4 * EXTENT), vec![0u8; 4 * EXTENT as usize]);
    let runs = device.allocation(0, 4 * EXTENT).unwrap();
    assert_eq!(
        runs[0],
        AllocationRun {
            length_bytes: 3 * EXTENT,
            allocated: false
        }
    );
    assert_eq!(
        runs[1],
        AllocationRun {
            length_bytes: EXTENT,
            allocated: true
        }
    );
    // Out of range is refused, naming the device.
    let error = device
        .read_at(device.size_bytes() - 10, &mut [0u8; 20])
        .unwrap_err();
    assert_eq!(error.kind, DeviceErrorKind::OutOfRange);
}

#[test]
fn recurring_far_reads_are_served_from_copies_that_survive_a_restart() {
    let (inner, clock, device) = device_with_copies();
    let before = device.manager_stats();
    session(&device, &clock, &GROUP);
    let after = device.manager_stats();
    assert!(after.bytes_from_replicas >= before.bytes_from_replicas + 2 * EXTENT);
    let view = device.replicas().unwrap();
    assert_eq!(view.current_copies, 2);
    assert!(view.seek_distance_saved_bytes > 0, "{view:?}");
    for extent in GROUP {
        assert_eq!(read(&device, extent * EXTENT, EXTENT), pattern(extent, 0));
    }
    // Copies are journaled at the copier's commit: a restart keeps them.
    drop(device);
    let device = open(inner.clone(), &clock, false);
    assert_eq!(device.replicas().unwrap().current_copies, 2);
    // The journal ring's state survives a checkpoint too.
    device.checkpoint_now().unwrap();
    drop(device);
    let device = open(inner.clone(), &clock, false);
    assert_eq!(device.replicas().unwrap().current_copies, 2);
    assert_eq!(
        device.replicas().unwrap().allocated_extents,
        GROUP.len() as u64
    );
    let _ = read(&device, 130 * EXTENT, 4096);
    let routed = device.manager_stats().bytes_from_replicas;
    assert_eq!(read(&device, 640 * EXTENT, EXTENT), pattern(640, 0));
    assert!(device.manager_stats().bytes_from_replicas >= routed + EXTENT);

    // A write to a replicated primary drops its copy (durably) first:
    // every later read, also after a restart, is the new data.
    device.write_at(640 * EXTENT + 4096, &[9u8; 4096]).unwrap();
    let mut expected = pattern(640, 0);
    expected[4096..8192].fill(9);
    let _ = read(&device, 130 * EXTENT, 4096);
    assert_eq!(read(&device, 640 * EXTENT, EXTENT), expected);
    assert_eq!(device.replicas().unwrap().current_copies, 1);
    device.flush().unwrap();
    drop(device);
    let device = open(inner, &clock, false);
    assert_eq!(device.replicas().unwrap().current_copies, 1);
    let _ = read(&device, 130 * EXTENT, 4096);
    assert_eq!(read(&device, 640 * EXTENT, EXTENT), expected);
}

#[test]
fn a_write_into_a_replicas_space_drops_it_before_it_lands() {
    let (inner, clock, device) = device_with_copies();
    let copies: Vec<(u64, u64)> = device
        .shared
        .journal
        .lock()
        .durable
        .copies
        .iter()
        .map(|(target, primary)| (*primary, *target))
        .collect();
    assert_eq!(copies.len(), 2);
    let (primary, target) = copies[0];
    assert!(
        target.abs_diff(130) < 16,
        "copies are near the cluster: {copies:?}"
    );
    // The user writes 4 KiB into the copy's (free) extent.
    device
        .write_at(target * EXTENT + 8192, &[5u8; 4096])
        .unwrap();
    let mut mine = vec![0u8; EXTENT as usize];
    mine[8192..12_288].fill(5);
    assert_eq!(read(&device, target * EXTENT, EXTENT), mine);
    let _ = read(&device, 130 * EXTENT, 4096);
    assert_eq!(read(&device, primary * EXTENT, EXTENT), pattern(primary, 0));
    assert_eq!(device.replicas().unwrap().dropped_by_reclaim, 1);
    // Unflushed, and the process dies: the drop was journaled before the
    // write, so the copy is gone after the restart whatever landed.
    drop(device);
    let device = open(inner, &clock, false);
    assert_eq!(device.replicas().unwrap().current_copies, 1);
    let _ = read(&device, 130 * EXTENT, 4096);
    assert_eq!(read(&device, primary * EXTENT, EXTENT), pattern(primary, 0));
    // The write was not flushed: its extent is free (zeroes) or has it.
    let back = read(&device, target * EXTENT, EXTENT);
    assert!(back == mine || back == vec![0u8; EXTENT as usize]);
}

#[test]
fn a_tier_without_a_replicated_format_is_refused_unless_new() {
    let inner = Arc::new(MemoryDevice::new("hdd", 16 * MIB));
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1));
    let error = ReplicaDevice::open("hdd", inner.clone(), options(), clock.clone(), false)
        .err()
        .unwrap();
    assert!(
        error.contains("replicas can be turned on only for a new tier"),
        "{error}"
    );
    drop(ReplicaDevice::open("hdd", inner.clone(), options(), clock.clone(), true).unwrap());
    let mut other = options();
    other.manager.extent_bytes = 128 << 10;
    let error = ReplicaDevice::open("hdd", inner.clone(), other, clock.clone(), false)
        .err()
        .unwrap();
    assert!(error.contains("formatted with other settings"), "{error}");
    // Both superblocks damaged: refused, naming what to do.
    let end = inner.size_bytes();
    inner.write_at(end - 8192 + 20, &[1u8; 8]).unwrap();
    inner.write_at(end - 4096 + 20, &[1u8; 8]).unwrap();
    let error = ReplicaDevice::open("hdd", inner, options(), clock, false)
        .err()
        .unwrap();
    assert!(error.contains("both superblocks"), "{error}");
}

/// The disk as the user should see it, in 4 KiB blocks: what each held at
/// its last completed flush and every version written since.
struct Model {
    flushed: Vec<Vec<u8>>,
    since: Vec<Vec<Vec<u8>>>,
}

const BLOCK: u64 = 4096;

impl Model {
    fn new(blocks: u64) -> Model {
        Model {
            flushed: vec![vec![0u8; BLOCK as usize]; blocks as usize],
            since: vec![Vec::new(); blocks as usize],
        }
    }

    fn wrote(&mut self, offset: u64, data: &[u8]) {
        for (index, chunk) in data.chunks(BLOCK as usize).enumerate() {
            self.since[(offset / BLOCK) as usize + index].push(chunk.to_vec());
        }
    }

    fn flushed_all(&mut self) {
        for (block, versions) in self.since.iter_mut().enumerate() {
            if let Some(last) = versions.pop() {
                self.flushed[block] = last;
            }
            versions.clear();
        }
    }

    /// Every 512-byte sector (what the crashed disk's cache tears at) of
    /// every block reads its flushed contents or those of a write since.
    fn check(&self, device: &ReplicaDevice, what: &str) {
        const SECTOR: usize = 512;
        for block in 0..self.flushed.len() {
            let back = read(device, block as u64 * BLOCK, BLOCK);
            for (sector, bytes) in back.chunks(SECTOR).enumerate() {
                let range = sector * SECTOR..(sector + 1) * SECTOR;
                let ok = bytes == &self.flushed[block][range.clone()]
                    || self.since[block]
                        .iter()
                        .any(|version| bytes == &version[range.clone()]);
                assert!(
                    ok,
                    "{what}: block {block} sector {sector} reads data that is neither flushed nor \
                     written since: read {:?}…, flushed {:?}…, versions since {:?}, copies {:?}",
                    &bytes[..8],
                    &self.flushed[block][range.start..range.start + 8],
                    self.since[block]
                        .iter()
                        .map(|version| version[range.start..range.start + 8].to_vec())
                        .collect::<Vec<_>>(),
                    device.shared.journal.lock().durable.copies
                );
            }
        }
    }
}

/// Three read patterns that recur (a cluster and far members each), so the
/// workload makes, uses and invalidates copies.
fn patterns(extents: u64) -> Vec<Vec<u64>> {
    vec![
        vec![20, 21, 22, 23, extents - 10, extents - 9],
        vec![100, 101, 102, 5, 6, extents - 30],
        vec![60, 61, 62, 63, 64, 200, 201],
    ]
}

/// One random step of a workload over `device`: writes (whole extents of
/// pattern members or random blocks, also into replica space), trims,
/// zeroing, pattern sessions, copies and flushes, mirrored in `model`.
fn step(
    device: &ReplicaDevice,
    clock: &ManualClock,
    rng: &mut SeededRng,
    model: &mut Model,
    extents: u64,
) -> DeviceResult<()> {
    let blocks = extents * EXTENT / BLOCK;
    match rng.below(13) {
        12 => {
            // Into the free space next to the patterns' clusters, where
            // their copies go.
            let near = [24u64, 25, 26, 65, 66, 67, 103, 104, 105];
            let extent = near[rng.below(near.len() as u64) as usize];
            let block = extent * EXTENT / BLOCK + rng.below(EXTENT / BLOCK - 1);
            let data: Vec<u8> = (0..2 * BLOCK).map(|_| rng.below(256) as u8).collect();
            model.wrote(block * BLOCK, &data);
            device.write_at(block * BLOCK, &data)?;
        }
        0..=2 => {
            let block = rng.below(blocks - 4);
            let length = (1 + rng.below(4)) * BLOCK;
            let data: Vec<u8> = (0..length).map(|_| rng.below(256) as u8).collect();
            model.wrote(block * BLOCK, &data);
            device.write_at(block * BLOCK, &data)?;
        }
        3 => {
            let all = patterns(extents).concat();
            let extent = all[rng.below(all.len() as u64) as usize];
            let data = pattern(extent, rng.below(200) as u8);
            model.wrote(extent * EXTENT, &data);
            device.write_at(extent * EXTENT, &data)?;
        }
        4 => {
            let block = rng.below(blocks - 32);
            let length = (1 + rng.below(32)) * BLOCK;
            model.wrote(block * BLOCK, &vec![0u8; length as usize]);
            if rng.below(2) == 0 {
                device.discard(block * BLOCK, length)?;
            } else {
                device.write_zeroes(block * BLOCK, length)?;
            }
        }
        5..=7 => {
            let all = patterns(extents);
            let chosen = &all[rng.below(all.len() as u64) as usize];
            for extent in chosen {
                let mut buf = vec![0u8; EXTENT as usize];
                device.read_at(extent * EXTENT, &mut buf)?;
                clock.advance_ns(1_000_000);
            }
            clock.advance_ns(2 * GAP_NS);
        }
        8 | 9 => {
            device.run_copies_now(1 + rng.below(4) as usize)?;
        }
        10 => {
            device.flush()?;
            model.flushed_all();
        }
        _ => {
            if rng.below(4) == 0 {
                device.checkpoint_now()?;
            }
        }
    }
    Ok(())
}

#[test]
fn random_reads_writes_trims_and_copies_always_read_the_users_data() {
    for seed in 0..48u64 {
        let mut rng = SeededRng::new(seed);
        let inner = Arc::new(MemoryDevice::new("hdd", 16 * MIB));
        let clock = Arc::new(ManualClock::new(1));
        let mut device = open(inner.clone(), &clock, true);
        let extents = device.size_bytes() / EXTENT;
        let mut model = Model::new(extents * EXTENT / BLOCK);
        let mut copies_made = 0;
        for index in 0..400 {
            step(&device, &clock, &mut rng, &mut model, extents).unwrap();
            if index % 50 == 49 {
                // Every block reads its latest write (nothing was lost:
                // the device stays up).
                for (block, versions) in model.since.iter().enumerate() {
                    let expected = versions.last().unwrap_or(&model.flushed[block]);
                    let back = read(&device, block as u64 * BLOCK, BLOCK);
                    assert!(
                        back == *expected,
                        "seed {seed} step {index}: block {block} is wrong"
                    );
                }
            }
            if index % 130 == 129 {
                device.flush().unwrap();
                model.flushed_all();
                copies_made += device.manager_stats().copies_made;
                drop(device);
                device = open(inner.clone(), &clock, false);
            }
        }
        copies_made += device.manager_stats().copies_made;
        assert!(copies_made > 0, "seed {seed}: no copies made");
    }
}

/// The process dies after 1, 2, 3, … device writes and flushes of the
/// random workload; the disk's cache then crashes (unflushed sectors kept
/// or lost at random). After the restart every block reads its flushed
/// version or a later write, never another block's or a replica's bytes.
#[test]
fn a_death_at_any_device_operation_loses_no_flushed_write_and_serves_no_stale_copy() {
    let mut rng = SeededRng::new(77);
    let mut copies_before_death = 0;
    let runs = 160;
    for run in 0..runs {
        let death = 1 + rng.below(400) as i64;
        let disk = Arc::new(CrashDisk::new("hdd", 16 * MIB));
        let dying = Arc::new(Mortal::new(disk.clone(), 0));
        let clock = Arc::new(ManualClock::new(1));
        let device = open(dying.clone(), &clock, true);
        let extents = device.size_bytes() / EXTENT;
        let mut model = Model::new(extents * EXTENT / BLOCK);
        dying.die_after(death);
        let mut workload = SeededRng::new(run);
        for _ in 0..2_000 {
            if step(&device, &clock, &mut workload, &mut model, extents).is_err() {
                break;
            }
        }
        if device.manager_stats().copies_made > 0 {
            copies_before_death += 1;
        }
        drop(device);
        disk.crash(&mut rng);
        let device = ReplicaDevice::open("hdd", disk.clone(), options(), clock.clone(), false)
            .unwrap_or_else(|error| {
                panic!("run {run} (death after {death}): reopen failed: {error}")
            });
        // Read the patterns twice more first, so reads are routed to any
        // copy the journal kept.
        for chosen in patterns(extents) {
            for extent in chosen {
                let _ = read(&device, extent * EXTENT, EXTENT);
            }
        }
        model.check(
            &device,
            &format!("run {run} (death after {death} operations)"),
        );
    }
    assert!(
        copies_before_death * 2 >= runs,
        "copies were made before the death in only {copies_before_death} of {runs} runs"
    );
}

/// Rule 2 at its sharpest: the user writes into the extent of a current
/// copy and flushes, and the process dies at each device operation of that
/// write and flush in turn. The extent then reads zeroes (the write lost,
/// unflushed) or the user's bytes, never the copy's, and the primary keeps
/// its data.
#[test]
fn a_death_while_writing_into_a_replicas_space_never_shows_the_replica() {
    let mut rng = SeededRng::new(5);
    for death in 0..8 {
        for _ in 0..8 {
            let disk = Arc::new(CrashDisk::new("hdd", 64 * MIB));
            let dying = Arc::new(Mortal::new(disk.clone(), 0));
            let clock = Arc::new(ManualClock::new(1));
            let device = open(dying.clone(), &clock, true);
            for extent in GROUP {
                device
                    .write_at(extent * EXTENT, &pattern(extent, 0))
                    .unwrap();
            }
            device.flush().unwrap();
            session(&device, &clock, &GROUP);
            session(&device, &clock, &GROUP);
            let _ = read(&device, 0, 4096);
            assert_eq!(device.run_copies_now(usize::MAX).unwrap(), 2);
            let (target, primary) = device
                .shared
                .journal
                .lock()
                .durable
                .copies
                .iter()
                .map(|(target, primary)| (*target, *primary))
                .min()
                .unwrap();
            dying.die_after(death);
            let mine = [3u8; 4096];
            let _ = device
                .write_at(target * EXTENT + 4096, &mine)
                .and_then(|()| device.flush());
            drop(device);
            disk.crash(&mut rng);
            let device = open(disk.clone(), &clock, false);
            let back = read(&device, target * EXTENT, EXTENT);
            for (sector, bytes) in back.chunks(512).enumerate() {
                let written = (8..16).contains(&sector);
                assert!(
                    bytes.iter().all(|byte| *byte == 0)
                        || (written && bytes.iter().all(|byte| *byte == 3)),
                    "death at operation {death}: sector {sector} of the user's extent reads {:?}…",
                    &bytes[..8]
                );
            }
            let _ = read(&device, 130 * EXTENT, 4096);
            assert_eq!(read(&device, primary * EXTENT, EXTENT), pattern(primary, 0));
        }
    }
}

/// Found by fio (randwrite, iodepth 16) on a fresh replicated tier: two
/// first writes into one free extent each wrote the extent whole (their
/// block and zeroes), and the later one's zeroes erased the other's block.
/// Eight threads write their own 4 KiB block of the same fresh extents on a
/// slow disk while a ninth reads them: every block ends as its writer's,
/// and a read only ever sees zeroes or the writer's bytes.
#[test]
fn concurrent_first_writes_into_one_free_extent_keep_every_block() {
    let inner = Arc::new(MemoryDevice::new("hdd", 16 * MIB));
    let slow = Arc::new(Mortal::new(inner, 200_000));
    let clock = Arc::new(ManualClock::new(1));
    let device = Arc::new(open(slow, &clock, true));
    let extents = 24u64;
    let block = |thread: u64, extent: u64| vec![(1 + thread * 29 + extent) as u8; BLOCK as usize];
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let device = device.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for extent in 0..extents {
                    let back = read(&device, extent * EXTENT, 8 * BLOCK);
                    for (thread, bytes) in back.chunks(BLOCK as usize).enumerate() {
                        assert!(
                            bytes.iter().all(|byte| *byte == 0)
                                || bytes == block(thread as u64, extent),
                            "extent {extent} block {thread} read someone else's bytes"
                        );
                    }
                    reads += 1;
                }
            }
            reads
        })
    };
    let writers: Vec<_> = (0..8u64)
        .map(|thread| {
            let device = device.clone();
            std::thread::spawn(move || {
                for extent in 0..extents {
                    device
                        .write_at(extent * EXTENT + thread * BLOCK, &block(thread, extent))
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    for extent in 0..extents {
        for thread in 0..8 {
            assert_eq!(
                read(&device, extent * EXTENT + thread * BLOCK, BLOCK),
                block(thread, extent),
                "extent {extent}: thread {thread}'s block was lost"
            );
        }
    }
}

/// DST seed 175: a write allocated an extent (its `Allocate` waiting for
/// the next flush), then a FUA write into that extent was acknowledged
/// without making the allocation durable; the crash freed the extent and
/// the FUA write read back as zeroes. A FUA write now commits any
/// allocation of its extents still unjournaled.
#[test]
fn seed_175_a_fua_write_into_a_newly_allocated_extent_survives_a_crash() {
    let disk = Arc::new(CrashDisk::new("hdd", 16 * MIB));
    let clock = Arc::new(ManualClock::new(1));
    let device = open(disk.clone(), &clock, true);
    device.write_zeroes(3 * EXTENT + 512, 4096).unwrap();
    device
        .write_at_durable(3 * EXTENT + 8192, &[6u8; 4096])
        .unwrap();
    drop(device);
    disk.crash_losing_everything_unflushed();
    let device = open(disk, &clock, false);
    assert_eq!(read(&device, 3 * EXTENT + 8192, 4096), vec![6u8; 4096]);
}

/// DST seed 711: a zeroing of part of a free extent failed (EIO), but left
/// the extent allocated in memory with no `Allocate` to journal; the
/// extent's next writes were flushed, and after a crash it was free again
/// and they read as zeroes. A failed IO now leaves free space free.
#[test]
fn seed_711_a_failed_zeroing_of_free_space_loses_no_later_flushed_write() {
    use crate::device::fault::{FaultConfig, FaultDevice};
    let disk = Arc::new(CrashDisk::new("hdd", 16 * MIB));
    let clock = Arc::new(ManualClock::new(1));
    let faults = Arc::new(FaultDevice::new(
        disk.clone(),
        FaultConfig::default(),
        1,
        clock.clone(),
    ));
    let device = open(faults.clone(), &clock, true);
    faults.set_config(FaultConfig {
        write_error_probability: 1.0,
        ..FaultConfig::default()
    });
    assert!(device.write_zeroes(5 * EXTENT + 512, 4096).is_err());
    faults.set_config(FaultConfig::default());
    assert!(!device.allocation(5 * EXTENT, EXTENT).unwrap()[0].allocated);
    device.write_at(5 * EXTENT + 8192, &[4u8; 4096]).unwrap();
    device.flush().unwrap();
    drop(device);
    disk.crash_losing_everything_unflushed();
    let device = open(disk, &clock, false);
    assert_eq!(read(&device, 5 * EXTENT + 8192, 4096), vec![4u8; 4096]);
}
