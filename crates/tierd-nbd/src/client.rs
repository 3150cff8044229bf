//! A small blocking NBD client: fixed-newstyle handshake, then pipelined
//! requests.
//!
//! [`Client::connect`] negotiates structured replies and `base:allocation`
//! (when asked) and enters transmission with `NBD_OPT_GO`. Requests are
//! submitted without waiting ([`ClientSender`]) and completions are read in
//! order of arrival ([`ClientReceiver`]); [`Client::split`] gives the two
//! halves to two threads. The blocking helpers (`read`, `write`, ...) submit
//! one request and wait for its completion. [`Negotiation`] exposes the
//! handshake step by step (LIST, INFO, ABORT, raw options) for tools and
//! tests.

use parking_lot::{Mutex, MutexGuard};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;

use tierd_common::hash::FastMap;

use crate::export::Extent;
use crate::io::{Fill, InputBuffer, Stream};
use crate::proto::*;
use crate::tls::ClientTls;

/// The IANA port of NBD.
pub const DEFAULT_TCP_PORT: u16 = 10809;
/// Option reply data longer than this ends the handshake as a protocol
/// error.
const MAX_OPTION_REPLY_BYTES: u32 = 1024 * 1024;
/// All the replies to one option together (a server streaming replies must
/// not make the client hold them without bound).
const MAX_OPTION_REPLIES_TOTAL_BYTES: usize = 16 * 1024 * 1024;
/// `base:allocation` extents kept for one block status request, over all its
/// chunks (one maximal chunk's worth).
const MAX_EXTENTS_PER_REQUEST: usize = 1 << 20;
/// Largest non-data structured chunk payload accepted (block status of
/// 2^20 extents, error messages).
const MAX_METADATA_CHUNK_BYTES: u32 = 4 + 8 * (1 << 20);
const INPUT_BUFFER_BYTES: usize = 256 * 1024;

/// Errors of the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    #[error("the server refused option {option} ({}) with reply {reply_type:#x}: {message}", option_name(*.option))]
    OptionRefused {
        option: u32,
        reply_type: u32,
        message: String,
    },
    #[error("bad NBD URI {uri:?}: {detail}")]
    Uri { uri: String, detail: String },
    #[error("{command} failed with {} ({error}): {message}", error_name(*.error))]
    Request {
        command: &'static str,
        error: u32,
        message: String,
    },
}

impl From<ProtocolError> for ClientError {
    fn from(error: ProtocolError) -> Self {
        ClientError::Protocol(error.to_string())
    }
}

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NbdTarget {
    Unix(PathBuf),
    /// `host:port` (IPv6 hosts in brackets).
    Tcp(String),
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    pub target: NbdTarget,
    pub export_name: String,
    /// Set for `nbds` / `nbds+unix` URIs.
    pub tls: Option<ClientTls>,
}

fn percent_decode(text: &str, uri: &str) -> Result<String, ClientError> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = bytes
                .get(index + 1..index + 3)
                .and_then(|pair| std::str::from_utf8(pair).ok())
                .and_then(|pair| u8::from_str_radix(pair, 16).ok());
            let Some(byte) = hex else {
                return Err(ClientError::Uri {
                    uri: uri.into(),
                    detail: format!("bad percent escape at byte {index} of {text:?}"),
                });
            };
            decoded.push(byte);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| ClientError::Uri {
        uri: uri.into(),
        detail: format!("{text:?} does not decode to UTF-8"),
    })
}

/// Parses `nbd+unix:///NAME?socket=PATH` and `nbd://HOST[:PORT][/NAME]`
/// (port 10809 by default), and their TLS forms `nbds+unix://` and
/// `nbds://`, which need `tls-certificates=DIR` (a directory with
/// `ca-cert.pem`, and `client-cert.pem` + `client-key.pem` when the server
/// checks clients, as libnbd reads it) and take `tls-hostname=NAME` (the
/// name the server certificate must carry; default the URI's host, or
/// `localhost` for a Unix socket). Names and paths may be percent-encoded.
pub fn parse_nbd_uri(uri: &str) -> Result<NbdUri, ClientError> {
    let bad = |detail: String| ClientError::Uri {
        uri: uri.into(),
        detail,
    };
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| bad("expected nbd:// or nbd+unix://".into()))?;
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash + 1..]),
        None => (rest, ""),
    };
    let export_name = percent_decode(path, uri)?;
    let tls_scheme = scheme.starts_with("nbds");
    let mut socket = None;
    let mut certificates_dir = None;
    let mut hostname = None;
    for parameter in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        match key {
            "socket" => socket = Some(percent_decode(value, uri)?),
            "tls-certificates" | "tls-hostname" if !tls_scheme => {
                return Err(bad(format!(
                    "{key} needs a TLS URI (nbds:// or nbds+unix://)"
                )))
            }
            "tls-certificates" => certificates_dir = Some(percent_decode(value, uri)?),
            "tls-hostname" => hostname = Some(percent_decode(value, uri)?),
            _ if scheme.ends_with("+unix") => {
                return Err(bad(format!("unknown query parameter {key:?}")))
            }
            _ => {}
        }
    }
    let tls = |default_host: &str| -> Result<Option<ClientTls>, ClientError> {
        if !tls_scheme {
            return Ok(None);
        }
        let certificates_dir = certificates_dir
            .clone()
            .filter(|dir| !dir.is_empty())
            .ok_or_else(|| {
                bad("a TLS URI needs tls-certificates=DIR (a directory with ca-cert.pem)".into())
            })?;
        Ok(Some(ClientTls {
            certificates_dir: PathBuf::from(certificates_dir),
            hostname: hostname.clone().unwrap_or_else(|| default_host.to_string()),
        }))
    };
    match scheme {
        "nbd+unix" | "nbds+unix" => {
            if !authority.is_empty() {
                return Err(bad(format!(
                    "nbd+unix URIs have no host (found {authority:?}); write nbd+unix:///NAME?socket=PATH"
                )));
            }
            let socket = socket
                .filter(|socket| !socket.is_empty())
                .ok_or_else(|| bad("missing ?socket=PATH".into()))?;
            Ok(NbdUri {
                target: NbdTarget::Unix(PathBuf::from(socket)),
                export_name,
                tls: tls("localhost")?,
            })
        }
        "nbd" | "nbds" => {
            if authority.is_empty() {
                return Err(bad("missing host".into()));
            }
            let has_port = if let Some(after) = authority.strip_prefix('[') {
                let close = after
                    .find(']')
                    .ok_or_else(|| bad("unclosed [ in IPv6 host".into()))?;
                after[close + 1..].starts_with(':')
            } else {
                authority.contains(':')
            };
            let address = if has_port {
                let port = authority.rsplit(':').next().unwrap_or("");
                port.parse::<u16>()
                    .map_err(|_| bad(format!("bad port {port:?}")))?;
                authority.to_string()
            } else {
                format!("{authority}:{DEFAULT_TCP_PORT}")
            };
            let host = match authority.strip_prefix('[') {
                Some(after) => after.split(']').next().unwrap_or(""),
                None => authority.split(':').next().unwrap_or(""),
            };
            Ok(NbdUri {
                target: NbdTarget::Tcp(address),
                export_name,
                tls: tls(host)?,
            })
        }
        other => Err(bad(format!(
            "unknown scheme {other:?}; expected nbd, nbd+unix, nbds or nbds+unix"
        ))),
    }
}

