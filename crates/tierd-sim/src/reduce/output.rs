//! The Fig. 5 experiment's outputs: the text table, the CSV files and the
//! SVG chart (drawn with the report's [`crate::report::svg`]).

use std::fmt::Write as _;

use crate::report::series::Csv;
use crate::report::svg::{self, colour, Chart, Panel, Scale, Series, TickFormat};
use crate::tables::columns;

use super::fig5::{Fig5Report, Variant};

fn number(value: f64) -> String {
    if value.is_finite() {
        format!("{value}")
    } else {
        String::new()
    }
}

/// The table: a row per load, for each configuration its mean response,
/// largest deviation from the mean (the paper's figure) and switches.
pub fn render_text(report: &Fig5Report) -> String {
    let config = &report.config;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Paper 004 Fig. 5 in kind (simulated): response stability of data reduction's write modes"
    );
    let _ = writeln!(out, "workload: {}", report.workload);
    let _ = writeln!(
        out,
        "processor: {} workers, queue {}; worker time per 8 KiB write: inline {:.1} us, post {:.1} us \
         (post/inline {:.2}; costs {})",
        config.workers,
        config.queue_order.name(),
        report.work_ns_inline / 1e3,
        report.work_ns_post / 1e3,
        report.post_work_ratio,
        report.costs_source
    );
    let _ = writeln!(
        out,
        "max IOPS (saturated): inline {:.0}, post {:.0}; loads are % of inline's",
        report.saturation.max_iops_inline, report.saturation.max_iops_post
    );
    let _ = writeln!(
        out,
        "{} measurements per load, each the mean response over {} ms after {} ms of warm-up; \
         switch window {} ms, T1 {:.0}%, T2 {:.0}%; stage {} blocks; seed {}",
        config.measurements,
        config.measurement_ns / 1_000_000,
        config.warmup_ns / 1_000_000,
        config.switch_window_ns / 1_000_000,
        config.t1 * 100.0,
        config.t2 * 100.0,
        config.stage_limit_blocks,
        config.seed
    );
    if report.double_rule_check != "ok" {
        let _ = writeln!(out, "warning: {}", report.double_rule_check);
    }
    out.push('\n');
    let mut header = vec!["load".to_string()];
    for variant in Variant::ALL {
        let name = variant.name();
        header.push(format!("{name} us"));
        header.push(format!("{name} dev%"));
        header.push(format!("{name} sw"));
    }
    let mut rows = vec![header];
    for &load in &config.loads_percent {
        let mut row = vec![format!("{load}%")];
        for variant in Variant::ALL {
            match report.result(variant, load) {
                Some(result) => {
                    row.push(format!("{:.1}", result.mean_response_us));
                    row.push(format!("{:.0}", result.max_deviation_percent));
                    row.push(result.switches.to_string());
                }
                None => row.extend(["-".to_string(), "-".to_string(), "-".to_string()]),
            }
        }
        rows.push(row);
    }
    out.push_str(&columns(&rows));
    out.push('\n');
    let mut summary = vec![vec![
        "configuration".to_string(),
        "max dev% (ours)".to_string(),
        "paper".to_string(),
    ]];
    for variant in Variant::ALL {
        let paper = match variant {
            Variant::Inline | Variant::Post => {
                format!(
                    "<= {:.0}% (no switching)",
                    report.paper.target_max_deviation_percent
                )
            }
            Variant::Single => format!("> {:.0}%", report.paper.single_max_deviation_percent),
            Variant::Double => format!("{:.0}%", report.paper.double_max_deviation_percent),
        };
        summary.push(vec![
            variant.label(config),
            format!("{:.0}", report.max_deviation_percent(variant)),
            paper,
        ]);
    }
    out.push_str(&columns(&summary));
    let _ = writeln!(
        out,
        "\nus: mean of the measurements' mean responses; dev%: largest |measurement - mean| / mean; \
         sw: mode switches during the measurements"
    );
    if let Some(tier) = &config.tier {
        let _ = writeln!(
            out,
            "\ncleaning: writes at random over a tier of {} blocks on {} packs of {} KiB (whole run, \
             warm-up included)",
            tier.logical_blocks,
            tier.pack_count,
            tier.pack_bytes >> 10
        );
        let mut rows = vec![[
            "configuration",
            "load",
            "passes",
            "urgent",
            "packs",
            "moved MiB",
            "WA",
            "worker ms",
            "refused",
        ]
        .map(str::to_string)
        .to_vec()];
        for result in &report.results {
            let Some(cleaning) = &result.cleaning else {
                continue;
            };
            rows.push(vec![
                result.label.clone(),
                format!("{}%", result.load_percent),
                cleaning.passes.to_string(),
                cleaning.urgent_passes.to_string(),
                cleaning.packs_cleaned.to_string(),
                format!("{:.1}", cleaning.relocated_bytes as f64 / (1 << 20) as f64),
                format!("{:.2}", cleaning.write_amplification),
                format!(
                    "{:.1}",
                    (cleaning.urgent_ns + cleaning.background_ns) as f64 / 1e6
                ),
                cleaning.refused_writes.to_string(),
            ]);
        }
        out.push_str(&columns(&rows));
        let _ = writeln!(
            out,
            "urgent: passes on a writer's time (no room); WA: (stored + moved) / stored bytes; \
             worker ms: the passes' reads and copies charged to the workers"
        );
    }
    out
}

