//! `tierd sim --matrix FILE.toml`: the evaluation grid of issue 14 §2.
//! `tierd_sim::matrix` parses the grid and judges the cells; this module
//! opens the workloads (the same [`Source`]s `tierd sim` replays), finds the
//! `saturate` factors, runs every cell's policies through `tierd sim`'s
//! jobs ([`run_jobs`]) at the sweep's equal fast-tier capacity
//! ([`tierd_sim::sweep::with_fast_bytes`]) and writes the reports.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use tierd_common::clock::{Clock, SystemClock};
use tierd_sim::matrix::{
    verdict, Cell, Grid, MatrixReport, Saturation, Skipped, Speed, WorkloadSource, SATURATED_UTIL,
};
use tierd_sim::{Replay, SimConfig, Strategy, TierStack};
use tierd_trace::{Format, OpenOptions};

use crate::progress::ProgressLine;
use crate::sim::{paper_speed, run_jobs, scan, Job, Source};
use crate::CliError;
use tierd_lab::glob::expand;

/// Where the results go.
pub struct Outputs {
    pub json: bool,
    pub out: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub jobs: Option<usize>,
}

/// One workload of the grid, opened and scanned.
struct Workload {
    /// Short name for tables: the path, `usr_1`, `shape:walking`.
    name: String,
    label: String,
    kind: &'static str,
    source: Source,
    /// The acceleration `own` stands for.
    own_speed: f64,
    speeds: Vec<Speed>,
    /// Synthetic: the preset's volume; files: from the scan.
    volume_bytes: Option<u64>,
    end_bytes: u64,
    requests: u64,
    working_set_bytes: u64,
}

