//! The NBD client (`tierd_nbd::client`, used by `tierd replay`) against a
//! hostile server: the input is everything the server says.
//!
//! A listener on a Unix socket in a private temporary directory accepts the
//! client's connection; a thread writes the input (after the mode byte) as
//! the server's side of the whole conversation, then half-closes, while
//! another drains what the client sends. The client, in this thread, runs a
//! fixed script whose steps the mode byte picks:
//!
//! | bit | step |
//! |---|---|
//! | 0 | `structured_reply` |
//! | 1 | `list` |
//! | 2 | `set_meta_context` for `base:allocation` |
//! | 3 | `info` on the export |
//! | 4 | enter with `NBD_OPT_EXPORT_NAME` instead of `NBD_OPT_GO` |
//! | 5 | the blocking helpers instead of pipelined submit + receive |
//! | 6 | `list_meta_contexts` |
//! | 7 | `abort` instead of entering transmission |
//!
//! then the seven requests of [`REQUESTS`] (cookies 1 to 7) and a soft
//! disconnect. The first error ends the session (a server's error reply to
//! a request does not: that is an answer).
//!
//! Checked beyond "no panic": the client ends on its own once the server's
//! bytes end (a client still connected [`HANG_TIMEOUT`] after it last sent
//! something aborts the process); every completion belongs to a request in
//! flight, arrives once, and carries that request's command, offset and
//! length, with exactly `length` bytes of data for a successful read and
//! none otherwise; with the counting allocator installed, no single
//! allocation exceeds [`MAX_ALLOCATION_BYTES`] and the live memory never
//! grows by more than [`MAX_GROWTH_BYTES`] (a length field from the server
//! must not become an allocation).

use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use tierd_nbd::client::{Completion, Negotiation};
use tierd_nbd::proto::*;
use tierd_nbd::{Client, ClientError, NbdTarget};

use crate::alloc_watch;

/// Longest server input used.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
/// How long the client may stay connected after its last message.
pub const HANG_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest single allocation allowed: the client's legitimate ones are its
/// 256 KiB input buffer, an option reply (at most 1 MiB) and a metadata
/// chunk (at most 8 MiB + 4 bytes); reads here are 1 KiB.
pub const MAX_ALLOCATION_BYTES: usize = 9 << 20;
/// Largest growth of live memory during one session (the three above at
/// once, plus the input copy and thread stacks' bookkeeping).
pub const MAX_GROWTH_BYTES: usize = 16 << 20;

/// The export name the client asks for.
pub const EXPORT: &str = "disk";
/// The size of the export in the seeds' replies.
pub const EXPORT_BYTES: u64 = 1 << 20;

/// One request of the script.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    Read {
        offset_bytes: u64,
        length_bytes: u32,
    },
    Write {
        offset_bytes: u64,
        length_bytes: u32,
    },
    BlockStatus {
        offset_bytes: u64,
        length_bytes: u32,
    },
    Flush,
    Trim {
        offset_bytes: u64,
        length_bytes: u32,
    },
    WriteZeroes {
        offset_bytes: u64,
        length_bytes: u32,
    },
}

/// The requests, in order: request `i` gets cookie `i + 1`.
pub const REQUESTS: [Step; 7] = [
    Step::Read {
        offset_bytes: 0,
        length_bytes: 1024,
    },
    Step::Write {
        offset_bytes: 4096,
        length_bytes: 512,
    },
    Step::BlockStatus {
        offset_bytes: 0,
        length_bytes: 65536,
    },
    Step::Flush,
    Step::Trim {
        offset_bytes: 8192,
        length_bytes: 4096,
    },
    Step::WriteZeroes {
        offset_bytes: 12288,
        length_bytes: 4096,
    },
    Step::Read {
        offset_bytes: 1024,
        length_bytes: 100,
    },
];

impl Step {
    fn command(self) -> u16 {
        match self {
            Step::Read { .. } => NBD_CMD_READ,
            Step::Write { .. } => NBD_CMD_WRITE,
            Step::BlockStatus { .. } => NBD_CMD_BLOCK_STATUS,
            Step::Flush => NBD_CMD_FLUSH,
            Step::Trim { .. } => NBD_CMD_TRIM,
            Step::WriteZeroes { .. } => NBD_CMD_WRITE_ZEROES,
        }
    }

