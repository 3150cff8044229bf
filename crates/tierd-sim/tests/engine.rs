//! The simulator's rules on hand-built traces and fixed-latency devices,
//! where every expected figure can be worked out by hand.

use tierd_device::DeviceModel;
use tierd_policy::{Move, MoveReason, Plan, Policy, View};
use tierd_sim::testing::FixedLatencyDevice;
use tierd_sim::{run_with, Controller, Replay, RunResult, SimConfig, SimError, TierStack, Window};
use tierd_trace::{Format, IteratorReader, Op, Request};

const MIB: u64 = 1 << 20;
const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000_000_000;

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

/// Two tiers, 1 MiB segments, 256 KiB chunks copied one at a time unless
/// `migration` (appended lines) says otherwise. The fast tier is not
/// written through to home (`unsafe_volatile`): these tests time the move
/// machine alone.
fn stack(migration: &str) -> TierStack {
    let in_flight = if migration.contains("chunks_in_flight") {
        ""
    } else {
        "chunks_in_flight = 1\n"
    };
    let text = format!(
        "segment_bytes = \"1MiB\"\n\
         [[tier]]\nname = \"fast\"\ndevice = \"memory\"\ncapacity = \"4MiB\"\n\
         unsafe_volatile = true\n\
         [[tier]]\nname = \"home\"\ndevice = \"savvio10k4\"\n\
         [migration]\nchunk_bytes = \"256KiB\"\n{in_flight}{migration}"
    );
    TierStack::parse(&text, "test").unwrap()
}

fn config(volume_bytes: u64, migration: &str) -> SimConfig {
    let mut config = SimConfig::new(stack(migration), volume_bytes);
    config.period_ns = SECOND;
    config
}

/// fast: 10 µs per IO; home: 1 ms per IO plus `home_bytes_per_second`.
fn devices(volume_bytes: u64, home_bytes_per_second: u64) -> Vec<Box<dyn DeviceModel>> {
    vec![
        Box::new(FixedLatencyDevice::new("fast", 4 * MIB, 10_000, 10_000)),
        Box::new(
            FixedLatencyDevice::new("home", volume_bytes, MS, MS)
                .with_bandwidth(home_bytes_per_second),
        ),
    ]
}

/// Emits the listed moves at the end of the given periods.
struct Scripted {
    script: Vec<(u64, Move)>,
}

impl Scripted {
    fn promote(period: u64, segment: u32) -> Scripted {
        Scripted {
            script: vec![(period, promotion(segment))],
        }
    }
}

fn promotion(segment: u32) -> Move {
    Move {
        segment,
        from: 1,
        to: 0,
        reason: MoveReason {
            rule: "test:scripted".to_string(),
            detail: format!("promote segment {segment}"),
        },
    }
}

impl Policy for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn plan(&mut self, view: &View) -> Plan {
        let index = view.latest().map_or(0, |period| period.index);
        Plan {
            moves: self
                .script
                .iter()
                .filter(|(period, _)| *period == index)
                .map(|(_, planned)| planned.clone())
                .collect(),
            ..Plan::default()
        }
    }
}

fn run(
    config: &SimConfig,
    controller: Controller,
    devices: Vec<Box<dyn DeviceModel>>,
    requests: Vec<Request>,
) -> Result<RunResult, SimError> {
    let mut reader = IteratorReader::new(requests.into_iter(), &["test"], Format::Tierd, "test");
    run_with(
        config,
        "test",
        controller,
        devices,
        &mut reader,
        &mut |_| {},
    )
}

fn policy(policy: impl Policy + 'static) -> Controller {
    Controller::Policy(Box::new(policy))
}

fn none() -> Controller {
    Controller::Policy(Box::new(tierd_policy::policies::none::NonePolicy))
}

