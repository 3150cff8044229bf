//! Tencent Cloud Block Storage traces (SNIA IOTTA, the OSCA paper, ATC 2020).
//!
//! Comma-separated, no header: `Timestamp,Offset,Size,IOType,VolumeID`.
//! Timestamp is in whole Unix seconds, Offset and Size are in 512-byte
//! sectors, IOType is `0` = read and `1` = write, VolumeID is a number. tierd
//! names the volume by the VolumeID as written.
//!
//! Rows are not in time order in the published files; this parser reads them
//! as they come and [`crate::open_trace`] wraps the reader in a sorting reader
//! (see [`Format::needs_sorting`]).

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};
use crate::text::{
    field, head_lines, no_more_fields, parse_u64, scale, split, try_lines, LineError, LineFormat,
    Parsed, TextReader, VolumeCache,
};

pub const SECTOR_BYTES: u64 = 512;
pub const NS_PER_S: u64 = 1_000_000_000;

#[derive(Default)]
pub struct Tencent {
    volume: VolumeCache,
}

impl LineFormat for Tencent {
    const FORMAT: Format = Format::Tencent;
    const EXPECTED: &'static str =
        "comma-separated Timestamp(Unix s),Offset(512 B sectors),Size(512 B sectors),\
         IOType(0=read, 1=write),VolumeID, no header";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        let mut fields = split(line, b',');
        let timestamp_s = parse_u64(field(&mut fields, "Timestamp")?, "Timestamp")?;
        let offset_sectors = parse_u64(field(&mut fields, "Offset")?, "Offset")?;
        let size_sectors = parse_u64(field(&mut fields, "Size")?, "Size")?;
        let op = match field(&mut fields, "IOType")? {
            b"0" => Op::Read,
            b"1" => Op::Write,
            other => {
                return Err(LineError(format!(
                    "IOType {:?} is neither 0 (read) nor 1 (write)",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        let volume_id = field(&mut fields, "VolumeID")?;
        no_more_fields(&mut fields, 5)?;

        parse_u64(volume_id, "VolumeID")?;
        let time_ns = scale(timestamp_s, NS_PER_S, "Timestamp", "nanoseconds")?;
        let offset_bytes = scale(offset_sectors, SECTOR_BYTES, "Offset", "bytes")?;
        let length_bytes = scale(size_sectors, SECTOR_BYTES, "Size", "bytes")?;

        let volume = self.volume.id(volume_id, volumes);

        Ok(Parsed::Request(Request {
            time_ns,
            volume,
            op,
            offset_bytes,
            length_bytes,
            response_ns: None,
        }))
    }
}

/// A reader of Tencent CBS traces over an already opened (decompressed)
/// input, in file order (the caller sorts).
pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        Tencent::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like a Tencent CBS trace; `Err` says
/// why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    try_lines(Tencent::default(), &head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::input::open_input;
    use crate::open::open_trace;
    use crate::text::test_support::{self, options, temp_trace};

    /// Lines in the shape of the published trace (Oct 2018, several volumes,
    /// rows slightly out of time order).
    const SAMPLE: &str = "1538323200,6640160,8,1,1283\n\
                          1538323200,21016128,16,0,1063\n\
                          1538323199,6640168,8,1,1283\n\
                          1538323201,480,128,0,1063\n";

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(Tencent::default(), line)
    }

    #[test]
    fn parses_a_read_and_a_write() {
        let request = parse("1538323200,6640160,8,1,1283").unwrap();
        assert_eq!(request.time_ns, 1_538_323_200_000_000_000);
        assert_eq!(request.op, Op::Write);
        assert_eq!(request.offset_bytes, 6_640_160 * 512);
        assert_eq!(request.length_bytes, 4096);
        assert_eq!(request.response_ns, None);
        assert_eq!(parse("1538323200,21016128,16,0,1063").unwrap().op, Op::Read);
    }

    #[test]
    fn names_volumes_by_volume_id() {
        let mut volumes = VolumeTable::new();
        let mut format = Tencent::default();
        let mut seen = Vec::new();
        for line in SAMPLE.lines() {
            match format.parse_line(line.as_bytes(), &mut volumes) {
                Ok(Parsed::Request(request)) => seen.push(request.volume),
                _ => panic!("{line} did not parse"),
            }
        }
        assert_eq!(seen, vec![0, 1, 0, 1]);
        assert_eq!(volumes.names(), ["1283", "1063"]);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        assert!(parse("1538323200,6640160,8,2,1283")
            .unwrap_err()
            .contains("IOType \"2\""));
        assert!(parse("1538323200,6640160,8,W,1283")
            .unwrap_err()
            .contains("IOType"));
        assert!(parse("1538323200,6640160,8,1")
            .unwrap_err()
            .contains("missing field VolumeID"));
        assert!(parse("1538323200,6640160,8,1,1283,0")
            .unwrap_err()
            .contains("more than 5"));
        assert!(parse("1538323200.5,6640160,8,1,1283")
            .unwrap_err()
            .contains("Timestamp"));
        assert!(parse("1538323200,-1,8,1,1283")
            .unwrap_err()
            .contains("Offset"));
        assert!(parse("1538323200,1,8k,1,1283")
            .unwrap_err()
            .contains("Size"));
        assert!(parse("1538323200,1,8,1,vol")
            .unwrap_err()
            .contains("VolumeID"));
        assert!(parse("1538323200,1,8,1,").unwrap_err().contains("VolumeID"));
        assert!(parse("18446744073709551615,1,8,1,1")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("1,18446744073709551615,8,1,1")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("1,1,18446744073709551615,1,1")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("Timestamp,Offset,Size,IOType,VolumeID").is_err());
    }

    #[test]
    fn sniff_accepts_tencent_and_rejects_neighbours() {
        assert!(sniff(SAMPLE.as_bytes()).is_ok());
        assert!(sniff(b"version,time,op,size,lbn\n1,5633898368802,28,512,42932745\n").is_err());
        assert!(sniff(b"1,5633898368802,28,512,42932745\n").is_err());
        assert!(sniff(b"0,303567,3584,w,0.000000\n").is_err());
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_text() {
        test_support::assert_bad_line_reported(
            Format::Tencent,
            "1538323200,6640160,8,1,1283\n1538323200,21016128,16,0,1063\n1538323199,6640168,8,7,1283\n",
            None,
            3,
            "1538323199,6640168,8,7,1283",
        );
    }

    /// This module's reader gives rows in file order; `open_trace` sorts.
    #[test]
    fn skip_bad_lines_counts_the_skipped_line() {
        let file = temp_trace(&format!(
            "{SAMPLE}1538323199,6640168,8,7,1283\n1538323202,8,8,0,1063\n"
        ));
        let input = open_input(file.path()).unwrap();
        let mut reader = open(input, &options(Format::Tencent, true)).unwrap();
        let mut times_s = Vec::new();
        while let Some(request) = reader.next_request().unwrap() {
            times_s.push(request.time_ns / NS_PER_S);
        }
        assert_eq!(
            times_s,
            vec![
                1_538_323_200,
                1_538_323_200,
                1_538_323_199,
                1_538_323_201,
                1_538_323_202
            ]
        );
        assert_eq!(reader.skipped_lines(), 1);

        // Through open_trace the same file comes out sorted by time (stably),
        // still counting the skipped line.
        let mut reader = open_trace(file.path(), &options(Format::Tencent, true)).unwrap();
        let mut sorted = Vec::new();
        while let Some(request) = reader.next_request().unwrap() {
            sorted.push((
                request.time_ns / NS_PER_S,
                request.offset_bytes / SECTOR_BYTES,
            ));
        }
        assert_eq!(
            sorted,
            vec![
                (1_538_323_199, 6_640_168),
                (1_538_323_200, 6_640_160),
                (1_538_323_200, 21_016_128),
                (1_538_323_201, 480),
                (1_538_323_202, 8)
            ]
        );
        assert_eq!(reader.skipped_lines(), 1);
    }
}
