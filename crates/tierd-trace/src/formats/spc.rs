//! The Storage Performance Council trace format of the UMass Trace Repository
//! (`Financial1.spc`, `WebSearch1.spc`, ...).
//!
//! Comma-separated `ASU,LBA,Size,Opcode,Timestamp[,optional fields...]`: ASU
//! is the application storage unit (a number), LBA is in 512-byte sectors,
//! Size in bytes, Opcode `r` or `w` in either case, Timestamp in seconds with
//! a fraction from the start of the trace. Fields after the timestamp are
//! allowed by the SPC specification and ignored. tierd names the volume by the
//! ASU as written (`0`) and turns the timestamp into nanoseconds exactly.

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};
use crate::text::{
    field, head_lines, parse_scaled, parse_u64, scale, split, try_lines, LineError, LineFormat,
    Parsed, TextReader, VolumeCache,
};

pub const SECTOR_BYTES: u64 = 512;
/// Decimal digits between a second and a nanosecond.
const S_TO_NS_DIGITS: u32 = 9;

#[derive(Default)]
pub struct Spc {
    volume: VolumeCache,
}

impl LineFormat for Spc {
    const FORMAT: Format = Format::Spc;
    const EXPECTED: &'static str =
        "comma-separated ASU,LBA(512 B sectors),Size(bytes),Opcode(r or w),\
         Timestamp(s, decimal), optionally followed by more fields";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        let mut fields = split(line, b',');
        let asu = field(&mut fields, "ASU")?;
        let lba = parse_u64(field(&mut fields, "LBA")?, "LBA")?;
        let length_bytes = parse_u64(field(&mut fields, "Size")?, "Size")?;
        let op = match field(&mut fields, "Opcode")? {
            b"r" | b"R" => Op::Read,
            b"w" | b"W" => Op::Write,
            other => {
                return Err(LineError(format!(
                    "Opcode {:?} is neither r (read) nor w (write)",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        let time_ns = parse_scaled(
            field(&mut fields, "Timestamp")?,
            S_TO_NS_DIGITS,
            "Timestamp",
        )?;
        // Optional fields after the timestamp carry no request data: ignored.

        parse_u64(asu, "ASU")?;
        let offset_bytes = scale(lba, SECTOR_BYTES, "LBA", "bytes")?;

        let volume = self.volume.id(asu, volumes);

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

/// A reader of SPC traces over an already opened (decompressed) input.
pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        Spc::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like an SPC trace; `Err` says why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    try_lines(Spc::default(), &head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::open::open_trace;
    use crate::text::test_support::{self, options, temp_trace};

    /// The first lines of Financial1.spc (UMass Trace Repository), then lines
    /// in the WebSearch style with upper-case opcodes and an optional field.
    const SAMPLE: &str = "0,303567,3584,w,0.000000\n\
                          1,55590,3072,w,0.000000\n\
                          0,303574,3584,w,0.026214\n\
                          1,20941264,8192,R,0.551706\n\
                          2,20939840,8192,R,0.554041,extra\n";

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(Spc::default(), line)
    }

    #[test]
    fn parses_financial1_lines() {
        let request = parse("0,303574,3584,w,0.026214").unwrap();
        assert_eq!(request.time_ns, 26_214_000);
        assert_eq!(request.op, Op::Write);
        assert_eq!(request.offset_bytes, 303_574 * 512);
        assert_eq!(request.length_bytes, 3584);
        assert_eq!(request.response_ns, None);

        let request = parse("1,20941264,8192,R,0.551706").unwrap();
        assert_eq!(request.op, Op::Read);
        assert_eq!(request.time_ns, 551_706_000);
        assert_eq!(parse("1,2,512,r,1").unwrap().op, Op::Read);
        assert_eq!(parse("1,2,512,W,1").unwrap().op, Op::Write);
    }

    #[test]
    fn ignores_optional_fields_after_the_timestamp() {
        let plain = parse("2,20939840,8192,R,0.554041").unwrap();
        assert_eq!(parse("2,20939840,8192,R,0.554041,extra").unwrap(), plain);
        assert_eq!(parse("2,20939840,8192,R,0.554041,1,2,,x").unwrap(), plain);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        assert!(parse("0,303567,3584,x,0.000000")
            .unwrap_err()
            .contains("Opcode \"x\""));
        assert!(parse("0,303567,3584,Read,0.000000")
            .unwrap_err()
            .contains("Opcode"));
        assert!(parse("0,303567,3584,w")
            .unwrap_err()
            .contains("missing field Timestamp"));
        assert!(parse("a,303567,3584,w,0.0").unwrap_err().contains("ASU"));
        assert!(parse("0,-1,3584,w,0.0").unwrap_err().contains("LBA"));
        assert!(parse("0,1,3.5,w,0.0").unwrap_err().contains("Size"));
        assert!(parse("0,1,3584,w,1e-3").unwrap_err().contains("Timestamp"));
        assert!(parse("0,1,3584,w,").unwrap_err().contains("Timestamp"));
        assert!(parse("0,18446744073709551615,3584,w,0.0")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("0 303567 3584 w 0.000000").is_err());
        assert!(parse("128166385295514878,hm,0,Write,11855351808,512,2617").is_err());
    }

    #[test]
    fn sniff_accepts_spc_and_rejects_neighbours() {
        assert!(sniff(SAMPLE.as_bytes()).is_ok());
        assert!(sniff(b"version,time,op,size,lbn\n1,5633898368802,2a,512,42932745\n").is_err());
        assert!(sniff(b"128166385295514878,hm,0,Write,11855351808,512,2617\n").is_err());
        assert!(sniff(b"1538323200,12345,8,0,1234\n").is_err());
    }

    #[test]
    fn reads_a_whole_file_by_volume() {
        let file = temp_trace(SAMPLE);
        let mut reader = open_trace(file.path(), &options(Format::Spc, false)).unwrap();
        let requests = test_support::read_all(reader.as_mut());
        assert_eq!(requests.len(), 5);
        assert_eq!(
            requests
                .iter()
                .filter(|request| request.op == Op::Read)
                .count(),
            2
        );
        assert_eq!(reader.volumes().names(), ["0", "1", "2"]);
        let volumes: Vec<_> = requests.iter().map(|request| request.volume).collect();
        assert_eq!(volumes, vec![0, 1, 0, 1, 2]);
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_text() {
        test_support::assert_bad_line_reported(
            Format::Spc,
            "0,303567,3584,w,0.000000\n1,55590,3072,w,0.000000\n0,303574,3584,q,0.026214\n",
            Some(2),
            3,
            "0,303574,3584,q,0.026214",
        );
    }

    #[test]
    fn skip_bad_lines_counts_the_skipped_line() {
        let (requests, reader) = test_support::read_skipping(
            Format::Spc,
            "0,303567,3584,w,0.000000\n1,55590,3072,w,0.000000\n0,303574,3584,q,0.026214\n1,5,512,r,0.5\n",
        );
        let times: Vec<_> = requests.iter().map(|request| request.time_ns).collect();
        assert_eq!(times, vec![0, 0, 500_000_000]);
        assert_eq!(reader.skipped_lines(), 1);
    }
}
