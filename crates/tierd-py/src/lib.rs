//! `tierd._native`: the Python module's Rust half. Glue only: every
//! function converts Python arguments into tierd-lab's settings, calls the
//! function the `tierd` CLI calls, and hands back what the CLI prints with
//! `--json` (as JSON text the Python half parses) or NumPy arrays. Errors
//! become `tierd.TierdError` (a `ValueError`) or, from the trace readers,
//! `tierd.TraceError`, with the CLI's message.

use std::path::PathBuf;
use std::str::FromStr;

use numpy::PyArray1;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;
use tierd_lab::sim::{SimSettings, DEFAULT_POLICIES};
use tierd_lab::sweep::{Cell, Output, Spec};
use tierd_lab::LabError;
use tierd_trace::{open_trace, Format, OpenOptions, TraceReader};

create_exception!(
    tierd,
    TierdError,
    PyValueError,
    "A tierd failure: the message is the CLI's (what went wrong, where, what to do)."
);
create_exception!(tierd, TraceError, TierdError, "A trace that cannot be read: the message names the file and the line or byte offset, shows the text and says what the format expects.");

fn lab_error(error: LabError) -> PyErr {
    TierdError::new_err(error.0)
}

fn trace_error(error: tierd_trace::TraceError) -> PyErr {
    TraceError::new_err(error.to_string())
}

fn trace_failure(failure: tierd_lab::trace::Failure) -> PyErr {
    match failure {
        tierd_lab::trace::Failure::Trace(error) => trace_error(error),
        tierd_lab::trace::Failure::Other(error) => lab_error(error),
    }
}

fn value_error(option: &str, message: impl std::fmt::Display) -> PyErr {
    TierdError::new_err(format!("{option}: {message}"))
}

/// A size: an int of bytes or a text (`64KiB`, `2GiB`).
fn size(option: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    if let Ok(bytes) = value.extract::<u64>() {
        return Ok(Some(bytes));
    }
    let text: String = value.extract()?;
    tierd_common::units::parse_bytes(&text)
        .map(Some)
        .map_err(|error| value_error(option, error))
}

/// A duration: an int of nanoseconds or a text (`60s`).
fn duration(option: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    if let Ok(ns) = value.extract::<u64>() {
        return Ok(Some(ns));
    }
    let text: String = value.extract()?;
    tierd_lab::sim::parse_period(&text)
        .map(Some)
        .map_err(|error| value_error(option, error))
}

/// A list as the CLI's comma lists: a str, or a sequence of str/int.
fn comma_list(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    if let Ok(text) = value.extract::<String>() {
        return Ok(Some(text));
    }
    let mut items = Vec::new();
    for item in value.try_iter()? {
        let item = item?;
        items.push(match item.extract::<String>() {
            Ok(text) => text,
            Err(_) => item.str()?.to_string(),
        });
    }
    Ok(Some(items.join(",")))
}

fn format(value: Option<String>) -> PyResult<Option<Format>> {
    value
        .as_deref()
        .map(Format::from_str)
        .transpose()
        .map_err(|message| value_error("format", message))
}

fn open_options(
    format_name: Option<String>,
    volume: Option<String>,
    skip_bad_lines: bool,
) -> PyResult<OpenOptions> {
    Ok(OpenOptions {
        format: format(format_name)?,
        volume,
        skip_bad_lines,
        ..OpenOptions::default()
    })
}

/// Requests of a trace in chunks (`tierd.read_trace`).
#[pyclass(module = "tierd._native")]
struct TraceChunks {
    reader: Mutex<Box<dyn TraceReader>>,
    chunk: usize,
    done: Mutex<bool>,
}

/// One chunk's columns.
#[derive(Default)]
struct Columns {
    time_ns: Vec<u64>,
    offset: Vec<u64>,
    length: Vec<u64>,
    is_write: Vec<bool>,
    volume: Vec<u32>,
    response_ns: Vec<i64>,
}

