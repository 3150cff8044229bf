//! The reader interface every format implements, and the wrappers that stack
//! on it (volume filter; sorting lives in `sort.rs`).

use std::path::{Path, PathBuf};

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::request::{Request, VolumeId, VolumeTable};

/// A streaming source of requests.
///
/// Obligations of an implementation:
/// - memory stays bounded whatever the file size (sorting readers bound it with
///   a spill to temporary files);
/// - it never panics on any input bytes: a bad record is an `Err` naming the
///   path and line or byte offset;
/// - after `Ok(None)` or an `Err`, further calls return `Ok(None)`.
pub trait TraceReader: Send {
    /// The next request, `Ok(None)` at the end of the trace.
    fn next_request(&mut self) -> Result<Option<Request>>;

    /// The format being read.
    fn format(&self) -> Format;

    /// Volumes seen so far (complete once the reader returned `Ok(None)`).
    fn volumes(&self) -> &VolumeTable;

    /// Lines or records skipped because `--skip-bad-lines` was on.
    fn skipped_lines(&self) -> u64 {
        0
    }

    /// Non-request lines passed over by design (headers, comments, blkparse
    /// events other than the chosen one).
    fn ignored_lines(&self) -> u64 {
        0
    }

    /// The file being read.
    fn path(&self) -> &Path;
}

impl Iterator for Box<dyn TraceReader> {
    type Item = Result<Request>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_request().transpose()
    }
}

/// Passes through only the requests of one named volume.
pub struct VolumeFilter {
    inner: Box<dyn TraceReader>,
    name: String,
    id: Option<VolumeId>,
    path: PathBuf,
}

impl VolumeFilter {
    pub fn new(inner: Box<dyn TraceReader>, name: String) -> Self {
        let path = inner.path().to_path_buf();
        Self {
            inner,
            name,
            id: None,
            path,
        }
    }
}

impl TraceReader for VolumeFilter {
    fn next_request(&mut self) -> Result<Option<Request>> {
        loop {
            let Some(request) = self.inner.next_request()? else {
                if self.id.is_none() {
                    let names = self.inner.volumes().names();
                    return Err(TraceError::UnknownVolume {
                        path: self.path.clone(),
                        volume: self.name.clone(),
                        available: if names.is_empty() {
                            "no volumes".to_string()
                        } else {
                            names.join(", ")
                        },
                    });
                }
                return Ok(None);
            };
            if self.id.is_none() {
                self.id = self.inner.volumes().id(&self.name);
            }
            if Some(request.volume) == self.id {
                return Ok(Some(request));
            }
        }
    }

    fn format(&self) -> Format {
        self.inner.format()
    }

    fn volumes(&self) -> &VolumeTable {
        self.inner.volumes()
    }

    fn skipped_lines(&self) -> u64 {
        self.inner.skipped_lines()
    }

    fn ignored_lines(&self) -> u64 {
        self.inner.ignored_lines()
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Serves requests from any iterator (a generator, a test fixture) through the
/// [`TraceReader`] interface, so everything that analyses a file can analyse a
/// stream that never touched disk.
pub struct IteratorReader<I> {
    requests: I,
    volumes: VolumeTable,
    format: Format,
    path: PathBuf,
}

impl<I: Iterator<Item = Request> + Send> IteratorReader<I> {
    /// `label` stands where a file path would appear in messages (for a
    /// generated stream, say what generated it); `volume_names` are the names
    /// of volume ids 0, 1, ...; `format` is what [`TraceReader::format`]
    /// reports.
    pub fn new(
        requests: I,
        volume_names: &[&str],
        format: Format,
        label: impl Into<PathBuf>,
    ) -> Self {
        let mut volumes = VolumeTable::new();
        for name in volume_names {
            volumes.intern(name);
        }
        Self {
            requests,
            volumes,
            format,
            path: label.into(),
        }
    }
}

impl<I: Iterator<Item = Request> + Send> TraceReader for IteratorReader<I> {
    fn next_request(&mut self) -> Result<Option<Request>> {
        Ok(self.requests.next())
    }

    fn format(&self) -> Format {
        self.format
    }

    fn volumes(&self) -> &VolumeTable {
        &self.volumes
    }

    fn path(&self) -> &Path {
        &self.path
    }
}