pub fn run(path: &Path, outputs: Outputs) -> Result<(), CliError> {
    let clock = SystemClock::new();
    let source_name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|error| CliError(format!("{source_name}: cannot read: {error}")))?;
    let grid = Grid::parse(&text, &source_name)?;
    let config_error =
        |key: &str, message: String| CliError(format!("{source_name}: {key}: {message}"));

    let mut stacks = Vec::with_capacity(grid.stacks.len());
    for spec in &grid.stacks {
        let stack = TierStack::load(spec)
            .map_err(|error| config_error("stacks", format!("{spec:?}: {error}")))?;
        if stack.tiers.len() < 2 {
            return Err(config_error(
                "stacks",
                format!("{spec:?} has one tier and no fast tier to size; give a stack of two or more tiers (hdd-ssd, ssd-mem)"),
            ));
        }
        stacks.push(stack);
    }
    let mut notes = Vec::new();
    let workloads = open_workloads(&grid, &mut notes)?;
    let candidate_strategy = Strategy::parse(&grid.candidate).ok();
    let candidate_run = candidate_strategy.is_some();
    let mut policies: Vec<Strategy> = grid
        .policies
        .iter()
        .map(|name| Strategy::parse(name))
        .collect::<Result<_, _>>()?;
    if let Some(candidate) = candidate_strategy {
        if !policies.contains(&candidate) {
            policies.push(candidate);
        }
    } else {
        notes.push(format!(
            "candidate {:?} is not a policy the simulator knows ({}): candidate not run; the grid runs the others",
            grid.candidate,
            tierd_sim::config::POLICY_NAMES.join(", ")
        ));
    }
    let policy_names: Vec<String> = policies
        .iter()
        .map(|policy| policy.name().to_string())
        .collect();

    // Base settings of each (workload, stack).
    let base = |workload: &Workload, stack: &TierStack| -> Result<SimConfig, CliError> {
        let volume_bytes = workload.volume_bytes.unwrap_or_else(|| {
            workload.end_bytes.div_ceil(stack.segment_bytes).max(1) * stack.segment_bytes
        });
        let mut config = SimConfig::new(stack.clone(), volume_bytes);
        config.period_per_policy = true;
        config.seed = grid.seed;
        config.replay = Replay::OpenLoop {
            speed: workload.own_speed,
        };
        config
            .validate()
            .map_err(|error| CliError(format!("{} on {}: {error}", workload.name, stack.name)))?;
        Ok(config)
    };

    let saturation = find_saturation(&grid, &workloads, &stacks, &base, outputs.jobs)?;

    // Every cell's runs.
    struct Pending {
        cell: Cell,
        jobs: Vec<usize>,
    }
    let mut pending: Vec<Pending> = Vec::new();
    let mut jobs: Vec<Job> = Vec::new();
    let mut job_cell: Vec<usize> = Vec::new();
    let mut total_requests = 0u64;
    for (workload_index, workload) in workloads.iter().enumerate() {
        for (stack_index, stack) in stacks.iter().enumerate() {
            let config = base(workload, stack)?;
            for (size_text, size) in &grid.fast_sizes {
                let bytes = tierd_sim::sweep::resolve(&[*size], Some(workload.working_set_bytes))
                    .map_err(|message| config_error("fast_bytes", message))?[0];
                let sized = tierd_sim::sweep::with_fast_bytes(&config, bytes);
                for speed in &workload.speeds {
                    let (factor, found) = match speed {
                        Speed::Own => (workload.own_speed, None),
                        Speed::Factor(factor) => (*factor, None),
                        Speed::Saturate => {
                            let found = saturation
                                .iter()
                                .find(|(w, s, _)| *w == workload_index && *s == stack_index)
                                .map(|(_, _, found)| found.clone());
                            (found.as_ref().map_or(1.0, |found| found.factor), found)
                        }
                    };
                    let mut cell_config = sized.clone();
                    cell_config.replay = Replay::OpenLoop { speed: factor };
                    let mut skipped = Vec::new();
                    let mut cell_jobs = Vec::new();
                    for strategy in &policies {
                        if let Err(error) = tierd_sim::build_controller(&cell_config, strategy) {
                            skipped.push(Skipped {
                                policy: strategy.name().to_string(),
                                reason: error.to_string(),
                            });
                            continue;
                        }
                        cell_jobs.push(jobs.len());
                        job_cell.push(pending.len());
                        total_requests += workload.requests;
                        jobs.push(Job {
                            config: cell_config.clone(),
                            strategy: strategy.clone(),
                            source: &workload.source,
                        });
                    }
                    pending.push(Pending {
                        cell: Cell {
                            workload: workload.name.clone(),
                            workload_label: workload.label.clone(),
                            workload_kind: workload.kind.to_string(),
                            stack: stack.name.clone(),
                            fast_size: size_text.clone(),
                            fast_bytes: bytes,
                            working_set_bytes: workload.working_set_bytes,
                            speed: speed.label(),
                            speed_factor: factor,
                            saturation: found,
                            runs: Vec::new(),
                            skipped,
                            verdict: None,
                        },
                        jobs: cell_jobs,
                    });
                }
            }
        }
    }

    // Progress: the request line while on a terminal, and a line per
    // finished cell (cells done / total, elapsed, ETA) always.
    let cells_total = pending.len();
    let left_per_cell: Vec<AtomicUsize> = pending
        .iter()
        .map(|pending| AtomicUsize::new(pending.jobs.len()))
        .collect();
    let cells_done = AtomicUsize::new(
        pending
            .iter()
            .filter(|pending| pending.jobs.is_empty())
            .count(),
    );
    let names: Vec<String> = pending.iter().map(|pending| pending.cell.name()).collect();
    let progress_line =
        ProgressLine::new("tierd sim --matrix", "simulated", Some(total_requests)).with_suffix(
            format!("over {} run(s) in {cells_total} cell(s)", jobs.len()),
        );
    let started_ns = clock.now_ns();
    eprintln!(
        "tierd sim --matrix: {cells_total} cell(s), {} run(s), {:.2} M requests to simulate",
        jobs.len(),
        total_requests as f64 / 1e6
    );
    let finished = |index: usize| {
        let cell = job_cell[index];
        if left_per_cell[cell].fetch_sub(1, Ordering::AcqRel) == 1 {
            let done = cells_done.fetch_add(1, Ordering::AcqRel) + 1;
            let elapsed_ns = clock.now_ns().saturating_sub(started_ns);
            let eta_ns = (elapsed_ns as f64 / done as f64 * (cells_total - done) as f64) as u64;
            let eta = if done < cells_total {
                format!(", ETA {}", seconds(eta_ns))
            } else {
                String::new()
            };
            progress_line.finish();
            eprintln!(
                "tierd sim --matrix: cell {done}/{cells_total} done ({}), {} elapsed{eta}",
                names[cell],
                seconds(elapsed_ns)
            );
        }
    };
    let mut results: Vec<Option<tierd_sim::RunResult>> =
        run_jobs(&jobs, outputs.jobs, &progress_line, &finished)?
            .into_iter()
            .map(Some)
            .collect();

    let mut cells = Vec::with_capacity(pending.len());
    for Pending { mut cell, jobs } in pending {
        cell.runs = jobs
            .iter()
            .filter_map(|index| results[*index].take())
            .collect();
        let rotational = stacks
            .iter()
            .find(|stack| stack.name == cell.stack)
            .is_some_and(|stack| stack.tiers[stack.home()].device.is_rotational());
        cell.verdict = verdict(&cell.runs, &grid.candidate, rotational);
        cells.push(cell);
    }
    let saturation = saturation.into_iter().map(|(_, _, found)| found).collect();
    let report = MatrixReport::new(
        source_name,
        grid.candidate.clone(),
        candidate_run,
        policy_names,
        saturation,
        cells,
        notes,
    );
    let wall_ns = clock.now_ns().saturating_sub(started_ns).max(1);
    eprintln!(
        "tierd sim --matrix: {} run(s) in {:.1} s wall",
        jobs.len(),
        wall_ns as f64 / 1e9
    );
    if outputs.json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print!("{}", report.render_text());
    }
    let files = report.render_html()?;
    if let Some(directory) = &outputs.out {
        let json = files.iter().filter(|file| file.name == "matrix.json");
        write_files(directory, json)?;
        eprintln!(
            "tierd sim --matrix: wrote {}",
            directory.join("matrix.json").display()
        );
    }
    if let Some(directory) = &outputs.report {
        write_files(directory, files.iter())?;
        eprintln!(
            "tierd sim --matrix: report written to {}",
            directory.join(tierd_sim::report::INDEX_FILE).display()
        );
    }
    Ok(())
}

