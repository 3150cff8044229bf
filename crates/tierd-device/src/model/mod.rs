//! Event-driven device timing models.
//!
//! A model is a queueing server in virtual time. The caller (the simulator's
//! event loop) submits IOs as they arrive and advances the model to each next
//! event; the model decides service order (FIFO, elevator, NCQ-style
//! positioning order), service times and completions. Models never read a
//! clock: time is only what the caller passes in.
//!
//! Protocol the caller MUST follow:
//! - `now_ns` never decreases across calls on one model;
//! - after `submit` or `advance`, call [`DeviceModel::next_event_ns`] and
//!   come back with `advance(t)` no later than that time (the model may start
//!   queued IOs or finish background work, e.g. SMR cleaning, at that time);
//! - `advance(now)` appends every IO that completed at or before `now` to
//!   `done`, in completion order.

pub mod hdd;
pub mod memory;
pub mod smr;
pub mod ssd;

use serde::{Deserialize, Serialize};
use tierd_common::op::Op;

/// One IO as a device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceIo {
    /// Caller's id, returned in the completion.
    pub id: u64,
    pub op: Op,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    /// Migration or destage traffic rather than user IO (counted apart).
    pub background: bool,
}

/// A finished IO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub id: u64,
    pub arrival_ns: u64,
    /// When the device started serving it (after queueing).
    pub start_ns: u64,
    pub done_ns: u64,
    pub background: bool,
    /// The IO's direction and size, as submitted.
    pub op: Op,
    pub length_bytes: u64,
}

impl Completion {
    /// Queueing plus service: what iostat calls await.
    pub fn response_ns(&self) -> u64 {
        self.done_ns - self.arrival_ns
    }

    /// Service only: what iostat calls svctm.
    pub fn service_ns(&self) -> u64 {
        self.done_ns - self.start_ns
    }
}

/// Cumulative iostat-style counters. Per-period figures are differences of
/// two snapshots (see [`DeviceCounters::since`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceCounters {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// IOs that were background (migration, destage, cleaning reads/writes are
    /// not IOs here: they show in `busy_ns` only).
    pub background_ios: u64,
    /// Time with at least one IO in service (or internal work such as SMR
    /// cleaning): `%util` = busy_ns / elapsed.
    pub busy_ns: u64,
    /// Sum over completed IOs of done − arrival (await × IOs).
    pub response_ns_total: u64,
    /// Sum over completed IOs of done − start (svctm × IOs).
    pub service_ns_total: u64,
}

impl DeviceCounters {
    pub fn ios(&self) -> u64 {
        self.reads + self.writes
    }

    /// Counters accumulated since `earlier`.
    pub fn since(&self, earlier: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            read_bytes: self.read_bytes - earlier.read_bytes,
            write_bytes: self.write_bytes - earlier.write_bytes,
            background_ios: self.background_ios - earlier.background_ios,
            busy_ns: self.busy_ns - earlier.busy_ns,
            response_ns_total: self.response_ns_total - earlier.response_ns_total,
            service_ns_total: self.service_ns_total - earlier.service_ns_total,
        }
    }
}

/// A device timing model (see the module docs for the calling protocol).
pub trait DeviceModel: Send {
    /// Preset or model name, for reports.
    fn name(&self) -> &str;

    fn capacity_bytes(&self) -> u64;

    /// An IO arrives at `now_ns`. IOs beyond the capacity are the caller's
    /// bug: models clamp them to the last byte and count them as served.
    fn submit(&mut self, now_ns: u64, io: DeviceIo);

    /// The next time something happens inside the model (a completion, or
    /// internal background work starting or ending), if anything is pending.
    fn next_event_ns(&self) -> Option<u64>;

    /// Moves the model to `now_ns`, appending completed IOs to `done`.
    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>);

    /// IOs submitted and not yet completed.
    fn outstanding(&self) -> usize;

    /// Cumulative counters, updated as IOs complete; `busy_ns` is accounted up
    /// to the last `advance`.
    fn counters(&self) -> DeviceCounters;

    /// A drive-managed SMR model's translation layer (media cache, dirty
    /// bands, cleaning); `None` for every other model.
    fn smr_stats(&self) -> Option<smr::SmrStats> {
        None
    }

    /// Predicted time to serve a read of `length_bytes` at `offset_bytes`
    /// if it were the next IO started once the device is free (from
    /// `now_ns`): for an HDD, a read-ahead buffer hit's transfer, else seek
    /// plus rotational wait plus transfer from where the head is left.
    /// `None` for models without a head (replica routing then uses a
    /// distance estimate).
    fn read_cost_ns(&self, _now_ns: u64, _offset_bytes: u64, _length_bytes: u64) -> Option<f64> {
        None
    }
}

