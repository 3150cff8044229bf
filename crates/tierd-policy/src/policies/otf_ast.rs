//! `otf-ast`: on-the-fly automated storage tiering, paper 000 §4.2 (and the
//! §5.4 persistent-IO rule). Doc page: `docs/policies/otf-ast.md`.
//!
//! Keep the home device's %util inside a band. From the mean of the last n
//! periods: above `up`, promote home segments in decreasing iops order until
//! the predicted home %util falls below `mid`; below `low`, demote fast-tier
//! segments in increasing iops order until it would rise above `mid`. The
//! predicted change of one segment is its iops × "%util per iops" (home %util
//! / home iops). The §5.4 rule promotes a segment that had IO in each of the
//! last m periods even when home is not overloaded.
//!
//! With more than two tiers the policy works between home and the tier just
//! above it (the "SSD"); other tiers are left alone.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use tierd_common::hash::{FastMap, FastSet};

use crate::policies::Policy;
use crate::view::{Move, MoveReason, PeriodStats, Plan, SegmentId, TierId, View};

/// The paper's period (000 §4.1.1.1: blktrace and iostat every minute). The
/// caller owns the period; this is the value the defaults below were set for.
pub const PAPER_PERIOD_NS: u64 = 60_000_000_000;

/// OTF-AST settings. Defaults are paper 000's values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtfAstConfig {
    /// n (000 §4.1.1.2): decisions use the mean of the last n completed
    /// periods; nothing is decided before n periods exist. Count of periods,
    /// ≥ 1 (0 is taken as 1). Paper: 2.
    pub window_periods: u32,
    /// %util^h_up (000 §4.2): above this home-device busy percentage (0–100)
    /// hot segments are promoted. Paper: 70.
    pub util_up_percent: f64,
    /// %util^h_md (000 §4.2): the percentage both corrections aim at.
    /// Paper: 50.
    pub util_mid_percent: f64,
    /// %util^h_lo (000 §4.2): below this percentage cold fast-tier segments
    /// are demoted. Paper: 10.
    pub util_low_percent: f64,
    /// 000 §4.1.1.3: while home %util is above `up`, the paper moved one
    /// segment every 60 s (one per 60 s period). At most this many promotions
    /// per period while home is above `up` (the demotion that makes room for a
    /// promotion rides with it); 0 = no limit. Other moves are paced by the
    /// caller only. Paper: 1 per 60 s period.
    pub max_promotions_per_period_above_up: u32,
    /// 000 §5.4: promote a segment with IO in each of the last
    /// `persistent_periods` periods even when home is not overloaded. Added
    /// in §5.4 for the comparison with flashcache; the paper's conclusion
    /// keeps it ("積極的に SSD への移動を行うロジックも必要"), so on by
    /// default. Set false to reproduce 000 Table 4, which ran without it.
    pub promote_persistent: bool,
    /// m (000 §5.4): consecutive periods with IO that make a segment
    /// persistent. Count of periods, ≥ 1; must not exceed the view's history
    /// (the monitor keeps 64). Paper: 8.
    pub persistent_periods: u32,
    /// Not in the paper (its SSD never filled): when the fast tier is full
    /// while home is above `up`, demote a fast-tier segment to make room for
    /// a hotter home segment.
    pub swap_when_full: bool,
    /// Not in the paper: a swap happens only when the candidate's iops is at
    /// least this many times the demoted segment's iops (hysteresis against
    /// ping-pong). Ratio ≥ 1. Default 2.
    pub swap_iops_ratio: f64,
    /// Hysteresis between the §5.4 rule and the low rule (ours): while
    /// `promote_persistent` is on, the low rule demotes only fast-tier
    /// segments without IO in the last this many periods. A segment with
    /// more recent IO is on its way to the m periods that promote it again
    /// (§5.4 expects such IO to go on; §4.2 chose `low` to avoid moving a
    /// segment back and forth). Count of periods; 0 = off. Default 8 (= m).
    pub demote_idle_periods: u32,
}

impl Default for OtfAstConfig {
    fn default() -> Self {
        Self {
            window_periods: 2,
            util_up_percent: 70.0,
            util_mid_percent: 50.0,
            util_low_percent: 10.0,
            max_promotions_per_period_above_up: 1,
            promote_persistent: true,
            persistent_periods: 8,
            swap_when_full: true,
            swap_iops_ratio: 2.0,
            demote_idle_periods: 8,
        }
    }
}

