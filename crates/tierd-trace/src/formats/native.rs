//! tierd's native binary trace format (`.tierd`): written once by
//! `tierd trace convert`, read back many times at memory speed.
//!
//! The file is not compressed as a whole, so its header stays readable; the
//! records are stored in blocks, each compressed on its own with zstd. All
//! integers are little-endian. The full layout with the reasons for each choice
//! is in `docs/formats/tierd.md`; in short:
//!
//! ```text
//! header  magic "TIERDTR\0", u32 version (1), u32 record size (32),
//!         u64 record count, u64 first time ns, u64 last time ns,
//!         u32 volume count, per volume: u32 name length + UTF-8 name,
//!         u32 CRC-32 of every header byte before it
//! blocks  u32 record count, u32 compressed bytes, u32 CRC-32 of the
//!         uncompressed block, zstd frame; repeated until the header's count
//! ```
//!
//! A record is 32 bytes: `time_ns u64, offset_bytes u64, length_bytes u32,
//! volume u32, response u32, op u8, flags u8, 2 reserved bytes`. Inside a
//! block the records are transposed: field by field (all times, then all
//! offsets, ...), and within a field byte plane by byte plane (the low byte
//! of every value, then the next byte, ...). Each time but the block's first
//! is stored as the difference from the previous one (wrapping, so unsorted
//! traces round-trip too). A block of n records is still exactly 32 n bytes
//! before compression; the transposition turns the always-zero high bytes
//! into long runs, so zstd's output is smaller and decodes several times
//! faster (measurements in BENCHMARKS.md).

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::input::{Input, Output, READ_BUFFER_BYTES};
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};
use crate::write::TraceWriter;

/// The first eight bytes of every native trace.
pub const MAGIC: [u8; 8] = *b"TIERDTR\0";
/// The layout version this code writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of one record before compression.
pub const RECORD_BYTES: usize = 32;
/// Records per block the writer produces (the last block may hold fewer).
pub const BLOCK_RECORDS: usize = 32 * 1024;
/// Largest block the reader accepts, so a corrupt count cannot make it
/// allocate without bound (32 MiB uncompressed).
pub const MAX_BLOCK_RECORDS: usize = 1 << 20;
/// Largest volume table the reader accepts.
pub const MAX_VOLUMES: u32 = 1 << 20;
/// Longest volume name the reader accepts, in bytes.
pub const MAX_VOLUME_NAME_BYTES: u32 = 4096;
/// zstd level of the writer. Negative levels store literals without
/// entropy coding, which decodes much faster on byte-planed records for a
/// few percent of size (BENCHMARKS.md). Any level reads back the same.
pub const COMPRESSION_LEVEL: i32 = -5;
/// Shortest match the writer's zstd looks for: short matches in the
/// low-entropy byte planes cost more to decode than they save.
pub const MIN_MATCH_BYTES: u32 = 7;

/// Bytes of the fixed part of the header (magic to the volume count).
const FIXED_HEADER_BYTES: usize = 44;
const BLOCK_HEADER_BYTES: usize = 12;

const OP_READ: u8 = 0;
const OP_WRITE: u8 = 1;
/// The record has a response time.
const FLAG_HAS_RESPONSE: u8 = 1;
/// The response is in microseconds because it did not fit a u32 of ns.
const FLAG_RESPONSE_IN_US: u8 = 2;
const KNOWN_FLAGS: u8 = FLAG_HAS_RESPONSE | FLAG_RESPONSE_IN_US;

const EXPECTED: &str =
    "a TIERDTR\\0 header of version 1 with 32-byte records, then zstd-compressed \
     blocks with CRC-32 checksums (docs/formats/tierd.md); the file may be damaged or truncated: \
     convert the source trace again";

/// Whether `head` starts with the native magic; `Err` says why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    if head.starts_with(&MAGIC) {
        Ok(())
    } else {
        Err("does not start with the magic TIERDTR\\0".to_string())
    }
}

/// Opens a native reader; the header is read and checked here.
pub fn open(input: Input, _options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(NativeReader::new(input)?))
}

/// What the header says about the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub record_count: u64,
    pub first_time_ns: u64,
    pub last_time_ns: u64,
}

/// One record as stored, before transposition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Record {
    time_ns: u64,
    offset_bytes: u64,
    length_bytes: u32,
    volume: u32,
    response: u32,
    op: u8,
    flags: u8,
}

impl Record {
    /// The stored form of `request`, or why it cannot be stored.
    fn from_request(request: &Request) -> std::result::Result<Record, String> {
        let length_bytes = u32::try_from(request.length_bytes).map_err(|_| {
            format!(
                "length {} bytes exceeds the format's limit of {} bytes",
                request.length_bytes,
                u32::MAX
            )
        })?;
        let (response, flags) = match request.response_ns {
            None => (0, 0),
            Some(response_ns) => match u32::try_from(response_ns) {
                Ok(response) => (response, FLAG_HAS_RESPONSE),
                Err(_) => {
                    let response_us = u32::try_from(response_ns / 1000).map_err(|_| {
                        format!(
                            "response time {response_ns} ns exceeds the format's limit of {} us",
                            u32::MAX
                        )
                    })?;
                    (response_us, FLAG_HAS_RESPONSE | FLAG_RESPONSE_IN_US)
                }
            },
        };
        Ok(Record {
            time_ns: request.time_ns,
            offset_bytes: request.offset_bytes,
            length_bytes,
            volume: request.volume,
            response,
            op: match request.op {
                Op::Read => OP_READ,
                Op::Write => OP_WRITE,
            },
            flags,
        })
    }
}

