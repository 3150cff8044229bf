//! One segment's move from a source location to a target location, as a
//! sans-IO state machine.
//!
//! The segment is copied in chunks, in order, up to
//! [`MoveRules::chunks_in_flight`] at a time, paced by
//! [`MoveRules`]. User IO keeps going to the source until the flip; reads
//! are served there. A user write to the moving segment goes to the source
//! (its *source half*) and, chunk by chunk of the segment, as follows:
//!
//! | the chunk is | the write's part in that chunk |
//! |---|---|
//! | not yet copied | nothing more: the copy will read it from the source |
//! | being copied (or its handed-over parts being applied) | *handed to the mover*: applied to the target after the chunk's copy lands, before the chunk counts as landed |
//! | landed | written to the target by the writer now (*mirrored*), beside the source half |
//!
//! A chunk whose copy is issued while a write to it is still on its way to
//! the source may miss that write: when the write's source half completes,
//! its part in such a chunk is mirrored (the chunk has landed) or handed to
//! the mover (still copying). So every acknowledged write reaches the
//! target, through the copy, the mirror or the mover, and **no write ever
//! waits for a chunk copy**: a write is acknowledged when its source half
//! and its mirrored parts are done; handed-over parts are the mover's.
//!
//! The move may flip (the table points at the target) when every chunk has
//! landed, nothing is being copied or applied, and no write whose part
//! might be missing from a copy is still on its way to the source. Writes
//! issued before the move started are not tracked; the copy waits for them
//! ([`MoveMachine::new`]'s `pre_move_writes`).
//!
//! The driver calls, per write: [`MoveMachine::write_begin`] before issuing
//! the source half, [`MoveMachine::write_source_done`] when it completes,
//! [`MoveMachine::write_part_done`] for each mirrored part; and for the
//! mover: [`MoveMachine::next`] for what to do, [`MoveMachine::chunk_copied`]
//! when a chunk's copy has been written to the target, and
//! [`MoveMachine::applied`] when the handed-over parts it returned are on
//! the target. The machine never blocks, sleeps or reads a clock.

/// How a move copies: chunking and pacing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoveRules {
    /// Copy unit (bytes), a power of two.
    pub chunk_bytes: u64,
    /// Chunks of one move being copied at the same time (at least 1).
    pub chunks_in_flight: u32,
    /// After a chunk lands, no new chunk starts for this long.
    pub chunk_gap_ns: u64,
    /// Largest share of time the copy may keep going (0 < share ≤ 1): after
    /// a chunk that took `t` to copy, the next starts `t (1 - share) / share`
    /// after it landed. 1 means no pause.
    pub share: f64,
    /// Bytes per second the move may copy; `None`: as fast as it goes.
    pub max_bandwidth_bytes_per_second: Option<u64>,
}

impl Default for MoveRules {
    fn default() -> Self {
        Self {
            chunk_bytes: 1 << 20,
            chunks_in_flight: 4,
            chunk_gap_ns: 0,
            share: 1.0,
            max_bandwidth_bytes_per_second: None,
        }
    }
}

/// A byte range within the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub offset_bytes: u64,
    pub length_bytes: u64,
}

/// What a write does beyond its source half ([`MoveMachine::write_begin`],
/// [`MoveMachine::write_source_done`]). Reused by the caller so the steady
/// state allocates nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    /// Parts to write to the target now (adjacent landed chunks merged);
    /// report each with [`MoveMachine::write_part_done`].
    pub mirror: Vec<Part>,
    /// Parts to hand to the mover with [`MoveMachine::hand_over`], one per
    /// chunk being copied: `(chunk, part)`.
    pub hand_over: Vec<(u32, Part)>,
}

impl Route {
    pub fn clear(&mut self) {
        self.mirror.clear();
        self.hand_over.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.mirror.is_empty() && self.hand_over.is_empty()
    }
}

/// A part of a write handed to the mover, with what the driver needs to
/// write it (the data in the live engine; nothing in the simulator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandedOver<P> {
    pub write: u64,
    pub chunk: u32,
    pub part: Part,
    pub payload: P,
}

/// What the mover should do next ([`MoveMachine::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Copy this chunk: read `part` from the source, write it to the target,
    /// then call [`MoveMachine::chunk_copied`].
    Copy { chunk: u32, part: Part },
    /// Pacing: nothing may start before this time.
    WaitUntil { ns: u64 },
    /// Waiting for copies, handed-over parts or writes in flight.
    Wait,
    /// Every chunk has landed: the move may flip.
    Flip,
}

/// What a chunk's landing asks of the mover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landing {
    /// The chunk has landed.
    Landed,
    /// Apply the handed-over parts put in `out` to the target, then call
    /// [`MoveMachine::applied`].
    Apply,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    Pending,
    Copying,
    /// Copied; handed-over parts being applied.
    Applying,
    Landed,
}