/// Devices by preset name, as tier stacks name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DevicePreset {
    /// Seagate Savvio 10K.4 ST9600204SS (OTF-AST's HDD).
    Savvio10k4,
    /// Seagate Cheetah 15K.7.
    Cheetah15k7,
    /// Seagate Constellation.2 7200 rpm.
    Constellation2,
    /// Western Digital Caviar WD1200JB, 120 GB 7200 rpm ATA (paper 003's disk).
    Wd1200jb,
    /// Intel X25-E (OTF-AST's SSD).
    X25e,
    /// Intel P3700 (ATSMF's SSD).
    P3700,
    /// DRAM behind a kernel block layer (ATSMF's brd RAM disk).
    Memory,
    /// Seagate Archive 8 TB drive-managed SMR (paper 001's disk).
    Archive8tb,
}

impl DevicePreset {
    /// Every preset.
    pub const ALL: [DevicePreset; 8] = [
        DevicePreset::Savvio10k4,
        DevicePreset::Cheetah15k7,
        DevicePreset::Constellation2,
        DevicePreset::Wd1200jb,
        DevicePreset::X25e,
        DevicePreset::P3700,
        DevicePreset::Memory,
        DevicePreset::Archive8tb,
    ];

    /// The name tier files use (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            DevicePreset::Savvio10k4 => "savvio10k4",
            DevicePreset::Cheetah15k7 => "cheetah15k7",
            DevicePreset::Constellation2 => "constellation2",
            DevicePreset::Wd1200jb => "wd1200jb",
            DevicePreset::X25e => "x25e",
            DevicePreset::P3700 => "p3700",
            DevicePreset::Memory => "memory",
            DevicePreset::Archive8tb => "archive8tb",
        }
    }

    /// True for spinning disks (the HDD presets and the drive-managed SMR
    /// one): seeks cost, so NBD clients are told (`NBD_FLAG_ROTATIONAL`).
    pub fn is_rotational(self) -> bool {
        match self {
            DevicePreset::Savvio10k4
            | DevicePreset::Cheetah15k7
            | DevicePreset::Constellation2
            | DevicePreset::Wd1200jb
            | DevicePreset::Archive8tb => true,
            DevicePreset::X25e | DevicePreset::P3700 | DevicePreset::Memory => false,
        }
    }

    /// One line for listings.
    pub fn description(self) -> &'static str {
        match self {
            DevicePreset::Savvio10k4 => {
                "Seagate Savvio 10K.4 ST9600204SS, 600 GB 10k rpm SAS HDD (OTF-AST's disk)"
            }
            DevicePreset::Cheetah15k7 => "Seagate Cheetah 15K.7, 600 GB 15k rpm SAS HDD",
            DevicePreset::Constellation2 => "Seagate Constellation.2, 1 TB 7200 rpm HDD",
            DevicePreset::Wd1200jb => {
                "Western Digital Caviar WD1200JB, 120 GB 7200 rpm ATA HDD (paper 003's disk)"
            }
            DevicePreset::X25e => "Intel X25-E, 64 GB SATA SLC SSD (OTF-AST's SSD)",
            DevicePreset::P3700 => "Intel P3700, 800 GB NVMe SSD (ATSMF's SSD)",
            DevicePreset::Memory => {
                "DRAM behind the kernel block layer, ~15 us per 4 KiB IO (ATSMF's brd RAM disk)"
            }
            DevicePreset::Archive8tb => {
                "Seagate Archive 8 TB, drive-managed SMR (paper 001's disk)"
            }
        }
    }

    /// What the preset holds when a tier file gives no capacity.
    pub fn default_capacity_bytes(self) -> u64 {
        match self {
            DevicePreset::Savvio10k4
            | DevicePreset::Cheetah15k7
            | DevicePreset::Constellation2
            | DevicePreset::Wd1200jb => {
                hdd::HddConfig::preset(self).map_or(0, |config| config.capacity_bytes)
            }
            DevicePreset::X25e | DevicePreset::P3700 => {
                ssd::SsdConfig::preset(self).map_or(0, |config| config.capacity_bytes)
            }
            DevicePreset::Memory => {
                memory::MemoryConfig::preset(self).map_or(0, |config| config.capacity_bytes)
            }
            DevicePreset::Archive8tb => {
                smr::SmrConfig::preset(self).map_or(0, |config| config.capacity_bytes)
            }
        }
    }

    /// The preset's model, `capacity_bytes` addressable (`None`: the
    /// preset's own). `seed` sets what the model draws at construction (the
    /// spindle phase of a disk); the models are otherwise deterministic.
    pub fn build(
        self,
        capacity_bytes: Option<u64>,
        seed: u64,
    ) -> Result<Box<dyn DeviceModel>, hdd::ConfigError> {
        self.build_with(
            capacity_bytes,
            None::<serde::de::value::UnitDeserializer<serde::de::value::Error>>,
            seed,
        )
    }

    /// Like [`DevicePreset::build`], with parameter overrides read from any
    /// serde deserializer (a tier file's `[tier.model]` table): the keys of
    /// [`hdd::HddOverrides`], [`ssd::SsdOverrides`],
    /// [`memory::MemoryOverrides`] or [`smr::SmrOverrides`] by device kind.
    /// An unknown key or a bad value is an error that names it.
    pub fn build_with<'de, D>(
        self,
        capacity_bytes: Option<u64>,
        overrides: Option<D>,
        seed: u64,
    ) -> Result<Box<dyn DeviceModel>, hdd::ConfigError>
    where
        D: serde::Deserializer<'de>,
    {
        let bad_override =
            |error: D::Error| hdd::ConfigError::new(self.name(), "model", format!("{error}"));
        match self {
            DevicePreset::Savvio10k4
            | DevicePreset::Cheetah15k7
            | DevicePreset::Constellation2
            | DevicePreset::Wd1200jb => {
                let mut config = hdd::HddConfig::preset(self)
                    .ok_or_else(|| hdd::ConfigError::new(self.name(), "device", "not an HDD"))?;
                if let Some(overrides) = overrides {
                    hdd::HddOverrides::deserialize(overrides)
                        .map_err(bad_override)?
                        .apply(&mut config);
                }
                if let Some(capacity) = capacity_bytes {
                    config.capacity_bytes = capacity;
                }
                Ok(Box::new(hdd::Hdd::new(&config, seed)?))
            }
            DevicePreset::X25e | DevicePreset::P3700 => {
                let mut config = ssd::SsdConfig::preset(self)
                    .ok_or_else(|| hdd::ConfigError::new(self.name(), "device", "not an SSD"))?;
                if let Some(overrides) = overrides {
                    ssd::SsdOverrides::deserialize(overrides)
                        .map_err(bad_override)?
                        .apply(&mut config);
                }
                if let Some(capacity) = capacity_bytes {
                    config.capacity_bytes = capacity;
                }
                Ok(Box::new(ssd::Ssd::new(&config)?))
            }
            DevicePreset::Memory => {
                let mut config = memory::MemoryConfig::preset(self).ok_or_else(|| {
                    hdd::ConfigError::new(self.name(), "device", "not a memory device")
                })?;
                if let Some(overrides) = overrides {
                    memory::MemoryOverrides::deserialize(overrides)
                        .map_err(bad_override)?
                        .apply(&mut config);
                }
                if let Some(capacity) = capacity_bytes {
                    config.capacity_bytes = capacity;
                }
                Ok(Box::new(memory::Memory::new(&config)?))
            }
            DevicePreset::Archive8tb => {
                let mut config = smr::SmrConfig::preset(self).ok_or_else(|| {
                    hdd::ConfigError::new(self.name(), "device", "not an SMR disk")
                })?;
                if let Some(overrides) = overrides {
                    smr::SmrOverrides::deserialize(overrides)
                        .map_err(bad_override)?
                        .apply(&mut config);
                }
                if let Some(capacity) = capacity_bytes {
                    config.capacity_bytes = capacity;
                }
                Ok(Box::new(smr::Smr::new(&config, seed)?))
            }
        }
    }
}