#[test]
fn a_request_across_segments_is_split_and_completes_with_its_last_piece() {
    let volume = 8 * MIB;
    let settings = config(volume, "");
    // Crosses segments 0, 1 and 2: 4 KiB + 1 MiB + 4 KiB.
    let crossing = request(0, Op::Read, MIB - 4096, MIB + 8192);
    let result = run(&settings, none(), devices(volume, 0), vec![crossing]).unwrap();
    assert_eq!(result.requests, 1);
    assert_eq!(result.pieces, 3);
    // One home server, 1 ms per piece, served one after the other.
    assert_eq!(result.response.max_ns(), Some(3 * MS));
    assert_eq!(result.tiers[1].user_ios, 3);
    assert_eq!(result.tiers[1].user_bytes, MIB + 8192);
    assert_eq!(result.elapsed_ns, 3 * MS);

    // After segment 1 moves to the fast tier, the middle piece is served there.
    let requests = vec![
        request(0, Op::Read, 0, 4096),
        request(5 * SECOND, Op::Read, MIB - 4096, MIB + 8192),
    ];
    let result = run(
        &settings,
        policy(Scripted::promote(0, 1)),
        devices(volume, 0),
        requests,
    )
    .unwrap();
    assert_eq!(result.moves, 1);
    assert_eq!(result.tiers[0].user_ios, 1);
    assert_eq!(result.tiers[0].user_bytes, MIB);
    assert_eq!(result.tiers[1].user_ios, 3);
    // The split request: two home pieces in series (2 ms); the fast one is quicker.
    assert_eq!(result.response.max_ns(), Some(2 * MS));
    let record = &result.move_log[0];
    assert_eq!((record.segment, record.from, record.to), (1, 1, 0));
    assert_eq!(record.start_ns, SECOND);
    // Four chunks, each a 1 ms home read then a 10 µs fast write.
    assert_eq!(record.end_ns, SECOND + 4 * (MS + 10_000));
    assert_eq!(record.bytes, MIB);
    assert_eq!(record.stall_ns, 0);
    assert_eq!(result.migrated_bytes, MIB);
    assert_eq!(result.fast_bytes_max, MIB);
    assert_eq!(result.move_mean_us, Some(4.04 * 1000.0));

    // Four chunks in flight: the home disk reads them back to back, and
    // only the last fast write is not overlapped.
    let parallel = config(volume, "chunks_in_flight = 4\n");
    let requests = vec![
        request(0, Op::Read, 0, 4096),
        request(5 * SECOND, Op::Read, 0, 4096),
    ];
    let result = run(
        &parallel,
        policy(Scripted::promote(0, 1)),
        devices(volume, 0),
        requests,
    )
    .unwrap();
    assert_eq!(result.move_log[0].end_ns, SECOND + 4 * MS + 10_000);
}

#[test]
fn writes_during_a_promotion_are_mirrored_and_no_chunk_is_copied_twice() {
    let volume = 8 * MIB;
    // 10 MB/s home: a 256 KiB chunk read takes 1 ms + 26.2144 ms, a 4 KiB
    // write 1 ms + 0.4096 ms; the fast tier takes 10 µs per IO.
    let config = config(volume, "");
    let requests = vec![
        request(0, Op::Read, 0, 4096),
        // Into chunk 0 of segment 1, after chunk 0 has landed: mirrored at once.
        request(SECOND + 40 * MS, Op::Write, MIB, 4096),
        // A read during the copy: served by the source (home).
        request(SECOND + 50 * MS, Op::Read, MIB + 8192, 4096),
        // Into chunk 2 while it is being copied: that part is handed to the
        // mover and written to the target after the copy lands; the write
        // itself does not wait.
        request(SECOND + 60 * MS, Op::Write, MIB + 512 * 1024, 4096),
        // Long after the move: served by the fast tier.
        request(3 * SECOND, Op::Read, MIB, 4096),
    ];
    let result = run(
        &config,
        policy(Scripted::promote(0, 1)),
        devices(volume, 10_000_000),
        requests,
    )
    .unwrap();
    assert_eq!(result.moves, 1);
    let record = &result.move_log[0];
    assert_eq!(record.copy_passes, 1);
    assert_eq!(record.bytes, MIB);
    assert_eq!(record.stall_ns, 0);
    assert_eq!(record.held_pieces, 0);
    assert_eq!(record.mirrored_writes, 1);
    assert_eq!(record.deferred_target_halves, 1);
    // Home, FIFO, in µs from 1 s: chunk 0 read 0-27214.4 (lands +10);
    // chunk 1 read 27224.4-54438.8; the first write's source half waits
    // behind it, 54438.8-55848.4, then the read at 50 ms, 55848.4-57258;
    // chunk 2 (issued when chunk 1 landed) read 57258-84472.4 (lands
    // 84482.4, then the handed-over part of the second write, 10 µs); the
    // second write, queued at 60 ms, 84472.4-85882; chunk 3 read
    // 85882-113096.4, lands 113106.4: the flip.
    let chunk_read = MS + 26_214_400;
    let small_write = MS + 409_600;
    let chunk_2_read_start = SECOND + 2 * chunk_read + 10_000 + 2 * small_write;
    assert_eq!(
        record.end_ns,
        chunk_2_read_start + chunk_read + small_write + chunk_read + 10_000
    );
    // The mirrored write is acknowledged by its (slower) home half: the
    // mirror cost it nothing.
    assert_eq!(result.mirrored_writes, 1);
    assert_eq!(result.mirror_wait_max_us, 0.0);
    assert_eq!(result.tiers[0].user_ios, 1);
    assert_eq!(result.tiers[1].user_ios, 4);
    // Target parts are migration IO on the fast tier: 4 chunks, 1 mirrored
    // part, 1 handed-over part.
    assert_eq!(result.tiers[0].counters.writes, 6);
}

