//! The HTML report of a [`SimReport`] (`tierd sim --report DIR`, and
//! `tierd replay --report DIR` with [`ReportKind::LiveReplay`]).
//!
//! A directory with `index.html` (no scripts; it reads in any browser and
//! links only the files beside it), one SVG per plot and one CSV per series
//! family:
//!
//! | file | what |
//! |---|---|
//! | `iops.svg`, `iops.csv` | user IOPS per period, one line per policy (paper 000 Figs. 7–8) |
//! | `util.svg`, `util.csv` | %util (and iops, svctm, await) of every device per period (000 Fig. 6) |
//! | `fast-bytes.svg`, `fast-bytes.csv` | bytes on the fast tier at each period end (002 Figs. 8–9) |
//! | `response-cdf.svg`, `response-cdf.csv` | response-time CDFs, all requests and per tier (002 Figs. 10–14) |
//! | `heatmap.svg`, `heatmap.csv` | IO per segment and period of the replayed trace, when given |
//! | `curves.svg`, `curves.csv` | with `--fast-bytes`: hit ratio and mean response against fast-tier size, per policy (a miss-ratio curve) |
//! | `moves.csv` | every completed move of every run |
//! | `result.json` | the whole [`SimReport`], as `tierd sim --json` prints it |
//!
//! The heat map needs per-segment counts, which a run does not keep: the
//! caller computes it (the CLI runs `tierd_analysis` over the same trace
//! through [`ReplayTimeReader`], so time is replay time as in the other plots)
//! and passes it in as a [`HeatMap`]. This keeps `tierd-sim` independent of
//! `tierd-analysis`. `docs/report.md` describes every plot.

pub(crate) mod html;
pub mod replay_time;
pub mod series;
pub mod svg;

use std::path::{Path, PathBuf};

/// The report pages' style sheet (also the sweep report's, tierd-lab).
pub use html::{CURVES_CAPTION, STYLE};
pub use replay_time::ReplayTimeReader;

use crate::result::SimReport;

/// A segment × period heat map computed by the caller (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct HeatMap {
    /// The rendered image, a standalone SVG document (e.g.
    /// `tierd_analysis::heatmap::render_svg`).
    pub svg: String,
    pub segment_bytes: u64,
    pub period_ns: u64,
    pub segments: u64,
    pub periods: u64,
    /// Cells with IO, for `heatmap.csv`.
    pub cells: Vec<HeatMapCell>,
    /// How the map was made (shown under it): trace pass, window, time base.
    pub note: String,
}

/// IO of one segment in one period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeatMapCell {
    pub period: u64,
    pub segment: u64,
    pub io: u64,
    pub writes: u64,
}

/// Which command's runs a report shows: it decides the title, the time
/// base and the settings shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportKind {
    /// `tierd sim`: virtual time, every setting of the simulated stack.
    #[default]
    Simulation,
    /// `tierd replay`: wall-clock time against a live export; settings only
    /// the server knows (migration chunks, seed) are left out, and a
    /// segment size of 0 means "not visible to the client".
    LiveReplay,
}

impl ReportKind {
    /// The command that made the runs, as the page names it.
    pub fn command(self) -> &'static str {
        match self {
            ReportKind::Simulation => "tierd sim",
            ReportKind::LiveReplay => "tierd replay",
        }
    }
}

/// Knobs of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOptions {
    /// Moves listed per policy in the page (all of them are in `moves.csv`).
    pub moves_listed: usize,
    pub kind: ReportKind,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            moves_listed: 40,
            kind: ReportKind::Simulation,
        }
    }
}

/// One file of the report: a name inside the directory and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportFile {
    pub name: String,
    pub contents: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: cannot write the report: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode the report's JSON: {0}")]
    Json(#[from] serde_json::Error),
}

pub const INDEX_FILE: &str = "index.html";

/// Every file of the report, `index.html` first. Pure: no IO, the same
/// inputs give the same bytes.
pub fn render(
    report: &SimReport,
    heat_map: Option<&HeatMap>,
    options: &ReportOptions,
) -> Result<Vec<ReportFile>, ReportError> {
    let mut files = Vec::new();
    let mut figures = Vec::new();
    let families = [
        ("iops", series::iops(report), html::IOPS_CAPTION),
        ("util", series::util(report), html::UTIL_CAPTION),
        (
            "fast-bytes",
            series::fast_bytes(report),
            html::FAST_BYTES_CAPTION,
        ),
        (
            "response-cdf",
            series::response_cdf(report),
            html::RESPONSE_CAPTION,
        ),
    ];
    let curves = series::curves(report).map(|curves| ("curves", curves, html::CURVES_CAPTION));
    for (stem, (csv, chart), caption) in families.into_iter().chain(curves) {
        let image = format!("{stem}.svg");
        let table = format!("{stem}.csv");
        files.push(ReportFile {
            name: image.clone(),
            contents: svg::render(&chart),
        });
        files.push(ReportFile {
            name: table.clone(),
            contents: csv.render(),
        });
        figures.push(html::Figure {
            title: chart.title.clone(),
            image,
            csv: table,
            caption: caption.to_string(),
        });
    }
    if let Some(heat_map) = heat_map {
        files.push(ReportFile {
            name: "heatmap.svg".to_string(),
            contents: heat_map.svg.clone(),
        });
        files.push(ReportFile {
            name: "heatmap.csv".to_string(),
            contents: series::heat_map_csv(heat_map).render(),
        });
        figures.push(html::Figure {
            title: "IO per segment and period (heat map of the replayed trace)".to_string(),
            image: "heatmap.svg".to_string(),
            csv: "heatmap.csv".to_string(),
            caption: format!("{} {}", html::HEAT_MAP_CAPTION, heat_map.note),
        });
    }
    files.push(ReportFile {
        name: "moves.csv".to_string(),
        contents: series::moves_csv(report).render(),
    });
    let mut json = serde_json::to_string_pretty(report)?;
    json.push('\n');
    files.push(ReportFile {
        name: "result.json".to_string(),
        contents: json,
    });
    let names: Vec<String> = files.iter().map(|file| file.name.clone()).collect();
    let page = html::page(report, heat_map, options, &figures, &names);
    files.insert(
        0,
        ReportFile {
            name: INDEX_FILE.to_string(),
            contents: page,
        },
    );
    Ok(files)
}

/// Writes the report into `directory` (created when missing; files of the
/// same names are replaced) and returns the path of `index.html`.
pub fn write(
    directory: &Path,
    report: &SimReport,
    heat_map: Option<&HeatMap>,
    options: &ReportOptions,
) -> Result<PathBuf, ReportError> {
    let files = render(report, heat_map, options)?;
    std::fs::create_dir_all(directory).map_err(|source| ReportError::Io {
        path: directory.to_path_buf(),
        source,
    })?;
    for file in &files {
        let path = directory.join(&file.name);
        std::fs::write(&path, &file.contents).map_err(|source| ReportError::Io { path, source })?;
    }
    Ok(directory.join(INDEX_FILE))
}