/// Bytes of each field of a record, in storage order: time (delta), offset,
/// length, volume, response, op, flags, reserved.
const FIELD_BYTES: [usize; 8] = [8, 8, 4, 4, 4, 1, 1, 2];

/// Writes `values` (of `width` bytes each) as `width` byte planes of
/// `count` bytes, least significant plane first, starting at `raw[start]`.
fn scatter(
    raw: &mut [u8],
    start: usize,
    count: usize,
    width: usize,
    values: impl Iterator<Item = u64>,
) {
    for (index, value) in values.enumerate() {
        for plane in 0..width {
            raw[start + plane * count + index] = (value >> (8 * plane)) as u8;
        }
    }
}

/// Lays `records` out field by field and byte plane by byte plane into `raw`
/// (cleared first): `RECORD_BYTES` bytes per record, transposed.
fn encode_block(records: &[Record], raw: &mut Vec<u8>) {
    let count = records.len();
    raw.clear();
    raw.resize(count * RECORD_BYTES, 0);
    let mut previous_time_ns = 0u64;
    let deltas = records.iter().map(|record| {
        let delta = record.time_ns.wrapping_sub(previous_time_ns);
        previous_time_ns = record.time_ns;
        delta
    });
    let mut start = 0;
    let mut field = |raw: &mut Vec<u8>, width: usize, values: &mut dyn Iterator<Item = u64>| {
        scatter(raw, start, count, width, values);
        start += width * count;
    };
    field(raw, FIELD_BYTES[0], &mut { deltas });
    field(
        raw,
        FIELD_BYTES[1],
        &mut records.iter().map(|record| record.offset_bytes),
    );
    field(
        raw,
        FIELD_BYTES[2],
        &mut records.iter().map(|record| u64::from(record.length_bytes)),
    );
    field(
        raw,
        FIELD_BYTES[3],
        &mut records.iter().map(|record| u64::from(record.volume)),
    );
    field(
        raw,
        FIELD_BYTES[4],
        &mut records.iter().map(|record| u64::from(record.response)),
    );
    field(
        raw,
        FIELD_BYTES[5],
        &mut records.iter().map(|record| u64::from(record.op)),
    );
    field(
        raw,
        FIELD_BYTES[6],
        &mut records.iter().map(|record| u64::from(record.flags)),
    );
    // The reserved planes stay zero.
}

/// Rebuilds 4-byte values from 4 byte planes of `count` bytes each: a
/// widening loop the compiler vectorises. 8-byte fields are gathered as two
/// 4-byte halves, which vectorises far better than 8 planes at once.
fn gather_u32(planes: &[u8], count: usize, out: &mut Vec<u32>) {
    let plane = |index: usize| &planes[index * count..(index + 1) * count];
    let (p0, p1, p2, p3) = (plane(0), plane(1), plane(2), plane(3));
    out.clear();
    out.extend(
        p0.iter()
            .zip(p1)
            .zip(p2)
            .zip(p3)
            .map(|(((b0, b1), b2), b3)| {
                u32::from(*b0) | u32::from(*b1) << 8 | u32::from(*b2) << 16 | u32::from(*b3) << 24
            }),
    );
}

/// The multi-byte fields of a block being decoded (reused between blocks).
#[derive(Default)]
struct Columns {
    time_deltas_low: Vec<u32>,
    time_deltas_high: Vec<u32>,
    offsets_low: Vec<u32>,
    offsets_high: Vec<u32>,
    lengths_bytes: Vec<u32>,
    volumes: Vec<u32>,
    responses: Vec<u32>,
}

/// Why record `index` of a block is invalid, if it is.
fn record_fault(
    columns: &Columns,
    ops: &[u8],
    flags: &[u8],
    reserved: &[u8],
    index: usize,
    volume_count: u32,
) -> Option<String> {
    let count = ops.len();
    let (op, flag) = (ops[index], flags[index]);
    let (volume, response) = (columns.volumes[index], columns.responses[index]);
    let reserved = [reserved[index], reserved[count + index]];
    if op > OP_WRITE {
        Some(format!(
            "record {index} of the block has op {op}; expected 0 (read) or 1 (write)"
        ))
    } else if flag & !KNOWN_FLAGS != 0 || flag == FLAG_RESPONSE_IN_US {
        Some(format!(
            "record {index} of the block has unknown flags {flag:#04x}"
        ))
    } else if flag & FLAG_HAS_RESPONSE == 0 && response != 0 {
        Some(format!(
            "record {index} of the block has a response of {response} but no response flag"
        ))
    } else if volume >= volume_count {
        Some(format!(
            "record {index} of the block names volume {volume}, but the header lists {volume_count} volumes"
        ))
    } else if reserved != [0, 0] {
        Some(format!(
            "record {index} of the block has non-zero reserved bytes {reserved:?}"
        ))
    } else {
        None
    }
}

