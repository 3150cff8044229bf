//! Cache volumes: the block cache in the live IO path. Hits, writeback,
//! crash safety (CrashDisk tiers: unflushed sectors may be lost or torn),
//! warm recovery, clean-stop dirty bits, detach under a writer, and a lost
//! cache tier.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tierd_common::clock::{Clock, ManualClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_core::cache::CacheMode;
use tierd_engine::device::crash::CrashDisk;
use tierd_engine::device::BlockDevice;
use tierd_engine::volume::{CacheOptions, CacheStep, TierSpec, Volume, VolumeOptions};
use tierd_policy::PolicyConfig;

const SEGMENT: u64 = 1 << 20;
const BLOCK: u64 = 4096;

struct Stack {
    fast: Arc<CrashDisk>,
    home: Arc<CrashDisk>,
    volume_bytes: u64,
}

impl Stack {
    fn new(cache_blocks: u64, volume_bytes: u64) -> Stack {
        Stack {
            fast: Arc::new(CrashDisk::new("ssd", cache_blocks * BLOCK)),
            home: Arc::new(CrashDisk::new(
                "hdd",
                volume_bytes.div_ceil(SEGMENT) * SEGMENT,
            )),
            volume_bytes,
        }
    }

    fn specs(&self) -> Vec<TierSpec> {
        two_tiers(self.fast.clone(), self.home.clone())
    }

    fn crash(&self, seed: u64) {
        let mut rng = SeededRng::new(seed);
        self.fast.crash(&mut rng);
        self.home.crash(&mut rng);
    }
}

/// The stack `ssd` over `hdd`, both persistent, on these devices.
fn two_tiers(fast: Arc<dyn BlockDevice>, home: Arc<dyn BlockDevice>) -> Vec<TierSpec> {
    let tier = |name: &str, device: Arc<dyn BlockDevice>| TierSpec {
        name: name.into(),
        device,
        volatile: false,
        unsafe_volatile: false,
    };
    vec![tier("ssd", fast), tier("hdd", home)]
}

/// A writeback cache volume over `specs`, opened (or reopened) in `dir`.
fn open_writeback(
    volume_bytes: u64,
    specs: Vec<TierSpec>,
    dir: &std::path::Path,
    clock: &Arc<dyn Clock>,
) -> Volume {
    Volume::open_with_cache(
        options(volume_bytes),
        specs,
        dir,
        clock.clone(),
        Some(cache_options(CacheMode::Writeback)),
    )
    .unwrap()
    .0
}

/// Home holds 1 (durable); the cache tier holds 2, dirty, when it is lost
/// (`fast` gone and marked unavailable): block 0 no longer reads. Returns a
/// block-sized buffer.
fn lose_dirty_block_zero(
    volume: &Volume,
    fast: &tierd_engine::device::fault::FaultDevice,
    clock: &Arc<ManualClock>,
) -> Vec<u8> {
    volume.write(0, &block_of(1), false).unwrap();
    write_back_all(volume, clock);
    volume.write(0, &block_of(2), false).unwrap();
    volume.flush().unwrap();
    fast.set_gone(true);
    assert!(volume.set_tier_unavailable("ssd", true));
    let mut data = vec![0u8; BLOCK as usize];
    assert!(volume.read(0, &mut data).is_err(), "block 0 was dirty");
    data
}

fn options(volume_bytes: u64) -> VolumeOptions {
    VolumeOptions {
        name: "c".into(),
        size_bytes: volume_bytes,
        segment_bytes: SEGMENT,
        chunk_bytes: 64 << 10,
        period_ns: 1_000_000_000,
        checkpoint_every_periods: 1,
        policy: PolicyConfig::None,
        migration: Default::default(),
    }
}

fn cache_options(mode: CacheMode) -> CacheOptions {
    let mut options = CacheOptions::new("ssd", BLOCK, mode);
    options.sequential_cutoff_bytes = 0;
    options.policy = tierd_policy::cache::CacheKind::Lru;
    options
}

fn open(stack: &Stack, meta: &std::path::Path, clock: &Arc<ManualClock>) -> Volume {
    open_mode(stack, meta, clock, CacheMode::Writeback)
}

fn open_mode(
    stack: &Stack,
    meta: &std::path::Path,
    clock: &Arc<ManualClock>,
    mode: CacheMode,
) -> Volume {
    open_cache(stack, meta, clock, cache_options(mode))
}

/// A writeback cache volume with adaptive admission (and its promotions).
fn open_adaptive(stack: &Stack, meta: &std::path::Path, clock: &Arc<ManualClock>) -> Volume {
    let mut adaptive = cache_options(CacheMode::Writeback);
    adaptive.admission = tierd_core::cache::AdmissionKind::Adaptive;
    open_cache(stack, meta, clock, adaptive)
}

fn open_cache(
    stack: &Stack,
    meta: &std::path::Path,
    clock: &Arc<ManualClock>,
    cache: CacheOptions,
) -> Volume {
    let clock: Arc<dyn Clock> = clock.clone();
    Volume::open_with_cache(
        options(stack.volume_bytes),
        stack.specs(),
        meta,
        clock,
        Some(cache),
    )
    .unwrap()
    .0
}

fn block_of(tag: u64) -> Vec<u8> {
    let mut data = vec![0u8; BLOCK as usize];
    for (index, chunk) in data.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(tag ^ (index as u64) << 48).to_le_bytes());
    }
    data
}

fn read_block(volume: &Volume, block: u64) -> Vec<u8> {
    let mut data = vec![0u8; BLOCK as usize];
    volume.read(block * BLOCK, &mut data).unwrap();
    data
}

/// Runs writeback until nothing is dirty (the clock says idle).
fn write_back_all(volume: &Volume, clock: &ManualClock) {
    clock.advance_ns(1_000_000_000);
    for _ in 0..100_000 {
        match volume.cache_step().unwrap() {
            CacheStep::Idle if volume.cache_status().unwrap().dirty_bytes == 0 => return,
            _ => {}
        }
    }
    panic!("writeback did not finish");
}

