//! The workload model a preset is made of, after Bodik et al., "Characterizing,
//! modeling, and generating workload spikes for stateful services" (SoCC 2010):
//! a total request rate shaped by *volume spikes* (the workload grows and
//! shrinks), and a spatial distribution shaped by *data spikes* (hot spots that
//! take a share of the requests for a while). Each spike has an onset (linear
//! ramp up), a plateau and a decay (linear ramp down), a location and a width;
//! unlike Bodik's model, a data spike may also drift to the adjacent segment
//! every few minutes (ATSMF §3.4, type (b) concentrations) and may come back
//! to a place an earlier spike used (ATSMF Table 1, "arbitrary LBA" share).
//!
//! Every field is plain data so `--list --json` can show a preset's model.

use serde::Serialize;
use tierd_common::rng::Rng;

/// A range `[low, high]` a value is drawn from. `low == high` is a fixed value.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Span {
    pub low: f64,
    pub high: f64,
}

impl Span {
    pub const fn new(low: f64, high: f64) -> Self {
        Self { low, high }
    }

    pub const fn fixed(value: f64) -> Self {
        Self {
            low: value,
            high: value,
        }
    }

    /// Uniform draw.
    pub fn draw(&self, rng: &mut impl Rng) -> f64 {
        self.at(rng.next_f64())
    }

    /// The value at quantile `fraction` (0..=1) of the uniform distribution.
    pub fn at(&self, fraction: f64) -> f64 {
        self.low + (self.high - self.low) * fraction.clamp(0.0, 1.0)
    }

    /// The value at quantile `fraction` of the log-uniform distribution
    /// (for sizes, which spread over orders of magnitude). Needs `low > 0`.
    pub fn at_log(&self, fraction: f64) -> f64 {
        if self.low <= 0.0 || self.high <= self.low {
            return self.at(fraction);
        }
        let ratio = self.high / self.low;
        self.low * ratio.powf(fraction.clamp(0.0, 1.0))
    }

    pub fn mean(&self) -> f64 {
        (self.low + self.high) / 2.0
    }
}

/// One entry of a request size mix.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SizeWeight {
    pub bytes: u64,
    pub weight: f64,
}

/// An MSR Cambridge-like size mix: mostly 4 KiB, a long tail to 64 KiB and a
/// little beyond, some sub-4 KiB requests (the MSR volumes are NTFS volumes
/// traced below the file system; hm_0's real cut is 77% 4 KiB, 4% 512 B).
pub const MSR_SIZES: &[SizeWeight] = &[
    SizeWeight {
        bytes: 512,
        weight: 3.0,
    },
    SizeWeight {
        bytes: 1024,
        weight: 1.0,
    },
    SizeWeight {
        bytes: 2048,
        weight: 1.0,
    },
    SizeWeight {
        bytes: 4096,
        weight: 46.0,
    },
    SizeWeight {
        bytes: 8192,
        weight: 10.0,
    },
    SizeWeight {
        bytes: 12288,
        weight: 2.0,
    },
    SizeWeight {
        bytes: 16384,
        weight: 7.0,
    },
    SizeWeight {
        bytes: 24576,
        weight: 2.0,
    },
    SizeWeight {
        bytes: 32768,
        weight: 8.0,
    },
    SizeWeight {
        bytes: 49152,
        weight: 2.0,
    },
    SizeWeight {
        bytes: 65536,
        weight: 14.0,
    },
    SizeWeight {
        bytes: 131072,
        weight: 3.0,
    },
    SizeWeight {
        bytes: 262144,
        weight: 1.0,
    },
];