#[test]
fn writes_during_a_demotion_wait_for_a_mirrored_slow_half_never_for_a_copy() {
    let volume = 8 * MIB;
    let config = config(volume, "");
    let mut demotion = promotion(1);
    demotion.from = 0;
    demotion.to = 1;
    let script = vec![(0, promotion(1)), (2, demotion)];
    let requests = vec![
        request(0, Op::Read, 0, 4096),
        // On the fast tier: home is stale, so the demotion copies.
        request(2 * SECOND, Op::Write, MIB + 768 * 1024, 4096),
        // During the demotion (from 3 s): into chunk 1 while it is copied,
        // then into chunk 0, already copied.
        request(3 * SECOND + 30 * MS, Op::Write, MIB + 256 * 1024, 4096),
        request(3 * SECOND + 40 * MS, Op::Write, MIB, 4096),
        request(5 * SECOND, Op::Read, MIB, 4096),
    ];
    let result = run(
        &config,
        policy(Scripted { script }),
        devices(volume, 10_000_000),
        requests,
    )
    .unwrap();
    assert_eq!(result.moves, 2);
    let record = &result.move_log[1];
    assert_eq!((record.from, record.to), (0, 1));
    assert_eq!(record.start_ns, 3 * SECOND);
    assert_eq!(
        (record.mirrored_writes, record.deferred_target_halves),
        (1, 1)
    );
    // Home, in µs from 3 s: chunk 0 written 10-27224.4; chunk 1 written
    // 27234.4-54448.8; then the second write's mirrored half (queued at
    // 40 ms) to 55858.4; the first write's part, handed to the mover while
    // chunk 1 was copied, to 57268: chunk 1 has landed; chunk 2 read from
    // fast and written to 84492.4; chunk 3 likewise to 111716.8.
    let chunk_write = MS + 26_214_400;
    let small_write = MS + 409_600;
    let chunk_1_landed = 3 * SECOND + 2 * (10_000 + chunk_write);
    let second_write_acked = chunk_1_landed + small_write;
    let chunk_1_applied = chunk_1_landed + 2 * small_write;
    assert_eq!(record.end_ns, chunk_1_applied + 2 * (10_000 + chunk_write));
    // The second write's source half finished 10 µs after it was issued;
    // it was acknowledged when its mirrored half reached home. The first
    // write was acknowledged by its source half alone (10 µs).
    let second_wait = second_write_acked - (3 * SECOND + 40 * MS + 10_000);
    assert_eq!(record.mirror_wait_max_ns, second_wait);
    assert_eq!(result.mirror_wait_max_us, second_wait as f64 / 1e3);
    assert_eq!(result.switch_over_stall_max_us, 0.0);
    // The last read finds the segment home again.
    assert_eq!(result.tiers[1].user_ios, 2);
}

