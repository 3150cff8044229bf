//! The cache baselines: `tierd_core::cache::BlockCache`, the live engine's
//! cache core, over tier 0 (the slots) and home, on the device models.
//!
//! The core plans one step per cache block of a request; this file turns
//! the steps into device IO and reports each step back (`BlockCache::finish`)
//! when its IO has completed. Adjacent steps of the same kind whose device
//! ranges are contiguous go to the device as one IO, as the block layer
//! merges adjacent requests (a 64 KiB read that misses 16 blocks of 4 KiB
//! is one home read, not 16). The simulator carries no data, so it does not
//! need the caller's per-block serialization rule (`docs/engine/cache.md`,
//! rule 1): IOs to one block may overlap in time here.
//!
//! | step | device IO | the user piece completes | reported |
//! |---|---|---|---|
//! | `ReadSlot` | read fast at `slot × block + offset in block` | with the read | then |
//! | `ReadHome` | read home at the volume offset | with the read | (nothing to report) |
//! | `Fill` | read the whole block from home, then write it into the slot (background) | with the home read | when the slot write lands |
//! | `Fill`, split ([`SplitFills`]) | read the user's part from home; read the whole block from home (background), then write it into the slot | with the user's part | when the slot write lands |
//! | `WriteSlot` | write fast | with the write | then |
//! | `WriteSlotMerged` | read the whole block from home, then write it into the slot | after the slot write | then |
//! | `WriteBoth` | write home and the slot (`merge`: read the block from home first, then write the whole block into the slot) | when both writes are done | then |
//! | `WriteHome` | write home | with the write | then |
//!
//! Promotions (`adaptive`'s whole-segment copies, `BlockCache::next_load`)
//! are asked at the same points, one block at a time and only while no
//! user IO is at home: read the block from home, write it into its slot,
//! then `load_done` — background IO, counted as migration traffic.
//!
//! With an SMR home (`ssd-smr`; `docs/engine/smr.md`) no block is written
//! back on its own: `BlockCache::next_destage_io` is asked at the same
//! points, with `user_waiting` = user IO outstanding at home, and its IOs
//! (slot reads on the fast tier, home reads of the band's clean parts,
//! then the band written from its first byte to its end in order) go to
//! the devices as background IO, each reported with `destage_io_done`.
//! A step `Blocked` (a write into the band being rewritten that cannot
//! stay in the cache) issues nothing: its part of the request is planned
//! again when the band's rewrite ends, and the request is not complete
//! until that part is.
//!
//! Writeback (`BlockCache::next_writeback`) is asked after every request
//! is planned, every device completion and every period end, with `idle` = no user IO
//! outstanding at home (the device a writeback's write competes for), at
//! most [`WRITEBACKS_IN_FLIGHT`] at a time: read the slot, write home, then
//! `writeback_done`. Dirty victims become orphans in the core and are
//! written back first; they are counted as `dirty_evictions`.

use tierd_core::cache::{BlockCache, BlockIo, DestageIoKind, ServicePrior, Step, Writeback};

use super::*;

/// An SMR home counts as idle for the destage once no user IO has been
/// outstanding there for this long (the core's default, shared with the
/// live engine).
pub const SMR_IDLE_NS: u64 = tierd_core::cache::DEFAULT_DESTAGE_IDLE_NS;

/// The timer that wakes the destage when home has been idle for
/// [`SMR_IDLE_NS`] (a move slot no move has).
pub(super) const DESTAGE_TIMER: u32 = u32::MAX;

/// Writebacks (slot read + home write) in flight at once. Enough to keep
/// the write-back elevator moving under a write burst; few enough that a
/// user IO arriving at an idle-looking disk waits behind at most this many
/// background writes.
pub const WRITEBACKS_IN_FLIGHT: u32 = 4;

/// Most steps one device IO carries (the fill payload holds the step index).
const MAX_GROUP_STEPS: usize = 1 << 20;
const FILL_STEP_BITS: u32 = 20;

