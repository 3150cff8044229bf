//! The reduced tier's cleaner, its decisions (`docs/engine/reduce.md`,
//! "Cleaning"): when to clean, which packs to empty, which free packs users
//! may take, and how long a write that finds no room keeps trying.
//!
//! Packs are never written in place, so an overwritten or trimmed block
//! leaves its old fragment dead in its pack, and a pack comes free by
//! itself only when every fragment in it is dead. The cleaner (as a
//! log-structured file system's) empties the packs with the fewest live
//! bytes by copying their live fragments to the open packs.
//!
//! Sans-IO: the caller keeps the packs (which are free, how many live bytes
//! each holds, which may be cleaned) and does the reads, copies and the
//! flush; [`Cleaner`] answers from the numbers it is given. The live
//! reduced tier (`tierd_engine::device::reduce`) and the simulator's pack
//! model (`tierd_sim::reduce::packs`) run this same code.

/// Free packs kept for the cleaner: enough for one open pack of each kind
/// it copies into (raw and compressed). Users never take them, so the
/// cleaner can always make progress. A tier of fewer than 8 packs keeps a
/// quarter of them.
pub const RESERVE_PACKS: u64 = 2;

/// Packs one cleaning pass empties at most.
pub const BATCH_PACKS: usize = 16;

/// Cleaning passes a write that finds the tier full may run (while each
/// makes room) before it fails with ENOSPC.
pub const MAX_PASSES_PER_WRITE: u32 = 8;

/// Who takes a free pack: users never take the last
/// [`Cleaner::reserve_packs`], the cleaner may.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appender {
    User,
    Cleaner,
}

/// What the cleaner did (status, both worlds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CleanerTallies {
    /// Cleaning passes run (background and on a full tier).
    pub passes: u64,
    /// Packs emptied by copying their live fragments elsewhere.
    pub packs_cleaned: u64,
    /// Bytes of live fragments copied (the cleaner's write amplification).
    pub relocated_bytes: u64,
    /// Block map entries moved to the copies.
    pub relocated_blocks: u64,
}

/// The cleaner's rules for one tier's packs (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cleaner {
    pack_count: u64,
    pack_bytes: u64,
    block_bytes: u64,
    reserve_packs: u64,
}

impl Cleaner {
    /// The rules for `pack_count` packs of `pack_bytes`, holding fragments
    /// of blocks of `block_bytes` (a raw fragment's size).
    pub fn new(pack_count: u64, pack_bytes: u64, block_bytes: u64) -> Cleaner {
        Cleaner {
            pack_count,
            pack_bytes,
            block_bytes,
            reserve_packs: RESERVE_PACKS.min(pack_count / 4),
        }
    }

    /// Free packs users may not take.
    pub fn reserve_packs(&self) -> u64 {
        self.reserve_packs
    }

    /// Whether `appender` may open a pack when `free` packs are free.
    pub fn may_take(&self, appender: Appender, free: u64) -> bool {
        match appender {
            Appender::User => free > self.reserve_packs,
            Appender::Cleaner => free > 0,
        }
    }

    /// Whether users have room without cleaning (a write that found none
    /// waits for a pass under way, then finds this true).
    pub fn users_have_room(&self, free: u64) -> bool {
        self.may_take(Appender::User, free)
    }

    /// Free packs below which the background cleaner starts: a 32nd of the
    /// packs, at least the reserve and 4 more.
    pub fn low_packs(&self) -> u64 {
        (self.pack_count / 32).max(RESERVE_PACKS + 4)
    }

    /// Free packs the background cleaner stops at: twice the low mark.
    pub fn high_packs(&self) -> u64 {
        2 * self.low_packs()
    }

    /// Whether background cleaning should start: free packs are below the
    /// low mark while the packs in use hold at least two packs' worth of
    /// bytes that are not live fragments (`live_bytes`: every live
    /// fragment's bytes, each once), so cleaning would help.
    pub fn wants_cleaning(&self, free: u64, live_bytes: u64) -> bool {
        let in_use = self.pack_count.saturating_sub(free) * self.pack_bytes;
        free < self.low_packs() && in_use >= live_bytes + 2 * self.pack_bytes
    }

