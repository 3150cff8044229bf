//! Hostile and broken clients: raw bytes on the socket. The server must
//! close only the offending connection, keep serving others, and never
//! panic.

mod common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{count_panics, go_data, option_bytes as option, MemoryExport, TestServer, PANICS};
use tierd_common::clock::{Clock, SystemClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_nbd::proto::*;
use tierd_nbd::{Client, ServerConfig};

/// Client flags, optionally STRUCTURED_REPLY, then GO "mem".
fn valid_handshake(structured: bool) -> Vec<u8> {
    let mut bytes = (NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    if structured {
        bytes.extend(option(NBD_OPT_STRUCTURED_REPLY, &[]));
    }
    bytes.extend(option(NBD_OPT_GO, &go_data("mem")));
    bytes
}

fn request(command: u16, flags: u16, cookie: u64, offset_bytes: u64, length_bytes: u32) -> Vec<u8> {
    RequestHeader {
        flags,
        command,
        cookie,
        offset_bytes,
        length_bytes,
    }
    .encode()
    .to_vec()
}

/// Reads option replies until the final one of an option.
fn skip_option_replies(stream: &mut UnixStream) {
    loop {
        let mut header = [0u8; 20];
        stream.read_exact(&mut header).unwrap();
        let reply_type = u32::from_be_bytes(header[12..16].try_into().unwrap());
        let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
        let mut data = vec![0u8; length as usize];
        stream.read_exact(&mut data).unwrap();
        if reply_type == NBD_REP_ACK || reply_type & NBD_REP_FLAG_ERROR != 0 {
            return;
        }
    }
}

/// Connects, does a valid handshake by hand, returns the raw stream in
/// transmission phase.
fn raw_transmission(server: &TestServer, structured: bool) -> UnixStream {
    let mut stream = UnixStream::connect(&server.socket).unwrap();
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[0..8], b"NBDMAGIC");
    assert_eq!(&greeting[8..16], b"IHAVEOPT");
    assert_eq!(u16::from_be_bytes([greeting[16], greeting[17]]), 3);
    stream
        .write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    if structured {
        stream
            .write_all(&option(NBD_OPT_STRUCTURED_REPLY, &[]))
            .unwrap();
        skip_option_replies(&mut stream);
    }
    stream
        .write_all(&option(NBD_OPT_GO, &go_data("mem")))
        .unwrap();
    skip_option_replies(&mut stream);
    stream
}

fn assert_closed(stream: &mut UnixStream) {
    let mut rest = Vec::new();
    // The server closes: read_to_end returns (possibly after a reset).
    let _ = stream.read_to_end(&mut rest);
    let mut byte = [0u8; 1];
    assert!(matches!(stream.read(&mut byte), Ok(0) | Err(_)));
}

#[test]
fn simple_and_structured_replies_on_the_wire() {
    let server = TestServer::start(1 << 16);
    // Simple: header then data; an error has no data, and the next reply
    // follows at once.
    let mut simple = raw_transmission(&server, false);
    simple
        .write_all(&request(NBD_CMD_READ, 0, 7, 0, 8))
        .unwrap();
    simple
        .write_all(&request(NBD_CMD_READ, 0, 8, 1 << 16, 8))
        .unwrap();
    simple
        .write_all(&request(NBD_CMD_FLUSH, 0, 9, 0, 0))
        .unwrap();
    let mut bytes = [0u8; 16 + 8 + 16 + 16];
    simple.read_exact(&mut bytes).unwrap();
    assert_eq!(
        parse_reply_header(&bytes[0..16]).unwrap(),
        ReplyHeader::Simple {
            error: 0,
            cookie: 7
        }
    );
    assert_eq!(&bytes[16..24], &[0; 8]);
    assert_eq!(
        parse_reply_header(&bytes[24..40]).unwrap(),
        ReplyHeader::Simple {
            error: NBD_EINVAL,
            cookie: 8
        }
    );
    assert_eq!(
        parse_reply_header(&bytes[40..56]).unwrap(),
        ReplyHeader::Simple {
            error: 0,
            cookie: 9
        }
    );

    // Structured: one OFFSET_DATA chunk with DONE; errors as ERROR chunks.
    let mut structured = raw_transmission(&server, true);
    structured
        .write_all(&request(NBD_CMD_READ, 0, 1, 512, 4))
        .unwrap();
    let mut chunk = [0u8; 20 + 8 + 4];
    structured.read_exact(&mut chunk).unwrap();
    assert_eq!(
        parse_reply_header(&chunk).unwrap(),
        ReplyHeader::Chunk {
            flags: NBD_REPLY_FLAG_DONE,
            chunk_type: NBD_REPLY_TYPE_OFFSET_DATA,
            cookie: 1,
            length_bytes: 12
        }
    );
    assert_eq!(u64::from_be_bytes(chunk[20..28].try_into().unwrap()), 512);
    structured
        .write_all(&request(NBD_CMD_READ, 0, 2, 1 << 16, 4))
        .unwrap();
    let mut header = [0u8; 20];
    structured.read_exact(&mut header).unwrap();
    let ReplyHeader::Chunk {
        flags,
        chunk_type,
        cookie,
        length_bytes,
    } = parse_reply_header(&header).unwrap()
    else {
        panic!("expected a structured chunk");
    };
    assert_eq!(
        (flags, chunk_type, cookie),
        (NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR, 2)
    );
    let mut payload = vec![0u8; length_bytes as usize];
    structured.read_exact(&mut payload).unwrap();
    assert_eq!(
        u32::from_be_bytes(payload[0..4].try_into().unwrap()),
        NBD_EINVAL
    );
    // Export-name ending with NO_ZEROES negotiated: exactly 10 bytes.
    let mut old = UnixStream::connect(&server.socket).unwrap();
    let mut greeting = [0u8; 18];
    old.read_exact(&mut greeting).unwrap();
    old.write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    old.write_all(&option(NBD_OPT_EXPORT_NAME, b"mem")).unwrap();
    old.write_all(&request(NBD_CMD_FLUSH, 0, 5, 0, 0)).unwrap();
    let mut reply = [0u8; 10 + 16];
    old.read_exact(&mut reply).unwrap();
    assert_eq!(u64::from_be_bytes(reply[0..8].try_into().unwrap()), 1 << 16);
    assert_eq!(
        parse_reply_header(&reply[10..26]).unwrap(),
        ReplyHeader::Simple {
            error: 0,
            cookie: 5
        }
    );
    // Without NO_ZEROES: 124 zero bytes follow the flags.
    let mut zeroes = UnixStream::connect(&server.socket).unwrap();
    zeroes.read_exact(&mut greeting).unwrap();
    zeroes
        .write_all(&NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .unwrap();
    zeroes.write_all(&option(NBD_OPT_EXPORT_NAME, b"")).unwrap();
    let mut reply = [1u8; 134];
    zeroes.read_exact(&mut reply).unwrap();
    assert!(reply[10..].iter().all(|byte| *byte == 0));
}

#[test]
fn bad_magic_closes_only_that_connection() {
    count_panics();
    let server = TestServer::start(1 << 16);
    let mut good = server.connect();
    good.write(0, b"before", false).unwrap();
    let mut bad = raw_transmission(&server, true);
    let mut header = request(NBD_CMD_READ, 0, 1, 0, 8);
    header[0] ^= 0xff;
    bad.write_all(&header).unwrap();
    assert_closed(&mut bad);
    let mut back = [0u8; 6];
    good.read(0, &mut back).unwrap();
    assert_eq!(&back, b"before");
    assert_eq!(server.server.stats().protocol_errors, 1);
    let warnings = server.logs.warnings();
    assert!(
        warnings.iter().any(|line| line.contains("bad magic")),
        "warnings: {warnings:?}"
    );
    assert_eq!(PANICS.load(Ordering::SeqCst), 0);
}

#[test]
fn absurd_write_lengths_and_bad_client_flags_close_the_connection() {
    let server = TestServer::start(1 << 16);
    let mut absurd = raw_transmission(&server, false);
    absurd
        .write_all(&request(NBD_CMD_WRITE, 0, 1, 0, u32::MAX))
        .unwrap();
    assert_closed(&mut absurd);

    let mut flags = UnixStream::connect(&server.socket).unwrap();
    let mut greeting = [0u8; 18];
    flags.read_exact(&mut greeting).unwrap();
    flags.write_all(&0x80u32.to_be_bytes()).unwrap();
    assert_closed(&mut flags);

    let mut huge_option = UnixStream::connect(&server.socket).unwrap();
    huge_option.read_exact(&mut greeting).unwrap();
    huge_option
        .write_all(&NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .unwrap();
    let mut header = option(NBD_OPT_GO, &[]);
    header[12..16].copy_from_slice(&(1u32 << 30).to_be_bytes());
    huge_option.write_all(&header).unwrap();
    assert_closed(&mut huge_option);
    assert_eq!(server.server.stats().protocol_errors, 3);
    server.connect().write(0, &[1], false).unwrap();
}

/// One hostile conversation: `bytes` written by a thread (then the write
/// side is shut), everything the server sends read until it closes.
fn converse(server: &TestServer, bytes: Vec<u8>) {
    let mut stream = UnixStream::connect(&server.socket).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let writing = std::thread::spawn(move || {
        // The server may close first; a broken pipe is expected then.
        let _ = writer.write_all(&bytes);
        let _ = writer.shutdown(Shutdown::Write);
    });
    let mut sink = Vec::new();
    let _ = stream.read_to_end(&mut sink);
    writing.join().unwrap();
}

fn random_bytes(rng: &mut SeededRng, length: usize) -> Vec<u8> {
    (0..length).map(|_| rng.next_u64() as u8).collect()
}

/// Mostly-plausible garbage: random option or request headers with the
/// right magic, small lengths, random commands and flags.
fn plausible_options(rng: &mut SeededRng) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..rng.range(1, 5) {
        let data_length = rng.below(24) as usize;
        let mut data = random_bytes(rng, data_length);
        if data_length >= 4 && rng.chance(0.5) {
            data[0..4].copy_from_slice(&(rng.below(8) as u32).to_be_bytes());
        }
        let mut encoded = option(rng.below(14) as u32, &data);
        if rng.chance(0.2) {
            let length = rng.next_u64() as u32;
            encoded[12..16].copy_from_slice(&length.to_be_bytes());
        }
        bytes.extend(encoded);
    }
    bytes
}

fn plausible_requests(rng: &mut SeededRng) -> Vec<u8> {
    let mut bytes = Vec::new();
    for cookie in 0..rng.range(1, 6) {
        let command = rng.below(10) as u16;
        let flags = if rng.chance(0.5) {
            0
        } else {
            rng.below(64) as u16
        };
        let offset = if rng.chance(0.7) {
            rng.below(1 << 16)
        } else {
            rng.next_u64()
        };
        let length = if rng.chance(0.7) {
            rng.below(8192) as u32
        } else {
            rng.next_u64() as u32
        };
        bytes.extend(request(command, flags, cookie, offset, length));
        if command == NBD_CMD_WRITE && rng.chance(0.5) {
            let payload_length = (length as usize).min(8192);
            bytes.extend(random_bytes(rng, payload_length));
        }
    }
    bytes
}

fn hostile_conversations(config: ServerConfig, seed: u64, cases: usize) {
    count_panics();
    let server = TestServer::start_with(MemoryExport::new(1 << 16), config);
    let mut rng = SeededRng::new(seed);
    eprintln!("seed {seed}");
    for case in 0..cases {
        let bytes = match case % 5 {
            0 => {
                let length = rng.below(64) as usize;
                random_bytes(&mut rng, length)
            }
            1 => {
                let mut bytes = NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes().to_vec();
                bytes.extend(plausible_options(&mut rng));
                bytes
            }
            2 => {
                let mut bytes = valid_handshake(rng.chance(0.5));
                let length = rng.below(96) as usize;
                bytes.extend(random_bytes(&mut rng, length));
                bytes
            }
            3 => {
                let mut bytes = valid_handshake(rng.chance(0.5));
                bytes.extend(plausible_requests(&mut rng));
                bytes
            }
            _ => {
                // A valid conversation cut short anywhere.
                let mut bytes = valid_handshake(true);
                bytes.extend(request(NBD_CMD_WRITE, 0, 1, 0, 16));
                bytes.extend([9u8; 16]);
                bytes.extend(request(NBD_CMD_READ, 0, 2, 0, 16));
                bytes.extend(request(NBD_CMD_DISC, 0, 3, 0, 0));
                let cut = rng.below(bytes.len() as u64) as usize;
                bytes.truncate(cut);
                bytes
            }
        };
        converse(&server, bytes);
        if case % 500 == 499 {
            let mut client = server.connect();
            client.write(100, b"alive", false).unwrap();
            let mut back = [0u8; 5];
            client.read(100, &mut back).unwrap();
            assert_eq!(&back, b"alive", "after case {case}");
            client.disconnect().unwrap();
        }
    }
    let stats = server.server.stats();
    assert!(stats.protocol_errors > 0, "{stats:?}");
    let mut server = server;
    if let Some(handle) = server.handle.take() {
        handle.shutdown();
    }
    // A connection thread that panicked would not have counted itself out.
    assert_eq!(server.server.stats().connections_active, 0);
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a server thread panicked");
}

#[test]
fn seeded_garbage_never_breaks_the_default_server() {
    hostile_conversations(ServerConfig::default(), 0x6e6264, 2500);
}

#[test]
fn seeded_garbage_never_breaks_a_server_of_two_threads_per_connection() {
    let config = ServerConfig {
        workers_per_connection: 2,
        ..ServerConfig::default()
    };
    hostile_conversations(config, 0x776f726b, 1000);
}

#[test]
fn shutdown_closes_connections_and_removes_the_socket() {
    let mut server = TestServer::start(1 << 16);
    let mut client = server.connect();
    client.write(0, b"x", false).unwrap();
    let handle = server.handle.take().unwrap();
    assert_eq!(handle.open_connections(), 1);
    handle.shutdown();
    assert!(!server.socket.exists());
    let mut buffer = [0u8; 1];
    assert!(client.read(0, &mut buffer).is_err());
    assert!(Client::connect_uri(&server.uri()).is_err());
}

#[test]
fn the_socket_is_private_and_only_stale_sockets_are_replaced() {
    let server = TestServer::start(4096);
    let mode = std::fs::metadata(&server.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // A live socket is not taken over.
    let error = server.server.serve_unix(&server.socket).err().unwrap();
    assert!(error.to_string().contains("listening"), "{error}");
    // A stale one is.
    let stale = server.directory.path().join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let handle = server.server.serve_unix(&stale).unwrap();
    let mut client =
        Client::connect_uri(&format!("nbd+unix:///?socket={}", stale.display())).unwrap();
    client.flush().unwrap();
    handle.shutdown();
    // A regular file is never removed.
    let file = server.directory.path().join("file");
    std::fs::write(&file, b"keep").unwrap();
    assert!(server.server.serve_unix(&file).is_err());
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

fn stalled_reader_does_not_block_shutdown(config: ServerConfig) {
    let mut server = TestServer::start_with(MemoryExport::new(1 << 20), config);
    let stream = raw_transmission(&server, false);
    let mut writer = stream.try_clone().unwrap();
    // Ask for far more reply bytes than any socket buffer holds, and never
    // read them.
    let requests = 4096u64;
    let writing = std::thread::spawn(move || {
        for cookie in 0..requests {
            if writer
                .write_all(&request(NBD_CMD_READ, 0, cookie, 0, 65_536))
                .is_err()
            {
                return cookie;
            }
        }
        requests
    });
    // Wait until the server has stalled on replies: a few reads done.
    while server.server.stats().requests_of(NBD_CMD_READ) < 4 {
        std::thread::yield_now();
    }
    server.handle.take().unwrap().shutdown();
    let handled = server.server.stats().requests_of(NBD_CMD_READ);
    assert!(
        handled < requests,
        "the server read every request: {handled}"
    );
    drop(stream.shutdown(Shutdown::Both));
    writing.join().unwrap();
}

#[test]
fn a_client_that_never_reads_replies_stalls_only_itself_on_one_thread() {
    stalled_reader_does_not_block_shutdown(ServerConfig {
        shutdown_grace_ms: 50,
        workers_per_connection: 1,
        ..ServerConfig::default()
    });
}

#[test]
fn a_client_that_never_reads_replies_stalls_only_itself_with_the_default_threads() {
    stalled_reader_does_not_block_shutdown(ServerConfig {
        shutdown_grace_ms: 50,
        ..ServerConfig::default()
    });
}

/// Polls `done` every 10 ms for at most 20 s; panics with `what` after.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let clock = SystemClock::new();
    let deadline_ns = clock.now_ns() + 20_000_000_000;
    while !done() {
        assert!(clock.now_ns() < deadline_ns, "waited 20 s for {what}");
        clock.sleep_ns(10_000_000);
    }
}

/// 256 sockets that never send a byte (max_connections is 256) do not
/// lock a well-behaved client out: a new connection closes the oldest one
/// still in its handshake.
#[test]
fn idle_sockets_cannot_take_every_slot() {
    let server = TestServer::start(1 << 20);
    let idle: Vec<UnixStream> = (0..256)
        .map(|_| UnixStream::connect(&server.socket).unwrap())
        .collect();
    wait_for("the idle sockets to be accepted", || {
        server.server.stats().connections_accepted >= 256
    });
    let mut client = server.connect();
    client.write(0, b"served", false).unwrap();
    let mut back = [0u8; 6];
    client.read(0, &mut back).unwrap();
    assert_eq!(&back, b"served");
    let stats = server.server.stats();
    assert_eq!(stats.connections_refused, 0);
    assert!(
        stats.connections_evicted >= 256 - 64,
        "only {} idle connections were closed",
        stats.connections_evicted
    );
    // The closed ones see EOF after the greeting.
    let closed = idle
        .into_iter()
        .filter_map(|mut stream| {
            stream
                .set_read_timeout(Some(std::time::Duration::from_millis(50)))
                .unwrap();
            let mut bytes = Vec::new();
            stream.read_to_end(&mut bytes).ok().map(|_| bytes.len())
        })
        .count();
    assert!(closed >= 256 - 64, "{closed} idle sockets were closed");
}

/// A connection that does not finish its handshake within the timeout is
/// closed: silent, and sending one byte at a time.
#[test]
fn handshakes_that_take_too_long_are_closed() {
    let server = TestServer::start_with(
        MemoryExport::new(1 << 20),
        ServerConfig {
            handshake_timeout_ms: 300,
            ..ServerConfig::default()
        },
    );
    let clock = SystemClock::new();
    let started_ns = clock.now_ns();
    let mut silent = UnixStream::connect(&server.socket).unwrap();
    let mut trickle = UnixStream::connect(&server.socket).unwrap();
    let mut greeting = [0u8; 18];
    trickle.read_exact(&mut greeting).unwrap();
    let handshake = valid_handshake(false);
    for byte in &handshake[..handshake.len() - 1] {
        if trickle.write_all(&[*byte]).is_err() {
            break;
        }
        clock.sleep_ns(50_000_000);
        if clock.now_ns() - started_ns > 2_000_000_000 {
            break;
        }
    }
    silent
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut bytes = Vec::new();
    silent.read_to_end(&mut bytes).unwrap();
    assert_eq!(bytes.len(), 18, "the greeting, then EOF");
    assert_closed(&mut trickle);
    let elapsed_ms = (clock.now_ns() - started_ns) / 1_000_000;
    assert!(elapsed_ms < 5_000, "closed after {elapsed_ms} ms");
    wait_for("both handshakes to count as timed out", || {
        server.server.stats().handshakes_timed_out == 2
    });
    // A client that negotiates at once is not affected, and keeps its
    // connection past the timeout.
    let mut client = server.connect();
    clock.sleep_ns(600_000_000);
    client.flush().unwrap();
}

/// Reads at one offset, each sleeping `delay_ns`, counting executions.
struct SlowExport {
    inner: MemoryExport,
    delay_ns: u64,
    reads: std::sync::atomic::AtomicU64,
}

impl tierd_nbd::Export for SlowExport {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> tierd_nbd::ExportResult<()> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        SystemClock::new().sleep_ns(self.delay_ns);
        self.inner.read(offset_bytes, buf)
    }
    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> tierd_nbd::ExportResult<()> {
        self.inner.write(offset_bytes, data, fua)
    }
    fn flush(&self) -> tierd_nbd::ExportResult<()> {
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> tierd_nbd::ExportResult<()> {
        self.inner.trim(offset_bytes, length_bytes, fua)
    }
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
        may_trim: bool,
        fast_only: bool,
    ) -> tierd_nbd::ExportResult<()> {
        self.inner
            .write_zeroes(offset_bytes, length_bytes, fua, may_trim, fast_only)
    }
}

/// A server over a [`SlowExport`], with the test's own listener.
fn slow_server(
    delay_ns: u64,
    config: ServerConfig,
) -> (
    Arc<SlowExport>,
    tierd_nbd::Server,
    tierd_nbd::ServerHandle,
    tempfile::TempDir,
) {
    let export = Arc::new(SlowExport {
        inner: MemoryExport::new(128 << 20),
        delay_ns,
        reads: Default::default(),
    });
    let served: Arc<dyn tierd_nbd::Export> = export.clone();
    let server = tierd_nbd::Server::new(vec![("mem".into(), served)], config).unwrap();
    let directory = tempfile::tempdir().unwrap();
    let handle = server
        .serve_unix(directory.path().join("nbd.sock"))
        .unwrap();
    (export, server, handle, directory)
}

fn raw_transmission_at(socket: &std::path::Path) -> UnixStream {
    let mut stream = UnixStream::connect(socket).unwrap();
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).unwrap();
    stream.write_all(&valid_handshake(false)).unwrap();
    skip_option_replies(&mut stream);
    stream
}

/// A client that pipelines 200 reads of 32 MiB and never reads a reply
/// holds at most `max_in_flight_bytes_per_connection` (64 MiB) of replies
/// in the server, whatever the mode; other clients are served meanwhile,
/// and a shutdown with it attached takes about the grace period.
fn pipelined_big_reads_stay_bounded(config: ServerConfig) {
    let grace_ms = config.shutdown_grace_ms;
    let (_export, server, handle, directory) = slow_server(0, config);
    let socket = directory.path().join("nbd.sock");
    let stream = raw_transmission_at(&socket);
    let mut writer = stream.try_clone().unwrap();
    let writing = std::thread::spawn(move || {
        for cookie in 0..200u64 {
            let offset = (cookie % 2) * (32 << 20);
            if writer
                .write_all(&request(NBD_CMD_READ, 0, cookie, offset, 32 << 20))
                .is_err()
            {
                return;
            }
        }
    });
    wait_for("the server to stall on the first reply", || {
        server.stats().requests_of(NBD_CMD_READ) >= 1
    });
    SystemClock::new().sleep_ns(500_000_000);
    let stats = server.stats();
    assert!(
        stats.in_flight_bytes_max <= 64 << 20,
        "{} bytes were in flight at once",
        stats.in_flight_bytes_max
    );
    assert!(
        stats.requests_of(NBD_CMD_READ) <= 4,
        "the server executed {} reads nobody collects",
        stats.requests_of(NBD_CMD_READ)
    );
    // Someone else is served meanwhile.
    let mut other =
        Client::connect_uri(&format!("nbd+unix:///mem?socket={}", socket.display())).unwrap();
    other.write(4096, b"other", false).unwrap();
    let mut back = [0u8; 5];
    other.read(4096, &mut back).unwrap();
    assert_eq!(&back, b"other");
    drop(other);
    let clock = SystemClock::new();
    let started_ns = clock.now_ns();
    handle.shutdown();
    let stop_ms = (clock.now_ns() - started_ns) / 1_000_000;
    assert!(
        stop_ms < grace_ms + 2_000,
        "shutdown took {stop_ms} ms with a grace of {grace_ms} ms"
    );
    assert_eq!(
        server.stats().in_flight_bytes,
        0,
        "every charge was given back"
    );
    drop(stream);
    writing.join().unwrap();
}

#[test]
fn pipelined_big_reads_never_read_stay_bounded_on_one_thread() {
    pipelined_big_reads_stay_bounded(ServerConfig {
        shutdown_grace_ms: 300,
        workers_per_connection: 1,
        ..ServerConfig::default()
    });
}

#[test]
fn pipelined_big_reads_never_read_stay_bounded_with_the_default_threads() {
    pipelined_big_reads_stay_bounded(ServerConfig {
        shutdown_grace_ms: 300,
        ..ServerConfig::default()
    });
}

/// The server-wide bound holds across connections: three clients that
/// never read replies, with 64 MiB allowed in all, hold at most 64 MiB.
#[test]
fn the_server_wide_in_flight_bound_holds_across_connections() {
    let (_export, server, handle, directory) = slow_server(
        0,
        ServerConfig {
            workers_per_connection: 4,
            max_in_flight_bytes_per_connection: 32 << 20,
            max_in_flight_bytes: 64 << 20,
            shutdown_grace_ms: 100,
            ..ServerConfig::default()
        },
    );
    let socket = directory.path().join("nbd.sock");
    let streams: Vec<UnixStream> = (0..3)
        .map(|_| {
            let mut stream = raw_transmission_at(&socket);
            for cookie in 0..8u64 {
                stream
                    .write_all(&request(NBD_CMD_READ, 0, cookie, 0, 16 << 20))
                    .unwrap();
            }
            stream
        })
        .collect();
    wait_for("the server to stall", || {
        server.stats().requests_of(NBD_CMD_READ) >= 4
    });
    SystemClock::new().sleep_ns(500_000_000);
    let stats = server.stats();
    assert!(
        stats.in_flight_bytes_max <= 64 << 20,
        "{} bytes in flight at once",
        stats.in_flight_bytes_max
    );
    handle.shutdown();
    drop(streams);
}

/// When a client goes away, its queued requests are dropped, not executed
/// one by one against a slow export.
#[test]
fn queued_requests_of_a_client_that_left_are_cancelled() {
    let (export, server, handle, directory) = slow_server(
        100_000_000,
        ServerConfig {
            workers_per_connection: 1,
            ..ServerConfig::default()
        },
    );
    let mut stream = raw_transmission_at(&directory.path().join("nbd.sock"));
    let mut batch = Vec::new();
    for cookie in 0..64u64 {
        batch.extend(request(NBD_CMD_READ, 0, cookie, 0, 4096));
    }
    stream.write_all(&batch).unwrap();
    wait_for("the first read", || {
        export.reads.load(Ordering::SeqCst) >= 1
    });
    drop(stream);
    wait_for("the connection to end", || {
        server.stats().connections_active == 0
    });
    let reads = export.reads.load(Ordering::SeqCst);
    assert!(
        reads <= 4,
        "{reads} of 64 reads executed for a client that left"
    );
    assert!(server.stats().requests_cancelled >= 60);
    handle.shutdown();
}

/// A connection thread that cannot be started (here: a stack no machine
/// has) refuses that connection with a log line; the server does not panic
/// and goes on.
#[test]
fn failed_connection_thread_spawns_refuse_the_connection() {
    count_panics();
    let panics = PANICS.load(Ordering::SeqCst);
    let server = TestServer::start_with(
        MemoryExport::new(1 << 20),
        ServerConfig {
            connection_stack_bytes: Some(1 << 60),
            ..ServerConfig::default()
        },
    );
    for _ in 0..3 {
        let connected = Client::connect_uri(&server.uri()).and_then(|mut client| client.flush());
        assert!(connected.is_err(), "the connection was served");
    }
    let logged = || {
        server
            .logs
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(level, line)| {
                *level == tierd_nbd::LogLevel::Error && line.contains("cannot start its thread")
            })
            .count()
    };
    wait_for("three refusals logged", || logged() == 3);
    assert_eq!(server.server.stats().connections_refused, 3);
    assert_eq!(PANICS.load(Ordering::SeqCst), panics);
}

