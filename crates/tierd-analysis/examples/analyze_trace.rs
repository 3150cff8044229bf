//! Analyses one trace file and prints the text tables (or JSON) and writes a
//! heat map, without the CLI:
//! `cargo run -p tierd-analysis --example analyze_trace -- TRACE [HEATMAP.png|.svg] [--json]`

use std::path::Path;
use std::process::ExitCode;

use tierd_analysis::analyze::{analyze, AnalyzeOptions};
use tierd_analysis::{heatmap, stats};
use tierd_trace::{open_trace, OpenOptions};

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let json = arguments.iter().any(|argument| argument == "--json");
    let paths: Vec<&String> = arguments
        .iter()
        .filter(|argument| !argument.starts_with("--"))
        .collect();
    let Some(trace) = paths.first() else {
        eprintln!("usage: analyze_trace TRACE [HEATMAP.png|HEATMAP.svg] [--json]");
        return ExitCode::from(2);
    };
    let run = || -> Result<(), Box<dyn std::error::Error>> {
        let mut reader = open_trace(Path::new(trace), &OpenOptions::default())?;
        let stats = stats::compute(&mut *reader, &stats::StatsOptions::default())?;
        let mut reader = open_trace(Path::new(trace), &OpenOptions::default())?;
        let analysis = analyze(&mut *reader, &AnalyzeOptions::default())?;
        if json {
            println!("{}", serde_json::to_string_pretty(&stats)?);
            println!("{}", serde_json::to_string_pretty(&analysis)?);
        } else {
            println!("{}", serde_json::to_string_pretty(&stats)?);
            print!("{analysis}");
        }
        if let Some(image) = paths.get(1) {
            heatmap::write(&analysis, Path::new(image))?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