fn connect_stream(target: &NbdTarget) -> Result<Stream, ClientError> {
    Ok(match target {
        NbdTarget::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
        NbdTarget::Tcp(address) => crate::server::connect_tcp(address.as_str())?,
    })
}

/// What the client asks for when connecting.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The export; empty = the server's default.
    pub export_name: String,
    /// Negotiate `NBD_OPT_STRUCTURED_REPLY`.
    pub structured_replies: bool,
    /// Select `base:allocation` (needs structured replies) so
    /// `block_status` works.
    pub allocation_context: bool,
    /// Upgrade with `NBD_OPT_STARTTLS` first; a refusal is an error (no
    /// fallback to plain text).
    pub tls: Option<ClientTls>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            export_name: String::new(),
            structured_replies: true,
            allocation_context: true,
            tls: None,
        }
    }
}

/// What the server told about an export.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportInfo {
    pub size_bytes: u64,
    pub transmission_flags: u16,
    /// From `NBD_INFO_BLOCK_SIZE` when the server sent it.
    pub block_sizes: Option<BlockSizes>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub structured_replies: bool,
    pub allocation_context_id: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockSizes {
    pub minimum_bytes: u32,
    pub preferred_bytes: u32,
    pub maximum_payload_bytes: u32,
}

impl ExportInfo {
    fn has(&self, flag: u16) -> bool {
        self.transmission_flags & flag != 0
    }
    /// True when the transmission flags include `flag` (`NBD_FLAG_*`).
    pub fn has_flag(&self, flag: u16) -> bool {
        self.has(flag)
    }
    pub fn read_only(&self) -> bool {
        self.has(NBD_FLAG_READ_ONLY)
    }
    pub fn can_flush(&self) -> bool {
        self.has(NBD_FLAG_SEND_FLUSH)
    }
    pub fn can_fua(&self) -> bool {
        self.has(NBD_FLAG_SEND_FUA)
    }
    pub fn can_trim(&self) -> bool {
        self.has(NBD_FLAG_SEND_TRIM)
    }
    pub fn can_zero(&self) -> bool {
        self.has(NBD_FLAG_SEND_WRITE_ZEROES)
    }
    pub fn can_fast_zero(&self) -> bool {
        self.has(NBD_FLAG_SEND_FAST_ZERO)
    }
    pub fn can_multi_conn(&self) -> bool {
        self.has(NBD_FLAG_CAN_MULTI_CONN)
    }
}

/// One option reply: its type and data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionReply {
    pub reply_type: u32,
    pub data: Vec<u8>,
}

/// The handshake, step by step. Dropping it closes the connection
/// (a hard disconnect); [`Negotiation::abort`] ends it politely.
pub struct Negotiation {
    stream: Stream,
    input: InputBuffer,
    no_zeroes: bool,
    structured: bool,
    allocation_context_id: Option<u32>,
}

impl Negotiation {
    /// Connects and exchanges the greeting (fixed newstyle; NO_ZEROES when
    /// the server offers it).
    pub fn start(target: &NbdTarget) -> Result<Negotiation, ClientError> {
        let mut stream = connect_stream(target)?;
        let mut input = InputBuffer::with_capacity(INPUT_BUFFER_BYTES);
        if input.fill(&mut stream, 18)? == Fill::Closed {
            return Err(ClientError::Protocol(
                "server closed the connection before its greeting".into(),
            ));
        }
        let greeting = input.buffered();
        let magic = u64::from_be_bytes(greeting[0..8].try_into().unwrap_or_default());
        let opts = u64::from_be_bytes(greeting[8..16].try_into().unwrap_or_default());
        let flags = u16::from_be_bytes([greeting[16], greeting[17]]);
        input.consume(18);
        if magic != NBD_MAGIC || opts != NBD_OPTS_MAGIC {
            return Err(ClientError::Protocol(format!(
                "greeting magic {magic:#x} {opts:#x} is not NBDMAGIC IHAVEOPT (oldstyle servers are not supported)"
            )));
        }
        if flags & NBD_FLAG_FIXED_NEWSTYLE == 0 {
            return Err(ClientError::Protocol(
                "server does not offer fixed newstyle negotiation".into(),
            ));
        }
        let no_zeroes = flags & NBD_FLAG_NO_ZEROES != 0;
        let mut client_flags = NBD_FLAG_C_FIXED_NEWSTYLE;
        if no_zeroes {
            client_flags |= NBD_FLAG_C_NO_ZEROES;
        }
        stream.write_all(&client_flags.to_be_bytes())?;
        Ok(Negotiation {
            stream,
            input,
            no_zeroes,
            structured: false,
            allocation_context_id: None,
        })
    }

    /// `NBD_OPT_STARTTLS`, then the TLS handshake: everything after goes
    /// over TLS. A server that refuses is an error (this client never falls
    /// back to plain text), and so is one that sent anything unasked before
    /// the handshake.
    pub fn start_tls(&mut self, tls: &ClientTls) -> Result<(), ClientError> {
        self.option_expect_ack(NBD_OPT_STARTTLS, &[])?;
        if !self.input.buffered().is_empty() {
            return Err(ClientError::Protocol(format!(
                "server sent {} bytes after acknowledging NBD_OPT_STARTTLS, before the TLS handshake",
                self.input.buffered().len()
            )));
        }
        let socket = self.stream.try_clone()?;
        let (plain, _relay) = tls
            .start(socket)
            .map_err(|error| ClientError::Protocol(error.to_string()))?;
        // The relay ends by itself once both ends are closed.
        self.stream = plain;
        // Nothing negotiated before STARTTLS survives it.
        self.structured = false;
        self.allocation_context_id = None;
        Ok(())
    }

