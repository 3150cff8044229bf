//! FIU IODedup block traces (SNIA IOTTA; Koller & Rangaswami, "I/O
//! Deduplication", FAST 2010: homes, web-vm, mail).
//!
//! Whitespace-separated `ts pid process lba size op major minor md5`: ts in
//! nanoseconds, pid a number, process a name, lba and size in 512-byte
//! sectors, op `R` or `W`, major and minor the device numbers, md5 a hex
//! digest of the block content (ignored here). tierd names the volume
//! `major:minor` (`6:0`). Process names normally have no spaces; when a line
//! has more than nine fields, the fields between pid and the last six are the
//! process name.

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeId, VolumeTable};
use crate::text::{
    head_lines, parse_u64, scale, try_lines, LineError, LineFormat, Parsed, TextReader,
};

pub const SECTOR_BYTES: u64 = 512;
/// Digits of the largest u64: the longest device number text.
const MAX_U64_DIGITS: usize = 20;

#[derive(Default)]
pub struct Fiu {
    last_device: Option<(u64, u64)>,
    last_volume: VolumeId,
}

fn too_few_fields() -> LineError {
    LineError::new("fewer than 9 fields")
}

/// Writes `value` in decimal at the start of `buffer` and returns its length.
fn write_decimal(mut value: u64, buffer: &mut [u8]) -> usize {
    let mut digits = [0u8; MAX_U64_DIGITS];
    let mut count = 0;
    loop {
        digits[count] = b'0' + (value % 10) as u8;
        count += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for (index, digit) in digits[..count].iter().rev().enumerate() {
        buffer[index] = *digit;
    }
    count
}

impl LineFormat for Fiu {
    const FORMAT: Format = Format::Fiu;
    const EXPECTED: &'static str =
        "whitespace-separated ts(ns) pid process lba(512 B sectors) size(512 B sectors) \
         op(R or W) major minor md5(hex)";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        // Double-ended, so the last six fields can be taken from the back and
        // whatever lies between pid and them is the process name.
        let mut fields = line
            .split(|byte| *byte == b' ' || *byte == b'\t')
            .filter(|field| !field.is_empty());
        let time_text = fields.next().ok_or_else(too_few_fields)?;
        let pid = fields.next().ok_or_else(too_few_fields)?;
        let md5 = fields.next_back().ok_or_else(too_few_fields)?;
        let minor = fields.next_back().ok_or_else(too_few_fields)?;
        let major = fields.next_back().ok_or_else(too_few_fields)?;
        let op_text = fields.next_back().ok_or_else(too_few_fields)?;
        let size_text = fields.next_back().ok_or_else(too_few_fields)?;
        let lba_text = fields.next_back().ok_or_else(too_few_fields)?;
        // At least one field of process name must remain between pid and lba.
        fields.next().ok_or_else(too_few_fields)?;

        let time_ns = parse_u64(time_text, "ts")?;
        let lba = parse_u64(lba_text, "lba")?;
        let size_sectors = parse_u64(size_text, "size")?;
        parse_u64(pid, "pid")?;
        let op = match op_text {
            b"R" => Op::Read,
            b"W" => Op::Write,
            other => {
                return Err(LineError(format!(
                    "op {:?} is neither R nor W",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        let major = parse_u64(major, "major")?;
        let minor = parse_u64(minor, "minor")?;
        if !md5.iter().all(u8::is_ascii_hexdigit) {
            return Err(LineError(format!(
                "md5 {:?} is not hexadecimal",
                String::from_utf8_lossy(&md5[..md5.len().min(64)])
            )));
        }
        let offset_bytes = scale(lba, SECTOR_BYTES, "lba", "bytes")?;
        let length_bytes = scale(size_sectors, SECTOR_BYTES, "size", "bytes")?;

        let volume = match self.last_device {
            Some(device) if device == (major, minor) => self.last_volume,
            _ => {
                let mut name = [0u8; 2 * MAX_U64_DIGITS + 1];
                let mut length = write_decimal(major, &mut name);
                name[length] = b':';
                length += 1;
                length += write_decimal(minor, &mut name[length..]);
                let id = volumes.intern_bytes(&name[..length]);
                self.last_device = Some((major, minor));
                self.last_volume = id;
                id
            }
        };

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

/// A reader of FIU IODedup traces over an already opened (decompressed) input.
pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        Fiu::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like an FIU IODedup trace; `Err` says
/// why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    try_lines(Fiu::default(), &head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::text::test_support;

    /// Lines in the shape of the published homes/web-vm/mail traces.
    const SAMPLE: &str = "89966385035968 4868 syslogd 3256216 8 W 6 0 2c9a5b4ac2e3f7ecb5a6ba2fa4b23d95\n\
                          89968195792462 20782 gzip 283193184 8 R 6 0 56f11b711d91a065a2b6458eca924523\n\
                          89968195799001 20782 gzip 283193192 8 R 6 0 9e107d9d372bb6826bd81d3542a419d6\n";

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(Fiu::default(), line)
    }

    #[test]
    fn parses_a_write_and_a_read() {
        let request =
            parse("89966385035968 4868 syslogd 3256216 8 W 6 0 2c9a5b4ac2e3f7ecb5a6ba2fa4b23d95")
                .unwrap();
        assert_eq!(request.time_ns, 89_966_385_035_968);
        assert_eq!(request.op, Op::Write);
        assert_eq!(request.offset_bytes, 3_256_216 * 512);
        assert_eq!(request.length_bytes, 4096);
        assert_eq!(request.response_ns, None);
        let request =
            parse("89968195792462 20782 gzip 283193184 8 R 6 0 56f11b711d91a065a2b6458eca924523")
                .unwrap();
        assert_eq!(request.op, Op::Read);
        assert_eq!(request.offset_bytes, 283_193_184 * 512);
    }

    #[test]
    fn a_process_name_may_hold_spaces() {
        let plain = parse("1 2 kworker 100 8 W 8 16 ab").unwrap();
        assert_eq!(parse("1 2 kworker u16:2 100 8 W 8 16 ab").unwrap(), plain);
        assert_eq!(
            parse("1\t2  Web Content  x 100 8 W 8 16 ab ").unwrap(),
            plain
        );
    }

    #[test]
    fn names_volumes_major_colon_minor() {
        let mut volumes = VolumeTable::new();
        let mut format = Fiu::default();
        let mut seen = Vec::new();
        for line in [
            "1 2 p 100 8 W 8 16 ab",
            "1 2 p 100 8 W 8 16 ab",
            "1 2 p 100 8 W 6 0 ab",
            "1 2 p 100 8 W 18446744073709551615 10 ab",
            "1 2 p 100 8 W 8 16 ab",
        ] {
            match format.parse_line(line.as_bytes(), &mut volumes) {
                Ok(Parsed::Request(request)) => seen.push(request.volume),
                _ => panic!("{line} did not parse"),
            }
        }
        assert_eq!(seen, vec![0, 0, 1, 2, 0]);
        assert_eq!(volumes.names(), ["8:16", "6:0", "18446744073709551615:10"]);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        let good = "89966385035968 4868 syslogd 3256216 8 W 6 0 2c9a5b4ac2e3f7ecb5a6ba2fa4b23d95";
        assert!(parse(good).is_ok());
        assert!(parse("89966385035968 4868 3256216 8 W 6 0 2c9a")
            .unwrap_err()
            .contains("fewer than 9"));
        assert!(parse("89966385035968 4868 syslogd 3256216 8 W 6 0")
            .unwrap_err()
            .contains("fewer than 9"));
        assert!(parse("1").unwrap_err().contains("fewer than 9"));
        assert!(parse("89966385035968 4868 syslogd 3256216 8 X 6 0 2c9a")
            .unwrap_err()
            .contains("op \"X\""));
        assert!(parse("89966385035968 4868 syslogd 3256216 8 w 6 0 2c9a")
            .unwrap_err()
            .contains("op"));
        assert!(parse("8996638503.5968 4868 syslogd 3256216 8 W 6 0 2c9a")
            .unwrap_err()
            .contains("ts"));
        assert!(parse("89966385035968 pid syslogd 3256216 8 W 6 0 2c9a")
            .unwrap_err()
            .contains("pid"));
        assert!(parse("89966385035968 4868 syslogd x 8 W 6 0 2c9a")
            .unwrap_err()
            .contains("lba"));
        assert!(parse("89966385035968 4868 syslogd 3256216 -8 W 6 0 2c9a")
            .unwrap_err()
            .contains("size"));
        assert!(parse("89966385035968 4868 syslogd 3256216 8 W sda 0 2c9a")
            .unwrap_err()
            .contains("major"));
        assert!(parse("89966385035968 4868 syslogd 3256216 8 W 6 a 2c9a")
            .unwrap_err()
            .contains("minor"));
        assert!(parse("89966385035968 4868 syslogd 3256216 8 W 6 0 2c9z")
            .unwrap_err()
            .contains("md5"));
        assert!(parse("1 2 p 18446744073709551615 8 W 6 0 ab")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("1 2 p 1 18446744073709551615 W 6 0 ab")
            .unwrap_err()
            .contains("too large"));
        // A blkparse line is not FIU.
        assert!(
            parse("  8,16   5        2     0.000001850 18615  Q   R 1444645666 + 256 [java]")
                .is_err()
        );
    }

    #[test]
    fn sniff_accepts_fiu_and_rejects_neighbours() {
        assert!(sniff(SAMPLE.as_bytes()).is_ok());
        assert!(sniff(b"0 0 303567 7 0\n").is_err());
        assert!(sniff(b"230027 8 0 0\n").is_err());
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_text() {
        test_support::assert_bad_line_reported(
            Format::Fiu,
            &SAMPLE.replace("283193192 8 R", "283193192 8 D"),
            Some(2),
            3,
            "89968195799001 20782 gzip 283193192 8 D 6 0",
        );
    }

    #[test]
    fn skip_bad_lines_counts_the_skipped_line() {
        let text = format!(
            "{}1 2 p 100 8 W 8 16 ab\n",
            SAMPLE.replace("283193192 8 R", "283193192 8 D")
        );
        let (requests, reader) = test_support::read_skipping(Format::Fiu, &text);
        let times: Vec<_> = requests.iter().map(|request| request.time_ns).collect();
        assert_eq!(times, vec![89_966_385_035_968, 89_968_195_792_462, 1]);
        assert_eq!(reader.skipped_lines(), 1);
        assert_eq!(reader.volumes().names(), ["6:0", "8:16"]);
    }
}
