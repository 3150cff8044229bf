//! Segment promotion: the second half of `adaptive`. Where the block rule
//! leaves heat at home — a long write-heavy spike the rule keeps out
//! because its fills and merges cost more than they save, a dense region
//! whose blocks each miss once before they are cached — a whole segment is
//! copied into the cache in the background, as one sequential home read,
//! and from then on every block of it hits. It is ATSMF's cost-benefit
//! move (002 §4.3) made general, inside the one block cache:
//!
//! - **Heat** per segment of [`SEGMENT_BYTES`], every request (not
//!   sampled): whether the segment was accessed in the epoch, and the
//!   requests and bytes of it that went home (read misses, writes that
//!   went home or merged a block read from home).
//! - **Duration** (ATSMF's duration table, learned online): how many
//!   epochs in a row each segment stays accessed. From the runs that ended
//!   and those still running, the chance a run of `L` epochs ends there
//!   (a life table, as Kaplan–Meier's); a segment accessed for `k` epochs
//!   is expected to stay as many more as those chances give. Before any
//!   run has gone on past one epoch nothing is promoted.
//! - **Benefit** per epoch = the user response those home requests would
//!   save served by the fast tier, with the devices' measured costs and
//!   load (the same M/M/1 weights as the rules' gains), less the writebacks
//!   absorbed writes bring, less what the copy **displaces**: blocks the
//!   cache would have to evict, valued at the real cache's hits per
//!   resident block. **Cost** = the copy's home read and slot writes, as
//!   background work (the others' wait, `S · (x² − x)`).
//! - A segment is promoted when benefit × expected epochs > cost, best
//!   net gain per copied block first, at most [`EPOCH_REFILL_SHARE`] of
//!   the cache per epoch. Undoing one is cheap: its blocks are ordinary
//!   clean cache blocks, and eviction drops the ones that stop paying.
//!
//! The caller gives the heat ([`Promotion::access`], [`Promotion::hits`])
//! and the cache's occupancy; [`Promotion::plan`] returns the segments to
//! copy. Sans-IO like the rest.

use tierd_common::blockmap::BlockMap;

use super::{queueing_factor, DeviceCost};
use crate::cache::CacheMode;

/// Bytes of a promoted segment: one sequential home read. On a disk 1 MiB
/// transfers in about one seek's time (half the copy is transfer), on
/// flash it is one large IO; coarser would copy more cold data with the
/// hot. At least one cache block.
pub const SEGMENT_BYTES: u64 = 1 << 20;
/// Longest run of epochs the duration table tells apart (longer runs count
/// as this long).
pub const MAX_STREAK: usize = 64;
/// Most of the cache one epoch's promotions may copy into (a share of its
/// slots): decisions rest on one epoch's heat, so a wrong burst of them
/// displaces at most this much.
pub const EPOCH_REFILL_SHARE: f64 = 0.25;
/// Per epoch, the duration table's counts keep this share (the runs of an
/// hour ago say less than the last ones).
const TABLE_KEEP: f64 = 0.9;

/// One segment's heat in the current epoch (the home requests decay by
/// half an epoch, as the rules' tallies).
#[derive(Clone, Copy, Debug, Default)]
struct Heat {
    /// Epochs in a row it has been accessed, this one included once it is.
    streak: u32,
    accessed: bool,
    read_ios: f64,
    read_bytes: f64,
    write_ios: f64,
    write_bytes: f64,
    /// Writes that read a whole block from home to merge into a new slot.
    merges: f64,
}

/// Why the last epoch promoted what it did: for status and reports.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PromotionStatus {
    /// Segment promotions decided, ever; and blocks copied for them.
    pub segments: u64,
    pub blocks_loaded: u64,
    /// The last epoch: segments whose home requests were weighed, and of
    /// them the ones promoted, the ones whose heat is not expected to
    /// last, the ones whose copy and displacement cost more than they
    /// would save, and the ones left out by the epoch's copy budget.
    pub weighed: u64,
    pub promoted: u64,
    pub short_lived: u64,
    pub not_worth: u64,
    pub over_budget: u64,
    /// Epochs a segment accessed for the first time is expected to stay
    /// accessed (the duration table at 1).
    pub expected_epochs_new: f64,
    /// The real cache's hits per resident block over the epoch (what a
    /// copy's displaced blocks are valued at).
    pub hits_per_block: f64,
}

/// A segment worth weighing, with what promoting it would bring.
struct Candidate {
    /// Saved per epoch per block copied (the order they are weighed in).
    rank: f64,
    segment: u64,
    missing: u64,
    /// User response saved per epoch, and per home request of it.
    saved: f64,
    per_request: f64,
    copy: f64,
    epochs: f64,
}