#[derive(Clone, Copy, Debug)]
struct Tracked {
    id: u64,
    first: u32,
    last: u32,
    /// Chunks `..cursor_at_begin` were issued when the write began.
    cursor_at_begin: u32,
    source_done: bool,
    parts_outstanding: u32,
}

/// Counters of one move.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoveCounters {
    /// Bytes of chunk copies issued and landed.
    pub issued_bytes: u64,
    pub copied_bytes: u64,
    /// Writes with at least one mirrored part.
    pub mirrored_writes: u64,
    /// Parts handed to the mover.
    pub handed_over_parts: u64,
    pub handed_over_bytes: u64,
}

/// One decision of a machine, in order, when its log is on
/// ([`MoveMachine::record_decisions`]): what both worlds are compared on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A chunk copy was started.
    Copy { chunk: u32 },
    /// A write was routed when it began (`at_source_done: false`) or when
    /// its source half completed.
    Route {
        at_source_done: bool,
        mirror: Vec<Part>,
        hand_over: Vec<(u32, Part)>,
    },
    /// A chunk's copy (and what was handed over for it) is on the target.
    Landed { chunk: u32 },
    /// Handed-over parts given to the mover to apply for a chunk.
    Apply { chunk: u32, parts: Vec<Part> },
    /// The move may flip.
    Flip,
}

/// One move's state. `P` is what a handed-over part carries.
#[derive(Debug)]
pub struct MoveMachine<P> {
    rules: MoveRules,
    segment_len: u64,
    chunks: u32,
    state: Vec<ChunkState>,
    issued_ns: Vec<u64>,
    /// Chunks `..cursor` have been issued, each exactly once, in order.
    cursor: u32,
    /// Chunks copying or applying.
    in_flight: u32,
    pre_move_writes: u32,
    start_ns: u64,
    last_landed_ns: Option<u64>,
    last_copy_ns: u64,
    writes: Vec<Tracked>,
    handed: Vec<HandedOver<P>>,
    counters: MoveCounters,
    decisions: Option<Vec<Decision>>,
}

impl<P> MoveMachine<P> {
    /// A move of a segment of `segment_len` bytes starting at `now_ns`.
    /// `pre_move_writes`: writes to the segment in flight when it starts
    /// (untracked; no chunk is copied until [`Self::pre_move_write_done`]
    /// has been called for each). `already_copied`: the target holds the
    /// segment already (a clean demotion to home): every chunk counts as
    /// landed, so writes mirror from the start.
    pub fn new(
        rules: MoveRules,
        segment_len: u64,
        now_ns: u64,
        pre_move_writes: u32,
        already_copied: bool,
    ) -> Self {
        assert!(rules.chunk_bytes > 0, "chunk_bytes must be positive");
        let chunks = segment_len.div_ceil(rules.chunk_bytes) as u32;
        let initial = if already_copied {
            ChunkState::Landed
        } else {
            ChunkState::Pending
        };
        Self {
            rules,
            segment_len,
            chunks,
            state: vec![initial; chunks as usize],
            issued_ns: vec![0; chunks as usize],
            cursor: if already_copied { chunks } else { 0 },
            in_flight: 0,
            pre_move_writes,
            start_ns: now_ns,
            last_landed_ns: None,
            last_copy_ns: 0,
            writes: Vec::new(),
            handed: Vec::new(),
            counters: MoveCounters::default(),
            decisions: None,
        }
    }

    /// Keeps a log of every decision (tests comparing the two worlds; off
    /// by default, it grows with the writes of the move).
    pub fn record_decisions(&mut self) {
        self.decisions.get_or_insert_with(Vec::new);
    }

    /// The decisions logged so far (empty unless recording).
    pub fn decisions(&self) -> &[Decision] {
        self.decisions.as_deref().unwrap_or(&[])
    }

    fn log(&mut self, decision: impl FnOnce() -> Decision) {
        if let Some(log) = self.decisions.as_mut() {
            log.push(decision());
        }
    }

    fn log_route(&mut self, at_source_done: bool, route: &Route) {
        if !route.is_empty() {
            self.log(|| Decision::Route {
                at_source_done,
                mirror: route.mirror.clone(),
                hand_over: route.hand_over.clone(),
            });
        }
    }

    pub fn counters(&self) -> MoveCounters {
        self.counters
    }

    /// Writes to the segment the machine is tracking.
    pub fn tracked_writes(&self) -> usize {
        self.writes.len()
    }

    fn chunk_part(&self, chunk: u32) -> Part {
        let start = u64::from(chunk) * self.rules.chunk_bytes;
        Part {
            offset_bytes: start,
            length_bytes: self.rules.chunk_bytes.min(self.segment_len - start),
        }
    }

