//! Builds the live engine from a [`Config`]: opens each tier's backend and
//! wraps it (fault injection, then emulated latency, then stats outermost so
//! the monitor sees the latency a client sees), opens each volume over its
//! stack, and starts and stops the volumes' runner threads.

use std::sync::Arc;

use tierd_common::clock::Clock;

use crate::config::{Backend, Config, ModelMode, TierConfig, VolumeConfig};
use crate::device::fault::FaultDevice;
use crate::device::file::FileDevice;
use crate::device::latency::LatencyDevice;
use crate::device::memory::MemoryDevice;
use crate::device::reduce::ReducedDevice;
use crate::device::replica::ReplicaDevice;
use crate::device::stats::StatsDevice;
use crate::device::BlockDevice;
use crate::identity::{MetaAtStart, TierAtStart, TierSuperblock, VolumeIdentity};
use crate::meta::MetaStore;
use crate::runner::VolumeRunner;
use crate::volume::{MigrationOptions, TierSpec, Volume, VolumeError, VolumeOptions};

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
    /// A tier file or the metadata is not what the volume was (see
    /// [`crate::identity`]); the message lists every difference and what to do.
    #[error("{0}")]
    Identity(String),
    /// Two tiers resolve to the same file or device.
    #[error("{0}")]
    SharedBacking(String),
    /// Another server holds the volume's metadata directory.
    #[error("{0}")]
    Locked(String),
}

/// A tier as built: the device chain plus handles tests and drills use.
pub struct BuiltTier {
    pub name: String,
    pub device: Arc<dyn BlockDevice>,
    /// The file or block device under a file tier (superblock IO).
    pub file: Option<Arc<FileDevice>>,
    pub faults: Option<Arc<FaultDevice>>,
    pub volatile: bool,
    pub unsafe_volatile: bool,
}

