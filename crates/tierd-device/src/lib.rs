//! Devices. This crate holds the timing models the simulator replays traces
//! through ([`model`]); issue 4 adds the real backends (file, memory) and the
//! wrappers (stats, latency model, faults) behind the same crate, so the live
//! engine's emulated devices use exactly these models.

pub mod model;

pub use model::{
    probe_capacity, probe_read_service, probe_service, Completion, DeviceCounters, DeviceIo,
    DeviceModel, DevicePreset,
};
