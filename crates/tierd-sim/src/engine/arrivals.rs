//! Arrivals: the next request from the trace, open-loop or closed-loop.

use super::*;

impl<'run> Engine<'run> {
    // ----- arrivals --------------------------------------------------------

    /// Next request inside the window, or `None` at the end.
    pub(super) fn read_next(&mut self) -> Result<Option<Request>, SimError> {
        self.cursor.next(self.reader)
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
        // Due times never go backwards (the issue time is also never before
        // "now": see the main loop).
        let arrival = self.cursor.due_ns(&request, speed);
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
