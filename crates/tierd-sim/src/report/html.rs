//! `index.html`: provenance, settings, the two paper-shaped tables, the
//! plots with their CSV files, and the first moves of every run.

use std::fmt::Write as _;

use tierd_common::units::{Bytes, Duration};

use crate::config::Replay;
use crate::result::{RunResult, SimReport};
use crate::tables;

use super::series::html_table;
use super::svg::{colour, escape};
use super::{HeatMap, ReportKind, ReportOptions};

pub struct Figure {
    pub title: String,
    pub image: String,
    pub csv: String,
    pub caption: String,
}

pub const IOPS_CAPTION: &str = "User requests completed per second in each period, one line per \
     policy: the shape of paper 000 Figs. 7-8 (IOPS every minute, OTF-AST against HDD only and \
     against flashcache). A policy \
     that relieves the home disk keeps up with the trace and finishes sooner.";
pub const UTIL_CAPTION: &str =
    "Busy share of each device in each period (iostat %util), one panel \
     per tier, one line per policy: paper 000 Fig. 6 (%util every minute, against HDD only). \
     Migration copies \
     count as busy time on both devices.";
pub const FAST_BYTES_CAPTION: &str = "Bytes placed on the fast tier at each period end, one line \
     per policy: paper 002 Figs. 8-9 (ATSMF's memory consumption). Tiering counts whole segments (from \
     the start of their move); caches count resident 4 KiB pages.";
pub const RESPONSE_CAPTION: &str = "Cumulative distribution of response times on a log axis: all \
     requests (first panel), then the request pieces each tier served: paper 002 Figs. 10-14 \
     (there one figure per strategy with its (all), (SSD) and (memory) lines and SSD only; here \
     one panel per scope with a line per policy, none standing for SSD only). \
     Further left and higher is better.";
pub const CURVES_CAPTION: &str = "Every policy at every fast-tier size of --fast-bytes (the size sets the \
    fast tier's capacity for all of them): above, the hit ratio (caches, dashed: 4 KiB page hits; tiering, \
    solid: the share of IO the fast tier served; the miss-ratio curve is 100 % minus it); below, the mean \
    response time. Tiering uses the whole segments that fit in each size.";
pub const HEAT_MAP_CAPTION: &str = "IO count per segment (y) and period (x), log colour scale, \
     white = no IO: where the trace's hot spots are and how they move.";

