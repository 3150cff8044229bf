//! Planning: the policy tick at each period end, the move queue, and
//! operator pins.

use tierd_core::placement::{Refusal, StaleInputs};
use tierd_policy::view::{MigrationStats, TierInfo};
use tierd_policy::{Move, MoveReason, SegmentId, TierId, View};

use crate::meta::{LastPlan, Pin, Record};

use super::{Planner, QueuedMove, Volume, VolumeError};

impl Volume {
    /// Segments never go to a cache volume's cache tier: it holds cached
    /// blocks, placed by the cache.
    fn check_not_cache_tier(&self, tier: TierId) -> Result<(), VolumeError> {
        if self.is_cache_tier(tier as usize) {
            return Err(VolumeError::Invalid(format!(
                "volume {} is a cache volume: tier {} holds its block cache, not segments (blocks go there by the cache's admission and promotions, `tierd status` shows why); `tierd move` and `tierd pin` place segments of tiered volumes (a `[volume.policy]` on the volume makes it tiered)",
                self.options.name, self.tiers[tier as usize].name
            )));
        }
        Ok(())
    }

    /// Queues an operator's move (`tierd move`). Checked again when it starts.
    pub fn request_move(
        &self,
        segment: SegmentId,
        to: TierId,
        why: &str,
    ) -> Result<(), VolumeError> {
        if segment >= self.segments {
            return Err(VolumeError::Invalid(format!(
                "segment {segment} is beyond the volume's {} segments",
                self.segments
            )));
        }
        if to as usize >= self.tiers.len() {
            return Err(VolumeError::Invalid(format!(
                "tier {to} does not exist (the stack has {} tiers, 0 = fastest)",
                self.tiers.len()
            )));
        }
        self.check_not_cache_tier(to)?;
        let mut planner = self.planner.lock();
        if let Some(pin) = planner.pins.get(&segment) {
            return Err(VolumeError::Invalid(format!(
                "segment {segment} of volume {} is pinned to tier {}; `tierd unpin` it first, or pin it to the other tier",
                self.options.name, self.tiers[pin.tier as usize].name
            )));
        }
        let from = planner.table.location(segment).tier;
        let now_ns = self.clock.now_ns();
        let planned = Move {
            segment,
            from,
            to,
            reason: MoveReason {
                rule: "operator".to_string(),
                detail: why.to_string(),
            },
        };
        planner
            .table
            .accept(
                segment,
                from,
                to,
                QueuedMove::new(planned, now_ns, None),
                false,
            )
            .map_err(|(refusal, _)| {
                VolumeError::Invalid(format!(
                    "segment {segment} of volume {} cannot move to {}: {}",
                    self.options.name,
                    self.tiers[to as usize].name,
                    refusal.describe(&self.tier_names())
                ))
            })
    }

    /// Moves waiting to start.
    pub fn pending_moves(&self) -> usize {
        self.planner.lock().table.queued_len()
    }

