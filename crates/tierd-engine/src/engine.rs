//! Builds the live engine from a [`Config`]: opens each tier's backend and
//! wraps it (fault injection, then emulated latency, then stats outermost so
//! the monitor sees the latency a client sees), opens each volume over its
//! stack, and starts and stops the volumes' runner threads.

use std::sync::Arc;

use tierd_common::clock::Clock;

use crate::config::{Backend, Config, TierConfig, VolumeConfig};
use crate::device::fault::FaultDevice;
use crate::device::file::FileDevice;
use crate::device::latency::LatencyDevice;
use crate::device::memory::MemoryDevice;
use crate::device::stats::StatsDevice;
use crate::device::BlockDevice;
use crate::log::Logger;
use crate::meta::MetaStore;
use crate::runner::{Pacing, VolumeRunner};
use crate::volume::{TierSpec, Volume, VolumeError, VolumeOptions};

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("tier {tier}: {message}")]
    Tier { tier: String, message: String },
    #[error("volume {volume}: {source}")]
    Volume {
        volume: String,
        #[source]
        source: VolumeError,
    },
    /// A file tier's backing file was missing at start although the
    /// volume's metadata says it holds data: serving the empty file that
    /// was created in its place would return zeroes for that data.
    #[error("volume {volume}: tier {tier}: its file {path} was missing, but the metadata in {meta_dir} says it holds {what}. Serving an empty file in its place would return zeroes for that data, so tierd refuses to start (the empty file it created was removed again). Put the original file back; or, to give up that data, move the volume's metadata directory away (every segment then reads from home, whose copies of those segments may be stale)")]
    MissingTierFile {
        volume: String,
        tier: String,
        path: String,
        meta_dir: String,
        what: String,
    },
}

/// A tier as built: the device chain plus handles tests and drills use.
pub struct BuiltTier {
    pub name: String,
    pub device: Arc<dyn BlockDevice>,
    pub faults: Option<Arc<FaultDevice>>,
    pub volatile: bool,
    pub unsafe_volatile: bool,
}

/// Opens one tier's device chain.
pub fn build_tier(
    tier: &TierConfig,
    clock: &Arc<dyn Clock>,
    seed: u64,
) -> Result<BuiltTier, EngineError> {
    let fail = |message: String| EngineError::Tier {
        tier: tier.name.clone(),
        message,
    };
    let mut device: Arc<dyn BlockDevice> = match tier.backend {
        Backend::Memory => {
            let size = tier.size.map(|size| size.0).unwrap_or(0);
            Arc::new(MemoryDevice::new(tier.name.clone(), size))
        }
        Backend::File => {
            let path = tier
                .path
                .as_ref()
                .ok_or_else(|| fail("a file tier needs a path".to_string()))?;
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|error| {
                    fail(format!(
                        "cannot create directory {}: {error}",
                        parent.display()
                    ))
                })?;
            }
            let file = FileDevice::open(path, tier.size.map(|size| size.0), tier.direct, true)
                .map_err(|error| fail(error.to_string()))?;
            Arc::new(file)
        }
    };
    let mut faults = None;
    if let Some(config) = &tier.faults {
        let fault = Arc::new(FaultDevice::new(
            device,
            config.clone(),
            seed,
            clock.clone(),
        ));
        faults = Some(fault.clone());
        device = fault;
    }
    if let Some(preset) = tier.model {
        // The model addresses exactly the backend's bytes (a short-stroked
        // disk, as the simulator's tier stacks model a tier's capacity), so
        // offsets map straight through.
        let model = preset
            .build(Some(device.size_bytes()), seed)
            .map_err(|error| fail(format!("model {}: {error}", preset.name())))?;
        device = Arc::new(LatencyDevice::new(device, model, clock.clone()));
    }
    let device: Arc<dyn BlockDevice> = Arc::new(StatsDevice::new(device, clock.clone()));
    Ok(BuiltTier {
        name: tier.name.clone(),
        device,
        faults,
        volatile: tier.backend == Backend::Memory,
        unsafe_volatile: tier.unsafe_volatile,
    })
}

/// The options a `[[volume]]` gives.
pub fn volume_options(volume: &VolumeConfig) -> VolumeOptions {
    VolumeOptions {
        name: volume.name.clone(),
        size_bytes: volume.size.0,
        segment_bytes: volume.segment.0,
        chunk_bytes: volume.chunk.0,
        period_ns: volume.period.0,
        checkpoint_every_periods: volume.checkpoint_every,
        policy: volume.policy.clone(),
    }
}

