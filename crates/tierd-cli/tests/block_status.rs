//! NBD `BLOCK_STATUS` (`base:allocation`) of `tierd serve` against the
//! clients that act on it (issue 17): `nbdinfo --map` shows data exactly
//! where a fresh volume was written (at the home file system's block
//! size) and holes elsewhere; sparse copies (`nbdcopy`, `qemu-img
//! convert`), which skip what is reported a hole, give the same bytes as
//! `nbdcopy --no-extents`, which reads everything, and as the writes made
//! (checksums), while segments keep moving between the memory tier and
//! home; the server's read counter shows the sparse copies skipped holes.
//! The same on a writeback cache volume, whose cached blocks are data.
//!
//! Each test needs some tools; when one is missing the test prints why and
//! returns, except under `CI=true`, where it fails. Install them with
//! `../shared/tools/install-nbd-clients.sh`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::serve::ServeProcess;
use common::tools::*;
use common::FastTier;

const VOLUME_BYTES: u64 = 64 << 20;
const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// The cache volume's block (`CACHE` below).
const CACHE_BLOCK_BYTES: u64 = 16 * KIB;
const CACHE: &str = "block = \"16KiB\", mode = \"writeback\", admission = \"always\", sequential_cutoff = \"0\", commit_interval = \"10ms\", writeback_idle = \"10ms\"";

/// What the tests write into a fresh volume, in order: `(offset, length,
/// byte)` (qemu-io `write -P`), then trims `(offset, length)`. One write
/// crosses a segment boundary (1 MiB segments), one is 512 bytes inside a
/// file system block, one holds segment 40 (which the copy test moves).
const WRITES: [(u64, u64, u8); 5] = [
    (100 * KIB, 4 * KIB, 0x5a),
    (3 * MIB - 4 * KIB, 12 * KIB, 0xa5),
    (10 * MIB + 512, 512, 0x11),
    (20 * MIB, MIB, 0x77),
    (40 * MIB + 4 * KIB, 8 * KIB, 0x3c),
];
const TRIMS: [(u64, u64); 1] = [(20 * MIB + 256 * KIB, 256 * KIB)];

/// The ranges holding data after [`WRITES`] and [`TRIMS`], in order.
fn written_ranges() -> Vec<(u64, u64)> {
    vec![
        (100 * KIB, 104 * KIB),
        (3 * MIB - 4 * KIB, 3 * MIB + 8 * KIB),
        (10 * MIB + 512, 10 * MIB + 1024),
        (20 * MIB, 20 * MIB + 256 * KIB),
        (20 * MIB + 512 * KIB, 21 * MIB),
        (40 * MIB + 4 * KIB, 40 * MIB + 12 * KIB),
    ]
}

/// The volume's bytes after [`WRITES`] and [`TRIMS`].
fn expected_image() -> Vec<u8> {
    let mut image = vec![0u8; VOLUME_BYTES as usize];
    for (offset, length, byte) in WRITES {
        image[offset as usize..(offset + length) as usize].fill(byte);
    }
    for (offset, length) in TRIMS {
        image[offset as usize..(offset + length) as usize].fill(0);
    }
    image
}

/// A `tierd serve` of the small stack (a 16 MiB memory tier over a 64 MiB
/// file home, 1 MiB segments; or a 1 MiB cache tier over that home) with a
/// metrics endpoint.
struct Server {
    directory: tempfile::TempDir,
    config: PathBuf,
    _process: ServeProcess,
    uri: String,
    metrics: String,
}

impl Server {
    fn start(cache: bool) -> Server {
        let directory = tempfile::Builder::new()
            .prefix("tierd-block-status-")
            .tempdir()
            .expect("temp dir");
        let fast = if cache {
            FastTier::Cache {
                size: "1MiB",
                cache: CACHE,
            }
        } else {
            FastTier::Memory
        };
        let config = directory.path().join("tierd.toml");
        std::fs::write(
            &config,
            common::small_stack_config(
                &directory.path().join("data").display().to_string(),
                "[server]\nlisten = [\"unix:tierd.sock\"]\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
                fast,
                "",
            ),
        )
        .unwrap();
        let mut process = ServeProcess::spawn(directory.path(), Some(&config));
        let uri = process.uri("vol0");
        let metrics = process
            .wait_line("tierd: metrics at http://")
            .trim_start_matches("tierd: metrics at http://")
            .trim_end_matches("/metrics")
            .to_string();
        Server {
            directory,
            config,
            _process: process,
            uri,
            metrics,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.directory.path().join(name)
    }

    /// The home tier file's block size: the granularity of its holes.
    fn home_block_bytes(&self) -> u64 {
        std::fs::metadata(self.path("data/disk.img"))
            .expect("the home tier file")
            .blksize()
    }

    /// [`WRITES`] then [`TRIMS`] with qemu-io, and a flush.
    fn write_and_trim(&self) {
        let mut command = tool("qemu-io");
        command.args(["-f", "raw"]);
        for (offset, length, byte) in WRITES {
            command
                .arg("-c")
                .arg(format!("write -P {byte:#x} {offset} {length}"));
        }
        for (offset, length) in TRIMS {
            command.arg("-c").arg(format!("discard {offset} {length}"));
        }
        command.args(["-c", "flush"]).arg(&self.uri);
        let output = run(&mut command);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            !stdout.contains("failed") && !stdout.contains("error"),
            "{}",
            describe(&command, &output)
        );
    }

