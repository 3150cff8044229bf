//! DiskSim ASCII traces as SSDsim and MQSim write them.
//!
//! Space-separated `time device lba size type`: time in integer nanoseconds,
//! device a number, lba and size in 512-byte sectors, type `1` = read and
//! `0` = write (inverted against the common `0` = read). The volume name is
//! the device number as written (`14`).
//!
//! DiskSim itself writes times as milliseconds with a fraction
//! (`0.000000`); tierd reads only the integer-nanosecond variant and rejects
//! a decimal time with a message that says so. Tab-separated lines are
//! flashsim's, and are rejected here so detection can tell the two apart.

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeTable};
use crate::text::{
    field, head_lines, no_more_fields, parse_u64, scale, try_lines, LineError, LineFormat, Parsed,
    TextReader, VolumeCache,
};

pub const SECTOR_BYTES: u64 = 512;

#[derive(Default)]
pub struct DiskSim {
    volume: VolumeCache,
}

impl LineFormat for DiskSim {
    const FORMAT: Format = Format::DiskSim;
    const EXPECTED: &'static str = "five space-separated fields \
         time(integer ns) device lba(512 B sectors) size(512 B sectors) type(1=read, 0=write)";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        if line.contains(&b'\t') {
            return Err(LineError::new(
                "the line holds a tab: DiskSim fields are separated by spaces (tab-separated lines are flashsim)",
            ));
        }
        let mut fields = line
            .split(|byte| *byte == b' ')
            .filter(|field| !field.is_empty());
        let time_text = field(&mut fields, "time")?;
        let device = field(&mut fields, "device")?;
        let lba = parse_u64(field(&mut fields, "lba")?, "lba")?;
        let size_sectors = parse_u64(field(&mut fields, "size")?, "size")?;
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

        if time_text.contains(&b'.') {
            return Err(LineError(format!(
                "time {:?} has a fraction: tierd reads DiskSim traces with integer nanosecond times \
                 (the SSDsim/MQSim form), not DiskSim's fractional milliseconds",
                String::from_utf8_lossy(time_text)
            )));
        }
        let time_ns = parse_u64(time_text, "time")?;
        parse_u64(device, "device")?;
        let offset_bytes = scale(lba, SECTOR_BYTES, "lba", "bytes")?;
        let length_bytes = scale(size_sectors, SECTOR_BYTES, "size", "bytes")?;

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

