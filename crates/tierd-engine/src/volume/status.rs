//! What `tierd status` shows: the status types, tier availability and
//! backing checks.

use std::sync::atomic::Ordering;

use serde::Serialize;
use tierd_policy::view::PeriodStats;
use tierd_policy::{SegmentId, TierId};

use crate::device::DeviceStats;
use crate::meta::{LastPlan, MoveRecord, Pin};

use super::Volume;

/// Bytes of a volume that cannot be read: their only current copy is on a
/// tier marked unavailable (home's copy is stale). Reads there fail with the
/// tier's error, never with other data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct UnavailableRange {
    pub tier: String,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub first_segment: SegmentId,
    pub last_segment: SegmentId,
}

/// Per-tier figures for status.
#[derive(Clone, Debug, Serialize)]
pub struct TierStatus {
    pub name: String,
    pub volatile: bool,
    pub write_through: bool,
    pub capacity_segments: u32,
    /// Segments on the tier once the accepted moves are done (a queued or
    /// copying move counts on its target, no longer on its source): what
    /// the policy sees.
    pub used_segments: u32,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub stats: Option<DeviceStats>,
    /// Why the tier's backing stopped serving (truncated, deleted or
    /// replaced under the server); absent while it works.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// A reduced tier's figures (`docs/engine/reduce.md`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reduction: Option<crate::device::reduce::ReductionStatus>,
    /// A replicated tier's figures (`docs/replicas.md`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<crate::device::replica::ReplicaView>,
}

/// A move in flight.
#[derive(Clone, Debug, Serialize)]
pub struct InFlightMove {
    pub segment: SegmentId,
    pub from: String,
    pub to: String,
    pub rule: String,
    pub detail: String,
    pub copied_bytes: u64,
    pub total_bytes: u64,
}

/// An operator pin as `tierd status` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PinStatus {
    pub segment: SegmentId,
    pub tier: String,
    /// When the pin ends (RFC 3339, UTC), `None` until `tierd unpin` ...
    pub until: Option<String>,
    /// ... and the same as ns since the Unix epoch.
    pub until_unix_ns: Option<u64>,
    /// The segment is on its pinned tier now (false while the move that
    /// puts it there is queued or running).
    pub placed: bool,
}

impl PinStatus {
    pub fn new(pin: &Pin, tier_names: &[String], current_tier: Option<TierId>) -> PinStatus {
        PinStatus {
            segment: pin.segment,
            tier: tier_names
                .get(pin.tier as usize)
                .cloned()
                .unwrap_or_else(|| format!("tier {}", pin.tier)),
            until: pin
                .until_unix_ns
                .map(tierd_common::units::format_rfc3339_utc),
            until_unix_ns: pin.until_unix_ns,
            placed: current_tier == Some(pin.tier),
        }
    }
}

/// What `tierd status` shows for a volume.
#[derive(Clone, Debug, Serialize)]
pub struct VolumeStatus {
    pub name: String,
    pub size_bytes: u64,
    pub segment_bytes: u64,
    pub segments: u32,
    pub policy: String,
    pub periods_closed: u64,
    /// Segments per tier, in stack order.
    pub placement_by_tier: Vec<(String, u32)>,
    /// Tier index of every segment (compact: one digit per segment).
    pub placement: String,
    pub tiers: Vec<TierStatus>,
    pub in_flight: Vec<InFlightMove>,
    pub pending_moves: usize,
    pub completed_moves: u64,
    pub dropped_moves: u64,
    /// `dropped_moves` by reason (`refused`, `pinned`, and the stale ones:
    /// `not_asked_again`, `waited_past_payback`, `room_taken_back`;
    /// `docs/placement.md`).
    #[serde(default)]
    pub dropped_moves_by_reason: tierd_core::placement::DroppedMoves,
    /// Moves finished since this start, by the rule that asked for them
    /// (`operator`, `pin`, or the policy's rule).
    #[serde(default)]
    pub completed_moves_by_rule: std::collections::BTreeMap<String, u64>,
    pub mean_move_ns: Option<f64>,
    /// Since start: the longest chunk copy (read, write and the write parts
    /// handed over for it; no user write waits for it) ...
    pub max_chunk_hold_ns: u64,
    /// ... and the longest switch-over (the most IO to a moving segment
    /// waited for its flip).
    pub max_switch_over_ns: u64,
    pub recent_moves: Vec<MoveRecord>,
    pub warnings: Vec<String>,
    /// Ranges whose only current copy is on a tier marked unavailable
    /// (adjacent segments merged); empty when everything can be read.
    pub unavailable: Vec<UnavailableRange>,
    /// Operator pins, by segment.
    pub pins: Vec<PinStatus>,
    /// The policy's last plan with its reason (also when it moved nothing).
    pub last_plan: Option<LastPlan>,
    /// A cache volume's cache (absent for other volumes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<super::CacheStatus>,
}