#[test]
fn writes_stay_on_the_cache_tier_until_written_back_and_reads_hit() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = open(&stack, dir.path(), &clock);
    for block in 0..8 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    let status = volume.cache_status().unwrap();
    assert_eq!(status.mode, "writeback");
    assert_eq!(status.dirty_bytes, 8 * BLOCK);
    // Home has none of it yet.
    let mut home = vec![0u8; BLOCK as usize];
    stack.home.read_at(3 * BLOCK, &mut home).unwrap();
    assert_eq!(home, vec![0u8; BLOCK as usize]);
    for block in 0..8 {
        assert_eq!(read_block(&volume, block), block_of(block));
    }
    assert_eq!(volume.cache_status().unwrap().read_hit_ratio, 1.0);
    write_back_all(&volume, &clock);
    stack.home.read_at(3 * BLOCK, &mut home).unwrap();
    assert_eq!(home, block_of(3));
    // A read miss fills, the next read hits; a partial write merges.
    let mut piece = vec![0u8; 1000];
    volume.read(20 * BLOCK + 100, &mut piece).unwrap();
    volume.write(21 * BLOCK + 512, &[7u8; 512], false).unwrap();
    let mut merged = vec![0u8; BLOCK as usize];
    volume.read(21 * BLOCK, &mut merged).unwrap();
    assert_eq!(&merged[512..1024], &[7u8; 512]);
    assert_eq!(&merged[..512], &[0u8; 512]);
    let status = volume.cache_status().unwrap();
    assert!(status.allocations >= 10, "{status:?}");
}

#[test]
fn flushed_and_fua_writes_survive_a_crash_and_the_cache_comes_back_warm() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = open(&stack, dir.path(), &clock);
    for block in 0..16 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    volume.flush().unwrap();
    volume.write(40 * BLOCK, &block_of(40), true).unwrap();
    // Unflushed writes after the flush may or may not survive.
    volume.write(2 * BLOCK, &block_of(1002), false).unwrap();
    drop(volume);
    stack.crash(7);
    let volume = open(&stack, dir.path(), &clock);
    let status = volume.cache_status().unwrap();
    assert_eq!(status.occupancy_bytes, 17 * BLOCK, "{status:?}");
    assert_eq!(
        status.dirty_bytes,
        17 * BLOCK,
        "after a crash every block counts as dirty"
    );
    for block in (0..16).filter(|block| *block != 2) {
        assert_eq!(read_block(&volume, block), block_of(block), "block {block}");
    }
    assert_eq!(read_block(&volume, 40), block_of(40));
    let sectors = read_block(&volume, 2);
    for (sector, bytes) in sectors.chunks(512).enumerate() {
        let old = &block_of(2)[sector * 512..(sector + 1) * 512];
        let new = &block_of(1002)[sector * 512..(sector + 1) * 512];
        assert!(
            bytes == old || bytes == new,
            "sector {sector} of block 2 is neither"
        );
    }
    // Warm: every read above hit.
    let status = volume.cache_status().unwrap();
    assert_eq!(status.read_hit_ratio, 1.0, "{status:?}");
}

#[test]
fn a_clean_stop_keeps_exact_dirty_bits() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = open(&stack, dir.path(), &clock);
    for block in 0..6 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    write_back_all(&volume, &clock);
    volume.write(BLOCK, &block_of(101), false).unwrap();
    volume.flush().unwrap();
    volume.final_checkpoint().unwrap();
    drop(volume);
    let volume = open(&stack, dir.path(), &clock);
    let status = volume.cache_status().unwrap();
    assert_eq!(status.occupancy_bytes, 6 * BLOCK);
    assert_eq!(
        status.dirty_bytes, BLOCK,
        "only block 1 was dirty at the stop"
    );
    assert_eq!(read_block(&volume, 1), block_of(101));
}

/// Random writes, discards, flushes, writebacks and crashes over a cache
/// much smaller than the volume (evictions, slot reuse after commits):
/// after each crash every sector reads as of its last flush or a write
/// after it.
#[test]
fn random_crashes_never_lose_a_flushed_write() {
    let totals = random_crashes(|_| cache_options(CacheMode::Writeback));
    assert_eq!(totals, Totals::default(), "no SMR staging here");
}

/// The same over an SMR home with staging: small bands (8 blocks), one
/// block per destage IO and a few IOs per background step, so rewrites
/// span steps, crashes land mid-band, and writes and discards block on a
/// band being rewritten (they help it to its end, then land).
#[test]
fn random_crashes_never_lose_a_flushed_write_over_an_smr_home() {
    let totals = random_crashes(smr_options);
    // The paths this test is for were taken.
    assert!(totals.band_rewrites > 20, "{totals:?}");
    assert!(totals.blocked_blocks > 0, "{totals:?}");
    assert!(totals.crashes_mid_band > 0, "{totals:?}");
}

/// What the SMR staging did in a random crash run, summed over its lives.
#[derive(Debug, Default, PartialEq, Eq)]
struct Totals {
    band_rewrites: u64,
    blocked_blocks: u64,
    crashes_mid_band: u64,
}

impl Totals {
    fn add(&mut self, volume: &Volume) {
        if let Some(smr) = volume.cache_status().and_then(|status| status.smr) {
            self.band_rewrites += smr.band_rewrites;
            self.blocked_blocks += smr.blocked_blocks;
            self.crashes_mid_band += u64::from(smr.rewriting.is_some());
        }
    }
}

/// SMR staging over `BLOCK`-byte cache blocks: bands of 8 blocks from
/// block 2, one block per destage IO, up to 1–4 IOs per background step.
fn smr_options(seed: u64) -> CacheOptions {
    let mut options = cache_options(CacheMode::Writeback);
    let mut staging = tierd_core::cache::SmrStaging::new(8 * BLOCK, 2 * BLOCK);
    staging.chunk_bytes = BLOCK;
    options.smr = Some(staging);
    options.destage_idle_ns = 50_000_000;
    options.destage_step_bytes = (1 + seed % 4) * BLOCK;
    options
}

