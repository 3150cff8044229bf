//! The placement table: where every segment lives, which fast-tier slots
//! are free, and which moves are accepted, queued and started.
//!
//! Sans-IO like the rest of this crate: it keeps the books and decides, the
//! caller copies data and says when a move flipped or failed. The simulator
//! and the live engine run this same table, so a move one world accepts, the
//! other accepts too, for the same reason.
//!
//! ## Rules
//! - The last tier is **home**: segment `s` always has a home extent, slot
//!   `s`. Faster tiers hold segments in slots (segment-sized extents) given
//!   out from a free list, lowest first.
//! - A move is **accepted** (queued) only when the segment exists, the
//!   target tier exists, the segment is on the move's source now, is not
//!   queued or moving already, and the target has room. Room is counted on
//!   what the tiers will hold once every accepted move is done:
//!   [`PlacementTable::used`] counts an accepted move on its target and no
//!   longer on its source, so two accepted promotions never count on one
//!   free slot, and a demotion accepted in the same plan makes room for a
//!   promotion behind it.
//! - A queued move **starts** when its target has a physical slot free
//!   (home always has): [`PlacementTable::start_next`] starts the first
//!   such move in queue order, so a promotion waits for the demotion ahead
//!   of it to free its slot while moves behind it that can go, go.
//! - A move **finishes** (flip): the segment's location becomes the target.
//!   Its old slot is not free yet: IO already routed to it may still be in
//!   flight, so the caller gives it back with
//!   [`PlacementTable::release_slot`] once nothing reads it (the engine at
//!   once, under the segment's lock; the simulator when the slot's last IO
//!   completes).
//! - A move that **fails** ([`PlacementTable::abandon`]) leaves the segment
//!   where it was; the target slot goes back the same way.

use std::collections::VecDeque;
use std::fmt;

/// Index of a segment in a volume.
pub type SegmentId = u32;
/// Index of a tier in a stack, 0 = fastest, the last = home.
pub type TierId = u8;

/// Where a segment lives: `tier` and the slot (segment-sized extent) on
/// that tier's device. On the home tier the slot is the segment id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Location {
    pub tier: TierId,
    pub slot: u32,
}

/// Why a move is not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The segment is beyond the volume.
    NoSuchSegment { segments: u32 },
    /// The target tier is beyond the stack.
    NoSuchTier { tiers: usize },
    /// The segment is on the target already.
    AlreadyThere,
    /// The segment is not on the move's source (it moved since the plan).
    NotOnSource { now: TierId },
    /// A move of the segment is queued already.
    Queued,
    /// A move of the segment is copying.
    Moving,
    /// The target has no room once the accepted moves are counted.
    Full { capacity_segments: u32 },
}

impl Refusal {
    /// The refusal as a sentence, with tier names (`names[tier]`).
    pub fn describe(&self, names: &[String]) -> String {
        let name = |tier: TierId| {
            names
                .get(tier as usize)
                .cloned()
                .unwrap_or_else(|| format!("tier {tier}"))
        };
        match *self {
            Refusal::NoSuchSegment { segments } => {
                format!("the segment is beyond the volume's {segments} segments")
            }
            Refusal::NoSuchTier { tiers } => {
                format!("the tier does not exist (the stack has {tiers} tiers, 0 = fastest)")
            }
            Refusal::AlreadyThere => "the segment is already there".to_string(),
            Refusal::NotOnSource { now } => format!("the segment is on {} now", name(now)),
            Refusal::Queued => "a move of the segment is queued already".to_string(),
            Refusal::Moving => "the segment is moving already".to_string(),
            Refusal::Full { capacity_segments } => format!(
                "the target tier is full: its {capacity_segments} slots are taken or promised to queued moves"
            ),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&[]))
    }
}

/// A recovered table that cannot be right for this stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Impossible {
    pub segment: SegmentId,
    pub location: Location,
}

/// A move just started by [`PlacementTable::start_next`].
#[derive(Debug)]
pub struct Started<M> {
    pub segment: SegmentId,
    pub from: Location,
    pub to: Location,
    /// What the caller queued with the move.
    pub item: M,
}

/// What undoing a move gives back: the cancelled move's item (or the
/// abandoned move's target), and the queued moves that had counted on the
/// room the undone move would have made, taken out of the queue (the
/// caller counts them as dropped).
#[derive(Debug)]
#[must_use]
pub struct Undone<T, M = T> {
    pub item: T,
    pub shed: Vec<M>,
}

