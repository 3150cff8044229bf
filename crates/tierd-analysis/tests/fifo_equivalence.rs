//! The FIFO hit ratio of `tierd trace analyze` comes from the policy crate's
//! FIFO (`tierd_policy::cache::fifo::Fifo`, the simulator's `fifo` cache)
//! since issue 12; before, the analysis had its own FIFO. These tests show
//! that every number it reports is unchanged: against that former cache,
//! kept here as the oracle, on a real trace and a generated one at cache
//! sizes from 0 to larger than the working set, and against numbers printed
//! by `tierd trace analyze --json` before the change.

mod common;

use common::*;
use tierd_analysis::analyze::{analyze, AnalyzeOptions};
use tierd_analysis::touch::{touched_units, BLOCK_BYTES};
use tierd_trace::{open_trace, Format, IteratorReader, Op, OpenOptions, Request};

/// The analysis's FIFO before issue 12, verbatim in behaviour: a ring of
/// resident pages in insertion order and a set; a miss inserts (reads and
/// writes alike), evicting the oldest when full; a hit does not reorder;
/// capacity 0 misses everything.
struct FormerFifo {
    capacity_pages: u64,
    order: std::collections::VecDeque<u64>,
    resident: tierd_common::hash::FastSet<u64>,
    accesses: u64,
    hits: u64,
}

impl FormerFifo {
    fn new(capacity_pages: u64) -> Self {
        Self {
            capacity_pages,
            order: Default::default(),
            resident: Default::default(),
            accesses: 0,
            hits: 0,
        }
    }

    fn access(&mut self, page: u64) {
        self.accesses += 1;
        if self.resident.contains(&page) {
            self.hits += 1;
            return;
        }
        if self.capacity_pages == 0 {
            return;
        }
        if self.order.len() as u64 >= self.capacity_pages {
            if let Some(oldest) = self.order.pop_front() {
                self.resident.remove(&oldest);
            }
        }
        self.order.push_back(page);
        self.resident.insert(page);
    }
}

/// (accesses, hits, hit ratio) of the former FIFO over the pages the
/// analysis enumerates (every 4 KiB block a request touches, in order).
fn former(requests: &[Request], capacity_bytes: u64) -> (u64, u64, Option<f64>) {
    let mut cache = FormerFifo::new(capacity_bytes / BLOCK_BYTES);
    for request in requests {
        if let Some((first, last)) = touched_units(request, BLOCK_BYTES) {
            for page in first..=last {
                cache.access(page);
            }
        }
    }
    let ratio = (cache.accesses > 0).then(|| cache.hits as f64 / cache.accesses as f64);
    (cache.accesses, cache.hits, ratio)
}

fn analysed(requests: &[Request], cache_bytes: Option<u64>) -> (u64, u64, Option<f64>) {
    let options = AnalyzeOptions {
        cache_bytes,
        ..AnalyzeOptions::default()
    };
    // In the given order (the common `reader` sorts by time).
    let mut reader = IteratorReader::new(
        requests.iter().copied(),
        &["test"],
        Format::Msr,
        "fifo equivalence",
    );
    let analysis = analyze(&mut reader, &options).unwrap();
    (
        analysis.fifo_accesses,
        analysis.fifo_hits,
        analysis.fifo_hit_ratio,
    )
}

/// Cache sizes from none to larger than any working set here, including
/// sizes that are not a whole number of pages.
const CACHE_BYTES: [Option<u64>; 8] = [
    Some(0),
    Some(4095),
    Some(4096),
    Some(100_000),
    Some(1 << 20),
    Some(8 << 20),
    Some(64 << 20),
    None,
];

fn assert_same_as_former(requests: &[Request]) {
    let default_cache_bytes = 30 << 30;
    for cache_bytes in CACHE_BYTES {
        let expected = former(requests, cache_bytes.unwrap_or(default_cache_bytes));
        assert_eq!(
            analysed(requests, cache_bytes),
            expected,
            "cache {cache_bytes:?} bytes"
        );
    }
}

/// A seeded workload: a hot 48 MiB region and a cold 16 GiB one, unaligned
/// offsets and lengths (zero-length requests too), 30 % writes.
fn generated(seed: u64, count: usize) -> Vec<Request> {
    let mut state = seed;
    let mut next = move || tierd_common::rng::splitmix64(&mut state);
    (0..count)
        .map(|index| {
            let hot = next() % 10 < 7;
            let span_bytes: u64 = if hot { 48 << 20 } else { 16 << 30 };
            let offset_bytes = next() % span_bytes;
            let length_bytes = match next() % 20 {
                0 => 0,
                1..=9 => 512 * (1 + next() % 8),
                _ => 4096 * (1 + next() % 64) + next() % 4096,
            };
            let op = if next() % 10 < 3 { Op::Write } else { Op::Read };
            request(index as u64 * 1_000_000, op, offset_bytes, length_bytes)
        })
        .collect()
}

#[test]
fn generated_trace_gives_the_former_numbers() {
    for seed in [1, 2, 3] {
        let requests = generated(seed, 30_000);
        let (_, hits, _) = former(&requests, 8 << 20);
        // The sizes above do evict: hits grow with the cache.
        assert!(hits > 0 && hits < former(&requests, 64 << 20).1);
        assert_same_as_former(&requests);
    }
}

#[test]
fn a_cache_above_the_page_caches_limit_is_simulated_at_the_limit_with_a_warning() {
    // The former cache had no limit; the policy crate's stops at 2^31 − 2
    // pages (8 TiB). Below that many distinct pages the numbers agree.
    let requests = generated(4, 5_000);
    let options = AnalyzeOptions {
        cache_bytes: Some(u64::MAX),
        ..AnalyzeOptions::default()
    };
    let analysis = analyze(&mut reader(requests.clone()), &options).unwrap();
    assert_eq!(
        (
            analysis.fifo_accesses,
            analysis.fifo_hits,
            analysis.fifo_hit_ratio
        ),
        former(&requests, u64::MAX)
    );
    assert_eq!(analysis.fifo_cache_bytes, u64::MAX);
    assert!(
        analysis.warnings.iter().any(|w| w.contains("maximum")),
        "{:?}",
        analysis.warnings
    );
}

#[test]
fn shared_msr_cut_gives_the_former_numbers() {
    let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR")) else {
        return;
    };
    let path = traces.join("msr_cambridge/hm_0-cut-20k.csv");
    let mut reader = open_trace(&path, &OpenOptions::default()).unwrap();
    let mut requests = Vec::new();
    while let Some(request) = reader.next_request().unwrap() {
        requests.push(request);
    }
    assert_same_as_former(&requests);
    // `tierd trace analyze hm_0-cut-20k.csv --cache-bytes C --json` before
    // issue 12 printed these `fifo_accesses` and `fifo_hits`.
    for (cache_bytes, hits) in [
        (Some(0), 0),
        (Some(4096), 822),
        (Some(1 << 20), 5_165),
        (Some(8 << 20), 8_735),
        (Some(64 << 20), 25_178),
        (None, 25_379),
    ] {
        let (accesses, actual_hits, _) = analysed(&requests, cache_bytes);
        assert_eq!((accesses, actual_hits), (54_236, hits), "{cache_bytes:?}");
    }
}
