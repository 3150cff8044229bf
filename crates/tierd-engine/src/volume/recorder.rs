//! The volume's `Monitor` as its IO threads see it: each thread records its
//! completed IOs into its own shard's [`PeriodCounts`] (a mutex no other
//! thread takes, on its own cache line), and whoever reads the monitor
//! (the period tick, a checkpoint, status) first merges every shard into it.
//!
//! The `Monitor` stays the one place that turns records into a period's
//! figures: a shard is the same [`PeriodCounts`] the monitor keeps for its
//! open period, and a merge adds sums, so the view a policy gets is the
//! same as if every IO had been recorded straight into the monitor (the
//! simulator still does that). An IO that completes while a period closes
//! lands in the closing period or the next one, as it did when every IO
//! took the monitor's lock.

use parking_lot::{Mutex, MutexGuard};

use tierd_policy::monitor::{Monitor, PeriodCounts};
use tierd_policy::view::PeriodStats;
use tierd_policy::{SegmentId, TierId};

use crate::shard::{default_shard_count, Sharded};

/// A shard that holds this many segments' counts is merged into the
/// monitor at once if nobody else holds it (bounds a shard's memory on a
/// volume with many segments; a volume with fewer never spills).
const SPILL_SEGMENTS: usize = 4_096;

pub(super) struct LiveMonitor {
    monitor: Mutex<Monitor>,
    shards: Sharded<Mutex<PeriodCounts>>,
}

impl LiveMonitor {
    pub(super) fn new(monitor: Monitor) -> Self {
        Self::with_shards(monitor, default_shard_count())
    }

    fn with_shards(monitor: Monitor, shards: usize) -> Self {
        let tier_count = monitor.tier_count();
        Self {
            monitor: Mutex::new(monitor),
            shards: Sharded::new(shards, || Mutex::new(PeriodCounts::new(tier_count))),
        }
    }

    /// [`PeriodCounts::record_user_io`] into this thread's shard.
    pub(super) fn record_user_io(
        &self,
        segment: SegmentId,
        tier: TierId,
        is_write: bool,
        bytes: u64,
        response_ns: u64,
        during_migration: bool,
    ) {
        self.record(|counts| {
            counts.record_user_io(
                segment,
                tier,
                is_write,
                bytes,
                response_ns,
                during_migration,
            )
        });
    }

    /// [`PeriodCounts::record_migration_io`] into this thread's shard.
    pub(super) fn record_migration_io(&self, tier: TierId, bytes: u64) {
        self.record(|counts| counts.record_migration_io(tier, bytes));
    }

    fn record(&self, record: impl FnOnce(&mut PeriodCounts)) {
        let mut counts = self.shards.local().lock();
        record(&mut counts);
        if counts.segment_count() >= SPILL_SEGMENTS {
            // Never wait for the monitor on the IO path: if the tick holds
            // it, the shard grows a little more and spills next time.
            if let Some(mut monitor) = self.monitor.try_lock() {
                monitor.merge(&mut counts);
            }
        }
    }

