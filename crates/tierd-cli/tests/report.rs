//! `tierd sim --report DIR`: the command writes the HTML report, with the
//! heat map from a second pass over the same requests on the runs' timeline.

mod common;

use common::{stderr, tierd};

use std::path::Path;

fn read(directory: &Path, name: &str) -> String {
    std::fs::read_to_string(directory.join(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
}

/// Values of column `name` of a CSV file (no quoted fields in these columns).
fn column(directory: &Path, file: &str, name: &str) -> Vec<String> {
    let text = read(directory, file);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let index = header
        .iter()
        .position(|column| *column == name)
        .unwrap_or_else(|| panic!("{file}: no column {name}"));
    lines
        .map(|line| line.split(',').nth(index).unwrap_or_default().to_string())
        .collect()
}

fn max_period(directory: &Path, file: &str) -> u64 {
    column(directory, file, "period")
        .iter()
        .map(|value| value.parse::<u64>().unwrap())
        .max()
        .unwrap()
}

#[test]
fn the_report_has_the_heat_map_on_the_runs_timeline() {
    let directory = tempfile::tempdir().unwrap();
    let target = directory.path().join("report");
    let output = tierd(&[
        "sim",
        "--hours",
        "0.05",
        "--speed",
        "1",
        "--period",
        "20s",
        "--policy",
        "none,otf-ast",
        "--report",
        target.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let index = target.join("index.html");
    assert!(
        stderr(&output).contains(&format!("report written to {}", index.display())),
        "{}",
        stderr(&output)
    );
    let page = read(&target, "index.html");
    assert!(page.contains("tierd synth preset usr_1"));
    assert!(page.contains(">synthetic<"));
    assert!(page.contains("src=\"heatmap.svg\""));
    assert!(read(&target, "heatmap.svg").contains("IO per segment and period"));

    // 3 minutes at x1 in 20 s periods: the heat map's periods are the runs'
    // (the runs' last period may run on past the last arrival to the last completion).
    let run_periods = max_period(&target, "iops.csv");
    let heat_periods = max_period(&target, "heatmap.csv");
    assert!(run_periods >= 8, "{run_periods}");
    assert!(
        heat_periods <= run_periods && heat_periods + 1 >= run_periods,
        "heat map up to period {heat_periods}, runs up to {run_periods}"
    );
    // Every request is counted at least once (pieces split at segments).
    let requests: u64 = column(&target, "iops.csv", "policy")
        .iter()
        .zip(column(&target, "iops.csv", "requests"))
        .filter(|(policy, _)| *policy == "none")
        .map(|(_, value)| value.parse::<u64>().unwrap())
        .sum();
    let io: u64 = column(&target, "heatmap.csv", "io")
        .iter()
        .map(|value| value.parse::<u64>().unwrap())
        .sum();
    assert!(
        io >= requests && requests > 0,
        "{io} IO for {requests} requests"
    );
}

#[test]
fn a_window_and_speed_shift_the_heat_map_like_the_runs() {
    let directory = tempfile::tempdir().unwrap();
    let output = tierd(&[
        "sim",
        "--hours",
        "0.05",
        "--from-min",
        "1",
        "--to-min",
        "2",
        "--speed",
        "2",
        "--period",
        "10s",
        "--policy",
        "none",
        "--report",
        directory.path().to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    // One minute of trace at x2 = 30 s of replay = periods 0..=2 of 10 s.
    let heat_periods = max_period(directory.path(), "heatmap.csv");
    assert_eq!(heat_periods, 2);
    let page = read(directory.path(), "index.html");
    assert!(page.contains("from 1 min to 2 min"), "window not shown");
    assert!(page.contains("x2 (arrival = trace time / 2)"));
}