/// Opens one tier's device chain.
///
/// `extend`: a file tier's file may be created or grown to its size (false
/// when its volume's metadata says it was stamped: a file that shrank is
/// refused by the identity check, never regrown).
pub fn build_tier(
    tier: &TierConfig,
    clock: &Arc<dyn Clock>,
    seed: u64,
    extend: bool,
) -> Result<BuiltTier, EngineError> {
    let fail = |message: String| EngineError::Tier {
        tier: tier.name.clone(),
        message,
    };
    let mut backing = None;
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
            let file = FileDevice::open_tier(
                path,
                tier.size.map(|size| size.0),
                tier.direct,
                true,
                extend,
            )
            .and_then(|file| {
                file.with_io_engine(
                    tier.io_engine
                        .unwrap_or(crate::device::io_engine::DEFAULT_IO_ENGINE),
                )
            })
            .map_err(|error| fail(error.to_string()))?;
            tracing::info!(
                tier = %tier.name,
                direct = tier.direct,
                io_engine = file.io_engine().name(),
                "file tier opened"
            );
            let file = Arc::new(file);
            backing = Some(file.clone());
            file
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
    if let Some(model) = tier.build_model(Some(device.size_bytes()), seed) {
        // The model addresses exactly the backend's bytes (a short-stroked
        // disk, as the simulator's tier stacks model a tier's capacity), so
        // offsets map straight through. Its parameters: the preset's, with
        // the tier's `model_params` or `model_file` overrides.
        let model = model.map_err(|error| {
            fail(format!(
                "model {}: {error}",
                tier.model.map(|preset| preset.name()).unwrap_or_default()
            ))
        })?;
        let latency = LatencyDevice::new(device, model, clock.clone());
        device = Arc::new(match tier.model_mode {
            ModelMode::Emulate => latency,
            ModelMode::Predict => latency.predicting(),
        });
    }
    if let Some(reduce) = &tier.reduce {
        // Above the physical chain (model, faults, backing), below the
        // stats: the tier's figures are what the volume sees.
        let options = reduce.options().map_err(&fail)?;
        let format = extend || tier.backend == Backend::Memory;
        let reduced =
            ReducedDevice::open(tier.name.clone(), device, options, clock.clone(), format)
                .map_err(&fail)?;
        device = Arc::new(reduced);
    }
    if let Some(replicas) = &tier.replicas {
        // Above the physical chain, so its copies and routed reads go
        // through the disk's model (whose head position routing asks for),
        // below the stats.
        let options = replicas.options().map_err(&fail)?;
        let replicated =
            ReplicaDevice::open(tier.name.clone(), device, options, clock.clone(), extend)
                .map_err(&fail)?;
        device = Arc::new(replicated);
    }
    let device: Arc<dyn BlockDevice> = Arc::new(StatsDevice::new(device, clock.clone()));
    Ok(BuiltTier {
        name: tier.name.clone(),
        device,
        file: backing,
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
        policy: volume.policy(),
        migration: MigrationOptions {
            max_concurrent_moves: volume.max_concurrent_moves,
            chunks_in_flight: volume.migration_chunks_in_flight,
            share: volume.migration_share,
            max_rate_bytes_per_second: volume.migration_max_rate.map(|rate| rate.0),
        },
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

/// Refuses two tiers whose paths resolve to the same file or block device
/// (compared by device and inode, or by the device number of a block
/// device, so symlinks, `..`, bind mounts and two device nodes of one disk
/// are caught); files that do not exist yet are compared by their
/// canonical directory and name.
pub fn check_distinct_backings(config: &Config) -> Result<(), EngineError> {
    use crate::device::file::backing_identity;
    let mut seen: Vec<(String, String)> = Vec::new();
    for (index, tier) in config.tiers.iter().enumerate() {
        let Some(path) = &tier.path else { continue };
        if tier.backend != Backend::File {
            continue;
        }
        let key = match std::fs::metadata(path) {
            Ok(metadata) => {
                let (device, inode) = backing_identity(&metadata);
                if device == 0 {
                    format!("block device {}:{}", libc::major(inode), libc::minor(inode))
                } else {
                    format!(
                        "device {}:{} inode {inode}",
                        libc::major(device),
                        libc::minor(device)
                    )
                }
            }
            Err(_) => {
                let parent = path.parent().and_then(|parent| parent.canonicalize().ok());
                match (parent, path.file_name()) {
                    (Some(parent), Some(name)) => format!("path {}", parent.join(name).display()),
                    _ => format!("path {}", path.display()),
                }
            }
        };
        let this = format!(
            "tier[{index}] (name {:?}).path = {:?}",
            tier.name,
            path.display().to_string()
        );
        if let Some((other, _)) = seen.iter().find(|(_, seen_key)| *seen_key == key) {
            return Err(EngineError::SharedBacking(format!(
                "config: {this} and {other} are the same file ({key}): two tiers on one file would overwrite each other's data; give each tier its own file or device"
            )));
        }
        seen.push((this, key));
    }
    Ok(())
}

/// Locks a volume's metadata directory for this process (`flock` on
/// `DIR/lock`, which holds the holder's pid).
fn lock_meta_dir(volume: &str, meta_dir: &std::path::Path) -> Result<std::fs::File, EngineError> {
    let fail = |message: String| EngineError::Locked(format!("volume {volume}: {message}"));
    std::fs::create_dir_all(meta_dir)
        .map_err(|error| fail(format!("cannot create {}: {error}", meta_dir.display())))?;
    crate::pidlock::lock(&meta_dir.join("lock")).map_err(|error| match error {
        crate::pidlock::PidLockError::Held { pid } => fail(format!(
            "its metadata directory {} is in use by {} (another tierd, perhaps with another data_dir); two servers on one volume would overwrite each other's placement and data. Stop the other one",
            meta_dir.display(),
            pid.map_or_else(|| "another process".to_string(), |pid| format!("process {pid}"))
        )),
        crate::pidlock::PidLockError::Io(message) => fail(message),
    })
}

/// A volume's file tiers as the identity check needs them.
struct VolumeTiers<'a> {
    names: &'a [String],
    files: Vec<(usize, String, Arc<FileDevice>)>,
}

/// What losing each tier's contents gives up, from the metadata's placement.
fn loss_report(
    tiers: &VolumeTiers<'_>,
    tier: &str,
    placement: Option<&[crate::meta::Location]>,
    segment_bytes: u64,
) -> String {
    let Some(index) = tiers.names.iter().position(|name| name == tier) else {
        return String::new();
    };
    let home = index + 1 == tiers.names.len();
    let Some(placement) = placement else {
        return if home {
            "no metadata places data: the volume would start with this file's current contents as its data".to_string()
        } else {
            "no metadata places segments on it: nothing placed is lost".to_string()
        };
    };
    let on_tier: Vec<u32> = placement
        .iter()
        .enumerate()
        .filter(|(_, location)| usize::from(location.tier) == index)
        .map(|(segment, _)| segment as u32)
        .collect();
    let list = segment_list(&on_tier);
    let mib = segment_bytes >> 20;
    if on_tier.is_empty() {
        "no segment is placed on it: nothing is lost".to_string()
    } else if home {
        format!(
            "the data of the {} segments on home ({list}; {mib} MiB each) is whatever this file holds now",
            on_tier.len()
        )
    } else {
        format!(
            "the {} segments placed on it ({list}; {mib} MiB each) lose every write since they were promoted: they are placed on home again and read its possibly stale copy",
            on_tier.len()
        )
    }
}

/// Ends `text` as a sentence.
fn sentence(text: &str) -> String {
    if text.ends_with(['.', '?']) {
        text.to_string()
    } else {
        format!("{text}.")
    }
}

/// `0-3, 7, 9-10`.
fn segment_list(segments: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut index = 0;
    while index < segments.len() {
        let start = segments[index];
        let mut end = start;
        while index + 1 < segments.len() && segments[index + 1] == end + 1 {
            index += 1;
            end += 1;
        }
        parts.push(if start == end {
            format!("segment {start}")
        } else {
            format!("segments {start}-{end}")
        });
        index += 1;
    }
    parts.join(", ")
}

/// Writes the next generation on the metadata and every file tier of a
/// volume (see [`crate::identity`] for the crash-safe order).
fn stamp_identity(
    volume: &VolumeConfig,
    meta_dir: &std::path::Path,
    identity: Option<VolumeIdentity>,
    tiers: &VolumeTiers<'_>,
) -> Result<(), EngineError> {
    let fail =
        |message: String| EngineError::Identity(format!("volume {}: {message}", volume.name));
    let (uuid, base) = match &identity {
        Some(identity) => (
            identity.volume_uuid.clone(),
            identity.generation.max(identity.pending.unwrap_or(0)),
        ),
        None => (crate::identity::new_volume_uuid().map_err(fail)?, 0),
    };
    let next = base + 1;
    let mut record = VolumeIdentity {
        volume: volume.name.clone(),
        volume_uuid: uuid.clone(),
        generation: identity.as_ref().map_or(0, |identity| identity.generation),
        pending: Some(next),
        tiers: tiers.names.to_vec(),
    };
    record.store(meta_dir).map_err(fail)?;
    for (index, name, file) in &tiers.files {
        let superblock = TierSuperblock {
            volume: volume.name.clone(),
            volume_uuid: uuid.clone(),
            tier: name.clone(),
            tier_index: *index as u32,
            tier_count: tiers.names.len() as u32,
            data_bytes: file.size_bytes(),
            generation: next,
        };
        file.write_superblock(&superblock.encode())
            .map_err(|error| {
                fail(format!(
                    "tier {name}: cannot write its superblock at byte {} of {}: {error}",
                    file.size_bytes(),
                    file.path().display()
                ))
            })?;
    }
    record.generation = next;
    record.pending = None;
    record.store(meta_dir).map_err(fail)
}

/// The running engine: its volumes and their threads.
pub struct Engine {
    pub volumes: Vec<Arc<Volume>>,
    pub tiers: Vec<BuiltTier>,
    runners: Vec<VolumeRunner>,
    /// Held for the engine's lifetime: the metadata directories' locks.
    _meta_locks: Vec<std::fs::File>,
}

impl Engine {
    /// Opens every tier and volume of `config` (recovering placement and
    /// policy state) without starting threads.
    pub fn open(config: &Config, clock: Arc<dyn Clock>) -> Result<Engine, EngineError> {
        Self::open_accepting(config, clock, &[])
    }

    /// [`Engine::open`], accepting the loss of the tiers named in
    /// `accept_reset` where their identity does not match (the operator's
    /// `--accept-reset TIER`): segments placed on such a fast tier go back
    /// to home; a reset home keeps what its file holds. Each is logged.
    pub fn open_accepting(
        config: &Config,
        clock: Arc<dyn Clock>,
        accept_reset: &[String],
    ) -> Result<Engine, EngineError> {
        for name in accept_reset {
            if !config.tiers.iter().any(|tier| &tier.name == name) {
                let names: Vec<&str> = config.tiers.iter().map(|tier| tier.name.as_str()).collect();
                return Err(EngineError::Identity(format!(
                    "--accept-reset {name}: the configuration has no tier of that name (its tiers: {})",
                    names.join(", ")
                )));
            }
        }
        check_distinct_backings(config)?;
        let mut meta_locks = Vec::new();
        for volume_config in &config.volumes {
            let meta_dir = config.metadata_dir().join(&volume_config.name);
            meta_locks.push(lock_meta_dir(&volume_config.name, &meta_dir)?);
        }
        let mut tiers: Vec<BuiltTier> = Vec::new();
        // File tiers whose file does not exist yet (build_tier creates it).
        let mut created: Vec<(String, std::path::PathBuf)> = Vec::new();
        // Each file tier's length before tierd touched it (None: missing).
        let mut length_before: Vec<Option<u64>> = Vec::new();
        for (index, tier) in config.tiers.iter().enumerate() {
            let mut length = None;
            if let (Backend::File, Some(path)) = (tier.backend, &tier.path) {
                match std::fs::metadata(path) {
                    Ok(metadata) => length = Some(metadata.len()),
                    Err(_) => created.push((tier.name.clone(), path.clone())),
                }
            }
            length_before.push(length);
            if tier.unsafe_volatile {
                tracing::warn!(
                    tier = %tier.name,
                    "unsafe_volatile: writes to segments on this memory tier are acknowledged before they reach home and are lost if the process ends"
                );
            }
            // Tiers of a volume whose metadata stamped them are opened as
            // they are.
            let stamped = config.volumes.iter().any(|volume| {
                volume.tiers.contains(&tier.name)
                    && VolumeIdentity::load(&config.metadata_dir().join(&volume.name)).is_ok_and(
                        |identity| identity.is_some_and(|identity| identity.generation > 0),
                    )
            });
            let built = match build_tier(tier, &clock, 0x7469_6572 ^ index as u64, !stamped) {
                Ok(built) => built,
                Err(error) => {
                    // Do not leave an empty file behind for a tier that
                    // could not start (it would look like a real one).
                    // Files created by this start hold nothing yet.
                    for (_, path) in &created {
                        let _ = std::fs::remove_file(path);
                    }
                    return Err(error);
                }
            };
            tiers.push(built);
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
            let volume_tiers = VolumeTiers {
                names: &volume_config.tiers,
                files: volume_config
                    .tiers
                    .iter()
                    .enumerate()
                    .filter_map(|(index, name)| {
                        let built = tiers.iter().find(|tier| &tier.name == name)?;
                        Some((index, name.clone(), built.file.clone()?))
                    })
                    .collect(),
            };
            let identity = VolumeIdentity::load(&meta_dir).map_err(|message| {
                EngineError::Identity(format!(
                    "volume {}: {message}. The identity file ties the metadata to its tier files; restore it from a backup of the metadata directory",
                    volume_config.name
                ))
            })?;
            let meta_state = MetaAtStart {
                identity: identity.clone(),
                checkpoint: MetaStore::checkpoint_path(&meta_dir).exists(),
                journal: MetaStore::journal_path(&meta_dir).exists(),
            };
            let at_start: Vec<TierAtStart> = volume_tiers
                .files
                .iter()
                .map(|(index, name, file)| {
                    let config_index = config
                        .tiers
                        .iter()
                        .position(|tier| &tier.name == name)
                        .expect("config checked tier names");
                    TierAtStart {
                        name: name.clone(),
                        index: *index,
                        path: file.path().to_path_buf(),
                        length_before: length_before[config_index],
                        block_device: file.is_block_device(),
                        data_bytes: file.size_bytes(),
                        superblock: file.read_superblock(),
                        trailing: file.trailing_superblock(),
                    }
                })
                .collect();
            let problems =
                crate::identity::verify(&volume_config.name, &meta_dir, &meta_state, &at_start);
            let placement = if problems.is_empty() {
                None
            } else {
                crate::meta::peek_placement(&meta_dir).ok().flatten()
            };
            let refused: Vec<&crate::identity::Problem> = problems
                .iter()
                .filter(|problem| {
                    problem
                        .tier
                        .as_ref()
                        .is_none_or(|tier| !accept_reset.contains(tier))
                })
                .collect();
            if !refused.is_empty() {
                let mut message = format!(
                    "volume {}: tierd refuses to start: its files are not what the volume was, and serving them could return another volume's, older or zeroed data:",
                    volume_config.name
                );
                for problem in &refused {
                    match &problem.tier {
                        Some(tier) => message.push_str(&format!(
                            "\n  - tier {tier} ({}): {}\n    If this is expected, `tierd serve --accept-reset {tier}` starts anyway and stamps the file as this tier: {}.",
                            problem.path.display(),
                            sentence(&problem.what),
                            loss_report(&volume_tiers, tier, placement.as_deref(), volume_config.segment.0)
                        )),
                        None => message.push_str(&format!(
                            "\n  - metadata ({}): {}\n    Restore it from a backup of {}; or, to start over with every segment on home, move {} aside and start with --accept-reset for each file tier (data on faster tiers is lost).",
                            problem.path.display(),
                            sentence(&problem.what),
                            meta_dir.display(),
                            meta_dir.display()
                        )),
                    }
                }
                for (_, path) in &created {
                    let _ = std::fs::remove_file(path);
                }
                return Err(EngineError::Identity(message));
            }
            let metadata_existed = meta_state.checkpoint || meta_state.journal;
            let cache = volume_config
                .cache
                .as_ref()
                .map(|cache| {
                    let key = format!("volume {:?}", volume_config.name);
                    let mut options = cache.options(&key)?;
                    options.priors = emulated_priors(config, volume_config, &options.tier);
                    options.smr = config.smr_staging(&key, volume_config, cache)?;
                    Ok(options)
                })
                .transpose()
                .map_err(|message: String| EngineError::Volume {
                    volume: volume_config.name.clone(),
                    source: VolumeError::Invalid(message),
                })?;
            let home_smr = volume_config
                .tiers
                .last()
                .and_then(|home| config.tiers.iter().find(|tier| &tier.name == home))
                .and_then(|home| {
                    home.smr_geometry()
                        .map(|geometry| (home.name.clone(), geometry))
                });
            match (&home_smr, cache.as_ref().and_then(|cache| cache.smr)) {
                (Some((home, _)), Some(staging)) => tracing::info!(
                    volume = %volume_config.name,
                    home = %home,
                    band_bytes = staging.band_bytes,
                    first_band_offset_bytes = staging.first_band_offset_bytes,
                    "SMR home: every write is staged on the cache tier, home gets whole-band rewrites"
                ),
                (Some((home, _)), None) => tracing::warn!(
                    volume = %volume_config.name,
                    home = %home,
                    "home tier is a drive-managed SMR disk but this volume has no SMR staging: small writes reach the drive's media cache and its cleaning will stall reads (docs/engine/smr.md; a cache volume over it stages them)"
                ),
                _ => {}
            }
            let (volume, notes) = Volume::open_with_cache(
                volume_options(volume_config),
                specs,
                &meta_dir,
                clock.clone(),
                cache,
            )
            .map_err(|source| EngineError::Volume {
                volume: volume_config.name.clone(),
                source,
            })?;
            if metadata_existed && identity.is_none() {
                check_created_tiers(&volume, &created, &meta_dir)?;
            }
            for problem in &problems {
                let Some(tier) = &problem.tier else { continue };
                let index = volume_config
                    .tiers
                    .iter()
                    .position(|name| name == tier)
                    .unwrap_or(0);
                let report = loss_report(
                    &volume_tiers,
                    tier,
                    placement.as_deref(),
                    volume_config.segment.0,
                );
                let forgotten =
                    volume
                        .forget_tier(index)
                        .map_err(|source| EngineError::Volume {
                            volume: volume_config.name.clone(),
                            source,
                        })?;
                tracing::warn!(
                    volume = %volume_config.name,
                    tier = %tier,
                    path = %problem.path.display(),
                    difference = %problem.what,
                    lost = %report,
                    segments_placed_on_home_again = forgotten.len(),
                    "accept-reset: tier identity did not match; starting anyway as the operator asked"
                );
            }
            if identity.is_none() && metadata_existed {
                tracing::info!(
                    volume = %volume_config.name,
                    "identity: metadata from before tier identities; stamping its tier files now"
                );
            }
            stamp_identity(volume_config, &meta_dir, identity, &volume_tiers)?;
            if let (true, Some(cache)) = (volume_config.default_cache, &volume_config.cache) {
                tracing::info!(
                    volume = %volume_config.name,
                    tier = %cache.tier,
                    mode = %cache.mode,
                    "default placement: no policy or cache given, so the fast tier is an adaptive cache (write [volume.policy] to tier segments instead)"
                );
            }
            for note in notes {
                tracing::info!(volume = %volume_config.name, note = %note, "recovery");
            }
            for warning in volume.status().warnings {
                tracing::warn!(volume = %volume_config.name, warning = %warning, "recovery");
            }
            volumes.push(Arc::new(volume));
        }
        Ok(Engine {
            volumes,
            tiers,
            runners: Vec::new(),
            _meta_locks: meta_locks,
        })
    }

    /// Starts each volume's policy and copier threads.
    pub fn start(&mut self, config: &Config, clock: Arc<dyn Clock>) {
        for (volume, volume_config) in self.volumes.iter().zip(&config.volumes) {
            let copiers =
                volume_config.migration_chunks_in_flight * volume_config.max_concurrent_moves;
            self.runners
                .push(VolumeRunner::start(volume.clone(), clock.clone(), copiers));
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
            if let Err(error) = volume.flush().and_then(|()| volume.final_checkpoint()) {
                tracing::error!(volume = %volume.name(), error = %error, "shutdown");
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// Adaptive admission's priors for a cache volume: the service times and
/// peak capacity of idle copies of the emulated tiers' models (`model = ...`, with
/// their `model_params` or `model_file` overrides), the core's
/// generic prior for a tier that is not emulated.
fn emulated_priors(
    config: &Config,
    volume: &crate::config::VolumeConfig,
    cache_tier: &str,
) -> tierd_core::cache::DevicePriors {
    let mut priors = tierd_core::cache::DevicePriors::default();
    let home_tier = volume.tiers.last().map(String::as_str).unwrap_or_default();
    for (name, prior, write, capacity) in [
        (
            home_tier,
            &mut priors.home,
            &mut priors.home_write,
            &mut priors.home_capacity,
        ),
        (
            cache_tier,
            &mut priors.fast,
            &mut priors.fast_write,
            &mut priors.fast_capacity,
        ),
    ] {
        // The model with the tier's overrides (a fitted disk's own).
        let Some(Ok(mut model)) = config
            .tiers
            .iter()
            .find(|tier| tier.name == name)
            .and_then(|tier| tier.build_model(None, 1))
        else {
            continue;
        };
        if let Some(((small, small_ns), (large, large_ns))) =
            tierd_device::probe_read_service(model.as_mut())
        {
            *prior = tierd_core::cache::ServicePrior::from_two(small, small_ns, large, large_ns);
        }
        if let Some(((small, small_ns), (large, large_ns))) =
            tierd_device::probe_service(model.as_mut(), tierd_common::op::Op::Write)
        {
            *write = Some(tierd_core::cache::ServicePrior::from_two(
                small, small_ns, large, large_ns,
            ));
        }
        if let Some(((small, small_ns), (large, large_ns))) =
            tierd_device::probe_capacity(model.as_mut())
        {
            *capacity = Some(tierd_core::cache::ServicePrior::from_two(
                small, small_ns, large, large_ns,
            ));
        }
    }
    priors
}
