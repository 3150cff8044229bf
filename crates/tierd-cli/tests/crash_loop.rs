//! Real-process reliability tests of `tierd serve` (issue 5 §2 and §4):
//!
//! - `kill_9_loop_keeps_flushed_writes_and_finished_moves`: a writer stamps
//!   4 KiB blocks over NBD and FLUSHes now and then, `tierd move` forces
//!   segments between the memory tier and the file home, and the server is
//!   `kill -9`ed at a random moment, restarted and checked — placement and
//!   every block against a checksum map — many times over.
//! - `kill_9_loop_on_a_reduced_tier_*`: the same loop on a volume of one
//!   reduced tier (compression + dedup, issue 15) in `inline`, `post` and
//!   `auto` mode: flushed writes read back after every kill -9, and blocks
//!   staged for post-process reduction are reduced after the restart.
//! - `kill_9_loop_on_a_replicated_home_keeps_flushed_writes`: the same loop
//!   on a home tier with replicas in its free space (issue 17), a reader
//!   repeating a group of far-apart extents beside the writer, so copies
//!   are made, read from and dropped by writes between the kills; every
//!   block the reader sees is checked against the writer's acknowledgements
//!   while the server runs, and after each restart as usual.
//! - `lost_fast_tier_*`: the fault drill (`tierd fault --gone`) takes a
//!   non-volatile fast tier away while serving.
//! - `missing_fast_tier_file_*`: the fast tier's file is deleted while
//!   serving, then the server restarts.
//! - `client_that_stops_reading_replies_*`: bounded memory under a client
//!   that never reads its replies.
//!
//! The seed of the crash loop is printed; `TIERD_SEED=N` replays its choices
//! (the process timing still varies). `TIERD_CRASH_ITERATIONS=N` sets the
//! number of kills (default 20). Nothing asserts speed; waits have generous
//! deadlines that fail loudly.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::serve::{ServeProcess, READY_PREFIX};
use serde_json::{json, Value};
use tierd_common::clock::{Clock, SystemClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_nbd::{Client, ClientError};

const MIB: u64 = 1 << 20;
const BLOCK_BYTES: usize = 4096;
const VOLUME_BYTES: u64 = 64 * MIB;
const SEGMENT_BYTES: u64 = MIB;
const SEGMENTS: u32 = (VOLUME_BYTES / SEGMENT_BYTES) as u32;
const BLOCKS: u32 = (VOLUME_BYTES / BLOCK_BYTES as u64) as u32;
/// Memory tier capacity in segments (16 MiB of 1 MiB segments).
const MEM_SEGMENTS: usize = 16;
const MAGIC: &[u8; 8] = b"TIERDCRS";
/// How long a server gets to start, and a move or a status to arrive.
const DEADLINE_NS: u64 = 120_000_000_000;

fn sleep_ms(milliseconds: u64) {
    SystemClock::new().sleep_ns(milliseconds * 1_000_000);
}

// ---------------------------------------------------------------- server

/// The write-through memory tier over a file home that the brief asks for
/// (the shared `common::small_stack_config`), its copies slowed to 16 MiB/s:
/// a move of 1 MiB takes ~60 ms, so kills land during copies too.
fn mem_config() -> String {
    common::small_stack_config(
        "data",
        "",
        common::FastTier::Memory,
        "migration_max_rate = \"16MiB\"",
    )
}

/// A writeback cache volume for the crash loop: the same 64 MiB volume over
/// a file home, cached by a 256 KiB file tier `ssd` in 8 KiB blocks — 32
/// slots for 8 K blocks, with up to 8 writes of 1–8 4 KiB blocks in flight —
/// so nearly every write is a miss that merges half a block from home, dirty
/// blocks are evicted (written back inline) all the time, slots are reused
/// after each commit, and a write can find no free slot. Commits every 5 ms
/// (besides every FLUSH), writeback when idle for 5 ms, above 25% dirty.
fn cache_config() -> String {
    common::small_stack_config(
        "data",
        "",
        common::FastTier::Cache {
            size: "256KiB",
            cache: "block = \"8KiB\", mode = \"writeback\", policy = \"s3fifo\", commit_interval = \"5ms\", writeback_idle = \"5ms\", dirty_high_percent = 25, dirty_low_percent = 5",
        },
        "",
    )
}

/// `cache_config` with the `adaptive` policy (ARC, adaptive admission):
/// what `serve` makes of a two-tier volume without a policy.
fn adaptive_cache_config() -> String {
    common::small_stack_config(
        "data",
        "",
        common::FastTier::Cache {
            size: "256KiB",
            cache: "block = \"8KiB\", mode = \"writeback\", policy = \"adaptive\", commit_interval = \"5ms\", writeback_idle = \"5ms\", dirty_high_percent = 25, dirty_low_percent = 5",
        },
        "",
    )
}

/// `cache_config` (but 128 slots, LRU, every write admitted) over an SMR
/// home (`docs/engine/smr.md`): the file home
/// declared a drive-managed SMR disk with 1 MiB bands from byte 64 KiB, so
/// every write is staged and destaged by whole-band rewrites (after 5 ms
/// of idle, or above 25 % dirty); kills land mid-band, writes block on a
/// band being rewritten and help it.
fn smr_cache_config() -> String {
    let config = common::small_stack_config(
        "data",
        "",
        common::FastTier::Cache {
            size: "1MiB",
            cache: "block = \"8KiB\", mode = \"writeback\", policy = \"lru\", admission = \"always\", commit_interval = \"5ms\", smr_idle = \"5ms\", dirty_high_percent = 25, dirty_low_percent = 5",
        },
        "",
    );
    let home = "path = \"disk.img\"\n";
    assert!(config.contains(home));
    config.replace(
        home,
        "path = \"disk.img\"\nsmr = { band = \"1MiB\", first_band = \"64KiB\" }\n",
    )
}

/// A volume of one reduced tier `flash`: a 44 MiB file presenting 64 MiB
/// (the writer's blocks compress about 2:1, and its random overwrites keep
/// the cleaner busy), reduced in 4 KiB blocks in `mode`, 64 KiB packs, a
/// 4 MiB stage so post mode also overflows to inline, deciding `auto`'s
/// switch every 100 ms.
fn reduced_config(mode: &str) -> String {
    format!(
        r#"data_dir = "data"

[[tier]]
name = "flash"
backend = "file"
path = "flash.img"
size = "44MiB"
reduce = {{ block = "4KiB", mode = "{mode}", logical = "64MiB", pack = "64KiB", stage = "4MiB", window = "100ms" }}

[[volume]]
name = "vol0"
size = "64MiB"
segment = "1MiB"
tiers = ["flash"]
period = "200ms"
"#
    )
}

/// Bytes of the replicated home's extents (its `replicas.extent`).
const REPLICA_EXTENT_BYTES: u64 = 64 << 10;
const VOLUME_EXTENTS: u64 = VOLUME_BYTES / REPLICA_EXTENT_BYTES;

/// A volume of one file tier `disk` with replicas (docs/replicas.md) set to
/// make copies soon and often: the 96 MiB tier under the 64 MiB volume
/// always has its last ~32 MiB free (the writer soon writes all of the
/// volume), members 8 MiB from their group's centre are far, a read
/// session ends after 20 ms of quiet and places its group at once
/// (`min_recurrences = 1`), copies run whenever the copier looks
/// (`idle = "0ms"`), and recurring sequences are laid out contiguously
/// too. No disk model: reads route by the distance from the last read
/// (the head estimate of a disk without one), and the loop runs at file
/// speed.
fn replicated_config() -> String {
    r#"data_dir = "data"

[[tier]]
name = "disk"
backend = "file"
path = "disk.img"
size = "96MiB"
replicas = { max_share = "50%", max_copies = 4, contiguous_sequences = true, extent = "64KiB", far = "8MiB", session_gap = "20ms", min_recurrences = 1, idle = "0ms" }

[[volume]]
name = "vol0"
size = "64MiB"
segment = "1MiB"
tiers = ["disk"]
period = "200ms"
"#
    .to_string()
}

/// A non-volatile file fast tier `ssd` (with the fault wrapper when
/// `faults`) over a file home.
fn ssd_config(faults: bool) -> String {
    common::small_stack_config("data", "", common::FastTier::File { faults }, "")
}

/// A running `tierd serve` (`common::serve::ServeProcess`) with the paths
/// these tests use; SIGKILLed on drop if still running.
struct Server {
    process: ServeProcess,
    dir: PathBuf,
    uri: String,
    admin: PathBuf,
}

impl Server {
    /// Starts `tierd serve --config config.toml` in `dir` and waits for its
    /// admin socket line; `Err(exit status and stderr)` when it exits instead.
    fn try_start(dir: &Path) -> Result<Server, String> {
        let mut process = ServeProcess::spawn(dir, Some(Path::new("config.toml")));
        if process.try_wait_line(READY_PREFIX).is_err() {
            // Closed stdout (the process exited) or nothing for a minute.
            let status = process.kill();
            return Err(format!(
                "{}\n{}",
                status.map_or_else(|| "not running".to_string(), |status| status.to_string()),
                process.stderr()
            ));
        }
        Ok(Server {
            uri: process.uri("vol0"),
            admin: process.admin_socket(),
            process,
            dir: dir.to_path_buf(),
        })
    }

    fn start(dir: &Path) -> Server {
        Server::try_start(dir).unwrap_or_else(|error| panic!("tierd serve failed: {error}"))
    }

    fn pid(&self) -> i32 {
        self.process.pid()
    }

    fn log(&self) -> String {
        self.process.stderr_tail(30)
    }

    fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGTERM and wait for the clean stop.
    fn stop(&mut self) {
        let status = self.process.stop();
        assert!(status.success(), "clean stop: {status}\n{}", self.log());
    }

    fn tierd(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tierd"))
            .args(args)
            .args(["--config", "config.toml"])
            .current_dir(&self.dir)
            .output()
            .expect("run tierd")
    }

    /// The volume's status (must answer).
    fn status(&self) -> Value {
        admin(&self.admin, &json!({"cmd": "status"}))
            .unwrap_or_else(|| panic!("no status reply\n{}", self.log()))["volumes"][0]
            .clone()
    }

    fn move_segment(&self, segment: u32, tier: &str) -> bool {
        self.tierd(&[
            "move",
            "--volume",
            "vol0",
            "--segment",
            &segment.to_string(),
            "--to",
            tier,
        ])
        .status
        .success()
    }

    /// Waits until no move is queued or copying.
    fn wait_idle(&self) -> Value {
        let clock = SystemClock::new();
        loop {
            let status = self.status();
            if idle(&status) {
                return status;
            }
            assert!(
                clock.now_ns() < DEADLINE_NS,
                "moves never settled: {status}"
            );
            sleep_ms(10);
        }
    }

    /// VmRSS of the server in KiB.
    fn rss_kib(&self) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }
}

