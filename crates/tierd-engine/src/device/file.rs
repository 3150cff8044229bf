//! A regular file or a block device as a [`BlockDevice`].
//!
//! IO is positioned, so threads share one descriptor without a lock; the
//! reads and writes go through the tier's IO engine
//! ([`super::io_engine`]: `pread`/`pwrite` on the calling thread, or a
//! shared io_uring; [`FileDevice::with_io_engine`]). `flush` is
//! `fdatasync`; a durable (FUA) write carries `RWF_DSYNC`, which makes only
//! its own range durable, falling back (once, logged) to a plain write +
//! `fdatasync` where the kernel refuses the flag; `discard` punches a hole
//! and `write_zeroes` asks for a zeroed range, both falling back to writing
//! zeroes when the filesystem or device refuses.
//!
//! With `direct = true` the file is opened with `O_DIRECT` (no page cache):
//! every request is sent as whole aligned blocks through an aligned bounce
//! buffer unless the caller's buffer, offset and length are already aligned.
//! A write that covers a block only partly reads that block first
//! (read-modify-write); these edge read-modify-writes are serialised per
//! block with striped locks, so concurrent writes to different bytes of one
//! block never lose each other. Concurrent writes whose byte ranges overlap
//! leave the blocks they share in an unspecified mix of the two, as on a real
//! disk. Some filesystems (tmpfs before Linux 6.6, some FUSE and network
//! filesystems) refuse `O_DIRECT`; opening then fails with an error that says
//! to set `direct = false`.

use parking_lot::{Mutex, MutexGuard};
use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::io_engine::{self, IoEngine, IoEngineKind, PsyncEngine};
use super::{check_range, BlockDevice, DeviceError, DeviceErrorKind, DeviceResult};

/// Alignment of direct IO when the device does not ask for more: 4096 works
/// on every filesystem and disk in use today.
pub const DIRECT_ALIGNMENT_BYTES: u64 = 4096;

/// Stripes of the edge-block locks (a block maps to `block % EDGE_LOCKS`).
const EDGE_LOCKS: usize = 64;

/// Bounce buffers up to this size are kept per thread for reuse.
const BOUNCE_KEEP_BYTES: usize = 8 << 20;

/// `_IOR(0x12, 114, size_t)`: size of a block device in bytes.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: u32 = 0x4008_1272;
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: u32 = 0x8008_1272;

/// Zeroes for the write-zeroes fallback, aligned so direct IO can use them
/// without a bounce.
#[repr(C, align(4096))]
struct Zeroes([u8; 1 << 20]);
static ZEROES: Zeroes = Zeroes([0; 1 << 20]);

thread_local! {
    /// Per-thread bounce buffer (grown on demand, reused across calls).
    static BOUNCE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A file or block device opened for positioned IO.
pub struct FileDevice {
    name: String,
    path: PathBuf,
    file: File,
    /// Moves the bytes of reads and writes (psync until
    /// [`FileDevice::with_io_engine`] says otherwise).
    io: Box<dyn IoEngine>,
    /// Why the configured engine was not used, if it was refused.
    io_fallback: Option<String>,
    size_bytes: u64,
    direct: bool,
    block_device: bool,
    /// Direct-IO alignment of offsets, lengths and buffer addresses.
    alignment_bytes: u64,
    edge_locks: Box<[Mutex<()>]>,
    /// The kernel refused `RWF_DSYNC` once: durable writes are `pwrite` +
    /// `fdatasync` from then on.
    dsync_refused: AtomicBool,
    /// Reads and writes that went through a bounce buffer (direct IO with
    /// an unaligned buffer, offset or length).
    bounces: AtomicU64,
    /// Tier mode ([`FileDevice::open_tier`]): the identity block after the
    /// data area, the file's (device, inode) when opened, and the failure
    /// that ended service (set once, never cleared).
    tier: Option<TierBacking>,
}

/// What a tier-mode device remembers about its backing to notice it changing.
#[derive(Debug)]
struct TierBacking {
    /// Bytes reserved after the data area for the identity superblock.
    superblock_bytes: u64,
    /// `(st_dev, st_ino)` of the open file, or `(0, st_rdev)` for a block
    /// device, at open.
    identity: (u64, u64),
    /// A regular file's length must stay at least this.
    expected_length_bytes: u64,
    /// Set once, never cleared; reading it is one atomic load, so every IO
    /// can check it without a lock.
    failure: std::sync::OnceLock<String>,
    /// Something wrong that does not stop service (the file was deleted).
    warning: Mutex<Option<String>>,
}

/// `(st_dev, st_ino)` of a regular file, `(0, st_rdev)` of a block device:
/// two paths name the same storage when these are equal.
pub fn backing_identity(metadata: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    if metadata.file_type().is_block_device() {
        (0, metadata.rdev())
    } else {
        (metadata.dev(), metadata.ino())
    }
}

/// The pid holding a `flock` on the file with this (device, inode), from
/// `/proc/locks` (None when unknown).
pub fn flock_holder(metadata: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = metadata.dev();
    // /proc/locks prints MAJOR:MINOR:INODE in hex:hex:decimal.
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let wanted = format!("{major:02x}:{minor:02x}:{}", metadata.ino());
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let flock = fields.get(1) == Some(&"FLOCK");
        let file = fields
            .iter()
            .position(|field| field.contains(':') && field.matches(':').count() == 2)?;
        if flock && fields[file] == wanted {
            fields.get(file - 1)?.parse().ok()
        } else {
            None
        }
    })
}

/// Errno of an IO error (EIO when the error did not come from the OS).
fn errno_of(error: &io::Error) -> i32 {
    error.raw_os_error().unwrap_or(libc::EIO)
}

/// The OS's words for the error; `io::Error` already appends "(os error N)".
fn describe(error: &io::Error) -> String {
    error.to_string()
}

impl FileDevice {
    /// Opens `path` as a device.
    ///
    /// - `size_bytes`: the device size. A regular file shorter than that is
    ///   extended (sparse, `set_len`); a longer one is used up to that size
    ///   and never truncated. `None` uses the file's length (an empty file is
    ///   an error) or the block device's size. A block device smaller than a
    ///   given size is an error.
    /// - `direct`: open with `O_DIRECT` (see the module docs); the size must
    ///   then be a multiple of the alignment (4096 bytes, or the device's
    ///   logical block size when larger).
    /// - `create`: create a missing file; otherwise it must exist.
    pub fn open(
        path: impl AsRef<Path>,
        size_bytes: Option<u64>,
        direct: bool,
        create: bool,
    ) -> DeviceResult<FileDevice> {
        Self::open_inner(path.as_ref(), size_bytes, direct, create, None)
    }

    /// Opens `path` as a tier's backing: like [`FileDevice::open`], plus
    /// - [`SUPERBLOCK_BYTES`] after the data area hold the tier's identity
    ///   ([`FileDevice::read_superblock`]); a regular file is extended to
    ///   `size + SUPERBLOCK_BYTES`, a block device's data area is its size
    ///   less that (rounded down to the alignment) unless `size` is given;
    ///   with no `size`, a regular file that already ends in a superblock
    ///   keeps its data area, one that does not is extended by one;
    /// - the file is locked (`flock`, exclusive; block devices are also
    ///   opened `O_EXCL`), so a second server cannot use it; the error names
    ///   the holder's pid when `/proc/locks` knows it;
    /// - reads past the end of a file shrunk under the server, or a
    ///   [`FileDevice::check_backing`] that finds the file truncated,
    ///   deleted or replaced, fail the device: every later operation fails
    ///   with EIO naming the reason (never zeroes).
    ///
    /// `extend = false` leaves a short file as it is (its identity is
    /// checked first: a file that shrank must be refused, not regrown).
    pub fn open_tier(
        path: impl AsRef<Path>,
        size_bytes: Option<u64>,
        direct: bool,
        create: bool,
        extend: bool,
    ) -> DeviceResult<FileDevice> {
        Self::open_inner(path.as_ref(), size_bytes, direct, create, Some(extend))
    }

