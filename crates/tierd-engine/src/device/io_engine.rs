//! How a [`super::file::FileDevice`] moves bytes: the IO engine, kept apart
//! from the device (as foyer splits `Device` from `IoEngine`), so a tier
//! chooses positioned system calls or io_uring without the device's
//! alignment, bounce, failure and superblock logic caring which.
//!
//! - [`PsyncEngine`] (`io_engine = "psync"`): `pread`, `pwrite`, and
//!   `pwritev2(RWF_DSYNC)` for a durable write, on the calling thread.
//! - [`UringEngine`] (`io_engine = "uring"`): one io_uring per device shared
//!   by every calling thread. The callers are synchronous threads (NBD
//!   workers, the migration copier), so the ring is run leader/follower
//!   style: a caller pushes its entry under the ring's lock; if no thread is
//!   waiting on the ring it becomes the leader, whose `io_uring_enter`
//!   submits every entry queued so far (its own and other callers') in one
//!   call and waits for completions, which it hands to their callers (each
//!   parks until its own result is in). A caller that arrives while a
//!   leader waits submits the queued entries itself, unless another
//!   follower is already submitting: that one picks them up in its next
//!   `io_uring_enter`, so concurrent callers share submission calls. The
//!   file is registered with the ring (no per-IO file lookup). Buffers are
//!   not registered: they belong to the NBD layer and change per request,
//!   and registering one costs a system call, more than its pinning saves
//!   on a 4 KiB IO.
//!
//! Both engines return what the kernel did, short counts included; the
//! device loops until a request is whole. A durable write the kernel refuses
//! (`RWF_DSYNC` unknown) comes back as `EOPNOTSUPP` or `ENOSYS`, and the
//! device falls back to a plain write and `fdatasync`.

use parking_lot::{Condvar, Mutex};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::thread::Thread;

use serde::{Deserialize, Serialize};

/// Which engine a file tier uses (`io_engine` in its `[[tier]]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoEngineKind {
    /// Positioned system calls on the calling thread.
    Psync,
    /// A shared io_uring with batched submission.
    Uring,
}

impl IoEngineKind {
    pub fn name(self) -> &'static str {
        match self {
            IoEngineKind::Psync => "psync",
            IoEngineKind::Uring => "uring",
        }
    }
}

/// The engine a file tier uses when its configuration names none (see
/// BENCHMARKS.md, "IO engines", for the measurement that chose it).
pub const DEFAULT_IO_ENGINE: IoEngineKind = IoEngineKind::Psync;

/// Moves bytes between memory and one file.
///
/// Obligations: `read_at` and `write_at` behave as `pread` and `pwrite` on
/// the engine's file (a short count is not an error; 0 from `read_at` is the
/// end of the file); `durable` makes the written bytes durable before the
/// call returns (`RWF_DSYNC`), or fails with `EOPNOTSUPP`/`ENOSYS` having
/// written nothing; EINTR is retried inside; safe to call from any number of
/// threads at once.
pub trait IoEngine: Send + Sync {
    fn kind(&self) -> IoEngineKind;

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<usize>;

    fn write_at(&self, data: &[u8], offset_bytes: u64, durable: bool) -> io::Result<usize>;
}

