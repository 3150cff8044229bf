use super::*;
use tierd_common::rng::splitmix64;

const BLOCK: u64 = 4096;

fn settings(blocks: u64, slots: u32, mode: CacheMode) -> CacheSettings {
    let mut settings = CacheSettings::new(blocks * BLOCK, BLOCK, slots, mode);
    settings.policy = CacheKind::Lru;
    settings.reserve_slots = Some(1);
    settings.sequential_cutoff_bytes = 0;
    settings
}

fn one(cache: &mut BlockCache, write: bool, block: u64) -> BlockIo {
    let mut steps = Vec::new();
    if write {
        cache.write(block * BLOCK, BLOCK, &mut steps);
    } else {
        cache.read(block * BLOCK, BLOCK, &mut steps);
    }
    assert_eq!(steps.len(), 1);
    steps[0].io
}

fn finish(cache: &mut BlockCache, io: BlockIo) {
    if let Some(ticket) = io.ticket() {
        cache.done(ticket, true);
    } else if io == BlockIo::WriteHome {
        panic!("use finish_block for home writes");
    }
}

#[test]
fn settings_are_checked_with_the_setting_named() {
    let mut bad = settings(16, 4, CacheMode::Writeback);
    bad.block_bytes = 3000;
    assert!(bad.validate().unwrap_err().contains("power of two"));
    bad.block_bytes = 2 << 20;
    assert!(bad.validate().unwrap_err().contains("4KiB to 1MiB"));
    let mut bad = settings(16, 1, CacheMode::Writeback);
    assert!(bad.validate().unwrap_err().contains("at least 2"));
    bad.slots = 4;
    bad.dirty_low_percent = 50;
    bad.dirty_high_percent = 40;
    assert!(bad.validate().unwrap_err().contains("watermarks"));
    assert_eq!(CacheMode::parse("writeback"), Ok(CacheMode::Writeback));
    assert!(CacheMode::parse("write-back")
        .unwrap_err()
        .contains("writethrough"));
}

#[test]
fn a_read_miss_fills_and_the_next_read_hits() {
    let mut cache = BlockCache::new(settings(16, 4, CacheMode::Writeback)).unwrap();
    let io = one(&mut cache, false, 3);
    let BlockIo::Fill { ticket } = io else {
        panic!("{io:?}")
    };
    // While the fill is in flight the block reads from home.
    assert_eq!(one(&mut cache, false, 3), BlockIo::ReadHome);
    cache.done(ticket, true);
    assert_eq!(cache.lookup(3), Some((ticket.slot, false)));
    let io = one(&mut cache, false, 3);
    assert!(
        matches!(io, BlockIo::ReadSlot { dirty: false, .. }),
        "{io:?}"
    );
    finish(&mut cache, io);
    let counters = cache.counters();
    assert_eq!((counters.read_blocks, counters.read_hit_blocks), (3, 1));
}

/// `held_blocks` lists loading, clean and dirty blocks, whichever way it
/// looks (through the range when it is short, through the map when that is
/// smaller), and forgets a block once its slot is released.
#[test]
fn held_blocks_are_every_mapped_block_in_the_range() {
    let mut cache = BlockCache::new(settings(64, 8, CacheMode::Writeback)).unwrap();
    let loading = one(&mut cache, false, 3);
    assert!(matches!(loading, BlockIo::Fill { .. }), "{loading:?}");
    let clean = one(&mut cache, false, 9);
    finish(&mut cache, clean);
    let dirty = one(&mut cache, true, 10);
    assert!(matches!(dirty, BlockIo::WriteSlot { .. }), "{dirty:?}");
    finish(&mut cache, dirty);
    let held = |cache: &BlockCache, blocks: std::ops::Range<u64>| {
        let mut out = Vec::new();
        cache.held_blocks(blocks, &mut out);
        out.sort_unstable();
        out
    };
    assert_eq!(held(&cache, 0..64), vec![3, 9, 10], "through the map");
    assert_eq!(held(&cache, 9..11), vec![9, 10], "through the range");
    assert_eq!(held(&cache, 4..9), Vec::<u64>::new());
    // A discard covering the clean block releases its slot.
    let mut steps = Vec::new();
    cache.discard(9 * BLOCK, BLOCK, &mut steps);
    assert_eq!(steps[0].io, BlockIo::WriteHome);
    cache.finish(&steps[0], true);
    assert_eq!(held(&cache, 0..64), vec![3, 10]);
}