/// A queued move, as [`PlacementTable::queued`] lists it.
#[derive(Clone, Copy, Debug)]
pub struct QueuedMove<'a, M> {
    pub segment: SegmentId,
    pub from: TierId,
    pub to: TierId,
    pub item: &'a M,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Queued,
    Moving { to: Location },
}

#[derive(Debug)]
struct Queued<M> {
    segment: SegmentId,
    from: TierId,
    to: TierId,
    item: M,
}

#[derive(Debug)]
struct Tier {
    capacity_segments: u32,
    /// Free slots, the lowest last (popped first).
    free: Vec<u32>,
    /// Segments on the tier once the accepted moves are done.
    used: u32,
}

/// Where every segment lives and the moves between tiers (see the module
/// rules). `M` is what the caller keeps with a queued move (its reason, the
/// time it was accepted).
#[derive(Debug)]
pub struct PlacementTable<M> {
    locations: Vec<Location>,
    /// `locations[s].tier`, kept beside it for readers that want a slice.
    tiers_of: Vec<TierId>,
    states: Vec<State>,
    tiers: Vec<Tier>,
    queue: VecDeque<Queued<M>>,
    moving: usize,
}

impl<M> PlacementTable<M> {
    /// Every segment on home. `capacities_segments[t]` is how many segments
    /// tier `t` holds; the last (home) entry is ignored: home holds every
    /// segment. Panics on an empty stack or one of more than 256 tiers.
    pub fn new(segments: u32, capacities_segments: &[u32]) -> Self {
        assert!(
            !capacities_segments.is_empty() && capacities_segments.len() <= 256,
            "a stack has 1 to 256 tiers"
        );
        let home = (capacities_segments.len() - 1) as TierId;
        let tiers = capacities_segments
            .iter()
            .enumerate()
            .map(|(index, capacity)| {
                if index == home as usize {
                    Tier {
                        capacity_segments: segments,
                        free: Vec::new(),
                        used: segments,
                    }
                } else {
                    Tier {
                        capacity_segments: *capacity,
                        free: (0..*capacity).rev().collect(),
                        used: 0,
                    }
                }
            })
            .collect();
        Self {
            locations: (0..segments)
                .map(|segment| Location {
                    tier: home,
                    slot: segment,
                })
                .collect(),
            tiers_of: vec![home; segments as usize],
            states: vec![State::Idle; segments as usize],
            tiers,
            queue: VecDeque::new(),
            moving: 0,
        }
    }

    /// A table holding `locations` (recovered from a journal): checked
    /// (home slots are their segment, fast slots exist and are taken once)
    /// and the free lists rebuilt from it.
    pub fn restore(
        locations: &[Location],
        capacities_segments: &[u32],
    ) -> Result<Self, Impossible> {
        let segments = u32::try_from(locations.len()).unwrap_or(u32::MAX);
        let mut table = Self::new(segments, capacities_segments);
        let home = table.home();
        let mut taken: Vec<Vec<bool>> = table
            .tiers
            .iter()
            .enumerate()
            .map(|(index, tier)| {
                if index == home as usize {
                    Vec::new()
                } else {
                    vec![false; tier.capacity_segments as usize]
                }
            })
            .collect();
        for (segment, location) in locations.iter().enumerate() {
            let impossible = Impossible {
                segment: segment as SegmentId,
                location: *location,
            };
            let tier = location.tier as usize;
            if tier >= table.tiers.len() {
                return Err(impossible);
            }
            if location.tier == home {
                if location.slot as usize != segment {
                    return Err(impossible);
                }
                continue;
            }
            match taken[tier].get_mut(location.slot as usize) {
                Some(taken) if !*taken => *taken = true,
                _ => return Err(impossible),
            }
        }
        for (index, tier) in table.tiers.iter_mut().enumerate() {
            if index == home as usize {
                continue;
            }
            tier.free.retain(|slot| !taken[index][*slot as usize]);
            tier.used = tier.capacity_segments - tier.free.len() as u32;
        }
        table.tiers[home as usize].used = locations
            .iter()
            .filter(|location| location.tier == home)
            .count() as u32;
        table.locations = locations.to_vec();
        table.tiers_of = locations.iter().map(|location| location.tier).collect();
        Ok(table)
    }

    pub fn segments(&self) -> u32 {
        self.locations.len() as u32
    }

