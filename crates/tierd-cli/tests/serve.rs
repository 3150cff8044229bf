//! `tierd serve`, `tierd status` and `tierd move` end to end: the real binary
//! in a temporary directory, driven over NBD (our client), the admin socket
//! and the metrics endpoint. Every server is killed when its guard drops.
//! Waits have generous deadlines that fail loudly; nothing asserts speed.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::serve::ServeProcess as Server;
use serde_json::Value;
use tierd_common::clock::{Clock, SystemClock};
use tierd_nbd::Client;

const MIB: u64 = 1 << 20;
/// How long moves get to finish.
const MOVE_DEADLINE_NS: u64 = 120_000_000_000;

/// The shared small stack (`common::small_stack_config`) with a memory
/// fast tier, data in `data`.
fn small_config(top: &str, volume_extra: &str) -> String {
    common::small_stack_config("data", top, common::FastTier::Memory, volume_extra)
}

/// `tierd move` of `segment` of vol0 to `tier`, with the test's config.
fn tierd_move(dir: &Path, segment: u32, tier: &str) -> Output {
    let segment = segment.to_string();
    common::tierd_in(
        dir,
        &[
            "move",
            "--config",
            "config.toml",
            "--volume",
            "vol0",
            "--segment",
            &segment,
            "--to",
            tier,
        ],
    )
}

fn move_segment(dir: &Path, segment: u32, tier: &str) {
    let output = tierd_move(dir, segment, tier);
    assert!(
        output.status.success(),
        "tierd move failed:\n{}",
        common::stderr(&output)
    );
}

/// Polls status until `done` holds for the volume, or fails loudly.
fn wait_for_status(dir: &Path, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let clock = SystemClock::new();
    loop {
        let status = common::status_json(dir);
        let volume = &status["volumes"][0];
        if done(volume) {
            return volume.clone();
        }
        if clock.now_ns() > MOVE_DEADLINE_NS {
            panic!("waited too long for {what}; status:\n{status:#}");
        }
        clock.sleep_ns(50_000_000);
    }
}

/// Bytes that differ per position and per seed.
fn pattern(seed: u8, offset: u64, length: usize) -> Vec<u8> {
    (0..length as u64)
        .map(|index| {
            let position = offset + index;
            (position as u8)
                .wrapping_mul(31)
                .wrapping_add((position >> 12) as u8)
                ^ seed
        })
        .collect()
}

/// Writes `pattern(seed)` over `[offset, offset + length)` in pieces and
/// records it in `model`.
fn write_pattern(client: &mut Client, model: &mut [u8], seed: u8, offset: u64, length: u64) {
    let mut at = offset;
    while at < offset + length {
        let piece = (offset + length - at).min(256 * 1024);
        let data = pattern(seed, at, piece as usize);
        client.write(at, &data, false).unwrap();
        model[at as usize..(at + piece) as usize].copy_from_slice(&data);
        at += piece;
    }
}

/// Reads `[0, model.len())` back and compares it with `model`.
fn check_reads(client: &mut Client, model: &[u8]) {
    let mut buffer = vec![0u8; MIB as usize];
    for (index, expected) in model.chunks(MIB as usize).enumerate() {
        let offset = index as u64 * MIB;
        client.read(offset, &mut buffer[..expected.len()]).unwrap();
        if let Some(first) = (0..expected.len()).find(|&at| buffer[at] != expected[at]) {
            panic!(
                "byte {} reads {:#04x}, wrote {:#04x}",
                offset + first as u64,
                buffer[first],
                expected[first]
            );
        }
    }
}

fn setup(config: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_file(dir.path(), "config.toml", config);
    (dir, path)
}

fn placement(volume: &Value) -> String {
    volume["placement"].as_str().unwrap().to_string()
}

fn idle(volume: &Value) -> bool {
    volume["in_flight"].as_array().is_some_and(Vec::is_empty)
        && volume["pending_moves"].as_u64() == Some(0)
}