/// The size mix of hm_0's real cut (`../shared/traces/msr_cambridge/hm_0-cut-20k.csv`),
/// rounded: 77% 4 KiB, then 32 KiB, 512 B, 8 KiB, 16 KiB, 64 KiB.
pub const HM_0_SIZES: &[SizeWeight] = &[
    SizeWeight {
        bytes: 512,
        weight: 4.1,
    },
    SizeWeight {
        bytes: 1024,
        weight: 1.0,
    },
    SizeWeight {
        bytes: 1536,
        weight: 0.6,
    },
    SizeWeight {
        bytes: 3072,
        weight: 0.7,
    },
    SizeWeight {
        bytes: 4096,
        weight: 76.5,
    },
    SizeWeight {
        bytes: 8192,
        weight: 3.3,
    },
    SizeWeight {
        bytes: 12288,
        weight: 0.8,
    },
    SizeWeight {
        bytes: 16384,
        weight: 2.2,
    },
    SizeWeight {
        bytes: 24576,
        weight: 0.8,
    },
    SizeWeight {
        bytes: 32768,
        weight: 4.7,
    },
    SizeWeight {
        bytes: 65536,
        weight: 0.7,
    },
    SizeWeight {
        bytes: 131072,
        weight: 0.3,
    },
];

/// OLTP (TPC-C-like): 8 KiB database pages, log writes of 4–64 KiB.
pub const OLTP_SIZES: &[SizeWeight] = &[
    SizeWeight {
        bytes: 4096,
        weight: 10.0,
    },
    SizeWeight {
        bytes: 8192,
        weight: 70.0,
    },
    SizeWeight {
        bytes: 16384,
        weight: 8.0,
    },
    SizeWeight {
        bytes: 32768,
        weight: 6.0,
    },
    SizeWeight {
        bytes: 65536,
        weight: 6.0,
    },
];

/// Volume spikes: bumps of the total request rate inside a busy window.
///
/// The generator scales the bumps of each window so that the expected mean
/// rate over the window is [`Model::window_mean_iops`] and the expected
/// busiest minute is [`Model::window_peak_iops`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct VolumeSpikes {
    /// Bumps per window (0: a flat rate at the mean).
    pub count: u32,
    /// Start, as a fraction of the window (0 = window start).
    pub start_fraction: Span,
    pub onset_s: Span,
    pub plateau_s: Span,
    pub decay_s: Span,
}

/// The requests no data spike takes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Background {
    /// Fraction of background requests that are writes.
    pub write_fraction: f64,
    /// The part of the volume (fractions of `volume_bytes`) uniform
    /// background requests fall in: the volume's used area.
    pub area: Span,
    /// Warm regions: fixed for the whole run, placed uniformly in
    /// `warm_area`, with Zipf weights (rank^-exponent). They give the stable
    /// skew a whole-trace top-share sees (and, when small and busy enough,
    /// the small spike regions of metadata and logs), without being spikes.
    pub warm_regions: u32,
    /// Where warm regions are placed (fractions of `volume_bytes`).
    pub warm_area: Span,
    /// Fraction of background requests that go to warm regions.
    pub warm_share: f64,
    pub warm_zipf_exponent: f64,
    /// Warm region widths: spread evenly (log scale) over this span, the
    /// busiest region the narrowest.
    pub warm_width_bytes: Span,
    /// Probability that a request continues where the previous background
    /// request ended (sequential runs).
    pub sequential_probability: f64,
}

/// A new spike place keeps this far from the places of recent spikes
/// (up to a few tries), so "new" means a segment no recent hot spot used.
pub const NEW_PLACE_DISTANCE_BYTES: f64 = 2.0 * (1u64 << 30) as f64;

/// How the spikes of a class are laid out in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    /// Start times stratified over `[-mean life, window)`, one per slot with
    /// a random offset inside it, so the count per window barely varies;
    /// spikes also start before the window so that it opens in mid-activity,
    /// as a cut of a longer trace does.
    Stratified,
    /// `concurrent` spikes already at their plateau when the window opens,
    /// lasting past its end (plateau stretched to the window): the long-lived
    /// hot spots of a busy window.
    Persistent,
    /// `concurrent` lanes; in each, the next spike's onset starts when the
    /// previous spike's decay does and lasts as long, so the lane's share
    /// hands over from one hot spot to the next without a gap. The window
    /// opens inside a plateau.
    Chain,
    /// `concurrent` spikes that start and end inside the window (start
    /// times stratified over the room the window leaves): bursts a window
    /// is known to contain.
    Inside,
}

