//! `tierd serve`, `tierd status`, `tierd move`: the live engine behind an
//! NBD server, its admin socket and its metrics endpoint.
//!
//! - [`run`] loads the configuration (or the embedded default), locks the
//!   data directory, opens the engine (recovering placement and policy
//!   state), serves every volume over NBD on every `server.listen` target,
//!   starts the admin socket, the optional metrics endpoint and the engine's
//!   threads, prints where it listens, and waits for SIGINT/SIGTERM to stop
//!   cleanly.
//! - [`status`] and [`move_segment`] talk to a running server over the admin
//!   socket (`data_dir/tierd-admin.sock`); `status` falls back to reading the
//!   metadata files when no server answers.
//!
//! `docs/engine/serve.md` is the user-facing reference.

mod admin;
pub mod export;
mod metrics;
mod status;

use parking_lot::Mutex;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use tierd_common::clock::{Clock, SystemClock};
use tierd_engine::config::{Config, ListenTarget, EMBEDDED_DEFAULT};
use tierd_engine::device::stats::IoStats;
use tierd_engine::engine::Engine;
use tierd_engine::log::{Level, LineLayer};
use tierd_nbd::{Export, Server, ServerConfig, ServerHandle, TlsFiles, TlsMode, TlsServer};

use crate::CliError;

#[derive(Args)]
pub struct ServeArgs {
    /// TOML configuration (tiers, volumes, listen addresses, metadata dir).
    /// Without it: the embedded default, with its data in ./tierd-data.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Start although tier TIER's file is not what the volume's metadata
    /// says it was (another volume's, a restored backup, truncated,
    /// replaced): it is stamped as this tier, and the segments whose data
    /// that gives up (listed in the refusal and logged) read their home
    /// copy. Repeat for several tiers. Without it, such a start is refused.
    #[arg(long = "accept-reset", value_name = "TIER")]
    pub accept_reset: Vec<String>,
}

#[derive(Args)]
pub struct StatusArgs {
    /// The configuration the server runs with (finds its data directory).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print `{"server_running": bool, "volumes": [...]}` instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct MoveArgs {
    /// The configuration the server runs with (finds its admin socket).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Volume (export) name.
    #[arg(long)]
    pub volume: String,
    /// Segment number (offset / segment size).
    #[arg(long)]
    pub segment: u32,
    /// Target tier, by name (see `tierd status`).
    #[arg(long)]
    pub to: String,
}

#[derive(Args)]
pub struct PinArgs {
    /// The configuration the server runs with (finds its admin socket).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Volume (export) name.
    #[arg(long)]
    pub volume: String,
    /// Segment number (offset / segment size).
    #[arg(long)]
    pub segment: u32,
    /// The tier to keep the segment on, by name (the home tier keeps it down).
    #[arg(long)]
    pub tier: String,
    /// When the pin ends: an RFC 3339 time (`2026-11-25T18:00:00Z`) or a
    /// duration from now (`2h`, `30m`). Without it: until `tierd unpin`.
    #[arg(long)]
    pub until: Option<String>,
}

#[derive(Args)]
pub struct CacheArgs {
    /// The configuration the server runs with (finds its admin socket).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Volume (export) name of a cache volume.
    #[arg(long)]
    pub volume: String,
    /// `writeback`, `writethrough`, `writearound`, or `detach` (write every
    /// dirty block back, then serve from home alone; persists until
    /// switched back or the configured mode changes).
    #[arg(long)]
    pub mode: String,
}

#[derive(Args)]
pub struct UnpinArgs {
    /// The configuration the server runs with (finds its admin socket).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Volume (export) name.
    #[arg(long)]
    pub volume: String,
    /// Segment number (offset / segment size).
    #[arg(long)]
    pub segment: u32,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("state").required(true).args(["gone", "back"])))]
