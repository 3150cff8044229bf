//! Default `blkparse` text output (Linux blktrace), one line per block-layer
//! event, not per request:
//!
//! ```text
//!   8,16   5        2     0.000001850 18615  Q   R 1444645666 + 256 [java]
//! maj,min cpu  sequence  seconds.nanos   pid act rwbs sector + sectors [process]
//! ```
//!
//! One kind of event becomes a request, chosen by
//! [`OpenOptions::blkparse_event`](crate::OpenOptions::blkparse_event):
//! `Q` (queued, the default: what the application asked for, when it asked),
//! `D` (dispatched to the driver, after merging) or `C` (completed). With `C`
//! the request's `time_ns` is the completion time and `response_ns` is the
//! time since the matching `D` event (same device, sector and length), when
//! that `D` was seen and is not later than the `C`; the issue time is then
//! `time_ns - response_ns`. At most [`PENDING_DISPATCHES_MAX`] dispatched,
//! not yet completed events are remembered; beyond that the oldest half is
//! forgotten and their completions carry no response time.
//!
//! The volume is the device, `maj,min` (`8,16`). Offsets and lengths are
//! 512-byte sectors. The time (`%5d.%09lu`) is read exactly to the nanosecond.
//!
//! The `rwbs` field is 1 to 8 letters from `FRWDNABSME` (blkparse writes an
//! optional `F` for a preflush, then `D` discard, `W` write, `R` read or `N`
//! no data, then `F` FUA, `A` readahead, `B` barrier, `S` sync, `M`
//! metadata; the kernel's own tracer may add `E` secure erase). An event
//! whose rwbs holds `D` is a discard and is skipped; otherwise `W` makes a
//! write and `R` a read; an event with neither (`N`, a flush-only `FN`) is
//! skipped. Both `R` and `W` is an error.
//!
//! Valid lines that are not requests are skipped (counted by
//! [`TraceReader::ignored_lines`](crate::TraceReader::ignored_lines)):
//! events of the other actions (`A` remap, `G`, `I`, `M`, `F` merges, `P`,
//! `U`, `UT`, `X` split, `B`, `R` requeue, `S`, …); events of the chosen
//! action without `sector + sectors` (SCSI pass-through commands, zero-length
//! completions); `m` message lines (also with a cgroup id); and blkparse's
//! own non-event output: the `Input file … added` lines at the start and the
//! summary at the end (`CPU0 (8,16):`, `Total (8,16):`, per-process headers
//! `java (18615)`, the ` Reads Queued: …` statistics lines, `Throughput
//! (R/W): …`, `Events (8,16): … entries`, `Skips: …`). Any other line is an
//! error: format detection relies on that.

use crate::error::Result;
use crate::format::Format;
use crate::input::Input;
use crate::open::{BlkparseEvent, OpenOptions};
use crate::reader::TraceReader;
use crate::request::{Op, Request, VolumeId, VolumeTable};
use crate::text::{
    field, head_lines, parse_scaled, parse_u64, scale, LineError, LineFormat, Parsed, TextReader,
    VolumeCache,
};
use tierd_common::hash::FastMap;

pub const SECTOR_BYTES: u64 = 512;
/// Digits after the decimal point of the event time: nanoseconds.
pub const TIME_SCALE: u32 = 9;
/// Dispatched-but-not-completed events remembered for `C` response times.
pub const PENDING_DISPATCHES_MAX: usize = 1 << 20;

/// The letters blkparse (and the kernel) use in the rwbs field.
const RWBS_LETTERS: &[u8] = b"FRWDNABSME";
const RWBS_MAX_LETTERS: usize = 8;

/// Labels that start the statistics lines of blkparse's summary, after the
/// leading space.
const SUMMARY_LABELS: [&[u8]; 15] = [
    b"Reads Queued:",
    b"Read Dispatches:",
    b"Reads Requeued:",
    b"Reads Completed:",
    b"Read Merges:",
    b"Read depth:",
    b"PC Reads Queued:",
    b"PC Read Disp.:",
    b"PC Reads Req.:",
    b"PC Reads Compl.:",
    b"IO unplugs:",
    b"Allocation wait:",
    b"Dispatch wait:",
    b"Completion wait:",
    b"Throughput (R/W):",
];

/// The line blkparse prints at the end when it dropped driver-specific events.
const DISCARDED_NOTE: &[u8] =
    b"discarded traces containing low-level device driver specific data (only available in binary output)";

