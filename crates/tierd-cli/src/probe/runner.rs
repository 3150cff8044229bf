//! Runs a probe's phases on a device and records every IO (the only part
//! of the probe that does IO or reads a clock). The device is a plain file
//! or block device (`FileDevice`, O_DIRECT) on the system clock, or a file
//! behind `LatencyDevice` with an SMR model on a `ManualClock` (virtual
//! time: a probe of hours runs in seconds, the same every time).
//!
//! Every phase but the first starts on a **settled** device: one 4 KiB read
//! at a random offset every `settle_poll_ns` until `settle_quiet_polls`
//! reads in a row were fast, so cleaning left over from the previous phase
//! does not land in the next one.

use std::sync::Arc;

use tierd_common::aligned::AlignedBuf;
use tierd_common::clock::Clock;
use tierd_common::rng::SeededRng;
use tierd_engine::device::BlockDevice;

use super::summary::{quantile, Phase, Record, QUIET_READS, SLOW_READ_NS};
use super::workload::{self, Amounts, Combination, Io, ReadKind, ALIGNMENT_BYTES, READ_BYTES};
use crate::CliError;

/// Small random writes that fill the media cache (fit phase).
pub const FILL_WRITE_BYTES: u64 = 64 << 10;
/// Fragments of the stride phase, and their distance.
pub const STRIDE_WRITE_BYTES: u64 = 4096;
pub const STRIDE_BYTES: u64 = 1 << 20;
/// Writes of the fill phase whose latency sets the baseline.
const FILL_BASELINE_WRITES: usize = 256;
/// The fill phase stops once [`FILL_SLOW_IN_WINDOW`] of the last
/// [`FILL_WINDOW`] writes waited for a clean: before the cache is full only
/// the cleans under load make writes wait (one per `busy_clean_spacing` of
/// writes, hundreds of writes apart); once it is full every clean makes room
/// for a band's share of the cache, a few writes.
pub const FILL_WINDOW: usize = 128;
pub const FILL_SLOW_IN_WINDOW: usize = 6;
/// Idle times tried by the idle phase (then bisected), seconds.
const IDLE_GRID_S: [f64; 8] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0];
const IDLE_BISECT_STEPS: usize = 5;
const IDLE_TRIES: usize = 3;

/// The device and the time it runs on.
pub struct Target {
    pub device: Arc<dyn BlockDevice>,
    pub clock: Arc<dyn Clock>,
    /// Bytes the probe may use, from byte 0.
    pub size_bytes: u64,
}

/// How a run goes.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub amounts: Amounts,
    pub seed: u64,
    pub settle_poll_ns: u64,
    pub settle_quiet_polls: usize,
    pub settle_max_ns: u64,
    /// Longest a phase's reads follow a burst past the paper's reads.
    pub follow_max_ns: u64,
    /// Run the fit phases after the benchmark.
    pub fit: bool,
    /// Most bytes the fill phase writes before giving up.
    pub fill_max_bytes: u64,
    /// Run the paper's benchmark (off: the fit phases only).
    pub benchmark: bool,
}

/// Told after every IO (the progress line).
pub trait Observer {
    fn io_done(&self, planned_ios_done: u64);
}

/// A slow op of a fit phase: more than twice the phase's median plus 40 ms.
pub fn slow_threshold_ns(median_ns: u64) -> u64 {
    median_ns * 2 + 40_000_000
}

struct Recorder<'a> {
    target: &'a Target,
    buffer: AlignedBuf,
    rng: SeededRng,
    observer: &'a dyn Observer,
    planned_done: u64,
}

