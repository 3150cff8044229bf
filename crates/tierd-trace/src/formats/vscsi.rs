//! CloudPhysics vscsi binary traces (VMware vSCSI command traces), versions 1
//! and 2.
//!
//! Fixed-size little-endian records with no file header:
//!
//! ```text
//! version 1, 32 bytes: u32 sn, u32 len(bytes), u32 nSG, u16 cmd, u16 ver(0x01xx),
//!                      u64 lbn(512 B sectors), u64 ts(us)
//! version 2, 40 bytes: u16 cmd, u16 ver(0x02xx), u32 sn, u32 len(bytes), u32 nSG,
//!                      u64 lbn(512 B sectors), u64 ts(us), u64 rt
//! ```
//!
//! The high byte of `ver` is the version; the first record decides it and
//! every record must repeat it. `cmd` is a SCSI opcode: READ(6/10/12/16)
//! `0x08 0x28 0xa8 0x88` and WRITE(6/10/12/16) `0x0a 0x2a 0xaa 0x8a` become
//! requests; any other opcode is a bad record (skipped and counted with
//! `--skip-bad-lines`). The version 2 `rt` (response time) has no documented
//! unit; tierd takes it as microseconds like `ts`. The trace has one volume,
//! named `0`. Layouts as in libCacheSim's and PyMimircache's readers
//! (`traceReader/customizedReader/vscsi.h`).

use std::io::{self, Read};
use std::path::Path;

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};

pub const V1_RECORD_BYTES: usize = 32;
pub const V2_RECORD_BYTES: usize = 40;
pub const SECTOR_BYTES: u64 = 512;
const NS_PER_US: u64 = 1_000;
/// Records examined by [`sniff`].
const SNIFF_RECORDS: usize = 64;

const EXPECTED: &str =
    "32-byte version 1 records `u32 sn, u32 len, u32 nSG, u16 cmd, u16 ver=0x01xx, \
     u64 lbn, u64 ts` or 40-byte version 2 records `u16 cmd, u16 ver=0x02xx, u32 sn, u32 len, \
     u32 nSG, u64 lbn, u64 ts, u64 rt`, little-endian, with a SCSI READ or WRITE opcode in cmd";

/// A vscsi layout version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    One,
    Two,
}

impl Version {
    pub fn record_bytes(self) -> usize {
        match self {
            Version::One => V1_RECORD_BYTES,
            Version::Two => V2_RECORD_BYTES,
        }
    }

    fn number(self) -> u8 {
        match self {
            Version::One => 1,
            Version::Two => 2,
        }
    }

    /// The version byte stored in `record` (the high byte of `ver`).
    fn stored(self, record: &[u8]) -> u8 {
        match self {
            Version::One => record[15],
            Version::Two => record[3],
        }
    }

    /// Which version `record` (its first 32 bytes suffice) claims to be,
    /// trying version 1 first.
    fn detect(record: &[u8]) -> Option<Version> {
        if record.len() < V1_RECORD_BYTES {
            return None;
        }
        if record[15] == 1 && opcode_op(u16_at(record, 12)).is_some() {
            Some(Version::One)
        } else if record[3] == 2 && opcode_op(u16_at(record, 0)).is_some() {
            Some(Version::Two)
        } else {
            None
        }
    }
}

/// The request direction of SCSI opcode `cmd`, `None` for other commands.
pub fn opcode_op(cmd: u16) -> Option<Op> {
    match cmd {
        0x08 | 0x28 | 0xa8 | 0x88 => Some(Op::Read),
        0x0a | 0x2a | 0xaa | 0x8a => Some(Op::Write),
        _ => None,
    }
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from(u32_at(bytes, at)) | (u64::from(u32_at(bytes, at + 4)) << 32)
}

