//! Data reduction in virtual time (issue 15 §2, paper 004): the reduction
//! workers as a queueing server ([`processor`]), what each step of a
//! block's reduction costs them ([`cost`], measured on this machine), and
//! the paper's Fig. 5 experiment ([`fig5`], [`output`]), and the tier's
//! packs with the cleaner that empties them ([`packs`]).
//!
//! The decisions are the live reduced tier's: [`tierd_core::reduce`]'s
//! `Switch` (inline or post-process, one threshold or two), `Staging` (the
//! stage's bound) and `WorkQueue` (what a user waits for before staged
//! reductions), and [`tierd_core::reduce::clean`]'s `Cleaner` (when to
//! clean, which packs, the reserve). Nothing here reimplements them.

pub mod cost;
pub mod fig5;
pub mod output;
pub mod packs;
pub mod processor;

/// The workers' queue order (`tierd_core::reduce`), for callers that
/// choose it without depending on tierd-core.
pub use tierd_core::reduce::QueueOrder;
