//! The replay's report: the simulator's [`RunResult`] keys for one run (the
//! tier figures stay empty: the client sees the export from outside), plus
//! what only a live replay has; its text tables (the simulator's two, then
//! a live one) and its HTML report (`tierd_sim::report`). The JSON keys are
//! public interface (`docs/engine/replay.md`, "Output").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tierd_common::histogram::Histogram;
use tierd_common::units::{Bytes, Duration};
use tierd_sim::result::{PeriodRecord, RunResult, RunSettings, SimReport};
use tierd_sim::{Replay, Window};

use crate::collect::{Completions, HOUR_NS};
use crate::pacing::{IssueStats, Pacer};
use crate::schedule::TraceSource;
use crate::target::DescribedVolume;
use crate::LoadError;

/// A live run: the simulator's [`RunResult`] keys, then what only a live
/// replay has.
#[derive(Clone, Debug, Serialize)]
pub struct LiveRun {
    #[serde(flatten)]
    pub run: RunResult,
    /// The NBD URI replayed against and the export's size.
    pub target: String,
    pub export_bytes: u64,
    pub connections: u32,
    /// The export advertised multi-conn (flush on one connection covers all).
    pub multi_conn: bool,
    /// Requests issued after their due time because `max_inflight` were
    /// outstanding (= `deferred_requests`; `pacing`).
    pub late_issues: u64,
    /// Requests that failed on the server, by NBD error name, and the first
    /// few messages.
    pub errors: u64,
    pub errors_by_name: BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
    /// Requests ending past the export, wrapped onto it.
    pub wrapped_requests: u64,
    /// Issue time − due time over all requests (sleep overshoot, the
    /// in-flight bound, a blocked socket), µs.
    pub issue_lag_mean_us: f64,
    pub issue_lag_p99_us: f64,
    pub issue_lag_max_us: f64,
    pub response_p95_us: f64,
    /// Response from the due time (what a user of the traced system waits,
    /// including any issue lag), µs, and its histogram.
    pub avg_response_from_due_us: f64,
    pub response_from_due_p50_us: f64,
    pub response_from_due_p95_us: f64,
    pub response_from_due_p99_us: f64,
    pub response_from_due_max_us: f64,
    pub response_from_due: Histogram,
    /// Requests in the window that were not issued (the replay stopped early).
    pub not_issued: u64,
}

/// The report: [`SimReport`]'s keys with live runs.
#[derive(Clone, Debug, Serialize)]
pub struct LiveReport {
    pub trace: String,
    pub trace_kind: String,
    pub tiers: String,
    pub tier_summary: String,
    pub runs: Vec<LiveRun>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What `--prefill` wrote before the replay (not part of the run's
    /// figures); absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill: Option<crate::prefill::Prefilled>,
}

impl LiveReport {
    /// The simulator's report of the same runs (tables, HTML report).
    pub fn to_sim_report(&self) -> SimReport {
        SimReport {
            trace: self.trace.clone(),
            trace_kind: self.trace_kind.clone(),
            tiers: self.tiers.clone(),
            tier_summary: self.tier_summary.clone(),
            runs: self.runs.iter().map(|live| live.run.clone()).collect(),
            notes: self.notes.clone(),
            working_set_bytes: None,
            curve: Vec::new(),
        }
    }
}

/// Everything a report is built from.
pub struct ReportInputs<'a> {
    pub trace_name: &'a str,
    /// The run's name (`--label`).
    pub label: &'a str,
    pub target: &'a str,
    pub speed: f64,
    pub window: Window,
    pub max_inflight: u32,
    pub connections: u32,
    pub export_bytes: u64,
    pub volume: Option<&'a DescribedVolume>,
    pub multi_conn: bool,
    pub period_ns: u64,
    /// Requests in the window (the scan's count).
    pub window_requests: u64,
    pub empty_requests: u64,
    pub reordered_requests: u64,
    pub issued: &'a IssueStats,
    pub completions: Completions,
}

