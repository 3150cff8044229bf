//! PLACEHOLDER: being written (issue 2). Replace this whole file.

use crate::error::{Result, TraceError};
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;

pub fn open(input: Input, _options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Err(TraceError::UnknownFormat {
        path: input.path,
        tried: "flashsim reader not written yet".to_string(),
        known: String::new(),
    })
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like this format; `Err` says why not.
pub fn sniff(_head: &[u8]) -> std::result::Result<(), String> {
    Err("flashsim detection not written yet".to_string())
}