/// When a fill answers the user from a home read of its own. A fill reads
/// its whole block(s) from home, and a missed read that waits for that
/// read waits for the whole block where `none` reads only what was asked:
/// on a flash home a 64 KiB read takes 1.3× a 4 KiB one, and a cache's
/// p99 (misses) grows by that much while its mean gains. Split, the user's
/// part is read on its own and answers the user, and the whole block is
/// read in the background for the slot: one more home IO, the size of the
/// user's part. Worth it when the user saves more time than that IO costs
/// home's users: `service(whole) − service(part) > capacity(part) × (1 +
/// queued)`, where `capacity` is home's time per IO at its peak and
/// `queued` the IOs at home past what it serves at once (its QD1 service ÷
/// its time per IO at peak): each of them waits for the extra IO too. The
/// lines are probed on an idle copy of home's model
/// (`tierd_device::probe_service`, `probe_capacity`). A disk never splits
/// (64 KiB costs 0.6 ms more than 4 KiB; an extra IO takes ~2 ms of it,
/// and the second read waits for a rotation); an idle P3700 splits a 64 KiB
/// block's 4 KiB miss (22 µs saved, 12 µs of capacity), a saturated one
/// does not.
#[derive(Clone, Copy, Debug)]
pub(super) struct SplitFills {
    /// Unloaded read time.
    service: ServicePrior,
    /// Home's time per read at its peak.
    capacity: ServicePrior,
    /// IOs home serves at once (≥ 1): a small read's QD1 service ÷ its
    /// time per IO at peak.
    parallel: f64,
}

impl SplitFills {
    /// The lines of tier `home`'s model, or `None` when it cannot be
    /// probed (then fills are never split).
    pub(super) fn probe(config: &SimConfig, home: usize) -> Option<SplitFills> {
        let mut devices = crate::devices::build_devices(config).ok()?;
        let device = devices.get_mut(home)?.as_mut();
        let line = |((small, small_ns), (large, large_ns)): ((u64, u64), (u64, u64))| {
            ServicePrior::from_two(small, small_ns, large, large_ns)
        };
        let service_probe = tierd_device::probe_read_service(device)?;
        let capacity_probe = tierd_device::probe_capacity(device)?;
        let parallel = (service_probe.0 .1 as f64 / capacity_probe.0 .1.max(1) as f64).max(1.0);
        Some(SplitFills {
            service: line(service_probe),
            capacity: line(capacity_probe),
            parallel,
        })
    }

    /// Whether a fill reading `whole_bytes` for a user's `part_bytes` is
    /// split, with `outstanding` IOs at home (submitted and queued).
    pub(super) fn worth(&self, whole_bytes: u64, part_bytes: u64, outstanding: usize) -> bool {
        if part_bytes >= whole_bytes {
            return false;
        }
        let saved_ns = self.service.ns_per_byte * (whole_bytes - part_bytes) as f64;
        let queued = (outstanding as f64 - self.parallel).max(0.0);
        let extra_ns = self.capacity.fixed_ns + self.capacity.ns_per_byte * part_bytes as f64;
        saved_ns > extra_ns * (1.0 + queued)
    }
}

/// What the simulator counted beside the core's counters.
#[derive(Default)]
pub(super) struct CacheCounters {
    /// Fill steps (read misses that took a slot) and the bytes they wrote into slots.
    pub(super) fills: u64,
    /// Fill runs whose user part was read on its own ([`SplitFills`]).
    pub(super) split_fills: u64,
    pub(super) fill_bytes: u64,
    /// Write blocks served by the slot alone (`WriteSlot`, `WriteSlotMerged`).
    pub(super) fast_write_blocks: u64,
    /// Bytes read from home to merge partial writes into a new block.
    pub(super) merge_read_bytes: u64,
    pub(super) writeback_bytes: u64,
    /// SMR band rewrites: home bytes read (clean parts) and written (whole bands).
    pub(super) destage_read_bytes: u64,
    pub(super) destage_write_bytes: u64,
    /// Most dirty blocks seen (after each request is planned and each completion).
    pub(super) dirty_blocks_max: u64,
}

/// The kind of device IO a run of steps becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GroupKind {
    ReadSlot,
    ReadHome,
    Fill,
    WriteSlot,
    WriteSlotMerged,
    WriteBoth {
        merge: bool,
    },
    WriteHome,
    /// Waits for its SMR band's rewrite: never started as a group
    /// (`dispatch_cache` holds the part back).
    Blocked,
}

