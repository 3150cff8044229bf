//! `tierd probe`: paper 001's microbenchmark on a disk (or on a file with an
//! emulated disk), with paper-shaped figures; `tierd model fit`: an SMR
//! model's parameters from a probe (docs/probe.md).
//!
//! - `workload`: what each phase reads and writes (pure);
//! - `summary`: the records and each combination's figures (pure);
//! - `runner`: runs the phases on a device, the only part that does IO;
//! - `fit`: the model's parameters from the fit phases (pure);
//! - `report`: probe.json, reads.csv, report.html, the text table;
//! - `safety`: mounted / locked / size checks and the probe's lock.

pub mod fit;
pub mod report;
pub mod runner;
pub mod safety;
pub mod summary;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use tierd_common::clock::{Clock, ManualClock, SystemClock};
use tierd_common::units::{parse_bytes, parse_duration_ns, Bytes};
use tierd_device::model::smr::{Smr, SmrConfig, SmrOverrides};
use tierd_device::model::{DeviceModel, DevicePreset};
use tierd_engine::device::file::FileDevice;
use tierd_engine::device::latency::{LatencyDevice, OffsetMapping, TimeMode};
use tierd_engine::device::BlockDevice;

use crate::progress::ProgressLine;
use crate::CliError;
use report::ProbeOutput;
use runner::{RunConfig, Target};
use workload::Amounts;

#[derive(Args)]
pub struct ProbeArgs {
    /// The file or block device to probe. Every byte of it may be overwritten.
    #[arg(value_name = "DEVICE_OR_FILE")]
    path: PathBuf,
    /// Required: the probe writes over the device's data.
    #[arg(long)]
    destructive: bool,
    /// Emulate a disk on the file in virtual time: `smr-archive8tb` (or
    /// `archive8tb`), or another device preset. Without it the file or
    /// device itself is measured with O_DIRECT.
    #[arg(long, value_name = "PRESET")]
    model: Option<String>,
    /// Model parameters from a tier stack file: its last tier's
    /// `[tier.model]` (e.g. what `tierd model fit` wrote); implies
    /// `--model` of that tier's device unless given.
    #[arg(long, value_name = "FILE.toml")]
    model_config: Option<PathBuf>,
    /// Multiplies the amounts written and read (and an emulated SMR disk's
    /// media cache): 0.01 probes a small file in kind.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Amounts of random writes before random reads (Fig. 7); the largest is
    /// also the amount of every other write load. Before --scale.
    #[arg(long, value_delimiter = ',', default_value = "1GiB,5GiB,10GiB")]
    written: Vec<String>,
    /// Amount each combination reads, 1 MiB at a time. Before --scale.
    #[arg(long, default_value = "10GiB")]
    read: String,
    /// Print the figures as JSON (docs/probe.md, "JSON").
    #[arg(long)]
    json: bool,
    /// Directory for probe.json, reads.csv, report.html (and model.toml with --fit).
    #[arg(long, value_name = "DIR", default_value = "tierd-probe")]
    out: PathBuf,
    /// Also run the fit phases (band, cleaning, idle delay, media cache)
    /// and write the fitted model to DIR/model.toml.
    #[arg(long)]
    fit: bool,
    /// Run only the fit phases, not the paper's benchmark.
    #[arg(long)]
    fit_only: bool,
    /// Through the page cache instead of O_DIRECT (for filesystems that
    /// refuse O_DIRECT; the page cache hides the disk's latency).
    #[arg(long)]
    buffered: bool,
    /// Seed of the random offsets and orders.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Between phases: one 4 KiB read this often until six in a row are fast.
    #[arg(long, value_parser = duration, default_value = "10s")]
    settle_poll: u64,
    /// Longest wait for the device to settle between phases.
    #[arg(long, value_parser = duration, default_value = "6h")]
    settle_max: u64,
    /// Longest time reads follow a burst past the paper's amount.
    #[arg(long, value_parser = duration, default_value = "3h")]
    follow_max: u64,
    /// Most bytes the media-cache fill phase writes (default: 64 GiB × scale).
    #[arg(long)]
    fill_max: Option<String>,
}

#[derive(Subcommand)]
pub enum ModelCommand {
    /// Fit an SMR model to a probe's fit phases (`tierd probe --fit`) and
    /// write it as a tier stack file for `tierd sim --tiers`.
    Fit(FitArgs),
}

