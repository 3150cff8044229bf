//! The live tiering engine.
//!
//! - [`device`]: block devices (file, memory) and wrappers (stats, emulated
//!   latency, fault injection) behind one [`device::BlockDevice`] trait.

pub mod device;
