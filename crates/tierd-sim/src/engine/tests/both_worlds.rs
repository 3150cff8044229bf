//! One scripted sequence of writes and a move, through both worlds.
//!
//! The simulator runs a trace (writes to a segment before, during and after
//! its promotion) on fixed-latency devices and logs what happened in order:
//! each write, each chunk copy started and landed, the move's start and
//! flip. The live engine (`tierd_engine::volume::Volume` on memory devices)
//! is then driven through exactly that sequence: `request_move`,
//! `copy_begin` where a chunk copy started, `copy_end` where it landed,
//! `write` where a write arrived. Both run the shared move machine with its
//! decision log on; the test compares every decision (how each write was
//! routed, what was copied and applied for each chunk, the flip) and every
//! block the engine holds afterwards against what the writes put there.

use super::*;
use crate::testing::FixedLatencyDevice;
use std::sync::Arc;
use tierd_common::clock::{Clock, ManualClock};
use tierd_core::moves::Decision;
use tierd_engine::device::memory::MemoryDevice;
use tierd_engine::device::BlockDevice;
use tierd_engine::volume::{
    CopyBegun, MigrationOptions, StepOutcome, TierSpec, Volume, VolumeOptions,
};
use tierd_policy::PolicyConfig;
use tierd_trace::{Format, IteratorReader};

/// What happened in a simulated run, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WorldEvent {
    Write {
        offset_bytes: u64,
        length_bytes: u64,
    },
    WriteDone {
        offset_bytes: u64,
    },
    MoveStart {
        segment: SegmentId,
        to: TierId,
    },
    ChunkIssue {
        segment: SegmentId,
        chunk: u32,
    },
    ChunkLand {
        segment: SegmentId,
        chunk: u32,
    },
    Flip {
        segment: SegmentId,
    },
}

#[derive(Default)]
pub(crate) struct WorldLog {
    pub(crate) events: Vec<WorldEvent>,
    pub(crate) decisions: Vec<(SegmentId, Vec<Decision>)>,
}

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;
const VOLUME: u64 = 4 * MIB;

fn data(index: usize, length: u64) -> Vec<u8> {
    let mut rng = SeededRng::new(index as u64 + 1);
    (0..length).map(|_| rng.next_u64() as u8).collect()
}

/// The decisions in a form both worlds must agree on: independent chunks
/// land in either order (threads in one world, device completions in the
/// other), so routes and copies are compared in order, and each chunk's
/// applies and landing in order per chunk.
#[derive(Debug, PartialEq, Eq)]
struct Canonical {
    routes: Vec<Decision>,
    copies: Vec<u32>,
    per_chunk: BTreeMap<u32, Vec<Decision>>,
    ends_with_flip: bool,
}

fn canonical(decisions: &[Decision]) -> Canonical {
    let mut canonical = Canonical {
        routes: Vec::new(),
        copies: Vec::new(),
        per_chunk: BTreeMap::new(),
        ends_with_flip: decisions.last() == Some(&Decision::Flip),
    };
    for decision in decisions {
        match decision {
            Decision::Route { .. } => canonical.routes.push(decision.clone()),
            Decision::Copy { chunk } => canonical.copies.push(*chunk),
            Decision::Landed { chunk } | Decision::Apply { chunk, .. } => canonical
                .per_chunk
                .entry(*chunk)
                .or_default()
                .push(decision.clone()),
            Decision::Flip => {}
        }
    }
    canonical
}

use std::collections::BTreeMap;

