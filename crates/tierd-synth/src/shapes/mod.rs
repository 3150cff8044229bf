//! Generated workload shapes: the kinds of heat the calibrated presets do
//! not cover, for evaluating placement policies across kinds of workload
//! (issue 14 §2). Each shape is a [`Preset`] of the same model and is
//! produced by the same [`crate::Generator`] (seeded, deterministic); it is
//! calibrated to nothing, so it has no targets and its label says
//! *synthetic (generated shape …)*, never a real trace.
//!
//! Sizes: volumes of 32–64 GiB, one hour, 60–120 requests/s (≤ ~0.5 M
//! requests), so the `hdd-ssd` home (Savvio 10K.4) is busy but not
//! saturated at ×1. `docs/synth.md` ("Generated shapes") describes each.

use crate::model::{Arrival, Background, Model, SizeWeight, Span, SpikeClass, VolumeSpikes};
use crate::presets::{BACKGROUND, CLASS, FLAT, MODEL};
use crate::targets::Targets;
use crate::Preset;

const GIB: u64 = 1 << 30;
const GIB_F: f64 = GIB as f64;
const MIB_F: f64 = (1u64 << 20) as f64;
const MINUTE_S: f64 = 60.0;

/// What a shape's `source` says (the label uses it to tell shapes apart).
pub const SHAPE_SOURCE: &str = "generated shape";

/// The prefix that names a shape wherever a preset name is accepted
/// (`tierd sim --synth shape:walking`).
pub const SHAPE_PREFIX: &str = "shape:";

const HOUR: Model = Model {
    window_hours: 1.0,
    recurrence_hours: 1.0,
    ..MODEL
};

const fn shape(
    name: &'static str,
    description: &'static str,
    volume_bytes: u64,
    model: Model,
) -> Preset {
    Preset {
        name,
        description,
        volume_name: name,
        volume_bytes,
        default_hours: 1.0,
        window: "one hour, busy throughout (a generated shape has no original trace)",
        source: SHAPE_SOURCE,
        targets: Targets::NONE,
        model,
    }
}

/// Many short concentrations (seconds to a minute) at scattered places,
/// under bursts of the total rate: VMs booting at once.
const BOOT_STORM: Preset = shape(
    "boot-storm",
    "many short concentrations (2-60 s each, 16-128 MiB wide) at scattered places, under bursts of the total rate",
    32 * GIB,
    Model {
        window_mean_iops: 90.0,
        window_peak_iops: 140.0,
        quiet_mean_iops: 90.0,
        volume_spikes: VolumeSpikes {
            count: 6,
            start_fraction: Span::new(0.0, 0.95),
            onset_s: Span::new(5.0, 20.0),
            plateau_s: Span::new(30.0, 90.0),
            decay_s: Span::new(10.0, 30.0),
        },
        background: Background {
            write_fraction: 0.3,
            sequential_probability: 0.1,
            ..BACKGROUND
        },
        spike_classes: &[SpikeClass {
            name: "boot concentration",
            arrival: Arrival::Stratified,
            concurrent: 6.0,
            onset_s: Span::new(1.0, 5.0),
            plateau_s: Span::new(2.0, 45.0),
            decay_s: Span::new(1.0, 10.0),
            peak_share: Span::new(0.06, 0.14),
            width_bytes: Span::new(16.0 * MIB_F, 128.0 * MIB_F),
            write_fraction: 0.2,
            sequential_probability: 0.5,
            ..CLASS
        }],
        max_spike_share: 0.8,
        ..HOUR
    },
);

/// One concentration that walks across the volume a segment at a time.
const WALKING: Preset = shape(
    "walking",
    "one concentration (256-512 MiB, ~80% of the IO) that steps to the adjacent 1 GiB segment every 1-2 minutes",
    64 * GIB,
    Model {
        window_mean_iops: 100.0,
        window_peak_iops: 100.0,
        quiet_mean_iops: 100.0,
        background: Background {
            write_fraction: 0.3,
            sequential_probability: 0.1,
            ..BACKGROUND
        },
        spike_classes: &[SpikeClass {
            name: "walking concentration",
            arrival: Arrival::Persistent,
            concurrent: 1.0,
            peak_share: Span::new(0.8, 0.8),
            width_bytes: Span::new(256.0 * MIB_F, 512.0 * MIB_F),
            drift_fraction: 1.0,
            drift_interval_s: Span::new(MINUTE_S, 2.0 * MINUTE_S),
            drift_step_bytes: GIB,
            drift_range_bytes: 0.0,
            write_fraction: 0.3,
            sequential_probability: 0.2,
            ..CLASS
        }],
        max_spike_share: 0.9,
        ..HOUR
    },
);