pub struct FaultArgs {
    /// The configuration the server runs with (finds its admin socket).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The tier to drill (it needs a `[tier.faults]` table in the config).
    #[arg(long)]
    pub tier: String,
    /// Every operation on the tier fails with EIO, as if the device died.
    #[arg(long)]
    pub gone: bool,
    /// The tier works again.
    #[arg(long)]
    pub back: bool,
}

/// Loads `path`, or the embedded default resolved against the working
/// directory when there is none.
fn load_config(path: Option<&Path>) -> Result<Config, CliError> {
    let current_dir = std::env::current_dir()
        .map_err(|error| CliError(format!("cannot read the working directory: {error}")))?;
    match path {
        Some(path) => {
            // Absolute, so relative paths inside resolve to absolute paths
            // and the printed socket paths work from anywhere.
            let path = if path.is_relative() {
                current_dir.join(path)
            } else {
                path.to_path_buf()
            };
            Ok(Config::load(&path)?)
        }
        None => Ok(Config::parse(
            EMBEDDED_DEFAULT,
            "<embedded default>",
            &current_dir,
        )?),
    }
}

/// The admin socket of the server that uses `config`.
fn admin_socket_path(config: &Config) -> PathBuf {
    config.data_dir.join("tierd-admin.sock")
}

/// The lock file that keeps two servers off one data directory.
fn lock_file_path(config: &Config) -> PathBuf {
    config.data_dir.join("tierd.lock")
}

/// An exclusive `flock` on `data_dir/tierd.lock`, held while the file is open
/// (the kernel drops it when the process ends, even on `kill -9`).
struct DataDirLock {
    _file: File,
}

fn lock_data_dir(config: &Config) -> Result<DataDirLock, CliError> {
    let path = lock_file_path(config);
    match tierd_engine::pidlock::lock(&path) {
        Ok(file) => Ok(DataDirLock { _file: file }),
        Err(tierd_engine::pidlock::PidLockError::Held { pid }) => {
            let who = pid.map_or_else(
                || "another tierd".to_string(),
                |pid| format!("another tierd (pid {pid})"),
            );
            Err(CliError(format!(
                "{who} already serves {} (it holds the lock on {}); stop it first, or give this server its own data_dir",
                config.data_dir.display(),
                path.display()
            )))
        }
        Err(tierd_engine::pidlock::PidLockError::Io(message)) => Err(CliError(message)),
    }
}

/// A client hanging up must not kill the server: `main` restores SIGPIPE's
/// default action for CLI pipes, so serve ignores it again (writes then fail
/// with EPIPE, which ends only that connection).
fn ignore_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_IGN has no precondition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it
/// starts later, so [`wait_for_signal`] receives them synchronously.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialised by sigemptyset; the mask
    // change applies to the calling thread, before any other thread exists.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for SIGINT, SIGTERM or SIGHUP; returns its name.
fn wait_for_signal(set: &libc::sigset_t) -> &'static str {
    loop {
        let mut signal: libc::c_int = 0;
        // SAFETY: `set` is an initialised sigset_t; `signal` is a valid out pointer.
        let result = unsafe { libc::sigwait(set, &mut signal) };
        if result == 0 {
            return match signal {
                libc::SIGINT => "SIGINT",
                libc::SIGTERM => "SIGTERM",
                libc::SIGHUP => "SIGHUP",
                _ => continue,
            };
        }
    }
}