impl Recorder<'_> {
    fn io(&mut self, io: &Io, phase_start_ns: u64) -> Result<Record, CliError> {
        let length = io.length_bytes as usize;
        if self.buffer.len() < length {
            self.buffer.resize(length);
            for (index, byte) in self.buffer.iter_mut().enumerate() {
                *byte = (index % 251) as u8 ^ 0x5a;
            }
        }
        let clock = &self.target.clock;
        let begin_ns = clock.now_ns();
        let result = if io.write {
            self.target
                .device
                .write_at(io.offset_bytes, &self.buffer[..length])
        } else {
            self.target
                .device
                .read_at(io.offset_bytes, &mut self.buffer[..length])
        };
        let end_ns = clock.now_ns();
        result.map_err(|error| CliError(format!("probe IO failed: {error}")))?;
        Ok(Record(
            u8::from(io.write),
            io.offset_bytes,
            io.length_bytes,
            begin_ns.saturating_sub(phase_start_ns),
            end_ns.saturating_sub(begin_ns),
        ))
    }

    fn planned(&mut self, io: &Io, phase_start_ns: u64) -> Result<Record, CliError> {
        let record = self.io(io, phase_start_ns)?;
        self.planned_done += 1;
        self.observer.io_done(self.planned_done);
        Ok(record)
    }

    fn random_read(&mut self, length_bytes: u64) -> Io {
        Io {
            write: false,
            offset_bytes: workload::random_offset(
                &mut self.rng,
                self.target.size_bytes,
                length_bytes,
            ),
            length_bytes,
        }
    }

    /// Polls until the device is quiet (see the module docs). Returns
    /// whether it settled within `settle_max_ns`.
    fn settle(&mut self, config: &RunConfig) -> Result<bool, CliError> {
        let start_ns = self.target.clock.now_ns();
        let mut quiet = 0;
        while quiet < config.settle_quiet_polls {
            if self.target.clock.now_ns() - start_ns > config.settle_max_ns {
                tracing::warn!(
                    "the device did not settle within {} s: the next phase may see cleaning left from the previous one",
                    config.settle_max_ns / 1_000_000_000
                );
                return Ok(false);
            }
            self.target.clock.sleep_ns(config.settle_poll_ns);
            let poll = self.random_read(ALIGNMENT_BYTES);
            let record = self.io(&poll, start_ns)?;
            quiet = if record.latency_ns() > SLOW_READ_NS {
                0
            } else {
                quiet + 1
            };
        }
        Ok(true)
    }
}

/// IOs the benchmark plans (the progress line's total), followed reads and
/// settling polls not counted.
pub fn planned_ios(config: &RunConfig, size_bytes: u64) -> u64 {
    if !config.benchmark {
        return 0;
    }
    let mut rng = SeededRng::new(config.seed);
    workload::combinations(&config.amounts)
        .iter()
        .map(|combination| {
            let writes = workload::writes(
                combination.write,
                combination.written_bytes,
                size_bytes,
                config.amounts.write_size_min_bytes,
                &mut rng,
            )
            .len() as u64;
            writes + config.amounts.read_bytes / READ_BYTES
        })
        .sum()
}

/// Runs the benchmark (and the fit phases when asked); returns every phase.
pub fn run(
    target: &Target,
    config: &RunConfig,
    observer: &dyn Observer,
) -> Result<Vec<Phase>, CliError> {
    let mut recorder = Recorder {
        target,
        buffer: AlignedBuf::zeroed(0),
        rng: SeededRng::new(config.seed ^ 0x5e77_171e),
        observer,
        planned_done: 0,
    };
    let mut workload_rng = SeededRng::new(config.seed);
    let mut phases = Vec::new();
    if config.benchmark {
        for combination in workload::combinations(&config.amounts) {
            recorder.settle(config)?;
            let phase = run_combination(&mut recorder, config, combination, &mut workload_rng)?;
            tracing::info!(phase = %phase.name, ios = phase.records.len(), "probe phase done");
            phases.push(phase);
        }
    }
    if config.fit {
        recorder.settle(config)?;
        phases.push(stride_phase(&mut recorder)?);
        recorder.settle(config)?;
        phases.push(idle_phase(&mut recorder)?);
        recorder.settle(config)?;
        phases.push(fill_phase(&mut recorder, config)?);
    }
    Ok(phases)
}

fn run_combination(
    recorder: &mut Recorder<'_>,
    config: &RunConfig,
    combination: Combination,
    rng: &mut SeededRng,
) -> Result<Phase, CliError> {
    let size = recorder.target.size_bytes;
    let writes = workload::writes(
        combination.write,
        combination.written_bytes,
        size,
        config.amounts.write_size_min_bytes,
        rng,
    );
    let reads = workload::reads(combination.read, config.amounts.read_bytes, size, rng);
    let start_ns = recorder.target.clock.now_ns();
    let mut records = Vec::with_capacity(writes.len() + reads.len());
    for io in &writes {
        records.push(recorder.planned(io, start_ns)?);
    }
    let writes_end_ns = recorder.target.clock.now_ns() - start_ns;
    let mut recent_slow = std::collections::VecDeque::with_capacity(QUIET_READS);
    for io in &reads {
        let record = recorder.planned(io, start_ns)?;
        push_recent(&mut recent_slow, record.latency_ns() > SLOW_READ_NS);
        records.push(record);
    }
    // Follow a burst still under way to its end (Fig. 7).
    let follow_from_ns = recorder.target.clock.now_ns();
    while recent_slow.iter().any(|&slow| slow)
        && recorder.target.clock.now_ns() - follow_from_ns < config.follow_max_ns
    {
        let io = match combination.read {
            ReadKind::Rr => recorder.random_read(READ_BYTES),
            // A sequential run goes on where it stopped, wrapping at the end.
            ReadKind::Sr => {
                let done = (records.len() - writes.len()) as u64;
                Io {
                    write: false,
                    offset_bytes: done * READ_BYTES % (size / READ_BYTES * READ_BYTES),
                    length_bytes: READ_BYTES,
                }
            }
        };
        let record = recorder.io(&io, start_ns)?;
        push_recent(&mut recent_slow, record.latency_ns() > SLOW_READ_NS);
        records.push(record);
    }
    Ok(Phase {
        name: combination.label(),
        combination: Some(combination),
        writes_end_ns,
        paper_reads: reads.len() as u64,
        records,
    })
}

