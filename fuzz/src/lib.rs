//! The bodies of tierd's fuzz targets, as plain functions so that
//! `tests/seeds.rs` can run them over the checked-in seed corpora with a
//! normal `cargo test` (no libFuzzer, stable toolchain).
//!
//! Each `run(data)` must return for every input; a panic, an abort, a hang
//! or unbounded memory is a bug in the library under test (or a broken
//! property asserted here). Inputs pick their mode from the first byte so
//! one target covers several entry points, and checksummed formats get a
//! mode where the harness computes the checksums, so the fuzzer reaches
//! the decoding behind them.

pub mod admin_request;
pub mod alloc_watch;
pub mod meta_decode;
pub mod nbd_client;
pub mod nbd_proto;
pub mod nbd_server;
pub mod serve_config;
pub mod trace_detect;
pub mod trace_native;
pub mod trace_reader;

/// A fuzz target's body.
pub type Body = fn(&[u8]);

/// Every target: its name (the `fuzz_targets/` file and the seed
/// directory) and its body.
pub const TARGETS: [(&str, Body); 9] = [
    ("nbd_proto", nbd_proto::run),
    ("nbd_server", nbd_server::run),
    ("nbd_client", nbd_client::run),
    ("admin_request", admin_request::run),
    ("trace_reader", trace_reader::run),
    ("trace_detect", trace_detect::run),
    ("trace_native", trace_native::run),
    ("serve_config", serve_config::run),
    ("meta_decode", meta_decode::run),
];

/// Splits off the first byte (the mode selector); `None` for empty input.
pub fn split_mode(data: &[u8]) -> Option<(u8, &[u8])> {
    data.split_first().map(|(mode, rest)| (*mode, rest))
}

/// Reads `stream` until the peer closes it (a reset counts as closed).
/// `false` when the read timeout set on the stream passed with neither data
/// nor a close: the peer hangs.
pub fn drain_until_closed(stream: &mut impl std::io::Read, buffer: &mut [u8]) -> bool {
    loop {
        match stream.read(buffer) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}