    /// Whether background cleaning runs another pass (the last one freed
    /// packs, and free packs are still below the high mark).
    pub fn keeps_cleaning(&self, free: u64) -> bool {
        free < self.high_packs()
    }

    /// The packs one pass empties, fewest live bytes first: of
    /// `candidates` (packs the caller may clean: on the device, referenced,
    /// not staged, not being cleaned, with their live bytes), those with at
    /// least a block of dead bytes, at most [`BATCH_PACKS`], and no more
    /// live bytes in all than `free` packs (the reserve included, each
    /// losing up to a block to a copy that does not fit its tail) and
    /// `open_room` (the open packs' unfilled bytes) can take.
    pub fn pick_victims(
        &self,
        candidates: impl IntoIterator<Item = (u32, u64)>,
        free: u64,
        open_room: u64,
    ) -> Vec<u32> {
        self.pick(candidates, free, open_room, BATCH_PACKS)
    }

    /// [`Cleaner::pick_victims`] with another batch bound.
    pub fn pick(
        &self,
        candidates: impl IntoIterator<Item = (u32, u64)>,
        free: u64,
        open_room: u64,
        max: usize,
    ) -> Vec<u32> {
        let min_dead = self.block_bytes.max(1);
        let mut candidates: Vec<(u64, u32)> = candidates
            .into_iter()
            .filter(|&(_, live)| self.pack_bytes.saturating_sub(live) >= min_dead)
            .map(|(pack, live)| (live, pack))
            .collect();
        // The `max` emptiest, in order (one pass over the packs, no sort of
        // them all).
        if candidates.len() > max && max > 0 {
            candidates.select_nth_unstable(max - 1);
            candidates.truncate(max);
        }
        candidates.sort_unstable();
        let room = free * (self.pack_bytes - self.block_bytes.min(self.pack_bytes)) + open_room;
        let mut taken = 0u64;
        let mut victims = Vec::new();
        for (live, pack) in candidates.into_iter().take(max) {
            if taken + live > room {
                break;
            }
            taken += live;
            victims.push(pack);
        }
        victims
    }
}

/// What a write that found no room does next ([`RoomRetry::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomStep {
    /// Packs wait for a flush to be reusable: flush, then try again.
    Flush,
    /// Run a cleaning pass on the writer's thread, then try again (or fail
    /// if the pass made no room: [`RoomRetry::after_pass`]).
    Clean,
    /// Fail with ENOSPC, nothing changed.
    Fail,
}

/// One write's attempts to find room: a flush when packs wait for one,
/// then up to [`MAX_PASSES_PER_WRITE`] cleaning passes while each makes
/// room.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoomRetry {
    flushed: bool,
    passes: u32,
}

impl RoomRetry {
    pub fn new() -> RoomRetry {
        RoomRetry::default()
    }

    /// The write found no free pack; `after_flush`: some wait for a flush.
    pub fn next(&mut self, after_flush: bool) -> RoomStep {
        if after_flush && !self.flushed {
            self.flushed = true;
            RoomStep::Flush
        } else if self.passes < MAX_PASSES_PER_WRITE {
            self.passes += 1;
            self.flushed = false;
            RoomStep::Clean
        } else {
            RoomStep::Fail
        }
    }

    /// A pass run for this write finished: true to try again, false to
    /// fail (it made no room).
    pub fn after_pass(&self, made_room: bool) -> bool {
        made_room
    }

