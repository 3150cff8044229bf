//! `tierd serve` against hostile or broken clients and operator mistakes
//! (issue 11 §2, §5): idle sockets, a client that pipelines big reads and
//! never reads a reply, SIGTERM with it attached, `[server]` values that
//! would exhaust the machine, and the rotational flag. The real binary in
//! a temporary directory; memory is measured from `/proc/PID/status`.

mod common;

use std::os::unix::net::UnixStream;
use std::path::Path;

use common::serve::ServeProcess as Server;
use tierd_common::clock::{Clock, SystemClock};
use tierd_nbd::proto::NBD_FLAG_ROTATIONAL;
use tierd_nbd::Client;

const MIB: u64 = 1 << 20;

fn start(config: &str) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    common::write_file(dir.path(), "config.toml", config);
    let server = Server::start(dir.path(), Some(Path::new("config.toml")));
    (dir, server)
}

/// True when `tool` is on PATH; otherwise says the check is skipped (and
/// fails under `CI=true`, like the other real-client tests).
fn tool_available(tool: &str) -> bool {
    let found = std::process::Command::new("which")
        .arg(tool)
        .output()
        .is_ok_and(|output| output.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {tool} is not installed (../shared/tools/install-nbd-clients.sh)"
        );
        eprintln!(
            "skipping the {tool} check: not installed (../shared/tools/install-nbd-clients.sh)"
        );
    }
    found
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: i32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Writes, then reads back, a few bytes: the server serves this client.
fn served(uri: &str, offset: u64) {
    let mut client = Client::connect_uri(uri).unwrap();
    client.write(offset, b"still served", false).unwrap();
    let mut back = [0u8; 12];
    client.read(offset, &mut back).unwrap();
    assert_eq!(&back, b"still served");
}

/// 256 sockets that connect and never send a byte (the default
/// max_connections is 256) must not lock a well-behaved client out.
#[test]
fn idle_sockets_do_not_lock_clients_out() {
    let (_dir, mut server) = start(&common::small_stack_config(
        "data",
        "",
        common::FastTier::Memory,
        "",
    ));
    let socket = server.unix_socket();
    let idle: Vec<UnixStream> = (0..256)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    // Let the accept loop take them all.
    SystemClock::new().sleep_ns(500_000_000);
    served(&server.uri("vol0"), 5 * MIB);
    assert!(server.is_running(), "{}", server.stderr_tail(20));
    drop(idle);
}

/// A client that pipelines 200 reads of 32 MiB and never reads a reply,
/// against a worker-mode server over an emulated disk (so requests are
/// slow and many would pile up): the server's memory stays within the
/// per-connection bound (64 MiB) plus slack, another client is served
/// meanwhile, and SIGTERM with it attached exits within the grace period
/// (5 s by default) plus the engine's stop.
#[test]
fn a_client_that_never_reads_replies_keeps_memory_bounded_and_sigterm_prompt() {
    let config = common::small_stack_config(
        "data",
        "[server]\nworkers_per_connection = 16\n",
        common::FastTier::Memory,
        "",
    )
    .replace(
        "path = \"disk.img\"\nsize = \"64MiB\"",
        "path = \"disk.img\"\nsize = \"64MiB\"\nmodel = \"savvio10k4\"",
    );
    let (_dir, mut server) = start(&config);
    let uri = server.uri("vol0");
    let pid = server.pid();
    let baseline_kib = status_kib(pid, "VmRSS");

    let hostile = Client::connect_uri(&uri).unwrap();
    let (mut sender, receiver) = hostile.split();
    for index in 0..200u64 {
        sender
            .submit_read((index % 2) * 32 * MIB, 32 << 20)
            .unwrap();
    }
    // Sample the server's memory while it works on what it took.
    let clock = SystemClock::new();
    let mut peak_kib = baseline_kib;
    for _ in 0..100 {
        peak_kib = peak_kib.max(status_kib(pid, "VmRSS"));
        clock.sleep_ns(30_000_000);
    }
    served(&uri, 3 * MIB);
    for _ in 0..20 {
        peak_kib = peak_kib.max(status_kib(pid, "VmRSS"));
        clock.sleep_ns(30_000_000);
    }
    let growth_mib = (peak_kib.saturating_sub(baseline_kib)) / 1024;
    eprintln!(
        "server VmRSS: {} MiB at start, {} MiB at most with the client attached (VmHWM {} MiB)",
        baseline_kib / 1024,
        peak_kib / 1024,
        status_kib(pid, "VmHWM") / 1024
    );

    // SIGTERM with the client still attached (checked before the memory
    // assertion, so a failure reports both).
    let started_ns = clock.now_ns();
    let status = server.stop();
    let stop_ms = (clock.now_ns() - started_ns) / 1_000_000;
    eprintln!("SIGTERM to exit: {stop_ms} ms");
    assert!(status.success(), "{}", server.stderr_tail(20));
    assert!(
        growth_mib <= 64 + 64,
        "the server grew by {growth_mib} MiB for a client that reads no replies (bound: 64 MiB in flight)"
    );
    assert!(
        stop_ms < 5_000 + 3_000,
        "SIGTERM took {stop_ms} ms with a 5 s grace period"
    );
    drop((sender, receiver));
}

