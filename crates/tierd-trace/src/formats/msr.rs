//! MSR Cambridge CSV (SNIA IOTTA set 388).
//!
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, no header.
//! Timestamp is a Windows FILETIME (100 ns ticks since 1601-01-01 UTC); tierd
//! turns it into Unix-epoch nanoseconds. ResponseTime is in 100 ns ticks.
//! Offset and Size are bytes. Type is `Read` or `Write`. The volume name is
//! `Hostname_DiskNumber` (`hm_0`).
//!
//! This is the reference text reader: it parses in place with no allocation
//! per line (the volume of the previous line is cached).

use crate::format::Format;
use crate::request::{Op, Request, VolumeTable};
use crate::text::{
    field, no_more_fields, parse_u64, scale, split, LineError, LineFormat, Parsed, VolumeCache,
};

/// FILETIME ticks between 1601-01-01 and 1970-01-01.
pub const FILETIME_UNIX_EPOCH_TICKS: u64 = 116_444_736_000_000_000;
pub const NS_PER_TICK: u64 = 100;

#[derive(Default)]
pub struct Msr {
    volume: VolumeCache,
}

impl LineFormat for Msr {
    const FORMAT: Format = Format::Msr;
    const EXPECTED: &'static str =
        "Timestamp(FILETIME 100 ns ticks),Hostname,DiskNumber,Read|Write,Offset(bytes),Size(bytes),ResponseTime(100 ns ticks)";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        let mut fields = split(line, b',');
        let ticks = parse_u64(field(&mut fields, "Timestamp")?, "Timestamp")?;
        let host = field(&mut fields, "Hostname")?;
        let disk = field(&mut fields, "DiskNumber")?;
        let op = match field(&mut fields, "Type")? {
            b"Read" => Op::Read,
            b"Write" => Op::Write,
            other => {
                return Err(LineError(format!(
                    "Type {:?} is neither Read nor Write",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        let offset_bytes = parse_u64(field(&mut fields, "Offset")?, "Offset")?;
        let length_bytes = parse_u64(field(&mut fields, "Size")?, "Size")?;
        let response_ticks = parse_u64(field(&mut fields, "ResponseTime")?, "ResponseTime")?;
        no_more_fields(&mut fields, 7)?;

        if host.is_empty() {
            return Err(LineError::new("Hostname is empty"));
        }
        parse_u64(disk, "DiskNumber")?;
        let unix_ticks = ticks
            .checked_sub(FILETIME_UNIX_EPOCH_TICKS)
            .ok_or_else(|| {
                LineError::new("Timestamp is before 1970: not a Windows FILETIME in 100 ns ticks")
            })?;
        let time_ns = scale(
            unix_ticks,
            NS_PER_TICK,
            "Timestamp (ticks since 1970)",
            "nanoseconds",
        )?;
        let response_ns = scale(response_ticks, NS_PER_TICK, "ResponseTime", "nanoseconds")?;

        let volume = self.volume.id_joined(host, b'_', disk, volumes);

        Ok(Parsed::Request(Request {
            time_ns,
            volume,
            op,
            offset_bytes,
            length_bytes,
            response_ns: Some(response_ns),
        }))
    }
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like MSR CSV; `Err` says why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    crate::text::try_lines(Msr::default(), &crate::text::head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::test_support;

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(Msr::default(), line)
    }

    #[test]
    fn parses_the_sources_example_line() {
        let request = parse("128166385295514878,hm,0,Write,11855351808,512,2617").unwrap();
        assert_eq!(request.op, Op::Write);
        assert_eq!(request.offset_bytes, 11_855_351_808);
        assert_eq!(request.length_bytes, 512);
        assert_eq!(request.response_ns, Some(261_700));
        // 128166385295514878 ticks = 2007-02-22 T17:22:09.55 UTC
        assert_eq!(request.time_ns / 1_000_000_000, 1_172_164_929);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        assert!(parse("128166385295514878,hm,0,Erase,0,512,1")
            .unwrap_err()
            .contains("Erase"));
        assert!(parse("128166385295514878,hm,0,Read,0,512")
            .unwrap_err()
            .contains("ResponseTime"));
        assert!(parse("128166385295514878,hm,0,Read,0,512,1,9")
            .unwrap_err()
            .contains("more than 7"));
        assert!(parse("12,hm,0,Read,0,512,1").unwrap_err().contains("1970"));
        assert!(parse("x,hm,0,Read,0,512,1")
            .unwrap_err()
            .contains("Timestamp"));
    }
}
