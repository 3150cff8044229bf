//! Building a run from settings: the device models of the tier stack and
//! the strategy's policy or cache.

use tierd_core::cache::{AdmissionKind, BlockCache, CacheSettings, DevicePriors, ServicePrior};
use tierd_policy::cache::{CacheKind, MAX_CAPACITY_PAGES};
use tierd_trace::TraceReader;

use crate::config::{SimConfig, Strategy};
use crate::engine::{run_with, Controller, Progress};
use crate::error::SimError;
use crate::result::RunResult;

/// The policy or block cache `strategy` names, sized for `config`. A cache
/// is `tierd_core::cache::BlockCache` (the live engine's cache core, without
/// a journal) with `cache_bytes / block_bytes` slots and the strategy's
/// eviction policy; the rest of its settings are `config.stack.cache`.
pub fn build_controller(config: &SimConfig, strategy: &Strategy) -> Result<Controller, SimError> {
    match strategy {
        Strategy::Tiering(policy) => Ok(Controller::Policy(tierd_policy::build_policy(policy))),
        Strategy::Cache(kind) => Ok(Controller::Cache(Box::new(build_cache(config, *kind)?))),
        Strategy::Adaptive => Ok(Controller::Cache(Box::new(build_adaptive(config)?))),
    }
}

/// The `adaptive` strategy's cache: its eviction order
/// (`tierd_core::cache::adaptive::EVICTION`), adaptive admission,
/// and for priors the service times and peak capacity of idle copies of
/// the stack's models.
pub fn build_adaptive(config: &SimConfig) -> Result<BlockCache, SimError> {
    let mut devices = crate::devices::build_devices(config)?;
    let mut priors = DevicePriors::default();
    let home = devices.len() - 1;
    for (tier, prior, write, capacity) in [
        (
            home,
            &mut priors.home,
            &mut priors.home_write,
            &mut priors.home_capacity,
        ),
        (
            0,
            &mut priors.fast,
            &mut priors.fast_write,
            &mut priors.fast_capacity,
        ),
    ] {
        if let Some(((small, small_ns), (large, large_ns))) =
            tierd_device::probe_read_service(devices[tier].as_mut())
        {
            *prior = ServicePrior::from_two(small, small_ns, large, large_ns);
        }
        if let Some(((small, small_ns), (large, large_ns))) =
            tierd_device::probe_service(devices[tier].as_mut(), tierd_common::op::Op::Write)
        {
            *write = Some(ServicePrior::from_two(small, small_ns, large, large_ns));
        }
        if let Some(((small, small_ns), (large, large_ns))) =
            tierd_device::probe_capacity(devices[tier].as_mut())
        {
            *capacity = Some(ServicePrior::from_two(small, small_ns, large, large_ns));
        }
    }
    build_cache_with(
        config,
        tierd_core::cache::adaptive::EVICTION,
        AdmissionKind::Adaptive,
        priors,
    )
}

/// The block cache of a `kind` strategy run with `config`.
pub fn build_cache(config: &SimConfig, kind: CacheKind) -> Result<BlockCache, SimError> {
    let admission = config.stack.cache.admission;
    build_cache_with(config, kind, admission, DevicePriors::default())
}

fn build_cache_with(
    config: &SimConfig,
    kind: CacheKind,
    admission: AdmissionKind,
    priors: DevicePriors,
) -> Result<BlockCache, SimError> {
    let cache_bytes = match config.cache_bytes {
        Some(bytes) => bytes,
        None => config.tier_capacity_bytes(0),
    };
    if cache_bytes > config.tier_capacity_bytes(0) {
        return Err(SimError::option(
            "cache_bytes",
            format!(
                "{cache_bytes} bytes do not fit the fast tier {:?} ({} bytes)",
                config.stack.tiers[0].name,
                config.tier_capacity_bytes(0)
            ),
        ));
    }
    let cache = &config.stack.cache;
    let slots = cache_bytes / cache.block_bytes;
    let most_slots = MAX_CAPACITY_PAGES.min(u64::from(u32::MAX));
    if slots < 2 || slots > most_slots {
        return Err(SimError::option(
            "cache_bytes",
            format!(
                "{cache_bytes} bytes is {slots} cache blocks of {} bytes; a cache holds 2 to {most_slots} blocks (change the cache size or --cache-block)",
                cache.block_bytes
            ),
        ));
    }
    let mut settings = CacheSettings::new(
        config.volume_bytes,
        cache.block_bytes,
        slots as u32,
        cache.mode,
    );
    settings.policy = kind;
    settings.admission = admission;
    settings.priors = priors;
    settings.sequential_cutoff_bytes = cache.sequential_cutoff_bytes;
    // The simulator keeps no metadata: a released slot is free at once.
    settings.journal = false;
    // A drive-managed SMR home: stage every write, destage whole bands
    // (docs/engine/smr.md). Bands start at byte 0 of the model (the volume
    // starts at byte 0 of home).
    if cache.smr_staging {
        if let Some(band_bytes) = crate::devices::smr_band_bytes(config, config.stack.home())? {
            settings.smr = Some(tierd_core::cache::SmrStaging::new(band_bytes, 0));
        }
    }
    BlockCache::new(settings).map_err(|message| SimError::option("cache_bytes", message))
}

/// Runs `strategy` over `reader` on the device models of `config.stack`
/// (at the policy's paper period when `config.period_per_policy`).
pub fn run(
    config: &SimConfig,
    strategy: &Strategy,
    reader: &mut dyn TraceReader,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunResult, SimError> {
    let config = &*config.for_strategy(strategy);
    config.validate()?;
    let controller = build_controller(config, strategy)?;
    let devices = crate::devices::build_devices(config)?;
    run_with(
        config,
        strategy.name(),
        controller,
        devices,
        reader,
        progress,
    )
}
