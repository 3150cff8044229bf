//! `tierd serve` configuration (TOML) and its checks.
//!
//! ```toml
//! data_dir = "tierd-data"            # relative paths are relative to the config file
//! [server]
//! listen = ["unix:tierd.sock"]       # relative socket paths are inside data_dir
//! [[tier]]
//! name = "mem"
//! backend = "memory"
//! size = "256MiB"
//! [[tier]]
//! name = "disk"
//! backend = "file"
//! path = "disk.img"                  # relative to data_dir
//! size = "4GiB"
//! [[volume]]
//! name = "vol0"
//! size = "4GiB"
//! segment = "64MiB"
//! tiers = ["mem", "disk"]            # fastest first; the last is home
//! [volume.policy]
//! kind = "otf-ast"
//! ```
//!
//! Optional TLS for NBD clients (relative paths are inside `data_dir`):
//!
//! ```toml
//! [server.tls]
//! certificate = "/etc/tierd/server-cert.pem"
//! key = "/etc/tierd/server-key.pem"
//! client_ca = "/etc/tierd/ca-cert.pem"   # optional: require client certificates
//! mode = "require"                        # or "optional"
//! ```
//!
//! Every error names the key and what is allowed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use tierd_common::units::{parse_bytes, parse_duration_ns};
use tierd_device::model::DevicePreset;
use tierd_policy::PolicyConfig;

use crate::device::fault::FaultConfig;
use crate::device::io_engine::IoEngineKind;

/// A byte count written as `"64MiB"` or a bare integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(bytes) => Ok(Bytes(bytes)),
            Raw::Text(text) => parse_bytes(&text)
                .map(Bytes)
                .map_err(|error| serde::de::Error::custom(error.to_string())),
        }
    }
}

/// A duration written as `"60s"`, `"500ms"` or a bare number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Duration(pub u64);

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(seconds) if seconds.is_finite() && seconds >= 0.0 => {
                Ok(Duration((seconds * 1e9) as u64))
            }
            Raw::Number(seconds) => Err(serde::de::Error::custom(format!(
                "{seconds} is not a duration; write e.g. \"60s\" or \"500ms\""
            ))),
            Raw::Text(text) => parse_duration_ns(&text)
                .map(Duration)
                .map_err(|error| serde::de::Error::custom(error.to_string())),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where relative tier paths, sockets and metadata live.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Placement journals and checkpoints (default `<data_dir>/meta`).
    #[serde(default)]
    pub metadata_dir: Option<PathBuf>,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(rename = "tier", default)]
    pub tiers: Vec<TierConfig>,
    #[serde(rename = "volume", default)]
    pub volumes: Vec<VolumeConfig>,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from("tierd-data")
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// `unix:PATH` or `tcp:HOST:PORT`.
    #[serde(default = "default_listen")]
    pub listen: Vec<String>,
    /// TCP on a non-loopback address needs this set.
    #[serde(default)]
    pub allow_remote: bool,
    /// Answer NBD_OPT_LIST (export names) to clients.
    #[serde(default = "yes")]
    pub allow_list: bool,
    /// Threads per connection, at most (default 128): each reads a request,
    /// executes it and replies. Started only as requests need them (fast
    /// tiers keep one per connection, slow ones get one per request in
    /// flight); 0 or 1: the connection's own thread alone.
    #[serde(default)]
    pub workers_per_connection: Option<usize>,
    /// NBD connections open at once per listener (each is a thread, plus
    /// those its slow requests start); more are refused.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Connections per listener still in their handshake at once; a new one
    /// beyond this closes the oldest of them, so idle sockets cannot lock
    /// clients out.
    #[serde(default = "default_max_unnegotiated_connections")]
    pub max_unnegotiated_connections: usize,
    /// A connection that has not finished its NBD handshake this long after
    /// it was accepted is closed.
    #[serde(default = "default_handshake_timeout")]
    pub handshake_timeout: Duration,
    /// READ replies and WRITE payloads one connection may hold in memory at
    /// once; beyond it the server stops reading that client's requests.
    /// Also the longest request served (at most 64 MiB).
    #[serde(default = "default_max_in_flight_bytes_per_connection")]
    pub max_in_flight_bytes_per_connection: Bytes,
    /// The same over all connections.
    #[serde(default = "default_max_in_flight_bytes")]
    pub max_in_flight_bytes: Bytes,
    /// On SIGTERM/SIGINT, how long connections get to finish the requests
    /// they are executing before their sockets are closed.
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace: Duration,
    /// TLS for NBD clients (`NBD_OPT_STARTTLS`); off when absent.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

/// Bounds of the `[server]` keys: values beyond them would exhaust the
/// machine (threads, memory) or make a stop take unbounded time.
pub mod server_limits {
    /// Threads per NBD connection executing requests.
    pub const MAX_WORKERS_PER_CONNECTION: usize = 128;
    /// `listen` entries (each is two threads: accept and handshake watchdog).
    pub const MAX_LISTEN_ENTRIES: usize = 16;
    /// Connections per listener (each a thread).
    pub const MAX_CONNECTIONS: usize = 4096;
    /// `handshake_timeout`: from 100 ms to 1 hour.
    pub const MIN_HANDSHAKE_TIMEOUT_NS: u64 = 100_000_000;
    pub const MAX_HANDSHAKE_TIMEOUT_NS: u64 = 3_600_000_000_000;
    /// `max_in_flight_bytes_per_connection`: from 1 MiB (the request limit
    /// follows it) up to `max_in_flight_bytes`.
    pub const MIN_IN_FLIGHT_BYTES_PER_CONNECTION: u64 = 1 << 20;
    /// `shutdown_grace`: at most 10 minutes.
    pub const MAX_SHUTDOWN_GRACE_NS: u64 = 600_000_000_000;
}

fn default_max_connections() -> usize {
    256
}

fn default_max_unnegotiated_connections() -> usize {
    64
}

fn default_handshake_timeout() -> Duration {
    Duration(10_000_000_000)
}

fn default_max_in_flight_bytes_per_connection() -> Bytes {
    Bytes(64 << 20)
}

fn default_max_in_flight_bytes() -> Bytes {
    Bytes(1 << 30)
}

fn default_shutdown_grace() -> Duration {
    Duration(5_000_000_000)
}

impl ServerConfig {
    /// The `[server]` checks: every error names the key, the value and the
    /// limit.
    fn check(&self) -> Result<(), String> {
        use server_limits::*;
        if self.listen.len() > MAX_LISTEN_ENTRIES {
            return Err(format!(
                "server.listen has {} entries: at most {MAX_LISTEN_ENTRIES}",
                self.listen.len()
            ));
        }
        if let Some(workers) = self.workers_per_connection {
            if workers > MAX_WORKERS_PER_CONNECTION {
                return Err(format!(
                    "server.workers_per_connection = {workers}: at most {MAX_WORKERS_PER_CONNECTION} (threads per NBD connection; an emulated tier gets one per request in flight, 128 by default)"
                ));
            }
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS {
            return Err(format!(
                "server.max_connections = {}: must be from 1 to {MAX_CONNECTIONS} (each connection is a thread)",
                self.max_connections
            ));
        }
        if self.max_unnegotiated_connections == 0
            || self.max_unnegotiated_connections > self.max_connections
        {
            return Err(format!(
                "server.max_unnegotiated_connections = {}: must be from 1 to server.max_connections ({})",
                self.max_unnegotiated_connections, self.max_connections
            ));
        }
        let timeout = self.handshake_timeout.0;
        if !(MIN_HANDSHAKE_TIMEOUT_NS..=MAX_HANDSHAKE_TIMEOUT_NS).contains(&timeout) {
            return Err(format!(
                "server.handshake_timeout = {} ms: must be from 100ms to 1h",
                timeout / 1_000_000
            ));
        }
        let per_connection = self.max_in_flight_bytes_per_connection.0;
        let total = self.max_in_flight_bytes.0;
        if per_connection < MIN_IN_FLIGHT_BYTES_PER_CONNECTION {
            return Err(format!(
                "server.max_in_flight_bytes_per_connection = {per_connection}: must be at least {MIN_IN_FLIGHT_BYTES_PER_CONNECTION} (1MiB)"
            ));
        }
        if per_connection > total {
            return Err(format!(
                "server.max_in_flight_bytes_per_connection = {per_connection}: must not exceed server.max_in_flight_bytes ({total})"
            ));
        }
        if let Some(memory) = physical_memory_bytes() {
            if total > memory {
                return Err(format!(
                    "server.max_in_flight_bytes = {total}: more than this machine's memory ({memory} bytes); at most that"
                ));
            }
        }
        if self.shutdown_grace.0 > MAX_SHUTDOWN_GRACE_NS {
            return Err(format!(
                "server.shutdown_grace = {} s: at most 10min",
                self.shutdown_grace.0 / 1_000_000_000
            ));
        }
        Ok(())
    }
}

/// `[server.tls]`: X.509 certificate and key (PEM) for NBD over TLS.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server certificate (then any intermediates), PEM.
    pub certificate: PathBuf,
    /// Its private key, PEM.
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// `"require"` (every client must upgrade before anything else) or
    /// `"optional"` (clients may stay in plain text).
    #[serde(default = "default_tls_mode")]
    pub mode: String,
}

fn default_tls_mode() -> String {
    "require".to_string()
}

fn default_listen() -> Vec<String> {
    vec!["unix:tierd.sock".to_string()]
}

fn yes() -> bool {
    true
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            allow_remote: false,
            allow_list: true,
            workers_per_connection: None,
            max_connections: default_max_connections(),
            max_unnegotiated_connections: default_max_unnegotiated_connections(),
            handshake_timeout: default_handshake_timeout(),
            max_in_flight_bytes_per_connection: default_max_in_flight_bytes_per_connection(),
            max_in_flight_bytes: default_max_in_flight_bytes(),
            shutdown_grace: default_shutdown_grace(),
            tls: None,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `HOST:PORT` for a Prometheus text endpoint (`/metrics`); off when absent.
    #[serde(default)]
    pub listen: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `error`, `warn`, `info` or `debug`.
    #[serde(default = "default_log_level")]
    pub level: String,
    /// `text` (logfmt key=value lines) or `json`.
    #[serde(default = "default_log_format")]
    pub format: String,
}

fn default_log_level() -> String {
    "info".to_string()
}

fn default_log_format() -> String {
    "text".to_string()
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: default_log_level(),
            format: default_log_format(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// RAM: fast and volatile.
    Memory,
    /// A file (created and sized if missing) or a block device.
    File,
}

/// `model_mode` of a tier with a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelMode {
    /// Completions held back to the model's timing.
    #[default]
    Emulate,
    /// No latency added; the model only follows the device.
    Predict,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    pub name: String,
    pub backend: Backend,
    /// For `file`: the file or block device (relative to data_dir).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Capacity (a block device's own size when omitted).
    #[serde(default)]
    pub size: Option<Bytes>,
    /// O_DIRECT for `file`.
    #[serde(default)]
    pub direct: bool,
    /// For `file`: how reads and writes reach the kernel, `"psync"`
    /// (`pread`/`pwrite` on the calling thread) or `"uring"` (a shared
    /// io_uring); unset: [`crate::device::io_engine::DEFAULT_IO_ENGINE`].
    #[serde(default)]
    pub io_engine: Option<IoEngineKind>,
    /// Emulate this device: completions are held back to what the
    /// simulator's model of the preset says (`savvio10k4`, `x25e`, ...).
    /// With `model_file`, it may be left out (the file names the device).
    #[serde(default)]
    pub model: Option<DevicePreset>,
    /// Parameter overrides of the emulated `model`: the keys of the
    /// simulator's `[tier.model]` for the device's kind, e.g.
    /// `{ band_bytes = 31457280 }` (an SMR disk's). Checked at load.
    #[serde(default)]
    pub model_params: Option<toml::Table>,
    /// A device TOML as `tierd model fit` writes it (a tier stack of one
    /// `[[tier]]`: its `device` and `[tier.model]` overrides); relative to
    /// the config file's directory. Read at load.
    #[serde(default)]
    pub model_file: Option<PathBuf>,
    /// The overrides in force, from `model_params` or `model_file`'s
    /// `[tier.model]` (filled in and checked by [`Config::parse`]).
    #[serde(skip)]
    pub model_overrides: Option<toml::Table>,
    /// Memory tier without write-through to home: faster writes, but writes
    /// to segments on it are lost when the process ends. For benchmarks.
    #[serde(default)]
    pub unsafe_volatile: bool,
    /// What the model does: `"emulate"` (default) holds every completion
    /// back to the model's timing; `"predict"` adds no latency and only
    /// tracks what the model predicts the device does (a real SMR disk's
    /// media cache and cleaning, shown by `tierd status`).
    #[serde(default)]
    pub model_mode: ModelMode,
    /// Injected faults (tests and drills).
    #[serde(default)]
    pub faults: Option<FaultConfig>,
    /// A memory tier may be larger than the machine's physical memory (up
    /// to 64 times): it only takes memory as it is written, so a tier that
    /// will never fill can be sized past RAM. Off: such a tier is refused,
    /// because filling it would exhaust the machine's memory.
    #[serde(default)]
    pub allow_overcommit: bool,
    /// Compression and deduplication under the tier's blocks
    /// (`docs/engine/reduce.md`).
    #[serde(default)]
    pub reduce: Option<ReduceConfig>,
    /// Replicas of far-apart, read-together extents in the tier's free
    /// space (paper 003, `docs/replicas.md`): for an HDD tier.
    #[serde(default)]
    pub replicas: Option<ReplicasConfig>,
    /// A drive-managed SMR disk's bands (`docs/engine/smr.md`): a cache
    /// volume over it stages every write and destages whole bands. An
    /// emulated `model = "archive8tb"` tier is SMR without it.
    #[serde(default)]
    pub smr: Option<SmrTierConfig>,
}

