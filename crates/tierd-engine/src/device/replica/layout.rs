//! Where a replicated tier keeps what on its device, and the byte formats
//! of its metadata. Everything lives on the tier's own device, after the
//! extents it presents:
//!
//! ```text
//! [ extents: data_extents × extent_bytes ][ journal ring ][ checkpoint 0 ][ checkpoint 1 ][ superblock A | B ]
//! ```
//!
//! - **Superblocks** (4 KiB each, the device's last 8 KiB): `TIERDPS1`,
//!   version, CRC-32, the geometry (checked against the configuration at
//!   open), the sequence number, the current checkpoint slot and the
//!   journal's first sequence. Written alternately; the valid one with the
//!   higher sequence wins, so a torn superblock write leaves the other.
//! - **Checkpoints** (two slots): `TIERDPC1`, version, sequence, number of
//!   copies, CRC-32 of the payload; payload = the allocation bitmap (one
//!   bit per extent, u64 words) then each current copy as (primary, target)
//!   extent numbers. A new checkpoint goes to the slot not in use; only the
//!   superblock written after it makes it current, and the journal starts
//!   again at the ring's first byte.
//! - **Journal ring**: batches at 4 KiB-aligned positions from the ring's
//!   start, each `TIERDPJ1`, sequence, record count, CRC-32 of header and
//!   records, then 16-byte records. Replay starts at the ring's start with
//!   the superblock's journal sequence and stops at the first batch that is
//!   not the next sequence or whose CRC fails (a torn append, or a batch of
//!   an earlier checkpoint's journal).
//!
//! Every multi-byte integer is little-endian.

use crate::device::journal_batch;

pub const META_ALIGN_BYTES: u64 = journal_batch::ALIGN_BYTES;
const SUPERBLOCK_MAGIC: &[u8; 8] = b"TIERDPS1";
const CHECKPOINT_MAGIC: &[u8; 8] = b"TIERDPC1";
const BATCH_MAGIC: &[u8; 8] = b"TIERDPJ1";
const FORMAT_VERSION: u32 = 1;
pub const SUPERBLOCK_BYTES: u64 = 4096;
pub const CHECKPOINT_HEADER_BYTES: u64 = 40;
pub const BATCH_HEADER_BYTES: u64 = journal_batch::HEADER_BYTES;
pub const RECORD_BYTES: u64 = 16;

fn round_up(value: u64, to: u64) -> u64 {
    value.div_ceil(to) * to
}

/// The geometry of a replicated tier: fixed at format time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub device_bytes: u64,
    pub extent_bytes: u64,
    /// Extents presented to the volume (its size ÷ `extent_bytes`).
    pub data_extents: u64,
    pub journal_bytes: u64,
}

impl Geometry {
    /// Lays out a device of `device_bytes` with `extent_bytes` extents.
    pub fn plan(device_bytes: u64, extent_bytes: u64) -> Result<Geometry, String> {
        let extents = device_bytes / extent_bytes;
        // 1/256 of a record per extent, enough for many trims and writes
        // between checkpoints; 256 KiB – 64 MiB.
        let journal_bytes = round_up(
            (extents * RECORD_BYTES / 4).clamp(256 << 10, 64 << 20),
            META_ALIGN_BYTES,
        );
        let mut geometry = Geometry {
            device_bytes,
            extent_bytes,
            data_extents: extents,
            journal_bytes,
        };
        // The metadata takes whole extents off the end.
        loop {
            let meta = geometry.meta_bytes();
            let data = geometry.data_extents * extent_bytes;
            if data + meta <= device_bytes {
                break;
            }
            if geometry.data_extents == 0 {
                break;
            }
            let over = (data + meta - device_bytes).div_ceil(extent_bytes);
            geometry.data_extents = geometry.data_extents.saturating_sub(over.max(1));
        }
        if geometry.data_extents < 16 {
            return Err(format!(
                "the device of {device_bytes} bytes cannot hold a replicated tier: its metadata \
                 (journal, two checkpoints, superblocks) takes {} bytes and at least 16 extents of \
                 {extent_bytes} bytes must remain; make the tier larger",
                geometry.meta_bytes()
            ));
        }
        Ok(geometry)
    }

