//! The admin socket: `data_dir/tierd-admin.sock` (mode 0600), one JSON
//! request per line, one JSON reply per line.
//!
//! | request | reply |
//! |---|---|
//! | `{"cmd":"status"}` | `{"volumes":[VolumeStatus, ...]}` |
//! | `{"cmd":"move","volume":"vol0","segment":3,"to":"mem"}` | `{"ok":true}` |
//! | `{"cmd":"fault","tier":"ssd","gone":true}` (drill) | `{"ok":true,"tier":...,"gone":...,"config":...,"counters":...}` |
//! | `{"cmd":"fault","tier":"ssd","config":{"read_error_probability":0.1}}` | the same |
//! | `{"cmd":"pin","volume":"vol0","segment":3,"tier":"mem","until_unix_ns":N}` | `{"ok":true,"moving":bool}` (journaled before the reply) |
//! | `{"cmd":"unpin","volume":"vol0","segment":3}` | `{"ok":true,"tier":"mem"}` (the tier it was pinned to) |
//! | `{"cmd":"cache","volume":"vol0","mode":"detach"}` | `{"ok":true,"cache":CacheStatus}` (journaled before the reply; a detach goes on in the background, `tierd status` shows the dirty bytes left) |
//! | anything else, malformed JSON, a line over 64 KiB | `{"error":"..."}` |
//!
//! A line over the limit also closes its connection (the rest of it cannot be
//! told from the next request). Nothing a client sends can stop the server.
//! Framing, parsing, checks and error texts are in
//! `tierd_engine::admin_proto` (pure, fuzzed by `fuzz/`'s `admin_request`
//! target); this file holds the socket and runs the requests.

use parking_lot::Mutex;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};
use tierd_engine::admin_proto::{
    error_reply, line_too_long_message, parse_request, read_request_line, AdminRequest,
    CacheRequest, FaultRequest, MoveRequest, PinRequest, RequestLine, UnpinRequest, VolumeShape,
};
use tierd_engine::engine::Engine;
use tierd_engine::volume::Volume;

/// Admin connections served at once; more get an error reply and are closed.
const MAX_CONNECTIONS: usize = 32;
/// An idle admin connection is closed after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `tierd status` / `tierd move` wait for a reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

struct Context {
    volumes: Vec<Arc<Volume>>,
    engine: Arc<Mutex<Engine>>,
    connections: AtomicUsize,
    stopping: AtomicBool,
}

/// The running admin listener.
pub struct AdminServer {
    path: PathBuf,
    identity: (u64, u64),
    context: Arc<Context>,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// Listens on `path` (replacing a stale socket there: the caller holds
    /// the data directory lock, so no other server uses it).
    pub fn start(
        path: &Path,
        volumes: Vec<Arc<Volume>>,
        engine: Arc<Mutex<Engine>>,
    ) -> io::Result<AdminServer> {
        tierd_nbd::io::remove_stale_socket(path)?;
        let listener = tierd_nbd::io::bind_unix_private(path, 16)?;
        let metadata = std::fs::symlink_metadata(path)?;
        let context = Arc::new(Context {
            volumes,
            engine,
            connections: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
        });
        let accept_context = context.clone();
        let thread = std::thread::Builder::new()
            .name("admin-accept".into())
            .spawn(move || accept_loop(listener, accept_context))?;
        Ok(AdminServer {
            path: path.to_path_buf(),
            identity: (metadata.dev(), metadata.ino()),
            context,
            thread: Some(thread),
        })
    }

    /// Stops accepting and removes the socket file (if it is still ours).
    /// Connections being served finish their current request on their own.
    pub fn stop(mut self) {
        self.stop_listener();
    }

