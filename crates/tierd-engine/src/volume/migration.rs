//! Online migration: starting the next queued move, copying it a chunk at
//! a time, and finishing (flip) or abandoning it.

use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use tierd_policy::{Move, TierId};

use crate::meta::{Location, MoveRecord, Record};

use super::{ActiveMove, InFlightMove, StepOutcome, Volume, RECENT_MOVES};

impl Volume {
    /// True while a move is being copied.
    pub fn is_migrating(&self) -> bool {
        self.active.read().is_some()
    }

    fn start_next_move(&self) -> Option<Arc<ActiveMove>> {
        let home = self.home();
        loop {
            // The pin is read with the queue (planner before entry locks,
            // the order `tick` takes them in).
            let (planned, pin) = {
                let mut planner = self.planner.lock();
                let planned = planner.pending.pop_front()?;
                let pin = planner.pins.get(&planned.segment).copied();
                (planned, pin)
            };
            let segment = planned.segment;
            let mut guard = self.entries[segment as usize].write();
            let from = guard.location;
            let drop_reason = if guard.moving {
                Some("segment already moving".to_string())
            } else if let Some(pin) = pin.filter(|pin| pin.tier != planned.to) {
                Some(format!(
                    "segment is pinned to {}",
                    self.tiers[pin.tier as usize].name
                ))
            } else if from.tier != planned.from && planned.reason.rule != "operator" {
                Some(format!(
                    "segment is on {} now, not {}",
                    self.tiers[from.tier as usize].name, self.tiers[planned.from as usize].name
                ))
            } else if from.tier == planned.to {
                Some("segment is already there".to_string())
            } else {
                None
            };
            let to = if drop_reason.is_none() {
                if planned.to == home {
                    Some(Location {
                        tier: home,
                        slot: segment,
                    })
                } else {
                    self.tiers[planned.to as usize]
                        .free_slots
                        .lock()
                        .pop()
                        .map(|slot| Location {
                            tier: planned.to,
                            slot,
                        })
                }
            } else {
                None
            };
            let Some(to) = to else {
                drop(guard);
                let reason = drop_reason.unwrap_or_else(|| {
                    format!("tier {} is full", self.tiers[planned.to as usize].name)
                });
                self.record_finished(
                    &planned,
                    from,
                    0,
                    self.clock.now_ns(),
                    format!("dropped: {reason}"),
                );
                continue;
            };
            // Counted on the target from the start (home included, as the
            // simulator counts it), released from the source at the flip.
            self.tiers[to.tier as usize]
                .used_segments
                .fetch_add(1, Ordering::Relaxed);
            let chunks = self
                .options
                .segment_bytes
                .div_ceil(self.options.chunk_bytes) as usize;
            // Demoting a segment whose home copy is current needs no copy:
            // every chunk counts as copied, so writes mirror to home at once.
            let clean_demotion =
                to.tier == home && self.home_current[segment as usize].load(Ordering::Acquire);
            let active = Arc::new(ActiveMove {
                segment,
                from,
                to,
                reason: planned.reason.clone(),
                started_ns: self.clock.now_ns(),
                chunk_locks: (0..chunks).map(|_| RwLock::new(())).collect(),
                copied: (0..chunks)
                    .map(|_| AtomicBool::new(clean_demotion))
                    .collect(),
                next_chunk: AtomicU32::new(if clean_demotion { chunks as u32 } else { 0 }),
                copied_bytes: AtomicU64::new(0),
            });
            *self.active.write() = Some(active.clone());
            guard.moving = true;
            return Some(active);
        }
    }

    /// Does one unit of migration work: starts the next queued move if none
    /// is active, copies one chunk, or finishes the move when all chunks are
    /// copied. The caller paces calls (see [`crate::runner`]).
    pub fn copy_step(&self) -> StepOutcome {
        let current = self.active.read().clone();
        let active = match current {
            Some(active) => active,
            None => match self.start_next_move() {
                Some(active) => active,
                None => return StepOutcome::Idle,
            },
        };
        let chunks = active.copied.len() as u32;
        let chunk = active.next_chunk.load(Ordering::Relaxed);
        if chunk < chunks {
            let chunk_bytes = self.options.chunk_bytes;
            let start = u64::from(chunk) * chunk_bytes;
            let length = chunk_bytes.min(self.options.segment_bytes - start);
            let hold_started_ns = self.clock.now_ns();
            let result = {
                let _exclusive = active.chunk_locks[chunk as usize].write();
                let mut buffer = self.copy_buffer.lock();
                buffer.resize(length as usize, 0);
                let source = &self.tiers[active.from.tier as usize].device;
                let target = &self.tiers[active.to.tier as usize].device;
                let home_too = self.home_too(&active);
                source
                    .read_at(self.slot_offset(active.from) + start, &mut buffer)
                    .and_then(|()| target.write_at(self.slot_offset(active.to) + start, &buffer))
                    .and_then(|()| {
                        if home_too {
                            self.tiers[self.home() as usize].device.write_at(
                                u64::from(active.segment) * self.options.segment_bytes + start,
                                &buffer,
                            )
                        } else {
                            Ok(())
                        }
                    })
                    .map(|()| active.copied[chunk as usize].store(true, Ordering::Release))
            };
            self.max_chunk_hold_ns.fetch_max(
                self.clock.now_ns().saturating_sub(hold_started_ns),
                Ordering::Relaxed,
            );
            match result {
                Ok(()) => {
                    active.next_chunk.store(chunk + 1, Ordering::Relaxed);
                    active.copied_bytes.fetch_add(length, Ordering::Relaxed);
                    self.monitor.record_migration_io(active.from.tier, length);
                    self.monitor.record_migration_io(active.to.tier, length);
                    StepOutcome::Copied { bytes: length }
                }
                Err(error) => self.abandon(&active, &format!("failed: {error}")),
            }
        } else {
            self.finish(&active)
        }
    }