/// Tells systemd (`Type=notify`) what the server is doing; nothing without
/// systemd (no `NOTIFY_SOCKET`).
fn notify_systemd(state: &[sd_notify::NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(error) = sd_notify::notify(false, state) {
        tracing::warn!(%error, "cannot notify systemd (NOTIFY_SOCKET)");
    }
}

/// SIGHUP (`systemctl reload tierd`): re-reads the config file and applies
/// what can change while serving — `log.level`, and the TLS certificate,
/// key and client CA (read again from their files, renewed or not, for new
/// connections) — and names every other changed setting as needing a
/// restart. A config that does not load is reported and the running
/// settings are kept.
fn reload(
    path: Option<&Path>,
    running: &Config,
    level: &tierd_engine::log::LevelHandle,
    tls: Option<&TlsServer>,
) {
    let Some(path) = path else {
        tracing::info!("reload: serving the embedded default config; nothing to re-read");
        return;
    };
    let new = match load_config(Some(path)) {
        Ok(config) => config,
        Err(CliError(message)) => {
            tracing::error!(
                config = %path.display(),
                error = %message,
                "reload: the config does not load; the running settings stay"
            );
            return;
        }
    };
    // Against the level in force (an earlier reload may have changed it).
    match Level::parse(&new.log.level) {
        Some(parsed) if parsed != level.get() => {
            let from = level.get();
            level.set(parsed);
            tracing::info!(from = from.name(), to = %new.log.level, "reload: log.level changed");
        }
        Some(_) => {}
        None => tracing::error!(
            level = %new.log.level,
            "reload: log.level must be error, warn, info or debug; kept"
        ),
    }
    // TLS: the same mode, on before and now: the files are read again.
    let mut tls_restart = false;
    match (tls, &running.server.tls, &new.server.tls) {
        (Some(server), Some(old), Some(now)) if old.mode == now.mode => {
            let files = TlsFiles {
                certificate: now.certificate.clone(),
                key: now.key.clone(),
                client_ca: now.client_ca.clone(),
            };
            match server.reload(&files) {
                Ok(()) => tracing::info!(
                    certificate = %now.certificate.display(),
                    "reload: TLS certificate and key loaded again; new connections use them"
                ),
                Err(error) => tracing::error!(
                    error = %error,
                    "reload: server.tls does not load; connections keep the running certificate"
                ),
            }
        }
        (_, None, None) => {}
        _ => tls_restart = true,
    }
    let without_tls = |config: &Config| {
        let mut server = config.server.clone();
        server.tls = None;
        format!("{server:?}")
    };
    let sections: [(&str, String, String); 8] = [
        (
            "server.tls (on/off or mode)",
            String::new(),
            if tls_restart {
                "changed".to_string()
            } else {
                String::new()
            },
        ),
        (
            "data_dir",
            format!("{:?}", running.data_dir),
            format!("{:?}", new.data_dir),
        ),
        (
            "metadata_dir",
            format!("{:?}", running.metadata_dir),
            format!("{:?}", new.metadata_dir),
        ),
        (
            "[server] (listen, limits)",
            without_tls(running),
            without_tls(&new),
        ),
        (
            "[metrics]",
            format!("{:?}", running.metrics),
            format!("{:?}", new.metrics),
        ),
        (
            "log.format",
            running.log.format.clone(),
            new.log.format.clone(),
        ),
        (
            "[[tier]]",
            format!("{:?}", running.tiers),
            format!("{:?}", new.tiers),
        ),
        (
            "[[volume]]",
            format!("{:?}", running.volumes),
            format!("{:?}", new.volumes),
        ),
    ];
    let changed: Vec<&str> = sections
        .iter()
        .filter(|(_, old, new)| old != new)
        .map(|(name, _, _)| *name)
        .collect();
    if changed.is_empty() {
        tracing::info!("reload: done");
    } else {
        tracing::warn!(
            changed = %changed.join(", "),
            "reload: these settings changed and take effect only after a restart (systemctl restart tierd); \
             the server keeps running with the old ones"
        );
    }
}

/// Threads per NBD connection, at most: the configured number, else the
/// server's default (128). Threads start only as requests need them: fast
/// tiers (memory, page cache) keep one per connection, slow ones (emulated
/// models, O_DIRECT files) get one per request in flight, so a device model
/// sees the client's whole queue (`docs/engine/nbd.md`, "Concurrency
/// model").
fn workers_per_connection(config: &Config) -> usize {
    config
        .server
        .workers_per_connection
        .unwrap_or(tierd_nbd::server::DEFAULT_WORKERS_PER_CONNECTION)
}

/// Prints one line to stdout and flushes it (the line is how scripts and
/// tests learn the socket path). A closed stdout is not an error.
fn announce(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// `tierd serve`.
pub fn run(args: ServeArgs) -> Result<(), CliError> {
    ignore_sigpipe();
    let stop_signals = block_stop_signals();
    let config = load_config(args.config.as_deref())?;
    std::fs::create_dir_all(&config.data_dir).map_err(|error| {
        CliError(format!(
            "data_dir {}: cannot create it: {error}",
            config.data_dir.display()
        ))
    })?;
    let _lock = lock_data_dir(&config)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let level = Level::parse(&config.log.level).unwrap_or(Level::Info);
    // One log path for the whole process: the engine's, the NBD server's
    // and this command's events all become lines of this layer.
    let layer = LineLayer::stderr(level, config.log.format == "json", clock.clone());
    let level = layer.level_handle();
    tierd_engine::log::install(layer);

    // Before the engine opens: a TLS mistake should not cost a recovery.
    let tls = load_tls(&config)?;
    let engine = Engine::open_accepting(&config, clock.clone(), &args.accept_reset)?;
    let volumes = engine.volumes.clone();
    let requests: Vec<(String, Arc<IoStats>)> = volumes
        .iter()
        .map(|volume| {
            (
                volume.name().to_string(),
                Arc::new(IoStats::new(clock.clone())),
            )
        })
        .collect();
    let exports: Vec<(String, Arc<dyn Export>)> = volumes
        .iter()
        .zip(&requests)
        .map(|(volume, (_, stats))| {
            let rotational = export::home_is_rotational(&config, volume.name());
            let export: Arc<dyn Export> = Arc::new(export::VolumeExport::new(
                volume.clone(),
                rotational,
                stats.clone(),
            ));
            (volume.name().to_string(), export)
        })
        .collect();
    let server_config = ServerConfig {
        allow_list: config.server.allow_list,
        workers_per_connection: workers_per_connection(&config),
        max_connections: config.server.max_connections,
        max_unnegotiated_connections: config.server.max_unnegotiated_connections,
        handshake_timeout_ms: config.server.handshake_timeout.0 / 1_000_000,
        max_in_flight_bytes_per_connection: config.server.max_in_flight_bytes_per_connection.0,
        max_in_flight_bytes: config.server.max_in_flight_bytes.0,
        shutdown_grace_ms: config.server.shutdown_grace.0 / 1_000_000,
        clock: clock.clone(),
        tls: tls.clone(),
        logger: tierd_nbd::tracing_logger(),
        ..ServerConfig::default()
    };
    let server = Server::new(exports, server_config)?;
    let mut listeners: Vec<ServerHandle> = Vec::new();
    for target in config.listen_targets() {
        let handle = match &target {
            ListenTarget::Unix(path) => server.serve_unix(path)?,
            ListenTarget::Tcp(address) => server.serve_tcp(address.as_str())?,
        };
        listeners.push(handle);
    }
    let admin_path = admin_socket_path(&config);
    let engine = Arc::new(Mutex::new(engine));
    let admin = admin::AdminServer::start(&admin_path, volumes.clone(), engine.clone())
        .map_err(|error| CliError(format!("{}: cannot listen: {error}", admin_path.display())))?;
    let metrics = match &config.metrics.listen {
        Some(address) => Some(
            metrics::MetricsServer::start(address, volumes.clone(), requests, server.clone())
                .map_err(|error| CliError(format!("metrics.listen = {address:?}: {error}")))?,
        ),
        None => None,
    };
    // Last: everything that can fail to start has started, so a failed
    // start never leaves policy or copier threads running.
    engine.lock().start(&config, clock.clone());

    for listener in &listeners {
        announce(&format!(
            "tierd: listening on {}",
            listen_text(listener.address())
        ));
    }
    for volume in &volumes {
        for listener in &listeners {
            announce(&format!(
                "tierd: volume {} at {}",
                volume.name(),
                volume_uri(listener.address(), volume.name(), tls.as_ref())
            ));
        }
    }
    announce(&format!("tierd: admin socket {}", admin_path.display()));
    if let Some(metrics) = &metrics {
        announce(&format!(
            "tierd: metrics at http://{}/metrics",
            metrics.address()
        ));
    }
    tracing::info!(
        data_dir = %config.data_dir.display(),
        pid = std::process::id(),
        "serving"
    );

    notify_systemd(&[sd_notify::NotifyState::Ready]);
    let signal = loop {
        match wait_for_signal(&stop_signals) {
            "SIGHUP" => {
                notify_systemd(&[sd_notify::NotifyState::Reloading]);
                reload(args.config.as_deref(), &config, &level, tls.as_ref());
                notify_systemd(&[sd_notify::NotifyState::Ready]);
            }
            stop => break stop,
        }
    };
    notify_systemd(&[sd_notify::NotifyState::Stopping]);
    tracing::info!(signal, "stopping");
    admin.stop();
    if let Some(metrics) = metrics {
        metrics.stop();
    }
    // Stop accepting and let in-flight requests finish before the engine
    // flushes and checkpoints. Every listener at once, so the stop takes
    // one shutdown_grace, not one per listener.
    std::thread::scope(|scope| {
        for listener in listeners {
            let stopping = std::thread::Builder::new()
                .name("nbd-stop".into())
                .spawn_scoped(scope, move || listener.shutdown());
            if let Err(error) = stopping {
                // The listener came back with the error: stop it here.
                tracing::warn!(
                    error = %error,
                    "cannot start a thread to stop a listener; stopping it in turn"
                );
            }
        }
    });
    let mut engine = engine.lock();
    engine
        .shutdown()
        .map_err(|error| CliError(format!("clean stop failed: {error}")))?;
    tracing::info!("stopped");
    Ok(())
}

/// The NBD URI of a volume; `nbds` when TLS is required.
fn volume_uri(address: &tierd_nbd::ListenAddress, name: &str, tls: Option<&TlsServer>) -> String {
    let uri = address.uri(name);
    match (tls, uri.strip_prefix("nbd")) {
        (Some(tls), Some(rest)) if tls.mode == TlsMode::Require => format!("nbds{rest}"),
        _ => uri,
    }
}

/// Loads `[server.tls]`, if any. Errors name the key and the file; a
/// private key others can read is logged as a warning.
fn load_tls(config: &Config) -> Result<Option<TlsServer>, CliError> {
    let Some(tls) = &config.server.tls else {
        return Ok(None);
    };
    let mode = if tls.mode == "optional" {
        TlsMode::Optional
    } else {
        TlsMode::Require
    };
    let files = TlsFiles {
        certificate: tls.certificate.clone(),
        key: tls.key.clone(),
        client_ca: tls.client_ca.clone(),
    };
    let server =
        TlsServer::load(&files, mode).map_err(|error| CliError(format!("server.tls: {error}")))?;
    if let Ok(metadata) = std::fs::metadata(&tls.key) {
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %tls.key.display(),
                "the TLS private key is readable by other users; chmod 600 it"
            );
        }
    }
    tracing::info!(
        mode = mode.as_str(),
        client_certificates = if server.verifies_clients {
            "required"
        } else {
            "not checked"
        },
        "TLS enabled"
    );
    Ok(Some(server))
}

