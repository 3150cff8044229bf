//! The SYSTOR '17 LUN traces (SNIA IOTTA; Lee et al., "Understanding storage
//! traffic characteristics on enterprise virtual desktop infrastructure",
//! SYSTOR 2017).
//!
//! CSV with the header `Timestamp,Response,IOType,LUN,Offset,Size`:
//! Timestamp in Unix seconds with a fraction, Response (the response time) in
//! seconds with a fraction, IOType `R` or `W`, LUN a number, Offset and Size
//! in bytes. tierd turns both times into nanoseconds exactly and names the
//! volume by the LUN as written. Some rows have an empty Response; they read
//! as requests without a response time.
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
    field, head_lines, no_more_fields, parse_scaled, parse_u64, split, try_lines, LineError,
    LineFormat, Parsed, TextReader, VolumeCache,
};

/// The header line, matched exactly.
pub const HEADER: &[u8] = b"Timestamp,Response,IOType,LUN,Offset,Size";
/// Decimal digits between a second and a nanosecond.
const S_TO_NS_DIGITS: u32 = 9;

#[derive(Default)]
pub struct Systor17 {
    volume: VolumeCache,
}

impl LineFormat for Systor17 {
    const FORMAT: Format = Format::Systor17;
    const EXPECTED: &'static str = "the header `Timestamp,Response,IOType,LUN,Offset,Size`, then lines \
         Timestamp(Unix s, decimal),Response(s, decimal, may be empty),IOType(R or W),LUN,Offset(bytes),Size(bytes)";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        if line == HEADER {
            return Ok(Parsed::Skip);
        }
        let mut fields = split(line, b',');
        let time_ns = parse_scaled(
            field(&mut fields, "Timestamp")?,
            S_TO_NS_DIGITS,
            "Timestamp",
        )?;
        let response_ns = match field(&mut fields, "Response")? {
            b"" => None,
            response => Some(parse_scaled(response, S_TO_NS_DIGITS, "Response")?),
        };
        let op = match field(&mut fields, "IOType")? {
            b"R" => Op::Read,
            b"W" => Op::Write,
            other => {
                return Err(LineError(format!(
                    "IOType {:?} is neither R nor W",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        let lun = field(&mut fields, "LUN")?;
        let offset_bytes = parse_u64(field(&mut fields, "Offset")?, "Offset")?;
        let length_bytes = parse_u64(field(&mut fields, "Size")?, "Size")?;
        no_more_fields(&mut fields, 6)?;

        parse_u64(lun, "LUN")?;
        let volume = self.volume.id(lun, volumes);

        Ok(Parsed::Request(Request {
            time_ns,
            volume,
            op,
            offset_bytes,
            length_bytes,
            response_ns,
        }))
    }
}

/// A reader of SYSTOR '17 traces over an already opened (decompressed)
/// input, in file order (the caller sorts).
pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        Systor17::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like a SYSTOR '17 trace; `Err` says
/// why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    try_lines(Systor17::default(), &head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::input::open_input;
    use crate::open::open_trace;
    use crate::text::test_support::{self, options, temp_trace};

    /// Lines in the shape of the published LUN files.
    const SAMPLE: &str = "Timestamp,Response,IOType,LUN,Offset,Size\n\
                          1487198985.038926,0.000435,W,4,3063627776,4096\n\
                          1487198985.039173,0.000207,R,0,1059389440,65536\n\
                          1487198985.038990,,W,4,3063631872,4096\n";

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(Systor17::default(), line)
    }

    #[test]
    fn parses_a_write_and_a_read() {
        let request = parse("1487198985.038926,0.000435,W,4,3063627776,4096").unwrap();
        assert_eq!(request.time_ns, 1_487_198_985_038_926_000);
        assert_eq!(request.response_ns, Some(435_000));
        assert_eq!(request.op, Op::Write);
        assert_eq!(request.offset_bytes, 3_063_627_776);
        assert_eq!(request.length_bytes, 4096);
        let request = parse("1487198985.039173,0.000207,R,0,1059389440,65536").unwrap();
        assert_eq!(request.op, Op::Read);
        assert_eq!(request.response_ns, Some(207_000));
        assert_eq!(
            parse("1487198985.038990,,W,4,3063631872,4096")
                .unwrap()
                .response_ns,
            None
        );
    }

    #[test]
    fn skips_only_the_exact_header() {
        let mut volumes = VolumeTable::new();
        let mut format = Systor17::default();
        assert!(matches!(
            format.parse_line(HEADER, &mut volumes),
            Ok(Parsed::Skip)
        ));
        assert!(format
            .parse_line(b"timestamp,response,iotype,lun,offset,size", &mut volumes)
            .is_err());
        assert!(format
            .parse_line(b"Timestamp,Response,IOType,LUN,Offset", &mut volumes)
            .is_err());
        assert!(volumes.is_empty());
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        assert!(parse("1487198985.038926,0.000435,X,4,3063627776,4096")
            .unwrap_err()
            .contains("IOType \"X\""));
        assert!(parse("1487198985.038926,0.000435,w,4,3063627776,4096")
            .unwrap_err()
            .contains("IOType"));
        assert!(parse("1487198985.038926,0.000435,W,4,3063627776")
            .unwrap_err()
            .contains("missing field Size"));
        assert!(parse("1487198985.038926,0.000435,W,4,3063627776,4096,1")
            .unwrap_err()
            .contains("more than 6"));
        assert!(parse(",0.000435,W,4,3063627776,4096")
            .unwrap_err()
            .contains("Timestamp"));
        assert!(parse("1487198985.03.8926,0.000435,W,4,0,4096")
            .unwrap_err()
            .contains("Timestamp"));
        assert!(parse("1487198985.038926,-0.1,W,4,0,4096")
            .unwrap_err()
            .contains("Response"));
        assert!(parse("1487198985.038926,0.1,W,lun4,0,4096")
            .unwrap_err()
            .contains("LUN"));
        assert!(parse("1487198985.038926,0.1,W,4,0x10,4096")
            .unwrap_err()
            .contains("Offset"));
        assert!(parse("1487198985.038926,0.1,W,4,0,4096.0")
            .unwrap_err()
            .contains("Size"));
        assert!(parse("18446744073709551616,0.1,W,4,0,4096")
            .unwrap_err()
            .contains("Timestamp"));
        assert!(parse("18446744073.8,0.1,W,4,0,4096")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn sniff_accepts_systor_and_rejects_neighbours() {
        assert!(sniff(SAMPLE.as_bytes()).is_ok());
        assert!(sniff(b"Timestamp,Response,IOType,LUN,Offset,Size\n").is_err());
        assert!(sniff(b"128166385295514878,hm,0,Write,11855351808,512,2617\n").is_err());
        assert!(sniff(b"0,303567,3584,w,0.000000\n").is_err());
        assert!(sniff(b"1538323200,6640160,8,1,1283\n").is_err());
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_text() {
        test_support::assert_bad_line_reported(
            Format::Systor17,
            "Timestamp,Response,IOType,LUN,Offset,Size\n\
             1487198985.038926,0.000435,W,4,3063627776,4096\n\
             1487198985.039173,0.000207,Q,0,1059389440,65536\n",
            None,
            3,
            "1487198985.039173,0.000207,Q,0,1059389440,65536",
        );
    }

    /// This module's reader gives rows in file order; `open_trace` sorts.
    #[test]
    fn skip_bad_lines_counts_the_skipped_line() {
        let file = temp_trace(&format!(
            "{SAMPLE}1487198985.039173,0.000207,Q,0,1059389440,65536\n1487198986,0,R,7,0,512\n"
        ));
        let input = open_input(file.path()).unwrap();
        let mut reader = open(input, &options(Format::Systor17, true)).unwrap();
        let requests = test_support::read_all(reader.as_mut());
        assert_eq!(requests.len(), 4);
        assert_eq!(requests[3].time_ns, 1_487_198_986_000_000_000);
        assert_eq!(requests[3].response_ns, Some(0));
        assert_eq!(reader.skipped_lines(), 1);
        assert_eq!(reader.ignored_lines(), 1);
        assert_eq!(reader.volumes().names(), ["4", "0", "7"]);

        // Through open_trace the same file comes out sorted by time, still
        // counting the skipped and the ignored line.
        let mut reader = open_trace(file.path(), &options(Format::Systor17, true)).unwrap();
        let mut times_us = Vec::new();
        while let Some(request) = reader.next_request().unwrap() {
            times_us.push(request.time_ns / 1_000 - 1_487_198_985_000_000);
        }
        assert_eq!(times_us, vec![38_926, 38_990, 39_173, 1_000_000]);
        assert_eq!(reader.skipped_lines(), 1);
        assert_eq!(reader.ignored_lines(), 1);
    }
}