/// Whether `flags` are invalid, or say "no response" while a response is
/// stored. Branch-free.
#[inline(always)]
fn flags_fault(flags: u8, response: u32) -> bool {
    let without_response = flags & FLAG_HAS_RESPONSE == 0;
    (flags & !KNOWN_FLAGS != 0) | (without_response & ((flags != 0) | (response != 0)))
}

/// Decodes a decompressed block of `count` records into `requests`
/// (cleared first), field by field in simple passes the compiler can
/// vectorise, then one pass that assembles the requests. `Err` carries the
/// reason for the first invalid record.
fn decode_block(
    raw: &[u8],
    count: usize,
    volume_count: u32,
    columns: &mut Columns,
    requests: &mut Vec<Request>,
) -> std::result::Result<(), String> {
    requests.clear();
    if raw.len() != count * RECORD_BYTES {
        return Err(format!(
            "the block decompresses to {} bytes, but {count} records take {}",
            raw.len(),
            count * RECORD_BYTES
        ));
    }
    let mut fields = [&raw[..0]; 8];
    let mut start = 0;
    for (field, width) in fields.iter_mut().zip(FIELD_BYTES) {
        *field = &raw[start..start + width * count];
        start += width * count;
    }
    let [times, offsets, lengths, volumes, responses, ops, flags, reserved] = fields;
    let (times_low, times_high) = times.split_at(4 * count);
    let (offsets_low, offsets_high) = offsets.split_at(4 * count);
    gather_u32(times_low, count, &mut columns.time_deltas_low);
    gather_u32(times_high, count, &mut columns.time_deltas_high);
    gather_u32(offsets_low, count, &mut columns.offsets_low);
    gather_u32(offsets_high, count, &mut columns.offsets_high);
    gather_u32(lengths, count, &mut columns.lengths_bytes);
    gather_u32(volumes, count, &mut columns.volumes);
    gather_u32(responses, count, &mut columns.responses);

    // Validity: branch-free folds (no early exit, so they vectorise); the
    // search for the culprit runs only on a damaged file.
    let largest_op = ops.iter().fold(0u8, |largest, op| largest.max(*op));
    let largest_volume = columns
        .volumes
        .iter()
        .fold(0u32, |largest, volume| largest.max(*volume));
    let bad_flags = flags
        .iter()
        .zip(&columns.responses)
        .fold(false, |bad, (flag, response)| {
            bad | flags_fault(*flag, *response)
        });
    let reserved_bits = reserved.iter().fold(0u8, |bits, byte| bits | byte);
    if largest_op > OP_WRITE
        || (count > 0 && largest_volume >= volume_count)
        || bad_flags
        || reserved_bits != 0
    {
        let reason = (0..count)
            .find_map(|index| record_fault(columns, ops, flags, reserved, index, volume_count))
            .unwrap_or_else(|| "the block holds an invalid record".to_string());
        return Err(reason);
    }

    let mut time_ns = 0u64;
    let joined = |low: &u32, high: &u32| u64::from(*low) | u64::from(*high) << 32;
    let fields = columns
        .time_deltas_low
        .iter()
        .zip(&columns.time_deltas_high)
        .zip(columns.offsets_low.iter().zip(&columns.offsets_high))
        .zip(&columns.lengths_bytes)
        .zip(&columns.volumes)
        .zip(&columns.responses)
        .zip(ops)
        .zip(flags);
    requests.reserve(count);
    requests.extend(fields.map(
        |((((((time_delta, offset), length_bytes), volume), response), op), flag)| {
            time_ns = time_ns.wrapping_add(joined(time_delta.0, time_delta.1));
            let response = u64::from(*response);
            let response_ns = match flag & KNOWN_FLAGS {
                FLAG_HAS_RESPONSE => Some(response),
                KNOWN_FLAGS => Some(response * 1000),
                _ => None,
            };
            Request {
                time_ns,
                volume: *volume,
                op: if *op == OP_WRITE { Op::Write } else { Op::Read },
                offset_bytes: joined(offset.0, offset.1),
                length_bytes: u64::from(*length_bytes),
                response_ns,
            }
        },
    ));
    Ok(())
}

/// Reads a native trace. Memory: one compressed and one decompressed block,
/// reused.
pub struct NativeReader {
    input: Input,
    header: Header,
    volumes: VolumeTable,
    /// Bytes consumed from the (decompressed) input stream.
    offset: u64,
    /// Records in the blocks loaded so far.
    records_loaded: u64,
    compressed: Vec<u8>,
    raw: Vec<u8>,
    columns: Columns,
    block: Vec<Request>,
    next: usize,
    decompressor: zstd::bulk::Decompressor<'static>,
    done: bool,
}

