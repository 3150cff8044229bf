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
use crate::request::{Op, Request, VolumeId, VolumeTable};
use crate::text::{field, no_more_fields, parse_u64, split, LineError, LineFormat, Parsed};

/// FILETIME ticks between 1601-01-01 and 1970-01-01.
pub const FILETIME_UNIX_EPOCH_TICKS: u64 = 116_444_736_000_000_000;
pub const NS_PER_TICK: u64 = 100;

#[derive(Default)]
pub struct Msr {
    last_host: Vec<u8>,
    last_disk: Vec<u8>,
    last_volume: Option<VolumeId>,
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
        let time_ns = unix_ticks
            .checked_mul(NS_PER_TICK)
            .ok_or_else(|| LineError::new("Timestamp is too far in the future"))?;
        let response_ns = response_ticks
            .checked_mul(NS_PER_TICK)
            .ok_or_else(|| LineError::new("ResponseTime is too large"))?;

        let volume = match self.last_volume {
            Some(id) if self.last_host == host && self.last_disk == disk => id,
            _ => {
                let mut name = Vec::with_capacity(host.len() + 1 + disk.len());
                name.extend_from_slice(host);
                name.push(b'_');
                name.extend_from_slice(disk);
                let id = volumes.intern_bytes(&name);
                self.last_host.clear();
                self.last_host.extend_from_slice(host);
                self.last_disk.clear();
                self.last_disk.extend_from_slice(disk);
                self.last_volume = Some(id);
                id
            }
        };

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

    fn parse(line: &str) -> Result<Request, String> {
        let mut volumes = VolumeTable::new();
        match Msr::default().parse_line(line.as_bytes(), &mut volumes) {
            Ok(Parsed::Request(request)) => Ok(request),
            Ok(Parsed::Skip) => Err("skipped".into()),
            Err(LineError(reason)) => Err(reason),
        }
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
