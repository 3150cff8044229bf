//! The load generator end to end against an in-process NBD server: on a
//! virtual clock (an hour of trace in no time), with the in-flight bound
//! holding a slow export, over several connections, and with server errors.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tierd_common::clock::{Clock, ManualClock, SystemClock};
use tierd_load::pattern::fill_pattern;
use tierd_load::{NoProgress, Plan, ReplayOptions, TraceSource};
use tierd_nbd::{Client, Export, ExportResult, MemoryExport, Server, ServerConfig, ServerHandle};
use tierd_trace::OpenOptions;

const EXPORT_BYTES: usize = 1 << 20;
/// FILETIME ticks (100 ns) of the first request.
const START_TICKS: u64 = 128_166_385_295_514_878;

/// An MSR Cambridge CSV: (ticks after the start, is_write, offset, length).
fn msr_trace(directory: &Path, requests: &[(u64, bool, u64, u64)]) -> TraceSource {
    let mut text = String::new();
    for (ticks, is_write, offset, length) in requests {
        let kind = if *is_write { "Write" } else { "Read" };
        text.push_str(&format!(
            "{},hm,0,{kind},{offset},{length},1000\n",
            START_TICKS + ticks
        ));
    }
    let path: PathBuf = directory.join("trace.csv");
    std::fs::write(&path, text).unwrap();
    TraceSource {
        path,
        options: OpenOptions::default(),
    }
}

fn serve(directory: &Path, export: Arc<dyn Export>, workers: usize) -> (ServerHandle, String) {
    let config = ServerConfig {
        workers_per_connection: workers,
        ..ServerConfig::default()
    };
    let server = Server::new(vec![("vol".to_string(), export)], config).unwrap();
    let handle = server.serve_unix(directory.join("nbd.sock")).unwrap();
    let uri = handle.address().uri("vol");
    (handle, uri)
}

/// A memory export whose reads and writes take `delay_ns` of real time,
/// recording how many ran at once.
struct SlowExport {
    inner: MemoryExport,
    delay_ns: u64,
    running: AtomicUsize,
    most_running: AtomicUsize,
}

impl SlowExport {
    fn enter(&self) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        SystemClock::new().sleep_ns(self.delay_ns);
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Export for SlowExport {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()> {
        self.enter();
        self.inner.read(offset_bytes, buf)
    }
    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.enter();
        self.inner.write(offset_bytes, data, fua)
    }
    fn flush(&self) -> ExportResult<()> {
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> ExportResult<()> {
        self.inner.trim(offset_bytes, length_bytes, fua)
    }
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
        may_trim: bool,
        fast_only: bool,
    ) -> ExportResult<()> {
        self.inner
            .write_zeroes(offset_bytes, length_bytes, fua, may_trim, fast_only)
    }
}

/// An hour of trace (one request a minute) replays at x1 on a virtual
/// clock in no wall time: the issuer's sleeps move the clock, every request
/// is issued exactly at its due time, and every write lands with the
/// documented pattern.
#[test]
fn an_hour_of_trace_replays_on_a_virtual_clock() {
    let directory = tempfile::tempdir().unwrap();
    let (handle, uri) = serve(
        directory.path(),
        Arc::new(MemoryExport::new(EXPORT_BYTES)),
        0,
    );
    let minute_ticks = 60 * 10_000_000;
    let requests: Vec<(u64, bool, u64, u64)> = (0..61u64)
        .map(|index| (index * minute_ticks, index % 2 == 1, index * 8192, 4096))
        .collect();
    let trace = msr_trace(directory.path(), &requests);
    let plan = Plan::new(ReplayOptions::new(trace, uri.clone())).unwrap();
    assert_eq!(plan.scan.requests, 61);
    assert_eq!(plan.scan.last_due_ns, 3600 * 1_000_000_000);
    // 60 minutes in 60 periods of 60 s.
    assert_eq!(plan.period_ns, 60 * 1_000_000_000);
    let clock = ManualClock::new(1_000);
    let connected = plan.connect().unwrap();
    assert_eq!(connected.export_bytes, EXPORT_BYTES as u64);
    assert!(connected.volume.is_none(), "not a tierd export");
    let outcome = plan.run(connected, &clock, &NoProgress).unwrap();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    let live = &outcome.report.runs[0];
    assert_eq!(live.run.requests, 61);
    assert_eq!((live.run.reads, live.run.writes), (31, 30));
    assert_eq!(live.late_issues, 0);
    assert_eq!(live.issue_lag_max_us, 0.0, "issued exactly when due");
    assert_eq!(live.run.last_arrival_ns, 3600 * 1_000_000_000);
    assert!(clock.now_ns() >= 3600 * 1_000_000_000);
    assert!(outcome.wall_ns >= 3600 * 1_000_000_000);
    let in_periods: u64 = live.run.periods.iter().map(|period| period.requests).sum();
    assert_eq!(in_periods, 61);

    let mut client = Client::connect_uri(&uri).unwrap();
    for (_, is_write, offset, length) in &requests {
        let mut landed = vec![0u8; *length as usize];
        client.read(*offset, &mut landed).unwrap();
        let mut expected = vec![0u8; *length as usize];
        if *is_write {
            fill_pattern(&mut expected, *offset);
        }
        assert!(landed == expected, "request at {offset}");
    }
    client.disconnect().unwrap();
    handle.shutdown();
}

