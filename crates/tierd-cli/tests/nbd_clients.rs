//! `tierd serve` against the NBD clients people use (issue 4 §5): nbdinfo,
//! qemu-io, qemu-img, nbdcopy, nbdsh, fio and an ext4 file system through
//! nbdfuse + losetup, on a volume of a memory tier over a file tier, while a
//! background thread keeps forcing segments back and forth between the two
//! tiers with `tierd move`; and the data tests (qemu-io, qemu-img, nbdcopy,
//! nbdsh, fio verify, ext4) again on a writeback cache volume (`Stack::Cache`:
//! a small file cache tier over the file home, so the clients' IO keeps
//! evicting, writing back and reusing slots; `*_on_a_cache_volume`), and
//! on the same cache over an SMR home that gets whole-band rewrites only
//! (`Stack::SmrCache`, `*_on_an_smr_home`).
//!
//! Each test needs some tools; when one is missing the test prints why and
//! returns, except under `CI=true`, where it fails. Install them with
//! `../shared/tools/install-nbd-clients.sh`. Every test uses its own temporary
//! directory, socket and server, so they run in parallel.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::serve::ServeProcess;
use common::tools::*;

const VOLUME_BYTES: u64 = 64 << 20;
const SEGMENT_BYTES: u64 = 1 << 20;
const SEGMENTS: u64 = VOLUME_BYTES / SEGMENT_BYTES;

// ---------------------------------------------------------------- tools

/// nbdsh is `python3 -m nbd`; Debian's python3 has the module, a pyenv
/// python3 earlier in PATH may not.
fn debian_first_path() -> String {
    format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default())
}

/// Deterministic bytes (xorshift64*), so expected contents need not be stored.
fn pattern(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut bytes = Vec::with_capacity(length + 8);
    while bytes.len() < length {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        bytes.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    bytes.truncate(length);
    bytes
}

// ---------------------------------------------------------------- server

/// What a test's volume is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stack {
    /// The memory tier over the file home; a `Mover` forces segments
    /// between them.
    Tiered,
    /// A writeback cache volume: a 1 MiB file tier `ssd` caching the 64 MiB
    /// file home in 16 KiB blocks (64 slots), commits every 10 ms, writeback
    /// when idle for 10 ms or above 25% dirty. Nothing moves; `Mover::finish`
    /// checks the cache really evicted, wrote back and reused slots.
    Cache,
    /// `Cache` over an SMR home (`docs/engine/smr.md`): the file home
    /// declared a drive-managed SMR disk with 1 MiB bands from byte 64 KiB,
    /// so every write is staged and home gets only whole-band rewrites
    /// (after 10 ms idle, or above 25% dirty), which the clients' writes
    /// meet mid-band; `Mover::finish` checks bands were rewritten.
    SmrCache,
    /// `Tiered` with replicas on the file home (`docs/replicas.md`): 96 MiB
    /// under the 64 MiB volume (free space for copies even when a client
    /// fills the volume), and settings that make copies from the
    /// first read session (any two extents 2 MiB apart read within 50 ms
    /// of each other), and make them at once (`idle = 0`), so the clients'
    /// IO runs against copies being made, routed to and dropped;
    /// `Mover::finish` checks copies were made.
    Replicated,
}

impl Stack {
    /// Segments move between the memory tier and home (the `Mover` runs).
    fn moves(self) -> bool {
        matches!(self, Stack::Tiered | Stack::Replicated)
    }
}

/// A `tierd serve` process on its own directory, config and socket.
struct Tierd {
    stack: Stack,
    directory: tempfile::TempDir,
    config: PathBuf,
    process: Option<ServeProcess>,
    socket: PathBuf,
    uri: String,
}

