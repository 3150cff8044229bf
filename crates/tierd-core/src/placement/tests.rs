use super::*;
use tierd_common::rng::{Rng, SeededRng};

type Table = PlacementTable<u32>;

#[test]
fn a_new_table_has_every_segment_at_home_in_its_own_slot() {
    let table = Table::new(5, &[2, 0]);
    assert_eq!(table.home(), 1);
    for segment in 0..5 {
        assert_eq!(
            table.location(segment),
            Location {
                tier: 1,
                slot: segment
            }
        );
    }
    assert_eq!(table.tiers_of(), &[1, 1, 1, 1, 1]);
    assert_eq!(
        (table.used(0), table.room(0), table.free_slots(0)),
        (0, 2, 2)
    );
    assert_eq!((table.used(1), table.capacity_segments(1)), (5, 5));
}

#[test]
fn accepted_moves_count_on_their_target_so_two_never_share_a_slot() {
    let mut table = Table::new(4, &[1, 0]);
    table.accept(0, 1, 0, 10, false).unwrap();
    assert_eq!((table.used(0), table.used(1)), (1, 3));
    let (refusal, item) = table.accept(1, 1, 0, 11, false).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::Full {
            capacity_segments: 1
        }
    );
    assert_eq!(item, 11);
    assert_eq!(
        table.accept(0, 1, 0, 12, false).unwrap_err().0,
        Refusal::Queued
    );
}

#[test]
fn every_refusal_names_its_reason() {
    let mut table = Table::new(2, &[1, 0]);
    let names = vec!["ssd".to_string(), "hdd".to_string()];
    assert_eq!(
        table.check(9, 1, 0),
        Err(Refusal::NoSuchSegment { segments: 2 })
    );
    assert_eq!(table.check(0, 1, 7), Err(Refusal::NoSuchTier { tiers: 2 }));
    assert_eq!(table.check(0, 1, 1), Err(Refusal::AlreadyThere));
    assert_eq!(
        table.check(0, 0, 1).unwrap_err().describe(&names),
        "the segment is already there"
    );
    assert_eq!(
        table.check(0, 0, 0).unwrap_err().describe(&names),
        "the segment is on hdd now"
    );
    table.accept(0, 1, 0, 0, false).unwrap();
    table.start_next().unwrap();
    assert_eq!(table.check(0, 1, 0), Err(Refusal::Moving));
    assert!(table
        .check(1, 1, 0)
        .unwrap_err()
        .describe(&names)
        .contains("full"));
}

#[test]
fn a_promotion_waits_for_the_demotion_ahead_of_it_and_others_pass() {
    let mut table = Table::new(4, &[1, 0]);
    table.accept(0, 1, 0, 0, false).unwrap();
    let started = table.start_next().unwrap();
    assert_eq!(started.to, Location { tier: 0, slot: 0 });
    table.finish(0);
    // The same plan: demote 0, promote 1 (room made by the demotion).
    table.accept(0, 0, 1, 1, false).unwrap();
    table.accept(1, 1, 0, 2, false).unwrap();
    // Neither slot is physically free, but the demotion goes to home.
    let demotion = table.start_next().unwrap();
    assert_eq!((demotion.segment, demotion.item), (0, 1));
    assert!(
        table.start_next().is_none(),
        "the promotion waits for the slot"
    );
    let left = table.finish(0);
    assert!(
        table.start_next().is_none(),
        "the slot is not free until released"
    );
    table.release_slot(left);
    let promotion = table.start_next().unwrap();
    assert_eq!(
        (promotion.segment, promotion.to),
        (1, Location { tier: 0, slot: 0 })
    );
}

#[test]
fn a_pins_move_goes_first_and_a_cancelled_one_gives_its_room_back() {
    let mut table = Table::new(4, &[2, 0]);
    table.accept(0, 1, 0, 0, false).unwrap();
    table.accept(1, 1, 0, 1, true).unwrap();
    let order: Vec<u32> = table.queued().map(|queued| queued.segment).collect();
    assert_eq!(order, vec![1, 0]);
    assert_eq!(table.room(0), 0);
    assert_eq!(table.cancel(1).map(|undone| undone.item), Some(1));
    assert_eq!(table.room(0), 1);
    assert!(table.cancel(1).is_none());
    assert!(table.check(1, 1, 0).is_ok());
}