impl GroupKind {
    fn of(io: &BlockIo) -> GroupKind {
        match *io {
            BlockIo::ReadSlot { .. } => GroupKind::ReadSlot,
            BlockIo::ReadHome => GroupKind::ReadHome,
            BlockIo::Fill { .. } => GroupKind::Fill,
            BlockIo::WriteSlot { .. } => GroupKind::WriteSlot,
            BlockIo::WriteSlotMerged { .. } => GroupKind::WriteSlotMerged,
            BlockIo::WriteBoth { merge, .. } => GroupKind::WriteBoth { merge },
            BlockIo::WriteHome => GroupKind::WriteHome,
            BlockIo::Blocked => GroupKind::Blocked,
        }
    }

    /// The user's data is served by the slot alone.
    fn served_by_slot(self) -> bool {
        matches!(
            self,
            GroupKind::ReadSlot | GroupKind::WriteSlot | GroupKind::WriteSlotMerged
        )
    }

    /// Whether the next step may join a run of this kind: same kind, and
    /// for slot IO the next slot (home IO is contiguous already: the steps
    /// are consecutive blocks). Merging partial-block writes stay alone.
    fn joins(self, last: &Step, next: &Step) -> bool {
        if GroupKind::of(&next.io) != self {
            return false;
        }
        let slot = |step: &Step| step.io.ticket().map(|ticket| ticket.slot);
        match self {
            GroupKind::ReadHome | GroupKind::WriteHome | GroupKind::Fill => true,
            GroupKind::ReadSlot | GroupKind::WriteSlot | GroupKind::WriteBoth { merge: false } => {
                matches!((slot(last), slot(next)), (Some(a), Some(b)) if a.checked_add(1) == Some(b))
            }
            GroupKind::WriteSlotMerged
            | GroupKind::WriteBoth { merge: true }
            | GroupKind::Blocked => false,
        }
    }
}

/// A run of steps of one request that goes to the devices together.
pub(super) struct CacheGroup {
    /// The user piece (in `Engine::pieces`) this run answers.
    piece: u32,
    kind: GroupKind,
    /// 0: first IO(s) issued; 1: the merge read is done, the writes are out
    /// (a fill: the user piece is done, its whole-block read is not);
    /// 2: the user piece is done, fills are landing.
    phase: u8,
    /// Device IOs of the current phase still outstanding.
    pub(super) parts_left: u32,
    /// A split fill's whole-block home read is outstanding.
    fill_read_pending: bool,
    /// The user's bytes in this run.
    volume_offset: u64,
    bytes: u64,
    steps: Vec<Step>,
}

impl<'run> Engine<'run> {
    fn cache(&mut self) -> &mut BlockCache {
        match &mut self.controller {
            Controller::Cache(cache) => cache,
            Controller::Policy(_) => unreachable!("cache IO in a tiering run"),
        }
    }

    /// The volume bytes of `block` (the last one may be short).
    fn block_range(&self, block: u64) -> (u64, u64) {
        let start = block * self.cache_block_bytes;
        (
            start,
            self.cache_block_bytes
                .min(self.config.volume_bytes.saturating_sub(start)),
        )
    }

    fn slot_offset(&self, step: &Step) -> u64 {
        let ticket = step.io.ticket().expect("a slot step has a ticket");
        u64::from(ticket.slot) * self.cache_block_bytes
    }

    pub(super) fn dispatch_cache(&mut self, request_index: u32, request: &Request) {
        let mut steps = std::mem::take(&mut self.cache_steps);
        steps.clear();
        if request.op.is_write() {
            self.cache()
                .write(request.offset_bytes, request.length_bytes, &mut steps);
        } else {
            self.cache()
                .read(request.offset_bytes, request.length_bytes, &mut steps);
        }
        let mut first = 0;
        while first < steps.len() {
            if steps[first].io == BlockIo::Blocked {
                // The band is being rewritten: this part waits for it.
                let mut end = first + 1;
                while end < steps.len() && steps[end].io == BlockIo::Blocked {
                    end += 1;
                }
                let (start, _) = self.block_range(steps[first].block);
                let (last, last_length) = self.block_range(steps[end - 1].block);
                let offset_bytes = request.offset_bytes.max(start);
                let part = Request {
                    offset_bytes,
                    length_bytes: request.end_bytes().min(last + last_length) - offset_bytes,
                    ..*request
                };
                self.requests.get_mut(request_index).pieces_left += 1;
                self.blocked.push((request_index, part));
                first = end;
                continue;
            }
            let kind = GroupKind::of(&steps[first].io);
            let mut end = first + 1;
            while end < steps.len()
                && end - first < MAX_GROUP_STEPS
                && kind.joins(&steps[end - 1], &steps[end])
            {
                end += 1;
            }
            self.start_group(request_index, request, kind, &steps[first..end]);
            first = end;
        }
        self.cache_steps = steps;
        self.pump_writebacks();
    }