#[test]
fn the_simulator_and_the_engine_make_the_same_decisions_and_hold_the_same_blocks() {
    // 4 MiB volume of 1 MiB segments; segment 1 is promoted at the end of
    // the first period (1 s), copied in 256 KiB chunks, 2 in flight. The
    // home device reads a chunk in 1 ms and writes in 1 µs, 8 at a time, so
    // every write completes before anything else happens, and writes land
    // in every state a chunk can be in.
    let text = "segment_bytes = \"1MiB\"\n\
         [[tier]]\nname = \"fast\"\ndevice = \"memory\"\ncapacity = \"2MiB\"\n\
         [[tier]]\nname = \"home\"\ndevice = \"savvio10k4\"\n\
         [migration]\nchunk_bytes = \"256KiB\"\nchunks_in_flight = 2\n";
    let stack = crate::stack::TierStack::parse(text, "test").unwrap();
    let mut config = SimConfig::new(stack, VOLUME);
    config.period_ns = 1_000_000_000;
    let devices: Vec<Box<dyn DeviceModel>> = vec![
        Box::new(FixedLatencyDevice::new("fast", 2 * MIB, 1_000, 1_000).with_servers(8)),
        Box::new(FixedLatencyDevice::new("home", VOLUME, 1_000_000, 1_000).with_servers(8)),
    ];
    let segment_start = MIB;
    let ms = 1_000_000u64;
    // (time, offset in segment 1 unless noted, length)
    let writes: Vec<(u64, u64, u64)> = vec![
        (500 * ms, segment_start, 64 * KIB),
        // Chunks 0 and 1 are being copied (1 s to 1.001 s).
        (1_000 * ms + 300_000, segment_start + 4 * KIB, 8 * KIB),
        (1_000 * ms + 400_000, segment_start + 252 * KIB, 8 * KIB),
        (1_000 * ms + 500_000, segment_start + 508 * KIB, 8 * KIB),
        // Chunks 0 and 1 have landed, 2 and 3 are being copied.
        (1_001 * ms + 500_000, segment_start + 200 * KIB, 128 * KIB),
        (1_001 * ms + 600_000, segment_start + 250 * KIB, 300 * KIB),
        (1_001 * ms + 700_000, segment_start + 900 * KIB, 16 * KIB),
        // After the flip; and another segment.
        (1_500 * ms, segment_start + 100 * KIB, 4 * KIB),
        (1_600 * ms, 2 * MIB + 12 * KIB, 4 * KIB),
    ];
    let mut requests = vec![Request {
        time_ns: 0,
        volume: 0,
        op: Op::Read,
        offset_bytes: 0,
        length_bytes: 4096,
        response_ns: None,
    }];
    for &(time_ns, offset_bytes, length_bytes) in &writes {
        requests.push(Request {
            time_ns,
            volume: 0,
            op: Op::Write,
            offset_bytes,
            length_bytes,
            response_ns: None,
        });
    }
    requests.push(Request {
        time_ns: 2_000 * ms,
        volume: 0,
        op: Op::Read,
        offset_bytes: 0,
        length_bytes: 4096,
        response_ns: None,
    });
    let mut reader = IteratorReader::new(requests.into_iter(), &["test"], Format::Tierd, "script");
    let policy = PromoteOnce {
        period: 0,
        segment: 1,
    };
    let mut engine = super::shadowed(&config, policy, devices, &mut reader);
    engine.world_log = Some(WorldLog::default());
    engine.run(&mut |_| {}).unwrap();
    let log = engine.world_log.take().unwrap();
    assert_eq!(
        engine.table.tiers_of()[1],
        0,
        "the simulator moved segment 1"
    );
    assert_eq!(log.decisions.len(), 1);

    // The live engine, driven through the same sequence.
    let clock = Arc::new(ManualClock::new(0));
    let fast: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new("fast", 2 * MIB));
    let home: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new("home", VOLUME));
    let specs = vec![
        // The simulator's fast tier is not written through: neither is
        // this one (a memory device standing in for an SSD).
        TierSpec {
            name: "fast".into(),
            device: fast,
            volatile: false,
            unsafe_volatile: false,
        },
        TierSpec {
            name: "home".into(),
            device: home,
            volatile: false,
            unsafe_volatile: false,
        },
    ];
    let options = VolumeOptions {
        name: "both".into(),
        size_bytes: VOLUME,
        segment_bytes: MIB,
        chunk_bytes: 256 * KIB,
        period_ns: 1_000_000_000,
        checkpoint_every_periods: 100,
        policy: PolicyConfig::None,
        migration: MigrationOptions {
            max_concurrent_moves: 1,
            chunks_in_flight: 2,
            share: 1.0,
            max_rate_bytes_per_second: None,
        },
    };
    let meta = tempfile::tempdir().unwrap();
    let engine_clock: Arc<dyn Clock> = clock.clone();
    let (volume, _notes) = Volume::open(options, specs, meta.path(), engine_clock).unwrap();
    volume.record_move_decisions();
    let mut expected = vec![0u8; VOLUME as usize];
    let mut reads_in_flight = Vec::new();
    let mut write_index = 0;
    let mut events = log.events.iter().peekable();
    while let Some(event) = events.next() {
        clock.advance_ns(1_000);
        match event {
            WorldEvent::Write {
                offset_bytes,
                length_bytes,
            } => {
                // The script keeps each write whole between other events.
                assert_eq!(
                    events.next(),
                    Some(&WorldEvent::WriteDone {
                        offset_bytes: *offset_bytes
                    }),
                    "a write at {offset_bytes} was not completed before the next event"
                );
                let bytes = data(write_index, *length_bytes);
                write_index += 1;
                volume.write(*offset_bytes, &bytes, false).unwrap();
                expected[*offset_bytes as usize..(*offset_bytes + *length_bytes) as usize]
                    .copy_from_slice(&bytes);
            }
            WorldEvent::WriteDone { .. } => unreachable!("taken with its write"),
            WorldEvent::MoveStart { segment, to } => {
                volume.request_move(*segment, *to, "both worlds").unwrap();
            }
            WorldEvent::ChunkIssue { segment, chunk } => match volume.copy_begin() {
                CopyBegun::Read(read) => {
                    assert_eq!((read.segment(), read.chunk()), (*segment, *chunk));
                    reads_in_flight.push(read);
                }
                CopyBegun::Done(outcome) => {
                    panic!("the simulator copied chunk {chunk}; the engine: {outcome:?}")
                }
            },
            WorldEvent::ChunkLand { segment, chunk } => {
                let position = reads_in_flight
                    .iter()
                    .position(|read| read.segment() == *segment && read.chunk() == *chunk)
                    .expect("landed chunk was started");
                let read = reads_in_flight.swap_remove(position);
                assert_eq!(
                    volume.copy_end(read),
                    StepOutcome::Copied { bytes: 256 * KIB }
                );
            }
            WorldEvent::Flip { segment } => match volume.copy_begin() {
                CopyBegun::Done(StepOutcome::Finished { segment: flipped }) => {
                    assert_eq!(flipped, *segment)
                }
                CopyBegun::Done(outcome) => {
                    panic!("the simulator flipped; the engine: {outcome:?}")
                }
                CopyBegun::Read(read) => panic!(
                    "the simulator flipped; the engine copies chunk {}",
                    read.chunk()
                ),
            },
        }
    }
    assert_eq!(write_index, writes.len());
    assert_eq!(volume.placement()[1], 0, "the engine moved segment 1");

    // Every decision.
    let engine_decisions = volume.take_move_decisions();
    assert_eq!(engine_decisions.len(), 1);
    let (sim_segment, sim_decisions) = &log.decisions[0];
    let (engine_segment, engine_decisions) = &engine_decisions[0];
    assert_eq!(sim_segment, engine_segment);
    let (sim, live) = (canonical(sim_decisions), canonical(engine_decisions));
    assert_eq!(sim, live);
    // The script reached every kind of decision.
    assert!(sim.ends_with_flip);
    assert_eq!(sim.copies, vec![0, 1, 2, 3]);
    let mirrored = sim
        .routes
        .iter()
        .any(|route| matches!(route, Decision::Route { mirror, .. } if !mirror.is_empty()));
    let handed = sim
        .routes
        .iter()
        .any(|route| matches!(route, Decision::Route { hand_over, .. } if !hand_over.is_empty()));
    assert!(mirrored && handed, "{:?}", sim.routes);
    assert!(sim
        .per_chunk
        .values()
        .any(|decisions| matches!(decisions[0], Decision::Apply { .. })));

    // Every block: the engine serves what the writes put there (segment 1
    // now from the fast tier), and the simulator's shadow agreed at its flip.
    let mut actual = vec![0u8; VOLUME as usize];
    volume.read(0, &mut actual).unwrap();
    for block in 0..(VOLUME / 4096) as usize {
        let range = block * 4096..(block + 1) * 4096;
        assert!(
            actual[range.clone()] == expected[range],
            "block {block} differs in the engine"
        );
    }
}
