//! The NBD server: fixed-newstyle handshake, then the transmission phase over
//! any [`Export`].
//!
//! Concurrency: one thread per connection reads requests. With
//! `workers_per_connection == 0` that thread also executes each request and
//! batches replies (the socket is written only when no further whole request
//! is already buffered), which suits fast exports. With workers, requests go
//! through a bounded queue to that many threads so slow requests overlap;
//! each reply is written as soon as it is ready. Either way a client that
//! stops reading replies stalls its own connection (the socket send buffer
//! fills, then the queue, then request reading stops) and nothing grows.
//!
//! Memory: every READ reply and WRITE payload is charged against a
//! per-connection and a server-wide byte budget before the server reads or
//! executes the request, and given back once its reply is written; a client
//! whose requests would exceed either waits, unread. Connections still in
//! their handshake are bounded in number (a new one closes the oldest) and
//! in time (`handshake_timeout_ms`, enforced by one watchdog thread per
//! listener).

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tierd_common::clock::{Clock, SystemClock};

use crate::export::Export;
use crate::io::{Fill, InputBuffer, Stream};
use crate::proto::*;
use crate::tls::{TlsMode, TlsServer};

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
    /// 0: each connection's reader thread executes requests itself (best for
    /// memory and page-cache exports). N > 0: N worker threads per
    /// connection so slow requests overlap.
    pub workers_per_connection: usize,
    /// Requests queued per connection for the workers before the reader
    /// stops reading (back-pressure). Ignored when `workers_per_connection`
    /// is 0.
    pub queue_depth_per_connection: usize,
    /// Advertised minimum block size: 1 (any alignment) or 512 (requests
    /// that are not multiples of 512 get EINVAL).
    pub minimum_block_bytes: u32,
    /// Connections accepted at once per listener; more are closed at once.
    pub max_connections: usize,
    /// On shutdown, how long connections get to finish in-flight requests
    /// after reading stops, before their sockets are closed.
    pub shutdown_grace_ms: u64,
    /// Inline mode: replies wait in a buffer while further whole requests
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
            workers_per_connection: 0,
            queue_depth_per_connection: 64,
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
            .field(
                "queue_depth_per_connection",
                &self.queue_depth_per_connection,
            )
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
/// Default of [`ServerConfig::reply_batch_bytes`].
pub const DEFAULT_REPLY_BATCH_BYTES: usize = 64 * 1024;
/// Reply and payload buffers larger than this are released after use, so
/// an idle connection keeps little memory whatever it did before.
const RETAINED_BUFFER_BYTES: usize = 1024 * 1024;
/// Worker mode: payload buffers kept for reuse per connection, in bytes.
const POOLED_BUFFER_BYTES: usize = 8 * 1024 * 1024;
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
/// What a BLOCK_STATUS request is charged: its largest reply.
const BLOCK_STATUS_CHARGE_BYTES: u64 =
    (MAX_EXTENTS_PER_REPLY * 8 + STRUCTURED_REPLY_HEADER_BYTES + 4) as u64;

/// Counter slot per command: 0..=7 are the commands, 8 is anything else.
const COMMAND_SLOTS: usize = 9;

#[derive(Default)]
struct Counters {
    requests: [AtomicU64; COMMAND_SLOTS],
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    request_errors: AtomicU64,
    connections_accepted: AtomicU64,
    connections_active: AtomicU64,
    connections_refused: AtomicU64,
    handshakes_failed: AtomicU64,
    handshakes_timed_out: AtomicU64,
    connections_evicted: AtomicU64,
    protocol_errors: AtomicU64,
    requests_cancelled: AtomicU64,
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
    /// Server-wide in-flight bytes (`max_in_flight_bytes`).
    budget: ByteBudget,
    /// The longest READ/WRITE accepted: [`MAX_REQUEST_BYTES`], or less when
    /// the per-connection budget is smaller.
    max_request_bytes: u32,
}

/// Bytes of READ replies and WRITE payloads held in memory, up to a limit.
/// A request takes its bytes before the server reads its payload or
/// executes it and gives them back once its reply is written, so a client
/// that stops reading replies holds at most the limit. Taking and giving
/// back are atomic operations (no lock on the request path); only a request
/// that must wait takes the lock.
struct ByteBudget {
    limit_bytes: u64,
    used_bytes: AtomicU64,
    /// The most bytes held at once.
    peak_bytes: AtomicU64,
    /// Requests waiting for bytes; releases notify only when there are any.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    freed: Condvar,
}

/// How often a wait for in-flight bytes checks whether to give up.
const BUDGET_POLL: Duration = Duration::from_millis(50);

impl ByteBudget {
    fn new(limit_bytes: u64) -> ByteBudget {
        ByteBudget {
            limit_bytes,
            used_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            freed: Condvar::new(),
        }
    }

