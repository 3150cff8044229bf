//! TLS (`NBD_OPT_STARTTLS`): the spec's FORCEDTLS and optional modes, the
//! state reset after STARTTLS, client certificates, and load errors — with a
//! rustls client speaking the protocol by hand. Real clients (nbdinfo,
//! qemu-img) over TLS are tested in `tierd-cli`'s `nbd_clients`.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;

use common::pki::TestPki;
use common::{go_data, option_bytes as option, pattern, MemoryExport, TestServer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tierd_nbd::proto::*;
use tierd_nbd::{ServerConfig, TlsFiles, TlsMode, TlsServer};

/// The test PKI, written to a temporary directory for the server.
struct Pki {
    directory: tempfile::TempDir,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
    stranger_ca_pem: String,
    stranger_cert_pem: String,
    stranger_key_pem: String,
}

impl Pki {
    fn new() -> Pki {
        let directory = tempfile::tempdir().unwrap();
        let pki = TestPki::new();
        pki.write(directory.path(), None);
        Pki {
            ca_pem: pki.ca_cert,
            client_cert_pem: pki.client_cert,
            client_key_pem: pki.client_key,
            stranger_ca_pem: pki.stranger_ca_cert,
            stranger_cert_pem: pki.stranger_client_cert,
            stranger_key_pem: pki.stranger_client_key,
            directory,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.directory.path().join(name)
    }

    fn files(&self, verify_clients: bool) -> TlsFiles {
        TlsFiles {
            certificate: self.path("server-cert.pem"),
            key: self.path("server-key.pem"),
            client_ca: verify_clients.then(|| self.path("ca-cert.pem")),
        }
    }

    fn server(&self, mode: TlsMode, verify_clients: bool, workers: usize) -> TestServer {
        let tls = TlsServer::load(&self.files(verify_clients), mode).unwrap();
        TestServer::start_with(
            MemoryExport::new(SIZE_BYTES),
            ServerConfig {
                tls: Some(tls),
                workers_per_connection: workers,
                ..ServerConfig::default()
            },
        )
    }
}

const SIZE_BYTES: usize = 4 << 20;

fn certificates(pem: &str) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|certificate| certificate.unwrap())
        .collect()
}

fn private_key(pem: &str) -> PrivateKeyDer<'static> {
    use rustls::pki_types::pem::PemObject;
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// A rustls client trusting `ca_pem`, presenting `identity` if given.
fn client_config(ca_pem: &str, identity: Option<(&str, &str)>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates(ca_pem) {
        roots.add(certificate).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(certificates(cert), private_key(key))
            .unwrap(),
    })
}

/// Sends `option` and returns its replies (type, data), through the final one.
fn ask(stream: &mut impl ReadWrite, code: u32, data: &[u8]) -> Vec<(u32, Vec<u8>)> {
    stream.write_all(&option(code, data)).unwrap();
    stream.flush().unwrap();
    let mut replies = Vec::new();
    loop {
        let mut header = [0u8; 20];
        stream.read_exact(&mut header).unwrap();
        assert_eq!(&header[0..8], &NBD_REP_MAGIC.to_be_bytes());
        assert_eq!(u32::from_be_bytes(header[8..12].try_into().unwrap()), code);
        let reply_type = u32::from_be_bytes(header[12..16].try_into().unwrap());
        let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
        let mut data = vec![0u8; length as usize];
        stream.read_exact(&mut data).unwrap();
        replies.push((reply_type, data));
        if reply_type == NBD_REP_ACK || reply_type & NBD_REP_FLAG_ERROR != 0 {
            return replies;
        }
    }
}