    fn open_inner(
        path: &Path,
        size_bytes: Option<u64>,
        direct: bool,
        create: bool,
        tier: Option<bool>,
    ) -> DeviceResult<FileDevice> {
        let tier_mode = tier.is_some();
        let extend = tier.unwrap_or(true);
        let name = path.display().to_string();
        let open_error = |message: String, errno: i32| DeviceError {
            device: name.clone(),
            op: "open",
            offset_bytes: 0,
            length_bytes: size_bytes.unwrap_or(0),
            kind: DeviceErrorKind::Io(errno),
            message,
        };

        let mut options = OpenOptions::new();
        options.read(true).write(true).create(create);
        let mut flags = 0;
        if direct {
            flags |= libc::O_DIRECT;
        }
        if tier_mode
            && std::fs::metadata(path).is_ok_and(|metadata| metadata.file_type().is_block_device())
        {
            // On a block device O_EXCL (without O_CREAT) is the kernel's
            // exclusive open: it fails with EBUSY while the device is
            // mounted or open O_EXCL elsewhere.
            flags |= libc::O_EXCL;
        }
        options.custom_flags(flags);
        let file = options.open(path).map_err(|error| {
            let errno = errno_of(&error);
            let message = if direct && errno == libc::EINVAL {
                format!(
                    "the filesystem refuses O_DIRECT ({}): direct = true is not supported \
                     on this filesystem; set direct = false for this device",
                    describe(&error)
                )
            } else if errno == libc::EBUSY {
                format!(
                    "the block device is in use (mounted, or opened exclusively by another program or tierd): {}",
                    describe(&error)
                )
            } else if error.kind() == io::ErrorKind::NotFound && !create {
                format!(
                    "cannot open: {} (create = false: the file must exist)",
                    describe(&error)
                )
            } else {
                format!("cannot open: {}", describe(&error))
            };
            open_error(message, errno)
        })?;
        let metadata = file.metadata().map_err(|error| {
            open_error(
                format!("cannot stat: {}", describe(&error)),
                errno_of(&error),
            )
        })?;

        if tier_mode {
            // SAFETY: flock takes a descriptor we own and plain flags.
            let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if locked != 0 {
                let error = io::Error::last_os_error();
                let holder = flock_holder(&metadata)
                    .map(|pid| format!(" by process {pid}"))
                    .unwrap_or_default();
                return Err(open_error(
                    format!(
                        "the file is locked{holder}: another tierd (or another tier of this configuration) uses it ({}). Two servers on one tier file would overwrite each other's data; stop the other one or give this tier its own file",
                        describe(&error)
                    ),
                    libc::EBUSY,
                ));
            }
        }
        let tail_bytes = if tier_mode { SUPERBLOCK_BYTES } else { 0 };
        let file_type = metadata.file_type();
        let (device_size_bytes, logical_block_bytes) = if file_type.is_block_device() {
            let device_size = block_device_size(&file).map_err(|error| {
                open_error(
                    format!("cannot read the block device size: {}", describe(&error)),
                    errno_of(&error),
                )
            })?;
            let size = match size_bytes {
                Some(wanted) if wanted.saturating_add(tail_bytes) > device_size => {
                    return Err(open_error(
                        format!(
                            "the block device holds {device_size} bytes, less than the \
                             {wanted} bytes asked for (plus {tail_bytes} for tierd's superblock)"
                        ),
                        libc::EINVAL,
                    ));
                }
                Some(wanted) => wanted,
                None if device_size <= tail_bytes => {
                    return Err(open_error(
                        format!("the block device holds only {device_size} bytes"),
                        libc::EINVAL,
                    ));
                }
                None => {
                    (device_size - tail_bytes) / DIRECT_ALIGNMENT_BYTES * DIRECT_ALIGNMENT_BYTES
                }
            };
            (size, block_device_logical_block_size(&file).unwrap_or(512))
        } else if file_type.is_file() {
            let length = metadata.len();
            let size = match size_bytes {
                Some(wanted) => {
                    let wanted_length = wanted.saturating_add(tail_bytes);
                    if length < wanted_length && extend {
                        file.set_len(wanted_length).map_err(|error| {
                            open_error(
                                format!(
                                    "cannot extend the file from {length} to {wanted_length} bytes: {}",
                                    describe(&error)
                                ),
                                errno_of(&error),
                            )
                        })?;
                    }
                    wanted
                }
                None if length == 0 => {
                    return Err(open_error(
                        "the file is empty: give the device a size".to_string(),
                        libc::EINVAL,
                    ));
                }
                None if tier_mode => {
                    if length > tail_bytes
                        && read_superblock_at(&file, length - tail_bytes, direct).is_some()
                    {
                        length - tail_bytes
                    } else if !extend {
                        length
                    } else {
                        file.set_len(length + tail_bytes).map_err(|error| {
                            open_error(
                                format!(
                                    "cannot extend the file by {tail_bytes} bytes for tierd's superblock: {}",
                                    describe(&error)
                                ),
                                errno_of(&error),
                            )
                        })?;
                        length
                    }
                }
                None => length,
            };
            (size, 512)
        } else {
            return Err(open_error(
                "not a regular file or a block device".to_string(),
                libc::EINVAL,
            ));
        };

        let alignment_bytes = DIRECT_ALIGNMENT_BYTES.max(logical_block_bytes);
        if direct && !device_size_bytes.is_multiple_of(alignment_bytes) {
            return Err(open_error(
                format!(
                    "with direct = true the size must be a multiple of {alignment_bytes} bytes, \
                     not {device_size_bytes}"
                ),
                libc::EINVAL,
            ));
        }
        let io = PsyncEngine::new(&file).map_err(|error| {
            open_error(
                format!("cannot duplicate the descriptor: {}", describe(&error)),
                errno_of(&error),
            )
        })?;
        Ok(FileDevice {
            name,
            path: path.to_path_buf(),
            io: Box::new(io),
            io_fallback: None,
            file,
            size_bytes: device_size_bytes,
            direct,
            block_device: file_type.is_block_device(),
            alignment_bytes,
            edge_locks: (0..EDGE_LOCKS).map(|_| Mutex::new(())).collect(),
            dsync_refused: AtomicBool::new(false),
            bounces: AtomicU64::new(0),
            tier: tier_mode.then(|| TierBacking {
                superblock_bytes: tail_bytes,
                identity: backing_identity(&metadata),
                expected_length_bytes: device_size_bytes + tail_bytes,
                failure: std::sync::OnceLock::new(),
                warning: Mutex::new(None),
            }),
        })
    }

    /// Runs reads and writes through the engine `kind`. An io_uring the
    /// kernel refuses leaves psync in place, logs why (a warning naming the
    /// device) and keeps the reason for [`FileDevice::io_engine_fallback`].
    pub fn with_io_engine(mut self, kind: IoEngineKind) -> DeviceResult<FileDevice> {
        if kind == self.io.kind() {
            return Ok(self);
        }
        let (engine, fallback) = io_engine::open_engine(kind, &self.file)
            .map_err(|error| self.error("open", 0, self.size_bytes, &error))?;
        if let Some(reason) = &fallback {
            tracing::warn!(device = %self.name, "io_engine = \"{}\" refused: {reason}", kind.name());
        }
        self.io = engine;
        self.io_fallback = fallback;
        Ok(self)
    }

