//! Page-cache replay throughput: accesses per second through each policy
//! (FIFO, LRU, ARC, S3-FIFO) on a generated page stream, plus, when the
//! shared traces are present, on the CloudPhysics `w106` block stream.
//! End-to-end numbers against libCacheSim are in `BENCHMARKS.md` ("Page-cache
//! replay vs libcachesim", measured with `examples/cache_replay.rs`).
//!
//! `cargo bench -p tierd-policy --bench caches` runs the full sizes (2 M
//! generated accesses; w106's 5.3 M). Under `cargo test` (no `--bench`
//! argument) criterion runs each benchmark once on 20,000 generated accesses
//! and skips w106, so the bench is exercised without slowing tests.

use std::hint::black_box;
use std::io::Read;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tierd_common::rng::{Rng, SeededRng};
use tierd_policy::cache::{build_cache, replay_pages, CacheKind};

const KINDS: [CacheKind; 4] = [
    CacheKind::Fifo,
    CacheKind::Lru,
    CacheKind::Arc,
    CacheKind::S3fifo,
];

/// Whether criterion was started by `cargo bench` rather than `cargo test`.
fn full_size() -> bool {
    std::env::args().any(|argument| argument == "--bench")
}

/// A block-trace-like stream over 1 Mi pages: 60% of accesses go to a hot
/// set of 16 Ki pages (skewed by a Pareto draw), 25% are sequential runs of
/// 8–64 pages from random starts, 15% are uniform; 30% writes.
fn generated_stream(count: usize) -> Vec<(u64, bool)> {
    let mut rng = SeededRng::new(42);
    let mut accesses = Vec::with_capacity(count);
    while accesses.len() < count {
        let choice = rng.below(100);
        if choice < 60 {
            let rank = (rng.pareto(1.0, 1.2) as u64 - 1).min(16_383);
            accesses.push((rank * 37 % 16_384, rng.chance(0.3)));
        } else if choice < 85 {
            let start = rng.below(1 << 20);
            let length = rng.range(8, 65);
            let is_write = rng.chance(0.3);
            accesses.extend((start..start + length).map(|page| (page, is_write)));
        } else {
            accesses.push((rng.below(1 << 20), rng.chance(0.3)));
        }
    }
    accesses.truncate(count);
    accesses
}

/// w106's block numbers as reads, when the shared traces are beside the repo
/// (decompressed by the trace crate's input layer, which detects xz).
fn w106_stream() -> Option<Vec<(u64, bool)>> {
    let traces = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))?;
    let path = traces.join("cloudphysics/w106.trace.xz");
    let mut bytes = Vec::new();
    tierd_trace::input::open_input(&path)
        .ok()?
        .reader
        .read_to_end(&mut bytes)
        .ok()?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|word| {
                let block = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                (u64::from(block), false)
            })
            .collect(),
    )
}

fn bench_stream(
    criterion: &mut Criterion,
    group_name: &str,
    stream: &[(u64, bool)],
    unique_pages: u64,
) {
    let mut group = criterion.benchmark_group(group_name);
    group.throughput(Throughput::Elements(stream.len() as u64));
    if full_size() {
        group.sample_size(10);
    }
    let capacity = (unique_pages / 10).max(1);
    for kind in KINDS {
        group.bench_function(kind.name(), |bencher| {
            bencher.iter_batched_ref(
                || build_cache(kind, capacity),
                |cache| black_box(replay_pages(stream.iter().copied(), &mut **cache)),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

fn unique_pages(stream: &[(u64, bool)]) -> u64 {
    let mut pages: Vec<u64> = stream.iter().map(|(page, _)| *page).collect();
    pages.sort_unstable();
    pages.dedup();
    pages.len() as u64
}

fn caches(criterion: &mut Criterion) {
    let count = if full_size() { 2_000_000 } else { 20_000 };
    let stream = generated_stream(count);
    bench_stream(criterion, "generated", &stream, unique_pages(&stream));
    if full_size() {
        if let Some(stream) = w106_stream() {
            bench_stream(criterion, "w106", &stream, unique_pages(&stream));
        }
    }
}

criterion_group!(benches, caches);
criterion_main!(benches);