fn final_reply(replies: &[(u32, Vec<u8>)]) -> u32 {
    replies.last().unwrap().0
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Connects and reads the greeting; returns the plain stream after the
/// client flags.
fn greet(server: &TestServer) -> UnixStream {
    let mut stream = UnixStream::connect(&server.socket).unwrap();
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[0..16], b"NBDMAGICIHAVEOPT");
    stream
        .write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    stream
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, UnixStream>;

/// STARTTLS on `stream`, then the client side of the handshake (driven to
/// completion so failures show here).
fn upgrade(
    mut stream: UnixStream,
    config: Arc<rustls::ClientConfig>,
) -> Result<TlsStream, std::io::Error> {
    let replies = ask(&mut stream, NBD_OPT_STARTTLS, &[]);
    assert_eq!(replies, vec![(NBD_REP_ACK, Vec::new())]);
    let mut session =
        rustls::ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
    while session.is_handshaking() {
        session.complete_io(&mut stream)?;
    }
    Ok(rustls::StreamOwned::new(session, stream))
}

fn request(command: u16, cookie: u64, offset_bytes: u64, length_bytes: u32) -> [u8; 28] {
    RequestHeader {
        flags: 0,
        command,
        cookie,
        offset_bytes,
        length_bytes,
    }
    .encode()
}

/// Reads a simple reply; returns (error, cookie).
fn simple_reply(stream: &mut impl Read) -> (u32, u64) {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).unwrap();
    assert_eq!(&header[0..4], &NBD_SIMPLE_REPLY_MAGIC.to_be_bytes());
    (
        u32::from_be_bytes(header[4..8].try_into().unwrap()),
        u64::from_be_bytes(header[8..16].try_into().unwrap()),
    )
}

/// After GO on a TLS stream: a 1 MiB write, 16 pipelined reads of it, a
/// flush, then a clean disconnect; checks every byte on both sides.
fn exercise_transmission(stream: &mut TlsStream, server: &TestServer, seed: u64) {
    let replies = ask(stream, NBD_OPT_GO, &go_data("mem"));
    assert_eq!(final_reply(&replies), NBD_REP_ACK, "{replies:?}");
    let data = pattern(seed, 1 << 20);
    let offset = seed * 4096;
    let mut message = request(NBD_CMD_WRITE, 1, offset, data.len() as u32).to_vec();
    message.extend_from_slice(&data);
    stream.write_all(&message).unwrap();
    stream.flush().unwrap();
    assert_eq!(simple_reply(stream), (0, 1));
    let piece = data.len() / 16;
    let mut batch = Vec::new();
    for index in 0..16u64 {
        batch.extend_from_slice(&request(
            NBD_CMD_READ,
            100 + index,
            offset + index * piece as u64,
            piece as u32,
        ));
    }
    stream.write_all(&batch).unwrap();
    stream.flush().unwrap();
    let mut back = vec![0u8; data.len()];
    for _ in 0..16 {
        let (error, cookie) = simple_reply(stream);
        assert_eq!(error, 0);
        let index = (cookie - 100) as usize;
        stream
            .read_exact(&mut back[index * piece..(index + 1) * piece])
            .unwrap();
    }
    assert_eq!(back, data);
    stream.write_all(&request(NBD_CMD_FLUSH, 2, 0, 0)).unwrap();
    stream.flush().unwrap();
    assert_eq!(simple_reply(stream), (0, 2));
    let snapshot = server.export.snapshot();
    assert_eq!(
        &snapshot[offset as usize..offset as usize + data.len()],
        &data[..]
    );
    stream.write_all(&request(NBD_CMD_DISC, 3, 0, 0)).unwrap();
    stream.flush().unwrap();
    let mut rest = Vec::new();
    // The server closes after DISC (with or without close_notify).
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{} bytes after DISC", rest.len());
}

#[test]
fn required_tls_refuses_other_options_then_serves_over_tls() {
    let pki = Pki::new();
    for workers in [0, 2] {
        let server = pki.server(TlsMode::Require, false, workers);
        let mut plain = greet(&server);
        for code in [
            NBD_OPT_LIST,
            NBD_OPT_INFO,
            NBD_OPT_GO,
            NBD_OPT_STRUCTURED_REPLY,
            99,
        ] {
            let data = if code == NBD_OPT_INFO || code == NBD_OPT_GO {
                go_data("mem")
            } else {
                Vec::new()
            };
            let replies = ask(&mut plain, code, &data);
            assert_eq!(final_reply(&replies), NBD_REP_ERR_TLS_REQD, "option {code}");
        }
        let replies = ask(&mut plain, NBD_OPT_STARTTLS, b"x");
        assert_eq!(final_reply(&replies), NBD_REP_ERR_INVALID);
        let mut secure = upgrade(plain, client_config(&pki.ca_pem, None)).unwrap();
        // Over TLS: no more TLS_REQD, a second STARTTLS is invalid.
        let replies = ask(&mut secure, NBD_OPT_STARTTLS, &[]);
        assert_eq!(final_reply(&replies), NBD_REP_ERR_INVALID);
        let replies = ask(&mut secure, NBD_OPT_LIST, &[]);
        assert_eq!(replies[0].0, NBD_REP_SERVER);
        assert_eq!(final_reply(&replies), NBD_REP_ACK);
        exercise_transmission(&mut secure, &server, 3 + workers as u64);
        assert!(
            server.logs.warnings().is_empty(),
            "{:?}",
            server.logs.warnings()
        );
    }
}