fn us(ns: Option<u64>) -> f64 {
    ns.map_or(0.0, |ns| ns as f64 / 1e3)
}

fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// The report of one replay.
pub fn build(inputs: ReportInputs<'_>) -> LiveReport {
    let ReportInputs {
        trace_name,
        label,
        target,
        speed,
        window,
        max_inflight,
        connections,
        export_bytes,
        volume,
        multi_conn,
        period_ns,
        window_requests,
        empty_requests,
        reordered_requests,
        issued,
        completions,
    } = inputs;
    let elapsed_ns = completions.last_done_ns;
    let seconds = elapsed_ns as f64 / 1e9;
    let period_count = completions.periods.len();
    let periods: Vec<PeriodRecord> = completions
        .periods
        .iter()
        .enumerate()
        .map(|(index, (requests, response_ns))| {
            let start_ns = index as u64 * period_ns;
            PeriodRecord {
                index: index as u64,
                start_ns,
                end_ns: if index + 1 == period_count {
                    elapsed_ns.max(start_ns)
                } else {
                    start_ns + period_ns
                },
                requests: *requests,
                avg_response_us: if *requests > 0 {
                    *response_ns as f64 / *requests as f64 / 1e3
                } else {
                    0.0
                },
                moves_started: 0,
                moves_finished: 0,
                tiers: Vec::new(),
            }
        })
        .collect();
    let response = &completions.response;
    let from_due = &completions.response_from_due;
    let run = RunResult {
        policy: label.to_string(),
        replicas: None,
        disk_access_ms: None,
        replica: None,
        avg_iops: per_second(completions.requests, seconds),
        avg_response_us: response.mean_ns().unwrap_or(0.0) / 1e3,
        fast_io_share: 0.0,
        fast_bytes_max: 0,
        fast_bytes: 0,
        fast_segments: None,
        migrated_bytes: 0,
        avg_iops_first_hour: per_second(completions.first_hour, seconds.min(HOUR_NS as f64 / 1e9)),
        requests: completions.requests,
        reads: completions.reads,
        writes: completions.writes,
        bytes: completions.bytes,
        pieces: completions.requests,
        empty_requests,
        reordered_requests,
        deferred_requests: issued.late_issues,
        defer_mean_us: Pacer::late_mean_us(issued),
        defer_max_us: issued.late_ns_max as f64 / 1e3,
        elapsed_ns,
        last_arrival_ns: issued.last_issue_ns,
        response_p50_us: us(response.quantile_ns(0.5)),
        response_p90_us: us(response.quantile_ns(0.9)),
        response_p99_us: us(response.quantile_ns(0.99)),
        response_p999_us: us(response.quantile_ns(0.999)),
        response_max_us: us(response.max_ns()),
        response: response.clone(),
        directions: completions.directions.figures(),
        home_svctm_ms: 0.0,
        home_util: 0.0,
        moves: 0,
        moves_unfinished: 0,
        moves_dropped: 0,
        moves_dropped_by_reason: Default::default(),
        queue_wait_mean_us: 0.0,
        queue_wait_max_us: 0.0,
        switch_over_stall_max_us: 0.0,
        switch_over_stall_mean_us: 0.0,
        stalled_pieces: 0,
        mirrored_writes: 0,
        deferred_target_halves: 0,
        mirror_wait_max_us: 0.0,
        mirror_wait_mean_us: 0.0,
        move_mean_us: None,
        tiers: Vec::new(),
        cache: None,
        gain: None,
        move_log: Vec::new(),
        periods,
        settings: RunSettings {
            // What the export's description tells (a tierd export); 0: not
            // visible to the client.
            segment_bytes: volume.map_or(0, |volume| volume.segment_bytes),
            volume_bytes: export_bytes,
            segments: volume.map_or(0, |volume| {
                export_bytes.div_ceil(volume.segment_bytes.max(1))
            }),
            period_ns,
            replay: Replay::OpenLoop { speed },
            window,
            seed: 0,
            chunk_bytes: 0,
            max_concurrent_moves: 0,
            max_outstanding_requests: max_inflight,
            cache_bytes: None,
        },
    };
    let errors_by_name = completions
        .errors_by_name
        .iter()
        .map(|(name, count)| (name.to_string(), *count))
        .collect();
    let live = LiveRun {
        target: target.to_string(),
        export_bytes,
        connections,
        multi_conn,
        late_issues: issued.late_issues,
        errors: completions.errors,
        errors_by_name,
        error_samples: completions.error_samples.clone(),
        wrapped_requests: issued.wrapped,
        issue_lag_mean_us: issued.issue_lag.mean_ns().unwrap_or(0.0) / 1e3,
        issue_lag_p99_us: us(issued.issue_lag.quantile_ns(0.99)),
        issue_lag_max_us: us(issued.issue_lag.max_ns()),
        response_p95_us: us(response.quantile_ns(0.95)),
        avg_response_from_due_us: from_due.mean_ns().unwrap_or(0.0) / 1e3,
        response_from_due_p50_us: us(from_due.quantile_ns(0.5)),
        response_from_due_p95_us: us(from_due.quantile_ns(0.95)),
        response_from_due_p99_us: us(from_due.quantile_ns(0.99)),
        response_from_due_max_us: us(from_due.max_ns()),
        response_from_due: from_due.clone(),
        not_issued: window_requests.saturating_sub(issued.issued),
        run,
    };
    let mut notes = vec![format!(
        "live replay against {} ({}): response times are wall-clock, measured by the client from issue to completion; tier figures are not visible from outside the server ('-')",
        target,
        Bytes(export_bytes)
    )];
    if issued.wrapped > 0 {
        notes.push(format!(
            "{} request(s) ended past the export and were wrapped onto it (modulo its size in 4 KiB pages)",
            issued.wrapped
        ));
    }
    if connections > 1 && !multi_conn {
        notes.push("the export does not advertise multi-conn".to_string());
    }
    LiveReport {
        trace: trace_name.to_string(),
        trace_kind: "file".to_string(),
        tiers: format!("live: {target}"),
        tier_summary: format!(
            "NBD export of {}, {} connection(s){}",
            Bytes(export_bytes),
            connections,
            volume.map_or_else(String::new, |volume| format!(
                "; tierd volume {} in segments of {} over tiers {}",
                volume.name,
                Bytes(volume.segment_bytes),
                volume.tiers.join(" > ")
            ))
        ),
        runs: vec![live],
        notes,
        prefill: None,
    }
}

