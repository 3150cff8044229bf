//! Calibration targets: the published figures a preset is tuned to, each with
//! where it was published, and the analysis figure that measures it.

use std::fmt::Write as _;

use serde::Serialize;
use tierd_common::units::Bytes;

/// Over what stretch of generated time a target holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// A run of the preset's `default_hours` (the busy window the papers
    /// replayed), analysed with the default `AnalyzeOptions`.
    Window,
    /// A week-long run (`--hours 168`): the busy window recurs and quiet time
    /// fills the rest.
    Week,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Window => "window",
            Scope::Week => "week",
        }
    }
}

/// One calibration figure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Target {
    /// In the unit the analysis reports (bytes, a fraction 0..=1, iops, seconds).
    pub value: f64,
    /// Paper and table (or file) the value comes from, and any conversion.
    pub source: &'static str,
    pub scope: Scope,
    /// Why the model does not reach this target, when it does not (the
    /// calibration test expects it to miss, and `--list` says so).
    pub unreachable: Option<&'static str>,
}

impl Target {
    pub const fn window(value: f64, source: &'static str) -> Option<Self> {
        Some(Self {
            value,
            source,
            scope: Scope::Window,
            unreachable: None,
        })
    }

    pub const fn week(value: f64, source: &'static str) -> Option<Self> {
        Some(Self {
            value,
            source,
            scope: Scope::Week,
            unreachable: None,
        })
    }

    /// A window target the model cannot reach, with the reason.
    pub const fn unreachable(
        value: f64,
        source: &'static str,
        reason: &'static str,
    ) -> Option<Self> {
        Some(Self {
            value,
            source,
            scope: Scope::Window,
            unreachable: Some(reason),
        })
    }
}

/// The metrics a preset can be calibrated to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    VolumeBytes,
    PeakIops,
    MeanIops,
    Top1Share,
    Top10Share,
    SpikeRegionMeanBytes,
    SpikeRegionMaxBytes,
    ConcentrationMeanDurationS,
    ArbitraryShare,
    WriteRatio,
    RequestsPerSecond,
}

/// How a metric's value reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Iops,
    Fraction,
    Seconds,
}

impl Metric {
    pub const ALL: [Metric; 11] = [
        Metric::VolumeBytes,
        Metric::PeakIops,
        Metric::MeanIops,
        Metric::Top1Share,
        Metric::Top10Share,
        Metric::SpikeRegionMeanBytes,
        Metric::SpikeRegionMaxBytes,
        Metric::ConcentrationMeanDurationS,
        Metric::ArbitraryShare,
        Metric::WriteRatio,
        Metric::RequestsPerSecond,
    ];

    /// The field name in [`Targets`].
    pub fn name(self) -> &'static str {
        match self {
            Metric::VolumeBytes => "volume_bytes",
            Metric::PeakIops => "peak_iops",
            Metric::MeanIops => "mean_iops",
            Metric::Top1Share => "top1_share",
            Metric::Top10Share => "top10_share",
            Metric::SpikeRegionMeanBytes => "spike_region_mean_bytes",
            Metric::SpikeRegionMaxBytes => "spike_region_max_bytes",
            Metric::ConcentrationMeanDurationS => "concentration_mean_duration_s",
            Metric::ArbitraryShare => "arbitrary_share",
            Metric::WriteRatio => "write_ratio",
            Metric::RequestsPerSecond => "requests_per_second",
        }
    }

    /// Where `tierd trace analyze --json` reports the measured value (dotted
    /// path into the JSON of `tierd_analysis::analyze::Analysis`; definitions
    /// in `docs/analysis.md`).
    pub fn analysis_json_path(self) -> &'static str {
        match self {
            Metric::VolumeBytes => "volume_bytes",
            Metric::PeakIops => "peak_iops",
            Metric::MeanIops => "mean_iops",
            Metric::Top1Share => "top1_share",
            Metric::Top10Share => "top10_share",
            Metric::SpikeRegionMeanBytes => "spikes.regions.mean_bytes",
            Metric::SpikeRegionMaxBytes => "spikes.regions.max_bytes",
            Metric::ConcentrationMeanDurationS => "concentrations.mean_duration_s",
            Metric::ArbitraryShare => "concentrations.arbitrary_share",
            Metric::WriteRatio => "write_ratio",
            Metric::RequestsPerSecond => "mean_iops",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            Metric::VolumeBytes | Metric::SpikeRegionMeanBytes | Metric::SpikeRegionMaxBytes => {
                Unit::Bytes
            }
            Metric::PeakIops | Metric::MeanIops | Metric::RequestsPerSecond => Unit::Iops,
            Metric::Top1Share
            | Metric::Top10Share
            | Metric::ArbitraryShare
            | Metric::WriteRatio => Unit::Fraction,
            Metric::ConcentrationMeanDurationS => Unit::Seconds,
        }
    }

    /// A value of this metric for people: `600.00 GiB`, `95.0%`, `86.0 min`.
    pub fn format_value(self, value: f64) -> String {
        match self.unit() {
            Unit::Bytes => {
                if value.is_finite() && value >= 0.0 {
                    Bytes(value.round() as u64).to_string()
                } else {
                    format!("{value}")
                }
            }
            Unit::Iops => format!("{value:.1} iops"),
            Unit::Fraction => format!("{:.1}%", value * 100.0),
            Unit::Seconds => format!("{:.1} min", value / 60.0),
        }
    }
}

