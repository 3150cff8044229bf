//! The evaluation grid of `tierd sim --matrix FILE.toml` (issue 14 §2):
//! the grid file, the verdict of one cell, and the grid's reports (text
//! tables, JSON, an HTML page with an SVG plot). Pure: the CLI opens the
//! workloads and runs the cells (each cell is a `--fast-bytes` sweep point,
//! [`crate::sweep::with_fast_bytes`], so every policy of a cell gets the
//! same fast-tier capacity); this module says what to run and judges it.
//!
//! A grid file:
//!
//! ```toml
//! stacks = ["hdd-ssd", "ssd-mem"]          # presets or stack files
//! fast_bytes = ["1%", "5%", "10%", "25%"]  # the --fast-bytes syntax
//! speeds = ["own", "saturate"]             # "own", numbers, "saturate"
//! policies = ["none", "otf-ast", "lru"]    # default: every policy known
//! candidate = "adaptive"                   # default "adaptive"
//! saturate_max = 256                       # largest factor tried
//! seed = 1
//!
//! [[workload]]
//! trace = "../shared/traces/msr_cambridge/*.csv"   # a file or a glob
//! speed = [1, "saturate"]                  # this workload's speeds
//! [[workload]]
//! preset = "usr_1"                         # or "all"
//! hours = 1
//! [[workload]]
//! shape = "walking"                        # or "all"
//! ```

use std::fmt::Write as _;

use serde::Serialize;
use tierd_common::units::Bytes;

use crate::error::SimError;
use crate::report::svg::{self, escape, Chart, Panel, Scale, Series, TickFormat};
use crate::result::RunResult;
use crate::sweep::{parse_fast_sizes, FastSize};

/// The issue's bars: candidate mean ≤ 1.05 × the best mean, p99 ≤ 1.10 ×
/// the best p99, and (on a stack whose home is a disk) iops ≥ 0.95 × the
/// best iops.
pub const MEAN_BAR: f64 = 1.05;
pub const P99_BAR: f64 = 1.10;
pub const IOPS_BAR: f64 = 0.95;

/// Home-device utilisation (with policy `none`) that counts as saturated.
pub const SATURATED_UTIL: f64 = 0.9;
/// Largest factor the `saturate` search tries unless the grid says.
pub const DEFAULT_SATURATE_MAX: u32 = 256;
pub const DEFAULT_CANDIDATE: &str = "adaptive";

/// One entry of a speed list.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Speed {
    /// The workload's own speed: 1 for a trace file or a shape, the papers'
    /// factor for a synthetic preset (as `tierd sim` replays it).
    Own,
    /// A fixed acceleration.
    Factor(f64),
    /// The smallest power of two (x1, x2, x4, ... up to `saturate_max`) at
    /// which the home device's utilisation with `none` is ≥ 90%.
    Saturate,
}

impl Speed {
    pub fn label(&self) -> String {
        match self {
            Speed::Own => "own".to_string(),
            Speed::Factor(factor) => format!("x{factor}"),
            Speed::Saturate => "saturate".to_string(),
        }
    }
}

/// Where a workload's requests come from.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadSource {
    /// A trace file or a glob over file names (`*` and `?` in the last
    /// path component).
    Trace {
        pattern: String,
        format: Option<String>,
        volume: Option<String>,
    },
    /// A synthetic preset, or `all`.
    Preset(String),
    /// A generated shape, or `all`.
    Shape(String),
}

/// One `[[workload]]` table.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadEntry {
    /// `workload[3]`: how errors name it.
    pub key: String,
    pub source: WorkloadSource,
    /// Synthetic workloads: hours to generate (default: the preset's window).
    pub hours: Option<f64>,
    /// Overrides the grid's `speeds` for this workload.
    pub speeds: Option<Vec<Speed>>,
}

/// A parsed grid file.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    /// The file name, for errors and the report.
    pub source_name: String,
    pub workloads: Vec<WorkloadEntry>,
    pub stacks: Vec<String>,
    /// (as written, parsed) for each `fast_bytes` entry.
    pub fast_sizes: Vec<(String, FastSize)>,
    pub speeds: Vec<Speed>,
    pub policies: Vec<String>,
    pub candidate: String,
    pub saturate_max: u32,
    pub seed: u64,
}

const KEYS: &str = "workload, stacks, fast_bytes, speeds, policies, candidate, saturate_max, seed";
const WORKLOAD_KEYS: &str = "trace (with format, volume), preset, shape, hours, speed";
const SPEED_ACCEPTED: &str =
    "a number above 0 (an acceleration), \"own\" (the workload's own speed) or \"saturate\"";