    /// Bytes presented to the volume.
    pub fn data_bytes(&self) -> u64 {
        self.data_extents * self.extent_bytes
    }

    fn bitmap_words(&self) -> u64 {
        self.data_extents.div_ceil(64)
    }

    /// A checkpoint slot holds the bitmap and a copy per extent (the most
    /// there can be).
    pub fn checkpoint_slot_bytes(&self) -> u64 {
        round_up(
            CHECKPOINT_HEADER_BYTES + self.bitmap_words() * 8 + self.data_extents * 16,
            META_ALIGN_BYTES,
        )
    }

    pub fn meta_bytes(&self) -> u64 {
        self.journal_bytes + 2 * self.checkpoint_slot_bytes() + 2 * SUPERBLOCK_BYTES
    }

    pub fn journal_offset(&self) -> u64 {
        self.data_bytes()
    }

    pub fn checkpoint_offset(&self, slot: u64) -> u64 {
        self.journal_offset() + self.journal_bytes + slot * self.checkpoint_slot_bytes()
    }
}

/// Where superblock copy 0 or 1 of a device of `device_bytes` is.
pub fn superblock_offset(device_bytes: u64, copy: u64) -> u64 {
    device_bytes - (2 - copy) * SUPERBLOCK_BYTES
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]))
}

// ---- superblock ------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub geometry: Geometry,
    pub sequence: u64,
    pub checkpoint_slot: u64,
    pub journal_sequence: u64,
}

impl Superblock {
    pub fn encode(&self) -> Vec<u8> {
        let fields = [
            self.geometry.device_bytes,
            self.geometry.extent_bytes,
            self.geometry.data_extents,
            self.geometry.journal_bytes,
            self.sequence,
            self.checkpoint_slot,
            self.journal_sequence,
        ];
        journal_batch::superblock_encode(
            SUPERBLOCK_BYTES,
            SUPERBLOCK_MAGIC,
            FORMAT_VERSION,
            &fields,
        )
    }

    pub fn has_magic(bytes: &[u8]) -> bool {
        bytes.len() >= 8 && &bytes[0..8] == SUPERBLOCK_MAGIC
    }

    /// `None` unless the magic, version and CRC are right and the fields
    /// are sane.
    pub fn decode(bytes: &[u8]) -> Option<Superblock> {
        let field = journal_batch::superblock_fields(bytes, SUPERBLOCK_MAGIC, FORMAT_VERSION, 7)?;
        let field = |index: usize| field[index];
        let geometry = Geometry {
            device_bytes: field(0),
            extent_bytes: field(1),
            data_extents: field(2),
            journal_bytes: field(3),
        };
        let superblock = Superblock {
            geometry,
            sequence: field(4),
            checkpoint_slot: field(5),
            journal_sequence: field(6),
        };
        let sane = geometry.extent_bytes.is_power_of_two()
            && geometry.extent_bytes >= 4096
            && superblock.checkpoint_slot < 2
            && geometry.journal_bytes.is_multiple_of(META_ALIGN_BYTES)
            && geometry
                .data_extents
                .checked_mul(geometry.extent_bytes)
                .and_then(|data| data.checked_add(geometry.meta_bytes()))
                .is_some_and(|total| total <= geometry.device_bytes);
        sane.then_some(superblock)
    }
}

// ---- checkpoints -----------------------------------------------------------

/// The durable state: allocation bitmap words and current copies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub bitmap: Vec<u64>,
    pub copies: Vec<(u64, u64)>,
}

