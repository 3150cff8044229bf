//! fio iolog, versions 2 and 3 (fio's `read_iolog` / `write_iolog` files).
//!
//! The first line is the header `fio version 2 iolog` or `fio version 3
//! iolog`. Then, separated by spaces:
//!
//! - version 2: `filename add|open|close` (file management) and
//!   `filename read|write|sync|datasync|trim|wait offset length` (I/O);
//! - version 3: the same with a leading timestamp on every line,
//!   `timestamp filename action [offset length]`; `wait` is not allowed.
//!
//! Offsets and lengths are bytes. The version 3 timestamp counts from the
//! start of the run; fio's documentation gives no unit, and fio itself writes
//! and replays it in **microseconds** (`iolog.c`: `utime_since_now`), so tierd
//! reads it as microseconds. Version 2 lines carry no time: every request has
//! `time_ns` 0. (Version 2 `wait` lines are skipped: fio's documentation calls
//! the value microseconds relative to the previous wait, while fio's replay
//! code treats it as milliseconds since the start, so tierd does not guess.)
//!
//! `read` and `write` become requests on the volume named by the file name;
//! `add`, `open`, `close`, `sync`, `datasync`, `trim` and `wait` are valid
//! lines that are skipped (trims free space rather than move data, syncs carry
//! no range). `add` also registers the file as a volume, so volumes keep the
//! log's order. The old version 1 (`rw, offset, length`, unsupported by fio
//! since 1.20) is not read. Any line that fits none of these is an error.

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeId, VolumeTable};
use crate::text::{
    field, head_lines, no_more_fields, parse_u64, scale, split_whitespace, try_lines, LineError,
    LineFormat, Parsed, TextReader, VolumeCache,
};

pub const HEADER_VERSION_2: &[u8] = b"fio version 2 iolog";
pub const HEADER_VERSION_3: &[u8] = b"fio version 3 iolog";
pub const NS_PER_US: u64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Two,
    Three,
}

/// The fio iolog line format: remembers the version from the header and the
/// volume of the previous line (no allocation per line).
#[derive(Default)]
pub struct FioIolog {
    version: Option<Version>,
    volume: VolumeCache,
}

impl FioIolog {
    /// The version announced by the header, once it was read.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    fn volume(&mut self, file: &[u8], volumes: &mut VolumeTable) -> VolumeId {
        self.volume.id(file, volumes)
    }
}

impl LineFormat for FioIolog {
    const FORMAT: Format = Format::FioIolog;
    const EXPECTED: &'static str = "the header `fio version 2 iolog` or `fio version 3 iolog`, then lines \
         `[time(us, version 3 only)] filename add|open|close` or \
         `[time(us, version 3 only)] filename read|write|sync|datasync|trim|wait(version 2 only) offset(bytes) length(bytes)`";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        let text = line.trim_ascii();
        if text.starts_with(b"fio version ") {
            if self.version.is_some() {
                return Err(LineError::new("a second header line"));
            }
            self.version = Some(match text {
                HEADER_VERSION_2 => Version::Two,
                HEADER_VERSION_3 => Version::Three,
                _ => {
                    return Err(LineError::new(
                        "unsupported iolog version: tierd reads versions 2 and 3",
                    ))
                }
            });
            return Ok(Parsed::Skip);
        }
        let Some(version) = self.version else {
            return Err(LineError::new(
                "the first line must be the header `fio version 2 iolog` or `fio version 3 iolog` \
                 (version 1 logs are not supported)",
            ));
        };

