//! The `.lis` traces of the ARC paper (Megiddo & Modha, FAST 2003: OLTP,
//! P1–P14, S1–S3, ...).
//!
//! Space-separated `start_block count ignore request_number`, all decimal
//! integers: the request reads `count` 512-byte blocks from `start_block`;
//! the third field carries nothing and the fourth numbers the request. The
//! traces hold reads only and no time: tierd makes every line a read of
//! `count * 512` bytes at `start_block * 512`, at time 0, on volume `0`.

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::OpenOptions;
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeId, VolumeTable};
use crate::text::{
    field, head_lines, no_more_fields, parse_u64, scale, split_whitespace, try_lines, LineError,
    LineFormat, Parsed, TextReader,
};

pub const BLOCK_BYTES: u64 = 512;
/// The name of the one volume of an ARC trace.
pub const VOLUME_NAME: &str = "0";

#[derive(Default)]
pub struct ArcLis {
    volume: Option<VolumeId>,
}

impl LineFormat for ArcLis {
    const FORMAT: Format = Format::ArcLis;
    const EXPECTED: &'static str =
        "four space-separated integers start_block(512 B blocks) count(blocks) ignore request_number";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        let mut fields = split_whitespace(line);
        let start_block = parse_u64(field(&mut fields, "start_block")?, "start_block")?;
        let count = parse_u64(field(&mut fields, "count")?, "count")?;
        parse_u64(field(&mut fields, "ignore")?, "ignore")?;
        parse_u64(field(&mut fields, "request_number")?, "request_number")?;
        no_more_fields(&mut fields, 4)?;

        let offset_bytes = scale(start_block, BLOCK_BYTES, "start_block", "bytes")?;
        let length_bytes = scale(count, BLOCK_BYTES, "count", "bytes")?;
        let volume = *self
            .volume
            .get_or_insert_with(|| volumes.intern(VOLUME_NAME));

        Ok(Parsed::Request(Request {
            time_ns: 0,
            volume,
            op: Op::Read,
            offset_bytes,
            length_bytes,
            response_ns: None,
        }))
    }
}

/// A reader of ARC `.lis` traces over an already opened (decompressed) input.
pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        ArcLis::default(),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like an ARC `.lis` trace; `Err` says
/// why not.
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    try_lines(ArcLis::default(), &head_lines(head)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::open::open_trace;
    use crate::text::test_support::{self, options};

    fn parse(line: &str) -> Result<Request, String> {
        test_support::parse(ArcLis::default(), line)
    }

    /// (requests, blocks) of a whole file read as ARC `.lis`; fails on a write.
    fn count(path: &Path) -> (u64, u64) {
        let mut reader = open_trace(path, &options(Format::ArcLis, false)).unwrap();
        let (mut requests, mut blocks) = (0, 0);
        while let Some(request) = reader.next_request().unwrap() {
            assert_eq!(request.op, Op::Read);
            assert_eq!(request.time_ns, 0);
            requests += 1;
            blocks += request.length_bytes / BLOCK_BYTES;
        }
        assert_eq!(reader.volumes().names(), ["0"]);
        (requests, blocks)
    }

    #[test]
    fn parses_the_sources_example_line() {
        let request = parse("230027 8 0 0").unwrap();
        assert_eq!(request.time_ns, 0);
        assert_eq!(request.op, Op::Read);
        assert_eq!(request.offset_bytes, 230_027 * 512);
        assert_eq!(request.length_bytes, 8 * 512);
        assert_eq!(request.response_ns, None);
        assert_eq!(request.volume, 0);
        assert_eq!(parse(" 1842745\t64  0 1 ").unwrap().length_bytes, 64 * 512);
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        assert!(parse("230027 8 0")
            .unwrap_err()
            .contains("missing field request_number"));
        assert!(parse("230027 8 0 0 0").unwrap_err().contains("more than 4"));
        assert!(parse("x 8 0 0").unwrap_err().contains("start_block"));
        assert!(parse("230027 -8 0 0").unwrap_err().contains("count"));
        assert!(parse("230027 8 a 0").unwrap_err().contains("ignore"));
        assert!(parse("230027 8 0 0.5")
            .unwrap_err()
            .contains("request_number"));
        assert!(parse("18446744073709551615 8 0 0")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("1 18446744073709551615 0 0")
            .unwrap_err()
            .contains("too large"));
        assert!(parse("230027,8,0,0").is_err());
    }

    #[test]
    fn sniff_tells_arc_from_disksim() {
        assert!(sniff(b"230027 8 0 0\n1842745 64 0 1\n216082 8 0 2\n").is_ok());
        assert!(sniff(b"0 0 303567 7 0\n0 1 55590 6 0\n").is_err());
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_text() {
        test_support::assert_bad_line_reported(
            Format::ArcLis,
            "230027 8 0 0\n1842745 64 0 1\n216082 eight 0 2\n",
            Some(2),
            3,
            "216082 eight 0 2",
        );
    }

    #[test]
    fn skip_bad_lines_counts_the_skipped_line() {
        let (requests, reader) = test_support::read_skipping(
            Format::ArcLis,
            "230027 8 0 0\n1842745 64 0 1\n216082 eight 0 2\n216082 8 0 3\n",
        );
        let offsets: Vec<_> = requests
            .iter()
            .map(|request| request.offset_bytes / 512)
            .collect();
        assert_eq!(offsets, vec![230_027, 1_842_745, 216_082]);
        assert_eq!(reader.skipped_lines(), 1);
    }

    #[test]
    fn reads_the_whole_shared_samples() {
        let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))
        else {
            return;
        };
        // OLTP: every line is one block.
        assert_eq!(
            count(&traces.join("arc_ibm/OLTP.lis.zst")),
            (914_145, 914_145)
        );
        assert_eq!(
            count(&traces.join("arc_ibm/P3.lis.zst")),
            (238_578, 3_912_296)
        );
    }
}