#[test]
fn an_abandoned_move_leaves_the_segment_and_the_counts_as_they_were() {
    let mut table = Table::new(2, &[1, 0]);
    table.accept(1, 1, 0, 0, false).unwrap();
    let started = table.start_next().unwrap();
    let undone = table.abandon(1);
    assert!(undone.shed.is_empty());
    let target = undone.item;
    assert_eq!(target, started.to);
    table.release_slot(target);
    assert_eq!(table.location(1), Location { tier: 1, slot: 1 });
    assert_eq!(
        (table.used(0), table.used(1), table.free_slots(0)),
        (0, 2, 1)
    );
    assert_eq!(table.moving_len(), 0);
}

#[test]
fn restore_checks_the_table_and_rebuilds_the_free_lists() {
    let locations = [
        Location { tier: 0, slot: 1 },
        Location { tier: 2, slot: 1 },
        Location { tier: 1, slot: 0 },
    ];
    let table = Table::restore(&locations, &[2, 1, 0]).unwrap();
    assert_eq!(table.tiers_of(), &[0, 2, 1]);
    assert_eq!((table.used(0), table.free_slots(0)), (1, 1));
    assert_eq!((table.used(1), table.free_slots(1)), (1, 0));
    assert_eq!(table.used(2), 1);
    // A slot taken twice, a slot beyond the tier, a home slot not the
    // segment's own, a tier beyond the stack: each is impossible.
    for bad in [
        [Location { tier: 0, slot: 0 }, Location { tier: 0, slot: 0 }],
        [Location { tier: 0, slot: 5 }, Location { tier: 1, slot: 1 }],
        [Location { tier: 1, slot: 1 }, Location { tier: 1, slot: 1 }],
        [Location { tier: 4, slot: 0 }, Location { tier: 1, slot: 1 }],
    ] {
        let error = Table::restore(&bad, &[1, 0]).unwrap_err();
        assert_eq!(error.location, bad[error.segment as usize]);
    }
}

#[test]
fn force_home_frees_the_lost_slot() {
    let locations = [Location { tier: 0, slot: 0 }, Location { tier: 1, slot: 1 }];
    let mut table = Table::restore(&locations, &[1, 0]).unwrap();
    assert_eq!(table.force_home(0), Location { tier: 0, slot: 0 });
    assert_eq!(table.location(0), Location { tier: 1, slot: 0 });
    assert_eq!(
        (table.used(0), table.free_slots(0), table.used(1)),
        (0, 1, 2)
    );
}