    /// The engine reads and writes use.
    pub fn io_engine(&self) -> IoEngineKind {
        self.io.kind()
    }

    /// Why the engine asked for was refused and psync used instead.
    pub fn io_engine_fallback(&self) -> Option<&str> {
        self.io_fallback.as_deref()
    }

    /// Ends service: every later operation fails with EIO and `reason`.
    fn fail(&self, reason: String) {
        if let Some(tier) = &self.tier {
            // The first failure is the one reported.
            let _ = tier.failure.set(reason);
        }
    }

    /// A problem with the backing that does not stop service (deleted).
    pub fn warning(&self) -> Option<String> {
        self.tier
            .as_ref()
            .and_then(|tier| tier.warning.lock().clone())
    }

    /// Why this tier's backing stopped serving, if it did.
    pub fn failure(&self) -> Option<String> {
        self.tier
            .as_ref()
            .and_then(|tier| tier.failure.get().cloned())
    }

    /// Looks at the backing now: a regular file shorter than tierd made it,
    /// a path that names another file (replaced) fails the device; a
    /// deleted path only sets [`FileDevice::warning`] (the open file still
    /// holds the data). Returns the failure, if any.
    pub fn check_backing(&self) -> Option<String> {
        let tier = self.tier.as_ref()?;
        if let Some(failure) = self.failure() {
            return Some(failure);
        }
        let path = self.path.display();
        let reason = match (self.file.metadata(), std::fs::metadata(&self.path)) {
            (Ok(open), _) if open.file_type().is_file() && open.len() < tier.expected_length_bytes => Some(format!(
                "{path} was truncated to {} bytes while tierd was running (tierd made it {} bytes); the data past that is gone",
                open.len(),
                tier.expected_length_bytes
            )),
            (_, Err(error)) if error.kind() == io::ErrorKind::NotFound => {
                // The open file still holds every byte: keep serving, but
                // say so loudly (the data is gone once tierd stops).
                let mut warning = tier.warning.lock();
                if warning.is_none() {
                    *warning = Some(format!(
                        "{path} was deleted while tierd was running: tierd still serves it from the open file, but it disappears when tierd stops and the next start refuses. Copy it back now with `cp /proc/{}/fd/{} {path}` (while the server runs), or move its segments to another tier",
                        std::process::id(),
                        self.file.as_raw_fd()
                    ));
                }
                None
            }
            (_, Ok(now)) if backing_identity(&now) != tier.identity => Some(format!(
                "{path} was replaced by another file while tierd was running; writes would go to the old, unlinked file"
            )),
            _ => None,
        };
        if let Some(reason) = reason {
            self.fail(reason);
        }
        self.failure()
    }

    /// The identity block after the data area (tier mode): its bytes, or
    /// `None` when it cannot be read.
    pub fn read_superblock(&self) -> Option<Vec<u8>> {
        let tier = self.tier.as_ref()?;
        let mut block = vec![0u8; tier.superblock_bytes as usize];
        let offset = self.size_bytes;
        let result = if self.direct {
            with_bounce(block.len(), self.alignment_bytes as usize, |bounce| {
                pread_exact(&self.file, offset, bounce)?;
                block.copy_from_slice(bounce);
                Ok(())
            })
        } else {
            pread_exact(&self.file, offset, &mut block)
        };
        result.ok().map(|()| block)
    }

    /// A regular file's last [`SUPERBLOCK_BYTES`] when they hold a tierd
    /// superblock and are not where this tier's superblock belongs: names
    /// the tier a mixed-up file was made for.
    pub fn trailing_superblock(&self) -> Option<Vec<u8>> {
        self.tier.as_ref()?;
        let length = self.file.metadata().ok()?.len();
        if self.block_device
            || length < SUPERBLOCK_BYTES
            || length - SUPERBLOCK_BYTES == self.size_bytes
        {
            return None;
        }
        read_superblock_at(&self.file, length - SUPERBLOCK_BYTES, self.direct)
    }

    /// Writes the identity block (zero-padded to its size) and syncs it.
    pub fn write_superblock(&self, bytes: &[u8]) -> io::Result<()> {
        let Some(tier) = self.tier.as_ref() else {
            return Err(io::Error::other("not opened as a tier"));
        };
        if bytes.len() as u64 > tier.superblock_bytes {
            return Err(io::Error::other("superblock too large"));
        }
        let mut block = vec![0u8; tier.superblock_bytes as usize];
        block[..bytes.len()].copy_from_slice(bytes);
        if self.direct {
            with_bounce(block.len(), self.alignment_bytes as usize, |bounce| {
                bounce.copy_from_slice(&block);
                self.file.write_all_at(bounce, self.size_bytes)
            })?;
        } else {
            self.file.write_all_at(&block, self.size_bytes)?;
        }
        self.file.sync_data()
    }

