//! The move machine against a model of two devices: every interleaving of
//! write halves, chunk reads (taken at any moment between a copy's issue
//! and its landing) and handed-over parts must leave the target equal to
//! the source at the flip, wherever no write is still in flight.

use super::*;
use tierd_common::rng::{Rng, SeededRng};

const BLOCK: u64 = 512;

fn part_blocks(part: Part) -> std::ops::Range<usize> {
    (part.offset_bytes / BLOCK) as usize..((part.offset_bytes + part.length_bytes) / BLOCK) as usize
}

#[test]
fn a_write_is_mirrored_handed_over_or_left_to_the_copy_by_its_chunks_state() {
    let rules = MoveRules {
        chunk_bytes: 4096,
        chunks_in_flight: 2,
        ..MoveRules::default()
    };
    let mut machine: MoveMachine<()> = MoveMachine::new(rules, 4 * 4096, 0, 0, false);
    let mut route = Route::default();
    let Step::Copy { chunk: 0, .. } = machine.next(0) else {
        panic!("first chunk")
    };
    let Step::Copy { chunk: 1, .. } = machine.next(0) else {
        panic!("second chunk")
    };
    assert_eq!(machine.next(0), Step::Wait, "two in flight at most");
    let mut out = Vec::new();
    assert_eq!(machine.chunk_copied(0, 10, &mut out), Landing::Landed);
    // Spanning chunk 0 (landed), 1 (copying) and 2 (not yet copied).
    machine.write_begin(7, 4000, 5000, &mut route);
    assert_eq!(
        route.mirror,
        vec![Part {
            offset_bytes: 4000,
            length_bytes: 96
        }]
    );
    assert_eq!(
        route.hand_over,
        vec![(
            1,
            Part {
                offset_bytes: 4096,
                length_bytes: 4096
            }
        )]
    );
    machine.hand_over(7, 1, route.hand_over[0].1, ());
    // Chunk 2 starts while the write's source half is still on its way.
    let Step::Copy { chunk: 2, .. } = machine.next(20) else {
        panic!("third chunk")
    };
    assert_eq!(machine.chunk_copied(1, 30, &mut out), Landing::Apply);
    assert_eq!(out.len(), 1);
    assert_eq!(machine.applied(1, &mut out), Landing::Landed);
    // The source half lands: its part in chunk 2 may be missing from that
    // copy, which is still going, so it is handed over too.
    machine.write_source_done(7, 4000, 5000, &mut route);
    assert!(route.mirror.is_empty());
    assert_eq!(
        route.hand_over,
        vec![(
            2,
            Part {
                offset_bytes: 8192,
                length_bytes: 808
            }
        )]
    );
    machine.hand_over(7, 2, route.hand_over[0].1, ());
    machine.write_part_done(7);
    assert_eq!(machine.tracked_writes(), 0, "settled");
    let Step::Copy { chunk: 3, .. } = machine.next(40) else {
        panic!("fourth chunk")
    };
    assert_eq!(machine.chunk_copied(3, 50, &mut out), Landing::Landed);
    assert_eq!(machine.next(50), Step::Wait, "chunk 2 still copying");
    assert_eq!(machine.chunk_copied(2, 60, &mut out), Landing::Apply);
    assert_eq!(machine.applied(2, &mut out), Landing::Landed);
    assert_eq!(machine.next(60), Step::Flip);
    let counters = machine.counters();
    assert_eq!(counters.copied_bytes, 4 * 4096);
    assert_eq!(counters.handed_over_parts, 2);
    assert_eq!(counters.mirrored_writes, 1);
}

#[test]
fn pacing_spaces_chunks_by_gap_share_and_bandwidth() {
    let rules = MoveRules {
        chunk_bytes: 1000,
        chunks_in_flight: 1,
        chunk_gap_ns: 5,
        share: 0.5,
        max_bandwidth_bytes_per_second: None,
    };
    let mut machine: MoveMachine<()> = MoveMachine::new(rules, 3000, 0, 0, false);
    let mut out = Vec::new();
    assert!(matches!(machine.next(0), Step::Copy { chunk: 0, .. }));
    machine.chunk_copied(0, 100, &mut out);
    // Landed at 100 after a 100 ns copy: gap 5 + pause 100 (share 0.5).
    assert_eq!(machine.next(150), Step::WaitUntil { ns: 205 });
    assert!(matches!(machine.next(205), Step::Copy { chunk: 1, .. }));

    let rules = MoveRules {
        chunk_bytes: 1000,
        chunks_in_flight: 4,
        max_bandwidth_bytes_per_second: Some(1_000_000),
        ..MoveRules::default()
    };
    let mut machine: MoveMachine<()> = MoveMachine::new(rules, 3000, 0, 0, false);
    assert!(matches!(machine.next(0), Step::Copy { chunk: 0, .. }));
    // 1000 bytes issued at 1 MB/s: the next may start at 1 ms.
    assert_eq!(machine.next(0), Step::WaitUntil { ns: 1_000_000 });
}

