//! Plain workload statistics of a trace (`tierd trace stats`).
//!
//! Definitions: `docs/analysis.md`, section "stats". Memory is O(distinct
//! (volume, 4 KiB block) pairs) plus O(size buckets); time is O(requests +
//! blocks touched).

use serde::Serialize;
use tierd_common::hash::{FastMap, FastSet};
use tierd_common::units::NS_PER_SECOND;
use tierd_trace::{Op, TraceError, TraceReader, VolumeId};

use crate::touch::{is_clamped, touched_units, BLOCK_BYTES};

/// Settings of [`compute`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsOptions {
    /// Period over which `iops_peak` is measured. A zero is treated as 1 ns.
    pub period_ns: u64,
}

impl Default for StatsOptions {
    fn default() -> Self {
        Self {
            period_ns: 60 * NS_PER_SECOND,
        }
    }
}

/// First and last byte addressed by the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LbaSpan {
    pub min_offset_bytes: u64,
    /// First byte past the request that ends last.
    pub max_end_bytes: u64,
}

/// One power-of-two bucket of a histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SizeBucket {
    /// Requests of more than half of this many bytes and at most this many (0: empty requests).
    pub max_bytes: u64,
    pub count: u64,
}

/// Statistics of a whole trace; JSON keys are the field names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    pub format: String,
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub mean_request_bytes: Option<f64>,
    pub zero_length_requests: u64,
    pub duration_s: f64,
    pub unique_blocks_4k: u64,
    pub working_set_bytes: u64,
    pub lba_span: Option<LbaSpan>,
    pub size_histogram: Vec<SizeBucket>,
    pub period_s: f64,
    pub iops_mean: Option<f64>,
    pub iops_peak: Option<f64>,
    pub volumes: Vec<String>,
    /// `volumes.len()`: the text output names only the first few.
    pub volume_count: u64,
    pub skipped_lines: u64,
    pub ignored_lines: u64,
    pub clamped_requests: u64,
    /// Human sentences: a trace with no timestamps.
    pub warnings: Vec<String>,
}

/// Volume names the text output lists before "and N more".
pub const VOLUMES_NAMED: usize = 5;

/// Bucket index of a size: 0 for 0 bytes, else 1 + log2 of the smallest power
/// of two ≥ `bytes` (so bucket `i ≥ 1` holds sizes in `(2^(i-2), 2^(i-1)]`).
fn size_bucket(bytes: u64) -> usize {
    if bytes == 0 {
        0
    } else {
        // Smallest power of two ≥ bytes is 2^ceil(log2 bytes); 2^64 does not fit
        // in u64, so compute the exponent directly.
        let exponent = 64 - (bytes - 1).leading_zeros() as usize;
        exponent + 1
    }
}

fn bucket_max_bytes(index: usize) -> u64 {
    match index {
        0 => 0,
        // Exponent 64 cannot be represented; saturate.
        _ => 1u64.checked_shl((index - 1) as u32).unwrap_or(u64::MAX),
    }
}

/// Distinct 4 KiB blocks per volume.
#[derive(Default)]
struct BlockSets {
    sets: FastMap<VolumeId, FastSet<u64>>,
}

impl BlockSets {
    fn insert_range(&mut self, volume: VolumeId, first: u64, last: u64) {
        let set = self.sets.entry(volume).or_default();
        for block in first..=last {
            set.insert(block);
        }
    }

    fn len(&self) -> u64 {
        self.sets.values().map(|set| set.len() as u64).sum()
    }
}