#[test]
fn writeback_writes_stay_dirty_until_written_back_and_a_racing_write_keeps_them_dirty() {
    let mut cache = BlockCache::new(settings(16, 4, CacheMode::Writeback)).unwrap();
    let io = one(&mut cache, true, 5);
    assert!(matches!(io, BlockIo::WriteSlot { .. }), "{io:?}");
    finish(&mut cache, io);
    assert_eq!(cache.dirty_blocks(), 1);
    // Below the high watermark writeback waits for idle time.
    assert_eq!(cache.next_writeback(false), None);
    let writeback = cache.next_writeback(true).unwrap();
    assert_eq!(writeback.block, 5);
    // A write lands after the writeback read the slot.
    let io = one(&mut cache, true, 5);
    finish(&mut cache, io);
    cache.writeback_done(writeback, true);
    assert_eq!(cache.dirty_blocks(), 1, "the copy home is stale");
    let writeback = cache.next_writeback(true).unwrap();
    cache.writeback_done(writeback, true);
    assert_eq!(cache.dirty_blocks(), 0);
    assert_eq!(cache.counters().writebacks, 1);
}

#[test]
fn a_partial_write_miss_merges_and_writethrough_writes_both() {
    let mut cache = BlockCache::new(settings(16, 4, CacheMode::Writeback)).unwrap();
    let mut steps = Vec::new();
    cache.write(BLOCK + 512, 1024, &mut steps);
    assert!(matches!(steps[0].io, BlockIo::WriteSlotMerged { .. }));
    finish(&mut cache, steps[0].io);
    cache.set_mode(CacheMode::Writethrough);
    let io = one(&mut cache, true, 2);
    assert!(
        matches!(io, BlockIo::WriteBoth { merge: false, .. }),
        "{io:?}"
    );
    finish(&mut cache, io);
    assert_eq!(cache.lookup(2).map(|(_, dirty)| dirty), Some(false));
    // Block 1 is dirty from writeback: draining writes it back without idle.
    let writeback = cache.next_writeback(false).unwrap();
    assert_eq!(writeback.block, 1);
    cache.writeback_done(writeback, true);
    cache.set_mode(CacheMode::Writearound);
    assert_eq!(one(&mut cache, true, 9), BlockIo::WriteHome);
}

#[test]
fn a_dirty_victim_is_written_back_before_its_slot_is_reused() {
    // 3 slots, 1 reserved: the policy holds 2 blocks.
    let mut cache = BlockCache::new(settings(16, 3, CacheMode::Writeback)).unwrap();
    for block in [0, 1] {
        let io = one(&mut cache, true, block);
        finish(&mut cache, io);
    }
    // Block 2 evicts dirty 0: it becomes an orphan, 2 takes the reserve.
    let io = one(&mut cache, false, 2);
    let BlockIo::Fill { ticket } = io else {
        panic!("{io:?}")
    };
    cache.done(ticket, true);
    assert_eq!(cache.counters().dirty_evictions, 1);
    assert!(cache.lookup(0).is_some(), "an orphan stays readable");
    // Block 3 evicts dirty 1; no slot is free until 0 is written back.
    assert_eq!(one(&mut cache, false, 3), BlockIo::ReadHome);
    assert_eq!(cache.counters().no_slot, 1);
    // Orphans are written back even when writeback is not otherwise wanted.
    let writeback = cache.next_writeback(false).unwrap();
    assert_eq!(writeback.block, 0);
    cache.writeback_done(writeback, true);
    assert!(cache.lookup(0).is_none());
    assert_eq!(cache.free_slots(), 1);
}