/// The blkparse line format. It keeps the volume of the previous line (no
/// allocation per line) and, in `C` mode, the pending `D` events.
pub struct Blkparse {
    event: BlkparseEvent,
    volume: VolumeCache,
    pending: PendingDispatches,
}

impl Blkparse {
    pub fn new(event: BlkparseEvent) -> Self {
        Self::with_pending_limit(event, PENDING_DISPATCHES_MAX)
    }

    /// Like [`Blkparse::new`] with at most `limit` (at least 2) pending `D`
    /// events remembered.
    pub fn with_pending_limit(event: BlkparseEvent, limit: usize) -> Self {
        Self {
            event,
            volume: VolumeCache::default(),
            pending: PendingDispatches::new(limit),
        }
    }

    fn volume(&mut self, device: &[u8], volumes: &mut VolumeTable) -> VolumeId {
        self.volume.id(device, volumes)
    }
}

impl Default for Blkparse {
    fn default() -> Self {
        Self::new(BlkparseEvent::Queue)
    }
}

/// Device, sector and length in sectors of a dispatched request.
type DispatchKey = (VolumeId, u64, u64);

/// Dispatch times awaiting their completion, in two generations: when the
/// newer one holds half the limit it becomes the older one and the previous
/// older one is dropped. Memory stays bounded by the limit and both maps keep
/// their capacity, so there is no allocation per event after warm-up.
struct PendingDispatches {
    newer: FastMap<DispatchKey, u64>,
    older: FastMap<DispatchKey, u64>,
    generation_max: usize,
}

impl PendingDispatches {
    fn new(limit: usize) -> Self {
        Self {
            newer: FastMap::default(),
            older: FastMap::default(),
            generation_max: (limit / 2).max(1),
        }
    }

    fn insert(&mut self, key: DispatchKey, time_ns: u64) {
        if self.newer.len() >= self.generation_max && !self.newer.contains_key(&key) {
            std::mem::swap(&mut self.newer, &mut self.older);
            self.newer.clear();
        }
        // A re-dispatch (after a requeue) replaces the earlier time.
        self.older.remove(&key);
        self.newer.insert(key, time_ns);
    }

    fn take(&mut self, key: &DispatchKey) -> Option<u64> {
        self.newer.remove(key).or_else(|| self.older.remove(key))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.newer.len() + self.older.len()
    }
}

/// Whitespace-separated tokens that can also hand back the rest of the line
/// (process names in brackets may hold spaces).
struct Tokens<'a> {
    line: &'a [u8],
    position: usize,
}

impl<'a> Tokens<'a> {
    fn new(line: &'a [u8]) -> Self {
        Self { line, position: 0 }
    }

    fn skip_blanks(&mut self) {
        while self.position < self.line.len() && is_blank(self.line[self.position]) {
            self.position += 1;
        }
    }

    /// What remains after the tokens taken so far, without leading blanks.
    fn rest(&mut self) -> &'a [u8] {
        self.skip_blanks();
        &self.line[self.position..]
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        self.skip_blanks();
        let start = self.position;
        while self.position < self.line.len() && !is_blank(self.line[self.position]) {
            self.position += 1;
        }
        (self.position > start).then(|| &self.line[start..self.position])
    }
}

#[inline]
fn is_blank(byte: u8) -> bool {
    byte == b' ' || byte == b'\t'
}

fn lossy(bytes: &[u8]) -> String {
    crate::error::excerpt(bytes)
}

/// What the rwbs field says about the direction of an event.
#[derive(Debug, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
    /// A discard, a flush without data, or no data: not a request.
    Other,
}

fn parse_rwbs(rwbs: &[u8]) -> Result<Direction, LineError> {
    if rwbs.is_empty()
        || rwbs.len() > RWBS_MAX_LETTERS
        || !rwbs.iter().all(|byte| RWBS_LETTERS.contains(byte))
    {
        return Err(LineError(format!(
            "rwbs {:?} is not 1 to {RWBS_MAX_LETTERS} letters from {}",
            lossy(rwbs),
            std::str::from_utf8(RWBS_LETTERS).unwrap_or_default()
        )));
    }
    let read = rwbs.contains(&b'R');
    let write = rwbs.contains(&b'W');
    if read && write {
        return Err(LineError(format!(
            "rwbs {:?} is both a read and a write",
            lossy(rwbs)
        )));
    }
    Ok(if rwbs.contains(&b'D') {
        Direction::Other
    } else if write {
        Direction::Write
    } else if read {
        Direction::Read
    } else {
        Direction::Other
    })
}

