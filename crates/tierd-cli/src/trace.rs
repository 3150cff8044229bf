//! `tierd trace ...`: stats, analyze, convert, synth, formats.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::Value;
use tierd_analysis::analyze::AnalyzeOptions;
use tierd_common::units::{parse_bytes, parse_duration_ns};
use tierd_trace::{
    create_writer, open_trace, BlkparseEvent, Format, OpenOptions, TraceReader, WriteOptions,
};

use crate::CliError;

/// The preset the README's first quick-start command analyses when no file
/// is given, and its seed (tierd_lab::trace::analyze).
pub use tierd_lab::trace::DEFAULT_SEED;

#[derive(Subcommand)]
pub enum TraceCommand {
    /// Request counts, bytes, sizes, unique blocks, span, duration and IOPS of a trace.
    Stats(StatsArgs),
    /// The papers' workload analysis: top-segment shares, spikes, IO concentrations,
    /// the duration prediction table and a FIFO cache hit ratio. With no FILE it
    /// analyses a generated spike workload (preset usr_1, seed 1; synthetic).
    Analyze(AnalyzeArgs),
    /// Rewrite a trace in another format (tierd native, fio-iolog, msr, disksim, spc, cloudphysics-csv).
    Convert(ConvertArgs),
    /// Generate a synthetic spike workload calibrated to the papers' figures.
    Synth(SynthArgs),
    /// List the trace formats tierd reads and writes.
    Formats,
}

#[derive(Args)]
pub struct ReadArgs {
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_name = "FORMAT")]
    format: Option<Format>,
    /// Keep only this volume of a multi-volume trace (MSR `hm_0`, SPC ASU, DiskSim device, Tencent volume).
    #[arg(long, value_name = "NAME")]
    volume: Option<String>,
    /// Skip malformed lines and report how many, instead of stopping at the first.
    #[arg(long)]
    skip_bad_lines: bool,
    /// blkparse only: which event is a request: Q (queued, default), D (dispatched) or C (completed).
    #[arg(long, value_name = "Q|D|C", default_value = "Q")]
    event: BlkparseEvent,
}

impl ReadArgs {
    fn open_options(&self) -> OpenOptions {
        OpenOptions {
            format: self.format,
            volume: self.volume.clone(),
            skip_bad_lines: self.skip_bad_lines,
            blkparse_event: self.event,
            ..OpenOptions::default()
        }
    }
}

