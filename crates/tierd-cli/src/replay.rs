//! `tierd replay`: replay a block trace against a live NBD export, open
//! loop, and report response times in the simulator's format
//! (`docs/engine/replay.md`).
//!
//! Request i is issued at `(t_i − t_0) / speed` after the start, whether or
//! not earlier requests completed; only `--max-inflight` bounds the requests
//! outstanding (a request due while the bound is reached waits, and is
//! counted as a late issue, as `tierd sim` counts deferred requests). One
//! thread issues; one receiver thread per connection records each
//! completion's response time from the actual issue (the simulator's
//! `avg_response_us`, iostat's await) and from the intended issue time
//! (what a user of the traced system would have waited).

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use clap::Args;
use serde::Serialize;
use tierd_common::clock::{Clock, SystemClock};
use tierd_common::hash::FastMap;
use tierd_common::histogram::Histogram;
use tierd_common::units::{parse_duration_ns, Bytes, Duration, NS_PER_SECOND, PAGE_BYTES};
use tierd_nbd::client::{ClientReceiver, ClientSender, Completion};
use tierd_nbd::{parse_nbd_uri, Client, ClientError};
use tierd_sim::result::{PeriodRecord, RunResult, RunSettings, SimReport};
use tierd_sim::{Replay, Window};
use tierd_trace::{open_trace, Format, Op, OpenOptions, Request, TraceReader, VolumeId};

use crate::progress::ProgressLine;
use crate::serve::export::DescribedVolume;
use crate::CliError;

/// Default of `--max-inflight`.
pub const DEFAULT_MAX_INFLIGHT: u32 = 256;
/// Largest request NBD carries (the server refuses longer ones).
const MAX_REQUEST_BYTES: u64 = 32 << 20;
/// Longest single sleep of the issuing thread, so it notices a failed
/// connection within this time even across a long gap in the trace.
const MAX_SLEEP_NS: u64 = 100_000_000;
/// Error messages kept for the report.
const ERROR_SAMPLES: usize = 5;
const HOUR_NS: u64 = 3600 * NS_PER_SECOND;
/// How often the progress line's thread looks at the count (it redraws at
/// most every `progress::REDRAW_EVERY_NS`).
const PROGRESS_POLL_NS: u64 = 100_000_000;
/// Seed of the write pattern (see [`pattern_word`]): "tierdRPL".
pub const PATTERN_SEED: u64 = 0x7469_6572_6452_504c;

#[derive(Args)]
pub struct ReplayArgs {
    /// Trace file in any format tierd reads (.gz/.bz2/.xz/.zst transparently).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_name = "FORMAT")]
    format: Option<Format>,
    /// Keep only this volume of a multi-volume trace (MSR `hm_0`, SPC ASU, ...).
    #[arg(long, value_name = "NAME")]
    volume: Option<String>,
    /// Skip malformed lines instead of stopping at the first.
    #[arg(long)]
    skip_bad_lines: bool,
    /// The export: nbd+unix:///NAME?socket=PATH or nbd://HOST[:PORT]/NAME.
    #[arg(long, value_name = "URI")]
    target: String,
    /// Replay acceleration: request i is issued (t_i - t_0) / X after the start.
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    speed: f64,
    /// Replay only from this many minutes after the trace's first request.
    #[arg(long, value_name = "MINUTES")]
    from_min: Option<f64>,
    /// ... up to this many minutes after it (trace time, before --speed).
    #[arg(long, value_name = "MINUTES")]
    to_min: Option<f64>,
    /// Most requests outstanding over all connections; a request due while
    /// this many are outstanding waits for a completion (a late issue).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_INFLIGHT)]
    max_inflight: u32,
    /// NBD connections to spread the requests over (round robin).
    #[arg(long, value_name = "N", default_value_t = 1)]
    connections: u32,
    /// Period of the per-period series (iops over time, the plots), replay
    /// time; default: one that fits the run, about 60 points over the
    /// replay's length (100ms, 200ms, 500ms, 1s, 2s, 5s, 10s, 15s, 30s, at
    /// most 60s).
    #[arg(long, value_parser = duration_ns)]
    period: Option<u64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the simulator's HTML report into DIR (response-time CDF,
    /// iops per period, heat map of the replayed trace, CSVs, result.json).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Name of the run in the tables and JSON (the simulator's policy column).
    #[arg(long, value_name = "TEXT", default_value = "live")]
    label: String,
    /// Wrap requests that end past the export onto it (offset modulo its
    /// size in 4 KiB pages) instead of refusing to start, which is the
    /// default, as `tierd sim` refuses requests past its volume.
    #[arg(long, conflicts_with = "verify_size")]
    wrap: bool,
    /// Refuse to start when a request ends past the export: the default
    /// (kept so scripts that pass it keep working).
    #[arg(long)]
    verify_size: bool,
}

fn duration_ns(text: &str) -> Result<u64, String> {
    match parse_duration_ns(text) {
        Ok(0) => Err("must be longer than zero".to_string()),
        Ok(value) => Ok(value),
        Err(error) => Err(error.to_string()),
    }
}

fn minutes_ns(option: &str, minutes: Option<f64>) -> Result<Option<u64>, CliError> {
    match minutes {
        None => Ok(None),
        Some(value) if (0.0..1e9).contains(&value) => {
            Ok(Some((value * 60.0 * NS_PER_SECOND as f64).round() as u64))
        }
        Some(value) => Err(CliError(format!(
            "--{option} {value} is not a number of minutes >= 0"
        ))),
    }
}

/// Periods `--period` picks from when it is not given.
const FITTING_PERIODS_NS: [u64; 10] = [
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    15_000_000_000,
    30_000_000_000,
    60_000_000_000,
];
/// Points the default period aims for over a replay.
const FITTING_POINTS: u64 = 60;