/// Random writes, discards, flushes, background steps and crashes over a
/// cache of 12 blocks on a 96-block volume; `cache(seed)` gives the cache.
fn random_crashes(cache: impl Fn(u64) -> CacheOptions) -> Totals {
    const BLOCKS: u64 = 96;
    let mut totals = Totals::default();
    for seed in 0..12u64 {
        let dir = tempfile::tempdir().unwrap();
        let stack = Stack::new(12, BLOCKS * BLOCK);
        let clock = Arc::new(ManualClock::new(0));
        let mut rng = SeededRng::new(seed);
        // Per sector: the value as of the last flush, and values since.
        let sectors = (BLOCKS * BLOCK / 512) as usize;
        let mut durable: Vec<u64> = vec![0; sectors];
        let mut since: Vec<Vec<u64>> = vec![Vec::new(); sectors];
        let mut volume = open_cache(&stack, dir.path(), &clock, cache(seed));
        let mut tag = 1u64;
        for round in 0..400 {
            let action = rng.below(100);
            if action < 60 {
                let block = rng.below(BLOCKS);
                let first = rng.below(8);
                let count = 1 + rng.below(8 - first);
                let fua = rng.below(10) == 0;
                tag += 1;
                let data: Vec<u8> = (0..count * 512)
                    .flat_map(|_| tag.to_le_bytes())
                    .take((count * 512) as usize)
                    .collect();
                volume
                    .write(block * BLOCK + first * 512, &data, fua)
                    .unwrap();
                for sector in 0..count {
                    let index = (block * 8 + first + sector) as usize;
                    if fua {
                        durable[index] = tag;
                        since[index].clear();
                    } else {
                        since[index].push(tag);
                    }
                }
            } else if action < 70 {
                let block = rng.below(BLOCKS);
                let mut data = vec![0u8; BLOCK as usize];
                volume.read(block * BLOCK, &mut data).unwrap();
            } else if action < 75 {
                let block = rng.below(BLOCKS);
                volume.discard(block * BLOCK, BLOCK, false).unwrap();
                for sector in 0..8 {
                    since[(block * 8 + sector) as usize].push(0);
                }
            } else if action < 85 {
                volume.flush().unwrap();
                for index in 0..sectors {
                    if let Some(&last) = since[index].last() {
                        durable[index] = last;
                    }
                    since[index].clear();
                }
            } else if action < 95 {
                clock.advance_ns(rng.below(300_000_000));
                for _ in 0..rng.below(6) {
                    volume.cache_step().unwrap();
                }
            } else {
                totals.add(&volume);
                drop(volume);
                stack.crash(seed * 1000 + round);
                volume = open_cache(&stack, dir.path(), &clock, cache(seed));
                for (index, durable_tag) in durable.iter_mut().enumerate() {
                    let mut sector = [0u8; 512];
                    volume.read(index as u64 * 512, &mut sector).unwrap();
                    let found = u64::from_le_bytes(sector[..8].try_into().unwrap());
                    assert!(
                        sector.chunks(8).all(|word| word == found.to_le_bytes()),
                        "seed {seed} round {round}: sector {index} is torn inside"
                    );
                    assert!(
                        found == *durable_tag || since[index].contains(&found),
                        "seed {seed} round {round}: sector {index} reads {found}, flushed {durable_tag}, since {:?}",
                        since[index]
                    );
                    *durable_tag = found;
                    since[index].clear();
                }
            }
        }
        totals.add(&volume);
    }
    totals
}

#[test]
fn detach_finishes_under_a_writer_and_stays_detached_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = Arc::new(open(&stack, dir.path(), &clock));
    for block in 0..40 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let writer = {
        let volume = volume.clone();
        let stop = stop.clone();
        let started = started.clone();
        std::thread::spawn(move || {
            let mut rng = SeededRng::new(3);
            let mut writes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let block = rng.below(48);
                volume
                    .write(block * BLOCK, &block_of(block + 1000), false)
                    .unwrap();
                writes += 1;
                started.store(writes, Ordering::Relaxed);
            }
            writes
        })
    };
    // The detach runs under the writer: wait for its first write (on a
    // loaded machine the detach could otherwise finish before the writer
    // thread ran at all; CI-like load did that).
    while started.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    volume.set_cache_mode("detach").unwrap();
    let mut steps = 0;
    while volume.cache_status().unwrap().mode != "detached" {
        volume.cache_step().unwrap();
        steps += 1;
        assert!(steps < 1_000_000, "detach never finished");
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(writes > 0);
    volume.flush().unwrap();
    let before: Vec<Vec<u8>> = (0..48).map(|block| read_block(&volume, block)).collect();
    // Home alone holds the data now.
    for (block, data) in before.iter().enumerate() {
        let mut home = vec![0u8; BLOCK as usize];
        stack.home.read_at(block as u64 * BLOCK, &mut home).unwrap();
        assert_eq!(&home, data, "block {block}");
    }
    drop(volume);
    stack.crash(11);
    let volume = open(&stack, dir.path(), &clock);
    assert_eq!(volume.cache_status().unwrap().mode, "detached");
    for (block, data) in before.iter().enumerate() {
        assert_eq!(&read_block(&volume, block as u64), data);
    }
    // Back to writeback online: an empty cache again.
    volume.set_cache_mode("writeback").unwrap();
    volume.write(0, &block_of(5000), false).unwrap();
    assert_eq!(volume.cache_status().unwrap().dirty_bytes, BLOCK);
    assert_eq!(read_block(&volume, 0), block_of(5000));
}

#[test]
fn writethrough_drains_dirty_blocks_and_keeps_home_current() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = open(&stack, dir.path(), &clock);
    for block in 0..10 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    volume.set_cache_mode("writethrough").unwrap();
    // Draining writes back without idle time.
    while volume.cache_step().unwrap() != CacheStep::Idle {}
    assert_eq!(volume.cache_status().unwrap().dirty_bytes, 0);
    volume.write(3 * BLOCK, &block_of(33), false).unwrap();
    let mut home = vec![0u8; BLOCK as usize];
    stack.home.read_at(3 * BLOCK, &mut home).unwrap();
    assert_eq!(home, block_of(33));
    assert_eq!(volume.cache_status().unwrap().mode, "writethrough");
    assert!(volume.set_cache_mode("write-back").is_err());
}