/// Turns one record into a request, or says why it is bad.
fn decode(version: Version, record: &[u8]) -> std::result::Result<Request, String> {
    let stored = version.stored(record);
    if stored != version.number() {
        return Err(format!(
            "version byte {stored}, but the file's first record is version {}",
            version.number()
        ));
    }
    let (cmd, length_bytes, lbn, timestamp_us, response_us) = match version {
        Version::One => (
            u16_at(record, 12),
            u32_at(record, 4),
            u64_at(record, 16),
            u64_at(record, 24),
            None,
        ),
        Version::Two => (
            u16_at(record, 0),
            u32_at(record, 8),
            u64_at(record, 16),
            u64_at(record, 24),
            Some(u64_at(record, 32)),
        ),
    };
    let op = opcode_op(cmd).ok_or_else(|| {
        format!("SCSI opcode {cmd:#04x} is neither READ (0x08/0x28/0xa8/0x88) nor WRITE (0x0a/0x2a/0xaa/0x8a)")
    })?;
    let offset_bytes = lbn
        .checked_mul(SECTOR_BYTES)
        .ok_or_else(|| format!("lbn {lbn} is too large to be a byte offset"))?;
    let time_ns = timestamp_us
        .checked_mul(NS_PER_US)
        .ok_or_else(|| format!("timestamp {timestamp_us} us is too large"))?;
    let response_ns = match response_us {
        None => None,
        Some(response_us) => Some(
            response_us
                .checked_mul(NS_PER_US)
                .ok_or_else(|| format!("response time {response_us} us is too large"))?,
        ),
    };
    Ok(Request {
        time_ns,
        volume: 0,
        op,
        offset_bytes,
        length_bytes: u64::from(length_bytes),
        response_ns,
    })
}

/// Whether `head` looks like a vscsi trace: the first records (up to 64)
/// all carry the same version byte and a SCSI READ/WRITE opcode, and the
/// rest of each opcode's 16-bit field is zero. `Err` says why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    let version = if head.len() >= V1_RECORD_BYTES {
        Version::detect(head)
    } else {
        return Err(format!("shorter than one {V1_RECORD_BYTES}-byte record"));
    };
    let Some(version) = version else {
        return Err("the first record has neither a version 1 nor a version 2 ver field with a READ/WRITE opcode".to_string());
    };
    let records = head
        .chunks_exact(version.record_bytes())
        .take(SNIFF_RECORDS);
    for (index, record) in records.enumerate() {
        if let Err(reason) = decode(version, record) {
            return Err(format!("record {index}: {reason}"));
        }
    }
    Ok(())
}

pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    let mut volumes = VolumeTable::new();
    volumes.intern("0");
    Ok(Box::new(VscsiReader {
        input,
        version: None,
        record: [0; V2_RECORD_BYTES],
        offset: 0,
        volumes,
        skip_bad_records: options.skip_bad_lines,
        skipped_records: 0,
        done: false,
    }))
}

/// Streams vscsi records; memory is one record.
pub struct VscsiReader {
    input: Input,
    /// Set from the first record.
    version: Option<Version>,
    record: [u8; V2_RECORD_BYTES],
    /// Byte offset of the next record in the uncompressed stream.
    offset: u64,
    volumes: VolumeTable,
    skip_bad_records: bool,
    skipped_records: u64,
    done: bool,
}

impl VscsiReader {
    fn bad(&self, offset: u64, reason: String) -> TraceError {
        TraceError::BadRecord {
            path: self.input.path.clone(),
            offset,
            format: Format::Vscsi,
            reason,
            expected: EXPECTED,
        }
    }

    /// Fills `record[from..to]` from the input. Returns the bytes now present
    /// in the record: `to`, or fewer at the end of the stream.
    fn fill(&mut self, from: usize, to: usize) -> Result<usize> {
        let mut filled = from;
        while filled < to {
            match self.input.reader.read(&mut self.record[filled..to]) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TraceError::Read {
                        path: self.input.path.clone(),
                        offset: self.offset + filled as u64,
                        source,
                    })
                }
            }
        }
        Ok(filled)
    }

    fn next_record(&mut self) -> Result<Option<Request>> {
        loop {
            let record_offset = self.offset;
            // The first 32 bytes hold the version byte of either layout.
            let mut filled = self.fill(0, V1_RECORD_BYTES)?;
            if filled == 0 {
                return Ok(None);
            }
            let version = match self.version {
                Some(version) => version,
                None if filled < V1_RECORD_BYTES => {
                    return Err(self.bad(
                        0,
                        format!("the file ends after {filled} bytes, inside the first record"),
                    ))
                }
                None => {
                    let Some(version) = Version::detect(&self.record[..filled]) else {
                        return Err(self.bad(
                            0,
                            format!(
                                "the first record has neither version byte 1 at byte 15 nor version byte 2 \
                                 at byte 3 next to a READ/WRITE opcode (its bytes: {:02x?})",
                                &self.record[..V1_RECORD_BYTES]
                            ),
                        ));
                    };
                    self.version = Some(version);
                    version
                }
            };
            let size = version.record_bytes();
            if filled == V1_RECORD_BYTES && size > V1_RECORD_BYTES {
                filled = self.fill(V1_RECORD_BYTES, size)?;
            }
            if filled < size {
                return Err(self.bad(
                    record_offset,
                    format!(
                        "the file ends {filled} bytes into a {size}-byte record (a truncated file; \
                         the records before it were read)"
                    ),
                ));
            }
            self.offset += size as u64;
            match decode(version, &self.record[..size]) {
                Ok(request) => return Ok(Some(request)),
                Err(_) if self.skip_bad_records => self.skipped_records += 1,
                Err(reason) => return Err(self.bad(record_offset, reason)),
            }
        }
    }
}

