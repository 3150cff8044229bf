//! Online migration with real devices and threads, driven by the shared
//! move state machine ([`tierd_core::moves::MoveMachine`], the code the
//! simulator runs in virtual time).
//!
//! Several moves copy at once (up to `max_concurrent_moves`), each with up to
//! `chunks_in_flight` chunks in flight: every call of [`Volume::copy_step`]
//! does one unit of work (one chunk copy, with the parts handed over for
//! it, or a flip), so N copier threads calling it keep N chunks in flight.
//! No lock is held across device IO except the move's own bookkeeping
//! between IOs; a user write never waits for a chunk copy (see
//! `tierd_core::moves` for the rule and `io.rs` for the write side).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tierd_core::moves::{Decision, HandedOver, Landing, MoveMachine, Part, Step};
use tierd_core::placement::home_current_after_flip;
use tierd_policy::{Move, SegmentId};

use crate::device::DeviceError;
use crate::meta::{Location, MoveRecord, Record};

use super::io::Mutation;
use super::{
    ActiveMove, ChunkRead, CopyBegun, Handed, InFlightMove, MoveState, StepOutcome, Volume,
    RECENT_MOVES,
};

impl Volume {
    /// True while a move is being copied.
    pub fn is_migrating(&self) -> bool {
        !self.active.read().is_empty()
    }

    /// Starts queued moves while fewer than `max_concurrent_moves` copy.
    fn start_queued_moves(&self) {
        let limit = self.options.migration.max_concurrent_moves.max(1) as usize;
        while self.active.read().len() < limit {
            if self.start_next_move().is_none() {
                return;
            }
        }
    }

    fn start_next_move(&self) -> Option<Arc<ActiveMove>> {
        let home = self.home();
        // Planner, then the entry (the order `tick` and the flip take
        // them in). The table picks the move (the first queued one whose
        // target has a free slot) and its slot; it accepted the move against
        // the pins and the placement when it was queued, and a pin since
        // took it out of the queue.
        let mut planner = self.planner.lock();
        let started = planner.table.start_next()?;
        let segment = started.segment;
        let (from, to) = (started.from, started.to);
        let planned = started.item.planned;
        let mut guard = self.entries[segment as usize].write();
        debug_assert_eq!(guard.location, from);
        // Demoting a segment whose home copy is current needs no copy:
        // every chunk counts as copied, so writes mirror to home at once.
        let clean_demotion =
            to.tier == home && self.home_current[segment as usize].load(Ordering::Acquire);
        let now_ns = self.clock.now_ns();
        // The entry's write lock is held: no IO to the segment is in
        // flight, so the machine has no writes from before it to wait for.
        let mut machine = MoveMachine::new(
            self.move_rules(),
            self.options.segment_bytes,
            now_ns,
            0,
            clean_demotion,
        );
        if self.decision_log.lock().is_some() {
            machine.record_decisions();
        }
        let active = Arc::new(ActiveMove {
            segment,
            from,
            to,
            reason: planned.reason,
            started_ns: now_ns,
            home_too: from.tier != home && self.tiers[to.tier as usize].write_through,
            state: parking_lot::Mutex::new(MoveState {
                machine,
                flipping: false,
                failure: None,
                workers: 0,
            }),
        });
        self.active.write().push(active.clone());
        guard.moving = true;
        Some(active)
    }

    /// Does one unit of migration work: starts queued moves while there is
    /// room, then copies one chunk of a move (with the write parts handed
    /// over for it), or finishes a move whose chunks have all landed. Safe
    /// to call from several threads at once: each call is one chunk in
    /// flight. The caller paces by the outcome (see [`crate::runner`]).
    pub fn copy_step(&self) -> StepOutcome {
        match self.copy_begin() {
            CopyBegun::Done(outcome) => outcome,
            CopyBegun::Read(read) => self.copy_end(read),
        }
    }