fn idle(status: &Value) -> bool {
    status["in_flight"].as_array().is_some_and(Vec::is_empty)
        && status["pending_moves"].as_u64() == Some(0)
}

/// One admin request; `None` when the server does not answer (killed).
fn admin(path: &Path, request: &Value) -> Option<Value> {
    let mut stream = UnixStream::connect(path).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    stream.write_all(format!("{request}\n").as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).ok()?;
    serde_json::from_str(&line).ok()
}

// ---------------------------------------------------------------- blocks

/// The contents of `block` written with stamp `seq` (≥ 1): a header naming
/// both, then words derived from them, so any block read back is either all
/// zeroes (never written), exactly one stamp's contents, or garbage.
fn fill_block(seq: u64, block: u32, out: &mut [u8]) {
    out[..8].copy_from_slice(MAGIC);
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out[16..24].copy_from_slice(&u64::from(block).to_le_bytes());
    // Random words to the middle, then one word repeated: 2:1
    // compressible, for the reduced tiers' loops.
    let mut word = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(block);
    for (index, chunk) in out[24..].chunks_exact_mut(8).enumerate() {
        if index < (BLOCK_BYTES / 2 - 24) / 8 {
            word ^= word << 13;
            word ^= word >> 7;
            word ^= word << 17;
        }
        chunk.copy_from_slice(&word.to_le_bytes());
    }
}

/// What a block read back holds: `Ok(0)` for zeroes, `Ok(seq)` for an intact
/// stamp, `Err(description)` for anything else.
fn decode_block(block: u32, data: &[u8], scratch: &mut [u8]) -> Result<u64, String> {
    if data.iter().all(|&byte| byte == 0) {
        return Ok(0);
    }
    if &data[..8] != MAGIC {
        return Err(format!("no stamp (starts {:02x?})", &data[..16]));
    }
    let seq = u64::from_le_bytes(data[8..16].try_into().unwrap());
    let named = u64::from_le_bytes(data[16..24].try_into().unwrap());
    if named != u64::from(block) {
        return Err(format!("holds block {named}'s stamp {seq}"));
    }
    fill_block(seq, block, scratch);
    if data == scratch {
        return Ok(seq);
    }
    let at = (0..BLOCK_BYTES)
        .find(|&at| data[at] != scratch[at])
        .unwrap_or(0);
    Err(format!(
        "stamp {seq} with byte {at} wrong (torn or garbage)"
    ))
}

