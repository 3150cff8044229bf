//! What a FUA write costs on a file tier: the old way (the write, then
//! `fdatasync` of the whole file, which is what `Volume` did for every tier a
//! FUA write touched) against a durable write (`write_at_durable`:
//! `pwritev2(RWF_DSYNC)`, this range only), with ordinary writes dirtying the
//! page cache between FUA writes, as a client's mixed traffic does.
//!
//! ```text
//! cargo run --release -p tierd-engine --example fua -- [DIRECTORY] [ROUNDS]
//! ```
//!
//! Prints one line per (round, cache mode, way): FUA writes timed, mean and
//! max latency in µs. The ways alternate within a round so drift on a shared
//! machine hits both. The file (256 MiB) is created in DIRECTORY (default
//! /var/tmp) and removed at the end.

use std::sync::Arc;

use tierd_common::clock::{Clock, SystemClock};
use tierd_common::rng::{Rng, SeededRng};
use tierd_engine::device::file::FileDevice;
use tierd_engine::device::BlockDevice;

const SIZE_BYTES: u64 = 256 << 20;
const FUA_WRITES: usize = 200;
const PLAIN_WRITES_PER_FUA: usize = 64;
const BLOCK_BYTES: u64 = 4096;

fn main() {
    let mut arguments = std::env::args().skip(1);
    let directory = arguments.next().unwrap_or_else(|| "/var/tmp".to_string());
    let rounds: usize = arguments
        .next()
        .map(|text| text.parse().expect("ROUNDS must be a number"))
        .unwrap_or(2);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let path = std::path::Path::new(&directory).join("tierd-fua-bench.img");
    let mut rng = SeededRng::new(7);
    println!("| round | direct | way | FUA writes | mean µs | max µs |");
    println!("|---|---|---|---|---|---|");
    for round in 1..=rounds {
        for direct in [false, true] {
            let device = match FileDevice::open(&path, Some(SIZE_BYTES), direct, true) {
                Ok(device) => device,
                Err(error) => {
                    eprintln!("skipping direct = {direct}: {error}");
                    continue;
                }
            };
            let mut ways = ["write + fdatasync", "pwritev2(RWF_DSYNC)"];
            if round % 2 == 0 {
                ways.reverse();
            }
            for way in ways {
                let mut block = vec![0u8; 2 * BLOCK_BYTES as usize];
                let shift = block.as_ptr().align_offset(BLOCK_BYTES as usize);
                let data = &mut block[shift..shift + BLOCK_BYTES as usize];
                let (mut total_ns, mut max_ns) = (0u64, 0u64);
                for index in 0..FUA_WRITES {
                    data.fill(index as u8);
                    for _ in 0..PLAIN_WRITES_PER_FUA {
                        let offset = rng.below(SIZE_BYTES / BLOCK_BYTES) * BLOCK_BYTES;
                        device.write_at(offset, data).expect("plain write");
                    }
                    let offset = rng.below(SIZE_BYTES / BLOCK_BYTES) * BLOCK_BYTES;
                    let started_ns = clock.now_ns();
                    if way.starts_with("write") {
                        device.write_at(offset, data).expect("write");
                        device.flush().expect("fdatasync");
                    } else {
                        device
                            .write_at_durable(offset, data)
                            .expect("durable write");
                    }
                    let took_ns = clock.now_ns() - started_ns;
                    total_ns += took_ns;
                    max_ns = max_ns.max(took_ns);
                }
                println!(
                    "| {round} | {direct} | {way} | {FUA_WRITES} | {:.1} | {:.1} |",
                    total_ns as f64 / FUA_WRITES as f64 / 1e3,
                    max_ns as f64 / 1e3
                );
                // Leave no dirty pages for the next way to pay for.
                device.flush().expect("flush");
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}
