//! Format detection from content, never from the file name.
//!
//! [`detect`] gets the first [`DETECT_BYTES`](crate::open::DETECT_BYTES) of
//! the uncompressed stream (compression is undone before, by magic bytes) and
//! asks each format's `sniff` in [`DETECTION_ORDER`]; the first that accepts
//! wins. The order resolves the ambiguities between formats:
//!
//! 1. Binary formats with a signature: tierd's native format (magic), then
//!    vscsi (version field in every 32-byte record). Text never passes them.
//! 2. Text formats with a header line: systor17 and cloudphysics-csv (CSV
//!    headers), fio-iolog (`fio version N iolog`).
//! 3. blkparse (`maj,min` device first, a grammar no other format shares).
//! 4. Comma-separated formats without a header: msr (7 fields, `Read|Write`),
//!    then spc (5 fields, `r|w` letters) before tencent (5 fields, `0|1`
//!    digits).
//! 5. Whitespace-separated formats: flashsim (tab-separated, 5 fields) before
//!    disksim (5 fields split on any blanks, which would also take a
//!    tab-separated file), arc-lis (4 fields), fiu (9 fields).
//! 6. lirs-blocks last: a headerless array of u32 block numbers has no
//!    signature, so it is only considered when the sample is not ASCII text
//!    (it holds a NUL byte or a byte above 0x7f) and its length is a multiple
//!    of 4. Any other binary file of that shape is taken for lirs-blocks;
//!    a text-looking one needs `--format lirs-blocks`.
//!
//! When no format accepts the whole sample, a bad line near the start may be
//! the cause: detection then takes the text format that accepts the longest
//! run of leading lines (at least [`MIN_CLEAN_PREFIX_LINES`]), so the reader
//! reports that bad line with its file and line number (or skips it under
//! `--skip-bad-lines`) instead of failing with "cannot tell the format".
//! When nothing fits even that way, the error lists every format with the
//! reason it gave.

use std::path::Path;

use crate::error::{Result, TraceError};
use crate::format::Format;
use crate::formats::{
    arc_lis, blkparse, cloudphysics, disksim, fio_iolog, fiu, flashsim, lirs_blocks, msr, native,
    spc, systor17, tencent, vscsi,
};

/// A format's detector: `Ok` when the sample fits, else why not.
pub type Sniff = fn(&[u8]) -> std::result::Result<(), String>;

/// Every format, in the order detection tries them (see the module docs).
pub const DETECTION_ORDER: [(Format, Sniff); 14] = [
    (Format::Tierd, native::sniff),
    (Format::Vscsi, vscsi::sniff),
    (Format::Systor17, systor17::sniff),
    (Format::CloudPhysicsCsv, cloudphysics::sniff),
    (Format::FioIolog, fio_iolog::sniff),
    (Format::Blkparse, blkparse::sniff),
    (Format::Msr, msr::sniff),
    (Format::Spc, spc::sniff),
    (Format::Tencent, tencent::sniff),
    (Format::FlashSim, flashsim::sniff),
    (Format::DiskSim, disksim::sniff),
    (Format::ArcLis, arc_lis::sniff),
    (Format::Fiu, fiu::sniff),
    (Format::LirsBlocks, sniff_lirs_blocks),
];

/// The format of a trace whose uncompressed stream starts with `head` (at
/// most [`DETECT_BYTES`](crate::open::DETECT_BYTES)). `path` only names the
/// file in the error, which lists every format tried with its reason.
pub fn detect(head: &[u8], path: &Path) -> Result<Format> {
    let mut tried = Vec::with_capacity(DETECTION_ORDER.len());
    for (format, sniff) in DETECTION_ORDER {
        match sniff(head) {
            Ok(()) => return Ok(format),
            Err(reason) => tried.push(format!("{format} ({reason})")),
        }
    }
    if let Some(format) = longest_clean_prefix(head) {
        return Ok(format);
    }
    Err(TraceError::UnknownFormat {
        path: path.to_path_buf(),
        tried: tried.join("; "),
        known: Format::names(),
    })
}

