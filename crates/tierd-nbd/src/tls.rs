//! TLS for the NBD server and client (`NBD_OPT_STARTTLS`, rustls with the
//! `ring` provider, X.509 certificates): [`TlsServer`] for the server,
//! [`ClientTls`] for `nbds://` URIs in the client.
//!
//! After the server acknowledges `NBD_OPT_STARTTLS`, the rest of the
//! handshake runs the rustls session on the connection's thread
//! ([`Stream::ServerTls`]). Transmission shares it between the connection's
//! threads ([`SharedTls`], [`Stream::SharedTls`]): the session sits behind a
//! lock held only while it decrypts, encrypts or moves records to and from
//! the non-blocking socket, and a thread that must wait for the socket waits
//! in poll(2) without it. So a thread reading requests and threads writing
//! replies work on one session with no relay thread and no extra copy, and a
//! client that stops reading replies stalls its own connection as it does
//! without TLS (the writer waits for the socket; nothing grows).
//!
//! The client ([`ClientTls`]) runs its session behind a relay thread that
//! decrypts what the server sends into one end of a Unix socket pair and
//! encrypts what the client writes into the other, so the client still
//! splits into a sending and a receiving thread over a plain [`Stream`].

use std::fmt;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConnection, Connection, RootCertStore, ServerConnection};

use crate::io::Stream;

/// Whether clients must upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// The spec's FORCEDTLS: every option but `NBD_OPT_STARTTLS` and
    /// `NBD_OPT_ABORT` gets `NBD_REP_ERR_TLS_REQD` until TLS is up, and
    /// `NBD_OPT_EXPORT_NAME` closes the connection.
    Require,
    /// Clients may upgrade with `NBD_OPT_STARTTLS` or stay in plain text.
    Optional,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Require => "require",
            TlsMode::Optional => "optional",
        }
    }
}

/// Where the server's X.509 material is (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server certificate, followed by any intermediates.
    pub certificate: PathBuf,
    /// The certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by one of these
    /// CA certificates (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// A loaded TLS setup, ready for connections. Clones share the loaded
/// certificates: [`TlsServer::reload`] on any clone changes what new
/// connections of every clone get (certificate rotation without a restart).
#[derive(Clone)]
pub struct TlsServer {
    pub mode: TlsMode,
    /// True when client certificates are verified.
    pub verifies_clients: bool,
    config: Arc<parking_lot::RwLock<Arc<rustls::ServerConfig>>>,
}

impl fmt::Debug for TlsServer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("TlsServer")
            .field("mode", &self.mode)
            .field("verifies_clients", &self.verifies_clients)
            .finish_non_exhaustive()
    }
}

/// Why the TLS material could not be used. Every message names the file.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TlsError {
    pub message: String,
}

fn tls_error(message: String) -> TlsError {
    TlsError { message }
}

fn read_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|error| {
        tls_error(format!(
            "{}: cannot read the {what}: {error}",
            path.display()
        ))
    })?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            tls_error(format!(
                "{}: the {what} is not valid PEM: {error:?}",
                path.display()
            ))
        })?;
    if certificates.is_empty() {
        return Err(tls_error(format!(
            "{}: no \"BEGIN CERTIFICATE\" block in the {what}; expected PEM certificates",
            path.display()
        )));
    }
    Ok(certificates)
}

impl TlsServer {
    /// Loads the certificate chain, key and optional client CA. Errors name
    /// the file and what is wrong with it (unreadable, not PEM, no
    /// certificate, key does not match the certificate, ...).
    pub fn load(files: &TlsFiles, mode: TlsMode) -> Result<TlsServer, TlsError> {
        Ok(TlsServer {
            mode,
            verifies_clients: files.client_ca.is_some(),
            config: Arc::new(parking_lot::RwLock::new(Arc::new(Self::config(files)?))),
        })
    }

    /// Loads `files` again (renewed certificate, key or client CA) for the
    /// connections that start from now on; sessions already running keep
    /// theirs. On an error nothing changes. Whether clients must present a
    /// certificate cannot change here (`verifies_clients`): that needs a
    /// new server.
    pub fn reload(&self, files: &TlsFiles) -> Result<(), TlsError> {
        if files.client_ca.is_some() != self.verifies_clients {
            return Err(tls_error(format!(
                "client_ca was {} and is {} now: whether clients must present a certificate changes only with a restart",
                if self.verifies_clients { "set" } else { "unset" },
                if files.client_ca.is_some() { "set" } else { "unset" }
            )));
        }
        let config = Self::config(files)?;
        *self.config.write() = Arc::new(config);
        Ok(())
    }