    fn refuse_if_failed(
        &self,
        op: &'static str,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> DeviceResult<()> {
        match self.tier.as_ref().and_then(|tier| tier.failure.get()) {
            None => Ok(()),
            Some(reason) => Err(DeviceError {
                device: self.name.clone(),
                op,
                offset_bytes,
                length_bytes,
                kind: DeviceErrorKind::Gone,
                message: format!("the tier failed: {reason}"),
            }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when opened with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    /// Reads and writes so far that `O_DIRECT` made go through a bounce
    /// buffer (their buffer, offset or length was not aligned); aligned ones
    /// go straight to the kernel and are not counted.
    pub fn bounce_count(&self) -> u64 {
        self.bounces.load(Ordering::Relaxed)
    }

    /// Alignment direct IO uses (meaningful when [`FileDevice::is_direct`]).
    pub fn alignment_bytes(&self) -> u64 {
        self.alignment_bytes
    }

    fn error(
        &self,
        op: &'static str,
        offset_bytes: u64,
        length_bytes: u64,
        error: &io::Error,
    ) -> DeviceError {
        DeviceError {
            device: self.name.clone(),
            op,
            offset_bytes,
            length_bytes,
            kind: DeviceErrorKind::Io(errno_of(error)),
            message: describe(error),
        }
    }

    fn is_aligned(&self, address: usize, offset_bytes: u64, length: usize) -> bool {
        let alignment = self.alignment_bytes;
        (address as u64).is_multiple_of(alignment)
            && offset_bytes.is_multiple_of(alignment)
            && (length as u64).is_multiple_of(alignment)
    }

    /// Reads `buf.len()` bytes at `offset`. Bytes past the end of a tier's
    /// file (shrunk behind our back) fail the read with EIO and the tier with
    /// it; a plain device (no tier mode) reads them as zeroes.
    fn read_full(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            match self
                .io
                .read_at(&mut buf[done..], offset_bytes + done as u64)
            {
                Ok(0) => {
                    if self.tier.is_some() {
                        let at = offset_bytes + done as u64;
                        let length = self.file.metadata().map(|m| m.len()).unwrap_or(0);
                        let reason = format!(
                            "read at byte {at} found the end of the file: {} is {length} bytes now, shorter than the {} bytes tierd gave it (truncated while tierd was running)",
                            self.path.display(),
                            self.tier.as_ref().map_or(0, |tier| tier.expected_length_bytes)
                        );
                        self.fail(reason.clone());
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, reason));
                    }
                    buf[done..].fill(0);
                    break;
                }
                Ok(read) => done += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Locks the stripes of the given edge blocks in a fixed order.
    fn lock_edges(
        &self,
        first: Option<u64>,
        second: Option<u64>,
    ) -> (Option<MutexGuard<'_, ()>>, Option<MutexGuard<'_, ()>>) {
        let stripe = |block: u64| (block % EDGE_LOCKS as u64) as usize;
        let mut stripes = [first.map(stripe), second.map(stripe)];
        if stripes[0] == stripes[1] {
            stripes[1] = None;
        }
        stripes.sort_unstable_by_key(|stripe| stripe.unwrap_or(usize::MAX));
        // The lock guards no data, so a poisoned one is as good as any.
        let lock = |index: Option<usize>| index.map(|index| self.edge_locks[index].lock());
        let low = lock(stripes[0]);
        let high = lock(stripes[1]);
        (low, high)
    }

    fn direct_read(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.is_aligned(buf.as_ptr() as usize, offset_bytes, buf.len()) {
            return self.read_full(offset_bytes, buf);
        }
        self.bounces.fetch_add(1, Ordering::Relaxed);
        let alignment = self.alignment_bytes;
        let start = offset_bytes / alignment * alignment;
        let end = (offset_bytes + buf.len() as u64).div_ceil(alignment) * alignment;
        let skip = (offset_bytes - start) as usize;
        with_bounce((end - start) as usize, alignment as usize, |bounce| {
            self.read_full(start, bounce)?;
            buf.copy_from_slice(&bounce[skip..skip + buf.len()]);
            Ok(())
        })
    }

    fn direct_write(&self, offset_bytes: u64, data: &[u8], durable: bool) -> io::Result<()> {
        if self.is_aligned(data.as_ptr() as usize, offset_bytes, data.len()) {
            return self.pwrite_all(data, offset_bytes, durable);
        }
        self.bounces.fetch_add(1, Ordering::Relaxed);
        let alignment = self.alignment_bytes;
        let end_bytes = offset_bytes + data.len() as u64;
        let start = offset_bytes / alignment * alignment;
        let end = end_bytes.div_ceil(alignment) * alignment;
        let first_block = start / alignment;
        let last_block = end / alignment - 1;
        let head_partial = offset_bytes != start;
        let tail_partial = end_bytes != end;
        let _guards = self.lock_edges(
            head_partial.then_some(first_block),
            tail_partial.then_some(last_block),
        );
        let skip = (offset_bytes - start) as usize;
        let block = alignment as usize;
        with_bounce((end - start) as usize, block, |bounce| {
            let length = bounce.len();
            if head_partial {
                self.read_full(start, &mut bounce[..block])?;
            }
            if tail_partial && !(head_partial && first_block == last_block) {
                self.read_full(end - alignment, &mut bounce[length - block..])?;
            }
            bounce[skip..skip + data.len()].copy_from_slice(data);
            self.pwrite_all(bounce, start, durable)
        })
    }

    /// `durable`: the bytes are durable when this returns (FUA).
    fn write_bytes(&self, offset_bytes: u64, data: &[u8], durable: bool) -> io::Result<()> {
        if self.direct {
            self.direct_write(offset_bytes, data, durable)
        } else {
            self.pwrite_all(data, offset_bytes, durable)
        }
    }

    /// Writes all of `data` at `offset_bytes`; `durable` adds `RWF_DSYNC`
    /// (only this range is synced, with the device cache flush or FUA it
    /// needs), or `fdatasync` after the write where the kernel refuses it.
    fn pwrite_all(&self, data: &[u8], offset_bytes: u64, durable: bool) -> io::Result<()> {
        if !durable {
            return self.write_all(data, offset_bytes, false);
        }
        if !self.dsync_refused.load(Ordering::Relaxed) {
            match self.write_all(data, offset_bytes, true) {
                Ok(()) => return Ok(()),
                Err(error) if dsync_refused(&error) => {
                    // Nothing was written: the first call was refused.
                    if !self.dsync_refused.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            device = %self.name,
                            error = %error,
                            "the kernel refuses pwritev2(RWF_DSYNC); FUA writes fall back to write + fdatasync of the whole file"
                        );
                    }
                }
                Err(error) => return Err(error),
            }
        }
        self.write_all(data, offset_bytes, false)?;
        sync_data(&self.file)
    }

    /// The engine's write until all of `data` is written (`durable`: each
    /// call returns once the bytes it wrote are durable).
    fn write_all(&self, data: &[u8], offset_bytes: u64, durable: bool) -> io::Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            match self
                .io
                .write_at(&data[done..], offset_bytes + done as u64, durable)?
            {
                0 => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                written => done += written,
            }
        }
        Ok(())
    }

    /// Tests: act as if the kernel had refused `RWF_DSYNC`.
    #[cfg(test)]
    fn refuse_dsync(&self) {
        self.dsync_refused.store(true, Ordering::Relaxed);
    }

    /// True once the kernel refused `RWF_DSYNC` on this device.
    pub fn dsync_fallback(&self) -> bool {
        self.dsync_refused.load(Ordering::Relaxed)
    }

    /// `fallocate(2)` on the whole range.
    fn fallocate(&self, mode: libc::c_int, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
        let offset = libc::off_t::try_from(offset_bytes).map_err(|_| invalid())?;
        let length = libc::off_t::try_from(length_bytes).map_err(|_| invalid())?;
        loop {
            // SAFETY: fallocate takes a descriptor we own and plain integers.
            let result = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, offset, length) };
            if result == 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }

    /// Writes zeroes over the range, a megabyte at a time.
    fn write_zero_bytes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        let mut done = 0u64;
        while done < length_bytes {
            let piece = (length_bytes - done).min(ZEROES.0.len() as u64) as usize;
            self.write_bytes(offset_bytes + done, &ZEROES.0[..piece], false)?;
            done += piece as u64;
        }
        Ok(())
    }

    /// Tries each `fallocate` mode in turn; when all are refused as
    /// unsupported, writes zeroes.
    fn zero_with(
        &self,
        op: &'static str,
        modes: &[libc::c_int],
        offset_bytes: u64,
        length_bytes: u64,
    ) -> DeviceResult<()> {
        check_range(&self.name, op, offset_bytes, length_bytes, self.size_bytes)?;
        if length_bytes == 0 {
            return Ok(());
        }
        self.refuse_if_failed(op, offset_bytes, length_bytes)?;
        for &mode in modes {
            match self.fallocate(mode, offset_bytes, length_bytes) {
                Ok(()) => return Ok(()),
                Err(error) if refused(&error) => continue,
                Err(error) => return Err(self.error(op, offset_bytes, length_bytes, &error)),
            }
        }
        self.write_zero_bytes(offset_bytes, length_bytes)
            .map_err(|error| self.error(op, offset_bytes, length_bytes, &error))
    }
}

/// Errors by which the kernel says it does not know `pwritev2` or its
/// `RWF_DSYNC` flag (before Linux 4.7, or a seccomp filter): the caller falls
/// back to `pwrite` + `fdatasync`.
fn dsync_refused(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS))
}

/// `fdatasync`, retried on EINTR.
fn sync_data(file: &File) -> io::Result<()> {
    loop {
        match file.sync_data() {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            result => return result,
        }
    }
}

/// Errors by which a filesystem or device says "not this way": the caller
/// falls back to writing zeroes. (EINVAL: a block device wants 512-byte
/// alignment, or an old kernel does not know the mode.)
fn refused(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL | libc::ENODEV | libc::ENOTTY)
    )
}

