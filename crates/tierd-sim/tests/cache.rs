//! The block caches in the simulator: `tierd_core::cache::BlockCache` on
//! fixed-latency devices, where what the cache must do can be worked out.

use tierd_core::cache::{AdmissionKind, BlockCache, CacheMode, CacheSettings};
use tierd_device::DeviceModel;
use tierd_policy::cache::CacheKind;
use tierd_sim::result::CacheResult;
use tierd_sim::testing::FixedLatencyDevice;
use tierd_sim::{run_with, RunResult, SimConfig, TierStack};
use tierd_trace::{Format, IteratorReader, Op, Request};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000_000_000;
const VOLUME: u64 = 64 * MIB;

fn request(time_ns: u64, op: Op, offset_bytes: u64, length_bytes: u64) -> Request {
    Request {
        time_ns,
        volume: 0,
        op,
        offset_bytes,
        length_bytes,
        response_ns: None,
    }
}

/// A 4 MiB fast tier over a disk-like home; `cache` is the `[cache]` table.
fn config(cache: &str) -> SimConfig {
    let text = format!(
        "segment_bytes = \"1MiB\"\n\
         [[tier]]\nname = \"fast\"\ndevice = \"x25e\"\ncapacity = \"4MiB\"\n\
         [[tier]]\nname = \"home\"\ndevice = \"savvio10k4\"\n\
         [cache]\n{cache}"
    );
    let mut config = SimConfig::new(TierStack::parse(&text, "test").unwrap(), VOLUME);
    config.period_ns = SECOND;
    config
}

/// fast: 10 µs per IO; home: 1 ms per IO (one at a time, FIFO).
fn devices() -> Vec<Box<dyn DeviceModel>> {
    vec![
        Box::new(FixedLatencyDevice::new("fast", 4 * MIB, 10_000, 10_000)),
        Box::new(FixedLatencyDevice::new("home", VOLUME, MS, MS)),
    ]
}

fn run(config: &SimConfig, kind: CacheKind, requests: &[Request]) -> RunResult {
    let controller =
        tierd_sim::build_controller(config, &tierd_sim::Strategy::Cache(kind)).unwrap();
    let mut reader =
        IteratorReader::new(requests.iter().copied(), &["test"], Format::Tierd, "test");
    run_with(
        config,
        kind.name(),
        controller,
        devices(),
        &mut reader,
        &mut |_| {},
    )
    .unwrap()
}