// (a)
#[test]
fn serve_without_config_prints_its_socket_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), None);
    let listening = server.wait_line("tierd: listening on unix:");
    let socket = PathBuf::from(listening.trim_start_matches("tierd: listening on unix:"));
    assert!(socket.is_absolute(), "{listening}");
    assert!(socket.to_str().unwrap().ends_with(".sock"), "{listening}");
    assert_eq!(
        socket,
        dir.path()
            .canonicalize()
            .unwrap()
            .join("tierd-data/tierd.sock")
    );
    let uri = server.uri("vol0");
    assert_eq!(uri, format!("nbd+unix:///vol0?socket={}", socket.display()));
    let mut client = Client::connect_uri(&uri).unwrap();
    assert_eq!(client.info().size_bytes, 1 << 30);
    let data = pattern(7, 5 * MIB + 123, 300_000);
    client.write(5 * MIB + 123, &data, true).unwrap();
    let mut back = vec![0u8; data.len()];
    client.read(5 * MIB + 123, &mut back).unwrap();
    assert_eq!(back, data);
    client.disconnect().unwrap();

    let status = server.stop();
    assert!(status.success(), "{status:?}\n{}", server.stderr());
    assert!(!socket.exists(), "the socket outlived a clean stop");
    assert!(!dir.path().join("tierd-data/tierd-admin.sock").exists());
    // The embedded default's data directory is reused by the next start.
    let mut server = Server::start(dir.path(), None);
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    client.read(5 * MIB + 123, &mut back).unwrap();
    assert_eq!(back, data);
}

// (b)
#[test]
fn kill_9_and_restart_keep_placement_and_flushed_data() {
    let (dir, _) = setup(&small_config("", ""));
    let dir = dir.path();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let uri = server.uri("vol0");
    let mut client = Client::connect_uri(&uri).unwrap();
    let mut model = vec![0u8; 8 * MIB as usize];
    write_pattern(&mut client, &mut model, 0x11, 0, 8 * MIB);
    client.flush().unwrap();

    for segment in [1, 2, 3, 5] {
        move_segment(dir, segment, "mem");
    }
    move_segment(dir, 2, "disk");
    let volume = wait_for_status(dir, "five operator moves", |volume| {
        volume["completed_moves"].as_u64() >= Some(5) && idle(volume)
    });
    let placed = placement(&volume);
    assert_eq!(&placed[..8], "10101011", "{volume:#}");
    assert_eq!(
        volume["placement_by_tier"][0],
        serde_json::json!(["mem", 3])
    );
    // A move the placement table would not accept is refused at once, with
    // its reason (segment 1 is on mem already).
    let output = tierd_move(dir, 1, "mem");
    assert_eq!(output.status.code(), Some(1));
    let refused = common::stderr(&output);
    assert!(
        refused
            .contains("segment 1 of volume vol0 cannot move to mem: the segment is already there"),
        "{refused}"
    );

    // Writes to segments on the memory tier (and across a boundary between
    // tiers) are written through before their ack.
    write_pattern(&mut client, &mut model, 0x5a, 3 * MIB + 4096, 200 * 1024);
    write_pattern(&mut client, &mut model, 0x77, 5 * MIB - 8192, 16384);
    client.flush().unwrap();
    drop(client);

    server.kill();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let status = common::status_json(dir);
    assert_eq!(status["server_running"], true);
    assert_eq!(placement(&status["volumes"][0]), placed);
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    check_reads(&mut client, &model);
}

