//! `Volume::block_status` (NBD `BLOCK_STATUS` `base:allocation`) on volumes
//! over file tiers: data exactly where written at the file system's block
//! size, holes elsewhere; a segment being moved is a hole only where both
//! its copies are; a cache volume's cached (and lost) blocks are data. In
//! every test no byte that holds data is ever inside a reported hole, and
//! every hole reads as zeroes: a wrong hole makes a sparse copy skip data.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use tierd_common::clock::{Clock, ManualClock};
use tierd_core::cache::CacheMode;
use tierd_engine::device::fault::{FaultConfig, FaultDevice};
use tierd_engine::device::file::FileDevice;
use tierd_engine::device::BlockDevice;
use tierd_engine::volume::{
    CacheOptions, CacheStep, CopyBegun, StepOutcome, TierSpec, Volume, VolumeOptions,
    MAX_STATUS_RUNS,
};
use tierd_policy::PolicyConfig;

const SEGMENT: u64 = 1 << 20;
const CHUNK: u64 = 256 << 10;

/// `(start, end, data)` runs of the whole range, asked the way a client
/// asks: again from where each (prefix) answer stopped.
fn status(volume: &Volume, offset: u64, length: u64) -> Vec<(u64, u64, bool)> {
    let mut spans: Vec<(u64, u64, bool)> = Vec::new();
    let mut position = offset;
    while position < offset + length {
        let runs = volume
            .block_status(position, offset + length - position)
            .unwrap();
        assert!(!runs.is_empty(), "an empty answer at {position}");
        assert!(runs.len() <= MAX_STATUS_RUNS);
        for run in runs {
            assert!(run.length_bytes > 0);
            let end = position + run.length_bytes;
            match spans.last_mut() {
                Some(last) if last.2 == run.allocated => last.1 = end,
                _ => spans.push((position, end, run.allocated)),
            }
            position = end;
        }
    }
    assert_eq!(position, offset + length, "the answers run past the range");
    spans
}

/// No byte of `model` that is not zero lies in a hole, and every hole reads
/// as zeroes through the volume.
fn check_against(volume: &Volume, model: &[u8]) {
    check_holes(volume, model, true);
}

/// As [`check_against`]; `read_holes = false` leaves the reads out (on a
/// cache volume they fill the cache, which changes the next answer).
fn check_holes(volume: &Volume, model: &[u8], read_holes: bool) {
    for (start, end, data) in status(volume, 0, model.len() as u64) {
        if data {
            continue;
        }
        let range = start as usize..end as usize;
        if let Some(at) = model[range.clone()].iter().position(|&byte| byte != 0) {
            panic!(
                "byte {} holds data but lies in the hole {start}..{end}",
                start + at as u64
            );
        }
        if !read_holes {
            continue;
        }
        let mut back = vec![1u8; range.len()];
        volume.read(start, &mut back).unwrap();
        assert!(
            back.iter().all(|&byte| byte == 0),
            "the hole {start}..{end} reads data"
        );
    }
}

/// A file tier of `bytes` in `dir`, and its file system's block size, or
/// `None` (printed) when that file system keeps no holes.
fn file_tier(dir: &Path, name: &str, bytes: u64) -> Option<(Arc<FileDevice>, u64)> {
    let path = dir.join(name);
    let device = FileDevice::open(&path, Some(bytes), false, true).unwrap();
    let runs = device.allocation(0, bytes).expect("a regular file answers");
    if runs.iter().all(|run| run.allocated) {
        eprintln!("skipping: the file system under {dir:?} reports no holes in a sparse file");
        return None;
    }
    let block = std::fs::metadata(&path).unwrap().blksize();
    Some((Arc::new(device), block))
}

fn tier(name: &str, device: Arc<dyn BlockDevice>) -> TierSpec {
    TierSpec {
        name: name.into(),
        device,
        volatile: false,
        unsafe_volatile: false,
    }
}

fn options(segments: u64) -> VolumeOptions {
    VolumeOptions {
        name: "v".into(),
        size_bytes: segments * SEGMENT,
        segment_bytes: SEGMENT,
        chunk_bytes: CHUNK,
        period_ns: 1_000_000_000,
        checkpoint_every_periods: 1,
        policy: PolicyConfig::None,
        migration: Default::default(),
    }
}