impl NativeReader {
    /// Reads and checks the header.
    pub fn new(input: Input) -> Result<NativeReader> {
        let decompressor = zstd::bulk::Decompressor::new().map_err(|source| TraceError::Read {
            path: input.path.clone(),
            offset: 0,
            source,
        })?;
        let mut reader = NativeReader {
            input,
            header: Header {
                record_count: 0,
                first_time_ns: 0,
                last_time_ns: 0,
            },
            volumes: VolumeTable::new(),
            offset: 0,
            records_loaded: 0,
            compressed: Vec::new(),
            raw: Vec::new(),
            columns: Columns::default(),
            block: Vec::new(),
            next: 0,
            decompressor,
            done: false,
        };
        reader.read_header()?;
        Ok(reader)
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    fn bad(&self, offset: u64, reason: impl Into<String>) -> TraceError {
        TraceError::BadRecord {
            path: self.input.path.clone(),
            offset,
            format: Format::Tierd,
            reason: reason.into(),
            expected: EXPECTED,
        }
    }

    /// Fills `buffer` from the input; `what` names the part being read for
    /// the error when the file ends first.
    fn read_exact(&mut self, buffer: &mut [u8], what: &str) -> Result<()> {
        let mut filled = 0;
        while filled < buffer.len() {
            match self.input.reader.read(&mut buffer[filled..]) {
                Ok(0) => {
                    return Err(self.bad(
                        self.offset,
                        format!(
                            "the file ends inside {what} ({filled} of {} bytes present)",
                            buffer.len()
                        ),
                    ))
                }
                Ok(read) => {
                    filled += read;
                    self.offset += read as u64;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TraceError::Read {
                        path: self.input.path.clone(),
                        offset: self.offset,
                        source,
                    })
                }
            }
        }
        Ok(())
    }

    fn read_header(&mut self) -> Result<()> {
        let mut fixed = [0u8; FIXED_HEADER_BYTES];
        self.read_exact(&mut fixed[..8], "the magic")?;
        if fixed[..8] != MAGIC {
            return Err(self.bad(0, format!("the magic is {:?}, not TIERDTR\\0", &fixed[..8])));
        }
        self.read_exact(&mut fixed[8..], "the header")?;
        let field_u32 = |at: usize| {
            u32::from_le_bytes([fixed[at], fixed[at + 1], fixed[at + 2], fixed[at + 3]])
        };
        let field_u64 = |at: usize| u64::from(field_u32(at)) | (u64::from(field_u32(at + 4)) << 32);
        let version = field_u32(8);
        if version != VERSION {
            return Err(self.bad(
                8,
                format!("layout version {version}; this tierd reads version {VERSION} (upgrade tierd or convert again)"),
            ));
        }
        let record_bytes = field_u32(12);
        if record_bytes as usize != RECORD_BYTES {
            return Err(self.bad(
                12,
                format!("record size {record_bytes}; version 1 records are {RECORD_BYTES} bytes"),
            ));
        }
        self.header = Header {
            record_count: field_u64(16),
            first_time_ns: field_u64(24),
            last_time_ns: field_u64(32),
        };
        let volume_count = field_u32(40);
        if volume_count > MAX_VOLUMES {
            return Err(self.bad(
                40,
                format!("{volume_count} volumes; at most {MAX_VOLUMES} are allowed"),
            ));
        }
        let mut checksum = crc32fast::Hasher::new();
        checksum.update(&fixed);
        let mut name = Vec::new();
        for index in 0..volume_count {
            let name_offset = self.offset;
            let mut length = [0u8; 4];
            self.read_exact(&mut length, "the volume table")?;
            checksum.update(&length);
            let length = u32::from_le_bytes(length);
            if length > MAX_VOLUME_NAME_BYTES {
                return Err(self.bad(
                    name_offset,
                    format!("volume {index} has a name of {length} bytes; at most {MAX_VOLUME_NAME_BYTES} are allowed"),
                ));
            }
            name.resize(length as usize, 0);
            self.read_exact(&mut name, "the volume table")?;
            checksum.update(&name);
            let Ok(text) = std::str::from_utf8(&name) else {
                return Err(self.bad(
                    name_offset,
                    format!("volume {index} has a name that is not UTF-8"),
                ));
            };
            if self.volumes.intern(text) != index {
                return Err(self.bad(name_offset, format!("volume name {text:?} appears twice")));
            }
        }
        let checksum_offset = self.offset;
        let mut stored = [0u8; 4];
        self.read_exact(&mut stored, "the header checksum")?;
        let stored = u32::from_le_bytes(stored);
        let computed = checksum.finalize();
        if stored != computed {
            return Err(self.bad(
                checksum_offset,
                format!("header checksum {stored:#010x} does not match the header's CRC-32 {computed:#010x}"),
            ));
        }
        Ok(())
    }