// (c)
#[test]
fn clean_stop_and_restart_keep_placement_data_and_policy_history() {
    // Checkpoints only at start and at a clean stop, so the checkpoint read
    // right after a restart is the one the restarted server wrote from what
    // it recovered.
    let (dir, _) = setup(&small_config("", "checkpoint_every = 1000000"));
    let dir = dir.path();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    let mut model = vec![0u8; 6 * MIB as usize];
    write_pattern(&mut client, &mut model, 0x21, 0, 6 * MIB);
    client.flush().unwrap();
    move_segment(dir, 0, "mem");
    move_segment(dir, 4, "mem");
    let volume = wait_for_status(dir, "two moves and three periods", |volume| {
        volume["completed_moves"].as_u64() >= Some(2)
            && idle(volume)
            && volume["periods_closed"].as_u64() >= Some(3)
    });
    let placed = placement(&volume);
    assert_eq!(&placed[..6], "011101");
    // Written after the moves, not flushed: a clean stop flushes.
    write_pattern(&mut client, &mut model, 0x42, 4 * MIB + 1000, 5000);
    drop(client);

    let status = server.stop();
    assert!(status.success(), "{status:?}\n{}", server.stderr());
    assert!(!dir.join("data/tierd.sock").exists());
    assert!(!dir.join("data/tierd-admin.sock").exists());
    let offline = common::status_json(dir);
    assert_eq!(offline["server_running"], false);
    assert_eq!(placement(&offline["volumes"][0]), placed);
    let text = common::tierd_in(dir, &["status", "--config", "config.toml"]);
    assert!(
        common::stdout(&text).starts_with("server not running; placement from metadata"),
        "{}",
        common::stdout(&text)
    );

    let checkpoint_path = dir.join("data/meta/vol0/checkpoint");
    let read_checkpoint = || {
        let bytes = std::fs::read(&checkpoint_path).unwrap();
        tierd_engine::meta::decode_checkpoint(&checkpoint_path, &bytes)
            .unwrap()
            .1
    };
    let before = read_checkpoint();
    assert!(
        !before.history.is_empty(),
        "the clean stop saved no policy history"
    );

    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let after = read_checkpoint();
    assert_eq!(
        after.history, before.history,
        "the restarted server did not come back with the saved history"
    );
    assert_eq!(after.policy_state, before.policy_state);
    assert_eq!(placement(&common::status_json(dir)["volumes"][0]), placed);
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    check_reads(&mut client, &model);
}

// (d)
#[test]
fn corrupted_journal_refuses_to_start_naming_the_file_and_offset() {
    // No periodic checkpoints: the two moves stay in the journal.
    let (dir, _) = setup(&small_config("", "checkpoint_every = 1000000"));
    let dir = dir.path();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    move_segment(dir, 1, "mem");
    move_segment(dir, 2, "mem");
    wait_for_status(dir, "two moves", |volume| {
        volume["completed_moves"].as_u64() >= Some(2) && idle(volume)
    });
    // kill -9: a clean stop would fold the journal into a checkpoint.
    server.kill();

    let journal = dir.join("data/meta/vol0/journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    // Header 24 bytes, then [length u32][crc u32][payload]: damage the first
    // record's payload; the second record follows it.
    let first_length = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as usize;
    assert!(
        bytes.len() > 24 + 8 + first_length + 8,
        "expected two records in the journal ({} bytes)",
        bytes.len()
    );
    bytes[24 + 8 + first_length / 2] ^= 0x20;
    std::fs::write(&journal, &bytes).unwrap();

    let mut server = Server::spawn(dir, Some(Path::new("config.toml")));
    let status = server.wait_exit();
    let stderr = server.stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&journal.display().to_string()),
        "stderr does not name {}:\n{stderr}",
        journal.display()
    );
    assert!(stderr.contains("byte offset 24"), "{stderr}");
    let printed = server.stdout_after_exit();
    assert!(
        printed.is_empty(),
        "a server that refuses to start printed {printed:?}"
    );
    // Offline status reports the same damage instead of guessing.
    let output = common::tierd_in(dir, &["status", "--config", "config.toml"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        common::stderr(&output).contains("byte offset 24"),
        "{}",
        common::stderr(&output)
    );
}