#[test]
fn the_copy_waits_for_writes_issued_before_the_move() {
    let mut machine: MoveMachine<()> = MoveMachine::new(MoveRules::default(), 1 << 20, 0, 2, false);
    assert_eq!(machine.next(0), Step::Wait);
    machine.pre_move_write_done();
    assert_eq!(machine.next(0), Step::Wait);
    machine.pre_move_write_done();
    assert!(matches!(machine.next(0), Step::Copy { .. }));
}

#[test]
fn an_already_copied_move_mirrors_every_write_and_flips_at_once() {
    let mut machine: MoveMachine<()> = MoveMachine::new(MoveRules::default(), 4 << 20, 0, 0, true);
    let mut route = Route::default();
    machine.write_begin(1, 0, 4 << 20, &mut route);
    assert_eq!(
        route.mirror,
        vec![Part {
            offset_bytes: 0,
            length_bytes: 4 << 20
        }],
        "adjacent landed chunks merge into one part"
    );
    // A write in flight that began with every chunk landed does not hold
    // the flip back (its mirrored part makes the target current).
    assert_eq!(machine.next(0), Step::Flip);
}

struct InFlightWrite {
    id: u64,
    offset_bytes: u64,
    length_bytes: u64,
    stamp: u64,
    source_done: bool,
    mirror: Vec<Part>,
    /// Written before the move started (not tracked by the machine).
    pre_move: bool,
}

struct Copy {
    chunk: u32,
    part: Part,
    read: Option<Vec<u64>>,
}