fn listen_text(address: &tierd_nbd::ListenAddress) -> String {
    match address {
        tierd_nbd::ListenAddress::Unix(path) => format!("unix:{}", path.display()),
        tierd_nbd::ListenAddress::Tcp(address) => format!("tcp:{address}"),
    }
}

/// `tierd status`.
pub fn status(args: StatusArgs) -> Result<(), CliError> {
    let config = load_config(args.config.as_deref())?;
    let admin_path = admin_socket_path(&config);
    let (server_running, volumes) =
        match admin::request(&admin_path, &serde_json::json!({"cmd": "status"})) {
            Ok(reply) => (true, reply.get("volumes").cloned().unwrap_or_default()),
            Err(admin::RequestError::NotRunning) => {
                if !config.data_dir.exists() {
                    return Err(CliError(status::nothing_there(
                        &config.data_dir,
                        args.config.as_deref(),
                    )));
                }
                let volumes = status::offline_status(&config)?;
                (false, serde_json::to_value(volumes)?)
            }
            Err(admin::RequestError::Failed(message)) => return Err(CliError(message)),
        };
    let report = serde_json::json!({
        "server_running": server_running,
        "volumes": volumes,
    });
    let mut stdout = std::io::stdout().lock();
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&report)?)
    } else {
        status::render_text(&report)
    };
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())?;
    Ok(())
}

