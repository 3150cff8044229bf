//! Reader throughput: MSR CSV lines per second (the reference text reader,
//! through `open_trace` with its buffering and line splitting) and native
//! `.tierd` records per second, read and written. Results and the machine
//! they were measured on are in `BENCHMARKS.md` at the repository root.
//!
//! `cargo bench -p tierd-trace --bench parse` runs the full sizes (1 M MSR
//! lines, 5 M native records). Under `cargo test` (no `--bench` argument)
//! criterion runs each benchmark once, and the inputs shrink to a few
//! thousand requests so the benches are exercised without slowing tests.

use std::hint::black_box;
use std::io::Write;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tierd_common::rng::{Rng, SeededRng};
use tierd_trace::formats::msr::{FILETIME_UNIX_EPOCH_TICKS, NS_PER_TICK};
use tierd_trace::{
    create_writer, open_trace, Format, Op, OpenOptions, Request, VolumeTable, WriteOptions,
};

/// Whether criterion was started by `cargo bench` rather than `cargo test`.
fn full_size() -> bool {
    std::env::args().any(|argument| argument == "--bench")
}

/// One synthetic MSR-like request, as the MSR reader would return it plus
/// its host and disk. Times are FILETIME ticks from the start of the MSR
/// week with exponential gaps (mean 2 ms); 70 % of requests continue their
/// volume's previous request (sequential runs), the rest land at random
/// 4 KiB-aligned offsets in 100 GiB; sizes and the read share (65 %) are in
/// the range of the MSR servers; responses are log-normal around 0.5 ms.
struct Generator {
    rng: SeededRng,
    ticks: u64,
    next_offsets: [u64; 3],
    volume_count: u64,
}

const VOLUMES: [(&str, &str); 3] = [("hm", "0"), ("hm", "1"), ("prxy", "0")];
const SIZES_BYTES: [u64; 8] = [512, 4096, 4096, 4096, 8192, 16384, 32768, 65536];

impl Generator {
    /// `volume_count` (1 to 3) volumes, visited at random.
    fn new(seed: u64, volume_count: u64) -> Self {
        Self {
            rng: SeededRng::new(seed),
            ticks: 128_166_372_000_000_000,
            next_offsets: [0; 3],
            volume_count,
        }
    }

    /// `(volume index, ticks, op, offset, size, response ticks)`.
    fn next(&mut self) -> (usize, u64, Op, u64, u64, u64) {
        let rng = &mut self.rng;
        self.ticks += rng.exponential(20_000.0) as u64;
        let volume = match rng.below(10) {
            0..=5 => 0,
            6..=7 => 1,
            _ => 2,
        }
        .min(self.volume_count as usize - 1);
        let op = if rng.chance(0.65) {
            Op::Read
        } else {
            Op::Write
        };
        let size = SIZES_BYTES[rng.below(SIZES_BYTES.len() as u64) as usize];
        let offset = if rng.chance(0.7) {
            self.next_offsets[volume]
        } else {
            rng.below(100 << 18) * 4096
        };
        self.next_offsets[volume] = offset + size;
        let response_ticks = rng.log_normal(5_000.0, 1.0) as u64;
        (volume, self.ticks, op, offset, size, response_ticks)
    }
}

fn msr_file(path: &Path, lines: usize) -> u64 {
    // An MSR file holds one disk (hm_0.csv, ...), so one volume here too.
    let mut generator = Generator::new(1, 1);
    let mut text = Vec::with_capacity(lines * 56);
    for _ in 0..lines {
        let (volume, ticks, op, offset, size, response) = generator.next();
        let (host, disk) = VOLUMES[volume];
        let op = if op == Op::Read { "Read" } else { "Write" };
        writeln!(
            text,
            "{ticks},{host},{disk},{op},{offset},{size},{response}"
        )
        .unwrap();
    }
    std::fs::write(path, &text).unwrap();
    text.len() as u64
}

fn native_requests(count: usize) -> (Vec<Request>, VolumeTable) {
    let mut volumes = VolumeTable::new();
    for (host, disk) in VOLUMES {
        volumes.intern(&format!("{host}_{disk}"));
    }
    let mut generator = Generator::new(2, 3);
    let requests = (0..count)
        .map(|_| {
            let (volume, ticks, op, offset_bytes, length_bytes, response) = generator.next();
            Request {
                time_ns: (ticks - FILETIME_UNIX_EPOCH_TICKS) * NS_PER_TICK,
                volume: volume as u32,
                op,
                offset_bytes,
                length_bytes,
                response_ns: Some(response * NS_PER_TICK),
            }
        })
        .collect();
    (requests, volumes)
}

fn write_native(path: &Path, requests: &[Request], volumes: &VolumeTable) -> u64 {
    let mut writer = create_writer(path, Format::Tierd, &WriteOptions::default()).unwrap();
    for request in requests {
        writer.write_request(request, volumes).unwrap();
    }
    writer.finish().unwrap()
}

/// Reads every request of `path`; returns a checksum so nothing is optimised
/// away, and asserts the count.
fn read_all(path: &Path, format: Format, expected: usize) -> u64 {
    let options = OpenOptions {
        format: Some(format),
        ..OpenOptions::default()
    };
    let mut reader = open_trace(path, &options).unwrap();
    let mut count = 0usize;
    let mut sum = 0u64;
    while let Some(request) = reader.next_request().unwrap() {
        count += 1;
        sum = sum.wrapping_add(request.offset_bytes ^ request.time_ns);
    }
    assert_eq!(count, expected);
    sum
}

fn benches(criterion: &mut Criterion) {
    let (msr_lines, native_records) = if full_size() {
        (1_000_000, 5_000_000)
    } else {
        (2_000, 5_000)
    };
    let directory = tempfile::tempdir().unwrap();

    let msr_path = directory.path().join("synthetic-msr.csv");
    let msr_bytes = msr_file(&msr_path, msr_lines);
    eprintln!(
        "msr input: {msr_lines} lines, {msr_bytes} bytes ({:.1} bytes/line)",
        msr_bytes as f64 / msr_lines as f64
    );
    let mut group = criterion.benchmark_group("msr");
    group.sample_size(10);
    group.throughput(Throughput::Elements(msr_lines as u64));
    group.bench_function("read_lines", |bencher| {
        bencher.iter(|| black_box(read_all(&msr_path, Format::Msr, msr_lines)))
    });
    group.finish();

    let (requests, volumes) = native_requests(native_records);
    let native_path = directory.path().join("synthetic.tierd");
    write_native(&native_path, &requests, &volumes);
    let native_bytes = std::fs::metadata(&native_path).unwrap().len();
    eprintln!(
        "native file: {native_records} records, {native_bytes} bytes ({:.2} bytes/record)",
        native_bytes as f64 / native_records as f64
    );
    let mut group = criterion.benchmark_group("native");
    group.sample_size(10);
    group.throughput(Throughput::Elements(native_records as u64));
    group.bench_function("read_records", |bencher| {
        bencher.iter(|| black_box(read_all(&native_path, Format::Tierd, native_records)))
    });
    let rewrite_path = directory.path().join("rewrite.tierd");
    group.bench_function("write_records", |bencher| {
        bencher.iter(|| black_box(write_native(&rewrite_path, &requests, &volumes)))
    });
    group.finish();
}

criterion_group!(parse, benches);
criterion_main!(parse);
