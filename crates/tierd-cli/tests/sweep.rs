//! `tierd sweep`: a spec's grid on a real trace, rows equal to `tierd sim
//! --json`'s, resumable after a cut (the same bytes), a failing cell
//! reported with the reader's message and left for the next run, and the
//! report page. Trace: MSR Cambridge hm_0, the 1,000-request sample (real,
//! MSR CSV; ../shared/traces/SOURCES.md).

mod common;

use common::{path_arg, stderr, tierd, write_file};

fn split(line: &str) -> Vec<&str> {
    line.split(',').collect()
}

#[test]
fn a_sweep_equals_tierd_sim_resumes_to_the_same_bytes_and_reports_failures() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let trace = traces.join("msr_cambridge/msr-cambridge1-sample.csv");
    let dir = tempfile::tempdir().unwrap();
    let spec = write_file(
        dir.path(),
        "spec.toml",
        &format!(
            "traces = [{:?}]\ntiers = [\"ssd-mem\"]\npolicies = [\"none\", \"lru\", \"arc\"]\nfast_bytes = [\"10%\", \"50%\"]\n",
            trace.display().to_string()
        ),
    );
    let out = dir.path().join("sweep.csv");
    let report = dir.path().join("report");
    let run = |out: &std::path::Path| {
        tierd(&[
            "sweep",
            path_arg(&spec),
            "--out",
            path_arg(out),
            "--jobs",
            "2",
            "--report",
            path_arg(&report),
        ])
    };
    let first = run(&out);
    assert!(first.status.success(), "{}", stderr(&first));
    let full = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    assert_eq!(lines.len(), 1 + 6, "{full}");
    let header = split(lines[0]);
    let column = |name: &str| header.iter().position(|column| *column == name).unwrap();
    let ids: Vec<&str> = lines[1..].iter().map(|line| split(line)[0]).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "rows are sorted by cell id");

    // Every row's mean response is tierd sim --json's for the same run.
    let sim = tierd(&[
        "sim",
        "--trace",
        path_arg(&trace),
        "--tiers",
        "ssd-mem",
        "--policy",
        "none,lru,arc",
        "--fast-bytes",
        "10%,50%",
        "--json",
    ]);
    assert!(sim.status.success(), "{}", stderr(&sim));
    let sim: serde_json::Value = serde_json::from_slice(&sim.stdout).unwrap();
    for run in sim["runs"].as_array().unwrap() {
        let row = lines[1..]
            .iter()
            .map(|line| split(line))
            .find(|row| {
                row[column("policy")] == run["policy"].as_str().unwrap()
                    && row[column("fast_bytes")].parse::<u64>().ok() == run["fast_bytes"].as_u64()
            })
            .expect("a row per run");
        assert_eq!(
            row[column("avg_response_us")],
            run["avg_response_us"].to_string()
        );
        assert_eq!(row[column("requests")], "1000");
    }
    let page = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(page.contains("Wins per policy") && page.contains("curves-0.svg"));

    // Cut after two rows and half a line: the rerun runs the other four
    // cells and writes the same bytes.
    let cut = format!(
        "{}\n{}\n{}\n{}",
        lines[0],
        lines[1],
        lines[2],
        &lines[3][..25]
    );
    std::fs::write(&out, cut).unwrap();
    let again = run(&out);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("6 cell(s): 4 run, 2 done before, 0 failed"),
        "{}",
        stderr(&again)
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), full);

    // A trace with a bad line: its cells fail with the reader's message,
    // the exit status says so, the good rows are written.
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut bad_lines: Vec<&str> = text.lines().collect();
    bad_lines[2] = "128166385295514663,hm,0,Write,x,2048,2833";
    let bad = write_file(dir.path(), "bad.csv", &(bad_lines.join("\n") + "\n"));
    let spec = write_file(
        dir.path(),
        "spec.toml",
        &format!(
            "traces = [{:?}, {:?}]\ntiers = [\"ssd-mem\"]\npolicies = [\"lru\"]\n",
            trace.display().to_string(),
            bad.display().to_string()
        ),
    );
    let mixed = dir.path().join("mixed.csv");
    let failed = tierd(&["sweep", path_arg(&spec), "--out", path_arg(&mixed)]);
    assert!(!failed.status.success());
    let message = stderr(&failed);
    assert!(
        message.contains(&format!("{}:3: bad msr line", bad.display()))
            && message.contains("1 cell(s) failed"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(&mixed).unwrap().lines().count(), 2);
}
