//! Calibration beyond the two seeds the test suite checks: every preset (or
//! those named) with the given seeds, each analysed like the calibration
//! test, printing every table and a summary line; exits non-zero on a miss.
//!
//! ```sh
//! cargo run --release -p tierd-synth --example calibrate -- --seeds 3,4,5,6 [--presets usr_1,web_2]
//! ```

#[path = "../tests/support/calibration.rs"]
mod calibration;

use std::process::ExitCode;

fn list(arguments: &[String], flag: &str) -> Option<Vec<String>> {
    let index = arguments.iter().position(|argument| argument == flag)?;
    let value = arguments.get(index + 1)?;
    Some(
        value
            .split(',')
            .map(|item| item.trim().to_string())
            .collect(),
    )
}

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let seeds: Vec<u64> = match list(&arguments, "--seeds")
        .unwrap_or_else(|| vec!["3".into(), "4".into(), "5".into(), "6".into()])
        .iter()
        .map(|seed| seed.parse::<u64>())
        .collect()
    {
        Ok(seeds) => seeds,
        Err(error) => {
            eprintln!("calibrate: --seeds takes comma-separated integers: {error}");
            return ExitCode::from(2);
        }
    };
    let only = list(&arguments, "--presets").unwrap_or_default();
    let mut misses = Vec::new();
    for preset in tierd_synth::presets() {
        if !only.is_empty() && !only.iter().any(|name| name == preset.name) {
            continue;
        }
        for &seed in &seeds {
            let (table, failures) = calibration::evaluate(preset.name, seed);
            println!("{table}");
            misses.extend(failures);
        }
    }
    println!(
        "seeds {seeds:?}: {} target misses: {misses:?}",
        misses.len()
    );
    if misses.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
