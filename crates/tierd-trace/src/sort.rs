//! PLACEHOLDER: external merge sort by time (being written, issue 2).

use std::path::Path;

use crate::error::Result;
use crate::format::Format;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Request, VolumeTable};

pub struct SortedReader {
    inner: Box<dyn TraceReader>,
}

impl SortedReader {
    pub fn new(inner: Box<dyn TraceReader>, _options: &OpenOptions) -> Result<Self> {
        Ok(Self { inner })
    }
}

impl TraceReader for SortedReader {
    fn next_request(&mut self) -> Result<Option<Request>> {
        self.inner.next_request()
    }
    fn format(&self) -> Format {
        self.inner.format()
    }
    fn volumes(&self) -> &VolumeTable {
        self.inner.volumes()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}