#[pymethods]
impl TraceChunks {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next chunk as a dict of NumPy arrays; `None` ends the iteration.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let columns = py.detach(|| -> Result<Option<Columns>, tierd_trace::TraceError> {
            let mut done = self
                .done
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if *done {
                return Ok(None);
            }
            let mut reader = self
                .reader
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut columns = Columns::default();
            while columns.time_ns.len() < self.chunk {
                let next = reader.next_request();
                let request = match next {
                    Ok(Some(request)) => request,
                    Ok(None) => {
                        *done = true;
                        break;
                    }
                    Err(error) => {
                        *done = true;
                        return Err(error);
                    }
                };
                columns.time_ns.push(request.time_ns);
                columns.offset.push(request.offset_bytes);
                columns.length.push(request.length_bytes);
                columns.is_write.push(request.op.is_write());
                columns.volume.push(request.volume);
                columns
                    .response_ns
                    .push(request.response_ns.map_or(-1, |ns| ns as i64));
            }
            Ok((!columns.time_ns.is_empty()).then_some(columns))
        });
        let Some(columns) = columns.map_err(trace_error)? else {
            return Ok(None);
        };
        let chunk = PyDict::new(py);
        chunk.set_item("time_ns", PyArray1::from_vec(py, columns.time_ns))?;
        chunk.set_item("offset", PyArray1::from_vec(py, columns.offset))?;
        chunk.set_item("length", PyArray1::from_vec(py, columns.length))?;
        chunk.set_item("is_write", PyArray1::from_vec(py, columns.is_write))?;
        chunk.set_item("volume", PyArray1::from_vec(py, columns.volume))?;
        chunk.set_item("response_ns", PyArray1::from_vec(py, columns.response_ns))?;
        Ok(Some(chunk))
    }

    /// Volume names by id (the `volume` column indexes this list).
    #[getter]
    fn volumes(&self) -> Vec<String> {
        self.reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .volumes()
            .names()
            .to_vec()
    }

    /// The format read (detected or given).
    #[getter]
    fn format(&self) -> String {
        self.reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .format()
            .name()
            .to_string()
    }

    /// Malformed lines skipped so far (`skip_bad_lines=True`).
    #[getter]
    fn skipped_lines(&self) -> u64 {
        self.reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .skipped_lines()
    }
}

#[pyfunction]
#[pyo3(signature = (path, format=None, volume=None, skip_bad_lines=false, chunk_size=65536))]
fn open_chunks(
    py: Python<'_>,
    path: PathBuf,
    format: Option<String>,
    volume: Option<String>,
    skip_bad_lines: bool,
    chunk_size: usize,
) -> PyResult<TraceChunks> {
    let options = open_options(format, volume, skip_bad_lines)?;
    let reader = py
        .detach(|| open_trace(&path, &options))
        .map_err(trace_error)?;
    Ok(TraceChunks {
        reader: Mutex::new(reader),
        chunk: chunk_size.max(1),
        done: Mutex::new(false),
    })
}

#[pyfunction]
#[pyo3(signature = (path, format=None, volume=None, skip_bad_lines=false, period=None))]
fn trace_stats(
    py: Python<'_>,
    path: PathBuf,
    format: Option<String>,
    volume: Option<String>,
    skip_bad_lines: bool,
    period: Option<&Bound<'_, PyAny>>,
) -> PyResult<(String, Vec<String>)> {
    let options = open_options(format, volume, skip_bad_lines)?;
    let period_ns = duration("period", period)?.unwrap_or(60_000_000_000);
    py.detach(|| {
        let outcome = tierd_lab::trace::stats(&path, &options, period_ns)?;
        let mut notes: Vec<String> = outcome.skipped_note().into_iter().collect();
        notes.extend(
            outcome
                .value
                .warnings
                .iter()
                .map(|warning| format!("tierd: warning: {}: {warning}", outcome.provenance.trace)),
        );
        let json = outcome.json().map_err(tierd_lab::trace::Failure::Other)?;
        Ok((json.to_string(), notes))
    })
    .map_err(trace_failure)
}