// (e)
#[test]
fn config_errors_name_the_key() {
    let cases = [
        (
            small_config("", "").replace("segment = \"1MiB\"", "segment = \"3MiB\""),
            vec!["config.toml", "volume[0]", ".segment", "power of two"],
        ),
        (
            small_config("[server]\nlisten = [\"tcp:0.0.0.0:10809\"]", ""),
            vec!["config.toml", "server.listen", "loopback"],
        ),
        (
            small_config("[server]\nlisen = [\"unix:x.sock\"]", ""),
            vec!["config.toml", "lisen"],
        ),
        (
            small_config("", "")
                .replace("tiers = [\"mem\", \"disk\"]", "tiers = [\"mem\", \"dsk\"]"),
            vec!["volume[0]", "tiers[1]", "dsk"],
        ),
        (
            small_config(
                "[server]\n[server.tls]\ncertificate = \"tls/cert.pem\"\nkey = \"tls/key.pem\"",
                "",
            ),
            vec!["server.tls", "tls/cert.pem", "cannot read the certificate"],
        ),
    ];
    for (config, expected) in cases {
        let (dir, _) = setup(&config);
        let mut server = Server::spawn(dir.path(), Some(Path::new("config.toml")));
        let status = server.wait_exit();
        let stderr = server.stderr();
        assert_eq!(status.code(), Some(1), "{stderr}");
        for text in expected {
            assert!(stderr.contains(text), "expected {text:?} in:\n{stderr}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let output = common::tierd_in(dir.path(), &["serve", "--config", "missing.toml"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(common::stderr(&output).contains("missing.toml"));
}

// (f)
#[test]
fn status_json_keys_are_stable_online_and_offline() {
    let (dir, _) = setup(&small_config("", ""));
    let dir = dir.path();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let online = common::status_json(dir);
    let keys = |value: &Value| -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&online), ["server_running", "volumes"]);
    let volume = &online["volumes"][0];
    for key in [
        "name",
        "size_bytes",
        "segment_bytes",
        "segments",
        "policy",
        "periods_closed",
        "placement_by_tier",
        "placement",
        "tiers",
        "in_flight",
        "pending_moves",
        "completed_moves",
        "dropped_moves",
        "mean_move_ns",
        "recent_moves",
        "warnings",
        "pins",
        "last_plan",
    ] {
        assert!(volume.get(key).is_some(), "{key} missing: {volume:#}");
    }
    assert_eq!(volume["segments"], 64);
    assert_eq!(volume["policy"], "none");
    assert_eq!(placement(volume), "1".repeat(64));
    let tier = &volume["tiers"][0];
    for key in [
        "name",
        "volatile",
        "write_through",
        "capacity_segments",
        "used_segments",
        "used_bytes",
        "capacity_bytes",
        "stats",
    ] {
        assert!(tier.get(key).is_some(), "{key} missing: {tier:#}");
    }
    assert_eq!(tier["capacity_segments"], 16);
    assert!(tier["stats"].is_object());
    let online_volume_keys = keys(volume);
    assert!(server.stop().success());

    let offline = common::status_json(dir);
    assert_eq!(keys(&offline), ["server_running", "volumes"]);
    assert_eq!(offline["server_running"], false);
    assert_eq!(keys(&offline["volumes"][0]), online_volume_keys);
    assert_eq!(keys(&offline["volumes"][0]["tiers"][0]), keys(tier));
    // And `tierd move` without a server says so.
    let output = tierd_move(dir, 1, "mem");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        common::stderr(&output).contains("no tierd server answers"),
        "{}",
        common::stderr(&output)
    );
}

fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