impl Grid {
    /// Parses a grid file; every error names the file, the key and what is
    /// accepted.
    pub fn parse(text: &str, source_name: &str) -> Result<Grid, SimError> {
        let table: toml::Table = toml::from_str(text).map_err(|error| SimError::StackSyntax {
            source_name: source_name.to_string(),
            message: error.to_string(),
        })?;
        let error = |key: &str, message: String| SimError::Config {
            source_name: source_name.to_string(),
            key: key.to_string(),
            message,
        };
        for key in table.keys() {
            if !KEYS.split(", ").any(|known| known == key) {
                return Err(error(key, format!("unknown key; a grid has {KEYS}")));
            }
        }
        let strings = |key: &str, default: Option<Vec<String>>| -> Result<Vec<String>, SimError> {
            match table.get(key) {
                None => {
                    default.ok_or_else(|| error(key, "missing; give a list of strings".to_string()))
                }
                Some(toml::Value::Array(items)) => {
                    let list: Option<Vec<String>> = items
                        .iter()
                        .map(|item| item.as_str().map(str::to_string))
                        .collect();
                    match list {
                        Some(list) if !list.is_empty() => Ok(list),
                        _ => Err(error(
                            key,
                            "must be a non-empty list of strings".to_string(),
                        )),
                    }
                }
                Some(_) => Err(error(key, "must be a list of strings".to_string())),
            }
        };
        let stacks = strings("stacks", None)?;
        let fast_sizes = strings("fast_bytes", None)?
            .into_iter()
            .map(|entry| {
                let parsed =
                    parse_fast_sizes(&entry).map_err(|message| error("fast_bytes", message))?;
                match parsed.as_slice() {
                    [size] => Ok((entry, *size)),
                    _ => Err(error(
                        "fast_bytes",
                        format!("{entry:?}: one size per list entry"),
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let speeds = match table.get("speeds") {
            None => vec![Speed::Own],
            Some(value) => parse_speeds(value).map_err(|message| error("speeds", message))?,
        };
        let policies = strings(
            "policies",
            Some(
                crate::config::POLICY_NAMES
                    .iter()
                    .map(|name| name.to_string())
                    .collect(),
            ),
        )?;
        for (index, name) in policies.iter().enumerate() {
            crate::config::Strategy::parse(name)
                .map_err(|cause| error("policies", cause.to_string()))?;
            if policies[..index].contains(name) {
                return Err(error("policies", format!("{name:?} is listed twice")));
            }
        }
        let candidate = match table.get("candidate") {
            None => DEFAULT_CANDIDATE.to_string(),
            Some(toml::Value::String(name)) => name.clone(),
            Some(_) => return Err(error("candidate", "must be a policy name".to_string())),
        };
        let integer = |key: &str, default: u64, low: u64, high: u64| match table.get(key) {
            None => Ok(default),
            Some(toml::Value::Integer(value)) if (low as i64..=high as i64).contains(value) => {
                Ok(*value as u64)
            }
            Some(_) => Err(error(
                key,
                format!("must be a whole number from {low} to {high}"),
            )),
        };
        let saturate_max =
            integer("saturate_max", u64::from(DEFAULT_SATURATE_MAX), 1, 1 << 20)? as u32;
        let seed = integer("seed", 1, 0, i64::MAX as u64)?;
        let workloads = match table.get("workload") {
            Some(toml::Value::Array(items)) if !items.is_empty() => items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    parse_workload(item, &format!("workload[{index}]"), source_name)
                })
                .collect::<Result<Vec<_>, _>>()?,
            _ => {
                return Err(error(
                    "workload",
                    format!("missing; give one or more [[workload]] tables with {WORKLOAD_KEYS}"),
                ))
            }
        };
        Ok(Grid {
            source_name: source_name.to_string(),
            workloads,
            stacks,
            fast_sizes,
            speeds,
            policies,
            candidate,
            saturate_max,
            seed,
        })
    }
}

fn parse_speeds(value: &toml::Value) -> Result<Vec<Speed>, String> {
    let items = match value {
        toml::Value::Array(items) if !items.is_empty() => items,
        _ => {
            return Err(format!(
                "must be a non-empty list; each entry is {SPEED_ACCEPTED}"
            ))
        }
    };
    let mut speeds = Vec::with_capacity(items.len());
    for item in items {
        let speed = match item {
            toml::Value::String(text) if text == "own" => Speed::Own,
            toml::Value::String(text) if text == "saturate" => Speed::Saturate,
            toml::Value::Integer(value) if *value > 0 => Speed::Factor(*value as f64),
            toml::Value::Float(value) if *value > 0.0 && value.is_finite() => Speed::Factor(*value),
            other => return Err(format!("{other} is not {SPEED_ACCEPTED}")),
        };
        if speeds.contains(&speed) {
            return Err(format!("{} is listed twice", speed.label()));
        }
        speeds.push(speed);
    }
    Ok(speeds)
}

fn parse_workload(
    item: &toml::Value,
    key: &str,
    source_name: &str,
) -> Result<WorkloadEntry, SimError> {
    let error = |field: &str, message: String| SimError::Config {
        source_name: source_name.to_string(),
        key: if field.is_empty() {
            key.to_string()
        } else {
            format!("{key}.{field}")
        },
        message,
    };
    let Some(table) = item.as_table() else {
        return Err(error("", format!("must be a table with {WORKLOAD_KEYS}")));
    };
    let text = |field: &str| -> Result<Option<String>, SimError> {
        match table.get(field) {
            None => Ok(None),
            Some(toml::Value::String(value)) if !value.is_empty() => Ok(Some(value.clone())),
            Some(_) => Err(error(field, "must be a non-empty string".to_string())),
        }
    };
    for field in table.keys() {
        if ![
            "trace", "format", "volume", "preset", "shape", "hours", "speed",
        ]
        .contains(&field.as_str())
        {
            return Err(error(
                field,
                format!("unknown key; a workload has {WORKLOAD_KEYS}"),
            ));
        }
    }
    let trace = text("trace")?;
    let preset = text("preset")?;
    let shape = text("shape")?;
    let source = match (trace, preset, shape) {
        (Some(pattern), None, None) => WorkloadSource::Trace {
            pattern,
            format: text("format")?,
            volume: text("volume")?,
        },
        (None, Some(name), None) => WorkloadSource::Preset(name),
        (None, None, Some(name)) => WorkloadSource::Shape(name),
        _ => {
            return Err(error(
                "",
                "give exactly one of trace (a file or glob), preset (a synthetic preset or \"all\") and shape (a generated shape or \"all\")".to_string(),
            ))
        }
    };
    if !matches!(source, WorkloadSource::Trace { .. }) {
        for field in ["format", "volume"] {
            if table.contains_key(field) {
                return Err(error(
                    field,
                    "only a trace workload has this key".to_string(),
                ));
            }
        }
    }
    let hours = match table.get("hours") {
        None => None,
        Some(_) if matches!(source, WorkloadSource::Trace { .. }) => {
            return Err(error(
                "hours",
                "only a synthetic workload (preset, shape) has this key".to_string(),
            ))
        }
        Some(value) => match value
            .as_float()
            .or_else(|| value.as_integer().map(|v| v as f64))
        {
            Some(hours) if hours > 0.0 && hours.is_finite() => Some(hours),
            _ => {
                return Err(error(
                    "hours",
                    "must be a number of hours above 0".to_string(),
                ))
            }
        },
    };
    let speeds = table
        .get("speed")
        .map(parse_speeds)
        .transpose()
        .map_err(|message| error("speed", message))?;
    Ok(WorkloadEntry {
        key: key.to_string(),
        source,
        hours,
        speeds,
    })
}

/// Whether `name` matches a glob of `*` (any run of characters) and `?`
/// (one character).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((star_p, star_n)) = star {
            p = star_p + 1;
            n = star_n + 1;
            star = Some((star_p, star_n + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// The `saturate` search of one workload on one stack.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Saturation {
    pub workload: String,
    pub stack: String,
    /// The factor chosen: the first that reached [`SATURATED_UTIL`], else
    /// the largest tried.
    pub factor: f64,
    /// The home device's utilisation with `none` at `factor`.
    pub home_util: f64,
    pub reached: bool,
    /// Every (factor, home utilisation) tried, in order.
    pub tried: Vec<(f64, f64)>,
}

impl Saturation {
    pub fn text(&self) -> String {
        if self.reached {
            format!(
                "x{} (home util {:.0}% with none)",
                self.factor,
                self.home_util * 100.0
            )
        } else {
            format!(
                "x{} (not saturated: home util {:.0}% with none at the cap)",
                self.factor,
                self.home_util * 100.0
            )
        }
    }
}

/// A policy that could not run in a cell, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    pub policy: String,
    pub reason: String,
}

/// The candidate against the best of the other policies of a cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CandidateRatios {
    pub mean_ratio: f64,
    pub p99_ratio: f64,
    /// Only on a stack whose home is rotational (the issue's HDD bar).
    pub iops_ratio: Option<f64>,
    /// The bars missed: `mean`, `p99`, `iops`.
    pub misses: Vec<String>,
}

/// How a cell came out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// Lowest mean response of every policy run (the candidate included).
    pub winner: String,
    /// The best of the other policies (not the candidate): mean, p99, iops
    /// (each the best of any of them, as the issue's bars compare).
    pub best_policy: String,
    pub best_mean_us: f64,
    pub best_p99_us: f64,
    pub best_iops: f64,
    /// `None`: the candidate did not run (`"candidate not run"`).
    pub candidate: Option<CandidateRatios>,
}

/// Judges a cell's runs: `candidate` against the best of the others.
/// `judge_iops`: the stack's home is rotational.
pub fn verdict(runs: &[RunResult], candidate: &str, judge_iops: bool) -> Option<Verdict> {
    let by_mean = |a: &&RunResult, b: &&RunResult| a.avg_response_us.total_cmp(&b.avg_response_us);
    let winner = runs.iter().min_by(by_mean)?.policy.clone();
    let others: Vec<&RunResult> = runs.iter().filter(|run| run.policy != candidate).collect();
    let best = others.iter().copied().min_by(by_mean)?;
    let best_p99_us = others
        .iter()
        .map(|run| run.response_p99_us)
        .fold(f64::INFINITY, f64::min);
    let best_iops = others.iter().map(|run| run.avg_iops).fold(0.0, f64::max);
    let ratio = |value: f64, base: f64| if base > 0.0 { value / base } else { 1.0 };
    let candidate = runs.iter().find(|run| run.policy == candidate).map(|run| {
        let mean_ratio = ratio(run.avg_response_us, best.avg_response_us);
        let p99_ratio = ratio(run.response_p99_us, best_p99_us);
        let iops_ratio = judge_iops.then(|| ratio(run.avg_iops, best_iops));
        let mut misses = Vec::new();
        if mean_ratio > MEAN_BAR {
            misses.push("mean".to_string());
        }
        if p99_ratio > P99_BAR {
            misses.push("p99".to_string());
        }
        if iops_ratio.is_some_and(|ratio| ratio < IOPS_BAR) {
            misses.push("iops".to_string());
        }
        CandidateRatios {
            mean_ratio,
            p99_ratio,
            iops_ratio,
            misses,
        }
    });
    Some(Verdict {
        winner,
        best_policy: best.policy.clone(),
        best_mean_us: best.avg_response_us,
        best_p99_us,
        best_iops,
        candidate,
    })
}

/// One cell: a workload on a stack at a fast-tier size and a speed, every
/// policy at the same fast-tier capacity.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// Short name: the trace file's path, `usr_1`, `shape:walking`.
    pub workload: String,
    /// The full label (a synthetic one says so).
    pub workload_label: String,
    /// `real trace`, `synthetic preset` or `generated shape`.
    pub workload_kind: String,
    pub stack: String,
    /// As the grid wrote it (`5%`, `2GiB`).
    pub fast_size: String,
    pub fast_bytes: u64,
    pub working_set_bytes: u64,
    /// As the grid wrote it (`own`, `x4`, `saturate`).
    pub speed: String,
    /// The acceleration the cell ran at.
    pub speed_factor: f64,
    /// For a `saturate` cell: the search that chose the factor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saturation: Option<Saturation>,
    /// Every policy's full result, as `tierd sim --json` gives it.
    pub runs: Vec<RunResult>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    pub verdict: Option<Verdict>,
}

