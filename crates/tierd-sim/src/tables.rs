//! Text tables in the papers' shapes, from a [`SimReport`].
//!
//! - Paper 000 (OTF-AST) Tables 4–5: average IOPS over the first hour, the
//!   gain over home only, the fast tier's share of IO, the home disk's svctm
//!   and %util, fast-tier GB used.
//! - Paper 002 (ATSMF) Tables 5–6: average response time, its ratio to the
//!   home-only run (`none`, "flash only" there), the memory (fast-tier)
//!   access ratio, the most fast-tier memory used.

use std::fmt::Write as _;

use tierd_common::units::Duration;

use crate::result::{RunResult, SimReport};

fn gigabytes(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

fn signed_percent(ratio: Option<f64>) -> String {
    match ratio {
        Some(ratio) => format!("{:+.1}%", (ratio - 1.0) * 100.0),
        None => "-".to_string(),
    }
}

fn ratio(ratio: Option<f64>) -> String {
    match ratio {
        Some(ratio) => format!("{ratio:.2}"),
        None => "-".to_string(),
    }
}

/// Lays out `rows` (first row = header) in aligned columns: the first
/// column left-aligned, the others right-aligned.
pub fn columns(rows: &[Vec<String>]) -> String {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            let width = widths[column];
            if column == 0 {
                let _ = write!(line, "{cell:<width$}");
            } else {
                let _ = write!(line, "  {cell:>width$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn replay_text(run: &RunResult) -> String {
    match run.settings.replay {
        crate::config::Replay::OpenLoop { speed } => format!("open loop x{speed}"),
        crate::config::Replay::ClosedLoop { queue_depth } => {
            format!("closed loop, queue depth {queue_depth}")
        }
    }
}

/// The whole text report: provenance, then both tables.
pub fn render_text(report: &SimReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "trace: {} [{}]", report.trace, report.trace_kind);
    let _ = writeln!(out, "tiers: {} ({})", report.tiers, report.tier_summary);
    if let Some(run) = report.runs.first() {
        let settings = &run.settings;
        let same_period = report
            .runs
            .iter()
            .all(|other| other.settings.period_ns == settings.period_ns);
        let period = if same_period {
            Duration(settings.period_ns).to_string()
        } else {
            "per policy (table)".to_string()
        };
        let _ = writeln!(
            out,
            "replay: {}, segment {}, period {period}, volume {:.1} GB, {} requests, seed {}",
            replay_text(run),
            tierd_common::units::Bytes(settings.segment_bytes),
            gigabytes(settings.volume_bytes),
            run.requests,
            settings.seed
        );
    }
    if let Some(line) = cache_line(report) {
        out.push_str(&line);
    }
    out.push_str(&adaptive_lines(report));
    for note in &report.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out.push('\n');
    out.push_str(IOPS_TABLE_TITLE);
    out.push_str(":\n");
    out.push_str(&columns(&iops_rows(report)));
    out.push('\n');
    out.push_str(RESPONSE_TABLE_TITLE);
    out.push_str(":\n");
    out.push_str(&columns(&response_rows(report)));
    if !report.curve.is_empty() {
        out.push('\n');
        out.push_str(HIT_CURVE_TITLE);
        out.push_str(":\n");
        out.push_str(&columns(&curve_rows(report, CurveFigure::HitRatio)));
        out.push('\n');
        out.push_str(RESPONSE_CURVE_TITLE);
        out.push_str(":\n");
        out.push_str(&columns(&curve_rows(report, CurveFigure::ResponseMs)));
    }
    out
}

/// Title of the hit-ratio curve table.
pub const HIT_CURVE_TITLE: &str = "Hit ratio by fast-tier size (miss-ratio curve = 1 - this; tiering: share of IO the fast tier served)";
/// Title of the response-time curve table.
pub const RESPONSE_CURVE_TITLE: &str = "Mean response ms by fast-tier size";

/// Which figure [`curve_rows`] tabulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CurveFigure {
    HitRatio,
    ResponseMs,
}

/// A curve table: one row per policy, one column per fast-tier size
/// (ascending), from [`SimReport::curve`].
pub fn curve_rows(report: &SimReport, figure: CurveFigure) -> Vec<Vec<String>> {
    let sizes = crate::sweep::sizes(report);
    let mut header = vec!["policy".to_string()];
    header.extend(sizes.iter().map(|bytes| size_text(*bytes)));
    let mut rows = vec![header];
    for point in &report.curve {
        if rows.len() == 1 || rows[rows.len() - 1][0] != point.policy {
            let mut row = vec![point.policy.clone()];
            row.resize(sizes.len() + 1, "-".to_string());
            rows.push(row);
        }
        let Some(column) = sizes.iter().position(|bytes| *bytes == point.fast_bytes) else {
            continue;
        };
        if let Some(row) = rows.last_mut() {
            row[column + 1] = match figure {
                CurveFigure::HitRatio => percent(point.hit_ratio),
                CurveFigure::ResponseMs => format!("{:.4}", point.avg_response_us / 1e3),
            };
        }
    }
    rows
}

/// A fast-tier size as the tables print it (`512.00 MiB`, `59.60 GiB`:
/// `tierd_common::units::Bytes`).
pub fn size_text(bytes: u64) -> String {
    tierd_common::units::Bytes(bytes).to_string()
}

/// Whether the report's runs have more than one fast-tier size (the
/// tables then gain a size column).
fn swept(report: &SimReport) -> bool {
    crate::sweep::sizes(report).len() > 1
}

/// The block caches' settings, one line per distinct setting (a report's
/// caches normally share one): `cache: fifo, lru: 64.00 KiB blocks,
/// writeback, admission always, sequential cutoff 4.00 MiB, 1.07 GB`.
pub fn cache_line(report: &SimReport) -> Option<String> {
    let mut lines: Vec<(String, Vec<&str>)> = Vec::new();
    for run in &report.runs {
        let Some(cache) = &run.cache else { continue };
        let cutoff = match cache.sequential_cutoff_bytes {
            0 => "off".to_string(),
            bytes => tierd_common::units::Bytes(bytes).to_string(),
        };
        let text = format!(
            "{} blocks, {}, admission {}, sequential cutoff {cutoff}, {:.2} GB",
            tierd_common::units::Bytes(cache.block_bytes),
            cache.mode,
            cache.admission,
            gigabytes(cache.slots * cache.block_bytes)
        );
        match lines.iter_mut().find(|(line, _)| *line == text) {
            Some((_, policies)) => policies.push(&run.policy),
            None => lines.push((text, vec![&run.policy])),
        }
    }
    if lines.is_empty() {
        return None;
    }
    let mut out = String::new();
    for (text, policies) in lines {
        let _ = writeln!(out, "cache: {}: {text}", policies.join(", "));
    }
    Some(out)
}

/// What `adaptive` chose in each of its runs, one line each: the rules
/// it ran, and its segment promotions with the last epoch's reasons.
pub fn adaptive_lines(report: &SimReport) -> String {
    let mut out = String::new();
    for run in &report.runs {
        let Some(adaptive) = run.cache.as_ref().and_then(|cache| cache.adaptive.as_ref()) else {
            continue;
        };
        let rules: Vec<String> = adaptive
            .epochs_by_rule
            .iter()
            .filter(|(_, epochs)| **epochs > 0)
            .map(|(rule, epochs)| format!("{rule} {epochs}"))
            .collect();
        let promotion = &adaptive.promotion;
        let size = if swept(report) {
            format!(
                " at {}",
                tierd_common::units::Bytes(run.settings.cache_bytes.unwrap_or(0))
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "adaptive{size}: rule {} at the end, epochs per rule: {}; promoted {} segments ({} blocks copied in); last epoch weighed {}: {} promoted, {} heat not expected to last, {} not worth the copy, {} over the copy budget",
            adaptive.rule_end,
            if rules.is_empty() { "none yet".to_string() } else { rules.join(", ") },
            promotion.segments,
            promotion.blocks_loaded,
            promotion.weighed,
            promotion.promoted,
            promotion.short_lived,
            promotion.not_worth,
            promotion.over_budget,
        );
    }
    out
}

/// Title of [`iops_rows`]' table.
pub const IOPS_TABLE_TITLE: &str =
    "IOPS, as paper 000 (OTF-AST) Tables 4-5 (gain vs none = home only)";
/// Title of [`response_rows`]' table.
pub const RESPONSE_TABLE_TITLE: &str =
    "Response time, as paper 002 (ATSMF) Tables 5-6 (ratio to none = fast tier unused)";

/// Cells that come from the tiers: `-` for a run without tier figures
/// (`tiers` empty: a live replay measured from outside the server, `tierd
/// replay`), the value otherwise.
fn tier_cell(run: &RunResult) -> impl Fn(String) -> String {
    let known = !run.tiers.is_empty();
    move |cell| if known { cell } else { "-".to_string() }
}

/// The paper 000 Tables 4–5 table, one row per run after the header row,
/// formatted as the text output prints it (the HTML report shows the same cells).
pub fn iops_rows(report: &SimReport) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "policy".to_string(),
        "fast".to_string(),
        "avg iops".to_string(),
        "1st-hour iops".to_string(),
        "gain".to_string(),
        "fast share".to_string(),
        "home svctm ms".to_string(),
        "home util".to_string(),
        "fast GB max".to_string(),
        "moves".to_string(),
        "moved GB".to_string(),
        "period".to_string(),
        "replay".to_string(),
    ]];
    for run in &report.runs {
        let tiered = tier_cell(run);
        rows.push(vec![
            run.policy.clone(),
            size_text(run.fast_bytes),
            format!("{:.1}", run.avg_iops),
            format!("{:.1}", run.avg_iops_first_hour),
            signed_percent(
                run.gain
                    .as_ref()
                    .and_then(|gain| gain.iops_first_hour_ratio),
            ),
            tiered(percent(run.fast_io_share)),
            tiered(format!("{:.2}", run.home_svctm_ms)),
            tiered(percent(run.home_util)),
            tiered(format!("{:.1}", gigabytes(run.fast_bytes_max))),
            tiered(run.moves.to_string()),
            tiered(format!("{:.1}", gigabytes(run.migrated_bytes))),
            Duration(run.settings.period_ns).to_string(),
            Duration(run.elapsed_ns).to_string(),
        ]);
    }
    without_size_column(report, rows)
}

