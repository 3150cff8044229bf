//! Wire format of the NBD protocol (NetworkBlockDevice/nbd `doc/proto.md`):
//! constants, and pure parsers and encoders over byte slices.
//!
//! Nothing here does IO, so every parser can be fuzzed: each takes bytes the
//! peer sent and returns either a value or a [`ProtocolError`] that says at
//! which byte offset the input broke which rule. None of them panics.

use crate::export::ExportError;

/// `NBDMAGIC`, the first 8 bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle negotiation, and the prefix of every client option.
pub const NBD_OPTS_MAGIC: u64 = 0x4948_4156_454F_5054;
/// Prefix of every option reply of fixed newstyle negotiation.
pub const NBD_REP_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Prefix of every transmission request.
pub const NBD_REQUEST_MAGIC: u32 = 0x2560_9513;
/// Prefix of a simple reply.
pub const NBD_SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Prefix of a structured reply chunk.
pub const NBD_STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server, 16 bits).
pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;

// Client flags (32 bits).
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags (16 bits).
pub const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
pub const NBD_FLAG_ROTATIONAL: u16 = 1 << 4;
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const NBD_FLAG_SEND_DF: u16 = 1 << 7;
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const NBD_FLAG_SEND_CACHE: u16 = 1 << 10;
pub const NBD_FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Option types.
pub const NBD_OPT_EXPORT_NAME: u32 = 1;
pub const NBD_OPT_ABORT: u32 = 2;
pub const NBD_OPT_LIST: u32 = 3;
pub const NBD_OPT_STARTTLS: u32 = 5;
pub const NBD_OPT_INFO: u32 = 6;
pub const NBD_OPT_GO: u32 = 7;
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;
pub const NBD_OPT_LIST_META_CONTEXT: u32 = 9;
pub const NBD_OPT_SET_META_CONTEXT: u32 = 10;
pub const NBD_OPT_EXTENDED_HEADERS: u32 = 11;

// Option reply types.
pub const NBD_REP_ACK: u32 = 1;
pub const NBD_REP_SERVER: u32 = 2;
pub const NBD_REP_INFO: u32 = 3;
pub const NBD_REP_META_CONTEXT: u32 = 4;
pub const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
pub const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR | 1;
pub const NBD_REP_ERR_POLICY: u32 = NBD_REP_FLAG_ERROR | 2;
pub const NBD_REP_ERR_INVALID: u32 = NBD_REP_FLAG_ERROR | 3;
pub const NBD_REP_ERR_PLATFORM: u32 = NBD_REP_FLAG_ERROR | 4;
pub const NBD_REP_ERR_TLS_REQD: u32 = NBD_REP_FLAG_ERROR | 5;
pub const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR | 6;
pub const NBD_REP_ERR_SHUTDOWN: u32 = NBD_REP_FLAG_ERROR | 7;
pub const NBD_REP_ERR_BLOCK_SIZE_REQD: u32 = NBD_REP_FLAG_ERROR | 8;
pub const NBD_REP_ERR_TOO_BIG: u32 = NBD_REP_FLAG_ERROR | 9;

// Information types of NBD_REP_INFO.
pub const NBD_INFO_EXPORT: u16 = 0;
pub const NBD_INFO_NAME: u16 = 1;
pub const NBD_INFO_DESCRIPTION: u16 = 2;
pub const NBD_INFO_BLOCK_SIZE: u16 = 3;

// Command types.
pub const NBD_CMD_READ: u16 = 0;
pub const NBD_CMD_WRITE: u16 = 1;
pub const NBD_CMD_DISC: u16 = 2;
pub const NBD_CMD_FLUSH: u16 = 3;
pub const NBD_CMD_TRIM: u16 = 4;
pub const NBD_CMD_CACHE: u16 = 5;
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
pub const NBD_CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
pub const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const NBD_CMD_FLAG_DF: u16 = 1 << 2;
pub const NBD_CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const NBD_CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply flags and types.
pub const NBD_REPLY_FLAG_DONE: u16 = 1 << 0;
pub const NBD_REPLY_TYPE_NONE: u16 = 0;
pub const NBD_REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const NBD_REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const NBD_REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const NBD_REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;
pub const NBD_REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) | 2;

