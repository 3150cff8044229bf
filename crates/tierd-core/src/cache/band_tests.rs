//! The SMR destage's rules (`docs/engine/smr.md`): whole bands, densest
//! first, no home write inside a band being rewritten, watermarks and
//! idle, and homes that are not SMR left as they were.

use std::collections::VecDeque;

use super::*;

const BLOCK: u64 = 4096;
/// Eight blocks per band.
const BAND: u64 = 8 * BLOCK;

fn settings(blocks: u64, slots: u32, smr: bool) -> CacheSettings {
    let mut settings = CacheSettings::new(blocks * BLOCK, BLOCK, slots, CacheMode::Writeback);
    settings.policy = CacheKind::Lru;
    settings.reserve_slots = Some(1);
    settings.sequential_cutoff_bytes = 0;
    if smr {
        settings.smr = Some(SmrStaging {
            band_bytes: BAND,
            first_band_offset_bytes: 0,
            chunk_bytes: 2 * BLOCK,
            chunks_in_flight: 2,
        });
    }
    settings
}

/// Plans one whole-block request and reports its steps done.
fn write(cache: &mut BlockCache, block: u64) -> BlockIo {
    let mut steps = Vec::new();
    cache.write(block * BLOCK, BLOCK, &mut steps);
    assert_eq!(steps.len(), 1);
    cache.finish(&steps[0], true);
    steps[0].io
}

/// Drives the destage until a band rewrite ends (IOs complete in order),
/// starting with the IOs already handed out.
fn finish_rewrite(
    cache: &mut BlockCache,
    mut pending: VecDeque<DestageIo>,
    user_waiting: bool,
) -> (Vec<DestageIo>, BandDone) {
    let mut done = Vec::new();
    loop {
        while let Some(io) = cache.next_destage_io(user_waiting) {
            pending.push_back(io);
        }
        let io = pending
            .pop_front()
            .expect("a rewrite in progress has IO to do");
        done.push(io);
        if let Some(band) = cache.destage_io_done(io, true) {
            assert!(pending.is_empty(), "the band ended with IO in flight");
            return (done, band);
        }
    }
}

#[test]
fn an_smr_home_rewrites_the_densest_band_whole_and_in_order() {
    let mut cache = BlockCache::new(settings(64, 32, true)).unwrap();
    for block in [1, 9, 10, 12, 40] {
        assert!(matches!(
            write(&mut cache, block),
            BlockIo::WriteSlot { .. }
        ));
    }
    assert_eq!(cache.next_writeback(true), None, "no per-block writeback");
    assert_eq!(
        cache.dirty_bands().collect::<Vec<_>>(),
        vec![(1, 3), (0, 1), (5, 1)]
    );
    let (ios, band) = finish_rewrite(&mut cache, VecDeque::new(), false);
    assert_eq!(
        band,
        BandDone {
            band: 1,
            offset_bytes: BAND,
            length_bytes: BAND,
            ok: true
        }
    );
    let slot_reads: Vec<BlockId> = ios
        .iter()
        .filter_map(|io| match io.kind {
            DestageIoKind::ReadSlot { block, .. } => Some(block),
            _ => None,
        })
        .collect();
    assert_eq!(slot_reads, vec![9, 10, 12]);
    // Home is read only where no dirty block is: blocks 8, 11, 13..16.
    let home_reads: Vec<(u64, u64)> = ios
        .iter()
        .filter(|io| io.kind == DestageIoKind::ReadHome)
        .map(|io| (io.offset_bytes / BLOCK, io.length_bytes / BLOCK))
        .collect();
    assert_eq!(home_reads, vec![(8, 1), (11, 1), (13, 2), (15, 1)]);
    // Then the band from its first byte to its end, in order.
    let writes: Vec<(u64, u64)> = ios
        .iter()
        .filter(|io| io.kind == DestageIoKind::WriteHome)
        .map(|io| (io.offset_bytes, io.length_bytes))
        .collect();
    let mut at = BAND;
    for &(offset, length) in &writes {
        assert_eq!(offset, at, "{writes:?}");
        at += length;
    }
    assert_eq!(at, 2 * BAND);
    let first_write = ios
        .iter()
        .position(|io| io.kind == DestageIoKind::WriteHome)
        .unwrap();
    assert!(ios[first_write..]
        .iter()
        .all(|io| io.kind == DestageIoKind::WriteHome));
    for block in [9, 10, 12] {
        assert_eq!(cache.lookup(block).map(|(_, dirty)| dirty), Some(false));
    }
    assert_eq!(cache.dirty_blocks(), 2);
    let counters = cache.counters();
    assert_eq!(
        (counters.band_rewrites, counters.band_rewrite_blocks),
        (1, 3)
    );
    // A tie (one block each in bands 0 and 5): the lower band.
    let (_, band) = finish_rewrite(&mut cache, VecDeque::new(), false);
    assert_eq!(band.band, 0);
    let (_, band) = finish_rewrite(&mut cache, VecDeque::new(), false);
    assert_eq!(band.band, 5);
    assert_eq!(cache.dirty_blocks(), 0);
    assert_eq!(cache.next_destage_io(false), None);
}