/// A wall time as the progress lines write it: seconds, then minutes.
fn seconds(ns: u64) -> String {
    let seconds = ns as f64 / 1e9;
    if seconds < 120.0 {
        format!("{seconds:.1} s")
    } else {
        format!("{:.1} min", seconds / 60.0)
    }
}

fn write_files<'a>(
    directory: &Path,
    files: impl Iterator<Item = &'a tierd_sim::report::ReportFile>,
) -> Result<(), CliError> {
    std::fs::create_dir_all(directory)
        .map_err(|error| CliError(format!("{}: cannot create: {error}", directory.display())))?;
    for file in files {
        let path = directory.join(&file.name);
        std::fs::write(&path, &file.contents)
            .map_err(|error| CliError(format!("{}: cannot write: {error}", path.display())))?;
    }
    Ok(())
}

/// The grid's workloads, globs expanded, presets and shapes named, each
/// scanned once (its size, request count and working set).
fn open_workloads(grid: &Grid, notes: &mut Vec<String>) -> Result<Vec<Workload>, CliError> {
    let source_name = &grid.source_name;
    let mut workloads = Vec::new();
    for entry in &grid.workloads {
        let speeds = entry.speeds.clone().unwrap_or_else(|| grid.speeds.clone());
        let error = |field: &str, message: String| {
            CliError(format!("{source_name}: {}.{field}: {message}", entry.key))
        };
        match &entry.source {
            WorkloadSource::Trace {
                pattern,
                format,
                volume,
            } => {
                let format = format
                    .as_deref()
                    .map(Format::from_str)
                    .transpose()
                    .map_err(|message| error("format", message.to_string()))?;
                let (paths, globbed) =
                    expand(pattern).map_err(|message| error("trace", message))?;
                for path in paths {
                    let source = Source::File {
                        path: path.clone(),
                        options: OpenOptions {
                            format,
                            volume: volume.clone(),
                            ..OpenOptions::default()
                        },
                    };
                    let found =
                        scan(&source, Some(tierd_sim::Window::default())).map_err(|cause| {
                            error("trace", format!("{}: {}", path.display(), cause.0))
                        })?;
                    if !found.timed || found.requests < 2 {
                        let message = format!(
                            "{}: no timestamps (or fewer than two requests); the grid replays open loop at the trace's speed, which needs times",
                            path.display()
                        );
                        if globbed {
                            notes.push(format!("{}: skipped {message}", entry.key));
                            continue;
                        }
                        return Err(error("trace", message));
                    }
                    let name = path.display().to_string();
                    workloads.push(Workload {
                        label: name.clone(),
                        name,
                        kind: "real trace",
                        source,
                        own_speed: 1.0,
                        speeds: speeds.clone(),
                        volume_bytes: None,
                        end_bytes: found.end_bytes,
                        requests: found.requests,
                        working_set_bytes: found.working_set_bytes.unwrap_or(0),
                    });
                }
            }
            WorkloadSource::Preset(name) | WorkloadSource::Shape(name) => {
                let shape = matches!(entry.source, WorkloadSource::Shape(_));
                let field = if shape { "shape" } else { "preset" };
                let chosen: Vec<&'static tierd_synth::Preset> = match (shape, name.as_str()) {
                    (true, "all") => tierd_synth::shapes().iter().collect(),
                    (false, "all") => tierd_synth::presets().iter().collect(),
                    (true, name) => vec![tierd_synth::shape(name)
                        .map_err(|cause| error(field, cause.to_string()))?],
                    (false, name) => vec![tierd_synth::preset(name)
                        .map_err(|cause| error(field, cause.to_string()))?],
                };
                for preset in chosen {
                    let hours = entry.hours.unwrap_or(preset.default_hours);
                    let label = tierd_synth::label(preset, grid.seed, hours);
                    let is_shape = tierd_synth::is_shape(preset);
                    let source = Source::Synthetic {
                        preset,
                        seed: grid.seed,
                        hours,
                        label: label.clone(),
                    };
                    let found = scan(&source, Some(tierd_sim::Window::default()))
                        .map_err(|cause| error(field, cause.0))?;
                    workloads.push(Workload {
                        name: if is_shape {
                            format!("{}{}", tierd_synth::SHAPE_PREFIX, preset.name)
                        } else {
                            preset.name.to_string()
                        },
                        label,
                        kind: if is_shape {
                            "generated shape"
                        } else {
                            "synthetic preset"
                        },
                        source,
                        own_speed: if is_shape {
                            1.0
                        } else {
                            paper_speed(preset.name)
                        },
                        speeds: speeds.clone(),
                        volume_bytes: Some(preset.volume_bytes),
                        end_bytes: found.end_bytes,
                        requests: found.requests,
                        working_set_bytes: found.working_set_bytes.unwrap_or(0),
                    });
                }
            }
        }
    }
    Ok(workloads)
}

