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

/// The band size of tier `tier`'s model when it is a drive-managed SMR
/// disk (its preset with the tier's `[tier.model]` overrides), else `None`.
pub fn smr_band_bytes(config: &SimConfig, tier: usize) -> Result<Option<u64>, SimError> {
    use serde::Deserialize;
    use tierd_device::model::smr::{SmrConfig, SmrOverrides};
    let spec = &config.stack.tiers[tier];
    let Some(mut smr) = SmrConfig::preset(spec.device) else {
        return Ok(None);
    };
    if let Some(table) = &spec.model {
        SmrOverrides::deserialize(table.clone())
            .map_err(|error| SimError::Device {
                tier: spec.name.clone(),
                device: spec.device.name().to_string(),
                message: format!("[tier.model]: {error}"),
            })?
            .apply(&mut smr);
    }
    Ok(Some(smr.band_bytes))
}

/// How long one segment's copy from tier `from` to tier `to` takes on idle
/// copies of the stack's device models, as the simulator's mover copies it
/// (`migration.chunk_bytes` chunks, `chunks_in_flight` at a time, each read
/// from the source, then written to the target), ns. What a policy is told
/// a move costs before it has measured one
/// ([`tierd_policy::view::MigrationStats::device_move_ns`]): ATSMF's first
/// decisions on `hdd-ssd` then see a disk's copy time, not a memory tier's.
/// The models are fresh (no user IO): a lower bound of a copy under load.
pub fn segment_copy_ns(config: &SimConfig, from: usize, to: usize) -> Result<u64, SimError> {
    use tierd_device::{Completion, DeviceIo};
    use tierd_trace::Op;
    let mut devices = build_devices(config)?;
    let segment_bytes = config.segment_bytes;
    let chunk_bytes = config.stack.migration.chunk_bytes.clamp(1, segment_bytes);
    let chunks = segment_bytes.div_ceil(chunk_bytes);
    let in_flight = u64::from(config.stack.migration.chunks_in_flight.max(1));
    // The segment at the start of each device (every model holds it).
    let chunk = |index: u64| DeviceIo {
        id: index,
        op: Op::Read,
        offset_bytes: index * chunk_bytes,
        length_bytes: chunk_bytes.min(segment_bytes - index * chunk_bytes),
        background: true,
    };
    let (mut now_ns, mut next, mut landed, mut copying) = (0u64, 0u64, 0u64, 0u64);
    let mut done: Vec<Completion> = Vec::new();
    while landed < chunks {
        while copying < in_flight && next < chunks {
            devices[from].submit(now_ns, chunk(next));
            next += 1;
            copying += 1;
        }
        let due = [from, to]
            .iter()
            .filter_map(|tier| devices[*tier].next_event_ns())
            .min();
        let Some(due) = due else {
            return Err(SimError::option(
                "devices",
                "a device model stopped with IO outstanding while timing a segment copy",
            ));
        };
        now_ns = now_ns.max(due);
        devices[from].advance(now_ns, &mut done);
        for read in done.drain(..) {
            let io = DeviceIo {
                op: Op::Write,
                ..chunk(read.id)
            };
            devices[to].submit(now_ns, io);
        }
        devices[to].advance(now_ns, &mut done);
        for _ in done.drain(..) {
            landed += 1;
            copying -= 1;
        }
    }
    Ok(now_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::TierStack;

    fn copy_s(preset: &str) -> f64 {
        let config = SimConfig::new(TierStack::preset(preset).unwrap(), 600 << 30);
        segment_copy_ns(&config, 1, 0).unwrap() as f64 / 1e9
    }

    #[test]
    fn a_segment_copy_takes_the_time_of_the_devices_it_runs_between() {
        // 1 GiB from a Savvio 10K.4 (~150 MB/s outer tracks) to an X25-E
        // (~170 MB/s writes): several seconds, not the 1 GB/s prior's 1.07 s.
        let disk = copy_s("hdd-ssd");
        assert!((4.0..20.0).contains(&disk), "hdd -> ssd {disk} s");
        // From a P3700 (~2 GB/s reads) into RAM: well under a second.
        let flash = copy_s("ssd-mem");
        assert!(flash < 1.0, "ssd -> memory {flash} s");
        assert!(disk > 5.0 * flash);
    }
}
