//! Spikes (OTF-AST 000 §3: a region with ≥ 1 iops) and spike regions (000
//! Table 6). Definitions: `docs/analysis.md`, "Spikes" and "Spike regions".

use serde::Serialize;
use tierd_common::hash::FastMap;

/// A spike of one segment still open.
#[derive(Clone, Copy, Debug)]
struct Run {
    start_period: u64,
    last_period: u64,
    peak_io: u64,
    peak_period: u64,
}

/// One power-of-two bucket of spike durations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DurationBucket {
    /// Spikes of more than half of this many periods and at most this many.
    pub max_periods: u64,
    pub count: u64,
}

/// Spike-region sizes over all (period, region) pairs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RegionSummary {
    pub count: u64,
    pub min_bytes: Option<u64>,
    pub mean_bytes: Option<f64>,
    pub max_bytes: Option<u64>,
}

/// Everything about spikes. JSON keys are the field names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpikeSummary {
    /// Distinct segments with at least one spike cell.
    pub spike_segments: u64,
    /// (segment, period) cells at or above the threshold.
    pub spike_cells: u64,
    /// Spikes (maximal runs of consecutive spiking periods of one segment).
    pub count: u64,
    pub mean_duration_periods: Option<f64>,
    pub mean_duration_s: Option<f64>,
    pub max_duration_periods: Option<u64>,
    pub max_duration_s: Option<f64>,
    pub mean_time_to_peak_s: Option<f64>,
    pub duration_histogram: Vec<DurationBucket>,
    pub regions: RegionSummary,
}

/// Collects spike runs per segment and spike regions per period.
#[derive(Debug, Default)]
pub struct SpikeTracker {
    open: FastMap<u64, Run>,
    spike_cells: u64,
    count: u64,
    duration_sum_periods: u64,
    duration_max_periods: u64,
    time_to_peak_sum_periods: u64,
    /// Index i counts spikes of duration in (2^(i-1), 2^i] periods (grown on demand).
    histogram: Vec<u64>,
    region_count: u64,
    region_sum_bytes: u128,
    region_min_bytes: u64,
    region_max_bytes: u64,
}

impl SpikeTracker {
    /// A spiking cell: `segment` had `io` IO in `period`. For each segment,
    /// periods MUST come in increasing order.
    pub fn observe_cell(&mut self, segment: u64, period: u64, io: u64) {
        self.spike_cells += 1;
        let closed = match self.open.get_mut(&segment) {
            Some(run) if period > 0 && run.last_period == period - 1 => {
                run.last_period = period;
                if io > run.peak_io {
                    run.peak_io = io;
                    run.peak_period = period;
                }
                return;
            }
            Some(run) => Some(*run),
            None => None,
        };
        if let Some(run) = closed {
            self.close(run);
        }
        self.open.insert(
            segment,
            Run {
                start_period: period,
                last_period: period,
                peak_io: io,
                peak_period: period,
            },
        );
    }

    fn close(&mut self, run: Run) {
        let duration = run.last_period - run.start_period + 1;
        self.count += 1;
        self.duration_sum_periods += duration;
        self.duration_max_periods = self.duration_max_periods.max(duration);
        self.time_to_peak_sum_periods += run.peak_period - run.start_period;
        // Smallest power of two ≥ duration is 2^ceil(log2 duration).
        let bucket = 64 - (duration - 1).leading_zeros() as usize;
        if self.histogram.len() <= bucket {
            self.histogram.resize(bucket + 1, 0);
        }
        self.histogram[bucket] += 1;
    }

    /// The spiking chunks of one period (chunk indices, any order, no
    /// duplicates); each run of adjacent chunks is one region of
    /// `run × granularity_bytes`. `chunks` is sorted in place.
    pub fn observe_regions(&mut self, chunks: &mut [u64], granularity_bytes: u64) {
        chunks.sort_unstable();
        let mut index = 0;
        while index < chunks.len() {
            let mut end = index + 1;
            while end < chunks.len() && chunks[end] == chunks[end - 1] + 1 {
                end += 1;
            }
            let bytes = ((end - index) as u64).saturating_mul(granularity_bytes);
            if self.region_count == 0 {
                self.region_min_bytes = bytes;
                self.region_max_bytes = bytes;
            } else {
                self.region_min_bytes = self.region_min_bytes.min(bytes);
                self.region_max_bytes = self.region_max_bytes.max(bytes);
            }
            self.region_count += 1;
            self.region_sum_bytes += u128::from(bytes);
            index = end;
        }
    }

