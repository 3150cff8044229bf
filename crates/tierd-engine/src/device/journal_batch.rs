//! The framing of a journal batch in a metadata ring on a tier's own
//! device, shared by the reduced tier (`reduce/layout.rs`) and the
//! replicated tier (`replica/layout.rs`): each batch starts at a 4 KiB-
//! aligned position and is
//!
//! ```text
//! magic (8) | sequence (u64) | record count (u64) | CRC-32 (u32) | 0 (u32) | records … | zero padding to 4 KiB
//! ```
//!
//! with the CRC over the first 24 bytes and the records. Replay stops at the
//! first batch whose magic, sequence or CRC is not the expected one (a torn
//! append, or a batch of an earlier lap of the ring). Little-endian.

pub const ALIGN_BYTES: u64 = 4096;
pub const HEADER_BYTES: u64 = 32;

/// Bytes a batch of `count` records of `record_bytes` takes in the ring.
pub fn batch_bytes(count: usize, record_bytes: u64) -> u64 {
    (HEADER_BYTES + count as u64 * record_bytes).div_ceil(ALIGN_BYTES) * ALIGN_BYTES
}

/// A batch of `count` records whose encodings `records` holds back to back.
pub fn encode(
    magic: &[u8; 8],
    sequence: u64,
    count: usize,
    record_bytes: u64,
    records: &[u8],
) -> Vec<u8> {
    debug_assert_eq!(records.len() as u64, count as u64 * record_bytes);
    let mut out = Vec::with_capacity(batch_bytes(count, record_bytes) as usize);
    out.extend_from_slice(magic);
    out.extend_from_slice(&sequence.to_le_bytes());
    out.extend_from_slice(&(count as u64).to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(records);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&out[..24]);
    hasher.update(&out[HEADER_BYTES as usize..]);
    let crc = hasher.finalize();
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    out.resize(batch_bytes(count, record_bytes) as usize, 0);
    out
}

/// A batch header's sequence and record count, if `bytes` starts with one.
pub fn header(bytes: &[u8], magic: &[u8; 8]) -> Option<(u64, u64)> {
    if bytes.len() < HEADER_BYTES as usize || &bytes[..8] != magic {
        return None;
    }
    let sequence = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let count = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    Some((sequence, count))
}

/// The records of a whole batch (header included), `None` when the magic
/// or the CRC is wrong or it is shorter than its count says.
pub fn records<'a>(bytes: &'a [u8], magic: &[u8; 8], record_bytes: u64) -> Option<&'a [u8]> {
    let (_, count) = header(bytes, magic)?;
    let end = usize::try_from(HEADER_BYTES.checked_add(count.checked_mul(record_bytes)?)?).ok()?;
    if bytes.len() < end {
        return None;
    }
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..24]);
    hasher.update(&bytes[HEADER_BYTES as usize..end]);
    if hasher.finalize() != u32::from_le_bytes(bytes[24..28].try_into().ok()?) {
        return None;
    }
    Some(&bytes[HEADER_BYTES as usize..end])
}

/// Of two superblock copies (A and B, written alternately), the valid one
/// with the higher sequence: a torn write of one leaves the other.
pub fn newer<T>(a: Option<T>, b: Option<T>, sequence: impl Fn(&T) -> u64) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if sequence(&a) >= sequence(&b) { a } else { b }),
        (one, None) | (None, one) => one,
    }
}

/// A superblock of `bytes` bytes: `magic` (8) | `version` (u32) | CRC-32 of
/// the fields (u32) | `fields` as u64s | zeroes. The framing both tiers'
/// superblocks share.
pub fn superblock_encode(bytes: u64, magic: &[u8; 8], version: u32, fields: &[u64]) -> Vec<u8> {
    let mut out = vec![0u8; bytes as usize];
    out[..8].copy_from_slice(magic);
    out[8..12].copy_from_slice(&version.to_le_bytes());
    for (index, value) in fields.iter().enumerate() {
        let at = 16 + index * 8;
        out[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }
    let crc = crc32fast::hash(&out[16..16 + fields.len() * 8]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The `count` fields of a superblock [`superblock_encode`] wrote, `None`
/// unless its magic, version and CRC are right (never written, torn, or
/// another kind's).
pub fn superblock_fields(
    bytes: &[u8],
    magic: &[u8; 8],
    version: u32,
    count: usize,
) -> Option<Vec<u64>> {
    let end = 16 + count * 8;
    if bytes.len() < end || &bytes[..8] != magic {
        return None;
    }
    if u32::from_le_bytes(bytes[8..12].try_into().ok()?) != version
        || u32::from_le_bytes(bytes[12..16].try_into().ok()?) != crc32fast::hash(&bytes[16..end])
    {
        return None;
    }
    Some(
        bytes[16..end]
            .chunks_exact(8)
            .map(|field| u64::from_le_bytes(field.try_into().unwrap_or([0; 8])))
            .collect(),
    )
}