pub const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}\
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}\
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;vertical-align:top}\
th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}\
table.settings td,table.settings th{text-align:left}\
td.text,th.text{text-align:left}td.text{max-width:420px}\
.kind{display:inline-block;padding:1px 8px;border-radius:3px;font-weight:bold}\
.synthetic{background:#fde8c8;color:#7a3e00}.file{background:#dcecf8;color:#0b3c66}\
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #ddd}\
figcaption{font-size:.9em;color:#444;margin-top:.3em}\
.swatch{display:inline-block;width:1.2em;height:.35em;vertical-align:middle;margin-right:.4em}\
code{background:#f5f5f5;padding:0 3px}";

fn replay_text(run: &RunResult) -> String {
    match run.settings.replay {
        Replay::OpenLoop { speed } => format!(
            "open loop by timestamp, x{speed} (arrival = trace time / {speed}), at most {} requests outstanding{}",
            run.settings.max_outstanding_requests,
            if run.settings.max_outstanding_requests == 0 { " (no limit)" } else { "" }
        ),
        Replay::ClosedLoop { queue_depth } => {
            format!("closed loop, {queue_depth} requests outstanding (timestamps ignored)")
        }
    }
}

fn window_text(run: &RunResult) -> String {
    let minutes = |ns: u64| format!("{} min", ns as f64 / 60e9);
    match (run.settings.window.from_ns, run.settings.window.to_ns) {
        (None, None) => "the whole trace".to_string(),
        (from, to) => format!(
            "from {} to {} after the trace's first request (trace time)",
            from.map_or_else(|| "the start".to_string(), minutes),
            to.map_or_else(|| "the end".to_string(), minutes)
        ),
    }
}

/// One value when every run agrees, else `policy: value` per run.
fn per_run(report: &SimReport, value: impl Fn(&RunResult) -> String) -> String {
    let values: Vec<String> = report.runs.iter().map(&value).collect();
    if values.windows(2).all(|pair| pair[0] == pair[1]) {
        values.into_iter().next().unwrap_or_else(|| "-".to_string())
    } else {
        report
            .runs
            .iter()
            .zip(values)
            .map(|(run, value)| format!("{}: {value}", run.policy))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn settings_table(report: &SimReport, kind: ReportKind) -> String {
    let live = kind == ReportKind::LiveReplay;
    let mut rows: Vec<(&str, String)> = Vec::new();
    rows.push((
        "tier stack",
        format!("{} ({})", report.tiers, report.tier_summary),
    ));
    if report.runs.is_empty() {
        rows.push(("runs", "none".to_string()));
    } else {
        rows.push(("replay", per_run(report, replay_text)));
        rows.push(("window", per_run(report, window_text)));
        rows.push((
            "period",
            per_run(report, |run| Duration(run.settings.period_ns).to_string()),
        ));
        rows.push((
            "segment size",
            per_run(report, |run| {
                if live && run.settings.segment_bytes == 0 {
                    "not visible to the client (not a tierd export)".to_string()
                } else {
                    format!(
                        "{} ({} segments)",
                        Bytes(run.settings.segment_bytes),
                        run.settings.segments
                    )
                }
            }),
        ));
        rows.push((
            "volume",
            per_run(report, |run| {
                format!(
                    "{} ({:.1} GB)",
                    Bytes(run.settings.volume_bytes),
                    run.settings.volume_bytes as f64 / 1e9
                )
            }),
        ));
        if !live {
            rows.push((
                "migration",
                per_run(report, |run| {
                    format!(
                        "chunks of {}, {} move(s) at a time",
                        Bytes(run.settings.chunk_bytes),
                        run.settings.max_concurrent_moves
                    )
                }),
            ));
        }
        rows.push((
            "requests replayed",
            per_run(report, |run| run.requests.to_string()),
        ));
        if !live {
            rows.push(("seed", per_run(report, |run| run.settings.seed.to_string())));
        }
    }
    let mut out = String::from("<table class=\"settings\">\n");
    for (name, value) in rows {
        let _ = writeln!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(name),
            escape(&value)
        );
    }
    out.push_str("</table>\n");
    out
}

fn tiers_table(report: &SimReport) -> String {
    let Some(run) = report.runs.first().filter(|run| !run.tiers.is_empty()) else {
        // No runs, or a live replay (no tier figures seen from the client).
        return String::new();
    };
    let mut rows = vec![vec![
        "tier".to_string(),
        "name".to_string(),
        "device".to_string(),
        "capacity GB".to_string(),
        "role".to_string(),
    ]];
    let count = run.tiers.len();
    for (index, tier) in run.tiers.iter().enumerate() {
        rows.push(vec![
            index.to_string(),
            tier.name.clone(),
            tier.device.clone(),
            format!("{:.1}", tier.capacity_bytes as f64 / 1e9),
            if index + 1 == count {
                "home (holds every segment)".to_string()
            } else if index == 0 {
                "fast".to_string()
            } else {
                "middle".to_string()
            },
        ]);
    }
    html_table(&rows).replacen("<table>", "<table class=\"settings\">", 1)
}

fn moves_section(report: &SimReport, options: &ReportOptions) -> String {
    let mut out = String::new();
    for (index, run) in report.runs.iter().enumerate() {
        let _ = writeln!(
            out,
            "<h3><span class=\"swatch\" style=\"background:{}\"></span>{}</h3>",
            colour(index),
            escape(&run.policy)
        );
        if run.move_log.is_empty() {
            let text = if run.cache.is_some() {
                "A block cache: no segment moves (its fills and write-backs are the migration IOs in util.csv)."
            } else {
                "No moves completed."
            };
            let _ = writeln!(out, "<p>{text}</p>");
            continue;
        }
        let shown = run.move_log.len().min(options.moves_listed);
        let _ = writeln!(
            out,
            "<p>{} moves completed ({:.2} GB copied, {} unfinished at the end, {} dropped); the first {shown} below, all in <a href=\"moves.csv\">moves.csv</a>.</p>",
            run.moves,
            run.migrated_bytes as f64 / 1e9,
            run.moves_unfinished,
            run.moves_dropped
        );
        let tier_name = |tier: u8| {
            run.tiers
                .get(usize::from(tier))
                .map_or_else(|| tier.to_string(), |tier| tier.name.clone())
        };
        out.push_str("<table>\n<tr><th>#</th><th>accepted min</th><th>copy start min</th><th>flip min</th><th>segment</th><th class=\"text\">from → to</th><th>GB copied</th><th>stall ms</th><th class=\"text\">rule</th><th class=\"text\">detail</th></tr>\n");
        for (number, record) in run.move_log.iter().take(shown).enumerate() {
            let _ = writeln!(
                out,
                "<tr><td>{number}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td class=\"text\">{} → {}</td><td>{:.2}</td><td>{:.1}</td><td class=\"text\">{}</td><td class=\"text\">{}</td></tr>",
                record.accepted_ns as f64 / 60e9,
                record.start_ns as f64 / 60e9,
                record.end_ns as f64 / 60e9,
                record.segment,
                escape(&tier_name(record.from)),
                escape(&tier_name(record.to)),
                record.bytes as f64 / 1e9,
                record.stall_ns as f64 / 1e6,
                escape(&record.rule),
                escape(&record.detail)
            );
        }
        out.push_str("</table>\n");
    }
    out
}

/// The whole page.
pub fn page(
    report: &SimReport,
    heat_map: Option<&HeatMap>,
    options: &ReportOptions,
    figures: &[Figure],
    files: &[String],
) -> String {
    let synthetic = report.trace_kind == "synthetic";
    let command = options.kind.command();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{command} report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>",
        escape(&report.trace)
    );
    let _ = writeln!(out, "<h1>{command} report</h1>");
    let kind = if synthetic {
        "<span class=\"kind synthetic\">synthetic</span> generated on the fly by tierd synth"
    } else {
        "<span class=\"kind file\">trace file</span>"
    };
    let _ = writeln!(
        out,
        "<p>Trace: <b>{}</b><br>{kind}</p>",
        escape(&report.trace)
    );
    let policies: Vec<String> = report
        .runs
        .iter()
        .enumerate()
        .map(|(index, run)| {
            format!(
                "<span class=\"swatch\" style=\"background:{}\"></span>{}",
                colour(index),
                escape(&run.policy)
            )
        })
        .collect();
    let _ = writeln!(out, "<p>Policies: {}</p>", policies.join(" &nbsp; "));
    out.push_str("<h2>Settings</h2>\n");
    out.push_str(&settings_table(report, options.kind));
    out.push_str(&tiers_table(report));
    for note in &report.notes {
        let _ = writeln!(out, "<p>Note: {}</p>", escape(note));
    }
    out.push_str(match options.kind {
        ReportKind::Simulation => "<p>All times are virtual (replay) time from the first issue unless marked as trace time.</p>\n",
        ReportKind::LiveReplay => "<p>All times are wall-clock time from the start of the replay unless marked as trace time.</p>\n",
    });

    out.push_str("<h2>Tables</h2>\n");
    let _ = writeln!(out, "<h3>{}</h3>", escape(tables::IOPS_TABLE_TITLE));
    out.push_str(&html_table(&tables::iops_rows(report)));
    let _ = writeln!(out, "<h3>{}</h3>", escape(tables::RESPONSE_TABLE_TITLE));
    out.push_str(&html_table(&tables::response_rows(report)));
    let _ = writeln!(out, "<p>The same numbers as the terminal output of <code>{command}</code>; every run's full result is in <a href=\"result.json\">result.json</a>.</p>");

    out.push_str("<h2>Plots</h2>\n");
    for figure in figures {
        let _ = writeln!(
            out,
            "<figure id=\"{}\">\n<img src=\"{}\" alt=\"{}\">\n<figcaption>{} Data: <a href=\"{}\">{}</a>.</figcaption>\n</figure>",
            escape(figure.image.trim_end_matches(".svg")),
            escape(&figure.image),
            escape(&figure.title),
            escape(&figure.caption),
            escape(&figure.csv),
            escape(&figure.csv)
        );
    }
    if heat_map.is_none() {
        out.push_str("<p>No heat map: it was not computed for this report.</p>\n");
    }

    out.push_str("<h2>Moves</h2>\n");
    out.push_str(&moves_section(report, options));

    out.push_str("<h2>Files</h2>\n<ul>\n");
    for name in files {
        let _ = writeln!(
            out,
            "<li><a href=\"{}\">{}</a></li>",
            escape(name),
            escape(name)
        );
    }
    out.push_str("</ul>\n</body>\n</html>\n");
    out
}