    /// The monitor, with everything recorded so far merged into its open
    /// period. Lock order: the volume's planner before this.
    pub(super) fn lock(&self) -> MutexGuard<'_, Monitor> {
        let mut monitor = self.monitor.lock();
        for shard in self.shards.iter() {
            monitor.merge(&mut shard.lock());
        }
        monitor
    }

    /// When the open period is due to end (no merge).
    pub(super) fn period_end_ns(&self) -> u64 {
        self.monitor.lock().period_end_ns()
    }

    /// The open period so far ([`Monitor::current`] after a merge).
    pub(super) fn current(&self) -> PeriodStats {
        self.lock().current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};
    use tierd_common::rng::{Rng, SeededRng};
    use tierd_policy::view::{MigrationStats, TierInfo};
    use tierd_policy::{build_policy, Move, PolicyConfig, PolicyKind, View};

    #[derive(Clone, Copy, Debug)]
    struct Io {
        segment: SegmentId,
        tier: TierId,
        is_write: bool,
        bytes: u64,
        response_ns: u64,
        moving: bool,
    }

    const SEGMENTS: u32 = 64;
    const TIERS: usize = 2;
    const PERIOD_NS: u64 = 1_000_000;

    /// A skewed workload: a hot band of segments that walks across the
    /// volume period by period, over a thin uniform background, so the
    /// policies have something to move.
    fn period_ios(rng: &mut SeededRng, period: u64, count: usize) -> Vec<Io> {
        (0..count)
            .map(|_| {
                let segment = if rng.chance(0.8) {
                    ((period * 3 + rng.below(4)) % u64::from(SEGMENTS)) as SegmentId
                } else {
                    rng.below(u64::from(SEGMENTS)) as SegmentId
                };
                Io {
                    segment,
                    tier: if segment < 4 { 0 } else { 1 },
                    is_write: rng.chance(0.4),
                    bytes: 4096 * (1 + rng.below(16)),
                    response_ns: 50_000 + rng.below(5_000_000),
                    moving: rng.chance(0.05),
                }
            })
            .collect()
    }

    fn view_plan(
        policy: &mut dyn tierd_policy::Policy,
        history: &[PeriodStats],
        now_ns: u64,
    ) -> tierd_policy::Plan {
        let placement: Vec<TierId> = (0..SEGMENTS)
            .map(|segment| if segment < 4 { 0 } else { 1 })
            .collect();
        let tiers = vec![
            TierInfo {
                name: "fast".into(),
                capacity_segments: 8,
                used_segments: 4,
            },
            TierInfo {
                name: "home".into(),
                capacity_segments: SEGMENTS,
                used_segments: SEGMENTS,
            },
        ];
        let in_flight: Vec<Move> = Vec::new();
        let view = View {
            now_ns,
            period_ns: PERIOD_NS,
            segment_bytes: 1 << 20,
            segments: SEGMENTS,
            history,
            placement: &placement,
            in_flight: &in_flight,
            tiers: &tiers,
            migration: MigrationStats {
                completed_moves: 3,
                mean_move_ns: Some(2e6),
                device_move_ns: None,
            },
            pinned: &[],
        };
        policy.plan(&view)
    }

    /// The same IOs recorded straight into a `Monitor` (the simulator's
    /// way, and the engine's before shards) and by four threads into a
    /// `LiveMonitor` give the same closed periods, and the same plans from
    /// OTF-AST and ATSMF.
    #[test]
    fn sharded_recording_gives_the_direct_monitors_views_and_plans() {
        const THREADS: usize = 4;
        let mut rng = SeededRng::new(12);
        let mut direct = Monitor::new(PERIOD_NS, TIERS, 0, 16);
        // Fewer shards than threads: two threads share a shard too.
        let live = Arc::new(LiveMonitor::with_shards(
            Monitor::new(PERIOD_NS, TIERS, 0, 16),
            2,
        ));
        let mut policies_direct = Vec::new();
        let mut policies_live = Vec::new();
        for kind in [PolicyKind::OtfAst, PolicyKind::Atsmf] {
            policies_direct.push(build_policy(&PolicyConfig::default_for(kind)));
            policies_live.push(build_policy(&PolicyConfig::default_for(kind)));
        }
        let mut moves = 0;
        for period in 0..12u64 {
            let ios = period_ios(&mut rng, period, 6_000);
            for io in &ios {
                direct.record_user_io(
                    io.segment,
                    io.tier,
                    io.is_write,
                    io.bytes,
                    io.response_ns,
                    io.moving,
                );
            }
            direct.record_migration_io(0, 1 << 18);
            direct.record_migration_io(1, 1 << 18);
            let ios = Arc::new(ios);
            let barrier = Arc::new(Barrier::new(THREADS));
            let handles: Vec<_> = (0..THREADS)
                .map(|thread| {
                    let ios = Arc::clone(&ios);
                    let live = Arc::clone(&live);
                    let barrier = Arc::clone(&barrier);
                    std::thread::spawn(move || {
                        barrier.wait();
                        // Interleaved deal: every thread records every
                        // THREADS-th IO, all at once.
                        for io in ios.iter().skip(thread).step_by(THREADS) {
                            live.record_user_io(
                                io.segment,
                                io.tier,
                                io.is_write,
                                io.bytes,
                                io.response_ns,
                                io.moving,
                            );
                        }
                        if thread == 1 {
                            live.record_migration_io(0, 1 << 18);
                            live.record_migration_io(1, 1 << 18);
                        }
                    })
                })
                .collect();
            for handle in handles {
                handle.join().unwrap();
            }
            assert_eq!(live.current(), direct.current(), "period {period} so far");
            let busy = [PERIOD_NS / 3, PERIOD_NS * 4 / 5];
            let closed = direct.close_period(&busy).clone();
            assert_eq!(live.lock().close_period(&busy), &closed);
            let now_ns = closed.end_ns;
            let live_monitor = live.lock();
            assert_eq!(live_monitor.history(), direct.history());
            for (mine, theirs) in policies_live.iter_mut().zip(&mut policies_direct) {
                let plan_live = view_plan(mine.as_mut(), live_monitor.history(), now_ns);
                let plan_direct = view_plan(theirs.as_mut(), direct.history(), now_ns);
                assert_eq!(plan_live, plan_direct, "period {period}");
                moves += plan_direct.moves.len();
            }
        }
        // The comparison means something only if the policies moved.
        assert!(moves > 0, "no policy planned a move");
    }

    #[test]
    fn a_full_shard_spills_into_the_monitor() {
        let live = LiveMonitor::with_shards(Monitor::new(PERIOD_NS, 1, 0, 4), 1);
        for segment in 0..SPILL_SEGMENTS as SegmentId {
            live.record_user_io(segment, 0, false, 512, 1, false);
        }
        // The last record filled the shard and moved it into the monitor.
        assert!(live.shards.local().lock().is_empty());
        assert_eq!(live.monitor.lock().current().segments.len(), SPILL_SEGMENTS);
        live.record_user_io(7, 0, true, 512, 1, false);
        let current = live.current();
        assert_eq!(current.tiers[0].ios, SPILL_SEGMENTS as u64 + 1);
        assert_eq!(current.segment_ios(7), 2);
    }
}
