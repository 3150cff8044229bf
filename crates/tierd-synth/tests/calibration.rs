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

mod support;

use support::calibration::{evaluate, TOLERANCE};
use tierd_synth::{preset, relative_error, Generator};

fn check(name: &str, seed: u64) {
    let (table, failures) = evaluate(name, seed);
    assert!(
        failures.is_empty(),
        "calibration off for {failures:?}:\n{table}"
    );
    println!("{table}");
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

/// A real week of the two presets with the smallest published week counts
/// (web_2: 5,175,368 requests, proj_4: 6,465,639), generated request by
/// request: the count matches the published one within the tolerance and the
/// model's own expectation within 1%, which is what lets
/// `week_rates_follow_from_the_model` stand for the larger presets.
#[test]
fn a_generated_week_has_the_published_request_count() {
    for name in ["web_2", "proj_4"] {
        let preset = preset(name).expect("preset");
        let target = preset.targets.requests_per_second.expect("a week target");
        let count = Generator::new(preset, 1, 168.0).expect("generator").count() as f64;
        let published = target.value * 604_800.0;
        let expected = Generator::expected_requests(preset, 1, 168.0).expect("expectation");
        assert!(
            relative_error(count, published).abs() <= TOLERANCE,
            "{name}: {count} requests in a generated week, published {published:.0} ({})",
            target.source
        );
        assert!(
            relative_error(count, expected).abs() <= 0.01,
            "{name}: {count} requests in a generated week, the model expects {expected:.0}"
        );
    }
}
