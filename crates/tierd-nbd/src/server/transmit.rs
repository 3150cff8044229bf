//! The transmission phase, after nbdkit's model: a connection has up to
//! `workers_per_connection` threads, and each of them in turn takes the
//! read side, reads one whole request (header and payload), lets go of the
//! read side, executes the request and writes its reply under the write
//! side. Nothing is queued and no request passes from one thread to
//! another.
//!
//! Threads are started as they are needed: the connection's own thread
//! serves alone until a request is read while every other thread is busy;
//! an extra thread that has waited [`IDLE_THREAD_EXIT`] for the read side
//! ends. Whether a thread lets go of the read side before executing depends
//! on what the export costs: while this connection's requests execute in
//! under [`HANDOFF_EXECUTE_NS`] on average and no further whole request is
//! buffered, a thread keeps the read side through the request and its
//! reply (no other thread is woken: a QD1 client costs one thread and no
//! lock hand-over, as an inline server does), and replies wait in a shared
//! buffer while further whole requests are buffered (one `send` for a
//! pipelined batch, at most `reply_batch_bytes`). Slower requests are
//! handed over at once, so they overlap, and each reply is written as soon
//! as it is ready (replies of threads that queue for the write side go out
//! together).

use parking_lot::{Mutex, MutexGuard};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::Scope;
use std::time::Duration;

use super::budget::{charge_bytes, Charge};
use super::connection::{protocol, ConnectionEnd};
use super::execute::handle_request;
use super::negotiate::Session;
use super::reply::Replies;
use super::{command_slot, ConnectionLedger, LogLevel, Shared, MAX_DISCARDED_PAYLOAD_BYTES};
use crate::io::{Fill, InputBuffer, Stream};
use crate::proto::*;
use tierd_common::aligned::AlignedBuf;

/// Reply and payload buffers larger than this are released after use, so
/// an idle connection keeps little memory whatever it did before.
const RETAINED_BUFFER_BYTES: usize = 1024 * 1024;
/// A connection whose requests take at least this long in the export on
/// average (a moving mean over about 8 requests) hands each request's read
/// side over before executing it, so requests overlap. Below it, waking
/// another thread costs more than the request: memory and page-cache
/// requests take 1-5 µs, an O_DIRECT read on an SSD 50-100 µs, an emulated
/// disk milliseconds.
pub(super) const HANDOFF_EXECUTE_NS: u64 = 20_000;
/// An extra thread that waited this long for a request ends.
pub(super) const IDLE_THREAD_EXIT: Duration = Duration::from_secs(2);

/// One connection in transmission, shared by its threads.
struct Transmission<'a> {
    shared: &'a Shared,
    session: &'a Session,
    ledger: &'a ConnectionLedger,
    stopping: &'a AtomicBool,
    id: u64,
    reader: Mutex<Reader<'a>>,
    writer: Mutex<Writer<'a>>,
    /// Threads waiting for `writer`: a reply may wait for theirs.
    writers_waiting: AtomicUsize,
    /// Threads waiting for `reader`.
    readers_waiting: AtomicUsize,
    /// Threads serving this connection, its own included.
    threads: AtomicUsize,
    /// No further requests are read: DISC, end of stream, an error, or the
    /// server stopping. Threads finish what they read, then end.
    closing: AtomicBool,
    /// Replies can no longer be delivered: requests read are dropped
    /// unexecuted.
    cancelled: AtomicBool,
    /// Why the connection ended, when it ended badly (the first reason).
    end: Mutex<Option<ConnectionEnd>>,
    /// Moving mean of the export's time per request, in ns.
    execute_ns: AtomicU64,
    /// An extra thread could not be started (logged once).
    spawn_failed: AtomicBool,
}

/// The read side: the input buffer and the socket it fills from.
struct Reader<'a> {
    input: &'a mut InputBuffer,
    stream: &'a mut Stream,
}

