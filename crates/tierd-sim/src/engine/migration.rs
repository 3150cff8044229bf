//! Migration in virtual time: the plan's moves are validated, queued and
//! started, and each is driven through the shared move state machine
//! ([`tierd_core::moves::MoveMachine`], the code the live engine runs):
//! the machine says which chunk to copy and when, which part of a user
//! write to mirror to the target, which part to hand to the mover, and when
//! to flip; this file turns that into device IOs in virtual time.

use super::*;

use tierd_core::moves::{HandedOver, Landing, MoveRules, Route, Step};

/// What a handed-over part carries here: the shadow stamp of its write in
/// the data-consistency tests, 0 otherwise.
pub(super) type Stamp = u64;

pub(super) struct ActiveMove {
    pub(super) plan: Move,
    pub(super) accepted_ns: u64,
    pub(super) start_ns: u64,
    /// Pieces routed before this sequence number predate the move (the
    /// machine waits for them before copying).
    pub(super) start_sequence: u64,
    pub(super) source_base: u64,
    pub(super) target_base: u64,
    /// Bytes of the segment (the volume's last segment may be short).
    pub(super) segment_len: u64,
    pub(super) machine: tierd_core::moves::MoveMachine<Stamp>,
    pub(super) timer_pending: bool,
    /// Handed-over parts being applied, per chunk, in the order they were
    /// handed over; the first of each is on its way (one at a time, so a
    /// later write to a block is never overtaken by an earlier one).
    pub(super) applying: Vec<(u32, VecDeque<HandedOver<Stamp>>)>,
    /// The longest a mirrored write was acknowledged after its source half
    /// (what the mirror cost it).
    pub(super) mirror_wait_max_ns: u64,
}

pub(super) struct QueuedMove {
    pub(super) plan: Move,
    pub(super) accepted_ns: u64,
    /// The plan's payback bound ([`Plan::payback_ns`]).
    pub(super) payback_ns: Option<u64>,
}

/// A mirrored part of a user write on its way to a move's target.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MirrorIo {
    pub(super) piece: u32,
    pub(super) move_slot: u32,
    pub(super) tier: TierId,
    pub(super) device_offset: u64,
    pub(super) bytes: u64,
}

pub(super) fn move_rules(config: &SimConfig) -> MoveRules {
    let migration = &config.stack.migration;
    MoveRules {
        chunk_bytes: migration.chunk_bytes,
        chunks_in_flight: migration.chunks_in_flight,
        chunk_gap_ns: migration.chunk_gap_ns,
        share: 1.0,
        max_bandwidth_bytes_per_second: migration.max_bandwidth_bytes_per_second,
    }
}

impl<'run> Engine<'run> {
    /// A user write routed to the source of move `move_slot`: the machine
    /// says what of it to mirror now and what to hand to the mover.
    pub(super) fn track_write(&mut self, move_slot: u32, piece_index: u32) {
        let segment_bytes = self.config.segment_bytes;
        let Some(active) = self.active[move_slot as usize].as_mut() else {
            return;
        };
        let piece = self.pieces.get_mut(piece_index);
        piece.mirror_move = Some(move_slot);
        let (within, bytes) = (piece.volume_offset % segment_bytes, piece.bytes);
        let mut route = std::mem::take(&mut self.route);
        active
            .machine
            .write_begin(u64::from(piece_index), within, bytes, &mut route);
        self.carry_out(move_slot, piece_index, &route);
        self.route = route;
    }

    /// A tracked write's source half completed: parts of it in chunks whose
    /// copy started meanwhile are mirrored or handed over now.
    pub(super) fn tracked_source_done(&mut self, move_slot: u32, piece_index: u32) {
        let segment_bytes = self.config.segment_bytes;
        let piece = self.pieces.items[piece_index as usize];
        let Some(active) = self.active[move_slot as usize].as_mut() else {
            return;
        };
        if active.plan.segment != piece.segment {
            return;
        }
        let mut route = std::mem::take(&mut self.route);
        active.machine.write_source_done(
            u64::from(piece_index),
            piece.volume_offset % segment_bytes,
            piece.bytes,
            &mut route,
        );
        self.carry_out(move_slot, piece_index, &route);
        self.route = route;
        // The write no longer holds the flip back.
        self.step_move(move_slot);
    }

