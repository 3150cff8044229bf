//! `tierd sim --experiment smr-staging` (docs/sim.md, docs/engine/smr.md):
//! every workload runs without a cache, with per-block writeback and with
//! staging; the table and JSON say so, and `--scale` is checked.

mod common;

use common::{path_arg, stderr, stdout, tierd};

use serde_json::Value;

#[test]
fn smr_staging_prints_every_workload_under_every_setup() {
    let out = tempfile::tempdir().unwrap();
    let output = tierd(&[
        "sim",
        "--experiment",
        "smr-staging",
        "--scale",
        "0.02",
        "--json",
        "--out",
        path_arg(out.path()),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let results: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let workloads = results.as_array().unwrap();
    assert_eq!(workloads.len(), 3);
    for workload in workloads {
        let rows = workload[1].as_array().unwrap();
        let setups: Vec<&str> = rows
            .iter()
            .map(|row| row["setup"].as_str().unwrap())
            .collect();
        assert_eq!(setups, ["no cache", "staging off", "staging on"]);
        for row in rows {
            for key in ["read_slow_fraction_100ms", "read_p99_ms", "write_mean_ms"] {
                assert!(row[key].is_number(), "{key}: {row}");
            }
        }
    }
    let text = std::fs::read_to_string(out.path().join("smr-staging.txt")).unwrap();
    assert!(
        text.contains("RW→RR") && text.contains("staging on"),
        "{text}"
    );
    let bad = tierd(&["sim", "--experiment", "smr-staging", "--scale", "0"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("--scale"), "{}", stderr(&bad));
    let misplaced = tierd(&["sim", "--experiment", "reduce-calibrate", "--scale", "1"]);
    assert!(!misplaced.status.success());
    assert!(
        stderr(&misplaced).contains("smr-staging"),
        "{}",
        stderr(&misplaced)
    );
}

/// `--export-traces DIR` writes each workload as a trace that reads back as
/// the same requests the experiment replays, with a manifest saying how to
/// replay it, and runs nothing.
#[test]
fn smr_staging_exports_its_workloads_as_traces() {
    let out = tempfile::tempdir().unwrap();
    let output = tierd(&[
        "sim",
        "--experiment",
        "smr-staging",
        "--scale",
        "0.01",
        "--seed",
        "3",
        "--export-traces",
        path_arg(out.path()),
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let manifest: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("workloads.json")).unwrap())
            .unwrap();
    assert_eq!(manifest, written);
    let entries = manifest.as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rw-rr", "write-bursts", "hm_0"]);
    for entry in entries {
        assert_eq!(entry["kind"], "synthetic");
        assert!(
            entry["max_end_bytes"].as_u64().unwrap() <= entry["volume_bytes"].as_u64().unwrap()
        );
    }

    // RW→RR at scale 0.01: 1% of 10 GiB written in 1 KiB/16 KiB/256 KiB/4 MiB
    // turns, then 102 reads of 1 MiB, closed loop at queue depth 1.
    let rw_rr = &entries[0];
    assert_eq!(rw_rr["replay"]["mode"], "closed-loop");
    assert_eq!(rw_rr["replay"]["queue_depth"], 1);
    assert_eq!(rw_rr["reads"], 102);
    assert_eq!(rw_rr["read_bytes"], 102 << 20);
    let written_bytes = rw_rr["write_bytes"].as_u64().unwrap();
    let asked = (10u64 << 30) / 100;
    assert!(
        (asked..asked + (4 << 20)).contains(&written_bytes),
        "{written_bytes}"
    );
    let file = out.path().join(rw_rr["file"].as_str().unwrap());
    let stats = tierd(&["trace", "stats", path_arg(&file), "--json"]);
    assert!(stats.status.success(), "{}", stderr(&stats));
    let stats: Value = serde_json::from_str(&stdout(&stats)).unwrap();
    assert_eq!(stats["requests"], rw_rr["requests"], "{stats}");
    assert_eq!(stats["reads"], rw_rr["reads"], "{stats}");

    // The traces are the experiment's own: the same seed gives the same
    // files, another seed others.
    let again = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    for (dir, seed) in [(&again, "3"), (&other, "4")] {
        let output = tierd(&[
            "sim",
            "--experiment",
            "smr-staging",
            "--scale",
            "0.01",
            "--seed",
            seed,
            "--export-traces",
            path_arg(dir.path()),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(
            stdout(&output).contains("workloads.json"),
            "{}",
            stdout(&output)
        );
    }
    let bytes = |dir: &std::path::Path| std::fs::read(dir.join("write-bursts.tierd")).unwrap();
    assert_eq!(bytes(out.path()), bytes(again.path()));
    assert_ne!(bytes(out.path()), bytes(other.path()));

    let misplaced = tierd(&[
        "sim",
        "--experiment",
        "reduce-calibrate",
        "--export-traces",
        path_arg(out.path()),
    ]);
    assert!(!misplaced.status.success());
    assert!(
        stderr(&misplaced).contains("--export-traces"),
        "{}",
        stderr(&misplaced)
    );
}
