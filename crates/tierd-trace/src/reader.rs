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
    /// Set after the end or the unknown-volume error: later calls return
    /// `Ok(None)`, as the trait promises.
    finished: bool,
}

impl VolumeFilter {
    pub fn new(inner: Box<dyn TraceReader>, name: String) -> Self {
        let path = inner.path().to_path_buf();
        Self {
            inner,
            name,
            id: None,
            path,
            finished: false,
        }
    }
}

impl TraceReader for VolumeFilter {
    fn next_request(&mut self) -> Result<Option<Request>> {
        if self.finished {
            return Ok(None);
        }
        loop {
            let next = self.inner.next_request();
            if next.is_err() {
                self.finished = true;
            }
            let Some(request) = next? else {
                self.finished = true;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Op;

    fn one_request_on(volume_names: &[&str]) -> Box<dyn TraceReader> {
        let request = Request {
            time_ns: 5,
            volume: 0,
            op: Op::Read,
            offset_bytes: 4096,
            length_bytes: 512,
            response_ns: None,
        };
        Box::new(IteratorReader::new(
            std::iter::once(request),
            volume_names,
            Format::Msr,
            "test-stream",
        ))
    }

    /// Found by fuzzing (fuzz target trace_reader): the unknown-volume error
    /// came back on every later call, so a caller iterating past errors
    /// never ended.
    #[test]
    fn volume_filter_ends_after_the_unknown_volume_error() {
        let mut filter = VolumeFilter::new(one_request_on(&["hm_0"]), "web_1".to_string());
        let error = filter.next_request().unwrap_err();
        assert!(error.to_string().contains("web_1"), "{error}");
        assert!(matches!(filter.next_request(), Ok(None)));
        assert!(matches!(filter.next_request(), Ok(None)));
    }

    #[test]
    fn volume_filter_passes_its_volume_then_stays_at_the_end() {
        let mut filter = VolumeFilter::new(one_request_on(&["hm_0"]), "hm_0".to_string());
        let request = filter.next_request().unwrap().unwrap();
        assert_eq!((request.time_ns, request.offset_bytes), (5, 4096));
        assert!(matches!(filter.next_request(), Ok(None)));
        assert!(matches!(filter.next_request(), Ok(None)));
    }

    /// A reader that fails once, then ends (as the trait requires).
    struct FailsOnce {
        failed: bool,
        volumes: VolumeTable,
        path: PathBuf,
    }

    impl TraceReader for FailsOnce {
        fn next_request(&mut self) -> Result<Option<Request>> {
            if self.failed {
                return Ok(None);
            }
            self.failed = true;
            Err(TraceError::Read {
                path: self.path.clone(),
                offset: 7,
                source: std::io::Error::other("disk gone"),
            })
        }

        fn format(&self) -> Format {
            Format::Msr
        }

        fn volumes(&self) -> &VolumeTable {
            &self.volumes
        }

        fn path(&self) -> &Path {
            &self.path
        }
    }

    #[test]
    fn volume_filter_ends_after_an_error_of_its_reader() {
        let inner = FailsOnce {
            failed: false,
            volumes: VolumeTable::new(),
            path: PathBuf::from("failing"),
        };
        let mut filter = VolumeFilter::new(Box::new(inner), "hm_0".to_string());
        let error = filter.next_request().unwrap_err();
        assert!(error.to_string().contains("disk gone"), "{error}");
        assert!(matches!(filter.next_request(), Ok(None)));
    }
}