/// When an extra request thread cannot be started, the connection goes on
/// with the threads it has (one error line per connection), and every
/// request is still answered.
#[test]
fn failed_request_thread_spawns_leave_the_connection_served() {
    count_panics();
    let panics = PANICS.load(Ordering::SeqCst);
    let logs = common::LogSink::default();
    let (_export, server, handle, directory) = slow_server(
        5_000_000,
        ServerConfig {
            workers_per_connection: 4,
            worker_stack_bytes: Some(1 << 60),
            logger: logs.config().logger,
            ..ServerConfig::default()
        },
    );
    let mut client = Client::connect_uri(&format!(
        "nbd+unix:///mem?socket={}",
        directory.path().join("nbd.sock").display()
    ))
    .unwrap();
    for round in 0..3u64 {
        for index in 0..4u64 {
            client
                .sender()
                .submit_read((round * 4 + index) * 4096, 4096)
                .unwrap();
        }
        for _ in 0..4 {
            assert!(client.receive().unwrap().is_ok());
        }
    }
    client.disconnect().unwrap();
    let errors: Vec<String> = logs
        .lines
        .lock()
        .unwrap()
        .iter()
        .filter(|(level, _)| *level == tierd_nbd::LogLevel::Error)
        .map(|(_, line)| line.clone())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("cannot start request thread 2 of 4")
            && errors[0].contains("going on with 1"),
        "{errors:?}"
    );
    assert_eq!(server.stats().connections_refused, 0);
    handle.shutdown();
    assert_eq!(PANICS.load(Ordering::SeqCst), panics);
}
