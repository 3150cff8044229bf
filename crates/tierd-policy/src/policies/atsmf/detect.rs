//! IO concentrations as ATSMF finds them: per-period selection (002 §4.2,
//! Fig. 4) and tracking across periods (Fig. 5).
//!
//! The definitions are those of `docs/analysis.md` ("IO concentrations"), so
//! `tierd trace analyze` reports what this policy would see; the code is
//! written again here because `tierd-policy` sits below `tierd-analysis`.

use std::cmp::Reverse;

use serde::{Deserialize, Serialize};

use crate::view::SegmentId;

/// A run of adjacent kept segments ("sub-LUN group"), inclusive range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub first_segment: SegmentId,
    pub last_segment: SegmentId,
    pub ios: u64,
}

/// Fig. 4 steps 2–4 on one period. `cells` are (segment, IO count) of the
/// period's segments with IO, in any order (reordered here). Keeps the
/// `top_n` busiest (ties: lower segment first), merges adjacent kept
/// segments into groups, and takes groups by IO, most first, until they hold
/// at least `share_percent` of the period's IO. When all groups together hold
/// less, all are taken, or none when `require_share`.
pub fn select_groups(
    cells: &mut [(SegmentId, u64)],
    top_n: usize,
    share_percent: f64,
    require_share: bool,
) -> Vec<Group> {
    let period_ios: u64 = cells.iter().map(|cell| cell.1).sum();
    cells.sort_unstable_by_key(|&(segment, ios)| (Reverse(ios), segment));
    let kept_count = cells
        .iter()
        .take(top_n)
        .take_while(|cell| cell.1 > 0)
        .count();
    let kept = &mut cells[..kept_count];
    kept.sort_unstable_by_key(|cell| cell.0);
    let mut groups: Vec<Group> = Vec::new();
    for &(segment, ios) in kept.iter() {
        match groups.last_mut() {
            Some(group) if group.last_segment.checked_add(1) == Some(segment) => {
                group.last_segment = segment;
                group.ios += ios;
            }
            _ => groups.push(Group {
                first_segment: segment,
                last_segment: segment,
                ios,
            }),
        }
    }
    groups.sort_unstable_by_key(|group| (Reverse(group.ios), group.first_segment));
    let target = share_percent * period_ios as f64;
    let mut taken_ios = 0u64;
    let mut taken = 0;
    let mut reached = false;
    for group in &groups {
        taken += 1;
        taken_ios += group.ios;
        if taken_ios as f64 * 100.0 >= target {
            reached = true;
            break;
        }
    }
    if !reached && require_share {
        return Vec::new();
    }
    groups.truncate(taken);
    groups
}

/// Where a concentration was in one period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Position {
    pub period: u64,
    pub first_segment: SegmentId,
    pub last_segment: SegmentId,
}

impl Position {
    /// Twice the centre, so it stays an integer.
    fn centre_doubled(&self) -> i64 {
        i64::from(self.first_segment) + i64::from(self.last_segment)
    }
}

/// A concentration alive in the latest observed period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concentration {
    /// Unique within a run, in order of appearance.
    pub id: u64,
    pub start_period: u64,
    /// A (002 Fig. 5): periods it has lasted, the current one included.
    pub periods: u64,
    /// Range in its first period.
    pub first_range: (SegmentId, SegmentId),
    /// Has been entirely outside its first range (002 §3.4 type (b): it
    /// walked to other sub-LUNs). A range that only widens or jitters at
    /// its edges around where it started is not moving.
    pub moving: bool,
    /// IO of its group in the latest period.
    pub ios: u64,
    /// Its positions in its most recent periods, oldest first, the latest
    /// last (at least one; bounded by the tracker's `keep_positions`).
    pub positions: Vec<Position>,
}

impl Concentration {
    pub fn current(&self) -> Position {
        *self
            .positions
            .last()
            .expect("a concentration has a position")
    }