/// The default `--period` for a replay lasting `length_ns`: the shortest of
/// [`FITTING_PERIODS_NS`] giving at most [`FITTING_POINTS`] periods, 60 s
/// for longer replays (the papers' period).
fn fitting_period_ns(length_ns: u64) -> u64 {
    let wanted = length_ns / FITTING_POINTS;
    FITTING_PERIODS_NS
        .iter()
        .copied()
        .find(|period| *period >= wanted)
        .unwrap_or(FITTING_PERIODS_NS[FITTING_PERIODS_NS.len() - 1])
}

// ----- the write pattern ----------------------------------------------------

/// The pattern word of the 8-byte block at `aligned_offset` (a multiple of
/// 8): byte `x` of the export written by a replay holds byte `x % 8`
/// (little-endian) of `pattern_word(x - x % 8)`. The same offset always gets
/// the same bytes, so overlapping writes in flight leave defined contents
/// and a reader can check what landed.
pub fn pattern_word(aligned_offset: u64) -> u64 {
    (aligned_offset ^ PATTERN_SEED).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Fills `buffer` with the pattern of the bytes from `offset_bytes` on.
fn fill_pattern(buffer: &mut [u8], offset_bytes: u64) {
    let mut index = 0usize;
    // Up to the first 8-byte boundary byte by byte, then whole words.
    while index < buffer.len() && !(offset_bytes + index as u64).is_multiple_of(8) {
        let at = offset_bytes + index as u64;
        buffer[index] = pattern_word(at - at % 8).to_le_bytes()[(at % 8) as usize];
        index += 1;
    }
    let mut chunks = buffer[index..].chunks_exact_mut(8);
    let mut at = offset_bytes + index as u64;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&pattern_word(at).to_le_bytes());
        at += 8;
    }
    let tail = chunks.into_remainder();
    let word = pattern_word(at).to_le_bytes();
    tail.copy_from_slice(&word[..tail.len()]);
}

// ----- requests in replay order ---------------------------------------------

/// The trace as the replay sees it: one volume, the window, due times (replay
/// ns from the start), zero-length requests skipped. The same rules as
/// `tierd sim`'s open loop, so both replay the same requests at the same times.
struct Schedule {
    reader: Box<dyn TraceReader>,
    speed: f64,
    window: Window,
    volume: Option<VolumeId>,
    origin_ns: Option<u64>,
    last_due_ns: u64,
    done: bool,
    empty_requests: u64,
    reordered_requests: u64,
}

impl Schedule {
    fn open(args: &ReplayArgs, window: Window) -> Result<Schedule, CliError> {
        let options = OpenOptions {
            format: args.format,
            volume: args.volume.clone(),
            skip_bad_lines: args.skip_bad_lines,
            ..OpenOptions::default()
        };
        Ok(Schedule {
            reader: open_trace(&args.trace, &options)?,
            speed: args.speed,
            window,
            volume: None,
            origin_ns: None,
            last_due_ns: 0,
            done: false,
            empty_requests: 0,
            reordered_requests: 0,
        })
    }

    /// The next request and its due time, `None` at the end of the window.
    fn next(&mut self) -> Result<Option<(u64, Request)>, CliError> {
        while !self.done {
            let Some(request) = self.reader.next_request()? else {
                self.done = true;
                break;
            };
            match self.volume {
                None => self.volume = Some(request.volume),
                Some(volume) if volume != request.volume => {
                    let names = self.reader.volumes();
                    let name = |id: VolumeId| {
                        names
                            .name(id)
                            .map_or_else(|| id.to_string(), str::to_string)
                    };
                    return Err(CliError(format!(
                        "{}: the trace has more than one volume ({:?} and {:?}); choose one (--volume NAME)",
                        self.reader.path().display(),
                        name(volume),
                        name(request.volume)
                    )));
                }
                Some(_) => {}
            }
            let origin = *self.origin_ns.get_or_insert(request.time_ns);
            let since_origin = request.time_ns.saturating_sub(origin);
            if self.window.from_ns.is_some_and(|from| since_origin < from) {
                continue;
            }
            if self.window.to_ns.is_some_and(|to| since_origin >= to) {
                self.done = true;
                break;
            }
            if request.length_bytes == 0 {
                self.empty_requests += 1;
                continue;
            }
            let since_start = since_origin - self.window.from_ns.unwrap_or(0);
            let mut due_ns = if self.speed == 1.0 {
                since_start
            } else {
                (since_start as f64 / self.speed) as u64
            };
            if due_ns < self.last_due_ns {
                self.reordered_requests += 1;
                due_ns = self.last_due_ns;
            }
            self.last_due_ns = due_ns;
            return Ok(Some((due_ns, request)));
        }
        Ok(None)
    }
}

/// What a pass over the trace found before the replay starts.
struct Scan {
    requests: u64,
    end_bytes: u64,
    /// The last request's due time: the replay's length.
    last_due_ns: u64,
    /// Two requests have different times.
    timed: bool,
    /// The first request ending past the export: (index, offset, length).
    first_beyond: Option<(u64, u64, u64)>,
    beyond: u64,
}

/// One pass over the window: checks every record parses (a bad line stops
/// the command before any IO, naming file and line), and finds requests the
/// export cannot hold.
fn scan(args: &ReplayArgs, window: Window, export_bytes: u64) -> Result<Scan, CliError> {
    let mut schedule = Schedule::open(args, window)?;
    let mut scan = Scan {
        requests: 0,
        end_bytes: 0,
        last_due_ns: 0,
        timed: false,
        first_beyond: None,
        beyond: 0,
    };
    let mut first_ns = None;
    while let Some((due_ns, request)) = schedule.next()? {
        scan.last_due_ns = due_ns;
        scan.timed |= *first_ns.get_or_insert(request.time_ns) != request.time_ns;
        if request.length_bytes > MAX_REQUEST_BYTES {
            return Err(CliError(format!(
                "{}: request {} of the window (offset {}, length {} bytes) is longer than the {} NBD carries",
                args.trace.display(),
                scan.requests,
                request.offset_bytes,
                request.length_bytes,
                Bytes(MAX_REQUEST_BYTES)
            )));
        }
        scan.end_bytes = scan.end_bytes.max(request.end_bytes());
        if request.end_bytes() > export_bytes {
            scan.beyond += 1;
            scan.first_beyond.get_or_insert((
                scan.requests,
                request.offset_bytes,
                request.length_bytes,
            ));
        }
        scan.requests += 1;
    }
    Ok(scan)
}