impl OtfAstConfig {
    /// Checks the settings; `Err` names the key and what it must be. The
    /// policy itself never panics on bad settings (it then simply moves
    /// less), but a caller should refuse them.
    pub fn validate(&self) -> Result<(), String> {
        let percent = |key: &str, value: f64| {
            if (0.0..=100.0).contains(&value) {
                Ok(())
            } else {
                Err(format!("{key} = {value}: must be a percentage in 0..=100"))
            }
        };
        percent("util_up_percent", self.util_up_percent)?;
        percent("util_mid_percent", self.util_mid_percent)?;
        percent("util_low_percent", self.util_low_percent)?;
        if !(self.util_low_percent <= self.util_mid_percent
            && self.util_mid_percent <= self.util_up_percent)
        {
            return Err(format!(
                "util_low_percent {} ≤ util_mid_percent {} ≤ util_up_percent {} must hold",
                self.util_low_percent, self.util_mid_percent, self.util_up_percent
            ));
        }
        if self.window_periods == 0 {
            return Err("window_periods = 0: must be at least 1".to_string());
        }
        if self.persistent_periods == 0 {
            return Err("persistent_periods = 0: must be at least 1".to_string());
        }
        if !(self.swap_iops_ratio.is_finite() && self.swap_iops_ratio >= 1.0) {
            return Err(format!(
                "swap_iops_ratio = {}: must be a finite ratio ≥ 1",
                self.swap_iops_ratio
            ));
        }
        Ok(())
    }
}

/// Learned state: the last measured "%util per iops" of home, kept as the
/// integers it came from (busy ns, IOs) so it survives JSON exactly. Used
/// when the current window has no home IO (everything hot already moved).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OtfAstState {
    util_per_iops_basis: Option<(u64, u64)>,
}

pub struct OtfAst {
    config: OtfAstConfig,
    state: OtfAstState,
}

impl OtfAst {
    pub fn new(config: OtfAstConfig) -> Self {
        Self {
            config,
            state: OtfAstState::default(),
        }
    }

    pub fn config(&self) -> &OtfAstConfig {
        &self.config
    }
}

/// One segment's mean over the decision window.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    segment: SegmentId,
    iops: f64,
}

fn by_iops_descending(a: &Candidate, b: &Candidate) -> Ordering {
    b.iops
        .total_cmp(&a.iops)
        .then_with(|| a.segment.cmp(&b.segment))
}

fn by_iops_ascending(a: &Candidate, b: &Candidate) -> Ordering {
    a.iops
        .total_cmp(&b.iops)
        .then_with(|| a.segment.cmp(&b.segment))
}

/// Segments with IO in every one of the last `periods` periods, which must be
/// consecutive (index + 1 each); empty when the history is shorter.
fn persistent_segments(history: &[PeriodStats], periods: usize) -> FastSet<SegmentId> {
    let mut persistent = FastSet::default();
    if periods == 0 || history.len() < periods {
        return persistent;
    }
    let recent = &history[history.len() - periods..];
    if recent
        .windows(2)
        .any(|pair| pair[0].index.checked_add(1) != Some(pair[1].index))
    {
        return persistent;
    }
    let (latest, earlier) = recent.split_last().expect("periods ≥ 1");
    for stats in &latest.segments {
        if stats.ios() > 0
            && earlier
                .iter()
                .all(|period| period.segment_ios(stats.segment) > 0)
        {
            persistent.insert(stats.segment);
        }
    }
    persistent
}

/// Segments with IO in any of the last `periods` periods.
fn active_segments(history: &[PeriodStats], periods: usize) -> FastSet<SegmentId> {
    let recent = &history[history.len().saturating_sub(periods)..];
    recent
        .iter()
        .flat_map(|period| period.segments.iter())
        .filter(|stats| stats.ios() > 0)
        .map(|stats| stats.segment)
        .collect()
}