#[test]
fn a_lost_cache_tier_serves_clean_blocks_from_home_and_fails_dirty_ones() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = open(&stack, dir.path(), &clock);
    // Blocks 0..4 clean (written back), 4..8 dirty.
    for block in 0..4 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    write_back_all(&volume, &clock);
    for block in 4..8 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    volume.flush().unwrap();
    assert!(volume.set_tier_unavailable("ssd", true));
    let status = volume.status();
    assert_eq!(status.unavailable.len(), 1, "{:?}", status.unavailable);
    assert_eq!(status.unavailable[0].offset_bytes, 4 * BLOCK);
    assert_eq!(status.unavailable[0].length_bytes, 4 * BLOCK);
    assert_eq!(status.cache.as_ref().unwrap().mode, "lost");
    for block in 0..4 {
        assert_eq!(read_block(&volume, block), block_of(block));
    }
    let mut data = vec![0u8; BLOCK as usize];
    let error = volume.read(5 * BLOCK, &mut data).unwrap_err();
    assert_eq!(error.errno(), libc::EIO);
    // A write covering the block replaces the lost data.
    volume.write(5 * BLOCK, &block_of(55), false).unwrap();
    assert_eq!(read_block(&volume, 5), block_of(55));
    let left: u64 = volume
        .status()
        .unavailable
        .iter()
        .map(|range| range.length_bytes)
        .sum();
    assert_eq!(left, 3 * BLOCK);
    // Persistently: after a restart the lost blocks still fail.
    volume.flush().unwrap();
    drop(volume);
    let volume = open(&stack, dir.path(), &clock);
    assert!(volume.read(6 * BLOCK, &mut data).is_err());
    assert_eq!(read_block(&volume, 5), block_of(55));
}

/// A FUA write to a block cached clean in writethrough mode reaches home
/// and the slot; after a crash every mapped block counts as dirty, so the
/// slot must hold the FUA data durably too, or the stale slot would win
/// (served, then written back over home's good copy).
#[test]
fn a_fua_write_through_a_cached_block_survives_a_crash() {
    for mode in [CacheMode::Writethrough, CacheMode::Writearound] {
        for merge in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let stack = Stack::new(64, SEGMENT);
            let clock = Arc::new(ManualClock::new(0));
            let volume = open_mode(&stack, dir.path(), &clock, mode);
            volume.write(5 * BLOCK, &block_of(5), false).unwrap();
            // A read fills the block; the flush makes the mapping durable.
            assert_eq!(read_block(&volume, 5), block_of(5));
            volume.flush().unwrap();
            let mut expected = block_of(5);
            if merge {
                // A partial FUA write of the cached block.
                volume.write(5 * BLOCK + 1024, &[9u8; 512], true).unwrap();
                expected[1024..1536].fill(9);
            } else {
                volume.write(5 * BLOCK, &block_of(505), true).unwrap();
                expected = block_of(505);
            }
            drop(volume);
            // Every unflushed sector is lost.
            stack.fast.crash_losing_everything_unflushed();
            stack.home.crash_losing_everything_unflushed();
            let volume = open_mode(&stack, dir.path(), &clock, mode);
            assert_eq!(read_block(&volume, 5), expected, "{mode:?} merge {merge}");
        }
    }
}

/// Home whose `flush` takes 200 ms once armed, saying when it started: a
/// checkpoint is then held between its snapshot of the cache and writing it.
struct SlowFlush {
    inner: Arc<CrashDisk>,
    armed: AtomicBool,
    flushing: AtomicBool,
}