    /// The first half of [`Self::copy_step`]: picks the work and, for a
    /// chunk copy, reads the chunk from the source. The copy is in flight
    /// until [`Self::copy_end`]; user IO may run in between (deterministic
    /// tests use the gap to put writes in the middle of a copy).
    pub fn copy_begin(&self) -> CopyBegun {
        self.start_queued_moves();
        let moves: Vec<Arc<ActiveMove>> = self.active.read().clone();
        if moves.is_empty() {
            return CopyBegun::Done(StepOutcome::Idle);
        }
        let now_ns = self.clock.now_ns();
        let mut wake_ns: Option<u64> = None;
        for active in &moves {
            let step = {
                let mut state = active.state.lock();
                if state.flipping {
                    continue;
                }
                if let Some(reason) = state.failure.clone() {
                    if state.workers == 0 {
                        state.flipping = true;
                        drop(state);
                        return CopyBegun::Done(self.abandon(active, &reason));
                    }
                    continue;
                }
                match state.machine.next(now_ns) {
                    Step::Flip => {
                        state.flipping = true;
                        Step::Flip
                    }
                    Step::Copy { chunk, part } => {
                        state.workers += 1;
                        Step::Copy { chunk, part }
                    }
                    other => other,
                }
            };
            match step {
                Step::Copy { chunk, part } => {
                    let mut buffer = self.copy_buffers.lock().pop().unwrap_or_default();
                    buffer.resize(part.length_bytes as usize, 0);
                    // Built first: a panic in the read drops it, failing the move.
                    let mut read = ChunkRead {
                        active: active.clone(),
                        chunk,
                        part,
                        buffer,
                        result: Ok(()),
                        started_ns: self.clock.now_ns(),
                        ended: false,
                    };
                    let source = &self.tiers[active.from.tier as usize].device;
                    read.result = source
                        .read_at(
                            self.slot_offset(active.from) + part.offset_bytes,
                            &mut read.buffer,
                        )
                        .map_err(|error| error.to_string());
                    return CopyBegun::Read(read);
                }
                Step::Flip => return CopyBegun::Done(self.finish(active)),
                Step::WaitUntil { ns } => {
                    wake_ns = Some(wake_ns.map_or(ns, |earlier| earlier.min(ns)));
                }
                Step::Wait => {}
            }
        }
        CopyBegun::Done(StepOutcome::Waiting { until_ns: wake_ns })
    }