    fn chunk_range(&self, offset_bytes: u64, length_bytes: u64) -> (u32, u32) {
        let last_byte = (offset_bytes + length_bytes.max(1) - 1).min(self.segment_len - 1);
        (
            (offset_bytes / self.rules.chunk_bytes) as u32,
            (last_byte / self.rules.chunk_bytes) as u32,
        )
    }

    /// Routes a write's parts in chunks `first..=last` (clipped to
    /// `[offset, offset+length)`) by chunk state into `route`.
    fn route_chunks(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        first: u32,
        last: u32,
        route: &mut Route,
    ) {
        let end = offset_bytes + length_bytes;
        for chunk in first..=last {
            let whole = self.chunk_part(chunk);
            let start = offset_bytes.max(whole.offset_bytes);
            let stop = end.min(whole.offset_bytes + whole.length_bytes);
            if start >= stop {
                continue;
            }
            let part = Part {
                offset_bytes: start,
                length_bytes: stop - start,
            };
            match self.state[chunk as usize] {
                ChunkState::Pending => {}
                ChunkState::Copying | ChunkState::Applying => route.hand_over.push((chunk, part)),
                ChunkState::Landed => match route.mirror.last_mut() {
                    Some(previous) if previous.offset_bytes + previous.length_bytes == start => {
                        previous.length_bytes += part.length_bytes;
                    }
                    _ => route.mirror.push(part),
                },
            }
        }
    }

    /// A user write of `[offset_bytes, offset_bytes + length_bytes)` (within
    /// the segment) is about to be issued to the source; `id` names it until
    /// it settles. Fills `route` with its parts to mirror now and to hand
    /// over (with [`Self::hand_over`], before the machine is used again).
    pub fn write_begin(
        &mut self,
        id: u64,
        offset_bytes: u64,
        length_bytes: u64,
        route: &mut Route,
    ) {
        route.clear();
        if length_bytes == 0 || offset_bytes >= self.segment_len {
            return;
        }
        let length_bytes = length_bytes.min(self.segment_len - offset_bytes);
        let (first, last) = self.chunk_range(offset_bytes, length_bytes);
        self.route_chunks(offset_bytes, length_bytes, first, last, route);
        if !route.mirror.is_empty() {
            self.counters.mirrored_writes += 1;
        }
        self.log_route(false, route);
        self.writes.push(Tracked {
            id,
            first,
            last,
            cursor_at_begin: self.cursor,
            source_done: false,
            parts_outstanding: route.mirror.len() as u32,
        });
    }

    /// The source half of write `id` completed. Its parts in chunks whose
    /// copy was issued while it was on its way (and so may lack it) go into
    /// `route`: mirrored now if the chunk landed, handed over if it is still
    /// being copied. `offset_bytes`/`length_bytes` are the write's again.
    pub fn write_source_done(
        &mut self,
        id: u64,
        offset_bytes: u64,
        length_bytes: u64,
        route: &mut Route,
    ) {
        route.clear();
        let Some(index) = self.writes.iter().position(|write| write.id == id) else {
            return;
        };
        let write = self.writes[index];
        let first = write.first.max(write.cursor_at_begin);
        let last = write.last.min(self.cursor.saturating_sub(1));
        // Chunks issued after the write began (a Pending chunk routes nothing).
        if first <= last {
            let length_bytes = length_bytes.min(self.segment_len - offset_bytes);
            self.route_chunks(offset_bytes, length_bytes, first, last, route);
        }
        self.log_route(true, route);
        let tracked = &mut self.writes[index];
        if !route.mirror.is_empty() && tracked.parts_outstanding == 0 {
            self.counters.mirrored_writes += 1;
        }
        tracked.parts_outstanding += route.mirror.len() as u32;
        tracked.source_done = true;
        if tracked.parts_outstanding == 0 {
            self.writes.swap_remove(index);
        }
    }

    /// A mirrored part of write `id` is on the target.
    pub fn write_part_done(&mut self, id: u64) {
        let Some(index) = self.writes.iter().position(|write| write.id == id) else {
            return;
        };
        let tracked = &mut self.writes[index];
        tracked.parts_outstanding = tracked.parts_outstanding.saturating_sub(1);
        if tracked.parts_outstanding == 0 && tracked.source_done {
            self.writes.swap_remove(index);
        }
    }

    /// Write `id` ended without reporting its halves (its thread failed):
    /// the machine stops waiting for it. The driver should not flip a move
    /// whose write ended so (it cannot know what reached the source).
    pub fn forget_write(&mut self, id: u64) {
        self.writes.retain(|write| write.id != id);
    }

