use tierd_common::rng::{Rng, SeededRng};

use super::*;

const EXTENT: u64 = 4096;
const SECOND: u64 = 1_000_000_000;

fn small(max_copies: u32, contiguous: bool) -> ReplicaConfig {
    ReplicaConfig {
        extent_bytes: EXTENT,
        max_copies,
        max_share: 0.5,
        contiguous_sequences: contiguous,
        session_gap_ns: SECOND,
        far_bytes: 16 * EXTENT,
        min_recurrences: 2,
        max_session_extents: 1024,
        max_groups: 8,
        match_share: 0.5,
        reads_allocate: true,
    }
}

/// Distance as the cost: a seek proxy from a head at `head`.
fn distance_from(head: u64) -> impl FnMut(u64, u64) -> f64 {
    move |offset, _| offset.abs_diff(head) as f64
}

/// Reads `extents` in order as one session starting at `start_ns`.
fn session(manager: &mut ReplicaManager, start_ns: u64, extents: &[u64]) {
    for (index, extent) in extents.iter().enumerate() {
        manager.on_read(start_ns + index as u64 * 1000, extent * EXTENT, EXTENT);
    }
}

/// Runs every job to completion.
fn copy_all(manager: &mut ReplicaManager, now_ns: u64) -> Vec<CopyJob> {
    let mut done = Vec::new();
    while let Some(job) = manager.next_job(now_ns) {
        assert!(manager.job_done(job.id));
        done.push(job);
    }
    done
}

#[test]
fn far_members_of_a_recurring_group_are_copied_near_its_centre() {
    let mut manager = ReplicaManager::new(small(4, false), 1024 * EXTENT).unwrap();
    // Mostly around 500, two members far away at 100 and 900.
    let start = [500, 100, 501, 502, 900, 503, 504];
    session(&mut manager, 0, &start);
    assert_eq!(
        manager.next_job(2 * SECOND),
        None,
        "seen once: no copies yet"
    );
    session(&mut manager, 10 * SECOND, &start);
    let jobs = copy_all(&mut manager, 12 * SECOND);
    let sources: Vec<u64> = jobs.iter().map(|job| job.source_offset / EXTENT).collect();
    assert_eq!(sources, vec![100, 900]);
    for job in &jobs {
        let target = job.target_offset / EXTENT;
        assert!(target.abs_diff(502) <= 8, "copy at {target}, centre 502");
        assert!(!manager.is_allocated(job.target_offset));
    }
    // A read of extent 100 with the head at 502 goes to the copy.
    let mut out = Vec::new();
    manager.route_read(100 * EXTENT, EXTENT, distance_from(502 * EXTENT), &mut out);
    assert_eq!(out.len(), 1);
    assert!(out[0].replica);
    assert_eq!(out[0].device_offset, jobs[0].target_offset);
    // With the head at 100, the primary is cheaper.
    manager.route_read(100 * EXTENT, EXTENT, distance_from(100 * EXTENT), &mut out);
    assert!(!out[0].replica);
    assert_eq!(out[0].device_offset, 100 * EXTENT);
    let status = manager.status();
    assert_eq!(status.replicated_extents, 2);
    assert_eq!(status.current_copies, 2);
}

#[test]
fn a_write_drops_copies_and_a_cancelled_job_never_becomes_current() {
    let mut manager = ReplicaManager::new(small(4, false), 1024 * EXTENT).unwrap();
    let start = [500, 100, 501, 502, 503];
    session(&mut manager, 0, &start);
    session(&mut manager, 10 * SECOND, &start);
    let job = manager.next_job(12 * SECOND).unwrap();
    assert_eq!(job.source_offset, 100 * EXTENT);
    // The primary is written while the copy is in flight.
    let effect = manager.on_write(100 * EXTENT + 512, 512);
    assert_eq!(effect.invalidated, 1);
    assert!(
        !manager.job_done(job.id),
        "a copy of old data is not current"
    );
    let mut out = Vec::new();
    manager.route_read(100 * EXTENT, EXTENT, distance_from(502 * EXTENT), &mut out);
    assert!(!out[0].replica);
    assert_eq!(manager.status().replica_extents, 0);
    assert_eq!(manager.stats().copies_cancelled, 1);
}