    fn range(self) -> (u64, u32) {
        match self {
            Step::Read {
                offset_bytes,
                length_bytes,
            }
            | Step::Write {
                offset_bytes,
                length_bytes,
            }
            | Step::BlockStatus {
                offset_bytes,
                length_bytes,
            }
            | Step::Trim {
                offset_bytes,
                length_bytes,
            }
            | Step::WriteZeroes {
                offset_bytes,
                length_bytes,
            } => (offset_bytes, length_bytes),
            Step::Flush => (0, 0),
        }
    }
}

pub const STRUCTURED: u8 = 1 << 0;
pub const LIST: u8 = 1 << 1;
pub const SET_META_CONTEXT: u8 = 1 << 2;
pub const INFO: u8 = 1 << 3;
pub const EXPORT_NAME: u8 = 1 << 4;
pub const BLOCKING: u8 = 1 << 5;
pub const LIST_META_CONTEXTS: u8 = 1 << 6;
pub const ABORT: u8 = 1 << 7;

/// How a session ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every step succeeded; `completions` requests completed (with an
    /// error reply or not) before a clean disconnect.
    Completed { completions: usize },
    /// The handshake was aborted politely.
    Aborted,
    /// A step failed: the client gave up with this error.
    Failed {
        step: &'static str,
        error: ClientError,
    },
}

