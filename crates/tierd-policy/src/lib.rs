//! Placement policies and page caches: pure code, no IO, no clock, no OS RNG.
//!
//! One policy code, two worlds: the simulator (`tierd-sim`) and the live
//! engine both feed IO completions into a [`monitor::Monitor`], which builds
//! the per-period [`view::View`] a [`Policy`] reads; the policy returns a
//! [`view::Plan`] of segment moves that the caller validates and executes.
//! A policy sees only what the live engine could observe: completed periods,
//! measured device figures, current placement — never the future of a trace.
//!
//! Page caches ([`cache`]) are the classic per-request baselines (FIFO, LRU,
//! ARC, S3-FIFO) at 4 KiB pages. [`concentration`] is ATSMF's per-period
//! IO concentration detection, also used offline by `tierd-analysis`.

pub mod cache;
pub mod concentration;
pub mod monitor;
pub mod policies;
pub mod view;

pub use policies::{build_policy, Policy, PolicyConfig, PolicyKind};
pub use view::{Move, MoveReason, Plan, SegmentId, TierId, View};
