//! Outgoing replies: reply headers (and whole small replies) in one byte
//! vector, READ data in page-aligned buffers beside it, all written with
//! vectored writes.
//!
//! READ data is read by the export straight into an [`AlignedBuf`], so an
//! aligned request to an `O_DIRECT` tier reaches `pread` with no bounce
//! copy, and it goes from that buffer to the socket without being copied
//! into the header vector either. Data buffers come back to a small spare
//! list once their reply is written (bounded: [`SPARE_BYTES_MAX`]), so a
//! connection reuses the same few buffers request after request.

use std::io::{self, IoSlice, Write};

use tierd_common::aligned::AlignedBuf;

/// Data buffers kept for reuse per reply queue, in bytes; a buffer larger
/// than this is freed after its reply.
pub(super) const SPARE_BYTES_MAX: usize = 1024 * 1024;

/// Byte vectors larger than this are released after use, so an idle
/// connection keeps little memory whatever it did before.
const RETAINED_BYTES: usize = 1024 * 1024;

/// Replies waiting to be written, in order (see the module docs).
pub(super) struct Replies {
    bytes: Vec<u8>,
    /// READ data: each buffer is sent right after `bytes[..at]`.
    data: Vec<(usize, AlignedBuf)>,
    data_bytes: usize,
    spare: Vec<AlignedBuf>,
    spare_bytes: usize,
}

impl Replies {
    pub(super) fn with_capacity(capacity_bytes: usize) -> Replies {
        Replies {
            bytes: Vec::with_capacity(capacity_bytes.min(RETAINED_BYTES)),
            data: Vec::new(),
            data_bytes: 0,
            spare: Vec::new(),
            spare_bytes: 0,
        }
    }

    /// The header bytes: replies are appended here, READ data after them
    /// with [`Replies::push_data`].
    pub(super) fn bytes(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// Bytes waiting in all.
    pub(super) fn len(&self) -> usize {
        self.bytes.len() + self.data_bytes
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An aligned buffer of `length_bytes` (contents unspecified), a spare
    /// one when one is large enough.
    pub(super) fn data_buffer(&mut self, length_bytes: usize) -> AlignedBuf {
        let mut buffer = match self
            .spare
            .iter()
            .position(|buffer| buffer.capacity() >= length_bytes)
        {
            Some(index) => {
                let buffer = self.spare.swap_remove(index);
                self.spare_bytes -= buffer.capacity();
                buffer
            }
            None => AlignedBuf::new(),
        };
        buffer.resize(length_bytes);
        buffer
    }

    /// Queues `buffer` as data that follows the bytes appended so far.
    pub(super) fn push_data(&mut self, buffer: AlignedBuf) {
        self.data_bytes += buffer.len();
        self.data.push((self.bytes.len(), buffer));
    }

    /// Keeps `buffer` for a later [`Replies::data_buffer`] if there is room.
    pub(super) fn recycle(&mut self, buffer: AlignedBuf) {
        let capacity = buffer.capacity();
        if capacity > 0 && self.spare_bytes + capacity <= SPARE_BYTES_MAX {
            self.spare_bytes += capacity;
            self.spare.push(buffer);
        }
    }

    /// Moves `other`'s replies behind these (its header bytes are copied,
    /// its READ data buffers moved, not copied) and hands this queue's
    /// spare data buffers to `other` for its next replies.
    pub(super) fn append(&mut self, other: &mut Replies) {
        let offset = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        other.bytes.clear();
        for (at, buffer) in other.data.drain(..) {
            self.data_bytes += buffer.len();
            self.data.push((offset + at, buffer));
        }
        other.data_bytes = 0;
        self.spare_bytes = 0;
        for buffer in std::mem::take(&mut self.spare) {
            other.recycle(buffer);
        }
    }

    /// Drops every queued reply, keeping the data buffers for reuse.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        if self.bytes.capacity() > RETAINED_BYTES {
            self.bytes = Vec::new();
        }
        self.data_bytes = 0;
        for (_, buffer) in std::mem::take(&mut self.data) {
            self.recycle(buffer);
        }
    }