    pub fn home(&self) -> TierId {
        (self.tiers.len() - 1) as TierId
    }

    /// Where `segment` lives now (until its move flips, its source).
    pub fn location(&self, segment: SegmentId) -> Location {
        self.locations[segment as usize]
    }

    /// Every segment's tier now, indexed by segment.
    pub fn tiers_of(&self) -> &[TierId] {
        &self.tiers_of
    }

    /// Every segment's location now, indexed by segment.
    pub fn locations(&self) -> &[Location] {
        &self.locations
    }

    pub fn capacity_segments(&self, tier: TierId) -> u32 {
        self.tiers[tier as usize].capacity_segments
    }

    /// Segments on `tier` once every accepted move is done.
    pub fn used(&self, tier: TierId) -> u32 {
        self.tiers[tier as usize].used
    }

    /// Slots of `tier` no segment holds or is promised.
    pub fn room(&self, tier: TierId) -> u32 {
        let tier = &self.tiers[tier as usize];
        tier.capacity_segments.saturating_sub(tier.used)
    }

    /// Slots of `tier` physically free now (not held, not draining). Home
    /// reports none: its slots are not given out.
    pub fn free_slots(&self, tier: TierId) -> u32 {
        self.tiers[tier as usize].free.len() as u32
    }

    pub fn is_queued(&self, segment: SegmentId) -> bool {
        self.states
            .get(segment as usize)
            .is_some_and(|state| *state == State::Queued)
    }

    pub fn is_moving(&self, segment: SegmentId) -> bool {
        matches!(
            self.states.get(segment as usize),
            Some(State::Moving { .. })
        )
    }

    /// The target of the move of `segment` that is copying, if one is.
    pub fn moving_to(&self, segment: SegmentId) -> Option<Location> {
        match self.states.get(segment as usize) {
            Some(State::Moving { to }) => Some(*to),
            _ => None,
        }
    }

