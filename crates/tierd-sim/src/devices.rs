//! The device models of a tier stack.

use tierd_common::rng::SeededRng;
use tierd_device::DeviceModel;

use crate::config::SimConfig;
use crate::error::SimError;

/// One model per tier, fastest first: the tier's preset with its
/// `[tier.model]` overrides, `capacity` bytes addressable (home without a
/// capacity: the preset's own size, or the volume when that is larger), and
/// a seed derived from the run's seed and the tier index.
pub fn build_devices(config: &SimConfig) -> Result<Vec<Box<dyn DeviceModel>>, SimError> {
    let root = SeededRng::new(config.seed);
    config
        .stack
        .tiers
        .iter()
        .enumerate()
        .map(|(index, tier)| {
            let capacity = config.tier_capacity_bytes(index);
            let seed = root.derive(index as u64).seed();
            tier.device
                .build_with(Some(capacity), tier.model.clone(), seed)
                .map_err(|error| SimError::Device {
                    tier: tier.name.clone(),
                    device: tier.device.name().to_string(),
                    message: error.to_string(),
                })
        })
        .collect()
}