/// At most `max_inflight` requests reach the export at once, over any
/// number of connections; a burst beyond it is issued late, each request
/// counted once, as the simulator counts deferred requests.
#[test]
fn the_in_flight_bound_holds_a_burst_back_and_counts_late_issues() {
    let directory = tempfile::tempdir().unwrap();
    let export = Arc::new(SlowExport {
        inner: MemoryExport::new(EXPORT_BYTES),
        delay_ns: 5_000_000,
        running: AtomicUsize::new(0),
        most_running: AtomicUsize::new(0),
    });
    let (handle, uri) = serve(directory.path(), export.clone(), 8);
    // 20 requests due at once.
    let requests: Vec<(u64, bool, u64, u64)> = (0..20u64)
        .map(|index| (0, index % 3 == 0, index * 4096, 4096))
        .collect();
    let trace = msr_trace(directory.path(), &requests);
    let options = ReplayOptions {
        max_inflight: 3,
        connections: 2,
        label: "bounded".to_string(),
        ..ReplayOptions::new(trace, uri)
    };
    let plan = Plan::new(options).unwrap();
    assert!(plan.untimed(), "every request has the same time");
    let connected = plan.connect().unwrap();
    let outcome = plan
        .run(connected, &SystemClock::new(), &NoProgress)
        .unwrap();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    let live = &outcome.report.runs[0];
    assert_eq!(live.run.policy, "bounded");
    assert_eq!(live.run.requests, 20);
    assert_eq!(live.connections, 2);
    assert!(live.multi_conn);
    assert_eq!(export.most_running.load(Ordering::SeqCst), 3);
    // The first three go at once; the other 17 wait for a slot.
    assert_eq!(live.late_issues, 17);
    assert_eq!(live.run.deferred_requests, 17);
    // 17 waits of about a third of a 5 ms service each, at least.
    assert!(
        live.run.defer_max_us >= 5_000.0,
        "{}",
        live.run.defer_max_us
    );
    // Response from issue is about one service time; from due it
    // includes the wait for a slot.
    assert!(live.run.response_p50_us >= 5_000.0);
    assert!(live.avg_response_from_due_us > live.run.avg_response_us);
    assert_eq!(live.run.settings.max_outstanding_requests, 3);
    handle.shutdown();
}

/// Requests the server fails are counted by error and make the replay fail,
/// after the report of what was measured.
#[test]
fn server_errors_fail_the_replay_after_the_report() {
    let directory = tempfile::tempdir().unwrap();
    let export = Arc::new(MemoryExport::new(EXPORT_BYTES).read_only());
    let (handle, uri) = serve(directory.path(), export, 0);
    let trace = msr_trace(
        directory.path(),
        &[
            (0, false, 0, 4096),
            (10, true, 4096, 4096),
            (20, true, 0, 512),
        ],
    );
    let plan = Plan::new(ReplayOptions::new(trace, uri)).unwrap();
    let connected = plan.connect().unwrap();
    let outcome = plan
        .run(connected, &SystemClock::new(), &NoProgress)
        .unwrap();
    let live = &outcome.report.runs[0];
    assert_eq!(live.run.requests, 3);
    assert_eq!(live.errors, 2);
    assert_eq!(live.errors_by_name.get("EPERM"), Some(&2));
    assert_eq!(outcome.failures.len(), 1, "{:?}", outcome.failures);
    assert!(
        outcome.failures[0].starts_with("2 request(s) failed on the server: write of"),
        "{:?}",
        outcome.failures
    );
    handle.shutdown();
}