// (g)
#[test]
fn metrics_endpoint_serves_prometheus_text() {
    let (dir, _) = setup(&small_config("[metrics]\nlisten = \"127.0.0.1:0\"", ""));
    let dir = dir.path();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let line = server.wait_line("tierd: metrics at http://");
    let address = line
        .trim_start_matches("tierd: metrics at http://")
        .trim_end_matches("/metrics")
        .to_string();
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    client.write(0, &pattern(1, 0, 8192), false).unwrap();
    client.flush().unwrap();

    let response = http_get(&address, "/metrics");
    assert!(response.starts_with("HTTP/1.0 200 OK\r\n"), "{response}");
    for expected in [
        "# TYPE tierd_volume_segments gauge",
        "tierd_volume_segments{volume=\"vol0\",tier=\"disk\"} 64",
        "tierd_volume_segments{volume=\"vol0\",tier=\"mem\"} 0",
        "tierd_tier_capacity_bytes{volume=\"vol0\",tier=\"mem\"} 16777216",
        "# TYPE tierd_tier_write_latency_seconds histogram",
        "tierd_tier_write_latency_seconds_count{volume=\"vol0\",tier=\"disk\"} ",
        "tierd_tier_busy_seconds_total{volume=\"vol0\",tier=\"disk\"} ",
        "tierd_volume_moves_completed_total{volume=\"vol0\"} 0",
        "tierd_nbd_requests_total{command=\"write\"} 1",
        "tierd_nbd_requests_total{command=\"flush\"} 1",
        "tierd_nbd_written_bytes_total 8192",
        "tierd_nbd_connections_active 1",
        "tierd_volume_requests_total{volume=\"vol0\",kind=\"write\"} 1",
        "tierd_volume_requests_total{volume=\"vol0\",kind=\"flush\"} 1",
        "tierd_volume_requests_total{volume=\"vol0\",kind=\"read\"} 0",
        "tierd_volume_written_bytes_total{volume=\"vol0\"} 8192",
        "tierd_volume_request_errors_total{volume=\"vol0\"} 0",
        "# TYPE tierd_volume_request_latency_seconds histogram",
        "tierd_volume_request_latency_seconds_count{volume=\"vol0\",kind=\"write\"} 1",
    ] {
        assert!(
            response.contains(expected),
            "{expected:?} missing:\n{response}"
        );
    }
    let missing = http_get(&address, "/other");
    assert!(missing.starts_with("HTTP/1.0 404"), "{missing}");
}

// (h)
#[test]
fn garbage_from_clients_does_not_stop_the_server() {
    let (dir, _) = setup(&small_config("", ""));
    let dir = dir.path();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let socket = server.unix_socket();
    let mut garbage = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..64 * 1024 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        garbage.push(state as u8);
    }
    // Garbage in place of a handshake, then a client that hangs up at once.
    {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let _ = stream.write_all(&garbage);
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
        drop(UnixStream::connect(&socket).unwrap());
    }
    // A client that negotiates properly, then sends garbage as a request.
    {
        let client = Client::connect_uri(&server.uri("vol0")).unwrap();
        drop(client);
        let mut raw = UnixStream::connect(&socket).unwrap();
        let _ = raw.write_all(&garbage[..1000]);
    }
    // Garbage on the admin socket gets error replies.
    {
        let mut admin = UnixStream::connect(dir.join("data/tierd-admin.sock")).unwrap();
        admin
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        admin
            .write_all(b"not json\n{\"cmd\":\"launch\"}\n{\"cmd\":\"move\",\"volume\":\"vol0\",\"segment\":999,\"to\":\"mem\"}\n")
            .unwrap();
        let mut reader = BufReader::new(admin);
        for expected in ["not JSON", "unknown cmd", "beyond"] {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let reply: Value = serde_json::from_str(&line).unwrap();
            assert!(
                reply["error"].as_str().unwrap().contains(expected),
                "{reply}"
            );
        }
    }
    assert!(server.is_running(), "{}", server.stderr());
    let mut client = Client::connect_uri(&server.uri("vol0")).unwrap();
    let data = pattern(3, 10 * MIB, 4096);
    client.write(10 * MIB, &data, false).unwrap();
    let mut back = vec![0u8; data.len()];
    client.read(10 * MIB, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(common::status_json(dir)["server_running"], true);
}

