//! `tierd sweep SPEC.toml`: a grid of traces × tier stacks × policies ×
//! fast-tier sizes × segment and cache-block sizes, each cell one
//! independent `tierd sim` run (one policy at one size), every result one
//! row of a CSV (or Parquet) file.
//!
//! The pieces are separate so that any executor can drive them: [`plan`]
//! expands a spec into [`Cell`]s (each with a stable id), [`run_cell`] runs
//! one cell through [`crate::sim::simulate`] and formats its row,
//! [`Output`] appends rows as cells finish, tells which cells are done
//! (resuming skips them) and at the end rewrites the file sorted by cell
//! id, so the file's bytes depend only on the grid, never on the order
//! cells finished in or on the executor. [`run_local`] is the local
//! executor (threads over the cores); the Python package's Ray executor
//! calls the same functions from Ray tasks (python/tierd/sweep.py).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tierd_common::units::parse_bytes;
use tierd_trace::{open_trace, Format, OpenOptions};

use crate::progress::ProgressLine;
use crate::sim::{simulate, SimSettings};
use crate::LabError;

/// The keys a spec takes, for errors.
pub const SPEC_KEYS: &str = "traces, tiers, policies, fast_bytes, segment_bytes, cache_block, \
     queue_depth, speed, seed";

/// A size as a spec may write it: a number of bytes or a text (`64KiB`,
/// `5%` for fast-tier sizes).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum SizeEntry {
    Bytes(u64),
    Text(String),
}

impl SizeEntry {
    fn text(&self) -> String {
        match self {
            SizeEntry::Bytes(bytes) => bytes.to_string(),
            SizeEntry::Text(text) => text.clone(),
        }
    }
}

/// One entry of `traces`: a path or glob, or a table with its format and
/// volume (`volume = "each"`: one cell per volume of a multi-volume trace).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum TraceEntry {
    Path(String),
    Table {
        path: String,
        #[serde(default)]
        format: Option<String>,
        #[serde(default)]
        volume: Option<String>,
    },
}

/// A sweep spec (TOML, or the same keys as JSON from Python).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub traces: Vec<TraceEntry>,
    pub tiers: Vec<String>,
    pub policies: Vec<String>,
    #[serde(default)]
    pub fast_bytes: Vec<SizeEntry>,
    #[serde(default)]
    pub segment_bytes: Vec<SizeEntry>,
    #[serde(default)]
    pub cache_block: Vec<SizeEntry>,
    #[serde(default)]
    pub queue_depth: Option<u32>,
    #[serde(default)]
    pub speed: Option<f64>,
    #[serde(default)]
    pub seed: Option<u64>,
}

impl Spec {
    /// Parses TOML text; errors name `source_name`.
    pub fn from_toml(text: &str, source_name: &str) -> Result<Spec, LabError> {
        // The parser's message shows the line and, for an unknown key, the
        // keys a spec takes.
        toml::from_str(text)
            .map_err(|error| LabError(format!("{source_name}: {}", error.to_string().trim_end())))
    }

    /// Parses JSON text (what Python passes for a dict); errors name
    /// `source_name`.
    pub fn from_json(text: &str, source_name: &str) -> Result<Spec, LabError> {
        serde_json::from_str(text).map_err(|error| {
            LabError(format!(
                "{source_name}: {error} (a sweep spec takes the keys {SPEC_KEYS})"
            ))
        })
    }

    /// Reads a TOML spec file.
    pub fn load(path: &Path) -> Result<Spec, LabError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| LabError(format!("{}: cannot read: {error}", path.display())))?;
        Spec::from_toml(&text, &path.display().to_string())
    }
}

