//! The reduced tier's packs in the simulator (`docs/devices/processor.md`,
//! "Packs and cleaning"): where each logical block's fragment lives, how
//! many live bytes each pack holds, and the cleaner that empties the packs
//! overwrites left mostly dead.
//!
//! The decisions are the live reduced tier's,
//! [`tierd_core::reduce::clean`]: when background cleaning starts and stops,
//! which packs a pass empties (fewest live bytes, at most a batch, no more
//! than there is room for), the reserve only the cleaner may take, and a
//! write without room running up to 8 passes while each makes room before
//! it is refused. This model keeps the packs and does the moves; what the
//! moves cost the reduction workers is [`super::cost::ReductionCosts::clean_ns`].
//!
//! Simplified against the live tier, on purpose: a fragment's size is the
//! caller's (the model's compression ratio); packs come free at once when
//! their last fragment dies (the live tier waits for the flush that
//! journals it, and a cleaning pass ends with that flush); staged (not yet
//! reduced) blocks take no pack space here (the stage's bound is
//! [`tierd_core::reduce::Staging`]'s); no crash, no journal.

use serde::Serialize;
use tierd_core::reduce::clean::{Appender, Cleaner, CleanerTallies, RoomRetry, RoomStep};

const NONE: u32 = u32::MAX;

/// A reduced tier's size, for the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PackGeometry {
    /// Logical blocks the tier presents.
    pub logical_blocks: u64,
    pub block_bytes: u64,
    pub pack_bytes: u64,
    /// Packs of the device.
    pub pack_count: u64,
}

#[derive(Clone, Copy, Debug)]
struct Fragment {
    pack: u32,
    len: u32,
    /// Logical blocks mapped to it (dedup shares a fragment).
    refs: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PackState {
    Free,
    Open,
    Sealed,
}

#[derive(Clone, Copy, Debug)]
struct Open {
    pack: u32,
    fill: u64,
}

/// What one cleaning pass did: what the workers are charged for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PassWork {
    /// Passes that picked victims.
    pub passes: u64,
    /// Victim packs read (each read whole once).
    pub packs_read: u64,
    /// Live fragments copied, and their bytes.
    pub fragments: u64,
    pub bytes: u64,
    /// Packs the pass emptied.
    pub emptied: u64,
}

impl PassWork {
    fn add(&mut self, other: PassWork) {
        self.passes += other.passes;
        self.packs_read += other.packs_read;
        self.fragments += other.fragments;
        self.bytes += other.bytes;
        self.emptied += other.emptied;
    }
}

/// What storing one block cost beyond its own fragment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// Passes run on the writer's time: no room was left (the write waits
    /// for them).
    pub urgent: PassWork,
    /// Background cleaning the write set off (free packs fell below the low
    /// mark): work for the workers' idle time.
    pub background: PassWork,
    /// No room even after cleaning: the write was refused (ENOSPC), nothing
    /// changed.
    pub refused: bool,
}

/// The packs of one reduced tier (see the module docs).
#[derive(Clone, Debug)]
pub struct Packs {
    geometry: PackGeometry,
    cleaner: Cleaner,
    /// Per logical block: its fragment's id, or [`NONE`].
    map: Vec<u32>,
    fragments: Vec<Fragment>,
    spare_ids: Vec<u32>,
    /// Per pack: fragments placed there (dead and moved ones are skipped
    /// when read; the list is dropped when the pack comes free).
    placed: Vec<Vec<u32>>,
    live_bytes: Vec<u64>,
    live_fragments: Vec<u32>,
    state: Vec<PackState>,
    free: Vec<u32>,
    /// Open packs: raw fragments, compressed ones.
    open: [Option<Open>; 2],
    /// Live fragments' bytes, each once.
    live_total: u64,
    pub tallies: CleanerTallies,
    /// Writes refused for want of room.
    pub refused: u64,
}

