//! Log-bucketed histogram of durations (response times).
//!
//! Buckets are HDR-style: values below 16 ns have a bucket each; above, every
//! power of two is split into 16 equal sub-buckets, so a bucket's width is at
//! most 1/16 of its lower bound (6.25 % relative resolution) across the whole
//! `u64` range. Recording is a few integer instructions and never allocates;
//! the mean is exact (sum kept apart), percentiles are bucket upper bounds
//! clipped to the exact maximum.

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

const SUB_BUCKET_BITS: u32 = 4;
const SUB_BUCKETS: usize = 1 << SUB_BUCKET_BITS;
/// Buckets needed to cover `u64`: 16 linear ones plus 16 per remaining octave.
const BUCKETS: usize = SUB_BUCKETS + (64 - SUB_BUCKET_BITS as usize) * SUB_BUCKETS;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogHistogram {
    counts: Box<[u64]>,
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        Self::new()
    }
}

/// Index of the bucket holding `value`.
#[inline]
fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros(); // >= SUB_BUCKET_BITS
    let shift = exponent - SUB_BUCKET_BITS;
    let sub = ((value >> shift) as usize) & (SUB_BUCKETS - 1);
    SUB_BUCKETS + (shift as usize) * SUB_BUCKETS + sub
}

/// Smallest value of bucket `index`.
fn bucket_low(index: usize) -> u64 {
    if index < SUB_BUCKETS {
        return index as u64;
    }
    let shift = ((index - SUB_BUCKETS) / SUB_BUCKETS) as u32;
    let sub = ((index - SUB_BUCKETS) % SUB_BUCKETS) as u64;
    (SUB_BUCKETS as u64 + sub) << shift
}

/// Largest value of bucket `index`.
fn bucket_high(index: usize) -> u64 {
    if index + 1 >= BUCKETS {
        u64::MAX
    } else {
        bucket_low(index + 1) - 1
    }
}

impl LogHistogram {
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    #[inline]
    pub fn record(&mut self, value_ns: u64) {
        self.counts[bucket_of(value_ns)] += 1;
        self.count += 1;
        self.sum_ns += u128::from(value_ns);
        self.min_ns = self.min_ns.min(value_ns);
        self.max_ns = self.max_ns.max(value_ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum_ns(&self) -> u128 {
        self.sum_ns
    }

    /// Exact mean, `None` when empty.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64)
    }

    pub fn min_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min_ns)
    }

    pub fn max_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max_ns)
    }

    /// The value at or below which `quantile` (0..=1) of the samples lie: the
    /// upper bound of the bucket holding that rank, clipped to the maximum
    /// (so it overstates by less than one bucket width). `None` when empty.
    pub fn quantile_ns(&self, quantile: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let quantile = if quantile.is_nan() {
            0.0
        } else {
            quantile.clamp(0.0, 1.0)
        };
        let rank = ((quantile * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(bucket_high(index).min(self.max_ns).max(self.min_ns));
            }
        }
        Some(self.max_ns)
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LogHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Non-empty buckets as `(low_ns, high_ns, count)`, in increasing order:
    /// enough to draw a CDF or a histogram.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, count)| **count > 0)
            .map(|(index, count)| (bucket_low(index), bucket_high(index), *count))
    }
}

/// JSON shape: `{"count", "mean_ns", "min_ns", "max_ns", "p50_ns", "p90_ns",
/// "p99_ns", "p999_ns", "buckets": [[low_ns, high_ns, count], ...]}`.
impl Serialize for LogHistogram {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("LogHistogram", 9)?;
        state.serialize_field("count", &self.count)?;
        state.serialize_field("mean_ns", &self.mean_ns())?;
        state.serialize_field("min_ns", &self.min_ns())?;
        state.serialize_field("max_ns", &self.max_ns())?;
        state.serialize_field("p50_ns", &self.quantile_ns(0.5))?;
        state.serialize_field("p90_ns", &self.quantile_ns(0.9))?;
        state.serialize_field("p99_ns", &self.quantile_ns(0.99))?;
        state.serialize_field("p999_ns", &self.quantile_ns(0.999))?;
        let buckets: Vec<[u64; 3]> = self
            .buckets()
            .map(|(low, high, count)| [low, high, count])
            .collect();
        state.serialize_field("buckets", &buckets)?;
        state.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut previous_high = None;
        for index in 0..BUCKETS {
            let low = bucket_low(index);
            let high = bucket_high(index);
            assert!(low <= high, "bucket {index}: {low} > {high}");
            if let Some(previous) = previous_high {
                assert_eq!(low, previous + 1, "gap before bucket {index}");
            }
            assert_eq!(bucket_of(low), index);
            assert_eq!(bucket_of(high), index);
            previous_high = Some(high);
        }
        assert_eq!(previous_high, Some(u64::MAX));
    }

    #[test]
    fn relative_width_is_bounded() {
        for index in SUB_BUCKETS..BUCKETS - 1 {
            let low = bucket_low(index) as f64;
            let width = (bucket_high(index) - bucket_low(index) + 1) as f64;
            assert!(width / low <= 1.0 / 16.0 + 1e-12, "bucket {index}");
        }
    }

    #[test]
    fn quantiles_and_mean() {
        let mut histogram = LogHistogram::new();
        assert_eq!(histogram.quantile_ns(0.5), None);
        for value in 1..=1000u64 {
            histogram.record(value * 1000);
        }
        assert_eq!(histogram.count(), 1000);
        assert_eq!(histogram.mean_ns(), Some(500_500.0));
        let median = histogram.quantile_ns(0.5).unwrap();
        assert!(
            (500_000..=500_000 + 500_000 / 16).contains(&median),
            "{median}"
        );
        assert_eq!(histogram.quantile_ns(1.0), Some(1_000_000));
        let lowest = histogram.quantile_ns(0.0).unwrap();
        assert!((1000..=1000 + 1000 / 16).contains(&lowest), "{lowest}");
        let mut other = LogHistogram::new();
        other.record(7);
        histogram.merge(&other);
        assert_eq!(histogram.min_ns(), Some(7));
        assert_eq!(histogram.count(), 1001);
        let total: u64 = histogram.buckets().map(|(_, _, count)| count).sum();
        assert_eq!(total, 1001);
    }
}