/// Reads the whole volume and decodes every block.
fn read_all(client: &mut Client) -> Result<Vec<u64>, String> {
    let mut stamps = Vec::with_capacity(BLOCKS as usize);
    let mut buffer = vec![0u8; MIB as usize];
    let mut scratch = vec![0u8; BLOCK_BYTES];
    let mut errors = Vec::new();
    for segment in 0..SEGMENTS {
        client
            .read(u64::from(segment) * MIB, &mut buffer)
            .map_err(|error| format!("read of segment {segment}: {error}"))?;
        for (index, data) in buffer.chunks_exact(BLOCK_BYTES).enumerate() {
            let block = segment * (MIB as u32 / BLOCK_BYTES as u32) + index as u32;
            match decode_block(block, data, &mut scratch) {
                Ok(seq) => stamps.push(seq),
                Err(error) => {
                    errors.push(format!("block {block} (segment {segment}): {error}"));
                    stamps.push(u64::MAX);
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(stamps)
    } else {
        Err(format!(
            "{} blocks hold garbage, e.g. {:?}",
            errors.len(),
            &errors[..errors.len().min(5)]
        ))
    }
}

// ---------------------------------------------------------------- writer

/// The checksum map of one run between restarts: per block, the stamp made
/// durable by a completed FLUSH, the last acknowledged stamp, and every stamp
/// sent (in order; at most one write per block is in flight at a time).
struct WriteModel {
    flushed: Vec<u64>,
    acked: Vec<u64>,
    sent: Vec<Vec<u64>>,
    writes_acked: u64,
    flushes_done: u64,
    /// An error a request got while the server was alive (a real failure).
    request_error: Option<String>,
    /// Where a concurrent reader sees the writer's progress (replicated
    /// loop).
    published: Option<Arc<Published>>,
}

impl WriteModel {
    fn new(baseline: &[u64]) -> WriteModel {
        WriteModel {
            flushed: baseline.to_vec(),
            acked: baseline.to_vec(),
            sent: vec![Vec::new(); baseline.len()],
            writes_acked: 0,
            flushes_done: 0,
            request_error: None,
            published: None,
        }
    }
}

/// Per block, the newest stamp the writer sent (stored before the write is
/// submitted) and the newest acknowledged (stored once its reply arrived),
/// for a reader on another connection: a read issued after `acked` was
/// loaded returns that stamp or a newer one; exactly that stamp when
/// `sent`, loaded after the read's reply, is still the same (no write to
/// the block was in flight meanwhile).
struct Published {
    sent: Vec<AtomicU64>,
    acked: Vec<AtomicU64>,
}

impl Published {
    fn new(baseline: &[u64]) -> Published {
        Published {
            sent: baseline.iter().map(|seq| AtomicU64::new(*seq)).collect(),
            acked: baseline.iter().map(|seq| AtomicU64::new(*seq)).collect(),
        }
    }
}

enum Pending {
    Write { first: u32, seqs: Vec<u64> },
    Flush { mark: usize },
}

/// Writes stamped runs of 1–8 blocks at random places, up to 8 requests in
/// flight, a FLUSH after every 1–64 writes, until the connection dies (the
/// kill). `next_seq` hands out stamps unique over the whole test.
fn run_writer(uri: &str, model: &mut WriteModel, rng: &mut SeededRng, next_seq: &AtomicU64) {
    let Ok(mut client) = Client::connect_uri(uri) else {
        return;
    };
    let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
    let mut busy = vec![false; BLOCKS as usize];
    // (block, seq) acknowledged, in order; a FLUSH covers a prefix of it.
    let mut acked_log: Vec<(u32, u64)> = Vec::new();
    let mut flush_in_flight = false;
    let mut writes_until_flush = rng.range(1, 65);
    let mut data = vec![0u8; 8 * BLOCK_BYTES];
    loop {
        while pending.len() < 8 {
            if writes_until_flush == 0 && !flush_in_flight {
                let Ok(cookie) = client.sender().submit_flush() else {
                    return;
                };
                pending.insert(
                    cookie,
                    Pending::Flush {
                        mark: acked_log.len(),
                    },
                );
                flush_in_flight = true;
                writes_until_flush = rng.range(1, 65);
                continue;
            }
            let count = if rng.chance(0.7) {
                1
            } else {
                rng.range(2, 9) as u32
            };
            let first = rng.below(u64::from(BLOCKS - count + 1)) as u32;
            if (first..first + count).any(|block| busy[block as usize]) {
                continue;
            }
            let mut seqs = Vec::with_capacity(count as usize);
            for (index, block) in (first..first + count).enumerate() {
                let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                fill_block(
                    seq,
                    block,
                    &mut data[index * BLOCK_BYTES..(index + 1) * BLOCK_BYTES],
                );
                busy[block as usize] = true;
                model.sent[block as usize].push(seq);
                if let Some(published) = &model.published {
                    published.sent[block as usize].store(seq, Ordering::SeqCst);
                }
                seqs.push(seq);
            }
            let Ok(cookie) = client.sender().submit_write(
                u64::from(first) * BLOCK_BYTES as u64,
                &data[..count as usize * BLOCK_BYTES],
                false,
            ) else {
                return;
            };
            pending.insert(cookie, Pending::Write { first, seqs });
            writes_until_flush = writes_until_flush.saturating_sub(1);
        }
        let completion = match client.receive() {
            Ok(completion) => completion,
            Err(_) => return,
        };
        let Some(done) = pending.remove(&completion.cookie) else {
            model.request_error = Some(format!("reply to unknown cookie {}", completion.cookie));
            return;
        };
        if let Err(error) = completion.result() {
            if !matches!(error, ClientError::Io(_)) {
                model.request_error = Some(error.to_string());
            }
            return;
        }
        match done {
            Pending::Write { first, seqs } => {
                for (index, seq) in seqs.into_iter().enumerate() {
                    let block = first + index as u32;
                    busy[block as usize] = false;
                    model.acked[block as usize] = seq;
                    if let Some(published) = &model.published {
                        published.acked[block as usize].store(seq, Ordering::SeqCst);
                    }
                    acked_log.push((block, seq));
                }
                model.writes_acked += 1;
            }
            Pending::Flush { mark } => {
                for (block, seq) in acked_log.drain(..mark) {
                    let flushed = &mut model.flushed[block as usize];
                    *flushed = (*flushed).max(seq);
                }
                flush_in_flight = false;
                model.flushes_done += 1;
            }
        }
    }
}

// ---------------------------------------------------------------- mover

/// What the mover knew when the server died.
#[derive(Default)]
struct MoverOutcome {
    /// Placement in the last status the server answered.
    placement: Option<String>,
    /// Segments asked to move (segment → target tier index) that no status
    /// taken after the request showed settled: they may land either way.
    unsettled: BTreeMap<u32, u8>,
    /// The last status showed a move copying or queued.
    busy_at_last_status: bool,
    moves_requested: u64,
    /// Cache volumes: the `cache` object of the last status answered;
    /// reduced tiers: the tier's `reduction` object; replicated tiers: its
    /// `replicas` object.
    cache: Option<Value>,
    /// Cache volumes: `tierd cache --mode` switches the server accepted.
    mode_switches: u64,
    /// Cache volumes: the modes the restart may come back in — the last
    /// status's mode, or the mode of a switch the server accepted (it is
    /// journaled before the reply) or was asked for when it died; a detach
    /// may have finished.
    modes_allowed: Vec<String>,
}

/// The modes a cache switched (or seen) to `mode` may show after a restart.
fn modes_after(mode: &str) -> Vec<String> {
    match mode {
        "detach" | "detaching" => vec!["detaching".into(), "detached".into()],
        other => vec![other.to_string()],
    }
}

/// Forces 1–3 segments at a time between `mem` (index 0) and `disk` (1)
/// with `tierd move`, then polls status until they settle, until the server
/// stops answering.
fn run_mover(server_dir: &Path, admin_path: &Path, rng: &mut SeededRng) -> MoverOutcome {
    let mut outcome = MoverOutcome::default();
    // Moves finished (done or dropped) before this run's first request: a
    // status is settled only when idle AND every request is accounted for
    // (the queue can be empty a moment before its move shows as copying).
    let mut accounted_base = None;
    let mut requested_ok = 0u64;
    loop {
        let Some(reply) = admin(admin_path, &json!({"cmd": "status"})) else {
            return outcome;
        };
        let status = &reply["volumes"][0];
        let Some(placement) = status["placement"].as_str() else {
            return outcome;
        };
        outcome.placement = Some(placement.to_string());
        outcome.busy_at_last_status = !idle(status);
        let accounted = status["completed_moves"].as_u64().unwrap_or(0)
            + status["dropped_moves"].as_u64().unwrap_or(0);
        let base = *accounted_base.get_or_insert(accounted);
        if !idle(status) || accounted - base < requested_ok {
            sleep_ms(5);
            continue;
        }
        // Taken after every request so far was queued: all settled.
        outcome.unsettled.clear();
        let on_mem: Vec<u32> = placement
            .bytes()
            .enumerate()
            .filter(|(_, tier)| *tier == b'0')
            .map(|(segment, _)| segment as u32)
            .collect();
        let batch = rng.range(1, 4);
        for _ in 0..batch {
            let segment = rng.below(u64::from(SEGMENTS)) as u32;
            if outcome.unsettled.contains_key(&segment) {
                continue;
            }
            let on_mem_now = placement.as_bytes()[segment as usize] == b'0';
            let promoting = outcome.unsettled.values().filter(|to| **to == 0).count();
            let target: u8 = if on_mem_now || on_mem.len() + promoting >= MEM_SEGMENTS {
                if on_mem_now {
                    1
                } else {
                    continue;
                }
            } else {
                0
            };
            outcome.unsettled.insert(segment, target);
            outcome.moves_requested += 1;
            let output = Command::new(env!("CARGO_BIN_EXE_tierd"))
                .args(["move", "--config", "config.toml", "--volume", "vol0"])
                .args(["--segment", &segment.to_string()])
                .args(["--to", if target == 0 { "mem" } else { "disk" }])
                .current_dir(server_dir)
                .output()
                .expect("run tierd move");
            if !output.status.success() {
                // The server died during the request (it may have queued it).
                return outcome;
            }
            requested_ok += 1;
        }
        sleep_ms(rng.range(0, 20));
    }
}

/// For a cache volume (no segments move): polls status every 2–20 ms,
/// keeping the cache's counters, and on about a third of the iterations
/// switches the mode once at a random moment (`writethrough`, `writearound`,
/// `detach` — kills then land in drains — or `writeback`); an iteration that
/// starts in another mode (mode switches persist across restarts) goes back
/// to writeback first, most of the time. A switch refused because a detach
/// is still draining is expected; any other refusal fails the test.
fn run_cache_driver(admin_path: &Path, rng: &mut SeededRng) -> MoverOutcome {
    let mut outcome = MoverOutcome::default();
    let clock = SystemClock::new();
    let start_ns = clock.now_ns();
    let mut switch_at_ms = rng.chance(0.35).then(|| rng.range(0, 700));
    let mut back_to_writeback = rng.chance(0.8);
    loop {
        let Some(reply) = admin(admin_path, &json!({"cmd": "status"})) else {
            return outcome;
        };
        let status = &reply["volumes"][0];
        let Some(placement) = status["placement"].as_str() else {
            return outcome;
        };
        outcome.placement = Some(placement.to_string());
        outcome.cache = Some(status["cache"].clone());
        let mode = status["cache"]["mode"].as_str().unwrap_or_default();
        outcome.modes_allowed = modes_after(mode);
        let elapsed_ms = (clock.now_ns() - start_ns) / 1_000_000;
        let target = if back_to_writeback && mode != "writeback" && mode != "detaching" {
            back_to_writeback = false;
            Some("writeback")
        } else if switch_at_ms.is_some_and(|at| elapsed_ms >= at) {
            switch_at_ms = None;
            Some(["writethrough", "writearound", "detach", "writeback"][rng.below(4) as usize])
        } else {
            None
        };
        if let Some(target) = target {
            outcome.modes_allowed.extend(modes_after(target));
            let Some(reply) = admin(
                admin_path,
                &json!({"cmd": "cache", "volume": "vol0", "mode": target}),
            ) else {
                return outcome;
            };
            if reply["ok"] == true {
                outcome.mode_switches += 1;
                // Journaled: the restart comes back in this mode (a detach
                // asked of a cache already detaching or detached changes
                // nothing).
                if !(target == "detach" && (mode == "detaching" || mode == "detached")) {
                    outcome.modes_allowed = modes_after(target);
                }
            } else {
                let error = reply["error"].as_str().unwrap_or_default();
                assert!(
                    error.contains("a detach is in progress"),
                    "tierd cache --mode {target} (mode was {mode}) refused: {reply}"
                );
            }
        }
        sleep_ms(rng.range(2, 21));
    }
}

/// For a volume of one tier whose figures matter (nothing moves): polls
/// status every 2–20 ms, keeping the tier's `key` object (`reduction` of a
/// reduced tier, `replicas` of a replicated one), until the server stops
/// answering.
fn run_tier_driver(admin_path: &Path, key: &str, rng: &mut SeededRng) -> MoverOutcome {
    let mut outcome = MoverOutcome::default();
    loop {
        let Some(reply) = admin(admin_path, &json!({"cmd": "status"})) else {
            return outcome;
        };
        let status = &reply["volumes"][0];
        let Some(placement) = status["placement"].as_str() else {
            return outcome;
        };
        outcome.placement = Some(placement.to_string());
        outcome.cache = Some(status["tiers"][0][key].clone());
        sleep_ms(rng.range(2, 21));
    }
}

// ---------------------------------------------------------------- reader

/// What the group reader did until the kill.
#[derive(Default)]
struct ReadOutcome {
    sessions: u64,
    extents_read: u64,
    /// Blocks whose stamp was checked exactly (no write to them in flight
    /// during the read) and at least as new as the acknowledged one.
    blocks_exact: u64,
    blocks_newer_or_torn: u64,
    /// A wrong block or a failed request while the server was alive.
    error: Option<String>,
}

/// What an extent read (`first`) and reads now hold, block by block: for
/// a failure message.
fn describe_extent(client: &mut Client, extent: u64, first: &[u8]) -> String {
    let blocks_per_extent = REPLICA_EXTENT_BYTES / BLOCK_BYTES as u64;
    let mut scratch = vec![0u8; BLOCK_BYTES];
    let mut describe = |data: &[u8]| -> Vec<String> {
        data.chunks_exact(BLOCK_BYTES)
            .enumerate()
            .map(|(index, data)| {
                let block = (extent * blocks_per_extent) as u32 + index as u32;
                match decode_block(block, data, &mut scratch) {
                    Ok(seq) => format!("{seq}"),
                    Err(error) => error,
                }
            })
            .collect()
    };
    let mut text = format!("  the extent's blocks as read: {:?}", describe(first));
    let mut again = vec![0u8; REPLICA_EXTENT_BYTES as usize];
    match client.read(extent * REPLICA_EXTENT_BYTES, &mut again) {
        Ok(()) => text.push_str(&format!("\n  read again: {:?}", describe(&again))),
        Err(error) => text.push_str(&format!("\n  read again: {error}")),
    }
    text
}

/// The read group of this iteration: six neighbouring extents in the last
/// 8 MiB of the volume (an application's files) and three far members in
/// its first half (shared libraries), interleaved as an application start
/// reads them. The group's centre is among the six, far members are
/// 24 MiB or more from it, and the nearest free space is the tier's end
/// beyond the volume, a few MiB away: copies go there and reads prefer
/// them.
fn read_group(rng: &mut SeededRng) -> Vec<u64> {
    let first = VOLUME_EXTENTS - 128 + rng.below(128 - 6);
    let cluster: Vec<u64> = (first..first + 6).collect();
    let mut far: Vec<u64> = Vec::new();
    while far.len() < 3 {
        let extent = rng.below(VOLUME_EXTENTS / 2);
        if !far.contains(&extent) {
            far.push(extent);
        }
    }
    vec![
        cluster[0], cluster[1], far[0], cluster[2], cluster[3], far[1], cluster[4], cluster[5],
        far[2],
    ]
}

/// Reads `group` (64 KiB extents) in order over and over — a session — with
/// 40–80 ms of quiet after each (longer than the 20 ms session gap), one
/// session in two with an extra extent of the volume's first half at a
/// random place (so the group's members change and it is placed again,
/// replacing copies writes dropped). Checks every block against
/// `published` (see [`Published`]): exactly the acknowledged stamp when no
/// write to it was in flight, else that stamp or a newer one (or a torn
/// block: a read racing an overlapping write may see part of it). Stops at
/// the kill.
fn run_group_reader(
    uri: &str,
    group: &[u64],
    published: &Published,
    rng: &mut SeededRng,
) -> ReadOutcome {
    let mut outcome = ReadOutcome::default();
    let Ok(mut client) = Client::connect_uri(uri) else {
        return outcome;
    };
    let blocks_per_extent = (REPLICA_EXTENT_BYTES / BLOCK_BYTES as u64) as usize;
    let mut buffer = vec![0u8; REPLICA_EXTENT_BYTES as usize];
    let mut scratch = vec![0u8; BLOCK_BYTES];
    let mut acked_before = vec![0u64; blocks_per_extent];
    loop {
        let mut session = group.to_vec();
        if rng.chance(0.5) {
            let at = rng.below(session.len() as u64 + 1) as usize;
            session.insert(at, rng.below(VOLUME_EXTENTS / 2));
        }
        for extent in session {
            let first_block = (extent * blocks_per_extent as u64) as usize;
            for (index, before) in acked_before.iter_mut().enumerate() {
                *before = published.acked[first_block + index].load(Ordering::SeqCst);
            }
            match client.read(extent * REPLICA_EXTENT_BYTES, &mut buffer) {
                Ok(()) => {}
                Err(error @ ClientError::Request { .. }) => {
                    outcome.error = Some(format!("read of extent {extent}: {error}"));
                    return outcome;
                }
                // The kill.
                Err(_) => return outcome,
            }
            outcome.extents_read += 1;
            for (index, data) in buffer.chunks_exact(BLOCK_BYTES).enumerate() {
                let block = (first_block + index) as u32;
                let before = acked_before[index];
                let sent_after = published.sent[block as usize].load(Ordering::SeqCst);
                let decoded = decode_block(block, data, &mut scratch);
                if sent_after == before {
                    // Nothing sent to it since the acknowledged write.
                    match decoded {
                        Ok(got) if got == before => outcome.blocks_exact += 1,
                        other => {
                            outcome.error = Some(format!(
                                "block {block} (extent {extent}) read {other:?}; its last write, stamp {before}, was acknowledged before the read and none was in flight\n{}",
                                describe_extent(&mut client, extent, &buffer)
                            ));
                            return outcome;
                        }
                    }
                } else {
                    match decoded {
                        Ok(got) if got < before => {
                            outcome.error = Some(format!(
                                "block {block} (extent {extent}) read stamp {got}, older than stamp {before} acknowledged before the read (stale)"
                            ));
                            return outcome;
                        }
                        _ => outcome.blocks_newer_or_torn += 1,
                    }
                }
            }
        }
        outcome.sessions += 1;
        sleep_ms(rng.range(40, 81));
    }
}

// ---------------------------------------------------------------- crash loop

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        Err(_) => default,
    }
}

#[derive(Default)]
struct Totals {
    writes_acked: u64,
    flushes: u64,
    moves_requested: u64,
    moves_completed_seen: u64,
    kills_with_moves_unsettled: u64,
    kills_with_a_move_copying_or_queued: u64,
    unsettled_moves_landed: u64,
    unsettled_moves_not_landed: u64,
    unflushed_blocks_kept_new: u64,
    unflushed_blocks_kept_old: u64,
    blocks_checked: u64,
    /// Cache volumes: acknowledged, unflushed writes that a kill -9 undid
    /// (allowed: their block's new slot was not yet journaled).
    acked_unflushed_reverted: u64,
    /// Cache volumes: the counters of the last status before each kill,
    /// summed (each process counts from its start).
    cache_counters: BTreeMap<&'static str, u64>,
    mode_switches: u64,
    /// Cache volumes: restarts that came back with blocks cached (warm).
    warm_restarts: u64,
    /// Reduced tiers: restarts that found staged blocks (then reduced).
    restarts_with_staged: u64,
    staged_bytes_at_restarts: u64,
    /// Reduced tiers: the last status's figures before each kill, summed.
    reduction_at_kills: BTreeMap<&'static str, u64>,
    /// Replicated tiers: the last status's replica counters before each
    /// kill, summed (each process counts from its start).
    replicas_at_kills: BTreeMap<&'static str, u64>,
    /// Replicated tiers: restarts that found current copies, and how many.
    restarts_with_copies: u64,
    copies_at_restarts: u64,
    /// Replicated tiers: what the group reader did.
    reader_sessions: u64,
    reader_extents: u64,
    reader_blocks_exact: u64,
    reader_blocks_racing: u64,
}

/// What the loop runs against.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stack {
    /// `mem_config`: operator moves between the memory tier and home.
    Tiered,
    /// `cache_config`: a writeback cache volume, mode switches now and then.
    Cache,
    /// `reduced_config`: one reduced tier; nothing moves.
    Reduced,
    /// `replicated_config`: one tier with replicas; a reader repeats a
    /// group of far-apart extents beside the writer.
    Replicated,
}

