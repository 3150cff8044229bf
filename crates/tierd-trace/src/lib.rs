//! Block traces: one [`Request`] type, streaming readers for the common trace
//! formats with transparent decompression and content detection, writers for
//! the formats tierd emits, and tierd's native binary format.
//!
//! ```no_run
//! use tierd_trace::{open_trace, OpenOptions};
//! let mut reader = open_trace("trace.csv".as_ref(), &OpenOptions::default())?;
//! while let Some(request) = reader.next_request()? {
//!     println!("{} {:?} {}", request.time_ns, request.op, request.offset_bytes);
//! }
//! # Ok::<(), tierd_trace::TraceError>(())
//! ```

pub mod detect;
pub mod error;
pub mod format;
pub mod formats;
pub mod input;
pub mod open;
pub mod reader;
pub mod request;
pub mod sort;
pub mod text;
pub mod write;

pub use error::{Result, TraceError};
pub use format::Format;
pub use open::{open_trace, BlkparseEvent, OpenOptions};
pub use reader::{IteratorReader, TraceReader};
pub use request::{Op, Request, VolumeId, VolumeTable};
pub use write::{create_writer, TraceWriter, WriteOptions};
