//! Replicas in free HDD space (paper 003, after FS2, SOSP 2005): copies of
//! extents that are read together but lie far apart, placed in free space
//! near the centre of their access pattern, so the head travels less; and
//! for a read sequence that recurs (an application start), optionally every
//! extent of it laid out contiguously in sequence order.
//!
//! Sans-IO: the [`ReplicaManager`] decides and never does IO or reads a
//! clock. The caller (the simulator, later the live engine) reports reads,
//! writes and trims of the HDD tier with the time, asks how to route each
//! read (passing a cost function: the HDD model's seek + rotation from the
//! current head position, or a distance estimate for a real disk), takes
//! copy jobs with [`ReplicaManager::next_job`] when the disk is idle,
//! carries each out (read the source, write the target) and reports it with
//! [`ReplicaManager::job_done`].
//!
//! What it owns:
//! - the allocation map of the tier's extents: an extent holds user data
//!   once written (or, with [`ReplicaConfig::reads_allocate`], once read: a
//!   simulator that replays a trace has no record of the writes before it),
//!   and is free again when trimmed whole;
//! - detection: read *sessions* (reads separated by less than
//!   [`ReplicaConfig::session_gap_ns`]); a session whose extents mostly
//!   match an earlier group's is that group recurring. A group seen
//!   [`ReplicaConfig::min_recurrences`] times gets replicas; its centre is
//!   the read-weighted median of its extents' offsets;
//! - placement: copies of the group's members farther than
//!   [`ReplicaConfig::far_bytes`] from the centre into the free run nearest
//!   the centre (several copies per extent, up to
//!   [`ReplicaConfig::max_copies`], each near a different centre), or with
//!   [`ReplicaConfig::contiguous_sequences`] all members in sequence order;
//!   replica space stays within [`ReplicaConfig::max_share`] of the free
//!   extents;
//! - routing: each extent of a read from the copy predicted cheapest
//!   (continuing on from the previous extent's copy when adjacent), only
//!   ever a *current* copy: one whose copy job completed with no write to
//!   the primary since the job was created;
//! - writes: a write to a replicated extent drops its copies (and cancels
//!   copy jobs still pending); a write into free space that holds a replica
//!   drops that replica first.
//!
//! The caller's obligations: report every write and trim of the tier's
//! user data before (or as) it is issued, never a copy job's own write; a
//! copy job whose write is in flight must complete before a user write to
//! the same target extent is issued (`ReplicaManager::copy_in_flight`
//! says whether one is); route a read with [`ReplicaManager::route_read`]
//! at the time it is issued. `docs/replicas.md` describes the model.

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use tierd_common::hash::{FastMap, FastSet};

/// Settings (the `replicas` table of an HDD tier; `docs/replicas.md`).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ReplicaConfig {
    /// Unit of allocation tracking, detection and copying (a power of two).
    pub extent_bytes: u64,
    /// Most copies of one extent (besides the primary). 1 is FS2's rule.
    pub max_copies: u32,
    /// Most replica space, as a share of the extents free when a placement
    /// is planned (0..=1).
    pub max_share: f64,
    /// Lay a recurring sequence's extents out contiguously in sequence order.
    pub contiguous_sequences: bool,
    /// Reads further apart than this end a session.
    pub session_gap_ns: u64,
    /// A member farther than this from its group's centre gets a copy.
    pub far_bytes: u64,
    /// Sessions a group must be seen in before it gets replicas.
    pub min_recurrences: u32,
    /// A session is closed at this many distinct extents (a long scan is not
    /// an access pattern worth copying).
    pub max_session_extents: usize,
    /// Groups remembered (least recently seen forgotten first; their copies
    /// stay).
    pub max_groups: usize,
    /// Share of common extents (|A∩B| / |A∪B|) at which a session is an
    /// earlier group recurring.
    pub match_share: f64,
    /// A read of an extent marks it allocated (the simulator: a trace holds
    /// reads of data written before it began). A read of replica space then
    /// drops that replica. The live engine keeps a persisted map and sets
    /// this false.
    pub reads_allocate: bool,
}

