//! NBD protocol (NetworkBlockDevice/nbd `doc/proto.md`): a fixed-newstyle
//! server over any [`export::Export`], and a pipelining client used by
//! `tierd replay` and tests.

pub mod export;

pub use export::{Export, ExportError, ExportResult, Extent};