/// Reads `reader` to the end and returns its statistics.
///
/// Block-only formats (`Format::is_block_only`) have no time: `duration_s` is
/// 0 and both iops values are `None`.
pub fn compute(reader: &mut dyn TraceReader, options: &StatsOptions) -> Result<Stats, TraceError> {
    let period_ns = options.period_ns.max(1);
    let timed = !reader.format().is_block_only();

    let mut requests = 0u64;
    let mut reads = 0u64;
    let mut writes = 0u64;
    let mut bytes_read = 0u64;
    let mut bytes_written = 0u64;
    let mut zero_length_requests = 0u64;
    let mut clamped_requests = 0u64;
    let mut min_time_ns = u64::MAX;
    let mut max_time_ns = 0u64;
    let mut lba_span: Option<LbaSpan> = None;
    let mut histogram = [0u64; 66];
    let mut blocks = BlockSets::default();

    // Peak iops: requests per period, periods counted from the first request.
    let mut origin_ns: Option<u64> = None;
    let mut current_period = 0u64;
    let mut current_count = 0u64;
    let mut peak_count = 0u64;

    while let Some(request) = reader.next_request()? {
        requests += 1;
        match request.op {
            Op::Read => {
                reads += 1;
                bytes_read = bytes_read.saturating_add(request.length_bytes);
            }
            Op::Write => {
                writes += 1;
                bytes_written = bytes_written.saturating_add(request.length_bytes);
            }
        }
        if request.length_bytes == 0 {
            zero_length_requests += 1;
        }
        if is_clamped(&request) {
            clamped_requests += 1;
        }
        histogram[size_bucket(request.length_bytes)] += 1;
        let end_bytes = request.end_bytes();
        lba_span = Some(match lba_span {
            None => LbaSpan {
                min_offset_bytes: request.offset_bytes,
                max_end_bytes: end_bytes,
            },
            Some(span) => LbaSpan {
                min_offset_bytes: span.min_offset_bytes.min(request.offset_bytes),
                max_end_bytes: span.max_end_bytes.max(end_bytes),
            },
        });
        if let Some((first, last)) = touched_units(&request, BLOCK_BYTES) {
            blocks.insert_range(request.volume, first, last);
        }

        if timed {
            min_time_ns = min_time_ns.min(request.time_ns);
            max_time_ns = max_time_ns.max(request.time_ns);
            let origin = *origin_ns.get_or_insert(request.time_ns);
            // Unsorted input: a request from an earlier period counts in the current one.
            let period = (request.time_ns.saturating_sub(origin) / period_ns).max(current_period);
            if period != current_period {
                peak_count = peak_count.max(current_count);
                current_period = period;
                current_count = 0;
            }
            current_count += 1;
        }
    }
    peak_count = peak_count.max(current_count);

    let duration_s = if timed && requests > 0 {
        (max_time_ns - min_time_ns) as f64 / NS_PER_SECOND as f64
    } else {
        0.0
    };
    let period_s = period_ns as f64 / NS_PER_SECOND as f64;
    let iops_mean = (duration_s > 0.0).then(|| requests as f64 / duration_s);
    // A period cut short by the end of the trace holds fewer requests than
    // a whole one at the same rate, so the busiest period's count over a
    // whole period can fall below the mean (always, on a trace shorter than
    // one period): the peak is never reported below the mean.
    let iops_peak = (timed && requests > 0).then(|| {
        let peak = peak_count as f64 / period_s;
        iops_mean.map_or(peak, |mean| peak.max(mean))
    });
    let mut warnings = Vec::new();
    if requests > 1 && (!timed || min_time_ns == max_time_ns) {
        warnings.push(format!(
            "the trace has no timestamps ({}): `tierd sim` and `tierd replay` would issue all {requests} requests at time 0, at once; replay it closed loop (`tierd sim --queue-depth N`) or convert it from a format with times",
            if timed {
                "every request has the same time"
            } else {
                "the format records none"
            }
        ));
    }

    let size_histogram = match (
        histogram.iter().position(|count| *count > 0),
        histogram.iter().rposition(|count| *count > 0),
    ) {
        (Some(first), Some(last)) => (first..=last)
            .map(|index| SizeBucket {
                max_bytes: bucket_max_bytes(index),
                count: histogram[index],
            })
            .collect(),
        _ => Vec::new(),
    };
    let unique_blocks_4k = blocks.len();

    Ok(Stats {
        format: reader.format().name().to_string(),
        requests,
        reads,
        writes,
        bytes_read,
        bytes_written,
        mean_request_bytes: (requests > 0)
            .then(|| (bytes_read as f64 + bytes_written as f64) / requests as f64),
        zero_length_requests,
        duration_s,
        unique_blocks_4k,
        working_set_bytes: unique_blocks_4k.saturating_mul(BLOCK_BYTES),
        lba_span,
        size_histogram,
        period_s,
        iops_mean,
        iops_peak,
        volumes: reader.volumes().names().to_vec(),
        volume_count: reader.volumes().names().len() as u64,
        skipped_lines: reader.skipped_lines(),
        ignored_lines: reader.ignored_lines(),
        clamped_requests,
        warnings,
    })
}

