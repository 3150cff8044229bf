//! What a probe recorded and what it says: every IO with its time and
//! latency, per phase, and the figures of each combination (docs/probe.md,
//! "Definitions").
//!
//! - **slow read**: a read that took more than [`SLOW_READ_NS`] (100 ms,
//!   paper 001's threshold);
//! - `slow_fraction_100ms`, `p50_ms`, `p99_ms`: over the paper's reads of
//!   the combination (the first `read_bytes` / 1 MiB reads), not over the
//!   reads that follow a burst to its end;
//! - **burst**: `tierd_device::model::smr::burst`, the one definition the
//!   model's validation tests use too: from the issue of the first slow read
//!   to the issue of the last slow read of the whole phase (followed reads
//!   included), in seconds since the write load ended (since the reads
//!   began without one); `null` when no read was slow. `burst_ended` says whether at least
//!   [`QUIET_READS`] reads after the last slow one were fast, i.e. whether
//!   the probe saw the burst's end.

use serde::{Deserialize, Serialize};
use tierd_device::model::smr;

use super::workload::Combination;

/// Paper 001's "high latency": reads over 100 ms (the model's
/// [`smr::SLOW_READ_MS`]).
pub const SLOW_READ_NS: u64 = (smr::SLOW_READ_MS * 1e6) as u64;
/// Fast reads in a row after which a burst counts as over.
pub const QUIET_READS: usize = 64;

/// One IO: `(write, offset_bytes, length_bytes, start_ns, latency_ns)`,
/// `write` 1 or 0, `start_ns` since its phase began (a JSON array of five).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record(pub u8, pub u64, pub u64, pub u64, pub u64);

impl Record {
    pub fn is_write(&self) -> bool {
        self.0 == 1
    }
    pub fn offset_bytes(&self) -> u64 {
        self.1
    }
    pub fn length_bytes(&self) -> u64 {
        self.2
    }
    pub fn start_ns(&self) -> u64 {
        self.3
    }
    pub fn latency_ns(&self) -> u64 {
        self.4
    }
    pub fn end_ns(&self) -> u64 {
        self.3 + self.4
    }
}

/// Everything one phase did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// `rw-rr-1073741824`, or a fit phase's name (`fit-fill`, ...).
    pub name: String,
    /// The benchmark combination (none for fit phases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combination: Option<Combination>,
    /// When the last write completed, since the phase began (0: no writes).
    pub writes_end_ns: u64,
    /// The first this many reads are the paper's; later ones followed the burst.
    pub paper_reads: u64,
    /// Every IO in issue order.
    pub records: Vec<Record>,
}

/// The figures of one combination (the `--json` interface; keys are public).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CombinationSummary {
    pub write: String,
    pub read: String,
    pub written_bytes: u64,
    /// The paper's reads (1 MiB each).
    pub reads: u64,
    pub slow_fraction_100ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// First slow read's issue, seconds since the writes ended (null: none).
    pub burst_start_s: Option<f64>,
    /// Last slow read's issue minus the burst start (null: none).
    pub burst_length_s: Option<f64>,
    pub burst_ended: bool,
    pub slow_reads: u64,
    pub mean_ms: f64,
    pub max_ms: f64,
    /// Reads after the paper's, following the burst to its end.
    pub follow_reads: u64,
    pub writes: u64,
    pub write_seconds: f64,
}