/// Long, write-heavy spikes (tens of minutes) beside short random noise.
const LONG_WRITE_SPIKES: Preset = shape(
    "long-write-spikes",
    "write-heavy spikes of 20-40 minutes (85% writes, 0.5-1 GiB) beside short read noise (5-30 s, 8-64 MiB)",
    48 * GIB,
    Model {
        window_mean_iops: 100.0,
        window_peak_iops: 100.0,
        quiet_mean_iops: 100.0,
        background: Background {
            write_fraction: 0.2,
            sequential_probability: 0.05,
            ..BACKGROUND
        },
        spike_classes: &[
            SpikeClass {
                name: "long write spike",
                arrival: Arrival::Stratified,
                concurrent: 1.5,
                onset_s: Span::new(60.0, 180.0),
                plateau_s: Span::new(20.0 * MINUTE_S, 40.0 * MINUTE_S),
                decay_s: Span::new(60.0, 180.0),
                peak_share: Span::new(0.35, 0.5),
                width_bytes: Span::new(0.5 * GIB_F, 1.0 * GIB_F),
                write_fraction: 0.85,
                sequential_probability: 0.2,
                ..CLASS
            },
            SpikeClass {
                name: "short noise",
                arrival: Arrival::Stratified,
                concurrent: 2.0,
                onset_s: Span::new(1.0, 3.0),
                plateau_s: Span::new(5.0, 30.0),
                decay_s: Span::new(1.0, 5.0),
                peak_share: Span::new(0.04, 0.08),
                width_bytes: Span::new(8.0 * MIB_F, 64.0 * MIB_F),
                write_fraction: 0.1,
                sequential_probability: 0.0,
                ..CLASS
            },
        ],
        max_spike_share: 0.85,
        ..HOUR
    },
);

/// Load dominated by short spikes of tens of seconds.
const SHORT_SPIKES: Preset = shape(
    "short-spikes",
    "~75% of the IO in short spikes (10-60 s, 64-256 MiB, three at a time), the rest uniform",
    32 * GIB,
    Model {
        window_mean_iops: 100.0,
        window_peak_iops: 100.0,
        quiet_mean_iops: 100.0,
        background: Background {
            write_fraction: 0.3,
            sequential_probability: 0.05,
            ..BACKGROUND
        },
        spike_classes: &[SpikeClass {
            name: "short spike",
            arrival: Arrival::Stratified,
            concurrent: 3.0,
            onset_s: Span::new(2.0, 5.0),
            plateau_s: Span::new(10.0, 60.0),
            decay_s: Span::new(2.0, 10.0),
            peak_share: Span::new(0.2, 0.3),
            width_bytes: Span::new(64.0 * MIB_F, 256.0 * MIB_F),
            write_fraction: 0.3,
            sequential_probability: 0.2,
            ..CLASS
        }],
        max_spike_share: 0.8,
        ..HOUR
    },
);

/// Uniform random over the whole volume: no hot spot at all.
const NO_HEAT: Preset = shape(
    "no-heat",
    "uniform random requests over the whole volume, no hot spot, no sequential runs",
    32 * GIB,
    Model {
        window_mean_iops: 60.0,
        window_peak_iops: 60.0,
        quiet_mean_iops: 60.0,
        volume_spikes: FLAT,
        background: Background {
            write_fraction: 0.3,
            sequential_probability: 0.0,
            ..BACKGROUND
        },
        spike_classes: &[],
        ..HOUR
    },
);

/// A skewed but wide working set: Zipf over many regions spread over the
/// volume, far larger than a fast tier of a few percent.
const LARGE_WORKING_SET: Preset = shape(
    "large-working-set",
    "Zipf (exponent 0.7) over 400 regions of 16-128 MiB spread over 64 GiB (~28 GiB of regions), 95% of the IO, requests of 4-128 KiB; the hour touches ~6 GiB",
    64 * GIB,
    Model {
        window_mean_iops: 80.0,
        window_peak_iops: 80.0,
        quiet_mean_iops: 80.0,
        background: Background {
            write_fraction: 0.3,
            area: Span::new(0.0, 1.0),
            warm_regions: 400,
            warm_area: Span::new(0.0, 1.0),
            warm_share: 0.95,
            warm_zipf_exponent: 0.7,
            warm_width_bytes: Span::new(16.0 * MIB_F, 128.0 * MIB_F),
            sequential_probability: 0.05,
        },
        spike_classes: &[],
        sizes: WIDE_SIZES,
        ..HOUR
    },
);

/// Larger requests than the MSR mix (mean ~50 KiB), so an hour touches a
/// working set of several GiB.
const WIDE_SIZES: &[SizeWeight] = &[
    SizeWeight {
        bytes: 4096,
        weight: 30.0,
    },
    SizeWeight {
        bytes: 16384,
        weight: 20.0,
    },
    SizeWeight {
        bytes: 65536,
        weight: 40.0,
    },
    SizeWeight {
        bytes: 131072,
        weight: 10.0,
    },
];

static SHAPES: [Preset; 6] = [
    BOOT_STORM,
    WALKING,
    LONG_WRITE_SPIKES,
    SHORT_SPIKES,
    NO_HEAT,
    LARGE_WORKING_SET,
];

pub(crate) fn all() -> &'static [Preset] {
    &SHAPES
}

#[cfg(test)]
mod tests;
