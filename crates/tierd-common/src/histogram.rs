//! The one latency histogram of tierd: log-linear buckets over `u64`
//! nanoseconds, used for the simulator's and `tierd replay`'s response times
//! and the live engine's per-device latencies.
//!
//! Buckets are HdrHistogram-style: every value below [`SUB_BUCKETS`] (32 ns)
//! has a bucket of its own; above, each power of two `[2^e, 2^(e+1))` is split
//! into 32 equal sub-buckets of width `2^(e-5)`. A bucket is therefore at most
//! 1/32 as wide as its smallest value, across the whole `u64` range, in 1,920
//! buckets (15 KiB).
//!
//! **Accuracy bound.** [`Histogram::quantile_ns`] returns the upper bound of
//! the bucket holding the sample of the requested rank, clipped to the exact
//! minimum and maximum. If `x` is the exact quantile (the nearest-rank order
//! statistic, the same rank [`Histogram::quantile_ns`] uses) and `r` the
//! reported value, then `x <= r < x * (1 + 1/32)`: a percentile is never
//! low and at most 3.125 % high ([`RELATIVE_ERROR_BOUND`]); below 32 ns it is
//! exact. `tests::quantiles_are_within_the_bound_of_the_exact_ones` checks
//! this against sorted samples on random and adversarial data. Count, sum,
//! mean, minimum and maximum are exact.
//!
//! Sans-IO: no clock, no allocation after [`Histogram::new`]; recording is a
//! few integer instructions. [`AtomicHistogram`] is the same layout with
//! atomic counters, for recording from many threads (the engine's devices);
//! it snapshots into a [`Histogram`].
//!
//! Serde shape (JSON): `{"count", "sum_ns", "mean_ns", "min_ns", "max_ns",
//! "p50_ns", "p90_ns", "p99_ns", "p999_ns", "buckets": [[low_ns, high_ns,
//! count], ...]}` with only the non-empty buckets, in increasing order. The
//! mean and percentiles are derived, for readers; deserializing rebuilds the
//! histogram from `sum_ns`, `min_ns`, `max_ns` and the buckets (checking that
//! they agree with `count`) and ignores them.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::Error as _;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const SUB_BUCKET_BITS: u32 = 5;
/// Linear sub-buckets per power of two (and the values with a bucket each).
pub const SUB_BUCKETS: usize = 1 << SUB_BUCKET_BITS;
/// Buckets needed to cover `u64`: 32 exact ones plus 32 per remaining octave.
const BUCKETS: usize = SUB_BUCKETS + (64 - SUB_BUCKET_BITS as usize) * SUB_BUCKETS;
/// Largest relative overstatement of a reported quantile (exclusive): a
/// bucket is at most `1 / SUB_BUCKETS` as wide as its lowest value.
pub const RELATIVE_ERROR_BOUND: f64 = 1.0 / SUB_BUCKETS as f64;

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

/// The 1-based nearest rank of `quantile` among `count` samples:
/// `ceil(quantile * count)`, at least 1. NaN counts as 0.
fn rank_of(quantile: f64, count: u64) -> u64 {
    let quantile = if quantile.is_nan() {
        0.0
    } else {
        quantile.clamp(0.0, 1.0)
    };
    ((quantile * count as f64).ceil() as u64).clamp(1, count.max(1))
}

/// One non-empty bucket: `count` samples in `[low_ns, high_ns]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub low_ns: u64,
    pub high_ns: u64,
    pub count: u64,
}

/// A log-linear histogram of nanosecond durations (see the module docs for
/// the layout and the accuracy bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
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
        self.record_n(value_ns, 1);
    }

    /// Records `value_ns` `times` times.
    #[inline]
    pub fn record_n(&mut self, value_ns: u64, times: u64) {
        if times == 0 {
            return;
        }
        self.counts[bucket_of(value_ns)] += times;
        self.count += times;
        self.sum_ns += u128::from(value_ns) * u128::from(times);
        self.min_ns = self.min_ns.min(value_ns);
        self.max_ns = self.max_ns.max(value_ns);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Exact sum of the samples.
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

    /// The value at or below which `quantile` (0..=1; 0.99 for p99) of the
    /// samples lie: the upper bound of the bucket holding the sample of rank
    /// `ceil(quantile * count)`, clipped to the exact minimum and maximum
    /// (so the first and last ranks are exact). Never below the exact value, less than 3.125 % above it (module
    /// docs). `None` when empty.
    pub fn quantile_ns(&self, quantile: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = rank_of(quantile, self.count);
        if rank == 1 {
            return Some(self.min_ns);
        }
        let mut seen = 0u64;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(bucket_high(index).min(self.max_ns).max(self.min_ns));
            }
        }
        Some(self.max_ns)
    }

    /// How many samples are below `bound_ns`: exact when `bound_ns` is a
    /// bucket boundary (any value up to 64, and every power of two), else it
    /// leaves out the samples of `bound_ns`'s own bucket.
    pub fn count_below_ns(&self, bound_ns: u64) -> u64 {
        self.counts[..bucket_of(bound_ns)].iter().sum()
    }

    /// Non-empty buckets in increasing order: enough to draw a CDF, or to
    /// re-bucket (e.g. into power-of-two Prometheus buckets, exactly).
    pub fn buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, count)| **count > 0)
            .map(|(index, count)| Bucket {
                low_ns: bucket_low(index),
                high_ns: bucket_high(index),
                count: *count,
            })
    }
}

