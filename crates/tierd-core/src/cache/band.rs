//! Whole-band destage for a drive-managed SMR home (`docs/engine/smr.md`).
//!
//! A write to an SMR disk that is not a band-fill stream goes to the
//! drive's media cache and dirties its band, which the drive later cleans
//! (~0.5 s, uninterruptible, also under load). So with an SMR home the
//! cache never writes a block back on its own: it rewrites whole bands,
//! from the band's first byte to its end, in order — home's current data
//! with the dirty blocks laid over it — which the drive takes as a
//! band-fill stream that replaces the band without touching the media
//! cache. This file holds the geometry and one rewrite's plan and
//! progress; `BlockCache::next_destage_io` / `destage_io_done` drive it.

use super::{BlockId, SlotId};

/// Default size of one destage IO at home: a user request that arrives
/// waits behind at most `chunks_in_flight` of these (~7 ms each at
/// 150 MB/s), not behind a whole band.
pub const DEFAULT_DESTAGE_CHUNK_BYTES: u64 = 1 << 20;
/// Default destage IOs at home at once.
pub const DEFAULT_DESTAGE_CHUNKS_IN_FLIGHT: u32 = 2;
/// An SMR home counts as idle for a background band rewrite once no user
/// IO has been outstanding there for this long (the Archive 8 TB's own
/// idle delay before it cleans, `idle_clean_delay_ms`). Starting a band
/// rewrite in every gap between user requests kept the disk busy (79 % on
/// the real hm_0 cut, 1,199 rewrites in 800 s) and broke the users'
/// sequential runs: 24 % of reads took over 100 ms; docs/engine/smr.md.
/// Both worlds use it: the simulator's destage and the engine's
/// (`smr_idle` on a cache volume).
pub const DEFAULT_DESTAGE_IDLE_NS: u64 = 1_000_000_000;
/// Slot reads of one rewrite in flight at once (the fast tier's share).
const SLOT_READS_IN_FLIGHT: u32 = 8;

/// An SMR home's band geometry and the destage's pacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SmrStaging {
    /// Bytes per band (the drive's; a multiple of the cache block).
    pub band_bytes: u64,
    /// Where the first whole band starts (a multiple of the cache block);
    /// the bytes before it form a short band of their own.
    pub first_band_offset_bytes: u64,
    /// Bytes per destage IO at home (a multiple of the cache block).
    pub chunk_bytes: u64,
    /// Destage IOs at home at once.
    pub chunks_in_flight: u32,
}

impl SmrStaging {
    /// Bands of `band_bytes` from `first_band_offset_bytes`, default pacing.
    pub fn new(band_bytes: u64, first_band_offset_bytes: u64) -> SmrStaging {
        SmrStaging {
            band_bytes,
            first_band_offset_bytes,
            chunk_bytes: DEFAULT_DESTAGE_CHUNK_BYTES,
            chunks_in_flight: DEFAULT_DESTAGE_CHUNKS_IN_FLIGHT,
        }
    }

    /// Checks the geometry against the cache block; the error names the
    /// setting and what to do.
    pub fn validate(&self, block_bytes: u64) -> Result<(), String> {
        if self.band_bytes == 0 || !self.band_bytes.is_multiple_of(block_bytes) {
            return Err(format!(
                "SMR band of {} bytes: must be a positive multiple of the {block_bytes}-byte cache block (use a smaller cache block)",
                self.band_bytes
            ));
        }
        if !self.first_band_offset_bytes.is_multiple_of(block_bytes) {
            return Err(format!(
                "SMR first band at byte {}: must be a multiple of the {block_bytes}-byte cache block (use a smaller cache block)",
                self.first_band_offset_bytes
            ));
        }
        if self.chunk_bytes == 0 || !self.chunk_bytes.is_multiple_of(block_bytes) {
            return Err(format!(
                "SMR destage chunk of {} bytes: must be a positive multiple of the {block_bytes}-byte cache block",
                self.chunk_bytes
            ));
        }
        if self.chunks_in_flight == 0 {
            return Err("SMR destage chunks in flight: at least 1".to_string());
        }
        Ok(())
    }

