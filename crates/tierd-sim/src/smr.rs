//! `tierd sim --experiment smr-staging` (issue 16 §4, simulated half): the
//! SMR home tier's mitigation (`docs/engine/smr.md`) against the same
//! stack without it, on paper 001's RW→RR benchmark and two MSR-like
//! workloads with write bursts. Every workload here is synthetic (the real
//! MSR `hm_0` cut runs through `tierd sim --trace`, docs/sim.md).
//!
//! Each workload runs on the `ssd-smr` stack three ways:
//! - `no cache`: policy `none`, every IO on the SMR disk (paper 001's setting);
//! - `staging off`: an LRU block cache on the SSD that writes dirty blocks
//!   back one by one, as over any other home;
//! - `staging on`: the same cache with whole-band destage.

use serde::Serialize;
use tierd_common::rng::{Rng, SeededRng};
use tierd_trace::{Format, IteratorReader, Op, Request};

use crate::config::{Replay, SimConfig, Strategy};
use crate::error::SimError;
use crate::result::RunResult;
use crate::stack::TierStack;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A generated workload and how it is replayed.
pub struct Workload {
    pub name: &'static str,
    /// One sentence: what it is and that it is synthetic.
    pub description: String,
    pub volume_bytes: u64,
    pub replay: Replay,
    pub requests: Vec<Request>,
}

fn request(time_ns: u64, op: Op, offset_bytes: u64, length_bytes: u64) -> Request {
    Request {
        time_ns,
        volume: 0,
        op,
        offset_bytes,
        length_bytes,
        response_ns: None,
    }
}

/// Paper 001 §3: random writes over the whole disk in 1 KiB, 16 KiB,
/// 256 KiB and 4 MiB pieces in about equal numbers (`write_bytes` in all),
/// then `reads` random 1 MiB reads over the whole disk, all at QD1, the
/// reads starting as the writes end. Offsets are 4 KiB-aligned.
pub fn rw_rr(seed: u64, volume_bytes: u64, write_bytes: u64, reads: u64) -> Workload {
    let mut rng = SeededRng::new(seed);
    let sizes = [KIB, 16 * KIB, 256 * KIB, 4 * MIB];
    let mut requests = Vec::new();
    let mut written = 0;
    let mut index = 0;
    while written < write_bytes {
        let length = sizes[index % sizes.len()];
        index += 1;
        let offset = rng.below((volume_bytes - length) / (4 * KIB)) * 4 * KIB;
        requests.push(request(0, Op::Write, offset, length));
        written += length;
    }
    for _ in 0..reads {
        let offset = rng.below((volume_bytes - MIB) / (4 * KIB)) * 4 * KIB;
        requests.push(request(0, Op::Read, offset, MIB));
    }
    Workload {
        name: "rw-rr",
        description: format!(
            "paper 001's RW→RR (synthetic): {} GiB of random writes (1 KiB/16 KiB/256 KiB/4 MiB in turn) over the whole disk, then {reads} random 1 MiB reads, QD1",
            write_bytes / GIB
        ),
        volume_bytes,
        replay: Replay::ClosedLoop { queue_depth: 1 },
        requests,
    }
}

/// An MSR-like volume with write bursts (synthetic): random 64 KiB reads
/// (Poisson, `read_iops`) over a 200 GiB area, light random writes
/// between bursts, and every `period_s` a burst of `burst_s` seconds of
/// small random writes (4–64 KiB) at `burst_iops`, 80 % of them in a 4 GiB
/// hot region (MSR volumes write mostly to a few hot areas); the reads
/// pause for `quiet_s` late in each period (MSR volumes have idle spells,
/// in which the stage destages).
pub fn write_bursts(seed: u64, minutes: u64) -> Workload {
    const AREA_BYTES: u64 = 200 * GIB;
    const HOT_BYTES: u64 = 4 * GIB;
    let (read_iops, write_iops, burst_iops) = (20.0, 2.0, 150.0);
    let (period_s, burst_s) = (120.0, 10.0);
    // Reads pause from 80 s to 110 s of each period.
    let (quiet_from_s, quiet_s) = (80.0, 30.0);
    let mut rng = SeededRng::new(seed);
    let end_ns = minutes * 60 * 1_000_000_000;
    let mut requests = Vec::new();
    let mut next_read = 0.0f64;
    let mut next_write = 0.0f64;
    loop {
        let time_s = next_read.min(next_write);
        let time_ns = (time_s * 1e9) as u64;
        if time_ns >= end_ns {
            break;
        }
        if next_read <= next_write {
            let in_period = time_s % period_s;
            if (quiet_from_s..quiet_from_s + quiet_s).contains(&in_period) {
                next_read += quiet_from_s + quiet_s - in_period;
                continue;
            }
            let offset = rng.below((AREA_BYTES - 64 * KIB) / (4 * KIB)) * 4 * KIB;
            requests.push(request(time_ns, Op::Read, offset, 64 * KIB));
            next_read += rng.exponential(1.0 / read_iops);
        } else {
            let length = (4 * KIB) << rng.below(5);
            let area = if rng.chance(0.8) {
                HOT_BYTES
            } else {
                AREA_BYTES
            };
            let offset = rng.below((area - length) / (4 * KIB)) * 4 * KIB;
            requests.push(request(time_ns, Op::Write, offset, length));
            let bursting = time_s % period_s < burst_s;
            next_write += rng.exponential(1.0 / if bursting { burst_iops } else { write_iops });
        }
    }
    Workload {
        name: "write-bursts",
        description: format!(
            "MSR-like (synthetic): {minutes} min of 64 KiB random reads at {read_iops}/s over 200 GiB, pausing {quiet_s} s of every {period_s} s; 4-64 KiB random writes at {write_iops}/s, and {burst_iops}/s for {burst_s} s every {period_s} s (80 % in a 4 GiB hot region)"
        ),
        volume_bytes: AREA_BYTES,
        replay: Replay::OpenLoop { speed: 1.0 },
        requests,
    }
}

