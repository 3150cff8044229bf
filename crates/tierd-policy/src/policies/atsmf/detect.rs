//! IO concentrations as ATSMF follows them: tracking across periods (002
//! Fig. 5) of the groups that [`crate::concentration::select_groups`] finds
//! in each period (Fig. 4) — the same selection `tierd trace analyze` runs
//! offline.
//!
//! The continuation rule is that of `docs/analysis.md` ("IO
//! concentrations"); what is recorded about a concentration differs (see
//! `docs/policies/atsmf.md`): here "moving" means it has been entirely
//! outside its first range, and a concentration cut by a gap in the periods
//! is dropped without being reported as ended.

use serde::{Deserialize, Serialize};

use crate::concentration::Group;
use crate::view::SegmentId;

/// `segment` of a group, which [`crate::concentration::select_groups`] built
/// from the policy's `SegmentId` cells, so it fits.
fn segment_id(segment: u64) -> SegmentId {
    SegmentId::try_from(segment).expect("groups are built from SegmentId cells")
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
                    let (first, last) = (
                        segment_id(group.first_segment),
                        segment_id(group.last_segment),
                    );
                    !claimed[*index]
                        && first <= position.last_segment.saturating_add(1)
                        && position.first_segment <= last.saturating_add(1)
                })
                .min_by_key(|(_, alive)| (alive.start_period, alive.current().first_segment))
                .map(|(index, _)| index);
            match candidate {
                Some(index) => {
                    claimed[index] = true;
                    let mut concentration = previous[index].clone();
                    concentration.periods += 1;
                    concentration.ios = group.io;
                    let (first, last) = concentration.first_range;
                    let position = Position {
                        period,
                        first_segment: segment_id(group.first_segment),
                        last_segment: segment_id(group.last_segment),
                    };
                    if position.last_segment < first || position.first_segment > last {
                        concentration.moving = true;
                    }
                    concentration.positions.push(position);
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
        let position = Position {
            period,
            first_segment: segment_id(group.first_segment),
            last_segment: segment_id(group.last_segment),
        };
        Concentration {
            id,
            start_period: period,
            periods: 1,
            first_range: (position.first_segment, position.last_segment),
            moving: false,
            ios: group.io,
            positions: vec![position],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(first_segment: u64, last_segment: u64) -> Group {
        Group {
            first_segment,
            last_segment,
            io: 10,
            writes: 0,
        }
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
            let segment = period * 2;
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
