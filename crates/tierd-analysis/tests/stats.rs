mod common;

use common::*;
use tierd_analysis::stats::{compute, LbaSpan, SizeBucket, StatsOptions};
use tierd_trace::{open_trace, Format, IteratorReader, OpenOptions, Request};

#[test]
fn hand_built_trace() {
    let mut second_volume = read(30 * SECOND_NS, 0, 4096);
    second_volume.volume = 1;
    let requests = vec![
        read(0, 0, 4096),                 // block (a, 0)
        write(10 * SECOND_NS, 4095, 2),   // bytes [4095, 4097): blocks (a, 0) and (a, 1)
        read(20 * SECOND_NS, 8192, 0),    // zero length: no block, still a request
        second_volume,                    // block (b, 0): another volume, another block
        write(70 * SECOND_NS, MIB, 8192), // blocks (a, 256), (a, 257)
    ];
    let mut reader =
        IteratorReader::new(requests.into_iter(), &["a", "b"], Format::Msr, "hand-built");
    let stats = compute(&mut reader, &StatsOptions::default()).unwrap();

    assert_eq!((stats.requests, stats.reads, stats.writes), (5, 3, 2));
    assert_eq!(stats.bytes_read, 4096 + 4096);
    assert_eq!(stats.bytes_written, 2 + 8192);
    assert_eq!(stats.zero_length_requests, 1);
    // (a,0) (a,1) (b,0) (a,256) (a,257).
    assert_eq!(stats.unique_blocks_4k, 5);
    assert_eq!(stats.working_set_bytes, 5 * 4096);
    assert_eq!(
        stats.lba_span,
        Some(LbaSpan {
            min_offset_bytes: 0,
            max_end_bytes: MIB + 8192
        })
    );
    assert_eq!(stats.duration_s, 70.0);
    // 5 requests over 70 s; periods of 60 s hold 4 and 1 requests. 4 / 60
    // is below the mean (the second period is cut short after 10 s), so
    // the peak is the mean.
    assert!((stats.iops_mean.unwrap() - 5.0 / 70.0).abs() < 1e-12);
    assert!((stats.iops_peak.unwrap() - 5.0 / 70.0).abs() < 1e-12);
    assert_eq!(stats.volume_count, 2);
    assert!(stats.warnings.is_empty(), "{:?}", stats.warnings);
    assert_eq!(stats.volumes, ["a", "b"]);
    // Sizes 4096, 2, 0, 4096, 8192: buckets 0, 1, 2, 4, ..., 8192 with empty ones in between.
    assert_eq!(stats.size_histogram.len(), 15);
    assert_eq!(
        stats.size_histogram[0],
        SizeBucket {
            max_bytes: 0,
            count: 1
        }
    );
    assert_eq!(
        stats.size_histogram[1],
        SizeBucket {
            max_bytes: 1,
            count: 0
        }
    );
    assert_eq!(
        stats.size_histogram[2],
        SizeBucket {
            max_bytes: 2,
            count: 1
        }
    );
    assert_eq!(
        stats.size_histogram[13],
        SizeBucket {
            max_bytes: 4096,
            count: 2
        }
    );
    assert_eq!(
        stats.size_histogram[14],
        SizeBucket {
            max_bytes: 8192,
            count: 1
        }
    );

    let json = serde_json::to_value(&stats).unwrap();
    for key in [
        "format",
        "requests",
        "reads",
        "writes",
        "bytes_read",
        "bytes_written",
        "duration_s",
        "unique_blocks_4k",
        "working_set_bytes",
        "lba_span",
        "size_histogram",
        "iops_mean",
        "iops_peak",
        "period_s",
        "volumes",
        "skipped_lines",
        "ignored_lines",
    ] {
        assert!(json.get(key).is_some(), "missing JSON key {key}");
    }
    assert_eq!(json["lba_span"]["max_end_bytes"], MIB + 8192);
    assert_eq!(json["size_histogram"][14]["max_bytes"], 8192);
}

#[test]
fn block_only_formats_have_no_time() {
    let requests: Vec<Request> = (0..4)
        .map(|block| read(block * SECOND_NS, block * 512, 512))
        .collect();
    let mut reader = IteratorReader::new(requests.into_iter(), &["0"], Format::ArcLis, "blocks");
    let stats = compute(&mut reader, &StatsOptions::default()).unwrap();
    assert_eq!(stats.requests, 4);
    assert_eq!(stats.reads, 4);
    assert_eq!(stats.duration_s, 0.0);
    assert_eq!(stats.iops_mean, None);
    assert_eq!(stats.iops_peak, None);
    // 512-byte blocks 0..4 all lie in 4 KiB block 0.
    assert_eq!(stats.unique_blocks_4k, 1);
    let json = serde_json::to_value(&stats).unwrap();
    assert!(json["iops_mean"].is_null());
}

#[test]
fn empty_trace() {
    let stats = compute(&mut reader(Vec::new()), &StatsOptions::default()).unwrap();
    assert_eq!(stats.requests, 0);
    assert_eq!(stats.lba_span, None);
    assert!(stats.size_histogram.is_empty());
    assert_eq!(stats.iops_peak, None);
    assert_eq!(stats.mean_request_bytes, None);
}

#[test]
fn shared_msr_cut_matches_sources_md() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let path = traces.join("msr_cambridge/hm_0-cut-20k.csv");
    let mut reader = open_trace(&path, &OpenOptions::default()).unwrap();
    let stats = compute(&mut *reader, &StatsOptions::default()).unwrap();
    // SOURCES.md: 20,560 requests, reads 16,344 / writes 4,216, mean request 10,462 bytes, 799.5 s.
    assert_eq!(stats.format, "msr");
    assert_eq!(stats.requests, 20_560);
    assert_eq!(stats.reads, 16_344);
    assert_eq!(stats.writes, 4_216);
    assert_eq!(stats.mean_request_bytes.unwrap().round(), 10_462.0);
    assert!(
        (stats.duration_s - 799.5).abs() < 0.1,
        "{}",
        stats.duration_s
    );
    assert_eq!(stats.volumes, ["hm_0"]);
    assert!(stats.unique_blocks_4k > 0 && stats.unique_blocks_4k <= stats.requests * 64);
    let histogram_total: u64 = stats.size_histogram.iter().map(|bucket| bucket.count).sum();
    assert_eq!(histogram_total, stats.requests);
}
