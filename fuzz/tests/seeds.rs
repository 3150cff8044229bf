//! Runs every fuzz target's body over its checked-in seed corpus
//! (`fuzz/seeds/<target>/`), without libFuzzer:
//! `cargo test --manifest-path fuzz/Cargo.toml`. Also re-runs any crash
//! artifacts a fuzzing run left in `fuzz/artifacts/<target>/` when
//! `TIERD_FUZZ_ARTIFACTS=1`, to reproduce them under the test harness.

use std::path::Path;

fn files(directory: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = entries
        .map(|entry| entry.expect("list the directory").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    paths
}

#[test]
fn every_target_runs_its_seeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, body) in tierd_fuzz::TARGETS {
        let seeds = files(&root.join("seeds").join(name));
        assert!(
            seeds.len() >= 2,
            "{name}: expected at least two seeds in fuzz/seeds/{name}"
        );
        let mut inputs = seeds;
        if std::env::var_os("TIERD_FUZZ_ARTIFACTS").is_some() {
            inputs.extend(files(&root.join("artifacts").join(name)));
        }
        for path in inputs {
            let data = std::fs::read(&path).expect("read a seed");
            eprintln!("{name}: {}", path.display());
            body(&data);
        }
    }
}

#[test]
fn the_target_list_matches_the_fuzz_targets_directory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut on_disk: Vec<String> = files(&root.join("fuzz_targets"))
        .iter()
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_string()))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = tierd_fuzz::TARGETS
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "TARGETS in src/lib.rs and fuzz_targets/ differ"
    );
}