/// Where a request lands on an export of `export_bytes`: unchanged when it
/// fits, else wrapped modulo the export size rounded down to 4 KiB (keeping
/// its offset within a 4 KiB page), moved back by whole pages when it would
/// still cross the end, and cut to that size when it is longer. Returns the
/// offset, the length, and whether it was wrapped.
fn place(offset_bytes: u64, length_bytes: u64, export_bytes: u64) -> (u64, u64, bool) {
    if offset_bytes.saturating_add(length_bytes) <= export_bytes {
        return (offset_bytes, length_bytes, false);
    }
    let usable = export_bytes - export_bytes % PAGE_BYTES;
    if usable == 0 {
        return (0, length_bytes.min(export_bytes), true);
    }
    let mut offset = offset_bytes % usable;
    if offset + length_bytes > usable {
        let over = offset + length_bytes - usable;
        let back = over.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        offset = offset.saturating_sub(back);
        if offset % PAGE_BYTES != offset_bytes % PAGE_BYTES {
            // Moving back would have crossed zero: start at the page offset.
            offset = offset_bytes % PAGE_BYTES;
        }
    }
    (offset, length_bytes.min(usable - offset), true)
}

// ----- bookkeeping shared by the issuing and receiving threads --------------

/// Bounds the requests outstanding over all connections.
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
    limit: usize,
}

struct GateState {
    in_flight: usize,
    /// A connection failed: nobody waits any more.
    closed: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock()
}

impl Gate {
    fn new(limit: usize) -> Gate {
        Gate {
            state: Mutex::new(GateState {
                in_flight: 0,
                closed: false,
            }),
            changed: Condvar::new(),
            limit,
        }
    }

    /// Takes a slot, waiting while `limit` are taken. Returns whether it
    /// had to wait, or `None` when the gate was closed.
    fn acquire(&self) -> Option<bool> {
        let mut state = lock(&self.state);
        let mut waited = false;
        while state.in_flight >= self.limit && !state.closed {
            waited = true;
            self.changed.wait(&mut state);
        }
        if state.closed {
            return None;
        }
        state.in_flight += 1;
        Some(waited)
    }

    fn release(&self) {
        let mut state = lock(&self.state);
        state.in_flight = state.in_flight.saturating_sub(1);
        self.changed.notify_all();
    }

    /// Waits until nothing is outstanding (or the gate closed).
    fn wait_idle(&self) {
        let mut state = lock(&self.state);
        while state.in_flight > 0 && !state.closed {
            self.changed.wait(&mut state);
        }
    }

    fn close(&self) {
        lock(&self.state).closed = true;
        self.changed.notify_all();
    }

    fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }
}

/// A request on the wire, as its issuer saw it.
#[derive(Clone, Copy)]
struct Issued {
    due_ns: u64,
    issue_ns: u64,
    op: Op,
    length_bytes: u64,
}

/// A completion that arrived before its issuer filed the request.
struct Done {
    done_ns: u64,
    error: u32,
    message: String,
}

/// Completed requests, per connection; merged at the end.
struct Completions {
    period_ns: u64,
    requests: u64,
    reads: u64,
    writes: u64,
    bytes: u64,
    first_hour: u64,
    last_done_ns: u64,
    /// From the actual issue (the simulator's response).
    response: Histogram,
    /// From the due time.
    response_from_due: Histogram,
    /// Per period of completion: (requests, response ns summed).
    periods: Vec<(u64, u128)>,
    errors: u64,
    errors_by_name: FastMap<&'static str, u64>,
    error_samples: Vec<String>,
}

impl Completions {
    fn new(period_ns: u64) -> Completions {
        Completions {
            period_ns,
            requests: 0,
            reads: 0,
            writes: 0,
            bytes: 0,
            first_hour: 0,
            last_done_ns: 0,
            response: Histogram::new(),
            response_from_due: Histogram::new(),
            periods: Vec::new(),
            errors: 0,
            errors_by_name: FastMap::default(),
            error_samples: Vec::new(),
        }
    }

    fn record(&mut self, issued: Issued, done: Done) {
        let response_ns = done.done_ns.saturating_sub(issued.issue_ns);
        self.requests += 1;
        match issued.op {
            Op::Read => self.reads += 1,
            Op::Write => self.writes += 1,
        }
        self.bytes += issued.length_bytes;
        if done.done_ns < HOUR_NS {
            self.first_hour += 1;
        }
        self.last_done_ns = self.last_done_ns.max(done.done_ns);
        self.response.record(response_ns);
        self.response_from_due
            .record(done.done_ns.saturating_sub(issued.due_ns));
        let period = usize::try_from(done.done_ns / self.period_ns).unwrap_or(usize::MAX);
        if period >= self.periods.len() && period < usize::MAX {
            self.periods.resize(period + 1, (0, 0));
        }
        if let Some(slot) = self.periods.get_mut(period) {
            slot.0 += 1;
            slot.1 += u128::from(response_ns);
        }
        if done.error != 0 {
            self.errors += 1;
            *self
                .errors_by_name
                .entry(tierd_nbd::proto::error_name(done.error))
                .or_insert(0) += 1;
            if self.error_samples.len() < ERROR_SAMPLES {
                let op = match issued.op {
                    Op::Read => "read",
                    Op::Write => "write",
                };
                self.error_samples.push(format!(
                    "{op} of {} bytes: {} ({}){}",
                    issued.length_bytes,
                    tierd_nbd::proto::error_name(done.error),
                    done.error,
                    if done.message.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", done.message)
                    }
                ));
            }
        }
    }

    fn merge(&mut self, other: Completions) {
        self.requests += other.requests;
        self.reads += other.reads;
        self.writes += other.writes;
        self.bytes += other.bytes;
        self.first_hour += other.first_hour;
        self.last_done_ns = self.last_done_ns.max(other.last_done_ns);
        self.response.merge(&other.response);
        self.response_from_due.merge(&other.response_from_due);
        if other.periods.len() > self.periods.len() {
            self.periods.resize(other.periods.len(), (0, 0));
        }
        for (mine, theirs) in self.periods.iter_mut().zip(other.periods) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
        }
        self.errors += other.errors;
        for (name, count) in other.errors_by_name {
            *self.errors_by_name.entry(name).or_insert(0) += count;
        }
        for sample in other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(sample);
            }
        }
    }
}