/// For every (workload, stack) with a `saturate` speed: run `none` at x1,
/// x2, x4, ... up to the grid's cap, each round in parallel over the pairs
/// still looking, and keep the first factor whose home utilisation is ≥
/// 90% (else the cap, marked not reached).
fn find_saturation(
    grid: &Grid,
    workloads: &[Workload],
    stacks: &[TierStack],
    base: &dyn Fn(&Workload, &TierStack) -> Result<SimConfig, CliError>,
    jobs: Option<usize>,
) -> Result<Vec<(usize, usize, Saturation)>, CliError> {
    let none = Strategy::parse("none")?;
    let mut searches: Vec<(usize, usize, Saturation, bool)> = Vec::new();
    for (workload_index, workload) in workloads.iter().enumerate() {
        if !workload.speeds.contains(&Speed::Saturate) {
            continue;
        }
        for (stack_index, stack) in stacks.iter().enumerate() {
            searches.push((
                workload_index,
                stack_index,
                Saturation {
                    workload: workload.name.clone(),
                    stack: stack.name.clone(),
                    factor: 1.0,
                    home_util: 0.0,
                    reached: false,
                    tried: Vec::new(),
                },
                false,
            ));
        }
    }
    let mut factor = 1u32;
    loop {
        let open: Vec<usize> = (0..searches.len())
            .filter(|index| !searches[*index].3)
            .collect();
        if open.is_empty() {
            break;
        }
        eprintln!(
            "tierd sim --matrix: saturate search: none at x{factor} on {} workload/stack pair(s)",
            open.len()
        );
        let mut round = Vec::with_capacity(open.len());
        for &index in &open {
            let (workload, stack) = (searches[index].0, searches[index].1);
            let mut config = base(&workloads[workload], &stacks[stack])?;
            config.replay = Replay::OpenLoop {
                speed: f64::from(factor),
            };
            round.push(Job {
                config,
                strategy: none.clone(),
                source: &workloads[workload].source,
            });
        }
        let progress_line = ProgressLine::new("tierd sim --matrix", "simulated", None)
            .with_suffix(format!("saturate search x{factor}"));
        let results = run_jobs(&round, jobs, &progress_line, &|_| {})?;
        for (&index, result) in open.iter().zip(results) {
            let search = &mut searches[index];
            search.2.tried.push((f64::from(factor), result.home_util));
            search.2.factor = f64::from(factor);
            search.2.home_util = result.home_util;
            if result.home_util >= SATURATED_UTIL {
                search.2.reached = true;
                search.3 = true;
            } else if factor.saturating_mul(2) > grid.saturate_max {
                search.3 = true;
            }
        }
        factor = factor.saturating_mul(2);
    }
    Ok(searches
        .into_iter()
        .map(|(workload, stack, found, _)| {
            eprintln!(
                "tierd sim --matrix: saturate: {} on {}: {}",
                found.workload,
                found.stack,
                found.text()
            );
            (workload, stack, found)
        })
        .collect())
}