    fn start_group(
        &mut self,
        request_index: u32,
        request: &Request,
        kind: GroupKind,
        steps: &[Step],
    ) {
        let (first_start, _) = self.block_range(steps[0].block);
        let (last_start, last_len) = self.block_range(steps[steps.len() - 1].block);
        let volume_offset = request.offset_bytes.max(first_start);
        let bytes = request.end_bytes().min(last_start + last_len) - volume_offset;
        let tier = if kind.served_by_slot() { 0 } else { self.home };
        if matches!(kind, GroupKind::WriteSlot | GroupKind::WriteSlotMerged) {
            self.cache_counters.fast_write_blocks += steps.len() as u64;
        }
        let piece = self.pieces.insert(Piece {
            request: request_index,
            segment: (volume_offset / self.config.segment_bytes) as SegmentId,
            tier: tier as TierId,
            is_write: request.op.is_write(),
            volume_offset,
            bytes,
            parts_left: 1,
            ..Piece::default()
        });
        self.pieces_total += 1;
        self.requests.get_mut(request_index).pieces_left += 1;
        let group = CacheGroup {
            piece,
            kind,
            phase: 0,
            parts_left: 0,
            fill_read_pending: false,
            volume_offset,
            bytes,
            steps: Vec::new(),
        };
        let index = match self.cache_groups_free.pop() {
            Some(index) => {
                let reused = &mut self.cache_groups[index as usize];
                let mut kept = std::mem::take(&mut reused.steps);
                kept.clear();
                kept.extend_from_slice(steps);
                *reused = CacheGroup {
                    steps: kept,
                    ..group
                };
                index
            }
            None => {
                self.cache_groups.push(CacheGroup {
                    steps: steps.to_vec(),
                    ..group
                });
                (self.cache_groups.len() - 1) as u32
            }
        };
        let first_slot = match kind {
            GroupKind::ReadHome | GroupKind::WriteHome | GroupKind::Fill | GroupKind::Blocked => 0,
            _ => self.slot_offset(&steps[0]) + (volume_offset - first_start),
        };
        let whole = first_start..last_start + last_len;
        let op = request.op;
        match kind {
            GroupKind::ReadSlot | GroupKind::WriteSlot => {
                self.cache_user_io(index, 0, op, first_slot, bytes);
            }
            GroupKind::ReadHome | GroupKind::WriteHome => {
                self.cache_user_io(index, self.home, op, volume_offset, bytes);
            }
            GroupKind::Blocked => unreachable!("a blocked part is planned again, never started"),
            GroupKind::WriteBoth { merge: false } => {
                self.cache_user_io(index, self.home, Op::Write, volume_offset, bytes);
                self.cache_user_io(index, 0, Op::Write, first_slot, bytes);
            }
            GroupKind::Fill
                if self.split_fills.is_some_and(|split| {
                    split.worth(
                        whole.end - whole.start,
                        bytes,
                        self.device_outstanding[self.home] + self.host_queues[self.home].len(),
                    )
                }) =>
            {
                // The user's part answers the user; the whole block(s)
                // for the slots in the background.
                self.cache_counters.split_fills += 1;
                self.cache_user_io(index, self.home, Op::Read, volume_offset, bytes);
                self.cache_groups[index as usize].fill_read_pending = true;
                self.submit(
                    self.home,
                    DeviceIo {
                        id: (KIND_CACHE_FILL_READ << KIND_SHIFT) | u64::from(index),
                        op: Op::Read,
                        offset_bytes: whole.start,
                        length_bytes: whole.end - whole.start,
                        background: true,
                    },
                );
            }
            GroupKind::Fill | GroupKind::WriteSlotMerged | GroupKind::WriteBoth { merge: true } => {
                // The whole block(s) from home: a fill's read answers the
                // user; a merge read precedes the writes.
                if kind != GroupKind::Fill {
                    self.cache_counters.merge_read_bytes += whole.end - whole.start;
                }
                self.cache_user_io(
                    index,
                    self.home,
                    Op::Read,
                    whole.start,
                    whole.end - whole.start,
                );
            }
        }
    }