    /// Bytes before the first band boundary at or after 0 (the phase).
    fn shift(&self) -> u64 {
        let phase = self.first_band_offset_bytes % self.band_bytes;
        (self.band_bytes - phase) % self.band_bytes
    }

    /// The band holding volume byte `offset_bytes`.
    pub fn band_of(&self, offset_bytes: u64) -> u64 {
        (offset_bytes + self.shift()) / self.band_bytes
    }

    /// Band `band`'s bytes inside a `volume_bytes` volume: start and length
    /// (the first and last bands may be short).
    pub fn band_range(&self, band: u64, volume_bytes: u64) -> (u64, u64) {
        let shift = self.shift();
        let start = (band * self.band_bytes).saturating_sub(shift);
        let end = ((band + 1) * self.band_bytes - shift).min(volume_bytes);
        (start, end.saturating_sub(start))
    }
}

/// One IO of a band rewrite. Report it with
/// [`super::BlockCache::destage_io_done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestageIo {
    pub kind: DestageIoKind,
    /// Home: volume bytes. Slot: bytes on the fast tier.
    pub offset_bytes: u64,
    pub length_bytes: u64,
    /// Which rewrite it belongs to (a stale report is ignored).
    rewrite: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestageIoKind {
    /// Read home's current data of a range no dirty block covers.
    ReadHome,
    /// Read a dirty block from its slot.
    ReadSlot { block: BlockId, slot: SlotId },
    /// Write the band's next piece at home (in the order handed out).
    WriteHome,
}

/// A band whose rewrite ended: requests blocked on it
/// (`BlockIo::Blocked`) may be planned again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandDone {
    pub band: u64,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    /// Every IO succeeded and the band's blocks that did not change meanwhile are clean.
    pub ok: bool,
}

/// A dirty block taken by a rewrite.
#[derive(Clone, Copy, Debug)]
pub(super) struct Taken {
    pub(super) block: BlockId,
    pub(super) slot: SlotId,
    pub(super) generation: u32,
    pub(super) writes: u32,
}

/// One band being rewritten: the plan and what is done.
#[derive(Debug)]
pub(super) struct Rewrite {
    pub(super) id: u64,
    pub(super) band: u64,
    pub(super) offset_bytes: u64,
    pub(super) length_bytes: u64,
    /// Started for idle home only: yields to waiting user IO.
    pub(super) background: bool,
    pub(super) blocks: Vec<Taken>,
    /// Home ranges to read (chunked), next one first.
    home_reads: Vec<(u64, u64)>,
    next_home_read: usize,
    next_slot_read: usize,
    /// Next byte of the band to write.
    write_cursor: u64,
    home_in_flight: u32,
    slot_in_flight: u32,
    reads_left: usize,
    pub(super) failed: bool,
}

impl Rewrite {
    /// The plan for band `(offset, length)` with the dirty `blocks` (in
    /// ascending order) of `block_bytes` each.
    pub(super) fn new(
        id: u64,
        band: u64,
        (offset_bytes, length_bytes): (u64, u64),
        blocks: Vec<Taken>,
        block_bytes: u64,
        chunk_bytes: u64,
        background: bool,
    ) -> Rewrite {
        let end = offset_bytes + length_bytes;
        let mut home_reads = Vec::new();
        let mut gap_start = offset_bytes;
        let push_gap = |from: u64, to: u64, reads: &mut Vec<(u64, u64)>| {
            let mut at = from;
            while at < to {
                let length = chunk_bytes.min(to - at);
                reads.push((at, length));
                at += length;
            }
        };
        for taken in &blocks {
            let start = taken.block * block_bytes;
            push_gap(gap_start, start.max(gap_start), &mut home_reads);
            gap_start = (start + block_bytes).min(end);
        }
        push_gap(gap_start, end, &mut home_reads);
        let reads_left = home_reads.len() + blocks.len();
        Rewrite {
            id,
            band,
            offset_bytes,
            length_bytes,
            background,
            blocks,
            home_reads,
            next_home_read: 0,
            next_slot_read: 0,
            write_cursor: offset_bytes,
            home_in_flight: 0,
            slot_in_flight: 0,
            reads_left,
            failed: false,
        }
    }