    fn stop_listener(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.context.stopping.store(true, Ordering::SeqCst);
        // Wake the blocked accept; the loop sees `stopping` and ends.
        drop(UnixStream::connect(&self.path));
        let _ = thread.join();
        if let Ok(metadata) = std::fs::symlink_metadata(&self.path) {
            if (metadata.dev(), metadata.ino()) == self.identity {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop_listener();
    }
}

fn accept_loop(listener: UnixListener, context: Arc<Context>) {
    loop {
        let accepted = listener.accept();
        if context.stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(error = %error, "admin socket accept failed");
                // Do not spin on a persistent error (EMFILE).
                let clock = tierd_common::clock::SystemClock::new();
                tierd_common::clock::Clock::sleep_ns(&clock, 100_000_000);
                continue;
            }
        };
        if context.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            context.connections.fetch_sub(1, Ordering::SeqCst);
            let mut stream = stream;
            let _ = reply(
                &mut stream,
                &error_reply("too many admin connections; try again"),
            );
            continue;
        }
        let connection_context = context.clone();
        let spawned = std::thread::Builder::new()
            .name("admin-conn".into())
            .spawn(move || {
                serve_connection(stream, &connection_context);
                connection_context
                    .connections
                    .fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            context.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn reply(stream: &mut UnixStream, value: &Value) -> io::Result<()> {
    let mut line = value.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes())
}

fn serve_connection(stream: UnixStream, context: &Context) {
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IDLE_TIMEOUT));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        match read_request_line(&mut reader, &mut line) {
            Ok(RequestLine::End) | Err(_) => return,
            Ok(RequestLine::TooLong) => {
                let _ = reply(&mut writer, &error_reply(line_too_long_message()));
                return;
            }
            Ok(RequestLine::Line) => {}
        }
        let answer = handle_request(&line, context);
        if reply(&mut writer, &answer).is_err() {
            return;
        }
    }
}

/// Answers one request line: `admin_proto` parses and checks it, this runs
/// it.
fn handle_request(line: &[u8], context: &Context) -> Value {
    let volumes: Vec<VolumeShape> = context
        .volumes
        .iter()
        .map(|volume| VolumeShape {
            name: volume.name().to_string(),
            segment_count: volume.segment_count(),
            tier_names: volume.tier_names(),
        })
        .collect();
    let request = match parse_request(line, &volumes) {
        Ok(request) => request,
        Err(message) => return error_reply(message),
    };
    match request {
        AdminRequest::Status => {
            let volumes: Vec<Value> = context
                .volumes
                .iter()
                .map(|volume| serde_json::to_value(volume.status()).unwrap_or(Value::Null))
                .collect();
            json!({ "volumes": volumes })
        }
        AdminRequest::Move(request) => match queue_move(&request, context) {
            Ok(()) => json!({ "ok": true }),
            Err(message) => error_reply(message),
        },
        AdminRequest::Fault(request) => match set_fault(request, context) {
            Ok(reply) => reply,
            Err(message) => error_reply(message),
        },
        AdminRequest::Pin(request) => match pin(&request, context) {
            Ok(reply) => reply,
            Err(message) => error_reply(message),
        },
        AdminRequest::Unpin(request) => match unpin(&request, context) {
            Ok(reply) => reply,
            Err(message) => error_reply(message),
        },
        AdminRequest::Cache(request) => match set_cache_mode(&request, context) {
            Ok(reply) => reply,
            Err(message) => error_reply(message),
        },
    }
}

/// Switches a cache volume's mode or starts its detach (journaled first).
fn set_cache_mode(request: &CacheRequest, context: &Context) -> Result<Value, String> {
    let volume = served_volume(&request.volume, context)?;
    volume
        .set_cache_mode(&request.mode)
        .map_err(|error| error.to_string())?;
    tracing::info!(volume = %request.volume, mode = %request.mode, "operator cache mode");
    Ok(json!({ "ok": true, "cache": volume.cache_status() }))
}

fn served_volume<'a>(name: &str, context: &'a Context) -> Result<&'a Arc<Volume>, String> {
    context
        .volumes
        .iter()
        .find(|volume| volume.name() == name)
        .ok_or_else(|| format!("no volume {name:?}"))
}

/// Pins a segment (journaled before the reply) and wakes the copier when
/// that queued a move.
fn pin(request: &PinRequest, context: &Context) -> Result<Value, String> {
    let volume = served_volume(&request.volume, context)?;
    let tier = volume
        .tier_names()
        .iter()
        .position(|tier| *tier == request.tier)
        .ok_or_else(|| format!("volume {} has no tier {:?}", request.volume, request.tier))?;
    let moving = volume
        .pin(request.segment, tier as u8, request.until_unix_ns)
        .map_err(|error| error.to_string())?;
    let until = request.until_unix_ns.map_or_else(
        || "unpin".to_string(),
        tierd_common::units::format_rfc3339_utc,
    );
    tracing::info!(
        volume = %request.volume,
        segment = request.segment,
        tier = %request.tier,
        until = %until,
        move_queued = moving,
        "operator pin"
    );
    if moving {
        context.engine.lock().wake();
    }
    Ok(json!({ "ok": true, "moving": moving }))
}