#[pyfunction]
#[pyo3(signature = (path=None, format=None, volume=None, skip_bad_lines=false, segment_bytes=None, period=None, volume_bytes=None, cache_bytes=None, top_n=30, share_percent=60.0, spike_iops=1.0))]
#[allow(clippy::too_many_arguments)]
fn analyze(
    py: Python<'_>,
    path: Option<PathBuf>,
    format: Option<String>,
    volume: Option<String>,
    skip_bad_lines: bool,
    segment_bytes: Option<&Bound<'_, PyAny>>,
    period: Option<&Bound<'_, PyAny>>,
    volume_bytes: Option<&Bound<'_, PyAny>>,
    cache_bytes: Option<&Bound<'_, PyAny>>,
    top_n: usize,
    share_percent: f64,
    spike_iops: f64,
) -> PyResult<(String, Vec<String>)> {
    let open = open_options(format, volume, skip_bad_lines)?;
    let options = tierd_analysis::analyze::AnalyzeOptions {
        segment_bytes: size("segment_bytes", segment_bytes)?.unwrap_or(1 << 30),
        period_ns: duration("period", period)?.unwrap_or(60_000_000_000),
        volume_bytes: size("volume_bytes", volume_bytes)?,
        cache_bytes: size("cache_bytes", cache_bytes)?,
        top_n,
        share_percent,
        spike_iops,
        ..tierd_analysis::analyze::AnalyzeOptions::default()
    };
    py.detach(|| {
        let outcome = tierd_lab::trace::analyze(path.as_deref(), &open, &options)?;
        let notes: Vec<String> = outcome.skipped_note().into_iter().collect();
        let json = outcome.json().map_err(tierd_lab::trace::Failure::Other)?;
        Ok((json.to_string(), notes))
    })
    .map_err(trace_failure)
}

/// `tierd sim --json`: the settings are `tierd sim`'s flags with `_` for
/// `-`; returns (the report as JSON text, the lines the CLI prints on
/// stderr).
#[pyfunction]
#[pyo3(signature = (trace=None, tiers="hdd-ssd".to_string(), policies=None, fast_bytes=None, **settings))]
fn simulate(
    py: Python<'_>,
    trace: Option<PathBuf>,
    tiers: String,
    policies: Option<&Bound<'_, PyAny>>,
    fast_bytes: Option<&Bound<'_, PyAny>>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<(String, Vec<String>)> {
    let mut sim = SimSettings {
        trace,
        tiers,
        policy: comma_list(policies)?.unwrap_or_else(|| DEFAULT_POLICIES.to_string()),
        fast_bytes: comma_list(fast_bytes)?,
        ..SimSettings::default()
    };
    if let Some(settings) = settings {
        for (key, value) in settings.iter() {
            let key: String = key.extract()?;
            let value = Some(&value).filter(|value| !value.is_none());
            let text = |value: Option<&Bound<'_, PyAny>>| -> PyResult<Option<String>> {
                value.map(|value| value.extract::<String>()).transpose()
            };
            match key.as_str() {
                "format" => sim.format = format(text(value)?)?,
                "volume" => sim.volume = text(value)?,
                "replicas" => sim.replicas = text(value)?,
                "skip_bad_lines" => sim.skip_bad_lines = value.map_or(Ok(false), |v| v.extract())?,
                "synth" => sim.synth = text(value)?.unwrap_or(sim.synth),
                "hours" => sim.hours = value.map(|v| v.extract()).transpose()?,
                "policy_config" => sim.policy_config = value.map(|v| v.extract()).transpose()?,
                "segment_bytes" => sim.segment_bytes = size("segment_bytes", value)?,
                "volume_bytes" => sim.volume_bytes = size("volume_bytes", value)?,
                "speed" => sim.speed = value.map(|v| v.extract()).transpose()?,
                "from_min" => sim.from_min = value.map(|v| v.extract()).transpose()?,
                "to_min" => sim.to_min = value.map(|v| v.extract()).transpose()?,
                "max_outstanding" => {
                    sim.max_outstanding = value
                        .map(|v| v.extract())
                        .transpose()?
                        .unwrap_or(sim.max_outstanding)
                }
                "queue_depth" => sim.queue_depth = value.map(|v| v.extract()).transpose()?,
                "period" => sim.period = duration("period", value)?,
                "cache_bytes" => sim.cache_bytes = size("cache_bytes", value)?,
                "cache_block" => {
                    sim.cache_block = match value {
                        None => None,
                        Some(value) => {
                            let text = match value.extract::<u64>() {
                                Ok(bytes) => bytes.to_string(),
                                Err(_) => value.extract::<String>()?,
                            };
                            Some(
                                tierd_lab::sim::parse_cache_block(&text)
                                    .map_err(|message| value_error("cache_block", message))?,
                            )
                        }
                    }
                }
                "cache_mode" => {
                    sim.cache_mode = text(value)?
                        .map(|text| tierd_sim::stack::CacheMode::parse(&text))
                        .transpose()
                        .map_err(|message| value_error("cache_mode", message))?
                }
                "admission" => {
                    sim.admission = text(value)?
                        .map(|text| tierd_sim::stack::AdmissionKind::parse(&text))
                        .transpose()
                        .map_err(|message| value_error("admission", message))?
                }
                "sequential_cutoff" => sim.sequential_cutoff = size("sequential_cutoff", value)?,
                "smr_staging" => {
                    sim.smr_staging = match value {
                        None => None,
                        Some(value) => Some(match value.extract::<bool>() {
                            Ok(flag) => flag,
                            Err(_) => tierd_lab::sim::parse_on_off(&value.extract::<String>()?)
                                .map_err(|message| value_error("smr_staging", message))?,
                        }),
                    }
                }
                "seed" => sim.seed = value.map_or(Ok(1), |v| v.extract())?,
                "jobs" => sim.jobs = value.map(|v| v.extract()).transpose()?,
                other => {
                    return Err(value_error(
                        other,
                        "not a setting of tierd.simulate; it takes tierd sim's flags with _ for - \
                         (format, volume, skip_bad_lines, synth, hours, policy_config, segment_bytes, \
                         volume_bytes, speed, from_min, to_min, max_outstanding, queue_depth, period, \
                         cache_bytes, cache_block, cache_mode, admission, sequential_cutoff, \
                         smr_staging, seed, jobs)",
                    ))
                }
            }
        }
    }
    py.detach(|| {
        let lines = Mutex::new(Vec::new());
        let say = |line: &str| {
            if let Ok(mut lines) = lines.lock() {
                lines.push(line.to_string());
            }
        };
        let simulation = tierd_lab::sim::simulate(&sim, &say, false)?;
        let json = serde_json::to_string(&simulation.report)?;
        Ok((json, lines.into_inner().unwrap_or_default()))
    })
    .map_err(lab_error)
}