/// Bad settings are refused by name before the trace is read; an empty
/// window is refused before connecting.
#[test]
fn bad_settings_and_empty_windows_are_refused_before_any_io() {
    let directory = tempfile::tempdir().unwrap();
    let trace = msr_trace(directory.path(), &[(0, false, 0, 4096)]);
    let target = "nbd+unix:///vol?socket=/nonexistent.sock";
    let base = ReplayOptions::new(trace.clone(), target);
    for (options, expected) in [
        (
            ReplayOptions {
                speed: f64::NAN,
                ..base.clone()
            },
            "speed NaN is not a factor > 0",
        ),
        (
            ReplayOptions {
                max_inflight: 0,
                ..base.clone()
            },
            "max_inflight must be at least 1",
        ),
        (
            ReplayOptions {
                connections: 0,
                ..base.clone()
            },
            "connections 0 is not between 1 and 64",
        ),
        (
            ReplayOptions {
                target: "http://host/vol".to_string(),
                ..base.clone()
            },
            "unknown scheme",
        ),
        (
            ReplayOptions {
                window: tierd_sim::Window {
                    from_ns: Some(60_000_000_000),
                    to_ns: None,
                },
                ..base.clone()
            },
            "trace.csv: no requests to replay",
        ),
    ] {
        let error = Plan::new(options).unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
}

/// A memory export logging every request: (op, offset, length).
struct LoggingExport {
    inner: MemoryExport,
    log: parking_lot::Mutex<Vec<(&'static str, u64, u64)>>,
}

impl LoggingExport {
    fn note(&self, op: &'static str, offset_bytes: u64, length_bytes: u64) {
        self.log.lock().push((op, offset_bytes, length_bytes));
    }
}

impl Export for LoggingExport {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()> {
        self.note("read", offset_bytes, buf.len() as u64);
        self.inner.read(offset_bytes, buf)
    }
    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.note("write", offset_bytes, data.len() as u64);
        self.inner.write(offset_bytes, data, fua)
    }
    fn flush(&self) -> ExportResult<()> {
        self.note("flush", 0, 0);
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> ExportResult<()> {
        self.inner.trim(offset_bytes, length_bytes, fua)
    }
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
        may_trim: bool,
        fast_only: bool,
    ) -> ExportResult<()> {
        self.inner
            .write_zeroes(offset_bytes, length_bytes, fua, may_trim, fast_only)
    }
}

/// `--prefill` writes exactly the byte ranges the window reads (merged,
/// cut at 1 MiB, in the write pattern) and FLUSHes before the replay's
/// first request; the trace's own writes and the space nobody reads stay
/// untouched by it, and the replay's figures count only the trace.
#[test]
fn prefill_writes_every_range_the_window_reads_then_flushes_before_the_replay() {
    let directory = tempfile::tempdir().unwrap();
    let export = Arc::new(LoggingExport {
        inner: MemoryExport::new(4 << 20),
        log: parking_lot::Mutex::new(Vec::new()),
    });
    let (handle, uri) = serve(directory.path(), export.clone(), 0);
    let requests = [
        (0, false, 8192, 8192),
        (10, false, 12288, 8192), // overlaps the first: 8 KiB – 20 KiB
        (20, true, 65536, 4096),  // a write: not prefilled
        (30, false, 20480, 4096), // touches it: 8 KiB – 24 KiB
        (40, false, 1 << 20, (3 << 19) + 512), // 1.5 MiB + 512: two writes
        (50, false, 8192, 4096),  // read again: nothing new
    ];
    let trace = msr_trace(directory.path(), &requests);
    let plan = Plan::new(ReplayOptions::new(trace, uri.clone())).unwrap();
    let mut connected = plan.connect().unwrap();
    let clock = SystemClock::new();
    let prefilled = plan.prefill(&mut connected, &clock).unwrap();
    let expected_ranges = [(8192u64, 24576u64), (1 << 20, (1 << 20) + (3 << 19) + 512)];
    assert_eq!(prefilled.ranges, 2);
    assert_eq!(prefilled.writes, 3);
    assert_eq!(
        prefilled.bytes,
        expected_ranges
            .iter()
            .map(|(start, end)| end - start)
            .sum::<u64>()
    );
    let outcome = plan.run(connected, &clock, &NoProgress).unwrap();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    let live = &outcome.report.runs[0];
    assert_eq!((live.run.reads, live.run.writes), (5, 1), "the trace only");

    let log = export.log.lock().clone();
    let flush = log
        .iter()
        .position(|(op, ..)| *op == "flush")
        .expect("a FLUSH");
    let mut before: Vec<(u64, u64)> = log[..flush]
        .iter()
        .map(|(op, offset, length)| {
            assert_eq!(
                *op, "write",
                "only prefill writes before the FLUSH: {log:?}"
            );
            (*offset, *length)
        })
        .collect();
    before.sort_unstable();
    assert_eq!(
        before,
        vec![
            (8192, 16384),
            (1 << 20, 1 << 20),
            (2 << 20, (1 << 19) + 512)
        ]
    );
    assert_eq!(
        log.len() - flush - 1,
        requests.len(),
        "then the replay: {log:?}"
    );

    let mut client = Client::connect_uri(&uri).unwrap();
    for (start, end) in expected_ranges {
        let mut landed = vec![0u8; (end - start) as usize];
        client.read(start, &mut landed).unwrap();
        let mut expected = vec![0u8; landed.len()];
        fill_pattern(&mut expected, start);
        assert!(landed == expected, "range at {start}");
    }
    // Around the ranges: untouched (zeroes).
    let mut outside = vec![0xFFu8; 8192];
    client.read(0, &mut outside).unwrap();
    assert!(outside.iter().all(|byte| *byte == 0));
    client.read(24576, &mut outside[..4096]).unwrap();
    assert!(outside[..4096].iter().all(|byte| *byte == 0));
    client.disconnect().unwrap();
    handle.shutdown();
}