    /// A move onto a write-through (volatile) tier from another fast tier
    /// also copies to home, so home backs the RAM copy after the flip.
    fn home_too(&self, active: &ActiveMove) -> bool {
        active.from.tier != self.home() && self.tiers[active.to.tier as usize].write_through
    }

    /// Gives `location`'s slot back to its tier (home slots are fixed).
    pub(super) fn release(&self, location: Location, home: TierId) {
        let tier = &self.tiers[location.tier as usize];
        if location.tier != home {
            tier.free_slots.lock().push(location.slot);
        }
        tier.used_segments.fetch_sub(1, Ordering::Relaxed);
    }

    fn abandon(&self, active: &Arc<ActiveMove>, outcome: &str) -> StepOutcome {
        let home = self.home();
        {
            let mut guard = self.entries[active.segment as usize].write();
            guard.moving = false;
            *self.active.write() = None;
        }
        self.release(active.to, home);
        self.record_finished(
            &active.as_move(),
            active.from,
            active.copied_bytes.load(Ordering::Relaxed),
            active.started_ns,
            outcome.to_string(),
        );
        StepOutcome::Failed {
            segment: active.segment,
        }
    }

    fn finish(&self, active: &Arc<ActiveMove>) -> StepOutcome {
        let home = self.home();
        // The copied data must be durable before the mapping that points at it
        // (on home too when home is what backs a volatile target).
        let mut flushed = self.tiers[active.to.tier as usize].device.flush();
        if flushed.is_ok() && self.home_too(active) {
            flushed = self.tiers[home as usize].device.flush();
        }
        if let Err(error) = flushed {
            return self.abandon(active, &format!("failed: flushing the target: {error}"));
        }
        // Timed to the journal append: the record carries it, so the mean
        // move time survives a restart that replays the record.
        let elapsed_ns = self.clock.now_ns().saturating_sub(active.started_ns);
        {
            let mut meta = self.meta.lock();
            if let Err(error) = meta.append(&Record::Place {
                segment: active.segment,
                location: active.to,
                move_ns: Some(elapsed_ns),
            }) {
                drop(meta);
                return self.abandon(active, &format!("failed: journal: {error}"));
            }
            let switch_started_ns = self.clock.now_ns();
            let mut guard = self.entries[active.segment as usize].write();
            guard.location = active.to;
            guard.moving = false;
            let target = &self.tiers[active.to.tier as usize];
            let home_current = active.to.tier == home
                || target.write_through
                || (active.from.tier == home
                    && self.home_current[active.segment as usize].load(Ordering::Acquire));
            self.home_current[active.segment as usize].store(home_current, Ordering::Release);
            *self.active.write() = None;
            drop(guard);
            self.max_switch_over_ns.fetch_max(
                self.clock.now_ns().saturating_sub(switch_started_ns),
                Ordering::Relaxed,
            );
        }
        self.release(active.from, home);
        {
            let mut planner = self.planner.lock();
            planner.completed_moves += 1;
            planner.timed_moves += 1;
            planner.total_move_ns += elapsed_ns as f64;
        }
        self.record_finished(
            &active.as_move(),
            active.from,
            active.copied_bytes.load(Ordering::Relaxed),
            active.started_ns,
            "done".to_string(),
        );
        StepOutcome::Finished {
            segment: active.segment,
        }
    }

    fn record_finished(
        &self,
        planned: &Move,
        from: Location,
        bytes: u64,
        started_ns: u64,
        outcome: String,
    ) {
        let record = MoveRecord {
            segment: planned.segment,
            from: self.tiers[from.tier as usize].name.clone(),
            to: self
                .tiers
                .get(planned.to as usize)
                .map_or_else(|| format!("tier {}", planned.to), |tier| tier.name.clone()),
            rule: planned.reason.rule.clone(),
            detail: planned.reason.detail.clone(),
            started_ns,
            finished_ns: self.clock.now_ns(),
            bytes_copied: bytes,
            outcome,
        };
        let mut planner = self.planner.lock();
        if !record.outcome.starts_with("done") && !record.outcome.starts_with("failed") {
            planner.dropped_moves += 1;
        }
        if planner.recent.len() == RECENT_MOVES {
            planner.recent.pop_front();
        }
        planner.recent.push_back(record);
    }

    /// The move being copied now, if any.
    pub fn active_move(&self) -> Option<InFlightMove> {
        self.active.read().as_ref().map(|active| InFlightMove {
            segment: active.segment,
            from: self.tiers[active.from.tier as usize].name.clone(),
            to: self.tiers[active.to.tier as usize].name.clone(),
            rule: active.reason.rule.clone(),
            detail: active.reason.detail.clone(),
            copied_bytes: active.copied_bytes.load(Ordering::Relaxed),
            total_bytes: self.options.segment_bytes,
        })
    }
}