/// A generated request stream (e.g. a tierd-synth preset, which the CLI
/// builds: this crate does not link the generator) replayed open loop at
/// its own pace.
pub fn generated(
    name: &'static str,
    description: String,
    volume_bytes: u64,
    requests: Vec<Request>,
) -> Workload {
    Workload {
        name,
        description,
        volume_bytes,
        replay: Replay::OpenLoop { speed: 1.0 },
        requests,
    }
}

/// The three ways each workload runs.
pub const SETUPS: [&str; 3] = ["no cache", "staging off", "staging on"];

/// One workload under one setup.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub workload: String,
    pub setup: String,
    pub reads: u64,
    pub writes: u64,
    pub read_slow_fraction_100ms: f64,
    pub read_p99_ms: f64,
    pub read_mean_ms: f64,
    pub write_mean_ms: f64,
    /// Staging on: whole-band rewrites and write blocks that still went home.
    pub band_rewrites: u64,
    pub home_write_blocks: u64,
    /// Virtual time of the run, s.
    pub elapsed_s: f64,
}

impl Row {
    fn of(workload: &Workload, setup: &str, run: &RunResult) -> Row {
        let smr = run.cache.as_ref().and_then(|cache| cache.smr.as_ref());
        Row {
            workload: workload.name.to_string(),
            setup: setup.to_string(),
            reads: run.reads,
            writes: run.writes,
            read_slow_fraction_100ms: run.directions.read_slow_fraction_100ms,
            read_p99_ms: run.directions.read_p99_us / 1e3,
            read_mean_ms: run.directions.read_mean_us / 1e3,
            write_mean_ms: run.directions.write_mean_us / 1e3,
            band_rewrites: smr.map_or(0, |smr| smr.band_rewrites),
            home_write_blocks: smr.map_or(0, |smr| smr.home_write_blocks),
            elapsed_s: run.elapsed_ns as f64 / 1e9,
        }
    }
}

/// Runs `workload` under `setup` (one of [`SETUPS`]) on `ssd-smr`.
pub fn run_one(workload: &Workload, setup: &str, seed: u64) -> Result<RunResult, SimError> {
    let mut stack = TierStack::preset("ssd-smr")?;
    stack.cache.smr_staging = setup == "staging on";
    let mut config = SimConfig::new(stack, workload.volume_bytes);
    config.replay = workload.replay;
    config.seed = seed;
    let strategy = Strategy::parse(if setup == "no cache" { "none" } else { "lru" })?;
    let mut reader = IteratorReader::new(
        workload.requests.iter().copied(),
        &[workload.name],
        Format::Tierd,
        workload.description.clone(),
    );
    crate::run(&config, &strategy, &mut reader, &mut |_| {})
}

/// The experiment's built-in workloads at `scale` (1 = paper 001's 10 GiB /
/// 10,240 reads; tests use less): RW→RR and write bursts.
pub fn workloads(seed: u64, scale: f64) -> Vec<Workload> {
    let disk_bytes = tierd_device::DevicePreset::Archive8tb.default_capacity_bytes();
    let write_bytes = ((10 * GIB) as f64 * scale) as u64;
    let reads = (10_240.0 * scale) as u64;
    let minutes = (30.0 * scale).max(1.0) as u64;
    vec![
        rw_rr(seed, disk_bytes / 4096 * 4096, write_bytes, reads),
        write_bursts(seed, minutes),
    ]
}

/// Every workload under every setup, in order.
pub fn experiment(seed: u64, workloads: &[Workload]) -> Result<Vec<(String, Vec<Row>)>, SimError> {
    let mut out = Vec::new();
    for workload in workloads {
        let mut rows = Vec::new();
        for setup in SETUPS {
            let run = run_one(workload, setup, seed)?;
            rows.push(Row::of(workload, setup, &run));
        }
        out.push((workload.description.clone(), rows));
    }
    Ok(out)
}

/// The table: one line per workload and setup.
pub fn render_text(results: &[(String, Vec<Row>)]) -> String {
    let mut text = String::new();
    text.push_str(
        "SMR home tier (ssd-smr: P3700 64 GB over Archive 8 TB SMR), with and without staging\n",
    );
    for (description, rows) in results {
        text.push_str(&format!("\n{description}\n"));
        text.push_str(&format!(
            "  {:<12} {:>8} {:>8} {:>11} {:>11} {:>12} {:>13} {:>9} {:>10}\n",
            "setup",
            "reads",
            "writes",
            "read>100ms",
            "read p99 ms",
            "read mean ms",
            "write mean ms",
            "bands",
            "home wr"
        ));
        for row in rows {
            text.push_str(&format!(
                "  {:<12} {:>8} {:>8} {:>10.2}% {:>11.1} {:>12.2} {:>13.2} {:>9} {:>10}\n",
                row.setup,
                row.reads,
                row.writes,
                row.read_slow_fraction_100ms * 100.0,
                row.read_p99_ms,
                row.read_mean_ms,
                row.write_mean_ms,
                row.band_rewrites,
                row.home_write_blocks
            ));
        }
    }
    text
}
