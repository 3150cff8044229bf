//! The reduced tier against a plain byte array: every read must return
//! what was written, across modes, flushes, crashes and reopenings.

use std::sync::Arc;

use tierd_common::clock::{Clock, ManualClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_core::reduce::{ModeSetting, SwitchConfig};

use super::*;
use crate::device::crash::{CrashDisk, Mortal};
use crate::device::memory::MemoryDevice;

const MIB: u64 = 1 << 20;

fn options(setting: ModeSetting, workers: u32) -> ReduceOptions {
    ReduceOptions {
        pack_bytes: 64 << 10,
        index_entries: 1 << 14,
        switch: SwitchConfig {
            setting,
            ..SwitchConfig::default()
        },
        workers,
        ..ReduceOptions::default()
    }
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(ManualClock::new(0))
}

/// A block like fio's `buffer_compress_percentage=50`: half random, half zeroes.
fn half_compressible(rng: &mut SeededRng, len: usize) -> Vec<u8> {
    let mut block = vec![0u8; len];
    for chunk in block.chunks_mut(4096) {
        let half = chunk.len() / 2;
        for byte in &mut chunk[..half] {
            *byte = rng.below(256) as u8;
        }
    }
    block
}

fn random(rng: &mut SeededRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.below(256) as u8).collect()
}

fn check_all(device: &dyn BlockDevice, model: &[u8]) {
    let mut back = vec![0u8; model.len()];
    device.read_at(0, &mut back).unwrap();
    if back != model {
        let at = back.iter().zip(model).position(|(a, b)| a != b).unwrap();
        panic!("first difference at byte {at} (block {})", at / 4096);
    }
}

/// The allocation answer against the model: it covers the range, no byte
/// the model holds lies in a hole, and its holes are whole blocks that
/// read as zeroes.
fn check_allocation(device: &dyn BlockDevice, model: &[u8]) {
    let runs = device.allocation(0, model.len() as u64).unwrap();
    assert!(
        crate::device::AllocationRun::covers(&runs, model.len() as u64),
        "{runs:?}"
    );
    let mut start = 0usize;
    for run in runs {
        let end = start + run.length_bytes as usize;
        if !run.allocated {
            assert!(
                start.is_multiple_of(4096) && end.is_multiple_of(4096),
                "hole {start}..{end}"
            );
            if let Some(at) = model[start..end].iter().position(|&byte| byte != 0) {
                panic!(
                    "byte {} holds data but lies in the hole {start}..{end}",
                    start + at
                );
            }
            let mut back = vec![1u8; end - start];
            device.read_at(start as u64, &mut back).unwrap();
            assert!(back.iter().all(|&byte| byte == 0));
        }
        start = end;
    }
}

#[test]
fn every_kind_of_write_reads_back_in_every_mode() {
    for (setting, workers) in [
        (ModeSetting::Inline, 0),
        (ModeSetting::Post, 0),
        (ModeSetting::Inline, 2),
        (ModeSetting::Post, 2),
        (ModeSetting::Auto, 2),
    ] {
        let inner = Arc::new(MemoryDevice::new("ssd", 32 * MIB));
        let options = ReduceOptions {
            logical_bytes: Some(8 * MIB),
            ..options(setting, workers)
        };
        let device = ReducedDevice::open("ssd", inner, options, clock(), true).unwrap();
        assert_eq!(device.size_bytes(), 8 * MIB);
        let mut model = vec![0u8; (8 * MIB) as usize];
        let mut rng = SeededRng::new(7);
        let duplicate = half_compressible(&mut rng, 4096);
        for step in 0..600 {
            let offset = rng.below(8 * MIB - 70_000);
            let length = 1 + rng.below(65_536) as usize;
            match rng.below(7) {
                0 => {
                    let data = random(&mut rng, length);
                    device.write_at(offset, &data).unwrap();
                    model[offset as usize..offset as usize + length].copy_from_slice(&data);
                }
                1 | 2 => {
                    let data = half_compressible(&mut rng, length);
                    device.write_at(offset, &data).unwrap();
                    model[offset as usize..offset as usize + length].copy_from_slice(&data);
                }
                3 => {
                    // Block-aligned duplicates of one block.
                    let at = offset / 4096 * 4096;
                    device.write_at(at, &duplicate).unwrap();
                    model[at as usize..at as usize + 4096].copy_from_slice(&duplicate);
                }
                4 => {
                    device.discard(offset, length as u64).unwrap();
                    model[offset as usize..offset as usize + length].fill(0);
                }
                5 => {
                    device.write_zeroes(offset, length as u64).unwrap();
                    model[offset as usize..offset as usize + length].fill(0);
                }
                _ => device.flush().unwrap(),
            }
            if step % 50 == 0 {
                check_allocation(&device, &model);
                device.reduce_staged(usize::MAX).unwrap();
                check_all(&device, &model);
            }
        }
        check_all(&device, &model);
        check_allocation(&device, &model);
        device.flush().unwrap();
        device.reduce_staged(usize::MAX).unwrap();
        check_all(&device, &model);
        let status = device.status();
        assert!(status.dedup_hits > 0, "{setting:?}: {status:?}");
        assert!(status.compress_saved_bytes > 0, "{setting:?}: {status:?}");
    }
}