// `base:allocation` status flags.
pub const NBD_STATE_HOLE: u32 = 1 << 0;
pub const NBD_STATE_ZERO: u32 = 1 << 1;

/// The one metadata context this crate knows.
pub const BASE_ALLOCATION: &str = "base:allocation";

// Error values (the only ones allowed on the wire).
pub const NBD_EPERM: u32 = 1;
pub const NBD_EIO: u32 = 5;
pub const NBD_ENOMEM: u32 = 12;
pub const NBD_EINVAL: u32 = 22;
pub const NBD_ENOSPC: u32 = 28;
pub const NBD_EOVERFLOW: u32 = 75;
pub const NBD_ENOTSUP: u32 = 95;
pub const NBD_ESHUTDOWN: u32 = 108;

/// Size of a transmission request header.
pub const REQUEST_HEADER_BYTES: usize = 28;
/// Size of an option request header (magic, option, length).
pub const OPTION_HEADER_BYTES: usize = 16;
/// Size of a simple reply header.
pub const SIMPLE_REPLY_BYTES: usize = 16;
/// Size of a structured reply chunk header.
pub const STRUCTURED_REPLY_HEADER_BYTES: usize = 20;
/// Size of an option reply header.
pub const OPTION_REPLY_HEADER_BYTES: usize = 20;

/// Longest string (export name, error message) the protocol allows.
pub const MAX_STRING_BYTES: usize = 4096;
/// The READ/WRITE length every client may assume without negotiating
/// (2^25 bytes): the client never sends more, and the server advertises it
/// as its maximum block size in `NBD_INFO_BLOCK_SIZE`.
pub const MAX_PAYLOAD_BYTES: u32 = 32 * 1024 * 1024;
/// The longest READ/WRITE the server accepts (2^26 bytes), as the reference
/// server and nbdkit do: clients that never negotiate block sizes
/// (`NBD_OPT_EXPORT_NAME`) send requests above [`MAX_PAYLOAD_BYTES`]. The
/// server's per-connection memory bound can lower it.
pub const MAX_REQUEST_BYTES: u32 = 64 * 1024 * 1024;

/// A rule the peer's bytes broke. `offset_bytes` counts from the start of the
/// message being parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("bad magic at byte {offset_bytes}: got {found:#x}, expected {expected:#x}")]
    BadMagic {
        offset_bytes: usize,
        found: u64,
        expected: u64,
    },
    #[error("message truncated at byte {offset_bytes}: {what} needs {needed_bytes} bytes, {available_bytes} present")]
    Truncated {
        offset_bytes: usize,
        what: &'static str,
        needed_bytes: usize,
        available_bytes: usize,
    },
    #[error("{trailing_bytes} unexpected bytes after {what} at byte {offset_bytes}")]
    TrailingBytes {
        offset_bytes: usize,
        what: &'static str,
        trailing_bytes: usize,
    },
    #[error("{what} at byte {offset_bytes} is {length_bytes} bytes, longer than the {limit_bytes}-byte limit")]
    TooLong {
        offset_bytes: usize,
        what: &'static str,
        length_bytes: usize,
        limit_bytes: usize,
    },
    #[error("unknown client flags {flags:#x} (this server knows FIXED_NEWSTYLE=1, NO_ZEROES=2)")]
    UnknownClientFlags { flags: u32 },
    #[error("invalid {what} at byte {offset_bytes}: {detail}")]
    Invalid {
        offset_bytes: usize,
        what: &'static str,
        detail: String,
    },
}

#[inline]
fn be_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

#[inline]
fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

#[inline]
fn be_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(word)
}

