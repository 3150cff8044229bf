//! Human tables in the shapes of the papers' tables, each labelled with the
//! table it mirrors.

use std::fmt::Write;

use tierd_common::units::Bytes;

use super::Analysis;

const GIB: f64 = (1u64 << 30) as f64;

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |value| format!("{:.1}", value * 100.0))
}

fn number(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |value| format!("{value:.decimals$}"))
}

fn gib(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |value| format!("{:.1}", value / GIB))
}

/// The analysis as text tables: a header, OTF-AST Table 3 and Table 6 (with
/// the §3 spike durations), ATSMF Table 1 and Table 2, the busiest segments and
/// any warnings.
pub fn render_text(analysis: &Analysis) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; the results are ignored.
    let settings = &analysis.settings;
    let minutes = |seconds: Option<f64>| number(seconds.map(|seconds| seconds / 60.0), 1);
    let _ = writeln!(
        out,
        "Workload analysis ({} format): {} requests, {} segment IO, volume {} = {} segments of {}, \
         {} periods of {} s",
        analysis.format,
        analysis.requests,
        analysis.io,
        Bytes(analysis.volume_bytes),
        analysis.segments,
        Bytes(settings.segment_bytes),
        analysis.periods,
        settings.period_s
    );
    let _ = writeln!(
        out,
        "write ratio {}%, peak {} iops, mean {} iops (per period)",
        percent(analysis.write_ratio),
        number(analysis.peak_iops, 1),
        number(analysis.mean_iops, 1)
    );

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "OTF-AST Table 3: load (IO) concentration, share of IO in the busiest segments"
    );
    let _ = writeln!(
        out,
        "  {:<22} {:>10} {:>12}",
        "share of the volume", "segments", "share of IO"
    );
    let _ = writeln!(
        out,
        "  {:<22} {:>10} {:>11}%",
        "1%",
        analysis.top1_segments,
        percent(analysis.top1_share)
    );
    let _ = writeln!(
        out,
        "  {:<22} {:>10} {:>11}%",
        "10%",
        analysis.top10_segments,
        percent(analysis.top10_share)
    );

    let spikes = &analysis.spikes;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "OTF-AST §3: spikes (a segment with >= {} iops in a period; a spike = consecutive such periods)",
        settings.spike_iops
    );
    let _ = writeln!(
        out,
        "  {:>14} {:>12} {:>8} {:>18} {:>17} {:>20}",
        "spike segments",
        "spike cells",
        "spikes",
        "mean duration min",
        "max duration min",
        "mean time to peak min"
    );
    let _ = writeln!(
        out,
        "  {:>14} {:>12} {:>8} {:>18} {:>17} {:>20}",
        spikes.spike_segments,
        spikes.spike_cells,
        spikes.count,
        minutes(spikes.mean_duration_s),
        minutes(spikes.max_duration_s),
        minutes(spikes.mean_time_to_peak_s)
    );

    let regions = &spikes.regions;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "OTF-AST Table 6: spike region size (GB, here GiB; chunks of {}, {} regions over all periods)",
        Bytes(settings.region_granularity_bytes),
        regions.count
    );
    let _ = writeln!(
        out,
        "  {:<8} {:>8}",
        "minimum",
        gib(regions.min_bytes.map(|bytes| bytes as f64))
    );
    let _ = writeln!(out, "  {:<8} {:>8}", "mean", gib(regions.mean_bytes));
    let _ = writeln!(
        out,
        "  {:<8} {:>8}",
        "maximum",
        gib(regions.max_bytes.map(|bytes| bytes as f64))
    );

    let concentrations = &analysis.concentrations;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "ATSMF Table 1: IO concentration analysis (N = {}, M = {}%, {} concentrations, {} still alive at the end)",
        settings.top_n, settings.share_percent, concentrations.count, concentrations.ongoing_at_end
    );
    let _ = writeln!(
        out,
        "  {:>22} {:>22} {:>14} {:>24}",
        "mean duration (min)", "at arbitrary LBA (%)", "write (%)", "FIFO caching hit (%)"
    );
    let _ = writeln!(
        out,
        "  {:>22} {:>22} {:>14} {:>24}",
        minutes(concentrations.mean_duration_s),
        percent(concentrations.arbitrary_share),
        percent(analysis.write_ratio),
        format!(
            "{} ({})",
            percent(analysis.fifo_hit_ratio),
            Bytes(analysis.fifo_cache_bytes)
        )
    );
    let _ = writeln!(
        out,
        "  static {}, moving {}; IO in concentrations {}% (writes {}%); mean {} segments, {}% of the LUN; \
         peak {}",
        concentrations.static_count,
        concentrations.moving_count,
        percent(concentrations.io_share),
        percent(concentrations.write_ratio),
        number(concentrations.mean_segments, 2),
        percent(concentrations.mean_lun_share),
        Bytes(concentrations.peak_bytes)
    );

    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "ATSMF Table 2: prediction table for the duration of IO concentrations (1 period = {} s)",
        settings.period_s
    );
    let _ = writeln!(
        out,
        "  {:>11} {:>9} {:>22} {:>20} {:>20}",
        "periods (A)",
        "samples",
        "average duration (B)",
        "rest (B-A) periods",
        "rest (B-A) seconds"
    );
    if analysis.prediction_table.is_empty() {
        let _ = writeln!(out, "  (no concentration ended before the trace did)");
    }
    for row in &analysis.prediction_table {
        let _ = writeln!(
            out,
            "  {:>11} {:>9} {:>22.2} {:>20.2} {:>20.2}",
            row.periods_lasted, row.samples, row.mean_total_periods, row.rest_periods, row.rest_s
        );
    }

    if let Some(rows) = &analysis.segment_table {
        let _ = writeln!(out);
        let _ = writeln!(out, "Busiest segments");
        let _ = writeln!(
            out,
            "  {:>9} {:>12} {:>12} {:>9} {:>9} {:>15} {:>14}",
            "segment", "offset GiB", "IO", "IO %", "write %", "active periods", "spike periods"
        );
        for row in rows {
            let write_share = (row.io > 0).then(|| row.writes as f64 / row.io as f64);
            let _ = writeln!(
                out,
                "  {:>9} {:>12.1} {:>12} {:>9} {:>9} {:>15} {:>14}",
                row.segment,
                row.offset_bytes as f64 / GIB,
                row.io,
                percent(Some(row.share)),
                percent(write_share),
                row.active_periods,
                row.spike_periods
            );
        }
    }

    for warning in &analysis.warnings {
        let _ = writeln!(out);
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}