/// `smr = { band = "30236672", first_band = "0" }` on a tier: the band
/// geometry of a drive-managed SMR disk (what `tierd model fit` measured).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmrTierConfig {
    /// Bytes per band.
    pub band: Bytes,
    /// Where the first whole band starts (the bytes before it form a short band).
    #[serde(default = "zero_bytes")]
    pub first_band: Bytes,
}

fn zero_bytes() -> Bytes {
    Bytes(0)
}

impl TierConfig {
    /// The tier's SMR band geometry, `(band bytes, first band's offset)`:
    /// its `smr`, else an emulated SMR model's (bands from byte 0).
    /// `None`: not an SMR disk.
    pub fn smr_geometry(&self) -> Option<(u64, u64)> {
        if let Some(smr) = &self.smr {
            return Some((smr.band.0, smr.first_band.0));
        }
        self.smr_model().map(|model| (model.band_bytes, 0))
    }

    /// The emulated model's settings when it is a drive-managed SMR disk:
    /// its preset with the tier's overrides (`model_params` or
    /// `model_file`) applied. `None`: not an emulated SMR disk.
    pub fn smr_model(&self) -> Option<tierd_device::model::smr::SmrConfig> {
        use tierd_device::model::smr::{SmrConfig, SmrOverrides};
        let mut config = SmrConfig::preset(self.model?)?;
        if let Some(table) = &self.model_overrides {
            // Checked when the configuration was loaded.
            if let Ok(overrides) = SmrOverrides::deserialize(table.clone()) {
                overrides.apply(&mut config);
            }
        }
        Some(config)
    }

    /// The emulated device's timing model, `capacity_bytes` addressable
    /// (`None`: the preset's own), with the tier's overrides; `None` when
    /// the tier is not emulated.
    pub fn build_model(
        &self,
        capacity_bytes: Option<u64>,
        seed: u64,
    ) -> Option<Result<Box<dyn tierd_device::DeviceModel>, tierd_device::model::hdd::ConfigError>>
    {
        let preset = self.model?;
        Some(preset.build_with(capacity_bytes, self.model_overrides.clone(), seed))
    }

    /// The bytes the tier presents to its volume: its size, or for a
    /// reduced tier its logical size (given, or what the device holds raw
    /// after the reduction's metadata). `None` when unknown before opening
    /// (a block device's own size) or when `reduce` is invalid (reported by
    /// the check of its keys).
    pub fn presented_size(&self) -> Option<u64> {
        let size = self.size?.0;
        if let Some(replicas) = &self.replicas {
            let options = replicas.options().ok()?;
            return crate::device::replica::presented_bytes(size, options.manager.extent_bytes)
                .ok();
        }
        match &self.reduce {
            None => Some(size),
            Some(reduce) => {
                let options = reduce.options().ok()?;
                crate::device::reduce::plan_geometry(size, &options)
                    .ok()
                    .map(|geometry| geometry.logical_blocks * geometry.block_bytes)
            }
        }
    }
}

/// `replicas = { max_share = "20%", max_copies = 4, contiguous_sequences = true }`
/// on an HDD tier: copies of far-apart extents that are read together, in
/// the tier's free space near where they are read (`docs/replicas.md`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicasConfig {
    /// Most replica space, as a share of the free extents: `"20%"` or 0.2.
    #[serde(default = "default_replicas_share")]
    pub max_share: ShareValue,
    /// Most copies of one extent (1 is FS2's rule).
    #[serde(default = "default_replicas_copies")]
    pub max_copies: u32,
    /// Lay a recurring read sequence (an application start) out
    /// contiguously in sequence order.
    #[serde(default)]
    pub contiguous_sequences: bool,
    /// Unit of allocation tracking, detection and copying (power of two,
    /// 4KiB – 64MiB). Fixed when the tier is made.
    #[serde(default = "default_replicas_extent")]
    pub extent: Bytes,
    /// A group member farther than this from the group's centre gets a copy.
    #[serde(default = "default_replicas_far")]
    pub far: Bytes,
    /// Reads further apart than this end a read session.
    #[serde(default = "default_replicas_session_gap")]
    pub session_gap: Duration,
    /// Sessions a read group must be seen in before it gets replicas.
    #[serde(default = "default_replicas_recurrences")]
    pub min_recurrences: u32,
    /// Copies run once the tier has had no user IO for this long.
    #[serde(default = "default_replicas_idle")]
    pub idle: Duration,
}

/// A share: `"20%"` or a number in 0..=1 (range checked by the caller).
#[derive(Clone, Copy, Debug)]
pub struct ShareValue(pub f64);