#[test]
fn with_a_journal_a_released_slot_waits_for_the_commit() {
    let mut with_journal = settings(16, 3, CacheMode::Writethrough);
    with_journal.journal = true;
    let mut cache = BlockCache::new(with_journal).unwrap();
    for block in [0, 1, 2] {
        let io = one(&mut cache, false, block);
        finish(&mut cache, io);
    }
    // 2 evicted 0 (clean) and took the reserve; 0's slot is released.
    assert_eq!(cache.free_slots(), 0);
    assert_eq!(one(&mut cache, false, 3), BlockIo::ReadHome);
    let commit = cache.take_changes();
    assert!(commit
        .changes
        .contains(&Change::Unmapped { block: 0, slot: 0 }));
    assert!(commit
        .changes
        .contains(&Change::Mapped { block: 2, slot: 2 }));
    cache.committed(commit);
    assert_eq!(cache.free_slots(), 2);
}

#[test]
fn sequential_runs_bypass_misses_but_still_hit() {
    let mut with_cutoff = settings(64, 8, CacheMode::Writeback);
    with_cutoff.sequential_cutoff_bytes = 4 * BLOCK;
    let mut cache = BlockCache::new(with_cutoff).unwrap();
    let io = one(&mut cache, false, 6);
    finish(&mut cache, io);
    let mut steps = Vec::new();
    for block in 0..8 {
        steps.clear();
        cache.read(block * BLOCK, BLOCK, &mut steps);
        for step in &steps {
            finish(&mut cache, step.io);
        }
        let expected_cached = block < 3 || block == 6;
        assert_eq!(
            cache.lookup(block).is_some(),
            expected_cached,
            "block {block}"
        );
    }
    assert_eq!(cache.counters().bypassed, 4);
}

#[test]
fn frequency_admission_keeps_one_touch_blocks_out() {
    let mut filtered = settings(64, 8, CacheMode::Writeback);
    filtered.admission = AdmissionKind::Frequency { misses: 2 };
    let mut cache = BlockCache::new(filtered).unwrap();
    assert_eq!(one(&mut cache, false, 1), BlockIo::ReadHome);
    let io = one(&mut cache, false, 1);
    assert!(matches!(io, BlockIo::Fill { .. }));
    finish(&mut cache, io);
    assert_eq!(cache.counters().rejected, 1);
}

#[test]
fn detach_drains_even_while_a_block_is_rewritten() {
    let mut cache = BlockCache::new(settings(16, 8, CacheMode::Writeback)).unwrap();
    for block in 0..4 {
        let io = one(&mut cache, true, block);
        finish(&mut cache, io);
    }
    cache.detach();
    assert!(!cache.detached());
    let mut rounds = 0;
    while let Some(writeback) = cache.next_writeback(false) {
        cache.writeback_done(writeback, true);
        // A user keeps writing block 0 between writebacks (the caller
        // serializes a block's writes with its writeback).
        let io = one(&mut cache, true, 0);
        assert!(matches!(io, BlockIo::WriteBoth { .. }), "{io:?}");
        finish(&mut cache, io);
        rounds += 1;
    }
    assert_eq!(rounds, 4);
    assert!(cache.detached());
    assert_eq!(
        one(&mut cache, false, 9),
        BlockIo::ReadHome,
        "no allocation while detached"
    );
}

#[test]
fn restore_checks_what_it_is_given() {
    let base = settings(16, 4, CacheMode::Writeback);
    let error = BlockCache::restore(base.clone(), [(1, 9, false)]).unwrap_err();
    assert!(error.to_string().contains("slot 9"), "{error}");
    let error = BlockCache::restore(base.clone(), [(1, 0, false), (2, 0, true)]).unwrap_err();
    assert_eq!(
        error,
        RestoreErrorOr::Restore(RestoreError::SlotTwice { slot: 0 })
    );
    let error = BlockCache::restore(base.clone(), [(99, 0, false)]).unwrap_err();
    assert!(
        error.to_string().contains("volume has 16 blocks"),
        "{error}"
    );
    let mut cache = BlockCache::restore(base, [(1, 2, true), (3, 0, false)]).unwrap();
    assert_eq!(cache.lookup(1), Some((2, true)));
    assert_eq!((cache.occupancy_blocks(), cache.dirty_blocks()), (2, 1));
    assert!(matches!(
        one(&mut cache, false, 3),
        BlockIo::ReadSlot { .. }
    ));
}