#[test]
fn export_name_before_starttls_closes_a_tls_only_server() {
    let pki = Pki::new();
    let server = pki.server(TlsMode::Require, false, 0);
    let mut plain = greet(&server);
    plain
        .write_all(&option(NBD_OPT_EXPORT_NAME, b"mem"))
        .unwrap();
    let mut rest = Vec::new();
    let _ = plain.read_to_end(&mut rest);
    assert!(rest.is_empty(), "the server answered: {rest:?}");
}

#[test]
fn optional_tls_serves_plain_and_tls_clients() {
    let pki = Pki::new();
    let server = pki.server(TlsMode::Optional, false, 0);
    let mut plain = server.connect();
    plain.write(0, &[9; 4096], false).unwrap();
    let mut secure = upgrade(greet(&server), client_config(&pki.ca_pem, None)).unwrap();
    exercise_transmission(&mut secure, &server, 7);
    let mut back = [0u8; 4096];
    plain.read(0, &mut back).unwrap();
    assert_eq!(back, [9; 4096]);
    plain.disconnect().unwrap();
}

#[test]
fn starttls_without_tls_configured_is_refused_by_policy() {
    let server = TestServer::start(1 << 16);
    let mut plain = greet(&server);
    let replies = ask(&mut plain, NBD_OPT_STARTTLS, &[]);
    assert_eq!(final_reply(&replies), NBD_REP_ERR_POLICY);
    // The connection goes on in plain text.
    let replies = ask(&mut plain, NBD_OPT_GO, &go_data("mem"));
    assert_eq!(final_reply(&replies), NBD_REP_ACK);
}

#[test]
fn options_negotiated_before_starttls_are_forgotten() {
    let pki = Pki::new();
    let server = pki.server(TlsMode::Optional, false, 0);
    let mut plain = greet(&server);
    assert_eq!(
        final_reply(&ask(&mut plain, NBD_OPT_STRUCTURED_REPLY, &[])),
        NBD_REP_ACK
    );
    let mut secure = upgrade(plain, client_config(&pki.ca_pem, None)).unwrap();
    let mut query = (3u32).to_be_bytes().to_vec();
    query.extend_from_slice(b"mem");
    query.extend_from_slice(&1u32.to_be_bytes());
    query.extend_from_slice(&(BASE_ALLOCATION.len() as u32).to_be_bytes());
    query.extend_from_slice(BASE_ALLOCATION.as_bytes());
    // Metadata contexts need structured replies, which did not survive.
    let replies = ask(&mut secure, NBD_OPT_SET_META_CONTEXT, &query);
    assert_eq!(final_reply(&replies), NBD_REP_ERR_INVALID, "{replies:?}");
    assert_eq!(
        final_reply(&ask(&mut secure, NBD_OPT_STRUCTURED_REPLY, &[])),
        NBD_REP_ACK
    );
    let replies = ask(&mut secure, NBD_OPT_SET_META_CONTEXT, &query);
    assert_eq!(replies[0].0, NBD_REP_META_CONTEXT);
    assert_eq!(final_reply(&replies), NBD_REP_ACK);
}