    /// Issues a route's mirrored parts and hands its other parts over.
    fn carry_out(&mut self, move_slot: u32, piece_index: u32, route: &Route) {
        if route.is_empty() {
            return;
        }
        #[cfg(test)]
        let stamp = self
            .shadow
            .as_ref()
            .map_or(0, |shadow| shadow.stamp_of(piece_index));
        #[cfg(not(test))]
        let stamp = 0;
        let Some(active) = self.active[move_slot as usize].as_mut() else {
            return;
        };
        for &(chunk, part) in &route.hand_over {
            active
                .machine
                .hand_over(u64::from(piece_index), chunk, part, stamp);
        }
        let tier = active.plan.to;
        let target_base = active.target_base;
        for part in &route.mirror {
            let piece = self.pieces.get_mut(piece_index);
            piece.parts_left += 1;
            piece.mirrored = true;
            let io = MirrorIo {
                piece: piece_index,
                move_slot,
                tier,
                device_offset: target_base + part.offset_bytes,
                bytes: part.length_bytes,
            };
            let index = self.mirror_ios.insert(io);
            self.submit(
                tier as usize,
                DeviceIo {
                    id: (KIND_MIRROR_WRITE << KIND_SHIFT) | u64::from(index),
                    op: Op::Write,
                    offset_bytes: io.device_offset,
                    length_bytes: io.bytes,
                    background: true,
                },
            );
        }
    }

    /// A mirrored part landed on the move's target.
    pub(super) fn mirror_part_done(&mut self, index: u32, done_ns: u64) -> Result<(), SimError> {
        let io = self.mirror_ios.take(index);
        self.monitor.record_migration_io(io.tier, io.bytes);
        #[cfg(test)]
        if let Some(shadow) = self.shadow.as_mut() {
            shadow.device_write(io.piece, io.tier as usize, io.device_offset, io.bytes);
        }
        let piece = self.pieces.get_mut(io.piece);
        piece.parts_left = piece.parts_left.saturating_sub(1);
        let piece = *piece;
        if let Some(active) = self.active[io.move_slot as usize].as_mut() {
            if active.plan.segment == piece.segment {
                active.machine.write_part_done(u64::from(io.piece));
            }
        }
        if piece.finished() {
            self.complete_piece(io.piece, done_ns)?;
        }
        Ok(())
    }

    /// Drops the queued moves the staleness rule finds stale at this plan
    /// (`tierd_core::placement::stale_reason`, the engine's rule too), then
    /// queues the plan's new moves the placement table accepts, in order.
    /// A restating policy's plan lists the queued moves it still wants:
    /// those keep their place and their acceptance time.
    pub(super) fn accept_plan(&mut self, plan: Plan, restates: bool) {
        let now_ns = self.now_ns;
        let asked: tierd_common::hash::FastSet<(SegmentId, TierId, TierId)> = plan
            .moves
            .iter()
            .map(|planned| (planned.segment, planned.from, planned.to))
            .collect();
        let undone = self.table.drop_stale(|queued| StaleInputs {
            pinned: false,
            asked_again: restates
                .then(|| asked.contains(&(queued.segment, queued.from, queued.to))),
            waited_ns: now_ns.saturating_sub(queued.item.accepted_ns),
            payback_ns: queued.item.payback_ns,
        });
        self.dropped.count_stale(&undone);
        // The queued moves the plan asked for again keep their place.
        let mut kept: tierd_common::hash::FastSet<(SegmentId, TierId, TierId)> = self
            .table
            .queued()
            .map(|queued| (queued.segment, queued.from, queued.to))
            .collect();
        for proposed in plan.moves {
            let (segment, from, to) = (proposed.segment, proposed.from, proposed.to);
            if restates && kept.remove(&(segment, from, to)) {
                continue;
            }
            let queued = QueuedMove {
                plan: proposed,
                accepted_ns: now_ns,
                payback_ns: plan.payback_ns,
            };
            if self.table.accept(segment, from, to, queued, false).is_err() {
                self.dropped.refused += 1;
            }
        }
        self.start_moves();
    }