/// Found by the crash loop's helper: a group whose copies a write dropped
/// was never placed again, because a group is re-placed only when its
/// member list changes. It is now placed again when it next recurs.
#[test]
fn a_group_whose_copy_a_write_dropped_is_copied_again_when_it_recurs() {
    let mut manager = ReplicaManager::new(small(4, false), 1024 * EXTENT).unwrap();
    let start = [500, 100, 501, 502, 503];
    session(&mut manager, 0, &start);
    session(&mut manager, 10 * SECOND, &start);
    assert_eq!(copy_all(&mut manager, 12 * SECOND).len(), 1);
    manager.on_write(100 * EXTENT, EXTENT);
    assert_eq!(manager.status().current_copies, 0);
    // The same start again, unchanged: its far member is copied anew.
    session(&mut manager, 20 * SECOND, &start);
    let jobs = copy_all(&mut manager, 22 * SECOND);
    assert_eq!(jobs.len(), 1, "the recurring group was not placed again");
    assert_eq!(jobs[0].source_offset, 100 * EXTENT);
    assert_eq!(manager.status().current_copies, 1);
}

#[test]
fn a_user_write_into_replica_space_drops_the_replica_first() {
    let mut manager = ReplicaManager::new(small(4, false), 1024 * EXTENT).unwrap();
    let start = [500, 100, 501, 502, 503];
    session(&mut manager, 0, &start);
    session(&mut manager, 10 * SECOND, &start);
    let jobs = copy_all(&mut manager, 12 * SECOND);
    let target = jobs[0].target_offset;
    let effect = manager.on_write(target, EXTENT);
    assert_eq!(effect.reclaimed, 1);
    assert!(manager.is_allocated(target));
    let mut out = Vec::new();
    manager.route_read(100 * EXTENT, EXTENT, distance_from(target), &mut out);
    assert_eq!(
        out,
        vec![Fragment {
            device_offset: 100 * EXTENT,
            length_bytes: EXTENT,
            replica: false
        }]
    );
    // The next recurrence copies it again, elsewhere.
    session(&mut manager, 20 * SECOND, &[500, 100, 501, 502, 503, 504]);
    let again = copy_all(&mut manager, 22 * SECOND);
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].target_offset, target);
}

#[test]
fn one_copy_per_extent_serves_one_group_several_serve_each() {
    // Extent 100 (a shared library) is read with two applications, one
    // around 500, the other around 900.
    let first = [500, 100, 501, 502, 503];
    let second = [900, 100, 901, 902, 903];
    for (max_copies, expected) in [(1, 1), (4, 2)] {
        let mut manager = ReplicaManager::new(small(max_copies, false), 1024 * EXTENT).unwrap();
        let mut now = 0;
        for _ in 0..2 {
            session(&mut manager, now, &first);
            now += 10 * SECOND;
            session(&mut manager, now, &second);
            now += 10 * SECOND;
        }
        copy_all(&mut manager, now);
        assert_eq!(
            manager.status().current_copies,
            expected,
            "max_copies {max_copies}"
        );
    }
}

