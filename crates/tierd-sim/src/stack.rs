//! Tier stacks: which devices, how large, in which order, and how segments
//! move between them. Written in TOML (`--tiers FILE.toml`) or taken from an
//! embedded preset (`hdd-ssd`, `hdd-7200`, `ssd-mem`, `ssd-smr`).
//!
//! ```toml
//! name = "hdd-ssd"
//! segment_bytes = "1GiB"          # default segment size (power of two)
//!
//! [[tier]]                        # tier 0: the fastest
//! name = "ssd"
//! device = "x25e"                 # a tierd_device::DevicePreset name
//! capacity = "64GB"               # required on every tier but the last
//! queue_depth = 128               # optional: IOs the host keeps at the device
//! unsafe_volatile = false         # memory tiers only: true = no write-through
//! [tier.model]                    # optional: model overrides, passed through
//!
//! [[tier]]                        # the last tier is home: it holds every segment
//! name = "hdd"
//! device = "savvio10k4"           # capacity optional: default = the volume size
//!
//! [migration]
//! chunk_bytes = "1MiB"
//! max_concurrent_moves = 1
//! chunks_in_flight = 4            # chunks of one move copied at once
//! chunk_gap = "0s"                # pause after a chunk lands
//! max_bandwidth = "200MB"         # bytes per second per move; absent = unpaced
//!
//! [cache]                         # the block caches (fifo, lru, arc, s3fifo)
//! block_bytes = "64KiB"           # cache block: power of two, 4KiB..1MiB
//! mode = "writeback"              # writeback | writethrough | writearound
//! admission = "always"            # always | frequency | frequency:N
//! sequential_cutoff_bytes = "4MiB"  # misses of longer sequential runs bypass; 0 = off
//! smr_staging = true              # an SMR home: stage every write, destage whole bands
//! ```
//!
//! Every key is checked: an unknown key, a bad unit or an out-of-range value
//! is an error that names the key and what is allowed.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tierd_common::units::{parse_bytes, parse_duration_ns, PAGE_BYTES};
pub use tierd_core::cache::{AdmissionKind, CacheMode};
use tierd_core::cache::{DEFAULT_SEQUENTIAL_CUTOFF_BYTES, MAX_BLOCK_BYTES, MIN_BLOCK_BYTES};
use tierd_device::DevicePreset;

use crate::error::SimError;

/// Most tiers a stack may have ([`tierd_policy::TierId`] is a `u8`; the
/// simulator packs it into IO ids).
pub const MAX_TIERS: usize = 8;

/// Smallest and largest segment sizes accepted.
pub const MIN_SEGMENT_BYTES: u64 = 1 << 20;
pub const MAX_SEGMENT_BYTES: u64 = 4 << 30;

/// Default host queue limit per device: Linux's default `nr_requests`.
pub const DEFAULT_QUEUE_DEPTH: u32 = 128;

const PRESETS: [(&str, &str); 4] = [
    ("hdd-ssd", include_str!("../presets/hdd-ssd.toml")),
    ("hdd-7200", include_str!("../presets/hdd-7200.toml")),
    ("ssd-mem", include_str!("../presets/ssd-mem.toml")),
    ("ssd-smr", include_str!("../presets/ssd-smr.toml")),
];

/// Names of the embedded tier-stack presets.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|(name, _)| *name).collect()
}

/// The TOML text of an embedded preset.
pub fn preset_text(name: &str) -> Option<&'static str> {
    PRESETS
        .iter()
        .find(|(preset, _)| *preset == name)
        .map(|(_, text)| *text)
}

/// A size written as a human string ("64GB", "1MiB") or a plain integer.
#[derive(Clone, Debug)]
enum HumanSize {
    Number(u64),
    Text(String),
}

/// A duration written as a human string ("0s", "500ms") or whole seconds.
#[derive(Clone, Debug)]
enum HumanDuration {
    Seconds(u64),
    Text(String),
}

