//! Replicas in free HDD space end to end (paper 003 in kind): the
//! simulator drives the replica manager on the hdd-7200 stack over the
//! synthetic application-start traces.

use tierd_sim::replicas::{ReplicaConfig, ReplicaRun, ReplicaSetting};
use tierd_sim::{SimConfig, Strategy, TierStack};
use tierd_trace::{Format, IteratorReader};

fn run(preset: &str, setting: ReplicaSetting, stack: &str) -> Result<tierd_sim::RunResult, String> {
    let preset = tierd_synth::preset(preset).unwrap();
    let mut config = SimConfig::new(TierStack::preset(stack).unwrap(), preset.volume_bytes);
    config.replicas = Some(ReplicaRun::new(setting, &ReplicaConfig::default()));
    let generator = tierd_synth::Generator::new(preset, 1, preset.default_hours).unwrap();
    let mut reader = IteratorReader::new(generator, &[preset.volume_name], Format::Tierd, "test");
    tierd_sim::run(
        &config,
        &Strategy::parse("none").unwrap(),
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