impl Default for ReplicaConfig {
    fn default() -> ReplicaConfig {
        ReplicaConfig {
            extent_bytes: 64 << 10,
            max_copies: 4,
            max_share: 0.2,
            contiguous_sequences: false,
            session_gap_ns: 1_000_000_000,
            far_bytes: 1 << 30,
            min_recurrences: 2,
            max_session_extents: 16_384,
            max_groups: 64,
            match_share: 0.5,
            reads_allocate: true,
        }
    }
}

impl ReplicaConfig {
    /// Checks the settings; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !self.extent_bytes.is_power_of_two() || self.extent_bytes < 4096 {
            return Err(format!(
                "extent_bytes: {} is not a power of two >= 4096",
                self.extent_bytes
            ));
        }
        if self.max_copies == 0 {
            return Err("max_copies: must be at least 1".to_string());
        }
        if !(0.0..=1.0).contains(&self.max_share) {
            return Err(format!("max_share: {} is not in 0..=1", self.max_share));
        }
        if !(self.match_share > 0.0 && self.match_share <= 1.0) {
            return Err(format!(
                "match_share: {} is not in (0, 1]",
                self.match_share
            ));
        }
        if self.min_recurrences == 0 || self.max_session_extents < 2 || self.max_groups == 0 {
            return Err(
                "min_recurrences, max_groups must be >= 1 and max_session_extents >= 2".to_string(),
            );
        }
        Ok(())
    }
}

/// A copy the driver makes in idle time: read `length_bytes` at
/// `source_offset`, write them at `target_offset`, then report
/// [`ReplicaManager::job_done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyJob {
    pub id: u64,
    pub source_offset: u64,
    pub target_offset: u64,
    pub length_bytes: u64,
}

/// One device read a routed read becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    pub device_offset: u64,
    pub length_bytes: u64,
    /// Served from a replica rather than the primary.
    pub replica: bool,
}

/// What a write did to replicas (for the driver's metadata journal).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteEffect {
    /// Copies of written extents dropped (or their jobs cancelled).
    pub invalidated: u32,
    /// Replicas in the written free space dropped first.
    pub reclaimed: u32,
}

/// Counters over the manager's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ReplicaStats {
    pub sessions: u64,
    pub groups: u64,
    /// Sessions that matched an earlier group.
    pub recurrences: u64,
    pub placements: u64,
    /// Contiguous layouts of a recurring sequence.
    pub layouts: u64,
    pub copies_planned: u64,
    pub copies_made: u64,
    /// Jobs cancelled before they completed (a write to the primary or the
    /// target).
    pub copies_cancelled: u64,
    pub dropped_by_writes: u64,
    pub dropped_by_reclaim: u64,
    pub dropped_by_trims: u64,
    /// Replicas in extents a read showed to hold data (`reads_allocate`).
    pub dropped_by_reads: u64,
    /// Placements refused for want of replica space (`max_share`).
    pub refused_for_space: u64,
    /// Reads routed, and those served at least in part from a replica.
    pub reads_routed: u64,
    pub reads_from_replicas: u64,
    pub bytes_from_replicas: u64,
    pub copy_bytes: u64,
}

/// A point-in-time view for status reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Extents with at least one current copy.
    pub replicated_extents: u64,
    pub current_copies: u64,
    pub pending_copies: u64,
    /// Targets of cancelled copies whose write is still in flight.
    pub reserved_extents: u64,
    pub allocated_extents: u64,
    pub replica_extents: u64,
    pub extents: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyState {
    /// Job created, not yet reported done.
    Pending(u64),
    Current,
}

#[derive(Clone, Copy, Debug)]
struct Copy {
    at: u64,
    state: CopyState,
}

struct Group {
    /// Extents in first-read order of the latest session.
    members: Vec<u64>,
    set: FastSet<u64>,
    reads: Vec<u32>,
    seen: u32,
    last_session: u64,
    /// Bumped when `members` change; equal to `placed` once placed.
    version: u64,
    placed: Option<u64>,
}

#[derive(Default)]
struct Session {
    last_ns: u64,
    extents: Vec<u64>,
    reads: FastMap<u64, u32>,
}

/// A set of extents as bits.
#[derive(Clone)]
struct Bits {
    words: Vec<u64>,
    count: u64,
}