fn config_text(data_dir: &Path, server_extra: &str, stack: Stack) -> String {
    let fast = match stack {
        Stack::Tiered | Stack::Replicated => common::FastTier::Memory,
        // Every miss allocates: the clients' IO must churn the cache (the
        // default adaptive admission may rightly turn itself off, and
        // nbdcopy's sequential runs pass the sequential cutoff; CI once
        // saw 0 allocations that way).
        Stack::Cache => common::FastTier::Cache {
            size: "1MiB",
            cache: "block = \"16KiB\", mode = \"writeback\", admission = \"always\", sequential_cutoff = \"0\", commit_interval = \"10ms\", writeback_idle = \"10ms\", dirty_high_percent = 25, dirty_low_percent = 5",
        },
        Stack::SmrCache => common::FastTier::Cache {
            size: "1MiB",
            cache: "block = \"16KiB\", mode = \"writeback\", commit_interval = \"10ms\", smr_idle = \"10ms\", dirty_high_percent = 25, dirty_low_percent = 5",
        },
    };
    let config = common::small_stack_config(
        &data_dir.display().to_string(),
        &format!("[server]\nlisten = [\"unix:tierd.sock\"]\n{server_extra}"),
        fast,
        "",
    );
    let home = "path = \"disk.img\"\n";
    if stack == Stack::Replicated {
        let sized = "path = \"disk.img\"\nsize = \"64MiB\"\n";
        assert!(config.contains(sized));
        return config.replace(
            sized,
            "path = \"disk.img\"\nsize = \"96MiB\"\nreplicas = { far = \"2MiB\", session_gap = \"50ms\", min_recurrences = 1, idle = \"0ms\", max_share = \"50%\" }\n",
        );
    }
    if stack != Stack::SmrCache {
        return config;
    }
    assert!(config.contains(home));
    config.replace(
        home,
        "path = \"disk.img\"\nsmr = { band = \"1MiB\", first_band = \"64KiB\" }\n",
    )
}

impl Tierd {
    fn start(stack: Stack) -> Tierd {
        Tierd::start_in(
            tempfile::Builder::new()
                .prefix("tierd-clients-")
                .tempdir()
                .expect("temp dir"),
            "",
            stack,
        )
    }

    /// A server in `directory`, with `server_extra` appended to `[server]`.
    fn start_in(directory: tempfile::TempDir, server_extra: &str, stack: Stack) -> Tierd {
        let config = directory.path().join("tierd.toml");
        std::fs::write(
            &config,
            config_text(&directory.path().join("data"), server_extra, stack),
        )
        .unwrap();
        let mut server = Tierd {
            stack,
            directory,
            config,
            process: None,
            socket: PathBuf::new(),
            uri: String::new(),
        };
        server.spawn();
        server
    }

    /// Starts the process and waits for the socket and volume lines.
    fn spawn(&mut self) {
        assert!(
            !self.process.as_mut().is_some_and(ServeProcess::is_running),
            "already running"
        );
        let mut process = ServeProcess::spawn(self.directory.path(), Some(&self.config));
        self.socket = process.unix_socket();
        self.uri = process.uri("vol0");
        self.process = Some(process);
        assert!(
            self.socket.is_absolute() && self.socket.extension().is_some_and(|e| e == "sock"),
            "socket path {:?}",
            self.socket
        );
        let scheme = if self.uri.starts_with("nbds") {
            "nbds"
        } else {
            "nbd"
        };
        assert_eq!(
            self.uri,
            format!("{scheme}+unix:///vol0?socket={}", self.socket.display()),
            "the URI names the volume and the socket"
        );
    }

    fn log(&self) -> String {
        self.process
            .as_ref()
            .map(|process| process.stderr_tail(40))
            .unwrap_or_default()
    }

    /// SIGTERM, then waits for the process (its stderr stays readable).
    fn stop(&mut self) -> ExitStatus {
        self.process.as_mut().expect("started").stop()
    }

    fn tierd(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tierd"));
        command.args(args).arg("--config").arg(&self.config);
        command
    }

    /// `tierd status --json`, the one volume's object.
    fn volume_status(&self) -> serde_json::Value {
        let mut command = self.tierd(&["status", "--json"]);
        let output = run(&mut command);
        let json: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
                panic!(
                    "status is not JSON ({error}):\n{}",
                    describe(&command, &output)
                )
            });
        assert_eq!(json["server_running"], true, "{json}");
        let volume = json["volumes"][0].clone();
        assert_eq!(volume["name"], "vol0", "{json}");
        volume
    }

    fn completed_moves(&self) -> u64 {
        let status = self.volume_status();
        status["completed_moves"]
            .as_u64()
            .unwrap_or_else(|| panic!("completed_moves missing: {status}"))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.directory.path().join(name)
    }

    /// The cache volume's `cache` status object.
    fn cache_status(&self) -> serde_json::Value {
        let status = self.volume_status();
        assert!(status["cache"].is_object(), "not a cache volume: {status}");
        status["cache"].clone()
    }
}

