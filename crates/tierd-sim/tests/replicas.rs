//! Replicas in free HDD space end to end (paper 003 in kind): the
//! simulator drives the replica manager on the hdd-7200 stack over the
//! synthetic application-start traces.

use tierd_sim::replicas::{ReplicaConfig, ReplicaRun, ReplicaSetting};
use tierd_sim::{SimConfig, Strategy, TierStack};
use tierd_trace::{Format, IteratorReader};

fn run(preset: &str, setting: ReplicaSetting, stack: &str) -> Result<tierd_sim::RunResult, String> {
    run_with(preset, setting, stack, "none")
}

fn run_with(
    preset: &str,
    setting: ReplicaSetting,
    stack: &str,
    policy: &str,
) -> Result<tierd_sim::RunResult, String> {
    run_sized(preset, setting, stack, policy, None)
}

fn run_sized(
    preset: &str,
    setting: ReplicaSetting,
    stack: &str,
    policy: &str,
    fast_bytes: Option<u64>,
) -> Result<tierd_sim::RunResult, String> {
    let preset = tierd_synth::preset(preset).unwrap();
    let mut stack = TierStack::preset(stack).unwrap();
    if fast_bytes.is_some() {
        stack.tiers[0].capacity_bytes = fast_bytes;
    }
    let mut config = SimConfig::new(stack, preset.volume_bytes);
    config.replicas = Some(ReplicaRun::new(setting, &ReplicaConfig::default()));
    let generator = tierd_synth::Generator::new(preset, 1, preset.default_hours).unwrap();
    let mut reader = IteratorReader::new(generator, &[preset.volume_name], Format::Tierd, "test");
    tierd_sim::run(
        &config,
        &Strategy::parse(policy).unwrap(),
        &mut reader,
        &mut |_| {},
    )
    .map_err(|error| error.to_string())
}

#[test]
fn each_setting_cuts_disk_access_of_the_last_start() {
    for preset in ["app-firefox", "app-calc"] {
        let mut last = f64::MAX;
        for setting in ReplicaSetting::ALL {
            let result = run(preset, setting, "hdd-7200").unwrap();
            assert_eq!(result.replicas.as_deref(), Some(setting.name()));
            let replica = result.replica.unwrap();
            let total = result.disk_access_ms.unwrap();
            assert!(total > 0.0);
            let start = replica.last_session_disk_access_ms;
            assert!(
                start < last,
                "{preset} {}: {start} ms, before {last}",
                setting.name()
            );
            last = start;
            if setting != ReplicaSetting::Off {
                assert!(replica.stats.copies_made > 0 && replica.stats.reads_from_replicas > 0);
                assert!(replica.copy_busy_ms > 0.0, "copies are charged to the disk");
            }
        }
    }
}

#[test]
fn replicas_need_an_hdd_home() {
    let error = run("app-firefox", ReplicaSetting::Many, "ssd-mem").unwrap_err();
    assert!(error.contains("HDD"), "{error}");
}

/// Beside a block cache (hdd-ssd: an SSD caching the disk): the cache's
/// reads of home are routed too. A cache that keeps the whole start (LRU on
/// the stack's 64 GB SSD) leaves no recurring home reads, so no copies are
/// made and the disk time is the same as without replicas; one too small
/// to keep it (2 MiB) still reads the start from the disk each time, and
/// gets the copies and the cut.
#[test]
fn beside_a_block_cache_the_caches_home_reads_are_routed() {
    let lru_off = run_with("app-firefox", ReplicaSetting::Off, "hdd-ssd", "lru").unwrap();
    let lru_many = run_with("app-firefox", ReplicaSetting::Many, "hdd-ssd", "lru").unwrap();
    assert_eq!(lru_many.replica.as_ref().unwrap().stats.copies_made, 0);
    assert_eq!(lru_off.disk_access_ms, lru_many.disk_access_ms);
    let small = Some(2 << 20);
    let off = run_sized("app-firefox", ReplicaSetting::Off, "hdd-ssd", "lru", small).unwrap();
    let many = run_sized("app-firefox", ReplicaSetting::Many, "hdd-ssd", "lru", small).unwrap();
    let replica = many.replica.unwrap();
    assert!(replica.stats.copies_made > 0 && replica.stats.reads_from_replicas > 0);
    assert!(
        replica.last_session_disk_access_ms < off.replica.unwrap().last_session_disk_access_ms,
        "replicas beside the cache did not cut the last start"
    );
}