#[test]
fn invalid_and_overflowing_moves_are_dropped() {
    let volume = 8 * MIB;
    let config = config(volume, "max_concurrent_moves = 2\n");
    let mut wrong_source = promotion(2);
    wrong_source.from = 0;
    let script = (0..6)
        .map(|segment| (0, promotion(segment)))
        .chain([(0, wrong_source), (0, promotion(0))])
        .collect();
    let requests = vec![
        request(0, Op::Read, 0, 4096),
        request(3 * SECOND, Op::Read, 0, 4096),
    ];
    let result = run(
        &config,
        policy(Scripted { script }),
        devices(volume, 0),
        requests,
    )
    .unwrap();
    // The fast tier holds 4 segments: 4 moves, 2 over capacity, 1 from the
    // wrong tier, 1 for a segment already moving.
    assert_eq!(result.moves, 4);
    assert_eq!(result.moves_dropped, 4);
    assert_eq!(result.fast_bytes_max, 4 * MIB);
    // Two at a time: the third move starts when the first finishes.
    let starts: Vec<u64> = result
        .move_log
        .iter()
        .map(|record| record.start_ns)
        .collect();
    assert_eq!(starts[0], SECOND);
    assert_eq!(starts[1], SECOND);
    assert!(starts[2] > SECOND);
}

#[test]
fn speed_and_window_map_trace_time_to_arrivals() {
    let volume = 8 * MIB;
    // A request every 10 s for 10 minutes (61 requests).
    let start = 1_000 * SECOND;
    let requests: Vec<Request> = (0..=60)
        .map(|index| request(start + index * 10 * SECOND, Op::Read, 0, 4096))
        .collect();
    let mut config = config(volume, "");
    let result = run(&config, none(), devices(volume, 0), requests.clone()).unwrap();
    assert_eq!(result.requests, 61);
    assert_eq!(result.last_arrival_ns, 600 * SECOND);
    assert_eq!(result.elapsed_ns, 600 * SECOND + MS);

    config.replay = Replay::OpenLoop { speed: 8.0 };
    let result = run(&config, none(), devices(volume, 0), requests.clone()).unwrap();
    assert_eq!(result.last_arrival_ns, 75 * SECOND);
    assert_eq!(result.periods.len(), 76);

    // Minutes 2 to 5 of trace time: requests at 120 s ..= 290 s, then ×2.
    config.replay = Replay::OpenLoop { speed: 2.0 };
    config.window = Window {
        from_ns: Some(120 * SECOND),
        to_ns: Some(300 * SECOND),
    };
    let result = run(&config, none(), devices(volume, 0), requests).unwrap();
    assert_eq!(result.requests, 18);
    assert_eq!(result.last_arrival_ns, 85 * SECOND);
    assert_eq!(result.response.min_ns(), Some(MS));
}

#[test]
fn closed_loop_keeps_the_queue_depth() {
    let volume = 8 * MIB;
    let requests: Vec<Request> = (0..100)
        .map(|index| request(index * SECOND, Op::Read, (index % 8) * MIB, 4096))
        .collect();
    let mut config = config(volume, "");
    config.replay = Replay::ClosedLoop { queue_depth: 1 };
    let result = run(&config, none(), devices(volume, 0), requests.clone()).unwrap();
    // One at a time on a 1 ms device: timestamps are ignored.
    assert_eq!(result.elapsed_ns, 100 * MS);
    assert_eq!(result.response.max_ns(), Some(MS));
    assert!((result.avg_iops - 1000.0).abs() < 1e-6);

    config.replay = Replay::ClosedLoop { queue_depth: 4 };
    let result = run(&config, none(), devices(volume, 0), requests.clone()).unwrap();
    // Same device throughput; each request now waits behind three others.
    assert_eq!(result.elapsed_ns, 100 * MS);
    assert_eq!(result.response.max_ns(), Some(4 * MS));
    assert_eq!(result.response.min_ns(), Some(MS));

    // Four servers: four times the throughput.
    let parallel: Vec<Box<dyn DeviceModel>> = vec![
        Box::new(FixedLatencyDevice::new("fast", 4 * MIB, 10_000, 10_000)),
        Box::new(FixedLatencyDevice::new("home", volume, MS, MS).with_servers(4)),
    ];
    let result = run(&config, none(), parallel, requests).unwrap();
    assert_eq!(result.elapsed_ns, 25 * MS);
    assert_eq!(result.response.max_ns(), Some(MS));
}