/// The replica counters the loop sums and reports.
const REPLICA_COUNTERS: [&str; 11] = [
    "sessions",
    "placements",
    "layouts",
    "copies_made",
    "copies_cancelled",
    "dropped_by_writes",
    "dropped_by_reclaim",
    "reads_from_replicas",
    "bytes_from_replicas",
    "refused_for_space",
    "checkpoints",
];

/// The cache counters the loop sums and reports.
const CACHE_COUNTERS: [&str; 9] = [
    "allocations",
    "clean_evictions",
    "dirty_evictions",
    "writebacks",
    "written_back_bytes",
    "no_slot_blocks",
    "write_blocks",
    "write_hit_blocks",
    "read_hit_blocks",
];

#[test]
fn kill_9_loop_keeps_flushed_writes_and_finished_moves() {
    let seed = env_number("TIERD_SEED", 0x00C0_FFEE);
    let iterations = env_number("TIERD_CRASH_ITERATIONS", 20);
    let totals = crash_loop(Stack::Tiered, &mem_config(), seed, iterations);
    assert!(
        totals.writes_acked > 0 && totals.moves_completed_seen > 0,
        "the loop wrote nothing or moved nothing"
    );
}

/// The same loop over a writeback cache volume (`cache_config`): every
/// flushed write readable after each kill -9, with evictions, writebacks,
/// slot reuse and mode switches (drains) under way.
#[test]
fn kill_9_loop_on_a_writeback_cache_volume_keeps_flushed_writes() {
    let seed = env_number("TIERD_SEED", 0x00CA_C4E0);
    let iterations = env_number("TIERD_CRASH_ITERATIONS", 20);
    let totals = crash_loop(Stack::Cache, &cache_config(), seed, iterations);
    let counter = |name: &str| totals.cache_counters.get(name).copied().unwrap_or(0);
    // The loop must have exercised what it is for, or it shows nothing.
    assert!(totals.writes_acked > 0 && totals.flushes > 0);
    assert!(
        counter("dirty_evictions") > 0 && counter("writebacks") > 0,
        "no dirty eviction or writeback: {:?}",
        totals.cache_counters
    );
    assert!(
        counter("processes_reusing_slots") > 0,
        "no process allocated more blocks than the cache has slots: {:?}",
        totals.cache_counters
    );
    assert!(totals.warm_restarts > 0, "no restart came back warm");
    if iterations >= 10 {
        assert!(
            totals.mode_switches > 0,
            "no mode switch in {iterations} iterations"
        );
    }
}