impl Packs {
    pub fn new(geometry: PackGeometry) -> Packs {
        let packs = geometry.pack_count as usize;
        Packs {
            geometry,
            cleaner: Cleaner::new(
                geometry.pack_count,
                geometry.pack_bytes,
                geometry.block_bytes,
            ),
            map: vec![NONE; geometry.logical_blocks as usize],
            fragments: Vec::new(),
            spare_ids: Vec::new(),
            placed: vec![Vec::new(); packs],
            live_bytes: vec![0; packs],
            live_fragments: vec![0; packs],
            state: vec![PackState::Free; packs],
            free: (0..geometry.pack_count as u32).rev().collect(),
            open: [None, None],
            live_total: 0,
            tallies: CleanerTallies::default(),
            refused: 0,
        }
    }

    pub fn geometry(&self) -> PackGeometry {
        self.geometry
    }

    pub fn free_packs(&self) -> u64 {
        self.free.len() as u64
    }

    /// Bytes of live fragments, each once.
    pub fn live_bytes(&self) -> u64 {
        self.live_total
    }

    /// Live bytes of `pack`.
    pub fn pack_live_bytes(&self, pack: u32) -> u64 {
        self.live_bytes[pack as usize]
    }

    /// Whether `lbn` maps a fragment.
    pub fn is_mapped(&self, lbn: u64) -> bool {
        self.map[lbn as usize] != NONE
    }

    /// Stores `lbn` as a new fragment of `len` bytes (a block's size: raw;
    /// less: compressed), or, with `duplicate_of`, as a reference to the
    /// fragment that block maps (dedup; a new fragment if it maps none).
    /// Cleans as the live tier does.
    pub fn store(&mut self, lbn: u64, len: u64, duplicate_of: Option<u64>) -> Stored {
        let mut stored = Stored::default();
        if let Some(id) = duplicate_of
            .map(|other| self.map[other as usize])
            .filter(|&id| id != NONE)
        {
            self.fragments[id as usize].refs += 1;
            self.unmap(lbn);
            self.map[lbn as usize] = id;
            return stored;
        }
        let len = len.clamp(1, self.geometry.block_bytes);
        let kind = usize::from(len < self.geometry.block_bytes);
        let mut retry = RoomRetry::new();
        let id = loop {
            match self.append(kind, len, Appender::User) {
                Some(id) => break id,
                // No pack waits for a flush here: only cleaning makes room.
                None => match retry.next(false) {
                    RoomStep::Clean => {
                        let work = self.pass(true);
                        stored.urgent.add(work);
                        let made_room =
                            work.emptied > 0 || self.cleaner.users_have_room(self.free_packs());
                        if !retry.after_pass(made_room) {
                            stored.refused = true;
                            self.refused += 1;
                            return stored;
                        }
                    }
                    RoomStep::Flush | RoomStep::Fail => {
                        stored.refused = true;
                        self.refused += 1;
                        return stored;
                    }
                },
            }
        };
        self.fragments[id as usize].refs = 1;
        self.unmap(lbn);
        self.map[lbn as usize] = id;
        if self
            .cleaner
            .wants_cleaning(self.free_packs(), self.live_total)
        {
            while self.cleaner.keeps_cleaning(self.free_packs()) {
                let work = self.pass(false);
                stored.background.add(work);
                if work.emptied == 0 {
                    break;
                }
            }
        }
        stored
    }

    /// `lbn` no longer maps its fragment (overwritten or trimmed).
    pub fn unmap(&mut self, lbn: u64) {
        let id = std::mem::replace(&mut self.map[lbn as usize], NONE);
        if id == NONE {
            return;
        }
        let fragment = &mut self.fragments[id as usize];
        fragment.refs -= 1;
        if fragment.refs > 0 {
            return;
        }
        let (pack, len) = (fragment.pack, u64::from(fragment.len));
        self.spare_ids.push(id);
        self.live_total -= len;
        self.live_bytes[pack as usize] -= len;
        self.live_fragments[pack as usize] -= 1;
        if self.live_fragments[pack as usize] == 0 && self.state[pack as usize] == PackState::Sealed
        {
            self.release(pack);
        }
    }

