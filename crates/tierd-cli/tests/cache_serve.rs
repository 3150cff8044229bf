//! A writeback cache volume end to end: `examples/configs/writeback-cache.toml`
//! copied verbatim into a temporary directory (its paths are relative to
//! it), served by the real binary, driven over NBD, `tierd status --json`
//! and `tierd cache`; `kill -9` and restarts in between.

mod common;

use std::path::Path;
use std::time::Duration;

use common::serve::ServeProcess as Server;
use serde_json::Value;
use tierd_nbd::Client;

const EXAMPLE: &str = include_str!("../../../examples/configs/writeback-cache.toml");
const MIB: u64 = 1 << 20;

fn cache_status(dir: &Path) -> Value {
    common::status_json(dir)["volumes"][0]["cache"].clone()
}

fn pattern(seed: u64, length: usize) -> Vec<u8> {
    (0..length)
        .map(|index| (seed.wrapping_mul(31).wrapping_add(index as u64 * 7) >> 3) as u8)
        .collect()
}

fn wait_for(dir: &Path, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..600 {
        let cache = cache_status(dir);
        if done(&cache) {
            return cache;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}: {:#}", cache_status(dir));
}

#[test]
fn the_writeback_cache_example_serves_survives_kill_9_warm_and_detaches() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    common::write_file(dir, "config.toml", EXAMPLE);
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let mut client = Client::connect_uri(&server.uri("cached")).unwrap();
    assert_eq!(client.info().size_bytes, 256 * MIB);
    // 4 MiB in 256 KiB writes (below the sequential cutoff of 4 MiB per run
    // is not guaranteed, so the writes skip around), flushed.
    let mut model = vec![0u8; 8 * MIB as usize];
    for (index, offset) in [3u64, 0, 5, 1, 7, 2, 6, 4].iter().enumerate() {
        let data = pattern(index as u64 + 1, 256 << 10);
        let at = offset * MIB + 4096;
        client.write(at, &data, false).unwrap();
        model[at as usize..at as usize + data.len()].copy_from_slice(&data);
    }
    client.flush().unwrap();
    let mut back = vec![0u8; model.len()];
    client.read(0, &mut back).unwrap();
    assert!(back == model, "read back differs");
    let cache = cache_status(dir);
    for key in [
        "mode",
        "block_bytes",
        "read_hit_ratio",
        "write_hit_ratio",
        "dirty_bytes",
        "occupancy_bytes",
    ] {
        assert!(cache.get(key).is_some(), "no {key} in {cache:#}");
    }
    assert_eq!(cache["mode"], "writeback");
    assert_eq!(cache["block_bytes"], 64 * 1024);
    let occupancy = cache["occupancy_bytes"].as_u64().unwrap();
    assert!(occupancy >= 2 * MIB, "{cache:#}");
    drop(client);

    // kill -9: flushed writes are readable, and the cache comes back warm.
    server.kill();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let cache = cache_status(dir);
    assert!(
        cache["occupancy_bytes"].as_u64().unwrap() >= 2 * MIB,
        "cold after restart: {cache:#}"
    );
    let mut client = Client::connect_uri(&server.uri("cached")).unwrap();
    let mut back = vec![0u8; model.len()];
    client.read(0, &mut back).unwrap();
    assert!(back == model, "flushed data differs after kill -9");
    let cache = cache_status(dir);
    assert!(
        cache["read_hit_ratio"].as_f64().unwrap() > 0.2,
        "no hits after a warm restart: {cache:#}"
    );

    // Detach online, with a client writing meanwhile.
    let output = common::tierd_in(
        dir,
        &[
            "cache",
            "--config",
            "config.toml",
            "--volume",
            "cached",
            "--mode",
            "detach",
        ],
    );
    assert!(output.status.success(), "{}", common::stderr(&output));
    for round in 0..32u64 {
        let data = pattern(100 + round, 64 << 10);
        let at = (round % 16) * 512 * 1024;
        client.write(at, &data, false).unwrap();
        model[at as usize..at as usize + data.len()].copy_from_slice(&data);
    }
    client.flush().unwrap();
    wait_for(dir, "the detach", |cache| cache["mode"] == "detached");
    drop(client);
    let status = server.stop();
    assert!(status.success(), "{}", server.stderr());
    // Detached persists across a restart; the data is all on home.
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    assert_eq!(cache_status(dir)["mode"], "detached");
    let mut client = Client::connect_uri(&server.uri("cached")).unwrap();
    let mut back = vec![0u8; model.len()];
    client.read(0, &mut back).unwrap();
    assert!(back == model, "data differs after the detach");
    // And back to writeback online.
    let output = common::tierd_in(
        dir,
        &[
            "cache",
            "--config",
            "config.toml",
            "--volume",
            "cached",
            "--mode",
            "writeback",
        ],
    );
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(cache_status(dir)["mode"], "writeback");
    // A mode that does not exist is refused naming the choices.
    let output = common::tierd_in(
        dir,
        &[
            "cache",
            "--config",
            "config.toml",
            "--volume",
            "cached",
            "--mode",
            "fast",
        ],
    );
    assert!(!output.status.success());
    assert!(common::stderr(&output).contains("writethrough"));
}
