//! Behaviour every model owes its caller: determinism, the calling protocol,
//! presets by name, clamping, and the queue orders and SMR cache rules that
//! the validation figures rest on.

use tierd_common::op::Op;
use tierd_common::rng::{Rng, SeededRng};
use tierd_device::model::hdd::{Hdd, HddConfig, QueueOrder};
use tierd_device::model::smr::{Smr, SmrConfig};
use tierd_device::{Completion, DeviceIo, DeviceModel, DevicePreset};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// An open-loop run: seeded arrivals (exponential gaps, mixed sizes and
/// ops), submitted at their time without advancing first when an arrival
/// and an event coincide (`submit_first`) or after advancing (otherwise).
fn open_loop(
    model: &mut dyn DeviceModel,
    seed: u64,
    count: u64,
    mean_gap_ns: f64,
    submit_first: bool,
) -> Vec<Completion> {
    let mut rng = SeededRng::new(seed);
    let capacity = model.capacity_bytes();
    let mut arrival = 0u64;
    let mut submitted = 0u64;
    let mut done = Vec::new();
    let mut now = 0u64;
    let mut next_arrival = Some(0u64);
    loop {
        let event = model.next_event_ns();
        match (next_arrival, event) {
            (Some(time), event)
                if event.is_none_or(|event| time < event || (submit_first && time == event)) =>
            {
                now = now.max(time);
                let length = [512, 4 * KIB, 8 * KIB, 64 * KIB, MIB][rng.below(5) as usize];
                let op = if rng.chance(0.3) { Op::Write } else { Op::Read };
                let offset = if rng.chance(0.4) {
                    // A hot 1 GiB region.
                    (1 << 30) + rng.below(1 << 30)
                } else {
                    rng.below(capacity)
                } / 512
                    * 512;
                model.submit(
                    now,
                    DeviceIo {
                        id: submitted,
                        op,
                        offset_bytes: offset,
                        length_bytes: length,
                        background: rng.chance(0.1),
                    },
                );
                submitted += 1;
                arrival += rng.exponential(mean_gap_ns) as u64;
                next_arrival = (submitted < count).then_some(arrival);
            }
            (_, Some(event)) => {
                now = now.max(event);
                model.advance(now, &mut done);
            }
            (None, None) => break,
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
        if next_arrival.is_none() && model.outstanding() == 0 {
            break;
        }
    }
    done
}

fn every_preset(seed: u64) -> Vec<Box<dyn DeviceModel>> {
    DevicePreset::ALL
        .iter()
        .map(|preset| preset.build(None, seed).unwrap())
        .collect()
}

#[test]
fn same_inputs_give_identical_completions() {
    for (mut first, mut second) in every_preset(9).into_iter().zip(every_preset(9)) {
        let gap = if first.name() == "memory" {
            2_000.0
        } else {
            3e6
        };
        let a = open_loop(first.as_mut(), 17, 3_000, gap, false);
        let b = open_loop(second.as_mut(), 17, 3_000, gap, false);
        assert_eq!(a.len(), 3_000, "{}", first.name());
        assert_eq!(a, b, "{}", first.name());
        assert_eq!(first.counters(), second.counters(), "{}", first.name());
        // Each id completes exactly once.
        let mut ids: Vec<u64> = a.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 3_000);
        // Completions come out in time order.
        assert!(a.windows(2).all(|pair| pair[0].done_ns <= pair[1].done_ns));
    }
}

