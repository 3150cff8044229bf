//! A reduced tier (compression + dedup, issue 15) under `tierd serve`, driven
//! by the real clients (issue 15 §1: "the real-client tests ... run on a
//! reduced tier too"): qemu-io patterns (unaligned and partial-block writes,
//! write -z, discard, FUA), nbdcopy round trips, fio with crc32c verify on
//! 2:1 compressible / 2:1 duplicate data and on incompressible data, and ext4
//! (mkfs, files, e2fsck -fn) through nbdfuse + a loop device — in each mode
//! (`inline`, `post`, `auto`), on a volume of the reduced tier alone; then
//! the reduced tier as the cache tier of a writeback cache volume and as the
//! fast tier of a tiered volume while segments move; restarts in another
//! mode (data intact) and with another geometry (refused, naming the key);
//! and the space a post-process stage takes back.
//!
//! Tests that need a tool print why and return when it is missing, except
//! under `CI=true`, where they fail (`../shared/tools/install-nbd-clients.sh`
//! installs them). Every test has its own directory, server and socket.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::serve::ServeProcess;
use common::tools::{
    attach, can_attach_loop_devices, describe, detach, mount, pause_ms, require_tool,
    require_tools, run, run_unchecked, sha256_of, tool, unmount, Cleanup, Deadline,
};
use serde_json::Value;
use tierd_nbd::Client;

const MIB: u64 = 1 << 20;
const VOLUME_BYTES: u64 = 64 * MIB;

// ---------------------------------------------------------------- configs

/// A 64 MiB volume `vol0` of 16 MiB segments on one 64 MiB file tier
/// `flash`, reduced in 4 KiB blocks in `mode` and presenting 64 MiB;
/// `reduce_extra` is added to the `reduce` table.
fn alone_config(mode: &str, reduce_extra: &str) -> String {
    format!(
        r#"data_dir = "data"
[server]
listen = ["unix:tierd.sock"]

[[tier]]
name = "flash"
backend = "file"
path = "flash.img"
size = "64MiB"
reduce = {{ block = "4KiB", compress = "lz4", dedup = true, mode = "{mode}", logical = "64MiB"{reduce_extra} }}

[[volume]]
name = "vol0"
size = "64MiB"
segment = "16MiB"
tiers = ["flash"]
period = "1s"
"#
    )
}

/// `common::small_stack_config` with its file tier `ssd` reduced in `mode`.
fn with_reduced_ssd(config: String, mode: &str) -> String {
    let reduced = config.replacen(
        "path = \"ssd.img\"\n",
        &format!("path = \"ssd.img\"\nreduce = {{ block = \"4KiB\", mode = \"{mode}\" }}\n"),
        1,
    );
    assert_ne!(reduced, config, "no ssd tier to reduce");
    reduced
}

/// A writeback cache volume whose 4 MiB cache tier `ssd` is reduced: 16 KiB
/// cache blocks, commits every 10 ms, writeback when idle or above 25% dirty
/// (the cache keeps evicting, writing back and reusing slots).
fn cache_config(mode: &str) -> String {
    with_reduced_ssd(
        common::small_stack_config(
            "data",
            "[server]\nlisten = [\"unix:tierd.sock\"]\n",
            common::FastTier::Cache {
                size: "4MiB",
                cache: "block = \"16KiB\", mode = \"writeback\", commit_interval = \"10ms\", writeback_idle = \"10ms\", dirty_high_percent = 25, dirty_low_percent = 5",
            },
            "",
        ),
        mode,
    )
}

/// A tiered volume: the reduced 16 MiB file tier `ssd` over the file home,
/// 1 MiB segments, OTF-AST deciding every 200 ms (a [`Mover`] forces moves
/// besides, so moves happen whatever the policy thinks).
fn tiered_config(mode: &str) -> String {
    with_reduced_ssd(
        common::small_stack_config(
            "data",
            "[server]\nlisten = [\"unix:tierd.sock\"]\n",
            common::FastTier::File { faults: false },
            "",
        ),
        mode,
    )
    .replace("kind = \"none\"", "kind = \"otf-ast\"")
}

// ---------------------------------------------------------------- server

