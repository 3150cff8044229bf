//! Deterministic simulation testing: many seeds of random workloads, faults
//! and crashes through the engine core, checked sector by sector
//! (`tierd_engine::dst`). `TIERD_SEED=N` runs one seed; `TIERD_DST_SEEDS=N`
//! changes how many.

use tierd_engine::dst::run_seed;

const STEPS: u32 = 600;

#[test]
fn seeds_hold_every_invariant() {
    let scratch = tempfile::tempdir().unwrap();
    let seeds: Vec<u64> = match std::env::var("TIERD_SEED") {
        Ok(seed) => vec![seed.parse().expect("TIERD_SEED must be a number")],
        Err(_) => {
            let count: u64 = std::env::var("TIERD_DST_SEEDS")
                .ok()
                .and_then(|text| text.parse().ok())
                .unwrap_or(200);
            (1..=count).collect()
        }
    };
    let mut failures = Vec::new();
    let mut crashes = 0;
    let mut moves = 0;
    for seed in &seeds {
        let (config, report) = run_seed(*seed, STEPS, scratch.path());
        crashes += report.faults.get("crashes").copied().unwrap_or(0);
        moves += report.moves_completed;
        if let Some(failure) = &report.failure {
            failures.push(format!(
                "seed {seed}: {failure}\n  config: {}\n  replay: TIERD_SEED={seed} cargo test -p tierd-engine --test dst",
                serde_json::to_string(&config).unwrap()
            ));
        }
    }
    println!(
        "{} seeds, {crashes} crashes, {moves} moves completed, {} failures",
        seeds.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The campaign must really exercise crashes and moves.
    if seeds.len() >= 50 {
        assert!(crashes >= seeds.len() as u64, "too few crashes: {crashes}");
        assert!(moves >= seeds.len() as u64, "too few moves: {moves}");
    }
}

#[test]
fn same_seed_same_final_state() {
    let scratch = tempfile::tempdir().unwrap();
    for seed in [3, 17, 101] {
        let (_, first) = run_seed(seed, STEPS, scratch.path());
        let (_, second) = run_seed(seed, STEPS, scratch.path());
        assert_eq!(first.failure, None, "seed {seed}");
        assert_eq!(first.digest, second.digest, "seed {seed}");
        assert_eq!(first.faults, second.faults, "seed {seed}");
        assert_ne!(first.digest, 0);
    }
}