#[derive(Args)]
pub struct FitArgs {
    /// A probe.json written by `tierd probe --fit` (or --fit-only).
    #[arg(value_name = "PROBE.json")]
    probe: PathBuf,
    /// Where to write the tier stack file (default: model.toml beside PROBE.json).
    #[arg(long, value_name = "FILE.toml")]
    out: Option<PathBuf>,
    /// Print the fitted parameters as JSON.
    #[arg(long)]
    json: bool,
}

fn duration(text: &str) -> Result<u64, String> {
    parse_duration_ns(text).map_err(|error| error.to_string())
}

fn bytes_arg(flag: &str, text: &str) -> Result<u64, CliError> {
    parse_bytes(text).map_err(|error| CliError(format!("--{flag} {text}: {error}")))
}

impl runner::Observer for ProgressLine {
    fn io_done(&self, planned_ios_done: u64) {
        self.update(planned_ios_done);
    }
}

/// The preset a `--model` names: the device presets, `smr-` prefix allowed.
pub fn parse_model(name: &str) -> Result<DevicePreset, CliError> {
    let lower = name.to_ascii_lowercase();
    let trimmed = lower.strip_prefix("smr-").unwrap_or(&lower);
    trimmed.parse::<DevicePreset>().map_err(|error| {
        CliError(format!(
            "--model {name}: {error} (smr-archive8tb emulates paper 001's disk)"
        ))
    })
}

/// The emulated SMR disk of a probe at `scale` on `device_bytes`
/// (docs/probe.md, "Scale"): the capacity is the file's; the media cache is
/// the preset's × scale (so the amounts written fill it in the same
/// proportion); the band size stays (a band clean keeps taking ~0.5 s, so a
/// read waiting for one is still slow by paper 001's 100 ms); the cylinders
/// shrink with the capacity, so a seek across the file is a full-stroke
/// seek and a random read costs what it costs on the whole disk.
pub fn scaled_smr(base: &SmrConfig, device_bytes: u64, scale: f64) -> SmrConfig {
    let mut config = base.clone();
    let physical = (base.capacity_bytes + base.media_cache_bytes) as f64;
    config.media_cache_bytes =
        ((base.media_cache_bytes as f64 * scale) as u64 / 4096 * 4096).max(1 << 20);
    config.capacity_bytes = device_bytes;
    let cylinders = (f64::from(base.cylinders) * (device_bytes + config.media_cache_bytes) as f64
        / physical)
        .ceil() as u32;
    config.cylinders = cylinders.max(4 * base.zones).max(3);
    config
}

/// The model overrides of a tier stack file's last tier, and its device.
fn model_config_file(path: &Path) -> Result<(DevicePreset, Option<SmrOverrides>), CliError> {
    let shown = path.display().to_string();
    let stack = tierd_sim::TierStack::load(&shown)
        .map_err(|error| CliError(format!("--model-config: {error}")))?;
    let home = stack
        .tiers
        .last()
        .ok_or_else(|| CliError(format!("{shown}: no [[tier]]")))?;
    let overrides = match &home.model {
        None => None,
        Some(table) if home.device == DevicePreset::Archive8tb => Some(
            toml::Value::Table(table.clone())
                .try_into::<SmrOverrides>()
                .map_err(|error| {
                    CliError(format!("{shown}: tier {:?} [tier.model]: {error}", home.name))
                })?,
        ),
        Some(_) => {
            return Err(CliError(format!(
                "{shown}: tier {:?}: --model-config takes [tier.model] of an SMR disk only (device archive8tb), not {}",
                home.name, home.device
            )))
        }
    };
    Ok((home.device, overrides))
}