/// Block map entries as allocation: a block that maps no fragment
/// (never written, trimmed whole, zeroed whole, written with zeroes) is a
/// hole; a block holding any data is data whole, staged or reduced.
#[test]
fn allocation_is_the_block_map() {
    use crate::device::AllocationRun;
    for setting in [ModeSetting::Inline, ModeSetting::Post] {
        let inner = Arc::new(MemoryDevice::new("ssd", 32 * MIB));
        let options = ReduceOptions {
            logical_bytes: Some(MIB),
            ..options(setting, 0)
        };
        let device = ReducedDevice::open("ssd", inner, options, clock(), true).unwrap();
        let block = 4096u64;
        let mut rng = SeededRng::new(3);
        device
            .write_at(2 * block, &random(&mut rng, 2 * block as usize))
            .unwrap();
        device
            .write_at(10 * block, &random(&mut rng, block as usize))
            .unwrap();
        device.write_at(20 * block, &[0u8; 4096]).unwrap();
        device.write_zeroes(3 * block, block).unwrap();
        device.discard(10 * block, block / 2).unwrap();
        device.write_at(30 * block + 100, &[7u8; 10]).unwrap();
        device
            .write_at(40 * block, &random(&mut rng, block as usize))
            .unwrap();
        device.discard(40 * block, block).unwrap();
        let run = |blocks: u64, allocated| AllocationRun {
            length_bytes: blocks * block,
            allocated,
        };
        let expected = vec![
            run(2, false),
            run(1, true),
            run(7, false),
            run(1, true),
            run(19, false),
            run(1, true),
            run(256 - 31, false),
        ];
        assert_eq!(
            device.allocation(0, MIB),
            Some(expected.clone()),
            "{setting:?}"
        );
        device.reduce_staged(usize::MAX).unwrap();
        device.flush().unwrap();
        assert_eq!(device.allocation(0, MIB), Some(expected), "{setting:?}");
        // A query inside blocks: the blocks' states, clipped to the range.
        assert_eq!(
            device.allocation(2 * block + 5, block),
            Some(vec![
                AllocationRun {
                    length_bytes: block - 5,
                    allocated: true
                },
                AllocationRun {
                    length_bytes: 5,
                    allocated: false
                }
            ])
        );
        assert_eq!(device.allocation(MIB, 1), None, "out of range");
    }
}

/// Paper 004's data: 2:1 compressible and 2:1 duplicate gives 4:1.
#[test]
fn two_to_one_compressible_and_duplicate_data_reduces_four_to_one() {
    let inner = Arc::new(MemoryDevice::new("ssd", 64 * MIB));
    let device = ReducedDevice::open(
        "ssd",
        inner,
        ReduceOptions {
            logical_bytes: Some(32 * MIB),
            ..options(ModeSetting::Inline, 0)
        },
        clock(),
        true,
    )
    .unwrap();
    let mut rng = SeededRng::new(11);
    let blocks = (32 * MIB / 4096) as usize;
    let unique: Vec<Vec<u8>> = (0..blocks / 2)
        .map(|_| half_compressible(&mut rng, 4096))
        .collect();
    for lbn in 0..blocks {
        device
            .write_at(lbn as u64 * 4096, &unique[lbn / 2])
            .unwrap();
    }
    device.flush().unwrap();
    let status = device.status();
    assert_eq!(status.logical_bytes, 32 * MIB);
    assert!((3.6..=4.4).contains(&status.ratio), "{status:?}");
    assert_eq!(status.dedup_bytes, 16 * MIB);
}

#[test]
fn flushed_writes_survive_a_crash_and_unflushed_ones_are_old_or_new() {
    let mut rng = SeededRng::new(3);
    for round in 0..20u64 {
        let disk = Arc::new(CrashDisk::new("ssd", 16 * MIB));
        let logical = 4 * MIB;
        let setting = [ModeSetting::Inline, ModeSetting::Post][round as usize % 2];
        let open = |format| {
            ReducedDevice::open(
                "ssd",
                disk.clone(),
                ReduceOptions {
                    logical_bytes: Some(logical),
                    ..options(setting, 0)
                },
                clock(),
                format,
            )
            .unwrap()
        };
        let mut durable = vec![0u8; logical as usize];
        let mut device = open(true);
        for _ in 0..5 {
            // Flushed writes, then unflushed ones, then a crash.
            let mut recent: Vec<(u64, Vec<u8>)> = Vec::new();
            for _ in 0..40 {
                let lbn = rng.below(logical / 4096);
                let data = if rng.below(2) == 0 {
                    half_compressible(&mut rng, 4096)
                } else {
                    durable[((lbn + 1) % (logical / 4096) * 4096) as usize..][..4096].to_vec()
                };
                device.write_at(lbn * 4096, &data).unwrap();
                recent.push((lbn, data));
            }
            if rng.below(3) > 0 {
                device.reduce_staged(rng.below(40) as usize).unwrap();
            }
            device.flush().unwrap();
            for (lbn, data) in &recent {
                durable[(*lbn * 4096) as usize..][..4096].copy_from_slice(data);
            }
            let mut unflushed: Vec<(u64, Vec<u8>)> = Vec::new();
            for _ in 0..rng.below(30) {
                let lbn = rng.below(logical / 4096);
                let data = half_compressible(&mut rng, 4096);
                device.write_at(lbn * 4096, &data).unwrap();
                unflushed.push((lbn, data));
            }
            device.reduce_staged(rng.below(10) as usize).unwrap();
            drop(device);
            disk.crash(&mut rng);
            device = open(false);
            for lbn in 0..logical / 4096 {
                let mut back = vec![0u8; 4096];
                device.read_at(lbn * 4096, &mut back).unwrap();
                let old = &durable[(lbn * 4096) as usize..][..4096];
                let candidates: Vec<&Vec<u8>> = unflushed
                    .iter()
                    .filter(|(at, _)| *at == lbn)
                    .map(|(_, data)| data)
                    .collect();
                assert!(
                    back == old || candidates.iter().any(|data| **data == back),
                    "round {round}: block {lbn} reads neither its flushed nor an unflushed version"
                );
                durable[(lbn * 4096) as usize..][..4096].copy_from_slice(&back);
            }
        }
        // Staged blocks from before the crashes are reduced after them.
        device.reduce_staged(usize::MAX).unwrap();
        assert_eq!(device.status().staged_bytes, 0);
        check_all(&device, &durable);
    }
}