/// A transmission request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: u16,
    pub cookie: u64,
    pub offset_bytes: u64,
    pub length_bytes: u32,
}

impl RequestHeader {
    /// True when a `length_bytes` payload follows this header.
    pub fn has_payload(&self) -> bool {
        self.command == NBD_CMD_WRITE
    }

    /// The 28 bytes of this header on the wire.
    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut bytes = [0u8; REQUEST_HEADER_BYTES];
        bytes[0..4].copy_from_slice(&NBD_REQUEST_MAGIC.to_be_bytes());
        bytes[4..6].copy_from_slice(&self.flags.to_be_bytes());
        bytes[6..8].copy_from_slice(&self.command.to_be_bytes());
        bytes[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        bytes[16..24].copy_from_slice(&self.offset_bytes.to_be_bytes());
        bytes[24..28].copy_from_slice(&self.length_bytes.to_be_bytes());
        bytes
    }
}

/// Parses a request header; only the magic can be wrong at this level
/// (flags, command and range are checked against the export later, so that
/// the connection survives them).
pub fn parse_request_header(
    bytes: &[u8; REQUEST_HEADER_BYTES],
) -> Result<RequestHeader, ProtocolError> {
    let magic = be_u32(bytes, 0);
    if magic != NBD_REQUEST_MAGIC {
        return Err(ProtocolError::BadMagic {
            offset_bytes: 0,
            found: u64::from(magic),
            expected: u64::from(NBD_REQUEST_MAGIC),
        });
    }
    Ok(RequestHeader {
        flags: be_u16(bytes, 4),
        command: be_u16(bytes, 6),
        cookie: be_u64(bytes, 8),
        offset_bytes: be_u64(bytes, 16),
        length_bytes: be_u32(bytes, 24),
    })
}

/// Parses the 32-bit client flags; unknown bits are a protocol error (the
/// spec obliges the server to drop the connection).
pub fn parse_client_flags(bytes: &[u8; 4]) -> Result<u32, ProtocolError> {
    let flags = u32::from_be_bytes(*bytes);
    let known = NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES;
    if flags & !known != 0 {
        return Err(ProtocolError::UnknownClientFlags { flags });
    }
    Ok(flags)
}

/// An option request header: the option and how many data bytes follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length_bytes: u32,
}

pub fn parse_option_header(
    bytes: &[u8; OPTION_HEADER_BYTES],
) -> Result<OptionHeader, ProtocolError> {
    let magic = be_u64(bytes, 0);
    if magic != NBD_OPTS_MAGIC {
        return Err(ProtocolError::BadMagic {
            offset_bytes: 0,
            found: magic,
            expected: NBD_OPTS_MAGIC,
        });
    }
    Ok(OptionHeader {
        option: be_u32(bytes, 8),
        length_bytes: be_u32(bytes, 12),
    })
}

/// Reads `length` bytes at `at` of `data`, naming `what` on failure.
fn take<'a>(
    data: &'a [u8],
    at: usize,
    length: usize,
    what: &'static str,
) -> Result<&'a [u8], ProtocolError> {
    match at.checked_add(length) {
        Some(end) if end <= data.len() => Ok(&data[at..end]),
        _ => Err(ProtocolError::Truncated {
            offset_bytes: at,
            what,
            needed_bytes: length,
            available_bytes: data.len().saturating_sub(at),
        }),
    }
}

fn take_u32(data: &[u8], at: usize, what: &'static str) -> Result<u32, ProtocolError> {
    let bytes = take(data, at, 4, what)?;
    Ok(be_u32(bytes, 0))
}

fn take_string<'a>(
    data: &'a [u8],
    at: usize,
    length: usize,
    what: &'static str,
) -> Result<&'a [u8], ProtocolError> {
    if length > MAX_STRING_BYTES {
        return Err(ProtocolError::TooLong {
            offset_bytes: at,
            what,
            length_bytes: length,
            limit_bytes: MAX_STRING_BYTES,
        });
    }
    take(data, at, length, what)
}

