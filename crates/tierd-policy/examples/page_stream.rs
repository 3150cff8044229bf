//! Expands a block trace (any format tierd reads) into the 4 KiB page
//! stream the page caches see, for `examples/cache_replay.rs` and
//! libCacheSim (`bench/libcachesim/compare.py`):
//!
//! `cargo run --release -p tierd-policy --example page_stream -- TRACE PAGES.u64`
//!
//! Each request becomes every 4 KiB page it touches
//! ([`tierd_policy::cache::pages_touched`]), in order. The output is a
//! headerless array of little-endian u64 words: bits 0–62 the page number,
//! bit 63 set for a write. Prints `requests=… accesses=… unique_pages=…`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use tierd_common::hash::FastSet;
use tierd_policy::cache::pages_touched;
use tierd_trace::{open_trace, OpenOptions};

const WRITE_BIT: u64 = 1 << 63;

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let [trace, output] = arguments.as_slice() else {
        eprintln!("usage: page_stream TRACE PAGES.u64");
        return ExitCode::from(2);
    };
    let run = || -> Result<(u64, u64, usize), Box<dyn std::error::Error>> {
        let mut reader = open_trace(Path::new(trace), &OpenOptions::default())?;
        let mut writer = BufWriter::with_capacity(1 << 20, File::create(output)?);
        let (mut requests, mut accesses) = (0u64, 0u64);
        let mut unique = FastSet::default();
        while let Some(request) = reader.next_request()? {
            requests += 1;
            let write_bit = if request.op.is_write() { WRITE_BIT } else { 0 };
            for page in pages_touched(request.offset_bytes, request.length_bytes) {
                if page & WRITE_BIT != 0 {
                    return Err(format!("{trace}: page {page} does not fit in 63 bits").into());
                }
                writer.write_all(&(page | write_bit).to_le_bytes())?;
                unique.insert(page);
                accesses += 1;
            }
        }
        writer.flush()?;
        Ok((requests, accesses, unique.len()))
    };
    match run() {
        Ok((requests, accesses, unique_pages)) => {
            println!("requests={requests} accesses={accesses} unique_pages={unique_pages}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("page_stream: {error}");
            ExitCode::FAILURE
        }
    }
}