#[test]
fn overwrites_and_trims_give_their_space_back() {
    let inner = Arc::new(MemoryDevice::new("ssd", 8 * MIB));
    let device = ReducedDevice::open(
        "ssd",
        inner,
        ReduceOptions {
            logical_bytes: Some(2 * MIB),
            ..options(ModeSetting::Post, 0)
        },
        clock(),
        true,
    )
    .unwrap();
    let capacity = device.status().capacity_bytes;
    let mut rng = SeededRng::new(5);
    // Ten times the capacity of unique, incompressible data over 2 MiB.
    let mut written = 0;
    while written < 10 * capacity {
        let data = random(&mut rng, 256 << 10);
        let at = rng.below(8) * (256 << 10);
        device.write_at(at, &data).unwrap();
        written += data.len() as u64;
        if rng.below(4) == 0 {
            device.reduce_staged(usize::MAX).unwrap();
            device.flush().unwrap();
        }
    }
    device.discard(0, 2 * MIB).unwrap();
    device.flush().unwrap();
    device.reduce_staged(usize::MAX).unwrap();
    device.flush().unwrap();
    let status = device.status();
    assert_eq!(status.logical_bytes, 0);
    assert!(status.physical_bytes <= 2 * (64 << 10), "{status:?}");
}

#[test]
fn a_full_tier_refuses_writes_and_keeps_what_it_has() {
    let inner = Arc::new(MemoryDevice::new("ssd", 4 * MIB));
    let device = ReducedDevice::open(
        "ssd",
        inner,
        ReduceOptions {
            // Overcommitted: 16 MiB logical on far less physical.
            logical_bytes: Some(16 * MIB),
            ..options(ModeSetting::Inline, 0)
        },
        clock(),
        true,
    )
    .unwrap();
    let mut rng = SeededRng::new(9);
    let mut model = vec![0u8; (16 * MIB) as usize];
    let mut lbn = 0u64;
    let error = loop {
        let data = random(&mut rng, 4096);
        match device.write_at(lbn * 4096, &data) {
            Ok(()) => model[(lbn * 4096) as usize..][..4096].copy_from_slice(&data),
            Err(error) => break error,
        }
        lbn += 1;
    };
    assert_eq!(error.errno(), libc::ENOSPC);
    assert!(error.message.contains("is full"), "{}", error.message);
    check_all(&device, &model);
    device.flush().unwrap();
    check_all(&device, &model);
}

#[test]
fn other_settings_on_a_formatted_tier_are_refused_by_name() {
    let inner: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new("ssd", 8 * MIB));
    let base = ReduceOptions {
        logical_bytes: Some(4 * MIB),
        ..options(ModeSetting::Auto, 0)
    };
    drop(ReducedDevice::open("ssd", inner.clone(), base.clone(), clock(), true).unwrap());
    let error = ReducedDevice::open(
        "ssd",
        inner.clone(),
        ReduceOptions {
            logical_bytes: Some(2 * MIB),
            ..base.clone()
        },
        clock(),
        true,
    )
    .err()
    .unwrap();
    assert!(
        error.contains("reduce.logical (bytes): formatted 4194304, configured 2097152"),
        "{error}"
    );
    // The mode may change: it is not geometry.
    assert!(ReducedDevice::open(
        "ssd",
        inner.clone(),
        options(ModeSetting::Post, 0).with_logical(4 * MIB),
        clock(),
        false
    )
    .is_ok());
    // An unformatted device is not formatted unless allowed.
    let blank: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new("ssd", 8 * MIB));
    let error = ReducedDevice::open("ssd", blank, base, clock(), false)
        .err()
        .unwrap();
    assert!(error.contains("holds no reduced tier"), "{error}");
}

#[test]
fn index_memory_may_change_on_a_formatted_tier() {
    let inner: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new("ssd", 16 * MIB));
    let with_index = |entries: u64| ReduceOptions {
        logical_bytes: Some(8 * MIB),
        index_entries: entries,
        ..options(ModeSetting::Inline, 0)
    };
    let mut rng = SeededRng::new(11);
    let blocks: Vec<Vec<u8>> = (0..300).map(|_| random(&mut rng, 4096)).collect();
    let mut model = vec![0u8; (8 * MIB) as usize];
    let write = |device: &ReducedDevice, model: &mut [u8], lbn: u64, block: &[u8]| {
        device.write_at(lbn * 4096, block).unwrap();
        model[(lbn * 4096) as usize..(lbn * 4096 + 4096) as usize].copy_from_slice(block);
    };
    // Formatted with room for 100 checkpointed entries.
    let device = ReducedDevice::open("ssd", inner.clone(), with_index(100), clock(), true).unwrap();
    for (lbn, block) in blocks.iter().enumerate().take(50) {
        write(&device, &mut model, lbn as u64, block);
    }
    device.flush().unwrap();
    drop(device);
    // More memory (4000 slots: 300 fingerprints spread over 500 sets of 8
    // never fill one): all 300 are remembered while running; the checkpoint
    // keeps the newest 100.
    let device =
        ReducedDevice::open("ssd", inner.clone(), with_index(4000), clock(), false).unwrap();
    assert_eq!(device.status().index_capacity, 4000);
    for (lbn, block) in blocks.iter().enumerate().skip(50) {
        write(&device, &mut model, lbn as u64, block);
    }
    assert_eq!(device.status().index_entries, 300);
    let hits = device.status().dedup_hits;
    write(&device, &mut model, 1000, &blocks[0]);
    assert_eq!(
        device.status().dedup_hits,
        hits + 1,
        "the oldest is still in memory"
    );
    device.flush().unwrap();
    check_all(&device, &model);
    drop(device);
    // Reopened: the journal's entries replay into memory (all 300 fit) and
    // the checkpoint written after the replay keeps the newest 100 of them.
    let device =
        ReducedDevice::open("ssd", inner.clone(), with_index(4000), clock(), false).unwrap();
    assert_eq!(device.status().index_entries, 300);
    drop(device);
    let device =
        ReducedDevice::open("ssd", inner.clone(), with_index(4000), clock(), false).unwrap();
    check_all(&device, &model);
    assert_eq!(device.status().index_entries, 100);
    let hits = device.status().dedup_hits;
    write(&device, &mut model, 1001, &blocks[299]);
    assert_eq!(
        device.status().dedup_hits,
        hits + 1,
        "the newest entry survived the checkpoint"
    );
    write(&device, &mut model, 1002, &blocks[60]);
    assert_eq!(
        device.status().dedup_hits,
        hits + 1,
        "an old entry did not fit the checkpoint"
    );
    device.flush().unwrap();
    drop(device);
    // Less memory: the newest 16 are kept, and the tier opens.
    let device = ReducedDevice::open("ssd", inner, with_index(16), clock(), false).unwrap();
    assert_eq!(device.status().index_capacity, 16);
    assert!(device.status().index_entries <= 16);
    check_all(&device, &model);
    device.flush().unwrap();
}

