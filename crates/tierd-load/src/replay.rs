//! A replay from start to end, in the stages a caller shows the user:
//! [`Plan::new`] checks the settings and reads the whole trace window once
//! (a bad record stops it before any IO), [`Plan::connect`] opens the
//! connections and refuses requests past the export, [`Plan::run`] replays
//! and builds the report.

use tierd_common::clock::Clock;
use tierd_common::units::Bytes;
use tierd_nbd::{parse_nbd_uri, NbdUri};
use tierd_sim::Window;

use crate::driver::{drive, DriveSettings};
use crate::prefill::{prefill, read_ranges, Prefilled};
use crate::progress::Progress;
use crate::report::{self, LiveReport, ReportInputs};
use crate::schedule::{fitting_period_ns, scan, Scan, Schedule, TraceSource};
use crate::target::{connect, Connected, MAX_CONNECTIONS};
use crate::LoadError;

/// Default of `max_inflight`.
pub const DEFAULT_MAX_INFLIGHT: u32 = 256;

/// What to replay, where, and how.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    pub trace: TraceSource,
    /// The export's NBD URI (`nbd+unix:///NAME?socket=PATH`, `nbd://HOST/NAME`,
    /// their TLS forms).
    pub target: String,
    /// Request i is due `(t_i − t_0) / speed` after the start (> 0).
    pub speed: f64,
    /// Trace time after the first request to replay.
    pub window: Window,
    /// Most requests outstanding over all connections (≥ 1).
    pub max_inflight: u32,
    /// NBD connections, requests going round robin (1 to 64).
    pub connections: u32,
    /// Period of the per-period series; `None`: [`fitting_period_ns`] of
    /// the replay's length.
    pub period_ns: Option<u64>,
    /// The run's name in the report.
    pub label: String,
    /// Wrap requests that end past the export onto it instead of refusing.
    pub wrap: bool,
}

impl ReplayOptions {
    /// Options with the defaults: x1, the whole trace, 256 in flight, one
    /// connection, a fitted period, label `live`, no wrapping.
    pub fn new(trace: TraceSource, target: impl Into<String>) -> ReplayOptions {
        ReplayOptions {
            trace,
            target: target.into(),
            speed: 1.0,
            window: Window::default(),
            max_inflight: DEFAULT_MAX_INFLIGHT,
            connections: 1,
            period_ns: None,
            label: "live".to_string(),
            wrap: false,
        }
    }

    /// Checks every setting; the error names it.
    pub fn validate(&self) -> Result<NbdUri, LoadError> {
        if !(self.speed.is_finite() && self.speed > 0.0) {
            return Err(LoadError::Setting(format!(
                "speed {} is not a factor > 0",
                self.speed
            )));
        }
        if self.max_inflight == 0 {
            return Err(LoadError::Setting("max_inflight must be at least 1".into()));
        }
        if !(1..=MAX_CONNECTIONS).contains(&self.connections) {
            return Err(LoadError::Setting(format!(
                "connections {} is not between 1 and {MAX_CONNECTIONS}",
                self.connections
            )));
        }
        if self.period_ns == Some(0) {
            return Err(LoadError::Setting("period must be longer than zero".into()));
        }
        if let (Some(from), Some(to)) = (self.window.from_ns, self.window.to_ns) {
            if to <= from {
                return Err(LoadError::Setting(
                    "window: the end must be later than the start".into(),
                ));
            }
        }
        parse_nbd_uri(&self.target).map_err(LoadError::Uri)
    }

    fn schedule(&self) -> Result<Schedule, LoadError> {
        Ok(Schedule::new(self.trace.open()?, self.speed, self.window))
    }
}

/// A checked replay whose trace window was read once.
#[derive(Debug)]
pub struct Plan {
    pub options: ReplayOptions,
    uri: NbdUri,
    /// What the pass over the window found.
    pub scan: Scan,
    /// The period of the series (given or fitted).
    pub period_ns: u64,
}

/// A finished replay.
#[derive(Debug)]
pub struct Outcome {
    pub report: LiveReport,
    /// Why the replay counts as failed (stopped early, a connection broke,
    /// requests failed on the server); empty when it succeeded.
    pub failures: Vec<String>,
    /// Start to the end of the last connection, on the clock.
    pub wall_ns: u64,
}

impl Plan {
    /// Checks the options and reads the whole window of the trace (a bad
    /// record stops here, naming file and line). Refuses an empty window.
    pub fn new(options: ReplayOptions) -> Result<Plan, LoadError> {
        let uri = options.validate()?;
        let scan = scan(&mut options.schedule()?, u64::MAX)?;
        if scan.requests == 0 {
            return Err(LoadError::Refused(format!(
                "{}: no requests to replay",
                options.trace.name()
            )));
        }
        let period_ns = options
            .period_ns
            .unwrap_or_else(|| fitting_period_ns(scan.last_due_ns));
        Ok(Plan {
            options,
            uri,
            scan,
            period_ns,
        })
    }