#[test]
fn a_saturated_open_loop_replay_falls_behind_instead_of_queueing_without_bound() {
    let volume = 8 * MIB;
    let mut config = config(volume, "");
    config.max_outstanding_requests = 2;
    // Ten requests due at once on a 1 ms device, two outstanding at most.
    let requests: Vec<Request> = (0..10).map(|_| request(0, Op::Read, 0, 4096)).collect();
    let result = run(&config, none(), devices(volume, 0), requests.clone()).unwrap();
    assert_eq!(result.elapsed_ns, 10 * MS);
    assert_eq!(result.deferred_requests, 8);
    // Issued when a slot frees: at 1, 2, ..., 8 ms.
    assert_eq!(result.defer_max_us, 8_000.0);
    assert_eq!(result.defer_mean_us, 4_500.0);
    // Response from issue: the first two wait 1 and 2 ms, the rest 2 ms.
    assert_eq!(result.response.max_ns(), Some(2 * MS));
    assert_eq!(result.last_arrival_ns, 8 * MS);

    config.max_outstanding_requests = 0;
    let result = run(&config, none(), devices(volume, 0), requests).unwrap();
    assert_eq!(result.deferred_requests, 0);
    assert_eq!(result.response.max_ns(), Some(10 * MS));
}

#[test]
fn the_host_queue_limits_what_a_device_sees() {
    let volume = 8 * MIB;
    let text = "segment_bytes = \"1MiB\"\n[[tier]]\nname = \"fast\"\ndevice = \"memory\"\ncapacity = \"4MiB\"\n\
                [[tier]]\nname = \"home\"\ndevice = \"savvio10k4\"\nqueue_depth = 2\n";
    let mut config = SimConfig::new(TierStack::parse(text, "test").unwrap(), volume);
    config.period_ns = SECOND;
    let requests: Vec<Request> = (0..10).map(|_| request(0, Op::Read, 0, 4096)).collect();
    let parallel: Vec<Box<dyn DeviceModel>> = vec![
        Box::new(FixedLatencyDevice::new("fast", 4 * MIB, 10_000, 10_000)),
        Box::new(FixedLatencyDevice::new("home", volume, MS, MS).with_servers(8)),
    ];
    let result = run(&config, none(), parallel, requests).unwrap();
    // Eight servers, but only two IOs at the device at a time.
    assert_eq!(result.elapsed_ns, 5 * MS);
}

#[test]
fn periods_report_iostat_figures() {
    let volume = 8 * MIB;
    let config = config(volume, "");
    // 100 requests per second for 3 s on a 1 ms device: 10 % busy.
    let requests: Vec<Request> = (0..300)
        .map(|index| request(index * 10 * MS, Op::Write, (index % 8) * MIB, 4096))
        .collect();
    let result = run(&config, none(), devices(volume, 0), requests).unwrap();
    assert_eq!(result.periods.len(), 3);
    let period = &result.periods[1];
    assert_eq!(period.requests, 100);
    assert_eq!(period.tiers[1].user_ios, 100);
    assert_eq!(period.tiers[1].device_ios, 100);
    assert!((period.tiers[1].util - 0.1).abs() < 1e-9);
    assert!((period.tiers[1].user_util - 0.1).abs() < 1e-9);
    assert!((period.tiers[1].svctm_ms - 1.0).abs() < 1e-9);
    assert!((period.tiers[1].iops - 100.0).abs() < 1e-9);
    assert_eq!(period.tiers[0].used_bytes, 0);
    assert!((result.home_svctm_ms - 1.0).abs() < 1e-9);
    let last = result.periods.last().unwrap();
    assert_eq!(last.end_ns, result.elapsed_ns);
    assert_eq!(result.fast_io_share, 0.0);
}