/// Refuses a volume whose existing metadata places data on a file tier whose
/// file had to be created at this start (it was deleted or never restored):
/// home always holds every segment; a faster tier holds the segments placed
/// on it. Removes the freshly created files, so the next start refuses too.
fn check_created_tiers(
    volume: &Volume,
    created: &[(String, std::path::PathBuf)],
    meta_dir: &std::path::Path,
) -> Result<(), EngineError> {
    let names = volume.tier_names();
    let placement = volume.placement();
    for (index, name) in names.iter().enumerate() {
        let Some((_, path)) = created.iter().find(|(tier, _)| tier == name) else {
            continue;
        };
        let what = if index + 1 == names.len() {
            format!("the home copy of all {} segments", volume.segment_count())
        } else {
            let on_tier: Vec<String> = placement
                .iter()
                .enumerate()
                .filter(|(_, tier)| usize::from(**tier) == index)
                .map(|(segment, _)| segment.to_string())
                .collect();
            if on_tier.is_empty() {
                continue;
            }
            format!(
                "{} segments of {} bytes (segments {})",
                on_tier.len(),
                volume.segment_bytes(),
                on_tier.join(", ")
            )
        };
        for (_, path) in created {
            let _ = std::fs::remove_file(path);
        }
        return Err(EngineError::MissingTierFile {
            volume: volume.name().to_string(),
            tier: name.clone(),
            path: path.display().to_string(),
            meta_dir: meta_dir.display().to_string(),
            what,
        });
    }
    Ok(())
}

/// The running engine: its volumes and their threads.
pub struct Engine {
    pub volumes: Vec<Arc<Volume>>,
    pub tiers: Vec<BuiltTier>,
    runners: Vec<VolumeRunner>,
    logger: Logger,
}

impl Engine {
    /// Opens every tier and volume of `config` (recovering placement and
    /// policy state) without starting threads.
    pub fn open(
        config: &Config,
        clock: Arc<dyn Clock>,
        logger: Logger,
    ) -> Result<Engine, EngineError> {
        let mut tiers: Vec<BuiltTier> = Vec::new();
        // File tiers whose file does not exist yet (build_tier creates it).
        let mut created: Vec<(String, std::path::PathBuf)> = Vec::new();
        for (index, tier) in config.tiers.iter().enumerate() {
            if let (Backend::File, Some(path)) = (tier.backend, &tier.path) {
                if !path.exists() {
                    created.push((tier.name.clone(), path.clone()));
                }
            }
            if tier.unsafe_volatile {
                logger.warn(
                    "unsafe_volatile: writes to segments on this memory tier are acknowledged before they reach home and are lost if the process ends",
                    &[("tier", &tier.name)],
                );
            }
            tiers.push(build_tier(tier, &clock, 0x7469_6572 ^ index as u64)?);
        }
        let mut volumes = Vec::new();
        for volume_config in &config.volumes {
            let specs: Vec<TierSpec> = volume_config
                .tiers
                .iter()
                .map(|name| {
                    let built = tiers
                        .iter()
                        .find(|tier| &tier.name == name)
                        .expect("config checked tier names");
                    TierSpec {
                        name: built.name.clone(),
                        device: built.device.clone(),
                        volatile: built.volatile,
                        unsafe_volatile: built.unsafe_volatile,
                    }
                })
                .collect();
            let meta_dir = config.metadata_dir().join(&volume_config.name);
            let metadata_existed = MetaStore::checkpoint_path(&meta_dir).exists()
                || MetaStore::journal_path(&meta_dir).exists();
            let (volume, notes) = Volume::open(
                volume_options(volume_config),
                specs,
                &meta_dir,
                clock.clone(),
            )
            .map_err(|source| EngineError::Volume {
                volume: volume_config.name.clone(),
                source,
            })?;
            if metadata_existed {
                check_created_tiers(&volume, &created, &meta_dir)?;
            }
            for note in notes {
                logger.info(
                    "recovery",
                    &[("volume", &volume_config.name), ("note", &note)],
                );
            }
            for warning in volume.status().warnings {
                logger.warn(
                    "recovery",
                    &[("volume", &volume_config.name), ("warning", &warning)],
                );
            }
            volumes.push(Arc::new(volume));
        }
        Ok(Engine {
            volumes,
            tiers,
            runners: Vec::new(),
            logger,
        })
    }

    /// Starts each volume's policy and copier threads.
    pub fn start(&mut self, config: &Config, clock: Arc<dyn Clock>) {
        for (volume, volume_config) in self.volumes.iter().zip(&config.volumes) {
            let pacing = Pacing {
                share: volume_config.migration_share,
                max_rate_bytes_per_sec: volume_config.migration_max_rate.map(|rate| rate.0),
            };
            self.runners.push(VolumeRunner::start(
                volume.clone(),
                clock.clone(),
                pacing,
                self.logger.clone(),
            ));
        }
    }

    pub fn volume(&self, name: &str) -> Option<&Arc<Volume>> {
        self.volumes.iter().find(|volume| volume.name() == name)
    }

    /// Wakes the copiers (after `tierd move`).
    pub fn wake(&self) {
        for runner in &self.runners {
            runner.wake();
        }
    }

    /// Clean stop: stops the threads, flushes every tier and writes a final
    /// checkpoint per volume.
    pub fn shutdown(&mut self) -> Result<(), VolumeError> {
        for runner in self.runners.drain(..) {
            runner.stop();
        }
        let mut first_error = None;
        for volume in &self.volumes {
            if let Err(error) = volume.flush().and_then(|()| volume.checkpoint()) {
                self.logger.error(
                    "shutdown",
                    &[("volume", volume.name()), ("error", &error.to_string())],
                );
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}
