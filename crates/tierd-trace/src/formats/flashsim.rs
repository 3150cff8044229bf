//! flashsim text traces (the `trace/*.trace` files of flashsim and its forks).
//!
//! Tab-separated `time device lba size type`: time in milliseconds with a
//! fraction (`26.214000`), device a number, lba in 512-byte sectors, size in
//! 4 KiB pages (rounded up by the converter), type `1` = read and `0` = write.
//! tierd turns the time into nanoseconds exactly (digits past the
//! nanosecond are dropped) and names the volume by the device number.
//!
//! Fields are separated by one or more tabs. A line without a tab is rejected
//! so that detection can tell flashsim from DiskSim, which uses spaces.

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};
use crate::text::{
    field, head_lines, no_more_fields, parse_scaled, parse_u64, scale, try_lines, LineError,
    LineFormat, Parsed, TextReader, VolumeCache,
};

pub const SECTOR_BYTES: u64 = 512;
pub const PAGE_BYTES: u64 = 4096;
/// Decimal digits between a millisecond and a nanosecond.
const MS_TO_NS_DIGITS: u32 = 6;

#[derive(Default)]
pub struct FlashSim {
    volume: VolumeCache,
}

impl LineFormat for FlashSim {
    const FORMAT: Format = Format::FlashSim;
    const EXPECTED: &'static str = "five tab-separated fields \
         time(ms, decimal) device lba(512 B sectors) size(4 KiB pages) type(1=read, 0=write)";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        if !line.contains(&b'\t') {
            return Err(LineError::new(
                "the line holds no tab: flashsim fields are tab-separated (space-separated lines are DiskSim)",
            ));
        }
        let mut fields = line
            .split(|byte| *byte == b'\t')
            .filter(|field| !field.is_empty());
        let time_ns = parse_scaled(field(&mut fields, "time")?, MS_TO_NS_DIGITS, "time")?;
        let device = field(&mut fields, "device")?;
        let lba = parse_u64(field(&mut fields, "lba")?, "lba")?;
        let size_pages = parse_u64(field(&mut fields, "size")?, "size")?;
        let op = match field(&mut fields, "type")? {
            b"1" => Op::Read,
            b"0" => Op::Write,
            other => {
                return Err(LineError(format!(
                    "type {:?} is neither 1 (read) nor 0 (write)",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        no_more_fields(&mut fields, 5)?;

        parse_u64(device, "device")?;
        let offset_bytes = scale(lba, SECTOR_BYTES, "lba", "bytes")?;
        let length_bytes = scale(size_pages, PAGE_BYTES, "size", "bytes")?;

        let volume = self.volume.id(device, volumes);

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

/// A reader of flashsim text over an already opened (decompressed) input.
pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        FlashSim::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like a flashsim trace; `Err` says why
/// not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    try_lines(FlashSim::default(), &head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::text::test_support::{self, count};

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(FlashSim::default(), line)
    }

    #[test]
    fn parses_the_sources_example_lines() {
        let request = parse("26.214000\t0\t303574\t1\t0").unwrap();
        assert_eq!(request.time_ns, 26_214_000);
        assert_eq!(request.op, Op::Write);
        assert_eq!(request.offset_bytes, 303_574 * 512);
        assert_eq!(request.length_bytes, 4096);
        assert_eq!(request.response_ns, None);

        let request = parse("11.565000\t0\t31244784\t8\t1").unwrap();
        assert_eq!(request.time_ns, 11_565_000);
        assert_eq!(request.op, Op::Read);
        assert_eq!(request.length_bytes, 8 * 4096);
        // Digits past the nanosecond are dropped; whole milliseconds are fine.
        assert_eq!(parse("1.0000019\t0\t0\t1\t1").unwrap().time_ns, 1_000_001);
        assert_eq!(parse("7\t0\t0\t1\t1").unwrap().time_ns, 7_000_000);
        // Runs of tabs count as one separator.
        assert_eq!(parse("7\t\t0\t0\t1\t1\t").unwrap().time_ns, 7_000_000);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        assert!(parse("26214000 0 303574 7 0")
            .unwrap_err()
            .contains("no tab"));
        assert!(parse("26.214000\t0\t303574\t1\t2")
            .unwrap_err()
            .contains("type \"2\""));
        assert!(parse("26.214000\t0\t303574\t1")
            .unwrap_err()
            .contains("missing field type"));
        assert!(parse("26.214000\t0\t303574\t1\t0\t0")
            .unwrap_err()
            .contains("more than 5"));
        assert!(parse("26.2.14\t0\t303574\t1\t0")
            .unwrap_err()
            .contains("time"));
        assert!(parse("-1\t0\t303574\t1\t0").unwrap_err().contains("time"));
        assert!(parse("1e3\t0\t303574\t1\t0").unwrap_err().contains("time"));
        assert!(parse("1\tdev\t303574\t1\t0")
            .unwrap_err()
            .contains("device"));
        assert!(parse("1\t0\t30 3574\t1\t0").unwrap_err().contains("lba"));
        assert!(parse("1\t0\t1\t1.5\t0").unwrap_err().contains("size"));
        assert!(parse("1\t0\t18446744073709551615\t1\t0")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("1\t0\t1\t18446744073709551615\t0")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("18446744073709551615.5\t0\t1\t1\t0")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn sniff_tells_flashsim_from_disksim() {
        assert!(sniff(b"26.214000\t0\t303574\t1\t0\n26.214000\t0\t240840\t1\t0\n").is_ok());
        assert!(sniff(b"0 0 303567 7 0\n0 1 55590 6 0\n").is_err());
        assert!(sniff(b"1,10,28,512,8\n").is_err());
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_text() {
        test_support::assert_bad_line_reported(
            Format::FlashSim,
            "26.214000\t0\t303574\t1\t0\n26.214000\t0\t240840\t1\t0\n78.643 0 55596 1 1\n",
            Some(2),
            3,
            "78.643 0 55596 1 1",
        );
    }

    #[test]
    fn skip_bad_lines_counts_the_skipped_line() {
        let (requests, reader) = test_support::read_skipping(Format::FlashSim, "26.214000\t0\t303574\t1\t0\n26.214000\t0\t240840\t1\t0\n78.643 0 55596 1 1\n78.643000\t0\t55596\t1\t1\n");
        let times: Vec<_> = requests.iter().map(|request| request.time_ns).collect();
        assert_eq!(times, vec![26_214_000, 26_214_000, 78_643_000]);
        assert_eq!(reader.skipped_lines(), 1);
    }

    #[test]
    fn reads_the_whole_shared_samples() {
        let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))
        else {
            return;
        };
        assert_eq!(
            count(Format::FlashSim, &traces.join("umass_spc/fin1.trace")),
            (50_000, 29_199, 20_801)
        );
        assert_eq!(
            count(Format::FlashSim, &traces.join("umass_spc/web1.trace")),
            (50_000, 49_990, 10)
        );
        for sample in ["umass_spc/fin1.trace", "umass_spc/web1.trace"] {
            let head = std::fs::read(traces.join(sample)).unwrap();
            assert_eq!(
                sniff(&head[..head.len().min(crate::open::DETECT_BYTES)]),
                Ok(()),
                "{sample}"
            );
        }
        for other in [
            "umass_spc/example.ascii",
            "tpcc/tpcc-small.trace",
            "cloudphysics/trace.csv",
        ] {
            let head = std::fs::read(traces.join(other)).unwrap();
            assert!(
                sniff(&head[..head.len().min(crate::open::DETECT_BYTES)]).is_err(),
                "{other}"
            );
        }
    }
}