    fn config(files: &TlsFiles) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = read_certificates(&files.certificate, "certificate")?;
        let key_bytes = std::fs::read(&files.key).map_err(|error| {
            tls_error(format!(
                "{}: cannot read the private key: {error}",
                files.key.display()
            ))
        })?;
        let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|error| {
            tls_error(format!(
                "{}: no usable private key ({error:?}); expected a PEM \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\" block",
                files.key.display()
            ))
        })?;
        // Loaded here first, so a key the provider refuses is reported as
        // such (rustls would say "failed to parse private key", which reads
        // like a wrong file or a key that does not match the certificate).
        if let Err(error) = provider.key_provider.load_private_key(key.clone_key()) {
            return Err(tls_error(format!(
                "{}: {}",
                files.key.display(),
                explain_unusable_key(&key, &error.to_string())
            )));
        }
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| tls_error(format!("TLS protocol setup failed: {error}")))?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for certificate in read_certificates(path, "client CA certificate")? {
                    roots.add(certificate).map_err(|error| {
                        tls_error(format!(
                            "{}: not a usable CA certificate: {error}",
                            path.display()
                        ))
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|error| {
                            tls_error(format!(
                                "{}: cannot verify clients with it: {error}",
                                path.display()
                            ))
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        builder.with_single_cert(chain, key).map_err(|error| {
            tls_error(format!(
                "{} with {}: {error} (does the key belong to the certificate?)",
                files.certificate.display(),
                files.key.display()
            ))
        })
    }

    /// TLS on `socket` run by the calling thread, which must then do all
    /// reading and writing of the connection itself (the inline server).
    pub fn start_in_thread(&self, socket: Stream) -> io::Result<Stream> {
        let config = Arc::clone(&self.config.read());
        let session = ServerConnection::new(config)
            .map_err(|error| io::Error::other(format!("cannot start a TLS session: {error}")))?;
        Ok(Stream::ServerTls(Box::new(rustls::StreamOwned::new(
            session, socket,
        ))))
    }
}

/// A server TLS session after its handshake, shared by the threads of one
/// connection: one reads requests while others write replies. See the
/// module documentation.
pub struct SharedTls {
    session: Mutex<ServerConnection>,
    /// Non-blocking; waits happen in poll(2), outside the session lock.
    socket: Stream,
}

impl fmt::Debug for SharedTls {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SharedTls")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl SharedTls {
    /// Takes over an in-thread session (plaintext it decrypted and nobody
    /// read yet stays in it).
    pub(crate) fn new(
        owned: rustls::StreamOwned<ServerConnection, Stream>,
    ) -> io::Result<SharedTls> {
        let rustls::StreamOwned { conn, sock } = owned;
        sock.set_nonblocking(true)?;
        Ok(SharedTls {
            session: Mutex::new(conn),
            socket: sock,
        })
    }

    pub(crate) fn socket(&self) -> &Stream {
        &self.socket
    }

    /// Plaintext from the client; `Ok(0)` at the end of the stream (with or
    /// without close_notify: NBD frames every message, so a cut message is
    /// caught by whoever reads it). A bad record is `InvalidData`.
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            {
                let mut session = self.session.lock();
                match session.reader().read(buf) {
                    Ok(count) => return Ok(count),
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(error) => return Err(error),
                }
                let mut socket = SocketIo(self.socket.as_raw_fd());
                match session.read_tls(&mut socket) {
                    Ok(_) => {
                        // After Ok(0) (the peer closed) the reader above
                        // reports the end.
                        if let Err(error) = session.process_new_packets() {
                            // The alert, best effort.
                            let _ = session.write_tls(&mut socket);
                            return Err(io::Error::new(io::ErrorKind::InvalidData, error));
                        }
                        // A key update answer or the like: out now if the
                        // socket takes it, else with the next reply.
                        while session.wants_write() {
                            if session.write_tls(&mut socket).is_err() {
                                break;
                            }
                        }
                        continue;
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    Err(error) => return Err(error),
                }
            }
            wait_for_socket(self.socket.as_raw_fd(), libc::POLLIN)?;
        }
    }

    /// Encrypts `data` and writes it whole. Waits for the socket without
    /// the session lock, so the reading thread goes on meanwhile. Callers
    /// serialise whole messages themselves (one writer at a time).
    pub(crate) fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let taken = self.write_vectored(&[io::IoSlice::new(data)])?;
            data = &data[taken..];
        }
        Ok(())
    }

    /// Encrypts as much of `bufs` as rustls buffers at once (one record
    /// stream for all slices, not a record per slice), writes the records
    /// out and returns the plaintext bytes taken. Waits for the socket
    /// without the session lock.
    pub(crate) fn write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut socket = SocketIo(self.socket.as_raw_fd());
        let mut session = self.session.lock();
        loop {
            // Nothing taken only when rustls' buffer was full: it is empty
            // after the records go out, so the next round takes some.
            let taken = session.writer().write_vectored(bufs)?;
            while session.wants_write() {
                match session.write_tls(&mut socket) {
                    Ok(_) => {}
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        drop(session);
                        wait_for_socket(self.socket.as_raw_fd(), libc::POLLOUT)?;
                        session = self.session.lock();
                    }
                    Err(error) => return Err(error),
                }
            }
            if taken > 0 || bufs.iter().all(|buf| buf.is_empty()) {
                return Ok(taken);
            }
        }
    }

    /// Sends close_notify (best effort, without waiting).
    pub(crate) fn close_notify(&self) {
        let mut session = self.session.lock();
        session.send_close_notify();
        let mut socket = SocketIo(self.socket.as_raw_fd());
        while session.wants_write() {
            if session.write_tls(&mut socket).is_err() {
                break;
            }
        }
    }
}

