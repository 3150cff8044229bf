//! Outside tools for the real-client tests (qemu-io, nbdcopy, fio, nbdfuse,
//! losetup, mkfs.ext4, e2fsck): finding them, skipping with the reason
//! when one is missing (failing under `CI=true`, where
//! `../shared/tools/install-nbd-clients.sh` installed them), running them
//! with a timeout, and attaching an export as a loop device through
//! nbdfuse. The same rules as `nbd_clients.rs`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tierd_common::clock::{Clock, SystemClock};

/// How long any one tool may take before the test gives up on it.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips (prints the reason, returns false) or, under `CI=true`, fails.
pub fn missing(what: &str) -> bool {
    let message =
        format!("skipping: {what} not installed (run ../shared/tools/install-nbd-clients.sh)");
    if in_ci() {
        panic!("{message}; CI=true requires it");
    }
    eprintln!("{message}");
    false
}

pub fn tool_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .filter(|directory| !directory.is_empty())
        .map(|directory| Path::new(directory).join(name))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            candidate.metadata().is_ok_and(|metadata| {
                metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
            })
        });
    found
}

/// True when `name` is an executable in PATH (or the sbin directories).
pub fn require_tool(name: &str) -> bool {
    tool_path(name).is_some() || missing(name)
}

/// True when every tool of `names` is there (the first missing one is
/// reported).
pub fn require_tools(names: &[&str]) -> bool {
    names.iter().all(|name| require_tool(name))
}

/// The full path of a tool `require_tool` accepted (sbin may be off PATH).
pub fn tool(name: &str) -> Command {
    Command::new(tool_path(name).unwrap_or_else(|| PathBuf::from(name)))
}

/// Runs `command` to completion (killed after `TOOL_TIMEOUT`), returning its
/// output whatever the exit status.
pub fn run_unchecked(command: &mut Command) -> Output {
    let description = format!("{command:?}");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {description}: {error}"));
    let pid = child.id() as libc::pid_t;
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(TOOL_TIMEOUT) {
        Ok(output) => output.unwrap_or_else(|error| panic!("{description}: {error}")),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{description} did not finish in {TOOL_TIMEOUT:?}; killed");
        }
    }
}