#[test]
fn a_sequential_read_takes_one_request_per_run_of_adjacent_fragments() {
    let stats = Arc::new(crate::device::stats::StatsDevice::new(
        Arc::new(MemoryDevice::new("ssd", 16 * MIB)),
        clock(),
    ));
    let inner: Arc<dyn BlockDevice> = stats.clone();
    let options = ReduceOptions {
        logical_bytes: Some(8 * MIB),
        ..options(ModeSetting::Inline, 0)
    };
    let device = ReducedDevice::open("ssd", inner, options, clock(), true).unwrap();
    let mut rng = SeededRng::new(5);
    let mut model = vec![0u8; (8 * MIB) as usize];
    // 1 MiB of half-compressible blocks, then 1 MiB of incompressible ones,
    // written in order: their fragments lie one after another in packs.
    let compressible = half_compressible(&mut rng, MIB as usize);
    let raw = random(&mut rng, MIB as usize);
    model[..MIB as usize].copy_from_slice(&compressible);
    model[MIB as usize..2 * MIB as usize].copy_from_slice(&raw);
    device.write_at(0, &compressible).unwrap();
    device.write_at(MIB, &raw).unwrap();
    device.flush().unwrap();
    let packs_touched = 2 * MIB / (64 << 10) + 16;
    let before = stats.snapshot().reads;
    // Unaligned at both ends: the partial first and last blocks too.
    let (from, to) = (1000, 2 * MIB as usize - 3000);
    let mut back = vec![0u8; to - from];
    device.read_at(from as u64, &mut back).unwrap();
    let reads = stats.snapshot().reads - before;
    assert!(
        back == model[from..to],
        "the read differs from what was written"
    );
    assert!(
        reads <= packs_touched,
        "{reads} device reads for 512 blocks in at most {packs_touched} packs"
    );
    check_all(&device, &model);
}

#[test]
fn a_damaged_fragment_is_an_error_not_wrong_data() {
    let inner = Arc::new(MemoryDevice::new("ssd", 8 * MIB));
    let device = ReducedDevice::open(
        "ssd",
        inner.clone(),
        ReduceOptions {
            logical_bytes: Some(MIB),
            ..options(ModeSetting::Inline, 0)
        },
        clock(),
        true,
    )
    .unwrap();
    let mut rng = SeededRng::new(1);
    let data = half_compressible(&mut rng, 4096);
    device.write_at(0, &data).unwrap();
    device.flush().unwrap();
    // The fragment sits at the start of pack 0: scribble over it.
    inner.write_at(0, &[0xffu8; 64]).unwrap();
    drop(device);
    let device = ReducedDevice::open(
        "ssd",
        inner,
        ReduceOptions {
            logical_bytes: Some(MIB),
            ..options(ModeSetting::Inline, 0)
        },
        clock(),
        false,
    )
    .unwrap();
    let mut back = vec![0u8; 4096];
    let error = device.read_at(0, &mut back).unwrap_err();
    assert!(
        error.message.contains("damaged on disk"),
        "{}",
        error.message
    );
}

impl ReduceOptions {
    fn with_logical(self, bytes: u64) -> ReduceOptions {
        ReduceOptions {
            logical_bytes: Some(bytes),
            ..self
        }
    }
}

/// The process dies after 1, 2, 3, … device writes and flushes of a
/// workload that flushes, checkpoints (a small journal ring) and reduces
/// staged blocks: after each death and a crash of the disk's cache, every
/// block that a completed flush covered reads back as flushed or newer.
#[test]
fn a_death_at_any_device_operation_loses_no_flushed_write() {
    let logical = 2 * MIB;
    let blocks = logical / 4096;
    let mut rng = SeededRng::new(21);
    for death in (1..600).step_by(2) {
        let disk = Arc::new(CrashDisk::new("ssd", 12 * MIB));
        let dying = Arc::new(Mortal::new(disk.clone(), 0));
        let setting = [ModeSetting::Inline, ModeSetting::Post][death % 2];
        // Small packs: seals (and reuse of freed packs) between flushes.
        let opts = ReduceOptions {
            logical_bytes: Some(logical),
            pack_bytes: 16 << 10,
            ..options(setting, 0)
        };
        let device =
            ReducedDevice::open("ssd", dying.clone(), opts.clone(), clock(), true).unwrap();
        dying
            .left
            .store(death as i64, std::sync::atomic::Ordering::SeqCst);
        let mut model = FlushedModel::new(blocks);
        model.run(&device, &mut rng, 60, 8, |rng, flushed| {
            // A small hot range: overwrites free packs often.
            let lbn = rng.below(blocks / 4);
            let data = match rng.below(3) {
                0 => random(rng, 4096),
                1 => half_compressible(rng, 4096),
                _ => flushed[rng.below(blocks) as usize].clone(),
            };
            (lbn, data)
        });
        drop(device);
        disk.crash(&mut rng);
        let device = ReducedDevice::open("ssd", disk.clone(), opts, clock(), false).unwrap_or_else(
            |error| panic!("death after {death} operations: reopen failed: {error}"),
        );
        model.check(&device, &format!("death after {death} operations"));
    }
}

/// What each block held at its last completed flush, and everything written
/// to it since: what it may read after the process died and the disk's
/// cache crashed.
struct FlushedModel {
    flushed: Vec<Vec<u8>>,
    since: Vec<Vec<Vec<u8>>>,
}

impl FlushedModel {
    fn new(blocks: u64) -> FlushedModel {
        FlushedModel {
            flushed: vec![vec![0u8; 4096]; blocks as usize],
            since: vec![Vec::new(); blocks as usize],
        }
    }

