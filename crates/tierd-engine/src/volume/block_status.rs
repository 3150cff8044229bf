//! Which parts of a volume hold data: NBD `BLOCK_STATUS` with the
//! `base:allocation` context, answered from the devices that serve the
//! volume's reads (`docs/engine/nbd.md`).
//!
//! A hole is a promise that the range reads as zeroes, and clients act on
//! it: nbdcopy and `qemu-img convert` skip holes, so a wrong hole is lost
//! data. Every doubt therefore answers "data": a device that cannot tell
//! (`BlockDevice::allocation` is `None`), a malformed device answer, a
//! failed or unavailable tier, a segment being moved where either copy
//! holds data, a cache block the cache holds.
//!
//! - Tiered volumes: each segment's range is asked of the device its reads
//!   go to (its tier's slot, `io.rs`). During a move reads still go to the
//!   source, but the answer is data wherever either the source or the
//!   target says so (a hole only where both agree).
//! - Cache volumes (`cache.rs`): a block the cache holds a slot for is
//!   data; elsewhere home answers. The cache is asked first: a block it
//!   does not hold then has its current data on home, so a writeback and
//!   eviction racing the answer cannot turn written data into a hole.
//!
//! The answer covers a prefix of the range: at most [`MAX_STATUS_RUNS`]
//! runs and [`MAX_STATUS_SEGMENTS`] segments, which the NBD spec allows
//! (the client asks again from where the answer stopped).

use std::sync::atomic::Ordering;

use tierd_policy::SegmentId;

use crate::device::{AllocationRun, AllocationRuns};
use crate::meta::Location;

use super::{Volume, VolumeError};

/// Most runs one answer holds. Well below what a device answers before it
/// reports the rest of its range as data ([`crate::device::file::MAX_ALLOCATION_RUNS`]),
/// so that conservative tail never reaches a client.
pub const MAX_STATUS_RUNS: usize = 256;

/// Most segments one answer looks at (a device call or two each).
pub const MAX_STATUS_SEGMENTS: usize = 1024;

/// Appends a run unless the answer is full: an empty run or one that
/// merges into the last always fits; a new one only below
/// [`MAX_STATUS_RUNS`]. False when it did not fit.
pub(super) fn push_run(runs: &mut AllocationRuns, length_bytes: u64, allocated: bool) -> bool {
    let merges = length_bytes == 0 || runs.last().is_some_and(|last| last.allocated == allocated);
    if !merges && runs.len() >= MAX_STATUS_RUNS {
        return false;
    }
    runs.push(length_bytes, allocated);
    true
}

/// Data wherever either answer has data (both cover the same length).
fn data_in_either(first: &[AllocationRun], second: &[AllocationRun]) -> Vec<AllocationRun> {
    let mut runs = AllocationRuns::default();
    let (mut first_runs, mut second_runs) = (first.iter(), second.iter());
    let (mut left, mut right) = (first_runs.next().copied(), second_runs.next().copied());
    while let (Some(mut a), Some(mut b)) = (left, right) {
        let step = a.length_bytes.min(b.length_bytes);
        runs.push(step, a.allocated || b.allocated);
        a.length_bytes -= step;
        b.length_bytes -= step;
        left = if a.length_bytes == 0 {
            first_runs.next().copied()
        } else {
            Some(a)
        };
        right = if b.length_bytes == 0 {
            second_runs.next().copied()
        } else {
            Some(b)
        };
    }
    runs.into_runs()
}

impl Volume {
    /// Which parts of `[offset, offset + length)` hold data, for NBD
    /// `BLOCK_STATUS` (`base:allocation`): runs in order covering a prefix
    /// of the range (all of it unless that takes more than
    /// [`MAX_STATUS_RUNS`] runs or [`MAX_STATUS_SEGMENTS`] segments), at
    /// least one when `length_bytes > 0`. A run that is not allocated reads
    /// as zeroes; see the module docs for when the answer is "data".
    /// Granularity: a file tier's file system block, a memory tier's 1 MiB
    /// chunk, a reduced tier's block, a cache's block.
    pub fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<AllocationRun>, VolumeError> {
        self.check_range(offset_bytes, length_bytes)?;
        if length_bytes == 0 {
            return Ok(Vec::new());
        }
        let runs = if self.cache.is_some() {
            self.cached_block_status(offset_bytes, length_bytes)
        } else {
            self.tiered_block_status(offset_bytes, length_bytes)
        };
        debug_assert!(
            !runs.is_empty() && runs.covered_bytes() <= length_bytes,
            "a block status answer covers a non-empty prefix"
        );
        Ok(runs.into_runs())
    }

