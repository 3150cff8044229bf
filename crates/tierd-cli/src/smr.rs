//! `tierd sim --experiment smr-staging` (docs/sim.md, "Experiments";
//! docs/engine/smr.md): the SMR home tier with and without staging.

use crate::reduce::Options;
use crate::CliError;

pub fn run(options: &Options) -> Result<(), CliError> {
    let scale = options.scale.unwrap_or(1.0);
    if !(scale.is_finite() && scale > 0.0 && scale <= 10.0) {
        return Err(CliError(format!(
            "--scale {scale}: give a factor above 0 and at most 10 (1 = paper 001's 10 GiB)"
        )));
    }
    let mut workloads = tierd_sim::smr::workloads(options.seed, scale);
    // MSR-like: the tierd-synth preset calibrated to MSR hm_0.
    let preset = tierd_synth::preset("hm_0")?;
    let hours = (0.5 * scale).max(0.05);
    let generator = tierd_synth::Generator::new(preset, options.seed, hours)?;
    workloads.push(tierd_sim::smr::generated(
        "hm_0",
        format!(
            "tierd-synth preset hm_0 (synthetic, calibrated to MSR Cambridge hm_0's 800 s cut), {hours} h"
        ),
        preset.volume_bytes,
        generator.collect(),
    ));
    let results = tierd_sim::smr::experiment(options.seed, &workloads)
        .map_err(|error| CliError(format!("--experiment smr-staging: {error}")))?;
    let text = tierd_sim::smr::render_text(&results);
    let json = serde_json::to_string_pretty(&results)
        .map_err(|error| CliError(format!("cannot write JSON: {error}")))?;
    if let Some(directory) = &options.out {
        for (name, contents) in [("smr-staging.txt", &text), ("smr-staging.json", &json)] {
            let path = directory.join(name);
            std::fs::write(&path, format!("{contents}\n"))
                .map_err(|error| CliError(format!("{}: cannot write: {error}", path.display())))?;
        }
    }
    if options.json {
        println!("{json}");
    } else {
        print!("{text}");
    }
    Ok(())
}