// ---------------------------------------------------------------- migrations

/// Keeps forcing segments between the memory tier and the file tier with
/// `tierd move` until finished: each round moves one segment up and the one
/// moved up eight rounds ago back down (so at most half the memory tier is
/// asked for), every 20–50 ms. Segments are visited in a stride that covers
/// all 64.
struct Mover {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<String>>>,
}

impl Mover {
    /// Starts moving (on a cache volume, nothing moves: no thread).
    fn start(server: &Tierd) -> Mover {
        let stop = Arc::new(AtomicBool::new(false));
        if !server.stack.moves() {
            return Mover { stop, thread: None };
        }
        let config = server.config.clone();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut refusals = Vec::new();
            let mut round: u64 = 0;
            while !flag.load(Ordering::Relaxed) {
                let up = (round * 5) % SEGMENTS;
                let mut moves = vec![(up, "mem")];
                if round >= 8 {
                    moves.push((((round - 8) * 5) % SEGMENTS, "disk"));
                }
                for (segment, tier) in moves {
                    let mut command = Command::new(env!("CARGO_BIN_EXE_tierd"));
                    command
                        .arg("move")
                        .arg("--config")
                        .arg(&config)
                        .args(["--volume", "vol0", "--segment"])
                        .arg(segment.to_string())
                        .args(["--to", tier]);
                    let output = run_unchecked(&mut command);
                    if !output.status.success() {
                        refusals.push(describe(&command, &output));
                    }
                }
                round += 1;
                pause_ms(20 + (round * 13) % 31);
            }
            refusals
        });
        Mover {
            stop,
            thread: Some(thread),
        }
    }

    /// Keeps moving until the server has completed at least `minimum` moves
    /// in all, then stops and returns that count. On a cache volume: checks
    /// that the client's IO went through the cache and kept it churning
    /// (more blocks allocated than it has slots, dirty blocks evicted or
    /// written back) and returns the allocations.
    fn finish(mut self, server: &Tierd, minimum: u64) -> u64 {
        if server.stack == Stack::Replicated {
            // Copies run in every gap of the clients' IO (`idle = 0`);
            // those planned at the end are made within a few seconds.
            let deadline = Deadline::after(Duration::from_secs(20));
            let replicas = loop {
                let status = server.volume_status();
                let replicas = status["tiers"][1]["replicas"].clone();
                if replicas["copies_made"].as_u64() > Some(0) || deadline.passed() {
                    break replicas;
                }
                pause_ms(50);
            };
            assert!(
                replicas["copies_made"].as_u64() > Some(0),
                "no copy was made: {replicas:#}"
            );
            eprintln!("replicas: {replicas}");
        }
        if !server.stack.moves() {
            let cache = server.cache_status();
            let number = |key: &str| cache[key].as_u64().unwrap_or(0);
            assert!(
                number("allocations") > number("slots")
                    && number("dirty_evictions") + number("writebacks") > 0,
                "the cache did not churn: {cache:#}"
            );
            if server.stack == Stack::SmrCache {
                assert!(
                    cache["smr"]["band_rewrites"].as_u64() > Some(0),
                    "no band was rewritten: {cache:#}"
                );
            }
            eprintln!("cache: {cache}");
            return number("allocations");
        }
        let deadline = Deadline::after(Duration::from_secs(60));
        let mut completed = server.completed_moves();
        while completed < minimum && !deadline.passed() {
            pause_ms(50);
            completed = server.completed_moves();
        }
        let refusals = self.stop_thread();
        assert!(
            completed >= minimum,
            "only {completed} moves completed (wanted {minimum}); status {}\nrefused moves: {refusals:#?}\n{}",
            server.volume_status(),
            server.log()
        );
        if !refusals.is_empty() {
            eprintln!(
                "{} `tierd move` calls were refused, e.g.:\n{}",
                refusals.len(),
                refusals[0]
            );
        }
        completed
    }

    fn stop_thread(&mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|thread| thread.join().expect("mover thread"))
            .unwrap_or_default()
    }
}

impl Drop for Mover {
    fn drop(&mut self) {
        let _ = self.stop_thread();
    }
}

