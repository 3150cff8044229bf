mod common;

use common::*;
use tierd_analysis::analyze::{analyze, render_text, AnalyzeOptions};
use tierd_trace::{open_trace, Format, IteratorReader, Op, OpenOptions};

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() < 1e-9
}

#[test]
fn top_shares_of_a_100_segment_volume() {
    // All in period 0. Segment 0: 50 IO; segments 1..=9 and 50: 5 IO each. All IO = 100.
    let mut requests = burst(0, 50, Op::Read, 0, 4096);
    for segment in (1..=9).chain([50]) {
        requests.extend(burst(0, 5, Op::Read, segment * GIB, 4096));
    }
    let options = AnalyzeOptions {
        volume_bytes: Some(100 * GIB),
        ..AnalyzeOptions::default()
    };
    let analysis = analyze(&mut reader(requests), &options).unwrap();
    assert_eq!(analysis.segments, 100);
    assert_eq!(analysis.io, 100);
    // k(1%) = 1: segment 0 → 50/100.
    assert_eq!(analysis.top1_segments, 1);
    assert!(close(analysis.top1_share.unwrap(), 0.50));
    // k(10%) = 10: segment 0 + nine of the ten 5-IO segments → 95/100.
    assert_eq!(analysis.top10_segments, 10);
    assert!(close(analysis.top10_share.unwrap(), 0.95));
    let table = analysis.segment_table.as_ref().unwrap();
    assert_eq!(table[0].segment, 0);
    assert_eq!(table[0].io, 50);
    assert_eq!(table.len(), 11);
}

#[test]
fn default_volume_and_boundary_crossing() {
    // One request crossing the 1 GiB boundary counts one IO in each of segments 0 and 1;
    // one request ends at 50 GiB + 4096: the default volume is 51 segments.
    let requests = vec![read(0, GIB - 512, 1024), read(1, 50 * GIB, 4096)];
    let analysis = analyze(&mut reader(requests), &AnalyzeOptions::default()).unwrap();
    assert_eq!(analysis.requests, 2);
    assert_eq!(analysis.io, 3);
    assert_eq!(analysis.segments, 51);
    assert_eq!(analysis.volume_bytes, 51 * GIB);
    assert_eq!(analysis.matrix.io(0, 0), 1);
    assert_eq!(analysis.matrix.io(1, 0), 1);
    assert_eq!(analysis.matrix.io(50, 0), 1);
    assert_eq!(analysis.matrix.io(2, 0), 0);
    // k(1%) = round(0.51) = 1, k(10%) = round(5.1) = 5: all three IO.
    assert_eq!(analysis.top10_segments, 5);
    assert!(close(analysis.top10_share.unwrap(), 1.0));
    assert!(analysis.warnings.is_empty(), "{:?}", analysis.warnings);
}

#[test]
fn spike_runs_and_regions() {
    // 60 s periods, 1 iops threshold = 60 IO per period.
    // Segment 2 (2048..3072 MiB): periods 0,1,2 spike (60, 120, 60 IO; peak in period 1),
    // period 3 has 59 IO (no spike), period 4 spikes again (120 IO).
    // Segment 5: 30 IO in period 1, never a spike.
    let mut requests = Vec::new();
    // Period 0: 60 requests of 300 MiB at 2100 MiB → chunks 21, 22, 23 (100 MiB chunks) get 60 each.
    requests.extend(burst(0, 60, Op::Read, 2100 * MIB, 300 * MIB));
    requests.extend(burst(1, 120, Op::Read, 2100 * MIB, 4096));
    requests.extend(burst(1, 30, Op::Read, 5 * GIB, 4096));
    requests.extend(burst(2, 60, Op::Read, 2100 * MIB, 4096));
    requests.extend(burst(3, 59, Op::Read, 2100 * MIB, 4096));
    // Period 4: chunks 21 and 23 spike, chunk 22 does not: two regions.
    requests.extend(burst(4, 60, Op::Read, 2100 * MIB, 4096));
    requests.extend(burst(4, 60, Op::Read, 2300 * MIB, 4096));
    let analysis = analyze(&mut reader(requests), &AnalyzeOptions::default()).unwrap();
    let spikes = &analysis.spikes;
    assert_eq!(analysis.periods, 5);
    assert_eq!(spikes.spike_segments, 1);
    assert_eq!(spikes.spike_cells, 4);
    // Spikes of 3 and 1 periods: mean 2 periods = 120 s, max 180 s; time to peak (1 + 0) / 2 periods = 30 s.
    assert_eq!(spikes.count, 2);
    assert!(close(spikes.mean_duration_s.unwrap(), 120.0));
    assert_eq!(spikes.max_duration_periods, Some(3));
    assert!(close(spikes.max_duration_s.unwrap(), 180.0));
    assert!(close(spikes.mean_time_to_peak_s.unwrap(), 30.0));
    // Regions: period 0 one of 3 chunks (300 MiB); periods 1, 2 one chunk each; period 4 two chunks.
    let regions = &spikes.regions;
    assert_eq!(regions.count, 5);
    assert_eq!(regions.min_bytes, Some(100 * MIB));
    assert_eq!(regions.max_bytes, Some(300 * MIB));
    assert!(close(regions.mean_bytes.unwrap(), (700 * MIB) as f64 / 5.0));
    // The segment table knows the spike periods.
    let row = analysis
        .segment_table
        .as_ref()
        .unwrap()
        .iter()
        .find(|row| row.segment == 2)
        .unwrap();
    assert_eq!(row.spike_periods, 4);
    assert_eq!(row.active_periods, 5);
    // Peak: period 1 has 120 + 30 requests → 2.5 iops; mean 60+150+60+59+120 = 449 requests / 300 s.
    assert!(close(analysis.peak_iops.unwrap(), 2.5));
    assert!(close(analysis.mean_iops.unwrap(), 449.0 / 300.0));
}