/// Random operations against a model of what the table must keep true:
/// no slot held twice, `used` equals where segments will be once the
/// accepted moves are done, every slot is free, held or draining, and a
/// started move's target slot is one nobody holds.
#[test]
fn random_operations_keep_the_books_right() {
    for seed in 0..300u64 {
        let mut rng = SeededRng::new(seed);
        let tiers = 2 + rng.below(3) as usize;
        let segments = 1 + rng.below(12) as u32;
        let capacities: Vec<u32> = (0..tiers)
            .map(|tier| {
                if tier + 1 == tiers {
                    0
                } else {
                    rng.below(4) as u32
                }
            })
            .collect();
        let mut table = Table::new(segments, &capacities);
        let home = table.home();
        let mut draining: Vec<Location> = Vec::new();
        // segment -> target tier of its accepted, unfinished move.
        let mut heading: Vec<Option<TierId>> = vec![None; segments as usize];
        // The item of a queued move is its segment.
        let forget_shed = |table: &Table, heading: &mut Vec<Option<TierId>>, shed: &[u32]| {
            for segment in shed {
                assert!(!table.is_queued(*segment) && !table.is_moving(*segment));
                heading[*segment as usize] = None;
            }
        };
        for step in 0..200 {
            match rng.below(7) {
                0 | 1 => {
                    let segment = rng.below(u64::from(segments) + 1) as u32;
                    let from = rng.below(tiers as u64) as TierId;
                    let to = rng.below(tiers as u64 + 1) as TierId;
                    let verdict = table.check(segment, from, to);
                    let accepted = table.accept(segment, from, to, segment, rng.chance(0.3));
                    assert_eq!(verdict.is_ok(), accepted.is_ok());
                    if accepted.is_ok() {
                        heading[segment as usize] = Some(to);
                    }
                }
                2 => {
                    if let Some(started) = table.start_next() {
                        assert!(started.to.tier == home || !draining.contains(&started.to));
                        for (other, location) in table.locations().iter().enumerate() {
                            if other as u32 != started.segment && started.to.tier != home {
                                assert_ne!(*location, started.to, "seed {seed}: slot given twice");
                            }
                        }
                        assert_eq!(Some(started.to.tier), heading[started.segment as usize]);
                    }
                }
                3 => {
                    let moving: Vec<SegmentId> = (0..segments)
                        .filter(|segment| table.is_moving(*segment))
                        .collect();
                    if !moving.is_empty() {
                        let segment = moving[rng.below(moving.len() as u64) as usize];
                        heading[segment as usize] = None;
                        if rng.chance(0.8) {
                            draining.push(table.finish(segment));
                        } else {
                            let undone = table.abandon(segment);
                            draining.push(undone.item);
                            forget_shed(&table, &mut heading, &undone.shed);
                        }
                    }
                }
                4 => {
                    if !draining.is_empty() {
                        let index = rng.below(draining.len() as u64) as usize;
                        table.release_slot(draining.swap_remove(index));
                    }
                }
                6 => {
                    // The staleness rule with random verdicts.
                    let undone = table.drop_stale(|_| StaleInputs {
                        pinned: false,
                        asked_again: Some(rng.chance(0.5)),
                        waited_ns: 0,
                        payback_ns: None,
                    });
                    for (segment, reason) in &undone.item {
                        assert_eq!(*reason, StaleReason::NotAskedAgain);
                        heading[*segment as usize] = None;
                    }
                    let dropped: Vec<u32> =
                        undone.item.iter().map(|(segment, _)| *segment).collect();
                    forget_shed(&table, &mut heading, &dropped);
                    forget_shed(&table, &mut heading, &undone.shed);
                }
                _ => {
                    let segment = rng.below(u64::from(segments)) as u32;
                    if let Some(undone) = table.cancel(segment) {
                        heading[segment as usize] = None;
                        forget_shed(&table, &mut heading, &undone.shed);
                    }
                }
            }
            // The books.
            for tier in 0..tiers as TierId {
                let will_hold = (0..segments)
                    .filter(|segment| {
                        heading[*segment as usize].unwrap_or(table.tiers_of()[*segment as usize])
                            == tier
                    })
                    .count() as u32;
                assert_eq!(
                    table.used(tier),
                    will_hold,
                    "seed {seed} step {step} tier {tier}"
                );
                assert!(table.used(tier) <= table.capacity_segments(tier));
                let without_queue = (0..segments)
                    .filter(|segment| {
                        let moving_to = table.moving_to(*segment).map(|to| to.tier);
                        moving_to.unwrap_or(table.tiers_of()[*segment as usize]) == tier
                    })
                    .count() as u32;
                assert_eq!(
                    table.used_without_queue(tier),
                    without_queue,
                    "seed {seed} step {step}"
                );
                if tier == home {
                    continue;
                }
                let mut held: Vec<u32> = table
                    .locations()
                    .iter()
                    .filter(|location| location.tier == tier)
                    .map(|location| location.slot)
                    .chain(
                        (0..segments)
                            .filter_map(|segment| table.moving_to(segment))
                            .filter(|to| to.tier == tier)
                            .map(|to| to.slot),
                    )
                    .chain(
                        draining
                            .iter()
                            .filter(|at| at.tier == tier)
                            .map(|at| at.slot),
                    )
                    .collect();
                let count = held.len();
                held.sort_unstable();
                held.dedup();
                assert_eq!(
                    held.len(),
                    count,
                    "seed {seed} step {step}: a slot held twice"
                );
                assert_eq!(
                    count as u32 + table.free_slots(tier),
                    table.capacity_segments(tier),
                    "seed {seed} step {step}: a slot lost or made up"
                );
            }
        }
    }
}