/// Data-level model: random reads, writes and discards over random
/// policies, modes and admissions, their IOs completing out of order, with
/// writebacks, commits, mode switches and crashes. Every read that no write
/// overlaps returns the latest version; after a crash, the recovered cache
/// (committed mappings, all dirty) serves every block written before the
/// last flush as it was and every other block as some version written since.
#[test]
fn random_interleavings_never_serve_wrong_data() {
    let seeds = match std::env::var("CACHE_MODEL_SEED") {
        Ok(seed) => {
            let seed: u64 = seed.parse().expect("CACHE_MODEL_SEED is a number");
            seed..seed + 1
        }
        Err(_) => 0..2_000,
    };
    let (mut loads, mut rewrites, mut blocked) = (0, 0, 0);
    let all = seeds.end - seeds.start > 1;
    for seed in seeds {
        let counters = run_model(seed);
        loads += counters.promotion_loads;
        rewrites += counters.band_rewrites;
        blocked += counters.blocked_blocks;
    }
    // Promotion copies ran, and were checked, in the interleavings.
    assert!(
        !all || loads > 1000,
        "{loads} promotion loads over the seeds"
    );
    // So did SMR band rewrites, and writes that waited for them.
    assert!(
        !all || (rewrites > 1000 && blocked > 100),
        "{rewrites} band rewrites, {blocked} blocked blocks over the seeds"
    );
}

#[derive(Clone, Copy, Debug)]
enum Pending {
    Step {
        step: Step,
        version: u64,
        read_from: Option<u64>,
        is_read: bool,
        started: bool,
    },
    Writeback {
        writeback: Writeback,
        copied: Option<u64>,
    },
    /// A promotion's copy: read home (holding the block as a reader), then
    /// write the slot.
    Load { load: Load, copied: Option<u64> },
    /// One IO of an SMR band rewrite (it holds no block lock).
    Destage { io: DestageIo },
}

/// An SMR home's side of the model: the band rewrite's data in hand, and
/// the writes waiting for their band (`BlockIo::Blocked`: block, version,
/// discard). A waiting write holds its block, as the engine's lock would.
#[derive(Default)]
struct SmrModel {
    buffer: FastMap<BlockId, u64>,
    blocked: Vec<(BlockId, u64, bool)>,
}

