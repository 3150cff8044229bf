//! The server through this crate's client: every command, flag, option and
//! error path the protocol gives a client.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tierd_common::clock::{Clock, SystemClock};

use common::{pattern, MemoryExport, TestServer, BLOCK_BYTES};
use tierd_nbd::client::{ConnectOptions, Negotiation};
use tierd_nbd::proto::*;
use tierd_nbd::server::DEFAULT_MAX_IN_FLIGHT_BYTES_PER_CONNECTION;
use tierd_nbd::{Client, ClientError, Export, ExportResult, Extent, Server, ServerConfig};

const SIZE_BYTES: usize = 1 << 20;

fn expect_request_error(result: Result<(), ClientError>, expected: u32) {
    match result {
        Err(ClientError::Request { error, .. }) => assert_eq!(
            error,
            expected,
            "expected {}, got {}",
            error_name(expected),
            error_name(error)
        ),
        other => panic!(
            "expected a request error {}, got {other:?}",
            error_name(expected)
        ),
    }
}

fn connect_with(server: &TestServer, structured: bool, allocation: bool) -> Client {
    Client::connect(
        &server.target(),
        &ConnectOptions {
            export_name: "mem".into(),
            structured_replies: structured,
            allocation_context: allocation,
            tls: None,
        },
    )
    .unwrap()
}

