//! CloudPhysics CSV (the VMware vscsi traces of Waldspurger et al., SHARDS,
//! FAST 2015, in the CSV form PyMimircache ships).
//!
//! Header `version,time,op,size,lbn`, then one request per line:
//! `version` is the trace version (an integer, not interpreted), `time` is in
//! microseconds from an arbitrary origin, `op` is the SCSI opcode in hex,
//! `size` is in bytes and `lbn` in 512-byte sectors. tierd reads opcodes
//! READ(6/10/12/16) = `08`/`28`/`a8`/`88` and WRITE(6/10/12/16) =
//! `0a`/`2a`/`aa`/`8a`; any other opcode is an error naming it. The trace is
//! one virtual disk: every request goes to volume `0`.
//!
//! Detection ([`sniff`]) requires the header as the first line: without it a
//! data row cannot be told apart from some Tencent rows. A header-less file
//! still reads with an explicit `--format cloudphysics-csv`.

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeId, VolumeTable};
use crate::text::{
    field, head_lines, no_more_fields, parse_hex_u64, parse_u64, scale, split, trim_line_end,
    try_lines, LineError, LineFormat, Parsed, TextReader,
};

/// The header line, matched exactly.
pub const HEADER: &[u8] = b"version,time,op,size,lbn";
pub const SECTOR_BYTES: u64 = 512;
pub const NS_PER_US: u64 = 1_000;
/// The name of the one volume of a CloudPhysics trace.
pub const VOLUME_NAME: &str = "0";

#[derive(Default)]
pub struct CloudPhysicsCsv {
    volume: Option<VolumeId>,
}

/// The direction of a SCSI READ or WRITE command, `None` for any other opcode.
fn scsi_op(opcode: u64) -> Option<Op> {
    match opcode {
        0x08 | 0x28 | 0x88 | 0xa8 => Some(Op::Read),
        0x0a | 0x2a | 0x8a | 0xaa => Some(Op::Write),
        _ => None,
    }
}

impl LineFormat for CloudPhysicsCsv {
    const FORMAT: Format = Format::CloudPhysicsCsv;
    const EXPECTED: &'static str = "the header `version,time,op,size,lbn`, then lines \
         version,time(us),op(SCSI opcode in hex: 28=read, 2a=write),size(bytes),lbn(512 B sectors)";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        if line == HEADER {
            return Ok(Parsed::Skip);
        }
        let mut fields = split(line, b',');
        parse_u64(field(&mut fields, "version")?, "version")?;
        let time_us = parse_u64(field(&mut fields, "time")?, "time")?;
        let opcode_text = field(&mut fields, "op")?;
        let opcode = parse_hex_u64(opcode_text, "op")?;
        let size_bytes = parse_u64(field(&mut fields, "size")?, "size")?;
        let lbn = parse_u64(field(&mut fields, "lbn")?, "lbn")?;
        no_more_fields(&mut fields, 5)?;

        let op = scsi_op(opcode).ok_or_else(|| {
            LineError(format!(
                "op {:?} is SCSI opcode 0x{opcode:02x}, neither a read (08, 28, 88, a8) nor a write (0a, 2a, 8a, aa)",
                String::from_utf8_lossy(opcode_text)
            ))
        })?;
        let time_ns = scale(time_us, NS_PER_US, "time", "nanoseconds")?;
        let offset_bytes = scale(lbn, SECTOR_BYTES, "lbn", "bytes")?;
        let volume = *self
            .volume
            .get_or_insert_with(|| volumes.intern(VOLUME_NAME));

        Ok(Parsed::Request(Request {
            time_ns,
            volume,
            op,
            offset_bytes,
            length_bytes: size_bytes,
            response_ns: None,
        }))
    }
}

