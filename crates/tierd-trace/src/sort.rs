//! Sorting a trace by time with bounded memory: an external merge sort.
//!
//! Formats recorded out of order (Tencent CBS, SYSTOR '17) are read through
//! [`SortedReader`]. It holds at most `OpenOptions::sort_run_records`
//! requests in memory; when more arrive it sorts them and spills them as a
//! run to an anonymous temporary file (in `OpenOptions::temp_dir`, else the
//! system temp dir), then merges the runs with a heap. A trace that fits in
//! one run never touches disk. The sort is stable: requests with equal times
//! keep their file order (runs are cut in file order, each run is sorted
//! stably, and the merge breaks ties by run order). At most
//! [`MERGE_FAN_IN`] runs of one size are kept; more are merged into one
//! bigger run first, so open files and merge buffers stay bounded too.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};

/// Runs of one level merged at once (and the most kept per level).
pub const MERGE_FAN_IN: usize = 64;
/// Bytes of one request in a run file.
const RUN_RECORD_BYTES: usize = 37;
/// Buffer per run while merging.
const RUN_BUFFER_BYTES: usize = 256 * 1024;
const FLAG_WRITE: u8 = 1;
const FLAG_HAS_RESPONSE: u8 = 2;

fn encode(request: &Request, bytes: &mut [u8; RUN_RECORD_BYTES]) {
    bytes[0..8].copy_from_slice(&request.time_ns.to_le_bytes());
    bytes[8..16].copy_from_slice(&request.offset_bytes.to_le_bytes());
    bytes[16..24].copy_from_slice(&request.length_bytes.to_le_bytes());
    bytes[24..32].copy_from_slice(&request.response_ns.unwrap_or(0).to_le_bytes());
    bytes[32..36].copy_from_slice(&request.volume.to_le_bytes());
    let mut flags = 0;
    if request.op == Op::Write {
        flags |= FLAG_WRITE;
    }
    if request.response_ns.is_some() {
        flags |= FLAG_HAS_RESPONSE;
    }
    bytes[36] = flags;
}

fn decode(bytes: &[u8; RUN_RECORD_BYTES]) -> Request {
    let u64_at = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let flags = bytes[36];
    Request {
        time_ns: u64_at(0),
        offset_bytes: u64_at(8),
        length_bytes: u64_at(16),
        response_ns: (flags & FLAG_HAS_RESPONSE != 0).then(|| u64_at(24)),
        volume: u32::from_le_bytes([bytes[32], bytes[33], bytes[34], bytes[35]]),
        op: if flags & FLAG_WRITE != 0 {
            Op::Write
        } else {
            Op::Read
        },
    }
}

/// A sorted run spilled to disk.
struct Run {
    file: File,
    records: u64,
    /// 0 for runs cut from the input; n+1 for a merge of level-n runs.
    level: u32,
}

/// Where a merge takes requests from.
enum Source {
    Disk {
        reader: BufReader<File>,
        remaining: u64,
    },
    Memory(std::vec::IntoIter<Request>),
}

impl Source {
    fn from_run(run: Run) -> io::Result<Source> {
        let mut file = run.file;
        file.seek(SeekFrom::Start(0))?;
        Ok(Source::Disk {
            reader: BufReader::with_capacity(RUN_BUFFER_BYTES, file),
            remaining: run.records,
        })
    }

    fn next(&mut self) -> io::Result<Option<Request>> {
        match self {
            Source::Memory(requests) => Ok(requests.next()),
            Source::Disk { reader, remaining } => {
                if *remaining == 0 {
                    return Ok(None);
                }
                let mut bytes = [0u8; RUN_RECORD_BYTES];
                reader.read_exact(&mut bytes)?;
                *remaining -= 1;
                Ok(Some(decode(&bytes)))
            }
        }
    }
}

/// k-way merge of sorted sources; ties go to the earlier source.
struct Merger {
    sources: Vec<Source>,
    heads: Vec<Option<Request>>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
}

impl Merger {
    fn new(mut sources: Vec<Source>) -> io::Result<Merger> {
        let mut heads = Vec::with_capacity(sources.len());
        let mut heap = BinaryHeap::with_capacity(sources.len());
        for (index, source) in sources.iter_mut().enumerate() {
            let head = source.next()?;
            if let Some(request) = &head {
                heap.push(Reverse((request.time_ns, index)));
            }
            heads.push(head);
        }
        Ok(Merger {
            sources,
            heads,
            heap,
        })
    }

    fn next(&mut self) -> io::Result<Option<Request>> {
        let Some(Reverse((_, index))) = self.heap.pop() else {
            return Ok(None);
        };
        let request = self.heads[index].take();
        let following = self.sources[index].next()?;
        if let Some(next) = &following {
            self.heap.push(Reverse((next.time_ns, index)));
        }
        self.heads[index] = following;
        Ok(request)
    }
}