impl Cell {
    pub fn name(&self) -> String {
        format!(
            "{} | {} | {} | {}",
            self.workload, self.stack, self.fast_size, self.speed
        )
    }
}

/// The whole grid (`matrix.json`).
#[derive(Clone, Debug, Serialize)]
pub struct MatrixReport {
    pub grid: String,
    pub candidate: String,
    /// Whether the candidate is a policy the simulator knows (else every
    /// verdict says "candidate not run").
    pub candidate_run: bool,
    pub policies: Vec<String>,
    pub bars: Bars,
    pub saturation: Vec<Saturation>,
    pub cells: Vec<Cell>,
    /// The cells where the candidate is not the winner (lowest mean), with
    /// what won and the bars missed.
    pub not_won: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bars {
    pub mean_ratio_max: f64,
    pub p99_ratio_max: f64,
    pub iops_ratio_min: f64,
}

impl MatrixReport {
    pub fn new(
        grid: String,
        candidate: String,
        candidate_run: bool,
        policies: Vec<String>,
        saturation: Vec<Saturation>,
        cells: Vec<Cell>,
        notes: Vec<String>,
    ) -> MatrixReport {
        let not_won = cells
            .iter()
            .filter_map(|cell| {
                let verdict = cell.verdict.as_ref()?;
                let ratios = verdict.candidate.as_ref()?;
                (verdict.winner != candidate).then(|| {
                    format!(
                        "{}: {} wins ({}); {candidate} mean x{:.3}, p99 x{:.3}{}{}",
                        cell.name(),
                        verdict.winner,
                        format_us(verdict.best_mean_us),
                        ratios.mean_ratio,
                        ratios.p99_ratio,
                        ratios
                            .iops_ratio
                            .map_or(String::new(), |ratio| format!(", iops x{ratio:.3}")),
                        if ratios.misses.is_empty() {
                            " (within the bars)".to_string()
                        } else {
                            format!(" — misses {}", ratios.misses.join(", "))
                        }
                    )
                })
            })
            .collect();
        MatrixReport {
            grid,
            candidate,
            candidate_run,
            policies,
            bars: Bars {
                mean_ratio_max: MEAN_BAR,
                p99_ratio_max: P99_BAR,
                iops_ratio_min: IOPS_BAR,
            },
            saturation,
            cells,
            not_won,
            notes,
        }
    }