/// The write side: the socket, and the replies waiting to be written with
/// the charges they hold (READ data stays in the buffers it was read into;
/// one vectored write sends them all).
struct Writer<'a> {
    stream: Stream,
    pending: Replies,
    held: Vec<Charge<'a>>,
}

impl Writer<'_> {
    /// Writes every pending reply and gives their charges back.
    fn flush(&mut self) -> std::io::Result<()> {
        let result = self.pending.write_to(&mut self.stream);
        self.held.clear();
        result
    }
}

/// A request read and charged, ready to execute.
struct Request<'a> {
    header: RequestHeader,
    /// The write payload's length in the thread's payload buffer.
    payload_bytes: usize,
    charge: Charge<'a>,
}

/// Serves requests until the client disconnects, the connection fails or
/// the server stops; returns why it ended. Every thread it starts has ended
/// when it returns.
pub(super) fn transmit(
    shared: &Shared,
    session: &Session,
    ledger: &ConnectionLedger,
    input: &mut InputBuffer,
    stream: &mut Stream,
    stopping: &AtomicBool,
    id: u64,
) -> Result<(), ConnectionEnd> {
    let writer = stream.try_clone()?;
    let transmission = Transmission {
        shared,
        session,
        ledger,
        stopping,
        id,
        reader: Mutex::new(Reader { input, stream }),
        writer: Mutex::new(Writer {
            stream: writer,
            pending: Replies::with_capacity(64 * 1024),
            held: Vec::new(),
        }),
        writers_waiting: AtomicUsize::new(0),
        readers_waiting: AtomicUsize::new(0),
        threads: AtomicUsize::new(1),
        closing: AtomicBool::new(false),
        cancelled: AtomicBool::new(false),
        end: Mutex::new(None),
        execute_ns: AtomicU64::new(0),
        spawn_failed: AtomicBool::new(false),
    };
    std::thread::scope(|scope| serve(&transmission, scope, true));
    match transmission.end.into_inner() {
        Some(end) => Err(end),
        None => Ok(()),
    }
}

/// One thread of a connection: read a request, execute it, reply; again.
/// `own`: the connection's own thread, which ends only with the connection.
fn serve<'scope, 'env, 'a: 'scope>(
    transmission: &'scope Transmission<'a>,
    scope: &'scope Scope<'scope, 'env>,
    own: bool,
) {
    let shared = transmission.shared;
    let clock = &*shared.config.clock;
    let mut out = Replies::with_capacity(4096);
    let mut payload = AlignedBuf::new();
    // The read side, when the previous request kept it.
    let mut kept: Option<MutexGuard<'scope, Reader<'a>>> = None;
    loop {
        let mut reader = match kept.take() {
            Some(reader) => reader,
            None => match transmission.wait_for_reader(own) {
                Some(reader) => reader,
                None => break,
            },
        };
        let Some(request) = transmission.read_request(&mut reader, &mut payload) else {
            break;
        };
        let mut reader = Some(reader);
        if transmission.is_slow() {
            reader = None;
            transmission.start_thread_if_needed(scope);
        }
        if transmission.cancelled.load(Ordering::SeqCst) {
            transmission
                .ledger
                .counters
                .requests_cancelled
                .fetch_add(1, Ordering::Relaxed);
            kept = reader;
            continue;
        }
        let started_ns = clock.now_ns();
        handle_request(
            shared,
            &transmission.ledger.counters,
            transmission.session,
            &request.header,
            &payload[..request.payload_bytes],
            &mut out,
        );
        transmission.record_execute(clock.now_ns().saturating_sub(started_ns));
        // A request that turned out slow lets go of the read side before
        // its reply, which may block on a client that reads slowly.
        let slow = transmission.is_slow();
        if slow && reader.is_some() {
            reader = None;
            transmission.start_thread_if_needed(scope);
        }
        kept = transmission.reply(&mut out, request.charge, reader, slow);
        if payload.capacity() > RETAINED_BUFFER_BYTES {
            payload = AlignedBuf::new();
        }
    }
    drop(kept);
    transmission.flush_pending();
    transmission.threads.fetch_sub(1, Ordering::SeqCst);
}

