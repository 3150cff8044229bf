//! One connection's thread: the handshake, then transmission, and how the
//! connection ends (logging, counters, TLS close).

use std::io;
use std::net::Shutdown;
use std::sync::atomic::Ordering;

use super::negotiate::{negotiate, tls_active};
use super::transmit::transmit;
use super::{ListenerState, LogLevel, Phase, Shared, INPUT_BUFFER_BYTES};
use crate::io::{InputBuffer, Stream};
use crate::proto::ProtocolError;

/// Why a connection ended early.
pub(super) enum ConnectionEnd {
    /// The client broke the protocol; logged as a warning.
    Protocol(String),
    /// The socket failed (client vanished); logged at debug level.
    Io(io::Error),
}

impl From<io::Error> for ConnectionEnd {
    fn from(error: io::Error) -> Self {
        ConnectionEnd::Io(error)
    }
}

pub(super) fn run_connection(shared: &Shared, state: &ListenerState, stream: Stream, id: u64) {
    let _span = tracing::info_span!("connection", conn = id).entered();
    serve_connection(shared, state, stream, id);
}

fn serve_connection(shared: &Shared, state: &ListenerState, mut stream: Stream, id: u64) {
    shared.log(LogLevel::Debug, &format!("connection {id}: accepted"));
    let mut input = InputBuffer::with_capacity(INPUT_BUFFER_BYTES);
    let negotiated = negotiate(shared, &mut input, &mut stream, id);
    let session = match negotiated {
        Ok(Some(session)) => session,
        Ok(None) => {
            shared
                .counters
                .handshakes_failed
                .fetch_add(1, Ordering::Relaxed);
            shared.log(
                LogLevel::Debug,
                &format!("connection {id}: closed during the handshake"),
            );
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        Err(end) => {
            shared
                .counters
                .handshakes_failed
                .fetch_add(1, Ordering::Relaxed);
            let end = tls_failure(shared, id, &stream, end);
            report_end(shared, id, "handshake", end);
            end_tls(&mut stream);
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    };
    {
        let mut table = state.lock();
        match table.open.get_mut(&id) {
            Some(connection) if connection.phase == Phase::Handshake => {
                connection.phase = Phase::Transmission;
                table.handshaking -= 1;
            }
            _ => {
                // Timed out or evicted just as the handshake finished.
                drop(table);
                shared
                    .counters
                    .handshakes_failed
                    .fetch_add(1, Ordering::Relaxed);
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        }
    }
    shared.log(
        LogLevel::Debug,
        &format!(
            "connection {id}: serving export {:?} (structured replies: {}, TLS: {})",
            shared.exports[session.export_index].name,
            session.structured,
            tls_active(&stream)
        ),
    );
    // The connection's threads share a TLS session from here on.
    let mut stream = match stream.share_tls() {
        Ok(stream) => stream,
        Err(error) => {
            report_end(shared, id, "transmission", ConnectionEnd::Io(error));
            return;
        }
    };
    let ledger = shared.register_connection();
    let result = transmit(
        shared,
        &session,
        &ledger,
        &mut input,
        &mut stream,
        &state.stopping,
        id,
    );
    shared.retire_connection(&ledger);
    match result {
        Ok(()) => shared.log(LogLevel::Debug, &format!("connection {id}: closed")),
        Err(end) => {
            let end = tls_failure(shared, id, &stream, end);
            report_end(shared, id, "transmission", end)
        }
    }
    end_tls(&mut stream);
    let _ = stream.shutdown(Shutdown::Both);
}

/// A TLS failure on an in-thread session (bad certificate, bad record) is
/// logged as a warning, like the relay does; other ends pass through.
fn tls_failure(shared: &Shared, id: u64, stream: &Stream, end: ConnectionEnd) -> ConnectionEnd {
    match end {
        ConnectionEnd::Io(error)
            if tls_active(stream) && error.kind() == io::ErrorKind::InvalidData =>
        {
            shared.log(
                LogLevel::Warn,
                &format!("connection {id}: TLS ended: {error}"),
            );
            ConnectionEnd::Io(error)
        }
        other => other,
    }
}

/// Sends close_notify on a TLS session (best effort).
fn end_tls(stream: &mut Stream) {
    match stream {
        Stream::ServerTls(tls) => {
            tls.conn.send_close_notify();
            let _ = tls.conn.write_tls(&mut tls.sock);
        }
        Stream::SharedTls(tls) => tls.close_notify(),
        _ => {}
    }
}

fn report_end(shared: &Shared, id: u64, phase: &str, end: ConnectionEnd) {
    match end {
        ConnectionEnd::Protocol(message) => {
            shared
                .counters
                .protocol_errors
                .fetch_add(1, Ordering::Relaxed);
            shared.log(
                LogLevel::Warn,
                &format!("connection {id}: closed in {phase}: {message}"),
            );
        }
        ConnectionEnd::Io(error) => shared.log(
            LogLevel::Debug,
            &format!("connection {id}: socket ended in {phase}: {error}"),
        ),
    }
}

pub(super) fn protocol(error: ProtocolError) -> ConnectionEnd {
    ConnectionEnd::Protocol(error.to_string())
}