#[derive(Args)]
pub struct StatsArgs {
    /// Trace file (.gz, .bz2, .xz, .zst are read transparently).
    file: PathBuf,
    #[command(flatten)]
    read: ReadArgs,
    /// Period for mean and peak IOPS.
    #[arg(long, default_value = "60s", value_parser = duration_ns)]
    period: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct AnalyzeArgs {
    /// Trace file; omit it to analyse the embedded default (a generated usr_1-like spike workload).
    file: Option<PathBuf>,
    #[command(flatten)]
    read: ReadArgs,
    /// Segment (sub-LUN) size: a power of two.
    #[arg(long, default_value = "1GiB", value_parser = bytes)]
    segment_bytes: u64,
    /// Statistics period.
    #[arg(long, default_value = "60s", value_parser = duration_ns)]
    period: u64,
    /// Volume (LUN) size; default: the highest offset in the trace, rounded up to a segment.
    #[arg(long, value_parser = bytes)]
    volume_bytes: Option<u64>,
    /// FIFO cache size for the hit ratio (4 KiB pages).
    #[arg(long, value_parser = bytes)]
    cache_bytes: Option<u64>,
    /// Concentration detection: keep the N busiest segments each period.
    #[arg(long, default_value_t = 30)]
    top_n: usize,
    /// Concentration detection: take groups until they hold this % of the period's IO.
    #[arg(long, default_value_t = 60.0)]
    share_percent: f64,
    /// A segment spikes in a period when its IOPS reach this.
    #[arg(long, default_value_t = 1.0)]
    spike_iops: f64,
    /// Write a segment x time heat map (.png or .svg).
    #[arg(long, value_name = "FILE")]
    heatmap: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ConvertArgs {
    /// Trace to read.
    input: PathBuf,
    /// File to write; a .gz/.bz2/.xz/.zst extension compresses it.
    output: PathBuf,
    /// Output format.
    #[arg(long, value_name = "FORMAT")]
    to: Format,
    #[command(flatten)]
    read: ReadArgs,
    /// fio-iolog output version: 2 (every fio reads it, but it has no times:
    /// fio replays the requests back to back; a note says so when the input
    /// had times) or 3 (keeps times, for timed replay; fio 3.31+).
    #[arg(long, default_value_t = 2)]
    fio_iolog_version: u32,
    /// Turn every N-th read into a write (counting reads only, cyclic): paper
    /// 000 §5.4's filter for its flashcache comparison used N = 2 ("every
    /// other read becomes a write"). The result is a derived workload, not
    /// the recorded one.
    #[arg(long, value_name = "N")]
    reads_to_writes: Option<u64>,
    /// Round every offset down to a multiple of this size (e.g. 4KiB: paper
    /// 000 §5.4's filter, as flashcache cached only 4 KiB-aligned IO).
    /// Lengths are kept.
    #[arg(long, value_name = "SIZE", value_parser = bytes)]
    align: Option<u64>,
}

#[derive(Args)]
pub struct SynthArgs {
    /// Preset name (see --list); `shape:NAME` is a generated shape.
    #[arg(long, required_unless_present_any = ["list", "shape"], conflicts_with = "shape")]
    preset: Option<String>,
    /// Generated shape (boot-storm, walking, long-write-spikes, short-spikes,
    /// no-heat, large-working-set; see --list and docs/synth.md): a kind of
    /// heat the calibrated presets do not cover.
    #[arg(long, value_name = "NAME")]
    shape: Option<String>,
    /// Output file.
    #[arg(long, required_unless_present = "list")]
    out: Option<PathBuf>,
    /// Output format; default from the extension (.tierd → tierd, .csv → msr, .iolog → fio-iolog), else tierd.
    #[arg(long, value_name = "FORMAT")]
    to: Option<Format>,
    /// Root seed: the same seed gives the same trace.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Hours to generate; default: the preset's calibrated window.
    #[arg(long)]
    hours: Option<f64>,
    /// List presets with their calibration targets and sources.
    #[arg(long)]
    list: bool,
}

fn bytes(text: &str) -> Result<u64, String> {
    parse_bytes(text).map_err(|error| error.to_string())
}

fn duration_ns(text: &str) -> Result<u64, String> {
    match parse_duration_ns(text) {
        Ok(0) => Err("must be longer than zero".to_string()),
        Ok(value) => Ok(value),
        Err(error) => Err(error.to_string()),
    }
}

pub fn run(command: TraceCommand) -> Result<(), CliError> {
    match command {
        TraceCommand::Stats(args) => stats(args),
        TraceCommand::Analyze(args) => analyze_command(args),
        TraceCommand::Convert(args) => convert(args),
        TraceCommand::Synth(args) => synth(args),
        TraceCommand::Formats => {
            print_formats();
            Ok(())
        }
    }
}

fn report_skipped(reader: &dyn TraceReader) {
    let skipped = reader.skipped_lines();
    if skipped > 0 {
        eprintln!(
            "tierd: skipped {skipped} malformed line(s) in {} (--skip-bad-lines)",
            reader.path().display()
        );
    }
}

fn print_json(value: &Value) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

fn stats(args: StatsArgs) -> Result<(), CliError> {
    let outcome = tierd_lab::trace::stats(&args.file, &args.read.open_options(), args.period)?;
    if let Some(note) = outcome.skipped_note() {
        eprintln!("{note}");
    }
    let stats = &outcome.value;
    let provenance = &outcome.provenance;
    for warning in &stats.warnings {
        eprintln!("tierd: warning: {}: {warning}", provenance.trace);
    }
    if args.json {
        print_json(&outcome.json()?)
    } else {
        println!("trace: {} ({})", provenance.trace, stats.format);
        print!("{}", tierd_analysis::stats::render_text(stats));
        Ok(())
    }
}

fn analyze_command(args: AnalyzeArgs) -> Result<(), CliError> {
    let options = AnalyzeOptions {
        segment_bytes: args.segment_bytes,
        period_ns: args.period,
        volume_bytes: args.volume_bytes,
        cache_bytes: args.cache_bytes,
        top_n: args.top_n,
        share_percent: args.share_percent,
        spike_iops: args.spike_iops,
        ..AnalyzeOptions::default()
    };
    let outcome =
        tierd_lab::trace::analyze(args.file.as_deref(), &args.read.open_options(), &options)?;
    if let Some(note) = outcome.skipped_note() {
        eprintln!("{note}");
    }
    let analysis = &outcome.value;
    if let Some(path) = &args.heatmap {
        tierd_analysis::heatmap::write(analysis, path)?;
        eprintln!("tierd: heat map written to {}", path.display());
    }
    if args.json {
        print_json(&outcome.json()?)
    } else {
        println!(
            "trace: {} [{}]",
            outcome.provenance.trace, outcome.provenance.kind
        );
        print!("{}", tierd_analysis::analyze::render_text(analysis));
        Ok(())
    }
}

fn convert(args: ConvertArgs) -> Result<(), CliError> {
    if !matches!(args.fio_iolog_version, 2 | 3) {
        return Err(CliError(format!(
            "--fio-iolog-version {} is not supported; use 2 or 3",
            args.fio_iolog_version
        )));
    }
    if args.reads_to_writes == Some(0) {
        return Err(CliError(
            "--reads-to-writes 0: expected N >= 1 (every N-th read becomes a write; 2 = every other, as paper 000 §5.4)".to_string(),
        ));
    }
    if let Some(align) = args.align {
        if align == 0 || align % 512 != 0 {
            return Err(CliError(format!(
                "--align {align} bytes: expected a positive multiple of 512 bytes (e.g. 4KiB)"
            )));
        }
    }
    let mut reader = open_trace(&args.input, &args.read.open_options())?;
    let source_format = reader.format();
    let mut writer = create_writer(
        &args.output,
        args.to,
        &WriteOptions {
            fio_iolog_version: args.fio_iolog_version,
        },
    )?;
    // Whether the input has times to lose (two requests at different times).
    let mut first_ns = None;
    let mut timed_source = false;
    let mut reads_seen = 0u64;
    let mut turned = 0u64;
    let mut aligned = 0u64;
    while let Some(mut request) = reader.next_request()? {
        timed_source |= *first_ns.get_or_insert(request.time_ns) != request.time_ns;
        if let Some(every) = args.reads_to_writes {
            if request.op == tierd_trace::Op::Read {
                reads_seen += 1;
                if reads_seen.is_multiple_of(every) {
                    request.op = tierd_trace::Op::Write;
                    turned += 1;
                }
            }
        }
        if let Some(align) = args.align {
            let rounded = request.offset_bytes / align * align;
            aligned += u64::from(rounded != request.offset_bytes);
            request.offset_bytes = rounded;
        }
        writer.write_request(&request, reader.volumes())?;
    }
    let written = writer.finish()?;
    report_skipped(reader.as_ref());
    println!(
        "converted {written} requests from {source_format} to {}: {}",
        args.to,
        args.output.display()
    );
    if args.reads_to_writes.is_some() {
        println!("turned {turned} of {reads_seen} reads into writes (a derived workload)");
    }
    if let Some(align) = args.align {
        println!("moved {aligned} offsets down to a multiple of {align} bytes");
    }
    if args.to == Format::FioIolog && args.fio_iolog_version == 2 && timed_source {
        eprintln!(
            "tierd: note: fio iolog version 2 has no timestamps: the {source_format} times are dropped and fio replays the requests back to back; pass --fio-iolog-version 3 to keep them (fio 3.31 or later)"
        );
    }
    Ok(())
}

fn synth_output_format(args: &SynthArgs, out: &std::path::Path) -> Format {
    if let Some(format) = args.to {
        return format;
    }
    let name = out.file_name().and_then(|name| name.to_str()).unwrap_or("");
    let name = [".gz", ".bz2", ".xz", ".zst"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name);
    if name.ends_with(".csv") {
        Format::Msr
    } else if name.ends_with(".iolog") {
        Format::FioIolog
    } else {
        Format::Tierd
    }
}

fn synth(args: SynthArgs) -> Result<(), CliError> {
    if args.list {
        for preset in tierd_synth::presets()
            .iter()
            .chain(tierd_synth::apps::all())
            .chain(tierd_synth::shapes())
        {
            println!("{}", tierd_synth::describe_targets(preset));
        }
        return Ok(());
    }
    let Some(out) = &args.out else {
        return Err(CliError("--out is required (or --list)".into()));
    };
    let preset = match (&args.preset, &args.shape) {
        (_, Some(shape)) => tierd_synth::shape(shape)?,
        (Some(name), None) => tierd_synth::preset(name)?,
        (None, None) => {
            return Err(CliError(
                "--preset or --shape is required (or --list)".into(),
            ))
        }
    };
    let hours = args.hours.unwrap_or(preset.default_hours);
    if !(hours > 0.0 && hours.is_finite()) {
        return Err(CliError(format!(
            "--hours {hours} must be a positive number"
        )));
    }
    let format = synth_output_format(&args, out);
    let generator = tierd_synth::Generator::new(preset, args.seed, hours)?;
    let mut volumes = tierd_trace::VolumeTable::new();
    volumes.intern(preset.volume_name);
    let mut writer = create_writer(out, format, &WriteOptions::default())?;
    for request in generator {
        writer.write_request(&request, &volumes)?;
    }
    let written = writer.finish()?;
    println!(
        "wrote {written} requests ({format}) to {}: {}",
        out.display(),
        tierd_synth::label(preset, args.seed, hours)
    );
    Ok(())
}

fn print_formats() {
    println!("{:<18} {:<6} {:<6} description", "format", "read", "write");
    for format in Format::ALL {
        let writable = tierd_trace::write::WRITABLE_FORMATS.contains(&format);
        println!(
            "{:<18} {:<6} {:<6} {}",
            format.name(),
            "yes",
            if writable { "yes" } else { "no" },
            format.description()
        );
    }
    println!("\nCompressed input (.gz, .bz2, .xz, .zst) is detected from its magic bytes; output is compressed by extension.");
}