/// A reader of CloudPhysics CSV over an already opened (decompressed) input.
pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        CloudPhysicsCsv::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like CloudPhysics CSV; `Err` says why
/// not. The header must be the first line.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    let lines = head_lines(head);
    match lines.first() {
        Some(first) if trim_line_end(first) == HEADER => {}
        _ => return Err("line 1: not the header `version,time,op,size,lbn`".to_string()),
    }
    try_lines(CloudPhysicsCsv::default(), &lines).map(|_| ())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::open::open_trace;
    use crate::text::test_support::{self, options};

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(CloudPhysicsCsv::default(), line)
    }

    #[test]
    fn parses_the_sources_example_line() {
        let request = parse("1,5633898368802,2a,512,42932745").unwrap();
        assert_eq!(request.time_ns, 5_633_898_368_802_000);
        assert_eq!(request.op, Op::Write);
        assert_eq!(request.offset_bytes, 42_932_745 * 512);
        assert_eq!(request.length_bytes, 512);
        assert_eq!(request.response_ns, None);
        assert_eq!(request.volume, 0);
    }

    #[test]
    fn maps_every_read_and_write_opcode() {
        for opcode in ["08", "28", "88", "a8", "A8", "0x28"] {
            let line = format!("1,10,{opcode},4096,8");
            assert_eq!(parse(&line).unwrap().op, Op::Read, "{line}");
        }
        for opcode in ["0a", "2a", "2A", "8a", "aa"] {
            let line = format!("1,10,{opcode},4096,8");
            assert_eq!(parse(&line).unwrap().op, Op::Write, "{line}");
        }
    }

    #[test]
    fn skips_only_the_exact_header() {
        let mut volumes = VolumeTable::new();
        let mut format = CloudPhysicsCsv::default();
        assert!(matches!(
            format.parse_line(HEADER, &mut volumes),
            Ok(Parsed::Skip)
        ));
        assert!(format
            .parse_line(b"Version,time,op,size,lbn", &mut volumes)
            .is_err());
        assert!(format
            .parse_line(b"version,time,op,size", &mut volumes)
            .is_err());
        assert!(format
            .parse_line(b"version,time,op,size,lbn,x", &mut volumes)
            .is_err());
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        let unknown = parse("1,10,35,512,8").unwrap_err();
        assert!(
            unknown.contains("\"35\"") && unknown.contains("0x35"),
            "{unknown}"
        );
        assert!(parse("1,10,zz,512,8").unwrap_err().contains("op"));
        assert!(parse("1,10,28,512")
            .unwrap_err()
            .contains("missing field lbn"));
        assert!(parse("1,10,28,512,8,9")
            .unwrap_err()
            .contains("more than 5"));
        assert!(parse("x,10,28,512,8").unwrap_err().contains("version"));
        assert!(parse("1,1.5,28,512,8").unwrap_err().contains("time"));
        assert!(parse("1,10,28,-1,8").unwrap_err().contains("size"));
        assert!(parse("1,10,28,512,8 ").unwrap_err().contains("lbn"));
        assert!(parse("1,18446744073709551615,28,512,8")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("1,10,28,512,18446744073709551615")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("1 10 28 512 8").is_err());
    }

    #[test]
    fn sniff_needs_the_header_then_valid_lines() {
        assert!(sniff(b"version,time,op,size,lbn\n1,5633898368802,2a,512,42932745\n").is_ok());
        assert!(sniff(b"1,5633898368802,2a,512,42932745\n").is_err());
        assert!(sniff(b"version,time,op,size,lbn\n").is_err());
        assert!(sniff(b"version,time,op,size,lbn\n1,5633898368802,2a,512\n").is_err());
        assert!(sniff(b"128166385295514878,hm,0,Write,11855351808,512,2617\n").is_err());
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_text() {
        let mut reader = test_support::assert_bad_line_reported(
            Format::CloudPhysicsCsv,
            "version,time,op,size,lbn\n1,10,28,512,8\n1,11,35,512,9\n1,12,2a,512,10\n",
            Some(1),
            3,
            "1,11,35,512,9",
        );
        assert!(reader.next_request().unwrap().is_none());
    }

    #[test]
    fn skip_bad_lines_counts_the_skipped_line() {
        let (requests, reader) = test_support::read_skipping(
            Format::CloudPhysicsCsv,
            "version,time,op,size,lbn\n1,10,28,512,8\n1,11,35,512,9\n1,12,2a,512,10\n",
        );
        let offsets: Vec<_> = requests
            .iter()
            .map(|request| request.offset_bytes)
            .collect();
        assert_eq!(offsets, vec![8 * 512, 10 * 512]);
        assert_eq!(reader.skipped_lines(), 1);
        assert_eq!(reader.ignored_lines(), 1);
        assert_eq!(reader.volumes().names(), ["0"]);
    }

    #[test]
    fn reads_the_whole_shared_sample() {
        let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))
        else {
            return;
        };
        let path = traces.join("cloudphysics/trace.csv");
        let head = std::fs::read(&path).unwrap();
        assert_eq!(
            sniff(&head[..head.len().min(crate::open::DETECT_BYTES)]),
            Ok(())
        );
        let mut reader = open_trace(&path, &options(Format::CloudPhysicsCsv, false)).unwrap();
        let (mut reads, mut writes) = (0u64, 0u64);
        let (mut first_ns, mut last_ns) = (None, 0);
        while let Some(request) = reader.next_request().unwrap() {
            match request.op {
                Op::Read => reads += 1,
                Op::Write => writes += 1,
            }
            first_ns.get_or_insert(request.time_ns);
            last_ns = request.time_ns;
        }
        assert_eq!((reads + writes, reads, writes), (113_872, 46_974, 66_898));
        // The first and last lines carry times 5633898368802 and 5641098458687 us
        // (SOURCES.md: a span of 7,200.1 s).
        assert_eq!(first_ns, Some(5_633_898_368_802_000));
        assert_eq!(last_ns, 5_641_098_458_687_000);
        assert_eq!(reader.volumes().len(), 1);
    }
}