    /// `nbdinfo --map --json`: `(start, end, data)` runs covering the
    /// volume, adjacent runs of one kind merged.
    fn map(&self) -> Vec<(u64, u64, bool)> {
        let output = run(tool("nbdinfo").args(["--map", "--json"]).arg(&self.uri));
        let json: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
                panic!(
                    "nbdinfo --map --json printed no JSON ({error}): {}",
                    String::from_utf8_lossy(&output.stdout)
                )
            });
        let mut runs: Vec<(u64, u64, bool)> = Vec::new();
        for extent in json.as_array().expect("an array of extents") {
            let offset = extent["offset"].as_u64().expect("offset");
            let length = extent["length"].as_u64().expect("length");
            let kind = extent["type"].as_u64().expect("type");
            assert!(kind == 0 || kind == 3, "type {kind} in {extent}");
            let data = kind == 0;
            assert_eq!(offset, runs.last().map_or(0, |run| run.1), "{json}");
            match runs.last_mut() {
                Some(last) if last.2 == data => last.1 = offset + length,
                _ => runs.push((offset, offset + length, data)),
            }
        }
        assert_eq!(runs.last().map(|run| run.1), Some(VOLUME_BYTES), "{json}");
        runs
    }

    /// `tierd_nbd_read_bytes_total` from the metrics endpoint.
    fn read_bytes(&self) -> u64 {
        let mut stream = TcpStream::connect(&self.metrics).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n",
            self.metrics
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
            .lines()
            .find_map(|line| line.strip_prefix("tierd_nbd_read_bytes_total "))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no read counter in:\n{response}"))
    }
}

/// `tierd move` of `segment` to `tier` on the server of `config`; false
/// when refused (the tier is full, the segment is moving).
fn request_move(config: &Path, segment: u64, tier: &str) -> bool {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tierd"));
    command
        .arg("move")
        .arg("--config")
        .arg(config)
        .args(["--volume", "vol0", "--segment"])
        .arg(segment.to_string())
        .args(["--to", tier]);
    run_unchecked(&mut command).status.success()
}

/// The written ranges rounded out to `block`, merged: where a map may show
/// data, at that granularity.
fn rounded_out(block: u64) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for (start, end) in written_ranges() {
        let (start, end) = (start / block * block, end.div_ceil(block) * block);
        match ranges.last_mut() {
            Some(last) if last.1 >= start => last.1 = last.1.max(end),
            _ => ranges.push((start, end)),
        }
    }
    ranges
}

/// `ranges` as `(start, end, data)` runs covering the volume.
fn as_map(ranges: &[(u64, u64)]) -> Vec<(u64, u64, bool)> {
    let mut runs = Vec::new();
    let mut at = 0;
    for &(start, end) in ranges {
        if start > at {
            runs.push((at, start, false));
        }
        runs.push((start, end, true));
        at = end;
    }
    if at < VOLUME_BYTES {
        runs.push((at, VOLUME_BYTES, false));
    }
    runs
}

/// True when `map` shows data over every byte of `ranges`.
fn covers(map: &[(u64, u64, bool)], ranges: &[(u64, u64)]) -> bool {
    ranges.iter().all(|&(start, end)| {
        map.iter()
            .filter(|run| run.2 && run.0 < end && run.1 > start)
            .map(|run| run.1.min(end) - run.0.max(start))
            .sum::<u64>()
            == end - start
    })
}

/// A fresh tiered volume, every segment at home: the map is exactly the
/// writes less the trim, rounded out to the home file system's block.
#[test]
fn nbdinfo_map_shows_data_where_written_and_holes_elsewhere() {
    if !require_tools(&["nbdinfo", "qemu-io"]) {
        return;
    }
    let server = Server::start(false);
    assert_eq!(
        server.map(),
        vec![(0, VOLUME_BYTES, false)],
        "a fresh volume is one hole"
    );
    server.write_and_trim();
    let block = server.home_block_bytes();
    let map = server.map();
    assert_eq!(map, as_map(&rounded_out(block)), "block {block}");
    eprintln!("nbdinfo --map ({block}-byte file system blocks): {map:?}");
}

