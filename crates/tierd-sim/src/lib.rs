//! Trace-driven simulation of tiered block storage.
//!
//! A run replays one block trace through a stack of modelled devices (tier 0
//! fastest, the last tier home) and one strategy: a placement policy that
//! moves segments between tiers (`none`, `otf-ast`, `atsmf`), or a page cache
//! over a two-tier stack (`fifo`, `lru`, `arc`, `s3fifo`). Everything runs in
//! virtual time, single-threaded and deterministic for a seed: the same trace,
//! settings and seed give the same [`RunResult`], byte for byte.
//!
//! The policy code is the live engine's: the simulator feeds completed IOs to
//! a [`tierd_policy::monitor::Monitor`], hands the policy the same
//! [`tierd_policy::View`] the engine builds, and executes its plan with the
//! same migration rules (chunked copy, writes mirrored to the target, a flip
//! that holds no IO).
//! `docs/sim.md` describes the model and every reported figure.

pub mod config;
pub mod cursor;
pub mod devices;
pub mod engine;
pub mod error;
pub mod matrix;
pub mod reduce;
pub mod replicas;
pub mod report;
pub mod result;
pub mod runner;
pub mod smr;
pub mod stack;
pub mod sweep;
pub mod tables;
pub mod testing;

pub use config::{Replay, SimConfig, Strategy, Window};
pub use engine::{run_with, Controller, Progress};
pub use error::SimError;
pub use result::{RunResult, SimReport};
pub use runner::{build_controller, run};
pub use stack::{MigrationConfig, TierSpec, TierStack};
