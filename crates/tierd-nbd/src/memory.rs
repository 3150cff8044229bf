//! An export held in memory: for tests, examples, fuzzing and speed checks
//! of the protocol path (`examples/memserve.rs` against `nbdkit memory`).
//! Not a tier: nothing survives the process.
//!
//! It never panics on a request: a range past the end is `EINVAL`, and a
//! lock poisoned by a panicking thread is taken over (the bytes are plain
//! data). It counts what reached it (FUA requests, flushes, zero requests
//! by kind) so a test can see what a client sent.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::export::{Export, ExportError, ExportResult, Extent};
use crate::proto::{NBD_STATE_HOLE, NBD_STATE_ZERO};

/// Granularity of [`MemoryExport`]'s block status: a 4 KiB block of zero
/// bytes is reported as a hole that reads as zeroes.
pub const MEMORY_BLOCK_BYTES: u64 = 4096;

/// A volume in a `Vec<u8>`; one lock for the whole volume (reads share it).
pub struct MemoryExport {
    bytes: RwLock<Vec<u8>>,
    writable: bool,
    rotational: bool,
    fast_zero: bool,
    description: String,
    fua_requests: AtomicU64,
    flushes: AtomicU64,
    zero_requests_may_trim: AtomicU64,
    zero_requests_no_hole: AtomicU64,
}

impl MemoryExport {
    /// `size_bytes` of zeroes, writable, with fast zeroing.
    pub fn new(size_bytes: usize) -> Self {
        Self::filled(size_bytes, 0)
    }

    /// `size_bytes` of `byte`.
    pub fn filled(size_bytes: usize, byte: u8) -> Self {
        Self {
            bytes: RwLock::new(vec![byte; size_bytes]),
            writable: true,
            rotational: false,
            fast_zero: true,
            description: "in-memory export".to_string(),
            fua_requests: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            zero_requests_may_trim: AtomicU64::new(0),
            zero_requests_no_hole: AtomicU64::new(0),
        }
    }

    /// Advertised read-only (the server refuses writes before they get here).
    pub fn read_only(mut self) -> Self {
        self.writable = false;
        self
    }

    /// Advertised as a spinning disk (`NBD_FLAG_ROTATIONAL`).
    pub fn rotational(mut self) -> Self {
        self.rotational = true;
        self
    }

    /// FAST_ZERO requests fail with `ENOTSUP`, as from a device that
    /// cannot zero faster than it writes.
    pub fn without_fast_zero(mut self) -> Self {
        self.fast_zero = false;
        self
    }

    /// The text `NBD_INFO_DESCRIPTION` carries.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// A copy of the whole volume.
    pub fn snapshot(&self) -> Vec<u8> {
        self.read_lock().clone()
    }

    /// Writes `data` at `offset_bytes` behind the protocol's back (to set up
    /// a test); `EINVAL` past the end.
    pub fn poke(&self, offset_bytes: u64, data: &[u8]) -> ExportResult<()> {
        let mut bytes = self.write_lock();
        let range = checked_range(bytes.len(), offset_bytes, data.len() as u64)?;
        bytes[range].copy_from_slice(data);
        Ok(())
    }