impl TraceReader for VscsiReader {
    fn next_request(&mut self) -> Result<Option<Request>> {
        if self.done {
            return Ok(None);
        }
        let result = self.next_record();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn format(&self) -> Format {
        Format::Vscsi
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

    fn v1(cmd: u16, length_bytes: u32, lbn: u64, timestamp_us: u64) -> Vec<u8> {
        let mut record = Vec::with_capacity(V1_RECORD_BYTES);
        record.extend_from_slice(&0x8000_00f4u32.to_le_bytes());
        record.extend_from_slice(&length_bytes.to_le_bytes());
        record.extend_from_slice(&16u32.to_le_bytes());
        record.extend_from_slice(&cmd.to_le_bytes());
        record.extend_from_slice(&0x0100u16.to_le_bytes());
        record.extend_from_slice(&lbn.to_le_bytes());
        record.extend_from_slice(&timestamp_us.to_le_bytes());
        record
    }

    fn v2(cmd: u16, length_bytes: u32, lbn: u64, timestamp_us: u64, response_us: u64) -> Vec<u8> {
        let mut record = Vec::with_capacity(V2_RECORD_BYTES);
        record.extend_from_slice(&cmd.to_le_bytes());
        record.extend_from_slice(&0x0200u16.to_le_bytes());
        record.extend_from_slice(&7u32.to_le_bytes());
        record.extend_from_slice(&length_bytes.to_le_bytes());
        record.extend_from_slice(&1u32.to_le_bytes());
        record.extend_from_slice(&lbn.to_le_bytes());
        record.extend_from_slice(&timestamp_us.to_le_bytes());
        record.extend_from_slice(&response_us.to_le_bytes());
        record
    }

    fn read(bytes: Vec<u8>, skip_bad_lines: bool) -> (Result<Vec<Request>>, u64) {
        let input = Input {
            path: "test.vscsi".into(),
            compression: Compression::None,
            reader: Box::new(io::Cursor::new(bytes)),
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
        assert!(
            matches!(reader.next_request(), Ok(None)),
            "reader must stay done"
        );
        assert_eq!(reader.volumes().names(), ["0"]);
        (result, reader.skipped_lines())
    }

    #[test]
    fn version_1_records_become_requests() {
        let mut bytes = v1(0x2a, 512, 42_932_745, 5_633_898_368_802);
        bytes.extend(v1(0x28, 4096, 8, 5_633_898_368_900));
        bytes.extend(v1(0x88, 1, 0, 1));
        bytes.extend(v1(0x0a, 2, 1, 2));
        let requests = read(bytes, false).0.unwrap();
        assert_eq!(
            requests[0],
            Request {
                time_ns: 5_633_898_368_802_000,
                volume: 0,
                op: Op::Write,
                offset_bytes: 42_932_745 * 512,
                length_bytes: 512,
                response_ns: None,
            }
        );
        assert_eq!(requests[1].op, Op::Read);
        assert_eq!(requests[1].offset_bytes, 4096);
        let ops: Vec<Op> = requests.iter().map(|request| request.op).collect();
        assert_eq!(ops, [Op::Write, Op::Read, Op::Read, Op::Write]);
    }

    #[test]
    fn version_2_records_carry_a_response() {
        let mut bytes = v2(0x28, 8192, 100, 1_000, 250);
        bytes.extend(v2(0xaa, 512, 3, 2_000, 0));
        let requests = read(bytes.clone(), false).0.unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].response_ns, Some(250_000));
        assert_eq!(requests[0].offset_bytes, 51_200);
        assert_eq!(requests[1].op, Op::Write);
        assert_eq!(requests[1].time_ns, 2_000_000);
        assert!(sniff(&bytes).is_ok());
    }

    #[test]
    fn other_opcodes_are_bad_records_or_skipped() {
        let mut bytes = v1(0x28, 512, 1, 1);
        bytes.extend(v1(0x35, 0, 0, 2)); // SYNCHRONIZE CACHE
        bytes.extend(v1(0x2a, 512, 1, 3));
        let error = read(bytes.clone(), false).0.unwrap_err().to_string();
        assert!(
            error.contains("byte offset 32") && error.contains("0x35"),
            "{error}"
        );
        let (requests, skipped) = read(bytes, true);
        assert_eq!(requests.unwrap().len(), 2);
        assert_eq!(skipped, 1);
    }

    #[test]
    fn truncated_and_foreign_files_fail_with_an_offset() {
        let mut bytes = v1(0x28, 512, 1, 1);
        bytes.extend(v1(0x28, 512, 2, 2));
        bytes.truncate(50);
        let error = read(bytes, false).0.unwrap_err().to_string();
        assert!(
            error.contains("byte offset 32") && error.contains("18 bytes into"),
            "{error}"
        );
        let error = read(b"version,time,op,size,lbn\n1,5,2a,512,4\n".to_vec(), false)
            .0
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("byte offset 0") && error.contains("neither version"),
            "{error}"
        );
        let error = read(vec![1, 2, 3], false).0.unwrap_err().to_string();
        assert!(error.contains("after 3 bytes"), "{error}");
        assert!(read(Vec::new(), false).0.unwrap().is_empty());
        // A version 2 record inside a version 1 file.
        let mut mixed = v1(0x28, 512, 1, 1);
        mixed.extend(v2(0x28, 512, 1, 1, 1)[..32].iter());
        let error = read(mixed, false).0.unwrap_err().to_string();
        assert!(
            error.contains("byte offset 32") && error.contains("version byte"),
            "{error}"
        );
    }