    /// Ends the monitor period if it is due: runs the policy and queues its
    /// moves; writes a checkpoint every `checkpoint_every_periods`. Returns
    /// true when a period closed.
    pub fn tick(&self) -> Result<bool, VolumeError> {
        let now_ns = self.clock.now_ns();
        if now_ns < self.monitor.period_end_ns() {
            return Ok(false);
        }
        let busy_now: Vec<u64> = self
            .tiers
            .iter()
            .map(|tier| tier.device.stats().map_or(0, |stats| stats.busy_ns))
            .collect();
        let mut guard = self.planner.lock();
        let planner = &mut *guard;
        // Every IO thread's shard merged in. The monitor stays locked
        // through the plan, so the policy reads the history where it is
        // (no copy); IO threads keep recording into their shards meanwhile
        // and never wait for it.
        let mut monitor = self.monitor.lock();
        if now_ns < monitor.period_end_ns() {
            return Ok(false);
        }
        let busy: Vec<u64> = busy_now
            .iter()
            .zip(&planner.last_busy_ns)
            .map(|(now, before)| now.saturating_sub(*before))
            .collect();
        monitor.close_period(&busy);
        // Catch up without planning on stale periods after a long stall.
        while monitor.period_end_ns() <= now_ns {
            monitor.close_period(&vec![0; self.tiers.len()]);
        }
        let history = monitor.history();
        planner.last_busy_ns = busy_now;
        planner.periods_closed += 1;
        self.expire_pins(planner);
        self.requeue_pinned_moves(planner);
        // A policy that restates its plans sees the queue as not made (its
        // plan lists again what it still wants; the simulator does the same).
        let restates = planner.policy.restates_plan();
        let mut in_flight: Vec<Move> = planner
            .table
            .queued()
            .filter(|queued| !restates || queued.item.is_operator())
            .map(|queued| queued.item.planned.clone())
            .collect();
        for active in self.active.read().iter() {
            in_flight.push(Move {
                segment: active.segment,
                from: active.from.tier,
                to: active.to.tier,
                reason: active.reason.clone(),
            });
        }
        let tiers: Vec<TierInfo> = self
            .tiers
            .iter()
            .enumerate()
            .map(|(index, tier)| TierInfo {
                name: tier.name.clone(),
                capacity_segments: planner.table.capacity_segments(index as TierId),
                used_segments: if restates {
                    // Operator moves stay counted: they are never dropped.
                    let operator = planner
                        .table
                        .queued()
                        .filter(|queued| queued.item.is_operator());
                    let (mut onto, mut off) = (0u32, 0u32);
                    for queued in operator {
                        onto += u32::from(queued.to == index as TierId);
                        off += u32::from(queued.from == index as TierId);
                    }
                    (planner.table.used_without_queue(index as TierId) + onto).saturating_sub(off)
                } else {
                    planner.table.used(index as TierId)
                },
            })
            .collect();
        let migration = MigrationStats {
            completed_moves: planner.completed_moves,
            mean_move_ns: planner.mean_move_ns(),
            device_move_ns: planner.mean_move_ns().or_else(|| self.device_move_ns()),
        };
        let pinned: Vec<SegmentId> = planner.pins.keys().copied().collect();
        let view = View {
            now_ns,
            period_ns: self.options.period_ns,
            segment_bytes: self.options.segment_bytes,
            segments: self.segments,
            history,
            placement: planner.table.tiers_of(),
            in_flight: &in_flight,
            tiers: &tiers,
            migration,
            pinned: &pinned,
        };
        let plan = planner.policy.plan(&view);
        let period_end_ns = history.last().map_or(now_ns, |period| period.end_ns);
        drop(monitor);
        let proposed = plan.moves.len();
        let mut queued = 0;
        let mut pinned_dropped = 0;
        // The stale rule (tierd_core::placement::stale_reason, the
        // simulator's too): queued moves the newest plan does not list
        // again, or that waited past their payback, go; operator moves and
        // pins never do.
        let asked: tierd_common::hash::FastSet<(SegmentId, TierId, TierId)> = plan
            .moves
            .iter()
            .map(|planned| (planned.segment, planned.from, planned.to))
            .collect();
        let pins = &planner.pins;
        let undone = planner.table.drop_stale(|queued| {
            let operator = queued.item.is_operator();
            StaleInputs {
                pinned: operator || pins.contains_key(&queued.segment),
                asked_again: (restates && !operator)
                    .then(|| asked.contains(&(queued.segment, queued.from, queued.to))),
                waited_ns: now_ns.saturating_sub(queued.item.accepted_ns),
                payback_ns: queued.item.payback_ns,
            }
        });
        planner.dropped.count_stale(&undone);
        let stale = undone.item.len() + undone.shed.len();
        // The queued moves the plan asked for again keep their place.
        let mut kept: tierd_common::hash::FastSet<(SegmentId, TierId, TierId)> = planner
            .table
            .queued()
            .filter(|queued| !queued.item.is_operator())
            .map(|queued| (queued.segment, queued.from, queued.to))
            .collect();
        for planned in plan.moves {
            // A pinned segment is never moved by a policy (the policies
            // see the pins in the view; this holds for any policy).
            if planner.pins.contains_key(&planned.segment) {
                planner.dropped.pinned += 1;
                pinned_dropped += 1;
                continue;
            }
            if restates && kept.remove(&(planned.segment, planned.from, planned.to)) {
                // Asked for again: it keeps its place in the queue.
                queued += 1;
                continue;
            }
            // The shared table's rules: the segment is where the plan
            // thinks, not queued or moving already, and the target has room.
            let (segment, from, to) = (planned.segment, planned.from, planned.to);
            if planner
                .table
                .accept(
                    segment,
                    from,
                    to,
                    QueuedMove::new(planned, now_ns, plan.payback_ns),
                    false,
                )
                .is_err()
            {
                planner.dropped.refused += 1;
                continue;
            }
            queued += 1;
        }
        let mut summary = plan.summary;
        if stale > 0 {
            summary.push_str(&format!("; {stale} stale queued moves dropped"));
        }
        if pinned_dropped > 0 {
            summary.push_str(&format!(
                "; {pinned_dropped} moves of pinned segments dropped by the engine"
            ));
        }
        planner.last_plan = Some(LastPlan {
            period_end_ns,
            planned_unix_ns: self.clock.unix_now_ns(),
            moves: proposed,
            queued,
            summary,
        });
        planner.periods_since_checkpoint += 1;
        let due = planner.periods_since_checkpoint >= self.options.checkpoint_every_periods;
        drop(guard);
        if due {
            self.checkpoint()?;
        }
        Ok(true)
    }

