//! The direction of a block request.
//!
//! It lives here, not in `tierd-trace`, so the device models and the live
//! engine can name a read or a write without linking the trace readers and
//! their four compression libraries (gzip, bzip2, xz, zstd). `tierd_trace::Op`
//! re-exports it.

/// Direction of a block request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Read,
    Write,
}

impl Op {
    pub fn is_write(self) -> bool {
        self == Op::Write
    }
}
