//! Where a reduced tier keeps what on its device, and the byte formats of
//! its metadata. Everything lives on the tier's own device (a copy of the
//! tier file is a complete, consistent reduced tier, and the crash-testing
//! disk tears metadata writes as it tears data):
//!
//! ```text
//! [ packs: pack_count × pack_bytes ][ checkpoint 0 ][ checkpoint 1 ][ journal ring ] … [ superblock A | B ]
//! ```
//!
//! - **Packs** hold block fragments (lz4 or raw), appended; a block map
//!   entry names pack, byte offset and length.
//! - **Superblocks** (4 KiB each, A and B, the device's last 8 KiB, where
//!   they are found whatever the configuration says): `TIERDRS1`, version, CRC, then the
//!   geometry (checked against the configuration at open), the sequence
//!   number, which checkpoint is current, and where its journal starts
//!   (byte position in the ring and the first batch's sequence). Written
//!   alternately; the valid one with the higher sequence wins, so a torn
//!   superblock write leaves the other.
//! - **Checkpoints** (two slots): `TIERDRC1`, version, map and index entry
//!   counts, CRC-32 of the payload; payload = the block map (u64 per logical
//!   block) then the fingerprint index (u128 fingerprint, u64 entry) in
//!   eviction order. A new checkpoint goes to the slot not in use; only the
//!   superblock written after it (and a flush) makes it current.
//! - **Journal ring**: batches written at 4 KiB-aligned positions, each
//!   `TIERDRJ1`, sequence, record count, CRC-32 of header and records, then
//!   32-byte records. Replay starts at the superblock's position and
//!   sequence and stops at the first batch that is not the next sequence
//!   or whose CRC fails (a torn append, or an older lap of the ring).
//!
//! Every multi-byte integer is little-endian.

use super::codec::Fingerprint;
use crate::device::journal_batch;

pub const META_ALIGN_BYTES: u64 = 4096;
const SUPERBLOCK_MAGIC: &[u8; 8] = b"TIERDRS1";
const CHECKPOINT_MAGIC: &[u8; 8] = b"TIERDRC1";
const BATCH_MAGIC: &[u8; 8] = b"TIERDRJ1";
const FORMAT_VERSION: u32 = 1;
pub const SUPERBLOCK_BYTES: u64 = 4096;
pub const CHECKPOINT_HEADER_BYTES: u64 = 32;
pub const BATCH_HEADER_BYTES: u64 = journal_batch::HEADER_BYTES;
pub const RECORD_BYTES: u64 = 32;

/// The geometry of a reduced tier: fixed at format time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub device_bytes: u64,
    pub block_bytes: u64,
    pub logical_blocks: u64,
    pub pack_bytes: u64,
    pub pack_count: u64,
    /// Fingerprint index entries a checkpoint has room for (fixed when the
    /// tier is formatted; memory may keep more or fewer).
    pub index_capacity: u64,
    pub journal_bytes: u64,
}

fn round_up(value: u64, to: u64) -> u64 {
    value.div_ceil(to) * to
}

impl Geometry {
    /// Lays out a device of `device_bytes`. `Err` says why it does not fit.
    pub fn plan(
        device_bytes: u64,
        block_bytes: u64,
        logical_bytes: u64,
        pack_bytes: u64,
        index_capacity: u64,
    ) -> Result<Geometry, String> {
        let logical_blocks = logical_bytes / block_bytes;
        let map_bytes = logical_blocks * 8;
        let journal_bytes = round_up(
            (logical_blocks * 4).clamp(256 << 10, 256 << 20),
            META_ALIGN_BYTES,
        );
        let mut geometry = Geometry {
            device_bytes,
            block_bytes,
            logical_blocks,
            pack_bytes,
            pack_count: 0,
            index_capacity,
            journal_bytes,
        };
        let meta = geometry.meta_bytes();
        if device_bytes < meta + pack_bytes * 4 {
            return Err(format!(
                "the device of {device_bytes} bytes cannot hold a reduced tier: its metadata \
                 (block map of {map_bytes} bytes twice, fingerprint index, journal) takes {meta} bytes \
                 and at least 4 packs of {pack_bytes} bytes must remain; make the tier larger or its \
                 logical size smaller"
            ));
        }
        geometry.pack_count = (device_bytes - meta) / pack_bytes;
        if geometry.pack_count > (1 << PACK_BITS) {
            return Err(format!(
                "the device holds {} packs of {pack_bytes} bytes, more than the {} a block map entry \
                 can address; use a larger pack",
                geometry.pack_count,
                1u64 << PACK_BITS
            ));
        }
        Ok(geometry)
    }