/// `maj,min` with both parts decimal.
fn check_device(device: &[u8]) -> Result<(), LineError> {
    let comma = device.iter().position(|byte| *byte == b',');
    let valid = comma.is_some_and(|comma| {
        parse_u64(&device[..comma], "major").is_ok_and(|major| major <= u64::from(u32::MAX))
            && parse_u64(&device[comma + 1..], "minor")
                .is_ok_and(|minor| minor <= u64::from(u32::MAX))
    });
    if valid {
        Ok(())
    } else {
        Err(LineError(format!(
            "device {:?} is not major,minor",
            lossy(device)
        )))
    }
}

/// An action is one or two ASCII letters (`Q`, `UT`, `m`).
fn check_action(action: &[u8]) -> Result<(), LineError> {
    if (1..=2).contains(&action.len()) && action.iter().all(u8::is_ascii_alphabetic) {
        Ok(())
    } else {
        Err(LineError(format!(
            "action {:?} is not one or two letters",
            lossy(action)
        )))
    }
}

/// `ino,gen` in hex: the cgroup id blkparse puts before `m` on messages of
/// cgroup-aware kernels.
fn is_cgroup_id(token: &[u8]) -> bool {
    let mut parts = token.split(|byte| *byte == b',');
    let (Some(inode), Some(generation), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    [inode, generation]
        .iter()
        .all(|part| !part.is_empty() && part.len() <= 16 && part.iter().all(u8::is_ascii_hexdigit))
}

/// Whether `line` is a line blkparse prints besides events: the input file
/// list at the start and the summary at the end.
pub fn is_summary_line(line: &[u8]) -> bool {
    let line = line.trim_ascii();
    if line.starts_with(b"Input file ") && line.ends_with(b" added") {
        return true;
    }
    if line == DISCARDED_NOTE || line.starts_with(b"Skips:") {
        return true;
    }
    if SUMMARY_LABELS.iter().any(|label| line.starts_with(label)) {
        return true;
    }
    // `CPU3 (8,16):`, `Total (8,16):`, `Events (8,16): 50,000 entries`.
    if let Some(device_and_colon) = line.strip_prefix(b"Total (") {
        return device_and_colon.ends_with(b"):") && device_and_colon.len() > 2;
    }
    if let Some(after_cpu) = line.strip_prefix(b"CPU") {
        let digits = after_cpu
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        let after_digits = &after_cpu[digits..];
        return digits > 0 && after_digits.starts_with(b" (") && after_digits.ends_with(b"):");
    }
    if let Some(after_events) = line.strip_prefix(b"Events (") {
        return after_events.ends_with(b" entries")
            && after_events.windows(3).any(|window| window == b"): ");
    }
    is_process_header(line)
}

/// `java (18615)` or `java (18615, ...)`: the per-process summary header.
fn is_process_header(line: &[u8]) -> bool {
    let Some(inside) = line.strip_suffix(b")") else {
        return false;
    };
    let Some(open) = inside.iter().rposition(|byte| *byte == b'(') else {
        return false;
    };
    if open < 2 || inside[open - 1] != b' ' {
        return false;
    }
    let pid = &inside[open + 1..];
    let pid = pid.strip_suffix(b", ...").unwrap_or(pid);
    !pid.is_empty() && pid.iter().all(u8::is_ascii_digit)
}

impl Blkparse {
    fn selected_action(&self) -> &'static [u8] {
        match self.event {
            BlkparseEvent::Queue => b"Q",
            BlkparseEvent::Dispatch => b"D",
            BlkparseEvent::Complete => b"C",
        }
    }

    fn parse_event(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        let mut tokens = Tokens::new(line);
        let device = field(&mut tokens, "device")?;
        check_device(device)?;
        parse_u64(field(&mut tokens, "cpu")?, "cpu")?;
        parse_u64(field(&mut tokens, "sequence")?, "sequence")?;
        let time_ns = parse_scaled(field(&mut tokens, "time")?, TIME_SCALE, "time")?;
        parse_u64(field(&mut tokens, "pid")?, "pid")?;
        let action = field(&mut tokens, "action")?;
        if action == b"m" || (is_cgroup_id(action) && tokens.next() == Some(b"m")) {
            return Ok(Parsed::Skip);
        }
        check_action(action)?;
        let direction = parse_rwbs(field(&mut tokens, "rwbs")?)?;
        let rest = tokens.rest();
        match rest.first() {
            Some(byte) if byte.is_ascii_digit() || *byte == b'[' || *byte == b'(' => {}
            _ => {
                return Err(LineError(format!(
                    "{:?} after the rwbs field is neither a sector nor [process] nor (…)",
                    lossy(rest)
                )))
            }
        }

        let selected = action == self.selected_action();
        let remember_dispatch = self.event == BlkparseEvent::Complete && action == b"D";
        if !(selected || remember_dispatch) || direction == Direction::Other {
            return Ok(Parsed::Skip);
        }
        let mut tokens = Tokens::new(rest);
        let sector = tokens.next().unwrap_or_default();
        if tokens.next() != Some(b"+") {
            // A pass-through command (`bytes (cdb) [process]`) or a zero-length
            // completion (`sector [error]`): no block range.
            if sector
                .first()
                .is_some_and(|byte| *byte == b'[' || *byte == b'(')
            {
                return Ok(Parsed::Skip);
            }
            parse_u64(sector, "sector")?;
            return Ok(Parsed::Skip);
        }
        let sector = parse_u64(sector, "sector")?;
        let sectors = parse_u64(field(&mut tokens, "sectors")?, "sectors")?;
        let tail = tokens.rest();
        if !(tail.is_empty() || tail[0] == b'[' || tail[0] == b'(') {
            return Err(LineError(format!(
                "{:?} after `sector + sectors` is neither [process] nor (elapsed)",
                lossy(tail)
            )));
        }
        let offset_bytes = scale(sector, SECTOR_BYTES, "sector", "bytes")?;
        let length_bytes = scale(sectors, SECTOR_BYTES, "sectors", "bytes")?;
        let volume = self.volume(device, volumes);
        let key = (volume, sector, sectors);
        if remember_dispatch {
            self.pending.insert(key, time_ns);
            return Ok(Parsed::Skip);
        }
        let response_ns = if self.event == BlkparseEvent::Complete {
            self.pending
                .take(&key)
                .and_then(|dispatch_ns| time_ns.checked_sub(dispatch_ns))
        } else {
            None
        };
        Ok(Parsed::Request(Request {
            time_ns,
            volume,
            op: if direction == Direction::Write {
                Op::Write
            } else {
                Op::Read
            },
            offset_bytes,
            length_bytes,
            response_ns,
        }))
    }
}