/// A static concentration at segment 10 (periods 0-3), a moving one 40 → 41 → 42 (periods 0-2,
/// writes), background of 1 IO at segment 90, and a last one at segment 41 in period 4.
fn concentration_trace() -> Vec<tierd_trace::Request> {
    let mut requests = Vec::new();
    for period in 0..4 {
        requests.extend(burst(period, 100, Op::Read, 10 * GIB, 4096));
        requests.extend(burst(period, 1, Op::Read, 90 * GIB, 4096));
    }
    for period in 0..3 {
        requests.extend(burst(period, 80, Op::Write, (40 + period) * GIB, 4096));
    }
    requests.extend(burst(4, 10, Op::Read, 41 * GIB, 4096));
    requests
}

fn concentration_options() -> AnalyzeOptions {
    AnalyzeOptions {
        volume_bytes: Some(100 * GIB),
        top_n: 3,
        share_percent: 60.0,
        ..AnalyzeOptions::default()
    }
}

#[test]
fn one_static_and_one_moving_concentration() {
    let analysis = analyze(&mut reader(concentration_trace()), &concentration_options()).unwrap();
    // Periods 0-2: IO 100 + 80 + 1 = 181; kept segments 10, 4x, 90; groups [10]=100, [4x]=80, [90]=1.
    // 100 < 60% of 181 = 108.6, 180 ≥ 108.6: [10] and [4x] are taken, [90] is not.
    // Period 3: [10]=100 of 101. Period 4: [41]=10 of 10; 41 belonged to the moving one → not arbitrary.
    let concentrations = &analysis.concentrations;
    let list: Vec<_> = concentrations
        .list
        .iter()
        .map(|c| {
            (
                c.start_period,
                c.periods,
                c.first_segment,
                c.last_segment,
                c.moving,
                c.arbitrary,
                c.ongoing,
            )
        })
        .collect();
    assert_eq!(
        list,
        [
            (0, 4, 10, 10, false, true, false),
            (0, 3, 40, 42, true, true, false),
            (4, 1, 41, 41, false, false, true),
        ]
    );
    assert_eq!(concentrations.list[1].segments_touched, 3);
    assert_eq!(concentrations.list[1].io, 240);
    assert_eq!(concentrations.list[1].writes, 240);
    assert_eq!(concentrations.count, 3);
    assert_eq!(concentrations.ongoing_at_end, 1);
    assert_eq!(
        (concentrations.static_count, concentrations.moving_count),
        (2, 1)
    );
    // Mean duration (4 + 3 + 1) / 3 periods = 160 s.
    assert!(close(concentrations.mean_duration_s.unwrap(), 160.0));
    assert!(close(concentrations.arbitrary_share.unwrap(), 2.0 / 3.0));
    // IO in concentrations 400 + 240 + 10 = 650 of 3 × 181 + 101 + 10 = 654; writes 240.
    assert_eq!(analysis.io, 654);
    assert!(close(concentrations.io_share.unwrap(), 650.0 / 654.0));
    assert!(close(concentrations.write_ratio.unwrap(), 240.0 / 650.0));
    assert!(close(analysis.write_ratio.unwrap(), 240.0 / 654.0));
    assert!(close(concentrations.mean_segments.unwrap(), 1.0));
    // Footprints 2, 2, 2, 1, 1 segments over 5 periods of a 100-segment LUN.
    assert!(close(concentrations.mean_lun_share.unwrap(), 8.0 / 500.0));
    assert_eq!(concentrations.peak_bytes, 2 * GIB);

    // Prediction table from the ended durations 4 and 3 (the ongoing one is censored):
    // A=1..3: B = 3.5; A=4: B = 4; A=5: none → omitted.
    let rows: Vec<_> = analysis
        .prediction_table
        .iter()
        .map(|row| {
            (
                row.periods_lasted,
                row.samples,
                row.mean_total_periods,
                row.rest_periods,
                row.rest_s,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (1, 2, 3.5, 2.5, 150.0),
            (2, 2, 3.5, 1.5, 90.0),
            (3, 2, 3.5, 0.5, 30.0),
            (4, 1, 4.0, 0.0, 0.0),
        ]
    );

    // JSON keys the CLI and the synth calibration rely on.
    let json = serde_json::to_value(&analysis).unwrap();
    for key in [
        "top1_share",
        "top10_share",
        "concentrations",
        "prediction_table",
        "fifo_hit_ratio",
        "spikes",
        "peak_iops",
        "mean_iops",
        "segments",
        "periods",
        "volume_bytes",
        "write_ratio",
        "warnings",
        "segment_table",
    ] {
        assert!(json.get(key).is_some(), "missing JSON key {key}");
    }
    assert!(json.get("matrix").is_none());
    for key in [
        "count",
        "mean_duration_periods",
        "mean_duration_s",
        "static_count",
        "moving_count",
        "arbitrary_share",
        "write_ratio",
        "mean_segments",
        "io_share",
        "list",
    ] {
        assert!(
            json["concentrations"].get(key).is_some(),
            "missing concentrations.{key}"
        );
    }
    assert_eq!(json["concentrations"]["list"][1]["moving"], true);
    assert_eq!(json["prediction_table"][0]["rest_s"], 150.0);
    assert!(json["spikes"]["regions"].get("mean_bytes").is_some());

    let text = render_text(&analysis);
    for label in [
        "OTF-AST Table 3",
        "OTF-AST Table 6",
        "ATSMF Table 1",
        "ATSMF Table 2",
    ] {
        assert!(text.contains(label), "text lacks {label}:\n{text}");
    }
    assert_eq!(text, analysis.to_string());
}

#[test]
fn require_share_drops_spread_periods() {
    // 10 segments with 10 IO each: top 3 hold 30% < 60%.
    let mut requests = Vec::new();
    for segment in 0..10 {
        requests.extend(burst(0, 10, Op::Read, segment * 2 * GIB, 4096));
    }
    let loose = analyze(&mut reader(requests.clone()), &concentration_options()).unwrap();
    // Segments 0, 2, 4 (ties → lowest index) are not adjacent: three groups, all taken.
    assert_eq!(loose.concentrations.count, 3);
    let strict_options = AnalyzeOptions {
        require_share: true,
        ..concentration_options()
    };
    let strict = analyze(&mut reader(requests), &strict_options).unwrap();
    assert_eq!(strict.concentrations.count, 0);
    assert_eq!(strict.concentrations.io_share, Some(0.0));
}

#[test]
fn fifo_hit_ratio_on_a_known_sequence() {
    // 2-page FIFO. Pages per request and the cache after it:
    // r1 [0,8192): 0 miss, 1 miss → [0,1]
    // r2 [4096,8192): 1 hit → [0,1]
    // r3 [8192,12288): 2 miss, evicts 0 → [1,2]
    // r4 write [0,4096): 0 miss (write-allocate), evicts 1 → [2,0]
    // r5 [512,1024): 0 hit
    // r6 [4096,4097): 1 miss, evicts 2 → [0,1]
    // r7 [8191,8193): 1 hit, 2 miss, evicts 0 → [1,2]
    // r8 zero length: no access.
    // 9 accesses, 3 hits.
    let requests = vec![
        read(0, 0, 8192),
        read(1, 4096, 4096),
        read(2, 8192, 4096),
        write(3, 0, 4096),
        read(4, 512, 512),
        read(5, 4096, 1),
        read(6, 8191, 2),
        read(7, 100, 0),
    ];
    let options = AnalyzeOptions {
        cache_bytes: Some(8192),
        ..AnalyzeOptions::default()
    };
    let analysis = analyze(&mut reader(requests), &options).unwrap();
    assert_eq!(analysis.fifo_cache_bytes, 8192);
    assert_eq!(analysis.fifo_accesses, 9);
    assert_eq!(analysis.fifo_hits, 3);
    assert!(close(analysis.fifo_hit_ratio.unwrap(), 3.0 / 9.0));
    // The default cache is top_n × segment_bytes.
    let default = analyze(
        &mut reader(vec![read(0, 0, 4096)]),
        &AnalyzeOptions::default(),
    )
    .unwrap();
    assert_eq!(default.fifo_cache_bytes, 30 * GIB);
}

#[test]
fn several_volumes_and_unsorted_times_warn() {
    let mut other = read(0, 0, 4096);
    other.volume = 1;
    // The third request is earlier than the second: counted in period 1 with a warning.
    let requests = vec![
        read(0, 0, 4096),
        other,
        read(90 * SECOND_NS, 0, 4096),
        read(30 * SECOND_NS, 0, 4096),
    ];
    let mut reader = IteratorReader::new(requests.into_iter(), &["a", "b"], Format::Msr, "mixed");
    let analysis = analyze(&mut reader, &AnalyzeOptions::default()).unwrap();
    assert_eq!(analysis.warnings.len(), 2, "{:?}", analysis.warnings);
    assert!(analysis.warnings[0].contains("several volumes (a, b)"));
    assert!(analysis.warnings[1].contains("1 requests were earlier"));
    assert_eq!(analysis.matrix.io(0, 1), 2);
    assert_eq!(analysis.periods, 2);
}

#[test]
fn empty_trace_and_bad_settings() {
    let analysis = analyze(&mut reader(Vec::new()), &AnalyzeOptions::default()).unwrap();
    assert_eq!(
        (analysis.requests, analysis.segments, analysis.periods),
        (0, 0, 0)
    );
    assert_eq!(analysis.top1_share, None);
    assert_eq!(analysis.fifo_hit_ratio, None);
    assert!(analysis.prediction_table.is_empty());
    // Zero sizes cannot crash the analysis; validate() explains them.
    let zero = AnalyzeOptions {
        segment_bytes: 0,
        period_ns: 0,
        region_granularity_bytes: 0,
        top_n: 0,
        ..AnalyzeOptions::default()
    };
    assert!(zero.validate().unwrap_err().contains("segment size"));
    let analysis = analyze(&mut reader(vec![read(5, 4096, 4096)]), &zero).unwrap();
    assert_eq!(analysis.requests, 1);
    assert!(AnalyzeOptions::default().validate().is_ok());
}

#[test]
fn block_only_trace_is_one_period() {
    let requests: Vec<_> = (0..5)
        .map(|block| read(block * 1000 * SECOND_NS, block * 4096, 4096))
        .collect();
    let mut reader =
        IteratorReader::new(requests.into_iter(), &["0"], Format::LirsBlocks, "blocks");
    let analysis = analyze(&mut reader, &AnalyzeOptions::default()).unwrap();
    assert_eq!(analysis.periods, 1);
    assert_eq!(analysis.peak_iops, None);
    assert_eq!(analysis.mean_iops, None);
    assert!(analysis.warnings[0].contains("no times"));
}

#[test]
fn shared_msr_cut() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let path = traces.join("msr_cambridge/hm_0-cut-20k.csv");
    let mut reader = open_trace(&path, &OpenOptions::default()).unwrap();
    let analysis = analyze(&mut *reader, &AnalyzeOptions::default()).unwrap();
    assert_eq!(analysis.requests, 20_560);
    // 799.5 s from the first request: periods 0..=13.
    assert_eq!(analysis.periods, 14);
    assert!(analysis.io >= analysis.requests);
    assert!(close(analysis.write_ratio.unwrap(), 4_216.0 / 20_560.0));
    let (top1, top10) = (analysis.top1_share.unwrap(), analysis.top10_share.unwrap());
    assert!(0.0 < top1 && top1 <= top10 && top10 <= 1.0);
    let cells: u64 = analysis
        .matrix
        .cells()
        .map(|(_, cell)| u64::from(cell.io))
        .sum();
    assert_eq!(cells, analysis.io);
    assert!(analysis.concentrations.count > 0);
    assert!(analysis.warnings.is_empty(), "{:?}", analysis.warnings);
}
