//! LIRS2 block traces (`lirs-blocks`): a headerless array of little-endian
//! u32 block numbers, as in the CloudPhysics `w106` trace that ships with
//! caffeine's simulator.
//!
//! Each number is one reference to a 4 KiB block and becomes a read of 4096
//! bytes at `block * 4096`, at time 0 (the format has no times, sizes or
//! writes). The trace has one volume, named `0`. A file whose length is not a
//! multiple of 4 ends in a partial number: that is a bad record (with
//! `--skip-bad-lines`, counted and dropped).
//!
//! Detection is weak by nature (any binary data is a valid block list), so
//! [`sniff`] only accepts data that is clearly binary; detection tries it
//! after every other format, and `--format lirs-blocks` is the reliable way.

use std::io::{self, BufRead};
use std::path::Path;

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::input::Input;
use crate::open::{OpenOptions, DETECT_BYTES};
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};

pub const BLOCK_BYTES: u64 = 4096;
pub const ENTRY_BYTES: usize = 4;

const EXPECTED: &str = "a headerless array of little-endian u32 block numbers (4 bytes each, one 4 KiB block per number)";

/// Whether `head` looks like a block list: non-empty, clearly binary (has a
/// NUL or a byte above 0x7f), and a whole number of entries when `head` is
/// the whole file (shorter than the detection window). `Err` says why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    if head.is_empty() {
        return Err("empty".to_string());
    }
    if !head.iter().any(|byte| *byte == 0 || *byte > 0x7f) {
        return Err(
            "no NUL or non-ASCII byte: looks like text, not binary block numbers".to_string(),
        );
    }
    let partial_bytes = head.len() % ENTRY_BYTES;
    if head.len() < DETECT_BYTES && partial_bytes != 0 {
        return Err(format!(
            "{} bytes is not a multiple of {ENTRY_BYTES}",
            head.len()
        ));
    }
    Ok(())
}

pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    let mut volumes = VolumeTable::new();
    volumes.intern("0");
    Ok(Box::new(LirsBlocksReader {
        input,
        offset: 0,
        volumes,
        skip_bad_records: options.skip_bad_lines,
        skipped_records: 0,
        done: false,
    }))
}

/// Streams block numbers straight out of the input's buffer.
pub struct LirsBlocksReader {
    input: Input,
    /// Byte offset of the next entry in the uncompressed stream.
    offset: u64,
    volumes: VolumeTable,
    skip_bad_records: bool,
    skipped_records: u64,
    done: bool,
}

impl LirsBlocksReader {
    fn request(block: u32) -> Request {
        Request {
            time_ns: 0,
            volume: 0,
            op: Op::Read,
            offset_bytes: u64::from(block) * BLOCK_BYTES,
            length_bytes: BLOCK_BYTES,
            response_ns: None,
        }
    }

    fn read_error(&self, source: io::Error) -> TraceError {
        TraceError::Read {
            path: self.input.path.clone(),
            offset: self.offset,
            source,
        }
    }

    fn next_entry(&mut self) -> Result<Option<Request>> {
        // Fast path: a whole entry in the buffer.
        let buffered = loop {
            match self.input.reader.fill_buf() {
                Ok(buffered) => break buffered,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Err(self.read_error(source)),
            }
        };
        if buffered.len() >= ENTRY_BYTES {
            let block = u32::from_le_bytes([buffered[0], buffered[1], buffered[2], buffered[3]]);
            self.input.reader.consume(ENTRY_BYTES);
            self.offset += ENTRY_BYTES as u64;
            return Ok(Some(Self::request(block)));
        }
        // Slow path: an entry split across buffer refills, or the end.
        let mut entry = [0u8; ENTRY_BYTES];
        let mut filled = 0;
        while filled < ENTRY_BYTES {
            let buffered = match self.input.reader.fill_buf() {
                Ok(buffered) => buffered,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(self.read_error(source)),
            };
            if buffered.is_empty() {
                break;
            }
            let take = buffered.len().min(ENTRY_BYTES - filled);
            entry[filled..filled + take].copy_from_slice(&buffered[..take]);
            self.input.reader.consume(take);
            filled += take;
        }
        if filled == 0 {
            return Ok(None);
        }
        let entry_offset = self.offset;
        self.offset += filled as u64;
        if filled < ENTRY_BYTES {
            if self.skip_bad_records {
                self.skipped_records += 1;
                return Ok(None);
            }
            return Err(TraceError::BadRecord {
                path: self.input.path.clone(),
                offset: entry_offset,
                format: Format::LirsBlocks,
                reason: format!(
                    "the file ends {filled} bytes into a {ENTRY_BYTES}-byte block number (a truncated file, \
                     or not a block list: pass --format if it is another format)"
                ),
                expected: EXPECTED,
            });
        }
        Ok(Some(Self::request(u32::from_le_bytes(entry))))
    }
}

