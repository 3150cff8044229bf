//! The run's result: totals, per-tier and per-period figures.

use tierd_core::cache::Rule;

use super::*;
use crate::result::{AdaptiveResult, SmrStagingResult};

impl<'run> Engine<'run> {
    // ----- result ----------------------------------------------------------

    pub(super) fn finish(self, policy_name: &str) -> RunResult {
        let elapsed_ns = self.last_completion_ns;
        let seconds = elapsed_ns as f64 / 1e9;
        let avg_iops = if seconds > 0.0 {
            self.completed as f64 / seconds
        } else {
            0.0
        };
        let first_hour_seconds = seconds.min(HOUR_NS as f64 / 1e9);
        let avg_iops_first_hour = if first_hour_seconds > 0.0 {
            self.completed_first_hour as f64 / first_hour_seconds
        } else {
            0.0
        };
        let tiers = self.devices.len();
        let user_pieces: u64 = self.tier_response.iter().map(Histogram::count).sum();
        let mut tier_results = Vec::with_capacity(tiers);
        for tier in 0..tiers {
            let counters = self.devices[tier].counters();
            let ios = counters.ios();
            let histogram = self.tier_response[tier].clone();
            let spec = &self.config.stack.tiers[tier];
            tier_results.push(TierResult {
                name: spec.name.clone(),
                device: crate::stack::device_name(spec.device),
                capacity_bytes: self.config.tier_capacity_bytes(tier),
                user_ios: histogram.count(),
                user_bytes: self.tier_bytes[tier],
                io_share: share(histogram.count(), user_pieces),
                avg_response_us: histogram.mean_ns().unwrap_or(0.0) / 1e3,
                response: histogram,
                util: if elapsed_ns > 0 {
                    (counters.busy_ns as f64 / elapsed_ns as f64).min(1.0)
                } else {
                    0.0
                },
                svctm_ms: ratio_ms(u128::from(counters.busy_ns), ios),
                await_ms: ratio_ms(u128::from(counters.response_ns_total), ios),
                iops: if seconds > 0.0 {
                    ios as f64 / seconds
                } else {
                    0.0
                },
                counters,
                used_bytes_max: self.used_bytes_max[tier],
            });
        }
        let cache = match &self.controller {
            Controller::Cache(cache) => {
                let counters = cache.counters();
                let ours = &self.cache_counters;
                let settings = cache.settings();
                let accesses = counters.read_blocks + counters.write_blocks;
                let hits = counters.read_hit_blocks + counters.write_hit_blocks;
                Some(CacheResult {
                    kind: settings.policy.name().to_string(),
                    capacity_pages: u64::from(settings.slots) * settings.block_bytes / 4096,
                    block_bytes: settings.block_bytes,
                    slots: u64::from(settings.slots),
                    mode: settings.mode.to_string(),
                    admission: settings.admission.to_string(),
                    adaptive: cache.adaptive_status().map(|status| AdaptiveResult {
                        rule_end: status.rule.to_string(),
                        epochs: status.epochs,
                        switches: status.switches,
                        epochs_by_rule: Rule::CANDIDATES
                            .iter()
                            .zip(status.epochs_by_rule)
                            .map(|(rule, epochs)| (rule.to_string(), epochs))
                            .collect(),
                        home_utilization: status.home_utilization,
                        fast_utilization: status.fast_utilization,
                        efficiency: status.efficiency,
                        promotion: status.promotion.clone(),
                    }),
                    sequential_cutoff_bytes: settings.sequential_cutoff_bytes,
                    page_accesses: accesses,
                    page_hits: hits,
                    hit_ratio: share(hits, accesses),
                    read_pages: counters.read_blocks,
                    read_hit_pages: counters.read_hit_blocks,
                    read_hit_ratio: share(counters.read_hit_blocks, counters.read_blocks),
                    write_pages: counters.write_blocks,
                    write_hit_pages: counters.write_hit_blocks,
                    write_hit_ratio: share(counters.write_hit_blocks, counters.write_blocks),
                    dirty_evictions: counters.dirty_evictions,
                    clean_evictions: counters.clean_evictions,
                    writebacks: counters.writebacks,
                    dirty_blocks_max: ours.dirty_blocks_max,
                    dirty_blocks_end: cache.dirty_blocks(),
                    bypassed: counters.bypassed,
                    rejected: counters.rejected,
                    no_slot: counters.no_slot,
                    fills: ours.fills,
                    split_fills: ours.split_fills,
                    fill_bytes: ours.fill_bytes,
                    writeback_bytes: ours.writeback_bytes,
                    merge_read_bytes: ours.merge_read_bytes,
                    fast_access_ratio: share(
                        counters.read_hit_blocks + ours.fast_write_blocks,
                        accesses,
                    ),
                    smr: cache.smr().map(|smr| SmrStagingResult {
                        band_bytes: smr.band_bytes,
                        band_rewrites: counters.band_rewrites,
                        band_rewrite_blocks: counters.band_rewrite_blocks,
                        destage_read_bytes: ours.destage_read_bytes,
                        destage_write_bytes: ours.destage_write_bytes,
                        home_write_blocks: counters.smr_home_writes,
                        blocked_blocks: counters.blocked_blocks,
                    }),
                })
            }
            Controller::Policy(_) => None,
        };
        let fast_io_share = match &cache {
            Some(cache) => cache.fast_access_ratio,
            None => share(self.tier_response[0].count(), user_pieces),
        };
        let moves = self.move_log.len() as u64;
        let home_svctm_ms = tier_results[self.home].svctm_ms;
        let home_util = tier_results[self.home].util;
        let to_us = |ns: Option<u64>| ns.map_or(0.0, |ns| ns as f64 / 1e3);
        let (replicas, disk_access_ms, replica) = self.replica_result();
        RunResult {
            policy: policy_name.to_string(),
            replicas,
            disk_access_ms,
            replica,
            avg_iops,
            avg_response_us: self.response.mean_ns().unwrap_or(0.0) / 1e3,
            fast_io_share,
            fast_bytes_max: self.used_bytes_max[0],
            fast_bytes: match &cache {
                // The capacity the cache was given (its slots are the whole
                // blocks of it).
                Some(_) => self
                    .config
                    .cache_bytes
                    .unwrap_or_else(|| self.config.tier_capacity_bytes(0)),
                None => self.config.tier_capacity_bytes(0),
            },
            fast_segments: cache
                .is_none()
                .then(|| self.table.capacity_segments(0).into()),
            migrated_bytes: self.move_log.iter().map(|record| record.bytes).sum(),
            avg_iops_first_hour,
            requests: self.completed,
            reads: self.reads,
            writes: self.writes,
            bytes: self.bytes,
            pieces: self.pieces_total,
            empty_requests: self.cursor.empty_requests,
            reordered_requests: self.cursor.reordered_requests,
            deferred_requests: self.deferred_requests,
            defer_mean_us: if self.deferred_requests > 0 {
                self.defer_ns_total as f64 / self.deferred_requests as f64 / 1e3
            } else {
                0.0
            },
            defer_max_us: self.defer_ns_max as f64 / 1e3,
            elapsed_ns,
            last_arrival_ns: self.last_arrival_ns,
            response_p50_us: to_us(self.response.quantile_ns(0.5)),
            response_p90_us: to_us(self.response.quantile_ns(0.9)),
            response_p99_us: to_us(self.response.quantile_ns(0.99)),
            response_p999_us: to_us(self.response.quantile_ns(0.999)),
            response_max_us: to_us(self.response.max_ns()),
            response: self.response.clone(),
            directions: self.directions.figures(),
            home_svctm_ms,
            home_util,
            moves,
            moves_unfinished: (self.table.moving_len() + self.table.queued_len()) as u64,
            moves_dropped: self.dropped.total(),
            moves_dropped_by_reason: self.dropped,
            queue_wait_mean_us: if moves > 0 {
                self.move_log
                    .iter()
                    .map(|record| record.start_ns.saturating_sub(record.accepted_ns) as f64)
                    .sum::<f64>()
                    / moves as f64
                    / 1e3
            } else {
                0.0
            },
            queue_wait_max_us: self
                .move_log
                .iter()
                .map(|record| record.start_ns.saturating_sub(record.accepted_ns))
                .max()
                .unwrap_or(0) as f64
                / 1e3,
            switch_over_stall_max_us: self
                .move_log
                .iter()
                .map(|record| record.stall_ns)
                .max()
                .unwrap_or(0) as f64
                / 1e3,
            switch_over_stall_mean_us: if moves > 0 {
                self.move_log
                    .iter()
                    .map(|record| record.stall_ns as f64)
                    .sum::<f64>()
                    / moves as f64
                    / 1e3
            } else {
                0.0
            },
            stalled_pieces: self.move_log.iter().map(|record| record.held_pieces).sum(),
            mirrored_writes: self.mirrored_writes,
            deferred_target_halves: self.deferred_halves,
            mirror_wait_max_us: self.mirror_wait_ns_max as f64 / 1e3,
            mirror_wait_mean_us: if self.mirrored_writes > 0 {
                self.mirror_wait_ns_total as f64 / self.mirrored_writes as f64 / 1e3
            } else {
                0.0
            },
            move_mean_us: (moves > 0).then(|| self.moved_ns_total as f64 / moves as f64 / 1e3),
            tiers: tier_results,
            cache,
            gain: None,
            move_log: self.move_log,
            periods: self.periods,
            settings: RunSettings {
                segment_bytes: self.config.segment_bytes,
                volume_bytes: self.config.volume_bytes,
                segments: self.segments,
                period_ns: self.config.period_ns,
                replay: self.config.replay,
                window: self.config.window,
                seed: self.config.seed,
                chunk_bytes: self.config.stack.migration.chunk_bytes,
                max_concurrent_moves: self.config.stack.migration.max_concurrent_moves,
                max_outstanding_requests: self.config.max_outstanding_requests,
                cache_bytes: self.config.cache_bytes,
            },
        }
    }
}