/// A reader of DiskSim ASCII over an already opened (decompressed) input.
pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        DiskSim::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like DiskSim ASCII; `Err` says why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    try_lines(DiskSim::default(), &head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::text::test_support::{self, count};

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(DiskSim::default(), line)
    }

    #[test]
    fn parses_the_sources_example_lines() {
        let request = parse("26214000 0 303574 7 0").unwrap();
        assert_eq!(request.time_ns, 26_214_000);
        assert_eq!(request.op, Op::Write);
        assert_eq!(request.offset_bytes, 303_574 * 512);
        assert_eq!(request.length_bytes, 7 * 512);
        assert_eq!(request.response_ns, None);

        let request = parse("938513000 4 264719034 16 1").unwrap();
        assert_eq!(request.op, Op::Read);
        assert_eq!(request.offset_bytes, 264_719_034 * 512);
        assert_eq!(request.length_bytes, 8192);
        // Runs of spaces and surrounding spaces are allowed.
        assert_eq!(parse("  938513000  4 264719034 16 1 ").unwrap(), request);
    }

    #[test]
    fn names_volumes_by_device_number() {
        let mut volumes = VolumeTable::new();
        let mut format = DiskSim::default();
        let mut volume_of = |line: &[u8]| match format.parse_line(line, &mut volumes) {
            Ok(Parsed::Request(request)) => request.volume,
            _ => panic!("line did not parse"),
        };
        let first = volume_of(b"0 14 1 1 0");
        let second = volume_of(b"0 3 1 1 0");
        assert_eq!(volume_of(b"1 14 1 1 0"), first);
        assert_ne!(first, second);
        assert_eq!(volumes.names(), ["14", "3"]);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        assert!(parse("26214000\t0\t303574\t7\t0")
            .unwrap_err()
            .contains("tab"));
        assert!(parse("26.214000 0 303574 7 0")
            .unwrap_err()
            .contains("fraction"));
        assert!(parse("26214000 0 303574 7 2")
            .unwrap_err()
            .contains("type \"2\""));
        assert!(parse("26214000 0 303574 7 R").unwrap_err().contains("type"));
        assert!(parse("26214000 0 303574 7")
            .unwrap_err()
            .contains("missing field type"));
        assert!(parse("26214000 0 303574 7 0 9")
            .unwrap_err()
            .contains("more than 5"));
        assert!(parse("26214000 x 303574 7 0")
            .unwrap_err()
            .contains("device"));
        assert!(parse("26214000 0 -3 7 0").unwrap_err().contains("lba"));
        assert!(parse("26214000 0 3 7k 0").unwrap_err().contains("size"));
        assert!(parse("t 0 3 7 0").unwrap_err().contains("time"));
        assert!(parse("1 0 18446744073709551615 7 0")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("1 0 1 18446744073709551615 0")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("230027 8 0 0").is_err());
    }

    #[test]
    fn sniff_tells_disksim_from_flashsim_and_arc() {
        assert!(sniff(b"0 0 303567 7 0\n0 1 55590 6 0\n26214000 0 303574 7 0").is_ok());
        assert!(sniff(b"26.214000\t0\t303574\t1\t0\n").is_err());
        assert!(sniff(b"230027 8 0 0\n1842745 64 0 1\n").is_err());
        assert!(sniff(b"").is_err());
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_text() {
        let mut reader = test_support::assert_bad_line_reported(
            Format::DiskSim,
            "0 0 303567 7 0\n0 1 55590 6 0\n26214000 0 303574 7 5\n9581546875 14 591867 6 0\n",
            Some(2),
            3,
            "26214000 0 303574 7 5",
        );
        assert!(reader.next_request().unwrap().is_none());
    }

    #[test]
    fn skip_bad_lines_counts_the_skipped_line() {
        let (requests, reader) = test_support::read_skipping(
            Format::DiskSim,
            "0 0 303567 7 0\n0 1 55590 6 0\n26214000 0 303574 7 5\n9581546875 14 591867 6 1\n",
        );
        let times: Vec<_> = requests.iter().map(|request| request.time_ns).collect();
        assert_eq!(times, vec![0, 0, 9_581_546_875]);
        assert_eq!(reader.skipped_lines(), 1);
        assert_eq!(reader.volumes().names(), ["0", "1", "14"]);
    }

    #[test]
    fn reads_the_whole_shared_samples() {
        let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))
        else {
            return;
        };
        // example.ascii ends without a newline: its last line must still count.
        assert_eq!(
            count(Format::DiskSim, &traces.join("umass_spc/example.ascii")),
            (10_000, 4_077, 5_923)
        );
        assert_eq!(
            count(Format::DiskSim, &traces.join("tpcc/tpcc-small.trace")),
            (6_999, 4_381, 2_618)
        );
        for sample in ["umass_spc/example.ascii", "tpcc/tpcc-small.trace"] {
            let head = std::fs::read(traces.join(sample)).unwrap();
            assert_eq!(
                sniff(&head[..head.len().min(crate::open::DETECT_BYTES)]),
                Ok(()),
                "{sample}"
            );
        }
        for other in [
            "umass_spc/fin1.trace",
            "cloudphysics/trace.csv",
            "msr_cambridge/hm_0-cut-20k.csv",
        ] {
            let head = std::fs::read(traces.join(other)).unwrap();
            assert!(
                sniff(&head[..head.len().min(crate::open::DETECT_BYTES)]).is_err(),
                "{other}"
            );
        }
    }
}
