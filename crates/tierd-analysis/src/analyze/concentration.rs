//! IO concentrations: tracking across periods (ATSMF 002 Fig. 5) of the
//! groups that [`select_groups`] finds in each period (Fig. 4), with the
//! duration prediction table (Table 2). Definitions: `docs/analysis.md`,
//! "IO concentrations".
//!
//! The per-period selection is `tierd_policy::concentration`, the code the
//! ATSMF policy runs online, so this analysis reports what the policy sees.

use serde::Serialize;
use tierd_common::hash::FastSet;

pub use tierd_policy::concentration::{select_groups, Group, SegmentIo, Selection};

/// One IO concentration over its life. JSON keys are the field names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Concentration {
    pub start_period: u64,
    /// Duration in periods.
    pub periods: u64,
    /// Lowest segment it ever covered.
    pub first_segment: u64,
    /// Highest segment it ever covered.
    pub last_segment: u64,
    /// `last_segment - first_segment + 1` (its ranges form one contiguous span).
    pub segments_touched: u64,
    /// Took a segment outside its first range (002 §3.4 type (b)).
    pub moving: bool,
    /// Its first range held no segment of any earlier concentration.
    pub arbitrary: bool,
    /// Alive in the trace's last period, so its duration is a lower bound.
    pub ongoing: bool,
    pub io: u64,
    pub writes: u64,
    #[serde(skip)]
    pub first_range: (u64, u64),
    /// Sum over its periods of its group's size in segments.
    #[serde(skip)]
    pub segment_periods: u64,
}

/// A concentration alive in the last observed period, with that period's range.
#[derive(Clone, Copy, Debug)]
struct Alive {
    record: usize,
    first_segment: u64,
    last_segment: u64,
}

/// Follows concentrations from period to period.
#[derive(Debug, Default)]
pub struct Tracker {
    records: Vec<Concentration>,
    alive: Vec<Alive>,
    alive_period: Option<u64>,
    /// Segments of every group observed so far (for "arbitrary").
    covered: FastSet<u64>,
    io: u64,
    writes: u64,
    /// (concentration, period) pairs and the sum of their group sizes.
    group_periods: u64,
    group_segments: u64,
    /// Periods with at least one concentration, the sum and max of their footprint.
    periods_with_concentrations: u64,
    footprint_segments_sum: u64,
    footprint_segments_peak: u64,
}

impl Tracker {
    /// Takes the concentrations of `period`. Periods MUST come in increasing
    /// order; a skipped period (no IO) ends every alive concentration.
    pub fn observe(&mut self, period: u64, groups: &[Group]) {
        let continuing = period > 0 && self.alive_period == Some(period - 1);
        let previous = if continuing {
            std::mem::take(&mut self.alive)
        } else {
            self.alive.clear();
            Vec::new()
        };
        let mut claimed = vec![false; previous.len()];
        let mut next_alive = Vec::with_capacity(groups.len());
        for group in groups {
            let candidate = previous
                .iter()
                .enumerate()
                .filter(|(index, alive)| {
                    !claimed[*index]
                        && group.first_segment <= alive.last_segment.saturating_add(1)
                        && alive.first_segment <= group.last_segment.saturating_add(1)
                })
                .min_by_key(|(_, alive)| {
                    (self.records[alive.record].start_period, alive.first_segment)
                })
                .map(|(index, alive)| (index, alive.record));
            let record = match candidate {
                Some((index, record)) => {
                    claimed[index] = true;
                    let concentration = &mut self.records[record];
                    concentration.periods += 1;
                    concentration.first_segment =
                        concentration.first_segment.min(group.first_segment);
                    concentration.last_segment = concentration.last_segment.max(group.last_segment);
                    concentration.segments_touched =
                        concentration.last_segment - concentration.first_segment + 1;
                    let (first, last) = concentration.first_range;
                    if group.first_segment < first || group.last_segment > last {
                        concentration.moving = true;
                    }
                    concentration.io += group.io;
                    concentration.writes += group.writes;
                    concentration.segment_periods += group.segments();
                    record
                }
                None => {
                    let arbitrary = !(group.first_segment..=group.last_segment)
                        .any(|segment| self.covered.contains(&segment));
                    self.records.push(Concentration {
                        start_period: period,
                        periods: 1,
                        first_segment: group.first_segment,
                        last_segment: group.last_segment,
                        segments_touched: group.segments(),
                        moving: false,
                        arbitrary,
                        ongoing: false,
                        io: group.io,
                        writes: group.writes,
                        first_range: (group.first_segment, group.last_segment),
                        segment_periods: group.segments(),
                    });
                    self.records.len() - 1
                }
            };
            next_alive.push(Alive {
                record,
                first_segment: group.first_segment,
                last_segment: group.last_segment,
            });
        }
        let mut footprint = 0;
        for group in groups {
            self.covered
                .extend(group.first_segment..=group.last_segment);
            self.io += group.io;
            self.writes += group.writes;
            footprint += group.segments();
        }
        self.group_periods += groups.len() as u64;
        self.group_segments += footprint;
        if !groups.is_empty() {
            self.periods_with_concentrations += 1;
            self.footprint_segments_sum += footprint;
            self.footprint_segments_peak = self.footprint_segments_peak.max(footprint);
        }
        self.alive = next_alive;
        self.alive_period = (!groups.is_empty()).then_some(period);
    }

