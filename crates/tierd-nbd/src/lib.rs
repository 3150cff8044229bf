//! NBD protocol (NetworkBlockDevice/nbd `doc/proto.md`): a fixed-newstyle
//! server over any [`export::Export`], and a pipelining client used by
//! `tierd replay` and tests.
//!
//! - [`server::Server`] serves named exports on Unix sockets and TCP.
//! - [`client::Client`] connects with `NBD_OPT_GO`, pipelines requests and
//!   can be split into a sender and a receiver half.
//! - [`proto`] holds the wire constants and the pure parsers (fuzzable).
//!
//! `docs/engine/nbd.md` lists what is supported and how to connect.

pub mod client;
pub mod export;
pub mod io;
pub mod memory;
pub mod proto;
pub mod server;
pub mod tls;

pub use client::{parse_nbd_uri, Client, ClientError, ConnectOptions, NbdTarget, NbdUri};
pub use export::{Export, ExportError, ExportResult, Extent};
pub use memory::MemoryExport;
pub use server::{
    stderr_logger, tracing_logger, ListenAddress, LogLevel, Logger, Server, ServerConfig,
    ServerError, ServerHandle, ServerStats,
};
pub use tls::{ClientTls, TlsError, TlsFiles, TlsMode, TlsServer};
