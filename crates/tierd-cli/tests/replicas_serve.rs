//! Replicas live (issue 17; docs/replicas.md): `examples/configs/hdd-replicas.toml`
//! copied verbatim into a temporary directory and served by the real
//! binary — one emulated WD1200JB disk, in real time. A read group whose
//! members lie far apart recurs; copies of the far members are made near
//! the group in idle time and reads are served from them; a write to a
//! replicated extent drops its copy first (and the group, recurring, has
//! it copied again); and after a kill -9 the copies
//! journaled current are still used, with every byte the user's.

mod common;

use std::path::Path;
use std::time::Duration;

use common::serve::ServeProcess as Server;
use serde_json::Value;
use tierd_nbd::Client;

const EXAMPLE: &str = include_str!("../../../examples/configs/hdd-replicas.toml");
const GIB: u64 = 1 << 30;
const EXTENT: u64 = 64 << 10;

fn replicas(dir: &Path) -> Value {
    common::status_json(dir)["volumes"][0]["tiers"][0]["replicas"].clone()
}

fn wait_for(dir: &Path, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..600 {
        let status = replicas(dir);
        if done(&status) {
            return status;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}: {:#}", replicas(dir));
}

/// A cluster of 8 extents at 30 GiB and three far members (two at 80 GiB,
/// one at 100 GiB), read interleaved as an application start reads its
/// binary and its libraries (paper 003 Fig. 4's layout).
fn group() -> Vec<u64> {
    let cluster: Vec<u64> = (0..8).map(|index| 30 * GIB + index * EXTENT).collect();
    let far = [80 * GIB, 80 * GIB + EXTENT, 100 * GIB];
    vec![
        cluster[0], cluster[1], far[0], cluster[2], cluster[3], far[1], cluster[4], cluster[5],
        far[2], cluster[6], cluster[7],
    ]
}

fn data(at: u64, version: u8) -> Vec<u8> {
    (0..EXTENT)
        .map(|index| ((at / EXTENT) as u8).wrapping_mul(7) ^ version ^ (index / 4096) as u8)
        .collect()
}

/// Reads the group in order, checking each extent; then stays quiet past
/// the session gap (1 s).
fn session(client: &mut Client, expected: &dyn Fn(u64) -> Vec<u8>) {
    let mut back = vec![0u8; EXTENT as usize];
    for at in group() {
        client.read(at, &mut back).unwrap();
        assert!(back == expected(at), "extent at byte {at} differs");
    }
    std::thread::park_timeout(Duration::from_millis(1500));
}

#[test]
fn the_hdd_replicas_example_copies_far_members_reads_them_and_keeps_them_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    common::write_file(dir, "config.toml", EXAMPLE);
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    for at in group() {
        client.write(at, &data(at, 0), false).unwrap();
    }
    // Other data, read later to push the group out of the disk's buffer
    // (16 segments of 512 KiB: the copier has just read the primaries, and
    // the model rightly prices them as buffer hits until then).
    let others: Vec<u64> = (0..32)
        .map(|index| 60 * GIB + index * 128 * (1 << 20))
        .collect();
    for at in &others {
        client.write(*at, &data(*at, 1), false).unwrap();
    }
    client.flush().unwrap();
    let status = replicas(dir);
    assert_eq!(status["allocated_extents"], 11 + 32, "{status:#}");

    let original = |at: u64| data(at, 0);
    session(&mut client, &original);
    session(&mut client, &original);
    // The second session closes once quiet; copies follow in idle time.
    let status = wait_for(dir, "three copies", |status| {
        status["current_copies"].as_u64() >= Some(3)
    });
    assert_eq!(status["replicated_extents"], 3, "{status:#}");
    let mut back = vec![0u8; EXTENT as usize];
    for at in &others {
        client.read(*at, &mut back).unwrap();
        assert!(back == data(*at, 1));
    }
    std::thread::park_timeout(Duration::from_millis(1500));
    session(&mut client, &original);
    let status = replicas(dir);
    assert!(
        status["reads_from_replicas"].as_u64() >= Some(3),
        "{status:#}"
    );
    assert!(
        status["seek_distance_saved_bytes"].as_i64() > Some(50 * GIB as i64),
        "{status:#}"
    );
    // The text status names them.
    let output = common::tierd_in(dir, &["status", "--config", "config.toml"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("replicas: 3 extents replicated"), "{text}");

    // A write to a replicated extent drops its copy before it lands.
    let changed = 100 * GIB;
    let mut new = data(changed, 0);
    new[..4096].copy_from_slice(&[0xEE; 4096]);
    client.write(changed, &new[..4096], false).unwrap();
    let status = replicas(dir);
    assert_eq!(status["current_copies"], 2, "{status:#}");
    assert_eq!(status["dropped_by_writes"], 1, "{status:#}");
    let latest = |at: u64| {
        if at == changed {
            new.clone()
        } else {
            data(at, 0)
        }
    };
    // The group recurs: the member whose copy the write dropped is copied
    // again (its new data), in idle time.
    session(&mut client, &latest);
    client.flush().unwrap();
    let status = wait_for(dir, "the changed member copied again", |status| {
        status["current_copies"].as_u64() >= Some(3)
    });
    assert_eq!(status["copies_made"], 4, "{status:#}");

    // kill -9, restart: the three copies journaled current are used again,
    // the new one holding the new data.
    drop(client);
    server.kill();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    let status = replicas(dir);
    assert_eq!(status["current_copies"], 3, "{status:#}");
    assert_eq!(status["allocated_extents"], 11 + 32, "{status:#}");
    session(&mut client, &latest);
    let status = replicas(dir);
    assert!(
        status["reads_from_replicas"].as_u64() >= Some(3),
        "{status:#}"
    );

    // BLOCK_STATUS base:allocation (`nbdinfo --map`): the written extents
    // are data, the rest of the disk (and the copies in it) holes.
    if common::tools::require_tool("nbdinfo") {
        let output = common::tools::run(
            common::tools::tool("nbdinfo")
                .args(["--map", "--json"])
                .arg(server.uri("vol0")),
        );
        let json: Value = serde_json::from_slice(&output.stdout).unwrap();
        let mut data: Vec<(u64, u64)> = Vec::new();
        for extent in json.as_array().expect("extents") {
            if extent["type"] == 0 {
                let offset = extent["offset"].as_u64().unwrap();
                let length = extent["length"].as_u64().unwrap();
                match data.last_mut() {
                    Some(last) if last.1 == offset => last.1 += length,
                    _ => data.push((offset, offset + length)),
                }
            }
        }
        let mut expected: Vec<(u64, u64)> = vec![
            (30 * GIB, 30 * GIB + 8 * EXTENT),
            (80 * GIB, 80 * GIB + 2 * EXTENT),
            (100 * GIB, 100 * GIB + EXTENT),
        ];
        expected.extend(others.iter().map(|at| (*at, at + EXTENT)));
        expected.sort_unstable();
        assert_eq!(data, expected, "nbdinfo --map: {json}");
    }

    // Space never written reads as zeroes; a trim frees an extent.
    let mut back = vec![0xFFu8; EXTENT as usize];
    client.read(70 * GIB, &mut back).unwrap();
    assert!(back.iter().all(|byte| *byte == 0));
    client.trim(30 * GIB, EXTENT as u32, false).unwrap();
    client.flush().unwrap();
    let status = replicas(dir);
    assert_eq!(status["allocated_extents"], 10 + 32, "{status:#}");
}