/// Runs `tierd probe`.
pub fn run(args: ProbeArgs) -> Result<(), CliError> {
    if !(args.scale > 0.0 && args.scale.is_finite() && args.scale <= 1000.0) {
        return Err(CliError(format!(
            "--scale {}: must be above 0 and at most 1000 (0.01 probes a 1/100 disk)",
            args.scale
        )));
    }
    let (preset, overrides) = match (&args.model, &args.model_config) {
        (_, Some(path)) => {
            let (device, overrides) = model_config_file(path)?;
            let preset = match &args.model {
                Some(name) => parse_model(name)?,
                None => device,
            };
            (Some(preset), overrides)
        }
        (Some(name), None) => (Some(parse_model(name)?), None),
        (None, None) => (None, None),
    };
    let mut written_bytes = Vec::new();
    for text in &args.written {
        written_bytes.push(workload::scaled(bytes_arg("written", text)?, args.scale));
    }
    let amounts = Amounts {
        written_bytes,
        read_bytes: workload::scaled(bytes_arg("read", &args.read)?, args.scale),
        // O_DIRECT cannot write 1 KiB on a 4 KiB device: rounded up.
        write_size_min_bytes: if preset.is_some() { 1 } else { 4096 },
    };
    let fill_max_bytes = match &args.fill_max {
        Some(text) => bytes_arg("fill-max", text)?,
        None => workload::scaled(64 << 30, args.scale),
    };
    let shown = args.path.display().to_string();
    if !args.destructive {
        return Err(CliError(format!(
            "tierd probe writes over {shown} (its data is lost); add --destructive if that is what you want"
        )));
    }
    let _claim = safety::claim(&args.path)?;
    let direct = preset.is_none() && !args.buffered;
    let file = FileDevice::open(&args.path, None, direct, false).map_err(|error| {
        CliError(format!(
            "{error}{}",
            if direct {
                " (on a filesystem without O_DIRECT, --buffered runs through the page cache)"
            } else {
                ""
            }
        ))
    })?;
    let size_bytes = file.size_bytes() / workload::ALIGNMENT_BYTES * workload::ALIGNMENT_BYTES;
    let mut required = if args.fit_only {
        0
    } else {
        workload::required_bytes(&amounts)
    };
    if args.fit || args.fit_only {
        required = required.max(256 << 20);
    }
    if size_bytes < required {
        return Err(CliError(format!(
            "{shown} holds {} ({size_bytes} bytes); this probe needs at least {} ({required} bytes: the sequential loads start at byte 0{}). Enlarge it (`truncate -s {required} {shown}`) or lower --scale",
            Bytes(size_bytes),
            Bytes(required),
            if args.fit || args.fit_only { ", and the fit phases need 256 MiB" } else { "" }
        )));
    }
    let file: Arc<dyn BlockDevice> = Arc::new(file);
    let mut model_parameters = None;
    let target = match preset {
        None => Target {
            device: file,
            clock: Arc::new(SystemClock::new()),
            size_bytes,
        },
        Some(preset) => {
            let model: Box<dyn DeviceModel> = match SmrConfig::preset(preset) {
                Some(base) => {
                    let mut config = scaled_smr(&base, size_bytes, args.scale);
                    if let Some(overrides) = &overrides {
                        overrides.apply(&mut config);
                        config.capacity_bytes = size_bytes;
                    }
                    let model = Smr::new(&config, args.seed)
                        .map_err(|error| CliError(format!("the emulated disk: {error}")))?;
                    model_parameters = Some(config);
                    Box::new(model)
                }
                None => preset
                    .build(Some(size_bytes), args.seed)
                    .map_err(|error| CliError(format!("the emulated disk: {error}")))?,
            };
            let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
            let device = LatencyDevice::new(file, model, clock.clone())
                .with_time_mode(TimeMode::Virtual)
                .with_offset_mapping(OffsetMapping::Identity);
            Target {
                device: Arc::new(device),
                clock,
                size_bytes,
            }
        }
    };
    let config = RunConfig {
        amounts,
        seed: args.seed,
        settle_poll_ns: args.settle_poll.max(1),
        settle_quiet_polls: 6,
        settle_max_ns: args.settle_max,
        follow_max_ns: args.follow_max,
        fit: args.fit || args.fit_only,
        fill_max_bytes,
        benchmark: !args.fit_only,
    };
    let total = runner::planned_ios(&config, size_bytes);
    let progress =
        ProgressLine::new("tierd probe", "done", Some(total)).with_suffix(format!("on {shown}"));
    let phases = runner::run(&target, &config, &progress);
    progress.finish();
    let phases = phases?;
    let combinations = phases.iter().filter_map(summary::summarize).collect();
    let fit = config.fit.then(|| {
        let base = model_parameters
            .clone()
            .unwrap_or_else(|| scaled_smr(&SmrConfig::archive_8tb(), size_bytes, 1.0));
        fit::fit(&phases, &base)
    });
    let output = ProbeOutput {
        model: preset.map(|preset| match SmrConfig::preset(preset) {
            Some(_) => format!("smr-{}", preset.name()),
            None => preset.name().to_string(),
        }),
        scale: args.scale,
        combinations,
        device: shown.clone(),
        device_bytes: size_bytes,
        direct,
        virtual_time: preset.is_some(),
        seed: args.seed,
        model_parameters,
        fit,
        phases,
    };
    write_outputs(&args.out, &output)?;
    if args.json {
        let printed = ProbeOutput {
            phases: Vec::new(),
            ..output.clone()
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&printed).expect("probe output serialises")
        );
    } else {
        print!("{}", report::table(&output));
        println!(
            "files: {}/probe.json, reads.csv, report.html{}",
            args.out.display(),
            if output.fit.is_some() {
                ", model.toml"
            } else {
                ""
            }
        );
    }
    Ok(())
}