    /// Pins `segment` to tier `tier` (`tierd pin`): no policy moves it
    /// again, until `until_unix_ns` (wall time, [`Clock::unix_now_ns`]) when
    /// given, or until [`Volume::unpin`]. If it is elsewhere, an operator
    /// move to `tier` is queued first in line. The pin is journaled
    /// (fsynced) before this returns, so an acknowledged pin survives a
    /// crash; a pin replaces an earlier pin of the segment. Refused: a
    /// segment or tier out of range, an expiry already past, a tier with no
    /// free slot (slots promised to other pins' queued moves count as
    /// taken). Returns true when a move was queued.
    ///
    /// [`Clock::unix_now_ns`]: tierd_common::clock::Clock::unix_now_ns
    pub fn pin(
        &self,
        segment: SegmentId,
        tier: TierId,
        until_unix_ns: Option<u64>,
    ) -> Result<bool, VolumeError> {
        self.check_pin_target(segment)?;
        let Some(tier_state) = self.tiers.get(tier as usize) else {
            return Err(VolumeError::Invalid(format!(
                "tier {tier} does not exist (the stack has {} tiers, 0 = fastest)",
                self.tiers.len()
            )));
        };
        self.check_not_cache_tier(tier)?;
        let now_unix_ns = self.clock.unix_now_ns();
        if let Some(until) = until_unix_ns.filter(|until| *until <= now_unix_ns) {
            return Err(VolumeError::Invalid(format!(
                "the pin would end at {}, which has passed (now {})",
                tierd_common::units::format_rfc3339_utc(until),
                tierd_common::units::format_rfc3339_utc(now_unix_ns)
            )));
        }
        let mut planner = self.planner.lock();
        let current = planner.table.location(segment).tier;
        let arriving = planner
            .table
            .moving_to(segment)
            .is_some_and(|to| to.tier == tier);
        let needs_move = current != tier && !arriving;
        if needs_move && tier != self.home() {
            // Room as the table counts it (moves queued onto the tier hold
            // theirs); a queued move of this segment onto the tier gives its
            // room to the pin's move.
            let own = planner
                .table
                .queued()
                .any(|queued| queued.segment == segment && queued.to == tier);
            let room = planner.table.room(tier) + u32::from(own);
            if room == 0 {
                let queued_onto = planner
                    .table
                    .queued()
                    .filter(|queued| queued.to == tier)
                    .count();
                return Err(VolumeError::Invalid(format!(
                    "tier {} has no room to pin segment {segment} of volume {}: its {} slots are taken{}; unpin or move a segment off it first",
                    tier_state.name,
                    self.options.name,
                    planner.table.capacity_segments(tier),
                    if queued_onto > 0 {
                        format!(" or promised to {queued_onto} queued moves")
                    } else {
                        String::new()
                    }
                )));
            }
        }
        let pin = Pin {
            segment,
            tier,
            until_unix_ns,
        };
        // Planner, then journal: the order `checkpoint` takes them in, so a
        // checkpoint sees the pin if and only if it replaces this record.
        self.meta.lock().append(&Record::Pin {
            segment,
            tier,
            until_unix_ns,
        })?;
        planner.pins.insert(segment, pin);
        // A move of the segment queued before the pin would take it away.
        if let Some(undone) = planner.table.cancel(segment) {
            planner.dropped.pinned += 1;
            planner.dropped.room_taken_back += undone.shed.len() as u64;
        }
        if needs_move {
            // First in line. A segment moving elsewhere now gets its pin's
            // move queued once that move ends (`requeue_pinned_moves`).
            let planned = Move {
                segment,
                from: current,
                to: tier,
                reason: MoveReason {
                    rule: "operator".to_string(),
                    detail: "pinned with tierd pin".to_string(),
                },
            };
            let queued = QueuedMove::new(planned, self.clock.now_ns(), None);
            if let Err((refusal, _)) = planner.table.accept(segment, current, tier, queued, true) {
                if refusal != Refusal::Moving {
                    planner.events.push(format!(
                        "segment {segment} is pinned to tier {} but its move could not be queued yet: {}",
                        tier_state.name,
                        refusal.describe(&self.tier_names())
                    ));
                }
            }
        }
        Ok(needs_move)
    }