#[test]
fn nothing_reaches_home_inside_a_band_being_rewritten() {
    let mut cache = BlockCache::new(settings(64, 16, true)).unwrap();
    write(&mut cache, 9);
    write(&mut cache, 10);
    let first = cache.next_destage_io(false).unwrap();
    assert_eq!(cache.rewriting_band(), Some((BAND, BAND)));
    // A hit on a block being destaged stays in its slot (and dirty after).
    assert!(matches!(write(&mut cache, 9), BlockIo::WriteSlot { .. }));
    // A miss in the band takes a slot.
    assert!(matches!(write(&mut cache, 11), BlockIo::WriteSlot { .. }));
    // A discard or a write of zeroes would change home: it waits.
    let mut steps = Vec::new();
    cache.discard(12 * BLOCK, BLOCK, &mut steps);
    assert_eq!(steps[0].io, BlockIo::Blocked);
    // Writethrough sends writes home: inside the band they wait; outside
    // they go (to the media cache, counted).
    cache.set_mode(CacheMode::Writethrough);
    assert_eq!(write(&mut cache, 13), BlockIo::Blocked);
    assert_eq!(write(&mut cache, 9), BlockIo::Blocked);
    assert!(matches!(
        write(&mut cache, 20),
        BlockIo::WriteBoth { .. } | BlockIo::WriteHome
    ));
    assert_eq!(cache.counters().smr_home_writes, 1);
    cache.set_mode(CacheMode::Writeback);
    let (_, band) = finish_rewrite(&mut cache, VecDeque::from([first]), false);
    assert!(band.ok);
    assert_eq!(cache.counters().blocked_blocks, 3);
    // Block 9 was written during its rewrite: still dirty; 10 is clean; 11
    // was not part of it.
    assert_eq!(cache.lookup(9).map(|(_, dirty)| dirty), Some(true));
    assert_eq!(cache.lookup(10).map(|(_, dirty)| dirty), Some(false));
    assert_eq!(cache.lookup(11).map(|(_, dirty)| dirty), Some(true));
    // The band is free again.
    assert!(matches!(write(&mut cache, 13), BlockIo::WriteSlot { .. }));
}

#[test]
fn a_write_in_a_rewriting_band_that_finds_no_slot_waits_for_the_band() {
    // Four slots, three in the policy.
    let mut cache = BlockCache::new(settings(64, 4, true)).unwrap();
    write(&mut cache, 9);
    let first = cache.next_destage_io(false).unwrap();
    for block in [40, 41, 42] {
        assert!(matches!(
            write(&mut cache, block),
            BlockIo::WriteSlot { .. }
        ));
    }
    // Every slot is taken (9 is pinned by its rewrite, the rest are dirty).
    assert_eq!(write(&mut cache, 12), BlockIo::Blocked);
    let (_, band) = finish_rewrite(&mut cache, VecDeque::from([first]), false);
    assert_eq!(band.band, 1);
    // 9 was pushed out while its band was rewritten: clean now, its slot is free.
    assert_eq!(cache.lookup(9), None);
    assert!(matches!(write(&mut cache, 12), BlockIo::WriteSlot { .. }));
}

#[test]
fn a_band_with_a_home_write_in_flight_is_not_rewritten() {
    // A rewrite that read home before such a write landed would write the
    // old data back over it.
    let mut cache = BlockCache::new(settings(64, 16, true)).unwrap();
    cache.set_mode(CacheMode::Writethrough);
    let mut steps = Vec::new();
    cache.write(9 * BLOCK, BLOCK, &mut steps);
    let both = steps[0];
    assert!(matches!(both.io, BlockIo::WriteBoth { .. }), "{both:?}");
    cache.set_mode(CacheMode::Writeback);
    write(&mut cache, 10);
    write(&mut cache, 40);
    // Bands 1 and 5 hold one dirty block each; band 1 waits for the write.
    let (_, band) = finish_rewrite(&mut cache, VecDeque::new(), false);
    assert_eq!(band.band, 5);
    assert_eq!(cache.next_destage_io(false), None);
    cache.finish(&both, true);
    let (_, band) = finish_rewrite(&mut cache, VecDeque::new(), false);
    assert_eq!(band.band, 1);
}

