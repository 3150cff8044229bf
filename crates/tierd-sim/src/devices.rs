//! The device models of a tier stack.

use tierd_device::DeviceModel;

use crate::config::SimConfig;
use crate::error::SimError;
use crate::stack::device_name;

/// One model per tier, fastest first, sized to the tier's capacity (home: the
/// volume when no capacity is given).
pub fn build_devices(config: &SimConfig) -> Result<Vec<Box<dyn DeviceModel>>, SimError> {
    let tier = &config.stack.tiers[0];
    Err(SimError::Device {
        tier: tier.name.clone(),
        device: device_name(tier.device),
        message: "device presets are not available in this build yet".to_string(),
    })
}
