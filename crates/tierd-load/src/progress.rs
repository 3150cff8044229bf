//! Progress of a running replay, for whoever shows it (the CLI draws a
//! line on a terminal). The driver polls its completion count every
//! [`POLL_NS`] on its own thread and hands it over; it never formats or
//! writes anything itself.

/// How often the driver reports while a replay runs.
pub const POLL_NS: u64 = 100_000_000;

/// Receives the replay's progress. Implementations must be cheap: `update`
/// runs every [`POLL_NS`] on a thread of its own.
pub trait Progress: Sync {
    /// Whether updates are wanted at all (false: the driver starts no
    /// polling thread).
    fn is_shown(&self) -> bool;

    /// `completed` requests so far; `eta_ns`: time until the last request
    /// is due (a replay's end is its schedule's, whatever the rate so far).
    fn update(&self, completed: u64, eta_ns: u64);

    /// The replay ended (every request completed or it stopped).
    fn finish(&self) {}
}

/// No progress shown.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn is_shown(&self) -> bool {
        false
    }

    fn update(&self, _completed: u64, _eta_ns: u64) {}
}