    pub fn checkpoint_slot_bytes(&self) -> u64 {
        round_up(
            CHECKPOINT_HEADER_BYTES + self.logical_blocks * 8 + self.index_capacity * 24,
            META_ALIGN_BYTES,
        )
    }

    pub fn meta_bytes(&self) -> u64 {
        2 * self.checkpoint_slot_bytes() + self.journal_bytes + 2 * SUPERBLOCK_BYTES
    }

    pub fn packs_bytes(&self) -> u64 {
        self.pack_count * self.pack_bytes
    }

    pub fn pack_offset(&self, pack: u32) -> u64 {
        u64::from(pack) * self.pack_bytes
    }

    pub fn checkpoint_offset(&self, slot: u64) -> u64 {
        self.packs_bytes() + slot * self.checkpoint_slot_bytes()
    }

    pub fn journal_offset(&self) -> u64 {
        self.packs_bytes() + 2 * self.checkpoint_slot_bytes()
    }
}

/// Where superblock copy 0 or 1 of a device of `device_bytes` is.
pub fn superblock_offset(device_bytes: u64, copy: u64) -> u64 {
    device_bytes - (2 - copy) * SUPERBLOCK_BYTES
}

impl Geometry {
    /// The configured geometry's differences from this (formatted) one,
    /// named as configuration keys; empty when they agree.
    pub fn differences(&self, configured: &Geometry) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |name: &str, formatted: u64, wanted: u64| {
            if formatted != wanted {
                out.push(format!(
                    "{name}: formatted {formatted}, configured {wanted}"
                ));
            }
        };
        check(
            "reduce.block (bytes)",
            self.block_bytes,
            configured.block_bytes,
        );
        check(
            "reduce.logical (bytes)",
            self.logical_blocks * self.block_bytes,
            configured.logical_blocks * configured.block_bytes,
        );
        check(
            "reduce.pack (bytes)",
            self.pack_bytes,
            configured.pack_bytes,
        );
        check(
            "the tier's size (bytes)",
            self.device_bytes,
            configured.device_bytes,
        );
        out
    }
}

// ---- block map entries ----------------------------------------------------

/// Never written or trimmed: reads zeroes, counts nowhere.
pub const UNMAPPED: u64 = 0;
/// Written with zeroes: reads zeroes, counted as zero-eliminated.
pub const ZERO: u64 = 1;
const PRESENT: u64 = 1 << 63;
const STAGED: u64 = 1 << 62;
const LEN_BITS: u32 = 17;
const OFFSET_BITS: u32 = 20;
const PACK_BITS: u32 = 25;

/// Largest pack a map entry can address.
pub const MAX_PACK_BYTES: u64 = 1 << OFFSET_BITS;
/// Largest block.
pub const MAX_BLOCK_BYTES: u64 = 1 << 16;

/// Where a block's fragment is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fragment {
    pub pack: u32,
    pub offset: u32,
    pub len: u32,
    /// Raw, not yet reduced (post-process stage).
    pub staged: bool,
}

impl Fragment {
    pub fn encode(self) -> u64 {
        PRESENT
            | if self.staged { STAGED } else { 0 }
            | (u64::from(self.pack) << (LEN_BITS + OFFSET_BITS))
            | (u64::from(self.offset) << LEN_BITS)
            | u64::from(self.len)
    }

    /// `None` for [`UNMAPPED`] and [`ZERO`].
    pub fn decode(entry: u64) -> Option<Fragment> {
        if entry & PRESENT == 0 {
            return None;
        }
        Some(Fragment {
            pack: ((entry >> (LEN_BITS + OFFSET_BITS)) & ((1 << PACK_BITS) - 1)) as u32,
            offset: ((entry >> LEN_BITS) & ((1 << OFFSET_BITS) - 1)) as u32,
            len: (entry & ((1 << LEN_BITS) - 1)) as u32,
            staged: entry & STAGED != 0,
        })
    }

