//! Option negotiation: the fixed-newstyle handshake, `NBD_OPT_*` (export
//! info, metadata contexts, structured replies) and `NBD_OPT_STARTTLS`,
//! ending in the [`Session`] a connection transmits with.

use std::io::Write;
use std::sync::Arc;

use super::connection::{protocol, ConnectionEnd};
use super::{
    LogLevel, Shared, ALLOCATION_CONTEXT_ID, MAX_OPTIONS_PER_HANDSHAKE, MAX_OPTION_BYTES,
    PREFERRED_BLOCK_BYTES,
};
use crate::export::Export;
use crate::io::{Fill, InputBuffer, Stream};
use crate::proto::*;
use crate::tls::{TlsMode, TlsServer};

/// What one connection agreed on in the handshake.
pub(super) struct Session {
    pub(super) export_index: usize,
    pub(super) export: Arc<dyn Export>,
    pub(super) size_bytes: u64,
    pub(super) writable: bool,
    pub(super) structured: bool,
    pub(super) allocation_context: Option<u32>,
    pub(super) minimum_block_bytes: u32,
    /// The longest READ/WRITE accepted ([`Shared::max_request_bytes`]).
    pub(super) max_request_bytes: u32,
}

fn transmission_flags(export: &dyn Export, structured: bool) -> u16 {
    let mut flags = NBD_FLAG_HAS_FLAGS
        | NBD_FLAG_SEND_FLUSH
        | NBD_FLAG_SEND_FUA
        | NBD_FLAG_SEND_TRIM
        | NBD_FLAG_SEND_WRITE_ZEROES
        | NBD_FLAG_SEND_FAST_ZERO
        | NBD_FLAG_SEND_CACHE
        | NBD_FLAG_CAN_MULTI_CONN;
    if structured {
        // Reads are always answered with one data chunk.
        flags |= NBD_FLAG_SEND_DF;
    }
    if !export.is_writable() {
        flags |= NBD_FLAG_READ_ONLY;
    }
    if export.is_rotational() {
        flags |= NBD_FLAG_ROTATIONAL;
    }
    flags
}