#[test]
fn a_recurring_sequence_is_laid_out_contiguously_in_order() {
    let mut manager = ReplicaManager::new(small(4, true), 1024 * EXTENT).unwrap();
    let start = [700, 100, 300, 101, 900, 302];
    session(&mut manager, 0, &start);
    session(&mut manager, 10 * SECOND, &start);
    let jobs = copy_all(&mut manager, 12 * SECOND);
    let sources: Vec<u64> = jobs.iter().map(|job| job.source_offset / EXTENT).collect();
    assert_eq!(sources, start.to_vec());
    let first = jobs[0].target_offset / EXTENT;
    for (index, job) in jobs.iter().enumerate() {
        assert_eq!(job.target_offset / EXTENT, first + index as u64);
    }
    assert_eq!(manager.stats().layouts, 1);
    // Reading the sequence in order from the layout: each read continues
    // the previous one, so each is one fragment from the layout.
    let mut head = first * EXTENT;
    let mut out = Vec::new();
    for (index, extent) in start.iter().enumerate() {
        manager.route_read(extent * EXTENT, EXTENT, distance_from(head), &mut out);
        assert!(out[0].replica, "extent {extent}");
        assert_eq!(out[0].device_offset, (first + index as u64) * EXTENT);
        head = out[0].device_offset + EXTENT;
    }
    // A third start does not lay it out again.
    session(&mut manager, 20 * SECOND, &start);
    assert_eq!(manager.next_job(22 * SECOND), None);
}

#[test]
fn a_read_spanning_extents_continues_on_adjacent_copies() {
    let mut manager = ReplicaManager::new(small(4, true), 1024 * EXTENT).unwrap();
    let start = [700, 100, 101, 102, 900];
    session(&mut manager, 0, &start);
    session(&mut manager, 10 * SECOND, &start);
    let jobs = copy_all(&mut manager, 12 * SECOND);
    let base = jobs[1].target_offset;
    let mut out = Vec::new();
    manager.route_read(
        100 * EXTENT + 100,
        3 * EXTENT - 200,
        distance_from(base),
        &mut out,
    );
    assert_eq!(
        out,
        vec![Fragment {
            device_offset: base + 100,
            length_bytes: 3 * EXTENT - 200,
            replica: true
        }]
    );
}

#[test]
fn replica_space_stays_within_its_share_of_free_space() {
    let mut config = small(4, true);
    config.max_share = 0.01;
    let mut manager = ReplicaManager::new(config, 1024 * EXTENT).unwrap();
    let start: Vec<u64> = (0..40).map(|index| index * 25).collect();
    session(&mut manager, 0, &start);
    session(&mut manager, 10 * SECOND, &start);
    manager.poll(20 * SECOND);
    assert!(manager.stats().placements > 0);
    assert!(manager.status().replica_extents as f64 <= 0.01 * 1024.0);
    assert!(manager.stats().refused_for_space > 0);
}

#[test]
fn a_whole_trim_frees_the_extent_and_drops_its_copies() {
    let mut manager = ReplicaManager::new(small(4, false), 1024 * EXTENT).unwrap();
    let start = [500, 100, 501, 502, 503];
    session(&mut manager, 0, &start);
    session(&mut manager, 10 * SECOND, &start);
    copy_all(&mut manager, 12 * SECOND);
    assert!(manager.is_allocated(100 * EXTENT));
    let effect = manager.on_trim(100 * EXTENT, EXTENT);
    assert_eq!(effect.invalidated, 1);
    assert!(!manager.is_allocated(100 * EXTENT));
    assert_eq!(manager.status().current_copies, 0);
    // A partial trim is a write: the extent stays allocated.
    manager.on_trim(501 * EXTENT, 512);
    assert!(manager.is_allocated(501 * EXTENT));
}

#[test]
fn with_reads_allocating_a_read_of_replica_space_drops_the_replica() {
    let mut manager = ReplicaManager::new(small(4, false), 1024 * EXTENT).unwrap();
    let start = [500, 100, 501, 502, 503];
    session(&mut manager, 0, &start);
    session(&mut manager, 10 * SECOND, &start);
    let jobs = copy_all(&mut manager, 12 * SECOND);
    manager.on_read(30 * SECOND, jobs[0].target_offset, 512);
    assert_eq!(manager.stats().dropped_by_reads, 1);
    assert_eq!(manager.status().current_copies, 0);
}