    /// The same bytes, no longer staged (the key of fragment reference counts).
    pub fn settled(self) -> Fragment {
        Fragment {
            staged: false,
            ..self
        }
    }
}

/// Whether an entry read from disk is one this geometry can hold: a damaged
/// map must not make the tier read outside a pack.
pub fn entry_is_valid(entry: u64, geometry: &Geometry) -> bool {
    if entry == UNMAPPED || entry == ZERO {
        return true;
    }
    match Fragment::decode(entry) {
        None => false,
        Some(fragment) => {
            u64::from(fragment.pack) < geometry.pack_count
                && fragment.len > 0
                && u64::from(fragment.len) <= geometry.block_bytes
                && u64::from(fragment.offset) + u64::from(fragment.len) <= geometry.pack_bytes
                && (!fragment.staged || u64::from(fragment.len) == geometry.block_bytes)
        }
    }
}

// ---- superblock ------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub geometry: Geometry,
    pub sequence: u64,
    pub checkpoint_slot: u64,
    pub journal_position: u64,
    pub journal_sequence: u64,
}

impl Superblock {
    pub fn encode(&self) -> Vec<u8> {
        let g = &self.geometry;
        let fields = [
            g.device_bytes,
            g.block_bytes,
            g.logical_blocks,
            g.pack_bytes,
            g.pack_count,
            g.index_capacity,
            g.journal_bytes,
            self.sequence,
            self.checkpoint_slot,
            self.journal_position,
            self.journal_sequence,
        ];
        journal_batch::superblock_encode(
            SUPERBLOCK_BYTES,
            SUPERBLOCK_MAGIC,
            FORMAT_VERSION,
            &fields,
        )
    }

    /// `None` when the bytes are not a valid superblock (never written, torn).
    pub fn decode(bytes: &[u8]) -> Option<Superblock> {
        let field = journal_batch::superblock_fields(bytes, SUPERBLOCK_MAGIC, FORMAT_VERSION, 11)?;
        Some(Superblock {
            geometry: Geometry {
                device_bytes: field[0],
                block_bytes: field[1],
                logical_blocks: field[2],
                pack_bytes: field[3],
                pack_count: field[4],
                index_capacity: field[5],
                journal_bytes: field[6],
            },
            sequence: field[7],
            checkpoint_slot: field[8],
            journal_position: field[9],
            journal_sequence: field[10],
        })
    }

    /// True when this superblock starts with the reduced tier's magic (valid
    /// or not): a device that has one was formatted as a reduced tier.
    pub fn has_magic(bytes: &[u8]) -> bool {
        bytes.len() >= 8 && &bytes[..8] == SUPERBLOCK_MAGIC
    }
}

// ---- checkpoint ------------------------------------------------------------

