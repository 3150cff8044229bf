//! The sweep report (`tierd sweep --report DIR`, `tierd.sweep_report`):
//! one HTML page over a sweep file, with per trace (and tier stack and
//! segment/cache-block size) the hit-ratio and mean-response curves against
//! the fast tier's size (the charts of `tierd sim --report`, from
//! `tierd_sim::report::series::curves_of`), and the per-policy win table
//! across all traces: in every contest (one trace, stack and fast size)
//! the policy with the lowest mean response wins.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tierd_common::units::Bytes;
use tierd_sim::report::series::{curves_of, html_table};
use tierd_sim::report::svg::{escape, render};
use tierd_sim::sweep::CurvePoint;

use crate::sweep::{header, split_line};
use crate::LabError;

/// One row of a sweep file, by column name.
struct Row {
    fields: Vec<String>,
}

impl Row {
    fn get(&self, columns: &[String], name: &str) -> &str {
        columns
            .iter()
            .position(|column| column == name)
            .and_then(|index| self.fields.get(index))
            .map_or("", String::as_str)
    }

    fn number(&self, columns: &[String], name: &str) -> f64 {
        self.get(columns, name).parse().unwrap_or(f64::NAN)
    }
}

/// What the curves of one chart share: everything but policy and size.
fn scenario(row: &Row, columns: &[String]) -> String {
    let mut name = row.get(columns, "trace").to_string();
    let volume = row.get(columns, "volume");
    if !volume.is_empty() {
        name.push_str(&format!(" volume {volume}"));
    }
    name.push_str(&format!(" on {}", row.get(columns, "tiers")));
    for (column, label) in [
        ("segment_bytes", "segment"),
        ("cache_block_bytes", "cache block"),
    ] {
        if let Ok(bytes) = row.get(columns, column).parse::<u64>() {
            name.push_str(&format!(", {label} {}", Bytes(bytes)));
        }
    }
    for (column, label) in [("queue_depth", "queue depth"), ("speed", "speed x")] {
        let value = row.get(columns, column);
        if !value.is_empty() {
            name.push_str(&format!(", {label}{value}"));
        }
    }
    name
}

fn geometric_mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    (values.iter().map(|value| value.ln()).sum::<f64>() / values.len() as f64).exp()
}