    fn try_acquire(&self, bytes: u64) -> bool {
        let taken = self
            .used_bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes)
                    .filter(|total| *total <= self.limit_bytes)
            });
        match taken {
            Ok(before) => {
                self.peak_bytes.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Waits until `bytes` fit; false when `give_up` turns true first.
    fn acquire(&self, bytes: u64, give_up: &dyn Fn() -> bool) -> bool {
        if self.try_acquire(bytes) {
            return true;
        }
        let mut guard = self.lock.lock();
        // Counted before the next try, so a release after a failed try sees
        // a waiter and notifies (under the lock, so not before the wait).
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let acquired = loop {
            if self.try_acquire(bytes) {
                break true;
            }
            if give_up() {
                break false;
            }
            self.freed.wait_for(&mut guard, BUDGET_POLL);
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        acquired
    }

    fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let before = self.used_bytes.fetch_sub(bytes, Ordering::SeqCst);
        debug_assert!(before >= bytes, "released more than was taken");
        if self.waiters.load(Ordering::SeqCst) > 0 {
            drop(self.lock.lock());
            self.freed.notify_all();
        }
    }

    /// (bytes held now, most bytes held at once)
    fn usage(&self) -> (u64, u64) {
        (
            self.used_bytes.load(Ordering::SeqCst),
            self.peak_bytes.load(Ordering::Relaxed),
        )
    }
}

/// Bytes taken from one or two budgets, given back on drop (also when a
/// request is dropped unexecuted or its connection fails mid-way).
struct Charge<'a> {
    budgets: [Option<&'a ByteBudget>; 2],
    bytes: u64,
}

impl<'a> Charge<'a> {
    fn none() -> Charge<'a> {
        Charge {
            budgets: [None, None],
            bytes: 0,
        }
    }

    /// Takes `bytes` from `first`, then `second`, waiting for each; `None`
    /// when `give_up` turned true first (nothing is held then).
    fn acquire(
        first: &'a ByteBudget,
        second: &'a ByteBudget,
        bytes: u64,
        give_up: &dyn Fn() -> bool,
    ) -> Option<Charge<'a>> {
        if bytes == 0 {
            return Some(Charge::none());
        }
        if !first.acquire(bytes, give_up) {
            return None;
        }
        let mut charge = Charge {
            budgets: [Some(first), None],
            bytes,
        };
        if !second.acquire(bytes, give_up) {
            return None;
        }
        charge.budgets[1] = Some(second);
        Some(charge)
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        // In the reverse order of taking: the server-wide bytes are back
        // before the connection's, so a connection's next request can never
        // hold server-wide bytes beside the ones it is giving back (the
        // server-wide peak of one connection stays within its own limit).
        for budget in self.budgets.iter().rev().flatten() {
            budget.release(self.bytes);
        }
    }
}

/// What a request is charged against the in-flight budgets: the data it
/// brings (WRITE) or makes the server hold (READ, BLOCK_STATUS). Requests
/// refused for their length hold nothing.
fn charge_bytes(shared: &Shared, header: &RequestHeader) -> u64 {
    match header.command {
        NBD_CMD_READ | NBD_CMD_WRITE if header.length_bytes <= shared.max_request_bytes => {
            u64::from(header.length_bytes)
        }
        NBD_CMD_BLOCK_STATUS => BLOCK_STATUS_CHARGE_BYTES,
        _ => 0,
    }
}