#[test]
fn bytes_sent_before_the_starttls_reply_end_the_connection() {
    let pki = Pki::new();
    let server = pki.server(TlsMode::Require, false, 0);
    let mut plain = greet(&server);
    // STARTTLS and a plaintext GO in one write: the GO must not be taken as
    // if it had come over TLS.
    let mut bytes = option(NBD_OPT_STARTTLS, &[]);
    bytes.extend(option(NBD_OPT_GO, &go_data("mem")));
    plain.write_all(&bytes).unwrap();
    let mut rest = Vec::new();
    let _ = plain.read_to_end(&mut rest);
    assert!(rest.is_empty(), "the server answered {} bytes", rest.len());
    let warnings = server.logs.warnings();
    assert!(
        warnings
            .iter()
            .any(|line| line.contains("after NBD_OPT_STARTTLS")),
        "{warnings:?}"
    );
}

#[test]
fn client_certificates_are_checked_when_a_client_ca_is_set() {
    let pki = Pki::new();
    // One thread per connection and several (the shared session) alike.
    for workers in [0, 2] {
        let server = pki.server(TlsMode::Require, true, workers);
        // Signed by the configured CA: served.
        let config = client_config(
            &pki.ca_pem,
            Some((&pki.client_cert_pem, &pki.client_key_pem)),
        );
        let mut secure = upgrade(greet(&server), config).unwrap();
        exercise_transmission(&mut secure, &server, 11);
        // No certificate, or one from another CA: no session.
        for identity in [
            None,
            Some((
                pki.stranger_cert_pem.as_str(),
                pki.stranger_key_pem.as_str(),
            )),
        ] {
            let config = client_config(&pki.ca_pem, identity);
            let refused = upgrade(greet(&server), config).and_then(|mut stream| {
                // TLS 1.3 clients finish their side before the server has
                // checked the certificate; the refusal shows on first use.
                stream.write_all(&option(NBD_OPT_LIST, &[]))?;
                stream.flush()?;
                let mut byte = [0u8; 1];
                stream.read_exact(&mut byte)
            });
            assert!(refused.is_err(), "identity {identity:?} was accepted");
        }
        common::wait_for(|| {
            server
                .logs
                .warnings()
                .iter()
                .filter(|line| line.contains("TLS ended"))
                .count()
                >= 2
        });
    }
}

#[test]
fn a_client_that_does_not_trust_the_server_gets_no_session() {
    let pki = Pki::new();
    let server = pki.server(TlsMode::Require, false, 0);
    let config = client_config(&pki.stranger_ca_pem, None);
    let error = match upgrade(greet(&server), config) {
        Ok(_) => panic!("a client with another CA completed the handshake"),
        Err(error) => error,
    };
    assert!(
        error.to_string().contains("certificate"),
        "unexpected error: {error}"
    );
    common::wait_for(|| {
        server
            .logs
            .warnings()
            .iter()
            .any(|line| line.contains("TLS ended"))
    });
}

#[test]
fn shutdown_ends_tls_connections() {
    let pki = Pki::new();
    let mut server = pki.server(TlsMode::Require, false, 0);
    let mut secure = upgrade(greet(&server), client_config(&pki.ca_pem, None)).unwrap();
    assert_eq!(
        final_reply(&ask(&mut secure, NBD_OPT_GO, &go_data("mem"))),
        NBD_REP_ACK
    );
    secure.write_all(&request(NBD_CMD_READ, 5, 0, 512)).unwrap();
    secure.flush().unwrap();
    assert_eq!(simple_reply(&mut secure), (0, 5));
    let mut data = [0u8; 512];
    secure.read_exact(&mut data).unwrap();
    server.handle.take().unwrap().shutdown();
    let mut rest = Vec::new();
    let _ = secure.read_to_end(&mut rest);
    assert!(rest.is_empty());
    assert_eq!(server.server.stats().connections_active, 0);
}

