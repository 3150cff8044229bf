//! The live tiering engine.
//!
//! - [`device`]: block devices (file, memory) and wrappers (stats, emulated
//!   latency, fault injection) behind one [`device::BlockDevice`] trait.
//! - [`volume`]: a volume's segments over an N-tier stack: routing, split
//!   requests, write-through of volatile tiers, online migration with
//!   mirrored writes, the live monitor and the policy call.
//! - [`meta`]: the checksummed journal and checkpoint that make placement
//!   and policy state survive a clean stop or `kill -9`.
//! - [`identity`]: tier superblocks and the metadata's identity file, checked
//!   at every start so a file that is not what it was is never served.
//! - [`pidlock`]: a pid lock file, one process's claim on a directory.
//! - [`runner`]: the real-time threads that close periods and copy chunks.
//! - [`engine`]: builds all of it from a [`config::Config`].
//! - [`log`]: structured log lines.
//! - [`admin_proto`]: the admin socket's request lines, parsed and checked
//!   without the socket (fuzzed).

pub mod admin_proto;
pub mod config;
pub mod device;
pub mod dst;
pub mod engine;
pub mod identity;
pub mod log;
pub mod meta;
pub mod pidlock;
pub mod runner;
mod shard;
pub mod volume;
