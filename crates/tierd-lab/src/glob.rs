//! Trace paths and globs as the grid files take them (`*` and `?` in the
//! file name), relative to the directory tierd runs in.

use std::path::{Path, PathBuf};

use tierd_sim::matrix::glob_matches;

/// A trace path, or the files a glob in its last component matches
/// (sorted); `true` when it was a glob.
pub fn expand(pattern: &str) -> Result<(Vec<PathBuf>, bool), String> {
    let path = Path::new(pattern);
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    if !name.contains(['*', '?']) {
        if !path.is_file() {
            return Err(format!(
                "{pattern}: no such file (paths are relative to the directory tierd runs in)"
            ));
        }
        return Ok((vec![path.to_path_buf()], false));
    }
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let entries = std::fs::read_dir(&directory)
        .map_err(|error| format!("{}: cannot list: {error}", directory.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|candidate| {
            candidate.is_file()
                && candidate
                    .file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|candidate| glob_matches(name, candidate))
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!(
            "{pattern}: the glob matches no file (`*` and `?` in the file name are globs)"
        ));
    }
    Ok((paths, true))
}