/// The same loop over the default placement's cache: adaptive admission
/// switching its rule while the writer runs and the server is killed.
/// Whatever it admits, every flushed write reads back after each kill -9.
#[test]
fn kill_9_loop_on_an_adaptive_cache_volume_keeps_flushed_writes() {
    let seed = env_number("TIERD_SEED", 0x00AD_A971);
    let iterations = env_number("TIERD_CRASH_ITERATIONS", 12);
    let totals = crash_loop(Stack::Cache, &adaptive_cache_config(), seed, iterations);
    let counter = |name: &str| totals.cache_counters.get(name).copied().unwrap_or(0);
    assert!(totals.writes_acked > 0 && totals.flushes > 0);
    // Adaptive admission may run `off` for a while; over the loop it must
    // have cached something, or the loop tested a plain volume.
    assert!(
        counter("allocations") > 0,
        "adaptive admitted nothing in {iterations} iterations: {:?}",
        totals.cache_counters
    );
}

/// The loop over an SMR home with staging (`smr_cache_config`): every
/// flushed write readable after each kill -9 with band rewrites under way
/// (and killed mid-band), then destaged again after the restart.
#[test]
fn kill_9_loop_on_an_smr_home_keeps_flushed_writes() {
    let seed = env_number("TIERD_SEED", 0x005B_A4D0);
    let iterations = env_number("TIERD_CRASH_ITERATIONS", 12);
    let totals = crash_loop(Stack::Cache, &smr_cache_config(), seed, iterations);
    let counter = |name: &str| totals.cache_counters.get(name).copied().unwrap_or(0);
    assert!(totals.writes_acked > 0 && totals.flushes > 0);
    assert!(
        counter("smr_band_rewrites") > 0,
        "no band was rewritten: {:?}",
        totals.cache_counters
    );
    // Kills during a rewrite (`smr_kills_mid_band`: the last status before
    // the kill showed one) depend on timing; DST and the engine's random
    // crash test land crashes mid-band deterministically.
}

/// The loop on a home tier with replicas (`replicated_config`): a reader
/// repeats a group of far-apart extents while the writer stamps blocks all
/// over the volume, so copies are made (and laid out), reads are served
/// from them and writes drop them, up to each kill -9. Every block the
/// reader sees is checked while the server runs (never older than what was
/// acknowledged before the read; exactly it when no write raced the read),
/// and after each restart every flushed write reads back as in the other
/// loops; an acknowledged write that did not survive must have taken its
/// whole extent with it (free at the last FLUSH: zeroes).
#[test]
fn kill_9_loop_on_a_replicated_home_keeps_flushed_writes() {
    let seed = env_number("TIERD_SEED", 0x00EE_C0DE);
    let iterations = env_number("TIERD_CRASH_ITERATIONS", 12);
    let totals = crash_loop(Stack::Replicated, &replicated_config(), seed, iterations);
    let counter = |name: &str| totals.replicas_at_kills.get(name).copied().unwrap_or(0);
    assert!(totals.writes_acked > 0 && totals.flushes > 0);
    assert!(totals.reader_sessions > 0 && totals.reader_blocks_exact > 0);
    // The loop must have exercised the replicas, or it tested a plain tier.
    assert!(
        counter("copies_made") > 0,
        "no copy was made: {:?}",
        totals.replicas_at_kills
    );
    assert!(
        counter("reads_from_replicas") > 0,
        "no read was served from a replica: {:?}",
        totals.replicas_at_kills
    );
    assert!(
        counter("dropped_by_writes") + counter("dropped_by_reclaim") > 0,
        "no write dropped a copy: {:?}",
        totals.replicas_at_kills
    );
    assert!(
        totals.restarts_with_copies > 0,
        "no restart came back with a current copy"
    );
}

/// The loop on a volume of one reduced tier, in `mode`.
fn reduced_loop(mode: &str, default_seed: u64) -> Totals {
    let seed = env_number("TIERD_SEED", default_seed);
    let iterations = env_number("TIERD_CRASH_ITERATIONS", 8);
    let totals = crash_loop(Stack::Reduced, &reduced_config(mode), seed, iterations);
    assert!(totals.writes_acked > 0 && totals.flushes > 0);
    assert!(
        totals.reduction_at_kills.get("logical_bytes") > Some(&0),
        "the reduced tier held nothing: {:?}",
        totals.reduction_at_kills
    );
    totals
}

#[test]
fn kill_9_loop_on_a_reduced_tier_inline() {
    reduced_loop("inline", 0x0052_ED01);
}

/// Post-process: kills land with blocks staged; a restart finds them
/// (journaled by the writer's FLUSHes) and reduces them.
#[test]
fn kill_9_loop_on_a_reduced_tier_post() {
    let totals = reduced_loop("post", 0x0052_ED02);
    assert_cleaner_ran(&totals);
    assert!(
        totals.restarts_with_staged > 0,
        "no restart found staged blocks: {:?}",
        totals.reduction_at_kills
    );
}