        let mut fields = split_whitespace(text);
        let time_ns = match version {
            Version::Two => 0,
            Version::Three => {
                let time_us = parse_u64(field(&mut fields, "timestamp")?, "timestamp")?;
                scale(time_us, NS_PER_US, "timestamp", "nanoseconds")?
            }
        };
        let file = field(&mut fields, "filename")?;
        let action = field(&mut fields, "action")?;
        let op = match action {
            b"add" | b"open" | b"close" => {
                no_more_fields(&mut fields, if version == Version::Two { 2 } else { 3 })?;
                if action == b"add" {
                    self.volume(file, volumes);
                }
                return Ok(Parsed::Skip);
            }
            b"read" => Some(Op::Read),
            b"write" => Some(Op::Write),
            b"sync" | b"datasync" | b"trim" => None,
            b"wait" if version == Version::Two => None,
            b"wait" => return Err(LineError::new("action wait is not allowed in version 3")),
            other => {
                return Err(LineError(format!(
                "action {:?} is none of add, open, close, read, write, sync, datasync, trim, wait",
                crate::error::excerpt(other)
            )))
            }
        };
        let offset_bytes = parse_u64(field(&mut fields, "offset")?, "offset")?;
        let length_bytes = parse_u64(field(&mut fields, "length")?, "length")?;
        no_more_fields(&mut fields, if version == Version::Two { 4 } else { 5 })?;
        let Some(op) = op else {
            return Ok(Parsed::Skip);
        };
        Ok(Parsed::Request(Request {
            time_ns,
            volume: self.volume(file, volumes),
            op,
            offset_bytes,
            length_bytes,
            response_ns: None,
        }))
    }
}

pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        FioIolog::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like an fio iolog; `Err` says why
/// not. The header must be the first line.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    try_lines(FioIolog::default(), &head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `lines` in order; the result of each.
    fn parse_all(lines: &[&str]) -> (Vec<Result<Option<Request>, String>>, VolumeTable) {
        let mut format = FioIolog::default();
        let mut volumes = VolumeTable::new();
        let results = lines
            .iter()
            .map(
                |line| match format.parse_line(line.as_bytes(), &mut volumes) {
                    Ok(Parsed::Request(request)) => Ok(Some(request)),
                    Ok(Parsed::Skip) => Ok(None),
                    Err(LineError(reason)) => Err(reason),
                },
            )
            .collect();
        (results, volumes)
    }

    #[test]
    fn version_2_has_no_time() {
        let (results, volumes) = parse_all(&[
            "fio version 2 iolog",
            "/dev/sdb add",
            "/dev/sdb open",
            "/dev/sdb read 0 4096",
            "/dev/sdb write 8192 512",
            "/dev/sdb sync 0 0",
            "/dev/sdb datasync 0 0",
            "/dev/sdb trim 4096 4096",
            "/dev/sdb wait 1000 0",
            "/dev/sdb close",
        ]);
        let requests: Vec<Request> = results
            .into_iter()
            .filter_map(|result| result.unwrap())
            .collect();
        assert_eq!(requests.len(), 2);
        assert_eq!(
            requests[0],
            Request {
                time_ns: 0,
                volume: 0,
                op: Op::Read,
                offset_bytes: 0,
                length_bytes: 4096,
                response_ns: None
            }
        );
        assert_eq!(
            (
                requests[1].op,
                requests[1].offset_bytes,
                requests[1].length_bytes
            ),
            (Op::Write, 8192, 512)
        );
        assert_eq!(volumes.names(), ["/dev/sdb"]);
    }

    #[test]
    fn version_3_times_are_microseconds() {
        let (results, volumes) = parse_all(&[
            "fio version 3 iolog",
            "0 /tmp/a add",
            "0 /tmp/b add",
            "1 /tmp/a open",
            "2500 /tmp/b write 4096 4096",
            "2600 /tmp/a read 0 8192",
        ]);
        let requests: Vec<Request> = results
            .into_iter()
            .filter_map(|result| result.unwrap())
            .collect();
        assert_eq!(requests[0].time_ns, 2_500_000);
        assert_eq!(requests[0].volume, 1);
        assert_eq!(requests[1].time_ns, 2_600_000);
        assert_eq!(requests[1].volume, 0);
        assert_eq!(volumes.names(), ["/tmp/a", "/tmp/b"]);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        let error = |lines: &[&str]| parse_all(lines).0.pop().unwrap().unwrap_err();
        assert!(error(&["/dev/sdb read 0 4096"]).contains("header"));
        assert!(error(&["0, 0, 4096"]).contains("version 1"));
        assert!(error(&["fio version 4 iolog"]).contains("unsupported"));
        assert!(error(&["fio version 2 iolog", "fio version 2 iolog"]).contains("second header"));
        assert!(error(&["fio version 2 iolog", "/dev/sdb erase 0 1"]).contains("erase"));
        assert!(error(&["fio version 2 iolog", "/dev/sdb read 0"]).contains("length"));
        assert!(error(&["fio version 2 iolog", "/dev/sdb read x 1"]).contains("offset"));
        assert!(error(&["fio version 2 iolog", "/dev/sdb read 0 1 2"]).contains("more than 4"));
        assert!(error(&["fio version 2 iolog", "/dev/sdb open 0"]).contains("more than 2"));
        assert!(error(&["fio version 2 iolog", "/dev/sdb"]).contains("action"));
        assert!(error(&["fio version 3 iolog", "/dev/sdb read 0 4096"]).contains("timestamp"));
        assert!(error(&["fio version 3 iolog", "5 /dev/sdb wait 10 0"]).contains("wait"));
        assert!(error(&["fio version 3 iolog", "5 /dev/sdb read 0 1 2"]).contains("more than 5"));
        assert!(error(&[
            "fio version 3 iolog",
            "99999999999999999999 /dev/sdb read 0 1"
        ])
        .contains("timestamp"));
        assert!(error(&[
            "fio version 3 iolog",
            "18446744073709551615 /dev/sdb read 0 1"
        ])
        .contains("too large"));
    }

    #[test]
    fn sniff_needs_the_header_first() {
        assert!(sniff(b"fio version 2 iolog\n/dev/sdb add\n/dev/sdb read 0 4096\n").is_ok());
        assert!(sniff(b"fio version 3 iolog\n0 /dev/sdb add\n7 /dev/sdb write 0 4096\n").is_ok());
        assert!(sniff(b"/dev/sdb read 0 4096\n").is_err());
        assert!(sniff(b"fio version 2 iolog\n/dev/sdb add\n")
            .unwrap_err()
            .contains("no request"));
    }

    const VERSION_3_LOG: &str = "fio version 3 iolog