impl std::fmt::Display for DevicePreset {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

impl std::str::FromStr for DevicePreset {
    type Err = String;

    /// Accepts the preset names, ignoring case and punctuation
    /// (`savvio10k4`, `Savvio-10K.4`, `archive_8tb`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted: String = text
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect();
        DevicePreset::ALL
            .into_iter()
            .find(|preset| preset.name() == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = DevicePreset::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown device preset {text:?}: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Mean service times of an idle `model` for small (4 KiB) and large
/// (1 MiB) random reads: `((4096, ns), (1 MiB, ns))`, from eight reads of
/// each spread over the device, one at a time. What a policy assumes a
/// device costs before it has measured it; `None` if the model never
/// completes an IO or is smaller than 2 MiB.
pub fn probe_read_service(model: &mut dyn DeviceModel) -> Option<((u64, u64), (u64, u64))> {
    probe_service(model, Op::Read)
}

/// [`probe_read_service`] for `op`: writes see what a device does with
/// them (a disk's write cache acknowledges a small write at once).
pub fn probe_service(model: &mut dyn DeviceModel, op: Op) -> Option<((u64, u64), (u64, u64))> {
    const SMALL: u64 = 4096;
    const LARGE: u64 = 1 << 20;
    const READS: u64 = 8;
    let capacity = model.capacity_bytes();
    if capacity < 2 * LARGE {
        return None;
    }
    let mut now_ns = 0u64;
    let mut done = Vec::new();
    let mut mean = |length_bytes: u64, salt: u64| -> Option<u64> {
        let mut total = 0u64;
        for index in 0..READS {
            // Spread over the device, in an order that makes each read seek.
            let position = (index * 5 + salt) % READS;
            let span = capacity - length_bytes;
            let offset_bytes = (span / READS * position + span / (2 * READS)) / 4096 * 4096;
            model.submit(
                now_ns,
                DeviceIo {
                    id: index,
                    op,
                    offset_bytes,
                    length_bytes,
                    background: false,
                },
            );
            done.clear();
            while done.is_empty() {
                now_ns = now_ns.max(model.next_event_ns()?);
                model.advance(now_ns, &mut done);
            }
            total += done[0].service_ns();
        }
        Some(total / READS)
    };
    let small = mean(SMALL, 3)?;
    let large = mean(LARGE, 1)?;
    Some(((SMALL, small), (LARGE, large)))
}

/// The capacity an IO takes of an idle `model` at its peak: device time
/// per IO, in ns, while 64 random reads are kept outstanding, for 4 KiB
/// and for 1 MiB reads: `((4096, ns), (1 MiB, ns))`. For a device that
/// serves one IO at a time this is about its service time; for one with
/// internal parallelism (an SSD's channels) it is the service time ÷ the
/// parallelism it reaches. `None` if the model never completes an IO or is
/// smaller than 2 MiB.
pub fn probe_capacity(model: &mut dyn DeviceModel) -> Option<((u64, u64), (u64, u64))> {
    const SMALL: u64 = 4096;
    const LARGE: u64 = 1 << 20;
    if model.capacity_bytes() < 2 * LARGE {
        return None;
    }
    let mut now_ns = 0;
    let small = time_per_io_at_peak(model, &mut now_ns, SMALL, 7)?;
    let large = time_per_io_at_peak(model, &mut now_ns, LARGE, 11)?;
    Some(((SMALL, small), (LARGE, large)))
}

/// Keeps 64 random reads of `length_bytes` outstanding from `now_ns` until
/// 512 complete; the time per completion. Drains what is left after.
fn time_per_io_at_peak(
    model: &mut dyn DeviceModel,
    now_ns: &mut u64,
    length_bytes: u64,
    salt: u64,
) -> Option<u64> {
    const IN_FLIGHT: u64 = 64;
    const COMPLETIONS: u64 = 512;
    let span = ((model.capacity_bytes() - length_bytes) / 4096).max(1);
    let read = |index: u64| DeviceIo {
        id: index,
        op: Op::Read,
        // A multiplicative hash spreads the reads over the device.
        offset_bytes: index.wrapping_add(salt).wrapping_mul(0x9e37_79b9_7f4a_7c15) % span * 4096,
        length_bytes,
        background: false,
    };
    let started_ns = *now_ns;
    for index in 0..IN_FLIGHT {
        model.submit(*now_ns, read(index));
    }
    let mut next = IN_FLIGHT;
    let mut completed = 0;
    let mut done = Vec::new();
    let mut finished_ns = started_ns;
    while completed < COMPLETIONS {
        *now_ns = (*now_ns).max(model.next_event_ns()?);
        done.clear();
        model.advance(*now_ns, &mut done);
        for _ in 0..done.len() {
            completed += 1;
            if completed == COMPLETIONS {
                finished_ns = *now_ns;
            }
            model.submit(*now_ns, read(next));
            next += 1;
        }
    }
    while model.outstanding() > 0 {
        *now_ns = (*now_ns).max(model.next_event_ns()?);
        done.clear();
        model.advance(*now_ns, &mut done);
    }
    Some(((finished_ns - started_ns) / COMPLETIONS).max(1))
}