    /// The stacks in first-seen order.
    pub fn stacks(&self) -> Vec<&str> {
        let mut stacks: Vec<&str> = Vec::new();
        for cell in &self.cells {
            if !stacks.contains(&cell.stack.as_str()) {
                stacks.push(&cell.stack);
            }
        }
        stacks
    }

    /// The table of one stack: header row first.
    pub fn rows(&self, stack: &str) -> Vec<Vec<String>> {
        let candidate = &self.candidate;
        let mut rows = vec![vec![
            "workload".to_string(),
            "kind".to_string(),
            "fast".to_string(),
            "speed".to_string(),
            "best".to_string(),
            "mean".to_string(),
            "p99".to_string(),
            "iops".to_string(),
            format!("{candidate} mean/best"),
            "p99/best".to_string(),
            "iops/best".to_string(),
            "bars".to_string(),
        ]];
        for cell in self.cells.iter().filter(|cell| cell.stack == stack) {
            let mut row = vec![
                cell.workload.clone(),
                cell.workload_kind.clone(),
                format!("{} ({})", cell.fast_size, Bytes(cell.fast_bytes)),
                format!("{} (x{})", cell.speed, cell.speed_factor),
            ];
            match &cell.verdict {
                None => row.extend(["no run".to_string(), "-".into(), "-".into(), "-".into()]),
                Some(verdict) => row.extend([
                    verdict.winner.clone(),
                    format_us(verdict.best_mean_us),
                    format_us(verdict.best_p99_us),
                    format!("{:.1}", verdict.best_iops),
                ]),
            }
            match cell
                .verdict
                .as_ref()
                .and_then(|verdict| verdict.candidate.as_ref())
            {
                None => row.extend([
                    "candidate not run".to_string(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]),
                Some(ratios) => {
                    let mark = |miss: bool| if miss { " !" } else { "" };
                    let missed = |bar: &str| ratios.misses.iter().any(|miss| miss == bar);
                    row.extend([
                        format!("{:.3}{}", ratios.mean_ratio, mark(missed("mean"))),
                        format!("{:.3}{}", ratios.p99_ratio, mark(missed("p99"))),
                        ratios.iops_ratio.map_or("-".to_string(), |ratio| {
                            format!("{ratio:.3}{}", mark(missed("iops")))
                        }),
                        if ratios.misses.is_empty() {
                            "ok".to_string()
                        } else {
                            format!("MISS {}", ratios.misses.join(","))
                        },
                    ]);
                }
            }
            rows.push(row);
        }
        rows
    }

    /// The text report: saturation factors, a table per stack, the cells
    /// the candidate does not win.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "grid {}: {} cell(s), policies {}; candidate {}{}",
            self.grid,
            self.cells.len(),
            self.policies.join(", "),
            self.candidate,
            if self.candidate_run {
                ""
            } else {
                " (candidate not run: not a policy the simulator knows)"
            }
        );
        let _ = writeln!(
            out,
            "bars: candidate mean <= {MEAN_BAR} x best mean, p99 <= {P99_BAR} x best p99, iops >= {IOPS_BAR} x best iops (rotational home only); \"!\" marks a miss"
        );
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        for saturation in &self.saturation {
            let _ = writeln!(
                out,
                "saturate: {} on {}: {}",
                saturation.workload,
                saturation.stack,
                saturation.text()
            );
        }
        for stack in self.stacks() {
            let _ = writeln!(out, "\nstack {stack}");
            out.push_str(&crate::tables::columns(&self.rows(stack)));
        }
        for cell in &self.cells {
            for skipped in &cell.skipped {
                let _ = writeln!(
                    out,
                    "skipped: {}: {}: {}",
                    cell.name(),
                    skipped.policy,
                    skipped.reason
                );
            }
        }
        if self.candidate_run {
            let _ = writeln!(
                out,
                "\nsummary of {} against the best other policy",
                self.candidate
            );
            out.push_str(&crate::tables::columns(&self.summary_rows()));
            let _ = writeln!(
                out,
                "\ncells where {} is not the winner: {}",
                self.candidate,
                self.not_won.len()
            );
            for line in &self.not_won {
                let _ = writeln!(out, "  {line}");
            }
        }
        out
    }