/// Accepts a non-negative integer or a string; says what it expected.
struct NumberOrText(&'static str);

impl serde::de::Visitor<'_> for NumberOrText {
    type Value = Result<u64, String>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str(self.0)
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Self::Value, E> {
        Ok(Ok(value))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Self::Value, E> {
        u64::try_from(value)
            .map(Ok)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(value), &self))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Self::Value, E> {
        Ok(Err(value.to_string()))
    }
}

impl<'de> Deserialize<'de> for HumanSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = deserializer.deserialize_any(NumberOrText(
            "a size such as \"64GB\", \"1MiB\" or a number of bytes",
        ))?;
        Ok(match value {
            Ok(number) => HumanSize::Number(number),
            Err(text) => HumanSize::Text(text),
        })
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = deserializer.deserialize_any(NumberOrText(
            "a duration such as \"0s\", \"500ms\" or a number of seconds",
        ))?;
        Ok(match value {
            Ok(number) => HumanDuration::Seconds(number),
            Err(text) => HumanDuration::Text(text),
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StackFile {
    name: Option<String>,
    description: Option<String>,
    segment_bytes: Option<HumanSize>,
    #[serde(default)]
    tier: Vec<TierFile>,
    #[serde(default)]
    migration: MigrationFile,
    #[serde(default)]
    cache: CacheFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    block_bytes: Option<HumanSize>,
    mode: Option<String>,
    admission: Option<String>,
    sequential_cutoff_bytes: Option<HumanSize>,
    smr_staging: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TierFile {
    name: String,
    device: DevicePreset,
    capacity: Option<HumanSize>,
    queue_depth: Option<u32>,
    unsafe_volatile: Option<bool>,
    model: Option<toml::Table>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MigrationFile {
    chunk_bytes: Option<HumanSize>,
    max_concurrent_moves: Option<u32>,
    chunks_in_flight: Option<u32>,
    chunk_gap: Option<HumanDuration>,
    max_bandwidth: Option<HumanSize>,
}

/// One tier of a validated stack.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierSpec {
    pub name: String,
    pub device: DevicePreset,
    /// `None` only on the home tier: sized to the simulated volume.
    pub capacity_bytes: Option<u64>,
    /// IOs the host keeps outstanding at the device; more wait in a FIFO in
    /// front of it (the block layer's request queue).
    pub queue_depth: u32,
    /// A memory tier whose writes are not written through to home (the
    /// engine's `unsafe_volatile`). By default a write to a segment on a
    /// memory tier (other than home) also goes to home and is acknowledged
    /// when both are done, as `tierd serve` does.
    pub unsafe_volatile: bool,
    /// Model overrides from `[tier.model]`, handed to the device preset.
    pub model: Option<toml::Table>,
}

/// How moves are executed (the `[migration]` table).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MigrationConfig {
    /// Copy unit: each chunk is read from the source, then written to the
    /// target. A power of two, 4 KiB ..= the segment size.
    pub chunk_bytes: u64,
    /// Moves copying at the same time (others wait in order).
    pub max_concurrent_moves: u32,
    /// Chunks of one move being copied at the same time.
    pub chunks_in_flight: u32,
    /// After a chunk of a move lands, no new chunk of that move starts for
    /// this long.
    pub chunk_gap_ns: u64,
    /// Bytes per second one move may copy; `None`: as fast as the devices go.
    pub max_bandwidth_bytes_per_second: Option<u64>,
}

impl Default for MigrationConfig {
    fn default() -> Self {
        Self {
            chunk_bytes: 1 << 20,
            max_concurrent_moves: 1,
            chunks_in_flight: 4,
            chunk_gap_ns: 0,
            max_bandwidth_bytes_per_second: None,
        }
    }
}

/// The simulator's default cache block, chosen by measurement (`EVIDENCE.md`,
/// "Cache block size"; `docs/sim.md`).
pub const DEFAULT_CACHE_BLOCK_BYTES: u64 = 64 << 10;

/// How the block caches run (the `[cache]` table; `tierd sim --cache-block`,
/// `--cache-mode`, `--admission`, `--sequential-cutoff` override it). The
/// eviction policy is the strategy (`fifo`, `lru`, `arc`, `s3fifo`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheConfig {
    /// Cache block: a power of two, 4 KiB ..= 1 MiB.
    pub block_bytes: u64,
    #[serde(serialize_with = "display")]
    pub mode: CacheMode,
    #[serde(serialize_with = "display")]
    pub admission: AdmissionKind,
    /// Misses of a sequential run at least this long do not allocate; 0 = off.
    pub sequential_cutoff_bytes: u64,
    /// With a drive-managed SMR home (`archive8tb`): stage every write and
    /// destage by whole-band rewrites (`docs/engine/smr.md`). No effect on
    /// any other home. Default on; `tierd sim --smr-staging off`.
    pub smr_staging: bool,
}

fn display<T: std::fmt::Display, S: serde::Serializer>(
    value: &T,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

impl Default for CacheConfig {
    /// Write-back (flashcache, the papers' baseline, is write-back), admit
    /// every miss, bcache's 4 MiB sequential cutoff.
    fn default() -> Self {
        Self {
            block_bytes: DEFAULT_CACHE_BLOCK_BYTES,
            mode: CacheMode::Writeback,
            admission: AdmissionKind::Always,
            sequential_cutoff_bytes: DEFAULT_SEQUENTIAL_CUTOFF_BYTES,
            smr_staging: true,
        }
    }
}

/// Checks a cache block size: a power of two in 4 KiB ..= 1 MiB.
pub fn check_cache_block_bytes(source_name: &str, key: &str, bytes: u64) -> Result<(), SimError> {
    if !bytes.is_power_of_two() || !(MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&bytes) {
        return Err(config_error(
            source_name,
            key,
            format!(
                "{bytes} bytes is not allowed: a cache block is a power of two from 4KiB to 1MiB \
                 (4KiB, 8KiB, ..., 512KiB, 1MiB)"
            ),
        ));
    }
    Ok(())
}

fn cache_config(source_name: &str, file: &CacheFile) -> Result<CacheConfig, SimError> {
    let defaults = CacheConfig::default();
    let block_bytes = match &file.block_bytes {
        Some(value) => size(source_name, "cache.block_bytes", value)?,
        None => defaults.block_bytes,
    };
    check_cache_block_bytes(source_name, "cache.block_bytes", block_bytes)?;
    let mode = match &file.mode {
        Some(text) => CacheMode::parse(text)
            .map_err(|message| config_error(source_name, "cache.mode", message))?,
        None => defaults.mode,
    };
    let admission = match &file.admission {
        Some(text) => AdmissionKind::parse(text)
            .map_err(|message| config_error(source_name, "cache.admission", message))?,
        None => defaults.admission,
    };
    let sequential_cutoff_bytes = match &file.sequential_cutoff_bytes {
        Some(value) => size(source_name, "cache.sequential_cutoff_bytes", value)?,
        None => defaults.sequential_cutoff_bytes,
    };
    Ok(CacheConfig {
        block_bytes,
        mode,
        admission,
        sequential_cutoff_bytes,
        smr_staging: file.smr_staging.unwrap_or(defaults.smr_staging),
    })
}

/// A validated tier stack.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierStack {
    pub name: String,
    pub description: String,
    /// Default segment size for this stack.
    pub segment_bytes: u64,
    /// Fastest first; the last is home.
    pub tiers: Vec<TierSpec>,
    pub migration: MigrationConfig,
    /// The block caches' settings (`[cache]`).
    pub cache: CacheConfig,
}

fn config_error(source_name: &str, key: impl Into<String>, message: impl Into<String>) -> SimError {
    SimError::Config {
        source_name: source_name.to_string(),
        key: key.into(),
        message: message.into(),
    }
}

fn size(source_name: &str, key: &str, value: &HumanSize) -> Result<u64, SimError> {
    match value {
        HumanSize::Number(bytes) => Ok(*bytes),
        HumanSize::Text(text) => {
            parse_bytes(text).map_err(|error| config_error(source_name, key, error.to_string()))
        }
    }
}

fn duration(source_name: &str, key: &str, value: &HumanDuration) -> Result<u64, SimError> {
    match value {
        HumanDuration::Seconds(seconds) => seconds
            .checked_mul(1_000_000_000)
            .ok_or_else(|| config_error(source_name, key, "duration out of range")),
        HumanDuration::Text(text) => parse_duration_ns(text)
            .map_err(|error| config_error(source_name, key, error.to_string())),
    }
}

/// Checks a segment size: a power of two in 1 MiB ..= 4 GiB.
pub fn check_segment_bytes(source_name: &str, key: &str, bytes: u64) -> Result<(), SimError> {
    if !bytes.is_power_of_two() || !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&bytes) {
        return Err(config_error(
            source_name,
            key,
            format!(
                "{bytes} bytes is not allowed: a segment is a power of two from 1MiB to 4GiB \
                 (1MiB, 2MiB, ..., 1GiB, 2GiB, 4GiB)"
            ),
        ));
    }
    Ok(())
}