    /// The answer of the tiering table's devices (on a cache volume:
    /// home's). Never empty for a non-empty range.
    pub(super) fn tiered_block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> AllocationRuns {
        let mut runs = AllocationRuns::default();
        'pieces: for (index, (segment, within, length, _)) in
            self.pieces(offset_bytes, length_bytes).enumerate()
        {
            if index >= MAX_STATUS_SEGMENTS {
                break;
            }
            for run in self.segment_allocation(segment, within, length) {
                if !push_run(&mut runs, run.length_bytes, run.allocated) {
                    break 'pieces;
                }
            }
        }
        runs
    }

    /// One segment's part, under its entry lock (so no flip or move start
    /// changes where its data is while the devices are asked).
    fn segment_allocation(
        &self,
        segment: SegmentId,
        within: u64,
        length: u64,
    ) -> Vec<AllocationRun> {
        let guard = self.entries[segment as usize].read();
        let entry = *guard;
        let source = self.tier_allocation(entry.location, within, length);
        if !entry.moving {
            return source;
        }
        let target = self
            .active
            .read()
            .iter()
            .find(|active| active.segment == segment)
            .map(|active| active.to);
        let answer = match target {
            Some(target) => data_in_either(&source, &self.tier_allocation(target, within, length)),
            None => vec![AllocationRun {
                length_bytes: length,
                allocated: true,
            }],
        };
        drop(guard);
        answer
    }

    /// What the device of `location`'s tier says of the segment's bytes
    /// `within..within + length`; all data when it cannot tell, answers
    /// something malformed, has failed or its tier is marked unavailable.
    fn tier_allocation(&self, location: Location, within: u64, length: u64) -> Vec<AllocationRun> {
        let tier = location.tier as usize;
        let all_data = || {
            vec![AllocationRun {
                length_bytes: length,
                allocated: true,
            }]
        };
        if self.unavailable_tiers[tier].load(Ordering::SeqCst) {
            return all_data();
        }
        let device = &self.tiers[tier].device;
        if device.failure().is_some() {
            return all_data();
        }
        match device.allocation(self.slot_offset(location) + within, length) {
            Some(runs) if AllocationRun::covers(&runs, length) => runs,
            _ => all_data(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(length_bytes: u64, allocated: bool) -> AllocationRun {
        AllocationRun {
            length_bytes,
            allocated,
        }
    }

    #[test]
    fn either_answer_with_data_makes_data() {
        let source = [run(10, false), run(5, true), run(20, false)];
        let target = [run(12, false), run(8, true), run(15, false)];
        assert_eq!(
            data_in_either(&source, &target),
            vec![run(10, false), run(10, true), run(15, false)]
        );
        assert_eq!(
            data_in_either(&[run(35, false)], &source),
            source.to_vec(),
            "a hole everywhere changes nothing"
        );
        assert_eq!(
            data_in_either(&[run(35, true)], &source),
            vec![run(35, true)]
        );
    }

    #[test]
    fn a_full_answer_takes_merging_runs_only() {
        let mut runs = AllocationRuns::default();
        for index in 0..MAX_STATUS_RUNS {
            assert!(push_run(&mut runs, 1, index % 2 == 0));
        }
        let last = runs.last().unwrap().allocated;
        assert!(push_run(&mut runs, 7, last), "merges into the last run");
        assert!(push_run(&mut runs, 0, !last), "an empty run always fits");
        assert!(!push_run(&mut runs, 1, !last), "a new run does not fit");
        assert_eq!(runs.len(), MAX_STATUS_RUNS);
        assert_eq!(runs.covered_bytes(), MAX_STATUS_RUNS as u64 + 7);
    }
}
