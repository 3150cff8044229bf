//! Trace feeding: the requests of a trace in replay order with their due
//! times, by `tierd sim`'s own cursor ([`tierd_sim::cursor::Cursor`]: one
//! volume, the window, zero-length requests skipped, due times that never go
//! backwards), so both replay the same requests at the same times.
//!
//! Nothing here does IO of its own beyond reading the trace through a
//! [`TraceReader`], and nothing reads a clock.

use std::path::PathBuf;

use tierd_common::units::{Bytes, NS_PER_SECOND};
use tierd_sim::cursor::Cursor;
use tierd_sim::{SimError, Window};
use tierd_trace::{open_trace, OpenOptions, Request, TraceReader};

use crate::LoadError;

/// Largest request NBD carries (servers refuse longer ones).
pub const MAX_REQUEST_BYTES: u64 = 32 << 20;

/// Where the requests come from: a trace file and how to open it.
#[derive(Clone, Debug)]
pub struct TraceSource {
    pub path: PathBuf,
    /// Format, volume and bad-line handling, as `tierd sim` opens a trace.
    pub options: OpenOptions,
}

impl TraceSource {
    /// A fresh reader at the trace's first record.
    pub fn open(&self) -> Result<Box<dyn TraceReader>, LoadError> {
        Ok(open_trace(&self.path, &self.options)?)
    }

    /// The trace as the reports name it.
    pub fn name(&self) -> String {
        self.path.display().to_string()
    }
}

/// A request and when it is due: replay ns after the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Due {
    pub due_ns: u64,
    pub request: Request,
}

/// The trace as the replay sees it (see the module documentation).
pub struct Schedule {
    reader: Box<dyn TraceReader>,
    speed: f64,
    cursor: Cursor,
}

impl Schedule {
    /// The requests of `reader` in the window, replayed `speed` times faster
    /// than recorded (`speed` > 0, finite).
    pub fn new(reader: Box<dyn TraceReader>, speed: f64, window: Window) -> Schedule {
        Schedule {
            reader,
            speed,
            cursor: Cursor::new(window),
        }
    }

    /// The next request and its due time, `None` at the end of the window.
    pub fn next_due(&mut self) -> Result<Option<Due>, LoadError> {
        let request = match self.cursor.next(self.reader.as_mut()) {
            Ok(Some(request)) => request,
            Ok(None) => return Ok(None),
            Err(SimError::Trace(error)) => return Err(LoadError::Trace(error)),
            Err(error) => {
                return Err(LoadError::Refused(format!(
                    "{}: {error}",
                    self.reader.path().display()
                )))
            }
        };
        let due_ns = self.cursor.due_ns(&request, self.speed);
        Ok(Some(Due { due_ns, request }))
    }

    /// Requests of zero length, skipped.
    pub fn empty_requests(&self) -> u64 {
        self.cursor.empty_requests
    }

    /// Requests whose timestamp went backwards, due at the previous due time.
    pub fn reordered_requests(&self) -> u64 {
        self.cursor.reordered_requests
    }
}

/// What a pass over the trace found before the replay starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// Requests in the window (zero-length ones skipped).
    pub requests: u64,
    /// The highest byte a request reaches.
    pub end_bytes: u64,
    /// The last request's due time: the replay's length.
    pub last_due_ns: u64,
    /// Two requests have different times (false: a trace without
    /// timestamps, issued all at once).
    pub timed: bool,
    /// The first request ending past the export: (index, offset, length).
    pub first_beyond: Option<(u64, u64, u64)>,
    /// Requests ending past the export.
    pub beyond: u64,
}