    /// Loads the next block; `Ok(false)` at the end of the file.
    fn load_block(&mut self) -> Result<bool> {
        let block_offset = self.offset;
        if self.records_loaded == self.header.record_count {
            let trailing = match self.input.reader.fill_buf() {
                Ok(bytes) => bytes.len(),
                Err(source) => {
                    return Err(TraceError::Read {
                        path: self.input.path.clone(),
                        offset: self.offset,
                        source,
                    })
                }
            };
            if trailing != 0 {
                return Err(self.bad(
                    block_offset,
                    format!(
                        "bytes follow the last block (the header promises {} records)",
                        self.header.record_count
                    ),
                ));
            }
            return Ok(false);
        }
        let mut block_header = [0u8; BLOCK_HEADER_BYTES];
        let missing = format!(
            "the block header after {} of the {} records the header promises",
            self.records_loaded, self.header.record_count
        );
        self.read_exact(&mut block_header, &missing)?;
        let field = |at: usize| {
            u32::from_le_bytes([
                block_header[at],
                block_header[at + 1],
                block_header[at + 2],
                block_header[at + 3],
            ])
        };
        let count = field(0) as usize;
        let compressed_bytes = field(4) as usize;
        let stored_checksum = field(8);
        let remaining = self.header.record_count - self.records_loaded;
        if count == 0 || count > MAX_BLOCK_RECORDS || count as u64 > remaining {
            return Err(self.bad(
                block_offset,
                format!(
                    "block record count {count}; expected 1 to {} ({remaining} records remain of {})",
                    MAX_BLOCK_RECORDS.min(usize::try_from(remaining).unwrap_or(usize::MAX)),
                    self.header.record_count
                ),
            ));
        }
        let raw_bytes = count * RECORD_BYTES;
        let bound = zstd::zstd_safe::compress_bound(raw_bytes);
        if compressed_bytes == 0 || compressed_bytes > bound {
            return Err(self.bad(
                block_offset,
                format!("compressed block size {compressed_bytes}; {count} records compress to 1 to {bound} bytes"),
            ));
        }
        self.raw.clear();
        self.raw.reserve(raw_bytes);
        // Decompress straight out of the input's buffer when the whole
        // payload is there (the common case), else gather it first.
        let buffered = match self.input.reader.fill_buf() {
            Ok(buffered) => buffered,
            Err(source) => {
                return Err(TraceError::Read {
                    path: self.input.path.clone(),
                    offset: self.offset,
                    source,
                })
            }
        };
        let decompressed = if buffered.len() >= compressed_bytes {
            let result = self
                .decompressor
                .decompress_to_buffer(&buffered[..compressed_bytes], &mut self.raw);
            self.input.reader.consume(compressed_bytes);
            self.offset += compressed_bytes as u64;
            result
        } else {
            let mut compressed = std::mem::take(&mut self.compressed);
            compressed.resize(compressed_bytes, 0);
            let read = self.read_exact(&mut compressed, "a compressed block");
            self.compressed = compressed;
            read?;
            self.decompressor
                .decompress_to_buffer(&self.compressed, &mut self.raw)
        };
        if let Err(error) = decompressed {
            return Err(self.bad(
                block_offset,
                format!("the block does not decompress: {error}"),
            ));
        }
        let computed = crc32fast::hash(&self.raw);
        if computed != stored_checksum {
            return Err(self.bad(
                block_offset,
                format!("block checksum {stored_checksum:#010x} does not match its CRC-32 {computed:#010x}"),
            ));
        }
        let volume_count = u32::try_from(self.volumes.len()).unwrap_or(u32::MAX);
        if let Err(reason) = decode_block(
            &self.raw,
            count,
            volume_count,
            &mut self.columns,
            &mut self.block,
        ) {
            return Err(self.bad(block_offset, reason));
        }
        if self.records_loaded == 0 && self.block[0].time_ns != self.header.first_time_ns {
            return Err(self.bad(
                block_offset,
                format!(
                    "the first record's time {} ns differs from the header's first time {} ns",
                    self.block[0].time_ns, self.header.first_time_ns
                ),
            ));
        }
        self.records_loaded += count as u64;
        if self.records_loaded == self.header.record_count {
            let last_time_ns = self.block[count - 1].time_ns;
            if last_time_ns != self.header.last_time_ns {
                return Err(self.bad(
                    block_offset,
                    format!(
                        "the last record's time {last_time_ns} ns differs from the header's last time {} ns",
                        self.header.last_time_ns
                    ),
                ));
            }
        }
        self.next = 0;
        Ok(true)
    }
}

impl TraceReader for NativeReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>> {
        if let Some(request) = self.block.get(self.next) {
            self.next += 1;
            return Ok(Some(*request));
        }
        if self.done {
            return Ok(None);
        }
        match self.load_block() {
            Ok(true) => {
                self.next = 1;
                Ok(Some(self.block[0]))
            }
            Ok(false) => {
                self.done = true;
                self.block.clear();
                Ok(None)
            }
            Err(error) => {
                self.done = true;
                self.block.clear();
                Err(error)
            }
        }
    }

    fn format(&self) -> Format {
        Format::Tierd
    }

    fn volumes(&self) -> &VolumeTable {
        &self.volumes
    }

    fn path(&self) -> &Path {
        &self.input.path
    }
}