    #[test]
    fn sniff_accepts_vscsi_and_rejects_text_and_block_lists() {
        let mut bytes = Vec::new();
        for index in 0..100 {
            bytes.extend(v1(
                if index % 3 == 0 { 0x28 } else { 0x2a },
                512,
                index,
                index,
            ));
        }
        assert!(sniff(&bytes).is_ok());
        assert!(
            sniff(&bytes[..40]).is_ok(),
            "a cut final record is the reader's business"
        );
        assert!(sniff(b"128166385295514878,hm,0,Write,11855351808,512,2617\n").is_err());
        let blocks: Vec<u8> = (0u32..64).flat_map(|block| block.to_le_bytes()).collect();
        assert!(sniff(&blocks).is_err());
        assert!(sniff(&bytes[..20]).is_err());
        let mut bad_later = bytes.clone();
        bad_later[32 * 5 + 12] = 0x35;
        assert!(sniff(&bad_later).unwrap_err().contains("record 5"));
    }

    #[test]
    fn the_shared_cloudphysics_sample_has_its_golden_counts() {
        let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))
        else {
            return;
        };
        let path = traces.join("cloudphysics/cloudPhysicsIO.vscsi");
        let head = std::fs::read(&path).unwrap();
        assert!(sniff(&head[..crate::open::DETECT_BYTES]).is_ok());
        let options = OpenOptions {
            format: Some(Format::Vscsi),
            ..OpenOptions::default()
        };
        let mut reader = crate::open_trace(&path, &options).unwrap();
        let (mut reads, mut writes) = (0u64, 0u64);
        while let Some(request) = reader.next_request().unwrap() {
            match request.op {
                Op::Read => reads += 1,
                Op::Write => writes += 1,
            }
        }
        assert_eq!((reads, writes), (46_974, 66_898));
    }
}