/// Per connection: requests on the wire and the completions counted so far.
struct Table {
    pending: FastMap<u64, Issued>,
    early: FastMap<u64, Done>,
    completions: Completions,
}

/// One connection's shared state.
struct Connection {
    table: Mutex<Table>,
    /// Set before the issuer sends NBD_CMD_DISC: the server closing the
    /// socket is then the normal end.
    closing: AtomicBool,
}

impl Connection {
    fn new(period_ns: u64, capacity: usize) -> Connection {
        let mut pending = FastMap::default();
        pending.reserve(capacity);
        let mut early = FastMap::default();
        early.reserve(capacity);
        Connection {
            table: Mutex::new(Table {
                pending,
                early,
                completions: Completions::new(period_ns),
            }),
            closing: AtomicBool::new(false),
        }
    }

    /// The issuer files a request it sent.
    fn issued(&self, cookie: u64, issued: Issued) {
        let mut table = lock(&self.table);
        match table.early.remove(&cookie) {
            Some(done) => table.completions.record(issued, done),
            None => {
                table.pending.insert(cookie, issued);
            }
        }
    }

    /// The receiver files a completion.
    fn completed(&self, completion: Completion, done_ns: u64) {
        let done = Done {
            done_ns,
            error: completion.error,
            message: completion.error_message,
        };
        let mut table = lock(&self.table);
        match table.pending.remove(&completion.cookie) {
            Some(issued) => table.completions.record(issued, done),
            None => {
                table.early.insert(completion.cookie, done);
            }
        }
    }
}

/// The receiving thread of one connection. Ends at the server's close after
/// the disconnect, or at the first failure (which closes the gate so the
/// issuer stops). `completed` counts completions over every connection
/// (the progress line).
fn receive_all(
    mut receiver: ClientReceiver,
    connection: &Connection,
    gate: &Gate,
    clock: &SystemClock,
    start_ns: u64,
    completed: &AtomicU64,
) -> Result<(), ClientError> {
    loop {
        match receiver.receive() {
            Ok(completion) => {
                let done_ns = clock.now_ns().saturating_sub(start_ns);
                connection.completed(completion, done_ns);
                completed.fetch_add(1, Ordering::Relaxed);
                gate.release();
            }
            Err(_) if connection.closing.load(Ordering::SeqCst) && receiver.in_flight() == 0 => {
                return Ok(());
            }
            Err(error) => {
                gate.close();
                return Err(error);
            }
        }
    }
}

/// What the issuing thread counted.
struct Issuing {
    issued: u64,
    wrapped: u64,
    late_issues: u64,
    late_ns_total: u128,
    late_ns_max: u64,
    /// Issue time − due time, every request.
    issue_lag: Histogram,
    last_issue_ns: u64,
    /// Why issuing stopped early.
    failure: Option<String>,
}

#[allow(clippy::too_many_arguments)]
fn issue_all(
    schedule: &mut Schedule,
    senders: &mut [ClientSender],
    connections: &[Connection],
    gate: &Gate,
    clock: &SystemClock,
    start_ns: u64,
    export_bytes: u64,
) -> Issuing {
    let mut issuing = Issuing {
        issued: 0,
        wrapped: 0,
        late_issues: 0,
        late_ns_total: 0,
        late_ns_max: 0,
        issue_lag: Histogram::new(),
        last_issue_ns: 0,
        failure: None,
    };
    let mut buffer: Vec<u8> = Vec::new();
    let mut next_connection = 0usize;
    loop {
        let (due_ns, request) = match schedule.next() {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(CliError(message)) => {
                issuing.failure = Some(message);
                break;
            }
        };
        let (offset_bytes, length_bytes, wrapped) =
            place(request.offset_bytes, request.length_bytes, export_bytes);
        issuing.wrapped += u64::from(wrapped);
        if request.op == Op::Write {
            buffer.resize(length_bytes as usize, 0);
            fill_pattern(&mut buffer, offset_bytes);
        }
        loop {
            let now_ns = clock.now_ns().saturating_sub(start_ns);
            if now_ns >= due_ns || gate.is_closed() {
                break;
            }
            clock.sleep_ns((due_ns - now_ns).min(MAX_SLEEP_NS));
        }
        let Some(waited) = gate.acquire() else {
            break;
        };
        let issue_ns = clock.now_ns().saturating_sub(start_ns);
        let lag_ns = issue_ns.saturating_sub(due_ns);
        issuing.issue_lag.record(lag_ns);
        if waited {
            issuing.late_issues += 1;
            issuing.late_ns_total += u128::from(lag_ns);
            issuing.late_ns_max = issuing.late_ns_max.max(lag_ns);
        }
        let index = next_connection;
        next_connection = (next_connection + 1) % senders.len();
        let sender = &mut senders[index];
        let submitted = match request.op {
            // place() keeps lengths at most 32 MiB (checked by the scan).
            Op::Read => sender.submit_read(offset_bytes, length_bytes as u32),
            Op::Write => sender.submit_write(offset_bytes, &buffer, false),
        };
        match submitted {
            Ok(cookie) => {
                connections[index].issued(
                    cookie,
                    Issued {
                        due_ns,
                        issue_ns,
                        op: request.op,
                        length_bytes,
                    },
                );
                issuing.issued += 1;
                issuing.last_issue_ns = issue_ns;
            }
            Err(error) => {
                gate.release();
                gate.close();
                issuing.failure = Some(format!("connection {index}: {error}"));
                break;
            }
        }
    }
    issuing
}