/// `tierd fault`: the fault drill on a running server.
pub fn fault(args: FaultArgs) -> Result<(), CliError> {
    let config = load_config(args.config.as_deref())?;
    let admin_path = admin_socket_path(&config);
    let request = serde_json::json!({"cmd": "fault", "tier": args.tier, "gone": args.gone});
    match admin::request(&admin_path, &request) {
        Ok(_) => {
            println!(
                "tierd: tier {} is {}",
                args.tier,
                if args.gone {
                    "gone (every operation fails with EIO; see `tierd status` for unavailable ranges)"
                } else {
                    "back"
                }
            );
            Ok(())
        }
        Err(admin::RequestError::NotRunning) => Err(CliError(format!(
            "no tierd server answers on {}",
            admin_path.display()
        ))),
        Err(admin::RequestError::Failed(message)) => Err(CliError(message)),
    }
}

/// `tierd move`.
pub fn move_segment(args: MoveArgs) -> Result<(), CliError> {
    let config = load_config(args.config.as_deref())?;
    let admin_path = admin_socket_path(&config);
    let request = serde_json::json!({
        "cmd": "move",
        "volume": args.volume,
        "segment": args.segment,
        "to": args.to,
    });
    match admin::request(&admin_path, &request) {
        Ok(_) => {
            println!(
                "tierd: queued the move of segment {} of volume {} to tier {}",
                args.segment, args.volume, args.to
            );
            Ok(())
        }
        Err(admin::RequestError::NotRunning) => Err(CliError(format!(
            "no tierd server answers on {}: moves happen in a running server; start it with `tierd serve{}`",
            admin_path.display(),
            args.config
                .as_ref()
                .map(|path| format!(" --config {}", path.display()))
                .unwrap_or_default()
        ))),
        Err(admin::RequestError::Failed(message)) => Err(CliError(message)),
    }
}