    /// Ends tracking: concentrations alive in `last_period` are marked ongoing.
    pub fn finish(mut self, last_period: Option<u64>) -> TrackerResult {
        if last_period.is_some() && self.alive_period == last_period {
            for alive in &self.alive {
                self.records[alive.record].ongoing = true;
            }
        }
        TrackerResult {
            records: self.records,
            io: self.io,
            writes: self.writes,
            group_periods: self.group_periods,
            group_segments: self.group_segments,
            periods_with_concentrations: self.periods_with_concentrations,
            footprint_segments_sum: self.footprint_segments_sum,
            footprint_segments_peak: self.footprint_segments_peak,
        }
    }
}

/// Everything the tracker learnt.
#[derive(Debug)]
pub struct TrackerResult {
    pub records: Vec<Concentration>,
    pub io: u64,
    pub writes: u64,
    pub group_periods: u64,
    pub group_segments: u64,
    pub periods_with_concentrations: u64,
    pub footprint_segments_sum: u64,
    pub footprint_segments_peak: u64,
}

/// One row of the duration prediction table (002 Table 2).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PredictionRow {
    /// A: periods a concentration has lasted so far.
    pub periods_lasted: u64,
    /// Ended concentrations that lasted ≥ A periods.
    pub samples: u64,
    /// B: their mean duration in periods.
    pub mean_total_periods: f64,
    /// B − A in periods.
    pub rest_periods: f64,
    /// B − A in seconds.
    pub rest_s: f64,
}

/// The prediction table from the durations (periods) of ended concentrations.
pub fn prediction_table(
    ended_durations: &[u64],
    max_periods: u64,
    period_s: f64,
) -> Vec<PredictionRow> {
    let mut rows = Vec::new();
    for lasted in 1..=max_periods {
        let (count, sum) = ended_durations
            .iter()
            .filter(|duration| **duration >= lasted)
            .fold((0u64, 0u64), |(count, sum), duration| {
                (count + 1, sum + duration)
            });
        if count == 0 {
            // Longer A cannot have samples either.
            break;
        }
        let mean_total_periods = sum as f64 / count as f64;
        let rest_periods = mean_total_periods - lasted as f64;
        rows.push(PredictionRow {
            periods_lasted: lasted,
            samples: count,
            mean_total_periods,
            rest_periods,
            rest_s: rest_periods * period_s,
        });
    }
    rows
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
    fn tracking_follows_overlap_and_adjacency_and_ends_on_gaps() {
        let mut tracker = Tracker::default();
        tracker.observe(0, &[group(10, 10), group(50, 51)]);
        // [11] is adjacent to [10]: continues and moves; [50,51] stays.
        tracker.observe(1, &[group(11, 11), group(50, 51)]);
        // [70] is new: it ends nothing but starts a third concentration.
        tracker.observe(2, &[group(12, 12), group(70, 70)]);
        // Period 3 has no concentration; period 4 restarts at 12: not arbitrary (12 was covered).
        tracker.observe(4, &[group(12, 12)]);
        let result = tracker.finish(Some(4));
        let summary: Vec<_> = result
            .records
            .iter()
            .map(|c| {
                (
                    c.start_period,
                    c.periods,
                    c.first_segment,
                    c.last_segment,
                    c.moving,
                    c.arbitrary,
                    c.ongoing,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (0, 3, 10, 12, true, true, false),
                (0, 2, 50, 51, false, true, false),
                (2, 1, 70, 70, false, true, false),
                (4, 1, 12, 12, false, false, true),
            ]
        );
        assert_eq!(result.periods_with_concentrations, 4);
        assert_eq!(result.footprint_segments_peak, 3);
        assert_eq!(result.group_periods, 7);
    }

    #[test]
    fn a_split_keeps_the_old_concentration_on_one_branch() {
        let mut tracker = Tracker::default();
        tracker.observe(0, &[group(10, 14)]);
        // Both [10,11] and [13,14] overlap [10,14]; the first visited continues it.
        tracker.observe(1, &[group(13, 14), group(10, 11)]);
        let result = tracker.finish(Some(1));
        assert_eq!(result.records.len(), 2);
        assert_eq!(result.records[0].periods, 2);
        assert!(!result.records[0].moving);
        assert_eq!(result.records[1].start_period, 1);
        assert!(!result.records[1].arbitrary);
    }

    #[test]
    fn prediction_table_matches_hand_computation() {
        // Durations 1,1,2,3,5: A=1 → mean 12/5 = 2.4, rest 1.4 (33.6 s at 24 s);
        // A=2 → (2+3+5)/3 = 3.333, rest 1.333; A=3 → 4, rest 1; A=4 → 5, rest 1;
        // A=5 → 5, rest 0; A=6 → none, omitted.
        let rows = prediction_table(&[1, 1, 2, 3, 5], 10, 24.0);
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0].samples, 5);
        assert!((rows[0].mean_total_periods - 2.4).abs() < 1e-12);
        assert!((rows[0].rest_s - 33.6).abs() < 1e-9);
        assert!((rows[1].rest_periods - 4.0 / 3.0).abs() < 1e-12);
        assert!((rows[2].mean_total_periods - 4.0).abs() < 1e-12);
        assert_eq!(rows[4].rest_periods, 0.0);
        assert!(prediction_table(&[], 10, 24.0).is_empty());
    }
}