// ----- the command ------------------------------------------------------------

pub fn run(args: ReplayArgs) -> Result<(), CliError> {
    if !(args.speed.is_finite() && args.speed > 0.0) {
        return Err(CliError(format!(
            "--speed {} is not a factor > 0",
            args.speed
        )));
    }
    if args.max_inflight == 0 {
        return Err(CliError("--max-inflight must be at least 1".into()));
    }
    if !(1..=64).contains(&args.connections) {
        return Err(CliError(format!(
            "--connections {} is not between 1 and 64",
            args.connections
        )));
    }
    let window = Window {
        from_ns: minutes_ns("from-min", args.from_min)?,
        to_ns: minutes_ns("to-min", args.to_min)?,
    };
    if let (Some(from), Some(to)) = (window.from_ns, window.to_ns) {
        if to <= from {
            return Err(CliError("--to-min must be later than --from-min".into()));
        }
    }
    let uri =
        parse_nbd_uri(&args.target).map_err(|error| CliError(format!("--target: {error}")))?;
    // Parse the whole trace before connecting: a bad line stops here.
    let trace_name = args.trace.display().to_string();
    let probe = scan(&args, window, u64::MAX)?;
    if probe.requests == 0 {
        return Err(CliError(format!("{trace_name}: no requests to replay")));
    }
    if !probe.timed && probe.requests > 1 {
        eprintln!(
            "{}",
            crate::sim::untimed_warning(&trace_name, Some(probe.requests), "tierd replay")
        );
    }
    let period_ns = args
        .period
        .unwrap_or_else(|| fitting_period_ns(probe.last_due_ns));

    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    let mut export_bytes = None;
    let mut volume = None;
    let mut multi_conn = true;
    for index in 0..args.connections {
        let client = Client::connect(
            &uri.target,
            &tierd_nbd::ConnectOptions {
                export_name: uri.export_name.clone(),
                allocation_context: false,
                tls: uri.tls.clone(),
                ..tierd_nbd::ConnectOptions::default()
            },
        )
        .map_err(|error| CliError(format!("{}: connection {index}: {error}", args.target)))?;
        let info = client.info();
        multi_conn &= info.can_multi_conn();
        if index == 0 {
            volume = info
                .description
                .as_deref()
                .and_then(crate::serve::export::parse_description);
        }
        match export_bytes {
            None => export_bytes = Some(info.size_bytes),
            Some(size) if size != info.size_bytes => {
                return Err(CliError(format!(
                    "{}: connection {index} sees {} bytes, connection 0 saw {size}",
                    args.target, info.size_bytes
                )))
            }
            Some(_) => {}
        }
        let (sender, receiver) = client.split();
        senders.push(sender);
        receivers.push(receiver);
    }
    let export_bytes = export_bytes.unwrap_or(0);
    if export_bytes == 0 {
        return Err(CliError(format!("{}: the export is empty", args.target)));
    }
    if !args.wrap && probe.end_bytes > export_bytes {
        // A second pass names the first request that does not fit.
        let fit = scan(&args, window, export_bytes)?;
        let (index, offset, length) = fit.first_beyond.unwrap_or((0, 0, 0));
        return Err(CliError(format!(
            "{trace_name}: {} of {} requests end past the {export_bytes}-byte export (the first: request {index} of the window, offset {offset}, length {length} bytes; the trace reaches {} bytes); give the export that size, or pass --wrap to wrap them onto it (offset modulo its size)",
            fit.beyond, fit.requests, fit.end_bytes
        )));
    }

    let capacity = (args.max_inflight as usize).min(1 << 16);
    let connections: Vec<Connection> = (0..args.connections)
        .map(|_| Connection::new(period_ns, capacity))
        .collect();
    let gate = Gate::new(args.max_inflight as usize);
    let clock = SystemClock::new();
    let mut schedule = Schedule::open(&args, window)?;
    eprintln!(
        "tierd replay: {} requests of {trace_name} to {} ({}), x{}, at most {} in flight over {} connection(s)",
        probe.requests,
        args.target,
        Bytes(export_bytes),
        args.speed,
        args.max_inflight,
        args.connections
    );
    let completed = AtomicU64::new(0);
    let finished = AtomicBool::new(false);
    let progress = ProgressLine::new("tierd replay", "replayed", Some(probe.requests));
    let start_ns = clock.now_ns();
    let (issuing, receiver_errors) = std::thread::scope(|scope| {
        let handles: Vec<_> = receivers
            .into_iter()
            .zip(&connections)
            .map(|(receiver, connection)| {
                let (gate, clock, completed) = (&gate, &clock, &completed);
                scope.spawn(move || {
                    receive_all(receiver, connection, gate, clock, start_ns, completed)
                })
            })
            .collect();
        if progress.is_shown() {
            let (clock, completed, finished, progress) = (&clock, &completed, &finished, &progress);
            scope.spawn(move || {
                // The ETA is the schedule's: the last request is due at
                // its time whatever the rate so far.
                while !finished.load(Ordering::SeqCst) {
                    let now_ns = clock.now_ns().saturating_sub(start_ns);
                    progress.update_with_eta(
                        completed.load(Ordering::Relaxed),
                        Some(probe.last_due_ns.saturating_sub(now_ns)),
                    );
                    clock.sleep_ns(PROGRESS_POLL_NS);
                }
            });
        }
        let issuing = issue_all(
            &mut schedule,
            &mut senders,
            &connections,
            &gate,
            &clock,
            start_ns,
            export_bytes,
        );
        gate.wait_idle();
        for (sender, connection) in senders.iter_mut().zip(&connections) {
            connection.closing.store(true, Ordering::SeqCst);
            // A failed disconnect shows as the receiver's error below.
            let _ = sender.submit_disconnect();
        }
        let errors: Vec<String> = handles
            .into_iter()
            .enumerate()
            .filter_map(|(index, handle)| match handle.join() {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(format!("connection {index}: {error}")),
                Err(_) => Some(format!("connection {index}: the receiver panicked")),
            })
            .collect();
        finished.store(true, Ordering::SeqCst);
        (issuing, errors)
    });
    progress.finish();
    let wall_ns = clock.now_ns().saturating_sub(start_ns);

    let mut completions = Completions::new(period_ns);
    for connection in connections {
        let table = connection.table.into_inner();
        completions.merge(table.completions);
    }
    let live = build_report(
        &args,
        &trace_name,
        export_bytes,
        volume.as_ref(),
        period_ns,
        multi_conn,
        window,
        &schedule,
        &issuing,
        probe.requests,
        completions,
    );
    eprintln!(
        "tierd replay: {} requests completed in {:.2} s wall",
        live.runs[0].run.requests,
        wall_ns as f64 / 1e9
    );
    if args.json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &live)?;
        writeln!(out)?;
    } else {
        print!("{}", render_text(&live));
    }
    if let Some(directory) = &args.report {
        write_report(directory, &args, window, period_ns, &live)?;
    }

    let mut failures = Vec::new();
    if let Some(failure) = &issuing.failure {
        failures.push(format!("the replay stopped early: {failure}"));
    }
    failures.extend(receiver_errors);
    let run = &live.runs[0];
    if run.errors > 0 {
        failures.push(format!(
            "{} request(s) failed on the server: {}",
            run.errors,
            run.error_samples.join("; ")
        ));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError(failures.join("; ")))
    }
}

