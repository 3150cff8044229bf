//! Executing one request against the export: validation against the
//! session, the export call, and the reply bytes (simple or structured).

use std::sync::atomic::Ordering;

use super::negotiate::Session;
use super::reply::Replies;
use super::{
    command_slot, LogLevel, RequestCounters, Shared, ALLOCATION_CONTEXT_ID, MAX_EXTENTS_PER_REPLY,
};
use crate::proto::*;

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

/// Executes one request (not DISC) and appends its whole reply to
/// `replies` (READ data in an aligned buffer of its own, so an aligned
/// request reaches an `O_DIRECT` tier without a bounce copy).
/// `payload` is the write data (empty for other commands).
pub(super) fn handle_request(
    shared: &Shared,
    counters: &RequestCounters,
    session: &Session,
    header: &RequestHeader,
    payload: &[u8],
    replies: &mut Replies,
) {
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