    /// A device IO the user waits for (counts as user IO of its tier).
    fn cache_user_io(
        &mut self,
        group: u32,
        tier: usize,
        op: Op,
        offset_bytes: u64,
        length_bytes: u64,
    ) {
        if tier == self.home
            && op == Op::Read
            && self.cache_user_home_read(group, offset_bytes, length_bytes)
        {
            return;
        }
        self.cache_groups[group as usize].parts_left += 1;
        self.submit(
            tier,
            DeviceIo {
                id: (KIND_CACHE_USER << KIND_SHIFT) | u64::from(group),
                op,
                offset_bytes,
                length_bytes,
                background: false,
            },
        );
    }

    /// A user-facing IO of `group` completed.
    pub(super) fn cache_user_io_done(&mut self, group: u32, done_ns: u64) -> Result<(), SimError> {
        let entry = &mut self.cache_groups[group as usize];
        entry.parts_left -= 1;
        if entry.parts_left > 0 {
            return Ok(());
        }
        let kind = entry.kind;
        match (kind, entry.phase) {
            (GroupKind::WriteSlotMerged, 0) => {
                entry.phase = 1;
                let step = entry.steps[0];
                let (_, length) = self.block_range(step.block);
                let offset = self.slot_offset(&step);
                self.cache_user_io(group, 0, Op::Write, offset, length);
                Ok(())
            }
            (GroupKind::WriteBoth { merge: true }, 0) => {
                entry.phase = 1;
                let step = entry.steps[0];
                let (volume_offset, bytes) = (entry.volume_offset, entry.bytes);
                let (_, length) = self.block_range(step.block);
                let offset = self.slot_offset(&step);
                self.cache_user_io(group, self.home, Op::Write, volume_offset, bytes);
                self.cache_user_io(group, 0, Op::Write, offset, length);
                Ok(())
            }
            (GroupKind::Fill, _) => {
                // The user has the data; the blocks go into their slots
                // once their home read is in.
                let piece = entry.piece;
                if entry.fill_read_pending {
                    entry.phase = 1;
                } else {
                    self.start_fill_writes(group);
                }
                self.complete_piece(piece, done_ns)
            }
            _ => {
                let piece = entry.piece;
                let steps = std::mem::take(&mut entry.steps);
                for step in &steps {
                    self.cache().finish(step, true);
                }
                self.cache_groups[group as usize].steps = steps;
                self.cache_groups_free.push(group);
                self.complete_piece(piece, done_ns)
            }
        }
    }

    /// A split fill's whole-block read from home completed.
    pub(super) fn cache_fill_read_done(&mut self, tier: usize, group: u32) {
        let entry = &mut self.cache_groups[group as usize];
        entry.fill_read_pending = false;
        let user_done = entry.phase == 1;
        let (first_block, last_block) = (
            entry.steps[0].block,
            entry.steps[entry.steps.len() - 1].block,
        );
        let (first, _) = self.block_range(first_block);
        let (last, last_length) = self.block_range(last_block);
        self.monitor
            .record_migration_io(tier as TierId, last + last_length - first);
        if user_done {
            self.start_fill_writes(group);
        }
    }

    /// A fill run's blocks are read from home: each into its slot.
    fn start_fill_writes(&mut self, group: u32) {
        let entry = &mut self.cache_groups[group as usize];
        entry.phase = 2;
        let count = entry.steps.len();
        entry.parts_left = count as u32;
        for position in 0..count {
            let step = self.cache_groups[group as usize].steps[position];
            let (_, length) = self.block_range(step.block);
            let offset = self.slot_offset(&step);
            self.cache_counters.fills += 1;
            self.cache_counters.fill_bytes += length;
            self.submit(
                0,
                DeviceIo {
                    id: (KIND_CACHE_FILL << KIND_SHIFT)
                        | (u64::from(group) << FILL_STEP_BITS)
                        | position as u64,
                    op: Op::Write,
                    offset_bytes: offset,
                    length_bytes: length,
                    background: true,
                },
            );
        }
    }

