//! Sequential-stream detection for the cache bypass (bcache's
//! `sequential_cutoff`): a request that continues a stream whose run has
//! reached the cutoff is sequential, and its misses do not allocate.
//!
//! Streams are tracked in a small table (as bcache tracks recent IOs per
//! task): each entry is the byte just after the stream's last request and
//! the run length so far. A request starting exactly there extends the run;
//! any other request starts a new stream in the least recently used entry.

/// Streams tracked at once.
const STREAMS: usize = 16;

#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    next_byte: u64,
    run_bytes: u64,
    last_use: u64,
}

#[derive(Debug)]
pub(super) struct SequentialDetector {
    cutoff_bytes: u64,
    streams: [Stream; STREAMS],
    uses: u64,
}

impl SequentialDetector {
    /// `cutoff_bytes` 0 turns detection off.
    pub(super) fn new(cutoff_bytes: u64) -> SequentialDetector {
        SequentialDetector {
            cutoff_bytes,
            streams: [Stream::default(); STREAMS],
            uses: 0,
        }
    }

    /// Records a request and says whether it is part of a sequential run at
    /// or beyond the cutoff (this request included).
    pub(super) fn observe(&mut self, offset_bytes: u64, length_bytes: u64) -> bool {
        if self.cutoff_bytes == 0 || length_bytes == 0 {
            return false;
        }
        self.uses += 1;
        let end = offset_bytes.saturating_add(length_bytes);
        // One pass over the table: the stream this request continues (two
        // may meet at one byte: the longer run continues, the later entry
        // on a tie) and the least recently used entry (the first on a tie).
        // Selects instead of branches: 16 entries, one unpredictable
        // compare each.
        let mut continued = usize::MAX;
        let mut continued_run = 0;
        let mut oldest = 0;
        let mut oldest_use = u64::MAX;
        for (index, stream) in self.streams.iter().enumerate() {
            let longer = (stream.next_byte == offset_bytes)
                & (stream.run_bytes > 0)
                & (stream.run_bytes >= continued_run);
            continued = if longer { index } else { continued };
            continued_run = if longer {
                stream.run_bytes
            } else {
                continued_run
            };
            let older = stream.last_use < oldest_use;
            oldest = if older { index } else { oldest };
            oldest_use = if older { stream.last_use } else { oldest_use };
        }
        let continued = (continued != usize::MAX).then_some(continued);
        let index = match continued {
            Some(index) => {
                let stream = &mut self.streams[index];
                stream.run_bytes = stream.run_bytes.saturating_add(length_bytes);
                index
            }
            None => {
                self.streams[oldest].run_bytes = length_bytes;
                oldest
            }
        };
        let stream = &mut self.streams[index];
        stream.next_byte = end;
        stream.last_use = self.uses;
        stream.run_bytes >= self.cutoff_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_becomes_sequential_at_the_cutoff_and_interleaved_streams_are_told_apart() {
        let mut detector = SequentialDetector::new(4 * 4096);
        let mut a = 0;
        let mut b = 1 << 30;
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push((detector.observe(a, 4096), detector.observe(b, 4096)));
            a += 4096;
            b += 4096;
        }
        assert_eq!(
            seen,
            vec![
                (false, false),
                (false, false),
                (false, false),
                (true, true),
                (true, true)
            ]
        );
        // A random request in between starts its own stream and breaks neither.
        assert!(!detector.observe(7 << 20, 4096));
        assert!(detector.observe(a, 4096));
    }

    #[test]
    fn one_large_request_at_the_cutoff_is_sequential_and_zero_turns_it_off() {
        let mut detector = SequentialDetector::new(1 << 20);
        assert!(detector.observe(0, 1 << 20));
        assert!(!detector.observe(5 << 20, 512 << 10));
        let mut off = SequentialDetector::new(0);
        assert!(!off.observe(0, 1 << 30));
    }
}
