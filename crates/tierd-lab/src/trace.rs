//! `tierd trace stats` and `tierd trace analyze` as a library: the numbers
//! and the JSON object their `--json` prints (provenance first), for the
//! CLI and the Python module alike.

use std::path::PathBuf;

use serde_json::{json, Value};
use tierd_analysis::analyze::{analyze as analyze_trace, Analysis, AnalyzeOptions};
use tierd_analysis::stats::{compute, Stats, StatsOptions};
use tierd_trace::{open_trace, Format, IteratorReader, OpenOptions, TraceReader};

use crate::LabError;

/// Why [`stats`] or [`analyze`] failed: the trace (its reader's error, for
/// callers that tell those apart, as Python's `tierd.TraceError`), or
/// anything else. Displays as the message the CLI prints.
#[derive(Debug)]
pub enum Failure {
    Trace(tierd_trace::TraceError),
    Other(LabError),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Trace(error) => error.fmt(formatter),
            Failure::Other(error) => error.fmt(formatter),
        }
    }
}

impl std::error::Error for Failure {}

impl From<tierd_trace::TraceError> for Failure {
    fn from(error: tierd_trace::TraceError) -> Self {
        Failure::Trace(error)
    }
}

fn other(error: impl std::fmt::Display) -> Failure {
    Failure::Other(LabError(error.to_string()))
}

/// The preset `tierd trace analyze` analyses when no file is given.
pub const DEFAULT_PRESET: &str = "usr_1";
pub const DEFAULT_SEED: u64 = 1;

/// What a report says about where its requests came from.
#[derive(Clone, Debug)]
pub struct Provenance {
    pub trace: String,
    /// `file` or `synthetic`.
    pub kind: &'static str,
}

/// A command's result with where it came from and the lines it skipped.
pub struct Outcome<T> {
    pub value: T,
    pub provenance: Provenance,
    /// Malformed lines skipped (`skip_bad_lines`), and the file they were in.
    pub skipped_lines: u64,
    pub path: PathBuf,
}

impl<T: serde::Serialize> Outcome<T> {
    /// The object `--json` prints: `trace`, `trace_kind`, then the fields.
    pub fn json(&self) -> Result<Value, LabError> {
        Ok(with_provenance(
            serde_json::to_value(&self.value)?,
            &self.provenance,
        ))
    }

    /// The note `--skip-bad-lines` prints, when lines were skipped.
    pub fn skipped_note(&self) -> Option<String> {
        (self.skipped_lines > 0).then(|| {
            format!(
                "tierd: skipped {} malformed line(s) in {} (--skip-bad-lines)",
                self.skipped_lines,
                self.path.display()
            )
        })
    }
}

fn with_provenance(value: Value, provenance: &Provenance) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("trace".into(), json!(provenance.trace));
    object.insert("trace_kind".into(), json!(provenance.kind));
    if let Value::Object(fields) = value {
        object.extend(fields);
    }
    Value::Object(object)
}

/// `tierd trace stats FILE`: counts, sizes, span, IOPS over `period_ns`.
pub fn stats(
    file: &std::path::Path,
    open: &OpenOptions,
    period_ns: u64,
) -> Result<Outcome<Stats>, Failure> {
    let mut reader = open_trace(file, open)?;
    let stats = compute(reader.as_mut(), &StatsOptions { period_ns })?;
    Ok(Outcome {
        value: stats,
        provenance: Provenance {
            trace: file.display().to_string(),
            kind: "file",
        },
        skipped_lines: reader.skipped_lines(),
        path: reader.path().to_path_buf(),
    })
}

/// `tierd trace analyze [FILE]`: the papers' workload analysis; with no
/// file, of the generated default (preset usr_1, seed 1; synthetic).
pub fn analyze(
    file: Option<&std::path::Path>,
    open: &OpenOptions,
    options: &AnalyzeOptions,
) -> Result<Outcome<Analysis>, Failure> {
    if !options.segment_bytes.is_power_of_two() || options.segment_bytes < 4096 {
        return Err(other(format!(
            "--segment-bytes {} is not a power of two of at least 4 KiB (try 1GiB, 256MiB)",
            options.segment_bytes
        )));
    }
    options.validate().map_err(other)?;
    let mut options = options.clone();
    let (mut reader, provenance): (Box<dyn TraceReader>, Provenance) = match file {
        Some(file) => (
            open_trace(file, open)?,
            Provenance {
                trace: file.display().to_string(),
                kind: "file",
            },
        ),
        None => {
            let preset = tierd_synth::preset(DEFAULT_PRESET).map_err(other)?;
            let hours = preset.default_hours;
            let generator =
                tierd_synth::Generator::new(preset, DEFAULT_SEED, hours).map_err(other)?;
            let label = tierd_synth::label(preset, DEFAULT_SEED, hours);
            if options.volume_bytes.is_none() {
                options.volume_bytes = Some(preset.volume_bytes);
            }
            (
                Box::new(IteratorReader::new(
                    generator,
                    &[preset.volume_name],
                    Format::Tierd,
                    &label,
                )),
                Provenance {
                    trace: label,
                    kind: "synthetic",
                },
            )
        }
    };
    let analysis = analyze_trace(reader.as_mut(), &options)?;
    Ok(Outcome {
        value: analysis,
        provenance,
        skipped_lines: reader.skipped_lines(),
        path: reader.path().to_path_buf(),
    })
}
