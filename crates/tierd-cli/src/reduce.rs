//! `tierd sim --experiment reduce-fig5 | reduce-calibrate` (docs/sim.md,
//! "Experiments"): paper 004 Fig. 5 on the simulator's processor model, and
//! the calibration of that model.
//!
//! `reduce-calibrate`: this machine's per-block cost
//! of the live reduced tier's work, as the simulator's processor model
//! takes it (`tierd_sim::reduce::cost::ReductionCosts`).
//!
//! Every step runs the live tier's code (`tierd_engine::device::reduce::codec`)
//! or the system calls it issues, on fio-like 2:1 data
//! (`buffer_compress_percentage=50`: each 512-byte chunk half random, half
//! zeroes), at 4 KiB and 8 KiB blocks (8 KiB is the paper's write); the line through the two sizes is
//! the step's fixed cost and cost per KiB. Each figure is the fastest of
//! 25 short rounds: another process on the machine only ever adds time. This is the one place the simulator's numbers touch a clock: the
//! wall clock of the CLI, around single-threaded loops that do not block.

use std::hint::black_box;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use tierd_common::clock::{Clock, SystemClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_engine::device::reduce::codec;
use tierd_sim::reduce::cost::{Cost, ReductionCosts};
use tierd_sim::reduce::fig5::{self, Fig5Config};
use tierd_sim::reduce::output;

use crate::CliError;

/// Block sizes the line is fitted through.
const SMALL_BYTES: usize = 4096;
const LARGE_BYTES: usize = 8192;
/// Distinct blocks cycled through (more than fit in L1, fewer than L3).
const BLOCKS: usize = 32;
const ROUNDS: usize = 25;
/// Block operations per round (a few ms: short enough that most rounds run
/// without another process taking the core).
const OPERATIONS: usize = 1024;
/// The staging file's size: overwritten in place, as a stage log is.
const FILE_BYTES: u64 = 16 << 20;
/// fio's default `buffer_compress_chunk`.
const CHUNK_BYTES: usize = 512;
/// The steps timed, in `ReductionCosts`' order.
const STEPS: [&str; 6] = ["hash", "compress", "decompress", "compare", "store", "load"];

/// What was measured, for the docs and `--json`.
#[derive(serde::Serialize)]
pub struct Calibration {
    pub costs: ReductionCosts,
    /// Each step's ns per block (fastest round) at 4 KiB and at 8 KiB.
    pub samples: Vec<Sample>,
    pub rounds: usize,
    pub operations_per_round: usize,
    pub data: &'static str,
    pub file: String,
}

#[derive(serde::Serialize)]
pub struct Sample {
    pub step: &'static str,
    pub small_block_ns: f64,
    pub large_block_ns: f64,
}

/// fio's `buffer_compress_percentage=50` in kind: each 512-byte chunk is
/// half random bytes, half zeroes.
pub fn half_compressible_block(rng: &mut SeededRng, bytes: usize) -> Vec<u8> {
    let mut block = vec![0u8; bytes];
    for chunk in block.chunks_mut(CHUNK_BYTES) {
        let random = chunk.len() / 2;
        for word in chunk[..random].chunks_mut(8) {
            let value = rng.next_u64().to_le_bytes();
            word.copy_from_slice(&value[..word.len()]);
        }
    }
    block
}

struct Blocks {
    raw: Vec<Vec<u8>>,
    compressed: Vec<Vec<u8>>,
    copies: Vec<Vec<u8>>,
}

fn blocks(bytes: usize, seed: u64) -> Blocks {
    let mut rng = SeededRng::new(seed);
    let raw: Vec<Vec<u8>> = (0..BLOCKS)
        .map(|_| half_compressible_block(&mut rng, bytes))
        .collect();
    let compressed = raw
        .iter()
        .map(|block| {
            let mut out = Vec::new();
            assert!(codec::compress(block, &mut out), "2:1 data compresses");
            out
        })
        .collect();
    let copies = raw.clone();
    Blocks {
        raw,
        compressed,
        copies,
    }
}

/// Measures every step at both sizes in a scratch file under `directory`.
pub fn calibrate(directory: &std::path::Path) -> Result<Calibration, CliError> {
    let clock = SystemClock::new();
    let path = directory.join(format!("tierd-reduce-calibrate-{}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|error| {
            CliError(format!(
                "{}: cannot create the scratch file for the store/load timings: {error}; give a writable --out DIR",
                path.display()
            ))
        })?;
    let result = measure(&clock, &file, &path);
    let _ = std::fs::remove_file(&path);
    result
}

fn measure(
    clock: &SystemClock,
    file: &std::fs::File,
    path: &std::path::Path,
) -> Result<Calibration, CliError> {
    let io_error = |error: std::io::Error| {
        CliError(format!(
            "{}: scratch file IO failed: {error}",
            path.display()
        ))
    };
    // Written once, so the timed stores overwrite cached pages as a stage
    // log does, rather than allocating new ones.
    let zeros = vec![0u8; 1 << 20];
    for offset in (0..FILE_BYTES).step_by(zeros.len()) {
        file.write_all_at(&zeros, offset).map_err(io_error)?;
    }
    let mut samples = Vec::new();
    let mut lines: Vec<(&'static str, Cost)> = Vec::new();
    let sizes = [SMALL_BYTES, LARGE_BYTES];
    let data: Vec<Blocks> = sizes
        .iter()
        .enumerate()
        .map(|(index, &bytes)| blocks(bytes, 15 + index as u64))
        .collect();
    let fragment_fraction = data
        .iter()
        .zip(sizes)
        .map(|(data, bytes)| {
            data.compressed.iter().map(Vec::len).sum::<usize>() as f64 / (BLOCKS * bytes) as f64
        })
        .sum::<f64>()
        / sizes.len() as f64;
    let mut out = Vec::with_capacity(LARGE_BYTES * 2);
    let mut back = vec![0u8; LARGE_BYTES];
    let mut failure = None;
    // One operation of `step` on block `operation` of size `size`.
    let mut operate = |step: usize, size: usize, operation: usize| {
        let bytes = sizes[size];
        let data = &data[size];
        let index = operation % BLOCKS;
        let offset = (operation as u64 % (FILE_BYTES / bytes as u64)) * bytes as u64;
        match step {
            0 => {
                black_box(codec::fingerprint(&data.raw[index]));
            }
            1 => {
                black_box(codec::compress(&data.raw[index], &mut out));
            }
            2 => {
                let _ = black_box(codec::decompress(
                    &data.compressed[index],
                    &mut back[..bytes],
                ));
            }
            3 => {
                black_box(black_box(&data.raw[index]) == black_box(&data.copies[index]));
            }
            4 => {
                if let Err(error) = file.write_all_at(&data.raw[index], offset) {
                    failure.get_or_insert(error);
                }
            }
            _ => {
                if let Err(error) = file.read_exact_at(&mut back[..bytes], offset) {
                    failure.get_or_insert(error);
                }
            }
        }
    };
    // Rounds interleave every step and size, so a slow spell of the
    // machine (another process, a lower clock) hits all of them alike and
    // the ratios between steps hold even when the absolute figures move.
    let mut fastest = [[f64::INFINITY; 2]; STEPS.len()];
    for round in 0..=ROUNDS {
        for (step, times) in fastest.iter_mut().enumerate() {
            for (size, time) in times.iter_mut().enumerate() {
                let start = clock.now_ns();
                for operation in 0..OPERATIONS {
                    operate(step, size, operation);
                }
                let per_operation = (clock.now_ns() - start) as f64 / OPERATIONS as f64;
                // Round 0 warms caches and the allocator.
                if round > 0 {
                    *time = time.min(per_operation);
                }
            }
        }
    }
    if let Some(error) = failure {
        return Err(io_error(error));
    }
    let per_size: Vec<[f64; 6]> = (0..2)
        .map(|size| std::array::from_fn(|step| fastest[step][size]))
        .collect();
    for (step, name) in STEPS.into_iter().enumerate() {
        let small = per_size[0][step];
        let large = per_size[1][step];
        samples.push(Sample {
            step: name,
            small_block_ns: small,
            large_block_ns: large,
        });
        lines.push((
            name,
            Cost::fit((SMALL_BYTES as f64, small), (LARGE_BYTES as f64, large)),
        ));
    }
    let cost = |name: &str| {
        lines
            .iter()
            .find(|(step, _)| *step == name)
            .map(|(_, cost)| *cost)
            .expect("every step measured")
    };
    let costs = ReductionCosts {
        hash: cost("hash"),
        compress: cost("compress"),
        decompress: cost("decompress"),
        compare: cost("compare"),
        store: cost("store"),
        load: cost("load"),
        compressed_fraction: fragment_fraction,
    };
    Ok(Calibration {
        costs,
        samples,
        rounds: ROUNDS,
        operations_per_round: OPERATIONS,
        data: "fio buffer_compress_percentage=50 in kind: each 512-byte chunk half random, half zeroes",
        file: path.display().to_string(),
    })
}

/// The calibration as text: a line per step, then the costs as Rust, ready
/// to paste into `tierd_sim::reduce::cost::MEASURED`.
pub fn render(calibration: &Calibration) -> String {
    let mut rows = vec![vec![
        "step".to_string(),
        "4KiB ns".to_string(),
        "8KiB ns".to_string(),
        "fixed ns".to_string(),
        "ns/KiB".to_string(),
    ]];
    let costs = &calibration.costs;
    let lines = [
        costs.hash,
        costs.compress,
        costs.decompress,
        costs.compare,
        costs.store,
        costs.load,
    ];
    for (sample, cost) in calibration.samples.iter().zip(lines) {
        rows.push(vec![
            sample.step.to_string(),
            format!("{:.0}", sample.small_block_ns),
            format!("{:.0}", sample.large_block_ns),
            format!("{:.0}", cost.fixed_ns),
            format!("{:.1}", cost.ns_per_kib),
        ]);
    }
    let mut out = format!(
        "Reduction costs on this machine (fastest of {} rounds of {} blocks; {})\n\n",
        calibration.rounds, calibration.operations_per_round, calibration.data
    );
    out.push_str(&tierd_sim::tables::columns(&rows));
    out.push_str(&format!(
        "\nlz4 output / input: {:.3}\n8 KiB write, 2:1 duplicates: inline {:.0} ns, post {:.0} ns of worker time (post/inline {:.2})\n",
        costs.compressed_fraction,
        costs.inline_ns(8192, 0.5),
        costs.post_ns(8192, 0.5),
        costs.post_work_ratio(8192, 0.5),
    ));
    out
}

/// `tierd sim --experiment NAME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Experiment {
    /// Paper 004 Fig. 5 in kind on the reduction workers' model.
    ReduceFig5,
    /// This machine's per-block reduction costs.
    ReduceCalibrate,
    /// Issue 16: the SMR home tier with and without staging
    /// (docs/engine/smr.md), on paper 001's RW→RR and MSR-like workloads.
    SmrStaging,
}

pub struct Options {
    pub json: bool,
    pub out: Option<PathBuf>,
    pub seed: u64,
    pub measurements: Option<u32>,
    pub loads: Option<String>,
    pub calibrate: bool,
    pub queue_order: Option<tierd_sim::reduce::QueueOrder>,
    /// `reduce-fig5`: a reduced tier under the writes, `LOGICAL:DEVICE`.
    pub reduce_tier: Option<String>,
    /// `smr-staging`: workload size against paper 001's (1 = 10 GiB written).
    pub scale: Option<f64>,
    /// `smr-staging`: write the workloads as traces here instead of running.
    pub export_traces: Option<PathBuf>,
}

fn parse_loads(text: &str) -> Result<Vec<f64>, CliError> {
    text.split(',')
        .map(|item| {
            let item = item.trim().trim_end_matches('%');
            match item.parse::<f64>() {
                Ok(value) if value > 0.0 && value <= 100.0 => Ok(value),
                _ => Err(CliError(format!(
                    "--loads {text:?}: {item:?} is not a load in % of the maximum IOPS (above 0, at most 100), e.g. --loads 10,45,60"
                ))),
            }
        })
        .collect()
}

/// `--reduce-tier LOGICAL:DEVICE`: the tier's blocks and 128 KiB packs.
fn parse_tier(text: &str, block_bytes: u64) -> Result<fig5::TierModel, CliError> {
    let fail = |why: &str| {
        CliError(format!(
            "--reduce-tier {text:?}: {why}; expected LOGICAL:DEVICE sizes, e.g. 16MiB:12MiB"
        ))
    };
    let (logical, device) = text.split_once(':').ok_or_else(|| fail("no ':'"))?;
    let size = |part: &str| {
        tierd_common::units::parse_bytes(part.trim()).map_err(|error| fail(&error.to_string()))
    };
    let (logical, device) = (size(logical)?, size(device)?);
    let pack_bytes = 128 << 10;
    let tier = fig5::TierModel {
        logical_blocks: logical / block_bytes,
        pack_bytes,
        pack_count: device / pack_bytes,
        dedup: true,
    };
    if tier.logical_blocks == 0 || tier.pack_count < 8 {
        return Err(fail(&format!(
            "at least one {block_bytes}-byte block and 8 packs of {pack_bytes} bytes"
        )));
    }
    Ok(tier)
}

fn print_json(value: &impl serde::Serialize) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)
        .map_err(|error| CliError(format!("cannot write JSON: {error}")))?;
    writeln!(out).map_err(|error| CliError(format!("cannot write: {error}")))?;
    Ok(())
}

