//! tierd's native binary trace format (`formats::native`).
//!
//! First byte % 2:
//! - 0: the rest is a `.tierd` file, as is (magic, header, volume table,
//!   header CRC, zstd blocks with CRCs);
//! - 1: the harness builds a file whose checksums and compression are right
//!   around fuzzed contents, so the fuzzer reaches the record decoding
//!   behind them: byte 1 = volume count (% 4), then per volume a name
//!   length byte (% 8) and the name, then the rest as the uncompressed
//!   records of one block (cut to whole 32-byte records). The header's
//!   record count and first and last times are computed from the block as
//!   the format documents it, unless byte 1 has bit 7 set (then they are
//!   taken as zero, to reach the header-mismatch checks).
//!
//! Properties beyond "no panic": the reader stays finished after its end
//! or an error; a file built in mode 1 that has a valid block yields
//! exactly the block's records.

use tierd_trace::formats::native::{NativeReader, MAGIC, RECORD_BYTES, VERSION};
use tierd_trace::TraceReader;

use crate::trace_reader::{drain, memory_input};

/// The times of the `count` records of `raw` (times are byte-planed
/// wrapping deltas: the low u32 plane group, then the high one).
fn block_times(raw: &[u8], count: usize) -> Vec<u64> {
    let plane_value = |group: usize, index: usize| -> u64 {
        (0..4).fold(0u64, |value, byte| {
            value | u64::from(raw[(group * 4 + byte) * count + index]) << (8 * byte)
        })
    };
    let mut time_ns = 0u64;
    (0..count)
        .map(|index| {
            let delta = plane_value(0, index) | plane_value(1, index) << 32;
            time_ns = time_ns.wrapping_add(delta);
            time_ns
        })
        .collect()
}

fn build(rest: &[u8]) -> Option<(Vec<u8>, usize)> {
    let (&control, mut rest) = rest.split_first()?;
    let mut header = Vec::new();
    let mut volume_table = Vec::new();
    let volume_count = u32::from(control & 3);
    for _ in 0..volume_count {
        let (&length, after) = rest.split_first()?;
        let length = usize::from(length % 8).min(after.len());
        let (name, after) = after.split_at(length);
        volume_table.extend_from_slice(&(length as u32).to_le_bytes());
        volume_table.extend_from_slice(name);
        rest = after;
    }
    let count = rest.len() / RECORD_BYTES;
    let raw = &rest[..count * RECORD_BYTES];
    let (first_ns, last_ns) = if control & 0x80 != 0 || count == 0 {
        (0, 0)
    } else {
        let times = block_times(raw, count);
        (times[0], times[count - 1])
    };
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&(RECORD_BYTES as u32).to_le_bytes());
    header.extend_from_slice(&(count as u64).to_le_bytes());
    header.extend_from_slice(&first_ns.to_le_bytes());
    header.extend_from_slice(&last_ns.to_le_bytes());
    header.extend_from_slice(&volume_count.to_le_bytes());
    header.extend_from_slice(&volume_table);
    let crc = crc32fast::hash(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    if count > 0 {
        let compressed = zstd::bulk::compress(raw, 1).ok()?;
        header.extend_from_slice(&(count as u32).to_le_bytes());
        header.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
        header.extend_from_slice(&crc32fast::hash(raw).to_le_bytes());
        header.extend_from_slice(&compressed);
    }
    Some((header, count))
}

pub fn run(data: &[u8]) {
    let Some((mode, rest)) = crate::split_mode(data) else {
        return;
    };
    if mode % 2 == 0 {
        match NativeReader::new(memory_input(rest)) {
            Ok(mut reader) => drain(&mut reader, false),
            Err(error) => drop(error.to_string()),
        }
        return;
    }
    let Some((file, count)) = build(rest) else {
        return;
    };
    let mut reader = match NativeReader::new(memory_input(&file)) {
        Ok(reader) => reader,
        Err(error) => {
            drop(error.to_string());
            return;
        }
    };
    let mut records = 0usize;
    loop {
        match reader.next_request() {
            Ok(Some(_)) => records += 1,
            Ok(None) => {
                assert_eq!(records, count, "a valid block yields all its records");
                break;
            }
            Err(error) => {
                drop(error.to_string());
                break;
            }
        }
    }
    assert!(
        matches!(reader.next_request(), Ok(None)),
        "finished reader went on"
    );
}