#[test]
fn user_util_leaves_out_the_copies_a_move_keeps_the_disk_busy_with() {
    let volume = 8 * MIB;
    let config = config(volume, "");
    // 10 MB/s home: segment 1 takes 4 × 27.2 ms to copy in period 1 while
    // one 4 KiB read (1.41 ms) is all the user IO there.
    let requests = vec![
        request(0, Op::Read, 0, 4096),
        request(SECOND + 500 * MS, Op::Read, 2 * MIB, 4096),
        request(2 * SECOND + 500 * MS, Op::Read, 0, 4096),
    ];
    let result = run(
        &config,
        policy(Scripted::promote(0, 1)),
        devices(volume, 10_000_000),
        requests,
    )
    .unwrap();
    let period = &result.periods[1].tiers[1];
    let copy_ns = 4 * (MS + 26_214_400);
    let read_ns = MS + 409_600;
    assert_eq!(period.migration_ios, 4);
    assert!((period.util - (copy_ns + read_ns) as f64 / SECOND as f64).abs() < 1e-9);
    assert!((period.user_util - read_ns as f64 / SECOND as f64).abs() < 1e-9);
}

#[test]
fn same_input_same_json() {
    let volume = 8 * MIB;
    let config = config(volume, "");
    let requests: Vec<Request> = (0..2_000u64)
        .map(|index| {
            let offset = (index * 7919 % 2048) * 4096;
            let op = if index % 5 == 0 { Op::Write } else { Op::Read };
            request(index * 3 * MS, op, offset, 8192)
        })
        .collect();
    let make = || {
        let script = vec![(1, promotion(1)), (2, promotion(3)), (3, promotion(5))];
        run(
            &config,
            policy(Scripted { script }),
            devices(volume, 50_000_000),
            requests.clone(),
        )
        .unwrap()
    };
    let first = serde_json::to_string(&make()).unwrap();
    let second = serde_json::to_string(&make()).unwrap();
    assert_eq!(first, second);
    let value: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(value["moves"], 3);
    for key in [
        "policy",
        "avg_iops",
        "avg_response_us",
        "fast_io_share",
        "fast_bytes_max",
        "migrated_bytes",
        "periods",
        "response",
        "tiers",
    ] {
        assert!(value.get(key).is_some(), "{key} missing");
    }
}

#[test]
fn bad_input_is_an_error_that_says_what_to_do() {
    let volume = 8 * MIB;
    let config = config(volume, "");
    let error = run(
        &config,
        none(),
        devices(volume, 0),
        vec![request(0, Op::Read, volume - 4096, 8192)],
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("past the") && error.contains("--volume-bytes"),
        "{error}"
    );

    let mut other_volume = request(SECOND, Op::Read, 0, 4096);
    other_volume.volume = 1;
    let mut reader = IteratorReader::new(
        vec![request(0, Op::Read, 0, 4096), other_volume].into_iter(),
        &["hm_0", "hm_1"],
        Format::Tierd,
        "two volumes",
    );
    let error = run_with(
        &config,
        "none",
        none(),
        devices(volume, 0),
        &mut reader,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("hm_0") && error.contains("hm_1") && error.contains("--volume"),
        "{error}"
    );

    let mut one_device = devices(volume, 0);
    one_device.truncate(1);
    let error = run(&config, none(), one_device, vec![])
        .unwrap_err()
        .to_string();
    assert!(error.contains("1 device models for 2 tiers"), "{error}");
}

/// Promotes segments 0, 1 and 2 at the end of period 0; afterwards, when
/// `restates`, lists again only segment 1 while it has not started (as a
/// policy that restates its plans does when only segment 1 is still hot).
struct Restating {
    restates: bool,
    payback_ns: Option<u64>,
}

impl Policy for Restating {
    fn name(&self) -> &'static str {
        "restating"
    }

    fn restates_plan(&self) -> bool {
        self.restates
    }

    fn plan(&mut self, view: &View) -> Plan {
        let index = view.latest().map_or(0, |period| period.index);
        let moves = if index == 0 {
            vec![promotion(0), promotion(1), promotion(2)]
        } else if self.restates && view.placement[1] == 1 && !view.is_moving(1) {
            vec![promotion(1)]
        } else {
            Vec::new()
        };
        Plan {
            moves,
            payback_ns: self.payback_ns,
            ..Plan::default()
        }
    }
}

