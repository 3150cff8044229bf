//! The NBD server: fixed-newstyle handshake, then the transmission phase over
//! any [`Export`].
//!
//! Concurrency, after nbdkit's model: each of a connection's threads (up to
//! `workers_per_connection`, started as requests need them) takes the read
//! side, reads one request, executes it and writes its reply; nothing is
//! queued or handed between threads. While requests are fast a thread keeps
//! the read side through its request and batches replies (the socket is
//! written only when no further whole request is buffered), so a fast
//! export costs one thread per connection; slow requests are handed over
//! and overlap (`transmit`). A client that stops reading replies stalls its
//! own connection (the socket send buffer fills, then the threads wait to
//! write, then request reading stops) and nothing grows.
//!
//! Memory: every READ reply and WRITE payload is charged against a
//! per-connection and a server-wide byte budget before the server reads or
//! executes the request, and given back once its reply is written; a client
//! whose requests would exceed either waits, unread. Connections still in
//! their handshake are bounded in number (a new one closes the oldest) and
//! in time (`handshake_timeout_ms`, enforced by one watchdog thread per
//! listener).
//!
//! Layout: this module holds the public types, the listeners (accept loop,
//! connection table, handshake watchdog) and the counters; `connection`
//! runs one connection from handshake to close, `negotiate` the option
//! phase (with STARTTLS), `transmit` the transmission phase (the
//! connection's threads), `execute` one request against the export, and
//! `budget` the in-flight byte budgets.

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tierd_common::clock::{Clock, SystemClock};

use crate::export::Export;
use crate::io::Stream;
use crate::proto::*;
use crate::tls::TlsServer;

mod budget;
mod connection;
mod execute;
mod negotiate;
mod reply;
mod transmit;

use budget::{ByteBudget, ConnectionBudget};
use connection::run_connection;
use negotiate::advertised_max_block_bytes;

/// How loud a log line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// Where the server's log lines go. Must not block for long: it is called
/// from connection threads.
pub type Logger = Arc<dyn Fn(LogLevel, &str) + Send + Sync>;

/// The default logger: every line becomes a `tracing` event (target
/// `tierd_nbd`), inside the `connection` span (field `conn`) of the
/// connection it concerns, so it reaches whatever subscriber the program
/// installed (`tierd serve`'s one log path). Without a subscriber nothing is
/// printed; use [`stderr_logger`] then.
pub fn tracing_logger() -> Logger {
    Arc::new(|level, message| match level {
        LogLevel::Error => tracing::error!("{message}"),
        LogLevel::Warn => tracing::warn!("{message}"),
        LogLevel::Info => tracing::info!("{message}"),
        LogLevel::Debug => tracing::debug!("{message}"),
    })
}

/// Warnings and errors to stderr (programs without a `tracing` subscriber).
pub fn stderr_logger() -> Logger {
    Arc::new(|level, message| {
        if level <= LogLevel::Warn {
            eprintln!("tierd-nbd {}: {message}", level.as_str());
        }
    })
}