fn write_outputs(directory: &Path, output: &ProbeOutput) -> Result<(), CliError> {
    let shown = directory.display();
    std::fs::create_dir_all(directory)
        .map_err(|error| CliError(format!("--out {shown}: cannot create: {error}")))?;
    let write = |name: &str, text: &str| {
        std::fs::write(directory.join(name), text)
            .map_err(|error| CliError(format!("{shown}/{name}: cannot write: {error}")))
    };
    write(
        "probe.json",
        &serde_json::to_string(output).expect("probe output serialises"),
    )?;
    write("reads.csv", &report::reads_csv(&output.phases))?;
    write("report.html", &report::html(output, &output.phases))?;
    if let Some(fit) = &output.fit {
        let base = fit_base(output);
        write(
            "model.toml",
            &fit::stack_toml(&base, fit, &format!("{shown}/probe.json")),
        )?;
    }
    Ok(())
}

/// The model whose mechanics a fit goes with: the probed model, or the
/// Archive 8 TB preset at the probed size.
fn fit_base(output: &ProbeOutput) -> SmrConfig {
    output
        .model_parameters
        .clone()
        .unwrap_or_else(|| scaled_smr(&SmrConfig::archive_8tb(), output.device_bytes, 1.0))
}

/// Runs `tierd model ...`.
pub fn model(command: ModelCommand) -> Result<(), CliError> {
    let ModelCommand::Fit(args) = command;
    let shown = args.probe.display().to_string();
    let text = std::fs::read_to_string(&args.probe)
        .map_err(|error| CliError(format!("{shown}: cannot read: {error}")))?;
    let output: ProbeOutput = serde_json::from_str(&text).map_err(|error| {
        CliError(format!(
            "{shown}: not a probe.json written by tierd probe: {error}"
        ))
    })?;
    if !output
        .phases
        .iter()
        .any(|phase| phase.name.starts_with("fit-"))
    {
        return Err(CliError(format!(
            "{shown} has no fit phases: run the probe with --fit (or --fit-only)"
        )));
    }
    let base = fit_base(&output);
    let fitted = fit::fit(&output.phases, &base);
    let out = args.out.unwrap_or_else(|| {
        args.probe
            .parent()
            .unwrap_or(Path::new("."))
            .join("model.toml")
    });
    std::fs::write(&out, fit::stack_toml(&base, &fitted, &shown))
        .map_err(|error| CliError(format!("{}: cannot write: {error}", out.display())))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&fitted).expect("fit serialises")
        );
    } else {
        let show = |value: Option<String>| value.unwrap_or_else(|| "not shown".to_string());
        println!(
            "media cache {}, band {}, clean {} per band, busy clean spacing {}, idle clean delay {}",
            show(fitted.media_cache_bytes.map(|b| Bytes(b).to_string())),
            show(fitted.band_bytes.map(|b| Bytes(b).to_string())),
            show(fitted.clean_ms_per_band.map(|ms| format!("{ms:.0} ms"))),
            show(fitted.busy_clean_spacing_ms.map(|ms| format!("{ms:.0} ms"))),
            show(fitted.idle_clean_delay_ms.map(|ms| format!("{ms:.0} ms"))),
        );
        println!("wrote {}", out.display());
    }
    Ok(())
}

#[cfg(test)]
mod validation {
    //! The fit recovers what the emulated disk was built with (issue 16 §2):
    //! two parameter sets, each probed in virtual time, media cache, band
    //! size and clean time per band within 20%.