    /// Moving speed in segments per period (positive = towards higher
    /// segments): centre displacement from its first range to its latest
    /// position, over the periods between them — its whole life, so edge
    /// jitter of ±1 segment fades as it lasts instead of reading as a walk.
    /// `None` before a second period.
    pub fn speed_segments_per_period(&self) -> Option<f64> {
        let latest = self.positions.last()?;
        let first = Position {
            period: self.start_period,
            first_segment: self.first_range.0,
            last_segment: self.first_range.1,
        };
        let periods = latest.period.checked_sub(first.period)?;
        (periods > 0).then(|| {
            (latest.centre_doubled() - first.centre_doubled()) as f64 / 2.0 / periods as f64
        })
    }
}

/// A concentration that ended: it lasted `periods` and its last period was
/// `last_period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub last_period: u64,
    pub periods: u64,
}

/// Follows concentrations from period to period (002 Fig. 5).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tracker {
    /// Alive in `alive_period`, in the order their groups were taken (IO
    /// descending).
    pub alive: Vec<Concentration>,
    pub alive_period: Option<u64>,
    pub next_id: u64,
}

impl Tracker {
    /// Takes the groups of `period` and returns the concentrations that
    /// ended before it. A group continues the alive concentration (not yet
    /// continued in this period) whose previous range overlaps it or is
    /// adjacent to it; among several, the one that started earliest (ties:
    /// lower first segment). Other groups start new concentrations. When
    /// `period` does not follow the last observed one, the alive
    /// concentrations are dropped without being reported (their end is
    /// unknown). `keep_positions` ≥ 1 bounds each position list.
    pub fn observe(&mut self, period: u64, groups: &[Group], keep_positions: usize) -> Vec<Ended> {
        let continuing = self
            .alive_period
            .is_some_and(|alive| alive.checked_add(1) == Some(period));
        let previous = std::mem::take(&mut self.alive);
        let previous_period = self.alive_period;
        let mut ended = Vec::new();
        if !continuing {
            self.alive_period = (!groups.is_empty()).then_some(period);
            for group in groups {
                self.start(period, group);
            }
            return ended;
        }
        let mut claimed = vec![false; previous.len()];
        let mut next_alive = Vec::with_capacity(groups.len());
        for group in groups {
            let candidate = previous
                .iter()
                .enumerate()
                .filter(|(index, alive)| {
                    let position = alive.current();
                    !claimed[*index]
                        && group.first_segment <= position.last_segment.saturating_add(1)
                        && position.first_segment <= group.last_segment.saturating_add(1)
                })
                .min_by_key(|(_, alive)| (alive.start_period, alive.current().first_segment))
                .map(|(index, _)| index);
            match candidate {
                Some(index) => {
                    claimed[index] = true;
                    let mut concentration = previous[index].clone();
                    concentration.periods += 1;
                    concentration.ios = group.ios;
                    let (first, last) = concentration.first_range;
                    if group.last_segment < first || group.first_segment > last {
                        concentration.moving = true;
                    }
                    concentration.positions.push(Position {
                        period,
                        first_segment: group.first_segment,
                        last_segment: group.last_segment,
                    });
                    let excess = concentration
                        .positions
                        .len()
                        .saturating_sub(keep_positions.max(1));
                    concentration.positions.drain(..excess);
                    next_alive.push(concentration);
                }
                None => {
                    next_alive.push(self.new_concentration(period, group));
                }
            }
        }
        for (index, concentration) in previous.iter().enumerate() {
            if !claimed[index] {
                ended.push(Ended {
                    last_period: previous_period.unwrap_or(0),
                    periods: concentration.periods,
                });
            }
        }
        self.alive = next_alive;
        self.alive_period = (!groups.is_empty()).then_some(period);
        ended
    }

    fn start(&mut self, period: u64, group: &Group) {
        let concentration = self.new_concentration(period, group);
        self.alive.push(concentration);
    }