/// Settings of a [`Server`].
#[derive(Clone)]
pub struct ServerConfig {
    /// Answer `NBD_OPT_LIST`; when false it gets `NBD_REP_ERR_POLICY`.
    pub allow_list: bool,
    /// Threads per connection, at most: each reads one request, executes
    /// it and writes its reply, so this many requests of one connection
    /// execute at once. Started as requests need them (an idle connection
    /// has one); 0 and 1 both mean the connection's own thread alone.
    pub workers_per_connection: usize,
    /// Advertised minimum block size: 1 (any alignment) or 512 (requests
    /// that are not multiples of 512 get EINVAL).
    pub minimum_block_bytes: u32,
    /// Connections accepted at once per listener; more are closed at once.
    pub max_connections: usize,
    /// On shutdown, how long connections get to finish in-flight requests
    /// after reading stops, before their sockets are closed.
    pub shutdown_grace_ms: u64,
    /// While requests are fast, replies wait while further whole requests
    /// are already buffered, but are written once this many bytes wait.
    /// Smaller values let the client work on early replies while the server
    /// handles the rest of a pipelined batch.
    pub reply_batch_bytes: usize,
    /// TLS (`NBD_OPT_STARTTLS`) when set; see [`TlsServer`] and its mode.
    pub tls: Option<TlsServer>,
    /// A connection that has not entered transmission this long after it
    /// was accepted is closed, so silent or slow clients cannot keep a slot.
    pub handshake_timeout_ms: u64,
    /// Connections per listener that may be in their handshake at once; a
    /// new connection beyond this closes the oldest of them, so idle sockets
    /// cannot lock well-behaved clients out.
    pub max_unnegotiated_connections: usize,
    /// Bytes of READ replies and WRITE payloads one connection may hold in
    /// memory at once; a request that would exceed it waits, and the server
    /// reads no further requests of that client meanwhile. Also caps the
    /// request length (with [`MAX_REQUEST_BYTES`]). At least
    /// [`MIN_IN_FLIGHT_BYTES_PER_CONNECTION`].
    pub max_in_flight_bytes_per_connection: u64,
    /// The same bound over every connection of the server (all listeners).
    /// At least `max_in_flight_bytes_per_connection`.
    pub max_in_flight_bytes: u64,
    /// Stack size of each connection thread; `None`: Rust's default (2 MiB).
    pub connection_stack_bytes: Option<usize>,
    /// Stack size of each worker thread; `None`: Rust's default (2 MiB).
    pub worker_stack_bytes: Option<usize>,
    /// Reads the time for handshake deadlines.
    pub clock: Arc<dyn Clock>,
    pub logger: Logger,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            allow_list: true,
            workers_per_connection: DEFAULT_WORKERS_PER_CONNECTION,
            minimum_block_bytes: 1,
            max_connections: 256,
            shutdown_grace_ms: 5_000,
            reply_batch_bytes: DEFAULT_REPLY_BATCH_BYTES,
            tls: None,
            handshake_timeout_ms: DEFAULT_HANDSHAKE_TIMEOUT_MS,
            max_unnegotiated_connections: DEFAULT_MAX_UNNEGOTIATED_CONNECTIONS,
            max_in_flight_bytes_per_connection: DEFAULT_MAX_IN_FLIGHT_BYTES_PER_CONNECTION,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            connection_stack_bytes: None,
            worker_stack_bytes: None,
            clock: Arc::new(SystemClock::new()),
            logger: stderr_logger(),
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ServerConfig")
            .field("allow_list", &self.allow_list)
            .field("workers_per_connection", &self.workers_per_connection)
            .field("minimum_block_bytes", &self.minimum_block_bytes)
            .field("max_connections", &self.max_connections)
            .field("shutdown_grace_ms", &self.shutdown_grace_ms)
            .field("reply_batch_bytes", &self.reply_batch_bytes)
            .field("tls", &self.tls)
            .field("handshake_timeout_ms", &self.handshake_timeout_ms)
            .field(
                "max_unnegotiated_connections",
                &self.max_unnegotiated_connections,
            )
            .field(
                "max_in_flight_bytes_per_connection",
                &self.max_in_flight_bytes_per_connection,
            )
            .field("max_in_flight_bytes", &self.max_in_flight_bytes)
            .field("connection_stack_bytes", &self.connection_stack_bytes)
            .field("worker_stack_bytes", &self.worker_stack_bytes)
            .finish_non_exhaustive()
    }
}

/// Why a server could not be built or could not listen.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid server setup: {0}")]
    Config(String),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        #[source]
        source: io::Error,
    },
}

/// The preferred block size advertised in `NBD_INFO_BLOCK_SIZE`.
pub const PREFERRED_BLOCK_BYTES: u32 = 4096;
/// Write payloads above the request limit but at most this are read and
/// dropped (the request fails with EINVAL, the connection lives); larger
/// ones are treated as an attack and close the connection.
pub const MAX_DISCARDED_PAYLOAD_BYTES: u32 = 256 * 1024 * 1024;
/// Option data longer than this closes the connection.
pub const MAX_OPTION_BYTES: u32 = 64 * 1024;
/// Options accepted in one handshake before the server gives up on the
/// client.
pub const MAX_OPTIONS_PER_HANDSHAKE: usize = 4096;
/// The metadata context id of `base:allocation`.
pub const ALLOCATION_CONTEXT_ID: u32 = 1;
/// Most extents in one block status reply (the spec's 2^20 cap, kept lower).
pub const MAX_EXTENTS_PER_REPLY: usize = 64 * 1024;