fn push_recent(recent: &mut std::collections::VecDeque<bool>, slow: bool) {
    if recent.len() == QUIET_READS {
        recent.pop_front();
    }
    recent.push_back(slow);
}

/// Reads random 1 MiB until [`QUIET_READS`] in a row are fast (by `threshold_ns`).
fn read_until_quiet(
    recorder: &mut Recorder<'_>,
    records: &mut Vec<Record>,
    start_ns: u64,
    threshold_ns: u64,
    max_ns: u64,
) -> Result<(), CliError> {
    let mut fast = 0;
    let begin_ns = recorder.target.clock.now_ns();
    while fast < QUIET_READS && recorder.target.clock.now_ns() - begin_ns < max_ns {
        let io = recorder.random_read(READ_BYTES);
        let record = recorder.io(&io, start_ns)?;
        fast = if record.latency_ns() > threshold_ns {
            0
        } else {
            fast + 1
        };
        records.push(record);
    }
    Ok(())
}

/// Median latency of `count` random 1 MiB reads (a settled device's baseline).
fn baseline_read_ns(
    recorder: &mut Recorder<'_>,
    records: &mut Vec<Record>,
    start_ns: u64,
    count: usize,
) -> Result<u64, CliError> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let io = recorder.random_read(READ_BYTES);
        let record = recorder.io(&io, start_ns)?;
        latencies.push(record.latency_ns());
        records.push(record);
    }
    latencies.sort_unstable();
    Ok(quantile(&latencies, 0.5))
}

/// Skylight's band probe in kind: a 4 KiB fragment every [`STRIDE_BYTES`]
/// over a span, then random reads until cleaning is over. Each band the
/// fragments touched is cleaned once; cleans show as ops that waited
/// (`fit::band_from_stride`). The first 32 reads on the settled device are
/// the baseline; `writes_end_ns` marks where the fragments end.
fn stride_phase(recorder: &mut Recorder<'_>) -> Result<Phase, CliError> {
    let size = recorder.target.size_bytes;
    let start_ns = recorder.target.clock.now_ns();
    let mut records = Vec::new();
    let baseline_ns = baseline_read_ns(recorder, &mut records, start_ns, 32)?;
    // Starts 12 KiB into the device: never at a 1 MiB boundary, so never at
    // the first byte of a band whose size is whole MiB (which would open a
    // band-fill stream instead of dirtying the band).
    let first_bytes = 3 * ALIGNMENT_BYTES;
    let span_bytes = (size - first_bytes - STRIDE_WRITE_BYTES).min(4 << 30);
    let count = span_bytes / STRIDE_BYTES + 1;
    let writes_begin_ns = recorder.target.clock.now_ns() - start_ns;
    for index in 0..count {
        let io = Io {
            write: true,
            offset_bytes: first_bytes + index * STRIDE_BYTES,
            length_bytes: STRIDE_WRITE_BYTES,
        };
        records.push(recorder.io(&io, start_ns)?);
    }
    let writes_end_ns = recorder.target.clock.now_ns() - start_ns;
    tracing::debug!(writes_begin_ns, count, "stride fragments written");
    read_until_quiet(
        recorder,
        &mut records,
        start_ns,
        slow_threshold_ns(baseline_ns),
        24 * 3600 * 1_000_000_000,
    )?;
    Ok(Phase {
        name: "fit-stride".to_string(),
        combination: None,
        writes_end_ns,
        paper_reads: 32,
        records,
    })
}

