//! Every preset, generated at its default hours with seed 1 and seed 2 and
//! analysed by `tierd_analysis::analyze::analyze` with the default options
//! (1 GiB segments, 60 s periods; volume size = the preset's), lands within
//! ±20% (relative) of each of its window-scoped calibration targets. A failure
//! prints the whole table: target, measured, relative error, source.
//!
//! Targets the model cannot reach coherently carry the reason in
//! `Target::unreachable` (shown by `--list`, explained in docs/synth.md); they
//! are still measured and printed, and the test fails if one of them starts
//! to pass, so the claim stays true.
//!
//! One test per (preset, seed) so the test harness spreads them over cores;
//! run with `--nocapture` to see the tables of passing presets too.

use tierd_analysis::analyze::{analyze, AnalyzeOptions};
use tierd_synth::{label, preset, relative_error, Generator, Preset, Scope};
use tierd_trace::{Format, IteratorReader};

const TOLERANCE: f64 = 0.20;

fn lookup(json: &serde_json::Value, path: &str) -> Option<f64> {
    path.split('.')
        .try_fold(json, |value, key| value.get(key))
        .and_then(serde_json::Value::as_f64)
}

fn measure(preset: &'static Preset, seed: u64) -> serde_json::Value {
    let hours = preset.default_hours;
    let generator = Generator::new(preset, seed, hours).expect("preset generator");
    let mut reader = IteratorReader::new(
        generator,
        &[preset.volume_name],
        Format::Tierd,
        label(preset, seed, hours),
    );
    let options = AnalyzeOptions {
        volume_bytes: Some(preset.volume_bytes),
        ..AnalyzeOptions::default()
    };
    let analysis = analyze(&mut reader, &options).expect("analysis of a generated stream");
    serde_json::to_value(&analysis).expect("analysis JSON")
}

/// The table of one (preset, seed) run and the targets it got wrong (a
/// target out of tolerance, or a known miss that now passes).
fn evaluate(name: &str, seed: u64) -> (String, Vec<String>) {
    let preset = preset(name).expect("preset");
    let json = measure(preset, seed);
    let mut table = format!("{}\n", label(preset, seed, preset.default_hours));
    let mut failures = Vec::new();
    table.push_str(&format!(
        "  {:<30} {:>14} {:>14} {:>8}  {}\n",
        "metric", "target", "measured", "error", "source"
    ));
    for (metric, target) in preset.targets.iter() {
        if target.scope != Scope::Window {
            continue;
        }
        let measured = lookup(&json, metric.analysis_json_path());
        let error = measured.map(|value| relative_error(value, target.value));
        let within = error.is_some_and(|error| error.abs() <= TOLERANCE);
        let known = target.unreachable;
        let verdict = match (within, known) {
            (true, None) => "",
            (false, Some(_)) => "  KNOWN MISS",
            (true, Some(_)) => {
                "  KNOWN MISS NOW PASSES: drop Target::unreachable, update docs/synth.md"
            }
            (false, None) => "  FAIL",
        };
        if within == known.is_some() {
            failures.push(format!("{name} seed {seed} {}", metric.name()));
        }
        table.push_str(&format!(
            "  {:<30} {:>14} {:>14} {:>8}  {}{verdict}\n",
            metric.name(),
            metric.format_value(target.value),
            measured.map_or("null".to_string(), |value| metric.format_value(value)),
            error.map_or("-".to_string(), |error| format!("{:+.1}%", error * 100.0)),
            target.source,
        ));
    }
    let concentrations = &json["concentrations"];
    table.push_str(&format!(
        "  (requests {}, concentrations {} of which ongoing at end {}, moving {}; spike regions {})\n",
        json["requests"],
        concentrations["count"],
        concentrations["ongoing_at_end"],
        concentrations["moving_count"],
        json["spikes"]["regions"]["count"],
    ));
    for (metric, target) in preset.targets.iter() {
        if let Some(reason) = target.unreachable {
            table.push_str(&format!("  known miss {}: {reason}\n", metric.name()));
        }
    }
    (table, failures)
}

fn check(name: &str, seed: u64) {
    let (table, failures) = evaluate(name, seed);
    assert!(
        failures.is_empty(),
        "calibration off for {failures:?}:\n{table}"
    );
    println!("{table}");
}

