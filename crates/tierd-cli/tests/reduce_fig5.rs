//! `tierd sim --experiment reduce-fig5 | reduce-calibrate`: paper 004
//! Fig. 5 on the processor model writes its table, CSV, SVG and JSON with
//! the documented keys, the same seed gives the same JSON, and the
//! calibration measures every step of the live tier's codec.

mod common;

use common::{path_arg, stderr, stdout, tierd};

use serde_json::Value;

/// Two loads, one measurement each: debug builds are slow.
const SHORT: [&str; 4] = ["--loads", "10,60", "--measurements", "1"];

#[test]
fn reduce_fig5_writes_its_table_csv_svg_and_json() {
    let out = tempfile::tempdir().unwrap();
    let mut args = vec![
        "sim",
        "--experiment",
        "reduce-fig5",
        "--out",
        path_arg(out.path()),
    ];
    args.extend(SHORT);
    let output = tierd(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with("Paper 004 Fig. 5 in kind (simulated)"),
        "{text}"
    );
    for column in ["single dev%", "double sw", "inline us", "post us"] {
        assert!(text.contains(column), "{column}: {text}");
    }
    assert!(text.contains("> 150%") && text.contains("36%"), "{text}");
    for name in [
        "reduce-fig5.svg",
        "reduce-fig5.csv",
        "reduce-fig5-measurements.csv",
        "reduce-fig5.json",
        "reduce-fig5.txt",
    ] {
        assert!(out.path().join(name).is_file(), "{name} missing");
    }
    let svg = std::fs::read_to_string(out.path().join("reduce-fig5.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("double 65/35%"));
    let csv = std::fs::read_to_string(out.path().join("reduce-fig5.csv")).unwrap();
    // A header and 2 loads x 4 configurations.
    assert_eq!(csv.lines().count(), 9, "{csv}");
    assert!(csv.starts_with("variant,load_percent,offered_iops,achieved_iops,mean_response_us,max_deviation_percent,switches"));

    let mut json_args = args.clone();
    json_args.push("--json");
    let first = tierd(&json_args);
    assert!(first.status.success(), "{}", stderr(&first));
    let report: Value = serde_json::from_str(&stdout(&first)).unwrap();
    assert_eq!(report["experiment"], "reduce-fig5");
    assert_eq!(report["config"]["seed"], 1);
    assert_eq!(report["config"]["queue_order"], "foreground-first");
    assert!(report["saturation"]["max_iops_inline"].as_f64().unwrap() > 0.0);
    assert_eq!(report["paper"]["double_max_deviation_percent"], 36.0);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 8);
    for key in [
        "variant",
        "load_percent",
        "mean_response_us",
        "max_deviation_percent",
        "switches",
        "measurements",
    ] {
        assert!(results[0].get(key).is_some(), "{key}");
    }
    let again = tierd(&json_args);
    assert_eq!(stdout(&first), stdout(&again), "same seed, same JSON");
}

/// `--reduce-tier`: random overwrites of a small reduced tier run the
/// cleaner, reported per configuration and load; a tier too small for the
/// cleaner is refused by name.
#[test]
fn reduce_fig5_on_a_small_tier_reports_the_cleaners_passes() {
    let output = tierd(&[
        "sim",
        "--experiment",
        "reduce-fig5",
        "--loads",
        "45",
        "--measurements",
        "1",
        "--reduce-tier",
        "16MiB:12MiB",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["config"]["tier"]["logical_blocks"], 2048);
    assert_eq!(report["config"]["tier"]["pack_count"], 96);
    for result in report["results"].as_array().unwrap() {
        let cleaning = &result["cleaning"];
        assert!(cleaning["passes"].as_u64().unwrap() > 0, "{result}");
        assert!(cleaning["background_ns"].as_u64().unwrap() > 0, "{result}");
        assert_eq!(cleaning["refused_writes"], 0, "{result}");
    }
    let output = tierd(&[
        "sim",
        "--experiment",
        "reduce-fig5",
        "--loads",
        "45",
        "--measurements",
        "1",
        "--reduce-tier",
        "16MiB:12MiB",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("cleaning: writes at random"));
    let output = tierd(&[
        "sim",
        "--experiment",
        "reduce-fig5",
        "--reduce-tier",
        "16MiB:512KiB",
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("--reduce-tier"),
        "{}",
        stderr(&output)
    );
    // Fig. 5 itself carries no tier.
    let output = tierd(&[
        "sim",
        "--experiment",
        "reduce-fig5",
        "--loads",
        "45",
        "--measurements",
        "1",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert!(report["config"].get("tier").is_none());
    assert!(report["results"][0].get("cleaning").is_none());
}

#[test]
fn reduce_flags_are_refused_where_they_mean_nothing() {
    let output = tierd(&["sim", "--experiment", "reduce-fig5", "--policy", "none"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("--policy"), "{}", stderr(&output));
    let output = tierd(&["sim", "--experiment", "reduce-fig5", "--loads", "0,200"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("--loads"), "{}", stderr(&output));
    let output = tierd(&["sim", "--measurements", "3"]);
    assert!(!output.status.success());
    let output = tierd(&["sim", "--out", "x"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("--experiment"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn reduce_calibrate_times_every_step_of_the_codec() {
    let out = tempfile::tempdir().unwrap();
    let output = tierd(&[
        "sim",
        "--experiment",
        "reduce-calibrate",
        "--json",
        "--out",
        path_arg(out.path()),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let calibration: Value = serde_json::from_str(&stdout(&output)).unwrap();
    for step in ["hash", "compress", "decompress", "compare", "store", "load"] {
        let cost = &calibration["costs"][step];
        let total = cost["fixed_ns"].as_f64().unwrap() + cost["ns_per_kib"].as_f64().unwrap();
        assert!(total > 0.0, "{step}: {cost}");
    }
    let fraction = calibration["costs"]["compressed_fraction"]
        .as_f64()
        .unwrap();
    assert!((0.45..0.6).contains(&fraction), "2:1 data: {fraction}");
    assert!(out.path().join("reduce-calibrate.json").is_file());
    // The scratch file is gone.
    let left: Vec<_> = std::fs::read_dir(out.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}