impl TierStack {
    /// `spec` is a preset name (`hdd-ssd`, `ssd-mem`) or a path to a TOML file.
    pub fn load(spec: &str) -> Result<TierStack, SimError> {
        if let Some(text) = preset_text(spec) {
            return TierStack::parse(text, spec);
        }
        let path = Path::new(spec);
        match std::fs::read_to_string(path) {
            Ok(text) => TierStack::parse(&text, spec),
            Err(error) => Err(SimError::StackNotFound {
                spec: spec.to_string(),
                message: format!(
                    "not a preset ({}) and the file cannot be read: {error}",
                    preset_names().join(", ")
                ),
            }),
        }
    }

    /// An embedded preset by name.
    pub fn preset(name: &str) -> Result<TierStack, SimError> {
        let text = preset_text(name).ok_or_else(|| SimError::StackNotFound {
            spec: name.to_string(),
            message: format!("no such preset; available: {}", preset_names().join(", ")),
        })?;
        TierStack::parse(text, name)
    }

    /// Parses and validates TOML text; `source_name` (file or preset name)
    /// prefixes every error.
    pub fn parse(text: &str, source_name: &str) -> Result<TierStack, SimError> {
        let file: StackFile = toml::from_str(text).map_err(|error| SimError::StackSyntax {
            source_name: source_name.to_string(),
            message: error.to_string().trim_end().to_string(),
        })?;
        let segment_bytes = match &file.segment_bytes {
            Some(value) => size(source_name, "segment_bytes", value)?,
            None => 1 << 30,
        };
        check_segment_bytes(source_name, "segment_bytes", segment_bytes)?;
        if file.tier.is_empty() {
            return Err(config_error(
                source_name,
                "tier",
                "no tiers: add [[tier]] tables, fastest first, home last",
            ));
        }
        if file.tier.len() > MAX_TIERS {
            return Err(config_error(
                source_name,
                "tier",
                format!("{} tiers; at most {MAX_TIERS} are allowed", file.tier.len()),
            ));
        }
        let last = file.tier.len() - 1;
        let mut tiers = Vec::with_capacity(file.tier.len());
        for (index, tier) in file.tier.iter().enumerate() {
            let key = |field: &str| format!("tier[{index}].{field}");
            if tier.name.trim().is_empty() {
                return Err(config_error(source_name, key("name"), "must not be empty"));
            }
            if tiers.iter().any(|other: &TierSpec| other.name == tier.name) {
                return Err(config_error(
                    source_name,
                    key("name"),
                    format!("{:?} is used by two tiers; names must be unique", tier.name),
                ));
            }
            let capacity_bytes =
                match &tier.capacity {
                    Some(value) => {
                        let bytes = size(source_name, &key("capacity"), value)?;
                        if bytes < MIN_SEGMENT_BYTES {
                            return Err(config_error(
                                source_name,
                                key("capacity"),
                                format!("{bytes} bytes is too small: at least 1MiB (one segment)"),
                            ));
                        }
                        Some(bytes)
                    }
                    None if index == last => None,
                    None => return Err(config_error(
                        source_name,
                        key("capacity"),
                        "missing: every tier but the last (home) needs a capacity, e.g. \"64GB\"",
                    )),
                };
            let queue_depth = tier.queue_depth.unwrap_or(DEFAULT_QUEUE_DEPTH);
            if queue_depth == 0 {
                return Err(config_error(
                    source_name,
                    key("queue_depth"),
                    "must be at least 1",
                ));
            }
            let unsafe_volatile = tier.unsafe_volatile.unwrap_or(false);
            if unsafe_volatile && tier.device != DevicePreset::Memory {
                return Err(config_error(
                    source_name,
                    key("unsafe_volatile"),
                    format!(
                        "applies only to a memory tier (whose contents a power loss takes); device \"{}\" keeps its data, so remove the key",
                        tier.device.name()
                    ),
                ));
            }
            tiers.push(TierSpec {
                name: tier.name.clone(),
                device: tier.device,
                capacity_bytes,
                queue_depth,
                unsafe_volatile,
                model: tier.model.clone(),
            });
        }
        let migration = migration_config(source_name, &file.migration, segment_bytes)?;
        let cache = cache_config(source_name, &file.cache)?;
        Ok(TierStack {
            name: file.name.clone().unwrap_or_else(|| source_name.to_string()),
            description: file.description.clone().unwrap_or_default(),
            segment_bytes,
            tiers,
            migration,
            cache,
        })
    }