impl Bits {
    fn new(bits: u64) -> Bits {
        Bits {
            words: vec![0; bits.div_ceil(64) as usize],
            count: 0,
        }
    }

    #[inline]
    fn get(&self, bit: u64) -> bool {
        self.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0
    }

    #[inline]
    fn set(&mut self, bit: u64, value: bool) {
        let word = &mut self.words[(bit / 64) as usize];
        let mask = 1 << (bit % 64);
        if value && *word & mask == 0 {
            *word |= mask;
            self.count += 1;
        } else if !value && *word & mask != 0 {
            *word &= !mask;
            self.count -= 1;
        }
    }
}

/// The replica manager (see the module docs).
pub struct ReplicaManager {
    config: ReplicaConfig,
    extents: u64,
    allocated: Bits,
    /// Extents holding a replica or reserved for one.
    replica_space: Bits,
    /// Primary extent → its copies.
    copies: FastMap<u64, Vec<Copy>>,
    /// Replica extent → primary.
    owner: FastMap<u64, u64>,
    /// Jobs not yet handed out, and every live job: id → (primary, target).
    queue: VecDeque<u64>,
    jobs: FastMap<u64, (u64, u64)>,
    /// Handed out and not reported done: job → target. A cancelled job
    /// stays here (its target reserved) until done: its write may still
    /// land.
    in_flight: FastMap<u64, u64>,
    next_job: u64,
    session: Session,
    sessions: u64,
    groups: Vec<Group>,
    stats: ReplicaStats,
    /// Targets of *current* copies dropped since the last
    /// [`ReplicaManager::take_dropped_current`], when the driver journals
    /// them ([`ReplicaManager::log_dropped_current`]).
    dropped_current: Option<Vec<u64>>,
}

impl ReplicaManager {
    /// A manager for a tier of `capacity_bytes`, every extent free.
    pub fn new(config: ReplicaConfig, capacity_bytes: u64) -> Result<ReplicaManager, String> {
        config.validate()?;
        let extents = capacity_bytes / config.extent_bytes;
        if extents < 2 {
            return Err(format!(
                "capacity {capacity_bytes} bytes holds fewer than two {}-byte extents",
                config.extent_bytes
            ));
        }
        Ok(ReplicaManager {
            extents,
            allocated: Bits::new(extents),
            replica_space: Bits::new(extents),
            copies: FastMap::default(),
            owner: FastMap::default(),
            queue: VecDeque::new(),
            jobs: FastMap::default(),
            in_flight: FastMap::default(),
            next_job: 1,
            session: Session::default(),
            sessions: 0,
            groups: Vec::new(),
            stats: ReplicaStats::default(),
            dropped_current: None,
            config,
        })
    }

    /// A manager for a tier whose durable state a driver kept: `allocated`
    /// extents hold user data and each `(primary, target)` of `copies` is a
    /// current copy. Copies that contradict the map or each other (a target
    /// that is allocated, out of range or already used, a primary that is
    /// free) are not taken; their count is returned beside the manager, and
    /// their space stays free.
    pub fn restore(
        config: ReplicaConfig,
        capacity_bytes: u64,
        allocated: impl IntoIterator<Item = u64>,
        copies: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<(ReplicaManager, u64), String> {
        let mut manager = ReplicaManager::new(config, capacity_bytes)?;
        for extent in allocated {
            if extent >= manager.extents {
                return Err(format!(
                    "allocated extent {extent} is beyond the tier's {} extents",
                    manager.extents
                ));
            }
            manager.allocated.set(extent, true);
        }
        let mut refused = 0;
        for (primary, target) in copies {
            let valid = primary < manager.extents
                && target < manager.extents
                && primary != target
                && manager.allocated.get(primary)
                && !manager.allocated.get(target)
                && !manager.replica_space.get(target);
            if !valid {
                refused += 1;
                continue;
            }
            manager.replica_space.set(target, true);
            manager.owner.insert(target, primary);
            manager.copies.entry(primary).or_default().push(Copy {
                at: target,
                state: CopyState::Current,
            });
        }
        Ok((manager, refused))
    }

    /// Keep a log of the targets of current copies that writes, trims and
    /// reads drop, for a driver that journals current copies (a copy it
    /// recorded as current must be recorded as dropped before the write
    /// that changes its primary or its space is issued).
    pub fn log_dropped_current(&mut self) {
        self.dropped_current.get_or_insert_with(Vec::new);
    }

    /// Moves the logged targets (see [`ReplicaManager::log_dropped_current`])
    /// into `out`.
    pub fn take_dropped_current(&mut self, out: &mut Vec<u64>) {
        if let Some(log) = &mut self.dropped_current {
            out.append(log);
        }
    }

    /// Whether `target` holds a current copy of `primary` (extent numbers).
    pub fn is_current(&self, primary: u64, target: u64) -> bool {
        self.copies.get(&primary).is_some_and(|copies| {
            copies
                .iter()
                .any(|copy| copy.at == target && copy.state == CopyState::Current)
        })
    }

    /// The tier's extents in the allocation map, in order.
    pub fn allocated_extents(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.extents).filter(|extent| self.allocated.get(*extent))
    }