/// The `p`-quantile (0..=1) of sorted values, nearest rank; 0 when empty.
pub fn quantile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The figures of a combination phase (see the module docs).
pub fn summarize(phase: &Phase) -> Option<CombinationSummary> {
    let combination = phase.combination?;
    let reads: Vec<&Record> = phase.records.iter().filter(|r| !r.is_write()).collect();
    let writes = phase.records.len() - reads.len();
    let paper = &reads[..(phase.paper_reads as usize).min(reads.len())];
    let mut latencies: Vec<u64> = paper.iter().map(|r| r.latency_ns()).collect();
    latencies.sort_unstable();
    let slow_paper = latencies.iter().filter(|&&l| l > SLOW_READ_NS).count();
    let since_writes = |ns: u64| ns.saturating_sub(phase.writes_end_ns) as f64 / 1e9;
    let slow: Vec<usize> = reads
        .iter()
        .enumerate()
        .filter(|(_, r)| r.latency_ns() > SLOW_READ_NS)
        .map(|(index, _)| index)
        .collect();
    let timed: Vec<(f64, f64)> = reads
        .iter()
        .map(|r| (since_writes(r.start_ns()), ms(r.latency_ns())))
        .collect();
    let burst = smr::burst(&timed);
    let burst_ended = slow
        .last()
        .is_none_or(|&last| reads.len() - 1 - last >= QUIET_READS);
    let count = latencies.len().max(1) as f64;
    Some(CombinationSummary {
        write: combination.write.name().to_string(),
        read: combination.read.name().to_string(),
        written_bytes: combination.written_bytes,
        reads: paper.len() as u64,
        slow_fraction_100ms: slow_paper as f64 / count,
        p50_ms: ms(quantile(&latencies, 0.5)),
        p99_ms: ms(quantile(&latencies, 0.99)),
        burst_start_s: burst.map(|(start_s, _)| start_s),
        burst_length_s: burst.map(|(_, length_s)| length_s),
        burst_ended,
        slow_reads: slow.len() as u64,
        mean_ms: latencies.iter().sum::<u64>() as f64 / count / 1e6,
        max_ms: ms(latencies.last().copied().unwrap_or(0)),
        follow_reads: (reads.len() - paper.len()) as u64,
        writes: writes as u64,
        write_seconds: phase.writes_end_ns as f64 / 1e9,
    })
}

#[cfg(test)]
mod tests {
    use super::super::workload::{ReadKind, WriteKind};
    use super::*;

    fn read(start_ms: u64, latency_ms: u64) -> Record {
        Record(0, 0, 1 << 20, start_ms * 1_000_000, latency_ms * 1_000_000)
    }

    #[test]
    fn burst_runs_from_the_first_slow_read_to_the_end_of_the_last_since_the_writes_ended() {
        let mut records = vec![Record(1, 0, 4096, 0, 1_000_000_000)];
        // Writes end at 1 s. Reads every 20 ms from 1 s; reads 10 and 20 slow.
        let mut time_ms = 1000;
        for index in 0..100 {
            let latency_ms = if index == 10 || index == 20 { 500 } else { 20 };
            records.push(read(time_ms, latency_ms));
            time_ms += latency_ms;
        }
        let phase = Phase {
            name: "rw-rr-1".to_string(),
            combination: Some(Combination {
                write: WriteKind::Rw,
                read: ReadKind::Rr,
                written_bytes: 1,
            }),
            writes_end_ns: 1_000_000_000,
            paper_reads: 50,
            records,
        };
        let summary = summarize(&phase).expect("a combination");
        assert_eq!(summary.reads, 50);
        assert_eq!(summary.follow_reads, 50);
        assert!((summary.slow_fraction_100ms - 2.0 / 50.0).abs() < 1e-12);
        // Read 10 issued at 10 × 20 ms = 0.2 s after the writes ended; read
        // 20 issued at 0.2 + 0.5 + 9 × 0.02 = 0.88 s.
        assert!((summary.burst_start_s.unwrap() - 0.2).abs() < 1e-9);
        assert!((summary.burst_length_s.unwrap() - 0.68).abs() < 1e-9);
        assert!(
            summary.burst_ended,
            "79 fast reads follow the last slow one"
        );
        assert_eq!(summary.p50_ms, 20.0);
        assert_eq!(summary.p99_ms, 500.0);
        assert_eq!(summary.writes, 1);
    }

    #[test]
    fn no_slow_read_means_no_burst() {
        let phase = Phase {
            name: "none-sr-0".to_string(),
            combination: Some(Combination {
                write: WriteKind::None,
                read: ReadKind::Sr,
                written_bytes: 0,
            }),
            writes_end_ns: 0,
            paper_reads: 3,
            records: vec![read(0, 5), read(5, 6), read(11, 7)],
        };
        let summary = summarize(&phase).expect("a combination");
        assert_eq!(summary.slow_fraction_100ms, 0.0);
        assert_eq!(summary.burst_start_s, None);
        assert_eq!(summary.burst_length_s, None);
        assert_eq!(summary.p50_ms, 6.0);
        assert_eq!(quantile(&[], 0.5), 0);
    }
}
