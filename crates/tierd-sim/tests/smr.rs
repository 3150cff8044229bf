//! The SMR home tier's staging in the simulator (`docs/engine/smr.md`):
//! it removes the slow reads paper 001 measured after random writes, and
//! leaves every other home as it was.

use tierd_sim::smr::{run_one, rw_rr, Workload};
use tierd_sim::{SimConfig, Strategy, TierStack};
use tierd_trace::{Format, IteratorReader, Op, Request};

/// Paper 001's RW→RR, scaled down: 512 MiB of random writes (~480 bands
/// dirtied, minutes of cleaning for the drive), then 2,000 random 1 MiB
/// reads (~45 s of reading at QD1).
fn small_rw_rr() -> Workload {
    let disk = tierd_device::DevicePreset::Archive8tb.default_capacity_bytes() / 4096 * 4096;
    rw_rr(7, disk, 512 << 20, 2_000)
}

/// The Archive 8 TB model's band (16 outer tracks, not a whole number of MiB).
fn band_bytes() -> u64 {
    tierd_device::model::smr::SmrConfig::archive_8tb().band_bytes
}

#[test]
fn staging_removes_the_slow_reads_after_random_writes() {
    let workload = small_rw_rr();
    let bare = run_one(&workload, "no cache", 7).unwrap();
    let staged = run_one(&workload, "staging on", 7).unwrap();
    let bare_slow = bare.directions.read_slow_fraction_100ms;
    let staged_slow = staged.directions.read_slow_fraction_100ms;
    // Without staging the drive cleans under load (paper 001: 15 %); the
    // exact share depends on the model's cleaning timing, so only its order.
    assert!(bare_slow > 0.02, "no cache: {bare_slow}");
    assert!(staged_slow <= 0.01, "staging on: {staged_slow}");
    assert!(
        staged.directions.read_p99_us * 5.0 <= bare.directions.read_p99_us,
        "p99 {} vs {}",
        staged.directions.read_p99_us,
        bare.directions.read_p99_us
    );
    let smr = staged
        .cache
        .as_ref()
        .and_then(|cache| cache.smr.as_ref())
        .unwrap();
    assert_eq!(smr.band_bytes, band_bytes());
    assert_eq!(smr.home_write_blocks, 0, "every write was staged");
    assert_eq!(staged.reads + staged.writes, workload.requests.len() as u64);
}

#[test]
fn staging_destages_whole_bands_when_home_is_idle() {
    // A few writes, then a long quiet spell: the stage empties band by band.
    let mut requests: Vec<Request> = (0..20u64)
        .map(|index| Request {
            time_ns: index * 1_000_000,
            volume: 0,
            op: Op::Write,
            offset_bytes: index * (100 << 20) + (64 << 10),
            length_bytes: 16 << 10,
            response_ns: None,
        })
        .collect();
    requests.push(Request {
        time_ns: 60_000_000_000,
        volume: 0,
        op: Op::Read,
        offset_bytes: 0,
        length_bytes: 4096,
        response_ns: None,
    });
    let workload = Workload {
        name: "quiet",
        description: "20 writes in 20 bands, then a read a minute later (synthetic)".into(),
        volume_bytes: 4 << 30,
        replay: tierd_sim::Replay::OpenLoop { speed: 1.0 },
        requests,
    };
    let staged = run_one(&workload, "staging on", 1).unwrap();
    let cache = staged.cache.as_ref().unwrap();
    let smr = cache.smr.as_ref().unwrap();
    assert_eq!(smr.band_rewrites, 20, "one rewrite per band written");
    assert_eq!(smr.destage_write_bytes, 20 * band_bytes(), "whole bands");
    assert_eq!(cache.dirty_blocks_end, 0);
    let off = run_one(&workload, "staging off", 1).unwrap();
    assert!(off.cache.as_ref().unwrap().smr.is_none());
    assert!(off.cache.as_ref().unwrap().writebacks > 0);
}

fn tiny_run(stack: TierStack, policy: &str) -> serde_json::Value {
    let requests: Vec<Request> = (0..400u64)
        .map(|index| Request {
            time_ns: index * 2_000_000,
            volume: 0,
            op: if index % 3 == 0 { Op::Write } else { Op::Read },
            offset_bytes: (index * 7_919 % 1_000) * (1 << 20),
            length_bytes: 64 << 10,
            response_ns: None,
        })
        .collect();
    let config = SimConfig::new(stack, 2 << 30);
    let mut reader = IteratorReader::new(requests.into_iter(), &["t"], Format::Tierd, "tiny");
    let run = tierd_sim::run(
        &config,
        &Strategy::parse(policy).unwrap(),
        &mut reader,
        &mut |_| {},
    )
    .unwrap();
    serde_json::to_value(&run).unwrap()
}

#[test]
fn every_run_reports_read_latency_figures() {
    for preset in ["hdd-ssd", "ssd-mem", "ssd-smr"] {
        for policy in ["none", "lru"] {
            let run = tiny_run(TierStack::preset(preset).unwrap(), policy);
            for key in [
                "read_slow_fraction_100ms",
                "read_p99_us",
                "read_mean_us",
                "write_mean_us",
            ] {
                assert!(run[key].is_number(), "{preset} {policy}: {key} missing");
            }
            assert!(run["read_p99_us"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn homes_that_are_not_smr_ignore_the_staging_switch() {
    for preset in ["hdd-ssd", "ssd-mem"] {
        let on = TierStack::preset(preset).unwrap();
        let mut off = on.clone();
        off.cache.smr_staging = !on.cache.smr_staging;
        assert_eq!(tiny_run(on, "lru"), tiny_run(off, "lru"), "{preset}");
    }
}