impl<'a> Transmission<'a> {
    /// Waits for the read side. An extra thread gives up after
    /// [`IDLE_THREAD_EXIT`] (`None`: it ends).
    fn wait_for_reader(&self, own: bool) -> Option<MutexGuard<'_, Reader<'a>>> {
        self.readers_waiting.fetch_add(1, Ordering::SeqCst);
        let reader = if own {
            Some(self.reader.lock())
        } else {
            self.reader.try_lock_for(IDLE_THREAD_EXIT)
        };
        self.readers_waiting.fetch_sub(1, Ordering::SeqCst);
        reader
    }

    fn is_slow(&self) -> bool {
        self.execute_ns.load(Ordering::Relaxed) >= HANDOFF_EXECUTE_NS
    }

    fn record_execute(&self, elapsed_ns: u64) {
        // Threads may race here; a lost sample does not matter.
        let mean_ns = self.execute_ns.load(Ordering::Relaxed);
        self.execute_ns
            .store(mean_ns - mean_ns / 8 + elapsed_ns / 8, Ordering::Relaxed);
    }

    /// Starts one more thread when none waits for the read side and fewer
    /// than `workers_per_connection` run. A failure is logged once; the
    /// connection goes on with the threads it has.
    fn start_thread_if_needed<'scope, 'env>(&'scope self, scope: &'scope Scope<'scope, 'env>)
    where
        'a: 'scope,
    {
        let limit = self.shared.config.workers_per_connection.max(1);
        if self.readers_waiting.load(Ordering::SeqCst) > 0 || self.closing.load(Ordering::SeqCst) {
            return;
        }
        let running = self.threads.load(Ordering::SeqCst);
        if running >= limit
            || self
                .threads
                .compare_exchange(running, running + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return;
        }
        let mut builder =
            std::thread::Builder::new().name(format!("nbd-conn-{}-{}", self.id, running));
        if let Some(stack_bytes) = self.shared.config.worker_stack_bytes {
            builder = builder.stack_size(stack_bytes);
        }
        // Extra threads log inside their connection's span.
        let span = tracing::Span::current();
        let spawned = builder.spawn_scoped(scope, move || {
            let _span = span.entered();
            serve(self, scope, false);
        });
        if let Err(error) = spawned {
            self.threads.fetch_sub(1, Ordering::SeqCst);
            if !self.spawn_failed.swap(true, Ordering::SeqCst) {
                self.shared.log(
                    LogLevel::Error,
                    &format!(
                        "connection {}: cannot start request thread {} of {limit} (workers_per_connection): {error}; going on with {running}",
                        self.id,
                        running + 1
                    ),
                );
            }
        }
    }

