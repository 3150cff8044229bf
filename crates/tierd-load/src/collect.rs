//! Result collection: every completion, matched with what its issuer saw,
//! becomes the simulator's figures (response histograms from issue and from
//! the due time, per-period series, errors). Sans-IO: the driver supplies
//! the times.
//!
//! The issuer files a request after it went on the wire and the receiver
//! files its completion when the reply is read; either may come first (a
//! fast server can answer before the issuer has filed the request), so a
//! [`Matcher`] holds whichever half arrived first.

use tierd_common::hash::FastMap;
use tierd_common::histogram::Histogram;
use tierd_common::units::NS_PER_SECOND;
use tierd_trace::Op;

/// Error messages kept for the report.
pub const ERROR_SAMPLES: usize = 5;
/// The first hour of a replay (`avg_iops_first_hour`).
pub const HOUR_NS: u64 = 3600 * NS_PER_SECOND;

/// A request on the wire, as its issuer saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issued {
    pub due_ns: u64,
    pub issue_ns: u64,
    pub op: Op,
    pub length_bytes: u64,
}

/// A reply, as its receiver saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Done {
    pub done_ns: u64,
    /// 0, or the NBD error value.
    pub error: u32,
    /// The server's message with a structured error (may be empty).
    pub message: String,
}

/// Completed requests: counts, response histograms, the per-period series
/// and errors. One per connection, merged at the end.
#[derive(Clone, Debug)]
pub struct Completions {
    pub period_ns: u64,
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    /// Completed in the first hour.
    pub first_hour: u64,
    pub last_done_ns: u64,
    /// From the actual issue (the simulator's response).
    pub response: Histogram,
    /// From the due time.
    pub response_from_due: Histogram,
    /// Reads and writes apart (from the actual issue).
    pub directions: tierd_sim::result::DirectionRecorder,
    /// Per period of completion: (requests, response ns summed).
    pub periods: Vec<(u64, u128)>,
    pub errors: u64,
    pub errors_by_name: FastMap<&'static str, u64>,
    pub error_samples: Vec<String>,
}

impl Completions {
    /// `period_ns` > 0: the period of the series.
    pub fn new(period_ns: u64) -> Completions {
        assert!(period_ns > 0, "a period of 0 ns");
        Completions {
            period_ns,
            requests: 0,
            reads: 0,
            writes: 0,
            bytes: 0,
            first_hour: 0,
            last_done_ns: 0,
            response: Histogram::new(),
            response_from_due: Histogram::new(),
            directions: Default::default(),
            periods: Vec::new(),
            errors: 0,
            errors_by_name: FastMap::default(),
            error_samples: Vec::new(),
        }
    }

    pub fn record(&mut self, issued: Issued, done: Done) {
        let response_ns = done.done_ns.saturating_sub(issued.issue_ns);
        self.requests += 1;
        match issued.op {
            Op::Read => self.reads += 1,
            Op::Write => self.writes += 1,
        }
        self.bytes += issued.length_bytes;
        if done.done_ns < HOUR_NS {
            self.first_hour += 1;
        }
        self.last_done_ns = self.last_done_ns.max(done.done_ns);
        self.response.record(response_ns);
        self.directions.record(issued.op.is_write(), response_ns);
        self.response_from_due
            .record(done.done_ns.saturating_sub(issued.due_ns));
        let period = usize::try_from(done.done_ns / self.period_ns).unwrap_or(usize::MAX);
        if period >= self.periods.len() && period < usize::MAX {
            self.periods.resize(period + 1, (0, 0));
        }
        if let Some(slot) = self.periods.get_mut(period) {
            slot.0 += 1;
            slot.1 += u128::from(response_ns);
        }
        if done.error != 0 {
            self.errors += 1;
            *self
                .errors_by_name
                .entry(tierd_nbd::proto::error_name(done.error))
                .or_insert(0) += 1;
            if self.error_samples.len() < ERROR_SAMPLES {
                let op = match issued.op {
                    Op::Read => "read",
                    Op::Write => "write",
                };
                self.error_samples.push(format!(
                    "{op} of {} bytes: {} ({}){}",
                    issued.length_bytes,
                    tierd_nbd::proto::error_name(done.error),
                    done.error,
                    if done.message.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", done.message)
                    }
                ));
            }
        }
    }

    pub fn merge(&mut self, other: Completions) {
        self.requests += other.requests;
        self.reads += other.reads;
        self.writes += other.writes;
        self.bytes += other.bytes;
        self.first_hour += other.first_hour;
        self.last_done_ns = self.last_done_ns.max(other.last_done_ns);
        self.response.merge(&other.response);
        self.response_from_due.merge(&other.response_from_due);
        self.directions.merge(&other.directions);
        if other.periods.len() > self.periods.len() {
            self.periods.resize(other.periods.len(), (0, 0));
        }
        for (mine, theirs) in self.periods.iter_mut().zip(other.periods) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
        }
        self.errors += other.errors;
        for (name, count) in other.errors_by_name {
            *self.errors_by_name.entry(name).or_insert(0) += count;
        }
        for sample in other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(sample);
            }
        }
    }
}

/// One connection's requests on the wire and completions so far (see the
/// module documentation).
#[derive(Debug)]
pub struct Matcher {
    pending: FastMap<u64, Issued>,
    early: FastMap<u64, Done>,
    pub completions: Completions,
}