0 /dev/nvme0n1 add
3 /dev/nvme0n1 open
120 /dev/nvme0n1 write 0 4096
245 /dev/nvme0n1 read 4096 4096
250 /dev/nvme0n1 write 8192 four
260 /dev/nvme0n1 trim 0 4096
300 /dev/nvme0n1 read 1048576 131072
301 /dev/nvme0n1 close
";

    #[test]
    fn reads_a_file_and_names_file_and_line_on_error() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("job.iolog");
        std::fs::write(&path, VERSION_3_LOG).unwrap();
        // The bad line is within the detection sample, so name the format.
        let options = OpenOptions {
            format: Some(Format::FioIolog),
            ..OpenOptions::default()
        };
        let mut reader = crate::open_trace(&path, &options).unwrap();
        let first = reader.next_request().unwrap().unwrap();
        assert_eq!(
            (first.time_ns, first.op, first.offset_bytes),
            (120_000, Op::Write, 0)
        );
        let second = reader.next_request().unwrap().unwrap();
        assert_eq!(
            (second.time_ns, second.op, second.offset_bytes),
            (245_000, Op::Read, 4096)
        );
        let error = reader.next_request().unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, crate::TraceError::BadLine { line: 6, .. }),
            "{message}"
        );
        assert!(
            message.contains(&format!("{}:6:", path.display())),
            "{message}"
        );
        assert!(message.contains("length"), "{message}");
    }

    #[test]
    fn skip_bad_lines_counts_them() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("job.iolog");
        std::fs::write(&path, VERSION_3_LOG).unwrap();
        let options = OpenOptions {
            format: Some(Format::FioIolog),
            skip_bad_lines: true,
            ..OpenOptions::default()
        };
        let mut reader = crate::open_trace(&path, &options).unwrap();
        let mut requests = Vec::new();
        while let Some(request) = reader.next_request().unwrap() {
            requests.push(request);
        }
        let times: Vec<u64> = requests.iter().map(|request| request.time_ns).collect();
        assert_eq!(times, [120_000, 245_000, 300_000]);
        assert_eq!(requests[2].length_bytes, 131_072);
        assert_eq!(reader.skipped_lines(), 1);
        // The header, add, open, trim and close.
        assert_eq!(reader.ignored_lines(), 5);
        assert_eq!(reader.volumes().names(), ["/dev/nvme0n1"]);
    }
}
