//! The `tierd` command as a user meets it: outputs, JSON keys, errors.

mod common;

use common::{path_arg, stderr, stdout, tierd, write_file};

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const MSR_LINES: &str = "\
128166385295514878,hm,0,Write,11855351808,512,2617
128166385295636716,hm,0,Read,9056014336,4096,1500
128166385296636716,hm,0,Read,9056018432,8192,1500
128166385306636716,hm,1,Write,4096,4096,900
";

#[test]
fn formats_lists_every_format() {
    let output = tierd(&["trace", "formats"]);
    assert!(output.status.success());
    let text = stdout(&output);
    for name in [
        "msr",
        "cloudphysics-csv",
        "vscsi",
        "disksim",
        "flashsim",
        "spc",
        "blkparse",
        "arc-lis",
        "lirs-blocks",
        "tencent",
        "systor17",
        "fiu",
        "fio-iolog",
        "tierd",
    ] {
        assert!(
            text.lines().any(|line| line.starts_with(name)),
            "{name} missing from:\n{text}"
        );
    }
}

#[test]
fn stats_counts_a_small_msr_file_and_filters_volumes() {
    let directory = tempfile::tempdir().unwrap();
    let path = write_file(directory.path(), "small.csv", MSR_LINES);
    let output = tierd(&["trace", "stats", "--json", path_arg(&path)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["requests"], 4);
    assert_eq!(value["reads"], 2);
    assert_eq!(value["writes"], 2);
    assert_eq!(value["bytes_read"], 4096 + 8192);
    assert_eq!(value["bytes_written"], 512 + 4096);
    assert_eq!(value["format"], "msr");
    assert_eq!(value["trace_kind"], "file");

    let output = tierd(&[
        "trace",
        "stats",
        "--json",
        "--volume",
        "hm_1",
        path_arg(&path),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["requests"], 1);

    let output = tierd(&["trace", "stats", "--volume", "hm_7", path_arg(&path)]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("hm_7") && message.contains("hm_0, hm_1"),
        "{message}"
    );
}

#[test]
fn a_bad_line_is_reported_with_file_and_line_or_skipped_on_request() {
    let directory = tempfile::tempdir().unwrap();
    let mut text = MSR_LINES.to_string();
    text.push_str("128166385306636716,hm,0,Erase,4096,4096,900\n");
    let path = write_file(directory.path(), "bad.csv", &text);

    let output = tierd(&["trace", "stats", path_arg(&path)]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains(&format!("{}:5:", path.display())),
        "{message}"
    );
    assert!(message.contains("Erase"), "{message}");
    assert!(message.contains("--skip-bad-lines"), "{message}");

    let output = tierd(&[
        "trace",
        "stats",
        "--json",
        "--skip-bad-lines",
        path_arg(&path),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["requests"], 4);
    assert!(
        stderr(&output).contains("skipped 1 malformed line"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_unknown_format_names_what_was_tried() {
    let directory = tempfile::tempdir().unwrap();
    let path = write_file(
        directory.path(),
        "notes.txt",
        "dear diary,\ntoday I wrote a parser\n",
    );
    let output = tierd(&["trace", "stats", path_arg(&path)]);
    assert!(!output.status.success());
    let message = stderr(&output);
    for name in ["msr", "disksim", "blkparse", "--format"] {
        assert!(message.contains(name), "{name} missing from: {message}");
    }
}

#[test]
fn convert_round_trips_through_the_native_format() {
    let directory = tempfile::tempdir().unwrap();
    let source = write_file(directory.path(), "small.csv", MSR_LINES);
    let native = directory.path().join("small.tierd");
    let back = directory.path().join("back.csv.zst");
    let output = tierd(&[
        "trace",
        "convert",
        path_arg(&source),
        path_arg(&native),
        "--to",
        "tierd",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("converted 4 requests from msr to tierd"),
        "{}",
        stdout(&output)
    );
    let output = tierd(&[
        "trace",
        "convert",
        path_arg(&native),
        path_arg(&back),
        "--to",
        "msr",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stats = |path: &Path| -> Value {
        let output = tierd(&["trace", "stats", "--json", path_arg(path)]);
        assert!(output.status.success(), "{}", stderr(&output));
        let mut value: Value = serde_json::from_slice(&output.stdout).unwrap();
        let object = value.as_object_mut().unwrap();
        object.remove("trace");
        object.remove("format");
        value
    };
    assert_eq!(stats(&source), stats(&back));
}

/// Paper 000 §5.4's two filters: every other read becomes a write, offsets
/// rounded down to 4 KiB.
#[test]
fn convert_turns_reads_into_writes_and_aligns_offsets_as_asked() {
    let directory = tempfile::tempdir().unwrap();
    let lines = "128166372003061629,hm,0,Read,4096,4096,100\n\
                 128166372003061630,hm,0,Read,8192,4096,100\n\
                 128166372003061631,hm,0,Write,12800,512,100\n\
                 128166372003061632,hm,0,Read,16384,4096,100\n\
                 128166372003061633,hm,0,Read,20992,4096,100\n";
    let source = write_file(directory.path(), "reads.csv", lines);
    let derived = directory.path().join("derived.csv");
    let output = tierd(&[
        "trace",
        "convert",
        path_arg(&source),
        path_arg(&derived),
        "--to",
        "msr",
        "--reads-to-writes",
        "2",
        "--align",
        "4KiB",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = stdout(&output);
    assert!(
        printed.contains("turned 2 of 4 reads into writes"),
        "{printed}"
    );
    assert!(
        printed.contains("moved 2 offsets down to a multiple of 4096 bytes"),
        "{printed}"
    );
    let written = std::fs::read_to_string(&derived).unwrap();
    let ops_and_offsets: Vec<(String, u64)> = written
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            (fields[3].to_string(), fields[4].parse().unwrap())
        })
        .collect();
    assert_eq!(
        ops_and_offsets,
        vec![
            ("Read".to_string(), 4096),
            ("Write".to_string(), 8192),
            ("Write".to_string(), 12288),
            ("Read".to_string(), 16384),
            ("Write".to_string(), 20480),
        ]
    );
    let output = tierd(&[
        "trace",
        "convert",
        path_arg(&source),
        path_arg(&derived),
        "--to",
        "msr",
        "--reads-to-writes",
        "0",
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("expected N >= 1"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn synth_is_deterministic_for_a_seed_and_labelled_synthetic() {
    let directory = tempfile::tempdir().unwrap();
    let first = directory.path().join("first.tierd");
    let second = directory.path().join("second.tierd");
    let other = directory.path().join("other.tierd");
    for (path, seed) in [(&first, "3"), (&second, "3"), (&other, "4")] {
        let output = tierd(&[
            "trace",
            "synth",
            "--preset",
            "proj_2",
            "--hours",
            "0.25",
            "--seed",
            seed,
            "--out",
            path_arg(path),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(stdout(&output).contains("synthetic"), "{}", stdout(&output));
    }
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&second).unwrap()
    );
    assert_ne!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&other).unwrap()
    );

    let output = tierd(&["trace", "synth", "--list"]);
    assert!(output.status.success());
    let listing = stdout(&output);
    for preset in [
        "usr_1", "web_2", "proj_2", "proj_4", "src1_0", "src1_1", "proj_1", "usr_2", "hm_0", "dbt2",
    ] {
        assert!(listing.contains(preset), "{preset} missing from --list");
    }

    let output = tierd(&[
        "trace",
        "synth",
        "--preset",
        "usr_9",
        "--out",
        path_arg(&other),
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("usr_1"),
        "error should list presets: {}",
        stderr(&output)
    );
}

#[test]
fn analyze_reports_the_papers_keys_and_draws_heat_maps() {
    let directory = tempfile::tempdir().unwrap();
    let trace = directory.path().join("proj_2.tierd");
    let output = tierd(&[
        "trace",
        "synth",
        "--preset",
        "proj_2",
        "--hours",
        "0.5",
        "--seed",
        "1",
        "--out",
        path_arg(&trace),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let png = directory.path().join("heat.png");
    let output = tierd(&[
        "trace",
        "analyze",
        "--json",
        path_arg(&trace),
        "--heatmap",
        path_arg(&png),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    for key in [
        "top1_share",
        "top10_share",
        "concentrations",
        "prediction_table",
        "fifo_hit_ratio",
    ] {
        assert!(
            value.get(key).is_some(),
            "{key} missing from analyze --json"
        );
    }
    let top1 = value["top1_share"].as_f64().unwrap();
    let top10 = value["top10_share"].as_f64().unwrap();
    assert!(
        0.0 < top1 && top1 <= top10 && top10 <= 1.0,
        "{top1} {top10}"
    );
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));

    let svg = directory.path().join("heat.svg");
    let output = tierd(&[
        "trace",
        "analyze",
        path_arg(&trace),
        "--heatmap",
        path_arg(&svg),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));

    let output = tierd(&[
        "trace",
        "analyze",
        path_arg(&trace),
        "--segment-bytes",
        "3MiB",
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("power of two"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn analyze_with_no_file_runs_the_embedded_default_and_says_it_is_synthetic() {
    let output = tierd(&["trace", "analyze", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["trace_kind"], "synthetic");
    let label = value["trace"].as_str().unwrap();
    assert!(
        label.contains("usr_1") && label.contains("synthetic"),
        "{label}"
    );
    assert!(
        value["top1_share"].as_f64().unwrap() > 0.5,
        "usr_1 is concentrated: {}",
        value["top1_share"]
    );
}

#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(["trace", "synth", "--list"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tierd");
    // Close the read end at once (microseconds after exec, long before tierd
    // has parsed its arguments), so its first write meets a closed pipe.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    child.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A fio iolog version 2: requests with no timestamps.
const UNTIMED_IOLOG: &str = "fio version 2 iolog\n/dev/sdb add\n/dev/sdb open\n\
/dev/sdb read 0 4096\n/dev/sdb write 8192 4096\n/dev/sdb read 65536 8192\n/dev/sdb close\n";

#[test]
fn stats_peak_is_never_below_the_mean_on_a_trace_shorter_than_a_period() {
    let directory = tempfile::tempdir().unwrap();
    // 20 requests over 1.9 s: a mean of ~10.5 iops, one (partial) 60 s period.
    let mut text = String::new();
    for index in 0..20u64 {
        text.push_str(&format!(
            "{},hm,0,Read,{},4096,100\n",
            128_166_385_295_514_878u64 + index * 1_000_000,
            index * 4096
        ));
    }
    let path = write_file(directory.path(), "short.csv", &text);
    let output = tierd(&["trace", "stats", "--json", path_arg(&path)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mean = value["iops_mean"].as_f64().unwrap();
    let peak = value["iops_peak"].as_f64().unwrap();
    assert!(mean > 10.0, "{value}");
    assert!(peak >= mean, "peak {peak} below the mean {mean}");
    let output = tierd(&["trace", "stats", path_arg(&path)]);
    let text = stdout(&output);
    assert!(
        text.contains("shorter than one 60 s period"),
        "the text does not say why: {text}"
    );
}

#[test]
fn stats_counts_many_volumes_and_names_only_a_few() {
    let directory = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for disk in 0..3000u64 {
        text.push_str(&format!(
            "{},hm,{disk},Read,0,4096,100\n",
            128_166_385_295_514_878u64 + disk * 10_000
        ));
    }
    let path = write_file(directory.path(), "many.csv", &text);
    let output = tierd(&["trace", "stats", path_arg(&path)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let line = text
        .lines()
        .find(|line| line.starts_with("volumes"))
        .unwrap_or_else(|| panic!("no volumes line: {text}"));
    assert!(line.contains("3000"), "{line}");
    let named = line.matches("hm_").count();
    assert!((1..=5).contains(&named), "{named} names: {line}");
    assert!(line.len() < 200, "{line}");
    // JSON keeps every name, and the count.
    let output = tierd(&["trace", "stats", "--json", path_arg(&path)]);
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["volumes"].as_array().unwrap().len(), 3000);
    assert_eq!(value["volume_count"], 3000);
}

#[test]
fn stats_and_sim_warn_when_a_trace_has_no_timestamps() {
    let directory = tempfile::tempdir().unwrap();
    let path = write_file(directory.path(), "untimed.iolog", UNTIMED_IOLOG);
    let output = tierd(&["trace", "stats", path_arg(&path)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("warning") && message.contains("no timestamps"),
        "{message}"
    );
    let output = tierd(&[
        "sim",
        "--trace",
        path_arg(&path),
        "--policy",
        "none",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("warning")
            && message.contains("no timestamps")
            && message.contains("time 0"),
        "{message}"
    );
    // A timed trace gets no such warning.
    let timed = write_file(directory.path(), "small.csv", MSR_LINES);
    let output = tierd(&["trace", "stats", path_arg(&timed)]);
    assert!(
        !stderr(&output).contains("no timestamps"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn convert_says_when_the_iolog_version_drops_timestamps() {
    let directory = tempfile::tempdir().unwrap();
    let source = write_file(directory.path(), "small.csv", MSR_LINES);
    let target = directory.path().join("small.iolog");
    let output = tierd(&[
        "trace",
        "convert",
        path_arg(&source),
        path_arg(&target),
        "--to",
        "fio-iolog",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("version 2")
            && message.contains("timestamps")
            && message.contains("--fio-iolog-version 3"),
        "{message}"
    );
    let output = tierd(&[
        "trace",
        "convert",
        path_arg(&source),
        path_arg(&target),
        "--to",
        "fio-iolog",
        "--fio-iolog-version",
        "3",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("timestamps"),
        "{}",
        stderr(&output)
    );
}