impl Matcher {
    /// `capacity`: requests expected on the wire at once.
    pub fn new(period_ns: u64, capacity: usize) -> Matcher {
        let mut pending = FastMap::default();
        pending.reserve(capacity);
        let mut early = FastMap::default();
        early.reserve(capacity);
        Matcher {
            pending,
            early,
            completions: Completions::new(period_ns),
        }
    }

    /// The issuer files the request it sent with `cookie`.
    pub fn issued(&mut self, cookie: u64, issued: Issued) {
        match self.early.remove(&cookie) {
            Some(done) => self.completions.record(issued, done),
            None => {
                self.pending.insert(cookie, issued);
            }
        }
    }

    /// The receiver files the reply to `cookie`.
    pub fn completed(&mut self, cookie: u64, done: Done) {
        match self.pending.remove(&cookie) {
            Some(issued) => self.completions.record(issued, done),
            None => {
                self.early.insert(cookie, done);
            }
        }
    }

    /// Halves still waiting for their other half: (issued, completed early).
    pub fn unmatched(&self) -> (usize, usize) {
        (self.pending.len(), self.early.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn issued(due_ns: u64, issue_ns: u64, op: Op, length_bytes: u64) -> Issued {
        Issued {
            due_ns,
            issue_ns,
            op,
            length_bytes,
        }
    }

    fn done(done_ns: u64, error: u32) -> Done {
        Done {
            done_ns,
            error,
            message: String::new(),
        }
    }

    #[test]
    fn completions_match_in_either_order() {
        let mut matcher = Matcher::new(100 * MS, 4);
        matcher.issued(1, issued(0, MS, Op::Read, 4096));
        matcher.completed(1, done(3 * MS, 0));
        // The reply before the issuer filed the request.
        matcher.completed(2, done(150 * MS, 0));
        assert_eq!(matcher.unmatched(), (0, 1));
        matcher.issued(2, issued(110 * MS, 120 * MS, Op::Write, 512));
        assert_eq!(matcher.unmatched(), (0, 0));
        let completions = &matcher.completions;
        assert_eq!(completions.requests, 2);
        assert_eq!((completions.reads, completions.writes), (1, 1));
        assert_eq!(completions.bytes, 4608);
        assert_eq!(completions.last_done_ns, 150 * MS);
        // From issue: 2 ms and 30 ms; from due: 3 ms and 40 ms.
        assert_eq!(completions.response.sum_ns(), u128::from(32 * MS));
        assert_eq!(completions.response_from_due.sum_ns(), u128::from(43 * MS));
        // Per period of completion (100 ms): one in each of the first two.
        assert_eq!(
            completions.periods,
            vec![(1, u128::from(2 * MS)), (1, u128::from(30 * MS))]
        );
        assert_eq!(completions.first_hour, 2);
    }

    #[test]
    fn errors_are_counted_by_name_with_a_few_samples() {
        let mut completions = Completions::new(MS);
        for index in 0..7u64 {
            completions.record(
                issued(0, 0, Op::Write, 4096),
                Done {
                    done_ns: index,
                    error: 1, // EPERM
                    message: "read-only".to_string(),
                },
            );
        }
        completions.record(issued(0, 0, Op::Read, 4096), done(HOUR_NS + 1, 0));
        assert_eq!(completions.errors, 7);
        assert_eq!(completions.errors_by_name.get("EPERM"), Some(&7));
        assert_eq!(completions.error_samples.len(), ERROR_SAMPLES);
        assert_eq!(
            completions.error_samples[0],
            "write of 4096 bytes: EPERM (1): read-only"
        );
        assert_eq!(completions.first_hour, 7);
    }

    #[test]
    fn merging_adds_everything_and_keeps_the_longest_series() {
        let mut first = Completions::new(10 * MS);
        first.record(issued(0, 0, Op::Read, 4096), done(5 * MS, 0));
        let mut second = Completions::new(10 * MS);
        second.record(issued(0, 0, Op::Write, 8192), done(5 * MS, 0));
        second.record(issued(20 * MS, 20 * MS, Op::Write, 8192), done(35 * MS, 5));
        first.merge(second);
        assert_eq!(first.requests, 3);
        assert_eq!(first.bytes, 4096 + 2 * 8192);
        assert_eq!(first.periods.len(), 4);
        assert_eq!(first.periods[0].0, 2);
        assert_eq!(first.periods[3], (1, u128::from(15 * MS)));
        assert_eq!(first.errors, 1);
        assert_eq!(first.errors_by_name.get("EIO"), Some(&1));
        assert_eq!(first.response.count(), 3);
        assert_eq!(first.last_done_ns, 35 * MS);
        // Reads and writes apart survive the merge (the replay merges every
        // connection's completions, one connection included, into an empty
        // set: dropping them reported 0 for every read figure).
        let mut merged = Completions::new(10 * MS);
        merged.merge(first);
        let directions = merged.directions.figures();
        assert!(
            (directions.read_mean_us - 5_000.0).abs() < 1e-6,
            "{directions:?}"
        );
        assert_eq!(directions.read_slow_fraction_100ms, 0.0);
        assert!(
            (directions.write_mean_us - 10_000.0).abs() < 1e-6,
            "{directions:?}"
        );
        let mut slow = Completions::new(10 * MS);
        slow.record(issued(0, 0, Op::Read, 4096), done(150 * MS, 0));
        merged.merge(slow);
        assert_eq!(merged.directions.figures().read_slow_fraction_100ms, 0.5);
    }
}