fn pattern(seed: u8, length: usize) -> Vec<u8> {
    (0..length)
        .map(|index| (index as u8).wrapping_mul(29).wrapping_add(seed) | 1)
        .collect()
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

/// Writes at a few offsets of a fresh two-tier volume (one across a
/// segment boundary, one of a single byte), a trim and a write of zeroes:
/// the answer is exactly the written ranges rounded out to the file
/// system's block, merged across segments, and holes elsewhere.
#[test]
fn a_tiered_volume_reports_data_where_written_and_holes_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let Some((fast, _)) = file_tier(dir.path(), "fast.img", 2 * SEGMENT) else {
        return;
    };
    let Some((home, block)) = file_tier(dir.path(), "home.img", 8 * SEGMENT) else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let volume = Volume::open(
        options(8),
        vec![tier("fast", fast), tier("home", home)],
        &dir.path().join("meta"),
        clock,
    )
    .unwrap()
    .0;
    let size = 8 * SEGMENT;
    assert_eq!(status(&volume, 0, size), vec![(0, size, false)], "fresh");
    let mut model = vec![0u8; size as usize];
    let mut write = |offset: u64, length: usize, seed: u8| {
        let data = pattern(seed, length);
        volume.write(offset, &data, false).unwrap();
        model[offset as usize..offset as usize + length].copy_from_slice(&data);
    };
    write(64 << 10, 4096, 1);
    write(2 * SEGMENT - 4096, 12288, 2);
    write(5 * SEGMENT + 100, 1, 3);
    write(6 * SEGMENT, 128 << 10, 4);
    // A trim over whole blocks of the last write punches them out.
    volume.discard(6 * SEGMENT + 16384, 16384, false).unwrap();
    model[(6 * SEGMENT + 16384) as usize..(6 * SEGMENT + 32768) as usize].fill(0);
    check_against(&volume, &model);
    let round_down = |at: u64| at / block * block;
    let round_up = |at: u64| at.div_ceil(block) * block;
    let mut expected = Vec::new();
    let mut at = 0;
    for (start, end) in [
        (64 << 10, (64 << 10) + 4096),
        (2 * SEGMENT - 4096, 2 * SEGMENT + 8192),
        (5 * SEGMENT + 100, 5 * SEGMENT + 101),
        (6 * SEGMENT, 6 * SEGMENT + 16384),
        (6 * SEGMENT + 32768, 6 * SEGMENT + (128 << 10)),
    ] {
        let (start, end) = (round_down(start), round_up(end));
        expected.push((at, start, false));
        expected.push((start, end, true));
        at = end;
    }
    expected.push((at, size, false));
    assert_eq!(status(&volume, 0, size), expected);
    // A query inside a run answers that run, clipped to the query.
    assert_eq!(
        volume.block_status(2 * SEGMENT - 100, 200).unwrap(),
        vec![tierd_engine::device::AllocationRun {
            length_bytes: 200,
            allocated: true
        }]
    );
    // A write of zeroes: the file tier zeroes with FALLOC_FL_ZERO_RANGE,
    // which ext4 was seen to leave allocated after a buffered write (data
    // that reads as zeroes: a correct answer too). Either way no hole holds
    // data.
    volume
        .write_zeroes(6 * SEGMENT + (64 << 10), 64 << 10, false)
        .unwrap();
    model[(6 * SEGMENT + (64 << 10)) as usize..(6 * SEGMENT + (128 << 10)) as usize].fill(0);
    check_against(&volume, &model);
    assert!(volume.block_status(size - 1, 2).is_err(), "out of range");
    assert_eq!(volume.block_status(size, 0).unwrap(), Vec::new());
}