const INPUT_BUFFER_BYTES: usize = 256 * 1024;
/// Default of [`ServerConfig::workers_per_connection`]: the Linux NBD
/// client's queue depth per connection. Threads start only for slow
/// requests (a fast export keeps one per connection), so a slow export sees
/// up to this many of a client's requests at once.
pub const DEFAULT_WORKERS_PER_CONNECTION: usize = 128;
/// Default of [`ServerConfig::reply_batch_bytes`].
pub const DEFAULT_REPLY_BATCH_BYTES: usize = 64 * 1024;
/// Default of [`ServerConfig::handshake_timeout_ms`].
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Default of [`ServerConfig::max_unnegotiated_connections`].
pub const DEFAULT_MAX_UNNEGOTIATED_CONNECTIONS: usize = 64;
/// Default of [`ServerConfig::max_in_flight_bytes_per_connection`]: one
/// request of the largest accepted length.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES_PER_CONNECTION: u64 = MAX_REQUEST_BYTES as u64;
/// Default of [`ServerConfig::max_in_flight_bytes`].
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: u64 = 1 << 30;
/// Smallest accepted [`ServerConfig::max_in_flight_bytes_per_connection`].
pub const MIN_IN_FLIGHT_BYTES_PER_CONNECTION: u64 = 1 << 20;

/// Counter slot per command: 0..=7 are the commands, 8 is anything else.
const COMMAND_SLOTS: usize = 9;

/// Counters of connections and handshakes (per connection, not per
/// request).
#[derive(Default)]
struct Counters {
    connections_accepted: AtomicU64,
    connections_active: AtomicU64,
    connections_refused: AtomicU64,
    handshakes_failed: AtomicU64,
    handshakes_timed_out: AtomicU64,
    connections_evicted: AtomicU64,
    protocol_errors: AtomicU64,
}

/// Counters of requests: one set per connection, written only by that
/// connection's threads, and one for the connections that ended.
#[derive(Default)]
struct RequestCounters {
    requests: [AtomicU64; COMMAND_SLOTS],
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    request_errors: AtomicU64,
    requests_cancelled: AtomicU64,
}