    /// Starts queued moves while move slots are free and the table finds
    /// one whose target has a free physical slot (a demotion ahead in the
    /// queue may free it).
    pub(super) fn start_moves(&mut self) {
        let limit = self.config.stack.migration.max_concurrent_moves;
        while self.table.moving_len() < limit as usize {
            let Some(started) = self.table.start_next() else {
                break;
            };
            self.start_move(started);
        }
    }

    pub(super) fn start_move(&mut self, started: Started<QueuedMove>) {
        let queued = started.item;
        let segment_bytes = self.config.segment_bytes;
        let segment = queued.plan.segment as usize;
        let from = queued.plan.from as usize;
        let to = queued.plan.to as usize;
        let segment_start = segment as u64 * segment_bytes;
        let segment_len = segment_bytes.min(self.config.volume_bytes - segment_start);
        let source_base = u64::from(started.from.slot) * segment_bytes;
        let target_base = u64::from(started.to.slot) * segment_bytes;
        let pre_move_writes = self.segment_writes_in_flight[segment];
        let active = ActiveMove {
            plan: queued.plan,
            accepted_ns: queued.accepted_ns,
            start_ns: self.now_ns,
            start_sequence: self.route_sequence + 1,
            source_base,
            target_base,
            segment_len,
            machine: tierd_core::moves::MoveMachine::new(
                move_rules(self.config),
                segment_len,
                self.now_ns,
                pre_move_writes,
                // Demoting a segment whose home copy is current copies
                // nothing (the engine's rule): every chunk counts as copied.
                to == self.home && self.home_current[segment],
            ),
            timer_pending: false,
            applying: Vec::new(),
            mirror_wait_max_ns: 0,
        };
        #[cfg(test)]
        let mut active = active;
        #[cfg(test)]
        if let Some(log) = self.world_log.as_mut() {
            active.machine.record_decisions();
            log.events.push(super::tests::WorldEvent::MoveStart {
                segment: active.plan.segment,
                to: active.plan.to,
            });
        }
        let move_slot = match self.active.iter().position(Option::is_none) {
            Some(free) => {
                self.active[free] = Some(active);
                free as u32
            }
            None => {
                self.active.push(Some(active));
                (self.active.len() - 1) as u32
            }
        };
        self.moving[segment] = move_slot;
        self.moves_touching[from] += 1;
        self.moves_touching[to] += 1;
        self.period_counters.moves_started += 1;
        self.step_move(move_slot);
    }

    /// Does what the machine says: issues chunk copies (up to its in-flight
    /// limit), arms a pacing timer, or flips.
    pub(super) fn step_move(&mut self, move_slot: u32) {
        loop {
            let now = self.now_ns;
            let Some(active) = self.active[move_slot as usize].as_mut() else {
                return;
            };
            match active.machine.next(now) {
                Step::Copy { chunk, part } => {
                    #[cfg(test)]
                    if let Some(log) = self.world_log.as_mut() {
                        log.events.push(super::tests::WorldEvent::ChunkIssue {
                            segment: active.plan.segment,
                            chunk,
                        });
                    }
                    let offset = active.source_base + part.offset_bytes;
                    let from = active.plan.from as usize;
                    #[cfg(test)]
                    if let Some(shadow) = self.shadow.as_mut() {
                        shadow.capture(move_slot, chunk, from, offset, part.length_bytes);
                    }
                    self.submit(
                        from,
                        DeviceIo {
                            id: (KIND_MIGRATION_READ << KIND_SHIFT)
                                | (u64::from(move_slot) << 32)
                                | u64::from(chunk),
                            op: Op::Read,
                            offset_bytes: offset,
                            length_bytes: part.length_bytes,
                            background: true,
                        },
                    );
                }
                Step::WaitUntil { ns } => {
                    if !active.timer_pending {
                        active.timer_pending = true;
                        self.timer_sequence += 1;
                        self.timers
                            .push(Reverse((ns, self.timer_sequence, move_slot)));
                    }
                    return;
                }
                Step::Wait => return,
                Step::Flip => {
                    self.flip(move_slot);
                    return;
                }
            }
        }
    }