/// Reads and writes a socket by descriptor (writes never raise SIGPIPE),
/// for rustls' `read_tls`/`write_tls` on a socket several threads share.
struct SocketIo(std::os::fd::RawFd);

impl Read for SocketIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let read = unsafe { libc::recv(self.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if read < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(read as usize)
        }
    }
}

impl Write for SocketIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        crate::io::send_vectored_no_signal(self.0, bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Waits until `fd` is ready for `events` (or has hung up or failed: the
/// next read or write then says so).
fn wait_for_socket(fd: std::os::fd::RawFd, events: libc::c_short) -> io::Result<()> {
    loop {
        let mut poll_fd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll_fd, 1, -1) };
        if ready >= 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Starts a relay thread for `session` on `socket`; returns the plaintext
/// end and the thread.
fn start_relay(
    session: Connection,
    socket: Stream,
    log: Box<dyn Fn(String) + Send>,
) -> io::Result<(Stream, JoinHandle<()>)> {
    let (inner, outer) = UnixStream::pair()?;
    let thread = std::thread::Builder::new()
        .name("nbd-tls".into())
        .spawn(move || {
            if let Err(message) = relay(session, socket, inner) {
                log(message);
            }
        })?;
    Ok((Stream::Unix(outer), thread))
}

/// How to make a key the provider loads; ends every key refusal.
const KEY_ADVICE: &str = "make a new key and a certificate for it, e.g. `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out key.pem` or an ECDSA P-256 key with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out key.pem`";

/// What the crypto provider accepts, for key refusals.
const KEY_RULES: &str = "the TLS library (rustls with the ring crypto provider) loads two-prime RSA keys of 2048, 3072 or 4096 bits whose primes are each half the modulus and a multiple of 512 bits (public exponent 65537 or more, at most 33 bits), ECDSA keys on P-256 or P-384, and Ed25519 keys";

/// Why the crypto provider refused `key`, in terms an operator can act on:
/// for RSA, which of ring's rules the key breaks (some tools, GnuTLS's
/// certtool among them, make keys of odd sizes whose primes are not a
/// multiple of 512 bits); for ECDSA, the curve; then how to make a key that
/// works.
fn explain_unusable_key(key: &PrivateKeyDer<'_>, provider_error: &str) -> String {
    let described = match key {
        PrivateKeyDer::Pkcs1(der) => der::rsa_key(der.secret_pkcs1_der()).map(KeyKind::Rsa),
        PrivateKeyDer::Sec1(der) => der::sec1_curve(der.secret_sec1_der()).map(KeyKind::Ec),
        PrivateKeyDer::Pkcs8(der) => der::pkcs8_key(der.secret_pkcs8_der()),
        _ => None,
    };
    match described {
        Some(KeyKind::Rsa(rsa)) => {
            let mut problems = Vec::new();
            if rsa.version != 0 {
                problems.push("it has more than two primes (multi-prime RSA)".to_string());
            }
            if rsa.modulus_bits < 2048 {
                problems.push(format!(
                    "its modulus is {} bits, under the 2048-bit minimum",
                    rsa.modulus_bits
                ));
            }
            if rsa.modulus_bits > 4096 {
                problems.push(format!(
                    "its modulus is {} bits, over the 4096-bit maximum",
                    rsa.modulus_bits
                ));
            }
            let half = rsa.modulus_bits.div_ceil(2);
            if rsa.prime_bits.iter().any(|bits| *bits != half) {
                problems.push(format!(
                    "its primes are {} and {} bits, not both half of the {}-bit modulus",
                    rsa.prime_bits[0], rsa.prime_bits[1], rsa.modulus_bits
                ));
            } else if rsa.prime_bits.iter().any(|bits| bits % 512 != 0) {
                problems.push(format!(
                    "its primes are {} bits, not a multiple of 512 bits (its modulus is {} bits)",
                    rsa.prime_bits[0], rsa.modulus_bits
                ));
            }
            if rsa.exponent_bits > 33 || rsa.exponent.is_some_and(|exponent| exponent < 65537) {
                problems.push(match rsa.exponent {
                    Some(exponent) => format!("its public exponent is {exponent}"),
                    None => format!("its public exponent is {} bits long", rsa.exponent_bits),
                });
            }
            if problems.is_empty() {
                problems.push(format!("the provider says: {provider_error}"));
            }
            format!(
                "this RSA private key cannot be used: {}. {KEY_RULES}; {KEY_ADVICE}",
                problems.join("; ")
            )
        }
        Some(KeyKind::Ec(curve)) => format!(
            "this ECDSA private key is on {curve}, which cannot be used. {KEY_RULES}; {KEY_ADVICE}"
        ),
        Some(KeyKind::Other(algorithm)) => format!(
            "this {algorithm} private key cannot be used. {KEY_RULES}; {KEY_ADVICE}"
        ),
        None => format!(
            "the private key cannot be used (the provider says: {provider_error}). {KEY_RULES}; {KEY_ADVICE}"
        ),
    }
}

/// A private key as far as the refusal message needs it.
enum KeyKind {
    Rsa(der::RsaKey),
    /// An ECDSA key's curve, by name.
    Ec(String),
    /// Another algorithm, by name.
    Other(String),
}

/// The little DER reading the key refusal message needs: RSA sizes and
/// ECDSA curves from PKCS#1, SEC1 and PKCS#8. Never panics on any input.
mod der {
    use super::KeyKind;

    const SEQUENCE: u8 = 0x30;
    const INTEGER: u8 = 0x02;
    const OCTET_STRING: u8 = 0x04;
    const OID: u8 = 0x06;
    const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    const RSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
    const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    const ED25519: &[u8] = &[0x2b, 0x65, 0x70];
    const ED448: &[u8] = &[0x2b, 0x65, 0x71];

    /// The sizes of an RSA key.
    pub struct RsaKey {
        /// 0: two primes; 1: multi-prime.
        pub version: u64,
        pub modulus_bits: u64,
        pub prime_bits: [u64; 2],
        pub exponent_bits: u64,
        /// The public exponent when it fits in 64 bits.
        pub exponent: Option<u64>,
    }

    /// One tag-length-value from the front of `input`.
    fn next<'a>(input: &mut &'a [u8]) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, mut rest) = rest.split_first()?;
        let length = if first < 0x80 {
            usize::from(first)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let mut length = 0usize;
            for byte in &rest[..count] {
                length = (length << 8) | usize::from(*byte);
            }
            rest = &rest[count..];
            length
        };
        if rest.len() < length {
            return None;
        }
        let (value, after) = rest.split_at(length);
        *input = after;
        Some((tag, value))
    }

    fn expect<'a>(input: &mut &'a [u8], tag: u8) -> Option<&'a [u8]> {
        match next(input)? {
            (found, value) if found == tag => Some(value),
            _ => None,
        }
    }

    /// Bits of an unsigned big-endian INTEGER value.
    fn bits(value: &[u8]) -> u64 {
        let start = value
            .iter()
            .position(|byte| *byte != 0)
            .unwrap_or(value.len());
        let value = &value[start..];
        match value.first() {
            None => 0,
            Some(first) => (value.len() as u64 - 1) * 8 + u64::from(8 - first.leading_zeros()),
        }
    }

    fn small(value: &[u8]) -> Option<u64> {
        let start = value
            .iter()
            .position(|byte| *byte != 0)
            .unwrap_or(value.len());
        let value = &value[start..];
        if value.len() > 8 {
            return None;
        }
        Some(
            value
                .iter()
                .fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte)),
        )
    }

    /// PKCS#1 RSAPrivateKey: version, n, e, d, p, q, ...
    pub fn rsa_key(der: &[u8]) -> Option<RsaKey> {
        let mut outer = der;
        let mut fields = expect(&mut outer, SEQUENCE)?;
        let version = small(expect(&mut fields, INTEGER)?)?;
        let modulus = expect(&mut fields, INTEGER)?;
        let exponent = expect(&mut fields, INTEGER)?;
        let _private_exponent = expect(&mut fields, INTEGER)?;
        let first_prime = expect(&mut fields, INTEGER)?;
        let second_prime = expect(&mut fields, INTEGER)?;
        Some(RsaKey {
            version,
            modulus_bits: bits(modulus),
            prime_bits: [bits(first_prime), bits(second_prime)],
            exponent_bits: bits(exponent),
            exponent: small(exponent),
        })
    }

    fn curve_name(oid: &[u8]) -> String {
        match oid {
            [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07] => "P-256".into(),
            [0x2b, 0x81, 0x04, 0x00, 0x22] => "P-384".into(),
            [0x2b, 0x81, 0x04, 0x00, 0x23] => "P-521".into(),
            [0x2b, 0x81, 0x04, 0x00, 0x0a] => "secp256k1".into(),
            other => format!(
                "the curve with OID bytes {}",
                other
                    .iter()
                    .map(|byte| format!("{byte:02x}"))
                    .collect::<String>()
            ),
        }
    }

    /// SEC1 ECPrivateKey: version, key, [0] curve OID.
    pub fn sec1_curve(der: &[u8]) -> Option<String> {
        let mut outer = der;
        let mut fields = expect(&mut outer, SEQUENCE)?;
        expect(&mut fields, INTEGER)?;
        expect(&mut fields, OCTET_STRING)?;
        let mut parameters = expect(&mut fields, 0xa0)?;
        Some(curve_name(expect(&mut parameters, OID)?))
    }

    /// PKCS#8 PrivateKeyInfo: version, algorithm, key.
    pub fn pkcs8_key(der: &[u8]) -> Option<KeyKind> {
        let mut outer = der;
        let mut fields = expect(&mut outer, SEQUENCE)?;
        expect(&mut fields, INTEGER)?;
        let mut algorithm = expect(&mut fields, SEQUENCE)?;
        let oid = expect(&mut algorithm, OID)?;
        let key = expect(&mut fields, OCTET_STRING)?;
        if oid == RSA_ENCRYPTION {
            return rsa_key(key).map(KeyKind::Rsa);
        }
        if oid == EC_PUBLIC_KEY {
            return Some(KeyKind::Ec(curve_name(expect(&mut algorithm, OID)?)));
        }
        Some(KeyKind::Other(
            match oid {
                RSA_PSS => "RSA-PSS (RSASSA-PSS algorithm identifier)",
                ED448 => "Ed448",
                ED25519 => "Ed25519",
                _ => "unrecognised-algorithm",
            }
            .to_string(),
        ))
    }
}