impl RequestCounters {
    fn add_to(&self, total: &RequestCounters) {
        for (from, to) in self.requests.iter().zip(total.requests.iter()) {
            to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        for (from, to) in [
            (&self.bytes_read, &total.bytes_read),
            (&self.bytes_written, &total.bytes_written),
            (&self.request_errors, &total.request_errors),
            (&self.requests_cancelled, &total.requests_cancelled),
        ] {
            to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// What one connection in transmission counts and holds: its request
/// counters and its side of the in-flight budgets. Requests touch only
/// this (aligned, so two connections never share a cache line); the
/// server finds it in [`Shared::ledgers`] for stats and to reclaim spare
/// credit.
#[repr(align(128))]
struct ConnectionLedger {
    counters: RequestCounters,
    budget: ConnectionBudget,
}

#[derive(Default)]
struct Ledgers {
    live: Vec<Arc<ConnectionLedger>>,
    /// The request counters of connections that ended.
    retired: RequestCounters,
}

/// A snapshot of a server's counters (all listeners together), for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests received per command, indexed like
    /// [`ServerStats::COMMAND_NAMES`] (the last slot: unknown commands).
    pub requests: [u64; COMMAND_SLOTS],
    /// Bytes returned by successful reads.
    pub bytes_read: u64,
    /// Bytes stored by successful writes.
    pub bytes_written: u64,
    /// Requests answered with an error.
    pub request_errors: u64,
    pub connections_accepted: u64,
    pub connections_active: u64,
    /// Connections closed at once because `max_connections` were open.
    pub connections_refused: u64,
    /// Handshakes that ended without reaching transmission (including
    /// unknown export names and clients that aborted).
    pub handshakes_failed: u64,
    /// Connections closed because the client broke the protocol.
    pub protocol_errors: u64,
    /// Connections closed because they did not finish the handshake within
    /// `handshake_timeout_ms`.
    pub handshakes_timed_out: u64,
    /// Connections in their handshake closed to make room for a new one
    /// (`max_unnegotiated_connections` or `max_connections` reached).
    pub connections_evicted: u64,
    /// Queued requests dropped unexecuted because their client went away.
    pub requests_cancelled: u64,
    /// Bytes of READ replies and WRITE payloads held right now (all
    /// connections), and the most held at once since the server started.
    pub in_flight_bytes: u64,
    pub in_flight_bytes_max: u64,
}

impl ServerStats {
    pub const COMMAND_NAMES: [&'static str; COMMAND_SLOTS] = [
        "read",
        "write",
        "disc",
        "flush",
        "trim",
        "cache",
        "write_zeroes",
        "block_status",
        "unknown",
    ];

    /// Requests of one command by its NBD number (unknown numbers share the
    /// last slot).
    pub fn requests_of(&self, command: u16) -> u64 {
        self.requests[command_slot(command)]
    }
}

#[inline]
fn command_slot(command: u16) -> usize {
    usize::from(command).min(COMMAND_SLOTS - 1)
}

struct ServedExport {
    name: String,
    export: Arc<dyn Export>,
}

struct Shared {
    exports: Vec<ServedExport>,
    config: ServerConfig,
    counters: Counters,
    /// Server-wide in-flight bytes (`max_in_flight_bytes`): bytes in flight
    /// plus the connections' spare credit.
    budget: ByteBudget,
    /// Connections in transmission.
    ledgers: Mutex<Ledgers>,
    /// The longest READ/WRITE accepted: [`MAX_REQUEST_BYTES`], or less when
    /// the per-connection budget is smaller.
    max_request_bytes: u32,
}

impl Shared {
    fn log(&self, level: LogLevel, message: &str) {
        (self.config.logger)(level, message);
    }

    /// A ledger for a connection entering transmission.
    fn register_connection(&self) -> Arc<ConnectionLedger> {
        let ledger = Arc::new(ConnectionLedger {
            counters: RequestCounters::default(),
            budget: ConnectionBudget::new(self.config.max_in_flight_bytes_per_connection),
        });
        self.ledgers.lock().live.push(Arc::clone(&ledger));
        ledger
    }

    /// A connection ended: its counters join the retired ones (under the
    /// lock, so a stats snapshot counts them exactly once) and its spare
    /// credit goes back.
    fn retire_connection(&self, ledger: &Arc<ConnectionLedger>) {
        let mut ledgers = self.ledgers.lock();
        ledger.counters.add_to(&ledgers.retired);
        ledgers.live.retain(|live| !Arc::ptr_eq(live, ledger));
        drop(ledgers);
        ledger.budget.return_spare(&self.budget);
    }

    /// Gives every connection's spare credit back to the server-wide
    /// budget (a request is about to wait for server-wide bytes).
    fn reclaim_spare_credit(&self) {
        for ledger in &self.ledgers.lock().live {
            ledger.budget.return_spare(&self.budget);
        }
    }

    /// The export a client names; the empty name is the first export.
    fn find_export(&self, name: &[u8]) -> Option<usize> {
        if name.is_empty() {
            return if self.exports.is_empty() {
                None
            } else {
                Some(0)
            };
        }
        self.exports
            .iter()
            .position(|served| served.name.as_bytes() == name)
    }
}

/// An NBD server over a fixed set of named exports. Cheap to clone; every
/// listener started from it shares its exports and counters.
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    /// `exports`: name → export; the first one is also served under the
    /// empty name. Names must be unique, non-empty, at most 4096 bytes and
    /// free of NUL.
    pub fn new(
        exports: Vec<(String, Arc<dyn Export>)>,
        config: ServerConfig,
    ) -> Result<Server, ServerError> {
        if exports.is_empty() {
            return Err(ServerError::Config("no exports to serve".into()));
        }
        if config.minimum_block_bytes != 1 && config.minimum_block_bytes != 512 {
            return Err(ServerError::Config(format!(
                "minimum_block_bytes is {}, expected 1 or 512",
                config.minimum_block_bytes
            )));
        }
        if config.max_connections == 0 || config.max_unnegotiated_connections == 0 {
            return Err(ServerError::Config(
                "max_connections and max_unnegotiated_connections must be at least 1".into(),
            ));
        }
        if config.handshake_timeout_ms == 0 {
            return Err(ServerError::Config(
                "handshake_timeout_ms must be at least 1".into(),
            ));
        }
        if config.max_in_flight_bytes_per_connection < MIN_IN_FLIGHT_BYTES_PER_CONNECTION {
            return Err(ServerError::Config(format!(
                "max_in_flight_bytes_per_connection is {}, below the {MIN_IN_FLIGHT_BYTES_PER_CONNECTION}-byte minimum",
                config.max_in_flight_bytes_per_connection
            )));
        }
        if config.max_in_flight_bytes < config.max_in_flight_bytes_per_connection {
            return Err(ServerError::Config(format!(
                "max_in_flight_bytes ({}) is below max_in_flight_bytes_per_connection ({})",
                config.max_in_flight_bytes, config.max_in_flight_bytes_per_connection
            )));
        }
        // Whole 4 KiB blocks, so the limit suits any minimum block size.
        let max_request_bytes = config
            .max_in_flight_bytes_per_connection
            .min(u64::from(MAX_REQUEST_BYTES)) as u32
            & !4095;
        let mut served = Vec::with_capacity(exports.len());
        for (name, export) in exports {
            if name.is_empty() || name.len() > MAX_STRING_BYTES || name.contains('\0') {
                return Err(ServerError::Config(format!(
                    "export name {name:?} must be 1 to {MAX_STRING_BYTES} bytes without NUL"
                )));
            }
            if served.iter().any(|other: &ServedExport| other.name == name) {
                return Err(ServerError::Config(format!(
                    "export name {name:?} appears twice"
                )));
            }
            served.push(ServedExport { name, export });
        }
        Ok(Server {
            shared: Arc::new(Shared {
                exports: served,
                budget: ByteBudget::new(config.max_in_flight_bytes),
                ledgers: Mutex::new(Ledgers::default()),
                config,
                counters: Counters::default(),
                max_request_bytes,
            }),
        })
    }

    /// Counters of every listener of this server.
    pub fn stats(&self) -> ServerStats {
        let counters = &self.shared.counters;
        let total = RequestCounters::default();
        let mut in_flight_bytes = 0;
        {
            let ledgers = self.shared.ledgers.lock();
            ledgers.retired.add_to(&total);
            for ledger in &ledgers.live {
                ledger.counters.add_to(&total);
                in_flight_bytes += ledger.budget.in_flight_bytes();
            }
        }
        let mut requests = [0u64; COMMAND_SLOTS];
        for (slot, counter) in requests.iter_mut().zip(total.requests.iter()) {
            *slot = counter.load(Ordering::Relaxed);
        }
        ServerStats {
            requests,
            bytes_read: total.bytes_read.load(Ordering::Relaxed),
            bytes_written: total.bytes_written.load(Ordering::Relaxed),
            request_errors: total.request_errors.load(Ordering::Relaxed),
            connections_accepted: counters.connections_accepted.load(Ordering::Relaxed),
            connections_active: counters.connections_active.load(Ordering::Relaxed),
            connections_refused: counters.connections_refused.load(Ordering::Relaxed),
            handshakes_failed: counters.handshakes_failed.load(Ordering::Relaxed),
            protocol_errors: counters.protocol_errors.load(Ordering::Relaxed),
            handshakes_timed_out: counters.handshakes_timed_out.load(Ordering::Relaxed),
            connections_evicted: counters.connections_evicted.load(Ordering::Relaxed),
            requests_cancelled: total.requests_cancelled.load(Ordering::Relaxed),
            in_flight_bytes,
            in_flight_bytes_max: self.shared.budget.usage().1,
        }
    }

    /// The longest READ or WRITE this server accepts.
    pub fn max_request_bytes(&self) -> u32 {
        self.shared.max_request_bytes
    }

    /// The maximum block size advertised in `NBD_INFO_BLOCK_SIZE`.
    pub fn advertised_max_block_bytes(&self) -> u32 {
        advertised_max_block_bytes(&self.shared)
    }

    /// Listens on a Unix socket at `path`, created with mode 0600. An
    /// existing socket file there is removed only when nothing accepts
    /// connections on it; any other existing file is an error.
    pub fn serve_unix(&self, path: impl AsRef<Path>) -> Result<ServerHandle, ServerError> {
        let path = path.as_ref().to_path_buf();
        let listen_error = |source: io::Error| ServerError::Listen {
            address: path.display().to_string(),
            source,
        };
        crate::io::remove_stale_socket(&path).map_err(listen_error)?;
        let listener = crate::io::bind_unix_private(&path, 128).map_err(listen_error)?;
        let metadata = std::fs::symlink_metadata(&path).map_err(listen_error)?;
        let address = ListenAddress::Unix(path.clone());
        let socket_identity = Some((metadata.dev(), metadata.ino()));
        self.start(Listener::Unix(listener), address, socket_identity)
    }

    /// Listens on TCP at `address` exactly as given (the caller chooses
    /// between loopback and other interfaces). Port 0 picks a free port;
    /// [`ServerHandle::address`] tells which.
    pub fn serve_tcp(&self, address: impl ToSocketAddrs) -> Result<ServerHandle, ServerError> {
        let listener = TcpListener::bind(address).map_err(|source| ServerError::Listen {
            address: "TCP address".into(),
            source,
        })?;
        let local = listener
            .local_addr()
            .map_err(|source| ServerError::Listen {
                address: "TCP address".into(),
                source,
            })?;
        self.start(Listener::Tcp(listener), ListenAddress::Tcp(local), None)
    }

    fn start(
        &self,
        listener: Listener,
        address: ListenAddress,
        socket_identity: Option<(u64, u64)>,
    ) -> Result<ServerHandle, ServerError> {
        let listener_state = Arc::new(ListenerState {
            stopping: AtomicBool::new(false),
            table: Mutex::new(ConnectionTable::default()),
            changed: Condvar::new(),
        });
        let listener_fd = listener.as_raw_fd();
        let shared = Arc::clone(&self.shared);
        let state = Arc::clone(&listener_state);
        let accept_thread = std::thread::Builder::new()
            .name("nbd-accept".into())
            .spawn(move || accept_loop(shared, state, listener));
        let accept_thread = match accept_thread {
            Ok(thread) => Some(thread),
            Err(source) => {
                // The listener (moved into the failed closure) is closed.
                if let ListenAddress::Unix(path) = &address {
                    let _ = std::fs::remove_file(path);
                }
                return Err(ServerError::Listen {
                    address: format!("{address:?} (cannot start its accept thread)"),
                    source,
                });
            }
        };
        let shared = Arc::clone(&self.shared);
        let state = Arc::clone(&listener_state);
        let watchdog_thread = std::thread::Builder::new()
            .name("nbd-handshakes".into())
            .spawn(move || handshake_watchdog(&shared, &state));
        let watchdog_thread = match watchdog_thread {
            Ok(thread) => Some(thread),
            Err(error) => {
                self.shared.log(
                    LogLevel::Error,
                    &format!("cannot start the handshake watchdog thread (handshakes will not time out): {error}"),
                );
                None
            }
        };
        Ok(ServerHandle {
            address,
            socket_identity,
            listener_fd,
            state: listener_state,
            accept_thread,
            watchdog_thread,
            grace: Duration::from_millis(self.shared.config.shutdown_grace_ms),
        })
    }
}

/// Where a listener listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddress {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl ListenAddress {
    /// An NBD URI for the export `name` on this address.
    pub fn uri(&self, name: &str) -> String {
        match self {
            ListenAddress::Unix(path) => {
                format!("nbd+unix:///{name}?socket={}", path.display())
            }
            ListenAddress::Tcp(address) => format!("nbd://{address}/{name}"),
        }
    }
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Unix(listener) => listener.as_raw_fd(),
            Listener::Tcp(listener) => listener.as_raw_fd(),
        }
    }

    fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Unix(listener) => listener.accept().map(|(stream, _)| Stream::Unix(stream)),
            Listener::Tcp(listener) => {
                let (stream, _) = listener.accept()?;
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
        }
    }
}