    /// Every request has the same time (a trace without timestamps): the
    /// replay issues them all at once, at time 0.
    pub fn untimed(&self) -> bool {
        !self.scan.timed && self.scan.requests > 1
    }

    /// Opens the connections. Unless wrapping was asked for, refuses (before
    /// sending anything) when a request ends past the export, naming the
    /// first such request.
    pub fn connect(&self) -> Result<Connected, LoadError> {
        let connected = connect(&self.options.target, &self.uri, self.options.connections)?;
        let export_bytes = connected.export_bytes;
        if !self.options.wrap && self.scan.end_bytes > export_bytes {
            // A second pass names the first request that does not fit.
            let fit = scan(&mut self.options.schedule()?, export_bytes)?;
            let (index, offset, length) = fit.first_beyond.unwrap_or((0, 0, 0));
            return Err(LoadError::Refused(format!(
                "{}: {} of {} requests end past the {export_bytes}-byte export (the first: request {index} of the window, offset {offset}, length {length} bytes; the trace reaches {} bytes); give the export that size, or pass --wrap to wrap them onto it (offset modulo its size)",
                self.options.trace.name(),
                fit.beyond,
                fit.requests,
                fit.end_bytes
            )));
        }
        Ok(connected)
    }

    /// Writes every byte range the window reads (merged, in the write
    /// pattern) over `connected`'s first connection, then FLUSHes: a fresh
    /// export then holds data wherever the trace reads
    /// ([`crate::prefill`]). Call between [`Plan::connect`] and
    /// [`Plan::run`]; [`Plan::run`] starts its clock after it.
    pub fn prefill(
        &self,
        connected: &mut Connected,
        clock: &dyn Clock,
    ) -> Result<Prefilled, LoadError> {
        let ranges = read_ranges(&mut self.options.schedule()?, connected.export_bytes)?;
        let (Some(sender), Some(receiver)) = (
            connected.senders.first_mut(),
            connected.receivers.first_mut(),
        ) else {
            return Err(LoadError::Target(format!(
                "{}: prefill: no connection",
                self.options.target
            )));
        };
        prefill(&ranges, sender, receiver, clock)
    }

    /// A line saying what is about to be replayed where.
    pub fn summary(&self, connected: &Connected) -> String {
        format!(
            "{} requests of {} to {} ({}), x{}, at most {} in flight over {} connection(s)",
            self.scan.requests,
            self.options.trace.name(),
            self.options.target,
            Bytes(connected.export_bytes),
            self.options.speed,
            self.options.max_inflight,
            self.options.connections
        )
    }

    /// Replays the window over `connected` on `clock` and builds the report.
    /// A failure during the replay (a broken connection, server errors) is
    /// in [`Outcome::failures`], after the report of what was measured.
    pub fn run(
        &self,
        connected: Connected,
        clock: &dyn Clock,
        progress: &dyn Progress,
    ) -> Result<Outcome, LoadError> {
        let options = &self.options;
        let mut schedule = options.schedule()?;
        let export_bytes = connected.export_bytes;
        let volume = connected.volume.clone();
        let multi_conn = connected.multi_conn;
        let driven = drive(
            &mut schedule,
            connected,
            DriveSettings {
                max_inflight: options.max_inflight,
                period_ns: self.period_ns,
                last_due_ns: self.scan.last_due_ns,
            },
            clock,
            progress,
        );
        let trace_name = options.trace.name();
        let report = report::build(ReportInputs {
            trace_name: &trace_name,
            label: &options.label,
            target: &options.target,
            speed: options.speed,
            window: options.window,
            max_inflight: options.max_inflight,
            connections: options.connections,
            export_bytes,
            volume: volume.as_ref(),
            multi_conn,
            period_ns: self.period_ns,
            window_requests: self.scan.requests,
            empty_requests: schedule.empty_requests(),
            reordered_requests: schedule.reordered_requests(),
            issued: &driven.issued,
            completions: driven.completions,
        });
        let mut failures = Vec::new();
        if let Some(failure) = &driven.failure {
            failures.push(format!("the replay stopped early: {failure}"));
        }
        failures.extend(driven.receiver_errors);
        let run = &report.runs[0];
        if run.errors > 0 {
            failures.push(format!(
                "{} request(s) failed on the server: {}",
                run.errors,
                run.error_samples.join("; ")
            ));
        }
        Ok(Outcome {
            report,
            failures,
            wall_ns: driven.wall_ns,
        })
    }

    /// The HTML report of `report` (see [`report::write_html`]).
    pub fn write_html(
        &self,
        directory: &std::path::Path,
        report: &LiveReport,
    ) -> Result<std::path::PathBuf, LoadError> {
        report::write_html(
            directory,
            &self.options.trace,
            self.options.speed,
            self.options.window,
            self.period_ns,
            report,
        )
    }
}