/// A `tierd serve` on its own directory and config.
struct Server {
    dir: tempfile::TempDir,
    config: PathBuf,
    process: Option<ServeProcess>,
    uri: String,
}

impl Server {
    fn start(config: &str) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("tierd-reduce-")
            .tempdir()
            .expect("temp dir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, config).unwrap();
        let mut server = Server {
            dir,
            config: path,
            process: None,
            uri: String::new(),
        };
        server.spawn();
        server
    }

    /// Starts the process; `Err(what it printed)` when it exits instead.
    fn try_spawn(&mut self) -> Result<(), String> {
        let mut process = ServeProcess::spawn(self.dir.path(), Some(&self.config));
        match process.try_wait_line("tierd: volume vol0 at ") {
            Ok(line) => {
                self.uri = line.rsplit(' ').next().unwrap_or_default().to_string();
                process.wait_line(common::serve::READY_PREFIX);
                self.process = Some(process);
                Ok(())
            }
            Err(error) => {
                process.kill();
                Err(error)
            }
        }
    }

    fn spawn(&mut self) {
        self.try_spawn().unwrap_or_else(|error| panic!("{error}"));
    }

    /// SIGTERM and the clean stop.
    fn stop(&mut self) {
        let process = self.process.as_mut().expect("running");
        let status = process.stop();
        assert!(status.success(), "{status}\n{}", process.stderr_tail(30));
    }

    fn kill(&mut self) {
        self.process.as_mut().expect("running").kill();
    }