/// The text output: the header, the simulator's two tables, then the live
/// table (response from issue and from the due time, late issues, errors).
pub fn render_text(live: &LiveReport) -> String {
    use std::fmt::Write as _;
    use tierd_sim::tables;
    let report = live.to_sim_report();
    let mut out = String::new();
    let _ = writeln!(out, "trace: {} [{}]", live.trace, live.trace_kind);
    let _ = writeln!(out, "target: {} ({})", live.tiers, live.tier_summary);
    if let Some(first) = live.runs.first() {
        let run = &first.run;
        let _ = writeln!(
            out,
            "replay: open loop x{}, at most {} in flight, period {}, {} requests",
            match run.settings.replay {
                Replay::OpenLoop { speed } => speed,
                Replay::ClosedLoop { .. } => 0.0,
            },
            run.settings.max_outstanding_requests,
            Duration(run.settings.period_ns),
            run.requests
        );
    }
    for note in &live.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out.push('\n');
    out.push_str(tables::IOPS_TABLE_TITLE);
    out.push_str(":\n");
    out.push_str(&tables::columns(&tables::iops_rows(&report)));
    out.push('\n');
    out.push_str(tables::RESPONSE_TABLE_TITLE);
    out.push_str(":\n");
    out.push_str(&tables::columns(&tables::response_rows(&report)));
    out.push('\n');
    out.push_str("Live replay (response from issue / from the due time, ms):\n");
    let mut rows = vec![[
        "run",
        "requests",
        "reads",
        "writes",
        "MB",
        "avg",
        "p50",
        "p95",
        "p99",
        "max",
        "avg from due",
        "p99 from due",
        "late issues",
        "issue lag p99",
        "wrapped",
        "errors",
    ]
    .map(str::to_string)
    .to_vec()];
    for live in &live.runs {
        let run = &live.run;
        let ms = |us: f64| format!("{:.3}", us / 1e3);
        rows.push(vec![
            run.policy.clone(),
            run.requests.to_string(),
            run.reads.to_string(),
            run.writes.to_string(),
            format!("{:.1}", run.bytes as f64 / 1e6),
            ms(run.avg_response_us),
            ms(run.response_p50_us),
            ms(live.response_p95_us),
            ms(run.response_p99_us),
            ms(run.response_max_us),
            ms(live.avg_response_from_due_us),
            ms(live.response_from_due_p99_us),
            live.late_issues.to_string(),
            ms(live.issue_lag_p99_us),
            live.wrapped_requests.to_string(),
            live.errors.to_string(),
        ]);
    }
    out.push_str(&tables::columns(&rows));
    out
}