/// Runs `action` on an aligned, initialised scratch slice of `length` bytes
/// (contents unspecified), reusing a per-thread buffer when it can.
fn with_bounce<T>(
    length: usize,
    alignment: usize,
    action: impl FnOnce(&mut [u8]) -> io::Result<T>,
) -> io::Result<T> {
    fn run<T>(
        storage: &mut Vec<u8>,
        length: usize,
        alignment: usize,
        action: impl FnOnce(&mut [u8]) -> io::Result<T>,
    ) -> io::Result<T> {
        let needed = length + alignment;
        if storage.len() < needed {
            storage.resize(needed, 0);
        }
        let shift = storage.as_ptr().align_offset(alignment);
        action(&mut storage[shift..shift + length])
    }
    let mut action = Some(action);
    if length + alignment <= BOUNCE_KEEP_BYTES {
        let reused = BOUNCE
            .try_with(|cell| {
                let mut storage = cell.try_borrow_mut().ok()?;
                let action = action.take()?;
                Some(run(&mut storage, length, alignment, action))
            })
            .ok()
            .flatten();
        if let Some(result) = reused {
            return result;
        }
    }
    match action.take() {
        Some(action) => run(&mut Vec::new(), length, alignment, action),
        None => Err(io::Error::from_raw_os_error(libc::EIO)),
    }
}

/// Bytes after a tier's data area that hold its identity superblock.
pub const SUPERBLOCK_BYTES: u64 = 4096;

/// Runs one [`BlockDevice::allocation`] answer of a file finds at most (two
/// `lseek` calls each); the rest of the range is then reported allocated,
/// which is always a correct answer. The volume asks for fewer runs than
/// this in one answer, so it never passes that tail on to a client.
pub const MAX_ALLOCATION_RUNS: usize = 1024;

/// `lseek(fd, offset, whence)` for `SEEK_DATA` / `SEEK_HOLE`: `Ok(None)`
/// when the kernel says ENXIO (no data at or after `offset`).
fn seek_extent(file: &File, offset_bytes: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let offset = libc::off_t::try_from(offset_bytes)
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: lseek on a descriptor we own, with plain integers. It moves
    // the descriptor's file position, which nothing here uses (all IO is
    // positioned).
    let result = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if result >= 0 {
        return Ok(Some(result as u64));
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(error)
    }
}

/// The data and holes of `file` in `[offset, end)`, from
/// `lseek(SEEK_DATA/SEEK_HOLE)`: what the file system has allocated, at its
/// block granularity (ranges of unwritten extents whose pages are cached
/// count as data). Bytes at or past `file_length` are reported allocated (a
/// tier's reads there fail rather than return zeroes). After `max_runs`
/// runs the rest is reported allocated. `None` when the file system
/// refuses the calls.
fn file_allocation(
    file: &File,
    offset_bytes: u64,
    end_bytes: u64,
    file_length: u64,
    max_runs: usize,
) -> Option<Vec<super::AllocationRun>> {
    let mut runs = super::AllocationRuns::default();
    let known_end = end_bytes.min(file_length);
    let mut position = offset_bytes;
    while position < known_end && runs.len() < max_runs {
        let data = match seek_extent(file, position, libc::SEEK_DATA).ok()? {
            Some(data) => data.min(known_end),
            None => known_end,
        };
        if data < position {
            // A file system that answers backwards: trust nothing.
            return None;
        }
        runs.push(data - position, false);
        position = data;
        if position >= known_end {
            break;
        }
        let hole = match seek_extent(file, position, libc::SEEK_HOLE).ok()? {
            // There is always a hole at the end of the file; a missing one
            // means the file shrank under us: the rest counts as data.
            Some(hole) if hole > position => hole.min(known_end),
            _ => known_end,
        };
        runs.push(hole - position, true);
        position = hole;
    }
    runs.push(end_bytes - position, true);
    Some(runs.into_runs())
}

/// `pread` of exactly `buf.len()` bytes (EOF is an error).
fn pread_exact(file: &File, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset_bytes + done as u64) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(read) => done += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// The superblock bytes at `offset` when they start with tierd's magic.
fn read_superblock_at(file: &File, offset_bytes: u64, direct: bool) -> Option<Vec<u8>> {
    let mut block = vec![0u8; SUPERBLOCK_BYTES as usize];
    let result = if direct {
        with_bounce(block.len(), SUPERBLOCK_BYTES as usize, |bounce| {
            pread_exact(file, offset_bytes, bounce)?;
            block.copy_from_slice(bounce);
            Ok(())
        })
    } else {
        pread_exact(file, offset_bytes, &mut block)
    };
    result.ok()?;
    crate::identity::has_superblock_magic(&block).then_some(block)
}

fn block_device_size(file: &File) -> io::Result<u64> {
    let mut size_bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at
    // a live local of that type.
    let result = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            BLKGETSIZE64 as _,
            &mut size_bytes as *mut u64,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size_bytes)
}

fn block_device_logical_block_size(file: &File) -> Option<u64> {
    let mut size_bytes: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points at a
    // live local of that type.
    let result = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::BLKSSZGET,
            &mut size_bytes as *mut libc::c_int,
        )
    };
    if result < 0 {
        return None;
    }
    u64::try_from(size_bytes).ok().filter(|&size| size > 0)
}

impl std::fmt::Debug for FileDevice {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("FileDevice")
            .field("path", &self.path)
            .field("size_bytes", &self.size_bytes)
            .field("direct", &self.direct)
            .field("io_engine", &self.io.kind())
            .finish_non_exhaustive()
    }
}

impl BlockDevice for FileDevice {
    /// Drops the range's clean pages from the page cache
    /// (`POSIX_FADV_DONTNEED`; dirty ones are written back first by the
    /// kernel). After a promotion the home file's pages of the segment are
    /// a second copy nobody reads, and pages a copy read from holes of a
    /// sparse file make every later write into them cost a block
    /// allocation walk (measured: a write-through memory tier's writes ran
    /// at 0.4-0.7x the home file alone until they were dropped).
    fn release_cache(&self, offset_bytes: u64, length_bytes: u64) {
        if self.direct || length_bytes == 0 {
            return;
        }
        let (Ok(offset), Ok(length)) = (
            libc::off_t::try_from(offset_bytes),
            libc::off_t::try_from(length_bytes),
        ) else {
            return;
        };
        // SAFETY: a plain advice call on our own open descriptor; it reads
        // and writes no memory of ours.
        let rc = unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset,
                length,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if rc != 0 {
            tracing::debug!(device = %self.name, rc, "posix_fadvise(DONTNEED) refused; pages stay cached");
        }
    }

    fn backing_warning(&self) -> Option<String> {
        FileDevice::warning(self)
    }