impl Shared {
    fn log(&self, level: LogLevel, message: &str) {
        (self.config.logger)(level, message);
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
        if config.workers_per_connection > 0 && config.queue_depth_per_connection == 0 {
            return Err(ServerError::Config(
                "queue_depth_per_connection must be at least 1 when workers are used".into(),
            ));
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
                config,
                counters: Counters::default(),
                max_request_bytes,
            }),
        })
    }

    /// Counters of every listener of this server.
    pub fn stats(&self) -> ServerStats {
        let counters = &self.shared.counters;
        let mut requests = [0u64; COMMAND_SLOTS];
        for (slot, counter) in requests.iter_mut().zip(counters.requests.iter()) {
            *slot = counter.load(Ordering::Relaxed);
        }
        ServerStats {
            requests,
            bytes_read: counters.bytes_read.load(Ordering::Relaxed),
            bytes_written: counters.bytes_written.load(Ordering::Relaxed),
            request_errors: counters.request_errors.load(Ordering::Relaxed),
            connections_accepted: counters.connections_accepted.load(Ordering::Relaxed),
            connections_active: counters.connections_active.load(Ordering::Relaxed),
            connections_refused: counters.connections_refused.load(Ordering::Relaxed),
            handshakes_failed: counters.handshakes_failed.load(Ordering::Relaxed),
            protocol_errors: counters.protocol_errors.load(Ordering::Relaxed),
            handshakes_timed_out: counters.handshakes_timed_out.load(Ordering::Relaxed),
            connections_evicted: counters.connections_evicted.load(Ordering::Relaxed),
            requests_cancelled: counters.requests_cancelled.load(Ordering::Relaxed),
            in_flight_bytes: self.shared.budget.usage().0,
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

/// Why a connection ended early.
enum ConnectionEnd {
    /// The client broke the protocol; logged as a warning.
    Protocol(String),
    /// The socket failed (client vanished); logged at debug level.
    Io(io::Error),
}

impl From<io::Error> for ConnectionEnd {
    fn from(error: io::Error) -> Self {
        ConnectionEnd::Io(error)
    }
}

fn run_connection(shared: &Shared, state: &ListenerState, stream: Stream, id: u64) {
    let _span = tracing::info_span!("connection", conn = id).entered();
    let mut tls_relay: Option<JoinHandle<()>> = None;
    serve_connection(shared, state, stream, id, &mut tls_relay);
    if let Some(relay) = tls_relay {
        // The connection's end of the relay is closed, so the relay ends.
        let _ = relay.join();
    }
}

fn serve_connection(
    shared: &Shared,
    state: &ListenerState,
    mut stream: Stream,
    id: u64,
    tls_relay: &mut Option<JoinHandle<()>>,
) {
    shared.log(LogLevel::Debug, &format!("connection {id}: accepted"));
    let mut input = InputBuffer::with_capacity(INPUT_BUFFER_BYTES);
    let negotiated = negotiate(shared, &mut input, &mut stream, tls_relay, id);
    let session = match negotiated {
        Ok(Some(session)) => session,
        Ok(None) => {
            shared
                .counters
                .handshakes_failed
                .fetch_add(1, Ordering::Relaxed);
            shared.log(
                LogLevel::Debug,
                &format!("connection {id}: closed during the handshake"),
            );
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        Err(end) => {
            shared
                .counters
                .handshakes_failed
                .fetch_add(1, Ordering::Relaxed);
            let end = tls_failure(shared, id, &stream, end);
            report_end(shared, id, "handshake", end);
            end_tls(&mut stream);
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    };
    {
        let mut table = state.lock();
        match table.open.get_mut(&id) {
            Some(connection) if connection.phase == Phase::Handshake => {
                connection.phase = Phase::Transmission;
                table.handshaking -= 1;
            }
            _ => {
                // Timed out or evicted just as the handshake finished.
                drop(table);
                shared
                    .counters
                    .handshakes_failed
                    .fetch_add(1, Ordering::Relaxed);
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        }
    }
    shared.log(
        LogLevel::Debug,
        &format!(
            "connection {id}: serving export {:?} (structured replies: {}, TLS: {})",
            shared.exports[session.export_index].name,
            session.structured,
            tls_active(&stream, tls_relay)
        ),
    );
    let stopping = &state.stopping;
    let result = if shared.config.workers_per_connection == 0 {
        transmit_inline(shared, &session, &mut input, &mut stream, stopping)
    } else {
        transmit_with_workers(shared, &session, &mut input, &mut stream, stopping, id)
    };
    match result {
        Ok(()) => shared.log(LogLevel::Debug, &format!("connection {id}: closed")),
        Err(end) => {
            let end = tls_failure(shared, id, &stream, end);
            report_end(shared, id, "transmission", end)
        }
    }
    end_tls(&mut stream);
    let _ = stream.shutdown(Shutdown::Both);
}

/// A TLS failure on an in-thread session (bad certificate, bad record) is
/// logged as a warning, like the relay does; other ends pass through.
fn tls_failure(shared: &Shared, id: u64, stream: &Stream, end: ConnectionEnd) -> ConnectionEnd {
    match end {
        ConnectionEnd::Io(error)
            if matches!(stream, Stream::ServerTls(_))
                && error.kind() == io::ErrorKind::InvalidData =>
        {
            shared.log(
                LogLevel::Warn,
                &format!("connection {id}: TLS ended: {error}"),
            );
            ConnectionEnd::Io(error)
        }
        other => other,
    }
}

/// Sends close_notify on an in-thread TLS session (best effort).
fn end_tls(stream: &mut Stream) {
    if let Stream::ServerTls(tls) = stream {
        tls.conn.send_close_notify();
        let _ = tls.conn.write_tls(&mut tls.sock);
    }
}

fn report_end(shared: &Shared, id: u64, phase: &str, end: ConnectionEnd) {
    match end {
        ConnectionEnd::Protocol(message) => {
            shared
                .counters
                .protocol_errors
                .fetch_add(1, Ordering::Relaxed);
            shared.log(
                LogLevel::Warn,
                &format!("connection {id}: closed in {phase}: {message}"),
            );
        }
        ConnectionEnd::Io(error) => shared.log(
            LogLevel::Debug,
            &format!("connection {id}: socket ended in {phase}: {error}"),
        ),
    }
}

/// What one connection agreed on in the handshake.
struct Session {
    export_index: usize,
    export: Arc<dyn Export>,
    size_bytes: u64,
    writable: bool,
    structured: bool,
    allocation_context: Option<u32>,
    minimum_block_bytes: u32,
    /// The longest READ/WRITE accepted ([`Shared::max_request_bytes`]).
    max_request_bytes: u32,
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

fn protocol(error: ProtocolError) -> ConnectionEnd {
    ConnectionEnd::Protocol(error.to_string())
}

/// Runs the handshake. `Ok(None)`: the client aborted or left.
fn negotiate(
    shared: &Shared,
    input: &mut InputBuffer,
    stream: &mut Stream,
    tls_relay: &mut Option<JoinHandle<()>>,
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
            && !tls_active(stream, tls_relay);
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
                if tls_active(stream, tls_relay) {
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
                    start_tls(shared, tls, stream, tls_relay, id)?;
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
fn tls_active(stream: &Stream, tls_relay: &Option<JoinHandle<()>>) -> bool {
    tls_relay.is_some() || matches!(stream, Stream::ServerTls(_))
}

/// Starts TLS: in this thread for an inline connection, else behind a
/// relay thread whose plaintext end the connection continues on.
fn start_tls(
    shared: &Shared,
    tls: &TlsServer,
    stream: &mut Stream,
    tls_relay: &mut Option<JoinHandle<()>>,
    id: u64,
) -> Result<(), ConnectionEnd> {
    let socket = stream.try_clone()?;
    if shared.config.workers_per_connection == 0 {
        // One thread reads and writes: the session runs right here, with
        // no relay hop.
        *stream = tls.start_in_thread(socket)?;
        shared.log(LogLevel::Debug, &format!("connection {id}: TLS started"));
        return Ok(());
    }
    let logger = shared.config.logger.clone();
    let log = Box::new(move |message: String| {
        logger(
            LogLevel::Warn,
            &format!("connection {id}: TLS ended: {message}"),
        )
    });
    let (plain, relay) = tls.start(socket, log).inspect_err(|error| {
        // Out of threads, most likely: the connection is refused.
        shared
            .counters
            .connections_refused
            .fetch_add(1, Ordering::Relaxed);
        shared.log(
            LogLevel::Error,
            &format!("connection {id}: refused: cannot start its TLS relay thread: {error}"),
        );
    })?;
    // Our duplicate of the socket closes here; the relay and the connection
    // table hold the others.
    *stream = plain;
    *tls_relay = Some(relay);
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
fn advertised_max_block_bytes(shared: &Shared) -> u32 {
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

/// Appends an error reply for `header`: a structured error chunk when
/// structured replies were negotiated, else a simple reply.
fn encode_request_error(
    session: &Session,
    header: &RequestHeader,
    error: u32,
    message: &str,
    out: &mut Vec<u8>,
) {
    if session.structured {
        encode_error_chunk(out, header.cookie, error, message);
    } else {
        encode_simple_reply(out, error, header.cookie);
    }
}

/// Checks a request against the session; returns the error to reply with.
fn validate(session: &Session, header: &RequestHeader) -> Result<(), (u32, &'static str)> {
    let allowed_flags = NBD_CMD_FLAG_FUA
        | match header.command {
            NBD_CMD_READ if session.structured => NBD_CMD_FLAG_DF,
            NBD_CMD_WRITE_ZEROES => NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO,
            NBD_CMD_BLOCK_STATUS => NBD_CMD_FLAG_REQ_ONE,
            NBD_CMD_READ | NBD_CMD_WRITE | NBD_CMD_FLUSH | NBD_CMD_TRIM | NBD_CMD_CACHE => 0,
            _ => return Err((NBD_EINVAL, "unknown command")),
        };
    if header.flags & !allowed_flags != 0 {
        return Err((NBD_EINVAL, "command flag not valid for this command"));
    }
    if header.command == NBD_CMD_FLUSH {
        return Ok(());
    }
    let writes = matches!(
        header.command,
        NBD_CMD_WRITE | NBD_CMD_TRIM | NBD_CMD_WRITE_ZEROES
    );
    if writes && !session.writable {
        return Err((NBD_EPERM, "the export is read-only"));
    }
    if matches!(header.command, NBD_CMD_READ | NBD_CMD_WRITE)
        && header.length_bytes > session.max_request_bytes
    {
        return Err((
            NBD_EINVAL,
            "length exceeds the server's maximum request length",
        ));
    }
    let end = header
        .offset_bytes
        .checked_add(u64::from(header.length_bytes));
    if end.is_none_or(|end| end > session.size_bytes) {
        return Err(
            if matches!(header.command, NBD_CMD_WRITE | NBD_CMD_WRITE_ZEROES) {
                (NBD_ENOSPC, "request extends past the end of the export")
            } else {
                (NBD_EINVAL, "request extends past the end of the export")
            },
        );
    }
    let alignment = u64::from(session.minimum_block_bytes);
    if alignment > 1
        && (!header.offset_bytes.is_multiple_of(alignment)
            || !u64::from(header.length_bytes).is_multiple_of(alignment))
    {
        return Err((
            NBD_EINVAL,
            "request is not aligned to the minimum block size",
        ));
    }
    if header.command == NBD_CMD_BLOCK_STATUS {
        if session.allocation_context.is_none() {
            return Err((NBD_EINVAL, "no metadata context was negotiated"));
        }
        if header.length_bytes == 0 {
            return Err((NBD_EINVAL, "block status of zero bytes"));
        }
    }
    Ok(())
}

/// Executes one request (not DISC) and appends its whole reply to `out`.
/// `payload` is the write data (empty for other commands).
fn handle_request(
    shared: &Shared,
    session: &Session,
    header: &RequestHeader,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    let counters = &shared.counters;
    counters.requests[command_slot(header.command)].fetch_add(1, Ordering::Relaxed);
    if let Err((error, message)) = validate(session, header) {
        counters.request_errors.fetch_add(1, Ordering::Relaxed);
        shared.log(
            LogLevel::Debug,
            &format!(
                "{} offset {} length {} flags {:#x}: {} ({message})",
                command_name(header.command),
                header.offset_bytes,
                header.length_bytes,
                header.flags,
                error_name(error)
            ),
        );
        encode_request_error(session, header, error, message, out);
        return;
    }
    let export = &*session.export;
    let fua = header.flags & NBD_CMD_FLAG_FUA != 0;
    let length = u64::from(header.length_bytes);
    let result = match header.command {
        NBD_CMD_READ => {
            let start = out.len();
            let data_at = if session.structured {
                if header.length_bytes == 0 {
                    encode_chunk_header(
                        out,
                        NBD_REPLY_FLAG_DONE,
                        NBD_REPLY_TYPE_NONE,
                        header.cookie,
                        0,
                    );
                    return;
                }
                encode_chunk_header(
                    out,
                    NBD_REPLY_FLAG_DONE,
                    NBD_REPLY_TYPE_OFFSET_DATA,
                    header.cookie,
                    header.length_bytes + 8,
                );
                out.extend_from_slice(&header.offset_bytes.to_be_bytes());
                out.len()
            } else {
                encode_simple_reply(out, 0, header.cookie);
                out.len()
            };
            out.resize(data_at + header.length_bytes as usize, 0);
            match export.read(header.offset_bytes, &mut out[data_at..]) {
                Ok(()) => {
                    counters.bytes_read.fetch_add(length, Ordering::Relaxed);
                    return;
                }
                Err(error) => {
                    // Nothing is sent yet: replace the reply with an error.
                    out.truncate(start);
                    Err(error)
                }
            }
        }
        NBD_CMD_WRITE => export.write(header.offset_bytes, payload, fua).map(|()| {
            counters.bytes_written.fetch_add(length, Ordering::Relaxed);
        }),
        NBD_CMD_FLUSH => export.flush(),
        NBD_CMD_TRIM => {
            if length == 0 {
                Ok(())
            } else {
                export.trim(header.offset_bytes, length, fua)
            }
        }
        NBD_CMD_WRITE_ZEROES => {
            if length == 0 {
                Ok(())
            } else {
                export.write_zeroes(
                    header.offset_bytes,
                    length,
                    fua,
                    header.flags & NBD_CMD_FLAG_NO_HOLE == 0,
                    header.flags & NBD_CMD_FLAG_FAST_ZERO != 0,
                )
            }
        }
        NBD_CMD_CACHE => Ok(()),
        NBD_CMD_BLOCK_STATUS => match export.block_status(header.offset_bytes, length) {
            Ok(extents) => {
                encode_block_status(session, header, &extents, out);
                return;
            }
            Err(error) => Err(error),
        },
        // validate() refused every other command.
        _ => Ok(()),
    };
    match result {
        Ok(()) => encode_simple_reply(out, 0, header.cookie),
        Err(error) => {
            let code = nbd_error(&error);
            counters.request_errors.fetch_add(1, Ordering::Relaxed);
            // FAST_ZERO refusals are part of normal operation.
            let level = if code == NBD_ENOTSUP {
                LogLevel::Debug
            } else {
                LogLevel::Warn
            };
            shared.log(
                level,
                &format!(
                    "{} offset {} length {}: export error errno {} ({}): {}",
                    command_name(header.command),
                    header.offset_bytes,
                    header.length_bytes,
                    error.errno,
                    error_name(code),
                    error.message
                ),
            );
            encode_request_error(session, header, code, error_name(code), out);
        }
    }
}

/// Appends a `NBD_REPLY_TYPE_BLOCK_STATUS` chunk: extents clipped to the
/// export's end, empty ones dropped, each at most u32::MAX (rounded down to
/// 4 KiB); stops once the requested length is covered. With REQ_ONE, one
/// extent no longer than the request.
fn encode_block_status(
    session: &Session,
    header: &RequestHeader,
    extents: &[crate::Extent],
    out: &mut Vec<u8>,
) {
    const LARGEST_EXTENT_BYTES: u64 = (u32::MAX as u64) & !4095;
    let requested = u64::from(header.length_bytes);
    let req_one = header.flags & NBD_CMD_FLAG_REQ_ONE != 0;
    let limit_end = session.size_bytes;
    let start = out.len();
    encode_chunk_header(
        out,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_BLOCK_STATUS,
        header.cookie,
        0,
    );
    out.extend_from_slice(
        &session
            .allocation_context
            .unwrap_or(ALLOCATION_CONTEXT_ID)
            .to_be_bytes(),
    );
    let mut position = header.offset_bytes;
    let mut covered = 0u64;
    let mut count = 0usize;
    for extent in extents {
        if covered >= requested || count >= MAX_EXTENTS_PER_REPLY {
            break;
        }
        let mut length = extent
            .length_bytes
            .min(LARGEST_EXTENT_BYTES)
            .min(limit_end.saturating_sub(position));
        if req_one {
            length = length.min(requested);
        }
        if length == 0 {
            continue;
        }
        out.extend_from_slice(&(length as u32).to_be_bytes());
        out.extend_from_slice(&(extent.flags & (NBD_STATE_HOLE | NBD_STATE_ZERO)).to_be_bytes());
        position += length;
        covered += length;
        count += 1;
        if req_one {
            break;
        }
    }
    if count == 0 {
        // The export gave nothing usable: "allocated, contents unknown" is
        // always a correct answer.
        out.extend_from_slice(&header.length_bytes.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
    }
    let payload_length = (out.len() - start - STRUCTURED_REPLY_HEADER_BYTES) as u32;
    out[start + 16..start + 20].copy_from_slice(&payload_length.to_be_bytes());
}

/// Reads the next request header. `Ok(None)`: the client closed the socket
/// at a request boundary.
fn next_header(
    input: &mut InputBuffer,
    stream: &mut Stream,
) -> Result<Option<RequestHeader>, ConnectionEnd> {
    if input.fill(stream, REQUEST_HEADER_BYTES)? == Fill::Closed {
        return Ok(None);
    }
    let mut bytes = [0u8; REQUEST_HEADER_BYTES];
    bytes.copy_from_slice(&input.buffered()[..REQUEST_HEADER_BYTES]);
    input.consume(REQUEST_HEADER_BYTES);
    parse_request_header(&bytes).map(Some).map_err(protocol)
}

/// For a write whose length exceeds the request limit: drops the payload
/// so the stream stays in step, or ends the connection when the length is
/// absurd.
fn discard_oversized_payload(
    input: &mut InputBuffer,
    stream: &mut Stream,
    header: &RequestHeader,
    max_request_bytes: u32,
) -> Result<(), ConnectionEnd> {
    if header.length_bytes > MAX_DISCARDED_PAYLOAD_BYTES {
        return Err(ConnectionEnd::Protocol(format!(
            "write of {} bytes at offset {}: payload far above the {max_request_bytes}-byte maximum",
            header.length_bytes, header.offset_bytes
        )));
    }
    input.discard(stream, u64::from(header.length_bytes))?;
    Ok(())
}

fn release_if_large(buffer: &mut Vec<u8>) {
    if buffer.capacity() > RETAINED_BUFFER_BYTES {
        *buffer = Vec::new();
    }
}

/// True when the peer has closed its socket entirely (not just its sending
/// side): nobody will read replies any more. Detects a Unix-socket peer
/// that closed, and a TCP peer that reset; a TCP peer's plain close shows
/// up at the next failed reply write instead.
fn peer_gone(stream: &Stream) -> bool {
    let mut poll_fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let ready = unsafe { libc::poll(&mut poll_fd, 1, 0) };
    ready > 0 && poll_fd.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// Transmission with requests executed on the reading thread; replies are
/// written when no further whole request is buffered (or much is waiting).
/// Reply bytes waiting in `out` are charged to the server-wide budget; a
/// request that does not fit waits, with earlier replies written first so
/// this connection holds nothing while it waits.
fn transmit_inline(
    shared: &Shared,
    session: &Session,
    input: &mut InputBuffer,
    stream: &mut Stream,
    stopping: &AtomicBool,
) -> Result<(), ConnectionEnd> {
    let batch_bytes = shared.config.reply_batch_bytes.max(1);
    let connection_limit_bytes = shared.config.max_in_flight_bytes_per_connection;
    let mut out: Vec<u8> = Vec::with_capacity(batch_bytes.min(RETAINED_BUFFER_BYTES) + 64 * 1024);
    let mut payload: Vec<u8> = Vec::new();
    // Charged for the replies in `out`; given back once they are written.
    let mut held = Charge::none();
    let give_up = || stopping.load(Ordering::SeqCst);
    let result = loop {
        if !out.is_empty() && (out.len() >= batch_bytes || !input.has_complete_request()) {
            stream.write_all(&out)?;
            out.clear();
            release_if_large(&mut out);
            held = Charge::none();
        }
        let header = match next_header(input, stream) {
            Ok(Some(header)) => header,
            Ok(None) => break Ok(()),
            Err(end) => break Err(end),
        };
        let charge = charge_bytes(shared, &header);
        if charge > 0 {
            let fits =
                held.bytes + charge <= connection_limit_bytes && shared.budget.try_acquire(charge);
            if fits {
                held.budgets[0] = Some(&shared.budget);
                held.bytes += charge;
            } else {
                if !out.is_empty() {
                    stream.write_all(&out)?;
                    out.clear();
                    release_if_large(&mut out);
                }
                held = Charge::none();
                if !shared.budget.acquire(charge, &give_up) {
                    // Stopping: the request is dropped with the connection.
                    break Ok(());
                }
                held = Charge {
                    budgets: [Some(&shared.budget), None],
                    bytes: charge,
                };
            }
        }
        let mut data: &[u8] = &[];
        if header.has_payload() {
            if header.length_bytes > session.max_request_bytes {
                if let Err(end) =
                    discard_oversized_payload(input, stream, &header, session.max_request_bytes)
                {
                    break Err(end);
                }
            } else {
                let length = header.length_bytes as usize;
                if payload.len() < length {
                    payload.resize(length, 0);
                }
                input.read_exact(stream, &mut payload[..length])?;
                data = &payload[..length];
            }
        }
        if header.command == NBD_CMD_DISC {
            shared.counters.requests[command_slot(NBD_CMD_DISC)].fetch_add(1, Ordering::Relaxed);
            break Ok(());
        }
        handle_request(shared, session, &header, data, &mut out);
        if payload.len() > RETAINED_BUFFER_BYTES {
            payload = Vec::new();
        }
    };
    if !out.is_empty() {
        stream.write_all(&out)?;
    }
    drop(held);
    result
}

struct Job<'a> {
    header: RequestHeader,
    payload: Vec<u8>,
    /// Given back when the job is dropped: after its reply is written, or
    /// unexecuted when its client is gone.
    charge: Charge<'a>,
}

/// Transmission with a bounded queue feeding worker threads; each worker
/// writes its reply whole under the writer lock. Each request takes its
/// bytes from this connection's budget and the server's before the reader
/// reads its payload or queues it; the reader waits (reading nothing more)
/// while either is exhausted.
fn transmit_with_workers(
    shared: &Shared,
    session: &Session,
    input: &mut InputBuffer,
    stream: &mut Stream,
    stopping: &AtomicBool,
    id: u64,
) -> Result<(), ConnectionEnd> {
    let writer = Mutex::new(stream.try_clone()?);
    // Set when a reply cannot be written or the client is gone: queued
    // requests are then dropped unexecuted.
    let cancelled = AtomicBool::new(false);
    let pool: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    let connection_budget = ByteBudget::new(shared.config.max_in_flight_bytes_per_connection);
    let (sender, receiver) = sync_channel::<Job<'_>>(shared.config.queue_depth_per_connection);
    let receiver = Mutex::new(receiver);
    let give_up = || cancelled.load(Ordering::SeqCst) || stopping.load(Ordering::SeqCst);

    let send_reply = |bytes: &[u8]| {
        let mut writer = writer.lock();
        if writer.write_all(bytes).is_err() && !cancelled.swap(true, Ordering::SeqCst) {
            // Unblock the reader: nobody will get replies any more.
            let _ = writer.shutdown(Shutdown::Both);
        }
    };

    std::thread::scope(|scope| {
        let workers = shared.config.workers_per_connection;
        for index in 0..workers {
            let mut builder = std::thread::Builder::new().name(format!("nbd-conn-{id}-worker"));
            if let Some(stack_bytes) = shared.config.worker_stack_bytes {
                builder = builder.stack_size(stack_bytes);
            }
            // Workers log inside their connection's span.
            let span = tracing::Span::current();
            let (receiver, pool, cancelled, send_reply) =
                (&receiver, &pool, &cancelled, &send_reply);
            let spawned = builder.spawn_scoped(scope, move || {
                let _span = span.entered();
                worker_loop(shared, session, receiver, pool, cancelled, send_reply)
            });
            if let Err(error) = spawned {
                shared
                    .counters
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                shared.log(
                    LogLevel::Error,
                    &format!(
                        "connection {id}: refused: cannot start worker thread {} of {workers} (workers_per_connection): {error}",
                        index + 1
                    ),
                );
                // The workers already started see the queue closed and end.
                drop(sender);
                return Ok(());
            }
        }
        let mut error_reply = Vec::new();
        let mut disconnect_requested = false;
        let result = loop {
            if cancelled.load(Ordering::SeqCst) {
                break Ok(());
            }
            let header = match next_header(input, stream) {
                Ok(Some(header)) => header,
                Ok(None) => break Ok(()),
                Err(end) => break Err(end),
            };
            let charge = match Charge::acquire(
                &connection_budget,
                &shared.budget,
                charge_bytes(shared, &header),
                &give_up,
            ) {
                Some(charge) => charge,
                // Stopping, or the client is gone: the request is dropped
                // with the connection.
                None => break Ok(()),
            };
            let fits = header.length_bytes <= session.max_request_bytes;
            let mut payload = if header.has_payload() && fits {
                pool.lock().pop().unwrap_or_default()
            } else {
                Vec::new()
            };
            if header.has_payload() {
                if !fits {
                    if let Err(end) =
                        discard_oversized_payload(input, stream, &header, session.max_request_bytes)
                    {
                        break Err(end);
                    }
                    error_reply.clear();
                    handle_request(shared, session, &header, &[], &mut error_reply);
                    send_reply(&error_reply);
                    continue;
                }
                payload.resize(header.length_bytes as usize, 0);
                if let Err(error) = input.read_exact(stream, &mut payload) {
                    break Err(error.into());
                }
            }
            if header.command == NBD_CMD_DISC {
                shared.counters.requests[command_slot(NBD_CMD_DISC)]
                    .fetch_add(1, Ordering::Relaxed);
                // The spec: every outstanding request is still handled.
                disconnect_requested = true;
                break Ok(());
            }
            // Blocks while the queue is full: back-pressure on the client.
            let job = Job {
                header,
                payload,
                charge,
            };
            if sender.send(job).is_err() {
                break Ok(());
            }
        };
        // A client that closed its socket without DISC will read no
        // replies: drop what is queued instead of executing it. (After
        // DISC, or when only its sending side is closed, the queued
        // requests are answered.)
        if !disconnect_requested && peer_gone(stream) {
            cancelled.store(true, Ordering::SeqCst);
        }
        // Workers finish (or drop) the queued requests, then see the
        // channel closed.
        drop(sender);
        result
    })
}

fn worker_loop(
    shared: &Shared,
    session: &Session,
    receiver: &Mutex<Receiver<Job<'_>>>,
    pool: &Mutex<Vec<Vec<u8>>>,
    cancelled: &AtomicBool,
    send_reply: &(dyn Fn(&[u8]) + Sync),
) {
    let mut out = Vec::with_capacity(64 * 1024);
    loop {
        let job = {
            let receiver = receiver.lock();
            match receiver.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        if cancelled.load(Ordering::SeqCst) {
            shared
                .counters
                .requests_cancelled
                .fetch_add(1, Ordering::Relaxed);
            continue;
        }
        out.clear();
        handle_request(shared, session, &job.header, &job.payload, &mut out);
        send_reply(&out);
        release_if_large(&mut out);
        let Job {
            mut payload,
            charge,
            ..
        } = job;
        drop(charge);
        let capacity = payload.capacity();
        if capacity > 0 && capacity <= RETAINED_BUFFER_BYTES {
            payload.clear();
            let mut pool = pool.lock();
            let pooled_bytes: usize = pool.iter().map(Vec::capacity).sum();
            if pooled_bytes + capacity <= POOLED_BUFFER_BYTES {
                pool.push(payload);
            }
        }
    }
}

/// Connects to a TCP address with `TCP_NODELAY`; a helper for clients.
pub(crate) fn connect_tcp(address: impl ToSocketAddrs) -> io::Result<Stream> {
    let stream = TcpStream::connect(address)?;
    stream.set_nodelay(true)?;
    Ok(Stream::Tcp(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that does not fit waits until bytes are given back, gives
    /// up when asked, and the peak is what was held at once.
    #[test]
    fn byte_budget_waits_for_releases_and_gives_up_when_told() {
        let budget = ByteBudget::new(10);
        assert!(budget.try_acquire(6));
        assert!(!budget.try_acquire(5));
        assert!(!budget.acquire(5, &|| true), "gives up at once");
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let acquired = budget.acquire(8, &|| false);
                done.store(true, Ordering::SeqCst);
                acquired
            });
            assert!(budget.try_acquire(4), "the rest still fits");
            assert!(!done.load(Ordering::SeqCst));
            budget.release(6);
            budget.release(4);
            assert!(waiter.join().unwrap());
        });
        assert_eq!(budget.usage(), (8, 10));
        {
            let both = Charge::acquire(&budget, &budget, 1, &|| true);
            assert!(both.is_some());
            assert_eq!(budget.usage().0, 10);
        }
        assert_eq!(budget.usage().0, 8, "a dropped charge gives both back");
        assert!(Charge::acquire(&budget, &budget, 2, &|| true).is_none());
        assert_eq!(budget.usage().0, 8, "a failed charge holds nothing");
    }
}