    /// Whether extent `extent` is allocated (extent number, not bytes).
    pub fn extent_allocated(&self, extent: u64) -> bool {
        extent < self.extents && self.allocated.get(extent)
    }

    pub fn config(&self) -> &ReplicaConfig {
        &self.config
    }

    pub fn stats(&self) -> ReplicaStats {
        self.stats
    }

    pub fn status(&self) -> ReplicaStatus {
        let mut status = ReplicaStatus {
            allocated_extents: self.allocated.count,
            replica_extents: self.replica_space.count,
            extents: self.extents,
            reserved_extents: self
                .in_flight
                .keys()
                .filter(|job| !self.jobs.contains_key(job))
                .count() as u64,
            ..ReplicaStatus::default()
        };
        for copies in self.copies.values() {
            let current = copies
                .iter()
                .filter(|copy| copy.state == CopyState::Current)
                .count() as u64;
            status.current_copies += current;
            status.pending_copies += copies.len() as u64 - current;
            status.replicated_extents += u64::from(current > 0);
        }
        status
    }

    /// Whether `extent` holds user data (by the allocation map).
    pub fn is_allocated(&self, offset_bytes: u64) -> bool {
        let extent = offset_bytes / self.config.extent_bytes;
        extent < self.extents && self.allocated.get(extent)
    }

    /// The extents `[offset, offset + length)` touches, clamped to the tier.
    fn extent_range(&self, offset_bytes: u64, length_bytes: u64) -> std::ops::Range<u64> {
        let size = self.config.extent_bytes;
        let first = (offset_bytes / size).min(self.extents);
        let end = offset_bytes
            .saturating_add(length_bytes.max(1))
            .div_ceil(size)
            .min(self.extents);
        first..end
    }

    // ----- reads -------------------------------------------------------

    /// A user read reached the tier at `now_ns`: detection, and (with
    /// `reads_allocate`) the allocation map. Call before [`route_read`].
    ///
    /// [`route_read`]: ReplicaManager::route_read
    pub fn on_read(&mut self, now_ns: u64, offset_bytes: u64, length_bytes: u64) {
        self.poll(now_ns);
        let range = self.extent_range(offset_bytes, length_bytes);
        if self.config.reads_allocate {
            for extent in range.clone() {
                if !self.allocated.get(extent) {
                    if self.owner.contains_key(&extent) {
                        self.drop_replica_at(extent);
                        self.stats.dropped_by_reads += 1;
                    }
                    self.allocated.set(extent, true);
                }
            }
        }
        self.session.last_ns = now_ns;
        for extent in range {
            let reads = self.session.reads.entry(extent).or_insert(0);
            if *reads == 0 {
                self.session.extents.push(extent);
            }
            *reads += 1;
        }
        if self.session.extents.len() >= self.config.max_session_extents {
            self.close_session();
        }
    }