/// Starts a server and the mover, and waits until the first move has
/// completed so that the client runs while migrations do.
/// On a cache volume: just the server (nothing moves).
fn start_with_moves(stack: Stack) -> (Tierd, Mover) {
    let server = Tierd::start(stack);
    let mover = Mover::start(&server);
    if !stack.moves() {
        return (server, mover);
    }
    let deadline = Deadline::after(Duration::from_secs(60));
    while server.completed_moves() == 0 {
        assert!(
            !deadline.passed(),
            "no move completed: {}\n{}",
            server.volume_status(),
            server.log()
        );
        pause_ms(20);
    }
    (server, mover)
}

/// Waits until no move is queued or copying.
fn wait_until_settled(server: &Tierd) -> serde_json::Value {
    let deadline = Deadline::after(Duration::from_secs(60));
    loop {
        let status = server.volume_status();
        let idle = status["in_flight"]
            .as_array()
            .is_some_and(|moves| moves.is_empty())
            && status["pending_moves"].as_u64().unwrap_or(0) == 0;
        if idle {
            return status;
        }
        assert!(!deadline.passed(), "moves never settled: {status}");
        pause_ms(20);
    }
}

// ---------------------------------------------------------------- tests

#[test]
fn nbdinfo_shows_size_and_capabilities() {
    if !require_tool("nbdinfo") {
        return;
    }
    let (server, mover) = start_with_moves(Stack::Tiered);
    let output = run(tool("nbdinfo").arg("--json").arg(&server.uri));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["protocol"], "newstyle-fixed", "{json}");
    let export = &json["exports"][0];
    assert_eq!(export["export-name"], "vol0", "{export}");
    assert_eq!(export["export-size"], VOLUME_BYTES, "{export}");
    assert_eq!(export["is_read_only"], false, "{export}");
    for capability in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_fast_zero",
        "can_multi_conn",
    ] {
        assert_eq!(export[capability], true, "{capability} in {export}");
    }
    let contexts = export["contexts"].as_array().expect("contexts listed");
    assert!(
        contexts.iter().any(|context| context == "base:allocation"),
        "{contexts:?}"
    );
    // The export list names the volume.
    let output = run(tool("nbdinfo").arg("--list").arg(&server.uri));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("export=\"vol0\""),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    mover.finish(&server, 3);
}

#[test]
fn qemu_io_patterns_zeroes_discards_and_fua_across_segments() {
    check_qemu_io_patterns_zeroes_discards_and_fua_across_segments(Stack::Tiered);
}

#[test]
fn qemu_io_patterns_zeroes_discards_and_fua_across_segments_on_a_cache_volume() {
    check_qemu_io_patterns_zeroes_discards_and_fua_across_segments(Stack::Cache);
}

#[test]
fn qemu_io_patterns_zeroes_discards_and_fua_across_segments_on_an_smr_home() {
    check_qemu_io_patterns_zeroes_discards_and_fua_across_segments(Stack::SmrCache);
}

fn check_qemu_io_patterns_zeroes_discards_and_fua_across_segments(stack: Stack) {
    if !require_tool("qemu-io") {
        return;
    }
    let (server, mover) = start_with_moves(stack);
    // Offsets straddle segment boundaries (every 1 MiB) on purpose.
    let writes = [
        "write -P 0x5a 1020k 8k",
        "write -P 0xa5 2944k 2176k",
        "write -P 0x77 8M 2M",
        "write -P 0x3c 20476k 12k",
        "write -z 2044k 8k",
        "discard 8M 2M",
        "flush",
        "write -f -P 0xc3 33788k 8k",
        "aio_write -P 0x11 40M 1M",
        "aio_write -P 0x22 41M 1M",
        "aio_flush",
    ];
    let reads = [
        "read -P 0x5a 1020k 8k",
        "read -P 0xa5 2944k 2176k",
        "read -P 0 8M 2M",
        "read -P 0x3c 20476k 4k",
        "read -P 0 2044k 8k",
        "read -P 0 2052k 892k",
        "read -P 0xc3 33788k 8k",
        "read -P 0x11 40M 1M",
        "read -P 0x22 41M 1M",
    ];
    let qemu_io = |lines: &[&str]| {
        let mut command = tool("qemu-io");
        command.args(["-f", "raw"]);
        for line in lines {
            command.arg("-c").arg(line);
        }
        command.arg(&server.uri);
        let output = run(&mut command);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            !stdout.contains("failed") && !stdout.contains("error"),
            "{}",
            describe(&command, &output)
        );
        stdout
    };
    let mut both: Vec<&str> = writes.to_vec();
    both.extend_from_slice(&reads);
    qemu_io(&both);
    // Pattern checking is really on: a wrong pattern is reported.
    let output = run_unchecked(
        tool("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x5b 1020k 8k"])
            .arg(&server.uri),
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("Pattern verification failed"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    // The data are still right after many more moves, and once they settle.
    let completed = mover.finish(&server, server.completed_moves() + 8);
    qemu_io(&reads);
    wait_until_settled(&server);
    qemu_io(&reads);
    eprintln!("qemu-io: {completed} moves completed");
}