/// The client side of TLS, as libnbd's URIs give it: a directory with the
/// CA that signed the server (`ca-cert.pem`) and, when the server checks
/// clients, `client-cert.pem` and `client-key.pem`; and the name the server
/// certificate must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    pub certificates_dir: PathBuf,
    pub hostname: String,
}

impl ClientTls {
    fn config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca_path = self.certificates_dir.join("ca-cert.pem");
        let mut roots = RootCertStore::empty();
        for certificate in read_certificates(&ca_path, "CA certificate")? {
            roots.add(certificate).map_err(|error| {
                tls_error(format!(
                    "{}: not a usable CA certificate: {error}",
                    ca_path.display()
                ))
            })?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| tls_error(format!("TLS protocol setup failed: {error}")))?
            .with_root_certificates(roots);
        let cert_path = self.certificates_dir.join("client-cert.pem");
        let key_path = self.certificates_dir.join("client-key.pem");
        let config = if cert_path.exists() || key_path.exists() {
            let chain = read_certificates(&cert_path, "client certificate")?;
            let key_bytes = std::fs::read(&key_path).map_err(|error| {
                tls_error(format!(
                    "{}: cannot read the client key: {error}",
                    key_path.display()
                ))
            })?;
            let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|error| {
                tls_error(format!(
                    "{}: no usable private key ({error:?})",
                    key_path.display()
                ))
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|error| {
                tls_error(format!(
                    "{} with {}: {error}",
                    cert_path.display(),
                    key_path.display()
                ))
            })?
        } else {
            builder.with_no_client_auth()
        };
        Ok(Arc::new(config))
    }

    /// Starts the client side of TLS on `socket` (after the server
    /// acknowledged `NBD_OPT_STARTTLS`) behind a relay thread, so the
    /// plaintext end can be split between a sending and a receiving thread.
    /// The handshake runs before this returns; a server whose certificate
    /// does not verify is an error here.
    pub fn start(&self, socket: Stream) -> Result<(Stream, JoinHandle<()>), TlsError> {
        let config = self.config()?;
        let name = rustls::pki_types::ServerName::try_from(self.hostname.clone())
            .map_err(|error| tls_error(format!("tls-hostname {:?}: {error}", self.hostname)))?;
        let mut session = ClientConnection::new(config, name)
            .map_err(|error| tls_error(format!("cannot start a TLS session: {error}")))?;
        let mut handshake_socket = socket;
        while session.is_handshaking() {
            session
                .complete_io(&mut handshake_socket)
                .map_err(|error| tls_error(format!("TLS handshake failed: {error}")))?;
        }
        start_relay(
            Connection::Client(session),
            handshake_socket,
            Box::new(|_message| {}),
        )
        .map_err(|error| tls_error(format!("cannot start the TLS relay: {error}")))
    }
}

