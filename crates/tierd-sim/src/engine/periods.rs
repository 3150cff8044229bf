//! Period ends: the View for the policy, its plan, the per-period record.

use super::*;

impl<'run> Engine<'run> {
    // ----- periods ---------------------------------------------------------

    pub(super) fn used_bytes(&self, tier: usize) -> u64 {
        if tier == self.home {
            return self.config.volume_bytes;
        }
        match &self.controller {
            Controller::Cache(cache) => {
                if tier == 0 {
                    cache.occupancy_blocks() * cache.settings().block_bytes
                } else {
                    0
                }
            }
            Controller::Policy(_) => {
                let tier = tier as TierId;
                u64::from(self.table.capacity_segments(tier) - self.table.free_slots(tier))
                    * self.config.segment_bytes
            }
        }
    }

    pub(super) fn close_period(&mut self, end_ns: u64, last: bool) -> Result<(), SimError> {
        self.now_ns = self.now_ns.max(end_ns);
        for tier in 0..self.devices.len() {
            self.advance_device(tier)?;
        }
        let tiers = self.devices.len();
        let counters: Vec<DeviceCounters> = self
            .devices
            .iter()
            .map(|device| device.counters())
            .collect();
        let deltas: Vec<DeviceCounters> = counters
            .iter()
            .zip(&self.period_snapshot)
            .map(|(now, before)| now.since(before))
            .collect();
        let busy: Vec<u64> = deltas.iter().map(|delta| delta.busy_ns).collect();
        let mut user_busy = vec![0u64; tiers];
        for (tier, user_busy) in user_busy.iter_mut().enumerate() {
            if self.user_outstanding[tier] > 0 {
                let since = self.user_busy_since_ns[tier];
                self.user_busy_ns[tier] += self.now_ns.saturating_sub(since);
                self.user_busy_since_ns[tier] = self.now_ns;
            }
            *user_busy = std::mem::take(&mut self.user_busy_ns[tier]);
            self.monitor.record_user_busy(tier as TierId, *user_busy);
        }
        let start_ns = self.monitor.period_end_ns() - self.config.period_ns;
        let closed = self.monitor.close_period(&busy);
        let index = closed.index;
        let user_ios: Vec<(u64, u64)> = closed
            .tiers
            .iter()
            .map(|tier| (tier.ios, tier.migration_ios))
            .collect();
        let record_end_ns = if last {
            end_ns
        } else {
            start_ns + self.config.period_ns
        };
        let duration_ns = record_end_ns.saturating_sub(start_ns).max(1);
        let mut tier_periods = Vec::with_capacity(tiers);
        for tier in 0..tiers {
            let delta = &deltas[tier];
            let device_ios = delta.ios();
            let used_bytes = self.used_bytes(tier);
            self.used_bytes_max[tier] = self.used_bytes_max[tier].max(used_bytes);
            tier_periods.push(TierPeriod {
                user_ios: user_ios[tier].0,
                migration_ios: user_ios[tier].1,
                device_ios,
                iops: device_ios as f64 * 1e9 / duration_ns as f64,
                util: (delta.busy_ns as f64 / duration_ns as f64).min(1.0),
                user_util: (user_busy[tier] as f64 / duration_ns as f64).min(1.0),
                svctm_ms: ratio_ms(u128::from(delta.busy_ns), device_ios),
                await_ms: ratio_ms(u128::from(delta.response_ns_total), device_ios),
                used_bytes,
            });
        }
        let counters_now = std::mem::take(&mut self.period_counters);
        self.periods.push(PeriodRecord {
            index,
            start_ns,
            end_ns: record_end_ns,
            requests: counters_now.requests,
            avg_response_us: if counters_now.requests == 0 {
                0.0
            } else {
                counters_now.response_ns_total as f64 / counters_now.requests as f64 / 1e3
            },
            moves_started: counters_now.moves_started,
            moves_finished: counters_now.moves_finished,
            tiers: tier_periods,
        });
        self.period_snapshot = counters;
        if !last {
            self.plan_moves(end_ns);
            self.pump_writebacks();
        }
        Ok(())
    }

    pub(super) fn plan_moves(&mut self, end_ns: u64) {
        let Controller::Policy(policy) = &mut self.controller else {
            return;
        };
        // A policy that restates its plans sees the queue as not made (its
        // plan lists again what it still wants); others see it in flight.
        let restates = policy.restates_plan();
        let in_flight: Vec<Move> = self
            .active
            .iter()
            .flatten()
            .map(|active| active.plan.clone())
            .chain(
                self.table
                    .queued()
                    .filter(|_| !restates)
                    .map(|queued| queued.item.plan.clone()),
            )
            .collect();
        let tier_infos: Vec<TierInfo> = self
            .config
            .stack
            .tiers
            .iter()
            .enumerate()
            .map(|(index, tier)| TierInfo {
                name: tier.name.clone(),
                capacity_segments: self.table.capacity_segments(index as TierId),
                used_segments: if restates {
                    self.table.used_without_queue(index as TierId)
                } else {
                    self.table.used(index as TierId)
                },
            })
            .collect();
        let completed_moves = self.move_log.len() as u64;
        let view = View {
            now_ns: end_ns,
            period_ns: self.config.period_ns,
            segment_bytes: self.config.segment_bytes,
            segments: self.segments as u32,
            history: self.monitor.history(),
            placement: self.table.tiers_of(),
            in_flight: &in_flight,
            tiers: &tier_infos,
            migration: MigrationStats {
                completed_moves,
                mean_move_ns: (completed_moves > 0)
                    .then(|| self.moved_ns_total as f64 / completed_moves as f64),
                device_move_ns: self.device_move_ns,
            },
            // The simulator has no operator: nothing is pinned.
            pinned: &[],
        };
        let plan = policy.plan(&view);
        if !plan.moves.is_empty() || self.table.queued_len() > 0 {
            self.accept_plan(plan, restates);
        }
    }
}
