//! The trace lab as a library: what `tierd sim`, `tierd trace stats
//! --json`, `tierd trace analyze --json` and `tierd sweep` compute, from
//! plain settings rather than command-line arguments. The `tierd` binary
//! parses its arguments into these settings and prints; the Python module
//! (crates/tierd-py) converts Python arguments into the same settings, so
//! both give the same numbers from the same code.

pub mod glob;
pub mod parquet;
pub mod progress;
pub mod sim;
pub mod sweep;
pub mod sweep_report;
pub mod trace;

/// A failure to report to the user: the message says what went wrong, where,
/// and what to do. The CLI prints it after `tierd: error:`; Python raises it.
#[derive(Debug)]
pub struct LabError(pub String);

impl<E: std::error::Error> From<E> for LabError {
    fn from(error: E) -> Self {
        LabError(error.to_string())
    }
}

impl std::fmt::Display for LabError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}