    /// Up to `rounds` rounds of 1–40 writes (`next` picks a block and its
    /// data, given the flushed contents), up to `reduce` staged blocks
    /// reduced, and a flush; stops at the first error (the death).
    fn run(
        &mut self,
        device: &ReducedDevice,
        rng: &mut SeededRng,
        rounds: usize,
        reduce: u64,
        mut next: impl FnMut(&mut SeededRng, &[Vec<u8>]) -> (u64, Vec<u8>),
    ) {
        for _ in 0..rounds {
            for _ in 0..1 + rng.below(40) {
                let (lbn, data) = next(rng, &self.flushed);
                self.since[lbn as usize].push(data.clone());
                if device.write_at(lbn * 4096, &data).is_err() {
                    return;
                }
            }
            if device.reduce_staged(rng.below(reduce) as usize).is_err() || device.flush().is_err()
            {
                return;
            }
            for (lbn, versions) in self.since.iter_mut().enumerate() {
                if let Some(last) = versions.pop() {
                    self.flushed[lbn] = last;
                }
                versions.clear();
            }
        }
    }

    /// Every block of the reopened `device` reads its flushed version or a
    /// later write (staged blocks reduced first).
    fn check(&self, device: &ReducedDevice, what: &str) {
        device.reduce_staged(usize::MAX).unwrap();
        for lbn in 0..self.flushed.len() as u64 {
            let mut back = vec![0u8; 4096];
            device.read_at(lbn * 4096, &mut back).unwrap();
            let ok = back == self.flushed[lbn as usize] || self.since[lbn as usize].contains(&back);
            assert!(ok, "{what}: block {lbn} lost its flushed data");
        }
    }
}

/// Four writer threads (each owning every fourth block, writing shared
/// duplicate contents so their blocks deduplicate against each other's),
/// two reduction workers, flushes and trims from every thread: each thread
/// reads back its own blocks as it goes, and all are checked at the end.
#[test]
fn concurrent_writers_readers_and_workers_keep_every_block() {
    // Roomy, then tight: on 4 MiB the background cleaner (and the writers'
    // own passes) move blocks while the threads write, trim and read them.
    for (device_bytes, setting) in [
        (24 * MIB, ModeSetting::Post),
        (24 * MIB, ModeSetting::Auto),
        (24 * MIB, ModeSetting::Inline),
        (4 * MIB, ModeSetting::Post),
        (4 * MIB, ModeSetting::Auto),
        (4 * MIB, ModeSetting::Inline),
    ] {
        let inner = Arc::new(MemoryDevice::new("ssd", device_bytes));
        let device = Arc::new(
            ReducedDevice::open(
                "ssd",
                inner,
                ReduceOptions {
                    logical_bytes: Some(4 * MIB),
                    pack_bytes: 16 << 10,
                    stage_bytes: Some(256 << 10),
                    ..options(setting, 2)
                },
                Arc::new(tierd_common::clock::SystemClock::new()),
                true,
            )
            .unwrap(),
        );
        let blocks = 4 * MIB / 4096;
        let mut shared_rng = SeededRng::new(99);
        let shared: Arc<Vec<Vec<u8>>> = Arc::new(
            (0..16)
                .map(|_| half_compressible(&mut shared_rng, 4096))
                .collect(),
        );
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let device = device.clone();
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let mut rng = SeededRng::new(1000 + thread);
                    let mut mine: Vec<Vec<u8>> = vec![vec![0u8; 4096]; (blocks / 4) as usize];
                    for step in 0..1500 {
                        let slot = rng.below(blocks / 4);
                        let lbn = slot * 4 + thread;
                        let data = match rng.below(4) {
                            0 => random(&mut rng, 4096),
                            1 => half_compressible(&mut rng, 4096),
                            _ => shared[rng.below(16) as usize].clone(),
                        };
                        match rng.below(20) {
                            0 => {
                                device.discard(lbn * 4096, 4096).unwrap();
                                mine[slot as usize].fill(0);
                            }
                            1 => device.flush().unwrap(),
                            _ => {
                                device.write_at(lbn * 4096, &data).unwrap();
                                mine[slot as usize] = data;
                            }
                        }
                        let check = rng.below(blocks / 4);
                        let mut back = vec![0u8; 4096];
                        device
                            .read_at((check * 4 + thread) * 4096, &mut back)
                            .unwrap();
                        assert!(
                            back == mine[check as usize],
                            "{setting:?} on {device_bytes} bytes, thread {thread} step {step}: block {} changed under it",
                            check * 4 + thread
                        );
                    }
                    mine
                })
            })
            .collect();
        let results: Vec<Vec<Vec<u8>>> = threads
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .collect();
        device.flush().unwrap();
        for (thread, mine) in results.iter().enumerate() {
            for (slot, expected) in mine.iter().enumerate() {
                let mut back = vec![0u8; 4096];
                device
                    .read_at((slot as u64 * 4 + thread as u64) * 4096, &mut back)
                    .unwrap();
                assert!(
                    back == *expected,
                    "{setting:?}: block {} at the end",
                    slot * 4 + thread
                );
            }
        }
        let status = device.status();
        assert!(status.dedup_hits > 100, "{setting:?}: {status:?}");
        if device_bytes == 4 * MIB {
            assert!(status.cleaned_packs > 0, "{setting:?}: {status:?}");
        }
    }
}

