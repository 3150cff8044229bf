//! The NBD pipelining driver: one issuing thread puts the schedule's
//! requests on the wire at their due times (open loop, bounded only by the
//! in-flight limit), one receiving thread per connection reads the replies,
//! and a [`Matcher`] per connection turns each pair into the figures. This
//! is the only module that reads the clock, sleeps, or touches a socket; it
//! reads the clock it is given, so a test can drive it on virtual time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use tierd_common::clock::Clock;
use tierd_nbd::client::{ClientReceiver, ClientSender};
use tierd_nbd::ClientError;
use tierd_trace::Op;

use crate::collect::{Completions, Done, Issued, Matcher};
use crate::pacing::{sleep_before_ns, IssueStats, Pacer};
use crate::pattern::fill_pattern;
use crate::progress::{Progress, POLL_NS};
use crate::schedule::{Due, Schedule};
use crate::target::Connected;
use crate::wrap::place;

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
        let mut state = self.state.lock();
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
        let mut state = self.state.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        self.changed.notify_all();
    }

    /// Waits until nothing is outstanding (or the gate closed).
    fn wait_idle(&self) {
        let mut state = self.state.lock();
        while state.in_flight > 0 && !state.closed {
            self.changed.wait(&mut state);
        }
    }

    fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    fn is_closed(&self) -> bool {
        self.state.lock().closed
    }
}

/// One connection's shared state.
struct Connection {
    matcher: Mutex<Matcher>,
    /// Set before the issuer sends NBD_CMD_DISC: the server closing the
    /// socket is then the normal end.
    closing: AtomicBool,
}

/// What the driver needs beyond the schedule and the connections.
#[derive(Clone, Copy, Debug)]
pub struct DriveSettings {
    /// Most requests outstanding over all connections (≥ 1).
    pub max_inflight: u32,
    /// Period of the per-period series (> 0).
    pub period_ns: u64,
    /// The last request's due time (the progress's ETA).
    pub last_due_ns: u64,
}

/// What a replay measured.
#[derive(Debug)]
pub struct Driven {
    pub issued: IssueStats,
    /// Every connection's completions, merged.
    pub completions: Completions,
    /// Why issuing stopped early (a trace error, a failed send).
    pub failure: Option<String>,
    /// Connections whose receiver failed: `connection N: ERROR`.
    pub receiver_errors: Vec<String>,
    /// Start to the last receiver's end, on the clock.
    pub wall_ns: u64,
}

/// Replays `schedule` over `connected`'s connections (round robin), then
/// disconnects them. Requests that end past the export are [`place`]d on
/// it (the caller refuses them beforehand unless wrapping was asked for).
/// Ends when every issued request completed or a connection failed.
pub fn drive(
    schedule: &mut Schedule,
    connected: Connected,
    settings: DriveSettings,
    clock: &dyn Clock,
    progress: &dyn Progress,
) -> Driven {
    let Connected {
        mut senders,
        receivers,
        export_bytes,
        ..
    } = connected;
    let capacity = (settings.max_inflight as usize).min(1 << 16);
    let connections: Vec<Connection> = (0..senders.len())
        .map(|_| Connection {
            matcher: Mutex::new(Matcher::new(settings.period_ns, capacity)),
            closing: AtomicBool::new(false),
        })
        .collect();
    let gate = Gate::new(settings.max_inflight.max(1) as usize);
    let completed = AtomicU64::new(0);
    let finished = AtomicBool::new(false);
    let start_ns = clock.now_ns();
    let (issuing, receiver_errors) = std::thread::scope(|scope| {
        let handles: Vec<_> = receivers
            .into_iter()
            .zip(&connections)
            .map(|(receiver, connection)| {
                let (gate, completed) = (&gate, &completed);
                scope.spawn(move || {
                    receive_all(receiver, connection, gate, clock, start_ns, completed)
                })
            })
            .collect();
        if progress.is_shown() {
            let (completed, finished) = (&completed, &finished);
            scope.spawn(move || {
                while !finished.load(Ordering::SeqCst) {
                    let now_ns = clock.now_ns().saturating_sub(start_ns);
                    progress.update(
                        completed.load(Ordering::Relaxed),
                        settings.last_due_ns.saturating_sub(now_ns),
                    );
                    clock.sleep_ns(POLL_NS);
                }
            });
        }
        let issuing = issue_all(
            schedule,
            &mut senders,
            &connections,
            &gate,
            clock,
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
    let mut completions = Completions::new(settings.period_ns);
    for connection in connections {
        completions.merge(connection.matcher.into_inner().completions);
    }
    let (issued, failure) = issuing;
    Driven {
        issued,
        completions,
        failure,
        receiver_errors,
        wall_ns,
    }
}

/// The receiving thread of one connection. Ends at the server's close after
/// the disconnect, or at the first failure (which closes the gate so the
/// issuer stops). `completed` counts completions over every connection.
fn receive_all(
    mut receiver: ClientReceiver,
    connection: &Connection,
    gate: &Gate,
    clock: &dyn Clock,
    start_ns: u64,
    completed: &AtomicU64,
) -> Result<(), ClientError> {
    loop {
        match receiver.receive() {
            Ok(completion) => {
                let done = Done {
                    done_ns: clock.now_ns().saturating_sub(start_ns),
                    error: completion.error,
                    message: completion.error_message,
                };
                connection.matcher.lock().completed(completion.cookie, done);
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

/// The issuing thread: returns what it counted and why it stopped early.
fn issue_all(
    schedule: &mut Schedule,
    senders: &mut [ClientSender],
    connections: &[Connection],
    gate: &Gate,
    clock: &dyn Clock,
    start_ns: u64,
    export_bytes: u64,
) -> (IssueStats, Option<String>) {
    let mut pacer = Pacer::new();
    let mut failure = None;
    let mut buffer: Vec<u8> = Vec::new();
    let mut next_connection = 0usize;
    loop {
        let Due { due_ns, request } = match schedule.next_due() {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(error) => {
                failure = Some(error.to_string());
                break;
            }
        };
        let placed = place(request.offset_bytes, request.length_bytes, export_bytes);
        if request.op == Op::Write {
            buffer.resize(placed.length_bytes as usize, 0);
            fill_pattern(&mut buffer, placed.offset_bytes);
        }
        while !gate.is_closed() {
            match sleep_before_ns(due_ns, clock.now_ns().saturating_sub(start_ns)) {
                Some(sleep_ns) => clock.sleep_ns(sleep_ns),
                None => break,
            }
        }
        let Some(waited) = gate.acquire() else {
            break;
        };
        let issue_ns = clock.now_ns().saturating_sub(start_ns);
        if waited {
            pacer.slot_freed_at(issue_ns);
        }
        let index = next_connection;
        next_connection = (next_connection + 1) % senders.len();
        let sender = &mut senders[index];
        let submitted = match request.op {
            // place() keeps lengths at most 32 MiB (the scan refused longer).
            Op::Read => sender.submit_read(placed.offset_bytes, placed.length_bytes as u32),
            Op::Write => sender.submit_write(placed.offset_bytes, &buffer, false),
        };
        match submitted {
            Ok(cookie) => {
                connections[index].matcher.lock().issued(
                    cookie,
                    Issued {
                        due_ns,
                        issue_ns,
                        op: request.op,
                        length_bytes: placed.length_bytes,
                    },
                );
                pacer.issued(due_ns, issue_ns, placed.wrapped);
            }
            Err(error) => {
                gate.release();
                gate.close();
                failure = Some(format!("connection {index}: {error}"));
                break;
            }
        }
    }
    (pacer.stats, failure)
}