    fn send_option(&mut self, option: u32, data: &[u8]) -> Result<(), ClientError> {
        let mut message = Vec::with_capacity(OPTION_HEADER_BYTES + data.len());
        message.extend_from_slice(&NBD_OPTS_MAGIC.to_be_bytes());
        message.extend_from_slice(&option.to_be_bytes());
        message.extend_from_slice(&(data.len() as u32).to_be_bytes());
        message.extend_from_slice(data);
        self.stream.write_all(&message)?;
        Ok(())
    }

    fn read_option_reply(&mut self, option: u32) -> Result<OptionReply, ClientError> {
        if self
            .input
            .fill(&mut self.stream, OPTION_REPLY_HEADER_BYTES)?
            == Fill::Closed
        {
            return Err(ClientError::Protocol(format!(
                "server closed the connection instead of answering option {} ({})",
                option,
                option_name(option)
            )));
        }
        let mut bytes = [0u8; OPTION_REPLY_HEADER_BYTES];
        bytes.copy_from_slice(&self.input.buffered()[..OPTION_REPLY_HEADER_BYTES]);
        self.input.consume(OPTION_REPLY_HEADER_BYTES);
        let header = parse_option_reply_header(&bytes)?;
        if header.option != option {
            return Err(ClientError::Protocol(format!(
                "reply names option {} but {} was sent",
                header.option, option
            )));
        }
        if header.length_bytes > MAX_OPTION_REPLY_BYTES {
            return Err(ClientError::Protocol(format!(
                "option reply of {} bytes is too long",
                header.length_bytes
            )));
        }
        let mut data = vec![0u8; header.length_bytes as usize];
        self.input.read_exact(&mut self.stream, &mut data)?;
        Ok(OptionReply {
            reply_type: header.reply_type,
            data,
        })
    }

    /// Sends any option and collects its replies up to the final ACK or
    /// error (both included).
    pub fn raw_option(
        &mut self,
        option: u32,
        data: &[u8],
    ) -> Result<Vec<OptionReply>, ClientError> {
        self.send_option(option, data)?;
        let mut replies = Vec::new();
        let mut total_bytes = 0usize;
        loop {
            let reply = self.read_option_reply(option)?;
            let last =
                reply.reply_type == NBD_REP_ACK || reply.reply_type & NBD_REP_FLAG_ERROR != 0;
            total_bytes += reply.data.len();
            if total_bytes > MAX_OPTION_REPLIES_TOTAL_BYTES {
                return Err(ClientError::Protocol(format!(
                    "the replies to option {} ({}) exceed {MAX_OPTION_REPLIES_TOTAL_BYTES} bytes in all",
                    option,
                    option_name(option)
                )));
            }
            replies.push(reply);
            if last {
                return Ok(replies);
            }
            if replies.len() > 100_000 {
                return Err(ClientError::Protocol("endless option replies".into()));
            }
        }
    }

    /// Replies up to an ACK; an error reply becomes `OptionRefused`.
    fn option_expect_ack(
        &mut self,
        option: u32,
        data: &[u8],
    ) -> Result<Vec<OptionReply>, ClientError> {
        let mut replies = self.raw_option(option, data)?;
        let last = replies.pop().unwrap_or(OptionReply {
            reply_type: 0,
            data: Vec::new(),
        });
        if last.reply_type != NBD_REP_ACK {
            return Err(ClientError::OptionRefused {
                option,
                reply_type: last.reply_type,
                message: String::from_utf8_lossy(&last.data).into_owned(),
            });
        }
        Ok(replies)
    }