/// Replays a page stream through one of tierd's page caches (the caches
/// the simulator's block-cache policies evict with; what
/// `tierd-policy/examples/cache_replay.rs` runs): `pages` are page numbers,
/// `is_write` (optional) marks writes. Returns (accesses, hits, miss ratio,
/// evictions, dirty evictions).
#[pyfunction]
#[pyo3(signature = (pages, policy, size_pages, is_write=None))]
fn cache_replay(
    py: Python<'_>,
    pages: numpy::PyReadonlyArray1<'_, u64>,
    policy: &str,
    size_pages: u64,
    is_write: Option<numpy::PyReadonlyArray1<'_, bool>>,
) -> PyResult<(u64, u64, f64, u64, u64)> {
    use tierd_policy::cache::{arc::ArcCache, fifo::Fifo, lru::Lru, replay_pages, s3fifo::S3Fifo};
    if size_pages > tierd_policy::cache::MAX_CAPACITY_PAGES {
        return Err(value_error(
            "size_pages",
            format!(
                "{size_pages} exceeds the maximum of {}",
                tierd_policy::cache::MAX_CAPACITY_PAGES
            ),
        ));
    }
    let pages = pages.as_slice()?;
    let writes = is_write
        .as_ref()
        .map(|writes| writes.as_slice())
        .transpose()?;
    if let Some(writes) = writes {
        if writes.len() != pages.len() {
            return Err(value_error(
                "is_write",
                format!("{} entries for {} pages", writes.len(), pages.len()),
            ));
        }
    }
    let accesses = || {
        pages
            .iter()
            .enumerate()
            .map(|(index, page)| (*page, writes.is_some_and(|writes| writes[index])))
    };
    let stats = py
        .detach(|| match policy {
            "fifo" => Ok(replay_pages(accesses(), &mut Fifo::new(size_pages))),
            "lru" => Ok(replay_pages(accesses(), &mut Lru::new(size_pages))),
            "arc" => Ok(replay_pages(accesses(), &mut ArcCache::new(size_pages))),
            "s3fifo" | "s3-fifo" => Ok(replay_pages(accesses(), &mut S3Fifo::new(size_pages))),
            other => Err(format!("{other:?}: fifo, lru, arc or s3fifo")),
        })
        .map_err(|message| value_error("policy", message))?;
    Ok((
        stats.accesses,
        stats.hits,
        stats.miss_ratio,
        stats.evictions,
        stats.dirty_evictions,
    ))
}