/// Leading lines a text format must accept before detection blames a later
/// line rather than the format.
pub const MIN_CLEAN_PREFIX_LINES: usize = 2;

/// The text format that accepts the longest run of leading lines of `head`
/// (ties go to the earlier format in [`DETECTION_ORDER`]), if that run has at
/// least [`MIN_CLEAN_PREFIX_LINES`] lines. Binary samples are never text.
fn longest_clean_prefix(head: &[u8]) -> Option<Format> {
    if looks_binary(head) {
        return None;
    }
    // End offsets of the complete lines in the sample.
    let line_ends: Vec<usize> = head
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'\n')
        .map(|(index, _)| index + 1)
        .take(64)
        .collect();
    let mut best: Option<(usize, Format)> = None;
    for (format, sniff) in DETECTION_ORDER {
        if matches!(format, Format::Tierd | Format::Vscsi | Format::LirsBlocks) {
            continue;
        }
        // Longest prefix first: the first accepted one is this format's best.
        for lines in (MIN_CLEAN_PREFIX_LINES..=line_ends.len()).rev() {
            if best.is_some_and(|(best_lines, _)| best_lines >= lines) {
                break;
            }
            if sniff(&head[..line_ends[lines - 1]]).is_ok() {
                best = Some((lines, format));
                break;
            }
        }
    }
    best.map(|(_, format)| format)
}

/// Whether `head` has a byte plain ASCII text never holds: NUL or above 0x7f.
pub fn looks_binary(head: &[u8]) -> bool {
    head.iter().any(|byte| *byte == 0 || *byte > 0x7f)
}

/// lirs-blocks with the guard that keeps it from taking text files.
fn sniff_lirs_blocks(head: &[u8]) -> std::result::Result<(), String> {
    if head.is_empty() {
        return Err("the file is empty".to_string());
    }
    if !head.len().is_multiple_of(4) {
        return Err(format!(
            "{} bytes is not a whole number of 4-byte block numbers",
            head.len()
        ));
    }
    if !looks_binary(head) {
        return Err(
            "the content is ASCII text; pass --format lirs-blocks if it really is a u32 array"
                .to_string(),
        );
    }
    lirs_blocks::sniff(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_is_tried_once() {
        let mut formats: Vec<Format> = DETECTION_ORDER.iter().map(|(format, _)| *format).collect();
        formats.sort();
        let mut all = Format::ALL.to_vec();
        all.sort();
        assert_eq!(formats, all);
    }

    #[test]
    fn a_bad_line_near_the_start_does_not_defeat_detection() {
        let good = "128166385295514878,hm,0,Write,11855351808,512,2617\n";
        let mut sample = good.repeat(4);
        sample.push_str("128166385295514878,hm,0,Erase,11855351808,512,2617\n");
        sample.push_str(&good.repeat(3));
        assert!(msr::sniff(sample.as_bytes()).is_err());
        assert_eq!(
            detect(sample.as_bytes(), Path::new("x")).unwrap(),
            Format::Msr
        );
        // One good line is not enough evidence.
        let sample = format!("{good}not a trace line\n");
        assert!(detect(sample.as_bytes(), Path::new("x")).is_err());
        // Prose stays unknown.
        assert!(detect(
            b"dear diary,\ntoday I wrote a parser\nand a test\n",
            Path::new("x")
        )
        .is_err());
    }

    #[test]
    fn lirs_blocks_needs_binary_whole_words() {
        assert!(sniff_lirs_blocks(b"").unwrap_err().contains("empty"));
        assert!(sniff_lirs_blocks(b"12345").unwrap_err().contains("4-byte"));
        assert!(sniff_lirs_blocks(b"1234").unwrap_err().contains("ASCII"));
        assert!(looks_binary(&[1, 0, 0, 0]));
        assert!(looks_binary("é".as_bytes()));
        assert!(!looks_binary(b"8,16 0 1 0.1 1 Q R 1 + 8 [p]\n"));
    }
}
