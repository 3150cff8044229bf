//! Synthetic block workloads with spikes (`tierd trace synth`).
//!
//! A deterministic generator after Bodik et al., "Characterizing, modeling,
//! and generating workload spikes for stateful services" (SoCC 2010): a
//! background load plus data spikes (hot spots) with onset, plateau, decay,
//! location, width and optional drift to adjacent segments, under volume
//! spikes of the total rate ([`model`]). Presets stand in for the MSR
//! Cambridge volumes OTF-AST and ATSMF replayed (usr_1, web_2, proj_2, proj_4,
//! src1_0, src1_1, proj_1, usr_2), ATSMF's OLTP run (dbt2) and hm_0, each
//! calibrated to published figures ([`Targets`], `docs/synth.md`).
//!
//! Generated shapes ([`shapes`]: `boot-storm`, `walking`, `long-write-spikes`,
//! `short-spikes`, `no-heat`, `large-working-set`) are presets of the same
//! model for kinds of heat the calibrated presets do not cover; wherever a
//! preset name is accepted, `shape:NAME` names one ([`preset`]).
//!
//! Application start-ups ([`apps`]: `app-firefox`, `app-calc`) are traces
//! of another kind, shaped like paper 003's Fig. 4/5, for replicas in free
//! HDD space; `preset` finds them by name too.
//!
//! Everything a preset or shape produces is **synthetic**: reports must say so with
//! [`label`], never call it a real trace.
//!
//! ```
//! let preset = tierd_synth::preset("usr_1")?;
//! let requests: Vec<_> = tierd_synth::Generator::new(preset, 1, 0.01)?.collect();
//! assert!(requests.windows(2).all(|pair| pair[0].time_ns <= pair[1].time_ns));
//! # Ok::<(), tierd_synth::SynthError>(())
//! ```

pub mod apps;
pub mod generator;
pub mod model;
mod presets;
mod schedule;
mod shapes;
pub mod targets;

use std::fmt::Write as _;

use serde::Serialize;
use tierd_common::units::Bytes;

pub use generator::Generator;
pub use model::Model;
pub use shapes::{SHAPE_PREFIX, SHAPE_SOURCE};
pub use targets::{relative_error, Metric, Scope, Target, Targets};

/// A named workload: what it stands for, the figures it is calibrated to and
/// the model that produces it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Preset {
    pub name: &'static str,
    pub description: &'static str,
    /// Name of volume id 0 in the generated trace.
    pub volume_name: &'static str,
    pub volume_bytes: u64,
    /// The busy window the preset represents (the papers' replay window):
    /// what the calibration targets are measured over. The model's busy
    /// state starts with it and may go on longer (`model.window_hours`).
    pub default_hours: f64,
    /// Which window of the original trace that is, and why.
    pub window: &'static str,
    /// Papers and tables it is calibrated to (short form, for labels).
    pub source: &'static str,
    pub targets: Targets,
    pub model: Model,
}

/// Errors of this crate; each says what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SynthError {
    #[error("unknown synthetic preset {name:?}; available: {available}")]
    UnknownPreset { name: String, available: String },
    #[error("unknown generated shape {name:?}; available: {available}")]
    UnknownShape { name: String, available: String },
    #[error("hours must be a number in (0, {max}], got {hours}")]
    BadHours { hours: f64, max: f64 },
    #[error("preset {preset} has an unusable model: {reason}")]
    BadModel { preset: String, reason: String },
}

/// All presets, in a fixed order.
pub fn presets() -> &'static [Preset] {
    presets::all()
}

