//! The NBD server end to end: handshake (client flags, every option) and
//! the transmission phase (request headers, payloads, every command), fed
//! through a real Unix socket into `tierd_nbd::Server`.
//!
//! Two servers run for the whole fuzzing process, in a private temporary
//! directory: one inline (no workers, 1-byte blocks, listing allowed) and
//! one with two workers per connection, 512-byte minimum blocks and
//! `NBD_OPT_LIST` disabled. Both offer TLS in `optional` mode with a
//! throwaway self-signed certificate, so an input that sends
//! `NBD_OPT_STARTTLS` drives the TLS start (in-thread session inline, relay
//! thread with workers) and hands rustls the rest of its bytes as the
//! handshake; inputs without it run in plain text as before. First byte bit 0 picks the server; the rest is
//! written as the client's bytes, then the client half-closes and reads
//! every reply until the server closes. The server must close on its own
//! (at the end of the input at the latest): a connection still open after
//! [`REPLY_TIMEOUT`] is reported as a hang. A panic in a server thread
//! aborts the process (libFuzzer's panic hook), so it is caught as a crash.

use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tierd_nbd::{Export, MemoryExport, Server, ServerConfig};

/// Size of each in-memory export: small, so reads stay cheap.
pub const EXPORT_BYTES: u64 = 256 * 1024;
/// Longest client input written (more than any socket buffer would only
/// make the test block on itself, not reach new server code).
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
/// How long the server may take to finish replying and close.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// The fuzzed servers' exports (`tierd_nbd::MemoryExport`): `disk`, writable,
/// with data in its first half and zeroes (holes in block status) in its
/// second, so the server encodes several extents; `ro`, read-only, all 7s.
fn exports() -> Vec<(String, Arc<dyn Export>)> {
    let disk = MemoryExport::new(EXPORT_BYTES as usize).with_description("fuzzing export");
    disk.poke(0, &vec![0x5a; EXPORT_BYTES as usize / 2])
        .expect("inside the export");
    let read_only = MemoryExport::filled(EXPORT_BYTES as usize, 7)
        .read_only()
        .with_description("fuzzing export");
    vec![
        ("disk".to_string(), Arc::new(disk)),
        ("ro".to_string(), Arc::new(read_only)),
    ]
}

/// The socket paths of the two servers, started on first use and kept for
/// the life of the process.
fn sockets() -> &'static [PathBuf; 2] {
    static SOCKETS: OnceLock<[PathBuf; 2]> = OnceLock::new();
    SOCKETS.get_or_init(|| {
        let directory = std::env::temp_dir().join(format!("tierd-fuzz-nbd-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("create the socket directory");
        let start = |name: &str, config: ServerConfig| {
            let exports = exports();
            let server = Server::new(exports, config).expect("valid server config");
            let path = directory.join(name);
            let handle = server.serve_unix(&path).expect("listen on the socket");
            // Serve until the process ends.
            std::mem::forget(handle);
            path
        };
        let quiet: tierd_nbd::Logger = Arc::new(|_, _| {});
        let key = rcgen::KeyPair::generate().expect("a key pair");
        let certificate = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .and_then(|params| params.self_signed(&key))
            .expect("a self-signed certificate");
        let files = tierd_nbd::TlsFiles {
            certificate: directory.join("cert.pem"),
            key: directory.join("key.pem"),
            client_ca: None,
        };
        std::fs::write(&files.certificate, certificate.pem()).expect("write the certificate");
        std::fs::write(&files.key, key.serialize_pem()).expect("write the key");
        let tls = tierd_nbd::TlsServer::load(&files, tierd_nbd::TlsMode::Optional)
            .expect("load the throwaway certificate");
        let inline = ServerConfig {
            tls: Some(tls.clone()),
            logger: quiet.clone(),
            shutdown_grace_ms: 0,
            ..ServerConfig::default()
        };
        let workers = ServerConfig {
            tls: Some(tls),
            allow_list: false,
            workers_per_connection: 2,
            minimum_block_bytes: 512,
            reply_batch_bytes: 4096,
            logger: quiet,
            shutdown_grace_ms: 0,
            ..ServerConfig::default()
        };
        [start("inline.sock", inline), start("workers.sock", workers)]
    })
}

pub fn run(data: &[u8]) {
    let Some((mode, rest)) = crate::split_mode(data) else {
        return;
    };
    let input = &rest[..rest.len().min(MAX_INPUT_BYTES)];
    let path = &sockets()[usize::from(mode & 1)];
    let mut stream = UnixStream::connect(path).expect("connect to the fuzzing server");
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .expect("set a read timeout");
    // The server may close early (bad magic, abort); the rest is unread.
    if stream.write_all(input).is_ok() {
        let _ = stream.shutdown(Shutdown::Write);
    }
    let mut buffer = vec![0u8; 64 * 1024];
    // A reset means the server closed with input unread: fine.
    if !crate::drain_until_closed(&mut stream, &mut buffer) {
        panic!("the server did not close the connection within {REPLY_TIMEOUT:?} after the client's input ended");
    }
}