/// Writes a native trace.
///
/// The header holds the record count and volume table, known only at the
/// end, so blocks are spooled to an anonymous temporary file in the output's
/// directory; [`TraceWriter::finish`] writes the header and copies the
/// blocks after it. Disk use during conversion is therefore about twice the
/// compressed size; memory is one block.
pub struct NativeWriter {
    path: PathBuf,
    output: Output,
    spool: BufWriter<File>,
    pending: Vec<Record>,
    raw: Vec<u8>,
    compressed: Vec<u8>,
    compressor: zstd::bulk::Compressor<'static>,
    volume_names: Vec<String>,
    record_count: u64,
    first_time_ns: u64,
    last_time_ns: u64,
}

impl NativeWriter {
    /// Creates `path` (compressed as a whole only if its extension asks) and
    /// the spool file beside it.
    pub fn create(path: &Path) -> Result<NativeWriter> {
        let write_error = |source| TraceError::Write {
            path: path.to_path_buf(),
            source,
        };
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let spool = tempfile::tempfile_in(&directory).map_err(write_error)?;
        let mut compressor = zstd::bulk::Compressor::new(COMPRESSION_LEVEL).map_err(write_error)?;
        compressor
            .set_parameter(zstd::zstd_safe::CParameter::MinMatch(MIN_MATCH_BYTES))
            .map_err(write_error)?;
        let output = Output::create(path)?;
        Ok(NativeWriter {
            path: path.to_path_buf(),
            output,
            spool: BufWriter::with_capacity(READ_BUFFER_BYTES, spool),
            pending: Vec::with_capacity(BLOCK_RECORDS),
            raw: Vec::new(),
            compressed: Vec::new(),
            compressor,
            volume_names: Vec::new(),
            record_count: 0,
            first_time_ns: 0,
            last_time_ns: 0,
        })
    }

    fn write_error(&self, source: io::Error) -> TraceError {
        TraceError::Write {
            path: self.path.clone(),
            source,
        }
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        encode_block(&self.pending, &mut self.raw);
        let checksum = crc32fast::hash(&self.raw);
        self.compressed.clear();
        self.compressed
            .reserve(zstd::zstd_safe::compress_bound(self.raw.len()));
        if let Err(source) = self
            .compressor
            .compress_to_buffer(&self.raw, &mut self.compressed)
        {
            return Err(self.write_error(source));
        }
        let count = u32::try_from(self.pending.len()).unwrap_or(u32::MAX);
        let compressed_bytes = u32::try_from(self.compressed.len()).unwrap_or(u32::MAX);
        let mut block_header = [0u8; BLOCK_HEADER_BYTES];
        block_header[0..4].copy_from_slice(&count.to_le_bytes());
        block_header[4..8].copy_from_slice(&compressed_bytes.to_le_bytes());
        block_header[8..12].copy_from_slice(&checksum.to_le_bytes());
        let written = self
            .spool
            .write_all(&block_header)
            .and_then(|()| self.spool.write_all(&self.compressed));
        if let Err(source) = written {
            return Err(self.write_error(source));
        }
        self.pending.clear();
        Ok(())
    }

    fn header_bytes(&self) -> Vec<u8> {
        let mut header = Vec::with_capacity(FIXED_HEADER_BYTES + 4);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&(RECORD_BYTES as u32).to_le_bytes());
        header.extend_from_slice(&self.record_count.to_le_bytes());
        header.extend_from_slice(&self.first_time_ns.to_le_bytes());
        header.extend_from_slice(&self.last_time_ns.to_le_bytes());
        header.extend_from_slice(&(self.volume_names.len() as u32).to_le_bytes());
        for name in &self.volume_names {
            header.extend_from_slice(&(name.len() as u32).to_le_bytes());
            header.extend_from_slice(name.as_bytes());
        }
        let checksum = crc32fast::hash(&header);
        header.extend_from_slice(&checksum.to_le_bytes());
        header
    }
}

