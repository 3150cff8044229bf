//! Opening a trace by path: decompression, format detection, the format's
//! reader, then sorting and volume filtering as asked.

use std::path::{Path, PathBuf};

use crate::detect::detect;
use crate::error::Result;
use crate::format::Format;
use crate::formats;
use crate::input::{open_input, peek};
use crate::reader::{TraceReader, VolumeFilter};

/// Which blkparse event becomes a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlkparseEvent {
    /// Queued: what the application asked for, at the time it asked.
    #[default]
    Queue,
    /// Issued to the driver (after merging and scheduling).
    Dispatch,
    /// Completed; the response time is taken from the matching D event.
    Complete,
}

impl std::str::FromStr for BlkparseEvent {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "Q" | "q" => Ok(BlkparseEvent::Queue),
            "D" | "d" => Ok(BlkparseEvent::Dispatch),
            "C" | "c" => Ok(BlkparseEvent::Complete),
            _ => Err(format!("unknown blkparse event {text:?}; use Q, D or C")),
        }
    }
}

#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Skip detection and read as this format.
    pub format: Option<Format>,
    /// Keep only this volume (by name, see [`crate::VolumeTable`]).
    pub volume: Option<String>,
    /// Count and skip malformed lines instead of stopping at the first.
    pub skip_bad_lines: bool,
    pub blkparse_event: BlkparseEvent,
    /// Records held in memory before a sorting reader spills a sorted run to a
    /// temporary file.
    pub sort_run_records: usize,
    /// Where sorting readers put their runs (default: the system temp dir).
    pub temp_dir: Option<PathBuf>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            format: None,
            volume: None,
            skip_bad_lines: false,
            blkparse_event: BlkparseEvent::Queue,
            sort_run_records: 4 << 20,
            temp_dir: None,
        }
    }
}

/// Bytes of uncompressed input examined to detect the format.
pub const DETECT_BYTES: usize = 64 * 1024;

/// Opens `path` for reading requests.
pub fn open_trace(path: &Path, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    let input = open_input(path)?;
    let (head, input) = peek(input, DETECT_BYTES)?;
    let format = match options.format {
        Some(format) => format,
        None => detect(&head, path)?,
    };
    let mut reader = formats::open(format, input, options)?;
    if format.needs_sorting() {
        reader = Box::new(crate::sort::SortedReader::new(reader, options)?);
    }
    if let Some(volume) = &options.volume {
        reader = Box::new(VolumeFilter::new(reader, volume.clone()));
    }
    Ok(reader)
}
