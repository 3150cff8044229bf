//! The directions the papers report, pinned on short versions of the
//! synthetic presets (not the exact numbers: those are in `EVIDENCE.md`,
//! from the full windows). Every preset here is synthetic (`tierd-synth`),
//! calibrated to the papers' published figures — not the real MSR traces.
//!
//! - paper 000 Table 4: OTF-AST's gain over the HDD alone (OTF-AST as
//!   Table 4 ran it) is largest on usr_1 and smallest on proj_4, with web_2
//!   and proj_2 between (replayed ×8 and ×2, HDD saturated);
//! - paper 002 Table 5: ATSMF answers ≥ 20 % faster than the SSD alone on
//!   src1_0 and usr_1;
//! - paper 002 Table 6: ATSMF serves more IO from memory than a FIFO cache
//!   given the same memory (proj_2), and its memory access ratio is above
//!   the cache's hit ratio (the paper's measure for FlashCache and ARC,
//!   002 §3.3 and §6.1) on src1_0 and dbt2;
//! - `none` moves nothing.

use tierd_policy::policies::otf_ast::OtfAstConfig;
use tierd_policy::PolicyConfig;
use tierd_sim::{Replay, RunResult, SimConfig, Strategy, TierStack};
use tierd_trace::{Format, IteratorReader};

/// Replays `hours` of `preset` (seed 1) at `speed` on the `stack` preset
/// under `strategy`, each policy at its paper's period.
fn replay_with(
    preset: &str,
    hours: f64,
    speed: f64,
    stack: &str,
    strategy: &Strategy,
    cache_bytes: Option<u64>,
) -> RunResult {
    let preset = tierd_synth::preset(preset).unwrap();
    let mut config = SimConfig::new(TierStack::preset(stack).unwrap(), preset.volume_bytes);
    config.period_per_policy = true;
    config.replay = Replay::OpenLoop { speed };
    config.cache_bytes = cache_bytes;
    let generator = tierd_synth::Generator::new(preset, 1, hours).unwrap();
    let mut reader =
        IteratorReader::new(generator, &[preset.volume_name], Format::Tierd, preset.name);
    tierd_sim::run(&config, strategy, &mut reader, &mut |_| {}).unwrap()
}

/// [`replay_with`] the named policy at its defaults.
fn replay(
    preset: &str,
    hours: f64,
    speed: f64,
    stack: &str,
    policy: &str,
    cache_bytes: Option<u64>,
) -> RunResult {
    let strategy = Strategy::parse(policy).unwrap();
    replay_with(preset, hours, speed, stack, &strategy, cache_bytes)
}

/// First-hour iops of `otf-ast` over `none`, minus 1 (paper 000 Table 4's
/// gain), with OTF-AST as Table 4 ran it: without the §5.4 persistent-IO
/// rule. The two runs go on two threads (the HDD model is the slow part in
/// a debug build).
fn otf_ast_gain(preset: &str, hours: f64, speed: f64) -> f64 {
    let table_4 = OtfAstConfig {
        promote_persistent: false,
        ..OtfAstConfig::default()
    };
    let otf_ast = Strategy::Tiering(PolicyConfig::OtfAst(table_4));
    let (home_only, tiered) = std::thread::scope(|scope| {
        let home_only = scope.spawn(|| replay(preset, hours, speed, "hdd-ssd", "none", None));
        let tiered = replay_with(preset, hours, speed, "hdd-ssd", &otf_ast, None);
        (home_only.join().unwrap(), tiered)
    });
    assert!(
        home_only.home_util > 0.95,
        "{preset}: the HDD must be saturated, util {}",
        home_only.home_util
    );
    tiered.avg_iops_first_hour / home_only.avg_iops_first_hour - 1.0
}