/// The size column only when the runs have more than one size.
fn without_size_column(report: &SimReport, mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    if !swept(report) {
        for row in &mut rows {
            row.remove(1);
        }
    }
    rows
}

/// The paper 002 Tables 5–6 table, one row per run after the header row,
/// formatted as the text output prints it (the HTML report shows the same cells).
pub fn response_rows(report: &SimReport) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "policy".to_string(),
        "fast".to_string(),
        "avg ms".to_string(),
        "ratio".to_string(),
        "p99 ms".to_string(),
        "fast access ratio".to_string(),
        "fast GB max".to_string(),
        "% of volume".to_string(),
        "stall max ms".to_string(),
        "cache hit ratio".to_string(),
    ]];
    for run in &report.runs {
        let tiered = tier_cell(run);
        rows.push(vec![
            run.policy.clone(),
            size_text(run.fast_bytes),
            format!("{:.4}", run.avg_response_us / 1e3),
            ratio(run.gain.as_ref().and_then(|gain| gain.response_ratio)),
            format!("{:.3}", run.response_p99_us / 1e3),
            tiered(percent(run.fast_io_share)),
            tiered(format!("{:.1}", gigabytes(run.fast_bytes_max))),
            tiered(percent(if run.settings.volume_bytes == 0 {
                0.0
            } else {
                run.fast_bytes_max as f64 / run.settings.volume_bytes as f64
            })),
            tiered(format!("{:.2}", run.switch_over_stall_max_us / 1e3)),
            run.cache
                .as_ref()
                .map_or_else(|| "-".to_string(), |cache| percent(cache.hit_ratio)),
        ]);
    }
    without_size_column(report, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let rows = vec![
            vec!["policy".to_string(), "iops".to_string()],
            vec!["none".to_string(), "836.0".to_string()],
            vec!["otf-ast".to_string(), "1483.0".to_string()],
        ];
        let text = columns(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "policy     iops");
        assert_eq!(lines[1], "none      836.0");
        assert_eq!(lines[2], "otf-ast  1483.0");
    }

    #[test]
    fn gains_and_ratios_format() {
        assert_eq!(signed_percent(Some(1.77)), "+77.0%");
        assert_eq!(signed_percent(Some(0.99)), "-1.0%");
        assert_eq!(signed_percent(None), "-");
        assert_eq!(ratio(Some(0.375)), "0.38");
        assert_eq!(percent(0.891), "89.1%");
    }
}