/// A segment being moved is a hole only where its source and its target
/// slot both are: a fresh slot adds nothing, a slot still holding an
/// earlier segment's bytes makes the whole segment data until the move
/// lands. A finished promotion copied every byte (all data); a clean
/// demotion copies nothing, so home's holes are back.
#[test]
fn a_moving_segment_is_a_hole_only_where_both_copies_are() {
    let dir = tempfile::tempdir().unwrap();
    // One slot on the fast tier, so every promotion reuses it.
    let Some((fast, _)) = file_tier(dir.path(), "fast.img", SEGMENT) else {
        return;
    };
    let Some((home, block)) = file_tier(dir.path(), "home.img", 4 * SEGMENT) else {
        return;
    };
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
    let volume = Volume::open(
        options(4),
        vec![tier("fast", fast), tier("home", home)],
        &dir.path().join("meta"),
        clock,
    )
    .unwrap()
    .0;
    let mut model = vec![0u8; (4 * SEGMENT) as usize];
    for (segment, seed) in [(1u64, 7u8), (2, 8)] {
        let offset = segment * SEGMENT + 300_000;
        let data = pattern(seed, 5000);
        volume.write(offset, &data, false).unwrap();
        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
    }
    let written = |segment: u64| {
        let start = (segment * SEGMENT + 300_000) / block * block;
        let end = (segment * SEGMENT + 305_000).div_ceil(block) * block;
        vec![
            (segment * SEGMENT, start, false),
            (start, end, true),
            (end, (segment + 1) * SEGMENT, false),
        ]
    };
    let hold_first_chunk = |segment: u64| {
        volume.request_move(segment as u32, 0, "test").unwrap();
        match volume.copy_begin() {
            CopyBegun::Read(read) => {
                assert_eq!(read.segment(), segment as u32);
                read
            }
            CopyBegun::Done(outcome) => panic!("no chunk to copy: {outcome:?}"),
        }
    };
    // Into the fresh slot: mid-move the target adds no data.
    let read = hold_first_chunk(2);
    assert_eq!(status(&volume, 2 * SEGMENT, SEGMENT), written(2));
    check_against(&volume, &model);
    volume.copy_end(read);
    run_moves(&volume);
    assert_eq!(volume.placement(), vec![1, 1, 0, 1]);
    assert_eq!(
        status(&volume, 2 * SEGMENT, SEGMENT),
        vec![(2 * SEGMENT, 3 * SEGMENT, true)],
        "the copy wrote every byte of the slot"
    );
    check_against(&volume, &model);
    // Back down clean: home's copy is current and keeps its holes.
    volume.request_move(2, 1, "test").unwrap();
    run_moves(&volume);
    assert_eq!(volume.placement(), vec![1, 1, 1, 1]);
    assert_eq!(status(&volume, 2 * SEGMENT, SEGMENT), written(2));
    // Into the slot segment 2 left full of its bytes: all data mid-move,
    // though reads still come from segment 1's home, which has holes.
    let read = hold_first_chunk(1);
    assert_eq!(
        status(&volume, SEGMENT, SEGMENT),
        vec![(SEGMENT, 2 * SEGMENT, true)]
    );
    check_against(&volume, &model);
    volume.copy_end(read);
    run_moves(&volume);
    assert_eq!(volume.placement(), vec![1, 0, 1, 1]);
    check_against(&volume, &model);
    // A tier marked unavailable answers nothing: its segments are data.
    assert!(volume.set_tier_unavailable("fast", true));
    assert_eq!(
        status(&volume, SEGMENT, SEGMENT),
        vec![(SEGMENT, 2 * SEGMENT, true)]
    );
    assert_eq!(
        status(&volume, 3 * SEGMENT, SEGMENT),
        vec![(3 * SEGMENT, 4 * SEGMENT, false)]
    );
}