impl TraceReader for LirsBlocksReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>> {
        if self.done {
            return Ok(None);
        }
        let result = self.next_entry();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn format(&self) -> Format {
        Format::LirsBlocks
    }

    fn volumes(&self) -> &VolumeTable {
        &self.volumes
    }

    fn skipped_lines(&self) -> u64 {
        self.skipped_records
    }

    fn path(&self) -> &Path {
        &self.input.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::Compression;
    use std::io::Read;

    /// A reader that hands out at most 3 bytes per call, so entries straddle
    /// buffer refills.
    struct Trickle(io::Cursor<Vec<u8>>);

    impl Read for Trickle {
        fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
            let limit = buffer.len().min(3);
            self.0.read(&mut buffer[..limit])
        }
    }

    fn read(bytes: Vec<u8>, skip_bad_lines: bool) -> (Result<Vec<Request>>, u64) {
        let input = Input {
            path: "w.trace".into(),
            compression: Compression::None,
            reader: Box::new(io::BufReader::with_capacity(
                5,
                Trickle(io::Cursor::new(bytes)),
            )),
        };
        let options = OpenOptions {
            skip_bad_lines,
            ..OpenOptions::default()
        };
        let mut reader = open(input, &options).unwrap();
        let mut requests = Vec::new();
        let result = loop {
            match reader.next_request() {
                Ok(Some(request)) => requests.push(request),
                Ok(None) => break Ok(requests),
                Err(error) => break Err(error),
            }
        };
        assert!(matches!(reader.next_request(), Ok(None)));
        (result, reader.skipped_lines())
    }

    #[test]
    fn block_numbers_become_4k_reads() {
        let blocks = [0u32, 1, 1_197_769, u32::MAX, 7];
        let bytes: Vec<u8> = blocks
            .iter()
            .flat_map(|block| block.to_le_bytes())
            .collect();
        let requests = read(bytes, false).0.unwrap();
        let offsets: Vec<u64> = requests
            .iter()
            .map(|request| request.offset_bytes)
            .collect();
        assert_eq!(
            offsets,
            [
                0,
                4096,
                1_197_769 * 4096,
                u64::from(u32::MAX) * 4096,
                28_672
            ]
        );
        assert!(requests.iter().all(|request| request.op == Op::Read
            && request.length_bytes == 4096
            && request.time_ns == 0));
    }

    #[test]
    fn a_partial_last_entry_is_an_error_or_skipped() {
        let bytes = vec![1, 0, 0, 0, 2, 0, 0, 0, 9, 9];
        let error = read(bytes.clone(), false).0.unwrap_err().to_string();
        assert!(
            error.contains("byte offset 8") && error.contains("2 bytes into"),
            "{error}"
        );
        let (requests, skipped) = read(bytes, true);
        assert_eq!(requests.unwrap().len(), 2);
        assert_eq!(skipped, 1);
    }

    #[test]
    fn sniff_wants_binary_whole_entries() {
        assert!(sniff(&[1, 0, 0, 0, 200, 1, 0, 0]).is_ok());
        assert!(sniff(b"1234").is_err(), "ASCII text");
        assert!(
            sniff(&[1, 0, 0]).is_err(),
            "partial entry in a whole short file"
        );
        assert!(sniff(&[]).is_err());
        let mut long = vec![b'a'; DETECT_BYTES];
        long[10] = 0;
        assert!(
            sniff(&long[..DETECT_BYTES - 1]).is_err(),
            "short file, odd length"
        );
        assert!(sniff(&long).is_ok(), "a full window may cut an entry");
    }

    #[test]
    fn the_shared_w106_trace_has_its_golden_counts() {
        let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))
        else {
            return;
        };
        let options = OpenOptions {
            format: Some(Format::LirsBlocks),
            ..OpenOptions::default()
        };
        let mut reader =
            crate::open_trace(&traces.join("cloudphysics/w106.trace.xz"), &options).unwrap();
        let mut distinct = tierd_common::hash::FastSet::default();
        let mut references = 0u64;
        let mut largest = 0u64;
        while let Some(request) = reader.next_request().unwrap() {
            references += 1;
            largest = largest.max(request.offset_bytes / BLOCK_BYTES);
            distinct.insert(request.offset_bytes);
        }
        assert_eq!(references, 5_292_456);
        assert_eq!(distinct.len(), 275_171);
        assert_eq!(largest, 1_197_769);
    }
}