    /// Writes and trims that asked for FUA.
    pub fn fua_requests(&self) -> u64 {
        self.fua_requests.load(Ordering::SeqCst)
    }

    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::SeqCst)
    }

    /// WRITE_ZEROES requests that allowed punching a hole.
    pub fn zero_requests_may_trim(&self) -> u64 {
        self.zero_requests_may_trim.load(Ordering::SeqCst)
    }

    /// WRITE_ZEROES requests with NO_HOLE.
    pub fn zero_requests_no_hole(&self) -> u64 {
        self.zero_requests_no_hole.load(Ordering::SeqCst)
    }

    fn read_lock(&self) -> RwLockReadGuard<'_, Vec<u8>> {
        self.bytes.read()
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Vec<u8>> {
        self.bytes.write()
    }

    fn note_fua(&self, fua: bool) {
        if fua {
            self.fua_requests.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn zero(&self, offset_bytes: u64, length_bytes: u64) -> ExportResult<()> {
        let mut bytes = self.write_lock();
        let range = checked_range(bytes.len(), offset_bytes, length_bytes)?;
        bytes[range].fill(0);
        Ok(())
    }
}

/// `[offset, offset + length)` as indices into a volume of `size` bytes, or
/// `EINVAL` when it does not fit.
fn checked_range(size: usize, offset_bytes: u64, length_bytes: u64) -> ExportResult<Range<usize>> {
    offset_bytes
        .checked_add(length_bytes)
        .filter(|end| *end <= size as u64)
        .map(|end| offset_bytes as usize..end as usize)
        .ok_or_else(|| {
            ExportError::new(
                libc::EINVAL,
                format!(
                    "{length_bytes} bytes at offset {offset_bytes} run past the export's {size} bytes"
                ),
            )
        })
}

impl Export for MemoryExport {
    fn size_bytes(&self) -> u64 {
        self.read_lock().len() as u64
    }

    fn is_writable(&self) -> bool {
        self.writable
    }

    fn is_rotational(&self) -> bool {
        self.rotational
    }

    fn description(&self) -> Option<String> {
        Some(self.description.clone())
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> ExportResult<()> {
        let bytes = self.read_lock();
        let range = checked_range(bytes.len(), offset_bytes, buf.len() as u64)?;
        buf.copy_from_slice(&bytes[range]);
        Ok(())
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.note_fua(fua);
        self.poke(offset_bytes, data)
    }

    fn flush(&self) -> ExportResult<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> ExportResult<()> {
        self.note_fua(fua);
        self.zero(offset_bytes, length_bytes)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
        may_trim: bool,
        fast_only: bool,
    ) -> ExportResult<()> {
        if fast_only && !self.fast_zero {
            return Err(ExportError::new(libc::ENOTSUP, "no fast zeroing here"));
        }
        self.note_fua(fua);
        if may_trim {
            self.zero_requests_may_trim.fetch_add(1, Ordering::SeqCst);
        } else {
            self.zero_requests_no_hole.fetch_add(1, Ordering::SeqCst);
        }
        self.zero(offset_bytes, length_bytes)
    }

    /// Blocks of all zero bytes are HOLE|ZERO, others data; neighbouring
    /// blocks of the same kind are merged; the last extent may run past the
    /// request to the end of its run (the protocol allows it).
    fn block_status(&self, offset_bytes: u64, length_bytes: u64) -> ExportResult<Vec<Extent>> {
        let bytes = self.read_lock();
        let size = bytes.len() as u64;
        checked_range(bytes.len(), offset_bytes, length_bytes)?;
        let end = offset_bytes + length_bytes;
        let mut extents: Vec<Extent> = Vec::new();
        let mut position = offset_bytes;
        while position < size {
            let block_end = ((position / MEMORY_BLOCK_BYTES + 1) * MEMORY_BLOCK_BYTES).min(size);
            let zero = bytes[position as usize..block_end as usize]
                .iter()
                .all(|byte| *byte == 0);
            let flags = if zero {
                NBD_STATE_HOLE | NBD_STATE_ZERO
            } else {
                0
            };
            match extents.last_mut() {
                Some(last) if last.flags == flags => last.length_bytes += block_end - position,
                _ => {
                    if position >= end {
                        break;
                    }
                    extents.push(Extent {
                        length_bytes: block_end - position,
                        flags,
                    });
                }
            }
            position = block_end;
        }
        Ok(extents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_past_the_end_are_einval_not_panics() {
        let export = MemoryExport::new(8192);
        let mut buffer = [0u8; 16];
        for offset in [8190, 8192, u64::MAX - 4] {
            let error = export.read(offset, &mut buffer).unwrap_err();
            assert_eq!(error.errno, libc::EINVAL, "{error:?}");
            assert!(export.write(offset, &buffer, false).is_err());
            assert!(export.trim(offset, 16, false).is_err());
            assert!(export.write_zeroes(offset, 16, false, true, false).is_err());
            assert!(export.block_status(offset, 16).is_err());
        }
        assert!(export.read(8176, &mut buffer).is_ok());
    }

    #[test]
    fn writes_land_and_counters_count() {
        let export = MemoryExport::new(3 * MEMORY_BLOCK_BYTES as usize).without_fast_zero();
        export.write(4096, b"data", true).unwrap();
        export.flush().unwrap();
        assert_eq!(&export.snapshot()[4096..4100], b"data");
        assert_eq!((export.fua_requests(), export.flushes()), (1, 1));
        assert_eq!(
            export
                .write_zeroes(0, 10, false, true, true)
                .unwrap_err()
                .errno,
            libc::ENOTSUP
        );
        export.write_zeroes(4096, 2, false, false, false).unwrap();
        assert_eq!(&export.snapshot()[4096..4100], b"\0\0ta");
        assert_eq!(
            (
                export.zero_requests_may_trim(),
                export.zero_requests_no_hole()
            ),
            (0, 1)
        );
    }

    #[test]
    fn block_status_merges_zero_and_data_blocks() {
        let export = MemoryExport::new(4 * MEMORY_BLOCK_BYTES as usize);
        export.poke(MEMORY_BLOCK_BYTES, &[1]).unwrap();
        export.poke(2 * MEMORY_BLOCK_BYTES + 7, &[1]).unwrap();
        let extents = export.block_status(0, 4 * MEMORY_BLOCK_BYTES).unwrap();
        let hole = NBD_STATE_HOLE | NBD_STATE_ZERO;
        assert_eq!(
            extents,
            vec![
                Extent {
                    length_bytes: MEMORY_BLOCK_BYTES,
                    flags: hole
                },
                Extent {
                    length_bytes: 2 * MEMORY_BLOCK_BYTES,
                    flags: 0
                },
                Extent {
                    length_bytes: MEMORY_BLOCK_BYTES,
                    flags: hole
                },
            ]
        );
        // A request inside a data run is answered from its start to the
        // run's end.
        let extents = export.block_status(2 * MEMORY_BLOCK_BYTES, 10).unwrap();
        assert_eq!(
            extents,
            vec![Extent {
                length_bytes: MEMORY_BLOCK_BYTES,
                flags: 0
            }]
        );
    }
}