/// A writeback cache volume: what the cache holds is data at its 16 KiB
/// blocks, home's holes at the file system's: the map covers every write
/// and lies within the writes rounded out to cache blocks.
#[test]
fn nbdinfo_map_on_a_cache_volume_covers_the_writes_in_cache_blocks() {
    if !require_tools(&["nbdinfo", "qemu-io"]) {
        return;
    }
    let server = Server::start(true);
    assert_eq!(server.map(), vec![(0, VOLUME_BYTES, false)]);
    server.write_and_trim();
    let map = server.map();
    assert!(covers(&map, &written_ranges()), "{map:?}");
    // The trimmed range may still show as data: whether home got the
    // blocks' writeback before the trim reached it is a matter of timing
    // (CI at ca12fda saw it), and data that reads as zeroes reported as
    // data is the safe direction. Anything outside what was ever written,
    // in cache blocks, is not.
    let ever_written: Vec<(u64, u64)> = WRITES
        .iter()
        .map(|(offset, length, _)| {
            (
                offset / CACHE_BLOCK_BYTES * CACHE_BLOCK_BYTES,
                (offset + length).div_ceil(CACHE_BLOCK_BYTES) * CACHE_BLOCK_BYTES,
            )
        })
        .collect();
    assert!(
        covers(&as_map(&ever_written), &data_of(&map)),
        "data outside the written cache blocks: {map:?}"
    );
    eprintln!("nbdinfo --map on the cache volume: {map:?}");
}

fn data_of(map: &[(u64, u64, bool)]) -> Vec<(u64, u64)> {
    map.iter()
        .filter(|run| run.2)
        .map(|run| (run.0, run.1))
        .collect()
}

#[test]
fn sparse_copies_keep_every_byte_while_segments_move() {
    check_sparse_copies(false);
}

#[test]
fn sparse_copies_keep_every_byte_on_a_cache_volume() {
    check_sparse_copies(true);
}

/// `nbdcopy` (sparse), `nbdcopy --no-extents` (reads all) and `qemu-img
/// convert` (sparse) of the export to files: each file's checksum is the
/// written image's, while (on the tiered volume) a thread keeps moving the
/// segments that hold the writes, and an empty one, between the memory
/// tier and home. The server read fewer bytes for each sparse copy than
/// the volume holds, and all of them for the full one.
fn check_sparse_copies(cache: bool) {
    if !require_tools(&["nbdinfo", "qemu-io", "nbdcopy", "qemu-img", "sha256sum"]) {
        return;
    }
    let server = Server::start(cache);
    server.write_and_trim();
    let expected_path = server.path("expected.img");
    std::fs::write(&expected_path, expected_image()).unwrap();
    let expected = sha256_of(&expected_path);
    let stop = Arc::new(AtomicBool::new(false));
    let mover = (!cache).then(|| {
        let config = server.config.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut moved = 0u32;
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for segment in [0u64, 2, 3, 10, 20, 40, 50] {
                    let tier = if round.is_multiple_of(2) {
                        "mem"
                    } else {
                        "disk"
                    };
                    moved += u32::from(request_move(&config, segment, tier));
                }
                round += 1;
                pause_ms(30);
            }
            moved
        })
    });
    for round in 0..3 {
        for (name, args) in [
            ("nbdcopy", vec!["nbdcopy"]),
            ("nbdcopy-full", vec!["nbdcopy", "--no-extents"]),
            (
                "qemu-img",
                vec!["qemu-img", "convert", "-f", "raw", "-O", "raw"],
            ),
        ] {
            let copy = server.path(&format!("{name}-{round}.img"));
            let before = server.read_bytes();
            let mut command = tool(args[0]);
            command.args(&args[1..]).arg(&server.uri).arg(&copy);
            run(&mut command);
            let read = server.read_bytes() - before;
            assert_eq!(
                sha256_of(&copy),
                expected,
                "{name} (round {round}) differs from the written image"
            );
            if name == "nbdcopy-full" {
                assert!(read >= VOLUME_BYTES, "{name} read {read} bytes");
            } else {
                assert!(
                    read < VOLUME_BYTES / 2,
                    "{name} read {read} bytes: the holes were not skipped"
                );
            }
            eprintln!("round {round}: {name} read {read} of {VOLUME_BYTES} bytes");
            std::fs::remove_file(&copy).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(mover) = mover {
        let moved = mover.join().expect("mover thread");
        let output = run(Command::new(env!("CARGO_BIN_EXE_tierd"))
            .args(["status", "--json", "--config"])
            .arg(&server.config));
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let completed = status["volumes"][0]["completed_moves"]
            .as_u64()
            .unwrap_or(0);
        assert!(completed > 0, "no move completed: {status}");
        eprintln!("{moved} moves accepted, {completed} completed while copying");
    }
    // The map still covers every write, wherever the segments are now.
    let map = server.map();
    assert!(covers(&map, &written_ranges()), "{map:?}");
}