enum State {
    /// Nothing read from the inner reader yet.
    Unread,
    /// The whole trace fit in one run.
    Memory(std::vec::IntoIter<Request>),
    Merging(Merger),
    Done,
}

/// Reads another reader's requests in time order (see the module docs).
pub struct SortedReader {
    inner: Box<dyn TraceReader>,
    run_records: usize,
    fan_in: usize,
    temp_dir: Option<PathBuf>,
    state: State,
}

impl SortedReader {
    /// Wraps `inner`. Nothing is read until the first
    /// [`next_request`](TraceReader::next_request), which reads all of
    /// `inner` (errors of `inner` surface there).
    pub fn new(inner: Box<dyn TraceReader>, options: &OpenOptions) -> Result<Self> {
        Ok(Self::with_fan_in(inner, options, MERGE_FAN_IN))
    }

    fn with_fan_in(inner: Box<dyn TraceReader>, options: &OpenOptions, fan_in: usize) -> Self {
        Self {
            inner,
            run_records: options.sort_run_records.max(1),
            fan_in: fan_in.max(2),
            temp_dir: options.temp_dir.clone(),
            state: State::Unread,
        }
    }

    fn temp_dir(&self) -> PathBuf {
        self.temp_dir.clone().unwrap_or_else(std::env::temp_dir)
    }

    fn spill_error(&self, source: io::Error) -> TraceError {
        TraceError::Write {
            path: self.temp_dir().join(format!(
                "(sort run for {}; pass a temp dir with more room)",
                self.inner.path().display()
            )),
            source,
        }
    }

    fn run_read_error(&self, source: io::Error) -> TraceError {
        TraceError::Read {
            path: self
                .temp_dir()
                .join(format!("(sort run for {})", self.inner.path().display())),
            offset: 0,
            source,
        }
    }

    fn new_run_file(&self) -> io::Result<File> {
        match &self.temp_dir {
            Some(directory) => tempfile::tempfile_in(directory),
            None => tempfile::tempfile(),
        }
    }

    /// Writes every request of `merger` (or `requests`) to a new run file.
    fn write_run(
        &self,
        requests: &mut dyn Iterator<Item = io::Result<Request>>,
        level: u32,
    ) -> io::Result<Run> {
        let file = self.new_run_file()?;
        let mut writer = BufWriter::with_capacity(RUN_BUFFER_BYTES, file);
        let mut bytes = [0u8; RUN_RECORD_BYTES];
        let mut records = 0u64;
        for request in requests {
            encode(&request?, &mut bytes);
            writer.write_all(&bytes)?;
            records += 1;
        }
        let file = writer.into_inner().map_err(|error| error.into_error())?;
        Ok(Run {
            file,
            records,
            level,
        })
    }

    /// Merges the last `fan_in` runs while they share a level.
    fn cascade(&self, runs: &mut Vec<Run>) -> io::Result<()> {
        while runs.len() >= self.fan_in {
            let tail = &runs[runs.len() - self.fan_in..];
            let level = tail[0].level;
            if tail.iter().any(|run| run.level != level) {
                break;
            }
            let merged_runs = runs.split_off(runs.len() - self.fan_in);
            let sources = merged_runs
                .into_iter()
                .map(Source::from_run)
                .collect::<io::Result<Vec<_>>>()?;
            let mut merger = Merger::new(sources)?;
            let mut requests = std::iter::from_fn(|| merger.next().transpose());
            runs.push(self.write_run(&mut requests, level + 1)?);
        }
        Ok(())
    }

    /// Reads all of `inner`, spilling sorted runs as needed, and sets up the
    /// output.
    fn load(&mut self) -> Result<State> {
        let mut buffer: Vec<Request> = Vec::with_capacity(self.run_records.min(1 << 16));
        let mut runs: Vec<Run> = Vec::new();
        while let Some(request) = self.inner.next_request()? {
            // Spill only when a request arrives for a full buffer, so a trace
            // of exactly one run stays in memory.
            if buffer.len() >= self.run_records {
                buffer.sort_by_key(|request| request.time_ns);
                let mut requests = buffer.drain(..).map(Ok);
                let run = self
                    .write_run(&mut requests, 0)
                    .map_err(|source| self.spill_error(source))?;
                runs.push(run);
                self.cascade(&mut runs)
                    .map_err(|source| self.spill_error(source))?;
            }
            buffer.push(request);
        }
        buffer.sort_by_key(|request| request.time_ns);
        if runs.is_empty() {
            return Ok(State::Memory(buffer.into_iter()));
        }
        let mut sources = runs
            .into_iter()
            .map(Source::from_run)
            .collect::<io::Result<Vec<_>>>()
            .map_err(|source| self.run_read_error(source))?;
        sources.push(Source::Memory(buffer.into_iter()));
        let merger = Merger::new(sources).map_err(|source| self.run_read_error(source))?;
        Ok(State::Merging(merger))
    }
}