    /// A regular file's holes (`lseek` `SEEK_DATA`/`SEEK_HOLE`): device
    /// byte `n` is file byte `n` (a tier's superblock lies after the data
    /// area), so the file's holes are the device's, at the file system's
    /// block size. A punched range (`discard`) or one zeroed with
    /// `FALLOC_FL_ZERO_RANGE` is a hole until written again. `None` for a
    /// block device, a failed tier or a file system that cannot tell; at
    /// most [`MAX_ALLOCATION_RUNS`] runs, then the rest counts as data.
    fn allocation(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Option<Vec<super::AllocationRun>> {
        if self.block_device
            || check_range(
                &self.name,
                "allocation",
                offset_bytes,
                length_bytes,
                self.size_bytes,
            )
            .is_err()
            || self.failure().is_some()
        {
            return None;
        }
        if length_bytes == 0 {
            return Some(Vec::new());
        }
        let file_length = self.file.metadata().ok()?.len();
        file_allocation(
            &self.file,
            offset_bytes,
            offset_bytes + length_bytes,
            file_length,
            MAX_ALLOCATION_RUNS,
        )
    }

    fn failure(&self) -> Option<String> {
        FileDevice::failure(self)
    }

    fn check_backing(&self) -> Option<String> {
        FileDevice::check_backing(self)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn is_volatile(&self) -> bool {
        false
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        let length_bytes = buf.len() as u64;
        check_range(
            &self.name,
            "read",
            offset_bytes,
            length_bytes,
            self.size_bytes,
        )?;
        if buf.is_empty() {
            return Ok(());
        }
        self.refuse_if_failed("read", offset_bytes, length_bytes)?;
        let result = if self.direct {
            self.direct_read(offset_bytes, buf)
        } else {
            self.read_full(offset_bytes, buf)
        };
        result.map_err(|error| self.error("read", offset_bytes, length_bytes, &error))
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        let length_bytes = data.len() as u64;
        check_range(
            &self.name,
            "write",
            offset_bytes,
            length_bytes,
            self.size_bytes,
        )?;
        if data.is_empty() {
            return Ok(());
        }
        self.refuse_if_failed("write", offset_bytes, length_bytes)?;
        self.write_bytes(offset_bytes, data, false)
            .map_err(|error| self.error("write", offset_bytes, length_bytes, &error))
    }

    /// `pwritev2(RWF_DSYNC)`: this range only, no `fdatasync` of the file.
    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        let length_bytes = data.len() as u64;
        check_range(
            &self.name,
            "write",
            offset_bytes,
            length_bytes,
            self.size_bytes,
        )?;
        if data.is_empty() {
            return Ok(());
        }
        self.refuse_if_failed("write", offset_bytes, length_bytes)?;
        self.write_bytes(offset_bytes, data, true)
            .map_err(|error| self.error("write", offset_bytes, length_bytes, &error))
    }

    fn flush(&self) -> DeviceResult<()> {
        self.refuse_if_failed("flush", 0, 0)?;
        sync_data(&self.file).map_err(|error| self.error("flush", 0, 0, &error))
    }

    /// Punches a hole (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`), or
    /// writes zeroes where that is refused.
    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.zero_with(
            "discard",
            &[libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE],
            offset_bytes,
            length_bytes,
        )
    }

