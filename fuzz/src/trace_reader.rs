//! Every trace reader, through the same path `open_trace` takes after
//! decompression: `formats::open` on an in-memory [`Input`], then the
//! sorting reader for formats that need it and the volume filter.
//!
//! First byte: format (`Format::ALL[byte % 14]`). Second byte: options —
//! bit 0 `skip_bad_lines`, bits 1–2 the blkparse event (Q, D, C), bit 3 a
//! volume filter (volume "0"), bit 4 sort runs of 8 records (so the sorting
//! reader spills runs to temporary files and merges them). The rest is the
//! trace's (uncompressed) bytes.
//!
//! Properties beyond "no panic": every error formats; with sorting, the
//! requests come out in time order; after its end or first error a reader
//! returns `Ok(None)` (the `TraceReader` contract).

use std::io::Cursor;
use std::path::PathBuf;

use tierd_trace::formats;
use tierd_trace::input::{Compression, Input};
use tierd_trace::sort::SortedReader;
use tierd_trace::{BlkparseEvent, Format, OpenOptions, TraceReader};

/// Requests read before giving up on an input (a guard against a reader
/// that produces requests without consuming bytes; inputs are small).
pub const MAX_REQUESTS: usize = 1 << 20;

/// An in-memory, uncompressed input named like a file.
pub fn memory_input(bytes: &[u8]) -> Input {
    Input {
        path: PathBuf::from("fuzz-input"),
        compression: Compression::None,
        reader: Box::new(Cursor::new(bytes.to_vec())),
    }
}

/// Options from the option byte (see the module docs).
pub fn options_from(byte: u8) -> OpenOptions {
    OpenOptions {
        format: None,
        volume: (byte & 8 != 0).then(|| "0".to_string()),
        skip_bad_lines: byte & 1 != 0,
        blkparse_event: match (byte >> 1) & 3 {
            1 => BlkparseEvent::Dispatch,
            2 => BlkparseEvent::Complete,
            _ => BlkparseEvent::Queue,
        },
        sort_run_records: if byte & 16 != 0 { 8 } else { 1 << 16 },
        temp_dir: None,
    }
}

/// Opens `bytes` as `format` the way `open_trace` does and drains it.
pub fn read_all(format: Format, bytes: &[u8], options: &OpenOptions) {
    let mut reader = match formats::open(format, memory_input(bytes), options) {
        Ok(reader) => reader,
        Err(error) => {
            drop(error.to_string());
            return;
        }
    };
    let sorted = format.needs_sorting();
    if sorted {
        reader = match SortedReader::new(reader, options) {
            Ok(reader) => Box::new(reader),
            Err(error) => {
                drop(error.to_string());
                return;
            }
        };
    }
    if let Some(volume) = &options.volume {
        reader = Box::new(tierd_trace::reader::VolumeFilter::new(
            reader,
            volume.clone(),
        ));
    }
    drain(reader.as_mut(), sorted);
}

/// Reads requests until the end or the first error, then checks that the
/// reader stays finished.
pub fn drain(reader: &mut dyn TraceReader, sorted: bool) {
    let mut last_time_ns = 0u64;
    let mut finished = false;
    for _ in 0..MAX_REQUESTS {
        match reader.next_request() {
            Ok(Some(request)) => {
                if sorted {
                    assert!(
                        request.time_ns >= last_time_ns,
                        "sorted reader went back in time: {} after {last_time_ns}",
                        request.time_ns
                    );
                }
                last_time_ns = request.time_ns;
            }
            Ok(None) => {
                finished = true;
                break;
            }
            Err(error) => {
                drop(error.to_string());
                finished = true;
                break;
            }
        }
    }
    let _ = (
        reader.volumes(),
        reader.skipped_lines(),
        reader.ignored_lines(),
    );
    if finished {
        // TraceReader's contract: after `Ok(None)` or an `Err`, `Ok(None)`.
        match reader.next_request() {
            Ok(None) => {}
            Ok(Some(request)) => panic!("a request after the end or an error: {request:?}"),
            Err(error) => panic!("an error after the end or an error: {error}"),
        }
    }
}

pub fn run(data: &[u8]) {
    let [format_byte, option_byte, trace @ ..] = data else {
        return;
    };
    let format = Format::ALL[usize::from(*format_byte) % Format::ALL.len()];
    read_all(format, trace, &options_from(*option_byte));
}
