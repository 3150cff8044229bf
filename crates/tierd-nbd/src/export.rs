//! What the server serves: an [`Export`] is one named volume.

/// An error the server reports to the client as an NBD errno.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportError {
    /// A Linux errno; the server maps it to the NBD error set (EPERM, EIO,
    /// ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN), anything else
    /// becomes EIO.
    pub errno: i32,
    /// Logged by the server, never sent to the client.
    pub message: String,
}

impl ExportError {
    pub fn new(errno: i32, message: impl Into<String>) -> Self {
        Self {
            errno,
            message: message.into(),
        }
    }
}

pub type ExportResult<T> = Result<T, ExportError>;

/// One extent of `base:allocation` block status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub length_bytes: u64,
    /// NBD_STATE_HOLE (bit 0) | NBD_STATE_ZERO (bit 1).
    pub flags: u32,
}

/// A volume served over NBD. The server has already checked that every
/// request lies within `size_bytes()` before calling these.
///
/// Obligations: thread-safe (several connections, multi-conn); `flush` makes
/// every write that completed on any connection durable; `fua` means the data
/// is durable when the call returns; never panics.
pub trait Export: Send + Sync {
    fn size_bytes(&self) -> u64;

    /// False for a read-only export (the server then refuses writes with EPERM).
    fn is_writable(&self) -> bool {
        true
    }

    /// True when the export behaves like a spinning disk (seeks cost), so
    /// clients may schedule for it: the server then sets
    /// `NBD_FLAG_ROTATIONAL`. The default is false.
    fn is_rotational(&self) -> bool {
        false
    }

    /// A human-readable description, sent as `NBD_INFO_DESCRIPTION` when a
    /// client asks for it. The default has none.
    fn description(&self) -> Option<String> {
        None
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()>;

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> ExportResult<()>;

    fn flush(&self) -> ExportResult<()>;

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> ExportResult<()>;

    /// `fast_only`: NBD_CMD_FLAG_FAST_ZERO — fail with ENOTSUP rather than
    /// write zeroes slowly. `may_trim`: the client did not set NO_HOLE.
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
        may_trim: bool,
        fast_only: bool,
    ) -> ExportResult<()>;

    /// `base:allocation` extents covering at least a prefix of the range.
    /// The default reports the whole range as allocated data.
    fn block_status(&self, _offset_bytes: u64, length_bytes: u64) -> ExportResult<Vec<Extent>> {
        Ok(vec![Extent {
            length_bytes,
            flags: 0,
        }])
    }
}