/// The listener, created on first use in a private directory and kept for
/// the life of the process.
fn listener() -> &'static (PathBuf, UnixListener) {
    static LISTENER: OnceLock<(PathBuf, UnixListener)> = OnceLock::new();
    LISTENER.get_or_init(|| {
        ignore_sigpipe();
        let directory =
            std::env::temp_dir().join(format!("tierd-fuzz-client-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("create the socket directory");
        let path = directory.join("server.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("listen on the socket");
        (path, listener)
    })
}

/// libFuzzer's `main` is not Rust's, so SIGPIPE still has its default
/// action (end the process) in a fuzzing run; `tierd` ignores it, so
/// writing to a closed peer is an `EPIPE` error, as here.
fn ignore_sigpipe() {
    // SAFETY: installs the "ignore" disposition; no handler code runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// The hostile server's side: writes `bytes`, half-closes, and drains the
/// client until it hangs up; aborts the process when the client stays
/// silent and connected for [`HANG_TIMEOUT`].
fn serve(listener: &UnixListener, bytes: Vec<u8>) {
    let (mut stream, _) = listener.accept().expect("accept the client");
    let mut drain = stream.try_clone().expect("clone the server's socket");
    let drainer = std::thread::spawn(move || {
        drain
            .set_read_timeout(Some(HANG_TIMEOUT))
            .expect("set a read timeout");
        let mut buffer = [0u8; 16 * 1024];
        if !crate::drain_until_closed(&mut drain, &mut buffer) {
            eprintln!(
                "nbd_client: the client neither sent anything nor hung up for {HANG_TIMEOUT:?} after the server's bytes ended: a hang"
            );
            std::process::abort();
        }
    });
    // The client may hang up before reading everything (EPIPE).
    if stream.write_all(&bytes).is_ok() {
        let _ = stream.shutdown(Shutdown::Write);
    }
    drop(stream);
    let _ = drainer.join();
}

/// What is known about the requests in flight, to check completions.
struct Ledger {
    submitted: Vec<(u64, Step)>,
    completed: Vec<u64>,
}

impl Ledger {
    fn check(&mut self, completion: &Completion) {
        let Some((_, step)) = self
            .submitted
            .iter()
            .find(|(cookie, _)| *cookie == completion.cookie)
        else {
            panic!("completion for cookie {} never sent", completion.cookie);
        };
        assert!(
            !self.completed.contains(&completion.cookie),
            "cookie {} completed twice",
            completion.cookie
        );
        self.completed.push(completion.cookie);
        let (offset_bytes, length_bytes) = step.range();
        assert_eq!(completion.command, step.command(), "{completion:?}");
        assert_eq!(completion.offset_bytes, offset_bytes, "{completion:?}");
        assert_eq!(completion.length_bytes, length_bytes, "{completion:?}");
        if completion.command == NBD_CMD_READ && completion.is_ok() {
            assert_eq!(completion.data.len(), length_bytes as usize);
        } else {
            assert!(completion.data.is_empty(), "{completion:?}");
        }
        if !completion.is_ok() {
            assert!(!completion.result().unwrap_err().to_string().is_empty());
        }
    }
}

fn failed(step: &'static str) -> impl FnOnce(ClientError) -> Outcome {
    move |error| Outcome::Failed { step, error }
}

/// The handshake steps of `mode`; `Ok(None)` after an abort.
fn negotiate(mode: u8, target: &NbdTarget) -> Result<Option<Client>, Outcome> {
    let mut negotiation = Negotiation::start(target).map_err(failed("start"))?;
    let mut structured = false;
    if mode & STRUCTURED != 0 {
        structured = negotiation
            .structured_reply()
            .map_err(failed("structured_reply"))?;
    }
    if mode & LIST != 0 {
        let names = negotiation.list().map_err(failed("list"))?;
        assert!(
            names.len() <= MAX_INPUT_BYTES / 20,
            "more names than replies"
        );
    }
    if mode & LIST_META_CONTEXTS != 0 {
        let contexts = negotiation
            .list_meta_contexts(EXPORT, &[BASE_ALLOCATION])
            .map_err(failed("list_meta_contexts"))?;
        assert!(contexts.len() <= MAX_INPUT_BYTES / 20);
    }
    if mode & SET_META_CONTEXT != 0 {
        negotiation
            .set_meta_context(EXPORT, &[BASE_ALLOCATION])
            .map_err(failed("set_meta_context"))?;
    }
    if mode & INFO != 0 {
        let info = negotiation.info(EXPORT).map_err(failed("info"))?;
        assert_eq!(info.structured_replies, structured);
    }
    if mode & ABORT != 0 {
        negotiation.abort().map_err(failed("abort"))?;
        return Ok(None);
    }
    let client = if mode & EXPORT_NAME != 0 {
        negotiation
            .export_name(EXPORT)
            .map_err(failed("export_name"))?
    } else {
        negotiation.go(EXPORT).map_err(failed("go"))?
    };
    assert_eq!(client.info().structured_replies, structured);
    Ok(Some(client))
}

/// Submits every request, then receives until none is in flight.
fn pipelined(client: &mut Client, ledger: &mut Ledger) -> Result<(), Outcome> {
    let payload = [0xa5u8; 512];
    for step in REQUESTS {
        let sender = client.sender();
        let cookie = match step {
            Step::Read {
                offset_bytes,
                length_bytes,
            } => sender.submit_read(offset_bytes, length_bytes),
            Step::Write {
                offset_bytes,
                length_bytes,
            } => sender.submit_write(offset_bytes, &payload[..length_bytes as usize], true),
            Step::BlockStatus {
                offset_bytes,
                length_bytes,
            } => sender.submit_block_status(offset_bytes, length_bytes, false),
            Step::Flush => sender.submit_flush(),
            Step::Trim {
                offset_bytes,
                length_bytes,
            } => sender.submit_trim(offset_bytes, length_bytes, false),
            Step::WriteZeroes {
                offset_bytes,
                length_bytes,
            } => sender.submit_write_zeroes(offset_bytes, length_bytes, NBD_CMD_FLAG_NO_HOLE),
        }
        .map_err(failed("submit"))?;
        ledger.submitted.push((cookie, step));
    }
    while ledger.completed.len() < ledger.submitted.len() {
        let completion = client.receive().map_err(failed("receive"))?;
        ledger.check(&completion);
    }
    Ok(())
}

/// Runs every request with the blocking helpers (each waits for its own
/// completion); an error reply is an answer, anything else ends the session.
fn blocking(client: &mut Client, ledger: &mut Ledger) -> Result<(), Outcome> {
    let payload = [0x5au8; 512];
    for (index, step) in REQUESTS.into_iter().enumerate() {
        ledger.submitted.push((index as u64 + 1, step));
        let result = match step {
            Step::Read {
                offset_bytes,
                length_bytes,
            } => {
                let mut buffer = vec![0u8; length_bytes as usize];
                client.read(offset_bytes, &mut buffer)
            }
            Step::Write {
                offset_bytes,
                length_bytes,
            } => client.write(offset_bytes, &payload[..length_bytes as usize], false),
            Step::BlockStatus {
                offset_bytes,
                length_bytes,
            } => client
                .block_status(offset_bytes, length_bytes, true)
                .map(drop),
            Step::Flush => client.flush(),
            Step::Trim {
                offset_bytes,
                length_bytes,
            } => client.trim(offset_bytes, length_bytes, true),
            Step::WriteZeroes {
                offset_bytes,
                length_bytes,
            } => client.write_zeroes(offset_bytes, length_bytes, 0),
        };
        match result {
            Ok(()) | Err(ClientError::Request { .. }) => {}
            Err(error) => {
                return Err(Outcome::Failed {
                    step: "request",
                    error,
                })
            }
        }
    }
    Ok(())
}

/// One session against a server that says `data` (after the mode byte).
pub fn session(data: &[u8]) -> Outcome {
    let Some((mode, rest)) = crate::split_mode(data) else {
        return Outcome::Aborted;
    };
    let bytes = rest[..rest.len().min(MAX_INPUT_BYTES)].to_vec();
    let (path, _) = listener();
    let server = std::thread::spawn(move || serve(&listener().1, bytes));
    let target = NbdTarget::Unix(path.clone());
    let outcome = (|| {
        let Some(mut client) = negotiate(mode, &target)? else {
            return Ok(Outcome::Aborted);
        };
        let mut ledger = Ledger {
            submitted: Vec::new(),
            completed: Vec::new(),
        };
        if mode & BLOCKING != 0 {
            blocking(&mut client, &mut ledger)?;
        } else {
            pipelined(&mut client, &mut ledger)?;
        }
        client.disconnect().map_err(failed("disconnect"))?;
        Ok(Outcome::Completed {
            completions: ledger.submitted.len(),
        })
    })()
    .unwrap_or_else(|outcome: Outcome| outcome);
    server.join().expect("the server thread");
    outcome
}

pub fn run(data: &[u8]) {
    let watching = alloc_watch::installed();
    let live_bytes = alloc_watch::reset();
    let outcome = session(data);
    if let Outcome::Failed { error, .. } = &outcome {
        assert!(!error.to_string().is_empty());
    }
    if watching {
        let largest = alloc_watch::largest_bytes();
        assert!(
            largest <= MAX_ALLOCATION_BYTES,
            "one allocation of {largest} bytes (limit {MAX_ALLOCATION_BYTES}); {outcome:?}"
        );
        let growth = alloc_watch::peak_bytes().saturating_sub(live_bytes);
        assert!(
            growth <= MAX_GROWTH_BYTES,
            "live memory grew by {growth} bytes (limit {MAX_GROWTH_BYTES}); {outcome:?}"
        );
    }
}

/// How a seed's session must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// Every request answered, clean disconnect.
    Completed,
    /// `NBD_OPT_ABORT` acknowledged.
    Aborted,
    /// The client gives up with an error.
    Failed,
}

impl Outcome {
    pub fn matches(&self, expected: Expected) -> bool {
        match self {
            Outcome::Completed { completions } => {
                expected == Expected::Completed && *completions == REQUESTS.len()
            }
            Outcome::Aborted => expected == Expected::Aborted,
            Outcome::Failed { .. } => expected == Expected::Failed,
        }
    }
}

/// Hand-built server conversations for the seed corpus (`fuzz/seeds/
/// nbd_client/`, written by `TIERD_FUZZ_WRITE_SEEDS=1 cargo test
/// --manifest-path fuzz/Cargo.toml`): name, whole input (mode byte first),
/// and how the session must end.
pub fn seeds() -> Vec<(&'static str, Vec<u8>, Expected)> {
    let full = STRUCTURED | LIST | SET_META_CONTEXT | INFO | LIST_META_CONTEXTS;
    let mut seeds = vec![
        (
            "go_structured_pipelined",
            seed::session(full, true, true),
            Expected::Completed,
        ),
        (
            "go_structured_blocking",
            seed::session(full | BLOCKING, true, true),
            Expected::Completed,
        ),
        (
            "export_name_simple",
            seed::session(EXPORT_NAME, false, false),
            Expected::Completed,
        ),
        ("abort_after_info", seed::abort(), Expected::Aborted),
        (
            "structured_refused",
            seed::structured_refused(),
            Expected::Completed,
        ),
    ];
    for (name, input) in seed::bad() {
        seeds.push((name, input, Expected::Failed));
    }
    seeds
}

/// Builders of server bytes.
mod seed {
    use super::*;

    fn greeting(out: &mut Vec<u8>, no_zeroes: bool) {
        out.extend_from_slice(&NBD_MAGIC.to_be_bytes());
        out.extend_from_slice(&NBD_OPTS_MAGIC.to_be_bytes());
        let mut flags = NBD_FLAG_FIXED_NEWSTYLE;
        if no_zeroes {
            flags |= NBD_FLAG_NO_ZEROES;
        }
        out.extend_from_slice(&flags.to_be_bytes());
    }

    fn ack(out: &mut Vec<u8>, option: u32) {
        encode_option_reply(out, option, NBD_REP_ACK, &[]);
    }

    fn named(id_or_length: u32, name: &str) -> Vec<u8> {
        let mut data = id_or_length.to_be_bytes().to_vec();
        data.extend_from_slice(name.as_bytes());
        data
    }

    fn transmission_flags() -> u16 {
        NBD_FLAG_HAS_FLAGS
            | NBD_FLAG_SEND_FLUSH
            | NBD_FLAG_SEND_FUA
            | NBD_FLAG_SEND_TRIM
            | NBD_FLAG_SEND_WRITE_ZEROES
    }

    fn export_info(out: &mut Vec<u8>, option: u32) {
        let mut export = NBD_INFO_EXPORT.to_be_bytes().to_vec();
        export.extend_from_slice(&EXPORT_BYTES.to_be_bytes());
        export.extend_from_slice(&transmission_flags().to_be_bytes());
        encode_option_reply(out, option, NBD_REP_INFO, &export);
        let mut sizes = NBD_INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        for size in [1u32, 4096, 32 << 20] {
            sizes.extend_from_slice(&size.to_be_bytes());
        }
        encode_option_reply(out, option, NBD_REP_INFO, &sizes);
        let mut name = NBD_INFO_NAME.to_be_bytes().to_vec();
        name.extend_from_slice(EXPORT.as_bytes());
        encode_option_reply(out, option, NBD_REP_INFO, &name);
        let mut description = NBD_INFO_DESCRIPTION.to_be_bytes().to_vec();
        description.extend_from_slice(b"seed export");
        encode_option_reply(out, option, NBD_REP_INFO, &description);
        ack(out, option);
    }

    /// The server's half of the handshake `mode` asks for.
    fn handshake(out: &mut Vec<u8>, mode: u8, no_zeroes: bool) {
        greeting(out, no_zeroes);
        if mode & STRUCTURED != 0 {
            ack(out, NBD_OPT_STRUCTURED_REPLY);
        }
        if mode & LIST != 0 {
            for name in [EXPORT, "ro"] {
                let data = named(name.len() as u32, name);
                encode_option_reply(out, NBD_OPT_LIST, NBD_REP_SERVER, &data);
            }
            ack(out, NBD_OPT_LIST);
        }
        if mode & LIST_META_CONTEXTS != 0 {
            let data = named(0, BASE_ALLOCATION);
            encode_option_reply(out, NBD_OPT_LIST_META_CONTEXT, NBD_REP_META_CONTEXT, &data);
            ack(out, NBD_OPT_LIST_META_CONTEXT);
        }
        if mode & SET_META_CONTEXT != 0 {
            let data = named(1, BASE_ALLOCATION);
            encode_option_reply(out, NBD_OPT_SET_META_CONTEXT, NBD_REP_META_CONTEXT, &data);
            ack(out, NBD_OPT_SET_META_CONTEXT);
        }
        if mode & INFO != 0 {
            export_info(out, NBD_OPT_INFO);
        }
        if mode & EXPORT_NAME != 0 {
            out.extend_from_slice(&EXPORT_BYTES.to_be_bytes());
            out.extend_from_slice(&transmission_flags().to_be_bytes());
            if !no_zeroes {
                out.extend_from_slice(&[0u8; 124]);
            }
        } else {
            export_info(out, NBD_OPT_GO);
        }
    }

    /// Replies to [`REQUESTS`]: structured chunks (a read in two data and
    /// hole pieces, block status, an error chunk) or simple replies. The
    /// last two come out of order unless `in_order` (the blocking helpers
    /// send request 7 only after 6 completed, so a reply to 7 before that
    /// is for a cookie not in flight).
    fn replies(out: &mut Vec<u8>, structured: bool, in_order: bool) {
        let pattern = |length: usize, salt: u8| -> Vec<u8> {
            (0..length)
                .map(|index| (index as u8).wrapping_mul(31) ^ salt)
                .collect()
        };
        if structured {
            // 1: read 1024 at 0: 512 bytes of data, then a 512-byte hole.
            encode_chunk_header(out, 0, NBD_REPLY_TYPE_OFFSET_DATA, 1, 8 + 512);
            out.extend_from_slice(&0u64.to_be_bytes());
            out.extend_from_slice(&pattern(512, 1));
            encode_chunk_header(out, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_HOLE, 1, 12);
            out.extend_from_slice(&512u64.to_be_bytes());
            out.extend_from_slice(&512u32.to_be_bytes());
            // 2: write: done.
            encode_chunk_header(out, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, 2, 0);
            // 3: block status: two extents for context 1.
            encode_chunk_header(
                out,
                NBD_REPLY_FLAG_DONE,
                NBD_REPLY_TYPE_BLOCK_STATUS,
                3,
                4 + 2 * 8,
            );
            out.extend_from_slice(&1u32.to_be_bytes());
            for (length, flags) in [(32768u32, 0u32), (32768, NBD_STATE_HOLE | NBD_STATE_ZERO)] {
                out.extend_from_slice(&length.to_be_bytes());
                out.extend_from_slice(&flags.to_be_bytes());
            }
            // 4: flush: a simple reply is allowed for non-reads.
            encode_simple_reply(out, 0, 4);
            // 5: trim: an error chunk.
            encode_error_chunk(out, 5, NBD_EIO, "seed: trim failed");
            // 6: write-zeroes done; 7: a read as one data chunk.
            let mut six = Vec::new();
            encode_chunk_header(&mut six, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, 6, 0);
            let mut seven = Vec::new();
            encode_chunk_header(
                &mut seven,
                NBD_REPLY_FLAG_DONE,
                NBD_REPLY_TYPE_OFFSET_DATA,
                7,
                8 + 100,
            );
            seven.extend_from_slice(&1024u64.to_be_bytes());
            seven.extend_from_slice(&pattern(100, 7));
            last_two(out, six, seven, in_order);
        } else {
            encode_simple_reply(out, 0, 1);
            out.extend_from_slice(&pattern(1024, 1));
            encode_simple_reply(out, 0, 2);
            encode_simple_reply(out, NBD_ENOTSUP, 3);
            encode_simple_reply(out, 0, 4);
            encode_simple_reply(out, NBD_EIO, 5);
            let mut six = Vec::new();
            encode_simple_reply(&mut six, 0, 6);
            let mut seven = Vec::new();
            encode_simple_reply(&mut seven, 0, 7);
            seven.extend_from_slice(&pattern(100, 7));
            last_two(out, six, seven, in_order);
        }
    }

    fn last_two(out: &mut Vec<u8>, six: Vec<u8>, seven: Vec<u8>, in_order: bool) {
        if in_order {
            out.extend_from_slice(&six);
            out.extend_from_slice(&seven);
        } else {
            out.extend_from_slice(&seven);
            out.extend_from_slice(&six);
        }
    }

    /// A whole valid session: mode byte, handshake, replies.
    pub fn session(mode: u8, structured: bool, no_zeroes: bool) -> Vec<u8> {
        let mut out = vec![mode];
        handshake(&mut out, mode, no_zeroes);
        replies(&mut out, structured, mode & BLOCKING != 0);
        out
    }

    pub fn abort() -> Vec<u8> {
        let mut out = vec![INFO | ABORT];
        greeting(&mut out, true);
        export_info(&mut out, NBD_OPT_INFO);
        ack(&mut out, NBD_OPT_ABORT);
        out
    }

    /// Structured replies refused (`NBD_REP_ERR_UNSUP`), then `GO` and
    /// simple replies.
    pub fn structured_refused() -> Vec<u8> {
        let mut out = vec![STRUCTURED | BLOCKING];
        greeting(&mut out, true);
        encode_option_reply(&mut out, NBD_OPT_STRUCTURED_REPLY, NBD_REP_ERR_UNSUP, b"no");
        export_info(&mut out, NBD_OPT_GO);
        replies(&mut out, false, true);
        out
    }

    /// Hostile conversations: wrong magic, lengths far beyond the data,
    /// chunks outside their request, unknown cookies, a truncated reply.
    pub fn bad() -> Vec<(&'static str, Vec<u8>)> {
        let mut bad = Vec::new();

        let mut out = vec![0u8];
        out.extend_from_slice(b"NBDMAGICIHAVEOPX\x00\x03");
        bad.push(("bad_greeting", out));

        let mut out = vec![LIST];
        greeting(&mut out, true);
        encode_option_reply(
            &mut out,
            NBD_OPT_LIST,
            NBD_REP_ERR_POLICY,
            b"listing is off",
        );
        bad.push(("list_refused", out));

        let mut out = vec![LIST];
        greeting(&mut out, true);
        out.extend_from_slice(&NBD_REP_MAGIC.to_be_bytes());
        out.extend_from_slice(&NBD_OPT_LIST.to_be_bytes());
        out.extend_from_slice(&NBD_REP_SERVER.to_be_bytes());
        out.extend_from_slice(&u32::MAX.to_be_bytes());
        out.extend_from_slice(b"\x00\x00\x00\x04disk");
        bad.push(("option_reply_4gib", out));

        let mode = STRUCTURED | SET_META_CONTEXT;
        let mut out = vec![mode];
        handshake(&mut out, mode, true);
        encode_chunk_header(&mut out, 0, NBD_REPLY_TYPE_OFFSET_DATA, 1, u32::MAX);
        out.extend_from_slice(&0u64.to_be_bytes());
        out.extend_from_slice(&[1u8; 64]);
        bad.push(("data_chunk_4gib", out));

        let mut out = vec![mode];
        handshake(&mut out, mode, true);
        encode_chunk_header(&mut out, 0, NBD_REPLY_TYPE_BLOCK_STATUS, 3, 0xffff_fff4);
        out.extend_from_slice(&1u32.to_be_bytes());
        bad.push(("block_status_4gib", out));

        // A hole whose offset minus the request's offset overflows when the
        // hole's size is added (found by this target; see client.rs).
        let mut out = vec![mode];
        handshake(&mut out, mode, true);
        encode_chunk_header(
            &mut out,
            NBD_REPLY_FLAG_DONE,
            NBD_REPLY_TYPE_OFFSET_HOLE,
            1,
            12,
        );
        out.extend_from_slice(&u64::MAX.to_be_bytes());
        out.extend_from_slice(&4096u32.to_be_bytes());
        bad.push(("hole_offset_overflow", out));

        let mut out = vec![0u8];
        handshake(&mut out, 0, true);
        encode_simple_reply(&mut out, 0, 99);
        bad.push(("unknown_cookie", out));

        let mut out = vec![0u8];
        handshake(&mut out, 0, true);
        encode_simple_reply(&mut out, 0, 1);
        out.extend_from_slice(&[9u8; 300]);
        bad.push(("truncated_read", out));

        bad
    }
}