    fn release(&mut self, pack: u32) {
        self.state[pack as usize] = PackState::Free;
        self.placed[pack as usize] = Vec::new();
        self.free.push(pack);
    }

    /// Takes `len` bytes in the open pack of `kind` (0 raw, 1 compressed),
    /// sealing a full one and opening another if `appender` may take a
    /// free pack; the pack, its live counts already holding the bytes.
    fn room(&mut self, kind: usize, len: u64, appender: Appender) -> Option<u32> {
        if let Some(open) = self.open[kind] {
            if open.fill + len > self.geometry.pack_bytes {
                self.open[kind] = None;
                self.state[open.pack as usize] = PackState::Sealed;
                if self.live_fragments[open.pack as usize] == 0 {
                    self.release(open.pack);
                }
            }
        }
        if self.open[kind].is_none() {
            if !self.cleaner.may_take(appender, self.free_packs()) {
                return None;
            }
            let pack = self.free.pop().expect("may_take saw a free pack");
            self.state[pack as usize] = PackState::Open;
            self.open[kind] = Some(Open { pack, fill: 0 });
        }
        let open = self.open[kind].as_mut().expect("opened above");
        open.fill += len;
        let pack = open.pack;
        self.live_bytes[pack as usize] += len;
        self.live_fragments[pack as usize] += 1;
        self.live_total += len;
        Some(pack)
    }

    /// A new fragment of `len` bytes in the open pack of `kind`: its id
    /// (no block mapped to it yet).
    fn append(&mut self, kind: usize, len: u64, appender: Appender) -> Option<u32> {
        let pack = self.room(kind, len, appender)?;
        let fragment = Fragment {
            pack,
            len: len as u32,
            refs: 0,
        };
        let id = match self.spare_ids.pop() {
            Some(id) => {
                self.fragments[id as usize] = fragment;
                id
            }
            None => {
                self.fragments.push(fragment);
                (self.fragments.len() - 1) as u32
            }
        };
        self.placed[pack as usize].push(id);
        Some(id)
    }

