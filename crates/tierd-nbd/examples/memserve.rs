//! Serves an in-memory export on a Unix socket, for speed checks against
//! `nbdkit memory`:
//!
//! ```text
//! cargo run --release -p tierd-nbd --example memserve -- /tmp/mem.sock 256M [workers]
//! fio --ioengine=nbd --uri='nbd+unix:///?socket=/tmp/mem.sock' --rw=randread \
//!     --bs=4k --iodepth=16 --runtime=10 --time_based --name=x --size=256M
//! ```
//!
//! Runs until stdin closes (or Ctrl-C).

use std::io::Read;
use std::sync::{Arc, RwLock};

use tierd_nbd::{Export, ExportError, ExportResult, Server, ServerConfig};

/// A volume in memory. One lock for the whole volume is enough for a speed
/// check of the protocol path (reads share it).
struct MemoryExport {
    bytes: RwLock<Vec<u8>>,
}

impl MemoryExport {
    fn range(&self, offset_bytes: u64, length_bytes: u64) -> std::ops::Range<usize> {
        offset_bytes as usize..(offset_bytes + length_bytes) as usize
    }
}

fn poisoned<T>(_: T) -> ExportError {
    ExportError::new(libc::EIO, "lock poisoned")
}

impl Export for MemoryExport {
    fn size_bytes(&self) -> u64 {
        self.bytes
            .read()
            .map(|bytes| bytes.len() as u64)
            .unwrap_or(0)
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()> {
        let bytes = self.bytes.read().map_err(poisoned)?;
        buf.copy_from_slice(&bytes[self.range(offset_bytes, buf.len() as u64)]);
        Ok(())
    }

    fn write(&self, offset_bytes: u64, data: &[u8], _fua: bool) -> ExportResult<()> {
        let mut bytes = self.bytes.write().map_err(poisoned)?;
        let range = self.range(offset_bytes, data.len() as u64);
        bytes[range].copy_from_slice(data);
        Ok(())
    }

    fn flush(&self) -> ExportResult<()> {
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, _fua: bool) -> ExportResult<()> {
        self.write_zeroes(offset_bytes, length_bytes, false, true, false)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        _fua: bool,
        _may_trim: bool,
        _fast_only: bool,
    ) -> ExportResult<()> {
        let mut bytes = self.bytes.write().map_err(poisoned)?;
        let range = self.range(offset_bytes, length_bytes);
        bytes[range].fill(0);
        Ok(())
    }
}

fn parse_size(text: &str) -> Option<u64> {
    let (digits, multiplier) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&text[..text.len() - 1], 1 << 20),
        b'G' | b'g' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(multiplier)
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    if arguments.len() < 3 {
        eprintln!(
            "usage: memserve SOCKET SIZE[K|M|G] [WORKERS_PER_CONNECTION [REPLY_BATCH_BYTES]]"
        );
        std::process::exit(2);
    }
    let Some(size_bytes) = parse_size(&arguments[2]) else {
        eprintln!("bad size {:?}", arguments[2]);
        std::process::exit(2);
    };
    let workers = arguments
        .get(3)
        .and_then(|text| text.parse().ok())
        .unwrap_or(0);
    let export: Arc<dyn Export> = Arc::new(MemoryExport {
        bytes: RwLock::new(vec![0; size_bytes as usize]),
    });
    let mut config = ServerConfig {
        workers_per_connection: workers,
        ..ServerConfig::default()
    };
    if let Some(batch) = arguments.get(4).and_then(|text| text.parse().ok()) {
        config.reply_batch_bytes = batch;
    }
    let server = match Server::new(vec![("memory".into(), export)], config) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    };
    let handle = match server.serve_unix(&arguments[1]) {
        Ok(handle) => handle,
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    };
    eprintln!(
        "serving {} bytes at {} (workers per connection: {workers})",
        size_bytes,
        handle.address().uri("")
    );
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    handle.shutdown();
    let stats = server.stats();
    eprintln!("{stats:?}");
}