    /// Reads the next request under the read side and charges it; `None`
    /// when no further request will be read (the connection is closing).
    fn read_request(
        &self,
        reader: &mut Reader<'_>,
        payload: &mut AlignedBuf,
    ) -> Option<Request<'a>> {
        if self.cancelled.load(Ordering::SeqCst) {
            self.drop_buffered_requests(reader);
            self.close(None);
            return None;
        }
        if self.closing.load(Ordering::SeqCst) {
            return None;
        }
        let header = match next_header(reader.input, reader.stream) {
            Ok(Some(header)) => header,
            Ok(None) => {
                // A client that closed its socket entirely reads no
                // replies: drop what the other threads have not executed
                // yet. (When only its sending side is closed, they are
                // answered.)
                if peer_gone(reader.stream) {
                    self.cancelled.store(true, Ordering::SeqCst);
                }
                self.close(None);
                return None;
            }
            Err(end) => {
                self.close(Some(end));
                return None;
            }
        };
        let shared = self.shared;
        let bytes = charge_bytes(shared, &header);
        let budget = &self.ledger.budget;
        let charge = match budget.try_charge(&shared.budget, bytes) {
            Some(charge) => charge,
            None => {
                // Replies waiting in the buffer hold bytes: write them
                // first, so a waiting connection holds only what its
                // executing requests and blocked writes hold.
                self.flush_pending();
                let give_up = || {
                    self.stopping.load(Ordering::SeqCst) || self.cancelled.load(Ordering::SeqCst)
                };
                match budget.charge(&shared.budget, bytes, &give_up, &|| {
                    shared.reclaim_spare_credit()
                }) {
                    Some(charge) => charge,
                    None => {
                        // Stopping, or the client is gone: the request is
                        // dropped with the connection.
                        self.close(None);
                        return None;
                    }
                }
            }
        };
        let mut payload_bytes = 0;
        if header.has_payload() {
            let result = if header.length_bytes > self.session.max_request_bytes {
                discard_oversized_payload(
                    reader.input,
                    reader.stream,
                    &header,
                    self.session.max_request_bytes,
                )
            } else {
                payload_bytes = header.length_bytes as usize;
                payload.resize(payload_bytes);
                reader
                    .input
                    .read_exact(reader.stream, &mut payload[..payload_bytes])
                    .map_err(ConnectionEnd::from)
            };
            if let Err(end) = result {
                self.close(Some(end));
                return None;
            }
        }
        if header.command == NBD_CMD_DISC {
            self.ledger.counters.requests[command_slot(NBD_CMD_DISC)]
                .fetch_add(1, Ordering::Relaxed);
            // The spec: requests in flight are still answered; the threads
            // executing them reply, then end.
            self.close(None);
            return None;
        }
        Some(Request {
            header,
            payload_bytes,
            charge,
        })
    }

    /// Counts the whole requests already buffered as cancelled (their
    /// client is gone), without reading the socket.
    fn drop_buffered_requests(&self, reader: &mut Reader<'_>) {
        while reader.input.has_complete_request() {
            let buffered = reader.input.buffered();
            let mut bytes = [0u8; REQUEST_HEADER_BYTES];
            bytes.copy_from_slice(&buffered[..REQUEST_HEADER_BYTES]);
            let Ok(header) = parse_request_header(&bytes) else {
                return;
            };
            let payload_bytes = if header.has_payload() {
                header.length_bytes as usize
            } else {
                0
            };
            reader.input.consume(REQUEST_HEADER_BYTES + payload_bytes);
            if header.command == NBD_CMD_DISC {
                return;
            }
            self.ledger
                .counters
                .requests_cancelled
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes `out` (one whole reply), or leaves it pending when another
    /// reply will follow at once: another thread waits for the write side,
    /// or (requests being fast) a further whole request is buffered and this
    /// thread takes it. A reply left pending moves into the write side (its
    /// READ data is not copied) and `out` is emptied either way. Returns
    /// the read side when this thread keeps it for its next request.
    fn reply<'t>(
        &'t self,
        out: &mut Replies,
        charge: Charge<'a>,
        reader: Option<MutexGuard<'t, Reader<'a>>>,
        slow: bool,
    ) -> Option<MutexGuard<'t, Reader<'a>>> {
        // Alone, no other thread can want the write side (only this one
        // could start another): skip telling them.
        let alone = self.threads.load(Ordering::SeqCst) == 1;
        if !alone {
            self.writers_waiting.fetch_add(1, Ordering::SeqCst);
        }
        let mut writer = self.writer.lock();
        if !alone {
            self.writers_waiting.fetch_sub(1, Ordering::SeqCst);
        }
        if self.cancelled.load(Ordering::SeqCst) {
            out.clear();
            return reader;
        }
        let mut reader = reader;
        let batch_bytes = self.shared.config.reply_batch_bytes.max(1);
        let defer = writer.pending.len() + out.len() < batch_bytes
            && (self.writers_waiting.load(Ordering::SeqCst) > 0
                || (!slow && {
                    if reader.is_none() {
                        // Never blocks, so taking it under the write side
                        // cannot deadlock with a reader that flushes.
                        reader = self.reader.try_lock();
                    }
                    reader.as_ref().is_some_and(|reader| {
                        reader.input.has_complete_request() && !self.closing.load(Ordering::SeqCst)
                    })
                }));
        let result = if defer {
            writer.pending.append(out);
            writer.held.push(charge);
            Ok(())
        } else if writer.pending.is_empty() {
            let result = out.write_to(&mut writer.stream);
            drop(charge);
            result
        } else {
            writer.pending.append(out);
            writer.held.push(charge);
            writer.flush()
        };
        if let Err(error) = result {
            self.write_failed(&writer, error);
        }
        reader
    }

    /// Writes the replies waiting in the write side.
    fn flush_pending(&self) {
        let mut writer = self.writer.lock();
        if writer.pending.is_empty() {
            return;
        }
        if self.cancelled.load(Ordering::SeqCst) {
            writer.pending.clear();
            writer.held.clear();
            return;
        }
        if let Err(error) = writer.flush() {
            self.write_failed(&writer, error);
        }
    }

    /// A reply could not be written: nobody will get replies any more.
    fn write_failed(&self, writer: &Writer<'_>, error: std::io::Error) {
        if !self.cancelled.swap(true, Ordering::SeqCst) {
            // Unblock the thread reading: the connection is over.
            let _ = writer.stream.shutdown(Shutdown::Both);
            self.close(Some(ConnectionEnd::Io(error)));
        }
    }

    /// Stops reading requests; `end` is why, when the connection failed.
    fn close(&self, end: Option<ConnectionEnd>) {
        self.closing.store(true, Ordering::SeqCst);
        if let Some(end) = end {
            let mut recorded = self.end.lock();
            if recorded.is_none() {
                *recorded = Some(end);
            }
        }
    }
}

