//! Builds the per-period [`PeriodStats`] a policy reads, from completed IOs.
//!
//! The simulator and the live engine both call this, so both worlds give a
//! policy the same view. Everything is counted at completion (that is when
//! the response time is known, and all the live engine can observe).
//!
//! The figures of the open period accumulate in a [`PeriodCounts`]. The
//! simulator records straight into the [`Monitor`]'s own; the live engine,
//! whose IO threads must not share a lock, records into one `PeriodCounts`
//! per thread shard and hands each to [`Monitor::merge`] before the period
//! closes. Every figure is a sum, so the closed period is the same whichever
//! thread recorded which IO, in whatever order, and however the counts were
//! split and merged.

use tierd_common::hash::FastMap;

use crate::view::{PeriodStats, SegmentId, SegmentStats, TierId, TierPeriodStats};

/// Completed periods kept for policies (OTF-AST needs n = 2 and m = 8,
/// ATSMF its recent history).
pub const DEFAULT_HISTORY_PERIODS: usize = 64;

/// What has been recorded in a period that has not closed yet: per-segment
/// and per-tier sums. The one place that turns a completed IO into figures.
#[derive(Clone, Debug)]
pub struct PeriodCounts {
    segments: FastMap<SegmentId, SegmentStats>,
    tiers: Vec<TierPeriodStats>,
}

impl PeriodCounts {
    /// Counts for a stack of `tier_count` tiers; records naming a tier
    /// beyond it count for the segment only.
    pub fn new(tier_count: usize) -> Self {
        Self {
            segments: FastMap::default(),
            tiers: vec![TierPeriodStats::default(); tier_count],
        }
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

    /// Adds `busy_ns` of user-IO-outstanding time on `tier`
    /// ([`TierPeriodStats::user_busy_ns`]).
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

    /// Segments with IO recorded here (what these counts' memory grows with).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Nothing recorded since the counts were made or last drained.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
            && self
                .tiers
                .iter()
                .all(|tier| *tier == TierPeriodStats::default())
    }

    /// Adds everything in `other` to these counts and empties `other`
    /// (keeping its allocation, so a recorder that is drained every period
    /// does not allocate again).
    pub fn drain_into(&mut self, other: &mut PeriodCounts) {
        for (segment, theirs) in other.segments.drain() {
            let mine = self
                .segments
                .entry(segment)
                .or_insert_with(|| SegmentStats {
                    segment,
                    ..SegmentStats::default()
                });
            add_segment(mine, &theirs);
        }
        for (index, theirs) in other.tiers.iter_mut().enumerate() {
            if let Some(mine) = self.tiers.get_mut(index) {
                add_tier(mine, theirs);
            }
            *theirs = TierPeriodStats::default();
        }
    }

    /// These counts as a period `[start_ns, end_ns)` numbered `index`, with
    /// each tier's busy time taken from `busy_ns`, segments sorted by id.
    fn to_period(&self, index: u64, start_ns: u64, end_ns: u64, busy_ns: &[u64]) -> PeriodStats {
        let mut segments: Vec<SegmentStats> = self.segments.values().copied().collect();
        segments.sort_unstable_by_key(|stats| stats.segment);
        let mut tiers = self.tiers.clone();
        for (tier_stats, busy) in tiers.iter_mut().zip(busy_ns) {
            tier_stats.busy_ns = *busy;
        }
        PeriodStats {
            index,
            start_ns,
            end_ns,
            segments,
            tiers,
        }
    }
}

/// Adds `theirs` to `mine`. Every field is named, so a field added to
/// [`SegmentStats`] does not compile until it says how it merges.
fn add_segment(mine: &mut SegmentStats, theirs: &SegmentStats) {
    let SegmentStats {
        segment: _,
        reads,
        writes,
        read_bytes,
        write_bytes,
        response_ns_total,
    } = *theirs;
    mine.reads += reads;
    mine.writes += writes;
    mine.read_bytes += read_bytes;
    mine.write_bytes += write_bytes;
    mine.response_ns_total += response_ns_total;
}