// ----- results ------------------------------------------------------------------

/// A live run: the simulator's [`RunResult`] keys (the tier figures stay
/// empty: the replay sees the export from outside), then what only a live
/// replay has.
#[derive(Serialize)]
struct LiveRun {
    #[serde(flatten)]
    run: RunResult,
    /// The NBD URI replayed against and the export's size.
    target: String,
    export_bytes: u64,
    connections: u32,
    /// The export advertised multi-conn (flush on one connection covers all).
    multi_conn: bool,
    /// Requests issued after their due time because `max_inflight` were
    /// outstanding (= `deferred_requests`).
    late_issues: u64,
    /// Requests that failed on the server, by NBD error name, and the first
    /// few messages.
    errors: u64,
    errors_by_name: std::collections::BTreeMap<String, u64>,
    error_samples: Vec<String>,
    /// Requests ending past the export, wrapped onto it.
    wrapped_requests: u64,
    /// Issue time − due time over all requests (sleep overshoot and the
    /// in-flight bound), µs.
    issue_lag_mean_us: f64,
    issue_lag_p99_us: f64,
    issue_lag_max_us: f64,
    response_p95_us: f64,
    /// Response from the due time (what a user of the traced system waits,
    /// including any issue lag), µs, and its histogram.
    avg_response_from_due_us: f64,
    response_from_due_p50_us: f64,
    response_from_due_p95_us: f64,
    response_from_due_p99_us: f64,
    response_from_due_max_us: f64,
    response_from_due: Histogram,
    /// Requests in the window that were not issued (the replay stopped early).
    not_issued: u64,
}

/// The report: [`SimReport`]'s keys with live runs.
#[derive(Serialize)]
struct LiveReport {
    trace: String,
    trace_kind: String,
    tiers: String,
    tier_summary: String,
    runs: Vec<LiveRun>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
}

impl LiveReport {
    /// The simulator's report of the same runs (tables, HTML report).
    fn to_sim_report(&self) -> SimReport {
        SimReport {
            trace: self.trace.clone(),
            trace_kind: self.trace_kind.clone(),
            tiers: self.tiers.clone(),
            tier_summary: self.tier_summary.clone(),
            runs: self.runs.iter().map(|live| live.run.clone()).collect(),
            notes: self.notes.clone(),
        }
    }
}

fn us(ns: Option<u64>) -> f64 {
    ns.map_or(0.0, |ns| ns as f64 / 1e3)
}

