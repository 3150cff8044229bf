//! Volatile RAM as a block device.
//!
//! The range is cut into chunks of [`CHUNK_BYTES`], each behind its own
//! `RwLock` and allocated on its first write, so a memory tier nobody has
//! written to costs no resident memory and readers of different chunks never
//! contend. Reads of a chunk that was never written (or was freed) return
//! zeroes; discarding or zeroing a whole chunk frees it.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{check_range, BlockDevice, DeviceResult};

/// Allocation granule: 1 MiB.
pub const CHUNK_BYTES: u64 = 1 << 20;

type Chunk = RwLock<Option<Box<[u8]>>>;

/// A RAM-backed device. Contents are lost when it is dropped.
pub struct MemoryDevice {
    name: String,
    size_bytes: u64,
    chunks: Box<[Chunk]>,
    allocated_chunks: AtomicUsize,
}

impl std::fmt::Debug for MemoryDevice {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("MemoryDevice")
            .field("name", &self.name)
            .field("size_bytes", &self.size_bytes)
            .field("allocated_chunks", &self.allocated_chunks())
            .finish()
    }
}

/// A poisoned lock only means another thread panicked while holding it; the
/// bytes are still plain bytes, so keep serving them.
fn read_lock(chunk: &Chunk) -> RwLockReadGuard<'_, Option<Box<[u8]>>> {
    chunk.read()
}

fn write_lock(chunk: &Chunk) -> RwLockWriteGuard<'_, Option<Box<[u8]>>> {
    chunk.write()
}

impl MemoryDevice {
    /// A device of `size_bytes` that holds nothing yet (no memory allocated).
    pub fn new(name: impl Into<String>, size_bytes: u64) -> Self {
        let chunk_count = usize::try_from(size_bytes.div_ceil(CHUNK_BYTES)).unwrap_or(usize::MAX);
        let chunks: Box<[Chunk]> = (0..chunk_count).map(|_| RwLock::new(None)).collect();
        Self {
            name: name.into(),
            size_bytes,
            chunks,
            allocated_chunks: AtomicUsize::new(0),
        }
    }

    /// Chunks that currently hold memory ([`CHUNK_BYTES`] each, the last one
    /// possibly shorter).
    pub fn allocated_chunks(&self) -> usize {
        self.allocated_chunks.load(Ordering::Relaxed)
    }

    /// Bytes of the chunk with index `chunk_index` (the last one may be short).
    fn chunk_length(&self, chunk_index: usize) -> usize {
        let start = chunk_index as u64 * CHUNK_BYTES;
        // At most CHUNK_BYTES, so it fits in usize.
        (self.size_bytes - start).min(CHUNK_BYTES) as usize
    }

    /// Calls `action(chunk_index, offset_in_chunk, range_in_buffer)` for every
    /// chunk the range `[offset, offset + length)` touches. The caller has
    /// checked the range against the device size.
    fn for_each_piece(
        offset_bytes: u64,
        length: usize,
        mut action: impl FnMut(usize, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0usize;
        while done < length {
            let position = offset_bytes + done as u64;
            let chunk_index = (position / CHUNK_BYTES) as usize;
            let offset_in_chunk = (position % CHUNK_BYTES) as usize;
            let piece = (CHUNK_BYTES as usize - offset_in_chunk).min(length - done);
            action(chunk_index, offset_in_chunk, done..done + piece);
            done += piece;
        }
    }

    /// Zeroes `[offset, offset + length)`, freeing chunks covered whole.
    fn zero_range(&self, offset_bytes: u64, length_bytes: u64) {
        let mut position = offset_bytes;
        let end = offset_bytes + length_bytes;
        while position < end {
            let chunk_index = (position / CHUNK_BYTES) as usize;
            let offset_in_chunk = (position % CHUNK_BYTES) as usize;
            let chunk_length = self.chunk_length(chunk_index);
            let piece = ((chunk_length - offset_in_chunk) as u64).min(end - position) as usize;
            let mut guard = write_lock(&self.chunks[chunk_index]);
            if piece == chunk_length {
                if guard.take().is_some() {
                    self.allocated_chunks.fetch_sub(1, Ordering::Relaxed);
                }
            } else if let Some(bytes) = guard.as_mut() {
                bytes[offset_in_chunk..offset_in_chunk + piece].fill(0);
            }
            drop(guard);
            position += piece as u64;
        }
    }
}

impl BlockDevice for MemoryDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn is_volatile(&self) -> bool {
        true
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> DeviceResult<()> {
        check_range(
            &self.name,
            "read",
            offset_bytes,
            buf.len() as u64,
            self.size_bytes,
        )?;
        Self::for_each_piece(offset_bytes, buf.len(), |chunk_index, start, range| {
            let guard = read_lock(&self.chunks[chunk_index]);
            match guard.as_deref() {
                Some(bytes) => {
                    buf[range.clone()].copy_from_slice(&bytes[start..start + range.len()])
                }
                None => buf[range].fill(0),
            }
        });
        Ok(())
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        check_range(
            &self.name,
            "write",
            offset_bytes,
            data.len() as u64,
            self.size_bytes,
        )?;
        Self::for_each_piece(offset_bytes, data.len(), |chunk_index, start, range| {
            let mut guard = write_lock(&self.chunks[chunk_index]);
            let bytes = guard.get_or_insert_with(|| {
                self.allocated_chunks.fetch_add(1, Ordering::Relaxed);
                vec![0u8; self.chunk_length(chunk_index)].into_boxed_slice()
            });
            bytes[start..start + range.len()].copy_from_slice(&data[range]);
        });
        Ok(())
    }