/// One random interleaving; what its cache counted.
fn run_model(seed: u64) -> CacheCounters {
    let mut state = seed;
    let mut random = move |bound: u64| splitmix64(&mut state) % bound;
    let blocks = 12u64;
    let slots = 3 + random(5) as u32;
    let mode = [
        CacheMode::Writeback,
        CacheMode::Writethrough,
        CacheMode::Writearound,
    ][random(3) as usize];
    let mut cache_settings = settings(blocks, slots, mode);
    cache_settings.policy = [
        CacheKind::Fifo,
        CacheKind::Lru,
        CacheKind::Arc,
        CacheKind::S3fifo,
    ][random(4) as usize];
    cache_settings.journal = random(2) == 0;
    cache_settings.reserve_slots = Some(1 + random(2) as u32);
    if random(3) == 0 {
        cache_settings.admission = AdmissionKind::Frequency { misses: 2 };
    }
    // A third of the seeds run over an SMR home (bands of 4 blocks), drawn
    // from a stream of their own so the other seeds run as before.
    let mut smr_state = seed ^ 0x736d_725f_686f_6d65;
    let smr_on = splitmix64(&mut smr_state).is_multiple_of(3);
    if smr_on {
        cache_settings.smr = Some(SmrStaging {
            band_bytes: 4 * BLOCK,
            first_band_offset_bytes: splitmix64(&mut smr_state) % 4 * BLOCK,
            chunk_bytes: (1 + splitmix64(&mut smr_state) % 2) * BLOCK,
            chunks_in_flight: 1 + (splitmix64(&mut smr_state) % 2) as u32,
        });
    }
    let mut smr = SmrModel::default();
    let mut cache = BlockCache::new(cache_settings.clone()).unwrap();
    let mut home = vec![0u64; blocks as usize];
    let mut fast = vec![u64::MAX; slots as usize];
    let mut latest = vec![0u64; blocks as usize];
    let mut writes_in_flight = vec![0u32; blocks as usize];
    let mut flushed = vec![0u64; blocks as usize];
    let mut written_since_flush: Vec<Vec<u64>> = vec![Vec::new(); blocks as usize];
    let mut durable_map: FastMap<BlockId, SlotId> = FastMap::default();
    let mut pending: Vec<Pending> = Vec::new();
    let mut next_version = 1u64;
    let context = format!("seed {seed} {cache_settings:?}");
    for _ in 0..400 {
        match random(10) {
            0..=5 => {
                let block = random(blocks);
                let is_read = random(2) == 0;
                // The caller serializes conflicting IO on a block.
                let busy = pending.iter().any(|p| match p {
                    Pending::Step {
                        step,
                        is_read: other_read,
                        ..
                    } => step.block == block && !(is_read && *other_read),
                    Pending::Writeback { writeback, .. } => writeback.block == block,
                    // A load holds its block once it has started; before,
                    // a write may be planned first (it overtakes the load).
                    Pending::Load { load, copied } => {
                        load.block == block && !is_read && copied.is_some()
                    }
                    Pending::Destage { .. } => false,
                }) || smr.blocked.iter().any(|&(waiting, ..)| waiting == block);
                if busy {
                    continue;
                }
                let mut steps = Vec::new();
                let version = next_version;
                next_version += 1;
                let discard = !is_read && random(8) == 0;
                if is_read {
                    cache.read(block * BLOCK, BLOCK, &mut steps);
                } else if discard {
                    cache.discard(block * BLOCK, BLOCK, &mut steps);
                } else {
                    cache.write(block * BLOCK, BLOCK, &mut steps);
                }
                for step in steps {
                    if step.io == BlockIo::Blocked {
                        assert!(!is_read, "{context}: a read planned Blocked");
                        writes_in_flight[block as usize] += 1;
                        smr.blocked.push((block, version, discard));
                        continue;
                    }
                    if std::env::var_os("CACHE_MODEL_TRACE").is_some() {
                        eprintln!(
                            "plan {} {step:?} v{version}",
                            if is_read { "read" } else { "write" }
                        );
                    }
                    if !is_read {
                        writes_in_flight[block as usize] += 1;
                    }
                    pending.push(Pending::Step {
                        step,
                        version,
                        read_from: None,
                        is_read,
                        started: false,
                    });
                }
            }
            6 | 7 => {
                if !pending.is_empty() {
                    let index = random(pending.len() as u64) as usize;
                    advance(
                        &mut pending,
                        index,
                        &mut cache,
                        &mut home,
                        &mut fast,
                        &mut latest,
                        &mut writes_in_flight,
                        &mut written_since_flush,
                        &mut smr,
                        &context,
                    );
                }
            }
            8 if random(3) == 0 => {
                if random(2) == 0 {
                    cache.promote(random(blocks), 1 + random(4));
                } else {
                    let loads: Vec<Load> = (0..1 + random(3))
                        .filter_map(|_| cache.next_load())
                        .collect();
                    for load in loads {
                        if std::env::var_os("CACHE_MODEL_TRACE").is_some() {
                            eprintln!("plan {load:?}");
                        }
                        pending.push(Pending::Load { load, copied: None });
                    }
                }
            }
            8 if smr_on => {
                let user_waiting = random(2) == 0;
                for _ in 0..1 + random(3) {
                    match cache.next_destage_io(user_waiting) {
                        Some(io) => pending.push(Pending::Destage { io }),
                        None => break,
                    }
                }
            }
            8 => {
                if let Some(writeback) = cache.next_writeback(random(2) == 0) {
                    // The writeback waits for the block's IO in flight.
                    while let Some(index) = pending.iter().position(|p| {
                        matches!(p, Pending::Step { step, .. } if step.block == writeback.block)
                    }) {
                        advance(&mut pending, index, &mut cache, &mut home, &mut fast, &mut latest, &mut writes_in_flight, &mut written_since_flush, &mut smr, &context);
                    }
                    pending.push(Pending::Writeback {
                        writeback,
                        copied: None,
                    });
                }
            }
            _ => match random(6) {
                0 => {
                    // FLUSH: everything in flight completes, then the commit.
                    if std::env::var_os("CACHE_MODEL_TRACE").is_some() {
                        eprintln!("flush");
                    }
                    while !pending.is_empty() {
                        advance(
                            &mut pending,
                            0,
                            &mut cache,
                            &mut home,
                            &mut fast,
                            &mut latest,
                            &mut writes_in_flight,
                            &mut written_since_flush,
                            &mut smr,
                            &context,
                        );
                    }
                    commit(&mut cache, &mut durable_map);
                    flushed.clone_from(&latest);
                    written_since_flush.iter_mut().for_each(Vec::clear);
                }
                1 => commit(&mut cache, &mut durable_map),
                2 => cache.set_mode(
                    [
                        CacheMode::Writeback,
                        CacheMode::Writethrough,
                        CacheMode::Writearound,
                    ][random(3) as usize],
                ),
                3 if cache_settings.journal => {
                    if std::env::var_os("CACHE_MODEL_TRACE").is_some() {
                        eprintln!("crash");
                    }
                    // Crash: some in-flight IO lands, the rest is lost.
                    for _ in 0..random(pending.len() as u64 + 1) {
                        let index = random(pending.len() as u64) as usize;
                        advance(
                            &mut pending,
                            index,
                            &mut cache,
                            &mut home,
                            &mut fast,
                            &mut latest,
                            &mut writes_in_flight,
                            &mut written_since_flush,
                            &mut smr,
                            &context,
                        );
                    }
                    pending.clear();
                    smr = SmrModel::default();
                    let mut entries: Vec<(BlockId, SlotId, bool)> = durable_map
                        .iter()
                        .map(|(&block, &slot)| (block, slot, true))
                        .collect();
                    entries.sort_unstable();
                    let mut settings_now = cache_settings.clone();
                    settings_now.mode = cache.mode();
                    cache = BlockCache::restore(settings_now, entries).unwrap();
                    for block in 0..blocks {
                        let served = match cache.lookup(block) {
                            Some((slot, _)) => fast[slot as usize],
                            None => home[block as usize],
                        };
                        let index = block as usize;
                        assert!(
                            served == flushed[index] || written_since_flush[index].contains(&served),
                            "{context}: after a crash block {block} serves {served}, flushed {}, written since {:?}",
                            flushed[index],
                            written_since_flush[index]
                        );
                        latest[index] = served;
                        flushed[index] = served;
                    }
                    written_since_flush.iter_mut().for_each(Vec::clear);
                    writes_in_flight.iter_mut().for_each(|count| *count = 0);
                }
                _ => {}
            },
        }
    }
    // Drain: complete everything, write everything back, home is current.
    while !pending.is_empty() {
        advance(
            &mut pending,
            0,
            &mut cache,
            &mut home,
            &mut fast,
            &mut latest,
            &mut writes_in_flight,
            &mut written_since_flush,
            &mut smr,
            &context,
        );
    }
    cache.detach();
    loop {
        while let Some(io) = cache.next_destage_io(false) {
            pending.push(Pending::Destage { io });
        }
        if pending.is_empty() {
            break;
        }
        while !pending.is_empty() {
            advance(
                &mut pending,
                0,
                &mut cache,
                &mut home,
                &mut fast,
                &mut latest,
                &mut writes_in_flight,
                &mut written_since_flush,
                &mut smr,
                &context,
            );
        }
    }
    assert!(smr.blocked.is_empty(), "{context}: writes still wait");
    while let Some(writeback) = cache.next_writeback(false) {
        let value = fast[writeback.slot as usize];
        home[writeback.block as usize] = value;
        cache.writeback_done(writeback, true);
    }
    assert!(cache.detached(), "{context}");
    assert_eq!(home, latest, "{context}: home after detach");
    for (block, slot, _) in cache.mappings() {
        assert_eq!(
            fast[slot as usize], latest[block as usize],
            "{context}: slot {slot} of block {block}"
        );
    }
    cache.counters()
}