/// Writes `index.html` and one SVG per chart into `directory` from the
/// sweep file `csv` (a sweep's CSV, or a Parquet output's `.rows.csv`).
pub fn write(csv: &Path, directory: &Path) -> Result<PathBuf, LabError> {
    let text = std::fs::read_to_string(csv)
        .map_err(|error| LabError(format!("{}: cannot read: {error}", csv.display())))?;
    let mut lines = text.lines();
    let columns: Vec<String> = match lines.next() {
        Some(first) if first == header() => split_line(first),
        _ => {
            return Err(LabError(format!(
                "{}: not a tierd sweep file (its first line is not the sweep header)",
                csv.display()
            )))
        }
    };
    let rows: Vec<Row> = lines
        .filter(|line| !line.is_empty())
        .map(|line| Row {
            fields: split_line(line),
        })
        .collect();
    std::fs::create_dir_all(directory)
        .map_err(|error| LabError(format!("{}: cannot create: {error}", directory.display())))?;

    // Scenarios and policies in first-seen order of the (sorted) file,
    // then scenarios sorted by name so the page reads trace by trace.
    let mut scenarios: Vec<String> = Vec::new();
    let mut policies: Vec<String> = Vec::new();
    for row in &rows {
        let name = scenario(row, &columns);
        if !scenarios.contains(&name) {
            scenarios.push(name);
        }
        let policy = row.get(&columns, "policy").to_string();
        if !policies.contains(&policy) {
            policies.push(policy);
        }
    }
    scenarios.sort();
    policies.sort();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tierd sweep report: {}</title>\n<style>{}</style>\n</head>\n<body>",
        escape(&csv.display().to_string()),
        tierd_sim::report::STYLE
    );
    let _ = writeln!(
        out,
        "<h1>tierd sweep report</h1>\n<p>Sweep file <b>{}</b>: {} run(s), {} scenario(s) (trace, tier stack, segment and cache-block size), policies {}. Every trace is a <span class=\"kind file\">trace file</span> as the sweep names it.</p>",
        escape(&csv.display().to_string()),
        rows.len(),
        scenarios.len(),
        escape(&policies.join(", "))
    );

    // Contests: one scenario at one fast size; the lowest mean response wins.
    let mut contests: Vec<(String, u64)> = Vec::new();
    for row in &rows {
        let key = (
            scenario(row, &columns),
            row.get(&columns, "fast_bytes").parse().unwrap_or(0),
        );
        if !contests.contains(&key) {
            contests.push(key);
        }
    }
    contests.sort();
    let mut wins = vec![0usize; policies.len()];
    let mut entered = vec![0usize; policies.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
    let mut grid = vec![{
        let mut head = vec!["trace, stack, size".to_string(), "fast tier".to_string()];
        head.extend(policies.iter().cloned());
        head.push("winner".to_string());
        head
    }];
    for (name, fast_bytes) in &contests {
        let of: Vec<&Row> = rows
            .iter()
            .filter(|row| {
                &scenario(row, &columns) == name
                    && row.get(&columns, "fast_bytes").parse::<u64>().ok() == Some(*fast_bytes)
            })
            .collect();
        let best = of
            .iter()
            .map(|row| row.number(&columns, "avg_response_us"))
            .filter(|value| value.is_finite())
            .fold(f64::INFINITY, f64::min);
        let mut line = vec![name.clone(), Bytes(*fast_bytes).to_string()];
        let mut winners = Vec::new();
        for (index, policy) in policies.iter().enumerate() {
            let response = of
                .iter()
                .find(|row| row.get(&columns, "policy") == policy)
                .map(|row| row.number(&columns, "avg_response_us"));
            match response {
                Some(value) if value.is_finite() => {
                    entered[index] += 1;
                    if best > 0.0 {
                        ratios[index].push(value / best);
                    }
                    if value == best {
                        wins[index] += 1;
                        winners.push(policy.clone());
                    }
                    line.push(tierd_sim::matrix::format_us(value));
                }
                _ => line.push("-".to_string()),
            }
        }
        line.push(winners.join(", "));
        grid.push(line);
    }
    let mut table = vec![vec![
        "policy".to_string(),
        "contests".to_string(),
        "wins".to_string(),
        "win share".to_string(),
        "geo. mean of mean response / best".to_string(),
        "worst mean response / best".to_string(),
    ]];
    for (index, policy) in policies.iter().enumerate() {
        let worst = ratios[index].iter().copied().fold(f64::NAN, f64::max);
        table.push(vec![
            policy.clone(),
            entered[index].to_string(),
            wins[index].to_string(),
            if entered[index] > 0 {
                format!(
                    "{:.0} %",
                    wins[index] as f64 * 100.0 / entered[index] as f64
                )
            } else {
                "-".to_string()
            },
            format!("{:.3}", geometric_mean(&ratios[index])),
            format!("{worst:.3}"),
        ]);
    }
    out.push_str("<h2>Wins per policy, across all traces</h2>\n<p>A contest is one trace (and volume) on one tier stack at one fast-tier size; the policy with the lowest mean response time wins it (ties: all of them). The ratio columns divide each policy's mean response by the contest's best (1 = best).</p>\n");
    out.push_str(&html_table(&table));
    out.push_str(
        "<h2>Every contest</h2>\n<p>Mean response time of every policy; the winner last.</p>\n",
    );
    out.push_str(&html_table(&grid));

    out.push_str("<h2>Curves per trace</h2>\n");
    for (index, name) in scenarios.iter().enumerate() {
        let mut points: Vec<CurvePoint> = rows
            .iter()
            .filter(|row| &scenario(row, &columns) == name)
            .map(|row| CurvePoint {
                policy: row.get(&columns, "policy").to_string(),
                fast_bytes: row.get(&columns, "fast_bytes").parse().unwrap_or(0),
                hit_ratio: row.number(&columns, "hit_ratio"),
                miss_ratio: row.number(&columns, "miss_ratio"),
                avg_response_us: row.number(&columns, "avg_response_us"),
            })
            .collect();
        points.sort_by(|a, b| (&a.policy, a.fast_bytes).cmp(&(&b.policy, b.fast_bytes)));
        let _ = writeln!(out, "<h3>{}</h3>", escape(name));
        if let Some((_, mut chart)) = curves_of(&points) {
            chart.subtitle = format!("{name}; caches dashed: page hit ratio; tiering solid: share of IO the fast tier served");
            let file = format!("curves-{index}.svg");
            let path = directory.join(&file);
            std::fs::write(&path, render(&chart))
                .map_err(|error| LabError(format!("{}: cannot write: {error}", path.display())))?;
            let _ = writeln!(
                out,
                "<figure><img src=\"{file}\" alt=\"curves of {}\"><figcaption>{}</figcaption></figure>",
                escape(name),
                tierd_sim::report::CURVES_CAPTION
            );
        }
    }
    out.push_str("</body>\n</html>\n");
    let index = directory.join("index.html");
    std::fs::write(&index, out)
        .map_err(|error| LabError(format!("{}: cannot write: {error}", index.display())))?;
    Ok(index)
}