    /// Passes run for this write so far.
    pub fn passes(&self) -> u32 {
        self.passes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    /// 64 packs of 128 KiB, 4 KiB blocks.
    fn cleaner() -> Cleaner {
        Cleaner::new(64, 128 * KIB, 4 * KIB)
    }

    #[test]
    fn victims_are_the_emptiest_with_dead_bytes_at_most_a_batch() {
        let cleaner = cleaner();
        // 40 packs: pack p holds (p % 20 + 1) × 4 KiB live, and two are
        // full (no dead block): never taken.
        let mut candidates: Vec<(u32, u64)> = (0..40u32)
            .map(|pack| (pack, u64::from(pack % 20 + 1) * 4 * KIB))
            .collect();
        candidates.push((100, 128 * KIB));
        candidates.push((101, 128 * KIB - 100));
        let victims = cleaner.pick_victims(candidates, 60, 0);
        assert_eq!(victims.len(), BATCH_PACKS);
        // Fewest live first, ties by pack number.
        assert_eq!(&victims[..4], &[0, 20, 1, 21]);
        assert!(!victims.contains(&100) && !victims.contains(&101));
        let live_of = |pack: u32| u64::from(pack % 20 + 1);
        assert!(victims.windows(2).all(|w| live_of(w[0]) <= live_of(w[1])));
        assert_eq!(victims.iter().map(|&p| live_of(p)).max(), Some(8));
    }

    #[test]
    fn victims_never_hold_more_live_bytes_than_there_is_room() {
        let cleaner = cleaner();
        let candidates = [(1, 64 * KIB), (2, 64 * KIB), (3, 64 * KIB), (4, 8 * KIB)];
        // One free pack takes 124 KiB (a block lost to a tail), the open
        // packs 10 KiB more: the 8 KiB pack and one 64 KiB pack fit, the
        // next would not (the order is by live bytes).
        assert_eq!(cleaner.pick_victims(candidates, 1, 10 * KIB), vec![4, 1]);
        // No room at all: nothing.
        assert_eq!(cleaner.pick_victims(candidates, 0, 0), Vec::<u32>::new());
        // An empty pack with a reference (live 0) costs no room.
        assert_eq!(cleaner.pick_victims([(9, 0)], 0, 0), vec![9]);
    }

    #[test]
    fn users_never_take_the_reserve_and_the_cleaner_may() {
        let cleaner = cleaner();
        assert_eq!(cleaner.reserve_packs(), RESERVE_PACKS);
        assert!(!cleaner.may_take(Appender::User, 2));
        assert!(cleaner.may_take(Appender::User, 3));
        assert!(cleaner.may_take(Appender::Cleaner, 1));
        assert!(!cleaner.may_take(Appender::Cleaner, 0));
        assert!(!cleaner.users_have_room(RESERVE_PACKS));
        // A tiny tier keeps a quarter of its packs.
        assert_eq!(Cleaner::new(4, 64 * KIB, 4 * KIB).reserve_packs(), 1);
        assert_eq!(Cleaner::new(3, 64 * KIB, 4 * KIB).reserve_packs(), 0);
    }

    #[test]
    fn background_cleaning_starts_below_a_32nd_and_stops_at_twice_that() {
        // 64 packs: a 32nd is 2, below the floor of the reserve and 4.
        let cleaner = cleaner();
        assert_eq!((cleaner.low_packs(), cleaner.high_packs()), (6, 12));
        let large = Cleaner::new(4096, 128 * KIB, 4 * KIB);
        assert_eq!((large.low_packs(), large.high_packs()), (128, 256));
        // 5 free, 59 in use: cleaning helps only when they hold at least two
        // packs of dead bytes.
        let in_use = 59 * 128 * KIB;
        assert!(cleaner.wants_cleaning(5, in_use - 2 * 128 * KIB));
        assert!(!cleaner.wants_cleaning(5, in_use - 128 * KIB));
        assert!(!cleaner.wants_cleaning(6, 0), "not below the low mark");
        assert!(cleaner.keeps_cleaning(11));
        assert!(!cleaner.keeps_cleaning(12));
    }

    #[test]
    fn a_write_without_room_flushes_once_then_cleans_while_passes_help() {
        let mut retry = RoomRetry::new();
        assert_eq!(retry.next(true), RoomStep::Flush);
        // Still no room after the flush: clean.
        assert_eq!(retry.next(true), RoomStep::Clean);
        assert!(retry.after_pass(true));
        // A pass resets the flush: packs it emptied wait for one.
        assert_eq!(retry.next(true), RoomStep::Flush);
        for _ in 1..MAX_PASSES_PER_WRITE {
            assert_eq!(retry.next(false), RoomStep::Clean);
        }
        assert_eq!(retry.passes(), MAX_PASSES_PER_WRITE);
        assert_eq!(retry.next(false), RoomStep::Fail);
        assert!(!retry.after_pass(false));
    }
}