/// Keeps about `depth` IOs outstanding; at every model event submits one
/// new IO at exactly the event's time, before advancing to it
/// (`submit_first`) or after.
fn event_driven(
    model: &mut dyn DeviceModel,
    seed: u64,
    count: u64,
    depth: u64,
    submit_first: bool,
) -> Vec<Completion> {
    let mut rng = SeededRng::new(seed);
    let capacity = model.capacity_bytes();
    let mut next_id = 0u64;
    let mut submit = |model: &mut dyn DeviceModel, now: u64, next_id: &mut u64| {
        if *next_id < count {
            let op = if rng.chance(0.3) { Op::Write } else { Op::Read };
            let length = [4 * KIB, 64 * KIB, MIB][rng.below(3) as usize];
            model.submit(
                now,
                DeviceIo {
                    id: *next_id,
                    op,
                    offset_bytes: rng.below(capacity / 4096) * 4096,
                    length_bytes: length,
                    background: false,
                },
            );
            *next_id += 1;
        }
    };
    for _ in 0..depth {
        submit(model, 0, &mut next_id);
    }
    let mut done = Vec::new();
    while let Some(event) = model.next_event_ns() {
        if submit_first {
            submit(model, event, &mut next_id);
            model.advance(event, &mut done);
        } else {
            model.advance(event, &mut done);
            submit(model, event, &mut next_id);
        }
        if next_id == count && model.outstanding() == 0 {
            break;
        }
    }
    done
}

#[test]
fn submitting_before_or_after_advancing_to_the_same_instant_agrees() {
    for (mut first, mut second) in every_preset(4).into_iter().zip(every_preset(4)) {
        let a = event_driven(first.as_mut(), 23, 2_000, 4, false);
        let b = event_driven(second.as_mut(), 23, 2_000, 4, true);
        assert_eq!(a.len(), 2_000, "{}", first.name());
        assert_eq!(a, b, "{}", first.name());
        assert_eq!(first.counters(), second.counters(), "{}", first.name());
    }
}

#[test]
fn the_seed_moves_the_spindle_and_nothing_else() {
    let config = HddConfig::savvio_10k4();
    let mut one = Hdd::new(&config, 1).unwrap();
    let mut two = Hdd::new(&config, 2).unwrap();
    let a = open_loop(&mut one, 5, 500, 3e6, false);
    let b = open_loop(&mut two, 5, 500, 3e6, false);
    assert_ne!(a, b);
    let mean = |run: &[Completion]| {
        run.iter().map(Completion::response_ns).sum::<u64>() as f64 / run.len() as f64
    };
    assert!((mean(&a) / mean(&b) - 1.0).abs() < 0.15);
}

#[test]
fn counters_add_up() {
    for mut model in every_preset(2) {
        let gap = if model.name() == "memory" {
            2_000.0
        } else {
            3e6
        };
        let done = open_loop(model.as_mut(), 31, 1_000, gap, false);
        let counters = model.counters();
        assert_eq!(counters.ios(), 1_000, "{}", model.name());
        let response: u64 = done.iter().map(Completion::response_ns).sum();
        let service: u64 = done.iter().map(Completion::service_ns).sum();
        assert_eq!(counters.response_ns_total, response);
        assert_eq!(counters.service_ns_total, service);
        assert_eq!(
            counters.background_ios,
            done.iter().filter(|c| c.background).count() as u64
        );
        let elapsed = done.iter().map(|c| c.done_ns).max().unwrap();
        assert!(counters.busy_ns <= elapsed, "{}", model.name());
        assert!(counters.busy_ns > 0);
        assert_eq!(model.outstanding(), 0);
    }
}

#[test]
fn presets_parse_by_name_and_build_with_overrides() {
    for preset in DevicePreset::ALL {
        assert_eq!(preset.name().parse::<DevicePreset>(), Ok(preset));
        assert_eq!(preset.to_string(), preset.name());
        let serde_name = serde_json::to_value(preset).unwrap();
        assert_eq!(serde_name.as_str(), Some(preset.name()));
        let model = preset.build(None, 0).unwrap();
        assert_eq!(model.capacity_bytes(), preset.default_capacity_bytes());
        assert_eq!(model.name(), preset.name());
    }
    assert_eq!(
        "Savvio-10K.4".parse::<DevicePreset>(),
        Ok(DevicePreset::Savvio10k4)
    );
    let error = "floppy".parse::<DevicePreset>().unwrap_err();
    assert!(
        error.contains("floppy") && error.contains("savvio10k4"),
        "{error}"
    );

    let overrides = serde_json::json!({"queue_order": "fifo", "queue_depth": 1});
    let model = DevicePreset::Savvio10k4
        .build_with(Some(100 << 30), Some(overrides), 0)
        .unwrap();
    assert_eq!(model.capacity_bytes(), 100 << 30);
    let bad = serde_json::json!({"parallel_units": 8, "warp": 9});
    let error = DevicePreset::Archive8tb
        .build_with(None, Some(bad), 0)
        .err()
        .unwrap();
    assert_eq!(error.key, "model");
    assert!(error.reason.contains("parallel_units"), "{error}");
    let error = DevicePreset::P3700
        .build_with(None, Some(serde_json::json!({"parallel_units": 0})), 0)
        .err()
        .unwrap();
    assert_eq!(error.key, "parallel_units");
}

