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
use std::sync::Arc;

use tierd_nbd::{Export, MemoryExport, Server, ServerConfig};

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
    let export: Arc<dyn Export> = Arc::new(MemoryExport::new(size_bytes as usize));
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