pub fn encode_checkpoint(map: &[u64], index: &[(Fingerprint, u64)]) -> Vec<u8> {
    let payload_bytes = map.len() * 8 + index.len() * 24;
    let mut out = Vec::with_capacity(CHECKPOINT_HEADER_BYTES as usize + payload_bytes);
    out.extend_from_slice(CHECKPOINT_MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // CRC, filled below
    out.extend_from_slice(&(map.len() as u64).to_le_bytes());
    out.extend_from_slice(&(index.len() as u64).to_le_bytes());
    for entry in map {
        out.extend_from_slice(&entry.to_le_bytes());
    }
    for (fingerprint, entry) in index {
        out.extend_from_slice(&fingerprint.to_le_bytes());
        out.extend_from_slice(&entry.to_le_bytes());
    }
    let crc = crc32fast::hash(&out[16..]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    let padded = round_up(out.len() as u64, META_ALIGN_BYTES) as usize;
    out.resize(padded, 0);
    out
}

/// The map and index of a checkpoint, or what is wrong with it.
pub type DecodedCheckpoint = (Vec<u64>, Vec<(Fingerprint, u64)>);

pub fn checkpoint_payload_bytes(header: &[u8]) -> Result<u64, String> {
    if header.len() < CHECKPOINT_HEADER_BYTES as usize || &header[..8] != CHECKPOINT_MAGIC {
        return Err("the checkpoint has no valid header".to_string());
    }
    let map = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    let index = u64::from_le_bytes(header[24..32].try_into().expect("8 bytes"));
    map.checked_mul(8)
        .and_then(|bytes| {
            index
                .checked_mul(24)
                .and_then(|index| bytes.checked_add(index))
        })
        .ok_or_else(|| "the checkpoint's entry counts overflow".to_string())
}

pub fn decode_checkpoint(bytes: &[u8], geometry: &Geometry) -> Result<DecodedCheckpoint, String> {
    let payload = checkpoint_payload_bytes(bytes)?;
    let map_len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let index_len = u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes"));
    if map_len != geometry.logical_blocks || index_len > geometry.index_capacity {
        return Err(format!(
            "the checkpoint holds {map_len} map and {index_len} index entries; the geometry has {} \
             logical blocks and room for {} index entries",
            geometry.logical_blocks, geometry.index_capacity
        ));
    }
    let end = CHECKPOINT_HEADER_BYTES + payload;
    if (bytes.len() as u64) < end {
        return Err("the checkpoint is cut short".to_string());
    }
    let crc = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
    if crc32fast::hash(&bytes[16..end as usize]) != crc {
        return Err("the checkpoint's checksum does not match".to_string());
    }
    let mut at = CHECKPOINT_HEADER_BYTES as usize;
    let mut map = Vec::with_capacity(map_len as usize);
    for _ in 0..map_len {
        let entry = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if !entry_is_valid(entry, geometry) {
            return Err(format!(
                "block map entry {} ({entry:#x}) points outside the packs",
                map.len()
            ));
        }
        map.push(entry);
        at += 8;
    }
    let mut index = Vec::with_capacity(index_len as usize);
    for _ in 0..index_len {
        let fingerprint = u128::from_le_bytes(bytes[at..at + 16].try_into().expect("16 bytes"));
        let entry = u64::from_le_bytes(bytes[at + 16..at + 24].try_into().expect("8 bytes"));
        // Index entries are hints (confirmed byte by byte before use): a bad
        // one is dropped, not an error.
        if entry_is_valid(entry, geometry) && Fragment::decode(entry).is_some() {
            index.push((fingerprint, entry));
        }
        at += 24;
    }
    Ok((map, index))
}

// ---- journal ---------------------------------------------------------------

/// One journal record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Logical block `lbn` now maps to `entry`.
    Map { lbn: u64, entry: u64 },
    /// A fragment was stored with this fingerprint (an index hint).
    Index {
        fingerprint: Fingerprint,
        entry: u64,
    },
}

const RECORD_MAP: u64 = 1;
const RECORD_INDEX: u64 = 2;

impl Record {
    fn encode_into(&self, out: &mut Vec<u8>) {
        let (kind, a, b, c) = match *self {
            Record::Map { lbn, entry } => (RECORD_MAP, lbn, entry, 0),
            Record::Index { fingerprint, entry } => (
                RECORD_INDEX,
                fingerprint as u64,
                (fingerprint >> 64) as u64,
                entry,
            ),
        };
        for word in [kind, a, b, c] {
            out.extend_from_slice(&word.to_le_bytes());
        }
    }

    fn decode(bytes: &[u8]) -> Option<Record> {
        let word = |index: usize| {
            u64::from_le_bytes(bytes[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
        };
        match word(0) {
            RECORD_MAP => Some(Record::Map {
                lbn: word(1),
                entry: word(2),
            }),
            RECORD_INDEX => Some(Record::Index {
                fingerprint: u128::from(word(1)) | (u128::from(word(2)) << 64),
                entry: word(3),
            }),
            _ => None,
        }
    }
}

/// Bytes a batch of `records` takes in the ring (4 KiB-aligned).
pub fn batch_bytes(records: usize) -> u64 {
    journal_batch::batch_bytes(records, RECORD_BYTES)
}

pub fn encode_batch(sequence: u64, records: &[Record]) -> Vec<u8> {
    let mut encoded = Vec::with_capacity(records.len() * RECORD_BYTES as usize);
    for record in records {
        record.encode_into(&mut encoded);
    }
    journal_batch::encode(BATCH_MAGIC, sequence, records.len(), RECORD_BYTES, &encoded)
}

/// A batch header's sequence and record count, if it is one.
pub fn batch_header(bytes: &[u8]) -> Option<(u64, u64)> {
    journal_batch::header(bytes, BATCH_MAGIC)
}

/// Decodes a whole batch (header included); `None` when its CRC fails or
/// a record is unknown.
pub fn decode_batch(bytes: &[u8]) -> Option<Vec<Record>> {
    journal_batch::records(bytes, BATCH_MAGIC, RECORD_BYTES)?
        .chunks_exact(RECORD_BYTES as usize)
        .map(Record::decode)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry::plan(64 << 20, 4096, 64 << 20, 128 << 10, 4096).unwrap()
    }

    #[test]
    fn entries_round_trip_and_bad_ones_are_refused() {
        let g = geometry();
        let fragment = Fragment {
            pack: (g.pack_count - 1) as u32,
            offset: 12_345,
            len: 2_100,
            staged: false,
        };
        assert_eq!(Fragment::decode(fragment.encode()), Some(fragment));
        assert!(entry_is_valid(fragment.encode(), &g));
        let staged = Fragment {
            len: 4096,
            staged: true,
            ..fragment
        };
        assert!(!Fragment::decode(staged.encode()).unwrap().settled().staged);
        assert!(!entry_is_valid(
            Fragment {
                pack: g.pack_count as u32,
                ..fragment
            }
            .encode(),
            &g
        ));
        assert!(!entry_is_valid(2, &g), "neither present nor zero");
        assert!(entry_is_valid(ZERO, &g) && entry_is_valid(UNMAPPED, &g));
    }

    #[test]
    fn superblock_checkpoint_and_batches_round_trip_and_detect_damage() {
        let g = geometry();
        let superblock = Superblock {
            geometry: g,
            sequence: 7,
            checkpoint_slot: 1,
            journal_position: 8192,
            journal_sequence: 42,
        };
        let mut bytes = superblock.encode();
        assert_eq!(Superblock::decode(&bytes), Some(superblock));
        bytes[40] ^= 1;
        assert_eq!(Superblock::decode(&bytes), None);
        assert!(Superblock::has_magic(&bytes));

        let mut map = vec![UNMAPPED; g.logical_blocks as usize];
        map[3] = ZERO;
        map[9] = Fragment {
            pack: 2,
            offset: 0,
            len: 4096,
            staged: true,
        }
        .encode();
        let index = vec![(0xdead_beef_u128 << 64 | 5, map[9])];
        let mut bytes = encode_checkpoint(&map, &index);
        assert_eq!(bytes.len() as u64 % META_ALIGN_BYTES, 0);
        assert_eq!(
            decode_checkpoint(&bytes, &g).unwrap(),
            (map.clone(), index.clone())
        );
        bytes[100] ^= 1;
        assert!(decode_checkpoint(&bytes, &g)
            .unwrap_err()
            .contains("checksum"));

        let records = vec![
            Record::Map {
                lbn: 5,
                entry: ZERO,
            },
            Record::Index {
                fingerprint: u128::MAX - 3,
                entry: map[9],
            },
        ];
        let mut batch = encode_batch(9, &records);
        assert_eq!(batch.len() as u64, batch_bytes(2));
        assert_eq!(batch_header(&batch), Some((9, 2)));
        assert_eq!(decode_batch(&batch), Some(records));
        batch[40] ^= 1;
        assert_eq!(decode_batch(&batch), None);
    }

    #[test]
    fn too_small_a_device_is_refused_with_the_reason() {
        let error = Geometry::plan(1 << 20, 4096, 1 << 30, 128 << 10, 1024).unwrap_err();
        assert!(error.contains("cannot hold a reduced tier"), "{error}");
    }
}