impl Policy for OtfAst {
    fn name(&self) -> &'static str {
        "otf-ast"
    }

    fn restates_plan(&self) -> bool {
        true
    }

    fn plan(&mut self, view: &View) -> Plan {
        let mut plan = Plan::default();
        if view.tiers.len() < 2 {
            return Plan::nothing("one tier: nothing to move");
        }
        let home = view.home_tier();
        let fast: TierId = home - 1;
        let config = &self.config;
        let window_periods = config.window_periods.max(1) as usize;
        if view.history.len() < window_periods {
            return Plan::nothing(format!(
                "waiting for {window_periods} periods of history ({} so far): no move",
                view.history.len()
            ));
        }
        let window = &view.history[view.history.len() - window_periods..];
        let window_ns: u64 = window.iter().map(PeriodStats::period_ns).sum();
        if window_ns == 0 {
            return Plan::nothing("the window's periods have no length: no move");
        }
        let window_s = window_ns as f64 / 1e9;

        // Home device over the window (iostat -x means), counting the time
        // user IO was outstanding, not the migration copies: a copy keeps
        // the disk busy without any user load to relieve, and counting it
        // made moves cause more moves (see the doc page). A producer that
        // does not measure user-busy time (all 0) gives device busy time.
        let home_stats = || {
            window
                .iter()
                .filter_map(|period| period.tiers.get(home as usize))
        };
        let user_busy_ns: u64 = home_stats().map(|tier| tier.user_busy_ns).sum();
        let device_busy_ns: u64 = home_stats().map(|tier| tier.busy_ns).sum();
        let home_ios: u64 = home_stats().map(|tier| tier.ios).sum();
        let home_busy_ns = if user_busy_ns > 0 {
            user_busy_ns
        } else {
            device_busy_ns
        };
        let util_percent = (home_busy_ns as f64 * 100.0 / window_ns as f64).min(100.0);
        if home_ios > 0 {
            self.state.util_per_iops_basis = Some((home_busy_ns, home_ios));
        }
        // %util per iops = (busy/window × 100) / (ios/window) = 100 × busy_s / ios.
        let util_per_iops = self
            .state
            .util_per_iops_basis
            .map(|(busy_ns, ios)| busy_ns as f64 / 1e9 * 100.0 / ios as f64);
        let home_iops = home_ios as f64 / window_s;

        // Per-segment mean iops over the window.
        let mut ios_by_segment: FastMap<SegmentId, u64> = FastMap::default();
        for period in window {
            for stats in &period.segments {
                *ios_by_segment.entry(stats.segment).or_insert(0) += u64::from(stats.ios());
            }
        }
        let iops_of = |segment: SegmentId| {
            ios_by_segment.get(&segment).copied().unwrap_or(0) as f64 / window_s
        };
        // Segments no rule may pick: moving already, or pinned by an
        // operator (they keep their place and their slot).
        let moving: FastSet<SegmentId> = view
            .in_flight
            .iter()
            .map(|m| m.segment)
            .chain(view.pinned.iter().copied())
            .collect();
        let tier_of = |segment: SegmentId| view.placement.get(segment as usize).copied();

        // Moves in flight have not yet changed the measured %util: count them
        // as done so the same overload is not answered twice.
        let mut pending_percent = 0.0;
        if let Some(per_iops) = util_per_iops {
            for pending in view.in_flight {
                let change = iops_of(pending.segment) * per_iops;
                if pending.from == home && pending.to == fast {
                    pending_percent -= change;
                } else if pending.from == fast && pending.to == home {
                    pending_percent += change;
                }
            }
        }
        let effective_percent = util_percent + pending_percent;

        let fast_info = &view.tiers[fast as usize];
        let mut free_segments = fast_info
            .capacity_segments
            .saturating_sub(fast_info.used_segments);
        let persistent = if config.promote_persistent {
            persistent_segments(view.history, config.persistent_periods as usize)
        } else {
            FastSet::default()
        };
        let above_up = util_percent > config.util_up_percent;
        let promotion_limit = match config.max_promotions_per_period_above_up {
            0 => usize::MAX,
            limit if above_up => limit as usize,
            _ => usize::MAX,
        };
        let mut promoted: FastSet<SegmentId> = FastSet::default();
        let mut promotions = 0usize;
        let band = format!(
            "home util {util_percent:.1}% (mean of {window_periods} periods, {home_iops:.1} iops)"
        );

        let state = if above_up {
            format!("{band} > up {:.1}%", config.util_up_percent)
        } else if util_percent < config.util_low_percent {
            format!("{band} < low {:.1}%", config.util_low_percent)
        } else {
            format!(
                "{band}, inside {:.1}-{:.1}%",
                config.util_low_percent, config.util_up_percent
            )
        };
        let mut notes: Vec<String> = Vec::new();
        if above_up && util_per_iops.is_none() {
            notes.push("no %util per iops measured yet".to_string());
        }
        if above_up {
            if let Some(per_iops) = util_per_iops {
                let mut candidates: Vec<Candidate> = ios_by_segment
                    .keys()
                    .filter(|segment| tier_of(**segment) == Some(home) && !moving.contains(segment))
                    .map(|&segment| Candidate {
                        segment,
                        iops: iops_of(segment),
                    })
                    .collect();
                candidates.sort_by(by_iops_descending);
                let mut victims: Vec<Candidate> = (0..view.placement.len())
                    .filter_map(|index| {
                        let segment = SegmentId::try_from(index).ok()?;
                        (tier_of(segment) == Some(fast) && !moving.contains(&segment)).then(|| {
                            Candidate {
                                segment,
                                iops: iops_of(segment),
                            }
                        })
                    })
                    .collect();
                victims.sort_by(by_iops_ascending);
                let mut victims = victims.into_iter();
                let mut remaining_percent = effective_percent;
                let mut removed_percent = 0.0;
                for candidate in candidates {
                    if remaining_percent < config.util_mid_percent || promotions >= promotion_limit
                    {
                        break;
                    }
                    let mut change = candidate.iops * per_iops;
                    if free_segments > 0 {
                        free_segments -= 1;
                    } else if config.swap_when_full {
                        let Some(victim) = victims.next() else { break };
                        if victim.iops * config.swap_iops_ratio > candidate.iops {
                            break;
                        }
                        change -= victim.iops * per_iops;
                        plan.moves.push(Move {
                            segment: victim.segment,
                            from: fast,
                            to: home,
                            reason: MoveReason {
                                rule: "otf-ast:swap-out".to_string(),
                                detail: format!(
                                    "{band} > up {:.1}%; fast tier full; segment {} at {:.2} iops makes room for segment {} at {:.2} iops (ratio ≥ {:.1})",
                                    config.util_up_percent,
                                    victim.segment,
                                    victim.iops,
                                    candidate.segment,
                                    candidate.iops,
                                    config.swap_iops_ratio
                                ),
                            },
                        });
                    } else {
                        break;
                    }
                    removed_percent += change;
                    remaining_percent -= change;
                    promotions += 1;
                    promoted.insert(candidate.segment);
                    plan.moves.push(Move {
                        segment: candidate.segment,
                        from: home,
                        to: fast,
                        reason: MoveReason {
                            rule: "otf-ast:util-above-up".to_string(),
                            detail: format!(
                                "{band} > up {:.1}%; {per_iops:.4} %util/iops; segment iops {:.2} → -{:.2}%; sum {:.2}%, util after {:.1}% (moves until < mid {:.1}%)",
                                config.util_up_percent,
                                candidate.iops,
                                candidate.iops * per_iops,
                                removed_percent,
                                remaining_percent,
                                config.util_mid_percent
                            ),
                        },
                    });
                }
            }
        } else if util_percent < config.util_low_percent {
            let recently_active = if config.promote_persistent {
                active_segments(view.history, config.demote_idle_periods as usize)
            } else {
                FastSet::default()
            };
            let mut candidates: Vec<Candidate> = (0..view.placement.len())
                .filter_map(|index| {
                    let segment = SegmentId::try_from(index).ok()?;
                    (tier_of(segment) == Some(fast)
                        && !moving.contains(&segment)
                        && !persistent.contains(&segment)
                        && !recently_active.contains(&segment))
                    .then(|| Candidate {
                        segment,
                        iops: iops_of(segment),
                    })
                })
                .collect();
            candidates.sort_by(by_iops_ascending);
            let mut remaining_percent = effective_percent;
            let mut added_percent = 0.0;
            for candidate in candidates {
                if remaining_percent > config.util_mid_percent {
                    break;
                }
                // Without any measured %util per iops only idle segments can
                // be known not to load home.
                let change = match util_per_iops {
                    Some(per_iops) => candidate.iops * per_iops,
                    None if candidate.iops == 0.0 => 0.0,
                    None => break,
                };
                // Deviation: never demote into a predicted overload (the
                // segment would be promoted straight back).
                if remaining_percent + change > config.util_up_percent {
                    break;
                }
                added_percent += change;
                remaining_percent += change;
                plan.moves.push(Move {
                    segment: candidate.segment,
                    from: fast,
                    to: home,
                    reason: MoveReason {
                        rule: "otf-ast:util-below-low".to_string(),
                        detail: format!(
                            "{band} < low {:.1}%; {} %util/iops; segment iops {:.2} → +{change:.2}%; sum {added_percent:.2}%, util after {remaining_percent:.1}% (moves until > mid {:.1}%)",
                            config.util_low_percent,
                            util_per_iops.map_or("unknown".to_string(), |v| format!("{v:.4}")),
                            candidate.iops,
                            config.util_mid_percent
                        ),
                    },
                });
            }
        }

        if config.promote_persistent && !persistent.is_empty() {
            let mut candidates: Vec<Candidate> = persistent
                .iter()
                .filter(|segment| {
                    tier_of(**segment) == Some(home)
                        && !moving.contains(segment)
                        && !promoted.contains(segment)
                })
                .map(|&segment| Candidate {
                    segment,
                    iops: iops_of(segment),
                })
                .collect();
            candidates.sort_by(by_iops_descending);
            let newest = view.history.last().map_or(0, |period| period.index);
            let oldest =
                newest.saturating_sub(u64::from(config.persistent_periods).saturating_sub(1));
            let mut persistent_promotions = 0usize;
            for candidate in candidates {
                if free_segments == 0 || promotions >= promotion_limit {
                    break;
                }
                persistent_promotions += 1;
                free_segments -= 1;
                promotions += 1;
                plan.moves.push(Move {
                    segment: candidate.segment,
                    from: home,
                    to: fast,
                    reason: MoveReason {
                        rule: "otf-ast:persistent-io".to_string(),
                        detail: format!(
                            "IO in each of the last m = {} periods ({oldest}..={newest}); segment iops {:.2}; {band}",
                            config.persistent_periods, candidate.iops
                        ),
                    },
                });
            }
            if persistent_promotions > 0 {
                notes.push(format!(
                    "{persistent_promotions} with IO in each of the last m = {} periods",
                    config.persistent_periods
                ));
            }
        }
        if !view.pinned.is_empty() {
            notes.push(format!("{} pinned segments left alone", view.pinned.len()));
        }
        let promoted_count = plan.moves.iter().filter(|step| step.to == fast).count();
        let demoted_count = plan.moves.len() - promoted_count;
        let outcome = if plan.moves.is_empty() {
            "no move".to_string()
        } else {
            format!("{promoted_count} promotions, {demoted_count} demotions")
        };
        plan.summary = format!("{state}: {outcome}");
        for note in notes {
            plan.summary.push_str("; ");
            plan.summary.push_str(&note);
        }
        plan
    }

    fn save_state(&self) -> serde_json::Value {
        serde_json::to_value(self.state).unwrap_or(serde_json::Value::Null)
    }

    fn restore_state(&mut self, state: &serde_json::Value) -> Result<(), String> {
        self.state = serde_json::from_value(state.clone())
            .map_err(|error| format!("otf-ast state: {error}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{SegmentStats, TierPeriodStats};

    fn period(index: u64, segments: &[(SegmentId, u32)]) -> PeriodStats {
        PeriodStats {
            index,
            start_ns: index * PAPER_PERIOD_NS,
            end_ns: (index + 1) * PAPER_PERIOD_NS,
            segments: segments
                .iter()
                .map(|&(segment, reads)| SegmentStats {
                    segment,
                    reads,
                    ..SegmentStats::default()
                })
                .collect(),
            tiers: vec![TierPeriodStats::default(); 2],
        }
    }

    #[test]
    fn persistent_needs_every_period_and_consecutive_indexes() {
        let history: Vec<PeriodStats> = (0..3)
            .map(|index| period(index, &[(1, 1), (2, u32::from(index != 1))]))
            .collect();
        let persistent = persistent_segments(&history, 3);
        assert!(persistent.contains(&1));
        assert!(!persistent.contains(&2));
        assert!(persistent_segments(&history, 4).is_empty());
        let gap = vec![period(0, &[(1, 1)]), period(2, &[(1, 1)])];
        assert!(persistent_segments(&gap, 2).is_empty());
    }

    #[test]
    fn defaults_validate_and_bad_bands_do_not() {
        assert_eq!(OtfAstConfig::default().validate(), Ok(()));
        let inverted = OtfAstConfig {
            util_low_percent: 60.0,
            ..OtfAstConfig::default()
        };
        assert!(inverted
            .validate()
            .unwrap_err()
            .contains("util_low_percent"));
        let fraction = OtfAstConfig {
            util_up_percent: 170.0,
            ..OtfAstConfig::default()
        };
        assert!(fraction.validate().unwrap_err().contains("util_up_percent"));
    }

    #[test]
    fn state_round_trips_and_bad_state_is_refused() {
        let mut policy = OtfAst::new(OtfAstConfig::default());
        policy.state.util_per_iops_basis = Some((123_456_789, 42));
        let saved = policy.save_state();
        let mut restored = OtfAst::new(OtfAstConfig::default());
        restored.restore_state(&saved).unwrap();
        assert_eq!(restored.state, policy.state);
        let error = restored
            .restore_state(&serde_json::json!({"util_per_iops_basis": "x"}))
            .unwrap_err();
        assert!(error.starts_with("otf-ast state"));
    }
}
