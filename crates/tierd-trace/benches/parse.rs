//! Reader throughput: MSR CSV lines per second (the reference text reader,
//! through `open_trace` with its buffering and line splitting) and native
//! `.tierd` records per second, read and written. Results and the machine
//! they were measured on are in `BENCHMARKS.md` at the repository root.
//!
//! Two kinds of measurement: wall-clock (groups `msr` and `native`), and the
//! benchmark thread's CPU time (group `cpu`), which stays meaningful on a
//! shared, busy machine where wall-clock includes time other processes held
//! the core.
//!
//! `cargo bench -p tierd-trace --bench parse` runs the full sizes (1 M MSR
//! lines, 5 M native records). Under `cargo test` (no `--bench` argument)
//! criterion runs each benchmark once, and the inputs shrink to a few
//! thousand requests so the benches are exercised without slowing tests.

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use criterion::measurement::{Measurement, ValueFormatter};
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

/// The generated inputs, made once and shared by both measurement kinds.
struct Fixture {
    _directory: tempfile::TempDir,
    msr_path: PathBuf,
    msr_lines: usize,
    native_path: PathBuf,
    native_records: usize,
    requests: Vec<Request>,
    volumes: VolumeTable,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
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
        let (requests, volumes) = native_requests(native_records);
        let native_path = directory.path().join("synthetic.tierd");
        write_native(&native_path, &requests, &volumes);
        let native_bytes = std::fs::metadata(&native_path).unwrap().len();
        eprintln!(
            "native file: {native_records} records, {native_bytes} bytes ({:.2} bytes/record)",
            native_bytes as f64 / native_records as f64
        );
        Fixture {
            _directory: directory,
            msr_path,
            msr_lines,
            native_path,
            native_records,
            requests,
            volumes,
        }
    })
}

/// Wall-clock time: what a user waits for.
fn wall_clock(criterion: &mut Criterion) {
    let fixture = fixture();
    let mut group = criterion.benchmark_group("msr");
    group.sample_size(10);
    group.throughput(Throughput::Elements(fixture.msr_lines as u64));
    group.bench_function("read_lines", |bencher| {
        bencher.iter(|| black_box(read_all(&fixture.msr_path, Format::Msr, fixture.msr_lines)))
    });
    group.finish();

    let mut group = criterion.benchmark_group("native");
    group.sample_size(10);
    group.throughput(Throughput::Elements(fixture.native_records as u64));
    group.bench_function("read_records", |bencher| {
        bencher.iter(|| {
            black_box(read_all(
                &fixture.native_path,
                Format::Tierd,
                fixture.native_records,
            ))
        })
    });
    let rewrite_path = fixture.native_path.with_extension("rewrite.tierd");
    group.bench_function("write_records", |bencher| {
        bencher.iter(|| {
            black_box(write_native(
                &rewrite_path,
                &fixture.requests,
                &fixture.volumes,
            ))
        })
    });
    group.finish();
}

/// The benchmark thread's own CPU time (Linux `/proc/thread-self/schedstat`):
/// on a shared machine it leaves out the time other processes hold the
/// core, which wall-clock numbers include. Falls back to 0 elsewhere.
struct ThreadCpuTime;

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }

    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }

    fn add(&self, first: &u64, second: &u64) -> u64 {
        first + second
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuNanoseconds
    }
}

/// Formats CPU nanoseconds as milliseconds and throughput in millions per
/// CPU-second.
struct CpuNanoseconds;

impl ValueFormatter for CpuNanoseconds {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        for value in values {
            *value /= 1e6;
        }
        "ms cpu"
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per_iteration = match throughput {
            Throughput::Elements(count)
            | Throughput::Bytes(count)
            | Throughput::BytesDecimal(count) => *count as f64,
        };
        for value in values {
            *value = per_iteration * 1e3 / value.max(1.0);
        }
        "M/cpu-s"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// The reads again, in CPU time.
fn cpu_time(criterion: &mut Criterion<ThreadCpuTime>) {
    let fixture = fixture();
    let mut group = criterion.benchmark_group("cpu");
    group.sample_size(10);
    group.throughput(Throughput::Elements(fixture.msr_lines as u64));
    group.bench_function("msr_read_lines", |bencher| {
        bencher.iter(|| black_box(read_all(&fixture.msr_path, Format::Msr, fixture.msr_lines)))
    });
    group.throughput(Throughput::Elements(fixture.native_records as u64));
    group.bench_function("native_read_records", |bencher| {
        bencher.iter(|| {
            black_box(read_all(
                &fixture.native_path,
                Format::Tierd,
                fixture.native_records,
            ))
        })
    });
    group.finish();
}

criterion_group!(wall, wall_clock);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu_time
}
criterion_main!(wall, cpu);
