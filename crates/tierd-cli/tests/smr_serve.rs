//! The SMR home tier live (issue 16 §3; docs/engine/smr.md):
//! `examples/configs/smr-home.toml` copied verbatim into a temporary
//! directory and served by the real binary — an emulated P3700 caching an
//! emulated Archive 8 TB SMR disk, in real time. Random small writes over
//! NBD are staged, destaged as whole bands once the volume is idle, the
//! disk's model never puts anything in its media cache, and everything
//! reads back, also after a kill -9 with writes still staged.

mod common;

use std::path::Path;
use std::time::Duration;

use common::serve::ServeProcess as Server;
use serde_json::Value;
use tierd_common::rng::{Rng, SeededRng};
use tierd_nbd::Client;

const EXAMPLE: &str = include_str!("../../../examples/configs/smr-home.toml");
/// The Archive 8 TB's band (16 tracks of 1,889,792 bytes).
const BAND: u64 = 30_236_672;

fn smr_status(dir: &Path) -> Value {
    common::status_json(dir)["volumes"][0]["cache"]["smr"].clone()
}

fn wait_for(dir: &Path, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..1200 {
        let smr = smr_status(dir);
        if done(&smr) {
            return smr;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}: {:#}", smr_status(dir));
}

fn pattern(seed: u64) -> Vec<u8> {
    let mut rng = SeededRng::new(seed);
    (0..4096).map(|_| rng.below(256) as u8).collect()
}

/// 4 KiB writes at random 4 KiB-aligned offsets inside bands 1, 2 and 5.
fn writes(seed: u64, count: u64) -> Vec<(u64, Vec<u8>)> {
    let mut rng = SeededRng::new(seed);
    (0..count)
        .map(|index| {
            let band = [1u64, 2, 5][rng.below(3) as usize];
            let at = band * BAND + rng.below(BAND / 4096 - 1) * 4096;
            (at, pattern(seed * 1000 + index))
        })
        .collect()
}

fn check(client: &mut Client, written: &[(u64, Vec<u8>)]) {
    let mut latest = std::collections::BTreeMap::new();
    for (at, data) in written {
        latest.insert(*at, data);
    }
    let mut back = vec![0u8; 4096];
    for (at, data) in latest {
        client.read(at, &mut back).unwrap();
        assert!(back == *data, "block at byte {at} differs");
    }
}

#[test]
fn the_smr_home_example_stages_destages_whole_bands_and_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    common::write_file(dir, "config.toml", EXAMPLE);
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let mut client = Client::connect_uri(&server.uri("smr")).unwrap();
    assert_eq!(client.info().size_bytes, 4 << 30);
    let smr = smr_status(dir);
    assert_eq!(smr["band_bytes"], BAND, "{smr:#}");

    // Staged, flushed, then kill -9 before the destage could run (the
    // writes keep home busy less than `smr_idle` apart): after the restart
    // the blocks read back and are destaged then.
    let mut written = writes(1, 64);
    for (at, data) in &written {
        client.write(*at, data, false).unwrap();
    }
    client.flush().unwrap();
    let smr = smr_status(dir);
    assert!(smr["staged_bytes"].as_u64().unwrap() > 0, "{smr:#}");
    drop(client);
    server.kill();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let mut client = Client::connect_uri(&server.uri("smr")).unwrap();
    check(&mut client, &written);

    // More writes, then idle: the three bands are rewritten whole, and the
    // emulated disk never wrote its media cache.
    written.extend(writes(2, 64));
    for (at, data) in &written[64..] {
        client.write(*at, data, false).unwrap();
    }
    client.flush().unwrap();
    let smr = wait_for(dir, "the destage", |smr| {
        smr["staged_bytes"] == 0 && smr["band_rewrites"].as_u64() >= Some(3)
    });
    assert_eq!(smr["unstaged_home_write_blocks"], 0, "{smr:#}");
    let model = &smr["home_model"];
    assert_eq!(model["media_cache_writes"], 0, "{smr:#}");
    assert_eq!(model["dirty_bands"], 0, "{smr:#}");
    assert_eq!(model["bands_cleaned"], 0, "{smr:#}");
    assert!(
        smr["destage_written_bytes"].as_u64().unwrap() >= 3 * BAND,
        "{smr:#}"
    );
    check(&mut client, &written);
    // The text status names it.
    let output = common::tierd_in(dir, &["status", "--config", "config.toml"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("SMR home (bands of"), "{text}");
    assert!(text.contains("SMR disk model: 0 dirty bands"), "{text}");
}