impl Volume {
    /// Everything `tierd status` shows.
    pub fn status(&self) -> VolumeStatus {
        let planner = self.planner.lock();
        let placement = planner.table.tiers_of();
        let in_flight = self.active_moves();
        VolumeStatus {
            name: self.options.name.clone(),
            size_bytes: self.options.size_bytes,
            segment_bytes: self.options.segment_bytes,
            segments: self.segments,
            policy: planner.policy.name().to_string(),
            periods_closed: planner.periods_closed,
            placement_by_tier: self
                .tiers
                .iter()
                .enumerate()
                .map(|(index, tier)| {
                    (
                        tier.name.clone(),
                        placement
                            .iter()
                            .filter(|tier| **tier as usize == index)
                            .count() as u32,
                    )
                })
                .collect(),
            placement: placement
                .iter()
                .map(|tier| char::from_digit(u32::from(*tier), 10).unwrap_or('?'))
                .collect(),
            tiers: self
                .tiers
                .iter()
                .enumerate()
                .map(|(index, tier)| {
                    let used = planner.table.used(index as TierId);
                    TierStatus {
                        name: tier.name.clone(),
                        volatile: tier.volatile,
                        write_through: tier.write_through,
                        capacity_segments: planner.table.capacity_segments(index as TierId),
                        used_segments: used,
                        used_bytes: u64::from(used) * self.options.segment_bytes,
                        capacity_bytes: tier.device.size_bytes(),
                        stats: tier.device.stats(),
                        failed: tier.device.failure(),
                        reduction: tier.device.reduction(),
                        replicas: tier.device.replicas(),
                    }
                })
                .collect(),
            in_flight,
            pending_moves: planner.table.queued_len(),
            completed_moves: planner.completed_moves,
            dropped_moves: planner.dropped.total(),
            dropped_moves_by_reason: planner.dropped,
            completed_moves_by_rule: planner.completed_by_rule.clone(),
            mean_move_ns: planner.mean_move_ns(),
            max_chunk_hold_ns: self.max_chunk_hold_ns.load(Ordering::Relaxed),
            max_switch_over_ns: self.max_switch_over_ns.load(Ordering::Relaxed),
            recent_moves: planner.recent.iter().cloned().collect(),
            warnings: self.warnings.lock().clone(),
            unavailable: self.unavailable_ranges(),
            pins: {
                let names = self.tier_names();
                planner
                    .pins
                    .values()
                    .map(|pin| {
                        PinStatus::new(pin, &names, placement.get(pin.segment as usize).copied())
                    })
                    .collect()
            },
            last_plan: planner.last_plan.clone(),
            cache: self.cache_status(),
        }
    }

    /// The monitor's open period so far, with every IO thread's records
    /// merged in: the figures the policy gets for it if it closed now (busy
    /// time 0: the devices' counters give that at the close).
    pub fn current_period(&self) -> PeriodStats {
        self.monitor.current()
    }

    /// Marks tier `name` unavailable (its device was lost, or a drill says
    /// so) or available again. Only changes what status reports: reads
    /// already fall back to home where home is current and fail otherwise.
    /// False when the volume has no such tier.
    pub fn set_tier_unavailable(&self, name: &str, unavailable: bool) -> bool {
        match self.tiers.iter().position(|tier| tier.name == name) {
            Some(index) => {
                self.unavailable_tiers[index].store(unavailable, Ordering::SeqCst);
                if unavailable && self.is_cache_tier(index) {
                    self.cache_tier_failed(&format!("tier {name} was marked unavailable"));
                }
                true
            }
            None => false,
        }
    }

    /// Looks at every tier's backing (a file truncated or replaced under the
    /// server fails its tier: IO to it then fails with EIO, never zeroes; a
    /// deleted one is still served from the open file and gets a status
    /// warning) and returns what changed at this check, per tier.
    /// The runner calls it about once a second.
    pub fn check_backings(&self) -> Vec<(String, String)> {
        let mut newly_failed = Vec::new();
        for (index, tier) in self.tiers.iter().enumerate() {
            if let Some(reason) = tier.device.check_backing() {
                if !self.unavailable_tiers[index].swap(true, Ordering::SeqCst) {
                    if self.is_cache_tier(index) {
                        self.cache_tier_failed(&reason);
                    }
                    newly_failed.push((tier.name.clone(), reason));
                }
            } else if let Some(warning) = tier.device.backing_warning() {
                let warning = format!("tier {}: {warning}", tier.name);
                let mut warnings = self.warnings.lock();
                if !warnings.contains(&warning) {
                    warnings.push(warning.clone());
                    newly_failed.push((tier.name.clone(), warning));
                }
            }
        }
        newly_failed
    }

    /// Segments on an unavailable tier whose home copy is not current, as
    /// byte ranges (adjacent segments on the same tier merged); every
    /// segment when home itself failed.
    pub fn unavailable_ranges(&self) -> Vec<UnavailableRange> {
        let home = self.home();
        let home_failed = self.unavailable_tiers[home as usize].load(Ordering::SeqCst);
        let mut ranges: Vec<UnavailableRange> = Vec::new();
        if self.is_cache() && !home_failed {
            return self.cache_lost_ranges();
        }
        for segment in 0..self.segments {
            let tier = self.entry(segment).location.tier;
            let lost = if tier == home {
                home_failed
            } else {
                self.unavailable_tiers[tier as usize].load(Ordering::SeqCst)
                    && (home_failed || !self.home_current[segment as usize].load(Ordering::Acquire))
            };
            if !lost {
                continue;
            }
            let name = &self.tiers[tier as usize].name;
            let start = u64::from(segment) * self.options.segment_bytes;
            let length = self
                .options
                .segment_bytes
                .min(self.options.size_bytes - start);
            match ranges.last_mut() {
                Some(last) if last.tier == *name && last.last_segment + 1 == segment => {
                    last.last_segment = segment;
                    last.length_bytes += length;
                }
                _ => ranges.push(UnavailableRange {
                    tier: name.clone(),
                    offset_bytes: start,
                    length_bytes: length,
                    first_segment: segment,
                    last_segment: segment,
                }),
            }
        }
        ranges
    }
}
