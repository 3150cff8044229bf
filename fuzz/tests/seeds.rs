//! Runs every fuzz target's body over its checked-in seed corpus
//! (`fuzz/seeds/<target>/`), without libFuzzer:
//! `cargo test --manifest-path fuzz/Cargo.toml`. Also re-runs any crash
//! artifacts a fuzzing run left in `fuzz/artifacts/<target>/` when
//! `TIERD_FUZZ_ARTIFACTS=1`, to reproduce them under the test harness.
//! `TIERD_FUZZ_WRITE_SEEDS=1` rewrites the built seeds of `nbd_client`.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use tierd_fuzz::alloc_watch;
use tierd_fuzz::nbd_client;

// The same counting allocator as the nbd_client fuzz binary, so its memory
// bounds are checked here too.
#[global_allocator]
static ALLOCATOR: alloc_watch::Watching = alloc_watch::Watching;

/// The allocation counts are process-wide: tests that run targets or
/// allocate on purpose take turns.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

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
    let _turn = one_at_a_time();
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

/// The nbd_client seeds are built by `nbd_client::seeds()`: the files must
/// be what the builders make, and each session must end as built (the
/// valid ones answer every request and disconnect cleanly, so the seeds
/// reach the transmission phase).
#[test]
fn nbd_client_seeds_are_built_and_end_as_expected() {
    let _turn = one_at_a_time();
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/nbd_client");
    let write = std::env::var_os("TIERD_FUZZ_WRITE_SEEDS").is_some();
    let seeds = nbd_client::seeds();
    let mut total_bytes = 0;
    for (name, input, expected) in &seeds {
        let path = directory.join(name);
        if write {
            std::fs::create_dir_all(&directory).expect("create the seed directory");
            std::fs::write(&path, input).expect("write a seed");
        }
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert!(
            on_disk == *input,
            "{}: differs from nbd_client::seeds(); rewrite with TIERD_FUZZ_WRITE_SEEDS=1",
            path.display()
        );
        total_bytes += input.len();
        let outcome = nbd_client::session(input);
        assert!(outcome.matches(*expected), "{name}: {outcome:?}");
    }
    assert_eq!(
        files(&directory).len(),
        seeds.len(),
        "stray files in {}",
        directory.display()
    );
    assert!(total_bytes < 12 * 1024, "{total_bytes} bytes of seeds");
}

/// The memory bound of nbd_client can fail: the watcher sees a large
/// allocation made between a reset and the check.
#[test]
fn the_allocation_watcher_sees_a_large_allocation() {
    let _turn = one_at_a_time();
    assert!(alloc_watch::installed());
    alloc_watch::reset();
    let large = std::hint::black_box(vec![0u8; nbd_client::MAX_ALLOCATION_BYTES + 1]);
    assert!(alloc_watch::largest_bytes() > nbd_client::MAX_ALLOCATION_BYTES);
    drop(large);
}