    /// A plain write: RAM is never durable (a write-through tier's durable
    /// copy is the one on home).
    fn write_at_durable(&self, offset_bytes: u64, data: &[u8]) -> DeviceResult<()> {
        self.write_at(offset_bytes, data)
    }

    /// Nothing to do: RAM is never durable, and writes are visible at once.
    fn flush(&self) -> DeviceResult<()> {
        Ok(())
    }

    fn discard(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        check_range(
            &self.name,
            "discard",
            offset_bytes,
            length_bytes,
            self.size_bytes,
        )?;
        self.zero_range(offset_bytes, length_bytes);
        Ok(())
    }

    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> DeviceResult<()> {
        check_range(
            &self.name,
            "write_zeroes",
            offset_bytes,
            length_bytes,
            self.size_bytes,
        )?;
        self.zero_range(offset_bytes, length_bytes);
        Ok(())
    }

    /// Chunks never written (or freed by a discard or zeroing that covered
    /// them whole) are holes; an allocated chunk is data, zeroed parts and
    /// all: the answer's granularity is [`CHUNK_BYTES`].
    fn allocation(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Option<Vec<super::AllocationRun>> {
        check_range(
            &self.name,
            "allocation",
            offset_bytes,
            length_bytes,
            self.size_bytes,
        )
        .ok()?;
        let mut runs = super::AllocationRuns::default();
        let end = offset_bytes + length_bytes;
        let mut position = offset_bytes;
        while position < end {
            let chunk_index = (position / CHUNK_BYTES) as usize;
            let chunk_end = ((chunk_index as u64 + 1) * CHUNK_BYTES).min(end);
            let allocated = read_lock(&self.chunks[chunk_index]).is_some();
            runs.push(chunk_end - position, allocated);
            position = chunk_end;
        }
        Some(runs.into_runs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceErrorKind;
    use std::sync::Arc;

    fn pattern(seed: u8, length: usize) -> Vec<u8> {
        (0..length)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect()
    }

    #[test]
    fn unwritten_device_reads_zeroes_and_allocates_nothing() {
        let device = MemoryDevice::new("ram", 64 * CHUNK_BYTES);
        let mut buf = vec![0xAAu8; 3 * CHUNK_BYTES as usize];
        device.read_at(5 * CHUNK_BYTES - 7, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        assert_eq!(device.allocated_chunks(), 0);
        assert!(device.is_volatile());
        device.flush().unwrap();
    }

    #[test]
    fn writes_allocate_only_the_chunks_they_touch() {
        let device = MemoryDevice::new("ram", 64 * CHUNK_BYTES);
        device.write_at(0, &[1; 4096]).unwrap();
        assert_eq!(device.allocated_chunks(), 1);
        // Straddles chunks 9 and 10.
        let data = pattern(3, 8192);
        device.write_at(10 * CHUNK_BYTES - 4096, &data).unwrap();
        assert_eq!(device.allocated_chunks(), 3);
        let mut back = vec![0u8; 8192];
        device.read_at(10 * CHUNK_BYTES - 4096, &mut back).unwrap();
        assert_eq!(back, data);
        // Bytes around the write inside the allocated chunk are still zero.
        let mut around = vec![0xFFu8; 16];
        device
            .read_at(10 * CHUNK_BYTES - 4096 - 16, &mut around)
            .unwrap();
        assert!(around.iter().all(|&b| b == 0));
    }

    #[test]
    fn discard_frees_whole_chunks_and_zeroes_partial_ones() {
        let device = MemoryDevice::new("ram", 4 * CHUNK_BYTES);
        let data = pattern(9, 4 * CHUNK_BYTES as usize);
        device.write_at(0, &data).unwrap();
        assert_eq!(device.allocated_chunks(), 4);
        // From the middle of chunk 0 to the middle of chunk 3: frees 1 and 2.
        let start = CHUNK_BYTES / 2;
        let length = 3 * CHUNK_BYTES;
        device.discard(start, length).unwrap();
        assert_eq!(device.allocated_chunks(), 2);
        let mut back = vec![0u8; data.len()];
        device.read_at(0, &mut back).unwrap();
        let (start, end) = (start as usize, (start + length) as usize);
        assert_eq!(&back[..start], &data[..start]);
        assert!(back[start..end].iter().all(|&b| b == 0));
        assert_eq!(&back[end..], &data[end..]);
        device.write_zeroes(0, 4 * CHUNK_BYTES).unwrap();
        assert_eq!(device.allocated_chunks(), 0);
    }

    /// Holes are the chunks that hold no memory, merged into runs.
    #[test]
    fn allocation_reports_the_chunks_that_hold_memory() {
        use crate::device::AllocationRun;
        let run = |length_bytes, allocated| AllocationRun {
            length_bytes,
            allocated,
        };
        let size = 8 * CHUNK_BYTES + 100;
        let device = MemoryDevice::new("ram", size);
        assert_eq!(device.allocation(0, size), Some(vec![run(size, false)]));
        device.write_at(CHUNK_BYTES + 5, &[1]).unwrap();
        device.write_at(3 * CHUNK_BYTES - 1, &[2, 3]).unwrap();
        device.write_at(size - 1, &[4]).unwrap();
        assert_eq!(
            device.allocation(0, size),
            Some(vec![
                run(CHUNK_BYTES, false),
                run(3 * CHUNK_BYTES, true),
                run(4 * CHUNK_BYTES, false),
                run(100, true),
            ])
        );
        // Chunk 2 discarded whole is a hole again; a partial discard keeps
        // chunk 1 (zeroed in part, still memory).
        device.discard(2 * CHUNK_BYTES, CHUNK_BYTES).unwrap();
        device.discard(CHUNK_BYTES, 10).unwrap();
        assert_eq!(
            device.allocation(CHUNK_BYTES / 2, 3 * CHUNK_BYTES),
            Some(vec![
                run(CHUNK_BYTES / 2, false),
                run(CHUNK_BYTES, true),
                run(CHUNK_BYTES, false),
                run(CHUNK_BYTES / 2, true),
            ])
        );
        assert_eq!(device.allocation(size, 0), Some(Vec::new()));
        assert_eq!(device.allocation(size, 1), None, "out of range");
    }

    #[test]
    fn size_not_a_multiple_of_the_chunk_works_up_to_the_last_byte() {
        let size = 2 * CHUNK_BYTES + 100;
        let device = MemoryDevice::new("ram", size);
        let data = pattern(1, 300);
        device.write_at(size - 300, &data).unwrap();
        let mut back = vec![0u8; 300];
        device.read_at(size - 300, &mut back).unwrap();
        assert_eq!(back, data);
        device.discard(2 * CHUNK_BYTES, 100).unwrap();
        assert_eq!(
            device.allocated_chunks(),
            1,
            "the short last chunk is freed"
        );
    }

    #[test]
    fn out_of_range_is_rejected_and_touches_nothing() {
        let device = MemoryDevice::new("ram", CHUNK_BYTES);
        let error = device.write_at(CHUNK_BYTES - 10, &[7; 11]).unwrap_err();
        assert_eq!(error.kind, DeviceErrorKind::OutOfRange);
        assert_eq!(device.allocated_chunks(), 0);
        assert!(device.write_at(u64::MAX, &[1]).is_err());
        assert!(device.discard(1, u64::MAX).is_err());
        assert!(device.read_at(CHUNK_BYTES, &mut [0u8; 1]).is_err());
        // Zero-length at the very end is in range.
        device.read_at(CHUNK_BYTES, &mut []).unwrap();
    }

    #[test]
    fn concurrent_writers_to_different_offsets_all_land() {
        let device = Arc::new(MemoryDevice::new("ram", 8 * CHUNK_BYTES));
        let threads = 4usize;
        let writes_per_thread = 200usize;
        let io_bytes = 4096usize;
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let device = Arc::clone(&device);
                std::thread::spawn(move || {
                    for i in 0..writes_per_thread {
                        // Interleave threads block by block so they share chunks.
                        let block = i * threads + thread;
                        let data = pattern(block as u8, io_bytes);
                        device.write_at((block * io_bytes) as u64, &data).unwrap();
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        for block in 0..threads * writes_per_thread {
            let mut back = vec![0u8; io_bytes];
            device
                .read_at((block * io_bytes) as u64, &mut back)
                .unwrap();
            assert_eq!(back, pattern(block as u8, io_bytes), "block {block}");
        }
    }
}
