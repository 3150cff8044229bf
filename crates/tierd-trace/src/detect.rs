//! Format detection from content. PLACEHOLDER until the formats land: only
//! MSR is recognised.

use std::path::Path;

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::formats::msr::Msr;
use crate::text::try_lines;

pub fn detect(head: &[u8], path: &Path) -> Result<Format> {
    let lines: Vec<&[u8]> = head.split(|byte| *byte == b'\n').take(32).collect();
    match try_lines(Msr::default(), &lines) {
        Ok(_) => Ok(Format::Msr),
        Err(reason) => Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
            tried: format!("msr ({reason})"),
            known: Format::names(),
        }),
    }
}
