//! A probe's files: `probe.json` (figures, model, fit, every IO), `reads.csv`
//! (every read of the benchmark) and `report.html` with paper 001's figures
//! in kind, drawn by the simulator's SVG charts (`tierd_sim::report::svg`):
//! latency by offset before and after each write load (Fig. 5), the latency
//! CDF of each combination (Fig. 6), read latency over time after random
//! writes for each amount written (Fig. 7).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use tierd_common::units::Bytes;
use tierd_sim::report::svg::{self, Chart, Panel, Scale, Series, TickFormat};

use super::fit::Fit;
use super::summary::{CombinationSummary, Phase};
use super::workload::{ReadKind, WriteKind};

/// `probe.json`: the `--json` output plus what the fit needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeOutput {
    /// `smr-archive8tb` (an emulated device), or null for a real one.
    pub model: Option<String>,
    pub scale: f64,
    pub combinations: Vec<CombinationSummary>,
    pub device: String,
    pub device_bytes: u64,
    pub direct: bool,
    pub virtual_time: bool,
    pub seed: u64,
    /// The emulated SMR model's parameters (scaled), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_parameters: Option<tierd_device::model::smr::SmrConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<Fit>,
    /// Every IO of every phase (probe.json only, not `--json`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<Phase>,
}

/// `reads.csv`: one line per read of a benchmark combination.
pub fn reads_csv(phases: &[Phase]) -> String {
    let mut out = String::from(
        "write,read,written_bytes,index,offset_bytes,length_bytes,time_since_writes_s,latency_ms,followed\n",
    );
    for phase in phases {
        let Some(combination) = phase.combination else {
            continue;
        };
        for (index, record) in phase.records.iter().filter(|r| !r.is_write()).enumerate() {
            let _ = writeln!(
                out,
                "{},{},{},{index},{},{},{:.6},{:.3},{}",
                combination.write.name(),
                combination.read.name(),
                combination.written_bytes,
                record.offset_bytes(),
                record.length_bytes(),
                record.start_ns().saturating_sub(phase.writes_end_ns) as f64 / 1e9,
                record.latency_ns() as f64 / 1e6,
                u8::from(index as u64 >= phase.paper_reads),
            );
        }
    }
    out
}

fn find(
    phases: &[Phase],
    write: WriteKind,
    read: ReadKind,
    written_bytes: Option<u64>,
) -> Option<&Phase> {
    phases.iter().rev().find(|phase| {
        phase.combination.is_some_and(|c| {
            c.write == write && c.read == read && written_bytes.is_none_or(|w| w == c.written_bytes)
        })
    })
}

fn paper_reads(phase: &Phase) -> impl Iterator<Item = &super::summary::Record> {
    phase
        .records
        .iter()
        .filter(|r| !r.is_write())
        .take(phase.paper_reads as usize)
}

/// Fig. 5: latency by offset, before (none) and after each write load.
pub fn fig5(phases: &[Phase]) -> Chart {
    let mut panels = Vec::new();
    for write in [WriteKind::Sw, WriteKind::Rw] {
        for read in [ReadKind::Sr, ReadKind::Rr] {
            let mut series = Vec::new();
            for (label, phase, colour) in [
                (
                    "before",
                    find(phases, WriteKind::None, read, None),
                    svg::colour(2),
                ),
                ("after", find(phases, write, read, None), svg::colour(1)),
            ] {
                let Some(phase) = phase else { continue };
                let mut points: Vec<(f64, f64)> = paper_reads(phase)
                    .map(|r| {
                        (
                            r.offset_bytes() as f64 / (1u64 << 30) as f64,
                            r.latency_ns() as f64 / 1e6,
                        )
                    })
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                series.push(Series {
                    label: label.to_string(),
                    colour,
                    dashed: false,
                    points,
                });
            }
            panels.push(Panel {
                title: format!(
                    "{} → {}",
                    write.name().to_uppercase(),
                    read.name().to_uppercase()
                ),
                y_label: "latency (ms)".to_string(),
                y_range: None,
                y_format: TickFormat::Number,
                reference: Some((100.0, "100 ms".to_string())),
                series,
            });
        }
    }
    Chart {
        title: "Read latency by offset before and after the writes (paper 001 Fig. 5)".to_string(),
        subtitle: "green: before any write load; red: right after it".to_string(),
        x_label: "offset (GiB)".to_string(),
        x_scale: Scale::Linear,
        x_format: TickFormat::Number,
        x_range: None,
        panels,
        legend: vec![
            ("before".to_string(), svg::colour(2), false),
            ("after".to_string(), svg::colour(1), false),
        ],
    }
}

/// Fig. 6: the latency CDF of every combination at the largest amount.
pub fn fig6(phases: &[Phase]) -> Chart {
    let largest = phases
        .iter()
        .filter_map(|p| p.combination.map(|c| c.written_bytes))
        .max()
        .unwrap_or(0);
    let mut series = Vec::new();
    for phase in phases {
        let Some(c) = phase.combination else { continue };
        if c.write != WriteKind::None && c.written_bytes != largest {
            continue;
        }
        let mut latencies: Vec<f64> = paper_reads(phase)
            .map(|r| r.latency_ns() as f64 / 1e6)
            .collect();
        latencies.sort_by(f64::total_cmp);
        let count = latencies.len().max(1) as f64;
        let points = latencies
            .iter()
            .enumerate()
            .map(|(index, &ms)| (ms.max(0.001), (index + 1) as f64 / count * 100.0))
            .collect();
        series.push(Series {
            label: format!(
                "{} → {}",
                c.write.name().to_uppercase(),
                c.read.name().to_uppercase()
            ),
            colour: svg::colour(series.len()),
            dashed: c.read == ReadKind::Sr,
            points,
        });
    }
    let legend = series
        .iter()
        .map(|s| (s.label.clone(), s.colour, s.dashed))
        .collect();
    Chart {
        title: "Read latency CDF per combination (paper 001 Fig. 6)".to_string(),
        subtitle: format!("writes of {} each", Bytes(largest)),
        x_label: "latency (ms)".to_string(),
        x_scale: Scale::Log,
        x_format: TickFormat::Number,
        x_range: None,
        panels: vec![Panel {
            title: "reads at or below the latency (%)".to_string(),
            y_label: "%".to_string(),
            y_range: Some((0.0, 100.0)),
            y_format: TickFormat::Number,
            reference: None,
            series,
        }],
        legend,
    }
}