fn commit(cache: &mut BlockCache, durable_map: &mut FastMap<BlockId, SlotId>) {
    let commit = cache.take_changes();
    if std::env::var_os("CACHE_MODEL_TRACE").is_some() {
        eprintln!("commit {:?}", commit.changes);
    }
    for change in &commit.changes {
        match *change {
            Change::Mapped { block, slot } => {
                durable_map.insert(block, slot);
            }
            Change::Unmapped { block, slot } => {
                assert_eq!(durable_map.remove(&block), Some(slot));
            }
        }
    }
    cache.committed(commit);
}

/// Moves pending IO `index` one stage on (two-stage IOs read first, write later).
#[allow(clippy::too_many_arguments)]
fn advance(
    pending: &mut Vec<Pending>,
    index: usize,
    cache: &mut BlockCache,
    home: &mut [u64],
    fast: &mut [u64],
    latest: &mut [u64],
    writes_in_flight: &mut [u32],
    written_since_flush: &mut [Vec<u64>],
    smr: &mut SmrModel,
    context: &str,
) {
    // A load takes its block's reader lock only after it was planned: a
    // write planned before that (it holds the block) finishes first.
    if let Pending::Load { load, copied: None } = pending[index] {
        let write = pending.iter().position(|other| {
            matches!(other, Pending::Step { step, is_read: false, .. } if step.block == load.block)
        });
        if let Some(write) = write {
            return advance(
                pending,
                write,
                cache,
                home,
                fast,
                latest,
                writes_in_flight,
                written_since_flush,
                smr,
                context,
            );
        }
    }
    if std::env::var_os("CACHE_MODEL_TRACE").is_some() {
        eprintln!("advance {:?}", pending[index]);
    }
    match &mut pending[index] {
        Pending::Destage { io } => {
            let io = *io;
            let blocks =
                io.offset_bytes / BLOCK..(io.offset_bytes + io.length_bytes).div_ceil(BLOCK);
            match io.kind {
                DestageIoKind::ReadSlot { block, slot } => {
                    smr.buffer.insert(block, fast[slot as usize]);
                }
                DestageIoKind::ReadHome => {
                    for block in blocks {
                        smr.buffer.insert(block, home[block as usize]);
                    }
                }
                DestageIoKind::WriteHome => {
                    for block in blocks {
                        home[block as usize] = *smr.buffer.get(&block).unwrap_or_else(|| {
                            panic!("{context}: block {block} written before it was read")
                        });
                    }
                }
            }
            if cache.destage_io_done(io, true).is_some() {
                smr.buffer.clear();
                // The band is done: the writes that waited for it go now.
                for (block, version, discard) in std::mem::take(&mut smr.blocked) {
                    let mut steps = Vec::new();
                    if discard {
                        cache.discard(block * BLOCK, BLOCK, &mut steps);
                    } else {
                        cache.write(block * BLOCK, BLOCK, &mut steps);
                    }
                    for step in steps {
                        if step.io == BlockIo::Blocked {
                            smr.blocked.push((block, version, discard));
                        } else {
                            pending.push(Pending::Step {
                                step,
                                version,
                                read_from: None,
                                is_read: false,
                                started: false,
                            });
                        }
                    }
                }
            }
        }
        Pending::Writeback { writeback, copied } => {
            if copied.is_none() {
                *copied = Some(fast[writeback.slot as usize]);
                return;
            }
            let (writeback, value) = (*writeback, copied.unwrap());
            home[writeback.block as usize] = value;
            cache.writeback_done(writeback, true);
        }
        Pending::Load { load, copied } => {
            let block = load.block as usize;
            if copied.is_none() {
                *copied = Some(home[block]);
                return;
            }
            let (load, value) = (*load, copied.unwrap());
            fast[load.ticket.slot as usize] = value;
            cache.load_done(load, true);
            // Unless a write overtook it, the block is now cached: with
            // the slot holding what home held.
            if let Some((slot, _)) = cache.lookup(load.block) {
                if slot == load.ticket.slot && writes_in_flight[block] == 0 {
                    assert_eq!(value, latest[block], "{context}: load of block {block}");
                }
            }
        }
        Pending::Step {
            step,
            version,
            read_from,
            is_read,
            started,
        } => {
            let block = step.block as usize;
            let two_stage = matches!(
                step.io,
                BlockIo::Fill { .. } | BlockIo::WriteSlotMerged { .. }
            );
            if two_stage && !*started {
                *started = true;
                *read_from = Some(home[block]);
                return;
            }
            let version = *version;
            match step.io {
                BlockIo::ReadSlot { ticket, .. } => {
                    let value = fast[ticket.slot as usize];
                    if writes_in_flight[block] == 0 {
                        assert_eq!(
                            value, latest[block],
                            "{context}: slot read of block {block}"
                        );
                    }
                    cache.done(ticket, true);
                }
                BlockIo::ReadHome => {
                    if writes_in_flight[block] == 0 {
                        assert_eq!(
                            home[block], latest[block],
                            "{context}: home read of block {block}"
                        );
                    }
                }
                BlockIo::Fill { ticket } => {
                    let value = read_from.unwrap();
                    if writes_in_flight[block] == 0 {
                        assert_eq!(value, latest[block], "{context}: fill of block {block}");
                    }
                    fast[ticket.slot as usize] = value;
                    cache.done(ticket, true);
                }
                BlockIo::WriteSlot { ticket } | BlockIo::WriteSlotMerged { ticket } => {
                    fast[ticket.slot as usize] = version;
                    cache.done(ticket, true);
                }
                BlockIo::WriteBoth { ticket, .. } => {
                    fast[ticket.slot as usize] = version;
                    home[block] = version;
                    cache.finish(step, true);
                }
                BlockIo::WriteHome => {
                    home[block] = version;
                    cache.finish(step, true);
                }
                BlockIo::Blocked => unreachable!("a blocked step is never pending"),
            }
            if !*is_read {
                writes_in_flight[block] -= 1;
                latest[block] = version;
                written_since_flush[block].push(version);
            }
        }
    }
    pending.swap_remove(index);
}

