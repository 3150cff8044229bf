//! Golden counts: `tierd trace stats --json` on every real trace in
//! `../shared/traces/` must give the counts `SOURCES.md` publishes for it.
//! Each expectation below cites the SOURCES.md line it comes from.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

struct Golden {
    file: &'static str,
    extra_args: &'static [&'static str],
    format: &'static str,
    requests: u64,
    reads: Option<u64>,
    writes: Option<u64>,
    /// Time span in seconds as SOURCES.md rounds it (to 0.1 s, or 0.001 s for tpcc).
    duration_s: Option<f64>,
    duration_tolerance_s: f64,
    unique_blocks_4k: Option<u64>,
    bytes_read: Option<u64>,
}

const GOLDEN: &[Golden] = &[
    // "hm_0-cut-20k.csv | MSR CSV | 20,560 | 799.5 s"; "Reads 16,344 / writes 4,216"
    Golden {
        file: "msr_cambridge/hm_0-cut-20k.csv",
        extra_args: &[],
        format: "msr",
        requests: 20_560,
        reads: Some(16_344),
        writes: Some(4_216),
        duration_s: Some(799.5),
        duration_tolerance_s: 0.05,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "msr-cambridge1-sample.csv | 1,000 | 127.2 s"; "Reads 508 / writes 492"
    Golden {
        file: "msr_cambridge/msr-cambridge1-sample.csv",
        extra_args: &[],
        format: "msr",
        requests: 1_000,
        reads: Some(508),
        writes: Some(492),
        duration_s: Some(127.2),
        duration_tolerance_s: 0.05,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "trace.csv | 113,872 | 7,200.1 s"; "Reads (28) 46,974 / writes (2a) 66,898"
    Golden {
        file: "cloudphysics/trace.csv",
        extra_args: &[],
        format: "cloudphysics-csv",
        requests: 113_872,
        reads: Some(46_974),
        writes: Some(66_898),
        duration_s: Some(7_200.1),
        duration_tolerance_s: 0.05,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "cloudPhysicsIO.vscsi | binary vscsi v1 | 113,872 | 7,200.1 s"; same requests as trace.csv
    Golden {
        file: "cloudphysics/cloudPhysicsIO.vscsi",
        extra_args: &[],
        format: "vscsi",
        requests: 113_872,
        reads: Some(46_974),
        writes: Some(66_898),
        duration_s: Some(7_200.1),
        duration_tolerance_s: 0.05,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "w106.trace.xz | 5,292,456 block references (275,171 distinct) | no timestamps"
    Golden {
        file: "cloudphysics/w106.trace.xz",
        extra_args: &["--format", "lirs-blocks"],
        format: "lirs-blocks",
        requests: 5_292_456,
        reads: Some(5_292_456),
        writes: Some(0),
        duration_s: Some(0.0),
        duration_tolerance_s: 0.0,
        unique_blocks_4k: Some(275_171),
        bytes_read: None,
    },
    // "web1.trace | flashsim | 50,000 | 128.7 s"; "web1 has reads 49,990 / writes 10"
    Golden {
        file: "umass_spc/web1.trace",
        extra_args: &[],
        format: "flashsim",
        requests: 50_000,
        reads: Some(49_990),
        writes: Some(10),
        duration_s: Some(128.7),
        duration_tolerance_s: 0.05,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "example.ascii | DiskSim ASCII | 10,000 | 259.6 s"; "Reads 4,077 / writes 5,923"
    Golden {
        file: "umass_spc/example.ascii",
        extra_args: &[],
        format: "disksim",
        requests: 10_000,
        reads: Some(4_077),
        writes: Some(5_923),
        duration_s: Some(259.6),
        duration_tolerance_s: 0.05,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "fin1.trace | flashsim | 50,000 | 853.4 s"; "fin1 has reads 29,199 / writes 20,801"
    Golden {
        file: "umass_spc/fin1.trace",
        extra_args: &[],
        format: "flashsim",
        requests: 50_000,
        reads: Some(29_199),
        writes: Some(20_801),
        duration_s: Some(853.4),
        duration_tolerance_s: 0.05,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "tpcc-small.trace | DiskSim ASCII | 6,999 | 0.136 s"; "Reads 4,381 / writes 2,618"
    Golden {
        file: "tpcc/tpcc-small.trace",
        extra_args: &[],
        format: "disksim",
        requests: 6_999,
        reads: Some(4_381),
        writes: Some(2_618),
        duration_s: Some(0.136),
        duration_tolerance_s: 0.0005,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "OLTP.lis.zst | 914,145 | no timestamps"; ARC traces are reads only
    Golden {
        file: "arc_ibm/OLTP.lis.zst",
        extra_args: &[],
        format: "arc-lis",
        requests: 914_145,
        reads: Some(914_145),
        writes: Some(0),
        duration_s: Some(0.0),
        duration_tolerance_s: 0.0,
        unique_blocks_4k: None,
        bytes_read: None,
    },
    // "P3.lis.zst | 238,578 (3,912,296 blocks)"; 512-byte blocks, reads only
    Golden {
        file: "arc_ibm/P3.lis.zst",
        extra_args: &[],
        format: "arc-lis",
        requests: 238_578,
        reads: Some(238_578),
        writes: Some(0),
        duration_s: Some(0.0),
        duration_tolerance_s: 0.0,
        unique_blocks_4k: None,
        bytes_read: Some(3_912_296 * 512),
    },
    // "blktrace.txt | 50,000 event lines, 15,524 queued (Q) requests | 9.38 s"
    Golden {
        file: "blktrace_misc/blktrace.txt",
        extra_args: &[],
        format: "blkparse",
        requests: 15_524,
        reads: None,
        writes: None,
        duration_s: Some(9.38),
        duration_tolerance_s: 0.01,
        unique_blocks_4k: None,
        bytes_read: None,
    },
];

fn stats_json(path: &Path, extra_args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(["trace", "stats", "--json"])
        .arg(path)
        .args(extra_args)
        .output()
        .expect("run tierd");
    assert!(
        output.status.success(),
        "tierd trace stats {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stats --json prints JSON")
}

fn number(value: &Value, key: &str, file: &str) -> f64 {
    value[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{file}: key {key} missing or not a number in {value}"))
}

#[test]
fn every_shared_trace_has_the_published_counts() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let mut failures = Vec::new();
    for golden in GOLDEN {
        let value = stats_json(&traces.join(golden.file), golden.extra_args);
        let mut check = |key: &str, expected: f64, tolerance: f64| {
            let actual = number(&value, key, golden.file);
            if (actual - expected).abs() > tolerance {
                failures.push(format!(
                    "{}: {key} = {actual}, SOURCES.md says {expected}",
                    golden.file
                ));
            }
        };
        check("requests", golden.requests as f64, 0.0);
        if let Some(reads) = golden.reads {
            check("reads", reads as f64, 0.0);
        }
        if let Some(writes) = golden.writes {
            check("writes", writes as f64, 0.0);
        }
        if let Some(duration_s) = golden.duration_s {
            check("duration_s", duration_s, golden.duration_tolerance_s);
        }
        if let Some(unique) = golden.unique_blocks_4k {
            check("unique_blocks_4k", unique as f64, 0.0);
        }
        if let Some(bytes_read) = golden.bytes_read {
            check("bytes_read", bytes_read as f64, 0.0);
        }
        if value["format"] != golden.format {
            failures.push(format!(
                "{}: format {} (expected {})",
                golden.file, value["format"], golden.format
            ));
        }
        if !value["trace"].as_str().unwrap_or("").ends_with(golden.file) {
            failures.push(format!(
                "{}: report does not name its trace: {}",
                golden.file, value["trace"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "golden mismatches:\n{}",
        failures.join("\n")
    );
}

#[test]
fn golden_table_covers_every_file_in_the_shared_folder() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let mut missing = Vec::new();
    for directory in std::fs::read_dir(&traces).unwrap() {
        let directory = directory.unwrap().path();
        if !directory.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&directory).unwrap() {
            let file = file.unwrap().path();
            let relative = file
                .strip_prefix(&traces)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if !GOLDEN.iter().any(|golden| golden.file == relative) {
                missing.push(relative);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "shared traces without a golden row: {missing:?}"
    );
}