    /// A pacing timer fired.
    pub(super) fn move_timer(&mut self, move_slot: u32) {
        if let Some(active) = self.active[move_slot as usize].as_mut() {
            active.timer_pending = false;
            self.step_move(move_slot);
        }
    }

    fn chunk_len(&self, move_slot: u32, chunk: u32) -> Option<(u64, u64)> {
        let chunk_bytes = self.config.stack.migration.chunk_bytes;
        let active = self.active[move_slot as usize].as_ref()?;
        let start = u64::from(chunk) * chunk_bytes;
        Some((start, chunk_bytes.min(active.segment_len - start)))
    }

    pub(super) fn chunk_read_done(&mut self, move_slot: u32, chunk: u32) {
        let Some((start, length)) = self.chunk_len(move_slot, chunk) else {
            return;
        };
        let Some(active) = self.active[move_slot as usize].as_ref() else {
            return;
        };
        let from = active.plan.from;
        let to = active.plan.to as usize;
        let offset = active.target_base + start;
        let home_too = from as usize != self.home && self.write_through[to];
        let home_offset = u64::from(active.plan.segment) * self.config.segment_bytes + start;
        self.monitor.record_migration_io(from, length);
        if home_too {
            // The engine copies such a chunk to home as well; its home half
            // loads home but does not gate the landing here.
            self.submit(
                self.home,
                DeviceIo {
                    id: (KIND_MIGRATION_THROUGH << KIND_SHIFT) | (length & PAYLOAD_MASK),
                    op: Op::Write,
                    offset_bytes: home_offset,
                    length_bytes: length,
                    background: true,
                },
            );
        }
        self.submit(
            to,
            DeviceIo {
                id: (KIND_MIGRATION_WRITE << KIND_SHIFT)
                    | (u64::from(move_slot) << 32)
                    | u64::from(chunk),
                op: Op::Write,
                offset_bytes: offset,
                length_bytes: length,
                background: true,
            },
        );
    }

    /// A chunk's copy is on the target: parts handed over for it are
    /// applied next, or it has landed.
    pub(super) fn chunk_write_done(&mut self, move_slot: u32, chunk: u32) {
        let Some((start, length)) = self.chunk_len(move_slot, chunk) else {
            return;
        };
        let now = self.now_ns;
        let Some(active) = self.active[move_slot as usize].as_mut() else {
            return;
        };
        let to = active.plan.to;
        #[cfg(test)]
        if let Some(shadow) = self.shadow.as_mut() {
            shadow.apply(move_slot, chunk, to as usize, active.target_base + start);
        }
        #[cfg(test)]
        if let Some(log) = self.world_log.as_mut() {
            log.events.push(super::tests::WorldEvent::ChunkLand {
                segment: active.plan.segment,
                chunk,
            });
        }
        #[cfg(not(test))]
        let _ = start;
        self.monitor.record_migration_io(to, length);
        let landing = active.machine.chunk_copied(chunk, now, &mut self.handed);
        self.after_landing(move_slot, chunk, landing);
    }

    fn after_landing(&mut self, move_slot: u32, chunk: u32, landing: Landing) {
        match landing {
            Landing::Landed => self.step_move(move_slot),
            Landing::Apply => {
                let Some(active) = self.active[move_slot as usize].as_mut() else {
                    return;
                };
                active
                    .applying
                    .push((chunk, self.handed.drain(..).collect()));
                self.issue_handed_over(move_slot, chunk);
            }
        }
    }

    /// Issues the first handed-over part still to apply for `chunk`.
    fn issue_handed_over(&mut self, move_slot: u32, chunk: u32) {
        let Some(active) = self.active[move_slot as usize].as_ref() else {
            return;
        };
        let Some((_, parts)) = active
            .applying
            .iter()
            .find(|(waiting, _)| *waiting == chunk)
        else {
            return;
        };
        let Some(first) = parts.front() else {
            return;
        };
        let io = DeviceIo {
            id: (KIND_HANDED_OVER << KIND_SHIFT) | (u64::from(move_slot) << 32) | u64::from(chunk),
            op: Op::Write,
            offset_bytes: active.target_base + first.part.offset_bytes,
            length_bytes: first.part.length_bytes,
            background: true,
        };
        let to = active.plan.to as usize;
        self.submit(to, io);
    }