impl LineFormat for Blkparse {
    const FORMAT: Format = Format::Blkparse;
    const EXPECTED: &'static str = "default blkparse event lines \
         `maj,min cpu sequence seconds.nanoseconds pid action rwbs sector + sectors [process]` \
         and blkparse's own summary lines";

    fn parse_line(&mut self, line: &[u8], volumes: &mut VolumeTable) -> Result<Parsed, LineError> {
        let first = line.trim_ascii_start();
        if first.first().is_some_and(u8::is_ascii_digit) {
            return self.parse_event(line, volumes);
        }
        if is_summary_line(line) {
            return Ok(Parsed::Skip);
        }
        Err(LineError::new(
            "neither an event line (starting with the device maj,min) nor a line of blkparse's summary",
        ))
    }
}

pub fn open(input: Input, options: &OpenOptions) -> Result<Box<dyn TraceReader>> {
    Ok(Box::new(TextReader::new(
        input,
        Blkparse::new(options.blkparse_event),
        options.skip_bad_lines,
    )))
}

/// Whether `head` (the first bytes of the uncompressed stream, at most
/// [`crate::open::DETECT_BYTES`]) looks like blkparse output; `Err` says why
/// not. Every complete line must parse, and at least one must be an event
/// line with a block range (of any action: the first lines of a capture may
/// hold no `Q`).
pub fn sniff(head: &[u8]) -> std::result::Result<(), String> {
    let mut volumes = VolumeTable::new();
    let mut format = Blkparse::default();
    let mut ranged_events = 0;
    for (index, line) in head_lines(head).into_iter().enumerate() {
        let line = crate::text::trim_line_end(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        format
            .parse_line(line, &mut volumes)
            .map_err(|LineError(reason)| format!("line {}: {reason}", index + 1))?;
        let is_event = line
            .trim_ascii_start()
            .first()
            .is_some_and(u8::is_ascii_digit);
        if is_event && line.windows(3).any(|window| window == b" + ") {
            ranged_events += 1;
        }
    }
    if ranged_events == 0 {
        Err("no event line with `sector + sectors` in the first lines".to_string())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A format and the volume table it fills, as a reader holds them.
    struct Parser(Blkparse, VolumeTable);

    impl Parser {
        fn new(format: Blkparse) -> Self {
            Parser(format, VolumeTable::new())
        }
    }

    fn parse_with(parser: &mut Parser, line: &str) -> Result<Option<Request>, String> {
        match parser.0.parse_line(line.as_bytes(), &mut parser.1) {
            Ok(Parsed::Request(request)) => Ok(Some(request)),
            Ok(Parsed::Skip) => Ok(None),
            Err(LineError(reason)) => Err(reason),
        }
    }

    fn parse(line: &str) -> Result<Option<Request>, String> {
        parse_with(&mut Parser::new(Blkparse::default()), line)
    }

    #[test]
    fn parses_the_sources_example_line() {
        let request =
            parse("  8,16   5        2     0.000001850 18615  Q   R 1444645666 + 256 [java]")
                .unwrap()
                .unwrap();
        assert_eq!(request.time_ns, 1_850);
        assert_eq!(request.op, Op::Read);
        assert_eq!(request.offset_bytes, 1_444_645_666 * 512);
        assert_eq!(request.length_bytes, 256 * 512);
        assert_eq!(request.response_ns, None);
    }

    #[test]
    fn time_is_exact_to_the_nanosecond() {
        let request = parse("  8,0    1   123456 86400.123456789   42  Q  WS 8 + 8 [kworker/u8:2]")
            .unwrap()
            .unwrap();
        assert_eq!(request.time_ns, 86_400_123_456_789);
        assert_eq!(request.op, Op::Write);
    }

    #[test]
    fn rwbs_decides_the_direction() {
        let op = |rwbs: &str| {
            parse(&format!("  8,16 0 1 0.000000001 1 Q {rwbs} 100 + 8 [p]"))
                .map(|request| request.map(|r| r.op))
        };
        assert_eq!(op("R"), Ok(Some(Op::Read)));
        assert_eq!(op("RA"), Ok(Some(Op::Read)));
        assert_eq!(op("RM"), Ok(Some(Op::Read)));
        assert_eq!(op("W"), Ok(Some(Op::Write)));
        assert_eq!(op("WS"), Ok(Some(Op::Write)));
        assert_eq!(op("WBS"), Ok(Some(Op::Write)));
        assert_eq!(op("FWFS"), Ok(Some(Op::Write)));
        assert_eq!(op("N"), Ok(None));
        assert_eq!(op("FN"), Ok(None));
        assert_eq!(op("D"), Ok(None));
        assert_eq!(op("DS"), Ok(None));
        assert!(op("RW").unwrap_err().contains("both"));
        assert!(op("X").unwrap_err().contains("rwbs"));
        assert!(op("WWWWWWWWW").unwrap_err().contains("rwbs"));
    }

    #[test]
    fn other_actions_and_messages_are_skipped() {
        for line in [
            "  8,16   5        1     0.000000000 18615  A   R 1444645666 + 256 <- (8,17) 1444645632",
            "  8,16   5        3     0.000006438 18615  G   R 1444645666 + 256 [java]",
            "  8,16   5        4     0.000008750 18615  P   N [java]",
            "  8,16   5        7     0.000046560 18615  U   N [java] 1",
            "  8,16   2        9     0.000046560 18615 UT   N [java] 1",
            "  8,16   5        0     0.000012990     0  m   N cfq18615S / insert_request",
            "  8,16   5        0     0.000012990     0 1a,0  m   N cfq18615S / insert_request",
            "  8,16   5        6     0.000031865 18615  D   R 1444645666 + 256 [java]",
            "  8,16   5       15     0.000356669     0  C   R 1444645666 + 256 [0]",
            "  8,16   5        2     0.000001850 18615  Q   R 4096 (12 00 00) [sg_inq]",
            "  8,16   5        2     0.000001850 18615  Q   N [java]",
            "  8,16   5        2     0.000001850 18615  X   W 100 / 108 [java]",
        ] {
            assert_eq!(parse(line), Ok(None), "{line}");
        }
    }

    #[test]
    fn summary_lines_are_skipped() {
        for line in [
            "Input file sdb.blktrace.0 added",
            "CPU0 (8,16):",
            " Reads Queued:          80,    10,240KiB\t Writes Queued:      15,444,    61,776KiB",
            " Read Dispatches:       78,    9,984KiB\t Write Dispatches:       92,    70,280KiB",
            " Reads Requeued:         0\t\t Writes Requeued:         0",
            " Read depth:             2        \t Write depth:            32",
            " IO unplugs:            89        \t Timer unplugs:           3",
            "Total (8,16):",
            "java (18615)",
            "flush-8:16 (16766, ...)",
            "Throughput (R/W): 4,262KiB/s / 3,925KiB/s",
            "Events (8,16): 50,000 entries",
            "Skips: 0 forward (0 -   0.0%)",
            "discarded traces containing low-level device driver specific data (only available in binary output)",
        ] {
            assert_eq!(parse(line), Ok(None), "{line}");
        }
    }

    #[test]
    fn rejects_lines_of_other_formats_and_broken_events() {
        for (line, needle) in [
            (
                "128166385295514878,hm,0,Write,11855351808,512,2617",
                "device",
            ),
            ("26.214000\t0\t303574\t1\t0", "device"),
            ("version,time,op,size,lbn", "neither"),
            ("fio version 2 iolog", "neither"),
            (
                "  8,16   5        2     0.000001850 18615  Q   R 1444645666 + x [java]",
                "sectors",
            ),
            (
                "  8,16   5        2     0.000001850 18615  Q   R 1444645666 + 8 garbage",
                "neither",
            ),
            (
                "  8,16   5        2     0.000001850 18615  Q   R",
                "after the rwbs",
            ),
            (
                "  8,16   5        2     0.00000x850 18615  Q   R 1 + 8 [java]",
                "time",
            ),
            (
                "  8,16   5        2     0.000001850 -1  Q   R 1 + 8 [java]",
                "pid",
            ),
            (
                "  8,16   5        2     0.000001850 18615  Q2   R 1 + 8 [java]",
                "action",
            ),
            ("  8,16   5        2", "time"),
            (
                "  816   5        2     0.000001850 18615  Q   R 1 + 8 [java]",
                "device",
            ),
            (
                "  8,16   5        2     0.000001850 18615  Q   R 99999999999999999999 + 8 [java]",
                "sector",
            ),
            (
                "  8,16   5        2     0.000001850 18615  Q   R 18446744073709551615 + 8 [java]",
                "too large",
            ),
            ("Reads Queued", "neither"),
            ("CPU (8,16):", "neither"),
        ] {
            let error = parse(line).unwrap_err();
            assert!(error.contains(needle), "{line:?}: {error}");
        }
    }

    #[test]
    fn complete_events_take_their_response_from_the_dispatch() {
        let mut format = Parser::new(Blkparse::new(BlkparseEvent::Complete));
        let dispatch = "  8,16   5        6     0.000031865 18615  D   R 1444645666 + 256 [java]";
        let complete = "  8,16   5       15     0.000356669     0  C   R 1444645666 + 256 [0]";
        assert_eq!(parse_with(&mut format, dispatch), Ok(None));
        let request = parse_with(&mut format, complete).unwrap().unwrap();
        assert_eq!(request.time_ns, 356_669);
        assert_eq!(request.response_ns, Some(356_669 - 31_865));
        // The dispatch was consumed: a second completion has no response.
        let request = parse_with(&mut format, complete).unwrap().unwrap();
        assert_eq!(request.response_ns, None);
        // A different length on the same sector does not match.
        assert_eq!(parse_with(&mut format, dispatch), Ok(None));
        let other = "  8,16   5       15     0.000356669     0  C   R 1444645666 + 8 [0]";
        assert_eq!(
            parse_with(&mut format, other).unwrap().unwrap().response_ns,
            None
        );
        // Nor does another device.
        let other_device = "  8,32   5       15     0.000356669     0  C   R 1444645666 + 256 [0]";
        assert_eq!(
            parse_with(&mut format, other_device)
                .unwrap()
                .unwrap()
                .response_ns,
            None
        );
        // A completion stamped before its dispatch (clock skew between CPUs)
        // has no response rather than a wrapped one.
        let late_dispatch = "  8,16   5        6     1.000000000 18615  D   W 7 + 8 [java]";
        let early_complete = "  8,16   5        6     0.500000000 18615  C   W 7 + 8 [0]";
        assert_eq!(parse_with(&mut format, late_dispatch), Ok(None));
        assert_eq!(
            parse_with(&mut format, early_complete)
                .unwrap()
                .unwrap()
                .response_ns,
            None
        );
    }

    #[test]
    fn dispatch_mode_ignores_queue_and_complete() {
        let mut format = Parser::new(Blkparse::new(BlkparseEvent::Dispatch));
        let queue = "  8,16   5        2     0.000001850 18615  Q   R 1444645666 + 256 [java]";
        let dispatch = "  8,16   5        6     0.000031865 18615  D   R 1444645666 + 256 [java]";
        let complete = "  8,16   5       15     0.000356669     0  C   R 1444645666 + 256 [0]";
        assert_eq!(parse_with(&mut format, queue), Ok(None));
        assert_eq!(
            parse_with(&mut format, dispatch).unwrap().unwrap().time_ns,
            31_865
        );
        assert_eq!(parse_with(&mut format, complete), Ok(None));
    }

    #[test]
    fn pending_dispatches_stay_bounded_and_evict_the_oldest() {
        let mut format = Parser::new(Blkparse::with_pending_limit(BlkparseEvent::Complete, 4));
        let dispatch = |sector: u64| format!("  8,16 0 1 0.{sector:09} 1 D W {sector} + 8 [p]");
        let complete = |sector: u64| format!("  8,16 0 1 1.000000000 1 C W {sector} + 8 [p]");
        for sector in 1..=5 {
            assert_eq!(parse_with(&mut format, &dispatch(sector)), Ok(None));
            assert!(format.0.pending.len() <= 4);
        }
        // Sectors 1 and 2 formed the first generation and were dropped when
        // sector 5 arrived; 3, 4, 5 remain.
        for (sector, matched) in [(1, false), (2, false), (3, true), (4, true), (5, true)] {
            let request = parse_with(&mut format, &complete(sector)).unwrap().unwrap();
            assert_eq!(request.response_ns.is_some(), matched, "sector {sector}");
        }
        assert_eq!(format.0.pending.len(), 0);
    }

    #[test]
    fn never_panics_on_odd_bytes() {
        let mut format = Blkparse::new(BlkparseEvent::Complete);
        let mut volumes = VolumeTable::new();
        for line in [
            &b"8,"[..],
            b",",
            b"8,16 0 1 . 1 Q R 1 + 8",
            b"8,16 0 1 1. 1 Q R 1 +",
            b"8,16 0 1 1 1 C R 1 + 8 (",
            b"9\xff\xfe",
            b"8,16 0 1 1 1 \xff,\xff m",
            b"(",
            b" )",
            b"CPU9",
            b"Events (",
        ] {
            let _ = format.parse_line(line, &mut volumes);
        }
    }

    /// Reads every request of `path` as blkparse with `event`.
    fn read_all(
        path: &std::path::Path,
        event: BlkparseEvent,
    ) -> (Vec<Request>, Box<dyn TraceReader>) {
        let options = OpenOptions {
            format: Some(Format::Blkparse),
            blkparse_event: event,
            ..OpenOptions::default()
        };
        let mut reader = crate::open_trace(path, &options).unwrap();
        let mut requests = Vec::new();
        while let Some(request) = reader.next_request().unwrap() {
            requests.push(request);
        }
        (requests, reader)
    }

    /// Golden counts on the shared capture, checked beforehand with awk over
    /// the file (`$6` action, `$7` rwbs, `$9 == "+"`, `$10` sectors).
    #[test]
    fn golden_counts_on_the_shared_capture() {
        let Some(traces) = tierd_common::testing::shared_traces_dir(env!("CARGO_MANIFEST_DIR"))
        else {
            return;
        };
        let path = traces.join("blktrace_misc/blktrace.txt");
        const EVENT_LINES: u64 = 50_000;

        let (queued, reader) = read_all(&path, BlkparseEvent::Queue);
        assert_eq!(queued.len(), 15_524);
        assert_eq!(
            queued
                .iter()
                .filter(|request| request.op == Op::Read)
                .count(),
            80
        );
        assert_eq!(
            queued
                .iter()
                .map(|request| request.length_bytes)
                .sum::<u64>(),
            143_040 * 512
        );
        assert_eq!(queued.first().unwrap().time_ns, 1_850);
        assert_eq!(queued.last().unwrap().time_ns, 9_378_427_326);
        assert!(queued.iter().all(|request| request.response_ns.is_none()));
        assert_eq!(reader.volumes().names(), ["8,16"]);
        assert_eq!(reader.ignored_lines(), EVENT_LINES - 15_524);
        assert_eq!(reader.skipped_lines(), 0);

        let (dispatched, reader) = read_all(&path, BlkparseEvent::Dispatch);
        assert_eq!(dispatched.len(), 170);
        assert_eq!(
            dispatched
                .iter()
                .filter(|request| request.op == Op::Read)
                .count(),
            78
        );
        assert_eq!(
            dispatched
                .iter()
                .map(|request| request.length_bytes)
                .sum::<u64>(),
            80_528 * 512
        );
        assert_eq!(reader.ignored_lines(), EVENT_LINES - 170);

        // 171 C lines; one is a zero-length completion (`C WS 1950885322 [0]`).
        let (completed, _) = read_all(&path, BlkparseEvent::Complete);
        assert_eq!(completed.len(), 170);
        assert_eq!(
            completed
                .iter()
                .filter(|request| request.op == Op::Read)
                .count(),
            78
        );
        let responses: Vec<u64> = completed
            .iter()
            .filter_map(|request| request.response_ns)
            .collect();
        assert_eq!(
            responses.len(),
            170,
            "every completion has its dispatch in the capture"
        );
        assert_eq!(responses.iter().sum::<u64>(), 5_019_820_877);
        assert_eq!(responses.iter().min(), Some(&70_704));
        assert_eq!(responses.iter().max(), Some(&163_400_449));
    }

    const SMALL_CAPTURE: &str = "Input file sdb.blktrace.0 added
  8,16   5        1     0.000000000 18615  A   R 1444645666 + 256 <- (8,17) 1444645632
  8,16   5        2     0.000001850 18615  Q   R 1444645666 + 256 [java]
  8,16   5        3     0.000006438 18615  Q   W 100 + 8 [java]
  8,16   5        4     0.000008750 18615  Q   R 1444645666 + x [java]
  8,16   5        5     0.000009980 18615  Q  WS 200 + 16 [java]

CPU5 (8,16):
 Reads Queued:           1,      128KiB\t Writes Queued:           2,       12KiB
Events (8,16): 5 entries
";

    #[test]
    fn malformed_line_error_names_file_and_line() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("capture.txt");
        std::fs::write(&path, SMALL_CAPTURE).unwrap();
        // A bad line among the first lines defeats detection, so name the format.
        let options = OpenOptions {
            format: Some(Format::Blkparse),
            ..OpenOptions::default()
        };
        let mut reader = crate::open_trace(&path, &options).unwrap();
        assert_eq!(reader.next_request().unwrap().unwrap().op, Op::Read);
        assert_eq!(reader.next_request().unwrap().unwrap().op, Op::Write);
        let error = reader.next_request().unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, crate::TraceError::BadLine { line: 5, .. }),
            "{message}"
        );
        assert!(
            message.contains(&format!("{}:5:", path.display())),
            "{message}"
        );
        assert!(message.contains("sectors"), "{message}");
        assert!(
            reader.next_request().unwrap().is_none(),
            "a reader stops after an error"
        );
    }

    #[test]
    fn skip_bad_lines_counts_them() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("capture.txt");
        std::fs::write(&path, SMALL_CAPTURE).unwrap();
        let options = OpenOptions {
            format: Some(Format::Blkparse),
            skip_bad_lines: true,
            ..OpenOptions::default()
        };
        let mut reader = crate::open_trace(&path, &options).unwrap();
        let mut lengths = Vec::new();
        while let Some(request) = reader.next_request().unwrap() {
            lengths.push(request.length_bytes);
        }
        assert_eq!(lengths, [256 * 512, 8 * 512, 16 * 512]);
        assert_eq!(reader.skipped_lines(), 1);
        // Input file, A, CPU5, Reads Queued, Events; the blank line is not counted.
        assert_eq!(reader.ignored_lines(), 5);
    }
}