    /// One row per stack and fast-tier size, and per stack: cells judged,
    /// cells meeting every bar, each bar, the cells where the candidate's
    /// mean is at most `none`'s, and the geometric mean and worst of the
    /// candidate's mean ÷ the best other policy's.
    pub fn summary_rows(&self) -> Vec<Vec<String>> {
        let mut rows = vec![vec![
            "stack".to_string(),
            "fast".to_string(),
            "cells".to_string(),
            "all bars".to_string(),
            "mean <= 1.05".to_string(),
            "p99 <= 1.1".to_string(),
            "iops >= 0.95".to_string(),
            "<= none".to_string(),
            "mean/best geo".to_string(),
            "worst".to_string(),
        ]];
        for stack in self.stacks() {
            let mut sizes: Vec<&str> = Vec::new();
            for cell in self.cells.iter().filter(|cell| cell.stack == stack) {
                if !sizes.contains(&cell.fast_size.as_str()) {
                    sizes.push(&cell.fast_size);
                }
            }
            let groups = sizes
                .iter()
                .map(|size| (size.to_string(), Some(*size)))
                .chain(std::iter::once(("all".to_string(), None)));
            for (label, size) in groups {
                let judged: Vec<(&Cell, &CandidateRatios)> = self
                    .cells
                    .iter()
                    .filter(|cell| {
                        cell.stack == stack && size.is_none_or(|size| cell.fast_size == size)
                    })
                    .filter_map(|cell| {
                        let verdict = cell.verdict.as_ref()?;
                        Some((cell, verdict.candidate.as_ref()?))
                    })
                    .collect();
                if judged.is_empty() {
                    continue;
                }
                let count = |test: &dyn Fn(&CandidateRatios) -> bool| {
                    judged
                        .iter()
                        .filter(|(_, ratios)| test(ratios))
                        .count()
                        .to_string()
                };
                let mean_of = |cell: &Cell, policy: &str| {
                    cell.runs
                        .iter()
                        .find(|run| run.policy == policy)
                        .map(|run| run.avg_response_us)
                };
                let at_most_none = judged
                    .iter()
                    .filter(|(cell, _)| {
                        match (mean_of(cell, &self.candidate), mean_of(cell, "none")) {
                            (Some(candidate), Some(none)) => candidate <= none,
                            _ => false,
                        }
                    })
                    .count();
                let logs: f64 = judged
                    .iter()
                    .map(|(_, ratios)| ratios.mean_ratio.ln())
                    .sum();
                let worst = judged
                    .iter()
                    .map(|(_, ratios)| ratios.mean_ratio)
                    .fold(0.0, f64::max);
                rows.push(vec![
                    stack.to_string(),
                    label,
                    judged.len().to_string(),
                    count(&|ratios| ratios.misses.is_empty()),
                    count(&|ratios| ratios.mean_ratio <= MEAN_BAR),
                    count(&|ratios| ratios.p99_ratio <= P99_BAR),
                    if judged.iter().any(|(_, ratios)| ratios.iops_ratio.is_some()) {
                        count(&|ratios| ratios.iops_ratio.is_none_or(|ratio| ratio >= IOPS_BAR))
                    } else {
                        "-".to_string()
                    },
                    at_most_none.to_string(),
                    format!("{:.3}", (logs / judged.len() as f64).exp()),
                    format!("{worst:.2}"),
                ]);
            }
        }
        rows
    }

