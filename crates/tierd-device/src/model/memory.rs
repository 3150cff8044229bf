//! Memory / NVM model (see `docs/devices/memory.md`).
//!
//! An IO takes one of `parallel_paths` (CPUs submitting through the block
//! layer, or the cores doing loads and stores), whichever frees first, for
//!
//! `software_us + medium_access_ns + length / copy rate`
//!
//! The software path and the medium are separate parameters because they
//! differ by two orders of magnitude: the `memory` preset is what ATSMF
//! measured, a brd RAM disk behind device-mapper (~15 µs per 4 KiB IO, almost
//! all of it the kernel's block path), while DRAM itself answers in
//! < 100 ns. [`MemoryConfig::pmem_raw`] is persistent memory used directly
//! (DAX, no block layer): ~300 ns per random access.

use tierd_common::op::Op;

use super::hdd::{clamp_io, non_negative, positive, settings, ConfigError};
use super::ssd::{CompletionQueue, ParallelUnits};
use super::{Completion, DeviceCounters, DeviceIo, DeviceModel, DevicePreset};

settings! {
    /// Every parameter of a memory model.
    config MemoryConfig;
    /// A partial [`MemoryConfig`] for a tier file's `[tier.model]`.
    overrides MemoryOverrides;
    {
        name: String,
        capacity_bytes: u64,
        /// IOs served at the same time.
        parallel_paths: u32,
        /// Per-IO software path (block layer, device-mapper, driver).
        software_us: f64,
        /// Medium access latency per IO.
        medium_access_ns: f64,
        /// Copy rates in decimal MB/s per path.
        read_copy_mb_s: f64,
        write_copy_mb_s: f64,
    }
}

impl MemoryConfig {
    /// The preset's parameters, or `None` if `preset` is not memory.
    pub fn preset(preset: DevicePreset) -> Option<MemoryConfig> {
        match preset {
            DevicePreset::Memory => Some(Self::block_ram_disk()),
            _ => None,
        }
    }

    /// DRAM behind the kernel block layer (brd + device-mapper), as ATSMF's
    /// memory tier: 14 µs software + 0.1 µs DRAM + a 4 GB/s copy, so a 4 KiB
    /// IO takes ~15.1 µs (ATSMF Table 5 measured 15–25 µs means).
    pub fn block_ram_disk() -> MemoryConfig {
        MemoryConfig {
            name: "memory".to_string(),
            capacity_bytes: 64 << 30,
            parallel_paths: 8,
            software_us: 14.0,
            medium_access_ns: 100.0,
            read_copy_mb_s: 4_000.0,
            write_copy_mb_s: 4_000.0,
        }
    }

    /// Persistent memory used raw (DAX): no software path, ~300 ns random
    /// access (Optane DC PMem), copies at 6 GB/s read / 2 GB/s write per
    /// thread. Not a [`DevicePreset`]; use it through [`Memory::new`].
    pub fn pmem_raw() -> MemoryConfig {
        MemoryConfig {
            name: "pmem-raw".to_string(),
            capacity_bytes: 128 << 30,
            parallel_paths: 8,
            software_us: 0.0,
            medium_access_ns: 300.0,
            read_copy_mb_s: 6_000.0,
            write_copy_mb_s: 2_000.0,
        }
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let device = self.name.as_str();
        if self.capacity_bytes == 0 {
            return Err(ConfigError::new(
                device,
                "capacity_bytes",
                "must be above zero",
            ));
        }
        if self.parallel_paths == 0 || self.parallel_paths > 65_536 {
            return Err(ConfigError::new(device, "parallel_paths", "1 to 65536"));
        }
        non_negative(device, "software_us", self.software_us)?;
        non_negative(device, "medium_access_ns", self.medium_access_ns)?;
        positive(device, "read_copy_mb_s", self.read_copy_mb_s)?;
        positive(device, "write_copy_mb_s", self.write_copy_mb_s)?;
        Ok(())
    }
}

/// An event-driven memory device (see the module docs).
#[derive(Clone, Debug)]
pub struct Memory {
    config: MemoryConfig,
    completions: CompletionQueue,
    paths: ParallelUnits,
    fixed_ns: f64,
    read_ns_per_byte: f64,
    write_ns_per_byte: f64,
}

impl Memory {
    pub fn new(config: &MemoryConfig) -> Result<Memory, ConfigError> {
        config.validate()?;
        Ok(Memory {
            completions: CompletionQueue::default(),
            paths: ParallelUnits::new(config.parallel_paths),
            fixed_ns: config.software_us * 1e3 + config.medium_access_ns,
            read_ns_per_byte: 1e3 / config.read_copy_mb_s,
            write_ns_per_byte: 1e3 / config.write_copy_mb_s,
            config: config.clone(),
        })
    }

    /// The preset's model at its own capacity.
    pub fn preset(preset: DevicePreset) -> Option<Memory> {
        MemoryConfig::preset(preset).and_then(|config| Memory::new(&config).ok())
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }
}

impl DeviceModel for Memory {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn capacity_bytes(&self) -> u64 {
        self.config.capacity_bytes
    }

    fn submit(&mut self, now_ns: u64, io: DeviceIo) {
        let io = clamp_io(io, self.config.capacity_bytes);
        let per_byte = match io.op {
            Op::Read => self.read_ns_per_byte,
            Op::Write => self.write_ns_per_byte,
        };
        let duration = (self.fixed_ns + io.length_bytes as f64 * per_byte).round() as u64;
        let (start, end) = self.paths.run(now_ns, duration);
        self.completions.push(&io, now_ns, start, end);
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.completions.next_event_ns()
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        self.completions.advance(now_ns, done);
    }

    fn outstanding(&self) -> usize {
        self.completions.outstanding()
    }

    fn counters(&self) -> DeviceCounters {
        self.completions.counters()
    }
}