    /// A fill's slot write landed: the block is valid from now on.
    pub(super) fn cache_fill_done(&mut self, tier: usize, payload: u64) {
        let group = (payload >> FILL_STEP_BITS) as u32;
        let position = (payload & ((1 << FILL_STEP_BITS) - 1)) as usize;
        let step = self.cache_groups[group as usize].steps[position];
        let (_, length) = self.block_range(step.block);
        self.monitor.record_migration_io(tier as TierId, length);
        self.cache().finish(&step, true);
        let entry = &mut self.cache_groups[group as usize];
        entry.parts_left -= 1;
        if entry.parts_left == 0 {
            self.cache_groups_free.push(group);
        }
    }

    /// Starts the next promotion copy, if none is reading, one is queued,
    /// and no user IO is at home: copies use home's idle moments, one block
    /// at a time (a user request waits behind at most one block's read, as
    /// behind a fill; consecutive blocks stream from the disk's read-ahead).
    fn pump_loads(&mut self) {
        if self.load_reading.is_some() || self.user_outstanding[self.home] > 0 {
            return;
        }
        let Some(load) = self.cache().next_load() else {
            return;
        };
        self.load_reading = Some(load);
        let (offset, length) = self.block_range(load.block);
        self.submit(
            self.home,
            DeviceIo {
                id: KIND_CACHE_LOAD_READ << KIND_SHIFT,
                op: Op::Read,
                offset_bytes: offset,
                length_bytes: length,
                background: true,
            },
        );
    }

    /// A promoted block is read from home: into its slot.
    pub(super) fn load_read_done(&mut self, tier: usize) {
        let load = self
            .load_reading
            .take()
            .expect("a promotion read completed with none in flight");
        let (_, length) = self.block_range(load.block);
        self.monitor.record_migration_io(tier as TierId, length);
        let index = self.load_writes.insert(load);
        self.submit(
            0,
            DeviceIo {
                id: (KIND_CACHE_LOAD_WRITE << KIND_SHIFT) | u64::from(index),
                op: Op::Write,
                offset_bytes: u64::from(load.ticket.slot) * self.cache_block_bytes,
                length_bytes: length,
                background: true,
            },
        );
    }

    /// A promoted block landed in its slot.
    pub(super) fn load_write_done(&mut self, tier: usize, index: u32) {
        let load = self.load_writes.take(index);
        let (_, length) = self.block_range(load.block);
        self.monitor.record_migration_io(tier as TierId, length);
        self.cache().load_done(load, true);
    }

    /// Starts the writebacks the cache wants now, up to
    /// [`WRITEBACKS_IN_FLIGHT`], and the next promotion run.
    pub(super) fn pump_writebacks(&mut self) {
        let Controller::Cache(_) = self.controller else {
            return;
        };
        if self.cache().smr().is_some() {
            self.pump_destage();
        }
        self.pump_loads();
        let dirty = self.cache().dirty_blocks();
        self.cache_counters.dirty_blocks_max = self.cache_counters.dirty_blocks_max.max(dirty);
        let idle = self.user_outstanding[self.home] == 0;
        while self.writebacks_in_flight < WRITEBACKS_IN_FLIGHT {
            let Some(writeback) = self.cache().next_writeback(idle) else {
                break;
            };
            self.writebacks_in_flight += 1;
            let (_, length) = self.block_range(writeback.block);
            let offset = u64::from(writeback.slot) * self.cache_block_bytes;
            let index = self.writebacks.insert(writeback);
            self.submit(
                0,
                DeviceIo {
                    id: (KIND_WRITEBACK_READ << KIND_SHIFT) | u64::from(index),
                    op: Op::Read,
                    offset_bytes: offset,
                    length_bytes: length,
                    background: true,
                },
            );
        }
    }