/// The statistics as human-readable text (what `tierd trace stats` prints).
pub fn render_text(stats: &Stats) -> String {
    use std::fmt::Write;
    use tierd_common::units::Bytes;

    let mut out = String::new();
    let share = |part: u64| {
        if stats.requests > 0 {
            format!("{:.1}%", part as f64 * 100.0 / stats.requests as f64)
        } else {
            "-".to_string()
        }
    };
    let optional =
        |value: Option<f64>| value.map_or_else(|| "-".to_string(), |value| format!("{value:.1}"));
    // Writing to a String cannot fail; the results are ignored.
    let _ = writeln!(
        out,
        "requests        {} (reads {} = {}, writes {} = {}; {} of zero length)",
        stats.requests,
        stats.reads,
        share(stats.reads),
        stats.writes,
        share(stats.writes),
        stats.zero_length_requests
    );
    let _ = writeln!(
        out,
        "bytes           read {}, written {}; mean request {} bytes",
        Bytes(stats.bytes_read),
        Bytes(stats.bytes_written),
        optional(stats.mean_request_bytes)
    );
    let _ = writeln!(
        out,
        "time            {:.1} s; iops mean {}, peak {} (per {} s period{})",
        stats.duration_s,
        optional(stats.iops_mean),
        optional(stats.iops_peak),
        stats.period_s,
        if stats.iops_mean.is_some() && stats.duration_s < stats.period_s {
            format!(
                "; the trace is shorter than one {} s period, so the peak is the mean",
                stats.period_s
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "working set     {} distinct 4 KiB blocks = {}",
        stats.unique_blocks_4k,
        Bytes(stats.working_set_bytes)
    );
    match stats.lba_span {
        Some(span) => {
            let _ = writeln!(
                out,
                "address span    bytes {} .. {} ({})",
                span.min_offset_bytes,
                span.max_end_bytes,
                Bytes(span.max_end_bytes.saturating_sub(span.min_offset_bytes))
            );
        }
        None => {
            let _ = writeln!(out, "address span    -");
        }
    }
    let named = stats.volumes.len().min(VOLUMES_NAMED);
    let more = stats.volumes.len() - named;
    let _ = writeln!(
        out,
        "volumes         {}{}{}{}",
        stats.volume_count,
        if named > 0 { ": " } else { "" },
        stats.volumes[..named].join(", "),
        if more > 0 {
            format!(" and {more} more (--json lists them all)")
        } else {
            String::new()
        }
    );
    if stats.skipped_lines > 0 || stats.ignored_lines > 0 || stats.clamped_requests > 0 {
        let _ = writeln!(
            out,
            "lines           {} skipped (bad), {} ignored (headers, comments, other events); {} requests over 1 GiB",
            stats.skipped_lines, stats.ignored_lines, stats.clamped_requests
        );
    }
    if !stats.size_histogram.is_empty() {
        let _ = writeln!(out, "request sizes (up to, count, share):");
        for bucket in &stats.size_histogram {
            let _ = writeln!(
                out,
                "  {:>12} {:>12} {:>7}",
                Bytes(bucket.max_bytes).to_string(),
                bucket.count,
                share(bucket.count)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_buckets_are_powers_of_two() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(bucket_max_bytes(size_bucket(1)), 1);
        assert_eq!(bucket_max_bytes(size_bucket(2)), 2);
        assert_eq!(bucket_max_bytes(size_bucket(3)), 4);
        assert_eq!(bucket_max_bytes(size_bucket(4096)), 4096);
        assert_eq!(bucket_max_bytes(size_bucket(4097)), 8192);
        assert_eq!(size_bucket(u64::MAX), 65);
        assert_eq!(bucket_max_bytes(65), u64::MAX);
    }

    #[test]
    fn text_names_every_figure() {
        let stats = Stats {
            format: "msr".into(),
            requests: 4,
            reads: 3,
            writes: 1,
            bytes_read: 3 * 4096,
            bytes_written: 512,
            mean_request_bytes: Some(3200.0),
            zero_length_requests: 0,
            duration_s: 2.0,
            unique_blocks_4k: 3,
            working_set_bytes: 3 * 4096,
            lba_span: Some(LbaSpan {
                min_offset_bytes: 0,
                max_end_bytes: 12288,
            }),
            size_histogram: vec![
                SizeBucket {
                    max_bytes: 512,
                    count: 1,
                },
                SizeBucket {
                    max_bytes: 4096,
                    count: 3,
                },
            ],
            period_s: 60.0,
            iops_mean: Some(2.0),
            iops_peak: None,
            volumes: vec!["hm_0".into()],
            volume_count: 1,
            skipped_lines: 0,
            ignored_lines: 0,
            clamped_requests: 0,
            warnings: Vec::new(),
        };
        let text = render_text(&stats);
        assert!(text.contains("reads 3 = 75.0%, writes 1 = 25.0%"), "{text}");
        assert!(text.contains("iops mean 2.0, peak -"), "{text}");
        assert!(text.contains("4.00 KiB            3   75.0%"), "{text}");
        assert!(text.contains("volumes         1: hm_0\n"), "{text}");
    }
}