fn offset_of(offset_bytes: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(offset_bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `pread`/`pwrite`/`pwritev2` on the calling thread.
pub struct PsyncEngine {
    file: File,
}

impl PsyncEngine {
    /// Works on a duplicate of `file`'s descriptor.
    pub fn new(file: &File) -> io::Result<PsyncEngine> {
        Ok(PsyncEngine {
            file: file.try_clone()?,
        })
    }
}

impl IoEngine for PsyncEngine {
    fn kind(&self) -> IoEngineKind {
        IoEngineKind::Psync
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<usize> {
        loop {
            match self.file.read_at(buf, offset_bytes) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                result => return result,
            }
        }
    }

    fn write_at(&self, data: &[u8], offset_bytes: u64, durable: bool) -> io::Result<usize> {
        if !durable {
            loop {
                match self.file.write_at(data, offset_bytes) {
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    result => return result,
                }
            }
        }
        let iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let offset = offset_of(offset_bytes)?;
        loop {
            // SAFETY: one iovec over `data`, which lives across the call; the
            // kernel only reads from it.
            let written =
                unsafe { libc::pwritev2(self.file.as_raw_fd(), &iov, 1, offset, libc::RWF_DSYNC) };
            if written >= 0 {
                return Ok(written as usize);
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// Entries of the ring's submission queue, and requests in flight at most
/// (more callers wait for a free slot).
const RING_ENTRIES: u32 = 256;

struct Slot {
    /// The kernel's result (bytes, or a negative errno) once completed.
    result: Option<i32>,
    /// The caller, parked until `result` is set.
    waiter: Option<Thread>,
}

struct RingState {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Entries pushed and not yet handed to `io_uring_enter`.
    unsubmitted: u32,
    /// A thread is inside `io_uring_enter` waiting for completions.
    leader: bool,
    /// A follower is inside `io_uring_enter` submitting.
    submitting: bool,
    /// Requests pushed and not yet collected by their caller.
    in_flight: u32,
}

/// One io_uring shared by every caller (see the module docs).
pub struct UringEngine {
    ring: io_uring::IoUring,
    /// Keeps the registered descriptor open as long as the ring uses it.
    _file: File,
    state: Mutex<RingState>,
    /// Signalled when a slot frees up.
    room: Condvar,
}

impl UringEngine {
    /// A ring for `file` (registered with it), checked with one no-op
    /// request. `Err` is the kernel's refusal (EPERM: io_uring disabled by
    /// `kernel.io_uring_disabled` or a seccomp filter; ENOSYS: no io_uring),
    /// for the caller to fall back on.
    pub fn new(file: &File) -> io::Result<UringEngine> {
        let ring = io_uring::IoUring::new(RING_ENTRIES)?;
        let file = file.try_clone()?;
        ring.submitter().register_files(&[file.as_raw_fd()])?;
        let engine = UringEngine {
            ring,
            _file: file,
            state: Mutex::new(RingState {
                slots: (0..RING_ENTRIES)
                    .map(|_| Slot {
                        result: None,
                        waiter: None,
                    })
                    .collect(),
                free: (0..RING_ENTRIES).rev().collect(),
                unsubmitted: 0,
                leader: false,
                submitting: false,
                in_flight: 0,
            }),
            room: Condvar::new(),
        };
        let result = engine.run(io_uring::opcode::Nop::new().build())?;
        if result < 0 {
            return Err(io::Error::from_raw_os_error(-result));
        }
        Ok(engine)
    }

    /// Runs one request on the ring; returns the kernel's result (a
    /// negative errno on failure). Once the entry is queued this returns
    /// only with its completion (the kernel may hold a pointer into the
    /// caller's buffer until then), retrying failed `io_uring_enter` calls.
    fn run(&self, entry: io_uring::squeue::Entry) -> io::Result<i32> {
        let mut state = self.state.lock();
        let id = loop {
            match state.free.pop() {
                Some(id) => break id,
                None => self.room.wait(&mut state),
            }
        };
        let entry = entry.user_data(u64::from(id));
        // SAFETY: the submission queue is only touched under `state`'s
        // lock, so no other SubmissionQueue exists; the entry's buffer is
        // the caller's, which outlives the request because this function
        // returns only after the request's completion is reaped.
        let pushed = unsafe { self.ring.submission_shared().push(&entry) };
        // A slot per queue entry: the queue cannot be full while a slot is
        // free, unless entries wait unsubmitted; submit them first.
        if pushed.is_err() {
            drop(state);
            let submitted = self.ring.submit();
            state = self.state.lock();
            // SAFETY: as above.
            let pushed = unsafe { self.ring.submission_shared().push(&entry) };
            if let Err(error) = submitted
                .and(pushed.map_err(|_| io::Error::other("io_uring submission queue full")))
            {
                // Nothing of ours is in the ring: give the slot back.
                state.free.push(id);
                self.room.notify_one();
                return Err(error);
            }
        }
        state.unsubmitted += 1;
        state.in_flight += 1;
        loop {
            if let Some(result) = state.slots[id as usize].result.take() {
                state.slots[id as usize].waiter = None;
                state.free.push(id);
                state.in_flight -= 1;
                self.room.notify_one();
                if !state.leader && state.in_flight > 0 {
                    // Others wait for completions and nobody waits on the
                    // ring: wake one of them to lead.
                    if let Some(waiter) = state.slots.iter_mut().find_map(|slot| {
                        if slot.result.is_none() {
                            slot.waiter.take()
                        } else {
                            None
                        }
                    }) {
                        waiter.unpark();
                    }
                }
                return Ok(result);
            }
            if !state.leader {
                state.leader = true;
                state.unsubmitted = 0;
                drop(state);
                let entered = self.ring.submit_and_wait(1);
                state = self.state.lock();
                state.leader = false;
                self.reap(&mut state);
                if let Err(error) = entered {
                    if !retryable(&error) {
                        // Our entry may be in the kernel's hands, with a
                        // pointer to the caller's buffer: never return
                        // before its completion. Try again.
                        tracing::warn!(error = %error, "io_uring_enter failed; retrying");
                        std::thread::yield_now();
                    }
                }
                continue;
            }
            if state.unsubmitted > 0 && !state.submitting {
                // The leader sleeps in the kernel: submit what is queued.
                state.submitting = true;
                while state.unsubmitted > 0 {
                    state.unsubmitted = 0;
                    drop(state);
                    let submitted = self.ring.submit();
                    state = self.state.lock();
                    if let Err(error) = submitted {
                        // The entries stay queued (the kernel's buffers
                        // point into callers'): the next enter takes them.
                        if !retryable(&error) {
                            tracing::warn!(error = %error, "io_uring submit failed; retrying");
                        }
                        state.unsubmitted += 1;
                        drop(state);
                        std::thread::yield_now();
                        state = self.state.lock();
                    }
                }
                state.submitting = false;
                continue;
            }
            state.slots[id as usize].waiter = Some(std::thread::current());
            drop(state);
            std::thread::park();
            state = self.state.lock();
        }
    }

    /// Moves every completion to its slot and wakes its caller.
    fn reap(&self, state: &mut RingState) {
        // SAFETY: the completion queue is only touched under `state`'s lock.
        let completions = unsafe { self.ring.completion_shared() };
        for completion in completions {
            let Some(slot) = state.slots.get_mut(completion.user_data() as usize) else {
                continue;
            };
            slot.result = Some(completion.result());
            if let Some(waiter) = slot.waiter.take() {
                waiter.unpark();
            }
        }
    }

    fn complete(result: io::Result<i32>) -> io::Result<usize> {
        match result? {
            result if result >= 0 => Ok(result as usize),
            errno => Err(io::Error::from_raw_os_error(-errno)),
        }
    }
}

fn retryable(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
    )
}

/// io_uring takes lengths as u32: longer requests are cut (a short count,
/// which the device's loop completes).
fn ring_length(length: usize) -> u32 {
    u32::try_from(length).unwrap_or(!4095)
}

impl IoEngine for UringEngine {
    fn kind(&self) -> IoEngineKind {
        IoEngineKind::Uring
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<usize> {
        let entry = io_uring::opcode::Read::new(
            io_uring::types::Fixed(0),
            buf.as_mut_ptr(),
            ring_length(buf.len()),
        )
        .offset(offset_bytes)
        .build();
        loop {
            match Self::complete(self.run(entry.clone())) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                result => return result,
            }
        }
    }

    fn write_at(&self, data: &[u8], offset_bytes: u64, durable: bool) -> io::Result<usize> {
        let entry = io_uring::opcode::Write::new(
            io_uring::types::Fixed(0),
            data.as_ptr(),
            ring_length(data.len()),
        )
        .offset(offset_bytes)
        .rw_flags(if durable { libc::RWF_DSYNC } else { 0 })
        .build();
        loop {
            match Self::complete(self.run(entry.clone())) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                result => return result,
            }
        }
    }
}

/// The engine of `kind` for `file`. An io_uring the kernel refuses gives
/// the psync engine and the reason (for the caller to log).
pub fn open_engine(
    kind: IoEngineKind,
    file: &File,
) -> io::Result<(Box<dyn IoEngine>, Option<String>)> {
    open_engine_with(kind, file, UringEngine::new)
}

/// [`open_engine`] with the ring's constructor given (tests refuse it).
fn open_engine_with(
    kind: IoEngineKind,
    file: &File,
    new_ring: impl FnOnce(&File) -> io::Result<UringEngine>,
) -> io::Result<(Box<dyn IoEngine>, Option<String>)> {
    match kind {
        IoEngineKind::Psync => Ok((Box::new(PsyncEngine::new(file)?), None)),
        IoEngineKind::Uring => match new_ring(file) {
            Ok(engine) => Ok((Box::new(engine), None)),
            Err(error) => Ok((
                Box::new(PsyncEngine::new(file)?),
                Some(refusal_reason(&error)),
            )),
        },
    }
}

/// Why io_uring cannot be used, in words an operator can act on.
pub fn refusal_reason(error: &io::Error) -> String {
    let why = match error.raw_os_error() {
        Some(libc::EPERM) => "io_uring is disabled here (sysctl kernel.io_uring_disabled, or a seccomp filter such as a container runtime's default)",
        Some(libc::ENOSYS) => "this kernel has no io_uring (Linux 5.1 or later, built with CONFIG_IO_URING)",
        Some(libc::ENOMEM) => "the kernel would not lock the ring's memory (RLIMIT_MEMLOCK)",
        _ => "the kernel refused to set up an io_uring",
    };
    format!("{why}: {error}; using io_engine = \"psync\" instead")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn engines(file: &File) -> Vec<Box<dyn IoEngine>> {
        let mut engines: Vec<Box<dyn IoEngine>> = vec![Box::new(PsyncEngine::new(file).unwrap())];
        match UringEngine::new(file) {
            Ok(engine) => engines.push(Box::new(engine)),
            Err(error) => eprintln!("skipping the uring engine: {}", refusal_reason(&error)),
        }
        engines
    }

    #[test]
    fn both_engines_read_and_write_like_pread_and_pwrite() {
        let directory = tempfile::tempdir().unwrap();
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(directory.path().join("engine.img"))
            .unwrap();
        file.set_len(64 * 1024).unwrap();
        for engine in engines(&file) {
            let name = engine.kind().name();
            for (index, durable) in [false, true].into_iter().enumerate() {
                let data = vec![index as u8 + 1; 5000];
                let offset = 3 + 10_000 * index as u64;
                assert_eq!(engine.write_at(&data, offset, durable).unwrap(), 5000);
                let mut back = vec![0u8; 5000];
                assert_eq!(engine.read_at(&mut back, offset).unwrap(), 5000, "{name}");
                assert_eq!(back, data, "{name}");
            }
            // A read at the end of the file is short, past it empty.
            let mut tail = vec![0u8; 100];
            assert_eq!(engine.read_at(&mut tail, 64 * 1024 - 10).unwrap(), 10);
            assert_eq!(engine.read_at(&mut tail, 64 * 1024).unwrap(), 0);
        }
    }

    /// Many threads at once on one ring: every request gets its own result
    /// (no lost wake-up, no result delivered to the wrong caller).
    #[test]
    fn concurrent_callers_each_get_their_own_completion() {
        let directory = tempfile::tempdir().unwrap();
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(directory.path().join("ring.img"))
            .unwrap();
        file.set_len(1 << 20).unwrap();
        for engine in engines(&file) {
            let engine: Arc<dyn IoEngine> = Arc::from(engine);
            let threads: Vec<_> = (0..8u64)
                .map(|thread| {
                    let engine = Arc::clone(&engine);
                    std::thread::spawn(move || {
                        for round in 0..200u64 {
                            let offset = (thread * 200 + round) * 512;
                            let data = [(thread * 31 + round) as u8; 512];
                            assert_eq!(
                                engine.write_at(&data, offset, round % 50 == 0).unwrap(),
                                512
                            );
                            let mut back = [0u8; 512];
                            assert_eq!(engine.read_at(&mut back, offset).unwrap(), 512);
                            assert_eq!(back, data, "thread {thread} round {round}");
                        }
                    })
                })
                .collect();
            for thread in threads {
                thread.join().unwrap();
            }
        }
    }

    /// A kernel that refuses io_uring (EPERM, as under a container's
    /// seccomp filter) gives a working psync engine and the reason.
    #[test]
    fn a_refused_ring_falls_back_to_psync_with_the_reason() {
        let directory = tempfile::tempdir().unwrap();
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(directory.path().join("fallback.img"))
            .unwrap();
        file.set_len(8192).unwrap();
        let (engine, reason) = open_engine_with(IoEngineKind::Uring, &file, |_| {
            Err(io::Error::from_raw_os_error(libc::EPERM))
        })
        .unwrap();
        assert_eq!(engine.kind(), IoEngineKind::Psync);
        let reason = reason.expect("a reason");
        assert!(
            reason.contains("disabled") && reason.contains("psync"),
            "{reason}"
        );
        assert_eq!(engine.write_at(b"still works", 100, true).unwrap(), 11);
        let mut back = [0u8; 11];
        assert_eq!(engine.read_at(&mut back, 100).unwrap(), 11);
        assert_eq!(&back, b"still works");
        let (engine, reason) = open_engine(IoEngineKind::Psync, &file).unwrap();
        assert_eq!((engine.kind(), reason), (IoEngineKind::Psync, None));
    }

    #[test]
    fn refusals_name_the_cause_and_the_fallback() {
        let reason = refusal_reason(&io::Error::from_raw_os_error(libc::EPERM));
        assert!(
            reason.contains("io_uring_disabled") && reason.contains("psync"),
            "{reason}"
        );
        let reason = refusal_reason(&io::Error::from_raw_os_error(libc::ENOSYS));
        assert!(reason.contains("no io_uring"), "{reason}");
    }
}