#[test]
fn bad_settings_name_their_key() {
    let mut config = ReplicaConfig {
        extent_bytes: 1000,
        ..ReplicaConfig::default()
    };
    assert!(config.validate().unwrap_err().starts_with("extent_bytes"));
    config.extent_bytes = 4096;
    config.max_share = 1.5;
    assert!(config.validate().unwrap_err().starts_with("max_share"));
    config.max_share = 0.2;
    config.max_copies = 0;
    assert!(config.validate().unwrap_err().starts_with("max_copies"));
}

/// Property: random reads, writes and trims, with copy jobs run at random
/// moments (the driver's obligations kept), against a shadow of the disk's
/// contents. A read is never routed to a copy whose content differs from
/// the primary's, no copy job's write ever lands on user data, and the
/// manager's bookkeeping agrees with itself.
#[test]
fn reads_are_never_routed_to_stale_or_dropped_copies() {
    const EXTENTS: u64 = 256;
    let mut exercised = ReplicaStats::default();
    for seed in 0..128 {
        let mut rng = SeededRng::new(seed);
        let config = ReplicaConfig {
            extent_bytes: EXTENT,
            max_copies: 1 + rng.below(4) as u32,
            max_share: 0.2 + rng.next_f64() * 0.6,
            contiguous_sequences: rng.chance(0.5),
            session_gap_ns: SECOND,
            far_bytes: (2 + rng.below(16)) * EXTENT,
            min_recurrences: 1 + rng.below(2) as u32,
            max_session_extents: 64,
            max_groups: 4,
            match_share: 0.3,
            reads_allocate: false,
        };
        let mut manager = ReplicaManager::new(config, EXTENTS * EXTENT).unwrap();
        // What each physical extent holds (0 = never written), and what the
        // user last wrote at each logical extent.
        let mut disk = vec![0u64; EXTENTS as usize];
        let mut user = vec![0u64; EXTENTS as usize];
        let mut fresh = 1u64;
        // Jobs handed out: (job, value read from the source at issue).
        let mut in_flight: Vec<(CopyJob, u64)> = Vec::new();
        // A few access patterns, replayed with noise so groups recur.
        let patterns: Vec<Vec<u64>> = (0..3)
            .map(|_| (0..4 + rng.below(12)).map(|_| rng.below(EXTENTS)).collect())
            .collect();
        let mut now = 0u64;
        let mut out = Vec::new();
        for _ in 0..600 {
            now += if rng.chance(0.1) { 2 * SECOND } else { 1_000 };
            let choice = rng.below(100);
            if choice < 45 {
                let extent = if rng.chance(0.8) {
                    let pattern = &patterns[rng.below(3) as usize];
                    pattern[rng.below(pattern.len() as u64) as usize]
                } else {
                    rng.below(EXTENTS)
                };
                let within = rng.below(EXTENT / 512) * 512;
                let length =
                    (512 * (1 + rng.below(16))).min(EXTENTS * EXTENT - extent * EXTENT - within);
                let offset = extent * EXTENT + within;
                manager.on_read(now, offset, length);
                let head = rng.below(EXTENTS) * EXTENT;
                manager.route_read(offset, length, distance_from(head), &mut out);
                let total: u64 = out.iter().map(|fragment| fragment.length_bytes).sum();
                assert_eq!(total, length, "seed {seed}");
                let mut logical = offset;
                for fragment in &out {
                    let mut at = 0;
                    while at < fragment.length_bytes {
                        let physical = (fragment.device_offset + at) / EXTENT;
                        let wanted = (logical + at) / EXTENT;
                        // The primary of a free extent: the driver answers
                        // zeros without reading the disk.
                        let zeros = !fragment.replica && !manager.is_allocated(wanted * EXTENT);
                        assert_eq!(
                            if zeros { 0 } else { disk[physical as usize] },
                            user[wanted as usize],
                            "seed {seed}: a read of extent {wanted} routed to {physical} (replica {}), which holds other data", fragment.replica
                        );
                        if zeros {
                            at += EXTENT - (fragment.device_offset + at) % EXTENT;
                            continue;
                        }
                        assert_eq!(
                            disk[physical as usize], user[wanted as usize],
                            "seed {seed}: a read of extent {wanted} routed to {physical}, which holds other data"
                        );
                        assert_eq!(
                            (fragment.device_offset + at) % EXTENT,
                            (logical + at) % EXTENT,
                            "seed {seed}"
                        );
                        at += EXTENT - (fragment.device_offset + at) % EXTENT;
                    }
                    logical += fragment.length_bytes;
                }
            } else if choice < 65 {
                let extent = rng.below(EXTENTS);
                let length = EXTENT * (1 + rng.below(3));
                let length = length.min((EXTENTS - extent) * EXTENT);
                let offset = extent * EXTENT;
                // The driver's obligation: a copy write in flight to the
                // space lands before the user write is issued.
                while let Some(job) = manager.copy_in_flight(offset, length) {
                    let index = in_flight.iter().position(|(j, _)| j.id == job).unwrap();
                    let (job, value) = in_flight.swap_remove(index);
                    disk[(job.target_offset / EXTENT) as usize] = value;
                    manager.job_done(job.id);
                }
                manager.on_write(offset, length);
                for extent in offset / EXTENT..(offset + length) / EXTENT {
                    assert!(
                        manager.is_allocated(extent * EXTENT),
                        "seed {seed}: written {extent} not allocated"
                    );
                }
                for extent in offset / EXTENT..(offset + length) / EXTENT {
                    fresh += 1;
                    disk[extent as usize] = fresh;
                    user[extent as usize] = fresh;
                }
            } else if choice < 70 {
                let extent = rng.below(EXTENTS);
                while let Some(job) = manager.copy_in_flight(extent * EXTENT, EXTENT) {
                    let index = in_flight.iter().position(|(j, _)| j.id == job).unwrap();
                    let (job, value) = in_flight.swap_remove(index);
                    disk[(job.target_offset / EXTENT) as usize] = value;
                    manager.job_done(job.id);
                }
                manager.on_trim(extent * EXTENT, EXTENT);
                // A trimmed extent reads as zeros; the disk keeps what it had
                // but nothing may route a read of it to a copy of old data.
                user[extent as usize] = 0;
                disk[extent as usize] = 0;
            } else if choice < 90 {
                if let Some(job) = manager.next_job(now) {
                    // The driver reads the source now.
                    let value = disk[(job.source_offset / EXTENT) as usize];
                    in_flight.push((job, value));
                }
            } else if !in_flight.is_empty() {
                let index = rng.below(in_flight.len() as u64) as usize;
                let (job, value) = in_flight.swap_remove(index);
                disk[(job.target_offset / EXTENT) as usize] = value;
                manager.job_done(job.id);
            }
            for extent in 0..EXTENTS {
                assert!(
                    user[extent as usize] == 0 || manager.is_allocated(extent * EXTENT),
                    "seed {seed}: {extent} lost after {choice}"
                );
            }
            // No user data was overwritten by a copy.
            for extent in 0..EXTENTS as usize {
                if manager.is_allocated(extent as u64 * EXTENT) {
                    assert_eq!(
                        disk[extent], user[extent],
                        "seed {seed}: user data at {extent} overwritten"
                    );
                }
            }
            let status = manager.status();
            assert_eq!(
                status.current_copies + status.pending_copies + status.reserved_extents,
                status.replica_extents,
                "seed {seed}"
            );
        }
        let stats = manager.stats();
        exercised.reads_from_replicas += stats.reads_from_replicas;
        exercised.copies_cancelled += stats.copies_cancelled;
        exercised.dropped_by_reclaim += stats.dropped_by_reclaim;
        exercised.layouts += stats.layouts;
    }
    // The runs did what the property is about.
    assert!(exercised.reads_from_replicas > 100, "{exercised:?}");
    assert!(exercised.copies_cancelled > 10, "{exercised:?}");
    assert!(exercised.dropped_by_reclaim > 10, "{exercised:?}");
    assert!(exercised.layouts > 10, "{exercised:?}");
}
