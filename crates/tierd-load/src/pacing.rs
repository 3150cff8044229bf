//! Pacing: when the issuing thread sleeps, and what counts as a late issue.
//! Sans-IO: the driver reads the clock and sleeps; this module only decides
//! and counts.
//!
//! A replay is open loop: request i goes on the wire at its due time
//! whether or not earlier requests completed. Only the in-flight bound
//! holds the issuer back: while `max_inflight` requests are outstanding it
//! waits for a completion. A request is a **late issue** when it was due
//! before the issuer got its in-flight slot back: the request that waited,
//! and every request that fell due while the issuer was held. This is
//! `tierd sim`'s `deferred_requests` (a request dispatched after its due
//! time because `max_outstanding_requests` were outstanding), so the two
//! counts compare. A request issued late only by sleep overshoot or a slow
//! socket write is not a late issue; its lag shows in the issue-lag
//! histogram, which covers every request.

use tierd_common::histogram::Histogram;

/// Longest single sleep of the issuing thread, so it notices a failed
/// connection within this time even across a long gap in the trace.
pub const MAX_SLEEP_NS: u64 = 100_000_000;

/// How long to sleep at `now_ns` before a request due at `due_ns`: `None`
/// when it is due, else at most [`MAX_SLEEP_NS`].
pub fn sleep_before_ns(due_ns: u64, now_ns: u64) -> Option<u64> {
    (now_ns < due_ns).then(|| (due_ns - now_ns).min(MAX_SLEEP_NS))
}

/// What the issuing side counted.
#[derive(Clone, Debug, Default)]
pub struct IssueStats {
    /// Requests put on the wire.
    pub issued: u64,
    /// Requests moved onto the export (`--wrap`).
    pub wrapped: u64,
    /// Late issues (see the module documentation), their total and
    /// largest lateness (issue − due).
    pub late_issues: u64,
    pub late_ns_total: u128,
    pub late_ns_max: u64,
    /// Issue time − due time, every request.
    pub issue_lag: Histogram,
    /// When the last request went on the wire.
    pub last_issue_ns: u64,
}

/// The issuing side's bookkeeping (see the module documentation).
#[derive(Debug, Default)]
pub struct Pacer {
    /// When the issuer last got an in-flight slot after waiting for one.
    held_until_ns: Option<u64>,
    pub stats: IssueStats,
}

impl Pacer {
    pub fn new() -> Pacer {
        Pacer::default()
    }

    /// The issuer waited for an in-flight slot and got it at `now_ns`.
    pub fn slot_freed_at(&mut self, now_ns: u64) {
        self.held_until_ns = Some(self.held_until_ns.map_or(now_ns, |held| held.max(now_ns)));
    }

    /// A request due at `due_ns` went on the wire at `issue_ns`. Returns
    /// whether it was a late issue.
    pub fn issued(&mut self, due_ns: u64, issue_ns: u64, wrapped: bool) -> bool {
        let stats = &mut self.stats;
        let lag_ns = issue_ns.saturating_sub(due_ns);
        stats.issue_lag.record(lag_ns);
        stats.issued += 1;
        stats.wrapped += u64::from(wrapped);
        stats.last_issue_ns = issue_ns;
        let late = self.held_until_ns.is_some_and(|held| due_ns < held);
        if late {
            stats.late_issues += 1;
            stats.late_ns_total += u128::from(lag_ns);
            stats.late_ns_max = stats.late_ns_max.max(lag_ns);
        }
        late
    }

    /// Mean lateness of the late issues, µs (0 without any).
    pub fn late_mean_us(stats: &IssueStats) -> f64 {
        if stats.late_issues > 0 {
            stats.late_ns_total as f64 / stats.late_issues as f64 / 1e3
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_until_due_in_bounded_steps() {
        assert_eq!(sleep_before_ns(1_000, 1_000), None);
        assert_eq!(sleep_before_ns(1_000, 2_000), None);
        assert_eq!(sleep_before_ns(1_500, 1_000), Some(500));
        assert_eq!(sleep_before_ns(10 * MAX_SLEEP_NS, 0), Some(MAX_SLEEP_NS));
    }

    /// The simulator's rule: late = dispatched after the due time because
    /// the in-flight bound held the replayer; sleep overshoot is not late.
    #[test]
    fn requests_due_while_the_issuer_was_held_are_late() {
        let mut pacer = Pacer::new();
        // On time, then 30 µs of sleep overshoot: not late.
        assert!(!pacer.issued(0, 0, false));
        assert!(!pacer.issued(1_000, 31_000, false));
        // Request due at 2 000 waits for a slot until 50 000.
        pacer.slot_freed_at(50_000);
        assert!(pacer.issued(2_000, 50_000, false));
        // Due at 40 000, while the issuer was held: late though it got a
        // slot at once.
        assert!(pacer.issued(40_000, 50_100, false));
        // Due after the issuer was free again: on time.
        assert!(!pacer.issued(60_000, 60_200, true));
        let stats = &pacer.stats;
        assert_eq!(stats.issued, 5);
        assert_eq!(stats.wrapped, 1);
        assert_eq!(stats.late_issues, 2);
        assert_eq!(stats.late_ns_max, 48_000);
        assert_eq!(stats.late_ns_total, 48_000 + 10_100);
        assert_eq!(Pacer::late_mean_us(stats), 29.05);
        assert_eq!(stats.last_issue_ns, 60_200);
        assert_eq!(stats.issue_lag.count(), 5);
        assert_eq!(stats.issue_lag.max_ns(), Some(48_000));
        // A wait that took no time (a virtual clock) makes nothing late.
        let mut pacer = Pacer::new();
        pacer.slot_freed_at(7_000);
        assert!(!pacer.issued(7_000, 7_000, false));
    }
}