impl<'de> Deserialize<'de> for ShareValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ShareValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a percentage (\"20%\") or a fraction (0.2)")
            }
            fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<ShareValue, E> {
                Ok(ShareValue(value))
            }
            fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<ShareValue, E> {
                Ok(ShareValue(value as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<ShareValue, E> {
                Ok(ShareValue(value as f64))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ShareValue, E> {
                let trimmed = text.trim();
                let value = match trimmed.strip_suffix('%') {
                    Some(percent) => percent.trim().parse::<f64>().map(|value| value / 100.0),
                    None => trimmed.parse::<f64>(),
                };
                value.map(ShareValue).map_err(|_| {
                    E::custom(format!(
                        "\"{text}\" is not a share: write a percentage (\"20%\") or a fraction (0.2)"
                    ))
                })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl ShareValue {
    pub fn fraction(self) -> f64 {
        self.0
    }
}

fn default_replicas_share() -> ShareValue {
    ShareValue(0.2)
}
fn default_replicas_copies() -> u32 {
    4
}
fn default_replicas_extent() -> Bytes {
    Bytes(64 << 10)
}
fn default_replicas_far() -> Bytes {
    Bytes(1 << 30)
}
fn default_replicas_session_gap() -> Duration {
    Duration(1_000_000_000)
}
fn default_replicas_recurrences() -> u32 {
    2
}
fn default_replicas_idle() -> Duration {
    Duration(100_000_000)
}

impl ReplicasConfig {
    /// The replica layer's options, or what is wrong (naming the key).
    pub fn options(&self) -> Result<crate::device::replica::ReplicaOptions, String> {
        let extent = self.extent.0;
        if !extent.is_power_of_two() || !(4096..=64 << 20).contains(&extent) {
            return Err(format!(
                "replicas.extent = {extent}: use a power of two from 4KiB to 64MiB"
            ));
        }
        let share = self.max_share.fraction();
        if !(0.0..=1.0).contains(&share) {
            return Err(format!(
                "replicas.max_share = {share}: use a share of the free space from 0 to 100%"
            ));
        }
        if !(1..=64).contains(&self.max_copies) {
            return Err(format!(
                "replicas.max_copies = {}: use 1 to 64",
                self.max_copies
            ));
        }
        if self.min_recurrences == 0 {
            return Err("replicas.min_recurrences = 0: use 1 or more".to_string());
        }
        if self.far.0 < extent {
            return Err(format!(
                "replicas.far = {}: use at least one extent ({extent} bytes)",
                self.far.0
            ));
        }
        let mut options = crate::device::replica::ReplicaOptions::default();
        options.manager.extent_bytes = extent;
        options.manager.max_share = share;
        options.manager.max_copies = self.max_copies;
        options.manager.contiguous_sequences = self.contiguous_sequences;
        options.manager.far_bytes = self.far.0;
        options.manager.session_gap_ns = self.session_gap.0;
        options.manager.min_recurrences = self.min_recurrences;
        options.idle_ns = self.idle.0;
        options
            .manager
            .validate()
            .map_err(|error| format!("replicas: {error}"))?;
        Ok(options)
    }
}

/// `reduce = { block = "4KiB", compress = "lz4", dedup = true, mode = "auto" }`
/// on a tier: the tier stores its blocks reduced (`docs/engine/reduce.md`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReduceConfig {
    /// Reduction unit: a power of two, 4KiB – 64KiB.
    #[serde(default = "default_reduce_block")]
    pub block: Bytes,
    /// Size presented to the volume (default: what the device holds raw
    /// after the reduction's metadata). Larger overcommits the device: a
    /// write that finds it full fails with ENOSPC.
    #[serde(default)]
    pub logical: Option<Bytes>,
    /// `"lz4"` or `"none"`.
    #[serde(default = "default_reduce_compress")]
    pub compress: String,
    #[serde(default = "default_true")]
    pub dedup: bool,
    /// `"inline"`, `"post"` or `"auto"`.
    #[serde(default = "default_reduce_mode")]
    pub mode: String,
    /// `auto`'s rule: `"double"` (paper 004's two thresholds) or `"single"`.
    #[serde(default = "default_reduce_switch")]
    pub switch: String,
    #[serde(default = "default_reduce_t1")]
    pub t1: f64,
    #[serde(default = "default_reduce_t2")]
    pub t2: f64,
    /// The utilisation window the switch decides on.
    #[serde(default = "default_reduce_window")]
    pub window: Duration,
    /// Reduction worker threads (1 – 64).
    #[serde(default = "default_reduce_workers")]
    pub workers: u32,
    /// Memory for the fingerprint index (32 bytes per unique block
    /// remembered, allocated at start; the oldest are forgotten beyond).
    #[serde(default = "default_reduce_index_memory")]
    pub index_memory: Bytes,
    /// Raw bytes that may wait for post-process reduction (default: an
    /// eighth of the device, at most 1GiB); beyond, writes reduce inline.
    #[serde(default)]
    pub stage: Option<Bytes>,
    /// Fragments are appended to packs of this size and written whole.
    #[serde(default = "default_reduce_pack")]
    pub pack: Bytes,
}

fn default_true() -> bool {
    true
}
fn default_reduce_block() -> Bytes {
    Bytes(4096)
}
fn default_reduce_compress() -> String {
    "lz4".to_string()
}
fn default_reduce_mode() -> String {
    "auto".to_string()
}
fn default_reduce_switch() -> String {
    "double".to_string()
}
fn default_reduce_t1() -> f64 {
    tierd_core::reduce::DEFAULT_T1
}
fn default_reduce_t2() -> f64 {
    tierd_core::reduce::DEFAULT_T2
}
fn default_reduce_window() -> Duration {
    Duration(tierd_core::reduce::DEFAULT_WINDOW_NS)
}
fn default_reduce_workers() -> u32 {
    2
}
fn default_reduce_index_memory() -> Bytes {
    Bytes(64 << 20)
}
fn default_reduce_pack() -> Bytes {
    Bytes(128 << 10)
}

/// Memory the fingerprint index takes per entry, for `index_memory`: a
/// fixed table of 32-byte slots allocated at start (see
/// `device::reduce::state::Index`).
pub const INDEX_BYTES_PER_ENTRY: u64 = crate::device::reduce::INDEX_BYTES_PER_ENTRY;

impl ReduceConfig {
    /// The reduced tier's options, or what is wrong (naming the key).
    pub fn options(&self) -> Result<crate::device::reduce::ReduceOptions, String> {
        use tierd_core::reduce::{ModeSetting, SwitchConfig, SwitchRule};
        let setting = match self.mode.as_str() {
            "inline" => ModeSetting::Inline,
            "post" => ModeSetting::Post,
            "auto" => ModeSetting::Auto,
            other => {
                return Err(format!(
                    "reduce.mode = \"{other}\": use \"inline\", \"post\" or \"auto\""
                ))
            }
        };
        let rule = match self.switch.as_str() {
            "double" => SwitchRule::Double,
            "single" => SwitchRule::Single,
            other => {
                return Err(format!(
                    "reduce.switch = \"{other}\": use \"double\" (two thresholds) or \"single\""
                ))
            }
        };
        let compress = match self.compress.as_str() {
            "lz4" => true,
            "none" => false,
            other => {
                return Err(format!(
                    "reduce.compress = \"{other}\": use \"lz4\" or \"none\""
                ))
            }
        };
        if !(1..=64).contains(&self.workers) {
            return Err(format!(
                "reduce.workers = {}: use 1 to 64 reduction threads",
                self.workers
            ));
        }
        Ok(crate::device::reduce::ReduceOptions {
            block_bytes: self.block.0,
            logical_bytes: self.logical.map(|bytes| bytes.0),
            pack_bytes: self.pack.0,
            index_entries: self.index_memory.0 / INDEX_BYTES_PER_ENTRY,
            stage_bytes: self.stage.map(|bytes| bytes.0),
            switch: SwitchConfig {
                setting,
                rule,
                t1: self.t1,
                t2: self.t2,
                window_ns: self.window.0,
            },
            workers: self.workers,
            dedup: self.dedup,
            compress,
        })
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeConfig {
    pub name: String,
    pub size: Bytes,
    /// Power of two, 1 MiB – 4 GiB.
    #[serde(default = "default_segment")]
    pub segment: Bytes,
    /// Tier names, fastest first; the last is home.
    pub tiers: Vec<String>,
    /// Monitor period: the policy plans at the end of each.
    #[serde(default = "default_period")]
    pub period: Duration,
    /// Migration copy unit (power of two, ≤ segment).
    #[serde(default = "default_chunk")]
    pub chunk: Bytes,
    /// Largest fraction of time the migration copier may keep a device busy
    /// (0 < share ≤ 1): after each chunk it pauses so copy time / wall time ≤ share.
    #[serde(default = "default_share")]
    pub migration_share: f64,
    /// Optional cap on copy bandwidth.
    #[serde(default)]
    pub migration_max_rate: Option<Bytes>,
    /// Chunks of one move copied at the same time (one copier thread each).
    #[serde(default = "default_chunks_in_flight")]
    pub migration_chunks_in_flight: u32,
    /// Moves copying at the same time.
    #[serde(default = "default_concurrent_moves")]
    pub max_concurrent_moves: u32,
    /// Write a checkpoint (policy state, placement) every this many periods.
    #[serde(default = "default_checkpoint_every")]
    pub checkpoint_every: u32,
    /// The tiering policy (`[volume.policy]`). Left out on a volume of two
    /// tiers without `cache`, the volume is a cache volume with the
    /// `adaptive` policy (see [`Config::apply_default_placement`]); left
    /// out otherwise: `none`.
    #[serde(default)]
    pub policy: Option<PolicyConfig>,
    /// Makes this a cache volume: `tier` (one of `tiers`, not home) is used
    /// wholly as a block cache over home (`docs/engine/cache.md`).
    #[serde(default)]
    pub cache: Option<CacheConfig>,
    /// The `cache` was not written but is the default placement of a
    /// two-tier volume (`adaptive`); errors about it say so.
    #[serde(skip)]
    pub default_cache: bool,
}

impl VolumeConfig {
    /// The tiering policy: as written, or `none`.
    pub fn policy(&self) -> PolicyConfig {
        self.policy.clone().unwrap_or(PolicyConfig::None)
    }
}

/// `[[volume]] cache = { tier = "ssd", block = "64KiB", mode = "writeback", ... }`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// The tier used as the cache (one of the volume's `tiers`, not the last).
    pub tier: String,
    /// Cache block: a power of two from 4KiB to 1MiB.
    #[serde(default = "default_cache_block")]
    pub block: Bytes,
    /// `writeback`, `writethrough` or `writearound`.
    #[serde(default = "default_cache_mode")]
    pub mode: String,
    /// Eviction order: `fifo`, `lru`, `arc` or `s3fifo`; or `adaptive`: the
    /// eviction order of the simulator's `adaptive` policy with adaptive
    /// admission (docs/policies/adaptive.md). Unset: `adaptive`, or with
    /// a fixed `admission`, `adaptive`'s eviction order (ARC) with it.
    #[serde(default)]
    pub policy: Option<String>,
    /// `always`, `frequency`, `frequency:N` (admit on the N-th miss) or
    /// `adaptive`; unset: `adaptive` with `policy = "adaptive"` or no
    /// policy, else `always`.
    #[serde(default)]
    pub admission: Option<String>,
    /// Misses of a sequential run at least this long bypass the cache; 0 = off.
    #[serde(default = "default_sequential_cutoff")]
    pub sequential_cutoff: Bytes,
    /// Writeback starts above this share of dirty slots (percent) ...
    #[serde(default = "default_dirty_high_percent")]
    pub dirty_high_percent: u8,
    /// ... and goes on down to this one.
    #[serde(default = "default_dirty_low_percent")]
    pub dirty_low_percent: u8,
    /// No user IO for this long: the devices count as idle and writeback
    /// runs eagerly.
    #[serde(default = "default_writeback_idle")]
    pub writeback_idle: Duration,
    /// Pending mapping changes are committed (journaled) at least this often.
    #[serde(default = "default_commit_interval")]
    pub commit_interval: Duration,
    /// Over an SMR home (a tier with `smr` or an SMR `model`): stage every
    /// write and destage whole bands (`docs/engine/smr.md`). Unset: on
    /// over an SMR home; `false`: per-block writeback as over any home.
    #[serde(default)]
    pub smr_staging: Option<bool>,
    /// SMR staging: home counts as idle for a background band rewrite
    /// after no user IO for this long.
    #[serde(default = "default_smr_idle")]
    pub smr_idle: Duration,
}

fn default_smr_idle() -> Duration {
    Duration(tierd_core::cache::DEFAULT_DESTAGE_IDLE_NS)
}

/// The default cache block over an SMR home: the largest power of two up
/// to the default that divides the band and the first band's offset (the
/// Archive 8 TB's 30,236,672-byte bands: 8 KiB). 4 KiB when none does (the
/// check then says the band cannot be staged).
fn smr_cache_block(band_bytes: u64, first_band_bytes: u64) -> Bytes {
    let mut block = default_cache_block().0;
    while block > tierd_core::cache::MIN_BLOCK_BYTES
        && !(band_bytes.is_multiple_of(block) && first_band_bytes.is_multiple_of(block))
    {
        block /= 2;
    }
    Bytes(block)
}

/// 64 KiB: 16 Ki mapping entries per GiB of cache tier, and a partial-block
/// write miss merges at most 64 KiB from home.
fn default_cache_block() -> Bytes {
    Bytes(64 << 10)
}

fn default_cache_mode() -> String {
    "writeback".to_string()
}

fn default_sequential_cutoff() -> Bytes {
    Bytes(tierd_core::cache::DEFAULT_SEQUENTIAL_CUTOFF_BYTES)
}

fn default_dirty_high_percent() -> u8 {
    tierd_core::cache::DEFAULT_DIRTY_HIGH_PERCENT
}

fn default_dirty_low_percent() -> u8 {
    tierd_core::cache::DEFAULT_DIRTY_LOW_PERCENT
}

fn default_writeback_idle() -> Duration {
    Duration(100_000_000)
}

fn default_commit_interval() -> Duration {
    Duration(1_000_000_000)
}

impl CacheConfig {
    /// The engine's options; errors name the key (`KEY.cache.mode = ...`).
    pub fn options(&self, key: &str) -> Result<crate::volume::CacheOptions, String> {
        use tierd_core::cache::{AdmissionKind, CacheMode};
        use tierd_policy::cache::CacheKind;
        let mode = CacheMode::parse(&self.mode)
            .map_err(|error| format!("{key}.cache.mode = {:?}: {error}", self.mode))?;
        let written = self.policy.as_deref();
        // No policy and no admission: `adaptive`; no policy with a fixed
        // admission: adaptive's eviction order with that rule.
        let name = written.unwrap_or(if self.admission.is_some() {
            "arc"
        } else {
            "adaptive"
        });
        let policy = match name {
            "fifo" => CacheKind::Fifo,
            "lru" => CacheKind::Lru,
            "arc" => CacheKind::Arc,
            "s3fifo" => CacheKind::S3fifo,
            "adaptive" => tierd_core::cache::adaptive::EVICTION,
            other => {
                return Err(format!(
                    "{key}.cache.policy = {other:?}: expected fifo, lru, arc, s3fifo or adaptive"
                ))
            }
        };
        let adaptive = name == "adaptive";
        let admission = match &self.admission {
            Some(text) => AdmissionKind::parse(text)
                .map_err(|error| format!("{key}.cache.admission = {text:?}: {error}"))?,
            None if adaptive => AdmissionKind::Adaptive,
            None => AdmissionKind::Always,
        };
        if adaptive && admission != AdmissionKind::Adaptive {
            return Err(format!(
                "{key}.cache.admission = {:?}: policy \"adaptive\" chooses its own admission; leave admission out (or set a fixed eviction policy, e.g. \"arc\", to use this rule)",
                admission.to_string()
            ));
        }
        let block = self.block.0;
        if !block.is_power_of_two()
            || !(tierd_core::cache::MIN_BLOCK_BYTES..=tierd_core::cache::MAX_BLOCK_BYTES)
                .contains(&block)
        {
            return Err(format!(
                "{key}.cache.block = {block}: must be a power of two from 4KiB to 1MiB"
            ));
        }
        if !(self.dirty_low_percent < self.dirty_high_percent && self.dirty_high_percent <= 100) {
            return Err(format!(
                "{key}.cache.dirty_low_percent = {} and dirty_high_percent = {}: expected 0 <= low < high <= 100",
                self.dirty_low_percent, self.dirty_high_percent
            ));
        }
        if self.smr_idle.0 > 3_600_000_000_000 {
            return Err(format!(
                "{key}.cache.smr_idle = {} s: at most 1h",
                self.smr_idle.0 / 1_000_000_000
            ));
        }
        if self.commit_interval.0 < 1_000_000 || self.commit_interval.0 > 60_000_000_000 {
            return Err(format!(
                "{key}.cache.commit_interval = {} ms: must be from 1ms to 60s",
                self.commit_interval.0 / 1_000_000
            ));
        }
        let mut options = crate::volume::CacheOptions::new(&self.tier, block, mode);
        options.policy = policy;
        options.admission = admission;
        options.sequential_cutoff_bytes = self.sequential_cutoff.0;
        options.dirty_high_percent = self.dirty_high_percent;
        options.dirty_low_percent = self.dirty_low_percent;
        options.writeback_idle_ns = self.writeback_idle.0;
        options.commit_interval_ns = self.commit_interval.0;
        options.destage_idle_ns = self.smr_idle.0;
        Ok(options)
    }
}

fn default_segment() -> Bytes {
    Bytes(1 << 30)
}

fn default_period() -> Duration {
    Duration(60_000_000_000)
}

/// 256 KiB: a write to the chunk being copied waits for one chunk copy, so
/// the chunk bounds that stall (1 MiB chunks held their lock up to 17 ms on
/// a loaded 2-core VM; see BENCHMARKS.md).
fn default_chunk() -> Bytes {
    Bytes(256 << 10)
}

fn default_share() -> f64 {
    0.5
}

fn default_checkpoint_every() -> u32 {
    1
}

/// Most segments a volume may have: the checkpoint holds a placement entry
/// per segment and is rewritten every `checkpoint_every` periods (about
/// 26 bytes each: 1 Mi segments make a 26 MiB checkpoint); past 40 Mi the
/// checkpoint outgrows what recovery reads (1 GiB) and the next start fails.
pub const MAX_SEGMENTS_PER_VOLUME: u64 = 1 << 20;
/// Largest migration chunk: the copier holds a buffer of one chunk and
/// writes to that chunk wait while it is copied.
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;
/// Longest policy period: the monitor's period arithmetic stays far from
/// overflow, and a policy that never runs is no policy.
pub const MAX_PERIOD_NS: u64 = 7 * 86_400 * 1_000_000_000;
/// Slowest `migration_max_rate`: below it one 256 KiB chunk takes over 4 s
/// and a 1 GiB segment over 4 hours; omit the key for no cap.
pub const MIN_MIGRATION_RATE_BYTES: u64 = 64 << 10;
fn default_chunks_in_flight() -> u32 {
    4
}

fn default_concurrent_moves() -> u32 {
    1
}

/// Most `migration_chunks_in_flight` and `max_concurrent_moves` (their
/// product is the number of copier threads of a volume).
pub const MAX_CHUNKS_IN_FLIGHT: u32 = 32;
pub const MAX_CONCURRENT_MOVES: u32 = 16;

/// Smallest `migration_share` (the copier's pacing floor).
pub const MIN_MIGRATION_SHARE: f64 = 0.001;
/// How far past physical memory `allow_overcommit` lets memory tiers go.
pub const MAX_OVERCOMMIT_FACTOR: u64 = 64;

/// The machine's physical memory in bytes, `None` when it cannot be read.
pub fn physical_memory_bytes() -> Option<u64> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, page_bytes) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let pages = u64::try_from(pages).ok().filter(|pages| *pages > 0)?;
    let page_bytes = u64::try_from(page_bytes).ok().filter(|bytes| *bytes > 0)?;
    pages.checked_mul(page_bytes)
}

/// A configuration problem, naming the file and the key.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

/// The configuration `tierd serve` runs with no `--config`: a 1 GiB volume
/// of a 256 MiB memory tier over a 1 GiB file tier in `./tierd-data`, the
/// memory tier an `adaptive` write-through cache (the default placement).
pub const EMBEDDED_DEFAULT: &str = r#"# tierd's embedded default configuration
data_dir = "tierd-data"

[server]
listen = ["unix:tierd.sock"]

[[tier]]
name = "mem"
backend = "memory"
size = "256MiB"

[[tier]]
name = "disk"
backend = "file"
path = "disk.img"
size = "1GiB"

[[volume]]
name = "vol0"
size = "1GiB"
segment = "64MiB"
tiers = ["mem", "disk"]
period = "10s"
# No [volume.policy] and no cache: a volume of one fast tier over home is a
# cache volume with the `adaptive` policy (docs/policies/adaptive.md),
# written through because "mem" is memory. For segment tiering instead:
#   [volume.policy]
#   kind = "otf-ast"
"#;

impl Config {
    /// Parses and checks `text`; relative paths are resolved against `base_dir`
    /// (the config file's directory, or the working directory).
    pub fn parse(text: &str, file: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|error| ConfigError {
            file: file.to_string(),
            message: format!("{error}"),
        })?;
        config
            .confine_relative_paths()
            .map_err(|message| ConfigError {
                file: file.to_string(),
                message,
            })?;
        if config.data_dir.is_relative() {
            config.data_dir = base_dir.join(&config.data_dir);
        }
        if let Some(metadata_dir) = &config.metadata_dir {
            if metadata_dir.is_relative() {
                config.metadata_dir = Some(config.data_dir.join(metadata_dir));
            }
        }
        if let Some(tls) = &mut config.server.tls {
            let data_dir = &config.data_dir;
            let resolve = |path: &mut PathBuf| {
                if path.is_relative() {
                    *path = data_dir.join(&*path);
                }
            };
            resolve(&mut tls.certificate);
            resolve(&mut tls.key);
            if let Some(client_ca) = &mut tls.client_ca {
                resolve(client_ca);
            }
        }
        for tier in &mut config.tiers {
            if let Some(path) = &tier.path {
                if path.is_relative() {
                    tier.path = Some(config.data_dir.join(path));
                }
            }
            // A model file is configuration, not data: beside the config
            // file (where `tierd model fit ... --out FILE` is run).
            if let Some(path) = &tier.model_file {
                if path.is_relative() {
                    tier.model_file = Some(base_dir.join(path));
                }
            }
        }
        config.resolve_models(text).map_err(|message| ConfigError {
            file: file.to_string(),
            message,
        })?;
        config.apply_default_placement();
        config.check().map_err(|message| ConfigError {
            file: file.to_string(),
            message,
        })?;
        Ok(config)
    }

    /// The default placement of a volume that names neither a policy nor
    /// a cache: on two tiers (one fast tier over home), a cache volume
    /// with the `adaptive` policy on the fast tier (`docs/policies/adaptive.md`):
    /// writeback on a file tier, writethrough on a memory tier (its dirty
    /// blocks would be lost at a crash) unless the tier is
    /// `unsafe_volatile`. A fast tier too small for two 64 KiB blocks, and
    /// a stack of one or three or more tiers, keep `none`. A volume that
    /// was tiered before and has segments on its fast tier is refused at
    /// start with what to write to keep it tiered (`Volume::open_with_cache`).
    fn apply_default_placement(&mut self) {
        for volume in &mut self.volumes {
            if volume.policy.is_some() || volume.cache.is_some() || volume.tiers.len() != 2 {
                continue;
            }
            let Some(tier) = self.tiers.iter().find(|tier| tier.name == volume.tiers[0]) else {
                continue;
            };
            if tier
                .presented_size()
                .is_some_and(|size| size / default_cache_block().0 < 2)
            {
                continue;
            }
            let volatile = tier.backend == Backend::Memory && !tier.unsafe_volatile;
            // Over an SMR home the block must divide its bands.
            let home = self.tiers.iter().find(|home| home.name == volume.tiers[1]);
            let block = match home.and_then(TierConfig::smr_geometry) {
                Some((band, first)) => smr_cache_block(band, first),
                None => default_cache_block(),
            };
            volume.cache = Some(CacheConfig {
                tier: tier.name.clone(),
                block,
                mode: if volatile {
                    "writethrough".to_string()
                } else {
                    default_cache_mode()
                },
                policy: Some("adaptive".to_string()),
                admission: None,
                sequential_cutoff: default_sequential_cutoff(),
                dirty_high_percent: default_dirty_high_percent(),
                dirty_low_percent: default_dirty_low_percent(),
                writeback_idle: default_writeback_idle(),
                commit_interval: default_commit_interval(),
                smr_staging: None,
                smr_idle: default_smr_idle(),
            });
            volume.default_cache = true;
        }
    }

    /// Relative paths are inside `data_dir` (or, for `data_dir` itself, the
    /// config file's directory) and may not climb out of it with `..`: a
    /// tier, socket or metadata path elsewhere must be written absolute, so
    /// what a config can reach is visible in it.
    fn confine_relative_paths(&self) -> Result<(), String> {
        fn check(key: &str, path: &Path) -> Result<(), String> {
            let climbs = path
                .components()
                .any(|component| component == std::path::Component::ParentDir);
            if path.is_relative() && climbs {
                return Err(format!(
                    "{key} = {:?}: a relative path may not leave its directory with \"..\"; write an absolute path to use a file, device or directory elsewhere",
                    path.display().to_string()
                ));
            }
            Ok(())
        }
        check("data_dir", &self.data_dir)?;
        if let Some(metadata_dir) = &self.metadata_dir {
            check("metadata_dir", metadata_dir)?;
        }
        for (index, tier) in self.tiers.iter().enumerate() {
            if let Some(path) = &tier.path {
                check(&format!("tier[{index}] (name {:?}).path", tier.name), path)?;
            }
            if let Some(path) = &tier.model_file {
                check(
                    &format!("tier[{index}] (name {:?}).model_file", tier.name),
                    path,
                )?;
            }
        }
        for entry in &self.server.listen {
            if let Some(path) = entry.strip_prefix("unix:") {
                check("server.listen", Path::new(path))?;
            }
        }
        if let Some(tls) = &self.server.tls {
            check("server.tls.certificate", &tls.certificate)?;
            check("server.tls.key", &tls.key)?;
            if let Some(client_ca) = &tls.client_ca {
                check("server.tls.client_ca", client_ca)?;
            }
        }
        Ok(())
    }

    /// Fills in each emulated tier's `model_overrides` from its
    /// `model_params` or `model_file` (and its `model` from the file when
    /// left out), and checks them against the device's model: errors name
    /// the key, its line in `text` (and the model file's), and what to do.
    fn resolve_models(&mut self, text: &str) -> Result<(), String> {
        /// Where each tier's model keys are written (for messages only).
        #[derive(Deserialize)]
        struct Lines {
            #[serde(default)]
            tier: Vec<TierLines>,
        }
        #[derive(Deserialize)]
        struct TierLines {
            #[serde(default)]
            model: Option<toml::Spanned<serde::de::IgnoredAny>>,
            #[serde(default)]
            model_params: Option<toml::Spanned<serde::de::IgnoredAny>>,
            #[serde(default)]
            model_file: Option<toml::Spanned<serde::de::IgnoredAny>>,
        }
        let lines: Vec<TierLines> = toml::from_str::<Lines>(text)
            .map(|lines| lines.tier)
            .unwrap_or_default();
        let line_of = |index: usize, pick: fn(&TierLines) -> Option<std::ops::Range<usize>>| {
            lines
                .get(index)
                .and_then(pick)
                .map(|span| format!(" (line {})", line_at(text, span.start)))
                .unwrap_or_default()
        };
        for (index, tier) in self.tiers.iter_mut().enumerate() {
            let key = format!("tier[{index}] (name {:?})", tier.name);
            let params_at = line_of(index, |lines| lines.model_params.as_ref().map(|s| s.span()));
            let file_at = line_of(index, |lines| lines.model_file.as_ref().map(|s| s.span()));
            let (overrides, place) = match (&tier.model_params, &tier.model_file) {
                (None, None) => continue,
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "{key}: model_params{params_at} and model_file{file_at} are both given; use one: model_file for the device TOML `tierd model fit` wrote, or model_params for overrides written here"
                    ))
                }
                (Some(params), None) => {
                    if tier.model.is_none() {
                        return Err(format!(
                            "{key}.model_params{params_at}: overrides need the `model` they apply to, e.g. model = \"archive8tb\" (or use model_file, which names its device)"
                        ));
                    }
                    (params.clone(), format!("{key}.model_params{params_at}"))
                }
                (None, Some(path)) => {
                    let shown = format!("{key}.model_file = {:?}{file_at}", path.display().to_string());
                    let model_file = read_model_file(path).map_err(|error| format!("{shown}: {error}"))?;
                    match tier.model {
                        Some(model) if model != model_file.device => {
                            let model_at = line_of(index, |lines| lines.model.as_ref().map(|s| s.span()));
                            return Err(format!(
                                "{key}.model = {:?}{model_at}: the model file {} is of device {:?}; leave `model` out (the file names the device) or make them agree",
                                model.name(),
                                path.display(),
                                model_file.device.name()
                            ));
                        }
                        _ => tier.model = Some(model_file.device),
                    }
                    let Some(table) = model_file.overrides else {
                        // A file without overrides: the preset as it is.
                        continue;
                    };
                    let place = format!(
                        "{shown}: {} line {} [tier.model]",
                        path.display(),
                        model_file.overrides_line
                    );
                    (table, place)
                }
            };
            let Some(preset) = tier.model else {
                continue;
            };
            if overrides.contains_key("capacity_bytes") {
                return Err(format!(
                    "{place}: capacity_bytes: an emulated model addresses exactly the tier's bytes; remove the key and set the tier's `size` (a block device's own size when omitted)"
                ));
            }
            // A model built with them checks every key and value.
            let capacity = tier.size.map(|size| size.0);
            let build = |overrides: toml::Table| preset.build_with(capacity, Some(overrides), 1);
            if let Err(error) = build(overrides.clone()) {
                // Name the key at fault: the first that fails alone.
                let (name, error) = overrides
                    .iter()
                    .find_map(|(name, value)| {
                        let alone = toml::Table::from_iter([(name.clone(), value.clone())]);
                        build(alone).err().map(|error| (name.as_str(), error))
                    })
                    .unwrap_or(("", error));
                // serde's messages may run over lines.
                let reason = error
                    .reason
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                return Err(if error.key == "model" {
                    let (kind, doc) = model_kind(preset);
                    format!(
                        "{place}: {name}: {reason}; {} is {kind} model, whose settings and their units are in {doc} (the keys the simulator's [tier.model] takes for it)",
                        preset.name(),
                    )
                } else {
                    format!("{place}: {}: {reason}", error.key)
                });
            }
            tier.model_overrides = Some(overrides);
        }
        Ok(())
    }

    /// Loads the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError {
            file: path.display().to_string(),
            message: format!("cannot read the configuration: {error}"),
        })?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, &path.display().to_string(), base_dir)
    }

    pub fn metadata_dir(&self) -> PathBuf {
        self.metadata_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("meta"))
    }

    /// A listen entry's socket path or TCP address.
    pub fn listen_targets(&self) -> Vec<ListenTarget> {
        self.server
            .listen
            .iter()
            .filter_map(|entry| parse_listen(entry, &self.data_dir).ok())
            .collect()
    }

    fn check(&self) -> Result<(), String> {
        if self.volumes.is_empty() {
            return Err("no [[volume]]: define at least one volume".to_string());
        }
        if self.server.listen.is_empty() {
            return Err(
                "server.listen is empty: give at least one \"unix:PATH\" or \"tcp:HOST:PORT\""
                    .to_string(),
            );
        }
        for entry in &self.server.listen {
            let target = parse_listen(entry, &self.data_dir)?;
            if let ListenTarget::Tcp(address) = &target {
                if !self.server.allow_remote && !is_loopback(address) {
                    return Err(format!(
                        "server.listen = {entry:?} is not a loopback address; tierd listens on loopback only unless server.allow_remote = true"
                    ));
                }
            }
        }
        self.server.check()?;
        if let Some(tls) = &self.server.tls {
            if tls.mode != "require" && tls.mode != "optional" {
                return Err(format!(
                    "server.tls.mode = {:?}: allowed are \"require\" (clients must use TLS) and \"optional\"",
                    tls.mode
                ));
            }
        }
        if let Some(address) = &self.metrics.listen {
            if !is_loopback(address) && !self.server.allow_remote {
                return Err(format!(
                    "metrics.listen = {address:?} is not a loopback HOST:PORT; metrics are served on loopback only unless server.allow_remote = true"
                ));
            }
        }
        if !["error", "warn", "info", "debug"].contains(&self.log.level.as_str()) {
            return Err(format!(
                "log.level = {:?}: allowed are \"error\", \"warn\", \"info\", \"debug\"",
                self.log.level
            ));
        }
        if !["text", "json"].contains(&self.log.format.as_str()) {
            return Err(format!(
                "log.format = {:?}: allowed are \"text\" and \"json\"",
                self.log.format
            ));
        }
        self.check_machine_limits(physical_memory_bytes())?;
        let mut seen = std::collections::BTreeSet::new();
        for (index, tier) in self.tiers.iter().enumerate() {
            let key = format!("tier[{index}] (name {:?})", tier.name);
            if !valid_name(&tier.name) {
                return Err(format!(
                    "{key}: name must be 1-64 characters of a-z, A-Z, 0-9, '-', '_', '.', and not \".\" or \"..\""
                ));
            }
            if !seen.insert(tier.name.clone()) {
                return Err(format!("{key}: a tier with this name is already defined"));
            }
            match tier.backend {
                Backend::Memory => {
                    if tier.path.is_some() {
                        return Err(format!("{key}.path: a memory tier has no path"));
                    }
                    if tier.size.is_none() {
                        return Err(format!(
                            "{key}.size: a memory tier needs a size, e.g. \"256MiB\""
                        ));
                    }
                    if tier.direct {
                        return Err(format!("{key}.direct: only file tiers can use O_DIRECT"));
                    }
                    if tier.io_engine.is_some() {
                        return Err(format!(
                            "{key}.io_engine: only file tiers do IO through an engine; remove the key"
                        ));
                    }
                }
                Backend::File => {
                    if tier.path.is_none() {
                        return Err(format!(
                            "{key}.path: a file tier needs a path (file or block device)"
                        ));
                    }
                    if tier.unsafe_volatile {
                        return Err(format!(
                            "{key}.unsafe_volatile: only memory tiers are volatile"
                        ));
                    }
                }
            }
            if tier.size.is_some_and(|size| size.0 == 0) {
                return Err(format!("{key}.size: must be more than 0"));
            }
            if tier.model_mode == ModelMode::Predict && tier.model.is_none() {
                return Err(format!(
                    "{key}.model_mode = \"predict\": needs the model to predict with (`model`, or `model_file` from `tierd model fit`)"
                ));
            }
            if let Some(smr) = &tier.smr {
                if smr.band.0 < 1 << 20 || smr.band.0 % 4096 != 0 {
                    return Err(format!(
                        "{key}.smr.band = {}: a band is a multiple of 4KiB and at least 1MiB (drive-managed SMR disks have bands of tens of MiB; `tierd model fit` measures yours)",
                        smr.band.0
                    ));
                }
                if smr.first_band.0 % 4096 != 0 {
                    return Err(format!(
                        "{key}.smr.first_band = {}: must be a multiple of 4KiB",
                        smr.first_band.0
                    ));
                }
                let modelled = tier.smr_model().map(|model| model.band_bytes);
                if let Some(model_band) = modelled.filter(|&band| band != smr.band.0) {
                    return Err(format!(
                        "{key}.smr.band = {}: the emulated model {:?} (with its model_params or model_file) has bands of {model_band} bytes; leave `smr` out to use the model's",
                        smr.band.0,
                        tier.model.map(|model| model.name()).unwrap_or_default()
                    ));
                }
            }
            if let Some(reduce) = &tier.reduce {
                let options = reduce.options().map_err(|error| format!("{key}.{error}"))?;
                options
                    .switch
                    .validate(tierd_core::reduce::DEFAULT_POST_WORK_RATIO)
                    .map_err(|error| format!("{key}.reduce: {error}"))?;
                if let Some(size) = tier.size {
                    crate::device::reduce::plan_geometry(size.0, &options)
                        .map_err(|error| format!("{key}.reduce: {error}"))?;
                }
            }
            if let Some(replicas) = &tier.replicas {
                let options = replicas
                    .options()
                    .map_err(|error| format!("{key}.{error}"))?;
                if tier.reduce.is_some() {
                    return Err(format!(
                        "{key}: `replicas` and `reduce` on one tier: replicas are copies in an HDD's free \
                         space, reduction is for flash; use one of them"
                    ));
                }
                if tier.backend == Backend::Memory {
                    return Err(format!(
                        "{key}.replicas: a memory tier has no seeks to save; put replicas on an HDD \
                         tier (a file tier, emulated with `model = \"wd1200jb\"` or another disk)"
                    ));
                }
                if let Some(size) = tier.size {
                    crate::device::replica::presented_bytes(size.0, options.manager.extent_bytes)
                        .map_err(|error| format!("{key}.replicas: {error}"))?;
                }
            }
            if tier.allow_overcommit && tier.backend != Backend::Memory {
                return Err(format!(
                    "{key}.allow_overcommit: only memory tiers take memory"
                ));
            }
            if let Some(faults) = &tier.faults {
                faults
                    .validate()
                    .map_err(|error| format!("{key}.faults.{error}"))?;
            }
        }
        let mut volume_names = std::collections::BTreeSet::new();
        let mut tier_owner: std::collections::BTreeMap<&str, &str> = Default::default();
        for (index, volume) in self.volumes.iter().enumerate() {
            let key = format!("volume[{index}] (name {:?})", volume.name);
            if !valid_name(&volume.name) {
                return Err(format!("{key}: name must be 1-64 characters of a-z, A-Z, 0-9, '-', '_', '.', and not \".\" or \"..\" (it names the export and a metadata directory)"));
            }
            if !volume_names.insert(volume.name.clone()) {
                return Err(format!("{key}: a volume with this name is already defined"));
            }
            let segment = volume.segment.0;
            if !segment.is_power_of_two() || !((1 << 20)..=(4 << 30)).contains(&segment) {
                return Err(format!(
                    "{key}.segment = {segment}: must be a power of two from 1MiB to 4GiB"
                ));
            }
            let chunk = volume.chunk.0;
            if !chunk.is_power_of_two() || chunk < 4096 || chunk > segment.min(MAX_CHUNK_BYTES) {
                return Err(format!("{key}.chunk = {chunk}: must be a power of two from 4KiB up to the segment size and at most 64MiB (the copier buffers one chunk, and writes to it wait while it is copied)"));
            }
            if volume.size.0 == 0 || volume.size.0 % 512 != 0 {
                return Err(format!(
                    "{key}.size = {}: must be a positive multiple of 512 bytes",
                    volume.size.0
                ));
            }
            let segments = volume.size.0.div_ceil(segment);
            if segments > MAX_SEGMENTS_PER_VOLUME {
                return Err(format!(
                    "{key}.size = {}: {segments} segments of {segment} bytes, more than the {MAX_SEGMENTS_PER_VOLUME} a volume may have (the checkpoint rewritten every period holds one entry per segment); use a larger segment",
                    volume.size.0
                ));
            }
            if volume.period.0 < 1_000_000 || volume.period.0 > MAX_PERIOD_NS {
                return Err(format!(
                    "{key}.period = {} ns: must be from 1ms to 7 days",
                    volume.period.0
                ));
            }
            if !(volume.migration_share >= MIN_MIGRATION_SHARE && volume.migration_share <= 1.0) {
                return Err(format!(
                    "{key}.migration_share = {}: must be from {MIN_MIGRATION_SHARE} to 1",
                    volume.migration_share
                ));
            }
            if let Some(rate) = volume
                .migration_max_rate
                .filter(|rate| rate.0 < MIN_MIGRATION_RATE_BYTES)
            {
                return Err(format!(
                    "{key}.migration_max_rate = {}: must be at least 64KiB (bytes per second; below it a 1GiB segment takes hours to move); omit the key for no cap",
                    rate.0
                ));
            }
            if !(1..=MAX_CHUNKS_IN_FLIGHT).contains(&volume.migration_chunks_in_flight) {
                return Err(format!(
                    "{key}.migration_chunks_in_flight = {}: must be from 1 to {MAX_CHUNKS_IN_FLIGHT} (each is a copier thread and a chunk buffer)",
                    volume.migration_chunks_in_flight
                ));
            }
            if !(1..=MAX_CONCURRENT_MOVES).contains(&volume.max_concurrent_moves) {
                return Err(format!(
                    "{key}.max_concurrent_moves = {}: must be from 1 to {MAX_CONCURRENT_MOVES}",
                    volume.max_concurrent_moves
                ));
            }
            let policy_check = match &volume.policy() {
                PolicyConfig::None => Ok(()),
                PolicyConfig::OtfAst(policy) => policy.validate(),
                PolicyConfig::Atsmf(policy) => policy.validate(),
            };
            policy_check.map_err(|error| format!("{key}.policy.{error}"))?;
            if volume.checkpoint_every == 0 {
                return Err(format!(
                    "{key}.checkpoint_every: must be at least 1 (periods)"
                ));
            }
            if volume.tiers.is_empty() || volume.tiers.len() > 8 {
                return Err(format!(
                    "{key}.tiers: list 1 to 8 tier names, fastest first (the last is home)"
                ));
            }
            if let Some(cache) = &volume.cache {
                self.check_cache(&key, volume, cache)?;
            }
            for (position, name) in volume.tiers.iter().enumerate() {
                let Some(tier) = self.tiers.iter().find(|tier| &tier.name == name) else {
                    let known: Vec<&str> =
                        self.tiers.iter().map(|tier| tier.name.as_str()).collect();
                    return Err(format!("{key}.tiers[{position}] = {name:?}: no [[tier]] has this name (defined: {known:?})"));
                };
                if let Some(owner) = tier_owner.insert(name, &volume.name) {
                    return Err(format!("{key}.tiers[{position}] = {name:?}: tier already used by volume {owner:?}; give each volume its own tiers"));
                }
                let is_home = position + 1 == volume.tiers.len();
                if is_home {
                    if tier.backend == Backend::Memory {
                        return Err(format!("{key}.tiers[{position}] = {name:?}: the last tier is home and holds every segment durably; a memory tier cannot be home"));
                    }
                    if let Some(size) = tier.presented_size() {
                        // No overflow: segments ≤ 2^20 and segment ≤ 4 GiB.
                        let needed = segments * segment;
                        if size < needed {
                            let what = if tier.reduce.is_some() {
                                "logical size (reduce.logical)"
                            } else {
                                "size"
                            };
                            return Err(format!("{key}: home tier {name:?} has {what} {size} but the volume needs {needed} bytes (its size rounded up to whole segments)"));
                        }
                    }
                } else if volume
                    .cache
                    .as_ref()
                    .is_some_and(|cache| &cache.tier == name)
                {
                    // A cache tier holds blocks, not segments (checked above).
                } else if let Some(size) = tier.presented_size() {
                    if size < segment {
                        return Err(format!("tier {name:?}.size = {size}: smaller than one segment of volume {:?} ({segment} bytes)", volume.name));
                    }
                    if size / segment > MAX_SEGMENTS_PER_VOLUME {
                        return Err(format!("tier {name:?}.size = {size}: {} slots of volume {:?}'s {segment}-byte segments, more than the {MAX_SEGMENTS_PER_VOLUME} a volume may have; a fast tier larger than its volume cannot be used anyway", size / segment, volume.name));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Config {
    /// The SMR staging a cache volume runs with (`docs/engine/smr.md`):
    /// `Some` when its home tier is an SMR disk and `smr_staging` is not
    /// `false`. Errors name the key and what to do.
    pub fn smr_staging(
        &self,
        key: &str,
        volume: &VolumeConfig,
        cache: &CacheConfig,
    ) -> Result<Option<tierd_core::cache::SmrStaging>, String> {
        let home_name = volume.tiers.last().map(String::as_str).unwrap_or_default();
        let Some(home) = self.tiers.iter().find(|tier| tier.name == home_name) else {
            return Ok(None);
        };
        let geometry = home.smr_geometry();
        match (geometry, cache.smr_staging) {
            (_, Some(false)) => Ok(None),
            (None, Some(true)) => Err(format!(
                "{key}.cache.smr_staging = true: home tier {home_name:?} is not an SMR disk; give it `smr = {{ band = \"...\" }}` (its band size, e.g. from `tierd model fit`) or `model = \"archive8tb\"`, or leave smr_staging out"
            )),
            (None, None) => Ok(None),
            (Some((band, first)), _) => {
                let staging = tierd_core::cache::SmrStaging::new(band, first);
                staging.validate(cache.block.0).map_err(|error| {
                    format!(
                        "{key}.cache.block = {}: home tier {home_name:?} is SMR: {error} (or set smr_staging = false)",
                        cache.block.0
                    )
                })?;
                Ok(Some(staging))
            }
        }
    }

    /// A `[[volume]]`'s `cache`: the tier is one of the volume's, not home;
    /// the stack is that tier and home; the policy is `none`; the values
    /// parse; a volatile cache tier is written through.
    fn check_cache(
        &self,
        key: &str,
        volume: &VolumeConfig,
        cache: &CacheConfig,
    ) -> Result<(), String> {
        let options = cache.options(key)?;
        self.smr_staging(key, volume, cache)?;
        let Some(position) = volume.tiers.iter().position(|name| name == &cache.tier) else {
            return Err(format!(
                "{key}.cache.tier = {:?}: not one of the volume's tiers {:?}",
                cache.tier, volume.tiers
            ));
        };
        if position + 1 == volume.tiers.len() {
            return Err(format!(
                "{key}.cache.tier = {:?}: that is home (the last tier); the cache must be a faster tier in front of it",
                cache.tier
            ));
        }
        if volume.tiers.len() != 2 {
            return Err(format!(
                "{key}.tiers = {:?}: a cache volume's tiers are its cache tier and home, e.g. [{:?}, \"hdd\"]",
                volume.tiers, cache.tier
            ));
        }
        if !matches!(volume.policy(), PolicyConfig::None) {
            return Err(format!(
                "{key}.policy: a cache volume caches blocks and moves no segments; its policy must be kind = \"none\" (or left out)"
            ));
        }
        if let Some(tier) = self.tiers.iter().find(|tier| tier.name == cache.tier) {
            if let Some(size) = tier.presented_size() {
                if size / options.block_bytes < 2 {
                    return Err(format!(
                        "{key}.cache: tier {:?} of {} bytes holds fewer than 2 blocks of {} bytes; use a larger tier or a smaller block",
                        cache.tier, size, options.block_bytes
                    ));
                }
            }
            if tier.backend == Backend::Memory
                && !tier.unsafe_volatile
                && options.mode == tierd_core::cache::CacheMode::Writeback
            {
                return Err(format!(
                    "{key}.cache.mode = \"writeback\": tier {:?} is memory, so dirty blocks would be lost at a crash; use a file tier, mode = \"writethrough\", or set unsafe_volatile = true on the tier (benchmarks only)",
                    cache.tier
                ));
            }
        }
        Ok(())
    }

    /// Memory tiers must fit in `physical_bytes` of RAM, together, unless
    /// they say `allow_overcommit` (then up to [`MAX_OVERCOMMIT_FACTOR`]
    /// times it: even an empty memory tier keeps a table entry per MiB).
    fn check_machine_limits(&self, physical_bytes: Option<u64>) -> Result<(), String> {
        let Some(physical_bytes) = physical_bytes else {
            return Ok(());
        };
        let memory_tiers = || {
            self.tiers
                .iter()
                .enumerate()
                .filter(|(_, tier)| tier.backend == Backend::Memory)
        };
        let overcommit_bytes = physical_bytes.saturating_mul(MAX_OVERCOMMIT_FACTOR);
        let mut committed_bytes = 0u64;
        for (index, tier) in memory_tiers() {
            let size = tier.size.map_or(0, |size| size.0);
            let key = format!("tier[{index}] (name {:?}).size = {size}", tier.name);
            if size > overcommit_bytes {
                return Err(format!(
                    "{key}: more than {MAX_OVERCOMMIT_FACTOR} times this machine's {physical_bytes} bytes of physical memory, even with allow_overcommit"
                ));
            }
            if !tier.allow_overcommit {
                committed_bytes = committed_bytes.saturating_add(size);
                if committed_bytes > physical_bytes {
                    return Err(format!(
                        "{key}: memory tiers without allow_overcommit add up to {committed_bytes} bytes, more than this machine's {physical_bytes} bytes of physical memory; filling them would exhaust it. Make the tier smaller, or set allow_overcommit = true on it if it will never fill"
                    ));
                }
            }
        }
        Ok(())
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|character| character.is_ascii_alphanumeric() || "-_.".contains(character))
}

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenTarget {
    Unix(PathBuf),
    Tcp(String),
}

fn parse_listen(entry: &str, data_dir: &Path) -> Result<ListenTarget, String> {
    if let Some(path) = entry.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(format!(
                "server.listen = {entry:?}: give a socket path after unix:"
            ));
        }
        let path = PathBuf::from(path);
        Ok(ListenTarget::Unix(if path.is_relative() {
            data_dir.join(path)
        } else {
            path
        }))
    } else if let Some(address) = entry.strip_prefix("tcp:") {
        if address.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!(
                "server.listen = {entry:?}: expected tcp:IP:PORT, e.g. tcp:127.0.0.1:10809"
            ));
        }
        Ok(ListenTarget::Tcp(address.to_string()))
    } else {
        Err(format!(
            "server.listen = {entry:?}: expected \"unix:PATH\" or \"tcp:IP:PORT\""
        ))
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |before| before.matches('\n').count())
        + 1
}

/// The kind of a preset's model ("an HDD", ...), whose overrides it takes,
/// and the page that lists its settings.
fn model_kind(preset: DevicePreset) -> (&'static str, &'static str) {
    use tierd_device::model::{
        hdd::HddConfig, memory::MemoryConfig, smr::SmrConfig, ssd::SsdConfig,
    };
    if HddConfig::preset(preset).is_some() {
        ("an HDD", "docs/devices/hdd.md")
    } else if SsdConfig::preset(preset).is_some() {
        ("an SSD", "docs/devices/ssd.md")
    } else if MemoryConfig::preset(preset).is_some() {
        ("a memory", "docs/devices/memory.md")
    } else if SmrConfig::preset(preset).is_some() {
        ("a drive-managed SMR", "docs/devices/smr.md")
    } else {
        ("a", "docs/devices/")
    }
}

/// What a tier's `model_file` gives: the device TOML `tierd model fit`
/// writes (`crates/tierd-cli/src/probe/fit.rs`, `stack_toml`), a tier stack
/// of one `[[tier]]`. Only its `device` and `[tier.model]` are read (the
/// simulator's other keys, `capacity`, `[migration]`, ..., mean nothing to
/// an emulated tier, which is as large as its `size`).
struct ModelFile {
    device: DevicePreset,
    overrides: Option<toml::Table>,
    /// Where `[tier.model]` starts (1-based).
    overrides_line: usize,
}

fn read_model_file(path: &Path) -> Result<ModelFile, String> {
    #[derive(Deserialize)]
    struct Stack {
        #[serde(default)]
        tier: Vec<Tier>,
    }
    #[derive(Deserialize)]
    struct Tier {
        device: DevicePreset,
        #[serde(default)]
        model: Option<toml::Spanned<toml::Table>>,
    }
    /// A fitted model is under 2 KiB; anything past this is not one (and a
    /// device or a FIFO is never read: it could block or never end).
    const MAX_MODEL_FILE_BYTES: u64 = 1 << 20;
    let what = "the device TOML `tierd model fit PROBE.json --out FILE` writes (a relative path is relative to the config file's directory)";
    let cannot_read =
        |error: std::io::Error| format!("cannot read {}: {error}; give {what}", path.display());
    let metadata = std::fs::metadata(path).map_err(cannot_read)?;
    if !metadata.is_file() || metadata.len() > MAX_MODEL_FILE_BYTES {
        return Err(format!(
            "{} is not a model file (a regular file of at most 1 MiB); give {what}",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(cannot_read)?;
    let stack: Stack = toml::from_str(&text)
        .map_err(|error| format!("{}: {}", path.display(), error.to_string().trim_end()))?;
    let count = stack.tier.len();
    let Some(tier) = stack.tier.into_iter().next().filter(|_| count == 1) else {
        return Err(format!(
            "{} has {count} [[tier]] tables; model_file takes {what}: one [[tier]] with its `device` and [tier.model]",
            path.display()
        ));
    };
    let (overrides, overrides_line) = match tier.model {
        Some(model) => {
            let line = line_at(&text, model.span().start);
            (Some(model.into_inner()), line)
        }
        None => (None, 0),
    };
    Ok(ModelFile {
        device: tier.device,
        overrides,
        overrides_line,
    })
}

fn is_loopback(address: &str) -> bool {
    address
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|address| address.ip().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, "test.toml", Path::new("/base")).map_err(|error| error.to_string())
    }

    /// A two-tier stack, `ssd` over `home`, with `home_extra` on home and
    /// `volume_extra` on the volume.
    fn smr_stack(home_extra: &str, volume_extra: &str) -> String {
        format!(
            r#"
[[tier]]
name = "ssd"
backend = "file"
path = "ssd.img"
size = "64MiB"

[[tier]]
name = "home"
backend = "file"
path = "home.img"
size = "1GiB"
{home_extra}

[[volume]]
name = "v"
size = "1GiB"
segment = "64MiB"
tiers = ["ssd", "home"]
{volume_extra}
"#
        )
    }

    fn staging_of(config: &Config) -> Option<tierd_core::cache::SmrStaging> {
        let volume = &config.volumes[0];
        config
            .smr_staging("v", volume, volume.cache.as_ref().unwrap())
            .unwrap()
    }

    #[test]
    fn an_smr_home_gets_staging_and_a_block_that_divides_its_bands() {
        // The emulated Archive 8 TB: its 30,236,672-byte bands divide by
        // 8 KiB at most, so the default cache takes 8 KiB blocks.
        let config = parse(&smr_stack("model = \"archive8tb\"", "")).unwrap();
        let cache = config.volumes[0].cache.as_ref().unwrap();
        assert_eq!(cache.block, Bytes(8 << 10));
        let staging = staging_of(&config).unwrap();
        assert_eq!(
            (staging.band_bytes, staging.first_band_offset_bytes),
            (30_236_672, 0)
        );
        // A real disk's geometry, given.
        let config = parse(&smr_stack(
            "smr = { band = \"32MiB\", first_band = \"1MiB\" }",
            "",
        ))
        .unwrap();
        assert_eq!(
            config.volumes[0].cache.as_ref().unwrap().block,
            Bytes(64 << 10)
        );
        let staging = staging_of(&config).unwrap();
        assert_eq!(
            (staging.band_bytes, staging.first_band_offset_bytes),
            (32 << 20, 1 << 20)
        );
        // A real SMR disk whose model only predicts (no latency added).
        let config = parse(&smr_stack(
            "model = \"archive8tb\"\nmodel_mode = \"predict\"",
            "",
        ))
        .unwrap();
        assert_eq!(config.tiers[1].model_mode, ModelMode::Predict);
        assert!(staging_of(&config).is_some());
        // Turned off, and a home that is not SMR.
        let config = parse(&smr_stack(
            "model = \"archive8tb\"",
            "cache = { tier = \"ssd\", block = \"4KiB\", smr_staging = false }",
        ))
        .unwrap();
        assert!(staging_of(&config).is_none());
        assert!(staging_of(&parse(&smr_stack("", "")).unwrap()).is_none());
    }

    #[test]
    fn smr_keys_that_cannot_work_are_refused_with_the_key() {
        for (home, volume, expected) in [
            (
                "",
                "cache = { tier = \"ssd\", smr_staging = true }",
                "(name \"v\").cache.smr_staging = true: home tier \"home\" is not an SMR disk",
            ),
            (
                "model = \"archive8tb\"",
                "cache = { tier = \"ssd\", block = \"64KiB\" }",
                "cache.block = 65536: home tier \"home\" is SMR: SMR band of 30236672 bytes: must be a positive multiple of the 65536-byte cache block",
            ),
            (
                "smr = { band = \"64KiB\" }",
                "",
                "tier[1] (name \"home\").smr.band = 65536: a band is a multiple of 4KiB and at least 1MiB",
            ),
            (
                "smr = { band = \"32MiB\", first_band = \"1000\" }",
                "",
                "smr.first_band = 1000: must be a multiple of 4KiB",
            ),
            (
                "model = \"archive8tb\"\nsmr = { band = \"32MiB\" }",
                "",
                "the emulated model \"archive8tb\" (with its model_params or model_file) has bands of 30236672 bytes",
            ),
            (
                "model = \"archive8tb\"",
                "cache = { tier = \"ssd\", block = \"8KiB\", smr_idle = \"2h\" }",
                "cache.smr_idle = 7200 s: at most 1h",
            ),
            (
                "model_mode = \"predict\"",
                "",
                "model_mode = \"predict\": needs the model to predict with",
            ),
        ] {
            let error = parse(&smr_stack(home, volume)).unwrap_err();
            assert!(error.contains(expected), "{error}\nexpected: {expected}");
        }
    }

    #[test]
    fn embedded_default_parses() {
        let config = parse(EMBEDDED_DEFAULT).unwrap();
        assert_eq!(config.volumes[0].segment, Bytes(64 << 20));
        assert_eq!(
            config.tiers[1].path,
            Some(PathBuf::from("/base/tierd-data/disk.img"))
        );
        assert_eq!(
            config.listen_targets(),
            vec![ListenTarget::Unix(PathBuf::from(
                "/base/tierd-data/tierd.sock"
            ))]
        );
        assert_eq!(
            config.metadata_dir(),
            PathBuf::from("/base/tierd-data/meta")
        );
        // The default placement: an adaptive cache on the memory tier,
        // written through (memory loses its contents at a crash).
        assert!(config.volumes[0].policy.is_none());
        assert!(config.volumes[0].default_cache);
        let cache = config.volumes[0].cache.as_ref().unwrap();
        let options = cache.options("volume[0]").unwrap();
        assert_eq!(cache.tier, "mem");
        assert_eq!(
            options.admission,
            tierd_core::cache::AdmissionKind::Adaptive
        );
        assert_eq!(options.policy, tierd_core::cache::adaptive::EVICTION);
        assert_eq!(options.mode, tierd_core::cache::CacheMode::Writethrough);
        assert_eq!(config.server.tls, None);
    }

    /// The default placement (issue 14): a volume of one fast tier over
    /// home with neither a policy nor a cache is an `adaptive` cache
    /// volume, written back on a file tier; a written policy (even `none`),
    /// a written cache, or another number of tiers keep what they say.
    #[test]
    fn a_two_tier_volume_without_policy_or_cache_is_an_adaptive_cache() {
        use tierd_core::cache::{AdmissionKind, CacheMode};
        let default = CACHE_CONFIG.replace(
            "cache = { tier = \"ssd\", block = \"64KiB\", mode = \"writeback\", policy = \"s3fifo\", admission = \"always\", sequential_cutoff = \"4MiB\" }",
            "",
        );
        assert_ne!(default, CACHE_CONFIG);
        let config = parse(&default).unwrap();
        let volume = &config.volumes[0];
        assert!(volume.default_cache);
        let options = volume.cache.as_ref().unwrap().options("v").unwrap();
        assert_eq!(options.tier, "ssd");
        assert_eq!(options.mode, CacheMode::Writeback);
        assert_eq!(options.admission, AdmissionKind::Adaptive);

        let tiered = parse(&format!("{default}\n[volume.policy]\nkind = \"none\"\n")).unwrap();
        assert!(tiered.volumes[0].cache.is_none());
        assert!(matches!(tiered.volumes[0].policy(), PolicyConfig::None));

        let home_only =
            parse(&default.replace("tiers = [\"ssd\", \"hdd\"]", "tiers = [\"hdd\"]")).unwrap();
        assert!(home_only.volumes[0].cache.is_none());

        // A written cache without a policy: adaptive too; with a fixed
        // admission: adaptive's eviction order with that rule.
        let written = parse(&format!(
            "{}\ncache = {{ tier = \"ssd\" }}\n",
            default.trim_end()
        ))
        .unwrap();
        assert!(!written.volumes[0].default_cache);
        let options = written.volumes[0]
            .cache
            .as_ref()
            .unwrap()
            .options("v")
            .unwrap();
        assert_eq!(options.admission, AdmissionKind::Adaptive);
        assert_eq!(options.policy, tierd_core::cache::adaptive::EVICTION);
        let fixed = parse(&format!(
            "{}\ncache = {{ tier = \"ssd\", admission = \"frequency:2\" }}\n",
            default.trim_end()
        ))
        .unwrap();
        let options = fixed.volumes[0]
            .cache
            .as_ref()
            .unwrap()
            .options("v")
            .unwrap();
        assert_eq!(options.admission, AdmissionKind::Frequency { misses: 2 });
        assert_eq!(options.policy, tierd_core::cache::adaptive::EVICTION);
    }

    #[test]
    fn tls_paths_resolve_inside_data_dir_and_mode_defaults_to_require() {
        let text = EMBEDDED_DEFAULT.replace(
            "listen = [\"unix:tierd.sock\"]",
            "listen = [\"unix:tierd.sock\"]\n[server.tls]\ncertificate = \"tls/cert.pem\"\nkey = \"/etc/tierd/key.pem\"\nclient_ca = \"tls/ca.pem\"",
        );
        let tls = parse(&text).unwrap().server.tls.unwrap();
        assert_eq!(
            tls.certificate,
            PathBuf::from("/base/tierd-data/tls/cert.pem")
        );
        assert_eq!(tls.key, PathBuf::from("/etc/tierd/key.pem"));
        assert_eq!(
            tls.client_ca,
            Some(PathBuf::from("/base/tierd-data/tls/ca.pem"))
        );
        assert_eq!(tls.mode, "require");
    }

    const CACHE_CONFIG: &str = include_str!("../../../examples/configs/writeback-cache.toml");

    #[test]
    fn the_writeback_cache_example_parses_and_bad_cache_keys_are_named() {
        let config = parse(CACHE_CONFIG).unwrap();
        let cache = config.volumes[0].cache.as_ref().unwrap();
        let options = cache.options("volume").unwrap();
        assert_eq!(options.block_bytes, 64 << 10);
        assert_eq!(options.mode, tierd_core::cache::CacheMode::Writeback);
        let cases = [
            (
                "mode = \"writeback\"",
                "mode = \"write-back\"",
                "cache.mode = \"write-back\"",
            ),
            (
                "block = \"64KiB\"",
                "block = \"3000\"",
                "cache.block = 3000",
            ),
            (
                "policy = \"s3fifo\"",
                "policy = \"clock\"",
                "cache.policy = \"clock\"",
            ),
            (
                "admission = \"always\"",
                "admission = \"never\"",
                "cache.admission",
            ),
            (
                "tier = \"ssd\", block",
                "tier = \"hdd\", block",
                "that is home",
            ),
            (
                "tier = \"ssd\", block",
                "tier = \"nvme\", block",
                "not one of the volume's tiers",
            ),
            (
                "sequential_cutoff = \"4MiB\"",
                "sequential_cutof = \"4MiB\"",
                "unknown field `sequential_cutof`",
            ),
            (
                "period = \"10s\"",
                "period = \"10s\"\npolicy = { kind = \"otf-ast\" }",
                "policy must be kind = \"none\"",
            ),
        ];
        for (from, to, expected) in cases {
            let text = CACHE_CONFIG.replace(from, to);
            assert_ne!(text, CACHE_CONFIG, "{from}");
            let error = parse(&text).unwrap_err();
            assert!(error.contains(expected), "{to}: {error}");
        }
        // A memory cache tier cannot be written back (its dirt dies with the process).
        let memory = CACHE_CONFIG.replace(
            "backend = \"file\"\npath = \"ssd.img\"",
            "backend = \"memory\"",
        );
        let error = parse(&memory).unwrap_err();
        assert!(error.contains("is memory"), "{error}");
        assert!(parse(&memory.replace("mode = \"writeback\"", "mode = \"writethrough\"")).is_ok());
        // `policy = "adaptive"`: the adaptive eviction order and admission;
        // a fixed admission beside it is refused, naming both.
        let adaptive = CACHE_CONFIG.replace(
            "policy = \"s3fifo\", admission = \"always\"",
            "policy = \"adaptive\"",
        );
        assert_ne!(adaptive, CACHE_CONFIG);
        let config = parse(&adaptive).unwrap();
        let options = config.volumes[0]
            .cache
            .as_ref()
            .unwrap()
            .options("volume")
            .unwrap();
        assert_eq!(
            options.admission,
            tierd_core::cache::AdmissionKind::Adaptive
        );
        assert_eq!(options.policy, tierd_core::cache::adaptive::EVICTION);
        let error = parse(&CACHE_CONFIG.replace("policy = \"s3fifo\"", "policy = \"adaptive\""))
            .unwrap_err();
        assert!(
            error.contains("cache.admission = \"always\"") && error.contains("adaptive"),
            "{error}"
        );
    }

    #[test]
    fn errors_name_the_key_and_what_is_allowed() {
        let cases = [
            (
                EMBEDDED_DEFAULT.replace("segment = \"64MiB\"", "segment = \"3MiB\""),
                "power of two",
            ),
            (
                EMBEDDED_DEFAULT
                    .replace("tiers = [\"mem\", \"disk\"]", "tiers = [\"mem\", \"dsk\"]"),
                "no [[tier]] has this name",
            ),
            (
                EMBEDDED_DEFAULT
                    .replace("tiers = [\"mem\", \"disk\"]", "tiers = [\"disk\", \"mem\"]"),
                "cannot be home",
            ),
            (
                EMBEDDED_DEFAULT.replace("unix:tierd.sock", "tcp:0.0.0.0:10809"),
                "loopback",
            ),
            (
                EMBEDDED_DEFAULT.replace("backend = \"memory\"", "backend = \"ram\""),
                "unknown variant",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "backend = \"file\"",
                    "backend = \"file\"\nio_engine = \"aio\"",
                ),
                "io_engine = \"aio\"",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "backend = \"file\"",
                    "backend = \"file\"\nio_engine = \"aio\"",
                ),
                "expected `psync` or `uring`",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "backend = \"memory\"",
                    "backend = \"memory\"\nio_engine = \"uring\"",
                ),
                "tier[0] (name \"mem\").io_engine: only file tiers",
            ),
            (
                EMBEDDED_DEFAULT.replace("#   kind = \"otf-ast\"", "[volume.policy]\nkind = \"otf-ast\"\nupp = 0.5"),
                "unknown field",
            ),
            (
                EMBEDDED_DEFAULT.replace("size = \"1GiB\"\nsegment", "size = \"2GiB\"\nsegment"),
                "volume needs",
            ),
            (
                EMBEDDED_DEFAULT.replace("name = \"vol0\"", "name = \"../x\""),
                "name must be",
            ),
            (
                EMBEDDED_DEFAULT.replace("name = \"vol0\"", "name = \"..\""),
                "not \".\" or \"..\"",
            ),
            (
                EMBEDDED_DEFAULT.replace("period = \"10s\"", "period = \"10 parsecs\""),
                "duration",
            ),
            (
                EMBEDDED_DEFAULT.replace("path = \"disk.img\"", "path = \"../../etc/disk.img\""),
                "may not leave",
            ),
            (
                EMBEDDED_DEFAULT.replace("unix:tierd.sock", "unix:../tierd.sock"),
                "may not leave",
            ),
            (
                EMBEDDED_DEFAULT
                    .replace("data_dir = \"tierd-data\"", "data_dir = \"../elsewhere\""),
                "may not leave",
            ),            (
                EMBEDDED_DEFAULT.replace(
                    "listen = [\"unix:tierd.sock\"]",
                    "listen = [\"unix:tierd.sock\"]\n[server.tls]\ncertificate = \"c.pem\"\nkey = \"k.pem\"\nmode = \"maybe\"",
                ),
                "server.tls.mode",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "listen = [\"unix:tierd.sock\"]",
                    "listen = [\"unix:tierd.sock\"]\n[server.tls]\ncertificate = \"../c.pem\"\nkey = \"k.pem\"",
                ),
                "may not leave",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "listen = [\"unix:tierd.sock\"]",
                    "listen = [\"unix:tierd.sock\"]\n[server.tls]\ncertificate = \"c.pem\"",
                ),
                "missing field `key`",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(&text).unwrap_err();
            assert!(
                error.contains(expected),
                "expected {expected:?} in: {error}"
            );
            assert!(error.starts_with("test.toml"), "{error}");
        }
    }

    /// Issue 11: values that would exhaust the machine, hang or panic tierd
    /// are refused naming the key and the limit. Each was tried against a
    /// real `tierd serve` first (RELIABILITY.md, "Operator mistakes and hostile clients"): a 64 GiB
    /// memory tier on a 23 GiB machine, probabilities of 2 and NaN and a
    /// zero migration rate started silently; a period of 1e12 s panicked the
    /// policy thread (overflow); a volume of 2^64 − 512 bytes panicked the
    /// config check itself.
    #[test]
    fn values_that_would_exhaust_hang_or_panic_are_refused_with_the_key_and_limit() {
        let physical = physical_memory_bytes().expect("this machine's memory");
        let volume = |line: &str| {
            EMBEDDED_DEFAULT.replace("period = \"10s\"", &format!("period = \"10s\"\n{line}"))
        };
        let memory_tier = |lines: &str| {
            EMBEDDED_DEFAULT.replace(
                "backend = \"memory\"\nsize = \"256MiB\"",
                &format!("backend = \"memory\"\n{lines}"),
            )
        };
        let cases = [
            (
                memory_tier(&format!("size = {}", physical + (64 << 20))),
                "tier[0] (name \"mem\").size = ",
                "more than this machine's",
            ),
            (
                memory_tier("size = \"1000PiB\"\nallow_overcommit = true"),
                "tier[0] (name \"mem\").size = ",
                "even with allow_overcommit",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "path = \"disk.img\"",
                    "path = \"disk.img\"\nallow_overcommit = true",
                ),
                "tier[1] (name \"disk\").allow_overcommit",
                "only memory tiers",
            ),
            (
                memory_tier("size = \"256MiB\"\n[tier.faults]\nread_error_probability = 2.0"),
                "tier[0] (name \"mem\").faults.read_error_probability = 2",
                "from 0 to 1",
            ),
            (
                memory_tier("size = \"256MiB\"\n[tier.faults]\ndelay_probability = nan"),
                "faults.delay_probability = NaN",
                "from 0 to 1",
            ),
            (
                memory_tier("size = \"256MiB\"\n[tier.faults]\nwrite_error_probability = -0.5"),
                "faults.write_error_probability = -0.5",
                "from 0 to 1",
            ),
            (
                memory_tier("size = \"256MiB\"\n[tier.faults]\ndelay_ns = 1000000000000000"),
                "faults.delay_ns = 1000000000000000",
                "at most 60000000000",
            ),
            (
                volume("migration_max_rate = 0"),
                "volume[0] (name \"vol0\").migration_max_rate = 0",
                "at least 64KiB",
            ),
            (
                volume("migration_share = 1e-9"),
                "migration_share = 0.000000001",
                "from 0.001 to 1",
            ),
            (
                EMBEDDED_DEFAULT.replace("period = \"10s\"", "period = 1e12"),
                "volume[0] (name \"vol0\").period = 18446744073709551615 ns",
                "from 1ms to 7 days",
            ),
            (
                EMBEDDED_DEFAULT.replace("period = \"10s\"", "period = 0"),
                "period = 0 ns",
                "from 1ms to 7 days",
            ),
            (
                volume("chunk = \"64MiB\"").replace("segment = \"64MiB\"", "segment = \"128MiB\""),
                "no error expected",
                "",
            ),
            (
                volume("chunk = \"128MiB\"").replace("segment = \"64MiB\"", "segment = \"256MiB\""),
                "volume[0] (name \"vol0\").chunk = 134217728",
                "at most 64MiB",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "size = \"1GiB\"\nsegment",
                    "size = 18446744073709551104\nsegment",
                ),
                "volume[0] (name \"vol0\").size = 18446744073709551104",
                "more than the 1048576 a volume may have",
            ),
            (
                EMBEDDED_DEFAULT
                    .replace(
                        "size = \"1GiB\"\nsegment = \"64MiB\"",
                        "size = \"2TiB\"\nsegment = \"1MiB\"",
                    )
                    .replace("size = \"1GiB\"\n", "size = \"2TiB\"\n"),
                "volume[0] (name \"vol0\").size = 2199023255552: 2097152 segments",
                "use a larger segment",
            ),
            (
                volume("checkpoint_every = 0"),
                "checkpoint_every",
                "at least 1",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "#   kind = \"otf-ast\"",
                    "[volume.policy]\nkind = \"otf-ast\"\nwindow_periods = 0",
                ),
                "volume[0] (name \"vol0\").policy.window_periods = 0",
                "at least 1",
            ),
            (
                EMBEDDED_DEFAULT.replace(
                    "#   kind = \"otf-ast\"",
                    "[volume.policy]\nkind = \"atsmf\"\ntop_n_segments = 0",
                ),
                "volume[0] (name \"vol0\").policy.top_n_segments = 0",
                "at least 1",
            ),
        ];
        for (text, key, limit) in cases {
            match parse(&text) {
                Ok(_) if key == "no error expected" => {}
                Ok(_) => panic!("accepted; expected {key:?} ... {limit:?}"),
                Err(error) => {
                    assert!(error.contains(key), "expected {key:?} in: {error}");
                    assert!(error.contains(limit), "expected {limit:?} in: {error}");
                }
            }
        }
    }

    #[test]
    fn memory_tiers_add_up_against_physical_memory_unless_overcommitted() {
        let two_tiers = |overcommit: bool| {
            EMBEDDED_DEFAULT.replace(
                "[[tier]]\nname = \"disk\"",
                &format!(
                    "[[tier]]\nname = \"spare\"\nbackend = \"memory\"\nsize = \"900MiB\"\nallow_overcommit = {overcommit}\n\n[[tier]]\nname = \"disk\""
                ),
            )
        };
        let gib = Some(1u64 << 30);
        let config = parse(&two_tiers(true)).unwrap();
        assert_eq!(config.check_machine_limits(gib), Ok(()));
        let config = parse(&two_tiers(false)).unwrap();
        let error = config.check_machine_limits(gib).unwrap_err();
        assert!(
            error.starts_with("tier[1] (name \"spare\").size = 943718400: memory tiers without allow_overcommit add up to 1212153856 bytes, more than this machine's 1073741824 bytes"),
            "{error}"
        );
        assert_eq!(config.check_machine_limits(None), Ok(()));
    }

    /// No value of a numeric key makes the configuration check panic.
    #[test]
    fn hostile_numbers_never_panic_the_check() {
        let values = [
            "0",
            "1",
            "-1",
            "511",
            "513",
            "4096",
            "1e300",
            "-1e300",
            "nan",
            "inf",
            "-inf",
            "18446744073709551615",
            "9223372036854775807",
            "18446744073709551104",
            "\"1PiB\"",
            "\"0\"",
            "\"99999999999999PiB\"",
            "0.5",
            "1.5",
        ];
        let keys = [
            "size = \"1GiB\"\nsegment",
            "segment = \"64MiB\"",
            "period = \"10s\"",
            "size = \"256MiB\"",
            "size = \"1GiB\"\n\n[[volume]]",
        ];
        for key in keys {
            let (name, rest) = key.split_once(" = ").unwrap();
            let tail = rest.split_once('\n').map_or("", |(_, tail)| tail);
            for value in values {
                let replaced = if tail.is_empty() {
                    format!("{name} = {value}")
                } else {
                    format!("{name} = {value}\n{tail}")
                };
                let _ = parse(&EMBEDDED_DEFAULT.replace(key, &replaced));
            }
        }
        for line in [
            "chunk",
            "migration_share",
            "migration_max_rate",
            "checkpoint_every",
        ] {
            for value in values {
                let text = EMBEDDED_DEFAULT.replace(
                    "period = \"10s\"",
                    &format!("period = \"10s\"\n{line} = {value}"),
                );
                let _ = parse(&text);
            }
        }
    }

    /// `[server]` values that would exhaust threads or memory, or make a
    /// stop unbounded, are refused with the key, the value and the limit.
    #[test]
    fn server_keys_beyond_their_bounds_are_refused_with_the_limit() {
        let with = |lines: &str| {
            EMBEDDED_DEFAULT.replace(
                "listen = [\"unix:tierd.sock\"]",
                &format!("listen = [\"unix:tierd.sock\"]\n{lines}"),
            )
        };
        let cases = [
            (
                "workers_per_connection = 1000000",
                &["server.workers_per_connection = 1000000", "at most 128"][..],
            ),
            (
                "max_connections = 0",
                &["server.max_connections = 0", "4096"],
            ),
            (
                "max_connections = 100000",
                &["server.max_connections = 100000", "from 1 to 4096"],
            ),
            (
                "max_unnegotiated_connections = 300",
                &[
                    "server.max_unnegotiated_connections = 300",
                    "server.max_connections (256)",
                ],
            ),
            (
                "handshake_timeout = \"0s\"",
                &["server.handshake_timeout", "100ms to 1h"],
            ),
            (
                "handshake_timeout = \"2h\"",
                &["server.handshake_timeout", "100ms to 1h"],
            ),
            (
                "max_in_flight_bytes_per_connection = \"4KiB\"",
                &[
                    "server.max_in_flight_bytes_per_connection = 4096",
                    "at least 1048576",
                ],
            ),
            (
                "max_in_flight_bytes_per_connection = \"2GiB\"",
                &[
                    "server.max_in_flight_bytes_per_connection",
                    "server.max_in_flight_bytes (1073741824)",
                ],
            ),
            (
                "max_in_flight_bytes = \"1PiB\"\nmax_in_flight_bytes_per_connection = \"1PiB\"",
                &[
                    "server.max_in_flight_bytes = 1125899906842624",
                    "this machine's memory",
                ],
            ),
            (
                "shutdown_grace = \"1h\"",
                &["server.shutdown_grace", "at most 10min"],
            ),
        ];
        for (lines, expected) in cases {
            let error = parse(&with(lines)).unwrap_err();
            for text in expected {
                assert!(
                    error.contains(text),
                    "{lines}: {text:?} missing in: {error}"
                );
            }
        }
        let config = parse(&with(
            "workers_per_connection = 128\nmax_connections = 16\nmax_unnegotiated_connections = 4\nhandshake_timeout = \"2s\"\nmax_in_flight_bytes_per_connection = \"8MiB\"\nmax_in_flight_bytes = \"64MiB\"\nshutdown_grace = \"0s\"",
        ))
        .unwrap();
        assert_eq!(config.server.max_connections, 16);
        assert_eq!(config.server.max_unnegotiated_connections, 4);
        assert_eq!(config.server.handshake_timeout, Duration(2_000_000_000));
        assert_eq!(
            config.server.max_in_flight_bytes_per_connection,
            Bytes(8 << 20)
        );
        assert_eq!(config.server.max_in_flight_bytes, Bytes(64 << 20));
        assert_eq!(config.server.shutdown_grace, Duration(0));
        let listeners: Vec<String> = (0..17)
            .map(|index| format!("\"unix:{index}.sock\""))
            .collect();
        let error = parse(&EMBEDDED_DEFAULT.replace(
            "listen = [\"unix:tierd.sock\"]",
            &format!("listen = [{}]", listeners.join(", ")),
        ))
        .unwrap_err();
        assert!(
            error.contains("server.listen has 17 entries: at most 16"),
            "{error}"
        );
        let defaults = parse(EMBEDDED_DEFAULT).unwrap().server;
        assert_eq!(defaults.max_connections, 256);
        assert_eq!(defaults.max_unnegotiated_connections, 64);
        assert_eq!(defaults.handshake_timeout, Duration(10_000_000_000));
        assert_eq!(defaults.max_in_flight_bytes_per_connection, Bytes(64 << 20));
        assert_eq!(defaults.max_in_flight_bytes, Bytes(1 << 30));
        assert_eq!(defaults.shutdown_grace, Duration(5_000_000_000));
    }

    const SMR_HOME: &str = include_str!("../../../examples/configs/smr-home.toml");
    /// What `tierd model fit` wrote for a probe of the emulated Archive 8 TB
    /// (`tierd probe --model smr-archive8tb --scale 0.004 --fit-only` on a
    /// 4 GiB file; the CLI's probe tests check a fresh one is accepted).
    const FITTED: &str = include_str!("../tests/data/fitted-archive8tb.toml");

    /// The smr-home example with its SMR tier's model line replaced, parsed
    /// from `dir` (where model files are looked up).
    fn smr_home(dir: &Path, model_lines: &str) -> Result<Config, String> {
        let text = SMR_HOME
            .replace("\nmodel = \"archive8tb\"\n", &format!("\n{model_lines}\n"))
            .replace("block = \"8KiB\"", "block = \"4KiB\"");
        assert_ne!(text, SMR_HOME);
        Config::parse(&text, "smr.toml", dir).map_err(|error| error.to_string())
    }

    fn fitted_value(key: &str) -> u64 {
        let table: toml::Table = toml::from_str(FITTED).unwrap();
        table["tier"][0]["model"][key].as_integer().unwrap() as u64
    }

    /// `model_params` overrides the preset's parameters: the SMR band a
    /// cache volume stages by is the overridden one, and the model built
    /// for the tier has it.
    #[test]
    fn model_params_override_the_emulated_model_and_its_band() {
        let dir = tempfile::tempdir().unwrap();
        let config = smr_home(
            dir.path(),
            "model = \"archive8tb\"\nmodel_params = { band_bytes = 31457280, media_cache_bytes = \"ignored\" }",
        );
        // A bad value names the key.
        let error = config.unwrap_err();
        assert!(
            error.contains("tier[1] (name \"smr\").model_params (line ")
                && error.contains("media_cache_bytes"),
            "{error}"
        );
        let config = smr_home(
            dir.path(),
            "model = \"archive8tb\"\nmodel_params = { band_bytes = 31457280, media_cache_bytes = 67108864 }",
        )
        .unwrap();
        let tier = &config.tiers[1];
        assert_eq!(tier.smr_geometry(), Some((31_457_280, 0)));
        let model = tier.smr_model().unwrap();
        assert_eq!(model.band_bytes, 31_457_280);
        assert_eq!(model.media_cache_bytes, 64 << 20);
        let staging = config
            .smr_staging(
                "v",
                &config.volumes[0],
                config.volumes[0].cache.as_ref().unwrap(),
            )
            .unwrap()
            .unwrap();
        assert_eq!(staging.band_bytes, 31_457_280);
        assert!(tier.build_model(Some(4 << 30), 1).unwrap().is_ok());
        // Without overrides: the preset, unchanged.
        let plain = Config::parse(SMR_HOME, "smr.toml", dir.path()).unwrap();
        assert_eq!(plain.tiers[1].smr_geometry(), Some((30_236_672, 0)));
        assert!(plain.tiers[1].model_overrides.is_none());
        // The default placement (no `cache` written) picks the largest
        // cache block up to 64 KiB that divides the overridden band.
        let cache_line = SMR_HOME
            .lines()
            .find(|line| line.starts_with("cache = "))
            .unwrap();
        for (band, block) in [(31_457_280u64, 64u64 << 10), (31_461_376, 4 << 10)] {
            let text = SMR_HOME.replace(cache_line, "").replace(
                "\nmodel = \"archive8tb\"\n",
                &format!("\nmodel = \"archive8tb\"\nmodel_params = {{ band_bytes = {band} }}\n"),
            );
            let config = Config::parse(&text, "smr.toml", dir.path()).unwrap();
            let cache = config.volumes[0].cache.as_ref().unwrap();
            assert!(config.volumes[0].default_cache);
            assert_eq!(cache.block, Bytes(block), "band {band}");
            let staging = config
                .smr_staging("v", &config.volumes[0], cache)
                .unwrap()
                .unwrap();
            assert_eq!(staging.band_bytes, band);
        }
    }

    /// `model_file` takes what `tierd model fit` writes, relative to the
    /// config file's directory; the file names the device, so `model` may
    /// be left out or must agree.
    #[test]
    fn model_file_takes_the_fitted_device_toml_beside_the_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("my-disk.toml"), FITTED).unwrap();
        let band = fitted_value("band_bytes");
        for lines in [
            "model_file = \"my-disk.toml\"",
            "model = \"archive8tb\"\nmodel_file = \"my-disk.toml\"",
        ] {
            let config = smr_home(dir.path(), lines).unwrap();
            let tier = &config.tiers[1];
            assert_eq!(tier.model, Some(DevicePreset::Archive8tb), "{lines}");
            assert_eq!(tier.model_file, Some(dir.path().join("my-disk.toml")));
            assert_eq!(tier.smr_geometry(), Some((band, 0)));
            let model = tier.smr_model().unwrap();
            assert_eq!(model.media_cache_bytes, fitted_value("media_cache_bytes"));
            assert_eq!(model.cylinders as u64, fitted_value("cylinders"));
        }
        // An absolute path is taken as it is.
        let absolute = dir.path().join("my-disk.toml");
        let config = smr_home(
            Path::new("/elsewhere"),
            &format!("model_file = {:?}", absolute.display().to_string()),
        )
        .unwrap();
        assert_eq!(config.tiers[1].smr_geometry(), Some((band, 0)));
    }

    #[test]
    fn model_override_errors_name_the_key_the_file_and_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("my-disk.toml", FITTED);
        write("typo.toml", &FITTED.replace("band_bytes =", "band_bites ="));
        write(
            "unknown-device.toml",
            &FITTED.replace("\"archive8tb\"", "\"archive9tb\""),
        );
        write(
            "two.toml",
            &format!("{FITTED}\n[[tier]]\nname = \"ssd\"\ndevice = \"p3700\"\n"),
        );
        write("broken.toml", "[[tier]\n");
        write(
            "zero.toml",
            &FITTED.replace("band_bytes =", "band_bytes = 0\n# was"),
        );
        write(
            "plain.toml",
            "[[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n",
        );
        // The line of the SMR tier's `model` in the example.
        let model_line = SMR_HOME
            .lines()
            .position(|line| line == "model = \"archive8tb\"")
            .unwrap()
            + 1;
        let at = format!("(line {model_line})");
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                "model = \"archive8tb\"\nmodel_params = { band_bytez = 31457280 }".into(),
                vec![
                    format!("tier[1] (name \"smr\").model_params (line {})", model_line + 1),
                    "unknown field `band_bytez`".into(),
                    "expected one of".into(),
                    "archive8tb is a drive-managed SMR model".into(),
                ],
            ),
            (
                "model = \"archive8tb\"\nmodel_params = { band_bytes = 0 }".into(),
                vec!["model_params (line".into(), "band_bytes: must be above zero".into()],
            ),
            (
                "model = \"archive8tb\"\nmodel_params = { capacity_bytes = 4096 }".into(),
                vec!["capacity_bytes".into(), "set the tier's `size`".into()],
            ),
            (
                "model_params = { band_bytes = 31457280 }".into(),
                vec![
                    format!("tier[1] (name \"smr\").model_params {at}"),
                    "need the `model`".into(),
                ],
            ),
            (
                "model = \"archive8tb\"\nmodel_params = { band_bytes = 31457280 }\nmodel_file = \"my-disk.toml\"".into(),
                vec!["model_params (line".into(), "model_file (line".into(), "both given; use one".into()],
            ),
            (
                "model_file = \"missing.toml\"".into(),
                vec![
                    format!("tier[1] (name \"smr\").model_file = \"{}\" {at}", dir.path().join("missing.toml").display()),
                    "cannot read".into(),
                    "tierd model fit PROBE.json --out FILE".into(),
                    "relative to the config file's directory".into(),
                ],
            ),
            (
                "model_file = \"../my-disk.toml\"".into(),
                vec!["model_file = \"../my-disk.toml\"".into(), "may not leave".into()],
            ),
            (
                "model_file = \"typo.toml\"".into(),
                vec![
                    "typo.toml line ".into(),
                    "[tier.model]".into(),
                    "unknown field `band_bites`".into(),
                ],
            ),
            (
                "model_file = \"zero.toml\"".into(),
                vec!["zero.toml line ".into(), "band_bytes: must be above zero".into()],
            ),
            (
                "model_file = \"unknown-device.toml\"".into(),
                vec!["unknown-device.toml".into(), "line ".into(), "archive9tb".into()],
            ),
            (
                "model_file = \"broken.toml\"".into(),
                vec!["broken.toml".into(), "line 1".into()],
            ),
            (
                "model_file = \".\"".into(),
                vec!["is not a model file (a regular file of at most 1 MiB)".into()],
            ),
            (
                "model_file = \"/dev/zero\"".into(),
                vec!["/dev/zero is not a model file".into()],
            ),
            (
                "model_file = \"two.toml\"".into(),
                vec!["two.toml has 2 [[tier]] tables".into(), "one [[tier]]".into()],
            ),
            (
                "model = \"savvio10k4\"\nmodel_file = \"my-disk.toml\"".into(),
                vec![
                    format!("tier[1] (name \"smr\").model = \"savvio10k4\" {at}"),
                    "is of device \"archive8tb\"".into(),
                    "leave `model` out".into(),
                ],
            ),
            (
                // The P3700's overrides are an SSD's: a band is not one of them.
                "model = \"p3700\"\nmodel_params = { band_bytes = 31457280 }".into(),
                vec!["p3700 is an SSD model".into(), "unknown field `band_bytes`".into()],
            ),
            (
                // An explicit `smr` must agree with the overridden model's band.
                "model = \"archive8tb\"\nmodel_params = { band_bytes = 31457280 }\nsmr = { band = 30236672 }".into(),
                vec!["smr.band = 30236672".into(), "has bands of 31457280 bytes".into()],
            ),
        ];
        for (lines, wanted) in cases {
            let error = smr_home(dir.path(), &lines).unwrap_err();
            for piece in wanted {
                assert!(
                    error.contains(&piece),
                    "{lines}:\n{error}\n(wanted {piece:?})"
                );
            }
        }
        // A model file without [tier.model] is the preset; a non-SMR one
        // makes the home not SMR (the example's smr_staging = true is then refused).
        let plain = smr_home(dir.path(), "model_file = \"plain.toml\"").unwrap_err();
        assert!(plain.contains("is not an SMR disk"), "{plain}");
    }
}