/// kill -9 under load in every mode: writer threads (each owning every
/// fourth block) write, trim and flush while two workers reduce staged
/// blocks; the process dies at a random moment; after reopening, each
/// block holds what its owner had flushed or something it wrote later.
#[test]
fn a_kill_under_concurrent_load_loses_no_flushed_write() {
    for round in 0..24u64 {
        let setting =
            [ModeSetting::Post, ModeSetting::Auto, ModeSetting::Inline][round as usize % 3];
        let memory = Arc::new(MemoryDevice::new("ssd", 24 * MIB));
        // A device write takes 50 µs: the window in which a pack was once
        // read before its tail write landed.
        let killable = Arc::new(Mortal::new(memory.clone(), 50_000));
        let opts = ReduceOptions {
            logical_bytes: Some(4 * MIB),
            pack_bytes: 16 << 10,
            stage_bytes: Some(512 << 10),
            ..options(setting, 2)
        };
        let device = Arc::new(
            ReducedDevice::open(
                "ssd",
                killable.clone(),
                opts.clone(),
                Arc::new(tierd_common::clock::SystemClock::new()),
                true,
            )
            .unwrap(),
        );
        let blocks = 4 * MIB / 4096;
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let device = device.clone();
                std::thread::spawn(move || {
                    let mut rng = SeededRng::new(round * 10 + thread);
                    // Per owned block: the flushed version and later ones.
                    let mut flushed: Vec<Vec<u8>> = vec![vec![0u8; 4096]; (blocks / 4) as usize];
                    let mut later: Vec<Vec<Vec<u8>>> = vec![Vec::new(); (blocks / 4) as usize];
                    loop {
                        let slot = rng.below(blocks / 16) as usize; // a hot quarter
                        let lbn = slot as u64 * 4 + thread;
                        let result = match rng.below(12) {
                            0 => {
                                let result = device.flush();
                                if result.is_ok() {
                                    for (slot, versions) in later.iter_mut().enumerate() {
                                        if let Some(last) = versions.pop() {
                                            flushed[slot] = last;
                                        }
                                        versions.clear();
                                    }
                                }
                                result
                            }
                            1 => {
                                later[slot].push(vec![0u8; 4096]);
                                device.discard(lbn * 4096, 4096)
                            }
                            _ => {
                                let mut data = half_compressible(&mut rng, 4096);
                                data[..8].copy_from_slice(&lbn.to_le_bytes());
                                later[slot].push(data.clone());
                                device.write_at(lbn * 4096, &data)
                            }
                        };
                        if result.is_err() {
                            return (flushed, later);
                        }
                    }
                })
            })
            .collect();
        let mut rng = SeededRng::new(round);
        tierd_common::clock::SystemClock::new().sleep_ns((20 + rng.below(200)) * 1_000_000);
        killable.die_after(0);
        let results: Vec<_> = threads
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .collect();
        drop(device);
        let device = ReducedDevice::open(
            "ssd",
            memory.clone(),
            ReduceOptions { workers: 0, ..opts },
            clock(),
            false,
        )
        .unwrap_or_else(|error| panic!("round {round}: reopen: {error}"));
        for pass in 0..2 {
            for (thread, (flushed, later)) in results.iter().enumerate() {
                for slot in 0..(blocks / 16) as usize {
                    let lbn = slot as u64 * 4 + thread as u64;
                    let mut back = vec![0u8; 4096];
                    device.read_at(lbn * 4096, &mut back).unwrap();
                    assert!(
                        back == flushed[slot] || later[slot].contains(&back),
                        "round {round} ({setting:?}) pass {pass}: block {lbn} lost its flushed data (holds {:?})",
                        &back[..8]
                    );
                }
            }
            device.reduce_staged(usize::MAX).unwrap();
        }
    }
}

/// Random overwrites of compressible data leave dead fragments in every
/// pack (a pack comes free by itself only when all its fragments die): the
/// cleaner must win that space back, so a tier whose live data fits never
/// refuses a write. Before the cleaner, the reduced kill -9 loop failed
/// with ENOSPC this way (CI, seed 5434627) on a 96 MiB tier holding about
/// 40 MiB of live data. Synchronous cleaning (no workers) and background
/// cleaning (workers) both.
#[test]
fn random_overwrites_of_compressed_data_are_cleaned_not_refused() {
    for (setting, workers) in [(ModeSetting::Inline, 0), (ModeSetting::Auto, 2)] {
        let inner = Arc::new(MemoryDevice::new("ssd", 8 * MIB));
        let logical = 8 * MIB;
        let opts = ReduceOptions {
            // Overcommitted: about 2:1 data fills 60% of the packs.
            logical_bytes: Some(logical),
            ..options(setting, workers)
        };
        let device =
            ReducedDevice::open("ssd", inner.clone(), opts.clone(), clock(), true).unwrap();
        let capacity = device.status().capacity_bytes;
        let blocks = logical / 4096;
        let mut model = vec![0u8; logical as usize];
        let mut rng = SeededRng::new(41);
        // Eight times the logical size, 4 KiB at random places.
        for step in 0..8 * blocks {
            let lbn = rng.below(blocks);
            let data = half_compressible(&mut rng, 4096);
            device
                .write_at(lbn * 4096, &data)
                .unwrap_or_else(|error| panic!("{setting:?}: write {step} failed: {error}"));
            model[(lbn * 4096) as usize..][..4096].copy_from_slice(&data);
            if step.is_multiple_of(512) {
                device.flush().unwrap();
            }
        }
        device.reduce_staged(usize::MAX).unwrap();
        device.flush().unwrap();
        let status = device.status();
        assert!(status.cleaned_packs > 0, "{setting:?}: {status:?}");
        assert!(status.physical_bytes <= capacity, "{setting:?}: {status:?}");
        // Cleaning copies live bytes only: less than the user wrote.
        assert!(
            status.cleaner_relocated_bytes < 8 * logical,
            "{setting:?}: {status:?}"
        );
        check_all(&device, &model);
        // The remapped blocks were journaled: a reopened tier agrees.
        drop(device);
        let device = ReducedDevice::open("ssd", inner, opts, clock(), false).unwrap();
        check_all(&device, &model);
    }
}

/// Packs are never written in place, so a tier full of data that does not
/// compress needs room for a block's new copy before the old one dies: the
/// default logical size keeps a spare, and the cleaner turns the dead
/// copies back into room. Every block written, then overwritten again and
/// again, in both modes (post-process stages raw copies first).
#[test]
fn incompressible_data_on_the_default_size_can_be_overwritten_forever() {
    for (setting, workers) in [
        (ModeSetting::Inline, 0),
        (ModeSetting::Post, 0),
        (ModeSetting::Auto, 2),
    ] {
        let inner = Arc::new(MemoryDevice::new("ssd", 8 * MIB));
        let device =
            ReducedDevice::open("ssd", inner, options(setting, workers), clock(), true).unwrap();
        let logical = device.size_bytes();
        let status = device.status();
        assert!(
            logical + status.capacity_bytes / 20 <= status.capacity_bytes,
            "{setting:?}: the default keeps no spare: {logical} of {}",
            status.capacity_bytes
        );
        let blocks = logical / 4096;
        let mut model = vec![0u8; logical as usize];
        let mut rng = SeededRng::new(43);
        let mut write = |lbn: u64, step: u64, model: &mut Vec<u8>| {
            let data = random(&mut rng, 4096);
            device
                .write_at(lbn * 4096, &data)
                .unwrap_or_else(|error| panic!("{setting:?}: write {step} failed: {error}"));
            model[(lbn * 4096) as usize..][..4096].copy_from_slice(&data);
            if step.is_multiple_of(256) {
                device.reduce_staged(usize::MAX).unwrap();
                device.flush().unwrap();
            }
        };
        for lbn in 0..blocks {
            write(lbn, lbn, &mut model);
        }
        let mut pick = SeededRng::new(44);
        for step in 0..3 * blocks {
            write(pick.below(blocks), step, &mut model);
        }
        device.reduce_staged(usize::MAX).unwrap();
        device.flush().unwrap();
        assert!(device.status().cleaned_packs > 0, "{:?}", device.status());
        check_all(&device, &model);
    }
}