/// `[server]` values that would exhaust the machine stop `serve` with the
/// key and the limit, before anything starts.
#[test]
fn server_values_that_would_exhaust_the_machine_are_refused() {
    for (server_lines, expected) in [
        (
            "workers_per_connection = 100000",
            ["server.workers_per_connection = 100000", "at most 128"],
        ),
        (
            "max_in_flight_bytes = \"1PiB\"\nmax_in_flight_bytes_per_connection = \"1PiB\"",
            ["server.max_in_flight_bytes", "this machine's memory"],
        ),
        (
            "max_connections = 1000000",
            ["server.max_connections = 1000000", "from 1 to 4096"],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = common::small_stack_config(
            "data",
            &format!("[server]\n{server_lines}\n"),
            common::FastTier::Memory,
            "",
        );
        common::write_file(dir.path(), "config.toml", &config);
        let mut server = Server::spawn(dir.path(), Some(Path::new("config.toml")));
        let status = server.wait_exit();
        let stderr = server.stderr();
        assert_eq!(status.code(), Some(1), "{stderr}");
        for text in expected {
            assert!(stderr.contains(text), "{text:?} missing in:\n{stderr}");
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// NBD_FLAG_ROTATIONAL when the home tier emulates a spinning disk (HDD
/// and SMR presets), not for an SSD preset or a plain file.
#[test]
fn volumes_on_a_spinning_home_tier_are_flagged_rotational() {
    for (model, rotational) in [
        (Some("savvio10k4"), true),
        (Some("archive8tb"), true),
        (Some("p3700"), false),
        (None, false),
    ] {
        let mut config = common::small_stack_config("data", "", common::FastTier::Memory, "");
        if let Some(model) = model {
            config = config.replace(
                "path = \"disk.img\"\nsize = \"64MiB\"",
                &format!("path = \"disk.img\"\nsize = \"64MiB\"\nmodel = \"{model}\""),
            );
        }
        let (_dir, mut server) = start(&config);
        let uri = server.uri("vol0");
        let client = Client::connect_uri(&uri).unwrap();
        assert_eq!(
            client.info().transmission_flags & NBD_FLAG_ROTATIONAL != 0,
            rotational,
            "model {model:?}"
        );
        if tool_available("nbdinfo") {
            let output = std::process::Command::new("nbdinfo")
                .args(["--json", &uri])
                .output()
                .unwrap();
            let info: serde_json::Value = serde_json::from_slice(&output.stdout)
                .unwrap_or_else(|error| panic!("nbdinfo --json: {error}: {output:?}"));
            assert_eq!(
                info["exports"][0]["is_rotational"],
                serde_json::Value::Bool(rotational),
                "model {model:?}: {info:#}"
            );
        }
    }
}

/// A client that never negotiates block sizes (`NBD_OPT_EXPORT_NAME`, like
/// the kernel client) may send requests above 32 MiB; tierd serves them up
/// to 64 MiB, as the reference server and nbdkit do.
#[test]
fn requests_up_to_64_mib_are_served_to_clients_that_use_export_name() {
    // 128 MiB, so a read of 64 MiB + 4 KiB is refused for its length only.
    let config = common::small_stack_config("data", "", common::FastTier::Memory, "")
        .replace("size = \"64MiB\"", "size = \"128MiB\"");
    let (_dir, mut server) = start(&config);
    let target = tierd_nbd::NbdTarget::Unix(server.unix_socket());
    let mut client = tierd_nbd::client::Negotiation::start(&target)
        .unwrap()
        .export_name("vol0")
        .unwrap();
    let data: Vec<u8> = (0..48 * MIB).map(|index| (index % 251) as u8).collect();
    client.write(8 * MIB, &data, false).unwrap();
    let mut back = vec![0u8; 64 * MIB as usize];
    client.read(0, &mut back).unwrap();
    assert!(back[8 * MIB as usize..56 * MIB as usize] == data[..]);
    // Beyond 64 MiB: EINVAL, and the connection goes on.
    let mut too_long = vec![0u8; 64 * MIB as usize + 4096];
    match client.read(0, &mut too_long) {
        Err(tierd_nbd::ClientError::Request { error, .. }) => {
            assert_eq!(error, tierd_nbd::proto::NBD_EINVAL)
        }
        other => panic!("expected EINVAL, got {other:?}"),
    }
    let mut small = [0u8; 4];
    client.read(8 * MIB, &mut small).unwrap();
    assert_eq!(small, [0, 1, 2, 3]);
}

/// Bytes the volume's home tier `disk` has read, from `tierd status --json`.
fn disk_read_bytes(dir: &Path) -> u64 {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(["status", "--config", "config.toml", "--json"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    status["volumes"][0]["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tier| tier["name"] == "disk")
        .and_then(|tier| tier["stats"]["read_bytes"].as_u64())
        .unwrap_or_else(|| panic!("no disk read_bytes in {status:#}"))
}

/// A client that queues 64 reads of 4 MiB against an emulated HDD and
/// hangs up: the server drops what it had not started instead of reading
/// 256 MiB from the disk for nobody.
#[test]
fn a_client_that_leaves_with_work_queued_has_it_cancelled() {
    let config = common::small_stack_config(
        "data",
        "[server]\nworkers_per_connection = 4\n",
        common::FastTier::Memory,
        "",
    )
    .replace(
        "path = \"disk.img\"\nsize = \"64MiB\"",
        "path = \"disk.img\"\nsize = \"64MiB\"\nmodel = \"savvio10k4\"",
    );
    let (dir, mut server) = start(&config);
    let uri = server.uri("vol0");
    let before = disk_read_bytes(dir.path());
    let client = Client::connect_uri(&uri).unwrap();
    let (mut sender, receiver) = client.split();
    for index in 0..64u64 {
        sender.submit_read((index % 16) * 4 * MIB, 4 << 20).unwrap();
    }
    let clock = SystemClock::new();
    clock.sleep_ns(100_000_000);
    drop((sender, receiver));
    // Wait until the disk has been quiet for a second.
    let mut last = disk_read_bytes(dir.path());
    let mut quiet_since_ns = clock.now_ns();
    let deadline_ns = clock.now_ns() + 60_000_000_000;
    while clock.now_ns() - quiet_since_ns < 1_000_000_000 {
        assert!(clock.now_ns() < deadline_ns, "the disk never went quiet");
        clock.sleep_ns(100_000_000);
        let now = disk_read_bytes(dir.path());
        if now != last {
            last = now;
            quiet_since_ns = clock.now_ns();
        }
    }
    let read_mib = (last - before) / MIB;
    eprintln!("the disk read {read_mib} MiB of the 256 MiB asked for by a client that left");
    assert!(
        read_mib <= 96,
        "the server read {read_mib} MiB for a client that had gone"
    );
    served(&uri, MIB);
}