#[test]
fn qemu_img_converts_in_and_out_and_compares() {
    check_qemu_img_converts_in_and_out_and_compares(Stack::Tiered);
}

#[test]
fn qemu_img_converts_in_and_out_and_compares_on_a_cache_volume() {
    check_qemu_img_converts_in_and_out_and_compares(Stack::Cache);
}

#[test]
fn qemu_img_converts_in_and_out_and_compares_on_an_smr_home() {
    check_qemu_img_converts_in_and_out_and_compares(Stack::SmrCache);
}

fn check_qemu_img_converts_in_and_out_and_compares(stack: Stack) {
    if !require_tool("qemu-img") {
        return;
    }
    let (server, mover) = start_with_moves(stack);
    let source = server.path("source.img");
    let data = pattern(32, 32 << 20);
    std::fs::write(&source, &data).unwrap();
    run(tool("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&source)
        .arg(&server.uri));
    // compare treats the export's extra 32 MiB as zeroes, which they are.
    run(tool("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&source)
        .arg(&server.uri));
    let copy = server.path("copy.img");
    run(tool("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&server.uri)
        .arg(&copy));
    let copied = std::fs::read(&copy).unwrap();
    assert_eq!(copied.len() as u64, VOLUME_BYTES);
    assert!(copied[..data.len()] == data[..], "the first 32 MiB differ");
    assert!(
        copied[data.len()..].iter().all(|byte| *byte == 0),
        "the unwritten half is not zero"
    );
    // compare does notice a difference.
    let mut changed = data;
    changed[12_345_678] ^= 1;
    std::fs::write(&source, &changed).unwrap();
    let output = run_unchecked(
        tool("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&source)
            .arg(&server.uri),
    );
    assert_eq!(
        output.status.code(),
        Some(1),
        "compare must report the change"
    );
    mover.finish(&server, 3);
}

#[test]
fn nbdcopy_round_trip_keeps_the_checksum() {
    check_nbdcopy_round_trip_keeps_the_checksum(Stack::Tiered);
}

#[test]
fn nbdcopy_round_trip_keeps_the_checksum_on_a_cache_volume() {
    check_nbdcopy_round_trip_keeps_the_checksum(Stack::Cache);
}

#[test]
fn nbdcopy_round_trip_keeps_the_checksum_on_an_smr_home() {
    check_nbdcopy_round_trip_keeps_the_checksum(Stack::SmrCache);
}

fn check_nbdcopy_round_trip_keeps_the_checksum(stack: Stack) {
    if !require_tool("nbdcopy") || !require_tool("sha256sum") {
        return;
    }
    let (server, mover) = start_with_moves(stack);
    let source = server.path("source.img");
    std::fs::write(&source, pattern(64, VOLUME_BYTES as usize)).unwrap();
    let expected = sha256_of(&source);
    run(tool("nbdcopy")
        .arg("--connections=4")
        .arg(&source)
        .arg(&server.uri));
    // Out again to a file, and straight into sha256sum through a pipe.
    let copy = server.path("copy.img");
    run(tool("nbdcopy").arg(&server.uri).arg(&copy));
    assert_eq!(sha256_of(&copy), expected, "nbdcopy out differs");
    let mut reader = tool("nbdcopy")
        .arg("--connections=1")
        .arg(&server.uri)
        .arg("-")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start nbdcopy");
    let mut streamed = Vec::new();
    reader
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut streamed)
        .unwrap();
    assert!(reader.wait().unwrap().success());
    let streamed_path = server.path("streamed.img");
    std::fs::write(&streamed_path, &streamed).unwrap();
    assert_eq!(
        sha256_of(&streamed_path),
        expected,
        "nbdcopy to stdout differs"
    );
    mover.finish(&server, 3);
}

#[test]
fn nbdsh_script_writes_reads_flushes_and_zeroes() {
    check_nbdsh_script_writes_reads_flushes_and_zeroes(Stack::Tiered);
}

#[test]
fn nbdsh_script_writes_reads_flushes_and_zeroes_on_a_cache_volume() {
    check_nbdsh_script_writes_reads_flushes_and_zeroes(Stack::Cache);
}

#[test]
fn nbdsh_script_writes_reads_flushes_and_zeroes_on_an_smr_home() {
    check_nbdsh_script_writes_reads_flushes_and_zeroes(Stack::SmrCache);
}

fn check_nbdsh_script_writes_reads_flushes_and_zeroes(stack: Stack) {
    if !require_tool("nbdsh") {
        return;
    }
    let (server, mover) = start_with_moves(stack);
    // Every request straddles a segment boundary.
    let script = r#"
import os
MiB = 1 << 20
data = os.urandom(3 * MiB + 4096)
h.pwrite(data, 5 * MiB - 2048)
assert h.pread(len(data), 5 * MiB - 2048) == data
h.pwrite(b"fua!" * 1024, 12 * MiB - 2048, nbd.CMD_FLAG_FUA)
h.flush()
h.zero(2 * MiB, 6 * MiB - 4096)
assert h.pread(2 * MiB, 6 * MiB - 4096) == bytes(2 * MiB)
assert h.pread(4096, 8 * MiB - 2048) == data[-4096:]
assert h.pread(4096, 12 * MiB - 2048) == b"fua!" * 1024
assert h.get_size() == 64 * MiB
assert h.can_multi_conn() and h.can_fua() and h.can_zero() and h.can_trim()
seen = []
h.block_status(MiB, 0, lambda context, offset, entries, error: seen.append(context))
assert seen == ["base:allocation"], seen
print("nbdsh ok")
"#;
    let output = run(tool("nbdsh")
        .env("PATH", debian_first_path())
        .arg("--base-allocation")
        .arg("-u")
        .arg(&server.uri)
        .arg("-c")
        .arg(script));
    assert!(String::from_utf8_lossy(&output.stdout).contains("nbdsh ok"));
    mover.finish(&server, 3);
}

#[test]
fn fio_randwrite_verifies_with_crc32c() {
    check_fio_randwrite_verifies_with_crc32c(Stack::Tiered);
}

#[test]
fn fio_randwrite_verifies_with_crc32c_on_a_cache_volume() {
    check_fio_randwrite_verifies_with_crc32c(Stack::Cache);
}

#[test]
fn fio_randwrite_verifies_with_crc32c_on_an_smr_home() {
    check_fio_randwrite_verifies_with_crc32c(Stack::SmrCache);
}

fn check_fio_randwrite_verifies_with_crc32c(stack: Stack) {
    if !require_tool("fio") {
        return;
    }
    let (server, mover) = start_with_moves(stack);
    let mut command = tool("fio");
    command
        .arg("--name=tierd")
        .arg("--ioengine=nbd")
        .arg(format!("--uri={}", server.uri))
        .args([
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--size=32M",
            "--offset=16M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
        ]);
    let output = run(&mut command);
    let text = describe(&command, &output);
    assert!(text.contains("err= 0"), "{text}");
    for bad in ["verify failed", "bad magic", "bad header", "mismatch"] {
        assert!(!text.contains(bad), "{bad}: {text}");
    }
    mover.finish(&server, 3);
}

// ---------------------------------------------------------------- ext4

fn file_contents(index: u64) -> Vec<u8> {
    // 100 KiB to about 3 MiB, odd sizes.
    pattern(
        1000 + index,
        (100 << 10) + (index as usize * 619_111) % (3 << 20),
    )
}

const FILES: u64 = 8;

#[test]
fn ext4_over_nbdfuse_and_loop_survives_a_restart() {
    check_ext4_over_nbdfuse_and_loop_survives_a_restart(Stack::Tiered);
}

#[test]
fn ext4_over_nbdfuse_and_loop_survives_a_restart_on_a_cache_volume() {
    check_ext4_over_nbdfuse_and_loop_survives_a_restart(Stack::Cache);
}

#[test]
fn ext4_over_nbdfuse_and_loop_survives_a_restart_on_an_smr_home() {
    check_ext4_over_nbdfuse_and_loop_survives_a_restart(Stack::SmrCache);
}

fn check_ext4_over_nbdfuse_and_loop_survives_a_restart(stack: Stack) {
    for name in [
        "nbdfuse",
        "losetup",
        "mkfs.ext4",
        "e2fsck",
        "mount",
        "umount",
    ] {
        if !require_tool(name) {
            return;
        }
    }
    if tool_path("fusermount3").is_none() && !require_tool("fusermount") {
        return;
    }
    if !Path::new("/dev/fuse").exists() && !missing("/dev/fuse (FUSE)") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 && !missing("root (for losetup and mount)") {
        return;
    }
    let (mut server, mover) = start_with_moves(stack);
    let mut cleanup = Cleanup::default();
    let point = server.path("mnt");

    let attached = attach(
        &server.path(""),
        &server.uri,
        VOLUME_BYTES,
        "fuse",
        &mut cleanup,
    );
    run(tool("mkfs.ext4")
        .args(["-q", "-F", "-L", "tierd"])
        .arg(&attached.device));
    mount(&attached.device, &point, &mut cleanup);
    std::fs::create_dir_all(point.join("dir")).unwrap();
    for index in 0..FILES {
        std::fs::write(point.join(format!("dir/file{index}")), file_contents(index)).unwrap();
    }
    unmount(&point, &mut cleanup);
    run(tool("e2fsck").arg("-fn").arg(&attached.device));
    detach(attached, &mut cleanup);

    // Stop with every move settled, so placement can be compared.
    let completed = mover.finish(&server, 3);
    let before = wait_until_settled(&server);
    let status = server.stop();
    assert!(
        status.success(),
        "tierd exited with {status} on SIGTERM\n{}",
        server.log()
    );
    assert!(
        !server.socket.exists(),
        "the socket {:?} is left behind after a clean stop",
        server.socket
    );
    server.spawn();
    let after = server.volume_status();
    assert_eq!(
        after["placement"], before["placement"],
        "placement changed across the restart"
    );
    match stack {
        Stack::Tiered | Stack::Replicated => assert!(
            after["placement"]
                .as_str()
                .is_some_and(|placement| placement.contains('0')),
            "no segment was on the memory tier at the stop: {after}"
        ),
        // The cache comes back warm from the clean stop's checkpoint.
        Stack::Cache | Stack::SmrCache => assert!(
            after["cache"]["occupancy_blocks"].as_u64() > Some(0),
            "the cache came back cold after a clean stop: {after}"
        ),
    }

    let mover = Mover::start(&server);
    let attached = attach(
        &server.path(""),
        &server.uri,
        VOLUME_BYTES,
        "fuse2",
        &mut cleanup,
    );
    mount(&attached.device, &point, &mut cleanup);
    for index in 0..FILES {
        let path = point.join(format!("dir/file{index}"));
        let read = std::fs::read(&path).unwrap_or_else(|error| panic!("{path:?}: {error}"));
        assert!(
            read == file_contents(index),
            "{path:?} differs after the restart"
        );
    }
    unmount(&point, &mut cleanup);
    run(tool("e2fsck").arg("-fn").arg(&attached.device));
    detach(attached, &mut cleanup);
    match stack {
        Stack::Tiered | Stack::Replicated => {
            mover.finish(&server, 1);
        }
        // Mostly reads after the restart: the warm cache served some.
        Stack::Cache | Stack::SmrCache => {
            let cache = server.cache_status();
            assert!(
                cache["read_hit_blocks"].as_u64() > Some(0),
                "no read hit after a warm restart: {cache:#}"
            );
        }
    }
    eprintln!("ext4 ({stack:?}): {completed} moves (cache: allocations) before the restart");
}

#[test]
fn qemu_io_patterns_zeroes_discards_and_fua_across_segments_on_a_replicated_home() {
    check_qemu_io_patterns_zeroes_discards_and_fua_across_segments(Stack::Replicated);
}

#[test]
fn qemu_img_converts_in_and_out_and_compares_on_a_replicated_home() {
    check_qemu_img_converts_in_and_out_and_compares(Stack::Replicated);
}

#[test]
fn nbdcopy_round_trip_keeps_the_checksum_on_a_replicated_home() {
    check_nbdcopy_round_trip_keeps_the_checksum(Stack::Replicated);
}

#[test]
fn nbdsh_script_writes_reads_flushes_and_zeroes_on_a_replicated_home() {
    check_nbdsh_script_writes_reads_flushes_and_zeroes(Stack::Replicated);
}

#[test]
fn fio_randwrite_verifies_with_crc32c_on_a_replicated_home() {
    check_fio_randwrite_verifies_with_crc32c(Stack::Replicated);
}

#[test]
fn ext4_over_nbdfuse_and_loop_survives_a_restart_on_a_replicated_home() {
    check_ext4_over_nbdfuse_and_loop_survives_a_restart(Stack::Replicated);
}

// ---------------------------------------------------------------- TLS

// The throwaway CA and certificates of tierd-nbd's TLS tests.
#[path = "../../tierd-nbd/tests/common/pki.rs"]
mod pki;

#[test]
fn nbdinfo_and_qemu_img_over_tls_with_client_certificates() {
    if !require_tool("nbdinfo") || !require_tool("qemu-img") {
        return;
    }
    let directory = tempfile::Builder::new()
        .prefix("tierd-tls-")
        .tempdir()
        .expect("temp dir");
    let pki = directory.path().join("pki");
    let stranger = directory.path().join("stranger");
    pki::TestPki::new().write(&pki, Some(&stranger));
    let server_extra = format!(
        "[server.tls]\ncertificate = \"{0}/server-cert.pem\"\nkey = \"{0}/server-key.pem\"\nclient_ca = \"{0}/ca-cert.pem\"\n",
        pki.display()
    );
    let server = Tierd::start_in(directory, &server_extra, Stack::Tiered);
    assert!(server.uri.starts_with("nbds+unix://"), "{}", server.uri);
    let with_certificates =
        |directory: &Path| format!("{}&tls-certificates={}", server.uri, directory.display());

    // nbdinfo with the CA and a client certificate: the export, over TLS.
    let output = run(tool("nbdinfo").arg("--json").arg(with_certificates(&pki)));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["TLS"], true, "{json}");
    assert_eq!(json["exports"][0]["export-size"], VOLUME_BYTES, "{json}");

    // Plain text is refused by a server that requires TLS.
    let plain = server.uri.replacen("nbds+unix", "nbd+unix", 1);
    let output = run_unchecked(tool("nbdinfo").arg(&plain));
    assert!(!output.status.success(), "plain text was served");
    // libnbd 1.14 reports NBD_REP_ERR_TLS_REQD to GO as "not supported".
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("opt_go"),
        "{}",
        describe(tool("nbdinfo").arg(&plain), &output)
    );
    // A client that does not trust our CA, and one without a certificate
    // (the server checks client certificates), get no session.
    let output = run_unchecked(tool("nbdinfo").arg(with_certificates(&stranger)));
    assert!(!output.status.success(), "a distrusting client got in");
    let no_identity = server.path("no-identity");
    std::fs::create_dir_all(&no_identity).unwrap();
    std::fs::copy(pki.join("ca-cert.pem"), no_identity.join("ca-cert.pem")).unwrap();
    let output = run_unchecked(tool("nbdinfo").arg(with_certificates(&no_identity)));
    assert!(
        !output.status.success(),
        "a client without a certificate got in"
    );

    // qemu-img writes and reads 24 MiB through its own TLS stack.
    let source = server.path("source.img");
    let data = pattern(77, 24 << 20);
    std::fs::write(&source, &data).unwrap();
    let tls_object = format!(
        "tls-creds-x509,id=tls0,endpoint=client,dir={}",
        pki.display()
    );
    let image = format!(
        "driver=nbd,path={},export=vol0,tls-creds=tls0,tls-hostname=localhost",
        server.socket.display()
    );
    run(tool("qemu-img")
        .args([
            "convert",
            "-n",
            "-f",
            "raw",
            "--object",
            &tls_object,
            "--target-image-opts",
        ])
        .arg(&source)
        .arg(&image));
    let copy = server.path("copy.img");
    run(tool("qemu-img")
        .args([
            "convert",
            "-O",
            "raw",
            "--object",
            &tls_object,
            "--image-opts",
        ])
        .arg(&image)
        .arg(&copy));
    let copied = std::fs::read(&copy).unwrap();
    assert_eq!(copied.len() as u64, VOLUME_BYTES);
    assert!(copied[..data.len()] == data[..], "the first 24 MiB differ");
    assert!(copied[data.len()..].iter().all(|byte| *byte == 0));
}