/// A preset's calibration targets; `None` where nothing was published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Targets {
    /// LUN size (000 Table 2 / 002 Table 4); the analysis is given it.
    pub volume_bytes: Option<Target>,
    /// Busiest 60 s period, requests / 60 (000 Table 2 "peak iops").
    pub peak_iops: Option<Target>,
    /// Mean rate over the busy window (000 Table 4 lower bound, or assumed).
    pub mean_iops: Option<Target>,
    /// IO share of the busiest 1% / 10% of 1 GiB segments (000 Table 3).
    pub top1_share: Option<Target>,
    pub top10_share: Option<Target>,
    /// Spike region size, mean / max (000 Table 6).
    pub spike_region_mean_bytes: Option<Target>,
    pub spike_region_max_bytes: Option<Target>,
    /// Mean IO concentration duration (002 Table 1).
    pub concentration_mean_duration_s: Option<Target>,
    /// Share of concentrations at arbitrary LBAs (002 Table 1).
    pub arbitrary_share: Option<Target>,
    /// Write requests / requests (002 Table 1).
    pub write_ratio: Option<Target>,
    /// Requests in the week / 604800 (S3-FIFO artifact counts).
    pub requests_per_second: Option<Target>,
}

impl Targets {
    /// No target at all (a base for struct update syntax in constants).
    pub const NONE: Targets = Targets {
        volume_bytes: None,
        peak_iops: None,
        mean_iops: None,
        top1_share: None,
        top10_share: None,
        spike_region_mean_bytes: None,
        spike_region_max_bytes: None,
        concentration_mean_duration_s: None,
        arbitrary_share: None,
        write_ratio: None,
        requests_per_second: None,
    };

    pub fn get(&self, metric: Metric) -> Option<&Target> {
        match metric {
            Metric::VolumeBytes => self.volume_bytes.as_ref(),
            Metric::PeakIops => self.peak_iops.as_ref(),
            Metric::MeanIops => self.mean_iops.as_ref(),
            Metric::Top1Share => self.top1_share.as_ref(),
            Metric::Top10Share => self.top10_share.as_ref(),
            Metric::SpikeRegionMeanBytes => self.spike_region_mean_bytes.as_ref(),
            Metric::SpikeRegionMaxBytes => self.spike_region_max_bytes.as_ref(),
            Metric::ConcentrationMeanDurationS => self.concentration_mean_duration_s.as_ref(),
            Metric::ArbitraryShare => self.arbitrary_share.as_ref(),
            Metric::WriteRatio => self.write_ratio.as_ref(),
            Metric::RequestsPerSecond => self.requests_per_second.as_ref(),
        }
    }

    /// The present targets, in [`Metric::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Metric, &Target)> + '_ {
        Metric::ALL
            .into_iter()
            .filter_map(move |metric| self.get(metric).map(|target| (metric, target)))
    }
}

/// Relative error of `measured` against `target`: `(measured - target) / target`.
pub fn relative_error(measured: f64, target: f64) -> f64 {
    if target == 0.0 {
        if measured == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (measured - target) / target
    }
}

/// One line per target: metric, value, scope, source.
pub(crate) fn write_target_table(out: &mut String, targets: &Targets) {
    let _ = writeln!(
        out,
        "  {:<30} {:>14}  {:<6}  source",
        "metric", "target", "scope"
    );
    for (metric, target) in targets.iter() {
        let _ = writeln!(
            out,
            "  {:<30} {:>14}  {:<6}  {}",
            metric.name(),
            metric.format_value(target.value),
            target.scope.name(),
            target.source
        );
        if let Some(reason) = target.unreachable {
            let _ = writeln!(
                out,
                "  {:<30} {:>14}  {:<6}  NOT REACHED: {reason}",
                "", "", ""
            );
        }
    }
}