/// Runs the handshake. `Ok(None)`: the client aborted or left.
pub(super) fn negotiate(
    shared: &Shared,
    input: &mut InputBuffer,
    stream: &mut Stream,
    id: u64,
) -> Result<Option<Session>, ConnectionEnd> {
    let mut greeting = [0u8; 18];
    greeting[0..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    greeting[8..16].copy_from_slice(&NBD_OPTS_MAGIC.to_be_bytes());
    greeting[16..18].copy_from_slice(&(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES).to_be_bytes());
    stream.write_all(&greeting)?;
    if input.fill(stream, 4)? == Fill::Closed {
        return Ok(None);
    }
    let buffered = input.buffered();
    let client_flags = parse_client_flags(&[buffered[0], buffered[1], buffered[2], buffered[3]])
        .map_err(protocol)?;
    input.consume(4);
    let no_zeroes = client_flags & NBD_FLAG_C_NO_ZEROES != 0;

    let mut structured = false;
    // (export the contexts were set for, context id)
    let mut allocation: Option<(usize, u32)> = None;
    let mut data = Vec::new();
    let mut reply = Vec::with_capacity(256);
    for _ in 0..MAX_OPTIONS_PER_HANDSHAKE {
        if input.fill(stream, OPTION_HEADER_BYTES)? == Fill::Closed {
            return Ok(None);
        }
        let mut header_bytes = [0u8; OPTION_HEADER_BYTES];
        header_bytes.copy_from_slice(&input.buffered()[..OPTION_HEADER_BYTES]);
        input.consume(OPTION_HEADER_BYTES);
        let header = parse_option_header(&header_bytes).map_err(protocol)?;
        if header.length_bytes > MAX_OPTION_BYTES {
            return Err(ConnectionEnd::Protocol(format!(
                "option {} ({}) carries {} bytes of data, more than the {MAX_OPTION_BYTES}-byte limit",
                header.option,
                option_name(header.option),
                header.length_bytes
            )));
        }
        data.resize(header.length_bytes as usize, 0);
        input.read_exact(stream, &mut data)?;
        reply.clear();
        let option = header.option;
        let tls_required = shared
            .config
            .tls
            .as_ref()
            .is_some_and(|tls| tls.mode == TlsMode::Require)
            && !tls_active(stream);
        if tls_required && option != NBD_OPT_STARTTLS && option != NBD_OPT_ABORT {
            if option == NBD_OPT_EXPORT_NAME {
                // This option cannot be answered with an error: the spec
                // says close.
                shared.log(
                    LogLevel::Info,
                    &format!(
                        "connection {id}: NBD_OPT_EXPORT_NAME before NBD_OPT_STARTTLS on a server that requires TLS; closing"
                    ),
                );
                return Ok(None);
            }
            encode_error_reply(
                &mut reply,
                option,
                NBD_REP_ERR_TLS_REQD,
                "this server requires TLS: send NBD_OPT_STARTTLS first",
            );
            stream.write_all(&reply)?;
            continue;
        }
        match option {
            NBD_OPT_STARTTLS => {
                let Some(tls) = &shared.config.tls else {
                    encode_error_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_POLICY,
                        "TLS is not configured on this server",
                    );
                    stream.write_all(&reply)?;
                    continue;
                };
                if tls_active(stream) {
                    encode_error_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_INVALID,
                        "TLS is already active on this connection",
                    );
                } else if !data.is_empty() {
                    encode_error_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_INVALID,
                        "NBD_OPT_STARTTLS takes no data",
                    );
                } else {
                    // Bytes the client sent after STARTTLS but before our
                    // ACK would be read as if they had come over TLS (the
                    // plaintext injection of CVE-2011-0411 and friends).
                    if !input.buffered().is_empty() {
                        return Err(ConnectionEnd::Protocol(format!(
                            "{} bytes arrived after NBD_OPT_STARTTLS before its reply; a client must wait for the reply",
                            input.buffered().len()
                        )));
                    }
                    encode_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                    stream.write_all(&reply)?;
                    start_tls(shared, tls, stream, id)?;
                    // The spec: no negotiation state survives STARTTLS.
                    structured = false;
                    allocation = None;
                    continue;
                }
            }
            NBD_OPT_EXPORT_NAME => {
                let Some(index) = shared.find_export(&data) else {
                    // No way to report an error here: the spec says close.
                    shared.log(
                        LogLevel::Info,
                        &format!(
                            "client asked for unknown export {:?} with NBD_OPT_EXPORT_NAME; closing",
                            String::from_utf8_lossy(&data)
                        ),
                    );
                    return Ok(None);
                };
                let session = make_session(shared, index, structured, allocation);
                let flags = transmission_flags(&*session.export, structured);
                reply.extend_from_slice(&session.size_bytes.to_be_bytes());
                reply.extend_from_slice(&flags.to_be_bytes());
                if !no_zeroes {
                    reply.extend_from_slice(&[0u8; 124]);
                }
                stream.write_all(&reply)?;
                return Ok(Some(session));
            }
            NBD_OPT_ABORT => {
                encode_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                // The client may already have gone; that is fine.
                let _ = stream.write_all(&reply);
                return Ok(None);
            }
            NBD_OPT_LIST => {
                if !data.is_empty() {
                    encode_error_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_INVALID,
                        "NBD_OPT_LIST takes no data",
                    );
                } else if !shared.config.allow_list {
                    encode_error_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_POLICY,
                        "listing exports is disabled on this server",
                    );
                } else {
                    for served in &shared.exports {
                        let mut entry = Vec::with_capacity(4 + served.name.len());
                        entry.extend_from_slice(&(served.name.len() as u32).to_be_bytes());
                        entry.extend_from_slice(served.name.as_bytes());
                        encode_option_reply(&mut reply, option, NBD_REP_SERVER, &entry);
                    }
                    encode_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                }
            }
            NBD_OPT_INFO | NBD_OPT_GO => match parse_info_request(&data) {
                Err(error) => {
                    encode_error_reply(&mut reply, option, NBD_REP_ERR_INVALID, &error.to_string())
                }
                Ok(request) => match shared.find_export(request.export_name) {
                    None => encode_error_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_UNKNOWN,
                        &format!(
                            "no export named {:?}",
                            String::from_utf8_lossy(request.export_name)
                        ),
                    ),
                    Some(index) => {
                        let session = make_session(shared, index, structured, allocation);
                        encode_export_info(
                            shared, &session, &request, &mut reply, option, structured,
                        );
                        encode_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                        if option == NBD_OPT_GO {
                            stream.write_all(&reply)?;
                            return Ok(Some(session));
                        }
                    }
                },
            },
            NBD_OPT_STRUCTURED_REPLY => {
                if data.is_empty() {
                    structured = true;
                    encode_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                } else {
                    encode_error_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    );
                }
            }
            NBD_OPT_LIST_META_CONTEXT | NBD_OPT_SET_META_CONTEXT => {
                let listing = option == NBD_OPT_LIST_META_CONTEXT;
                if !listing {
                    // Replaces the selection even when the option fails.
                    allocation = None;
                }
                if !structured {
                    encode_error_reply(
                        &mut reply,
                        option,
                        NBD_REP_ERR_INVALID,
                        "negotiate NBD_OPT_STRUCTURED_REPLY before metadata contexts",
                    );
                } else {
                    match parse_meta_context_request(&data) {
                        Err(error @ ProtocolError::TooLong { .. }) => encode_error_reply(
                            &mut reply,
                            option,
                            NBD_REP_ERR_TOO_BIG,
                            &error.to_string(),
                        ),
                        Err(error) => encode_error_reply(
                            &mut reply,
                            option,
                            NBD_REP_ERR_INVALID,
                            &error.to_string(),
                        ),
                        Ok(request) => match shared.find_export(request.export_name) {
                            None => encode_error_reply(
                                &mut reply,
                                option,
                                NBD_REP_ERR_UNKNOWN,
                                &format!(
                                    "no export named {:?}",
                                    String::from_utf8_lossy(request.export_name)
                                ),
                            ),
                            Some(index) => {
                                let selects = if listing && request.queries.is_empty() {
                                    true
                                } else {
                                    request
                                        .queries
                                        .iter()
                                        .any(|query| query_selects_allocation(query, listing))
                                };
                                if selects {
                                    let id = if listing { 0 } else { ALLOCATION_CONTEXT_ID };
                                    let mut entry = Vec::with_capacity(4 + BASE_ALLOCATION.len());
                                    entry.extend_from_slice(&id.to_be_bytes());
                                    entry.extend_from_slice(BASE_ALLOCATION.as_bytes());
                                    encode_option_reply(
                                        &mut reply,
                                        option,
                                        NBD_REP_META_CONTEXT,
                                        &entry,
                                    );
                                    if !listing {
                                        allocation = Some((index, ALLOCATION_CONTEXT_ID));
                                    }
                                }
                                encode_option_reply(&mut reply, option, NBD_REP_ACK, &[]);
                            }
                        },
                    }
                }
            }
            _ => encode_error_reply(
                &mut reply,
                option,
                NBD_REP_ERR_UNSUP,
                &format!("option {option} ({}) is not supported", option_name(option)),
            ),
        }
        stream.write_all(&reply)?;
    }
    Err(ConnectionEnd::Protocol(format!(
        "more than {MAX_OPTIONS_PER_HANDSHAKE} options without entering transmission"
    )))
}