/// Auto, and the cleaner: the writer's random overwrites of 64 MiB of
/// about 2:1 data on 44 MiB fill the packs with dead fragments, so the
/// cleaner runs (and is killed mid-pass at times). Inline mode writes too
/// slowly here to fill the tier; the engine's `a_death_while_cleaning_*`
/// test kills inline cleaning at every point.
#[test]
fn kill_9_loop_on_a_reduced_tier_auto() {
    let totals = reduced_loop("auto", 0x0052_ED03);
    assert_cleaner_ran(&totals);
}

fn assert_cleaner_ran(totals: &Totals) {
    assert!(
        totals.reduction_at_kills.get("cleaner_passes") > Some(&0),
        "the cleaner never ran: {:?}",
        totals.reduction_at_kills
    );
}

/// Runs `iterations` kill -9s of a server on `config`; panics on the first
/// wrong placement or block. Returns what it did.
fn crash_loop(stack: Stack, config: &str, seed: u64, iterations: u64) -> Totals {
    eprintln!(
        "crash loop ({stack:?}): seed {seed} (TIERD_SEED={seed} replays the choices), {iterations} iterations"
    );
    let root = SeededRng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let next_seq = Arc::new(AtomicU64::new(1));
    let mut baseline = vec![0u64; BLOCKS as usize];
    let mut totals = Totals::default();
    let mut server = Server::start(dir);
    let mut last_completed = 0;

    for iteration in 0..iterations {
        let mut rng = root.derive(iteration);
        let mut writer_rng = rng.derive(1);
        let mut mover_rng = rng.derive(2);
        let uri = server.uri.clone();
        let seqs = next_seq.clone();
        let base = baseline.clone();
        // Replicated: a reader beside the writer, checking what it reads
        // against the writer's progress. Its group changes every other
        // iteration, so copies journaled before a kill are read after it.
        let published = (stack == Stack::Replicated).then(|| Arc::new(Published::new(&baseline)));
        let reader = published.clone().map(|published| {
            let group = read_group(&mut root.derive(1_000_000 + iteration / 2));
            let mut reader_rng = rng.derive(3);
            let uri = server.uri.clone();
            std::thread::spawn(move || run_group_reader(&uri, &group, &published, &mut reader_rng))
        });
        let writer = std::thread::spawn(move || {
            let mut model = WriteModel::new(&base);
            model.published = published;
            run_writer(&uri, &mut model, &mut writer_rng, &seqs);
            model
        });
        let (server_dir, admin_path) = (server.dir.clone(), server.admin.clone());
        let mover = std::thread::spawn(move || match stack {
            Stack::Tiered => run_mover(&server_dir, &admin_path, &mut mover_rng),
            Stack::Cache => run_cache_driver(&admin_path, &mut mover_rng),
            Stack::Reduced => run_tier_driver(&admin_path, "reduction", &mut mover_rng),
            Stack::Replicated => run_tier_driver(&admin_path, "replicas", &mut mover_rng),
        });
        // kill -9 at a random moment.
        sleep_ms(rng.range(50, 900));
        server.kill();
        let model = writer.join().expect("writer thread");
        let moves = mover.join().expect("mover thread");
        assert!(
            model.request_error.is_none(),
            "iteration {iteration} (seed {seed}): a request failed while the server ran: {:?}",
            model.request_error
        );
        if let Some(reader) = reader {
            let read = reader.join().expect("reader thread");
            assert!(
                read.error.is_none(),
                "iteration {iteration} (seed {seed}): the reader: {}\nreplicas at the last status: {}\n{}",
                read.error.unwrap_or_default(),
                moves.cache.as_ref().unwrap_or(&Value::Null),
                server.log()
            );
            totals.reader_sessions += read.sessions;
            totals.reader_extents += read.extents_read;
            totals.reader_blocks_exact += read.blocks_exact;
            totals.reader_blocks_racing += read.blocks_newer_or_torn;
        }

        server = Server::start(dir);
        let status = server.status();
        let placement = status["placement"].as_str().unwrap().to_string();
        // Placement: every segment whose move had settled at the last status
        // is where that status put it; a segment asked to move and not yet
        // settled is on its old tier or its target.
        if let Some(before) = &moves.placement {
            for (segment, (now, then)) in placement.bytes().zip(before.bytes()).enumerate() {
                let segment = segment as u32;
                match moves.unsettled.get(&segment) {
                    None => assert_eq!(
                        now, then,
                        "iteration {iteration} (seed {seed}): segment {segment} is on tier {} after the restart but the last status before the kill put it on {} and no move of it was pending\nbefore {before}\nafter  {placement}",
                        now as char, then as char
                    ),
                    Some(&target) => {
                        assert!(
                            now == then || now == b'0' + target,
                            "iteration {iteration}: segment {segment} moving from {} to {target} came back on {}",
                            then as char,
                            now as char
                        );
                        if now == then {
                            totals.unsettled_moves_not_landed += 1;
                        } else {
                            totals.unsettled_moves_landed += 1;
                        }
                    }
                }
            }
        }
        if !moves.unsettled.is_empty() {
            totals.kills_with_moves_unsettled += 1;
        }
        if moves.busy_at_last_status {
            totals.kills_with_a_move_copying_or_queued += 1;
        }
        totals.moves_requested += moves.moves_requested;
        if stack == Stack::Cache {
            totals.mode_switches += moves.mode_switches;
            let before = moves.cache.as_ref().unwrap_or(&Value::Null);
            for name in CACHE_COUNTERS {
                *totals.cache_counters.entry(name).or_default() +=
                    before[name].as_u64().unwrap_or(0);
            }
            if let Some(smr) = before.get("smr").filter(|smr| smr.is_object()) {
                *totals
                    .cache_counters
                    .entry("smr_band_rewrites")
                    .or_default() += smr["band_rewrites"].as_u64().unwrap_or(0);
                *totals
                    .cache_counters
                    .entry("smr_blocked_blocks")
                    .or_default() += smr["blocked_blocks"].as_u64().unwrap_or(0);
                if smr.get("rewriting").is_some_and(Value::is_object) {
                    *totals
                        .cache_counters
                        .entry("smr_kills_mid_band")
                        .or_default() += 1;
                }
            }
            if before["allocations"].as_u64() > before["slots"].as_u64() {
                *totals
                    .cache_counters
                    .entry("processes_reusing_slots")
                    .or_default() += 1;
            }
            // Warm: the mapping came back (unless the cache was detached).
            let cache = &status["cache"];
            // A mode switch, once accepted, survives the kill.
            let mode = cache["mode"].as_str().unwrap_or_default();
            assert!(
                moves.modes_allowed.is_empty() || moves.modes_allowed.iter().any(|m| m == mode),
                "iteration {iteration} (seed {seed}): the cache came back in mode {mode}; expected one of {:?}\n{}",
                moves.modes_allowed,
                server.log()
            );
            if cache["occupancy_blocks"].as_u64().unwrap_or(0) > 0 {
                totals.warm_restarts += 1;
            }
            let dirty = cache["dirty_blocks"].as_u64().unwrap_or(0);
            *totals
                .cache_counters
                .entry("dirty_blocks_at_restart")
                .or_default() += dirty;
        }
        let completed = status["completed_moves"].as_u64().unwrap();
        totals.moves_completed_seen += completed - last_completed;
        last_completed = completed;

        // Data: every block holds an intact stamp; flushed blocks exactly;
        // blocks written since their last flush hold the flushed stamp or a
        // later one; and (kill -9 is not power loss: acknowledged writes are
        // in the page cache) the last acknowledged stamp or the one in flight
        // — except on a cache volume, where a write acknowledged into a newly
        // allocated slot is durable only once a commit journals that slot
        // (at the FLUSH, every commit_interval, when slots run short), so an
        // unflushed acknowledged write may be undone (counted).
        let mut client = Client::connect_uri(&server.uri).unwrap();
        let stamps = read_all(&mut client).unwrap_or_else(|error| {
            panic!(
                "iteration {iteration} (seed {seed}): {error}\n{}",
                server.log()
            )
        });
        drop(client);
        for (block, &got) in stamps.iter().enumerate() {
            let flushed = model.flushed[block];
            let later: Vec<u64> = model.sent[block]
                .iter()
                .copied()
                .filter(|seq| *seq > flushed)
                .collect();
            assert!(
                got == flushed || later.contains(&got),
                "iteration {iteration} (seed {seed}): block {block} reads stamp {got}; flushed {flushed}, written since {later:?}\n{}",
                server.log()
            );
            let acked = model.acked[block];
            let in_flight: Vec<u64> = model.sent[block]
                .iter()
                .copied()
                .filter(|seq| *seq > acked)
                .collect();
            let kept_acked = got == acked || in_flight.contains(&got);
            // Likewise on a reduced tier: its block map is journaled at a
            // FLUSH, so an unflushed write may be undone by a kill.
            if stack != Stack::Tiered && !kept_acked {
                // On a replicated tier only because the block's extent was
                // free at the last FLUSH (its allocation is journaled then):
                // the whole extent is free again and reads zeroes.
                assert!(
                    stack != Stack::Replicated || got == 0,
                    "iteration {iteration} (seed {seed}): block {block} reads stamp {got} but write {acked} was acknowledged (in flight at the kill: {in_flight:?}); on a replicated tier an acknowledged write may be undone only with its whole extent (zeroes)\n{}",
                    server.log()
                );
                totals.acked_unflushed_reverted += 1;
                continue;
            }
            assert!(
                kept_acked,
                "iteration {iteration} (seed {seed}): block {block} reads stamp {got} but write {acked} was acknowledged (in flight at the kill: {in_flight:?}); a kill -9 lost an acknowledged write\n{}",
                server.log()
            );
            if !later.is_empty() {
                if got == flushed {
                    totals.unflushed_blocks_kept_old += 1;
                } else {
                    totals.unflushed_blocks_kept_new += 1;
                }
            }
        }
        if stack == Stack::Replicated {
            let before = moves.cache.as_ref().unwrap_or(&Value::Null);
            for name in REPLICA_COUNTERS {
                *totals.replicas_at_kills.entry(name).or_default() +=
                    before[name].as_u64().unwrap_or(0);
            }
            // Copies journaled current come back with the restart.
            let copies = status["tiers"][0]["replicas"]["current_copies"]
                .as_u64()
                .unwrap_or(0);
            if copies > 0 {
                totals.restarts_with_copies += 1;
                totals.copies_at_restarts += copies;
            }
        }
        if stack == Stack::Reduced {
            let before = moves.cache.as_ref().unwrap_or(&Value::Null);
            for name in [
                "logical_bytes",
                "staged_bytes",
                "switches",
                "stage_overflows",
                "cleaner_passes",
            ] {
                *totals.reduction_at_kills.entry(name).or_default() +=
                    before[name].as_u64().unwrap_or(0);
            }
            // Staged blocks found at the restart (its "reduced tier opened"
            // line: the workers start on them at once) are reduced, and
            // read the same.
            let opened = server.process.stderr();
            let staged = opened
                .lines()
                .rev()
                .find(|line| line.contains("msg=\"reduced tier opened\""))
                .and_then(|line| line.split(" staged_blocks=").nth(1))
                .and_then(|rest| rest.split(' ').next())
                .and_then(|count| count.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no staged_blocks in the log:\n{opened}"))
                * BLOCK_BYTES as u64;
            if staged > 0 {
                totals.restarts_with_staged += 1;
                totals.staged_bytes_at_restarts += staged;
                let clock = SystemClock::new();
                let start = clock.now_ns();
                loop {
                    let reduction = server.status()["tiers"][0]["reduction"].clone();
                    if reduction["staged_bytes"] == 0 {
                        break;
                    }
                    assert!(
                        clock.now_ns() - start < DEADLINE_NS,
                        "iteration {iteration} (seed {seed}): staged blocks never reduced after the restart: {reduction}\n{}",
                        server.log()
                    );
                    sleep_ms(10);
                }
                let mut client = Client::connect_uri(&server.uri).unwrap();
                let again = read_all(&mut client).unwrap_or_else(|error| {
                    panic!(
                        "iteration {iteration} (seed {seed}), once reduced: {error}\n{}",
                        server.log()
                    )
                });
                assert!(
                    again == stamps,
                    "iteration {iteration} (seed {seed}): blocks changed when their staged copies were reduced"
                );
            }
        }
        totals.blocks_checked += u64::from(BLOCKS);
        totals.writes_acked += model.writes_acked;
        totals.flushes += model.flushes_done;
        baseline = stamps;
        eprintln!(
            "iteration {iteration}: {} writes acked, {} flushes, {} moves asked, placement {placement}, unsettled at kill {:?}",
            model.writes_acked, model.flushes_done, moves.moves_requested, moves.unsettled
        );
        if let Some(cache) = moves.cache.as_ref().filter(|_| stack == Stack::Cache) {
            eprintln!(
                "  cache at the kill: mode {}, dirty {} of {} slots, allocations {}, dirty evictions {}, writebacks {}, no slot {}; after the restart: mode {}, {} blocks mapped",
                cache["mode"],
                cache["dirty_blocks"],
                cache["slots"],
                cache["allocations"],
                cache["dirty_evictions"],
                cache["writebacks"],
                cache["no_slot_blocks"],
                status["cache"]["mode"],
                status["cache"]["occupancy_blocks"]
            );
        }
        if let Some(replicas) = moves.cache.as_ref().filter(|_| stack == Stack::Replicated) {
            eprintln!(
                "  replicas at the kill: {} copies made, {} current, {} reads from replicas, {} dropped by writes; after the restart: {} current",
                replicas["copies_made"],
                replicas["current_copies"],
                replicas["reads_from_replicas"],
                replicas["dropped_by_writes"],
                status["tiers"][0]["replicas"]["current_copies"]
            );
        }
    }
    eprintln!(
        "crash loop done: seed {seed}, {iterations} kill -9s, {} writes acknowledged, {} flushes, {} moves requested, {} completed; kills with moves not yet settled {} (a move copying or queued at the last status: {}), such moves landed {} / stayed {}; blocks written after their last flush: kept new {} / old {}; {} block reads checked",
        totals.writes_acked,
        totals.flushes,
        totals.moves_requested,
        totals.moves_completed_seen,
        totals.kills_with_moves_unsettled,
        totals.kills_with_a_move_copying_or_queued,
        totals.unsettled_moves_landed,
        totals.unsettled_moves_not_landed,
        totals.unflushed_blocks_kept_new,
        totals.unflushed_blocks_kept_old,
        totals.blocks_checked
    );
    if stack == Stack::Replicated {
        eprintln!(
            "replicas: the reader read {} sessions, {} extents ({} blocks checked exactly, {} racing a write); {} restarts came back with {} current copies; {} acknowledged unflushed writes undone by a kill (their extent free again); figures at the kills summed: {:?}",
            totals.reader_sessions,
            totals.reader_extents,
            totals.reader_blocks_exact,
            totals.reader_blocks_racing,
            totals.restarts_with_copies,
            totals.copies_at_restarts,
            totals.acked_unflushed_reverted,
            totals.replicas_at_kills
        );
    }
    if stack == Stack::Reduced {
        eprintln!(
            "reduced: {} restarts found {} staged bytes (reduced after); {} acknowledged unflushed writes undone by a kill; figures at the kills summed: {:?}",
            totals.restarts_with_staged,
            totals.staged_bytes_at_restarts,
            totals.acked_unflushed_reverted,
            totals.reduction_at_kills
        );
    }
    if stack == Stack::Cache {
        eprintln!(
            "cache: {} mode switches, {} warm restarts, {} acknowledged unflushed writes undone by a kill; counters summed over the processes (last status before each kill): {:?}",
            totals.mode_switches,
            totals.warm_restarts,
            totals.acked_unflushed_reverted,
            totals.cache_counters
        );
    }
    server.stop();
    totals
}

// ---------------------------------------------------------------- lost tier

/// `segments` of 1 MiB filled with a pattern of `seed`.
fn segment_pattern(seed: u8, segment: u32) -> Vec<u8> {
    (0..MIB)
        .map(|at| (at as u8).wrapping_mul(29) ^ (at >> 11) as u8 ^ seed ^ segment as u8)
        .collect()
}

fn write_segment(client: &mut Client, seed: u8, segment: u32) {
    client
        .write(
            u64::from(segment) * MIB,
            &segment_pattern(seed, segment),
            false,
        )
        .unwrap();
}

fn read_segment(client: &mut Client, segment: u32) -> Result<Vec<u8>, ClientError> {
    let mut buffer = vec![0u8; MIB as usize];
    client.read(u64::from(segment) * MIB, &mut buffer)?;
    Ok(buffer)
}

fn fault(server: &Server, tier: &str, state: &str) -> Output {
    server.tierd(&["fault", "--tier", tier, state])
}

#[test]
fn lost_fast_tier_serves_current_home_copies_fails_the_rest_and_reports_them() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("config.toml"), ssd_config(true)).unwrap();
    let server = Server::start(dir);
    let mut client = Client::connect_uri(&server.uri).unwrap();
    for segment in 0..8 {
        write_segment(&mut client, 1, segment);
    }
    client.flush().unwrap();
    // 0-3 promoted (home copies current), then 2 and 3 rewritten on the
    // fast tier only (their home copies go stale).
    for segment in 0..4 {
        assert!(server.move_segment(segment, "ssd"));
    }
    let status = server.wait_idle();
    assert_eq!(&status["placement"].as_str().unwrap()[..8], "00001111");
    write_segment(&mut client, 2, 2);
    write_segment(&mut client, 2, 3);
    client.flush().unwrap();
    assert_eq!(server.status()["unavailable"], json!([]));

    let output = fault(&server, "ssd", "--gone");
    assert!(output.status.success(), "{output:?}");
    // Home serves what it has current; the rest fails, never other data.
    for segment in [0, 1] {
        assert_eq!(
            read_segment(&mut client, segment).unwrap(),
            segment_pattern(1, segment)
        );
    }
    for segment in [2, 3] {
        let error = read_segment(&mut client, segment).unwrap_err();
        assert!(
            matches!(error, ClientError::Request { error: 5, .. }),
            "segment {segment}: {error}"
        );
    }
    // The server keeps serving the other segments, reads and writes.
    for segment in 4..8 {
        assert_eq!(
            read_segment(&mut client, segment).unwrap(),
            segment_pattern(1, segment)
        );
    }
    write_segment(&mut client, 3, 6);
    client.flush().unwrap_or_else(|error| {
        // FLUSH flushes every tier, the lost one too: it fails, and says so.
        assert!(
            matches!(error, ClientError::Request { error: 5, .. }),
            "{error}"
        );
    });
    assert_eq!(read_segment(&mut client, 6).unwrap(), segment_pattern(3, 6));

    let status = server.status();
    assert_eq!(
        status["unavailable"],
        json!([{"tier": "ssd", "offset_bytes": 2 * MIB, "length_bytes": 2 * MIB,
                "first_segment": 2, "last_segment": 3}]),
        "{status:#}"
    );
    let text = server.tierd(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("UNAVAILABLE")
            && text.contains("bytes 2097152..4194304 (segments 2-3) on tier ssd"),
        "{text}"
    );

    // Back: everything reads as written.
    let output = fault(&server, "ssd", "--back");
    assert!(output.status.success(), "{output:?}");
    for (segment, seed) in [(0, 1), (1, 1), (2, 2), (3, 2), (6, 3)] {
        assert_eq!(
            read_segment(&mut client, segment).unwrap(),
            segment_pattern(seed, segment)
        );
    }
    assert_eq!(server.status()["unavailable"], json!([]));

    // A tier without [tier.faults] refuses the drill, saying why.
    let output = fault(&server, "disk", "--gone");
    assert!(!output.status.success());
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("tier disk has no fault wrapper") && message.contains("[tier.faults]"),
        "{message}"
    );
}