    /// Where to read `[offset, offset + length)` from: one fragment per run
    /// of extents served from one place. `cost(device_offset, length)` is
    /// the predicted time to serve a read there from the head's current
    /// position. Never a copy that is not current.
    pub fn route_read(
        &mut self,
        offset_bytes: u64,
        length_bytes: u64,
        mut cost: impl FnMut(u64, u64) -> f64,
        out: &mut Vec<Fragment>,
    ) {
        out.clear();
        self.stats.reads_routed += 1;
        let size = self.config.extent_bytes;
        let end_bytes = offset_bytes + length_bytes;
        let mut at = offset_bytes;
        let mut replica_bytes = 0;
        while at < end_bytes {
            let extent = at / size;
            let within = at % size;
            let piece = (size - within).min(end_bytes - at);
            let mut best = (at, false);
            if let Some(copies) = self.copies.get(&extent) {
                let continuing = out
                    .last()
                    .map(|last: &Fragment| last.device_offset + last.length_bytes);
                let mut best_cost = if continuing == Some(at) {
                    0.0
                } else {
                    cost(at, piece)
                };
                for copy in copies {
                    if copy.state != CopyState::Current {
                        continue;
                    }
                    let candidate = copy.at * size + within;
                    let candidate_cost = if continuing == Some(candidate) {
                        0.0
                    } else {
                        cost(candidate, piece)
                    };
                    if candidate_cost < best_cost {
                        best_cost = candidate_cost;
                        best = (candidate, true);
                    }
                }
            }
            let (device_offset, replica) = best;
            if replica {
                replica_bytes += piece;
            }
            match out.last_mut() {
                Some(last)
                    if last.replica == replica
                        && last.device_offset + last.length_bytes == device_offset =>
                {
                    last.length_bytes += piece;
                }
                _ => out.push(Fragment {
                    device_offset,
                    length_bytes: piece,
                    replica,
                }),
            }
            at += piece;
        }
        if replica_bytes > 0 {
            self.stats.reads_from_replicas += 1;
            self.stats.bytes_from_replicas += replica_bytes;
        }
    }

    // ----- writes and trims -------------------------------------------

    /// A user write to `[offset, offset + length)`: replicas in that space
    /// are dropped first, copies of the written extents are dropped (jobs
    /// cancelled), and the extents are allocated.
    pub fn on_write(&mut self, offset_bytes: u64, length_bytes: u64) -> WriteEffect {
        let mut effect = WriteEffect::default();
        for extent in self.extent_range(offset_bytes, length_bytes) {
            if self.owner.contains_key(&extent) {
                self.drop_replica_at(extent);
                self.stats.dropped_by_reclaim += 1;
                effect.reclaimed += 1;
            }
            self.allocated.set(extent, true);
            let dropped = self.drop_copies_of(extent);
            self.stats.dropped_by_writes += u64::from(dropped);
            effect.invalidated += dropped;
        }
        effect
    }

    /// A trim (or write of zeros) of `[offset, offset + length)`: extents
    /// covered whole are free again and their copies dropped (a replica in
    /// trimmed free space is dropped too: the device may discard it);
    /// partly covered ones are written.
    pub fn on_trim(&mut self, offset_bytes: u64, length_bytes: u64) -> WriteEffect {
        let size = self.config.extent_bytes;
        let mut effect = WriteEffect::default();
        let end_bytes = offset_bytes.saturating_add(length_bytes);
        for extent in self.extent_range(offset_bytes, length_bytes) {
            let whole = extent * size >= offset_bytes && (extent + 1) * size <= end_bytes;
            if !whole {
                let part = self.on_write(extent * size, size);
                effect.invalidated += part.invalidated;
                effect.reclaimed += part.reclaimed;
                continue;
            }
            if self.owner.contains_key(&extent) {
                // Free space holding a replica: the device may discard
                // what is there, so the replica goes; the space stays free.
                self.drop_replica_at(extent);
                self.stats.dropped_by_trims += 1;
                effect.reclaimed += 1;
                continue;
            }
            let dropped = self.drop_copies_of(extent);
            self.stats.dropped_by_trims += u64::from(dropped);
            effect.invalidated += dropped;
            self.allocated.set(extent, false);
        }
        effect
    }

    /// A copy job's write is in flight to a target in the range: a user
    /// write there must wait for [`ReplicaManager::job_done`].
    pub fn copy_in_flight(&self, offset_bytes: u64, length_bytes: u64) -> Option<u64> {
        let range = self.extent_range(offset_bytes, length_bytes);
        self.in_flight
            .iter()
            .find(|(_, target)| range.contains(*target))
            .map(|(job, _)| *job)
    }