#[test]
fn a_write_that_finds_no_slot_goes_home_and_is_counted() {
    // Two slots, one in the policy.
    let mut cache = BlockCache::new(settings(64, 2, true)).unwrap();
    write(&mut cache, 40);
    write(&mut cache, 41);
    let mut steps = Vec::new();
    cache.write(9 * BLOCK, BLOCK, &mut steps);
    let home = steps[0];
    assert_eq!(home.io, BlockIo::WriteHome);
    assert_eq!(cache.counters().smr_home_writes, 1);
    // The pushed-out dirty blocks (orphans) go first: their band.
    let (_, band) = finish_rewrite(&mut cache, VecDeque::new(), true);
    assert_eq!(band.band, 5);
    write(&mut cache, 10);
    assert_eq!(
        cache.next_destage_io(false),
        None,
        "block 9's write is in flight"
    );
    cache.finish(&home, true);
    assert!(cache.next_destage_io(false).is_some());
}

#[test]
fn idle_starts_a_rewrite_that_yields_and_the_watermark_one_that_does_not() {
    // Ten slots: four dirty blocks are the 40 % high watermark.
    let mut cache = BlockCache::new(settings(64, 10, true)).unwrap();
    write(&mut cache, 1);
    assert_eq!(
        cache.next_destage_io(true),
        None,
        "busy home, below the watermark"
    );
    let read = cache.next_destage_io(false).unwrap();
    assert!(matches!(
        read.kind,
        DestageIoKind::ReadSlot { block: 1, .. }
    ));
    assert_eq!(cache.destage_io_done(read, true), None);
    // Started for idle time: a waiting user keeps home's share back.
    assert_eq!(cache.next_destage_io(true), None);
    let home = cache.next_destage_io(false).unwrap();
    assert_eq!(home.kind, DestageIoKind::ReadHome);
    finish_rewrite(&mut cache, VecDeque::from([home]), false);
    for block in [2, 9, 17, 25] {
        write(&mut cache, block);
    }
    // At the high watermark: it starts and goes on under load.
    let (ios, band) = finish_rewrite(&mut cache, VecDeque::new(), true);
    assert_eq!(band.band, 0);
    assert!(ios.iter().any(|io| io.kind == DestageIoKind::WriteHome));
    // Three dirty (30 %): still above the low watermark, so it goes on.
    let (_, band) = finish_rewrite(&mut cache, VecDeque::new(), true);
    assert_eq!(band.band, 1);
    let (_, band) = finish_rewrite(&mut cache, VecDeque::new(), true);
    assert_eq!(band.band, 2);
    // One dirty (10 %): at the low watermark it stops until idle.
    assert_eq!(cache.next_destage_io(true), None);
    assert!(cache.next_destage_io(false).is_some());
}

#[test]
fn a_home_that_is_not_smr_keeps_per_block_writeback_and_its_admission() {
    let mut plain = settings(64, 16, false);
    plain.admission = AdmissionKind::Frequency { misses: 2 };
    let mut smr = plain.clone();
    smr.smr = settings(64, 16, true).smr;
    let mut plain = BlockCache::new(plain).unwrap();
    let mut smr = BlockCache::new(smr).unwrap();
    // First miss: admission says no; an SMR home stages it anyway.
    assert_eq!(write(&mut plain, 3), BlockIo::WriteHome);
    assert!(matches!(write(&mut smr, 3), BlockIo::WriteSlot { .. }));
    assert!(matches!(write(&mut plain, 3), BlockIo::WriteSlot { .. }));
    assert_eq!(plain.next_destage_io(false), None);
    assert_eq!(plain.rewriting_band(), None);
    assert_eq!(plain.dirty_bands().count(), 0);
    let writeback = plain
        .next_writeback(true)
        .expect("plain writeback by block");
    assert_eq!(writeback.block, 3);
    assert_eq!(smr.next_writeback(true), None);
    assert_eq!(plain.counters().smr_home_writes, 0);
}

#[test]
fn a_band_geometry_that_does_not_fit_the_block_is_refused() {
    let mut bad = settings(64, 16, true);
    bad.smr = Some(SmrStaging::new(30 << 20, 0));
    bad.block_bytes = 1 << 20;
    bad.volume_bytes = 64 << 20;
    assert!(bad.validate().is_ok(), "30 MiB bands of 1 MiB blocks");
    bad.smr = Some(SmrStaging::new(3 * BLOCK + 1, 0));
    bad.block_bytes = BLOCK;
    let message = bad.validate().unwrap_err();
    assert!(
        message.contains("SMR band") && message.contains("cache block"),
        "{message}"
    );
}

#[test]
fn a_rewrite_that_a_write_waits_for_stops_yielding() {
    let mut cache = BlockCache::new(settings(64, 16, true)).unwrap();
    write(&mut cache, 9);
    let read = cache.next_destage_io(false).unwrap();
    assert_eq!(cache.destage_io_done(read, true), None);
    assert_eq!(
        cache.next_destage_io(true),
        None,
        "idle-time rewrite yields"
    );
    cache.set_mode(CacheMode::Writethrough);
    assert_eq!(write(&mut cache, 10), BlockIo::Blocked);
    cache.set_mode(CacheMode::Writeback);
    let next = cache
        .next_destage_io(true)
        .expect("a user waits for this band");
    assert_eq!(next.kind, DestageIoKind::ReadHome);
}
