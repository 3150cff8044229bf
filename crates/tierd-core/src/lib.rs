//! The data-path mechanics of tierd as sans-IO state machines.
//!
//! Everything here decides and never does IO or reads a clock: callers pass
//! the time in and carry out what a machine asks for. The simulator
//! (`tierd-sim`) drives these machines with device models in virtual time;
//! the live engine (`tierd-engine`) drives the very same code with real
//! devices and threads. So a rule about when a write reaches a moving
//! segment's target, or when a move may flip, is written once.
//!
//! - [`moves`]: one segment's move between tiers: which chunk to copy next
//!   and when (pacing), which part of a user write goes to the target now,
//!   which part is handed to the mover to apply after a chunk lands, and
//!   when the move may flip.
//! - [`cache`]: the block cache: which home blocks the fast tier holds in
//!   which slot, dirty state, admission, eviction, writeback order, and the
//!   mapping changes to journal.
//! - [`placement`]: where every segment lives, the fast tiers' free slots,
//!   and which moves are accepted, queued and started.
//! - [`reduce`]: data reduction's timing: inline or post-process, switched
//!   on the reduction workers' measured utilisation with one threshold or
//!   two (paper 004), and the stage's bound; [`reduce::clean`]: the
//!   cleaner's decisions (when, which packs, the reserve).
//! - [`replica`]: replicas of far-apart, read-together extents in free HDD
//!   space (paper 003): the allocation map, detection, placement, read
//!   routing to the cheapest current copy, and the copy jobs.
//! - [`split`]: splitting a request at segment boundaries.

pub mod cache;
pub mod moves;
pub mod placement;
pub mod reduce;
pub mod replica;
pub mod split;