pub fn describe(command: &Command, output: &Output) -> String {
    format!(
        "{command:?}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `command` and fails the test (with its output) unless it succeeds.
pub fn run(command: &mut Command) -> Output {
    let output = run_unchecked(command);
    assert!(output.status.success(), "{}", describe(command, &output));
    output
}

/// A real-time limit on waiting for an outside process (never a
/// measurement: the tests assert no timing).
pub struct Deadline {
    clock: SystemClock,
    end_ns: u64,
}

impl Deadline {
    pub fn after(duration: Duration) -> Deadline {
        let clock = SystemClock::new();
        let end_ns = clock.now_ns() + duration.as_nanos() as u64;
        Deadline { clock, end_ns }
    }

    pub fn passed(&self) -> bool {
        self.clock.now_ns() >= self.end_ns
    }
}

pub fn pause_ms(milliseconds: u64) {
    SystemClock::new().sleep_ns(milliseconds * 1_000_000);
}

pub fn sha256_of(path: &Path) -> String {
    let output = run(tool("sha256sum").arg(path));
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

// ---------------------------------------------------------------- loop devices

/// Cleanup steps run in reverse order on drop, so a failing test leaves no
/// mount, loop device or FUSE mount behind.
#[derive(Default)]
pub struct Cleanup {
    steps: Vec<(String, Box<dyn FnOnce()>)>,
}

impl Cleanup {
    pub fn push(&mut self, name: String, step: impl FnOnce() + 'static) {
        self.steps.push((name, Box::new(step)));
    }

    /// Drops the newest step (the checked path did that work itself).
    pub fn forget_last(&mut self) {
        self.steps.pop();
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        while let Some((name, step)) = self.steps.pop() {
            eprintln!("cleanup: {name}");
            step();
        }
    }
}

/// Runs a cleanup command quietly, ignoring failure.
fn quietly(program: &'static str, args: Vec<String>) -> impl FnOnce() {
    move || {
        let _ = tool(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// True when the ext4-over-loop tests can run here: the tools, FUSE and
/// root (for losetup and mount).
pub fn can_attach_loop_devices() -> bool {
    if !require_tools(&[
        "nbdfuse",
        "losetup",
        "mkfs.ext4",
        "e2fsck",
        "mount",
        "umount",
    ]) {
        return false;
    }
    if tool_path("fusermount3").is_none() && !require_tool("fusermount") {
        return false;
    }
    if !Path::new("/dev/fuse").exists() && !missing("/dev/fuse (FUSE)") {
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 && !missing("root (for losetup and mount)") {
        return false;
    }
    true
}

/// An export as a block device: nbdfuse exposes it as a file, losetup
/// makes a loop device of that file.
pub struct Attached {
    fuse_dir: PathBuf,
    fuse: Option<Child>,
    pub device: String,
}

/// Attaches `uri` (an export of `size_bytes`) under `dir/name`.
pub fn attach(
    dir: &Path,
    uri: &str,
    size_bytes: u64,
    name: &str,
    cleanup: &mut Cleanup,
) -> Attached {
    let fuse_dir = dir.join(name);
    std::fs::create_dir_all(&fuse_dir).unwrap();
    let file = fuse_dir.join("disk");
    let pid_file = dir.join(format!("{name}.pid"));
    let _ = std::fs::remove_file(&pid_file);
    let fuse = tool("nbdfuse")
        .arg("-P")
        .arg(&pid_file)
        .arg(&file)
        .arg(uri)
        .stdin(Stdio::null())
        .spawn()
        .expect("start nbdfuse");
    let fuse_pid = fuse.id() as libc::pid_t;
    let dir_text = fuse_dir.display().to_string();
    cleanup.push(format!("unmount {dir_text}"), {
        let dir_text = dir_text.clone();
        move || {
            quietly("fusermount3", vec!["-u".into(), dir_text])();
            // SAFETY: kill(2) on our own nbdfuse child's pid.
            unsafe { libc::kill(fuse_pid, libc::SIGTERM) };
        }
    });
    // nbdfuse writes the pid file once the file system is mounted.
    let deadline = Deadline::after(Duration::from_secs(30));
    while !pid_file.exists() || file.metadata().map(|m| m.len()).unwrap_or(0) != size_bytes {
        assert!(!deadline.passed(), "nbdfuse did not expose {file:?}");
        pause_ms(20);
    }
    let output = run(tool("losetup").args(["-f", "--show"]).arg(&file));
    let device = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(
        device.starts_with("/dev/loop"),
        "losetup printed {device:?}"
    );
    cleanup.push(
        format!("losetup -d {device}"),
        quietly("losetup", vec!["-d".into(), device.clone()]),
    );
    Attached {
        fuse_dir,
        fuse: Some(fuse),
        device,
    }
}

/// Detaches the loop device and unmounts nbdfuse, checking each step.
pub fn detach(mut attached: Attached, cleanup: &mut Cleanup) {
    run(tool("losetup").arg("-d").arg(&attached.device));
    cleanup.forget_last();
    let fusermount = if tool_path("fusermount3").is_some() {
        "fusermount3"
    } else {
        "fusermount"
    };
    run(tool(fusermount).arg("-u").arg(&attached.fuse_dir));
    let mut fuse = attached.fuse.take().unwrap();
    let deadline = Deadline::after(Duration::from_secs(30));
    while fuse.try_wait().unwrap().is_none() {
        assert!(!deadline.passed(), "nbdfuse did not exit after unmount");
        pause_ms(20);
    }
    cleanup.forget_last();
}

pub fn mount(device: &str, point: &Path, cleanup: &mut Cleanup) {
    std::fs::create_dir_all(point).unwrap();
    run(tool("mount").arg(device).arg(point));
    cleanup.push(
        format!("umount {}", point.display()),
        quietly("umount", vec!["-l".into(), point.display().to_string()]),
    );
}

pub fn unmount(point: &Path, cleanup: &mut Cleanup) {
    run(tool("umount").arg(point));
    cleanup.forget_last();
}
