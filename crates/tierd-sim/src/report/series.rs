//! The report's series families, each as one CSV file and one chart: per
//! period iops, %util per device, bytes on the fast tier, response-time CDFs,
//! the heat map's cells, and the move log.
//!
//! Times are replay (virtual) time from the first issue, in minutes. Every
//! per-period CSV has one row per (run, period), so a run's rows equal its
//! number of periods.

use std::fmt::Write as _;

use crate::result::{RunResult, SimReport, TierResult};
use tierd_common::histogram::Histogram;

use super::svg::{colour, Chart, Panel, Scale, Series, TickFormat};
use super::HeatMap;

const NS_PER_MINUTE: f64 = 60e9;

fn minutes(ns: u64) -> f64 {
    ns as f64 / NS_PER_MINUTE
}

/// Rows of text cells with a header, written as RFC 4180 CSV.
pub struct Csv {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Csv {
    fn new(header: &[&str]) -> Csv {
        Csv {
            header: header.iter().map(|name| name.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let line: Vec<String> = row.iter().map(|cell| field(cell)).collect();
            out.push_str(&line.join(","));
            out.push('\n');
        }
        out
    }
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// A number as CSV text: shortest round-trip form, empty when not finite.
fn number(value: f64) -> String {
    if value.is_finite() {
        format!("{value}")
    } else {
        String::new()
    }
}

/// A tier name usable in a CSV column name: letters, digits and `_`.
fn column_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() {
                character.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "tier".to_string()
    } else {
        cleaned
    }
}

/// Tier names of the report (every run shares the stack), made unique as column prefixes.
fn tier_columns(report: &SimReport) -> Vec<String> {
    let tiers = report.runs.first().map_or(&[][..], |run| &run.tiers[..]);
    let mut names: Vec<String> = Vec::with_capacity(tiers.len());
    for (index, tier) in tiers.iter().enumerate() {
        let mut name = column_name(&tier.name);
        if names.contains(&name) {
            name = format!("{name}_{index}");
        }
        names.push(name);
    }
    names
}

fn tier_title(tier: &TierResult, index: usize, tiers: usize) -> String {
    let role = if index == 0 {
        "fast tier"
    } else if index + 1 == tiers {
        "home tier"
    } else {
        "tier"
    };
    format!(
        "{role} {} ({}, {:.0} GB)",
        tier.name,
        tier.device,
        tier.capacity_bytes as f64 / 1e9
    )
}

/// Longest replay over the runs, minutes (the shared x range of time plots).
pub fn time_range_min(report: &SimReport) -> (f64, f64) {
    let end = report
        .runs
        .iter()
        .flat_map(|run| run.periods.last().map(|period| period.end_ns))
        .max()
        .unwrap_or(0);
    (0.0, minutes(end).max(1e-3))
}

pub fn legend(report: &SimReport) -> Vec<(String, &'static str, bool)> {
    report
        .runs
        .iter()
        .enumerate()
        .map(|(index, run)| (run_label(report, run), colour(index), false))
        .collect()
}

fn period_seconds(start_ns: u64, end_ns: u64) -> f64 {
    end_ns.saturating_sub(start_ns) as f64 / 1e9
}

/// (start, value), (end, value) per period: a step line of per-period means.
fn steps(run: &RunResult, value: impl Fn(usize) -> Option<f64>) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(run.periods.len() * 2);
    for (index, period) in run.periods.iter().enumerate() {
        if period.end_ns <= period.start_ns {
            continue;
        }
        if let Some(value) = value(index) {
            points.push((minutes(period.start_ns), value));
            points.push((minutes(period.end_ns), value));
        }
    }
    points
}

fn period_text(report: &SimReport) -> String {
    let mut periods: Vec<u64> = report
        .runs
        .iter()
        .map(|run| run.settings.period_ns)
        .collect();
    periods.sort_unstable();
    periods.dedup();
    let texts: Vec<String> = periods
        .iter()
        .map(|ns| tierd_common::units::Duration(*ns).to_string())
        .collect();
    texts.join(" / ")
}

/// (a) user requests completed per second in each period (paper 000 Figs. 7–8:
/// iops every minute, against HDD only and against flashcache).
pub fn iops(report: &SimReport) -> (Csv, Chart) {
    let mut csv = Csv::new(&[
        "policy",
        "period",
        "start_min",
        "end_min",
        "requests",
        "iops",
        "avg_response_ms",
        "moves_started",
        "moves_finished",
        "fast_bytes",
    ]);
    let mut series = Vec::new();
    for (index, run) in report.runs.iter().enumerate() {
        for period in &run.periods {
            let seconds = period_seconds(period.start_ns, period.end_ns);
            let iops = if seconds > 0.0 {
                period.requests as f64 / seconds
            } else {
                0.0
            };
            csv.rows.push(vec![
                run.policy.clone(),
                period.index.to_string(),
                number(minutes(period.start_ns)),
                number(minutes(period.end_ns)),
                period.requests.to_string(),
                number(iops),
                number(period.avg_response_us / 1e3),
                period.moves_started.to_string(),
                period.moves_finished.to_string(),
                run.fast_bytes.to_string(),
            ]);
        }
        series.push(Series {
            label: run_label(report, run),
            colour: colour(index),
            dashed: false,
            points: steps(run, |period| {
                let period = &run.periods[period];
                Some(period.requests as f64 / period_seconds(period.start_ns, period.end_ns))
            }),
        });
    }
    let chart = Chart {
        title: "IOPS over time (as paper 000 Figs. 7-8)".to_string(),
        subtitle: format!(
            "user requests completed per second, mean over each {} period",
            period_text(report)
        ),
        x_label: "replay time (minutes)".to_string(),
        x_scale: Scale::Linear,
        x_format: TickFormat::Number,
        x_range: Some(time_range_min(report)),
        panels: vec![Panel {
            title: "all tiers".to_string(),
            y_label: "IOPS (requests/s)".to_string(),
            y_range: None,
            y_format: TickFormat::Number,
            reference: None,
            series,
        }],
        legend: legend(report),
    };
    (csv, chart)
}

/// (b) %util of every device per period (paper 000 Fig. 6: %util every
/// minute, against HDD only), one panel per tier.
pub fn util(report: &SimReport) -> (Csv, Chart) {
    let columns = tier_columns(report);
    let mut header = vec![
        "policy".to_string(),
        "period".to_string(),
        "start_min".to_string(),
        "end_min".to_string(),
    ];
    for name in &columns {
        for suffix in [
            "util_percent",
            "iops",
            "svctm_ms",
            "await_ms",
            "user_ios",
            "migration_ios",
        ] {
            header.push(format!("{name}_{suffix}"));
        }
    }
    header.push("fast_bytes".to_string());
    let mut csv = Csv {
        header,
        rows: Vec::new(),
    };
    for run in &report.runs {
        for period in &run.periods {
            let mut row = vec![
                run.policy.clone(),
                period.index.to_string(),
                number(minutes(period.start_ns)),
                number(minutes(period.end_ns)),
            ];
            for tier in 0..columns.len() {
                match period.tiers.get(tier) {
                    Some(counters) => row.extend([
                        number(counters.util * 100.0),
                        number(counters.iops),
                        number(counters.svctm_ms),
                        number(counters.await_ms),
                        counters.user_ios.to_string(),
                        counters.migration_ios.to_string(),
                    ]),
                    None => row.extend(std::iter::repeat_n(String::new(), 6)),
                }
            }
            row.push(run.fast_bytes.to_string());
            csv.rows.push(row);
        }
    }
    let tiers = report.runs.first().map_or(&[][..], |run| &run.tiers[..]);
    let panels = tiers
        .iter()
        .enumerate()
        .map(|(tier, result)| Panel {
            title: tier_title(result, tier, tiers.len()),
            y_label: "%util".to_string(),
            y_range: Some((0.0, 100.0)),
            y_format: TickFormat::Number,
            reference: None,
            series: report
                .runs
                .iter()
                .enumerate()
                .map(|(index, run)| Series {
                    label: format!("{} on {}", run_label(report, run), result.name),
                    colour: colour(index),
                    dashed: false,
                    points: steps(run, |period| {
                        run.periods[period]
                            .tiers
                            .get(tier)
                            .map(|counters| counters.util * 100.0)
                    }),
                })
                .collect(),
        })
        .collect();
    let chart = Chart {
        title: "Device %util over time (as paper 000 Fig. 6)".to_string(),
        subtitle: format!(
            "busy time / period ({}), user and migration IO, iostat style",
            period_text(report)
        ),
        x_label: "replay time (minutes)".to_string(),
        x_scale: Scale::Linear,
        x_format: TickFormat::Number,
        x_range: Some(time_range_min(report)),
        panels,
        legend: legend(report),
    };
    (csv, chart)
}

/// (c) bytes held on the fast tier at each period end (paper 002 Figs. 8–9).
pub fn fast_bytes(report: &SimReport) -> (Csv, Chart) {
    let columns = tier_columns(report);
    // Home holds the whole volume: only the tiers above it are reported.
    let upper = columns.len().saturating_sub(1).max(1).min(columns.len());
    let mut header = vec![
        "policy".to_string(),
        "period".to_string(),
        "end_min".to_string(),
    ];
    for name in &columns[..upper] {
        header.push(format!("{name}_used_bytes"));
        header.push(format!("{name}_used_gb"));
    }
    header.push("fast_bytes".to_string());
    let mut csv = Csv {
        header,
        rows: Vec::new(),
    };
    let mut series = Vec::new();
    for (index, run) in report.runs.iter().enumerate() {
        for period in &run.periods {
            let mut row = vec![
                run.policy.clone(),
                period.index.to_string(),
                number(minutes(period.end_ns)),
            ];
            for tier in 0..upper {
                match period.tiers.get(tier) {
                    Some(counters) => row.extend([
                        counters.used_bytes.to_string(),
                        number(counters.used_bytes as f64 / 1e9),
                    ]),
                    None => row.extend([String::new(), String::new()]),
                }
            }
            row.push(run.fast_bytes.to_string());
            csv.rows.push(row);
        }
        series.push(Series {
            label: run_label(report, run),
            colour: colour(index),
            dashed: false,
            // Every run starts with every segment on home and empty caches
            // (a one-tier stack's tier 0 is home: it holds the volume throughout).
            points: (run.tiers.len() > 1)
                .then_some((0.0, 0.0))
                .into_iter()
                .chain(run.periods.iter().filter_map(|period| {
                    period
                        .tiers
                        .first()
                        .map(|fast| (minutes(period.end_ns), fast.used_bytes as f64 / 1e9))
                }))
                .collect(),
        });
    }
    let fast = report.runs.first().and_then(|run| run.tiers.first());
    let (title, capacity_gb) = match fast {
        Some(tier) => (
            tier_title(tier, 0, columns.len()),
            Some(tier.capacity_bytes as f64 / 1e9),
        ),
        None => ("fast tier".to_string(), None),
    };
    let chart = Chart {
        title: "Fast-tier bytes in use over time (as paper 002 Figs. 8-9)".to_string(),
        subtitle: "at each period end: segments placed (a slot counts from its move's start); caches: resident 4 KiB pages".to_string(),
        x_label: "replay time (minutes)".to_string(),
        x_scale: Scale::Linear,
        x_format: TickFormat::Number,
        x_range: Some(time_range_min(report)),
        panels: vec![Panel {
            title,
            y_label: "GB in use (10^9 bytes)".to_string(),
            y_range: None,
            y_format: TickFormat::Number,
            reference: capacity_gb.map(|gb| (gb, format!("capacity {gb:.0} GB"))),
            series,
        }],
        legend: legend(report),
    };
    (csv, chart)
}

/// (from, to) in µs and the cumulative fraction after each bucket.
fn cdf(histogram: &Histogram) -> Vec<(f64, f64, u64, f64)> {
    let total = histogram.count();
    let mut cumulative = 0u64;
    histogram
        .buckets()
        .map(|bucket| {
            cumulative += bucket.count;
            (
                bucket.low_ns as f64 / 1e3,
                bucket.high_ns as f64 / 1e3,
                bucket.count,
                if total == 0 {
                    0.0
                } else {
                    cumulative as f64 / total as f64
                },
            )
        })
        .collect()
}

/// Points of a CDF line in percent: (first bucket's low, 0), then each
/// bucket's upper bound with the share at or below it.
fn cdf_points(histogram: &Histogram) -> Vec<(f64, f64)> {
    let rows = cdf(histogram);
    let mut points = Vec::with_capacity(rows.len() + 1);
    if let Some(first) = rows.first() {
        points.push((first.0.max(1e-3), 0.0));
    }
    points.extend(
        rows.iter()
            .map(|(_, high_us, _, fraction)| (*high_us, fraction * 100.0)),
    );
    points
}

/// (d) response-time CDFs, overall and per tier, log x (paper 002 Figs. 10–14).
pub fn response_cdf(report: &SimReport) -> (Csv, Chart) {
    let mut csv = Csv::new(&[
        "policy",
        "scope",
        "bucket_low_us",
        "bucket_high_us",
        "count",
        "cumulative_fraction",
        "fast_bytes",
    ]);
    let tiers = report.runs.first().map_or(&[][..], |run| &run.tiers[..]);
    let mut panels = vec![Panel {
        title: "all requests (issue to completion of the last piece)".to_string(),
        y_label: "requests at or below (%)".to_string(),
        y_range: Some((0.0, 100.0)),
        y_format: TickFormat::Number,
        reference: None,
        series: Vec::new(),
    }];
    for (tier, result) in tiers.iter().enumerate() {
        panels.push(Panel {
            title: format!(
                "pieces served by the {}",
                tier_title(result, tier, tiers.len())
            ),
            y_label: "pieces at or below (%)".to_string(),
            y_range: Some((0.0, 100.0)),
            y_format: TickFormat::Number,
            reference: None,
            series: Vec::new(),
        });
    }
    for (index, run) in report.runs.iter().enumerate() {
        let scopes = std::iter::once(("all", &run.response)).chain(
            run.tiers
                .iter()
                .map(|tier| (tier.name.as_str(), &tier.response)),
        );
        for (panel, (scope, histogram)) in scopes.enumerate() {
            for (low_us, high_us, count, fraction) in cdf(histogram) {
                csv.rows.push(vec![
                    run.policy.clone(),
                    scope.to_string(),
                    number(low_us),
                    number(high_us),
                    count.to_string(),
                    number(fraction),
                    run.fast_bytes.to_string(),
                ]);
            }
            if let Some(panel) = panels.get_mut(panel) {
                panel.series.push(Series {
                    label: format!("{} ({scope})", run_label(report, run)),
                    colour: colour(index),
                    dashed: false,
                    points: cdf_points(histogram),
                });
            }
        }
    }
    let chart = Chart {
        title: "Response-time CDF (as paper 002 Figs. 10-14)".to_string(),
        subtitle: "share of requests (pieces, per tier) completing within x; log scale; buckets at most 3.125% wide".to_string(),
        x_label: "response time (log scale)".to_string(),
        x_scale: Scale::Log,
        x_format: TickFormat::Microseconds,
        x_range: None,
        panels,
        legend: legend(report),
    };
    (csv, chart)
}

/// (e) the heat map's non-empty cells.
pub fn heat_map_csv(heat_map: &HeatMap) -> Csv {
    let mut csv = Csv::new(&[
        "period",
        "start_min",
        "segment",
        "offset_gib",
        "io",
        "writes",
    ]);
    for cell in &heat_map.cells {
        csv.rows.push(vec![
            cell.period.to_string(),
            number(minutes(cell.period.saturating_mul(heat_map.period_ns))),
            cell.segment.to_string(),
            number(cell.segment as f64 * heat_map.segment_bytes as f64 / (1u64 << 30) as f64),
            cell.io.to_string(),
            cell.writes.to_string(),
        ]);
    }
    csv
}

/// Every completed move of every run.
pub fn moves_csv(report: &SimReport) -> Csv {
    let mut csv = Csv::new(&[
        "policy",
        "move",
        "segment",
        "offset_gib",
        "from_tier",
        "to_tier",
        "accepted_min",
        "start_min",
        "end_min",
        "copy_s",
        "bytes",
        "copy_passes",
        "stall_ms",
        "held_pieces",
        "rule",
        "detail",
        "fast_bytes",
    ]);
    for run in &report.runs {
        let tier_name = |tier: u8| {
            run.tiers
                .get(usize::from(tier))
                .map_or_else(|| tier.to_string(), |tier| tier.name.clone())
        };
        for (index, record) in run.move_log.iter().enumerate() {
            csv.rows.push(vec![
                run.policy.clone(),
                index.to_string(),
                record.segment.to_string(),
                number(
                    f64::from(record.segment) * run.settings.segment_bytes as f64
                        / (1u64 << 30) as f64,
                ),
                tier_name(record.from),
                tier_name(record.to),
                number(minutes(record.accepted_ns)),
                number(minutes(record.start_ns)),
                number(minutes(record.end_ns)),
                number(record.end_ns.saturating_sub(record.start_ns) as f64 / 1e9),
                record.bytes.to_string(),
                record.copy_passes.to_string(),
                number(record.stall_ns as f64 / 1e6),
                record.held_pieces.to_string(),
                record.rule.clone(),
                record.detail.clone(),
                run.fast_bytes.to_string(),
            ]);
        }
    }
    csv
}

/// Plain-text summary of a CSV for tests and captions: rows per policy.
pub fn rows_per_policy(csv: &Csv) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for row in &csv.rows {
        let policy = row.first().cloned().unwrap_or_default();
        match counts.iter_mut().find(|(name, _)| *name == policy) {
            Some((_, count)) => *count += 1,
            None => counts.push((policy, 1)),
        }
    }
    counts
}