/// The data of `NBD_OPT_INFO` / `NBD_OPT_GO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    pub export_name: &'a [u8],
    /// Information types the client asked for, in its order.
    pub requests: Vec<u16>,
}

impl InfoRequest<'_> {
    pub fn wants(&self, information: u16) -> bool {
        self.requests.contains(&information)
    }
}

/// Parses the data of `NBD_OPT_INFO` / `NBD_OPT_GO`: name length, name,
/// count of information requests, the requests; nothing may follow.
pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest<'_>, ProtocolError> {
    let name_length = take_u32(data, 0, "export name length")? as usize;
    let export_name = take_string(data, 4, name_length, "export name")?;
    let count_at = 4 + name_length;
    let count = usize::from(be_u16(
        take(data, count_at, 2, "information request count")?,
        0,
    ));
    let list = take(data, count_at + 2, count * 2, "information requests")?;
    let end = count_at + 2 + count * 2;
    if end != data.len() {
        return Err(ProtocolError::TrailingBytes {
            offset_bytes: end,
            what: "information requests",
            trailing_bytes: data.len() - end,
        });
    }
    let requests = list
        .chunks_exact(2)
        .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
        .collect();
    Ok(InfoRequest {
        export_name,
        requests,
    })
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaContextRequest<'a> {
    pub export_name: &'a [u8],
    pub queries: Vec<&'a [u8]>,
}

/// Most queries accepted in one meta-context option (`NBD_REP_ERR_TOO_BIG`
/// beyond this).
pub const MAX_META_CONTEXT_QUERIES: usize = 128;

/// Parses the data of the meta-context options: name length, name, query
/// count, then each query as length + string; nothing may follow.
pub fn parse_meta_context_request(data: &[u8]) -> Result<MetaContextRequest<'_>, ProtocolError> {
    let name_length = take_u32(data, 0, "export name length")? as usize;
    let export_name = take_string(data, 4, name_length, "export name")?;
    let mut at = 4 + name_length;
    let count = take_u32(data, at, "query count")? as usize;
    at += 4;
    if count > MAX_META_CONTEXT_QUERIES {
        return Err(ProtocolError::TooLong {
            offset_bytes: at - 4,
            what: "query count",
            length_bytes: count,
            limit_bytes: MAX_META_CONTEXT_QUERIES,
        });
    }
    let mut queries = Vec::with_capacity(count);
    for _ in 0..count {
        let length = take_u32(data, at, "query length")? as usize;
        at += 4;
        queries.push(take_string(data, at, length, "query")?);
        at += length;
    }
    if at != data.len() {
        return Err(ProtocolError::TrailingBytes {
            offset_bytes: at,
            what: "meta context queries",
            trailing_bytes: data.len() - at,
        });
    }
    Ok(MetaContextRequest {
        export_name,
        queries,
    })
}

/// Which `base:` contexts a query names. `listing`: the wildcard `base:`
/// matches during `NBD_OPT_LIST_META_CONTEXT` only.
pub fn query_selects_allocation(query: &[u8], listing: bool) -> bool {
    query == BASE_ALLOCATION.as_bytes() || (listing && query == b"base:")
}

/// Appends an option reply.
pub fn encode_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    out.extend_from_slice(&NBD_REP_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// An option reply header as the client sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionReplyHeader {
    pub option: u32,
    pub reply_type: u32,
    pub length_bytes: u32,
}

pub fn parse_option_reply_header(
    bytes: &[u8; OPTION_REPLY_HEADER_BYTES],
) -> Result<OptionReplyHeader, ProtocolError> {
    let magic = be_u64(bytes, 0);
    if magic != NBD_REP_MAGIC {
        return Err(ProtocolError::BadMagic {
            offset_bytes: 0,
            found: magic,
            expected: NBD_REP_MAGIC,
        });
    }
    Ok(OptionReplyHeader {
        option: be_u32(bytes, 8),
        reply_type: be_u32(bytes, 12),
        length_bytes: be_u32(bytes, 16),
    })
}

