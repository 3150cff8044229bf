//! The transmission phase: reading requests, validating and executing them
//! against the export, and writing replies, either on the connection's own
//! thread (inline) or through a bounded queue to worker threads.
//!
//! WRITE payloads are read into page-aligned buffers ([`AlignedBuf`], reused
//! per connection) and READ data is read into aligned buffers and sent from
//! them ([`Replies`]), so an aligned request reaches an `O_DIRECT` device
//! without a bounce copy.

use parking_lot::Mutex;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};

use tierd_common::aligned::AlignedBuf;

use super::budget::{charge_bytes, ByteBudget, Charge};
use super::connection::{protocol, ConnectionEnd};
use super::negotiate::Session;
use super::reply::Replies;
use super::{
    command_slot, LogLevel, Shared, ALLOCATION_CONTEXT_ID, MAX_DISCARDED_PAYLOAD_BYTES,
    MAX_EXTENTS_PER_REPLY,
};
use crate::io::{Fill, InputBuffer, Stream};
use crate::proto::*;

/// Reply and payload buffers larger than this are released after use, so
/// an idle connection keeps little memory whatever it did before.
const RETAINED_BUFFER_BYTES: usize = 1024 * 1024;
/// Worker mode: payload buffers kept for reuse per connection, in bytes.
const POOLED_BUFFER_BYTES: usize = 8 * 1024 * 1024;

/// Appends an error reply for `header`: a structured error chunk when
/// structured replies were negotiated, else a simple reply.
fn encode_request_error(
    session: &Session,
    header: &RequestHeader,
    error: u32,
    message: &str,
    out: &mut Vec<u8>,
) {
    if session.structured {
        encode_error_chunk(out, header.cookie, error, message);
    } else {
        encode_simple_reply(out, error, header.cookie);
    }
}

/// Checks a request against the session; returns the error to reply with.
fn validate(session: &Session, header: &RequestHeader) -> Result<(), (u32, &'static str)> {
    let allowed_flags = NBD_CMD_FLAG_FUA
        | match header.command {
            NBD_CMD_READ if session.structured => NBD_CMD_FLAG_DF,
            NBD_CMD_WRITE_ZEROES => NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO,
            NBD_CMD_BLOCK_STATUS => NBD_CMD_FLAG_REQ_ONE,
            NBD_CMD_READ | NBD_CMD_WRITE | NBD_CMD_FLUSH | NBD_CMD_TRIM | NBD_CMD_CACHE => 0,
            _ => return Err((NBD_EINVAL, "unknown command")),
        };
    if header.flags & !allowed_flags != 0 {
        return Err((NBD_EINVAL, "command flag not valid for this command"));
    }
    if header.command == NBD_CMD_FLUSH {
        return Ok(());
    }
    let writes = matches!(
        header.command,
        NBD_CMD_WRITE | NBD_CMD_TRIM | NBD_CMD_WRITE_ZEROES
    );
    if writes && !session.writable {
        return Err((NBD_EPERM, "the export is read-only"));
    }
    if matches!(header.command, NBD_CMD_READ | NBD_CMD_WRITE)
        && header.length_bytes > session.max_request_bytes
    {
        return Err((
            NBD_EINVAL,
            "length exceeds the server's maximum request length",
        ));
    }
    let end = header
        .offset_bytes
        .checked_add(u64::from(header.length_bytes));
    if end.is_none_or(|end| end > session.size_bytes) {
        return Err(
            if matches!(header.command, NBD_CMD_WRITE | NBD_CMD_WRITE_ZEROES) {
                (NBD_ENOSPC, "request extends past the end of the export")
            } else {
                (NBD_EINVAL, "request extends past the end of the export")
            },
        );
    }
    let alignment = u64::from(session.minimum_block_bytes);
    if alignment > 1
        && (!header.offset_bytes.is_multiple_of(alignment)
            || !u64::from(header.length_bytes).is_multiple_of(alignment))
    {
        return Err((
            NBD_EINVAL,
            "request is not aligned to the minimum block size",
        ));
    }
    if header.command == NBD_CMD_BLOCK_STATUS {
        if session.allocation_context.is_none() {
            return Err((NBD_EINVAL, "no metadata context was negotiated"));
        }
        if header.length_bytes == 0 {
            return Err((NBD_EINVAL, "block status of zero bytes"));
        }
    }
    Ok(())
}