fn parse_spec(text: &str, kind: &str, source_name: &str) -> PyResult<Spec> {
    match kind {
        "toml" => Spec::from_toml(text, source_name),
        "json" => Spec::from_json(text, source_name),
        other => Err(LabError(format!("spec kind {other:?}: toml or json"))),
    }
    .map_err(lab_error)
}

/// The cells of a spec as (id, cell JSON) in grid order.
#[pyfunction]
fn sweep_cells(
    py: Python<'_>,
    text: String,
    kind: String,
    source_name: String,
) -> PyResult<Vec<(String, String)>> {
    let spec = parse_spec(&text, &kind, &source_name)?;
    py.detach(|| {
        let cells = tierd_lab::sweep::plan(&spec, &source_name)?;
        cells
            .iter()
            .map(|cell| Ok((cell.id.clone(), serde_json::to_string(cell)?)))
            .collect::<Result<Vec<_>, LabError>>()
    })
    .map_err(lab_error)
}

/// Runs one cell (JSON from `sweep_cells`); returns its row.
#[pyfunction]
fn sweep_run_cell(py: Python<'_>, cell: String) -> PyResult<String> {
    py.detach(|| {
        let cell: Cell = serde_json::from_str(&cell)?;
        tierd_lab::sweep::run_cell(&cell)
    })
    .map_err(lab_error)
}

/// A sweep's output file (tierd_lab::sweep::Output).
#[pyclass(module = "tierd._native")]
struct SweepOutput {
    output: Output,
}

#[pymethods]
impl SweepOutput {
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        Ok(SweepOutput {
            output: Output::open(&path).map_err(lab_error)?,
        })
    }

    /// Ids of the cells already in the file.
    fn done(&self) -> Vec<String> {
        self.output.done().to_vec()
    }

    fn append(&self, row: &str) -> PyResult<()> {
        self.output.append(row).map_err(lab_error)
    }

    /// Writes the file sorted by cell id; returns its path.
    fn finish(&self, py: Python<'_>) -> PyResult<PathBuf> {
        py.detach(|| self.output.finish()).map_err(lab_error)
    }

    /// The CSV holding every row (the output, or a Parquet file's journal).
    fn journal(&self) -> PathBuf {
        self.output.journal().to_path_buf()
    }
}

/// The local executor, as `tierd sweep` runs it; returns the summary as JSON.
#[pyfunction]
#[pyo3(signature = (text, kind, source_name, out, jobs=None, progress=true))]
fn sweep_local(
    py: Python<'_>,
    text: String,
    kind: String,
    source_name: String,
    out: PathBuf,
    jobs: Option<usize>,
    progress: bool,
) -> PyResult<String> {
    let spec = parse_spec(&text, &kind, &source_name)?;
    py.detach(|| {
        let cells = tierd_lab::sweep::plan(&spec, &source_name)?;
        let output = Output::open(&out)?;
        let summary = tierd_lab::sweep::run_local(&cells, &output, jobs, progress, &|line| {
            eprintln!("{line}")
        })?;
        Ok(serde_json::to_string(&summary)?)
    })
    .map_err(lab_error)
}

/// The sweep report of a sweep's CSV into a directory; returns index.html.
#[pyfunction]
fn sweep_report(py: Python<'_>, csv: PathBuf, directory: PathBuf) -> PyResult<PathBuf> {
    py.detach(|| tierd_lab::sweep_report::write(&csv, &directory))
        .map_err(lab_error)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("TierdError", py.get_type::<TierdError>())?;
    m.add("TraceError", py.get_type::<TraceError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<TraceChunks>()?;
    m.add_class::<SweepOutput>()?;
    m.add_function(wrap_pyfunction!(open_chunks, m)?)?;
    m.add_function(wrap_pyfunction!(trace_stats, m)?)?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(cache_replay, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_cells, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_run_cell, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_local, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_report, m)?)?;
    Ok(())
}