    /// A group that lost a copy of one of its members is placed again the
    /// next time it recurs (its member list alone would not say so).
    fn unplace_groups_of(&mut self, primary: u64) {
        for group in &mut self.groups {
            if group.placed.is_some() && group.set.contains(&primary) {
                group.placed = None;
            }
        }
    }

    fn drop_copies_of(&mut self, primary: u64) -> u32 {
        let Some(copies) = self.copies.remove(&primary) else {
            return 0;
        };
        for copy in &copies {
            self.release(copy);
        }
        self.unplace_groups_of(primary);
        copies.len() as u32
    }

    fn drop_replica_at(&mut self, at: u64) {
        let Some(primary) = self.owner.get(&at).copied() else {
            return;
        };
        self.unplace_groups_of(primary);
        if let Some(copies) = self.copies.get_mut(&primary) {
            if let Some(index) = copies.iter().position(|copy| copy.at == at) {
                let copy = copies.swap_remove(index);
                if copies.is_empty() {
                    self.copies.remove(&primary);
                }
                self.release(&copy);
            }
        }
    }

    /// Frees a copy's space and cancels its job. The target of a job whose
    /// write is in flight stays reserved until the job reports done, so no
    /// other copy is planned where that write may still land.
    fn release(&mut self, copy: &Copy) {
        self.owner.remove(&copy.at);
        if copy.state == CopyState::Current {
            if let Some(log) = &mut self.dropped_current {
                log.push(copy.at);
            }
        }
        let mut reserved = false;
        if let CopyState::Pending(job) = copy.state {
            self.jobs.remove(&job);
            reserved = self.in_flight.contains_key(&job);
            self.stats.copies_cancelled += 1;
        }
        if !reserved {
            self.replica_space.set(copy.at, false);
        }
    }

    // ----- copy jobs ---------------------------------------------------

    /// The next copy to make, if any (the driver calls this when the disk is
    /// idle and paces the jobs).
    pub fn next_job(&mut self, now_ns: u64) -> Option<CopyJob> {
        self.poll(now_ns);
        let size = self.config.extent_bytes;
        while let Some(id) = self.queue.pop_front() {
            let Some(&(primary, target)) = self.jobs.get(&id) else {
                continue;
            };
            self.in_flight.insert(id, target);
            return Some(CopyJob {
                id,
                source_offset: primary * size,
                target_offset: target * size,
                length_bytes: size,
            });
        }
        None
    }

    /// Jobs waiting to be handed out.
    pub fn jobs_waiting(&self) -> usize {
        self.queue.len()
    }

    /// A job's copy landed. Returns whether the copy is now current (false:
    /// it was cancelled by a write meanwhile, and is not used).
    pub fn job_done(&mut self, id: u64) -> bool {
        let reserved = self.in_flight.remove(&id);
        let Some((primary, target)) = self.jobs.remove(&id) else {
            // Cancelled while in flight: its target is free once more
            // (unless a user write took it meanwhile).
            if let Some(target) = reserved {
                if !self.owner.contains_key(&target) {
                    self.replica_space.set(target, false);
                }
            }
            return false;
        };
        let Some(copy) = self
            .copies
            .get_mut(&primary)
            .and_then(|copies| copies.iter_mut().find(|copy| copy.at == target))
        else {
            return false;
        };
        if copy.state != CopyState::Pending(id) {
            return false;
        }
        copy.state = CopyState::Current;
        self.stats.copies_made += 1;
        self.stats.copy_bytes += self.config.extent_bytes;
        true
    }

    // ----- detection -----------------------------------------------------

    /// When [`ReplicaManager::poll`] next has something to do (a session to
    /// close), if anything.
    pub fn next_wake_ns(&self) -> Option<u64> {
        (!self.session.extents.is_empty()).then(|| {
            self.session
                .last_ns
                .saturating_add(self.config.session_gap_ns)
        })
    }