/// When idle cleaning starts: dirty some bands, read sequentially (a drive
/// that cleans under load does not while the host streams), stay idle for
/// `t`, then one random 4 KiB read: it waits iff cleaning began during the
/// idle time (64 fragments first, so cleaning does not run out before `t`). `t` doubles from 0.25 s until a read waits, then is bisected.
/// Records: per try, the writes, the sequential reads, the probe read (its
/// idle time is its start minus the previous record's end).
fn idle_phase(recorder: &mut Recorder<'_>) -> Result<Phase, CliError> {
    let start_ns = recorder.target.clock.now_ns();
    let mut records = Vec::new();
    let mut polls = Vec::new();
    for _ in 0..16 {
        let io = recorder.random_read(ALIGNMENT_BYTES);
        let record = recorder.io(&io, start_ns)?;
        polls.push(record.latency_ns());
        records.push(record);
    }
    polls.sort_unstable();
    let threshold_ns = polls.last().copied().unwrap_or(0) + 10_000_000;
    // Fragments go to the first half of the device, the sequential reads
    // and the probe reads to the second: a read of a band holding cached
    // fragments also reads them (slower, and not sequential to the drive).
    let half = recorder.target.size_bytes / 2 / ALIGNMENT_BYTES * ALIGNMENT_BYTES;
    let mut region = 0u64;
    let mut test = |recorder: &mut Recorder<'_>,
                    records: &mut Vec<Record>,
                    idle_ns: u64|
     -> Result<bool, CliError> {
        let mut waited = false;
        for _ in 0..IDLE_TRIES {
            for _ in 0..64 {
                let io = Io {
                    write: true,
                    offset_bytes: workload::random_offset(&mut recorder.rng, half, ALIGNMENT_BYTES),
                    length_bytes: ALIGNMENT_BYTES,
                };
                records.push(recorder.io(&io, start_ns)?);
            }
            // Sequential reads in a region of their own (8 MiB apart).
            let base = half + region * (8 << 20) % (half - (8 << 20));
            region += 1;
            for index in 0..4 {
                let io = Io {
                    write: false,
                    offset_bytes: base + index * READ_BYTES,
                    length_bytes: READ_BYTES,
                };
                records.push(recorder.io(&io, start_ns)?);
            }
            recorder.target.clock.sleep_ns(idle_ns);
            let io = Io {
                write: false,
                offset_bytes: half
                    + workload::random_offset(&mut recorder.rng, half, ALIGNMENT_BYTES),
                length_bytes: ALIGNMENT_BYTES,
            };
            let record = recorder.io(&io, start_ns)?;
            records.push(record);
            waited |= record.latency_ns() > threshold_ns;
        }
        Ok(waited)
    };
    let seconds = |s: f64| (s * 1e9) as u64;
    let mut low_ns = 0;
    let mut high_ns = None;
    for idle_s in IDLE_GRID_S {
        if test(recorder, &mut records, seconds(idle_s))? {
            high_ns = Some(seconds(idle_s));
            break;
        }
        low_ns = seconds(idle_s);
    }
    if let Some(mut high) = high_ns {
        for _ in 0..IDLE_BISECT_STEPS {
            let middle = (low_ns + high) / 2;
            if test(recorder, &mut records, middle)? {
                high = middle;
            } else {
                low_ns = middle;
            }
        }
    }
    Ok(Phase {
        name: "fit-idle".to_string(),
        combination: None,
        writes_end_ns: 0,
        paper_reads: 0,
        records,
    })
}

/// Skylight's media-cache probe: random [`FILL_WRITE_BYTES`] writes until
/// the writes keep waiting for cleans ([`FILL_SLOW_IN_WINDOW`] of the last
/// [`FILL_WINDOW`]: every write now needs room a clean must make), or
/// `fill_max_bytes`.
fn fill_phase(recorder: &mut Recorder<'_>, config: &RunConfig) -> Result<Phase, CliError> {
    let start_ns = recorder.target.clock.now_ns();
    let mut records: Vec<Record> = Vec::new();
    let mut written = 0u64;
    let mut threshold_ns = u64::MAX;
    let mut recent = std::collections::VecDeque::with_capacity(FILL_WINDOW);
    while written < config.fill_max_bytes {
        let io = Io {
            write: true,
            ..recorder.random_read(FILL_WRITE_BYTES)
        };
        let record = recorder.io(&io, start_ns)?;
        written += io.length_bytes;
        records.push(record);
        if records.len() == FILL_BASELINE_WRITES {
            let mut latencies: Vec<u64> = records.iter().map(Record::latency_ns).collect();
            latencies.sort_unstable();
            threshold_ns = slow_threshold_ns(quantile(&latencies, 0.5));
        }
        if recent.len() == FILL_WINDOW {
            recent.pop_front();
        }
        recent.push_back(record.latency_ns() > threshold_ns);
        if recent.iter().filter(|&&slow| slow).count() >= FILL_SLOW_IN_WINDOW {
            break;
        }
    }
    Ok(Phase {
        name: "fit-fill".to_string(),
        combination: None,
        writes_end_ns: recorder.target.clock.now_ns() - start_ns,
        paper_reads: 0,
        records,
    })
}
