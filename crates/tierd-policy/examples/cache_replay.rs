//! Replays a page stream through one page cache and prints one parseable
//! line, the counterpart of libCacheSim's `process_trace` in
//! `bench/libcachesim/compare.py`:
//!
//! `cargo run --release -p tierd-policy --example cache_replay -- PAGES.u64 KIND SIZE_PAGES`
//!
//! `PAGES.u64` is a headerless array of little-endian u64 words, one access
//! each: bits 0–62 are the page number, bit 63 is set for a write (the
//! format `examples/page_stream.rs` and `compare.py` write). KIND is `fifo`,
//! `lru`, `arc` or `s3fifo`. The time covers reading the file and replaying
//! it (libCacheSim's number likewise includes reading its binary trace), as
//! wall-clock time and, on Linux, as the thread's own CPU time
//! (`/proc/thread-self/schedstat`), which stays meaningful on a shared, busy
//! machine where wall-clock includes time other processes held the core.
//!
//! Output, one line (the `cpu_` fields only where schedstat exists):
//! `policy=lru size_pages=2751 requests=5292456 hits=4222854 miss_ratio=0.202099 dirty_evictions=0 seconds=0.1018 throughput_req_per_s=51980733 cpu_seconds=0.0990 throughput_req_per_cpu_s=53459151`

use std::fs::File;
use std::io::Read;
use std::process::ExitCode;

use tierd_common::clock::{Clock, SystemClock};
use tierd_policy::cache::arc::ArcCache;
use tierd_policy::cache::fifo::Fifo;
use tierd_policy::cache::lru::Lru;
use tierd_policy::cache::s3fifo::S3Fifo;
use tierd_policy::cache::{CacheKind, CacheReplayStats, PageCache};

const WRITE_BIT: u64 = 1 << 63;
const BUFFER_BYTES: usize = 1 << 20;

/// Reads `path` in 1 MiB blocks and feeds every access to `cache`.
fn replay<C: PageCache>(path: &str, mut cache: C) -> Result<CacheReplayStats, String> {
    let mut file = File::open(path).map_err(|error| format!("{path}: cannot open: {error}"))?;
    let mut buffer = vec![0u8; BUFFER_BYTES];
    let mut stats = CacheReplayStats::default();
    let mut offset_bytes = 0u64;
    loop {
        let mut filled = 0;
        while filled < buffer.len() {
            let count = file.read(&mut buffer[filled..]).map_err(|error| {
                format!(
                    "{path}: read error at byte {}: {error}",
                    offset_bytes + filled as u64
                )
            })?;
            if count == 0 {
                break;
            }
            filled += count;
        }
        if filled % 8 != 0 {
            return Err(format!(
                "{path}: {} trailing bytes at byte {}: the file must be whole little-endian u64 words",
                filled % 8,
                offset_bytes + (filled - filled % 8) as u64
            ));
        }
        for word in buffer[..filled].chunks_exact(8) {
            let value = u64::from_le_bytes(word.try_into().expect("chunks_exact(8) gives 8 bytes"));
            let access = cache.access(value & !WRITE_BIT, value & WRITE_BIT != 0);
            stats.accesses += 1;
            stats.hits += u64::from(access.hit);
            if let Some(evicted) = access.evicted {
                stats.evictions += 1;
                stats.dirty_evictions += u64::from(evicted.dirty);
            }
        }
        offset_bytes += filled as u64;
        if filled < buffer.len() {
            break;
        }
    }
    if stats.accesses > 0 {
        stats.miss_ratio = 1.0 - stats.hits as f64 / stats.accesses as f64;
    }
    Ok(stats)
}

/// Nanoseconds this thread has run on a CPU, from the first field of
/// `/proc/thread-self/schedstat`; `None` where that file does not exist.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn parse_kind(text: &str) -> Option<CacheKind> {
    match text {
        "fifo" => Some(CacheKind::Fifo),
        "lru" => Some(CacheKind::Lru),
        "arc" => Some(CacheKind::Arc),
        "s3fifo" | "s3-fifo" => Some(CacheKind::S3fifo),
        _ => None,
    }
}

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: cache_replay PAGES.u64 fifo|lru|arc|s3fifo SIZE_PAGES";
    let [path, kind, size] = arguments.as_slice() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let Some(kind) = parse_kind(kind) else {
        eprintln!("unknown cache kind {kind:?}; {usage}");
        return ExitCode::from(2);
    };
    let Ok(size_pages) = size.parse::<u64>() else {
        eprintln!("SIZE_PAGES must be a whole number of pages, got {size:?}; {usage}");
        return ExitCode::from(2);
    };
    if size_pages > tierd_policy::cache::MAX_CAPACITY_PAGES {
        eprintln!(
            "SIZE_PAGES {size_pages} exceeds the maximum of {}",
            tierd_policy::cache::MAX_CAPACITY_PAGES
        );
        return ExitCode::from(2);
    }
    let cpu_start_ns = thread_cpu_ns();
    let clock = SystemClock::new();
    let result = match kind {
        CacheKind::Fifo => replay(path, Fifo::new(size_pages)),
        CacheKind::Lru => replay(path, Lru::new(size_pages)),
        CacheKind::Arc => replay(path, ArcCache::new(size_pages)),
        CacheKind::S3fifo => replay(path, S3Fifo::new(size_pages)),
    };
    let elapsed_ns = clock.now_ns().max(1);
    let cpu_ns = cpu_start_ns
        .zip(thread_cpu_ns())
        .map(|(start, end)| end.saturating_sub(start).max(1));
    match result {
        Ok(stats) => {
            let seconds = elapsed_ns as f64 / 1e9;
            let cpu = cpu_ns
                .map(|cpu_ns| {
                    let cpu_seconds = cpu_ns as f64 / 1e9;
                    format!(
                        " cpu_seconds={cpu_seconds:.4} throughput_req_per_cpu_s={:.0}",
                        stats.accesses as f64 / cpu_seconds
                    )
                })
                .unwrap_or_default();
            println!(
                "policy={} size_pages={size_pages} requests={} hits={} miss_ratio={:.6} dirty_evictions={} seconds={seconds:.4} throughput_req_per_s={:.0}{cpu}",
                kind.name(),
                stats.accesses,
                stats.hits,
                stats.miss_ratio,
                stats.dirty_evictions,
                stats.accesses as f64 / seconds,
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}