#[test]
fn load_errors_name_the_file_and_the_problem() {
    let pki = Pki::new();
    let files = pki.files(false);
    std::fs::write(pki.path("empty.pem"), "not a certificate\n").unwrap();
    std::fs::write(pki.path("other-key.pem"), pki.client_key_pem.as_str()).unwrap();
    let cases = [
        (
            TlsFiles {
                certificate: pki.path("nope.pem"),
                ..files.clone()
            },
            ["nope.pem", "cannot read"],
        ),
        (
            TlsFiles {
                certificate: pki.path("empty.pem"),
                ..files.clone()
            },
            ["empty.pem", "CERTIFICATE"],
        ),
        (
            TlsFiles {
                key: pki.path("ca-cert.pem"),
                ..files.clone()
            },
            ["ca-cert.pem", "private key"],
        ),
        // A key that belongs to another certificate.
        (
            TlsFiles {
                key: pki.path("other-key.pem"),
                ..files.clone()
            },
            ["server-cert.pem", "other-key.pem"],
        ),
        (
            TlsFiles {
                client_ca: Some(pki.path("empty.pem")),
                ..files.clone()
            },
            ["empty.pem", "client CA"],
        ),
    ];
    for (case, expected) in cases {
        let message = TlsServer::load(&case, TlsMode::Require)
            .unwrap_err()
            .to_string();
        for text in expected {
            assert!(message.contains(text), "{text:?} missing in: {message}");
        }
    }
    // The good files load.
    TlsServer::load(&files, TlsMode::Require).unwrap();
}

#[test]
fn our_client_connects_over_tls_and_refuses_to_fall_back() {
    let pki = Pki::new();
    for workers in [0, 2] {
        let server = pki.server(TlsMode::Require, true, workers);
        let uri = format!(
            "nbds+unix:///mem?socket={}&tls-certificates={}",
            server.socket.display(),
            pki.directory.path().display()
        );
        let mut client = tierd_nbd::Client::connect_uri(&uri).unwrap();
        assert!(client.info().structured_replies);
        let data = pattern(21 + workers as u64, 3 << 20);
        client.write(4096, &data, true).unwrap();
        // Pipelined from two threads over the relay.
        let (mut sender, mut receiver) = client.split();
        let piece = data.len() / 12;
        let writer = std::thread::spawn(move || {
            let mut cookies = Vec::new();
            for index in 0..12 {
                cookies.push(
                    sender
                        .submit_read(4096 + (index * piece) as u64, piece as u32)
                        .unwrap(),
                );
            }
            (sender, cookies)
        });
        let mut back = vec![0u8; data.len()];
        for _ in 0..12 {
            let completion = receiver.receive().unwrap();
            assert!(completion.is_ok(), "{completion:?}");
            let offset = completion.offset_bytes as usize - 4096;
            back[offset..offset + completion.data.len()].copy_from_slice(&completion.data);
        }
        let (_sender, cookies) = writer.join().unwrap();
        assert_eq!(cookies.len(), 12);
        assert_eq!(back, data);
        assert_eq!(
            &server.export.snapshot()[4096..4096 + data.len()],
            &data[..]
        );
    }
    // A server without TLS: STARTTLS is refused, and the client stops.
    let plain = TestServer::start(1 << 16);
    let uri = format!(
        "nbds+unix:///mem?socket={}&tls-certificates={}",
        plain.socket.display(),
        pki.directory.path().display()
    );
    match tierd_nbd::Client::connect_uri(&uri) {
        Err(tierd_nbd::ClientError::OptionRefused { reply_type, .. }) => {
            assert_eq!(reply_type, NBD_REP_ERR_POLICY)
        }
        other => panic!("expected the STARTTLS refusal, got {:?}", other.map(|_| ())),
    }
    // A server whose certificate the client cannot verify.
    let server = pki.server(TlsMode::Require, false, 0);
    let stranger = tempfile::tempdir().unwrap();
    std::fs::write(stranger.path().join("ca-cert.pem"), &pki.stranger_ca_pem).unwrap();
    let uri = format!(
        "nbds+unix:///mem?socket={}&tls-certificates={}",
        server.socket.display(),
        stranger.path().display()
    );
    let error = tierd_nbd::Client::connect_uri(&uri)
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(error.contains("handshake"), "{error}");
}