/// True once `NBD_OPT_STARTTLS` succeeded on this connection.
pub(super) fn tls_active(stream: &Stream) -> bool {
    matches!(stream, Stream::ServerTls(_) | Stream::SharedTls(_))
}

/// Starts TLS on this thread: the rest of the handshake runs the rustls
/// session here, and transmission shares it between the connection's
/// threads ([`crate::tls::SharedTls`]).
fn start_tls(
    shared: &Shared,
    tls: &TlsServer,
    stream: &mut Stream,
    id: u64,
) -> Result<(), ConnectionEnd> {
    let socket = stream.try_clone()?;
    *stream = tls.start_in_thread(socket)?;
    shared.log(LogLevel::Debug, &format!("connection {id}: TLS started"));
    Ok(())
}

fn encode_error_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, message: &str) {
    let mut cut = message.len().min(MAX_STRING_BYTES);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    encode_option_reply(out, option, reply_type, &message.as_bytes()[..cut]);
}

fn make_session(
    shared: &Shared,
    index: usize,
    structured: bool,
    allocation: Option<(usize, u32)>,
) -> Session {
    let export = Arc::clone(&shared.exports[index].export);
    Session {
        export_index: index,
        size_bytes: export.size_bytes(),
        writable: export.is_writable(),
        export,
        structured,
        allocation_context: allocation
            .filter(|(for_index, _)| *for_index == index)
            .map(|(_, id)| id),
        minimum_block_bytes: shared.config.minimum_block_bytes,
        max_request_bytes: shared.max_request_bytes,
    }
}

