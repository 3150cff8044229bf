//! Format detection from content. PLACEHOLDER until the formats land: only
//! MSR is recognised.

use std::path::Path;

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::formats::msr;

pub fn detect(head: &[u8], path: &Path) -> Result<Format> {
    match msr::sniff(head) {
        Ok(()) => Ok(Format::Msr),
        Err(reason) => Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
            tried: format!("msr ({reason})"),
            known: Format::names(),
        }),
    }
}
