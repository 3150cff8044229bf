//! Builds the per-period [`PeriodStats`] a policy reads, from completed IOs.
//!
//! The simulator and the live engine both call this, so both worlds give a
//! policy the same view. Everything is counted at completion (that is when
//! the response time is known, and all the live engine can observe).

use tierd_common::hash::FastMap;

use crate::view::{PeriodStats, SegmentId, SegmentStats, TierId, TierPeriodStats};

/// Completed periods kept for policies (OTF-AST needs n = 2 and m = 8,
/// ATSMF its recent history).
pub const DEFAULT_HISTORY_PERIODS: usize = 64;

#[derive(Debug)]
pub struct Monitor {
    period_ns: u64,
    history_periods: usize,
    period_index: u64,
    period_start_ns: u64,
    segments: FastMap<SegmentId, SegmentStats>,
    tiers: Vec<TierPeriodStats>,
    history: Vec<PeriodStats>,
}

impl Monitor {
    /// `period_ns` > 0; periods start at `start_ns`.
    pub fn new(period_ns: u64, tier_count: usize, start_ns: u64, history_periods: usize) -> Self {
        assert!(period_ns > 0, "period must be positive");
        assert!(tier_count > 0, "at least one tier");
        Self {
            period_ns,
            history_periods: history_periods.max(1),
            period_index: 0,
            period_start_ns: start_ns,
            segments: FastMap::default(),
            tiers: vec![TierPeriodStats::default(); tier_count],
            history: Vec::new(),
        }
    }

    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// When the current period ends: call [`Monitor::close_period`] then.
    pub fn period_end_ns(&self) -> u64 {
        self.period_start_ns + self.period_ns
    }

    /// A user IO to `segment` served by `tier` completed.
    pub fn record_user_io(
        &mut self,
        segment: SegmentId,
        tier: TierId,
        is_write: bool,
        bytes: u64,
        response_ns: u64,
        during_migration: bool,
    ) {
        let stats = self
            .segments
            .entry(segment)
            .or_insert_with(|| SegmentStats {
                segment,
                ..SegmentStats::default()
            });
        if is_write {
            stats.writes += 1;
            stats.write_bytes += bytes;
        } else {
            stats.reads += 1;
            stats.read_bytes += bytes;
        }
        stats.response_ns_total += response_ns;
        if let Some(tier_stats) = self.tiers.get_mut(tier as usize) {
            tier_stats.ios += 1;
            tier_stats.bytes += bytes;
            tier_stats.response_ns_total += response_ns;
            if during_migration {
                tier_stats.ios_during_migration += 1;
                tier_stats.response_ns_total_during_migration += response_ns;
            }
        }
    }

    /// Adds `busy_ns` of user-IO-outstanding time on `tier` to the current
    /// period ([`TierPeriodStats::user_busy_ns`]).
    pub fn record_user_busy(&mut self, tier: TierId, busy_ns: u64) {
        if let Some(tier_stats) = self.tiers.get_mut(tier as usize) {
            tier_stats.user_busy_ns += busy_ns;
        }
    }

    /// A migration IO completed on `tier`.
    pub fn record_migration_io(&mut self, tier: TierId, bytes: u64) {
        if let Some(tier_stats) = self.tiers.get_mut(tier as usize) {
            tier_stats.migration_ios += 1;
            tier_stats.bytes += bytes;
        }
    }

    /// Ends the current period. `busy_ns[tier]` is each tier device's busy
    /// time during the period (from the device's counters). Returns the
    /// closed period; the next one starts where it ended.
    pub fn close_period(&mut self, busy_ns: &[u64]) -> &PeriodStats {
        for (tier_stats, busy) in self.tiers.iter_mut().zip(busy_ns) {
            tier_stats.busy_ns = *busy;
        }
        let mut segments: Vec<SegmentStats> =
            self.segments.drain().map(|(_, stats)| stats).collect();
        segments.sort_unstable_by_key(|stats| stats.segment);
        let tier_count = self.tiers.len();
        let closed = PeriodStats {
            index: self.period_index,
            start_ns: self.period_start_ns,
            end_ns: self.period_start_ns + self.period_ns,
            segments,
            tiers: std::mem::replace(
                &mut self.tiers,
                vec![TierPeriodStats::default(); tier_count],
            ),
        };
        self.period_index += 1;
        self.period_start_ns += self.period_ns;
        if self.history.len() == self.history_periods {
            self.history.remove(0);
        }
        self.history.push(closed);
        self.history.last().expect("just pushed")
    }

    /// Completed periods, oldest first.
    pub fn history(&self) -> &[PeriodStats] {
        &self.history
    }

    /// Puts back the completed periods a previous run saved (warm restart):
    /// they become the history (the newest `history_periods` of them), and
    /// period numbering continues after the last one. The current period
    /// keeps its start time (the clock of a new process has a new origin).
    pub fn restore_history(&mut self, mut history: Vec<PeriodStats>) {
        if history.len() > self.history_periods {
            history.drain(..history.len() - self.history_periods);
        }
        if let Some(last) = history.last() {
            self.period_index = last.index + 1;
        }
        self.history = history;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_collect_segment_and_tier_figures() {
        let mut monitor = Monitor::new(1_000, 2, 0, 3);
        monitor.record_user_io(7, 1, false, 4096, 100, false);
        monitor.record_user_io(7, 1, true, 8192, 300, true);
        monitor.record_user_io(2, 0, false, 512, 10, false);
        monitor.record_migration_io(0, 1 << 20);
        let period = monitor.close_period(&[250, 900]).clone();
        assert_eq!(period.start_ns, 0);
        assert_eq!(period.end_ns, 1_000);
        assert_eq!(period.segments.len(), 2);
        assert_eq!(period.segments[0].segment, 2);
        assert_eq!(period.segment_ios(7), 2);
        assert_eq!(period.segment_ios(3), 0);
        assert_eq!(period.segments[1].write_bytes, 8192);
        assert_eq!(period.tiers[1].ios, 2);
        assert_eq!(period.tiers[1].ios_during_migration, 1);
        assert_eq!(period.tiers[1].response_ns_total_during_migration, 300);
        assert_eq!(period.tiers[0].migration_ios, 1);
        assert!((period.tiers[1].utilization(1_000) - 0.9).abs() < 1e-12);
        assert!((period.tiers[1].iops(1_000) - 2e6).abs() < 1e-6);
        assert_eq!(period.tiers[1].mean_response_ns(), Some(200.0));
        assert_eq!(monitor.period_end_ns(), 2_000);
    }

    #[test]
    fn restored_history_continues_numbering() {
        let mut first = Monitor::new(10, 1, 0, 4);
        for _ in 0..6 {
            first.close_period(&[3]);
        }
        let saved = first.history().to_vec();
        let mut second = Monitor::new(10, 1, 1_000, 3);
        second.restore_history(saved);
        let indexes: Vec<u64> = second.history().iter().map(|period| period.index).collect();
        assert_eq!(indexes, vec![3, 4, 5]);
        assert_eq!(second.close_period(&[1]).index, 6);
        assert_eq!(second.history().len(), 3);
    }

    #[test]
    fn history_is_bounded_and_ordered() {
        let mut monitor = Monitor::new(10, 1, 5, 3);
        for _ in 0..5 {
            monitor.close_period(&[0]);
        }
        let indexes: Vec<u64> = monitor
            .history()
            .iter()
            .map(|period| period.index)
            .collect();
        assert_eq!(indexes, vec![2, 3, 4]);
        assert_eq!(monitor.history()[0].start_ns, 25);
    }
}