impl BlockDevice for SlowFlush {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn is_volatile(&self) -> bool {
        false
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> tierd_engine::device::DeviceResult<()> {
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> tierd_engine::device::DeviceResult<()> {
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> tierd_engine::device::DeviceResult<()> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.flushing.store(true, Ordering::SeqCst);
            std::thread::park_timeout(std::time::Duration::from_millis(200));
        }
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

/// Found by the real-process crash loop (`crash_loop.rs`, a mode switched
/// back to writeback came back in writearound after kill -9): a checkpoint
/// snapshots the cache's mode, flushes the tiers, then writes itself and
/// starts a fresh journal. A `cache-mode` record appended in between was
/// in neither the checkpoint nor the new journal: the switch, acknowledged
/// to the operator, was undone by the next crash. (A `cache-detached` or
/// `cache-lost` record appended there was dropped the same way: a finished
/// detach came back with its old mappings.)
#[test]
fn a_mode_switch_during_a_checkpoint_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(16, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let home = Arc::new(SlowFlush {
        inner: stack.home.clone(),
        armed: AtomicBool::new(false),
        flushing: AtomicBool::new(false),
    });
    let specs = |home: Arc<dyn BlockDevice>| {
        let mut specs = stack.specs();
        specs[1].device = home;
        specs
    };
    let open_slow = || {
        let clock: Arc<dyn Clock> = clock.clone();
        Volume::open_with_cache(
            options(stack.volume_bytes),
            specs(home.clone()),
            dir.path(),
            clock,
            Some(cache_options(CacheMode::Writeback)),
        )
        .unwrap()
        .0
    };
    let volume = Arc::new(open_slow());
    volume.write(0, &block_of(1), false).unwrap();
    volume.flush().unwrap();
    home.armed.store(true, Ordering::SeqCst);
    let checkpointer = {
        let volume = volume.clone();
        std::thread::spawn(move || volume.checkpoint().unwrap())
    };
    while !home.flushing.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // The checkpoint has its snapshot and is flushing: switch now.
    volume.set_cache_mode("writearound").unwrap();
    assert_eq!(volume.cache_status().unwrap().mode, "writearound");
    checkpointer.join().unwrap();
    drop(volume);
    stack.crash(21);
    let volume = open_slow();
    assert_eq!(
        volume.cache_status().unwrap().mode,
        "writearound",
        "an acknowledged mode switch was undone by a crash"
    );
    assert_eq!(read_block(&volume, 0), block_of(1));
}

/// Regression (found by `tierd dst`, seed 32): in writethrough a FUA write
/// that hit a cached block went durably home but into the slot with a plain
/// write, and nothing flushed the slot (no mapping change was pending). A
/// crash then lost the slot's sectors, and the restart — which reads a
/// mapped block from its slot — returned the older data of an acknowledged
/// FUA write. The slot is now written durably too.
#[test]
fn a_fua_write_that_hits_in_writethrough_survives_a_crash() {
    for seed in 0..16u64 {
        let dir = tempfile::tempdir().unwrap();
        let stack = Stack::new(64, SEGMENT);
        let clock = Arc::new(ManualClock::new(0));
        let volume = open_mode(&stack, dir.path(), &clock, CacheMode::Writethrough);
        volume.write(3 * BLOCK, &block_of(1), false).unwrap();
        volume.write(4 * BLOCK, &block_of(2), false).unwrap();
        volume.flush().unwrap();
        assert_eq!(volume.cache_mappings().len(), 2, "both blocks are cached");
        // Hits: a whole block, and a part of one.
        volume.write(3 * BLOCK, &block_of(11), true).unwrap();
        let part = &block_of(12)[..1024];
        volume.write(4 * BLOCK + 1024, part, true).unwrap();
        drop(volume);
        stack.crash(seed);
        let volume = open_mode(&stack, dir.path(), &clock, CacheMode::Writethrough);
        assert_eq!(read_block(&volume, 3), block_of(11), "crash seed {seed}");
        let mut expected = block_of(2);
        expected[1024..2048].copy_from_slice(part);
        assert_eq!(read_block(&volume, 4), expected, "crash seed {seed}");
    }
}

/// Regression (found by `tierd dst`, seed 49): once the cache tier was lost
/// (gone: its flushes fail too), every FLUSH and checkpoint of the volume
/// failed on it, though the bypassed cache holds nothing the volume needs.
/// A lost cache tier is no longer flushed.
#[test]
fn a_lost_cache_tier_does_not_fail_flushes_or_checkpoints() {
    use tierd_engine::device::fault::{FaultConfig, FaultDevice};
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let fast = Arc::new(FaultDevice::new(
        stack.fast.clone(),
        FaultConfig::default(),
        1,
        clock.clone(),
    ));
    let specs = two_tiers(fast.clone(), stack.home.clone());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let volume = Volume::open_with_cache(
        options(stack.volume_bytes),
        specs,
        dir.path(),
        dyn_clock,
        Some(cache_options(CacheMode::Writeback)),
    )
    .unwrap()
    .0;
    volume.write(0, &block_of(1), false).unwrap();
    write_back_all(&volume, &clock);
    volume.write(BLOCK, &block_of(2), false).unwrap();
    volume.flush().unwrap();
    fast.set_gone(true);
    assert!(volume.set_tier_unavailable("ssd", true));
    assert_eq!(volume.cache_status().unwrap().mode, "lost");
    volume.write(2 * BLOCK, &block_of(3), false).unwrap();
    volume.flush().unwrap();
    volume.checkpoint().unwrap();
    assert_eq!(read_block(&volume, 0), block_of(1));
    assert_eq!(read_block(&volume, 2), block_of(3));
    let mut data = vec![0u8; BLOCK as usize];
    assert!(volume.read(BLOCK, &mut data).is_err(), "block 1 was dirty");
}

#[test]
fn adaptive_admission_caches_a_hot_set_and_keeps_the_data_right() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(256, 64 * SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = open_adaptive(&stack, dir.path(), &clock);
    // 64 distinct blocks written once, then read over and over: a hot set
    // a quarter of the cache.
    for block in 0..64 {
        volume
            .write(block * 97 * BLOCK, &block_of(block), false)
            .unwrap();
    }
    let mut rng = SeededRng::new(7);
    for _ in 0..20_000 {
        let block = rng.next_u64() % 64;
        assert_eq!(read_block(&volume, block * 97), block_of(block));
    }
    let status = volume.cache_status().unwrap();
    assert_eq!(status.admission, "adaptive");
    let adaptive = status.adaptive.clone().expect("adaptive status");
    assert!(adaptive.epochs > 5, "{adaptive:?}");
    assert_ne!(adaptive.rule, "off", "{adaptive:?}");
    assert!(status.read_hit_ratio > 0.5, "{status:?}");
    // Written back and read again from home after a restart: still right.
    write_back_all(&volume, &clock);
    drop(volume);
    let volume = open(&stack, dir.path(), &clock);
    for block in 0..64 {
        assert_eq!(read_block(&volume, block * 97), block_of(block));
    }
}

/// A two-tier volume without a policy became a cache volume (the default
/// placement since `adaptive`): a volume that was tiered before and has a
/// segment on its fast tier is refused with what to write, never read as
/// a cache (the slots hold segment data, not cached blocks); with the
/// segment moved home first, it opens as a cache volume with the data.
#[test]
fn a_tiered_volume_with_segments_on_the_fast_tier_is_not_opened_as_a_cache() {
    use tierd_engine::volume::StepOutcome;
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(1024, 4 * SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let clock_dyn: Arc<dyn Clock> = clock.clone();
    let tiered = Volume::open(
        options(stack.volume_bytes),
        stack.specs(),
        dir.path(),
        clock_dyn.clone(),
    )
    .unwrap()
    .0;
    tiered
        .write(SEGMENT + 5 * BLOCK, &block_of(9), true)
        .unwrap();
    let run_moves = |volume: &Volume| loop {
        clock.advance_ns(1_000_000);
        match volume.copy_step() {
            StepOutcome::Idle => break,
            StepOutcome::Failed { segment } => panic!("move of segment {segment} failed"),
            _ => {}
        }
    };
    tiered.request_move(1, 0, "test").unwrap();
    run_moves(&tiered);
    tiered.checkpoint().unwrap();
    drop(tiered);

    let open_cached = || {
        Volume::open_with_cache(
            options(stack.volume_bytes),
            stack.specs(),
            dir.path(),
            clock_dyn.clone(),
            Some(cache_options(CacheMode::Writeback)),
        )
    };
    let error = open_cached().err().expect("refused").to_string();
    assert!(
        error.contains("1 segments are on tier ssd")
            && error.contains("[volume.policy] kind = \"none\"")
            && error.contains("tierd move --volume c --segment N --to hdd"),
        "{error}"
    );
    // Nothing was changed by the refusal: tiered again, the data is there.
    let tiered = Volume::open(
        options(stack.volume_bytes),
        stack.specs(),
        dir.path(),
        clock_dyn.clone(),
    )
    .unwrap()
    .0;
    assert_eq!(read_block(&tiered, SEGMENT / BLOCK + 5), block_of(9));
    tiered.request_move(1, 1, "test").unwrap();
    run_moves(&tiered);
    tiered.checkpoint().unwrap();
    drop(tiered);
    let cached = open_cached().unwrap().0;
    assert_eq!(read_block(&cached, SEGMENT / BLOCK + 5), block_of(9));
    assert!(cached.cache_status().is_some());
}

/// The same on a memory tier (the embedded default's `mem` before
/// `adaptive`): its segments' data is gone with the last process and home
/// holds it (written through), so they go home and the tier becomes the
/// cache, with a note.
#[test]
fn segments_on_a_memory_tier_go_home_when_it_becomes_the_cache() {
    use tierd_engine::volume::StepOutcome;
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(1024, 4 * SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let clock_dyn: Arc<dyn Clock> = clock.clone();
    let specs = || {
        let mut specs = stack.specs();
        specs[0].volatile = true;
        specs
    };
    let tiered = Volume::open(
        options(stack.volume_bytes),
        specs(),
        dir.path(),
        clock_dyn.clone(),
    )
    .unwrap()
    .0;
    tiered.request_move(2, 0, "test").unwrap();
    loop {
        clock.advance_ns(1_000_000);
        if let StepOutcome::Idle = tiered.copy_step() {
            break;
        }
    }
    tiered.write(2 * SEGMENT, &block_of(4), true).unwrap();
    tiered.checkpoint().unwrap();
    drop(tiered);
    let mut cache = cache_options(CacheMode::Writethrough);
    cache.tier = "ssd".into();
    let (cached, notes) = Volume::open_with_cache(
        options(stack.volume_bytes),
        specs(),
        dir.path(),
        clock_dyn,
        Some(cache),
    )
    .unwrap();
    assert!(
        notes
            .iter()
            .any(|note| note.contains("1 segments of memory tier ssd went home")),
        "{notes:?}"
    );
    assert_eq!(read_block(&cached, 2 * SEGMENT / BLOCK), block_of(4));
}

/// Regression (found by `tierd dst`, seed 228, once `adaptive` was drawn):
/// a block dirty on a cache tier that was lost stays lost after a restart
/// until a write covers it whole. Such a write (here a discard) that then
/// failed at home had already cleared the loss at planning, so the next
/// read served home's older copy as current. The loss now clears only
/// once the write has landed.
#[test]
fn a_failed_write_over_a_lost_block_leaves_it_lost() {
    use tierd_engine::device::fault::{FaultConfig, FaultDevice};
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let fast = Arc::new(FaultDevice::new(
        stack.fast.clone(),
        FaultConfig::default(),
        1,
        clock.clone(),
    ));
    let home = Arc::new(FaultDevice::new(
        stack.home.clone(),
        FaultConfig::default(),
        2,
        clock.clone(),
    ));
    let specs = || two_tiers(fast.clone(), home.clone());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let open = || open_writeback(stack.volume_bytes, specs(), dir.path(), &dyn_clock);
    let volume = open();
    let mut data = lose_dirty_block_zero(&volume, &fast, &clock);
    volume.checkpoint().unwrap();
    drop(volume);
    // Back after a restart, the block still lost; a discard over it fails.
    fast.set_gone(false);
    let volume = open();
    assert!(
        volume.read(0, &mut data).is_err(),
        "still lost after the restart"
    );
    home.set_config(FaultConfig {
        write_error_probability: 1.0,
        ..FaultConfig::default()
    });
    assert!(volume.discard(0, BLOCK, false).is_err());
    home.set_config(FaultConfig::default());
    match volume.read(0, &mut data) {
        Err(_) => {}
        Ok(()) => assert_ne!(data, block_of(1), "home's older copy served as current"),
    }
    // A write that lands makes it current again.
    volume.write(0, &block_of(3), false).unwrap();
    assert_eq!(read_block(&volume, 0), block_of(3));
}

/// A lost block rewritten whole becomes current again in its new slot; if
/// the cache tier is lost again before a commit journals that rewrite, the
/// block is lost again and the rewrite must not be journaled after the new
/// `cache-lost` record: it once was (by the next commit, even a FLUSH of the
/// bypassed cache), so the restart took the block for current and served
/// home's older copy in place of a flushed write (DST seeds 1172, 1442).
#[test]
fn a_rewritten_lost_block_lost_again_stays_lost_after_a_crash() {
    use tierd_engine::device::fault::{FaultConfig, FaultDevice};
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(64, SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let fast = Arc::new(FaultDevice::new(
        stack.fast.clone(),
        FaultConfig::default(),
        1,
        clock.clone(),
    ));
    let specs = || two_tiers(fast.clone(), stack.home.clone());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let open = || open_writeback(stack.volume_bytes, specs(), dir.path(), &dyn_clock);
    let volume = open();
    let mut data = lose_dirty_block_zero(&volume, &fast, &clock);
    drop(volume);
    stack.crash(1);
    // Back after a restart: the cache works again, block 0 is still lost.
    fast.set_gone(false);
    let volume = open();
    assert!(volume.read(0, &mut data).is_err(), "still lost");
    // Rewritten whole: current again, dirty in a slot; the rewrite waits
    // for the next commit.
    volume.write(0, &block_of(3), false).unwrap();
    assert_eq!(read_block(&volume, 0), block_of(3));
    // The tier is lost again with block 0 dirty on it, then a FLUSH commits.
    fast.set_gone(true);
    assert!(volume.set_tier_unavailable("ssd", true));
    assert!(volume.read(0, &mut data).is_err(), "lost again");
    volume.flush().unwrap();
    drop(volume);
    stack.crash(2);
    fast.set_gone(false);
    let volume = open();
    match volume.read(0, &mut data) {
        Err(_) => {}
        Ok(()) => panic!(
            "block 0 was lost with the tier but reads (home's older copy: {})",
            data == block_of(1)
        ),
    }
    assert!(
        !volume.unavailable_ranges().is_empty(),
        "the lost block is reported"
    );
}

/// `adaptive` promotes segments whose heat lasts: the writeback thread's
/// step copies their blocks in while no user IO is in flight, and the
/// reads that follow hit. The copies race user writes on another thread
/// (a write planned before a copy takes its block overtakes it, one
/// planned after waits for it): every read returns the last write, during
/// the race, after it, and after a restart.
#[test]
fn promoted_segments_are_copied_in_and_racing_writes_stay_right() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(4096, 64 * SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = Arc::new(open_adaptive(&stack, dir.path(), &clock));
    let blocks_per_segment = SEGMENT / BLOCK;
    // Four segments written through to home, then read at random.
    let region = 4 * blocks_per_segment;
    for block in 0..region {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    write_back_all(&volume, &clock);
    let mut rng = SeededRng::new(11);
    for round in 0..40_000u64 {
        let block = rng.next_u64() % region;
        assert_eq!(read_block(&volume, block), block_of(block), "block {block}");
        if round % 64 == 0 {
            volume.cache_step().unwrap();
        }
    }
    let status = volume.cache_status().unwrap();
    let adaptive_status = status.adaptive.clone().expect("adaptive status");
    assert!(
        adaptive_status.promotion.segments > 0 && status.promoted_bytes > 0,
        "{status:?}"
    );
    assert!(status.read_hit_ratio > 0.5, "{status:?}");

    // Another four segments, never written (zeroes), written and read
    // while the step runs on its own thread.
    let first = 16 * blocks_per_segment;
    let latest: Vec<std::sync::atomic::AtomicU64> = (0..region)
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    let expected = |tag: u64| {
        if tag == 0 {
            vec![0u8; BLOCK as usize]
        } else {
            block_of(tag)
        }
    };
    let promoted_before = status.promoted_bytes;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stepper = {
        let (volume, stop) = (volume.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                volume.cache_step().unwrap();
                std::thread::yield_now();
            }
        })
    };
    let mut version = 1u64 << 40;
    for _ in 0..60_000 {
        let offset = rng.next_u64() % region;
        let block = first + offset;
        if rng.next_u64().is_multiple_of(4) {
            version += 1;
            volume
                .write(block * BLOCK, &block_of(version), false)
                .unwrap();
            latest[offset as usize].store(version, std::sync::atomic::Ordering::Relaxed);
        } else {
            let tag = latest[offset as usize].load(std::sync::atomic::Ordering::Relaxed);
            assert!(
                read_block(&volume, block) == expected(tag),
                "block {block}, version {tag}"
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    stepper.join().unwrap();
    let status = volume.cache_status().unwrap();
    assert!(status.promoted_bytes > promoted_before, "{status:?}");
    write_back_all(&volume, &clock);
    drop(volume);
    let volume = open(&stack, dir.path(), &clock);
    for offset in 0..region {
        let tag = latest[offset as usize].load(std::sync::atomic::Ordering::Relaxed);
        assert!(read_block(&volume, first + offset) == expected(tag));
    }
    for block in 0..region {
        assert_eq!(read_block(&volume, block), block_of(block));
    }
}

/// `tierd move` and `tierd pin` to a cache volume's cache tier are refused
/// with what the tier is and how to tier the volume, not with "the target
/// tier is full" (its segment slots are 0 because it holds cached blocks).
#[test]
fn segments_are_not_moved_or_pinned_to_the_cache_tier() {
    let dir = tempfile::tempdir().unwrap();
    let stack = Stack::new(256, 4 * SEGMENT);
    let clock = Arc::new(ManualClock::new(0));
    let volume = open(&stack, dir.path(), &clock);
    let moved = volume.request_move(0, 0, "test").unwrap_err().to_string();
    assert!(
        moved.contains("is a cache volume") && moved.contains("[volume.policy]"),
        "{moved}"
    );
    let pinned = volume.pin(0, 0, None).unwrap_err().to_string();
    assert!(pinned.contains("is a cache volume"), "{pinned}");
}

/// An SMR home (`docs/engine/smr.md`) emulated by the Archive 8 TB model
/// in virtual time: with staging, random small writes reach the disk only
/// as whole bands written from their first byte, so its media cache is
/// never written and it has nothing to clean; without staging, per-block
/// writebacks fill its media cache.
#[test]
fn an_smr_home_gets_whole_bands_only_and_its_media_cache_stays_empty() {
    use tierd_device::model::DevicePreset;
    use tierd_engine::device::latency::LatencyDevice;
    use tierd_engine::device::memory::MemoryDevice;
    let band_bytes = tierd_device::model::smr::SmrConfig::preset(DevicePreset::Archive8tb)
        .unwrap()
        .band_bytes;
    let volume_bytes = 4 * band_bytes + 64 * BLOCK;
    let home_bytes = volume_bytes.div_ceil(SEGMENT) * SEGMENT;
    let run = |staging: bool| {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let memory: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new("smr", home_bytes));
        let model = DevicePreset::Archive8tb.build(Some(home_bytes), 1).unwrap();
        let home = Arc::new(LatencyDevice::new(memory.clone(), model, dyn_clock.clone()));
        let fast: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new("ssd", 2048 * BLOCK));
        let mut cache = cache_options(CacheMode::Writeback);
        cache.smr = staging.then(|| tierd_core::cache::SmrStaging::new(band_bytes, 0));
        let volume = Volume::open_with_cache(
            options(volume_bytes),
            two_tiers(fast, home.clone()),
            dir.path(),
            dyn_clock,
            Some(cache),
        )
        .unwrap()
        .0;
        let mut rng = SeededRng::new(5);
        let mut written = std::collections::BTreeMap::new();
        for tag in 0..300u64 {
            let block = rng.below(volume_bytes / BLOCK);
            volume.write(block * BLOCK, &block_of(tag), false).unwrap();
            written.insert(block, tag);
        }
        let bands: std::collections::BTreeSet<u64> = written
            .keys()
            .map(|block| block * BLOCK / band_bytes)
            .collect();
        write_back_all(&volume, &clock);
        volume.flush().unwrap();
        for (&block, &tag) in &written {
            assert_eq!(read_block(&volume, block), block_of(tag), "block {block}");
            let mut on_disk = vec![0u8; BLOCK as usize];
            memory.read_at(block * BLOCK, &mut on_disk).unwrap();
            assert_eq!(on_disk, block_of(tag), "block {block} at home");
        }
        let model = home.model_smr_stats().unwrap();
        (volume.cache_status().unwrap(), model, bands.len() as u64)
    };
    let (status, model, bands) = run(true);
    let smr = status.smr.expect("SMR staging shows in the status");
    assert_eq!(
        smr.band_rewrites, bands,
        "one rewrite per band written: {smr:?}"
    );
    assert_eq!(smr.staged_bytes, 0);
    assert_eq!(smr.unstaged_home_write_blocks, 0);
    assert_eq!(
        model.cache_writes, 0,
        "the media cache was written: {model:?}"
    );
    assert_eq!(model.dirty_bands, 0);
    assert_eq!(model.bands_cleaned, 0);
    assert!(model.direct_writes > 0);
    let home_model = smr.home_model.expect("an emulated home shows its model");
    assert_eq!(home_model.media_cache_writes, 0);
    // Every band rewritten whole (the last one is short).
    assert!(
        smr.destage_written_bytes >= (bands - 1) * band_bytes,
        "{smr:?}"
    );
    assert!(smr.destage_written_bytes <= bands * band_bytes, "{smr:?}");
    let (status, model, _) = run(false);
    assert!(status.smr.is_none());
    assert!(
        model.cache_writes > 0 && model.cache_writes + model.bands_cleaned > 0,
        "per-block writeback reaches the media cache: {model:?}"
    );
}

/// A write and a discard into the band being rewritten (one destage IO per
/// background step, so the rewrite is left mid-band) wait for it: the
/// caller helps the rewrite to its end, then its part lands, and reads
/// see it; the band's other blocks keep their data.
#[test]
fn writes_into_a_band_being_rewritten_wait_for_it_and_land() {
    let dir = tempfile::tempdir().unwrap();
    // Two slots only beyond the staged blocks: a write miss finds none.
    let stack = Stack::new(8, 96 * BLOCK);
    let clock = Arc::new(ManualClock::new(0));
    let mut cache = smr_options(0);
    cache.destage_step_bytes = BLOCK;
    let volume = open_cache(&stack, dir.path(), &clock, cache);
    // Band 0 is blocks 0–1 (short), band 1 is blocks 2–9.
    for block in 2..6 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    clock.advance_ns(1_000_000_000);
    assert!(matches!(
        volume.cache_step().unwrap(),
        CacheStep::Wrote { .. }
    ));
    let smr = volume.cache_status().unwrap().smr.unwrap();
    let rewriting = smr.rewriting.expect("a rewrite left mid-band");
    assert_eq!(
        (rewriting.offset_bytes, rewriting.length_bytes),
        (2 * BLOCK, 8 * BLOCK)
    );
    volume.discard(4 * BLOCK, BLOCK, false).unwrap();
    let smr = volume.cache_status().unwrap().smr.unwrap();
    assert!(smr.blocked_blocks >= 1, "{smr:?}");
    assert!(
        smr.band_rewrites >= 1,
        "the discard helped the rewrite to its end"
    );
    assert_eq!(read_block(&volume, 4), vec![0u8; BLOCK as usize]);
    for block in [2, 3, 5] {
        assert_eq!(read_block(&volume, block), block_of(block), "block {block}");
    }
    // Again, with a partial write into a block that is not cached.
    for block in 6..8 {
        volume
            .write(block * BLOCK, &block_of(block), false)
            .unwrap();
    }
    clock.advance_ns(1_000_000_000);
    volume.cache_step().unwrap();
    assert!(volume
        .cache_status()
        .unwrap()
        .smr
        .unwrap()
        .rewriting
        .is_some());
    volume.write(8 * BLOCK + 512, &[9u8; 512], false).unwrap();
    write_back_all(&volume, &clock);
    for block in [6, 7] {
        assert_eq!(read_block(&volume, block), block_of(block), "block {block}");
    }
    let mut block = vec![0u8; BLOCK as usize];
    volume.read(8 * BLOCK, &mut block).unwrap();
    assert_eq!(&block[512..1024], &[9u8; 512]);
    assert_eq!(&block[..512], &[0u8; 512]);
    for block in [2, 3, 5] {
        assert_eq!(read_block(&volume, block), block_of(block), "block {block}");
    }
}

/// A write over adjacent blocks that land in adjacent slots (a fresh cache
/// hands slots out in order) is one write of the cache tier, and a read of
/// them one read.
#[test]
fn adjacent_blocks_in_adjacent_slots_are_one_cache_tier_write_and_read() {
    use tierd_engine::device::stats::StatsDevice;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let fast = Arc::new(StatsDevice::new(
        Arc::new(CrashDisk::new("ssd", 64 * BLOCK)),
        dyn_clock.clone(),
    ));
    let home: Arc<dyn BlockDevice> = Arc::new(CrashDisk::new("hdd", SEGMENT));
    let volume = Volume::open_with_cache(
        options(SEGMENT),
        two_tiers(fast.clone(), home),
        dir.path(),
        dyn_clock,
        Some(cache_options(CacheMode::Writeback)),
    )
    .unwrap()
    .0;
    let writes = || fast.stats().unwrap().writes;
    let before = writes();
    let data: Vec<u8> = (0..8).flat_map(block_of).collect();
    volume.write(16 * BLOCK, &data, false).unwrap();
    assert_eq!(writes() - before, 1, "8 blocks in 8 adjacent slots");
    // Read back in one request: one read of the cache tier too.
    let reads = || fast.stats().unwrap().reads;
    let before = reads();
    let mut back = vec![0u8; data.len()];
    volume.read(16 * BLOCK, &mut back).unwrap();
    assert_eq!(reads() - before, 1, "8 hits in 8 adjacent slots");
    assert!(back == data);
    for block in 0..8 {
        assert_eq!(read_block(&volume, 16 + block), block_of(block));
    }
    // A partial first block and a partial last one, still one write.
    let before = writes();
    let piece = vec![5u8; (3 * BLOCK) as usize];
    volume.write(16 * BLOCK + 512, &piece, false).unwrap();
    assert_eq!(writes() - before, 1);
    let mut back = vec![0u8; piece.len()];
    volume.read(16 * BLOCK + 512, &mut back).unwrap();
    assert_eq!(back, piece);
    assert_eq!(&read_block(&volume, 16)[..512], &block_of(0)[..512]);
    assert_eq!(&read_block(&volume, 19)[512..], &block_of(3)[512..]);
}