#[test]
fn otf_ast_gains_most_on_usr_1_and_least_on_proj_4() {
    // Half an hour of usr_1, three hours of web_2 (its band needs about
    // half an hour of moves, at one a minute, before the SSD holds its
    // area), an hour of proj_2 and a quarter of proj_4, at the paper's
    // factors. The paper's order is usr1 > proj2 > web2 > proj4; ours puts
    // web_2 above proj_2 (EVIDENCE.md says why), so that pair is not pinned.
    let (usr_1, web_2, proj_2, proj_4) = std::thread::scope(|scope| {
        let web_2 = scope.spawn(|| otf_ast_gain("web_2", 3.0, 8.0));
        let usr_1 = otf_ast_gain("usr_1", 0.5, 8.0);
        let proj_2 = otf_ast_gain("proj_2", 1.0, 2.0);
        let proj_4 = otf_ast_gain("proj_4", 0.25, 2.0);
        (usr_1, web_2.join().unwrap(), proj_2, proj_4)
    });
    eprintln!(
        "otf-ast gain: usr_1 {usr_1:+.3}, web_2 {web_2:+.3}, proj_2 {proj_2:+.3}, proj_4 {proj_4:+.3}"
    );
    assert!(usr_1 > 0.15, "usr_1 gain {usr_1}");
    for (name, gain) in [("web_2", web_2), ("proj_2", proj_2)] {
        assert!(usr_1 > gain, "usr_1 {usr_1} vs {name} {gain}");
        assert!(gain > proj_4, "{name} {gain} vs proj_4 {proj_4}");
    }
}

#[test]
fn atsmf_answers_at_least_20_percent_faster_than_flash_only() {
    for preset in ["src1_0", "usr_1"] {
        let flash_only = replay(preset, 0.25, 1.0, "ssd-mem", "none", None);
        let atsmf = replay(preset, 0.25, 1.0, "ssd-mem", "atsmf", None);
        let ratio = atsmf.avg_response_us / flash_only.avg_response_us;
        eprintln!("atsmf response ratio on {preset}: {ratio:.3}");
        assert!(ratio <= 0.8, "{preset}: ratio {ratio}");
        assert!(atsmf.moves > 0);
    }
}

/// A quarter hour of `preset` on `ssd-mem` under ATSMF, then under a FIFO
/// page cache given the most memory ATSMF used (as 002 §5.2 sized
/// FlashCache); returns both runs and that memory in bytes.
fn atsmf_and_a_fifo_cache_of_its_peak(preset: &str) -> (RunResult, RunResult, u64) {
    let atsmf = replay(preset, 0.25, 1.0, "ssd-mem", "atsmf", None);
    let memory = atsmf.fast_bytes_max;
    assert!(memory > 0, "{preset}: atsmf used no memory");
    let fifo = replay(preset, 0.25, 1.0, "ssd-mem", "fifo", Some(memory));
    assert_eq!(
        fifo.cache.as_ref().unwrap().capacity_pages,
        memory / 4096,
        "the cache gets the memory ATSMF used at most"
    );
    (atsmf, fifo, memory)
}

#[test]
fn atsmf_serves_more_from_memory_than_a_fifo_cache_of_the_same_size() {
    let (atsmf, fifo, memory) = atsmf_and_a_fifo_cache_of_its_peak("proj_2");
    eprintln!(
        "memory access ratio on proj_2 with {:.1} GB: atsmf {:.3}, fifo {:.3}",
        memory as f64 / 1e9,
        atsmf.fast_io_share,
        fifo.fast_io_share
    );
    assert!(
        atsmf.fast_io_share > fifo.fast_io_share,
        "atsmf {} vs fifo {}",
        atsmf.fast_io_share,
        fifo.fast_io_share
    );
}

#[test]
fn atsmf_memory_access_ratio_is_above_the_hit_ratio_of_a_fifo_cache_of_the_same_size() {
    for preset in ["src1_0", "dbt2"] {
        let (atsmf, fifo, memory) = atsmf_and_a_fifo_cache_of_its_peak(preset);
        let cache = fifo.cache.as_ref().unwrap();
        eprintln!(
            "{preset} with {:.1} GB: atsmf memory access ratio {:.3}, fifo hit ratio {:.3} \
             (served from memory, write allocations included: {:.3})",
            memory as f64 / 1e9,
            atsmf.fast_io_share,
            cache.hit_ratio,
            cache.fast_access_ratio
        );
        assert!(
            atsmf.fast_io_share > cache.hit_ratio,
            "{preset}: atsmf {} vs fifo hit ratio {}",
            atsmf.fast_io_share,
            cache.hit_ratio
        );
    }
}

#[test]
fn none_moves_nothing() {
    let run = replay("usr_1", 0.25, 8.0, "hdd-ssd", "none", None);
    assert!(run.requests > 0);
    assert_eq!(run.moves, 0);
    assert_eq!(run.moves_unfinished, 0);
    assert_eq!(run.migrated_bytes, 0);
    assert_eq!(run.fast_bytes_max, 0);
    assert_eq!(run.fast_io_share, 0.0);
    assert_eq!(run.tiers[0].user_ios, 0);
}