/// One run of the grid: what `tierd sim --trace TRACE --tiers TIERS
/// --policy POLICY [--fast-bytes SIZE] ...` runs.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Cell {
    /// 16 hex digits of a hash of the settings below (not of `open_*`):
    /// the same grid point has the same id on every machine.
    pub id: String,
    /// The trace as the spec named it (after glob expansion).
    pub trace: String,
    pub format: Option<String>,
    pub volume: Option<String>,
    pub tiers: String,
    pub policy: String,
    pub fast_bytes: Option<String>,
    pub segment_bytes: Option<u64>,
    pub cache_block: Option<u64>,
    pub queue_depth: Option<u32>,
    pub speed: Option<f64>,
    pub seed: u64,
    /// Absolute path of the trace, so a task in another working directory
    /// (a Ray worker) opens the same file.
    pub open_trace: PathBuf,
    /// The tier stack for [`tierd_sim::TierStack::load`]: the preset, or
    /// the file's absolute path.
    pub open_tiers: String,
}

impl Cell {
    fn key(&self) -> String {
        fn opt<T: ToString>(value: &Option<T>) -> String {
            value.as_ref().map_or_else(String::new, ToString::to_string)
        }
        format!(
            "trace={}\nformat={}\nvolume={}\ntiers={}\npolicy={}\nfast_bytes={}\nsegment_bytes={}\ncache_block={}\nqueue_depth={}\nspeed={}\nseed={}",
            self.trace,
            opt(&self.format),
            opt(&self.volume),
            self.tiers,
            self.policy,
            opt(&self.fast_bytes),
            opt(&self.segment_bytes),
            opt(&self.cache_block),
            opt(&self.queue_depth),
            opt(&self.speed),
            self.seed
        )
    }

    /// A short name for messages.
    pub fn name(&self) -> String {
        let mut name = self.trace.clone();
        if let Some(volume) = &self.volume {
            name.push_str(&format!(" volume {volume}"));
        }
        name.push_str(&format!(" on {} with {}", self.tiers, self.policy));
        if let Some(size) = &self.fast_bytes {
            name.push_str(&format!(" at {size}"));
        }
        name
    }

    /// The settings `tierd sim` would run this cell with.
    pub fn settings(&self) -> Result<SimSettings, LabError> {
        let format = self
            .format
            .as_deref()
            .map(Format::from_str)
            .transpose()
            .map_err(|message| LabError(format!("format: {message}")))?;
        Ok(SimSettings {
            trace: Some(self.open_trace.clone()),
            format,
            volume: self.volume.clone(),
            tiers: self.open_tiers.clone(),
            policy: self.policy.clone(),
            fast_bytes: self.fast_bytes.clone(),
            segment_bytes: self.segment_bytes,
            cache_block: self.cache_block,
            queue_depth: self.queue_depth,
            speed: self.speed,
            seed: self.seed,
            jobs: Some(1),
            ..SimSettings::default()
        })
    }
}