    use super::fit::{fitted_config, model_clean_ms, Fit};
    use super::runner::Observer;
    use super::*;

    struct Quiet;

    impl Observer for Quiet {
        fn io_done(&self, _planned_ios_done: u64) {}
    }

    const DEVICE_BYTES: u64 = 8 << 30;
    const SCALE: f64 = 1.0 / 128.0;

    /// Probes `truth` (fit phases only) and fits against the preset at the
    /// same scale: what `tierd probe --fit-only --model archive8tb` does.
    fn probe_and_fit(truth: &SmrConfig) -> (Fit, SmrConfig) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(DEVICE_BYTES)
            .unwrap();
        let inner: Arc<dyn BlockDevice> =
            Arc::new(FileDevice::open(&path, None, false, false).unwrap());
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let model = Smr::new(truth, 7).unwrap();
        let device = LatencyDevice::new(inner, Box::new(model), clock.clone())
            .with_time_mode(TimeMode::Virtual)
            .with_offset_mapping(OffsetMapping::Identity);
        let target = Target {
            device: Arc::new(device),
            clock,
            size_bytes: DEVICE_BYTES,
        };
        let config = RunConfig {
            amounts: Amounts {
                written_bytes: Vec::new(),
                read_bytes: 0,
                write_size_min_bytes: 1,
            },
            seed: 3,
            settle_poll_ns: 10_000_000_000,
            settle_quiet_polls: 6,
            settle_max_ns: 24 * 3_600_000_000_000,
            follow_max_ns: 0,
            fit: true,
            fill_max_bytes: truth.media_cache_bytes * 3,
            benchmark: false,
        };
        let phases = runner::run(&target, &config, &Quiet).unwrap();
        let base = scaled_smr(&SmrConfig::archive_8tb(), DEVICE_BYTES, SCALE);
        (fit::fit(&phases, &base), base)
    }

    fn within(what: &str, fitted: f64, truth: f64, share: f64) {
        let error = (fitted - truth).abs() / truth;
        assert!(
            error <= share,
            "{what}: fitted {fitted:.1}, truth {truth:.1} ({:.1}% off)",
            error * 100.0
        );
    }

    fn check(truth: &SmrConfig) {
        let (fit, base) = probe_and_fit(truth);
        eprintln!("truth: {truth:?}\nfit: {fit:#?}");
        within(
            "media_cache_bytes",
            fit.media_cache_bytes.expect("media cache fitted") as f64,
            truth.media_cache_bytes as f64,
            0.2,
        );
        within(
            "band_bytes",
            fit.band_bytes.expect("band fitted") as f64,
            truth.band_bytes as f64,
            0.2,
        );
        let truth_clean_ms = model_clean_ms(truth).unwrap();
        eprintln!("truth clean ms per band: {truth_clean_ms:.1}");
        within(
            "measured clean ms per band",
            fit.clean_ms_per_band.expect("clean time measured"),
            truth_clean_ms,
            0.2,
        );
        let fitted = fitted_config(&base, &fit);
        within(
            "fitted model's clean ms per band",
            model_clean_ms(&fitted).unwrap(),
            truth_clean_ms,
            0.2,
        );
        within(
            "busy_clean_spacing_ms",
            fit.busy_clean_spacing_ms.expect("spacing fitted"),
            truth.busy_clean_spacing_ms,
            0.2,
        );
        within(
            "idle_clean_delay_ms",
            fit.idle_clean_delay_ms.expect("idle delay fitted"),
            truth.idle_clean_delay_ms,
            0.2,
        );
    }

    #[test]
    fn the_fit_recovers_the_scaled_archive8tb() {
        check(&scaled_smr(&SmrConfig::archive_8tb(), DEVICE_BYTES, SCALE));
    }

    #[test]
    fn the_fit_recovers_a_disk_with_other_bands_cache_and_cleaning() {
        let mut truth = scaled_smr(&SmrConfig::archive_8tb(), DEVICE_BYTES, SCALE);
        truth.media_cache_bytes = 120 << 20;
        truth.band_bytes = 56 << 20;
        truth.busy_clean_spacing_ms = 260.0;
        truth.idle_clean_delay_ms = 3_000.0;
        truth.clean_overhead_ms = 80.0;
        check(&truth);
    }
}