#[test]
fn an_abandoned_demotion_sheds_the_promotion_that_counted_on_its_room() {
    let mut table = Table::new(3, &[1, 0]);
    table.accept(0, 1, 0, 0, false).unwrap();
    table.start_next().unwrap();
    table.finish(0);
    table.accept(0, 0, 1, 0, false).unwrap();
    table.accept(1, 1, 0, 1, false).unwrap();
    table.start_next().unwrap();
    let undone = table.abandon(0);
    table.release_slot(undone.item);
    assert_eq!(undone.shed, vec![1]);
    assert!(!table.is_queued(1));
    assert_eq!(
        (table.used(0), table.used(1), table.queued_len()),
        (1, 2, 0)
    );
}

fn inputs(asked_again: Option<bool>, waited_ns: u64, payback_ns: Option<u64>) -> StaleInputs {
    StaleInputs {
        pinned: false,
        asked_again,
        waited_ns,
        payback_ns,
    }
}

#[test]
fn the_stale_rule_drops_what_the_newest_plan_no_longer_asks_for_or_cannot_pay_back() {
    assert_eq!(stale_reason(inputs(Some(true), 10, Some(100))), None);
    assert_eq!(stale_reason(inputs(None, 10, None)), None);
    assert_eq!(
        stale_reason(inputs(Some(false), 0, None)),
        Some(StaleReason::NotAskedAgain)
    );
    assert_eq!(
        stale_reason(inputs(Some(true), 101, Some(100))),
        Some(StaleReason::WaitedPastPayback {
            waited_ns: 101,
            payback_ns: 100
        })
    );
    assert_eq!(stale_reason(inputs(None, 100, Some(100))), None);
    let pinned = StaleInputs {
        pinned: true,
        ..inputs(Some(false), u64::MAX, Some(0))
    };
    assert_eq!(stale_reason(pinned), None, "a pin's move is never stale");
}

#[test]
fn dropping_stale_moves_gives_their_room_back_and_sheds_what_counted_on_a_dropped_demotion() {
    // One fast slot, taken by segment 0. Queued: demote 0 (item 1),
    // promote 1 into the room it makes (item 2), promote 2 (item 3,
    // refused: full).
    let mut table = Table::new(4, &[1, 0]);
    table.accept(0, 1, 0, 0, false).unwrap();
    let started = table.start_next().unwrap();
    let left = table.finish(started.segment);
    table.release_slot(left);
    table.accept(0, 0, 1, 1, false).unwrap();
    table.accept(1, 1, 0, 2, false).unwrap();
    assert!(table.accept(2, 1, 0, 3, false).is_err());
    assert_eq!(table.used_without_queue(0), 1);
    assert_eq!(table.used(0), 1);
    // The newest plan asks for the promotion again but not the demotion:
    // the demotion is stale, and the promotion no longer fits.
    let undone = table.drop_stale(|queued| inputs(Some(*queued.item == 2), 5, None));
    assert_eq!(undone.item, vec![(1, StaleReason::NotAskedAgain)]);
    assert_eq!(undone.shed, vec![2]);
    assert_eq!(table.queued_len(), 0);
    assert!(!table.is_queued(0) && !table.is_queued(1));
    assert_eq!((table.used(0), table.used(1), table.room(0)), (1, 3, 0));
    // A move kept keeps its place; one past its payback goes.
    table.accept(0, 0, 1, 4, false).unwrap();
    table.accept(3, 1, 0, 5, false).unwrap();
    let undone = table.drop_stale(|queued| {
        let waited_ns = if *queued.item == 5 { 500 } else { 50 };
        inputs(None, waited_ns, Some(100))
    });
    assert_eq!(
        undone.item,
        vec![(
            5,
            StaleReason::WaitedPastPayback {
                waited_ns: 500,
                payback_ns: 100
            }
        )]
    );
    assert!(undone.shed.is_empty());
    assert_eq!(
        table
            .queued()
            .map(|queued| *queued.item)
            .collect::<Vec<_>>(),
        vec![4]
    );
    assert_eq!((table.used(0), table.used(1)), (0, 4));
}