    /// A handed-over part is on the target: the next goes, or the machine
    /// is told the chunk's parts are applied.
    pub(super) fn handed_over_done(&mut self, move_slot: u32, chunk: u32) {
        let Some(active) = self.active[move_slot as usize].as_mut() else {
            return;
        };
        let Some(position) = active
            .applying
            .iter()
            .position(|(waiting, _)| *waiting == chunk)
        else {
            return;
        };
        let done = active.applying[position].1.pop_front();
        let to = active.plan.to;
        if let Some(done) = done {
            self.monitor.record_migration_io(to, done.part.length_bytes);
            #[cfg(test)]
            if let Some(shadow) = self.shadow.as_mut() {
                shadow.stamp_device(
                    to as usize,
                    active.target_base + done.part.offset_bytes,
                    done.part.length_bytes,
                    done.payload,
                );
            }
        }
        if !active.applying[position].1.is_empty() {
            self.issue_handed_over(move_slot, chunk);
            return;
        }
        active.applying.swap_remove(position);
        let landing = active.machine.applied(chunk, &mut self.handed);
        self.after_landing(move_slot, chunk, landing);
    }

    /// Switch-over: every chunk has landed and nothing is being copied. The
    /// table points at the target, new IO goes there; IO already issued to
    /// the source finishes there (a fast-tier source slot is freed when the
    /// last of it completes). Nothing is held.
    pub(super) fn flip(&mut self, move_slot: u32) {
        let Some(active) = self.active[move_slot as usize].take() else {
            return;
        };
        debug_assert!(active.applying.is_empty());
        #[cfg(test)]
        if let Some(log) = self.world_log.as_mut() {
            log.events.push(super::tests::WorldEvent::Flip {
                segment: active.plan.segment,
            });
            log.decisions
                .push((active.plan.segment, active.machine.decisions().to_vec()));
        }
        let segment = active.plan.segment as usize;
        let from = active.plan.from as usize;
        let to = active.plan.to as usize;
        self.home_current[segment] = home_current_after_flip(
            self.home as TierId,
            from as TierId,
            to as TierId,
            self.write_through[to],
            self.home_current[segment],
        );
        let left = self.table.finish(active.plan.segment);
        if from != self.home {
            let slot = left.slot as usize;
            if self.slot_ios[from][slot] > 0 {
                self.draining[from][slot] = true;
            } else {
                self.table.release_slot(left);
            }
        }
        self.moving[segment] = NOT_MOVING;
        #[cfg(test)]
        if let Some(shadow) = self.shadow.as_ref() {
            let segment_start = segment as u64 * self.config.segment_bytes;
            let base = u64::from(self.table.location(active.plan.segment).slot)
                * self.config.segment_bytes;
            shadow.verify(to, base, segment_start, active.segment_len);
        }
        self.moves_touching[from] -= 1;
        self.moves_touching[to] -= 1;
        // The flip holds no IO: the stall is 0 by construction (kept in the
        // results so runs under older rules compare).
        let stall_ns = 0;
        let counters = active.machine.counters();
        self.moved_ns_total += u128::from(self.now_ns - active.start_ns);
        self.deferred_halves += counters.handed_over_parts;
        self.period_counters.moves_finished += 1;
        self.move_log.push(MoveRecord {
            segment: active.plan.segment,
            from: active.plan.from,
            to: active.plan.to,
            accepted_ns: active.accepted_ns,
            start_ns: active.start_ns,
            end_ns: self.now_ns,
            bytes: counters.copied_bytes,
            copy_passes: 1,
            stall_ns,
            mirrored_writes: counters.mirrored_writes,
            deferred_target_halves: counters.handed_over_parts,
            mirror_wait_max_ns: active.mirror_wait_max_ns,
            held_pieces: 0,
            rule: active.plan.reason.rule.clone(),
            detail: active.plan.reason.detail.clone(),
        });
        self.start_moves();
    }
}