    /// Ends the pin of `segment` (`tierd unpin`), journaled before this
    /// returns. The segment stays where it is; policies may move it again.
    pub fn unpin(&self, segment: SegmentId) -> Result<Pin, VolumeError> {
        self.check_pin_target(segment)?;
        let mut planner = self.planner.lock();
        let Some(pin) = planner.pins.get(&segment).copied() else {
            return Err(VolumeError::Invalid(format!(
                "segment {segment} of volume {} is not pinned",
                self.options.name
            )));
        };
        self.meta.lock().append(&Record::Unpin { segment })?;
        planner.pins.remove(&segment);
        Ok(pin)
    }

    /// The operator pins, by segment.
    pub fn pins(&self) -> Vec<Pin> {
        self.planner.lock().pins.values().copied().collect()
    }

    /// Events for the log since the last call (an expired pin, a pin whose
    /// move was queued again).
    pub fn take_events(&self) -> Vec<String> {
        std::mem::take(&mut self.planner.lock().events)
    }

    fn check_pin_target(&self, segment: SegmentId) -> Result<(), VolumeError> {
        if segment >= self.segments {
            return Err(VolumeError::Invalid(format!(
                "segment {segment} is beyond volume {}'s {} segments (0 to {})",
                self.options.name,
                self.segments,
                self.segments.saturating_sub(1)
            )));
        }
        Ok(())
    }

    /// Drops the pins whose time has come (at a period end), journaling
    /// each; a failed append keeps the pin until the next period.
    fn expire_pins(&self, planner: &mut Planner) {
        let now_unix_ns = self.clock.unix_now_ns();
        let expired: Vec<Pin> = planner
            .pins
            .values()
            .filter(|pin| pin.until_unix_ns.is_some_and(|until| until <= now_unix_ns))
            .copied()
            .collect();
        for pin in expired {
            let tier = &self.tiers[pin.tier as usize].name;
            let until = tierd_common::units::format_rfc3339_utc(pin.until_unix_ns.unwrap_or(0));
            match self.meta.lock().append(&Record::Unpin {
                segment: pin.segment,
            }) {
                Ok(()) => {
                    planner.pins.remove(&pin.segment);
                    planner.events.push(format!(
                        "pin of segment {} to tier {tier} expired at {until}; policies may move it again",
                        pin.segment
                    ));
                }
                Err(error) => planner.events.push(format!(
                    "pin of segment {} to tier {tier} expired at {until} but could not be journaled ({error}); kept until the next period",
                    pin.segment
                )),
            }
        }
    }

    /// A pinned segment that is not on its tier (its move failed, was
    /// dropped, or a crash came first) gets its move queued again when
    /// nothing moves it and the tier has a free slot.
    fn requeue_pinned_moves(&self, planner: &mut Planner) {
        let pins: Vec<Pin> = planner.pins.values().copied().collect();
        for pin in pins {
            let current = planner.table.location(pin.segment).tier;
            if current == pin.tier
                || planner.table.is_moving(pin.segment)
                || planner.table.is_queued(pin.segment)
            {
                continue;
            }
            let planned = Move {
                segment: pin.segment,
                from: current,
                to: pin.tier,
                reason: MoveReason {
                    rule: "operator".to_string(),
                    detail: "pinned with tierd pin (its move queued again)".to_string(),
                },
            };
            // No room on the tier yet: tried again next period.
            if planner
                .table
                .accept(
                    pin.segment,
                    current,
                    pin.tier,
                    QueuedMove::new(planned, self.clock.now_ns(), None),
                    true,
                )
                .is_ok()
            {
                planner.events.push(format!(
                    "segment {} is pinned to tier {} but is on {}: its move is queued again",
                    pin.segment,
                    self.tiers[pin.tier as usize].name,
                    self.tiers[current as usize].name
                ));
            }
        }
    }
}
