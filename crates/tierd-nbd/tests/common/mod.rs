//! Shared pieces of the tierd-nbd integration tests: an in-memory export,
//! a server on a Unix socket in a temporary directory, and the rule for
//! tests that need real NBD clients installed.

#![allow(dead_code)]

pub mod pki;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tierd_nbd::proto::{NBD_STATE_HOLE, NBD_STATE_ZERO};
use tierd_nbd::{
    Export, ExportError, ExportResult, Extent, LogLevel, Server, ServerConfig, ServerHandle,
};

/// Block size of the in-memory export's allocation map.
pub const BLOCK_BYTES: u64 = 4096;

/// A volume in a Vec. Counts FUA writes, flushes and zero requests so tests
/// can see what reached the export.
pub struct MemoryExport {
    pub bytes: RwLock<Vec<u8>>,
    pub writable: bool,
    /// When false, FAST_ZERO requests fail with ENOTSUP.
    pub fast_zero: bool,
    pub fua_requests: AtomicU64,
    pub flushes: AtomicU64,
    pub zero_requests_may_trim: AtomicU64,
    pub zero_requests_no_hole: AtomicU64,
}

impl MemoryExport {
    pub fn new(size_bytes: usize) -> Self {
        Self {
            bytes: RwLock::new(vec![0; size_bytes]),
            writable: true,
            fast_zero: true,
            fua_requests: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            zero_requests_may_trim: AtomicU64::new(0),
            zero_requests_no_hole: AtomicU64::new(0),
        }
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().unwrap().clone()
    }

    fn range(offset_bytes: u64, length_bytes: u64) -> std::ops::Range<usize> {
        offset_bytes as usize..(offset_bytes + length_bytes) as usize
    }

    fn note_fua(&self, fua: bool) {
        if fua {
            self.fua_requests.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Export for MemoryExport {
    fn size_bytes(&self) -> u64 {
        self.bytes.read().unwrap().len() as u64
    }

    fn is_writable(&self) -> bool {
        self.writable
    }

    fn description(&self) -> Option<String> {
        Some("in-memory test volume".into())
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()> {
        let bytes = self.bytes.read().unwrap();
        buf.copy_from_slice(&bytes[Self::range(offset_bytes, buf.len() as u64)]);
        Ok(())
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.note_fua(fua);
        let mut bytes = self.bytes.write().unwrap();
        bytes[Self::range(offset_bytes, data.len() as u64)].copy_from_slice(data);
        Ok(())
    }

    fn flush(&self) -> ExportResult<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> ExportResult<()> {
        self.note_fua(fua);
        let mut bytes = self.bytes.write().unwrap();
        bytes[Self::range(offset_bytes, length_bytes)].fill(0);
        Ok(())
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
        may_trim: bool,
        fast_only: bool,
    ) -> ExportResult<()> {
        if fast_only && !self.fast_zero {
            return Err(ExportError::new(libc::ENOTSUP, "no fast zeroing here"));
        }
        self.note_fua(fua);
        if may_trim {
            self.zero_requests_may_trim.fetch_add(1, Ordering::SeqCst);
        } else {
            self.zero_requests_no_hole.fetch_add(1, Ordering::SeqCst);
        }
        let mut bytes = self.bytes.write().unwrap();
        bytes[Self::range(offset_bytes, length_bytes)].fill(0);
        Ok(())
    }

    /// Blocks of all zero bytes are reported as HOLE|ZERO, others as data;
    /// neighbouring blocks of the same kind are merged; the last extent may
    /// run past the request to the end of its run.
    fn block_status(&self, offset_bytes: u64, length_bytes: u64) -> ExportResult<Vec<Extent>> {
        let bytes = self.bytes.read().unwrap();
        let size = bytes.len() as u64;
        let end = (offset_bytes + length_bytes).min(size);
        let mut extents: Vec<Extent> = Vec::new();
        let mut position = offset_bytes;
        while position < size {
            let block_end = ((position / BLOCK_BYTES + 1) * BLOCK_BYTES).min(size);
            let zero = bytes[position as usize..block_end as usize]
                .iter()
                .all(|byte| *byte == 0);
            let flags = if zero {
                NBD_STATE_HOLE | NBD_STATE_ZERO
            } else {
                0
            };
            match extents.last_mut() {
                Some(last) if last.flags == flags => last.length_bytes += block_end - position,
                _ => {
                    if position >= end {
                        break;
                    }
                    extents.push(Extent {
                        length_bytes: block_end - position,
                        flags,
                    });
                }
            }
            position = block_end;
        }
        Ok(extents)
    }
}

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
