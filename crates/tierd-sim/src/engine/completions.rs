//! Devices and completions: submitting IO to the models (host queues in
//! front), and what each completion means for its piece, request or move.

use tierd_core::cache::DeviceRole;

use super::*;

impl<'run> Engine<'run> {
    // ----- devices ---------------------------------------------------------

    /// Hands `io` to the device, or queues it in front when the device has
    /// `queue_depth` IOs already.
    #[inline]
    pub(super) fn submit(&mut self, tier: usize, io: DeviceIo) {
        if tier == self.home && io.op == Op::Write && io.id >> KIND_SHIFT != KIND_REPLICA_COPY {
            self.replica_write(&io);
        }
        let io = if tier == self.home && io.op == Op::Read && self.replicas.is_some() {
            self.route_cache_home_read(io)
        } else {
            io
        };
        if is_user_io(io.id) {
            if self.user_outstanding[tier] == 0 {
                self.user_busy_since_ns[tier] = self.now_ns;
            }
            self.user_outstanding[tier] += 1;
        }
        if self.device_outstanding[tier] < self.queue_limit[tier] {
            self.device_outstanding[tier] += 1;
            self.devices[tier].submit(self.now_ns, io);
            self.device_next_ns[tier] = self.devices[tier].next_event_ns().unwrap_or(u64::MAX);
        } else {
            self.host_queues[tier].push_back(io);
        }
    }

    /// Advances one device to `now` and handles what completed.
    pub(super) fn advance_device(&mut self, tier: usize) -> Result<(), SimError> {
        let mut done = std::mem::take(&mut self.completions);
        done.clear();
        self.devices[tier].advance(self.now_ns, &mut done);
        self.device_outstanding[tier] -= done.len().min(self.device_outstanding[tier]);
        while self.device_outstanding[tier] < self.queue_limit[tier] {
            let Some(io) = self.host_queues[tier].pop_front() else {
                break;
            };
            self.device_outstanding[tier] += 1;
            self.devices[tier].submit(self.now_ns, io);
        }
        self.device_next_ns[tier] = self.devices[tier].next_event_ns().unwrap_or(u64::MAX);
        let mut outcome = Ok(());
        for completion in done.iter() {
            if let Err(error) = self.on_completion(tier, completion) {
                outcome = Err(error);
                break;
            }
        }
        self.completions = done;
        outcome
    }

    pub(super) fn on_completion(
        &mut self,
        tier: usize,
        completion: &Completion,
    ) -> Result<(), SimError> {
        let payload = completion.id & PAYLOAD_MASK;
        if tier == self.home {
            self.replica_completion(completion);
        }
        if is_user_io(completion.id) {
            self.user_outstanding[tier] -= 1;
            if self.user_outstanding[tier] == 0 {
                let since = self.user_busy_since_ns[tier];
                self.user_busy_ns[tier] += completion.done_ns.saturating_sub(since);
                if tier == self.home {
                    self.home_idle_from(completion.done_ns);
                    self.replica_idle_from(completion.done_ns);
                }
            }
        }
        if let Controller::Cache(cache) = &mut self.controller {
            // What the device took, for adaptive admission's cost model.
            let role = if tier == self.home {
                Some(DeviceRole::Home)
            } else if tier == 0 {
                Some(DeviceRole::Fast)
            } else {
                None
            };
            if let Some(role) = role {
                cache.observe_io(
                    role,
                    completion.op.is_write(),
                    completion.length_bytes,
                    completion.service_ns(),
                    completion.done_ns,
                );
            }
        }
        match completion.id >> KIND_SHIFT {
            KIND_USER => self.source_half_done(payload as u32, completion.done_ns)?,
            KIND_MIRROR_WRITE => self.mirror_part_done(payload as u32, completion.done_ns)?,
            KIND_THROUGH_WRITE => self.through_part_done(payload as u32, completion.done_ns)?,
            KIND_MIGRATION_THROUGH => self.monitor.record_migration_io(tier as TierId, payload),
            KIND_HANDED_OVER => self.handed_over_done((payload >> 32) as u32, payload as u32),
            KIND_MIGRATION_READ => self.chunk_read_done((payload >> 32) as u32, payload as u32),
            KIND_MIGRATION_WRITE => self.chunk_write_done((payload >> 32) as u32, payload as u32),
            KIND_CACHE_USER => self.cache_user_io_done(payload as u32, completion.done_ns)?,
            KIND_CACHE_FILL => self.cache_fill_done(tier, payload),
            KIND_CACHE_FILL_READ => self.cache_fill_read_done(tier, payload as u32),
            KIND_CACHE_LOAD_READ => self.load_read_done(tier),
            KIND_CACHE_LOAD_WRITE => self.load_write_done(tier, payload as u32),
            KIND_WRITEBACK_READ => self.writeback_read_done(tier, payload as u32),
            KIND_WRITEBACK_WRITE => self.writeback_write_done(tier, payload as u32),
            KIND_DESTAGE => self.destage_io_done(tier, payload as u32)?,
            KIND_REPLICA_COPY => {}
            _ => debug_assert!(false, "unknown IO id {:#x}", completion.id),
        }
        self.pump_writebacks();
        Ok(())
    }