impl Serialize for Histogram {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("Histogram", 10)?;
        state.serialize_field("count", &self.count)?;
        state.serialize_field("sum_ns", &self.sum_ns)?;
        state.serialize_field("mean_ns", &self.mean_ns())?;
        state.serialize_field("min_ns", &self.min_ns())?;
        state.serialize_field("max_ns", &self.max_ns())?;
        state.serialize_field("p50_ns", &self.quantile_ns(0.5))?;
        state.serialize_field("p90_ns", &self.quantile_ns(0.9))?;
        state.serialize_field("p99_ns", &self.quantile_ns(0.99))?;
        state.serialize_field("p999_ns", &self.quantile_ns(0.999))?;
        let buckets: Vec<[u64; 3]> = self
            .buckets()
            .map(|bucket| [bucket.low_ns, bucket.high_ns, bucket.count])
            .collect();
        state.serialize_field("buckets", &buckets)?;
        state.end()
    }
}

/// The fields deserialization reads; the derived ones are ignored.
#[derive(Deserialize)]
struct HistogramWire {
    count: u64,
    sum_ns: u128,
    min_ns: Option<u64>,
    max_ns: Option<u64>,
    buckets: Vec<[u64; 3]>,
}

impl<'de> Deserialize<'de> for Histogram {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = HistogramWire::deserialize(deserializer)?;
        let mut histogram = Histogram::new();
        let mut previous: Option<usize> = None;
        for [low_ns, high_ns, count] in wire.buckets {
            let index = bucket_of(low_ns);
            if bucket_low(index) != low_ns || bucket_high(index) != high_ns {
                return Err(D::Error::custom(format!(
                    "histogram bucket [{low_ns}, {high_ns}] is not one of the log-linear buckets \
                     (32 sub-buckets per power of two)"
                )));
            }
            if previous.is_some_and(|previous| previous >= index) {
                return Err(D::Error::custom(format!(
                    "histogram bucket [{low_ns}, {high_ns}] is out of order or repeated"
                )));
            }
            previous = Some(index);
            histogram.counts[index] = count;
            histogram.count = histogram.count.checked_add(count).ok_or_else(|| {
                D::Error::custom("histogram bucket counts overflow u64".to_string())
            })?;
        }
        if histogram.count != wire.count {
            return Err(D::Error::custom(format!(
                "histogram count {} differs from its buckets' total {}",
                wire.count, histogram.count
            )));
        }
        if histogram.count > 0 {
            let (Some(min_ns), Some(max_ns)) = (wire.min_ns, wire.max_ns) else {
                return Err(D::Error::custom(
                    "a non-empty histogram needs min_ns and max_ns".to_string(),
                ));
            };
            let first = histogram.counts.iter().position(|count| *count > 0);
            let last = histogram.counts.iter().rposition(|count| *count > 0);
            if first != Some(bucket_of(min_ns)) || last != Some(bucket_of(max_ns)) {
                return Err(D::Error::custom(format!(
                    "histogram min_ns {min_ns} / max_ns {max_ns} are not in its first / last bucket"
                )));
            }
            histogram.min_ns = min_ns;
            histogram.max_ns = max_ns;
            histogram.sum_ns = wire.sum_ns;
        } else if wire.sum_ns != 0 {
            return Err(D::Error::custom(
                "an empty histogram has sum_ns 0".to_string(),
            ));
        }
        Ok(histogram)
    }
}