/// Sustained misses with a journal (the live engine): released slots wait
/// for commits, yet the cache keeps taking new blocks at the rate commits
/// free slots. Before `evict_for_slots`, a miss that found no slot left the
/// policy one short of full, later misses evicted nothing, and the contents
/// froze: in the engine, 91 evictions in 10 s of random writes at 90k IOPS.
#[test]
fn sustained_misses_with_a_journal_keep_replacing_blocks() {
    let mut with_journal = settings(10_000, 64, CacheMode::Writethrough);
    with_journal.journal = true;
    with_journal.reserve_slots = Some(8);
    let mut cache = BlockCache::new(with_journal).unwrap();
    let mut allocated_after_fill = 0;
    for block in 0..2_000u64 {
        let io = one(&mut cache, false, block);
        if io.ticket().is_some() && block >= 64 {
            allocated_after_fill += 1;
        }
        finish(&mut cache, io);
        // A commit every 16 misses: slower than misses, as in the engine.
        if block % 16 == 15 {
            let commit = cache.take_changes();
            cache.committed(commit);
        }
    }
    // Each commit frees what the misses since the last one evicted, up to
    // the reserve: 8 allocations a commit; 121 commits after the fill.
    assert!(
        allocated_after_fill >= 121 * 8,
        "{allocated_after_fill} allocations after the fill"
    );
    // The cache holds recent blocks, not the first ones it saw.
    let recent = (1_900..2_000)
        .filter(|&b| cache.lookup(b).is_some())
        .count();
    assert!(recent >= 8, "only {recent} of the last 100 blocks cached");
    assert!((0..56).all(|b| cache.lookup(b).is_none()));
}