#[test]
fn garbage_after_starttls_ends_only_that_connection() {
    use tierd_common::rng::{Rng, SeededRng};
    common::count_panics();
    let pki = Pki::new();
    for workers in [0u64, 2] {
        let server = pki.server(TlsMode::Require, false, workers as usize);
        let mut rng = SeededRng::new(0x746c_7300 + workers);
        for _ in 0..100 {
            let mut stream = greet(&server);
            assert_eq!(
                ask(&mut stream, NBD_OPT_STARTTLS, &[]),
                vec![(NBD_REP_ACK, Vec::new())]
            );
            let mut bytes = Vec::new();
            if rng.below(2) == 0 {
                // A handshake record header with a random length and body.
                bytes.extend_from_slice(&[0x16, 0x03, 0x01]);
                bytes.extend_from_slice(&(rng.below(1 << 14) as u16).to_be_bytes());
            }
            let count = rng.below(700);
            bytes.extend((0..count).map(|_| rng.below(256) as u8));
            let _ = stream.write_all(&bytes);
            let _ = stream.shutdown(std::net::Shutdown::Write);
            // The server ends the connection; a hang fails here.
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(20)))
                .unwrap();
            let mut rest = Vec::new();
            if let Err(error) = stream.read_to_end(&mut rest) {
                assert!(
                    !matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    "the server kept a garbage TLS connection open"
                );
            }
        }
        // Others are still served.
        let mut secure = upgrade(greet(&server), client_config(&pki.ca_pem, None)).unwrap();
        exercise_transmission(&mut secure, &server, 40 + workers);
        assert_eq!(
            common::PANICS.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "a server thread panicked"
        );
    }
}

/// Loads `key` with the certificate `certificate` and returns the error.
fn key_refusal(certificate: PathBuf, key: PathBuf) -> String {
    let files = TlsFiles {
        certificate,
        key,
        client_ca: None,
    };
    TlsServer::load(&files, TlsMode::Require)
        .unwrap_err()
        .to_string()
}

/// Says which rule of the crypto provider the key breaks and how to make one
/// that works, instead of rustls' "failed to parse private key" followed by
/// our "(does the key belong to the certificate?)".
fn assert_explains_rsa_refusal(message: &str, key_name: &str, expected: &[&str]) {
    for text in [
        key_name,
        "RSA private key cannot be used",
        "openssl genpkey",
        "P-256",
    ]
    .iter()
    .chain(expected)
    {
        assert!(message.contains(text), "{text:?} missing in: {message}");
    }
    assert!(
        !message.contains("does the key belong to the certificate"),
        "blames the certificate: {message}"
    );
}

/// A committed 2056-bit RSA key (primes of 1028 bits, as `openssl genrsa
/// 2056` and GnuTLS's certtool with odd sizes make them) and a self-signed
/// certificate for it: ring refuses primes that are not a multiple of 512
/// bits.
#[test]
fn an_rsa_key_ring_refuses_is_explained_with_how_to_make_one() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let message = key_refusal(
        fixtures.join("rsa-2056-cert.pem"),
        fixtures.join("rsa-2056-key.pem"),
    );
    assert_explains_rsa_refusal(
        &message,
        "rsa-2056-key.pem",
        &[
            "primes are 1028 bits, not a multiple of 512 bits",
            "2056 bits",
        ],
    );
}

/// The same for keys made right here with openssl (when installed): an odd
/// size, and one under ring's 2048-bit minimum, in PKCS#1 and PKCS#8.
#[test]
fn odd_sized_rsa_keys_made_by_openssl_are_explained() {
    if !common::tool_available("openssl") {
        return;
    }
    let directory = tempfile::tempdir().unwrap();
    let openssl = |args: &[&str]| {
        let output = std::process::Command::new("openssl")
            .args(args)
            .current_dir(directory.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let cases: [(&str, &[&str], &[&str]); 3] = [
        (
            "2600",
            &[],
            &["primes are 1300 bits, not a multiple of 512 bits"],
        ),
        (
            "1536",
            &[],
            &["modulus is 1536 bits, under the 2048-bit minimum"],
        ),
        (
            "3000",
            &["-traditional"],
            &["primes are 1500 bits, not a multiple of 512 bits"],
        ),
    ];
    for (bits, format, expected) in cases {
        let key = format!("rsa-{bits}.pem");
        let cert = format!("rsa-{bits}-cert.pem");
        let mut args = vec!["genrsa"];
        args.extend_from_slice(format);
        args.extend_from_slice(&["-out", &key, bits]);
        openssl(&args);
        openssl(&[
            "req",
            "-new",
            "-x509",
            "-key",
            &key,
            "-subj",
            "/CN=localhost",
            "-days",
            "2",
            "-out",
            &cert,
        ]);
        let message = key_refusal(directory.path().join(&cert), directory.path().join(&key));
        assert_explains_rsa_refusal(&message, &key, expected);
    }
    // The advice works: a key made as the message says loads.
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        "good.pem",
    ]);
    openssl(&[
        "req",
        "-new",
        "-x509",
        "-key",
        "good.pem",
        "-subj",
        "/CN=localhost",
        "-days",
        "2",
        "-out",
        "good-cert.pem",
    ]);
    let files = TlsFiles {
        certificate: directory.path().join("good-cert.pem"),
        key: directory.path().join("good.pem"),
        client_ca: None,
    };
    TlsServer::load(&files, TlsMode::Require).unwrap();
}

