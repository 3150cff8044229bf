//! Which requests of a trace a replay takes, and when each is due: the rules
//! `tierd sim`'s open loop and `tierd replay` (`tierd-load`) share, written
//! once so both replay the same requests at the same times.
//!
//! - one volume: a request of a second one is refused (choose with
//!   `--volume`);
//! - the window: `from_ns`/`to_ns` of trace time after the first request;
//! - zero-length requests are skipped (counted in `empty_requests`);
//! - request i is due `(t_i − t_0) / speed` after the start, `t_0` being the
//!   window's start; a timestamp that goes backwards is due at the previous
//!   due time (counted in `reordered_requests`).
//!
//! The cursor reads through the caller's [`TraceReader`] and reads no clock.

use tierd_trace::{Request, TraceReader, VolumeId};

use crate::config::Window;
use crate::error::SimError;

/// Where a replay is in its trace (see the module rules).
#[derive(Clone, Debug, Default)]
pub struct Cursor {
    window: Window,
    volume: Option<VolumeId>,
    origin_ns: Option<u64>,
    last_due_ns: u64,
    done: bool,
    /// Requests read from the trace (inside the window or not).
    pub requests_read: u64,
    /// Requests of zero length, skipped.
    pub empty_requests: u64,
    /// Requests whose timestamp went backwards, due at the previous due time.
    pub reordered_requests: u64,
}

impl Cursor {
    pub fn new(window: Window) -> Cursor {
        Cursor {
            window,
            ..Cursor::default()
        }
    }

    /// No request is left: the window or the trace ended.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The next request in the window, `None` at its end (or the trace's).
    /// Errors: the trace's own, or [`SimError::SeveralVolumes`].
    pub fn next(&mut self, reader: &mut dyn TraceReader) -> Result<Option<Request>, SimError> {
        while !self.done {
            let Some(request) = reader.next_request()? else {
                self.done = true;
                break;
            };
            self.requests_read += 1;
            match self.volume {
                None => self.volume = Some(request.volume),
                Some(volume) if volume != request.volume => {
                    let names = reader.volumes();
                    let name = |id: VolumeId| {
                        names
                            .name(id)
                            .map_or_else(|| id.to_string(), str::to_string)
                    };
                    return Err(SimError::SeveralVolumes {
                        first: name(volume),
                        other: name(request.volume),
                    });
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
            return Ok(Some(request));
        }
        Ok(None)
    }

    /// When `request` (the last one [`Cursor::next`] gave) is due, in ns
    /// after the replay's start, replayed `speed` times faster than
    /// recorded; never before the previous request's due time.
    pub fn due_ns(&mut self, request: &Request, speed: f64) -> u64 {
        let start = self.origin_ns.unwrap_or(0) + self.window.from_ns.unwrap_or(0);
        let since = request.time_ns.saturating_sub(start);
        let mut due_ns = if speed == 1.0 {
            since
        } else {
            (since as f64 / speed) as u64
        };
        if due_ns < self.last_due_ns {
            self.reordered_requests += 1;
            due_ns = self.last_due_ns;
        }
        self.last_due_ns = due_ns;
        due_ns
    }
}