/// Executes one request (not DISC) and appends its whole reply to `out`.
/// `payload` is the write data (empty for other commands).
fn handle_request(
    shared: &Shared,
    session: &Session,
    header: &RequestHeader,
    payload: &[u8],
    replies: &mut Replies,
) {
    let counters = &shared.counters;
    counters.requests[command_slot(header.command)].fetch_add(1, Ordering::Relaxed);
    if let Err((error, message)) = validate(session, header) {
        counters.request_errors.fetch_add(1, Ordering::Relaxed);
        shared.log(
            LogLevel::Debug,
            &format!(
                "{} offset {} length {} flags {:#x}: {} ({message})",
                command_name(header.command),
                header.offset_bytes,
                header.length_bytes,
                header.flags,
                error_name(error)
            ),
        );
        encode_request_error(session, header, error, message, replies.bytes());
        return;
    }
    let export = &*session.export;
    let fua = header.flags & NBD_CMD_FLAG_FUA != 0;
    let length = u64::from(header.length_bytes);
    let result = match header.command {
        NBD_CMD_READ => {
            let out = replies.bytes();
            let start = out.len();
            if session.structured {
                if header.length_bytes == 0 {
                    encode_chunk_header(
                        out,
                        NBD_REPLY_FLAG_DONE,
                        NBD_REPLY_TYPE_NONE,
                        header.cookie,
                        0,
                    );
                    return;
                }
                encode_chunk_header(
                    out,
                    NBD_REPLY_FLAG_DONE,
                    NBD_REPLY_TYPE_OFFSET_DATA,
                    header.cookie,
                    header.length_bytes + 8,
                );
                out.extend_from_slice(&header.offset_bytes.to_be_bytes());
            } else {
                encode_simple_reply(out, 0, header.cookie);
            }
            let mut data = replies.data_buffer(header.length_bytes as usize);
            match export.read(header.offset_bytes, &mut data) {
                Ok(()) => {
                    replies.push_data(data);
                    counters.bytes_read.fetch_add(length, Ordering::Relaxed);
                    return;
                }
                Err(error) => {
                    // Nothing is sent yet: replace the reply with an error.
                    replies.bytes().truncate(start);
                    replies.recycle(data);
                    Err(error)
                }
            }
        }
        NBD_CMD_WRITE => export.write(header.offset_bytes, payload, fua).map(|()| {
            counters.bytes_written.fetch_add(length, Ordering::Relaxed);
        }),
        NBD_CMD_FLUSH => export.flush(),
        NBD_CMD_TRIM => {
            if length == 0 {
                Ok(())
            } else {
                export.trim(header.offset_bytes, length, fua)
            }
        }
        NBD_CMD_WRITE_ZEROES => {
            if length == 0 {
                Ok(())
            } else {
                export.write_zeroes(
                    header.offset_bytes,
                    length,
                    fua,
                    header.flags & NBD_CMD_FLAG_NO_HOLE == 0,
                    header.flags & NBD_CMD_FLAG_FAST_ZERO != 0,
                )
            }
        }
        NBD_CMD_CACHE => Ok(()),
        NBD_CMD_BLOCK_STATUS => match export.block_status(header.offset_bytes, length) {
            Ok(extents) => {
                encode_block_status(session, header, &extents, replies.bytes());
                return;
            }
            Err(error) => Err(error),
        },
        // validate() refused every other command.
        _ => Ok(()),
    };
    let out = replies.bytes();
    match result {
        Ok(()) => encode_simple_reply(out, 0, header.cookie),
        Err(error) => {
            let code = nbd_error(&error);
            counters.request_errors.fetch_add(1, Ordering::Relaxed);
            // FAST_ZERO refusals are part of normal operation.
            let level = if code == NBD_ENOTSUP {
                LogLevel::Debug
            } else {
                LogLevel::Warn
            };
            shared.log(
                level,
                &format!(
                    "{} offset {} length {}: export error errno {} ({}): {}",
                    command_name(header.command),
                    header.offset_bytes,
                    header.length_bytes,
                    error.errno,
                    error_name(code),
                    error.message
                ),
            );
            encode_request_error(session, header, code, error_name(code), out);
        }
    }
}