    /// The second half of [`Self::copy_step`]: writes the chunk read by
    /// [`Self::copy_begin`] to the target, then the write parts handed over
    /// for it, and tells the machine it landed.
    pub fn copy_end(&self, mut read: ChunkRead) -> StepOutcome {
        let active = read.active.clone();
        let (chunk, part, started_ns) = (read.chunk, read.part, read.started_ns);
        let buffer = std::mem::take(&mut read.buffer);
        let mut result = std::mem::replace(&mut read.result, Ok(()));
        if result.is_ok() {
            result = self
                .write_target(&active, part, &Mutation::Write(&buffer))
                .map_err(|error| error.to_string());
        }
        self.copy_buffers.lock().push(buffer);
        if result.is_ok() {
            self.monitor
                .record_migration_io(active.from.tier, part.length_bytes);
            self.monitor
                .record_migration_io(active.to.tier, part.length_bytes);
        }
        // Parts of writes handed over while the chunk was copied, then any
        // handed over while those were written.
        let mut parts: Vec<HandedOver<Handed>> = Vec::new();
        if result.is_ok() {
            let mut landing =
                active
                    .state
                    .lock()
                    .machine
                    .chunk_copied(chunk, self.clock.now_ns(), &mut parts);
            'apply: while landing == Landing::Apply {
                for handed in parts.drain(..) {
                    let mutation = handed.payload.as_mutation();
                    if let Err(error) = self.write_target(&active, handed.part, &mutation) {
                        result = Err(format!("applying a handed-over write: {error}"));
                        break 'apply;
                    }
                }
                landing = active.state.lock().machine.applied(chunk, &mut parts);
            }
        }
        self.max_chunk_hold_ns.fetch_max(
            self.clock.now_ns().saturating_sub(started_ns),
            Ordering::Relaxed,
        );
        let failure = {
            let mut state = active.state.lock();
            read.ended = true;
            state.workers -= 1;
            if let Err(error) = &result {
                state
                    .failure
                    .get_or_insert_with(|| format!("failed: {error}"));
            }
            // The last copier of a failed move abandons it: no copy of the
            // move is in flight to the target slot any more.
            match state.failure.clone() {
                Some(reason) if state.workers == 0 && !state.flipping => {
                    state.flipping = true;
                    Some(reason)
                }
                _ => None,
            }
        };
        match failure {
            Some(reason) => self.abandon(&active, &reason),
            None if result.is_err() => StepOutcome::Waiting { until_ns: None },
            None => StepOutcome::Copied {
                bytes: part.length_bytes,
            },
        }
    }

    /// Writes `part` of the segment to the move's target (and to home when
    /// home backs a volatile target).
    fn write_target(
        &self,
        active: &ActiveMove,
        part: Part,
        mutation: &Mutation,
    ) -> Result<(), DeviceError> {
        let target = &self.tiers[active.to.tier as usize].device;
        let target_offset = self.slot_offset(active.to) + part.offset_bytes;
        mutation.apply(target.as_ref(), target_offset, part.length_bytes, false)?;
        if active.home_too {
            let home = &self.tiers[self.home() as usize].device;
            let home_offset =
                u64::from(active.segment) * self.options.segment_bytes + part.offset_bytes;
            mutation.apply(home.as_ref(), home_offset, part.length_bytes, false)?;
        }
        Ok(())
    }

    /// Logs every decision of the moves started from now on, for tests
    /// that compare this engine with the simulator step by step.
    #[doc(hidden)]
    pub fn record_move_decisions(&self) {
        self.decision_log.lock().get_or_insert_with(Vec::new);
    }

    /// The decision logs of the moves ended since the last call.
    #[doc(hidden)]
    pub fn take_move_decisions(&self) -> Vec<(SegmentId, Vec<Decision>)> {
        self.decision_log
            .lock()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn keep_decisions(&self, active: &ActiveMove) {
        if let Some(log) = self.decision_log.lock().as_mut() {
            let decisions = active.state.lock().machine.decisions().to_vec();
            log.push((active.segment, decisions));
        }
    }

    /// Where `segment` lives (the planner's table).
    fn placement_of(&self, segment: SegmentId) -> Location {
        self.planner.lock().table.location(segment)
    }

    fn remove_active(&self, active: &Arc<ActiveMove>) {
        self.active
            .write()
            .retain(|other| !Arc::ptr_eq(other, active));
    }

    fn abandon(&self, active: &Arc<ActiveMove>, outcome: &str) -> StepOutcome {
        self.keep_decisions(active);
        let shed = {
            let mut planner = self.planner.lock();
            // Waits for IO in flight on the segment (mirrored parts to the
            // target included) before the slot can be given out again.
            let mut guard = self.entries[active.segment as usize].write();
            guard.moving = false;
            self.remove_active(active);
            let undone = planner.table.abandon(active.segment);
            planner.table.release_slot(undone.item);
            undone.shed
        };
        for planned in shed.iter().map(|queued| &queued.planned) {
            let from = self.placement_of(planned.segment);
            self.record_finished(
                planned,
                from,
                0,
                self.clock.now_ns(),
                format!(
                    "dropped: it counted on the room the failed move of segment {} would have made",
                    active.segment
                ),
            );
        }
        let copied = active.state.lock().machine.counters().copied_bytes;
        self.record_finished(
            &active.as_move(),
            active.from,
            copied,
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
        if flushed.is_ok() && active.home_too {
            flushed = self.tiers[home as usize].device.flush();
        }
        if let Err(error) = flushed {
            return self.abandon(active, &format!("failed: flushing the target: {error}"));
        }
        // Timed to the journal append: the record carries it, so the mean
        // move time survives a restart that replays the record.
        let elapsed_ns = self.clock.now_ns().saturating_sub(active.started_ns);
        {
            // Planner, journal, entry: the record and the flip in the table
            // happen together (a checkpoint sees both or neither).
            let mut planner = self.planner.lock();
            let mut meta = self.meta.lock();
            if let Err(error) = meta.append(&Record::Place {
                segment: active.segment,
                location: active.to,
                move_ns: Some(elapsed_ns),
            }) {
                drop(meta);
                drop(planner);
                return self.abandon(active, &format!("failed: journal: {error}"));
            }
            let switch_started_ns = self.clock.now_ns();
            let mut guard = self.entries[active.segment as usize].write();
            guard.location = active.to;
            guard.moving = false;
            let home_current = home_current_after_flip(
                home,
                active.from.tier,
                active.to.tier,
                self.tiers[active.to.tier as usize].write_through,
                self.home_current[active.segment as usize].load(Ordering::Acquire),
            );
            self.home_current[active.segment as usize].store(home_current, Ordering::Release);
            self.remove_active(active);
            // The entry's write lock is held: no IO reads the old slot.
            let left = planner.table.finish(active.segment);
            planner.table.release_slot(left);
            drop(guard);
            drop(meta);
            planner.completed_moves += 1;
            *planner
                .completed_by_rule
                .entry(active.reason.rule.clone())
                .or_insert(0) += 1;
            planner.timed_moves += 1;
            planner.total_move_ns += elapsed_ns as f64;
            drop(planner);
            self.max_switch_over_ns.fetch_max(
                self.clock.now_ns().saturating_sub(switch_started_ns),
                Ordering::Relaxed,
            );
        }
        // The segment is served from its target now: the source's cached
        // pages of it are a copy nobody reads (see
        // `BlockDevice::release_cache`). Home keeps its extent, and a
        // write-through write to it lands in fresh pages.
        self.tiers[active.from.tier as usize]
            .device
            .release_cache(self.slot_offset(active.from), self.options.segment_bytes);
        self.keep_decisions(active);
        let copied = active.state.lock().machine.counters().copied_bytes;
        self.record_finished(
            &active.as_move(),
            active.from,
            copied,
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
            planner.dropped.room_taken_back += 1;
        }
        if planner.recent.len() == RECENT_MOVES {
            planner.recent.pop_front();
        }
        planner.recent.push_back(record);
    }

    /// The moves being copied now.
    pub fn active_moves(&self) -> Vec<InFlightMove> {
        self.active
            .read()
            .iter()
            .map(|active| InFlightMove {
                segment: active.segment,
                from: self.tiers[active.from.tier as usize].name.clone(),
                to: self.tiers[active.to.tier as usize].name.clone(),
                rule: active.reason.rule.clone(),
                detail: active.reason.detail.clone(),
                copied_bytes: active.state.lock().machine.counters().copied_bytes,
                total_bytes: self.options.segment_bytes,
            })
            .collect()
    }
}