    /// Moves accepted and not started, in queue order.
    pub fn queued(&self) -> impl Iterator<Item = QueuedMove<'_, M>> {
        self.queue.iter().map(|queued| QueuedMove {
            segment: queued.segment,
            from: queued.from,
            to: queued.to,
            item: &queued.item,
        })
    }

    pub fn queued_len(&self) -> usize {
        self.queue.len()
    }

    /// Moves started and not finished.
    pub fn moving_len(&self) -> usize {
        self.moving
    }

    /// Whether a move of `segment` from `from` to `to` would be accepted now.
    pub fn check(&self, segment: SegmentId, from: TierId, to: TierId) -> Result<(), Refusal> {
        let Some(state) = self.states.get(segment as usize) else {
            return Err(Refusal::NoSuchSegment {
                segments: self.segments(),
            });
        };
        if to as usize >= self.tiers.len() {
            return Err(Refusal::NoSuchTier {
                tiers: self.tiers.len(),
            });
        }
        match state {
            State::Queued => return Err(Refusal::Queued),
            State::Moving { .. } => return Err(Refusal::Moving),
            State::Idle => {}
        }
        let now = self.tiers_of[segment as usize];
        if now == to {
            return Err(Refusal::AlreadyThere);
        }
        if now != from {
            return Err(Refusal::NotOnSource { now });
        }
        if self.room(to) == 0 {
            return Err(Refusal::Full {
                capacity_segments: self.tiers[to as usize].capacity_segments,
            });
        }
        Ok(())
    }

    /// Accepts the move (see [`PlacementTable::check`]) at the back of the
    /// queue, or at the front (`first`: an operator's move goes first in
    /// line). A refused move's item comes back with the reason.
    pub fn accept(
        &mut self,
        segment: SegmentId,
        from: TierId,
        to: TierId,
        item: M,
        first: bool,
    ) -> Result<(), (Refusal, M)> {
        if let Err(refusal) = self.check(segment, from, to) {
            return Err((refusal, item));
        }
        self.states[segment as usize] = State::Queued;
        self.tiers[from as usize].used -= 1;
        self.tiers[to as usize].used += 1;
        let queued = Queued {
            segment,
            from,
            to,
            item,
        };
        if first {
            self.queue.push_front(queued);
        } else {
            self.queue.push_back(queued);
        }
        Ok(())
    }

    /// Takes the queued move of `segment` back out of the queue (an
    /// operator pinned the segment elsewhere); the counts are as before it
    /// was accepted. Cancelling a demotion takes back the room it made: the
    /// moves queued onto its source since, newest first, that no longer fit
    /// are taken out too ([`Undone::shed`]).
    pub fn cancel(&mut self, segment: SegmentId) -> Option<Undone<M>> {
        let position = self
            .queue
            .iter()
            .position(|queued| queued.segment == segment)?;
        let queued = self.queue.remove(position)?;
        self.states[segment as usize] = State::Idle;
        self.tiers[queued.to as usize].used -= 1;
        self.tiers[queued.from as usize].used += 1;
        let shed = self.shed(queued.from);
        Some(Undone {
            item: queued.item,
            shed,
        })
    }

    /// Takes out every queued move `keep` refuses, with the room rule of
    /// [`PlacementTable::cancel`]: the moves still queued that counted on
    /// room a taken-out demotion would have made are taken out too
    /// ([`Undone::shed`]). Returns the taken-out items in queue order.
    pub fn take_queued(
        &mut self,
        mut keep: impl FnMut(QueuedMove<'_, M>) -> bool,
    ) -> Undone<Vec<M>, M> {
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        let mut sources = Vec::new();
        while let Some(queued) = self.queue.pop_front() {
            let view = QueuedMove {
                segment: queued.segment,
                from: queued.from,
                to: queued.to,
                item: &queued.item,
            };
            if keep(view) {
                kept.push_back(queued);
                continue;
            }
            self.states[queued.segment as usize] = State::Idle;
            self.tiers[queued.to as usize].used -= 1;
            self.tiers[queued.from as usize].used += 1;
            if !sources.contains(&queued.from) {
                sources.push(queued.from);
            }
            taken.push(queued.item);
        }
        self.queue = kept;
        let mut shed = Vec::new();
        for tier in sources {
            shed.extend(self.shed(tier));
        }
        Undone { item: taken, shed }
    }

    /// Segments on `tier` counting only the moves copying, not the queued
    /// ones: what the tier will hold if the queue is dropped (the room a
    /// policy that restates its plan every period sees, [`stale_reason`]).
    pub fn used_without_queue(&self, tier: TierId) -> u32 {
        let mut used = i64::from(self.tiers[tier as usize].used);
        for queued in &self.queue {
            if queued.to == tier {
                used -= 1;
            }
            if queued.from == tier {
                used += 1;
            }
        }
        u32::try_from(used.max(0)).unwrap_or(u32::MAX)
    }

    /// Applies the staleness rule ([`stale_reason`]) to every queued move
    /// at a policy's plan: `asked_again` says whether the newest plan lists
    /// the move again (`None`: the policy does not restate its plans, or
    /// the move is an operator's, so rule 1 does not apply), `waited` and
    /// `payback` give the move's wait so far and how long it can pay back
    /// (`None`: no bound). Stale moves are taken out (with the moves that
    /// counted on the room they would have made, [`Undone::shed`]); each
    /// comes back with its reason.
    pub fn drop_stale(
        &mut self,
        mut judge: impl FnMut(QueuedMove<'_, M>) -> StaleInputs,
    ) -> Undone<Vec<(M, StaleReason)>, M> {
        let mut reasons = Vec::new();
        let undone = self.take_queued(|queued| {
            let inputs = judge(queued);
            match stale_reason(inputs) {
                Some(reason) => {
                    reasons.push(reason);
                    false
                }
                None => true,
            }
        });
        Undone {
            item: undone.item.into_iter().zip(reasons).collect(),
            shed: undone.shed,
        }
    }

    /// Takes queued moves onto `tier` out, newest first, until what is
    /// accepted fits it again. Only needed after a move off the tier was
    /// undone; moves started onto it hold physical slots and always fit.
    fn shed(&mut self, tier: TierId) -> Vec<M> {
        let mut shed = Vec::new();
        while self.tiers[tier as usize].used > self.tiers[tier as usize].capacity_segments {
            let Some(position) = self.queue.iter().rposition(|queued| queued.to == tier) else {
                break;
            };
            let Some(queued) = self.queue.remove(position) else {
                break;
            };
            self.states[queued.segment as usize] = State::Idle;
            self.tiers[queued.to as usize].used -= 1;
            self.tiers[queued.from as usize].used += 1;
            shed.push(queued.item);
        }
        shed
    }

    /// Starts the first queued move whose target has a slot free now (home
    /// always has its slot): the target slot is taken, the segment counts as
    /// moving. `None` when nothing queued can start.
    pub fn start_next(&mut self) -> Option<Started<M>> {
        let home = self.home();
        let position = self.queue.iter().position(|queued| {
            queued.to == home || !self.tiers[queued.to as usize].free.is_empty()
        })?;
        let queued = self.queue.remove(position)?;
        let to = if queued.to == home {
            Location {
                tier: home,
                slot: queued.segment,
            }
        } else {
            let slot = self.tiers[queued.to as usize].free.pop()?;
            Location {
                tier: queued.to,
                slot,
            }
        };
        self.states[queued.segment as usize] = State::Moving { to };
        self.moving += 1;
        Some(Started {
            segment: queued.segment,
            from: self.locations[queued.segment as usize],
            to,
            item: queued.item,
        })
    }

    /// The move of `segment` flipped: it lives on its target now. Returns
    /// the location it left, whose slot the caller gives back with
    /// [`PlacementTable::release_slot`] when no IO reads it any more.
    /// Panics when `segment` is not moving (a caller bug).
    pub fn finish(&mut self, segment: SegmentId) -> Location {
        let State::Moving { to } = self.states[segment as usize] else {
            panic!("finish: segment {segment} is not moving");
        };
        let from = self.locations[segment as usize];
        self.locations[segment as usize] = to;
        self.tiers_of[segment as usize] = to.tier;
        self.states[segment as usize] = State::Idle;
        self.moving -= 1;
        from
    }

    /// The move of `segment` failed: it stays where it was. Returns the
    /// target location ([`Undone::item`]), whose slot the caller gives back
    /// with [`PlacementTable::release_slot`] when no IO reads it any more,
    /// and the queued moves that no longer fit on the source (see
    /// [`PlacementTable::cancel`]). Panics when `segment` is not moving (a
    /// caller bug).
    pub fn abandon(&mut self, segment: SegmentId) -> Undone<Location, M> {
        let State::Moving { to } = self.states[segment as usize] else {
            panic!("abandon: segment {segment} is not moving");
        };
        let from = self.locations[segment as usize];
        self.tiers[to.tier as usize].used -= 1;
        self.tiers[from.tier as usize].used += 1;
        self.states[segment as usize] = State::Idle;
        self.moving -= 1;
        let shed = self.shed(from.tier);
        Undone { item: to, shed }
    }

    /// Gives a fast tier's slot back to its free list (home slots are
    /// fixed: nothing to do).
    pub fn release_slot(&mut self, location: Location) {
        if location.tier != self.home() {
            let free = &mut self.tiers[location.tier as usize].free;
            debug_assert!(
                !free.contains(&location.slot),
                "slot {location:?} freed twice"
            );
            free.push(location.slot);
        }
    }

    /// Puts an idle `segment` back on home without a move (its fast copy
    /// was lost with a volatile tier and home holds its data). Returns the
    /// location it left; its slot is free again. Panics when the segment
    /// is queued or moving (a caller bug).
    pub fn force_home(&mut self, segment: SegmentId) -> Location {
        assert_eq!(
            self.states[segment as usize],
            State::Idle,
            "force_home: segment {segment} is queued or moving"
        );
        let home = self.home();
        let from = self.locations[segment as usize];
        if from.tier != home {
            self.tiers[from.tier as usize].used -= 1;
            self.tiers[home as usize].used += 1;
            self.release_slot(from);
            self.locations[segment as usize] = Location {
                tier: home,
                slot: segment,
            };
            self.tiers_of[segment as usize] = home;
        }
        from
    }
}

/// Why a queued move is dropped before it starts (counted per reason in
/// both worlds: `moves_dropped_by_reason` in `tierd sim`, `dropped_moves_by_reason`
/// in `tierd status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaleReason {
    /// The policy restates its plan every period and its newest plan does
    /// not ask for the move any more.
    NotAskedAgain,
    /// The move has waited longer than it can pay back.
    WaitedPastPayback { waited_ns: u64, payback_ns: u64 },
    /// It counted on room a dropped demotion would have made.
    RoomTakenBack,
}