    /// Hands a part of write `id` (from a [`Route`]) to the mover, with what
    /// it takes to write it.
    pub fn hand_over(&mut self, id: u64, chunk: u32, part: Part, payload: P) {
        debug_assert!(matches!(
            self.state[chunk as usize],
            ChunkState::Copying | ChunkState::Applying
        ));
        self.counters.handed_over_parts += 1;
        self.counters.handed_over_bytes += part.length_bytes;
        self.handed.push(HandedOver {
            write: id,
            chunk,
            part,
            payload,
        });
    }

    /// One of the writes in flight when the move started completed.
    pub fn pre_move_write_done(&mut self) {
        self.pre_move_writes = self.pre_move_writes.saturating_sub(1);
    }

    /// When pacing lets the next chunk start.
    fn allowed_ns(&self) -> u64 {
        let mut allowed = self.last_landed_ns.map_or(0, |landed| {
            let share = self.rules.share.clamp(0.001, 1.0);
            let pause = (self.last_copy_ns as f64 * (1.0 - share) / share) as u64;
            landed
                .saturating_add(self.rules.chunk_gap_ns)
                .saturating_add(pause)
        });
        if let Some(bandwidth) = self.rules.max_bandwidth_bytes_per_second {
            let paced = (u128::from(self.counters.issued_bytes) * 1_000_000_000
                / u128::from(bandwidth.max(1)))
            .min(u128::from(u64::MAX)) as u64;
            allowed = allowed.max(self.start_ns.saturating_add(paced));
        }
        allowed
    }

    fn owing_writes(&self) -> bool {
        self.writes
            .iter()
            .any(|write| !write.source_done && write.cursor_at_begin <= write.last)
    }

    /// What the mover should do at `now_ns`. A `Copy` marks the chunk as
    /// being copied (call again for more, up to the in-flight limit).
    pub fn next(&mut self, now_ns: u64) -> Step {
        if self.pre_move_writes > 0 {
            return Step::Wait;
        }
        if self.cursor < self.chunks {
            if self.in_flight >= self.rules.chunks_in_flight.max(1) {
                return Step::Wait;
            }
            let allowed = self.allowed_ns();
            if allowed > now_ns {
                return Step::WaitUntil { ns: allowed };
            }
            let chunk = self.cursor;
            self.cursor += 1;
            self.state[chunk as usize] = ChunkState::Copying;
            self.issued_ns[chunk as usize] = now_ns;
            self.in_flight += 1;
            let part = self.chunk_part(chunk);
            self.counters.issued_bytes += part.length_bytes;
            self.log(|| Decision::Copy { chunk });
            return Step::Copy { chunk, part };
        }
        if self.in_flight == 0 && !self.owing_writes() {
            if self.decisions().last() != Some(&Decision::Flip) {
                self.log(|| Decision::Flip);
            }
            Step::Flip
        } else {
            Step::Wait
        }
    }

    /// Takes the handed-over parts of `chunk` into `out` and reports whether
    /// the chunk has landed.
    fn land(&mut self, chunk: u32, out: &mut Vec<HandedOver<P>>) -> Landing {
        out.clear();
        let mut index = 0;
        while index < self.handed.len() {
            if self.handed[index].chunk == chunk {
                // Keep the order parts were handed over in.
                out.push(self.handed.remove(index));
            } else {
                index += 1;
            }
        }
        if out.is_empty() {
            self.state[chunk as usize] = ChunkState::Landed;
            self.in_flight -= 1;
            self.log(|| Decision::Landed { chunk });
            Landing::Landed
        } else {
            self.state[chunk as usize] = ChunkState::Applying;
            if let Some(log) = self.decisions.as_mut() {
                log.push(Decision::Apply {
                    chunk,
                    parts: out.iter().map(|handed| handed.part).collect(),
                });
            }
            Landing::Apply
        }
    }

    /// The copy of `chunk` has been written to the target at `now_ns`. If
    /// writes were handed over for it, they are put in `out` to apply.
    pub fn chunk_copied(
        &mut self,
        chunk: u32,
        now_ns: u64,
        out: &mut Vec<HandedOver<P>>,
    ) -> Landing {
        debug_assert_eq!(self.state[chunk as usize], ChunkState::Copying);
        self.counters.copied_bytes += self.chunk_part(chunk).length_bytes;
        self.last_landed_ns = Some(now_ns);
        self.last_copy_ns = now_ns.saturating_sub(self.issued_ns[chunk as usize]);
        self.land(chunk, out)
    }

    /// The parts [`Self::chunk_copied`] or a previous `applied` put in `out`
    /// are on the target. Parts handed over meanwhile come next.
    pub fn applied(&mut self, chunk: u32, out: &mut Vec<HandedOver<P>>) -> Landing {
        debug_assert_eq!(self.state[chunk as usize], ChunkState::Applying);
        self.land(chunk, out)
    }
}

#[cfg(test)]
mod tests;