/// Robustness beyond the two seeds of the default run: every preset with
/// the seeds in `TIERD_SYNTH_SEEDS` (default 3,4,5,6), or only the presets in
/// `TIERD_SYNTH_PRESETS`; prints each table and a summary. `cargo test -p tierd-synth --test calibration -- --ignored more_seeds --nocapture`
#[test]
#[ignore = "about 4 minutes in a debug build; run by hand"]
fn more_seeds() {
    let seeds: Vec<u64> = std::env::var("TIERD_SYNTH_SEEDS")
        .unwrap_or_else(|_| "3,4,5,6".to_string())
        .split(',')
        .map(|seed| {
            seed.trim()
                .parse()
                .expect("TIERD_SYNTH_SEEDS: comma-separated integers")
        })
        .collect();
    let only = std::env::var("TIERD_SYNTH_PRESETS").unwrap_or_default();
    let mut all_failures = Vec::new();
    for preset in tierd_synth::presets() {
        if !only.is_empty() && !only.split(',').any(|name| name.trim() == preset.name) {
            continue;
        }
        for &seed in &seeds {
            let (table, failures) = evaluate(preset.name, seed);
            println!("{table}");
            all_failures.extend(failures);
        }
    }
    println!(
        "seeds {seeds:?}: {} target misses: {all_failures:?}",
        all_failures.len()
    );
    assert!(all_failures.is_empty(), "{all_failures:?}");
}

macro_rules! calibration_tests {
    ($($name:ident: $seed_1:ident, $seed_2:ident;)*) => {
        $(
            #[test]
            fn $seed_1() {
                check(stringify!($name), 1);
            }

            #[test]
            fn $seed_2() {
                check(stringify!($name), 2);
            }
        )*

        #[test]
        fn every_preset_has_a_calibration_test() {
            let tested = [$(stringify!($name)),*];
            for preset in tierd_synth::presets() {
                assert!(tested.contains(&preset.name), "no calibration test for {}", preset.name);
            }
        }
    };
}

calibration_tests! {
    usr_1: usr_1_seed_1, usr_1_seed_2;
    web_2: web_2_seed_1, web_2_seed_2;
    proj_2: proj_2_seed_1, proj_2_seed_2;
    proj_4: proj_4_seed_1, proj_4_seed_2;
    src1_0: src1_0_seed_1, src1_0_seed_2;
    src1_1: src1_1_seed_1, src1_1_seed_2;
    proj_1: proj_1_seed_1, proj_1_seed_2;
    usr_2: usr_2_seed_1, usr_2_seed_2;
    dbt2: dbt2_seed_1, dbt2_seed_2;
    hm_0: hm_0_seed_1, hm_0_seed_2;
}

/// Week-scoped targets (requests per second over a week) hold for the rate
/// the generator follows. Generating a week of every preset (about 200
/// million requests) is too slow for a debug test; the request count of a
/// real run is checked against the same expectation on the default window by
/// the tests above (mean_iops) and on a whole week by the ignored test below.
#[test]
fn week_rates_follow_from_the_model() {
    for preset in tierd_synth::presets() {
        let Some(target) = preset.targets.requests_per_second else {
            continue;
        };
        let expected =
            Generator::expected_requests(preset, 1, 168.0).expect("expected requests") / 604_800.0;
        let error = relative_error(expected, target.value);
        assert!(
            error.abs() <= 0.02,
            "{}: expected {expected:.2} req/s over a week, target {:.2} ({})",
            preset.name,
            target.value,
            target.source
        );
    }
}

/// A real week of every preset: counts requests. Slow in a debug build; run
/// with `cargo test --release -p tierd-synth --test calibration -- --ignored`.
#[test]
#[ignore = "generates ~200 million requests; run in release"]
fn week_request_counts_match_the_published_counts() {
    for preset in tierd_synth::presets() {
        let Some(target) = preset.targets.requests_per_second else {
            continue;
        };
        let count = Generator::new(preset, 1, 168.0).expect("generator").count() as f64;
        let error = relative_error(count / 604_800.0, target.value);
        println!(
            "{}: {count} requests, error {:+.2}%",
            preset.name,
            error * 100.0
        );
        assert!(
            error.abs() <= TOLERANCE,
            "{}: {count} requests in the week",
            preset.name
        );
    }
}