#[test]
fn writes_read_back_with_structured_and_simple_replies() {
    let server = TestServer::start(SIZE_BYTES);
    for structured in [true, false] {
        let mut client = connect_with(&server, structured, false);
        assert_eq!(client.info().structured_replies, structured);
        assert_eq!(client.info().size_bytes, SIZE_BYTES as u64);
        let data = pattern(structured as u64 + 1, 10_000);
        client.write(12_345, &data, false).unwrap();
        let mut back = vec![0u8; data.len()];
        client.read(12_345, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(&server.export.snapshot()[12_345..22_345], &data[..]);
        // Zero-length read and write are legal no-ops.
        client.read(0, &mut []).unwrap();
        client.write(0, &[], false).unwrap();
        client.disconnect().unwrap();
    }
    let stats = server.server.stats();
    assert_eq!(stats.requests_of(NBD_CMD_WRITE), 4);
    assert_eq!(stats.requests_of(NBD_CMD_READ), 4);
    assert_eq!(stats.requests_of(NBD_CMD_DISC), 2);
    assert_eq!(stats.bytes_written, 20_000);
    assert_eq!(stats.bytes_read, 20_000);
    assert_eq!(stats.request_errors, 0);
    assert_eq!(stats.connections_accepted, 2);
}

#[test]
fn fua_and_flush_reach_the_export() {
    let server = TestServer::start(SIZE_BYTES);
    let mut client = server.connect();
    assert!(client.info().can_fua() && client.info().can_flush());
    client.write(0, &[1; 512], false).unwrap();
    assert_eq!(server.export.fua_requests(), 0);
    client.write(512, &[2; 512], true).unwrap();
    client.trim(4096, 4096, true).unwrap();
    client.write_zeroes(8192, 4096, NBD_CMD_FLAG_FUA).unwrap();
    assert_eq!(server.export.fua_requests(), 3);
    client.flush().unwrap();
    client.flush().unwrap();
    assert_eq!(server.export.flushes(), 2);
}

#[test]
fn trim_and_write_zeroes_read_back_as_zero_and_pass_no_hole() {
    let server = TestServer::start(SIZE_BYTES);
    let mut client = server.connect();
    client.write(0, &[0xaa; 65_536], false).unwrap();
    client.trim(0, 4096, false).unwrap();
    client.write_zeroes(8192, 4096, 0).unwrap();
    client
        .write_zeroes(16_384, 4096, NBD_CMD_FLAG_NO_HOLE)
        .unwrap();
    let mut back = vec![0u8; 65_536];
    client.read(0, &mut back).unwrap();
    for (index, byte) in back.iter().enumerate() {
        let zeroed =
            index < 4096 || (8192..12_288).contains(&index) || (16_384..20_480).contains(&index);
        assert_eq!(*byte, if zeroed { 0 } else { 0xaa }, "byte {index}");
    }
    assert_eq!(server.export.zero_requests_may_trim(), 1);
    assert_eq!(server.export.zero_requests_no_hole(), 1);
}

#[test]
fn fast_zero_fails_with_enotsup_when_the_export_cannot_zero_fast() {
    let slow = MemoryExport::new(SIZE_BYTES).without_fast_zero();
    let server = TestServer::start_with(slow, ServerConfig::default());
    let mut client = server.connect();
    assert!(client.info().can_fast_zero());
    client.write(0, &[7; 4096], false).unwrap();
    expect_request_error(
        client.write_zeroes(0, 4096, NBD_CMD_FLAG_FAST_ZERO),
        NBD_ENOTSUP,
    );
    // Nothing changed, and without the flag the same request works.
    assert_eq!(server.export.snapshot()[0], 7);
    client.write_zeroes(0, 4096, 0).unwrap();
    assert_eq!(server.export.snapshot()[0], 0);

    let fast = TestServer::start(SIZE_BYTES);
    let mut client = fast.connect();
    client.write(0, &[7; 4096], false).unwrap();
    client
        .write_zeroes(0, 4096, NBD_CMD_FLAG_FAST_ZERO)
        .unwrap();
    assert_eq!(fast.export.snapshot()[0], 0);
}

#[test]
fn block_status_reports_allocation_and_honours_req_one() {
    let server = TestServer::start(SIZE_BYTES);
    let mut client = server.connect();
    assert!(client.info().allocation_context_id.is_some());
    client.write(BLOCK_BYTES, &[1; 4096], false).unwrap();
    let extents = client.block_status(0, 3 * 4096, false).unwrap();
    let zero = NBD_STATE_HOLE | NBD_STATE_ZERO;
    assert_eq!(
        extents,
        vec![
            Extent {
                length_bytes: 4096,
                flags: zero
            },
            Extent {
                length_bytes: 4096,
                flags: 0
            },
            // The final extent may run past the request: here to the end.
            Extent {
                length_bytes: SIZE_BYTES as u64 - 8192,
                flags: zero
            },
        ]
    );
    let one = client.block_status(0, 1000, true).unwrap();
    assert_eq!(
        one,
        vec![Extent {
            length_bytes: 1000,
            flags: zero
        }]
    );
    let one = client.block_status(4096, 3 * 4096, true).unwrap();
    assert_eq!(
        one,
        vec![Extent {
            length_bytes: 4096,
            flags: 0
        }]
    );
    expect_request_error(
        client
            .block_status(SIZE_BYTES as u64, 4096, false)
            .map(drop),
        NBD_EINVAL,
    );
    expect_request_error(client.block_status(0, 0, false).map(drop), NBD_EINVAL);
}

#[test]
fn block_status_without_a_context_is_einval() {
    let server = TestServer::start(SIZE_BYTES);
    let mut client = connect_with(&server, true, false);
    assert_eq!(client.info().allocation_context_id, None);
    expect_request_error(client.block_status(0, 4096, false).map(drop), NBD_EINVAL);
    client.write(0, &[1; 16], false).unwrap();
}

#[test]
fn out_of_range_requests_fail_and_the_connection_continues() {
    let server = TestServer::start(SIZE_BYTES);
    for structured in [true, false] {
        let mut client = connect_with(&server, structured, false);
        let end = SIZE_BYTES as u64;
        let mut buffer = vec![0u8; 4096];
        expect_request_error(client.read(end - 100, &mut buffer), NBD_EINVAL);
        expect_request_error(client.read(u64::MAX - 10, &mut buffer), NBD_EINVAL);
        expect_request_error(client.write(end - 100, &buffer, false), NBD_ENOSPC);
        expect_request_error(client.write_zeroes(end, 4096, 0), NBD_ENOSPC);
        expect_request_error(client.trim(end - 1, 2, false), NBD_EINVAL);
        // The stream is still in step: real IO works.
        client.write(end - 4096, &[9; 4096], false).unwrap();
        client.read(end - 4096, &mut buffer).unwrap();
        assert_eq!(buffer, vec![9; 4096]);
    }
    assert_eq!(server.server.stats().request_errors, 10);
}

#[test]
fn oversized_lengths_fail_with_einval_and_the_stream_stays_in_step() {
    let server = TestServer::start(128 << 20);
    let mut client = server.connect();
    let mut big = vec![0u8; MAX_REQUEST_BYTES as usize + 4096];
    expect_request_error(client.read(0, &mut big), NBD_EINVAL);
    // The server reads and drops the 64 MiB + 4 KiB payload.
    big.fill(5);
    expect_request_error(client.write(0, &big, false), NBD_EINVAL);
    assert_eq!(
        server.export.snapshot()[0],
        0,
        "nothing of the oversized write landed"
    );
    client.write(0, &[3; 8], false).unwrap();
    let mut back = [0u8; 8];
    client.read(0, &mut back).unwrap();
    assert_eq!(back, [3; 8]);
    // Exactly the maximum is fine.
    let mut max = vec![0u8; MAX_REQUEST_BYTES as usize];
    client.read(0, &mut max).unwrap();
}

/// Clients that never negotiate block sizes (NBD_OPT_EXPORT_NAME, as the
/// kernel client and old qemu do) send requests above 32 MiB; the
/// reference server and nbdkit serve them, and so does tierd up to 64 MiB.
/// NBD_OPT_GO still advertises 32 MiB as the maximum.
fn requests_up_to_64_mib_are_served(config: ServerConfig) {
    let server = TestServer::start_with(MemoryExport::new(128 << 20), config);
    let mut client = Negotiation::start(&server.target())
        .unwrap()
        .export_name("mem")
        .unwrap();
    let data = common::pattern(64, MAX_REQUEST_BYTES as usize);
    client.write(4096, &data, false).unwrap();
    let mut back = vec![0u8; data.len()];
    client.read(4096, &mut back).unwrap();
    assert!(back == data, "the 64 MiB read returned other bytes");
    let mut odd = vec![0u8; 48 << 20];
    client.read(4096, &mut odd).unwrap();
    assert!(odd[..] == data[..48 << 20]);
    // Both big requests were charged and given back (a worker gives its
    // charge back just after writing the reply).
    let held = wait_until(
        || server.server.stats().in_flight_bytes == 0,
        || server.server.stats().in_flight_bytes,
    );
    assert_eq!(held, 0);
    let stats = server.server.stats();
    assert!(stats.in_flight_bytes_max >= u64::from(MAX_REQUEST_BYTES));
    assert!(stats.in_flight_bytes_max <= DEFAULT_MAX_IN_FLIGHT_BYTES_PER_CONNECTION + (1 << 20));

    let go = server.connect();
    let sizes = go.info().block_sizes.expect("NBD_INFO_BLOCK_SIZE with GO");
    assert_eq!(sizes.maximum_payload_bytes, MAX_PAYLOAD_BYTES);
    assert_eq!(server.server.max_request_bytes(), MAX_REQUEST_BYTES);
}

#[test]
fn requests_up_to_64_mib_are_served_on_one_thread() {
    requests_up_to_64_mib_are_served(ServerConfig {
        workers_per_connection: 1,
        ..ServerConfig::default()
    });
}

#[test]
fn requests_up_to_64_mib_are_served_with_the_default_threads() {
    requests_up_to_64_mib_are_served(ServerConfig::default());
}

/// A per-connection memory bound below 64 MiB lowers the request limit and
/// the advertised maximum with it.
#[test]
fn a_small_connection_budget_lowers_the_request_limit() {
    let server = TestServer::start_with(
        MemoryExport::new(32 << 20),
        ServerConfig {
            max_in_flight_bytes_per_connection: 8 << 20,
            ..ServerConfig::default()
        },
    );
    let mut client = server.connect();
    assert_eq!(
        client.info().block_sizes.unwrap().maximum_payload_bytes,
        8 << 20
    );
    let mut buffer = vec![0u8; 8 << 20];
    client.read(0, &mut buffer).unwrap();
    let mut larger = vec![0u8; (8 << 20) + 4096];
    expect_request_error(client.read(0, &mut larger), NBD_EINVAL);
    client.read(0, &mut buffer).unwrap();
}

/// `Export::is_rotational` becomes NBD_FLAG_ROTATIONAL, with GO and with
/// EXPORT_NAME.
#[test]
fn rotational_exports_are_flagged() {
    let plain = TestServer::start(1 << 20);
    assert!(!plain.connect().info().has_flag(NBD_FLAG_ROTATIONAL));
    let disk = TestServer::start_with(
        MemoryExport::new(1 << 20).rotational(),
        ServerConfig::default(),
    );
    assert!(disk.connect().info().has_flag(NBD_FLAG_ROTATIONAL));
    let old_style = Negotiation::start(&disk.target())
        .unwrap()
        .export_name("mem")
        .unwrap();
    assert!(old_style.info().has_flag(NBD_FLAG_ROTATIONAL));
}

#[test]
fn unknown_commands_and_flags_are_einval() {
    let server = TestServer::start(SIZE_BYTES);
    let mut client = server.connect();
    let cookie = client.sender().submit(42, 0, 0, 0, &[]).unwrap();
    assert_eq!(client.wait_for(cookie).unwrap().error, NBD_EINVAL);
    // REQ_ONE means nothing to a read; an undefined bit means nothing at all.
    let cookie = client
        .sender()
        .submit(NBD_CMD_READ, NBD_CMD_FLAG_REQ_ONE, 0, 16, &[])
        .unwrap();
    assert_eq!(client.wait_for(cookie).unwrap().error, NBD_EINVAL);
    let cookie = client
        .sender()
        .submit(NBD_CMD_FLUSH, 1 << 9, 0, 0, &[])
        .unwrap();
    assert_eq!(client.wait_for(cookie).unwrap().error, NBD_EINVAL);
    // FUA is valid on every command; CACHE is accepted.
    let cookie = client
        .sender()
        .submit(NBD_CMD_READ, NBD_CMD_FLAG_FUA, 0, 16, &[])
        .unwrap();
    assert!(client.wait_for(cookie).unwrap().is_ok());
    let cookie = client
        .sender()
        .submit(NBD_CMD_CACHE, 0, 0, 4096, &[])
        .unwrap();
    assert!(client.wait_for(cookie).unwrap().is_ok());
    assert_eq!(server.server.stats().requests_of(42), 1);
}

#[test]
fn read_only_exports_refuse_writes_with_eperm() {
    let export = MemoryExport::new(SIZE_BYTES).read_only();
    let server = TestServer::start_with(export, ServerConfig::default());
    let mut client = server.connect();
    assert!(client.info().read_only());
    expect_request_error(client.write(0, &[1; 16], false), NBD_EPERM);
    expect_request_error(client.trim(0, 16, false), NBD_EPERM);
    expect_request_error(client.write_zeroes(0, 16, 0), NBD_EPERM);
    let mut back = [1u8; 16];
    client.read(0, &mut back).unwrap();
    assert_eq!(back, [0; 16]);
    client.flush().unwrap();
}

#[test]
fn unknown_export_names_are_refused() {
    let server = TestServer::start(SIZE_BYTES);
    let options = ConnectOptions {
        export_name: "nope".into(),
        ..ConnectOptions::default()
    };
    match Client::connect(&server.target(), &options) {
        Err(ClientError::OptionRefused { reply_type, .. }) => {
            assert_eq!(reply_type, NBD_REP_ERR_UNKNOWN)
        }
        other => panic!("expected NBD_REP_ERR_UNKNOWN, got {:?}", other.map(|_| ())),
    }
    let negotiation = Negotiation::start(&server.target()).unwrap();
    match negotiation.go("nope") {
        Err(ClientError::OptionRefused {
            option, reply_type, ..
        }) => {
            assert_eq!((option, reply_type), (NBD_OPT_GO, NBD_REP_ERR_UNKNOWN))
        }
        other => panic!("expected NBD_REP_ERR_UNKNOWN, got {:?}", other.map(|_| ())),
    }
    // NBD_OPT_EXPORT_NAME cannot carry an error: the server closes.
    let negotiation = Negotiation::start(&server.target()).unwrap();
    assert!(negotiation.export_name("nope").is_err());
    // The old way still works for a known name, and the empty name is the
    // default export.
    for name in ["mem", ""] {
        let mut client = Negotiation::start(&server.target())
            .unwrap()
            .export_name(name)
            .unwrap();
        assert_eq!(client.info().size_bytes, SIZE_BYTES as u64);
        client.write(0, &[1], false).unwrap();
    }
}

#[test]
fn list_info_and_abort() {
    let first: Arc<dyn Export> = Arc::new(MemoryExport::new(4096));
    let second: Arc<dyn Export> =
        Arc::new(MemoryExport::new(8192).with_description("in-memory test volume"));
    let server = Server::new(
        vec![("alpha".into(), first), ("beta".into(), second)],
        ServerConfig::default(),
    )
    .unwrap();
    let directory = tempfile::tempdir().unwrap();
    let handle = server.serve_unix(directory.path().join("s")).unwrap();
    let target = tierd_nbd::NbdTarget::Unix(directory.path().join("s"));

    let mut negotiation = Negotiation::start(&target).unwrap();
    assert_eq!(negotiation.list().unwrap(), vec!["alpha", "beta"]);
    let info = negotiation.info("beta").unwrap();
    assert_eq!(info.size_bytes, 8192);
    assert_eq!(info.name.as_deref(), Some("beta"));
    assert_eq!(info.description.as_deref(), Some("in-memory test volume"));
    let sizes = info.block_sizes.unwrap();
    assert_eq!(
        (
            sizes.minimum_bytes,
            sizes.preferred_bytes,
            sizes.maximum_payload_bytes
        ),
        (1, 4096, 32 << 20)
    );
    assert!(info.can_flush() && info.can_trim() && info.can_zero() && info.can_multi_conn());
    // The empty name is the first export.
    assert_eq!(negotiation.info("").unwrap().name.as_deref(), Some("alpha"));
    // An option this server does not know, then one with bad data.
    let replies = negotiation.raw_option(200, b"whatever").unwrap();
    assert_eq!(replies.last().unwrap().reply_type, NBD_REP_ERR_UNSUP);
    let replies = negotiation.raw_option(NBD_OPT_LIST, b"x").unwrap();
    assert_eq!(replies.last().unwrap().reply_type, NBD_REP_ERR_INVALID);
    let replies = negotiation
        .raw_option(NBD_OPT_INFO, &[0, 0, 0, 9, 1])
        .unwrap();
    assert_eq!(replies.last().unwrap().reply_type, NBD_REP_ERR_INVALID);
    // Metadata contexts need structured replies first.
    let replies = negotiation
        .raw_option(NBD_OPT_LIST_META_CONTEXT, &[0, 0, 0, 0, 0, 0, 0, 0])
        .unwrap();
    assert_eq!(replies.last().unwrap().reply_type, NBD_REP_ERR_INVALID);
    assert!(negotiation.structured_reply().unwrap());
    assert_eq!(
        negotiation.list_meta_contexts("alpha", &[]).unwrap(),
        vec![(0, "base:allocation".to_string())]
    );
    assert_eq!(
        negotiation.list_meta_contexts("alpha", &["base:"]).unwrap(),
        vec![(0, "base:allocation".to_string())]
    );
    assert!(negotiation
        .list_meta_contexts("alpha", &["qemu:dirty-bitmap:x"])
        .unwrap()
        .is_empty());
    // SET ignores the bare namespace and unknown leaves.
    assert!(negotiation
        .set_meta_context("alpha", &["base:", "base:nothing"])
        .unwrap()
        .is_empty());
    negotiation.abort().unwrap();
    // The server counts the aborted handshake after it has answered the
    // ABORT, so the client can get here first: wait for it (bounded).
    let handshakes_failed = wait_until(
        || server.stats().handshakes_failed >= 1,
        || server.stats().handshakes_failed,
    );
    assert_eq!(handshakes_failed, 1);

    // Listing can be switched off.
    let config = ServerConfig {
        allow_list: false,
        ..ServerConfig::default()
    };
    let export: Arc<dyn Export> = Arc::new(MemoryExport::new(4096));
    let private = Server::new(vec![("x".into(), export)], config).unwrap();
    let private_handle = private.serve_unix(directory.path().join("p")).unwrap();
    let mut negotiation =
        Negotiation::start(&tierd_nbd::NbdTarget::Unix(directory.path().join("p"))).unwrap();
    match negotiation.list() {
        Err(ClientError::OptionRefused { reply_type, .. }) => {
            assert_eq!(reply_type, NBD_REP_ERR_POLICY)
        }
        other => panic!("expected NBD_REP_ERR_POLICY, got {other:?}"),
    }
    negotiation.abort().unwrap();
    private_handle.shutdown();
    handle.shutdown();
}

#[test]
fn block_status_context_only_counts_for_the_export_it_was_set_for() {
    let first: Arc<dyn Export> = Arc::new(MemoryExport::new(4096));
    let second: Arc<dyn Export> = Arc::new(MemoryExport::new(4096));
    let server = Server::new(
        vec![("a".into(), first), ("b".into(), second)],
        ServerConfig::default(),
    )
    .unwrap();
    let directory = tempfile::tempdir().unwrap();
    let _handle = server.serve_unix(directory.path().join("s")).unwrap();
    let mut negotiation =
        Negotiation::start(&tierd_nbd::NbdTarget::Unix(directory.path().join("s"))).unwrap();
    assert!(negotiation.structured_reply().unwrap());
    assert_eq!(
        negotiation
            .set_meta_context("a", &[BASE_ALLOCATION])
            .unwrap()
            .len(),
        1
    );
    let mut client = negotiation.go("b").unwrap();
    let cookie = client.sender().submit_block_status(0, 4096, false).unwrap();
    assert_eq!(client.wait_for(cookie).unwrap().error, NBD_EINVAL);
}

fn pipelined_round_trip(config: ServerConfig) {
    let server = TestServer::start_with(MemoryExport::new(SIZE_BYTES), config);
    let mut client = server.connect();
    let blocks: Vec<Vec<u8>> = (0..16).map(|index| pattern(index, 4096)).collect();
    let mut cookies = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        cookies.push(
            client
                .sender()
                .submit_write(index as u64 * 8192, block, false)
                .unwrap(),
        );
    }
    let mut done = Vec::new();
    for _ in 0..16 {
        let completion = client.receive().unwrap();
        assert!(completion.is_ok());
        done.push(completion.cookie);
    }
    done.sort_unstable();
    assert_eq!(done, cookies);
    let mut reads = Vec::new();
    for index in 0..16u64 {
        reads.push(client.sender().submit_read(index * 8192, 4096).unwrap());
    }
    for _ in 0..16 {
        let completion = client.receive().unwrap();
        let index = reads
            .iter()
            .position(|cookie| *cookie == completion.cookie)
            .unwrap();
        assert_eq!(completion.data, blocks[index], "block {index}");
        assert_eq!(completion.offset_bytes, index as u64 * 8192);
    }

    // Two threads: one submits, one receives, 16 in flight.
    let (mut sender, mut receiver) = client.split();
    let total = 2000u64;
    let (credit_sender, credits) = std::sync::mpsc::sync_channel::<()>(16);
    let receiving = std::thread::spawn(move || {
        let mut sum = 0u64;
        for _ in 0..total {
            let completion = receiver.receive().unwrap();
            assert!(completion.is_ok());
            sum += u64::from(completion.data[0]);
            credits.recv().unwrap();
        }
        sum
    });
    let mut expected = 0u64;
    for request in 0..total {
        credit_sender.send(()).unwrap();
        let index = request % 16;
        expected += u64::from(blocks[index as usize][0]);
        sender.submit_read(index * 8192, 4096).unwrap();
    }
    assert_eq!(receiving.join().unwrap(), expected);
    sender.submit_disconnect().unwrap();
}