/// A kind of data spike (hot spot) and how often it happens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SpikeClass {
    pub name: &'static str,
    /// How spikes of this class follow each other in time.
    pub arrival: Arrival,
    /// Spikes alive at once: the expected number for [`Arrival::Stratified`],
    /// the number (rounded) of spikes or lanes for the other arrivals.
    pub concurrent: f64,
    pub onset_s: Span,
    pub plateau_s: Span,
    pub decay_s: Span,
    /// Share of all requests the spike takes at its plateau (uniform;
    /// stratified over a window's spikes of the class).
    pub peak_share: Span,
    /// Width of the hot region (log-uniform; stratified like the share).
    pub width_bytes: Span,
    /// Where new spikes are placed (fractions of `volume_bytes`).
    pub area: Span,
    /// Place each spike inside the live spike of this earlier class (index
    /// into the preset's classes) at its start: a burst within a broad hot
    /// band. `None`: placed in `area`.
    pub inside_class: Option<usize>,
    /// Fraction of spikes that come back to where an earlier spike of this
    /// class started, one that has ended by then (assigned by quota, not coin
    /// flips, so short windows get their share). The rest appear at a new,
    /// uniform place at least [`NEW_PLACE_DISTANCE_BYTES`] from the recent
    /// ones when the area allows.
    pub revisit_fraction: f64,
    /// Fraction of spikes that drift (assigned by quota).
    pub drift_fraction: f64,
    /// Time between two steps of a drifting spike.
    pub drift_interval_s: Span,
    /// Step of a drifting spike (≤ 1 GiB keeps the analysis's concentration
    /// continuous: it moves to the adjacent segment).
    pub drift_step_bytes: u64,
    /// When wider than the spike, a drifting spike walks back and forth
    /// inside a range this wide, from where it starts on the way it first
    /// walks, instead of across the whole volume: a hot area that the
    /// concentration sweeps and keeps coming back over (web_2). 0: the whole
    /// volume.
    pub drift_range_bytes: f64,
    /// A core: `core_share` of the spike's requests fall in the middle
    /// `core_width_fraction` of its width (0 share: uniform over the width).
    pub core_width_fraction: f64,
    pub core_share: f64,
    pub write_fraction: f64,
    pub sequential_probability: f64,
}

/// A whole preset model. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Model {
    /// Busy window: the part of the trace the papers replayed.
    pub window_hours: f64,
    /// The busy window starts again every `recurrence_hours` (≥ the window);
    /// in between only the background runs, at `quiet_mean_iops`.
    pub recurrence_hours: f64,
    pub window_mean_iops: f64,
    /// Expected busiest minute; ≤ the mean means a flat rate.
    pub window_peak_iops: f64,
    pub quiet_mean_iops: f64,
    pub volume_spikes: VolumeSpikes,
    pub background: Background,
    pub spike_classes: &'static [SpikeClass],
    /// Cap on the summed share of all live spikes (the rest is background).
    pub max_spike_share: f64,
    pub sizes: &'static [SizeWeight],
    /// Fraction of requests whose offset is 4 KiB aligned; the rest are 512 B
    /// aligned (000 §5.4: most MSR requests were not 4 KiB aligned).
    pub aligned_4k_fraction: f64,
}

/// The quiet-time rate that makes a long run's mean rate `week_mean_iops`,
/// given a busy window of `window_hours` at `window_mean_iops` every
/// `recurrence_hours`. Never negative.
pub const fn quiet_rate(
    week_mean_iops: f64,
    window_mean_iops: f64,
    window_hours: f64,
    recurrence_hours: f64,
) -> f64 {
    let quiet_hours = recurrence_hours - window_hours;
    if quiet_hours <= 0.0 {
        return window_mean_iops;
    }
    let rate = (week_mean_iops * recurrence_hours - window_mean_iops * window_hours) / quiet_hours;
    if rate < 0.0 {
        0.0
    } else {
        rate
    }
}