    /// The next IO to start, if the plan and the pacing allow one now.
    /// `yield_home`: user IO waits at home and this rewrite yields to it.
    pub(super) fn next_io(
        &mut self,
        yield_home: bool,
        staging: &SmrStaging,
        block_bytes: u64,
    ) -> Option<DestageIo> {
        if self.failed {
            return None;
        }
        if self.next_slot_read < self.blocks.len() && self.slot_in_flight < SLOT_READS_IN_FLIGHT {
            let taken = self.blocks[self.next_slot_read];
            self.next_slot_read += 1;
            self.slot_in_flight += 1;
            return Some(DestageIo {
                kind: DestageIoKind::ReadSlot {
                    block: taken.block,
                    slot: taken.slot,
                },
                offset_bytes: u64::from(taken.slot) * block_bytes,
                length_bytes: block_bytes
                    .min(self.offset_bytes + self.length_bytes - taken.block * block_bytes),
                rewrite: self.id,
            });
        }
        if yield_home || self.home_in_flight >= staging.chunks_in_flight {
            return None;
        }
        if self.next_home_read < self.home_reads.len() {
            let (offset_bytes, length_bytes) = self.home_reads[self.next_home_read];
            self.next_home_read += 1;
            self.home_in_flight += 1;
            return Some(DestageIo {
                kind: DestageIoKind::ReadHome,
                offset_bytes,
                length_bytes,
                rewrite: self.id,
            });
        }
        // The band is written once all of it is in hand, from its first
        // byte on, in order.
        let end = self.offset_bytes + self.length_bytes;
        if self.reads_left > 0 || self.write_cursor >= end {
            return None;
        }
        let offset_bytes = self.write_cursor;
        let length_bytes = staging.chunk_bytes.min(end - offset_bytes);
        self.write_cursor += length_bytes;
        self.home_in_flight += 1;
        Some(DestageIo {
            kind: DestageIoKind::WriteHome,
            offset_bytes,
            length_bytes,
            rewrite: self.id,
        })
    }

    /// Whether `io` is one of this rewrite's.
    pub(super) fn owns(&self, io: &DestageIo) -> bool {
        io.rewrite == self.id
    }

    /// `io` finished; `ok = false`: it failed (nothing more is started).
    pub(super) fn io_done(&mut self, io: &DestageIo, ok: bool) {
        match io.kind {
            DestageIoKind::ReadSlot { .. } => {
                self.slot_in_flight -= 1;
                self.reads_left -= 1;
            }
            DestageIoKind::ReadHome => {
                self.home_in_flight -= 1;
                self.reads_left -= 1;
            }
            DestageIoKind::WriteHome => self.home_in_flight -= 1,
        }
        if !ok {
            self.failed = true;
        }
    }

    /// Nothing in flight and nothing more to do.
    pub(super) fn finished(&self) -> bool {
        let idle = self.home_in_flight == 0 && self.slot_in_flight == 0;
        idle && (self.failed || self.write_cursor >= self.offset_bytes + self.length_bytes)
    }