/// Appends a `NBD_REPLY_TYPE_BLOCK_STATUS` chunk: extents clipped to the
/// export's end, empty ones dropped, each at most u32::MAX (rounded down to
/// 4 KiB); stops once the requested length is covered. With REQ_ONE, one
/// extent no longer than the request.
fn encode_block_status(
    session: &Session,
    header: &RequestHeader,
    extents: &[crate::Extent],
    out: &mut Vec<u8>,
) {
    const LARGEST_EXTENT_BYTES: u64 = (u32::MAX as u64) & !4095;
    let requested = u64::from(header.length_bytes);
    let req_one = header.flags & NBD_CMD_FLAG_REQ_ONE != 0;
    let limit_end = session.size_bytes;
    let start = out.len();
    encode_chunk_header(
        out,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_BLOCK_STATUS,
        header.cookie,
        0,
    );
    out.extend_from_slice(
        &session
            .allocation_context
            .unwrap_or(ALLOCATION_CONTEXT_ID)
            .to_be_bytes(),
    );
    let mut position = header.offset_bytes;
    let mut covered = 0u64;
    let mut count = 0usize;
    for extent in extents {
        if covered >= requested || count >= MAX_EXTENTS_PER_REPLY {
            break;
        }
        let mut length = extent
            .length_bytes
            .min(LARGEST_EXTENT_BYTES)
            .min(limit_end.saturating_sub(position));
        if req_one {
            length = length.min(requested);
        }
        if length == 0 {
            continue;
        }
        out.extend_from_slice(&(length as u32).to_be_bytes());
        out.extend_from_slice(&(extent.flags & (NBD_STATE_HOLE | NBD_STATE_ZERO)).to_be_bytes());
        position += length;
        covered += length;
        count += 1;
        if req_one {
            break;
        }
    }
    if count == 0 {
        // The export gave nothing usable: "allocated, contents unknown" is
        // always a correct answer.
        out.extend_from_slice(&header.length_bytes.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
    }
    let payload_length = (out.len() - start - STRUCTURED_REPLY_HEADER_BYTES) as u32;
    out[start + 16..start + 20].copy_from_slice(&payload_length.to_be_bytes());
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

/// Transmission with requests executed on the reading thread; replies are
/// written when no further whole request is buffered (or much is waiting).
/// Reply bytes waiting in `out` are charged to the server-wide budget; a
/// request that does not fit waits, with earlier replies written first so
/// this connection holds nothing while it waits.
pub(super) fn transmit_inline(
    shared: &Shared,
    session: &Session,
    input: &mut InputBuffer,
    stream: &mut Stream,
    stopping: &AtomicBool,
) -> Result<(), ConnectionEnd> {
    let batch_bytes = shared.config.reply_batch_bytes.max(1);
    let connection_limit_bytes = shared.config.max_in_flight_bytes_per_connection;
    let mut out = Replies::with_capacity(batch_bytes.min(RETAINED_BUFFER_BYTES) + 64 * 1024);
    let mut payload = AlignedBuf::new();
    // Charged for the replies in `out`; given back once they are written.
    let mut held = Charge::none();
    let give_up = || stopping.load(Ordering::SeqCst);
    let result = loop {
        if !out.is_empty() && (out.len() >= batch_bytes || !input.has_complete_request()) {
            out.write_to(stream)?;
            held = Charge::none();
        }
        let header = match next_header(input, stream) {
            Ok(Some(header)) => header,
            Ok(None) => break Ok(()),
            Err(end) => break Err(end),
        };
        let charge = charge_bytes(shared, &header);
        if charge > 0 {
            let fits =
                held.bytes + charge <= connection_limit_bytes && shared.budget.try_acquire(charge);
            if fits {
                held.budgets[0] = Some(&shared.budget);
                held.bytes += charge;
            } else {
                if !out.is_empty() {
                    out.write_to(stream)?;
                }
                held = Charge::none();
                if !shared.budget.acquire(charge, &give_up) {
                    // Stopping: the request is dropped with the connection.
                    break Ok(());
                }
                held = Charge {
                    budgets: [Some(&shared.budget), None],
                    bytes: charge,
                };
            }
        }
        let mut data: &[u8] = &[];
        if header.has_payload() {
            if header.length_bytes > session.max_request_bytes {
                if let Err(end) =
                    discard_oversized_payload(input, stream, &header, session.max_request_bytes)
                {
                    break Err(end);
                }
            } else {
                let length = header.length_bytes as usize;
                payload.resize(length);
                input.read_exact(stream, &mut payload)?;
                data = &payload;
            }
        }
        if header.command == NBD_CMD_DISC {
            shared.counters.requests[command_slot(NBD_CMD_DISC)].fetch_add(1, Ordering::Relaxed);
            break Ok(());
        }
        handle_request(shared, session, &header, data, &mut out);
        if payload.capacity() > RETAINED_BUFFER_BYTES {
            payload = AlignedBuf::new();
        }
    };
    if !out.is_empty() {
        out.write_to(stream)?;
    }
    drop(held);
    result
}

struct Job<'a> {
    header: RequestHeader,
    payload: AlignedBuf,
    /// Given back when the job is dropped: after its reply is written, or
    /// unexecuted when its client is gone.
    charge: Charge<'a>,
}

/// Transmission with a bounded queue feeding worker threads; each worker
/// writes its reply whole under the writer lock. Each request takes its
/// bytes from this connection's budget and the server's before the reader
/// reads its payload or queues it; the reader waits (reading nothing more)
/// while either is exhausted.
pub(super) fn transmit_with_workers(
    shared: &Shared,
    session: &Session,
    input: &mut InputBuffer,
    stream: &mut Stream,
    stopping: &AtomicBool,
    id: u64,
) -> Result<(), ConnectionEnd> {
    let writer = Mutex::new(stream.try_clone()?);
    // Set when a reply cannot be written or the client is gone: queued
    // requests are then dropped unexecuted.
    let cancelled = AtomicBool::new(false);
    let pool: Mutex<Vec<AlignedBuf>> = Mutex::new(Vec::new());
    let connection_budget = ByteBudget::new(shared.config.max_in_flight_bytes_per_connection);
    let (sender, receiver) = sync_channel::<Job<'_>>(shared.config.queue_depth_per_connection);
    let receiver = Mutex::new(receiver);
    let give_up = || cancelled.load(Ordering::SeqCst) || stopping.load(Ordering::SeqCst);

    let send_reply = |replies: &mut Replies| {
        let mut writer = writer.lock();
        if replies.write_to(&mut *writer).is_err() && !cancelled.swap(true, Ordering::SeqCst) {
            // Unblock the reader: nobody will get replies any more.
            let _ = writer.shutdown(Shutdown::Both);
        }
    };

    std::thread::scope(|scope| {
        let workers = shared.config.workers_per_connection;
        for index in 0..workers {
            let mut builder = std::thread::Builder::new().name(format!("nbd-conn-{id}-worker"));
            if let Some(stack_bytes) = shared.config.worker_stack_bytes {
                builder = builder.stack_size(stack_bytes);
            }
            // Workers log inside their connection's span.
            let span = tracing::Span::current();
            let (receiver, pool, cancelled, send_reply) =
                (&receiver, &pool, &cancelled, &send_reply);
            let spawned = builder.spawn_scoped(scope, move || {
                let _span = span.entered();
                worker_loop(shared, session, receiver, pool, cancelled, send_reply)
            });
            if let Err(error) = spawned {
                shared
                    .counters
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                shared.log(
                    LogLevel::Error,
                    &format!(
                        "connection {id}: refused: cannot start worker thread {} of {workers} (workers_per_connection): {error}",
                        index + 1
                    ),
                );
                // The workers already started see the queue closed and end.
                drop(sender);
                return Ok(());
            }
        }
        let mut error_reply = Replies::with_capacity(256);
        let mut disconnect_requested = false;
        let result = loop {
            if cancelled.load(Ordering::SeqCst) {
                break Ok(());
            }
            let header = match next_header(input, stream) {
                Ok(Some(header)) => header,
                Ok(None) => break Ok(()),
                Err(end) => break Err(end),
            };
            let charge = match Charge::acquire(
                &connection_budget,
                &shared.budget,
                charge_bytes(shared, &header),
                &give_up,
            ) {
                Some(charge) => charge,
                // Stopping, or the client is gone: the request is dropped
                // with the connection.
                None => break Ok(()),
            };
            let fits = header.length_bytes <= session.max_request_bytes;
            let mut payload = if header.has_payload() && fits {
                pool.lock().pop().unwrap_or_default()
            } else {
                AlignedBuf::new()
            };
            if header.has_payload() {
                if !fits {
                    if let Err(end) =
                        discard_oversized_payload(input, stream, &header, session.max_request_bytes)
                    {
                        break Err(end);
                    }
                    handle_request(shared, session, &header, &[], &mut error_reply);
                    send_reply(&mut error_reply);
                    continue;
                }
                payload.resize(header.length_bytes as usize);
                if let Err(error) = input.read_exact(stream, &mut payload) {
                    break Err(error.into());
                }
            }
            if header.command == NBD_CMD_DISC {
                shared.counters.requests[command_slot(NBD_CMD_DISC)]
                    .fetch_add(1, Ordering::Relaxed);
                // The spec: every outstanding request is still handled.
                disconnect_requested = true;
                break Ok(());
            }
            // Blocks while the queue is full: back-pressure on the client.
            let job = Job {
                header,
                payload,
                charge,
            };
            if sender.send(job).is_err() {
                break Ok(());
            }
        };
        // A client that closed its socket without DISC will read no
        // replies: drop what is queued instead of executing it. (After
        // DISC, or when only its sending side is closed, the queued
        // requests are answered.)
        if !disconnect_requested && peer_gone(stream) {
            cancelled.store(true, Ordering::SeqCst);
        }
        // Workers finish (or drop) the queued requests, then see the
        // channel closed.
        drop(sender);
        result
    })
}

fn worker_loop(
    shared: &Shared,
    session: &Session,
    receiver: &Mutex<Receiver<Job<'_>>>,
    pool: &Mutex<Vec<AlignedBuf>>,
    cancelled: &AtomicBool,
    send_reply: &(dyn Fn(&mut Replies) + Sync),
) {
    let mut out = Replies::with_capacity(64 * 1024);
    loop {
        let job = {
            let receiver = receiver.lock();
            match receiver.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        if cancelled.load(Ordering::SeqCst) {
            shared
                .counters
                .requests_cancelled
                .fetch_add(1, Ordering::Relaxed);
            continue;
        }
        handle_request(shared, session, &job.header, &job.payload, &mut out);
        send_reply(&mut out);
        let Job {
            payload, charge, ..
        } = job;
        drop(charge);
        let capacity = payload.capacity();
        if capacity > 0 && capacity <= RETAINED_BUFFER_BYTES {
            let mut pool = pool.lock();
            let pooled_bytes: usize = pool.iter().map(AlignedBuf::capacity).sum();
            if pooled_bytes + capacity <= POOLED_BUFFER_BYTES {
                pool.push(payload);
            }
        }
    }
}
