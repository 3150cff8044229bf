//! Helpers for tests that read the real traces in `../shared/traces/`.
//!
//! The rule: CI (`CI=true`) always has that folder, so a test that needs it
//! fails there when it is missing; a user's fresh clone may not have it, so
//! the test prints why it skips and passes.

use std::path::PathBuf;

/// The shared trace folder, found from a crate's manifest directory
/// (`crates/NAME` → `../../../shared/traces`). `None` (after printing the
/// reason) when it is absent outside CI; panics when it is absent in CI.
pub fn shared_traces_dir(manifest_dir: &str) -> Option<PathBuf> {
    let directory = PathBuf::from(manifest_dir).join("../../../shared/traces");
    if directory.join("SOURCES.md").is_file() {
        return Some(directory);
    }
    let in_ci = std::env::var("CI")
        .map(|value| value == "true" || value == "1")
        .unwrap_or(false);
    assert!(
        !in_ci,
        "CI=true but the shared traces are missing at {}: CI must check them out beside the repo",
        directory.display()
    );
    eprintln!(
        "SKIP: shared traces not found at {} (clone the project with shared/ beside it to run this test)",
        directory.display()
    );
    None
}
