//! One process's claim on a directory: an exclusive `flock` on a lock file
//! that holds the holder's pid, released by the kernel when the process ends
//! (also on `kill -9`). `tierd serve` takes one on its data directory, the
//! engine one on each volume's metadata directory.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Why a lock file could not be taken.
#[derive(Debug)]
pub enum PidLockError {
    /// Another process holds it; its pid when the file names one.
    Held { pid: Option<String> },
    /// The file could not be opened, locked or written.
    Io(String),
}

/// Takes the lock file at `path` (created if missing) and writes this
/// process's pid into it. Hold the returned file for as long as the claim.
pub fn lock(path: &Path) -> Result<File, PidLockError> {
    let io = |what: &str, error: std::io::Error| {
        PidLockError::Io(format!("{}: {what}: {error}", path.display()))
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|error| io("cannot open the lock file", error))?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(io("cannot lock", error));
        }
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        let holder = holder.trim();
        return Err(PidLockError::Held {
            pid: (!holder.is_empty()).then(|| holder.to_string()),
        });
    }
    let pid = format!("{}\n", std::process::id());
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|_| file.write_all(pid.as_bytes()))
        .map_err(|error| io("cannot write the pid", error))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = lock(&path).unwrap();
        match lock(&path) {
            Err(PidLockError::Held { pid }) => {
                assert_eq!(pid, Some(std::process::id().to_string()));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        drop(held);
        lock(&path).unwrap();
    }
}