/// Appends a simple reply header (the caller appends read data after it).
#[inline]
pub fn encode_simple_reply(out: &mut Vec<u8>, error: u32, cookie: u64) {
    let mut bytes = [0u8; SIMPLE_REPLY_BYTES];
    bytes[0..4].copy_from_slice(&NBD_SIMPLE_REPLY_MAGIC.to_be_bytes());
    bytes[4..8].copy_from_slice(&error.to_be_bytes());
    bytes[8..16].copy_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&bytes);
}

/// Appends a structured reply chunk header; `length_bytes` of payload must
/// follow.
#[inline]
pub fn encode_chunk_header(
    out: &mut Vec<u8>,
    flags: u16,
    chunk_type: u16,
    cookie: u64,
    length_bytes: u32,
) {
    let mut bytes = [0u8; STRUCTURED_REPLY_HEADER_BYTES];
    bytes[0..4].copy_from_slice(&NBD_STRUCTURED_REPLY_MAGIC.to_be_bytes());
    bytes[4..6].copy_from_slice(&flags.to_be_bytes());
    bytes[6..8].copy_from_slice(&chunk_type.to_be_bytes());
    bytes[8..16].copy_from_slice(&cookie.to_be_bytes());
    bytes[16..20].copy_from_slice(&length_bytes.to_be_bytes());
    out.extend_from_slice(&bytes);
}

/// Appends a final `NBD_REPLY_TYPE_ERROR` chunk. The message is cut to the
/// protocol's string limit (on a character boundary).
pub fn encode_error_chunk(out: &mut Vec<u8>, cookie: u64, error: u32, message: &str) {
    let mut cut = message.len().min(MAX_STRING_BYTES);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let message = &message.as_bytes()[..cut];
    encode_chunk_header(
        out,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_ERROR,
        cookie,
        6 + message.len() as u32,
    );
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message);
}

/// A reply header as the client sees it: simple (16 bytes) or a structured
/// chunk (20 bytes); the first 4 bytes (the magic) say which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyHeader {
    Simple {
        error: u32,
        cookie: u64,
    },
    Chunk {
        flags: u16,
        chunk_type: u16,
        cookie: u64,
        length_bytes: u32,
    },
}

/// How many header bytes follow a reply magic (including the magic), or an
/// error for an unknown magic.
pub fn reply_header_bytes(magic: &[u8; 4]) -> Result<usize, ProtocolError> {
    match u32::from_be_bytes(*magic) {
        NBD_SIMPLE_REPLY_MAGIC => Ok(SIMPLE_REPLY_BYTES),
        NBD_STRUCTURED_REPLY_MAGIC => Ok(STRUCTURED_REPLY_HEADER_BYTES),
        found => Err(ProtocolError::BadMagic {
            offset_bytes: 0,
            found: u64::from(found),
            expected: u64::from(NBD_STRUCTURED_REPLY_MAGIC),
        }),
    }
}

/// Parses a reply header of 16 (simple) or 20 (structured) bytes.
pub fn parse_reply_header(bytes: &[u8]) -> Result<ReplyHeader, ProtocolError> {
    let magic = take(bytes, 0, 4, "reply magic")?;
    let needed = reply_header_bytes(&[magic[0], magic[1], magic[2], magic[3]])?;
    let header = take(bytes, 0, needed, "reply header")?;
    if needed == SIMPLE_REPLY_BYTES {
        Ok(ReplyHeader::Simple {
            error: be_u32(header, 4),
            cookie: be_u64(header, 8),
        })
    } else {
        Ok(ReplyHeader::Chunk {
            flags: be_u16(header, 4),
            chunk_type: be_u16(header, 6),
            cookie: be_u64(header, 8),
            length_bytes: be_u32(header, 16),
        })
    }
}