/// Where an open connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Handshake,
    Transmission,
    /// Its socket was shut down (handshake timeout, or evicted to make
    /// room); its thread has not ended yet.
    Closing,
}

struct OpenConnection {
    /// A clone of the connection's socket, to stop it from outside.
    stream: Stream,
    accepted_ns: u64,
    phase: Phase,
}

#[derive(Default)]
struct ConnectionTable {
    next_id: u64,
    open: BTreeMap<u64, OpenConnection>,
    /// Connections in `Phase::Handshake` and in `Phase::Closing`.
    handshaking: usize,
    closing: usize,
    threads: Vec<JoinHandle<()>>,
}

impl ConnectionTable {
    /// Shuts a connection still in its handshake down; its thread ends on
    /// its own.
    fn close_handshake(&mut self, id: u64) {
        if let Some(connection) = self.open.get_mut(&id) {
            if connection.phase == Phase::Handshake {
                let _ = connection.stream.shutdown(Shutdown::Both);
                connection.phase = Phase::Closing;
                self.handshaking -= 1;
                self.closing += 1;
            }
        }
    }

    /// Connections not being closed.
    fn live(&self) -> usize {
        self.open.len() - self.closing
    }

    fn remove(&mut self, id: u64) {
        if let Some(connection) = self.open.remove(&id) {
            match connection.phase {
                Phase::Handshake => self.handshaking -= 1,
                Phase::Closing => self.closing -= 1,
                Phase::Transmission => {}
            }
        }
    }
}