    /// `FALLOC_FL_ZERO_RANGE`, else a punched hole, else written zeroes.
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        self.zero_with(
            "write_zeroes",
            &[
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            ],
            offset_bytes,
            length_bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn pattern(seed: u8, length: usize) -> Vec<u8> {
        (0..length)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) | 0x80)
            .collect()
    }

    /// Pages of `file`'s first `length` bytes resident in the page cache.
    fn resident_pages(file: &File, length: usize) -> usize {
        let page = 4096usize;
        // SAFETY: a read-only shared mapping of our own file, unmapped
        // below; mincore writes one byte per page into `residency`.
        unsafe {
            let address = libc::mmap(
                std::ptr::null_mut(),
                length,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(address, libc::MAP_FAILED, "mmap");
            let mut residency = vec![0u8; length.div_ceil(page)];
            let rc = libc::mincore(address, length, residency.as_mut_ptr());
            libc::munmap(address, length);
            assert_eq!(rc, 0, "mincore");
            residency.iter().filter(|byte| **byte & 1 == 1).count()
        }
    }

    #[test]
    fn release_cache_drops_the_ranges_pages_and_keeps_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let size = 1 << 20;
        let device =
            FileDevice::open(dir.path().join("t.img"), Some(size as u64), false, true).unwrap();
        let data = pattern(7, size);
        device.write_at(0, &data).unwrap();
        device.flush().unwrap();
        let mut back = vec![0u8; size];
        device.read_at(0, &mut back).unwrap();
        let before = resident_pages(&device.file, size);
        assert_eq!(
            before,
            size / 4096,
            "the file's pages were read into the cache"
        );
        device.release_cache(0, 0);
        assert_eq!(resident_pages(&device.file, size), before);
        // The whole range (a kernel drops only whole folios, and large
        // folios may span the file; the engine releases whole segments).
        device.release_cache(0, size as u64);
        let after = resident_pages(&device.file, size);
        assert_eq!(after, 0, "the range's pages were dropped");
        // Dirty pages are written back, not lost; the data is unchanged.
        device.write_at(4096, &pattern(9, 4096)).unwrap();
        device.release_cache(0, size as u64);
        device.read_at(0, &mut back).unwrap();
        assert_eq!(&back[..4096], &data[..4096]);
        assert_eq!(&back[4096..8192], &pattern(9, 4096)[..]);
        assert_eq!(&back[8192..], &data[8192..]);
    }

    /// Opens a direct device in `directory`, or says why the filesystem
    /// refuses and returns `None`.
    fn open_direct(path: &Path, size_bytes: u64) -> Option<FileDevice> {
        match FileDevice::open(path, Some(size_bytes), true, true) {
            Ok(device) => Some(device),
            Err(error) if error.message.contains("set direct = false") => {
                eprintln!("skipping the O_DIRECT case: {error}");
                None
            }
            Err(error) => panic!("unexpected error: {error}"),
        }
    }

    /// Writes at awkward offsets and lengths and checks every byte against a
    /// shadow copy.
    fn round_trip(device: &FileDevice) {
        let size = device.size_bytes() as usize;
        let mut shadow = vec![0u8; size];
        let writes: [(usize, usize); 7] = [
            (0, 4096),
            (1, 1),
            (4095, 2),
            (8192 + 100, 10_000),
            (3 * 4096, 4096),
            (size - 700, 700),
            (20_000, 1),
        ];
        for (index, &(offset, length)) in writes.iter().enumerate() {
            let data = pattern(index as u8, length);
            device.write_at(offset as u64, &data).unwrap();
            shadow[offset..offset + length].copy_from_slice(&data);
        }
        for &(offset, length) in &[(0usize, size), (1, 4097), (4090, 20), (size - 1, 1)] {
            let mut back = vec![0u8; length];
            device.read_at(offset as u64, &mut back).unwrap();
            assert_eq!(
                back,
                &shadow[offset..offset + length],
                "at {offset}+{length}"
            );
        }
    }

    #[test]
    fn buffered_round_trip_and_persistence() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("tier.img");
        let device = FileDevice::open(&path, Some(64 * 1024), false, true).unwrap();
        assert_eq!(device.size_bytes(), 64 * 1024);
        assert!(!device.is_volatile());
        round_trip(&device);
        device.write_at(5_000, b"persist me").unwrap();
        device.flush().unwrap();
        drop(device);
        // Reopen without a size: the file's length is the size.
        let device = FileDevice::open(&path, None, false, false).unwrap();
        assert_eq!(device.size_bytes(), 64 * 1024);
        let mut back = [0u8; 10];
        device.read_at(5_000, &mut back).unwrap();
        assert_eq!(&back, b"persist me");
    }

    #[test]
    fn direct_round_trip_and_persistence() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("direct.img");
        let Some(device) = open_direct(&path, 64 * 1024) else {
            return;
        };
        assert!(device.is_direct());
        round_trip(&device);
        let bounced = device.bounce_count();
        assert!(
            bounced > 0,
            "unaligned requests go through the bounce buffer"
        );
        // An aligned buffer, offset and length take the zero-copy path.
        let mut aligned = vec![0u8; 3 * 4096];
        let shift = aligned.as_ptr().align_offset(4096);
        let data = pattern(77, 4096);
        aligned[shift..shift + 4096].copy_from_slice(&data);
        device
            .write_at(8192, &aligned[shift..shift + 4096])
            .unwrap();
        device
            .read_at(8192, &mut aligned[shift..shift + 4096])
            .unwrap();
        assert_eq!(device.bounce_count(), bounced, "aligned IO is not bounced");
        device.flush().unwrap();
        drop(device);
        let device = FileDevice::open(&path, None, false, false).unwrap();
        let mut back = vec![0u8; 4096];
        device.read_at(8192, &mut back).unwrap();
        assert_eq!(back, data);
    }

    /// FUA writes through `pwritev2(RWF_DSYNC)` and through the fallback,
    /// buffered and direct, aligned and not, land where plain writes do.
    #[test]
    fn durable_writes_land_with_and_without_rwf_dsync() {
        let directory = tempfile::tempdir().unwrap();
        for (direct, fallback) in [(false, false), (false, true), (true, false), (true, true)] {
            let path = directory
                .path()
                .join(format!("fua-{direct}-{fallback}.img"));
            let device = if direct {
                match open_direct(&path, 64 * 1024) {
                    Some(device) => device,
                    None => continue,
                }
            } else {
                FileDevice::open(&path, Some(64 * 1024), false, true).unwrap()
            };
            if fallback {
                device.refuse_dsync();
            }
            let mut shadow = vec![0u8; 64 * 1024];
            for (index, &(offset, length)) in [(0usize, 4096usize), (4096 + 10, 5000), (60_000, 1)]
                .iter()
                .enumerate()
            {
                let data = pattern(index as u8 + 40, length);
                device.write_at_durable(offset as u64, &data).unwrap();
                shadow[offset..offset + length].copy_from_slice(&data);
            }
            assert_eq!(device.dsync_fallback(), fallback, "direct {direct}");
            drop(device);
            let device = FileDevice::open(&path, None, false, false).unwrap();
            let mut back = vec![0u8; 64 * 1024];
            device.read_at(0, &mut back).unwrap();
            assert_eq!(back, shadow, "direct {direct}, fallback {fallback}");
            let error = device.write_at_durable(64 * 1024 - 1, &[1, 2]).unwrap_err();
            assert_eq!(error.kind, DeviceErrorKind::OutOfRange);
        }
    }

    /// The io_uring engine under the device: buffered and direct, aligned
    /// and bounced, plain and durable, and many threads on one ring.
    #[test]
    fn the_uring_engine_serves_the_device_like_psync() {
        let directory = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = directory.path().join(format!("uring-{direct}.img"));
            let device = if direct {
                match open_direct(&path, 64 * 1024) {
                    Some(device) => device,
                    None => continue,
                }
            } else {
                FileDevice::open(&path, Some(64 * 1024), false, true).unwrap()
            };
            let device = device.with_io_engine(IoEngineKind::Uring).unwrap();
            if let Some(reason) = device.io_engine_fallback() {
                assert_eq!(device.io_engine(), IoEngineKind::Psync);
                eprintln!("skipping: io_uring refused here: {reason}");
                return;
            }
            assert_eq!(device.io_engine(), IoEngineKind::Uring);
            round_trip(&device);
            device.write_at_durable(4096, &pattern(9, 4096)).unwrap();
            let mut back = vec![0u8; 4096];
            device.read_at(4096, &mut back).unwrap();
            assert_eq!(back, pattern(9, 4096));
            let device = Arc::new(device);
            let threads: Vec<_> = (0..4u8)
                .map(|thread| {
                    let device = Arc::clone(&device);
                    std::thread::spawn(move || {
                        for round in 0..50u8 {
                            let offset = u64::from(thread) * 16384 + u64::from(round % 4) * 4096;
                            let data = pattern(thread.wrapping_mul(50).wrapping_add(round), 4096);
                            device.write_at(offset, &data).unwrap();
                            let mut back = vec![0u8; 4096];
                            device.read_at(offset, &mut back).unwrap();
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

    #[test]
    fn direct_requires_an_aligned_size() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("odd.img");
        match FileDevice::open(&path, Some(10_000), true, true) {
            Ok(_) => panic!("an unaligned direct size must be refused"),
            Err(error) => assert!(
                error.message.contains("multiple of") || error.message.contains("direct = false"),
                "{error}"
            ),
        }
    }

    #[test]
    fn direct_on_tmpfs_is_refused_clearly_or_works() {
        // /dev/shm is tmpfs on Linux; kernels before 6.6 refuse O_DIRECT there.
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            eprintln!("skipping: no /dev/shm");
            return;
        }
        let directory = match tempfile::tempdir_in(shm) {
            Ok(directory) => directory,
            Err(error) => {
                eprintln!("skipping: cannot use /dev/shm: {error}");
                return;
            }
        };
        let path = directory.path().join("direct.img");
        match FileDevice::open(&path, Some(64 * 1024), true, true) {
            Ok(device) => round_trip(&device),
            Err(error) => {
                assert!(error.message.contains("set direct = false"), "{error}");
                assert_eq!(error.kind, DeviceErrorKind::Io(libc::EINVAL));
                assert!(error.device.contains("direct.img"));
            }
        }
    }

    #[test]
    fn concurrent_unaligned_writes_to_one_block_lose_nothing() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("stripes.img");
        let Some(device) = open_direct(&path, 16 * 4096) else {
            return;
        };
        let device = Arc::new(device);
        // Each thread owns every fourth 16-byte slot of blocks 1..3, so the
        // threads keep hitting the same blocks with read-modify-writes.
        let threads = 4usize;
        let slot = 16usize;
        let slots = 2 * 4096 / slot;
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let device = Arc::clone(&device);
                std::thread::spawn(move || {
                    for index in (thread..slots).step_by(threads) {
                        let offset = 4096 + index * slot;
                        let data = pattern(index as u8, slot);
                        device.write_at(offset as u64, &data).unwrap();
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        for index in 0..slots {
            let mut back = vec![0u8; slot];
            device
                .read_at((4096 + index * slot) as u64, &mut back)
                .unwrap();
            assert_eq!(back, pattern(index as u8, slot), "slot {index}");
        }
    }

    #[test]
    fn discard_and_write_zeroes_read_back_zeroes() {
        let directory = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = directory.path().join(format!("zero-{direct}.img"));
            let device = if direct {
                match open_direct(&path, 256 * 1024) {
                    Some(device) => device,
                    None => continue,
                }
            } else {
                FileDevice::open(&path, Some(256 * 1024), false, true).unwrap()
            };
            let data = pattern(5, 256 * 1024);
            device.write_at(0, &data).unwrap();
            // Unaligned ranges: the filesystem zeroes partial blocks itself.
            device.discard(1_000, 70_000).unwrap();
            device.write_zeroes(150_000, 30_001).unwrap();
            let mut back = vec![0u8; data.len()];
            device.read_at(0, &mut back).unwrap();
            for (index, (&got, &wrote)) in back.iter().zip(&data).enumerate() {
                let zeroed =
                    (1_000..71_000).contains(&index) || (150_000..180_001).contains(&index);
                let expected = if zeroed { 0 } else { wrote };
                assert_eq!(got, expected, "byte {index} (direct {direct})");
            }
            // The write-zeroes fallback path writes the same zeroes.
            device.write_zero_bytes(100_000, 5_000).unwrap();
            device.read_at(99_999, &mut back[..5_002]).unwrap();
            assert_eq!(back[0], data[99_999]);
            assert!(back[1..5_001].iter().all(|&b| b == 0));
            assert_eq!(back[5_001], data[105_000]);
        }
    }

    #[test]
    fn out_of_range_is_rejected_without_touching_data() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("range.img");
        let device = FileDevice::open(&path, Some(8192), false, true).unwrap();
        device.write_at(0, &[9; 8192]).unwrap();
        for error in [
            device.write_at(8000, &[1; 200]).unwrap_err(),
            device.discard(4096, 4097).unwrap_err(),
            device.write_zeroes(u64::MAX, 2).unwrap_err(),
            device.read_at(8192, &mut [0u8; 1]).unwrap_err(),
        ] {
            assert_eq!(error.kind, DeviceErrorKind::OutOfRange);
            assert!(error.device.contains("range.img"));
        }
        let mut back = vec![0u8; 8192];
        device.read_at(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 9));
        // The file did not grow.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 8192);
    }

    #[test]
    fn open_errors_name_the_path_and_the_cause() {
        let directory = tempfile::tempdir().unwrap();
        let missing = directory.path().join("missing.img");
        let error = FileDevice::open(&missing, Some(4096), false, false).unwrap_err();
        assert_eq!(error.kind, DeviceErrorKind::Io(libc::ENOENT));
        assert!(error.device.contains("missing.img"));
        assert!(error.message.contains("must exist"), "{error}");

        let empty = directory.path().join("empty.img");
        std::fs::write(&empty, b"").unwrap();
        let error = FileDevice::open(&empty, None, false, false).unwrap_err();
        assert!(error.message.contains("empty"), "{error}");

        let error = FileDevice::open(directory.path(), None, false, false).unwrap_err();
        assert!(error
            .device
            .contains(&directory.path().display().to_string()));
    }

    #[test]
    fn a_longer_file_is_used_up_to_the_size_and_not_truncated() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("long.img");
        std::fs::write(&path, vec![3u8; 10_000]).unwrap();
        let device = FileDevice::open(&path, Some(4096), false, false).unwrap();
        assert_eq!(device.size_bytes(), 4096);
        assert!(device.write_at(4096, &[1]).is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 10_000);
    }

    /// The file system's allocation unit for `path` (`st_blksize`), or
    /// `None` (with the reason printed) when it keeps no holes: a fresh
    /// sparse file then reads back as one allocated run, and hole tests
    /// have nothing to check.
    fn hole_granularity(device: &FileDevice) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let runs = device.allocation(0, device.size_bytes())?;
        if runs.iter().all(|run| run.allocated) {
            eprintln!(
                "skipping: the file system under {} reports no holes in a sparse file",
                device.path().display()
            );
            return None;
        }
        Some(device.file.metadata().unwrap().blksize())
    }

    /// Runs as `(start, end, allocated)` from `offset`.
    fn spans(offset: u64, runs: &[super::super::AllocationRun]) -> Vec<(u64, u64, bool)> {
        let mut start = offset;
        runs.iter()
            .map(|run| {
                let span = (start, start + run.length_bytes, run.allocated);
                start += run.length_bytes;
                span
            })
            .collect()
    }

    /// Every byte the answer calls a hole reads as zeroes.
    fn holes_read_as_zeroes(
        device: &dyn BlockDevice,
        offset: u64,
        runs: &[super::super::AllocationRun],
    ) {
        for (start, end, allocated) in spans(offset, runs) {
            if !allocated {
                let mut back = vec![1u8; (end - start) as usize];
                device.read_at(start, &mut back).unwrap();
                assert!(
                    back.iter().all(|&byte| byte == 0),
                    "the hole {start}..{end} holds data"
                );
            }
        }
    }

    /// A fresh file is one hole; written ranges become data rounded out to
    /// the file system's block; a discard punches its whole blocks back
    /// into a hole; every hole reads as zeroes; partial queries cover
    /// exactly what was asked. Buffered and direct.
    #[test]
    fn allocation_follows_writes_and_punched_holes() {
        let directory = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = directory.path().join(format!("holes-{direct}.img"));
            let size = 1u64 << 20;
            let device = if direct {
                match open_direct(&path, size) {
                    Some(device) => device,
                    None => continue,
                }
            } else {
                FileDevice::open(&path, Some(size), false, true).unwrap()
            };
            let Some(block) = hole_granularity(&device) else {
                return;
            };
            assert_eq!(
                device.allocation(0, size).unwrap(),
                vec![super::super::AllocationRun {
                    length_bytes: size,
                    allocated: false
                }]
            );
            device.write_at(64 << 10, &pattern(1, 4096)).unwrap();
            device.write_at(200_000, &pattern(2, 10)).unwrap();
            device.write_at(512 << 10, &pattern(3, 64 << 10)).unwrap();
            device.discard((512 << 10) + 16384, 16384).unwrap();
            let round_down = |at: u64| at / block * block;
            let round_up = |at: u64| at.div_ceil(block) * block;
            let mut expected = super::super::AllocationRuns::default();
            let mut at = 0;
            for (start, end) in [
                (64 << 10, (64 << 10) + 4096),
                (200_000, 200_010),
                (512 << 10, (512 << 10) + 16384),
                ((512 << 10) + 32768, 576 << 10),
            ] {
                let (start, end) = (round_down(start).max(at), round_up(end));
                expected.push(start - at, false);
                expected.push(end - start, true);
                at = end;
            }
            expected.push(size - at, false);
            let runs = device.allocation(0, size).unwrap();
            assert_eq!(runs, expected.into_runs(), "direct {direct}");
            holes_read_as_zeroes(&device, 0, &runs);
            // Queries that start and end inside runs cover exactly their range.
            for (offset, length) in [
                (1u64, 100u64),
                (65_000, 10_000),
                (200_001, 1),
                (530_000, 60_000),
            ] {
                let runs = device.allocation(offset, length).unwrap();
                assert!(
                    super::super::AllocationRun::covers(&runs, length),
                    "{offset}+{length}: {runs:?}"
                );
                holes_read_as_zeroes(&device, offset, &runs);
                for (start, end, allocated) in spans(offset, &runs) {
                    let written = device.allocation(start, end - start).unwrap();
                    assert_eq!(written.len(), 1, "{start}..{end} is one run");
                    assert_eq!(written[0].allocated, allocated);
                }
            }
            assert_eq!(device.allocation(0, 0), Some(Vec::new()));
            assert_eq!(device.allocation(size - 1, 2), None, "out of range");
        }
    }

    /// Bytes past the file's end (a plain device over a file cut short
    /// behind its back) count as data; the run cap reports the rest of the
    /// range allocated and still covers it exactly.
    #[test]
    fn allocation_past_the_end_and_past_the_run_cap_is_data() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("short.img");
        let size = 256u64 << 10;
        let device = FileDevice::open(&path, Some(size), false, true).unwrap();
        let Some(block) = hole_granularity(&device) else {
            return;
        };
        // Five islands of data, one block each, 32 KiB apart.
        for island in 0..5u64 {
            device
                .write_at(
                    island * 32768 + 8192,
                    &pattern(island as u8, block as usize),
                )
                .unwrap();
        }
        let runs = file_allocation(&device.file, 0, size, size, 5).unwrap();
        assert!(super::super::AllocationRun::covers(&runs, size), "{runs:?}");
        let capped = spans(0, &runs);
        // Hole, data, hole, data, hole: five runs, then the rest is data
        // (the third island's run merges into it).
        assert_eq!(
            capped,
            vec![
                (0, 8192, false),
                (8192, 8192 + block, true),
                (8192 + block, 32768 + 8192, false),
                (32768 + 8192, 32768 + 8192 + block, true),
                (32768 + 8192 + block, 2 * 32768 + 8192, false),
                (2 * 32768 + 8192, size, true),
            ]
        );

        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100_000)
            .unwrap();
        let runs = device.allocation(0, size).unwrap();
        let spans = spans(0, &runs);
        let last = *spans.last().unwrap();
        assert!(last.2 && last.0 <= 100_000 && last.1 == size, "{spans:?}");
        assert!(spans
            .iter()
            .all(|&(_, end, allocated)| allocated || end <= 100_000));
    }
}