    /// Whether `block` lies in this band.
    pub(super) fn contains_block(&self, block: BlockId, block_bytes: u64) -> bool {
        let start = block * block_bytes;
        start >= self.offset_bytes && start < self.offset_bytes + self.length_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_from_byte_zero_and_from_a_phase() {
        let staging = SmrStaging::new(30 << 20, 0);
        assert_eq!(staging.band_of(0), 0);
        assert_eq!(staging.band_of((30 << 20) - 1), 0);
        assert_eq!(staging.band_of(30 << 20), 1);
        assert_eq!(staging.band_range(1, 1 << 40), (30 << 20, 30 << 20));
        assert_eq!(staging.band_range(2, 70 << 20), (60 << 20, 10 << 20));
        let shifted = SmrStaging::new(30 << 20, 4 << 20);
        assert_eq!(shifted.band_of(0), 0);
        assert_eq!(shifted.band_range(0, 1 << 40), (0, 4 << 20));
        assert_eq!(shifted.band_of(4 << 20), 1);
        assert_eq!(shifted.band_range(1, 1 << 40), (4 << 20, 30 << 20));
        assert!(SmrStaging::new(30 << 20, 0).validate(64 << 10).is_ok());
        let message = SmrStaging::new(30 << 20, 4096)
            .validate(64 << 10)
            .unwrap_err();
        assert!(message.contains("first band"), "{message}");
    }

    #[test]
    fn a_rewrite_reads_the_gaps_and_the_slots_then_writes_the_band_in_order() {
        let staging = SmrStaging {
            chunk_bytes: 128 << 10,
            chunks_in_flight: 1,
            ..SmrStaging::new(512 << 10, 0)
        };
        let block = 64 << 10;
        // Band 1 = blocks 8..16; blocks 9 and 10 are dirty.
        let taken = |block: BlockId, slot: SlotId| Taken {
            block,
            slot,
            generation: 0,
            writes: 0,
        };
        let mut rewrite = Rewrite::new(
            7,
            1,
            (512 << 10, 512 << 10),
            vec![taken(9, 3), taken(10, 4)],
            block,
            staging.chunk_bytes,
            false,
        );
        let mut order = Vec::new();
        let mut in_flight = Vec::new();
        loop {
            while let Some(io) = rewrite.next_io(false, &staging, block) {
                in_flight.push(io);
            }
            let Some(io) = (!in_flight.is_empty()).then(|| in_flight.remove(0)) else {
                break;
            };
            order.push((io.kind, io.offset_bytes, io.length_bytes));
            rewrite.io_done(&io, true);
        }
        assert!(rewrite.finished());
        let kib = |value: u64| value << 10;
        assert_eq!(
            order,
            vec![
                (
                    DestageIoKind::ReadSlot { block: 9, slot: 3 },
                    kib(192),
                    kib(64)
                ),
                (
                    DestageIoKind::ReadSlot { block: 10, slot: 4 },
                    kib(256),
                    kib(64)
                ),
                (DestageIoKind::ReadHome, kib(512), kib(64)),
                (DestageIoKind::ReadHome, kib(704), kib(128)),
                (DestageIoKind::ReadHome, kib(832), kib(128)),
                (DestageIoKind::ReadHome, kib(960), kib(64)),
                (DestageIoKind::WriteHome, kib(512), kib(128)),
                (DestageIoKind::WriteHome, kib(640), kib(128)),
                (DestageIoKind::WriteHome, kib(768), kib(128)),
                (DestageIoKind::WriteHome, kib(896), kib(128)),
            ]
        );
    }

    #[test]
    fn a_background_rewrite_starts_nothing_at_home_while_users_wait() {
        let staging = SmrStaging::new(512 << 10, 0);
        let mut rewrite = Rewrite::new(1, 0, (0, 512 << 10), Vec::new(), 64 << 10, 1 << 20, true);
        assert_eq!(rewrite.next_io(true, &staging, 64 << 10), None);
        let io = rewrite.next_io(false, &staging, 64 << 10).unwrap();
        assert_eq!(io.kind, DestageIoKind::ReadHome);
        rewrite.io_done(&io, true);
        let write = rewrite.next_io(false, &staging, 64 << 10).unwrap();
        assert_eq!(
            (write.kind, write.offset_bytes),
            (DestageIoKind::WriteHome, 0)
        );
        rewrite.io_done(&write, false);
        assert!(rewrite.finished() && rewrite.failed);
        assert_eq!(rewrite.next_io(false, &staging, 64 << 10), None);
    }
}