pub fn run(experiment: Experiment, options: Options) -> Result<(), CliError> {
    let scratch = options.out.clone().unwrap_or_else(std::env::temp_dir);
    if let Some(directory) = &options.out {
        std::fs::create_dir_all(directory).map_err(|error| {
            CliError(format!("{}: cannot create: {error}", directory.display()))
        })?;
    }
    if experiment != Experiment::SmrStaging
        && (options.scale.is_some() || options.export_traces.is_some())
    {
        return Err(CliError(
            "--scale and --export-traces go with --experiment smr-staging".to_string(),
        ));
    }
    match experiment {
        Experiment::SmrStaging => {
            if options.measurements.is_some()
                || options.loads.is_some()
                || options.calibrate
                || options.queue_order.is_some()
                || options.reduce_tier.is_some()
            {
                return Err(CliError(
                    "--measurements, --loads, --queue-order, --calibrate and --reduce-tier go with --experiment reduce-fig5"
                        .to_string(),
                ));
            }
            crate::smr::run(&options)
        }
        Experiment::ReduceCalibrate => {
            if options.measurements.is_some()
                || options.loads.is_some()
                || options.calibrate
                || options.queue_order.is_some()
                || options.reduce_tier.is_some()
            {
                return Err(CliError(
                    "--measurements, --loads, --queue-order, --calibrate and --reduce-tier go with --experiment reduce-fig5"
                        .to_string(),
                ));
            }
            let calibration = calibrate(&scratch)?;
            if let Some(directory) = &options.out {
                let path = directory.join("reduce-calibrate.json");
                let text = serde_json::to_string_pretty(&calibration)
                    .map_err(|error| CliError(format!("cannot write JSON: {error}")))?;
                std::fs::write(&path, text + "\n").map_err(|error| {
                    CliError(format!("{}: cannot write: {error}", path.display()))
                })?;
            }
            if options.json {
                print_json(&calibration)
            } else {
                print!("{}", render(&calibration));
                Ok(())
            }
        }
        Experiment::ReduceFig5 => {
            let mut config = Fig5Config {
                seed: options.seed,
                ..Fig5Config::default()
            };
            if let Some(measurements) = options.measurements {
                if measurements == 0 {
                    return Err(CliError(
                        "--measurements 0: give at least 1 (the paper takes 15)".to_string(),
                    ));
                }
                config.measurements = measurements;
            }
            if let Some(order) = options.queue_order {
                config.queue_order = order;
            }
            if let Some(loads) = &options.loads {
                config.loads_percent = parse_loads(loads)?;
            }
            if let Some(tier) = &options.reduce_tier {
                config.tier = Some(parse_tier(tier, config.block_bytes)?);
            }
            let mut source = "recorded defaults (tierd_sim::reduce::cost::MEASURED)".to_string();
            if options.calibrate {
                let calibration = calibrate(&scratch)?;
                eprint!("{}", render(&calibration));
                config.costs = calibration.costs;
                source = "measured by this run (--calibrate)".to_string();
            }
            let report = fig5::run(&config, &source);
            if let Some(directory) = &options.out {
                let written = output::write(&report, directory).map_err(|error| {
                    CliError(format!("{}: cannot write: {error}", directory.display()))
                })?;
                if !options.json {
                    for path in written {
                        eprintln!("tierd: wrote {}", path.display());
                    }
                }
            }
            if options.json {
                print_json(&report)
            } else {
                print!("{}", output::render_text(&report));
                Ok(())
            }
        }
    }
}
