//! The systemd units in packaging/systemd verify with `systemd-analyze`,
//! and `tierd serve` speaks the notify protocol they rely on: READY=1 once
//! it serves, RELOADING=1 / READY=1 around a SIGHUP reload (log.level
//! applied, other changes named as needing a restart, a broken config
//! kept out), STOPPING=1 on SIGTERM.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tierd_common::clock::{Clock, SystemClock};

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// `systemd-analyze verify` of `text` saved as `name` (ExecStart pointed at
/// the built binary: verify checks that the program exists); its output.
fn verify(dir: &Path, name: &str, text: &str) -> (bool, String) {
    let path = dir.join(name);
    std::fs::write(
        &path,
        text.replace("/usr/bin/tierd", env!("CARGO_BIN_EXE_tierd")),
    )
    .unwrap();
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn have_systemd_analyze() -> bool {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        found || std::env::var_os("CI").is_none(),
        "systemd-analyze is not installed, and CI must run this check"
    );
    found
}

#[test]
fn the_units_verify_cleanly() {
    if !have_systemd_analyze() {
        eprintln!("skipping: systemd-analyze is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The checker sees mistakes: an unknown key is reported.
    let (_, bogus) = verify(
        dir.path(),
        "bogus.service",
        "[Service]\nType=notify\nExecStart=/usr/bin/tierd serve\nBogusKey=1\n",
    );
    assert!(
        bogus.contains("BogusKey"),
        "systemd-analyze missed a bad key: {bogus}"
    );
    for (file, name) in [
        ("packaging/systemd/tierd.service", "tierd.service"),
        ("packaging/systemd/tierd@.service", "tierd@fast.service"),
    ] {
        let text = std::fs::read_to_string(repo_file(file)).unwrap();
        for line in [
            "Type=notify",
            "ExecReload=/bin/kill -HUP $MAINPID",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
        ] {
            assert!(text.contains(line), "{file} lacks {line}");
        }
        // The stop timeout covers the server's default shutdown grace (5 s)
        // plus a flush and checkpoint.
        let stop_s: u64 = text
            .lines()
            .find_map(|line| line.strip_prefix("TimeoutStopSec="))
            .expect("TimeoutStopSec")
            .parse()
            .unwrap();
        assert!(stop_s >= 30, "{file}: TimeoutStopSec={stop_s}");
        let (ok, output) = verify(dir.path(), name, &text);
        assert!(
            ok && output.trim().is_empty(),
            "{file} does not verify:\n{output}"
        );
    }
}

/// Receives one notify datagram (waits at most a minute).
fn receive(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let length = socket
        .recv(&mut buf)
        .expect("a notify message within the deadline");
    String::from_utf8_lossy(&buf[..length]).into_owned()
}

fn wait_for_stderr(path: &Path, needle: &str) -> String {
    let clock = SystemClock::new();
    let deadline = clock.now_ns() + 60_000_000_000;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            clock.now_ns() < deadline,
            "no {needle:?} in the log:\n{text}"
        );
        clock.sleep_ns(50_000_000);
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on a child process id we started; no memory involved.
    let result = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(result, 0, "kill({pid}, {signal})");
}

#[test]
fn serve_notifies_systemd_and_reloads_what_it_can_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let config_for = |level: &str, max_connections: u32| {
        common::small_stack_config(
            "data",
            &format!("[log]\nlevel = \"{level}\"\n[server]\nmax_connections = {max_connections}\n"),
            common::FastTier::Memory,
            "",
        )
    };
    let config = common::write_file(dir.path(), "config.toml", &config_for("info", 64));
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let stderr_path = dir.path().join("tierd.stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .current_dir(dir.path())
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();

    let ready = receive(&notify);
    assert!(ready.contains("READY=1"), "{ready:?}");
    // Serving by then: the admin socket answers.
    let status = Command::new(env!("CARGO_BIN_EXE_tierd"))
        .args(["status", "--config", "config.toml", "--json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );

    // log.level applies; max_connections needs a restart and is named.
    common::write_file(dir.path(), "config.toml", &config_for("debug", 128));
    signal(pid, libc::SIGHUP);
    assert!(receive(&notify).contains("RELOADING=1"));
    assert!(receive(&notify).contains("READY=1"));
    let log = wait_for_stderr(&stderr_path, "take effect only after a restart");
    assert!(log.contains("reload: log.level changed"), "{log}");
    assert!(
        log.contains("[server]"),
        "the restart-needing section is named:\n{log}"
    );
    assert!(
        !log.contains("[[tier]]"),
        "unchanged sections are not named:\n{log}"
    );

    // A config that does not load is reported and changes nothing.
    common::write_file(dir.path(), "config.toml", "this is = not [valid toml");
    signal(pid, libc::SIGHUP);
    assert!(receive(&notify).contains("RELOADING=1"));
    assert!(receive(&notify).contains("READY=1"));
    wait_for_stderr(&stderr_path, "the running settings stay");

    signal(pid, libc::SIGTERM);
    assert!(receive(&notify).contains("STOPPING=1"));
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
}

/// The packaged /etc/tierd/tierd.toml serves as shipped, once its absolute
/// places (/var/lib/tierd, /run/tierd, the metrics port) point into a
/// scratch directory.
#[test]
fn the_packaged_config_serves() {
    let text = std::fs::read_to_string(repo_file("packaging/deb/tierd.toml")).unwrap();
    for needle in [
        "data_dir = \"/var/lib/tierd\"",
        "unix:/run/tierd/tierd.sock",
        "127.0.0.1:9569",
    ] {
        assert!(text.contains(needle), "the packaged config lost {needle}");
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("lib");
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let text = text
        .replace("/var/lib/tierd", data.to_str().unwrap())
        .replace("/run/tierd", run.to_str().unwrap())
        .replace("127.0.0.1:9569", "127.0.0.1:0");
    let config = common::write_file(dir.path(), "tierd.toml", &text);
    let mut server = common::serve::ServeProcess::start(dir.path(), Some(&config));
    let uri = server.uri("vol0");
    assert!(uri.contains("tierd.sock"), "{uri}");
    let mut client = tierd_nbd::Client::connect_uri(&uri).unwrap();
    assert_eq!(client.info().size_bytes, 2 << 30);
    client.write(0, &[5u8; 4096], true).unwrap();
}