fn cache(result: &RunResult) -> &CacheResult {
    result
        .cache
        .as_ref()
        .expect("a cache run reports its cache")
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Reads and writes over a 2 MiB hot set and the whole volume, unaligned,
/// one every `gap_ns`.
fn mixed(count: u64, gap_ns: u64, seed: u64) -> Vec<Request> {
    let mut random = XorShift(seed);
    (0..count)
        .map(|index| {
            let hot = !random.next().is_multiple_of(4);
            let span = if hot { 2 * MIB } else { VOLUME - 64 * KIB };
            let offset = (random.next() % span) / 512 * 512;
            let length = 512 * (1 + random.next() % 64);
            let op = if random.next().is_multiple_of(3) {
                Op::Write
            } else {
                Op::Read
            };
            request(index * gap_ns, op, offset, length)
        })
        .collect()
}

/// With a second between requests every IO, fill and writeback is over
/// before the next request: the simulator's cache must then decide exactly
/// what the core decides when each step is reported at once.
#[test]
fn with_every_io_done_before_the_next_request_the_cache_decides_as_the_core_alone() {
    let requests = mixed(3_000, SECOND, 7);
    for (block, kind, mode) in [
        ("4KiB", CacheKind::Fifo, CacheMode::Writeback),
        ("4KiB", CacheKind::S3fifo, CacheMode::Writeback),
        ("64KiB", CacheKind::Lru, CacheMode::Writeback),
        ("64KiB", CacheKind::Arc, CacheMode::Writethrough),
        ("16KiB", CacheKind::S3fifo, CacheMode::Writearound),
    ] {
        let config = config(&format!(
            "block_bytes = \"{block}\"\nmode = \"{}\"\n",
            mode.name()
        ));
        let result = run(&config, kind, &requests);
        let simulated = cache(&result);

        let block_bytes = config.stack.cache.block_bytes;
        let mut settings =
            CacheSettings::new(VOLUME, block_bytes, (4 * MIB / block_bytes) as u32, mode);
        settings.policy = kind;
        let mut direct = BlockCache::new(settings).unwrap();
        let mut steps = Vec::new();
        for request in &requests {
            steps.clear();
            match request.op {
                Op::Read => direct.read(request.offset_bytes, request.length_bytes, &mut steps),
                Op::Write => direct.write(request.offset_bytes, request.length_bytes, &mut steps),
            }
            for step in &steps {
                direct.finish(step, true);
            }
            while let Some(writeback) = direct.next_writeback(true) {
                direct.writeback_done(writeback, true);
            }
        }
        let expected = direct.counters();
        let label = format!("{block} {kind:?} {mode:?}");
        assert_eq!(simulated.read_pages, expected.read_blocks, "{label}");
        assert_eq!(
            simulated.read_hit_pages, expected.read_hit_blocks,
            "{label}"
        );
        assert_eq!(
            simulated.write_hit_pages, expected.write_hit_blocks,
            "{label}"
        );
        assert_eq!(
            simulated.dirty_evictions, expected.dirty_evictions,
            "{label}"
        );
        assert_eq!(
            simulated.clean_evictions, expected.clean_evictions,
            "{label}"
        );
        assert_eq!(simulated.writebacks, expected.writebacks, "{label}");
        assert_eq!(simulated.no_slot, expected.no_slot, "{label}");
        assert!(
            simulated.hit_ratio > 0.2,
            "{label}: {}",
            simulated.hit_ratio
        );
        assert_eq!(simulated.block_bytes, block_bytes);
        assert_eq!(simulated.mode, mode.name());
        assert_eq!(result.requests, 3_000);
        assert_eq!(
            simulated.fill_bytes,
            simulated.fills * block_bytes,
            "{label}: a fill writes a whole block"
        );
        if mode == CacheMode::Writeback {
            assert!(
                simulated.writebacks > 100,
                "{label}: idle time writes the dirt back"
            );
            assert_eq!(
                simulated.writeback_bytes,
                simulated.writebacks * block_bytes,
                "{label}"
            );
        } else {
            assert_eq!(
                simulated.dirty_evictions + simulated.writebacks,
                0,
                "{label}"
            );
        }
    }
}

/// Writes into a hot set of half the cache with the disk otherwise idle:
/// the dirty blocks are written back while home has no user IO, so
/// the dirty share never reaches the high watermark (40 %), and nothing is
/// dirty once the writes stop.
#[test]
fn a_writeback_cache_writes_back_in_idle_time_and_stays_under_the_high_watermark() {
    let config = config("block_bytes = \"4KiB\"\n");
    let slots = 4 * MIB / (4 * KIB);
    // A write per ms for 2 s cycling over 512 blocks (half the cache, each
    // rewritten every 512 ms), then a read of each block (every one a hit),
    // then silence. Without idle-time writeback the 512 dirty blocks (50 %)
    // would pass the high watermark.
    let mut requests: Vec<Request> = (0..2_000)
        .map(|index| {
            let block = index * 7 % (slots / 2);
            request(index * MS, Op::Write, block * 4 * KIB, 4 * KIB)
        })
        .collect();
    requests.extend((0..slots / 2).map(|index| {
        let block = index * 7 % (slots / 2);
        request(2 * SECOND + index * MS, Op::Read, block * 4 * KIB, 4 * KIB)
    }));
    let result = run(&config, CacheKind::Lru, &requests);
    let cache = cache(&result);
    eprintln!(
        "dirty max {} of {slots} blocks, writebacks {}, write hit ratio {:.3}",
        cache.dirty_blocks_max, cache.writebacks, cache.write_hit_ratio
    );
    assert!(cache.writebacks > 1_000, "{cache:?}");
    assert!(
        cache.dirty_blocks_max * 100 < slots * 40,
        "dirty {} of {slots} slots reached the high watermark",
        cache.dirty_blocks_max
    );
    assert!(cache.dirty_blocks_max > 0);
    assert_eq!(cache.dirty_blocks_end, 0, "idle time cleaned everything");
    assert_eq!(cache.read_hit_ratio, 1.0, "{cache:?}");
    assert_eq!(cache.dirty_evictions, 0, "the hot set fits");
    // Every write was answered by the slot alone: 10 µs, never the disk.
    assert!(
        result.tiers[0].avg_response_us < 100.0,
        "{}",
        result.tiers[0].avg_response_us
    );
    assert_eq!(result.tiers[1].user_ios, 0, "no user IO went home");
}

/// A 16 MiB sequential read in 128 KiB requests: past bcache's 4 MiB cutoff
/// the misses go to home and take no slot; with the cutoff off every block
/// is filled.
#[test]
fn a_sequential_scan_bypasses_the_cache_past_the_cutoff() {
    let requests: Vec<Request> = (0..128)
        .map(|index| request(index * 10 * MS, Op::Read, index * 128 * KIB, 128 * KIB))
        .collect();
    let block = 64 * KIB;
    let blocks = 16 * MIB / block;
    let cut = run(
        &config("block_bytes = \"64KiB\"\n"),
        CacheKind::Lru,
        &requests,
    );
    let cut = cache(&cut);
    // The requests up to and including the one that reaches 4 MiB of run
    // are not sequential yet: 31 requests of 2 blocks fill.
    let before_cutoff = (4 * MIB / (128 * KIB) - 1) * 2;
    assert_eq!(cut.fills, before_cutoff, "{cut:?}");
    assert_eq!(cut.bypassed, blocks - before_cutoff, "{cut:?}");
    assert_eq!(cut.read_hit_pages, 0);

    let open = run(
        &config("block_bytes = \"64KiB\"\nsequential_cutoff_bytes = 0\n"),
        CacheKind::Lru,
        &requests,
    );
    let open = cache(&open);
    assert_eq!(open.bypassed, 0);
    assert_eq!(open.fills + open.no_slot, blocks, "{open:?}");
    assert!(open.fills > cut.fills * 2, "{open:?}");
}

/// A hot set of 512 blocks read over and over, interleaved with a scan of
/// 8,192 blocks read once each in random order (not sequential: the cutoff
/// does not see it). `always` lets the scan push the hot set out of a FIFO;
/// `frequency` admits only blocks missed twice, so the scan stays out.
#[test]
fn frequency_admission_keeps_a_one_touch_scan_out() {
    let block = 4 * KIB;
    let mut random = XorShift(11);
    let mut scan: Vec<u64> = (0..8_192).map(|index| 1_024 + index).collect();
    for index in (1..scan.len()).rev() {
        let other = (random.next() % (index as u64 + 1)) as usize;
        scan.swap(index, other);
    }
    let mut requests = Vec::new();
    for (index, scanned) in scan.iter().enumerate() {
        let time = index as u64 * 2 * MS;
        let hot = random.next() % 512;
        requests.push(request(time, Op::Read, hot * block, block));
        requests.push(request(time + MS, Op::Read, scanned * block, block));
    }
    let run_with_admission = |admission: &str| {
        let config = config(&format!(
            "block_bytes = \"4KiB\"\nadmission = \"{admission}\"\nsequential_cutoff_bytes = 0\n"
        ));
        assert_eq!(
            config.stack.cache.admission,
            AdmissionKind::parse(admission).unwrap()
        );
        run(&config, CacheKind::Fifo, &requests)
    };
    let always = run_with_admission("always");
    let frequency = run_with_admission("frequency");
    let (always, frequency) = (cache(&always), cache(&frequency));
    eprintln!(
        "hit ratio: always {:.3}, frequency {:.3}; fills {} vs {}, rejected {}",
        always.read_hit_ratio,
        frequency.read_hit_ratio,
        always.fills,
        frequency.fills,
        frequency.rejected
    );
    assert_eq!(always.rejected, 0);
    assert!(frequency.rejected >= 8_000, "{frequency:?}");
    assert!(frequency.fills < always.fills / 4, "{frequency:?}");
    assert!(
        frequency.read_hit_ratio > always.read_hit_ratio + 0.1,
        "frequency {} vs always {}",
        frequency.read_hit_ratio,
        always.read_hit_ratio
    );
}

/// Random 4 KiB reads that miss: a fill reads the whole block from home,
/// so 64 KiB blocks read 16 times the bytes the user asked for, and 4 KiB
/// blocks read just those; neighbouring 4 KiB reads then hit a 64 KiB block.
#[test]
fn the_block_size_sets_the_fill_amplification_and_the_spatial_hits() {
    let mut random = XorShift(5);
    let pages = VOLUME / (4 * KIB);
    let requests: Vec<Request> = (0..2_000)
        .map(|index| {
            let page = random.next() % pages;
            request(index * 20 * MS, Op::Read, page * 4 * KIB, 4 * KIB)
        })
        .collect();
    let mut amplification = Vec::new();
    for block in ["4KiB", "64KiB"] {
        let config = config(&format!("block_bytes = \"{block}\"\n"));
        let result = run(&config, CacheKind::Lru, &requests);
        let cache = cache(&result);
        let home = &result.tiers[1].counters;
        let missed_bytes = (cache.read_pages - cache.read_hit_pages) * 4 * KIB;
        assert_eq!(
            home.read_bytes,
            cache.fills * config.stack.cache.block_bytes + (missed_bytes - cache.fills * 4 * KIB)
        );
        amplification.push(home.read_bytes as f64 / missed_bytes as f64);
    }
    assert_eq!(amplification[0], 1.0);
    assert!(amplification[1] > 15.0, "{amplification:?}");

    // Each 4 KiB read followed by its 15 neighbours: one miss per 64 KiB
    // block, then 15 hits; 4 KiB blocks miss every one.
    let requests: Vec<Request> = (0..2_048)
        .map(|index| {
            let base = (index / 16) * 64 * KIB * 7 % (VOLUME - 64 * KIB);
            let base = base / (64 * KIB) * (64 * KIB);
            request(
                index * 5 * MS,
                Op::Read,
                base + (index % 16) * 4 * KIB,
                4 * KIB,
            )
        })
        .collect();
    let small = run(
        &config("block_bytes = \"4KiB\"\nsequential_cutoff_bytes = 0\n"),
        CacheKind::Lru,
        &requests,
    );
    let large = run(
        &config("block_bytes = \"64KiB\"\nsequential_cutoff_bytes = 0\n"),
        CacheKind::Lru,
        &requests,
    );
    let (small, large) = (cache(&small), cache(&large));
    assert_eq!(large.read_hit_pages, 2_048 / 16 * 15, "{large:?}");
    assert!(small.read_hit_ratio < 0.1, "{small:?}");
}

/// Writethrough acknowledges a write after home has it: never faster than
/// the disk, nothing dirty, nothing written back. Writearound does not
/// allocate on a write miss.
#[test]
fn writethrough_waits_for_home_and_writearound_allocates_on_reads_only() {
    let requests: Vec<Request> = (0..200)
        .map(|index| {
            request(
                index * 10 * MS,
                Op::Write,
                (index % 50) * 64 * KIB,
                64 * KIB,
            )
        })
        .collect();
    let through = run(
        &config("mode = \"writethrough\"\n"),
        CacheKind::Lru,
        &requests,
    );
    let cache_through = cache(&through);
    assert_eq!(cache_through.dirty_blocks_max, 0);
    assert_eq!(cache_through.writebacks, 0);
    assert_eq!(
        cache_through.write_hit_pages, 150,
        "50 cold misses allocate, then hits"
    );
    assert!(
        through.response_p50_us >= 1_000.0,
        "{}",
        through.response_p50_us
    );

    let around = run(
        &config("mode = \"writearound\"\n"),
        CacheKind::Lru,
        &requests,
    );
    let cache_around = cache(&around);
    assert_eq!(cache_around.write_hit_pages, 0);
    assert_eq!(cache_around.fills, 0);
    assert_eq!(around.tiers[1].user_ios, 200);

    let back = run(&config(""), CacheKind::Lru, &requests);
    assert!(back.response_p50_us < 100.0, "{}", back.response_p50_us);
    assert_eq!(cache(&back).mode, "writeback");
}

/// Runs `policy` on the stack's own device models.
fn run_on_models(config: &SimConfig, policy: &str, requests: &[Request]) -> RunResult {
    let strategy = tierd_sim::Strategy::parse(policy).unwrap();
    let controller = tierd_sim::build_controller(config, &strategy).unwrap();
    let devices = tierd_sim::devices::build_devices(config).unwrap();
    let mut reader =
        IteratorReader::new(requests.iter().copied(), &["test"], Format::Tierd, "test");
    run_with(
        config,
        policy,
        controller,
        devices,
        &mut reader,
        &mut |_| {},
    )
    .unwrap()
}

/// A read that misses and fills waits, on a flash home, for its own part
/// only (the whole 64 KiB block is read for the slot in the background):
/// a cache's misses are as fast as `none`'s reads. On a disk home the
/// whole block is one read (a second would wait a rotation).
#[test]
fn a_fill_answers_the_user_from_its_own_part_where_home_is_flash() {
    // 4 KiB reads scattered over 1 GiB, one every 20 ms (nothing queues,
    // even on the disk),
    // each in a block of its own: every read misses and fills.
    let volume = 1 << 30;
    let mut random = XorShift(11);
    let requests: Vec<Request> = (0..2_000)
        .map(|index| {
            let block = random.next() % (volume / (64 * KIB));
            let within = (random.next() % 16) * 4 * KIB;
            request(
                index * 20 * MS,
                Op::Read,
                block * 64 * KIB + within,
                4 * KIB,
            )
        })
        .collect();
    for (stack, splits) in [("ssd-mem", true), ("hdd-ssd", false)] {
        let mut config = SimConfig::new(TierStack::preset(stack).unwrap(), volume);
        config.stack.tiers[0].capacity_bytes = Some(64 * MIB);
        config.period_ns = SECOND;
        let none = run_on_models(&config, "none", &requests);
        let lru = run_on_models(&config, "lru", &requests);
        let counters = cache(&lru);
        assert!(counters.fills > 1_900, "{stack}: {} fills", counters.fills);
        let ratio = lru.response.mean_ns().unwrap() / none.response.mean_ns().unwrap();
        if splits {
            // Every fill but one whose slot write had not started when the
            // last user read completed (fills count at the slot write).
            assert!(
                counters.split_fills.abs_diff(counters.fills) <= 1,
                "{stack}: {} of {} fills split",
                counters.split_fills,
                counters.fills
            );
            assert!(ratio < 1.05, "{stack}: lru ÷ none mean {ratio:.3}");
        } else {
            assert_eq!(counters.split_fills, 0, "{stack}");
            // The 64 KiB read costs a disk little more than 4 KiB.
            assert!(ratio < 1.15, "{stack}: lru ÷ none mean {ratio:.3}");
        }
    }
}