/// One move at a time, each ~4 s (home streams 256 KiB/s), periods of 1 s.
fn queued_three(policy_under_test: Restating) -> RunResult {
    let volume = 8 * MIB;
    let config = config(volume, "");
    let requests = vec![
        request(0, Op::Read, 0, 4096),
        request(20 * SECOND, Op::Read, 0, 4096),
    ];
    run(
        &config,
        policy(policy_under_test),
        devices(volume, 256 << 10),
        requests,
    )
    .unwrap()
}

#[test]
fn a_queued_move_the_newest_plan_no_longer_asks_for_is_dropped_and_does_not_wait() {
    let kept = queued_three(Restating {
        restates: false,
        payback_ns: None,
    });
    // Without restating, segment 2 waits for the two copies ahead of it.
    let segments: Vec<u32> = kept.move_log.iter().map(|record| record.segment).collect();
    assert_eq!(segments, [0, 1, 2]);
    let waited = |result: &RunResult, segment: u32| {
        let record = result
            .move_log
            .iter()
            .find(|record| record.segment == segment)
            .unwrap();
        record.start_ns - record.accepted_ns
    };
    assert!(waited(&kept, 2) > 7 * SECOND, "{}", waited(&kept, 2));
    assert_eq!(kept.moves_dropped, 0);

    let dropped = queued_three(Restating {
        restates: true,
        payback_ns: None,
    });
    // The policy's plan at the end of period 1 lists segment 1 alone:
    // segment 2's move is stale and dropped at once; segment 1's keeps its
    // place (and its acceptance time: it waited one copy).
    let segments: Vec<u32> = dropped
        .move_log
        .iter()
        .map(|record| record.segment)
        .collect();
    assert_eq!(segments, [0, 1]);
    assert_eq!(dropped.moves_dropped, 1);
    assert_eq!(dropped.moves_dropped_by_reason.not_asked_again, 1);
    assert_eq!(dropped.moves_dropped_by_reason.refused, 0);
    assert_eq!(waited(&dropped, 1), waited(&kept, 1));
    assert!(dropped.queue_wait_max_us * 1e3 < waited(&kept, 2) as f64);
    assert_eq!(dropped.moves_unfinished, 0);
}

#[test]
fn a_queued_move_that_waited_past_its_payback_is_dropped() {
    let result = queued_three(Restating {
        restates: false,
        payback_ns: Some(2 * SECOND),
    });
    // Move 0 starts at once (1 s) and copies ~4 s; the two behind it have
    // waited past 2 s at the period end of 4 s and are dropped.
    let segments: Vec<u32> = result
        .move_log
        .iter()
        .map(|record| record.segment)
        .collect();
    assert_eq!(segments, [0]);
    assert_eq!(result.moves_dropped_by_reason.waited_past_payback, 2);
    assert_eq!(result.moves_dropped, 2);
    assert!(result.queue_wait_max_us <= 2e6);
}

/// Records the copy time the view gives the policy.
struct CopyTimeProbe {
    seen: std::sync::Arc<std::sync::Mutex<Vec<Option<f64>>>>,
}

impl Policy for CopyTimeProbe {
    fn name(&self) -> &'static str {
        "probe"
    }

    fn plan(&mut self, view: &View) -> Plan {
        self.seen
            .lock()
            .unwrap()
            .push(view.migration.device_move_ns);
        Plan::default()
    }
}

#[test]
fn the_policy_sees_the_copy_time_of_the_stacks_devices_before_any_move() {
    let volume = 8 * MIB;
    let config = config(volume, "");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let requests = vec![
        request(0, Op::Read, 0, 4096),
        request(3 * SECOND, Op::Read, 0, 4096),
    ];
    run(
        &config,
        policy(CopyTimeProbe { seen: seen.clone() }),
        devices(volume, 0),
        requests,
    )
    .unwrap();
    let expected = tierd_sim::devices::segment_copy_ns(&config, 1, 0).unwrap() as f64;
    // 4 chunks of 256 KiB read one at a time from the Savvio model (a few
    // ms each) and written to memory.
    assert!(expected > 1e6 && expected < 1e9, "{expected}");
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|ns| *ns == Some(expected)), "{seen:?}");
}