/// One pass over the window: checks every record parses (a bad line stops
/// the replay before any IO, naming file and line), that no request is
/// longer than NBD carries, and finds requests an export of `export_bytes`
/// cannot hold (`u64::MAX`: none).
pub fn scan(schedule: &mut Schedule, export_bytes: u64) -> Result<Scan, LoadError> {
    let mut scan = Scan {
        requests: 0,
        end_bytes: 0,
        last_due_ns: 0,
        timed: false,
        first_beyond: None,
        beyond: 0,
    };
    let mut first_ns = None;
    while let Some(Due { due_ns, request }) = schedule.next_due()? {
        scan.last_due_ns = due_ns;
        scan.timed |= *first_ns.get_or_insert(request.time_ns) != request.time_ns;
        if request.length_bytes > MAX_REQUEST_BYTES {
            return Err(LoadError::Refused(format!(
                "{}: request {} of the window (offset {}, length {} bytes) is longer than the {} NBD carries",
                schedule.reader.path().display(),
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

/// Periods the default period is picked from.
const FITTING_PERIODS_NS: [u64; 10] = [
    100_000_000,
    200_000_000,
    500_000_000,
    NS_PER_SECOND,
    2 * NS_PER_SECOND,
    5 * NS_PER_SECOND,
    10 * NS_PER_SECOND,
    15 * NS_PER_SECOND,
    30 * NS_PER_SECOND,
    60 * NS_PER_SECOND,
];
/// Points the default period aims for over a replay.
const FITTING_POINTS: u64 = 60;

/// The default period of the per-period series for a replay lasting
/// `length_ns`: the shortest of 100 ms, 200 ms, 500 ms, 1 s, 2 s, 5 s, 10 s,
/// 15 s, 30 s, 60 s giving at most 60 periods, 60 s for longer replays (the
/// papers' period).
pub fn fitting_period_ns(length_ns: u64) -> u64 {
    let wanted = length_ns / FITTING_POINTS;
    FITTING_PERIODS_NS
        .iter()
        .copied()
        .find(|period| *period >= wanted)
        .unwrap_or(FITTING_PERIODS_NS[FITTING_PERIODS_NS.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_trace::{Format, IteratorReader, Op};

    fn request(time_ns: u64, volume: u32, offset_bytes: u64, length_bytes: u64) -> Request {
        Request {
            time_ns,
            volume,
            op: Op::Read,
            offset_bytes,
            length_bytes,
            response_ns: None,
        }
    }

    fn schedule(requests: Vec<Request>, speed: f64, window: Window) -> Schedule {
        Schedule::new(
            Box::new(IteratorReader::new(
                requests.into_iter(),
                &["hm_0", "hm_1"],
                Format::Msr,
                "test.csv",
            )),
            speed,
            window,
        )
    }

    fn all(schedule: &mut Schedule) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while let Some(due) = schedule.next_due().unwrap() {
            out.push((due.due_ns, due.request.offset_bytes));
        }
        out
    }

    #[test]
    fn due_times_are_trace_times_over_speed_from_the_window_start() {
        let requests = (0..10u64)
            .map(|index| request(1_000 + index * NS_PER_SECOND, 0, index * 4096, 4096))
            .collect();
        let mut whole = schedule(requests, 2.0, Window::default());
        let due = all(&mut whole);
        assert_eq!(due.len(), 10);
        assert_eq!(due[0], (0, 0));
        assert_eq!(due[3], (1_500_000_000, 3 * 4096));

        let requests = (0..10u64)
            .map(|index| request(index * NS_PER_SECOND, 0, index * 4096, 4096))
            .collect();
        let window = Window {
            from_ns: Some(2 * NS_PER_SECOND),
            to_ns: Some(5 * NS_PER_SECOND),
        };
        let due = all(&mut schedule(requests, 1.0, window));
        // Seconds 2, 3, 4; due from the window's start.
        assert_eq!(
            due,
            vec![
                (0, 2 * 4096),
                (NS_PER_SECOND, 3 * 4096),
                (2 * NS_PER_SECOND, 4 * 4096)
            ]
        );
    }

    #[test]
    fn empty_and_backwards_requests_follow_the_simulators_rules() {
        let requests = vec![
            request(0, 0, 0, 4096),
            request(5, 0, 4096, 0),
            request(100, 0, 8192, 4096),
            request(40, 0, 12288, 4096),
            request(200, 0, 16384, 4096),
        ];
        let mut schedule = schedule(requests, 1.0, Window::default());
        let due = all(&mut schedule);
        assert_eq!(due, vec![(0, 0), (100, 8192), (100, 12288), (200, 16384)]);
        assert_eq!(schedule.empty_requests(), 1);
        assert_eq!(schedule.reordered_requests(), 1);
    }

    #[test]
    fn a_second_volume_is_refused_by_name() {
        let requests = vec![request(0, 0, 0, 4096), request(1, 1, 0, 4096)];
        let mut schedule = schedule(requests, 1.0, Window::default());
        assert!(schedule.next_due().unwrap().is_some());
        let error = schedule.next_due().unwrap_err().to_string();
        assert!(
            error.contains("more than one volume") && error.contains("--volume"),
            "{error}"
        );
    }

    #[test]
    fn the_scan_finds_the_end_the_length_and_requests_past_the_export() {
        let requests = vec![
            request(0, 0, 0, 4096),
            request(1_000, 0, 1 << 20, 8192),
            request(3_000, 0, 4096, 4096),
        ];
        let found = scan(
            &mut schedule(requests.clone(), 1.0, Window::default()),
            1 << 20,
        )
        .unwrap();
        assert_eq!(found.requests, 3);
        assert_eq!(found.end_bytes, (1 << 20) + 8192);
        assert_eq!(found.last_due_ns, 3_000);
        assert!(found.timed);
        assert_eq!(found.beyond, 1);
        assert_eq!(found.first_beyond, Some((1, 1 << 20, 8192)));

        let untimed = vec![request(7, 0, 0, 4096), request(7, 0, 4096, 4096)];
        let found = scan(&mut schedule(untimed, 1.0, Window::default()), u64::MAX).unwrap();
        assert!(!found.timed);
        assert_eq!(found.beyond, 0);

        let long = vec![request(0, 0, 0, MAX_REQUEST_BYTES + 512)];
        let error = scan(&mut schedule(long, 1.0, Window::default()), u64::MAX)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("request 0 of the window") && error.contains("longer than"),
            "{error}"
        );
    }

    #[test]
    fn the_default_period_gives_at_most_60_points() {
        assert_eq!(fitting_period_ns(0), 100_000_000);
        assert_eq!(fitting_period_ns(6 * NS_PER_SECOND), 100_000_000);
        assert_eq!(fitting_period_ns(2 * NS_PER_SECOND * 60), 2 * NS_PER_SECOND);
        assert_eq!(fitting_period_ns(100 * NS_PER_SECOND), 2 * NS_PER_SECOND);
        assert_eq!(fitting_period_ns(601 * NS_PER_SECOND), 15 * NS_PER_SECOND);
        assert_eq!(
            fitting_period_ns(24 * 3600 * NS_PER_SECOND),
            60 * NS_PER_SECOND
        );
    }
}