#[test]
fn sixteen_deep_pipelining_with_the_default_threads() {
    pipelined_round_trip(ServerConfig::default());
}

#[test]
fn sixteen_deep_pipelining_with_four_threads() {
    pipelined_round_trip(ServerConfig {
        workers_per_connection: 4,
        ..ServerConfig::default()
    });
}

/// Reads that take `delay_ns` each, recording how many ran at once.
struct SlowExport {
    delay_ns: u64,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

impl Export for SlowExport {
    fn size_bytes(&self) -> u64 {
        1 << 20
    }
    fn read(&self, _offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()> {
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(running, Ordering::SeqCst);
        SystemClock::new().sleep_ns(self.delay_ns);
        self.running.fetch_sub(1, Ordering::SeqCst);
        buf.fill(1);
        Ok(())
    }
    fn write(&self, _: u64, _: &[u8], _: bool) -> ExportResult<()> {
        Ok(())
    }
    fn flush(&self) -> ExportResult<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64, _: bool) -> ExportResult<()> {
        Ok(())
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool, _: bool, _: bool) -> ExportResult<()> {
        Ok(())
    }
}

/// Slow requests of one connection overlap, up to `workers_per_connection`
/// at once (the first runs alone: nothing says yet that they are slow); a
/// fast export's requests run on the connection's own thread, one at a
/// time.
#[test]
fn slow_requests_overlap_up_to_the_thread_limit() {
    for (delay_ns, threads, expected) in [(30_000_000, 4, 4), (30_000_000, 1, 1), (0, 4, 1)] {
        let export = Arc::new(SlowExport {
            delay_ns,
            running: AtomicUsize::new(0),
            most_at_once: AtomicUsize::new(0),
        });
        let served: Arc<dyn Export> = export.clone();
        let config = ServerConfig {
            workers_per_connection: threads,
            ..ServerConfig::default()
        };
        let server = Server::new(vec![("slow".into(), served)], config).unwrap();
        let directory = tempfile::tempdir().unwrap();
        let _handle = server.serve_unix(directory.path().join("s")).unwrap();
        let mut client = Client::connect_uri(&format!(
            "nbd+unix:///slow?socket={}",
            directory.path().join("s").display()
        ))
        .unwrap();
        for round in 0..4u64 {
            for index in 0..8u64 {
                client
                    .sender()
                    .submit_read((round * 8 + index) * 512, 512)
                    .unwrap();
            }
            for _ in 0..8 {
                assert_eq!(client.receive().unwrap().data, vec![1; 512]);
            }
        }
        assert_eq!(
            export.most_at_once.load(Ordering::SeqCst),
            expected,
            "delay {delay_ns} ns, {threads} threads"
        );
    }
}

#[test]
fn tcp_listener_serves_uris_and_reports_its_port() {
    let export: Arc<dyn Export> = Arc::new(MemoryExport::new(SIZE_BYTES));
    let server = Server::new(vec![("t".into(), export)], ServerConfig::default()).unwrap();
    let handle = server.serve_tcp("127.0.0.1:0").unwrap();
    let uri = handle.address().uri("t");
    assert!(
        uri.starts_with("nbd://127.0.0.1:") && !uri.contains(":0/"),
        "{uri}"
    );
    let mut client = Client::connect_uri(&uri).unwrap();
    client.write(100, b"tcp", true).unwrap();
    let mut back = [0u8; 3];
    client.read(100, &mut back).unwrap();
    assert_eq!(&back, b"tcp");
    client.disconnect().unwrap();
    handle.shutdown();
}

#[test]
fn minimum_block_size_512_refuses_unaligned_requests() {
    let config = ServerConfig {
        minimum_block_bytes: 512,
        ..ServerConfig::default()
    };
    let server = TestServer::start_with(MemoryExport::new(SIZE_BYTES), config);
    let mut client = server.connect();
    assert_eq!(client.info().block_sizes.unwrap().minimum_bytes, 512);
    expect_request_error(client.write(1, &[0; 512], false), NBD_EINVAL);
    expect_request_error(client.read(0, &mut [0; 100]), NBD_EINVAL);
    client.write(512, &[4; 512], false).unwrap();
}

#[test]
fn server_setup_errors_name_the_problem() {
    let export = || -> Arc<dyn Export> { Arc::new(MemoryExport::new(512)) };
    assert!(Server::new(vec![], ServerConfig::default()).is_err());
    let duplicate = Server::new(
        vec![("a".into(), export()), ("a".into(), export())],
        ServerConfig::default(),
    );
    assert!(duplicate.err().unwrap().to_string().contains("twice"));
    let bad_block = ServerConfig {
        minimum_block_bytes: 4096,
        ..ServerConfig::default()
    };
    assert!(Server::new(vec![("a".into(), export())], bad_block).is_err());
    assert!(Server::new(vec![(String::new(), export())], ServerConfig::default()).is_err());
}

#[test]
fn sixteen_deep_pipelining_with_each_reply_written_at_once() {
    pipelined_round_trip(ServerConfig {
        reply_batch_bytes: 1,
        ..ServerConfig::default()
    });
}

/// Polls `done` every millisecond for up to 10 s (real time), then returns
/// `value()`. For counters a server updates just after it replies.
fn wait_until(done: impl Fn() -> bool, value: impl Fn() -> u64) -> u64 {
    use tierd_common::clock::{Clock, SystemClock};
    let clock = SystemClock::new();
    while !done() && clock.now_ns() < 10_000_000_000 {
        clock.sleep_ns(1_000_000);
    }
    value()
}
