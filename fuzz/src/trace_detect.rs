//! Format detection with no format given, then the detected format's reader
//! over the same bytes: `open_trace` without the file and the
//! decompression. The whole input is the trace; `DETECT_BYTES` of it are
//! the detection sample, as in `open_trace`.
//!
//! Property beyond "no panic": detection is a pure function of the sample
//! (asking twice gives the same answer).

use std::path::Path;

use tierd_trace::detect::detect;
use tierd_trace::open::DETECT_BYTES;
use tierd_trace::OpenOptions;

use crate::trace_reader::read_all;

pub fn run(data: &[u8]) {
    let head = &data[..data.len().min(DETECT_BYTES)];
    let path = Path::new("fuzz-input");
    match detect(head, path) {
        Ok(format) => {
            assert_eq!(detect(head, path).ok(), Some(format), "detection is stable");
            read_all(format, data, &OpenOptions::default());
        }
        Err(error) => drop(error.to_string()),
    }
}
