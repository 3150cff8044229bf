//! The duration prediction table of 002 §4.2 (Table 2), learned online.
//!
//! From the durations of the concentrations that ended recently: for a
//! concentration that has lasted A periods, B = mean duration of those that
//! lasted ≥ A, and the rest it is expected to last is B − A periods.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Durations of ended concentrations, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DurationLog {
    /// (last period, duration in periods) of each ended concentration.
    ended: VecDeque<(u64, u64)>,
}

/// Hard bound on the log, whatever the settings.
pub const MAX_LOGGED_DURATIONS: usize = 1 << 16;

impl DurationLog {
    pub fn record(&mut self, last_period: u64, periods: u64) {
        if self.ended.len() == MAX_LOGGED_DURATIONS {
            self.ended.pop_front();
        }
        self.ended.push_back((last_period, periods));
    }

    /// Forgets concentrations that ended more than `history_periods` before
    /// `now_period` (the paper learns from "half a day or so").
    pub fn expire(&mut self, now_period: u64, history_periods: u64) {
        while let Some(&(last_period, _)) = self.ended.front() {
            if last_period.saturating_add(history_periods) < now_period {
                self.ended.pop_front();
            } else {
                break;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.ended.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ended.is_empty()
    }

    /// The table as of now.
    pub fn table(&self) -> Table {
        let mut durations: Vec<u64> = self.ended.iter().map(|entry| entry.1).collect();
        durations.sort_unstable();
        // suffix[i] = sum of durations[i..].
        let mut suffix = vec![0u64; durations.len() + 1];
        for index in (0..durations.len()).rev() {
            suffix[index] = suffix[index + 1].saturating_add(durations[index]);
        }
        Table { durations, suffix }
    }
}

/// A snapshot of the prediction table for lookups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    durations: Vec<u64>,
    suffix: Vec<u64>,
}

/// One row, learned or from the prior.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Row {
    /// A: periods lasted so far.
    pub periods_lasted: u64,
    /// Ended concentrations that lasted ≥ A.
    pub samples: u64,
    /// B: their mean duration in periods (A × (1 + prior ratio) for a prior row).
    pub mean_total_periods: f64,
    /// B − A in periods.
    pub rest_periods: f64,
    /// Whether B came from the run (enough samples) or from the prior.
    pub learned: bool,
}

impl Table {
    /// The row for A = `lasted` (≥ 1): learned when at least `min_samples`
    /// (≥ 1) ended concentrations lasted ≥ A, else the prior rest
    /// `prior_rest_ratio` × A.
    pub fn row(&self, lasted: u64, min_samples: u64, prior_rest_ratio: f64) -> Row {
        let lasted = lasted.max(1);
        let first = self
            .durations
            .partition_point(|duration| *duration < lasted);
        let samples = (self.durations.len() - first) as u64;
        if samples >= min_samples.max(1) {
            let mean_total_periods = self.suffix[first] as f64 / samples as f64;
            Row {
                periods_lasted: lasted,
                samples,
                mean_total_periods,
                rest_periods: mean_total_periods - lasted as f64,
                learned: true,
            }
        } else {
            let rest_periods = prior_rest_ratio.max(0.0) * lasted as f64;
            Row {
                periods_lasted: lasted,
                samples,
                mean_total_periods: lasted as f64 + rest_periods,
                rest_periods,
                learned: false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_match_hand_computation_and_fall_back_to_the_prior() {
        let mut log = DurationLog::default();
        for (index, duration) in [1u64, 1, 2, 3, 5].into_iter().enumerate() {
            log.record(index as u64, duration);
        }
        let table = log.table();
        // A = 1: (1+1+2+3+5)/5 = 2.4, rest 1.4.
        let row = table.row(1, 1, 0.6);
        assert_eq!((row.samples, row.learned), (5, true));
        assert!((row.rest_periods - 1.4).abs() < 1e-12);
        // A = 2: (2+3+5)/3 = 3.333…, rest 1.333….
        assert!((table.row(2, 1, 0.6).rest_periods - 4.0 / 3.0).abs() < 1e-12);
        // A = 5: one sample → rest 0; with min 2 samples → prior 0.6 × 5 = 3.
        assert_eq!(table.row(5, 1, 0.6).rest_periods, 0.0);
        let prior = table.row(5, 2, 0.6);
        assert!(!prior.learned);
        assert!((prior.rest_periods - 3.0).abs() < 1e-12);
        // A = 6: no sample.
        assert_eq!(table.row(6, 1, 0.6).samples, 0);
    }

    #[test]
    fn old_durations_expire() {
        let mut log = DurationLog::default();
        log.record(10, 4);
        log.record(20, 2);
        log.expire(25, 10);
        assert_eq!(log.len(), 1);
        assert_eq!(log.table().row(1, 1, 0.6).mean_total_periods, 2.0);
    }
}