/// The process dies at a random device operation of a workload that keeps
/// a small tier cleaning (compressible data overwritten at random over the
/// whole logical size): after each death and a crash of the disk's cache,
/// every block reads back as flushed or newer. Remapped blocks must never
/// point at a copy that did not reach the device, and an emptied pack must
/// not be reused before the remapping is journaled.
#[test]
fn a_death_while_cleaning_loses_no_flushed_write() {
    let logical = 4 * MIB;
    let blocks = logical / 4096;
    let mut rng = SeededRng::new(47);
    let mut cleaned_before_death = 0;
    let runs = 40;
    for run in 0..runs {
        let disk = Arc::new(CrashDisk::new("ssd", 4 * MIB));
        let dying = Arc::new(Mortal::new(disk.clone(), 0));
        let setting = [ModeSetting::Inline, ModeSetting::Post][run % 2];
        let opts = ReduceOptions {
            logical_bytes: Some(logical),
            pack_bytes: 16 << 10,
            index_entries: 1 << 10,
            ..options(setting, 0)
        };
        let device =
            ReducedDevice::open("ssd", dying.clone(), opts.clone(), clock(), true).unwrap();
        let death = 200 + rng.below(3000) as i64;
        dying.die_after(death);
        let mut model = FlushedModel::new(blocks);
        model.run(&device, &mut rng, 400, 16, |rng, flushed| {
            let lbn = rng.below(blocks);
            let data = match rng.below(5) {
                0 => flushed[rng.below(blocks) as usize].clone(),
                _ => half_compressible(rng, 4096),
            };
            (lbn, data)
        });
        if device.status().cleaner_passes > 0 {
            cleaned_before_death += 1;
        }
        drop(device);
        disk.crash(&mut rng);
        let device = ReducedDevice::open("ssd", disk.clone(), opts, clock(), false).unwrap_or_else(
            |error| panic!("run {run} (death after {death} operations): reopen failed: {error}"),
        );
        model.check(
            &device,
            &format!("run {run} (death after {death} operations)"),
        );
    }
    assert!(
        cleaned_before_death >= runs / 2,
        "the cleaner ran before the death in only {cleaned_before_death} of {runs} runs"
    );
}

/// A cleaning pass finds its victims' blocks through the reverse index
/// (no scan of the map): it moves exactly the blocks that mapped into the
/// victims, dedup's shared fragments included, and no other block's entry
/// changes. The same without the index (a tier of more than 2^32 blocks
/// scans the map).
#[test]
fn a_cleaning_pass_relocates_exactly_the_victims_blocks() {
    for reverse_index in [true, false] {
        a_cleaning_pass_relocates_exactly(reverse_index);
    }
}

fn a_cleaning_pass_relocates_exactly(reverse_index: bool) {
    let inner = Arc::new(MemoryDevice::new("ssd", 8 * MIB));
    let logical = 4 * MIB;
    let opts = options(ModeSetting::Inline, 0).with_logical(logical);
    let device = ReducedDevice::open("ssd", inner, opts, clock(), true).unwrap();
    let blocks = logical / 4096;
    let mut model = vec![0u8; logical as usize];
    let mut rng = SeededRng::new(17);
    let mut shared = Vec::new();
    for lbn in 0..blocks {
        // Every eighth block repeats an earlier one (dedup shares it).
        let data = if lbn % 8 == 7 {
            shared.clone()
        } else {
            half_compressible(&mut rng, 4096)
        };
        if lbn % 8 == 0 {
            shared = data.clone();
        }
        device.write_at(lbn * 4096, &data).unwrap();
        model[(lbn * 4096) as usize..][..4096].copy_from_slice(&data);
    }
    device.flush().unwrap();
    for _ in 0..blocks / 2 {
        let lbn = rng.below(blocks);
        let data = half_compressible(&mut rng, 4096);
        device.write_at(lbn * 4096, &data).unwrap();
        model[(lbn * 4096) as usize..][..4096].copy_from_slice(&data);
    }
    device.flush().unwrap();
    let shared_state = &device.shared;
    if !reverse_index {
        shared_state.state.lock().drop_reverse_index();
    }
    let (victims, refs, before) = {
        let mut state = shared_state.state.lock();
        let victims = state.pick_victims();
        let refs = state.victim_refs(&victims);
        (victims, refs, state.map.clone())
    };
    assert_eq!(refs.is_some(), reverse_index);
    assert!(victims.len() > 1, "{victims:?}");
    let in_victims = |entry: u64| {
        Fragment::decode(entry).is_some_and(|fragment| victims.contains(&fragment.pack))
    };
    let expected: Vec<u64> = (0..blocks)
        .filter(|&lbn| in_victims(before[lbn as usize]))
        .collect();
    if let Some(refs) = &refs {
        let mut listed: Vec<u64> = refs.iter().map(|&(lbn, _)| lbn).collect();
        listed.sort_unstable();
        assert_eq!(listed, expected);
    }
    assert!(
        expected.len() as u64 > victims.len() as u64,
        "victims hold blocks"
    );
    let relocated_before = shared_state.state.lock().cleaner.relocated_blocks;
    shared_state.relocate_victims(&victims, refs).unwrap();
    shared_state.state.lock().end_cleaning(&victims);
    shared_state.flush().unwrap();
    let state = shared_state.state.lock();
    assert_eq!(
        state.cleaner.relocated_blocks - relocated_before,
        expected.len() as u64
    );
    for lbn in 0..blocks {
        let (old, new) = (before[lbn as usize], state.map[lbn as usize]);
        if in_victims(old) {
            assert!(!in_victims(new), "block {lbn} still in a victim");
            assert_ne!(old, new);
        } else {
            assert_eq!(old, new, "block {lbn} was not the cleaner's to move");
        }
    }
    drop(state);
    check_all(&device, &model);
}