    /// Asks for structured replies; false when the server does not support
    /// them.
    pub fn structured_reply(&mut self) -> Result<bool, ClientError> {
        match self.option_expect_ack(NBD_OPT_STRUCTURED_REPLY, &[]) {
            Ok(_) => {
                self.structured = true;
                Ok(true)
            }
            Err(ClientError::OptionRefused { reply_type, .. })
                if reply_type == NBD_REP_ERR_UNSUP =>
            {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// `NBD_OPT_LIST`: the export names.
    pub fn list(&mut self) -> Result<Vec<String>, ClientError> {
        let mut names = Vec::new();
        for reply in self.option_expect_ack(NBD_OPT_LIST, &[])? {
            if reply.reply_type != NBD_REP_SERVER || reply.data.len() < 4 {
                return Err(ClientError::Protocol(format!(
                    "unexpected reply {:#x} to NBD_OPT_LIST",
                    reply.reply_type
                )));
            }
            let length =
                u32::from_be_bytes([reply.data[0], reply.data[1], reply.data[2], reply.data[3]])
                    as usize;
            let name = reply.data.get(4..4 + length).ok_or_else(|| {
                ClientError::Protocol("NBD_REP_SERVER name longer than its reply".into())
            })?;
            names.push(String::from_utf8_lossy(name).into_owned());
        }
        Ok(names)
    }

    fn meta_context_data(export_name: &str, queries: &[&str]) -> Vec<u8> {
        let mut data = Vec::new();
        data.extend_from_slice(&(export_name.len() as u32).to_be_bytes());
        data.extend_from_slice(export_name.as_bytes());
        data.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for query in queries {
            data.extend_from_slice(&(query.len() as u32).to_be_bytes());
            data.extend_from_slice(query.as_bytes());
        }
        data
    }

    fn meta_context_option(
        &mut self,
        option: u32,
        export_name: &str,
        queries: &[&str],
    ) -> Result<Vec<(u32, String)>, ClientError> {
        let data = Self::meta_context_data(export_name, queries);
        let mut contexts = Vec::new();
        for reply in self.option_expect_ack(option, &data)? {
            if reply.reply_type != NBD_REP_META_CONTEXT || reply.data.len() < 4 {
                return Err(ClientError::Protocol(format!(
                    "unexpected reply {:#x} to {}",
                    reply.reply_type,
                    option_name(option)
                )));
            }
            let id =
                u32::from_be_bytes([reply.data[0], reply.data[1], reply.data[2], reply.data[3]]);
            contexts.push((id, String::from_utf8_lossy(&reply.data[4..]).into_owned()));
        }
        Ok(contexts)
    }

    /// `NBD_OPT_LIST_META_CONTEXT`: (id, name) pairs (ids are 0 here).
    pub fn list_meta_contexts(
        &mut self,
        export_name: &str,
        queries: &[&str],
    ) -> Result<Vec<(u32, String)>, ClientError> {
        self.meta_context_option(NBD_OPT_LIST_META_CONTEXT, export_name, queries)
    }

    /// `NBD_OPT_SET_META_CONTEXT`: the selected (id, name) pairs. Remembers
    /// the id of `base:allocation` for block status.
    pub fn set_meta_context(
        &mut self,
        export_name: &str,
        queries: &[&str],
    ) -> Result<Vec<(u32, String)>, ClientError> {
        self.allocation_context_id = None;
        let contexts = self.meta_context_option(NBD_OPT_SET_META_CONTEXT, export_name, queries)?;
        self.allocation_context_id = contexts
            .iter()
            .find(|(_, name)| name == BASE_ALLOCATION)
            .map(|(id, _)| *id);
        Ok(contexts)
    }

    fn info_data(export_name: &str) -> Vec<u8> {
        let mut data = Vec::new();
        data.extend_from_slice(&(export_name.len() as u32).to_be_bytes());
        data.extend_from_slice(export_name.as_bytes());
        let requests = [NBD_INFO_BLOCK_SIZE, NBD_INFO_NAME, NBD_INFO_DESCRIPTION];
        data.extend_from_slice(&(requests.len() as u16).to_be_bytes());
        for request in requests {
            data.extend_from_slice(&request.to_be_bytes());
        }
        data
    }

    fn parse_info_replies(&self, replies: Vec<OptionReply>) -> Result<ExportInfo, ClientError> {
        let mut info = ExportInfo {
            structured_replies: self.structured,
            allocation_context_id: self.allocation_context_id,
            ..ExportInfo::default()
        };
        let mut saw_export = false;
        for reply in replies {
            if reply.reply_type != NBD_REP_INFO || reply.data.len() < 2 {
                return Err(ClientError::Protocol(format!(
                    "unexpected reply {:#x} to NBD_OPT_INFO/GO",
                    reply.reply_type
                )));
            }
            let data = &reply.data;
            match u16::from_be_bytes([data[0], data[1]]) {
                NBD_INFO_EXPORT if data.len() == 12 => {
                    info.size_bytes =
                        u64::from_be_bytes(data[2..10].try_into().unwrap_or_default());
                    info.transmission_flags = u16::from_be_bytes([data[10], data[11]]);
                    saw_export = true;
                }
                NBD_INFO_BLOCK_SIZE if data.len() == 14 => {
                    let word = |at: usize| {
                        u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
                    };
                    info.block_sizes = Some(BlockSizes {
                        minimum_bytes: word(2),
                        preferred_bytes: word(6),
                        maximum_payload_bytes: word(10),
                    });
                }
                NBD_INFO_NAME => info.name = Some(String::from_utf8_lossy(&data[2..]).into_owned()),
                NBD_INFO_DESCRIPTION => {
                    info.description = Some(String::from_utf8_lossy(&data[2..]).into_owned())
                }
                NBD_INFO_EXPORT | NBD_INFO_BLOCK_SIZE => {
                    return Err(ClientError::Protocol(format!(
                        "NBD_REP_INFO of {} bytes has the wrong length",
                        data.len()
                    )))
                }
                _ => {} // Unknown information is ignored, as the spec asks.
            }
        }
        if !saw_export {
            return Err(ClientError::Protocol(
                "the server accepted the export without sending NBD_INFO_EXPORT".into(),
            ));
        }
        Ok(info)
    }

    /// `NBD_OPT_INFO`: what the export looks like, without entering
    /// transmission.
    pub fn info(&mut self, export_name: &str) -> Result<ExportInfo, ClientError> {
        let replies = self.option_expect_ack(NBD_OPT_INFO, &Self::info_data(export_name))?;
        self.parse_info_replies(replies)
    }

    /// `NBD_OPT_GO`: enters transmission on `export_name`.
    pub fn go(mut self, export_name: &str) -> Result<Client, ClientError> {
        let replies = self.option_expect_ack(NBD_OPT_GO, &Self::info_data(export_name))?;
        let info = self.parse_info_replies(replies)?;
        Client::from_parts(self.stream, self.input, info)
    }

    /// `NBD_OPT_EXPORT_NAME`: the old way to enter transmission (no error
    /// reply possible: an unknown name closes the connection).
    pub fn export_name(mut self, export_name: &str) -> Result<Client, ClientError> {
        self.send_option(NBD_OPT_EXPORT_NAME, export_name.as_bytes())?;
        let length = if self.no_zeroes { 10 } else { 134 };
        if self.input.fill(&mut self.stream, length)? == Fill::Closed {
            return Err(ClientError::OptionRefused {
                option: NBD_OPT_EXPORT_NAME,
                reply_type: 0,
                message: "server closed the connection (unknown export?)".into(),
            });
        }
        let bytes = self.input.buffered();
        let info = ExportInfo {
            size_bytes: u64::from_be_bytes(bytes[0..8].try_into().unwrap_or_default()),
            transmission_flags: u16::from_be_bytes([bytes[8], bytes[9]]),
            structured_replies: self.structured,
            allocation_context_id: self.allocation_context_id,
            ..ExportInfo::default()
        };
        self.input.consume(length);
        Client::from_parts(self.stream, self.input, info)
    }

    /// `NBD_OPT_ABORT`, waiting for the ACK (a server that just closes is
    /// accepted too), then closes.
    pub fn abort(mut self) -> Result<(), ClientError> {
        self.send_option(NBD_OPT_ABORT, &[])?;
        match self.read_option_reply(NBD_OPT_ABORT) {
            Ok(reply) if reply.reply_type == NBD_REP_ACK => Ok(()),
            Ok(reply) => Err(ClientError::Protocol(format!(
                "NBD_OPT_ABORT answered with {:#x}",
                reply.reply_type
            ))),
            Err(ClientError::Protocol(_)) | Err(ClientError::Io(_)) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// A request on its way: what is needed to read its reply.
struct Pending {
    command: u16,
    offset_bytes: u64,
    length_bytes: u32,
    data: Vec<u8>,
    extents: Vec<Extent>,
    error: u32,
    error_message: String,
}

type InFlight = Arc<Mutex<FastMap<u64, Pending>>>;

fn lock(in_flight: &InFlight) -> MutexGuard<'_, FastMap<u64, Pending>> {
    in_flight.lock()
}

/// A finished request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub cookie: u64,
    pub command: u16,
    pub offset_bytes: u64,
    pub length_bytes: u32,
    /// 0 on success, else the NBD error value.
    pub error: u32,
    /// The server's message with a structured error (may be empty).
    pub error_message: String,
    /// The data of a successful read.
    pub data: Vec<u8>,
    /// `base:allocation` extents of a block status request.
    pub extents: Vec<Extent>,
}

impl Completion {
    pub fn is_ok(&self) -> bool {
        self.error == 0
    }

    /// `Err(ClientError::Request)` when the server reported an error.
    pub fn result(&self) -> Result<(), ClientError> {
        if self.error == 0 {
            Ok(())
        } else {
            Err(ClientError::Request {
                command: command_name(self.command),
                error: self.error,
                message: self.error_message.clone(),
            })
        }
    }
}

/// The sending half: submits requests without waiting for replies.
pub struct ClientSender {
    stream: Stream,
    in_flight: InFlight,
    next_cookie: u64,
    message: Vec<u8>,
    info: ExportInfo,
}

impl ClientSender {
    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// Sends any request (tests use it for odd flags and commands); returns
    /// its cookie. `payload` follows the header as given; a payload is
    /// expected by the server only for writes.
    pub fn submit(
        &mut self,
        command: u16,
        flags: u16,
        offset_bytes: u64,
        length_bytes: u32,
        payload: &[u8],
    ) -> Result<u64, ClientError> {
        let cookie = self.next_cookie;
        self.next_cookie = self.next_cookie.wrapping_add(1);
        let header = RequestHeader {
            flags,
            command,
            cookie,
            offset_bytes,
            length_bytes,
        };
        if command != NBD_CMD_DISC {
            lock(&self.in_flight).insert(
                cookie,
                Pending {
                    command,
                    offset_bytes,
                    length_bytes,
                    data: Vec::new(),
                    extents: Vec::new(),
                    error: 0,
                    error_message: String::new(),
                },
            );
        }
        let sent = if payload.len() <= 64 * 1024 {
            self.message.clear();
            self.message.extend_from_slice(&header.encode());
            self.message.extend_from_slice(payload);
            self.stream.write_all(&self.message)
        } else {
            self.stream
                .write_all(&header.encode())
                .and_then(|()| self.stream.write_all(payload))
        };
        if let Err(error) = sent {
            lock(&self.in_flight).remove(&cookie);
            return Err(error.into());
        }
        Ok(cookie)
    }

    pub fn submit_read(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
    ) -> Result<u64, ClientError> {
        self.submit(NBD_CMD_READ, 0, offset_bytes, length_bytes, &[])
    }

    pub fn submit_write(
        &mut self,
        offset_bytes: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<u64, ClientError> {
        let length = u32::try_from(data.len()).map_err(|_| {
            ClientError::Protocol(format!(
                "a write of {} bytes does not fit a request",
                data.len()
            ))
        })?;
        let flags = if fua { NBD_CMD_FLAG_FUA } else { 0 };
        self.submit(NBD_CMD_WRITE, flags, offset_bytes, length, data)
    }

    pub fn submit_flush(&mut self) -> Result<u64, ClientError> {
        self.submit(NBD_CMD_FLUSH, 0, 0, 0, &[])
    }

    pub fn submit_trim(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
        fua: bool,
    ) -> Result<u64, ClientError> {
        let flags = if fua { NBD_CMD_FLAG_FUA } else { 0 };
        self.submit(NBD_CMD_TRIM, flags, offset_bytes, length_bytes, &[])
    }

    /// `flags`: any of `NBD_CMD_FLAG_FUA`, `NBD_CMD_FLAG_NO_HOLE`,
    /// `NBD_CMD_FLAG_FAST_ZERO`.
    pub fn submit_write_zeroes(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
        flags: u16,
    ) -> Result<u64, ClientError> {
        self.submit(NBD_CMD_WRITE_ZEROES, flags, offset_bytes, length_bytes, &[])
    }

    pub fn submit_block_status(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
        req_one: bool,
    ) -> Result<u64, ClientError> {
        let flags = if req_one { NBD_CMD_FLAG_REQ_ONE } else { 0 };
        self.submit(NBD_CMD_BLOCK_STATUS, flags, offset_bytes, length_bytes, &[])
    }

    /// `NBD_CMD_DISC` (no reply), then stops sending. The server still
    /// answers requests already in flight.
    pub fn submit_disconnect(&mut self) -> Result<(), ClientError> {
        self.submit(NBD_CMD_DISC, 0, 0, 0, &[])?;
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        Ok(())
    }
}

/// The receiving half: completions in order of arrival.
pub struct ClientReceiver {
    stream: Stream,
    input: InputBuffer,
    in_flight: InFlight,
    allocation_context_id: Option<u32>,
    scratch: Vec<u8>,
}

impl ClientReceiver {
    /// Requests sent and not yet completed.
    pub fn in_flight(&self) -> usize {
        lock(&self.in_flight).len()
    }

    /// Blocks until some request completes. A server that closes the
    /// connection gives `Io(UnexpectedEof)`.
    pub fn receive(&mut self) -> Result<Completion, ClientError> {
        loop {
            if self.input.fill(&mut self.stream, 4)? == Fill::Closed {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )
                .into());
            }
            let buffered = self.input.buffered();
            let header_bytes =
                reply_header_bytes(&[buffered[0], buffered[1], buffered[2], buffered[3]])?;
            if self.input.fill(&mut self.stream, header_bytes)? == Fill::Closed {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
            let header = parse_reply_header(&self.input.buffered()[..header_bytes])?;
            self.input.consume(header_bytes);
            match header {
                ReplyHeader::Simple { error, cookie } => {
                    let mut pending = lock(&self.in_flight).remove(&cookie).ok_or_else(|| {
                        ClientError::Protocol(format!("simple reply for unknown cookie {cookie}"))
                    })?;
                    pending.error = error;
                    if pending.command == NBD_CMD_READ && error == 0 {
                        pending.data.resize(pending.length_bytes as usize, 0);
                        self.input.read_exact(&mut self.stream, &mut pending.data)?;
                    }
                    return Ok(finish(cookie, pending));
                }
                ReplyHeader::Chunk {
                    flags,
                    chunk_type,
                    cookie,
                    length_bytes,
                } => {
                    if let Some(completion) = self.chunk(flags, chunk_type, cookie, length_bytes)? {
                        return Ok(completion);
                    }
                }
            }
        }
    }

    fn chunk(
        &mut self,
        flags: u16,
        chunk_type: u16,
        cookie: u64,
        length_bytes: u32,
    ) -> Result<Option<Completion>, ClientError> {
        // Taken out of the table while its chunk is read, so a sender on
        // another thread never waits for this socket read. Only this
        // receiver touches entries already in the table.
        let mut pending = lock(&self.in_flight).remove(&cookie).ok_or_else(|| {
            ClientError::Protocol(format!("structured reply for unknown cookie {cookie}"))
        })?;
        self.read_chunk(&mut pending, flags, chunk_type, length_bytes)?;
        if flags & NBD_REPLY_FLAG_DONE == 0 {
            lock(&self.in_flight).insert(cookie, pending);
            return Ok(None);
        }
        Ok(Some(finish(cookie, pending)))
    }

    fn read_chunk(
        &mut self,
        pending: &mut Pending,
        flags: u16,
        chunk_type: u16,
        length_bytes: u32,
    ) -> Result<(), ClientError> {
        let length = length_bytes as usize;
        if chunk_type == NBD_REPLY_TYPE_OFFSET_DATA {
            if pending.command != NBD_CMD_READ || length < 9 {
                return Err(ClientError::Protocol(format!(
                    "OFFSET_DATA chunk of {length} bytes for a {} request",
                    command_name(pending.command)
                )));
            }
            let mut offset = [0u8; 8];
            self.input.read_exact(&mut self.stream, &mut offset)?;
            let offset = u64::from_be_bytes(offset);
            let data_length = length - 8;
            let start = offset.checked_sub(pending.offset_bytes);
            let fits = start.is_some_and(|start| {
                start.saturating_add(data_length as u64) <= u64::from(pending.length_bytes)
            });
            if !fits {
                return Err(ClientError::Protocol(format!(
                    "data chunk at {offset} (+{data_length}) outside the request"
                )));
            }
            let start = start.unwrap_or(0) as usize;
            pending.data.resize(pending.length_bytes as usize, 0);
            self.input.read_exact(
                &mut self.stream,
                &mut pending.data[start..start + data_length],
            )?;
        } else {
            if length_bytes > MAX_METADATA_CHUNK_BYTES {
                return Err(ClientError::Protocol(format!(
                    "chunk type {chunk_type} of {length} bytes is too long"
                )));
            }
            self.scratch.resize(length, 0);
            self.input.read_exact(&mut self.stream, &mut self.scratch)?;
            let payload = &self.scratch[..];
            match chunk_type {
                NBD_REPLY_TYPE_NONE => {
                    if length != 0 || flags & NBD_REPLY_FLAG_DONE == 0 {
                        return Err(ClientError::Protocol("malformed NONE chunk".into()));
                    }
                }
                NBD_REPLY_TYPE_OFFSET_HOLE => {
                    if length != 12 || pending.command != NBD_CMD_READ {
                        return Err(ClientError::Protocol("malformed OFFSET_HOLE chunk".into()));
                    }
                    let offset = u64::from_be_bytes(payload[0..8].try_into().unwrap_or_default());
                    let size =
                        u32::from_be_bytes(payload[8..12].try_into().unwrap_or_default()) as u64;
                    // Checked arithmetic: the offset is the server's, and
                    // offset - request offset + size can exceed u64.
                    let range = offset.checked_sub(pending.offset_bytes).and_then(|start| {
                        start
                            .checked_add(size)
                            .filter(|end| *end <= u64::from(pending.length_bytes))
                            .map(|end| start as usize..end as usize)
                    });
                    match range {
                        Some(range) => {
                            pending.data.resize(pending.length_bytes as usize, 0);
                            pending.data[range].fill(0);
                        }
                        None => {
                            return Err(ClientError::Protocol(
                                "hole chunk outside the request".into(),
                            ))
                        }
                    }
                }
                NBD_REPLY_TYPE_BLOCK_STATUS => {
                    if length < 12 || !(length - 4).is_multiple_of(8) {
                        return Err(ClientError::Protocol(format!(
                            "BLOCK_STATUS chunk of {length} bytes"
                        )));
                    }
                    let context = u32::from_be_bytes(payload[0..4].try_into().unwrap_or_default());
                    if Some(context) == self.allocation_context_id {
                        if pending.extents.len() + (length - 4) / 8 > MAX_EXTENTS_PER_REQUEST {
                            return Err(ClientError::Protocol(format!(
                                "more than {MAX_EXTENTS_PER_REQUEST} extents for one block status request"
                            )));
                        }
                        for descriptor in payload[4..].chunks_exact(8) {
                            pending.extents.push(Extent {
                                length_bytes: u64::from(u32::from_be_bytes(
                                    descriptor[0..4].try_into().unwrap_or_default(),
                                )),
                                flags: u32::from_be_bytes(
                                    descriptor[4..8].try_into().unwrap_or_default(),
                                ),
                            });
                        }
                    }
                }
                _ if chunk_type & 0x8000 != 0 => {
                    if length < 6 {
                        return Err(ClientError::Protocol(
                            "error chunk shorter than 6 bytes".into(),
                        ));
                    }
                    let error = u32::from_be_bytes(payload[0..4].try_into().unwrap_or_default());
                    let message_length = usize::from(u16::from_be_bytes([payload[4], payload[5]]));
                    let message = payload.get(6..6 + message_length).ok_or_else(|| {
                        ClientError::Protocol("error message longer than its chunk".into())
                    })?;
                    pending.error = if error == 0 { NBD_EINVAL } else { error };
                    pending.error_message = String::from_utf8_lossy(message).into_owned();
                }
                other => {
                    return Err(ClientError::Protocol(format!(
                        "unknown structured reply type {other}"
                    )))
                }
            }
        }
        Ok(())
    }
}

fn finish(cookie: u64, pending: Pending) -> Completion {
    let mut data = pending.data;
    if pending.command == NBD_CMD_READ && pending.error == 0 {
        data.resize(pending.length_bytes as usize, 0);
    } else {
        data = Vec::new();
    }
    Completion {
        cookie,
        command: pending.command,
        offset_bytes: pending.offset_bytes,
        length_bytes: pending.length_bytes,
        error: pending.error,
        error_message: pending.error_message,
        data,
        extents: pending.extents,
    }
}

/// A connected client in the transmission phase.
pub struct Client {
    sender: ClientSender,
    receiver: ClientReceiver,
    /// Completions that arrived while a blocking helper waited for another.
    early: VecDeque<Completion>,
}

impl Client {
    /// Connects, negotiates as `options` asks, enters transmission.
    pub fn connect(target: &NbdTarget, options: &ConnectOptions) -> Result<Client, ClientError> {
        let mut negotiation = Negotiation::start(target)?;
        if let Some(tls) = &options.tls {
            negotiation.start_tls(tls)?;
        }
        if options.structured_replies
            && negotiation.structured_reply()?
            && options.allocation_context
        {
            match negotiation.set_meta_context(&options.export_name, &[BASE_ALLOCATION]) {
                Ok(_) => {}
                // Servers without metadata contexts still serve IO.
                Err(ClientError::OptionRefused { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        negotiation.go(&options.export_name)
    }

    /// Connects to an `nbd://` or `nbd+unix://` URI with default options.
    pub fn connect_uri(uri: &str) -> Result<Client, ClientError> {
        let parsed = parse_nbd_uri(uri)?;
        let options = ConnectOptions {
            export_name: parsed.export_name,
            tls: parsed.tls,
            ..ConnectOptions::default()
        };
        Client::connect(&parsed.target, &options)
    }

    fn from_parts(
        stream: Stream,
        input: InputBuffer,
        info: ExportInfo,
    ) -> Result<Client, ClientError> {
        let in_flight: InFlight = Arc::new(Mutex::new(FastMap::default()));
        let write_stream = stream.try_clone()?;
        Ok(Client {
            receiver: ClientReceiver {
                stream,
                input,
                in_flight: Arc::clone(&in_flight),
                allocation_context_id: info.allocation_context_id,
                scratch: Vec::new(),
            },
            sender: ClientSender {
                stream: write_stream,
                in_flight,
                next_cookie: 1,
                message: Vec::with_capacity(64 * 1024 + REQUEST_HEADER_BYTES),
                info,
            },
            early: VecDeque::new(),
        })
    }

    pub fn info(&self) -> &ExportInfo {
        &self.sender.info
    }

    /// The two halves, for a submitting thread and a receiving thread.
    /// Completions already collected by blocking helpers are dropped.
    pub fn split(self) -> (ClientSender, ClientReceiver) {
        (self.sender, self.receiver)
    }

    pub fn sender(&mut self) -> &mut ClientSender {
        &mut self.sender
    }

    /// The next completion, in order of arrival.
    pub fn receive(&mut self) -> Result<Completion, ClientError> {
        match self.early.pop_front() {
            Some(completion) => Ok(completion),
            None => self.receiver.receive(),
        }
    }

    /// Waits for the completion of `cookie`, keeping others for `receive`.
    pub fn wait_for(&mut self, cookie: u64) -> Result<Completion, ClientError> {
        if let Some(index) = self
            .early
            .iter()
            .position(|completion| completion.cookie == cookie)
        {
            if let Some(completion) = self.early.remove(index) {
                return Ok(completion);
            }
        }
        loop {
            let completion = self.receiver.receive()?;
            if completion.cookie == cookie {
                return Ok(completion);
            }
            self.early.push_back(completion);
        }
    }

    fn run(&mut self, cookie: Result<u64, ClientError>) -> Result<Completion, ClientError> {
        let completion = self.wait_for(cookie?)?;
        completion.result()?;
        Ok(completion)
    }

    /// Reads `buffer.len()` bytes at `offset_bytes` (servers need accept
    /// no more than 32 MiB; tierd accepts 64 MiB).
    pub fn read(&mut self, offset_bytes: u64, buffer: &mut [u8]) -> Result<(), ClientError> {
        let length = u32::try_from(buffer.len()).map_err(|_| {
            ClientError::Protocol(format!(
                "a read of {} bytes does not fit a request",
                buffer.len()
            ))
        })?;
        let cookie = self.sender.submit_read(offset_bytes, length);
        let completion = self.run(cookie)?;
        buffer.copy_from_slice(&completion.data);
        Ok(())
    }

    pub fn write(&mut self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), ClientError> {
        let cookie = self.sender.submit_write(offset_bytes, data, fua);
        self.run(cookie).map(drop)
    }

    pub fn flush(&mut self) -> Result<(), ClientError> {
        let cookie = self.sender.submit_flush();
        self.run(cookie).map(drop)
    }

    pub fn trim(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
        fua: bool,
    ) -> Result<(), ClientError> {
        let cookie = self.sender.submit_trim(offset_bytes, length_bytes, fua);
        self.run(cookie).map(drop)
    }

    /// `flags`: any of `NBD_CMD_FLAG_FUA`, `NBD_CMD_FLAG_NO_HOLE`,
    /// `NBD_CMD_FLAG_FAST_ZERO`.
    pub fn write_zeroes(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
        flags: u16,
    ) -> Result<(), ClientError> {
        let cookie = self
            .sender
            .submit_write_zeroes(offset_bytes, length_bytes, flags);
        self.run(cookie).map(drop)
    }

    /// `base:allocation` extents from `offset_bytes` (needs the context
    /// negotiated).
    pub fn block_status(
        &mut self,
        offset_bytes: u64,
        length_bytes: u32,
        req_one: bool,
    ) -> Result<Vec<Extent>, ClientError> {
        let cookie = self
            .sender
            .submit_block_status(offset_bytes, length_bytes, req_one);
        Ok(self.run(cookie)?.extents)
    }

    /// Soft disconnect: waits for every request in flight, sends
    /// `NBD_CMD_DISC`, and waits for the server to close.
    pub fn disconnect(mut self) -> Result<(), ClientError> {
        while self.receiver.in_flight() > 0 {
            self.receiver.receive()?;
        }
        self.sender.submit_disconnect()?;
        match self.receiver.input.fill(&mut self.receiver.stream, 1) {
            Ok(Fill::Closed) | Err(_) => Ok(()),
            Ok(Fill::Ready) => Err(ClientError::Protocol(
                "the server sent bytes after NBD_CMD_DISC".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hostile server on a Unix socket: says `bytes` (its whole side of
    /// the conversation), half-closes, and drains the client until it hangs
    /// up.
    fn hostile_server(
        bytes: Vec<u8>,
    ) -> (tempfile::TempDir, NbdTarget, std::thread::JoinHandle<()>) {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("hostile.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut drain = stream.try_clone().unwrap();
            let drainer = std::thread::spawn(move || {
                let _ = io::copy(&mut drain, &mut io::sink());
            });
            let _ = stream.write_all(&bytes);
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let _ = drainer.join();
        });
        (directory, NbdTarget::Unix(path), server)
    }

    fn greeting(out: &mut Vec<u8>) {
        out.extend_from_slice(&NBD_MAGIC.to_be_bytes());
        out.extend_from_slice(&NBD_OPTS_MAGIC.to_be_bytes());
        out.extend_from_slice(&(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES).to_be_bytes());
    }

    /// The server's side of `Client::connect` with default options:
    /// structured replies, `base:allocation` as context 1, then GO.
    fn handshake() -> Vec<u8> {
        let mut out = Vec::new();
        greeting(&mut out);
        encode_option_reply(&mut out, NBD_OPT_STRUCTURED_REPLY, NBD_REP_ACK, &[]);
        let mut context = 1u32.to_be_bytes().to_vec();
        context.extend_from_slice(BASE_ALLOCATION.as_bytes());
        encode_option_reply(
            &mut out,
            NBD_OPT_SET_META_CONTEXT,
            NBD_REP_META_CONTEXT,
            &context,
        );
        encode_option_reply(&mut out, NBD_OPT_SET_META_CONTEXT, NBD_REP_ACK, &[]);
        let mut export = NBD_INFO_EXPORT.to_be_bytes().to_vec();
        export.extend_from_slice(&(1u64 << 20).to_be_bytes());
        export.extend_from_slice(&NBD_FLAG_HAS_FLAGS.to_be_bytes());
        encode_option_reply(&mut out, NBD_OPT_GO, NBD_REP_INFO, &export);
        encode_option_reply(&mut out, NBD_OPT_GO, NBD_REP_ACK, &[]);
        out
    }

    fn protocol_message(result: Result<impl std::fmt::Debug, ClientError>) -> String {
        match result {
            Err(ClientError::Protocol(message)) => message,
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    /// Found by the `nbd_client` fuzz target: a hole at offset u64::MAX
    /// overflowed `start + size` (a panic with overflow checks, an
    /// out-of-order slice range without).
    #[test]
    fn a_hole_chunk_whose_end_overflows_is_a_protocol_error() {
        // Against a request at 4096: offset - 4096 + size overflows u64 in
        // the first two; the last starts before the request.
        for (offset, size) in [(u64::MAX, 4097u32), (u64::MAX - 4000, u32::MAX), (0, 1)] {
            let mut bytes = handshake();
            encode_chunk_header(
                &mut bytes,
                NBD_REPLY_FLAG_DONE,
                NBD_REPLY_TYPE_OFFSET_HOLE,
                1,
                12,
            );
            bytes.extend_from_slice(&offset.to_be_bytes());
            bytes.extend_from_slice(&size.to_be_bytes());
            let (_directory, target, server) = hostile_server(bytes);
            let mut client = Client::connect(&target, &ConnectOptions::default()).unwrap();
            let mut buffer = [7u8; 4096];
            let message = protocol_message(client.read(4096, &mut buffer));
            assert_eq!(message, "hole chunk outside the request");
            drop(client);
            server.join().unwrap();
        }
    }

    #[test]
    fn option_replies_are_bounded_in_total() {
        let mut bytes = Vec::new();
        greeting(&mut bytes);
        // 17 replies of 1 MiB each (the most one reply may carry).
        let mut data = vec![b'n'; 1 << 20];
        data[..4].copy_from_slice(&((1u32 << 20) - 4).to_be_bytes());
        for _ in 0..17 {
            encode_option_reply(&mut bytes, NBD_OPT_LIST, NBD_REP_SERVER, &data);
        }
        encode_option_reply(&mut bytes, NBD_OPT_LIST, NBD_REP_ACK, &[]);
        let (_directory, target, server) = hostile_server(bytes);
        let mut negotiation = Negotiation::start(&target).unwrap();
        let message = protocol_message(negotiation.list());
        assert!(
            message.contains("exceed 16777216 bytes in all"),
            "{message}"
        );
        drop(negotiation);
        server.join().unwrap();
    }

    #[test]
    fn block_status_extents_are_bounded_per_request() {
        let mut bytes = handshake();
        for (count, flags) in [(MAX_EXTENTS_PER_REQUEST, 0), (1, NBD_REPLY_FLAG_DONE)] {
            encode_chunk_header(
                &mut bytes,
                flags,
                NBD_REPLY_TYPE_BLOCK_STATUS,
                1,
                4 + 8 * count as u32,
            );
            bytes.extend_from_slice(&1u32.to_be_bytes());
            for _ in 0..count {
                bytes.extend_from_slice(&1u32.to_be_bytes());
                bytes.extend_from_slice(&0u32.to_be_bytes());
            }
        }
        let (_directory, target, server) = hostile_server(bytes);
        let mut client = Client::connect(&target, &ConnectOptions::default()).unwrap();
        let message = protocol_message(client.block_status(0, 1 << 20, false));
        assert!(
            message.contains("extents for one block status request"),
            "{message}"
        );
        drop(client);
        server.join().unwrap();
    }

    #[test]
    fn unix_uris_parse() {
        let uri = parse_nbd_uri("nbd+unix:///disk%201?socket=/tmp/a%20b.sock").unwrap();
        assert_eq!(uri.target, NbdTarget::Unix(PathBuf::from("/tmp/a b.sock")));
        assert_eq!(uri.export_name, "disk 1");
        let default = parse_nbd_uri("nbd+unix:///?socket=/run/x").unwrap();
        assert_eq!(default.export_name, "");
        assert!(parse_nbd_uri("nbd+unix:///x").is_err());
        assert!(parse_nbd_uri("nbd+unix://host/x?socket=/a").is_err());
    }

    #[test]
    fn tcp_uris_parse_with_and_without_port() {
        let uri = parse_nbd_uri("nbd://127.0.0.1:1234/vol").unwrap();
        assert_eq!(uri.target, NbdTarget::Tcp("127.0.0.1:1234".into()));
        assert_eq!(uri.export_name, "vol");
        let uri = parse_nbd_uri("nbd://example").unwrap();
        assert_eq!(uri.target, NbdTarget::Tcp("example:10809".into()));
        assert_eq!(uri.export_name, "");
        let uri = parse_nbd_uri("nbd://[::1]/a").unwrap();
        assert_eq!(uri.target, NbdTarget::Tcp("[::1]:10809".into()));
        let uri = parse_nbd_uri("nbd://[::1]:99/").unwrap();
        assert_eq!(uri.target, NbdTarget::Tcp("[::1]:99".into()));
        assert!(parse_nbd_uri("nbd://host:notaport/x").is_err());
        assert!(
            parse_nbd_uri("nbds://host/x").is_err(),
            "no tls-certificates"
        );
        assert!(parse_nbd_uri("nbd://host/x?tls-certificates=/d").is_err());
        let uri = parse_nbd_uri("nbds://example:99/x?tls-certificates=/pki").unwrap();
        assert_eq!(
            uri.tls,
            Some(ClientTls {
                certificates_dir: PathBuf::from("/pki"),
                hostname: "example".into()
            })
        );
        let uri = parse_nbd_uri(
            "nbds+unix:///v?socket=/s&tls-certificates=/pki&tls-hostname=server.test",
        )
        .unwrap();
        assert_eq!(uri.target, NbdTarget::Unix(PathBuf::from("/s")));
        assert_eq!(uri.tls.unwrap().hostname, "server.test");
        let uri = parse_nbd_uri("nbds+unix:///v?socket=/s&tls-certificates=/pki").unwrap();
        assert_eq!(uri.tls.unwrap().hostname, "localhost");
        assert_eq!(parse_nbd_uri("nbd://h/x").unwrap().tls, None);
        assert!(parse_nbd_uri("http://host/x").is_err());
        assert!(parse_nbd_uri("nbd://host/%zz").is_err());
    }
}