    /// The plot: the candidate's mean ÷ best mean per cell, one panel per
    /// stack, one line per speed; `None` when the candidate did not run.
    pub fn chart(&self) -> Option<Chart> {
        if !self.candidate_run {
            return None;
        }
        let mut panels = Vec::new();
        let mut legend: Vec<(String, &'static str, bool)> = Vec::new();
        for stack in self.stacks() {
            let cells: Vec<&Cell> = self
                .cells
                .iter()
                .filter(|cell| cell.stack == stack)
                .collect();
            let mut series: Vec<Series> = Vec::new();
            for (index, cell) in cells.iter().enumerate() {
                let Some(ratio) = cell
                    .verdict
                    .as_ref()
                    .and_then(|verdict| verdict.candidate.as_ref())
                    .map(|ratios| ratios.mean_ratio)
                else {
                    continue;
                };
                let label = if cell.speed == "own" || cell.speed == "saturate" {
                    cell.speed.clone()
                } else {
                    "fixed speed".to_string()
                };
                let position = match series.iter().position(|line| line.label == label) {
                    Some(position) => position,
                    None => {
                        let colour = match legend.iter().find(|entry| entry.0 == label) {
                            Some(entry) => entry.1,
                            None => {
                                let colour = svg::colour(legend.len());
                                legend.push((label.clone(), colour, false));
                                colour
                            }
                        };
                        series.push(Series {
                            label,
                            colour,
                            dashed: false,
                            points: Vec::new(),
                        });
                        series.len() - 1
                    }
                };
                series[position].points.push(((index + 1) as f64, ratio));
            }
            panels.push(Panel {
                title: format!(
                    "{stack}: {} mean response / best other policy's",
                    self.candidate
                ),
                y_label: "mean / best".to_string(),
                y_range: None,
                y_format: TickFormat::Number,
                reference: Some((MEAN_BAR, format!("bar {MEAN_BAR}"))),
                series,
            });
        }
        Some(Chart {
            title: format!(
                "{}: mean response time against the best of the others, per cell",
                self.candidate
            ),
            subtitle: format!(
                "grid {}; cells in table order (workload, size, speed)",
                self.grid
            ),
            x_label: "cell (table row)".to_string(),
            x_scale: Scale::Linear,
            x_format: TickFormat::Number,
            x_range: None,
            panels,
            legend,
        })
    }

    /// The files of `--report DIR`: `index.html`, `candidate-mean.svg`
    /// (when the candidate ran) and `matrix.json`.
    pub fn render_html(&self) -> Result<Vec<crate::report::ReportFile>, serde_json::Error> {
        let mut files = Vec::new();
        let chart = self.chart().map(|chart| svg::render(&chart));
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tierd sim --matrix: {}</title>\n<style>{}</style>\n</head>\n<body>",
            escape(&self.grid),
            crate::report::html::STYLE
        );
        let _ = writeln!(out, "<h1>tierd sim --matrix report</h1>");
        let _ = writeln!(
            out,
            "<p>Grid <b>{}</b>: {} cells; policies {}; candidate <b>{}</b>{}.</p>",
            escape(&self.grid),
            self.cells.len(),
            escape(&self.policies.join(", ")),
            escape(&self.candidate),
            if self.candidate_run {
                ""
            } else {
                " (candidate not run: not a policy the simulator knows)"
            }
        );
        let _ = writeln!(
            out,
            "<p>Bars (issue 14 §2): mean ≤ {MEAN_BAR} × the best mean of the other policies, p99 ≤ {P99_BAR} × the best p99, iops ≥ {IOPS_BAR} × the best iops on a stack whose home is a disk. \"!\" marks a miss. Workload kinds: <i>real trace</i> (a file), <i>synthetic preset</i> and <i>generated shape</i> (both synthetic, not real traces).</p>"
        );
        for note in &self.notes {
            let _ = writeln!(out, "<p>Note: {}</p>", escape(note));
        }
        if !self.saturation.is_empty() {
            out.push_str("<h2>Saturating speeds</h2>\n<ul>\n");
            for saturation in &self.saturation {
                let _ = writeln!(
                    out,
                    "<li>{} on {}: {}</li>",
                    escape(&saturation.workload),
                    escape(&saturation.stack),
                    escape(&saturation.text())
                );
            }
            out.push_str("</ul>\n");
        }
        for stack in self.stacks() {
            let _ = writeln!(out, "<h2>Stack {}</h2>", escape(stack));
            out.push_str(&crate::report::series::html_table(&self.rows(stack)));
        }
        out.push_str("<h2>Plot</h2>\n");
        match &chart {
            Some(_) => out.push_str("<figure><img src=\"candidate-mean.svg\" alt=\"candidate mean / best\"><figcaption>The candidate's mean response time divided by the best mean of the other policies, per cell (x: the row in the stack's table); the dashed line is the bar.</figcaption></figure>\n"),
            None => out.push_str("<p>No plot: the candidate did not run.</p>\n"),
        }
        if self.candidate_run {
            let _ = writeln!(
                out,
                "<h2>Cells {} does not win ({})</h2>\n<ul>",
                escape(&self.candidate),
                self.not_won.len()
            );
            for line in &self.not_won {
                let _ = writeln!(out, "<li>{}</li>", escape(line));
            }
            out.push_str("</ul>\n");
        }
        out.push_str("<p>Every run's full result: <a href=\"matrix.json\">matrix.json</a>.</p>\n</body>\n</html>\n");
        files.push(crate::report::ReportFile {
            name: crate::report::INDEX_FILE.to_string(),
            contents: out,
        });
        if let Some(svg) = chart {
            files.push(crate::report::ReportFile {
                name: "candidate-mean.svg".to_string(),
                contents: svg,
            });
        }
        let mut json = serde_json::to_string_pretty(self)?;
        json.push('\n');
        files.push(crate::report::ReportFile {
            name: "matrix.json".to_string(),
            contents: json,
        });
        Ok(files)
    }
}

