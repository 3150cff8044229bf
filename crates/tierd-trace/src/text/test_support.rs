//! Test scaffolding shared by the format modules: parsing one line, writing a
//! temporary trace, opening it with a forced format, and reading it whole.
//! Each format's tests keep their own cases and expected values.

use std::io::Write;
use std::path::Path;

use crate::format::Format;
use crate::open::{open_trace, OpenOptions};
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};
use crate::text::{LineError, LineFormat, Parsed};

/// Parses one line with a fresh `format`: the request, `"skipped"` for a
/// valid non-request line, or the reason the line was rejected.
pub fn parse<F: LineFormat>(mut format: F, line: &str) -> Result<Request, String> {
    let mut volumes = VolumeTable::new();
    match format.parse_line(line.as_bytes(), &mut volumes) {
        Ok(Parsed::Request(request)) => Ok(request),
        Ok(Parsed::Skip) => Err("skipped".into()),
        Err(LineError(reason)) => Err(reason),
    }
}

/// A temporary file holding `text`, deleted when dropped.
pub fn temp_trace(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file.flush().unwrap();
    file
}

/// Options that force `format` (no detection).
pub fn options(format: Format, skip_bad_lines: bool) -> OpenOptions {
    OpenOptions {
        format: Some(format),
        skip_bad_lines,
        ..Default::default()
    }
}

/// (requests, reads, writes) of a whole file read as `format`.
pub fn count(format: Format, path: &Path) -> (u64, u64, u64) {
    let mut reader = open_trace(path, &options(format, false)).unwrap();
    let (mut reads, mut writes) = (0, 0);
    while let Some(request) = reader.next_request().unwrap() {
        match request.op {
            Op::Read => reads += 1,
            Op::Write => writes += 1,
        }
    }
    (reads + writes, reads, writes)
}

/// Every request of `reader` until its end; panics on an error.
pub fn read_all(reader: &mut dyn TraceReader) -> Vec<Request> {
    let mut requests = Vec::new();
    while let Some(request) = reader.next_request().unwrap() {
        requests.push(request);
    }
    requests
}

/// Opens `text` as `format` with bad lines skipped and reads it whole: the
/// requests and the reader (for its skipped and ignored counts and volumes).
pub fn read_skipping(format: Format, text: &str) -> (Vec<Request>, Box<dyn TraceReader>) {
    let file = temp_trace(text);
    let mut reader = open_trace(file.path(), &options(format, true)).unwrap();
    let requests = read_all(reader.as_mut());
    (requests, reader)
}

/// Opens `text` as `format` without skipping bad lines and reads up to the
/// first error. Asserts that the error names the file, `:{line}:` and
/// `bad_text`, and, when `requests_before` is given, that exactly that many
/// requests came before it. Returns the reader, positioned after the error.
pub fn assert_bad_line_reported(
    format: Format,
    text: &str,
    requests_before: Option<usize>,
    line: u64,
    bad_text: &str,
) -> Box<dyn TraceReader> {
    let file = temp_trace(text);
    let mut reader = open_trace(file.path(), &options(format, false)).unwrap();
    let mut requests = 0;
    let error = loop {
        match reader.next_request() {
            Ok(Some(_)) => requests += 1,
            Ok(None) => panic!("the bad line was not reported"),
            Err(error) => break error.to_string(),
        }
    };
    if let Some(expected) = requests_before {
        assert_eq!(requests, expected, "requests before the error: {error}");
    }
    assert!(
        error.contains(&file.path().display().to_string()),
        "{error}"
    );
    assert!(error.contains(&format!(":{line}:")), "{error}");
    assert!(error.contains(bad_text), "{error}");
    reader
}
