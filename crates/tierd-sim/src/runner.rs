//! Building a run from settings: the device models of the tier stack and
//! the strategy's policy or cache.

use tierd_policy::cache::{build_cache, MAX_CAPACITY_PAGES, PAGE_BYTES};
use tierd_trace::TraceReader;

use crate::config::{SimConfig, Strategy};
use crate::engine::{run_with, Controller, Progress};
use crate::error::SimError;
use crate::result::RunResult;

/// The policy or page cache `strategy` names, sized for `config`.
pub fn build_controller(config: &SimConfig, strategy: &Strategy) -> Result<Controller, SimError> {
    match strategy {
        Strategy::Tiering(policy) => Ok(Controller::Policy(tierd_policy::build_policy(policy))),
        Strategy::Cache(kind) => {
            let cache_bytes = match config.cache_bytes {
                Some(bytes) => bytes,
                None => config.tier_capacity_bytes(0),
            };
            let capacity_pages = cache_bytes / PAGE_BYTES;
            if capacity_pages == 0 || capacity_pages > MAX_CAPACITY_PAGES {
                return Err(SimError::option(
                    "cache_bytes",
                    format!(
                        "{cache_bytes} bytes is {capacity_pages} pages; a cache holds 1 to {MAX_CAPACITY_PAGES} 4KiB pages"
                    ),
                ));
            }
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
            Ok(Controller::Cache(build_cache(*kind, capacity_pages)))
        }
    }
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
