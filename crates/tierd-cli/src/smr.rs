//! `tierd sim --experiment smr-staging` (docs/sim.md, "Experiments";
//! docs/engine/smr.md): the SMR home tier with and without staging.
//! `--export-traces DIR` writes its workloads as traces instead, for the
//! live half (`tierd replay` against `tierd serve`, bench/smr/live.sh).

use std::path::Path;

use serde::Serialize;
use tierd_sim::config::Replay;
use tierd_sim::smr::Workload;
use tierd_trace::{create_writer, Format, Op, VolumeTable, WriteOptions};

use crate::reduce::Options;
use crate::CliError;

/// The experiment's workloads at `scale`: paper 001's RW→RR, write bursts,
/// and the tierd-synth preset hm_0.
fn workloads(seed: u64, scale: f64) -> Result<Vec<Workload>, CliError> {
    let mut workloads = tierd_sim::smr::workloads(seed, scale);
    // MSR-like: the tierd-synth preset calibrated to MSR hm_0.
    let preset = tierd_synth::preset("hm_0")?;
    let hours = (0.5 * scale).max(0.05);
    let generator = tierd_synth::Generator::new(preset, seed, hours)?;
    workloads.push(tierd_sim::smr::generated(
        "hm_0",
        format!(
            "tierd-synth preset hm_0 (synthetic, calibrated to MSR Cambridge hm_0's 800 s cut), {hours} h"
        ),
        preset.volume_bytes,
        generator.collect(),
    ));
    Ok(workloads)
}

pub fn run(options: &Options) -> Result<(), CliError> {
    let scale = options.scale.unwrap_or(1.0);
    if !(scale.is_finite() && scale > 0.0 && scale <= 10.0) {
        return Err(CliError(format!(
            "--scale {scale}: give a factor above 0 and at most 10 (1 = paper 001's 10 GiB)"
        )));
    }
    let workloads = workloads(options.seed, scale)?;
    if let Some(directory) = &options.export_traces {
        return export(directory, &workloads, options.seed, scale, options.json);
    }
    let results = tierd_sim::smr::experiment(options.seed, &workloads)
        .map_err(|error| CliError(format!("--experiment smr-staging: {error}")))?;
    let text = tierd_sim::smr::render_text(&results);
    let json = serde_json::to_string_pretty(&results)
        .map_err(|error| CliError(format!("cannot write JSON: {error}")))?;
    if let Some(directory) = &options.out {
        for (name, contents) in [("smr-staging.txt", &text), ("smr-staging.json", &json)] {
            let path = directory.join(name);
            std::fs::write(&path, format!("{contents}\n"))
                .map_err(|error| CliError(format!("{}: cannot write: {error}", path.display())))?;
        }
    }
    if options.json {
        println!("{json}");
    } else {
        print!("{text}");
    }
    Ok(())
}

/// One exported workload, as `workloads.json` lists it.
#[derive(Serialize)]
struct Exported {
    name: &'static str,
    /// The trace, relative to the directory (tierd native format).
    file: String,
    /// What it is; every workload here is synthetic.
    description: String,
    kind: &'static str,
    /// The volume the offsets are within (the experiment's disk or area).
    volume_bytes: u64,
    /// How the experiment replays it: `{"mode": "closed-loop",
    /// "queue_depth": 1}` (timestamps all 0: with `tierd replay`, give
    /// `--max-inflight` = queue_depth) or `{"mode": "open-loop", "speed": 1.0}`.
    replay: Replay,
    requests: u64,
    reads: u64,
    writes: u64,
    read_bytes: u64,
    write_bytes: u64,
    /// Trace time of the last request, s (0 for closed loop).
    span_s: f64,
    /// The highest byte a request reaches.
    max_end_bytes: u64,
    seed: u64,
    scale: f64,
}

/// Writes every workload as `DIR/NAME.tierd` and `DIR/workloads.json`.
fn export(
    directory: &Path,
    workloads: &[Workload],
    seed: u64,
    scale: f64,
    json: bool,
) -> Result<(), CliError> {
    std::fs::create_dir_all(directory)
        .map_err(|error| CliError(format!("{}: cannot create: {error}", directory.display())))?;
    let mut listed = Vec::new();
    for workload in workloads {
        let file = format!("{}.tierd", workload.name);
        let path = directory.join(&file);
        let mut volumes = VolumeTable::new();
        volumes.intern(workload.name);
        let mut writer = create_writer(&path, Format::Tierd, &WriteOptions::default())?;
        let mut entry = Exported {
            name: workload.name,
            file,
            description: workload.description.clone(),
            kind: "synthetic",
            volume_bytes: workload.volume_bytes,
            replay: workload.replay,
            requests: 0,
            reads: 0,
            writes: 0,
            read_bytes: 0,
            write_bytes: 0,
            span_s: 0.0,
            max_end_bytes: 0,
            seed,
            scale,
        };
        let first_ns = workload
            .requests
            .first()
            .map_or(0, |request| request.time_ns);
        for request in &workload.requests {
            writer.write_request(request, &volumes)?;
            entry.requests += 1;
            match request.op {
                Op::Write => {
                    entry.writes += 1;
                    entry.write_bytes += request.length_bytes;
                }
                Op::Read => {
                    entry.reads += 1;
                    entry.read_bytes += request.length_bytes;
                }
            }
            entry.span_s = request.time_ns.saturating_sub(first_ns) as f64 / 1e9;
            entry.max_end_bytes = entry
                .max_end_bytes
                .max(request.offset_bytes + request.length_bytes);
        }
        writer.finish()?;
        listed.push(entry);
    }
    let manifest = serde_json::to_string_pretty(&listed)
        .map_err(|error| CliError(format!("cannot write JSON: {error}")))?;
    let path = directory.join("workloads.json");
    std::fs::write(&path, format!("{manifest}\n"))
        .map_err(|error| CliError(format!("{}: cannot write: {error}", path.display())))?;
    if json {
        println!("{manifest}");
    } else {
        for entry in &listed {
            println!(
                "wrote {} ({} requests: {} reads, {} writes): {}",
                directory.join(&entry.file).display(),
                entry.requests,
                entry.reads,
                entry.writes,
                entry.description
            );
        }
        println!("wrote {}", path.display());
    }
    Ok(())
}