/// A writeback cache volume over a file home: a dirty block home has never
/// seen is data; written back and clean it still is; once evicted, home's
/// copy answers; a trim that releases it makes it a hole; a dirty block the
/// lost cache tier took with it (reads fail) is data, never a hole.
#[test]
fn a_cache_volume_reports_what_the_cache_holds_as_data() {
    let dir = tempfile::tempdir().unwrap();
    const BLOCK: u64 = 16384;
    let Some((fast, _)) = file_tier(dir.path(), "ssd.img", 8 * BLOCK) else {
        return;
    };
    let Some((home, block)) = file_tier(dir.path(), "hdd.img", 4 * SEGMENT) else {
        return;
    };
    assert!(
        BLOCK.is_multiple_of(block),
        "the file system block divides the cache's"
    );
    let clock = Arc::new(ManualClock::new(0));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let fast = Arc::new(FaultDevice::new(
        fast,
        FaultConfig::default(),
        1,
        dyn_clock.clone(),
    ));
    let mut cache = CacheOptions::new("ssd", BLOCK, CacheMode::Writeback);
    cache.sequential_cutoff_bytes = 0;
    cache.policy = tierd_policy::cache::CacheKind::Lru;
    let volume = Volume::open_with_cache(
        options(4),
        vec![tier("ssd", fast.clone()), tier("hdd", home)],
        &dir.path().join("meta"),
        dyn_clock,
        Some(cache),
    )
    .unwrap()
    .0;
    let size = 4 * SEGMENT;
    let mut model = vec![0u8; size as usize];
    let write_back_all = || {
        clock.advance_ns(1_000_000_000);
        for _ in 0..100_000 {
            if volume.cache_step().unwrap() == CacheStep::Idle
                && volume.cache_status().unwrap().dirty_bytes == 0
            {
                return;
            }
        }
        panic!("writeback did not finish");
    };
    // 4 KiB into cache block 3: dirty, only on the cache tier.
    let data = pattern(1, 4096);
    volume.write(3 * BLOCK + 4096, &data, false).unwrap();
    model[(3 * BLOCK + 4096) as usize..(3 * BLOCK + 8192) as usize].copy_from_slice(&data);
    assert_eq!(volume.cache_status().unwrap().dirty_blocks, 1);
    assert_eq!(
        status(&volume, 0, size),
        vec![
            (0, 3 * BLOCK, false),
            (3 * BLOCK, 4 * BLOCK, true),
            (4 * BLOCK, size, false)
        ],
        "the whole cached block is data"
    );
    check_holes(&volume, &model, false);
    write_back_all();
    assert_eq!(
        status(&volume, 0, size),
        vec![
            (0, 3 * BLOCK, false),
            (3 * BLOCK, 4 * BLOCK, true),
            (4 * BLOCK, size, false)
        ],
        "clean and still cached"
    );
    // Reads of other blocks (each committed, so released slots come back)
    // until the first eviction, which under LRU is block 3: home answers
    // for it, and has the whole block (a writeback writes whole blocks).
    // The blocks read are cached blocks of zeroes: data all the same,
    // exactly the blocks the cache holds.
    let mut scratch = vec![0u8; BLOCK as usize];
    let mut read = 0;
    while volume.cache_status().unwrap().clean_evictions == 0 {
        assert!(read < 64, "no eviction");
        volume.read((16 + read) * BLOCK, &mut scratch).unwrap();
        volume.flush().unwrap();
        read += 1;
    }
    assert_eq!(
        status(&volume, 0, 8 * BLOCK),
        vec![
            (0, 3 * BLOCK, false),
            (3 * BLOCK, 4 * BLOCK, true),
            (4 * BLOCK, 8 * BLOCK, false),
        ],
        "evicted: home's answer"
    );
    let cached: u64 = status(&volume, 16 * BLOCK, read * BLOCK)
        .iter()
        .map(|&(start, end, data)| {
            assert!(
                start.is_multiple_of(BLOCK) && end.is_multiple_of(BLOCK),
                "whole blocks"
            );
            if data {
                (end - start) / BLOCK
            } else {
                0
            }
        })
        .sum();
    assert_eq!(cached, volume.cache_status().unwrap().occupancy_blocks);
    check_holes(&volume, &model, false);
    // A trim of the whole block: a hole again.
    volume.discard(3 * BLOCK, BLOCK, false).unwrap();
    model[(3 * BLOCK) as usize..(4 * BLOCK) as usize].fill(0);
    assert_eq!(status(&volume, 0, 8 * BLOCK), vec![(0, 8 * BLOCK, false)]);
    check_against(&volume, &model);
    // A dirty block lost with the cache tier: reads fail, so it is data.
    volume.flush().unwrap();
    volume
        .write(40 * BLOCK, &pattern(2, BLOCK as usize), false)
        .unwrap();
    let cache = volume.cache_status().unwrap();
    assert_eq!(cache.dirty_blocks, 1, "{cache:?}");
    volume.flush().unwrap();
    fast.set_gone(true);
    assert!(volume.set_tier_unavailable("ssd", true));
    assert!(
        volume.read(40 * BLOCK, &mut scratch).is_err(),
        "the block is lost"
    );
    assert_eq!(
        status(&volume, 39 * BLOCK, 3 * BLOCK),
        vec![
            (39 * BLOCK, 40 * BLOCK, false),
            (40 * BLOCK, 41 * BLOCK, true),
            (41 * BLOCK, 42 * BLOCK, false)
        ]
    );
}