    /// Closes the open session if it has been quiet for the session gap.
    pub fn poll(&mut self, now_ns: u64) {
        if !self.session.extents.is_empty()
            && now_ns.saturating_sub(self.session.last_ns) >= self.config.session_gap_ns
        {
            self.close_session();
        }
    }

    fn close_session(&mut self) {
        let session = std::mem::take(&mut self.session);
        self.session.last_ns = session.last_ns;
        if session.extents.len() < 2 {
            return;
        }
        self.sessions += 1;
        self.stats.sessions += 1;
        let reads: Vec<u32> = session
            .extents
            .iter()
            .map(|extent| session.reads.get(extent).copied().unwrap_or(1))
            .collect();
        let set: FastSet<u64> = session.extents.iter().copied().collect();
        let mut best: Option<(usize, f64)> = None;
        for (index, group) in self.groups.iter().enumerate() {
            let common = set
                .iter()
                .filter(|extent| group.set.contains(extent))
                .count();
            let union = set.len() + group.set.len() - common;
            let share = common as f64 / union.max(1) as f64;
            if share >= self.config.match_share && best.is_none_or(|(_, top)| share > top) {
                best = Some((index, share));
            }
        }
        let index = match best {
            Some((index, _)) => {
                self.stats.recurrences += 1;
                let group = &mut self.groups[index];
                group.seen += 1;
                group.last_session = self.sessions;
                if group.members != session.extents {
                    group.members = session.extents;
                    group.set = set;
                    group.version += 1;
                }
                group.reads = reads;
                index
            }
            None => {
                if self.groups.len() >= self.config.max_groups {
                    let oldest = (0..self.groups.len())
                        .min_by_key(|index| self.groups[*index].last_session)
                        .unwrap_or(0);
                    self.groups.swap_remove(oldest);
                }
                self.stats.groups += 1;
                self.groups.push(Group {
                    members: session.extents,
                    set,
                    reads,
                    seen: 1,
                    last_session: self.sessions,
                    version: 0,
                    placed: None,
                });
                self.groups.len() - 1
            }
        };
        let group = &self.groups[index];
        if group.seen >= self.config.min_recurrences && group.placed != Some(group.version) {
            self.place(index);
        }
    }

    // ----- placement -----------------------------------------------------

    /// The read-weighted median extent of a group.
    fn centre(group: &Group) -> u64 {
        let mut weighted: Vec<(u64, u32)> = group
            .members
            .iter()
            .copied()
            .zip(group.reads.iter().copied())
            .collect();
        weighted.sort_unstable();
        let total: u64 = weighted.iter().map(|(_, reads)| u64::from(*reads)).sum();
        let mut running = 0;
        for (extent, reads) in &weighted {
            running += u64::from(*reads);
            if running * 2 >= total {
                return *extent;
            }
        }
        weighted.last().map_or(0, |(extent, _)| *extent)
    }

    fn place(&mut self, index: usize) {
        let size = self.config.extent_bytes;
        let far_extents = self.config.far_bytes / size;
        let group = &self.groups[index];
        let centre = Self::centre(group);
        // A free extent reads as zeros: nothing to copy.
        let members: Vec<u64> = group
            .members
            .iter()
            .copied()
            .filter(|member| self.allocated.get(*member))
            .collect();
        let version = group.version;
        self.groups[index].placed = Some(version);
        self.stats.placements += 1;
        if self.config.contiguous_sequences && self.lay_out(&members, centre) {
            self.stats.layouts += 1;
            return;
        }
        // Far members with room for another copy and none near this centre.
        let far: Vec<u64> = members
            .iter()
            .copied()
            .filter(|member| member.abs_diff(centre) > far_extents)
            .filter(|member| {
                let copies = self.copies.get(member).map_or(&[][..], Vec::as_slice);
                copies.len() < self.config.max_copies as usize
                    && !copies
                        .iter()
                        .any(|copy| copy.at.abs_diff(centre) <= far_extents)
            })
            .collect();
        if far.is_empty() {
            return;
        }
        if !self.within_budget(far.len() as u64) {
            self.stats.refused_for_space += 1;
            return;
        }
        if let Some(start) = self.free_run_near(centre, far.len() as u64) {
            for (offset, member) in far.iter().enumerate() {
                self.plan_copy(*member, start + offset as u64);
            }
            return;
        }
        for member in far {
            match self.free_run_near(centre, 1) {
                Some(at) => self.plan_copy(member, at),
                None => {
                    self.stats.refused_for_space += 1;
                    return;
                }
            }
        }
    }

