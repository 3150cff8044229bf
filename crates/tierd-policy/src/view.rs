//! What a policy sees ([`View`]) and what it returns ([`Plan`]).
//!
//! Tiers are numbered from the fastest (0) to the home tier (`tiers.len() - 1`),
//! which holds capacity for every segment. A segment lives on exactly one tier.

use serde::{Deserialize, Serialize};

/// Index of a segment: `offset_bytes / segment_bytes`.
pub type SegmentId = u32;
/// Index of a tier: 0 is the fastest, the last is home.
pub type TierId = u8;

/// IO of one segment in one period (only segments with IO are listed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SegmentStats {
    pub segment: SegmentId,
    pub reads: u32,
    pub writes: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Sum of response times of this segment's completed user IOs.
    pub response_ns_total: u64,
}

impl SegmentStats {
    pub fn ios(&self) -> u32 {
        self.reads + self.writes
    }
}

/// One tier's device in one period, iostat style.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TierPeriodStats {
    /// User IOs completed.
    pub ios: u64,
    /// Migration IOs completed on this tier.
    pub migration_ios: u64,
    pub bytes: u64,
    /// Busy time in the period (user + background).
    pub busy_ns: u64,
    /// Time in the period during which at least one user IO was outstanding
    /// at the device (queued in front of it or in it): iostat's %util
    /// counted over user IO alone, without migration copies. 0 from a
    /// producer that does not measure it.
    #[serde(default)]
    pub user_busy_ns: u64,
    /// Sum of user IO response times (await × ios).
    pub response_ns_total: u64,
    /// User IOs that completed while a migration touched this tier, and the
    /// sum of their response times (ATSMF's AvefWithMg).
    pub ios_during_migration: u64,
    pub response_ns_total_during_migration: u64,
}

impl TierPeriodStats {
    /// Busy fraction 0..=1 (iostat %util / 100).
    pub fn utilization(&self, period_ns: u64) -> f64 {
        if period_ns == 0 {
            0.0
        } else {
            (self.busy_ns as f64 / period_ns as f64).min(1.0)
        }
    }

    pub fn iops(&self, period_ns: u64) -> f64 {
        if period_ns == 0 {
            0.0
        } else {
            self.ios as f64 * 1e9 / period_ns as f64
        }
    }

    /// Mean user response in ns, `None` without IO.
    pub fn mean_response_ns(&self) -> Option<f64> {
        (self.ios > 0).then(|| self.response_ns_total as f64 / self.ios as f64)
    }
}

/// Everything measured in one completed period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeriodStats {
    pub index: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Segments with IO in the period, sorted by segment id.
    pub segments: Vec<SegmentStats>,
    /// Indexed by [`TierId`].
    pub tiers: Vec<TierPeriodStats>,
}

impl PeriodStats {
    pub fn period_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// IO count of `segment` in this period (binary search).
    pub fn segment_ios(&self, segment: SegmentId) -> u32 {
        self.segments
            .binary_search_by_key(&segment, |stats| stats.segment)
            .map(|index| self.segments[index].ios())
            .unwrap_or(0)
    }
}

/// A tier as policies see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierInfo {
    pub name: String,
    /// How many segments fit on this tier.
    pub capacity_segments: u32,
    /// Segments placed on it now (moves in flight count on their target).
    pub used_segments: u32,
}

/// Measured cost of moving segments (ATSMF's AveMgTime), from completed moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrationStats {
    pub completed_moves: u64,
    /// Mean wall (or virtual) time of one segment move, `None` before the first.
    pub mean_move_ns: Option<f64>,
    /// Time one segment's copy from home to the tier just above it takes,
    /// derived from the devices in use, for the decisions made before any
    /// move is measured: the simulator copies a segment between idle copies
    /// of the stack's device models; the engine takes the mean of its
    /// completed copies when it has one and otherwise derives it from the
    /// tiers' measured read and write throughput. `None` when nothing is
    /// known yet (the policy falls back on its prior).
    #[serde(default)]
    pub device_move_ns: Option<f64>,
}

/// The read-only view a policy plans from.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// End of the period just completed.
    pub now_ns: u64,
    pub period_ns: u64,
    pub segment_bytes: u64,
    /// Segments in the volume.
    pub segments: u32,
    /// Completed periods, oldest first, most recent last (bounded window: at
    /// least the last 16 periods).
    pub history: &'a [PeriodStats],
    /// Current tier of every segment (indexed by [`SegmentId`]).
    pub placement: &'a [TierId],
    /// Moves started and not yet finished; for a policy that does not
    /// restate its plans ([`crate::Policy::restates_plan`]) also the moves
    /// accepted and queued. A policy that restates its plans sees the
    /// queued moves as not made (and tier room without them): its plan
    /// lists them again to keep them, and those it leaves out are dropped
    /// as stale.
    pub in_flight: &'a [Move],
    pub tiers: &'a [TierInfo],
    pub migration: MigrationStats,
    /// Segments an operator pinned to their tier (`tierd pin`), sorted
    /// ascending. A policy MUST NOT propose moving them (the caller drops
    /// such moves anyway) and should not count on moving them: they stay
    /// where they are and keep their slots. Empty in the simulator.
    pub pinned: &'a [SegmentId],
}

impl View<'_> {
    pub fn home_tier(&self) -> TierId {
        (self.tiers.len() - 1) as TierId
    }

    pub fn latest(&self) -> Option<&PeriodStats> {
        self.history.last()
    }

    /// True when an operator pinned `segment` (see [`View::pinned`]).
    pub fn is_pinned(&self, segment: SegmentId) -> bool {
        self.pinned.binary_search(&segment).is_ok()
    }

    pub fn is_moving(&self, segment: SegmentId) -> bool {
        self.in_flight
            .iter()
            .any(|pending| pending.segment == segment)
    }
}

/// Why a move was proposed, with the numbers that fired the rule, so `tierd
/// status` and reports can show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MoveReason {
    /// Short rule name, e.g. `otf-ast:util-above-up`, `atsmf:benefit`.
    pub rule: String,
    /// Human sentence with the figures: "HDD util 0.93 > up 0.70; segment iops 41.2".
    pub detail: String,
}

/// Move `segment` from tier `from` to tier `to`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Move {
    pub segment: SegmentId,
    pub from: TierId,
    pub to: TierId,
    pub reason: MoveReason,
}

/// A policy's proposal. Moves are executed in order; the caller drops moves
/// that are invalid when executed (segment already moving, `from` is not the
/// segment's tier, target full) and counts them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub moves: Vec<Move>,
    /// Why the plan is what it is, in one line with the figures the policy
    /// compared, also (above all) when it has no moves: "home util 46.0%,
    /// inside 10.0-70.0%: no move". `tierd status` shows the last one.
    #[serde(default)]
    pub summary: String,
    /// How long after acceptance the plan's moves still pay back what
    /// their copies cost; a queued move that has waited longer is dropped
    /// as stale (`tierd_core::placement::stale_reason`). `None`: no bound.
    #[serde(default)]
    pub payback_ns: Option<u64>,
}

impl Plan {
    /// A plan without moves, for `summary`'s reason.
    pub fn nothing(summary: impl Into<String>) -> Plan {
        Plan {
            moves: Vec::new(),
            summary: summary.into(),
            payback_ns: None,
        }
    }
}