    fn log(&self) -> String {
        self.process
            .as_ref()
            .map(|process| process.stderr_tail(30))
            .unwrap_or_default()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn set_config(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }

    fn tierd(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tierd"));
        command.args(args).arg("--config").arg(&self.config);
        command
    }

    /// `tierd status --json`: the volume's object.
    fn volume_status(&self) -> Value {
        let output = run(&mut self.tierd(&["status", "--json"]));
        let json: Value = serde_json::from_slice(&output.stdout).expect("status JSON");
        assert_eq!(json["server_running"], true, "{json}");
        json["volumes"][0].clone()
    }

    /// The `"reduction"` object of tier `tier`.
    fn reduction(&self, tier: &str) -> Value {
        let status = self.volume_status();
        let tiers = status["tiers"].as_array().expect("tiers in status");
        let found = tiers
            .iter()
            .find(|entry| entry["name"] == tier)
            .unwrap_or_else(|| panic!("no tier {tier}: {status:#}"));
        assert!(
            found["reduction"].is_object(),
            "tier {tier} shows no reduction: {found:#}"
        );
        found["reduction"].clone()
    }

    /// Waits until tier `tier` has no staged bytes (post-process done).
    fn wait_unstaged(&self, tier: &str) -> Value {
        let deadline = Deadline::after(Duration::from_secs(60));
        loop {
            let reduction = self.reduction(tier);
            if reduction["staged_bytes"] == 0 {
                return reduction;
            }
            assert!(
                !deadline.passed(),
                "staged blocks never reduced: {reduction:#}\n{}",
                self.log()
            );
            pause_ms(20);
        }
    }

    /// One NBD FLUSH (packs written, the map journaled, freed packs free).
    fn flush(&self) {
        let mut client = Client::connect_uri(&self.uri).expect("connect");
        client.flush().expect("flush");
    }

    fn completed_moves(&self) -> u64 {
        self.volume_status()["completed_moves"]
            .as_u64()
            .expect("completed_moves")
    }
}

fn number(value: &Value, key: &str) -> u64 {
    value[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {value:#}"))
}

// ---------------------------------------------------------------- data

/// Deterministic bytes (xorshift64*): incompressible.
fn random_bytes(seed: u64, length: usize) -> Vec<u8> {
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

/// `length` bytes of 4 KiB blocks that reduce in every way: a quarter
/// zeroes, a quarter copies of 16 distinct blocks, half 2:1 compressible
/// (random first half, then a repeated text) and unique.
fn reducible_bytes(seed: u64, length: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(length);
    let mut block = 0u64;
    while out.len() < length {
        match block % 4 {
            0 => out.extend_from_slice(&[0u8; 4096]),
            1 => out.extend_from_slice(&random_bytes(seed ^ 0xD0D0 ^ (block % 16), 4096)),
            _ => {
                out.extend_from_slice(&random_bytes(seed.wrapping_add(block), 2048));
                let text = format!("block {block} of seed {seed}; ");
                out.extend(text.bytes().cycle().take(2048));
            }
        }
        block += 1;
    }
    out.truncate(length);
    out
}

// ---------------------------------------------------------------- qemu-io

fn qemu_io(uri: &str, lines: &[&str]) -> String {
    let mut command = tool("qemu-io");
    command.args(["-f", "raw"]);
    for line in lines {
        command.arg("-c").arg(line);
    }
    command.arg(uri);
    let output = run(&mut command);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        !stdout.contains("failed") && !stdout.contains("error"),
        "{}",
        describe(&command, &output)
    );
    stdout
}

/// Writes straddling blocks and segments, sub-block and unaligned writes,
/// zeroes (aligned and not), discards, FUA, parallel AIO writes of the same
/// bytes (dedup), then reads every byte range back against its pattern.
const QEMU_WRITES: [&str; 16] = [
    "write -P 0x5a 1020k 8k",
    "write -P 0x11 5000 3000",
    "write -P 0x22 12287 4099",
    "write -P 0xa5 2944k 2176k",
    "write -P 0x77 8M 2M",
    "write -P 0x3c 16380k 8k",
    "write -P 0x66 20M 64k",
    "write -z 2044k 8k",
    "write -z 20972520 5000",
    "discard 8M 1M",
    "flush",
    "write -f -P 0xc3 33788k 8k",
    "aio_write -P 0x44 40M 1M",
    "aio_write -P 0x44 41M 1M",
    "aio_flush",
    "write -P 0x5a 50M 64k",
];

const QEMU_READS: [&str; 19] = [
    "read -P 0x5a 1020k 8k",
    "read -P 0 0 5000",
    "read -P 0x11 5000 3000",
    "read -P 0 8000 4287",
    "read -P 0x22 12287 4099",
    "read -P 0 16386 1028094",
    "read -P 0xa5 2944k 2176k",
    "read -P 0 8M 1M",
    "read -P 0x77 9M 1M",
    "read -P 0x3c 16380k 8k",
    "read -P 0x66 20M 1000",
    "read -P 0 20972520 5000",
    "read -P 0x66 20977520 59536",
    "read -P 0 2044k 8k",
    "read -P 0 2052k 892k",
    "read -P 0xc3 33788k 8k",
    "read -P 0x44 40M 2M",
    "read -P 0x5a 50M 64k",
    "read -P 0 42M 8M",
];

fn check_qemu_io(mode: &str) {
    if !require_tool("qemu-io") {
        return;
    }
    let mut server = Server::start(&alone_config(mode, ""));
    let mut both: Vec<&str> = QEMU_WRITES.to_vec();
    both.extend_from_slice(&QEMU_READS);
    qemu_io(&server.uri, &both);
    let reduction = server.reduction("flash");
    assert_eq!(reduction["setting"], mode, "{reduction:#}");
    // Reduced (post: once the stage drains), then read again.
    let reduction = server.wait_unstaged("flash");
    qemu_io(&server.uri, &QEMU_READS);
    assert!(
        number(&reduction, "logical_bytes") > 4 * MIB,
        "{reduction:#}"
    );
    assert!(
        number(&reduction, "dedup_bytes") >= MIB,
        "two identical MiB did not deduplicate: {reduction:#}"
    );
    assert!(
        number(&reduction, "compress_saved_bytes") > 16 << 10,
        "constant blocks did not compress: {reduction:#}"
    );
    assert!(number(&reduction, "zero_bytes") >= 8192, "{reduction:#}");
    assert!(reduction["ratio"].as_f64().unwrap() > 4.0, "{reduction:#}");
    // Discard of a partial block keeps the bytes around it.
    qemu_io(
        &server.uri,
        &[
            "discard 20990000 10000",
            "read -P 0x66 20977520 12480",
            "read -P 0x66 21000000 37056",
        ],
    );
    // Across a clean restart.
    server.stop();
    server.spawn();
    qemu_io(&server.uri, &QEMU_READS[..10]);
    eprintln!("qemu-io ({mode}): {reduction}");
}

#[test]
fn qemu_io_patterns_on_a_reduced_tier_inline() {
    check_qemu_io("inline");
}

#[test]
fn qemu_io_patterns_on_a_reduced_tier_post() {
    check_qemu_io("post");
}

#[test]
fn qemu_io_patterns_on_a_reduced_tier_auto() {
    check_qemu_io("auto");
}

// ---------------------------------------------------------------- nbdcopy

fn check_nbdcopy(mode: &str) {
    if !require_tools(&["nbdcopy", "sha256sum"]) {
        return;
    }
    let server = Server::start(&alone_config(mode, ""));
    let source = server.path("source.img");
    let mut data = reducible_bytes(7, 24 * MIB as usize);
    data.extend(random_bytes(8, 8 * MIB as usize));
    data.resize(VOLUME_BYTES as usize, 0);
    std::fs::write(&source, &data).unwrap();
    let expected = sha256_of(&source);
    run(tool("nbdcopy")
        .arg("--connections=4")
        .arg("--flush")
        .arg(&source)
        .arg(&server.uri));
    let copy = server.path("copy.img");
    run(tool("nbdcopy").arg(&server.uri).arg(&copy));
    assert_eq!(sha256_of(&copy), expected, "nbdcopy out differs");
    server.wait_unstaged("flash");
    server.flush();
    std::fs::remove_file(&copy).unwrap();
    run(tool("nbdcopy").arg(&server.uri).arg(&copy));
    assert_eq!(
        sha256_of(&copy),
        expected,
        "nbdcopy out differs once reduced"
    );
    let reduction = server.reduction("flash");
    eprintln!("nbdcopy ({mode}): {reduction}");
    assert!(reduction["ratio"].as_f64().unwrap() > 1.5, "{reduction:#}");
}

#[test]
fn nbdcopy_round_trip_on_a_reduced_tier_inline() {
    check_nbdcopy("inline");
}

#[test]
fn nbdcopy_round_trip_on_a_reduced_tier_post() {
    check_nbdcopy("post");
}

#[test]
fn nbdcopy_round_trip_on_a_reduced_tier_auto() {
    check_nbdcopy("auto");
}

// ---------------------------------------------------------------- fio

fn fio(uri: &str, args: &[&str]) -> String {
    let mut command = tool("fio");
    command
        .arg("--name=tierd")
        .arg("--ioengine=nbd")
        .arg(format!("--uri={uri}"))
        .args(args);
    let output = run(&mut command);
    let text = describe(&command, &output);
    assert!(text.contains("err= 0"), "{text}");
    for bad in ["verify failed", "bad magic", "bad header", "mismatch"] {
        assert!(!text.contains(bad), "{bad}: {text}");
    }
    text
}

const VERIFY: [&str; 4] = [
    "--verify=crc32c",
    "--do_verify=1",
    "--verify_fatal=1",
    "--verify_state_save=0",
];

fn check_fio(mode: &str) {
    if !require_tools(&["fio", "qemu-io"]) {
        return;
    }
    let server = Server::start(&alone_config(mode, ""));
    // 2:1 compressible, 2:1 duplicate data (paper 004's), unverified (fio's
    // verify headers make every block unique), then its figures.
    fio(
        &server.uri,
        &[
            "--rw=write",
            "--bs=8k",
            "--iodepth=16",
            "--size=16M",
            "--offset=32M",
            "--buffer_compress_percentage=50",
            "--dedupe_percentage=50",
            "--refill_buffers",
        ],
    );
    server.flush();
    server.wait_unstaged("flash");
    server.flush();
    let reduction = server.reduction("flash");
    eprintln!("fio 50/50 ({mode}): {reduction}");
    let ratio = reduction["ratio"].as_f64().unwrap();
    assert!(
        ratio > 1.5,
        "ratio {ratio} for 2:1 x 2:1 data: {reduction:#}"
    );
    assert_eq!(
        number(&reduction, "logical_bytes"),
        16 * MIB,
        "{reduction:#}"
    );
    assert!(number(&reduction, "dedup_bytes") > 2 * MIB, "{reduction:#}");
    assert!(
        number(&reduction, "compress_saved_bytes") > 2 * MIB,
        "{reduction:#}"
    );
    assert!(
        number(&reduction, "physical_bytes") < 16 * MIB * 2 / 3,
        "{reduction:#}"
    );

    // Verified: 6 KiB writes (every one partial in 4 KiB blocks, neighbours
    // sharing blocks at queue depth 16) of 50/50 data, and 8 KiB writes of
    // incompressible data.
    let mut args = vec![
        "--rw=randwrite",
        "--bs=6k",
        "--iodepth=16",
        "--size=12M",
        "--offset=16M",
        "--buffer_compress_percentage=50",
        "--dedupe_percentage=50",
    ];
    args.extend(VERIFY);
    fio(&server.uri, &args);
    let mut args = vec![
        "--rw=randwrite",
        "--bs=8k",
        "--iodepth=16",
        "--size=16M",
        "--offset=0",
        "--refill_buffers",
    ];
    args.extend(VERIFY);
    fio(&server.uri, &args);
    // Verified again once every staged block is reduced.
    server.wait_unstaged("flash");
    let mut args = vec![
        "--rw=read",
        "--bs=8k",
        "--iodepth=16",
        "--size=16M",
        "--offset=0",
        "--verify_only",
    ];
    args.extend(VERIFY);
    fio(&server.uri, &args);
    server.flush();
    let before = server.reduction("flash");
    assert!(number(&before, "logical_bytes") > 40 * MIB, "{before:#}");

    // Discard everything: nothing is left mapped and the packs come back.
    qemu_io(&server.uri, &["discard 0 64M", "flush", "read -P 0 0 64M"]);
    server.flush();
    let after = server.reduction("flash");
    eprintln!("after discarding all ({mode}): {after}");
    assert_eq!(number(&after, "logical_bytes"), 0, "{after:#}");
    assert!(
        number(&after, "physical_bytes") < MIB,
        "the packs were not freed: {after:#}"
    );
    assert!(
        number(&after, "free_bytes") + MIB > number(&after, "capacity_bytes"),
        "{after:#}"
    );
}

#[test]
fn fio_verify_and_reduction_figures_on_a_reduced_tier_inline() {
    check_fio("inline");
}

#[test]
fn fio_verify_and_reduction_figures_on_a_reduced_tier_post() {
    check_fio("post");
}

#[test]
fn fio_verify_and_reduction_figures_on_a_reduced_tier_auto() {
    check_fio("auto");
}

// ---------------------------------------------------------------- ext4

fn file_contents(index: u64) -> Vec<u8> {
    // 100 KiB to about 2 MiB, odd sizes, half of them reducible.
    let length = (100 << 10) + (index as usize * 419_111) % (2 << 20);
    if index.is_multiple_of(2) {
        reducible_bytes(1000 + index, length)
    } else {
        random_bytes(1000 + index, length)
    }
}

const FILES: u64 = 8;

/// mkfs.ext4, files, e2fsck -fn; a clean restart in another mode; the files
/// and e2fsck again.
fn check_ext4(mode: &str, then: &str) {
    if !can_attach_loop_devices() {
        return;
    }
    let mut server = Server::start(&alone_config(mode, ""));
    let mut cleanup = Cleanup::default();
    let point = server.path("mnt");
    let attached = attach(
        server.dir.path(),
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
    let reduction = server.reduction("flash");
    eprintln!("ext4 ({mode}): {reduction}");
    server.stop();

    server.set_config(&alone_config(then, ""));
    server.spawn();
    assert_eq!(server.reduction("flash")["setting"], then);
    let attached = attach(
        server.dir.path(),
        &server.uri,
        VOLUME_BYTES,
        "fuse2",
        &mut cleanup,
    );
    run(tool("e2fsck").arg("-fn").arg(&attached.device));
    mount(&attached.device, &point, &mut cleanup);
    for index in 0..FILES {
        let path = point.join(format!("dir/file{index}"));
        let read = std::fs::read(&path).unwrap_or_else(|error| panic!("{path:?}: {error}"));
        assert!(read == file_contents(index), "{path:?} differs");
    }
    // Delete half and write more (overwrites and frees on the tier).
    for index in (0..FILES).step_by(2) {
        std::fs::remove_file(point.join(format!("dir/file{index}"))).unwrap();
    }
    std::fs::write(point.join("dir/late"), file_contents(11)).unwrap();
    unmount(&point, &mut cleanup);
    run(tool("e2fsck").arg("-fn").arg(&attached.device));
    detach(attached, &mut cleanup);
}

#[test]
fn ext4_on_a_reduced_tier_post_then_inline() {
    check_ext4("post", "inline");
}

#[test]
fn ext4_on_a_reduced_tier_auto_then_post() {
    check_ext4("auto", "post");
}

// ---------------------------------------------------------------- under a cache and tiering

/// Keeps forcing segments between `ssd` and `disk` with `tierd move`: each
/// round moves one segment up and the one moved up six rounds ago back
/// down (the reduced tier holds 16 of the 64 segments).
struct Mover {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Mover {
    fn start(server: &Server) -> Mover {
        let stop = Arc::new(AtomicBool::new(false));
        let config = server.config.clone();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut round: u64 = 0;
            while !flag.load(Ordering::Relaxed) {
                let mut moves = vec![((round * 5) % 64, "ssd")];
                if round >= 6 {
                    moves.push((((round - 6) * 5) % 64, "disk"));
                }
                for (segment, tier) in moves {
                    // A refusal (already there, full) is fine.
                    let _ = run_unchecked(
                        Command::new(env!("CARGO_BIN_EXE_tierd"))
                            .arg("move")
                            .arg("--config")
                            .arg(&config)
                            .args(["--volume", "vol0", "--segment"])
                            .arg(segment.to_string())
                            .args(["--to", tier]),
                    );
                }
                round += 1;
                pause_ms(20 + (round * 13) % 31);
            }
        });
        Mover {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("mover");
        }
    }
}

impl Drop for Mover {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// qemu-io patterns and fio verify through a volume whose cache tier or
/// fast tier is reduced; the reduced tier really held data.
fn check_under(config: &str, tiered: bool) {
    if !require_tools(&["qemu-io", "fio"]) {
        return;
    }
    let mut server = Server::start(config);
    let mover = tiered.then(|| Mover::start(&server));
    let mut both: Vec<&str> = QEMU_WRITES.to_vec();
    both.extend_from_slice(&QEMU_READS);
    qemu_io(&server.uri, &both);
    let mut args = vec![
        "--rw=randwrite",
        "--bs=6k",
        "--iodepth=16",
        "--size=24M",
        "--offset=8M",
        "--buffer_compress_percentage=50",
        "--dedupe_percentage=50",
    ];
    args.extend(VERIFY);
    fio(&server.uri, &args);
    qemu_io(&server.uri, &QEMU_READS[..7]);
    let status = server.volume_status();
    let reduction = server.reduction("ssd");
    eprintln!("reduced ssd: {reduction}\nvolume: {status}");
    assert!(
        number(&reduction, "logical_bytes") > 0 && number(&reduction, "physical_bytes") > 0,
        "nothing reached the reduced tier: {reduction:#}"
    );
    if let Some(mover) = mover {
        let deadline = Deadline::after(Duration::from_secs(60));
        while server.completed_moves() < 4 {
            assert!(!deadline.passed(), "no moves: {}", server.volume_status());
            pause_ms(50);
        }
        mover.finish();
    } else {
        let cache = &status["cache"];
        assert!(
            number(cache, "allocations") > number(cache, "slots"),
            "the cache did not churn: {cache:#}"
        );
    }
    // kill -9 after a FLUSH: the data reads back.
    server.flush();
    server.kill();
    server.spawn();
    qemu_io(&server.uri, &QEMU_READS[..7]);
    let mut args = vec![
        "--rw=read",
        "--bs=6k",
        "--iodepth=16",
        "--size=24M",
        "--offset=8M",
        "--verify_only",
    ];
    args.extend(VERIFY);
    fio(&server.uri, &args);
}

#[test]
fn a_reduced_cache_tier_under_a_writeback_cache_volume() {
    check_under(&cache_config("post"), false);
}

#[test]
fn a_reduced_fast_tier_under_tiering_with_moves() {
    check_under(&tiered_config("auto"), true);
}

// ---------------------------------------------------------------- restarts

/// Writes in one mode, restarts cleanly in each other mode (all data
/// intact, staged blocks reduced after the restart), then restarts with
/// another block size or logical size: refused, naming the key.
#[test]
fn a_reduced_tier_restarts_in_another_mode_and_refuses_another_geometry() {
    let mut server = Server::start(&alone_config("inline", ""));
    let mut model = vec![0u8; VOLUME_BYTES as usize];
    let write = |model: &mut [u8], server: &Server, seed: u64, at: u64, length: usize| {
        let data = reducible_bytes(seed, length);
        let mut client = Client::connect_uri(&server.uri).unwrap();
        client.write(at, &data, false).unwrap();
        client.flush().unwrap();
        model[at as usize..at as usize + length].copy_from_slice(&data);
    };
    let check = |server: &Server, model: &[u8], when: &str| {
        let mut client = Client::connect_uri(&server.uri).unwrap();
        let mut back = vec![0u8; model.len()];
        client.read(0, &mut back).unwrap();
        if back != model {
            let at = (0..model.len()).find(|&at| back[at] != model[at]);
            panic!("{when}: byte {at:?} differs\n{}", server.log());
        }
    };
    write(&mut model, &server, 1, 0, 8 * MIB as usize);
    write(&mut model, &server, 2, 20 * MIB + 1000, 3 * MIB as usize);
    for (mode, seed) in [("post", 3), ("auto", 4), ("inline", 5), ("post", 6)] {
        server.stop();
        server.set_config(&alone_config(mode, ""));
        server.spawn();
        assert_eq!(server.reduction("flash")["setting"], mode);
        check(&server, &model, &format!("restarted in {mode}"));
        write(
            &mut model,
            &server,
            seed,
            seed * 7 * MIB + 12345,
            2 * MIB as usize,
        );
        check(&server, &model, &format!("written in {mode}"));
    }
    // The last writes were staged (post): a clean stop keeps them staged,
    // the restart reduces them.
    server.stop();
    server.spawn();
    let reduction = server.wait_unstaged("flash");
    check(&server, &model, "after the stage drained");
    server.stop();

    for (text, key) in [
        (
            alone_config("inline", "").replace("block = \"4KiB\"", "block = \"8KiB\""),
            "block",
        ),
        (
            alone_config("inline", "").replace("logical = \"64MiB\"", "logical = \"128MiB\""),
            "logical",
        ),
    ] {
        server.set_config(&text);
        let error = server
            .try_spawn()
            .expect_err("started with another geometry");
        eprintln!("{key}: {error}");
        assert!(
            error.contains(&format!("reduce.{key}")),
            "the refusal does not name reduce.{key}: {error}"
        );
        assert!(error.contains("flash"), "{error}");
    }
    // The old settings back: everything is there.
    server.set_config(&alone_config("auto", ""));
    server.spawn();
    check(&server, &model, "after the refused restarts");
    eprintln!("restarts: {reduction}");
}

// ---------------------------------------------------------------- space

/// Incompressible unique data in each mode, flushed and reduced: the tier
/// holds it in about its own size. (Post-process once kept every staged
/// raw copy's space: staged and reduced raw fragments shared packs, and a
/// pack is freed only when all its fragments are dead.)
#[test]
fn incompressible_data_takes_its_own_size_in_every_mode() {
    for mode in ["inline", "post", "auto"] {
        let server = Server::start(&alone_config(mode, ""));
        let mut client = Client::connect_uri(&server.uri).unwrap();
        let data = random_bytes(42, 24 * MIB as usize);
        for (index, part) in data.chunks(MIB as usize).enumerate() {
            client.write(index as u64 * MIB, part, false).unwrap();
        }
        client.flush().unwrap();
        server.wait_unstaged("flash");
        client.flush().unwrap();
        let reduction = server.reduction("flash");
        eprintln!("incompressible ({mode}): {reduction}");
        let physical = number(&reduction, "physical_bytes");
        assert!(
            physical <= 24 * MIB + MIB,
            "{mode}: 24 MiB of incompressible data take {physical} bytes: {reduction:#}"
        );
        let mut back = vec![0u8; data.len()];
        client.read(0, &mut back).unwrap();
        assert!(back == data, "{mode}: data differs");
    }
}