/// Reads and writes of a [`MemoryExport`] that each take `delay_ns`, and
/// the most that ran at once.
struct SlowMemory {
    inner: MemoryExport,
    delay_ns: u64,
    running: std::sync::atomic::AtomicUsize,
    most_at_once: std::sync::atomic::AtomicUsize,
}

impl SlowMemory {
    fn enter(&self) {
        use std::sync::atomic::Ordering;
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(running, Ordering::SeqCst);
        tierd_common::clock::Clock::sleep_ns(
            &tierd_common::clock::SystemClock::new(),
            self.delay_ns,
        );
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl tierd_nbd::Export for SlowMemory {
    fn size_bytes(&self) -> u64 {
        tierd_nbd::Export::size_bytes(&self.inner)
    }
    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> tierd_nbd::ExportResult<()> {
        self.enter();
        tierd_nbd::Export::read(&self.inner, offset_bytes, buf)
    }
    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> tierd_nbd::ExportResult<()> {
        self.enter();
        tierd_nbd::Export::write(&self.inner, offset_bytes, data, fua)
    }
    fn flush(&self) -> tierd_nbd::ExportResult<()> {
        tierd_nbd::Export::flush(&self.inner)
    }
    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> tierd_nbd::ExportResult<()> {
        tierd_nbd::Export::trim(&self.inner, offset_bytes, length_bytes, fua)
    }
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
        may_trim: bool,
        fast_only: bool,
    ) -> tierd_nbd::ExportResult<()> {
        tierd_nbd::Export::write_zeroes(
            &self.inner,
            offset_bytes,
            length_bytes,
            fua,
            may_trim,
            fast_only,
        )
    }
}

/// Slow requests over TLS run on several threads at once, all reading and
/// writing one TLS session: pipelined writes and reads of distinct blocks
/// come back whole and right, replies interleave in any order, and DISC
/// still answers what was in flight.
#[test]
fn one_tls_session_serves_several_threads_at_once() {
    use std::sync::atomic::Ordering;
    let pki = Pki::new();
    let export = Arc::new(SlowMemory {
        inner: MemoryExport::new(SIZE_BYTES),
        delay_ns: 5_000_000,
        running: Default::default(),
        most_at_once: Default::default(),
    });
    let served: Arc<dyn tierd_nbd::Export> = export.clone();
    let logs = common::LogSink::default();
    let config = ServerConfig {
        tls: Some(TlsServer::load(&pki.files(false), TlsMode::Require).unwrap()),
        workers_per_connection: 8,
        logger: logs.config().logger,
        ..ServerConfig::default()
    };
    let server = tierd_nbd::Server::new(vec![("mem".into(), served)], config).unwrap();
    let directory = tempfile::tempdir().unwrap();
    let socket = directory.path().join("tls.sock");
    let handle = server.serve_unix(&socket).unwrap();
    let mut plain = UnixStream::connect(&socket).unwrap();
    let mut greeting = [0u8; 18];
    plain.read_exact(&mut greeting).unwrap();
    plain
        .write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    let mut stream = upgrade(plain, client_config(&pki.ca_pem, None)).unwrap();
    let replies = ask(&mut stream, NBD_OPT_GO, &go_data("mem"));
    assert_eq!(final_reply(&replies), NBD_REP_ACK, "{replies:?}");
    const BLOCKS: u64 = 24;
    const BLOCK_BYTES: usize = 64 * 1024;
    for round in 0..2u64 {
        let blocks: Vec<Vec<u8>> = (0..BLOCKS)
            .map(|index| pattern(round * 100 + index, BLOCK_BYTES))
            .collect();
        let mut batch = Vec::new();
        for (index, block) in blocks.iter().enumerate() {
            batch.extend_from_slice(&request(
                NBD_CMD_WRITE,
                index as u64,
                index as u64 * BLOCK_BYTES as u64,
                BLOCK_BYTES as u32,
            ));
            batch.extend_from_slice(block);
        }
        stream.write_all(&batch).unwrap();
        stream.flush().unwrap();
        let mut answered: Vec<u64> = (0..BLOCKS)
            .map(|_| simple_reply(&mut stream))
            .map(|(error, cookie)| {
                assert_eq!(error, 0);
                cookie
            })
            .collect();
        answered.sort_unstable();
        assert_eq!(answered, (0..BLOCKS).collect::<Vec<_>>());
        let mut batch = Vec::new();
        for index in 0..BLOCKS {
            batch.extend_from_slice(&request(
                NBD_CMD_READ,
                1000 + index,
                index * BLOCK_BYTES as u64,
                BLOCK_BYTES as u32,
            ));
        }
        stream.write_all(&batch).unwrap();
        stream.flush().unwrap();
        for _ in 0..BLOCKS {
            let (error, cookie) = simple_reply(&mut stream);
            assert_eq!(error, 0);
            let mut back = vec![0u8; BLOCK_BYTES];
            stream.read_exact(&mut back).unwrap();
            assert!(
                back == blocks[(cookie - 1000) as usize],
                "block {}",
                cookie - 1000
            );
        }
    }
    // DISC behind a pipelined batch: every read in flight is answered.
    let mut batch = Vec::new();
    for index in 0..8u64 {
        batch.extend_from_slice(&request(NBD_CMD_READ, 2000 + index, index * 4096, 4096));
    }
    batch.extend_from_slice(&request(NBD_CMD_DISC, 3000, 0, 0));
    stream.write_all(&batch).unwrap();
    stream.flush().unwrap();
    for _ in 0..8 {
        let (error, _) = simple_reply(&mut stream);
        assert_eq!(error, 0);
        let mut back = vec![0u8; 4096];
        stream.read_exact(&mut back).unwrap();
    }
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{} bytes after DISC", rest.len());
    let most = export.most_at_once.load(Ordering::SeqCst);
    assert!(most >= 4, "at most {most} requests ran at once");
    assert!(logs.warnings().is_empty(), "{:?}", logs.warnings());
    handle.shutdown();
}

/// Certificate rotation: `TlsServer::reload` on the caller's copy of the
/// setup makes the running server hand new connections the renewed
/// certificate (a session started before keeps its own); a reload that
/// fails or that would switch client verification on changes nothing.
#[test]
fn a_reloaded_certificate_serves_new_connections() {
    let old = Pki::new();
    let tls = TlsServer::load(&old.files(false), TlsMode::Require).unwrap();
    let server = TestServer::start_with(
        MemoryExport::new(SIZE_BYTES),
        ServerConfig {
            tls: Some(tls.clone()),
            ..ServerConfig::default()
        },
    );
    let mut before = upgrade(greet(&server), client_config(&old.ca_pem, None)).unwrap();
    // A renewed certificate from another CA, at other paths.
    let new = Pki::new();
    let broken = TlsFiles {
        key: old.path("does-not-exist.pem"),
        ..new.files(false)
    };
    assert!(tls.reload(&broken).is_err());
    assert!(
        tls.reload(&new.files(true)).is_err(),
        "client verification cannot be switched on by a reload"
    );
    // Still the old certificate.
    assert!(upgrade(greet(&server), client_config(&old.ca_pem, None)).is_ok());
    tls.reload(&new.files(false)).unwrap();
    assert!(
        upgrade(greet(&server), client_config(&old.ca_pem, None)).is_err(),
        "a client trusting only the old CA must reject the renewed certificate"
    );
    let mut after = upgrade(greet(&server), client_config(&new.ca_pem, None)).unwrap();
    let replies = ask(&mut after, NBD_OPT_LIST, &[]);
    assert_eq!(final_reply(&replies), NBD_REP_ACK);
    // The session from before the reload goes on.
    let replies = ask(&mut before, NBD_OPT_LIST, &[]);
    assert_eq!(final_reply(&replies), NBD_REP_ACK);
}