    /// Home's user IO all completed at `done_ns`: with an SMR home, wake
    /// the destage when it has been idle for [`SMR_IDLE_NS`].
    pub(super) fn home_idle_from(&mut self, done_ns: u64) {
        let Controller::Cache(cache) = &self.controller else {
            return;
        };
        if cache.smr().is_none() {
            return;
        }
        self.home_idle_since_ns = done_ns;
        self.wake_destage_when_idle();
    }

    /// With dirty blocks and no user IO at home, wakes the destage when
    /// home has been idle for [`SMR_IDLE_NS`] (one timer per idle spell).
    fn wake_destage_when_idle(&mut self) {
        let idle_at_ns = self.home_idle_since_ns + SMR_IDLE_NS;
        if self.user_outstanding[self.home] > 0
            || self.now_ns >= idle_at_ns
            || self.destage_wake_ns == idle_at_ns
            || self.cache().dirty_blocks() == 0
        {
            return;
        }
        self.destage_wake_ns = idle_at_ns;
        self.timer_sequence += 1;
        self.timers.push(std::cmp::Reverse((
            idle_at_ns,
            self.timer_sequence,
            DESTAGE_TIMER,
        )));
    }

    /// Starts the SMR destage IOs the core hands out now (it paces them).
    /// Home counts as busy until it has been idle for [`SMR_IDLE_NS`].
    fn pump_destage(&mut self) {
        let user_waiting = self.user_outstanding[self.home] > 0
            || self.now_ns < self.home_idle_since_ns + SMR_IDLE_NS;
        self.wake_destage_when_idle();
        while let Some(io) = self.cache().next_destage_io(user_waiting) {
            let (tier, op) = match io.kind {
                DestageIoKind::ReadSlot { .. } => (0, Op::Read),
                DestageIoKind::ReadHome => (self.home, Op::Read),
                DestageIoKind::WriteHome => (self.home, Op::Write),
            };
            let index = self.destage_ios.insert(io);
            self.submit(
                tier,
                DeviceIo {
                    id: (KIND_DESTAGE << KIND_SHIFT) | u64::from(index),
                    op,
                    offset_bytes: io.offset_bytes,
                    length_bytes: io.length_bytes,
                    background: true,
                },
            );
        }
    }

    /// A band rewrite's IO completed. When the band is done, the parts of
    /// requests that waited for it are planned again.
    pub(super) fn destage_io_done(&mut self, tier: usize, index: u32) -> Result<(), SimError> {
        let io = self.destage_ios.take(index);
        self.monitor
            .record_migration_io(tier as TierId, io.length_bytes);
        match io.kind {
            DestageIoKind::ReadHome => self.cache_counters.destage_read_bytes += io.length_bytes,
            DestageIoKind::WriteHome => self.cache_counters.destage_write_bytes += io.length_bytes,
            DestageIoKind::ReadSlot { .. } => {}
        }
        if self.cache().destage_io_done(io, true).is_none() {
            return Ok(());
        }
        for (request_index, part) in std::mem::take(&mut self.blocked) {
            self.dispatch_cache(request_index, &part);
            let state = self.requests.get_mut(request_index);
            state.pieces_left -= 1;
            debug_assert!(
                state.pieces_left > 0,
                "a part planned again started nothing"
            );
        }
        Ok(())
    }

    /// A writeback's slot read completed: write the block home.
    pub(super) fn writeback_read_done(&mut self, tier: usize, index: u32) {
        let writeback: Writeback = self.writebacks.items[index as usize];
        let (offset, length) = self.block_range(writeback.block);
        self.monitor.record_migration_io(tier as TierId, length);
        self.submit(
            self.home,
            DeviceIo {
                id: (KIND_WRITEBACK_WRITE << KIND_SHIFT) | u64::from(index),
                op: Op::Write,
                offset_bytes: offset,
                length_bytes: length,
                background: true,
            },
        );
    }

    /// A writeback's home write completed: home holds the block as read.
    pub(super) fn writeback_write_done(&mut self, tier: usize, index: u32) {
        let writeback = self.writebacks.take(index);
        let (_, length) = self.block_range(writeback.block);
        self.monitor.record_migration_io(tier as TierId, length);
        self.cache_counters.writeback_bytes += length;
        self.writebacks_in_flight -= 1;
        self.cache().writeback_done(writeback, true);
    }
}