    /// Closes the open spikes and summarises.
    pub fn finish(mut self, period_s: f64) -> SpikeSummary {
        let spike_segments = self.open.len() as u64;
        let open: Vec<Run> = self.open.drain().map(|(_, run)| run).collect();
        for run in open {
            self.close(run);
        }
        let count = self.count;
        let mean = |sum: u64| (count > 0).then(|| sum as f64 / count as f64);
        let mean_duration_periods = mean(self.duration_sum_periods);
        let histogram = match (
            self.histogram.iter().position(|count| *count > 0),
            self.histogram.iter().rposition(|count| *count > 0),
        ) {
            (Some(first), Some(last)) => (first..=last)
                .map(|index| DurationBucket {
                    max_periods: 1u64 << index.min(63),
                    count: self.histogram[index],
                })
                .collect(),
            _ => Vec::new(),
        };
        let regions = if self.region_count == 0 {
            RegionSummary {
                count: 0,
                min_bytes: None,
                mean_bytes: None,
                max_bytes: None,
            }
        } else {
            RegionSummary {
                count: self.region_count,
                min_bytes: Some(self.region_min_bytes),
                mean_bytes: Some(self.region_sum_bytes as f64 / self.region_count as f64),
                max_bytes: Some(self.region_max_bytes),
            }
        };
        SpikeSummary {
            spike_segments,
            spike_cells: self.spike_cells,
            count,
            mean_duration_periods,
            mean_duration_s: mean_duration_periods.map(|periods| periods * period_s),
            max_duration_periods: (count > 0).then_some(self.duration_max_periods),
            max_duration_s: (count > 0).then_some(self.duration_max_periods as f64 * period_s),
            mean_time_to_peak_s: mean(self.time_to_peak_sum_periods)
                .map(|periods| periods * period_s),
            duration_histogram: histogram,
            regions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_per_segment() {
        let mut spikes = SpikeTracker::default();
        // Segment 1 spikes in periods 0,1,2 (peak in 1) and 5; segment 2 in 3 only.
        spikes.observe_cell(1, 0, 70);
        spikes.observe_cell(1, 1, 200);
        spikes.observe_cell(2, 3, 60);
        spikes.observe_cell(1, 2, 90);
        spikes.observe_cell(1, 5, 60);
        let summary = spikes.finish(60.0);
        assert_eq!(summary.spike_segments, 2);
        assert_eq!(summary.spike_cells, 5);
        // Spikes of 3, 1 and 1 periods: mean 5/3, max 3; time to peak 1, 0, 0 periods.
        assert_eq!(summary.count, 3);
        assert!((summary.mean_duration_periods.unwrap() - 5.0 / 3.0).abs() < 1e-12);
        assert_eq!(summary.max_duration_periods, Some(3));
        assert_eq!(summary.max_duration_s, Some(180.0));
        assert!((summary.mean_time_to_peak_s.unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(
            summary.duration_histogram,
            [
                DurationBucket {
                    max_periods: 1,
                    count: 2
                },
                DurationBucket {
                    max_periods: 2,
                    count: 0
                },
                DurationBucket {
                    max_periods: 4,
                    count: 1
                },
            ]
        );
    }

    #[test]
    fn regions_are_runs_of_adjacent_chunks() {
        let mut spikes = SpikeTracker::default();
        // Chunks 7,3,4,5,9: regions [3..=5] (3 chunks), [7], [9].
        spikes.observe_regions(&mut [7, 3, 4, 5, 9], 100);
        spikes.observe_regions(&mut [], 100);
        let regions = spikes.finish(60.0).regions;
        assert_eq!(regions.count, 3);
        assert_eq!(regions.min_bytes, Some(100));
        assert_eq!(regions.max_bytes, Some(300));
        assert!((regions.mean_bytes.unwrap() - 500.0 / 3.0).abs() < 1e-9);
    }
}