impl StaleReason {
    /// A short name for counters and logs.
    pub fn name(&self) -> &'static str {
        match self {
            StaleReason::NotAskedAgain => "not-asked-again",
            StaleReason::WaitedPastPayback { .. } => "waited-past-payback",
            StaleReason::RoomTakenBack => "room-taken-back",
        }
    }
}

/// Moves dropped before they started, by reason: the count both worlds
/// report (`moves_dropped_by_reason` in `tierd sim`, `dropped_moves_by_reason`
/// in `tierd status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct DroppedMoves {
    /// The table refused the move ([`Refusal`]).
    pub refused: u64,
    /// The engine: the segment is pinned by an operator.
    pub pinned: u64,
    /// Stale: the newest plan did not ask for it again.
    pub not_asked_again: u64,
    /// Stale: it waited longer than it could pay back.
    pub waited_past_payback: u64,
    /// It counted on room a dropped or failed move would have made.
    pub room_taken_back: u64,
}

impl DroppedMoves {
    pub fn total(&self) -> u64 {
        self.refused
            + self.pinned
            + self.not_asked_again
            + self.waited_past_payback
            + self.room_taken_back
    }

    /// Stale moves (the three reasons of [`StaleReason`]).
    pub fn stale(&self) -> u64 {
        self.not_asked_again + self.waited_past_payback + self.room_taken_back
    }