/// The promotion state of one cache.
pub(crate) struct Promotion {
    segment_blocks: u64,
    block_bytes: u64,
    heat: BlockMap<Heat>,
    /// Decayed counts of runs that ended at each length (index = epochs).
    ended: [f64; MAX_STREAK + 1],
    /// The real cache's hits (blocks) this epoch, decayed as the heat.
    hits: f64,
    status: PromotionStatus,
}

/// What [`Promotion::plan`] needs of the cache and its cost model.
pub(crate) struct PlanInput<'a> {
    pub home: &'a DeviceCost,
    pub fast: &'a DeviceCost,
    pub home_utilization: f64,
    pub fast_utilization: f64,
    pub mode: CacheMode,
    pub slots: u64,
    /// Blocks the eviction policy takes before it evicts.
    pub room_blocks: u64,
    pub resident_blocks: u64,
    /// Blocks of a segment the cache holds or is loading.
    pub cached: &'a dyn Fn(u64) -> u64,
}

impl Promotion {
    pub(crate) fn new(block_bytes: u64) -> Promotion {
        Promotion {
            segment_blocks: (SEGMENT_BYTES / block_bytes).max(1),
            block_bytes,
            heat: BlockMap::default(),
            ended: [0.0; MAX_STREAK + 1],
            hits: 0.0,
            status: PromotionStatus::default(),
        }
    }

    /// Blocks per segment.
    pub(crate) fn segment_blocks(&self) -> u64 {
        self.segment_blocks
    }

    pub(crate) fn status(&self) -> &PromotionStatus {
        &self.status
    }

    /// A request's part in `segment`: `home_bytes` of it went home
    /// (`merges` of its blocks were read from home to merge a write).
    pub(crate) fn access(&mut self, segment: u64, is_write: bool, home_bytes: u64, merges: u32) {
        let heat = self.heat.entry_or_default(segment);
        heat.accessed = true;
        if home_bytes > 0 || merges > 0 {
            if is_write {
                heat.write_ios += 1.0;
                heat.write_bytes += home_bytes as f64;
                heat.merges += f64::from(merges);
            } else {
                heat.read_ios += 1.0;
                heat.read_bytes += home_bytes as f64;
            }
        }
    }

    /// The real cache served `blocks` blocks from slots.
    pub(crate) fn hits(&mut self, blocks: u64) {
        self.hits += blocks as f64;
    }

    /// Blocks copied for promotions (their loads completed).
    pub(crate) fn loaded(&mut self, blocks: u64) {
        self.status.blocks_loaded += blocks;
    }

    /// For every `k` (index), the epochs a segment accessed `k` epochs in a
    /// row is expected to stay accessed: `E[k] = (1 − h[k]) × (1 + E[k +
    /// 1])`, where `h[L]` is the chance a run of `L` epochs ends there (the
    /// runs that ended at `L` ÷ those that ended at `L` or went on past it,
    /// ended or still running: a running one says only that it went on
    /// past the lengths it has passed). Lengths seen rarely lean on the
    /// hazard of all lengths together, with one pseudo-run that ends: before
    /// any run has gone on, every `E` is 0 and nothing is promoted.
    fn expected_epochs(&self) -> [f64; MAX_STREAK + 1] {
        // Runs that reached at least L + 1 epochs, per L (went on past L).
        let mut past = [0.0; MAX_STREAK + 2];
        for length in 1..=MAX_STREAK {
            // An ended run of `length` went on past every L < length.
            past[length - 1] += self.ended[length];
        }
        for heat in self.heat.values() {
            let streak = (heat.streak as usize).min(MAX_STREAK);
            if streak > 0 {
                past[streak - 1] += 1.0;
            }
        }
        for length in (1..=MAX_STREAK).rev() {
            past[length - 1] += past[length];
        }
        // past[L] now = runs longer than L (for L ≥ 1).
        let ended_total: f64 = self.ended[1..].iter().sum();
        let went_on_total: f64 = past[1..=MAX_STREAK].iter().sum();
        let pooled = (ended_total + 1.0) / (ended_total + went_on_total + 1.0);
        let hazard = |length: usize| {
            let ended = self.ended[length];
            (ended + pooled) / (ended + past[length] + 1.0)
        };
        let mut expected = [0.0; MAX_STREAK + 1];
        let tail = hazard(MAX_STREAK).max(1.0 / MAX_STREAK as f64);
        expected[MAX_STREAK] = (1.0 - tail) / tail;
        for length in (1..MAX_STREAK).rev() {
            expected[length] = (1.0 - hazard(length)) * (1.0 + expected[length + 1]);
        }
        expected
    }