/// Maps an export's errno to the NBD error set: EDQUOT and EFBIG become
/// ENOSPC (as the spec asks), unknown values become EIO, EOPNOTSUPP (same
/// number as ENOTSUP on Linux) stays ENOTSUP.
pub fn nbd_error_from_errno(errno: i32) -> u32 {
    match errno {
        libc::EPERM => NBD_EPERM,
        libc::EIO => NBD_EIO,
        libc::ENOMEM => NBD_ENOMEM,
        libc::EINVAL => NBD_EINVAL,
        libc::ENOSPC | libc::EDQUOT | libc::EFBIG => NBD_ENOSPC,
        libc::EOVERFLOW => NBD_EOVERFLOW,
        libc::ENOTSUP => NBD_ENOTSUP,
        libc::ESHUTDOWN => NBD_ESHUTDOWN,
        _ => NBD_EIO,
    }
}

/// The NBD error for an [`ExportError`].
pub fn nbd_error(error: &ExportError) -> u32 {
    nbd_error_from_errno(error.errno)
}

/// A short name for an NBD error value, for logs and messages.
pub fn error_name(error: u32) -> &'static str {
    match error {
        0 => "success",
        NBD_EPERM => "EPERM",
        NBD_EIO => "EIO",
        NBD_ENOMEM => "ENOMEM",
        NBD_EINVAL => "EINVAL",
        NBD_ENOSPC => "ENOSPC",
        NBD_EOVERFLOW => "EOVERFLOW",
        NBD_ENOTSUP => "ENOTSUP",
        NBD_ESHUTDOWN => "ESHUTDOWN",
        _ => "unknown error",
    }
}

/// A short name for a command, for logs and metrics labels.
pub fn command_name(command: u16) -> &'static str {
    match command {
        NBD_CMD_READ => "read",
        NBD_CMD_WRITE => "write",
        NBD_CMD_DISC => "disc",
        NBD_CMD_FLUSH => "flush",
        NBD_CMD_TRIM => "trim",
        NBD_CMD_CACHE => "cache",
        NBD_CMD_WRITE_ZEROES => "write_zeroes",
        NBD_CMD_BLOCK_STATUS => "block_status",
        _ => "unknown",
    }
}