/// `--until`: an RFC 3339 time, or a duration from `now_unix_ns`.
fn parse_until(text: &str, now_unix_ns: u64) -> Result<u64, CliError> {
    if let Ok(at) = tierd_common::units::parse_rfc3339_unix_ns(text) {
        return Ok(at);
    }
    match tierd_common::units::parse_duration_ns(text) {
        Ok(duration) if duration > 0 => Ok(now_unix_ns.saturating_add(duration)),
        _ => Err(CliError(format!(
            "--until {text:?}: give an RFC 3339 time (2026-11-25T18:00:00Z, 2026-11-25T19:00:00+01:00) or a duration from now (90s, 30m, 2h, 1d)"
        ))),
    }
}

/// Sends one operator request (pin, unpin) to the running server.
fn operator_request(
    config_arg: Option<&Path>,
    request: &serde_json::Value,
    what: &str,
) -> Result<serde_json::Value, CliError> {
    let config = load_config(config_arg)?;
    let admin_path = admin_socket_path(&config);
    match admin::request(&admin_path, request) {
        Ok(reply) => Ok(reply),
        Err(admin::RequestError::NotRunning) => Err(CliError(format!(
            "no tierd server answers on {}: {what} in a running server; start it with `tierd serve{}`",
            admin_path.display(),
            config_arg
                .map(|path| format!(" --config {}", path.display()))
                .unwrap_or_default()
        ))),
        Err(admin::RequestError::Failed(message)) => Err(CliError(message)),
    }
}