impl TraceReader for SortedReader {
    fn next_request(&mut self) -> Result<Option<Request>> {
        if matches!(self.state, State::Unread) {
            match self.load() {
                Ok(state) => self.state = state,
                Err(error) => {
                    self.state = State::Done;
                    return Err(error);
                }
            }
        }
        let next = match &mut self.state {
            State::Memory(requests) => Ok(requests.next()),
            State::Merging(merger) => merger.next(),
            State::Unread | State::Done => Ok(None),
        };
        match next {
            Ok(Some(request)) => Ok(Some(request)),
            Ok(None) => {
                self.state = State::Done;
                Ok(None)
            }
            Err(source) => {
                self.state = State::Done;
                Err(self.run_read_error(source))
            }
        }
    }

    fn format(&self) -> Format {
        self.inner.format()
    }

    fn volumes(&self) -> &VolumeTable {
        self.inner.volumes()
    }

    fn skipped_lines(&self) -> u64 {
        self.inner.skipped_lines()
    }

    fn ignored_lines(&self) -> u64 {
        self.inner.ignored_lines()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::IteratorReader;
    use tierd_common::rng::{Rng, SeededRng};

    /// `count` requests with times drawn from a small range (so many tie),
    /// in random order; `offset_bytes` is the position in the input, to check
    /// stability.
    fn shuffled(count: usize, seed: u64) -> Vec<Request> {
        let mut rng = SeededRng::new(seed);
        (0..count)
            .map(|position| Request {
                time_ns: rng.below(count as u64 / 4 + 1),
                volume: rng.below(2) as u32,
                op: if rng.chance(0.5) { Op::Write } else { Op::Read },
                offset_bytes: position as u64,
                length_bytes: rng.below(1 << 20),
                response_ns: rng.chance(0.5).then(|| rng.next_u64()),
            })
            .collect()
    }

    fn sort(input: Vec<Request>, options: &OpenOptions, fan_in: usize) -> Result<Vec<Request>> {
        let inner =
            IteratorReader::new(input.into_iter(), &["a", "b"], Format::Tencent, "shuffled");
        let mut reader = SortedReader::with_fan_in(Box::new(inner), options, fan_in);
        let mut output = Vec::new();
        while let Some(request) = reader.next_request()? {
            output.push(request);
        }
        assert!(reader.next_request()?.is_none());
        assert_eq!(reader.volumes().names(), ["a", "b"]);
        assert_eq!(reader.format(), Format::Tencent);
        Ok(output)
    }

    /// What a stable in-memory sort gives.
    fn expected(input: &[Request]) -> Vec<Request> {
        let mut sorted = input.to_vec();
        sorted.sort_by_key(|request| request.time_ns);
        sorted
    }

    #[test]
    fn spilled_runs_merge_into_a_complete_stable_order() {
        let directory = tempfile::tempdir().unwrap();
        let options = OpenOptions {
            sort_run_records: 7,
            temp_dir: Some(directory.path().to_path_buf()),
            ..OpenOptions::default()
        };
        for (count, fan_in) in [(1000, 3), (1000, MERGE_FAN_IN), (7, 3), (8, 3), (0, 3)] {
            let input = shuffled(count, count as u64 + fan_in as u64);
            let output = sort(input.clone(), &options, fan_in).unwrap();
            assert_eq!(
                output,
                expected(&input),
                "{count} requests, fan-in {fan_in}"
            );
            // Stability in its own words: equal times keep input order.
            for pair in output.windows(2) {
                assert!(
                    pair[0].time_ns < pair[1].time_ns
                        || pair[0].offset_bytes < pair[1].offset_bytes
                );
            }
        }
    }

    #[test]
    fn small_inputs_never_touch_disk() {
        let nowhere = OpenOptions {
            sort_run_records: 100,
            temp_dir: Some(PathBuf::from("/nonexistent/tierd-sort-test")),
            ..OpenOptions::default()
        };
        let input = shuffled(100, 1);
        assert_eq!(sort(input.clone(), &nowhere, 3).unwrap(), expected(&input));
        let error = sort(shuffled(101, 1), &nowhere, 3).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/tierd-sort-test"), "{error}");
    }

    #[test]
    fn run_records_round_trip() {
        for request in shuffled(50, 9) {
            let mut bytes = [0u8; RUN_RECORD_BYTES];
            encode(&request, &mut bytes);
            assert_eq!(decode(&bytes), request);
        }
    }
}