/// A response time in µs as the tables write it.
pub fn format_us(value_us: f64) -> String {
    if value_us >= 1000.0 {
        format!("{:.2} ms", value_us / 1000.0)
    } else {
        format!("{value_us:.0} us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: &str = r#"
stacks = ["hdd-ssd"]
fast_bytes = ["1%", "2GiB"]
speeds = ["own", 4, "saturate"]
[[workload]]
shape = "walking"
hours = 0.1
[[workload]]
trace = "../traces/*.csv"
volume = "hm_0"
speed = [1]
"#;

    #[test]
    fn a_grid_parses_with_defaults() {
        let grid = Grid::parse(GRID, "grid.toml").unwrap();
        assert_eq!(grid.stacks, ["hdd-ssd"]);
        assert_eq!(
            grid.fast_sizes[1],
            ("2GiB".to_string(), FastSize::Bytes(2 << 30))
        );
        assert_eq!(
            grid.speeds,
            [Speed::Own, Speed::Factor(4.0), Speed::Saturate]
        );
        assert_eq!(grid.policies.len(), crate::config::POLICY_NAMES.len());
        assert_eq!(grid.candidate, DEFAULT_CANDIDATE);
        assert_eq!(grid.saturate_max, DEFAULT_SATURATE_MAX);
        assert_eq!(
            grid.workloads[0].source,
            WorkloadSource::Shape("walking".into())
        );
        assert_eq!(grid.workloads[0].hours, Some(0.1));
        assert_eq!(grid.workloads[1].speeds, Some(vec![Speed::Factor(1.0)]));
    }

    #[test]
    fn errors_name_the_file_the_key_and_what_is_accepted() {
        for (text, key, accepted) in [
            ("stacks = [\"hdd-ssd\"]\nfast_bytes = [\"1%\"]\nspeeds = [\"fast\"]\n[[workload]]\nshape = \"walking\"", "speeds", "saturate"),
            ("stacks = [\"hdd-ssd\"]\nfast_bytes = [\"0%\"]\n[[workload]]\nshape = \"walking\"", "fast_bytes", "percentage"),
            ("stacks = [\"hdd-ssd\"]\nfast_bytes = [\"1%\"]\n[[workload]]\nshape = \"walking\"\npreset = \"usr_1\"", "workload[0]", "exactly one"),
            ("stacks = [\"hdd-ssd\"]\nfast_bytes = [\"1%\"]\n[[workload]]\nshape = \"walking\"\nspeeds = [1]", "workload[0].speeds", "speed"),
            ("stacks = [\"hdd-ssd\"]\nfast_bytes = [\"1%\"]\npolicies = [\"lfu\"]\n[[workload]]\nshape = \"walking\"", "policies", "s3fifo"),
            ("stacks = [\"hdd-ssd\"]\nfast_bytes = [\"1%\"]", "workload", "[[workload]]"),
            ("stack = [\"hdd-ssd\"]", "stack", "stacks"),
        ] {
            let message = Grid::parse(text, "grid.toml").unwrap_err().to_string();
            assert!(message.starts_with(&format!("grid.toml: {key}:")), "{message}");
            assert!(message.contains(accepted), "{message}");
        }
    }

    #[test]
    fn globs_match_names() {
        assert!(glob_matches("*.csv", "hm_0.csv"));
        assert!(glob_matches("hm_?-*", "hm_0-cut.csv"));
        assert!(!glob_matches("*.csv", "hm_0.csv.gz"));
        assert!(glob_matches("*", ""));
        assert!(!glob_matches("a*b", "acbx"));
    }

    fn run(policy: &str, mean: f64, p99: f64, iops: f64) -> RunResult {
        static BASE: std::sync::OnceLock<RunResult> = std::sync::OnceLock::new();
        let base = BASE.get_or_init(|| {
            let shape = tierd_synth::shape("no-heat").unwrap();
            let generator = tierd_synth::Generator::new(shape, 1, 0.001).unwrap();
            let mut reader = tierd_trace::IteratorReader::new(
                generator,
                &[shape.volume_name],
                tierd_trace::Format::Tierd,
                "synthetic workload",
            );
            let stack = crate::TierStack::preset("hdd-ssd").unwrap();
            let config = crate::SimConfig::new(stack, shape.volume_bytes);
            let strategy = crate::Strategy::parse("none").unwrap();
            crate::run(&config, &strategy, &mut reader, &mut |_| {}).unwrap()
        });
        let mut run = base.clone();
        run.policy = policy.to_string();
        run.avg_response_us = mean;
        run.response_p99_us = p99;
        run.avg_iops = iops;
        run
    }

    #[test]
    fn the_verdict_compares_the_candidate_with_the_best_of_the_others() {
        let runs = [
            run("none", 1000.0, 5000.0, 100.0),
            run("lru", 500.0, 6000.0, 102.0),
            run("adaptive", 540.0, 5400.0, 100.0),
        ];
        let verdict = verdict(&runs, "adaptive", true).unwrap();
        assert_eq!(verdict.winner, "lru");
        assert_eq!(verdict.best_mean_us, 500.0);
        assert_eq!(verdict.best_p99_us, 5000.0);
        let ratios = verdict.candidate.unwrap();
        assert!((ratios.mean_ratio - 1.08).abs() < 1e-9);
        assert_eq!(ratios.misses, ["mean"]);
        // Not run: no ratios.
        let verdict = super::verdict(&runs[..2], "adaptive", true).unwrap();
        assert!(verdict.candidate.is_none());
    }
}
