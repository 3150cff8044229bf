//! Shared pieces of the tierd-nbd integration tests: the in-memory export
//! (`tierd_nbd::MemoryExport`), a server on a Unix socket in a temporary
//! directory, and the rule for tests that need real NBD clients installed.

#![allow(dead_code)]

pub mod pki;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tierd_nbd::{Export, LogLevel, Server, ServerConfig, ServerHandle};

/// Block size of the in-memory export's allocation map.
pub const BLOCK_BYTES: u64 = tierd_nbd::memory::MEMORY_BLOCK_BYTES;

pub use tierd_nbd::MemoryExport;

/// Log lines collected from a server, for tests that check logging.
#[derive(Clone, Default)]
pub struct LogSink {
    pub lines: Arc<Mutex<Vec<(LogLevel, String)>>>,
}

impl LogSink {
    pub fn config(&self) -> ServerConfig {
        let lines = Arc::clone(&self.lines);
        ServerConfig {
            logger: Arc::new(move |level, message| {
                lines.lock().unwrap().push((level, message.to_string()));
            }),
            ..ServerConfig::default()
        }
    }

    pub fn warnings(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(level, _)| *level <= LogLevel::Warn)
            .map(|(_, line)| line.clone())
            .collect()
    }
}

/// A running server on a Unix socket in its own temporary directory.
pub struct TestServer {
    pub directory: tempfile::TempDir,
    pub socket: PathBuf,
    pub server: Server,
    pub handle: Option<ServerHandle>,
    pub export: Arc<MemoryExport>,
    pub logs: LogSink,
}

impl TestServer {
    /// One export named "mem" of `size_bytes`, served with `config`
    /// (its logger is replaced by a collecting one).
    pub fn start_with(export: MemoryExport, mut config: ServerConfig) -> TestServer {
        let logs = LogSink::default();
        config.logger = logs.config().logger;
        let export = Arc::new(export);
        let served: Arc<dyn Export> = Arc::clone(&export) as Arc<dyn Export>;
        let server = Server::new(vec![("mem".into(), served)], config).unwrap();
        let directory = tempfile::tempdir().unwrap();
        let socket = directory.path().join("nbd.sock");
        let handle = server.serve_unix(&socket).unwrap();
        TestServer {
            directory,
            socket,
            server,
            handle: Some(handle),
            export,
            logs,
        }
    }

    pub fn start(size_bytes: usize) -> TestServer {
        Self::start_with(MemoryExport::new(size_bytes), ServerConfig::default())
    }

    pub fn target(&self) -> tierd_nbd::NbdTarget {
        tierd_nbd::NbdTarget::Unix(self.socket.clone())
    }

    pub fn uri(&self) -> String {
        format!("nbd+unix:///mem?socket={}", self.socket.display())
    }

    pub fn connect(&self) -> tierd_nbd::Client {
        tierd_nbd::Client::connect_uri(&self.uri()).unwrap()
    }
}

/// True when `tool` is on PATH. When it is not: prints why the test skips
/// and returns false, except under `CI=true`, where a missing tool fails the
/// test.
pub fn tool_available(tool: &str) -> bool {
    let found = std::process::Command::new("which")
        .arg(tool)
        .output()
        .map(|output| output.status.success())
        .unwrap_or(false);
    if found {
        return true;
    }
    let in_ci = std::env::var("CI")
        .map(|value| value == "true")
        .unwrap_or(false);
    assert!(
        !in_ci,
        "CI=true but {tool} is not installed (run ../shared/tools/install-nbd-clients.sh)"
    );
    eprintln!("skipping: {tool} not installed (run ../shared/tools/install-nbd-clients.sh)");
    false
}

/// A deterministic pattern for `length` bytes, different per `seed`.
pub fn pattern(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed;
    (0..length)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

/// Waits (up to 10 s) for `condition`, e.g. a log line written by a server
/// thread after the client already saw the effect; panics if it never holds.
pub fn wait_for(condition: impl Fn() -> bool) {
    for _ in 0..1000 {
        if condition() {
            return;
        }
        tierd_common::clock::Clock::sleep_ns(&tierd_common::clock::SystemClock::new(), 10_000_000);
    }
    panic!("condition still false after 10 s");
}

/// An option request on the wire: magic, option, length, data.
pub fn option_bytes(option: u32, data: &[u8]) -> Vec<u8> {
    use tierd_nbd::proto::NBD_OPTS_MAGIC;
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&NBD_OPTS_MAGIC.to_be_bytes());
    bytes.extend_from_slice(&option.to_be_bytes());
    bytes.extend_from_slice(&(data.len() as u32).to_be_bytes());
    bytes.extend_from_slice(data);
    bytes
}

/// INFO/GO data naming `name` with no information requests.
pub fn go_data(name: &str) -> Vec<u8> {
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    data
}

/// Panics on any thread (server threads included) since [`count_panics`].
pub static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PANIC_HOOK: std::sync::Once = std::sync::Once::new();

/// Starts counting panics in [`PANICS`] (once per test binary).
pub fn count_panics() {
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            previous(info);
        }));
    });
}
