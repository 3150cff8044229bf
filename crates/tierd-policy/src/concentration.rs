//! IO concentration detection in one period (ATSMF, paper 002 §4.2, Fig. 4
//! steps 2–4): the one implementation behind both the ATSMF policy (online,
//! every period it observes) and `tierd trace analyze` (offline, every period
//! of a trace), so the analysis reports exactly what the policy would see.
//! Definitions: `docs/analysis.md`, "IO concentrations".
//!
//! Pure: cells in, groups out. Following the groups from period to period
//! (Fig. 5) stays with each caller, which record different things about a
//! concentration's life (see `docs/analysis.md` and `docs/policies/atsmf.md`).

use std::cmp::Reverse;

/// IO of one segment in one period, the input of [`select_groups`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentIo {
    pub segment: u64,
    pub io: u64,
    /// The writes among `io`; only summed into [`Group::writes`], never used
    /// to select.
    pub writes: u64,
}

/// A run of adjacent kept segments ("sub-LUN group"), inclusive range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub first_segment: u64,
    pub last_segment: u64,
    pub io: u64,
    pub writes: u64,
}

impl Group {
    pub fn segments(&self) -> u64 {
        self.last_segment - self.first_segment + 1
    }
}

/// Settings of the selection step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Selection {
    /// N: segments kept after sorting by IO.
    pub top_n: usize,
    /// M: stop taking groups once they hold this percentage of the period's IO.
    pub share_percent: f64,
    /// With fewer than M% in all groups, select nothing instead of everything.
    pub require_share: bool,
}

/// The concentrations of one period, in the order they were taken (IO
/// descending, ties: lower first segment first).
///
/// `cells` are the period's segments with IO, in any order; they are
/// reordered. The period's IO is the sum of their `io`, so the caller MUST
/// pass every segment that had IO in the period.
///
/// Step 2: sort by IO descending (ties: lower segment first) and keep the
/// `top_n` busiest with IO > 0. Step 3: merge kept segments whose numbers
/// are consecutive into groups. Step 4: take groups, most IO first, until
/// `taken IO × 100 ≥ share_percent × period IO` (exact in `f64` for any
/// realistic count; no rounding of M). When all groups together hold less,
/// all are taken, or none when `require_share`.
pub fn select_groups(cells: &mut [SegmentIo], selection: &Selection) -> Vec<Group> {
    let period_io: u64 = cells.iter().map(|cell| cell.io).sum();
    cells.sort_unstable_by_key(|cell| (Reverse(cell.io), cell.segment));
    let kept_count = cells
        .iter()
        .take(selection.top_n)
        .take_while(|cell| cell.io > 0)
        .count();
    let kept = &mut cells[..kept_count];
    kept.sort_unstable_by_key(|cell| cell.segment);
    let mut groups: Vec<Group> = Vec::new();
    for cell in kept.iter() {
        match groups.last_mut() {
            Some(group) if group.last_segment.checked_add(1) == Some(cell.segment) => {
                group.last_segment = cell.segment;
                group.io += cell.io;
                group.writes += cell.writes;
            }
            _ => groups.push(Group {
                first_segment: cell.segment,
                last_segment: cell.segment,
                io: cell.io,
                writes: cell.writes,
            }),
        }
    }
    groups.sort_unstable_by_key(|group| (Reverse(group.io), group.first_segment));
    let target = selection.share_percent * period_io as f64;
    let mut taken_io = 0u64;
    let mut taken = 0;
    let mut reached = false;
    for group in &groups {
        taken += 1;
        taken_io += group.io;
        if taken_io as f64 * 100.0 >= target {
            reached = true;
            break;
        }
    }
    if !reached && selection.require_share {
        return Vec::new();
    }
    groups.truncate(taken);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(segment: u64, io: u64) -> SegmentIo {
        SegmentIo {
            segment,
            io,
            writes: io / 5,
        }
    }

    const SELECTION: Selection = Selection {
        top_n: 3,
        share_percent: 60.0,
        require_share: false,
    };

    fn ranges(groups: &[Group]) -> Vec<(u64, u64, u64, u64)> {
        groups
            .iter()
            .map(|g| (g.first_segment, g.last_segment, g.io, g.writes))
            .collect()
    }

    #[test]
    fn selection_keeps_top_n_merges_neighbours_and_stops_at_m_percent() {
        // Period IO = 100. Top 3 by IO: segment 5 (30), 6 (25), 9 (20); 2 (15) and 0 (10) cut.
        // Groups: [5,6] = 55, [9] = 20. 55 < 60, 55 + 20 = 75 ≥ 60 → both taken.
        let cells = [
            cell(0, 10),
            cell(2, 15),
            cell(5, 30),
            cell(6, 25),
            cell(9, 20),
        ];
        let groups = select_groups(&mut cells.clone(), &SELECTION);
        assert_eq!(ranges(&groups), [(5, 6, 55, 11), (9, 9, 20, 4)]);
        assert_eq!(groups[0].segments(), 2);
        // With M = 50, [5,6] alone (55 ≥ 50) is enough.
        let half = Selection {
            share_percent: 50.0,
            ..SELECTION
        };
        assert_eq!(select_groups(&mut cells.clone(), &half).len(), 1);
        // M is compared exactly: 55 % of the IO reaches M = 55.
        let exact = Selection {
            share_percent: 55.0,
            ..SELECTION
        };
        assert_eq!(ranges(&select_groups(&mut cells.clone(), &exact)).len(), 1);
    }

    #[test]
    fn spread_io_takes_all_groups_unless_share_is_required() {
        // Period IO = 100 over 10 segments of 10: top 3 = segments 0,1,2 (ties → lower index),
        // one group [0,2] of 30 < 60.
        let mut cells: Vec<SegmentIo> = (0..10).map(|segment| cell(segment, 10)).collect();
        let groups = select_groups(&mut cells, &SELECTION);
        assert_eq!(ranges(&groups), [(0, 2, 30, 6)]);
        let strict = Selection {
            require_share: true,
            ..SELECTION
        };
        assert!(select_groups(&mut cells, &strict).is_empty());
    }

    #[test]
    fn equal_groups_are_taken_lower_segment_first() {
        // Groups [2] and [7] hold 40 each of 100; M = 30: one is enough, the lower.
        let mut cells = vec![cell(7, 40), cell(2, 40), cell(4, 20)];
        let thirty = Selection {
            top_n: 2,
            share_percent: 30.0,
            require_share: false,
        };
        assert_eq!(ranges(&select_groups(&mut cells, &thirty)), [(2, 2, 40, 8)]);
        assert!(select_groups(&mut [], &SELECTION).is_empty());
    }
}
