//! A reader that serves a trace as the simulator replays it: only the
//! requests inside the run's window, with timestamps in replay (virtual) time.
//!
//! The report's heat map is computed by a second pass over the trace through
//! this reader, so its x axis (time) lines up with the per-period plots: the
//! window is applied exactly as the engine applies it (origin = the first
//! request; requests before `from` skipped; the first at or after `to` ends
//! the trace; zero-length requests skipped), and each timestamp becomes
//! `(t − origin − from) / speed`. Closed loop ignores timestamps, so there the
//! times stay in trace time (from the window start).

use std::path::Path;

use tierd_trace::{Format, Request, TraceError, TraceReader, VolumeTable};

use crate::config::{Replay, Window};

/// Wraps a reader; see the module documentation.
pub struct ReplayTimeReader {
    inner: Box<dyn TraceReader>,
    window: Window,
    speed: f64,
    origin_ns: Option<u64>,
    finished: bool,
}

impl ReplayTimeReader {
    /// Serves `inner`'s requests inside `window`, timed as `replay` replays them.
    pub fn new(inner: Box<dyn TraceReader>, window: Window, replay: Replay) -> ReplayTimeReader {
        let speed = match replay {
            Replay::OpenLoop { speed } if speed.is_finite() && speed > 0.0 => speed,
            _ => 1.0,
        };
        ReplayTimeReader {
            inner,
            window,
            speed,
            origin_ns: None,
            finished: false,
        }
    }
}

impl TraceReader for ReplayTimeReader {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        while !self.finished {
            let Some(mut request) = self.inner.next_request()? else {
                self.finished = true;
                break;
            };
            let origin = *self.origin_ns.get_or_insert(request.time_ns);
            let since_origin = request.time_ns.saturating_sub(origin);
            let from = self.window.from_ns.unwrap_or(0);
            if since_origin < from {
                continue;
            }
            if self.window.to_ns.is_some_and(|to| since_origin >= to) {
                self.finished = true;
                break;
            }
            if request.length_bytes == 0 {
                continue;
            }
            let since_start = since_origin - from;
            request.time_ns = if self.speed == 1.0 {
                since_start
            } else {
                (since_start as f64 / self.speed) as u64
            };
            return Ok(Some(request));
        }
        Ok(None)
    }

    fn format(&self) -> Format {
        self.inner.format()
    }

    fn volumes(&self) -> &VolumeTable {
        self.inner.volumes()
    }

    fn skipped_lines(&self) -> u64 {
        self.inner.skipped_lines()
    }

    fn ignored_lines(&self) -> u64 {
        self.inner.ignored_lines()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierd_trace::{IteratorReader, Op};

    fn request(time_s: u64, length_bytes: u64) -> Request {
        Request {
            time_ns: 1_000_000_000_000 + time_s * 1_000_000_000,
            volume: 0,
            op: Op::Read,
            offset_bytes: 0,
            length_bytes,
            response_ns: None,
        }
    }

    #[test]
    fn window_and_speed_as_the_engine_applies_them() {
        let requests = vec![
            request(0, 4096),
            request(60, 4096),
            request(120, 0),
            request(180, 4096),
            request(300, 4096),
            request(400, 4096),
        ];
        let inner = Box::new(IteratorReader::new(
            requests.into_iter(),
            &["0"],
            Format::Tierd,
            "test",
        ));
        let mut reader = ReplayTimeReader::new(
            inner,
            Window {
                from_ns: Some(60_000_000_000),
                to_ns: Some(300_000_000_000),
            },
            Replay::OpenLoop { speed: 4.0 },
        );
        let mut times_s = Vec::new();
        while let Some(request) = reader.next_request().unwrap() {
            times_s.push(request.time_ns as f64 / 1e9);
        }
        // 60 s and 180 s into the trace, 0 s and 120 s into the window, /4;
        // the empty request is skipped and 300 s ends the window.
        assert_eq!(times_s, [0.0, 30.0]);
    }
}