/// `rows` as an HTML table (first row = header), cells escaped; columns after
/// the first right-aligned.
pub fn html_table(rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table>\n");
    for (index, row) in rows.iter().enumerate() {
        out.push_str("<tr>");
        for cell in row {
            let tag = if index == 0 { "th" } else { "td" };
            let _ = write!(out, "<{tag}>{}</{tag}>", super::svg::escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// A run's name in a chart: its policy, and with more than one fast-tier
/// size in the report (`--fast-bytes`) its size too.
fn run_label(report: &SimReport, run: &RunResult) -> String {
    if report.curve.is_empty() {
        run.policy.clone()
    } else {
        format!(
            "{} @ {}",
            run.policy,
            tierd_common::units::Bytes(run.fast_bytes)
        )
    }
}

/// (e) the size sweep's curves (`tierd sim --fast-bytes`): hit ratio and
/// mean response time against the fast tier's size, one line per policy,
/// log x: a miss-ratio curve as libCacheSim plots it (hit ratio = 1 − miss
/// ratio; tiering: the share of IO the fast tier served). `None` without a
/// sweep ([`SimReport::curve`] empty).
pub fn curves(report: &SimReport) -> Option<(Csv, Chart)> {
    curves_of(&report.curve)
}

/// [`curves`] of any points (a sweep file's rows of one trace and stack,
/// `tierd sweep --report`); `None` without points.
pub fn curves_of(curve: &[crate::sweep::CurvePoint]) -> Option<(Csv, Chart)> {
    if curve.is_empty() {
        return None;
    }
    let mut csv = Csv::new(&[
        "policy",
        "fast_bytes",
        "fast_gib",
        "hit_ratio",
        "miss_ratio",
        "avg_response_us",
    ]);
    let mut policies: Vec<&str> = Vec::new();
    for point in curve {
        if !policies.contains(&point.policy.as_str()) {
            policies.push(&point.policy);
        }
        csv.rows.push(vec![
            point.policy.clone(),
            point.fast_bytes.to_string(),
            number(point.fast_bytes as f64 / GIB),
            number(point.hit_ratio),
            number(point.miss_ratio),
            number(point.avg_response_us),
        ]);
    }
    let line = |index: usize, policy: &str, y: &dyn Fn(&crate::sweep::CurvePoint) -> f64| Series {
        label: policy.to_string(),
        colour: colour(index),
        dashed: is_cache_policy(policy),
        points: curve
            .iter()
            .filter(|point| point.policy == policy)
            .map(|point| (point.fast_bytes as f64 / GIB, y(point)))
            .collect(),
    };
    let hits: Vec<Series> = policies
        .iter()
        .enumerate()
        .map(|(index, policy)| line(index, policy, &|point| point.hit_ratio * 100.0))
        .collect();
    let responses: Vec<Series> = policies
        .iter()
        .enumerate()
        .map(|(index, policy)| line(index, policy, &|point| point.avg_response_us))
        .collect();
    let chart = Chart {
        title: "Hit ratio and mean response against fast-tier size (miss-ratio curve)".to_string(),
        subtitle: "every policy at every size of --fast-bytes; caches dashed: page hit ratio; tiering solid: share of IO the fast tier served".to_string(),
        x_label: "fast-tier size (GiB, log)".to_string(),
        x_scale: Scale::Log,
        x_format: TickFormat::Number,
        x_range: None,
        panels: vec![
            Panel {
                title: "hit ratio".to_string(),
                y_label: "% of IO served by the fast tier".to_string(),
                y_range: Some((0.0, 100.0)),
                y_format: TickFormat::Number,
                reference: None,
                series: hits,
            },
            Panel {
                title: "mean response".to_string(),
                y_label: "mean response".to_string(),
                y_range: None,
                y_format: TickFormat::Microseconds,
                reference: None,
                series: responses,
            },
        ],
        legend: policies
            .iter()
            .enumerate()
            .map(|(index, policy)| (policy.to_string(), colour(index), is_cache_policy(policy)))
            .collect(),
    };
    Some((csv, chart))
}

const GIB: f64 = (1u64 << 30) as f64;

fn is_cache_policy(policy: &str) -> bool {
    matches!(policy, "fifo" | "lru" | "arc" | "s3fifo")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_when_needed() {
        let mut csv = Csv::new(&["a", "b"]);
        csv.rows
            .push(vec!["x,y".to_string(), "say \"hi\"".to_string()]);
        csv.rows.push(vec!["plain".to_string(), String::new()]);
        assert_eq!(csv.render(), "a,b\n\"x,y\",\"say \"\"hi\"\"\"\nplain,\n");
        assert_eq!(number(f64::NAN), "");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(column_name("Fast SSD-1"), "fast_ssd_1");
    }

    #[test]
    fn cdf_reaches_one() {
        let mut histogram = Histogram::new();
        for value in [1_000u64, 2_000, 2_000, 1_000_000] {
            histogram.record(value);
        }
        let rows = cdf(&histogram);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].3, 0.25);
        assert_eq!(rows[1].3, 0.75);
        assert_eq!(rows.last().unwrap().3, 1.0);
        let points = cdf_points(&histogram);
        assert_eq!(points.len(), 4);
        // Starts at the low edge of the first bucket, which holds 1 µs.
        assert!(points[0].0 <= 1.0 && points[0].0 > 0.9, "{points:?}");
        assert_eq!(points[0].1, 0.0);
        assert_eq!(points[1], (rows[0].1, 25.0));
        assert_eq!(points.last().unwrap().1, 100.0);
    }
}