/// `tierd pin`.
pub fn pin(args: PinArgs) -> Result<(), CliError> {
    let until_unix_ns = args
        .until
        .as_deref()
        .map(|text| parse_until(text, SystemClock::new().unix_now_ns()))
        .transpose()?;
    let mut request = serde_json::json!({
        "cmd": "pin",
        "volume": args.volume,
        "segment": args.segment,
        "tier": args.tier,
    });
    if let Some(until) = until_unix_ns {
        request["until_unix_ns"] = serde_json::json!(until);
    }
    let reply = operator_request(args.config.as_deref(), &request, "pins are set")?;
    let until = until_unix_ns.map_or_else(
        || "until tierd unpin".to_string(),
        |until| format!("until {}", tierd_common::units::format_rfc3339_utc(until)),
    );
    let moving = if reply.get("moving").and_then(serde_json::Value::as_bool) == Some(true) {
        "; its move there is queued"
    } else {
        ""
    };
    println!(
        "tierd: pinned segment {} of volume {} to tier {} ({until}){moving}",
        args.segment, args.volume, args.tier
    );
    Ok(())
}

/// `tierd unpin`.
pub fn unpin(args: UnpinArgs) -> Result<(), CliError> {
    let request = serde_json::json!({
        "cmd": "unpin",
        "volume": args.volume,
        "segment": args.segment,
    });
    let reply = operator_request(args.config.as_deref(), &request, "pins are ended")?;
    println!(
        "tierd: unpinned segment {} of volume {} (it was pinned to tier {}); policies may move it again",
        args.segment,
        args.volume,
        reply.get("tier").and_then(serde_json::Value::as_str).unwrap_or("?")
    );
    Ok(())
}

/// `tierd cache`.
pub fn cache(args: CacheArgs) -> Result<(), CliError> {
    let request = serde_json::json!({
        "cmd": "cache",
        "volume": args.volume,
        "mode": args.mode,
    });
    let reply = operator_request(args.config.as_deref(), &request, "cache modes are switched")?;
    let cache = reply.get("cache").cloned().unwrap_or_default();
    let dirty = cache
        .get("dirty_bytes")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let mode = cache
        .get("mode")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("?");
    println!(
        "tierd: cache of volume {} is {mode}; {dirty} dirty bytes to write back (progress: tierd status)",
        args.volume
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_takes_a_time_or_a_duration_from_now() {
        let now = 1_795_615_200_000_000_000;
        assert_eq!(parse_until("2h", now).unwrap(), now + 7_200_000_000_000);
        assert_eq!(parse_until("2026-11-25T15:00:00+01:00", 0).unwrap(), now);
        for bad in ["0s", "tomorrow", "2026-11-25"] {
            let error = parse_until(bad, now).unwrap_err().0;
            assert!(error.contains("RFC 3339"), "{error}");
        }
    }

    /// One default whatever the tiers (threads start as requests need
    /// them, so fast tiers still use one); a configured number wins.
    #[test]
    fn workers_per_connection_has_one_default_and_a_configured_number_wins() {
        let config = |model: &str, server: &str| {
            let text = format!(
                "data_dir = \"data\"\n[server]\n{server}\n\
                 [[tier]]\nname = \"disk\"\nbackend = \"file\"\npath = \"disk.img\"\nsize = \"64MiB\"\n{model}\n\
                 [[volume]]\nname = \"vol0\"\nsize = \"64MiB\"\nsegment = \"16MiB\"\ntiers = [\"disk\"]\n"
            );
            Config::parse(&text, "test.toml", std::path::Path::new("/tmp")).unwrap()
        };
        assert_eq!(
            workers_per_connection(&config("model = \"savvio10k4\"", "")),
            128
        );
        assert_eq!(workers_per_connection(&config("", "")), 128);
        assert_eq!(workers_per_connection(&config("direct = true", "")), 128);
        assert_eq!(
            workers_per_connection(&config(
                "model = \"savvio10k4\"",
                "workers_per_connection = 16"
            )),
            16
        );
        assert_eq!(
            workers_per_connection(&config("", "workers_per_connection = 0")),
            0
        );
    }
}