/// One row per configuration and load.
pub fn summary_csv(report: &Fig5Report) -> Csv {
    let header = [
        "variant",
        "load_percent",
        "offered_iops",
        "achieved_iops",
        "mean_response_us",
        "max_deviation_percent",
        "switches",
        "utilisation",
        "inline_share",
        "stage_overflows",
        "staged_blocks_max",
    ];
    Csv {
        header: header.iter().map(|name| name.to_string()).collect(),
        rows: report
            .results
            .iter()
            .map(|result| {
                vec![
                    result.variant.name().to_string(),
                    number(result.load_percent),
                    number(result.offered_iops),
                    number(result.achieved_iops),
                    number(result.mean_response_us),
                    number(result.max_deviation_percent),
                    result.switches.to_string(),
                    number(result.utilisation),
                    number(result.inline_share),
                    result.stage_overflows.to_string(),
                    result.staged_blocks_max.to_string(),
                ]
            })
            .collect(),
    }
}

/// One row per measurement.
pub fn measurements_csv(report: &Fig5Report) -> Csv {
    let header = [
        "variant",
        "load_percent",
        "measurement",
        "mean_response_us",
        "writes",
        "inline_share",
        "utilisation",
        "switches",
    ];
    let mut rows = Vec::new();
    for result in &report.results {
        for (index, measurement) in result.measurements.iter().enumerate() {
            rows.push(vec![
                result.variant.name().to_string(),
                number(result.load_percent),
                index.to_string(),
                number(measurement.mean_response_us),
                measurement.writes.to_string(),
                number(measurement.inline_share),
                number(measurement.utilisation),
                measurement.switches.to_string(),
            ]);
        }
    }
    Csv {
        header: header.iter().map(|name| name.to_string()).collect(),
        rows,
    }
}

/// Deviation, mean response and switches against load, a line per
/// configuration; the paper's 50 % target as a reference line.
pub fn chart(report: &Fig5Report) -> Chart {
    let config = &report.config;
    let series = |value: &dyn Fn(&super::fig5::LoadResult) -> f64| -> Vec<Series> {
        Variant::ALL
            .iter()
            .enumerate()
            .map(|(index, &variant)| Series {
                label: variant.label(config),
                colour: colour(index),
                dashed: matches!(variant, Variant::Inline | Variant::Post),
                points: report
                    .results
                    .iter()
                    .filter(|result| result.variant == variant)
                    .map(|result| (result.load_percent, value(result)))
                    .collect(),
            })
            .collect()
    };
    let legend = Variant::ALL
        .iter()
        .enumerate()
        .map(|(index, &variant)| {
            (
                variant.label(config),
                colour(index),
                matches!(variant, Variant::Inline | Variant::Post),
            )
        })
        .collect();
    Chart {
        title: "Response stability under inline/post switching (paper 004 Fig. 5, simulated)"
            .to_string(),
        subtitle: format!(
            "{} measurements of {} ms per load; post/inline work {:.2}; queue {}; seed {}",
            config.measurements,
            config.measurement_ns / 1_000_000,
            report.post_work_ratio,
            config.queue_order.name(),
            config.seed
        ),
        x_label: "load (% of inline's maximum IOPS)".to_string(),
        x_scale: Scale::Linear,
        x_format: TickFormat::Number,
        x_range: Some((0.0, 100.0)),
        panels: vec![
            Panel {
                title: "largest deviation from the mean response".to_string(),
                y_label: "deviation (%)".to_string(),
                y_range: None,
                y_format: TickFormat::Number,
                reference: Some((
                    report.paper.target_max_deviation_percent,
                    "paper's target 50 %".to_string(),
                )),
                series: series(&|result| result.max_deviation_percent),
            },
            Panel {
                title: "mean response".to_string(),
                y_label: "response".to_string(),
                y_range: None,
                y_format: TickFormat::Microseconds,
                reference: None,
                series: series(&|result| result.mean_response_us),
            },
            Panel {
                title: "mode switches during the measurements".to_string(),
                y_label: "switches".to_string(),
                y_range: None,
                y_format: TickFormat::Number,
                reference: None,
                series: series(&|result| result.switches as f64),
            },
        ],
        legend,
    }
}

/// `reduce-fig5.svg`, `reduce-fig5.csv`, `reduce-fig5-measurements.csv`
/// and `reduce-fig5.json` into `directory`; returns the paths written.
pub fn write(
    report: &Fig5Report,
    directory: &std::path::Path,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(directory)?;
    let files = [
        ("reduce-fig5.svg", svg::render(&chart(report))),
        ("reduce-fig5.csv", summary_csv(report).render()),
        (
            "reduce-fig5-measurements.csv",
            measurements_csv(report).render(),
        ),
        (
            "reduce-fig5.json",
            serde_json::to_string_pretty(report).map_err(std::io::Error::other)? + "\n",
        ),
        ("reduce-fig5.txt", render_text(report)),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let path = directory.join(name);
        std::fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}