impl TraceWriter for NativeWriter {
    fn write_request(&mut self, request: &Request, volumes: &VolumeTable) -> Result<()> {
        let unwritable = |reason: String| TraceError::Unwritable {
            path: self.path.clone(),
            format: Format::Tierd,
            reason: format!(
                "request {} (counting from 1): {reason}",
                self.record_count + 1
            ),
        };
        if request.volume as usize >= self.volume_names.len() {
            if request.volume as usize >= volumes.len() {
                return Err(unwritable(format!(
                    "volume id {} is not in the reader's volume table of {} names",
                    request.volume,
                    volumes.len()
                )));
            }
            for name in &volumes.names()[self.volume_names.len()..] {
                if name.len() > MAX_VOLUME_NAME_BYTES as usize {
                    return Err(unwritable(format!(
                        "volume name of {} bytes exceeds the format's limit of {MAX_VOLUME_NAME_BYTES}",
                        name.len()
                    )));
                }
                if self.volume_names.len() >= MAX_VOLUMES as usize {
                    return Err(unwritable(format!("more than {MAX_VOLUMES} volumes")));
                }
                self.volume_names.push(name.clone());
            }
        }
        let record = Record::from_request(request).map_err(unwritable)?;
        if self.record_count == 0 {
            self.first_time_ns = request.time_ns;
        }
        self.last_time_ns = request.time_ns;
        self.record_count += 1;
        self.pending.push(record);
        if self.pending.len() == BLOCK_RECORDS {
            self.flush_block()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<u64> {
        self.flush_block()?;
        let header = self.header_bytes();
        let NativeWriter {
            path,
            mut output,
            spool,
            record_count,
            ..
        } = *self;
        let write_error = |source| TraceError::Write {
            path: path.clone(),
            source,
        };
        let mut spool = spool
            .into_inner()
            .map_err(|error| write_error(error.into_error()))?;
        spool.seek(SeekFrom::Start(0)).map_err(write_error)?;
        output.write_all(&header).map_err(write_error)?;
        let mut blocks = BufReader::with_capacity(READ_BUFFER_BYTES, spool);
        io::copy(&mut blocks, &mut output).map_err(write_error)?;
        output.finish()?;
        Ok(record_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::open_input;
    use tierd_common::rng::{Rng, SeededRng};

    fn sample_requests(count: usize, seed: u64) -> Vec<Request> {
        let mut rng = SeededRng::new(seed);
        let mut time_ns = 1_000_000_000u64;
        (0..count)
            .map(|_| {
                // Mostly increasing, sometimes going back: the delta coding
                // must round-trip unsorted traces too.
                if rng.chance(0.05) {
                    time_ns = time_ns.saturating_sub(rng.below(1_000_000));
                } else {
                    time_ns += rng.below(1_000_000);
                }
                let response_ns = match rng.below(4) {
                    0 => None,
                    1 => Some(rng.below(10_000_000)),
                    2 => Some(u64::from(u32::MAX) + 1000 * rng.below(1_000_000)),
                    _ => Some(0),
                };
                Request {
                    time_ns,
                    volume: rng.below(3) as u32,
                    op: if rng.chance(0.3) { Op::Write } else { Op::Read },
                    offset_bytes: rng.below(1 << 40),
                    length_bytes: rng.below(1 << 20),
                    response_ns,
                }
            })
            .collect()
    }

    fn volumes() -> VolumeTable {
        let mut volumes = VolumeTable::new();
        for name in ["hm_0", "prxy_1", "név ü"] {
            volumes.intern(name);
        }
        volumes
    }

    fn write(path: &Path, requests: &[Request]) -> u64 {
        let volumes = volumes();
        let mut writer: Box<dyn TraceWriter> = Box::new(NativeWriter::create(path).unwrap());
        for request in requests {
            writer.write_request(request, &volumes).unwrap();
        }
        writer.finish().unwrap()
    }

    fn read_all(path: &Path) -> Result<(Vec<Request>, Vec<String>)> {
        let mut reader = NativeReader::new(open_input(path)?)?;
        let mut requests = Vec::new();
        while let Some(request) = reader.next_request()? {
            requests.push(request);
        }
        Ok((requests, reader.volumes().names().to_vec()))
    }

    #[test]
    fn round_trips_several_blocks_exactly() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("sample.tierd");
        let requests = sample_requests(BLOCK_RECORDS * 2 + 17, 7);
        assert_eq!(write(&path, &requests), requests.len() as u64);
        let (read, names) = read_all(&path).unwrap();
        assert_eq!(names, ["hm_0", "prxy_1", "név ü"]);
        assert_eq!(read.len(), requests.len());
        for (index, (got, want)) in read.iter().zip(&requests).enumerate() {
            let mut want = *want;
            // Responses past u32 ns are kept in whole microseconds.
            if let Some(response_ns) = want.response_ns.filter(|ns| *ns > u64::from(u32::MAX)) {
                want.response_ns = Some(response_ns / 1000 * 1000);
            }
            assert_eq!(*got, want, "request {index}");
        }
    }

    #[test]
    fn empty_trace_round_trips_and_outer_zstd_is_read() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("empty.tierd");
        assert_eq!(write(&path, &[]), 0);
        assert!(read_all(&path).unwrap().0.is_empty());

        let compressed = directory.path().join("whole.tierd.zst");
        let requests = sample_requests(1000, 3);
        write(&compressed, &requests);
        let bytes = std::fs::read(&compressed).unwrap();
        assert_eq!(&bytes[..4], &[0x28, 0xb5, 0x2f, 0xfd], "outer file is zstd");
        assert_eq!(read_all(&compressed).unwrap().0.len(), 1000);
    }

    #[test]
    fn unwritable_requests_name_the_request() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("bad.tierd");
        let volumes = volumes();
        let mut writer = NativeWriter::create(&path).unwrap();
        let mut request = sample_requests(1, 1)[0];
        writer.write_request(&request, &volumes).unwrap();
        request.length_bytes = 1 << 33;
        let error = writer
            .write_request(&request, &volumes)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("request 2") && error.contains("length"),
            "{error}"
        );
        request.length_bytes = 1;
        request.volume = 9;
        let error = writer
            .write_request(&request, &volumes)
            .unwrap_err()
            .to_string();
        assert!(error.contains("volume id 9"), "{error}");
    }