// ---------------------------------------------------------------- missing file

#[test]
fn missing_fast_tier_file_keeps_serving_then_refuses_to_restart_with_zeroes() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("config.toml"), ssd_config(false)).unwrap();
    let mut server = Server::start(dir);
    let mut client = Client::connect_uri(&server.uri).unwrap();
    for segment in 0..4 {
        write_segment(&mut client, 1, segment);
    }
    assert!(server.move_segment(1, "ssd"));
    assert!(server.move_segment(2, "ssd"));
    server.wait_idle();
    write_segment(&mut client, 2, 1);
    write_segment(&mut client, 2, 2);
    client.flush().unwrap();
    let ssd = dir.join("data/ssd.img");
    std::fs::copy(&ssd, dir.join("ssd.img.saved")).unwrap();

    // Deleting the file of an open descriptor does not make IO fail on
    // Linux: the server keeps serving the data from the open file, and
    // within about a second status warns, saying how to copy it back.
    std::fs::remove_file(&ssd).unwrap();
    let clock = SystemClock::new();
    let start = clock.now_ns();
    loop {
        let warnings = server.status()["warnings"].to_string();
        if warnings.contains("was deleted while tierd was running") && warnings.contains("/proc/") {
            break;
        }
        assert!(
            clock.now_ns() - start < 30_000_000_000,
            "no warning: {warnings}"
        );
        clock.sleep_ns(50_000_000);
    }
    for segment in [1, 2] {
        assert_eq!(
            read_segment(&mut client, segment).unwrap(),
            segment_pattern(2, segment)
        );
    }
    drop(client);
    server.kill();

    // Restarting would create an empty ssd.img and serve zeroes for
    // segments 1 and 2: it must refuse, naming the tier, file and segments,
    // and keep refusing.
    for _ in 0..2 {
        let error = match Server::try_start(dir) {
            Ok(_) => panic!("tierd started over a missing fast tier file"),
            Err(error) => error,
        };
        assert!(
            error.contains("tier ssd")
                && error.contains(&ssd.display().to_string())
                && error.contains("the 2 segments placed on it (segments 1-2; 1 MiB each)"),
            "{error}"
        );
        assert!(!ssd.exists(), "the refused start left an empty {ssd:?}");
    }
    // The original file back: everything is there.
    std::fs::copy(dir.join("ssd.img.saved"), &ssd).unwrap();
    let mut server = Server::start(dir);
    let mut client = Client::connect_uri(&server.uri).unwrap();
    for (segment, seed) in [(0, 1), (1, 2), (2, 2), (3, 1)] {
        assert_eq!(
            read_segment(&mut client, segment).unwrap(),
            segment_pattern(seed, segment)
        );
    }
    drop(client);
    server.stop();
    // A missing home file is refused the same way.
    std::fs::remove_file(dir.join("data/disk.img")).unwrap();
    let error = match Server::try_start(dir) {
        Ok(_) => panic!("tierd started over a missing home file"),
        Err(error) => error,
    };
    assert!(
        error.contains("tier disk") && error.contains("the file is missing"),
        "{error}"
    );
}