#[test]
fn ios_past_the_end_are_clamped_and_served() {
    for mut model in every_preset(1) {
        let capacity = model.capacity_bytes();
        model.submit(
            0,
            DeviceIo {
                id: 1,
                op: Op::Read,
                offset_bytes: capacity + MIB,
                length_bytes: 4 * KIB,
                background: false,
            },
        );
        model.submit(
            0,
            DeviceIo {
                id: 2,
                op: Op::Write,
                offset_bytes: capacity - 512,
                length_bytes: MIB,
                background: false,
            },
        );
        model.submit(
            0,
            DeviceIo {
                id: 3,
                op: Op::Read,
                offset_bytes: 0,
                length_bytes: 0,
                background: false,
            },
        );
        let mut done = Vec::new();
        while let Some(next) = model.next_event_ns() {
            model.advance(next, &mut done);
            if model.outstanding() == 0 {
                break;
            }
        }
        assert_eq!(done.len(), 3, "{}", model.name());
        assert_eq!(model.counters().ios(), 3);
    }
}

#[test]
fn elevator_sweeps_up_then_down() {
    let mut config = HddConfig::savvio_10k4();
    config.queue_order = QueueOrder::Elevator;
    config.cache_segments = 0;
    let mut hdd = Hdd::new(&config, 0).unwrap();
    let mut rng = SeededRng::new(3);
    let capacity = config.capacity_bytes;
    // The first request moves the head to the middle; the rest queue.
    let mut offsets = vec![capacity / 2];
    offsets.extend((0..200).map(|_| rng.below(capacity / 4096) * 4096));
    for (id, offset) in offsets.iter().enumerate() {
        hdd.submit(
            0,
            DeviceIo {
                id: id as u64,
                op: Op::Read,
                offset_bytes: *offset,
                length_bytes: 4096,
                background: false,
            },
        );
    }
    let mut done = Vec::new();
    while let Some(next) = hdd.next_event_ns() {
        hdd.advance(next, &mut done);
    }
    let cylinders: Vec<u32> = done
        .iter()
        .map(|c| {
            hdd.mechanics()
                .geometry
                .locate(offsets[c.id as usize])
                .cylinder
        })
        .collect();
    let turn = cylinders
        .windows(2)
        .position(|pair| pair[1] < pair[0])
        .expect("the sweep turns");
    assert!(turn > 50 && turn < 150, "turn at {turn}");
    assert!(cylinders[..=turn].windows(2).all(|p| p[0] <= p[1]));
    assert!(cylinders[turn..].windows(2).all(|p| p[0] >= p[1]));
}