/// [`Histogram`]'s layout with atomic counters: many threads record through
/// `&self` (relaxed atomic adds), [`AtomicHistogram::snapshot`] reads it.
///
/// A snapshot taken while others record is a histogram of some of the
/// samples in flight: its count is the sum of the buckets read, and its
/// minimum and maximum are clipped into its first and last buckets, so the
/// snapshot is self-consistent (a quantile stays within the bound of the
/// buckets read). The sum wraps after 2^64 ns (584 years) of latency.
pub struct AtomicHistogram {
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
    min_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicHistogram {
    pub fn new() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
            min_ns: AtomicU64::new(u64::MAX),
            max_ns: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn record(&self, value_ns: u64) {
        self.counts[bucket_of(value_ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(value_ns, Ordering::Relaxed);
        self.min_ns.fetch_min(value_ns, Ordering::Relaxed);
        self.max_ns.fetch_max(value_ns, Ordering::Relaxed);
    }

    /// The samples recorded so far (see the type's docs for concurrency).
    pub fn snapshot(&self) -> Histogram {
        let mut histogram = Histogram::new();
        for (mine, theirs) in histogram.counts.iter_mut().zip(self.counts.iter()) {
            *mine = theirs.load(Ordering::Relaxed);
            histogram.count += *mine;
        }
        let first = histogram.counts.iter().position(|count| *count > 0);
        let last = histogram.counts.iter().rposition(|count| *count > 0);
        if let (Some(first), Some(last)) = (first, last) {
            histogram.sum_ns = u128::from(self.sum_ns.load(Ordering::Relaxed));
            histogram.min_ns = self
                .min_ns
                .load(Ordering::Relaxed)
                .clamp(bucket_low(first), bucket_high(first));
            histogram.max_ns = self
                .max_ns
                .load(Ordering::Relaxed)
                .clamp(bucket_low(last), bucket_high(last));
        }
        histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Rng, SeededRng};

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
        for exponent in 0..64 {
            let power = 1u64 << exponent;
            assert_eq!(bucket_low(bucket_of(power)), power, "2^{exponent}");
        }
    }

    #[test]
    fn relative_width_is_bounded() {
        for index in SUB_BUCKETS..BUCKETS {
            let low = bucket_low(index) as f64;
            let width = (bucket_high(index) - bucket_low(index)) as f64 + 1.0;
            assert!(width / low <= RELATIVE_ERROR_BOUND, "bucket {index}");
        }
    }

    /// The exact nearest-rank quantile of sorted samples.
    fn exact_quantile(sorted: &[u64], quantile: f64) -> u64 {
        sorted[(rank_of(quantile, sorted.len() as u64) - 1) as usize]
    }

    /// Every quantile of `samples` is within the documented bound.
    fn check_bound(name: &str, samples: &[u64], rng: &mut SeededRng) {
        let mut histogram = Histogram::new();
        for &value in samples {
            histogram.record(value);
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let mut quantiles = vec![
            0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0,
        ];
        quantiles.extend((0..200).map(|_| rng.next_f64()));
        // Every rank, for small inputs.
        if sorted.len() <= 300 {
            let count = sorted.len() as f64;
            quantiles.extend((1..=sorted.len()).map(|rank| rank as f64 / count));
        }
        for quantile in quantiles {
            let exact = exact_quantile(&sorted, quantile);
            let reported = histogram.quantile_ns(quantile).unwrap();
            assert!(
                reported >= exact,
                "{name}: q={quantile}: reported {reported} below exact {exact}"
            );
            // reported - exact < exact / 32, in integers (so exact below 32 ns).
            assert!(
                reported == exact
                    || u128::from(reported - exact) * (SUB_BUCKETS as u128) < u128::from(exact),
                "{name}: q={quantile}: reported {reported} vs exact {exact}: \
                 {:.3} % high, bound {:.3} %",
                (reported - exact) as f64 / exact.max(1) as f64 * 100.0,
                RELATIVE_ERROR_BOUND * 100.0
            );
        }
        assert_eq!(histogram.count(), sorted.len() as u64);
        assert_eq!(histogram.min_ns(), sorted.first().copied());
        assert_eq!(histogram.max_ns(), sorted.last().copied());
        let sum: u128 = sorted.iter().map(|value| u128::from(*value)).sum();
        assert_eq!(histogram.sum_ns(), sum);
    }

    #[test]
    fn quantiles_are_within_the_bound_of_the_exact_ones() {
        let mut rng = SeededRng::new(12);
        for case in 0..300u64 {
            let count = match case % 4 {
                0 => 1 + rng.below(10),
                1 => 1 + rng.below(300),
                _ => 1 + rng.below(20_000),
            };
            let distribution = case % 8;
            let samples: Vec<u64> = (0..count)
                .map(|_| match distribution {
                    // Uniform over a random magnitude.
                    0 => {
                        let bits = 1 + rng.below(40);
                        rng.below(1 << bits)
                    }
                    // Log-uniform over the whole range.
                    1 => {
                        let shift = rng.below(64);
                        rng.next_u64() >> shift
                    }
                    // Latency-like: log-normal around 100 µs.
                    2 => rng.log_normal(100_000.0, 1.5) as u64,
                    // Heavy tail.
                    3 => rng.pareto(1_000.0, 1.1).min(1e18) as u64,
                    // Bucket edges: the last value of a bucket and the first
                    // of the next, where rounding mistakes would show.
                    4 => {
                        let index = rng.below(BUCKETS as u64 - 1) as usize;
                        if rng.chance(0.5) {
                            bucket_high(index)
                        } else {
                            bucket_low(index + 1)
                        }
                    }
                    // Powers of two and their neighbours (the old 2x buckets' worst case).
                    5 => {
                        let power = 1u64 << rng.below(64);
                        match rng.below(3) {
                            0 => power - 1,
                            1 => power,
                            _ => power.saturating_add(1),
                        }
                    }
                    // A few distinct values, many repeats.
                    6 => [0, 1, 31, 32, 33, 1_000_000, u64::MAX][rng.below(7) as usize],
                    // Small values, exact buckets.
                    _ => rng.below(100),
                })
                .collect();
            check_bound(&format!("case {case}"), &samples, &mut rng);
        }
    }

    #[test]
    fn quantiles_mean_and_merge() {
        let mut histogram = Histogram::new();
        assert_eq!(histogram.quantile_ns(0.5), None);
        assert_eq!(histogram.mean_ns(), None);
        for value in 1..=1000u64 {
            histogram.record(value * 1000);
        }
        assert_eq!(histogram.count(), 1000);
        assert_eq!(histogram.mean_ns(), Some(500_500.0));
        assert_eq!(histogram.quantile_ns(1.0), Some(1_000_000));
        assert_eq!(histogram.quantile_ns(0.0), Some(1000));
        let median = histogram.quantile_ns(0.5).unwrap();
        assert!(
            (500_000..500_000 + 500_000 / 32).contains(&median),
            "{median}"
        );

        // Merging the halves gives the histogram of the whole.
        let mut low = Histogram::new();
        let mut high = Histogram::new();
        for value in 1..=1000u64 {
            if value % 3 == 0 {
                high.record(value * 1000);
            } else {
                low.record(value * 1000);
            }
        }
        low.merge(&high);
        assert_eq!(low, histogram);

        let mut repeated = Histogram::new();
        repeated.record_n(7, 3);
        repeated.record_n(9, 0);
        histogram.merge(&repeated);
        assert_eq!(histogram.min_ns(), Some(7));
        assert_eq!(histogram.count(), 1003);
        let total: u64 = histogram.buckets().map(|bucket| bucket.count).sum();
        assert_eq!(total, 1003);
    }

    #[test]
    fn count_below_is_exact_at_powers_of_two() {
        let mut histogram = Histogram::new();
        let mut rng = SeededRng::new(3);
        let samples: Vec<u64> = (0..5_000)
            .map(|_| {
                let shift = rng.below(64);
                rng.next_u64() >> shift
            })
            .collect();
        for &value in &samples {
            histogram.record(value);
        }
        for exponent in 0..64 {
            let bound = 1u64 << exponent;
            let exact = samples.iter().filter(|value| **value < bound).count() as u64;
            assert_eq!(histogram.count_below_ns(bound), exact, "2^{exponent}");
        }
    }

    #[test]
    fn serde_round_trips_and_rejects_inconsistent_input() {
        let mut histogram = Histogram::new();
        for value in [0, 5, 31, 32, 1_000, 1_000, 123_456_789, u64::MAX] {
            histogram.record(value);
        }
        let json = serde_json::to_string(&histogram).unwrap();
        assert!(json.contains("\"p99_ns\""), "{json}");
        let back: Histogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back, histogram);

        let empty: Histogram =
            serde_json::from_str(&serde_json::to_string(&Histogram::new()).unwrap()).unwrap();
        assert_eq!(empty, Histogram::new());

        let bad_bucket = r#"{"count":1,"sum_ns":40,"min_ns":40,"max_ns":40,"buckets":[[40,41,1]]}"#;
        let error = serde_json::from_str::<Histogram>(bad_bucket).unwrap_err();
        assert!(error.to_string().contains("not one of"), "{error}");
        let bad_count = r#"{"count":2,"sum_ns":40,"min_ns":40,"max_ns":40,"buckets":[[40,40,1]]}"#;
        let error = serde_json::from_str::<Histogram>(bad_count).unwrap_err();
        assert!(error.to_string().contains("differs"), "{error}");
    }

    #[test]
    fn atomic_snapshot_equals_the_plain_histogram() {
        let atomic = AtomicHistogram::new();
        let mut plain = Histogram::new();
        assert_eq!(atomic.snapshot(), plain);
        let mut rng = SeededRng::new(5);
        for _ in 0..10_000 {
            let value = rng.log_normal(50_000.0, 2.0) as u64;
            atomic.record(value);
            plain.record(value);
        }
        assert_eq!(atomic.snapshot(), plain);
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let atomic = &atomic;
                scope.spawn(move || {
                    for value in 0..1_000 {
                        atomic.record(value * (thread + 1));
                    }
                });
            }
        });
        assert_eq!(atomic.snapshot().count(), 14_000);
    }
}