/// One random run: returns whether it flipped.
fn run(seed: u64, continuous_writes: bool) -> bool {
    let mut rng = SeededRng::new(seed);
    let blocks = 8 + rng.below(56) as usize;
    let segment_len = blocks as u64 * BLOCK;
    let chunk_bytes = BLOCK << rng.below(5);
    let rules = MoveRules {
        chunk_bytes,
        chunks_in_flight: 1 + rng.below(4) as u32,
        chunk_gap_ns: rng.below(3) * 10,
        share: if rng.chance(0.3) { 0.5 } else { 1.0 },
        max_bandwidth_bytes_per_second: rng.chance(0.2).then_some(1_000_000_000 * BLOCK / 40),
    };
    let mut source = vec![0u64; blocks];
    let mut target = vec![0u64; blocks];
    let mut stamp = 0u64;
    let mut writes: Vec<InFlightWrite> = Vec::new();
    let busy = |writes: &Vec<InFlightWrite>, offset: u64, length: u64| {
        writes.iter().any(|write| {
            offset < write.offset_bytes + write.length_bytes && write.offset_bytes < offset + length
        })
    };
    let random_range = |rng: &mut SeededRng| {
        let first = rng.below(blocks as u64);
        let count = 1 + rng.below((blocks as u64 - first).min(12));
        (first * BLOCK, count * BLOCK)
    };
    // Writes in flight when the move starts.
    let pre_move = rng.below(3);
    for _ in 0..pre_move {
        let (offset, length) = random_range(&mut rng);
        if busy(&writes, offset, length) {
            continue;
        }
        stamp += 1;
        writes.push(InFlightWrite {
            id: stamp,
            offset_bytes: offset,
            length_bytes: length,
            stamp,
            source_done: false,
            mirror: Vec::new(),
            pre_move: true,
        });
    }
    let pre_move = writes.len() as u32;
    let mut machine: MoveMachine<u64> = MoveMachine::new(rules, segment_len, 0, pre_move, false);
    let mut route = Route::default();
    let mut out = Vec::new();
    let mut copies: Vec<Copy> = Vec::new();
    let mut applying: Vec<(u32, Vec<HandedOver<u64>>)> = Vec::new();
    let mut now = 0u64;
    for _ in 0..200_000 {
        now += rng.below(20);
        match rng.below(8) {
            0 | 1 => {
                let (offset, length) = random_range(&mut rng);
                if busy(&writes, offset, length) || (!continuous_writes && rng.chance(0.5)) {
                    continue;
                }
                stamp += 1;
                machine.write_begin(stamp, offset, length, &mut route);
                for &(chunk, part) in &route.hand_over {
                    machine.hand_over(stamp, chunk, part, stamp);
                }
                writes.push(InFlightWrite {
                    id: stamp,
                    offset_bytes: offset,
                    length_bytes: length,
                    stamp,
                    source_done: false,
                    mirror: route.mirror.clone(),
                    pre_move: false,
                });
            }
            2 => {
                let pending: Vec<usize> = (0..writes.len())
                    .filter(|&index| !writes[index].source_done)
                    .collect();
                if pending.is_empty() {
                    continue;
                }
                let index = pending[rng.below(pending.len() as u64) as usize];
                let write = &mut writes[index];
                write.source_done = true;
                let range = part_blocks(Part {
                    offset_bytes: write.offset_bytes,
                    length_bytes: write.length_bytes,
                });
                source[range].fill(write.stamp);
                if write.pre_move {
                    machine.pre_move_write_done();
                } else {
                    machine.write_source_done(
                        write.id,
                        write.offset_bytes,
                        write.length_bytes,
                        &mut route,
                    );
                    for &(chunk, part) in &route.hand_over {
                        machine.hand_over(write.id, chunk, part, write.stamp);
                    }
                    write.mirror.extend(route.mirror.iter().copied());
                }
            }
            3 => {
                let with_parts: Vec<usize> = (0..writes.len())
                    .filter(|&index| !writes[index].mirror.is_empty())
                    .collect();
                if with_parts.is_empty() {
                    continue;
                }
                let index = with_parts[rng.below(with_parts.len() as u64) as usize];
                let write = &mut writes[index];
                let part = write
                    .mirror
                    .remove(rng.below(write.mirror.len() as u64) as usize);
                target[part_blocks(part)].fill(write.stamp);
                machine.write_part_done(write.id);
            }
            4 => match machine.next(now) {
                Step::Copy { chunk, part } => copies.push(Copy {
                    chunk,
                    part,
                    read: None,
                }),
                Step::Flip => {
                    for block in 0..blocks {
                        let offset = block as u64 * BLOCK;
                        if busy(&writes, offset, BLOCK) {
                            continue;
                        }
                        assert_eq!(
                            target[block], source[block],
                            "seed {seed}: block {block} differs at the flip"
                        );
                    }
                    assert!(applying.is_empty() && copies.is_empty());
                    return true;
                }
                Step::WaitUntil { ns } => assert!(ns > now),
                Step::Wait => {}
            },
            5 => {
                if let Some(copy) = copies.iter_mut().find(|copy| copy.read.is_none()) {
                    copy.read = Some(source[part_blocks(copy.part)].to_vec());
                }
            }
            6 => {
                let landed: Vec<usize> = (0..copies.len())
                    .filter(|&index| copies[index].read.is_some())
                    .collect();
                if landed.is_empty() {
                    continue;
                }
                let copy = copies.remove(landed[rng.below(landed.len() as u64) as usize]);
                target[part_blocks(copy.part)].copy_from_slice(copy.read.as_ref().unwrap());
                if machine.chunk_copied(copy.chunk, now, &mut out) == Landing::Apply {
                    applying.push((copy.chunk, std::mem::take(&mut out)));
                }
            }
            _ => {
                if applying.is_empty() {
                    continue;
                }
                let (chunk, parts) = applying.remove(rng.below(applying.len() as u64) as usize);
                for handed in &parts {
                    target[part_blocks(handed.part)].fill(handed.payload);
                }
                if machine.applied(chunk, &mut out) == Landing::Apply {
                    applying.push((chunk, std::mem::take(&mut out)));
                }
            }
        }
        // Acknowledge writes whose halves are all done.
        writes.retain(|write| !(write.source_done && write.mirror.is_empty()));
    }
    false
}

#[test]
fn every_interleaving_leaves_the_target_equal_to_the_source_at_the_flip() {
    for seed in 0..3000 {
        assert!(run(seed, false), "seed {seed}: never flipped");
    }
}

#[test]
fn a_segment_written_all_the_time_still_flips() {
    for seed in 10_000..10_500 {
        assert!(run(seed, true), "seed {seed}: never flipped");
    }
}