#[allow(clippy::too_many_arguments)]
fn build_report(
    args: &ReplayArgs,
    trace_name: &str,
    export_bytes: u64,
    volume: Option<&DescribedVolume>,
    period_ns: u64,
    multi_conn: bool,
    window: Window,
    schedule: &Schedule,
    issuing: &Issuing,
    window_requests: u64,
    completions: Completions,
) -> LiveReport {
    let elapsed_ns = completions.last_done_ns;
    let seconds = elapsed_ns as f64 / 1e9;
    let per_second = |count: u64, seconds: f64| {
        if seconds > 0.0 {
            count as f64 / seconds
        } else {
            0.0
        }
    };
    let period_count = completions.periods.len();
    let periods: Vec<PeriodRecord> = completions
        .periods
        .iter()
        .enumerate()
        .map(|(index, (requests, response_ns))| {
            let start_ns = index as u64 * period_ns;
            PeriodRecord {
                index: index as u64,
                start_ns,
                end_ns: if index + 1 == period_count {
                    elapsed_ns.max(start_ns)
                } else {
                    start_ns + period_ns
                },
                requests: *requests,
                avg_response_us: if *requests > 0 {
                    *response_ns as f64 / *requests as f64 / 1e3
                } else {
                    0.0
                },
                moves_started: 0,
                moves_finished: 0,
                tiers: Vec::new(),
            }
        })
        .collect();
    let response = &completions.response;
    let from_due = &completions.response_from_due;
    let run = RunResult {
        policy: args.label.clone(),
        avg_iops: per_second(completions.requests, seconds),
        avg_response_us: response.mean_ns().unwrap_or(0.0) / 1e3,
        fast_io_share: 0.0,
        fast_bytes_max: 0,
        migrated_bytes: 0,
        avg_iops_first_hour: per_second(completions.first_hour, seconds.min(HOUR_NS as f64 / 1e9)),
        requests: completions.requests,
        reads: completions.reads,
        writes: completions.writes,
        bytes: completions.bytes,
        pieces: completions.requests,
        empty_requests: schedule.empty_requests,
        reordered_requests: schedule.reordered_requests,
        deferred_requests: issuing.late_issues,
        defer_mean_us: if issuing.late_issues > 0 {
            issuing.late_ns_total as f64 / issuing.late_issues as f64 / 1e3
        } else {
            0.0
        },
        defer_max_us: issuing.late_ns_max as f64 / 1e3,
        elapsed_ns,
        last_arrival_ns: issuing.last_issue_ns,
        response_p50_us: us(response.quantile_ns(0.5)),
        response_p90_us: us(response.quantile_ns(0.9)),
        response_p99_us: us(response.quantile_ns(0.99)),
        response_p999_us: us(response.quantile_ns(0.999)),
        response_max_us: us(response.max_ns()),
        response: response.clone(),
        home_svctm_ms: 0.0,
        home_util: 0.0,
        moves: 0,
        moves_unfinished: 0,
        moves_dropped: 0,
        switch_over_stall_max_us: 0.0,
        switch_over_stall_mean_us: 0.0,
        stalled_pieces: 0,
        mirrored_writes: 0,
        deferred_target_halves: 0,
        mirror_wait_max_us: 0.0,
        mirror_wait_mean_us: 0.0,
        move_mean_us: None,
        tiers: Vec::new(),
        cache: None,
        gain: None,
        move_log: Vec::new(),
        periods,
        settings: RunSettings {
            // What the export's description tells (a tierd export); 0: not
            // visible to the client.
            segment_bytes: volume.map_or(0, |volume| volume.segment_bytes),
            volume_bytes: export_bytes,
            segments: volume.map_or(0, |volume| {
                export_bytes.div_ceil(volume.segment_bytes.max(1))
            }),
            period_ns,
            replay: Replay::OpenLoop { speed: args.speed },
            window,
            seed: 0,
            chunk_bytes: 0,
            max_concurrent_moves: 0,
            max_outstanding_requests: args.max_inflight,
            cache_bytes: None,
        },
    };
    let errors_by_name = completions
        .errors_by_name
        .iter()
        .map(|(name, count)| (name.to_string(), *count))
        .collect();
    let live = LiveRun {
        run,
        target: args.target.clone(),
        export_bytes,
        connections: args.connections,
        multi_conn,
        late_issues: issuing.late_issues,
        errors: completions.errors,
        errors_by_name,
        error_samples: completions.error_samples,
        wrapped_requests: issuing.wrapped,
        issue_lag_mean_us: issuing.issue_lag.mean_ns().unwrap_or(0.0) / 1e3,
        issue_lag_p99_us: us(issuing.issue_lag.quantile_ns(0.99)),
        issue_lag_max_us: us(issuing.issue_lag.max_ns()),
        response_p95_us: us(response.quantile_ns(0.95)),
        avg_response_from_due_us: from_due.mean_ns().unwrap_or(0.0) / 1e3,
        response_from_due_p50_us: us(from_due.quantile_ns(0.5)),
        response_from_due_p95_us: us(from_due.quantile_ns(0.95)),
        response_from_due_p99_us: us(from_due.quantile_ns(0.99)),
        response_from_due_max_us: us(from_due.max_ns()),
        response_from_due: from_due.clone(),
        not_issued: window_requests.saturating_sub(issuing.issued),
    };
    let mut notes = vec![format!(
        "live replay against {} ({}): response times are wall-clock, measured by the client from issue to completion; tier figures are not visible from outside the server ('-')",
        args.target,
        Bytes(export_bytes)
    )];
    if issuing.wrapped > 0 {
        notes.push(format!(
            "{} request(s) ended past the export and were wrapped onto it (modulo its size in 4 KiB pages)",
            issuing.wrapped
        ));
    }
    if args.connections > 1 && !multi_conn {
        notes.push("the export does not advertise multi-conn".to_string());
    }
    LiveReport {
        trace: trace_name.to_string(),
        trace_kind: "file".to_string(),
        tiers: format!("live: {}", args.target),
        tier_summary: format!(
            "NBD export of {}, {} connection(s){}",
            Bytes(export_bytes),
            args.connections,
            volume.map_or_else(String::new, |volume| format!(
                "; tierd volume {} in segments of {} over tiers {}",
                volume.name,
                Bytes(volume.segment_bytes),
                volume.tiers.join(" > ")
            ))
        ),
        runs: vec![live],
        notes,
    }
}