/// Measurement, not a check (`--ignored`, release build): how long one
/// cleaning pass takes on a tier whose logical size is large next to the
/// data it holds (16 GiB logical, 4 Mi map entries, on a 256 MiB device
/// holding 48 MiB of about 2:1 data, half of it overwritten so every pack
/// is half dead). Synthetic data (`half_compressible`), timed with the
/// system clock. Prints the mean and the fastest pass of `passes`.
///
/// `cargo test --release -p tierd-engine --lib -- --ignored
/// measure_a_cleaning_pass --nocapture`
#[test]
#[ignore = "a measurement: run with --ignored --nocapture in a release build"]
fn measure_a_cleaning_pass() {
    use tierd_common::clock::SystemClock;
    let system = SystemClock::new();
    let logical = 16u64 << 30;
    let inner = Arc::new(MemoryDevice::new("ssd", 256 * MIB));
    let opts = ReduceOptions {
        logical_bytes: Some(logical),
        pack_bytes: 128 << 10,
        ..options(ModeSetting::Inline, 0)
    };
    let device = ReducedDevice::open("ssd", inner, opts, clock(), true).unwrap();
    let blocks = logical / 4096;
    let written = (48 * MIB) / 2048;
    let stride = blocks / written;
    let mut rng = SeededRng::new(7);
    for i in 0..written {
        let data = half_compressible(&mut rng, 4096);
        device.write_at(i * stride * 4096, &data).unwrap();
    }
    device.flush().unwrap();
    // Every other block overwritten: every pack holds half dead bytes.
    for i in (0..written).step_by(2) {
        let data = half_compressible(&mut rng, 4096);
        device.write_at(i * stride * 4096, &data).unwrap();
    }
    device.flush().unwrap();
    let passes = 20;
    let mut times = Vec::new();
    for _ in 0..passes {
        let started = system.now_ns();
        assert!(device.shared.clean(false).unwrap());
        times.push(system.now_ns() - started);
    }
    let status = device.status();
    let mean = times.iter().sum::<u64>() as f64 / times.len() as f64;
    let (reverse_bytes, mapped) = {
        let state = device.shared.state.lock();
        (state.reverse_index_bytes(), state.tallies.mapped_blocks)
    };
    println!(
        "cleaning pass: mean {:.3} ms, fastest {:.3} ms over {passes} passes; map entries {blocks}; \
         relocated {} blocks {} bytes, cleaned {} packs; reverse index {reverse_bytes} bytes for \
         {mapped} mapped blocks and {} packs",
        mean / 1e6,
        *times.iter().min().unwrap() as f64 / 1e6,
        status.cleaner_relocated_blocks,
        status.cleaner_relocated_bytes,
        status.cleaned_packs,
        device.geometry().pack_count
    );
}

/// Measurement, not a check (`--ignored`, release build): write IOPS of
/// inline reduction on two workers, 64 KiB writes (16 blocks) of about 2:1
/// synthetic data (`half_compressible`, 64 distinct buffers) at random
/// aligned offsets of a 256 MiB tier on a memory device, timed with the
/// system clock, and the process's CPU time (`/proc/self/stat`, utime +
/// stime) per write. `REDUCE_BENCH_WRITES` writes (default 20000),
/// `REDUCE_BENCH_WORKERS` (default 2; 0 reduces on the writing thread),
/// `REDUCE_BENCH_COMPRESS` (default 1; 0 stores blocks raw, so the copy
/// and the allocation per block are a larger share of the work).
#[test]
#[ignore = "a measurement: run with --ignored --nocapture in a release build"]
fn measure_inline_write_iops() {
    use tierd_common::clock::SystemClock;
    let system = SystemClock::new();
    let env = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let writes = env("REDUCE_BENCH_WRITES", 20_000);
    let workers = env("REDUCE_BENCH_WORKERS", 2) as u32;
    let compress = env("REDUCE_BENCH_COMPRESS", 1) != 0;
    let cpu_ticks = || -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        // After the command: state is field 3, utime 14 and stime 15.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let inner = Arc::new(MemoryDevice::new("ssd", 512 * MIB));
    let logical = 256 * MIB;
    let opts = ReduceOptions {
        logical_bytes: Some(logical),
        pack_bytes: 128 << 10,
        dedup: false,
        compress,
        ..options(ModeSetting::Inline, workers)
    };
    let device = ReducedDevice::open("ssd", inner, opts, clock(), true).unwrap();
    let mut rng = SeededRng::new(9);
    let buffers: Vec<Vec<u8>> = (0..64)
        .map(|_| half_compressible(&mut rng, 64 << 10))
        .collect();
    let slots = logical / (64 << 10);
    let started = system.now_ns();
    let cpu_started = cpu_ticks();
    for i in 0..writes {
        let slot = rng.below(slots);
        device
            .write_at(slot * (64 << 10), &buffers[(i % 64) as usize])
            .unwrap();
    }
    device.flush().unwrap();
    let elapsed = system.now_ns() - started;
    // Clock ticks of 10 ms (USER_HZ on Linux).
    let cpu_us = (cpu_ticks() - cpu_started) as f64 * 1e4;
    println!(
        "inline 64 KiB writes (workers {workers}, compress {compress}): {writes} in {:.3} s = {:.0} \
         IOPS ({:.1} MB/s); CPU {:.1} us per write",
        elapsed as f64 / 1e9,
        writes as f64 * 1e9 / elapsed as f64,
        writes as f64 * 65536.0 * 1e3 / elapsed as f64,
        cpu_us / writes as f64
    );
}