    /// Ends an epoch: which segments to copy now, best first.
    pub(crate) fn plan(&mut self, input: &PlanInput<'_>) -> Vec<u64> {
        // Runs: a segment accessed this epoch goes on, one not accessed ended.
        let ended = &mut self.ended;
        for count in ended.iter_mut() {
            *count *= TABLE_KEEP;
        }
        self.heat.retain(|_, heat| {
            if heat.accessed {
                heat.streak = heat.streak.saturating_add(1);
                true
            } else {
                if heat.streak > 0 {
                    ended[(heat.streak as usize).min(MAX_STREAK)] += 1.0;
                }
                false
            }
        });
        let expected = self.expected_epochs();
        let (home, fast) = (input.home, input.fast);
        let x_home = queueing_factor(input.home_utilization);
        let x_fast = queueing_factor(input.fast_utilization);
        let block = self.block_bytes as f64;
        // Taking user IO off a device saves its own response and the others'
        // wait; putting it on one costs the same; background work costs
        // only the others' wait.
        let moved = |device: &DeviceCost, x: f64, is_write: bool, ios: f64, bytes: f64| {
            device.cheapness(is_write) * device.latency(is_write, ios, bytes) * x
                + device.work(is_write, ios, bytes) * (x * x - x)
        };
        let background = |device: &DeviceCost, x: f64, is_write: bool, ios: f64, bytes: f64| {
            device.work(is_write, ios, bytes) * (x * x - x)
        };
        let resident = input.resident_blocks.max(1) as f64;
        let hits_per_block = self.hits / resident;
        let writeback = input.mode == CacheMode::Writeback;
        let mut status = PromotionStatus {
            segments: self.status.segments,
            blocks_loaded: self.status.blocks_loaded,
            expected_epochs_new: expected[1],
            hits_per_block,
            ..PromotionStatus::default()
        };
        let mut candidates: Vec<Candidate> = Vec::new();
        for (&segment, heat) in self.heat.iter() {
            let requests = heat.read_ios + heat.write_ios;
            if !heat.accessed || requests <= 0.0 {
                continue;
            }
            status.weighed += 1;
            let epochs = expected[(heat.streak as usize).min(MAX_STREAK)];
            if epochs <= 0.05 {
                status.short_lived += 1;
                continue;
            }
            let mut saved = moved(home, x_home, false, heat.read_ios, heat.read_bytes)
                - moved(fast, x_fast, false, heat.read_ios, heat.read_bytes)
                + moved(home, x_home, false, heat.merges, heat.merges * block);
            if writeback {
                // Absorbed writes: each written block is written back once
                // per epoch at most.
                let dirtied = heat.write_ios.min(self.segment_blocks as f64);
                saved += moved(home, x_home, true, heat.write_ios, heat.write_bytes)
                    - moved(fast, x_fast, true, heat.write_ios, heat.write_bytes)
                    - background(home, x_home, true, dirtied, dirtied * block)
                    - background(fast, x_fast, false, dirtied, dirtied * block);
            }
            let missing = self.segment_blocks.saturating_sub((input.cached)(segment));
            if missing == 0 {
                continue;
            }
            if saved <= 0.0 {
                status.not_worth += 1;
                continue;
            }
            let copy = background(home, x_home, false, 1.0, missing as f64 * block)
                + background(fast, x_fast, true, missing as f64, missing as f64 * block);
            candidates.push(Candidate {
                rank: saved / missing as f64,
                segment,
                missing,
                saved,
                per_request: saved / requests,
                copy,
                epochs,
            });
        }
        candidates.sort_by(|a, b| b.rank.total_cmp(&a.rank).then(a.segment.cmp(&b.segment)));
        // Best first: each copy fills the policy's room, then evicts blocks
        // worth the real cache's hits per resident block.
        let budget = (input.slots as f64 * EPOCH_REFILL_SHARE).max(1.0) as u64;
        let mut room = input.room_blocks;
        let mut copied = 0;
        let mut chosen = Vec::new();
        for candidate in candidates {
            let evicted = candidate.missing.saturating_sub(room) as f64;
            let displaced = evicted * hits_per_block * candidate.per_request;
            let net = (candidate.saved - displaced) * candidate.epochs - candidate.copy;
            if candidate.saved <= displaced || net <= 0.0 {
                status.not_worth += 1;
                continue;
            }
            if copied + candidate.missing > budget {
                status.over_budget += 1;
                continue;
            }
            copied += candidate.missing;
            room = room.saturating_sub(candidate.missing);
            chosen.push(candidate.segment);
        }
        status.promoted = chosen.len() as u64;
        status.segments += status.promoted;
        self.status = status;
        for heat in self.heat.values_mut() {
            heat.accessed = false;
            for sum in [
                &mut heat.read_ios,
                &mut heat.read_bytes,
                &mut heat.write_ios,
                &mut heat.write_bytes,
                &mut heat.merges,
            ] {
                *sum *= 0.5;
            }
        }
        self.hits *= 0.5;
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::super::ServicePrior;
    use super::*;

    const BLOCK: u64 = 64 << 10;

    /// A device with a calibrated line: `fixed_ns + ns_per_byte × bytes`,
    /// latency and capacity alike.
    fn modelled(fixed_ns: f64, ns_per_byte: f64) -> DeviceCost {
        let prior = ServicePrior {
            fixed_ns,
            ns_per_byte,
            from_model: true,
        };
        DeviceCost::new(prior, None, Some(prior))
    }

    /// Ends an epoch over a disk home (30 % loaded) and a flash cache of
    /// 1024 slots, `room_blocks` of them free to the eviction policy.
    fn plan(promotion: &mut Promotion, room_blocks: u64) -> Vec<u64> {
        let (home, fast) = (modelled(5_000_000.0, 10.0), modelled(50_000.0, 1.0));
        promotion.plan(&PlanInput {
            home: &home,
            fast: &fast,
            home_utilization: 0.3,
            fast_utilization: 0.01,
            mode: CacheMode::Writeback,
            slots: 1024,
            room_blocks,
            resident_blocks: 1024 - room_blocks,
            cached: &|_| 0,
        })
    }

    /// One epoch: `hot` read-missed 8 times, `once` (new each epoch) once;
    /// then the plan.
    fn epoch(
        promotion: &mut Promotion,
        hot: u64,
        once: u64,
        room_blocks: u64,
        hits: u64,
    ) -> Vec<u64> {
        for _ in 0..8 {
            promotion.access(hot, false, 4096, 0);
        }
        promotion.access(once, false, 4096, 0);
        promotion.hits(hits);
        plan(promotion, room_blocks)
    }

    #[test]
    fn the_duration_table_learns_how_long_heat_lasts() {
        let mut promotion = Promotion::new(BLOCK);
        assert_eq!(promotion.segment_blocks(), 16);
        // Ten segments accessed four epochs each, then never again.
        for _ in 0..4 {
            for segment in 0..10 {
                promotion.access(segment, false, 0, 0);
            }
            plan(&mut promotion, 1024);
        }
        plan(&mut promotion, 1024);
        let expected = promotion.expected_epochs();
        // Every run lasted 4 epochs: one seen for 1 has about 3 more, one
        // seen for 3 about 1, one seen for 4 is over (a little is left for
        // lengths never seen, from the pooled chance of ending).
        assert!((2.8..3.3).contains(&expected[1]), "{expected:?}");
        assert!((1.0..1.4).contains(&expected[3]), "{expected:?}");
        assert!(expected[4] < 0.4, "{expected:?}");
        // Nothing seen yet: nothing expected.
        assert_eq!(Promotion::new(BLOCK).expected_epochs()[1], 0.0);
    }

    #[test]
    fn lasting_heat_is_promoted_and_one_shot_heat_is_not() {
        let mut promotion = Promotion::new(BLOCK);
        // Nothing has lasted yet: nothing is promoted in the first epoch.
        assert!(epoch(&mut promotion, 7, 1000, 1024, 0).is_empty());
        assert_eq!(promotion.status().weighed, 2);
        assert_eq!(promotion.status().short_lived, 2);
        let mut promoted = Vec::new();
        for round in 1..6 {
            promoted = epoch(&mut promotion, 7, 1000 + round, 1024, 0);
            if !promoted.is_empty() {
                break;
            }
        }
        assert_eq!(promoted, vec![7], "{:?}", promotion.status());
        // One-shot segments are expected to end at once.
        assert!(promotion.expected_epochs()[1] < 1.0);
    }

    #[test]
    fn a_copy_that_would_evict_busier_blocks_is_not_made() {
        let mut promotion = Promotion::new(BLOCK);
        for round in 0..6 {
            // A full cache whose blocks each hit 40 times an epoch.
            let promoted = epoch(&mut promotion, 7, 1000 + round, 0, 40 * 1024);
            assert!(
                promoted.is_empty(),
                "round {round}: {:?}",
                promotion.status()
            );
        }
        assert!(promotion.status().not_worth >= 1);
        // Room in the cache: the same heat is worth copying.
        let promoted = epoch(&mut promotion, 7, 2000, 1024, 0);
        assert_eq!(promoted, vec![7], "{:?}", promotion.status());
    }
}
