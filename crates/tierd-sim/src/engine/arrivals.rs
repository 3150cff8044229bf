//! Arrivals: the next request from the trace, open-loop or closed-loop.

use super::*;

impl<'run> Engine<'run> {
    // ----- arrivals --------------------------------------------------------

    /// Next request inside the window, or `None` at the end.
    pub(super) fn read_next(&mut self) -> Result<Option<Request>, SimError> {
        while !self.exhausted {
            let Some(request) = self.reader.next_request()? else {
                self.exhausted = true;
                break;
            };
            self.requests_read += 1;
            match self.volume {
                None => self.volume = Some(request.volume),
                Some(volume) if volume != request.volume => {
                    let names = self.reader.volumes();
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
            if let Some(from) = self.config.window.from_ns {
                if since_origin < from {
                    continue;
                }
            }
            if let Some(to) = self.config.window.to_ns {
                if since_origin >= to {
                    self.exhausted = true;
                    break;
                }
            }
            if request.length_bytes == 0 {
                self.empty_requests += 1;
                continue;
            }
            return Ok(Some(request));
        }
        Ok(None)
    }

    /// Open loop: the arrival time of the next request (reading it if needed).
    pub(super) fn peek_arrival(&mut self) -> Result<Option<u64>, SimError> {
        if let Some((arrival, _)) = self.pending {
            return Ok(Some(arrival));
        }
        let Some(request) = self.read_next()? else {
            return Ok(None);
        };
        let Replay::OpenLoop { speed } = self.config.replay else {
            return Ok(None);
        };
        let base = self.origin_ns.unwrap_or(0) + self.config.window.from_ns.unwrap_or(0);
        let since = request.time_ns.saturating_sub(base);
        let mut arrival = if speed == 1.0 {
            since
        } else {
            (since as f64 / speed) as u64
        };
        // Due times never go backwards (the issue time is also never before
        // "now": see the main loop).
        if arrival < self.last_due_ns {
            self.reordered_requests += 1;
            arrival = self.last_due_ns;
        }
        self.last_due_ns = arrival;
        self.pending = Some((arrival, request));
        Ok(Some(arrival))
    }

    /// Closed loop: issues the next request now. `false` at the end of the trace.
    pub(super) fn arrive_next(&mut self) -> Result<bool, SimError> {
        match self.read_next()? {
            Some(request) => {
                self.dispatch(request)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