/// FNV-1a, 64 bits: stable across machines and releases (unlike std's
/// hasher), which the ids of cells already done in a file rely on.
fn fnv1a(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The volumes of a trace, in order of first appearance (one pass).
fn volumes_of(path: &Path, format: Option<Format>) -> Result<Vec<String>, LabError> {
    let mut reader = open_trace(
        path,
        &OpenOptions {
            format,
            ..OpenOptions::default()
        },
    )?;
    while reader.next_request()?.is_some() {}
    Ok(reader.volumes().names().to_vec())
}

fn sizes(
    entries: &[SizeEntry],
    key: &str,
    source_name: &str,
) -> Result<Vec<Option<u64>>, LabError> {
    if entries.is_empty() {
        return Ok(vec![None]);
    }
    entries
        .iter()
        .map(|entry| match entry {
            SizeEntry::Bytes(bytes) => Ok(Some(*bytes)),
            SizeEntry::Text(text) => parse_bytes(text)
                .map(Some)
                .map_err(|error| LabError(format!("{source_name}: {key}: {text:?}: {error}"))),
        })
        .collect()
}

/// Expands a spec into its cells, in grid order (traces, volumes, tier
/// stacks, segment sizes, cache blocks, fast sizes, policies). Checks what
/// can be checked without running: files exist, stacks load, policies and
/// sizes parse.
pub fn plan(spec: &Spec, source_name: &str) -> Result<Vec<Cell>, LabError> {
    let error = |key: &str, message: String| LabError(format!("{source_name}: {key}: {message}"));
    for (key, empty) in [
        ("traces", spec.traces.is_empty()),
        ("tiers", spec.tiers.is_empty()),
        ("policies", spec.policies.is_empty()),
    ] {
        if empty {
            return Err(error(key, "is empty; give at least one".to_string()));
        }
    }
    let mut stacks = Vec::new();
    for tiers in &spec.tiers {
        let stack = tierd_sim::TierStack::load(tiers)
            .map_err(|cause| error("tiers", format!("{tiers:?}: {cause}")))?;
        let open = if Path::new(tiers).is_file() {
            absolute(Path::new(tiers)).display().to_string()
        } else {
            tiers.clone()
        };
        stacks.push((tiers.clone(), open, stack.tiers.len()));
    }
    for policy in &spec.policies {
        tierd_sim::Strategy::parse(policy).map_err(|cause| error("policies", cause.to_string()))?;
    }
    let fast: Vec<Option<String>> = if spec.fast_bytes.is_empty() {
        vec![None]
    } else {
        let mut list = Vec::new();
        for entry in &spec.fast_bytes {
            let text = entry.text();
            tierd_sim::sweep::parse_fast_sizes(&text)
                .map_err(|message| error("fast_bytes", message))?;
            list.push(Some(text));
        }
        list
    };
    if !spec.fast_bytes.is_empty() {
        if let Some((name, _, _)) = stacks.iter().find(|(_, _, tiers)| *tiers < 2) {
            return Err(error(
                "fast_bytes",
                format!("the tier stack {name:?} has one tier and no fast tier to size"),
            ));
        }
    }
    let segments = sizes(&spec.segment_bytes, "segment_bytes", source_name)?;
    let blocks = sizes(&spec.cache_block, "cache_block", source_name)?;
    let seed = spec.seed.unwrap_or(1);

    let mut cells = Vec::new();
    for entry in &spec.traces {
        let (pattern, format, volume) = match entry {
            TraceEntry::Path(path) => (path.clone(), None, None),
            TraceEntry::Table {
                path,
                format,
                volume,
            } => (path.clone(), format.clone(), volume.clone()),
        };
        let parsed_format = format
            .as_deref()
            .map(Format::from_str)
            .transpose()
            .map_err(|message| error("traces", format!("{pattern}: format: {message}")))?;
        let (paths, _) =
            crate::glob::expand(&pattern).map_err(|message| error("traces", message))?;
        for path in paths {
            let volumes: Vec<Option<String>> = match volume.as_deref() {
                Some("each") => volumes_of(&path, parsed_format)?
                    .into_iter()
                    .map(Some)
                    .collect(),
                other => vec![other.map(str::to_string)],
            };
            let open_trace = absolute(&path);
            for volume in &volumes {
                for (tiers, open_tiers, _) in &stacks {
                    for segment_bytes in &segments {
                        for cache_block in &blocks {
                            for fast_bytes in &fast {
                                for policy in &spec.policies {
                                    let mut cell = Cell {
                                        id: String::new(),
                                        trace: path.display().to_string(),
                                        format: format.clone(),
                                        volume: volume.clone(),
                                        tiers: tiers.clone(),
                                        policy: policy.clone(),
                                        fast_bytes: fast_bytes.clone(),
                                        segment_bytes: *segment_bytes,
                                        cache_block: *cache_block,
                                        queue_depth: spec.queue_depth,
                                        speed: spec.speed,
                                        seed,
                                        open_trace: open_trace.clone(),
                                        open_tiers: open_tiers.clone(),
                                    };
                                    cell.id = format!("{:016x}", fnv1a(&cell.key()));
                                    cells.push(cell);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let mut seen = tierd_common::hash::FastMap::default();
    cells.retain(|cell| seen.insert(cell.id.clone(), ()).is_none());
    Ok(cells)
}

/// The columns of a sweep file, in order.
pub const COLUMNS: [&str; 38] = [
    "cell_id",
    "trace",
    "format",
    "volume",
    "tiers",
    "policy",
    "fast_bytes_spec",
    "segment_bytes_spec",
    "cache_block_spec",
    "queue_depth",
    "speed",
    "seed",
    "trace_format",
    "fast_bytes",
    "segment_bytes",
    "cache_block_bytes",
    "volume_bytes",
    "working_set_bytes",
    "period_ns",
    "replay",
    "requests",
    "reads",
    "writes",
    "bytes",
    "hit_ratio",
    "miss_ratio",
    "fast_io_share",
    "avg_iops",
    "avg_response_us",
    "read_mean_us",
    "write_mean_us",
    "response_p50_us",
    "response_p90_us",
    "response_p99_us",
    "response_p999_us",
    "response_max_us",
    "migrated_bytes",
    "moves",
];

/// The header line (no newline).
pub fn header() -> String {
    COLUMNS.join(",")
}

/// A CSV field: quoted when it holds a comma, quote or line break.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// Splits one CSV line into fields (quotes as [`field`] writes them).
pub fn split_line(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if current.is_empty() => quoted = true,
            (',', false) => fields.push(std::mem::take(&mut current)),
            (c, _) => current.push(c),
        }
    }
    fields.push(current);
    fields
}

/// Runs one cell (one `tierd sim` run) and returns its row (no newline).
pub fn run_cell(cell: &Cell) -> Result<String, LabError> {
    let settings = cell.settings()?;
    let simulation = simulate(&settings, &|_| {}, false)?;
    let report = &simulation.report;
    let run = report
        .runs
        .first()
        .ok_or_else(|| LabError(format!("{}: the run produced no result", cell.name())))?;
    let opt = |value: &Option<String>| value.clone().unwrap_or_default();
    let num = |value: Option<u64>| value.map_or_else(String::new, |value| value.to_string());
    let hit = tierd_sim::sweep::hit_ratio(run);
    let trace_format = tierd_trace::open_trace(
        &cell.open_trace,
        &OpenOptions {
            format: settings.format,
            ..OpenOptions::default()
        },
    )
    .map(|reader| reader.format().name().to_string())
    .unwrap_or_default();
    let replay = match run.settings.replay {
        tierd_sim::Replay::OpenLoop { speed } => format!("open-loop x{speed}"),
        tierd_sim::Replay::ClosedLoop { queue_depth } => format!("closed-loop qd{queue_depth}"),
    };
    let values: Vec<String> = vec![
        cell.id.clone(),
        cell.trace.clone(),
        opt(&cell.format),
        opt(&cell.volume),
        cell.tiers.clone(),
        cell.policy.clone(),
        opt(&cell.fast_bytes),
        num(cell.segment_bytes),
        num(cell.cache_block),
        cell.queue_depth
            .map_or_else(String::new, |depth| depth.to_string()),
        cell.speed
            .map_or_else(String::new, |speed| speed.to_string()),
        cell.seed.to_string(),
        trace_format,
        run.fast_bytes.to_string(),
        run.settings.segment_bytes.to_string(),
        simulation.config.stack.cache.block_bytes.to_string(),
        run.settings.volume_bytes.to_string(),
        num(report.working_set_bytes),
        run.settings.period_ns.to_string(),
        replay,
        run.requests.to_string(),
        run.reads.to_string(),
        run.writes.to_string(),
        run.bytes.to_string(),
        hit.to_string(),
        (1.0 - hit).to_string(),
        run.fast_io_share.to_string(),
        run.avg_iops.to_string(),
        run.avg_response_us.to_string(),
        run.directions.read_mean_us.to_string(),
        run.directions.write_mean_us.to_string(),
        run.response_p50_us.to_string(),
        run.response_p90_us.to_string(),
        run.response_p99_us.to_string(),
        run.response_p999_us.to_string(),
        run.response_max_us.to_string(),
        run.migrated_bytes.to_string(),
        run.moves.to_string(),
    ];
    debug_assert_eq!(values.len(), COLUMNS.len());
    Ok(values
        .iter()
        .map(|value| field(value))
        .collect::<Vec<_>>()
        .join(","))
}

/// What the output file is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    Csv,
    Parquet,
}

/// The output of a sweep: rows are appended to a journal as cells finish
/// (the CSV itself, or `FILE.parquet.rows.csv` beside a Parquet file);
/// [`Output::finish`] writes the file sorted by cell id.
pub struct Output {
    path: PathBuf,
    journal: PathBuf,
    kind: OutputKind,
    file: Mutex<std::fs::File>,
    done: Vec<String>,
}

impl Output {
    /// Opens (or creates) `path`'s journal: a `.csv` or `.parquet` file.
    /// Rows already there are the cells done; a last line cut short (a
    /// killed run) is dropped.
    pub fn open(path: &Path) -> Result<Output, LabError> {
        let name = path.display().to_string();
        let kind = match path.extension().and_then(|extension| extension.to_str()) {
            Some("csv") => OutputKind::Csv,
            Some("parquet") => OutputKind::Parquet,
            _ => {
                return Err(LabError(format!(
                    "{name}: the output is FILE.csv or FILE.parquet"
                )))
            }
        };
        let journal = match kind {
            OutputKind::Csv => path.to_path_buf(),
            OutputKind::Parquet => PathBuf::from(format!("{name}.rows.csv")),
        };
        let header = header();
        let mut done = Vec::new();
        let mut keep_bytes = 0u64;
        if journal.exists() {
            let file = std::fs::File::open(&journal).map_err(|error| {
                LabError(format!("{}: cannot read: {error}", journal.display()))
            })?;
            let mut reader = std::io::BufReader::new(file);
            let mut line = String::new();
            let mut first = true;
            loop {
                line.clear();
                let read = reader.read_line(&mut line).map_err(|error| {
                    LabError(format!("{}: cannot read: {error}", journal.display()))
                })?;
                if read == 0 || !line.ends_with('\n') {
                    break;
                }
                let text = line.trim_end_matches('\n');
                if first {
                    if text != header {
                        return Err(LabError(format!(
                            "{}: not a tierd sweep file of this version (its first line is not the header {header:?}); give another --out, or remove it",
                            journal.display()
                        )));
                    }
                    first = false;
                } else if let Some(id) = text.split(',').next() {
                    done.push(id.to_string());
                }
                keep_bytes += read as u64;
            }
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&journal)
            .map_err(|error| LabError(format!("{}: cannot open: {error}", journal.display())))?;
        let length = file.metadata().map(|meta| meta.len()).unwrap_or(0);
        if length != keep_bytes {
            file.set_len(keep_bytes).map_err(|error| {
                LabError(format!("{}: cannot truncate: {error}", journal.display()))
            })?;
        }
        if keep_bytes == 0 {
            writeln!(file, "{header}").map_err(|error| {
                LabError(format!("{}: cannot write: {error}", journal.display()))
            })?;
        }
        done.sort();
        Ok(Output {
            path: path.to_path_buf(),
            journal,
            kind,
            file: Mutex::new(file),
            done,
        })
    }

    /// Ids of the cells already in the file, sorted.
    pub fn done(&self) -> &[String] {
        &self.done
    }

    pub fn is_done(&self, id: &str) -> bool {
        self.done
            .binary_search_by(|done| done.as_str().cmp(id))
            .is_ok()
    }

    /// Appends one row (written whole, then flushed).
    pub fn append(&self, row: &str) -> Result<(), LabError> {
        let mut file = self.file.lock();
        file.write_all(format!("{row}\n").as_bytes())
            .and_then(|()| file.flush())
            .map_err(|error| LabError(format!("{}: cannot write: {error}", self.journal.display())))
    }

    /// Sorts the rows by cell id (one row per id) and writes the file:
    /// the CSV in place (through a temporary file and a rename), or the
    /// Parquet file from the journal.
    pub fn finish(&self) -> Result<PathBuf, LabError> {
        let text = std::fs::read_to_string(&self.journal).map_err(|error| {
            LabError(format!("{}: cannot read: {error}", self.journal.display()))
        })?;
        let mut lines: Vec<&str> = text.lines().skip(1).collect();
        lines.sort_by_key(|line| line.split(',').next().unwrap_or_default());
        lines.dedup_by_key(|line| line.split(',').next().unwrap_or_default());
        let mut sorted = header();
        sorted.push('\n');
        for line in &lines {
            sorted.push_str(line);
            sorted.push('\n');
        }
        let temporary = PathBuf::from(format!("{}.tmp", self.journal.display()));
        std::fs::write(&temporary, &sorted)
            .map_err(|error| LabError(format!("{}: cannot write: {error}", temporary.display())))?;
        std::fs::rename(&temporary, &self.journal).map_err(|error| {
            LabError(format!(
                "{}: cannot rename: {error}",
                self.journal.display()
            ))
        })?;
        if self.kind == OutputKind::Parquet {
            let rows: Vec<Vec<String>> = lines.iter().map(|line| split_line(line)).collect();
            crate::parquet::write(&self.path, &COLUMNS, &rows)?;
        }
        Ok(self.path.clone())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The CSV holding every row (the output itself, or the Parquet
    /// file's journal).
    pub fn journal(&self) -> &Path {
        &self.journal
    }
}

/// What a sweep did.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub cells: usize,
    /// Done before (resumed).
    pub skipped: usize,
    pub ran: usize,
    /// (cell id, cell name, error) of every cell that failed; their rows
    /// are missing, so a rerun tries them again.
    pub failed: Vec<(String, String, String)>,
}

/// The local executor: `jobs` threads (default: the cores) take the cells
/// not done yet, run them and append their rows; then the file is sorted.
/// `say` gets one line per failure as it happens.
pub fn run_local(
    cells: &[Cell],
    output: &Output,
    jobs: Option<usize>,
    show_progress: bool,
    say: &(dyn Fn(&str) + Sync),
) -> Result<Summary, LabError> {
    let todo: Vec<&Cell> = cells
        .iter()
        .filter(|cell| !output.is_done(&cell.id))
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    let jobs = jobs.unwrap_or(cores).clamp(1, todo.len().max(1));
    let progress = ProgressLine::new("tierd sweep", "done", Some(todo.len() as u64))
        .with_unit("cells")
        .shown_only_if(show_progress);
    let next = AtomicUsize::new(0);
    let finished = AtomicU64::new(0);
    let failed = Mutex::new(Vec::new());
    let write_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(cell) = todo.get(index) else {
                    break;
                };
                match run_cell(cell) {
                    Ok(row) => {
                        if let Err(error) = output.append(&row) {
                            *write_error.lock() = Some(error);
                        }
                    }
                    Err(error) => {
                        progress.finish();
                        say(&format!(
                            "tierd sweep: cell {} ({}) failed: {error}",
                            cell.id,
                            cell.name()
                        ));
                        failed.lock().push((cell.id.clone(), cell.name(), error.0));
                    }
                }
                progress.update(finished.fetch_add(1, Ordering::Relaxed) + 1);
            });
        }
    });
    progress.finish();
    if let Some(error) = write_error.into_inner() {
        return Err(error);
    }
    output.finish()?;
    let mut failed = failed.into_inner();
    failed.sort();
    Ok(Summary {
        cells: cells.len(),
        skipped: cells.len() - todo.len(),
        ran: todo.len() - failed.len(),
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_round_trip() {
        let values = ["plain", "a,b", "say \"hi\"", ""];
        let line: Vec<String> = values.iter().map(|value| field(value)).collect();
        assert_eq!(split_line(&line.join(",")), values);
    }

    #[test]
    fn cell_ids_depend_on_the_settings_only() {
        let spec = Spec::from_toml(
            "traces = [\"Cargo.toml\"]\ntiers = [\"ssd-mem\"]\npolicies = [\"none\", \"fifo\"]\nfast_bytes = [\"1MiB\"]",
            "spec",
        )
        .unwrap();
        let cells = plan(&spec, "spec").unwrap();
        assert_eq!(cells.len(), 2);
        assert_ne!(cells[0].id, cells[1].id);
        assert_eq!(cells, plan(&spec, "spec").unwrap());
        // A spec key the sweep does not know is refused, naming the keys.
        let error = Spec::from_toml("traces = []\ntiers = []\npolicies = []\nfoo = 1", "s.toml")
            .unwrap_err();
        assert!(
            error.0.contains("s.toml") && error.0.contains("foo"),
            "{}",
            error.0
        );
    }
}
