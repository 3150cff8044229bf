//! `tierd sim` as a user meets it: the default run, JSON keys, trace files,
//! tier files and the errors.

mod common;

use common::{path_arg, stderr, stdout, tierd, write_file};

use serde_json::Value;

/// The default run, shortened: debug builds are slow, and the arguments are
/// otherwise exactly what `tierd sim` alone uses.
const SHORT: &str = "0.02";

#[test]
fn the_default_run_prints_both_paper_tables_for_a_labelled_synthetic_trace() {
    let output = tierd(&["sim", "--hours", SHORT]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with("trace: synthetic (tierd synth preset usr_1, seed 1"),
        "{text}"
    );
    assert!(text.contains("not a real trace [synthetic]"), "{text}");
    assert!(text.contains("tiers: hdd-ssd (ssd: x25e 64 GB"), "{text}");
    assert!(text.contains("open loop x8"), "{text}");
    assert!(text.contains("paper 000 (OTF-AST) Tables 4-5"), "{text}");
    assert!(text.contains("paper 002 (ATSMF) Tables 5-6"), "{text}");
    // `adaptive` is the default policy; the paper policies and `none` run
    // beside it for comparison.
    for policy in ["adaptive", "none", "otf-ast", "atsmf"] {
        let rows = text
            .lines()
            .filter(|line| line.split_whitespace().next() == Some(policy))
            .count();
        assert_eq!(rows, 2, "{policy} rows in:\n{text}");
    }
    assert!(
        stderr(&output).contains("requests in"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn json_has_the_public_keys_and_is_reproducible() {
    let args = ["sim", "--hours", SHORT, "--json", "--policy", "none,lru"];
    let output = tierd(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["trace_kind"], "synthetic");
    assert!(value["trace"]
        .as_str()
        .unwrap()
        .contains("synthetic (tierd synth preset usr_1"));
    assert_eq!(value["tiers"], "hdd-ssd");
    let runs = value["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["policy"], "none");
    assert_eq!(runs[1]["policy"], "lru");
    for run in runs {
        for key in [
            "policy",
            "avg_iops",
            "avg_response_us",
            "fast_io_share",
            "fast_bytes_max",
            "migrated_bytes",
            "avg_iops_first_hour",
            "home_svctm_ms",
            "periods",
            "response",
            "gain",
        ] {
            assert!(
                run.get(key).is_some(),
                "{key} missing from {}",
                run["policy"]
            );
        }
        assert!(run["avg_iops"].as_f64().unwrap() > 0.0);
        assert!(run["requests"].as_u64().unwrap() > 1_000);
    }
    assert_eq!(runs[0]["fast_io_share"], 0.0);
    assert_eq!(runs[0]["gain"]["iops_ratio"], 1.0);
    assert!(runs[1]["cache"]["hit_ratio"].as_f64().unwrap() > 0.0);
    for key in [
        "hit_ratio",
        "dirty_evictions",
        "clean_evictions",
        "block_bytes",
        "mode",
        "admission",
        "read_hit_ratio",
        "write_hit_ratio",
        "writebacks",
        "bypassed",
        "rejected",
        "no_slot",
        "fills",
    ] {
        assert!(runs[1]["cache"].get(key).is_some(), "cache.{key} missing");
    }
    assert_eq!(runs[1]["cache"]["mode"], "writeback");
    assert_eq!(runs[1]["cache"]["admission"], "always");
    assert_eq!(
        runs[1]["fast_io_share"],
        runs[1]["cache"]["fast_access_ratio"]
    );
    let again = tierd(&args);
    assert_eq!(output.stdout, again.stdout, "same seed, same JSON");
}

const MSR_LINES: &str = "\
128166385295514878,hm,0,Write,11855351808,512,2617
128166385295636716,hm,0,Read,9056014336,4096,1500
128166385296636716,hm,0,Read,9056018432,8192,1500
128166385306636716,hm,1,Write,4096,4096,900
";

#[test]
fn a_trace_file_is_replayed_and_named() {
    let directory = tempfile::tempdir().unwrap();
    let path = write_file(directory.path(), "small.csv", MSR_LINES);
    let output = tierd(&["sim", "--trace", path_arg(&path), "--json"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("hm_0") && message.contains("hm_1") && message.contains("--volume"),
        "{message}"
    );

    let output = tierd(&[
        "sim",
        "--trace",
        path_arg(&path),
        "--volume",
        "hm_0",
        "--policy",
        "none,otf-ast,fifo",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["trace_kind"], "file");
    assert_eq!(value["trace"], path_arg(&path));
    for run in value["runs"].as_array().unwrap() {
        assert_eq!(run["requests"], 3, "{}", run["policy"]);
        assert_eq!(run["settings"]["replay"]["speed"], 1.0);
        // The volume: the highest byte touched, rounded up to a 1 GiB segment.
        assert_eq!(run["settings"]["volume_bytes"], 12u64 << 30);
    }

    let output = tierd(&[
        "sim",
        "--trace",
        path_arg(&path),
        "--volume",
        "hm_0",
        "--policy",
        "none",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with(&format!("trace: {} [file]", path.display())),
        "{text}"
    );
}

#[test]
fn cache_flags_set_the_block_caches_and_their_errors_say_what_is_accepted() {
    let output = tierd(&[
        "sim",
        "--hours",
        SHORT,
        "--json",
        "--policy",
        "none,s3fifo",
        "--cache-block",
        "16KiB",
        "--cache-mode",
        "writethrough",
        "--admission",
        "frequency:3",
        "--sequential-cutoff",
        "0",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    let cache = &value["runs"][1]["cache"];
    assert_eq!(cache["block_bytes"], 16 * 1024);
    assert_eq!(cache["mode"], "writethrough");
    assert_eq!(cache["admission"], "frequency:3");
    assert_eq!(cache["sequential_cutoff_bytes"], 0);
    assert_eq!(cache["dirty_evictions"], 0, "writethrough makes no dirt");

    for (flag, value, says) in [
        ("--cache-block", "48KiB", "power of two from 4KiB to 1MiB"),
        ("--cache-block", "2MiB", "power of two from 4KiB to 1MiB"),
        (
            "--cache-mode",
            "write-back",
            "writeback, writethrough or writearound",
        ),
        ("--admission", "lfu", "frequency:N"),
        ("--sequential-cutoff", "4 parsecs", "parsecs"),
    ] {
        let output = tierd(&["sim", "--hours", SHORT, "--policy", "lru", flag, value]);
        assert!(!output.status.success(), "{flag} {value}");
        let message = stderr(&output);
        assert!(
            message.contains(flag) && message.contains(says),
            "{flag} {value}: {message}"
        );
    }
}

#[test]
fn tier_files_and_settings_errors_name_what_is_wrong() {
    let directory = tempfile::tempdir().unwrap();
    let tiers = write_file(
        directory.path(),
        "tiers.toml",
        "[[tier]]\nname = \"ssd\"\ndevice = \"x25e\"\ncapacity = \"8GB\"\nspeed = 3\n\
         [[tier]]\nname = \"hdd\"\ndevice = \"savvio10k4\"\n",
    );
    let output = tierd(&["sim", "--hours", SHORT, "--tiers", path_arg(&tiers)]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("tiers.toml") && message.contains("speed"),
        "{message}"
    );

    let output = tierd(&["sim", "--hours", SHORT, "--tiers", "hdd-sdd"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("hdd-ssd") && message.contains("ssd-mem"),
        "{message}"
    );

    let output = tierd(&["sim", "--hours", SHORT, "--segment-bytes", "3MiB"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("--segment-bytes") && message.contains("power of two"),
        "{message}"
    );

    let output = tierd(&["sim", "--hours", SHORT, "--policy", "none,lfu"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("lfu") && message.contains("s3fifo"),
        "{message}"
    );

    let output = tierd(&["sim", "--hours", SHORT, "--speed", "0"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("--speed"), "{}", stderr(&output));

    let output = tierd(&["sim", "--hours", SHORT, "--from-min", "5", "--to-min", "2"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("--from-min/--to-min"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn window_speed_and_closed_loop_options_reach_the_run() {
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
        "--policy",
        "none",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    let run = &value["runs"][0];
    assert_eq!(run["settings"]["window"]["from_ns"], 60_000_000_000u64);
    assert_eq!(run["settings"]["replay"]["speed"], 2.0);
    // One minute of trace time at x2: the last request is due before 30 s.
    assert!(run["last_arrival_ns"].as_u64().unwrap() <= 30_000_000_000);
    assert!(run["requests"].as_u64().unwrap() > 1_000);

    let output = tierd(&[
        "sim",
        "--hours",
        SHORT,
        "--queue-depth",
        "4",
        "--policy",
        "none",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        value["runs"][0]["settings"]["replay"]["mode"],
        "closed-loop"
    );
    assert_eq!(value["runs"][0]["settings"]["replay"]["queue_depth"], 4);
}

#[test]
fn policy_settings_come_from_a_file_and_a_typo_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    // With the §5.4 rule off and `up` above 100 %, OTF-AST can never promote.
    let settings = write_file(
        directory.path(),
        "policies.toml",
        "[otf-ast]\npromote_persistent = false\nutil_up_percent = 100.0\n",
    );
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["sim", "--hours", "0.3", "--policy", "otf-ast", "--json"];
        args.extend_from_slice(extra);
        let output = tierd(&args);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let default_moves = run(&[])["runs"][0]["moves"].as_u64().unwrap();
    let quiet = run(&["--policy-config", path_arg(&settings)]);
    assert!(default_moves > 0, "the default otf-ast moves on usr_1");
    assert_eq!(quiet["runs"][0]["moves"], 0, "{}", quiet["runs"][0]);

    let typo = write_file(
        directory.path(),
        "typo.toml",
        "[otf-ast]\nutil_upp_percent = 80.0\n",
    );
    let output = tierd(&[
        "sim",
        "--hours",
        "0.05",
        "--policy",
        "otf-ast",
        "--policy-config",
        path_arg(&typo),
    ]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains("typo.toml") && message.contains("util_upp_percent"),
        "{message}"
    );
}

#[test]
fn a_terminal_gets_a_progress_line_with_rate_and_eta() {
    let directory = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for index in 0..2000u64 {
        text.push_str(&format!(
            "{},hm,0,Read,{},4096,100\n",
            128_166_385_295_514_878u64 + index * 100_000,
            (index * 7919 % 5000) * 4096
        ));
    }
    let trace = write_file(directory.path(), "trace.csv", &text);
    let Some(terminal) = common::on_a_terminal(&[
        "sim",
        "--trace",
        path_arg(&trace),
        "--policy",
        "none,otf-ast",
    ]) else {
        return;
    };
    let progress: Vec<&str> = terminal
        .split(['\r', '\n'])
        .filter(|line| line.starts_with("tierd sim: ") && line.contains("requests/s"))
        .collect();
    assert!(
        progress
            .iter()
            .any(|line| line.contains(" of 4000 requests simulated") && line.contains("ETA")),
        "no progress line with a total and an ETA in {terminal:?}"
    );
}

#[test]
fn fast_bytes_runs_every_policy_at_every_size_of_the_working_set() {
    let directory = tempfile::tempdir().unwrap();
    let path = write_file(directory.path(), "small.csv", MSR_LINES);
    let run = |sizes: &str, json: bool| {
        let mut args = vec![
            "sim",
            "--trace",
            path_arg(&path),
            "--volume",
            "hm_0",
            "--policy",
            "none,otf-ast,lru",
            // The trace touches 16 KiB: 4 KiB cache blocks, so that half
            // of it is still two blocks.
            "--cache-block",
            "4KiB",
            "--fast-bytes",
            sizes,
        ];
        if json {
            args.push("--json");
        }
        tierd(&args)
    };
    let output = run("50%,100%,2GiB", true);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    let working_set = value["working_set_bytes"].as_u64().unwrap();
    assert!(
        working_set > 0 && working_set.is_multiple_of(4096),
        "{working_set}"
    );
    assert!(
        stderr(&output).contains("working set"),
        "{}",
        stderr(&output)
    );
    let runs = value["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 9, "3 policies x 3 sizes");
    let given: Vec<u64> = runs
        .iter()
        .map(|run| run["fast_bytes"].as_u64().unwrap())
        .collect();
    let half = (working_set / 2 / 4096).max(1) * 4096;
    assert_eq!(
        given,
        [
            half,
            half,
            half,
            working_set,
            working_set,
            working_set,
            2 << 30,
            2 << 30,
            2 << 30
        ]
    );
    // The caches keep their object; tiering gets whole segments only.
    assert!(runs[2]["cache"]["hit_ratio"].is_number());
    assert!(runs[2]["cache"]["dirty_evictions"].is_number());
    assert_eq!(runs[7]["fast_segments"], 2);
    assert_eq!(value["curve"].as_array().unwrap().len(), 9);
    assert!(value["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|note| note.as_str().unwrap().contains("smaller than one")));

    let text = stdout(&run("50%,2GiB", false));
    assert!(text.contains("Hit ratio by fast-tier size"), "{text}");
    assert!(
        text.contains("Mean response ms by fast-tier size"),
        "{text}"
    );

    for (bad, named) in [
        ("5x", "\"5x\""),
        ("0%", "\"0%\""),
        ("1GiB,1GiB", "entries 1 and 2"),
    ] {
        let output = run(bad, false);
        assert!(!output.status.success(), "{bad}");
        let message = stderr(&output);
        assert!(
            message.contains("--fast-bytes") && message.contains(named),
            "{message}"
        );
    }
}

#[test]
fn every_strategy_gets_the_fast_tiers_capacity_unless_cache_bytes_says_otherwise() {
    let args = [
        "sim",
        "--hours",
        SHORT,
        "--json",
        "--policy",
        "none,otf-ast,lru,fifo",
    ];
    let output = tierd(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    for run in value["runs"].as_array().unwrap() {
        assert_eq!(run["fast_bytes"], 64_000_000_000u64, "{}", run["policy"]);
    }
    assert_eq!(value["runs"][1]["fast_segments"], 59);
    assert!(value["notes"][0].as_str().unwrap().contains("59 whole"));
    let output = tierd(&[
        "sim",
        "--hours",
        SHORT,
        "--json",
        "--policy",
        "none,lru",
        "--cache-bytes",
        "1GiB",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["runs"][1]["fast_bytes"], 1u64 << 30);
    assert!(value["notes"].as_array().unwrap().iter().any(|note| note
        .as_str()
        .unwrap()
        .contains("not compare at equal capacity")));
}