const RELAY_BUFFER_BYTES: usize = 64 * 1024;

fn would_block(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Moves bytes between the TLS socket and the plaintext pair end until both
/// directions are closed. `Err` carries a message worth logging.
fn relay(mut session: Connection, mut socket: Stream, plain: UnixStream) -> Result<(), String> {
    // Writes through `Stream` never raise SIGPIPE.
    let mut plain = Stream::Unix(plain);
    socket
        .set_nonblocking(true)
        .map_err(|error| format!("TLS relay: {error}"))?;
    plain
        .set_nonblocking(true)
        .map_err(|error| format!("TLS relay: {error}"))?;
    // The relay bounds what it takes from the server itself (one buffer at a
    // time, only once the socket took the previous records).
    session.set_buffer_limit(None);
    let mut buffer = vec![0u8; RELAY_BUFFER_BYTES];
    // Decrypted bytes not yet taken by the server.
    let mut to_plain: Vec<u8> = Vec::new();
    let mut to_plain_at = 0usize;
    let mut socket_closed = false;
    let mut plain_write_closed = false;
    let mut plain_closed = false;
    let result = loop {
        // Encrypted records out to the client.
        let mut socket_failed = None;
        while session.wants_write() {
            match session.write_tls(&mut socket) {
                Ok(_) => {}
                Err(error) if would_block(&error) => break,
                Err(error) => {
                    socket_failed = Some(error);
                    break;
                }
            }
        }
        if let Some(error) = socket_failed {
            break if plain_closed || error.kind() == io::ErrorKind::BrokenPipe {
                Ok(())
            } else {
                Err(format!("TLS socket write failed: {error}"))
            };
        }
        if plain_closed && !session.wants_write() {
            break Ok(());
        }
        // Plaintext in to the server.
        loop {
            if to_plain_at < to_plain.len() {
                match plain.write(&to_plain[to_plain_at..]) {
                    Ok(written) => to_plain_at += written,
                    Err(error) if would_block(&error) => break,
                    // The server closed its end: nothing more to deliver.
                    Err(_) => {
                        to_plain.clear();
                        to_plain_at = 0;
                        plain_write_closed = true;
                        break;
                    }
                }
                continue;
            }
            to_plain.clear();
            to_plain_at = 0;
            if plain_write_closed {
                break;
            }
            match session.reader().read(&mut buffer) {
                Ok(0) => {
                    // close_notify from the client.
                    socket_closed = true;
                    break;
                }
                Ok(count) => to_plain.extend_from_slice(&buffer[..count]),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                // The client closed the socket without close_notify.
                Err(_) => {
                    socket_closed = true;
                    break;
                }
            }
        }
        if socket_closed && to_plain_at >= to_plain.len() && !plain_write_closed {
            let _ = plain.shutdown(Shutdown::Write);
            plain_write_closed = true;
        }
        // Plaintext from the server, once earlier records have gone out.
        if !plain_closed && !session.wants_write() && !session.is_handshaking() {
            match plain.read(&mut buffer) {
                Ok(0) => {
                    plain_closed = true;
                    session.send_close_notify();
                    continue;
                }
                Ok(count) => {
                    if let Err(error) = session.writer().write_all(&buffer[..count]) {
                        break Err(format!("TLS encryption failed: {error}"));
                    }
                    continue;
                }
                Err(error) if would_block(&error) => {}
                Err(_) => {
                    plain_closed = true;
                    session.send_close_notify();
                    continue;
                }
            }
        }
        if socket_closed && plain_closed {
            break Ok(());
        }
        // Wait for something to do.
        let want_socket_read = !socket_closed && session.wants_read();
        let want_socket_write = session.wants_write();
        let want_plain_write = to_plain_at < to_plain.len();
        let want_plain_read = !plain_closed && !session.wants_write() && !session.is_handshaking();
        let mut fds = [
            libc::pollfd {
                fd: socket.as_raw_fd(),
                events: (if want_socket_read { libc::POLLIN } else { 0 })
                    | (if want_socket_write { libc::POLLOUT } else { 0 }),
                revents: 0,
            },
            libc::pollfd {
                fd: plain.as_raw_fd(),
                events: (if want_plain_read { libc::POLLIN } else { 0 })
                    | (if want_plain_write { libc::POLLOUT } else { 0 }),
                revents: 0,
            },
        ];
        if fds[0].events == 0 && fds[1].events == 0 {
            // Nothing can make progress (e.g. the client closed and the
            // server is gone): done.
            break Ok(());
        }
        // A negative descriptor is skipped, so a hang-up on a side we are
        // not waiting for cannot wake the loop over and over.
        for fd in &mut fds {
            if fd.events == 0 {
                fd.fd = -1;
            }
        }
        // SAFETY: `fds` is a valid array of two pollfd for the duration of
        // the call; both descriptors are owned by this function.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break Err(format!("TLS relay poll failed: {error}"));
        }
        if want_socket_read && fds[0].revents != 0 {
            match session.read_tls(&mut socket) {
                Ok(0) => socket_closed = true,
                Ok(_) => {
                    if let Err(error) = session.process_new_packets() {
                        // Send the alert rustls queued, then give up.
                        while session.wants_write() {
                            if session.write_tls(&mut socket).is_err() {
                                break;
                            }
                        }
                        break Err(format!("TLS session failed: {error}"));
                    }
                }
                Err(error) if would_block(&error) => {}
                Err(error) => {
                    if error.kind() == io::ErrorKind::ConnectionReset {
                        socket_closed = true;
                    } else {
                        break Err(format!("TLS socket read failed: {error}"));
                    }
                }
            }
        }
    };
    let _ = socket.shutdown(Shutdown::Both);
    let _ = plain.shutdown(Shutdown::Both);
    result
}