pub fn encode_checkpoint(sequence: u64, snapshot: &Snapshot) -> Vec<u8> {
    let payload_bytes = snapshot.bitmap.len() * 8 + snapshot.copies.len() * 16;
    let total = round_up(
        CHECKPOINT_HEADER_BYTES + payload_bytes as u64,
        META_ALIGN_BYTES,
    );
    let mut out = vec![0u8; total as usize];
    let header = CHECKPOINT_HEADER_BYTES as usize;
    let mut at = header;
    for word in &snapshot.bitmap {
        out[at..at + 8].copy_from_slice(&word.to_le_bytes());
        at += 8;
    }
    for (primary, target) in &snapshot.copies {
        out[at..at + 8].copy_from_slice(&primary.to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&target.to_le_bytes());
        at += 16;
    }
    out[0..8].copy_from_slice(CHECKPOINT_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&sequence.to_le_bytes());
    out[24..32].copy_from_slice(&(snapshot.bitmap.len() as u64).to_le_bytes());
    out[32..40].copy_from_slice(&(snapshot.copies.len() as u64).to_le_bytes());
    let crc = crc32fast::hash(&out[16..header + payload_bytes]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The header's sizes, to know how much to read: (sequence, payload bytes).
pub fn checkpoint_header(bytes: &[u8], geometry: &Geometry) -> Result<(u64, u64), String> {
    if bytes.len() < CHECKPOINT_HEADER_BYTES as usize
        || &bytes[0..8] != CHECKPOINT_MAGIC
        || get_u32(bytes, 8) != FORMAT_VERSION
    {
        return Err("no checkpoint header".to_string());
    }
    let words = get_u64(bytes, 24);
    let copies = get_u64(bytes, 32);
    if words != geometry.bitmap_words() || copies > geometry.data_extents {
        return Err(format!(
            "checkpoint sizes out of range ({words} bitmap words, {copies} copies)"
        ));
    }
    Ok((get_u64(bytes, 16), words * 8 + copies * 16))
}

/// Decodes a whole checkpoint (header and payload read).
pub fn decode_checkpoint(bytes: &[u8], geometry: &Geometry) -> Result<(u64, Snapshot), String> {
    let (sequence, payload) = checkpoint_header(bytes, geometry)?;
    let header = CHECKPOINT_HEADER_BYTES as usize;
    let end = header + payload as usize;
    if bytes.len() < end {
        return Err("checkpoint shorter than its header says".to_string());
    }
    if get_u32(bytes, 12) != crc32fast::hash(&bytes[16..end]) {
        return Err("checkpoint CRC mismatch".to_string());
    }
    let words = get_u64(bytes, 24) as usize;
    let copies = get_u64(bytes, 32) as usize;
    let mut snapshot = Snapshot {
        bitmap: Vec::with_capacity(words),
        copies: Vec::with_capacity(copies),
    };
    let mut at = header;
    for _ in 0..words {
        snapshot.bitmap.push(get_u64(bytes, at));
        at += 8;
    }
    for _ in 0..copies {
        snapshot
            .copies
            .push((get_u64(bytes, at), get_u64(bytes, at + 8)));
        at += 16;
    }
    Ok((sequence, snapshot))
}

// ---- journal ---------------------------------------------------------------

/// One change to the durable state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// `count` extents from `first` hold user data.
    Allocate { first: u64, count: u64 },
    /// `count` extents from `first` are free (trimmed or zeroed whole).
    Free { first: u64, count: u64 },
    /// `target` holds a current copy of `primary`.
    Copy { primary: u64, target: u64 },
    /// The copy at `target` is no longer current (or never was).
    Drop { target: u64 },
}

const KIND_SHIFT: u32 = 56;
const VALUE_MASK: u64 = (1 << KIND_SHIFT) - 1;

impl Record {
    pub fn encode(self, out: &mut [u8]) {
        let (kind, a, b) = match self {
            Record::Allocate { first, count } => (1u64, first, count),
            Record::Free { first, count } => (2, first, count),
            Record::Copy { primary, target } => (3, primary, target),
            Record::Drop { target } => (4, target, 0),
        };
        out[0..8].copy_from_slice(&((kind << KIND_SHIFT) | (a & VALUE_MASK)).to_le_bytes());
        out[8..16].copy_from_slice(&b.to_le_bytes());
    }

    pub fn decode(bytes: &[u8]) -> Option<Record> {
        let head = get_u64(bytes, 0);
        let a = head & VALUE_MASK;
        let b = get_u64(bytes, 8);
        match head >> KIND_SHIFT {
            1 => Some(Record::Allocate { first: a, count: b }),
            2 => Some(Record::Free { first: a, count: b }),
            3 => Some(Record::Copy {
                primary: a,
                target: b,
            }),
            4 => Some(Record::Drop { target: a }),
            _ => None,
        }
    }
}

/// Bytes a batch of `records` takes in the ring.
pub fn batch_bytes(records: usize) -> u64 {
    journal_batch::batch_bytes(records, RECORD_BYTES)
}

pub fn encode_batch(sequence: u64, records: &[Record]) -> Vec<u8> {
    let mut encoded = vec![0u8; records.len() * RECORD_BYTES as usize];
    for (record, out) in records
        .iter()
        .zip(encoded.chunks_exact_mut(RECORD_BYTES as usize))
    {
        record.encode(out);
    }
    journal_batch::encode(BATCH_MAGIC, sequence, records.len(), RECORD_BYTES, &encoded)
}

/// A batch's record count from its first 32 bytes, if it is the batch
/// `sequence` (magic and sequence; the CRC is checked on the whole batch).
pub fn batch_header(bytes: &[u8], sequence: u64) -> Option<u64> {
    journal_batch::header(bytes, BATCH_MAGIC)
        .filter(|(found, _)| *found == sequence)
        .map(|(_, count)| count)
}

/// The records of a whole batch, `None` if its CRC or a record is bad.
pub fn decode_batch(bytes: &[u8]) -> Option<Vec<Record>> {
    journal_batch::records(bytes, BATCH_MAGIC, RECORD_BYTES)?
        .chunks_exact(RECORD_BYTES as usize)
        .map(Record::decode)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_leaves_room_for_its_metadata() {
        for device in [64u64 << 20, 1 << 30, (1 << 40) + 12_345] {
            let geometry = Geometry::plan(device, 64 << 10).unwrap();
            assert!(geometry.data_bytes() + geometry.meta_bytes() <= device);
            assert!(geometry.data_bytes() * 100 / device >= 94, "{geometry:?}");
        }
        assert!(Geometry::plan(1 << 20, 64 << 10).is_err());
    }

    #[test]
    fn superblocks_checkpoints_and_batches_round_trip_and_refuse_damage() {
        let geometry = Geometry::plan(64 << 20, 64 << 10).unwrap();
        let superblock = Superblock {
            geometry,
            sequence: 7,
            checkpoint_slot: 1,
            journal_sequence: 99,
        };
        let mut bytes = superblock.encode();
        assert_eq!(Superblock::decode(&bytes), Some(superblock));
        bytes[40] ^= 1;
        assert_eq!(Superblock::decode(&bytes), None);
        assert!(Superblock::has_magic(&bytes));

        let snapshot = Snapshot {
            bitmap: (0..geometry.data_extents.div_ceil(64))
                .map(|w| w * 3)
                .collect(),
            copies: vec![(1, 900), (5, 901)],
        };
        let mut bytes = encode_checkpoint(4, &snapshot);
        assert_eq!(decode_checkpoint(&bytes, &geometry), Ok((4, snapshot)));
        let last = CHECKPOINT_HEADER_BYTES as usize + 3;
        bytes[last] ^= 0x10;
        assert!(decode_checkpoint(&bytes, &geometry).is_err());

        let records = [
            Record::Allocate { first: 3, count: 9 },
            Record::Free { first: 1, count: 1 },
            Record::Copy {
                primary: 2,
                target: 700,
            },
            Record::Drop { target: 700 },
        ];
        let mut bytes = encode_batch(12, &records);
        assert_eq!(bytes.len() as u64, META_ALIGN_BYTES);
        assert_eq!(batch_header(&bytes, 12), Some(4));
        assert_eq!(batch_header(&bytes, 13), None);
        assert_eq!(decode_batch(&bytes), Some(records.to_vec()));
        bytes[40] ^= 1;
        assert_eq!(decode_batch(&bytes), None);
    }
}