    /// Every corruption of the file is reported with an offset, never a panic.
    #[test]
    fn damaged_files_fail_with_an_offset() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("good.tierd");
        write(&path, &sample_requests(5000, 11));
        let good = std::fs::read(&path).unwrap();
        let damaged = directory.path().join("damaged.tierd");
        let check = |bytes: &[u8], expect: &str| {
            std::fs::write(&damaged, bytes).unwrap();
            let error = read_all(&damaged).expect_err(expect).to_string();
            assert!(error.contains(expect), "{expect}: {error}");
            assert!(error.contains("byte offset"), "{error}");
        };
        let mut version = good.clone();
        version[8] = 2;
        check(&version, "layout version 2");
        let mut header = good.clone();
        header[20] ^= 1;
        check(&header, "header checksum");
        let header_bytes = FIXED_HEADER_BYTES + 3 * 4 + "hm_0prxy_1név ü".len() + 4;
        let mut payload = good.clone();
        let last = payload.len() - 5;
        payload[last] ^= 0x40;
        check(&payload, "block");
        check(&good[..good.len() - 3], "ends inside a compressed block");
        check(&good[..header_bytes + 5], "ends inside the block header");
        let mut trailing = good.clone();
        trailing.push(0);
        check(&trailing, "bytes follow the last block");
        let mut count = good.clone();
        count[header_bytes..header_bytes + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        check(&count, "block record count");
        check(b"TIERDTR", "ends inside the magic");
        // Arbitrary byte flips anywhere must give an error or the same data
        // (a flip in bits zstd ignores changes nothing).
        let original = read_all(&path).unwrap();
        for position in (0..good.len()).step_by(97) {
            let mut flipped = good.clone();
            flipped[position] ^= 0xa5;
            std::fs::write(&damaged, &flipped).unwrap();
            if let Ok(read) = read_all(&damaged) {
                assert_eq!(
                    read.0, original.0,
                    "flip at {position} changed the data unnoticed"
                );
                assert_eq!(
                    read.1, original.1,
                    "flip at {position} changed the volumes unnoticed"
                );
            }
        }
    }

    #[test]
    fn invalid_records_behind_a_valid_checksum_are_caught() {
        let mut records: Vec<Record> = sample_requests(10, 5)
            .iter()
            .map(|request| Record::from_request(request).unwrap())
            .collect();
        let mut raw = Vec::new();
        let mut requests = Vec::new();
        encode_block(&records, &mut raw);
        decode_block(&raw, 10, 3, &mut Columns::default(), &mut requests).unwrap();
        assert_eq!(requests.len(), 10);
        records[6].op = 7;
        encode_block(&records, &mut raw);
        let reason = decode_block(&raw, 10, 3, &mut Columns::default(), &mut requests).unwrap_err();
        assert!(
            reason.contains("record 6") && reason.contains("op 7"),
            "{reason}"
        );
        records[6].op = 0;
        records[2].volume = 3;
        encode_block(&records, &mut raw);
        let reason = decode_block(&raw, 10, 3, &mut Columns::default(), &mut requests).unwrap_err();
        assert!(
            reason.contains("record 2") && reason.contains("volume 3"),
            "{reason}"
        );
        records[2].volume = 0;
        records[9].flags = FLAG_RESPONSE_IN_US;
        encode_block(&records, &mut raw);
        let reason = decode_block(&raw, 10, 3, &mut Columns::default(), &mut requests).unwrap_err();
        assert!(
            reason.contains("record 9") && reason.contains("flags"),
            "{reason}"
        );
        records[9].flags = 0;
        records[9].response = 0;
        encode_block(&records, &mut raw);
        raw[30 * 10 + 10 + 4] = 1;
        let reason = decode_block(&raw, 10, 3, &mut Columns::default(), &mut requests).unwrap_err();
        assert!(
            reason.contains("record 4") && reason.contains("reserved"),
            "{reason}"
        );
    }

    /// Blocks of every length modulo 8 decode (the 8-record transposition and
    /// the one-by-one tail).
    #[test]
    fn blocks_of_any_length_round_trip() {
        for count in [1, 7, 8, 9, 64, 101] {
            let requests = sample_requests(count, count as u64);
            let records: Vec<Record> = requests
                .iter()
                .map(|request| Record::from_request(request).unwrap())
                .collect();
            let mut raw = Vec::new();
            encode_block(&records, &mut raw);
            assert_eq!(raw.len(), count * RECORD_BYTES);
            let mut decoded = Vec::new();
            decode_block(&raw, count, 3, &mut Columns::default(), &mut decoded).unwrap();
            let stored: Vec<Record> = decoded
                .iter()
                .map(|request| Record::from_request(request).unwrap())
                .collect();
            assert_eq!(stored, records, "{count} records");
        }
    }

    #[test]
    fn sniff_wants_the_magic() {
        assert!(sniff(b"TIERDTR\0\x01\0\0\0").is_ok());
        assert!(sniff(b"TIERDTR").is_err());
        assert!(sniff(b"128166385295514878,hm,0,Write,1,2,3").is_err());
    }
}