    fn new_concentration(&mut self, period: u64, group: &Group) -> Concentration {
        let id = self.next_id;
        self.next_id += 1;
        Concentration {
            id,
            start_period: period,
            periods: 1,
            first_range: (group.first_segment, group.last_segment),
            moving: false,
            ios: group.ios,
            positions: vec![Position {
                period,
                first_segment: group.first_segment,
                last_segment: group.last_segment,
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(first_segment: SegmentId, last_segment: SegmentId) -> Group {
        Group {
            first_segment,
            last_segment,
            ios: 10,
        }
    }

    #[test]
    fn selection_keeps_top_n_merges_neighbours_and_stops_at_m_percent() {
        // IO 100: top 3 = 5 (30), 6 (25), 9 (20); groups [5,6] = 55 < 60, + [9] = 75 ≥ 60.
        let mut cells = vec![(0, 10), (2, 15), (5, 30), (6, 25), (9, 20)];
        let groups = select_groups(&mut cells, 3, 60.0, false);
        let ranges: Vec<_> = groups
            .iter()
            .map(|g| (g.first_segment, g.last_segment, g.ios))
            .collect();
        assert_eq!(ranges, [(5, 6, 55), (9, 9, 20)]);
        let mut cells = vec![(0, 10), (2, 15), (5, 30), (6, 25), (9, 20)];
        assert_eq!(select_groups(&mut cells, 3, 50.0, false).len(), 1);
        // Spread IO: the one group of the top 3 holds 30 % < 60 %.
        let mut spread: Vec<(SegmentId, u64)> = (0..10).map(|segment| (segment, 10)).collect();
        assert_eq!(select_groups(&mut spread, 3, 60.0, false).len(), 1);
        assert!(select_groups(&mut spread, 3, 60.0, true).is_empty());
    }

    #[test]
    fn tracking_continues_by_adjacency_and_reports_ended_durations() {
        let mut tracker = Tracker::default();
        assert!(tracker
            .observe(0, &[group(10, 10), group(50, 51)], 4)
            .is_empty());
        assert!(tracker
            .observe(1, &[group(11, 11), group(50, 51)], 4)
            .is_empty());
        let ended = tracker.observe(2, &[group(12, 12), group(70, 70)], 4);
        assert_eq!(
            ended,
            [Ended {
                last_period: 1,
                periods: 2
            }]
        );
        let walker = &tracker.alive[0];
        assert_eq!((walker.id, walker.periods, walker.moving), (0, 3, true));
        assert_eq!(walker.speed_segments_per_period(), Some(1.0));
        assert_eq!(tracker.alive[1].id, 2);
        // An empty period ends everything; a gap ends without reporting.
        assert_eq!(tracker.observe(3, &[], 4).len(), 2);
        tracker.observe(4, &[group(1, 1)], 4);
        assert!(tracker.observe(6, &[group(1, 1)], 4).is_empty());
        assert_eq!(tracker.alive[0].periods, 1);
    }

    #[test]
    fn positions_are_bounded_and_speed_spans_the_whole_life() {
        let mut tracker = Tracker::default();
        for period in 0..6u64 {
            let segment = (period as SegmentId) * 2;
            tracker.observe(period, &[group(segment, segment + 1)], 3);
        }
        let walker = &tracker.alive[0];
        assert_eq!(walker.positions.len(), 3);
        assert_eq!(walker.positions[0].period, 3);
        // Centres 0.5 (first range, period 0) → 10.5 (period 5).
        assert_eq!(walker.speed_segments_per_period(), Some(2.0));
        assert!(walker.moving);
    }

    #[test]
    fn edges_that_jitter_around_the_first_range_are_not_a_walk() {
        let mut tracker = Tracker::default();
        let ranges = [(10, 10), (10, 11), (9, 11), (10, 10), (10, 11), (9, 10)];
        for (period, &(first, last)) in ranges.iter().enumerate() {
            tracker.observe(period as u64, &[group(first, last)], 3);
        }
        let jitter = &tracker.alive[0];
        assert_eq!(jitter.periods, 6);
        assert!(!jitter.moving);
        // Centre 10 → 9.5 over 5 periods.
        assert_eq!(jitter.speed_segments_per_period(), Some(-0.1));
    }
}
