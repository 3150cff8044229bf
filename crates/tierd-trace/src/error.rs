//! Trace errors. Every message names the file and the place in it (line or
//! byte offset), shows the offending text, says what the format expects and
//! what the user can do.

use std::path::PathBuf;

use crate::format::Format;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot open: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: read failed near byte {offset} of the uncompressed stream: {source}")]
    Read {
        path: PathBuf,
        offset: u64,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: write failed: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{path}:{line}: bad {format} line {text:?}: {reason}. The {format} format expects {expected}. \
         Fix or remove the line, pass --format if this is another format, or pass --skip-bad-lines to skip bad lines"
    )]
    BadLine {
        path: PathBuf,
        line: u64,
        format: Format,
        text: String,
        reason: String,
        expected: &'static str,
    },

    #[error(
        "{path}: bad {format} record at byte offset {offset}: {reason}. The {format} format expects {expected}"
    )]
    BadRecord {
        path: PathBuf,
        offset: u64,
        format: Format,
        reason: String,
        expected: &'static str,
    },

    #[error(
        "{path}: cannot tell the trace format; tried {tried}. Pass --format with one of: {known}"
    )]
    UnknownFormat {
        path: PathBuf,
        /// Each format tried with why it did not fit, `name (reason)`.
        tried: String,
        known: String,
    },

    #[error("{path}: no volume named {volume:?}; the trace has {available}. Pass --volume with one of those")]
    UnknownVolume {
        path: PathBuf,
        volume: String,
        available: String,
    },

    #[error("{path}: cannot write {format}: {reason}")]
    Unwritable {
        path: PathBuf,
        format: Format,
        reason: String,
    },
}

pub type Result<T, E = TraceError> = std::result::Result<T, E>;

/// Shortens untrusted text for an error message, so one giant binary "line"
/// cannot flood the terminal.
pub fn excerpt(bytes: &[u8]) -> String {
    const LIMIT: usize = 160;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(LIMIT)]).into_owned();
    let text = text.trim_end_matches(['\r', '\n']).to_string();
    if bytes.len() > LIMIT {
        format!("{text}…")
    } else {
        text
    }
}
