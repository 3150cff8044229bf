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
//!   requests past its end onto it, and the bytes writes carry;
//! - [`prefill`]: writing every range the window reads before the replay
//!   (`--prefill`), so no read finds never-written space.
//!
//! [`replay::Plan`] strings them together: check and scan, connect, run.
//!
//! ```no_run
//! use tierd_common::clock::SystemClock;
//! use tierd_load::{NoProgress, Plan, ReplayOptions, TraceSource};
//!
//! let trace = TraceSource {
//!     path: "hm_0.csv".into(),
//!     options: tierd_trace::OpenOptions::default(),
//! };
//! let options = ReplayOptions {
//!     speed: 8.0,
//!     max_inflight: 128,
//!     ..ReplayOptions::new(trace, "nbd+unix:///vol0?socket=data/tierd.sock")
//! };
//! let plan = Plan::new(options)?; // reads the whole window: bad lines stop here
//! let connected = plan.connect()?; // refuses requests past the export
//! let outcome = plan.run(connected, &SystemClock::new(), &NoProgress)?;
//! let run = &outcome.report.runs[0].run; // the simulator's RunResult
//! println!("{:.1} ms mean, {:.1} ms p99", run.avg_response_us / 1e3, run.response_p99_us / 1e3);
//! # Ok::<(), tierd_load::LoadError>(())
//! ```
//!
//! [`Clock`]: tierd_common::clock::Clock
//! [`Progress`]: progress::Progress

pub mod collect;
pub mod driver;
mod error;
pub mod pacing;
pub mod pattern;
pub mod prefill;
pub mod progress;
pub mod replay;
pub mod report;
pub mod schedule;
pub mod target;
pub mod wrap;

pub use error::LoadError;
pub use prefill::Prefilled;
pub use progress::{NoProgress, Progress};
pub use replay::{Outcome, Plan, ReplayOptions, DEFAULT_MAX_INFLIGHT};
pub use report::{LiveReport, LiveRun};
pub use schedule::TraceSource;
pub use target::{describe, parse_description, DescribedVolume};