#[test]
fn sptf_does_not_starve_a_far_request() {
    let config = HddConfig::savvio_10k4();
    let mut hdd = Hdd::new(&config, 0).unwrap();
    let mut rng = SeededRng::new(8);
    let mut done = Vec::new();
    let mut now = 0;
    let mut id = 0u64;
    // 32 outstanding reads in the first 1 GiB, forever refilled, plus one
    // read at the far end of the disk submitted early.
    let submit = |hdd: &mut Hdd, now: u64, offset: u64, id: &mut u64| {
        hdd.submit(
            now,
            DeviceIo {
                id: *id,
                op: Op::Read,
                offset_bytes: offset,
                length_bytes: 4096,
                background: false,
            },
        );
        *id += 1;
    };
    for _ in 0..31 {
        submit(&mut hdd, now, rng.below(1 << 30) / 4096 * 4096, &mut id);
    }
    submit(&mut hdd, now, config.capacity_bytes - 4096, &mut id);
    let far = id - 1;
    let mut far_done = None;
    while far_done.is_none() && now < 10_000_000_000 {
        now = hdd.next_event_ns().unwrap();
        hdd.advance(now, &mut done);
        for completion in done.drain(..) {
            if completion.id == far {
                far_done = Some(completion);
            }
            submit(&mut hdd, now, rng.below(1 << 30) / 4096 * 4096, &mut id);
        }
    }
    let far_done = far_done.expect("the far read completes");
    let limit_ns = (config.starvation_limit_ms * 1e6) as u64;
    assert!(
        far_done.response_ns() >= limit_ns / 2,
        "reordering is active"
    );
    assert!(far_done.response_ns() < limit_ns + 100_000_000);
}

#[test]
fn smr_full_media_cache_forces_cleaning_before_writes() {
    let mut config = SmrConfig::archive_8tb();
    config.media_cache_bytes = 64 * MIB;
    config.busy_clean_spacing_ms = 1e9;
    config.idle_clean_delay_ms = 1e9;
    let mut smr = Smr::new(&config, 0).unwrap();
    let mut rng = SeededRng::new(12);
    let mut done = Vec::new();
    let mut now = 0;
    for id in 0..200u64 {
        smr.submit(
            now,
            DeviceIo {
                id,
                op: Op::Write,
                offset_bytes: rng.below(config.capacity_bytes / 4096 - 256) * 4096 + 512,
                length_bytes: MIB,
                background: false,
            },
        );
        while smr.outstanding() > 0 {
            now = smr.next_event_ns().unwrap();
            smr.advance(now, &mut done);
        }
    }
    let stats = smr.stats();
    assert_eq!(stats.cache_writes, 200);
    assert!(stats.media_cache_used_bytes <= config.media_cache_bytes);
    assert!(stats.bands_cleaned >= 200 - 64, "{stats:?}");
    let slow = done
        .iter()
        .filter(|c| c.response_ns() > 300_000_000)
        .count();
    assert!(slow >= 100, "writes waited for cleaning: {slow}");
}

#[test]
fn smr_whole_band_writes_replace_cached_data() {
    let mut config = SmrConfig::archive_8tb();
    // Bands of whole MiB, so 1 MiB writes fill one exactly.
    config.band_bytes = 30 * MIB;
    let mut smr = Smr::new(&config, 0).unwrap();
    let band = config.band_bytes;
    let mut done = Vec::new();
    let mut now = 0;
    let mut run = |smr: &mut Smr, id: u64, offset: u64, length: u64, now: &mut u64| {
        smr.submit(
            *now,
            DeviceIo {
                id,
                op: Op::Write,
                offset_bytes: offset,
                length_bytes: length,
                background: false,
            },
        );
        while smr.outstanding() > 0 {
            *now = smr.next_event_ns().unwrap();
            smr.advance(*now, &mut done);
        }
    };
    // A random write into band 10 goes to the media cache.
    run(&mut smr, 0, 10 * band + 4096, 4096, &mut now);
    assert_eq!(smr.stats().dirty_bands, 1);
    assert_eq!(smr.stats().media_cache_used_bytes, 4096);
    // Writing band 10 from its first byte to its last replaces it.
    for chunk in 0..band / MIB {
        run(&mut smr, 1 + chunk, 10 * band + chunk * MIB, MIB, &mut now);
    }
    let stats = smr.stats();
    assert_eq!(stats.dirty_bands, 0, "{stats:?}");
    assert_eq!(stats.media_cache_used_bytes, 0);
    assert_eq!(stats.direct_writes, band / MIB);
    // A stream left half way and pushed out by others leaves a band to repair.
    run(&mut smr, 100, 20 * band, MIB, &mut now);
    for other in 0..config.sequential_streams as u64 {
        run(&mut smr, 101 + other, (30 + other) * band, MIB, &mut now);
    }
    assert_eq!(smr.stats().dirty_bands, 1);
    assert_eq!(smr.stats().bands_cleaned, 0);
}