    /// Writes every queued reply in order (vectored writes until all is
    /// sent), then clears the queue, also when the write fails.
    pub(super) fn write_to(&mut self, stream: &mut impl Write) -> io::Result<()> {
        let result = if self.data.is_empty() {
            stream.write_all(&self.bytes)
        } else {
            let mut slices = Vec::with_capacity(2 * self.data.len() + 1);
            let mut at = 0;
            for (end, buffer) in &self.data {
                if *end > at {
                    slices.push(IoSlice::new(&self.bytes[at..*end]));
                }
                slices.push(IoSlice::new(buffer));
                at = *end;
            }
            if self.bytes.len() > at {
                slices.push(IoSlice::new(&self.bytes[at..]));
            }
            write_all_vectored(stream, &mut slices)
        };
        self.clear();
        result
    }
}

/// `write_all` over several slices (std's `write_all_vectored` is unstable).
fn write_all_vectored(stream: &mut impl Write, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match stream.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut slices, written),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes at most `step` bytes per call, from the first slice only (as
    /// `Write::write_vectored`'s default does), so every partial-write path
    /// is taken.
    struct Trickle {
        written: Vec<u8>,
        step: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let count = buf.len().min(self.step);
            self.written.extend_from_slice(&buf[..count]);
            Ok(count)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn headers_and_data_go_out_in_order_and_buffers_are_reused() {
        let mut replies = Replies::with_capacity(1024);
        let mut expected = Vec::new();
        for round in 0..3u8 {
            for reply in 0..4u8 {
                let header = [round, reply, 0xEE];
                replies.bytes().extend_from_slice(&header);
                expected.extend_from_slice(&header);
                if reply % 2 == 0 {
                    let mut data = replies.data_buffer(4096 + usize::from(reply));
                    assert_eq!(data.as_ptr() as usize % 4096, 0);
                    data.fill(reply + 10 * round);
                    expected.extend_from_slice(&data);
                    replies.push_data(data);
                }
            }
            replies.bytes().extend_from_slice(b"tail");
            expected.extend_from_slice(b"tail");
            assert_eq!(replies.len(), expected.len());
            let mut sink = Trickle {
                written: Vec::new(),
                step: 1000,
            };
            replies.write_to(&mut sink).unwrap();
            assert_eq!(sink.written, expected);
            assert!(replies.is_empty());
            expected.clear();
            // The two data buffers of each round are the spares of the next.
            assert_eq!(replies.spare.len(), 2);
        }
        // A buffer beyond the spare budget is not kept.
        replies.recycle(AlignedBuf::zeroed(SPARE_BYTES_MAX));
        assert_eq!(replies.spare.len(), 2);
    }

    /// Appending moves another queue's replies behind these in order (data
    /// buffers moved, not copied) and hands this queue's spares over.
    #[test]
    fn appended_replies_go_out_in_order_and_spares_move_over() {
        let mut pending = Replies::with_capacity(1024);
        let mut thread = Replies::with_capacity(1024);
        pending.recycle(AlignedBuf::zeroed(4096));
        let mut expected = Vec::new();
        for reply in 0..3u8 {
            thread.bytes().extend_from_slice(&[reply, 0xAA]);
            expected.extend_from_slice(&[reply, 0xAA]);
            let mut data = thread.data_buffer(512);
            data.fill(reply);
            expected.extend_from_slice(&data);
            let address = data.as_ptr() as usize;
            thread.push_data(data);
            pending.append(&mut thread);
            assert!(thread.is_empty());
            if reply == 0 {
                assert_eq!(thread.spare.len(), 1, "the pending queue's spare went over");
                assert!(pending.spare.is_empty());
            }
            assert_eq!(
                pending.data.last().unwrap().1.as_ptr() as usize,
                address,
                "moved, not copied"
            );
        }
        let mut sink = Trickle {
            written: Vec::new(),
            step: 100,
        };
        pending.write_to(&mut sink).unwrap();
        assert_eq!(sink.written, expected);
    }
}