/// Fig. 7: random-read latency over time after random writes, per amount.
pub fn fig7(phases: &[Phase]) -> Chart {
    let mut panels = Vec::new();
    for phase in phases {
        let Some(c) = phase.combination else { continue };
        if c.write != WriteKind::Rw || c.read != ReadKind::Rr {
            continue;
        }
        let points = phase
            .records
            .iter()
            .filter(|r| !r.is_write())
            .map(|r| {
                (
                    r.start_ns().saturating_sub(phase.writes_end_ns) as f64 / 1e9,
                    r.latency_ns() as f64 / 1e6,
                )
            })
            .collect();
        panels.push(Panel {
            title: format!("RW → RR after {} written", Bytes(c.written_bytes)),
            y_label: "latency (ms)".to_string(),
            y_range: None,
            y_format: TickFormat::Number,
            reference: Some((100.0, "100 ms".to_string())),
            series: vec![Series {
                label: "read latency".to_string(),
                colour: svg::colour(0),
                dashed: false,
                points,
            }],
        });
    }
    Chart {
        title: "Random-read latency after random writes end (paper 001 Fig. 7)".to_string(),
        subtitle: "reads continue past the paper's amount until the burst is over".to_string(),
        x_label: "seconds since the writes ended".to_string(),
        x_scale: Scale::Linear,
        x_format: TickFormat::Number,
        x_range: None,
        panels,
        legend: vec![("read latency".to_string(), svg::colour(0), false)],
    }
}

/// Seconds as the table shows them; `-` for none.
fn seconds(value: Option<f64>) -> String {
    value.map_or("-".to_string(), |s| format!("{s:.1}"))
}

/// The text table `tierd probe` prints.
pub fn table(output: &ProbeOutput) -> String {
    let mut out = format!(
        "tierd probe {} ({}, {}, scale {})\n",
        output.device,
        output.model.as_deref().unwrap_or("real device"),
        Bytes(output.device_bytes),
        output.scale
    );
    out.push_str(
        "write  read  written     reads  >100ms   p50 ms   p99 ms  burst start s  burst length s\n",
    );
    for c in &output.combinations {
        let _ = writeln!(
            out,
            "{:<6} {:<5} {:>10} {:>6} {:>6.1}% {:>8.1} {:>8.1} {:>14} {:>15}{}",
            c.write,
            c.read,
            Bytes(c.written_bytes).to_string(),
            c.reads,
            c.slow_fraction_100ms * 100.0,
            c.p50_ms,
            c.p99_ms,
            seconds(c.burst_start_s),
            seconds(c.burst_length_s),
            if c.burst_ended { "" } else { " (not ended)" }
        );
    }
    out
}

/// `report.html`: the table, the model and the three figures inline.
pub fn html(output: &ProbeOutput, phases: &[Phase]) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tierd probe</title>\n\
         <style>body{font-family:sans-serif;max-width:960px;margin:2em auto}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}pre{background:#f6f6f6;padding:8px}</style>\n\
         </head>\n<body>\n<h1>tierd probe</h1>\n",
    );
    let _ = writeln!(
        out,
        "<p>Device <b>{}</b> ({}), {}, scale {}, {}; seed {}. Definitions: docs/probe.md.</p>",
        svg::escape(&output.device),
        svg::escape(output.model.as_deref().unwrap_or("real device")),
        Bytes(output.device_bytes),
        output.scale,
        if output.virtual_time {
            "virtual time"
        } else {
            "wall-clock time"
        },
        output.seed
    );
    out.push_str("<table>\n<tr><th>write</th><th>read</th><th>written</th><th>reads</th><th>&gt; 100 ms</th><th>p50 ms</th><th>p99 ms</th><th>burst start s</th><th>burst length s</th></tr>\n");
    for c in &output.combinations {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
            c.write,
            c.read,
            Bytes(c.written_bytes),
            c.reads,
            c.slow_fraction_100ms * 100.0,
            c.p50_ms,
            c.p99_ms,
            seconds(c.burst_start_s),
            seconds(c.burst_length_s),
        );
    }
    out.push_str("</table>\n");
    for chart in [fig5(phases), fig6(phases), fig7(phases)] {
        out.push_str("<div>\n");
        out.push_str(&svg::render(&chart));
        out.push_str("</div>\n");
    }
    if let Some(parameters) = &output.model_parameters {
        let _ = writeln!(
            out,
            "<h2>Model</h2>\n<pre>{}</pre>",
            svg::escape(&serde_json::to_string_pretty(parameters).unwrap_or_default())
        );
    }
    if let Some(fit) = &output.fit {
        let _ = writeln!(
            out,
            "<h2>Fitted parameters</h2>\n<pre>{}</pre>",
            svg::escape(&serde_json::to_string_pretty(fit).unwrap_or_default())
        );
    }
    out.push_str("</body>\n</html>\n");
    out
}