/// A short name for an option, for logs.
pub fn option_name(option: u32) -> &'static str {
    match option {
        NBD_OPT_EXPORT_NAME => "EXPORT_NAME",
        NBD_OPT_ABORT => "ABORT",
        NBD_OPT_LIST => "LIST",
        NBD_OPT_STARTTLS => "STARTTLS",
        NBD_OPT_INFO => "INFO",
        NBD_OPT_GO => "GO",
        NBD_OPT_STRUCTURED_REPLY => "STRUCTURED_REPLY",
        NBD_OPT_LIST_META_CONTEXT => "LIST_META_CONTEXT",
        NBD_OPT_SET_META_CONTEXT => "SET_META_CONTEXT",
        NBD_OPT_EXTENDED_HEADERS => "EXTENDED_HEADERS",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_header_round_trips() {
        let header = RequestHeader {
            flags: NBD_CMD_FLAG_FUA,
            command: NBD_CMD_WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset_bytes: 4096,
            length_bytes: 512,
        };
        assert_eq!(parse_request_header(&header.encode()), Ok(header));
    }

    #[test]
    fn request_header_with_bad_magic_is_refused() {
        let mut bytes = [0u8; REQUEST_HEADER_BYTES];
        bytes[0] = 0x12;
        assert!(matches!(
            parse_request_header(&bytes),
            Err(ProtocolError::BadMagic {
                offset_bytes: 0,
                ..
            })
        ));
    }

    #[test]
    fn client_flags_reject_unknown_bits() {
        assert_eq!(parse_client_flags(&[0, 0, 0, 3]), Ok(3));
        assert_eq!(
            parse_client_flags(&[0, 0, 0, 4]),
            Err(ProtocolError::UnknownClientFlags { flags: 4 })
        );
    }

    #[test]
    fn info_request_parses_and_checks_lengths() {
        let mut data = Vec::new();
        data.extend_from_slice(&3u32.to_be_bytes());
        data.extend_from_slice(b"abc");
        data.extend_from_slice(&2u16.to_be_bytes());
        data.extend_from_slice(&NBD_INFO_NAME.to_be_bytes());
        data.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
        let request = parse_info_request(&data).unwrap();
        assert_eq!(request.export_name, b"abc");
        assert_eq!(request.requests, vec![NBD_INFO_NAME, NBD_INFO_BLOCK_SIZE]);
        assert!(request.wants(NBD_INFO_BLOCK_SIZE));
        // Trailing byte, truncation, and a name length past the end.
        let mut longer = data.clone();
        longer.push(0);
        assert!(matches!(
            parse_info_request(&longer),
            Err(ProtocolError::TrailingBytes { .. })
        ));
        assert!(matches!(
            parse_info_request(&data[..data.len() - 1]),
            Err(ProtocolError::Truncated { .. })
        ));
        let mut huge = data.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_info_request(&huge).is_err());
    }

    #[test]
    fn meta_context_request_parses_queries() {
        let mut data = Vec::new();
        data.extend_from_slice(&0u32.to_be_bytes());
        data.extend_from_slice(&2u32.to_be_bytes());
        for query in [&b"base:allocation"[..], b"qemu:dirty"] {
            data.extend_from_slice(&(query.len() as u32).to_be_bytes());
            data.extend_from_slice(query);
        }
        let request = parse_meta_context_request(&data).unwrap();
        assert_eq!(request.export_name, b"");
        assert_eq!(
            request.queries,
            vec![&b"base:allocation"[..], b"qemu:dirty"]
        );
        for cut in 0..data.len() {
            assert!(
                parse_meta_context_request(&data[..cut]).is_err(),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn parsers_never_panic_on_seeded_random_bytes() {
        use tierd_common::rng::{Rng, SeededRng};
        let mut rng = SeededRng::new(7);
        let mut data = [0u8; 64];
        for _ in 0..20_000 {
            let length = rng.below(64) as usize;
            for byte in data.iter_mut().take(length) {
                *byte = rng.next_u64() as u8;
            }
            // Small numbers make length fields land inside the buffer often.
            if length > 4 && rng.chance(0.5) {
                data[0..4].copy_from_slice(&(rng.below(8) as u32).to_be_bytes());
            }
            let slice = &data[..length];
            let _ = parse_info_request(slice);
            let _ = parse_meta_context_request(slice);
            let _ = parse_reply_header(slice);
        }
    }

    #[test]
    fn error_chunk_cuts_long_messages_on_char_boundaries() {
        let message = "é".repeat(3000);
        let mut out = Vec::new();
        encode_error_chunk(&mut out, 9, NBD_EIO, &message);
        let header = parse_reply_header(&out).unwrap();
        let ReplyHeader::Chunk { length_bytes, .. } = header else {
            panic!("expected a chunk, got {header:?}");
        };
        let message_bytes = usize::from(u16::from_be_bytes([out[24], out[25]]));
        assert!(message_bytes <= MAX_STRING_BYTES);
        assert_eq!(length_bytes as usize, 6 + message_bytes);
        assert!(std::str::from_utf8(&out[26..26 + message_bytes]).is_ok());
    }

    #[test]
    fn errno_mapping_follows_the_spec() {
        assert_eq!(nbd_error_from_errno(libc::EDQUOT), NBD_ENOSPC);
        assert_eq!(nbd_error_from_errno(libc::EFBIG), NBD_ENOSPC);
        assert_eq!(nbd_error_from_errno(libc::EOPNOTSUPP), NBD_ENOTSUP);
        assert_eq!(nbd_error_from_errno(libc::EBADF), NBD_EIO);
        assert_eq!(nbd_error_from_errno(libc::EPERM), NBD_EPERM);
    }
}
