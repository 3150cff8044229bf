//! Page-aligned byte buffers, so data can go to an `O_DIRECT` descriptor (or
//! an io_uring registered buffer) as it is, with no bounce copy.
//!
//! [`AlignedBuf`] is one heap allocation whose address and capacity are
//! multiples of [`ALIGNMENT_BYTES`]. It has a length like a `Vec` (the bytes
//! it derefs to) but no growth beyond its capacity: [`AlignedBuf::resize`]
//! past the capacity drops the contents and allocates a larger buffer, which
//! is what its users (request payloads, read replies) want from a scratch
//! buffer. Hand-written over `std::alloc::Layout` rather than a crate: the
//! whole surface is allocate-zeroed, length and free, and the io_uring engine
//! registers these allocations with the kernel, so their address must stay
//! fixed for as long as the buffer lives, which this type guarantees by
//! never reallocating in place.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of address and capacity: 4096 bytes, what direct IO needs on
/// every filesystem and disk in use today (a device's logical block size is
/// at most that).
pub const ALIGNMENT_BYTES: usize = 4096;

/// A zero-initialised, [`ALIGNMENT_BYTES`]-aligned byte buffer (see the
/// module docs).
pub struct AlignedBuf {
    pointer: NonNull<u8>,
    capacity_bytes: usize,
    length_bytes: usize,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read the bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty buffer that holds no memory.
    pub const fn new() -> AlignedBuf {
        AlignedBuf {
            pointer: NonNull::dangling(),
            capacity_bytes: 0,
            length_bytes: 0,
        }
    }

    /// A buffer of `length_bytes` zeroes, its capacity rounded up to the
    /// alignment.
    pub fn zeroed(length_bytes: usize) -> AlignedBuf {
        let mut buffer = AlignedBuf::new();
        buffer.resize(length_bytes);
        buffer
    }

    fn layout(capacity_bytes: usize) -> Layout {
        // A capacity that overflows isize is a caller bug (requests are
        // capped at 64 MiB long before).
        Layout::from_size_align(capacity_bytes, ALIGNMENT_BYTES)
            .expect("an aligned buffer's size fits in isize")
    }

    /// Sets the length. Within the capacity the bytes are kept (new ones are
    /// whatever the buffer held before, zero if never written); beyond it
    /// the buffer is replaced by a larger zeroed one and its contents are
    /// dropped.
    pub fn resize(&mut self, length_bytes: usize) {
        if length_bytes > self.capacity_bytes {
            let capacity_bytes = length_bytes.div_ceil(ALIGNMENT_BYTES) * ALIGNMENT_BYTES;
            let layout = Self::layout(capacity_bytes);
            // SAFETY: the layout has a non-zero size (length_bytes > 0 here).
            let pointer = unsafe { alloc_zeroed(layout) };
            let Some(pointer) = NonNull::new(pointer) else {
                handle_alloc_error(layout)
            };
            self.release();
            self.pointer = pointer;
            self.capacity_bytes = capacity_bytes;
        }
        self.length_bytes = length_bytes;
    }

    /// Bytes the buffer can hold without allocating.
    pub fn capacity(&self) -> usize {
        self.capacity_bytes
    }

    fn release(&mut self) {
        if self.capacity_bytes > 0 {
            // SAFETY: allocated by `resize` with this very layout.
            unsafe { dealloc(self.pointer.as_ptr(), Self::layout(self.capacity_bytes)) };
        }
        self.pointer = NonNull::dangling();
        self.capacity_bytes = 0;
        self.length_bytes = 0;
    }
}

impl Default for AlignedBuf {
    fn default() -> Self {
        AlignedBuf::new()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        self.release();
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `length_bytes <= capacity_bytes` initialised bytes (zeroed
        // at allocation), or an empty slice at a dangling, aligned pointer.
        unsafe { std::slice::from_raw_parts(self.pointer.as_ptr(), self.length_bytes) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pointer.as_ptr(), self.length_bytes) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AlignedBuf")
            .field("length_bytes", &self.length_bytes)
            .field("capacity_bytes", &self.capacity_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_keep_their_bytes_within_capacity() {
        let empty = AlignedBuf::new();
        assert!(empty.is_empty());
        assert_eq!(empty.capacity(), 0);
        for length in [1usize, 512, 4096, 4097, 1 << 20] {
            let mut buffer = AlignedBuf::zeroed(length);
            assert_eq!(buffer.len(), length);
            assert_eq!(buffer.as_ptr() as usize % ALIGNMENT_BYTES, 0);
            assert_eq!(buffer.capacity() % ALIGNMENT_BYTES, 0);
            assert!(buffer.capacity() >= length);
            assert!(buffer.iter().all(|&byte| byte == 0));
            buffer.fill(7);
            let address = buffer.as_ptr();
            // Shrinking and growing within the capacity keeps the memory.
            buffer.resize(1);
            buffer.resize(buffer.capacity());
            assert_eq!(buffer.as_ptr(), address);
            assert!(buffer[..length].iter().all(|&byte| byte == 7));
            // Beyond it: a new, larger, zeroed allocation.
            let capacity = buffer.capacity();
            buffer.resize(capacity + 1);
            assert_eq!(buffer.as_ptr() as usize % ALIGNMENT_BYTES, 0);
            assert_eq!(buffer.capacity(), capacity + ALIGNMENT_BYTES);
            assert!(buffer.iter().all(|&byte| byte == 0));
        }
    }
}