struct ListenerState {
    stopping: AtomicBool,
    table: Mutex<ConnectionTable>,
    changed: Condvar,
}

impl ListenerState {
    fn lock(&self) -> MutexGuard<'_, ConnectionTable> {
        self.table.lock()
    }
}

/// A running listener. [`ServerHandle::shutdown`] (or dropping the handle)
/// stops accepting, lets open connections finish their in-flight requests,
/// closes them, and removes the Unix socket file.
pub struct ServerHandle {
    address: ListenAddress,
    socket_identity: Option<(u64, u64)>,
    listener_fd: RawFd,
    state: Arc<ListenerState>,
    accept_thread: Option<JoinHandle<()>>,
    watchdog_thread: Option<JoinHandle<()>>,
    grace: Duration,
}

impl ServerHandle {
    /// The bound address (with the real port when port 0 was asked for).
    pub fn address(&self) -> &ListenAddress {
        &self.address
    }

    /// Connections of this listener open right now.
    pub fn open_connections(&self) -> usize {
        self.state.lock().open.len()
    }

    /// Stops accepting, stops reading requests on every connection, waits up
    /// to the configured grace for in-flight replies, then closes every
    /// socket and joins every thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let accept_thread = self.accept_thread.take();
        if accept_thread.is_none() && self.watchdog_thread.is_none() {
            // Stopped already (or never started).
            return;
        }
        self.state.stopping.store(true, Ordering::SeqCst);
        // On Linux, shutting a listening socket down wakes a blocked accept.
        // SAFETY: the fd is owned by the accept thread's listener, which is
        // alive until that thread is joined below; shutdown does not close it.
        unsafe {
            libc::shutdown(self.listener_fd, libc::SHUT_RDWR);
        }
        // Belt and braces: a connection wakes accept on any platform; the
        // accept loop sees `stopping` and drops it.
        match &self.address {
            ListenAddress::Unix(path) => drop(UnixStream::connect(path)),
            ListenAddress::Tcp(address) => drop(TcpStream::connect(address)),
        }
        if let Some(accept_thread) = accept_thread {
            let _ = accept_thread.join();
        }
        // Under the lock, so the watchdog is either waiting (and woken) or
        // about to see `stopping`.
        drop(self.state.lock());
        self.state.changed.notify_all();
        if let Some(watchdog) = self.watchdog_thread.take() {
            let _ = watchdog.join();
        }
        {
            let table = self.state.lock();
            for connection in table.open.values() {
                let _ = connection.stream.shutdown(Shutdown::Read);
            }
        }
        let mut table = self.state.lock();
        if !table.open.is_empty() {
            self.state.changed.wait_while_for(
                &mut table,
                |table| !table.open.is_empty(),
                self.grace,
            );
        }
        for connection in table.open.values() {
            let _ = connection.stream.shutdown(Shutdown::Both);
        }
        let threads = std::mem::take(&mut table.threads);
        drop(table);
        for thread in threads {
            let _ = thread.join();
        }
        if let (ListenAddress::Unix(path), Some(identity)) = (&self.address, self.socket_identity) {
            if let Ok(metadata) = std::fs::symlink_metadata(path) {
                if (metadata.dev(), metadata.ino()) == identity {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(shared: Arc<Shared>, state: Arc<ListenerState>, listener: Listener) {
    loop {
        let accepted = listener.accept();
        if state.stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match accepted {
            Ok(stream) => stream,
            Err(error) => {
                if matches!(
                    error.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) {
                    continue;
                }
                shared.log(LogLevel::Error, &format!("accept failed: {error}"));
                // Out of descriptors or similar: back off a little instead
                // of spinning.
                let mut table = state.lock();
                state
                    .changed
                    .wait_for(&mut table, Duration::from_millis(100));
                continue;
            }
        };
        let config = &shared.config;
        let mut table = state.lock();
        table.threads.retain(|thread| !thread.is_finished());
        // Connections that never finish their handshake must not lock
        // others out: make room by closing the oldest of them.
        if table.handshaking >= config.max_unnegotiated_connections
            || table.live() >= config.max_connections
        {
            let oldest = table
                .open
                .iter()
                .find(|(_, connection)| connection.phase == Phase::Handshake)
                .map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                table.close_handshake(oldest);
                shared
                    .counters
                    .connections_evicted
                    .fetch_add(1, Ordering::Relaxed);
                shared.log(
                    LogLevel::Info,
                    &format!(
                        "connection {oldest}: closed in its handshake to make room for a new connection ({} in handshakes, {} open; max_unnegotiated_connections {}, max_connections {})",
                        table.handshaking + 1,
                        table.live() + 1,
                        config.max_unnegotiated_connections,
                        config.max_connections
                    ),
                );
            }
        }
        if table.live() >= config.max_connections {
            drop(table);
            shared
                .counters
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            shared.log(
                LogLevel::Warn,
                &format!(
                    "refusing a connection: {} connections are open (max_connections)",
                    config.max_connections
                ),
            );
            continue;
        }
        let Ok(registered) = stream.try_clone() else {
            continue;
        };
        let id = table.next_id;
        table.next_id += 1;
        table.open.insert(
            id,
            OpenConnection {
                stream: registered,
                accepted_ns: config.clock.now_ns(),
                phase: Phase::Handshake,
            },
        );
        table.handshaking += 1;
        shared
            .counters
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        shared
            .counters
            .connections_active
            .fetch_add(1, Ordering::Relaxed);
        let thread_shared = Arc::clone(&shared);
        let thread_state = Arc::clone(&state);
        let mut builder = std::thread::Builder::new().name(format!("nbd-conn-{id}"));
        if let Some(stack_bytes) = config.connection_stack_bytes {
            builder = builder.stack_size(stack_bytes);
        }
        let spawned = builder.spawn(move || {
            run_connection(&thread_shared, &thread_state, stream, id);
            thread_shared
                .counters
                .connections_active
                .fetch_sub(1, Ordering::Relaxed);
            let mut table = thread_state.lock();
            table.remove(id);
            drop(table);
            thread_state.changed.notify_all();
        });
        match spawned {
            Ok(thread) => table.threads.push(thread),
            Err(error) => {
                // The closure, and with it the socket, is gone: the client
                // sees the connection closed.
                table.remove(id);
                shared
                    .counters
                    .connections_active
                    .fetch_sub(1, Ordering::Relaxed);
                shared
                    .counters
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                shared.log(
                    LogLevel::Error,
                    &format!(
                        "refusing a connection: cannot start its thread ({} open): {error}",
                        table.live()
                    ),
                );
            }
        }
    }
}

/// Closes connections that are still in their handshake
/// `handshake_timeout_ms` after they were accepted. One per listener; ends
/// when the listener stops.
fn handshake_watchdog(shared: &Shared, state: &ListenerState) {
    let timeout_ns = shared.config.handshake_timeout_ms.saturating_mul(1_000_000);
    let mut table = state.lock();
    loop {
        if state.stopping.load(Ordering::SeqCst) {
            return;
        }
        let now_ns = shared.config.clock.now_ns();
        let mut next_check_ns = now_ns.saturating_add(timeout_ns);
        let mut expired = Vec::new();
        for (id, connection) in &table.open {
            if connection.phase != Phase::Handshake {
                continue;
            }
            let deadline_ns = connection.accepted_ns.saturating_add(timeout_ns);
            if deadline_ns <= now_ns {
                expired.push(*id);
            } else {
                next_check_ns = next_check_ns.min(deadline_ns);
            }
        }
        for id in expired {
            table.close_handshake(id);
            shared
                .counters
                .handshakes_timed_out
                .fetch_add(1, Ordering::Relaxed);
            shared.log(
                LogLevel::Info,
                &format!(
                    "connection {id}: no NBD handshake within {} ms (handshake_timeout); closing",
                    shared.config.handshake_timeout_ms
                ),
            );
        }
        // Woken early by connections ending and by stop.
        state.changed.wait_for(
            &mut table,
            Duration::from_nanos(next_check_ns - now_ns).max(Duration::from_millis(1)),
        );
    }
}

/// Connects to a TCP address with `TCP_NODELAY`; a helper for clients.
pub(crate) fn connect_tcp(address: impl ToSocketAddrs) -> io::Result<Stream> {
    let stream = TcpStream::connect(address)?;
    stream.set_nodelay(true)?;
    Ok(Stream::Tcp(stream))
}