// ---------------------------------------------------------------- bounded memory

/// A client sends thousands of 16 MiB READs and never reads a reply; the
/// server must not buffer them (its RSS stays within 256 MiB of where it
/// started) and must keep serving another client. With the connection's own
/// thread alone (0) and with up to four threads per connection.
#[test]
fn client_that_stops_reading_replies_cannot_grow_the_server() {
    for workers in [0, 4] {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let config = mem_config().replace(
            "data_dir = \"data\"\n",
            &format!("data_dir = \"data\"\n[server]\nworkers_per_connection = {workers}\n"),
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let mut server = Server::start(dir);
        let mut writer = Client::connect_uri(&server.uri).unwrap();
        for segment in 0..8 {
            write_segment(&mut writer, 4, segment);
        }
        let before_kib = server.rss_kib();

        let stuck = Client::connect_uri(&server.uri).unwrap();
        let (mut sender, _receiver) = stuck.split();
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        // Blocks once the server stops reading; ends when the server dies.
        let flood = std::thread::spawn(move || {
            for index in 0..20_000u64 {
                if sender
                    .submit_read((index % 4) * 16 * MIB, 16 * MIB as u32)
                    .is_err()
                {
                    return;
                }
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Let the flood run into the server's bounds (sampling, not timing:
        // the assertion is on memory whatever the speed).
        let mut peak_kib = before_kib;
        for _ in 0..30 {
            sleep_ms(100);
            peak_kib = peak_kib.max(server.rss_kib());
        }
        // Another client is still served, correctly.
        let mut other = Client::connect_uri(&server.uri).unwrap();
        for segment in 0..8 {
            assert_eq!(
                read_segment(&mut other, segment).unwrap(),
                segment_pattern(4, segment)
            );
        }
        write_segment(&mut other, 5, 9);
        assert_eq!(read_segment(&mut other, 9).unwrap(), segment_pattern(5, 9));
        peak_kib = peak_kib.max(server.rss_kib());
        let sent = sent.load(Ordering::Relaxed);
        eprintln!(
            "workers_per_connection {workers}: {sent} READs of 16 MiB sent unanswered ({} MiB asked); server RSS {} MiB before, peak {} MiB",
            sent * 16,
            before_kib / 1024,
            peak_kib / 1024
        );
        // More asked than the bound below allows, or the test shows nothing.
        assert!(sent >= 64, "the flood sent only {sent} requests");
        assert!(
            peak_kib < before_kib + 256 * 1024,
            "server RSS grew from {before_kib} KiB to {peak_kib} KiB under a client that reads no replies"
        );
        server.kill();
        flood.join().unwrap();
    }
}
