//! The segmented read-ahead cache ([`SegmentCache`]). Shared with the SMR
//! model.

#[derive(Clone, Copy, Debug, Default)]
struct Segment {
    start: u64,
    end: u64,
    last_use: u64,
}

impl Segment {
    fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// The read the head is still streaming into a segment after a read miss.
#[derive(Clone, Copy, Debug)]
struct Stream {
    segment: usize,
    from_byte: u64,
    cap_byte: u64,
    start_ns: f64,
    ns_per_byte: f64,
}

/// Buffer segments holding recently read data. After a read miss the head
/// keeps reading the following bytes into the segment for as long as it is
/// not sent elsewhere, up to half a segment ahead of what the host consumed
/// (a circular segment buffer). Reads wholly inside a segment, or inside
/// the part of the stream still to come, are hits. Writes invalidate the
/// segments they overlap.
#[derive(Clone, Debug)]
pub struct SegmentCache {
    segments: Vec<Segment>,
    /// Flat copies of what a lookup needs, kept in step with `segments`:
    /// the first byte (`u64::MAX` when empty) and the end a request may
    /// reach (the stream's cap for the streaming segment).
    lookup_starts: Vec<u64>,
    lookup_ends: Vec<u64>,
    segment_bytes: u64,
    limit_bytes: u64,
    stream: Option<Stream>,
    uses: u64,
}

impl SegmentCache {
    pub fn new(count: u32, segment_bytes: u64, limit_bytes: u64) -> SegmentCache {
        let count = if segment_bytes == 0 {
            0
        } else {
            count as usize
        };
        SegmentCache {
            segments: vec![Segment::default(); count],
            lookup_starts: vec![u64::MAX; count],
            lookup_ends: vec![0; count],
            segment_bytes,
            limit_bytes,
            stream: None,
            uses: 0,
        }
    }

    fn refresh(&mut self, index: usize) {
        let segment = self.segments[index];
        let streaming = self.stream.filter(|stream| stream.segment == index);
        if segment.is_empty() && streaming.is_none() {
            self.lookup_starts[index] = u64::MAX;
            self.lookup_ends[index] = 0;
        } else {
            self.lookup_starts[index] = segment.start;
            self.lookup_ends[index] = streaming.map_or(segment.end, |stream| stream.cap_byte);
        }
    }

    /// If `[offset, offset + length)` is (or will be, from the stream) in a
    /// segment: the segment and the time the last byte is in the buffer.
    #[inline]
    pub fn lookup(&self, now_ns: f64, offset: u64, length: u64) -> Option<(usize, f64)> {
        let end = offset + length;
        // Branch-free over every segment (vectorisable): SPTF asks this for
        // each queued read at each dispatch.
        let mut index = usize::MAX;
        for (position, (&start, &reach)) in self
            .lookup_starts
            .iter()
            .zip(&self.lookup_ends)
            .enumerate()
            .rev()
        {
            if start <= offset && end <= reach {
                index = position;
            }
        }
        if index == usize::MAX {
            return None;
        }
        let ready = match self.stream {
            Some(stream) if stream.segment == index && end > stream.from_byte => {
                now_ns.max(stream.start_ns + (end - stream.from_byte) as f64 * stream.ns_per_byte)
            }
            _ => now_ns,
        };
        Some((index, ready))
    }

    /// Records a hit on `index`; a hit on the stream keeps it reading ahead
    /// of the host.
    pub fn note_hit(&mut self, index: usize, offset: u64, length: u64) {
        self.uses += 1;
        let half = self.segment_bytes / 2;
        let Some(segment) = self.segments.get_mut(index) else {
            return;
        };
        segment.last_use = self.uses;
        if let Some(stream) = self.stream.as_mut().filter(|s| s.segment == index) {
            stream.cap_byte = stream
                .cap_byte
                .max((offset + length + half).min(self.limit_bytes));
            segment.start = segment
                .start
                .max(stream.cap_byte.saturating_sub(self.segment_bytes));
            self.refresh(index);
        }
    }

    /// The head leaves: the stream's segment keeps what was read by `now_ns`.
    pub fn stop_stream(&mut self, now_ns: f64) {
        if let Some(stream) = self.stream.take() {
            let streamed = if now_ns > stream.start_ns {
                ((now_ns - stream.start_ns) / stream.ns_per_byte) as u64
            } else {
                0
            };
            let end = (stream.from_byte + streamed).min(stream.cap_byte);
            if let Some(segment) = self.segments.get_mut(stream.segment) {
                segment.end = end;
                self.refresh(stream.segment);
            }
        }
    }

    /// A read miss of `[offset, offset + length)` finished at `done_ns`: its
    /// data goes into the least recently used segment and the head goes on
    /// reading from its end.
    pub fn start_stream(&mut self, done_ns: f64, offset: u64, length: u64, ns_per_byte: f64) {
        if self.segments.is_empty() {
            return;
        }
        self.stop_stream(done_ns);
        let end = offset + length;
        let follows = self.follows(offset);
        let index = follows.unwrap_or_else(|| {
            self.segments
                .iter()
                .enumerate()
                .min_by_key(|(_, segment)| segment.last_use)
                .map_or(0, |(index, _)| index)
        });
        let cap = (end + self.segment_bytes / 2)
            .min(self.limit_bytes)
            .max(end);
        self.uses += 1;
        let segment = &mut self.segments[index];
        segment.start = offset.max(cap.saturating_sub(self.segment_bytes));
        segment.end = end;
        segment.last_use = self.uses;
        self.stream = Some(Stream {
            segment: index,
            from_byte: end,
            cap_byte: cap,
            start_ns: done_ns,
            ns_per_byte,
        });
        self.refresh(index);
    }

    /// The segment whose data ends exactly at `offset` (a sequential miss).
    pub fn follows(&self, offset: u64) -> Option<usize> {
        self.lookup_ends
            .iter()
            .zip(&self.lookup_starts)
            .position(|(&reach, &start)| reach == offset && start < reach)
    }

    /// A write to `[offset, offset + length)`: drops overlapping segments.
    pub fn invalidate(&mut self, now_ns: f64, offset: u64, length: u64) {
        let end = offset + length.max(1);
        if let Some(stream) = self.stream {
            if self.lookup_starts[stream.segment] < end && offset < self.lookup_ends[stream.segment]
            {
                self.stop_stream(now_ns);
            }
        }
        for index in 0..self.segments.len() {
            if self.lookup_starts[index] < end && offset < self.lookup_ends[index] {
                self.segments[index] = Segment {
                    last_use: self.segments[index].last_use,
                    ..Segment::default()
                };
                self.refresh(index);
            }
        }
    }
}
