//! The trace-driven load generator behind `tierd replay`: it issues the
//! requests of a block trace to a live NBD export open loop (at their
//! recorded times, scaled by a speed factor, bounded only by the requests in
//! flight), and reports what the client measured in the simulator's result
//! format, so a live run and `tierd sim` of the same configuration compare
//! key by key (`docs/engine/replay.md`).
//!
//! Seams, one module each:
//! - [`schedule`]: trace feeding: requests in replay order with their due
//!   times, under the simulator's open-loop rules; the pass that checks a
//!   trace before any IO;
//! - [`pacing`]: when the issuer sleeps and what counts as a late issue
//!   (sans-IO);
//! - [`driver`]: the NBD pipelining driver: one issuing thread, one receiver
//!   per connection, the in-flight bound; the only module with sockets,
//!   threads and clock reads (through an injected [`Clock`]);
//! - [`collect`]: result collection: completions matched with their issue,
//!   histograms, per-period series, errors (sans-IO);
//! - [`progress`]: the [`Progress`] a caller shows while a replay runs;
//! - [`report`]: the JSON report (public keys), its text tables and the HTML
//!   report;
//! - [`target`], [`wrap`], [`pattern`]: connecting to the export, putting
//!   requests past its end onto it, and the bytes writes carry.
//!
//! [`replay::Plan`] strings them together: check and scan, connect, run.
//!
//! [`Clock`]: tierd_common::clock::Clock
//! [`Progress`]: progress::Progress

pub mod collect;
pub mod driver;
mod error;
pub mod pacing;
pub mod pattern;
pub mod progress;
pub mod replay;
pub mod report;
pub mod schedule;
pub mod target;
pub mod wrap;

pub use error::LoadError;
pub use progress::{NoProgress, Progress};
pub use replay::{Outcome, Plan, ReplayOptions, DEFAULT_MAX_INFLIGHT};
pub use report::{LiveReport, LiveRun};
pub use schedule::TraceSource;
pub use target::{describe, parse_description, DescribedVolume};