/// Reads the next request header. `Ok(None)`: the client closed the socket
/// at a request boundary.
fn next_header(
    input: &mut InputBuffer,
    stream: &mut Stream,
) -> Result<Option<RequestHeader>, ConnectionEnd> {
    if input.fill(stream, REQUEST_HEADER_BYTES)? == Fill::Closed {
        return Ok(None);
    }
    let mut bytes = [0u8; REQUEST_HEADER_BYTES];
    bytes.copy_from_slice(&input.buffered()[..REQUEST_HEADER_BYTES]);
    input.consume(REQUEST_HEADER_BYTES);
    parse_request_header(&bytes).map(Some).map_err(protocol)
}

/// For a write whose length exceeds the request limit: drops the payload
/// so the stream stays in step, or ends the connection when the length is
/// absurd.
fn discard_oversized_payload(
    input: &mut InputBuffer,
    stream: &mut Stream,
    header: &RequestHeader,
    max_request_bytes: u32,
) -> Result<(), ConnectionEnd> {
    if header.length_bytes > MAX_DISCARDED_PAYLOAD_BYTES {
        return Err(ConnectionEnd::Protocol(format!(
            "write of {} bytes at offset {}: payload far above the {max_request_bytes}-byte maximum",
            header.length_bytes, header.offset_bytes
        )));
    }
    input.discard(stream, u64::from(header.length_bytes))?;
    Ok(())
}

/// True when the peer has closed its socket entirely (not just its sending
/// side): nobody will read replies any more. Detects a Unix-socket peer
/// that closed, and a TCP peer that reset; a TCP peer's plain close shows
/// up at the next failed reply write instead.
fn peer_gone(stream: &Stream) -> bool {
    let mut poll_fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let ready = unsafe { libc::poll(&mut poll_fd, 1, 0) };
    ready > 0 && poll_fd.revents & (libc::POLLHUP | libc::POLLERR) != 0
}
