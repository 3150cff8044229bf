//! `tierd dst`: deterministic simulation campaigns over the engine core
//! (`tierd_engine::dst`). One root seed per run derives everything; a failing
//! seed is printed with its derived configuration and the command that
//! replays it exactly.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clap::Args;
use tierd_engine::dst::{derive_config, run_seed, DstReport};

use crate::CliError;

#[derive(Args)]
pub struct DstArgs {
    /// How many seeds to run (1..=N after --first-seed).
    #[arg(long, default_value_t = 200)]
    pub seeds: u64,
    /// The first seed of the campaign.
    #[arg(long, default_value_t = 1)]
    pub first_seed: u64,
    /// Run exactly this seed (also read from TIERD_SEED), printing its
    /// derived configuration.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Operations per seed.
    #[arg(long, default_value_t = 600)]
    pub steps: u32,
    /// Worker threads (default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DstArgs) -> Result<(), CliError> {
    let single = args.seed.or_else(|| {
        std::env::var("TIERD_SEED")
            .ok()
            .and_then(|text| text.parse().ok())
    });
    let seeds: Vec<u64> = match single {
        Some(seed) => vec![seed],
        None => (args.first_seed..args.first_seed + args.seeds).collect(),
    };
    if let Some(seed) = single {
        // Printed before the run, so a seed that hangs or crashes the
        // process still shows what it derived.
        let config = serde_json::to_string(&derive_config(seed, args.steps)).unwrap_or_default();
        println!("seed {seed}: config {config}");
    }
    let scratch = std::env::temp_dir().join(format!("tierd-dst-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .map_err(|error| CliError(format!("cannot create {}: {error}", scratch.display())))?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |count| count.get()))
        .max(1);
    let next = Arc::new(AtomicU64::new(0));
    let reports: Arc<Mutex<Vec<(u64, String, DstReport)>>> = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let next = next.clone();
            let reports = reports.clone();
            let seeds = &seeds;
            let scratch = &scratch;
            let steps = args.steps;
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(seed) = seeds.get(index) else { break };
                let (config, report) = run_seed(*seed, steps, scratch);
                let config = serde_json::to_string(&config).unwrap_or_default();
                reports.lock().push((*seed, config, report));
            });
        }
    });
    let _ = std::fs::remove_dir_all(&scratch);
    let mut reports = Arc::try_unwrap(reports)
        .map_err(|_| CliError("internal: reports still shared".into()))?
        .into_inner();
    reports.sort_by_key(|(seed, _, _)| *seed);
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let mut operations = 0;
    let mut moves = 0;
    let mut failures = Vec::new();
    // Cache volumes by the mode they started in.
    let mut cache_seeds: BTreeMap<String, u64> = BTreeMap::new();
    // Seeds on reduced tiers by their reduction mode.
    let mut reduce_seeds: BTreeMap<String, u64> = BTreeMap::new();
    let mut replica_seeds = 0u64;
    for (seed, config, report) in &reports {
        if report.replicas {
            replica_seeds += 1;
        }
        if let Some(mode) = &report.cache_mode {
            *cache_seeds.entry(mode.clone()).or_insert(0) += 1;
        }
        if let Some(mode) = &report.reduce_mode {
            *reduce_seeds.entry(mode.clone()).or_insert(0) += 1;
        }
        operations += report.operations;
        moves += report.moves_completed;
        for (kind, count) in &report.faults {
            *faults.entry(kind.clone()).or_insert(0) += count;
        }
        if single.is_some() {
            println!("seed {seed}: digest {:016x}", report.digest);
        }
        if let Some(failure) = &report.failure {
            failures.push(serde_json::json!({
                "seed": seed,
                "failure": failure,
                "config": serde_json::from_str::<serde_json::Value>(config).unwrap_or_default(),
                "replay": format!("tierd dst --seed {seed} --steps {}", args.steps),
            }));
        }
    }
    if args.json {
        let summary = serde_json::json!({
            "seeds_run": reports.len(),
            "failures": failures.len(),
            "operations": operations,
            "moves_completed": moves,
            "cache_volumes": cache_seeds.values().sum::<u64>(),
            "cache_volumes_by_mode": cache_seeds,
            "reduced_seeds": reduce_seeds.values().sum::<u64>(),
            "reduced_seeds_by_mode": reduce_seeds,
            "replicated_home_seeds": replica_seeds,
            "faults": faults,
            "failed_seeds": failures,
        });
        println!("{summary:#}");
    } else {
        for failure in &failures {
            println!(
                "FAILED seed {}: {}\n  config: {}\n  replay: {}",
                failure["seed"],
                failure["failure"].as_str().unwrap_or(""),
                failure["config"],
                failure["replay"].as_str().unwrap_or("")
            );
        }
        let kinds: Vec<String> = faults
            .iter()
            .map(|(kind, count)| format!("{kind}={count}"))
            .collect();
        let modes: Vec<String> = cache_seeds
            .iter()
            .map(|(mode, count)| format!("{mode} {count}"))
            .collect();
        let reduce_modes: Vec<String> = reduce_seeds
            .iter()
            .map(|(mode, count)| format!("{mode} {count}"))
            .collect();
        println!(
            "seeds run {}, failures {}, operations {operations}, moves completed {moves}, cache volumes {} ({}), reduced tiers {} ({}), replicated homes {replica_seeds}, faults injected by kind: {}",
            reports.len(),
            failures.len(),
            cache_seeds.values().sum::<u64>(),
            modes.join(", "),
            reduce_seeds.values().sum::<u64>(),
            reduce_modes.join(", "),
            kinds.join(" ")
        );
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError(format!(
            "{} of {} seeds failed",
            failures.len(),
            reports.len()
        )))
    }
}
