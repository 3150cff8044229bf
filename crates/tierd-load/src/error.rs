//! What can stop a replay, each message naming the file, request, target or
//! setting at fault and what to do.

use tierd_nbd::ClientError;
use tierd_trace::TraceError;

/// Errors of the load generator.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The trace cannot be opened or a record is malformed: the message
    /// names the file and line or byte offset.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A setting out of range: the message names it (`speed`,
    /// `max_inflight`, `connections`, `window`).
    #[error("{0}")]
    Setting(String),
    /// The target is not an NBD URI this client understands.
    #[error(transparent)]
    Uri(ClientError),
    /// The trace cannot be replayed as it is (several volumes, a request
    /// longer than NBD carries, nothing to replay, requests past the
    /// export): the message names the file and the request.
    #[error("{0}")]
    Refused(String),
    /// Connecting to the target or the export it offers (the message names
    /// the target and the connection).
    #[error("{0}")]
    Target(String),
    /// Writing the report: names the file.
    #[error("{0}")]
    Report(String),
}