#[test]
fn smr_a_stream_crossing_a_band_boundary_leaves_the_next_band_to_repair() {
    // The preset's bands are whole tracks, no multiple of 1 MiB: 1 MiB
    // writes from a band's first byte cross its end inside a write.
    let config = SmrConfig::archive_8tb();
    let band = config.band_bytes;
    assert_ne!(band % MIB, 0);
    let mut smr = Smr::new(&config, 0).unwrap();
    let mut done = Vec::new();
    let mut now = 0;
    let writes = band / MIB + 2;
    for id in 0..writes {
        smr.submit(
            now,
            DeviceIo {
                id,
                op: Op::Write,
                offset_bytes: 4 * band + id * MIB,
                length_bytes: MIB,
                background: false,
            },
        );
        while smr.outstanding() > 0 {
            now = smr.next_event_ns().unwrap();
            smr.advance(now, &mut done);
        }
    }
    let stats = smr.stats();
    let spill = (4 * band + (band / MIB + 1) * MIB) - 5 * band;
    // One write ran past band 4's end: band 4 is replaced, band 5's first
    // bytes went to the media cache and band 5 needs a clean.
    assert_eq!(stats.direct_writes, writes);
    assert_eq!(stats.split_writes, 1);
    assert_eq!(stats.cache_writes, 0);
    assert_eq!(stats.media_cache_used_bytes, spill);
    assert_eq!(stats.dirty_bands, 1, "{stats:?}");
    // The stream went on in band 5; writing it to its end does not replace
    // it, since its first bytes are not on the platter.
    let mut offset = 4 * band + writes * MIB;
    let mut id = writes;
    while offset < 6 * band {
        let length = MIB.min(6 * band - offset);
        smr.submit(
            now,
            DeviceIo {
                id,
                op: Op::Write,
                offset_bytes: offset,
                length_bytes: length,
                background: false,
            },
        );
        while smr.outstanding() > 0 {
            now = smr.next_event_ns().unwrap();
            smr.advance(now, &mut done);
        }
        offset += length;
        id += 1;
    }
    let stats = smr.stats();
    assert_eq!(stats.split_writes, 1);
    assert_eq!(stats.dirty_bands, 1, "{stats:?}");
    assert_eq!(stats.media_cache_used_bytes, spill);
}

/// The probes policies take their priors from: a disk serves one random
/// read at a time (its per-IO time at 64 in flight is its service time,
/// shortened only by reordering), an SSD serves several at once (per-IO
/// time at its peak well under its QD1 service), and a 1 MiB read costs
/// more than a 4 KiB one on both.
#[test]
fn probes_tell_a_disk_from_an_ssd() {
    use tierd_device::{probe_capacity, probe_read_service, DevicePreset};
    let probe = |preset: DevicePreset| {
        let mut model = preset.build(None, 1).unwrap();
        let service = probe_read_service(model.as_mut()).unwrap();
        let capacity = probe_capacity(model.as_mut()).unwrap();
        (service, capacity)
    };
    let (((_, disk_small), (_, disk_large)), ((_, disk_peak_small), _)) =
        probe(DevicePreset::Savvio10k4);
    assert!(
        (2_000_000..20_000_000).contains(&disk_small),
        "{disk_small}"
    );
    assert!(disk_large > disk_small);
    // Reordering 64 queued reads shortens seeks, but not by an order of magnitude.
    assert!(
        disk_peak_small * 4 > disk_small,
        "{disk_peak_small} vs {disk_small}"
    );
    let (((_, ssd_small), (_, ssd_large)), ((_, ssd_peak_small), _)) = probe(DevicePreset::P3700);
    assert!(
        ssd_small < 1_000_000 && ssd_large > ssd_small,
        "{ssd_small} {ssd_large}"
    );
    assert!(
        ssd_peak_small * 4 < ssd_small,
        "{ssd_peak_small} vs {ssd_small}"
    );
}