    pub fn home(&self) -> usize {
        self.tiers.len() - 1
    }

    /// Every tier on one line, for reports:
    /// `ssd: x25e 64 GB; hdd: savvio10k4 600 GB or the volume if larger`.
    pub fn summary(&self) -> String {
        self.tiers
            .iter()
            .map(|tier| {
                let capacity = match tier.capacity_bytes {
                    Some(bytes) => format!("{:.0} GB", bytes as f64 / 1e9),
                    None => format!(
                        "{:.0} GB or the volume if larger",
                        tier.device.default_capacity_bytes() as f64 / 1e9
                    ),
                };
                format!("{}: {} {}", tier.name, device_name(tier.device), capacity)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The name a tier file uses for `preset`.
pub fn device_name(preset: DevicePreset) -> String {
    preset.name().to_string()
}

fn migration_config(
    source_name: &str,
    file: &MigrationFile,
    segment_bytes: u64,
) -> Result<MigrationConfig, SimError> {
    let defaults = MigrationConfig::default();
    let chunk_bytes = match &file.chunk_bytes {
        Some(value) => size(source_name, "migration.chunk_bytes", value)?,
        None => defaults.chunk_bytes.min(segment_bytes),
    };
    if !chunk_bytes.is_power_of_two() || !(PAGE_BYTES..=MAX_SEGMENT_BYTES).contains(&chunk_bytes) {
        return Err(config_error(
            source_name,
            "migration.chunk_bytes",
            format!(
                "{chunk_bytes} bytes is not allowed: a power of two from 4KiB to the segment size"
            ),
        ));
    }
    let max_concurrent_moves = file
        .max_concurrent_moves
        .unwrap_or(defaults.max_concurrent_moves);
    if max_concurrent_moves == 0 {
        return Err(config_error(
            source_name,
            "migration.max_concurrent_moves",
            "must be at least 1",
        ));
    }
    let chunks_in_flight = file.chunks_in_flight.unwrap_or(defaults.chunks_in_flight);
    if chunks_in_flight == 0 {
        return Err(config_error(
            source_name,
            "migration.chunks_in_flight",
            "must be at least 1",
        ));
    }
    let chunk_gap_ns = match &file.chunk_gap {
        Some(value) => duration(source_name, "migration.chunk_gap", value)?,
        None => defaults.chunk_gap_ns,
    };
    let max_bandwidth_bytes_per_second = match &file.max_bandwidth {
        Some(value) => {
            let bytes = size(source_name, "migration.max_bandwidth", value)?;
            if bytes == 0 {
                return Err(config_error(
                    source_name,
                    "migration.max_bandwidth",
                    "must be positive (bytes per second), or left out for unpaced copying",
                ));
            }
            Some(bytes)
        }
        None => None,
    };
    Ok(MigrationConfig {
        chunk_bytes,
        max_concurrent_moves,
        chunks_in_flight,
        chunk_gap_ns,
        max_bandwidth_bytes_per_second,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse() {
        let stack = TierStack::preset("hdd-ssd").unwrap();
        assert_eq!(stack.tiers.len(), 2);
        assert_eq!(stack.tiers[0].device, DevicePreset::X25e);
        assert_eq!(stack.tiers[0].capacity_bytes, Some(64_000_000_000));
        assert_eq!(stack.tiers[1].device, DevicePreset::Savvio10k4);
        assert_eq!(stack.tiers[1].capacity_bytes, None);
        assert_eq!(stack.segment_bytes, 1 << 30);
        assert_eq!(stack.migration.chunk_bytes, 1 << 20);
        let stack = TierStack::preset("ssd-mem").unwrap();
        assert_eq!(stack.tiers[0].device, DevicePreset::Memory);
        assert_eq!(stack.tiers[1].device, DevicePreset::P3700);
        assert!(TierStack::load("hdd-ssd").is_ok());
        let stack = TierStack::preset("ssd-smr").unwrap();
        assert_eq!(stack.tiers[0].device, DevicePreset::P3700);
        assert_eq!(stack.tiers[0].capacity_bytes, Some(64_000_000_000));
        assert_eq!(stack.tiers[1].device, DevicePreset::Archive8tb);
        assert!(stack.cache.smr_staging);
    }

    fn error_of(text: &str) -> String {
        TierStack::parse(text, "test.toml").unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_key_and_what_is_allowed() {
        let message = error_of(
            "[[tier]]\nname = \"ssd\"\ndevice = \"x25e\"\ncapacity = \"64 parsecs\"\n[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n",
        );
        assert!(message.contains("tier[0].capacity"), "{message}");
        assert!(message.contains("parsecs"), "{message}");

        let message = error_of("[[tier]]\nname = \"ssd\"\ndevice = \"x26e\"\n");
        assert!(
            message.contains("x26e") && message.contains("x25e"),
            "{message}"
        );

        let message =
            error_of("colour = \"blue\"\n[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n");
        assert!(message.contains("colour"), "{message}");

        let message = error_of(
            "segment_bytes = \"3MiB\"\n[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n",
        );
        assert!(
            message.contains("segment_bytes") && message.contains("power of two"),
            "{message}"
        );

        let message = error_of(
            "[[tier]]\nname = \"ssd\"\ndevice = \"x25e\"\n[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n",
        );
        assert!(
            message.contains("tier[0].capacity") && message.contains("missing"),
            "{message}"
        );

        let message = error_of("[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n[migration]\nchunk_bytes = \"3000\"\n");
        assert!(message.contains("migration.chunk_bytes"), "{message}");

        let message =
            error_of("[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n[migration]\nspeed = 3\n");
        assert!(message.contains("speed"), "{message}");

        let message =
            error_of("[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\ncapacity = true\n");
        assert!(message.contains("a size such as"), "{message}");

        let message = error_of("name = \"empty\"\n");
        assert!(message.contains("no tiers"), "{message}");

        let message = TierStack::load("/no/such/stack.toml")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("hdd-ssd")
                && message.contains("ssd-mem")
                && message.contains("ssd-smr"),
            "{message}"
        );
    }

    #[test]
    fn the_cache_table_sets_the_block_caches_and_its_errors_name_the_key() {
        const HOME: &str = "[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n";
        let stack = TierStack::parse(HOME, "t.toml").unwrap();
        assert_eq!(stack.cache, CacheConfig::default());
        let stack = TierStack::parse(
            &format!(
                "{HOME}[cache]\nblock_bytes = \"16KiB\"\nmode = \"writethrough\"\n\
                 admission = \"frequency:3\"\nsequential_cutoff_bytes = 0\n"
            ),
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            stack.cache,
            CacheConfig {
                block_bytes: 16 << 10,
                mode: CacheMode::Writethrough,
                admission: AdmissionKind::Frequency { misses: 3 },
                sequential_cutoff_bytes: 0,
                smr_staging: true,
            }
        );
        for (table, key, says) in [
            (
                "block_bytes = \"48KiB\"",
                "cache.block_bytes",
                "4KiB to 1MiB",
            ),
            (
                "block_bytes = \"2MiB\"",
                "cache.block_bytes",
                "4KiB to 1MiB",
            ),
            (
                "mode = \"write-back\"",
                "cache.mode",
                "writeback, writethrough or writearound",
            ),
            (
                "admission = \"frequency:1\"",
                "cache.admission",
                "frequency:N",
            ),
            (
                "sequential_cutoff_bytes = \"4 parsecs\"",
                "cache.sequential_cutoff_bytes",
                "parsecs",
            ),
        ] {
            let message = error_of(&format!("{HOME}[cache]\n{table}\n"));
            assert!(
                message.contains("test.toml") && message.contains(key) && message.contains(says),
                "{table}: {message}"
            );
        }
        let message = error_of(&format!("{HOME}[cache]\npolicy = \"lru\"\n"));
        assert!(message.contains("policy"), "{message}");
    }

    #[test]
    fn numbers_and_units_both_work() {
        let stack = TierStack::parse(
            "segment_bytes = 1048576\n[[tier]]\nname = \"m\"\ndevice = \"memory\"\ncapacity = \"16MiB\"\nqueue_depth = 4\n[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\ncapacity = 1073741824\n[migration]\nchunk_gap = \"5ms\"\nmax_bandwidth = \"100MB\"\n",
            "inline",
        )
        .unwrap();
        assert_eq!(stack.segment_bytes, 1 << 20);
        assert_eq!(stack.tiers[0].capacity_bytes, Some(16 << 20));
        assert_eq!(stack.tiers[0].queue_depth, 4);
        assert_eq!(stack.tiers[1].capacity_bytes, Some(1 << 30));
        assert_eq!(stack.migration.chunk_gap_ns, 5_000_000);
        assert_eq!(
            stack.migration.max_bandwidth_bytes_per_second,
            Some(100_000_000)
        );
        assert_eq!(stack.migration.chunk_bytes, 1 << 20);
        assert_eq!(stack.name, "inline");
    }

    #[test]
    fn unsafe_volatile_is_for_memory_tiers_and_the_ssd_mem_preset_sets_it() {
        let text = |device: &str| {
            format!(
                "segment_bytes = \"1MiB\"\n[[tier]]\nname = \"fast\"\ndevice = \"{device}\"\ncapacity = \"16MiB\"\nunsafe_volatile = true\n[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n"
            )
        };
        let stack = TierStack::parse(&text("memory"), "inline").unwrap();
        assert!(stack.tiers[0].unsafe_volatile);
        let message = TierStack::parse(&text("x25e"), "inline")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("tier[0].unsafe_volatile")
                && message.contains("only to a memory tier"),
            "{message}"
        );
        assert!(TierStack::preset("ssd-mem").unwrap().tiers[0].unsafe_volatile);
        assert!(!TierStack::preset("hdd-ssd").unwrap().tiers[0].unsafe_volatile);
    }
}