/// The preset called `name`, or the generated shape `NAME` for
/// `shape:NAME`; the error lists the names there are.
pub fn preset(name: &str) -> Result<&'static Preset, SynthError> {
    if let Some(shape_name) = name.strip_prefix(SHAPE_PREFIX) {
        return shape(shape_name);
    }
    presets()
        .iter()
        .chain(apps::all())
        .find(|preset| preset.name == name)
        .ok_or_else(|| SynthError::UnknownPreset {
            name: name.to_string(),
            available: presets()
                .iter()
                .chain(apps::all())
                .map(|preset| preset.name.to_string())
                .chain(
                    shapes()
                        .iter()
                        .map(|shape| format!("{SHAPE_PREFIX}{}", shape.name)),
                )
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// All generated shapes, in a fixed order (`docs/synth.md`, "Generated shapes").
pub fn shapes() -> &'static [Preset] {
    shapes::all()
}

/// The generated shape called `name` (without the `shape:` prefix).
pub fn shape(name: &str) -> Result<&'static Preset, SynthError> {
    shapes()
        .iter()
        .find(|shape| shape.name == name)
        .ok_or_else(|| SynthError::UnknownShape {
            name: name.to_string(),
            available: shapes()
                .iter()
                .map(|shape| shape.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Whether `preset` is an application start-up trace (`app-firefox`,
/// `app-calc`: paper 003's Fig. 4/5 in kind, [`apps`]).
pub fn is_app(preset: &Preset) -> bool {
    apps::find(preset.name).is_some()
}

/// Whether `preset` is a generated shape (not calibrated to any trace).
pub fn is_shape(preset: &Preset) -> bool {
    preset.source == SHAPE_SOURCE
}

/// The label every report of generated data carries, e.g. `synthetic (tierd
/// synth preset usr_1, seed 1, 4.17 h; calibrated to OTF-AST Tables 2,3,4,5,6
/// and ATSMF Table 1) — not a real trace`.
///
/// A generated shape's label says so: `synthetic (generated shape walking,
/// seed 1, 1 h) — not a real trace`.
pub fn label(preset: &Preset, seed: u64, hours: f64) -> String {
    if is_app(preset) {
        return format!(
            "synthetic (application start {}, seed {seed}; shaped like {}) — not a real trace",
            preset.name, preset.source
        );
    }
    if is_shape(preset) {
        return format!(
            "synthetic (generated shape {}, seed {seed}, {} h) — not a real trace",
            preset.name,
            format_hours(hours)
        );
    }
    format!(
        "synthetic (tierd synth preset {}, seed {seed}, {} h; calibrated to {}) — not a real trace",
        preset.name,
        format_hours(hours),
        preset.source
    )
}

fn format_hours(hours: f64) -> String {
    let text = format!("{hours:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// A preset's description and targets as a table, for `--list`.
pub fn describe_targets(preset: &Preset) -> String {
    let mut out = String::new();
    let model = &preset.model;
    if is_app(preset) {
        let _ = writeln!(
            out,
            "{} [synthetic, application start] - {}",
            preset.name, preset.description
        );
        let _ = writeln!(
            out,
            "  volume {} ({}), {}; shaped like {} (calibrated to no trace: the paper published figures only)",
            preset.volume_name,
            Bytes(preset.volume_bytes),
            preset.window,
            preset.source
        );
        return out;
    }
    if is_shape(preset) {
        let _ = writeln!(
            out,
            "{SHAPE_PREFIX}{} [synthetic, generated shape] - {}",
            preset.name, preset.description
        );
        let _ = writeln!(
            out,
            "  volume {} ({}), default {} h; calibrated to nothing",
            preset.volume_name,
            Bytes(preset.volume_bytes),
            format_hours(preset.default_hours)
        );
        return out;
    }
    let _ = writeln!(out, "{} [synthetic] - {}", preset.name, preset.description);
    let _ = writeln!(
        out,
        "  volume {} ({}), default {} h = {}",
        preset.volume_name,
        Bytes(preset.volume_bytes),
        format_hours(preset.default_hours),
        preset.window
    );
    if model.recurrence_hours > model.window_hours {
        let _ = writeln!(
            out,
            "  longer runs: the busy window recurs every {} h, background only in between at {:.2} iops",
            format_hours(model.recurrence_hours),
            model.quiet_mean_iops
        );
    } else {
        let _ = writeln!(out, "  longer runs: busy windows back to back");
    }
    let _ = writeln!(out, "  calibrated to: {}", preset.source);
    targets::write_target_table(&mut out, &preset.targets);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_preset_lists_the_names() {
        let error = preset("usr_9").unwrap_err().to_string();
        assert!(error.contains("usr_9"), "{error}");
        for preset in presets() {
            assert!(error.contains(preset.name), "{error}");
        }
    }

    #[test]
    fn names_are_unique_and_volumes_named() {
        let mut names: Vec<_> = presets().iter().map(|preset| preset.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), presets().len());
        for preset in presets() {
            assert!(!preset.volume_name.is_empty());
            // The papers' window, inside the model's busy state (which may
            // go on longer: web_2).
            assert!(
                preset.default_hours <= preset.model.window_hours,
                "{}",
                preset.name
            );
            assert!(
                preset.model.recurrence_hours >= preset.model.window_hours,
                "{}",
                preset.name
            );
            if let Some(target) = preset.targets.volume_bytes {
                assert_eq!(target.value, preset.volume_bytes as f64, "{}", preset.name);
            }
        }
    }

    #[test]
    fn label_says_synthetic_and_source() {
        let preset = preset("usr_1").unwrap();
        let text = label(preset, 1, 250.0 / 60.0);
        assert!(
            text.starts_with("synthetic (tierd synth preset usr_1, seed 1, 4.17 h;"),
            "{text}"
        );
        assert!(text.contains(preset.source), "{text}");
        assert!(text.ends_with("not a real trace"), "{text}");
        assert!(label(preset, 2, 1.0).contains("seed 2, 1 h"));
    }

    #[test]
    fn description_lists_every_target_with_its_source() {
        for preset in presets() {
            let text = describe_targets(preset);
            assert!(text.contains("[synthetic]"));
            for (metric, target) in preset.targets.iter() {
                let line = text
                    .lines()
                    .find(|line| line.trim_start().starts_with(metric.name()))
                    .unwrap_or_else(|| panic!("{} lacks {}:\n{text}", preset.name, metric.name()));
                assert!(line.contains(target.source), "{line}");
                if let Some(reason) = target.unreachable {
                    assert!(text.contains(&format!("NOT REACHED: {reason}")), "{text}");
                }
            }
        }
    }

    #[test]
    fn week_scoped_rates_follow_from_the_model() {
        // The quiet rate is derived so that a week of busy windows plus quiet
        // time averages the published week mean.
        for preset in presets() {
            let Some(target) = preset.targets.requests_per_second else {
                continue;
            };
            let model = &preset.model;
            let busy = model.window_mean_iops * model.window_hours;
            let quiet = model.quiet_mean_iops * (model.recurrence_hours - model.window_hours);
            let mean = (busy + quiet) / model.recurrence_hours;
            assert!(
                relative_error(mean, target.value).abs() < 0.01,
                "{}: {mean} vs {}",
                preset.name,
                target.value
            );
        }
    }
}