fn unpin(request: &UnpinRequest, context: &Context) -> Result<Value, String> {
    let volume = served_volume(&request.volume, context)?;
    let pin = volume
        .unpin(request.segment)
        .map_err(|error| error.to_string())?;
    let tier = volume
        .tier_names()
        .get(pin.tier as usize)
        .cloned()
        .unwrap_or_default();
    tracing::info!(
        volume = %request.volume,
        segment = request.segment,
        tier = %tier,
        "operator unpin"
    );
    Ok(json!({ "ok": true, "tier": tier }))
}

/// Queues a checked move (the volume and its tier exist, the segment is in
/// range).
fn queue_move(request: &MoveRequest, context: &Context) -> Result<(), String> {
    let volume = served_volume(&request.volume, context)?;
    let tier = volume
        .tier_names()
        .iter()
        .position(|tier| *tier == request.to)
        .ok_or_else(|| format!("volume {} has no tier {:?}", request.volume, request.to))?;
    volume
        .request_move(request.segment, tier as u8, "requested with tierd move")
        .map_err(|error| error.to_string())?;
    tracing::info!(
        volume = %request.volume,
        segment = request.segment,
        to = %request.to,
        "operator move queued"
    );
    context.engine.lock().wake();
    Ok(())
}

/// The fault drill: marks a tier gone or back (every operation on it fails
/// with EIO while gone, and status lists the ranges whose only current copy
/// is on it) and/or replaces its injected-fault probabilities. Only tiers
/// configured with a `[tier.faults]` table have the fault wrapper; others
/// are refused (the wrapper is opt-in so production tiers pay nothing).
fn set_fault(request: FaultRequest, context: &Context) -> Result<Value, String> {
    let name = request.tier.as_str();
    let engine = context.engine.lock();
    let tier = engine
        .tiers
        .iter()
        .find(|tier| tier.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = engine.tiers.iter().map(|tier| tier.name.as_str()).collect();
            format!("no tier {name:?} (tiers: {known:?})")
        })?;
    let faults = tier.faults.as_ref().ok_or_else(|| {
        format!(
            "tier {name} has no fault wrapper: fault drills need a [tier.faults] table in its configuration (all probabilities default to 0, so an empty table injects nothing until a drill says so)"
        )
    })?;
    if let Some(config) = request.config {
        faults.set_config(config);
    }
    if let Some(gone) = request.gone {
        faults.set_gone(gone);
        for volume in &context.volumes {
            volume.set_tier_unavailable(name, gone);
        }
    }
    let state = json!({
        "ok": true,
        "tier": name,
        "gone": faults.is_gone(),
        "config": serde_json::to_value(faults.config()).unwrap_or(Value::Null),
        "counters": serde_json::to_value(faults.counters()).unwrap_or(Value::Null),
    });
    tracing::warn!(tier = %name, state = %state, "fault drill");
    Ok(state)
}

/// Why a request to the admin socket got no reply.
#[derive(Debug)]
pub enum RequestError {
    /// Nothing listens on the socket (no server for this data directory).
    NotRunning,
    /// The server answered with an error, or the exchange failed.
    Failed(String),
}

/// Sends one request and returns the reply (an `{"error": ...}` reply
/// becomes [`RequestError::Failed`]).
pub fn request(path: &Path, request: &Value) -> Result<Value, RequestError> {
    let mut stream = match UnixStream::connect(path) {
        Ok(stream) => stream,
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(RequestError::NotRunning)
        }
        Err(error) => {
            return Err(RequestError::Failed(format!(
                "{}: cannot connect to the admin socket: {error}",
                path.display()
            )))
        }
    };
    let failed = |error: io::Error| {
        RequestError::Failed(format!("{}: admin request failed: {error}", path.display()))
    };
    stream
        .set_read_timeout(Some(CLIENT_TIMEOUT))
        .map_err(failed)?;
    let mut line = request.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(failed)?;
    let mut answer = Vec::new();
    BufReader::new(&stream)
        .take(1 << 30)
        .read_until(b'\n', &mut answer)
        .map_err(failed)?;
    let reply: Value = serde_json::from_slice(&answer).map_err(|error| {
        RequestError::Failed(format!(
            "{}: the admin reply is not JSON ({error})",
            path.display()
        ))
    })?;
    if let Some(message) = reply.get("error") {
        let message = message
            .as_str()
            .map_or_else(|| message.to_string(), str::to_string);
        return Err(RequestError::Failed(message));
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_are_refused_with_a_hint() {
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
        let error = tierd_nbd::io::bind_unix_private(&long, 16).unwrap_err();
        assert!(error.to_string().contains("shorter data_dir"), "{error}");
    }
}