/// The maximum block size sent in `NBD_INFO_BLOCK_SIZE`: 32 MiB (the size
/// every client assumes anyway), or the request limit when that is lower.
/// Longer requests, up to the limit, are still served: clients that never
/// see this (`NBD_OPT_EXPORT_NAME`) send them.
pub(super) fn advertised_max_block_bytes(shared: &Shared) -> u32 {
    MAX_PAYLOAD_BYTES.min(shared.max_request_bytes)
}

fn encode_export_info(
    shared: &Shared,
    session: &Session,
    request: &InfoRequest<'_>,
    out: &mut Vec<u8>,
    option: u32,
    structured: bool,
) {
    let mut info = [0u8; 14];
    info[0..2].copy_from_slice(&NBD_INFO_EXPORT.to_be_bytes());
    info[2..10].copy_from_slice(&session.size_bytes.to_be_bytes());
    info[10..12].copy_from_slice(&transmission_flags(&*session.export, structured).to_be_bytes());
    encode_option_reply(out, option, NBD_REP_INFO, &info[..12]);

    // Always sent: the server may volunteer it, and a client that honours it
    // then knows our limits.
    info[0..2].copy_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
    info[2..6].copy_from_slice(&session.minimum_block_bytes.to_be_bytes());
    info[6..10].copy_from_slice(&PREFERRED_BLOCK_BYTES.to_be_bytes());
    info[10..14].copy_from_slice(&advertised_max_block_bytes(shared).to_be_bytes());
    encode_option_reply(out, option, NBD_REP_INFO, &info);

    if request.wants(NBD_INFO_NAME) {
        let name = shared.exports[session.export_index].name.as_bytes();
        let mut payload = Vec::with_capacity(2 + name.len());
        payload.extend_from_slice(&NBD_INFO_NAME.to_be_bytes());
        payload.extend_from_slice(name);
        encode_option_reply(out, option, NBD_REP_INFO, &payload);
    }
    if request.wants(NBD_INFO_DESCRIPTION) {
        if let Some(description) = session.export.description() {
            let mut cut = description.len().min(MAX_STRING_BYTES);
            while !description.is_char_boundary(cut) {
                cut -= 1;
            }
            let mut payload = Vec::with_capacity(2 + cut);
            payload.extend_from_slice(&NBD_INFO_DESCRIPTION.to_be_bytes());
            payload.extend_from_slice(&description.as_bytes()[..cut]);
            encode_option_reply(out, option, NBD_REP_INFO, &payload);
        }
    }
}
