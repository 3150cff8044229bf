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