/// Adds `theirs` to `mine`, every field named (see [`add_segment`]).
fn add_tier(mine: &mut TierPeriodStats, theirs: &TierPeriodStats) {
    let TierPeriodStats {
        ios,
        migration_ios,
        bytes,
        busy_ns,
        user_busy_ns,
        response_ns_total,
        ios_during_migration,
        response_ns_total_during_migration,
    } = *theirs;
    mine.ios += ios;
    mine.migration_ios += migration_ios;
    mine.bytes += bytes;
    mine.busy_ns += busy_ns;
    mine.user_busy_ns += user_busy_ns;
    mine.response_ns_total += response_ns_total;
    mine.ios_during_migration += ios_during_migration;
    mine.response_ns_total_during_migration += response_ns_total_during_migration;
}

#[derive(Debug)]
pub struct Monitor {
    period_ns: u64,
    history_periods: usize,
    period_index: u64,
    period_start_ns: u64,
    current: PeriodCounts,
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
            current: PeriodCounts::new(tier_count),
            history: Vec::new(),
        }
    }

    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Tiers of the stack this monitor counts for.
    pub fn tier_count(&self) -> usize {
        self.current.tiers.len()
    }

    /// When the current period ends: call [`Monitor::close_period`] then.
    pub fn period_end_ns(&self) -> u64 {
        self.period_start_ns + self.period_ns
    }

    /// A user IO to `segment` served by `tier` completed
    /// ([`PeriodCounts::record_user_io`] on the current period).
    pub fn record_user_io(
        &mut self,
        segment: SegmentId,
        tier: TierId,
        is_write: bool,
        bytes: u64,
        response_ns: u64,
        during_migration: bool,
    ) {
        self.current.record_user_io(
            segment,
            tier,
            is_write,
            bytes,
            response_ns,
            during_migration,
        );
    }

    /// Adds `busy_ns` of user-IO-outstanding time on `tier` to the current
    /// period ([`TierPeriodStats::user_busy_ns`]).
    pub fn record_user_busy(&mut self, tier: TierId, busy_ns: u64) {
        self.current.record_user_busy(tier, busy_ns);
    }

    /// A migration IO completed on `tier`.
    pub fn record_migration_io(&mut self, tier: TierId, bytes: u64) {
        self.current.record_migration_io(tier, bytes);
    }

    /// Adds counts recorded elsewhere (another thread's) to the current
    /// period and empties them; the same as if each of their IOs had been
    /// recorded here.
    pub fn merge(&mut self, counts: &mut PeriodCounts) {
        self.current.drain_into(counts);
    }

    /// The current (open) period so far: its figures up to now, busy time 0
    /// (the caller has not measured it), ending where it is due to end.
    pub fn current(&self) -> PeriodStats {
        self.current.to_period(
            self.period_index,
            self.period_start_ns,
            self.period_end_ns(),
            &[],
        )
    }

    /// Ends the current period. `busy_ns[tier]` is each tier device's busy
    /// time during the period (from the device's counters). Returns the
    /// closed period; the next one starts where it ended.
    pub fn close_period(&mut self, busy_ns: &[u64]) -> &PeriodStats {
        let closed = self.current.to_period(
            self.period_index,
            self.period_start_ns,
            self.period_start_ns + self.period_ns,
            busy_ns,
        );
        self.current.segments.clear();
        self.current.tiers.fill(TierPeriodStats::default());
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

    /// One recorded event of the tests below.
    #[derive(Clone, Copy)]
    enum Event {
        User(SegmentId, TierId, bool, u64, u64, bool),
        Busy(TierId, u64),
        Migration(TierId, u64),
    }

    fn apply(counts: &mut PeriodCounts, event: Event) {
        match event {
            Event::User(segment, tier, is_write, bytes, response_ns, moving) => {
                counts.record_user_io(segment, tier, is_write, bytes, response_ns, moving)
            }
            Event::Busy(tier, busy_ns) => counts.record_user_busy(tier, busy_ns),
            Event::Migration(tier, bytes) => counts.record_migration_io(tier, bytes),
        }
    }

    fn random_events(seed: u64, count: usize) -> Vec<Event> {
        use tierd_common::rng::{Rng, SeededRng};
        let mut rng = SeededRng::new(seed);
        (0..count)
            .map(|_| match rng.below(10) {
                0 => Event::Busy(rng.below(4) as TierId, rng.below(1_000)),
                1 => Event::Migration(rng.below(4) as TierId, 1 << 18),
                // Tier 3 does not exist in a 3-tier stack: counted for the
                // segment only, both ways.
                _ => Event::User(
                    rng.below(50) as SegmentId,
                    rng.below(4) as TierId,
                    rng.chance(0.3),
                    512 * (1 + rng.below(256)),
                    rng.below(5_000_000),
                    rng.chance(0.1),
                ),
            })
            .collect()
    }

    #[test]
    fn merged_counts_close_the_same_periods_as_direct_recording() {
        let events = random_events(7, 20_000);
        let mut direct = Monitor::new(1_000, 3, 0, 8);
        let mut merged = Monitor::new(1_000, 3, 0, 8);
        // Five recorders, events dealt to them out of order, merged at
        // uneven points (also mid-period, as the engine's spill does).
        let mut recorders: Vec<PeriodCounts> = (0..5).map(|_| PeriodCounts::new(3)).collect();
        for (period, chunk) in events.chunks(4_000).enumerate() {
            for (index, event) in chunk.iter().enumerate() {
                match event {
                    Event::User(segment, tier, is_write, bytes, response_ns, moving) => direct
                        .record_user_io(*segment, *tier, *is_write, *bytes, *response_ns, *moving),
                    Event::Busy(tier, busy_ns) => direct.record_user_busy(*tier, *busy_ns),
                    Event::Migration(tier, bytes) => direct.record_migration_io(*tier, *bytes),
                }
                let recorder = (index * 7 + period) % recorders.len();
                apply(&mut recorders[recorder], *event);
                if index == 1_234 {
                    merged.merge(&mut recorders[2]);
                    assert!(recorders[2].is_empty());
                }
            }
            for recorder in &mut recorders {
                merged.merge(recorder);
                assert!(recorder.is_empty());
            }
            assert_eq!(merged.current(), direct.current());
            let busy = [period as u64, 2 * period as u64, 3];
            let from_direct = direct.close_period(&busy).clone();
            assert_eq!(merged.close_period(&busy), &from_direct);
            assert!(!from_direct.segments.is_empty());
        }
        assert_eq!(merged.history(), direct.history());
        assert_eq!(merged.history().len(), 5);
    }

    #[test]
    fn current_shows_the_open_period() {
        let mut monitor = Monitor::new(100, 2, 50, 4);
        monitor.record_user_io(9, 0, true, 4096, 70, false);
        monitor.record_user_io(3, 1, false, 512, 30, false);
        let current = monitor.current();
        assert_eq!(
            (current.index, current.start_ns, current.end_ns),
            (0, 50, 150)
        );
        assert_eq!(
            current
                .segments
                .iter()
                .map(|stats| stats.segment)
                .collect::<Vec<_>>(),
            vec![3, 9]
        );
        assert_eq!(current.tiers[0].ios, 1);
        assert_eq!(current.tiers[0].busy_ns, 0);
        // Looking does not close or change anything.
        assert_eq!(monitor.current(), current);
        assert!(monitor.history().is_empty());
        assert_eq!(monitor.close_period(&[5, 6]).segments, current.segments);
        assert!(monitor.current().segments.is_empty());
        assert_eq!(monitor.current().index, 1);
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