    /// Counts what [`PlacementTable::drop_stale`] took out: each move by its
    /// reason, the moves shed with them as [`StaleReason::RoomTakenBack`].
    pub fn count_stale<M>(&mut self, undone: &Undone<Vec<(M, StaleReason)>, M>) {
        for (_, reason) in &undone.item {
            self.count(*reason);
        }
        self.room_taken_back += undone.shed.len() as u64;
    }

    /// Counts one move dropped for `reason`.
    pub fn count(&mut self, reason: StaleReason) {
        match reason {
            StaleReason::NotAskedAgain => self.not_asked_again += 1,
            StaleReason::WaitedPastPayback { .. } => self.waited_past_payback += 1,
            StaleReason::RoomTakenBack => self.room_taken_back += 1,
        }
    }
}

/// What the staleness rule looks at for one queued move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleInputs {
    /// Never stale: an operator pinned the segment (`tierd pin`).
    pub pinned: bool,
    /// Whether the policy's newest plan lists the move again; `None` when
    /// that says nothing (a policy that does not restate its plans, an
    /// operator's `tierd move`).
    pub asked_again: Option<bool>,
    /// Time since the move was first accepted.
    pub waited_ns: u64,
    /// How long after its acceptance the move still pays back what its copy
    /// costs (the policy's figure); `None`: no bound.
    pub payback_ns: Option<u64>,
}

/// The one rule, both worlds: a queued (not started) move is stale, and is
/// dropped, when the policy's newest plan no longer asks for it, or when it
/// has waited longer than it can pay back. A pinned segment's move is never
/// stale. Moves copying are never dropped (a started copy finishes).
pub fn stale_reason(inputs: StaleInputs) -> Option<StaleReason> {
    if inputs.pinned {
        return None;
    }
    if inputs.asked_again == Some(false) {
        return Some(StaleReason::NotAskedAgain);
    }
    match inputs.payback_ns {
        Some(payback_ns) if inputs.waited_ns > payback_ns => Some(StaleReason::WaitedPastPayback {
            waited_ns: inputs.waited_ns,
            payback_ns,
        }),
        _ => None,
    }
}

/// Whether a write to a segment on tier `on` (moving onto `moving_to`, if
/// a move of it is copying) must also reach home before its
/// acknowledgement: the segment is on a write-through (volatile) tier, or
/// is moving onto one from another fast tier, so home backs the RAM copy
/// after the flip. Both worlds route writes by this rule.
pub fn write_reaches_home(
    home: TierId,
    on: TierId,
    moving_to: Option<TierId>,
    write_through: impl Fn(TierId) -> bool,
) -> bool {
    on != home && (write_through(on) || moving_to.is_some_and(&write_through))
}

/// Whether home holds a segment's current data after its move from `from`
/// to `to` flipped (`was_current`: it did before the move): the segment is
/// home again, or lands on a write-through tier (its copy went to home
/// too), or left home without being written since. A demotion of a segment
/// whose home copy is current copies nothing, in both worlds.
pub fn home_current_after_flip(
    home: TierId,
    from: TierId,
    to: TierId,
    to_write_through: bool,
    was_current: bool,
) -> bool {
    to == home || to_write_through || (from == home && was_current)
}

#[cfg(test)]
mod tests;