    /// Every member in sequence order into one free run near `centre`.
    /// False when there is no such run or no budget for it.
    fn lay_out(&mut self, members: &[u64], centre: u64) -> bool {
        // Already laid out in this order: nothing to do.
        let mut previous: Option<u64> = None;
        let laid = members.iter().all(|member| {
            let next = self.copies.get(member).and_then(|copies| {
                copies
                    .iter()
                    .find(|copy| previous.is_none_or(|at| copy.at == at + 1))
                    .map(|copy| copy.at)
            });
            previous = next;
            next.is_some()
        });
        if laid {
            return true;
        }
        // A sequence mostly laid out already (it recurred with a few reads
        // changed) is not laid out again: its new far members get copies
        // as any group's do.
        let covered = members
            .iter()
            .filter(|member| self.copies.contains_key(member))
            .count();
        if covered * 2 > members.len() {
            return false;
        }
        let count = members.len() as u64;
        if !self.within_budget(count) {
            self.stats.refused_for_space += 1;
            return false;
        }
        let Some(start) = self.free_run_near(centre, count) else {
            return false;
        };
        for (offset, member) in members.iter().enumerate() {
            self.plan_copy(*member, start + offset as u64);
        }
        true
    }

    fn within_budget(&self, more: u64) -> bool {
        let free = self.extents - self.allocated.count;
        (self.replica_space.count + more) as f64 <= self.config.max_share * free as f64
    }

    fn plan_copy(&mut self, primary: u64, at: u64) {
        debug_assert!(!self.allocated.get(at) && !self.replica_space.get(at));
        let id = self.next_job;
        self.next_job += 1;
        self.replica_space.set(at, true);
        self.owner.insert(at, primary);
        self.copies.entry(primary).or_default().push(Copy {
            at,
            state: CopyState::Pending(id),
        });
        self.jobs.insert(id, (primary, at));
        self.queue.push_back(id);
        self.stats.copies_planned += 1;
    }

    #[inline]
    fn is_free(&self, extent: u64) -> bool {
        !self.allocated.get(extent) && !self.replica_space.get(extent)
    }

    /// The start of the run of `count` free extents nearest `centre` (the
    /// first such run at or after it, or the last before it, whichever
    /// starts nearer).
    fn free_run_near(&self, centre: u64, count: u64) -> Option<u64> {
        if count == 0 || count > self.extents {
            return None;
        }
        let after = self.free_run_from(centre.min(self.extents - 1), count, true);
        let before = self.free_run_from(centre.min(self.extents - 1), count, false);
        match (after, before) {
            (Some(a), Some(b)) => {
                let after_distance = a.saturating_sub(centre);
                let before_distance = centre.saturating_sub(b + count - 1);
                Some(if after_distance <= before_distance {
                    a
                } else {
                    b
                })
            }
            (a, b) => a.or(b),
        }
    }

    /// Scans from `from` forwards (or backwards) for `count` free extents in
    /// a row; returns the run's first extent.
    fn free_run_from(&self, from: u64, count: u64, forward: bool) -> Option<u64> {
        let mut run = 0;
        let mut at = from;
        loop {
            // Skip whole used words quickly.
            if at.is_multiple_of(64) && self.words_used(at) {
                run = 0;
                if forward {
                    at += 64;
                    if at >= self.extents {
                        return None;
                    }
                    continue;
                }
            }
            if self.is_free(at) {
                run += 1;
                if run == count {
                    return Some(if forward { at + 1 - count } else { at });
                }
            } else {
                run = 0;
            }
            if forward {
                at += 1;
                if at >= self.extents {
                    return None;
                }
            } else {
                if at == 0 {
                    return None;
                }
                at -= 1;
            }
        }
    }

    #[inline]
    fn words_used(&self, at: u64) -> bool {
        let word = (at / 64) as usize;
        at + 64 <= self.extents
            && (self.allocated.words[word] | self.replica_space.words[word]) == u64::MAX
    }
}