    /// A piece's own device IO (for a mirrored write: its source half) completed.
    pub(super) fn source_half_done(
        &mut self,
        piece_index: u32,
        done_ns: u64,
    ) -> Result<(), SimError> {
        let policy_mode = matches!(self.controller, Controller::Policy(_));
        let segment_bytes = self.config.segment_bytes;
        let piece = self.pieces.get_mut(piece_index);
        piece.parts_left = piece.parts_left.saturating_sub(1);
        piece.source_done = true;
        piece.source_done_ns = done_ns;
        let piece = *piece;
        #[cfg(test)]
        if let (true, Some(shadow)) = (piece.is_write, self.shadow.as_mut()) {
            shadow.device_write(
                piece_index,
                piece.tier as usize,
                piece.device_offset,
                piece.bytes,
            );
        }
        if policy_mode && piece.tier as usize != self.home {
            let tier = piece.tier as usize;
            let slot = (piece.device_offset / segment_bytes) as usize;
            if let Some(count) = self.slot_ios[tier].get_mut(slot) {
                *count -= 1;
                if *count == 0 && self.draining[tier][slot] {
                    // The segment left this slot; its last IO there is done.
                    self.draining[tier][slot] = false;
                    self.table.release_slot(Location {
                        tier: tier as TierId,
                        slot: slot as u32,
                    });
                    self.start_moves();
                }
            }
        }
        #[cfg(test)]
        if let (true, Some(log)) = (piece.is_write, self.world_log.as_mut()) {
            log.events.push(tests::WorldEvent::WriteDone {
                offset_bytes: piece.volume_offset,
            });
        }
        if let (true, Some(move_slot)) = (piece.is_write, piece.mirror_move) {
            self.tracked_source_done(move_slot, piece_index);
        }
        if self.pieces.items[piece_index as usize].finished() {
            self.complete_piece(piece_index, done_ns)?;
        }
        Ok(())
    }

    /// The home half of a written-through write completed.
    pub(super) fn through_part_done(
        &mut self,
        piece_index: u32,
        done_ns: u64,
    ) -> Result<(), SimError> {
        let piece = self.pieces.get_mut(piece_index);
        piece.parts_left = piece.parts_left.saturating_sub(1);
        let piece = *piece;
        #[cfg(test)]
        if let Some(shadow) = self.shadow.as_mut() {
            shadow.device_write(piece_index, self.home, piece.volume_offset, piece.bytes);
        }
        if piece.finished() {
            self.complete_piece(piece_index, done_ns)?;
        }
        Ok(())
    }

    /// Every half of the piece has completed: it is acknowledged.
    pub(super) fn complete_piece(
        &mut self,
        piece_index: u32,
        done_ns: u64,
    ) -> Result<(), SimError> {
        let piece = self.pieces.take(piece_index);
        let request = *self.requests.get_mut(piece.request);
        let response_ns = done_ns.saturating_sub(request.arrival_ns);
        let tier = piece.tier as usize;
        #[cfg(test)]
        if let (true, Some(shadow)) = (piece.is_write, self.shadow.as_mut()) {
            shadow.ack_write(piece_index, piece.volume_offset, piece.bytes);
        }
        self.tier_response[tier].record(response_ns);
        self.tier_bytes[tier] += piece.bytes;
        self.monitor.record_user_io(
            piece.segment,
            piece.tier,
            piece.is_write,
            piece.bytes,
            response_ns,
            self.moves_touching[tier] > 0,
        );
        if piece.is_write && matches!(self.controller, Controller::Policy(_)) {
            self.write_acknowledged(&piece, done_ns);
        }
        let state = self.requests.get_mut(piece.request);
        state.pieces_left -= 1;
        if state.pieces_left == 0 {
            self.requests.take(piece.request);
            self.finish_request(request.arrival_ns, request.is_write, done_ns)?;
        }
        Ok(())
    }

    /// Bookkeeping of a tiering write's acknowledgement: the move that
    /// mirrored it forgets it, and a move waiting for the writes issued
    /// before it started may begin copying.
    pub(super) fn write_acknowledged(&mut self, piece: &Piece, done_ns: u64) {
        let segment = piece.segment as usize;
        self.segment_writes_in_flight[segment] -= 1;
        if let (Some(move_slot), true) = (piece.mirror_move, piece.mirrored) {
            let wait_ns = done_ns.saturating_sub(piece.source_done_ns);
            self.mirrored_writes += 1;
            self.mirror_wait_ns_total += u128::from(wait_ns);
            self.mirror_wait_ns_max = self.mirror_wait_ns_max.max(wait_ns);
            if let Some(active) = self.active[move_slot as usize].as_mut() {
                if active.plan.segment == piece.segment {
                    active.mirror_wait_max_ns = active.mirror_wait_max_ns.max(wait_ns);
                }
            }
        }
        let move_slot = self.moving[segment];
        if move_slot == NOT_MOVING {
            return;
        }
        if let Some(active) = self.active[move_slot as usize].as_mut() {
            if piece.route_sequence < active.start_sequence {
                // One of the writes in flight when the move started.
                active.machine.pre_move_write_done();
                self.step_move(move_slot);
            }
        }
    }

    pub(super) fn finish_request(
        &mut self,
        arrival_ns: u64,
        is_write: bool,
        done_ns: u64,
    ) -> Result<(), SimError> {
        let response_ns = done_ns.saturating_sub(arrival_ns);
        self.response.record(response_ns);
        self.directions.record(is_write, response_ns);
        self.completed += 1;
        if done_ns <= HOUR_NS {
            self.completed_first_hour += 1;
        }
        self.outstanding_requests -= 1;
        self.last_completion_ns = self.last_completion_ns.max(done_ns);
        self.period_counters.requests += 1;
        self.period_counters.response_ns_total += u128::from(response_ns);
        if matches!(self.config.replay, Replay::ClosedLoop { .. }) {
            self.arrive_next()?;
        }
        Ok(())
    }
}