#[test]
fn a_second_server_on_the_same_data_dir_is_refused() {
    let (dir, _) = setup(&small_config("", ""));
    let dir = dir.path();
    let server = Server::start(dir, Some(Path::new("config.toml")));
    let output = common::tierd_in(dir, &["serve", "--config", "config.toml"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = common::stderr(&output);
    assert!(
        stderr.contains(&format!("pid {}", server.pid())),
        "{stderr}"
    );
    assert!(stderr.contains("tierd.lock"), "{stderr}");
}

#[test]
fn status_where_no_server_ever_ran_says_so_and_fails() {
    let directory = tempfile::tempdir().unwrap();
    let dir = directory.path();
    // No config, no ./tierd-data: the embedded default finds nothing.
    let output = common::tierd_in(dir, &["status"]);
    assert_eq!(output.status.code(), Some(1), "{}", common::stdout(&output));
    let message = common::stderr(&output);
    assert!(
        message.contains("tierd-data") && message.contains("--config"),
        "{message}"
    );
    assert!(
        common::stdout(&output).is_empty(),
        "{}",
        common::stdout(&output)
    );
    // A configuration whose data directory does not exist yet: the same.
    std::fs::write(dir.join("config.toml"), small_config("", "")).unwrap();
    let output = common::tierd_in(dir, &["status", "--config", "config.toml", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", common::stdout(&output));
    let message = common::stderr(&output);
    assert!(
        message.contains(&dir.join("data").display().to_string()),
        "{message}"
    );
}

fn tierd_ok(dir: &Path, args: &[&str]) -> String {
    let output = common::tierd_in(dir, args);
    assert!(
        output.status.success(),
        "tierd {args:?} failed:\n{}",
        common::stderr(&output)
    );
    common::stdout(&output)
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn tierd_refused(dir: &Path, args: &[&str]) -> String {
    let output = common::tierd_in(dir, args);
    assert_eq!(output.status.code(), Some(1), "tierd {args:?} did not fail");
    common::stderr(&output)
}

/// Issue 11: `tierd pin` puts a segment on a tier and keeps it there against
/// a policy that demotes every idle fast-tier segment (OTF-AST with no IO:
/// home below `low`), across a `kill -9`; `tierd unpin` gives it back to the
/// policy. Status lists the pin and the last plan's reason.
#[test]
fn a_pin_is_honoured_by_the_policy_and_survives_kill_9() {
    let config = small_config("", "").replace(
        "kind = \"none\"",
        "kind = \"otf-ast\"\npromote_persistent = false",
    );
    let (dir, _) = setup(&config);
    let dir = dir.path();
    let mut server = Server::start(dir, Some(Path::new("config.toml")));
    let base = ["--config", "config.toml", "--volume", "vol0"];
    let pin = |segment: &str, tier: &str, extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["pin"].iter().chain(&base).map(|s| s.to_string()).collect();
        args.extend(["--segment", segment, "--tier", tier].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let printed = tierd_ok(dir, &as_strs(&pin("3", "mem", &[])));
    assert!(
        printed.contains("pinned segment 3 of volume vol0 to tier mem (until tierd unpin); its move there is queued"),
        "{printed}"
    );
    let printed = tierd_ok(dir, &as_strs(&pin("7", "mem", &["--until", "1h"])));
    assert!(printed.contains("(until 20"), "{printed}");
    // Refusals name what is wrong.
    for (args, expected) in [
        (
            pin("64", "mem", &[]),
            "segment 64 is beyond volume vol0's 64 segments",
        ),
        (pin("1", "ssd", &[]), "volume vol0 has no tier \"ssd\""),
        (
            pin("1", "mem", &["--until", "2020-01-01T00:00:00Z"]),
            "which has passed",
        ),
        (pin("1", "mem", &["--until", "soon"]), "RFC 3339"),
    ] {
        let stderr = tierd_refused(dir, &as_strs(&args));
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
    }
    // Segment 5 goes up by a plain operator move: the policy demotes it.
    move_segment(dir, 5, "mem");
    let volume = wait_for_status(dir, "segment 5 demoted, 3 and 7 pinned on mem", |volume| {
        let placed = placement(volume);
        volume["completed_moves"].as_u64() >= Some(4)
            && &placed[3..4] == "0"
            && &placed[5..8] == "110"
            && idle(volume)
    });
    let pins = volume["pins"].as_array().unwrap();
    assert_eq!(pins.len(), 2, "{volume:#}");
    assert_eq!(pins[0]["segment"], 3);
    assert_eq!(pins[0]["tier"], "mem");
    assert_eq!(pins[0]["placed"], true);
    assert!(pins[0]["until"].is_null());
    assert!(
        pins[1]["until"].as_str().unwrap().ends_with('Z'),
        "{volume:#}"
    );
    let summary = volume["last_plan"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("2 pinned segments left alone"),
        "{summary}"
    );
    let error = tierd_refused(
        dir,
        &[
            "move",
            "--config",
            "config.toml",
            "--volume",
            "vol0",
            "--segment",
            "3",
            "--to",
            "disk",
        ],
    );
    assert!(error.contains("pinned to tier mem"), "{error}");
    let text = tierd_ok(dir, &["status", "--config", "config.toml"]);
    assert!(
        text.contains(
            "  pins (no policy moves these):\n    segment 3 -> mem (until unpinned; on it)"
        ),
        "{text}"
    );
    assert!(text.contains("  last plan (20"), "{text}");

    // kill -9: the pins were acknowledged, so they are on disk.
    server.kill();
    let offline = common::status_json(dir);
    assert_eq!(offline["volumes"][0]["pins"].as_array().unwrap().len(), 2);
    let _server = Server::start(dir, Some(Path::new("config.toml")));
    let volume = wait_for_status(dir, "four periods after the restart", |volume| {
        volume["periods_closed"].as_u64() >= Some(4) && idle(volume)
    });
    assert_eq!(&placement(&volume)[3..8], "01110", "{volume:#}");
    assert_eq!(volume["pins"].as_array().unwrap().len(), 2);

    // Unpinned, segment 3 is the policy's again: demoted.
    let printed = tierd_ok(
        dir,
        &[
            "unpin",
            "--config",
            "config.toml",
            "--volume",
            "vol0",
            "--segment",
            "3",
        ],
    );
    assert!(printed.contains("was pinned to tier mem"), "{printed}");
    let stderr = tierd_refused(
        dir,
        &[
            "unpin",
            "--config",
            "config.toml",
            "--volume",
            "vol0",
            "--segment",
            "3",
        ],
    );
    assert!(
        stderr.contains("segment 3 of volume vol0 is not pinned"),
        "{stderr}"
    );
    wait_for_status(dir, "segment 3 demoted after unpin", |volume| {
        &placement(volume)[3..4] == "1" && idle(volume)
    });
}

/// Issue 11: status shows the policy's last plan and why, also when it
/// moved nothing.
#[test]
fn status_shows_the_last_plan_and_its_reason_when_nothing_moved() {
    let config = small_config("", "").replace("kind = \"none\"", "kind = \"otf-ast\"");
    let (dir, _) = setup(&config);
    let dir = dir.path();
    let _server = Server::start(dir, Some(Path::new("config.toml")));
    let volume = wait_for_status(dir, "three periods", |volume| {
        volume["periods_closed"].as_u64() >= Some(3)
    });
    let plan = &volume["last_plan"];
    assert_eq!(plan["moves"], 0, "{volume:#}");
    assert!(plan["period_end_ns"].is_u64());
    let summary = plan["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("home util 0.0% (mean of 2 periods")
            && summary.ends_with("< low 10.0%: no move"),
        "{summary}"
    );
    let text = tierd_ok(dir, &["status", "--config", "config.toml"]);
    assert!(
        text.contains("0 moves proposed, 0 queued; home util 0.0%"),
        "{text}"
    );
}