fn render_text(live: &LiveReport) -> String {
    use std::fmt::Write as _;
    use tierd_sim::tables;
    let report = live.to_sim_report();
    let mut out = String::new();
    let _ = writeln!(out, "trace: {} [{}]", live.trace, live.trace_kind);
    let _ = writeln!(out, "target: {} ({})", live.tiers, live.tier_summary);
    if let Some(first) = live.runs.first() {
        let run = &first.run;
        let _ = writeln!(
            out,
            "replay: open loop x{}, at most {} in flight, period {}, {} requests",
            match run.settings.replay {
                Replay::OpenLoop { speed } => speed,
                Replay::ClosedLoop { .. } => 0.0,
            },
            run.settings.max_outstanding_requests,
            Duration(run.settings.period_ns),
            run.requests
        );
    }
    for note in &live.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out.push('\n');
    out.push_str(tables::IOPS_TABLE_TITLE);
    out.push_str(":\n");
    out.push_str(&tables::columns(&tables::iops_rows(&report)));
    out.push('\n');
    out.push_str(tables::RESPONSE_TABLE_TITLE);
    out.push_str(":\n");
    out.push_str(&tables::columns(&tables::response_rows(&report)));
    out.push('\n');
    out.push_str("Live replay (response from issue / from the due time, ms):\n");
    let mut rows = vec![[
        "run",
        "requests",
        "reads",
        "writes",
        "MB",
        "avg",
        "p50",
        "p95",
        "p99",
        "max",
        "avg from due",
        "p99 from due",
        "late issues",
        "issue lag p99",
        "wrapped",
        "errors",
    ]
    .map(str::to_string)
    .to_vec()];
    for live in &live.runs {
        let run = &live.run;
        let ms = |us: f64| format!("{:.3}", us / 1e3);
        rows.push(vec![
            run.policy.clone(),
            run.requests.to_string(),
            run.reads.to_string(),
            run.writes.to_string(),
            format!("{:.1}", run.bytes as f64 / 1e6),
            ms(run.avg_response_us),
            ms(run.response_p50_us),
            ms(live.response_p95_us),
            ms(run.response_p99_us),
            ms(run.response_max_us),
            ms(live.avg_response_from_due_us),
            ms(live.response_from_due_p99_us),
            live.late_issues.to_string(),
            ms(live.issue_lag_p99_us),
            live.wrapped_requests.to_string(),
            live.errors.to_string(),
        ]);
    }
    out.push_str(&tables::columns(&rows));
    out
}

/// `--report DIR`: the simulator's report of the live run, a heat map of
/// the replayed window (as `tierd sim --report` computes it), and
/// `result.json` replaced by the live JSON (`--json`'s output).
fn write_report(
    directory: &Path,
    args: &ReplayArgs,
    window: Window,
    period_ns: u64,
    live: &LiveReport,
) -> Result<(), CliError> {
    use tierd_sim::report::{HeatMap, HeatMapCell, ReplayTimeReader, ReportKind, ReportOptions};
    let replay = Replay::OpenLoop { speed: args.speed };
    let options = OpenOptions {
        format: args.format,
        volume: args.volume.clone(),
        skip_bad_lines: args.skip_bad_lines,
        ..OpenOptions::default()
    };
    let mut reader = ReplayTimeReader::new(open_trace(&args.trace, &options)?, window, replay);
    // The heat map's segments: the live volume's when its export says
    // (a tierd export), else 1 GiB (the papers' segment).
    let segment_bytes = live
        .runs
        .first()
        .map(|run| run.run.settings.segment_bytes)
        .filter(|bytes| *bytes > 0)
        .unwrap_or(1 << 30);
    let analysis = tierd_analysis::analyze(
        &mut reader,
        &tierd_analysis::AnalyzeOptions {
            segment_bytes,
            period_ns,
            segment_table_rows: 0,
            ..tierd_analysis::AnalyzeOptions::default()
        },
    )?;
    let matrix = &analysis.matrix;
    let heat_map = HeatMap {
        svg: tierd_analysis::heatmap::render_svg(&analysis),
        segment_bytes,
        period_ns,
        segments: matrix.segments,
        periods: matrix.periods,
        cells: matrix
            .cells()
            .map(|(period, cell)| HeatMapCell {
                period,
                segment: cell.segment,
                io: u64::from(cell.io),
                writes: u64::from(cell.writes),
            })
            .collect(),
        note: format!(
            "Computed by tierd_analysis over the replayed window ({} requests, trace offsets before any wrapping); x is replay time (trace time / {}), in periods of {}, segments of {}.",
            analysis.requests,
            args.speed,
            Duration(period_ns),
            Bytes(segment_bytes)
        ),
    };
    let index = tierd_sim::report::write(
        directory,
        &live.to_sim_report(),
        Some(&heat_map),
        &ReportOptions {
            kind: ReportKind::LiveReplay,
            ..ReportOptions::default()
        },
    )?;
    let mut json = serde_json::to_string_pretty(live)?;
    json.push('\n');
    let result = directory.join("result.json");
    std::fs::write(&result, json)
        .map_err(|error| CliError(format!("{}: cannot write: {error}", result.display())))?;
    eprintln!("tierd replay: report written to {}", index.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_that_fit_stay() {
        assert_eq!(place(4096, 8192, 1 << 20), (4096, 8192, false));
        assert_eq!(
            place((1 << 20) - 512, 512, 1 << 20),
            ((1 << 20) - 512, 512, false)
        );
    }

    #[test]
    fn requests_past_the_end_wrap_inside_keeping_page_offsets() {
        let export = (1u64 << 20) + 1000; // usable: 1 MiB
        let (offset, length, wrapped) = place(3 * (1 << 20) + 4096 + 512, 4096, export);
        assert!(wrapped);
        assert_eq!((offset, length), (4096 + 512, 4096));
        // Wraps to the last page and would cross the usable end: moved back.
        let (offset, length, _) = place(2 * (1 << 20) - 512, 4096, export);
        assert_eq!(offset % PAGE_BYTES, 4096 - 512);
        assert!(offset + length <= 1 << 20, "{offset}+{length}");
        assert_eq!(length, 4096);
        // Longer than the export: cut.
        let (offset, length, _) = place(1 << 30, 4 << 20, export);
        assert_eq!(offset, 0);
        assert_eq!(length, 1 << 20);
        for (offset, length) in [(u64::MAX - 10, 4096), (u64::MAX, 1), (5 << 20, 1 << 20)] {
            let (placed, placed_length, _) = place(offset, length, export);
            assert!(placed + placed_length <= export, "{offset} {length}");
        }
    }

    #[test]
    fn pattern_is_a_function_of_the_offset() {
        let mut whole = vec![0u8; 64];
        fill_pattern(&mut whole, 1000);
        for start in 0..20 {
            let mut part = vec![0u8; 31];
            fill_pattern(&mut part, 1000 + start as u64);
            assert_eq!(&part[..], &whole[start..start + 31], "from {start}");
        }
        assert_eq!(&whole[0..8], &pattern_word(1000).to_le_bytes());
        assert_ne!(whole[0..8], whole[8..16]);
    }
}