    /// One cleaning pass, the live tier's: `urgent` (a write found no
    /// room) returns at once if users have room again. Victims as
    /// [`Cleaner::pick_victims`] chooses among the sealed packs holding live
    /// fragments; their live fragments move to the open packs (the
    /// cleaner may take the reserve), and the emptied packs come free.
    pub fn pass(&mut self, urgent: bool) -> PassWork {
        let mut work = PassWork::default();
        if urgent && self.cleaner.users_have_room(self.free_packs()) {
            return work;
        }
        let open_room: u64 = self
            .open
            .iter()
            .flatten()
            .map(|open| self.geometry.pack_bytes - open.fill)
            .sum();
        let candidates = (0..self.geometry.pack_count as u32)
            .filter(|&pack| {
                self.state[pack as usize] == PackState::Sealed
                    && self.live_fragments[pack as usize] > 0
            })
            .map(|pack| (pack, self.live_bytes[pack as usize]));
        let victims = self
            .cleaner
            .pick_victims(candidates, self.free_packs(), open_room);
        if victims.is_empty() {
            return work;
        }
        self.tallies.passes += 1;
        work.passes = 1;
        'victims: for &victim in &victims {
            work.packs_read += 1;
            let placed = std::mem::take(&mut self.placed[victim as usize]);
            for (index, &id) in placed.iter().enumerate() {
                let fragment = self.fragments[id as usize];
                if fragment.refs == 0 || fragment.pack != victim {
                    continue;
                }
                let len = u64::from(fragment.len);
                let kind = usize::from(len < self.geometry.block_bytes);
                // The copy: the map names fragments by id, so every block
                // that shares it follows (the live tier remaps each).
                let Some(pack) = self.room(kind, len, Appender::Cleaner) else {
                    // Even the reserve is used up: stop (the rest stays).
                    self.placed[victim as usize] = placed[index..].to_vec();
                    break 'victims;
                };
                self.fragments[id as usize].pack = pack;
                self.placed[pack as usize].push(id);
                self.live_total -= len;
                self.live_bytes[victim as usize] -= len;
                self.live_fragments[victim as usize] -= 1;
                work.fragments += 1;
                work.bytes += len;
                self.tallies.relocated_bytes += len;
                self.tallies.relocated_blocks += u64::from(fragment.refs);
            }
            if self.live_fragments[victim as usize] == 0 {
                self.release(victim);
                work.emptied += 1;
                self.tallies.packs_cleaned += 1;
            }
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_common::rng::{Rng, SeededRng};

    /// 2 MiB of 4 KiB blocks on 48 packs of 64 KiB (3 MiB): compressed
    /// fragments of 2 KiB at 2:1 hold 1 MiB live, so random overwrites
    /// leave dead bytes everywhere and only the cleaner makes room.
    fn small() -> Packs {
        Packs::new(PackGeometry {
            logical_blocks: 512,
            block_bytes: 4096,
            pack_bytes: 64 << 10,
            pack_count: 48,
        })
    }

    /// The live bytes per pack against a recount from the map.
    fn check(packs: &Packs) {
        let mut live = vec![0u64; packs.geometry.pack_count as usize];
        let mut seen = vec![false; packs.fragments.len()];
        for &id in &packs.map {
            if id != NONE && !std::mem::replace(&mut seen[id as usize], true) {
                let fragment = packs.fragments[id as usize];
                live[fragment.pack as usize] += u64::from(fragment.len);
                assert_ne!(packs.state[fragment.pack as usize], PackState::Free);
            }
        }
        assert_eq!(live, packs.live_bytes);
        assert_eq!(live.iter().sum::<u64>(), packs.live_total);
    }

    #[test]
    fn random_overwrites_are_cleaned_not_refused() {
        let mut packs = small();
        let mut rng = SeededRng::new(5);
        let mut background = PassWork::default();
        for step in 0..20_000u64 {
            let lbn = rng.below(512);
            let duplicate = rng.chance(0.2).then(|| rng.below(512));
            let stored = packs.store(lbn, 2048 + rng.below(64), duplicate);
            assert!(!stored.refused, "step {step}");
            background.add(stored.background);
            if step % 1000 == 0 {
                check(&packs);
            }
        }
        check(&packs);
        let tallies = packs.tallies;
        assert!(tallies.passes > 10, "{tallies:?}");
        assert!(tallies.packs_cleaned >= tallies.passes, "{tallies:?}");
        assert!(tallies.relocated_bytes > 0 && tallies.relocated_blocks > 0);
        assert_eq!(
            background.passes, tallies.passes,
            "a roomy tier cleans ahead"
        );
        assert!(background.packs_read >= background.emptied);
        // Background cleaning keeps users off the reserve.
        assert!(packs.free_packs() > packs.cleaner.reserve_packs());
    }

    #[test]
    fn a_tier_whose_live_data_fills_it_refuses_writes_and_keeps_its_blocks() {
        // Raw 4 KiB blocks: 512 of them need 32 packs of 16; 12 packs hold
        // 192 at most (less the reserve).
        let mut packs = Packs::new(PackGeometry {
            logical_blocks: 512,
            block_bytes: 4096,
            pack_bytes: 64 << 10,
            pack_count: 12,
        });
        let mut refused = 0;
        for lbn in 0..512 {
            let stored = packs.store(lbn, 4096, None);
            if stored.refused {
                refused += 1;
                assert!(!packs.is_mapped(lbn));
            }
        }
        check(&packs);
        assert_eq!(packs.refused, refused);
        let mapped = (0..512).filter(|&lbn| packs.is_mapped(lbn)).count() as u64;
        assert_eq!(mapped, (12 - packs.cleaner.reserve_packs()) * 16);
        assert_eq!(mapped + refused, 512);
    }
}
