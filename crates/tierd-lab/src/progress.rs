//! The progress line of the long-running commands (`tierd sim`, `tierd
//! replay`): on stderr, only when stderr is a terminal, redrawn in place
//! (`\r`) at most every [`REDRAW_EVERY_NS`] and cleared at the end, so
//! pipes and logs never see it. One line:
//!
//! ```text
//! tierd sim: 1.20 M of 4.80 M requests simulated (25%), 2.0 s, 0.60 M requests/s, ETA 6.0 s
//! ```
//!
//! Without a known total the count and the ETA are left out of it. Several
//! threads may report (the simulator's runs): [`ProgressLine`] is `Sync`.

use std::io::{IsTerminal, Write};

use parking_lot::Mutex;
use tierd_common::clock::{Clock, SystemClock};
use tierd_common::units::Duration;

/// Least time between two redraws.
pub const REDRAW_EVERY_NS: u64 = 250_000_000;

/// One command's progress line (see the module documentation).
pub struct ProgressLine {
    /// `tierd sim`, `tierd replay`: the line's prefix.
    command: &'static str,
    /// What is counted, past tense: `simulated`, `replayed`.
    verb: &'static str,
    /// A trailing text, e.g. `over 3 run(s)`.
    suffix: String,
    /// What is counted, plural: `requests`, `cells`.
    unit: &'static str,
    total: Option<u64>,
    enabled: bool,
    clock: SystemClock,
    state: Mutex<State>,
}

struct State {
    /// When the line was last drawn; `None` before the first draw.
    drawn_ns: Option<u64>,
    /// Width of the last line drawn (to blank it).
    width: usize,
}

impl ProgressLine {
    /// A line that draws only when stderr is a terminal. `total`: requests
    /// the command will have counted at the end, when known.
    pub fn new(command: &'static str, verb: &'static str, total: Option<u64>) -> ProgressLine {
        ProgressLine {
            command,
            verb,
            suffix: String::new(),
            unit: "requests",
            total,
            enabled: std::io::stderr().is_terminal(),
            clock: SystemClock::new(),
            state: Mutex::new(State {
                drawn_ns: None,
                width: 0,
            }),
        }
    }

    /// Whether the line is drawn (stderr is a terminal).
    pub fn is_shown(&self) -> bool {
        self.enabled
    }

    /// Never drawn when `show` is false (a caller that wants quiet).
    pub fn shown_only_if(mut self, show: bool) -> ProgressLine {
        self.enabled &= show;
        self
    }

    /// What is counted, plural (default `requests`): `cells` for a sweep.
    pub fn with_unit(mut self, unit: &'static str) -> ProgressLine {
        self.unit = unit;
        self
    }

    /// Text after the figures, e.g. `over 3 run(s)`.
    pub fn with_suffix(mut self, suffix: String) -> ProgressLine {
        self.suffix = suffix;
        self
    }

    /// `done` requests so far; the ETA from the rate so far.
    pub fn update(&self, done: u64) {
        self.update_with_eta(done, None);
    }

    /// `done` requests so far; `eta_ns` when the caller knows better than
    /// the rate (a replay's schedule), else the ETA comes from the rate.
    pub fn update_with_eta(&self, done: u64, eta_ns: Option<u64>) {
        if !self.enabled {
            return;
        }
        let now_ns = self.clock.now_ns();
        let mut state = self.state.lock();
        if state
            .drawn_ns
            .is_some_and(|drawn_ns| now_ns.saturating_sub(drawn_ns) < REDRAW_EVERY_NS)
        {
            return;
        }
        let mut line = render_unit(
            self.command,
            self.verb,
            self.unit,
            done,
            self.total,
            now_ns,
            eta_ns,
        );
        if !self.suffix.is_empty() {
            line.push(' ');
            line.push_str(&self.suffix);
        }
        let blank = state.width.saturating_sub(line.chars().count());
        let mut stderr = std::io::stderr().lock();
        // A terminal that went away is no reason to stop the command.
        let _ = write!(stderr, "\r{line}{:blank$}", "");
        let _ = stderr.flush();
        state.drawn_ns = Some(now_ns);
        state.width = line.chars().count();
    }

    /// Blanks the line (call before printing anything else).
    pub fn finish(&self) {
        let state = self.state.lock();
        if self.enabled && state.drawn_ns.is_some() {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r{:width$}\r", "", width = state.width);
            let _ = stderr.flush();
        }
    }
}

/// A time as the line shows it: seconds below two minutes, else minutes
/// or hours.
fn time(ns: u64) -> String {
    if ns < 120_000_000_000 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else {
        Duration(ns).to_string()
    }
}

/// A count as people read it: exact below 100,000, else in millions.
fn count(value: f64) -> String {
    if value < 100_000.0 {
        format!("{value:.0}")
    } else {
        format!("{:.2} M", value / 1e6)
    }
}

/// The line's text (no `\r`): `COMMAND: DONE [of TOTAL] requests VERB
/// [(P%)], ELAPSED, RATE requests/s[, ETA T]`.
pub fn render(
    command: &str,
    verb: &str,
    done: u64,
    total: Option<u64>,
    elapsed_ns: u64,
    eta_ns: Option<u64>,
) -> String {
    render_unit(command, verb, "requests", done, total, elapsed_ns, eta_ns)
}

/// [`render`] counting `unit` (plural) instead of requests.
pub fn render_unit(
    command: &str,
    verb: &str,
    unit: &str,
    done: u64,
    total: Option<u64>,
    elapsed_ns: u64,
    eta_ns: Option<u64>,
) -> String {
    let seconds = elapsed_ns as f64 / 1e9;
    let rate = if seconds > 0.0 {
        done as f64 / seconds
    } else {
        0.0
    };
    let mut line = format!("{command}: {}", count(done as f64));
    if let Some(total) = total {
        line.push_str(&format!(" of {}", count(total as f64)));
    }
    line.push_str(&format!(" {unit} {verb}"));
    if let Some(total) = total.filter(|total| *total > 0) {
        line.push_str(&format!(
            " ({:.0}%)",
            (done.min(total) as f64 * 100.0 / total as f64).floor()
        ));
    }
    line.push_str(&format!(", {}, {} {unit}/s", time(elapsed_ns), count(rate)));
    let eta_ns = eta_ns.or_else(|| {
        let left = total?.saturating_sub(done);
        (rate > 0.0).then(|| (left as f64 / rate * 1e9) as u64)
    });
    if let Some(eta_ns) = eta_ns {
        line.push_str(&format!(", ETA {}", time(eta_ns)));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_has_count_total_elapsed_rate_and_eta() {
        let line = render(
            "tierd sim",
            "simulated",
            1_200_000,
            Some(4_800_000),
            2_000_000_000,
            None,
        );
        assert_eq!(
            line,
            "tierd sim: 1.20 M of 4.80 M requests simulated (25%), 2.0 s, 0.60 M requests/s, ETA 6.0 s"
        );
        let line = render(
            "tierd replay",
            "replayed",
            30,
            Some(60),
            500_000_000,
            Some(0),
        );
        assert_eq!(
            line,
            "tierd replay: 30 of 60 requests replayed (50%), 0.5 s, 60 requests/s, ETA 0.0 s"
        );
        // No total: no share, no ETA from the rate.
        let line = render("tierd sim", "simulated", 10, None, 0, None);
        assert_eq!(
            line,
            "tierd sim: 10 requests simulated, 0.0 s, 0 requests/s"
        );
    }
}