/// The HTML report of a live run into `directory`: the simulator's report
/// (`ReportKind::LiveReplay`), a heat map of the replayed window (as `tierd
/// sim --report` computes it, in the volume's segments, else 1 GiB), and
/// `result.json` = the JSON report. Returns the path of `index.html`.
pub fn write_html(
    directory: &Path,
    trace: &TraceSource,
    speed: f64,
    window: Window,
    period_ns: u64,
    live: &LiveReport,
) -> Result<PathBuf, LoadError> {
    use tierd_sim::report::{HeatMap, HeatMapCell, ReplayTimeReader, ReportKind, ReportOptions};
    let replay = Replay::OpenLoop { speed };
    let mut reader = ReplayTimeReader::new(trace.open()?, window, replay);
    let segment_bytes = live
        .runs
        .first()
        .map(|run| run.run.settings.segment_bytes)
        .filter(|bytes| *bytes > 0)
        .unwrap_or(1 << 30);
    let analysis = tierd_analysis::analyze(
        &mut reader,
        &tierd_analysis::AnalyzeOptions {
            segment_bytes,
            period_ns,
            segment_table_rows: 0,
            ..tierd_analysis::AnalyzeOptions::default()
        },
    )
    .map_err(|error| LoadError::Report(error.to_string()))?;
    let matrix = &analysis.matrix;
    let heat_map = HeatMap {
        svg: tierd_analysis::heatmap::render_svg(&analysis),
        segment_bytes,
        period_ns,
        segments: matrix.segments,
        periods: matrix.periods,
        cells: matrix
            .cells()
            .map(|(period, cell)| HeatMapCell {
                period,
                segment: cell.segment,
                io: u64::from(cell.io),
                writes: u64::from(cell.writes),
            })
            .collect(),
        note: format!(
            "Computed by tierd_analysis over the replayed window ({} requests, trace offsets before any wrapping); x is replay time (trace time / {}), in periods of {}, segments of {}.",
            analysis.requests,
            speed,
            Duration(period_ns),
            Bytes(segment_bytes)
        ),
    };
    let index = tierd_sim::report::write(
        directory,
        &live.to_sim_report(),
        Some(&heat_map),
        &ReportOptions {
            kind: ReportKind::LiveReplay,
            ..ReportOptions::default()
        },
    )
    .map_err(|error| LoadError::Report(error.to_string()))?;
    let mut json =
        serde_json::to_string_pretty(live).map_err(|error| LoadError::Report(error.to_string()))?;
    json.push('\n');
    let result = directory.join("result.json");
    std::fs::write(&result, json).map_err(|error| {
        LoadError::Report(format!("{}: cannot write: {error}", result.display()))
    })?;
    Ok(index)
}
