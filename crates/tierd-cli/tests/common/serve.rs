//! One `tierd serve` process for the integration tests: started in a
//! directory, its stdout read line by line on a thread (so the pipe never
//! fills), its stderr appended to `tierd.stderr` in that directory (so it
//! survives the process for error messages), killed when the guard drops.
//! Waits have generous deadlines that fail loudly; nothing asserts speed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::Duration;

use tierd_common::clock::{Clock, SystemClock};

/// How long a server gets to print a line, or to exit once asked to.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The line `tierd serve` prints last when it is ready (after every
/// listener and volume line).
pub const READY_PREFIX: &str = "tierd: admin socket ";

/// A running (or exited) `tierd serve`; SIGKILLed on drop if still running.
pub struct ServeProcess {
    child: Option<Child>,
    lines: Receiver<String>,
    /// Every stdout line received so far, in order.
    seen: Vec<String>,
    stderr_path: PathBuf,
}

impl ServeProcess {
    /// Starts `tierd serve [--config CONFIG]` with `dir` as its working
    /// directory (a relative `config` is relative to it).
    pub fn spawn(dir: &Path, config: Option<&Path>) -> ServeProcess {
        Self::spawn_args(dir, config, &[])
    }

    /// [`spawn`](Self::spawn) with more arguments after `--config`.
    pub fn spawn_args(dir: &Path, config: Option<&Path>, extra: &[&str]) -> ServeProcess {
        let stderr_path = dir.join("tierd.stderr");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .expect("open tierd.stderr");
        let mut command = Command::new(env!("CARGO_BIN_EXE_tierd"));
        command.arg("serve").current_dir(dir);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        command.args(extra);
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start tierd serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // With nobody listening any more, keep draining anyway.
                let _ = sender.send(line);
            }
        });
        ServeProcess {
            child: Some(child),
            lines,
            seen: Vec::new(),
            stderr_path,
        }
    }

    /// [`spawn`](Self::spawn), then waits for the ready line.
    pub fn start(dir: &Path, config: Option<&Path>) -> ServeProcess {
        let mut process = ServeProcess::spawn(dir, config);
        process.wait_line(READY_PREFIX);
        process
    }

    /// The first stdout line starting with `prefix`, waiting for it; `Err`
    /// with what the process printed when its stdout closes first (it
    /// exited) or nothing comes for [`DEADLINE`].
    pub fn try_wait_line(&mut self, prefix: &str) -> Result<String, String> {
        if let Some(line) = self.seen.iter().find(|line| line.starts_with(prefix)) {
            return Ok(line.clone());
        }
        loop {
            match self.lines.recv_timeout(DEADLINE) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return Ok(line);
                    }
                }
                Err(error) => {
                    let why = match error {
                        RecvTimeoutError::Timeout => format!("nothing for {DEADLINE:?}"),
                        RecvTimeoutError::Disconnected => "stdout closed".to_string(),
                    };
                    return Err(format!(
                        "tierd serve printed no line starting with {prefix:?} ({why})\nstdout: {:?}\nstderr:\n{}",
                        self.seen,
                        self.stderr()
                    ));
                }
            }
        }
    }

    /// [`try_wait_line`](Self::try_wait_line) that panics with the reason.
    pub fn wait_line(&mut self, prefix: &str) -> String {
        self.try_wait_line(prefix)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// The `nbd+unix://` (or `nbds+unix://`) URI printed for `volume`.
    pub fn uri(&mut self, volume: &str) -> String {
        let line = self.wait_line(&format!("tierd: volume {volume} at "));
        line.rsplit(' ').next().unwrap_or_default().to_string()
    }

    /// The path of the first Unix-socket listener.
    pub fn unix_socket(&mut self) -> PathBuf {
        let line = self.wait_line("tierd: listening on unix:");
        PathBuf::from(line.trim_start_matches("tierd: listening on unix:").trim())
    }

    /// The admin socket's path.
    pub fn admin_socket(&mut self) -> PathBuf {
        let line = self.wait_line(READY_PREFIX);
        PathBuf::from(line.trim_start_matches(READY_PREFIX).trim())
    }

    /// Every stdout line the process printed; only once it has exited
    /// (reads until its stdout closes).
    pub fn stdout_after_exit(&mut self) -> Vec<String> {
        assert!(self.child.is_none(), "the process is still running");
        self.seen.extend(self.lines.iter());
        self.seen.clone()
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The last `count` lines of stderr, for failure messages.
    pub fn stderr_tail(&self, count: usize) -> String {
        let text = self.stderr();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "tierd stderr (last {count} lines):\n{}",
            lines[lines.len().saturating_sub(count)..].join("\n")
        )
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().expect("wait for tierd").is_none(),
            None => false,
        }
    }

    /// Waits for the process to end by itself, for at most [`DEADLINE`]
    /// (then kills it and panics).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let clock = SystemClock::new();
        let deadline_ns = clock.now_ns() + DEADLINE.as_nanos() as u64;
        loop {
            if let Some(status) = child.try_wait().expect("wait for tierd") {
                return status;
            }
            if clock.now_ns() > deadline_ns {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "tierd serve did not exit within {DEADLINE:?}\n{}",
                    self.stderr_tail(40)
                );
            }
            clock.sleep_ns(20_000_000);
        }
    }

    /// SIGTERM, then waits for the clean stop.
    pub fn stop(&mut self) -> ExitStatus {
        // SAFETY: kill(2) on the pid of our own child, not yet reaped.
        let sent = unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        assert_eq!(sent, 0, "send SIGTERM");
        self.wait_exit()
    }

    /// `kill -9` and reap; the exit status, or `None` when it was not
    /// running.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        Some(child.wait().expect("reap tierd"))
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
